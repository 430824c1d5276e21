"""Noise does not depend on the ISA (issue 18 item 6): with noise on, the portable ('generic') CPU
kernels, the AVX2 and AVX-512 kernels and the OpenCL kernels compute the same bits for the same seed
and call. The generic path calls SLEEF's scalar FMA builds of the functions the SIMD path uses
(logf_u35, sincosf_u35, expf_u10) at the same places, and fuses its multiply-adds as the SIMD
micro-kernels do when the operands are inexact. Bit-identity needs FMA, which every CPU with AVX2
has; on a CPU without AVX2 the generic path is compared with OpenCL within the README's 1e-5."""
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="pyfastpim.nn needs torch")

import pyfastpim
from pyfastpim import _core
from pyfastpim.nn import Conv2dMem, LinearMem

from helpers import HGS, LGS, at_isa, available_isas, make_case, rel

AVAILABLE = available_isas()
EXACT = AVAILABLE[-1] != "generic"  # FMA present: every path computes the same bits


def at_generic(fn):
    """fn() on the portable path (the comparison every ISA must match bit for bit)."""
    return at_isa("generic", fn)


def assert_same(got, ref, isa):
    """got (computed under isa) equals ref (the generic path's) bit for bit."""
    if isinstance(ref, tuple):
        for a, b in zip(got, ref):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=str(isa))
    else:
        np.testing.assert_array_equal(np.asarray(got), np.asarray(ref), err_msg=str(isa))


def test_inline_sleef_algorithms_equal_libsleef_on_every_argument_they_get():
    """The AVX2 generator inlines SLEEF's logf_u35 / sincosf_u35 / expf_u10 (csrc/cpu/sleef_fma8.h)
    for the arguments it passes them: compared with libsleef bit for bit on every uniform the
    generator can draw (all 2**24), every angle 2 pi u, and every 61st float for exp (every binade,
    subnormals, the overflow and underflow cut-offs, infinities, NaNs)."""
    counts = _core._sleef_fma8_mismatches()
    if counts is None:
        pytest.skip("no AVX2 on this CPU")
    assert counts == (0, 0, 0), "lanes that differ from libsleef: log %d, sincos %d, exp %d" % counts


@pytest.mark.parametrize("idx0,count", [(0, 100_003), (3, 1_001), ((1 << 34) - 41, 97), (1 << 40, 4096)])
@pytest.mark.parametrize("stream", [0, 1, 2])
def test_normals_are_bit_identical_on_every_isa(isa, idx0, count, stream):
    if len(AVAILABLE) == 1:
        pytest.skip("only the generic path exists on this CPU")

    def run():
        return np.asarray(_core.normals(12345, stream, 7, idx0, count))
    assert_same(run(), at_generic(run), isa)


def mvm_case(seed, N=3, R=23, K=200, P=61, n=32, radc=4096):
    rng = np.random.default_rng(seed)
    xw, ww, xg, wg = (1, 1, 2, 4), (1, 1, 2), (1, 32), (32, 16)
    xs, xsc, wl, wsc = make_case(rng, N, R, K, P, n, xw, ww, xg, wg, 16)
    cond = ((wl * ((HGS - LGS) / 15) + LGS) * (1 + 0.02 * rng.standard_normal(wl.shape))).astype(np.float32)
    return (xs, xsc, xg, xw, wl, cond, wsc, wg, ww, n, 16, 16, [radc] * 3, HGS, LGS)


NOISES = [(0.05, 0.0, False), (0.0, 0.05, False), (0.0, 0.0, True), (0.05, 0.05, True), (0.2, 0.1, False)]


@pytest.mark.parametrize("sigma,vnoise,cond", NOISES)
@pytest.mark.parametrize("P", [61, 64, 5])
def test_noisy_mvm_is_bit_identical_on_every_isa(isa, sigma, vnoise, cond, P):
    args = list(mvm_case(P, P=P))
    if not cond:
        args[5] = None
    sig = np.full(16, sigma, np.float32) if sigma else None

    def run():
        return np.asarray(_core.dpe_mvm(*args, sig, vnoise, 99, 4))
    got = run()
    if len(AVAILABLE) > 1:
        assert_same(got, at_generic(run), isa)
    # the noise is really on (the comparison is not between noise-free results)
    exact = np.asarray(_core.dpe_mvm(*args[:5], None, *args[6:], None, 0.0, 99, 4))
    assert not np.array_equal(got, exact)


def conv_args(sigma, vnoise, dequant=False):
    rng = np.random.default_rng(5)
    img = rng.standard_normal((2, 8, 16, 15)).astype(np.float32)
    K = 72
    wl = rng.integers(0, 4, (3, K, 29)).astype(np.uint8)
    wsc = rng.random((3, 2)).astype(np.float32)
    sig = np.full(16, sigma, np.float32) if sigma else None
    return (img, (3, 3), (1, 1), (1, 1), (1, 1), (1, 32), (1, 1, 2, 4), False, wl, None, wsc, (32, 16), (1, 1, 1),
            32, 16, 16, [4096] * 3, HGS, LGS, sig, vnoise, 3, 1, dequant)


@pytest.mark.parametrize("sigma,vnoise", [(0.05, 0.0), (0.0, 0.05), (0.05, 0.05)])
def test_noisy_conv2d_is_bit_identical_on_every_isa(isa, sigma, vnoise):
    def run():
        return np.asarray(_core.dpe_conv2d(*conv_args(sigma, vnoise))[0])
    got = run()
    if len(AVAILABLE) > 1:
        assert_same(got, at_generic(run), isa)


def layer_outputs(device):
    torch.manual_seed(0)
    eng = pyfastpim.DPETensor(seed=11, read_variation=0.05, vnoise=0.05, write_variation=0.02, radc=2 ** 12,
                              device=device)
    lin = LinearMem(eng, 200, 61, (1, 1, 2, 4), (1, 1, 2, 4))
    conv = Conv2dMem(eng, 6, 21, 3, (1, 1, 2, 4), (1, 1, 2, 4), padding=1)
    g = torch.Generator().manual_seed(1)
    x, xc = torch.randn(30, 200, generator=g), torch.randn(2, 6, 14, 14, generator=g)
    with torch.no_grad():
        return lin(x).numpy(), conv(xc).numpy()


def test_noisy_layers_are_bit_identical_on_every_isa(isa):
    got = layer_outputs("cpu")
    if len(AVAILABLE) > 1:
        assert_same(got, at_generic(lambda: layer_outputs("cpu")), isa)


def test_generic_and_simd_noise_equal_opencl(dev, isa):
    cl_normals = np.asarray(_core.normals(77, 1, 3, 5, 20_001, device=dev))
    cl_layers = layer_outputs("opencl")
    args = list(mvm_case(1))
    sig = np.full(16, 0.05, np.float32)
    cl_mvm = np.asarray(pyfastpim.cl_dpe_mvm(dev, *args, sig, 0.05, 99, 4))
    cpu_normals = np.asarray(_core.normals(77, 1, 3, 5, 20_001))  # under the `isa` fixture's limit
    cpu_layers = layer_outputs("cpu")
    cpu_mvm = np.asarray(_core.dpe_mvm(*args, sig, 0.05, 99, 4))
    if EXACT:
        np.testing.assert_array_equal(cl_normals, cpu_normals)
        np.testing.assert_array_equal(cl_mvm, cpu_mvm)
        for a, b in zip(cl_layers, cpu_layers):
            np.testing.assert_array_equal(a, b)
    else:  # no FMA on this CPU: within the README's contract
        assert rel(cl_normals, cpu_normals) < 1e-5 and rel(cl_mvm, cpu_mvm) < 1e-5
        for a, b in zip(cl_layers, cpu_layers):
            assert rel(a, b) < 1e-5
