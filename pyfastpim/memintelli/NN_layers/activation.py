"""MemIntelli's quantized activations (``NN_layers.activation``): outputs scaled to ``bit_width``-bit ranges.

``scale = 2**(bit_width - 1)``. relu_q clamps to ``[0, scale - 1]``; sigmoid_q, tanh_q and
softmax_q (over dim 1) multiply the ordinary activation by ``scale``. As in MemIntelli, no
rounding is applied (the results are differentiable).
"""
import torch

from ... import _core

__all__ = ["relu_q", "sigmoid_q", "tanh_q", "softmax_q"]


def _scale(bit_width):
    # the type rule of every entry point (_core.check_number): a bool, float or str is a TypeError
    bit_width = _core.check_number(bit_width, "bit_width", True)
    if not 1 <= bit_width <= 63:  # the scale 2**(bit_width - 1) an int64 for torch (64 bits: its RuntimeError)
        raise ValueError("argument 'bit_width': expected an int in [1, 63], got %r" % (bit_width,))
    return 2 ** (bit_width - 1)


def relu_q(x: torch.Tensor, bit_width: int):
    """``clamp(x, 0, 2**(bit_width-1) - 1)``."""
    return torch.clamp(x, 0, _scale(bit_width) - 1)


def sigmoid_q(x: torch.Tensor, bit_width: int):
    """``sigmoid(x) * 2**(bit_width-1)``."""
    return torch.sigmoid(x) * _scale(bit_width)


def tanh_q(x: torch.Tensor, bit_width: int):
    """``tanh(x) * 2**(bit_width-1)``."""
    return torch.tanh(x) * _scale(bit_width)


def softmax_q(x: torch.Tensor, bit_width: int):
    """``softmax(x, dim=1) * 2**(bit_width-1)``."""
    return torch.softmax(x, dim=1) * _scale(bit_width)
