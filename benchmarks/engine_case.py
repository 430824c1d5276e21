"""The engine benchmark's case, shared by test_bench_dpe.py and test_bench_physics.py:
x (512, 1024) @ W (1024, 1024), slices (1, 1, 2, 2), 32 x 32 crossbars, granules of one crossbar;
and float_kernel(), shared by every benchmark that times the float path of a noise-free product."""
import contextlib

import numpy as np

from pyfastpim import SlicedData, _core

R, K, P = 512, 1024, 1024
SLICES = (1, 1, 2, 2)


def make_operands():
    """x (R, K) and W (K, P), float32, seed 0 (the conftest's `operands` fixture)."""
    rng = np.random.default_rng(0)
    return rng.standard_normal((R, K)).astype(np.float32), rng.standard_normal((K, P)).astype(np.float32)


def program(engine, w):
    """W sliced and programmed on the engine (with wire_resistance > 0 this solves every block's network)."""
    ws = SlicedData(SLICES, is_weight=True, paral_size=(32, 32), quant_gran=(32, 32), inference=True)
    ws.slice_data_imp(engine, w)
    return ws


def sliced(engine, x, w):
    """(x sliced, W programmed) on the engine."""
    ws = program(engine, w)
    xs = SlicedData(SLICES, paral_size=(1, 32), quant_gran=(1, 32), inference=True)
    xs.slice_data_imp(engine, x)
    return xs, ws


@contextlib.contextmanager
def float_kernel():
    """Noise-free products take the float kernel instead of the exact integer path within the block (the
    process-wide switch, restored afterwards)."""
    was_on = _core.dpe_int_path()["enabled"]
    _core.dpe_int_path(False)
    try:
        yield
    finally:
        _core.dpe_int_path(was_on)
