"""Edge cases of issue 19: sizes near 2**63, extreme noise sigmas, out= tensors tracked by
autograd, reference counts of Array.to_torch()."""
import gc
import sys

import numpy as np
import pytest

try:
    import torch
except ImportError:  # the numpy-only install: the out= tests skip
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="needs torch")

import pyfastpim as pf
from helpers import NOISE_OFF

BIG = 2 ** 63 - 1


def _data(seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((5, 64)).astype(np.float32), rng.standard_normal((64, 8)).astype(np.float32)


# ---- 2. sizes near 2**63 ----

def test_granule_near_int64_max_is_the_whole_matrix():
    """A granule of 2**63-1 rows covers the whole matrix: the result is the per-matrix one
    (ceil(R / qr) used to overflow into a negative grid size)."""
    x, w = _data()
    e = pf.DPETensor(**NOISE_OFF)
    ref = pf.dpe_matmul(x, w, e, input_quant_gran=(x.shape[0], 32))
    got = pf.dpe_matmul(x, w, e, input_quant_gran=(BIG, 32))
    np.testing.assert_array_equal(got, ref)
    ref_w = pf.dpe_matmul(x, w, e, weight_paral_size=(32, w.shape[1]), weight_quant_gran=(32, w.shape[1]))
    got_w = pf.dpe_matmul(x, w, e, weight_paral_size=(32, BIG), weight_quant_gran=(32, BIG))
    np.testing.assert_array_equal(got_w, ref_w)


@pytest.mark.parametrize("kw, name", [
    (dict(input_quant_gran=(1, BIG)), "input_quant_gran"),
    (dict(weight_quant_gran=(BIG, 32)), "weight_quant_gran"),
    (dict(weight_quant_gran=(32, BIG)), "weight_quant_gran"),
    (dict(input_quant_gran=(2 ** 64, 32)), "input_quant_gran"),
    (dict(input_paral_size=(1, BIG), weight_paral_size=(BIG, 32)), "input_paral_size"),
    (dict(input_paral_size=(1, 2 ** 31), weight_paral_size=(2 ** 31, 32)), "input_paral_size"),
])
def test_sizes_near_2_63_raise_valueerror_naming_the_argument(kw, name):
    x, w = _data()
    with pytest.raises(ValueError, match="argument '%s'" % name):
        pf.dpe_matmul(x, w, pf.DPETensor(**NOISE_OFF), **kw)


@pytest.mark.parametrize("kw, name", [
    (dict(paral_size=(BIG, 32)), "quant_gran"),   # quant_gran None = paral_size: fine, (BIG, 32)
    (dict(paral_size=(2, 32), quant_gran=(BIG, 32)), "quant_gran"),
    (dict(paral_size=(2 ** 63, 32)), "paral_size"),
])
def test_sliced_data_sizes_near_2_63(kw, name):
    x, _ = _data()
    if kw.get("paral_size", (0,))[0] == BIG:
        s = pf.SlicedData((1, 1, 2, 2), **kw)   # a block larger than the data: one block
        s.slice_data_imp(pf.DPETensor(**NOISE_OFF), x)
        assert s._gran_scale.shape == (1, 1, 2)
        return
    with pytest.raises(ValueError, match="argument '%s'" % name):
        pf.SlicedData((1, 1, 2, 2), **kw)


@needs_torch
def test_layer_sizes_near_2_63():
    from pyfastpim.nn import LinearMem
    e = pf.DPETensor(**NOISE_OFF)
    with pytest.raises(ValueError, match="argument 'weight_quant_gran'"):
        LinearMem(e, 64, 8, (1, 1, 2, 2), (1, 1, 2, 2), weight_quant_gran=(BIG, 32))


def test_conv_granule_near_2_63():
    e = pf.DPETensor(**NOISE_OFF)
    w = pf.SlicedData((1, 1, 2, 2), is_weight=True, paral_size=(32, 32), quant_gran=(32, 32))
    rng = np.random.default_rng(3)
    w.slice_data_imp(e, rng.standard_normal((3 * 9, 4)).astype(np.float32))
    x = rng.standard_normal((2, 3, 6, 6)).astype(np.float32)
    with pytest.raises(ValueError, match="argument 'input_quant_gran'"):
        e.forward_conv2d(x, w, 3, input_quant_gran=(1, BIG))
    whole = e.forward_conv2d(x, w, 3, input_quant_gran=(16, 32))[0]
    huge = e.forward_conv2d(x, w, 3, input_quant_gran=(BIG, 32))[0]
    np.testing.assert_array_equal(huge, whole)


# ---- 6. extreme noise sigmas ----

@pytest.mark.parametrize("kw, name", [
    (dict(read_variation=50.0), "read_variation"),
    (dict(read_variation=5.5), "read_variation"),
    (dict(read_variation={i: (50.0 if i == 7 else 0.1) for i in range(16)}), r"read_variation\[7\]"),
    (dict(vnoise=1e30), "vnoise"),
    (dict(write_variation=1e30), "write_variation"),
])
def test_noise_sigmas_that_overflow_raise(kw, name):
    with pytest.raises(ValueError, match="argument '%s'" % name):
        pf.DPETensor(**kw)


def test_largest_read_variation_gives_finite_outputs():
    x, w = _data(1)
    e = pf.DPETensor(read_variation=pf.dpe.READ_VARIATION_MAX, vnoise=0.0, write_variation=0.0)
    y = pf.dpe_matmul(np.tile(x, (40, 1)), w, e)
    assert np.isfinite(y).all()


def _every_noise_at_its_limit(**kw):
    return pf.DPETensor(write_variation=pf.dpe.NOISE_SIGMA_MAX, vnoise=pf.dpe.NOISE_SIGMA_MAX,
                        read_variation=pf.dpe.READ_VARIATION_MAX, **kw)


def test_every_noise_at_its_limit_gives_finite_outputs(isa):
    """Write variation and DAC noise at 1e6 with read noise at 5 on the default engine: the joint
    bound of the crossbar sums (docs/semantics.md section 7) is far from float32's range here."""
    x, w = _data(3)
    assert np.isfinite(pf.dpe_matmul(np.tile(x, (40, 1)), w, _every_noise_at_its_limit())).all()


def test_noise_bound_on_opencl_refuses_and_accepts_as_the_cpu(dev):
    """The bound is the core's contract (both backends validate with it): the same refusal on
    OpenCL, and at the limits on the default engine the same bits (section 11)."""
    x, w = _data(3)
    x = np.tile(x, (40, 1))
    cpu = pf.dpe_matmul(x, w, _every_noise_at_its_limit())
    cl = pf.dpe_matmul(x, w, _every_noise_at_its_limit(device="opencl"))
    assert np.isfinite(cpu).all() and np.array_equal(cpu.view(np.uint32), cl.view(np.uint32))
    n = 256  # 16 one-bit input slices, 8-bit weights on 256 levels: the worst case reaches 1.6e38
    rng = np.random.default_rng(4)
    for device in (None, "opencl"):
        e = _every_noise_at_its_limit(g_level=256, rdac=2, radc=2 ** 16, rate_stuck_HGS=0.0, device=device)
        with pytest.raises(ValueError, match="argument 'read_variation': the device noise can overflow float32"):
            pf.dpe_matmul(rng.standard_normal((2, n)).astype(np.float32),
                          rng.standard_normal((n, 8)).astype(np.float32), e, input_slice=(1,) * 16,
                          weight_slice=(1, 1, 2, 4, 8), input_paral_size=(1, n), weight_paral_size=(n, n),
                          input_quant_gran=(1, n), weight_quant_gran=(n, n))


def test_noise_whose_sums_can_overflow_float32_raises_naming_read_variation():
    """Every noise at its limit, 16 one-bit slices per operand, 262144-row crossbars and a level
    span of HGS * 2**-22: the noisy crossbar sums' shift-and-add overflowed float32 and the product
    held inf (with data ~ N(0, 1), results ~1e30). The joint bound refuses it, naming the noise."""
    n = 2 ** 18
    e = pf.DPETensor(HGS=1.0, LGS=1.0 - 2 ** -22, g_level=2, write_variation=pf.dpe.NOISE_SIGMA_MAX,
                     vnoise=pf.dpe.NOISE_SIGMA_MAX, read_variation=pf.dpe.READ_VARIATION_MAX, rdac=2,
                     radc=2 ** 16, rate_stuck_HGS=0.0)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, n)).astype(np.float32)
    w = rng.standard_normal((n, 8)).astype(np.float32)
    with pytest.raises(ValueError, match="argument 'read_variation': the device noise can overflow float32"):
        y = pf.dpe_matmul(x, w, e, input_slice=(1,) * 16, weight_slice=(1,) * 16, input_paral_size=(1, n),
                          weight_paral_size=(n, n), input_quant_gran=(1, n), weight_quant_gran=(n, n))
        assert np.isfinite(y).all()  # not reached: before the bound, one element was inf


@pytest.mark.parametrize("kw, what", [
    (dict(vread=1e32), "at most 5.7e"),
    (dict(vread=1e39), "at most 5.7e"),  # not even a float32 voltage: the spec's V = vread * k / (rdac-1) was inf
    (dict(vread=1e300), "at most 5.7e"),
    (dict(vread=0.0), "must be > 0"),
    (dict(vread=1e25, HGS=1e30, LGS=0.0, rdac=2, g_level=2), "ADC reference current"),
])
def test_vread_beyond_its_range_raises_naming_vread(kw, what):
    """vread cancels out of the kernels' arithmetic, so before it had no upper bound; the spec's
    DAC voltages and ADC reference current (HGS - LGS) * vread * n then overflow float32."""
    with pytest.raises(ValueError, match="argument 'vread': .*%s" % what):
        pf.DPETensor(**kw)


def test_vread_at_its_bounds_is_accepted():
    assert pf.DPETensor(vread=pf._core.VREAD_MAX).vread == pf._core.VREAD_MAX
    pf.DPETensor(vread=20.0, HGS=1e30, LGS=0.0, rdac=2, g_level=2)  # (HGS - LGS) * 20 * (2**24 - 1) < 3.4e38


def test_core_rejects_read_sigma_that_overflows_exp():
    x, w = _data(2)
    e = pf.DPETensor(read_variation=0.1)
    xs = pf.SlicedData((1, 1, 2, 2), paral_size=(1, 32), quant_gran=(1, 32))
    xs.slice_data_imp(e, x)
    ws = pf.SlicedData((1, 1, 2, 2), is_weight=True, paral_size=(32, 32), quant_gran=(32, 32))
    ws.slice_data_imp(e, w)
    e._read_sigmas = lambda: np.full(16, 50.0, np.float32)  # bypassing the engine's validation: the core checks too
    with pytest.raises(ValueError, match="argument 'read_sigma'"):
        e.MapReduceDot(xs, ws)


# ---- 5. out= tensors that autograd tracks ----

def _ctx():
    c = pf.AttentionContext(strength=0.5)
    x = torch.randn(6, 8, generator=torch.Generator().manual_seed(0))
    c.update_outgoing(x, x)
    c.incoming = c.outgoing
    return c, x


@needs_torch
def test_apply_out_refuses_a_leaf_that_requires_grad():
    c, x = _ctx()
    out = torch.zeros(6, 8, requires_grad=True)
    with pytest.raises(RuntimeError, match="argument 'out'.*requires grad"):
        c.apply(x, out=out)
    assert out.abs().sum().item() == 0.0  # untouched
    with pytest.raises(RuntimeError, match="argument 'out'"):
        c.apply_step(x[0], out=torch.zeros(8, requires_grad=True))
    with pytest.raises(RuntimeError, match="argument 'out'"):
        c.gradients(x, torch.ones_like(x), out=torch.zeros(6, 8, requires_grad=True))


@needs_torch
def test_apply_out_allowed_without_grad_tracking():
    c, x = _ctx()
    ref = c.apply(x)
    out = torch.zeros(6, 8, requires_grad=True)
    with torch.no_grad():          # as torch's own out=: allowed when autograd is off
        c.apply(x, out=out)
    torch.testing.assert_close(out.detach(), torch.as_tensor(np.asarray(ref)), rtol=0, atol=0)
    plain = torch.zeros(6, 8)
    c.apply(x, out=plain)
    torch.testing.assert_close(plain, out.detach(), rtol=0, atol=0)


# ---- 8. Array.to_torch() reference counts ----

def test_to_torch_does_not_leak_references():
    a = pf.asarray(np.arange(12, dtype=np.float32))
    for _ in range(100):
        a.to_torch()
    gc.collect()
    before_empty, before_a = sys.getrefcount(()), sys.getrefcount(a)
    for _ in range(10000):
        t = a.to_torch()
        del t
    gc.collect()
    assert sys.getrefcount(()) - before_empty < 100
    assert sys.getrefcount(a) == before_a


# ---- 4. inputs mutated by another thread during a call ----

def _race(slice_call, data, scale, rounds, rows=2):
    """Calls slice_call() while a thread rewrites the first two rows of data between their values
    and scale times them: a small region, so the max pass and the code pass each see either
    state about half the time (wrapped codes need the max pass to see the small values and
    the code pass the large ones)."""
    import threading
    region = data[:rows]
    base = region.copy()
    big = base * scale
    stop = threading.Event()

    def writer():
        while not stop.is_set():
            np.copyto(region, big)
            np.copyto(region, base)

    t = threading.Thread(target=writer)
    t.start()
    try:
        return [slice_call() for _ in range(rounds)]
    finally:
        stop.set()
        t.join()


@pytest.mark.parametrize("bw_e", [None, 4])
def test_racing_writer_gives_bounded_codes_never_wrapped(bw_e):
    """Positive data rewritten between x and 4x during slicing: the max pass and the code pass may
    see different values, but every code must stay a non-negative q <= qmax (no sign bit, no
    wrap-around: wrapped codes turned 4K into -4, a 35% deviation of the product)."""
    import os
    small = os.environ.get("PYFASTPIM_SANITIZED") == "1"
    rng = np.random.default_rng(7)
    data = rng.uniform(0.5, 1.0, (256, 1024) if small else (1024, 2048)).astype(np.float32)
    method = (1, 1, 2, 2)
    B = 6
    qmax = 2 ** (B - 1) - 1
    results = _race(lambda: pf.slice_quantize(data, method, paral_size=(1, 32), quant_gran="per-matrix", bw_e=bw_e),
                    data, 4.0, 10 if small else 40)
    _, w, _ = pf.sliced.slice_params(method)
    for r in results:
        codes = np.asarray(r.codes).astype(np.int64)
        q = np.tensordot(w, codes, axes=(0, 0))
        assert (codes[-1] == 0).all(), "sign slice set for positive inputs: wrapped codes"
        assert q.min() >= 0 and q.max() <= qmax


def test_racing_writer_in_the_fused_product_stays_bounded():
    """The same race in dpe_matmul (slicing inside the call). Inputs are in [0.5, 1] or, while
    rewritten, [2, 4]: with clamped codes every term of a row of x @ ones is at least ~0.45
    whatever the granule max the first pass saw; a wrapped code made a term about -4."""
    import os
    small = os.environ.get("PYFASTPIM_SANITIZED") == "1"
    rng = np.random.default_rng(8)
    x = rng.uniform(0.5, 1.0, (64, 512) if small else (128, 1024)).astype(np.float32)
    w = np.ones((x.shape[1], 4), np.float32)
    e = pf.DPETensor(**NOISE_OFF)
    results = _race(lambda: pf.dpe_matmul(x, w, e, input_quant_gran="per-matrix"), x, 4.0, 10 if small else 80)
    for y in results:
        assert y.min() >= 0.4 * x.shape[1]
        assert y.max() <= 4.0 * 1.1 * x.shape[1]
