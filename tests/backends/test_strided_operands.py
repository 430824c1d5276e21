"""Operands that are views, not C-contiguous float32 arrays: every public product and the slicer
read them as their contiguous float32 copy, on 1 and 2 threads, on the CPU and the OpenCL device.

tests/core/test_dpe.py, test_slicing.py and test_differential.py draw contiguous float32 data;
here the same numbers arrive as a transposed (Fortran-ordered) array, a stepped slice of a larger
one, a view with negative strides, a zero-stride broadcast, float64, or a transposed torch tensor.
Noise off, dpe_matmul equals the spec transcription (tests/reference) bit for bit and the slicer
equals quantize_reference / slice_reference; noise on, a view gives the bits of its contiguous copy
for the same seed, whatever the thread count and on the OpenCL device (where the CPU draws noise
with its SIMD path).
"""
import numpy as np
try:
    import torch
except ImportError:  # numpy-only install: the torch view is not drawn
    torch = None
from hypothesis import given, settings, strategies as st

import pyfastpim
from pyfastpim import DPETensor, dpe_matmul, slice_quantize
from helpers import HAVE_CL, NOISE_OFF, SIMD_NOISE, reference_product
from reference import spec

VIEWS = ["c", "fortran", "step", "negative", "broadcast", "float64"] + (["torch_t"] if torch is not None else [])
GRAN = st.one_of(st.sampled_from(["per-row", "per-col", "per-matrix", None]),
                 st.tuples(st.integers(1, 12), st.integers(1, 12)))


def as_view(a, kind):
    """The values of the float32 array a (2-D or 3-D) held in an operand of the given kind."""
    if kind == "fortran":
        return np.ascontiguousarray(np.swapaxes(a, -1, -2)).swapaxes(-1, -2)
    if kind == "step":
        big = np.full(a.shape[:-2] + (2 * a.shape[-2], 3 * a.shape[-1]), np.nan, np.float32)
        big[..., ::2, ::3] = a
        return big[..., ::2, ::3]
    if kind == "negative":
        return np.ascontiguousarray(a[..., ::-1, ::-1])[..., ::-1, ::-1]
    if kind == "broadcast":  # every row the first one: stride 0 along the rows
        return np.broadcast_to(a[..., :1, :], a.shape)
    if kind == "float64":
        return a.astype(np.float64)
    if kind == "torch_t":
        return torch.from_numpy(np.ascontiguousarray(np.swapaxes(a, -1, -2))).transpose(-1, -2)
    return a


def values(v):
    """The float32 contiguous copy of an operand (what the reference reads)."""
    return np.ascontiguousarray(v.numpy() if torch is not None and isinstance(v, torch.Tensor) else v,
                                dtype=np.float32)


def numpy_result(out):
    return out.numpy() if torch is not None and isinstance(out, torch.Tensor) else np.asarray(out)


@st.composite
def cases(draw):
    n = draw(st.integers(1, 12))
    g_level = draw(st.sampled_from([4, 5, 16]))
    widest = 2 if g_level < 16 else 4
    return dict(R=draw(st.integers(1, 6)), K=draw(st.integers(1, 40)), P=draw(st.integers(1, 13)),
                batch=draw(st.sampled_from([None, 1, 3])), n=n, g_level=g_level,
                rdac=draw(st.sampled_from([2, 16, 255])), radc=draw(st.sampled_from([2, 7, 2 ** 12])),
                xw=(1,) + tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=3))),
                ww=(1,) + tuple(draw(st.lists(st.integers(1, widest), min_size=1, max_size=3))),
                xp=(draw(st.integers(1, 9)), n), wp=(n, draw(st.integers(1, 20))), xg=draw(GRAN), wg=draw(GRAN),
                bw_e=draw(st.sampled_from([None, 6])), xv=draw(st.sampled_from(VIEWS)),
                wv=draw(st.sampled_from(VIEWS)), seed=draw(st.integers(0, 2 ** 31)))


def operands(c):
    rng = np.random.default_rng(c["seed"])
    shape = (c["R"], c["K"]) if c["batch"] is None else (c["batch"], c["R"], c["K"])
    x = rng.standard_normal(shape).astype(np.float32)
    w = (rng.standard_normal((c["K"], c["P"])) * 0.1).astype(np.float32)
    return as_view(x, c["xv"]), as_view(w, c["wv"])


def product(c, x, w, **engine):
    eng = DPETensor(g_level=c["g_level"], rdac=c["rdac"], radc=c["radc"], **engine)
    xg = c["xp"] if c["xg"] is None else c["xg"]
    wg = c["wp"] if c["wg"] is None else c["wg"]
    return numpy_result(dpe_matmul(x, w, eng, c["xw"], c["ww"], c["xp"], c["wp"], xg, wg, bw_e=c["bw_e"]))


@settings(max_examples=25, deadline=None)
@given(cases())
def test_noise_free_products_of_views_equal_the_spec_transcription(c):
    x, w = operands(c)
    xg = c["xp"] if c["xg"] is None else c["xg"]
    wg = c["wp"] if c["wg"] is None else c["wg"]
    eng = DPETensor(g_level=c["g_level"], rdac=c["rdac"], radc=c["radc"], **NOISE_OFF)
    ref = reference_product(values(x), values(w), eng, c["xw"], c["ww"], c["xp"], c["wp"], xg, wg, c["bw_e"])
    for threads in (1, 2):
        with pyfastpim.threads(threads):
            got = product(c, x, w, **NOISE_OFF)
        assert got.shape == ref.shape
        np.testing.assert_array_equal(got.view(np.uint32), ref.view(np.uint32),
                                      err_msg="%s @ %s, %d threads" % (c["xv"], c["wv"], threads))


@settings(max_examples=25, deadline=None)
@given(cases())
def test_slicing_a_view_equals_the_reference_on_any_thread_count(c):
    x, _ = operands(c)
    ref = spec.quantize_reference(values(x), c["xp"], c["xg"], c["xw"], c["bw_e"])
    for threads in (1, 2):
        with pyfastpim.threads(threads):
            r = slice_quantize(x, c["xw"], c["xp"], c["xg"], bw_e=c["bw_e"], dequant=True)
        assert r.granule == ref["granule"]
        np.testing.assert_array_equal(r.codes, spec.slice_reference(ref["q"], c["xw"]))
        for key in ("gran_max", "gran_scale", "dequant"):
            np.testing.assert_array_equal(getattr(r, key).view(np.uint32), ref[key].view(np.uint32),
                                          err_msg="%s of a %s view, %d threads" % (key, c["xv"], threads))


@settings(max_examples=12, deadline=None)
@given(cases(), st.sampled_from([0.0, 0.05]), st.sampled_from([0.0, 0.1]), st.sampled_from([0.0, 0.05]),
       st.sampled_from([0.0, 0.02]))
def test_noisy_products_of_views_replay_their_contiguous_copy_everywhere(c, read, vnoise, write, stuck):
    x, w = operands(c)
    noise = dict(read_variation=read, vnoise=vnoise, write_variation=write, rate_stuck_HGS=stuck,
                 rate_stuck_LGS=stuck / 2, seed=c["seed"] % 9973)
    with pyfastpim.threads(2):
        base = product(c, values(x), values(w), **noise)
    paths = [(threads, None) for threads in (1, 2)]
    if HAVE_CL and SIMD_NOISE:
        paths.append((2, "opencl"))
    for threads, device in paths:
        with pyfastpim.threads(threads):
            got = product(c, x, w, device=device, **noise)
        np.testing.assert_array_equal(got.view(np.uint32), base.view(np.uint32),
                                      err_msg="%s @ %s, %d threads, %s" % (c["xv"], c["wv"], threads, device))
