"""Error metrics between an ideal result and a simulated one (MemIntelli's SNR, RE, ABSE).

Each takes ``(ytest, ypred)`` -- the reference and the approximation, NumPy arrays or torch
tensors (any device, with or without grad) of the same shape -- and returns a Python float.
Sums are taken in float64 (MemIntelli sums in the inputs' dtype; the definitions are the same).
"""
import numbers

import numpy as np

from .sliced import _nested, _numeric

__all__ = ["SNR", "RE", "ABSE"]


def _pair(ytest, ypred, name):
    a, b = _np(ytest, "ytest"), _np(ypred, "ypred")
    if a.shape != b.shape:
        raise ValueError("%s: ytest and ypred must have the same shape, got %s and %s" % (name, a.shape, b.shape))
    if a.size == 0:
        raise ValueError("%s: empty inputs" % name)
    return a, b


def _np(x, name):
    """x as a float64 NumPy array: real numbers only, else TypeError naming ``name`` (a str or complex array:
    sliced._numeric's rule and words); a ragged or masked one a ValueError naming it. An object array (Python
    floats, Fractions: numbers.Real) is read as float64, as MemIntelli reads it."""
    a = _nested(x, name)
    if a.dtype == object and all(isinstance(v, numbers.Real) for v in a.flat):
        return a.astype(np.float64)
    return _numeric(a, name).astype(np.float64)  # a str or complex item: refused with the rule's words


def SNR(ytest, ypred):
    """Signal-to-noise ratio in dB: ``10 log10(sum ytest^2 / sum (ytest - ypred)^2)`` (inf when equal)."""
    a, b = _pair(ytest, ypred, "SNR")
    with np.errstate(divide="ignore"):
        return float(10 * np.log10(np.sum(a * a) / np.sum((a - b) ** 2)))


def RE(ytest, ypred):
    """Relative error: ``||ytest - ypred||_2 / ||ytest||_2`` (Frobenius norms)."""
    a, b = _pair(ytest, ypred, "RE")
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(np.sqrt(np.sum((a - b) ** 2)) / np.sqrt(np.sum(a * a)))


def ABSE(ytest, ypred):
    """Mean absolute relative error: ``mean |(ytest - ypred) / ytest|`` (inf where ytest has zeros)."""
    a, b = _pair(ytest, ypred, "ABSE")
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(np.mean(np.abs((a - b) / a)))
