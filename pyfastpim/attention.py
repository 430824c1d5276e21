"""Attention context (docs/semantics.md section 9): the similarity context that transformer
and diffusion blocks share between layers.

:class:`AttentionContext` extends the C type ``pyfastpim._core.AttentionContext``
(kernels in ``csrc/cpu/attention.c``: OpenBLAS sgemm for the products, a vectorized
tanh, caller-provided outputs and a workspace the context owns and reuses, so
calls after the first with the same shapes allocate nothing) with a ``device``:
on an OpenCL device (``"opencl"``, ``"opencl:P:D"``), ``update_outgoing`` and
``apply`` (without ``engine``) run the kernels of ``kernels/attention.cl``,
equal to the CPU within float32 rounding. See the C type's docstrings for the
exact rules.

Both types can be copied (``copy.deepcopy``) and pickled: the matrices, rates and
strength travel; an OpenCL device is re-opened by its device string on load.
"""
import copyreg

import numpy as np

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

    def __reduce__(self):
        dev = self.device
        if self._device is not None:
            info = self._device.info
            dev = "opencl:%d:%d" % (info["platform"], info["device"])
        return (_rebuild, (type(self), _ctx_state(self), dev, self.device))


def _ctx_state(ctx):
    def snap(a):
        return None if a is None else np.array(a, dtype=np.float32, copy=True)
    return {"update_rate": ctx.update_rate, "strength": ctx.strength, "embed_dim": ctx.embed_dim,
            "incoming": snap(ctx.incoming), "outgoing": snap(ctx.outgoing)}


def _restore(ctx, state):
    for name in ("incoming", "outgoing"):
        if state[name] is not None:
            setattr(ctx, name, state[name])
    return ctx


def _rebuild(cls, state, device=None, device_name=None):
    """Unpickling / deepcopy of an AttentionContext (either type)."""
    kw = {"update_rate": state["update_rate"], "strength": state["strength"], "embed_dim": state["embed_dim"]}
    if cls is None:  # the C type (its name clashes with this module's subclass: not picklable by name)
        return _restore(_core.AttentionContext(**kw), state)
    try:
        ctx = cls(device=device, **kw)
    except (RuntimeError, ValueError):
        if device in (None, "cpu", "opencl") or device_name == device:  # the device named is gone
            raise
        ctx = cls(device="opencl", **kw)  # the numbered device is gone: the default one
    if device_name is not None:
        ctx.device = device_name
    return _restore(ctx, state)


def _reduce_core(ctx):
    return (_rebuild, (None, _ctx_state(ctx)))


copyreg.pickle(_core.AttentionContext, _reduce_core)
