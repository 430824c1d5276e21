"""Device physics of programmed weights: IR drop from wire resistance and conductance drift.

See docs/physics.md for the network, boundary conditions, units and the error bound of
the read-noise approximation. Everything here runs once per programming (or per
``engine.drift`` change), never per call: the engine hands the kernel the effective
conductances ``G_eff`` instead of the programmed ones, so the ADC quantizes IR-dropped,
drifted currents at the per-call cost of programmed conductances.

- :func:`effective_conductance`: ``G_eff`` of one block (float64), ``I = V @ G_eff``.
- :func:`column_currents`: column currents of one block for row voltages ``V``.
- :func:`drift_conductance`: ``G(t) = G(t0) * (t / t0)^(-nu)`` with per-cell ``nu``.
"""
import math
import numbers

import numpy as np

from . import _core
from .dpe import _renamed
from .sliced import _nested

__all__ = ["effective_conductance", "column_currents", "drift_conductance", "DriftSettings"]

#: Largest ``wire_resistance * G`` (a cell's conductance over a wire segment's) the IR-drop solver
#: accepts: its error grows as ~1e-16 * G R relative to the block's largest G_eff (1e-10 here;
#: physical crossbars have G R ~ 1e-4 to 1e-2). Larger products raise ValueError.
IRDROP_MAX_GR = _core.IRDROP_MAX_GR
#: Most rows and columns of one crossbar block (the weights' ``paral_size``) the IR-drop solver takes.
IRDROP_MAX_BLOCK = _core.IRDROP_MAX_BLOCK
_F32_MAX = float(np.finfo(np.float32).max)


def _finite(value, name):
    """A finite real number as a float: TypeError naming ``name`` for anything else (a bool is a flag, a
    str is no quantity), ValueError for NaN / inf."""
    value = _core.check_number(value, name)  # the type rule of every entry point (csrc/python/convert.c)
    if not math.isfinite(value):
        raise ValueError("argument '%s': expected a finite number, got %r" % (name, value))
    return value


def _positive(value, name):
    if _finite(value, name) <= 0:
        raise ValueError("argument '%s': must be a finite number > 0, got %r" % (name, value))
    return float(value)


def _host(a, name, dtype):
    """``a`` as a C-contiguous NumPy array of ``dtype`` through the core's counted conversion (the one the
    product entry points use): no copy when it already is one, else one copy counted in
    :mod:`pyfastpim.memory`. Lists, tuples and numbers become a NumPy array first (built from Python
    objects, no array is copied). Errors (no buffer; bool or complex data, which hold no conductance)
    name the argument ``name``. bytes and bytearray are refused (TypeError naming ``name``: text or raw
    bytes, not numbers), the core's rule at every data entry point (csrc/python/bind_array.c)."""
    if isinstance(a, (list, tuple, numbers.Number)):
        a = _nested(a, name)
    return np.asarray(_core._view(a, name, dtype))


def effective_conductance(G, wire_resistance):
    """Effective conductance matrix (float64, same shape) of one crossbar block.

    G: cell conductances in siemens, (rows, cols); wire_resistance: ohms per wire segment
    (> 0, ``wire_resistance * max(G) <= IRDROP_MAX_GR``, else the solver's ValueError naming
    'wire_resistance'). Rows are driven at their left end, columns read by a virtual-ground ADC
    at their bottom end (docs/physics.md). Column currents are ``V @ G_eff`` for row voltages V.
    A cell below 0 S conducts nothing (an open cell), however negative: the bound counts it as 0 S.
    """
    G = _host(G, "G", "float64")
    with _renamed("g", "G"), _renamed("r_wire", "wire_resistance"):  # the solver names its own parameters
        return np.asarray(_core.irdrop_block(G, wire_resistance))


def column_currents(G, V, wire_resistance):
    """Column currents in amperes of block G (rows, cols) for row voltages V (rows,) or (k, rows).

    ``wire_resistance = 0`` is the ideal crossbar, ``V @ max(G, 0)``: the limit of the network for a
    vanishing wire resistance, a cell below 0 S open as in the network. G and V are checked alike
    for every wire resistance (a non-empty 2-D block, finite values; ValueError naming them). Currents
    beyond float64's range (volts and siemens near 1e300) raise ValueError naming 'V' rather than
    returning inf."""
    G, V = _host(G, "G", "float64"), _host(V, "V", "float64")
    if G.ndim != 2 or G.size == 0:
        raise ValueError("argument 'G': expected a non-empty 2-D (rows, cols) block, got shape %r" % (G.shape,))
    if V.ndim not in (1, 2) or V.shape[-1] != G.shape[0]:
        raise ValueError("argument 'V': expected (rows,) or (k, rows) row voltages for a block of %d rows, got "
                         "shape %r" % (G.shape[0], V.shape))
    if not np.isfinite(V).all():
        raise ValueError("argument 'V': row voltages must be finite")
    # a bool (Python's or NumPy's) is no resistance: the type rule of every entry point first
    r_wire = _core.check_number(wire_resistance, "wire_resistance")
    if not np.isfinite(G).all():  # one message at every wire resistance (the solver's added "solvable")
        raise ValueError("argument 'G': conductances must be finite")
    geff = np.maximum(G, 0.0) if r_wire == 0 else effective_conductance(G, wire_resistance)  # R = 0: no wires
    with np.errstate(over="ignore", invalid="ignore"):
        currents = V @ geff
    if not np.isfinite(currents).all():  # finite V and G whose products or sums pass float64's range
        raise ValueError("argument 'V': the column currents of these row voltages and conductances 'G' exceed "
                         "float64's range (|I| > %.4g A)" % np.finfo(np.float64).max)
    return currents


def drift_conductance(G, t_seconds, t0=1.0, nu_mean=0.05, nu_std=0.01, seed=_core.DEFAULT_SEED, return_nu=False):
    """Conductances G (float32, any shape) drifted from t0 to t_seconds with per-cell nu.

    ``nu = max(0, nu_mean + nu_std * z)``, z the engine's Philox normal of the cell (stream
    64, counter = flat C-order index, call 0), ``G(t) = G * exp(-nu * log(t / t0))``.

    Returns the drifted conductances, a float32 NumPy array shaped like G, or with
    ``return_nu=True`` the pair ``(G(t), nu)``, nu a float64 array shaped like G: the
    double each cell's G(t) was computed with, so ``G(t) == float32(float64(G) *
    exp(-nu * log(t / t0)))`` holds for the returned nu (no copies: views of the core's results).

    A cell below 0 S drifts by the same formula, keeping its sign, as the engine's programmed cells do
    (write variation is unclipped, docs/physics.md): :func:`effective_conductance` and
    :func:`column_currents` take it, drifted or not, as an open cell (0 S).
    """
    d = DriftSettings(t_seconds, t0, nu_mean, nu_std, False)  # the engine's rules and messages
    with _renamed("g", "G"):  # the core names its own parameter
        out = _core.drift(_host(G, "G", "float32"), seed, d.t, d.t0, d.nu_mean, d.nu_std, return_nu)
    return tuple(np.asarray(a) for a in out) if return_nu else np.asarray(out)


class DriftSettings:
    """Validated drift parameters of an engine (see ``DPETensor.drift``)."""

    __slots__ = ("t", "t0", "nu_mean", "nu_std", "compensation")

    def __init__(self, t_seconds, t0, nu_mean, nu_std, compensation):
        self.t0 = _positive(t0, "t0")
        self.t = _finite(t_seconds, "t_seconds")
        if self.t < self.t0:
            raise ValueError("argument 't_seconds': must be >= t0 (%g), got %r" % (self.t0, t_seconds))
        self.nu_mean, self.nu_std = _finite(nu_mean, "nu_mean"), _finite(nu_std, "nu_std")
        if self.nu_std < 0:
            raise ValueError("argument 'nu_std': must be >= 0, got %r" % (nu_std,))
        self.compensation = _core.check_flag(compensation, "compensation")  # bool or 0/1 (convert.c)

    def key(self):
        """The settings as a tuple: cached drifted conductances are valid while it is unchanged."""
        return (self.t, self.t0, self.nu_mean, self.nu_std, self.compensation)

    def __reduce__(self):
        # rebuilt through the constructor: pickles with every protocol (a __slots__ class without a
        # __getstate__ refuses protocols 0 and 1, so a drifted engine did while any other pickled)
        return (DriftSettings, self.key())

    def __repr__(self):
        return ("DriftSettings(t_seconds=%g, t0=%g, nu_mean=%g, nu_std=%g, compensation=%s)"
                % (self.t, self.t0, self.nu_mean, self.nu_std, self.compensation))


def _calibration_readout(geff, work, LGS, q_g, g_level):
    """Noise-free analog readout of the layer for an all-ones calibration input:
    sum over outputs p of |sum_k W_eff[k, p]|, W_eff the weights the conductances represent."""
    from .sliced import slice_params
    m, w, _ = slice_params(work["widths"])
    K, P = geff.shape[1:]
    qr, qc = work["granule"]
    scale = work["scale"].astype(np.float64)
    scale = np.repeat(np.repeat(scale, qr, axis=0), qc, axis=1)[:K, :P]
    weights = np.zeros((K, P))
    for j in range(geff.shape[0]):
        weights += (w[j] * m[j] / (g_level - 1)) * (geff[j].astype(np.float64) - LGS) / q_g
    return float(np.abs((weights * scale).sum(axis=0)).sum())


def program_physics(engine, mat):
    """(conductance or None, weight scales) the kernel reads for programmed weights ``mat``.

    None when neither IR drop nor drift is active (the programmed cells are used as they
    are). Cached on ``mat`` per (programming, wire resistance, drift settings, block size);
    ``mat._version`` moves on whenever the result changes, so device-resident copies
    (OpenCL) are refreshed. Call with ``pyfastpim.sliced._state_lock`` held; a product first
    runs the solve outside the lock (:func:`physics_work`, :func:`solve_physics`,
    :func:`commit_physics`), so this finds it cached.
    """
    if engine.wire_resistance == 0 and engine._drift is None:
        return None, mat._gran_scale[0]
    work = physics_work(engine, mat)
    if work is not None:  # not cached: solve here (under the lock, so the commit always keeps it)
        commit_physics(mat, work, solve_physics(work))
    return mat._physics[2:]


def physics_work(engine, mat):
    """What the solve for ``mat`` needs, taken under ``_state_lock`` (arrays are replaced, never
    written in place, so the snapshot stays valid without the lock); None when there is no
    physics or its result is cached."""
    r, drift = engine.wire_resistance, engine._drift
    if r == 0 and drift is None:
        return None
    key = (mat._program, r, drift.key() if drift is not None else None, tuple(mat.paral_size))
    cached = getattr(mat, "_physics", None)
    if cached is not None and cached[0] == key and cached[1] == mat._version:
        return None
    return dict(key=key, version=mat._version, r=r, drift=drift, program=mat._program, paral=tuple(mat.paral_size),
                g0=np.ascontiguousarray(mat._cell_conductance(), dtype=np.float32), scale=mat._gran_scale[0],
                widths=mat._widths, granule=mat._granule)


def solve_physics(work):
    """(G_eff, weight scales) of a :func:`physics_work` snapshot: seconds for large layers (the
    IR-drop solve of every block), run without any pyfastpim lock."""
    g_level, HGS, LGS = work["program"][:3]
    r, drift, g0, scale = work["r"], work["drift"], work["g0"], work["scale"]
    g = g0
    if drift is not None:
        g = drift_conductance(g0, drift.t, drift.t0, drift.nu_mean, drift.nu_std, seed=work["program"][6])
    pr, pc = work["paral"]

    def ir(a):  # the solver checks wire_resistance against every block's cells (ValueError naming it)
        if r == 0:
            return a
        with _renamed("r_wire", "wire_resistance"):  # the solver names its own parameter
            try:
                return np.asarray(_core.irdrop_layer(a, r, pr, pc, LGS))
            except ValueError as exc:  # its block limit, in the user's words (not its 'block_rows')
                if not str(exc).startswith(("argument 'block_rows'", "argument 'block_cols'")):
                    raise
        raise ValueError("argument 'wire_resistance': IR drop solves crossbar blocks of at most %d rows and columns, "
                         "the weights' paral_size (weight_paral_size) is %r; use smaller crossbars or "
                         "wire_resistance=0" % (IRDROP_MAX_BLOCK, (pr, pc)))
    geff = ir(g)
    if drift is not None and drift.compensation:
        q_g = (HGS - LGS) / (g_level - 1)
        ref = _calibration_readout(ir(g0), work, LGS, q_g, g_level)
        now = _calibration_readout(geff, work, LGS, q_g, g_level)
        alpha = ref / now if now > 0 else 1.0
        scale = _compensated_scale(scale, alpha, ref, now, drift)
    return geff, scale


def _compensated_scale(scale, alpha, ref, now, drift):
    """The weight scales times the compensation ``alpha``, as float32; ValueError naming 'compensation'
    when they leave float32's range (a readout that drifted to a few denormals gives an alpha of 1e40:
    inf scales, then 0 * inf = NaN outputs) instead of returning inf or NaN."""
    out = scale.astype(np.float64) * alpha
    if not np.all(np.abs(out) <= _F32_MAX):  # NaN (0 * inf) included
        raise ValueError("argument 'compensation': the drift compensation scale readout(t0) / readout(t) = %g / %g "
                         "= %g takes the weight scales past float32's range (the conductances drifted to almost "
                         "nothing at t_seconds=%g, nu_mean=%g); use compensation=False, a smaller t_seconds or "
                         "a smaller nu_mean" % (ref, now, alpha, drift.t, drift.nu_mean))
    return out.astype(np.float32)


def commit_physics(mat, work, result):
    """Keeps a solve's result with ``mat`` (under ``_state_lock``) unless ``mat`` changed since the
    snapshot (re-programmed, or another thread's solve committed first)."""
    if mat._version != work["version"]:
        return
    from .sliced import _versions
    mat._version = next(_versions)
    mat._physics = (work["key"], mat._version) + tuple(result)
