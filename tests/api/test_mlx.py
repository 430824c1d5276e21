"""Real MLX arrays (pip install "mlx[cpu]"; plain `mlx` on Linux has no CPU backend) through
pyfastpim: zero copies where the layout allows, one counted copy where it does not.

MLX exports the buffer protocol (float16 as 'e', bfloat16 as the format 'bfloat16') and
DLPack; both routes are checked. On the Debian interpreter MLX is usually absent: CI runs
these tests with an MLX wheel installed (`make test-venv`, `make test-mlx`)."""
import numpy as np
import pytest

mx = pytest.importorskip("mlx.core", reason='MLX is not installed (pip install "mlx[cpu]")')

import pyfastpim  # noqa: E402
from pyfastpim import memory  # noqa: E402


def _mlx_ptr(a):
    """The address of an MLX array's memory, read through the buffer protocol (NumPy)."""
    return np.asarray(memoryview(a)).ctypes.data


class DLPackOnly:
    """Forces the DLPack route (MLX arrays also export a buffer, which asarray prefers)."""

    def __init__(self, a):
        self.a = a

    def __dlpack__(self, **kw):
        return self.a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()


def _normal(shape, seed=0):
    a = mx.random.normal(shape, key=mx.random.key(seed))
    mx.eval(a)
    return a


def test_mlx_to_pyfastpim_to_numpy_is_zero_copy():
    a = _normal((64, 48))
    with memory.trace() as t:
        p = pyfastpim.asarray(a)
        n = np.asarray(p)
    assert t.copies == 0
    assert p.dtype == "float32" and p.shape == (64, 48)
    assert p.data_ptr == _mlx_ptr(a) == n.ctypes.data
    np.testing.assert_array_equal(n, np.array(a))


def test_mlx_through_dlpack_is_zero_copy():
    a = _normal((5, 7), seed=1)
    with memory.trace() as t:
        p = pyfastpim.asarray(DLPackOnly(a))
    assert t.copies == 0 and p.data_ptr == _mlx_ptr(a)
    np.testing.assert_array_equal(np.asarray(p), np.array(a))


def test_mlx_to_pyfastpim_to_torch_is_zero_copy():
    torch = pytest.importorskip("torch", reason="torch is not installed")
    a = _normal((16, 8), seed=2)
    with memory.trace() as t:
        p = pyfastpim.asarray(a)
        tt = torch.from_dlpack(p)
    assert t.copies == 0 and tt.data_ptr() == p.data_ptr == _mlx_ptr(a)
    np.testing.assert_array_equal(tt.numpy(), np.array(a))


def test_transposed_mlx_array_is_copied_once_and_counted():
    a = _normal((6, 10), seed=3)
    at = a.T  # a strided view: not C-contiguous
    with memory.trace() as t:
        p = pyfastpim.asarray(at)
    assert t.by_kind["host_copy"] == (1, 6 * 10 * 4) and t.copies == 1
    np.testing.assert_array_equal(np.asarray(p), np.array(a).T)
    with pytest.raises(ValueError, match="cannot be written through a copy"):
        pyfastpim.asarray(at, writable=True)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_mlx_half_arrays_are_converted_once(dtype):
    a = _normal((9, 11), seed=4).astype(getattr(mx, dtype))
    mx.eval(a)
    expected = np.array(a.astype(mx.float32))  # MLX's own widening, independent of ours
    for route in (a, DLPackOnly(a)):
        with memory.trace() as t:
            p = pyfastpim.asarray(route)
        assert p.dtype == "float32" and t.by_kind["dtype_conversion"] == (1, 9 * 11 * 4) and t.copies == 1
        np.testing.assert_array_equal(np.asarray(p), expected)


def test_mlx_operands_in_a_product_match_numpy_operands():
    x, w = _normal((8, 64), seed=5), _normal((64, 32), seed=6)
    y_mlx = pyfastpim.dpe_matmul(x, w, pyfastpim.DPETensor(seed=9))
    y_np = pyfastpim.dpe_matmul(np.array(x), np.array(w), pyfastpim.DPETensor(seed=9))
    np.testing.assert_array_equal(np.asarray(y_mlx), np.asarray(y_np))
