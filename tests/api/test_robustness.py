"""No input crashes the library: random (often invalid) arguments to the public entry points either
produce a result or raise a clear Python exception (ValueError, TypeError, NotImplementedError).

The suite also runs under ASan/UBSan (`make sanitize`), where any out-of-bounds access or undefined
behaviour in the C core reached by these inputs aborts the run."""
import numpy as np
import pytest
from hypothesis import event, given, strategies as st

import pyfastpim
from pyfastpim import DPETensor, SlicedData, dpe_matmul

CLEAR_ERRORS = (ValueError, TypeError, NotImplementedError)

ints = st.one_of(st.integers(-3, 70), st.sampled_from([2 ** 31, 2 ** 40, -2 ** 63]))
pairs = st.one_of(st.tuples(ints, ints), ints, st.none(), st.sampled_from(["per-row", "per-col", "per-matrix", "x"]),
                  st.tuples(ints), st.tuples(ints, ints, ints))
slices = st.one_of(st.lists(st.integers(-1, 10), min_size=0, max_size=6), st.just("1122"), st.none())
arrays = st.one_of(
    st.tuples(st.integers(0, 5), st.integers(0, 40)).map(lambda s: np.random.default_rng(0).standard_normal(s)),
    st.tuples(st.integers(1, 3), st.integers(1, 5), st.integers(1, 40)).map(
        lambda s: np.random.default_rng(1).standard_normal(s).astype(np.float32)),
    st.sampled_from([np.full((3, 8), np.inf, np.float32), np.zeros((2, 8), np.complex64), np.ones((2, 2, 2, 2)),
                     np.ones(5, np.float32), np.float32(2.0), "text", None, np.ones((4, 8), ">f4")]),
)


@st.composite
def matmul_args(draw):
    """Half the draws are consistent configurations (a product must come out), half are hostile."""
    if draw(st.booleans()):
        n = draw(st.sampled_from([1, 4, 8, 32]))
        K = draw(st.integers(1, 70))
        x = np.random.default_rng(4).standard_normal((draw(st.integers(1, 3)), draw(st.integers(1, 9)), K))
        w = np.random.default_rng(5).standard_normal((K, draw(st.integers(1, 20)))).astype(np.float32)
        return dict(x=x if draw(st.booleans()) else x[0], w=w, xs=(1, 1, 2), ws=(1, 1), xp=(1, n), wp=(n, 8),
                    xg=draw(st.sampled_from(["per-row", "per-col", "per-matrix", None, (2, 2 * n)])), wg=(n, 8))
    return dict(x=draw(arrays), w=draw(arrays), xs=draw(slices), ws=draw(slices), xp=draw(pairs), wp=draw(pairs),
                xg=draw(pairs), wg=draw(pairs))


@given(m=matmul_args(), g=st.sampled_from([2, 4, 16, 256]), rdac=st.sampled_from([2, 4, 256, 2 ** 20]),
       radc=st.one_of(st.sampled_from([2, 16, 2 ** 12, 2 ** 24]), st.lists(st.integers(1, 300), max_size=5)),
       noise=st.booleans(), bw_e=st.sampled_from([None, 0, 5]))
def test_dpe_matmul_never_crashes(m, g, rdac, radc, noise, bw_e):
    x, w, xs, ws, xp, wp, xg, wg = (m[k] for k in ("x", "w", "xs", "ws", "xp", "wp", "xg", "wg"))
    try:
        eng = DPETensor(g_level=g, rdac=rdac, radc=radc, read_variation=0.05 if noise else 0.0,
                        vnoise=0.05 if noise else 0.0, write_variation=0.02 if noise else 0.0, rate_stuck_HGS=0.0)
        out = dpe_matmul(x, w, eng, xs, ws, xp, wp, xg, wg, bw_e=bw_e)
    except CLEAR_ERRORS as exc:
        event(type(exc).__name__)
        return
    event("product")
    assert np.all(np.isfinite(out))
    assert out.shape[-1] == np.shape(w)[-1]


small = st.one_of(st.integers(1, 3), st.tuples(st.integers(1, 3), st.integers(1, 3)))


@given(img=st.tuples(st.integers(1, 2), st.integers(1, 4), st.integers(1, 9), st.integers(1, 9)),
       k=st.one_of(small, pairs), stride=st.one_of(small, pairs), padding=st.one_of(small, st.just(0), pairs),
       dilation=st.one_of(small, pairs), cout=st.integers(1, 5))
def test_conv_never_crashes(img, k, stride, padding, dilation, cout):
    eng = DPETensor(g_level=4, rdac=4, radc=2 ** 12)
    x = np.random.default_rng(2).standard_normal(img).astype(np.float32)
    try:
        kh, kw = (k, k) if isinstance(k, int) else k
        ws = SlicedData([1, 1, 2, 2], is_weight=True, paral_size=(8, 8), quant_gran=(8, 8))
        rows = img[1] * kh * kw if 0 < img[1] * kh * kw <= 4096 else 8  # else: a clear mismatch error
        ws.slice_data_imp(eng, np.ones((rows, cout), np.float32))
        out, _ = eng.forward_conv2d(x, ws, k, stride, padding, dilation, (1, 1, 2, 2), (1, 8), (1, 8))
    except CLEAR_ERRORS as exc:
        event(type(exc).__name__)
        return
    event("convolution")
    assert out.shape[:2] == (img[0], cout) and np.all(np.isfinite(out))


@given(obj=st.one_of(arrays, st.just(memoryview(b"abc")), st.just(bytearray(4)), st.integers(), st.lists(st.floats())),
       dtype=st.sampled_from([None, "float32", "float64", "int8", "uint16", "complex64", "bogus", np.float32, 3]),
       writable=st.booleans())
def test_asarray_never_crashes(obj, dtype, writable):
    try:
        a = pyfastpim.asarray(obj, dtype=dtype, writable=writable)
    except CLEAR_ERRORS as exc:
        event(type(exc).__name__)
        return
    event("array")
    assert np.asarray(a).size == a.size


@pytest.mark.parametrize("t, d", [(0, 4), (1, 1), (3, 0), (40, 7)])
def test_attention_context_edge_shapes(t, d):
    ctx = pyfastpim.AttentionContext(update_rate=0.5, strength=1.0)
    x = np.random.default_rng(3).standard_normal((t, d)).astype(np.float32)
    try:
        ctx.update_outgoing(x, x)
        ctx.incoming = ctx.outgoing
        out = ctx.apply(x)
    except CLEAR_ERRORS:
        return
    assert np.asarray(out).shape == (t, d)
