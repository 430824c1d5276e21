"""Paired weight slices on OpenCL (OpenCLDevice.pair_slices, csrc/opencl/dpe.c mvm_pair_shift):
noise-free products whose crossbar sums are small pack two weight slices per float,
B = L_2j + 2**s L_2j+1, and the tile kernels split each exact sum before the ADC (pf_adc_slice).

The contract: pairing never changes a number. Every case is compared bit for bit with the same
device with pairing off, the CPU path and the NumPy reference, through both tile kernels and the
three tile shapes of tests/helpers.CL_TILES; paired_calls says whether the call paired, so each
case also asserts when pairing must and must not happen: the bound D + 2**s D < 2**24 on both
sides (sums reaching it exactly), noise of every kind, one weight slice, levels above g_level - 1.
"""
import numpy as np
import pytest

from pyfastpim import _core
from reference.dpe_ref import mvm_exact, slice_constants
from helpers import CL_TILES, HGS, LGS, conv_args, make_case, mvm_args, needs_cl, open_cl_device

pytestmark = needs_cl


@pytest.fixture(scope="module", params=list(CL_TILES))
def dev(request):
    d = open_cl_device(CL_TILES[request.param])
    old = d.mvm_kernel, d.pair_slices
    yield d
    d.mvm_kernel, d.pair_slices = old


def run(d, kernel, args, pair=True, **kw):
    """(output, whether the call paired slices) of dpe_mvm on d with the given kernel and pairing."""
    old = d.mvm_kernel, d.pair_slices
    d.mvm_kernel, d.pair_slices = kernel, pair
    try:
        before = d.paired_calls
        out = np.asarray(_core.dpe_mvm(*args, device=d, **kw))
        return out, d.paired_calls - before
    finally:
        d.mvm_kernel, d.pair_slices = old


def pair_shift(rdac, g_level, n):
    """The shift the host picks for a noise-free call, 0: no pairing (the bound, written out)."""
    D = (rdac - 1) * (g_level - 1) * n
    s = int(D).bit_length()
    return s if D >= 1 and D + (D << s) < 2 ** 24 else 0


def check_all_paths(d, args, ref, expect_paired):
    """Both kernels, paired and not: equal to the CPU and the reference; pairing as expected."""
    cpu = np.asarray(_core.dpe_mvm(*args))
    np.testing.assert_array_equal(cpu, ref)
    for kernel in ("untiled", "tiled"):
        paired, n_paired = run(d, kernel, args)
        single, n_single = run(d, kernel, args, pair=False)
        assert (n_paired, n_single) == (int(expect_paired), 0), kernel
        np.testing.assert_array_equal(single, cpu)
        np.testing.assert_array_equal(paired, cpu)


# (N, R, K, P, n, x widths, w widths, rdac, g_level): two, three (odd: the last B slice holds one
# weight slice) and four weight slices; ragged rows, columns and blocks; n = 1 and n past the
# tiled kernel's local-memory chunk
CASES = [
    (2, 37, 100, 53, 32, (1, 1, 2, 2), (1, 1, 2), 16, 4),
    (1, 13, 130, 70, 64, (1, 2), (1, 1), 4, 2),
    (3, 9, 81, 17, 40, (1, 3), (1, 2, 2, 2), 8, 4),
    (2, 5, 7, 3, 1, (1, 1), (1, 3, 3), 256, 8),
    (1, 24, 96, 40, 32, (1, 1, 2, 2), (1, 1, 2, 2), 4, 4),
]


@pytest.mark.parametrize("N, R, K, P, n, xw, ww, rdac, g_level", CASES)
@pytest.mark.parametrize("radc", [4096, 16], ids=["rint_adc", "table_adc"])
def test_paired_products_are_bit_identical(dev, N, R, K, P, n, xw, ww, rdac, g_level, radc):
    rng = np.random.default_rng(N * 7919 + R * 31 + K + P * 3 + n + radc)
    xg, wg = (2, n), (n, 16)
    xs, xsc, wl, wsc = make_case(rng, N, R, K, P, n, xw, ww, xg, wg, g_level)
    radcs = [radc] * len(ww)
    args = mvm_args(xs, xsc, xg, xw, wl, wsc, wg, ww, n, rdac, g_level, radcs)
    ref = mvm_exact(xs, xsc, xg, xw, wl, wsc, wg, ww, n, rdac, g_level, radcs)
    assert np.abs(ref).max() > 0
    check_all_paths(dev, args, ref, expect_paired=pair_shift(rdac, g_level, n) > 0)


@pytest.mark.parametrize("n, paired", [(91, True), (92, False)])
def test_the_exactness_bound_on_both_sides_with_sums_at_the_bound(dev, n, paired):
    # rdac 4, g_level 16: D = 45 n; n = 91 gives D = 4095, s = 12 and a packed sum of
    # 4095 + 2**12 * 4095 = 2**24 - 1 (the last exact one); n = 92 would need 2**13 * 4140 > 2**24
    assert (pair_shift(4, 16, n) > 0) == paired
    rng = np.random.default_rng(n)
    xw, ww, g_level, rdac = (1, 2), (1, 4, 4), 16, 4
    K, P = 2 * n + 5, 20
    xg, wg = (1, n), (n, 8)
    xs, xsc, wl, wsc = make_case(rng, 1, 6, K, P, n, xw, ww, xg, wg, g_level)
    mx, _ = slice_constants(xw)
    xs[:, :, :3, :] = np.array(mx, np.uint8)[:, None, None, None]  # rows at the largest DAC code
    wl[:, :, :4] = g_level - 1  # columns at the largest level: their crossbar sums are D
    radc = [2 ** 16] * 3
    args = mvm_args(xs, xsc, xg, xw, wl, wsc, wg, ww, n, rdac, g_level, radc)
    ref = mvm_exact(xs, xsc, xg, xw, wl, wsc, wg, ww, n, rdac, g_level, radc)
    check_all_paths(dev, args, ref, expect_paired=paired)


@pytest.mark.parametrize("noise", ["read", "vnoise", "conductance"])
def test_noisy_products_never_pair(dev, noise):
    rng = np.random.default_rng(5)
    xw, ww, g_level, n = (1, 1, 2, 2), (1, 1, 2, 2), 4, 32
    xs, xsc, wl, wsc = make_case(rng, 1, 10, 70, 30, n, xw, ww, (1, n), (n, 32), g_level)
    kw = {"read": dict(sigma=np.full(g_level, 0.05, np.float32)), "vnoise": dict(vnoise=0.05),
          "conductance": dict(cond=((wl * (HGS - LGS) / (g_level - 1) + LGS)).astype(np.float32))}[noise]
    args = mvm_args(xs, xsc, (1, n), xw, wl, wsc, (n, 32), ww, n, 4, g_level, [4096] * 4, **kw)
    for kernel in ("untiled", "tiled"):
        out, n_paired = run(dev, kernel, args)
        single, _ = run(dev, kernel, args, pair=False)
        assert n_paired == 0
        np.testing.assert_array_equal(out, single)


def test_one_weight_slice_does_not_pair(dev):
    rng = np.random.default_rng(6)
    xs, xsc, wl, wsc = make_case(rng, 1, 8, 64, 24, 32, (1, 1), (1,), (1, 32), (32, 8), 4)
    args = mvm_args(xs, xsc, (1, 32), (1, 1), wl, wsc, (32, 8), (1,), 32, 4, 4, [4096])
    ref = mvm_exact(xs, xsc, (1, 32), (1, 1), wl, wsc, (32, 8), (1,), 32, 4, 4, [4096])
    check_all_paths(dev, args, ref, expect_paired=False)


@pytest.mark.parametrize("keyed", [False, True])
def test_levels_above_g_level_fall_back_to_one_slice_per_float(dev, keyed):
    # levels a programming never makes (above g_level - 1) could carry one slice's sum into the
    # other's: the packing kernel flags them and the call packs one slice per float instead
    rng = np.random.default_rng(8)
    xw, ww, g_level, n = (1, 1, 2, 2), (1, 1, 2, 2), 4, 32
    xs, xsc, wl, wsc = make_case(rng, 1, 10, 70, 30, n, xw, ww, (1, n), (n, 32), g_level)
    wl[2, 5, 7] = 100
    args = mvm_args(xs, xsc, (1, n), xw, wl, wsc, (n, 32), ww, n, 4, g_level, [4096] * 4)
    ref = mvm_exact(xs, xsc, (1, n), xw, wl, wsc, (n, 32), ww, n, 4, g_level, [4096] * 4)
    cpu = np.asarray(_core.dpe_mvm(*args))
    np.testing.assert_array_equal(cpu, ref)
    key = ("levels above g_level", 1) if keyed else None
    for _ in range(2):  # keyed: the second call finds the packing marked unusable
        out, n_paired = run(dev, "untiled", args, weights_key=key)
        assert n_paired == 0
        np.testing.assert_array_equal(out, cpu)
    wl[2, 5, 7] = 1  # programmable again: the same (keyed: re-keyed) weights pair
    key = ("levels above g_level", 2) if keyed else None
    out, n_paired = run(dev, "untiled", mvm_args(xs, xsc, (1, n), xw, wl, wsc, (n, 32), ww, n, 4, g_level,
                                                 [4096] * 4), weights_key=key)
    assert n_paired == 1
    np.testing.assert_array_equal(out, mvm_exact(xs, xsc, (1, n), xw, wl, wsc, (n, 32), ww, n, 4, g_level,
                                                 [4096] * 4))


def test_paired_convolution_equals_the_cpu(dev):
    from pyfastpim.devices import cl_dpe_conv2d
    c = dict(N=2, C=5, H=9, W=8, P=7, kh=3, kw=3, stride=(1, 2), padding=(1, 0), dilation=(1, 1), n=16, g_level=4,
             xw=(1, 1, 2, 2), ww=(1, 1, 2), xg=(2, 16), wg=(16, 4), bfp=False, rdac=16, radc=1024, seed=4, scale=1.0,
             zeros=False)
    args = conv_args(c)
    cpu = np.asarray(_core.dpe_conv2d(*args)[0])
    for kernel in ("untiled", "tiled"):
        dev.mvm_kernel, before = kernel, dev.paired_calls
        out = np.asarray(cl_dpe_conv2d(dev, *args)[0])
        assert dev.paired_calls == before + 1
        np.testing.assert_array_equal(out, cpu)


def test_pair_slices_takes_booleans_only(dev):
    for bad in (1, "yes", None):
        with pytest.raises(TypeError, match="pair_slices"):
            dev.pair_slices = bad
    assert dev.pair_slices in (True, False)
