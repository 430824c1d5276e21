"""An exception raised by user code while an argument is parsed (the value's own __index__, __float__ or
dtype property) propagates unchanged: the same object, type and message. Only the library's own parse
errors (a TypeError from the value, which the scalar rule answers in its words, and the converters'
messages) are named "argument 'X': ..."; a TypeError raised by the value's own __index__ / __float__ is its
own too (only an array library's value, with a dtype, refusing a conversion is the rule's refusal)."""
import numpy as np
import pytest

import pyfastpim
from pyfastpim import _core
from helpers import Iface, Raises, conv_kwargs, outcome as _outcome, type_name


class MyValueError(ValueError):
    pass


class MyOverflowError(OverflowError):
    pass


class MyTypeError(TypeError):
    pass


USER_ERRORS = [ValueError("from user code"), MyValueError("from user code"), OverflowError("from user code"),
               MyOverflowError("from user code"), ZeroDivisionError("from user code"),
               KeyboardInterrupt("from user code")]
# what a value's own __index__ / __float__ may raise: a TypeError too (the dtype property's and __len__'s
# TypeError mean "not a number" and "no length", tested below)
CONVERSION_ERRORS = USER_ERRORS + [TypeError("from user code"), MyTypeError("from user code")]


def _raises_it(call, exc):
    with pytest.raises(BaseException) as info:
        call()
    assert info.value is exc, repr(info.value)
    assert str(info.value) == "from user code"


BASE = np.arange(12, dtype=np.float32).reshape(3, 4)


def _iface(key, bad):
    d = dict(shape=(3, 4), typestr="<f4", data=(BASE.ctypes.data, False), version=3)
    if key == "shape":
        d["shape"] = (3, bad)
    elif key == "strides":
        d["strides"] = (16, bad)
    elif key == "pointer":
        d["data"] = (bad, False)
    elif key == "read-only flag":
        d["data"] = (BASE.ctypes.data, bad)
    else:
        d[key] = bad
    return Iface(d)


@pytest.mark.parametrize("exc", CONVERSION_ERRORS, ids=lambda e: type(e).__name__)
@pytest.mark.parametrize("key", ["shape", "strides", "pointer", "read-only flag", "version", "offset"])
def test_interface_values_own_exception_propagates(key, exc):
    # a plain ValueError of the value's own __index__ was reworded "argument 'obj': __array_interface__
    # 'shape'[1]: from user code" (its subclasses already propagated)
    _raises_it(lambda: pyfastpim.asarray(_iface(key, Raises(exc))), exc)


@pytest.mark.parametrize("exc", CONVERSION_ERRORS, ids=lambda e: type(e).__name__)
@pytest.mark.parametrize("call", [lambda v: _core.check_number(v, "x"), lambda v: _core.check_sigma(v, "s"),
                                  lambda v: _core.irdrop_block(np.ones((2, 2), np.float32), v)],
                         ids=["check_number", "check_sigma", "irdrop_block"])
def test_real_values_own_exception_propagates(call, exc):
    # an OverflowError (or subclass) of the value's own __float__ became "ValueError: argument 'x': must be
    # finite, got an int beyond float64's range": the value is no int; a TypeError became "argument 'x':
    # expected a real number, got Raises"
    _raises_it(lambda: call(Raises(exc)), exc)


@pytest.mark.parametrize("exc", CONVERSION_ERRORS, ids=lambda e: type(e).__name__)
@pytest.mark.parametrize("call", [lambda v: _core.check_number(v, "x", True), lambda v: _core.check_flag(v, "x"),
                                  lambda v: _core.check_seed(v), lambda v: _core.check_bw_e(v),
                                  lambda v: _core.normals(1, v, 0, 0, 4)],
                         ids=["check_number", "check_flag", "check_seed", "check_bw_e", "normals"])
def test_int_values_own_exception_propagates(call, exc):
    # a TypeError of the value's own __index__ became "argument 'x': expected an int, got Raises" (the
    # rule's words for a value that is no int), hiding the user's error
    _raises_it(lambda: call(Raises(exc)), exc)


class Index:
    def __init__(self, v):
        self.v = v

    def __index__(self):
        return self.v


class Float:
    def __float__(self):
        return "0.5"


@pytest.mark.parametrize("integer", [False, True])
def test_values_that_are_no_numbers_keep_the_rules_words(integer):
    # what the array libraries' conversions refuse with a TypeError (a float or object array's __index__,
    # a 1-element array, an object array holding None) and an __index__ / __float__ returning another type
    # are the rule's refusal, in its words naming the argument
    torch = pytest.importorskip("torch")
    values = [np.array([3]), np.array(None, dtype=object), torch.tensor([0.5, 1.0]), Index(2.5), "3", None, True,
              [3]]
    values += [np.array(0.5), np.float32(0.5), torch.tensor(0.5), 1.5] if integer else [Float()]
    what = "an int" if integer else "a real number"
    for v in values:
        exc, msg = _outcome(lambda: _core.check_number(v, "x", integer))
        assert (exc, msg) == (TypeError, "argument 'x': expected %s, got %s" % (what, type_name(v))), v


def test_an_int_beyond_float64_is_still_named():
    class Index:  # an int only through __index__: PyFloat_AsDouble converts the int itself
        def __index__(self):
            return 10 ** 400

    for v in (10 ** 400, -10 ** 400, Index()):
        with pytest.raises(ValueError, match="^argument 'x': must be finite, got an int beyond float64's range"):
            _core.check_number(v, "x")


class DtypeRaises:
    """A number whose `dtype` property raises `exc` (the scalar rule looks for a bool or complex dtype)."""

    def __init__(self, exc):
        self.exc = exc

    @property
    def dtype(self):
        raise self.exc

    def __index__(self):
        return 1

    def __float__(self):
        return 1.0


@pytest.mark.parametrize("exc", USER_ERRORS, ids=lambda e: type(e).__name__)
@pytest.mark.parametrize("call", [lambda v: _core.check_number(v, "x"), lambda v: _core.check_number(v, "x", True),
                                  lambda v: _core.check_flag(v, "x"), lambda v: _core.check_seed(v)],
                         ids=["real", "int", "flag", "seed"])
def test_dtype_propertys_exception_propagates(call, exc):
    # the dtype property's exception was cleared (a KeyboardInterrupt swallowed) and the value read as a number
    _raises_it(lambda: call(DtypeRaises(exc)), exc)


def test_no_dtype_attribute_is_an_ordinary_number():
    assert _core.check_number(DtypeRaises(AttributeError("no dtype")), "x") == 1.0
    assert _core.check_number(DtypeRaises(AttributeError("no dtype")), "x", True) == 1
    assert _core.check_flag(DtypeRaises(AttributeError("no dtype")), "x") is True


class LenRaises:
    """A number that looks like a container (__getitem__, __len__) whose __len__ raises `exc`; `dtype`
    'bool' makes it a 0-d bool for the flag rule, which asks whether it has a length too."""

    def __init__(self, exc, dtype=None):
        self.exc = exc
        if dtype:
            self.dtype = dtype

    def __len__(self):
        raise self.exc

    def __getitem__(self, i):
        raise IndexError(i)

    def __index__(self):
        return 1

    def __float__(self):
        return 1.0

    def __bool__(self):
        return True


@pytest.mark.parametrize("exc", USER_ERRORS + [MemoryError("from user code")], ids=lambda e: type(e).__name__)
@pytest.mark.parametrize("call", [lambda v: _core.check_number(v, "x"), lambda v: _core.check_sigma(v, "s"),
                                  lambda v: _core.check_flag(LenRaises(v.exc, "bool"), "x")],
                         ids=["real", "sigma", "flag"])
def test_len_own_exception_propagates(call, exc):
    # is_sized cleared whatever __len__ raised (a KeyboardInterrupt, a MemoryError swallowed) and read the
    # value as a number
    _raises_it(lambda: call(LenRaises(exc)), exc)


def test_len_type_error_means_no_length():
    # as len() says of an object without a length: a number, read through __float__ / its bool
    assert _core.check_number(LenRaises(TypeError("no length")), "x") == 1.0
    assert _core.check_flag(LenRaises(TypeError("no length"), "bool"), "x") is True


def _assert_conv2d_reads_as(arg, value, same):
    """_core.dpe_conv2d with ``arg=value`` gives exactly the output of ``arg=same``."""
    got = _core.dpe_conv2d(**conv_kwargs(**{arg: value}))[0]
    want = _core.dpe_conv2d(**conv_kwargs(**{arg: same}))[0]
    assert got.shape == want.shape
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


class _ChangingSequence:
    """A sequence whose length changes after its first full read (each __iter__ pass yields the next list of
    ``passes``): the converters must check and read one snapshot of it, not read it twice."""

    def __init__(self, *passes):
        self.passes, self.reads = list(passes), 0

    def __len__(self):
        return len(self.passes[min(self.reads, len(self.passes) - 1)])

    def __getitem__(self, i):
        return self.passes[min(self.reads, len(self.passes) - 1)][i]

    def __iter__(self):
        items = self.passes[min(self.reads, len(self.passes) - 1)]
        self.reads += 1
        return iter(items)


@pytest.mark.parametrize("arg, passes, same_as", [
    ("stride", ([1, 1], [1]), (1, 1)),
    ("dilation", ([1, 1], [1]), (1, 1)),
    ("x_widths", ([1, 1, 2], [1]), (1, 1, 2)),
    ("w_widths", ([1, 1], [2]), (1, 1)),
])
def test_converters_read_a_user_sequence_once(arg, passes, same_as):
    # pf_conv_pair and pf_conv_slice_method took a sequence's length from one read and its items from a
    # second: a sequence shorter on the second read left items uninitialised (stride=(1, <garbage>) gave a
    # (1, 4, 3, 1) output where (1, 1) gives (1, 4, 3, 3)). Now one snapshot is checked and read.
    seq = _ChangingSequence(*passes)
    _assert_conv2d_reads_as(arg, seq, same_as)
    assert seq.reads == 1


class _ClearsItsList:
    """An int whose __index__ empties the list holding it (and drops the list's reference to itself)."""

    def __init__(self, owner):
        self.owner = owner

    def __index__(self):
        self.owner.clear()
        return 1


@pytest.mark.parametrize("arg", ["stride", "padding", "x_widths"])
def test_an_item_changing_its_own_list_does_not_change_what_the_converter_reads(arg):
    # seq_int64s read the caller's own list (PySequence_Fast returns a list itself): an item's __index__
    # that cleared it stopped the loop early with items unwritten (stride=(1, <stack garbage>): "values must
    # be at most 2147483647, got (1, 140127264242570)"), and the item was borrowed, freed while read. Now a
    # tuple snapshot holds every item
    same = {"stride": [1, 1], "padding": [1, 1], "x_widths": [1, 1, 2]}[arg]
    value = list(same)
    value[0] = _ClearsItsList(value)
    _assert_conv2d_reads_as(arg, value, same)


class _IterRaises:
    def __init__(self, exc):
        self.exc = exc

    def __len__(self):
        return 2

    def __getitem__(self, i):
        raise self.exc

    def __iter__(self):
        raise self.exc


@pytest.mark.parametrize("exc", USER_ERRORS, ids=lambda e: type(e).__name__)
def test_a_sequences_own_iteration_error_propagates_through_the_core_converters(exc):
    # as_sequence cleared any exception of PySequence_Fast: a user sequence whose __iter__ raised
    # KeyboardInterrupt came out as "TypeError: argument 'stride': expected a pair of ints, got ..."
    _raises_it(lambda: _core.dpe_conv2d(**conv_kwargs(stride=_IterRaises(exc))), exc)
    _raises_it(lambda: _core.dpe_conv2d(**conv_kwargs(x_widths=_IterRaises(exc))), exc)


class _LongerThanItsLen:
    def __len__(self):
        return 2

    def __getitem__(self, i):
        if i < 3:
            return 1
        raise IndexError(i)


def test_the_python_pair_rule_reads_a_sequence_once():
    # sliced._pair and dpe._pair took len() and then iterated: a sequence whose len() says 2 but which
    # yields three items became the pair (1, 1, 1) (SlicedData stored paral_size == (1, 1, 1)). Now the
    # items read are the pair, and disagreeing with len() is a ValueError
    for call in (lambda v: pyfastpim.SlicedData((1, 1), paral_size=v),
                 lambda v: pyfastpim.slice_quantize(np.ones((2, 2), np.float32), (1, 1), paral_size=v)):
        with pytest.raises(ValueError, match="^argument 'paral_size': expected a pair of ints, got 3 values"):
            call(_LongerThanItsLen())
    from pyfastpim.dpe import _pair
    with pytest.raises(ValueError, match="^argument 'stride': expected an int or a pair of ints, got 3 values"):
        _pair(_LongerThanItsLen(), "stride", 1)


@pytest.mark.parametrize("exc", [TypeError("from user code"), MyTypeError("from user code")],
                         ids=lambda e: type(e).__name__)
@pytest.mark.parametrize("call", [lambda v: _core.check_number(v, "x"), lambda v: _core.check_number(v, "x", True),
                                  lambda v: _core.check_flag(v, "x"), lambda v: _core.check_seed(v),
                                  lambda v: pyfastpim.DPETensor(vnoise=v), lambda v: pyfastpim.DPETensor(g_level=v)],
                         ids=["real", "int", "flag", "seed", "DPETensor-vnoise", "DPETensor-g_level"])
def test_dtype_propertys_type_error_propagates(call, exc):
    # a TypeError of the dtype property was taken for the rule's refusal and reworded "argument 'x': expected
    # a real number, got DtypeRaises", hiding the user's exception; it is user code's like any other
    _raises_it(lambda: call(DtypeRaises(exc)), exc)


class _BadLength:
    """A sequence whose __len__ returns an int that is no length: len() refuses it with an OverflowError
    ("cannot fit 'int' into an index-sized integer") or a ValueError ("__len__() should return >= 0"), which
    name nothing."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return 1.0


def _engine_arg(arg):
    return lambda v: pyfastpim.DPETensor(**{arg: v})


def _pair_arg(arg):
    def call(v):
        x = np.ones((2, 4), np.float32)
        return pyfastpim.dpe_matmul(x, np.ones((4, 2), np.float32), pyfastpim.DPETensor(), **{arg: v})
    return call


@pytest.mark.parametrize("n", [2 ** 100, -1], ids=["huge", "negative"])
@pytest.mark.parametrize("arg, call", [
    ("radc", _engine_arg("radc")), ("HGS", _engine_arg("HGS")), ("wire_resistance", _engine_arg("wire_resistance")),
    ("read_variation", _engine_arg("read_variation")), ("input_paral_size", _pair_arg("input_paral_size")),
    ("weight_quant_gran", _pair_arg("weight_quant_gran")),
    ("paral_size", lambda v: pyfastpim.SlicedData((1, 1, 2), paral_size=v)),
    ("stride", lambda v: _core.dpe_conv2d(**conv_kwargs(stride=v))),
    ("ytest", lambda v: pyfastpim.SNR(v, [1.0, 2.0])),
])
def test_a_len_that_is_no_length_is_an_error_naming_the_argument(arg, call, n):
    # len() refused what __len__ returned with an OverflowError / ValueError naming nothing
    # (pyfastpim.DPETensor(radc=L()): "OverflowError: cannot fit 'int' into an index-sized integer"); the
    # number rule read it as a number's failure, the sequence rules let len()'s error through
    with pytest.raises((TypeError, ValueError), match="^argument '%s': " % arg):
        call(_BadLength(n))


class _StaticLength(_BadLength):
    """len() is 2 through a staticmethod; it has __float__ too: a container, not a number."""
    __len__ = staticmethod(lambda: 2)

    def __float__(self):
        return 3.0


class _ClassLength(_StaticLength):
    __len__ = classmethod(lambda cls: 2)


@pytest.mark.parametrize("cls", [_StaticLength, _ClassLength])
def test_a_length_not_defined_as_a_plain_method_is_still_a_length(cls):
    # the library called type(obj).__len__(obj) itself, which a staticmethod / classmethod refuses (a
    # TypeError read as "no length"), so such a sized object with __float__ was taken as the number 3.0
    assert len(cls(0)) == 2
    with pytest.raises(TypeError, match="^argument 'HGS': expected a real number"):
        pyfastpim.DPETensor(HGS=cls(0))


class _StaticLengthPair:
    """A pair (32, 32) whose len() is 2 through a staticmethod."""
    __len__ = staticmethod(lambda: 2)

    def __getitem__(self, i):
        if i < 2:
            return 32
        raise IndexError(i)


def test_a_pair_whose_length_is_not_a_plain_method_is_read_as_a_pair():
    # the Python pair rule (sliced._length), twin of the core's own_length, called type(obj).__len__(obj)
    # itself: a staticmethod __len__ gave its own "takes 0 positional arguments" TypeError
    x, w = np.ones((2, 64), np.float32), np.ones((64, 4), np.float32)
    want = pyfastpim.dpe_matmul(x, w, pyfastpim.DPETensor(seed=1), weight_paral_size=(32, 32))
    got = pyfastpim.dpe_matmul(x, w, pyfastpim.DPETensor(seed=1), weight_paral_size=_StaticLengthPair())
    assert np.array_equal(got, want)
    assert pyfastpim.SlicedData((1, 1, 2), paral_size=_StaticLengthPair()).paral_size == (32, 32)


class _LenRaisesSequence(_BadLength):
    def __init__(self, exc):
        self.exc = exc

    def __len__(self):
        raise self.exc


@pytest.mark.parametrize("exc", USER_ERRORS, ids=lambda e: type(e).__name__)
@pytest.mark.parametrize("call", [_engine_arg("radc"), _pair_arg("input_paral_size"), _engine_arg("HGS"),
                                  lambda v: _core.dpe_conv2d(**conv_kwargs(stride=v))],
                         ids=["radc", "pair", "real", "core-pair"])
def test_a_sequences_own_len_exception_still_propagates(call, exc):
    # telling len()'s refusal apart must not swallow a ValueError / OverflowError __len__ raises itself
    _raises_it(lambda: call(_LenRaisesSequence(exc)), exc)


class _CountedLength:
    """A sequence of `items` counting its __len__ calls; `answers`, when given, are __len__'s successive
    results (then len(items))."""

    def __init__(self, items, answers=()):
        self.items, self.answers, self.calls = list(items), list(answers), 0

    def __len__(self):
        self.calls += 1
        return self.answers.pop(0) if self.answers else len(self.items)

    def __getitem__(self, i):
        return self.items[i]


_SEQUENCE_ARGS = [
    ("radc", [8, 16], lambda v: pyfastpim.DPETensor(radc=v).radc),
    ("input_paral_size", [1, 32], _pair_arg("input_paral_size")),
    ("paral_size", [1, 32], lambda v: pyfastpim.SlicedData((1, 1, 2), paral_size=v).paral_size),
    ("stride", [1, 2], lambda v: _core.dpe_conv2d(**conv_kwargs(stride=v))[0]),
]


@pytest.mark.parametrize("arg, items, call", _SEQUENCE_ARGS, ids=[a[0] for a in _SEQUENCE_ARGS])
def test_a_sequences_len_is_called_once_per_conversion(arg, items, call):
    # the sequence rule called own_length, then PySequence_Tuple called len() again for its length hint:
    # __len__ ran twice per conversion, and a second answer that is no length (2, then -1) was CPython's
    # unnamed "ValueError: __len__() should return >= 0"
    want = call(list(items))
    seq = _CountedLength(items)
    np.testing.assert_array_equal(call(seq), want)
    assert seq.calls == 1
    flaky = _CountedLength(items, answers=[2, -1])
    try:
        got = call(flaky)
    except (TypeError, ValueError) as exc:
        assert str(exc).startswith("argument '%s': " % arg), exc
    else:
        np.testing.assert_array_equal(got, want)


class _NotIterable:
    """Indexable (a sequence to PySequence_Check) but ``__iter__ = None``: no sequence after all."""
    __iter__ = None

    def __len__(self):
        return 2

    def __getitem__(self, i):
        return 1


@pytest.mark.parametrize("exc", [TypeError("from user code"), MyTypeError("from user code")],
                         ids=lambda e: type(e).__name__)
def test_a_sequences_own_type_error_propagates_and_no_iteration_is_reworded(exc):
    # as_sequence reworded every TypeError of the iteration: a user __iter__ / __getitem__ raising its own
    # TypeError came out as "argument 'stride': expected a pair of ints, got _IterRaises". Now iterability is
    # checked before any user code runs: only an object that cannot iterate gets the generic message
    _raises_it(lambda: _core.dpe_conv2d(**conv_kwargs(stride=_IterRaises(exc))), exc)
    _raises_it(lambda: _core.dpe_conv2d(**conv_kwargs(x_widths=_IterRaises(exc))), exc)

    class GetitemRaises:  # no __iter__: iterates by __getitem__
        def __len__(self):
            return 2

        def __getitem__(self, i):
            raise exc

    _raises_it(lambda: _core.dpe_conv2d(**conv_kwargs(stride=GetitemRaises())), exc)
    with pytest.raises(TypeError, match=r"^argument 'stride': expected a pair of ints, got _NotIterable$"):
        _core.dpe_conv2d(**conv_kwargs(stride=_NotIterable()))


class _IterIsNoFunction:
    __iter__ = 5  # set, but nothing to call: no sequence after all

    def __len__(self):
        return 2

    def __getitem__(self, i):
        return 1


class _LongNotIterable(_NotIterable):
    def __len__(self):  # more items than a pair: still no sequence, whatever its length
        return 3


class _MetaIterProperty(type):
    ran = 0

    @property
    def __iter__(cls):  # a metaclass attribute: iter() never looks here, for the instances
        _MetaIterProperty.ran += 1
        return None


class _IterableUnderThatMetaclass(metaclass=_MetaIterProperty):
    def __len__(self):
        return 2

    def __getitem__(self, i):
        return [1, 1][i]

    def __iter__(self):
        return iter([1, 1])


def test_iterability_is_told_as_iter_tells_it():
    # own_iterable read the type's __iter__ with getattr: a metaclass property ran (user code, before the
    # sequence's own) and hid the class's own __iter__ (a sequence refused); a non-callable __iter__ came out
    # as a bare "'int' object is not callable" naming no argument; and __iter__ = None with a __len__ above the
    # caller's most was "got 3 values" while with 2 it was no sequence
    ref = _core.dpe_conv2d(**conv_kwargs(stride=(1, 1)))
    assert list(iter(_IterableUnderThatMetaclass())) == [1, 1]
    _MetaIterProperty.ran = 0
    got = _core.dpe_conv2d(**conv_kwargs(stride=_IterableUnderThatMetaclass()))
    np.testing.assert_array_equal(np.asarray(got[0]), np.asarray(ref[0]))
    assert _MetaIterProperty.ran == 0
    for obj in (_IterIsNoFunction(), _LongNotIterable()):
        with pytest.raises(TypeError, match=r"^argument 'stride': expected a pair of ints, got %s$"
                           % type(obj).__name__):
            _core.dpe_conv2d(**conv_kwargs(stride=obj))
