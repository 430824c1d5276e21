"""Positive control of `make tsan`: two threads write one out= array at once (a race the user
makes). ThreadSanitizer must report it, or the TSan setup sees nothing and its silence over
the tests means nothing. Run with the generic ISA (see tsan_plugin.py)."""
import threading

import numpy as np

import pyfastpim
from pyfastpim import DPETensor, SlicedData

pyfastpim.set_isa_limit("generic")
eng = DPETensor()
rng = np.random.default_rng(0)
xs = SlicedData((1, 1, 2, 4), is_weight=False)
xs.slice_data_imp(eng, rng.standard_normal((1, 64, 128)).astype(np.float32))
ws = SlicedData((1, 1, 2, 4), is_weight=True)
ws.slice_data_imp(eng, rng.standard_normal((128, 64)).astype(np.float32))
out = np.empty((1, 64, 64), np.float32)
barrier = threading.Barrier(2)


def body():
    barrier.wait()
    for _ in range(10):
        eng.MapReduceDot(xs, ws, out=out)


threads = [threading.Thread(target=body) for _ in range(2)]
for t in threads:
    t.start()
for t in threads:
    t.join()
