"""Zero-copy array exchange and memory accounting (pyfastpim.asarray / Array / memory)."""
import ctypes
import gc
import hashlib
import os
import re
import subprocess
import sys

import numpy as np
import pytest
try:
    import torch
except ImportError:  # numpy-only install: conftest skips the tests that use torch
    torch = None

import pyfastpim
from pyfastpim import memory, physics
from helpers import DLPackOnly, InterfaceOnly


def test_float32_roundtrip_numpy_torch_numpy_shares_one_buffer():
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    with memory.trace() as t:
        arr = pyfastpim.asarray(a)
        tt = torch.from_dlpack(arr)
        back = tt.numpy()
        via_buffer = np.asarray(arr)
    assert t.copies == 0 and t.copy_bytes == 0 and t.allocated_bytes == 0
    assert arr.data_ptr == a.ctypes.data == tt.data_ptr() == back.ctypes.data == via_buffer.ctypes.data
    tt[1, 2] = -7.0  # writes through every view
    assert a[1, 2] == -7.0 and back[1, 2] == -7.0 and via_buffer[1, 2] == -7.0
    assert arr.shape == (4, 6) and arr.strides == (24, 4) and arr.dtype == "float32" and not arr.owns_data


def test_to_numpy_and_to_torch_share_memory():
    a = np.ones((3, 5), dtype=np.float32)
    arr = pyfastpim.asarray(a)
    with memory.trace() as t:
        n = arr.to_numpy()
        tt = arr.to_torch()
    assert t.copies == 0
    assert n.ctypes.data == a.ctypes.data and tt.data_ptr() == a.ctypes.data
    assert tt.dtype == torch.float32 and tuple(tt.shape) == (3, 5)


def test_torch_input_is_viewed_through_dlpack():
    x = torch.randn(5, 7, requires_grad=True)
    with memory.trace() as t:
        arr = pyfastpim.asarray(x)
    assert t.copies == 0
    assert arr.data_ptr == x.data_ptr() and arr.shape == (5, 7)
    np.testing.assert_array_equal(np.asarray(arr), x.detach().numpy())


def test_a_tensor_that_requires_grad_is_not_viewed_writable():
    """asarray(x, writable=True) detached a leaf that requires grad and handed back a writable view:
    writes through it changed x behind autograd (torch refuses in-place changes of such a leaf)."""
    x = torch.randn(5, 7, requires_grad=True)
    with pytest.raises(ValueError, match="argument 'obj': the tensor requires grad"):
        pyfastpim.asarray(x, writable=True)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        x.add_(1.0)  # what torch says to the same write
    w = pyfastpim.asarray(x.detach(), writable=True)  # the explicit way still works, zero-copy
    assert w.data_ptr == x.data_ptr() and not w.readonly
    assert pyfastpim.asarray(x).data_ptr == x.data_ptr()  # reading needs no detach


def test_a_tensor_subclass_is_a_tensor_to_every_entry_point():
    """A user's own torch.Tensor subclass is a tensor (isinstance, as the layers take it) to asarray,
    SlicedData and AttentionContext alike: one check (pyfastpim._torch_check) serves them all. Four copies
    differed: asarray and the attention context took only types named Tensor/Parameter of a torch module
    (asarray then refused a subclass that requires grad with DLPack's error, apply answered NumPy), the
    slicing one any torch-module object with detach and data_ptr, the engine's isinstance."""
    class Own(torch.Tensor):
        pass
    x = torch.randn(4, 6, requires_grad=True).as_subclass(Own)
    assert pyfastpim.asarray(x).data_ptr == x.data_ptr()  # read through detach(), zero-copy
    with pytest.raises(ValueError, match="argument 'obj': the tensor requires grad"):
        pyfastpim.asarray(x, writable=True)
    sd = pyfastpim.SlicedData([1, 1, 2, 4], paral_size=(4, 4), quant_gran=(4, 4))
    sd.slice_data_imp(pyfastpim.DPETensor(), x)
    assert sd._is_torch and isinstance(sd.quantized_data, torch.Tensor)
    c = pyfastpim.AttentionContext(update_rate=0.1, strength=0.5)
    c.incoming = np.eye(6, dtype=np.float32)
    assert isinstance(c.apply(x), torch.Tensor)


def test_float64_input_counts_exactly_one_conversion():
    a = np.random.default_rng(0).standard_normal((8, 9))
    with memory.trace() as t:
        arr = pyfastpim.asarray(a, dtype="float32")
    assert t.by_kind["dtype_conversion"] == (1, 8 * 9 * 4)
    assert t.copies == 1 and arr.owns_data and arr.dtype == "float32"
    np.testing.assert_array_equal(np.asarray(arr), a.astype(np.float32))


def test_float64_without_dtype_request_is_viewed():
    a = np.zeros((3, 3))
    with memory.trace() as t:
        arr = pyfastpim.asarray(a)
    assert t.copies == 0 and arr.dtype == "float64" and arr.data_ptr == a.ctypes.data


@pytest.mark.parametrize("make", [lambda a: a.T, lambda a: a[:, ::2], lambda a: a[::-1]])
def test_noncontiguous_input_counts_exactly_one_host_copy(make):
    a = np.arange(48, dtype=np.float32).reshape(6, 8)
    v = make(a)
    with memory.trace() as t:
        arr = pyfastpim.asarray(v)
    assert t.by_kind["host_copy"] == (1, v.size * 4) and t.copies == 1
    np.testing.assert_array_equal(np.asarray(arr), v)
    assert np.asarray(arr).flags["C_CONTIGUOUS"]


def test_transposed_torch_tensor_counts_one_copy():
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4).t()
    with memory.trace() as t:
        arr = pyfastpim.asarray(x)
    assert t.copies == 1
    np.testing.assert_array_equal(np.asarray(arr), x.numpy())


def test_counters_return_to_baseline_after_free():
    gc.collect()
    base = memory.stats()["current_bytes"]
    arrs = [pyfastpim.asarray(np.ones((100, 100)), dtype="float32") for _ in range(5)]
    assert memory.stats()["current_bytes"] >= base + 5 * 100 * 100 * 4
    tts = [a.to_torch() for a in arrs]  # exports keep the memory alive
    del arrs
    gc.collect()
    assert memory.stats()["current_bytes"] >= base + 5 * 100 * 100 * 4
    assert all(float(t.sum()) == 10000.0 for t in tts)
    del tts
    gc.collect()
    assert memory.stats()["current_bytes"] == base


def test_peak_and_reset_peak():
    memory.reset_peak()
    s0 = memory.stats()
    a = pyfastpim.asarray(np.ones(1000), dtype="float32")
    del a
    s1 = memory.stats()
    assert s1["peak_bytes"] >= s0["current_bytes"] + 4000
    memory.reset_peak()
    assert memory.stats()["peak_bytes"] == memory.stats()["current_bytes"]


def test_array_interface_and_plain_buffers():
    a = np.arange(6, dtype=np.int32).reshape(2, 3)
    arr = pyfastpim.asarray(InterfaceOnly(a))
    assert arr.data_ptr == a.ctypes.data and arr.dtype == "int32" and arr.shape == (2, 3)
    b = bytearray(b"\x01\x02\x03")  # a plain buffer: through a memoryview (bytes / bytearray are no numbers,
    arr = pyfastpim.asarray(memoryview(b), writable=True)  # test_data_arguments.py)
    assert arr.dtype == "uint8" and arr.shape == (3,)
    np.asarray(arr)[0] = 9
    assert b[0] == 9


@pytest.mark.parametrize("shape, strides", [
    ((2 ** 40, 2 ** 40), None),  # C strides of this shape overflow: computed saturating, then rejected
    ((2, 2 ** 62, 8), None),
    ((3, 4), (2 ** 62, 4)),
    ((3, 4), (-2 ** 63, 4)),
])
def test_an_interface_whose_extent_overflows_is_rejected(shape, strides):
    """An exporter can claim any shape and strides over its pointer: sizes and offsets that overflow
    Py_ssize_t are a ValueError naming the argument (and, under make sanitize, no signed overflow on
    the way)."""
    good = np.arange(12, dtype=np.float32).reshape(3, 4)

    class Liar:
        __array_interface__ = dict(good.__array_interface__, shape=shape, strides=strides)
    with pytest.raises(ValueError, match="argument 'obj'.*overflow"):
        pyfastpim.asarray(Liar())


@pytest.mark.parametrize("bad, exc, word", [
    (np.zeros(3, dtype=np.complex64), TypeError, "obj"),
    (np.zeros(3, dtype=np.complex128), TypeError, "obj"),
    (object(), TypeError, "obj"),
    (np.zeros(3, dtype=">f4"), ValueError, "byte order"),
    (["not", "a", "buffer"], TypeError, "obj"),
])
def test_bad_input_raises_clear_errors(bad, exc, word):
    with pytest.raises(exc, match=word):
        pyfastpim.asarray(bad)


def test_float64_beyond_float32_is_refused_not_rounded_to_infinity():
    # a finite float64 beyond float32's range was cast to an infinity without a word: an input value the
    # caller never gave (quantization then blamed "NaN or infinity", the attention kernels counted it as 0)
    big = float(np.finfo(np.float32).max)
    for bad, shown in ((1e39, "1e+39"), (-1e300, "-1e+300"), (3.4028235677973366e38, "3.4028235677973366e+38")):
        for make in (lambda v: np.array([1.0, 2.0, v]), lambda v: np.array([1.0, 0.0, 2.0, 0.0, v, 0.0])[::2]):
            with pytest.raises(ValueError, match=r"argument 'obj': values must be finite in float32.*value %s "
                               r"\(element 2\) is beyond float32's range" % re.escape(shown)):
                pyfastpim.asarray(make(bad), dtype="float32")
    # 3.4028235677973366e38 is float32's largest number plus half an ulp (a tie rounding to infinity); what
    # rounds to the largest number is taken, and NaN and infinities keep their meaning
    edge = np.array([3.4028235677973362e38, -big, np.inf, -np.inf, np.nan, 1e-46])
    got = np.asarray(pyfastpim.asarray(edge, dtype="float32"))
    np.testing.assert_array_equal(got, edge.astype(np.float32))


def test_readonly_buffer_where_writing_is_needed():
    a = np.zeros(4, dtype=np.float32)
    a.flags.writeable = False
    with pytest.raises(ValueError, match="obj.*read-only"):
        pyfastpim.asarray(a, writable=True)
    with pytest.raises(ValueError, match="read-only"):
        pyfastpim.asarray(memoryview(b"abc"), writable=True)
    arr = pyfastpim.asarray(a)  # reading is fine
    assert arr.readonly
    with pytest.raises(BufferError):  # an unversioned capsule cannot say read-only
        arr.__dlpack__()
    if not _torch_asks_for_versioned_capsules():  # torch 1.13: it asks for the unversioned one, refused
        with pytest.raises(BufferError):
            torch.from_dlpack(arr)
    # (torch 2.x asks for a versioned capsule, flagged read-only (test_dlpack.py), and takes it as it takes a
    # read-only NumPy array: its flag is torch's to honour)


def _torch_asks_for_versioned_capsules():
    asked = {}

    class Probe:
        def __dlpack_device__(self):
            return (1, 0)

        def __dlpack__(self, **kwargs):
            asked.update(kwargs)
            raise BufferError("probe")

    with pytest.raises(BufferError):
        torch.from_dlpack(Probe())
    return asked.get("max_version") is not None


def test_writable_request_cannot_be_met_by_a_copy():
    with pytest.raises(ValueError, match="obj"):
        pyfastpim.asarray(np.zeros((3, 3), dtype=np.float32).T, writable=True)
    with pytest.raises(ValueError, match="obj"):
        pyfastpim.asarray(np.zeros(3), dtype="float32", writable=True)


def test_bad_dtype_argument():
    with pytest.raises(TypeError, match="dtype"):
        pyfastpim.asarray(np.zeros(3), dtype="complex128")
    with pytest.raises(TypeError, match="float to integer"):
        pyfastpim.asarray(np.zeros(3), dtype="int32")


@pytest.mark.parametrize("dtype", ["float32", "float64", "uint8", "int8", "int16", "uint16", "int32", "int64"])
def test_every_supported_dtype_roundtrips(dtype):
    a = (np.arange(10) % 7).astype(dtype).reshape(2, 5)
    arr = pyfastpim.asarray(a)
    assert arr.dtype == dtype and arr.data_ptr == a.ctypes.data
    np.testing.assert_array_equal(arr.to_numpy(), a)
    if dtype != "uint16":  # torch 1.13 has no uint16
        np.testing.assert_array_equal(arr.to_torch().numpy(), a)


def test_zero_size_and_scalar_arrays():
    arr = pyfastpim.asarray(np.zeros((0, 4), dtype=np.float32))
    assert arr.shape == (0, 4) and arr.size == 0
    assert np.asarray(arr).shape == (0, 4)
    s = pyfastpim.asarray(np.float32(3.5))
    assert s.shape == () and float(np.asarray(s)) == 3.5


def test_cuda_like_dlpack_device_is_rejected():
    class FakeCuda:
        def __dlpack_device__(self):
            return (2, 0)

        def __dlpack__(self, stream=None):
            raise AssertionError("must not be called")
    with pytest.raises(ValueError, match="obj.*host memory"):
        pyfastpim.asarray(FakeCuda())


def test_import_prints_no_warnings(tmp_path):
    # `-c` puts the working directory first on sys.path: run where the imported package lives
    pkg_root = os.path.dirname(os.path.dirname(os.path.abspath(pyfastpim.__file__)))
    r = subprocess.run([sys.executable, "-W", "error", "-c", "import pyfastpim"], capture_output=True, text=True,
                       cwd=pkg_root)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "" and r.stderr == ""


def test_thread_controls_and_isa():
    old = pyfastpim.get_num_threads()
    with pyfastpim.threads(1):
        assert pyfastpim.get_num_threads() == 1
    assert pyfastpim.get_num_threads() == old
    with pytest.raises(ValueError, match="n"):
        pyfastpim.set_num_threads(0)
    active, detected = pyfastpim.cpu_isa()
    assert active in ("generic", "avx2", "avx512") and detected in ("generic", "avx2", "avx512")
    with pytest.raises(ValueError, match="isa"):
        pyfastpim.set_isa_limit("sse9")


def test_sanitized_runs_use_the_sanitized_build():
    # `make sanitize` must exercise the instrumented extension, not the in-place one
    import os
    if os.environ.get("PYFASTPIM_SANITIZED") != "1":
        pytest.skip("only meaningful under make sanitize")
    assert "sanitize" in pyfastpim._core.__file__


@pytest.mark.parametrize("wrap", [InterfaceOnly, DLPackOnly, pyfastpim.asarray], ids=["iface", "dlpack", "Array"])
def test_operands_without_shape_or_slicing_work_in_every_entry_point_without_copies(wrap, monkeypatch):
    """asarray takes __array_interface__ and DLPack exporters and pyfastpim.Array, but the product entry
    points read `x.shape` (AttributeError; weights: 'must be 2-D, got 0 dimensions') and sliced big
    batches with x[a:b] (TypeError: 'pyfastpim.Array' object is not subscriptable)."""
    from pyfastpim import DPETensor, SlicedData, dpe
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 8, 64)).astype(np.float32)
    w = rng.standard_normal((64, 16)).astype(np.float32)
    img = rng.standard_normal((2, 4, 6, 6)).astype(np.float32)
    eng = DPETensor(write_variation=0.0, read_variation=0.0, vnoise=0.0, rate_stuck_HGS=0.0)  # calls repeat
    ref = pyfastpim.dpe_matmul(x, w, eng)
    with memory.trace() as t:
        got = pyfastpim.dpe_matmul(wrap(x), wrap(w), eng)
    assert t.copies == 0 and isinstance(got, np.ndarray)
    np.testing.assert_array_equal(got, ref)
    monkeypatch.setattr(dpe, "_CHUNK_CODE_BYTES", 1000)  # the chunked path: one batch item at a time
    np.testing.assert_array_equal(pyfastpim.dpe_matmul(wrap(x), w, eng), ref)
    ws = SlicedData([1, 1, 2, 2], is_weight=True, paral_size=(32, 32), quant_gran=(32, 32))
    ws.slice_data_imp(eng, wrap(w))
    assert ws.shape == (64, 16)
    out, _ = eng.forward_linear(wrap(x), ws, [1, 1, 2, 2])
    np.testing.assert_array_equal(out, eng.forward_linear(x, ws, [1, 1, 2, 2])[0])
    wc = SlicedData([1, 1, 2, 2], is_weight=True, paral_size=(32, 32), quant_gran=(32, 32))
    wc.slice_data_imp(eng, rng.standard_normal((4 * 9, 16)).astype(np.float32))
    np.testing.assert_array_equal(eng.forward_conv2d(wrap(img), wc, 3, input_paral_size=(1, 32))[0],
                                  eng.forward_conv2d(img, wc, 3, input_paral_size=(1, 32))[0])
    with pytest.raises(TypeError, match="argument 'data': list exposes no buffer"):
        ws.slice_data_imp(eng, [[1.0]])
    with pytest.raises(TypeError, match="argument 'x': list exposes no buffer"):
        eng.forward_linear([[1.0] * 64], ws, [1, 1, 2, 2])


class _PyBuffer(ctypes.Structure):
    _fields_ = [("buf", ctypes.c_void_p), ("obj", ctypes.py_object), ("len", ctypes.c_ssize_t),
                ("itemsize", ctypes.c_ssize_t), ("readonly", ctypes.c_int), ("ndim", ctypes.c_int),
                ("format", ctypes.c_char_p), ("shape", ctypes.POINTER(ctypes.c_ssize_t)),
                ("strides", ctypes.POINTER(ctypes.c_ssize_t)), ("suboffsets", ctypes.c_void_p),
                ("internal", ctypes.c_void_p)]


PyBUF_SIMPLE, PyBUF_ND, PyBUF_STRIDES = 0, 0x8, 0x18
PyBUF_C_CONTIGUOUS, PyBUF_F_CONTIGUOUS, PyBUF_ANY_CONTIGUOUS = 0x20 | 0x18, 0x40 | 0x18, 0x80 | 0x18


def _get_buffer(obj, flags):
    """(ndim, shape or None, strides or None, len) of obj's buffer for a request with `flags`."""
    api = ctypes.pythonapi
    api.PyObject_GetBuffer.argtypes = [ctypes.py_object, ctypes.POINTER(_PyBuffer), ctypes.c_int]
    api.PyBuffer_Release.argtypes = [ctypes.POINTER(_PyBuffer)]
    b = _PyBuffer()
    api.PyObject_GetBuffer(obj, ctypes.byref(b), flags)  # ctypes.pythonapi raises the exporter's exception
    try:
        shape = [b.shape[i] for i in range(b.ndim)] if b.shape else None
        strides = [b.strides[i] for i in range(b.ndim)] if b.strides else None
        return b.ndim, shape, strides, b.len
    finally:
        api.PyBuffer_Release(ctypes.byref(b))


def test_buffer_requests_get_what_they_ask_for():
    """A PyBUF_SIMPLE request (hashlib, 'y*' arguments) got ndim 2 with no shape, which CPython's
    PyBuffer_IsContiguous dereferences (segfault) and hashlib refuses ('Buffer must be single
    dimension'); a Fortran-contiguous request got the C-ordered strides instead of a BufferError."""
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    a = pyfastpim.asarray(x)
    ndim, shape, strides, n = _get_buffer(a, PyBUF_SIMPLE)
    assert (ndim <= 1 or shape is not None) and strides is None and n == x.nbytes
    assert hashlib.sha256(a).hexdigest() == hashlib.sha256(x.tobytes()).hexdigest()
    assert _get_buffer(a, PyBUF_ND)[:3] == (2, [2, 3], None)
    for flags in (PyBUF_STRIDES, PyBUF_C_CONTIGUOUS, PyBUF_ANY_CONTIGUOUS):
        assert _get_buffer(a, flags)[:3] == (2, [2, 3], [12, 4])
    with pytest.raises(BufferError, match="Fortran"):
        _get_buffer(a, PyBUF_F_CONTIGUOUS)
    for one_d in (pyfastpim.asarray(x[0]), pyfastpim.asarray(x[:, :1]), pyfastpim.asarray(x[:0])):
        assert _get_buffer(one_d, PyBUF_F_CONTIGUOUS)[1] == list(one_d.shape)  # also Fortran-contiguous
    assert _get_buffer(pyfastpim.asarray(np.float32(2)), PyBUF_SIMPLE)[:2] == (0, None)


def test_a_single_byte_format_takes_any_byte_order():
    # '>B' (a big-endian machine's ctypes uint8 array, or '!b'): one byte has no byte order, and NumPy
    # reads it as uint8 / int8, as a '>u1' typestr (which asarray takes); the buffer route refused it as
    # big-endian
    tb = pytest.importorskip("_testbuffer")
    for kind in "Bb":
        for order in "<>=!@":
            items = tb.ndarray(list(range(6)), shape=[6], format=order + kind)
            a = pyfastpim.asarray(items)
            assert a.dtype == np.asarray(items).dtype.name and a.data_ptr == np.asarray(items).ctypes.data
            np.testing.assert_array_equal(np.asarray(a), np.arange(6))
    for fmt in (">H", "!H"):  # two bytes do have one
        with pytest.raises(ValueError, match="argument 'obj': non-native .big-endian. byte order"):
            pyfastpim.asarray(tb.ndarray(list(range(6)), shape=[6], format=fmt))


def test_a_non_numpy_operand_needing_layout_and_dtype_changes_is_copied_once():
    """One counted copy (layout and dtype together), as for a NumPy operand: not a layout copy then a
    dtype conversion."""
    from pyfastpim import DPETensor
    rng = np.random.default_rng(1)
    x = rng.standard_normal((64, 8)).T  # float64, Fortran order
    w = rng.standard_normal((64, 16)).astype(np.float32)
    eng = DPETensor(write_variation=0.0, read_variation=0.0, vnoise=0.0, rate_stuck_HGS=0.0)
    with memory.trace() as t:
        ref = pyfastpim.dpe_matmul(x, w, eng)
    with memory.trace() as t2:
        got = pyfastpim.dpe_matmul(InterfaceOnly(x), w, eng)
    assert t.copies == t2.copies == 1 and t2.by_kind["dtype_conversion"] == (1, 64 * 8 * 4)
    np.testing.assert_array_equal(got, ref)


class _Interface:
    """An __array_interface__ of any shape and strides over no memory (data pointer 0)."""

    def __init__(self, shape, strides=None, readonly=False):
        self.__array_interface__ = dict(shape=shape, typestr="<f4", data=(0, readonly), strides=strides, version=3)


_HUGE_EMPTY = ((2 ** 62, 0, 2 ** 62), (0, 2 ** 62))


def _buffer_of(shape, strides=None):
    """A buffer-protocol exporter of any shape (CPython's _testbuffer: neither NumPy nor memoryview
    builds a huge empty shape)."""
    tb = pytest.importorskip("_testbuffer")
    return tb.ndarray([1.0], shape=shape, format="f", **({} if strides is None else dict(strides=strides)))


@pytest.mark.parametrize("shape", _HUGE_EMPTY)
def test_a_huge_empty_shape_is_refused_as_numpy_refuses_it(shape):
    """NumPy refuses a shape whose nonzero dimensions overflow the address space even when a 0 leaves it
    empty; (2**62, 0, 2**62) was refused with a message about strides ("overflow the address space
    (dimension 0: size ..., stride 9223372036854775807)", saturated C strides), (0, 2**62) was taken
    with a saturated stride NumPy could not view."""
    with pytest.raises(ValueError, match="too big"):
        np.empty(shape, np.float32)
    msg = r"argument 'obj': shape \(%s\) is too big: its nonzero dimensions" % ", ".join(map(str, shape))
    for producer in (_Interface(shape), _buffer_of(shape)):
        with pytest.raises(ValueError, match=msg):
            pyfastpim.asarray(producer)


@pytest.mark.parametrize("shape", _HUGE_EMPTY)
def test_a_huge_empty_torch_shape_is_refused_as_numpy_refuses_it(shape):
    """torch makes such a tensor (strides (2**62, 2**62, 1)): DLPack import said "DLPack stride ... of
    dimension 0 overflows in bytes", or took (0, 2**62) with strides NumPy could not view."""
    t = torch.empty(shape)
    with pytest.raises(ValueError, match=r"argument 'obj': shape \(.*\) is too big"):
        pyfastpim.asarray(t)


def test_an_empty_array_is_viewed_whatever_its_strides():
    """Any empty array is C-contiguous (NumPy says so too): a permuted empty torch tensor or an empty
    buffer with zero strides cost a counted copy (of 0 bytes), and the copy dropped the read-only flag;
    a big empty shape NumPy takes is taken, with C strides NumPy can view."""
    producers = [(_buffer_of((2, 0, 3), strides=(0, 0, 0)), True), (_Interface((2, 0, 3), (0, 0, 0)), False),
                 (_Interface((0, 2 ** 61 - 1), (2 ** 62, 4), readonly=True), True),
                 (torch.empty((3, 0, 2)).permute(2, 1, 0), False)]
    for producer, readonly in producers:
        with memory.trace() as t:
            a = pyfastpim.asarray(producer)
        assert t.copies == 0 and not a.owns_data and a.readonly == readonly, (producer, t.by_kind)
        ref = np.empty(a.shape, np.float32)
        assert a.strides == pyfastpim.asarray(ref).strides and a.size == 0  # C strides, as NumPy exports them
        assert np.asarray(a).shape == ref.shape


def test_arrays_pickle_and_copy_with_counted_copies():
    """pickle, copy.copy and copy.deepcopy of a pyfastpim.Array raised "cannot pickle 'pyfastpim.Array'
    object" (NumPy arrays and torch tensors pickle). Now an Array owning a copy of the elements, with the
    same dtype, shape and read-only flag; the copy out and the copy back are counted."""
    import copy
    import pickle
    for dt in (np.float32, np.float64, np.uint8, np.int8, np.int16, np.uint16, np.int32, np.int64):
        x = np.arange(12, dtype=dt).reshape(3, 4)
        for readonly in (False, True):
            x.flags.writeable = not readonly
            a = pyfastpim.asarray(x)
            for proto in range(pickle.HIGHEST_PROTOCOL + 1):
                with memory.trace() as t:
                    b = pickle.loads(pickle.dumps(a, protocol=proto))
                assert t.by_kind["host_copy"] == (2, 2 * x.nbytes) and t.copies == 2
                assert (b.shape, b.dtype, b.readonly) == (a.shape, a.dtype, readonly) and b.owns_data
                assert b.data_ptr != a.data_ptr
                np.testing.assert_array_equal(np.asarray(b), x)
            for c in (copy.copy(a), copy.deepcopy(a)):
                assert c.data_ptr != a.data_ptr and c.readonly == readonly
                np.testing.assert_array_equal(np.asarray(c), x)
    for shape in ((), (0,), (2, 0, 3)):
        b = pickle.loads(pickle.dumps(pyfastpim.asarray(np.zeros(shape, np.float32))))
        assert b.shape == shape and b.dtype == "float32"
    # what a pickle holds is checked (no read past the data, no bad shape)
    with pytest.raises(ValueError, match="argument 'data': 1 bytes for shape"):
        pyfastpim.Array._rebuild(b"x", "float32", (1,), False)
    with pytest.raises(ValueError, match="argument 'shape'"):
        pyfastpim.Array._rebuild(b"", "float32", (-1,), False)
    with pytest.raises(ValueError, match="argument 'shape'"):
        pyfastpim.Array._rebuild(b"", "float32", (2 ** 62, 0, 2 ** 62), False)
    with pytest.raises(TypeError, match="argument 'dtype'"):
        pyfastpim.Array._rebuild(b"", "float16", (0,), False)


def test_dtype_takes_numpy_spellings_and_refuses_a_byte_swapped_one():
    """dtype='f4', 'float', 'double', 'single' raised "unsupported dtype" though NumPy (and dtype=float,
    np.dtype('f4')) read them; numpy.dtype('>f4') (named 'float32') was taken as native float32, so
    the caller asking for big-endian bytes got little-endian ones without a word."""
    x = np.arange(4, dtype=np.float64)
    for spelling, name in (("f4", "float32"), ("<f4", "float32"), ("single", "float32"), ("float", "float64"),
                           ("double", "float64"), ("=f8", "float64"), ("i4", "int32"), ("u1", "uint8")):
        src = x if name.startswith("float") else x.astype(np.int64)
        a = pyfastpim.asarray(src, dtype=spelling)
        assert a.dtype == name and np.asarray(a).dtype == np.dtype(spelling)
        np.testing.assert_array_equal(np.asarray(a), src.astype(spelling))
    for swapped in (">f4", np.dtype(">f4"), np.dtype(">f8")):
        with pytest.raises(ValueError, match="argument 'dtype': non-native"):
            pyfastpim.asarray(x, dtype=swapped)
        with pytest.raises(ValueError, match="argument 'dtype': non-native"):
            pyfastpim.Array(x, dtype=swapped)
    # unsupported ones still name the caller's spelling
    for bad, shown in (("bool", "bool"), ("U5", "U5"), ("float16", "float16"), ("uint64", "uint64")):
        with pytest.raises(TypeError, match="argument 'dtype': unsupported dtype '%s'" % shown):
            pyfastpim.asarray(x, dtype=bad)


def _data_entry_points():
    w = np.ones((4, 2), np.float32)
    ctx = pyfastpim.AttentionContext(embed_dim=4, update_rate=0.1, strength=0.5)
    return {
        "obj": lambda v: pyfastpim.asarray(v),
        "x": lambda v: pyfastpim.dpe_matmul(v, w, pyfastpim.DPETensor()),
        "data": lambda v: pyfastpim.SlicedData((1, 1, 2)).slice_data_imp(pyfastpim.DPETensor(), v),
        "G": lambda v: physics.drift_conductance(v, 10.0),
        "y": lambda v: ctx.update_outgoing(np.ones((4, 4), np.float32), v),
    }


@pytest.mark.parametrize("arg", sorted(_data_entry_points()))
def test_a_datetime_array_is_an_error_naming_the_argument(arg):
    # NumPy's buffer export refused it with "ValueError: cannot include dtype 'M' in a buffer", naming nothing
    with pytest.raises(TypeError, match="^argument '%s': its buffer export failed: .*dtype 'M'" % arg):
        _data_entry_points()[arg](np.zeros((4, 4), "datetime64[D]"))


@pytest.mark.parametrize("dtype", ["datetime64[s]", "timedelta64[s]"])
def test_a_writable_datetime_array_is_not_called_read_only(dtype):
    # NumPy refuses its buffer with a ValueError, which the writable path took for "read-only" (found by review)
    a = np.zeros(4, dtype)
    assert a.flags.writeable
    with pytest.raises(TypeError, match="^argument 'obj': its buffer export failed: .*dtype '[Mm]'"):
        pyfastpim.asarray(a, writable=True)
    ro = np.zeros(4, np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="^argument 'obj': a writable buffer is required but numpy.ndarray is read-only"):
        pyfastpim.asarray(ro, writable=True)


@pytest.mark.parametrize("arg", sorted(_data_entry_points()))
def test_a_masked_array_is_refused_not_read_with_its_masked_elements(arg):
    # its buffer holds the masked elements: they were read as data (a silently wrong result), where an
    # __array_interface__ with a 'mask' is refused
    m = np.ma.masked_array(np.ones((4, 4), np.float32), mask=np.eye(4, dtype=bool))
    with pytest.raises(ValueError, match="^argument '%s': a masked array is not supported" % arg):
        _data_entry_points()[arg](m)
    _data_entry_points()[arg](m.filled(0.0))  # the data with the mask applied


@pytest.mark.parametrize("arg", ["x", "x_vec", "y"])
def test_attention_data_given_as_lists_are_refused_with_the_reason(arg):
    # the rule of every product entry point's data (dpe_matmul, slice_data_imp): what asarray takes, shared
    # without copies; the message now says so for a list, and how to make the array
    ctx = pyfastpim.AttentionContext(embed_dim=4, update_rate=0.1, strength=0.5)
    ctx.incoming = np.eye(4, dtype=np.float32)
    rows = [[1.0, 2.0, 3.0, 4.0]]
    call = {"x": lambda: ctx.apply(rows), "x_vec": lambda: ctx.apply_step(rows[0]),
            "y": lambda: ctx.update_outgoing(np.ones((1, 4), np.float32), rows)}[arg]
    with pytest.raises(TypeError, match="^argument '%s': list exposes no buffer.*shared without copies.*"
                       "numpy.asarray" % arg):
        call()
    np.testing.assert_array_equal(ctx.apply(np.asarray(rows, np.float32)), np.asarray(rows) * (1 + 0.5 / 4))


def _layouts(base):
    """base (2-D, 6x8) in the layouts a conversion meets: C-contiguous, rows of a wider array, both strides
    negative, a column stride, the transpose, 3-D with dimensions of size 1, one element, and empty."""
    wide = np.zeros((6, 16), dtype=base.dtype)
    wide[:, ::2] = base
    return {"contiguous": base, "rows": np.concatenate([base, base], axis=1)[:, 3:11], "negative": base[::-1, ::-1],
            "every other column": wide[:, ::2], "transposed": base.T, "size-1 dims": base.reshape(6, 1, 8, 1)[:, :, ::3],
            "one": base[2:3, 5:6], "empty": base[:0], "empty inner": base[:, :0]}


def _conversion_sources():
    rng = np.random.default_rng(7)
    f32max = float(np.finfo(np.float32).max)
    f64 = rng.standard_normal(48) * 10.0 ** rng.integers(-45, 38, 48)
    # float32's largest number, the largest double that rounds to it, subnormals, zeros, NaN, infinities
    f64[:10] = [f32max, -3.4028235677973362e38, 1e-46, -0.0, 0.0, np.nan, np.inf, -np.inf, 1.5e-45, 7e-46]
    i64 = rng.integers(-2 ** 63, 2 ** 63 - 1, 48, dtype=np.int64)
    i64[:4] = [2 ** 53 + 2 ** 29 + 1, -(2 ** 53 + 2 ** 29 + 1), 2 ** 63 - 1, -2 ** 63]  # one rounding, not two
    f16 = rng.integers(0, 2 ** 16, 48, dtype=np.uint16)
    f16[:8] = [0x7c01, 0xfc01, 0x7e00, 0x7d55, 0x0001, 0x83ff, 0x7c00, 0x0400]  # NaN payloads, subnormals, inf
    out = {"float64": f64, "float32": f64.astype(np.float32), "float16": f16.view(np.float16), "int64": i64}
    for t in ("int8", "uint8", "int16", "uint16", "int32"):
        info = np.iinfo(t)
        out[t] = rng.integers(info.min, info.max, 48, endpoint=True).astype(t)
        out[t][:2] = [info.min, info.max]
    return {k: v.reshape(6, 8) for k, v in out.items()}


def _bits(a):
    return a.view("u%d" % a.dtype.itemsize) if a.dtype.kind == "f" else a


def test_conversions_are_numpys_astype_bit_for_bit_in_every_layout():
    # the conversion goes by rows now (loops the compiler vectorises: float64 -> float32 was 10x slower than
    # NumPy's astype); every source dtype into every destination it converts to, in each layout, must be
    # NumPy's astype bit for bit. Before, an int64 rounded twice to float32 (through float64: 2**53 + 2**29
    # + 1 gave 2**53, not 2**53 + 2**30) and a float16 NaN lost its payload
    for sname, base in _conversion_sources().items():
        dests = ["float32", "float64"] if sname.startswith("float") else \
            ["float32", "float64", "int64"] + [t for t in ("int8", "uint8", "int16", "uint16", "int32")
                                                if np.can_cast(base.dtype, t)]
        for dname in dests:
            for lname, a in _layouts(base).items():
                got = np.asarray(pyfastpim.asarray(a, dtype=dname))
                want = a.astype(dname)
                assert got.shape == want.shape and got.dtype == want.dtype, (sname, dname, lname)
                assert got.flags.c_contiguous
                if sname == "float16" and dname == "float64":  # a signalling NaN goes quiet through float32
                    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
                    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
                    got, want = np.nan_to_num(got), np.nan_to_num(want)
                np.testing.assert_array_equal(_bits(got), _bits(want), err_msg="%s -> %s, %s" % (sname, dname, lname))


def test_refused_conversion_names_the_c_order_index_in_every_layout():
    # the rows only say that something is refused; the element-by-element scan then finds the first one in C
    # order, whatever the layout (one bad value in the last row, or in a later row of a transposed array)
    edge = 3.4028235677973366e38  # float32's largest number plus half an ulp: the first that rounds to inf
    for value, dtype, shown in ((edge, "float32", "3.4028235677973366e+38"), (-1e39, "float32", "-1e+39")):
        base = np.zeros((6, 8))
        base[4, 3] = value
        base[5, 7] = np.inf  # an infinity given as one is kept, not refused
        for lname, a in _layouts(base).items():
            if not (np.isfinite(a) & (a != 0)).any():
                np.testing.assert_array_equal(np.asarray(pyfastpim.asarray(a, dtype=dtype)), a.astype(dtype))
                continue
            k = int(np.ravel_multi_index(np.nonzero(np.isfinite(a) & (a != 0)), a.shape)[0])
            with pytest.raises(ValueError, match=r"argument 'obj': .*value %s \(element %d\) is beyond float32"
                               % (re.escape(shown), k)):
                pyfastpim.asarray(a, dtype=dtype)
    ints = np.zeros((6, 8), dtype=np.int64)
    ints[3, 6] = 256
    for lname, a in _layouts(ints).items():
        if not a.any():
            continue
        k = int(np.ravel_multi_index(np.nonzero(a), a.shape)[0])
        with pytest.raises(ValueError, match=r"argument 'obj': value 256 \(element %d\) does not fit uint8" % k):
            pyfastpim.asarray(a, dtype="uint8")
