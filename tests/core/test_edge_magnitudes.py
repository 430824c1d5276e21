"""Quantization and noise-free products of edge-case data against the spec transcriptions (tests/reference):
all-zero and -0.0 granules, a single nonzero, constant rows, exact .5 ties, powers of two and values just
below them (BFP exponents), float32 subnormals, and magnitudes near float32's largest, on shapes just
around block and granule multiples, for every SIMD level of this CPU."""
import numpy as np
from hypothesis import given, settings, strategies as st

from pyfastpim import DPETensor, dpe_matmul, slice_quantize
from helpers import NOISE_OFF, at_isa, available_isas, reference_product
from reference.spec import program_levels_reference, quantize_reference, slice_reference

F32 = np.float32
BIG = float(np.finfo(F32).max)
KINDS = ["zeros", "negzero", "single", "const_rows", "ties", "pow2", "below_pow2", "subnormal", "smallest",
         "near_max", "max", "mixed"]
SIZES = [1, 7, 31, 33]
WIDTHS = [(1, 1), (1, 1, 2, 2), (1, 7), (1, 8, 7), (1, 1, 1, 1, 1, 1, 1, 1), (1, 3, 8)]
GEOMETRY = [((1, 32), (1, 32)), ((4, 4), "per-row"), ((3, 5), "per-col"), ((2, 8), "per-matrix"), ((5, 7), None),
            ((1, 1), (3, 2)), ((64, 64), (100, 1))]


def edge_data(kind, shape, seed):
    rng = np.random.default_rng(seed)
    sign = np.where(rng.random(shape) < 0.5, -1.0, 1.0)
    if kind == "zeros":
        return np.zeros(shape, F32)
    if kind == "negzero":
        return np.full(shape, -0.0, F32)
    if kind == "single":
        x = np.zeros(shape, F32)
        x.flat[int(rng.integers(x.size))] = -2.5
        return x
    if kind == "const_rows":
        return np.broadcast_to(rng.standard_normal(shape[:-1] + (1,)), shape).astype(F32)
    if kind == "ties":  # q = x / M * K lands on .5 for the 4-bit word (K = 7)
        return ((rng.integers(-7, 8, shape) + 0.5) / 7.5).astype(F32)
    if kind == "pow2":
        return (sign * 2.0 ** rng.integers(-20, 20, shape)).astype(F32)
    if kind == "below_pow2":
        return (sign * (1 - 2.0 ** -24) * 2.0 ** rng.integers(-5, 5, shape)).astype(F32)
    if kind == "subnormal":
        return (rng.standard_normal(shape) * 1e-41).astype(F32)
    if kind == "smallest":
        return (sign * 1e-45).astype(F32)
    if kind == "near_max":
        return (np.clip(rng.standard_normal(shape), -3, 3) * 1e38).astype(F32)
    if kind == "max":
        return (sign * BIG).astype(F32)
    return np.where(rng.random(shape) < 0.5, rng.standard_normal(shape), 1e-40).astype(F32)  # mixed


@settings(max_examples=30)
@given(kind=st.sampled_from(KINDS), n=st.integers(1, 2), r=st.sampled_from(SIZES), c=st.sampled_from(SIZES),
       widths=st.sampled_from(WIDTHS), geometry=st.sampled_from(GEOMETRY), bw_e=st.sampled_from([None, 4]),
       seed=st.integers(0, 2 ** 16))
def test_edge_data_quantizes_as_the_transcription(kind, n, r, c, widths, geometry, bw_e, seed):
    x = edge_data(kind, (n, r, c) if n > 1 else (r, c), seed)
    paral, gran = geometry
    g_level = 2 ** max(widths) if x.ndim == 2 else None
    with np.errstate(all="ignore"):
        ref = quantize_reference(x, paral, gran, widths, bw_e)
    codes = slice_reference(ref["q"], widths)
    for isa in available_isas():
        got = at_isa(isa, lambda: slice_quantize(x, widths, paral, gran, bw_e, dequant=True, g_level=g_level))
        check_quantized(got, ref, codes, widths, bw_e, g_level)


def check_quantized(got, ref, codes, widths, bw_e, g_level):
    np.testing.assert_array_equal(got.codes, codes)
    # bit for bit, -0.0 included
    assert np.asarray(got.dequant).tobytes() == ref["dequant"].reshape(np.shape(got.dequant)).tobytes()
    np.testing.assert_array_equal(got.gran_max, ref["gran_max"])
    np.testing.assert_array_equal(got.gran_scale, ref["gran_scale"])
    assert tuple(got.granule) == tuple(ref["granule"])
    if bw_e:
        np.testing.assert_array_equal(got.gran_exp, ref["gran_exp"])
    if g_level:
        np.testing.assert_array_equal(got.levels, program_levels_reference(codes, widths, g_level))


PRODUCT_SETTINGS = [((1, 1, 2, 2), (1, 1, 2, 2), (1, 32), (32, 32), (1, 32), (32, 32), 4, 4, 2 ** 12),
                    ((1, 7), (1, 3), (2, 8), (8, 4), "per-row", "per-col", 8, 16, 2 ** 6),
                    ((1, 1), (1, 1), (1, 4), (4, 4), None, None, 2, 2, 2),
                    ((1, 8, 7), (1, 1), (1, 4), (4, 4), (3, 5), "per-matrix", 2, 256, 2 ** 16)]


@settings(max_examples=25)
@given(x_kind=st.sampled_from(KINDS), w_kind=st.sampled_from(KINDS), r=st.sampled_from(SIZES),
       k=st.sampled_from(SIZES), p=st.sampled_from(SIZES), case=st.sampled_from(PRODUCT_SETTINGS),
       bw_e=st.sampled_from([None, 8]), seed=st.integers(0, 2 ** 16))
def test_edge_data_multiplies_as_the_transcription(x_kind, w_kind, r, k, p, case, bw_e, seed):
    xw, ww, xp, wp, xg, wg, g_level, rdac, radc = case
    x, w = edge_data(x_kind, (r, k), seed), edge_data(w_kind, (k, p), seed + 1)
    eng = DPETensor(g_level=g_level, rdac=rdac, radc=radc, **NOISE_OFF)
    with np.errstate(all="ignore"):  # max * max overflows float32, in the transcription as in the engine
        ref = reference_product(x, w, eng, xw, ww, xp, wp, xg, wg, bw_e)
    for isa in available_isas():
        np.testing.assert_array_equal(at_isa(isa, lambda: dpe_matmul(x, w, eng, xw, ww, xp, wp, xg, wg, bw_e=bw_e)),
                                      ref, err_msg=isa)
