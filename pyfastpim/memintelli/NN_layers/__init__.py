"""MemIntelli's ``NN_layers``: crossbar layers and their autograd functions on pyfastpim."""
from .linear import *  # noqa: F401,F403
from .convolution import *  # noqa: F401,F403
from .functions import *  # noqa: F401,F403
from . import activation, model_decorators  # noqa: F401
from .linear import __all__ as _a
from .convolution import __all__ as _b
from .functions import __all__ as _c

__all__ = list(_a) + list(_b) + list(_c)

# Names MemIntelli's scripts import from NN_layers (it imports them for its own use); not in __all__.
from ..pimpy import SNR, DPETensor, SlicedData  # noqa: E402,F401
