"""Structured fuzzing of every public entry point (issue 13), beyond tests/api/test_robustness.py.

Each case is generated from (seed, index) alone, so any case can be replayed:
    python3 tests/fuzz.py --cases 100000            # `make fuzz`
    python3 tests/fuzz.py --start 4711 --cases 1 -v # replay one case
Arguments are drawn from shapes (0-size, 1, odd, large-but-cheap, overflowing), strides (views with
steps, transposes, expanded zero-stride broadcasts), dtypes (all NumPy kinds, byte-swapped),
misaligned buffers (float32 at byte offset 1..3), objects lying about ``__array_interface__``
(wrong typestr, shape/strides/data mismatches, raising properties), DLPack producers that hand
out the same (consumed) capsule twice or non-capsules, and hostile scalars (NaN, inf, bools,
2**63, negative, strings).

Outcome per case: a result, or an exception. Crashes kill the process (the run prints the case
index every 1000 cases and faulthandler dumps the stack). An exception counts as *clear* when it
is one of CLEAR and its message names an argument (or one of MemIntelli's fixed messages);
other exceptions are reported with samples. The summary is a dict of counts.
"""
import argparse
import collections
import faulthandler
import os
import sys
import traceback
import warnings

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
if os.path.dirname(HERE) not in sys.path:
    sys.path.insert(0, os.path.dirname(HERE))

import pyfastpim  # noqa: E402
from pyfastpim import _core  # noqa: E402

SANITIZED = os.environ.get("PYFASTPIM_SANITIZED") == "1"
CLEAR = (ValueError, TypeError, NotImplementedError, OverflowError, MemoryError, BufferError)
# messages kept from MemIntelli (its tests match them): clear, but they name no argument
MEMINTELLI = ("mismatches the shape", "should be larger than", "out of the range", "must match number of",
              "should not exceed", "read_variation dict", "The wire_factor", "smaller than the high",
              "must both be INT", "paral_size mismatch", "not sliced yet", "must have keys",
              "read_variation must be")

HUGE = [2 ** 31, 2 ** 32 + 1, 2 ** 40, 2 ** 62, 2 ** 63 - 1, 2 ** 63, 2 ** 64, -2 ** 63]


# ---------------------------------------------------------------- value generators

def g_int(r, lo=-2, hi=70):
    k = r.integers(10)
    if k < 6:
        return int(r.integers(lo, hi))
    if k < 8:
        return int(r.choice(HUGE))
    return [True, 1.5, "3", None, np.int64(4), float("nan")][r.integers(6)]


def g_pair(r):
    k = r.integers(8)
    if k < 4:
        return (int(r.integers(1, 40)), int(r.integers(1, 40)))
    if k == 4:
        return (g_int(r), g_int(r))
    if k == 5:
        return g_int(r)
    return [None, "per-row", "per-col", "per-matrix", "x", (1,), (1, 2, 3), (np.int32(4), 8)][r.integers(8)]


def g_slices(r):
    k = r.integers(6)
    if k < 3:
        w = [1] + [int(r.integers(1, 5)) for _ in range(r.integers(1, 4))]
        return tuple(w)
    return [(), (2, 2), (1, 9), (1,) * 20, "1122", None, (1, -1), (1, 2 ** 40), [1, 1.5]][r.integers(9)]


DTYPES = [np.float32, np.float64, np.float16, np.int8, np.uint8, np.int16, np.int32, np.int64, np.uint64,
          np.bool_, np.complex64, ">f4", ">f8", "<f4", np.longdouble]


def g_shape(r, ndim=None):
    ndim = int(r.integers(0, 5)) if ndim is None else ndim
    shape = []
    for _ in range(ndim):
        k = r.integers(10)
        shape.append(0 if k == 0 else 1 if k == 1 else int(r.integers(2, 12)))
    return tuple(shape)


def g_array(r, ndim=None, dtype=None, allow_weird=True):
    """An array, often float32, with random layout."""
    shape = g_shape(r, ndim)
    dt = np.dtype(dtype if dtype is not None else (np.float32 if r.integers(3) else DTYPES[r.integers(len(DTYPES))]))
    base = r.standard_normal(shape) * float(r.choice([1e-3, 1, 1e3]))
    if r.integers(10) == 0 and base.size:
        base.flat[int(r.integers(base.size))] = [np.nan, np.inf, -np.inf][r.integers(3)]
    try:
        a = base.astype(dt)
    except (TypeError, ValueError):
        a = base.astype(np.float32)
    if not allow_weird:
        return a
    k = r.integers(12)
    if k == 0 and a.ndim >= 1:  # non-contiguous: a step
        big = np.repeat(a, 2, axis=-1)
        a = big[..., ::2]
    elif k == 1 and a.ndim >= 2:  # transposed
        a = np.ascontiguousarray(np.swapaxes(a, -1, -2)).swapaxes(-1, -2)
    elif k == 2 and a.ndim >= 1 and a.shape[0] == 1:  # expanded: zero stride
        a = np.broadcast_to(a, (int(r.integers(2, 5)),) + a.shape[1:])
    elif k == 3 and a.dtype.itemsize > 1 and a.size:  # misaligned: a view at byte offset 1..3
        off = int(r.integers(1, min(4, a.dtype.itemsize)))
        buf = np.zeros(a.nbytes + off, np.uint8)
        m = buf[off:off + a.nbytes].view(a.dtype).reshape(a.shape)
        m[...] = a
        a = m
    elif k == 4:
        a = a.copy()
        a.setflags(write=False)
    elif k == 5 and a.ndim >= 1 and a.shape[-1] > 1:  # negative strides
        a = a[..., ::-1]
    return a


class Liar:
    """Claims an array interface that does not hold."""

    def __init__(self, r):
        good = np.arange(12, dtype=np.float32).reshape(3, 4)
        self._keep = good
        iface = dict(good.__array_interface__)
        k = r.integers(9)
        if k == 0:
            iface["typestr"] = ["<x4", "", "<f3", "|V0", 7][r.integers(5)]
        # Shape (3, 4, 5) reaches past the 48-byte buffer and strides (-4, 4) before it. No consumer can
        # check a raw pointer's extent (NumPy reads there too), so under ASan, which would report the
        # read, lies that stay inside the buffer take their places.
        elif k == 1:
            iface["shape"] = [(-1, 4), (3,), (2 ** 40, 2 ** 40), ("a", 4), (2, 2, 3) if SANITIZED else (3, 4, 5)][
                r.integers(5)]
        elif k == 2:
            iface["strides"] = [(4,), (4, 4) if SANITIZED else (-4, 4), (2 ** 62, 4), (1, 1), ("x", 4)][r.integers(5)]
        elif k == 3:
            iface["data"] = [None, (0, False), "text", (None, True), b"1234"][r.integers(5)]
        elif k == 4:
            iface["version"] = [99, -1, "3"][r.integers(3)]
        elif k == 5:
            del iface["typestr"]
        elif k == 6:
            iface = None
        elif k == 7:
            iface = {"shape": (3, 4)}
        else:
            iface = "not a dict"
        self._iface = iface
        self._raise = r.integers(6) == 0

    @property
    def __array_interface__(self):
        if self._raise:
            raise RuntimeError("lying property")
        return self._iface


class ReusedCapsule:
    """A DLPack producer handing out the same capsule every time (consumed after the first use)."""

    def __init__(self, r):
        import torch
        self._t = torch.arange(12, dtype=torch.float32).reshape(3, 4)
        self._cap = self._t.__dlpack__()
        self._kind = int(r.integers(3))

    def __dlpack__(self, stream=None, **kw):
        if self._kind == 0:
            return self._cap
        if self._kind == 1:
            return "not a capsule"
        raise RuntimeError("producer failed")

    def __dlpack_device__(self):
        return (1, 0)


def g_object(r):
    """Anything: arrays, liars, DLPack producers, scalars, torch tensors."""
    k = r.integers(14)
    if k < 7:
        return g_array(r)
    if k == 7:
        return Liar(r)
    if k == 8:
        try:
            return ReusedCapsule(r)
        except ImportError:
            return None
    if k == 9:
        import torch
        a = g_array(r, allow_weird=False)
        t = torch.from_numpy(np.ascontiguousarray(a.astype(a.dtype.newbyteorder("="))))
        return t.t() if t.dim() == 2 and r.integers(2) else t
    if k == 10:
        return memoryview(g_array(r, allow_weird=False).tobytes())
    return [None, 3.0, "text", [1.0, 2.0], [[1.0], [2.0, 3.0]], float("nan"), object()][r.integers(7)]


def g_real(r):
    k = r.integers(8)
    if k < 5:
        return float(r.choice([0.0, 1e-7, 1e-5, 0.02, 0.5, 1.0, 2.0]))
    return [float("nan"), float("inf"), -1.0, 1e300, True, "x", None][r.integers(7)]


# ---------------------------------------------------------------- entry points

def quiet_engine(**kw):
    return pyfastpim.DPETensor(read_variation=0.0, vnoise=0.0, write_variation=0.0, rate_stuck_HGS=0.0, **kw)


def e_asarray(r):
    dt = [None, "float32", "float64", "uint8", "int32", "bfloat16", "x", np.float32, 3][r.integers(9)]
    return pyfastpim.asarray(g_object(r), dtype=dt, writable=bool(r.integers(4) == 0))


def e_slice_quantize(r):
    data = g_object(r) if r.integers(3) == 0 else g_array(r, ndim=int(r.integers(1, 4)))
    return pyfastpim.slice_quantize(data, g_slices(r), g_pair(r), g_pair(r) if r.integers(2) else None,
                                    bw_e=[None, 0, 4, 8, -1, 2 ** 40][r.integers(6)], dequant=bool(r.integers(2)),
                                    g_level=[None, 2, 16, 256, 1, 2 ** 31][r.integers(6)])


def e_program_weights(r):
    codes = g_array(r, ndim=int(r.integers(2, 4)), dtype=[np.uint8, np.float32, np.int64][r.integers(3)])
    return pyfastpim.program_weights(codes, g_slices(r), [2, 4, 16, 256, 1, 300][r.integers(6)], HGS=g_real(r),
                                     LGS=g_real(r), write_variation=g_real(r), rate_stuck_HGS=g_real(r),
                                     seed=[None, 0, -1, 2 ** 64, 5][r.integers(5)])


def e_engine(r):
    kw = {}
    for name in ("HGS", "LGS", "write_variation", "read_variation", "vnoise", "vread", "rate_stuck_HGS"):
        if r.integers(4) == 0:
            kw[name] = g_real(r)
    for name in ("g_level", "rdac", "radc"):
        if r.integers(4) == 0:
            kw[name] = g_int(r, 0, 300)
    if r.integers(6) == 0:
        kw["radc"] = [int(r.integers(1, 300)) for _ in range(r.integers(0, 4))]
    if r.integers(8) == 0:
        kw["seed"] = g_int(r)
    return pyfastpim.DPETensor(**kw)


def e_dpe_matmul(r):
    consistent = r.integers(2)
    if consistent:
        K = int(r.integers(1, 50))
        n = int(r.choice([1, 8, 32]))
        x = g_array(r, dtype=np.float32)
        x = np.resize(x, (int(r.integers(0, 3)) or 1, int(r.integers(1, 6)), K)) if x.size else x
        w = g_array(r, ndim=2)
        w = np.resize(w, (K, int(r.integers(1, 9)))) if w.size else w
        return pyfastpim.dpe_matmul(x, w, quiet_engine(), (1, 1, 2), (1, 1, 2), (1, n), (n, 8), g_pair(r), (n, 8))
    return pyfastpim.dpe_matmul(g_object(r), g_object(r), quiet_engine(), g_slices(r), g_slices(r), g_pair(r),
                                g_pair(r), g_pair(r), g_pair(r), bw_e=[None, 0, 3][r.integers(3)])


def _weights(eng, r, K, P):
    ws = pyfastpim.SlicedData((1, 1, 2), is_weight=True, paral_size=(32, 8), quant_gran=(32, 8))
    ws.slice_data_imp(eng, np.random.default_rng(int(r.integers(1 << 30))).standard_normal((K, P)).astype(np.float32))
    return ws


def e_conv2d(r):
    eng = quiet_engine(device=_cl_device(r))
    C = int(r.integers(1, 4))
    kh = int(r.integers(1, 4))
    ws = _weights(eng, r, C * kh * kh, int(r.integers(1, 5)))
    img = g_array(r, ndim=4) if r.integers(3) == 0 else np.resize(g_array(r, allow_weird=False),
                                                                 (int(r.integers(0, 3)), C, int(r.integers(1, 9)),
                                                                  int(r.integers(1, 9)))).astype(np.float32)
    return eng.forward_conv2d(img, ws, kh if r.integers(4) else g_pair(r),
                              stride=int(r.integers(1, 4)) if r.integers(4) else g_pair(r),
                              padding=int(r.integers(0, 3)) if r.integers(4) else g_pair(r),
                              dilation=int(r.integers(1, 3)) if r.integers(4) else g_pair(r),
                              input_slice=(1, 1, 2) if r.integers(3) else g_slices(r),
                              return_dequant=bool(r.integers(2)))


def e_linear(r):
    eng = quiet_engine(device=_cl_device(r))
    K = int(r.integers(1, 40))
    ws = _weights(eng, r, K, int(r.integers(1, 9)))
    x = g_array(r) if r.integers(3) == 0 else np.resize(g_array(r, allow_weird=False), (int(r.integers(0, 4)), K))
    return eng.forward_linear(x, ws, (1, 1, 2) if r.integers(3) else g_slices(r),
                              (1, 32) if r.integers(3) else g_pair(r), g_pair(r), return_dequant=bool(r.integers(2)))


def _raw_mvm_args(r):
    """Arguments of _core.dpe_mvm, consistent then perturbed in one place."""
    sx, N, R, K, P = 2, int(r.integers(0, 3)), int(r.integers(0, 5)), int(r.integers(1, 40)), int(r.integers(1, 9))
    n = 8
    args = dict(x_codes=np.zeros((sx, N, R, K), np.uint8), x_scale=np.ones((N, R, -(-K // n)), np.float32),
                x_granule=(1, n), x_widths=(1, 1), w_levels=np.zeros((2, K, P), np.uint8), w_conductance=None,
                w_scale=np.ones((-(-K // n), -(-P // 8)), np.float32), w_granule=(n, 8), w_widths=(1, 1), n=n,
                rdac=16, g_level=16, radc=(256, 256), HGS=1e-5, LGS=1e-7, read_sigma=None, vnoise=0.0, seed=1,
                call=0)
    name = list(args)[int(r.integers(len(args)))]
    k = r.integers(4)
    if k == 0:
        args[name] = g_object(r)
    elif k == 1:
        args[name] = g_int(r)
    elif k == 2:
        args[name] = g_pair(r)
    else:
        v = args[name]
        if isinstance(v, np.ndarray):
            args[name] = g_array(r, ndim=v.ndim, dtype=v.dtype)
    return args


def e_raw_mvm(r):
    args = _raw_mvm_args(r)
    if r.integers(4) == 0:
        args["out"] = g_object(r)
    dev = _cl_device(r)
    if dev is not None:
        return pyfastpim.cl_dpe_mvm(dev, **args)
    return _core.dpe_mvm(**args)


def e_normals(r):
    return _core.normals(g_int(r, 0, 5), g_int(r, 0, 5), g_int(r, 0, 5), g_int(r, 0, 100),
                         [0, 1, 7, -1, 2 ** 40, 2 ** 62][r.integers(6)])


def e_attention(r):
    c = pyfastpim.AttentionContext(update_rate=g_real(r) if r.integers(4) == 0 else 0.1,
                                   strength=g_real(r) if r.integers(4) == 0 else 0.5,
                                   embed_dim=[None, 4, 0, -1, 2 ** 40][r.integers(5)] if r.integers(3) == 0 else None,
                                   device=_cl_device(r, as_string=True))
    d = int(r.integers(1, 10))
    if r.integers(3):
        c.incoming = g_array(r, ndim=2) if r.integers(4) == 0 else np.resize(g_array(r, allow_weird=False),
                                                                              (d, d)).astype(np.float32)
    ops = int(r.integers(1, 4))
    res = None
    for _ in range(ops):
        k = r.integers(6)
        x = g_object(r) if r.integers(4) == 0 else np.resize(g_array(r, allow_weird=False), (int(r.integers(0, 5)), d))
        if k == 0:
            res = c.apply(x, out=g_object(r) if r.integers(4) == 0 else None)
        elif k == 1:
            res = c.update_outgoing(x, x if r.integers(2) else g_object(r))
        elif k == 2:
            res = c.update_outgoing_step(x[0] if getattr(x, "ndim", 0) > 1 and len(x) else x, g_object(r))
        elif k == 3:
            res = c.apply_step(g_object(r))
        elif k == 4:
            res = _core.AttentionContext.gradients(c, x, g_object(r))
        else:
            c.outgoing = g_object(r)
    return res


def e_layers(r):
    import torch
    from pyfastpim.nn import Conv2dMem, LinearMem
    eng = quiet_engine()
    if r.integers(2):
        lay = LinearMem(eng, g_int(r, 0, 20) if r.integers(4) == 0 else 8, 4, g_slices(r) if r.integers(4) == 0 else
                        (1, 1, 2), (1, 1, 2), weight_paral_size=(32, 8), weight_quant_gran=(32, 8))
        shape = g_shape(r) if r.integers(3) == 0 else (int(r.integers(0, 3)), 8)
    else:
        lay = Conv2dMem(eng, 2, 3, g_int(r, 0, 4) if r.integers(4) == 0 else 3, (1, 1, 2), (1, 1, 2),
                        padding=g_int(r, 0, 3) if r.integers(4) == 0 else 1, weight_paral_size=(32, 8),
                        weight_quant_gran=(32, 8))
        shape = g_shape(r) if r.integers(3) == 0 else (int(r.integers(0, 3)), 2, int(r.integers(1, 7)), 5)
    x = torch.from_numpy(np.random.default_rng(int(r.integers(1 << 30))).standard_normal(shape).astype(np.float32))
    x.requires_grad_(bool(r.integers(2)))
    y = lay(x)
    if x.requires_grad:
        y.sum().backward()
    return y


_CL = {}


def _cl_device(r, as_string=False):
    """An OpenCL device in a quarter of the cases when one exists (never in a forked child)."""
    if "n" not in _CL:
        _CL["n"] = _core.cl_devices()[0] if os.environ.get("PYFASTPIM_FUZZ_OPENCL", "1") == "1" else 0
    if not _CL["n"] or r.integers(4):
        return None
    return "opencl" if as_string else pyfastpim.resolve_device("opencl")


ENTRIES = [e_asarray, e_slice_quantize, e_program_weights, e_engine, e_dpe_matmul, e_conv2d, e_linear, e_raw_mvm,
           e_normals, e_attention, e_layers]


def names_argument(msg):
    return ("argument" in msg or "'" in msg or any(m in msg for m in MEMINTELLI)
            or any(w in msg for w in ("x_", "w_", "shape", "dtype", "dimension", "device", "input", "engine",
                                      "kernel", "stride", "padding", "dilation", "slice", "seed", "count",
                                      "in_features", "out_features", "channels")))


def run(cases, seed=0, start=0, verbose=False, progress=False):
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")  # casts of NaN/complex while generating, the library's own warnings
        return _run(cases, seed, start, verbose, progress)


def _run(cases, seed, start, verbose, progress):
    counts = collections.Counter()
    samples = {}
    for i in range(start, start + cases):
        r = np.random.default_rng([seed, i])
        fn = ENTRIES[int(r.integers(len(ENTRIES)))]
        if progress and i % 1000 == 0:
            print("case %d" % i, file=sys.stderr, flush=True)
        try:
            fn(r)
            counts[fn.__name__ + ": result"] += 1
            counts["result"] += 1
        except CLEAR as exc:
            msg = str(exc)
            counts["clear exception"] += 1
            if not names_argument(msg):
                counts["unnamed"] += 1
                samples.setdefault((fn.__name__, type(exc).__name__, msg[:120]), i)
        except Exception as exc:  # noqa: BLE001 - counted: not a clear rejection
            counts["other exception"] += 1
            samples.setdefault((fn.__name__, type(exc).__name__, str(exc)[:120]), i)
            if verbose:
                traceback.print_exc()
    counts["cases"] = cases
    return counts, samples


def _lying_exception(key):
    """Exceptions that are the objects' own (a raising property/producer): not the library's fault."""
    return key[2] in ("lying property", "producer failed")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", type=int, default=100000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args(argv)
    faulthandler.enable()
    if not SANITIZED:
        import resource  # huge sizes must fail as MemoryError, not by exhausting the machine
        resource.setrlimit(resource.RLIMIT_AS, (8 << 30, resource.RLIM_INFINITY))
    counts, samples = run(a.cases, a.seed, a.start, a.verbose, progress=True)
    for k in sorted(counts):
        print("%-28s %d" % (k, counts[k]))
    bad = {k: v for k, v in samples.items() if not _lying_exception(k)}
    for (fn, et, msg), i in sorted(bad.items(), key=lambda kv: kv[1])[:40]:
        print("case %d %s: %s: %s" % (i, fn, et, msg))
    print("crashes 0 (the run completed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
