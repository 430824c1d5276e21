"""Differential check of the device physics against independent references (docs/physics.md,
docs/semantics.md sections 6-7).

- IR drop: every block, and every block of a layer (block sizes that divide nothing, padding
  cells at pad_g, 1 and 2 threads bit for bit), against the dense nodal solve of
  tests/reference/physics_ref.py, to the solver's documented accuracy (about 1e-16 * G R relative
  to the block's largest G_eff; 4e-16 * h * cells here, 1e-11 at least).
- Drift: against the closed form G (t / t0)^(-nu), nu = max(0, nu_mean + nu_std z), with z from
  a float64 Box-Muller of the engine's Philox words (so the float32 pipeline is not its own
  reference), over t0, t / t0 and nu from their extremes.
- Programming: write variation and stuck-at faults cell by cell against the same words (the CPU
  and the OpenCL device bit for bit); read noise cell by cell through the fused kernel, the
  same bits on every ISA and thread count.

A bounded, derandomized version of a hunt that ran thousands of examples per model.
"""
import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st

import pyfastpim
from pyfastpim import _core, physics
from helpers import HGS, LGS, at_isa, available_isas, needs_cl
from reference.physics_ref import (DRIFT_STREAM, STUCK_STREAM, WRITE_STREAM, irdrop_currents, pf_normal,
                                   pf_normal64, pf_uniform)
from reference.physics_ref import drift as drift_ref


def _threads(fn):
    """fn() at 1 and 2 threads: both results, which must be the same bits."""
    before = _core.get_num_threads()
    try:
        outs = []
        for t in (1, 2):
            _core.set_num_threads(t)
            outs.append(np.asarray(fn()))
    finally:
        _core.set_num_threads(before)
    assert outs[0].tobytes() == outs[1].tobytes()
    return outs[0]


# ---- IR drop ----

@st.composite
def ir_block(draw):
    n, m = draw(st.integers(1, 7)), draw(st.integers(1, 7))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    lgs = 10.0 ** draw(st.floats(-9, -5))
    hgs = lgs * 10.0 ** draw(st.floats(0.1, 4))
    kind = draw(st.sampled_from(["uniform", "levels", "zeros", "equal", "negative", "open", "hugely_negative"]))
    if kind == "levels":
        g = lgs + rng.integers(0, 16, (n, m)) * (hgs - lgs) / 15
    elif kind in ("zeros", "equal"):
        g = np.full((n, m), 0.0 if kind == "zeros" else hgs)
    else:
        g = rng.uniform(lgs, hgs, (n, m))
        holes = rng.random((n, m)) < 0.3
        g[holes] = {"uniform": g[holes], "negative": -rng.uniform(lgs, hgs, holes.sum()), "open": 0.0,
                    "hugely_negative": -1e30}[kind]
    gmax = np.maximum(g, 0).max()
    if gmax == 0:
        return g, 10.0 ** draw(st.floats(-300, 300))
    if draw(st.booleans()):
        return g, physics.IRDROP_MAX_GR / gmax  # h at the bound itself
    return g, 10.0 ** draw(st.floats(-12, 6)) / gmax


@settings(max_examples=60)
@given(ir_block())
def test_block_effective_conductance_matches_the_dense_nodal_solve(case):
    g, r = case
    n, m = g.shape
    h = np.maximum(g, 0).max() * r
    if h > physics.IRDROP_MAX_GR:  # 1e6 / gmax * gmax may round above the bound
        with pytest.raises(ValueError, match="wire_resistance"):
            physics.effective_conductance(g, r)
        return
    geff = physics.effective_conductance(g, r)
    ref = irdrop_currents(g, np.eye(n), r)  # row i at 1 V: the currents are row i of G_eff
    assert geff.shape == (n, m) and np.isfinite(geff).all() and (geff >= 0).all()
    scale = np.abs(ref).max()
    if scale == 0:
        assert (geff == 0).all()
        return
    assert np.abs(geff - ref).max() <= (1e-11 + 4e-16 * h * n * m) * scale
    ideal = np.maximum(g, 0).sum(axis=1)  # each row's total stays below the ideal crossbar's
    assert (geff.sum(axis=1) <= ideal * (1 + 1e-12)).all()


@settings(max_examples=25)
@given(shape=st.tuples(st.integers(1, 2), st.integers(1, 11), st.integers(1, 11)), br=st.integers(1, 7),
       bc=st.integers(1, 7), seed=st.integers(0, 2 ** 32 - 1), pad=st.sampled_from([0.0, LGS, HGS, 3e-6]),
       log_r=st.floats(-3, 4), holes=st.booleans())
def test_layer_blocks_are_padded_dense_solves_at_any_thread_count(shape, br, bc, seed, pad, log_r, holes):
    rng = np.random.default_rng(seed)
    g = rng.uniform(LGS, HGS, shape).astype(np.float32)
    if holes:  # open and negative cells
        g[rng.random(shape) < 0.2] = 0
        g[rng.random(shape) < 0.1] *= -1
    r = 10.0 ** log_r
    got = _threads(lambda: _core.irdrop_layer(g, r, br, bc, pad))
    S, K, P = shape
    for s in range(S):
        for r0 in range(0, K, br):
            for c0 in range(0, P, bc):
                real = g[s, r0:r0 + br, c0:c0 + bc].astype(np.float64)
                blk = np.full((br, bc), pad)  # the partial block's missing cells hold pad_g
                blk[:real.shape[0], :real.shape[1]] = real
                ref = irdrop_currents(blk, np.eye(br), r)[:real.shape[0], :real.shape[1]]
                np.testing.assert_allclose(got[s, r0:r0 + br, c0:c0 + bc], ref, rtol=1e-6,
                                           atol=1e-6 * np.abs(ref).max() + 1e-30)


# ---- drift ----

def drift_closed_form(g, seed, t, t0, nu_mean, nu_std):
    """(G(t) float64, nu) from the closed form; log(t / t0) as log t - log t0 (t / t0 may overflow)."""
    z = pf_normal64(seed, DRIFT_STREAM, 0, np.arange(g.size).reshape(g.shape)) if nu_std > 0 else np.zeros(g.shape)
    with np.errstate(over="ignore"):
        nu = np.maximum(nu_mean + nu_std * z, 0.0)
    log_ratio = np.log(t) - np.log(t0)
    g = g.astype(np.float64)
    if log_ratio == 0:  # (t / t0)^(-nu) = 1 for every nu, an overflowing one included
        return g, nu, z, log_ratio
    with np.errstate(over="ignore", invalid="ignore"):
        return np.where(nu == 0, g, g * np.exp(-nu * log_ratio)), nu, z, log_ratio


@settings(max_examples=60)
@given(shape=st.sampled_from([(1, 1), (1, 7), (7, 1), (3, 5, 9), (130,)]), seed=st.integers(0, 2 ** 64 - 1),
       t0=st.sampled_from([1e-300, 1e-9, 1.0, 2.5, 1e6, 1e300]),
       t_over_t0=st.sampled_from([1.0, 1.0000001, 2.0, 1e3, 1e30, 1e300, "max"]),
       nu_mean=st.sampled_from([-1e308, -1.0, -0.05, 0.0, 1e-8, 0.05, 0.5, 3.0, 1e308]),
       nu_std=st.sampled_from([0.0, 1e-6, 0.01, 0.3, 10.0, 1e308]),
       kind=st.sampled_from(["uniform", "zeros", "negative", "subnormal", "huge"]))
def test_drift_matches_the_closed_form(shape, seed, t0, t_over_t0, nu_mean, nu_std, kind):
    t = np.finfo(np.float64).max if t_over_t0 == "max" else t0 * t_over_t0
    assume(np.isfinite(t) and t >= t0)
    rng = np.random.default_rng(seed % 2 ** 32)
    g = {"uniform": lambda: rng.uniform(LGS, HGS, shape), "zeros": lambda: np.zeros(shape),
         "negative": lambda: -rng.uniform(LGS, HGS, shape), "subnormal": lambda: np.full(shape, 1e-45),
         "huge": lambda: np.full(shape, 3e38)}[kind]().astype(np.float32)
    got = _threads(lambda: physics.drift_conductance(g, t, t0, nu_mean, nu_std, seed=seed))
    ref, nu, z, log_ratio = drift_closed_form(g, seed, t, t0, nu_mean, nu_std)
    assert np.isfinite(got).all()
    # the engine's z is float32 Box-Muller (within ~3e-6 (1 + |z|) of z), so nu within nu_std times that;
    # G(t) then within exp(d_nu log(t / t0)) - 1, plus the float32 rounding of the result
    d_nu = nu_std * 3e-6 * (1 + np.abs(z)) + 1e-15 * abs(nu_mean)
    rel = np.expm1(np.minimum(d_nu * log_ratio, 700)) + 3e-7
    with np.errstate(over="ignore"):
        bad = np.abs(got - ref) > rel * np.abs(ref) + 1.5e-45
    assert not bad.any(), (got[bad], ref[bad])


def test_drift_where_t_over_t0_overflows_keeps_the_closed_form():
    # t / t0 = 1e600 overflows a double; (t / t0)^(-nu) does not: nu = 0 leaves G as it is (was NaN),
    # nu = 0.05 scales it by 1e-30 (was 0)
    g = np.array([1e-6, 2e-6, 3e-6, 4e-6], np.float32)
    np.testing.assert_array_equal(physics.drift_conductance(g, 1e300, t0=1e-300, nu_mean=0.0, nu_std=0.0), g)
    np.testing.assert_allclose(physics.drift_conductance(g, 1e300, t0=1e-300, nu_mean=0.05, nu_std=0.0),
                               g.astype(np.float64) * 1e-30, rtol=1e-5)
    for nu_mean in (0.0, 0.05, 2.0):  # the transcription's closed form, bit for bit (nu_std = 0: no normals)
        np.testing.assert_array_equal(physics.drift_conductance(g, 1e300, t0=1e-300, nu_mean=nu_mean, nu_std=0.0),
                                      drift_ref(g, 0, 1e300, 1e-300, nu_mean, 0.0)[0])


def test_drift_at_t0_leaves_every_cell_even_with_an_overflowing_nu():
    # nu_mean + nu_std z beyond DBL_MAX is inf; at t = t0 the cell is still G (was NaN: -inf * log 1)
    g = np.random.default_rng(4).uniform(LGS, HGS, 64).astype(np.float32)
    got, nu = physics.drift_conductance(g, 5.0, t0=5.0, nu_mean=1e308, nu_std=1e308, return_nu=True)
    assert np.isinf(nu).any()
    np.testing.assert_array_equal(got, g)


# ---- programming and read noise ----

PROGRAM = dict(shape=st.sampled_from([(1, 1, 1), (1, 1, 9), (2, 9, 1), (3, 5, 7), (1, 20, 21)]),
               g_level=st.sampled_from([2, 3, 16, 255, 256]), seed=st.integers(0, 2 ** 64 - 1),
               lgs=st.sampled_from([0.0, 1e-9, 1e-7]), ratio=st.sampled_from([1.0001, 100.0, 1e6]),
               wv=st.sampled_from([0.0, 1e-6, 0.05, 0.5, 3.0]),
               rates=st.sampled_from([(0, 0), (0.1, 0), (0, 0.1), (0.3, 0.3), (1.0, 0.0), (0.0, 1.0), (1e-9, 0),
                                      (0.1 + 1e-12, 0.2)]))


def _program_case(shape, g_level, seed, lgs, ratio):
    hgs = (lgs or 1e-7) * ratio
    levels = np.random.default_rng(seed % 2 ** 32).integers(0, g_level, shape).astype(np.uint8)
    return levels, hgs


@settings(max_examples=40)
@given(**PROGRAM)
def test_programming_matches_the_cell_by_cell_reference(shape, g_level, seed, lgs, ratio, wv, rates):
    levels, hgs = _program_case(shape, g_level, seed, lgs, ratio)
    got = _threads(lambda: _core.program_conductance(levels, g_level, hgs, lgs, wv, *rates, seed)).astype(np.float64)
    idx = np.arange(levels.size).reshape(shape)
    g0 = levels * ((hgs - lgs) / (g_level - 1)) + lgs
    z = pf_normal64(seed, WRITE_STREAM, 0, idx) if wv > 0 else np.zeros(shape)
    ref = g0 * (1 + wv * z)
    r = pf_uniform(seed, STUCK_STREAM, 0, idx)
    stuck_h = r < rates[0]
    ref = np.where(stuck_h, hgs, np.where(~stuck_h & (r < rates[0] + rates[1]), lgs, ref))
    # float32 level arithmetic and Box-Muller: a few ulp of G0 (1 + wv |z|), and wv G0 times z's error
    tol = 4e-7 * (g0 * (1 + wv * np.abs(z)) + np.abs(ref)) + 3e-6 * wv * g0 + 1e-300
    assert (np.abs(got - ref) <= tol).all()


@needs_cl
@settings(max_examples=20)
@given(**PROGRAM)
def test_opencl_programming_is_the_cpus_bits(shape, g_level, seed, lgs, ratio, wv, rates):
    levels, hgs = _program_case(shape, g_level, seed, lgs, ratio)
    args = (levels, g_level, hgs, lgs, wv, *rates, seed)
    cpu = np.asarray(_core.program_conductance(*args))
    dev = np.asarray(_core.program_conductance(*args, device=pyfastpim.resolve_device("opencl")))
    assert cpu.tobytes() == dev.tobytes()


@settings(max_examples=20)
@given(g_level=st.sampled_from([2, 4, 16]), sigma=st.sampled_from([1e-4, 0.02, 0.3, 1.0]), seed=st.integers(0, 2 ** 63),
       call=st.integers(0, 2 ** 32 - 1), P=st.sampled_from([1, 3, 17, 64]))
def test_read_noise_is_each_cells_lognormal_factor_on_every_isa(g_level, sigma, seed, call, P):
    # one crossbar row and a 1-bit input: each output is one cell's G exp(sigma z) through a fine ADC
    radc = 2 ** 20
    levels = np.random.default_rng(seed % 2 ** 32).integers(1, g_level, (1, 1, P)).astype(np.uint8)
    sig = np.full(g_level, sigma, np.float32)
    ones = np.ones((1, 1, 1), np.float32)

    def product():
        return _core.dpe_mvm(np.ones((1, 1, 1, 1), np.uint8), ones, (1, 1), (1,), levels, None,
                             np.ones((1, P), np.float32), (1, 1), (1,), 1, 2, g_level, [radc], HGS, LGS, sig, 0.0,
                             seed, call)
    outs = [at_isa(isa, lambda: _threads(product)) for isa in available_isas()]
    assert all(o.tobytes() == outs[0].tobytes() for o in outs)
    q_g = (HGS - LGS) / (g_level - 1)
    g = levels.ravel() * q_g + LGS
    z = np.asarray(_core.normals(seed, 0, call, 0, P), np.float64)
    ref = (g * np.exp(sigma * z) - LGS) / q_g / (g_level - 1)  # (G_r - LGS) / adcRef * vread: the ADC's input
    got = outs[0].ravel().astype(np.float64)
    assert (np.abs(got - ref) <= 0.5 / (radc - 1) + 2e-6 * np.abs(ref)).all()


def test_normals_at_the_top_of_the_counter_are_the_generators_on_every_isa():
    # the last elements below 2**64: idx0 + count = 2**64 wrapped to 0, so no group was drawn and the
    # output was left uninitialized (garbage such as -9e17, NaN)
    top = np.arange(2 ** 64 - 4, 2 ** 64, dtype=np.uint64)
    ref = pf_normal(5, 2 ** 32 - 1, 7, top)
    for isa in available_isas():
        for idx0, count in ((2 ** 64 - 4, 4), (2 ** 64 - 7, 7), (2 ** 64 - 1, 1)):
            got = at_isa(isa, lambda: np.asarray(_core.normals(5, 2 ** 32 - 1, 7, idx0, count)))
            np.testing.assert_allclose(got[-4:] if count >= 4 else got, ref[-min(count, 4):], rtol=0, atol=2e-6)
    # a range that would pass 2**64 is refused (it wrapped to the first elements)
    with pytest.raises(ValueError, match="argument 'idx0'"):
        _core.normals(5, 0, 0, 2 ** 64 - 3, 4)
