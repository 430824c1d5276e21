"""Attention context (docs/semantics.md section 9): the similarity context that transformer
and diffusion blocks share between layers.

The context's state (rate, strength, embed_dim, the incoming / outgoing matrices), its guard
and the argument flow live here; the arithmetic runs in the stateless kernels of
``csrc/cpu/attention.c`` (a fixed-order GEMM for the products, a vectorized tanh), bound thinly
as ``_core._attn_*`` on arrays already converted here. Each context owns a
``_core.AttentionWorkspace`` reused from call to call, so calls after the first with the same
shapes allocate nothing.

:class:`AttentionContext` adds a ``device``: on an OpenCL device (``"opencl"``,
``"opencl:P:D"``), ``update_outgoing`` and ``apply`` (without ``engine``) run the kernels of
``kernels/attention.cl``, equal to the CPU within float32 rounding: the same ``_core`` bindings
with ``device=`` the handle, after the same argument flow and under the same guard
(``update_outgoing_step``, ``gradients`` and ``engine=`` run on the CPU).

Concurrency: every method that reads or writes the matrices, the workspace or the parameters
holds the context's guard from after its arguments are converted until its last access (the
GIL-released kernels and the ``engine=`` product included). Another thread's call waits for
it; a call from the holding thread itself (code run by ``engine=``) raises RuntimeError.
Matrices replaced by a setter are dropped only after the guard is released.

Both types can be copied (``copy.deepcopy``) and pickled: the matrices, rates and strength
travel; an OpenCL device is re-opened by its device string on load.
"""
import numbers
import os
import threading
import weakref
from math import prod

import numpy as np

from . import _core
from ._torch_check import is_torch as _is_torch

__all__ = ["AttentionContext"]

_get_ident = threading.get_ident


def _view(obj, name, writable=False):
    """obj as a float32 C-contiguous pyfastpim.Array (zero-copy when possible); errors name ``name``."""
    if _is_torch(obj) and obj.requires_grad:
        obj = obj.detach()  # DLPack refuses tensors that require grad
    return _core._attn_view(obj, writable, name)


def _wrap(arr, like):
    """A new result for the caller: torch for torch inputs, NumPy otherwise."""
    return arr.to_torch() if _is_torch(like) else np.asarray(arr)


#: Largest |strength| and |update_rate|: the kernels use them as float32 (a larger value is inf there).
_PARAM_MAX = float(np.finfo(np.float32).max)


def _finite(v, name):
    """A context parameter (strength, update_rate) as a float, finite also in float32; bool is not a number."""
    if isinstance(v, numbers.Integral) and not isinstance(v, bool) and abs(int(v)) > _PARAM_MAX:
        d = float("inf")  # an int beyond float32 (or float64)
    else:
        d = _core.check_number(v, name)  # the type rule of every entry point (csrc/python/convert.c)
    if not abs(d) <= _PARAM_MAX:  # NaN, inf, or inf once rounded to float32
        got = repr(v)
        raise ValueError("argument '%s': must be finite (|value| <= %.7g, float32's range), got %s"
                         % (name, _PARAM_MAX, got if len(got) <= 40 else got[:36] + "..."))
    return d


def _check_out(out, who):
    """Refuses an out= tensor that autograd tracks, as torch's own out= does: writing into it
    behind autograd's back would silently corrupt gradients (and a leaf's .grad)."""
    if out is None or not getattr(out, "requires_grad", False):
        return
    import torch
    if torch.is_grad_enabled():
        raise RuntimeError("%s(): argument 'out': the tensor requires grad%s; out= does not support automatic "
                           "differentiation (pass out=None, or call under torch.no_grad())"
                           % (who, " (a leaf tensor)" if out.is_leaf else ""))


def _out_for(out, ref):
    """out= as a writable view with ref's shape (ValueError naming 'out' otherwise)."""
    arr = _view(out, "out", writable=True)
    if arr.shape != ref.shape:
        raise ValueError("argument 'out': shape %r does not match the result's shape %r" % (arr.shape, ref.shape))
    return arr


def _rows(arr, name):
    """(rows, columns) of (..., D) input rows (leading dimensions flattened)."""
    if arr.ndim < 2:
        raise ValueError("argument '%s': expected (T, D) rows (got %d dimensions); use update_outgoing_step for one "
                         "vector" % (name, arr.ndim))
    d = arr.shape[-1]
    if d < 1:
        raise ValueError("argument '%s': needs at least one column" % name)
    return prod(arr.shape) // d, d


class _Guard:
    """A lock that knows its holder: a second thread waits, the holding thread raises."""
    __slots__ = ("_lock", "_owner", "__weakref__")
    _all = weakref.WeakSet()  # re-made free in a forked child, whose only thread holds none of them

    def __init__(self):
        self._lock = threading.Lock()
        self._owner = 0
        _Guard._all.add(self)

    @classmethod
    def _after_fork_in_child(cls):
        for guard in list(cls._all):
            guard._lock._at_fork_reinit()  # see sliced._state_lock
            guard._owner = 0

    def acquire(self, what):
        me = _get_ident()
        if self._owner == me:
            raise RuntimeError("%s: AttentionContext is in use by this thread (a reentrant call, e.g. from the "
                               "engine= product of one of its own calls)" % what)
        self._lock.acquire()  # waits with the GIL released; a signal handler's exception interrupts it
        self._owner = me

    def release(self):
        self._owner = 0
        self._lock.release()

    def held_by_me(self, what):
        if self._owner != _get_ident():
            raise RuntimeError("%s: the AttentionContext is not held by this thread" % what)


os.register_at_fork(after_in_child=_Guard._after_fork_in_child)


_DOC = ("Similarity context shared between transformer / diffusion layers (spec section 9).\n"
        "Calls allocate nothing after the first with the same shapes (the workspace is reused).\n")


class _ContextCore:
    __doc__ = ("AttentionContext(update_rate=0.01, strength=0.0, embed_dim=None)\n\n" + _DOC
               + "This CPU-only type is also reachable as pyfastpim._core.AttentionContext, its historical name.\n")

    def __init__(self, update_rate=0.01, strength=0.0, embed_dim=None):
        r = _finite(update_rate, "update_rate")
        s = _finite(strength, "strength")
        if embed_dim is not None:
            # None or an int (a NumPy integer too; not a bool): the type rule of every entry point
            embed_dim = _core.check_number(embed_dim, "embed_dim", True)
            if not 1 <= embed_dim <= _core.ATTN_MAX_DIM:  # (D, D) float32 matrices: D * D * 4 bytes fit int64
                raise ValueError("argument 'embed_dim': must be None or in 1..%d (the largest D whose (D, D) "
                                 "float32 matrices have a size), got %d" % (_core.ATTN_MAX_DIM, embed_dim))
        guard = self.__dict__.get("_guard")
        if guard is None:
            self._guard = guard = _Guard()
            self._ws = _core.AttentionWorkspace()
            self._incoming = self._outgoing = None
        guard.acquire("AttentionContext.__init__")
        try:
            self._rate, self._strength, self._embed = r, s, (int(embed_dim) if embed_dim is not None else None)
        finally:
            guard.release()

    # ---- parameters and matrices ----

    @property
    def strength(self):
        """Mixing strength s of apply() (a finite float)."""
        return self._strength

    @strength.setter
    def strength(self, value):
        self._set_param("_strength", _finite(value, "strength"), "strength")

    @property
    def update_rate(self):
        """Update rate r of update_outgoing(); r <= 0 disables it."""
        return self._rate

    @update_rate.setter
    def update_rate(self, value):
        self._set_param("_rate", _finite(value, "update_rate"), "update_rate")

    @property
    def embed_dim(self):
        """Upper bound on D for updates, or None."""
        return self._embed

    def _set_param(self, attr, value, what):
        self._guard.acquire(what)
        try:
            setattr(self, attr, value)
        finally:
            self._guard.release()

    @property
    def incoming(self):
        """The context applied by apply(): a float32 (D, D) NumPy view of the context's buffer, or None.
        Assigning copies the values in (a snapshot; the buffer is reused when D is unchanged)."""
        m = self._incoming
        return None if m is None else np.asarray(m)

    @incoming.setter
    def incoming(self, value):
        self._set_matrix("_incoming", value, "incoming")

    @property
    def outgoing(self):
        """The context built by update_outgoing(): a float32 (D, D) NumPy view of the context's buffer
        (updated in place by later updates; copy it to keep a snapshot), or None. Assigning copies
        the values in."""
        m = self._outgoing
        return None if m is None else np.asarray(m)

    @outgoing.setter
    def outgoing(self, value):
        self._set_matrix("_outgoing", value, "outgoing")

    def _set_matrix(self, attr, value, name):
        # converted before the guard is taken: the conversion may run Python code (an
        # __array_interface__ property, __dlpack__) and release the GIL
        v = None if value is None else _view(value, name)
        if v is not None and (v.ndim != 2 or v.shape[0] != v.shape[1] or v.shape[0] < 1):
            raise ValueError("argument '%s': expected a square (D, D) matrix with D >= 1, got shape %r"
                             % (name, v.shape))
        old = None
        self._guard.acquire(name)
        try:
            dst = getattr(self, attr)
            if v is None:
                old = dst
                setattr(self, attr, None)
            else:
                if dst is None or dst.shape != v.shape:
                    old, dst = dst, _core._attn_new(v.shape, False)
                    setattr(self, attr, dst)
                _core._attn_copy(dst, v, True)
        finally:
            self._guard.release()
        del old  # after the release: dropping a matrix may run code

    def __delattr__(self, name):
        if name in ("incoming", "outgoing"):
            raise AttributeError("cannot delete '%s' (assign None instead)" % name)
        if name in ("strength", "update_rate"):
            raise AttributeError("cannot delete '%s'" % name)
        super().__delattr__(name)

    # ---- update ----

    def _outgoing_for(self, d, fn):
        """outgoing ready for an update of size d (created as zeros, or checked); guard held."""
        o = self._outgoing
        if o is None:
            o = self._outgoing = _core._attn_new((d, d), True)
        elif o.shape[0] != d:
            n = o.shape[0]
            raise ValueError("%s: the inputs give D = %d but outgoing is %d x %d (D = min(columns, embed_dim)); set "
                             "outgoing = None to start a new context" % (fn, d, n, n))
        return o

    def update_outgoing(self, x, y):
        """Blend the sampled similarity of x and y (T, D) into outgoing (spec 9):
        outgoing = (1 - r) * outgoing + r * tanh(cov / den). T = min rows, D = min(columns, embed_dim);
        leading dimensions are flattened into rows. No-op (the arguments still checked) when update_rate <= 0
        or T == 0. ValueError when D differs from an existing outgoing (assign outgoing = None to start over)."""
        return self._update_rows(x, y, None)

    def _update_rows(self, x, y, device):
        """update_outgoing on ``device`` (None: the CPU; an OpenCLDevice: pyfastpim.devices). The
        arguments are checked even when the rate disables the update (bad ones fail whatever r is)."""
        xa = _view(x, "x")
        ya = _view(y, "y")
        (tx, dx), (ty, dy) = _rows(xa, "x"), _rows(ya, "y")
        if not self._rate > 0.0:
            return None  # spec: return if r <= 0
        self._update(xa, ya, min(tx, ty), min(dx, dy), False, "update_outgoing", device)

    def update_outgoing_step(self, x_vec, y_vec):
        """The update for one row each (T = 1): vectors are centred by the mean over their elements, and
        each one-element column has norm |x_i - mean|."""
        xa = _view(x_vec, "x_vec")
        ya = _view(y_vec, "y_vec")
        for a, name in ((xa, "x_vec"), (ya, "y_vec")):
            if a.ndim != 1:
                raise ValueError("argument '%s': expected a vector (D,), got %d dimensions" % (name, a.ndim))
        d = min(xa.shape[0], ya.shape[0])
        if d < 1:
            raise ValueError("argument '%s': needs at least one element" % ("x_vec" if xa.shape[0] < 1 else "y_vec"))
        if not self._rate > 0.0:
            return None  # checked as for r > 0 first
        self._update(xa, ya, 1, d, True, "update_outgoing_step")

    def _update(self, xa, ya, t, d, step, fn, device=None):
        self._guard.acquire(fn)
        try:
            rate = self._rate
            if not rate > 0.0 or t == 0:  # the rate may have changed meanwhile
                return None
            if self._embed is not None and self._embed < d:
                d = self._embed
            _core._attn_update(self._ws, self._outgoing_for(d, fn), xa, ya, t, d, rate, step, device=device)
        finally:
            self._guard.release()
        return None

    # ---- apply ----

    def apply(self, x, out=None, engine=None, **slice_kwargs):
        """out = x + (s / D) * (x @ incoming) for x (..., D), non-finite terms of x and of the product as 0.
        Without incoming or with s == 0, returns x itself (or copies it into out=). With engine= the
        product is pyfastpim.dpe_matmul(x, incoming, engine, **slice_kwargs) on the simulated crossbar.
        Returns torch for torch x, NumPy otherwise, or out (float32, shape of x; out=x is allowed)."""
        return self._apply(x, out, engine, slice_kwargs, False)

    def apply_step(self, x_vec, out=None, engine=None, **slice_kwargs):
        """apply() for one vector (D,)."""
        return self._apply(x_vec, out, engine, slice_kwargs, True)

    def _apply(self, x, out, engine, kw, step, strength=None, device=None):
        """apply / apply_step; ``strength`` (a float) is stored and used under the same guard; ``device``
        (None: the CPU; an OpenCLDevice: pyfastpim.devices) runs the product without engine=."""
        fn, xname = ("apply_step", "x_vec") if step else ("apply", "x")
        _check_out(out, fn)
        if strength is not None:  # the torch module's parameter, checked as the setter checks a value
            strength = _finite(strength, "strength")
        if kw and engine is None:
            raise TypeError("%s(): slicing options %r apply only with engine=" % (fn, kw))
        # every argument is converted before the guard is taken: conversions may run Python
        # code and release the GIL
        xa = _view(x, xname)
        if (xa.ndim != 1) if step else (xa.ndim < 1):
            raise ValueError("argument '%s': expected %s, got %d dimensions"
                             % (xname, "a vector (D,)" if step else "an array (..., D)", xa.ndim))
        oa = None if out is None else _out_for(out, xa)
        self._guard.acquire(fn)
        try:
            if strength is not None:
                self._strength = strength
            w, s = self._incoming, self._strength
            if w is not None and xa.shape[-1] != w.shape[0]:  # checked whatever s is
                raise ValueError("argument '%s': last dimension %d does not match the context's D = %d"
                                 % (xname, xa.shape[-1], w.shape[0]))
            if w is None or s == 0.0:  # spec: out = x (returned as is, or copied into out=)
                if engine is not None:  # the product is skipped: bad engine= arguments fail all the same
                    _check_engine_args(engine, kw)
                if oa is None:
                    return x
                _core._attn_copy(oa, xa, False)
                return out
            res = oa if oa is not None else _core._attn_new(xa.shape, False)
            if engine is None:
                _core._attn_apply(self._ws, res, xa, w, s, xname, device=device)
            else:
                _engine_apply(res, xa, w, s, engine, kw, xname)
        finally:
            self._guard.release()
        return out if out is not None else _wrap(res, x)

    # ---- gradients ----

    def gradients(self, x, grad_out, out=None):
        """(grad_x, grad_strength) of apply(x) for the upstream gradient grad_out:
        grad_strength = (1/D) * sum(g * (x @ incoming)) (float64), grad_x = g + (s/D) * (g @ incoming.T),
        non-finite terms as 0; grad_x = g and grad_strength = 0 without incoming; grad_x = g when s == 0."""
        return self._gradients(x, grad_out, out)

    def _gradients(self, x, grad_out, out, strength=None):
        _check_out(out, "gradients")
        if strength is not None:
            strength = _finite(strength, "strength")
        xa = _view(x, "x")
        ga = _view(grad_out, "grad_out")
        if xa.ndim < 1:  # the message apply() gives: a 0-d x is no (..., D) array, whatever grad_out is
            raise ValueError("argument 'x': expected an array (..., D), got 0 dimensions")
        if xa.shape != ga.shape:
            raise ValueError("argument 'grad_out': shape %r does not match x's shape %r (both must be (..., D))"
                             % (ga.shape, xa.shape))
        oa = None if out is None else _out_for(out, ga)  # converted before the guard is taken
        self._guard.acquire("gradients")
        try:
            if strength is not None:
                self._strength = strength
            w, s = self._incoming, self._strength
            if w is None:  # apply was the identity: dx = g, ds = 0
                if oa is None:
                    return grad_out, 0.0
                _core._attn_copy(oa, ga, False)
                return out, 0.0
            d = w.shape[0]
            if xa.shape[-1] != d:
                raise ValueError("argument 'x': last dimension %d does not match the context's D = %d"
                                 % (xa.shape[-1], d))
            pass_g = s == 0.0 and oa is None  # apply was the identity: grad_x is g itself
            if oa is None and not pass_g:
                oa = _core._attn_new(ga.shape, False)
            ds = _core._attn_gradients(self._ws, oa, xa, ga, w, s)
        finally:
            self._guard.release()
        if pass_g:
            return grad_out, ds
        return (out if out is not None else _wrap(oa, grad_out)), ds

    # ---- misc ----

    def memory_usage_bytes(self):
        """Bytes held by the context: incoming, outgoing and the reusable workspace."""
        self._guard.acquire("memory_usage_bytes")  # the workspace grows with the GIL released
        try:
            n = self._ws.nbytes()
            for m in (self._incoming, self._outgoing):
                if m is not None:
                    n += 4 * m.shape[0] * m.shape[1]
        finally:
            self._guard.release()
        return n

    # The guard as a pair of calls, for code that must hold it across several of its own steps.
    def _hold(self):
        """Take the context's guard for this thread (waiting like any call)."""
        self._guard.acquire("AttentionContext")

    def _release(self):
        """Give back the guard taken by _hold()."""
        self._guard.held_by_me("_release")
        self._guard.release()

    def __repr__(self):
        def shape(m):  # the matrix's actual (D, D), not a placeholder
            return "None" if m is None else str(tuple(int(n) for n in m.shape))
        return "AttentionContext(update_rate=%r, strength=%r, embed_dim=%r, incoming=%s, outgoing=%s)" % (
            self._rate, self._strength, self._embed, shape(self._incoming), shape(self._outgoing))

    def __reduce__(self):
        return (_rebuild, (None, _ctx_state(self)))


def _matmul():
    """pyfastpim.dpe_matmul, or NotImplementedError naming 'engine' when this build lacks the DPE family."""
    import pyfastpim
    matmul = getattr(pyfastpim, "dpe_matmul", None)
    if matmul is None:
        raise NotImplementedError("argument 'engine': pyfastpim.dpe_matmul (the DPE family) is not available in "
                                  "this build")
    return matmul


def _check_engine_args(engine, kw):
    """engine= and the slicing options checked as pyfastpim.dpe_matmul checks them, reading no data, for
    an apply that skips the product (no incoming, or s == 0); guard held (the checks run no user code)."""
    _matmul()
    from .dpe import _check_matmul_args
    _check_matmul_args(engine, **kw)


def _engine_apply(res, xa, w, s, engine, kw, xname):
    """res = fin(x) + (s/D) * fin(pyfastpim.dpe_matmul(fin(x), w, engine, **kw)); guard held (code the
    product runs that calls back into the context raises)."""
    matmul = _matmul()
    ro, xv, wv = np.asarray(res), np.asarray(xa), np.asarray(w)
    if (np.may_share_memory(ro, xv) and ro.ctypes.data != xv.ctypes.data) or np.may_share_memory(ro, wv):
        raise ValueError("argument 'out': must not overlap the context's incoming matrix or partially overlap "
                         "'%s' (out=%s itself is allowed)" % (xname, xname))
    d = w.shape[0]
    t = xv.size // d
    xin = np.asarray(_core._attn_finite(xa)).reshape(t, d)  # the crossbar sees the sanitized input
    xw = _view(matmul(xin, wv, engine, **kw), "dpe_matmul result")
    if xw.shape != (t, d):
        raise ValueError("dpe_matmul returned shape %r, expected (%d, %d)" % (xw.shape, t, d))
    _core._attn_epilogue(res, xa, xw, s / d)


class AttentionContext(_ContextCore):
    __doc__ = ("AttentionContext(update_rate=0.01, strength=0.0, embed_dim=None, device=None)\n\n" + _DOC
               + "\ndevice: where update_outgoing and apply (without engine=) run, as DPETensor's device: None or "
                 "'cpu[:N]' (default), 'opencl', 'opencl:P:D', 'cuda[:N]' (the best OpenCL GPU, else the CPU) or a "
                 "torch.device.")

    def __init__(self, update_rate=0.01, strength=0.0, embed_dim=None, device=None):
        super().__init__(update_rate=update_rate, strength=strength, embed_dim=embed_dim)
        from .devices import _engine_device  # the engines' device forms (DPETensor's), one rule
        self._device, self.device = _engine_device(device)

    def update_outgoing(self, x, y):
        return self._update_rows(x, y, self._device)

    def apply(self, x, out=None, engine=None, **slice_kwargs):
        return self._apply(x, out, engine, slice_kwargs, False, device=self._device)

    update_outgoing.__doc__ = _ContextCore.update_outgoing.__doc__
    apply.__doc__ = _ContextCore.apply.__doc__

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
    if cls is None or cls is _ContextCore:  # the CPU-only type (_core.AttentionContext)
        return _restore(_ContextCore(**kw), state)
    from .devices import _inherited_handle
    handle = _inherited_handle(device)  # in a forked child: the parent's handle (refuses at first use)
    try:
        ctx = cls(device=device if handle is None else handle, **kw)
    except (RuntimeError, ValueError):
        if device in (None, "cpu", "opencl") or device_name == device:  # the device named is gone
            raise
        ctx = cls(device="opencl", **kw)  # the numbered device is gone: the default one
    if device_name is not None:
        ctx.device = device_name
    return _restore(ctx, state)


# The CPU-only context keeps the name it had when it was a C type, for code that used it.
_core.AttentionContext = _ContextCore
