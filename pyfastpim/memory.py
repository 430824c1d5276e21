"""Memory accounting of the pyfastpim core.

Every byte the C core allocates and every copy it makes is counted:

- ``current_bytes`` / ``peak_bytes``: bytes held by the core now / at most
  since the last :func:`reset_peak`.
- copies by kind, each as ``<kind>_count`` and ``<kind>_bytes``:
  ``host_copy`` (layout change), ``dtype_conversion`` (e.g. float64 ->
  float32), ``host_to_device`` and ``device_to_host`` (OpenCL transfers),
  ``cuda_to_host`` and ``host_to_cuda`` (torch CUDA tensors moved to the
  host kernels and back by :mod:`pyfastpim.memintelli`; counted in Python).

Tests use :func:`trace` to assert zero copies where zero are promised::

    with pyfastpim.memory.trace() as t:
        y = engine(x, w)
    assert t.copies == 0
"""
from . import _core

import os
import threading

COPY_KINDS = ("host_copy", "dtype_conversion", "host_to_device", "device_to_host", "cuda_to_host", "host_to_cuda")
_PY_KINDS = ("cuda_to_host", "host_to_cuda")  # transfers made by torch, counted here
_py_counts = {k + suffix: 0 for k in _PY_KINDS for suffix in ("_count", "_bytes")}
_py_lock = threading.Lock()
os.register_at_fork(after_in_child=_py_lock._at_fork_reinit)  # free in a forked child (see sliced._state_lock)


def _count_transfer(kind, nbytes):
    """Record one transfer of ``nbytes`` of a Python-counted kind ('cuda_to_host' / 'host_to_cuda')."""
    with _py_lock:
        _py_counts[kind + "_count"] += 1
        _py_counts[kind + "_bytes"] += int(nbytes)


def stats():
    """A dict of the core's memory counters (see the module docstring)."""
    s = _core.memory_stats()
    with _py_lock:
        s.update(_py_counts)
    return s


def reset_peak():
    """Set ``peak_bytes`` to ``current_bytes``."""
    _core.memory_reset_peak()


class TraceResult:
    """Figures for one traced block of code.

    Attributes: ``copies`` (total number of copies), ``copy_bytes`` (their
    bytes), ``by_kind`` ({kind: (count, bytes)}), ``allocated_bytes`` (net bytes
    still held by the core that the block allocated), ``peak_bytes`` (highest
    bytes held above the level at entry) and ``start`` / ``end`` (raw stats).
    """

    def __init__(self):
        self.start = self.end = None
        self.copies = self.copy_bytes = 0
        self.by_kind = {k: (0, 0) for k in COPY_KINDS}
        self.allocated_bytes = self.peak_bytes = 0

    def _finish(self, start, end):
        self.start, self.end = start, end
        self.by_kind = {k: (end[k + "_count"] - start[k + "_count"], end[k + "_bytes"] - start[k + "_bytes"])
                        for k in COPY_KINDS}
        self.copies = sum(c for c, _ in self.by_kind.values())
        self.copy_bytes = sum(b for _, b in self.by_kind.values())
        self.allocated_bytes = end["current_bytes"] - start["current_bytes"]
        self.peak_bytes = max(0, end["peak_bytes"] - start["current_bytes"])

    def __repr__(self):
        return ("TraceResult(copies=%d, copy_bytes=%d, allocated_bytes=%d, peak_bytes=%d)"
                % (self.copies, self.copy_bytes, self.allocated_bytes, self.peak_bytes))


class trace:
    """Context manager measuring the core's copies and allocations in a block.

    It resets the peak counter on entry, so traces do not nest.
    """

    def __enter__(self):
        self.result = TraceResult()
        reset_peak()
        self._start = stats()
        return self.result

    def __exit__(self, *exc):
        self.result._finish(self._start, stats())
        return False
