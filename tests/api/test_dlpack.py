"""DLPack 1.0 exchange (versioned capsules, max_version, dl_device, copy, read-only flag) and
float16 / bfloat16 inputs converted once (counted) by asarray.

The producers below are independent of pyfastpim's exporter where it matters: NumPy's buffer
protocol for float16, hand-made ctypes DLManagedTensorVersioned capsules for the import path,
ctypes reads of exported capsules for the export path."""
import ctypes

import numpy as np
import pytest

import pyfastpim
from pyfastpim import memory
from helpers import DLPackOnly, Raises

try:
    import torch
except ImportError:  # numpy-only install: conftest skips the tests that use torch
    torch = None


# ---- the DLPack 1.0 ABI, transcribed from dlpack.h 1.0 with ctypes ----

class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    pass


DELETER_V = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensorVersioned))
DLManagedTensorVersioned._fields_ = [("version", DLPackVersion), ("manager_ctx", ctypes.c_void_p),
                                     ("deleter", DELETER_V), ("flags", ctypes.c_uint64), ("dl_tensor", DLTensor)]
READ_ONLY, IS_COPIED = 1, 2

_capi = ctypes.pythonapi
_capi.PyCapsule_GetPointer.restype = ctypes.c_void_p
_capi.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capi.PyCapsule_GetName.restype = ctypes.c_char_p
_capi.PyCapsule_GetName.argtypes = [ctypes.py_object]
_capi.PyCapsule_New.restype = ctypes.py_object
_capi.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


def capsule_name(cap):
    return _capi.PyCapsule_GetName(cap).decode()


def read_versioned(cap):
    """The managed tensor a capsule holds, viewed in place: valid while the capsule lives (an unconsumed
    capsule's destructor calls the deleter)."""
    ptr = _capi.PyCapsule_GetPointer(cap, b"dltensor_versioned")
    return ctypes.cast(ptr, ctypes.POINTER(DLManagedTensorVersioned)).contents


# Producers whose exported tensor a consumer still holds. DLPack's producer keeps its managed tensor
# alive until the consumer calls the deleter; here that tensor, its shape and the deleter are ctypes
# memory owned by the producer, which a test may drop first (asarray(VersionedProducer(x))): only a
# reference cycle kept it, so a garbage collection before the view's release freed them and the
# deleter call crashed.
_EXPORTING = set()


class VersionedProducer:
    """A DLPack 1.0 producer over a NumPy array, written with ctypes (not pyfastpim's exporter).

    It records the keywords it was called with and counts deleter calls."""

    def __init__(self, arr, flags=0, code=2, bits=None, version=(1, 0)):
        self.arr, self.flags, self.code, self.version = arr, flags, code, version
        self.bits = bits or arr.itemsize * 8
        self.kwargs = None
        self.deleted = 0

    def __dlpack_device__(self):
        return (1, 0)

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        self.kwargs = dict(max_version=max_version, dl_device=dl_device, copy=copy)
        a = self.arr
        self._shape = (ctypes.c_int64 * a.ndim)(*a.shape)
        self._strides = (ctypes.c_int64 * a.ndim)(*[s // a.itemsize for s in a.strides])
        m = DLManagedTensorVersioned()
        m.version = DLPackVersion(*self.version)
        m.flags = self.flags
        m.dl_tensor = DLTensor(a.ctypes.data, DLDevice(1, 0), a.ndim, DLDataType(self.code, self.bits, 1),
                               self._shape, self._strides, 0)

        def deleter(_):
            self.deleted += 1
            _EXPORTING.discard(self)
        self._deleter = DELETER_V(deleter)
        m.deleter = self._deleter
        self._managed = m
        _EXPORTING.add(self)
        return _capi.PyCapsule_New(ctypes.addressof(m), b"dltensor_versioned", None)


# ---- export ----

def test_export_versioned_capsule_shares_memory_and_reports_version():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    a = pyfastpim.asarray(x)
    cap = a.__dlpack__(max_version=(1, 0))
    assert capsule_name(cap) == "dltensor_versioned"
    m = read_versioned(cap)
    assert (m.version.major, m.version.minor) == (1, 0)
    assert m.flags & READ_ONLY == 0 and m.flags & IS_COPIED == 0
    t = m.dl_tensor
    assert t.data == x.ctypes.data and t.ndim == 2 and [t.shape[i] for i in range(2)] == [3, 4]
    assert (t.dtype.code, t.dtype.bits, t.dtype.lanes) == (2, 32, 1)
    assert (t.device.device_type, t.device.device_id) == (1, 0)
    # an older max_version, or none, gives the unversioned capsule
    assert capsule_name(a.__dlpack__()) == "dltensor"
    assert capsule_name(a.__dlpack__(max_version=(0, 8))) == "dltensor"
    assert capsule_name(a.__dlpack__(max_version=(2, 3))) == "dltensor_versioned"


def test_export_read_only_needs_a_versioned_capsule_and_flags_it():
    x = np.arange(5, dtype=np.float64)
    x.flags.writeable = False
    a = pyfastpim.asarray(x)
    assert a.readonly
    with pytest.raises(BufferError, match="max_version"):
        a.__dlpack__()
    cap = a.__dlpack__(max_version=(1, 0))
    m = read_versioned(cap)
    assert m.flags & READ_ONLY and m.dl_tensor.data == x.ctypes.data
    # a copy is writable, so even the unversioned format may carry it
    with memory.trace() as t:
        cap = a.__dlpack__(copy=True)
    assert capsule_name(cap) == "dltensor" and t.by_kind["host_copy"] == (1, x.nbytes)


def test_to_torch_of_a_dtype_torch_lacks_names_it():
    # torch 1.13 has no uint16 tensor: its RuntimeError 'Unsupported kUInt bits 16' named nothing
    a = pyfastpim.asarray(np.arange(3, dtype=np.uint16))
    if hasattr(torch, "uint16"):  # a torch that has one takes it
        np.testing.assert_array_equal(a.to_torch().numpy(), np.arange(3))
        return
    with pytest.raises(TypeError, match=r"^to_torch\(\): .*dtype uint16 .*a\.to_numpy\(\)"):
        a.to_torch()
    np.testing.assert_array_equal(a.to_numpy(), np.arange(3))


def test_to_torch_of_a_read_only_array_gives_advice_that_works():
    # the refusal repeated __dlpack__'s "pass max_version=(1, 0), or copy=True": to_torch() takes neither
    x = np.arange(6, dtype=np.float32)
    x.flags.writeable = False
    a = pyfastpim.asarray(x)
    with pytest.raises(BufferError, match="to_torch") as err:
        a.to_torch()
    msg = str(err.value)
    assert "read-only" in msg and "max_version" not in msg
    assert "torch.from_dlpack(a.__dlpack__(copy=True))" in msg and "a.to_numpy()" in msg
    # the advice: a copy through torch, or a read-only NumPy view
    with memory.trace() as t:
        copied = torch.from_dlpack(a.__dlpack__(copy=True))
    assert t.copies == 1 and copied.data_ptr() != x.ctypes.data
    np.testing.assert_array_equal(copied.numpy(), x)
    view = a.to_numpy()
    assert view.ctypes.data == x.ctypes.data and not view.flags.writeable


def test_export_copy_and_dl_device():
    x = np.arange(6, dtype=np.int32)
    a = pyfastpim.asarray(x)
    with memory.trace() as t:
        cap = a.__dlpack__(max_version=(1, 0), copy=True)
    m = read_versioned(cap)
    assert t.copies == 1 and m.flags & IS_COPIED and m.dl_tensor.data != x.ctypes.data
    got = np.ctypeslib.as_array(ctypes.cast(m.dl_tensor.data, ctypes.POINTER(ctypes.c_int32)), shape=(6,))
    np.testing.assert_array_equal(got, x)
    with memory.trace() as t:
        cap = a.__dlpack__(max_version=(1, 0), copy=False, dl_device=(1, 0))
    m = read_versioned(cap)
    assert t.copies == 0 and m.dl_tensor.data == x.ctypes.data and not m.flags & IS_COPIED
    with pytest.raises(BufferError, match="dl_device"):
        a.__dlpack__(dl_device=(2, 0))
    with pytest.raises(TypeError, match="dl_device"):
        a.__dlpack__(dl_device="cpu")
    with pytest.raises(TypeError, match="max_version"):
        a.__dlpack__(max_version=1)
    with pytest.raises(ValueError, match="stream"):
        a.__dlpack__(stream=1)
    # copy is Optional[bool] (array API): 'no' was truthy and made a copy; a float or a str is no flag
    for bad in ("no", "False", 0.0, float("nan"), [1]):
        with memory.trace() as t, pytest.raises(TypeError, match="^argument 'copy': expected a bool"):
            a.__dlpack__(max_version=(1, 0), copy=bad)
        assert t.copies == 0
    with memory.trace() as t, pytest.raises(ValueError, match="^argument 'copy': expected a bool"):
        a.__dlpack__(max_version=(1, 0), copy=2)
    assert t.copies == 0


@pytest.mark.parametrize("flag", [True, np.True_, np.bool_(True), np.array(True), 1, np.int64(1),
                                  False, np.False_, np.array(False), 0, np.uint8(0), None])
def test_export_copy_reads_as_every_flag(flag):
    # copy refused np.True_ / np.False_ (and 0/1) while every other flag of the library (asarray's writable,
    # check_flag) takes them: it now follows the same rule (pf_as_flag), None included (DLPack: no preference)
    x = np.arange(6, dtype=np.int32)
    a = pyfastpim.asarray(x)
    want = bool(flag) if flag is not None else False
    assert want == (flag is not None and pyfastpim._core.check_flag(flag, "copy"))
    with memory.trace() as t:
        cap = a.__dlpack__(max_version=(1, 0), copy=flag)  # held: its destructor frees what m views
        m = read_versioned(cap)
    assert t.copies == int(want) and bool(m.flags & IS_COPIED) == want
    assert (m.dl_tensor.data != x.ctypes.data) == want


def test_numpy_consumes_our_capsules():
    x = np.arange(4, dtype=np.float32)
    y = np.from_dlpack(pyfastpim.asarray(x))
    assert y.ctypes.data == x.ctypes.data


# ---- import ----

def test_import_versioned_asks_for_1_0_and_keeps_read_only():
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    prod = VersionedProducer(x, flags=READ_ONLY)
    with memory.trace() as t:
        a = pyfastpim.asarray(prod)
    assert prod.kwargs["max_version"] == (1, 0)
    assert t.copies == 0 and a.data_ptr == x.ctypes.data and a.readonly and a.shape == (2, 4)
    np.testing.assert_array_equal(np.asarray(a), x)
    with pytest.raises(ValueError):  # read-only: NumPy gets a read-only view
        np.asarray(a)[0, 0] = 1
    del a
    assert prod.deleted == 1
    with pytest.raises(ValueError, match="read-only"):
        pyfastpim.asarray(VersionedProducer(x, flags=READ_ONLY), writable=True)
    w = pyfastpim.asarray(VersionedProducer(x), writable=True)
    assert not w.readonly and w.data_ptr == x.ctypes.data


def test_import_rejects_a_newer_major_version_and_releases_it():
    prod = VersionedProducer(np.zeros(3, np.float32), version=(2, 0))
    with pytest.raises(BufferError, match="version 2.0"):
        pyfastpim.asarray(prod)
    assert prod.deleted == 1


def test_import_from_pre_1_0_producers_still_works():
    x = np.arange(3, dtype=np.int64)
    a = pyfastpim.asarray(DLPackOnly(pyfastpim.asarray(x)))  # __dlpack__ without max_version
    assert a.data_ptr == x.ctypes.data and not a.readonly


def test_round_trip_through_our_own_versioned_export():
    x = np.arange(6, dtype=np.float32)
    x.flags.writeable = False
    src = pyfastpim.asarray(x)

    class Via:
        def __dlpack__(self, **kw):
            return src.__dlpack__(**kw)

        def __dlpack_device__(self):
            return src.__dlpack_device__()
    b = pyfastpim.asarray(Via())
    assert b.readonly and b.data_ptr == x.ctypes.data


# ---- float16 / bfloat16 ----

def _bf16_bits(values):
    """bfloat16 bit patterns by truncation of exactly representable float32 values."""
    return (np.asarray(values, np.float32).view(np.uint32) >> 16).astype(np.uint16)


def test_float16_from_numpy_is_converted_once_and_counted():
    # every finite half: zero, subnormals, normals, the largest, negative values
    bits = np.arange(0, 1 << 16, dtype=np.uint16)
    h = bits.view(np.float16)
    finite = np.isfinite(h)
    h = h[finite]
    with memory.trace() as t:
        a = pyfastpim.asarray(h)
    assert a.dtype == "float32" and t.copies == 1
    assert t.by_kind["dtype_conversion"] == (1, h.size * 4)
    np.testing.assert_array_equal(np.asarray(a), h.astype(np.float32))
    with memory.trace() as t:
        d = pyfastpim.asarray(h[:100], dtype="float64")
    assert d.dtype == "float64" and t.copies == 1
    np.testing.assert_array_equal(np.asarray(d), h[:100].astype(np.float64))
    special = np.array([np.inf, -np.inf, np.nan], np.float16)
    got = np.asarray(pyfastpim.asarray(special))
    assert got[0] == np.inf and got[1] == -np.inf and np.isnan(got[2])


def test_half_inputs_cannot_be_written_through_or_cast_to_integers():
    h = np.ones(4, np.float16)
    with pytest.raises(ValueError, match="float16"):
        pyfastpim.asarray(h, writable=True)
    with pytest.raises(TypeError, match="float16 to int32"):
        pyfastpim.asarray(h, dtype="int32")


def test_bfloat16_and_float16_through_dlpack():
    vals = np.array([1.5, -3.25, 2.0 ** -130, 1.5 * 2.0 ** 127, 0.0, -2.0 ** -126], np.float32)  # exact in bfloat16
    bits = _bf16_bits(vals)
    with memory.trace() as t:
        a = pyfastpim.asarray(VersionedProducer(bits, code=4, bits=16))  # kDLBfloat
    assert a.dtype == "float32" and t.by_kind["dtype_conversion"] == (1, vals.nbytes)
    np.testing.assert_array_equal(np.asarray(a), vals)
    h = np.array([0.5, -65504.0, 6.0e-8], np.float16)
    b = pyfastpim.asarray(VersionedProducer(h, code=2, bits=16))
    np.testing.assert_array_equal(np.asarray(b), h.astype(np.float32))


def test_torch_half_tensors_are_converted_once():
    x = torch.randn(4, 64, dtype=torch.float32)
    for dt in (torch.float16, torch.bfloat16):
        xh = x.to(dt)
        with memory.trace() as t:
            a = pyfastpim.asarray(xh)
        assert a.dtype == "float32" and t.by_kind["dtype_conversion"] == (1, x.numel() * 4)
        np.testing.assert_array_equal(np.asarray(a), xh.float().numpy())


def test_float16_input_feeds_a_product_like_its_float32_value():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 64)).astype(np.float16)
    w = rng.standard_normal((64, 32)).astype(np.float32)
    y16 = pyfastpim.dpe_matmul(x, w, pyfastpim.DPETensor(seed=5))
    y32 = pyfastpim.dpe_matmul(x.astype(np.float32), w, pyfastpim.DPETensor(seed=5))
    np.testing.assert_array_equal(np.asarray(y16), np.asarray(y32))


def test_tensors_with_the_negative_bit_are_refused_not_read_as_their_negation():
    """torch 1.13's __dlpack__ exports a lazily negated tensor's memory without the sign: every
    entry point read -x (no error). Refused with a TypeError naming the argument, as NumPy does."""
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(0)
    z = torch.complex(torch.randn(5, 64, generator=g), torch.randn(5, 64, generator=g))
    t = z.conj().imag
    assert t.is_neg()
    quiet = dict(write_variation=0.0, read_variation=0.0, vnoise=0.0, rate_stuck_HGS=0.0)
    w = torch.randn(64, 8, generator=g)
    ctx = pyfastpim.AttentionContext(strength=0.5)
    ctx.incoming = np.eye(64, dtype=np.float32)
    for name, call in [("obj", lambda: pyfastpim.asarray(t)),
                       ("x", lambda: pyfastpim.dpe_matmul(t, w, pyfastpim.DPETensor(**quiet))),
                       ("x", lambda: ctx.apply(t))]:
        with pytest.raises(TypeError, match="argument '%s': the tensor has its negative bit set" % name):
            call()
    resolved = t.resolve_neg()
    np.testing.assert_array_equal(np.asarray(pyfastpim.asarray(resolved)), resolved.numpy())
    np.testing.assert_array_equal(np.asarray(pyfastpim.dpe_matmul(resolved, w, pyfastpim.DPETensor(**quiet))),
                                  np.asarray(pyfastpim.dpe_matmul(resolved.numpy(), w.numpy(),
                                                                  pyfastpim.DPETensor(**quiet))))


# ---- malformed producers: refused with the argument's name, the capsule released, never read ----

class Tampered(VersionedProducer):
    """A VersionedProducer whose capsule is altered after it is built (device, data, shape, strides)."""

    def __init__(self, arr, **change):
        super().__init__(arr)
        self.change = change

    def __dlpack__(self, **kw):
        cap = super().__dlpack__(**kw)
        t, c = self._managed.dl_tensor, self.change
        if "device" in c:
            t.device = DLDevice(c["device"], 0)
        if "data" in c:
            t.data = c["data"]
        if "shape" in c:
            self._shape = None if c["shape"] is None else (ctypes.c_int64 * len(c["shape"]))(*c["shape"])
            t.shape = ctypes.cast(self._shape, ctypes.POINTER(ctypes.c_int64))
        if "strides" in c:
            self._strides = (ctypes.c_int64 * len(c["strides"]))(*c["strides"])
            t.strides = self._strides
        return cap


def test_a_capsule_on_another_device_is_refused_even_when_dlpack_device_says_cpu():
    """__dlpack_device__ said (1, 0) but the capsule's tensor lives on CUDA (2): the device pointer was read
    as host memory (a segfault for a real device pointer; here host data, silently accepted)."""
    prod = Tampered(np.arange(6, dtype=np.float32), device=2)
    with pytest.raises(ValueError, match="argument 'obj': .*device type 2"):
        pyfastpim.asarray(prod)
    assert prod.deleted == 1
    assert pyfastpim.asarray(Tampered(np.arange(6, dtype=np.float32), device=3)).shape == (6,)  # kDLCUDAHost


def test_a_capsule_without_data_or_shape_is_refused():
    """A NULL data pointer with elements, or no shape array for ndim > 0, was dereferenced (segfault)."""
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    for change, word in [(dict(data=None), "NULL data"), (dict(shape=None), "no shape")]:
        prod = Tampered(x, **change)
        with pytest.raises(ValueError, match="argument 'obj': .*%s" % word):
            pyfastpim.asarray(prod)
        assert prod.deleted == 1
    empty = pyfastpim.asarray(Tampered(np.zeros((0, 3), np.float32), data=None))  # nothing is read
    assert empty.shape == (0, 3)


@pytest.mark.parametrize("strides", [(2 ** 62, 1), (-2 ** 63, 1), (2 ** 61 + 1, 1)])
def test_element_strides_whose_byte_size_overflows_are_refused(strides):
    """Element strides are scaled to bytes: 2**62 * 4 wrapped to 0 (a silent broadcast of row 0)."""
    prod = Tampered(np.arange(12, dtype=np.float32).reshape(3, 4), strides=strides)
    with pytest.raises(ValueError, match="argument 'obj': .*stride"):
        pyfastpim.asarray(prod)
    assert prod.deleted == 1


def _interface(shape, strides, base):
    return type("Interface", (), dict(__array_interface__=dict(shape=shape, strides=strides, typestr="<f4",
                                                               data=(base.ctypes.data, False), version=3)))()


_BASE = np.arange(12, dtype=np.float32)


@pytest.mark.parametrize("make, shape", [
    (lambda: _interface((1, 3), (2, 4), _BASE), (1, 3)),  # 2 bytes: no multiple of the item size
    (lambda: _interface((3, 1), (4, -4), _BASE), (3, 1)),
    (lambda: _interface((2, 1, 3), (12, 1, 4), _BASE), (2, 1, 3)),
    (lambda: _interface((1, 3), (-2 ** 63, 4), _BASE), (1, 3)),  # int64's lowest: refused as overflowing
    (lambda: _interface((3, 1), (4, 2 ** 63 - 1), _BASE), (3, 1)),
    (lambda: Tampered(_BASE[:3].reshape(1, 3), strides=(2 ** 62, 1)), (1, 3)),  # overflows in bytes
    (lambda: Tampered(_BASE[:3].reshape(3, 1), strides=(1, -7)), (3, 1)),
], ids=["interface-2-bytes", "interface-negative", "interface-3d", "interface-int64-min", "interface-int64-max",
        "dlpack-huge", "dlpack-negative"])
def test_a_contiguous_view_reports_c_strides_whatever_its_size_1_strides(make, shape):
    """A dimension of size 1 takes any stride (NumPy and DLPack consumers ignore it), and such a view is
    C-contiguous: viewed without a copy, and exported with C strides, as NumPy's buffer export reports a
    contiguous array. The exporter's own strides were kept: the buffer said 2 bytes where DLPack said
    0 elements (2 // 4; np.from_dlpack(a).strides (0, 4) against memoryview(a).strides (2, 4)), negative
    strides went out through DLPack, and a DLPack stride of 2**62 elements on the size-1 dimension was
    refused as overflowing in bytes."""
    with memory.trace() as t:
        a = pyfastpim.asarray(make())
    c_strides = np.empty(shape, np.float32).strides
    assert t.copies == 0 and a.data_ptr == _BASE.ctypes.data and a.shape == shape
    assert a.strides == memoryview(a).strides == np.from_dlpack(a).strides == c_strides
    cap = a.__dlpack__(max_version=(1, 0))  # held: its destructor frees what m views
    m = read_versioned(cap)
    assert [m.dl_tensor.strides[i] for i in range(len(shape))] == [s // 4 for s in c_strides]


def test_any_size_1_stride_is_taken_by_every_import_path():
    """check_extent refused a stride of exactly -2**63 on a dimension of size 1 ("its shape and strides
    overflow the address space") through __array_interface__ and the buffer protocol, though no step is
    taken along it (DLPack import takes any: dl_layout). A contiguous one is viewed (C strides), a strided
    one copied, reading index 0 of the size-1 dimension."""
    tb = pytest.importorskip("_testbuffer")
    buf = tb.ndarray([1.0, 2.0, 3.0], shape=[1, 3], format="f", strides=[-2 ** 63, 4])
    assert memoryview(buf).strides == (-2 ** 63, 4)
    with memory.trace() as t:
        a = pyfastpim.asarray(buf)
    assert t.copies == 0 and a.strides == (12, 4)
    np.testing.assert_array_equal(np.asarray(a), [[1, 2, 3]])
    strided = _interface((3, 1, 2), (4, -2 ** 63, 12), _BASE)  # a transposed (2, 3) block, size-1 axis between
    with memory.trace() as t:
        a = pyfastpim.asarray(strided)
    assert t.copies == 1 and a.strides == (8, 8, 4)
    np.testing.assert_array_equal(np.asarray(a), _BASE[:6].reshape(2, 1, 3).transpose(2, 1, 0))


@pytest.mark.parametrize("device, exc", [("cpu", TypeError), (("a", 0), TypeError), ((1,), TypeError),
                                         ((2 ** 70, 0), ValueError),
                                         # the id was never read and a bool passed as an int (the int rule
                                         # refuses it everywhere else)
                                         ((True, 0), TypeError), ((1, False), TypeError), ((1.0, 0), TypeError),
                                         ((1, -1), ValueError), ((1, 2 ** 70), ValueError), ((1, "0"), TypeError)])
def test_a_malformed_dlpack_device_names_the_argument(device, exc):
    """__dlpack_device__ returning junk gave 'device type 0 is not host memory', or a TypeError /
    OverflowError from the int conversion naming no argument."""
    class Junk:
        def __dlpack_device__(self):
            return device

        def __dlpack__(self, **kw):
            raise AssertionError("must not be called")
    with pytest.raises(exc, match="argument 'obj': __dlpack_device__"):
        pyfastpim.asarray(Junk())


def test_an_exception_of_a_dlpack_device_items_own_index_propagates():
    # it was cleared and replaced by "ValueError: ... not a (device_type, device_id) tuple of ints"
    for exc in (ZeroDivisionError("mine"), ValueError("mine"), KeyboardInterrupt("mine")):
        for device in ((Raises(exc), 0), (1, Raises(exc))):
            class Junk:
                def __dlpack_device__(self, device=device):
                    return device

                def __dlpack__(self, **kw):
                    raise AssertionError("must not be called")
            with pytest.raises(BaseException) as info:
                pyfastpim.asarray(Junk())
            assert info.value is exc


def test_dlpack_device_as_int_enum_or_numpy_ints_is_accepted():
    import enum

    class Dev(enum.IntEnum):  # torch returns its DLDeviceType IntEnum
        kDLCPU = 1

    for device in [(Dev.kDLCPU, 0), (np.int64(1), np.int32(0))]:
        class P(VersionedProducer):
            def __dlpack_device__(self, device=device):
                return device
        x = np.arange(4, dtype=np.float32)
        assert pyfastpim.asarray(P(x)).data_ptr == x.ctypes.data


class _Fails:
    """A producer whose __dlpack_device__ (where == "device") or __dlpack__ raises `exc`."""

    def __init__(self, where, exc):
        self.where, self.exc = where, exc

    def __dlpack_device__(self):
        if self.where == "device":
            raise self.exc
        return (1, 0)

    def __dlpack__(self, **kw):
        raise self.exc


def test_a_failing_torch_tensor_names_the_argument_and_interrupts_pass_through():
    """A torch meta tensor's __dlpack_device__ raises ValueError('Unknown device type meta for Dlpack'),
    a sparse tensor's __dlpack__ RuntimeError (torch 1.13; BufferError in torch 2.x) "Can't export tensors with
    layout other than torch.strided": torch's refusals name no argument, and came out so. A bool tensor is refused
    by torch 1.13's __dlpack__ and exported by torch 2.x's (DLPack's bool), which pyfastpim refuses as a dtype:
    both name the argument. Ctrl-C inside a producer must stay a KeyboardInterrupt (it was turned
    into TypeError when raised by __dlpack__)."""
    for where in ("device", "dlpack"):
        with pytest.raises(KeyboardInterrupt):
            pyfastpim.asarray(_Fails(where, KeyboardInterrupt()))
    if torch is not None:
        with pytest.raises(TypeError, match="argument 'obj': its __dlpack_device__\\(\\) failed: .*ValueError.*meta"):
            pyfastpim.asarray(torch.empty(3, device="meta"))
        with pytest.raises(TypeError, match="argument 'obj': its __dlpack__\\(\\) failed: .*(RuntimeError|BufferError)"
                                            ".*layout"):
            pyfastpim.asarray(torch.ones(3).to_sparse())
        with pytest.raises(TypeError, match="argument 'obj': (its __dlpack__\\(\\) failed: .*RuntimeError.*Bool"
                                            "|unsupported DLPack dtype \\(code 6, 8 bits)"):
            pyfastpim.asarray(torch.zeros(3, dtype=torch.bool))


@pytest.mark.parametrize("exc", [ValueError("from user code"), RuntimeError("from user code"),
                                 TypeError("from user code"), ZeroDivisionError("from user code"),
                                 MemoryError("from user code")], ids=lambda e: type(e).__name__)
@pytest.mark.parametrize("where", ["device", "dlpack"])
def test_a_producers_own_exception_propagates(where, exc):
    # any other producer's exception (an Exception) was turned into "TypeError: argument 'obj': its
    # __dlpack__() failed: <class 'ValueError'>: from user code", against the rule for user code
    with pytest.raises(BaseException) as info:
        pyfastpim.asarray(_Fails(where, exc))
    assert info.value is exc
