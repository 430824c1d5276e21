"""Autograd functions running a Mem layer's product on the host for tensors on another device.

Used by the compatibility layers when the input or the parameters live on CUDA (and always by
Conv1dMem): the input is copied to the host, multiplied by the engine, and the result copied
back; backward is straight-through like pyfastpim.nn's layers (gradients taken with the
dequantized weights ``Wq`` and inputs ``xq``), computed on the host and returned on each
argument's device. Every copy is counted in :mod:`pyfastpim.memory`. ``need``, given by
``apply`` at each call (pyfastpim.nn.layers._MemFunction: a gradient is needed, also in a module
made by torch.jit.trace, which records the arguments as constants), keeps what backward needs.
"""
import torch

from ...nn.layers import _MemFunction, _MemLayer, _as_input, _float32, _host_quantized
from .. import _device


def _host32(t, name):
    """The tensor t (user data: the argument called name) as float32 on the host; a float64 value beyond
    float32's range is a ValueError naming it (pyfastpim.nn.layers._float32)."""
    return _float32(_device.to_host(t.detach()), name)


def host_weight_matrix(w):
    """The crossbar matrix of the weight tensor w (_MemLayer._weight_matrix) on the host: the
    compatibility layers' _weight_matrix, their parameters possibly on CUDA."""
    return _device.to_host(_MemLayer._weight_matrix(w))


class HostLinear(_MemFunction):
    @staticmethod
    def forward(ctx, x, weight, bias, layer, need):
        dev = x.device
        xh = _device.to_host(x.detach())  # in its dtype: the engine narrows it, counted (nn.layers._LinearMemFunction)
        sliced = layer._programmed_for(weight)  # the weight autograd sees, read once by the layer's forward
        with _as_input():  # errors about x name the layer's argument 'input', its slice widths input_slice_method
            out, xq = layer.engine.forward_linear(xh, sliced, layer.input_slice_method,
                                                  layer.input_paral_size, layer.input_quant_gran, bw_e=layer.bw_e,
                                                  return_dequant=need)
        out = torch.as_tensor(out)
        if bias is not None:
            out += _host32(bias, "bias")  # in place: out is the engine's own new tensor
        if need:
            ctx.save_for_backward(torch.as_tensor(xq), _host_quantized(sliced))
        ctx.meta = (x.dtype, weight.device, weight.dtype, None if bias is None else (bias.device, bias.dtype), dev)
        return _device.to_device(out, dev).to(x.dtype)

    @staticmethod
    def backward(ctx, dy):
        xq, wq = ctx.saved_tensors
        x_dtype, w_dev, w_dtype, b_meta, x_dev = ctx.meta
        dy = _host32(dy, "grad_output")
        dy2 = dy.reshape(-1, dy.shape[-1])
        dx = dw = db = None
        if ctx.needs_input_grad[0]:
            dx = _device.to_device(torch.matmul(dy, wq.t()), x_dev).to(x_dtype)
        if ctx.needs_input_grad[1]:
            dw = _device.to_device(dy2.t().mm(xq.reshape(-1, xq.shape[-1])), w_dev).to(w_dtype)
        if b_meta is not None and ctx.needs_input_grad[2]:
            db = _device.to_device(dy2.sum(0), b_meta[0]).to(b_meta[1])
        return dx, dw, db, None, None


class HostConv2d(_MemFunction):
    """x (N, C, H, W); geom: the layer's kernel_size/stride/padding/dilation as pairs (a 1-D conv uses height 1),
    read once by the layer's forward (pyfastpim.nn.layers._conv_geometry) and kept for backward."""

    _extra_args = 1

    @staticmethod
    def forward(ctx, x, weight, bias, layer, geom, need):
        dev = x.device
        xh = _device.to_host(x.detach())  # as in HostLinear
        sliced = layer._programmed_for(weight)  # as in HostLinear
        with _as_input():
            out, xq = layer.engine.forward_conv2d(xh, sliced, *geom, layer.input_slice_method,
                                                  layer.input_paral_size, layer.input_quant_gran, bw_e=layer.bw_e,
                                                  return_dequant=need)
        out = torch.as_tensor(out)
        if bias is not None:
            out += _host32(bias, "bias").view(1, -1, 1, 1)
        if need:
            ctx.save_for_backward(torch.as_tensor(xq), _host_quantized(sliced))
        ctx.geom = (tuple(x.shape), geom)
        ctx.meta = (x.dtype, tuple(weight.shape), weight.device, weight.dtype,
                    None if bias is None else (bias.device, bias.dtype), dev)
        return _device.to_device(out, dev).to(x.dtype)

    @staticmethod
    def backward(ctx, dy):
        xq, wq = ctx.saved_tensors
        x_shape, (kernel, stride, padding, dilation) = ctx.geom
        x_dtype, w_shape, w_dev, w_dtype, b_meta, x_dev = ctx.meta
        dy = _host32(dy, "grad_output").contiguous()
        n, c_out = dy.shape[:2]
        dx = dw = db = None
        if ctx.needs_input_grad[0]:
            w4 = wq.t().reshape(c_out, x_shape[1], kernel[0], kernel[1])
            dx = torch.nn.grad.conv2d_input(x_shape, w4, dy, stride=stride, padding=padding, dilation=dilation)
            dx = _device.to_device(dx, x_dev).to(x_dtype)
        if ctx.needs_input_grad[1]:
            dy_t = dy.reshape(n, c_out, -1).transpose(0, 1).reshape(c_out, -1)  # (C_out, N*L)
            dw = dy_t.mm(xq.reshape(-1, xq.shape[-1])).reshape(w_shape)
            dw = _device.to_device(dw, w_dev).to(w_dtype)
        if b_meta is not None and ctx.needs_input_grad[2]:
            db = _device.to_device(dy.sum((0, 2, 3)), b_meta[0]).to(b_meta[1])
        return dx, dw, db, None, None, None
