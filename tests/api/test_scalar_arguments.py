"""Scalar arguments (issue 10's contract, continued): every float and int parameter of every _core entry
point goes through the converters of csrc/python/convert.c, the public API's own, so a bool, a str, None, a
container or NaN is refused with the public API's words naming the argument; an integer that does not fit
is refused, never wrapped (a count, a noise stream, slice codes converted to uint8); an exception raised by
an argument's own __float__ / __index__ propagates; a sweep over the public constructors and functions.
"""
import numpy as np
import pytest

import pyfastpim
try:
    import pyfastpim.nn as pnn  # needs torch, an optional dependency: the layer cases skip without it
except ImportError:
    pnn = None
import pyfastpim.physics as physics
from pyfastpim import _core
from helpers import Raises, conv_kwargs, mvm_kwargs, outcome, program_kwargs, type_name

HGS, LGS = 1e-5, 1e-7


class RaisingNumber:
    """A number whose conversions raise: the error must reach the caller as it is."""

    def __float__(self):
        raise ZeroDivisionError("from __float__")

    def __index__(self):
        raise ZeroDivisionError("from __index__")


class FloatSub(float):
    pass


def _pack(**over):
    args = {k: v for k, v in mvm_kwargs().items() if k in ("w_levels", "w_conductance", "w_scale", "w_granule",
                                                         "w_widths", "n", "rdac", "g_level", "radc", "HGS", "LGS",
                                                         "read_sigma")}
    return _core.dpe_pack(**dict(args, **over))


def _call(fn, base):
    return lambda **over: fn(**dict(base, **over))


G3 = np.full((1, 4, 4), 1e-5, np.float32)
ENTRY = {
    "dpe_mvm": lambda **o: _core.dpe_mvm(**mvm_kwargs(**o)),
    "dpe_conv2d": lambda **o: _core.dpe_conv2d(**conv_kwargs(**o)),
    "dpe_pack": _pack,
    "program_conductance": lambda **o: _core.program_conductance(**program_kwargs(**o)),
    "check_conductance_range": _call(_core.check_conductance_range, dict(HGS=HGS, LGS=LGS, g_level=16)),
    "check_vread": _call(_core.check_vread, dict(vread=0.2, HGS=HGS, LGS=LGS, g_level=16, rdac=16)),
    "drift": _call(_core.drift, dict(g=np.ones(3, np.float32), seed=1, t=2.0, t0=1.0, nu_mean=0.05, nu_std=0.0)),
    "irdrop_layer": _call(_core.irdrop_layer, dict(g=G3, r_wire=1.0, block_rows=2, block_cols=2, pad_g=1e-7)),
    "irdrop_block": _call(_core.irdrop_block, dict(g=np.full((3, 3), 1e-5), r_wire=1.0)),
    "normals": lambda **o: _core.normals(*dict(dict(seed=1, stream=0, call=0, idx0=0, count=4), **o).values()),
}
def _own_type_error_propagates(call):
    """call(v) with a v whose own __index__ / __float__ raises a TypeError: that very exception reaches the
    caller (it was reworded "argument 'X': expected an int / a real number, got Raises")."""
    err = TypeError("mine")
    with pytest.raises(TypeError) as info:
        call(Raises(err))
    assert info.value is err, repr(info.value)


RAW_FLOATS = [("dpe_mvm", p) for p in ("HGS", "LGS", "vnoise")] + \
             [("dpe_conv2d", p) for p in ("HGS", "LGS", "vnoise")] + [("dpe_pack", p) for p in ("HGS", "LGS")] + \
             [("program_conductance", p) for p in ("HGS", "LGS", "write_variation", "rate_stuck_HGS",
                                                   "rate_stuck_LGS")] + \
             [("check_conductance_range", p) for p in ("HGS", "LGS")] + \
             [("check_vread", p) for p in ("vread", "HGS", "LGS")] + \
             [("drift", p) for p in ("t", "t0", "nu_mean", "nu_std")] + \
             [("irdrop_layer", p) for p in ("r_wire", "pad_g")] + [("irdrop_block", "r_wire")]
NOT_REAL = [True, False, np.bool_(True), np.array(True), np.complex128(0.1 + 1j), np.complex64(0.1), "0.1", None,
            np.array([0.1]), [0.1]]


@pytest.mark.parametrize("value", NOT_REAL, ids=repr)
@pytest.mark.parametrize("entry,name", RAW_FLOATS, ids=["%s-%s" % c for c in RAW_FLOATS])
def test_raw_float_parameters_refuse_non_numbers_in_the_public_words(entry, name, value):
    # dpe_mvm / dpe_conv2d / program_conductance parsed these with PyArg "d": vnoise=True or
    # write_variation=True ran as sigma 1.0, a 1-element array was unwrapped, and a str got
    # "must be real number, not str" where the public API says "expected a real number, got str"
    exc, msg = outcome(lambda: ENTRY[entry](**{name: value}))
    assert (exc, msg) == (TypeError, "argument '%s': expected a real number, got %s" % (name, type_name(value)))
    if name in ("HGS", "LGS", "vnoise", "write_variation", "vread", "rate_stuck_HGS", "rate_stuck_LGS"):
        assert outcome(lambda: pyfastpim.DPETensor(**{name: value})) == (exc, msg)


@pytest.mark.parametrize("entry,name", RAW_FLOATS, ids=["%s-%s" % c for c in RAW_FLOATS])
def test_raw_float_parameters_nan_and_raising_conversions(entry, name):
    exc, msg = outcome(lambda: ENTRY[entry](**{name: float("nan")}))
    assert exc is ValueError and name in msg, msg
    with pytest.raises(ZeroDivisionError, match="from __float__"):
        ENTRY[entry](**{name: RaisingNumber()})
    _own_type_error_propagates(lambda v: ENTRY[entry](**{name: v}))
    # a float subclass, a NumPy scalar and a 0-d array are numbers: the same outcome as the float
    ref = outcome(lambda: ENTRY[entry](**{name: 0.5}))
    for v in (FloatSub(0.5), np.float32(0.5), np.float64(0.5), np.array(0.5)):
        assert outcome(lambda: ENTRY[entry](**{name: v})) == ref, v


RAW_INTS = [("dpe_mvm", "n"), ("dpe_mvm", "item0"), ("dpe_conv2d", "n"), ("dpe_pack", "n"),
            ("irdrop_layer", "block_rows"), ("irdrop_layer", "block_cols"), ("check_vread", "g_level"),
            ("check_vread", "rdac"), ("normals", "stream"), ("normals", "call"), ("normals", "idx0"),
            ("normals", "count")]
NOT_INT = [(True, TypeError), (np.bool_(True), TypeError), (3.7, TypeError), (FloatSub(2.0), TypeError),
           ("3", TypeError), (None, TypeError), (2 ** 64, ValueError), (-2 ** 63 - 1, ValueError)]


@pytest.mark.parametrize("value,exc", NOT_INT, ids=[repr(v) for v, _ in NOT_INT])
@pytest.mark.parametrize("entry,name", RAW_INTS, ids=["%s-%s" % c for c in RAW_INTS])
def test_raw_int_parameters_refuse_bools_floats_and_out_of_range(entry, name, value, exc):
    # n and item0 ("L") took True as 1 and answered 2**64 with an OverflowError; normals' stream and call
    # ("I") and idx0 ("K") wrapped silently (stream 2**32 was stream 0, idx0 -1 was 2**64 - 1)
    got = outcome(lambda: ENTRY[entry](**{name: value}))
    assert got[0] is exc and got[1].startswith("argument '%s'" % name), got
    with pytest.raises(ZeroDivisionError, match="from __index__"):
        ENTRY[entry](**{name: RaisingNumber()})
    _own_type_error_propagates(lambda v: ENTRY[entry](**{name: v}))


def test_normals_stream_call_and_index_do_not_wrap():
    ref = np.asarray(_core.normals(1, 0, 0, 0, 4))
    for args, name in (((1, 2 ** 32, 0, 0, 4), "stream"), ((1, 0, 2 ** 32, 0, 4), "call"),
                       ((1, 0, 0, -1, 4), "idx0")):
        with pytest.raises(ValueError, match="argument '%s'" % name):
            _core.normals(*args)
    np.testing.assert_array_equal(np.asarray(_core.normals(1, np.int64(0), np.uint32(0), np.uint64(0), 4)), ref)
    top = np.asarray(_core.normals(1, 2 ** 32 - 1, 2 ** 32 - 1, 2 ** 64 - 4, 4))
    assert np.isfinite(top).all()


@pytest.mark.parametrize("name", ["HGS", "LGS", "vnoise", "write_variation", "read_variation", "vread",
                                  "wire_resistance", "rate_stuck_HGS", "rate_stuck_LGS", "g_level", "rdac"])
def test_engine_lets_a_raising_conversion_propagate(name):
    # check_sigma turned any failure of __float__ into "expected a real number" and DPETensor's own check
    # refused such objects before calling them: the object's own error is the caller's to see
    with pytest.raises(ZeroDivisionError):
        pyfastpim.DPETensor(**{name: RaisingNumber()})
    _own_type_error_propagates(lambda v: pyfastpim.DPETensor(**{name: v}))


@pytest.mark.parametrize("name", ["vnoise", "read_variation", "HGS"])
def test_engine_takes_a_0d_array_as_its_number(name):
    # read_variation refused a 0-d array that vnoise took, HGS refused it too
    a = pyfastpim.DPETensor(**{name: np.array(0.05 if name != "HGS" else 2e-5)})
    b = pyfastpim.DPETensor(**{name: 0.05 if name != "HGS" else 2e-5})
    assert (a.read_variation, a.vnoise, a.HGS) == (b.read_variation, b.vnoise, b.HGS)


@pytest.mark.parametrize("module", ["pyfastpim", "memintelli"])
@pytest.mark.parametrize("make", [np.array, np.int64, "tensor"])
def test_engine_takes_a_0d_radc_as_one_int(module, make):
    # radc=np.array(256) / torch.tensor(256) was taken for a per-slice list and refused ("expected an int or a
    # 1-D list of ints, got 256"), though a 0-d g_level or rdac is an int and MemIntelli takes radc=torch.tensor(256)
    if make == "tensor":
        make = pytest.importorskip("torch").tensor
    if module == "memintelli":
        from pyfastpim.memintelli.pimpy import DPETensor
    else:
        DPETensor = pyfastpim.DPETensor
    kw = dict(g_level=16, rdac=16, seed=1, read_variation=0.0, write_variation=0.0, vnoise=0.0, rate_stuck_HGS=0.0)
    a, b = DPETensor(radc=make(64), **kw), DPETensor(radc=64, **kw)
    assert a.radc == 64 and type(a.radc) is int and a.radc_is_list is False
    x = np.random.default_rng(0).standard_normal((3, 40)).astype(np.float32)
    w = np.random.default_rng(1).standard_normal((40, 5)).astype(np.float32)
    out = [np.asarray(pyfastpim.dpe_matmul(x, w, e, (1, 1, 2, 4), (1, 1, 2, 4))) for e in (a, b)]
    assert np.array_equal(out[0], out[1])
    with pytest.raises(TypeError, match="radc"):
        DPETensor(radc=make(64.5) if make is not np.int64 else np.float64(64.5), **kw)


# ---------------------------------------------------------------- integer conversions are exact

@pytest.mark.parametrize("src,dst,bad", [(np.int64, "uint8", 256), (np.int64, "uint8", -1), (np.int16, "int8", 128),
                                         (np.int32, "uint16", 70000), (np.int64, "int32", 2 ** 31),
                                         (np.uint16, "int8", 200), (np.int8, "uint8", -5)])
def test_asarray_refuses_integers_the_dtype_cannot_hold(src, dst, bad):
    # asarray(int64 data, dtype='uint8') wrapped 256 to 0 and -1 to 255
    data = np.array([1, bad, 2], src)
    with pytest.raises(ValueError, match=r"^argument 'obj': value %d \(element 1\) does not fit %s" % (bad, dst)):
        pyfastpim.asarray(data, dtype=dst)
    ok = np.array([0, 1, 2], src)
    np.testing.assert_array_equal(np.asarray(pyfastpim.asarray(ok, dtype=dst)), ok.astype(dst))


def test_codes_and_levels_from_wide_integers_are_not_wrapped():
    # int64 codes of 256 read as code 0 (and 257 as 1): a wrong product or programming, no error
    codes = np.zeros((3, 2, 2), np.int64)
    codes[2, 1, 1] = 256
    with pytest.raises(ValueError, match="argument 'codes'"):
        _core.program_levels(codes, (1, 1, 2), 16)
    levels = np.zeros((2, 3, 3), np.int64)
    levels[0, 0, 0] = 256 + 3
    with pytest.raises(ValueError, match="argument 'levels'"):
        _core.program_conductance(**program_kwargs(levels=levels))
    x = mvm_kwargs()["x_codes"].astype(np.int64)
    x[0, 0, 0, 0] = 256
    with pytest.raises(ValueError, match="argument 'x_codes'"):
        _core.dpe_mvm(**mvm_kwargs(x_codes=x))
    w = mvm_kwargs()["w_levels"].astype(np.int64)
    w[1, 2, 3] = -255
    with pytest.raises(ValueError, match="argument 'w_levels'"):
        _core.dpe_mvm(**mvm_kwargs(w_levels=w))
    # values that fit convert exactly
    ref = np.asarray(_core.dpe_mvm(**mvm_kwargs()))
    np.testing.assert_array_equal(np.asarray(_core.dpe_mvm(**mvm_kwargs(x_codes=mvm_kwargs()["x_codes"].astype(np.int64)))),
                                  ref)


# ---------------------------------------------------------------- the public API, swept

ENGINE = pyfastpim.DPETensor()
CODES = np.zeros((3, 2, 2), np.uint8)
XS = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
GM = np.full((4, 4), 1e-5)
S2 = (1, 1, 2)
PUBLIC = {
    "DPETensor": (pyfastpim.DPETensor, {}, dict(
        real=["HGS", "LGS", "write_variation", "vnoise", "wire_resistance", "vread", "rate_stuck_HGS",
              "rate_stuck_LGS"], int=["g_level", "rdac", "radc", "seed"])),
    "program_weights": (pyfastpim.program_weights, dict(codes=CODES, slice_method=S2, g_level=16), dict(
        real=["HGS", "LGS", "write_variation", "rate_stuck_HGS", "rate_stuck_LGS"], int=["g_level", "seed"])),
    "AttentionContext": (pyfastpim.AttentionContext, {}, dict(real=["update_rate", "strength"], int=["embed_dim"])),
    "drift_conductance": (physics.drift_conductance, dict(G=GM, t_seconds=10.0),
                          dict(real=["t_seconds", "t0", "nu_mean", "nu_std"], int=["seed"])),
    "effective_conductance": (physics.effective_conductance, dict(G=GM), dict(real=["wire_resistance"])),
    "column_currents": (physics.column_currents, dict(G=GM, V=np.ones(4)), dict(real=["wire_resistance"])),
    "slice_quantize": (pyfastpim.slice_quantize, dict(data=XS, slice_method=S2, paral_size=(2, 2)),
                       dict(int=["g_level", "bw_e"])),
    "SlicedData": (pyfastpim.SlicedData, dict(slice_method=S2), dict(int=["bw_e"])),
    "set_noise_stream": (lambda stream: (pyfastpim.set_noise_stream(stream), pyfastpim.set_noise_stream(None)), {},
                         dict(int=["stream"])),
    "set_num_threads": (lambda n: (pyfastpim.set_num_threads(n), pyfastpim.set_num_threads(2)), {},
                        dict(int=["n"])),
    "CallCounter": (_core.CallCounter, {}, dict(int=["value"])),
}
if pnn is not None:
    PUBLIC["LinearMem"] = (pnn.LinearMem, dict(engine=ENGINE, in_features=8, out_features=4, input_slice=S2,
                                               weight_slice=S2), dict(int=["in_features", "out_features", "bw_e"]))
    PUBLIC["Conv2dMem"] = (pnn.Conv2dMem, dict(engine=ENGINE, in_channels=2, out_channels=4, kernel_size=3,
                                               input_slice=S2, weight_slice=S2),
                           dict(int=["in_channels", "out_channels", "kernel_size", "stride", "padding", "dilation"]))
SWEEP = [(label, kind, name) for label, (_, _, kinds) in PUBLIC.items() for kind, names in kinds.items()
         for name in names]
SCALARS = [np.bool_(False), True, np.float32(0.5), np.float64(2.0), np.int64(2), np.array(0.5), np.array([0.5]),
           -0.0, float("nan"), float("inf"), -float("inf"), 2 ** 63, 2 ** 64, -2 ** 63 - 1, "x", None,
           RaisingNumber(), FloatSub(0.25), 3.7]
NONE_MEANS_DEFAULT = {"seed", "embed_dim", "bw_e", "stream", "g_level"}


@pytest.mark.parametrize("label,kind,name", SWEEP, ids=["%s-%s" % (c[0], c[2]) for c in SWEEP])
def test_public_scalar_sweep(label, kind, name):
    """Every scalar is accepted (consistently with its value) or refused with a TypeError / ValueError naming
    the argument, or the number's own error; never a crash, SystemError, OverflowError or an int that took a
    float (3.7 as 3) or a bool (True as 1)."""
    fn, base, _ = PUBLIC[label]
    for value in SCALARS:
        got = outcome(lambda: fn(**dict(base, **{name: value})))
        if got[0] == "ok":
            is_bool = isinstance(value, (bool, np.bool_))
            assert not is_bool, (value, got)
            assert value is not None or name in NONE_MEANS_DEFAULT, (value, got)
            if kind == "int":
                assert value is None or isinstance(value, (int, np.integer)), (value, got)
            assert not isinstance(value, (str, RaisingNumber)) and not (isinstance(value, np.ndarray) and value.ndim)
            continue
        if isinstance(value, RaisingNumber) and got[0] is ZeroDivisionError:
            continue  # the number's own error
        assert got[0] in (TypeError, ValueError), (value, got)
        assert {"value": "calls"}.get(name, name) in got[1], (value, got)  # CallCounter's value: the calls


@pytest.mark.parametrize("label,kind,name", SWEEP, ids=["%s-%s" % (c[0], c[2]) for c in SWEEP])
def test_public_scalars_own_type_error_propagates(label, kind, name):
    fn, base, _ = PUBLIC[label]
    _own_type_error_propagates(lambda v: fn(**dict(base, **{name: v})))


def test_zero_d_bools_and_complex_numbers_are_not_real_numbers():
    # the type rule refused bool scalars but unwrapped a 0-d bool array or tensor as 1.0 / 1, and took NumPy's
    # complex numbers (their __float__ drops the imaginary part with a ComplexWarning only); a complex tensor
    # gave torch's RuntimeError, naming nothing
    torch = pytest.importorskip("torch")
    for v in (np.array(True), np.complex128(1 + 1j), np.complex64(0.5), torch.tensor(True), torch.tensor(1 + 1j)):
        for integer in (False, True):
            exc, msg = outcome(lambda: _core.check_number(v, "x", integer))
            assert exc is TypeError and msg.startswith("argument 'x': expected "), (v, integer, msg)
    assert outcome(lambda: pyfastpim.DPETensor(vnoise=np.complex128(0.01 + 1j)))[0] is TypeError
    # as a flag, a 0-d bool array or tensor is the bool it holds (a 1-element array stays a container)
    assert _core.check_flag(np.array(True), "f") is True and _core.check_flag(torch.tensor(False), "f") is False
    assert outcome(lambda: _core.check_flag(np.array([True]), "f"))[0] is TypeError


@pytest.mark.parametrize("value,got", [("a", "str"), ([1], "list"), ((0.1,), "tuple"), (None, "NoneType"),
                                       (True, "bool"), (np.array([0.1]), "numpy.ndarray"), ({0.1}, "set")],
                         ids=repr)
def test_read_variation_of_a_wrong_type_is_a_type_error(value, got):
    # read_variation='a' (or [1], None) raised ValueError where every other scalar argument of a wrong type
    # raises the type rule's TypeError: now the rule's TypeError and words, naming the dict form it also takes
    msg = "argument 'read_variation': expected a real number (one sigma for every level; 0 for no read noise) " \
          "or a dict {level: sigma} for levels 0..15, got " + got
    assert outcome(lambda: pyfastpim.DPETensor(read_variation=value)) == (TypeError, msg)
    engine = pyfastpim.DPETensor()
    assert outcome(lambda: setattr(engine, "read_variation", value)) == (TypeError, msg)
    # wrong values stay ValueError: a negative or too large sigma, a dict without every level
    for bad in (-0.1, 6.0, float("nan"), {0: 0.1}, {i: 0.1 for i in range(17)}):
        assert outcome(lambda: pyfastpim.DPETensor(read_variation=bad))[0] is ValueError, bad
    assert outcome(lambda: pyfastpim.DPETensor(g_level=2, read_variation={0: 0.1, 1: -1.0})) == \
        (ValueError, outcome(lambda: _core.check_sigma(-1.0, "read_variation[1]", True))[1])


# ---------------------------------------------------------------- HGS / LGS: one rule, naming the argument at fault

NAN, INF = float("nan"), float("inf")
BAD_RANGE = [  # (HGS, LGS, the argument at fault, exception)
    (-1e-5, LGS, "HGS", ValueError), (0.0, LGS, "HGS", ValueError), (NAN, LGS, "HGS", ValueError),
    (INF, LGS, "HGS", ValueError), (-INF, LGS, "HGS", ValueError),
    (HGS, -1e-7, "LGS", ValueError), (HGS, NAN, "LGS", ValueError), (HGS, INF, "LGS", ValueError),
    (HGS, -INF, "LGS", ValueError),
    (1e-8, LGS, "LGS", ValueError), (LGS, LGS, "LGS", ValueError),  # HGS <= LGS: "LGS must be below HGS"
    ("1e-5", LGS, "HGS", TypeError), (True, LGS, "HGS", TypeError), (None, LGS, "HGS", TypeError),
    (HGS, "0", "LGS", TypeError), (HGS, False, "LGS", TypeError), (HGS, [LGS], "LGS", TypeError),
]


def _conductance_entries():
    """Every public entry taking HGS and LGS, each a function of (HGS, LGS): the engines (pyfastpim's and the
    MemIntelli mirror's), program_weights, and weights programmed (SlicedData, the layers) with an engine
    holding those values."""
    def engine_with(h, lo):
        engine = pyfastpim.DPETensor()
        engine.HGS, engine.LGS = h, lo
        return engine
    entries = {
        "DPETensor": lambda h, lo: pyfastpim.DPETensor(HGS=h, LGS=lo),
        "program_weights": lambda h, lo: pyfastpim.program_weights(CODES, S2, 16, h, lo),
        "SlicedData.slice_data_imp": lambda h, lo: pyfastpim.SlicedData(S2, is_weight=True, paral_size=(4, 4))
        .slice_data_imp(engine_with(h, lo), XS[:4, :4]),
    }
    if pnn is not None:
        from pyfastpim.memintelli.NN_layers import Conv2dMem as MiConv2d, LinearMem as MiLinear
        from pyfastpim.memintelli.pimpy import DPETensor as MiDPETensor
        entries.update({
            "memintelli DPETensor": lambda h, lo: MiDPETensor(HGS=h, LGS=lo, device="cpu"),
            "LinearMem": lambda h, lo: pnn.LinearMem(engine_with(h, lo), 8, 4, S2, S2),
            "Conv2dMem": lambda h, lo: pnn.Conv2dMem(engine_with(h, lo), 2, 4, 3, S2, S2),
            "memintelli LinearMem": lambda h, lo: MiLinear(engine_with(h, lo), 8, 4, S2, S2),
            "memintelli Conv2dMem": lambda h, lo: MiConv2d(engine_with(h, lo), 2, 4, 3, S2, S2),
        })
    return entries


@pytest.mark.parametrize("hgs,lgs,name,exc", BAD_RANGE, ids=repr)
def test_conductance_range_names_the_argument_at_fault_on_every_entry(hgs, lgs, name, exc):
    # a negative HGS was named LGS by the core ("argument 'LGS': must be >= 0 and below HGS"), so DPETensor
    # checked HGS and LGS in Python first, with other words; weights programmed with an engine holding a str
    # HGS read it through float() (naming nothing, or taking "1e-5" and True). Now the core's one rule for all
    got = {label: outcome(fn, hgs, lgs) for label, fn in _conductance_entries().items()}
    core = outcome(_core.check_conductance_range, hgs, lgs, 16)
    assert core[0] is exc and core[1].startswith("argument '%s': " % name), core
    for label, result in got.items():
        assert result == core, (label, result, core)
    if name == "LGS" and exc is ValueError and lgs == LGS:  # HGS <= LGS: the words say how the two relate
        assert "below HGS" in core[1]


@pytest.mark.parametrize("name", ["write_variation", "rate_stuck_HGS", "rate_stuck_LGS"])
@pytest.mark.parametrize("bad", ["0.02", True, None, [0.0]], ids=repr)
def test_an_engines_programming_numbers_follow_the_type_rule_on_every_entry(name, bad):
    # weights programmed with an engine read write_variation and the stuck rates through float(), which
    # took "0.02" and True (and named nothing for None); now the scalar rule, a TypeError naming the number,
    # as the engine's constructor gives for the same value
    def engine_with(value):
        engine = pyfastpim.DPETensor()
        setattr(engine, name, value)
        return engine
    entries = {"SlicedData.slice_data_imp": lambda v: pyfastpim.SlicedData(S2, is_weight=True, paral_size=(4, 4))
               .slice_data_imp(engine_with(v), XS[:4, :4])}
    if pnn is not None:
        entries["LinearMem"] = lambda v: pnn.LinearMem(engine_with(v), 8, 4, S2, S2)
    want = outcome(lambda: pyfastpim.DPETensor(**{name: bad}))
    assert want[0] is TypeError and want[1].startswith("argument '%s': " % name), want
    for label, fn in entries.items():
        assert outcome(fn, bad) == want, label


# ---------------------------------------------------------------- read_variation's dict keys are ints

@pytest.mark.parametrize("keys,got", [((True, 0), "bool key True"), ((False, True), "bool key False"),
                                      ((0.0, 1.0), "float key 0.0"), ((0, 1.0), "float key 1.0"),
                                      ((0, "1"), "str key '1'"), ((0, np.float64(1)), "numpy.float64 key")],
                         ids=repr)
def test_read_variation_keys_must_be_ints(keys, got):
    # {True: 0.1, 0: 0.1} and {0.0: 0.1, 1.0: 0.1} were taken as levels 1 and 0 (a set of keys equal to
    # {0, 1}), where every other int argument refuses a bool or a float; now the type rule for ints
    # (operator.index, not a bool) on each key, a TypeError naming read_variation
    rv = dict.fromkeys(keys, 0.1)
    engine = pyfastpim.DPETensor(g_level=2)
    entries = {"DPETensor": lambda: pyfastpim.DPETensor(g_level=2, read_variation=rv),
               "setter": lambda: setattr(engine, "read_variation", rv)}
    if pnn is not None:  # the MemIntelli mirror needs torch, an optional dependency
        from pyfastpim.memintelli.pimpy import DPETensor as MiDPETensor
        entries["memintelli DPETensor"] = lambda: MiDPETensor(g_level=2, read_variation=rv, device="cpu")
    for label, call in entries.items():
        exc, msg = outcome(call)
        assert exc is TypeError, (label, exc, msg)
        assert msg.startswith("argument 'read_variation': a dict's keys must be ints (the levels 0..1), got the "
                              + got), (label, msg)
    # a key added in place is checked at the next product, by the same rule
    engine = pyfastpim.DPETensor(g_level=16, read_variation=0.1)
    engine.read_variation[2.5] = 0.1
    exc, msg = outcome(pyfastpim.dpe_matmul, XS, np.ones((8, 3), np.float32), engine, S2, S2, (1, 8), (8, 8),
                       (1, 8), (8, 8))
    assert exc is TypeError and msg.startswith("argument 'read_variation': a dict's keys must be ints"), msg


def test_read_variation_takes_integer_keys_and_lets_key_errors_propagate():
    ints = {np.int64(0): 0.1, np.uint8(1): 0.2}
    engine = pyfastpim.DPETensor(g_level=2, read_variation=ints)
    assert engine.read_variation == {0: 0.1, 1: 0.2} and all(type(k) is int for k in engine.read_variation)
    with pytest.raises(ArithmeticError, match="^mine$"):  # the key's own __index__ error, unchanged
        pyfastpim.DPETensor(g_level=2, read_variation={0: 0.1, Raises(ArithmeticError("mine")): 0.1})
    # a TypeError too (it was "a dict's keys must be ints ..., got the Raises key"), and a sigma's own
    _own_type_error_propagates(lambda v: pyfastpim.DPETensor(g_level=2, read_variation={0: 0.1, v: 0.1}))
    _own_type_error_propagates(lambda v: pyfastpim.DPETensor(g_level=2, read_variation={0: 0.1, 1: v}))
    # wrong levels stay ValueError (a missing or extra level)
    for bad in ({0: 0.1}, {0: 0.1, 1: 0.1, 2: 0.1}, {0: 0.1, -1: 0.1}):
        assert outcome(lambda: pyfastpim.DPETensor(g_level=2, read_variation=bad))[0] is ValueError, bad


# ---------------------------------------------------------------- vread: one rule, the core's

BAD_VREAD = [NAN, INF, -INF, -0.2, 0.0, -0.0, 1e40, 10 ** 400, np.float32("nan"), np.array(INF), "0.2", True, None,
             [0.2], np.array([0.2])]
VREAD_COMPANIONS = [dict(), dict(HGS=-1e-5), dict(HGS=NAN), dict(LGS=2e-5), dict(g_level=1)]


def _vread_entries():
    """Every public entry taking vread, each a function of (vread, **other engine arguments): the engines
    (pyfastpim's and the MemIntelli mirror's; no physics function or layer takes one)."""
    entries = {"DPETensor": lambda v, **kw: pyfastpim.DPETensor(vread=v, **kw)}
    if pnn is not None:  # the MemIntelli mirror needs torch, an optional dependency
        from pyfastpim.memintelli.pimpy import DPETensor as MiDPETensor
        entries["memintelli DPETensor"] = lambda v, **kw: MiDPETensor(vread=v, device="cpu", **kw)
    return entries


@pytest.mark.parametrize("others", VREAD_COMPANIONS, ids=repr)
@pytest.mark.parametrize("vread", BAD_VREAD, ids=repr)
def test_vread_is_validated_once_by_the_core_on_every_entry(vread, others):
    # DPETensor checked vread's finiteness in Python before the core's check_vread checked it again, so a
    # NaN or infinite vread was named before a bad HGS, LGS or g_level that the core names first for any
    # other bad vread (a negative one): the engine's answer depended on which check saw it. Now the core's
    # rule alone, the same answer as _core.check_vread's on every entry
    core = outcome(_core.check_vread, vread, others.get("HGS", HGS), others.get("LGS", LGS),
                   others.get("g_level", 16), 16)
    assert core[0] in (TypeError, ValueError), core
    if not others:
        assert core[1].startswith("argument 'vread': "), core
    for label, fn in _vread_entries().items():
        assert outcome(fn, vread, **others) == core, label


# ---------------------------------------------------------------- a range too long for len()

HUGE = range(2 ** 100)  # len() raises CPython's OverflowError, naming no argument


@pytest.mark.parametrize("label,kind,name", SWEEP, ids=["%s-%s" % (c[0], c[2]) for c in SWEEP])
def test_a_range_too_long_to_count_is_refused_naming_the_argument(label, kind, name):
    # range(2**100) as a real number gave "OverflowError: Python int too large to convert to C ssize_t" from
    # is_sized's len(), naming nothing; now the rule's TypeError (a container is no number)
    fn, base, _ = PUBLIC[label]
    exc, msg = outcome(lambda: fn(**dict(base, **{name: HUGE})))
    assert exc in (TypeError, ValueError) and {"value": "calls"}.get(name, name) in msg, (exc, msg)


def _huge_sequence_entries():
    entries = {
        "radc": lambda r: pyfastpim.DPETensor(radc=r),
        "slice_method": lambda r: pyfastpim.SlicedData(r),
        "paral_size": lambda r: pyfastpim.slice_quantize(XS, S2, paral_size=r),
        "quant_gran": lambda r: pyfastpim.SlicedData(S2, quant_gran=r),
        "input_slice": lambda r: pyfastpim.dpe_matmul(XS, XS.T.copy(), ENGINE, r, S2),
        "weight_paral_size": lambda r: pyfastpim.dpe_matmul(XS, XS.T.copy(), ENGINE, S2, S2, (1, 8), r),
        "stride": lambda r: _core.dpe_conv2d(**conv_kwargs(stride=r)),
        "x_widths": lambda r: _core.dpe_mvm(**mvm_kwargs(x_widths=r)),
    }
    if pnn is not None:
        entries["kernel_size"] = lambda r: pnn.Conv2dMem(ENGINE, 2, 4, r, S2, S2)
    return entries


@pytest.mark.parametrize("name", sorted(_huge_sequence_entries()))
def test_a_range_too_long_to_count_as_a_sequence_argument(name):
    # len() / tuple() of the range raised the bare OverflowError (radc, the pairs, the core's converters), and
    # the Python slice rule read range(2**100) item by item until memory ran out; now a ValueError naming it
    for r in (HUGE, range(1, 2 ** 100)):
        exc, msg = outcome(lambda: _huge_sequence_entries()[name](r))
        assert exc is ValueError and msg.startswith("argument '%s': " % name), (r, exc, msg)


def test_a_long_slice_method_is_read_no_further_than_the_bit_limit():
    with pytest.raises(ValueError, match="^argument 'slice_method': total bits must be 2 to 16, got more than 16"):
        pyfastpim.SlicedData([1] * 10 ** 6)


# ---------------------------------------------------------------- a 2-D array where a 1-D list is expected

@pytest.mark.parametrize("arg,value,what", [
    ("stride", np.array([[1, 1]]), "a pair of ints"), ("stride", np.array([[1], [1]]), "a pair of ints"),
    ("x_widths", np.array([[1, 1, 2]]), "a sequence of slice widths"),
    ("radc", np.array([[16, 16]]), "an int or a sequence of at most 16 ints (one per weight slice)"),
])
def test_the_core_converter_refuses_a_2d_array_by_its_shape(arg, value, what):
    # the core's sequence converter read a 2-D array's rows as its items: stride=np.array([[1, 1]]) was "a pair
    # of ints, got 1 values" and radc=np.array([[16, 16]]) "expected an int, got numpy.ndarray"; now the Python
    # layer's rule (dpe._pair, sliced._pair_items): a TypeError naming the argument and the array's dimensions
    call = {"stride": lambda v: _core.dpe_conv2d(**conv_kwargs(stride=v)),
            "x_widths": lambda v: _core.dpe_mvm(**mvm_kwargs(x_widths=v)),
            "radc": _core.check_radc}[arg]
    assert outcome(lambda: call(value)) == (TypeError, "argument '%s': expected %s, got a 2-D array" % (arg, what))
    if arg != "x_widths":  # the same numbers as a 1-D array are taken
        assert outcome(lambda: call(value.ravel()))[0] == "ok"


@pytest.mark.parametrize("vread", [-1, 0.0, NAN, INF, "0.2", None, True], ids=repr)
def test_vread_set_after_construction_is_checked_at_the_product(vread):
    # engine.vread = -1 (or NaN, or a str) after construction was kept and every product ran, where HGS, vnoise,
    # rdac and the other numbers set so are refused at the next product; now the constructor's rule, naming vread
    engine = pyfastpim.DPETensor()
    want = outcome(lambda: pyfastpim.DPETensor(vread=vread))
    assert want[0] in (TypeError, ValueError) and want[1].startswith("argument 'vread': "), want
    engine.vread = vread
    assert outcome(pyfastpim.dpe_matmul, XS, np.ones((8, 3), np.float32), engine, S2, S2, (1, 8), (8, 8), (1, 8),
                   (8, 8)) == want
    engine.vread = 0.3
    assert outcome(pyfastpim.dpe_matmul, XS, np.ones((8, 3), np.float32), engine, S2, S2, (1, 8), (8, 8), (1, 8),
                   (8, 8))[0] == "ok"
