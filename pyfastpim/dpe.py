"""The dot-product engine: MemIntelli's DPETensor on pyfastpim's fused C kernel.

``DPETensor`` keeps MemIntelli's parameters, defaults and validation errors;
``engine(x, w)`` / ``engine.MapReduceDot(x, w)`` multiply two
:class:`pyfastpim.SlicedData` (input, programmed weights) through the simulated
crossbar (docs/semantics.md section 7) in one C call that reads slice codes and conductance
levels and writes the final product, with device noise drawn inside the
kernel from a counter-based generator (Philox4x32-10): key = ``engine.seed``,
counter = (element, ``engine.calls``). The same seed and call number give the
same output for any thread count.

Across processes: an engine created in a process draws the noise of its seed
there too (a forked or spawned child is a new process; an engine it creates with
seed s gives what one created anywhere with seed s gives). An engine *inherited*
by a child (through fork, or unpickled: spawn workers) keeps its programmed
weights (same seed) but keys its per-call noise with the seed mixed with the
child's noise stream (:func:`pyfastpim.noise_stream`), so DataLoader workers
using the same layer draw distinct noise. ``engine.reset(seed)`` makes an
engine the process's own again.

Call numbers are reserved atomically (:class:`pyfastpim._core.CallCounter`, one
fetch-and-add) before any kernel releases the GIL: concurrent calls from several
threads always draw distinct noise, and N concurrent calls give the same set of
outputs as N serial calls. The counter is 64-bit; the noise counter takes the call
number modulo 2**32 (spec section 7's Philox counter word), so every 2**32
consecutive calls draw distinct noise and call ``c + 2**32`` repeats the noise of
call ``c``: a RuntimeWarning says so when the counter crosses a multiple of 2**32.
"""
import contextlib
import copy
import math
import numbers
import warnings
import weakref

import numpy as np

from . import _core
from ._torch_check import is_torch as _is_torch
from .sliced import _is_pair_sequence, _pair_items, _pair_snapshot, _rule_number

__all__ = ["DPETensor", "dpe_matmul", "DEFAULT_SEED"]

#: Seed used when none is given: weight programming (write variation, stuck-at
#: faults) and read noise are reproducible by default, as in MemIntelli.
DEFAULT_SEED = _core.DEFAULT_SEED


def _torch():
    try:
        import torch
        return torch
    except ImportError:  # pragma: no cover - torch is a Debian dependency here
        return None


#: Largest read-noise sigma: the log-normal factor exp(sigma * z) (|z| <= 5.9) overflows float32
#: from sigma ~15; up to 5 it stays below 7e12 and every sum finite. Larger values raise ValueError.
READ_VARIATION_MAX = _core.READ_VARIATION_MAX
#: Largest relative (linear) noise sigma, write_variation and vnoise; larger values raise ValueError.
NOISE_SIGMA_MAX = _core.NOISE_SIGMA_MAX


def _sigma(value, name, read=False):
    """A noise sigma as the core reads it (csrc/core/contract.c, pf_validate_sigma, through
    _core.check_sigma): a real number, finite, in [0, READ_VARIATION_MAX] (``read``) or
    [0, NOISE_SIGMA_MAX]; TypeError / ValueError naming ``name``."""
    return _core.check_sigma(value, name, read)


def _number(value, name, minimum=None, integer=False):
    # the type rule of every entry point's scalars (_core.check_number, csrc/python/convert.c): a real
    # number (an int with ``integer``), not a bool, a str or a container; TypeError naming ``name``
    value = _core.check_number(value, name, integer)
    if not math.isfinite(value):
        raise ValueError("argument '%s': must be finite, got %r" % (name, value))
    if minimum is not None and value < minimum:
        raise ValueError("argument '%s': must be >= %s, got %r" % (name, minimum, value))
    return value


def _level_key(key, g_level):
    """A read_variation dict key as a level: an int by the library's type rule for ints (sliced._rule_number:
    a NumPy integer too; not a bool, a float or a str), else TypeError naming read_variation. An exception
    raised by the key's own __index__ propagates unchanged."""
    return _rule_number(key, "read_variation", lambda got: "argument 'read_variation': a dict's keys must be ints "
                     "(the levels 0..%d), got the %s key %r" % (g_level - 1, got, key))


def _read_variation_form(value, g_level):
    """read_variation in the form given, validated: a dict as {level: sigma} for levels 0..g_level-1, a
    number as one sigma (a float) that stays one sigma when g_level changes."""
    if isinstance(value, dict):
        levels = {}
        for k, v in value.items():
            level = _level_key(k, g_level)
            if level in levels:  # two keys converting to one level (an __index__ type beside an int)
                raise ValueError("argument 'read_variation': two keys give level %d, got %r" % (level, k))
            levels[level] = v
        if set(levels) != set(range(g_level)):
            raise ValueError("argument 'read_variation': a dict needs the keys 0..%d (one sigma per level), got %r"
                             % (g_level - 1, sorted(levels)))
        return {k: _sigma(v, "read_variation[%d]" % k, True) for k, v in levels.items()}
    # one sigma: the type rule of every entry point (a 0-d array too, not a bool), its refusal naming the dict
    # form too (a wrong value: ValueError)
    number = _rule_number(value, "read_variation", lambda got: "argument 'read_variation': expected a real number "
                          "(one sigma for every level; 0 for no read noise) or a dict {level: sigma} for levels "
                          "0..%d, got %s" % (g_level - 1, got), integer=False)
    return _sigma(number, "read_variation", True)


def _read_variation_dict(value, g_level):
    """read_variation as {level: sigma} for levels 0..g_level-1, each sigma validated."""
    form = _read_variation_form(value, g_level)
    return form if isinstance(form, dict) else dict.fromkeys(range(g_level), form)


def _radc_form(radc):
    """The constructor's rule for radc, applied wherever radc is read: (is_list, radc checked). A list,
    tuple or 1-D array / tensor gives one int per weight slice (the core's rule, pf_conv_resolutions);
    anything else is one int (a 0-d array or tensor too, by the type rule, as g_level's and rdac's are, and
    MemIntelli takes a 0-d tensor as one resolution); each in 2..2**24."""
    is_list = _radc_is_list(radc)
    return is_list, _core.check_radc(_resolution_list(radc) if is_list else radc)


def _radc_is_list(radc):
    return isinstance(radc, (list, tuple)) or (isinstance(radc, np.ndarray) or _is_torch(radc)) and radc.ndim != 0


def _resolution_list(radc):
    """radc given per weight slice (list, tuple, 1-D array or tensor) as Python ints; integral floats
    (a float tensor) count as ints, strings and non-integral or non-finite numbers do not."""
    if hasattr(radc, "tolist"):
        radc = radc.tolist()
    if not isinstance(radc, (list, tuple)):  # a 0-d array or tensor
        raise TypeError("argument 'radc': expected an int or a 1-D list of ints, got %r" % (radc,))
    out = []
    for v in radc:
        if isinstance(v, numbers.Real) and not isinstance(v, (bool, numbers.Integral)) and math.isfinite(v) \
                and v == int(v):
            v = int(v)
        if isinstance(v, bool) or not isinstance(v, numbers.Integral):
            raise TypeError("argument 'radc': expected ints (one resolution per weight slice), got %r" % (v,))
        out.append(int(v))
    return out


#: Slice codes of at most this many bytes are made at once by the one-call entry points.
_CHUNK_CODE_BYTES = 64 << 20


#: Crossbar sums stay below this (float32's exact integer range): (rdac-1)*(g_level-1)*rows < 2**24.
_EXACT_SUM_LIMIT = 2 ** 24
#: How the entry points' users give the crossbar height (the core's argument 'n').
_ROWS_SLICED = ("paral_size", "the weights' paral_size[0] (= the input's paral_size[1])")
_ROWS_LAYER = ("weight_paral_size", "weight_paral_size[0] (= input_paral_size[1])")


def _pair(value, name, minimum, maximum=None):
    """A geometry argument as torch's ``kernel_size`` takes it (the layers' and forward_conv2d's): an int n
    as (n, n) or a pair of ints (a sequence: a list, tuple, range, 1-D NumPy array or tensor; a 0-d one is
    an int), not a bool; each >= ``minimum`` (and <= ``maximum``, where given). TypeError naming ``name``
    for a wrong type (an array of more than one dimension too), ValueError for a wrong value: a sequence of
    another length than 2 (the rule of every pair, SlicedData's and the core's converter's too) or a value
    out of range."""
    value = _pair_items(value, name)  # a NumPy array or a tensor: 0-d an int, 1-D a pair
    sequence = _is_pair_sequence(value)
    if sequence:
        value = _pair_snapshot(value, "argument '%s': expected an int or a pair of ints, got %%d values" % name,
                               name)
    items = value if sequence else (value, value)
    words = "argument '%s': expected an int or a pair of ints, got %r" % (name, value)
    pair = tuple(_rule_number(v, name, words) for v in items)
    if min(pair) < minimum:
        raise ValueError("argument '%s': values must be >= %d, got %r" % (name, minimum, value))
    if maximum is not None and max(pair) > maximum:  # beyond, torch's int64 size arithmetic can wrap
        raise ValueError("argument '%s': must be <= %d, got %r" % (name, maximum, value))
    return pair


def _resolve_granule(rows, cols, paral, gran):
    """Spec section 2 for the unfolded conv input: the granule ``gran`` (checked by _slicing_args: a pair
    of ints or a granularity name) rounded up to whole blocks. Checked here: the crossbar height paral[1]
    (within int32) and a name's granule, known only here (rounded up within int64); a pair's was checked
    there, so is not again."""
    from .sliced import _check_sizes
    named = isinstance(gran, str)
    if named:
        gran = {"per-matrix": (rows, cols), "per-row": (1, cols), "per-col": (rows, 1)}[gran]
        gran = (max(gran[0], 1), max(gran[1], 1))
    _check_sizes(paral, gran if named else None, "input_paral_size", "input_quant_gran", 1)
    return (-(-gran[0] // paral[0]) * paral[0], -(-gran[1] // paral[1]) * paral[1])


def _slicing_args(prefix, slice_method, paral_size, quant_gran, bw_e):
    """One operand's slicing options checked as SlicedData checks them, in its order, the errors
    naming the caller's arguments (prefix 'input': input_slice, input_paral_size, input_quant_gran;
    'weight': weight_*) where SlicedData would name its own (slice_method, paral_size, quant_gran).
    paral_size must be a pair, as SlicedData's (an int is refused: TypeError). Returns (widths,
    paral_size, quant_gran), all checked: the widths as a tuple, the pair, and a pair or granularity
    name (None: paral_size), as SlicedData._checked takes them."""
    from .sliced import _bw_e, _pair as _sizes, _widths
    # an array's values as _widths reads them (its first step), read now: a tensor may be edited in place
    values = slice_method.tolist() if isinstance(slice_method, np.ndarray) or _is_torch(slice_method) else slice_method
    key = _plain_key((prefix, values, paral_size, quant_gran, bw_e))
    known = _slicing_memo.get(key) if key is not None else None
    if known is not None:
        return known
    widths = _widths(slice_method, prefix + "_slice")
    _bw_e(bw_e)
    paral = _sizes(paral_size, prefix + "_paral_size")
    checked = widths, paral, _granule_arg(prefix, paral, quant_gran)
    if key is not None:
        if len(_slicing_memo) >= _SLICING_MEMO_SIZE:
            _slicing_memo.clear()
        _slicing_memo[key] = checked
    return checked


# _slicing_args' results by _plain_key of its arguments: a layer's forward checks the same options at every
# call (about 30 us of a batch-1 product); only accepted options are kept, so a refused one raises every time
_slicing_memo = {}
_SLICING_MEMO_SIZE = 256


def _plain_key(value):
    """value as a key under which a check of it may be reused, or None: None, a str, a Python int, float or
    bool, a NumPy number (a scalar cannot change in place), or a list / tuple of them (nested); the type is
    part of the key (True == 1 == 1.0, but the checks tell them apart). Any other object (an array, a tensor,
    a user's number class) gives None: it is checked every time, as its value can change in place."""
    if value is None or type(value) in (int, float, bool, str):
        return (type(value), value)
    if isinstance(value, np.generic) and value.dtype.kind in "biuf":
        return (type(value), value.item())
    if type(value) in (list, tuple):
        items = tuple(_plain_key(v) for v in value)
        return None if None in items else (type(value), items)
    return None


def _granule_arg(prefix, paral, quant_gran, crossbar_rows=None):
    """``prefix``_quant_gran checked against the checked pair ``paral`` (``prefix``_paral_size: sizes rounded
    up to whole blocks within int64, and, where ``crossbar_rows`` is given, the crossbar height
    paral[crossbar_rows] within int32). Returns the granule: a pair or a granularity name (None: paral)."""
    from .sliced import _check_sizes, _quant_gran
    gran = paral if quant_gran is None else _quant_gran(quant_gran, prefix + "_quant_gran")
    _check_sizes(paral, gran, prefix + "_paral_size", prefix + "_quant_gran", crossbar_rows)
    return gran


def _check_crossbar_rows(input_paral_size, rows, args="argument 'input_paral_size'",
                         rows_name="w_sliced.paral_size[0]"):
    """The input's block columns input_paral_size[1] against the weights' block rows ``rows`` (docs/semantics.md
    section 7's n), the error naming the caller's arguments ``args`` and how it gives ``rows``."""
    if input_paral_size[1] != rows:
        raise ValueError("%s: paral_size mismatch, the input's block columns input_paral_size[1] (%d) must equal "
                         "the weights' block rows %s (%d), the crossbar height"
                         % (args, input_paral_size[1], rows_name, rows))


def _check_conv_weights(w_sliced, shape, kh, kw, input_paral_size):
    """forward_conv2d's checks of the sliced weights against the image ``shape`` and the kernel: sliced, their
    rows the patch size, their block rows the input's block columns (ValueError naming the arguments)."""
    if w_sliced._codes is None and w_sliced._levels is None:
        raise ValueError("argument 'w_sliced': the weights are not sliced yet (call slice_data_imp)")
    K = shape[1] * kh * kw
    if K != w_sliced.shape[0]:
        raise ValueError("argument 'x': %d channels x %dx%d kernel = %d patch values, but the weights have %d rows"
                         % (shape[1], kh, kw, K, w_sliced.shape[0]))
    _check_crossbar_rows(input_paral_size, w_sliced.paral_size[0])


@contextlib.contextmanager
def _renamed(core_name, name, *more):
    """Inside the block, a TypeError / ValueError naming argument ``core_name`` (the name a callee gives
    it) is raised naming ``name`` (the caller's argument) instead, with the same type and words. ``more``:
    further (core_name, name) pairs, flattened; one block costs less than a nested block per pair."""
    try:
        yield
    except (TypeError, ValueError) as exc:
        if type(exc) not in (TypeError, ValueError):
            raise
        text = str(exc)
        names = (core_name, name) + more
        for core, caller in zip(names[::2], names[1::2]):
            prefix = "argument '%s'" % core
            if text.startswith(prefix):
                raise type(exc)("argument '%s'%s" % (caller, text[len(prefix):])) from None
        raise


def _slice_as(sliced, engine, data, name):
    """``sliced.slice_data_imp(engine, data)``, its errors about the data naming the caller's argument
    ``name`` (the slicing core names its own parameter, 'data')."""
    with _renamed("data", name):
        sliced.slice_data_imp(engine, data)


_registered = weakref.WeakKeyDictionary()  # SlicedData -> ids of the OpenCL handles told to forget it


def _resident_key(handle, mat):
    """weights_key of programmed weights on an OpenCL handle: (id, version). The first use on a
    handle registers a finalizer releasing the device's copy when the SlicedData dies, so the
    resident-weights cache holds only weights that are still alive (training re-programs every
    step: each step's weights are released when the layer drops the previous SlicedData)."""
    seen = _registered.get(mat)
    if seen is None:
        seen = _registered[mat] = set()
    if id(handle) not in seen:
        weakref.finalize(mat, handle._weights_died, id(mat)).atexit = False  # quiet in a forked child
        seen.add(id(handle))
    return (id(mat), mat._version)


_SETTINGS = ("HGS", "LGS", "g_level", "write_variation", "vnoise", "wire_resistance", "rdac", "vread",
             "rate_stuck_HGS", "rate_stuck_LGS", "radc")


def _checked_settings(HGS, LGS, g_level, write_variation, vnoise, wire_resistance, rdac, vread, rate_stuck_HGS,
                      rate_stuck_LGS, radc):
    """DPETensor's numeric settings as its constructor checks and converts them, in its order, each error naming
    the argument: run by the constructor and, on the attributes as they are then (assigned ones too), by every
    programming check of a product (DPETensor._programming_key), so an invalid value assigned after construction
    fails there with the constructor's exception. Returns {name: converted value}."""
    out = {}
    # HGS and LGS: only the type rule here (_core.check_number); their values are validated once, by the
    # core's conductance-range rule in check_vread below (NaN, inf, HGS <= 0: HGS; LGS < 0 or >= HGS: LGS)
    out["HGS"] = _core.check_number(HGS, "HGS")
    out["LGS"] = _core.check_number(LGS, "LGS")
    out["g_level"] = _number(g_level, "g_level", integer=True)
    out["write_variation"] = _sigma(write_variation, "write_variation")
    out["vnoise"] = _sigma(vnoise, "vnoise")
    out["wire_resistance"] = _number(wire_resistance, "wire_resistance", 0)
    out["rdac"] = _core.check_rdac(rdac)  # an int in 2..2**24 (the core's rule, pf_conv_rdac)
    # vread: only the type rule here; its value (NaN, inf, <= 0, too large) is validated once, by the core's
    # rule in check_vread below, after the conductance range it depends on
    out["vread"] = _core.check_number(vread, "vread")
    out["rate_stuck_HGS"] = _number(rate_stuck_HGS, "rate_stuck_HGS", 0)
    out["rate_stuck_LGS"] = _number(rate_stuck_LGS, "rate_stuck_LGS", 0)
    # an int, or 1 to 16 ints (one per weight slice): _radc_form's rule, applied again at each product, so
    # radc may be assigned any of these forms later (radc_is_list follows the value)
    out["radc"] = _radc_form(radc)[1]
    # the core's rules (csrc/core/contract.c), checked once by check_vread: first the conductance range
    # (check_conductance_range's: 2 <= g_level <= 256, 0 <= LGS < HGS <= 1e30, the level spacing a normal
    # float32 of at least HGS * 2**-22; ValueError naming g_level, HGS or LGS, the message of every entry
    # point), then 0 < vread <= 5.7e31 V with the ADC reference current finite in float32
    _core.check_vread(out["vread"], out["HGS"], out["LGS"], out["g_level"], out["rdac"])
    if out["wire_resistance"] > 0:  # the solver's rule for R * HGS, on one HGS cell (ValueError naming it)
        from .physics import effective_conductance
        effective_conductance(np.full((1, 1), out["HGS"]), out["wire_resistance"])
    for name in ("rate_stuck_HGS", "rate_stuck_LGS"):
        if out[name] > 1:
            raise ValueError("argument '%s': must be in [0, 1], got %r" % (name, out[name]))
    if out["rate_stuck_HGS"] + out["rate_stuck_LGS"] > 1:
        raise ValueError("argument 'rate_stuck_LGS': rate_stuck_HGS + rate_stuck_LGS exceeds 1 (%g + %g)"
                         % (out["rate_stuck_HGS"], out["rate_stuck_LGS"]))
    return out


class _SettingValueError(ValueError, AttributeError):
    """A computed engine attribute read while the settings it follows are invalid (see _derived)."""


class _SettingTypeError(TypeError, AttributeError):
    """As _SettingValueError, for a setting of a wrong type."""


def _derived(fget):
    """A property computed from other settings (Q_G from HGS, LGS and g_level, ...), which may be invalid
    together while assigned one at a time (HGS set below LGS before LGS is lowered). Read then, it raises
    the ValueError / TypeError of the settings' check, naming them, as an AttributeError too: the attribute
    has no value with these settings, so hasattr, getattr(engine, name, default), inspect.getmembers,
    debuggers and reprs take it as absent instead of failing, and a product checks the settings itself."""
    def get(self):
        try:
            return fget(self)
        except AttributeError:
            raise
        except ValueError as exc:
            raise _SettingValueError(*exc.args) from None
        except TypeError as exc:
            raise _SettingTypeError(*exc.args) from None
    get.__name__, get.__qualname__, get.__doc__ = fget.__name__, fget.__qualname__, fget.__doc__
    return property(get)


class DPETensor:
    """Dot-product engine simulating bit-sliced matrix products on memristor crossbars.

    Parameters (MemIntelli's, with its defaults):
        HGS, LGS: high / low conductance state in siemens: 0 <= LGS < HGS <= 1e30,
            with the level spacing (HGS - LGS) / (g_level - 1) a normal float32 (>= 1.2e-38) of at
            least HGS * 2**-22 (the levels distinct in float32); else ValueError naming HGS (NaN, inf,
            HGS <= 0 or above 1e30) or LGS (NaN, inf, LGS < 0, LGS >= HGS); TypeError for a non-number.
        g_level: number of conductance levels (>= 2).
        write_variation: sigma of the multiplicative Gaussian write noise, fixed per programming.
        read_variation: sigma of the log-normal read noise, a float for all levels or a dict
            {level: sigma} with a key for every level 0 .. g_level-1 (int keys: a bool or float key is a
            TypeError); fresh every call. Validated:
            0 <= sigma <= READ_VARIATION_MAX (5.0), else ValueError (exp(sigma * z) would overflow).
        vnoise: sigma of the relative Gaussian DAC voltage noise, fresh every call (0 .. 1e6; also
            write_variation: larger values raise ValueError rather than give inf/NaN outputs).
        wire_resistance: ohms of one wire segment between adjacent cells (rows and columns). 0: ideal
            wires; > 0: IR drop, each crossbar block's effective conductances are solved once when the
            weights are programmed (docs/physics.md). wire_resistance * HGS (and * the largest
            programmed cell) must be at most pyfastpim.physics.IRDROP_MAX_GR (1e6), else ValueError.
        rdac: DAC resolution (>= 2 levels).
        radc: ADC resolution, an int or one per weight slice (given most significant slice first; at most
            16, the kernels' limit), each in 2..2**24 (rdac too).
        vread: read voltage, in (0, 5.7e31] volts, and (HGS - LGS) * vread * n (the ADC reference
            current) finite in float32 for the tallest crossbar n that rdac and g_level allow; else
            ValueError naming vread (checked after HGS, LGS and g_level, which the bound depends on);
            TypeError for a non-number. It cancels out of every result (docs/semantics.md section 7).
        rate_stuck_HGS, rate_stuck_LGS: probabilities of cells stuck at HGS / LGS.
        device: None, "cpu[:N]" or torch.device("cpu"[, N]) (the CPU kernels), "opencl" (first GPU, else first
            OpenCL device), "cuda[:N]" / torch.device("cuda") (the best OpenCL GPU, else the CPU) or
            "opencl:P:D" (see pyfastpim.devices()): the same results on any device. On OpenCL, MVMs
            (MapReduceDot, forward_linear) and convolutions (forward_conv2d) run on the device.
        seed: engine seed (int in [0, 2**64)); None uses ``DEFAULT_SEED``. It keys the read and
            voltage noise (with the call counter) and weight programming.

    :meth:`drift` ages the programmed conductances (G(t) = G(t0) (t/t0)^-nu, per-cell nu).

    Attributes computed from others (``Q_G``, ``conductance_levels``, ``read_variation``,
    ``program_seed``, ``noise_free``, ``radc_is_list``) read while the settings they follow are
    invalid together (assigned one at a time) raise the settings' ValueError / TypeError as an
    AttributeError too: hasattr, inspect.getmembers and debuggers take them as absent.

    Attributes ``seed`` and ``calls`` (the call counter, part of every noise counter) are
    inspectable; :meth:`reset` rewinds the counter (and sets a new seed when given one).
    """

    def __init__(self, HGS=1e-5, LGS=1e-7, g_level=16, write_variation=0.02, read_variation=0.02, vnoise=0.05,
                 wire_resistance=0, rdac=2 ** 4, radc=2 ** 8, vread=0.2, rate_stuck_HGS=0.001, rate_stuck_LGS=0.0,
                 device=None, seed=None):
        self.__dict__.update(_checked_settings(HGS, LGS, g_level, write_variation, vnoise, wire_resistance, rdac,
                                               vread, rate_stuck_HGS, rate_stuck_LGS, radc))
        self.read_variation = read_variation
        self.device = device  # the property: the handle it names (ValueError / RuntimeError naming the device)
        self._drift = None  # pyfastpim.physics.DriftSettings once drift() is called
        self.seed = _core.check_seed(seed)  # the one seed converter of every entry point (csrc/python/convert.c)
        self.reset()

    # -- copying and pickling ----------------------------------------------------
    # An OpenCL handle cannot be pickled: the state names the device ("opencl:P:D") and
    # unpickling re-opens it (the default OpenCL device if that one is gone). copy.deepcopy
    # goes through the same path and shares the process's cached handle.
    def __getstate__(self):
        state = self.__dict__.copy()
        state.pop("_checked_memo", None)  # checked again by the copy's first product
        state.pop("_radc_read", None)  # pyfastpim.memintelli's radc tensor read as items
        if self._cl is not None:
            info = self._cl.info
            state["_cl"] = "opencl:%d:%d" % (info["platform"], info["device"])
        return state

    def __setstate__(self, state):
        spec = state.get("_cl")
        # pickled before device, Q_G and conductance_levels followed the attributes they are made from
        state = {k: v for k, v in state.items() if k not in ("Q_G", "conductance_levels")}
        if "device" in state:
            state["_device"] = state.pop("device")
        if "read_variation" in state:  # pickled before read_variation became a property
            state = dict(state, _read_variation=state.pop("read_variation"), _read_sigma_cache=None)
            state.pop("_read_sigma", None)
        state = dict(state, _read_variation_view=state.get("_read_variation_view"))  # pickled before it existed
        state.pop("radc_is_list", None)  # pickled before radc_is_list followed radc
        self.__dict__.update(state)
        if isinstance(spec, str):
            from .devices import _inherited_handle, resolve_device
            self._cl = _inherited_handle(spec)  # in a forked child: the parent's handle (refuses at first use)
            if self._cl is not None:
                return
            try:
                self._cl = resolve_device(spec)
            except (RuntimeError, ValueError):
                if self.device == spec:  # the user named this device: it must exist
                    raise
                self._cl = resolve_device("opencl")

    # -- attributes made from others: computed from their current values, so assigning HGS, LGS,
    # g_level or device after construction acts as giving it to the constructor
    @property
    def device(self):
        """The device the products run on: 'cpu', or the OpenCL device string as given ('opencl' for a
        handle or a torch.device); assigning one opens it, as the constructor's ``device`` does."""
        return self._device

    @device.setter
    def device(self, value):
        from .devices import _engine_device
        self._cl, self._device = _engine_device(value)  # _cl None: CPU; ValueError / RuntimeError naming it

    @_derived
    def Q_G(self):
        """The level spacing (HGS - LGS) / (g_level - 1) of the current HGS, LGS and g_level (checked as
        the constructor checks them: ValueError / TypeError naming the argument)."""
        _core.check_conductance_range(self.HGS, self.LGS, self.g_level)
        return (self.HGS - self.LGS) / (self.g_level - 1)

    @_derived
    def conductance_levels(self):
        """The g_level conductances LGS + i * Q_G (float64) of the current HGS, LGS and g_level, made on
        each access (not read back by the products: editing the array changes nothing)."""
        q_g = self.Q_G
        return np.array([self.LGS + i * q_g for i in range(int(self.g_level))])

    # copy.copy and copy.deepcopy give an engine whose noise matches the original's (the same seed, call number
    # and key: a counter copied in this process is no more inherited than the original; pickling's reduce
    # marks it inherited, for the unpickling process) and is independent of it: its own counter, and its own
    # read_variation dict (read at every product), so calls or edits on one leave the other as it was
    def _own_noise_state(self):
        counter = self._counter
        self._counter = _core.CallCounter(counter.value, counter.inherited)
        if isinstance(self._read_variation, dict):
            self._read_variation = dict(self._read_variation)
        view = self._read_variation_view
        if view is not None:
            self._read_variation_view = (view[0], dict(view[1]))

    def __copy__(self):
        new = type(self).__new__(type(self))
        new.__dict__.update(self.__dict__)
        new._own_noise_state()
        return new

    def __deepcopy__(self, memo):
        new = type(self).__new__(type(self))
        memo[id(self)] = new
        new.__setstate__(copy.deepcopy(self.__getstate__(), memo))
        new._counter = self._counter
        new._own_noise_state()
        return new

    # -- noise state ---------------------------------------------------------
    def reset(self, seed=None):
        """Rewind the call counter to 0, so the products since the engine was made (or last reset) replay;
        ``seed`` (an int in [0, 2**64)) also replaces the engine seed, None keeps it (pass
        ``pyfastpim.DEFAULT_SEED`` for the default one)."""
        if seed is not None:
            self.seed = _core.check_seed(seed)
        self._counter = _core.CallCounter(0)

    @property
    def calls(self):
        """Number of calls made (the next call number); settable, an int in [0, 2**64)."""
        return self._counter.value

    @calls.setter
    def calls(self, value):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise TypeError("argument 'calls': expected an int, got %r" % (value,))
        self._counter.value = int(value)

    def _reserve_call(self):
        """Reserve this call's number (atomic: never shared by concurrent calls); the kernels' noise
        counter word is its value modulo 2**32."""
        c = self._counter.reserve()
        if c and not c & 0xFFFFFFFF:
            warnings.warn("DPETensor: the call counter reached %d, a multiple of 2**32: the noise counter wraps "
                          "and this call repeats the noise of call %d (reset(seed=...) with a new seed to avoid it)"
                          % (c, c - 2 ** 32), RuntimeWarning, stacklevel=3)
        return c & 0xFFFFFFFF

    def _noise_key(self):
        """Philox key of the per-call noise (read, DAC): the seed, or, for an engine inherited by a
        forked or spawned worker that has a noise stream (:func:`pyfastpim.noise_stream`), a key
        mixed from the seed and that stream, so sibling workers draw distinct noise."""
        return self._counter.noise_key(_core.check_seed(self.seed))

    @_derived
    def program_seed(self):
        """Seed of weight programming (write variation, stuck-at faults): the engine seed, as the constructor
        reads it (an assigned None is ``DEFAULT_SEED``; an invalid one its TypeError / ValueError)."""
        return _core.check_seed(self.seed)

    @_derived
    def noise_free(self):
        """True when every noise source is off: results are then exact (docs/semantics.md section 7.1)."""
        return (self.write_variation == 0 and self.vnoise == 0 and self.rate_stuck_HGS == 0
                and self.rate_stuck_LGS == 0 and self._read_sigmas() is None)

    @_derived
    def read_variation(self):
        """Read-noise sigma per conductance level, ``{level: sigma}`` for levels ``0..g_level-1``.

        Assign a number (one sigma for every level) or such a dict. As in MemIntelli the dict is
        read at every product, so assigning it, or editing it in place, changes the next product's
        read noise; each sigma must be in ``[0, READ_VARIATION_MAX]``. A number stays one sigma:
        changing ``g_level`` afterwards gives every new level that sigma (a dict needs the new
        levels' keys), until the dict read here is edited in place, which makes it the dict given."""
        rv = self._read_variation_given()
        if isinstance(rv, dict):
            return rv
        view, g_level = self._read_variation_view, _number(self.g_level, "g_level", integer=True)  # maybe assigned
        if view is None or view[0] != g_level:
            view = self._read_variation_view = (g_level, dict.fromkeys(range(g_level), rv))
        return view[1]

    @read_variation.setter
    def read_variation(self, value):
        self._read_variation = _read_variation_form(value, self.g_level)
        self._read_variation_view = self._read_sigma_cache = None

    def _read_variation_given(self):
        """read_variation in the user's form: one sigma, or a dict (the one assigned, or the per-level view
        of one sigma that the user edited in place, which from then on is the dict given)."""
        rv, view = self._read_variation, self._read_variation_view
        if not isinstance(rv, dict) and view is not None and view[1] != dict.fromkeys(range(view[0]), rv):
            rv, self._read_variation, self._read_variation_view = view[1], view[1], None
        return rv

    def _read_sigmas(self):
        """The per-level sigmas (float32, g_level) of read_variation as it is now; None when all are 0."""
        rv, cached = self._read_variation_given(), self._read_sigma_cache
        given = dict(rv) if isinstance(rv, dict) else rv
        if cached is None or cached[0] != given or cached[2] != self.g_level:  # assigned, edited, re-levelled
            checked = _read_variation_dict(rv, self.g_level)
            sigma = np.array([checked[i] for i in range(self.g_level)], dtype=np.float32)
            cached = self._read_sigma_cache = (given, sigma if sigma.any() else None, self.g_level)
        return cached[1]

    def drift(self, t_seconds, t0=1.0, nu_mean=0.05, nu_std=0.01, compensation=False):
        """Age every programmed weight this engine multiplies to ``t_seconds`` after programming.

        ``G(t) = G(t0) * (t / t0)^(-nu)`` per cell, ``nu = max(0, nu_mean + nu_std * z)`` with z
        the cell's normal from the engine's Philox generator (key = engine seed): the same seed
        gives the same cells for any thread count. ``compensation=True`` applies global drift
        compensation: one digital output scale per layer, the ratio of the layer's noise-free
        readouts of an all-ones calibration input at t0 and at t (as aihwkit's
        GlobalDriftCompensation). ``t_seconds=None`` removes drift. Applied once per weights
        and setting (not per call), after write variation and stuck-at faults, before IR drop.
        Returns the engine.
        """
        if t_seconds is None:
            self._drift = None
            return self
        from .physics import DriftSettings
        self._drift = DriftSettings(t_seconds, t0, nu_mean, nu_std, compensation)
        return self

    def _weights_operand(self, mat):
        """(conductance or None, weight scales) the kernel reads: the effective conductances with
        IR drop / drift (computed once per programming, pyfastpim.physics), else the programmed ones."""
        from .physics import program_physics
        geff, scale = program_physics(self, mat)
        return (mat._conductance if geff is None else geff), scale

    def _prepare_weights(self, mat):
        """Programs ``mat`` for this engine and solves its IR drop / drift, the solve (seconds for a
        large layer) outside ``_state_lock``: other threads' products, and a fork meanwhile, do not
        wait for it. The product then finds the result cached (or, re-programmed meanwhile by
        another thread, solves again under the lock)."""
        from .physics import commit_physics, physics_work, solve_physics
        from .sliced import _state_lock
        with _state_lock:
            if mat._codes is None:  # its geometry assigned meanwhile (another thread): the product's check refuses it
                return
            self._ensure_programmed(mat)
            work = physics_work(self, mat)
        if work is not None:
            result = solve_physics(work)
            with _state_lock:
                commit_physics(mat, work, result)

    def _check_exact_sums(self, rows, names):
        """ValueError naming the user's arguments when crossbar sums could leave float32's exact integer
        range, (rdac-1)*(g_level-1)*rows >= 2**24 (the core checks it too, naming its argument 'n').
        ``names``: (argument, how its value is the crossbar height), e.g. _ROWS_LAYER."""
        key = self._programming_key()  # the settings as the constructor checks them (assigned ones too)
        per_row = (self.rdac - 1) * (key[0] - 1)
        if per_row * rows < _EXACT_SUM_LIMIT:
            return
        most = (_EXACT_SUM_LIMIT - 1) // per_row
        fix = "use at most %d crossbar rows, or a smaller rdac or g_level" % most if most else \
            "rdac and g_level alone reach it: use a smaller rdac or g_level"
        raise ValueError("arguments '%s', 'rdac', 'g_level': (rdac-1)*(g_level-1)*rows = (%d-1)*(%d-1)*%d = %d, with "
                         "rows the crossbar height %s, must be below 2**24 = %d for exact float32 crossbar sums; %s"
                         % (names[0], self.rdac, self.g_level, rows, per_row * rows, names[1], _EXACT_SUM_LIMIT, fix))

    def _radc_msb_first(self):
        """radc as the constructor takes it: an int, or one per weight slice, most significant first
        (pyfastpim.memintelli's engine holds MemIntelli's reversed tensor instead)."""
        return self.radc

    @_derived
    def radc_is_list(self):
        """True when radc gives one resolution per weight slice (_radc_form's rule, on radc as it is now)."""
        return _radc_is_list(self.radc)

    def _radc_lsb_first(self, n_slices):
        is_list, radc = _radc_form(self._radc_msb_first())  # radc may have been assigned since: checked again
        if is_list:
            if len(radc) != n_slices:
                raise ValueError(f'Length of radc array ({len(radc)}) must match number of weight slices '
                                 f'({n_slices})')
            return list(reversed(radc))
        return [radc] * n_slices

    def __repr__(self):
        from ._display import engine_repr
        return engine_repr(self)  # read_variation shown compactly (one sigma, or its range over the levels)

    def _repr_html_(self):
        from ._display import engine_html
        return engine_html(self)

    # -- products --------------------------------------------------------------
    def __call__(self, x, mat):
        return self.MapReduceDot(x, mat)

    def MapReduceDot(self, x, mat, out=None):
        """x @ mat through the crossbar: x a sliced input (R, K) or (N, R, K), mat sliced weights (K, P).

        Returns float32 (R, P) or (N, R, P): a torch tensor when x's data came in as torch, else
        NumPy. ``out`` (optional) is a writable float32 array of shape (N, R, P) written in place.
        """
        return self._map_reduce_dot(x, mat, out, _ROWS_SLICED)

    def _map_reduce_dot(self, x, mat, out, rows):
        """MapReduceDot; ``rows``: _check_exact_sums's names, None when the caller checked the sums."""
        self._check_pair(x, mat, rows)
        result = self._run(x, mat, out, self._reserve_call(), 0)
        if len(x.shape) == 2:
            result = np.asarray(result)[0]
            return _torch().from_numpy(result) if x._is_torch else result
        return result.to_torch() if x._is_torch else np.asarray(result)

    def _check_pair(self, x, mat, rows=_ROWS_SLICED):
        from .sliced import SlicedData
        if not isinstance(x, SlicedData) or not isinstance(mat, SlicedData):
            raise TypeError("MapReduceDot takes two SlicedData (input, weights), got %s and %s"
                            % (type(x).__name__, type(mat).__name__))
        if x._codes is None:
            raise ValueError("argument 'x': the input is not sliced yet (call slice_data_imp)")
        self._check_operands(x.paral_size, x.bw_e, x.shape, mat, rows)

    def _check_operands(self, x_paral, x_bw_e, shape, mat, rows=_ROWS_SLICED):
        """The checks of an input sliced in blocks ``x_paral`` with ``x_bw_e`` (its SlicedData's, or
        forward_linear's checked arguments) with data of ``shape`` against the weights mat, then mat
        programmed for this engine; no data is read. ``rows``: the names of _check_exact_sums, None when
        the caller checked the sums (naming its own arguments)."""
        if mat._codes is None and mat._levels is None:
            raise ValueError("argument 'mat': the weights are not sliced yet (call slice_data_imp)")
        if not mat.is_weight:
            raise ValueError("argument 'mat': expected weights (SlicedData(..., is_weight=True))")
        if shape[-1] != mat.shape[-2]:
            raise ValueError("The input data mismatches the shape of weight data: input %s has %d columns, weights "
                             "%s have %d rows (x @ w needs them equal)"
                             % (tuple(shape), shape[-1], tuple(mat.shape), mat.shape[-2]))
        if x_paral[1] != mat.paral_size[0]:
            raise ValueError("paral_size mismatch: the input's block columns (%d) must equal the weights' block rows "
                             "(%d), the crossbar height" % (x_paral[1], mat.paral_size[0]))
        if rows is not None:
            self._check_exact_sums(mat.paral_size[0], rows)
        if bool(x_bw_e) != bool(mat.bw_e):  # bw_e 0 is INT, as None (docs/semantics.md section 4)
            raise ValueError("input and weights must both be INT (bw_e=None) or both BFP")
        self._radc_lsb_first(len(mat))
        if max(2 ** w - 1 for w in mat._widths) > self.g_level - 1:
            raise ValueError('The weight data is out of the range!')
        self._ensure_programmed(mat)

    def _run(self, x, mat, out, call, item0):
        """One kernel call on checked operands (x's batch items start at item0 of the logical batch)."""
        from .sliced import _state_lock, packed_weights
        self._prepare_weights(mat)
        with _state_lock:  # one consistent programming of mat, even if another thread re-programs it
            if x._codes is None or mat._codes is None or x.paral_size[1] != mat.paral_size[0] \
                    or x.shape[-1] != mat.shape[-2]:  # a geometry assigned (or data re-sliced) since the check
                self._check_pair(x, mat, None)  # raises the check's own error for what changed
            self._ensure_programmed(mat)
            w_conductance, w_scale = self._weights_operand(mat)  # IR drop / drift (pyfastpim.physics)
            args = (x._codes, x._gran_scale, x._granule, x._widths,
                    mat._levels, w_conductance, w_scale, mat._granule, mat._widths,
                    x.paral_size[1], self.rdac, self.g_level, self._radc_lsb_first(len(mat)), self.HGS, self.LGS,
                    self._read_sigmas(), self.vnoise, self._noise_key(), call, out,
                    item0)
            key = _resident_key(self._cl, mat) if self._cl is not None else None
            if self._cl is None:  # the weights packed once per programming (pyfastpim.sliced.packed_weights)
                packed = packed_weights(mat, w_conductance, w_scale, *args[9:16])
        if self._cl is None:
            return _core.dpe_mvm_packed(packed, *args)
        from .devices import cl_dpe_mvm  # weights stay resident while (object, version) is unchanged
        return cl_dpe_mvm(self._cl, *args, weights_key=key)

    def _sliced_product(self, x, w_sliced, input_slice, checked, bw_e, return_dequant):
        """Slice x and multiply, a chunk of batch items at a time when the slice codes of the whole
        batch would be large: peak memory then stays at the output plus one chunk, and the chunks
        draw exactly the noise of one unchunked call (noise indices carry the batch offset). The
        caller checked the arguments (_check_linear_args or _matmul_args, naming them; ``checked``: the
        input's (widths, paral_size, quant_gran) so checked) and made x an operand that slices
        (pyfastpim.sliced._operand)."""
        from .sliced import SlicedData
        shape = tuple(x.shape)
        widths, paral, gran = checked

        def sliced(data):
            xs = SlicedData._checked(input_slice, widths, bw_e, False, paral, gran, inference=not return_dequant)
            _slice_as(xs, self, data, "x")
            return xs
        per_item = int(np.prod(shape[1:], dtype=np.int64)) * len(widths) if len(shape) == 3 else 0
        chunk = max(1, _CHUNK_CODE_BYTES // per_item) if per_item else 0
        if len(shape) != 3 or not per_item or chunk >= shape[0]:
            xs = sliced(x)
            out = self._map_reduce_dot(xs, w_sliced, None, None)
            dq = None
            if return_dequant:
                dq = xs._dequant if len(xs.shape) == 3 else xs._dequant[0]
                dq = _torch().from_numpy(dq) if xs._is_torch else dq
            return out, dq
        out = np.empty((shape[0], shape[1], w_sliced.shape[1]), np.float32)
        dq = np.empty(shape, np.float32) if return_dequant else None
        call = None
        for s0 in range(0, shape[0], chunk):
            xs = sliced(x[s0:s0 + chunk])
            self._check_pair(xs, w_sliced, None)
            if call is None:  # one number for the whole logical call, reserved before the first kernel
                call = self._reserve_call()
            self._run(xs, w_sliced, out[s0:s0 + chunk], call, s0)
            if dq is not None:
                dq[s0:s0 + chunk] = xs._dequant
        if _is_torch(x):
            torch = _torch()
            return torch.from_numpy(out), (torch.from_numpy(dq) if dq is not None else None)
        return out, dq

    # -- fused layer entry points (used by pyfastpim.nn) -----------------------
    def forward_linear(self, x, w_sliced, input_slice, input_paral_size=(1, 32), input_quant_gran=(1, 32), bw_e=None,
                       return_dequant=False):
        """x (N, K) or (B, N, K) @ programmed weights ``w_sliced`` (K, P), without bias.

        Returns ``(out, xq)``: out shaped like x with K replaced by P (torch when x is torch);
        xq, the dequantized input (for straight-through gradients), only when ``return_dequant``.
        Large batches are sliced and multiplied a chunk at a time (see ``_sliced_product``).
        """
        return_dequant = _core.check_flag(return_dequant, "return_dequant")
        checked = self._check_linear_args(w_sliced, input_slice, input_paral_size, input_quant_gran, bw_e)
        return self._linear(x, w_sliced, input_slice, checked, bw_e, return_dequant)

    def _linear(self, x, w_sliced, input_slice, checked, bw_e, return_dequant):
        """forward_linear once its arguments other than x are checked, naming the caller's (forward_linear:
        _check_linear_args; dpe_matmul: _matmul_args, before slicing its own weights w_sliced): ``checked``
        the input's (widths, paral_size, quant_gran) as _slicing_args returns them."""
        from .sliced import _operand
        x = _operand(x, "x")  # an exporter without .shape or slicing: a NumPy view
        shape = tuple(x.shape)
        if len(shape) in (2, 3) and 0 in shape:
            return self._empty_linear(x, shape, w_sliced, checked[1], bw_e, return_dequant)
        return self._sliced_product(x, w_sliced, input_slice, checked, bw_e, return_dequant)

    def _check_linear_args(self, w_sliced, input_slice, input_paral_size, input_quant_gran, bw_e):
        """forward_linear's checks of its arguments other than x, the errors naming them (w_sliced,
        input_slice, input_paral_size, input_quant_gran, bw_e); empty and non-empty batches alike.
        Returns the input's (widths, paral_size, quant_gran) checked (_slicing_args)."""
        from .sliced import SlicedData
        if not isinstance(w_sliced, SlicedData):
            raise TypeError("argument 'w_sliced': expected programmed weights (SlicedData(..., is_weight=True)), "
                            "got %s" % type(w_sliced).__name__)
        if w_sliced._codes is None and w_sliced._levels is None:
            raise ValueError("argument 'w_sliced': the weights are not sliced yet (call slice_data_imp)")
        if not w_sliced.is_weight:
            raise ValueError("argument 'w_sliced': expected weights (SlicedData(..., is_weight=True))")
        self._check_exact_sums(w_sliced.paral_size[0], _ROWS_LAYER)
        checked = _slicing_args("input", input_slice, input_paral_size, input_quant_gran, bw_e)
        _check_crossbar_rows(checked[1], w_sliced.paral_size[0])
        return checked

    def _empty_linear(self, x, shape, w_sliced, paral, bw_e, return_dequant):
        """forward_linear of an empty batch: empty results (as torch's layers give) on every device,
        after the checks of a non-empty batch, in the same order (no data to slice): forward_linear's
        arguments (_check_linear_args; ``paral`` the checked input_paral_size), then the operands."""
        self._check_operands(paral, bw_e, shape, w_sliced, None)
        out = np.zeros(shape[:-1] + (w_sliced.shape[1],), np.float32)
        dq = np.zeros(shape, np.float32) if return_dequant else None
        self._reserve_call()
        if _is_torch(x):
            torch = _torch()
            return torch.from_numpy(out), (torch.from_numpy(dq) if dq is not None else None)
        return out, dq

    def forward_conv2d(self, x, w_sliced, kernel_size, stride=1, padding=0, dilation=1, input_slice=(1, 1, 2, 2),
                       input_paral_size=(1, 32), input_quant_gran=(1, 32), bw_e=None, return_dequant=False):
        """2-D convolution of x (N, C_in, H, W) through the crossbar, without bias.

        ``w_sliced`` holds ``W.reshape(C_out, -1).T`` (C_in*kh*kw, C_out) programmed. The input is
        read as its unfolded patch matrix (N, H_out*W_out, C_in*kh*kw) in torch's unfold order and
        quantized, sliced and converted by the DACs inside the kernel (implicit im2col): the unfolded
        matrix is never stored. Returns ``(out (N, C_out, H_out, W_out), xq)``, xq the dequantized
        unfolded input only when ``return_dequant`` (training).
        """
        from .sliced import SlicedData
        return_dequant = _core.check_flag(return_dequant, "return_dequant")
        if not isinstance(w_sliced, SlicedData) or not w_sliced.is_weight or (
                w_sliced._levels is None and w_sliced._codes is None):  # sliced ones are programmed below
            raise TypeError("argument 'w_sliced': expected programmed weights (SlicedData(..., is_weight=True))")
        x_widths, input_paral_size, gran = _slicing_args("input", input_slice, input_paral_size, input_quant_gran,
                                                         bw_e)
        bfp = bool(bw_e)  # bw_e 0 is INT, as for SlicedData
        kh, kw = _pair(kernel_size, "kernel_size", 1)
        sh, sw = _pair(stride, "stride", 1)
        ph, pw = _pair(padding, "padding", 0)
        dh, dw = _pair(dilation, "dilation", 1)
        from .sliced import _operand
        x = _operand(x, "x")
        shape = tuple(x.shape)
        if len(shape) != 4:
            raise ValueError("argument 'x': expected a 4-D (N, C, H, W) input, got shape %r" % (shape,))
        K = shape[1] * kh * kw
        _check_conv_weights(w_sliced, shape, kh, kw, input_paral_size)
        self._check_exact_sums(w_sliced.paral_size[0], _ROWS_LAYER)
        if bfp != bool(w_sliced.bw_e):
            raise ValueError("input and weights must both be INT (bw_e=None) or both BFP")
        radc = self._radc_lsb_first(len(w_sliced))
        self._ensure_programmed(w_sliced)
        ho = (shape[2] + 2 * ph - dh * (kh - 1) - 1) // sh + 1
        wo = (shape[3] + 2 * pw - dw * (kw - 1) - 1) // sw + 1
        granule = _resolve_granule(max(ho, 1) * max(wo, 1), K, input_paral_size, gran)
        is_torch = _is_torch(x)
        if is_torch and x.requires_grad:
            x = x.detach()
        if shape[0] == 0 and ho >= 1 and wo >= 1:
            # an empty batch: empty results on every device (no kernel launch)
            out = np.zeros((0, w_sliced.shape[1], ho, wo), np.float32)
            dq = np.zeros((0, ho * wo, K), np.float32) if return_dequant else None
            self._reserve_call()
            if is_torch:
                torch = _torch()
                return torch.from_numpy(out), (torch.from_numpy(dq) if dq is not None else None)
            return out, dq
        from .sliced import _state_lock, packed_weights
        self._prepare_weights(w_sliced)
        with _state_lock:  # one consistent programming of w_sliced (see _run)
            _check_conv_weights(w_sliced, shape, kh, kw, input_paral_size)  # a geometry assigned since the check
            self._ensure_programmed(w_sliced)
            w_conductance, w_scale = self._weights_operand(w_sliced)
            args = (x, (kh, kw), (sh, sw), (ph, pw), (dh, dw), granule, x_widths, bfp,
                    w_sliced._levels, w_conductance, w_scale, w_sliced._granule,
                    w_sliced._widths, input_paral_size[1], self.rdac, self.g_level, radc, self.HGS, self.LGS,
                    self._read_sigmas(), self.vnoise, self._noise_key(),
                    self._reserve_call(), return_dequant)
            key = _resident_key(self._cl, w_sliced) if self._cl is not None else None
            if self._cl is None:
                packed = packed_weights(w_sliced, w_conductance, w_scale, *args[13:20])
        with _renamed("input", "x"):  # the kernels name the image 'input'; here it is x (NaN, too small)
            if self._cl is None:
                out, dq = _core.dpe_conv2d_packed(packed, *args)
            else:
                from .devices import cl_dpe_conv2d  # weights stay resident while (object, version) is unchanged
                out, dq = cl_dpe_conv2d(self._cl, *args, weights_key=key)
        if is_torch:
            return out.to_torch(), (dq.to_torch() if dq is not None else None)
        return np.asarray(out), (np.asarray(dq) if dq is not None else None)

    def _programming_key(self):
        """(g_level, HGS, LGS, write_variation, rate_stuck_HGS, rate_stuck_LGS, seed) of the settings as they
        are now, checked by the constructor's rules (_checked_settings: its exceptions and messages, so a value
        assigned after construction fails at the next product as the constructor would refuse it)."""
        raw = tuple(getattr(self, n) for n in _SETTINGS[:-1]) + (self._radc_msb_first(),)
        # each product's programming checks run several times (about 10 us each, a tenth of a small product)
        memo, known = _plain_key(raw), self.__dict__.get("_checked_memo")
        if memo is not None and known is not None and known[0] == memo:
            s = known[1]
        else:
            s = _checked_settings(*raw)
            if memo is not None:
                self.__dict__["_checked_memo"] = (memo, s)
        return (int(s["g_level"]), float(s["HGS"]), float(s["LGS"]), s["write_variation"], s["rate_stuck_HGS"],
                s["rate_stuck_LGS"], _core.check_seed(self.seed))

    def _ensure_programmed(self, mat):
        """Re-programs weights that were sliced with another engine's device parameters."""
        from .sliced import _state_lock, program_weights
        key = self._programming_key()
        with _state_lock:  # check, program and commit as one step (see pyfastpim.sliced._state_lock)
            if mat._levels is not None and mat._program == key:
                return
            g_level, HGS, LGS, wv, rh, rl, seed = key
            levels, conductance = program_weights(mat._codes, mat._widths, g_level, HGS, LGS, wv, rh, rl, seed)
            mat._levels = levels
            mat._conductance = conductance if (wv > 0 or rh > 0 or rl > 0) else None
            mat._program = key
            from .sliced import _versions
            mat._version = next(_versions)


def dpe_matmul(x, w, engine, input_slice=(1, 1, 2, 2), weight_slice=(1, 1, 2, 2), input_paral_size=(1, 32),
               weight_paral_size=(32, 32), input_quant_gran=(1, 32), weight_quant_gran=(32, 32), bw_e=None):
    """One call: slice x (R, K) or (N, R, K) and w (K, P), program w on ``engine`` and multiply.

    NumPy or torch inputs (zero-copy for float32); returns NumPy float32, or torch when x is torch.
    """
    checked, ws = _matmul_args(engine, input_slice, weight_slice, input_paral_size, weight_paral_size,
                               input_quant_gran, weight_quant_gran, bw_e)
    _slice_as(ws, engine, w, "w")
    # forward_linear: an empty batch gives an empty product after the same checks (docs/semantics.md section 7)
    return engine._linear(x, ws, input_slice, checked, bw_e, False)[0]


def _matmul_args(engine, input_slice, weight_slice, input_paral_size, weight_paral_size, input_quant_gran,
                 weight_quant_gran, bw_e):
    """dpe_matmul's argument checks, each once, before any data is read, the errors naming dpe_matmul's
    arguments (not SlicedData's): (the input's (widths, paral_size, quant_gran) checked, as _slicing_args
    returns them; the weights' SlicedData, not sliced yet, made without checking its arguments again)."""
    from .sliced import SlicedData, _bw_e, _pair as _sizes, _widths
    if not isinstance(engine, DPETensor):
        raise TypeError("argument 'engine': expected a pyfastpim.DPETensor, got %s" % type(engine).__name__)
    input_paral_size = _sizes(input_paral_size, "input_paral_size")  # pairs, as SlicedData's (an int: TypeError)
    weight_paral_size = _sizes(weight_paral_size, "weight_paral_size")
    input_gran = _granule_arg("input", input_paral_size, input_quant_gran, 1)
    weight_gran = _granule_arg("weight", weight_paral_size, weight_quant_gran, 0)
    engine._check_exact_sums(weight_paral_size[0], _ROWS_LAYER)
    weight_widths = _widths(weight_slice, "weight_slice")
    _bw_e(bw_e)
    input_widths = _widths(input_slice, "input_slice")
    _check_crossbar_rows(input_paral_size, weight_paral_size[0], "arguments 'input_paral_size', 'weight_paral_size'",
                         "weight_paral_size[0]")
    ws = SlicedData._checked(weight_slice, weight_widths, bw_e, True, weight_paral_size, weight_gran, inference=True)
    return (input_widths, input_paral_size, input_gran), ws


def _check_matmul_args(engine, **options):
    """Raise what ``dpe_matmul(x, w, engine, **options)`` raises for its arguments other than the
    data (unknown names included), reading no data: for callers that skip a product."""
    import inspect
    try:
        bound = inspect.signature(dpe_matmul).bind(None, None, engine, **options)
    except TypeError as e:
        raise TypeError("dpe_matmul() %s" % e) from None
    bound.apply_defaults()
    _matmul_args(*list(bound.arguments.values())[2:])
