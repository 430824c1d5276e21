"""MemIntelli's ``pimpy``: the dot-product engine, sliced data and metrics on pyfastpim."""
from .data_formats import *  # noqa: F401,F403
from .memmat_tensor import *  # noqa: F401,F403
from .utils import *  # noqa: F401,F403
from .data_formats import SlicedData
from .memmat_tensor import DPETensor
from .utils import RE, ABSE, SNR, dot_high_dim

__all__ = ['SlicedData', 'DPETensor', 'RE', 'ABSE', 'SNR', 'dot_high_dim']
__version__ = '0.1.1'
