"""__array_interface__ imports and __dlpack__ arguments: every malformed key or argument is a TypeError /
ValueError naming what is wrong (the argument, the interface key and its index), never a crash, a
SystemError, an OverflowError, or a silent reading (True as a size, '<f4<f4' as '<f4', a negative
pointer dereferenced)."""
import numpy as np
import pytest

import pyfastpim
from helpers import Iface, Raises, outcome, run_script

BASE = np.arange(12, dtype=np.float32).reshape(3, 4)
PTR = BASE.__array_interface__["data"][0]
MISSING = object()


def iface(**over):
    d = dict(shape=(3, 4), typestr="<f4", data=(PTR, False), version=3, strides=None)
    d.update(over)
    return Iface({k: v for k, v in d.items() if v is not MISSING})


A = "argument 'obj': "
BAD_INTERFACES = [
    (dict(shape=[3, 4]), TypeError, "__array_interface__ 'shape' must be a tuple of sizes, got list"),
    (dict(shape=MISSING), TypeError, "__array_interface__ has no 'shape' (a tuple of sizes)"),
    (dict(shape=(-1, 4)), ValueError, "__array_interface__ 'shape'[0] must be a size >= 0, got -1"),
    (dict(shape=(3, 2 ** 64)), ValueError, "__array_interface__ 'shape'[1]: 18446744073709551616 is out of range"),
    (dict(shape=(3.0, 4)), TypeError, "__array_interface__ 'shape'[0]: expected an int, got float"),
    (dict(shape=(True, 4)), TypeError, "__array_interface__ 'shape'[0]: expected an int, got bool"),
    (dict(strides=(16,)), ValueError, "__array_interface__ 'strides' has 1 values for the 2 dimensions of 'shape'"),
    (dict(strides=(16, 4, 4)), ValueError, "__array_interface__ 'strides' has 3 values for the 2 dimensions of "
                                           "'shape'"),
    (dict(strides=[16, 4]), TypeError, "__array_interface__ 'strides' must be None or a tuple of byte strides, got "
                                       "list"),
    (dict(strides=(16.0, 4)), TypeError, "__array_interface__ 'strides'[0]: expected an int, got float"),
    (dict(strides=(2 ** 64, 4)), ValueError, "__array_interface__ 'strides'[0]: 18446744073709551616 is out of "
                                             "range"),
    (dict(strides=(16, False)), TypeError, "__array_interface__ 'strides'[1]: expected an int, got bool"),
    (dict(typestr=b"<f4"), TypeError, "__array_interface__ 'typestr' must be a str such as '<f4', got bytes"),
    (dict(typestr=MISSING), TypeError, "__array_interface__ has no 'typestr' (a str such as '<f4')"),
    (dict(typestr="<f4<f4"), TypeError, "bad typestr '<f4<f4' (expected a byte order '<', '>', '|' or '=', a kind "
                                        "and an item size, such as '<f4')"),
    (dict(typestr="<f4 "), TypeError, "bad typestr '<f4 ' (expected"),
    (dict(typestr="xf4"), TypeError, "bad typestr 'xf4' (expected"),
    (dict(typestr="<f"), TypeError, "bad typestr '<f' (expected"),
    (dict(data=PTR), TypeError, "__array_interface__ 'data' must be a (pointer, read-only flag) tuple, got int"),
    (dict(data=(PTR,)), ValueError, "__array_interface__ 'data' must be a (pointer, read-only flag) tuple, got 1 "
                                    "items"),
    (dict(data=[PTR, False]), TypeError, "__array_interface__ 'data' must be a (pointer, read-only flag) tuple, got "
                                         "list"),
    (dict(data=(-1, False)), ValueError, "__array_interface__ 'data' pointer: must be an int in [0, 2**64), got -1"),
    (dict(data=(float(PTR), False)), TypeError, "__array_interface__ 'data' pointer: expected an int in [0, 2**64), "
                                                "got float"),
    (dict(data=(PTR, "False")), TypeError, "__array_interface__ 'data' read-only flag: expected a bool (True/False "
                                           "or 0/1), got str"),
    (dict(data=(PTR, float("nan"))), TypeError, "__array_interface__ 'data' read-only flag: expected a bool "
                                                "(True/False or 0/1), got float"),
    (dict(data=(PTR, 2)), ValueError, "__array_interface__ 'data' read-only flag: expected a bool (True/False or "
                                      "0/1), got 2"),
    (dict(data=(2 ** 64 - 16, False)), ValueError, "its data pointer 0xfffffffffffffff0 with its shape and strides "
                                                   "reaches outside the address space"),
    (dict(data=(8, False), strides=(-16, 4)), ValueError, "its data pointer 0x8 with its shape and strides reaches "
                                                          "outside the address space"),
    # the keys pyfastpim does not read were ignored: another version, a mask (masked elements read as data), an
    # offset (NumPy ignores it with a pointer 'data': honouring it would read other elements than NumPy reads), a
    # descr that disagrees with typestr (a structured dtype)
    (dict(version=2), ValueError, "__array_interface__ 'version' must be 3, got 2"),
    (dict(version=4), ValueError, "__array_interface__ 'version' must be 3, got 4"),
    (dict(version="3"), TypeError, "__array_interface__ 'version': expected an int, got str"),
    (dict(version=True), TypeError, "__array_interface__ 'version': expected an int, got bool"),
    (dict(mask=np.zeros((3, 4), bool)), ValueError, "__array_interface__ 'mask' is not supported (got numpy.ndarray)"),
    (dict(mask=False), ValueError, "__array_interface__ 'mask' is not supported (got bool)"),
    (dict(offset=4), ValueError, "__array_interface__ 'offset' 4 is not supported"),
    (dict(offset=-4), ValueError, "__array_interface__ 'offset' -4 is not supported"),
    (dict(offset=2 ** 64), ValueError, "__array_interface__ 'offset': 18446744073709551616 is out of range"),
    (dict(offset=4.0), TypeError, "__array_interface__ 'offset': expected an int, got float"),
    (dict(offset=True), TypeError, "__array_interface__ 'offset': expected an int, got bool"),
    (dict(descr=[("", "<i4")]), ValueError, "__array_interface__ 'descr' [('', '<i4')] does not agree with 'typestr' "
                                            "'<f4'"),
    (dict(descr=[("a", "<f4")]), ValueError, "__array_interface__ 'descr' [('a', '<f4')] does not agree"),
    (dict(descr=[("a", "<f2"), ("b", "<f2")]), ValueError, "__array_interface__ 'descr' [('a', '<f2'), ('b', '<f2')] "
                                                           "does not agree"),
    (dict(descr="<f4"), ValueError, "__array_interface__ 'descr' '<f4' does not agree"),
    (dict(descr=None), ValueError, "__array_interface__ 'descr' None does not agree"),
]


def _case_id(over):
    """A deterministic id: the pointer and the missing marker by name, not by address."""
    return ",".join("%s=%s" % (k, "MISSING" if v is MISSING else type(v).__name__ if isinstance(v, np.ndarray)
                               else repr(v).replace(str(PTR), "PTR"))
                    for k, v in over.items())


@pytest.mark.parametrize("over,exc,words", BAD_INTERFACES, ids=[_case_id(c[0]) for c in BAD_INTERFACES])
def test_malformed_array_interface_is_named(over, exc, words):
    e, msg = outcome(pyfastpim.asarray, iface(**over))
    assert e is exc and msg.startswith(A + words), msg


def test_array_interface_read_only_flag_is_kept():
    ro = iface(data=(PTR, True))
    assert pyfastpim.asarray(ro).readonly
    assert outcome(pyfastpim.asarray, ro, writable=True)[0] is ValueError
    assert not pyfastpim.asarray(iface(data=(PTR, np.bool_(False)))).readonly
    np.testing.assert_array_equal(np.asarray(pyfastpim.asarray(iface(strides=(16, 4)))), BASE)


@pytest.mark.parametrize("over", [dict(version=MISSING), dict(version=np.int64(3)), dict(mask=None),
                                  dict(offset=0), dict(offset=np.int64(0)), dict(descr=[("", "<f4")]),
                                  dict(descr=[("", "<f4")], mask=None, offset=0)],
                         ids=lambda c: _case_id(c))
def test_array_interface_default_keys_are_accepted(over):
    # what NumPy's own __array_interface__ gives (version 3, descr [('', typestr)]) and the neutral values
    o = iface(**over)
    a = pyfastpim.asarray(o)
    assert a.data_ptr == PTR
    np.testing.assert_array_equal(np.asarray(a), np.asarray(o))
    v = BASE[:, 1:3]  # NumPy's own interface: version 3, its descr, strides
    assert "descr" in v.__array_interface__
    np.testing.assert_array_equal(np.asarray(pyfastpim.asarray(Iface(dict(v.__array_interface__)))), v)


@pytest.mark.parametrize("strides", [(16, 2), (6, 4), (2, 6), (10, 3), (-6, 5)], ids=repr)
def test_strides_not_a_multiple_of_the_item_size_read_what_numpy_reads(strides):
    # byte strides need not be multiples of the item size (NumPy reads them as unaligned elements): the
    # one counted copy reads each element at its byte offset, as numpy.asarray(obj) does, inside the buffer
    data = PTR + (12 if strides[0] < 0 else 0)
    o = iface(strides=strides, data=(data, False))
    with pyfastpim.memory.trace() as t:
        a = pyfastpim.asarray(o)
    assert t.copies == 1 and a.strides == (16, 4)
    np.testing.assert_array_equal(np.asarray(a), np.asarray(o))
    e, msg = outcome(pyfastpim.asarray, o, writable=True)
    assert e is ValueError and msg.startswith(A + "a writable float32 C-contiguous array is required"), msg


def test_a_single_byte_typestr_takes_any_byte_order():
    # '>u1' (or '>i1'): one byte has no byte order (NumPy reads it as uint8), but was refused as big-endian
    raw = np.arange(6, dtype=np.uint8)
    for ts in (">u1", "<u1", "|u1", "=u1", ">i1"):
        o = Iface(dict(shape=(6,), typestr=ts, data=(raw.ctypes.data, False), version=3))
        a = pyfastpim.asarray(o)
        assert a.dtype == np.asarray(o).dtype.name and a.data_ptr == raw.ctypes.data
    e, msg = outcome(pyfastpim.asarray, iface(typestr=">f4"))
    assert e is ValueError and msg.startswith(A + "non-native (big-endian) byte order is not supported"), msg


def test_a_value_that_empties_the_interface_dict_is_not_read_after_free():
    # the keys' values were borrowed from the producer's dict: a value whose own __index__ clears that dict
    # freed the shape, strides and data tuples while they were read (reused memory read as a pointer: a
    # crash, or other numbers read silently). Run in a child: it could crash.
    out = run_script("""
        import numpy as np, pyfastpim
        base = np.arange(12, dtype=np.float32)
        keep = []
        class I:
            pass
        obj = I()
        class Evil:
            def __index__(self):
                obj.__array_interface__.clear()
                keep.extend(tuple([7, 7]) for _ in range(64))  # reuses the freed tuples' memory
                return 3
        obj.__array_interface__ = dict(shape=(Evil(), 4), typestr="<f4", data=(base.ctypes.data, False),
                                       version=3, strides=(16, 4))
        a = pyfastpim.asarray(obj)
        print(a.shape, np.asarray(a).ravel().tolist() == base.tolist())
    """)
    assert out.strip() == "(3, 4) True", out


def test_negative_data_pointer_does_not_crash():
    # data=(-1, False) was read as the pointer 0xff..ff and the copy loop segfaulted: run it in a child
    # (run_script: the child imports the build under test, as under make sanitize, and a crash fails)
    out = run_script("""
        import pyfastpim
        class I:
            __array_interface__ = dict(shape=(3, 4), typestr='<f4', data=(-1, False), version=3)
        try:
            pyfastpim.asarray(I())
        except ValueError as e:
            print('refused', e)
    """, "the negative data pointer case")
    assert out.startswith("refused argument 'obj': "), out


ARR = pyfastpim.asarray(np.ones((2, 2), np.float32))
BAD_DLPACK = [
    (dict(max_version=(True, 0)), TypeError, "argument 'max_version': expected an int, got bool"),
    (dict(max_version=(1.0, 0)), TypeError, "argument 'max_version': expected an int, got float"),
    (dict(max_version=(-1, 0)), ValueError, "argument 'max_version': expected a (major, minor) tuple of ints >= 0, "
                                            "got (-1, 0)"),
    (dict(max_version=(2 ** 64, 0)), ValueError, "argument 'max_version': 18446744073709551616 is out of range"),
    (dict(max_version=[1, 0]), TypeError, "argument 'max_version': expected None or a (major, minor) tuple of ints, "
                                          "got [1, 0]"),
    (dict(max_version=(1, 0, 0)), TypeError, "argument 'max_version': expected None or a (major, minor) tuple"),
    (dict(dl_device=(True, 0)), TypeError, "argument 'dl_device': expected an int, got bool"),
    (dict(dl_device=(2 ** 64, 0)), ValueError, "argument 'dl_device': 18446744073709551616 is out of range"),
    (dict(dl_device=(1, -1)), ValueError, "argument 'dl_device': expected a (device_type, device_id) tuple of ints "
                                          ">= 0, got (1, -1)"),
    (dict(dl_device="cpu"), TypeError, "argument 'dl_device': expected None or a (device_type, device_id) tuple"),
    (dict(dl_device=(2, 0)), BufferError, "argument 'dl_device': pyfastpim.Array lives in host memory"),
    (dict(stream=0), ValueError, "argument 'stream': pyfastpim arrays live in host memory; stream must be None"),
    (dict(copy=2), ValueError, "argument 'copy': expected a bool (True/False or 0/1), got 2"),
    (dict(copy="True"), TypeError, "argument 'copy': expected a bool (True/False or 0/1), got str"),
    (dict(copy=float("nan")), TypeError, "argument 'copy': expected a bool (True/False or 0/1), got float"),
]


@pytest.mark.parametrize("kw,exc,words", BAD_DLPACK, ids=[repr(c[0]) for c in BAD_DLPACK])
def test_dlpack_arguments_are_named(kw, exc, words):
    e, msg = outcome(ARR.__dlpack__, **kw)
    assert e is exc and msg.startswith(words), msg



@pytest.mark.parametrize("key", ["shape", "strides", "data"])
def test_an_exception_of_the_values_own_index_propagates_as_it_is(key):
    # the key's converter error was rewrapped in the argument's words with PyErr_Format(type, message): a
    # KeyboardInterrupt got another message, and a UnicodeDecodeError (whose constructor takes 5 arguments)
    # became "TypeError: function takes exactly 5 arguments (1 given)"
    for exc in (KeyboardInterrupt("from __index__"), UnicodeDecodeError("utf-8", b"x", 0, 1, "from __index__")):
        bad = Raises(exc)
        over = {"shape": dict(shape=(3, bad)), "strides": dict(strides=(16, bad)), "data": dict(data=(bad, False))}
        with pytest.raises(type(exc)) as info:
            pyfastpim.asarray(iface(**over[key]))
        assert info.value is exc
