"""MemIntelli's ``NN_layers.functions``: autograd functions over pre-sliced data, on pyfastpim's engine.

Forward passes multiply on the crossbar (``engine.MapReduceDot``); backward passes are
straight-through: the gradients of the ordinary operation taken with the dequantized weights
``Wq`` (``weight_slice.quantized_data``) and inputs ``xq`` (``input_slice.quantized_data``).
Gradients come back on the devices and dtypes of the tensors they belong to.

Differences from MemIntelli: ``map_reduce_dot_func`` (broken there: it calls MapReduceDot with
three arguments) slices its float input itself; ``Conv1dMemRunc`` / ``conv1d_mem_func`` (empty
stubs there) work and take the same arguments as the 2-D versions; 3-D (batched) inputs are
accepted by the linear functions.
"""
import torch

from .. import _device
from ...dpe import _pair
from ...nn.layers import _as_input, _float32, _host_quantized

__all__ = ["MapReduceDot", "map_reduce_dot_func", "LinearMemRunc", "linear_mem_func", "Conv1dMemRunc",
           "conv1d_mem_func", "Conv2dMemRunc", "conv2d_mem_func", "is_tuple_2"]


def is_tuple_2(x):
    """``x`` as a pair: a 2-tuple is returned as is, an int ``v`` as ``(v, v)``."""
    if isinstance(x, tuple):
        if len(x) != 2:
            raise ValueError("x must be a tuple of 2 elements or an int, got %r" % (x,))
        return x
    if isinstance(x, int) and not isinstance(x, bool):
        return (x, x)
    raise ValueError("x must be x tuple or int")


def _on(t, like):
    """Host tensor ``t`` on ``like``'s device and dtype."""
    return _device.to_device(t, like.device).to(like.dtype)


def _host32(t, name):
    """``t`` as float32 on the host; ``name``: the argument it is (user data), named by the ValueError for a
    float64 value beyond float32's range (pyfastpim.nn.layers._float32)."""
    return _float32(_device.to_host(torch.as_tensor(t)), name)


def _product(out):
    """The engine's product (float32, not user data) as a float32 host tensor."""
    return _device.to_host(torch.as_tensor(out)).to(torch.float32)


def _result(out, like):
    out = torch.as_tensor(out)
    return _device.to_device(_device.to_host(out), like.device).to(like.dtype)


class MapReduceDot(torch.autograd.Function):
    """``input @ W`` through the crossbar for a float ``input`` (R, K) or (N, R, K) and programmed ``weight_sliced``.

    The input is sliced with ``input_slice_method`` in blocks and granules of one row by the
    crossbar height (``(1, weight_sliced.paral_size[0])``). Backward: ``dx = dy @ Wq^T``;
    ``weight_sliced`` gets no gradient (it is not a tensor).
    """

    @staticmethod
    def forward(ctx, engine, input, input_slice_method, weight_sliced):
        rows = weight_sliced.paral_size[0]
        with _as_input():  # errors about x name this function's argument 'input', its widths input_slice_method
            x = _device.to_host(input.detach())  # in its dtype: the engine narrows it, counted
            out, _ = engine.forward_linear(x, weight_sliced, input_slice_method, (1, rows), (1, rows),
                                           bw_e=weight_sliced.bw_e, return_dequant=False)
        ctx.save_for_backward(_host_quantized(weight_sliced))
        ctx.like = input
        return _result(out, input)

    @staticmethod
    def backward(ctx, grad_output):
        (wq,) = ctx.saved_tensors
        grad_input = None
        if ctx.needs_input_grad[1]:
            grad_input = _on(torch.matmul(_host32(grad_output, "grad_output"), wq.t()), ctx.like)
        return None, grad_input, None, None


def map_reduce_dot_func(engine, input, input_slice_method, weight_sliced):
    """``input @ weight`` on the crossbar: ``input`` sliced with ``input_slice_method`` times the programmed
    ``weight_sliced``, gradients to ``input`` only (:class:`MapReduceDot`)."""
    return MapReduceDot.apply(engine, input, input_slice_method, weight_sliced)


class LinearMemRunc(torch.autograd.Function):
    """``engine.MapReduceDot(input_slice, weight_slice) + bias`` with straight-through gradients.

    ``input_slice``: the sliced ``input`` (R, K) or (N, R, K); ``weight_slice``: the programmed
    ``weight.t()`` (K, P). Backward: ``dx = dy @ Wq^T``, ``dW = dy^T @ xq`` (rows of all batch
    items summed), ``db = sum(dy)``.
    """

    @staticmethod
    def forward(ctx, engine, input, weight, input_slice, weight_slice, bias):
        out = _product(engine.MapReduceDot(input_slice, weight_slice))
        if bias is not None:
            out = out + _host32(bias.detach(), "bias")
        ctx.save_for_backward(_host_quantized(input_slice), _host_quantized(weight_slice))
        ctx.likes = (input, weight, bias)
        return _result(out, input)

    @staticmethod
    def backward(ctx, grad_output):
        xq, wq = ctx.saved_tensors
        x, w, b = ctx.likes
        dy = _host32(grad_output, "grad_output")
        dy2 = dy.reshape(-1, dy.shape[-1])
        grad_input = grad_weight = grad_bias = None
        if ctx.needs_input_grad[1]:
            grad_input = _on(torch.matmul(dy, wq.t()), x)
        if ctx.needs_input_grad[2]:
            grad_weight = _on(dy2.t().mm(xq.reshape(-1, xq.shape[-1])), w)
        if b is not None and ctx.needs_input_grad[5]:
            grad_bias = _on(dy2.sum(0), b)
        return None, grad_input, grad_weight, None, None, grad_bias


def linear_mem_func(engine, input, weight, input_slice, weight_slice, bias=None):
    """``input @ weight.t() + bias`` on the crossbar from the sliced operands, with straight-through
    gradients to input, weight and bias (:class:`LinearMemRunc`)."""
    return LinearMemRunc.apply(engine, input, weight, input_slice, weight_slice, bias)


def _conv_forward(ctx, engine, input, weight, input_sliced, weight_sliced, bias, geom, out_hw):
    """Shared forward: input_sliced holds the unfolded input (N, L, C_in*k), the product is (N, L, C_out)."""
    out = _product(engine.MapReduceDot(input_sliced, weight_sliced))
    if out.dim() == 2:
        out = out.unsqueeze(0)
    if bias is not None:
        out = out + _host32(bias.detach(), "bias")
    n, c_out = out.shape[0], out.shape[-1]
    ctx.save_for_backward(_host_quantized(input_sliced), _host_quantized(weight_sliced))
    ctx.geom = geom
    ctx.likes = (input, weight, bias)
    return out.transpose(1, 2).reshape((n, c_out) + out_hw)


def _conv_backward(ctx, grad_output, spatial):
    xq, wq = ctx.saved_tensors
    x, w, b = ctx.likes
    stride, padding, dilation, kernel = ctx.geom
    dy = _host32(grad_output, "grad_output").contiguous()
    n, c_out = dy.shape[:2]
    dy4 = dy.reshape(n, c_out, -1, dy.shape[-1]) if spatial == 1 else dy
    grad_input = grad_weight = grad_bias = None
    if ctx.needs_input_grad[1]:
        x4 = (x.shape[0], x.shape[1], 1, x.shape[2]) if spatial == 1 else tuple(x.shape)
        w4 = wq.t().reshape(c_out, x.shape[1], kernel[0], kernel[1])
        gi = torch.nn.grad.conv2d_input(x4, w4, dy4, stride=stride, padding=padding, dilation=dilation)
        grad_input = _on(gi.reshape(x.shape), x)
    if ctx.needs_input_grad[2]:
        dy_t = dy4.reshape(n, c_out, -1).transpose(0, 1).reshape(c_out, -1)
        grad_weight = _on(dy_t.mm(xq.reshape(-1, xq.shape[-1])).reshape(w.shape), w)
    if b is not None and ctx.needs_input_grad[5]:
        grad_bias = _on(dy4.sum((0, 2, 3)), b)
    return None, grad_input, grad_weight, None, None, grad_bias, None, None, None


def _out_len(size, k, s, p, d):
    return (size + 2 * p - d * (k - 1) - 1) // s + 1


class Conv2dMemRunc(torch.autograd.Function):
    """2-D convolution from the sliced unfolded input.

    ``input`` (N, C_in, H, W); ``weight`` (C_out, C_in, kh, kw); ``input_sliced``: the sliced
    ``F.unfold(input, ...).transpose(1, 2)`` (N, L, C_in*kh*kw); ``weight_sliced``: the programmed
    ``weight.reshape(C_out, -1).t()``. Returns (N, C_out, H_out, W_out).
    """

    @staticmethod
    def forward(ctx, engine, input, weight, input_sliced, weight_sliced, bias=None, stride=1, padding=0,
                dilation=1):
        stride, padding, dilation = _pair(stride, "stride", 1), _pair(padding, "padding", 0), \
            _pair(dilation, "dilation", 1)
        kernel = tuple(weight.shape[2:])
        out_hw = tuple(_out_len(input.shape[2 + i], kernel[i], stride[i], padding[i], dilation[i]) for i in range(2))
        out = _conv_forward(ctx, engine, input, weight, input_sliced, weight_sliced, bias,
                            (stride, padding, dilation, kernel), out_hw)
        return _result(out, input)

    @staticmethod
    def backward(ctx, grad_output):
        return _conv_backward(ctx, grad_output, 2)


def conv2d_mem_func(engine, input, weight, input_slice, weight_slice, bias=None, stride=1, padding=0, dilation=1):
    """``conv2d(input, weight, bias, stride, padding, dilation)`` on the crossbar from the sliced operands,
    with straight-through gradients (:class:`Conv2dMemRunc`)."""
    return Conv2dMemRunc.apply(engine, input, weight, input_slice, weight_slice, bias, stride, padding, dilation)


class Conv1dMemRunc(torch.autograd.Function):
    """1-D convolution from the sliced unfolded input (MemIntelli's is an empty stub).

    ``input`` (N, C_in, L); ``weight`` (C_out, C_in, k); ``input_sliced``: the sliced unfolded
    input (N, L_out, C_in*k) (e.g. ``F.unfold(input.unsqueeze(2), (1, k), ...).transpose(1, 2)``);
    ``weight_sliced``: the programmed ``weight.reshape(C_out, -1).t()``. Returns (N, C_out, L_out).
    """

    @staticmethod
    def forward(ctx, engine, input, weight, input_sliced, weight_sliced, bias=None, stride=1, padding=0,
                dilation=1):
        def one(v, name, minimum):
            v = v[0] if isinstance(v, (tuple, list)) and len(v) == 1 else v
            return _pair(v, name, minimum)[0]
        s, p, d = one(stride, "stride", 1), one(padding, "padding", 0), one(dilation, "dilation", 1)
        k = weight.shape[2]
        out = _conv_forward(ctx, engine, input, weight, input_sliced, weight_sliced, bias,
                            ((1, s), (0, p), (1, d), (1, k)), (_out_len(input.shape[2], k, s, p, d),))
        return _result(out, input)

    @staticmethod
    def backward(ctx, grad_output):
        return _conv_backward(ctx, grad_output, 1)


def conv1d_mem_func(engine, input, weight, input_slice, weight_slice, bias=None, stride=1, padding=0, dilation=1):
    """``conv1d(input, weight, bias, stride, padding, dilation)`` on the crossbar from the sliced operands,
    with straight-through gradients (:class:`Conv1dMemRunc`)."""
    return Conv1dMemRunc.apply(engine, input, weight, input_slice, weight_slice, bias, stride, padding, dilation)


# Names MemIntelli's scripts import from this module (it imports them for its own use); not in __all__.
from ..pimpy.data_formats import SlicedData  # noqa: E402
_REEXPORTS = (SlicedData,)  # referenced: pyflakes sees them used
