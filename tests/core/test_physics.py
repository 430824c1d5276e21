"""Device physics: IR drop (wire resistance) and conductance drift (docs/physics.md).

The IR-drop solver is checked against a dense NumPy nodal analysis (tests/reference/physics_ref.py)
and against ngspice, a circuit simulator nobody here wrote; drift against a NumPy transcription of
the formula and of the Philox generator. Engine products are compared with the spec's MVM
transcription (tests/reference/dpe_ref.py) fed with the reference effective conductances.
"""
import os
import re
import shutil
import subprocess

import numpy as np
import pytest

from pyfastpim import DPETensor, SlicedData, _core, dpe_matmul
from pyfastpim import physics
from reference.dpe_ref import mvm_noisy
from reference.physics_ref import drift as drift_ref
from reference.physics_ref import DRIFT_STREAM, irdrop_currents, pf_normal
from helpers import NOISE_OFF

SAN = os.environ.get("PYFASTPIM_SANITIZED") == "1"
HGS, LGS = 1e-5, 1e-7


def random_block(rng, n, m, levels=16):
    return LGS + rng.integers(0, levels, (n, m)) * (HGS - LGS) / (levels - 1)


# ---- the solver against a dense nodal analysis ----

@pytest.mark.parametrize("n,m", [(1, 1), (1, 6), (6, 1), (3, 5), (5, 3), (8, 8), (13, 7), (7, 13)])
@pytest.mark.parametrize("r_wire", [0.1, 2.5, 1e3])
def test_block_currents_match_dense_nodal_analysis(n, m, r_wire):
    rng = np.random.default_rng(n * 100 + m)
    G = rng.uniform(0, HGS, (n, m))
    V = rng.uniform(0, 0.2, (5, n))
    ref = irdrop_currents(G, V, r_wire)
    got = physics.column_currents(G, V, r_wire)
    np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-12 * np.abs(ref).max())
    # every node lies between 0 V and the drive: G_eff >= 0, and for 1 V on one row the current
    # reaching all ADCs never exceeds the ideal row total (single entries may: sneak paths)
    geff = physics.effective_conductance(G, r_wire)
    assert (geff >= 0).all()
    assert (geff.sum(axis=1) <= G.sum(axis=1) * (1 + 1e-12)).all()


@pytest.mark.parametrize("shape", [(9, 6), (6, 9)])
@pytest.mark.parametrize("h", [-0.6, -3.0])
def test_negative_conductance_is_an_open_cell(shape, h):
    rng = np.random.default_rng(5)
    G = rng.uniform(0, HGS, shape)
    G[2, 3] = h / 5.0  # h = g R: the network conducts max(G, 0) (docs/physics.md), the dense reference too
    V = rng.uniform(0, 0.2, (3, shape[0]))
    ref = irdrop_currents(np.maximum(G, 0.0), V, 5.0)
    np.testing.assert_allclose(physics.column_currents(G, V, 5.0), ref, rtol=1e-9, atol=1e-12 * np.abs(ref).max())


def test_column_currents_without_wires_is_the_networks_limit_and_checks_alike():
    # wire_resistance = 0 returned V @ G: a cell below 0 S conducted negative current there while any
    # R > 0 treats it as open (3e-5 A against 2e-5 A at R = 1e-300 below), and G and V went unchecked
    # (NaN / inf, an empty block: NaN currents or an empty result where R > 0 raises)
    G = np.array([[1e-5, -1e-5], [2e-5, 3e-5]])
    V = np.ones(2)
    ideal = physics.column_currents(G, V, 0.0)
    np.testing.assert_array_equal(ideal, V @ np.maximum(G, 0.0))
    np.testing.assert_allclose(physics.column_currents(G, V, 1e-300), ideal, rtol=1e-12)
    for r in (0.0, 2.0):
        for bad_g in (np.full((2, 2), np.nan), np.full((2, 2), np.inf), np.zeros((0, 0)), np.zeros((2, 0))):
            with pytest.raises(ValueError, match="^argument 'G': "):
                physics.column_currents(bad_g, np.ones(bad_g.shape[0]), r)
        for bad_v in (np.array([np.nan, 0.1]), np.array([[0.1, np.inf]])):
            with pytest.raises(ValueError, match="^argument 'V': "):
                physics.column_currents(np.abs(G), bad_v, r)


def test_wire_bound_counts_a_hugely_negative_cell_as_open():
    # the network conducts max(G, 0), but the R * G bound took |G|: a cell at -1e4 S (open) tripped it at
    # 1e3 ohm (|G| R = 1e7 > 1e6) though every conducting cell has G R <= 1e-2, and the solve raised
    rng = np.random.default_rng(13)
    r = 1e3
    for shape in ((6, 9), (9, 6)):
        G = random_block(rng, *shape)
        G[2, 3] = -1e4
        assert np.abs(G).max() * r > physics.IRDROP_MAX_GR >= np.maximum(G, 0).max() * r
        V = rng.uniform(0, 0.2, (3, shape[0]))
        ref = irdrop_currents(G, V, r)
        np.testing.assert_allclose(physics.column_currents(G, V, r), ref, rtol=1e-9, atol=1e-12 * np.abs(ref).max())
        geff = physics.effective_conductance(G, r)
        np.testing.assert_array_equal(geff, physics.effective_conductance(np.maximum(G, 0.0), r))
        # the programming path: the layer solve of 4 x 4 blocks, one of them holding the open cell
        layer = _core.irdrop_layer(G[None].astype(np.float32), r, 4, 4, LGS)
        want = _core.irdrop_layer(np.maximum(G, 0.0)[None].astype(np.float32), r, 4, 4, LGS)
        np.testing.assert_array_equal(np.asarray(layer), np.asarray(want))
    # a conducting cell beyond the bound still raises, however negative the others
    G[0, 0] = 1e4
    with pytest.raises(ValueError, match="argument 'wire_resistance'.*largest conductance G = 10000 S"):
        physics.effective_conductance(G, r)


def test_small_wire_resistance_tends_to_the_ideal_crossbar():
    rng = np.random.default_rng(6)
    G = random_block(rng, 16, 16)
    for r, tol in ((1e-3, 1e-5), (1e-6, 1e-8)):
        np.testing.assert_allclose(physics.effective_conductance(G, r), G, rtol=tol)


def test_solver_rejects_bad_arguments():
    G = np.full((4, 4), 1e-6)
    with pytest.raises(ValueError, match="wire_resistance"):
        physics.effective_conductance(G, 0.0)
    with pytest.raises(ValueError, match="r_wire"):
        _core.irdrop_block(G, float("nan"))
    with pytest.raises(ValueError, match="'g'"):
        _core.irdrop_block(np.zeros((2, 2, 2)), 1.0)
    bad = G.copy()
    bad[1, 1] = np.inf
    with pytest.raises(ValueError, match="finite"):
        _core.irdrop_block(bad, 1.0)
    with pytest.raises(ValueError, match="block_rows"):
        _core.irdrop_layer(np.ones((1, 4, 4), np.float32), 1.0, 0, 4, LGS)
    with pytest.raises(ValueError, match="pad_g"):
        _core.irdrop_layer(np.ones((1, 4, 4), np.float32), 1.0, 4, 4, -1.0)


@pytest.mark.parametrize("r_wire", [1e12, 1e100, 1e300, 1e305])
def test_absurd_wire_resistance_is_refused_naming_it(r_wire):
    # r * G far beyond 1e6: the solve returned entries of the wrong sign, NaN or huge (r = 1e100: +-1e58 S),
    # or (r = 1e305) "irdrop_block: invalid arguments" naming no argument
    G = random_block(np.random.default_rng(7), 8, 8)
    with pytest.raises(ValueError, match="argument 'wire_resistance'.*above 1e\\+06"):
        physics.effective_conductance(G, r_wire)
    with pytest.raises(ValueError, match="argument 'r_wire'.*above 1e\\+06"):
        _core.irdrop_block(G, r_wire)
    # the layer solve named 'g' ("conductances must be finite") for the wire resistance's fault
    with pytest.raises(ValueError, match="argument 'r_wire'.*above 1e\\+06"):
        _core.irdrop_layer(G[None].astype(np.float32), r_wire, 4, 4, LGS)
    with pytest.raises(ValueError, match="argument 'wire_resistance'"):
        DPETensor(wire_resistance=r_wire)  # r * HGS: taken, then every product read a garbage G_eff


def test_wire_resistance_and_conductance_products_at_the_limits():
    rng = np.random.default_rng(8)
    G = random_block(rng, 6, 9)
    # 1 / r overflowing (r = 1e-320, subnormal) gave NaN effective conductances; G of 1e306 S at 1 ohm
    # gave "irdrop_block: invalid arguments"
    with pytest.raises(ValueError, match="argument 'wire_resistance': must be >= 2.2"):
        physics.effective_conductance(G, 1e-320)
    with pytest.raises(ValueError, match="argument 'r_wire'"):
        _core.irdrop_block(G, 1e-320)
    with pytest.raises(ValueError, match="argument 'wire_resistance'.*largest conductance G = 1e\\+306"):
        physics.effective_conductance(np.full((4, 4), 1e306), 1.0)
    # at the limit r * max G = 1e6 the solve is accurate, finite and >= 0
    r = physics.IRDROP_MAX_GR / G.max()
    geff = physics.effective_conductance(G, r)
    assert np.isfinite(geff).all() and (geff >= 0).all()
    V = rng.uniform(0, 0.2, (3, 6))
    ref = irdrop_currents(G, V, r)
    np.testing.assert_allclose(V @ geff, ref, rtol=1e-6)


def test_engine_refuses_cells_beyond_the_solver_range_naming_wire_resistance():
    rng = np.random.default_rng(9)
    x, w = engine_case(rng)
    # accepted: r * HGS = 1e5; write variation (sigma 1e4) programs cells far above HGS, which the solve took
    # as they were (r * G ~ 1e9, inaccurate); now programming them raises naming wire_resistance
    eng = DPETensor(wire_resistance=1e10, write_variation=1e4, read_variation=0.0, vnoise=0.0)
    with pytest.raises(ValueError, match="argument 'wire_resistance'.*of the programmed cells"):
        sliced_pair(eng, x, w)
    eng = DPETensor(wire_resistance=1e10, **NOISE_OFF)  # without write variation the cells stay at HGS
    xs, ws = sliced_pair(eng, x, w)
    assert np.isfinite(eng(xs, ws)).all()
    eng.wire_resistance = 1e200  # changed after construction: the programming check catches it
    with pytest.raises(ValueError, match="argument 'wire_resistance'"):
        sliced_pair(eng, x, w)


def test_crossbars_beyond_the_solvers_block_limit_are_refused_naming_wire_resistance():
    # the product raised the solver's "argument 'block_rows': block sizes must be 1 to 16384", a name the
    # user never gave; now the error names wire_resistance and the weights' paral_size
    limit = 16384  # physics.IRDROP_MAX_BLOCK, asserted last
    eng = DPETensor(wire_resistance=1.0, rdac=2, g_level=4, **NOISE_OFF)
    for wp in ((limit + 1, 1), (1, limit + 1), (limit, 1)):
        x, w = np.ones((1, wp[0]), np.float32), np.ones(wp, np.float32)
        kw = dict(input_paral_size=(1, wp[0]), weight_paral_size=wp, input_quant_gran=(1, wp[0]), weight_quant_gran=wp)
        if max(wp) <= limit:
            assert np.isfinite(dpe_matmul(x, w, eng, **kw)).all()
            continue
        with pytest.raises(ValueError, match=r"^argument 'wire_resistance': .*paral_size.*\(%d, %d\)" % wp):
            dpe_matmul(x, w, eng, **kw)
    assert dpe_matmul(x, w, DPETensor(rdac=2, g_level=4, **NOISE_OFF).drift(10.0), **kw).shape == (1, 1)
    assert physics.IRDROP_MAX_BLOCK == limit


def test_the_solver_names_the_callers_argument():
    # the bound lives in the core alone: its error names the caller's argument (before, pyfastpim.physics
    # repeated the check in Python only to name 'wire_resistance' instead of 'r_wire'); the core binding
    # names its own 'r_wire', pyfastpim renames it for effective_conductance and the programming solve
    G = random_block(np.random.default_rng(10), 8, 8)
    x, w = engine_case(np.random.default_rng(10))
    for bad, kind, words in ((1e12, ValueError, "1e\\+12 ohm .* above 1e\\+06"), (0.0, ValueError, "must be >= 2.2"),
                             ("1", TypeError, "expected a real number")):
        with pytest.raises(kind, match="^argument 'wire_resistance': " + words):
            physics.effective_conductance(G, bad)
        # the layer solve of programmed weights (0 ohm is no IR drop there: a subnormal breaks the same rule)
        eng = DPETensor(**NOISE_OFF)
        eng.wire_resistance = 1e-320 if bad == 0.0 else bad
        with pytest.raises(kind, match="^argument 'wire_resistance': "):
            sliced_pair(eng, x, w)
        with pytest.raises(kind, match="^argument 'r_wire': " + words):
            _core.irdrop_block(G, bad)
        with pytest.raises(kind, match="^argument 'r_wire': "):
            _core.irdrop_layer(G[None].astype(np.float32), bad, 4, 4, LGS)


def test_a_bool_wire_resistance_is_refused():
    # True is a flag, not 1 ohm: the shared converter refused bools before the bound moved into the
    # core (pyfastpim.physics's own check did), and must keep refusing them; NumPy scalars still count
    G = random_block(np.random.default_rng(11), 4, 4)
    with pytest.raises(TypeError, match="^argument 'wire_resistance': expected a real number, got bool"):
        physics.effective_conductance(G, True)
    with pytest.raises(TypeError, match="^argument 'r_wire': expected a real number, got bool"):
        _core.irdrop_block(G, False)
    same = physics.effective_conductance(G, 2.0)
    np.testing.assert_array_equal(physics.effective_conductance(G, np.float32(2.0)), same)


def test_layer_error_names_the_first_failing_block_at_any_thread_count():
    import pyfastpim
    eng = DPETensor(HGS=HGS, LGS=LGS, wire_resistance=1e8, **NOISE_OFF)  # r * HGS = 1e3: programmable
    rng = np.random.default_rng(14)
    ws = SlicedData((1, 1, 2, 2), is_weight=True, paral_size=(4, 4), quant_gran=(4, 4))
    ws.slice_data_imp(eng, rng.standard_normal((12, 12)).astype(np.float32))
    xs = SlicedData((1, 1, 2, 2), is_weight=False, paral_size=(1, 4), quant_gran=(1, 4))
    xs.slice_data_imp(eng, rng.standard_normal((3, 12)).astype(np.float32))
    G = np.array(ws.G)  # (K / 4, P / 4, slices, 4, 4)
    G[1, 2, 1, 1, 1] = G[2, 0, 1, 1, 1] = 1.0  # r * G = 1e8: blocks (1, 2) and (2, 0) of slice 1
    ws.G = G
    old = pyfastpim.get_num_threads()
    try:
        for threads in (1, 2, 3):
            pyfastpim.set_num_threads(threads)
            with pytest.raises(ValueError, match=re.escape("argument 'wire_resistance': slice 1, block (1, 2) of "
                                                           "the programmed cells: 1e+08 ohm times the largest "
                                                           "conductance G = 1 S")):
                eng(xs, ws)
    finally:
        pyfastpim.set_num_threads(old)
    g = np.full((2, 12, 12), HGS, np.float32)  # the core binding itself names its own argument
    g[1, 5, 9] = g[1, 9, 1] = 1.0
    with pytest.raises(ValueError, match=re.escape("argument 'r_wire': slice 1, block (1, 2) of the programmed")):
        _core.irdrop_layer(g, 1e8, 4, 4, LGS)


def test_the_programming_solve_makes_no_full_layer_temporary():
    # the Python twin of the bound took np.abs of every programmed cell (a temporary as large as the layer)
    import tracemalloc
    from pyfastpim import sliced
    eng = DPETensor(wire_resistance=1.0, **NOISE_OFF)
    ws = SlicedData((1, 1, 2, 2), is_weight=True, paral_size=(32, 32), quant_gran=(32, 32))
    ws.slice_data_imp(eng, np.random.default_rng(11).standard_normal((256, 256)).astype(np.float32))
    with sliced._state_lock:
        eng._ensure_programmed(ws)
        ws._physics = None  # solved when programmed: solve again below
        work = physics.physics_work(eng, ws)
    tracemalloc.start()
    try:
        physics.solve_physics(work)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < work["g0"].nbytes // 8, (peak, work["g0"].nbytes)


def test_drift_refuses_non_finite_conductances():
    # NaN / inf cells were drifted into NaN / inf without an error (the error names the public argument G)
    for bad in (np.nan, np.inf):
        with pytest.raises(ValueError, match="argument 'G': conductances must be finite"):
            physics.drift_conductance(np.array([1e-6, bad], np.float32), 10.0)


def test_layer_blocks_are_padded_blocks_and_thread_count_independent():
    rng = np.random.default_rng(7)
    S, K, P, pr, pc = 2, 19, 13, 8, 6
    g = rng.uniform(LGS, HGS, (S, K, P)).astype(np.float32)
    got = np.asarray(_core.irdrop_layer(g, 3.0, pr, pc, LGS))
    ref = np.empty((S, K, P), np.float32)
    for s in range(S):
        for r0 in range(0, K, pr):
            for c0 in range(0, P, pc):
                block = np.full((pr, pc), LGS)  # padding cells at LGS, rows driven at 0 V
                sub = g[s, r0:r0 + pr, c0:c0 + pc]
                block[:sub.shape[0], :sub.shape[1]] = sub
                eff = physics.effective_conductance(block, 3.0)
                ref[s, r0:r0 + pr, c0:c0 + pc] = eff[:sub.shape[0], :sub.shape[1]]
    np.testing.assert_array_equal(got, ref)
    threads = _core.get_num_threads()
    try:
        _core.set_num_threads(1)
        one = np.asarray(_core.irdrop_layer(g, 3.0, pr, pc, LGS))
        _core.set_num_threads(3)
        three = np.asarray(_core.irdrop_layer(g, 3.0, pr, pc, LGS))
    finally:
        _core.set_num_threads(threads)
    np.testing.assert_array_equal(one, got)
    np.testing.assert_array_equal(three, got)


# ---- ngspice ----

def ngspice_currents(G, V, r_wire, workdir):
    """Column currents of block G under row voltages V from ngspice's DC operating point."""
    n, m = G.shape
    lines = ["* pyfastpim crossbar block %dx%d" % (n, m)]
    for i in range(n):
        lines.append("VD%d d%d 0 %.17g" % (i, i, V[i]))
        lines.append("RD%d d%d r%d_0 %.17g" % (i, i, i, r_wire))
        for j in range(m - 1):
            lines.append("RR%d_%d r%d_%d r%d_%d %.17g" % (i, j, i, j, i, j + 1, r_wire))
    for j in range(m):
        for i in range(n - 1):
            lines.append("RC%d_%d c%d_%d c%d_%d %.17g" % (i, j, i, j, i + 1, j, r_wire))
        lines.append("RG%d c%d_%d g%d %.17g" % (j, n - 1, j, j, r_wire))
        lines.append("VS%d g%d 0 0" % (j, j))  # virtual ground of the ADC: measures the current
    for i in range(n):
        for j in range(m):
            lines.append("RX%d_%d r%d_%d c%d_%d %.17g" % (i, j, i, j, i, j, 1.0 / G[i, j]))
    lines += [".control", "op", "set numdgt=16"] + ["print i(vs%d)" % j for j in range(m)] + [".endc", ".end"]
    path = os.path.join(workdir, "block.cir")
    with open(path, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    res = subprocess.run(["ngspice", "-b", path], capture_output=True, text=True, timeout=600)
    # batch mode exits 1 when a netlist has no .print line (results come from .control); errors show in the text
    assert "error" not in (res.stdout + res.stderr).lower(), res.stdout[-2000:] + res.stderr[-2000:]
    found = dict(re.findall(r"^i\(vs(\d+)\)\s*=\s*(\S+)", res.stdout, flags=re.M))
    assert len(found) == m, res.stdout[-2000:] + res.stderr[-2000:]
    return np.array([float(found[str(j)]) for j in range(m)])


@pytest.mark.parametrize("n", [8, 32, 64])
def test_column_currents_match_ngspice(n, tmp_path):
    if shutil.which("ngspice") is None:
        pytest.fail("ngspice is not installed (make deps installs the Debian package)")
    rng = np.random.default_rng(n)
    G = rng.uniform(1e-7, 1e-4, (n, n))  # up to 10 kOhm cells: a visible IR drop
    V = rng.uniform(0.0, 0.2, n)
    r_wire = float(rng.uniform(0.5, 3.0))
    spice = ngspice_currents(G, V, r_wire, str(tmp_path))
    ours = physics.column_currents(G, V, r_wire)
    np.testing.assert_allclose(ours, spice, rtol=1e-6)
    # the comparison is sensitive: the ideal crossbar is far off
    assert np.abs(V @ G - spice).max() / np.abs(spice).max() > 1e-3


# ---- the engine with IR drop ----

def engine_case(rng, K=20, P=12):
    x = rng.standard_normal((2, 5, K)).astype(np.float32)
    w = rng.standard_normal((K, P)).astype(np.float32)
    return x, w


def reference_ir_product(engine, xs, ws, r_wire, conductance=None):
    """The spec MVM (float64 transcription) on reference G_eff of every padded block."""
    g = conductance
    if g is None:
        q_g = np.float32((HGS - LGS) / (engine.g_level - 1))
        g = ws._levels.astype(np.float32) * q_g + np.float32(LGS)
    S, K, P = g.shape
    pr, pc = ws.paral_size
    geff = np.empty((S, K, P))
    for s in range(S):
        for r0 in range(0, K, pr):
            for c0 in range(0, P, pc):
                block = np.full((pr, pc), LGS)
                sub = g[s, r0:r0 + pr, c0:c0 + pc]
                block[:sub.shape[0], :sub.shape[1]] = sub
                eff = irdrop_currents(block, np.eye(pr), r_wire)  # row i: unit voltage on row i
                geff[s, r0:r0 + pr, c0:c0 + pc] = eff[:sub.shape[0], :sub.shape[1]]
    return mvm_noisy(xs._codes, xs._gran_scale, xs._granule, xs._widths, ws._levels, geff, ws._gran_scale[0],
                     ws._granule, ws._widths, xs.paral_size[1], engine.rdac, engine.g_level,
                     engine._radc_lsb_first(len(ws)), HGS, LGS, engine.vread, np.zeros(engine.g_level), 0.0,
                     np.random.default_rng(0)), geff


def sliced_pair(engine, x, w, paral=8):
    xs = SlicedData((1, 1, 2, 2), is_weight=False, paral_size=(1, paral), quant_gran=(1, paral))
    xs.slice_data_imp(engine, x)
    ws = SlicedData((1, 1, 2, 2), is_weight=True, paral_size=(paral, 6), quant_gran=(paral, 6))
    ws.slice_data_imp(engine, w)
    return xs, ws


def test_engine_product_with_ir_drop_matches_the_reference():
    rng = np.random.default_rng(11)
    x, w = engine_case(rng)
    r_wire = 40.0
    eng = DPETensor(wire_resistance=r_wire, radc=2 ** 14, **NOISE_OFF)
    xs, ws = sliced_pair(eng, x, w)
    got = eng(xs, ws)
    ref, geff = reference_ir_product(eng, xs, ws, r_wire)
    # G_eff is stored with the programmed weights (computed once, at programming time)
    np.testing.assert_allclose(ws._physics[2], geff, rtol=2e-6)
    scale = np.abs(ref).max()
    ideal = DPETensor(radc=2 ** 14, **NOISE_OFF)(xs, ws)
    assert np.abs(ideal - ref).max() > 20 * 2e-4 * scale  # the IR drop is visible at this resolution
    np.testing.assert_allclose(got, ref, rtol=0, atol=2e-4 * scale)


def test_ir_drop_with_device_noise_uses_the_programmed_cells():
    rng = np.random.default_rng(12)
    x, w = engine_case(rng)
    eng = DPETensor(wire_resistance=40.0, radc=2 ** 14, write_variation=0.05, rate_stuck_HGS=0.02, read_variation=0.0,
                    vnoise=0.0)
    xs, ws = sliced_pair(eng, x, w)
    got = eng(xs, ws)
    ref, _ = reference_ir_product(eng, xs, ws, 40.0, conductance=ws._conductance)
    np.testing.assert_allclose(got, ref, rtol=0, atol=2e-4 * np.abs(ref).max())


def test_ir_drop_effective_conductance_is_computed_once_per_programming():
    rng = np.random.default_rng(13)
    x, w = engine_case(rng)
    eng = DPETensor(wire_resistance=5.0, **NOISE_OFF)
    xs, ws = sliced_pair(eng, x, w)
    first = ws._physics
    eng(xs, ws)
    eng(xs, ws)
    assert ws._physics is first  # cached: calls do not solve the network again
    eng.wire_resistance = 6.0
    eng(xs, ws)
    assert ws._physics is not first and ws._physics[0][1] == 6.0
    wt = ws.t().t()  # a new SlicedData gets its own effective conductances
    eng(xs, wt)
    assert wt._physics is not ws._physics


def test_ir_drop_under_read_noise_stays_within_the_documented_bound():
    """Read noise multiplies each cell's effective conductance (G_eff(G) * e^(sigma z)) instead of
    solving the network per call; docs/physics.md bounds the error by 0.5 * sigma * (relative IR
    drop). Measured here against exact per-call solves of the noisy network."""
    rng = np.random.default_rng(14)
    n = 16 if SAN else 32
    for r_wire, sigma in ((2.5, 0.05), (10.0, 0.1)):
        G = random_block(rng, n, n)
        V = rng.uniform(0, 0.2, (6, n))
        Gr = G * np.exp(sigma * rng.standard_normal(G.shape))
        exact = V @ physics.effective_conductance(Gr, r_wire)
        approx = V @ (physics.effective_conductance(G, r_wire) * (Gr / G))
        ir_effect = np.abs(V @ Gr - exact).max() / np.abs(exact).max()
        err = np.abs(approx - exact).max() / np.abs(exact).max()
        assert err <= 0.5 * sigma * ir_effect, (err, sigma, ir_effect)


def test_ir_drop_with_read_noise_is_reproducible_and_noisy():
    rng = np.random.default_rng(15)
    x, w = engine_case(rng)
    eng = DPETensor(wire_resistance=5.0, read_variation=0.05, vnoise=0.0, write_variation=0.0, rate_stuck_HGS=0.0,
                    radc=2 ** 12)
    a = dpe_matmul(x, w, eng)
    b = dpe_matmul(x, w, eng)
    eng.reset()
    np.testing.assert_array_equal(dpe_matmul(x, w, eng), a)
    assert not np.array_equal(a, b)


# ---- drift ----

@pytest.mark.parametrize("nu_mean,nu_std", [(0.05, 0.0), (0.05, 0.02), (0.1, 0.2), (-0.01, 0.0)])
def test_drift_matches_the_numpy_transcription(nu_mean, nu_std):
    rng = np.random.default_rng(21)
    g = rng.uniform(LGS, HGS, (3, 17, 11)).astype(np.float32)
    seed = 2 ** 40 + 12345
    got, nu = physics.drift_conductance(g, 3600.0, t0=2.0, nu_mean=nu_mean, nu_std=nu_std, seed=seed,
                                        return_nu=True)
    ref, nu_ref = drift_ref(g, seed, 3600.0, 2.0, nu_mean, nu_std)
    # NumPy arrays shaped like G, as effective_conductance returns (a pyfastpim.Array had no arithmetic)
    assert type(got) is np.ndarray and type(nu) is np.ndarray
    assert got.shape == nu.shape == g.shape and got.dtype == np.float32 and nu.dtype == np.float64
    assert type(physics.drift_conductance(g, 3600.0)) is np.ndarray
    np.testing.assert_allclose(np.asarray(nu), nu_ref, rtol=2e-6, atol=1e-7)
    np.testing.assert_allclose(np.asarray(got), ref, rtol=2e-5)
    assert (np.asarray(nu) >= 0).all()
    if nu_std > 0:
        assert np.asarray(nu).std() > 0.5 * nu_std  # per-cell exponents really vary


def test_drift_returns_the_nu_its_conductances_used():
    # return_nu gave nu rounded to float32 while G(t) was computed with the double nu: the drift formula
    # (docs/physics.md) applied to the returned nu did not give the returned G(t) (684 of these 4096 cells off
    # by a float32 ulp at t / t0 = 1e6), and nu lost the precision the computation had
    import math
    g = np.random.default_rng(23).uniform(LGS, HGS, 4096).astype(np.float32)
    for t, t0, nu_mean, nu_std in ((1e6, 1.0, 0.05, 0.01), (3600.0, 2.0, 0.1, 0.2), (1e300, 1e-300, 0.003, 0.001)):
        got, nu = physics.drift_conductance(g, t, t0=t0, nu_mean=nu_mean, nu_std=nu_std, seed=7, return_nu=True)
        assert nu.dtype == np.float64 and got.dtype == np.float32
        log_ratio = math.log(t / t0) if math.isfinite(t / t0) else math.log(t) - math.log(t0)
        ref = np.array([np.float32(float(gk) * math.exp(-nk * log_ratio)) for gk, nk in zip(g.tolist(), nu.tolist())],
                       np.float32)
        np.testing.assert_array_equal(got, ref)
        # nu = max(0, nu_mean + nu_std z), a double: not a float32 rounding of it
        z = np.asarray(_core.normals(7, DRIFT_STREAM, 0, 0, g.size), np.float64)
        np.testing.assert_allclose(nu, np.maximum(0.0, nu_mean + nu_std * z), rtol=1e-6, atol=1e-6 * nu_std)
        assert (nu != nu.astype(np.float32))[nu > 0].mean() > 0.5


def test_drift_generator_is_the_engine_philox_stream():
    z = np.asarray(_core.normals(99, DRIFT_STREAM, 0, 0, 50))
    np.testing.assert_allclose(z, pf_normal(99, DRIFT_STREAM, 0, np.arange(50)), rtol=1e-5, atol=1e-6)


def test_drift_is_thread_count_independent():
    g = np.random.default_rng(22).uniform(LGS, HGS, (4, 64, 64)).astype(np.float32)
    threads = _core.get_num_threads()
    try:
        outs = []
        for t in (1, 2, 5):
            _core.set_num_threads(t)
            outs.append(np.asarray(physics.drift_conductance(g, 1e5, nu_std=0.03)))
    finally:
        _core.set_num_threads(threads)
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_array_equal(outs[0], outs[2])


def test_drift_arguments_are_validated():
    eng = DPETensor()
    with pytest.raises(ValueError, match="t_seconds"):
        eng.drift(0.5, t0=1.0)
    with pytest.raises(ValueError, match="t0"):
        eng.drift(10.0, t0=0.0)
    with pytest.raises(ValueError, match="nu_std"):
        eng.drift(10.0, nu_std=-0.1)
    with pytest.raises(ValueError, match="nu_mean"):
        eng.drift(10.0, nu_mean=float("nan"))
    with pytest.raises(ValueError, match="t_seconds"):
        _core.drift(np.ones(3, np.float32), 1, 0.5, 1.0, 0.05, 0.0)
    assert eng.drift(None) is eng and eng._drift is None


def test_public_physics_errors_name_the_users_arguments():
    # the core names its parameter 'g' and NumPy's matmul or float() named nothing: the public
    # functions' errors name their own arguments (G, V, t_seconds, ...), a wrong type is a TypeError
    G = np.full((2, 2), 1e-4)
    cases = [
        (lambda: physics.drift_conductance(np.full((2, 2), np.nan), 10.0), ValueError, "G"),
        (lambda: physics.effective_conductance(np.ones((2, 2, 2)), 1.0), ValueError, "G"),
        (lambda: physics.effective_conductance(np.full((2, 2), np.nan), 1.0), ValueError, "G"),
        (lambda: physics.column_currents(np.ones((2, 2, 2)), np.ones(2), 1.0), ValueError, "G"),
        (lambda: physics.column_currents(G, np.ones(3), 1.0), ValueError, "V"),
        (lambda: physics.column_currents(G, np.ones((2, 2, 2)), 0.0), ValueError, "V"),
        (lambda: physics.column_currents(G, np.ones(2), False), TypeError, "wire_resistance"),
        (lambda: physics.drift_conductance(G, "10"), TypeError, "t_seconds"),
        (lambda: physics.drift_conductance(G, None), TypeError, "t_seconds"),
        (lambda: physics.drift_conductance(G, 10.0, t0="1"), TypeError, "t0"),
        (lambda: physics.drift_conductance(G, 10.0, nu_mean=True), TypeError, "nu_mean"),
        (lambda: physics.drift_conductance(G, 10.0, nu_std=float("inf")), ValueError, "nu_std"),
        (lambda: DPETensor().drift("10"), TypeError, "t_seconds"),
    ]
    for call, kind, name in cases:
        with pytest.raises(kind, match="^argument '%s': " % name):
            call()
    np.testing.assert_array_equal(physics.column_currents(G, np.ones(2), 0.0), np.ones(2) @ G)


def readout(geff, ws, g_level):
    """NumPy transcription of the compensation readout: all-ones input, noise-free analog weights."""
    from reference.dpe_ref import slice_constants
    m, w = slice_constants(ws._widths)
    K, P = geff.shape[1:]
    qr, qc = ws._granule
    scale = ws._gran_scale[0].astype(np.float64)
    scale = scale[np.arange(K)[:, None] // qr, np.arange(P)[None, :] // qc]
    q_g = (HGS - LGS) / (g_level - 1)
    weights = sum(w[j] * m[j] / (g_level - 1) * (geff[j].astype(np.float64) - LGS) / q_g for j in range(len(m)))
    return np.abs((weights * scale).sum(axis=0)).sum()


@pytest.mark.parametrize("compensation", [False, True])
def test_engine_drift_matches_the_reference(compensation):
    rng = np.random.default_rng(23)
    x, w = engine_case(rng)
    eng = DPETensor(radc=2 ** 14, **NOISE_OFF)
    xs, ws = sliced_pair(eng, x, w)
    before = eng(xs, ws)
    eng.drift(1e4, t0=10.0, nu_mean=0.06, nu_std=0.01, compensation=compensation)
    got = eng(xs, ws)
    q_g = np.float32((HGS - LGS) / (eng.g_level - 1))
    g0 = ws._levels.astype(np.float32) * q_g + np.float32(LGS)
    gt, _ = drift_ref(g0, eng.seed, 1e4, 10.0, 0.06, 0.01)
    alpha = readout(g0, ws, eng.g_level) / readout(gt, ws, eng.g_level) if compensation else 1.0
    ref = mvm_noisy(xs._codes, xs._gran_scale, xs._granule, xs._widths, ws._levels, gt,
                    (ws._gran_scale[0] * alpha).astype(np.float32), ws._granule, ws._widths, 8, eng.rdac,
                    eng.g_level, eng._radc_lsb_first(len(ws)), HGS, LGS, eng.vread, np.zeros(eng.g_level), 0.0,
                    np.random.default_rng(0))
    scale = np.abs(ref).max()
    np.testing.assert_allclose(got, ref, rtol=0, atol=3e-4 * scale)
    if compensation:
        assert alpha > 1.2  # conductances decayed by about (1e3)^-0.06 ~ 0.66
    eng.drift(None)
    np.testing.assert_array_equal(eng(xs, ws), before)


def test_global_compensation_undoes_a_uniform_drift():
    rng = np.random.default_rng(25)
    x, w = engine_case(rng)
    eng = DPETensor(radc=2 ** 14, **NOISE_OFF)
    xs, ws = sliced_pair(eng, x, w)
    exact = x @ w
    err0 = np.abs(eng(xs, ws) - exact).mean()
    eng.drift(1e5, nu_mean=0.05, nu_std=0.0)
    err_drift = np.abs(eng(xs, ws) - exact).mean()
    eng.drift(1e5, nu_mean=0.05, nu_std=0.0, compensation=True)
    err_comp = np.abs(eng(xs, ws) - exact).mean()
    assert err_drift > 5 * err0  # every conductance lost ~44%: outputs shrink
    assert err_comp < 2 * err0, (err0, err_comp)  # one scale per layer restores them


def test_compensation_of_a_vanished_readout_raises_instead_of_returning_nan():
    """With LGS = 0 and conductances drifted to a few denormal siemens, alpha = readout(t0) / readout(t)
    (about 1e40) took the float32 weight scales to inf, and the product returned NaN (0 * inf) with
    numpy's cast warning. Every drift time must give finite outputs or the ValueError naming
    'compensation'; the window where alpha overflows (t around 3e39 here) gives the error."""
    rng = np.random.default_rng(27)
    x, w = engine_case(rng)
    raised = 0
    for t in np.logspace(38, 41, 13):
        eng = DPETensor(HGS=HGS, LGS=0.0, radc=2 ** 12, **NOISE_OFF).drift(t, nu_mean=1.0, nu_std=0.0,
                                                                            compensation=True)
        try:
            y = dpe_matmul(x, w, eng)
        except ValueError as e:
            assert str(e).startswith("argument 'compensation': "), e
            raised += 1
            continue
        assert np.isfinite(y).all(), t
    assert raised


def test_a_drifted_engine_pickles_with_every_protocol():
    # DriftSettings (__slots__, no __getstate__) refused pickle protocols 0 and 1, so a drifted engine did
    # while an engine without drift pickled with all of them
    import pickle
    rng = np.random.default_rng(28)
    x, w = engine_case(rng)
    eng = DPETensor(radc=2 ** 12, seed=9, **NOISE_OFF).drift(1e3, t0=2.0, nu_mean=0.07, nu_std=0.02,
                                                            compensation=True)
    want = dpe_matmul(x, w, eng)
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        clone = pickle.loads(pickle.dumps(eng, protocol=protocol))
        assert clone._drift.key() == (1e3, 2.0, 0.07, 0.02, True)
        np.testing.assert_array_equal(dpe_matmul(x, w, clone), want)


def test_drift_then_ir_drop_compose():
    rng = np.random.default_rng(24)
    x, w = engine_case(rng)
    eng = DPETensor(wire_resistance=40.0, radc=2 ** 14, **NOISE_OFF).drift(1e3, nu_mean=0.05, nu_std=0.02)
    xs, ws = sliced_pair(eng, x, w)
    got = eng(xs, ws)
    q_g = np.float32((HGS - LGS) / (eng.g_level - 1))
    gt, _ = drift_ref(ws._levels.astype(np.float32) * q_g + np.float32(LGS), eng.seed, 1e3, 1.0, 0.05, 0.02)
    ref, _ = reference_ir_product(eng, xs, ws, 40.0, conductance=gt)
    np.testing.assert_allclose(got, ref, rtol=0, atol=3e-4 * np.abs(ref).max())


@pytest.mark.skipif(_core.cl_devices()[0] == 0, reason="no OpenCL platform (install pocl-opencl-icd)")
def test_opencl_engine_reads_the_same_effective_conductances():
    rng = np.random.default_rng(26)
    x, w = engine_case(rng, K=30, P=20)
    outs = []
    for device in ("cpu", "opencl"):
        eng = DPETensor(wire_resistance=10.0, radc=2 ** 12, device=device, **NOISE_OFF).drift(100.0, nu_std=0.01)
        xs, ws = sliced_pair(eng, x, w)
        outs.append(eng(xs, ws))
        eng.wire_resistance = 60.0  # same programmed weights: the new G_eff must reach the device copy
        outs.append(eng(xs, ws))
    assert not np.array_equal(outs[0], outs[1])
    np.testing.assert_allclose(outs[2], outs[0], rtol=1e-5, atol=1e-5 * np.abs(outs[0]).max())
    np.testing.assert_allclose(outs[3], outs[1], rtol=1e-5, atol=1e-5 * np.abs(outs[1]).max())


def test_ir_drop_network_counts_cells_below_zero_siemens_as_open():
    """A cell written below 0 S (huge write variation) conducts nothing in the IR-drop network
    (docs/physics.md). Before, the solve used the negative conductance: a 1x1 block at -0.6 S
    gave +3 S, at -0.5 S (a singular network) -1.8e16 S, and a negative cell among positive ones
    a negative effective conductance."""
    from pyfastpim import physics
    for g in (-0.6, -0.5, -0.4, -1e-3):
        assert physics.effective_conductance(np.array([[g]]), 1.0)[0, 0] == 0.0
    rng = np.random.default_rng(0)
    for shape in ((8, 8), (4, 9), (9, 4)):
        G = rng.uniform(1e-6, 1e-4, shape)
        G[1, 2] = -1e-4
        G[-1, -1] = -5e-5
        eff = physics.effective_conductance(G, 1.0)
        assert (eff >= 0).all()
        np.testing.assert_array_equal(eff, physics.effective_conductance(np.maximum(G, 0.0), 1.0))


def test_physics_conversions_are_counted_copies():
    # effective_conductance / drift_conductance / column_currents converted G with np.ascontiguousarray
    # (uncounted copies in pyfastpim.memory); now through the core's counted conversion, as the product
    # entry points: one counted copy for a float32 / Fortran-order input, none for the dtype they read
    from pyfastpim import memory
    G = random_block(np.random.default_rng(12), 6, 5)
    V = np.linspace(0.0, 0.2, 6)
    cases = [(lambda g: physics.effective_conductance(g, 2.0), np.float64),
             (lambda g: physics.column_currents(g, V, 0.0), np.float64),
             (lambda g: physics.drift_conductance(g, 10.0), np.float32)]
    for fn, native in cases:
        ref = fn(G.astype(native))
        other = np.float32 if native == np.float64 else np.float64
        for g, kind in ((G.astype(native), None), (G.astype(other), "dtype_conversion"),
                        (np.asfortranarray(G.astype(native)), "host_copy")):
            with memory.trace() as t:
                got = fn(g)
            if kind is None:
                assert t.copies == 0, t.by_kind
            else:
                assert t.copies == 1 and t.by_kind[kind][0] == 1, (kind, t.by_kind)
            np.testing.assert_allclose(got, ref, rtol=1e-6)
    np.testing.assert_array_equal(physics.effective_conductance(G.tolist(), 2.0), physics.effective_conductance(G, 2.0))
    # data that holds no conductance is refused naming the argument (complex was cast with a warning,
    # dropping the imaginary part)
    for bad in (G.astype(complex), G > 0):
        with pytest.raises(TypeError, match="argument 'G'"):
            physics.effective_conductance(bad, 2.0)
        with pytest.raises(TypeError, match="argument 'G'"):
            physics.drift_conductance(bad, 10.0)
    with pytest.raises(TypeError, match="argument 'V'"):
        physics.column_currents(G, V.astype(complex), 2.0)


@pytest.mark.parametrize("call, name", [
    (lambda rag: physics.effective_conductance(rag, 1.0), "G"),
    (lambda rag: physics.column_currents(rag, [1.0, 1.0], 1.0), "G"),
    (lambda rag: physics.column_currents(np.full((2, 2), 1e-5), rag, 1.0), "V"),
    (lambda rag: physics.drift_conductance(rag, 10.0), "G"),
])
def test_ragged_nested_lists_are_refused_naming_the_argument(call, name):
    # NumPy refused them with its own 'setting an array element with a sequence', naming nothing
    with pytest.raises(ValueError, match="argument '%s': expected a rectangular array" % name):
        call([[1e-5, 2e-5], [3e-5]])


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_column_currents_refuses_a_non_finite_g_in_one_message_at_every_resistance(bad):
    # R = 0 said "conductances must be finite", R > 0 "conductances must be finite and the network solvable"
    G = np.full((3, 3), 1e-5)
    G[1, 2] = bad
    for r in (0, 0.0, 1.0, 1e-300):
        with pytest.raises(ValueError, match=r"^argument 'G': conductances must be finite$"):
            physics.column_currents(G, np.ones(3), r)


def test_column_currents_beyond_float64_raise_naming_v_instead_of_returning_inf():
    # finite volts and siemens whose currents pass 1.8e308 A returned inf (with NumPy's overflow
    # RuntimeWarning) at R = 0 and at R > 0 alike; found by a robustness hunt (round 11)
    G = np.full((3, 4), 1e308)
    for r in (0.0, 1e-303):  # R G = 1e5, within IRDROP_MAX_GR
        with pytest.raises(ValueError, match=r"^argument 'V': the column currents .* exceed float64's range"):
            physics.column_currents(G, np.full(3, 1e10), r)
        with pytest.raises(ValueError, match=r"^argument 'V': "):  # one row of a (k, rows) batch suffices
            physics.column_currents(G, np.array([[1e-9, 0.0, 0.0], [-1e10, -1e10, 0.0]]), r)
        # large currents that fit are returned as they are
        geff = np.maximum(G, 0.0) if r == 0 else physics.effective_conductance(G, r)
        np.testing.assert_allclose(physics.column_currents(G, np.array([1.0, 0.0, 0.0]), r), geff[0], rtol=1e-12)


@pytest.mark.parametrize("call, name", [
    (lambda g: physics.drift_conductance(g, 10.0), "G"),
    (lambda g: physics.effective_conductance(g, 1.0), "G"),
    (lambda g: physics.column_currents(g, [1.0, 1.0], 0.0), "G"),
    (lambda v: physics.column_currents(np.full((2, 2), 1e-5), v, 0.0), "V"),
])
@pytest.mark.parametrize("kind", [bytes, bytearray])
def test_bytes_are_no_conductances(call, name, kind):
    # drift_conductance(b"ab", 10.0) read the bytes' buffer as uint8 conductances 97, 98 (found by review);
    # bytes-like data are no numbers: the core's rule at every data entry point (csrc/python/bind_array.c)
    with pytest.raises(TypeError, match="^argument '%s': expected an array of numbers, got %s \\(bytes and bytearray "
                       "hold text or raw bytes, not numbers; NumPy reads bytes as a string array\\): for byte "
                       "values pass np.frombuffer\\(value, dtype=np.uint8\\)$" % (name, kind.__name__)):
        call(kind(b"ab"))


def test_a_negative_conductance_drifts_keeping_its_sign_as_in_the_engine():
    # the documented rule (docs/physics.md): a cell below 0 S is accepted (write variation is unclipped), drifts
    # by the same formula as the engine's programmed cells, and the network takes it as an open cell
    g = np.array([[2e-6, -2e-6], [-1.0, 1.0]], np.float32)
    got, nu = physics.drift_conductance(g, 100.0, nu_std=0.0, return_nu=True)
    np.testing.assert_array_equal(got, (g.astype(np.float64) * np.exp(-nu * np.log(100.0))).astype(np.float32))
    np.testing.assert_array_equal(physics.drift_conductance(-g, 100.0, nu_std=0.0), -got)
    np.testing.assert_array_equal(physics.effective_conductance(got, 1.0), physics.effective_conductance(np.maximum(got, 0), 1.0))
