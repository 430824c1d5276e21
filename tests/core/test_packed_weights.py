"""Programmed weights packed once (issue 11 item 2): _core.dpe_pack / PackedWeights, read by
_core.dpe_mvm_packed / dpe_conv2d_packed and by every CPU product of DPETensor and the layers.

Packed and unpacked calls give the same bits (noise off, and with read + DAC noise for the same
seed and call), equal to tests/reference when noise-free, for any thread count and ISA; the pack
is made once per programming, dropped when the weights are re-programmed, counted by
pyfastpim.memory and freed with its SlicedData; a noise-free call allocates no weight panels."""
import copy
import gc
import pickle

import numpy as np
import pytest

import pyfastpim
from pyfastpim import DPETensor, SlicedData, _core
from helpers import (NOISE_OFF, HGS, ISAS, LGS, available_isas, make_case, no_isa_limit, restore_isa_limit, short_instance,
                     written_conductance)
from reference.dpe_ref import mvm_exact


def case(seed, N, R, K, P, n, xw=(1, 1, 2), ww=(1, 1, 2), xg=None, wg=None, g_level=4, cond=False):
    rng = np.random.default_rng(seed)
    xg = xg or (1, n)
    wg = wg or (n, 8)
    xs, xsc, wl, wsc = make_case(rng, N, R, K, P, n, xw, ww, xg, wg, g_level)
    g = written_conductance(rng, wl, g_level) if cond else None  # programmed, with write variation
    return dict(xs=xs, xsc=xsc, xg=xg, xw=xw, wl=wl, wc=g, wsc=wsc, wg=wg, ww=ww, n=n, g_level=g_level)


def weight_args(c, radc, sigma, rdac=4):
    return (c["wl"], c["wc"], c["wsc"], c["wg"], c["ww"], c["n"], rdac, c["g_level"], radc, HGS, LGS, sigma)


def mvm_args(c, radc, sigma=None, vnoise=0.0, seed=1, call=0, rdac=4):
    return (c["xs"], c["xsc"], c["xg"], c["xw"], c["wl"], c["wc"], c["wsc"], c["wg"], c["ww"], c["n"], rdac,
            c["g_level"], radc, HGS, LGS, sigma, vnoise, seed, call)


def both(c, radc, sigma=None, vnoise=0.0, seed=1, call=0, packed=None):
    """(unpacked, packed) outputs of one call."""
    args = mvm_args(c, radc, sigma, vnoise, seed, call)
    packed = packed or _core.dpe_pack(*weight_args(c, radc, sigma))
    return np.asarray(_core.dpe_mvm(*args)), np.asarray(_core.dpe_mvm_packed(packed, *args))


SHAPES = [
    dict(N=1, R=1, K=64, P=48, n=32),      # batch 1
    dict(N=3, R=5, K=70, P=37, n=16),      # K not a multiple of n, P not of the panel width, panels straddle items
    dict(N=2, R=9, K=5, P=20, n=8),        # K < n: one short block
    dict(N=1, R=13, K=96, P=16, n=32, xw=(1, 1, 2, 2), ww=(1, 1, 2, 2)),
]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("radc", [2 ** 12, 7])  # 7: an ADC whose codes come from the exact table
def test_noise_free_packed_equals_unpacked_and_reference(shape, radc):
    c = case(len(str(shape)) + radc, **shape)
    radcs = [radc] * len(c["ww"])
    ref = mvm_exact(c["xs"], c["xsc"], c["xg"], c["xw"], c["wl"], c["wsc"], c["wg"], c["ww"], c["n"], 4,
                    c["g_level"], radcs)
    packed = _core.dpe_pack(*weight_args(c, radcs, None))
    assert packed.kind == "ready"
    for isa in ISAS:
        pyfastpim.set_isa_limit(isa)
        try:
            for threads in (1, 2, 3):
                with pyfastpim.threads(threads):
                    plain, fast = both(c, radcs, packed=packed)
                np.testing.assert_array_equal(fast, plain)
                np.testing.assert_array_equal(fast, ref)
        finally:
            no_isa_limit()


@pytest.mark.parametrize("shape", SHAPES[:3])
@pytest.mark.parametrize("cond", [False, True])
def test_noisy_packed_equals_unpacked_for_each_seed_call_thread_count_and_isa(shape, cond):
    c = case(11, cond=cond, **shape)
    radcs = [2 ** 12] * len(c["ww"])
    sigma = np.array([0.0, 0.05, 0.08, 0.1], np.float32)
    packed = _core.dpe_pack(*weight_args(c, radcs, sigma))
    assert packed.kind == "noisy"
    outs = []
    for isa in ISAS:
        pyfastpim.set_isa_limit(isa)
        try:
            for threads in (1, 3):
                with pyfastpim.threads(threads):
                    for call in (0, 1, 5):  # the resident buffer is refilled every call
                        plain, fast = both(c, radcs, sigma, vnoise=0.05, seed=9, call=call, packed=packed)
                        np.testing.assert_array_equal(fast, plain)
                        outs.append((call, fast))
        finally:
            no_isa_limit()
    by_call = {}
    for call, out in outs:  # same seed and call: same bits on every ISA and thread count
        by_call.setdefault(call, out)
        np.testing.assert_array_equal(out, by_call[call])
    assert not np.array_equal(by_call[0], by_call[1])


def test_write_variation_without_read_noise_is_packed_ready():
    c = case(5, N=2, R=3, K=40, P=33, n=8, cond=True)
    radcs = [2 ** 10] * 3
    packed = _core.dpe_pack(*weight_args(c, radcs, None))
    assert packed.kind == "ready"
    plain, fast = both(c, radcs, packed=packed)
    np.testing.assert_array_equal(fast, plain)
    # an all-zero sigma is no read noise: the same ready pack serves it
    plain0, fast0 = both(c, radcs, sigma=np.zeros(4, np.float32), packed=packed)
    np.testing.assert_array_equal(fast0, plain0)
    np.testing.assert_array_equal(fast0, fast)


@pytest.mark.parametrize("sigma", [None, np.full(4, 0.05, np.float32)], ids=["ready", "noisy"])
def test_packs_hold_only_the_rows_present_in_each_block(sigma):
    """A last crossbar block with fewer than n rows packs those rows only: K = 1100 rows on n = 1024
    hold 1100 rows of panels, as one block of 2048 does, not 2048 (a block padded to n rows:
    the panels 1.86 times their size, and the tiles summed the zero rows). The packs differ only by the
    second block's column scales (float and integer path: 16 floats per column panel each). A noisy
    pack's work buffer, made by the first blocked call, has the same size. K < n was already one
    block of the K rows: n = 2**20 packs what n = 64 does."""
    P, radcs = 40, [2 ** 12] * 3
    ncp = -(-P // 16)

    def pack_bytes(K, n):
        c = case(3, N=1, R=3, K=K, P=P, n=n)
        packed = _core.dpe_pack(*weight_args(c, radcs, sigma))
        if sigma is not None:  # allocate the noisy pack's work buffer: a batch on the blocked path
            rows = (4 << 20) // (3 * K * 4) + 64  # packed inputs over the 4 MiB of the fused path (see BLOCKED_ROWS)
            c["xs"] = np.random.default_rng(1).integers(0, 2, (3, 1, rows, K)).astype(np.uint8)
            c["xsc"] = np.ones((1, rows, -(-K // n)), np.float32)
            _core.dpe_mvm_packed(packed, *mvm_args(c, radcs, sigma))
            assert packed.nbytes > 3 * K * ncp * 16 * 4  # the float panels of 3 weight slices
        return packed.nbytes

    one_block = pack_bytes(1100, 2048)
    scales = (2 if sigma is None else 1) * ncp * 16 * 4  # the second block's column scales
    assert pack_bytes(1100, 1024) == one_block + scales
    assert pack_bytes(64, 2 ** 20) == pack_bytes(64, 64)


@pytest.mark.parametrize("noise", [{}, dict(vnoise=0.05), dict(sigma=np.full(4, 0.05, np.float32))],
                         ids=["integer", "float", "read_noise"])
def test_per_call_panels_hold_only_the_rows_present(noise):
    """Unpacked calls pack the weights (and the inputs) for the rows present too: K = 1100 on n = 1024
    peaks at what one block of 2048 rows does (before: 1.86 times that, the last block padded to n)."""
    def peak(n):
        c = case(4, N=1, R=3, K=1100, P=40, n=n)
        args = mvm_args(c, [2 ** 12] * 3, noise.get("sigma"), noise.get("vnoise", 0.0))
        _core.dpe_mvm(*args)
        pyfastpim.memory.reset_peak()
        before = pyfastpim.memory.stats()["current_bytes"]
        out = _core.dpe_mvm(*args)
        return pyfastpim.memory.stats()["peak_bytes"] - before - np.asarray(out).nbytes

    one_block = peak(2048)
    assert one_block > 0
    assert peak(1024) <= one_block + 4096  # the second block's scales only (before: +39 KB to +680 KB)

def test_conv2d_packed_equals_unpacked():
    rng = np.random.default_rng(2)
    img = rng.standard_normal((2, 3, 9, 8)).astype(np.float32)
    K, P, n = 3 * 3 * 3, 10, 8
    c = case(3, N=1, R=1, K=K, P=P, n=n, wg=(8, 4))
    radcs = [2 ** 12] * 3
    for sigma, vnoise in ((None, 0.0), (np.full(4, 0.05, np.float32), 0.05)):
        args = (img, (3, 3), (1, 2), (1, 1), (1, 1), (1, n), (1, 1, 2), False, c["wl"], None, c["wsc"], c["wg"],
                c["ww"], n, 4, 4, radcs, HGS, LGS, sigma, vnoise, 3, 4)
        packed = _core.dpe_pack(*weight_args(c, radcs, sigma))
        plain, _ = _core.dpe_conv2d(*args)
        fast, _ = _core.dpe_conv2d_packed(packed, *args)
        np.testing.assert_array_equal(np.asarray(fast), np.asarray(plain))


def test_a_pack_for_other_weights_or_noise_is_refused():
    c = case(1, N=1, R=2, K=40, P=20, n=8)
    radcs = [256] * 3
    ready = _core.dpe_pack(*weight_args(c, radcs, None))
    other = case(1, N=1, R=2, K=40, P=21, n=8)
    with pytest.raises(ValueError):
        _core.dpe_mvm_packed(ready, *mvm_args(other, radcs))
    with pytest.raises(ValueError):  # packed without read noise, called with it
        _core.dpe_mvm_packed(ready, *mvm_args(c, radcs, sigma=np.full(4, 0.1, np.float32)))
    noisy = _core.dpe_pack(*weight_args(c, radcs, np.full(4, 0.1, np.float32)))
    with pytest.raises(ValueError):
        _core.dpe_mvm_packed(noisy, *mvm_args(c, radcs))
    with pytest.raises(TypeError):
        _core.dpe_mvm_packed(None, *mvm_args(c, radcs))
    with pytest.raises(ValueError):  # the weight arguments are checked as dpe_mvm checks them
        _core.dpe_pack(*weight_args(c, [256] * 2, None))


# ---- through DPETensor, the layers and SlicedData ----

def engine(noise):
    kw = dict(g_level=4, rdac=4, radc=2 ** 12, write_variation=0.0, rate_stuck_HGS=0.0, rate_stuck_LGS=0.0)
    return DPETensor(**kw, read_variation=0.05 if noise else 0.0, vnoise=0.05 if noise else 0.0)


def operands(eng, seed=0, R=4, K=96, P=40):
    rng = np.random.default_rng(seed)
    x, w = rng.standard_normal((R, K)).astype(np.float32), rng.standard_normal((K, P)).astype(np.float32)
    ws = SlicedData((1, 1, 2, 2), is_weight=True, paral_size=(32, 32), quant_gran=(32, 32))
    ws.slice_data_imp(eng, w)
    xs = SlicedData((1, 1, 2, 2), paral_size=(1, 32), quant_gran=(1, 32))
    xs.slice_data_imp(eng, x)
    return xs, ws


def unpacked_product(eng, xs, ws, call):
    """The per-call packing path (_core.dpe_mvm) with the engine's arguments for call number ``call``."""
    return np.asarray(_core.dpe_mvm(
        xs._codes, xs._gran_scale, xs._granule, xs._widths, ws._levels, ws._conductance, ws._gran_scale[0],
        ws._granule, ws._widths, 32, eng.rdac, eng.g_level, eng._radc_lsb_first(len(ws)), eng.HGS, eng.LGS,
        eng._read_sigmas(), eng.vnoise, eng.seed, call))[0]


@pytest.mark.parametrize("noise", [False, True])
def test_engine_packs_once_and_matches_the_per_call_path(noise):
    eng = engine(noise)
    xs, ws = operands(eng)
    first = np.asarray(eng(xs, ws))  # held: counted below
    handle = ws._packed[2]
    assert handle.kind == ("noisy" if noise else "ready")
    second = eng(xs, ws)
    assert ws._packed[2] is handle  # packed once per programming
    np.testing.assert_array_equal(first, unpacked_product(eng, xs, ws, 0))
    np.testing.assert_array_equal(second, unpacked_product(eng, xs, ws, 1))


PANEL_BYTES = 4 * 256 * 256 * 4  # float32 panels of 4 weight slices of a 256 x 256 layer
# A batch whose packed inputs (256 columns x 4 input slices of float32 per row) exceed the 4 MiB up to
# which read noise is drawn beside the tiles (csrc/cpu/dpe.c PF_DPE_FUSED_A_BYTES): the blocked path.
BLOCKED_ROWS = (4 << 20) // (256 * 4 * 4) + 64


def test_a_noise_free_product_allocates_no_weight_panels():
    eng = engine(False)
    xs, ws = operands(eng, R=2, K=256, P=256)
    eng(xs, ws)
    nbytes = ws._packed[2].nbytes
    assert nbytes >= PANEL_BYTES
    before = pyfastpim.memory.stats()
    pyfastpim.memory.reset_peak()
    eng(xs, ws)
    after = pyfastpim.memory.stats()
    # per-call scratch (input panels per thread) only: far below one copy of the weight panels
    assert after["peak_bytes"] - before["current_bytes"] < nbytes // 4
    assert after["current_bytes"] == before["current_bytes"]


def test_noisy_products_reuse_the_resident_buffer():
    eng = engine(True)
    xs, ws = operands(eng, R=BLOCKED_ROWS, K=256, P=256)
    eng(xs, ws)
    handle = ws._packed[2]
    nbytes = handle.nbytes
    assert nbytes >= PANEL_BYTES  # the first blocked call allocated the work buffer
    before = pyfastpim.memory.stats()
    pyfastpim.memory.reset_peak()
    out = np.asarray(eng(xs, ws))
    after = pyfastpim.memory.stats()
    assert ws._packed[2] is handle and handle.nbytes == nbytes  # allocated once, kept
    # the output and per-call scratch (input panels per thread) only: a second copy of the weight
    # panels would add nbytes
    assert after["peak_bytes"] - before["current_bytes"] < out.nbytes + nbytes // 2
    del out
    assert pyfastpim.memory.stats()["current_bytes"] == before["current_bytes"]


def test_small_batch_noisy_products_never_allocate_the_resident_buffer():
    eng = engine(True)
    xs, ws = operands(eng, R=2, K=256, P=256)
    gc.collect()
    base = pyfastpim.memory.stats()["current_bytes"]
    first = np.asarray(eng(xs, ws))  # held: counted below
    handle = ws._packed[2]
    assert handle.kind == "noisy"
    assert handle.nbytes < PANEL_BYTES // 16  # column scales only: the noise is drawn beside the tiles
    for _ in range(3):
        eng(xs, ws)
    assert handle.nbytes + first.nbytes == pyfastpim.memory.stats()["current_bytes"] - base
    # a large batch on the same programmed weights allocates the buffer then, and the small-batch
    # results do not depend on whether it exists
    xb = operands(eng, R=BLOCKED_ROWS, K=256, P=256)[0]
    eng(xb, ws)
    del xb
    gc.collect()
    assert ws._packed[2] is handle and handle.nbytes >= PANEL_BYTES
    assert handle.nbytes + first.nbytes == pyfastpim.memory.stats()["current_bytes"] - base
    eng.reset(eng.seed)
    np.testing.assert_array_equal(eng(xs, ws), first)


def test_reprogramming_drops_the_pack_and_the_product_uses_the_new_weights():
    eng = engine(False)
    xs, ws = operands(eng, seed=1)
    old = eng(xs, ws)
    assert ws._packed is not None
    w2 = np.random.default_rng(7).standard_normal((96, 40)).astype(np.float32)
    ws.slice_data_imp(eng, w2)
    assert ws._packed is None  # re-programming drops the previous pack (and frees it)
    new = eng(xs, ws)
    fresh = SlicedData((1, 1, 2, 2), is_weight=True, paral_size=(32, 32), quant_gran=(32, 32))
    fresh.slice_data_imp(eng, w2)
    np.testing.assert_array_equal(new, eng(xs, fresh))
    assert not np.array_equal(new, old)
    # re-programming for another engine's device parameters (g_level) re-packs too
    eng8 = DPETensor(g_level=8, rdac=4, radc=2 ** 12, **NOISE_OFF)
    h = ws._packed[2]
    eng8(xs, ws)
    assert ws._packed[2] is not h
    np.testing.assert_array_equal(eng(xs, ws), new)


def test_setting_programmed_state_drops_the_pack():
    eng = engine(False)
    xs, ws = operands(eng, seed=2)
    eng(xs, ws)
    ws.G = ws.G  # assigning conductances re-programs
    assert ws._packed is None
    eng(xs, ws)
    assert ws._packed is not None


def test_pack_memory_is_counted_and_freed_with_the_sliced_data():
    eng = engine(False)
    xs, ws = operands(eng, seed=3, K=256, P=256)
    gc.collect()
    base = pyfastpim.memory.stats()["current_bytes"]
    eng(xs, ws)
    nbytes = ws._packed[2].nbytes
    assert pyfastpim.memory.stats()["current_bytes"] == base + nbytes
    keep = {k: v for k, v in ws.__dict__.items() if k != "_packed"}  # the arrays stay: only the pack goes
    del ws
    gc.collect()
    assert keep["_levels"] is not None
    assert pyfastpim.memory.stats()["current_bytes"] == base


def test_copy_deepcopy_and_pickle_of_packed_sliced_data():
    eng = engine(False)
    xs, ws = operands(eng, seed=4)
    out = eng(xs, ws)
    for clone in (copy.copy(ws), copy.deepcopy(ws), pickle.loads(pickle.dumps(ws))):
        np.testing.assert_array_equal(eng(xs, clone), out)
    assert ws._packed is not None


def test_threads_do_not_change_packed_products():
    eng = engine(True)
    xs, ws = operands(eng, seed=5)
    eng(xs, ws)
    outs = []
    for threads in (1, 2, 3):
        eng.reset()
        with pyfastpim.threads(threads):
            outs.append(eng(xs, ws))
    for o in outs[1:]:
        np.testing.assert_array_equal(o, outs[0])


def test_layers_use_one_pack_and_survive_copy_deepcopy_and_pickle():
    torch = pytest.importorskip("torch")
    from pyfastpim.nn import Conv2dMem, LinearMem
    eng = engine(False)
    torch.manual_seed(0)
    lin = LinearMem(eng, 40, 12, (1, 1, 2, 2), (1, 1, 2, 2))
    conv = Conv2dMem(eng, 3, 5, 3, (1, 1, 2, 2), (1, 1, 2, 2), padding=1)
    x, img = torch.randn(4, 40), torch.randn(2, 3, 7, 7)
    with torch.no_grad():
        for layer, inp in ((lin, x), (conv, img)):
            y = layer(inp)
            handle = layer.weight_sliced._packed[2]
            np.testing.assert_array_equal(layer(inp).numpy(), y.numpy())
            assert layer.weight_sliced._packed[2] is handle  # no re-packing between products
            for clone in (copy.deepcopy(layer), pickle.loads(pickle.dumps(layer))):
                clone.engine = eng
                np.testing.assert_array_equal(clone(inp).numpy(), y.numpy())
            layer.weight.mul_(0.5)  # an optimizer-style in-place update re-programs and re-packs
            y2 = layer(inp)
            assert layer.weight_sliced._packed[2] is not handle
            assert not np.array_equal(y2.numpy(), y.numpy())


@pytest.mark.parametrize("noise", ["read_noise", "noise_free"])
def test_short_panels_give_the_bits_of_full_tiles(noise):
    # read noise is indexed by weight cell and call only: rows multiplied alone in a panel of 1 to 6 valid rows
    # (the 1-, 2- and 4-row short instances of the SIMD micro-kernels, or the full 6-row tile) equal the same rows
    # inside a batch of 7 (a full panel and a one-row panel). Programmed conductances: the float path either way.
    c = case(21, N=1, R=7, K=70, P=45, n=16, cond=True)
    radcs = [2 ** 12] * 3
    sigma = np.array([0.0, 0.05, 0.08, 0.1], np.float32) if noise == "read_noise" else None
    packed = _core.dpe_pack(*weight_args(c, radcs, sigma))
    active = pyfastpim.cpu_isa()[0]
    for isa in available_isas():
        pyfastpim.set_isa_limit(isa)
        try:
            full = np.asarray(_core.dpe_mvm_packed(packed, *mvm_args(c, radcs, sigma, seed=4, call=2)))
            for r0, m in ((0, 1), (6, 1), (1, 2), (5, 2), (2, 3), (0, 4), (3, 4), (1, 5), (0, 6)):
                part = dict(c, xs=np.ascontiguousarray(c["xs"][:, :, r0:r0 + m]),
                            xsc=np.ascontiguousarray(c["xsc"][:, r0:r0 + m]))
                before = _core.dpe_short_tiles()["float"]
                got = np.asarray(_core.dpe_mvm_packed(packed, *mvm_args(part, radcs, sigma, seed=4, call=2)))
                after = _core.dpe_short_tiles()["float"]
                np.testing.assert_array_equal(got[0], full[0, r0:r0 + m], err_msg="isa %s, rows %d" % (isa, m))
                # the portable table has no short instances; the SIMD ones take the smallest that covers m
                expect = short_instance(m, 6) if isa != "generic" else None
                taken = {s for s in after if after[s] > before[s]}
                assert taken == ({expect} if expect else set()), (isa, m, before, after)
        finally:
            restore_isa_limit(active)


def test_long_normal_runs_use_every_thread_with_the_same_values():
    n = 3 * (1 << 16) + 12345  # several per-thread pieces and a ragged end
    with pyfastpim.threads(1):
        one = np.asarray(_core.normals(5, 1, 2, 7, n))
    for threads in (2, 3):
        with pyfastpim.threads(threads):
            np.testing.assert_array_equal(np.asarray(_core.normals(5, 1, 2, 7, n)), one)
    # any sub-range (counter-based), across a piece boundary
    np.testing.assert_array_equal(np.asarray(_core.normals(5, 1, 2, 7 + 65530, 20)), one[65530:65550])
