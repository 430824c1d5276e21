"""pyfastpim: fast memristive processing-in-memory (PIM) crossbar simulation.

A drop-in engine for MemIntelli's layers: bit-sliced quantization, the fused
DAC -> crossbar MVM -> ADC product with in-kernel device noise, and attention
context kernels, written in C and shared with NumPy and torch without copies.
The numbers contract is docs/semantics.md; see README.md.
"""
def _core_import_error(exc):
    """A clearer ImportError for the two usual ways `pyfastpim._core` fails to load."""
    import glob
    import os
    import sysconfig
    here = os.path.dirname(os.path.abspath(__file__))
    built = glob.glob(os.path.join(here, "_core" + (sysconfig.get_config_var("EXT_SUFFIX") or ".so")))
    if not built and os.path.exists(os.path.join(os.path.dirname(here), "setup.py")):
        # the source tree without a built extension shadows any installed copy
        return ImportError(
            "pyfastpim's C extension (pyfastpim._core) is not built for this Python in the source tree %s. Build "
            "it in place (`python setup.py build_ext --inplace` or `make build`), or install the package "
            "(`pip install .`) and run from outside the source tree: `python -m pytest` and `python -c` put the "
            "current directory first on sys.path, so a checkout shadows the installed package." % here)
    # the runtime libraries the extension links (OpenCL is opened at run time and is optional)
    debs = {"libopenblas": "libopenblas0", "libsleef": "libsleef3", "libgomp": "libgomp1"}
    for lib, deb in debs.items():
        if lib in str(exc):
            return ImportError("%s (pyfastpim needs %s at run time; Debian: apt install %s)" % (exc, lib, deb))
    return None


try:
    from . import _core
except ImportError as _exc:
    _clear = _core_import_error(_exc)
    if _clear is None:
        raise
    raise _clear from None
import numbers as _numbers

from ._core import Array
from . import memory
from ._torch_check import is_torch as _is_torch

__version__ = "0.1.0"


def asarray(obj, dtype=None, writable=False):
    """View ``obj`` as a C-contiguous :class:`pyfastpim.Array`, without copying when possible.

    ``obj`` may be a NumPy array, a CPU torch tensor (through DLPack), a
    pyfastpim.Array, or any object exposing the buffer protocol,
    ``__array_interface__`` or ``__dlpack__``. The result shares ``obj``'s memory
    when its dtype matches ``dtype`` (or ``dtype`` is None) and it is
    C-contiguous; otherwise exactly one copy is made and counted in
    :mod:`pyfastpim.memory` (as a dtype conversion or a host copy).

    ``dtype``: None, a name ('float32'), anything NumPy reads as a dtype ('f4', 'double',
    float, numpy.float32, a numpy.dtype; a byte-swapped one raises ValueError) or a torch dtype.
    ``writable=True`` requires a writable buffer that can be shared as is
    (ValueError otherwise: a copy would not write back). A torch tensor that
    requires grad is read through ``obj.detach()``; with ``writable=True`` it is
    refused (ValueError: writes would bypass autograd, as torch refuses in-place
    changes of such a leaf and out= tensors that require grad).
    Raises TypeError for unsupported dtypes, objects without a buffer or float data
    asked as an integer dtype, and ValueError for non-native byte order or integer
    data that the integer ``dtype`` cannot hold (conversions are exact, never wrapped).
    An ``__array_interface__`` whose ``version`` is not 3, or with a ``mask``, a nonzero
    ``offset`` or a ``descr`` other than ``[('', typestr)]``, is refused (ValueError naming the key).
    """
    writable = _core.check_flag(writable, "writable")  # bool or 0/1, as every flag (csrc/python/convert.c)
    if _is_torch(obj) and obj.requires_grad:
        if writable:
            raise ValueError("argument 'obj': the tensor requires grad, and writes through a writable view would "
                             "bypass autograd; pass writable=False, or obj.detach() (under torch.no_grad())")
        obj = obj.detach()
    return _core.asarray(obj, dtype, writable)


def set_num_threads(n):
    """Set the number of threads of the CPU kernels, for the whole process.

    The count is pyfastpim's own and process-wide: every Python thread that calls a kernel uses
    it (a product in a worker thread runs with the count set in the main thread), and
    ``omp_set_num_threads`` calls of other libraries (Debian's torch makes one on import) do not
    change it. The default is ``OMP_NUM_THREADS`` when it holds a positive integer, else the
    number of CPUs in the process's affinity mask (``os.sched_getaffinity``). ``n`` must be in
    1..1024. It is a ceiling: a kernel with little work (some tens of microseconds or less per
    thread) runs on fewer threads, down to the calling thread alone. Results do not depend on it
    (nor on ``OPENBLAS_NUM_THREADS``: the attention context's products are pyfastpim's own
    fixed-order GEMM).
    """
    _core.set_num_threads(n)


def get_num_threads():
    """The process-wide number of threads of the CPU kernels (see :func:`set_num_threads`)."""
    return _core.get_num_threads()


class threads:
    """Context manager running the kernels with ``n`` threads, restoring the previous count after.

    Like :func:`set_num_threads` it changes the process-wide count: while the block runs, kernels
    called from every Python thread use ``n`` threads. Blocks entered concurrently from several
    threads restore in the order they exit. One instance may be entered again while it is active
    (nested, or from another thread): each exit restores the count an entry found, last entered
    first, so the count after the outermost exit is the one before the first entry.
    """

    def __init__(self, n):
        self.n = n
        self._saved = []  # the counts found by the active entries, the last entered at the end

    def __enter__(self):
        old = get_num_threads()
        set_num_threads(self.n)  # a bad n raises before anything is saved
        self._saved.append(old)
        return self

    def __exit__(self, *exc):
        set_num_threads(self._saved.pop())
        return False


def cpu_isa():
    """(active, detected) SIMD level of the CPU kernels: 'generic', 'avx2' or 'avx512'."""
    return _core.cpu_isa()


def set_isa_limit(isa):
    """Cap the SIMD level the CPU kernels may use; returns the active one ('generic', 'avx2' or 'avx512').

    ``isa`` is 'generic', 'avx2', 'avxvnni', 'avx512' or 'avx512vnni' (the integer kernels' tiers:
    'avx512' keeps the VNNI kernels off, 'avx512vnni' lifts every cap)."""
    return _core.set_isa_limit(isa)


def noise_stream():
    """This process's noise stream (an int), or None.

    None in a process started normally (spawn and forkserver children included). A child made by
    fork gets one automatically: the parent's stream mixed with the parent's fork number, so
    sibling workers (torch DataLoader with the fork start method) get distinct streams, and a
    program forking in the same order gets the same ones. Engines inherited from the parent
    (through fork, or unpickled) key their per-call noise with ``mix(seed, stream)``; engines
    created in this process use their seed alone. See :func:`seed_worker`.
    """
    return _core.noise_stream()


def set_noise_stream(stream):
    """Set this process's noise stream (an int in [0, 2**64), or None for none); see :func:`noise_stream`."""
    _core.set_noise_stream(stream)


def seed_worker(worker_id=None):
    """``worker_init_fn`` for torch DataLoader workers: the noise stream from torch's worker seed.

    ``DataLoader(ds, num_workers=n, worker_init_fn=pyfastpim.seed_worker)``. Sets this process's
    noise stream to the worker's torch seed (``torch.initial_seed()`` in a worker is
    ``base_seed + worker_id``, base_seed drawn from the parent's torch generator): inherited
    engines then draw noise that is distinct per worker and reproducible under
    ``torch.manual_seed`` whatever else the program forks, for fork and spawn workers alike
    (spawn workers have no stream otherwise). ``worker_id`` (what DataLoader passes; unused, as the
    worker's seed already holds it) is an int or None, else TypeError naming it; checked first, then
    outside a worker it raises RuntimeError.
    """
    if worker_id is not None and (isinstance(worker_id, bool) or not isinstance(worker_id, _numbers.Integral)):
        raise TypeError("argument 'worker_id': expected an int or None, got %r" % (worker_id,))
    import torch.utils.data
    info = torch.utils.data.get_worker_info()
    if info is None:
        raise RuntimeError("seed_worker: not in a torch DataLoader worker (pass it as worker_init_fn)")
    _core.set_noise_stream(int(info.seed) & 0xFFFFFFFFFFFFFFFF)


__all__ = ["Array", "asarray", "memory", "set_num_threads", "get_num_threads", "threads",
           "cpu_isa", "set_isa_limit", "noise_stream", "set_noise_stream", "seed_worker"]

# The feature modules below are imported when present; each kernel family adds
# its public names here.
from ._registry import load_features as _load_features  # noqa: E402

_load_features(globals(), __all__)

# One public name per operation (issue 10). The crossbar product is ``dpe_matmul`` (raw
# arrays) and, on sliced operands, ``DPETensor.MapReduceDot`` / ``engine(x, w)`` (MemIntelli's
# names, kept for MemIntelli users); pyfastpim.nn layers reach the engine through
# ``DPETensor.forward_linear`` / ``forward_conv2d``; ``_core.dpe_mvm`` is internal. The OpenCL
# device-level functions belong to :mod:`pyfastpim.devices`: their package-level names are
# deprecated aliases (a DeprecationWarning on use), and the attention ones are gone from the
# package namespace (``AttentionContext(device=...)`` is the public way).
_DEPRECATED = {"cl_dpe_mvm": "pyfastpim.devices.cl_dpe_mvm (or dpe_matmul with DPETensor(device=...))",
               "cl_dpe_conv2d": "pyfastpim.devices.cl_dpe_conv2d (or Conv2dMem with DPETensor(device=...))"}
for _name in tuple(_DEPRECATED) + ("cl_attention_update", "cl_attention_apply"):
    if _name in __all__:
        __all__.remove(_name)
    globals().pop(_name, None)
del _name


def __getattr__(name):
    # pyfastpim.nn needs torch: import it on first use instead of with the package
    if name == "nn":
        import importlib
        return importlib.import_module(".nn", __name__)
    if name in _DEPRECATED:
        import importlib
        import warnings
        devices = importlib.import_module(".devices", __name__)
        warnings.warn("pyfastpim.%s is deprecated: use %s" % (name, _DEPRECATED[name]), DeprecationWarning,
                      stacklevel=2)
        return getattr(devices, name)
    raise AttributeError("module 'pyfastpim' has no attribute %r" % (name,))
