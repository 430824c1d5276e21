"""Devices: the CPU kernels and OpenCL devices running the same kernels with the same results.

The module is callable: ``pyfastpim.devices()`` is :func:`devices`, the list of compute devices.

Device strings:

- ``"cpu"`` (or None): the C kernels on the host (the default).
- ``"opencl"``: the device named by the environment variable ``PYFASTPIM_OPENCL_DEVICE``
  (``"opencl:P:D"`` or ``"P:D"``) when it is set, else the first GPU of any OpenCL platform,
  else the first OpenCL device. The variable lets a whole program, or the test suite, run on a
  chosen device without code changes (``PYFASTPIM_OPENCL_DEVICE=opencl:1:0 make test``).
- ``"opencl:P:D"``: device ``D`` of platform ``P``, numbered as :func:`devices` lists them.

An OpenCL device compiles the kernels (embedded in the module) at first use and keeps them,
with its context, queue and scratch buffers, for the life of the process
(:func:`resolve_device` caches one handle per device). On devices that share host memory
(PoCL, integrated GPUs; checked by a probe at build time) NumPy and torch arrays are used in
place, with zero copies; on discrete devices every transfer is explicit and counted by
:mod:`pyfastpim.memory`, and programmed weights stay resident between calls (``weights_key``).

The fused MVM's tile kernel is ``handle.mvm_kernel``: ``"auto"`` (the local-memory tiled kernel on
GPUs and accelerators with dedicated local memory, the untiled one elsewhere), ``"tiled"`` or
``"untiled"`` (``PYFASTPIM_CL_MVM`` sets it when a handle opens); both give the same bits.

Results: with noise off, bit-identical to the CPU path; with noise on, the same Philox streams
and the same (SLEEF) math, so equal to the CPU path (its portable, AVX2 and AVX-512 kernels draw
the same bits; within 1e-5 relative on a CPU without fused multiply-add; see kernels/base.cl).

Ops on a device handle (each the contract of the CPU op, kernels in kernels/*.cl):

- :func:`cl_dpe_mvm` (``_core.dpe_mvm``) and :func:`cl_dpe_conv2d` (``_core.dpe_conv2d``, the
  implicit-im2col convolution): the fused DAC -> crossbar -> ADC product.
- ``_core.slice_quantize(..., device=handle)`` / ``_core.program_conductance(..., device=handle)``:
  bit-slicing and weight programming, bit-identical (``SlicedData.slice_data_imp`` uses them for an
  engine on OpenCL). Every op of the C core takes ``device=`` (None or ``"cpu"``, or a handle) and
  runs through that backend's table (csrc/core/backend.h); the handle itself has no op methods.
- :func:`cl_attention_update` / :func:`cl_attention_apply`: an ``AttentionContext``'s update and
  apply on the device (the context's matrices shared in place) through
  ``_core._attn_update(..., device=handle)`` / ``_core._attn_apply(..., device=handle)``
  (``_core._attention_tanh(x, device=handle)`` is the update's tanh); bit-identical to the CPU
  (the products' fixed fma order, docs/semantics.md section 9). The step update
  (``update_outgoing_step``) has no device kernel: it runs on the CPU.
"""
import os
import re
import sys
import threading
import types

from . import _core
from ._torch_check import is_torch_device

__all__ = ["devices", "resolve_device", "resolve_engine_device", "cl_dpe_mvm", "cl_dpe_conv2d",
           "cl_attention_update", "cl_attention_apply", "OpenCLDevice"]

OpenCLDevice = _core.OpenCLDevice

_handles = {}
_lock = threading.Lock()
os.register_at_fork(after_in_child=_lock._at_fork_reinit)  # free in a forked child (see sliced._state_lock)
# A forked child does not reuse the parent's handles: resolve_device refuses there at once, before any
# OpenCL call (bind_opencl.c "fork"), instead of at the first operation; a parent's handle held by an
# engine refuses at its first use, naming the device. Dropping the parent's handles is safe: a handle
# freed in a forked child frees nothing of the parent's runtime (PfCLDevice_dealloc).
# The parent's handles are kept apart (_parent_handles) for engines and contexts unpickled there (_inherited_handle).
_parent_handles = {}


def _after_fork_in_child():
    _parent_handles.update(_handles)
    _handles.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)
_DEVICE_RE = re.compile(r"^opencl(?::(\d+):(\d+))?$")
_ENV_DEVICE = "PYFASTPIM_OPENCL_DEVICE"
_ENV_RE = re.compile(r"^(?:opencl:)?(\d+):(\d+)$")


def _env_device():
    """(platform, device) from PYFASTPIM_OPENCL_DEVICE, or None when it is unset or empty."""
    raw = os.environ.get(_ENV_DEVICE, "").strip()
    if not raw:
        return None
    m = _ENV_RE.match(raw.lower())
    if not m:
        raise ValueError("environment variable %s: expected 'opencl:P:D' or 'P:D' (platform and device numbers "
                         "as pyfastpim.devices() lists them), got %r" % (_ENV_DEVICE, raw))
    return int(m.group(1)), int(m.group(2))


_CUDA_RE = re.compile(r"^cuda(?::\d+)?$")
_TORCH_CPU_RE = re.compile(r"^cpu:\d+$")  # torch's 'cpu:0' (torch.device('cpu', 0)): the host, as 'cpu'


def devices():
    """All compute devices: ``[{"device": "cpu", ...}, {"device": "opencl:P:D", "name": ..., ...}]``.

    The CPU entry is always first. OpenCL entries carry ``platform`` and ``device_index`` (the
    numbers of the device string), the platform and device names,
    ``type`` ('gpu', 'cpu', 'accelerator', ...), ``host_unified_memory``, memory sizes and
    compute units as the OpenCL runtime reports them. No OpenCL platform gives only the CPU
    entry; an OpenCL runtime error raises RuntimeError.
    """
    out = [{"device": "cpu", "type": "cpu", "name": "pyfastpim C kernels (%s)" % _core.cpu_isa()[0]}]
    _, cl = _core.cl_devices()
    for d in cl:
        entry = dict(d)
        entry["device_index"] = entry.pop("device")
        entry["device"] = "opencl:%d:%d" % (d["platform"], d["device"])
        out.append(entry)
    return out


_ENGINE_FORMS = "None, 'cpu[:N]', 'cuda[:N]', 'opencl', 'opencl:P:D' or a torch.device"


def _parse(device, engine=False):
    """``(form, spec)`` of a ``device=`` argument, parsed once. form: the device string stripped and
    lower-cased (None or an :class:`OpenCLDevice` as given); spec: what :func:`_open` opens, None for
    the CPU, a handle, 'default' for 'opencl', (platform, device) for 'opencl:P:D', or 'cuda' for
    'cuda[:N]'. engine: the engines' forms too (torch.device, 'cpu:N', 'cuda[:N]'); TypeError /
    ValueError naming 'device' for any other value."""
    if engine and is_torch_device(device):
        device = str(device)  # torch.device('cpu') / torch.device('cuda', 0)
    if device is None or isinstance(device, OpenCLDevice):
        return device, device
    if not isinstance(device, str):
        raise TypeError("argument 'device': expected %s, got %r"
                        % (_ENGINE_FORMS if engine else "None, 'cpu', 'opencl' or 'opencl:P:D'", device))
    s = device.strip().lower()
    m = _DEVICE_RE.match(s)
    if m:
        return s, "default" if m.group(1) is None else (int(m.group(1)), int(m.group(2)))
    if s == "cpu" or engine and _TORCH_CPU_RE.match(s):
        return s, None
    if engine and _CUDA_RE.match(s):
        return s, "cuda"
    if engine:
        raise ValueError("argument 'device': expected %s (P:D: platform and device numbers), got %r"
                         % (_ENGINE_FORMS, device))
    raise ValueError("argument 'device': expected 'cpu', 'opencl' or 'opencl:P:D' (platform and device "
                     "numbers), got %r" % (device,))


def _no_platform_error(what):
    missing = _core.cl_library_error()  # the ICD loader is opened at run time, on first use
    if missing is not None:
        return RuntimeError("%s: OpenCL is not available: %s" % (what, missing))
    return RuntimeError("%s: no OpenCL platform found (the OpenCL ICD loader lists none; install an ICD such as "
                        "pocl-opencl-icd, registered under /etc/OpenCL/vendors)" % what)


def resolve_device(device):
    """The handle for ``device``: None for the CPU, else a cached :class:`OpenCLDevice`.

    Raises ValueError for a malformed device string and RuntimeError, naming what was looked
    for, when no OpenCL platform or no such device exists.
    """
    return _open(_parse(device)[1], device)


def _open(spec, device):
    """The handle for a spec of :func:`_parse` (not 'cuda'); device: the argument as given, for messages."""
    if spec is None or isinstance(spec, OpenCLDevice):
        return spec
    # a child forked after OpenCL was initialised refuses here, before any OpenCL call (a driver can
    # hang listing its platforms there)
    _core._cl_refuse_forked("opening the OpenCL device %r" % (device if isinstance(device, str) else str(device),))
    nplat, cl = _core.cl_devices()
    env = _env_device() if spec == "default" else None
    if env is not None:
        if nplat == 0:
            raise _no_platform_error("device 'opencl' (%s=%s)" % (_ENV_DEVICE, os.environ[_ENV_DEVICE]))
        if not any((d["platform"], d["device"]) == env for d in cl):
            have = ", ".join("opencl:%d:%d (%s)" % (d["platform"], d["device"], d["name"]) for d in cl) or "none"
            raise RuntimeError("device 'opencl': %s=%s names no OpenCL device (no device %d on platform %d); "
                               "available: %s" % (_ENV_DEVICE, os.environ[_ENV_DEVICE], env[1], env[0], have))
        key = env
    elif spec == "default":
        if not cl:
            if nplat == 0:
                raise _no_platform_error("device 'opencl'")
            raise RuntimeError("device 'opencl': %d OpenCL platform(s) found but no device" % nplat)
        gpus = [d for d in cl if d["type"] == "gpu"]
        pick = (gpus or cl)[0]
        key = (pick["platform"], pick["device"])
    else:
        key = spec
        if nplat == 0:
            raise _no_platform_error("device %r" % (device,))
        if not any((d["platform"], d["device"]) == key for d in cl):
            have = ", ".join("opencl:%d:%d (%s)" % (d["platform"], d["device"], d["name"]) for d in cl) or "none"
            raise RuntimeError("device %r: no OpenCL device %d on platform %d; available: %s"
                               % (device, key[1], key[0], have))
    with _lock:
        handle = _handles.get(key)
        if handle is None:
            handle = _handles[key] = OpenCLDevice(*key)
        return handle


def _inherited_handle(spec):
    """In a child forked after its parent initialised OpenCL: the parent's handle of the device ``spec``
    ('opencl:P:D', as a pickled engine or context names its device) when the parent had opened it, else None
    (None in any other process). An engine or context unpickled there (a multiprocessing Pool's task sent to
    a forked worker) then holds the parent's handle, which refuses every operation with the RuntimeError
    naming the device, as an engine inherited through fork does: refusing while unpickling killed the Pool
    worker before its task started, and the Pool waited for the task forever."""
    m = _DEVICE_RE.match(spec) if isinstance(spec, str) else None
    if m is None or m.group(1) is None or not _parent_handles:
        return None
    try:
        _core._cl_refuse_forked("unpickling")
    except RuntimeError:
        return _parent_handles.get((int(m.group(1)), int(m.group(2))))
    return None


def _engine_form(device):
    """An engine's ``device=`` argument checked without opening a device: None, an
    :class:`OpenCLDevice` as given, else the device string (a torch.device as its ``str``) stripped
    and lower-cased, one of 'cpu[:N]', 'cuda[:N]', 'opencl', 'opencl:P:D'. The one rule of
    DPETensor, AttentionContext and SlicedData: TypeError / ValueError naming 'device' otherwise."""
    return _parse(device, engine=True)[0]


def resolve_engine_device(device):
    """The compute handle for an engine's ``device=`` argument: :func:`resolve_device`'s values plus
    ``torch.device`` objects and 'cuda[:N]' strings (as MemIntelli scripts pass them), checked by
    :func:`_engine_form`.

    'cpu' / 'cpu:N' / torch.device('cpu'[, N]) is the CPU kernels; 'cuda[:N]' / torch.device('cuda') is the OpenCL
    GPU with the most compute units when one is present, else the CPU kernels (None). Tensors on
    CUDA are handled by :mod:`pyfastpim.memintelli` (copied to the host and back, counted).
    """
    return _engine_device(device)[0]


def _engine_device(device):
    """``(handle, name)`` for an engine's ``device=``: :func:`resolve_engine_device`'s handle and the
    name the engine shows as ``.device``: 'cpu' on the CPU kernels, else the device string as
    :func:`_engine_form` normalizes it ('opencl' for a handle or a torch.device)."""
    form, spec = _parse(device, engine=True)
    if spec == "cuda":
        _, cl = _core.cl_devices()
        gpus = [d for d in cl if d["type"] == "gpu"]
        if not gpus:
            return None, "cpu"
        pick = max(gpus, key=lambda d: (d.get("compute_units", 0), d.get("global_mem_bytes", 0)))
        spec = (pick["platform"], pick["device"])
    handle = _open(spec, device)
    if handle is None:
        return None, "cpu"
    return handle, form if isinstance(device, str) else "opencl"


def cl_dpe_mvm(handle, *args, weights_key=None, **kwargs):
    """``_core.dpe_mvm(*args, **kwargs)`` on the OpenCL device ``handle`` (from :func:`resolve_device`).

    Same arguments, validation, errors and results (bit-identical with noise off). ``weights_key``:
    any hashable identifying the programmed weights, e.g. ``(id(sliced), sliced._version)``; the
    device keeps those weights resident between calls (on discrete devices they cross the bus
    once) and releases them when a key with the same first item but another version arrives, when
    ``handle.forget_weights(first item)`` is called (pyfastpim's engines do so when the SlicedData
    dies), or when the handle is freed. The cache is bounded by bytes, ``handle.resident_budget``
    (default a quarter of the device memory; least recently used sets are evicted past it, and a
    set larger than the budget is transferred for its call only); ``handle.resident_bytes`` is what
    it holds. None transfers (or, on zero-copy devices, wraps) them per call. Without read noise
    (and without programmed conductances) the resident weights' packed form is kept too, so such
    calls do not pack the weights again; a key names fixed weights: arrays changed in place under
    the same key are not seen (on any device), give them a new version.
    """
    _check_handle(handle)
    return _core.dpe_mvm(*args, weights_key=weights_key, device=handle, **kwargs)


def _check_handle(handle):
    if not isinstance(handle, OpenCLDevice):
        raise TypeError("argument 'handle': expected an OpenCL device from pyfastpim.resolve_device(), got %s"
                        % type(handle).__name__)


def cl_dpe_conv2d(handle, *args, weights_key=None, **kwargs):
    """``_core.dpe_conv2d(*args, **kwargs)`` on the OpenCL device ``handle``: the implicit-im2col
    convolution (granule max, on-the-fly quantize/slice/DAC, fused MVM, optional dequantized
    unfolded input), all on the device.

    Same arguments, validation, errors and results as the CPU (bit-identical with noise off; with
    noise, equal to the CPU path). Returns ``(out (N, P, Ho, Wo), dequant or None)``.
    ``weights_key`` as for :func:`cl_dpe_mvm`.
    """
    _check_handle(handle)
    return _core.dpe_conv2d(*args, weights_key=weights_key, device=handle, **kwargs)


def cl_attention_update(handle, ctx, x, y):
    """``ctx.update_outgoing(x, y)`` with the update computed on the OpenCL device ``handle``.

    The CPU method's argument flow and rules (rows of x and y, D = min(columns, embed_dim),
    outgoing created as zeros or required to be D x D, rate <= 0 a no-op, the context's guard held
    while the device updates outgoing in place), then ``_core._attn_update(..., device=handle)``.
    outgoing is shared with the device (zero copies) on host-memory devices. Results are
    bit-identical to the CPU's (the covariance in the fixed fma order of docs/semantics.md section 9).
    """
    _check_handle(handle)
    return ctx._update_rows(x, y, handle)


def cl_attention_apply(handle, ctx, x, out=None):
    """``ctx.apply(x, out)`` (no engine) on the OpenCL device ``handle``: x + (s/D) * (x @ incoming),
    non-finite terms as 0; x returned unchanged (or copied into out) when the context has no
    incoming matrix or strength 0. The CPU method's argument flow, guard and result type (torch
    for torch x, NumPy otherwise, or out), then ``_core._attn_apply(..., device=handle)``.
    Bit-identical to the CPU (the product in the fixed fma order of docs/semantics.md section 9)."""
    _check_handle(handle)
    return ctx._apply(x, out, None, {}, False, device=handle)


class _DevicesModule(types.ModuleType):
    """``pyfastpim.devices`` is this module, callable as its :func:`devices` (the package's
    ``pyfastpim.devices()``), so ``pyfastpim.devices.cl_dpe_mvm`` and ``import pyfastpim.devices``
    reach the module's functions."""

    def __call__(self):
        return devices()


sys.modules[__name__].__class__ = _DevicesModule
