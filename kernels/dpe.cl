/* Fused DPE MVM on OpenCL devices: the contract of csrc/core/dpe.h, the same three
 * stages as csrc/cpu/dpe.c (pack weights, pack inputs, tile kernel) and the same
 * operation order, so noise-free outputs are bit-identical to the CPU path and
 * noisy outputs equal to it up to the ulp error of log/sin/cos/exp.
 *
 * Packed layouts (zero padded), as the CPU's (dpe.h) micro-panels:
 *   A  [Gc/TM][nb][Sx][nk_b][TM]  DAC voltages of the Gc rows of one row chunk
 *   RS [nb][Gc]                input block scales of those rows
 *   B  [Pp/TN][nb][Sb][nk_b][TN]  conductances in units of Q_G above LGS
 *      (PF_B_PANEL = 1, CPUs: each work-item streams one contiguous panel)
 *   or [Sb][Kp][Pp]            (PF_B_PANEL = 0, GPUs: neighbouring work-items
 *                               read neighbouring columns, coalesced)
 *      Sb = Sw, or ceil(Sw / 2) with two weight slices per float (pair_shift,
 *      pf_dpe_pack_w and pf_adc_slice; noise-free products only)
 *   CS [nb][Pp]                weight block scales
 * with Kp = K: block b (of nb = ceil(K / n) crossbar blocks) stores only the
 * nk_b = min(n, Kp - b * n) rows present (pf_block_rows), not n: the missing
 * rows of a crossbar hold zero inputs and add exactly nothing to a sum, and n
 * itself enters only the ADC constants (adcRef, computed by the host), so a
 * tall crossbar with few rows costs no memory or loop trips for its empty
 * rows (as the CPU, whose single block stores only K rows). Gc a multiple of
 * PF_TM * local size y, Pp a multiple of PF_TN * local size x.
 *
 * Tile kernel: each work-item owns PF_TM rows x PF_TN columns and, exactly as
 * pf_dpe_tile_avx2, computes per block b and slice pair (i, j)
 *   acc = fma(A, B, acc) over the nk_b rows of the block in order,
 *   code = rint(acc * alpha_j) (or the exact table), tb = tb + code * coef_ij,
 * then out = out + tb * (rs * cs); with two weight slices per B slice the
 * accumulation runs once per pair of slices and pf_adc_slice splits its
 * exact sum. Compile-time sizes: PF_TM, PF_TN (host chooses per device type). */
#pragma OPENCL FP_CONTRACT OFF

#ifndef PF_TM
#define PF_TM 4
#endif
#ifndef PF_TN
#define PF_TN 4
#endif
#ifndef PF_B_PANEL
#define PF_B_PANEL 0
#endif

/* Rows stored for crossbar block b: those present, min(n, Kp - b * n). */
inline ulong pf_block_rows(ulong b, ulong n, ulong Kp)
{
    return min(n, Kp - b * n);
}

/* Offset, in panel rows, of slice s of block b in a panel of ns slices of Kp rows:
 * the blocks before b hold ns * n rows each, the slices before s of block b nk_b each. */
inline ulong pf_panel_row(ulong b, ulong s, ulong ns, ulong n, ulong Kp)
{
    return b * n * ns + s * pf_block_rows(b, n, Kp);
}

/* element (j, k, p) of B, k = b * n + kk */
inline ulong pf_b_index(ulong j, ulong k, ulong p, ulong n, ulong sw, ulong Kp, ulong Pp)
{
#if PF_B_PANEL
    return ((p / PF_TN) * sw * Kp + pf_panel_row(k / n, j, sw, n, Kp) + k % n) * PF_TN + p % PF_TN;
#else
    return (j * Kp + k) * Pp + p;
#endif
}


/* ---- implicit im2col input (PF_DPE_X_IM2COL, contract in dpe.h) ----
 * geo = (C, H, W, kh, kw, sh, sw, ph, pw, dh, dw, Ho, Wo, 0, 0, 0). The one decode of the
 * unfolded matrix (torch's unfold order, pf_im2col_row), used by every im2col kernel:
 * column k is channel ci, kernel tap (ki, kj) (pf_im2col_col); row r is the output
 * position whose patch's tap (0, 0) reads input (ih0, iw0) (pf_im2col_origin), so element
 * (r, k) reads input (ih0 + ki * dh, iw0 + kj * dw) of channel ci, 0 in the padding
 * (pf_im2col_pixel). */
inline long pf_im2col_col(long16 geo, long k, long *ki, long *kj)
{
    const long khw = geo.s3 * geo.s4, rem = k % khw;
    *ki = rem / geo.s4;
    *kj = rem % geo.s4;
    return k / khw;
}

inline void pf_im2col_origin(long16 geo, long r, long *ih0, long *iw0)
{
    *ih0 = (r / geo.sc) * geo.s5 - geo.s7;
    *iw0 = (r % geo.sc) * geo.s6 - geo.s8;
}

/* Input (ci, ih, iw) of the item at src, 0 outside the image (the padding). */
inline float pf_im2col_pixel(global const float *src, long16 geo, long ci, long ih, long iw)
{
    return ih >= 0 && ih < geo.s1 && iw >= 0 && iw < geo.s2 ? src[(ci * geo.s1 + ih) * geo.s2 + iw] : 0.0f;
}

/* Element (item, r, k) of the unfolded matrix. */
inline float pf_im2col_at(global const float *img, long16 geo, ulong item, ulong r, ulong k)
{
    long ki, kj, ih0, iw0;
    const long ci = pf_im2col_col(geo, (long)k, &ki, &kj);
    pf_im2col_origin(geo, (long)r, &ih0, &iw0);
    global const float *src = img + (long)item * geo.s0 * geo.s1 * geo.s2;
    return pf_im2col_pixel(src, geo, ci, ih0 + ki * geo.s9, iw0 + kj * geo.sa);
}

/* Max-abs of every granule (qr, qc) of the unfolded matrix (N, R, K), one
 * work-item per granule: global (N*gr*gc). *bad = 1 on NaN or infinity
 * (pf_im2col_granule_max). Max is exact, so the order never matters. The
 * patch position of the granule's first column is decoded once and stepped
 * (pf_im2col_at per element: four 64-bit divisions, ~5x slower on PoCL). */
kernel void pf_im2col_gmax(global const float *img, long16 geo, global float *gmax, global int *bad,
                           ulong N, ulong R, ulong K, ulong qr, ulong qc, ulong gr, ulong gcn)
{
    const ulong id = get_global_id(0);
    if (id >= N * gr * gcn)
        return;
    const ulong item = id / (gr * gcn), g = (id / gcn) % gr, q = id % gcn;
    const ulong r1 = min((g + 1) * qr, R), k0 = q * qc, c1 = min(k0 + qc, K);
    long ki0, kj0;
    const long ci0 = pf_im2col_col(geo, (long)k0, &ki0, &kj0);
    global const float *src = img + (long)item * geo.s0 * geo.s1 * geo.s2;
    float mx = 0.0f;
    int nonfinite = 0;
    for (ulong r = g * qr; r < r1; r++) {
        long ih0, iw0;
        pf_im2col_origin(geo, (long)r, &ih0, &iw0);
        long ci = ci0, ki = ki0, kj = kj0;
        for (ulong k = k0; k < c1; k++) {
            const float v = fabs(pf_im2col_pixel(src, geo, ci, ih0 + ki * geo.s9, iw0 + kj * geo.sa));
            nonfinite |= !(v <= FLT_MAX);
            mx = v > mx ? v : mx;
            if (++kj == geo.s4) {
                kj = 0;
                if (++ki == geo.s3) {
                    ki = 0;
                    ci++;
                }
            }
        }
    }
    gmax[id] = mx;
    if (nonfinite)
        *bad = 1;
}

/* Dequantized unfolded input (N, R, K) (pf_im2col_dequantize): global (N*R*K). */
kernel void pf_im2col_dequant(global const float *img, long16 geo, global const float *gmax, global float *out,
                              ulong total, ulong R, ulong K, ulong qr, ulong qc, ulong gr, ulong gcn,
                              int total_bits, int bfp)
{
    const ulong e = get_global_id(0);
    if (e >= total)
        return;
    const ulong k = e % K, g = e / K, item = g / R, r = g % R;
    const pf_qgran gq = pf_qgran_make(gmax[(item * gr + r / qr) * gcn + k / qc], total_bits, bfp);
    out[e] = pf_dequantize(pf_quantize(pf_im2col_at(img, geo, item, r, k), &gq), &gq);
}

/* Columns k0 .. k0 + nk - 1 (nk <= 4) of the A micro-panel holding rows gc0..: each column's
 * crossbar block kq and row kr in it, the A offset of (slice 0, row gc0) stepped from one
 * division, and a_step, how much further on each next slice is (nk_b * PF_TM). */
inline void pf_a_columns(ulong gc0, ulong k0, uint nk, ulong n, ulong Kp, ulong sx, ulong kq[4], ulong kr[4],
                         ulong a_col[4], ulong a_step[4])
{
    const ulong a_panel = (gc0 / PF_TM) * sx * Kp;
    ulong q = k0 / n, rr = k0 % n;
    for (uint l = 0; l < nk; l++) {
        kq[l] = q;
        kr[l] = rr;
        a_col[l] = (a_panel + pf_panel_row(q, 0, sx, n, Kp) + rr) * PF_TM;
        a_step[l] = pf_block_rows(q, n, Kp) * PF_TM;
        if (++rr == n) {
            rr = 0;
            q++;
        }
    }
}

/* Noise: the host first draws the normals a pack kernel needs into a buffer Z
 * (pf_normals_range in base.cl: 8 Philox groups per work-item in 8-lane
 * vectors, the CPU's noise_avx2.c layout), so the pack kernels only read it.
 * The pack kernels write only the
 * valid region; the host zeroes the padding of A and B when their geometry
 * changes (the padding is never written afterwards).
 *
 * Inputs of rows [g0, g0 + rows): global (ceil(K / 4), ceil(rows / PF_TM)),
 * PF_TM rows (one A micro-panel) x 4 columns per work-item, so each slice's
 * writes are 4 runs of PF_TM consecutive floats (4 consecutive elements of
 * one row per work-item wrote strided floats), and the column groups in
 * dimension 0, so a work-group fills consecutive lines of one panel (row
 * blocks there: 16 bytes in each of 64 panels). As on the CPU
 * (pf_vnoise_index in dpe.c), element (g, i, k) of slice i draws noise index
 * ((item0*R + g) * Sx + i) * K + k (independent of the batch size): the rows
 * of a chunk are one contiguous index range, whose normals the host draws
 * into Z first (pf_normals_range, 8 Philox groups per work-item), element
 * (gc, i, k) at (gc * sx + i) * K + k. V = dac[v], times (1 + vnoise * z)
 * with noise, for every code (code 0 gives +-0, as the CPU's branch-free
 * packing). Also writes RS. */
kernel void pf_dpe_pack_x(global const uchar *codes, global const float *x_scale, global const float *dac,
                          global float *A, global float *RS,
                          ulong G, ulong R, ulong K, ulong Kp, ulong Gc, ulong g0, ulong rows, ulong n,
                          ulong x_qr, ulong x_qc, ulong x_gr, ulong x_gc,
                          int noise_x, float vnoise, ulong sx, global const float *Z)
{
    const ulong gc0 = get_global_id(1) * PF_TM, k0 = get_global_id(0) * 4;
    if (gc0 >= rows || k0 >= K)
        return;
    const uint nr = (uint)min((ulong)PF_TM, rows - gc0), nk = (uint)min((ulong)4, K - k0);
    ulong kq[4], kr[4], a_col[4], a_step[4];
    pf_a_columns(gc0, k0, nk, n, Kp, sx, kq, kr, a_col, a_step);
    for (uint l = 0; l < nk; l++) {
        if (kr[l] != 0)
            continue;
        for (uint r = 0; r < nr; r++) {
            const ulong g = g0 + gc0 + r, item = g / R, rw = g % R;
            RS[kq[l] * Gc + gc0 + r] = x_scale[(item * x_gr + rw / x_qr) * x_gc + (k0 + l) / x_qc];
        }
    }
    for (ulong i = 0; i < sx; i++)
        for (uint l = 0; l < nk; l++) {
            global const uchar *c = codes + (i * G + g0 + gc0) * K + k0 + l;
            global float *dst = A + a_col[l] + i * a_step[l]; /* rows gc0.. of the panel: consecutive */
            for (uint r = 0; r < nr; r++) {
                float V = dac[i * 256 + c[(ulong)r * K]];
                if (noise_x)
                    V = V * (1.0f + vnoise * Z[((gc0 + r) * sx + i) * K + k0 + l]);
                dst[r] = V;
            }
        }
}

/* Inputs of the implicit im2col kind: pf_dpe_pack_x's contract (its
 * arguments but the codes, scales, G and nbase; same A, RS and noise) with the slice codes made on the fly,
 * as pack_x_row_im2col in dpe.c: the unfolded element is quantized once with
 * its granule (quantize.h arithmetic) and sliced for every slice. Global
 * (ceil(K / 4), ceil(rows / PF_TM)) as pf_dpe_pack_x: PF_TM rows (one A micro-panel) x 4
 * columns per work-item, so each slice's writes are 4 runs of PF_TM
 * consecutive floats, the patch geometry of a column is decoded once for the
 * PF_TM rows and the position of a row once for the 4 columns (one row x 4
 * columns per work-item wrote strided floats: ~2x slower on PoCL). With
 * voltage noise, Z holds the chunk's normals (pf_normals_range over the
 * chunk's contiguous noise range, 8 groups per work-item), element (gc, i, k)
 * at (gc * sx + i) * K + k. Sizes below 2**31 (host checks): 32-bit
 * divisions for the row and granule indices (the patch decode is
 * pf_im2col_col / pf_im2col_origin, once per column and row). */
kernel void pf_dpe_pack_x_im2col(global const float *dac, global float *A, global float *RS,
                                 ulong R, ulong K, ulong Kp, ulong Gc, ulong g0, ulong rows, ulong n,
                                 ulong x_qr, ulong x_qc, ulong x_gr, ulong x_gc,
                                 int noise_x, float vnoise, ulong sx,
                                 global const float *img, global const float *gmax, long16 geo, int total_bits,
                                 int bfp, ulong offs, global const float *Z)
{
    const ulong gc0 = get_global_id(1) * PF_TM, k0 = get_global_id(0) * 4;
    if (gc0 >= rows || k0 >= K)
        return;
    const uint nr = (uint)min((ulong)PF_TM, rows - gc0), nk = (uint)min((ulong)4, K - k0);
    const uint qc = (uint)min(x_qc, K), qr = (uint)min(x_qr, R);
    ulong kq[4], kr[4], a_col[4], a_step[4];
    pf_a_columns(gc0, k0, nk, n, Kp, sx, kq, kr, a_col, a_step);
    /* per column: channel, patch offsets and granule column */
    uint gcol[4];
    long ci[4], dih[4], diw[4];
    for (uint l = 0; l < nk; l++) {
        long ki, kj;
        ci[l] = pf_im2col_col(geo, (long)k0 + l, &ki, &kj);
        dih[l] = ki * geo.s9;
        diw[l] = kj * geo.sa;
        gcol[l] = ((uint)k0 + l) / qc;
    }
    int u[PF_TM][4];
    for (uint r = 0; r < nr; r++) {
        const ulong gc = gc0 + r, g = g0 + gc, item = g / R;
        const uint rw = (uint)(g % R);
        long ih0, iw0;
        pf_im2col_origin(geo, rw, &ih0, &iw0);
        global const float *src = img + (long)item * geo.s0 * geo.s1 * geo.s2;
        global const float *gm = gmax + (item * x_gr + rw / qr) * x_gc;
        uint gi_made = UINT_MAX; /* granule of gq: made once per granule, not per column */
        pf_qgran gq;
        for (uint l = 0; l < nk; l++) {
            const float v = pf_im2col_pixel(src, geo, ci[l], ih0 + dih[l], iw0 + diw[l]);
            if (gcol[l] != gi_made) {
                gq = pf_qgran_make(gm[gcol[l]], total_bits, bfp);
                gi_made = gcol[l];
            }
            u[r][l] = pf_twos_complement(pf_quantize(v, &gq), total_bits);
            if (kr[l] == 0)
                RS[kq[l] * Gc + gc] = gq.scale;
        }
    }
    for (uint i = 0; i < (uint)sx; i++)
        for (uint l = 0; l < nk; l++) {
            global float *dst = A + a_col[l] + i * a_step[l]; /* rows gc0.. of the panel: consecutive */
            for (uint r = 0; r < nr; r++) {
                float V = dac[i * 256 + pf_slice_code_packed(u[r][l], offs, (int)i, (int)sx, total_bits)];
                if (noise_x)
                    V = V * (1.0f + vnoise * Z[((gc0 + r) * sx + i) * K + k0 + l]);
                dst[r] = V;
            }
        }
}

/* One weight cell: val = L without noise; with noise, as pack_w in dpe.c:
 * f = exp(sigma[min(L, g_level - 1)] * z) (or 1), val = (G / QG) * f - lgs or
 * (L + lgs) * f - lgs. exp: the CPU's pf_exp_inplace, SLEEF's expf_u10 on every
 * cell (the row's tail too). */
inline float pf_pack_w_cell(uint L, ulong idx, global const float *cond, global const float *sigma,
                            global const float *Z, int noise_w, int has_cond, int has_sigma, float QG, float lgs,
                            uint top)
{
    if (!noise_w)
        return (float)L;
    float f = 1.0f;
    if (has_sigma) {
        f = sigma[L < top ? L : top] * Z[idx]; /* clamped as on the CPU */
        f = pf_sleef_expf(f);
    }
    return has_cond ? (cond[idx] / QG) * f - lgs : ((float)L + lgs) * f - lgs;
}

/* Eight cells of a run of 8 (p % 8 == 0, all before the row's tail): pf_pack_w_cell lane by lane. */
inline float8 pf_pack_w_run8(ulong idx, global const uchar *levels, global const float *cond,
                             global const float *sigma, global const float *Z, int noise_w, int has_cond,
                             int has_sigma, float QG, float lgs, uint top)
{
    const uchar8 L = vload8(0, levels + idx);
    if (!noise_w)
        return convert_float8(L);
    float8 f = (float8)(1.0f);
    if (has_sigma) {
        const uint8 c = min(convert_uint8(L), (uint8)(top));
        const float8 sg = (float8)(sigma[c.s0], sigma[c.s1], sigma[c.s2], sigma[c.s3], sigma[c.s4], sigma[c.s5],
                                   sigma[c.s6], sigma[c.s7]);
        f = pf_sleef_expf8(sg * vload8(0, Z + idx));
    }
    return has_cond ? (vload8(0, cond + idx) / QG) * f - lgs : (convert_float8(L) + lgs) * f - lgs;
}

/* Weights: 16 cells (j, k, p0 .. p0 + 15) of one row per work-item, in runs
 * of 8: global (Sw*K, ceil(P / 16)) with PF_B_PANEL (CPUs: the rows in
 * dimension 0, so a work-group fills consecutive lines of one panel), else
 * (ceil(P / 16), Sw*K) (neighbouring work-items, neighbouring columns). Cell
 * (j, k, p) is noise element (j*K + k)*P + p, its read-noise normal
 * Z[(j*K + k)*P + p]. (Four cells in a row's order per work-item before:
 * scalar exp, and each work-item wrote into another panel.)
 *
 * pair_shift = s > 0 (noise free only, pf_adc_slice): B slice jb holds
 * L_2jb + 2**s L_2jb+1 (exact small integers), rows Sb*K with Sb = ceil(Sw/2);
 * a level above top (g_level - 1: not a programmed level, and its sums could
 * reach 2**s) sets *bad, and the host packs again with one slice per B slice. */
kernel void pf_dpe_pack_w(global const uchar *levels, global const float *cond, global const float *sigma,
                          global float *B, ulong K, ulong P, ulong Kp, ulong Pp, ulong n, ulong total,
                          int noise_w, int has_cond, int has_sigma, float QG, float lgs, uint top,
                          global const float *Z, int pair_shift, global int *bad)
{
#if PF_B_PANEL
    const ulong row = get_global_id(0), p0 = get_global_id(1) * 16;
#else
    const ulong row = get_global_id(1), p0 = get_global_id(0) * 16;
#endif
    const ulong sw = total / (K * P), sb = pair_shift ? (sw + 1) / 2 : sw;
    if (row >= sb * K || p0 >= P)
        return;
    const ulong j = row / K, k = row % K, tail = P & ~(ulong)7, p1 = min(p0 + 16, P);
    /* the levels' row of (the low) slice, and the high slice's offset from it (0: none) */
    const ulong lrow = pair_shift ? 2 * j * K + k : row, hi = pair_shift && 2 * j + 1 < sw ? K * P : 0;
    const float pw = (float)(1u << pair_shift);
    for (ulong p = p0; p < p1; p += 8) {
        const ulong idx = lrow * P + p;
        if (p + 8 <= tail) {
            float8 v;
            if (pair_shift) { /* noise free: the levels themselves */
                const uchar8 L0 = vload8(0, levels + idx), L1 = hi ? vload8(0, levels + idx + hi) : (uchar8)(0);
                if (any(convert_uint8(max(L0, L1)) > (uint8)(top)))
                    *bad = 1;
                v = convert_float8(L0) + convert_float8(L1) * pw;
            } else {
                v = pf_pack_w_run8(idx, levels, cond, sigma, Z, noise_w, has_cond, has_sigma, QG, lgs, top);
            }
#if !PF_B_PANEL || PF_TN % 8 == 0
            vstore8(v, 0, B + pf_b_index(j, k, p, n, sb, Kp, Pp)); /* 8 consecutive floats of B */
#else
            float t[8];
            vstore8(v, 0, t);
            for (uint l = 0; l < 8; l++)
                B[pf_b_index(j, k, p + l, n, sb, Kp, Pp)] = t[l];
#endif
            continue;
        }
        for (ulong q = p; q < min(p + 8, p1); q++) {
            const uint L0 = levels[lrow * P + q];
            float v;
            if (pair_shift) {
                const uint L1 = hi ? levels[lrow * P + q + hi] : 0;
                if (max(L0, L1) > top)
                    *bad = 1;
                v = (float)L0 + (float)L1 * pw;
            } else {
                v = pf_pack_w_cell(L0, lrow * P + q, cond, sigma, Z, noise_w, has_cond, has_sigma, QG, lgs, top);
            }
            B[pf_b_index(j, k, q, n, sb, Kp, Pp)] = v;
        }
    }
}

/* Weight block scales: global (Pp, nb). */
kernel void pf_dpe_scales_w(global const float *w_scale, global float *CS, ulong P, ulong Pp, ulong n, ulong w_qr,
                            ulong w_qc, ulong w_gc)
{
    const ulong p = get_global_id(0), b = get_global_id(1);
    if (p >= Pp)
        return;
    CS[b * Pp + p] = p < P ? w_scale[((b * n) / w_qr) * w_gc + p / w_qc] : 0.0f;
}

/* Tile kernel: global (Pp / PF_TN, Gc / PF_TM). fparams = coef[sx*sw] then
 * alpha[sw]; tab_info[2j] >= 0 selects the exact code table of slice j at
 * tables + tab_info[2j] (indices clamped to [0, tab_info[2j+1]]). Writes rows
 * [g0, g0 + rows_valid) of out (rows of P floats). */
kernel void pf_dpe_mvm(global const float *A, global const float *B, global const float *RS,
                       global const float *CS, global const float *fparams, global const float *tables,
                       global const int *tab_info, global float *out,
                       ulong g0, ulong rows_valid, ulong Gc, ulong Kp, ulong Pp, ulong P,
                       int n, int nb, int sx, int sw, int use_table, ulong R, int out_nphw, int pair_shift)
{
    const ulong cb = get_global_id(0) * PF_TN, rb = get_global_id(1) * PF_TM;
    if (cb >= Pp || rb >= Gc)
        return;
    const int paired = pair_shift != 0, swb = (sw + paired) >> paired; /* slices of B (pf_adc_slice) */
    pf_vec o[PF_TM];
    pf_vec tb[PF_TM];
    pf_vec acc[PF_TM];
    for (int r = 0; r < PF_TM; r++)
        o[r] = (pf_vec)(0.0f);
    for (int b = 0; b < nb; b++) {
        const int nk = (int)pf_block_rows((ulong)b, (ulong)n, Kp); /* the rows present */
        for (int r = 0; r < PF_TM; r++)
            tb[r] = (pf_vec)(0.0f);
        for (int i = 0; i < sx; i++) {
            global const float *Ab = A + ((rb / PF_TM) * sx * Kp + pf_panel_row(b, i, sx, n, Kp)) * PF_TM;
            for (int j = 0; j < swb; j++) {
#if PF_B_PANEL
                global const float *Bb = B + ((cb / PF_TN) * swb * Kp + pf_panel_row(b, j, swb, n, Kp)) * PF_TN;
                const ulong bstride = PF_TN;
#else
                global const float *Bb = B + ((ulong)j * Kp + (ulong)b * n) * Pp + cb;
                const ulong bstride = Pp;
#endif
                for (int r = 0; r < PF_TM; r++)
                    acc[r] = (pf_vec)(0.0f);
                for (int k = 0; k < nk; k++) {
                    const pf_vec bv = PF_VLOAD(Bb + (ulong)k * bstride);
                    global const float *ak = Ab + (ulong)k * PF_TM;
#pragma unroll
                    for (int r = 0; r < PF_TM; r++)
                        acc[r] = fma((pf_vec)(ak[r]), bv, acc[r]);
                }
                pf_adc_slice(tb, acc, fparams, tables, tab_info, i, j, sx, sw, use_table, pair_shift);
            }
        }
        const pf_vec cs = PF_VLOAD(CS + (ulong)b * Pp + cb);
        global const float *rs = RS + (ulong)b * Gc + rb;
        for (int r = 0; r < PF_TM; r++)
            o[r] = o[r] + tb[r] * ((pf_vec)(rs[r]) * cs);
    }
    pf_tile_store(out, o, rb, cb, g0, rows_valid, P, R, out_nphw);
}
