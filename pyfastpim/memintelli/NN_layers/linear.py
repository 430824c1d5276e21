"""MemIntelli's ``LinearMem`` (pyfastpim.nn.LinearMem, with torch devices)."""
import torch

from ...nn import layers as _layers
from .. import _device
from ..pimpy.data_formats import SlicedData
from ._hop import HostLinear, host_weight_matrix

__all__ = ["LinearMem"]


class LinearMem(_layers.LinearMem):
    """``LinearMem(engine, in_features, out_features, input_slice, weight_slice, bias=True, device=None,
    dtype=torch.float32, bw_e=None, input_paral_size=(1, 32), weight_paral_size=(32, 32),
    input_quant_gran=(1, 32), weight_quant_gran=(32, 32))``: MemIntelli's signature and defaults.

    On the CPU this is :class:`pyfastpim.nn.LinearMem`. With the input or the parameters on
    another torch device (CUDA), the product runs on the engine's device (OpenCL GPU or CPU) and
    the result and gradients come back on the tensors' devices (copies counted in
    :mod:`pyfastpim.memory`). Call :meth:`update_weight` after changing the weights, as in
    MemIntelli (pyfastpim also re-programs automatically; see pyfastpim.nn.layers). ``weight_sliced``
    is this namespace's device-aware SlicedData, its attributes on the engine's device, as in MemIntelli.
    """

    _weight_sliced_type = SlicedData

    def __init__(self, engine, in_features, out_features, input_slice, weight_slice, bias=True, device=None,
                 dtype=torch.float32, bw_e=None, input_paral_size=(1, 32), weight_paral_size=(32, 32),
                 input_quant_gran=(1, 32), weight_quant_gran=(32, 32)):
        super().__init__(engine, in_features, out_features, input_slice, weight_slice, bias=bias,
                         device=_device.torch_device(device) if device is not None else None, dtype=dtype,
                         bw_e=bw_e, input_paral_size=input_paral_size, weight_paral_size=weight_paral_size,
                         input_quant_gran=input_quant_gran, weight_quant_gran=weight_quant_gran)

    _weight_matrix = staticmethod(host_weight_matrix)

    def forward(self, input):
        if not (_device.is_foreign(input) or _device.is_foreign(self.weight)):
            return super().forward(input)
        _layers._check_float_input(input, "LinearMem")
        if input.dim() == 0 or input.shape[-1] != self.in_features:
            raise ValueError("LinearMem: input of shape %s does not end with in_features=%d"
                             % (tuple(input.shape), self.in_features))
        self._check_engine()
        shape = input.shape
        x = input.unsqueeze(0) if input.dim() == 1 else input
        if x.dim() > 3:
            x = x.reshape(-1, shape[-2], shape[-1])
        weight = self.weight  # read once, as in pyfastpim.nn.LinearMem.forward
        _layers._check_no_functorch("LinearMem", input, weight, self.bias)
        out = HostLinear.apply(x, weight, self.bias, self)  # on the input's device
        return out.reshape(shape[:-1] + (self.out_features,))


# Names MemIntelli's scripts import from this module (it imports them for its own use); not in __all__.
from ..pimpy import SNR, DPETensor  # noqa: E402
from .functions import linear_mem_func  # noqa: E402
_REEXPORTS = (SNR, DPETensor, linear_mem_func)  # referenced: pyflakes sees them used
