"""Flag arguments: every boolean flag of the _core entry points and the public API goes through one
converter (pf_conv_flag in csrc/python/convert.c, _core.check_flag for Python): True/False, a NumPy bool or
an int 0/1 (a NumPy integer too); a str ('False' was true), None, a float (NaN included) or a container is a
TypeError naming the flag, another int a ValueError. PyArg "p" and bool() took any truthy object.
"""
import numpy as np
import pytest

import pyfastpim
try:
    import pyfastpim.nn as pnn  # needs torch, an optional dependency: the layer cases skip without it
except ImportError:
    pnn = None
from pyfastpim import _core
from helpers import Raises, conv_kwargs, outcome, type_name

G = np.ones((4, 4), np.float32)
ENGINE = pyfastpim.DPETensor()
FLAGS = {
    "dpe_conv2d-bfp": ("bfp", lambda v: _core.dpe_conv2d(**conv_kwargs(bfp=v))),
    "dpe_conv2d-return_dequant": ("return_dequant", lambda v: _core.dpe_conv2d(**conv_kwargs(return_dequant=v))),
    "slice_quantize-dequant": ("dequant", lambda v: _core.slice_quantize(G, (1, 1, 2), (2, 2), dequant=v)),
    "drift-return_nu": ("return_nu", lambda v: _core.drift(G, 1, 10.0, 1.0, 0.05, 0.01, return_nu=v)),
    "drift_conductance-return_nu": ("return_nu", lambda v: pyfastpim.physics.drift_conductance(G, 10.0,
                                                                                              return_nu=v)),
    "OpenCLDevice-zero_copy": ("zero_copy", lambda v: _core.OpenCLDevice(10 ** 6, 0, zero_copy=v)),
    "CallCounter-inherited": ("inherited", lambda v: _core.CallCounter(0, inherited=v)),
    "check_sigma-read": ("read", lambda v: _core.check_sigma(0.1, "x", read=v)),
    "check_number-integer": ("integer", lambda v: _core.check_number(1, "x", integer=v)),
    "asarray-writable": ("writable", lambda v: pyfastpim.asarray(G, writable=v)),
    "_core.asarray-writable": ("writable", lambda v: _core.asarray(G, None, v)),
    "Array._rebuild-readonly": ("readonly", lambda v: pyfastpim.Array._rebuild(G.tobytes(), "float32", (4, 4), v)),
    "_attn_view-writable": ("writable", lambda v: _core._attn_view(G, v, "x")),
    "_attn_new-zeros": ("zeros", lambda v: _core._attn_new((2, 2), v)),
    "drift-compensation": ("compensation", lambda v: ENGINE.drift(10.0, compensation=v)),
    "SlicedData-is_weight": ("is_weight", lambda v: pyfastpim.SlicedData((1, 1, 2), is_weight=v)),
    "SlicedData-inference": ("inference", lambda v: pyfastpim.SlicedData((1, 1, 2), inference=v)),
    "forward_linear-return_dequant": ("return_dequant", lambda v: ENGINE.forward_linear(G, None, (1, 1, 2),
                                                                                       return_dequant=v)),
    "forward_conv2d-return_dequant": ("return_dequant", lambda v: ENGINE.forward_conv2d(G, None, 1,
                                                                                       return_dequant=v)),
}
if pnn is not None:
    FLAGS["LinearMem-bias"] = ("bias", lambda v: pnn.LinearMem(ENGINE, 4, 4, (1, 1, 2), (1, 1, 2), bias=v))
    FLAGS["Conv2dMem-bias"] = ("bias", lambda v: pnn.Conv2dMem(ENGINE, 1, 1, 1, (1, 1, 2), (1, 1, 2), bias=v))
NOT_FLAGS = ["False", "", None, float("nan"), 1.0, 0.0, [1], (), np.array([True]), b"1"]


@pytest.mark.parametrize("value", NOT_FLAGS, ids=repr)
@pytest.mark.parametrize("label", sorted(FLAGS))
def test_flags_refuse_what_is_not_a_bool(label, value):
    # "p" / bool() took any truthy object: bfp='False' ran BFP, return_nu=nan returned nu, writable=[0] asked
    # for a writable view
    name, fn = FLAGS[label]
    assert outcome(fn, value) == (TypeError, "argument '%s': expected a bool (True/False or 0/1), got %s"
                                  % (name, type_name(value)))


@pytest.mark.parametrize("value", [2, -1, np.int64(7), 2 ** 64])
@pytest.mark.parametrize("label", sorted(FLAGS))
def test_flags_refuse_ints_other_than_0_and_1(label, value):
    name, fn = FLAGS[label]
    exc, msg = outcome(fn, value)
    assert exc is ValueError and msg.startswith("argument '%s': expected a bool (True/False or 0/1), got" % name)


@pytest.mark.parametrize("value,expect", [(True, True), (False, False), (np.bool_(True), True),
                                          (np.bool_(False), False), (1, True), (0, False), (np.int64(1), True),
                                          (np.uint8(0), False)])
def test_flags_take_bools_and_0_1(value, expect):
    assert _core.check_flag(value, "x") is expect
    ro = G.copy()
    ro.setflags(write=False)
    assert (outcome(pyfastpim.asarray, ro, writable=value)[0] is ValueError) is expect  # writable refuses it
    assert (_core.drift(G, 1, 10.0, 1.0, 0.05, 0.01, return_nu=value).__class__ is tuple) is expect
    assert (_core.slice_quantize(G, (1, 1, 2), (2, 2), dequant=value)[4] is not None) is expect
    assert (_core.dpe_conv2d(**conv_kwargs(return_dequant=value))[1] is not None) is expect
    if pnn is not None:
        assert (pnn.LinearMem(ENGINE, 4, 4, (1, 1, 2), (1, 1, 2), bias=value).bias is not None) is expect
    assert pyfastpim.SlicedData((1, 1, 2), is_weight=value).is_weight is expect
    assert _core.CallCounter(0, inherited=value).inherited is expect


def test_dpe_int_path_flag():
    before = _core.dpe_int_path()["enabled"]
    try:
        assert outcome(_core.dpe_int_path, "False") == (
            TypeError, "argument 'enabled': expected a bool (True/False or 0/1), got str")
        assert _core.dpe_int_path()["enabled"] is before
    finally:
        _core.dpe_int_path(before)


def test_flag_raising_index_propagates():
    with pytest.raises(ZeroDivisionError):
        _core.check_flag(Raises(ZeroDivisionError("from __index__")), "x")
    # a TypeError of its own too (it was "argument 'x': expected a bool (True/False or 0/1), got Raises")
    err = TypeError("from __index__")
    with pytest.raises(TypeError) as info:
        _core.check_flag(Raises(err), "x")
    assert info.value is err


def test_a_flag_reads_its_dtype_once():
    """pf_as_flag looks an argument's dtype up once for both of its rules (the bool dtype, the 0/1 int):
    it read a user's dtype property twice (is_bool's lookup, then int_value's)."""
    class Counted:
        reads = 0

        @property
        def dtype(self):
            Counted.reads += 1
            return "int64"

        def __index__(self):
            return 1

    assert _core.check_flag(Counted(), "x") is True and Counted.reads == 1
