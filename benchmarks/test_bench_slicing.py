"""Slicing a (4096, 4096) float32 matrix, slices (1, 1, 2, 2): time vs one NumPy copy of the input.

Groups: ``slice-input`` (paral (1, 32), quant_gran (1, 32)) and ``slice-weight``
(paral = quant_gran = (32, 32), conductance levels programmed in the same pass).
The roofline of each group is ``np.copy`` of the input, measured in the same run
(target: slicing at most 3x a copy). ``extra_info`` records the core's peak
bytes during one call and the bytes of its outputs: equal means nothing was
allocated beyond the outputs.
"""
import numpy as np
import pytest

import pyfastpim
from pyfastpim import memory

SHAPE = (4096, 4096)
WIDTHS = (1, 1, 2, 2)
CASES = {
    "slice-input": dict(paral_size=(1, 32), quant_gran=(1, 32), g_level=None),
    "slice-weight": dict(paral_size=(32, 32), quant_gran=(32, 32), g_level=16),
}


@pytest.fixture(scope="module")
def data():
    return np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32)


def _slice(x, case):
    return pyfastpim.slice_quantize(x, WIDTHS, case["paral_size"], case["quant_gran"], g_level=case["g_level"])


@pytest.mark.parametrize("group", sorted(CASES))
def test_slicing(benchmark, data, group):
    case = CASES[group]
    with memory.trace() as t:
        r = _slice(data, case)
    out_bytes = sum(a.nbytes for a in r[:6] if a is not None)
    del r
    benchmark.group = group
    benchmark.extra_info.update(role="subject", targets={"roofline": 3.0}, peak_bytes=t.peak_bytes,
                                output_bytes=out_bytes, allocation_beyond_outputs=t.peak_bytes - out_bytes,
                                copies=t.copies, threads=pyfastpim.get_num_threads())
    benchmark(_slice, data, case)
    assert t.peak_bytes == out_bytes and t.copies == 0


@pytest.mark.parametrize("group", sorted(CASES))
def test_numpy_copy(benchmark, data, group):
    benchmark.group = group
    benchmark.extra_info.update(role="roofline")
    benchmark(np.copy, data)
