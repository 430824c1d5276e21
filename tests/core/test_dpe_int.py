"""The exact integer path of noise-free products (csrc/cpu/dpe_int*.c): bit-identical to the float path and to
the reference transcription (tests/reference/dpe_ref.py) on every integer kernel this CPU has, taken exactly when
the product is noise-free with cells at levels (ideal levels, or stuck cells the float path reads as levels), and
never dispatched to a VNNI kernel without its CPUID bits."""
import os
import re
import shutil
import subprocess

import numpy as np
import pytest

import pyfastpim
from pyfastpim import _core
from reference.dpe_ref import mvm_exact
from helpers import NOISE_OFF, HGS, LGS, make_case, short_instance

SANITIZED = os.environ.get("PYFASTPIM_SANITIZED") == "1"
TIERS = ("generic", "avx2", "avxvnni", "avx512", "avx512vnni")
DETECTED_TIER = _core.cpu_tier()[1]
# the integer kernel each tier limit selects on this CPU: VNNI kernels only where CPUID has the bits
CPU_FLAGS = set()
if os.path.exists("/proc/cpuinfo"):
    with open("/proc/cpuinfo") as fh:
        for line in fh:
            if line.startswith("flags"):
                CPU_FLAGS = set(line.split(":", 1)[1].split())
                break


def int_kernels():
    """{tier limit: integer kernel} for every limit up to the detected tier (the limit restored afterwards)."""
    out = {}
    try:
        for tier in TIERS[:TIERS.index(DETECTED_TIER) + 1]:
            pyfastpim.set_isa_limit(tier)
            out[tier] = _core.dpe_int_path()["kernel"]
    finally:
        pyfastpim.set_isa_limit("avx512vnni")
    return out


# one limit per distinct integer kernel of this CPU
KERNEL_LIMITS = {}
for _tier, _kernel in int_kernels().items():
    KERNEL_LIMITS.setdefault(_kernel, _tier)


class int_path:
    """Within the block the integer path is on (True) or off (False); restores the previous state."""

    def __init__(self, on):
        self.on = on

    def __enter__(self):
        self.old = _core.dpe_int_path()["enabled"]
        _core.dpe_int_path(self.on)
        return self

    def __exit__(self, *exc):
        _core.dpe_int_path(self.old)
        return False


def calls():
    return _core.dpe_int_path()["calls"]


def run(xs, xsc, xg, xw, wl, wsc, wg, ww, n, rdac, g_level, radc, sigma=None, vnoise=0.0, cond=None):
    return np.asarray(_core.dpe_mvm(xs, xsc, xg, xw, wl, cond, wsc, wg, ww, n, rdac, g_level, radc, HGS, LGS, sigma,
                                    vnoise, 1, 0))


def int_and_float(args, limit, product=run):
    """(integer-path output, float-path output) of product(*args) (an MVM by default) under the tier limit;
    asserts which path each took."""
    pyfastpim.set_isa_limit(limit)
    try:
        with int_path(True):
            c0 = calls()
            got_int = product(*args)
            assert calls() == c0 + 1, "the noise-free product did not take the integer path"
        with int_path(False):
            got_float = product(*args)
            assert calls() == c0 + 1, "the integer path was taken although switched off"
    finally:
        pyfastpim.set_isa_limit("avx512vnni")
    return got_int, got_float


# (N, R, K, P, n, x widths, w widths, x granule, w granule, g_level, rdac, radc)
# Operand bounds pick the AVX2 kernel's variant: 16-bit accumulation when nkq * 2 * max(k) * max|B| <= 32767,
# 32-bit (vpmaddubsw + vpmaddwd) when only 2 * max(k) * max|B| <= 32767, else the widened portable kernel;
# g_level > 128 stores levels as L - 128 with row-sum correction.
CASES = [
    (2, 13, 70, 37, 8, (1, 1, 2), (1, 1, 2), (1, 8), (8, 8), 4, 4, 4096),          # edge tiles, K % n != 0
    (1, 1, 1, 1, 1, (1, 1), (1, 1), (1, 1), (1, 1), 2, 2, 2),                       # smallest everything
    (1, 7, 100, 33, 32, (1, 3, 4), (1, 7), (1, 32), (32, 32), 256, 256, 4096),     # maxima: rdac 256, g_level 256
    (3, 5, 9, 17, 4, (1, 8), (1, 2), (1, 4), (4, 4), 128, 200, 1000),              # widened AVX2, odd radc (table)
    (1, 6, 600, 20, 512, (1, 2), (1, 3), (1, 512), (512, 8), 16, 16, 2 ** 16),    # 32-bit AVX2 accumulation
    (2, 9, 64, 35, 8, (1, 1, 2), (1, 1, 2), (1, 8), (8, 8), 4, 4, 7),              # ADC ties, exact-code table
    (1, 3, 130, 48, 64, (1, 1, 2, 2), (1, 1, 2, 2), (1, 64), (64, 16), 4, 4, 2 ** 12),  # K % 4 != 0 per block
    (2, 11, 45, 19, 16, (1, 4), (1, 7), (2, 16), (32, 5), 129, 8, 2 ** 8),         # g_level just over 128
    (1, 4, 33, 16, 33, (1, 1), (1, 8), (1, 33), (33, 16), 256, 16, 2 ** 10),       # n not a multiple of 4
]


@pytest.mark.parametrize("kernel", sorted(KERNEL_LIMITS))
@pytest.mark.parametrize("case", CASES, ids=range(len(CASES)))
def test_integer_path_is_bit_identical_to_float_path_and_reference(kernel, case):
    N, R, K, P, n, xw, ww, xg, wg, g_level, rdac, radc = case
    rng = np.random.default_rng(len(kernel) * 100 + R)
    xs, xsc, wl, wsc = make_case(rng, N, R, K, P, n, xw, ww, xg, wg, g_level)
    radc = [radc] * len(ww)
    args = (xs, xsc, xg, xw, wl, wsc, wg, ww, n, rdac, g_level, radc)
    ref = mvm_exact(xs, xsc, xg, xw, wl, wsc, wg, ww, n, rdac, g_level, radc)
    got_int, got_float = int_and_float(args, KERNEL_LIMITS[kernel])
    np.testing.assert_array_equal(got_int, ref)
    np.testing.assert_array_equal(got_float, ref)
    assert R * P == 1 or np.count_nonzero(ref) > 0  # a meaningful comparison


@pytest.mark.parametrize("kernel", sorted(KERNEL_LIMITS))
@pytest.mark.parametrize("batch", [1, 64, 512])
def test_batches_are_bit_identical(kernel, batch):
    # rows of a micro-panel straddle batch items (R = 3 is no multiple of 4 or 8)
    R, K, P = 3, 75, 40
    if SANITIZED and batch == 512:
        batch = 96
    rng = np.random.default_rng(batch)
    xs, xsc, wl, wsc = make_case(rng, batch, R, K, P, 32, (1, 1, 2, 2), (1, 1, 2, 2), (1, 32), (32, 32), 4)
    args = (xs, xsc, (1, 32), (1, 1, 2, 2), wl, wsc, (32, 32), (1, 1, 2, 2), 32, 4, 4, [4096] * 4)
    got_int, got_float = int_and_float(args, KERNEL_LIMITS[kernel])
    np.testing.assert_array_equal(got_int, got_float)
    sub = slice(0, min(batch, 8))  # the reference is slow: check the first items and the last one
    ref = mvm_exact(xs[:, sub], xsc[sub], (1, 32), (1, 1, 2, 2), wl, wsc, (32, 32), (1, 1, 2, 2), 32, 4, 4, [4096] * 4)
    np.testing.assert_array_equal(got_int[sub], ref)
    last = mvm_exact(xs[:, -1:], xsc[-1:], (1, 32), (1, 1, 2, 2), wl, wsc, (32, 32), (1, 1, 2, 2), 32, 4, 4,
                     [4096] * 4)
    np.testing.assert_array_equal(got_int[-1:], last)


def test_random_shapes_on_every_kernel():
    rng = np.random.default_rng(2024)
    for _ in range(4 if SANITIZED else 12):
        n = int(rng.choice([1, 4, 7, 16, 32, 64]))
        g_level = int(rng.choice([2, 4, 16, 128, 256]))
        rdac = int(rng.choice([2, 4, 16, 256]))
        # widths within the levels (m <= g_level - 1) and B <= 16 bits
        ww = (1,) + tuple(int(v) for v in rng.integers(1, min(7, int(np.log2(g_level))) + 1, int(rng.integers(0, 3))))
        xw = (1,) + tuple(int(v) for v in rng.integers(1, 8, int(rng.integers(0, 3))))
        N, R, K, P = (int(v) for v in (rng.integers(1, 4), rng.integers(1, 19), rng.integers(1, 150),
                                      rng.integers(1, 50)))
        xg, wg = (int(rng.integers(1, 4)), n * int(rng.integers(1, 3))), (n * int(rng.integers(1, 3)),
                                                                         int(rng.integers(1, 40)))
        radc = [int(rng.choice([2 ** 4, 2 ** 8, 2 ** 12, 1000, 3]))] * len(ww)
        xs, xsc, wl, wsc = make_case(rng, N, R, K, P, n, xw, ww, xg, wg, g_level)
        args = (xs, xsc, xg, xw, wl, wsc, wg, ww, n, rdac, g_level, radc)
        ref = mvm_exact(*args)
        for kernel, limit in KERNEL_LIMITS.items():
            got_int, got_float = int_and_float(args, limit)
            np.testing.assert_array_equal(got_int, ref, err_msg="kernel %s, %r" % (kernel, args[7:]))
            np.testing.assert_array_equal(got_float, ref)


# each integer kernel's tile height; its short instances (csrc/core/dpe.h) compute the first 1, 2 or 4 rows of a
# panel, those below the height (the widened AVX2 kernel has none: none of these cases selects it)
TILE_ROWS = {"generic": 8, "avx2": 4, "avxvnni": 4, "avx512vnni": 8}


@pytest.mark.parametrize("kernel", sorted(KERNEL_LIMITS))
@pytest.mark.parametrize("rows", [1, 2, 3, 5, 10, 11, 12, 15])  # last panels of 1 to 4 valid rows, and 5 or 7
@pytest.mark.parametrize("case", [
    # (n, x widths, w widths, g_level, rdac, radc)
    (32, (1, 1, 2, 2), (1, 1, 2, 2), 4, 4, 2 ** 12),  # the engine case's slices: 16-bit AVX2 sums
    (512, (1, 2), (1, 3), 16, 16, 2 ** 16),          # 32-bit AVX2 sums
    (16, (1, 4), (1, 7), 129, 8, 2 ** 8),            # levels stored as L - 128, with row sums
    (8, (1, 1, 2), (1, 1, 2), 4, 4, 7),              # an odd ADC: the exact-code table
], ids=["acc16", "acc32", "row_sums", "adc_table"])
def test_short_panels_take_the_short_instances_and_keep_the_bits(kernel, rows, case):
    n, xw, ww, g_level, rdac, radc = case
    K, P = 2 * n + n // 2 + 3, 37  # a short last block, K % 4 != 0, a short last column panel
    rng = np.random.default_rng(rows * 1000 + n)
    xs, xsc, wl, wsc = make_case(rng, 1, rows, K, P, n, xw, ww, (1, n), (n, 8), g_level)
    radc = [radc] * len(ww)
    args = (xs, xsc, (1, n), xw, wl, wsc, (n, 8), ww, n, rdac, g_level, radc)
    before = _core.dpe_short_tiles()["int"]
    got_int, got_float = int_and_float(args, KERNEL_LIMITS[kernel])
    after = _core.dpe_short_tiles()["int"]
    mr = TILE_ROWS[kernel]
    expect = short_instance(rows % mr or mr, mr)
    # every column panel's last tile, by the smallest instance covering its rows (the full tile if none)
    assert {s: after[s] - before[s] for s in after} == {s: -(-P // 16) if s == expect else 0 for s in after}
    ref = mvm_exact(xs, xsc, (1, n), xw, wl, wsc, (n, 8), ww, n, rdac, g_level, radc)
    np.testing.assert_array_equal(got_int, ref)
    np.testing.assert_array_equal(got_float, ref)
    assert np.count_nonzero(ref[:, -1]) > 0  # the last panel's rows hold real sums


def test_thread_counts_give_the_same_bits():
    rng = np.random.default_rng(7)
    xs, xsc, wl, wsc = make_case(rng, 3, 37, 200, 70, 32, (1, 1, 2, 2), (1, 1, 2, 2), (1, 32), (32, 32), 4)
    args = (xs, xsc, (1, 32), (1, 1, 2, 2), wl, wsc, (32, 32), (1, 1, 2, 2), 32, 4, 4, [4096] * 4)
    outs = []
    for threads in (1, 2, 3):
        with pyfastpim.threads(threads):
            outs.append(run(*args))
    for o in outs[1:]:
        np.testing.assert_array_equal(o, outs[0])


def test_noise_and_programmed_conductances_stay_on_the_float_path():
    rng = np.random.default_rng(9)
    xs, xsc, wl, wsc = make_case(rng, 2, 9, 64, 20, 16, (1, 1, 2), (1, 1, 2), (1, 16), (16, 16), 4)
    args = (xs, xsc, (1, 16), (1, 1, 2), wl, wsc, (16, 16), (1, 1, 2), 16, 4, 4, [4096] * 3)
    cond = (wl * ((HGS - LGS) / 3) + LGS).astype(np.float32)  # write variation / stuck cells come as conductances
    c0 = calls()
    run(*args, sigma=np.full(4, 0.05, np.float32))
    run(*args, vnoise=0.05)
    run(*args, cond=cond)
    assert calls() == c0
    run(*args, sigma=np.zeros(4, np.float32))  # zero read noise is noise-free
    assert calls() == c0 + 1


def conv_args():
    rng = np.random.default_rng(5)
    img = rng.standard_normal((3, 8, 16, 15)).astype(np.float32)
    K = 72
    wl = rng.integers(0, 16, (3, K, 29)).astype(np.uint8)
    wsc = rng.random((3, 2)).astype(np.float32)
    return (img, (3, 3), (2, 1), (1, 1), (1, 1), (1, 32), (1, 1, 2, 4), False, wl, None, wsc, (32, 16), (1, 1, 2),
            32, 16, 16, [4096] * 3, HGS, LGS, None, 0.0, 3, 1)


def test_layers_take_the_integer_path_when_noise_free():
    torch = pytest.importorskip("torch")
    from pyfastpim.nn import LinearMem
    torch.manual_seed(0)
    eng = pyfastpim.DPETensor(g_level=4, rdac=4, radc=2 ** 12, **NOISE_OFF)
    lin = LinearMem(eng, 90, 33, (1, 1, 2, 2), (1, 1, 2, 2))
    for rows in (1, 5, 300):  # batch 1 included: the weights' integer panels are packed once
        x = torch.randn(rows, 90)
        with torch.no_grad(), int_path(False):
            ref = lin(x)
        c0 = calls()
        with torch.no_grad():
            got = lin(x)
        assert calls() == c0 + 1
        assert torch.equal(got, ref)


def _programmed(noise_free_levels, seed=0):
    eng = pyfastpim.DPETensor(read_variation=0.0, vnoise=0.0, rate_stuck_HGS=0.0, rate_stuck_LGS=0.0,
                              write_variation=0.0 if noise_free_levels else 0.05, g_level=4, rdac=4, radc=2 ** 12)
    rng = np.random.default_rng(seed)
    w = pyfastpim.SlicedData((1, 1, 2, 2), is_weight=True, paral_size=(32, 32), quant_gran=(32, 32))
    w.slice_data_imp(eng, rng.standard_normal((256, 256)).astype(np.float32))
    x = pyfastpim.SlicedData((1, 1, 2, 2), paral_size=(1, 32), quant_gran=(1, 32))
    x.slice_data_imp(eng, rng.standard_normal((3, 256)).astype(np.float32))
    return eng, x, w


def test_programmed_weights_hold_integer_panels_and_calls_do_no_weight_work():
    """Ideal levels (no write variation, no stuck cells, no read noise): programming packs the
    integer path's int8 panels beside the float panels, and a noise-free call then allocates no
    weight panel (the per-call path would allocate the sw*K*P bytes of int8 levels). Two threads:
    each thread's activation panels (about 10 kB) are scratch too, and 16 threads' panels exceeded the bound
    on a 16-core machine without any weight work."""
    threads = pyfastpim.get_num_threads()
    pyfastpim.set_num_threads(2)
    try:
        _check_no_weight_work()
    finally:
        pyfastpim.set_num_threads(threads)


def _check_no_weight_work():
    eng, x, w = _programmed(True)
    ref = np.asarray(eng(x, w))  # the first product packs the programmed weights
    packed = w._packed[2]
    level_bytes = 4 * 256 * 256  # int8 levels of 4 weight slices
    assert packed.nbytes >= 4 * 256 * 256 * 4 + level_bytes  # float32 panels + int8 panels
    pyfastpim.memory.reset_peak()
    before = pyfastpim.memory.stats()
    c0 = calls()
    got = np.asarray(eng(x, w))
    after = pyfastpim.memory.stats()
    assert calls() == c0 + 1
    assert after["peak_bytes"] - before["current_bytes"] < level_bytes // 2
    np.testing.assert_array_equal(got, ref)
    with int_path(False):
        np.testing.assert_array_equal(np.asarray(eng(x, w)), got)


def test_programmed_conductances_keep_the_float_path():
    """Write variation makes the cells' conductances non-integer: no integer panels are packed
    and products take the float path."""
    eng, x, w = _programmed(False)
    eng(x, w)
    c0 = calls()
    eng(x, w)
    assert calls() == c0


def test_conductances_assigned_at_their_ideal_levels_keep_the_integer_path():
    """Cells written back at their ideal conductances (L * Q_G + LGS: the getter's values of noise-free
    weights) are the programmed levels, so products stay exact (semantics 7.1): the integer path, the
    same bits. A cell moved off its level makes the weights conductances: the float path."""
    eng, x, w = _programmed(True)
    ref = np.asarray(eng(x, w)).copy()
    g = np.array(w.G)
    w.G = g.copy()
    c0 = calls()
    np.testing.assert_array_equal(np.asarray(eng(x, w)), ref)
    assert calls() == c0 + 1
    g.flat[0] *= np.float32(1.5)  # block (0, 0), slice 0, cell (0, 0): a real cell, not padding
    w.G = g
    eng(x, w)
    assert calls() == c0 + 1
    w.G = None
    np.testing.assert_array_equal(np.asarray(eng(x, w)), ref)
    assert calls() == c0 + 2


STUCK = dict(write_variation=0.0, rate_stuck_HGS=0.05, rate_stuck_LGS=0.05)


def stuck_case(seed, N, R, K, P, n, xw, ww, g_level, seed_program=3):
    """A case whose weights are programmed with stuck cells only (_core.program_conductance: the engine's Philox
    draws), and the reference's levels of those cells: HGS is the top level, LGS level 0."""
    rng = np.random.default_rng(seed)
    xs, xsc, wl, wsc = make_case(rng, N, R, K, P, n, xw, ww, (1, n), (n, 8), g_level)
    cond = np.asarray(_core.program_conductance(wl, g_level, HGS, LGS, seed=seed_program, **{
        k: v for k, v in STUCK.items() if k != "write_variation"}))
    stuck = np.where(cond == np.float32(HGS), g_level - 1, np.where(cond == np.float32(LGS), 0, wl)).astype(np.uint8)
    assert (stuck != wl).any() and ((cond == np.float32(HGS)) & (wl < g_level - 1)).any()  # real stuck cells
    return xs, xsc, wl, wsc, cond, stuck


# (N, R, K, P, n, x widths, w widths, g_level): HGS 1e-5, LGS 1e-7 with 4 levels, where the float path's
# values of the cells, G / Q_G - LGS / Q_G in float32, are the levels exactly (stuck cells included)
STUCK_CASES = [
    (2, 13, 70, 37, 8, (1, 1, 2), (1, 1, 2), 4),    # edge tiles, K % n != 0
    (1, 5, 130, 48, 64, (1, 1, 2, 2), (1, 1, 2, 2), 4),
    (3, 4, 40, 20, 16, (1, 3), (1, 1), 4),
]


@pytest.mark.parametrize("kernel", sorted(KERNEL_LIMITS))
@pytest.mark.parametrize("case", STUCK_CASES, ids=range(len(STUCK_CASES)))
@pytest.mark.parametrize("threads", [1, 2])
def test_stuck_cells_take_the_integer_path_with_the_float_paths_bits(kernel, case, threads):
    """Cells stuck at HGS or LGS without write variation are levels (the top one, 0): when the float path reads
    every programmed cell as its level, the product takes the integer path (before: any programmed conductance
    kept the float path) with the float path's bits, the reference's on the stuck levels, for every integer
    kernel, thread count and a zero read-noise sigma."""
    N, R, K, P, n, xw, ww, g_level = case
    xs, xsc, wl, wsc, cond, stuck = stuck_case(R + threads, N, R, K, P, n, xw, ww, g_level)
    radc = [2 ** 12] * len(ww)
    ref = mvm_exact(xs, xsc, (1, n), xw, stuck, wsc, (n, 8), ww, n, 4, g_level, radc)
    for sigma in (None, np.zeros(g_level, np.float32)):
        args = (xs, xsc, (1, n), xw, wl, wsc, (n, 8), ww, n, 4, g_level, radc, sigma, 0.0, cond)
        with pyfastpim.threads(threads):
            got_int, got_float = int_and_float(args, KERNEL_LIMITS[kernel])
        np.testing.assert_array_equal(got_int, got_float)
        np.testing.assert_array_equal(got_int, ref)
    assert not np.array_equal(ref, mvm_exact(xs, xsc, (1, n), xw, wl, wsc, (n, 8), ww, n, 4, g_level, radc))


def stuck_conv_args():
    """conv_args with levels of 4 programmed with stuck cells only (with 16 levels the float path reads cells
    as 1.9999999 and stays on its path)."""
    args = list(conv_args())
    wl = args[8] // 5
    args[8], args[9], args[15] = wl, np.asarray(_core.program_conductance(wl, 4, HGS, LGS, 0.0, 0.05, 0.05, 3)), 4
    return tuple(args)


@pytest.mark.parametrize("kernel", sorted(KERNEL_LIMITS))
@pytest.mark.parametrize("weights", [conv_args, stuck_conv_args], ids=["im2col", "stuck_cells"])
def test_conv2d_takes_the_integer_path_with_the_float_paths_bits(kernel, weights):
    """The implicit im2col input of a convolution, with levels and with cells programmed stuck at HGS / LGS:
    the integer path is taken, with the float path's bits (and not taken when switched off)."""
    got_int, got_float = int_and_float(weights(), KERNEL_LIMITS[kernel], lambda *a: np.asarray(_core.dpe_conv2d(*a)[0]))
    np.testing.assert_array_equal(got_int, got_float)
    assert np.count_nonzero(got_int) > 0


def test_programmed_stuck_cells_pack_integer_panels():
    """The engine's products of weights programmed with stuck cells only: the pack holds the integer panels and
    every product takes the integer path, with the float path's bits; g_level 16 (cells read as 1.9999999)
    and write variation keep the float path and pack no integer panels."""
    def programmed(g_level, **noise):
        eng = pyfastpim.DPETensor(read_variation=0.0, vnoise=0.0, g_level=g_level, rdac=4, radc=2 ** 12,
                                  **dict(STUCK, **noise))
        rng = np.random.default_rng(1)
        w = pyfastpim.SlicedData((1, 1), is_weight=True, paral_size=(32, 32), quant_gran=(32, 32))
        w.slice_data_imp(eng, rng.standard_normal((100, 90)).astype(np.float32))
        x = pyfastpim.SlicedData((1, 1, 2), paral_size=(1, 32), quant_gran=(1, 32))
        x.slice_data_imp(eng, rng.standard_normal((300, 100)).astype(np.float32))
        return eng, x, w

    for g_level, noise, taken in ((4, {}, True), (16, {}, False), (4, dict(write_variation=0.05), False)):
        eng, x, w = programmed(g_level, **noise)
        c0 = calls()
        got = np.asarray(eng(x, w))
        assert calls() == c0 + taken, (g_level, noise)
        cells = 2 * 100 * 96  # 2 weight slices, 90 columns rounded up to 96
        assert (w._packed[2].nbytes >= cells * 5) == taken  # float32 panels, and int8 panels when taken
        with int_path(False):
            np.testing.assert_array_equal(np.asarray(eng(x, w)), got)
        assert calls() == c0 + taken


def test_dispatch_never_picks_a_vnni_kernel_without_its_cpuid_bits():
    kernels = int_kernels()
    assert set(kernels.values()) <= {"generic", "avx2", "avxvnni", "avx512vnni"}
    assert kernels["generic"] == "generic"
    if _core.ISA_EMULATION:  # make test-isa-emulation: every tier's instances run (through SIMDe) on AVX2
        assert kernels == {t: t for t in TIERS if t != "avx512"} | {"avx512": "avxvnni"}
    elif CPU_FLAGS:  # Linux: the kernel's view of CPUID
        for kernel in kernels.values():
            if kernel == "avx512vnni":
                assert "avx512_vnni" in CPU_FLAGS and "avx512bw" in CPU_FLAGS
            if kernel == "avxvnni":
                assert "avx_vnni" in CPU_FLAGS
        assert (DETECTED_TIER == "avx512vnni") == ("avx512_vnni" in CPU_FLAGS and "avx512bw" in CPU_FLAGS
                                                   and "avx512vl" in CPU_FLAGS and "avx512dq" in CPU_FLAGS)
        if "avx512_vnni" not in CPU_FLAGS:
            assert "avx512vnni" not in kernels.values()
        if "avx_vnni" not in CPU_FLAGS:
            assert "avxvnni" not in kernels.values()
    # a limit above what the CPU has is capped, and the float kernels keep their base ISA names
    try:
        assert pyfastpim.set_isa_limit("avx512vnni") == pyfastpim.cpu_isa()[1]
        assert _core.cpu_tier()[0] == DETECTED_TIER
        assert pyfastpim.set_isa_limit("avxvnni") in ("generic", "avx2")
        with pytest.raises(ValueError, match="isa"):
            pyfastpim.set_isa_limit("avx512_vnni")
    finally:
        pyfastpim.set_isa_limit("avx512vnni")


def test_every_vnni_instance_is_compiled_in():
    # this CPU may not run them, but the build must carry them (dispatch picks them where CPUID allows);
    # the emulated build (make test-isa-emulation) must instead run on a CPU with AVX2 + FMA only
    objdump = shutil.which("objdump")
    if not objdump:
        pytest.skip("objdump not installed")
    so = _core.__file__
    dis = subprocess.run([objdump, "-d", "--no-show-raw-insn", so], capture_output=True, text=True, check=True).stdout
    funcs = {}
    for m in re.finditer(r"<(pf_dpe_itile_\w+)>:\n(.*?)(?:\n\n|\Z)", dis, re.S):
        funcs[m.group(1)] = m.group(2)
    if "pf_dpe_itile_avx2" not in funcs:
        pytest.skip("the extension's symbols are stripped")
    if _core.ISA_EMULATION:
        assert "pf_dpe_itile_avx512vnni_r4" in funcs and "pf_dpe_itile_avxvnni_r2" in funcs
        assert not re.search(r"zmm|vpdpbusd|%k[0-7]", dis)
        return
    for suffix in ("", "_r1", "_r2"):  # each kernel and its short instances
        assert "vpdpbusd" in funcs["pf_dpe_itile_avx512vnni" + suffix]
        assert "zmm" in funcs["pf_dpe_itile_avx512vnni" + suffix]
        assert "{vex} vpdpbusd" in funcs["pf_dpe_itile_avxvnni" + suffix]
        assert "vpmaddubsw" in funcs["pf_dpe_itile_avx2" + suffix]
    assert "vpdpbusd" in funcs["pf_dpe_itile_avx512vnni_r4"] and "zmm" in funcs["pf_dpe_itile_avx512vnni_r4"]
    assert "vpdpbusd" not in funcs["pf_dpe_itile_avx2"] and "vpdpbusd" not in funcs["pf_dpe_itile_generic"]
