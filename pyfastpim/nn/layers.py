"""MemIntelli drop-in layers: ``LinearMem`` and ``Conv2dMem`` on the simulated crossbar.

Forward (docs/semantics.md section 8): the input is bit-sliced and quantized per granule, multiplied
with the programmed weights by the engine (DAC -> crossbar -> ADC -> shift-add), and the
bias is added. Backward is straight-through: the gradients of an ordinary linear layer /
convolution taken with the dequantized weight ``Wq`` and dequantized input ``xq``.

Weights are programmed once and cached. A layer re-programs itself automatically when its
weight changed since it was programmed; the rule, checked cheaply on every forward, is:

    the weight's ``(_version, data_ptr, shape, dtype)`` or the engine object differs from
    the values recorded at programming; a weight in shared host memory (``module.share_memory()``, a
    tensor received through torch.multiprocessing) also when its values differ from a copy taken at
    programming (another process's in-place writes, e.g. Hogwild training, move no version counter here).

``_version`` is bumped by every in-place update of the parameter itself (optimizer steps,
``load_state_dict``, DDP's initial broadcast, ``with torch.no_grad(): w.mul_(2)``);
``data_ptr`` changes when the parameter's storage is replaced (``module.to(...)``,
``weight.data = t``). The rule does not rely on addresses being unique over time: the layer
keeps a reference to the tensor it programmed (sharing the parameter's storage, so no extra
memory while the parameter keeps it), so that storage cannot be freed and its address handed
to a later ``weight.data = t`` (which does not bump ``_version``) while the programmed
crossbars derive from it. A replaced storage stays alive until the next forward re-programs.
Not detected: in-place writes through ``weight.data`` (a tensor with
its own version counter, e.g. ``layer.weight.data.mul_(2)``) and to a weight made under
``torch.inference_mode()`` (an inference tensor has no version counter); call :meth:`update_weight`
after those, as MemIntelli requires after every change.

The programmed crossbars are derived state: not in the ``state_dict``, dropped when a layer is
pickled, and re-programmed on first use after ``load_state_dict``, unpickling or
``copy.deepcopy`` (which shares the engine: it is a simulator configuration and noise stream).

Inference (``torch.no_grad()``, or nothing requiring grad) calls the engine's fused
``forward_linear`` / ``forward_conv2d`` with ``return_dequant=False``: no autograd graph and no
dequantized or unfolded copies of the input are kept. A module made by ``torch.jit.trace`` runs
the layers' autograd Function at each run, which passes ``return_dequant=False`` too (and keeps
nothing) for a run that needs no gradient. Training keeps the dequantized (unfolded, for
convolutions) input for the weight gradient, as MemIntelli does.
"""
import contextlib
import copy
import math
import os
import threading

import torch
import torch.nn as nn
from torch.nn.utils import parametrize as _parametrize

from .. import _core
from ..dpe import _pair  # the one int-or-pair checker (forward_conv2d's too)
from ..sliced import _widths

__all__ = ["LinearMem", "Conv2dMem"]

# the programmed weights and their key are written and read as one pair under this lock (held for the
# attribute accesses only, never while slicing), so a forward in another thread never pairs one
# re-programming's weights with another's key
_programmed_lock = threading.Lock()
os.register_at_fork(after_in_child=_programmed_lock._at_fork_reinit)  # free in a forked child (see sliced._state_lock)


# ----------------------------------------------------------------------------- helpers

def _pyfastpim_attr(name):
    import pyfastpim
    try:
        return getattr(pyfastpim, name)
    except AttributeError:
        raise ImportError("pyfastpim.%s is not available in this build of pyfastpim" % name) from None


_GEOMETRY_MAX = 2 ** 31 - 1  # the C core's convolution geometry limit


def _paral(value, name):
    return _pair(value, name, minimum=1)


def _quant_gran(value, name):
    if value is None or isinstance(value, str) and value in ("per-matrix", "per-row", "per-col"):
        return value
    if isinstance(value, str):
        raise ValueError("argument '%s': must be 'per-matrix', 'per-row', 'per-col', None or a pair of positive "
                         "ints, got %r" % (name, value))
    return _pair(value, name, minimum=1)


def _check_paral(input_paral_size, weight_paral_size):
    if input_paral_size[1] != weight_paral_size[0]:
        raise ValueError("input_paral_size[1] (%d) must equal weight_paral_size[0] (%d): both are the number of "
                         "crossbar rows one input block drives" % (input_paral_size[1], weight_paral_size[0]))


def _host_if_meta(device):
    """Where a layer keeps its slice-method tensors (MemIntelli: on the parameters' device): the host for a
    layer made on the meta device (torch.nn.utils.skip_init, device='meta' then to_empty), whose to_empty
    moves the parameters but not these plain attributes, which must keep their values."""
    return torch.device("cpu") if device.type == "meta" else device


def _check_float_input(x, who):
    if not isinstance(x, torch.Tensor):
        raise TypeError("%s: input must be a torch.Tensor, got %s" % (who, type(x).__name__))
    if not x.is_floating_point():
        raise TypeError("%s: input must be a floating-point tensor, got dtype %s" % (who, x.dtype))


def _float32(x, name="input"):
    """The tensor x as float32. A finite float64 value beyond float32's range would become an infinity
    the caller never gave (quantization then blames NaN or infinity, the attention kernels count it as 0):
    a ValueError naming ``name``, as the core's conversion refuses it (docs/semantics.md, float narrowing).
    One more pass, only for float64 data whose cast produced an infinity."""
    out = x.to(torch.float32)
    if x.dtype == torch.float64 and bool(torch.isinf(out).any()):
        bad = torch.isinf(out) & torch.isfinite(x)
        if bool(bad.any()):
            k = int(torch.nonzero(bad.reshape(-1))[0, 0])
            raise ValueError("argument '%s': values must be finite in float32 (|x| <= 3.4e38): value %r "
                             "(element %d) is beyond float32's range, not rounded to an infinity"
                             % (name, float(x.reshape(-1)[k]), k))
    return out


def _inference_of(sliced, layer):
    """The inference flag to program layer's weights with: that of sliced, the SlicedData it holds, or with
    none (a copy or an unpickled layer, whose programmed weights are not kept) the one saved with it."""
    if sliced is None:
        return layer.__dict__.get("_weight_inference", False)
    return getattr(sliced, "inference", False)


def _as_torch(a, like=None):
    if a is None or isinstance(a, torch.Tensor):
        return a
    return torch.from_numpy(a) if hasattr(a, "__array_interface__") else torch.as_tensor(a)


def _host_quantized(sliced):
    """The programmed weights' dequantized values (Wq) as a host tensor, whatever the class of
    ``sliced``: pyfastpim.memintelli's device-aware SlicedData returns its attributes on its device."""
    from ..sliced import SlicedData
    if not isinstance(sliced, SlicedData):  # another class's quantized_data (a MemIntelli-like object)
        return torch.as_tensor(sliced.quantized_data).detach().cpu().to(torch.float32)
    return _as_torch(sliced._quantized(copy=False))  # only read: shared, not copied


def _needs_grad(*tensors):
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def _through_function(*tensors):
    """Whether a forward runs through the layer's autograd Function: when a gradient is needed, and
    under ``torch.jit.trace``, which records the Function as one node that calls the engine at each
    run (the direct inference path would be recorded as its output, a constant, so the traced
    module would return the traced input's result for every input). The Function computes and keeps
    the dequantized copies only for a run that needs a gradient (_MemFunction)."""
    return _needs_grad(*tensors) or torch.jit.is_tracing()


# torch's test for a torch.func transform's tensor (None in a torch without functorch), looked up once
_is_functorch_wrapped = getattr(getattr(torch._C, "_functorch", None), "is_functorch_wrapped_tensor", None)


def _check_no_functorch(who, *tensors):
    """NotImplementedError naming the layer when one of its tensors (input, weight, bias) is a torch.func /
    functorch transform's (vmap, grad, jacrev, ...): the engine reads the tensors' memory (a transform's
    wrapped tensors have none it can read) and the layers' autograd Functions have no vmap or setup_context
    rule. A batched vmap rule would also differ from a loop over the samples: the noise is drawn per engine
    call (docs/semantics.md section 11)."""
    wrapped = _is_functorch_wrapped
    if wrapped is not None and any(t is not None and wrapped(t) for t in tensors):
        raise NotImplementedError(
            "%s: torch.func / functorch transforms (vmap, grad, jacrev, jvp, ...) are not supported: the crossbar "
            "product runs in pyfastpim's C engine through a custom autograd Function. Call the layer in a loop over "
            "the samples and take gradients with torch.autograd (backward / torch.autograd.grad); functional_call "
            "(torch.func or torch.nn.utils.stateless) without a transform works" % who)


def _eager(fn):
    """fn run eagerly under torch.compile (torch.compiler.disable; fn itself in a torch without it, as 1.13):
    dynamo (torch 2.x) cannot trace the layers' autograd Functions, whose forward calls the C engine with the
    layer as an argument (it failed with an internal error inside apply, not a graph break). The graph breaks
    there and the Function runs as in eager mode, its autograd node recorded as usual."""
    disable = getattr(getattr(torch, "compiler", None), "disable", None)
    return fn if disable is None else disable(fn)


class _MemFunction(torch.autograd.Function):
    """Base of the layers' autograd Functions, called ``apply(x, weight, bias, layer)`` (a convolution's with
    ``layer, geometry``: _extra_args): forward gets a last argument ``need``, whether this call needs a
    gradient (grad enabled and a tensor requiring grad), and computes and keeps the dequantized copies that
    backward uses only then. ``apply`` decides
    it at each call: ``torch.jit.trace`` records the Function with its non-tensor arguments as constants
    and a traced module calls ``apply`` with them at each run, so a value recorded while tracing would
    hold for every run (a module traced with grad computed the copies under ``torch.no_grad()`` too). While
    tracing, ``need`` is True (_through_function's rule), so the graph recorded is the same whatever the grad
    mode of the trace (torch.jit.trace's check re-traces under no_grad and compares)."""

    #: how many arguments follow ``layer`` in ``apply`` (a convolution's geometry, read once by its forward)
    _extra_args = 0

    @classmethod
    @_eager
    def apply(cls, x, weight, bias, layer, *extra):  # after them: the `need` a trace recorded, ignored
        return super().apply(x, weight, bias, layer, *extra[:cls._extra_args], _through_function(x, weight, bias))


# ----------------------------------------------------------------------------- engine calls
# The engine's fused entry points slice the input inside the kernel (and, for convolutions,
# read the unfolded patch matrix implicitly), so no slice codes or unfolded copies are stored.

def _engine_method(engine, name):
    fn = getattr(engine, name, None)
    if fn is None:
        raise TypeError("engine: expected a pyfastpim.DPETensor (an engine with %s), got %s"
                        % (name, type(engine).__name__))
    return fn


def _engine_linear(layer, x, sliced, return_dequant):
    """forward_linear of the layer's input x with its programmed weights sliced (layer._programmed_for),
    its errors about x naming the layer's argument 'input'."""
    fn = _engine_method(layer.engine, "forward_linear")
    with _as_input():
        out, xq = fn(x, sliced, layer.input_slice_method, layer.input_paral_size, layer.input_quant_gran,
                     bw_e=layer.bw_e, return_dequant=return_dequant)
    return _as_torch(out), _as_torch(xq)


def _conv_geometry(layer):
    """The layer's (kernel_size, stride, padding, dilation) as pairs, read once per forward: its output-size
    check, the engine call and backward all take this one snapshot, so an assignment of one of them during
    a forward (another thread, a hook) or before backward cannot mix two geometries."""
    return layer._kernel2d, layer._stride2d, layer._padding2d, layer._dilation2d


def _engine_conv2d(layer, x, sliced, geometry, return_dequant):
    """forward_conv2d of the layer's input x with its programmed weights sliced and the geometry of
    _conv_geometry, as _engine_linear."""
    fn = _engine_method(layer.engine, "forward_conv2d")
    with _as_input():
        out, xq = fn(x, sliced, *geometry, layer.input_slice_method, layer.input_paral_size, layer.input_quant_gran,
                     bw_e=layer.bw_e, return_dequant=return_dequant)
    return _as_torch(out), _as_torch(xq)


@contextlib.contextmanager
def _as_input():
    """Errors naming the engine's argument 'x' re-raised naming 'input', the layers' forward argument, and
    those naming its 'input_slice' naming 'input_slice_method', the layer's attribute given as it
    (pyfastpim.dpe._renamed). The layers pass ``input_slice_method`` unchecked: the engine checks the widths
    (pyfastpim.sliced._widths), once per forward."""
    from ..dpe import _renamed
    with _renamed("x", "input", "input_slice", "input_slice_method"):
        yield


def _conv_out_hw(hw, kernel_size, stride, padding, dilation):
    return tuple((hw[i] + 2 * padding[i] - dilation[i] * (kernel_size[i] - 1) - 1) // stride[i] + 1
                 for i in range(2))


# ----------------------------------------------------------------------------- autograd functions


def _shared_snapshot(w, copy=True):
    """A copy of the weight tensor w's values when w lies in shared host memory (``module.share_memory()``,
    a tensor received through torch.multiprocessing), else None; copy=False: w itself (detached) instead
    of a copy. Another process writes such a weight in place (Hogwild training) without moving this
    process's version counter of it, so a layer compares its values with this copy at each forward."""
    if w.device.type != "cpu" or not w.is_shared():  # CUDA tensors all read as shared
        return None
    return w.detach().clone() if copy else w.detach()


def _positive_int(v, name):
    """A layer size: an int (a NumPy integer too; not a bool or a float: _core.check_number, the type rule
    of every entry point) >= 1; TypeError / ValueError naming the argument."""
    v = _core.check_number(v, name, True)
    if v < 1:
        raise ValueError("argument '%s': must be a positive int, got %d" % (name, v))
    return v

class _LinearMemFunction(_MemFunction):
    """y = engine(x, W) + b; straight-through backward with Wq and xq (docs/semantics.md section 8).
    x in the input's dtype: the engine narrows it to float32 (one copy, counted as a dtype_conversion in
    pyfastpim.memory, a float64 value beyond float32's range a ValueError naming 'input'; a float32 x is read
    in place) and forward returns y in x's dtype, so
    backward receives dy in that dtype and narrows it itself, a float64 value beyond float32's range a
    ValueError naming 'grad_output' (a cast outside the Function would turn it into an infinity)."""

    @staticmethod
    def forward(ctx, x, weight, bias, layer, need):
        sliced = layer._programmed_for(weight)  # the weight autograd sees (read once, in forward)
        out, xq = _engine_linear(layer, x.detach(), sliced, return_dequant=need)
        if bias is not None:
            out += _float32(bias.detach(), "bias")  # in place: out is the engine's own new tensor
        if need:
            ctx.save_for_backward(xq, _host_quantized(sliced))  # wq (in, out): dequantized W^T
        ctx.has_bias = bias is not None
        ctx.dtypes = (x.dtype, weight.dtype, None if bias is None else bias.dtype)
        return out.to(x.dtype)

    @staticmethod
    def backward(ctx, dy):
        xq, wq = ctx.saved_tensors
        dx = dw = db = None
        dy = _float32(dy, "grad_output").to(wq.dtype)
        if ctx.needs_input_grad[0]:
            dx = torch.matmul(dy, wq.t()).to(ctx.dtypes[0])            # dy @ Wq
        dy2 = dy.reshape(-1, dy.shape[-1])
        if ctx.needs_input_grad[1]:
            dw = torch.matmul(dy2.t(), xq.reshape(-1, xq.shape[-1]).to(dy2.dtype)).to(ctx.dtypes[1])
        if ctx.has_bias and ctx.needs_input_grad[2]:
            db = dy2.sum(0).to(ctx.dtypes[2])
        return dx, dw, db, None, None


class _Conv2dMemFunction(_MemFunction):
    """Convolution on the crossbar; backward = gradient of an ordinary conv with Wq and xq. x, y and dy in
    the input's dtype, as in _LinearMemFunction."""

    _extra_args = 1  # the forward's geometry (_conv_geometry)

    @staticmethod
    def forward(ctx, x, weight, bias, layer, geometry, need):
        sliced = layer._programmed_for(weight)  # as in _LinearMemFunction
        out, xq = _engine_conv2d(layer, x.detach(), sliced, geometry,
                                 return_dequant=need)  # xq: (N, L, C_in*kh*kw)
        if bias is not None:
            out += _float32(bias.detach(), "bias").view(1, -1, 1, 1)  # as in _LinearMemFunction
        if need:
            ctx.save_for_backward(xq, _host_quantized(sliced))  # wq (C_in*kh*kw, C_out)
        ctx.geom = (tuple(x.shape), tuple(weight.shape)) + tuple(geometry[1:])  # stride, padding, dilation
        ctx.has_bias = bias is not None
        ctx.dtypes = (x.dtype, weight.dtype, None if bias is None else bias.dtype)
        return out.to(x.dtype)

    @staticmethod
    def backward(ctx, dy):
        xq, wq = ctx.saved_tensors
        x_shape, w_shape, stride, padding, dilation = ctx.geom
        dx = dw = db = None
        dy = _float32(dy, "grad_output").to(wq.dtype).contiguous()
        n, c_out = dy.shape[:2]
        if ctx.needs_input_grad[0]:
            wq4 = wq.t().reshape(w_shape)
            dx = torch.nn.grad.conv2d_input(x_shape, wq4, dy, stride=stride, padding=padding,
                                            dilation=dilation).to(ctx.dtypes[0])
        if ctx.needs_input_grad[1]:
            # sum over images and patches of dy (C_out) x xq_unfolded (C_in*kh*kw): one GEMM
            dy_t = dy.reshape(n, c_out, -1).transpose(0, 1).reshape(c_out, -1)
            dw = torch.mm(dy_t, xq.reshape(-1, xq.shape[-1]).to(dy.dtype)).reshape(w_shape).to(ctx.dtypes[1])
        if ctx.has_bias and ctx.needs_input_grad[2]:
            db = dy.sum((0, 2, 3)).to(ctx.dtypes[2])
        return dx, dw, db, None, None, None


# ----------------------------------------------------------------------------- layers

class _MemLayer(nn.Module):
    """Shared machinery: parameters, programmed-weight cache with automatic re-programming."""

    #: The class of ``weight_sliced``; None: pyfastpim.SlicedData. pyfastpim.memintelli's layers hold
    #: its device-aware SlicedData, as MemIntelli's layers hold theirs.
    _weight_sliced_type = None

    def _init_params(self, weight_shape, bias, device, dtype, size_args=("out_features", "in_features")):
        """The weight of weight_shape (out, in, kernel...) and, with bias, a bias of size out;
        initialized by reset_parameters(). size_args: the constructor arguments that set the shape."""
        factory = {"device": device, "dtype": dtype}
        try:
            weight = torch.empty(weight_shape, **factory)
        except RuntimeError as exc:  # torch's size overflow / allocator failure, naming the sizes
            names = ", ".join("'%s'" % a for a in size_args)
            text = str(exc).splitlines()[0][:200]
            if "overflow" in text:
                raise ValueError("arguments %s: the weight's size %s overflows (%s)"
                                 % (names, tuple(weight_shape), text)) from exc
            if "allocate" in text:
                raise MemoryError("arguments %s: a weight of shape %s does not fit in memory (%s)"
                                  % (names, tuple(weight_shape), text)) from exc
            raise
        self.weight = nn.Parameter(weight)
        if _core.check_flag(bias, "bias"):  # bool or 0/1, as every flag (convert.c)
            self.bias = nn.Parameter(torch.empty(weight_shape[0], **factory))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        """nn.Linear's / nn.Conv1d's / nn.Conv2d's initialization (Kaiming-uniform weights, uniform bias)."""
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in = self.weight.numel() // self.weight.shape[0]  # in * prod(kernel)
            bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
            nn.init.uniform_(self.bias, -bound, bound)

    def _init_mem(self, engine, input_slice, weight_slice, bw_e, input_paral_size, weight_paral_size,
                  input_quant_gran, weight_quant_gran, device):
        input_widths = _widths(input_slice, "input_slice")  # SlicedData's checker (pyfastpim.sliced)
        self._weight_slice = _widths(weight_slice, "weight_slice")
        self.input_paral_size = _paral(input_paral_size, "input_paral_size")
        self.weight_paral_size = _paral(weight_paral_size, "weight_paral_size")
        _check_paral(self.input_paral_size, self.weight_paral_size)
        self.input_quant_gran = _quant_gran(input_quant_gran, "input_quant_gran")
        self.weight_quant_gran = _quant_gran(weight_quant_gran, "weight_quant_gran")
        from ..sliced import _bw_e, _check_sizes
        _check_sizes(self.input_paral_size, self.input_quant_gran, "input_paral_size", "input_quant_gran", 1)
        _check_sizes(self.weight_paral_size, self.weight_quant_gran, "weight_paral_size", "weight_quant_gran", 0)
        # None or 0: INT, a positive int: BFP (docs/semantics.md section 4, MemIntelli's `if bw_e:`), as
        # SlicedData and the engine read it (_core.check_bw_e): TypeError naming bw_e for another type (bool,
        # float, str), ValueError for a negative int
        self.bw_e = _bw_e(bw_e)
        # MemIntelli keeps the slice methods as tensors on the parameters' device under these names, and
        # its programmed weights' SlicedData holds the weight one as its slice_method (so here too); the
        # input is sliced with input_slice_method as it is at each call (see _input_slice)
        self.input_slice_method = torch.tensor(input_widths).to(_host_if_meta(self.weight.device))
        self._set_weight_slice(self._weight_slice)
        self.engine = engine
        self._weight_sliced = None
        self._programmed_key = None
        self._programmed_ref = None  # the weight tensor programmed: its storage (address) stays alive
        self._programmed_snapshot = None  # a copy of its values when it lies in shared memory (_shared_snapshot)
        if engine is not None and self.weight.device.type != "meta":  # a meta weight has no data to program yet
            self.update_weight()

    # the matrix programmed into the crossbars: (C, P) = W.reshape(out, -1)^T of the weight w
    @staticmethod
    def _weight_matrix(w):
        w = _float32(w.detach(), "weight")  # element indices in errors: of the weight tensor as given
        return w.reshape(w.shape[0], -1).t()

    def _weight_key(self, w):
        """The programmed-weight key of the weight tensor w (self.weight as one forward read it)."""
        # a weight made under torch.inference_mode() is an inference tensor, which has no version counter
        # (reading it raises): its in-place writes (only possible inside inference_mode) are not seen, as
        # writes through weight.data are not; update_weight() after them, as MemIntelli requires
        version = None if w.is_inference() else w._version
        return (version, w.data_ptr(), tuple(w.shape), w.stride(), w.storage_offset(), w.dtype, id(self.engine))

    def update_weight(self):
        """Re-slice and re-program this layer's weight into the crossbars (after changing it), with the
        settings of the SlicedData in ``weight_sliced`` (as MemIntelli, which re-slices into that object):
        one assigned there, or its ``bw_e`` / ``paral_size`` / ``quant_gran`` edited, is programmed so."""
        self._program(self.weight)

    def _program(self, w):
        """update_weight with the weight tensor w: self.weight read once by the caller. Under
        torch.nn.utils.parametrize each read of self.weight computes a new tensor, so the key, the
        programmed values and the reference kept must all come from the one tensor the forward uses."""
        if self.engine is None:
            raise RuntimeError("%s has no engine: set layer.engine to a pyfastpim.DPETensor first"
                               % type(self).__name__)
        if w.device.type == "meta":
            raise RuntimeError("%s: its weight is on the meta device (it has no data): give the layer storage "
                               "(module.to_empty(device='cpu')) and load its weights before running or programming it"
                               % type(self).__name__)
        current = self.__dict__.get("_weight_sliced")
        self._adopt_weight_sliced_settings(current)
        sliced_type = self._weight_sliced_type or _pyfastpim_attr("SlicedData")
        sliced = sliced_type(self._weight_slice, bw_e=self.bw_e, is_weight=True, paral_size=self.weight_paral_size,
                             quant_gran=self.weight_quant_gran, inference=_inference_of(current, self))
        # its slice_method attribute is the layer's weight_slice_method tensor, as in MemIntelli (layers
        # pickled before that keep the tuple); the slicing reads the widths checked at construction
        sliced.slice_method = getattr(self, "_weight_slice_tensor", self._weight_slice)
        # the key is read before the values: an in-place step from another thread while they are sliced
        # then leaves the key stale (the next forward re-programs) instead of keying the old values as new
        key = self._weight_key(w)
        snapshot = _shared_snapshot(w)  # before the values too: a write from another process while they are
        sliced.slice_data_imp(self.engine, self._weight_matrix(w))  # sliced leaves it stale (re-programs)
        self._set_programmed(sliced, w, key, snapshot)

    def _adopt_weight_sliced_settings(self, current):
        """The layer's weight settings (weight_slice, bw_e, weight_paral_size, weight_quant_gran) taken
        from current, the SlicedData held in weight_sliced (if it is one), checked as the constructor
        checks them."""
        from ..sliced import SlicedData, _bw_e, _check_sizes
        if not isinstance(current, SlicedData):
            return
        paral = _paral(current.paral_size, "weight_sliced.paral_size")
        gran = _quant_gran(current.quant_gran, "weight_sliced.quant_gran")
        _check_sizes(paral, gran, "weight_sliced.paral_size", "weight_sliced.quant_gran", 0)
        self.bw_e = _bw_e(current.bw_e)
        self.weight_paral_size, self.weight_quant_gran = paral, gran
        if current._widths != self._weight_slice:  # a SlicedData of another slice method was assigned
            self._set_weight_slice(current._widths)

    def _set_weight_slice(self, widths):
        """The weight slice widths (checked) and MemIntelli's tensor of them on the parameters' device."""
        self._weight_slice = widths
        tensor = torch.tensor(widths).to(_host_if_meta(self.weight.device))
        self.weight_slice_method = self._weight_slice_tensor = tensor

    def _set_programmed(self, sliced, w, key=None, snapshot=False):
        """sliced: the programmed weights, programmed from the weight tensor w (whose key and shared-memory
        snapshot, read before its values, are key and snapshot; None / False: read now)."""
        if sliced is None:
            key = ref = snapshot = None
        else:
            key = self._weight_key(w) if key is None else key
            snapshot = _shared_snapshot(w) if snapshot is False else snapshot
            # holding the programmed storage keeps its address from being reused by a new storage
            # assigned through `weight.data = t` (which leaves _version unchanged) or by the next
            # tensor a parametrization computes
            ref = w.detach()
        with _programmed_lock:
            self._weight_sliced, self._programmed_key, self._programmed_ref = sliced, key, ref
            self._programmed_snapshot = snapshot

    def _is_stale(self, w, key, sliced, programmed_key, snapshot):
        """Whether the programmed weights sliced (of programmed_key and snapshot) are not those of the weight
        tensor w (of key): never programmed, w's key differs, or w lies in shared host memory and its values
        differ from the snapshot taken at programming (another process wrote them)."""
        if sliced is None or programmed_key != key:
            return True
        if _shared_snapshot(w, copy=False) is None:
            return False
        return snapshot is None or not torch.equal(snapshot, w.detach())

    def _programmed_for(self, w):
        """The programmed weights of the weight tensor w (self.weight as the forward read it, once),
        re-programmed from w if stale."""
        key = self._weight_key(w)
        with _programmed_lock:
            sliced, programmed_key = self._weight_sliced, self._programmed_key
            snapshot = self.__dict__.get("_programmed_snapshot")  # absent in layers pickled before it existed
        if self._is_stale(w, key, sliced, programmed_key, snapshot):
            try:
                if type(self).update_weight is _MemLayer.update_weight:
                    self._program(w)
                else:  # a subclass's override: re-programming goes through it, as it did
                    self.update_weight()
            except AttributeError as exc:  # would be masked by nn.Module.__getattr__
                raise RuntimeError("programming the weights of %s failed: %s" % (type(self).__name__, exc)) from exc
            with _programmed_lock:
                sliced = self._weight_sliced
        return sliced

    @property
    def weight_sliced(self):
        """The programmed weights (a SlicedData holding ``W.reshape(out, -1)^T``), re-programmed if stale."""
        return self._programmed_for(self.weight)

    @weight_sliced.setter
    def weight_sliced(self, value):
        self._set_programmed(value, self.weight)

    @property
    def _input_slice(self):
        """The input's slice widths as ``input_slice_method`` gives them now: MemIntelli's layers slice every
        input with that attribute, so assigning it (or editing the tensor) takes effect at the next forward
        (which hands it to the engine, checking it there once); an invalid one is a ValueError / TypeError
        naming it."""
        return _widths(self.input_slice_method, "input_slice_method")

    @property
    def input_slice(self):
        return self._input_slice

    @property
    def weight_slice(self):
        return self._weight_slice

    def _check_engine(self):
        if self.engine is None:
            raise RuntimeError("%s has no engine: set layer.engine to a pyfastpim.DPETensor"
                               % type(self).__name__)

    def __prepare_scriptable__(self):
        """torch.jit.script calls this on every module of the model before compiling: a clear error instead
        of a TorchScript compile error deep in pyfastpim's Python (the forward calls the C engine and Python
        helpers that TorchScript cannot compile). pyfastpim.nn.AttentionContext shares it."""
        raise NotImplementedError(
            "%s: torch.jit.script is not supported (its forward calls pyfastpim's C kernels, which "
            "TorchScript cannot compile); use torch.jit.trace, whose module calls the C kernels at each run in "
            "this process (it cannot be saved with torch.jit.save)" % type(self).__name__)

    # The programmed crossbars are derived state: never pickled, re-programmed on first use. Their
    # inference flag (prepare_for_inference: no dequantized copy kept) is a setting, kept for that.
    def __getstate__(self):
        state = self.__dict__.copy()
        state["_weight_inference"] = _inference_of(self.__dict__.get("_weight_sliced"), self)
        state["_weight_sliced"] = None
        state["_programmed_key"] = None
        state["_programmed_ref"] = None
        state["_programmed_snapshot"] = None
        return state

    def __deepcopy__(self, memo):
        """Deep copy sharing the engine (a simulator configuration and noise stream, not model state)."""
        if self.engine is not None:
            memo.setdefault(id(self.engine), self.engine)
        new = self.__class__.__new__(self.__class__)
        memo[id(self)] = new
        # a parametrized layer's class (torch.nn.utils.parametrize) refuses __getstate__, for pickling only:
        # torch deep-copies such a module (its default __deepcopy__), so a parametrized layer copies too
        parametrized = _parametrize.is_parametrized(self)
        state = _MemLayer.__getstate__(self) if parametrized else self.__getstate__()
        for key, value in state.items():
            object.__setattr__(new, key, copy.deepcopy(value, memo))
        return new

    def _mem_extra_repr(self):
        from .._display import engine_brief
        try:
            input_slice = self._input_slice
        except (TypeError, ValueError):  # an invalid input_slice_method assigned: the next forward names it,
            input_slice = "%r (invalid)" % (self.input_slice_method,)  # but print(model) must still work
        w = self.weight
        current = not self._is_stale(w, self._weight_key(w), self._weight_sliced, self._programmed_key,
                                     self.__dict__.get("_programmed_snapshot"))
        state = "programmed" if current else "re-programs on next forward"
        return ("input_slice=%s, weight_slice=%s, bw_e=%s, input_paral_size=%s, weight_paral_size=%s, "
                "input_quant_gran=%s, weight_quant_gran=%s, engine=(%s), device=%s, %s"
                % (input_slice, self._weight_slice, self.bw_e, self.input_paral_size, self.weight_paral_size,
                   self.input_quant_gran, self.weight_quant_gran, engine_brief(self.engine),
                   getattr(self.engine, "device", "cpu"), state))


class LinearMem(_MemLayer):
    """A linear layer computed on the simulated memristive crossbar (MemIntelli's ``LinearMem``).

    ``y = MapReduceDot(slice(x), programmed(W^T)) + b`` (docs/semantics.md section 8). Inputs of shape
    ``(N, in_features)`` or ``(B, N, in_features)`` (each batch item quantized independently);
    more leading dimensions are folded into ``B`` and a 1-D input is treated as one row.

    Args:
        engine: a :class:`pyfastpim.DPETensor` (shared by layers; ``None`` defers programming).
        in_features, out_features: sizes as in ``nn.Linear``.
        input_slice, weight_slice: bit widths of the slices, most significant first, e.g. ``(1, 1, 2, 4)``.
        bias: learn an additive bias.
        device, dtype: of the parameters (computation is float32 on the CPU).
        bw_e: None or 0 for INT quantization, a positive int for block floating point (docs/semantics.md
            section 4; MemIntelli's ``if bw_e:``).
        input_paral_size, weight_paral_size: crossbar block shapes; ``input_paral_size[1]`` must equal
            ``weight_paral_size[0]``.
        input_quant_gran, weight_quant_gran: quantization granularity (pair, 'per-matrix', 'per-row',
            'per-col', or None = the block).

    Backward is straight-through: ``dx = dy @ Wq``, ``dW = dy^T @ xq``, ``db = sum dy``.
    Under ``torch.no_grad()`` (or when nothing requires grad) no dequantized copies are kept.
    """

    def __init__(self, engine, in_features, out_features, input_slice, weight_slice, bias=True, device=None,
                 dtype=torch.float32, bw_e=None, input_paral_size=(1, 32), weight_paral_size=(32, 32),
                 input_quant_gran=(1, 32), weight_quant_gran=(32, 32)):
        super().__init__()
        self.in_features = _positive_int(in_features, "in_features")
        self.out_features = _positive_int(out_features, "out_features")
        self._init_params((self.out_features, self.in_features), bias, device, dtype)
        self._init_mem(engine, input_slice, weight_slice, bw_e, input_paral_size, weight_paral_size,
                       input_quant_gran, weight_quant_gran, device)

    def forward(self, input):
        _check_float_input(input, "LinearMem")
        if input.dim() == 0 or input.shape[-1] != self.in_features:
            raise ValueError("LinearMem: input of shape %s has %s features in its last dimension, expected "
                             "in_features=%d" % (tuple(input.shape), input.shape[-1] if input.dim() else "no",
                                                 self.in_features))
        self._check_engine()
        shape = input.shape
        weight = self.weight  # read once: the tensor programmed is the one autograd sees (_program)
        _check_no_functorch("LinearMem", input, weight, self.bias)
        if input.numel() == 0:
            # an empty batch (0, in) or (B, 0, in): an empty output as nn.Linear gives (its graph
            # yields zero gradients), nothing to program or multiply
            return torch.nn.functional.linear(input, weight.to(input.dtype),
                                               None if self.bias is None else self.bias.to(input.dtype))
        x = input
        if x.dim() == 1:
            x = x.unsqueeze(0)
        elif x.dim() > 3:
            x = x.reshape(-1, shape[-2], shape[-1])
        if _through_function(input, weight, self.bias):  # x narrowed to float32 in it, y in input's dtype
            return _LinearMemFunction.apply(x, weight, self.bias, self).reshape(shape[:-1] + (self.out_features,))
        out, _ = _engine_linear(self, x.detach(), self._programmed_for(weight), return_dequant=False)
        if self.bias is not None:
            out += _float32(self.bias.detach(), "bias")
        return out.reshape(shape[:-1] + (self.out_features,)).to(input.dtype)

    def extra_repr(self):
        return "in_features=%d, out_features=%d, bias=%s, %s" % (
            self.in_features, self.out_features, self.bias is not None, self._mem_extra_repr())


class Conv2dMem(_MemLayer):
    """A 2-D convolution computed on the simulated memristive crossbar (MemIntelli's ``Conv2dMem``).

    The input ``(N, C_in, H, W)`` (or unbatched ``(C_in, H, W)``) is unfolded into patches
    ``(N, H_out*W_out, C_in*kh*kw)`` (PyTorch unfold order, done implicitly by the engine),
    multiplied like :class:`LinearMem` with ``W.reshape(C_out, -1)^T``, the bias added, and
    reshaped to ``(N, C_out, H_out, W_out)``. ``kernel_size``, ``stride``, ``padding`` and
    ``dilation`` are ints or pairs; the other arguments are those of :class:`LinearMem`.
    Backward: the gradient of an ordinary convolution taken with ``Wq`` and ``xq`` (the
    dequantized unfolded input, so ``dW`` sums ``dy x xq_unfolded`` over patches).
    """

    def __init__(self, engine, in_channels, out_channels, kernel_size, input_slice, weight_slice, stride=1,
                 padding=0, dilation=1, bias=True, device=None, dtype=None, bw_e=None, input_paral_size=(1, 32),
                 weight_paral_size=(32, 32), input_quant_gran=(1, 32), weight_quant_gran=(32, 32)):
        super().__init__()
        self.in_channels = _positive_int(in_channels, "in_channels")
        self.out_channels = _positive_int(out_channels, "out_channels")
        self.kernel_size = _pair(kernel_size, "kernel_size", minimum=1, maximum=_GEOMETRY_MAX)
        self.stride = _pair(stride, "stride", minimum=1, maximum=_GEOMETRY_MAX)
        self.padding = _pair(padding, "padding", minimum=0, maximum=_GEOMETRY_MAX)
        self.dilation = _pair(dilation, "dilation", minimum=1, maximum=_GEOMETRY_MAX)
        self._init_params((self.out_channels, self.in_channels) + self.kernel_size, bias, device, dtype,
                          ("out_channels", "in_channels", "kernel_size"))
        self._init_mem(engine, input_slice, weight_slice, bw_e, input_paral_size, weight_paral_size,
                       input_quant_gran, weight_quant_gran, device)

    # The geometry as pairs, read from the attributes once per forward (_conv_geometry; layer.stride = 2 takes
    # effect, as for nn.Conv2d); pyfastpim.memintelli's Conv2dMem keeps those attributes as given.
    _kernel2d = property(lambda self: _pair(self.kernel_size, "kernel_size", 1, _GEOMETRY_MAX))
    _stride2d = property(lambda self: _pair(self.stride, "stride", 1, _GEOMETRY_MAX))
    _padding2d = property(lambda self: _pair(self.padding, "padding", 0, _GEOMETRY_MAX))
    _dilation2d = property(lambda self: _pair(self.dilation, "dilation", 1, _GEOMETRY_MAX))

    def forward(self, input):
        _check_float_input(input, "Conv2dMem")
        if input.dim() not in (3, 4):
            raise ValueError("Conv2dMem: expected a 4-D input (N, C_in, H, W) or an unbatched 3-D input "
                             "(C_in, H, W), got shape %s" % (tuple(input.shape),))
        unbatched = input.dim() == 3
        x = input.unsqueeze(0) if unbatched else input
        if x.shape[1] != self.in_channels:
            raise ValueError("Conv2dMem: input of shape %s has %d channels, expected in_channels=%d"
                             % (tuple(input.shape), x.shape[1], self.in_channels))
        geometry = _conv_geometry(self)
        k, s, p, d = geometry
        h_out, w_out = _conv_out_hw(x.shape[2:], k, s, p, d)
        if h_out < 1 or w_out < 1:
            raise ValueError("Conv2dMem: input of spatial size %s is too small for kernel_size=%s, padding=%s, "
                             "dilation=%s (output would be %dx%d)" % (tuple(x.shape[2:]), k, p, d, h_out, w_out))
        self._check_engine()
        weight = self.weight  # read once, as in LinearMem.forward
        _check_no_functorch("Conv2dMem", input, weight, self.bias)
        if x.shape[0] == 0:
            # an empty batch: (0, C_out, H_out, W_out) on every device, as nn.Conv2d gives
            return torch.nn.functional.conv2d(x, weight.to(x.dtype),
                                              None if self.bias is None else self.bias.to(x.dtype), s, p, d)
        if _through_function(input, weight, self.bias):  # as in LinearMem.forward
            out = _Conv2dMemFunction.apply(x, weight, self.bias, self, geometry)
        else:
            out, _ = _engine_conv2d(self, x.detach(), self._programmed_for(weight), geometry,
                                    return_dequant=False)
            if self.bias is not None:
                out += _float32(self.bias.detach(), "bias").view(1, -1, 1, 1)
            out = out.to(input.dtype)
        return out.squeeze(0) if unbatched else out

    def extra_repr(self):
        s = "%d, %d, kernel_size=%s, stride=%s" % (self.in_channels, self.out_channels, self.kernel_size, self.stride)
        if self._padding2d != (0, 0):
            s += ", padding=%s" % (self.padding,)
        if self._dilation2d != (1, 1):
            s += ", dilation=%s" % (self.dilation,)
        return s + ", bias=%s, %s" % (self.bias is not None, self._mem_extra_repr())
