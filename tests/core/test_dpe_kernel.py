"""The fused DPE kernel (_core.dpe_mvm) on slice codes, against tests/reference/dpe_ref.py."""
import numpy as np

import pyfastpim
from pyfastpim import _core
from helpers import HGS, LGS, at_isa, engine_case, no_isa_limit
from reference.dpe_ref import mvm_exact


def run(xs, xsc, xg, xw, wl, wsc, wg, ww, n, rdac, g_level, radc, sigma=None, vnoise=0.0, seed=1, call=0, cond=None):
    return np.asarray(_core.dpe_mvm(xs, xsc, xg, xw, wl, cond, wsc, wg, ww, n, rdac, g_level, radc, HGS, LGS, sigma,
                                    vnoise, seed, call))


def test_noise_free_is_identical_for_any_thread_count_and_isa(isa):
    xs, xsc, wl, wsc = engine_case(np.random.default_rng(3))
    args = (xs, xsc, (1, 32), (1, 1, 2, 2), wl, wsc, (32, 32), (1, 1, 2, 2), 32, 4, 4, [4096] * 4)
    outs = []
    for threads in (1, 2, 3):  # under the `isa` fixture's limit
        with pyfastpim.threads(threads):
            outs.append(run(*args))
    outs.append(at_isa("generic", lambda: run(*args)))
    for o in outs[1:]:
        np.testing.assert_array_equal(o, outs[0])


def test_normals_match_scalar_path_and_are_standard():
    n = 200_003
    a = np.asarray(_core.normals(11, 0, 5, 3, n))
    pyfastpim.set_isa_limit("generic")
    try:
        b = np.asarray(_core.normals(11, 0, 5, 3, n))
        # a run crossing a 2**32 group boundary (64-bit counter carry)
        c = np.asarray(_core.normals(11, 1, 0, (1 << 34) - 40, 80))
    finally:
        no_isa_limit()
    d = np.asarray(_core.normals(11, 1, 0, (1 << 34) - 40, 80))
    np.testing.assert_allclose(a, b, rtol=0, atol=2e-6)
    np.testing.assert_allclose(c, d, rtol=0, atol=2e-6)
    if pyfastpim.cpu_isa()[1] != "generic":  # FMA present: the scalar path computes the SIMD path's bits
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(c, d)
    # sub-ranges agree with the full range (counter-based: any order, any split)
    np.testing.assert_array_equal(np.asarray(_core.normals(11, 0, 5, 1003, 17)), a[1000:1017])
    # standard normal within sampling error (5 sigma bounds)
    assert abs(a.mean()) < 5 / np.sqrt(n)
    assert abs(a.std() - 1) < 5 * np.sqrt(0.5 / n)
    for q, z in ((0.1587, -1.0), (0.5, 0.0), (0.9772, 2.0)):
        frac = np.mean(a < z)
        assert abs(frac - q) < 5 * np.sqrt(q * (1 - q) / n) + 1e-3
    # streams and calls are independent
    e = np.asarray(_core.normals(11, 1, 5, 3, n))
    assert abs(np.corrcoef(a, e)[0, 1]) < 5 / np.sqrt(n)


def test_read_noise_statistics_per_level():
    # one crossbar row (n = 1): each output is one cell's noisy conductance
    # times the DAC voltage, read through a fine ADC; log(G_r / G) ~ N(0, sigma[L])
    g_level, rdac, P = 4, 2, 4000
    sig = np.array([0.02, 0.05, 0.1, 0.2], np.float32)
    xs = np.ones((1, 1, 1, 1), np.uint8)  # one sign-bit slice value 1 -> k = 1
    QG = (HGS - LGS) / (g_level - 1)
    for L in range(1, g_level):
        wl = np.full((1, 1, P), L, np.uint8)
        ones = np.ones((1, 1, 1), np.float32)
        outs = []
        for call in range(3):
            o = np.asarray(_core.dpe_mvm(xs, ones, (1, 1), (1,), wl, None, np.ones((1, P), np.float32), (1, 1), (1,),
                                         1, rdac, g_level, [2 ** 16], HGS, LGS, sig, 0.0, 99, call))
            outs.append(o.ravel())
        # code = rint(Gn * (radc-1) / D); out = code * coef with coef = n*m*m*w*w/(radc-1) = 1/(radc-1)
        # sign slice weights multiply to (-1)(-1) = 1
        Gn = np.concatenate(outs) * (g_level - 1)  # D = (rdac-1)(g-1)n = g-1
        Gr = Gn * QG + LGS
        logr = np.log(Gr / (L * QG + LGS))
        m = len(logr)
        assert abs(logr.mean()) < 5 * sig[L] / np.sqrt(m) + 2e-4, L
        assert abs(logr.std() / sig[L] - 1) < 5 * np.sqrt(0.5 / m) + 0.01, L


def test_voltage_noise_statistics():
    R, vnoise = 6000, 0.05
    xs = np.ones((1, 1, R, 1), np.uint8)
    wl = np.ones((1, 1, 1), np.uint8)
    o = np.asarray(_core.dpe_mvm(xs, np.ones((1, R, 1), np.float32), (1, 1), (1,), wl, None,
                                 np.ones((1, 1), np.float32), (1, 1), (1,), 1, 2, 2, [2 ** 16], HGS, LGS, None,
                                 vnoise, 5, 0)).ravel()
    factor = o * 1.0  # D = 1: code/(radc-1) = V * G = (1 + eps) for k = L = 1
    eps = factor - 1
    assert abs(eps.mean()) < 5 * vnoise / np.sqrt(R) + 2e-5
    assert abs(eps.std() / vnoise - 1) < 5 * np.sqrt(0.5 / R) + 0.01


def test_out_argument_is_written_in_place_without_allocation():
    xs, xsc, wl, wsc = engine_case(np.random.default_rng(5), N=1, R=12, K=64, P=20)
    args = (xs, xsc, (1, 32), (1, 1, 2, 2), wl, wsc, (32, 32), (1, 1, 2, 2), 32, 4, 4, [4096] * 4)
    out = np.zeros((1, 12, 20), np.float32)
    with pyfastpim.memory.trace() as t:
        r = _core.dpe_mvm(xs, xsc, (1, 32), (1, 1, 2, 2), wl, None, wsc, (32, 32), (1, 1, 2, 2), 32, 4, 4, [4096] * 4,
                          HGS, LGS, None, 0.0, 1, 0, out=out)
    assert np.asarray(r).ctypes.data == out.ctypes.data
    assert t.copies == 0 and t.allocated_bytes == 0
    np.testing.assert_array_equal(out, run(*args))


def test_tall_crossbar_with_few_rows_packs_only_the_rows_present():
    # n = 2**20 crossbar rows but K = 3: the zero rows past K are never packed
    n, K = 2 ** 20, 3
    rng = np.random.default_rng(9)
    xs = rng.integers(0, 2, (1, 1, 5, K)).astype(np.uint8)
    wl = rng.integers(0, 2, (1, K, 7)).astype(np.uint8)
    xsc, wsc = np.ones((1, 5, 1), np.float32), np.ones((1, 1), np.float32)
    args = (xs, xsc, (1, n), (1,), wl, wsc, (n, 7), (1,), n, 2, 2, [2 ** 8])
    with pyfastpim.memory.trace() as t:
        got = run(*args)
    np.testing.assert_array_equal(got, mvm_exact(*args))
    # the exact ADC table of D + 1 = 2**20 + 1 codes (4 MiB) is all; full packed blocks would be 88+ MiB
    assert t.peak_bytes < 8 << 20, t.peak_bytes
