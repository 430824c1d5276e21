/* Fused DPE MVM on OpenCL devices: the contract of csrc/dpe.h, the same three
 * stages as csrc/dpe.c (pack weights, pack inputs, tile kernel) and the same
 * operation order, so noise-free outputs are bit-identical to the CPU path and
 * noisy outputs equal to it up to the ulp error of log/sin/cos/exp.
 *
 * Packed layouts (zero padded, written in full by the pack kernels):
 *   A  [Sx][Kp][Gc]  DAC voltages of the Gc rows of one row chunk (row fastest)
 *   RS [nb][Gc]      input block scales of those rows
 *   B  [Sw][Kp][Pp]  conductances in units of Q_G above LGS (column fastest)
 *   CS [nb][Pp]      weight block scales
 * with Kp = nb * n (crossbar blocks), Gc a multiple of PF_TM * local size y,
 * Pp a multiple of PF_TN * local size x.
 *
 * Tile kernel: each work-item owns PF_TM rows x PF_TN columns and, exactly as
 * pf_dpe_tile_avx2, computes per block b and slice pair (i, j)
 *   acc = fma(A, B, acc) over the n rows of the crossbar in order,
 *   code = rint(acc * alpha_j) (or the exact table), tb = tb + code * coef_ij,
 * then out = out + tb * (rs * cs). Compile-time sizes: PF_TM, PF_TN (host
 * chooses per device type), PF_KSEG. */
#pragma OPENCL FP_CONTRACT OFF

#ifndef PF_TM
#define PF_TM 4
#endif
#ifndef PF_TN
#define PF_TN 4
#endif
#define PF_KSEG 32

#if PF_TN == 1
typedef float pf_vec;
#define PF_VLOAD(p) (*(p))
#define PF_VSTORE(v, p) (*(p) = (v))
#elif PF_TN == 2
typedef float2 pf_vec;
#define PF_VLOAD(p) vload2(0, p)
#define PF_VSTORE(v, p) vstore2(v, 0, p)
#elif PF_TN == 4
typedef float4 pf_vec;
#define PF_VLOAD(p) vload4(0, p)
#define PF_VSTORE(v, p) vstore4(v, 0, p)
#elif PF_TN == 8
typedef float8 pf_vec;
#define PF_VLOAD(p) vload8(0, p)
#define PF_VSTORE(v, p) vstore8(v, 0, p)
#elif PF_TN == 16
typedef float16 pf_vec;
#define PF_VLOAD(p) vload16(0, p)
#define PF_VSTORE(v, p) vstore16(v, 0, p)
#else
#error "PF_TN must be 1, 2, 4, 8 or 16"
#endif

/* Inputs: global (ceil(Kp / KSEG), Gc, Sx). Element (i, g, k) of x_codes is
 * noise element (i*G + g)*K + k, as on the CPU ((i*N + item)*R + r)*K + k. */
kernel void pf_dpe_pack_x(global const uchar *codes, global const float *x_scale, global const float *dac,
                          global float *A, global float *RS,
                          ulong G, ulong R, ulong K, ulong Kp, ulong Gc, ulong g0, ulong rows_valid, ulong n,
                          ulong x_qr, ulong x_qc, ulong x_gr, ulong x_gc,
                          int noise_x, float vnoise, ulong seed, uint call)
{
    const ulong k0 = get_global_id(0) * PF_KSEG, gc = get_global_id(1), i = get_global_id(2);
    if (k0 >= Kp || gc >= Gc)
        return;
    const ulong k1 = min(k0 + PF_KSEG, Kp);
    global float *dst = A + i * Kp * Gc + gc;
    if (gc >= rows_valid) {
        for (ulong k = k0; k < k1; k++)
            dst[k * Gc] = 0.0f;
        if (i == 0)
            for (ulong k = ((k0 + n - 1) / n) * n; k < k1; k += n)
                RS[(k / n) * Gc + gc] = 0.0f;
        return;
    }
    const ulong g = g0 + gc, item = g / R, r = g % R;
    if (i == 0) {
        global const float *scale_row = x_scale + (item * x_gr + r / x_qr) * x_gc;
        for (ulong k = ((k0 + n - 1) / n) * n; k < k1; k += n)
            RS[(k / n) * Gc + gc] = scale_row[k / x_qc];
    }
    const ulong base = (i * G + g) * K;
    global const float *dac_i = dac + i * 256;
    ulong cur = ~(ulong)0;
    float4 z = (float4)(0.0f);
    for (ulong k = k0; k < k1; k++) {
        float V = 0.0f;
        if (k < K) {
            uint v = codes[base + k];
            if (v != 0) {
                V = dac_i[v];
                if (noise_x) {
                    ulong idx = base + k;
                    if ((idx >> 2) != cur) {
                        cur = idx >> 2;
                        z = pf_normal4(seed, PF_STREAM_VNOISE, call, cur);
                    }
                    V = V * (1.0f + vnoise * pf_lane(z, (uint)(idx & 3)));
                }
            }
        }
        dst[k * Gc] = V;
    }
}

/* Weights: global (ceil(Pp / KSEG), Kp, Sw). Cell (j, k, p) is noise element
 * (j*K + k)*P + p. val = L without noise; with noise, as pack_w in dpe.c:
 * f = exp(sigma[L] * z) (or 1), val = (G / QG) * f - lgs or (L + lgs) * f - lgs. */
kernel void pf_dpe_pack_w(global const uchar *levels, global const float *cond, global const float *sigma,
                          global const float *w_scale, global float *B, global float *CS,
                          ulong K, ulong P, ulong Kp, ulong Pp, ulong n, ulong w_qr, ulong w_qc, ulong w_gc,
                          int noise_w, int has_cond, int has_sigma, float QG, float lgs, ulong seed, uint call)
{
    const ulong p0 = get_global_id(0) * PF_KSEG, k = get_global_id(1), j = get_global_id(2);
    if (p0 >= Pp || k >= Kp)
        return;
    const ulong p1 = min(p0 + PF_KSEG, Pp);
    if (j == 0 && k % n == 0) {
        global float *cs = CS + (k / n) * Pp;
        global const float *srow = w_scale + (k / w_qr) * w_gc;
        for (ulong p = p0; p < p1; p++)
            cs[p] = p < P ? srow[p / w_qc] : 0.0f;
    }
    global float *dst = B + (j * Kp + k) * Pp;
    if (k >= K) {
        for (ulong p = p0; p < p1; p++)
            dst[p] = 0.0f;
        return;
    }
    const ulong cell0 = (j * K + k) * P;
    ulong cur = ~(ulong)0;
    float4 z = (float4)(0.0f);
    for (ulong p = p0; p < p1; p++) {
        float val = 0.0f;
        if (p < P) {
            uint L = levels[cell0 + p];
            if (!noise_w) {
                val = (float)L;
            } else {
                float f = 1.0f;
                if (has_sigma) {
                    ulong idx = cell0 + p;
                    if ((idx >> 2) != cur) {
                        cur = idx >> 2;
                        z = pf_normal4(seed, PF_STREAM_READ, call, cur);
                    }
                    f = sigma[L] * pf_lane(z, (uint)(idx & 3));
                    /* the CPU's pf_exp_inplace: SLEEF on runs of 8, libm on the row's tail */
                    f = p < (P & ~(ulong)7) ? pf_sleef_expf(f) : pf_libm_expf(f);
                }
                if (has_cond)
                    val = (cond[cell0 + p] / QG) * f - lgs;
                else
                    val = ((float)L + lgs) * f - lgs;
            }
        }
        dst[p] = val;
    }
}

/* Tile kernel: global (Pp / PF_TN, Gc / PF_TM). fparams = coef[sx*sw] then
 * alpha[sw]; tab_info[2j] >= 0 selects the exact code table of slice j at
 * tables + tab_info[2j] (indices clamped to [0, tab_info[2j+1]]). Writes rows
 * [g0, g0 + rows_valid) of out (rows of P floats). */
kernel void pf_dpe_mvm(global const float *A, global const float *B, global const float *RS,
                       global const float *CS, global const float *fparams, global const float *tables,
                       global const int *tab_info, global float *out,
                       ulong g0, ulong rows_valid, ulong Gc, ulong Kp, ulong Pp, ulong P,
                       int n, int nb, int sx, int sw, int use_table)
{
    const ulong cb = get_global_id(0) * PF_TN, rb = get_global_id(1) * PF_TM;
    if (cb >= Pp || rb >= Gc)
        return;
    pf_vec o[PF_TM];
    pf_vec tb[PF_TM];
    pf_vec acc[PF_TM];
    for (int r = 0; r < PF_TM; r++)
        o[r] = (pf_vec)(0.0f);
    for (int b = 0; b < nb; b++) {
        for (int r = 0; r < PF_TM; r++)
            tb[r] = (pf_vec)(0.0f);
        for (int i = 0; i < sx; i++) {
            global const float *Ab = A + ((ulong)i * Kp + (ulong)b * n) * Gc + rb;
            for (int j = 0; j < sw; j++) {
                global const float *Bb = B + ((ulong)j * Kp + (ulong)b * n) * Pp + cb;
                for (int r = 0; r < PF_TM; r++)
                    acc[r] = (pf_vec)(0.0f);
                for (int k = 0; k < n; k++) {
                    const pf_vec bv = PF_VLOAD(Bb + (ulong)k * Pp);
                    global const float *ak = Ab + (ulong)k * Gc;
#pragma unroll
                    for (int r = 0; r < PF_TM; r++)
                        acc[r] = fma((pf_vec)(ak[r]), bv, acc[r]);
                }
                const float coef = fparams[i * sw + j];
                const int off = use_table ? tab_info[2 * j] : -1;
                if (off >= 0) {
                    global const float *tab = tables + off;
                    const int hi = tab_info[2 * j + 1];
                    for (int r = 0; r < PF_TM; r++) {
                        float a[PF_TN], code[PF_TN];
                        PF_VSTORE(acc[r], a);
                        for (int c = 0; c < PF_TN; c++) {
                            int idx = convert_int(a[c]);
                            idx = idx < 0 ? 0 : idx > hi ? hi : idx;
                            code[c] = tab[idx];
                        }
                        tb[r] = tb[r] + PF_VLOAD(code) * coef;
                    }
                } else {
                    const float alpha = fparams[sx * sw + j];
                    for (int r = 0; r < PF_TM; r++)
                        tb[r] = tb[r] + rint(acc[r] * alpha) * coef;
                }
            }
        }
        const pf_vec cs = PF_VLOAD(CS + (ulong)b * Pp + cb);
        global const float *rs = RS + (ulong)b * Gc + rb;
        for (int r = 0; r < PF_TM; r++)
            o[r] = o[r] + tb[r] * ((pf_vec)(rs[r]) * cs);
    }
    for (int r = 0; r < PF_TM; r++) {
        if (rb + r >= rows_valid)
            break;
        global float *dst = out + (g0 + rb + r) * P + cb;
        float v[PF_TN];
        PF_VSTORE(o[r], v);
        for (int c = 0; c < PF_TN && cb + c < P; c++)
            dst[c] = v[c];
    }
}
