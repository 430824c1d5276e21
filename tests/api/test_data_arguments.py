"""How data arguments are read, at every entry point that takes data (numbers as arrays):

- bytes and bytearray are no numbers: a TypeError naming the argument, saying why and how to pass byte
  values (one rule, the core's: csrc/python/bind_array.c view_any; the Python API's lists defer to it);
  memoryview, array.array and NumPy arrays stay buffers of numbers.
- a masked array is refused (ValueError naming the argument) in a list or tuple too, where np.asarray
  would have dropped its mask.
- a user sequence whose __getitem__ never raises IndexError is read for as many items as its __len__ says:
  an error naming the argument, never an endless read (each such test runs in a subprocess with a timeout).
"""
import array
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import pyfastpim
from pyfastpim import metrics, physics
from pyfastpim.attention import AttentionContext

from helpers import PKG_ROOT

TESTS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
W = np.ones((8, 2), np.float32)


def _sliced(name):
    sd = pyfastpim.SlicedData((1, 1, 2))
    return lambda v: setattr(sd, name, v)


def _attention(which):
    ctx = AttentionContext(update_rate=0.5, strength=1.0)
    x = np.ones((2, 8), np.float32)
    return {"x": lambda v: ctx.update_outgoing(v, x), "y": lambda v: ctx.update_outgoing(x, v),
            "incoming": lambda v: setattr(ctx, "incoming", v)}[which]


# (argument name, call with the value in that argument); the value is 8 bytes (or a list of 2 rows of them)
ENTRY_POINTS = [
    ("obj", lambda v: pyfastpim.asarray(v)),
    ("x", lambda v: pyfastpim.dpe_matmul(v, W, pyfastpim.DPETensor())),
    ("w", lambda v: pyfastpim.dpe_matmul(np.ones((2, 8), np.float32), v, pyfastpim.DPETensor())),
    ("data", lambda v: pyfastpim.SlicedData((1, 1, 2)).slice_data_imp(pyfastpim.DPETensor(), v)),
    ("data", lambda v: pyfastpim.slice_quantize(v, (1, 1, 2))),
    ("codes", lambda v: pyfastpim.program_weights(v, (1, 1, 2), 4)),
    ("max_data", _sliced("max_data")),
    ("x", _attention("x")),
    ("y", _attention("y")),
    ("incoming", _attention("incoming")),
    ("G", lambda v: physics.drift_conductance(v, 10.0)),
    ("G", lambda v: physics.effective_conductance(v, 1.0)),
    ("V", lambda v: physics.column_currents(np.full((8, 2), 1e-5), v, 0.0)),
    ("ytest", lambda v: metrics.SNR(v, np.ones(8))),
    ("ypred", lambda v: metrics.RE(np.ones(8), v)),
]
IDS = ["%s-%d" % (e[0], i) for i, e in enumerate(ENTRY_POINTS)]


def _words(name, kind):
    return ("^argument '%s': expected an array of numbers, got %s \\(bytes and bytearray hold text or raw bytes, "
            "not numbers; NumPy reads bytes as a string array\\): for byte values pass "
            "np.frombuffer\\(value, dtype=np.uint8\\)$" % (name, kind))


@pytest.mark.parametrize("kind", [bytes, bytearray])
@pytest.mark.parametrize("name, call", ENTRY_POINTS, ids=IDS)
def test_bytes_are_no_numbers_at_any_data_entry_point(name, call, kind):
    # pyfastpim.asarray(b"ab") was a uint8 array [97, 98], dpe_matmul(bytearray(...), w) multiplied the byte
    # values; only pyfastpim.physics refused them (its own copy of the rule). Now the core refuses them
    with pytest.raises(TypeError, match=_words(name, kind.__name__)):
        call(kind(8))
    # in a list (np.asarray read [bytearray(b"ab")] as uint8 values, [b"ab"] as strings), where lists are taken
    with pytest.raises(TypeError) as info:
        call([kind(8), kind(8)])
    assert re.match(_words(name, kind.__name__), str(info.value)) or _takes_no_list(name, info.value), info.value


def _takes_no_list(name, exc):
    """Whether exc is the core's refusal of a list (its data operands are buffers, not lists)."""
    return str(exc).startswith("argument '%s': list exposes no buffer" % name) or \
        str(exc).startswith("argument '%s': tuple exposes no buffer" % name)


@pytest.mark.parametrize("make", [lambda b: memoryview(b), lambda b: array.array("B", b),
                                  lambda b: np.frombuffer(b, dtype=np.uint8)], ids=["memoryview", "array", "numpy"])
def test_other_buffers_of_bytes_stay_arrays_of_numbers(make):
    a = pyfastpim.asarray(make(bytearray(b"\x01\x02\x03")))
    assert a.dtype == "uint8" and np.asarray(a).tolist() == [1, 2, 3]
    assert metrics.RE([make(b"\x01\x02")], [[1, 2]]) == 0.0


MASKED = np.ma.masked_array(np.ones(8), mask=[0, 1] * 4)


@pytest.mark.parametrize("wrap", [lambda m: [m, m], lambda m: (m, m), lambda m: [[1.0] * 8, m]],
                         ids=["list", "tuple", "nested"])
@pytest.mark.parametrize("name, call", ENTRY_POINTS, ids=IDS)
def test_a_list_of_masked_arrays_is_refused(name, call, wrap):
    # a masked array alone was refused, but np.asarray([m, m]) drops the masks: SNR([m, m], ...) compared the
    # masked elements' data. Entry points that take no lists (the core's: asarray, dpe_matmul) refuse them too
    try:
        call(wrap(MASKED))
    except ValueError as exc:
        assert str(exc).startswith("argument '%s': a masked array is not supported" % name), exc
    except TypeError as exc:  # no list taken here at all
        assert _takes_no_list(name, exc), exc
    else:
        pytest.fail("a list of masked arrays was read")


def _run_with_timeout(code, timeout=30):
    """Runs ``code`` in a fresh interpreter: (returncode, output); a hang is a failure, not a stuck suite."""
    try:
        # the package under test (installed in a venv run: not the checkout, which has no build there)
        script = "import sys; sys.path[:0] = [%r, %r]\n" % (PKG_ROOT, TESTS_DIR) + textwrap.dedent(code)
        res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail("the read never ended (timed out after %ds)" % timeout)
    return res.returncode, res.stdout + res.stderr


ENDLESS = '''
import numpy as np, pyfastpim
from pyfastpim import _core, metrics, physics
class Endless:  # says 3 items, but its __getitem__ never raises IndexError
    def __len__(self):
        return 3
    def __getitem__(self, i):
        return 1
class NoLength:  # no __len__ and never an IndexError
    def __getitem__(self, i):
        return 1
def outcome(call):
    try:
        call()
    except (TypeError, ValueError) as exc:
        print(type(exc).__name__ + ": " + str(exc))
'''


@pytest.mark.parametrize("call, words", [
    ("pyfastpim.DPETensor(radc=Endless())",
     "ValueError: argument 'radc': expected an int or a sequence of at most 16 ints (one per weight slice), got "
     "Endless whose __len__ says 3 items but it has more than 3"),
    ("pyfastpim.DPETensor(radc=NoLength())",
     "ValueError: argument 'radc': expected an int or a sequence of at most 16 ints (one per weight slice), got "
     "NoLength of more than 16 items"),
    ("_core.check_radc(Endless())", "ValueError: argument 'radc': "),
    ("metrics.SNR([Endless(), Endless()], np.ones((2, 3)))",
     "ValueError: argument 'ytest': expected a rectangular array of numbers, got Endless whose __len__ says 3 "
     "items but it has more than 3"),
    ("metrics.SNR(Endless(), np.ones(3))", "ValueError: argument 'ytest': expected a rectangular array"),
    ("physics.drift_conductance([Endless()], 10.0)", "ValueError: argument 'G': expected a rectangular array"),
], ids=["radc", "radc-no-length", "check_radc", "SNR-list", "SNR", "physics"])
def test_a_sequence_that_never_ends_is_an_error_not_an_endless_read(call, words):
    # as_sequence (csrc/python/convert.c) iterated a user sequence to its end, and np.asarray (the Python
    # API's lists) does the same: a __getitem__ that never raises IndexError looped forever
    rc, out = _run_with_timeout(ENDLESS + "outcome(lambda: %s)\n" % call)
    assert rc == 0 and out.startswith(words), out


def test_the_core_pair_rule_reads_no_more_items_than_the_length_says():
    rc, out = _run_with_timeout(ENDLESS + '''
from helpers import conv_kwargs
outcome(lambda: _core.dpe_conv2d(**conv_kwargs(stride=Endless())))
class Short(Endless):  # says 2 items, has 1
    __len__ = lambda self: 2
    __getitem__ = lambda self, i: [1][i]
outcome(lambda: _core.dpe_conv2d(**conv_kwargs(stride=Short())))
class Endless2(Endless):
    def __len__(self):
        return 2
outcome(lambda: _core.dpe_conv2d(**conv_kwargs(stride=Endless2())))
''')
    assert rc == 0, out
    # a length of 3 is no pair: refused before any item is read
    assert out.splitlines() == [
        "ValueError: argument 'stride': expected a pair of ints, got 3 values",
        "ValueError: argument 'stride': expected a pair of ints, got Short whose __len__ says 2 items but it has "
        "only 1",
        "ValueError: argument 'stride': expected a pair of ints, got Endless2 whose __len__ says 2 items but it has "
        "more than 2"], out
