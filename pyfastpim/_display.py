"""Text and HTML representations of the engine and sliced data (notebook display).

Plain functions of the objects' public state, so the classes keep one-line ``__repr__`` /
``_repr_html_`` methods."""
import html

import numpy as np


def _fmt(fmt, value):
    """``fmt % value``, or ``repr(value)`` when ``value`` is not a number: a repr never raises, even for an
    attribute the user set to a string after construction."""
    try:
        return fmt % value
    except (TypeError, ValueError, OverflowError):
        return repr(value)


def sigma_summary(read_variation):
    """``0.05`` when every level has the same sigma, else ``{min..max over N levels}``."""
    if not isinstance(read_variation, dict) or not read_variation:
        return _fmt("%g", read_variation)  # one sigma as given (repr when not a number)
    vals = [read_variation[k] for k in sorted(read_variation)]
    try:
        lo, hi = min(vals), max(vals)
    except TypeError:  # values that do not compare (set by hand)
        return repr(read_variation)
    if lo == hi:
        return _fmt("%g", lo)
    return "{%s..%s over %d levels}" % (_fmt("%g", lo), _fmt("%g", hi), len(vals))


def _radc(radc):
    if isinstance(radc, (list, tuple, np.ndarray)):
        return "[%s]" % ", ".join(_fmt("%d", r) for r in radc)
    return _fmt("%d", radc)


def engine_fields(e):
    """(name, value) pairs describing a DPETensor, in display order."""
    return [("device", e.device), ("g_level", _fmt("%d", e.g_level)), ("HGS", _fmt("%g", e.HGS)),
            ("LGS", _fmt("%g", e.LGS)), ("read_variation", sigma_summary(e._read_variation_given())),
            ("write_variation", _fmt("%g", e.write_variation)), ("vnoise", _fmt("%g", e.vnoise)),
            ("wire_resistance", _fmt("%g", e.wire_resistance)), ("drift", repr(e._drift)),
            ("rdac", _fmt("%d", e.rdac)), ("radc", _radc(e._radc_msb_first())), ("vread", _fmt("%g", e.vread)),
            ("rate_stuck_HGS", _fmt("%g", e.rate_stuck_HGS)), ("rate_stuck_LGS", _fmt("%g", e.rate_stuck_LGS)),
            ("seed", _fmt("%d", e.seed)), ("calls", _fmt("%d", e.calls))]


def engine_brief(e):
    """The settings of engine ``e`` that decide a layer's numbers, for the layer's one-line repr:
    ``g_level=16, rdac=16, radc=256, noise=on`` (the engine's own repr has them all)."""
    try:
        noise = "off" if e.noise_free else "on"
        return "g_level=%d, rdac=%d, radc=%s, noise=%s" % (e.g_level, e.rdac, _radc(e._radc_msb_first()), noise)
    except (AttributeError, TypeError, ValueError):  # not a DPETensor (an object assigned by hand)
        return type(e).__name__


def engine_repr(e):
    return "DPETensor(%s)" % ", ".join("%s=%s" % (k, v if k != "device" else repr(v)) for k, v in engine_fields(e))


def _table(rows, header=None, caption=None):
    out = ["<table>"]
    if caption:
        out.append("<caption style='text-align:left'>%s</caption>" % html.escape(caption))
    if header:
        out.append("<tr>%s</tr>" % "".join("<th>%s</th>" % html.escape(str(h)) for h in header))
    for row in rows:
        out.append("<tr>%s</tr>" % "".join("<td>%s</td>" % html.escape(str(c)) for c in row))
    out.append("</table>")
    return "".join(out)


def engine_html(e):
    rows = engine_fields(e)
    rv = e._read_variation_given()  # as given: one sigma is not expanded over g_level, which may be unset
    if isinstance(rv, dict) and len(set(rv.values())) > 1:
        rows.append(("sigma per level", ", ".join("%s: %s" % (_fmt("%d", k), _fmt("%g", rv[k])) for k in sorted(rv))))
    return _table(rows, header=("parameter", "value"), caption="pyfastpim.DPETensor")


def _kind(sd):
    return "weights" if sd.is_weight else "input"


def _format(sd):
    total = int(sum(sd._widths))
    return "%d bits, %s" % (total, "INT" if sd.bw_e is None or sd.bw_e == 0 else "BFP")


def _programmed(sd):
    if not sd.is_weight:
        return None
    if sd._program is None:
        return "not programmed"
    g_level, HGS, LGS, wv, rh, rl, seed = sd._program
    return ("programmed: g_level=%d, HGS=%g, LGS=%g, write_variation=%g, stuck HGS/LGS=%g/%g, seed=%d"
            % (g_level, HGS, LGS, wv, rh, rl, seed))


def sliced_repr(sd):
    parts = [_kind(sd)]
    if sd._codes is None and sd._levels is None:
        parts.append("not sliced yet")
    else:
        parts.append("shape=%s" % (tuple(sd.shape),))
    parts.append("slice_method=%s (%s)" % (tuple(int(w) for w in sd._widths), _format(sd)))
    parts.append("paral_size=%s" % (tuple(sd.paral_size),))
    parts.append("quant_gran=%s" % (sd.quant_gran if isinstance(sd.quant_gran, str) else tuple(sd.quant_gran),))
    if sd._granule is not None:
        parts.append("granule=%s" % (tuple(int(g) for g in sd._granule),))
    parts.append("device=%s" % (sd.__dict__.get("device", "cpu"),))  # the default without importing torch
    prog = _programmed(sd)
    if prog:
        parts.append(prog)
    return "SlicedData(%s)" % ", ".join(parts)


def sliced_html(sd):
    """A summary line and one table row per slice (most significant first)."""
    from .sliced import slice_params
    m, w, off = (np.asarray(a) for a in slice_params(sd._widths))
    S = len(sd._widths)
    rows = []
    for i, width in enumerate(sd._widths):  # slice_method order: most significant first
        s = S - 1 - i                       # the contract's index: least significant first
        bits = "%d" % off[s] if width == 1 else "%d..%d" % (off[s], off[s] + width - 1)
        rows.append((i, int(width), bits, int(m[s]), "%g" % w[s], "sign" if s == S - 1 else ""))
    head = html.escape(sliced_repr(sd))
    return "<div><code>%s</code>%s</div>" % (
        head, _table(rows, header=("slice", "width", "bits", "max code", "shift weight", "")))
