"""One argument contract (issue 10): the same invalid argument gets the same exception type, naming the
argument, from every entry point that takes it (the C converters of csrc/python/convert.c and the core
validator of csrc/core/contract.c), on the CPU and on OpenCL; plus regressions of the drifted parsers.
"""
import math
import pickle
import re

import numpy as np
import pytest

import pyfastpim
from pyfastpim import _core
from helpers import HGS, conv_kwargs, mvm_kwargs, outcome, program_kwargs


def _opencl():
    try:
        return pyfastpim.resolve_device("opencl")
    except (RuntimeError, ValueError):
        return None


CL = _opencl()
DEVICES = ["cpu"] + (["opencl"] if CL is not None else [])


# ---------------------------------------------------------------- raw entry points on both devices

X = np.random.default_rng(5).standard_normal((6, 8)).astype(np.float32)


def slice_args(**over):
    args = dict(data=X, slice_method=(1, 1, 2), paral_size=(2, 2), quant_gran=None, bw_e=None, dequant=False,
                g_level=None)
    args.update(over)
    return args


def run_mvm(device, **over):
    args = mvm_kwargs(**over)
    return _core.dpe_mvm(**args) if device == "cpu" else pyfastpim.cl_dpe_mvm(CL, **args)


def run_conv(device, **over):
    args = conv_kwargs(**over)
    return _core.dpe_conv2d(**args) if device == "cpu" else pyfastpim.cl_dpe_conv2d(CL, **args)


def run_slice(device, **over):
    args = slice_args(**over)
    return _core.slice_quantize(**args, device=None if device == "cpu" else CL)


def run_program(device, **over):
    args = program_kwargs(**over)
    return _core.program_conductance(**args, device=None if device == "cpu" else CL)


def run_normals(device, seed):
    return _core.normals(seed, 0, 0, 0, 4, device=None if device == "cpu" else CL)


def assert_same_rejection(calls, name, exc_type):
    """Every call raises exc_type (the same type everywhere) with a message naming the argument: name (a string,
    or a tuple of strings one of which it holds), or name(label) where the calls' arguments differ. Returns
    the outcomes."""
    got = {label: outcome(fn) for label, fn in calls.items()}
    types = {label: o[0] for label, o in got.items()}
    assert set(types.values()) == {exc_type}, got
    for label, (_, msg) in got.items():
        want = name(label) if callable(name) else name
        assert any(w in msg for w in ((want,) if isinstance(want, str) else want)), (label, msg)
    return got


# ---------------------------------------------------------------- seeds

BAD_SEEDS = [(-1, ValueError), (2 ** 64, ValueError), (-2 ** 63, ValueError), (1.5, TypeError), ("7", TypeError),
             (True, TypeError), (float("nan"), TypeError)]


def seed_entry_points(seed):
    calls = {}
    for dev in DEVICES:
        calls["dpe_mvm/" + dev] = lambda dev=dev: run_mvm(dev, seed=seed)
        calls["dpe_conv2d/" + dev] = lambda dev=dev: run_conv(dev, seed=seed)
        calls["program_conductance/" + dev] = lambda dev=dev: run_program(dev, seed=seed)
        calls["normals/" + dev] = lambda dev=dev: run_normals(dev, seed)
    calls["drift"] = lambda: _core.drift(np.ones(3, np.float32), seed, 2.0, 1.0, 0.05, 0.0)
    calls["program_weights"] = lambda: pyfastpim.program_weights(np.zeros((3, 2, 2), np.uint8), (1, 1, 2), 16,
                                                                 seed=seed)
    calls["DPETensor"] = lambda: pyfastpim.DPETensor(seed=seed)
    calls["check_seed"] = lambda: _core.check_seed(seed)
    return calls


@pytest.mark.parametrize("seed,exc", BAD_SEEDS, ids=[repr(s) for s, _ in BAD_SEEDS])
def test_bad_seed_same_error_everywhere(seed, exc):
    assert_same_rejection(seed_entry_points(seed), "seed", exc)


@pytest.mark.parametrize("seed", [0, 2 ** 63 - 1, 2 ** 63 + 5, 2 ** 64 - 1, np.uint64(2 ** 63 + 5)])
def test_every_uint64_seed_accepted_everywhere(seed):
    for label, fn in seed_entry_points(seed).items():
        assert outcome(fn)[0] == "ok", (label, outcome(fn))


def test_regression_high_seed_engine_products():
    """DPETensor(seed=2**63+5) was accepted, then every product raised OverflowError (seed parsed signed)."""
    rng = np.random.default_rng(8)
    x, w = rng.standard_normal((4, 32)).astype(np.float32), rng.standard_normal((32, 8)).astype(np.float32)
    outs = {}
    for dev in DEVICES:
        eng = pyfastpim.DPETensor(seed=2 ** 63 + 5, device=dev, g_level=4, rdac=4, radc=2 ** 10)
        assert eng.seed == 2 ** 63 + 5
        outs[dev] = pyfastpim.dpe_matmul(x, w, eng, (1, 1, 2), (1, 1, 2), (1, 16), (16, 8), None, (16, 8))
        assert np.all(np.isfinite(np.asarray(outs[dev])))
    # the noise is keyed by the full 64-bit seed: another high seed gives other noise
    eng2 = pyfastpim.DPETensor(seed=2 ** 63 + 6, g_level=4, rdac=4, radc=2 ** 10)
    other = pyfastpim.dpe_matmul(x, w, eng2, (1, 1, 2), (1, 1, 2), (1, 16), (16, 8), None, (16, 8))
    assert not np.array_equal(np.asarray(outs["cpu"]), np.asarray(other))
    # and the same seed on a fresh engine repeats it
    eng3 = pyfastpim.DPETensor(seed=2 ** 63 + 5, g_level=4, rdac=4, radc=2 ** 10)
    again = pyfastpim.dpe_matmul(x, w, eng3, (1, 1, 2), (1, 1, 2), (1, 16), (16, 8), None, (16, 8))
    np.testing.assert_array_equal(np.asarray(outs["cpu"]), np.asarray(again))


# ---------------------------------------------------------------- granules and pairs

BAD_PAIRS = [((0, 8), ValueError), ((-1, 8), ValueError), ((1, 2 ** 63), ValueError), ((1,), ValueError),
             ((1, 2, 3), ValueError), ((1.0, 8), TypeError), (("1", 8), TypeError), ((True, 8), TypeError),
             ("18", TypeError), (8, TypeError), (None, TypeError)]


@pytest.mark.parametrize("pair,exc", BAD_PAIRS, ids=[repr(p) for p, _ in BAD_PAIRS])
def test_bad_granule_same_error_everywhere(pair, exc):
    calls = {}
    for dev in DEVICES:
        calls["dpe_mvm x_granule/" + dev] = lambda dev=dev: run_mvm(dev, x_granule=pair)
        calls["dpe_mvm w_granule/" + dev] = lambda dev=dev: run_mvm(dev, w_granule=pair)
        calls["dpe_conv2d x_granule/" + dev] = lambda dev=dev: run_conv(dev, x_granule=pair)
        if pair is not None and not isinstance(pair, str):  # None: paral_size; strings name granularities
            calls["slice_quantize quant_gran/" + dev] = lambda dev=dev: run_slice(dev, quant_gran=pair)
        calls["slice_quantize paral_size/" + dev] = lambda dev=dev: run_slice(dev, paral_size=pair)
    assert_same_rejection(calls, lambda label: "argument '%s'" % label.split()[1].split("/")[0], exc)


@pytest.mark.parametrize("device", DEVICES)
def test_regression_granule_list_or_tuple(device):
    """dpe_mvm(x_granule=[1, 8]) raised TypeError while slice_quantize accepted a list: both take any sequence."""
    ref = np.asarray(run_mvm(device))
    for conv in (list, tuple, np.array):
        got = np.asarray(run_mvm(device, x_granule=conv([1, 8]), w_granule=conv([8, 8])))
        np.testing.assert_array_equal(got, ref)
        a = run_slice(device, paral_size=conv([2, 2]), quant_gran=conv([2, 4]))
        b = run_slice(device, paral_size=(2, 2), quant_gran=(2, 4))
        np.testing.assert_array_equal(np.asarray(a[0]), np.asarray(b[0]))
    np.testing.assert_array_equal(np.asarray(run_conv(device, kernel_size=[3, 3], stride=[1, 1])[0]),
                                  np.asarray(run_conv(device)[0]))


# ---------------------------------------------------------------- levels, resolutions, slice methods

@pytest.mark.parametrize("g_level,exc", [(1, ValueError), (300, ValueError), (65536, ValueError), (0, ValueError),
                                         (4.0, TypeError), ("16", TypeError)])
def test_g_level_same_rule_everywhere(g_level, exc):
    """g_level=300 was accepted by dpe_mvm and rejected by slice_quantize: 2..256 everywhere now."""
    calls = {}
    for dev in DEVICES:
        calls["dpe_mvm/" + dev] = lambda dev=dev: run_mvm(dev, g_level=g_level)
        calls["dpe_conv2d/" + dev] = lambda dev=dev: run_conv(dev, g_level=g_level)
        calls["slice_quantize/" + dev] = lambda dev=dev: run_slice(dev, g_level=g_level)
        calls["program_conductance/" + dev] = lambda dev=dev: run_program(dev, g_level=g_level)
    calls["program_levels"] = lambda: _core.program_levels(np.zeros((3, 2, 2), np.uint8), (1, 1, 2), g_level)
    calls["program_weights"] = lambda: pyfastpim.program_weights(np.zeros((3, 2, 2), np.uint8), (1, 1, 2), g_level)
    calls["public slice_quantize"] = lambda: pyfastpim.slice_quantize(X, (1, 1, 2), (2, 2), g_level=g_level)
    if not isinstance(g_level, str):
        calls["DPETensor"] = lambda: pyfastpim.DPETensor(g_level=g_level)
    got = assert_same_rejection(calls, "argument 'g_level'", exc)
    if exc is ValueError:  # one rule, one message: the engine's is the core's
        assert len({msg for _, msg in got.values()}) == 1, got


@pytest.mark.parametrize("over,name", [
    (dict(rdac=1), "rdac"), (dict(rdac=2 ** 24 + 1), "rdac"), (dict(radc=1), "radc"), (dict(radc=[256, 1]), "radc"),
    (dict(radc=[2 ** 24 + 1]), "radc"), (dict(HGS=1e-7, LGS=1e-5), "LGS"), (dict(rate_stuck_HGS=1.5), "rate_stuck_HGS"),
    (dict(rate_stuck_HGS=0.6, rate_stuck_LGS=0.6), "rate_stuck_LGS"), (dict(read_variation={0: 0.1}), "read_variation"),
])
def test_engine_rejections_name_the_argument_as_the_core_does(over, name):
    """DPETensor kept MemIntelli's messages ('The resolution of the DAC should be larger than 1!'), which
    name no argument; its rejections are ValueErrors naming the argument, and where the core has the
    same rule (converter resolutions, LGS below HGS) the same message as the core's."""
    with pytest.raises(ValueError, match="argument '%s'" % name) as info:
        pyfastpim.DPETensor(**over)
    core = {"rdac": lambda: run_mvm("cpu", rdac=over.get("rdac")),
            "LGS": lambda: pyfastpim.program_weights(np.zeros((3, 2, 2), np.uint8), (1, 1, 2), 4, over.get("HGS"),
                                                     over.get("LGS"))}
    if name in core:
        assert outcome(core[name]) == (ValueError, str(info.value))
    if name == "radc":
        bad = next(v for v in np.atleast_1d(over["radc"]) if not 2 <= v <= 2 ** 24)
        assert outcome(lambda: run_mvm("cpu", rdac=int(bad))) == (ValueError, str(info.value).replace("radc", "rdac"))


FLOAT32_RANGE_CASES = [(dict(HGS=1e39, LGS=0.0), "HGS", "at most 1e+30"),
                       (dict(HGS=1e300, LGS=0.0), "HGS", "at most 1e+30"),
                       (dict(HGS=1e-44, LGS=0.0), "HGS", "smallest normal"),
                       (dict(HGS=1e-300, LGS=0.0), "HGS", "smallest normal"),
                       (dict(HGS=1.0 + 1e-7, LGS=1.0), "LGS", "not distinct in float32")]


@pytest.mark.parametrize("over,name,words", FLOAT32_RANGE_CASES)
def test_engine_conductance_range_is_the_core_rule(over, name, words):
    # DPETensor(HGS=1e39) (or 1e-44, 1e300, 1e-300) with write / read noise gave NaN products, no error
    with pytest.raises(ValueError, match="argument '%s'" % name) as info:
        pyfastpim.DPETensor(g_level=16, **over)
    assert words in str(info.value)
    codes = np.zeros((3, 2, 2), np.uint8)
    for label, fn in {"check_conductance_range": lambda: _core.check_conductance_range(over["HGS"], over["LGS"], 16),
                      "program_weights": lambda: pyfastpim.program_weights(codes, (1, 1, 2), 16, **over)}.items():
        assert outcome(fn) == (ValueError, str(info.value)), label


class _DuckEngine:
    g_level, HGS, LGS, write_variation, rate_stuck_HGS, rate_stuck_LGS = 16, 1e-5, -1e-5, 0.0, 0.0, 0.0


def test_weights_refuse_an_engine_programming_negative_conductances():
    # SlicedData programmed cells down to -1e-5 S for an engine object with LGS < 0 (only LGS < HGS was checked)
    w = pyfastpim.SlicedData((1, 1, 2), is_weight=True, paral_size=(6, 5))
    with pytest.raises(ValueError, match="argument 'LGS': must be >= 0"):
        w.slice_data_imp(_DuckEngine(), X[:6, :5])


@pytest.mark.parametrize("over,message", [
    (dict(HGS=float("nan")), "argument 'HGS': must be finite"), (dict(LGS=float("inf")), "argument 'LGS': must be finite"),
    (dict(LGS=2e-5), "argument 'LGS': must be >= 0 and below HGS"),
])
def test_weights_refuse_an_engines_conductance_range_with_the_cores_rule(over, message):
    # one rule, the core's (naming HGS or LGS): programming kept its own "finite LGS < HGS" check
    # beside it, which answered these first, naming 'engine'
    engine = type("Engine", (_DuckEngine,), dict(dict(LGS=1e-7), **over))()
    w = pyfastpim.SlicedData((1, 1, 2), is_weight=True, paral_size=(6, 5))
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        w.slice_data_imp(engine, X[:6, :5])
    assert outcome(lambda: w.slice_data_imp(engine, X[:6, :5])) == \
        outcome(lambda: _core.check_conductance_range(engine.HGS, engine.LGS, 16))


@pytest.mark.parametrize("device", DEVICES)
def test_conductance_range_limits_give_finite_noisy_products(device):
    # the edges of the accepted range stay finite with every noise source on, just past them is refused
    rng = np.random.default_rng(8)
    x, w = rng.standard_normal((3, 16)).astype(np.float32), rng.standard_normal((16, 6)).astype(np.float32)
    q = 2.0 ** -22 * 15  # HGS - LGS at the smallest spacing of 16 levels: HGS * 2**-22
    edges = [dict(HGS=1e30, LGS=0.0), dict(HGS=15 * 1.1754944e-38, LGS=0.0), dict(HGS=1.0, LGS=1.0 - q)]
    for kw in edges:
        eng = pyfastpim.DPETensor(g_level=16, write_variation=0.5, read_variation=0.5, vnoise=0.5,
                                  rate_stuck_HGS=0.01, rate_stuck_LGS=0.01, device=device, **kw)
        xs = pyfastpim.SlicedData((1, 1, 2, 4), paral_size=(3, 8))
        ws = pyfastpim.SlicedData((1, 1, 2, 4), is_weight=True, paral_size=(8, 3))
        xs.slice_data_imp(eng, x)
        ws.slice_data_imp(eng, w)
        assert np.isfinite(np.asarray(ws.G)).all(), kw
        assert np.isfinite(np.asarray(eng(xs, ws))).all(), kw
    for kw in (dict(HGS=1.01e30, LGS=0.0), dict(HGS=14 * 1.1754944e-38, LGS=0.0), dict(HGS=1.0, LGS=1.0 - q / 2)):
        with pytest.raises(ValueError, match="argument '(HGS|LGS)'"):
            pyfastpim.DPETensor(g_level=16, device=device, **kw)


def test_g_level_256_accepted_everywhere():
    for dev in DEVICES:
        run_mvm(dev, g_level=256, rdac=2)
        run_slice(dev, g_level=256)
        run_program(dev, g_level=256)
    pyfastpim.DPETensor(g_level=256)


@pytest.mark.parametrize("over,name,exc", [
    (dict(rdac=1), "rdac", ValueError), (dict(rdac=2 ** 24 + 1), "rdac", ValueError), (dict(rdac=2.5), "rdac", TypeError),
    (dict(radc=[256]), "radc", ValueError), (dict(radc=[1, 256]), "radc", ValueError),
    (dict(radc=[256, 2 ** 40]), "radc", ValueError), (dict(radc="x"), "radc", TypeError),
    (dict(radc=[256, 1.5]), "radc", TypeError),
    (dict(x_widths=(2, 1)), "x_widths", ValueError), (dict(x_widths=(1, 9)), "x_widths", ValueError),
    (dict(x_widths=()), "x_widths", ValueError), (dict(x_widths=(1,) * 17), "x_widths", ValueError),
    (dict(x_widths=(1, 1.0)), "x_widths", TypeError), (dict(x_widths="11"), "x_widths", TypeError),
    (dict(w_widths=(1, 8)), "w_widths", ValueError),  # 255 > g_level - 1
    (dict(n=0), "'n'", ValueError), (dict(n=3), "'n'", ValueError), (dict(n=2 ** 40), "'n'", ValueError),
    (dict(g_level=256, rdac=2 ** 16), "rdac", ValueError),  # (rdac-1)(g_level-1)n >= 2**24
    (dict(HGS=1e-7, LGS=1e-5), "LGS", ValueError), (dict(LGS=-1e-7), "LGS", ValueError),
    (dict(HGS=float("nan")), "HGS", ValueError), (dict(LGS=float("inf")), "LGS", ValueError),
    # outside float32's useful range (NaN products with noise before): HGS above 1e30, a level spacing below
    # float32's smallest normal, LGS so close to HGS that the levels are not distinct float32 numbers
    (dict(HGS=1e39), "HGS", ValueError), (dict(HGS=1e-44, LGS=0.0), "HGS", ValueError),
    (dict(LGS=HGS * (1 - 1e-8)), "LGS", ValueError),
    (dict(vnoise=float("nan")), "vnoise", ValueError), (dict(vnoise=-0.1), "vnoise", ValueError),
    (dict(vnoise=float("inf")), "vnoise", ValueError), (dict(vnoise=2e6), "vnoise", ValueError),
    (dict(read_sigma=np.full(16, np.nan, np.float32)), "read_sigma", ValueError),
    (dict(read_sigma=np.full(16, 6.0, np.float32)), "read_sigma", ValueError),
    (dict(read_sigma=np.full(16, np.inf, np.float32)), "read_sigma", ValueError),
    (dict(item0=-1), "item0", ValueError),
])
def test_dpe_contract_same_on_both_devices(over, name, exc):
    calls = {"dpe_mvm/" + dev: (lambda dev=dev: run_mvm(dev, **over)) for dev in DEVICES}
    if "item0" not in over:
        calls.update({"dpe_conv2d/" + dev: (lambda dev=dev: run_conv(dev, **over)) for dev in DEVICES})
    assert_same_rejection(calls, name, exc)


@pytest.mark.parametrize("method,exc", [((2, 1), ValueError), ((1, 9), ValueError), ((1,), ValueError),
                                        ((), ValueError), ((1,) * 17, ValueError), ((1, 2 ** 40), ValueError),
                                        ((1, -1), ValueError), ((1, 1.5), TypeError), ("12", TypeError),
                                        (5, TypeError), (None, TypeError)])
def test_slice_method_same_error_everywhere(method, exc):
    calls = {"slice_quantize/" + dev: (lambda dev=dev: run_slice(dev, slice_method=method)) for dev in DEVICES}
    calls["program_levels"] = lambda: _core.program_levels(np.zeros((2, 2, 2), np.uint8), method, 16)
    calls["conv2d x_widths/cpu"] = lambda: run_conv("cpu", x_widths=method)
    assert_same_rejection(calls, ("slice_method", "x_widths"), exc)


@pytest.mark.parametrize("over,name", [
    (dict(write_variation=float("nan")), "write_variation"), (dict(write_variation=-0.1), "write_variation"),
    (dict(rate_stuck_HGS=float("nan")), "rate_stuck_HGS"), (dict(rate_stuck_HGS=1.5), "rate_stuck_HGS"),
    (dict(rate_stuck_LGS=0.6, rate_stuck_HGS=0.6), "rate_stuck_LGS"), (dict(HGS=float("inf")), "HGS"),
    (dict(LGS=2e-5), "LGS"),
    # negative conductances (programming took any LGS < HGS: cells below 0 S) and float32's range
    (dict(LGS=-1e-7), "LGS"), (dict(HGS=-1e-7, LGS=-1e-5), "LGS"), (dict(HGS=1e39), "HGS"),
    (dict(HGS=1e-44, LGS=0.0), "HGS"), (dict(LGS=HGS * (1 - 1e-8)), "LGS"),
])
def test_programming_contract_same_on_both_devices(over, name):
    assert_same_rejection({"program_conductance/" + d: (lambda d=d: run_program(d, **over)) for d in DEVICES},
                          name, ValueError)


# ---------------------------------------------------------------- non-finite input: PF_ENONFINITE

@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nonfinite_input_same_error_on_both_devices(bad):
    x = X.copy()
    x[2, 3] = bad
    assert_same_rejection({"slice_quantize/" + d: (lambda d=d: run_slice(d, data=x)) for d in DEVICES}, "'data'",
                          ValueError)
    img = conv_kwargs()["image"].copy()
    img[0, 1, 2, 2] = bad
    calls = {"dpe_conv2d/" + d: (lambda d=d: run_conv(d, image=img)) for d in DEVICES}
    assert_same_rejection(calls, "'input'", ValueError)
    for label, fn in calls.items():
        assert "NaN or infinity" in outcome(fn)[1], label


def test_float64_data_beyond_float32_is_named_as_such():
    # a finite float64 beyond float32's range became an infinity in the conversion, and the error blamed the
    # caller's data for holding "NaN or infinity" (drift_conductance: "got inf at index 0")
    eng = pyfastpim.DPETensor()
    x, w = np.ones((2, 4)), np.ones((4, 3))
    xb, wb = x.copy(), w.copy()
    xb[1, 2] = wb[2, 0] = 1e300  # element 6 of both
    calls = {"x": lambda: pyfastpim.dpe_matmul(xb, w, eng, (1, 1, 2), (1, 1, 2), (1, 4), (4, 4), None, None),
             "w": lambda: pyfastpim.dpe_matmul(x, wb, eng, (1, 1, 2), (1, 1, 2), (1, 4), (4, 4), None, None),
             "data": lambda: pyfastpim.slice_quantize(xb, (1, 1, 2), (1, 4)),
             "G": lambda: pyfastpim.physics.drift_conductance(xb, 10.0)}
    for name, fn in calls.items():
        exc, msg = outcome(fn)
        assert exc is ValueError and "argument '%s': values must be finite in float32" % name in msg \
            and "value 1e+300 (element 6)" in msg, (name, msg)


def test_nonfinite_other_inputs_name_the_argument():
    for fn, name in [(lambda: _core.irdrop_block(np.full((3, 3), np.nan), 1.0), "'g'"),
                     (lambda: _core.irdrop_layer(np.full((1, 4, 4), np.inf, np.float32), 1.0, 2, 2, 1e-7), "'g'"),
                     (lambda: _core.drift(np.ones(3, np.float32), 1, 2.0, 1.0, float("nan"), 0.0), "nu_mean"),
                     (lambda: _core.drift(np.ones(3, np.float32), 1, float("inf"), 1.0, 0.05, 0.0), "t_seconds")]:
        exc, msg = outcome(fn)
        assert exc is ValueError and name in msg, (name, msg)


# ---------------------------------------------------------------- wrong dtypes and types

@pytest.mark.parametrize("over,name,exc", [
    (dict(x_codes=np.zeros((2, 1, 3, 16), np.float32)), "x_codes", TypeError),
    (dict(x_scale=np.ones((1, 3, 2), np.complex64)), "x_scale", TypeError),
    (dict(w_levels=np.zeros((2, 16, 8), np.bool_)), "w_levels", TypeError),
    (dict(x_codes="codes"), "x_codes", TypeError),
    (dict(n="8"), "'n'", TypeError), (dict(HGS="1e-5"), "HGS", TypeError), (dict(call=-1), "call", ValueError), (dict(call=2 ** 64), "call", ValueError),
    (dict(vnoise=None), "vnoise", TypeError),
])
def test_wrong_types_same_on_both_devices(over, name, exc):
    assert_same_rejection({"dpe_mvm/" + d: (lambda d=d: run_mvm(d, **over)) for d in DEVICES}, name, exc)


# ---------------------------------------------------------------- the error channel itself

def test_memory_error_has_a_message():
    """A failed allocation names what could not be allocated (not MemoryError(''))."""
    import resource
    old = resource.getrlimit(resource.RLIMIT_AS)
    try:
        import os
        if os.environ.get("PYFASTPIM_SANITIZED") != "1":
            resource.setrlimit(resource.RLIMIT_AS, (4 << 30, old[1]))
        exc, msg = outcome(_core.normals, 1, 0, 0, 0, 2 ** 40)
    finally:
        resource.setrlimit(resource.RLIMIT_AS, old)
    assert exc is MemoryError and msg, msg


def test_interrupt_status_still_raises_keyboard_interrupt():
    """PF_EINTR maps to KeyboardInterrupt (bind_interrupt.c); kept by the one mapper: test_interrupt.py covers
    the signal path, this checks the mapper is the module's (no other channel left)."""
    assert not hasattr(_core, "raise_status")
    assert math.isfinite(float(np.asarray(run_mvm("cpu")).sum()))


# ---------------------------------------------------------------- edge forms found by an API check

@pytest.mark.parametrize("radc,exc", [([float("nan"), 16, 16, 16], TypeError), (["16", 16, 16, 16], TypeError),
                                      (np.array([[16, 16], [16, 16]]), TypeError), ((16.5, 16, 16, 16), TypeError),
                                      (np.array(16.5), TypeError), (np.array([16.5, 16]), TypeError)])
def test_radc_lists_of_non_ints_are_refused_naming_radc(radc, exc):
    # were: a bare "cannot convert float NaN to integer", a NumPy TypeError, or "16" accepted (a 0-d int array,
    # np.array(16), is one int, as for g_level and rdac: test_scalar_arguments.test_engine_takes_a_0d_radc_as_one_int)
    with pytest.raises(exc, match="argument 'radc'"):
        pyfastpim.DPETensor(radc=radc)


def test_radc_lists_of_integral_numbers_are_accepted():
    assert pyfastpim.DPETensor(radc=np.array([256, 16, 16, 16])).radc == (256, 16, 16, 16)
    assert pyfastpim.DPETensor(radc=[256.0, 16, 16, 16]).radc == (256, 16, 16, 16)


def test_any_positive_bw_e_is_bfp_and_numpy_ints_are_ints():
    # bw_e=2**70 raised OverflowError; its value is unused beyond its sign (docs/semantics.md 4)
    ref = pyfastpim.slice_quantize(X, (1, 1, 2), (2, 2), bw_e=8)
    for bw_e in (2 ** 70, np.int64(8)):
        got = pyfastpim.slice_quantize(X, (1, 1, 2), (2, 2), bw_e=bw_e)
        np.testing.assert_array_equal(np.asarray(got.codes), np.asarray(ref.codes))
        assert got.gran_exp is not None
    with pytest.raises(ValueError, match="argument 'bw_e'"):
        pyfastpim.slice_quantize(X, (1, 1, 2), (2, 2), bw_e=-2 ** 70)


@pytest.mark.parametrize("width", [float("nan"), float("inf")])
def test_non_finite_slice_widths_are_refused_naming_slice_method(width):
    with pytest.raises(TypeError, match="argument 'slice_method'"):
        pyfastpim.SlicedData((1, width))


def test_assigned_attributes_must_be_numbers_finite_in_float32():
    # values finite in float64 but not in float32 passed the check (made before the cast): NaN products
    eng = pyfastpim.DPETensor(write_variation=0.0, rate_stuck_HGS=0.0)
    w = pyfastpim.SlicedData((1, 1, 2, 2), is_weight=True, paral_size=(32, 32), quant_gran=(32, 32))
    w.slice_data_imp(eng, np.random.default_rng(0).standard_normal((64, 32)).astype(np.float32))
    G, M = np.array(w.G, np.float64), np.array(w.max_data, np.float64)
    with pytest.raises(ValueError, match="argument 'G': values must be finite in float32"):
        w.G = G * 1e300
    with pytest.raises(ValueError, match="argument 'max_data': values must be finite in float32"):
        w.max_data = M * 1e300
    with pytest.raises(TypeError, match="argument 'sliced_data': expected numbers"):
        w.sliced_data = np.array(w.sliced_data, dtype=object)
    with pytest.raises(TypeError, match="argument 'G': expected numbers"):
        w.G = np.array(G, dtype=object)
    w.G, w.max_data = G, M  # float64 values that fit are taken
    np.testing.assert_array_equal(np.array(w.G), G.astype(np.float32))


@pytest.mark.parametrize("device", DEVICES)
def test_assigned_conductances_are_bounded_by_what_programming_can_write(device):
    # w.G with a cell at 1e36 S (finite in float32) was taken: the crossbar sums overflowed, NaN products
    eng = pyfastpim.DPETensor(write_variation=0.0, rate_stuck_HGS=0.0, read_variation=0.05, vnoise=0.0,
                              device=device)
    rng = np.random.default_rng(9)
    xs = pyfastpim.SlicedData((1, 1, 2, 2), paral_size=(4, 32))
    w = pyfastpim.SlicedData((1, 1, 2, 2), is_weight=True, paral_size=(32, 32), quant_gran=(32, 32))
    xs.slice_data_imp(eng, rng.standard_normal((4, 64)).astype(np.float32))
    w.slice_data_imp(eng, rng.standard_normal((64, 32)).astype(np.float32))
    G = np.array(w.G)

    def assign(cell):
        g = G.copy()
        g[0, 0, 0, 0, 0] = cell
        w.G = g
    for bad in (1e36, 1e30, -1e-7):
        with pytest.raises(ValueError, match="argument 'G': conductances must be in"):
            assign(bad)
    top = eng.HGS * (1 + pyfastpim.dpe.NOISE_SIGMA_MAX * _core.NORMAL_ABS_MAX)  # write variation's largest cell
    with pytest.raises(ValueError, match="argument 'G': conductances must be in"):
        assign(top * 1.001)
    assign(np.float32(top * 0.999))  # the largest cell programming can make is accepted, multiplies to finite values
    assert np.isfinite(np.asarray(eng(xs, w))).all()


def _exactness_cases():
    """Every user entry point multiplying through a 512-row crossbar with rdac = g_level = 256:
    (rdac-1)*(g_level-1)*512 = 33292800 >= 2**24. Label -> (call, the user's name for the height)."""
    eng = pyfastpim.DPETensor(rdac=256, g_level=256)
    rng = np.random.default_rng(7)
    x, w = rng.standard_normal((2, 512)).astype(np.float32), rng.standard_normal((512, 4)).astype(np.float32)
    ws = pyfastpim.SlicedData((1, 1, 2, 2), is_weight=True, paral_size=(512, 4), quant_gran=(512, 4))
    ws.slice_data_imp(eng, w)
    xs = pyfastpim.SlicedData((1, 1, 2, 2), paral_size=(1, 512), quant_gran=(1, 512))
    xs.slice_data_imp(eng, x)
    sizes = dict(input_paral_size=(1, 512), input_quant_gran=(1, 512))
    ctx = pyfastpim.AttentionContext(strength=1.0)
    ctx.incoming = np.eye(512, dtype=np.float32)
    return {
        "MapReduceDot": (lambda: eng.MapReduceDot(xs, ws), "paral_size"),
        "dpe_matmul": (lambda: pyfastpim.dpe_matmul(x, w, eng, weight_paral_size=(512, 4), weight_quant_gran=(512, 4),
                                                    **sizes), "weight_paral_size"),
        "forward_linear": (lambda: eng.forward_linear(x, ws, (1, 1, 2, 2), **sizes), "weight_paral_size"),
        "forward_conv2d": (lambda: eng.forward_conv2d(x.reshape(2, 512, 1, 1), ws, 1, **sizes), "weight_paral_size"),
        "AttentionContext.apply(engine=)": (lambda: ctx.apply(x, engine=eng, weight_paral_size=(512, 4), **sizes),
                                            "weight_paral_size"),
    }


@pytest.mark.parametrize("label", list(_exactness_cases()))
def test_exactness_bound_names_the_users_arguments_and_the_limit(label):
    # the message named the core's internal 'n' ("(arguments 'rdac', 'g_level', 'n')"), which no user passes
    fn, name = _exactness_cases()[label]
    with pytest.raises(ValueError) as info:
        fn()
    msg = str(info.value)
    assert "'n'" not in msg, msg
    for part in ("'%s'" % name, "'rdac'", "'g_level'", "(256-1)*(256-1)*512 = 33292800", "2**24 = 16777216",
                 "at most 258 crossbar rows"):
        assert part in msg, (part, msg)


# ---------------------------------------------------------------- DPETensor's converter and noise arguments

ENGINE_VS_CORE = [("rdac", v, "mvm") for v in (1, 2 ** 25, 2 ** 70, 2.0, "16", True)] + \
                 [("radc", v, "mvm") for v in (1, 2 ** 25, [16] * 17, [], [16, 1], "16", True)] + \
                 [("vnoise", v, "mvm") for v in (-1.0, 1e7, float("nan"))] + \
                 [("write_variation", v, "program") for v in (-1.0, 1e7, float("nan"))]


@pytest.mark.parametrize("name,value,entry", ENGINE_VS_CORE, ids=["%s=%r" % c[:2] for c in ENGINE_VS_CORE])
def test_engine_refuses_resolutions_and_sigmas_as_the_core(name, value, entry):
    # DPETensor repeated the core's rules for rdac/radc (pf_validate_resolution) and the sigma maxima
    # (pf_validate_sigma) in Python, with other words ("must be >= 0", "expected an int, got 2.0"), and
    # took more than 16 ADC resolutions (the kernels' limit, one per weight slice) that every product
    # then refused: now the constructor uses the core's checks (_core.check_rdac/check_radc/check_sigma)
    core = outcome(lambda: run_mvm("cpu", **{name: value}) if entry == "mvm" else
                   run_program("cpu", **{name: value}))
    assert core[0] in (TypeError, ValueError) and core[1].startswith("argument '%s'" % name), core
    assert outcome(lambda: pyfastpim.DPETensor(**{name: value})) == core


def test_engine_takes_up_to_16_adc_resolutions():
    assert pyfastpim.DPETensor(radc=[16] * 16).radc == (16,) * 16
    with pytest.raises(ValueError, match=r"^argument 'radc': .*at most 16 ints.*got 17 values"):
        pyfastpim.DPETensor(radc=np.full(17, 16))


def test_read_variation_bounds_name_the_level():
    with pytest.raises(ValueError, match=r"^argument 'read_variation': must be in \[0, 5\]"):
        pyfastpim.DPETensor(read_variation=5.5)
    with pytest.raises(ValueError, match=r"^argument 'read_variation\[1\]': must be finite"):
        pyfastpim.DPETensor(g_level=2, read_variation={0: 0.1, 1: float("inf")})
    with pytest.raises(TypeError, match=r"^argument 'read_variation\[0\]'"):
        pyfastpim.DPETensor(g_level=2, read_variation={0: "0.1", 1: 0.1})


def test_dpe_matmul_checks_each_slicing_argument_once(monkeypatch):
    # dpe_matmul's argument checks (_matmul_args) parsed the paral sizes and granules, checked their int64 /
    # crossbar-height limits, then checked every slicing argument again through _slicing_args, and the
    # input's a third time in forward_linear's body: now each is parsed and checked once (the errors and
    # their order unchanged), on the checks-only path of callers that skip a product too
    from pyfastpim import dpe, sliced
    calls = []

    def counting(fn, name_at):
        def wrapper(*args, **kw):
            calls.append((fn.__name__, args[name_at] if len(args) > name_at else None))
            return fn(*args, **kw)
        return wrapper
    for fn, name_at in ((sliced._pair, 1), (sliced._quant_gran, 1), (sliced._widths, 1), (sliced._check_sizes, 2),
                        (sliced._bw_e, 1)):
        monkeypatch.setattr(sliced, fn.__name__, counting(fn, name_at))
    eng = pyfastpim.DPETensor(write_variation=0.0, read_variation=0.0, vnoise=0.0)
    w = np.ones((32, 8), np.float32)
    for call in (lambda: pyfastpim.dpe_matmul(np.ones((3, 32), np.float32), w, eng),
                 lambda: pyfastpim.dpe_matmul(np.ones((2, 3, 32), np.float32), w, eng),
                 lambda: pyfastpim.dpe_matmul(np.ones((0, 32), np.float32), w, eng),
                 lambda: dpe._check_matmul_args(eng)):
        calls.clear()
        call()
        for prefix in ("input", "weight"):
            assert calls.count(("_pair", prefix + "_paral_size")) == 1, calls
            assert calls.count(("_quant_gran", prefix + "_quant_gran")) == 1, calls
            assert calls.count(("_check_sizes", prefix + "_paral_size")) == 1, calls
            assert calls.count(("_widths", prefix + "_slice")) == 1, calls
        # and nothing else: the SlicedData made for the weights and for the input's slicing checked their
        # arguments again (naming SlicedData's own), and the C converter of bw_e ran once per SlicedData more
        assert calls.count(("_bw_e", None)) == 1 and len(calls) == len(set(calls)), calls
        assert all(fn == "_bw_e" or name.startswith(("input_", "weight_")) for fn, name in calls), calls
    # forward_linear, on the layers' path: its input arguments once each, the input's SlicedData no more
    ws = pyfastpim.SlicedData((1, 1, 2, 2), is_weight=True, paral_size=(32, 32), quant_gran=(32, 32))
    ws.slice_data_imp(eng, w)
    calls.clear()
    eng.forward_linear(np.ones((3, 32), np.float32), ws, (1, 1, 2, 2))
    assert sorted(calls) == [("_bw_e", None), ("_check_sizes", "input_paral_size"), ("_pair", "input_paral_size"),
                             ("_pair", "input_quant_gran"), ("_quant_gran", "input_quant_gran"),
                             ("_widths", "input_slice")], calls


@pytest.mark.parametrize("gran, resolved", [((1, 8), None), ("per-row", (1, 8)), ("per-matrix", (4, 8))])
def test_forward_conv2d_checks_the_input_granule_once(monkeypatch, gran, resolved):
    # forward_conv2d checked a pair input_quant_gran (rounded up within int64) in _slicing_args and again,
    # unchanged, when resolving the unfolded input's granule: now a pair is checked there only, a granularity
    # name's granule (known only once the output size is) when resolved, with the crossbar height, once
    from pyfastpim import sliced
    seen = []
    check = sliced._check_sizes

    def counting(paral, gran, paral_name, gran_name, crossbar_rows=None):
        seen.append((paral_name, None if gran is None or isinstance(gran, str) else tuple(gran), crossbar_rows))
        return check(paral, gran, paral_name, gran_name, crossbar_rows)
    monkeypatch.setattr(sliced, "_check_sizes", counting)
    eng = pyfastpim.DPETensor(write_variation=0.0, read_variation=0.0, vnoise=0.0)
    ws = pyfastpim.SlicedData((1, 1, 2, 2), is_weight=True, paral_size=(8, 4), quant_gran=(8, 4))
    ws.slice_data_imp(eng, np.ones((8, 4), np.float32))
    seen.clear()
    eng.forward_conv2d(np.ones((1, 2, 3, 3), np.float32), ws, 2, input_paral_size=(1, 8), input_quant_gran=gran)
    first = (1, 8) if resolved is None else None  # _slicing_args: the pair, or a name (nothing to round yet)
    assert seen == [("input_paral_size", first, None), ("input_paral_size", resolved, 1)], seen


def test_engine_checks_the_conductance_range_once(monkeypatch):
    # DPETensor checked HGS / LGS / g_level with _core.check_conductance_range and again inside
    # _core.check_vread (which checks the range before vread): now once, by check_vread, with the same messages
    from pyfastpim import _core as core
    calls = []
    for name in ("check_conductance_range", "check_vread"):  # each runs pf_validate_conductance_range once
        def counting(*args, _fn=getattr(core, name), **kw):
            calls.append(_fn.__name__)
            return _fn(*args, **kw)
        monkeypatch.setattr(core, name, counting)
    pyfastpim.DPETensor()
    assert len(calls) == 1, calls
    for over, name in ((dict(LGS=2e-5), "LGS"), (dict(HGS=1e31), "HGS"), (dict(HGS=1e-44, LGS=0.0), "HGS"),
                       (dict(HGS=1.0 + 1e-7, LGS=1.0), "LGS")):
        args = dict(dict(HGS=1e-5, LGS=1e-7), **over)
        calls.clear()
        got = outcome(lambda: pyfastpim.DPETensor(**over))
        assert len(calls) == 1, calls
        assert got[0] is ValueError and got[1].startswith("argument '%s'" % name), got
        assert got == outcome(lambda: core.check_conductance_range(args["HGS"], args["LGS"], 16))
        # with a bad vread (and an IR drop out of range) too, the range's error comes first, as before
        assert outcome(lambda: pyfastpim.DPETensor(vread=-1.0, wire_resistance=1e20, **over)) == got


def _products_equal_after_assignment(device, before, after, **kw):
    """dpe_matmul (and the conv path) of an engine built with `before` then given `after` by assignment,
    against one built with `after` (same seed); both products run twice, so the noise streams match too."""
    rng = np.random.default_rng(12)
    x, w = rng.standard_normal((5, 64)).astype(np.float32), rng.standard_normal((64, 7)).astype(np.float32)
    xc, wc = rng.standard_normal((1, 2, 5, 5)).astype(np.float32), rng.standard_normal((18, 3)).astype(np.float32)
    base = dict(kw, device=device, seed=21)
    changed = pyfastpim.DPETensor(**dict(base, **before))
    for name, value in after.items():
        setattr(changed, name, value)

    def products(eng):
        ws = pyfastpim.SlicedData((1, 1, 2, 2), is_weight=True, paral_size=(32, 32), quant_gran=(32, 32))
        ws.slice_data_imp(eng, wc)
        return [np.asarray(pyfastpim.dpe_matmul(x, w, eng)) for _ in range(2)] + \
            [np.asarray(eng.forward_conv2d(xc, ws, 3)[0]) for _ in range(2)]
    ours = products(changed)
    for a, b in zip(ours, products(pyfastpim.DPETensor(**dict(base, **after)))):
        np.testing.assert_array_equal(a, b)
    old = products(pyfastpim.DPETensor(**dict(base, **before)))
    assert not all(np.array_equal(a, b) for a, b in zip(ours, old))  # the assignment took effect
    return changed


@pytest.mark.parametrize("device", DEVICES)
def test_a_read_variation_number_stays_one_sigma_when_g_level_changes(device):
    # DPETensor(read_variation=0.05) stored {0..15: 0.05}: g_level = 8 afterwards made every product raise
    # "read_variation: a dict needs the keys 0..7", a dict the user never gave (found by a parity hunt)
    eng = _products_equal_after_assignment(device, dict(g_level=16), dict(g_level=8), read_variation=0.05)
    assert eng.read_variation == dict.fromkeys(range(8), 0.05)  # MemIntelli's per-level dict view, re-levelled
    assert "read_variation=0.05" in repr(eng)
    again = pickle.loads(pickle.dumps(eng))
    again.g_level = 4
    assert again.read_variation == dict.fromkeys(range(4), 0.05) and not again.noise_free
    eng.reset()
    eng.read_variation[7] = 0.2  # edited in place: from then on the dict the user gave
    eng.g_level = 4
    with pytest.raises(ValueError, match=r"argument 'read_variation': a dict needs the keys 0\.\.3"):
        pyfastpim.dpe_matmul(np.ones((2, 8), np.float32), np.ones((8, 2), np.float32), eng)
    given = pyfastpim.DPETensor(g_level=4, read_variation={0: 0.1, 1: 0.1, 2: 0.1, 3: 0.1}, device=device)
    given.g_level = 8  # a dict given with the old levels' keys: the clear error, as before
    with pytest.raises(ValueError, match=r"argument 'read_variation': a dict needs the keys 0\.\.7"):
        pyfastpim.dpe_matmul(np.ones((2, 8), np.float32), np.ones((8, 2), np.float32), given)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("before, after", [(256, [16, 32, 64, 128]), ([16, 32, 64, 128], 64),
                                           (256, np.array([64, 64, 128, 256])), (256, (32, 32, 32, 32))])
def test_radc_assigned_after_construction_in_any_form_is_used(device, before, after):
    # radc_is_list was fixed at construction: engine.radc = [16, 32, 64, 128] on an engine built with an int
    # radc made every product raise "argument 'radc': expected an int, got list" (found by a parity hunt)
    eng = _products_equal_after_assignment(device, dict(radc=before), dict(radc=after), g_level=4,
                                           read_variation=0.05, rdac=4)
    assert eng.radc_is_list is not isinstance(after, int)
    for bad, exc, msg in (([1, 64, 64, 64], ValueError, "converter resolutions must be in 2..2"),
                          ("x", TypeError, "expected an int or a sequence"), ([64, 64], ValueError, "Length of radc")):
        eng.radc = bad
        with pytest.raises(exc, match=msg):
            pyfastpim.dpe_matmul(np.ones((2, 8), np.float32), np.ones((8, 2), np.float32), eng)
        if exc is not ValueError or "Length" not in msg:  # the constructor's message for the same value
            with pytest.raises(exc, match=msg):
                pyfastpim.DPETensor(radc=bad)


def test_product_checks_the_conductance_range_once_and_again_only_after_a_change(monkeypatch):
    # each product validated HGS / LGS / g_level several times: in every programming check (three per product),
    # in sliced._check_engine (_core.check_conductance_range) and again at the start of _core.check_vread; now
    # once per product, by check_vread, as in the constructor (the same messages: the range's error comes first),
    # and not at all while the settings (plain numbers) are those that passed
    from pyfastpim import _core as core
    eng = pyfastpim.DPETensor(seed=3)
    x, w = np.ones((2, 8), np.float32), np.ones((8, 4), np.float32)
    ranges = []
    real_range, real_vread = core.check_conductance_range, core.check_vread
    monkeypatch.setattr(core, "check_conductance_range", lambda *a, **k: (ranges.append(1), real_range(*a, **k))[1])
    monkeypatch.setattr(core, "check_vread", lambda *a, **k: (ranges.append(1), real_vread(*a, **k))[1])

    def product():
        before = len(ranges)
        pyfastpim.dpe_matmul(x, w, eng, input_paral_size=(1, 8), weight_paral_size=(8, 4),
                             input_quant_gran=(1, 8), weight_quant_gran=(8, 4))
        return len(ranges) - before
    assert product() == 1
    assert product() == 0
    eng.HGS = 2e-5  # a new value: checked once more
    assert product() == 1
    eng.g_level = np.array(16)  # an array (its value can change in place): checked at every programming check
    assert product() >= 1 and product() >= 1
    eng.HGS, eng.vread = float("nan"), -1.0  # both bad: the range's error, as the constructor gives it
    got = outcome(lambda: pyfastpim.dpe_matmul(x, w, eng, input_paral_size=(1, 8), weight_paral_size=(8, 4),
                                               input_quant_gran=(1, 8), weight_quant_gran=(8, 4)))
    assert got == outcome(lambda: pyfastpim.DPETensor(HGS=float("nan"), vread=-1.0))
    assert got[0] is ValueError and got[1].startswith("argument 'HGS'"), got
    eng.HGS = 1e-5  # vread alone: its own error, as the constructor's
    got = outcome(lambda: pyfastpim.dpe_matmul(x, w, eng, input_paral_size=(1, 8), weight_paral_size=(8, 4),
                                               input_quant_gran=(1, 8), weight_quant_gran=(8, 4)))
    assert got == outcome(lambda: pyfastpim.DPETensor(vread=-1.0)) and got[1].startswith("argument 'vread'"), got


@pytest.mark.parametrize("name, valid, edit", [
    ("radc", [16, 32, 64, 128], lambda v: v.__setitem__(0, 1)),  # a list edited in place: radc 1 is refused
    ("g_level", np.array(16), lambda v: v.fill(1)),  # a 0-d array edited in place: g_level 1 is refused
    ("HGS", np.array(1e-5), lambda v: v.fill(np.nan)),
])
def test_settings_edited_in_place_after_a_product_are_checked_again(name, valid, edit):
    # the checked settings are reused while the values are the plain numbers that passed: an object whose value
    # can change in place must not be mistaken for the one that passed
    x, w = np.ones((2, 8), np.float32), np.ones((8, 4), np.float32)
    kw = dict(input_paral_size=(1, 8), weight_paral_size=(8, 4), input_quant_gran=(1, 8), weight_quant_gran=(8, 4))
    eng = pyfastpim.DPETensor(seed=3)
    setattr(eng, name, valid)
    pyfastpim.dpe_matmul(x, w, eng, **kw)
    edit(valid)
    got = outcome(lambda: pyfastpim.dpe_matmul(x, w, eng, **kw))
    assert got[0] is ValueError and got[1].startswith("argument '%s'" % name), got
