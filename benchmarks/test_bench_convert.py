"""The one counted conversion on import (pyfastpim.asarray(x, dtype=...), csrc/python/bind_array.c copy_strided)
against NumPy's ``x.astype(dtype)`` in the same run: a 1024x1024 source in the common layouts (C-contiguous,
rows of a wider array, both strides negative) and dtypes (float64 is NumPy's default; float16, int64, uint8).
``vs_astype_interleaved`` is the median ratio of the two calls timed alternately (interleaved.py). The conversion
goes by rows, in loops the compiler vectorises: float64 -> float32 took 3.0 ms against astype's 0.3-0.4 ms
element by element (ratio ~8-10), ~0.4 ms by rows (ratio ~1.3-1.5, the rest the result's allocation).
A transposed source (a column stride) still goes element by element within each row."""
import numpy as np
import pytest

import pyfastpim
from interleaved import interleaved_ratio

N = 1024
LAYOUTS = {"contiguous": lambda a: a, "rows": lambda a: np.concatenate([a, a], axis=1)[:, 5:5 + N],
           "negative": lambda a: a[::-1, ::-1]}
CASES = [("float64", "float32", "contiguous"), ("float64", "float32", "rows"), ("float64", "float32", "negative"),
         ("float16", "float32", "contiguous"), ("int64", "float32", "contiguous"), ("uint8", "float32", "contiguous")]


@pytest.mark.parametrize("src,dst,layout", CASES)
def test_convert(benchmark, src, dst, layout):
    rng = np.random.default_rng(0)
    a = LAYOUTS[layout]((rng.standard_normal((N, N)) * 100).astype(src))
    benchmark.group = "convert %s -> %s 1024x1024" % (src, dst)
    got = benchmark(pyfastpim.asarray, a, dtype=dst)
    np.testing.assert_array_equal(np.asarray(got), a.astype(dst))
    benchmark.extra_info["vs_astype_interleaved"] = interleaved_ratio(lambda: pyfastpim.asarray(a, dtype=dst),
                                                                      lambda: a.astype(dst))
