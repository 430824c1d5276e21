"""Attention context (spec section 9): the similarity context that transformer
and diffusion blocks share between layers.

:class:`AttentionContext` is the C type ``pyfastpim._core.AttentionContext``:
kernels in ``csrc/attention.c`` (OpenBLAS sgemm for the products, a
vectorized tanh, OpenMP elementwise loops) working in caller-provided outputs
and a workspace the context owns and reuses, so calls after the first with the
same shapes allocate nothing. See its docstrings for the exact rules.
"""
from ._core import AttentionContext

__all__ = ["AttentionContext"]
