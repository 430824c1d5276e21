"""The engine product the thread-count tests run, in the test process and in clean child
interpreters alike: noise-free x (R, K) @ W (K, P), slices (1, 1, 2, 2), 32 x 32 crossbars.
Imports only NumPy, pyfastpim and noise_off (a child must not pay for helpers' OpenCL device enumeration)."""
import numpy as np

from noise_off import noise_free_engine
from pyfastpim import SlicedData


def noise_free_product(R, K, P, seed):
    """A callable running the product (weights programmed once, here)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((R, K)).astype(np.float32)
    w = rng.standard_normal((K, P)).astype(np.float32)
    eng = noise_free_engine(g_level=4, rdac=4, radc=2 ** 12)
    slices = (1, 1, 2, 2)
    ws = SlicedData(slices, is_weight=True, paral_size=(32, 32), quant_gran=(32, 32), inference=True)
    ws.slice_data_imp(eng, w)
    xs = SlicedData(slices, paral_size=(1, 32), quant_gran=(1, 32), inference=True)
    xs.slice_data_imp(eng, x)
    return lambda: eng(xs, ws)
