"""Bit-slicing quantizer and weight programming (spec 1-6) against tests/reference/spec.py."""
import types

import numpy as np
import pytest
try:
    import torch
except ImportError:  # numpy-only install: conftest skips the tests that use torch
    torch = None
from hypothesis import given, strategies as st

import pyfastpim
from pyfastpim import _core, memory
from pyfastpim.sliced import SlicedData, program_weights, slice_params, slice_quantize
from reference import spec

GRANS = [None, "per-row", "per-col", "per-matrix"]


def engine(**kw):
    base = dict(g_level=16, HGS=1e-5, LGS=1e-7, write_variation=0.0, rate_stuck_HGS=0.0, rate_stuck_LGS=0.0)
    base.update(kw)
    return types.SimpleNamespace(**base)


# ---------------------------------------------------------------- strategies

@st.composite
def slice_methods(draw):
    rest = draw(st.lists(st.integers(1, 8), min_size=0, max_size=5))
    widths = [1] + rest
    while sum(widths) > 16:
        widths.pop()
    if sum(widths) < 2:
        widths.append(1)
    return tuple(widths)


@st.composite
def cases(draw):
    batched = draw(st.booleans())
    n = draw(st.integers(1, 3)) if batched else None
    R, C = draw(st.integers(1, 37)), draw(st.integers(1, 37))
    paral = (draw(st.integers(1, 9)), draw(st.integers(1, 9)))
    gran = draw(st.one_of(st.sampled_from(GRANS), st.tuples(st.integers(1, 20), st.integers(1, 20))))
    widths = draw(slice_methods())
    bw_e = draw(st.sampled_from([None, None, 4]))
    seed = draw(st.integers(0, 2 ** 31))
    kind = draw(st.sampled_from(["normal", "ties", "sparse", "tiny", "huge"]))
    rng = np.random.default_rng(seed)
    shape = (R, C) if n is None else (n, R, C)
    if kind == "normal":
        x = rng.standard_normal(shape) * 10.0 ** rng.uniform(-3, 3)
    elif kind == "ties":  # a coarse grid hits x / M * K = k + 0.5 and BFP half steps
        x = rng.integers(-16, 17, shape) / 8.0
    elif kind == "sparse":  # whole zero granules
        x = rng.standard_normal(shape) * (rng.random(shape) < 0.05)
    elif kind == "tiny":
        x = rng.standard_normal(shape) * 1e-38
    else:
        x = rng.standard_normal(shape) * 1e37
    return x.astype(np.float32), paral, gran, widths, bw_e


def check_against_reference(x, paral, gran, widths, bw_e):
    ref = spec.quantize_reference(x, paral, gran, widths, bw_e)
    r = slice_quantize(x, widths, paral, gran, bw_e=bw_e, dequant=True)
    N = 1 if x.ndim == 2 else x.shape[0]
    S = len(widths)
    assert r.granule == ref["granule"]
    assert r.codes.dtype == np.uint8 and r.codes.shape == (S, N) + x.shape[-2:]
    np.testing.assert_array_equal(r.codes, spec.slice_reference(ref["q"], widths))
    _, w, _ = spec.slice_params(widths)
    np.testing.assert_array_equal(np.tensordot(w, r.codes.astype(np.int64), axes=1), ref["q"])
    for key in ("gran_max", "gran_scale", "dequant"):
        got = getattr(r, key)
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got.view(np.uint32), ref[key].view(np.uint32), err_msg=key)  # bit-identical
    if bw_e:
        assert r.gran_exp.dtype == np.int32
        np.testing.assert_array_equal(r.gran_exp, ref["gran_exp"])
    else:
        assert r.gran_exp is None
    assert np.all(np.isfinite(r.dequant))
    return r, ref


# ---------------------------------------------------------------- spec equality

@given(cases())
def test_matches_reference_bit_for_bit(case):
    check_against_reference(*case)


@pytest.mark.parametrize("bw_e", [None, 3])
@pytest.mark.parametrize("gran", GRANS + [(5, 7), (1, 1), (100, 100)])
def test_granularities_with_ragged_shapes(gran, bw_e):
    x = np.random.default_rng(3).standard_normal((2, 23, 19)).astype(np.float32)
    check_against_reference(x, (4, 6), gran, (1, 1, 2, 2), bw_e)


def test_slice_params_reference_and_module_agree():
    for widths in [(1, 1, 2, 2), (1, 7), (1, 1), (1, 2, 3, 4, 5), (1,) * 16]:
        m, w, off = spec.slice_params(widths)
        for a, b in zip(slice_params(widths), (m, w, off)):
            np.testing.assert_array_equal(a, b)
    m, w, off = spec.slice_params((1, 1, 2, 2))
    assert list(m) == [3, 3, 1, 1] and list(w) == [1, 4, 16, -32] and list(off) == [0, 2, 4, 5]


def test_resolve_granule_reference():
    assert spec.resolve_granule(10, 20, (4, 8), None) == (4, 8)
    assert spec.resolve_granule(10, 20, (4, 8), "per-row") == (4, 24)
    assert spec.resolve_granule(10, 20, (4, 8), "per-col") == (12, 8)
    assert spec.resolve_granule(10, 20, (4, 8), "per-matrix") == (12, 24)
    assert spec.resolve_granule(10, 20, (4, 8), (5, 3)) == (8, 8)


def test_rounding_is_half_to_even_not_away_from_zero():
    # INT, B = 4 (K = 7), M = 7: x / 7 * 7 = x exactly, so x = k + 0.5 are ties.
    x = np.array([[7.0, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.5]], dtype=np.float32)
    r = slice_quantize(x, (1, 1, 2), (1, 8), "per-matrix")
    _, w, _ = slice_params((1, 1, 2))
    q = np.tensordot(w, r.codes.astype(np.int64), axes=1)[0, 0]
    assert list(q) == [7, 0, 2, 2, 0, -2, -2, 4]
    # BFP, B = 4: M = 1 -> e = 0, q = rint(x * 4): 0.125 -> 0.5 -> 0, 0.375 -> 1.5 -> 2; clip at 7
    x = np.array([[1.0, 0.125, 0.375, -0.125, -0.625, 0.99]], dtype=np.float32)
    r = slice_quantize(x, (1, 1, 2), (1, 6), "per-matrix", bw_e=2)
    q = np.tensordot(w, r.codes.astype(np.int64), axes=1)[0, 0]
    assert list(q) == [4, 0, 2, 0, -2, 4] and r.gran_exp[0, 0, 0] == 0


def test_bfp_clips_to_the_two_complement_range():
    # M just below 2 -> e = 0, q = rint(1.99 * 4) = 8 is clipped to 2**(B-1) - 1 = 7
    x = np.array([[1.99, -1.99, 0.0]], dtype=np.float32)
    r, ref = check_against_reference(x, (1, 1), "per-matrix", (1, 1, 2), 2)
    assert list(ref["q"][0, 0]) == [7, -8, 0]


@pytest.mark.parametrize("bw_e", [None, 5])
def test_zero_granules_give_zeros_not_nan(bw_e):
    x = np.zeros((2, 9, 10), dtype=np.float32)
    x[1, 0, 0] = 3.0
    x[0, 5:, 5:] = -0.0
    r, _ = check_against_reference(x, (3, 5), None, (1, 2, 3), bw_e)
    assert np.all(r.codes[:, 0] == 0) and np.all(r.dequant[0] == 0) and np.all(np.isfinite(r.gran_scale))
    if bw_e is None:
        assert r.gran_scale[0].max() == 0 and r.gran_max[0].max() == 0


def test_results_do_not_depend_on_thread_count():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, 130, 203)).astype(np.float32)
    for gran in [None, "per-row", "per-col", "per-matrix", (64, 64)]:  # fused and split max passes
        for bw_e in (None, 4):
            outs = []
            for n in (1, 2):
                with pyfastpim.threads(n):
                    outs.append(slice_quantize(x, (1, 1, 2, 2), (8, 16), gran, bw_e=bw_e, dequant=True))
            for a, b in zip(outs[0][:5], outs[1][:5]):
                if a is not None:
                    np.testing.assert_array_equal(a, b)


def test_isa_paths_agree_with_reference(isa):  # every ISA this CPU has (the `isa` fixture)
    x = (np.random.default_rng(6).integers(-64, 65, (2, 33, 47)) / 16).astype(np.float32)
    for bw_e in (None, 3):
        check_against_reference(x, (4, 4), (5, 9), (1, 2, 2, 3), bw_e)


# ---------------------------------------------------------------- copies and memory

def test_float64_input_counts_exactly_one_conversion():
    x = np.random.default_rng(7).standard_normal((2, 20, 30))
    with memory.trace() as t:
        r = slice_quantize(x, (1, 1, 2, 2), (4, 4))
    assert t.by_kind["dtype_conversion"] == (1, x.size * 4) and t.copies == 1
    np.testing.assert_array_equal(r.codes, slice_quantize(x.astype(np.float32), (1, 1, 2, 2), (4, 4)).codes)


def test_torch_input_is_not_copied():
    x = torch.randn(3, 17, 29, requires_grad=True)
    with memory.trace() as t:
        r = slice_quantize(x, (1, 3, 4), (4, 8), "per-row", dequant=True)
    assert t.copies == 0
    check = slice_quantize(x.detach().numpy(), (1, 3, 4), (4, 8), "per-row", dequant=True)
    np.testing.assert_array_equal(r.codes, check.codes)
    np.testing.assert_array_equal(r.dequant, check.dequant)


@pytest.mark.parametrize("gran", [(1, 32), "per-matrix"])
def test_no_allocation_beyond_the_outputs(gran):
    x = np.random.default_rng(8).standard_normal((300, 257)).astype(np.float32)
    with memory.trace() as t:
        r = slice_quantize(x, (1, 1, 2, 2), (1, 32), gran, bw_e=3, dequant=True, g_level=4)
    out_bytes = sum(a.nbytes for a in r[:6] if a is not None)
    assert t.copies == 0 and t.peak_bytes == out_bytes == t.allocated_bytes
    del r


# ---------------------------------------------------------------- weight programming

@given(slice_methods(), st.integers(1, 40), st.integers(1, 40), st.integers(0, 2 ** 31))
def test_programmed_levels_match_reference(widths, C, P, seed):
    widths = tuple(min(w, 4) for w in widths)  # g_level 16 holds 4-bit slices
    w = np.random.default_rng(seed).standard_normal((C, P)).astype(np.float32)
    r = slice_quantize(w, widths, (8, 8), None, g_level=16)
    ref_codes = spec.slice_reference(spec.quantize_reference(w, (8, 8), None, widths)["q"], widths)
    np.testing.assert_array_equal(r.levels, spec.program_levels_reference(ref_codes, widths, 16))
    levels, g = program_weights(r.codes, widths, 16)  # the standalone path agrees
    np.testing.assert_array_equal(levels, r.levels[:, 0])
    np.testing.assert_array_equal(g, spec.program_conductance_noise_free(levels, 16, 1e-5, 1e-7))


@pytest.mark.parametrize("g_level", [2, 5, 8, 256])
def test_levels_for_uneven_level_counts(g_level):
    widths = (1, 1) if g_level < 4 else (1, 2)
    codes = np.array([[[0, 1, 1]], [[1, 0, 1]]], dtype=np.uint8) if widths == (1, 1) else \
        np.array([[[0, 1, 2, 3]], [[1, 0, 1, 0]]], dtype=np.uint8)
    levels, _ = program_weights(codes, widths, g_level)
    np.testing.assert_array_equal(levels, spec.program_levels_reference(codes, widths, g_level))


def test_sliced_weights_program_conductance_noise_free():
    w = torch.randn(40, 24)
    sd = SlicedData((1, 1, 2), is_weight=True, paral_size=(8, 8))
    sd.slice_data_imp(engine(g_level=4), w)
    assert sd._conductance is None and sd._levels.shape == (3, 40, 24) and sd._levels.dtype == np.uint8
    ref_codes = spec.slice_reference(spec.quantize_reference(w.numpy(), (8, 8), None, (1, 1, 2))["q"], (1, 1, 2))[:, 0]
    np.testing.assert_array_equal(sd._levels, spec.program_levels_reference(ref_codes, (1, 1, 2), 4))
    G = sd.G
    assert isinstance(G, torch.Tensor) and tuple(G.shape) == (5, 3, 3, 8, 8) and G.dtype == torch.float32
    g_ref = spec.program_conductance_noise_free(sd._levels, 4, 1e-5, 1e-7)
    blocks = np.full((3, 40, 24), np.float32(1e-7), dtype=np.float32)
    blocks[:] = g_ref
    np.testing.assert_array_equal(G.numpy(), blocks.reshape(3, 5, 8, 3, 8).transpose(1, 3, 0, 2, 4))


def programmed(wv=0.0, rh=0.0, rl=0.0, seed=None, shape=(256, 200)):
    w = np.random.default_rng(11).standard_normal(shape).astype(np.float32)
    eng = engine(write_variation=wv, rate_stuck_HGS=rh, rate_stuck_LGS=rl)
    if seed is not None:
        eng.program_seed = seed
    sd = SlicedData((1, 1, 2), is_weight=True, paral_size=(32, 32), inference=True)
    sd.slice_data_imp(eng, w)
    return sd


def test_write_variation_statistics():
    wv = 0.05
    sd = programmed(wv=wv)
    g0 = spec.program_conductance_noise_free(sd._levels, 16, 1e-5, 1e-7).astype(np.float64)
    rel = (sd._conductance.astype(np.float64) - g0) / g0
    n = rel.size
    assert abs(rel.mean()) < 5 * wv / np.sqrt(n)
    assert abs(rel.std() - wv) < 5 * wv / np.sqrt(2 * n)
    assert sd._conductance.dtype == np.float32 and sd._conductance.shape == sd._levels.shape


def test_stuck_at_fault_fractions():
    rh, rl = 0.02, 0.05
    sd = programmed(rh=rh, rl=rl)
    g = sd._conductance
    n = g.size
    g0 = spec.program_conductance_noise_free(sd._levels, 16, 1e-5, 1e-7)
    at_h = (g == np.float32(1e-5)) & (g0 != np.float32(1e-5))
    at_l = (g == np.float32(1e-7)) & (g0 != np.float32(1e-7))
    # cells already at a rail may also be stuck there: count among the others only
    for frac, rate, pool in [(at_h.sum() / (g0 != np.float32(1e-5)).sum(), rh, (g0 != np.float32(1e-5)).sum()),
                             (at_l.sum() / (g0 != np.float32(1e-7)).sum(), rl, (g0 != np.float32(1e-7)).sum())]:
        assert abs(frac - rate) < 5 * np.sqrt(rate * (1 - rate) / pool)
    changed = g != g0
    assert changed.sum() <= (at_h | at_l).sum() and n > 10000


def test_programming_is_deterministic_and_seeded():
    a, b = programmed(wv=0.03, rh=0.01), programmed(wv=0.03, rh=0.01)
    np.testing.assert_array_equal(a._conductance, b._conductance)
    c = programmed(wv=0.03, rh=0.01, seed=_core.DEFAULT_SEED)
    np.testing.assert_array_equal(a._conductance, c._conductance)
    d = programmed(wv=0.03, rh=0.01, seed=12345)
    assert np.mean(a._conductance != d._conductance) > 0.9


def test_noise_index_is_the_flat_cell_index():
    levels = np.random.default_rng(12).integers(0, 16, (3, 7, 11)).astype(np.uint8)
    args = (16, 1e-5, 1e-7, 0.1, 0.01, 0.02, 99)
    g = np.asarray(_core.program_conductance(levels, *args))
    flat = np.asarray(_core.program_conductance(levels.reshape(1, 1, -1), *args))
    np.testing.assert_array_equal(g.ravel(), flat.ravel())


def test_weight_slice_too_wide_for_g_level():
    sd = SlicedData((1, 1, 4), is_weight=True, paral_size=(4, 4))
    with pytest.raises(ValueError, match="g_level"):
        sd.slice_data_imp(engine(g_level=8), np.ones((4, 4), np.float32))
    with pytest.raises(ValueError, match="g_level"):
        program_weights(np.zeros((3, 2, 2), np.uint8), (1, 1, 4), 8)
    with pytest.raises(ValueError, match="codes"):
        program_weights(np.full((3, 2, 2), 2, np.uint8), (1, 1, 1), 8)


# ---------------------------------------------------------------- SlicedData (MemIntelli API)

@pytest.mark.parametrize("batched", [False, True])
@pytest.mark.parametrize("bw_e", [None, 4])
def test_memintelli_layout_accessors(batched, bw_e):
    rng = np.random.default_rng(13)
    shape = (2, 21, 13) if batched else (21, 13)
    x = torch.from_numpy(rng.standard_normal(shape).astype(np.float32))
    widths = torch.tensor([1, 1, 2, 2])
    sd = SlicedData(widths, bw_e=bw_e, paral_size=(4, 3), quant_gran=(6, 5))
    sd.slice_data_imp(None, x)
    ref = spec.quantize_reference(x.numpy(), (4, 3), (6, 5), (1, 1, 2, 2), bw_e)
    qr, qc = ref["granule"]
    assert (qr, qc) == sd._granule == (8, 6)
    N, Rp, Cp = (2 if batched else 1), 24, 18
    lead = (2,) if batched else ()
    sliced = sd.sliced_data
    assert isinstance(sliced, torch.Tensor) and sliced.dtype == torch.uint8
    assert tuple(sliced.shape) == lead + (Rp // 4, Cp // 3, 4, 4, 3)
    # blocks times sliced_weights recombine to the padded q
    q_blocks = torch.einsum("...sij,s->...ij", sliced.double(), sd.sliced_weights.double()).numpy()
    q_pad = np.zeros((N, Rp, Cp))
    q_pad[:, :21, :13] = ref["q"]
    q_pad = q_pad.reshape(N, Rp // 4, 4, Cp // 3, 3).transpose(0, 1, 3, 2, 4)
    np.testing.assert_array_equal(q_blocks, q_pad if batched else q_pad[0])
    md = sd.max_data
    assert tuple(md.shape) == lead + (Rp // 4, Cp // 3, 1, 1)
    per_block = np.repeat(np.repeat(ref["gran_max"], 2, axis=1), 2, axis=2)
    np.testing.assert_array_equal(md.numpy()[..., 0, 0], per_block if batched else per_block[0])
    qd = sd.quantized_data
    assert tuple(qd.shape) == shape and qd.dtype == torch.float32
    np.testing.assert_array_equal(qd.numpy(), ref["dequant"] if batched else ref["dequant"][0])
    if bw_e:
        eb = sd.e_bias.numpy()[..., 0, 0]
        e_ref = np.repeat(np.repeat(ref["gran_exp"], 2, axis=1), 2, axis=2).astype(np.float32)
        np.testing.assert_array_equal(eb, e_ref if batched else e_ref[0])
    else:
        assert sd.e_bias is None
    assert sd.G is None and len(sd) == 4 and sd.shape == shape and sd._is_torch
    assert sd._data_2d == (not batched) and sd._codes.shape == (4, N, 21, 13)
    np.testing.assert_array_equal(sd.sliced_max_weights.numpy(), [3, 3, 1, 1])
    np.testing.assert_array_equal(sd.sliced_weights.numpy(), [1, 4, 16, -32])


def test_inference_mode_recomputes_quantized_data_bit_identically():
    x = np.random.default_rng(14).standard_normal((3, 19, 23)).astype(np.float32)
    x[0, :8, :8] = 0
    for bw_e in (None, 3):
        a = SlicedData((1, 2, 3), bw_e=bw_e, paral_size=(8, 8), inference=True)
        b = SlicedData((1, 2, 3), bw_e=bw_e, paral_size=(8, 8))
        a.slice_data_imp(None, x)
        b.slice_data_imp(None, x)
        assert a._dequant is None and b._dequant is not None and not a._is_torch
        np.testing.assert_array_equal(a.quantized_data.numpy().view(np.uint32),
                                      b.quantized_data.numpy().view(np.uint32))


@pytest.mark.parametrize("inference", [False, True])
def test_quantized_data_is_a_new_tensor_at_each_access(inference):
    """README: each attribute access builds a new tensor, so in-place edits are not seen. quantized_data
    returned the dequantized values kept from slicing (inference=False) as they were: an edit of the
    result changed what the next access, a copy.copy of the object and a layer's backward (Wq) read."""
    import copy
    x = np.random.default_rng(16).standard_normal((5, 40)).astype(np.float32)
    sd = SlicedData((1, 2, 3), paral_size=(1, 32), quant_gran=(1, 32), inference=inference)
    sd.slice_data_imp(None, x)
    clone = copy.copy(sd)
    want = np.array(sd.quantized_data)
    q = sd.quantized_data
    q[...] = 0  # an in-place edit of the returned tensor (torch) or array (NumPy only)
    np.testing.assert_array_equal(np.asarray(sd.quantized_data), want)
    np.testing.assert_array_equal(np.asarray(clone.quantized_data), want)


def test_layer_backward_does_not_see_an_edit_of_quantized_data():
    torch = pytest.importorskip("torch")
    from pyfastpim.nn import LinearMem
    torch.manual_seed(0)
    layer = LinearMem(pyfastpim.DPETensor(read_variation=0.0, vnoise=0.0, **vars(engine())), 40, 8, (1, 1, 2),
                      (1, 1, 2), bias=False)
    x = torch.randn(3, 40, requires_grad=True)

    def grad():
        x.grad = None
        layer(x).sum().backward()
        return x.grad.clone()

    want = grad()
    layer.weight_sliced.quantized_data.mul_(0)
    assert torch.equal(grad(), want)


def test_transpose_equals_slicing_the_transposed_data():
    x = np.random.default_rng(15).standard_normal((3, 17, 29)).astype(np.float32)
    for gran in ["per-row", (5, 9), None]:
        sd = SlicedData((1, 1, 3), bw_e=None, paral_size=(4, 8), quant_gran=gran)
        sd.slice_data_imp(None, x)
        t = sd.t()
        direct = SlicedData((1, 1, 3), paral_size=(8, 4), quant_gran={"per-row": "per-col"}.get(gran, gran if gran is None else gran[::-1]))
        direct.slice_data_imp(None, np.ascontiguousarray(x.transpose(0, 2, 1)))
        assert t.paral_size == (8, 4) and t.shape == (3, 29, 17) and t._granule == direct._granule
        for key in ("_codes", "_gran_max", "_gran_scale", "_dequant"):
            np.testing.assert_array_equal(getattr(t, key), getattr(direct, key))
        assert t._version > sd._version
    w = SlicedData((1, 1, 2), is_weight=True, paral_size=(4, 4))
    w.slice_data_imp(engine(write_variation=0.1), np.random.default_rng(1).standard_normal((8, 12)))
    wt = w.t()
    np.testing.assert_array_equal(wt._conductance, w._conductance.transpose(0, 2, 1))
    if torch is None:
        pytest.skip("the rest checks .G, a torch tensor: torch is not installed")
    np.testing.assert_array_equal(wt.G.numpy(), w.G.numpy().transpose(1, 0, 2, 4, 3))


def test_version_increments_and_slice_method_forms():
    forms = [[1, 1, 2], (1, 1, 2), np.array([1, 1, 2]), torch.tensor([1, 1, 2]), torch.tensor([1.0, 1.0, 2.0])]
    x = np.random.default_rng(16).standard_normal((5, 6)).astype(np.float32)
    codes = []
    for f in forms:
        sd = SlicedData(f, paral_size=(2, 2))
        assert sd.slice_method is f and sd._widths == (1, 1, 2) and sd._version == 0
        sd.slice_data_imp(None, x)
        v1 = sd._version
        sd.slice_data_imp(None, x)
        assert sd._version > v1 > 0
        codes.append(sd._codes)
    for c in codes[1:]:
        np.testing.assert_array_equal(c, codes[0])


def test_device_and_defaults_like_memintelli():
    sd = SlicedData((1, 1, 2))
    assert sd.device == torch.device("cpu") and sd.paral_size == (64, 64) and sd.quant_gran == (64, 64)
    assert SlicedData((1, 1, 2), device="cpu").device == "cpu"
    assert SlicedData((1, 1, 2), device=" OpenCL:0:0 ").device == "opencl:0:0"  # DPETensor's forms, normalized
    with pytest.raises(ValueError, match="argument 'device'"):  # no device string DPETensor refuses
        SlicedData((1, 1, 2), device="opencl:0")
    assert sd.sliced_data is None and sd.max_data is None and sd.quantized_data is None and sd.G is None


# ---------------------------------------------------------------- bad inputs

X = np.ones((4, 4), np.float32)


@pytest.mark.parametrize("kwargs, exc, name", [
    (dict(slice_method=(2, 1)), ValueError, "slice_method"),
    (dict(slice_method=(1, 0, 2)), ValueError, "slice_method"),
    (dict(slice_method=(1, -1)), ValueError, "slice_method"),
    (dict(slice_method=(1,)), ValueError, "slice_method"),
    (dict(slice_method=(1, 8, 8)), ValueError, "slice_method"),
    (dict(slice_method=(1, 9)), ValueError, "slice_method"),
    (dict(slice_method=()), ValueError, "slice_method"),
    (dict(slice_method=(1, 1.5)), TypeError, "slice_method"),
    (dict(slice_method="11"), TypeError, "slice_method"),
    (dict(paral_size=(0, 4)), ValueError, "paral_size"),
    (dict(paral_size=(4, -1)), ValueError, "paral_size"),
    (dict(paral_size=(4,)), ValueError, "paral_size"),
    (dict(paral_size=(4, 4, 4)), ValueError, "paral_size"),
    (dict(paral_size=4), TypeError, "paral_size"),
    (dict(quant_gran=(0, 4)), ValueError, "quant_gran"),
    (dict(quant_gran=(1, 2, 3)), ValueError, "quant_gran"),
    (dict(quant_gran="per-block"), ValueError, "quant_gran"),
    (dict(bw_e=-1), ValueError, "bw_e"),
    (dict(data=np.ones((0, 4), np.float32)), ValueError, "data"),
    (dict(data=np.ones((2, 0, 4), np.float32)), ValueError, "data"),
    (dict(data=np.ones((2, 2, 2, 2), np.float32)), ValueError, "data"),
    (dict(data=np.ones(4, np.float32)), ValueError, "data"),
    (dict(data=np.array([[1.0, np.nan]], np.float32)), ValueError, "data"),
    (dict(data=np.array([[1.0], [np.inf]], np.float32)), ValueError, "data"),
    (dict(data=np.full((70, 70), -np.inf)), ValueError, "data"),
    (dict(data=[[1.0, 2.0]]), TypeError, "data"),
    (dict(data=np.ones((4, 4), np.bool_)), TypeError, "data"),
    (dict(data=np.ones((4, 4), np.complex64)), TypeError, "data"),
    (dict(data=np.ones((2, 4, 4), np.float32), g_level=16), ValueError, "data"),
    (dict(g_level=1), ValueError, "g_level"),
    (dict(g_level=300), ValueError, "g_level"),
    (dict(slice_method=(1, 4), g_level=8), ValueError, "g_level"),
])
def test_bad_inputs_raise_naming_the_argument(kwargs, exc, name):
    args = dict(data=X, slice_method=(1, 1, 2), paral_size=(2, 2), quant_gran=None, bw_e=None, g_level=None)
    args.update(kwargs)
    with pytest.raises(exc, match=name):
        slice_quantize(args.pop("data"), **args)


@pytest.mark.parametrize("gran", ["per-matrix", (1, 1), None])
def test_nan_detected_in_every_max_pass_path(gran):
    x = np.random.default_rng(17).standard_normal((2, 40, 40)).astype(np.float32)
    x[1, 33, 7] = np.nan
    with pytest.raises(ValueError, match="data.*NaN"):
        slice_quantize(x, (1, 1, 2), (4, 4), gran)
    with pytest.raises(ValueError, match="data"):
        SlicedData((1, 1, 2), paral_size=(4, 4)).slice_data_imp(None, torch.from_numpy(x))


def test_core_level_validation():
    with pytest.raises(ValueError, match="slice_method"):
        _core.slice_quantize(X, (1, 17), (2, 2))
    with pytest.raises(TypeError, match="slice_method"):
        _core.slice_quantize(X, 5, (2, 2))
    with pytest.raises(ValueError, match="quant_gran"):
        _core.slice_quantize(X, (1, 1), (2, 2), (-3, 2))
    with pytest.raises(TypeError, match="bw_e"):
        _core.slice_quantize(X, (1, 1), (2, 2), None, 1.5)
    lv = np.zeros((2, 3, 3), np.uint8)
    with pytest.raises(ValueError, match="LGS"):
        _core.program_conductance(lv, 16, 1e-7, 1e-5)
    with pytest.raises(ValueError, match="write_variation"):
        _core.program_conductance(lv, 16, 1e-5, 1e-7, -0.1)
    with pytest.raises(ValueError, match="rate_stuck_HGS"):
        _core.program_conductance(lv, 16, 1e-5, 1e-7, 0.0, 1.5)
    with pytest.raises(ValueError, match="rate_stuck_LGS"):
        _core.program_conductance(lv, 16, 1e-5, 1e-7, 0.0, 0.6, 0.6)
    with pytest.raises(ValueError, match="levels"):
        _core.program_conductance(lv[0], 16, 1e-5, 1e-7)
    with pytest.raises(ValueError, match="seed"):
        _core.program_conductance(lv, 16, 1e-5, 1e-7, 0.1, 0, 0, -1)


def test_sliceddata_bad_inputs():
    with pytest.raises(ValueError, match="slice_method"):
        SlicedData((2, 1))
    with pytest.raises(ValueError, match="paral_size"):
        SlicedData((1, 1), paral_size=(0, 1))
    with pytest.raises(ValueError, match="quant_gran"):
        SlicedData((1, 1), quant_gran="rows")
    with pytest.raises(ValueError, match="bw_e"):
        SlicedData((1, 1), bw_e=-2)
    w = SlicedData((1, 1, 2), is_weight=True, paral_size=(2, 2))
    with pytest.raises(ValueError, match="data"):
        w.slice_data_imp(engine(), np.ones((2, 3, 3), np.float32))
    with pytest.raises(TypeError, match="engine"):
        w.slice_data_imp(None, X)
    with pytest.raises(ValueError, match="argument 'LGS': must be >= 0 and below HGS"):  # the core's rule
        w.slice_data_imp(engine(LGS=1e-4), X)
    with pytest.raises(ValueError, match="engine"):
        w.slice_data_imp(engine(rate_stuck_HGS=0.7, rate_stuck_LGS=0.7), X)
    assert w._codes is None  # a failed call leaves the object as it was


@pytest.mark.parametrize("bw_e", [None, 2])
def test_extreme_magnitudes_match_reference(bw_e):
    big = np.finfo(np.float32).max
    x = np.array([[big, -big / 3, 1e-30, -1e-38, 0.0, 1e-45],   # e = 127: 2**-e is subnormal
                  [1e-40, -3e-41, 0.0, 1e-45, -1e-45, 2e-40],   # subnormal granule maxima
                  [0.0, -0.0, 0.0, 0.0, 0.0, 0.0]], dtype=np.float32)
    r, ref = check_against_reference(x, (1, 3), None, (1, 3, 4), bw_e)
    if bw_e:
        assert r.gran_exp[0, 0, 0] == 127


def test_huge_granule_is_one_granule():
    x = np.random.default_rng(18).standard_normal((2, 9, 7)).astype(np.float32)
    r = slice_quantize(x, (1, 1, 2), (2, 3), (2 ** 62, 2 ** 62))
    assert r.gran_max.shape == (2, 1, 1)
    np.testing.assert_array_equal(r.codes, slice_quantize(x, (1, 1, 2), (2, 3), "per-matrix").codes)


def test_program_weights_refuses_ragged_codes_naming_them():
    # NumPy refused them with its own 'setting an array element with a sequence', naming nothing
    with pytest.raises(ValueError, match="argument 'codes': expected a rectangular array"):
        program_weights([[[0, 1], [1]]], (1, 1), 4)
