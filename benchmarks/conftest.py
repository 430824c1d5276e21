"""Benchmark harness: fixed seeds, default thread counts, one JSON for report.py.

Each case sets ``benchmark.group`` and ``benchmark.extra_info['role']``:
``subject`` (pyfastpim), ``reference`` (an implementation of the same
algorithm, e.g. the PyTorch einsum transcription) or ``roofline`` (the bare
arithmetic through OpenBLAS). report.py prints each case's median time and its
ratios to the group's reference and roofline, measured in the same run, with
the case's targets (``extra_info['targets']``): 'roofline' (time / roofline
time, at most), 'speedup_vs_reference' (reference time / time, at least),
'vs:<case>' (time / that case's time, at most) or any other extra_info key
(its value, at most).
"""
import os

import numpy as np
import pytest

# Default: the thread counts a user gets (pyfastpim's default is the CPUs of the affinity mask,
# torch's and OpenBLAS's their own). PYFASTPIM_BENCH_THREADS=n pins pyfastpim and torch to n.
THREADS = int(os.environ["PYFASTPIM_BENCH_THREADS"]) if os.environ.get("PYFASTPIM_BENCH_THREADS") else None


@pytest.fixture(autouse=True)
def _fixed_seed_and_threads():
    import pyfastpim
    np.random.seed(0)
    try:
        import torch
        torch.manual_seed(0)
        if THREADS:
            torch.set_num_threads(THREADS)
    except ImportError:
        pass
    if THREADS:
        pyfastpim.set_num_threads(THREADS)
    yield


def peak_rss_bytes():
    """Peak resident set size of this process (Linux ru_maxrss is in KiB)."""
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def current_rss_bytes():
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.fixture(scope="module")
def operands():
    """x (512, 1024) and W (1024, 1024) of the engine case (engine_case.py); a module may define its own."""
    from engine_case import make_operands
    return make_operands()
