"""Slow, obviously correct NumPy transcription of docs/semantics.md sections 1-6.

Written from the spec, not from the C code: explicit zero padding, a Python
loop over granules, integers wherever the spec's quantity is an integer, and
float32 arithmetic in the spec's order wherever the spec says float32.

Pinned details (the spec leaves them to the implementation):
- BFP: ``e = floor(log2(M + 1e-10))`` with the sum in float32 and the logarithm
  exact (``np.frexp``), so ``e`` is the true floor of log2 of that float32.
- Programming: ``Q_G`` is computed in float64 and rounded to float32; ``G`` and
  the write noise are float32; stuck-at draws are compared in float64.
"""
import math

import numpy as np

from pyfastpim import _core

DEFAULT_SEED = _core.DEFAULT_SEED


def slice_params(widths):
    """(m, w, off) as int64 arrays indexed least significant first (spec 1)."""
    widths = [int(v) for v in widths]
    S, B = len(widths), sum(widths)
    lsb_first = widths[::-1]
    off = np.array([sum(lsb_first[:s]) for s in range(S)], dtype=np.int64)
    m = np.array([2 ** lsb_first[s] - 1 for s in range(S)], dtype=np.int64)
    w = np.array([2 ** int(off[s]) for s in range(S)], dtype=np.int64)
    w[S - 1] = -(2 ** (B - 1))
    return m, w, off


def resolve_granule(R, C, paral, quant_gran):
    """Spec 2: the granule (qr', qc') rounded up to multiples of the block."""
    pr, pc = int(paral[0]), int(paral[1])
    if quant_gran is None:
        qr, qc = pr, pc
    elif isinstance(quant_gran, str):
        qr, qc = {"per-matrix": (R, C), "per-row": (1, C), "per-col": (R, 1)}[quant_gran]
    else:
        qr, qc = int(quant_gran[0]), int(quant_gran[1])
    return math.ceil(qr / pr) * pr, math.ceil(qc / pc) * pc


def _bfp_exponent(M):
    v = np.float32(M) + np.float32(1e-10)
    mant, ex = np.frexp(np.float32(v))  # v = mant * 2**ex, mant in [0.5, 1)
    return int(ex) - 1


def quantize_reference(x, paral, quant_gran, widths, bw_e=None):
    """Spec 2-4 for x of shape (N, R, C) or (R, C) (then N = 1 is added)."""
    x = np.asarray(x, dtype=np.float32)
    if x.ndim == 2:
        x = x[None]
    N, R, C = x.shape
    B = sum(int(v) for v in widths)
    K = 2 ** (B - 1) - 1
    qr, qc = resolve_granule(R, C, paral, quant_gran)
    gr, gc = math.ceil(R / qr), math.ceil(C / qc)
    padded = np.zeros((N, gr * qr, gc * qc), dtype=np.float32)
    padded[:, :R, :C] = x
    q = np.zeros(padded.shape, dtype=np.int64)
    deq = np.zeros(padded.shape, dtype=np.float32)
    gmax = np.zeros((N, gr, gc), dtype=np.float32)
    gscale = np.zeros((N, gr, gc), dtype=np.float32)
    gexp = np.zeros((N, gr, gc), dtype=np.int64) if bw_e else None
    for n in range(N):
        for i in range(gr):
            for j in range(gc):
                tile = padded[n, i * qr:(i + 1) * qr, j * qc:(j + 1) * qc]
                M = np.float32(np.max(np.abs(tile)))
                gmax[n, i, j] = M
                if not bw_e:
                    if M == 0:  # pyfastpim deviation: q = 0, xq = 0
                        qt = np.zeros(tile.shape, dtype=np.int64)
                        dt = np.zeros(tile.shape, dtype=np.float32)
                        gscale[n, i, j] = 0
                    else:
                        Kf = np.float32(K)
                        qt = np.rint((tile / M) * Kf).astype(np.int64)
                        assert np.all(np.abs(qt) <= K)
                        dt = (qt.astype(np.float32) / Kf) * M
                        gscale[n, i, j] = M / Kf
                else:
                    e = _bfp_exponent(M)
                    gexp[n, i, j] = e
                    p2e = np.float32(2.0 ** e)
                    y = np.rint((tile / p2e) * np.float32(2.0 ** (B - 2)))
                    qt = np.clip(y, -(2 ** (B - 1)), 2 ** (B - 1) - 1).astype(np.int64)
                    scale = np.float32(2.0 ** (e + 2 - B))
                    dt = qt.astype(np.float32) * scale
                    gscale[n, i, j] = scale
                q[n, i * qr:(i + 1) * qr, j * qc:(j + 1) * qc] = qt
                deq[n, i * qr:(i + 1) * qr, j * qc:(j + 1) * qc] = dt
    assert np.all(q[:, R:, :] == 0) and np.all(q[:, :, C:] == 0)  # padding quantizes to 0
    return {"q": q[:, :R, :C], "dequant": deq[:, :R, :C].astype(np.float32), "gran_max": gmax,
            "gran_scale": gscale, "gran_exp": gexp, "granule": (qr, qc)}


def slice_reference(q, widths):
    """Spec 5: uint8 (S, *q.shape), s = 0 least significant."""
    q = np.asarray(q, dtype=np.int64)
    B = sum(int(v) for v in widths)
    m, w, off = slice_params(widths)
    u = np.where(q >= 0, q, q + 2 ** B)
    assert np.all((u >= 0) & (u < 2 ** B))
    out = np.stack([(u >> int(off[s])) & int(m[s]) for s in range(len(widths))]).astype(np.uint8)
    assert np.array_equal(np.tensordot(w, out.astype(np.int64), axes=1), q)  # recombines to q
    return out


def program_levels_reference(codes, widths, g_level):
    """Spec 6: L = rint(slice / m[s] * (g_level - 1)), float32; codes (S, ...)."""
    m, _, _ = slice_params(widths)
    codes = np.asarray(codes)
    out = np.empty(codes.shape, dtype=np.uint8)
    for s in range(codes.shape[0]):
        assert m[s] <= g_level - 1
        v = (codes[s].astype(np.float32) / np.float32(m[s])) * np.float32(g_level - 1)
        out[s] = np.rint(v).astype(np.uint8)
    return out


def program_conductance_noise_free(levels, g_level, HGS, LGS):
    """Spec 6 without write variation or stuck-at faults: G = L * Q_G + LGS (float32)."""
    q_g = np.float32((HGS - LGS) / (g_level - 1))
    return np.asarray(levels).astype(np.float32) * q_g + np.float32(LGS)
