"""The local-memory tiled MVM kernel (kernels/dpe_tiled.cl, pf_dpe_mvm_tiled) against the untiled
kernel (pf_dpe_mvm), the CPU path and the NumPy reference (tests/reference/dpe_ref.py).

Noise off: tiled == untiled == CPU == reference, bit for bit. Noise on: tiled == untiled bit for
bit (the noise is drawn by the pack kernels, keyed by element index), and equal to the CPU path
within the contract (bit-identical where the CPU draws noise with its AVX2 path).

Besides the device's own tile shape, each case runs on devices opened with the GPU tile shape
(PYFASTPIM_CL_TILE: 4 x 4 register tiles in 16 x 8 work-groups, column-major weights) and a ragged
one (3 x 2 tiles, 4 x 2 work-groups, panel-packed weights), so PoCL exercises the work-group
cooperation, the local-memory chunking over n (chunks of k_chunk crossbar rows, a ragged last
chunk) and partial tiles at the row and column edges that a GPU would run.
"""
import numpy as np
import pytest

import pyfastpim
from pyfastpim import _core
from pyfastpim.devices import cl_dpe_conv2d
from reference.dpe_ref import mvm_exact
from helpers import CL_TILES as TILES, HGS, LGS, SAN, SIMD_NOISE, make_case, mvm_args as _mvm_args, needs_cl
from helpers import open_cl_device as open_device

pytestmark = needs_cl

@pytest.fixture(scope="module", params=list(TILES))
def dev(request):
    d = open_device(TILES[request.param])
    old = d.mvm_kernel
    if request.param != "device":
        t = d.tile
        want = [int(v) for v in TILES[request.param].split(",")]
        assert (t["rows"], t["cols"]) == (want[0], want[1])
        # the work-group may only shrink (to fit the compiled kernels), never grow
        assert t["local_x"] <= want[2] and t["local_y"] <= want[3]
    yield d
    d.mvm_kernel = old


def mvm_args(*args, seed=3, call=5, **kw):
    return _mvm_args(*args, seed=seed, call=call, **kw)


def run(d, kernel, args, **kw):
    old, d.mvm_kernel = d.mvm_kernel, kernel
    try:
        return np.asarray(_core.dpe_mvm(*args, device=d, **kw))
    finally:
        d.mvm_kernel = old


# (N, R, K, P, n): ragged rows (R not a multiple of TM*ly), columns (P not a multiple of TN*lx),
# inner size (K not a multiple of n), crossbars larger than one local-memory chunk (n = 64, 40:
# two chunks of 32, a full and a ragged one), smaller ones (n = 1, 8), a single row and column
SHAPES = [
    (1, 1, 1, 1, 1),
    (2, 37, 100, 53, 32),
    (1, 13, 130, 70, 64),
    (3, 9, 81, 17, 40),
    (1, 70, 48, 131, 8),
    (2, 5, 7, 3, 1),
]
if not SAN:
    SHAPES.append((2, 150, 256, 150, 128))


@pytest.mark.parametrize("N, R, K, P, n", SHAPES)
def test_noise_free_tiled_equals_untiled_cpu_and_reference_bit_for_bit(dev, N, R, K, P, n):
    rng = np.random.default_rng(N * 1000003 + R * 1009 + K * 31 + P + n)
    xw, ww, g_level = (1, 1, 2, 2), (1, 1, 2), 4
    xg, wg = (1, n), (n, 16)
    xs, xsc, wl, wsc = make_case(rng, N, R, K, P, n, xw, ww, xg, wg, g_level)
    radc = [256, 16, 4096]  # exact-table and rint ADC paths
    args = mvm_args(xs, xsc, xg, xw, wl, wsc, wg, ww, n, 16, g_level, radc)
    tiled, untiled = run(dev, "tiled", args), run(dev, "untiled", args)
    cpu = np.asarray(_core.dpe_mvm(*args))
    ref = mvm_exact(xs, xsc, xg, xw, wl, wsc, wg, ww, n, 16, g_level, radc)
    assert tiled.shape == (N, R, P) and np.abs(ref).max() > 0
    np.testing.assert_array_equal(cpu, ref)
    np.testing.assert_array_equal(untiled, cpu)
    np.testing.assert_array_equal(tiled, cpu)


@pytest.mark.parametrize("N, R, K, P, n", SHAPES[1:5])
@pytest.mark.parametrize("with_conductance", [False, True])
def test_noisy_tiled_equals_untiled_bit_for_bit_and_the_cpu(dev, N, R, K, P, n, with_conductance):
    rng = np.random.default_rng(7 + N + R + K + P + n)
    xw, ww, g_level = (1, 1, 2, 2), (1, 1, 2, 2), 4
    xg, wg = (2, n), (n, 32)
    xs, xsc, wl, wsc = make_case(rng, N, R, K, P, n, xw, ww, xg, wg, g_level)
    cond = None
    if with_conductance:
        QG = (HGS - LGS) / (g_level - 1)
        cond = ((wl * QG + LGS) * (1 + 0.02 * rng.standard_normal(wl.shape))).astype(np.float32)
    args = mvm_args(xs, xsc, xg, xw, wl, wsc, wg, ww, n, 4, g_level, [1024] * 4,
                    sigma=np.full(g_level, 0.05, np.float32), vnoise=0.05, cond=cond)
    tiled, untiled = run(dev, "tiled", args), run(dev, "untiled", args)
    cpu = np.asarray(_core.dpe_mvm(*args))
    exact = np.asarray(_core.dpe_mvm(*mvm_args(xs, xsc, xg, xw, wl, wsc, wg, ww, n, 4, g_level, [1024] * 4)))
    assert not np.array_equal(tiled, exact)  # the noise is there
    np.testing.assert_array_equal(tiled, untiled)
    nb = np.linalg.norm(cpu)
    assert np.linalg.norm(tiled - cpu) <= 1e-5 * nb
    if SIMD_NOISE:
        np.testing.assert_array_equal(tiled, cpu)


def test_item0_batches_and_row_chunks_through_the_tiled_kernel(dev):
    # a chunked batch (item0) sees the whole batch's noise; 4500 rows exceed one packed-input chunk
    rng = np.random.default_rng(21)
    xs, xsc, wl, wsc = make_case(rng, 5, 7, 64, 24, 32, (1, 1, 2, 2), (1, 1, 2, 2), (1, 32), (32, 32), 4)
    kw = dict(sigma=np.full(4, 0.05, np.float32), vnoise=0.05)
    whole = run(dev, "tiled", mvm_args(xs, xsc, (1, 32), (1, 1, 2, 2), wl, wsc, (32, 32), (1, 1, 2, 2), 32, 4, 4,
                                       [4096] * 4, **kw))
    part_args = mvm_args(np.ascontiguousarray(xs[:, 2:]), xsc[2:], (1, 32), (1, 1, 2, 2), wl, wsc, (32, 32),
                         (1, 1, 2, 2), 32, 4, 4, [4096] * 4, **kw)
    np.testing.assert_array_equal(run(dev, "tiled", part_args, item0=2), whole[2:])
    np.testing.assert_array_equal(run(dev, "untiled", part_args, item0=2), whole[2:])
    if SAN or (dev.tile["rows"], dev.tile["cols"]) != (4, 4):
        return  # the row chunking is the host's, shared by both kernels: once, with the GPU tile shape
    xs, xsc, wl, wsc = make_case(rng, 3, 1500, 1024, 9, 32, (1, 1, 2, 2), (1, 1, 2, 2), (1, 32), (32, 32), 4)
    args = mvm_args(xs, xsc, (1, 32), (1, 1, 2, 2), wl, wsc, (32, 32), (1, 1, 2, 2), 32, 4, 4, [256] * 4)
    np.testing.assert_array_equal(run(dev, "tiled", args), np.asarray(_core.dpe_mvm(*args)))


@pytest.mark.parametrize("noisy", [False, True])
def test_conv2d_output_layout_through_the_tiled_kernel(dev, noisy):
    # the implicit-im2col convolution writes (N, P, Ho, Wo) from the same tile kernel
    rng = np.random.default_rng(5)
    img = rng.standard_normal((2, 3, 9, 7)).astype(np.float32)
    K, P, n = 27, 11, 9
    wl = np.stack([rng.integers(0, m + 1, (K, P)) for m in (3, 3, 1, 1)]).astype(np.uint8)
    wsc = rng.random((3, 3)).astype(np.float32)
    sig = np.full(4, 0.05, np.float32) if noisy else None
    args = (img, (3, 3), (1, 1), (1, 1), (1, 1), (1, 9), (1, 1, 2, 2), False, wl, None, wsc, (9, 4), (1, 1, 2, 2),
            n, 16, 4, [256] * 4, HGS, LGS, sig, 0.05 if noisy else 0.0, 7, 3, False)
    outs = {}
    old = dev.mvm_kernel
    for kernel in ("tiled", "untiled"):
        dev.mvm_kernel = kernel
        try:
            outs[kernel] = np.asarray(cl_dpe_conv2d(dev, *args)[0])
        finally:
            dev.mvm_kernel = old
    cpu = np.asarray(_core.dpe_conv2d(*args)[0])
    assert outs["tiled"].shape == (2, P, 9, 7)
    np.testing.assert_array_equal(outs["tiled"], outs["untiled"])
    if not noisy or SIMD_NOISE:
        np.testing.assert_array_equal(outs["tiled"], cpu)
    else:
        assert np.linalg.norm(outs["tiled"] - cpu) <= 1e-5 * np.linalg.norm(cpu)


def test_kernel_selection_rule_and_override():
    d = pyfastpim.resolve_device("opencl")
    info, tile = d.info, d.tile
    assert isinstance(info["local_mem_dedicated"], bool) and info["local_mem_bytes"] > 0
    assert isinstance(info["fp32_denormals"], bool) and isinstance(info["fp32_correctly_rounded_divide_sqrt"], bool)
    # k_chunk: crossbar rows whose tiles ((TM*ly + TN*lx) floats each) fit half the local memory, at most 32
    per_row = (tile["rows"] * tile["local_y"] + tile["cols"] * tile["local_x"]) * 4
    assert 0 <= tile["k_chunk"] <= 32 and tile["preferred_multiple"] >= 1
    assert tile["k_chunk"] * per_row <= info["local_mem_bytes"]
    old = d.mvm_kernel
    try:
        d.mvm_kernel = "auto"
        gpu_like = info["type"] != "cpu" and info["local_mem_dedicated"]
        for n in (1, 8, 64):
            assert d.mvm_uses_tiled(n) == (gpu_like and (tile["k_chunk"] >= 8 or tile["k_chunk"] >= n))
        if info["type"] == "cpu":
            assert not d.mvm_uses_tiled(64)  # PoCL: unchanged default (the untiled kernel)
        d.mvm_kernel = "tiled"
        assert d.mvm_kernel == "tiled" and d.mvm_uses_tiled(64) == (tile["k_chunk"] > 0)
        d.mvm_kernel = "untiled"
        assert d.mvm_kernel == "untiled" and not d.mvm_uses_tiled(64)
        for bad in ("fast", "", None, 1):
            with pytest.raises((ValueError, TypeError), match="mvm_kernel"):
                d.mvm_kernel = bad
        assert d.mvm_kernel == "untiled"
        with pytest.raises(ValueError, match="'n'"):
            d.mvm_uses_tiled(0)
    finally:
        d.mvm_kernel = old


def test_environment_chooses_the_kernel_at_open(monkeypatch):
    base = pyfastpim.resolve_device("opencl")
    p, i = base.info["platform"], base.info["device"]
    for mode in ("tiled", "untiled", "auto"):
        monkeypatch.setenv("PYFASTPIM_CL_MVM", mode)
        assert _core.OpenCLDevice(p, i).mvm_kernel == mode
    monkeypatch.setenv("PYFASTPIM_CL_MVM", "turbo")
    with pytest.raises(ValueError, match="^environment variable PYFASTPIM_CL_MVM: expected 'auto', 'tiled' or "
                       "'untiled', got 'turbo'$"):
        _core.OpenCLDevice(p, i)


@pytest.mark.parametrize("value", ["true", " 1", "2"])
def test_a_malformed_profile_variable_raises_naming_it(monkeypatch, value):
    # PYFASTPIM_CL_PROFILE is '1' (kernel times on stderr) or '0' / empty / unset (off), as
    # PYFASTPIM_PROGRESS: anything else was silently off (the user waited for timings that never came)
    base = pyfastpim.resolve_device("opencl")
    p, i = base.info["platform"], base.info["device"]
    monkeypatch.setenv("PYFASTPIM_CL_PROFILE", value)
    with pytest.raises(ValueError, match="^environment variable PYFASTPIM_CL_PROFILE: expected '1'.*'0'"):
        _core.OpenCLDevice(p, i)
    for ok in ("0", "", "1"):
        monkeypatch.setenv("PYFASTPIM_CL_PROFILE", ok)
        _core.OpenCLDevice(p, i)


@pytest.mark.parametrize("tile", ["32,4,16,8", "4,3,16,8", "4,4", "a,b,c,d", "4,4,16,8,0,1", "4,4,0,8",
                                  "4,4,16,8x", "4,4,16,8,2", "4,4,2000,8"])
def test_a_malformed_tile_variable_raises_naming_it(monkeypatch, tile):
    # PYFASTPIM_CL_TILE out of the kernels' limits or not "TM,TN,LX,LY[,PANEL]": ValueError naming the
    # variable at build, not the default shape used silently (the user believes the tuning took effect)
    base = pyfastpim.resolve_device("opencl")
    monkeypatch.setenv("PYFASTPIM_CL_TILE", tile)
    d = _core.OpenCLDevice(base.info["platform"], base.info["device"])
    with pytest.raises(ValueError, match="^environment variable PYFASTPIM_CL_TILE: expected 'TM,TN,LX,LY"):
        d.build()
    monkeypatch.setenv("PYFASTPIM_CL_TILE", " 3,2,4,2,1 ")  # well formed: taken, and the same handle builds
    d.build()
    assert (d.tile["rows"], d.tile["cols"]) == (3, 2)


# Tall crossbars: n far above the rows present. Block b stores only its min(n, K - b*n) rows (K here,
# one block), as the CPU packs them: before, every block was padded to n rows, so the packed weights
# (Sw x n x Pp floats) and inputs took hundreds of MB here, and the kernels looped over the empty rows.
# n still sets the ADC reference (codes at a 24-bit ADC change with it), so the outputs must stay
# bit-identical to the CPU's; the scratch must stay below one padded crossbar column (n floats).
TALL_N = 2 ** 18


@pytest.mark.parametrize("kernel", ["tiled", "untiled"])
def test_a_tall_crossbar_packs_and_loops_over_the_rows_present_only(dev, kernel):
    rng = np.random.default_rng(41)
    N, R, K, P, n = 2, 9, 50, 21, TALL_N
    xw, ww, xg, wg = (1, 1, 2, 2), (1, 1, 2), (1, n), (n, 8)
    xs, xsc, wl, wsc = make_case(rng, N, R, K, P, n, xw, ww, xg, wg, 4)
    radc = [2 ** 24, 2 ** 20, 4096]
    args = mvm_args(xs, xsc, xg, xw, wl, wsc, wg, ww, n, 4, 4, radc)
    dev.release()  # the scratch grows to the largest call: start from none
    out = run(dev, kernel, args)
    assert dev.scratch_bytes < 4 * n
    cpu = np.asarray(_core.dpe_mvm(*args))
    assert np.count_nonzero(cpu) > 0
    np.testing.assert_array_equal(cpu, mvm_exact(xs, xsc, xg, xw, wl, wsc, wg, ww, n, 4, 4, radc))
    np.testing.assert_array_equal(out, cpu)
    # n enters the ADC reference: the same product on n / 2 rows gives other codes
    half = list(args)
    half[9] = n // 2
    assert not np.array_equal(np.asarray(_core.dpe_mvm(*half)), cpu)


def test_a_tall_crossbar_convolution_packs_the_rows_present_only(dev):
    rng = np.random.default_rng(43)
    img = rng.standard_normal((2, 3, 9, 7)).astype(np.float32)
    K, P, n = 27, 11, TALL_N
    wl = np.stack([rng.integers(0, m + 1, (K, P)) for m in (3, 3, 1, 1)]).astype(np.uint8)
    wsc = rng.random((1, 3)).astype(np.float32)
    args = (img, (3, 3), (1, 1), (1, 1), (1, 1), (1, n), (1, 1, 2, 2), False, wl, None, wsc, (n, 4), (1, 1, 2, 2),
            n, 4, 4, [2 ** 24] * 4, HGS, LGS, None, 0.0, 7, 3, False)
    dev.release()
    out = np.asarray(cl_dpe_conv2d(dev, *args)[0])
    assert dev.scratch_bytes < 4 * n
    cpu = np.asarray(_core.dpe_conv2d(*args)[0])
    assert out.shape == (2, P, 9, 7) and np.count_nonzero(cpu) > 0
    np.testing.assert_array_equal(out, cpu)
