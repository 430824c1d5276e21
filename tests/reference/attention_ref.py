"""Pure-NumPy transcription of docs/semantics.md section 9 (attention context), written from the
spec text, independently of csrc/cpu/attention.c. Float32 throughout, as NumPy computes
it, except where the spec says float64 (grad_strength). Allocates freely: this is
also the "reference" case of the benchmark.

fin(v) = v where finite, else 0 (the spec's "non-finite values/terms become 0").
"""
import numpy as np

SAMPLES = 32


def fin(a):
    a = np.asarray(a)
    return np.where(np.isfinite(a), a, np.zeros((), a.dtype))


def _similarity(xc, yc):
    """tanh(cov / den) where den > 1e-12 and the ratio is finite, else 0."""
    cov = xc.T @ yc
    nx = np.sqrt(np.sum(xc * xc, axis=0))
    ny = np.sqrt(np.sum(yc * yc, axis=0))
    den = np.outer(nx, ny)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        ratio = cov / den
        ok = (den > 1e-12) & np.isfinite(ratio)
        return np.where(ok, np.tanh(np.where(ok, ratio, 0)), np.float32(0))


def _blend(outgoing, sim, r):
    d = sim.shape[0]
    if outgoing is None:
        outgoing = np.zeros((d, d), np.float32)
    return ((1 - r) * outgoing + r * sim).astype(np.float32)


def update(outgoing, x, y, r, embed_dim=None):
    """New outgoing after update(x, y); x, y are (T, D)-like float32 arrays."""
    if r <= 0:
        return outgoing
    x = np.asarray(x, np.float32)
    y = np.asarray(y, np.float32)
    x = x.reshape(-1, x.shape[-1])
    y = y.reshape(-1, y.shape[-1])
    t = min(x.shape[0], y.shape[0])
    d = min(x.shape[1], y.shape[1])
    if embed_dim is not None:
        d = min(d, embed_dim)
    if t == 0:
        return outgoing
    n = min(t, SAMPLES)
    step = max(t // n, 1)
    idx = np.arange(n) * step
    xs = fin(x[idx, :d])
    ys = fin(y[idx, :d])
    xc = xs - xs.mean(axis=0)
    yc = ys - ys.mean(axis=0)
    return _blend(outgoing, _similarity(xc, yc), r)


def update_step(outgoing, xv, yv, r, embed_dim=None):
    """The step update (T = 1): means over the vector's elements."""
    if r <= 0:
        return outgoing
    xv = np.asarray(xv, np.float32)
    yv = np.asarray(yv, np.float32)
    d = min(xv.shape[0], yv.shape[0])
    if embed_dim is not None:
        d = min(d, embed_dim)
    xs = fin(xv[:d])
    ys = fin(yv[:d])
    xc = (xs - np.float32(np.sum(xs, dtype=np.float64) / d))[None, :]
    yc = (ys - np.float32(np.sum(ys, dtype=np.float64) / d))[None, :]
    return _blend(outgoing, _similarity(xc, yc), r)


def apply(x, incoming, s):
    """out = x + (s/D) * (x @ incoming), non-finite terms as 0; x unchanged without context."""
    x = np.asarray(x, np.float32)
    if incoming is None or s == 0:
        return x
    d = incoming.shape[0]
    xs = fin(x)
    xw = fin(xs @ incoming)
    return (xs + np.float32(s / d) * xw).astype(np.float32)


def gradients(x, g, incoming, s):
    """(grad_x, grad_strength) of apply for upstream g."""
    x = np.asarray(x, np.float32)
    g = np.asarray(g, np.float32)
    if incoming is None:
        return g, 0.0
    d = incoming.shape[0]
    xw = fin(fin(x) @ incoming)
    ds = float(np.sum(fin(g).astype(np.float64) * xw.astype(np.float64)) / d)
    if s == 0:
        return g, ds
    gs = fin(g)
    gx = (gs + np.float32(s / d) * fin(gs @ incoming.T)).astype(np.float32)
    return gx, ds
