"""CPU / OpenCL parity: the same checks on every backend (the `backend` fixture of tests/conftest.py).

Each case runs through helpers.Backend on 'cpu' (_core) and on 'opencl' (the suite's device: PoCL
in CI; skipped with a reason when the ICD loader reports no platform). Noise off, every backend
computes the integer reference (tests/reference/dpe_ref.py) bit for bit; OpenCL additionally
equals the CPU path, within the 1e-5 contract with noise on (bit for bit where the CPU draws noise
with its SIMD path). Bad arguments raise the same exception, naming the same argument, on both.
"""
import numpy as np
import pytest
from hypothesis import given

import pyfastpim
from pyfastpim import _core
from helpers import (HGS, LGS, engine_args, engine_case, config_case, configs, conv_args, make_case, mvm_args,
                     rel)
from reference.dpe_ref import mvm_exact


def run(backend, *args, **kw):
    return np.asarray(backend.dpe_mvm(*mvm_args(*args, **kw)))


def cpu(*args, **kw):
    return np.asarray(_core.dpe_mvm(*mvm_args(*args, **kw)))


# ---- fused MVM: results ----------------------------------------------------------------------------

@given(configs())
def test_noise_free_output_is_bit_identical_to_the_integer_reference(backend, c):
    args, _ = config_case(c)
    got = run(backend, *args)
    np.testing.assert_array_equal(got, mvm_exact(*args))
    if backend.name != "cpu":
        np.testing.assert_array_equal(got, cpu(*args))


@pytest.mark.parametrize("radc", [2 ** 4, 2 ** 6, 2 ** 16, 1000, 7])
def test_adc_ties_round_half_to_even(backend, isa, radc):
    # crossbar sums that land exactly on .5 codes must round to even, on every ISA and device
    for seed in (radc, 0):
        xs, xsc, wl, wsc = make_case(np.random.default_rng(seed), 2, 9, 64, 35, 8, (1, 1, 2), (1, 1, 2), (1, 8),
                                     (8, 8), 4)
        args = (xs, xsc, (1, 8), (1, 1, 2), wl, wsc, (8, 8), (1, 1, 2), 8, 4, 4, [radc] * 3)
        got = run(backend, *args)
        np.testing.assert_array_equal(got, mvm_exact(*args))
        if backend.name != "cpu":  # the exact tables equal the CPU's under this ISA
            np.testing.assert_array_equal(got, cpu(*args))


def test_noisy_output_is_deterministic_per_seed_and_call_and_thread_count(backend):
    xs, xsc, wl, wsc = engine_case(np.random.default_rng(4))
    sig = np.full(4, 0.05, np.float32)

    def noisy(**kw):
        return np.asarray(backend.dpe_mvm(*engine_args(xs, xsc, wl, wsc, sigma=sig, vnoise=0.05, **kw)))
    with pyfastpim.threads(1):
        a = noisy(seed=7, call=3)
    with pyfastpim.threads(2):
        b = noisy(seed=7, call=3)
    np.testing.assert_array_equal(a, b)
    c = noisy(seed=8, call=3)
    d = noisy(seed=7, call=4)
    assert not np.array_equal(a, c) and not np.array_equal(a, d)
    exact = np.asarray(backend.dpe_mvm(*engine_args(xs, xsc, wl, wsc)))
    # noise perturbs, but the product stays close to the exact one
    assert 1e-4 < rel(a, exact) < 0.2


def test_empty_and_degenerate_shapes(backend):
    wl = np.zeros((1, 0, 5), np.uint8)
    out = np.asarray(backend.dpe_mvm(np.zeros((1, 1, 3, 0), np.uint8), np.zeros((1, 3, 0), np.float32), (1, 4),
                                     (1,), wl, None, np.zeros((0, 2), np.float32), (4, 4), (1,), 4, 4, 2, [16], HGS,
                                     LGS, None, 0.0, 1, 0))
    assert out.shape == (1, 3, 5) and not out.any()
    out = np.asarray(backend.dpe_mvm(np.zeros((1, 0, 3, 4), np.uint8), np.zeros((0, 3, 1), np.float32), (1, 4),
                                     (1,), np.zeros((1, 4, 5), np.uint8), None, np.ones((1, 2), np.float32), (4, 4),
                                     (1,), 4, 4, 2, [16], HGS, LGS, None, 0.0, 1, 0))
    assert out.shape == (0, 3, 5)


# ---- fused MVM: bad arguments ------------------------------------------------------------------------

@pytest.mark.parametrize("kw, word", [
    (dict(x_widths=(2, 1)), "x_widths"),
    (dict(w_widths=(1, 3), radc=[16, 16], w_levels=np.zeros((2, 16, 5), np.uint8)), "w_widths"),  # 3 bits > g_level
    (dict(radc=[16]), "radc"),
    (dict(radc=[1, 16, 16]), "radc"),
    (dict(n=3), "n"),
    (dict(x_granule=(0, 8)), "x_granule"),
    (dict(x_scale=np.zeros((1, 9, 9), np.float32)), "x_scale"),
    (dict(w_levels=np.zeros((3, 7, 5), np.uint8)), "w_levels"),
    (dict(read_sigma=np.full(3, 0.1, np.float32)), "read_sigma"),
    (dict(read_sigma=np.array([0.1, np.nan, 0, 0], np.float32)), "read_sigma"),
    (dict(out=np.zeros((1, 4, 5), np.float64)), "out"),
    (dict(g_level=256, rdac=256, n=512, x_granule=(1, 512), w_granule=(512, 8), x_codes=np.zeros((3, 1, 4, 512), np.uint8),
          x_scale=np.ones((1, 4, 1), np.float32), w_levels=np.zeros((3, 512, 5), np.uint8),
          w_scale=np.ones((1, 1), np.float32)), "2\\*\\*24"),
    (dict(weights_key=[1, 2]), "unhashable"),
])
def test_bad_arguments_raise_naming_the_argument(backend, kw, word):
    if "weights_key" in kw and backend.name == "cpu":
        pytest.skip("weights_key (resident device weights) is an OpenCL argument")
    args = dict(x_codes=np.zeros((3, 1, 4, 16), np.uint8), x_scale=np.ones((1, 4, 2), np.float32), x_granule=(1, 8),
                x_widths=(1, 1, 2), w_levels=np.zeros((3, 16, 5), np.uint8), w_conductance=None,
                w_scale=np.ones((2, 1), np.float32), w_granule=(8, 8), w_widths=(1, 1, 1), n=8, rdac=4, g_level=4,
                radc=[16] * 3, HGS=HGS, LGS=LGS, read_sigma=None, vnoise=0.0, seed=1, call=0)
    args.update(kw)
    with pytest.raises((ValueError, TypeError), match=word):
        backend.dpe_mvm(**args)


# ---- convolution, slicing and programming: bad arguments -----------------------------------------------

# one 3x3 kernel over a 4x4 image: the arguments each case below breaks in one place
BAD_CONV = dict(N=1, C=1, H=4, W=4, P=3, kh=3, kw=3, stride=(1, 1), padding=(0, 0), dilation=(1, 1), n=9,
                g_level=16, xw=(1, 1, 2), ww=(1, 1, 2), xg=(1, 9), wg=(9, 3), bfp=False, rdac=16, radc=256,
                seed=1, scale=1.0, zeros=False)


@pytest.mark.parametrize("change, exc, word", [
    (lambda a: (a[0][..., 0],) + a[1:], ValueError, "input"),
    (lambda a: (np.full((1, 1, 4, 4), np.nan, np.float32),) + a[1:], ValueError, "NaN"),
    (lambda a: a[:1] + ((5, 5),) + a[2:], ValueError, "smaller than the dilated kernel"),
    (lambda a: a[:2] + ((0, 1),) + a[3:], ValueError, "stride"),
    (lambda a: a[:6] + ((1, 9, 2),) + a[7:], ValueError, "x_widths"),
    (lambda a: a[:8] + (a[8][:, :5],) + a[9:], ValueError, "w_levels"),
    (lambda a: a[:13] + (4,) + a[14:], ValueError, "'n'"),
])
def test_conv2d_bad_arguments_raise_on_every_backend(backend, change, exc, word):
    args = change(conv_args(BAD_CONV))
    backend.dpe_conv2d(*conv_args(BAD_CONV))  # the unchanged arguments are accepted
    with pytest.raises(exc, match=word):
        backend.dpe_conv2d(*args)


@pytest.mark.parametrize("args, exc, word", [
    ((np.array([[1.0, np.nan]], np.float32), (1, 2), (1, 1)), ValueError, "NaN or infinity"),
    ((np.array([[1.0, np.inf]], np.float32), (1, 2), (1, 1), "per-matrix", 4), ValueError, "NaN or infinity"),
    # granules one row high: the OpenCL quantize kernel finds their max itself; taller or wider
    # than its chunk: the separate max pass
    ((np.where(np.arange(120).reshape(3, 40) == 97, np.nan, 1.0).astype(np.float32), (1, 2), (1, 1), (1, 8)),
     ValueError, "NaN or infinity"),
    ((np.array([[1.0, 2.0], [-np.inf, 0.0]], np.float32), (1, 2), (1, 1), "per-matrix"), ValueError,
     "NaN or infinity"),
    ((np.where(np.arange(600).reshape(2, 300) == 599, np.nan, 1.0).astype(np.float32), (1, 2), (1, 1), "per-row"),
     ValueError, "NaN or infinity"),
    ((np.zeros((2, 2), np.float32), (2, 2), (1, 1)), ValueError, "slice_method"),
    ((np.zeros((2, 2), np.float32), (1, 2), (0, 1)), ValueError, "paral_size"),
    ((np.zeros((0, 2), np.float32), (1, 2), (1, 1)), ValueError, "empty"),
    ((np.zeros((2, 2, 2, 2), np.float32), (1, 2), (1, 1)), ValueError, "data"),
    ((np.zeros((2, 2), np.float32), (1, 2), (1, 1), "per-thing"), ValueError, "quant_gran"),
    ((np.zeros((2, 2), np.float32), (1, 4), (1, 1), None, None, False, 4), ValueError, "g_level"),
])
def test_slice_quantize_errors_equal_on_every_backend(backend, args, exc, word):
    with pytest.raises(exc, match=word):
        backend.slice_quantize(*args)


@pytest.mark.parametrize("kw, word", [
    (dict(HGS=1e-7, LGS=1e-5), "LGS"), (dict(write_variation=-1.0), "write_variation"),
    (dict(rate_stuck_HGS=0.7, rate_stuck_LGS=0.7), "rate_stuck_LGS"), (dict(seed=-1), "seed"),
])
def test_program_conductance_errors_equal_on_every_backend(backend, kw, word):
    args = dict(levels=np.zeros((1, 2, 2), np.uint8), g_level=16, HGS=1e-5, LGS=1e-7)
    args.update(kw)
    with pytest.raises(ValueError, match=word):
        backend.program_conductance(**args)
