"""Ports of the CPU kernels to OpenCL (kernels/*.cl) against the CPU kernels they mirror.

- implicit-im2col convolution: ``cl_dpe_conv2d`` vs ``_core.dpe_conv2d`` (bit-identical noise
  off; noise on, bit-identical where the CPU draws noise with its AVX2 path)
- bit-slice/quantize and weight programming: ``_core.slice_quantize(..., device=dev)`` /
  ``program_conductance`` vs ``_core.slice_quantize`` / ``program_conductance`` (bit-identical)
- attention context update/apply: ``cl_attention_update`` / ``cl_attention_apply`` vs
  ``AttentionContext.update_outgoing`` / ``apply`` (within 1e-5 relative; tanh bit-identical)

Runs on whatever OpenCL device the ICD loader offers (PoCL in CI); skipped when there is none.
The errors both backends must raise alike are checked in tests/backends/test_parity.py.
"""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import pyfastpim
from pyfastpim import _core
from pyfastpim.devices import cl_dpe_conv2d
from helpers import SAN, SIMD_NOISE, conv_args, needs_cl, widths

pytestmark = needs_cl
FEW = 8 if SAN else 25


# ---- implicit-im2col convolution -------------------------------------------------------------------

@st.composite
def conv_configs(draw):
    n = draw(st.sampled_from([1, 2, 4, 8]))
    g_level = draw(st.sampled_from([4, 16]))
    c = dict(
        N=draw(st.integers(1, 2)), C=draw(st.integers(1, 4)), H=draw(st.integers(1, 9)), W=draw(st.integers(1, 9)),
        P=draw(st.integers(1, 9)), kh=draw(st.integers(1, 3)), kw=draw(st.integers(1, 3)),
        stride=(draw(st.integers(1, 2)), draw(st.integers(1, 2))),
        padding=(draw(st.integers(0, 2)), draw(st.integers(0, 2))),
        dilation=(draw(st.integers(1, 2)), draw(st.integers(1, 2))),
        n=n, g_level=g_level, xw=draw(widths.filter(lambda w: sum(w) >= 2)), ww=draw(widths.filter(lambda w: max(w) <= int(np.log2(g_level)))),
        xg=(draw(st.sampled_from([1, 3, 1000])), n * draw(st.sampled_from([1, 2, 1000]))),
        wg=(n * draw(st.sampled_from([1, 3])), draw(st.sampled_from([1, 4, 1000]))),
        bfp=draw(st.booleans()), rdac=draw(st.sampled_from([2, 16, 256])),
        radc=draw(st.sampled_from([2, 16, 1024])), seed=draw(st.integers(0, 2 ** 32 - 1)),
        scale=draw(st.sampled_from([1.0, 1e-3, 1e4])), zeros=draw(st.booleans()))
    # the dilated kernel must fit the padded image
    c["H"] = max(c["H"], c["dilation"][0] * (c["kh"] - 1) + 1 - 2 * c["padding"][0])
    c["W"] = max(c["W"], c["dilation"][1] * (c["kw"] - 1) + 1 - 2 * c["padding"][1])
    return c


def conv_both(dev, args, **kw):
    o1, d1 = _core.dpe_conv2d(*args)
    o2, d2 = cl_dpe_conv2d(dev, *args, **kw)
    return np.asarray(o1), np.asarray(o2), d1 if d1 is None else np.asarray(d1), d2 if d2 is None else np.asarray(d2)


@given(conv_configs())
@settings(max_examples=FEW, deadline=None)
def test_conv2d_noise_free_is_bit_identical_to_the_cpu(dev, c):
    o1, o2, d1, d2 = conv_both(dev, conv_args(c))
    assert o2.shape == o1.shape and o2.dtype == np.float32
    np.testing.assert_array_equal(o2, o1)
    np.testing.assert_array_equal(d2, d1)


@pytest.mark.skipif(not SIMD_NOISE, reason="bit-identical noise needs the CPU's AVX2 (SLEEF) noise path")
@given(conv_configs(), st.sampled_from([0.0, 0.05]), st.sampled_from([0.0, 0.05]), st.booleans())
@settings(max_examples=FEW, deadline=None)
def test_conv2d_noisy_is_bit_identical_to_the_cpu(dev, c, sigma, vnoise, cond):
    o1, o2, _, _ = conv_both(dev, conv_args(c, sigma, vnoise, cond, dequant=False))
    np.testing.assert_array_equal(o2, o1)


def test_conv2d_without_dequant_returns_none_and_accepts_a_weights_key(dev):
    c = dict(N=2, C=3, H=7, W=6, P=4, kh=3, kw=3, stride=(1, 1), padding=(1, 1), dilation=(1, 1), n=9,
             g_level=16, xw=(1, 1, 2, 2), ww=(1, 1, 2), xg=(1, 9), wg=(27, 4), bfp=False, rdac=16, radc=256,
             seed=5, scale=1.0, zeros=False)
    args = conv_args(c, dequant=False)
    o1, o2, d1, d2 = conv_both(dev, args, weights_key=("conv", 1))
    assert d1 is None and d2 is None
    np.testing.assert_array_equal(o2, o1)
    assert ("conv", 1) in dev.resident_weights
    o3, _ = cl_dpe_conv2d(dev, *args, weights_key=("conv", 1))
    np.testing.assert_array_equal(np.asarray(o3), o1)


def test_conv2d_shares_host_memory_with_zero_copies(dev):
    if not dev.zero_copy:
        pytest.skip("device does not share host memory")
    c = dict(N=2, C=4, H=8, W=8, P=8, kh=3, kw=3, stride=(1, 1), padding=(1, 1), dilation=(1, 1), n=4,
             g_level=16, xw=(1, 1, 2, 2), ww=(1, 1, 2), xg=(1, 4), wg=(4, 8), bfp=True, rdac=16, radc=256,
             seed=1, scale=1.0, zeros=False)
    args = conv_args(c)
    cl_dpe_conv2d(dev, *args)  # scratch grown outside the trace
    with pyfastpim.memory.trace() as t:
        cl_dpe_conv2d(dev, *args)
    assert t.copies == 0 and t.copy_bytes == 0


def test_cl_dpe_conv2d_rejects_a_non_handle():
    with pytest.raises(TypeError, match="handle"):
        cl_dpe_conv2d("opencl", None)


@pytest.mark.parametrize("noisy", [False, True])
def test_engine_conv2d_on_opencl_equals_the_cpu_engine(noisy):
    from pyfastpim.dpe import DPETensor
    from pyfastpim.sliced import SlicedData
    res = []
    for device in ("cpu", "opencl"):
        kw = {} if noisy else dict(write_variation=0, read_variation=0, vnoise=0)
        eng = DPETensor(device=device, **kw)
        rng = np.random.default_rng(0)
        ws = SlicedData((1, 1, 2, 2), is_weight=True, paral_size=(32, 32), quant_gran=(32, 32))
        ws.slice_data_imp(eng, rng.standard_normal((27, 8)).astype(np.float32))
        x = rng.standard_normal((2, 3, 10, 10)).astype(np.float32)
        res.append(eng.forward_conv2d(x, ws, 3, padding=1, return_dequant=True))
    if noisy and not SIMD_NOISE:
        pytest.skip("bit-identical noise needs the CPU's AVX2 noise path")
    np.testing.assert_array_equal(res[1][0], res[0][0])
    np.testing.assert_array_equal(res[1][1], res[0][1])


# ---- bit-slice/quantize and weight programming ------------------------------------------------------

# at most 16 bits in all (PF_MAX_TOTAL_BITS): 1 + 4 * 4 = 17 is rejected by the contract, not sliced
slice_methods = st.lists(st.integers(1, 4), min_size=1, max_size=4).map(lambda t: (1,) + tuple(t)).filter(
    lambda m: sum(m) <= 16)


@st.composite
def slice_configs(draw):
    weight = draw(st.booleans())
    method = draw(slice_methods.filter(lambda m: not weight or max(m) <= 4))
    shape = (draw(st.integers(1, 40)), draw(st.integers(1, 70)))
    if not weight and draw(st.booleans()):
        shape = (draw(st.integers(1, 3)),) + shape
    paral = (draw(st.sampled_from([1, 2, 8, 32])), draw(st.sampled_from([1, 4, 32])))
    gran = draw(st.one_of(st.none(), st.sampled_from(["per-matrix", "per-row", "per-col"]),
                          st.tuples(st.integers(1, 50), st.integers(1, 80))))
    return dict(shape=shape, method=method, paral=paral, gran=gran, bw_e=draw(st.sampled_from([None, 0, 8])),
                dequant=draw(st.booleans()), g_level=draw(st.sampled_from([16, 256])) if weight else None,
                scale=draw(st.sampled_from([1.0, 1e-6, 1e5])), zeros=draw(st.booleans()),
                seed=draw(st.integers(0, 2 ** 32 - 1)))


def slice_args(c):
    rng = np.random.default_rng(c["seed"])
    x = (rng.standard_normal(c["shape"]) * c["scale"]).astype(np.float32)
    if c["zeros"]:
        x[..., : x.shape[-1] // 2] = 0.0
    return (x, c["method"], c["paral"], c["gran"], c["bw_e"], c["dequant"], c["g_level"])


def assert_same_slices(a, b):
    assert len(a) == len(b) == 7
    for u, v in zip(a[:6], b[:6]):
        assert (u is None) == (v is None)
        if u is not None:
            u, v = np.asarray(u), np.asarray(v)
            assert u.dtype == v.dtype and u.shape == v.shape
            np.testing.assert_array_equal(v, u)
    assert tuple(a[6]) == tuple(b[6])


@given(slice_configs())
@settings(max_examples=FEW * 2, deadline=None)
def test_slice_quantize_is_bit_identical_to_the_cpu(dev, c):
    args = slice_args(c)
    assert_same_slices(_core.slice_quantize(*args), _core.slice_quantize(*args, device=dev))


# The OpenCL quantize kernel finds the max of granules one row high and at most 256 columns wide
# itself; other granules take the separate max and stats passes. Shapes on both sides of each
# limit, granules straddling the kernel's 256-column chunks, batches of matrices.
IN_KERNEL_MAX = [((130, 600), (1, 256)), ((3, 40, 600), (1, 100)), ((2, 1, 1000), (32, 32)),
                 ((100, 520), (1, 48)), ((1, 33), "per-matrix")]
SEPARATE_MAX = [((130, 600), (2, 32)), ((130, 600), (1, 257)), ((70, 300), "per-matrix"),
                ((70, 300), "per-row"), ((300, 70), "per-col")]


@pytest.mark.parametrize("shape, gran", IN_KERNEL_MAX + SEPARATE_MAX)
@pytest.mark.parametrize("bw_e, g_level", [(None, 16), (8, None)])
def test_slice_quantize_on_both_sides_of_the_in_kernel_max_limits(dev, shape, gran, bw_e, g_level):
    x = (np.random.default_rng(len(shape) * 1000 + shape[-1]).standard_normal(shape) * 3).astype(np.float32)
    x[..., 1::7] = 0.0
    args = (x, (1, 1, 2, 2), (32, 32), gran, bw_e, True, g_level if x.ndim == 2 else None)
    assert_same_slices(_core.slice_quantize(*args), _core.slice_quantize(*args, device=dev))


# Programmed levels: where g_level - 1 is a multiple of a slice's max code the kernel multiplies
# the code by their quotient instead of evaluating the float expression; both kinds of slice, in
# vector runs and scalar tails (600 columns: rows start 8- and 16-aligned).
@pytest.mark.parametrize("method, g_level", [
    ((1, 1, 1), 2), ((1, 1), 3), ((1, 2, 3, 4), 16), ((1, 2, 3, 4), 17), ((1, 1, 6), 64), ((1, 2, 3, 6), 100),
    ((1, 1, 6), 253), ((1, 8), 256), ((1, 1, 1, 1, 2, 2, 4), 256), ((1, 3, 5), 200)])
@pytest.mark.parametrize("gran", [(1, 32), (32, 32)])
def test_programmed_levels_are_bit_identical_for_every_slice_width(dev, method, g_level, gran):
    x = np.random.default_rng(g_level).standard_normal((40, 600)).astype(np.float32)
    args = (x, method, (32, 32), gran, None, False, g_level)
    assert_same_slices(_core.slice_quantize(*args), _core.slice_quantize(*args, device=dev))


@given(st.integers(1, 5), st.integers(1, 30), st.integers(1, 50), st.sampled_from([2, 16, 256]),
       st.sampled_from([0.0, 0.02, 0.3]), st.sampled_from([(0.0, 0.0), (0.1, 0.0), (0.05, 0.2), (1.0, 0.0)]),
       st.integers(0, 2 ** 64 - 1))
@settings(max_examples=FEW, deadline=None)
def test_program_conductance_is_bit_identical_to_the_cpu(dev, S, R, C, g_level, wv, stuck, seed):
    levels = np.random.default_rng(seed % 2 ** 32).integers(0, g_level, (S, R, C)).astype(np.uint8)
    args = (levels, g_level, 1e-5, 1e-7, wv, stuck[0], stuck[1], seed)
    np.testing.assert_array_equal(np.asarray(_core.program_conductance(*args, device=dev)),
                                  np.asarray(_core.program_conductance(*args)))


def test_slicing_shares_host_memory_with_zero_copies(dev):
    if not dev.zero_copy:
        pytest.skip("device does not share host memory")
    x = np.random.default_rng(0).standard_normal((64, 96)).astype(np.float32)
    _core.slice_quantize(x, (1, 1, 2, 2), (32, 32), None, None, True, 16, device=dev)
    with pyfastpim.memory.trace() as t:
        r = _core.slice_quantize(x, (1, 1, 2, 2), (32, 32), None, None, True, 16, device=dev)
        _core.program_conductance(np.asarray(r[5])[:, 0], 16, 1e-5, 1e-7, 0.02, 0.01, 0.01, 3, device=dev)
    assert t.copies == 0, t.by_kind


@pytest.mark.parametrize("is_weight", [False, True])
def test_sliced_data_on_an_opencl_engine_equals_the_cpu_engine(is_weight):
    from pyfastpim.dpe import DPETensor
    from pyfastpim.sliced import SlicedData
    x = np.random.default_rng(1).standard_normal((48, 40)).astype(np.float32)
    res = []
    for device in ("cpu", "opencl"):
        s = SlicedData((1, 1, 2, 2), is_weight=is_weight, paral_size=(8, 8), quant_gran=(16, 8))
        s.slice_data_imp(DPETensor(device=device), x)
        res.append(s)
    for name in ("_codes", "_gran_max", "_gran_scale", "_dequant", "_levels", "_conductance"):
        u, v = getattr(res[0], name, None), getattr(res[1], name, None)
        assert (u is None) == (v is None), name
        if u is not None:
            np.testing.assert_array_equal(v, u)


# ---- attention context update / apply -----------------------------------------------------------------

def test_attention_tanh_is_bit_identical(dev):
    x = np.concatenate([np.random.default_rng(0).standard_normal(50000).astype(np.float32) * 6,
                        np.array([0.0, -0.0, 0.625, -0.625, 20.0, -40.0, 1e30, np.inf, -np.inf, np.nan], np.float32)])
    np.testing.assert_array_equal(np.asarray(_core._attention_tanh(x, device=dev)), np.asarray(_core._attention_tanh(x)))


@given(st.integers(1, 80), st.integers(1, 40), st.integers(0, 8), st.sampled_from([0.1, 0.5, 1.0]),
       st.sampled_from([None, 8]), st.booleans(), st.integers(0, 2 ** 32 - 1))
@settings(max_examples=FEW, deadline=None)
def test_attention_update_and_apply_match_the_cpu(dev, T, D, extra, rate, embed, nonfinite, seed):
    from pyfastpim.devices import cl_attention_apply, cl_attention_update
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((T, D + extra)).astype(np.float32)
    y = rng.standard_normal((2, T, D)).astype(np.float32)
    if nonfinite:
        x[0, 0] = np.nan
        y[0, -1, -1] = np.inf
    cpu = _core.AttentionContext(update_rate=rate, strength=0.7, embed_dim=embed)
    cl = _core.AttentionContext(update_rate=rate, strength=0.7, embed_dim=embed)
    for _ in range(2):
        cpu.update_outgoing(x, y)
        cl_attention_update(dev, cl, x, y)
    np.testing.assert_allclose(cl.outgoing, cpu.outgoing, rtol=1e-5, atol=1e-5)
    d = cpu.outgoing.shape[0]
    cpu.incoming = cl.incoming = cpu.outgoing
    z = rng.standard_normal((3, 5, d)).astype(np.float32)
    if nonfinite:
        z[0, 0, 0] = np.inf
    ref = np.asarray(cpu.apply(z))
    got = np.asarray(cl_attention_apply(dev, cl, z))
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * max(1.0, float(np.abs(ref).max())))
    z2 = z.copy()
    cl_attention_apply(dev, cl, z2, out=z2)  # in place, as the CPU allows
    np.testing.assert_allclose(z2, ref, rtol=1e-5, atol=1e-5 * max(1.0, float(np.abs(ref).max())))


def test_attention_update_is_zero_copy_and_in_place(dev):
    from pyfastpim.devices import cl_attention_update
    if not dev.zero_copy:
        pytest.skip("device does not share host memory")
    ctx = _core.AttentionContext(update_rate=0.5)
    x = np.random.default_rng(0).standard_normal((40, 24)).astype(np.float32)
    cl_attention_update(dev, ctx, x, x)
    with pyfastpim.memory.trace() as t:
        cl_attention_update(dev, ctx, x, x)
    assert t.copies == 0, t.by_kind
    assert np.abs(ctx.outgoing).max() > 0


def test_attention_errors_name_the_argument(dev):
    from pyfastpim.devices import cl_attention_update
    ctx = _core.AttentionContext(update_rate=0.5)
    with pytest.raises(ValueError, match="'x'"):
        cl_attention_update(dev, ctx, np.zeros(4, np.float32), np.zeros((2, 4), np.float32))
    def arr(a, writable=False):
        return _core._attn_view(a, writable, "a")

    with pytest.raises(ValueError, match="outgoing"):  # outgoing's D = 5 exceeds the inputs' 4 columns
        _core._attn_update(None, arr(np.zeros((5, 5), np.float32), True), arr(np.zeros((3, 4), np.float32)),
                           arr(np.zeros((3, 4), np.float32)), 3, 5, 0.5, False, device=dev)
    with pytest.raises(ValueError, match="'x'"):
        _core._attn_apply(None, _core._attn_new((2, 3), False), arr(np.zeros((2, 3), np.float32)),
                          arr(np.zeros((4, 4), np.float32)), 1.0, "x", device=dev)
    with pytest.raises(ValueError, match="out"):
        w = arr(np.zeros((4, 4), np.float32), True)
        _core._attn_apply(None, w, arr(np.zeros((4, 4), np.float32)), w, 1.0, "x", device=dev)
    with pytest.raises(TypeError, match="handle"):
        cl_attention_update("opencl", ctx, None, None)


def test_every_port_matches_with_explicit_transfers(dev):
    """The discrete-device path (zero_copy=False: counted transfers, device scratch) on the same device."""
    from pyfastpim.devices import cl_attention_apply, cl_attention_update
    d2 = _core.OpenCLDevice(dev.info["platform"], dev.info["device"], zero_copy=False)
    assert not d2.zero_copy
    c = dict(N=2, C=3, H=7, W=6, P=5, kh=3, kw=2, stride=(1, 2), padding=(1, 0), dilation=(1, 1), n=2,
             g_level=16, xw=(1, 1, 2), ww=(1, 1, 2), xg=(2, 4), wg=(4, 2), bfp=True, rdac=16, radc=256,
             seed=9, scale=1.0, zeros=True)
    for noisy in (False, True):
        args = conv_args(c, 0.05 if noisy else 0.0, 0.05 if noisy else 0.0)
        o1, o2, dq1, dq2 = conv_both(d2, args)
        if not noisy or SIMD_NOISE:
            np.testing.assert_array_equal(o2, o1)
        np.testing.assert_array_equal(dq2, dq1)
    x = np.random.default_rng(2).standard_normal((33, 70)).astype(np.float32)
    a = (x, (1, 1, 2, 2), (8, 8), (8, 16), None, True, 16)
    with pyfastpim.memory.trace() as t:
        r = _core.slice_quantize(*a, device=d2)
    assert t.copies > 0
    assert_same_slices(_core.slice_quantize(*a), r)
    lv = np.asarray(r[5])[:, 0]
    np.testing.assert_array_equal(np.asarray(_core.program_conductance(lv, 16, 1e-5, 1e-7, 0.02, 0.01, 0.02, 4, device=d2)),
                                  np.asarray(_core.program_conductance(lv, 16, 1e-5, 1e-7, 0.02, 0.01, 0.02, 4)))
    cpu, cl = _core.AttentionContext(update_rate=0.4, strength=0.3), _core.AttentionContext(update_rate=0.4, strength=0.3)
    cpu.update_outgoing(x, x)
    cl_attention_update(d2, cl, x, x)
    np.testing.assert_allclose(cl.outgoing, cpu.outgoing, rtol=1e-5, atol=1e-6)
    cpu.incoming = cl.incoming = cpu.outgoing
    np.testing.assert_allclose(np.asarray(cl_attention_apply(d2, cl, x)), np.asarray(cpu.apply(x)), rtol=1e-5,
                               atol=1e-5)
    z = x.copy()
    cl_attention_apply(d2, cl, z, out=z)
    np.testing.assert_allclose(z, np.asarray(cpu.apply(x)), rtol=1e-5, atol=1e-5)
