"""MemIntelli's ``pimpy``: the dot-product engine, sliced data and metrics on pyfastpim."""
from .data_formats import SlicedData
from .memmat_tensor import DPETensor, wire_resistance
from .utils import RE, ABSE, SNR, dot_high_dim, bfp_map_tensor, quant_map_tensor

__all__ = ['SlicedData', 'DPETensor', 'RE', 'ABSE', 'SNR', 'dot_high_dim']

# Also in the namespace, not in __all__: the other names of its modules' __all__.
_REEXPORTS = (wire_resistance, bfp_map_tensor, quant_map_tensor)  # referenced: pyflakes sees them used
__version__ = '0.1.1'
