"""Attention context (spec section 9): the similarity context that transformer
and diffusion blocks share between layers.

:class:`AttentionContext` extends the C type ``pyfastpim._core.AttentionContext``
(kernels in ``csrc/attention.c``: OpenBLAS sgemm for the products, a vectorized
tanh, caller-provided outputs and a workspace the context owns and reuses, so
calls after the first with the same shapes allocate nothing) with a ``device``:
on an OpenCL device (``"opencl"``, ``"opencl:P:D"``), ``update_outgoing`` and
``apply`` (without ``engine``) run the kernels of ``kernels/attention.cl``,
equal to the CPU within float32 rounding. See the C type's docstrings for the
exact rules.
"""
from . import _core

__all__ = ["AttentionContext"]


def _check_out(out, who):
    """Refuses an out= tensor that autograd tracks, as torch's own out= does: writing into it
    behind autograd's back would silently corrupt gradients (and a leaf's .grad)."""
    if out is None or not hasattr(out, "requires_grad") or not out.requires_grad:
        return
    import torch
    if torch.is_grad_enabled():
        raise RuntimeError("%s(): argument 'out': the tensor requires grad%s; out= does not support automatic "
                           "differentiation (pass out=None, or call under torch.no_grad())"
                           % (who, " (a leaf tensor)" if out.is_leaf else ""))


class AttentionContext(_core.AttentionContext):
    __doc__ = ("AttentionContext(update_rate=0.01, strength=0.0, embed_dim=None, device=None)\n\n"
               + (_core.AttentionContext.__doc__ or "")
               + "\n\ndevice: None or 'cpu' (default), 'opencl' or 'opencl:P:D': where update_outgoing and "
                 "apply (without engine=) run.")

    def __init__(self, update_rate=0.01, strength=0.0, embed_dim=None, device=None):
        super().__init__(update_rate=update_rate, strength=strength, embed_dim=embed_dim)
        from .devices import resolve_device
        self._device = resolve_device(device)
        self.device = "cpu" if self._device is None else (device if isinstance(device, str) else "opencl")

    def update_outgoing(self, x, y):
        if self._device is None:
            return super().update_outgoing(x, y)
        from .devices import cl_attention_update
        return cl_attention_update(self._device, self, x, y)

    def apply(self, x, out=None, engine=None, **slice_kwargs):
        _check_out(out, "apply")
        if self._device is None or engine is not None:
            return super().apply(x, out=out, engine=engine, **slice_kwargs)
        from .devices import cl_attention_apply
        return cl_attention_apply(self._device, self, x, out)

    def apply_step(self, x, out=None, engine=None, **slice_kwargs):
        _check_out(out, "apply_step")
        return super().apply_step(x, out=out, engine=engine, **slice_kwargs)

    def gradients(self, x, grad_out, out=None):
        _check_out(out, "gradients")
        return super().gradients(x, grad_out, out=out)
