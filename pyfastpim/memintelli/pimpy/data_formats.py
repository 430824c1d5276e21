"""MemIntelli's ``SlicedData`` with torch devices (pyfastpim.SlicedData underneath).

``SlicedData(slice_method, bw_e=None, is_weight=False, paral_size=(64, 64), quant_gran=None,
device=None, inference=False)``: ``slice_method`` is kept as given (MemIntelli takes a tensor,
``torch.tensor([1, 1, 2, 4])``; lists and tuples work too) and ``shape`` is a torch.Size, as in
MemIntelli. ``device`` (torch.device or str) is where the attributes (``sliced_data``,
``quantized_data``, ``max_data``, ``e_bias``, ``G``) are returned. As in
MemIntelli, ``slice_data_imp(engine, data)`` puts the data on the engine's device, so after
slicing the attributes live on ``engine.device`` (data on CUDA without a CUDA engine: on the
data's device). The slicing itself runs on the host (or the engine's OpenCL device); copies
from and to CUDA are counted in :mod:`pyfastpim.memory`. Where torch cannot hold tensors on
that device (``DPETensor(device="cuda")`` without CUDA) the attributes stay on the host, as the
engine's own tensors do. pyfastpim.memintelli's layers hold their programmed weights
(``weight_sliced``) in this class, as MemIntelli's do.

The attributes can be assigned (MemIntelli code does): see :class:`pyfastpim.SlicedData`.
"""
from ...sliced import SlicedData as _BaseSlicedData
from .. import _device

__all__ = ["SlicedData"]


def _device_property(name):
    base = getattr(_BaseSlicedData, name)

    def fget(self):
        value = base.fget(self)
        try:
            return _device.to_device(value, self.device)
        except (RuntimeError, AssertionError):  # "Torch not compiled with CUDA enabled", no driver:
            return value  # on the host, as the engine's own tensors then are (memmat_tensor._tensor_on)

    def fset(self, value):
        base.fset(self, _device.to_host(value))

    return property(fget, fset, doc=base.__doc__)


class SlicedData(_BaseSlicedData):
    __doc__ = _BaseSlicedData.__doc__ + "\n" + __doc__

    def __init__(self, slice_method, bw_e=None, is_weight=False, paral_size=(64, 64), quant_gran=None, device=None,
                 inference=False):
        super().__init__(slice_method, bw_e=bw_e, is_weight=is_weight, paral_size=paral_size, quant_gran=quant_gran,
                         inference=inference)
        self.device = _device.torch_device(device)  # slice_method stays as given (MemIntelli's is a tensor)

    def slice_data_imp(self, engine, data):
        """Quantize, slice and (weights) program ``data``; the attributes then live on the engine's device."""
        engine_device = getattr(engine, "device", None)
        if hasattr(data, "device") and not isinstance(engine_device, type(data.device)):
            engine_device = data.device  # a plain pyfastpim engine: keep the data's device
        super().slice_data_imp(engine, _device.to_host(data))
        if engine_device is not None:
            self.device = _device.torch_device(engine_device)

    def t(self):
        new = super().t()
        new.__class__ = type(self)
        return new

    sliced_data = _device_property("sliced_data")
    quantized_data = _device_property("quantized_data")
    max_data = _device_property("max_data")
    e_bias = _device_property("e_bias")
    G = _device_property("G")


# Names MemIntelli's scripts import from this module (it imports them for its own use); not in __all__.
from .utils import bfp_map_tensor, quant_map_tensor  # noqa: E402
_REEXPORTS = (bfp_map_tensor, quant_map_tensor)  # referenced: pyflakes sees them used
