"""MemIntelli's ``pimpy.utils``: error metrics, the sliced block product and reference quantizers.

These are small torch / NumPy functions kept for scripts that call them directly; pyfastpim's
engine does not use them (its quantization runs in the C kernels, spec sections 1-5).
"""
import numpy as np
import torch

from ...metrics import _pair
from ...sliced import _widths

__all__ = ["dot_high_dim", "ABSE", "SNR", "RE", "quant_map_tensor", "bfp_map_tensor"]


# ytest and ypred are checked as pyfastpim.metrics checks them (metrics._pair): real numbers of one shape, not
# empty, else a ValueError / TypeError naming them (NumPy broadcast mismatched shapes or raised its unnamed
# error). A zero denominator gives inf or nan, as in MemIntelli, without NumPy's RuntimeWarning.


def SNR(ytest, ypred):
    """Signal-to-noise ratio in dB: ``10 log10(sum(ytest^2) / sum((ytest - ypred)^2))`` (NumPy or torch)."""
    ytest, ypred = _pair(ytest, ypred, "SNR")
    with np.errstate(divide="ignore", invalid="ignore"):
        return 10 * np.log10(np.sum(ytest ** 2) / np.sum((ytest - ypred) ** 2))


def RE(ytest, ypred):
    """Relative error ``||ytest - ypred|| / ||ytest||`` (Frobenius norms)."""
    ytest, ypred = _pair(ytest, ypred, "RE")
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.sqrt(np.sum((ytest - ypred) ** 2)) / np.sqrt(np.sum(ytest ** 2))


def ABSE(ytest, ypred):
    """Mean absolute relative error of a 2-D result: ``sum|(ytest - ypred) / ytest| / (rows * cols)``."""
    ytest, ypred = _pair(ytest, ypred, "ABSE")
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.sum(np.abs((ytest - ypred) / ytest)) / (ytest.shape[0] * ytest.shape[1])


def dot_high_dim(x, y):
    """All block-slice products of two sliced tensors in MemIntelli's block layout.

    x: ``(Rb, Kb, Sx, m, n)`` or batched ``(B, Rb, Kb, Sx, m, n)``; y: ``(Kb, Pb, Sy, n, p)``.
    Returns ``(Rb, Kb, Pb, Sx, Sy, m, p)`` (batched: ``(B, ...)``): the product of x's block
    ``(r, k)`` slice ``i`` with y's block ``(k, c)`` slice ``j``, not yet summed over ``k``.
    """
    if x.dim() == 5:
        return torch.einsum("rkimn,kcjnp->rkcijmp", x, y)
    if x.dim() == 6:
        return torch.einsum("brkimn,kcjnp->brkcijmp", x, y)
    raise ValueError('The input data dimension is not supported!')


def _split(u, widths, dtype):
    """Non-negative integers ``u`` -> slices along a new axis -3, least significant slice first."""
    planes, shift = [], 0
    for w in reversed(widths):
        planes.append(torch.bitwise_and(torch.bitwise_right_shift(u, shift), (1 << w) - 1))
        shift += w
    return torch.stack(planes, dim=-3).to(dtype)


def _prepare(mat, blk, max_abs_temp_mat):
    widths = _widths(blk)
    if mat.dim() < 2:
        raise ValueError("argument 'mat': expected at least 2 dimensions (..., m, n), got shape %r"
                         % (tuple(mat.shape),))
    if max_abs_temp_mat is None:
        max_mat = mat.abs().amax(dim=(-2, -1), keepdim=True)
    else:
        max_mat = torch.as_tensor(max_abs_temp_mat, dtype=mat.dtype, device=mat.device)
    dtype = torch.uint8 if max(widths) <= 8 else torch.int16
    return widths, sum(widths), max_mat, dtype


def quant_map_tensor(mat, blk, max_abs_temp_mat=None):
    """INT quantization and slicing of blocks ``mat`` ``(..., m, n)`` (MemIntelli's reference quantizer).

    Each block (the last two axes) is scaled by its max-abs (or ``max_abs_temp_mat``):
    ``q = round(x / max * (2**(B-1) - 1))``; two's complement ``q mod 2**B`` is cut into the
    slices of ``blk`` (most significant first; the result holds the least significant first).

    Returns ``(data_int, mat_data, max_mat, e_bias)``: slices ``(..., S, m, n)`` (uint8, int16 for
    slices over 8 bits), the dequantized values, the maxima ``(..., 1, 1)`` and None. All-zero
    blocks give zero codes and values (MemIntelli divides by zero there).
    """
    widths, bits, max_mat, dtype = _prepare(mat, blk, max_abs_temp_mat)
    k = 2 ** (bits - 1) - 1
    safe = torch.where(max_mat > 0, max_mat, torch.ones_like(max_mat))
    q = torch.round(mat / safe * k)
    mat_data = q / k * safe
    u = torch.remainder(q.to(torch.int64), 2 ** bits)
    return _split(u, widths, dtype), mat_data, max_mat, None


def bfp_map_tensor(mat, blk, max_abs_temp_mat=None):
    """Block floating point quantization and slicing (MemIntelli's reference quantizer).

    Exponent ``e = floor(log2(max + 1e-10))`` per block; ``q = clip(round(x / 2**e * 2**(B-2)),
    -2**(B-1), 2**(B-1) - 1)``; dequantized ``q * 2**(e + 2 - B)``; slices as in
    :func:`quant_map_tensor`. Returns ``(data_int, mat_data, max_mat, e_bias)``.
    """
    widths, bits, max_mat, dtype = _prepare(mat, blk, max_abs_temp_mat)
    e_bias = torch.floor(torch.log2(max_mat + 1e-10))
    q = torch.round(mat / 2.0 ** e_bias * 2.0 ** (bits - 2)).clamp(-2 ** (bits - 1), 2 ** (bits - 1) - 1)
    mat_data = q * 2.0 ** (e_bias + 2 - bits)
    u = torch.remainder(q.to(torch.int64), 2 ** bits)
    return _split(u, widths, dtype), mat_data, max_mat, e_bias
