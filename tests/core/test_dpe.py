"""DPETensor / MapReduceDot / dpe_matmul end to end, against the spec transcriptions in tests/reference."""
import numpy as np
import pytest
try:
    import torch
except ImportError:  # numpy-only install: conftest skips the tests that use torch
    torch = None
from hypothesis import given, strategies as st

import pyfastpim
from pyfastpim import DPETensor, SlicedData, dpe_matmul
from helpers import NOISE_OFF, reference_product
from reference.dpe_ref import mvm_noisy
from reference.spec import program_levels_reference, quantize_reference, slice_reference


gran = st.sampled_from(["per-row", "per-col", "per-matrix", None, (1, 16), (3, 8), (5, 40)])


@st.composite
def cases(draw):
    n = draw(st.sampled_from([4, 8, 16, 32]))
    g_level = draw(st.sampled_from([4, 16]))
    wbits = int(np.log2(g_level))
    xw = (1,) + tuple(draw(st.lists(st.integers(1, 3), min_size=1, max_size=3)))
    ww = (1,) + tuple(draw(st.lists(st.integers(1, wbits), min_size=1, max_size=3)))
    batch = draw(st.sampled_from([None, 1, 3]))
    R, K, P = draw(st.integers(1, 17)), draw(st.integers(1, 70)), draw(st.integers(1, 45))
    radc = draw(st.sampled_from([2 ** 4, 2 ** 16, "list"]))
    if radc == "list":
        radc = [draw(st.sampled_from([2 ** 4, 2 ** 6, 2 ** 12])) for _ in ww]
    return dict(n=n, g_level=g_level, xw=xw, ww=ww, batch=batch, R=R, K=K, P=P, radc=radc,
                xp=(draw(st.sampled_from([1, 2])), n), wp=(n, draw(st.sampled_from([4, 8, 32]))),
                xg=draw(gran), wg=draw(gran), bfp=draw(st.booleans()), rdac=draw(st.sampled_from([4, 16])),
                seed=draw(st.integers(0, 2 ** 20)))


@given(cases())
def test_noise_free_engine_is_bit_identical_to_the_spec_transcription(c):
    rng = np.random.default_rng(c["seed"])
    shape = (c["R"], c["K"]) if c["batch"] is None else (c["batch"], c["R"], c["K"])
    x = rng.standard_normal(shape).astype(np.float32)
    w = (rng.standard_normal((c["K"], c["P"])) * 0.1).astype(np.float32)
    eng = DPETensor(g_level=c["g_level"], rdac=c["rdac"], radc=c["radc"], **NOISE_OFF)
    bw_e = 8 if c["bfp"] else None
    out = dpe_matmul(x, w, eng, c["xw"], c["ww"], c["xp"], c["wp"], c["xg"], c["wg"], bw_e=bw_e)
    ref = reference_product(x, w, eng, c["xw"], c["ww"], c["xp"], c["wp"], c["xg"], c["wg"], bw_e)
    assert out.shape == shape[:-1] + (c["P"],)
    np.testing.assert_array_equal(out, ref)


def test_memintelli_style_usage_with_torch_returns_torch_zero_copy():
    torch.manual_seed(0)
    x = torch.randn(2, 40, 64)
    w = torch.randn(64, 48)
    eng = DPETensor(g_level=4, rdac=4, radc=2 ** 12, **NOISE_OFF)
    ms = SlicedData(torch.tensor([1, 1, 2, 2]), is_weight=True, paral_size=(32, 32), quant_gran=(32, 32))
    xs = SlicedData([1, 1, 2, 2], paral_size=(1, 32), quant_gran=(1, 32))
    ms.slice_data_imp(eng, w)
    with pyfastpim.memory.trace() as t:
        xs.slice_data_imp(eng, x)
        y = eng(xs, ms)
    assert isinstance(y, torch.Tensor) and y.shape == (2, 40, 48) and y.dtype == torch.float32
    assert t.copies == 0
    ideal = (x @ w).numpy()
    snr = 10 * np.log10((ideal ** 2).sum() / ((ideal - y.numpy()) ** 2).sum())
    assert snr > 25  # 6-bit quantization of both operands
    y2 = eng.MapReduceDot(xs, ms)
    np.testing.assert_array_equal(y2.numpy(), y.numpy())


def test_call_counter_seed_and_reset():
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((30, 64)).astype(np.float32), rng.standard_normal((64, 20)).astype(np.float32)
    eng = DPETensor(g_level=4, rdac=4, radc=2 ** 12, read_variation=0.05, vnoise=0.05, seed=123)
    assert eng.seed == 123 and eng.calls == 0
    a = dpe_matmul(x, w, eng)
    b = dpe_matmul(x, w, eng)
    assert eng.calls == 2 and not np.array_equal(a, b)  # fresh noise every call
    eng.reset(123)
    np.testing.assert_array_equal(dpe_matmul(x, w, eng), a)
    with pyfastpim.threads(1):
        eng.reset(123)
        np.testing.assert_array_equal(dpe_matmul(x, w, eng), a)
    other = DPETensor(g_level=4, rdac=4, radc=2 ** 12, read_variation=0.05, vnoise=0.05, seed=124)
    assert not np.array_equal(dpe_matmul(x, w, other), a)
    default = DPETensor()
    assert default.seed == pyfastpim.DEFAULT_SEED


def test_reset_without_a_seed_keeps_the_engines_seed_and_its_programmed_cells():
    # reset() set the seed to DEFAULT_SEED: an engine made with seed=123 then drew other noise (no replay)
    # and re-programmed its weights with other write variation and stuck cells
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((4, 64)).astype(np.float32), rng.standard_normal((64, 20)).astype(np.float32)
    eng = DPETensor(g_level=4, rdac=4, radc=2 ** 12, read_variation=0.05, vnoise=0.05, write_variation=0.1,
                    rate_stuck_HGS=0.05, seed=123)
    xs = SlicedData([1, 1, 2, 2], paral_size=(1, 32), quant_gran=(1, 32))
    ws = SlicedData([1, 1, 2, 2], is_weight=True, paral_size=(32, 32), quant_gran=(32, 32))
    xs.slice_data_imp(eng, x)
    ws.slice_data_imp(eng, w)
    first = [eng(xs, ws) for _ in range(2)]
    cells = np.array(ws.G)
    eng.reset()
    assert eng.seed == 123 and eng.calls == 0
    for y in first:
        np.testing.assert_array_equal(eng(xs, ws), y)
    ws.slice_data_imp(eng, w)  # programmed again after reset(): the same write variation and stuck cells
    np.testing.assert_array_equal(np.array(ws.G), cells)
    eng.reset(pyfastpim.DEFAULT_SEED)  # a seed given replaces it
    assert eng.seed == pyfastpim.DEFAULT_SEED and not np.array_equal(eng(xs, ws), first[0])
    with pytest.raises(ValueError, match="seed"):
        eng.reset(-1)
    assert eng.seed == pyfastpim.DEFAULT_SEED


def test_snr_matches_the_numpy_transcription_with_its_own_noise():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((128, 256)).astype(np.float32)
    w = rng.standard_normal((256, 128)).astype(np.float32)
    ideal = x.astype(np.float64) @ w
    kw = dict(g_level=4, rdac=4, radc=2 ** 12, read_variation=0.1, vnoise=0.1, write_variation=0.0,
              rate_stuck_HGS=0.0)
    eng = DPETensor(seed=5, **kw)
    widths = (1, 1, 2, 2)

    def snr(y):
        return 10 * np.log10((ideal ** 2).sum() / ((ideal - y) ** 2).sum())
    ours = np.mean([snr(dpe_matmul(x, w, eng)) for _ in range(4)])
    qx = quantize_reference(x, (1, 32), (1, 32), widths)
    qw = quantize_reference(w, (32, 32), (32, 32), widths)
    xs, wsl = slice_reference(qx["q"], widths), slice_reference(qw["q"], widths)[:, 0]
    L = program_levels_reference(wsl, widths, 4)
    sig = np.full(4, 0.1)
    theirs = np.mean([snr(mvm_noisy(xs, qx["gran_scale"], qx["granule"], widths, L, None, qw["gran_scale"][0],
                                    qw["granule"], widths, 32, 4, 4, [2 ** 12] * 4, 1e-5, 1e-7, 0.2, sig, 0.1,
                                    np.random.default_rng(s))[0]) for s in range(4)])
    exact = snr(dpe_matmul(x, w, DPETensor(g_level=4, rdac=4, radc=2 ** 12, **NOISE_OFF)))
    assert exact > ours + 1  # the noise is really there
    assert abs(ours - theirs) < 0.3, (ours, theirs)


def test_read_variation_is_read_at_every_product():
    """MemIntelli reads engine.read_variation at every call: assigning it, or editing the dict in
    place, changes the next product's read noise (it was converted once, in __init__, and later
    assignments were silently ignored)."""
    rng = np.random.default_rng(6)
    x, w = rng.standard_normal((6, 64)).astype(np.float32), rng.standard_normal((64, 20)).astype(np.float32)
    kw = dict(g_level=4, rdac=4, radc=2 ** 12, vnoise=0.0, write_variation=0.0, rate_stuck_HGS=0.0,
              rate_stuck_LGS=0.0, seed=7)

    def product(eng):
        eng.reset(7)
        return dpe_matmul(x, w, eng)
    eng = DPETensor(read_variation=0.0, **kw)
    clean = product(eng)
    assert eng.noise_free
    eng.read_variation = 0.2
    assert not eng.noise_free and eng.read_variation == {0: 0.2, 1: 0.2, 2: 0.2, 3: 0.2}
    np.testing.assert_array_equal(product(eng), product(DPETensor(read_variation=0.2, **kw)))
    assert not np.array_equal(product(eng), clean)
    eng.read_variation = 0.0
    np.testing.assert_array_equal(product(eng), clean)
    eng.read_variation[3] = 0.3  # in place
    assert not eng.noise_free
    np.testing.assert_array_equal(product(eng), product(DPETensor(read_variation={0: 0, 1: 0, 2: 0, 3: 0.3}, **kw)))
    eng.read_variation[3] = -1.0
    with pytest.raises(ValueError, match=r"argument 'read_variation\[3\]'"):
        product(eng)
    with pytest.raises(ValueError, match="argument 'read_variation'"):
        eng.read_variation = {0: 0.1}


def test_engines_pickled_before_read_variation_was_a_property_load():
    import pickle
    eng = DPETensor(g_level=4, read_variation={0: 0.0, 1: 0.1, 2: 0.0, 3: 0.2})
    old = eng.__getstate__()
    old["read_variation"] = old.pop("_read_variation")  # the former instance attributes
    old["_read_sigma"] = np.array([0.0, 0.1, 0.0, 0.2], np.float32)
    del old["_read_sigma_cache"]
    loaded = DPETensor.__new__(DPETensor)
    loaded.__setstate__(old)
    assert loaded.read_variation == eng.read_variation and not loaded.noise_free
    again = pickle.loads(pickle.dumps(loaded))
    np.testing.assert_array_equal(again._read_sigmas(), eng._read_sigmas())


def test_write_variation_and_stuck_faults_are_fixed_per_programming():
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((20, 64)).astype(np.float32), rng.standard_normal((64, 30)).astype(np.float32)
    eng = DPETensor(g_level=4, rdac=4, radc=2 ** 12, read_variation=0.0, vnoise=0.0, write_variation=0.1,
                    rate_stuck_HGS=0.01, rate_stuck_LGS=0.01)
    a, b = dpe_matmul(x, w, eng), dpe_matmul(x, w, eng)
    np.testing.assert_array_equal(a, b)  # no per-call noise: programming is deterministic
    clean = dpe_matmul(x, w, DPETensor(g_level=4, rdac=4, radc=2 ** 12, **NOISE_OFF))
    assert not np.array_equal(a, clean)


def test_engine_parameter_validation():
    with pytest.raises(ValueError, match="argument 'radc'"):
        DPETensor(radc=1)
    with pytest.raises(ValueError, match="argument 'radc'"):
        DPETensor(radc=[16, 1])
    with pytest.raises(ValueError, match="argument 'rdac'"):
        DPETensor(rdac=1)
    with pytest.raises(ValueError, match="argument 'g_level'"):
        DPETensor(g_level=1)
    with pytest.raises(ValueError, match="argument 'LGS'"):
        DPETensor(HGS=1e-7, LGS=1e-5)
    with pytest.raises(ValueError, match="rate_stuck_HGS \\+ rate_stuck_LGS exceeds 1"):
        DPETensor(rate_stuck_HGS=0.7, rate_stuck_LGS=0.5)
    with pytest.raises(ValueError, match="read_variation"):
        DPETensor(g_level=4, read_variation={0: 0.1, 1: 0.1})
    with pytest.raises(TypeError, match=r"^argument 'read_variation': expected a real number .* got str$"):
        DPETensor(read_variation="big")  # a wrong type: the type rule's TypeError (test_scalar_arguments.py)
    with pytest.raises(ValueError, match="vnoise"):
        DPETensor(vnoise=-1)
    with pytest.raises(TypeError, match="g_level"):
        DPETensor(g_level=4.5)
    with pytest.raises(ValueError, match="seed"):
        DPETensor(seed=-3)
    with pytest.raises(ValueError, match="device"):
        DPETensor(device="tpu")
    with pytest.raises(ValueError, match="radc"):
        DPETensor(radc=2 ** 40)
    with pytest.raises(ValueError, match="rdac"):
        DPETensor(rdac=2 ** 31)


def test_product_errors():
    rng = np.random.default_rng(4)
    x, w = rng.standard_normal((8, 64)).astype(np.float32), rng.standard_normal((64, 8)).astype(np.float32)
    eng = DPETensor(g_level=4, rdac=4, radc=[2 ** 12] * 3, **NOISE_OFF)
    with pytest.raises(ValueError, match="radc"):
        dpe_matmul(x, w, eng, weight_slice=(1, 1, 2, 2))
    eng = DPETensor(g_level=4, rdac=4, radc=2 ** 12, **NOISE_OFF)
    with pytest.raises(ValueError, match="mismatch"):
        dpe_matmul(x, w[:60], eng)
    with pytest.raises(ValueError, match="paral_size"):
        dpe_matmul(x, w, eng, input_paral_size=(1, 16), input_quant_gran=(1, 16))
    with pytest.raises(ValueError):
        dpe_matmul(x, w, eng, weight_slice=(1, 3))  # 3-bit weight slice on a 4-level cell
    with pytest.raises(ValueError, match="wire_resistance"):
        DPETensor(wire_resistance=-1.0)
    # wire_resistance > 0 is implemented (IR drop, tests/core/test_physics.py): a finite product
    assert np.isfinite(dpe_matmul(x, w, DPETensor(wire_resistance=1.0))).all()
    with pytest.raises(TypeError, match="engine"):
        dpe_matmul(x, w, object())
    with pytest.raises(TypeError):
        eng(x, w)  # raw arrays are not SlicedData


def test_batched_input_is_processed_in_bounded_memory():
    # peak core memory must not scale with the batch beyond the output itself
    rng = np.random.default_rng(6)
    w = rng.standard_normal((256, 64)).astype(np.float32)
    eng = DPETensor(g_level=4, rdac=4, radc=2 ** 12, read_variation=0.05, vnoise=0.05)
    ws = SlicedData([1, 1, 2, 2], is_weight=True, paral_size=(32, 32), quant_gran=(32, 32), inference=True)
    ws.slice_data_imp(eng, w)
    peaks = []
    for batch in (64, 256):
        x = rng.standard_normal((batch, 64, 256)).astype(np.float32)
        xs = SlicedData([1, 1, 2, 2], paral_size=(1, 32), quant_gran=(1, 32), inference=True)
        xs.slice_data_imp(eng, x)
        with pyfastpim.memory.trace() as t:
            y = eng(xs, ws)
        peaks.append(t.peak_bytes - y.nbytes)
    assert peaks[1] <= 48 << 20, peaks  # packed-input chunk cap (32 MiB) + weights panel


@pytest.mark.parametrize("ks, stride, padding, dilation", [
    ((3, 3), 1, 1, 1), ((3, 2), (2, 1), (0, 2), (1, 2)), ((1, 3), (1, 3), (2, 0), (2, 1)), (2, 2, 0, 1)])
@pytest.mark.parametrize("noisy", [False, True])
def test_implicit_im2col_conv_equals_unfold_then_mapreducedot(ks, stride, padding, dilation, noisy):
    torch.manual_seed(0)
    x = torch.randn(2, 5, 9, 8)
    kh, kw = (ks, ks) if isinstance(ks, int) else ks
    W = torch.randn(7, 5, kh, kw)
    kw_ = dict(NOISE_OFF) if not noisy else dict(read_variation=0.05, vnoise=0.05, write_variation=0.02)
    eng = DPETensor(g_level=4, rdac=4, radc=2 ** 12, seed=9, **kw_)
    ws = SlicedData([1, 1, 2, 2], is_weight=True, paral_size=(8, 8), quant_gran=(8, 8))
    ws.slice_data_imp(eng, W.reshape(7, -1).T)
    with pyfastpim.memory.trace() as t:
        out, xq = eng.forward_conv2d(x, ws, ks, stride, padding, dilation, (1, 1, 2, 2), (1, 8), (1, 8),
                                     return_dequant=True)
    assert t.copies == 0
    U = torch.nn.functional.unfold(x, (kh, kw), dilation=dilation, padding=padding, stride=stride).transpose(1, 2)
    xs = SlicedData([1, 1, 2, 2], paral_size=(1, 8), quant_gran=(1, 8))
    xs.slice_data_imp(eng, U.contiguous())
    eng.reset(9)
    ref = eng(xs, ws)
    assert out.shape[:2] == (2, 7) and out.shape[2] * out.shape[3] == U.shape[1]
    assert torch.equal(out.reshape(2, 7, -1).transpose(1, 2), ref)
    assert torch.equal(xq, torch.from_numpy(xs._dequant))


def test_bw_e_zero_is_int_quantization_in_every_product():
    # docs/semantics.md section 4: bw_e = 0 selects INT, as None. forward_conv2d quantized its input as BFP
    # (it tested `bw_e is not None`), and the operand checks refused bw_e=0 beside None as a BFP / INT mix
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 7, 6)).astype(np.float32)
    w = rng.standard_normal((27, 5)).astype(np.float32)
    U = np.ascontiguousarray(torch.nn.functional.unfold(torch.from_numpy(x), 3).transpose(1, 2).numpy())
    eng = DPETensor(g_level=4, rdac=4, radc=2 ** 12, **NOISE_OFF)
    ref = reference_product(U, w, eng, (1, 1, 2, 2), (1, 1, 2), (1, 8), (8, 8), (1, 8), (8, 8))
    for w_bw_e in (0, None):
        ws = SlicedData((1, 1, 2), bw_e=w_bw_e, is_weight=True, paral_size=(8, 8), quant_gran=(8, 8))
        ws.slice_data_imp(eng, w)
        out, xq = eng.forward_conv2d(x, ws, 3, input_slice=(1, 1, 2, 2), input_paral_size=(1, 8),
                                     input_quant_gran=(1, 8), bw_e=0, return_dequant=True)
        np.testing.assert_array_equal(out.reshape(2, 5, -1).transpose(0, 2, 1), ref)
        np.testing.assert_array_equal(xq, quantize_reference(U, (1, 8), (1, 8), (1, 1, 2, 2))["dequant"])
        lin, _ = eng.forward_linear(U, ws, (1, 1, 2, 2), (1, 8), (1, 8), bw_e=0)
        np.testing.assert_array_equal(lin, ref)
        xs = SlicedData((1, 1, 2, 2), bw_e=0 if w_bw_e is None else None, paral_size=(1, 8), quant_gran=(1, 8))
        xs.slice_data_imp(eng, U)
        np.testing.assert_array_equal(eng(xs, ws), ref)
    with pytest.raises(ValueError, match="bw_e"):
        eng.forward_conv2d(x, ws, 3, input_slice=(1, 1, 2, 2), input_paral_size=(1, 8), bw_e=-1)


def test_conv_inference_allocates_no_unfolded_input():
    eng = DPETensor(g_level=4, rdac=4, radc=2 ** 12, read_variation=0.05, vnoise=0.05)
    x = torch.randn(4, 32, 32, 32)
    ws = SlicedData([1, 1, 2, 2], is_weight=True, paral_size=(32, 32), quant_gran=(32, 32))
    ws.slice_data_imp(eng, torch.randn(32 * 9, 16))
    with pyfastpim.memory.trace() as t:
        out, xq = eng.forward_conv2d(x, ws, 3, 1, 1, 1)
    unfolded = 4 * 32 * 32 * 32 * 9 * 4
    assert xq is None
    # output + packed weights + one packed row block per thread: no im2col matrix
    assert t.peak_bytes < out.numel() * 4 + unfolded / 4, (t.peak_bytes, unfolded)


def test_conv_errors():
    eng = DPETensor(**NOISE_OFF)
    ws = SlicedData([1, 1, 2, 2], is_weight=True, paral_size=(32, 32), quant_gran=(32, 32))
    ws.slice_data_imp(eng, torch.randn(27, 4))
    with pytest.raises(ValueError, match="4-D"):
        eng.forward_conv2d(torch.randn(3, 8, 8), ws, 3)
    with pytest.raises(ValueError, match="channels"):
        eng.forward_conv2d(torch.randn(1, 4, 8, 8), ws, 3)
    with pytest.raises(ValueError, match="stride"):
        eng.forward_conv2d(torch.randn(1, 3, 8, 8), ws, 3, stride=0)
    with pytest.raises(ValueError, match="smaller than the dilated kernel"):
        eng.forward_conv2d(torch.randn(1, 3, 2, 2), ws, 3)
    with pytest.raises(ValueError, match="NaN"):
        eng.forward_conv2d(torch.full((1, 3, 8, 8), float("nan")), ws, 3)
    with pytest.raises(ValueError, match="paral_size"):
        eng.forward_conv2d(torch.randn(1, 3, 8, 8), ws, 3, input_paral_size=(1, 16))


def test_forward_linear_matches_mapreducedot():
    eng = DPETensor(g_level=4, rdac=4, radc=2 ** 12, **NOISE_OFF)
    x, w = torch.randn(3, 10, 64), torch.randn(64, 20)
    ws = SlicedData([1, 1, 2, 2], is_weight=True, paral_size=(32, 32), quant_gran=(32, 32))
    ws.slice_data_imp(eng, w)
    out, xq = eng.forward_linear(x, ws, (1, 1, 2, 2), (1, 32), (1, 32), return_dequant=True)
    xs = SlicedData([1, 1, 2, 2], paral_size=(1, 32), quant_gran=(1, 32))
    xs.slice_data_imp(eng, x)
    assert torch.equal(out, eng(xs, ws)) and torch.equal(xq, torch.from_numpy(xs._dequant))
    out2, none = eng.forward_linear(x[0], ws, (1, 1, 2, 2))
    assert none is None and torch.equal(out2, out[0])


def test_exact_sums_checked_once_per_product_naming_its_arguments(monkeypatch):
    # forward_linear checked (rdac-1)*(g_level-1)*rows once naming weight_paral_size, then again in every
    # chunk's operand checks naming paral_size; dpe_matmul three times
    import pyfastpim.dpe as dpe_mod
    rng = np.random.default_rng(9)
    x = rng.standard_normal((7, 12, 64)).astype(np.float32)
    eng = DPETensor(g_level=4, rdac=4, seed=4)
    ws = SlicedData([1, 1, 2, 2], is_weight=True, paral_size=(32, 32), quant_gran=(32, 32))
    ws.slice_data_imp(eng, rng.standard_normal((64, 24)).astype(np.float32))
    xs = SlicedData([1, 1, 2, 2], paral_size=(1, 32), quant_gran=(1, 32))
    xs.slice_data_imp(eng, x[0])
    seen = []
    check = DPETensor._check_exact_sums
    monkeypatch.setattr(DPETensor, "_check_exact_sums", lambda self, rows, names: (seen.append(names[0]),
                                                                                  check(self, rows, names)))
    for chunk in (None, 12 * 64 * 4 * 3):  # one chunk; 3 items per chunk
        if chunk:
            monkeypatch.setattr(dpe_mod, "_CHUNK_CODE_BYTES", chunk)
        for call, names in ((lambda: eng.forward_linear(x, ws, (1, 1, 2, 2)), ["weight_paral_size"]),
                            (lambda: eng.forward_linear(x[:0], ws, (1, 1, 2, 2)), ["weight_paral_size"]),
                            (lambda: dpe_matmul(x, x[0, :24].T, eng), ["weight_paral_size"]),
                            (lambda: eng.MapReduceDot(xs, ws), ["paral_size"])):
            seen.clear()
            call()
            assert seen == names


@pytest.mark.parametrize("as_torch", [False, True])
def test_chunked_batches_equal_one_call_including_noise(monkeypatch, as_torch):
    import pyfastpim.dpe as dpe_mod
    rng = np.random.default_rng(8)
    x = rng.standard_normal((7, 12, 64)).astype(np.float32)
    w = rng.standard_normal((64, 24)).astype(np.float32)
    if as_torch:
        x = torch.from_numpy(x)
    eng = DPETensor(g_level=4, rdac=4, radc=2 ** 12, read_variation=0.05, vnoise=0.05, seed=4)
    ws = SlicedData([1, 1, 2, 2], is_weight=True, paral_size=(32, 32), quant_gran=(32, 32))
    ws.slice_data_imp(eng, w)
    with pyfastpim.memory.trace() as t_whole:
        whole, dq_whole = eng.forward_linear(x, ws, (1, 1, 2, 2), return_dequant=True)
    monkeypatch.setattr(dpe_mod, "_CHUNK_CODE_BYTES", 12 * 64 * 4 * 3)  # 3 items per chunk
    eng.reset(4)
    with pyfastpim.memory.trace() as t:
        parts, dq_parts = eng.forward_linear(x, ws, (1, 1, 2, 2), return_dequant=True)
    assert eng.calls == 1  # one logical call
    assert type(parts) is type(whole)
    np.testing.assert_array_equal(np.asarray(parts), np.asarray(whole))
    np.testing.assert_array_equal(np.asarray(dq_parts), np.asarray(dq_whole))
    # one chunk of codes and dequantized input at a time instead of the whole batch's
    saved = 4 * 12 * 64 * (4 + 4)  # the 4 items a chunk does not hold: 4 slice planes of codes, float dequant
    assert t.peak_bytes <= t_whole.peak_bytes - saved, (t.peak_bytes, t_whole.peak_bytes)
