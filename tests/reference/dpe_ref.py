"""Independent NumPy transcription of docs/semantics.md section 7 (one MVM call).

Slow and obviously correct: integers where the spec says exact, float32 in
the order the spec and csrc/core/dpe.h document. Inputs are slice codes (as the
slicing stage produces them) so the MVM can be checked on its own.
"""
import numpy as np


def slice_constants(widths):
    """(m, w) indexed least significant first, as Python ints."""
    widths = [int(v) for v in widths]
    S, B = len(widths), sum(widths)
    m, w, off = [], [], 0
    for s in range(S):
        width = widths[S - 1 - s]
        m.append(2 ** width - 1)
        w.append(2 ** off)
        off += width
    w[-1] = -(2 ** (B - 1))
    return m, w


def rint_half_even_ratio(num, den):
    """Exact round-half-to-even of num / den for integer arrays, den > 0 scalar."""
    num = np.asarray(num, dtype=np.int64)
    q, r = np.divmod(num, den)  # floor division, r in [0, den)
    up = (2 * r > den) | ((2 * r == den) & (q % 2 == 1))
    return q + up


def dac_codes(slices, m, rdac):
    """spec: k = rint(slice / m * (rdac - 1)), float32 arithmetic."""
    return np.rint(slices.astype(np.float32) / np.float32(m) * np.float32(rdac - 1)).astype(np.int64)


def conductance_levels(slices, m, g_level):
    """spec 6: L = rint(slice / m * (g_level - 1)), float32 arithmetic."""
    return np.rint(slices.astype(np.float32) / np.float32(m) * np.float32(g_level - 1)).astype(np.int64)


def coefficients(n, x_widths, w_widths, radc):
    """coef[i][j] = n m_x[i] m_w[j] w_x[i] w_w[j] / (radc_j - 1), exact ints -> double -> float32."""
    mx, wx = slice_constants(x_widths)
    mw, ww = slice_constants(w_widths)
    return np.array([[np.float32((n * mx[i] * mw[j] * wx[i] * ww[j]) / float(radc[j] - 1))
                      for j in range(len(mw))] for i in range(len(mx))], dtype=np.float32)


def block_scales(scale, granule, nrows, ncols, row_block, col_block):
    """Expands per-granule scales to per-(row or block) values: (nrows_blocks, ncols_blocks)."""
    qr, qc = granule
    rows = np.arange(0, nrows, row_block) // qr
    cols = np.arange(0, ncols, col_block) // qc
    return scale[np.ix_(rows, cols)]


def mvm_exact(x_slices, x_scale, x_granule, x_widths, w_levels, w_scale, w_granule, w_widths, n, rdac, g_level,
              radc):
    """Noise-free MapReduceDot: x_slices (Sx, N, R, K) uint8, w_levels (Sw, K, P) conductance levels.

    radc: per weight slice, least significant first. Returns float32 (N, R, P).
    """
    Sx, N, R, K = x_slices.shape
    Sw, _, P = w_levels.shape
    mx, _ = slice_constants(x_widths)
    D = (rdac - 1) * (g_level - 1) * n
    coef = coefficients(n, x_widths, w_widths, radc)
    nb = -(-K // n)
    Kp = nb * n
    xk = np.zeros((Sx, N, R, Kp), dtype=np.int64)
    for i in range(Sx):
        xk[i, :, :, :K] = dac_codes(x_slices[i], mx[i], rdac)
    L = np.zeros((Sw, Kp, P), dtype=np.int64)
    L[:, :K, :] = w_levels
    out = np.zeros((N, R, P), dtype=np.float32)
    for item in range(N):
        # scale_x(r, b) for every row r, scale_w(b, c) for every column c
        sx = block_scales(x_scale[item], x_granule, R, Kp, 1, n)          # (R, nb)
        sw = block_scales(w_scale, w_granule, Kp, P, n, 1)                # (nb, P)
        for b in range(nb):
            cols = slice(b * n, (b + 1) * n)
            t = np.zeros((R, P), dtype=np.float32)
            for i in range(Sx):
                for j in range(Sw):
                    S = xk[i, item, :, cols] @ L[j, cols, :]                  # exact integers
                    code = rint_half_even_ratio(S * (radc[j] - 1), D).astype(np.float32)
                    t = t + code * coef[i, j]
            sxw = sx[:, b][:, None] * sw[b, :][None, :]                   # float32 product
            out[item] = out[item] + t * sxw
    return out


def mvm_noisy(x_slices, x_scale, x_granule, x_widths, w_levels, w_conductance, w_scale, w_granule, w_widths, n, rdac,
              g_level, radc, HGS, LGS, vread, read_sigma, vnoise, rng):
    """MapReduceDot with device noise drawn by ``rng`` (NumPy), in physical units as the spec states.

    Used to compare noise statistics (SNR), not bits, against the kernel.
    """
    Sx, N, R, K = x_slices.shape
    Sw, _, P = w_levels.shape
    mx, wx = slice_constants(x_widths)
    mw, ww = slice_constants(w_widths)
    QG = (HGS - LGS) / (g_level - 1)
    adc_ref = (HGS - LGS) * vread * n
    nb = -(-K // n)
    Kp = nb * n
    G = w_levels * QG + LGS if w_conductance is None else w_conductance.astype(np.float64)
    sig = np.asarray(read_sigma, dtype=np.float64)[w_levels]
    Gr = G * np.exp(rng.standard_normal(G.shape) * sig)
    Gp = np.zeros((Sw, Kp, P))
    Gp[:, :K] = Gr - LGS
    V = np.zeros((Sx, N, R, Kp))
    for i in range(Sx):
        k = dac_codes(x_slices[i], mx[i], rdac)
        v = vread * k / (rdac - 1)
        V[i, :, :, :K] = v * (1 + rng.standard_normal(v.shape) * vnoise)
    out = np.zeros((N, R, P))
    for item in range(N):
        sx = block_scales(x_scale[item], x_granule, R, Kp, 1, n)
        sw = block_scales(w_scale, w_granule, Kp, P, n, 1)
        for b in range(nb):
            cols = slice(b * n, (b + 1) * n)
            t = np.zeros((R, P))
            for i in range(Sx):
                for j in range(Sw):
                    I = V[i, item, :, cols] @ Gp[j, cols, :]
                    Iq = np.rint(I / adc_ref * (radc[j] - 1)) / (radc[j] - 1)
                    t += Iq * mx[i] * mw[j] / QG / vread / (g_level - 1) * adc_ref * wx[i] * ww[j]
            out[item] += t * (sx[:, b][:, None] * sw[b, :][None, :])
    return out.astype(np.float32)
