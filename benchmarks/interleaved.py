"""Ratios of two pyfastpim calls timed alternately: subject, reference, subject, reference, ...

Two cases' medians are taken seconds apart, and a shared machine has phases longer than that (another
tenant's load on the second core): the same case has moved by 40-80% between back-to-back runs while
pyfastpim's code and the machine's idle state were the same. Alternating the two calls exposes both to the
same phase, so their ratio holds still where the two medians do not. The IR-drop calls' targets and the
integer path's target against the float path are such ratios (``*_interleaved`` keys in ``extra_info``).

Only calls into one thread pool are compared this way: alternated with OpenBLAS, each library's workers are
still spinning when the other's call starts (the 16-GEMV roofline ran 2.7x slower alternating with
pyfastpim's batch-1 products than on its own), so the roofline ratios stay ratios of medians."""
import time

import numpy as np

MIN_PAIRS = 5
MAX_PAIRS = 2000
BUDGET_S = 1.5


def interleaved_ratio(subject, reference, budget_s=BUDGET_S):
    """Median over pairs of time(subject()) / time(reference()), the calls alternating: at least MIN_PAIRS
    pairs and as many more as budget_s allows (one warm-up pair, not counted, sizes the run)."""
    t0 = time.perf_counter()
    subject()
    reference()
    pair_s = max(time.perf_counter() - t0, 1e-9)
    pairs = int(min(MAX_PAIRS, max(MIN_PAIRS, budget_s / pair_s)))
    ratios = np.empty(pairs)
    for p in range(pairs):
        t0 = time.perf_counter()
        subject()
        t1 = time.perf_counter()
        reference()
        ratios[p] = (t1 - t0) / (time.perf_counter() - t1)
    return float(np.median(ratios))
