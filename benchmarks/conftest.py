"""Benchmark harness: fixed seeds, default thread counts, one JSON for report.py.

Each case sets ``benchmark.group`` and ``benchmark.extra_info['role']``: ``subject`` (pyfastpim),
``reference`` (an implementation of the same algorithm, e.g. the PyTorch einsum transcription) or
``roofline`` (the bare arithmetic through OpenBLAS). report.py prints each case's median time and
its ratios to the group's reference and roofline, measured in the same run, with the case's targets
(``extra_info['targets']``): 'roofline' (time / roofline time, at most), 'speedup_vs_reference'
(reference time / time, at least), 'vs:<case>' (time / that case's time, at most) or any other
extra_info key (its value, at most).

Rounds: every case measured with ``benchmark(fn, ...)`` gets the options of the first entry of
``ROUNDS`` whose pattern occurs in its node id (a ``@pytest.mark.benchmark(...)`` on the case itself
wins): at least ``min_rounds`` rounds and ``max_time`` seconds of rounds, after warm-up calls, each
round at least ``min_time`` long (fast calls are looped). Cases measured with ``benchmark.pedantic``
get at least ``REFERENCE_MIN_ROUNDS`` rounds, no warm-up, when their role is ``reference`` (the slow
transcriptions: seconds per call); other pedantic cases get one timed warm-up call and up to
``PEDANTIC_MIN_ROUNDS`` rounds as far as ``PEDANTIC_BUDGET_S`` allows (a case of several seconds per
call keeps the rounds its file asks for). The aim: two back-to-back `make bench` runs on a quiet
machine agree within 15% on every median (report.py prints the previous run beside this one).

Machine: the JSON's ``machine_info`` gets ``pyfastpim`` (CPU model, CPU count, ISA, threads), which
report.py names in the README table."""
import functools
import os
import sys
import time

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # loaded by path too (tests)
from bench_machine import cpu_model  # noqa: E402

# Default: the thread counts a user gets (pyfastpim's default is the CPUs of the affinity mask,
# torch's and OpenBLAS's their own). PYFASTPIM_BENCH_THREADS=n pins pyfastpim and torch to n.
THREADS = int(os.environ["PYFASTPIM_BENCH_THREADS"]) if os.environ.get("PYFASTPIM_BENCH_THREADS") else None


# (node id substring, pytest-benchmark options); first match wins, the last entry is the default.
ROUNDS = [
    ("", dict(min_rounds=10, max_time=1.5, min_time=0.002, warmup=True, warmup_iterations=1)),
]
PEDANTIC_MIN_ROUNDS = 5
PEDANTIC_BUDGET_S = 3.0
REFERENCE_MIN_ROUNDS = 3


def rounds_for(nodeid):
    for pattern, opts in ROUNDS:
        if pattern in nodeid:
            return dict(opts)
    return {}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "benchmark" in getattr(item, "fixturenames", ()) and item.get_closest_marker("benchmark") is None:
            item.add_marker(pytest.mark.benchmark(**rounds_for(item.nodeid)))


def _pedantic(bm, original, target, args=(), kwargs=None, setup=None, rounds=1, warmup_rounds=0, iterations=1):
    if bm.extra_info.get("role") == "reference":
        rounds = max(rounds, REFERENCE_MIN_ROUNDS)
    elif rounds < PEDANTIC_MIN_ROUNDS:
        # one warm-up call, timed: as many more rounds as PEDANTIC_BUDGET_S allows, up to the minimum
        # (a case of several seconds per call keeps the rounds its file asks for)
        a, k = setup() if setup else (args, kwargs)
        t0 = time.perf_counter()
        target(*a, **(k or {}))
        elapsed = max(time.perf_counter() - t0, 1e-9)
        rounds = max(rounds, min(PEDANTIC_MIN_ROUNDS, int(PEDANTIC_BUDGET_S / elapsed)))
    return original(target, args=args, kwargs=kwargs, setup=setup, rounds=rounds, warmup_rounds=warmup_rounds,
                    iterations=iterations)


def cpu_ticks():
    """(all, steal) clock ticks of every CPU since boot (/proc/stat), or None where there is no such file.
    Steal: time the hypervisor ran something else while this VM had work."""
    try:
        with open("/proc/stat") as fh:
            fields = fh.readline().split()
        ticks = [int(v) for v in fields[1:9]]
    except (OSError, ValueError):
        return None
    return (sum(ticks), ticks[7]) if fields and fields[0] == "cpu" and len(ticks) == 8 else None


def steal_pct(t0, t1):
    """Percent of the CPU ticks between two cpu_ticks() readings that were stolen; None without both."""
    if not t0 or not t1 or t1[0] <= t0[0]:
        return None
    return round(100.0 * (t1[1] - t0[1]) / (t1[0] - t0[0]), 2)


@pytest.fixture
def benchmark(benchmark):
    """pytest-benchmark's fixture, with the minimum rounds above for ``pedantic`` cases, recording the share of
    CPU time stolen by the hypervisor while the case ran (``extra_info['steal_pct']``, on Linux): on a VM busy
    elsewhere whole groups of cases slow down together, and report.py shows the steal beside a changed median."""
    benchmark.pedantic = functools.partial(_pedantic, benchmark, benchmark.pedantic)
    t0 = cpu_ticks()
    yield benchmark
    pct = steal_pct(t0, cpu_ticks())
    if pct is not None:
        benchmark.extra_info["steal_pct"] = pct


def pytest_benchmark_update_machine_info(config, machine_info):
    import pyfastpim
    active, detected = pyfastpim.cpu_isa()
    try:
        affinity = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        affinity = os.cpu_count()
    machine_info["pyfastpim"] = dict(cpu_model=cpu_model(), cpu_count=os.cpu_count(), affinity_cpus=affinity,
                                     isa=active, isa_detected=detected, threads=pyfastpim.get_num_threads(),
                                     bench_threads=THREADS)


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
