"""Bit-sliced quantization (docs/semantics.md sections 1-6) and MemIntelli's ``SlicedData``.

The work is done by the C core (``_core.slice_quantize``, one pass over the
data, nothing allocated beyond the outputs). This module parses MemIntelli's
arguments, keeps the compact results the engine reads, and produces
MemIntelli's padded block layouts only when they are asked for.

Compact layout (see csrc/core/slicing.h), all NumPy arrays sharing the core's
buffers:

- ``codes``: uint8 ``(S, N, R, C)``, slice ``s = 0`` least significant, unpadded;
  ``q = sum_s w[s] * codes[s]`` with ``w`` from :func:`slice_params`.
- ``gran_max`` / ``gran_scale``: float32 ``(N, gr, gc)``, one value per granule
  ``(qr', qc')`` (quant_gran rounded up to multiples of paral_size).
- ``gran_exp``: int32 ``(N, gr, gc)`` (BFP only).
- ``levels``: uint8 ``(S, C, P)`` programmed conductance levels of weights;
  ``conductance``: float32 ``(S, C, P)`` in siemens, only with device noise.
"""
import collections.abc
import itertools
import math
import operator
import os
import sys
import threading
import types
from collections import namedtuple

import numpy as np

from . import _core
from ._torch_check import is_torch as _is_torch

__all__ = ["SlicedData", "slice_quantize", "program_weights", "slice_params", "DEFAULT_SEED"]

DEFAULT_SEED = _core.DEFAULT_SEED

_GRANULARITIES = ("per-matrix", "per-row", "per-col")
_versions = itertools.count(1)  # process-wide, so (object, _version) never repeats
# Guards the sliced/programmed state of every SlicedData across threads: slicing or re-programming
# commits all of an object's arrays at once, and a product (pyfastpim.dpe) reads them at once, so a
# product running beside a re-programming sees the old or the new weights, never a mix. Arrays are
# replaced, never written in place, so a kernel already running keeps the (referenced) ones it was
# given. Held only while attributes are read or assigned, and while weights are re-programmed.
_state_lock = threading.RLock()
# A forked child has only the forking thread: a lock another thread held at fork time would never
# be released there. Re-made free in the child, as logging does with its handlers' locks.
os.register_at_fork(after_in_child=_state_lock._at_fork_reinit)
_torch_module = None


def _torch():
    """torch if importable (imported on first use), else None."""
    global _torch_module
    if _torch_module is None:
        try:
            import torch
            _torch_module = torch
        except ImportError:
            _torch_module = False
    return _torch_module or None


def _operand(data, name):
    """A NumPy array or torch tensor as it is; any other operand (an ``__array_interface__``, buffer or
    DLPack exporter, a pyfastpim.Array, a memoryview) as a float32 NumPy view of it (the kernels read
    float32), so its shape is known and it slices: no copy when it is float32 and C-contiguous, else the
    one counted copy asarray makes. Errors (no buffer, unsupported dtype) name the argument ``name``."""
    if isinstance(data, np.ndarray) or _is_torch(data):
        return data
    return np.asarray(_core._view(data, name))


def _out(a):
    """MemIntelli-layout results are torch tensors when torch is importable."""
    torch = _torch()
    return torch.from_numpy(np.ascontiguousarray(a)) if torch is not None else a


#: Nesting NumPy reads at most (numpy's MAXDIMS: 32, 64 in NumPy 2): a deeper list is NumPy's to refuse.
_MAX_DEPTH = 64
#: What no list may hold as data, refused by the core's rule and words (csrc/python/bind_array.c view_any):
#: a masked array (its masked elements would be read as data) and bytes / bytearray (text, not numbers).
_REFUSED = (np.ma.MaskedArray, bytes, bytearray)


def _has_buffer(v):
    try:
        memoryview(v).release()
    except TypeError:
        return False
    return True


def _user_sequence(v):
    """Whether NumPy reads ``v`` as a nested sequence, iterating it: a sequence that is no list or tuple (read
    by _plain_nested itself), array, tensor, str, mapping or buffer exporter."""
    return (hasattr(v, "__len__") and hasattr(v, "__getitem__")
            and not isinstance(v, (list, tuple, str, np.ndarray, collections.abc.Mapping)) and not _is_torch(v)
            and not any(hasattr(v, a) for a in ("__array__", "__array_interface__", "__array_struct__"))
            and not _has_buffer(v))


def _sequence_items(value, name):
    """A user sequence's items, as many as its __len__ says (read once, by iteration, one past it at most: a
    __getitem__ that never raises IndexError ends here, where np.asarray would read on forever); items that
    run out before its length or go on past it are a ValueError naming ``name``."""
    n = _length(value, name, "a rectangular array of numbers")
    items = list(itertools.islice(value, n + 1))
    if len(items) != n:
        raise ValueError("argument '%s': expected a rectangular array of numbers, got %s whose __len__ says %d "
                         "items but it has %s %d" % (name, type(value).__name__, n,
                                                     "only" if len(items) < n else "more than", min(len(items), n)))
    return items


def _plain_nested(value, name, depth, done):
    """A list or tuple (or a user sequence: _sequence_items) ``value`` as NumPy may read it: items that are
    user sequences replaced by lists of their items, a masked array or bytes / bytearray refused (the core's
    words, naming ``name``); ``value`` itself where nothing is replaced. ``done`` maps the id of every sequence
    seen to its result: a list held twice is read once, one holding itself ends (NumPy refuses it)."""
    if id(value) in done:
        return done[id(value)]
    items = value if isinstance(value, (list, tuple)) else _sequence_items(value, name)
    out = done[id(value)] = items
    for i, v in enumerate(items if depth < _MAX_DEPTH else ()):
        if type(v) is float or type(v) is int or type(v) is np.ndarray or isinstance(v, np.generic):
            continue  # NumPy reads these as they are (a masked array is no exact ndarray)
        if isinstance(v, _REFUSED):
            _core._view(v, name)  # raises the core's refusal, naming ``name``
        if isinstance(v, (list, tuple)) or _user_sequence(v):
            w = _plain_nested(v, name, depth + 1, done)
            if w is not v:
                out = list(items) if out is value else out
                out[i] = w
    done[id(value)] = out
    return out


def _nested(value, name):
    """np.asarray(value) of a user's nested sequences, arrays or tensors; a ragged one is a ValueError naming
    ``name`` (NumPy refuses it with its own message, which names nothing), as is a masked array (its masked
    elements would be read as data: the core's rule, csrc/python/bind_array.c) anywhere in it, a list of them
    too. bytes and bytearray (text, not numbers) are the core's TypeError naming ``name`` anywhere in it. A
    user sequence is read for as many items as its __len__ says (_sequence_items). A tensor is read detached,
    on the CPU, a bfloat16 one as float32 (NumPy has none; torch's refusals name nothing)."""
    if _is_torch(value):
        value = value.detach().cpu()
        value = value.float() if str(value.dtype) == "torch.bfloat16" else value
    if isinstance(value, _REFUSED):
        _core._view(value, name)  # raises the core's refusal, naming ``name``
    if isinstance(value, (list, tuple)) or _user_sequence(value):
        value = _plain_nested(value, name, 0, {})
    try:
        return np.asarray(value)
    except ValueError as exc:
        raise ValueError("argument '%s': expected a rectangular array of numbers (%s)" % (name, exc)) from None


def _numeric(value, name):
    """An assigned attribute as a NumPy array of numbers (bool, int or float), else TypeError naming it
    (ValueError naming it for ragged nested sequences)."""
    a = _nested(value, name)
    if a.dtype.kind not in "biuf":
        raise TypeError("argument '%s': expected numbers, got an array of dtype %s" % (name, a.dtype))
    return a


def _finite32(a, name):
    """a cast to float32, whose values must be finite after the cast (float64 values can overflow it)."""
    with np.errstate(over="ignore", invalid="ignore"):
        a = a.astype(np.float32)
        ok = np.isfinite(a).all()
    if not ok:
        raise ValueError("argument '%s': values must be finite in float32 (|x| <= 3.4e38)" % name)
    return a


def _width(v, name):
    """One slice width: an int by the library's rule for ints (_rule_number: an object with __index__ is its
    int, a bool is none), or a float holding an integer (MemIntelli's slice methods may be float tensors)."""
    if isinstance(v, (float, np.floating)):
        if not math.isfinite(v) or v != int(v):
            raise TypeError("argument '%s': widths must be integers, got %r" % (name, v))
        return int(v)
    return int(_rule_number(v, name, "argument '%s': widths must be integers, got %r" % (name, v)))


def _widths(slice_method, name="slice_method"):
    """The slice method as a tuple of Python ints (list, tuple, NumPy array or torch tensor); errors name
    ``name`` (the caller's argument: input_slice, weight_slice, ...)."""
    sm = slice_method
    if isinstance(sm, np.ndarray) or _is_torch(sm):
        sm = sm.tolist()
    # a str, a dict (its keys) or a set (no order) is no sequence of widths, as the core's converter has it
    if isinstance(sm, (str, bytes, collections.abc.Mapping, collections.abc.Set)) or not hasattr(sm, "__iter__"):
        raise TypeError("argument '%s': expected a sequence of bit widths, got %r" % (name, slice_method))
    out = []
    for v in itertools.islice(sm, _core.SLICE_MAX_TOTAL_BITS + 1):  # more widths are too many bits: no endless read
        out.append(_width(v, name))
    if not out:
        raise ValueError("argument '%s': expected at least one slice width" % name)
    if out[0] != 1:
        raise ValueError("argument '%s': the first (sign) slice must be 1 bit wide, got %d" % (name, out[0]))
    if min(out) < 1:
        raise ValueError("argument '%s': every width must be positive, got %r" % (name, tuple(out)))
    if len(out) > _core.SLICE_MAX_TOTAL_BITS:  # read no further (a range(2**100) would never end)
        raise ValueError("argument '%s': total bits must be 2 to %d, got more than %d slice widths"
                         % (name, _core.SLICE_MAX_TOTAL_BITS, _core.SLICE_MAX_TOTAL_BITS))
    if sum(out) > _core.SLICE_MAX_TOTAL_BITS or sum(out) < 2:
        raise ValueError("argument '%s': total bits must be 2 to %d, got %d"
                         % (name, _core.SLICE_MAX_TOTAL_BITS, sum(out)))
    if max(out) > _core.SLICE_MAX_WIDTH:
        raise ValueError("argument '%s': each slice needs 1 to %d bits (uint8 codes), got %r"
                         % (name, _core.SLICE_MAX_WIDTH, tuple(out)))
    return tuple(out)


def _rule_number(v, name, refusal, integer=True):
    """``v`` by the library's type rule for scalars (_core.check_number: with ``integer`` an int by
    operator.index, else a real number; not a bool or a str), in the caller's words where the rule refuses
    it: TypeError(``refusal``), or TypeError(refusal(the refused type's name)) where ``refusal`` is
    callable. An exception raised by the value's own __index__ / __float__ (a TypeError too: check_number
    lets it through as it is, so only the rule's own words are replaced) propagates unchanged."""
    rule = "argument '%s': expected %s, got " % (name, "an int" if integer else "a real number")
    try:
        return _core.check_number(v, name, integer)
    except TypeError as exc:
        if not str(exc).startswith(rule):
            raise
        raise TypeError(refusal(str(exc)[len(rule):]) if callable(refusal) else refusal) from None


def _pair_items(value, argname):
    """A pair argument's items: a NumPy array's or a tensor's as a list (MemIntelli's zoo passes sizes as
    tensors; a 0-d one is its int, more than one dimension a TypeError naming ``argname``), anything else as
    it is (the caller checks it is a sequence)."""
    if not (isinstance(value, np.ndarray) or _is_torch(value)):
        return value
    if value.ndim > 1:
        raise TypeError("argument '%s': expected a pair of ints, got a %d-D array" % (argname, value.ndim))
    return value.tolist()


def _is_pair_sequence(value):
    # the core converter's rule (PySequence_Check; not a str or bytes-like data): a list, a tuple, a range,
    # a user sequence; _pair_snapshot reads it
    return (not isinstance(value, (str, bytes, bytearray, memoryview, collections.abc.Mapping))
            and hasattr(value, "__len__") and hasattr(value, "__getitem__"))


def _length(value, name, what):
    """len(value), a range's too where len() cannot count it (range(2**100): OverflowError, naming nothing).
    A __len__ returning no length (negative, beyond sys.maxsize: len() raises ValueError / OverflowError
    naming nothing) is a ValueError naming ``name`` (the core converter's words, as_sequence in
    csrc/python/convert.c); what the value's own __len__ raises propagates unchanged."""
    if isinstance(value, range):
        steps, rest = divmod(value.stop - value.start, value.step)
        return max(0, steps + (rest != 0))
    # the class's own attribute, unbound, as len() finds it (the core's own_length, csrc/python/convert.c): a
    # plain function is called here, anything else (a staticmethod, a built-in type's slot) through len()
    own = next((c.__dict__["__len__"] for c in type(value).__mro__ if "__len__" in c.__dict__), None)
    if isinstance(value, (list, tuple)) or not isinstance(own, types.FunctionType):
        return len(value)
    n = own(value)  # called here, so that len()'s refusal of its result is not taken for its own exception
    if not hasattr(type(n), "__index__") or not 0 <= operator.index(n) <= sys.maxsize:
        raise ValueError("argument '%s': expected %s, got %s whose __len__ returns no length (an int in "
                         "0..sys.maxsize)" % (name, what, type(value).__name__))
    return operator.index(n)


def _pair_snapshot(value, wrong_length, name):
    """A pair sequence's two items, read once (a user sequence's items then cannot disagree with the
    length checked); ValueError(``wrong_length`` % count) for another length than 2, from its len()
    (no long sequence is copied) or, where its items disagree with that, from the items read."""
    n = _length(value, name, "a pair of ints")
    items = tuple(itertools.islice(value, 3)) if n == 2 else ()
    if n != 2 or len(items) != 2:
        raise ValueError(wrong_length % (n if n != 2 else len(items)))
    return items


def _pair(value, argname):
    """A block or granule size (SlicedData's paral_size, quant_gran): a pair of positive ints, TypeError
    naming ``argname`` for another type (an int too), ValueError for a sequence of another length than 2
    (the rule of every pair: pyfastpim.dpe._pair's, the core's converter's) or a value out of range."""
    value = _pair_items(value, argname)
    if not _is_pair_sequence(value):
        raise TypeError("argument '%s': expected a pair of positive ints, got %r" % (argname, value))
    value = _pair_snapshot(value, "argument '%s': expected a pair of ints, got %%d values" % argname, argname)
    out = []
    for v in value:
        v = _rule_number(v, argname, "argument '%s': expected ints, got %r" % (argname, value))
        if v < 1:
            raise ValueError("argument '%s': values must be positive, got %r" % (argname, tuple(value)))
        out.append(int(v))
    return tuple(out)


#: Largest block / granule size: sizes are int64 in the C core.
_SIZE_MAX = 2 ** 63 - 1
#: Largest crossbar height (input paral_size[1] == weight paral_size[0]).
_CROSSBAR_ROWS_MAX = 2 ** 31 - 1


def _bw_e(bw_e):
    """bw_e checked as every entry point reads it (the C converter, _core.check_bw_e): None or an int,
    TypeError for other types (bool, float, str), ValueError when negative. BFP is selected by a positive
    value (docs/semantics.md section 4: 0, like None, is INT, as MemIntelli's ``if bw_e:``); test it with
    bool(bw_e)."""
    _core.check_bw_e(bw_e)
    return bw_e


def _check_sizes(paral, gran, paral_name, gran_name, crossbar_rows=None):
    """ValueError naming the argument when a block or granule size (rounded up to whole blocks,
    spec 2) leaves int64, or when the crossbar height ``paral[crossbar_rows]`` leaves int32."""
    for v in paral:
        if v > _SIZE_MAX:
            raise ValueError("argument '%s': values must be at most 2**63-1, got %r" % (paral_name, tuple(paral)))
    if crossbar_rows is not None and paral[crossbar_rows] > _CROSSBAR_ROWS_MAX:
        raise ValueError("argument '%s': the crossbar height %s[%d] must be at most 2**31-1, got %d"
                         % (paral_name, paral_name, crossbar_rows, paral[crossbar_rows]))
    if gran is None or isinstance(gran, str):
        return
    for i in range(2):
        rounded = -(-int(gran[i]) // int(paral[i])) * int(paral[i])
        if rounded > _SIZE_MAX:
            raise ValueError("argument '%s': %d rounded up to a multiple of %s[%d] = %d is %d, above 2**63-1"
                             % (gran_name, gran[i], paral_name, i, paral[i], rounded))


def _quant_gran(value, name="quant_gran"):
    if value is None:
        return None
    if isinstance(value, str):
        value = str.__str__(value)  # its characters, as the core reads them (np.str_, a subclass's own __eq__)
        if value not in _GRANULARITIES:
            raise ValueError("argument '%s': expected None, 'per-matrix', 'per-row', 'per-col' or a pair "
                             "of positive ints, got %r" % (name, value))
        return value
    return _pair(value, name)


def slice_params(slice_method):
    """``(m, w, off)`` of a slice method (docs/semantics.md section 1), int64 arrays, least significant slice first.

    ``m[s] = 2**width - 1`` (slice maximum), ``w[s] = 2**off[s]`` (shift weight)
    except the sign slice ``w[S-1] = -2**(B-1)``, ``off[s]`` = bits below slice ``s``.
    """
    widths = _widths(slice_method)[::-1]
    off = np.concatenate([[0], np.cumsum(widths)[:-1]]).astype(np.int64)
    m = (np.int64(1) << np.array(widths, dtype=np.int64)) - 1
    w = np.int64(1) << off
    w[-1] = -(1 << (sum(widths) - 1))
    return m, w, off


SliceResult = namedtuple("SliceResult", "codes gran_max gran_scale gran_exp dequant levels granule")
SliceResult.__doc__ = """Result of :func:`slice_quantize` (NumPy arrays; see the module docstring).

codes uint8 (S, N, R, C); gran_max, gran_scale float32 (N, gr, gc); gran_exp int32 (N, gr, gc) or None
(INT); dequant float32 (N, R, C) or None; levels uint8 (S, N, R, C) or None; granule (qr', qc')."""


def _np(a):
    return None if a is None else np.asarray(a)


def slice_quantize(data, slice_method, paral_size=(64, 64), quant_gran=None, bw_e=None, dequant=False, g_level=None):
    """Quantize and bit-slice ``data`` (docs/semantics.md sections 1-5) in one pass of the C core.

    data: float32 or float64 (converted once, counted by pyfastpim.memory), 2-D
    ``(R, C)`` or 3-D ``(N, R, C)``, NumPy array or CPU torch tensor (viewed
    without a copy when float32 and contiguous).
    slice_method: bit widths, most significant first, the first 1 (sign); 2 to
    16 bits in total, each slice 1 to 8 bits.
    paral_size: crossbar block ``(pr, pc)``. quant_gran: ``(qr, qc)``,
    'per-matrix', 'per-row', 'per-col' or None (= paral_size), rounded up to
    multiples of the block.
    bw_e: None (or 0) for INT quantization, a positive int for BFP.
    dequant: also return the dequantized values. g_level: for 2-D weights,
    also return the programmed conductance levels (docs/semantics.md section 6).

    Raises ValueError naming the argument for invalid arguments, empty data,
    more than 3 dimensions, and data holding NaN or infinity (detected in the
    max-abs pass; quantization needs finite values); TypeError for
    unsupported types. Returns a :class:`SliceResult`.
    """
    widths = _widths(slice_method)
    paral = _pair(paral_size, "paral_size")
    gran = _quant_gran(quant_gran)
    if _is_torch(data) and getattr(data, "requires_grad", False):
        data = data.detach()
    r = _core.slice_quantize(data, widths, paral, gran, bw_e, dequant, g_level)
    return SliceResult(*(_np(a) for a in r[:6]), tuple(r[6]))


def program_weights(codes, slice_method, g_level, HGS=1e-5, LGS=1e-7, write_variation=0.0, rate_stuck_HGS=0.0,
                    rate_stuck_LGS=0.0, seed=None):
    """Program weight slice codes into conductances (docs/semantics.md section 6).

    codes: uint8 ``(S, C, P)`` (or ``(S, 1, C, P)`` as slice_quantize returns).
    Returns ``(levels, conductance)``: uint8 levels
    ``L = rint(code / m[s] * (g_level - 1))`` and float32 conductances in siemens
    ``G = L * Q_G + LGS`` with write variation ``G += G * N(0, write_variation)``
    and stuck-at faults, drawn from counter-based Philox noise with ``seed``
    (default :data:`DEFAULT_SEED`): programming twice gives the same cells.
    """
    widths = _widths(slice_method)
    codes = _nested(codes, "codes")
    if codes.ndim == 4 and codes.shape[1] == 1:
        codes = codes[:, 0]
    if codes.ndim != 3:
        raise ValueError("argument 'codes': expected (slices, rows, cols), got shape %r" % (codes.shape,))
    levels = np.asarray(_core.program_levels(codes, widths, g_level))
    # the scalars as the core reads them (csrc/python/convert.c): float() took True as 1 S and named nothing
    g = np.asarray(_core.program_conductance(levels, g_level, HGS, LGS, write_variation, rate_stuck_HGS,
                                             rate_stuck_LGS, seed))
    return levels, g


def _array_identity(a):
    """(owner, address, shape, strides) of an array: equal for two views of the same memory (a
    weight operand such as ``_gran_scale[0]`` is a new view each time); the owner is held, so
    its address cannot be reused while compared."""
    if not isinstance(a, np.ndarray):
        return (a,)
    owner = a
    while isinstance(owner, np.ndarray) and owner.base is not None:
        owner = owner.base
    return (owner, a.__array_interface__["data"][0], a.shape, a.strides)


def packed_weights(mat, w_conductance, w_scale, n, rdac, g_level, radc, HGS, LGS, read_sigma):
    """The CPU kernel's packed form of the programmed weights ``mat`` (a ``_core.PackedWeights``),
    made once per programming and kept with ``mat`` (``mat._packed``); made again only when the
    weight operand (the same arrays, by identity), the crossbar height, the device or whether
    read noise is on changed. Call with ``_state_lock`` held."""
    sig = (mat._version, n, int(g_level), float(HGS), float(LGS), read_sigma is not None)
    arrays = tuple(_array_identity(a) for a in (mat._levels, w_conductance, w_scale))
    cached = mat.__dict__.get("_packed")
    if cached is not None and cached[0] == sig and all(a[0] is b[0] and a[1:] == b[1:]
                                                       for a, b in zip(cached[1], arrays)):
        return cached[2]
    handle = _core.dpe_pack(mat._levels, w_conductance, w_scale, mat._granule, mat._widths, n, rdac, g_level,
                            radc, HGS, LGS, read_sigma)
    mat.__dict__["_packed"] = (sig, arrays, handle)
    return handle


def _assigned_conductance_max(HGS):
    """Largest conductance a cell may be assigned (SlicedData.G): the largest write variation can program,
    ``HGS * (1 + NOISE_SIGMA_MAX * |z|max)``, so the kernels' sums stay finite in float32."""
    return HGS * (1.0 + _core.NOISE_SIGMA_MAX * _core.NORMAL_ABS_MAX)


def _check_engine(engine):
    """(g_level, HGS, LGS, write_variation, rate_stuck_HGS, rate_stuck_LGS, seed) of a programming engine (a
    DPETensor's checked by its constructor's rules, DPETensor._programming_key)."""
    key = getattr(engine, "_programming_key", None)
    if key is not None:
        return key()
    names = ("g_level", "HGS", "LGS", "write_variation", "rate_stuck_HGS", "rate_stuck_LGS")
    missing = [n for n in names if not hasattr(engine, n)]
    if missing:
        raise TypeError("argument 'engine': weights need an engine with %s (missing: %s)"
                        % (", ".join(names), ", ".join(missing)))
    g_level = engine.g_level
    if isinstance(g_level, bool) or not isinstance(g_level, (int, np.integer)):
        raise TypeError("argument 'engine': g_level must be an int, got %r" % (g_level,))
    # the core's type and range rule (contract.c): TypeError / ValueError naming HGS or LGS (float() named neither)
    _core.check_conductance_range(engine.HGS, engine.LGS, g_level)
    HGS, LGS = float(engine.HGS), float(engine.LGS)
    # the scalar type rule of every entry (float() took "0.02" and True)
    wv, rh, rl = (_core.check_number(getattr(engine, n), n) for n in names[3:])
    if not (np.isfinite(wv) and wv >= 0):
        raise ValueError("argument 'engine': write_variation must be finite and >= 0, got %r" % wv)
    if not (0 <= rh <= 1 and 0 <= rl <= 1 and rh + rl <= 1):
        raise ValueError("argument 'engine': rate_stuck_HGS, rate_stuck_LGS must be probabilities summing to "
                         "at most 1, got %r, %r" % (rh, rl))
    seed = getattr(engine, "program_seed", None)
    return int(g_level), HGS, LGS, wv, rh, rl, DEFAULT_SEED if seed is None else seed


def _granule_of(gran, paral, rows, cols):
    """The effective granule (qr', qc') of ``rows x cols`` data (docs/semantics.md section 2, the core's
    resolve_granule): ``gran`` (a checked pair or granularity name) rounded up to multiples of ``paral``."""
    if isinstance(gran, str):
        gran = {"per-matrix": (rows, cols), "per-row": (1, cols), "per-col": (rows, 1)}[gran]
    return tuple(-(-int(g) // int(p)) * int(p) for g, p in zip(gran, paral))


def _effective_geometry(widths, paral, gran, bw_e, rows, cols):
    """What slicing ``rows x cols`` data with checked ``widths``, ``paral``, ``gran`` and ``bw_e`` depends on: the
    widths, the blocks and the effective granule, as plain ints, and whether it is BFP (docs/semantics.md section 4:
    a positive bw_e; its value is not otherwise used). Values of another form (an unchecked one a pickle from
    before the checks may hold) give None: equal to nothing, so such a geometry always counts as changed."""
    try:
        return (tuple(operator.index(w) for w in widths), tuple(operator.index(p) for p in paral),
                _granule_of(gran, paral, rows, cols), bool(bw_e))
    except (TypeError, KeyError, ValueError):
        return None


#: Slicings slice_data_imp runs outside _state_lock before it slices holding it (each outdated by a geometry
#: that another thread assigned meanwhile): a thread that keeps assigning cannot keep it slicing forever.
_UNLOCKED_SLICINGS = 3


def _slice_for(engine, data, geometry, inference, program):
    """One slicing of ``data`` with ``geometry`` (widths, paral_size, quant_gran, bw_e) and, for weights
    (``program``: _check_engine's tuple), its programming: (codes, gran_max, gran_scale, gran_exp, dequant, levels,
    conductance, granule)."""
    widths, paral, gran, bw_e = geometry
    gran = gran if isinstance(gran, str) else tuple(gran)
    dev = getattr(engine, "_cl", None)  # an engine on an OpenCL device slices there (same results)
    g_level = program[0] if program is not None else None
    r = _core.slice_quantize(data, widths, paral, gran, bw_e, not inference, g_level, device=dev)
    codes, gmax, gscale, gexp, dq, levels = (_np(a) for a in r[:6])
    conductance = None
    if program is not None:
        g_level, HGS, LGS, wv, rh, rl, seed = program
        levels = levels[:, 0]
        if wv > 0 or rh > 0 or rl > 0:
            conductance = np.asarray(_core.program_conductance(levels, g_level, HGS, LGS, wv, rh, rl, seed,
                                                               device=dev))
    return codes, gmax, gscale, gexp, dq, levels, conductance, tuple(r[6])


def _default_device(sd):
    torch = _torch()
    return torch.device("cpu") if torch is not None else "cpu"


_LAZY_ATTRIBUTES = {"device": _default_device,
                    "sliced_max_weights": lambda sd: _out(slice_params(sd._widths)[0].astype(np.float32)),
                    "sliced_weights": lambda sd: _out(slice_params(sd._widths)[1].astype(np.float32))}


class SlicedData:
    """Bit-sliced, quantized data for the dot-product engine (MemIntelli-compatible).

    ``SlicedData(slice_method, bw_e=None, is_weight=False, paral_size=(64, 64),
    quant_gran=None, device=None, inference=False)``; then
    ``slice_data_imp(engine, data)`` quantizes and slices ``data`` (2-D, or 3-D
    batched for inputs; weights must be 2-D ``(C, P)`` and are also programmed
    into conductance levels with the engine's ``g_level``, ``HGS``, ``LGS``,
    ``write_variation``, ``rate_stuck_HGS``, ``rate_stuck_LGS`` and optional
    ``program_seed``). Data holding NaN or infinity raises ValueError naming 'data'.

    MemIntelli's attributes are produced on access, in MemIntelli's padded
    block layouts (torch tensors when torch is importable): ``sliced_data``
    ``([N,] Rp/pr, Cp/pc, S, pr, pc)``, ``max_data`` and ``e_bias``
    ``([N,] Rp/pr, Cp/pc, 1, 1)`` (one value per block, its granule's), 
    ``quantized_data`` (dequantized, shaped like the data) and, for weights,
    ``G`` (siemens, same layout as ``sliced_data``; padding cells read LGS).
    ``shape`` is the data's (a torch.Size for torch data, else a tuple);
    ``slice_method`` the object given. ``slice_method``, ``paral_size``,
    ``quant_gran``, ``bw_e`` and ``is_weight`` assigned later are checked as the
    constructor checks them (its exceptions and messages; ``quant_gran=None`` is
    the current ``paral_size``); one that changes the geometry of data already
    sliced (other widths, blocks or effective granule: the granule rounded up to
    whole blocks, a granularity name as the size it stands for; INT against BFP)
    drops that slicing, so a product raises "not sliced yet (call
    slice_data_imp)" until ``slice_data_imp`` is called again. A value slicing
    the data alike (``[1, 1, 2]`` for ``(1, 1, 2)``, quant_gran ``(30, 30)`` for
    ``(32, 32)`` with 32-wide blocks, bw_e 8 for 4) keeps the data; so does
    ``is_weight`` except for batched (3-D) data made weights (see its setter).
    One assigned from another thread while ``slice_data_imp`` runs is the one it
    slices with (after a few slicings so outdated, the last one holds the lock).

    Differences from MemIntelli: when a granule is all zeros, codes and
    dequantized values are 0 (MemIntelli divides by zero); ``bw_e`` None or 0
    means INT, any positive value BFP (the exponent width is not used, as in
    MemIntelli); slices are at most 8 bits wide (uint8 codes).
    """

    def __init__(self, slice_method, bw_e=None, is_weight=False, paral_size=(64, 64), quant_gran=None, device=None,
                 inference=False):
        widths = _widths(slice_method)
        _bw_e(bw_e)
        is_weight = _core.check_flag(is_weight, "is_weight")  # bool or 0/1, as every flag (convert.c)
        paral = _pair(paral_size, "paral_size")
        gran = paral if quant_gran is None else _quant_gran(quant_gran)
        _check_sizes(paral, gran, "paral_size", "quant_gran")
        inference = _core.check_flag(inference, "inference")
        if device is not None:  # DPETensor's device forms and messages; a string as the engines show it
            from .devices import _engine_form
            form = _engine_form(device)
            device = form if isinstance(device, str) else device
        self._setup(slice_method, widths, bw_e, is_weight, paral, gran, device, inference)

    @classmethod
    def _checked(cls, slice_method, widths, bw_e, is_weight, paral_size, quant_gran, inference):
        """A SlicedData of arguments its caller checked as __init__ checks them, naming its own arguments
        (pyfastpim.dpe's entry points): ``widths`` the checked slice_method, ``paral_size`` the checked
        pair, ``quant_gran`` the checked pair or granularity name (paral_size for None). No check runs again."""
        self = cls.__new__(cls)
        self._setup(slice_method, widths, bw_e, is_weight, paral_size, quant_gran, None, inference)
        return self

    def _setup(self, slice_method, widths, bw_e, is_weight, paral_size, quant_gran, device, inference):
        self._widths = widths
        self.__dict__.update(slice_method=slice_method, paral_size=paral_size, quant_gran=quant_gran,  # checked
                             bw_e=bw_e, is_weight=is_weight)
        if device is not None:  # else torch.device("cpu"), made on first access (see __getattr__)
            self.device = device
        self.inference = inference
        self.shape = None
        self._reset()

    # ---- the slicing's geometry: slice_method, paral_size, quant_gran, bw_e; and is_weight ----
    # Kept in the instance dictionary under their public names (pickles and copies of any version carry
    # them as they are); assigning one checks it as the constructor does and, where it changes the
    # geometry of data already sliced, drops that slicing (see _set_geometry, _set_is_weight).

    def _stored(self, name):
        # the dictionary fetched with object.__getattribute__: torch.compile (dynamo, torch 2.x) reads
        # self.__dict__[name] as the attribute `name`, this property, which recursed without end
        try:
            return object.__getattribute__(self, "__dict__")[name]
        except KeyError:
            raise AttributeError("'%s' object has no attribute '%s'" % (type(self).__name__, name)) from None

    @property
    def slice_method(self):
        """The slice method as given (a tensor stays a tensor); assigning one sets the widths sliced with."""
        return self._stored("slice_method")

    @slice_method.setter
    def slice_method(self, value):
        self._set_geometry(slice_method=value, _widths=_widths(value))

    @property
    def paral_size(self):
        """The crossbar block ``(pr, pc)``, a tuple."""
        return self._stored("paral_size")

    @paral_size.setter
    def paral_size(self, value):
        self._set_geometry(paral_size=_pair(value, "paral_size"))

    @property
    def quant_gran(self):
        """The quantization granule: a pair or a granularity name (paral_size where None was given)."""
        return self._stored("quant_gran")

    @quant_gran.setter
    def quant_gran(self, value):
        self._stored("paral_size")
        self._set_geometry(quant_gran=None if value is None else _quant_gran(value))

    @property
    def bw_e(self):
        """None or 0 (INT quantization) or a positive int (BFP), as given."""
        return self._stored("bw_e")

    @bw_e.setter
    def bw_e(self, value):
        self._set_geometry(bw_e=_bw_e(value))

    @property
    def is_weight(self):
        """Whether the data is a weight matrix, programmed into conductances (a bool)."""
        return self._stored("is_weight")

    @is_weight.setter
    def is_weight(self, value):
        """Checked as the constructor checks it. The codes do not depend on it (weights are 2-D data sliced as
        an input is, then programmed), so data sliced keeps its slicing: weights that become an input keep their
        programming (unused; the products refuse them as weights), 2-D data that becomes weights is programmed
        at its first product (as weights sliced with another engine are re-programmed). Data of more than 2
        dimensions, which slice_data_imp refuses as weights, is dropped when it becomes weights."""
        value = _core.check_flag(value, "is_weight")
        with _state_lock:  # one step for a product or a slicing in another thread
            if value and self._codes is not None and not self._data_2d:
                self._reset()
                self.shape = None
            self.__dict__["is_weight"] = value

    def _set_geometry(self, **values):
        """Store checked geometry ``values`` (quant_gran None: the current paral_size), the block and granule
        sizes checked together. Where the data already sliced would be sliced differently with the new geometry
        (other widths, blocks or effective granule, INT against BFP: _effective_geometry), that slicing is
        dropped (the products then refuse the SlicedData as not sliced, until slice_data_imp is called again):
        codes in the old geometry would otherwise be read with the new one. An effectively equal geometry (a
        granule rounding up to the same whole blocks, a name standing for the same granule of this data, another
        positive bw_e) keeps it."""
        with _state_lock:  # one step for a product or a slicing in another thread
            if values.get("quant_gran", ()) is None:
                values["quant_gran"] = self._stored("paral_size")
            _check_sizes(values.get("paral_size", self.__dict__.get("paral_size")),
                         values.get("quant_gran", self.__dict__.get("quant_gran")), "paral_size", "quant_gran")
            new = dict(zip(("_widths", "paral_size", "quant_gran", "bw_e"), self._geometry()), **values)
            sliced = self._sliced_geometry() if self._codes is not None else None
            if self._codes is not None and (sliced is None or sliced != self._effective(
                    new["_widths"], new["paral_size"], new["quant_gran"], new["bw_e"])):
                self._reset()
                self.shape = None
            if values.get("_widths", self._widths) != self._widths:  # the per-slice constants follow the widths
                self.__dict__.pop("sliced_max_weights", None)
                self.__dict__.pop("sliced_weights", None)
            self.__dict__.update(values)

    def _geometry(self):
        return self._widths, self.paral_size, self.quant_gran, self.bw_e

    def _effective(self, widths, paral, gran, bw_e):
        """_effective_geometry of the data sliced now (its rows and columns) with this geometry."""
        rows, cols = self._codes.shape[2:]
        return _effective_geometry(widths, paral, gran, bw_e, rows, cols)

    def _sliced_geometry(self):
        """What the data sliced now was sliced with: its widths, blocks, effective granule and whether it is BFP
        (it has exponents); None: unknown."""
        g = self._effective(self._widths, self.paral_size, self._granule, self._gran_exp is not None)
        return g if g is not None and g[2] == tuple(self._granule) else None

    def __getattr__(self, name):
        """MemIntelli's torch-valued attributes that need no data, made on first access (torch, ~1 s
        to import, is then imported; a NumPy-only program never pays it): ``device`` (given None:
        ``torch.device("cpu")``, or "cpu" without torch), ``sliced_max_weights`` and
        ``sliced_weights`` (each slice's maximum code and shift weight, least significant first).
        Called only for attributes not set; assigning one replaces it as before."""
        make = _LAZY_ATTRIBUTES.get(name)
        if make is None or "_widths" not in self.__dict__:
            raise AttributeError("'%s' object has no attribute '%s'" % (type(self).__name__, name))
        value = self.__dict__[name] = make(self)
        return value

    # Every re-programming moves _version on (under _state_lock); setting it drops the weights
    # packed for the CPU kernel from the previous programming (their memory is freed with them).
    @property
    def _version(self):
        return self.__dict__.get("_version_value", 0)

    @_version.setter
    def _version(self, value):
        self.__dict__["_version_value"] = value
        self.__dict__["_packed"] = None

    def __getstate__(self):
        """Pickle / copy without the packed weights (derived state, re-packed on the next product)."""
        state = self.__dict__.copy()
        state["_packed"] = None
        return state

    def _reset(self):
        self._codes = None        # uint8 (S, N, R, C)
        self._data_2d = True      # the user's data was 2-D (N = 1 added internally)
        self._gran_max = None     # float32 (N, gr, gc)
        self._gran_scale = None   # float32 (N, gr, gc)
        self._gran_exp = None     # int32 (N, gr, gc), BFP only
        self._granule = None      # (qr', qc')
        self._dequant = None      # float32 (N, R, C) or None (inference mode)
        self._levels = None       # uint8 (S, C, P), weights
        self._conductance = None  # float32 (S, C, P), weights with device noise only
        self._program = None      # (g_level, HGS, LGS, write_variation, stuck rates, seed) of programming
        self._is_torch = False
        self._version = 0

    # ---- slicing ----

    def slice_data_imp(self, engine, data):
        """Quantize, slice and (for weights) program ``data`` with ``engine``'s device parameters.

        The slicing runs outside ``_state_lock`` with the geometry (slice_method, paral_size, quant_gran, bw_e)
        and is_weight read when it starts; where another thread assigns meanwhile a geometry that slices this data
        differently, or another is_weight, the data is sliced again with the new values, so what is committed is
        always sliced with the settings the SlicedData then holds (the assignment acts as made before the call).
        After _UNLOCKED_SLICINGS slicings so outdated, the last slicing holds the lock throughout: assignments
        from other threads then wait for it (and act as made after the call)."""
        data = _operand(data, "data")
        is_torch = _is_torch(data)
        if is_torch and data.requires_grad:
            data = data.detach()
        ndim = len(data.shape)
        rows, cols = data.shape[-2:] if ndim >= 2 else (1, 1)  # fewer dimensions: the core refuses the data
        for attempt in range(_UNLOCKED_SLICINGS + 1):
            with _state_lock:
                is_weight, geometry, inference = self.is_weight, self._geometry(), self.inference
            if attempt == _UNLOCKED_SLICINGS:
                with _state_lock:  # re-entrant: the settings cannot change while it slices
                    self._slice_once(engine, data, is_weight, geometry, inference, is_torch, rows, cols, True)
                break
            if self._slice_once(engine, data, is_weight, geometry, inference, is_torch, rows, cols, False):
                break
        if is_weight and hasattr(engine, "_prepare_weights"):  # as committed
            engine._prepare_weights(self)  # IR drop / drift: effective conductances at programming time (unlocked)

    def _slice_once(self, engine, data, is_weight, geometry, inference, is_torch, rows, cols, last):
        """One slicing of ``data`` with the settings read (is_weight, geometry); commits it and returns True where
        the SlicedData still holds them, or settings that slice this data alike. Else returns False, or where
        ``last`` (the caller holds _state_lock: only this thread could have changed them) raises RuntimeError."""
        ndim = len(data.shape)
        if is_weight and ndim != 2:
            raise ValueError("argument 'data': weights must be 2-D (rows, cols), got %d dimensions" % ndim)
        program = _check_engine(engine) if is_weight else None  # everything programming depends on
        sliced = _slice_for(engine, data, geometry, inference, program)
        with _state_lock:
            now = self._geometry()
            same = all(a is b for a, b in zip(now, geometry))
            if not same:
                effective = _effective_geometry(*now, rows, cols)
                same = effective is not None and effective == _effective_geometry(*geometry, rows, cols)
            if same and (self.is_weight == is_weight or ndim == 2):  # 2-D data slices alike as input or weights
                self._commit_slicing(sliced, ndim, is_torch, program, data.shape)
                return True
        if last:
            raise RuntimeError("SlicedData.slice_data_imp: its slice_method, paral_size, quant_gran, bw_e or "
                               "is_weight changed while it sliced, holding the lock")
        return False  # a geometry or is_weight assigned meanwhile slices this data differently: slice again

    def _commit_slicing(self, sliced, ndim, is_torch, program, shape):
        """Store one slicing's results (call with _state_lock held)."""
        codes, gmax, gscale, gexp, dq, levels, conductance, granule = sliced
        self._reset()
        self._codes, self._gran_max, self._gran_scale, self._gran_exp = codes, gmax, gscale, gexp
        self._granule = granule
        self._dequant = dq
        self._data_2d = ndim == 2
        self._is_torch = is_torch
        if program is not None:
            self._levels, self._conductance, self._program = levels, conductance, program
        self.shape = shape if is_torch else tuple(shape)  # torch.Size (a tuple) as in MemIntelli
        self._version = next(_versions)

    # ---- MemIntelli's attributes, produced on access ----

    def __repr__(self):
        from ._display import sliced_repr
        return sliced_repr(self)

    def _repr_html_(self):
        from ._display import sliced_html
        return sliced_html(self)

    def __len__(self):
        return len(self._widths)

    def size(self):
        """The data's shape (MemIntelli's ``size()``): ``shape``, a tuple (torch.Size for torch data)."""
        return self.shape

    def _require(self):
        if self._codes is None:
            raise RuntimeError("SlicedData: call slice_data_imp(engine, data) first")

    def _padded_grid(self):
        _, N, R, C = self._codes.shape
        qr, qc = self._granule
        gr, gc = self._gran_max.shape[1:]
        return N, R, C, gr * qr, gc * qc

    def _per_block(self, per_granule):
        """(N, gr, gc) -> ([N,] Rp/pr, Cp/pc, 1, 1), each block carrying its granule's value."""
        qr, qc = self._granule
        pr, pc = self.paral_size
        a = np.repeat(np.repeat(per_granule, qr // pr, axis=1), qc // pc, axis=2)[..., None, None]
        return a[0] if self._data_2d else a

    def _blocks(self, planes, fill, dtype):
        """(S, N, R, C) -> ([N,] Rp/pr, Cp/pc, S, pr, pc), padding set to fill."""
        N, R, C, Rp, Cp = self._padded_grid()
        pr, pc = self.paral_size
        S = planes.shape[0]
        padded = np.full((S, N, Rp, Cp), fill, dtype=dtype)
        padded[:, :, :R, :C] = planes
        out = padded.reshape(S, N, Rp // pr, pr, Cp // pc, pc).transpose(1, 2, 4, 0, 3, 5)
        out = np.ascontiguousarray(out)
        return out[0] if self._data_2d else out

    @property
    def sliced_data(self):
        """Slice codes in MemIntelli's block layout ([N,] Rp/pr, Cp/pc, S, pr, pc), uint8."""
        if self._codes is None:
            return None
        return _out(self._blocks(self._codes, 0, np.uint8))

    @sliced_data.setter
    def sliced_data(self, value):
        """Assign slice codes in the getter's layout (MemIntelli code does, e.g. ``s.sliced_data = t.to(dev)``).

        The codes replace the stored ones (values checked against each slice's width, padding
        ignored); weights are re-programmed from them with the same device parameters and seed,
        so the engine multiplies with exactly the assigned codes. ``None`` (the faster fork's
        ``prepare_for_inference`` frees it) releases nothing the engine needs: pyfastpim stores
        only compact uint8 codes and builds this layout on access, so the attribute keeps
        reading the codes.
        """
        if value is None:
            return
        value = _numeric(value, "sliced_data")
        with _state_lock:  # checked against, and committed to, one slicing (another thread may re-slice self)
            self._require()
            codes = self._unblocks(value, "sliced_data", np.uint8)
            if codes.dtype.kind not in "ui" and not np.array_equal(codes, np.rint(codes)):
                raise ValueError("argument 'sliced_data': slice codes must be integers")
            limits = np.array([(1 << w) - 1 for w in reversed(self._widths)], dtype=np.int64)  # slice 0: LSB
            if codes.min(initial=0) < 0 or (codes.reshape(codes.shape[0], -1).max(axis=1, initial=0) > limits).any():
                raise ValueError("argument 'sliced_data': codes exceed the slice widths %r (most significant first)"
                                 % (tuple(self._widths),))
            codes = np.ascontiguousarray(codes.astype(np.uint8))
            levels = conductance = None
            if self._program is not None:  # weights (also made an input since: they may become weights again)
                g_level, HGS, LGS, wv, rh, rl, seed = self._program
                levels, g = program_weights(codes[:, 0], self._widths, g_level, HGS, LGS, wv, rh, rl, seed)
                conductance = g if (wv > 0 or rh > 0 or rl > 0) else None
            self._codes = codes
            self._dequant = None  # recomputed from the new codes on access
            if levels is not None:
                self._levels, self._conductance = levels, conductance
            self._version = next(_versions)

    def _unblocks(self, value, name, dtype):
        """Inverse of :meth:`_blocks`: a getter-layout value -> (S, N, R, C) NumPy array of ``dtype``."""
        a = _numeric(value, name)
        N, R, C, Rp, Cp = self._padded_grid()
        pr, pc = self.paral_size
        S = self._codes.shape[0]
        want = (Rp // pr, Cp // pc, S, pr, pc)
        if not self._data_2d:
            want = (N,) + want
        if a.shape != want:
            raise ValueError("argument '%s': expected shape %r (MemIntelli's block layout), got %r"
                             % (name, want, a.shape))
        if not np.isfinite(a).all():
            raise ValueError("argument '%s': values must be finite" % name)
        if self._data_2d:
            a = a[None]
        planes = a.transpose(3, 0, 1, 4, 2, 5).reshape(S, N, Rp, Cp)[:, :, :R, :C]
        if dtype is np.uint8:
            return planes
        return np.ascontiguousarray(_finite32(planes, name))

    def _per_granule(self, value, name):
        """Inverse of :meth:`_per_block`: one value per granule (N, gr, gc); blocks of a granule must agree."""
        a = _numeric(value, name).astype(np.float64)
        ref = self._per_block(self._gran_max)
        if a.shape != ref.shape:
            raise ValueError("argument '%s': expected shape %r, got %r" % (name, ref.shape, a.shape))
        if not np.isfinite(a).all():
            raise ValueError("argument '%s': values must be finite" % name)
        if self._data_2d:
            a = a[None]
        qr, qc = self._granule
        pr, pc = self.paral_size
        per = a[:, ::qr // pr, ::qc // pc, 0, 0]
        if not np.array_equal(np.repeat(np.repeat(per, qr // pr, axis=1), qc // pc, axis=2), a[..., 0, 0]):
            raise ValueError("argument '%s': every block of a quantization granule %r must carry the same value"
                             % (name, self._granule))
        return per

    @property
    def max_data(self):
        """Max-abs of each block's granule, ([N,] Rp/pr, Cp/pc, 1, 1) float32."""
        if self._codes is None:
            return None
        return _out(self._per_block(self._gran_max))

    @max_data.setter
    def max_data(self, value):
        """Assign the granules' max-abs values (getter layout). INT: the scales ``M / K`` follow, so
        products and dequantized values use the new maxima; BFP: stored only (the scale is the
        exponent's). ``None`` is ignored (the values are needed by the engine)."""
        if value is None:
            return
        value = _numeric(value, "max_data")
        with _state_lock:  # one slicing's granules (see sliced_data)
            self._require()
            m = _finite32(self._per_granule(value, "max_data"), "max_data")
            if (m < 0).any():
                raise ValueError("argument 'max_data': max-abs values must be >= 0")
            self._gran_max = np.ascontiguousarray(m)
            if self._gran_exp is None:
                k = np.float32(2 ** (sum(self._widths) - 1) - 1)
                self._gran_scale = np.ascontiguousarray(m / k)
            self._dequant = None
            self._version = next(_versions)

    @property
    def e_bias(self):
        """BFP exponent of each block's granule, ([N,] Rp/pr, Cp/pc, 1, 1) float32; None for INT."""
        if self._codes is None or self._gran_exp is None:
            return None
        return _out(self._per_block(self._gran_exp.astype(np.float32)))

    @e_bias.setter
    def e_bias(self, value):
        """Assign BFP exponents (getter layout, integers); the scales ``2**(e + 2 - B)`` follow.
        ``None`` is ignored; INT data (no exponents) accepts only None."""
        if value is None:
            return
        value = _numeric(value, "e_bias")
        with _state_lock:  # one slicing's granules (see sliced_data)
            self._require()
            if self._gran_exp is None:
                raise ValueError("argument 'e_bias': INT data (bw_e=None) has no exponents")
            e = self._per_granule(value, "e_bias")
            if (e != np.rint(e)).any() or np.abs(e).max(initial=0) > 126:
                raise ValueError("argument 'e_bias': exponents must be integers in [-126, 126]")
            exp = np.ascontiguousarray(e.astype(np.int32))
            self._gran_exp = exp
            self._gran_scale = np.ascontiguousarray(
                np.ldexp(np.float32(1), exp + 2 - sum(self._widths)).astype(np.float32))
            self._dequant = None
            self._version = next(_versions)

    def _dequantized(self):
        if self._dequant is not None:
            return self._dequant
        # recompute from the codes in the spec's float32 order (bit-identical to the kernel's)
        _, w, _ = slice_params(self._widths)
        q = np.tensordot(w.astype(np.int32), self._codes.astype(np.int32), axes=1)
        N, R, C, _, _ = self._padded_grid()
        qr, qc = self._granule
        def expand(a):
            return np.repeat(np.repeat(a, qr, axis=1), qc, axis=2)[:, :R, :C]
        qf = q.astype(np.float32)
        if self._gran_exp is not None:
            return qf * expand(self._gran_scale)
        k = np.float32(2 ** (sum(self._widths) - 1) - 1)
        m = expand(self._gran_max)
        return (qf / k) * np.where(m > 0, m, np.float32(1))

    @property
    def quantized_data(self):
        """Dequantized values, shaped like the data (float32): a new tensor at each access, as every attribute's
        (the values kept from slicing are copied out: an in-place edit of the result changes nothing here)."""
        return self._quantized(copy=True)

    def _quantized(self, copy):
        """quantized_data; ``copy=False`` (the layers' backward, which only reads it) shares the values kept from
        slicing instead of copying them."""
        if self._codes is None:
            return None
        dq = self._dequantized()
        if copy and dq is self._dequant:
            dq = dq.copy()
        return _out(dq[0] if self._data_2d else dq)

    @quantized_data.setter
    def quantized_data(self, value):
        """``None`` frees the stored dequantized copy (it is recomputed from the codes on access, so
        training after the fork's ``prepare_for_inference`` still works); a tensor of the data's
        shape replaces the values returned here (used, as in MemIntelli, only by backward passes;
        the product reads the codes). The values must be numbers, finite in float32, as every
        assigned attribute's (else TypeError / ValueError naming 'quantized_data')."""
        if value is None:
            self._dequant = None
            return
        a = _numeric(value, "quantized_data")  # numbers only, as every assigned attribute (not str, complex)
        a = _finite32(a, "quantized_data")  # dequantized values are finite, as the codes' always are
        with _state_lock:  # the shape of one slicing (see sliced_data)
            self._require()
            want = tuple(self.shape)
            if a.shape != want:
                raise ValueError("argument 'quantized_data': expected shape %r, got %r" % (want, a.shape))
            self._dequant = np.ascontiguousarray(a[None] if self._data_2d else a)

    @property
    def G(self):
        """Weights: programmed conductances in siemens, MemIntelli's layout (Rp/pr, Cp/pc, S, pr, pc)."""
        if not self.is_weight or self._levels is None:
            return None
        return _out(self._blocks(self._cell_conductance()[:, None], np.float32(self._program[2]), np.float32))

    def _cell_conductance(self):
        """The programmed cells (S, K, P) float32 in siemens: assigned or noisy conductances, else ideal."""
        return self._conductance if self._conductance is not None else self._ideal_conductance()

    def _ideal_conductance(self):
        """The cells at their programmed levels, no write variation or stuck cells: L * Q_G + LGS."""
        g_level, HGS, LGS = self._program[:3]
        q_g = np.float32((HGS - LGS) / (g_level - 1))
        return self._levels.astype(np.float32) * q_g + np.float32(LGS)

    @G.setter
    def G(self, value):
        """Weights: assign programmed conductances in siemens (getter layout; padding ignored).

        The engine then reads exactly these cells (read noise still follows the nominal level of
        each cell); every cell in ``[0, HGS * (1 + 1e6 * 5.9)]`` (what write variation can program),
        else ValueError naming 'G'. Cells equal to their ideal conductances (``L * Q_G + LGS``, e.g.
        the getter's values of noise-free weights written back) are the programmed levels again, so
        noise-free products stay exact (docs/semantics.md 7.1). ``None`` restores the cells
        programmed from the codes. Weights re-programmed for an engine with other device parameters
        lose the assignment."""
        if not self.is_weight:
            raise AttributeError("SlicedData.G: only weights (is_weight=True) have conductances")
        if value is not None:
            value = _numeric(value, "G")
        with _state_lock:  # checked against, and committed to, one programming (see sliced_data)
            self._require()
            if self._levels is None:
                raise RuntimeError("SlicedData.G: the weights are not programmed")
            g_level, HGS, LGS, wv, rh, rl, seed = self._program
            if value is None:
                _, g = program_weights(self._codes[:, 0], self._widths, g_level, HGS, LGS, wv, rh, rl, seed)
                self._conductance = g if (wv > 0 or rh > 0 or rl > 0) else None
            else:
                g = self._unblocks(value, "G", np.float32)[:, 0]
                g_max = _assigned_conductance_max(HGS)
                if (g < 0).any() or (g > g_max).any():
                    raise ValueError("argument 'G': conductances must be in [0, %g] S (HGS * (1 + NOISE_SIGMA_MAX * "
                                     "%g), the largest write variation can program; larger cells overflow the "
                                     "crossbar sums), got values in [%g, %g]"
                                     % (g_max, _core.NORMAL_ABS_MAX, g.min(), g.max()))
                self._conductance = None if np.array_equal(g, self._ideal_conductance()) else np.ascontiguousarray(g)
            self._version = next(_versions)

    # ---- transpose ----

    def t(self):
        """The transposed data as a new SlicedData: paral_size and quant_gran swapped
        ('per-row' <-> 'per-col'), every stored array transposed in its last two axes.

        Equal to slicing the transposed data with the swapped sizes (the granules
        map onto each other), so no quantization is redone. For weights the same
        programmed cells are transposed (conductance included), as MemIntelli's t().
        """
        with _state_lock:  # read a consistent state even if another thread re-slices self meanwhile
            snapshot = SlicedData.__new__(SlicedData)
            snapshot.__dict__.update(self.__dict__)
        self = snapshot
        new = SlicedData.__new__(SlicedData)
        new.__dict__.update(self.__dict__)
        qg = self.quant_gran
        new.__dict__["paral_size"] = self.paral_size[::-1]  # the transposed data's geometry: no data dropped
        new.__dict__["quant_gran"] = {"per-row": "per-col", "per-col": "per-row"}.get(qg, qg) \
            if isinstance(qg, str) else tuple(qg)[::-1]
        if self._codes is None:
            return new

        def tr(a):
            return None if a is None else np.ascontiguousarray(np.swapaxes(a, -1, -2))

        new._codes, new._gran_max, new._gran_scale = tr(self._codes), tr(self._gran_max), tr(self._gran_scale)
        new._gran_exp, new._dequant = tr(self._gran_exp), tr(self._dequant)
        new._levels, new._conductance = tr(self._levels), tr(self._conductance)
        new._granule = self._granule[::-1]
        new.shape = type(self.shape)(tuple(self.shape[:-2]) + (self.shape[-1], self.shape[-2]))
        new._version = next(_versions)
        return new
