"""AttentionContext as a torch module: the docs/semantics.md section 9 context with a learnable strength.

``forward(x) = x + (strength / D) * (x @ incoming)`` runs the C kernels of
:class:`pyfastpim.AttentionContext` (float32; other float dtypes are converted
in and out) and back-propagates the spec's gradients::

    grad_x        = g + (s/D) * (g @ incoming.T)
    grad_strength = (1/D) * sum(g * (x @ incoming))      (float64 accumulation)

``incoming`` and ``outgoing`` are buffers (so they travel with ``state_dict``);
they are float32 views of the C context's own buffers. Assigning a tensor to
either copies it into the context (a snapshot: ``b.incoming = a.outgoing`` is
not changed by ``a``'s later updates). ``incoming`` must not be reassigned
between a forward and its backward (checked). ``copy.deepcopy``, ``pickle`` and
``torch.save`` / ``torch.load`` work: the C context is rebuilt from the buffers.
"""
import copy

import torch
from torch import nn

from ..attention import _ContextCore, _finite
from .layers import _MemLayer, _float32

__all__ = ["AttentionContext"]


def _check_input(x):
    """forward's input checks, the same with and without an incoming context: a floating-point CPU
    tensor of at least one dimension (..., D). D is checked against incoming by the context."""
    if not isinstance(x, torch.Tensor):
        raise TypeError("AttentionContext: argument 'x': expected a torch.Tensor, got %s" % type(x).__name__)
    if not x.is_floating_point():
        raise TypeError("AttentionContext: argument 'x': expected a floating-point tensor, got dtype %s" % x.dtype)
    if x.device.type != "cpu":
        raise ValueError("AttentionContext: argument 'x': expected a tensor in host memory (device 'cpu'), got "
                         "device '%s'" % x.device)
    if x.dim() < 1:
        raise ValueError("AttentionContext: argument 'x': expected an array (..., D), got 0 dimensions")


class _AttentionApply(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, strength, module):
        c = module._ctx
        s = float(strength.detach())
        x32 = _float32(x.detach(), "x").contiguous()
        out = torch.empty_like(x32)
        c._apply(x32, out, None, None, False, strength=s)  # sets s and applies under one guard
        ctx.x32 = x32
        ctx.s = s
        ctx.module = module
        ctx.version = module._version
        ctx.strength_dtype = strength.dtype
        return out.to(dtype=x.dtype)

    @staticmethod
    def backward(ctx, grad_out):
        module = ctx.module
        if module._version != ctx.version:
            raise RuntimeError("AttentionContext.incoming was reassigned between forward and backward")
        g32 = _float32(grad_out.detach(), "grad_out").contiguous()
        gx, ds = module._ctx._gradients(ctx.x32, g32, None, strength=ctx.s)  # one guard, as forward
        grad_x = gx.to(dtype=grad_out.dtype) if ctx.needs_input_grad[0] else None
        grad_s = torch.tensor(ds, dtype=ctx.strength_dtype) if ctx.needs_input_grad[1] else None
        return grad_x, grad_s, None


class AttentionContext(nn.Module):
    """Similarity context shared between layers, with ``strength`` an ``nn.Parameter``.

    Args:
        update_rate: rate ``r`` of :meth:`update_outgoing` (``r <= 0`` disables updates).
        strength: initial value of the learnable strength ``s``, a finite number (float32's range); a
            non-finite value of the parameter at a forward (e.g. after a diverged step) raises ValueError.
        embed_dim: upper bound on ``D`` for updates, or None.
    """

    def __init__(self, update_rate=0.01, strength=0.0, embed_dim=None):
        super().__init__()
        self._ctx = _ContextCore(update_rate, 0.0, embed_dim)
        self.strength = nn.Parameter(torch.tensor(_finite(strength, "strength"), dtype=torch.float32))
        self.register_buffer("incoming", None)
        self.register_buffer("outgoing", None)
        self._views = {"incoming": None, "outgoing": None}
        self._version = 0

    # torch.jit.script failed with "Module 'AttentionContext' has no attribute '_ctx'": the layers' clear error
    __prepare_scriptable__ = _MemLayer.__prepare_scriptable__

    @property
    def update_rate(self):
        """Blend rate ``r`` of ``update_outgoing`` (0: updates leave ``outgoing`` unchanged)."""
        return self._ctx.update_rate

    @update_rate.setter
    def update_rate(self, value):
        self._ctx.update_rate = value

    @property
    def embed_dim(self):
        """Embedding dimension the context is limited to (None: the inputs' own)."""
        return self._ctx.embed_dim

    @property
    def context(self):
        """The underlying :class:`pyfastpim.AttentionContext`."""
        return self._ctx

    # -- buffers <-> C context --

    def _view(self, name):
        arr = getattr(self._ctx, name)
        return None if arr is None else torch.from_numpy(arr)

    def _refresh(self, name):
        view = self._view(name)
        self._buffers[name] = view
        self._views[name] = view

    def _sync(self):
        """Copy buffers the user replaced (assignment, .to(), ...) into the C context."""
        for name in ("incoming", "outgoing"):
            buf = self._buffers[name]
            if buf is self._views[name]:
                continue
            setattr(self._ctx, name, None if buf is None else _float32(buf.detach().to("cpu"), name))
            self._refresh(name)
            if name == "incoming":
                self._version += 1

    # -- public API --

    def forward(self, x):
        """``x + (strength / D) * (x @ incoming)`` for ``x`` of shape (..., D); x without incoming.
        ``x``: a floating-point CPU tensor, checked the same with or without incoming (TypeError /
        ValueError naming x); its last dimension must equal incoming's D."""
        self._sync()
        _check_input(x)
        if self._buffers["incoming"] is None:
            _finite(self.strength.detach(), "strength")  # refused as with an incoming context
            if x.dtype == torch.float64:
                _float32(x.detach(), "x")  # float64 beyond float32's range: refused as with an incoming context
            return x
        return _AttentionApply.apply(x, self.strength, self)

    @torch.no_grad()
    def update_outgoing(self, x, y):
        """Blend the sampled similarity of x and y (T, D) into ``outgoing`` (no gradient)."""
        self._sync()
        self._ctx.update_outgoing(x.detach(), y.detach())
        if self._views["outgoing"] is None:
            self._refresh("outgoing")

    @torch.no_grad()
    def update_outgoing_step(self, x_vec, y_vec):
        """The update for one row each (T = 1)."""
        self._sync()
        self._ctx.update_outgoing_step(x_vec.detach(), y_vec.detach())
        if self._views["outgoing"] is None:
            self._refresh("outgoing")

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        # torch skips buffers that are None; adopt the saved context (copied in by the next _sync)
        for name in ("incoming", "outgoing"):
            key = prefix + name
            if self._buffers[name] is None and key in state_dict:
                self._buffers[name] = state_dict[key].detach().clone()
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)
        self._sync()

    # -- copying and pickling: the C context is rebuilt from the buffers --

    def __getstate__(self):
        self._sync()
        state = self.__dict__.copy()
        state["_ctx"] = {"update_rate": self._ctx.update_rate, "embed_dim": self._ctx.embed_dim}
        state["_views"] = {"incoming": None, "outgoing": None}
        state["_buffers"] = dict(self._buffers)
        return state

    def __setstate__(self, state):
        spec = state["_ctx"]
        super().__setstate__(state)
        self._ctx = _ContextCore(spec["update_rate"], 0.0, spec["embed_dim"])
        self._sync()  # copies the restored buffers into the new context and views them

    def __deepcopy__(self, memo):
        """The copy pickling makes (its own C context, the buffers viewing it), made without pickling: also for
        a parametrized module (torch.nn.utils.parametrize), whose class refuses to pickle and whose default
        deep copy would copy the buffers apart from the copied context (its updates then not seen in them)."""
        new = self.__class__.__new__(self.__class__)
        memo[id(self)] = new
        new.__setstate__(copy.deepcopy(AttentionContext.__getstate__(self), memo))
        return new

    def memory_usage_bytes(self):
        """Bytes held by the context: incoming, outgoing and the reusable workspace."""
        return self._ctx.memory_usage_bytes()

    def extra_repr(self):
        d = None if self._buffers["incoming"] is None else self._buffers["incoming"].shape[0]
        return "update_rate=%g, embed_dim=%s, D=%s" % (self.update_rate, self.embed_dim, d)
