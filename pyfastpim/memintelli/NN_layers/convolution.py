"""MemIntelli's ``Conv2dMem`` (pyfastpim.nn.Conv2dMem, with torch devices) and a working ``Conv1dMem``."""

from ... import _core
from ...nn import layers as _layers
from .. import _device
from ..pimpy.data_formats import SlicedData
from ._hop import HostConv2d, host_weight_matrix

__all__ = ["Conv1dMem", "Conv2dMem"]


class Conv2dMem(_layers.Conv2dMem):
    """``Conv2dMem(engine, in_channels, out_channels, kernel_size, input_slice, weight_slice, stride=1,
    padding=0, dilation=1, bias=True, device=None, dtype=None, bw_e=None, input_paral_size=(1, 32),
    weight_paral_size=(32, 32), input_quant_gran=(1, 32), weight_quant_gran=(32, 32))``.

    On the CPU this is :class:`pyfastpim.nn.Conv2dMem`; tensors on CUDA are handled as in
    :class:`LinearMem` (product on the engine's device, results and gradients on the tensors'
    devices, copies counted). As in MemIntelli, ``kernel_size``, ``stride``, ``padding`` and
    ``dilation`` are kept as given (``layer.stride == 1`` for ``stride=1``; pyfastpim.nn.Conv2dMem
    and nn.Conv2d hold pairs). ``weight_sliced`` is this namespace's device-aware SlicedData, as in
    :class:`LinearMem`.
    """

    _weight_sliced_type = SlicedData

    def __init__(self, engine, in_channels, out_channels, kernel_size, input_slice, weight_slice, stride=1,
                 padding=0, dilation=1, bias=True, device=None, dtype=None, bw_e=None, input_paral_size=(1, 32),
                 weight_paral_size=(32, 32), input_quant_gran=(1, 32), weight_quant_gran=(32, 32)):
        super().__init__(engine, in_channels, out_channels, kernel_size, input_slice, weight_slice, stride=stride,
                         padding=padding, dilation=dilation, bias=bias,
                         device=_device.torch_device(device) if device is not None else None, dtype=dtype,
                         bw_e=bw_e, input_paral_size=input_paral_size, weight_paral_size=weight_paral_size,
                         input_quant_gran=input_quant_gran, weight_quant_gran=weight_quant_gran)
        self.kernel_size, self.stride, self.padding, self.dilation = kernel_size, stride, padding, dilation

    _weight_matrix = staticmethod(host_weight_matrix)

    def forward(self, input):
        if not (_device.is_foreign(input) or _device.is_foreign(self.weight)):
            return super().forward(input)
        _layers._check_float_input(input, "Conv2dMem")
        if input.dim() not in (3, 4) or input.shape[-3] != self.in_channels:
            raise ValueError("Conv2dMem: expected an input (N, %d, H, W) or (%d, H, W), got shape %s"
                             % (self.in_channels, self.in_channels, tuple(input.shape)))
        self._check_engine()
        x = input.unsqueeze(0) if input.dim() == 3 else input
        weight = self.weight  # read once, as in pyfastpim.nn.Conv2dMem.forward
        _layers._check_no_functorch("Conv2dMem", input, weight, self.bias)
        out = HostConv2d.apply(x, weight, self.bias, self, _layers._conv_geometry(self))
        return out.squeeze(0) if input.dim() == 3 else out


def _int1(value, name, minimum):
    """An int (or a 1-tuple / 1-list of one, as torch's Conv1d takes it) in [minimum, 2**31 - 1]: a value of
    another type (a bool, float, str, ...) is the type rule's TypeError (_core.check_number), one out of range
    a ValueError."""
    if isinstance(value, (tuple, list)) and len(value) == 1:
        value = value[0]
    value = _core.check_number(value, name, True)
    if not minimum <= value <= 2 ** 31 - 1:
        raise ValueError("argument '%s': must be an int in [%d, 2**31 - 1] (or a 1-tuple), got %r"
                         % (name, minimum, value))
    return value


class Conv1dMem(_layers._MemLayer):
    """A 1-D convolution on the simulated crossbar (MemIntelli's ``Conv1dMem`` is an unfinished stub).

    ``Conv1dMem(engine, in_channels, out_channels, kernel_size, input_slice, weight_slice, stride=1,
    padding=0, dilation=1, bias=True, device=None, dtype=None, bw_e=None, input_paral_size=(1, 32),
    weight_paral_size=(32, 32), input_quant_gran=(1, 32), weight_quant_gran=(32, 32))``: the
    arguments of :class:`Conv2dMem` with integer sizes (MemIntelli's stub takes no engine and
    no slicing options, and its forward takes ``(engine, input)``; both forms of forward work here).

    Input ``(N, C_in, L)`` or ``(C_in, L)``; weight ``(C_out, C_in, kernel_size)`` as in
    ``nn.Conv1d``; ``kernel_size``, ``stride``, ``padding`` and ``dilation`` are kept as given, as
    in MemIntelli (nn.Conv1d holds 1-tuples). It is computed as a 2-D convolution of height 1 (the
    same patches and crossbar product as Conv2dMem with a ``(1, k)`` kernel); backward is
    straight-through.
    """

    _weight_sliced_type = SlicedData

    def __init__(self, engine, in_channels, out_channels, kernel_size, input_slice, weight_slice, stride=1,
                 padding=0, dilation=1, bias=True, device=None, dtype=None, bw_e=None, input_paral_size=(1, 32),
                 weight_paral_size=(32, 32), input_quant_gran=(1, 32), weight_quant_gran=(32, 32)):
        super().__init__()
        self.in_channels = _int1(in_channels, "in_channels", 1)
        self.out_channels = _int1(out_channels, "out_channels", 1)
        self.kernel_size, self.stride, self.padding, self.dilation = kernel_size, stride, padding, dilation
        kernel = (self._kernel2d, self._stride2d, self._padding2d, self._dilation2d)[0]  # all checked here
        self._init_params((self.out_channels, self.in_channels, kernel[1]), bias,
                          _device.torch_device(device) if device is not None else None, dtype,
                          ("out_channels", "in_channels", "kernel_size"))
        self._init_mem(engine, input_slice, weight_slice, bw_e, input_paral_size, weight_paral_size,
                       input_quant_gran, weight_quant_gran, device)

    # the geometry of the equivalent 2-D convolution (height 1), read from the attributes at each use
    _kernel2d = property(lambda self: (1, _int1(self.kernel_size, "kernel_size", 1)))
    _stride2d = property(lambda self: (1, _int1(self.stride, "stride", 1)))
    _padding2d = property(lambda self: (0, _int1(self.padding, "padding", 0)))
    _dilation2d = property(lambda self: (1, _int1(self.dilation, "dilation", 1)))

    _weight_matrix = staticmethod(host_weight_matrix)

    def forward(self, *args):
        if len(args) == 2:  # MemIntelli's stub signature forward(dot_engine, input)
            engine, input = args
            if engine is not self.engine:
                self.engine = engine
        elif len(args) == 1:
            input = args[0]
        else:
            raise TypeError("Conv1dMem.forward takes (input) or (engine, input), got %d arguments" % len(args))
        _layers._check_float_input(input, "Conv1dMem")
        if input.dim() not in (2, 3) or input.shape[-2] != self.in_channels:
            raise ValueError("Conv1dMem: expected an input (N, %d, L) or (%d, L), got shape %s"
                             % (self.in_channels, self.in_channels, tuple(input.shape)))
        geometry = _layers._conv_geometry(self)  # read once: the check, the engine call and backward
        k, p, d = geometry[0][1], geometry[2][1], geometry[3][1]
        length = input.shape[-1] + 2 * p - d * (k - 1) - 1
        if length < 0:
            raise ValueError("Conv1dMem: input length %d is too small for kernel_size=%d, padding=%d, dilation=%d"
                             % (input.shape[-1], k, p, d))
        self._check_engine()
        x = input.unsqueeze(0) if input.dim() == 2 else input
        weight = self.weight  # read once, as in pyfastpim.nn.Conv2dMem.forward
        _layers._check_no_functorch("Conv1dMem", input, weight, self.bias)
        out = HostConv2d.apply(x.unsqueeze(2), weight, self.bias, self, geometry).squeeze(2)
        return out.squeeze(0) if input.dim() == 2 else out

    def extra_repr(self):
        return "%d, %d, kernel_size=%s, stride=%s, padding=%s, bias=%s, %s" % (
            self.in_channels, self.out_channels, self.kernel_size, self.stride, self.padding,
            self.bias is not None, self._mem_extra_repr())


# Names MemIntelli's scripts import from this module (it imports them for its own use); not in __all__.
from ..pimpy import DPETensor  # noqa: E402
from .functions import conv1d_mem_func, conv2d_mem_func, is_tuple_2  # noqa: E402
_REEXPORTS = (DPETensor, conv1d_mem_func, conv2d_mem_func, is_tuple_2)  # referenced: pyflakes sees them used
