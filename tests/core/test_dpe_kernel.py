"""The fused DPE kernel (_core.dpe_mvm) on slice codes, against tests/reference/dpe_ref.py."""
import numpy as np
import pytest
from hypothesis import given, strategies as st

import pyfastpim
from pyfastpim import _core
from reference.dpe_ref import conductance_levels, mvm_exact, slice_constants

HGS, LGS = 1e-5, 1e-7


def make_case(rng, N, R, K, P, n, xw, ww, xg, wg, g_level):
    mx, _ = slice_constants(xw)
    mw, _ = slice_constants(ww)
    xs = np.stack([rng.integers(0, m + 1, (N, R, K)) for m in mx]).astype(np.uint8)
    wsl = np.stack([rng.integers(0, m + 1, (K, P)) for m in mw])
    wl = np.stack([conductance_levels(wsl[j], mw[j], g_level) for j in range(len(mw))]).astype(np.uint8)
    xsc = rng.random((N, -(-R // xg[0]), -(-K // xg[1]))).astype(np.float32)
    wsc = rng.random((-(-K // wg[0]), -(-P // wg[1]))).astype(np.float32)
    return xs, xsc, wl, wsc


def run(xs, xsc, xg, xw, wl, wsc, wg, ww, n, rdac, g_level, radc, sigma=None, vnoise=0.0, seed=1, call=0, cond=None):
    return np.asarray(_core.dpe_mvm(xs, xsc, xg, xw, wl, cond, wsc, wg, ww, n, rdac, g_level, radc, HGS, LGS, sigma,
                                    vnoise, seed, call))


widths = st.lists(st.integers(1, 3), min_size=0, max_size=3).map(lambda t: (1,) + tuple(t))


@st.composite
def configs(draw):
    n = draw(st.sampled_from([1, 3, 4, 8, 16, 32]))
    g_level = draw(st.sampled_from([2, 4, 8, 16]))
    xw = draw(widths)
    ww = draw(widths.filter(lambda w: max(w) <= int(np.log2(g_level))))
    N = draw(st.integers(1, 3))
    R = draw(st.integers(1, 20))
    K = draw(st.integers(1, 80))
    P = draw(st.integers(1, 40))
    xg = (draw(st.integers(1, 4)), n * draw(st.integers(1, 3)))
    wg = (n * draw(st.integers(1, 3)), draw(st.integers(1, 40)))
    rdac = draw(st.sampled_from([2, 4, 16, 256]))
    if draw(st.booleans()):
        radc = [draw(st.sampled_from([2 ** 4, 2 ** 8, 2 ** 12, 2 ** 16]))] * len(ww)
    else:
        radc = [draw(st.integers(2, 2 ** 16)) for _ in ww]
    seed = draw(st.integers(0, 2 ** 31))
    return dict(N=N, R=R, K=K, P=P, n=n, xw=xw, ww=ww, xg=xg, wg=wg, g_level=g_level, rdac=rdac, radc=radc,
                seed=seed)


@given(configs())
def test_noise_free_output_is_bit_identical_to_the_integer_reference(c):
    rng = np.random.default_rng(c["seed"])
    xs, xsc, wl, wsc = make_case(rng, c["N"], c["R"], c["K"], c["P"], c["n"], c["xw"], c["ww"], c["xg"], c["wg"],
                                 c["g_level"])
    ref = mvm_exact(xs, xsc, c["xg"], c["xw"], wl, wsc, c["wg"], c["ww"], c["n"], c["rdac"], c["g_level"], c["radc"])
    got = run(xs, xsc, c["xg"], c["xw"], wl, wsc, c["wg"], c["ww"], c["n"], c["rdac"], c["g_level"], c["radc"])
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("radc", [2 ** 4, 2 ** 6, 2 ** 16, 1000, 7])
def test_adc_ties_round_half_to_even(radc):
    # crossbar sums that land exactly on .5 codes must round to even, on every ISA
    rng = np.random.default_rng(radc)
    args = (2, 9, 64, 35, 8, (1, 1, 2), (1, 1, 2), (1, 8), (8, 8), 4)
    xs, xsc, wl, wsc = make_case(rng, *args)
    ref = mvm_exact(xs, xsc, (1, 8), (1, 1, 2), wl, wsc, (8, 8), (1, 1, 2), 8, 4, 4, [radc] * 3)
    for isa in ("generic", "avx2", "avx512"):
        pyfastpim.set_isa_limit(isa)
        try:
            got = run(xs, xsc, (1, 8), (1, 1, 2), wl, wsc, (8, 8), (1, 1, 2), 8, 4, 4, [radc] * 3)
        finally:
            pyfastpim.set_isa_limit("avx512")
        np.testing.assert_array_equal(got, ref)


def bench_like_case(rng, N=2, R=40, K=96, P=70):
    return make_case(rng, N, R, K, P, 32, (1, 1, 2, 2), (1, 1, 2, 2), (1, 32), (32, 32), 4)


def test_noise_free_is_identical_for_any_thread_count_and_isa():
    xs, xsc, wl, wsc = bench_like_case(np.random.default_rng(3))
    args = (xs, xsc, (1, 32), (1, 1, 2, 2), wl, wsc, (32, 32), (1, 1, 2, 2), 32, 4, 4, [4096] * 4)
    outs = []
    for threads in (1, 2, 3):
        with pyfastpim.threads(threads):
            outs.append(run(*args))
    pyfastpim.set_isa_limit("generic")
    try:
        outs.append(run(*args))
    finally:
        pyfastpim.set_isa_limit("avx512")
    for o in outs[1:]:
        np.testing.assert_array_equal(o, outs[0])


def test_noisy_output_is_deterministic_per_seed_and_call_and_thread_count():
    xs, xsc, wl, wsc = bench_like_case(np.random.default_rng(4))
    sig = np.full(4, 0.05, np.float32)
    args = (xs, xsc, (1, 32), (1, 1, 2, 2), wl, wsc, (32, 32), (1, 1, 2, 2), 32, 4, 4, [4096] * 4)
    with pyfastpim.threads(1):
        a = run(*args, sigma=sig, vnoise=0.05, seed=7, call=3)
    with pyfastpim.threads(2):
        b = run(*args, sigma=sig, vnoise=0.05, seed=7, call=3)
    np.testing.assert_array_equal(a, b)
    c = run(*args, sigma=sig, vnoise=0.05, seed=8, call=3)
    d = run(*args, sigma=sig, vnoise=0.05, seed=7, call=4)
    assert not np.array_equal(a, c) and not np.array_equal(a, d)
    exact = run(*args)
    # noise perturbs, but the product stays close to the exact one
    rel = np.linalg.norm(a - exact) / np.linalg.norm(exact)
    assert 1e-4 < rel < 0.2


def test_normals_match_scalar_path_and_are_standard():
    n = 200_003
    a = np.asarray(_core.normals(11, 0, 5, 3, n))
    pyfastpim.set_isa_limit("generic")
    try:
        b = np.asarray(_core.normals(11, 0, 5, 3, n))
        # a run crossing a 2**32 group boundary (64-bit counter carry)
        c = np.asarray(_core.normals(11, 1, 0, (1 << 34) - 40, 80))
    finally:
        pyfastpim.set_isa_limit("avx512")
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


def test_empty_and_degenerate_shapes():
    wl = np.zeros((1, 0, 5), np.uint8)
    out = np.asarray(_core.dpe_mvm(np.zeros((1, 1, 3, 0), np.uint8), np.zeros((1, 3, 0), np.float32), (1, 4), (1,),
                                   wl, None, np.zeros((0, 2), np.float32), (4, 4), (1,), 4, 4, 2, [16], HGS, LGS, None,
                                   0.0, 1, 0))
    assert out.shape == (1, 3, 5) and not out.any()


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
])
def test_bad_arguments_raise_naming_the_argument(kw, word):
    args = dict(x_codes=np.zeros((3, 1, 4, 16), np.uint8), x_scale=np.ones((1, 4, 2), np.float32), x_granule=(1, 8),
                x_widths=(1, 1, 2), w_levels=np.zeros((3, 16, 5), np.uint8), w_conductance=None,
                w_scale=np.ones((2, 1), np.float32), w_granule=(8, 8), w_widths=(1, 1, 1), n=8, rdac=4, g_level=4,
                radc=[16] * 3, HGS=HGS, LGS=LGS, read_sigma=None, vnoise=0.0, seed=1, call=0)
    args.update(kw)
    with pytest.raises((ValueError, TypeError), match=word):
        _core.dpe_mvm(**args)


def test_out_argument_is_written_in_place_without_allocation():
    xs, xsc, wl, wsc = bench_like_case(np.random.default_rng(5), N=1, R=12, K=64, P=20)
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
