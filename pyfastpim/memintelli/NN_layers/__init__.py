"""MemIntelli's ``NN_layers``: crossbar layers and their autograd functions on pyfastpim."""
from .linear import LinearMem
from .convolution import Conv1dMem, Conv2dMem
from .functions import (MapReduceDot, map_reduce_dot_func, LinearMemRunc, linear_mem_func, Conv1dMemRunc,
                        conv1d_mem_func, Conv2dMemRunc, conv2d_mem_func, is_tuple_2)
from . import activation, model_decorators

# linear.__all__ + convolution.__all__ + functions.__all__ (tests/api/test_memintelli.py checks the sum)
__all__ = ["LinearMem", "Conv1dMem", "Conv2dMem", "MapReduceDot", "map_reduce_dot_func", "LinearMemRunc",
           "linear_mem_func", "Conv1dMemRunc", "conv1d_mem_func", "Conv2dMemRunc", "conv2d_mem_func", "is_tuple_2"]

# Names MemIntelli's scripts import from NN_layers (it imports them for its own use); not in __all__.
from ..pimpy import SNR, DPETensor, SlicedData  # noqa: E402
_REEXPORTS = (activation, model_decorators, SNR, DPETensor, SlicedData)  # referenced: pyflakes sees them used
