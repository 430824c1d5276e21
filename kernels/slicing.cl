/* Bit-slice/quantize and weight programming on OpenCL devices: the contract
 * of csrc/core/slicing.h (pf_slice_quantize, pf_program_conductance) with the
 * arithmetic of csrc/core/quantize.h (base.cl), so every output is bit-identical
 * to the CPU's. Stages of slice_quantize (the CPU's, split for the device):
 *   pf_slice_max    global (N*R, ceil(C/span)): max of the abs bit patterns
 *                   of each granule's part of one row span, merged with
 *                   atomic_max into the granule's word (abs bits
 *                   of non-negative floats order as the floats; NaN/inf land
 *                   at >= 0x7f800000). Max is exact: any order, same result.
 *   pf_slice_stats  global (N*gr*gc): bits -> gran_max, gran_scale, gran_exp;
 *                   *bad = 1 on NaN or infinity.
 *   pf_slice_quant  global (C/256, N*R): quantize, two's complement, slice codes,
 *                   optional dequantized value and programmed levels; for
 *                   granules one row high and at most 256 wide it also does
 *                   the first two stages, which then do not run (row_max). */
#pragma OPENCL FP_CONTRACT OFF

kernel void pf_slice_max(global const float *x, global uint *gbits, ulong NR, ulong R, ulong C, ulong qr, ulong qc,
                         ulong gr, ulong gcn, ulong span)
{
    const ulong row = get_global_id(0), c0 = get_global_id(1) * span;
    if (row >= NR || c0 >= C)
        return;
    const ulong c1 = min(c0 + span, C);
    global const float *src = x + row * C;
    global uint *dst = gbits + ((row / R) * gr + (row % R) / qr) * gcn;
    ulong q = c0 / qc, next = min((q + 1) * qc, c1);
    for (ulong c = c0; c < c1;) {
        uint m = 0;
        for (; c < next; c++)
            m = max(m, as_uint(src[c]) & 0x7fffffffu);
        if (m)
            atomic_max(&dst[q], m);
        q++;
        next = min(next + qc, c1);
    }
}

/* Scale (and exponent) of granule i from the bits of its max-abs; *bad = 1 on NaN or infinity. */
inline void pf_granule_stats(uint bits, ulong i, global float *gscale, global int *gexp, global int *bad,
                             int total_bits, int bfp)
{
    if (bits >= 0x7f800000u) {
        *bad = 1;
        return;
    }
    const pf_qgran g = pf_qgran_make(as_float(bits), total_bits, bfp);
    gscale[i] = g.scale;
    if (bfp)
        gexp[i] = g.exponent;
}

kernel void pf_slice_stats(global float *gmax, global float *gscale, global int *gexp, global int *bad, ulong count,
                           int total_bits, int bfp)
{
    const ulong i = get_global_id(0);
    if (i < count)
        pf_granule_stats(as_uint(gmax[i]), i, gscale, gexp, bad, total_bits, bfp);
}

#define PF_SQ_CHUNK 256

/* The vector steps of pf_slice_quant, one template for runs of W = 16 and 8
 * elements of one granule: the operations of pf_quantize / pf_dequantize /
 * pf_level_of_code lane by lane (IEEE float ops: the same bits as scalar).
 * Runs of 16 pack codes into bytes with whole-register instructions on PoCL
 * (~15% faster than runs of 8 on the weight case); runs of 8 cover granules
 * narrower than 16. pf_store_bytesW: one aligned store of the W bytes where it
 * can (PoCL turns vstore8/16 of uchars into one store per byte). The step is
 * inlined and takes the granule by value: PoCL otherwise copies the pf_qgran
 * through memory at each step. */
#define PF_SQ_STEP(W, STORE_T)                                                                                       \
    inline float##W pf_rint##W(float##W x)                                                                           \
    {                                                                                                                \
        const float##W ax = fabs(x);                                                                                 \
        const float##W r = copysign((ax + 8388608.0f) - 8388608.0f, x);                                              \
        return select(x, r, ax < 8388608.0f);                                                                        \
    }                                                                                                                \
    inline void pf_store_bytes##W(uchar##W v, global uchar *p)                                                       \
    {                                                                                                                \
        if (((ulong)p & (W - 1)) == 0)                                                                               \
            *(global STORE_T *)p = as_##STORE_T(v);                                                                  \
        else                                                                                                         \
            vstore##W(v, 0, p);                                                                                      \
    }                                                                                                                \
    __attribute__((always_inline)) inline void pf_slice_quant##W(                                                    \
        global const float *x, ulong e, const pf_qgran g, global uchar *codes, global float *dq,                    \
        global uchar *levels, ulong total, int total_bits, ulong offs, int nslices, int want_dq, int g_level,        \
        const uchar *level_mul)                                                                                      \
    {                                                                                                                \
        const float##W v = vload##W(0, x + e);                                                                       \
        int##W qv;                                                                                                   \
        if (!g.bfp) { /* clamped to [-K, K] (NaN to -K) as csrc/core/quantize.h: racing writers */                  \
            float##W y = pf_rint##W(v / g.divisor * g.k);                                                            \
            y = select((float##W)(-g.k), y, y >= -g.k);                                                              \
            y = select(y, (float##W)(g.k), y > g.k);                                                                 \
            qv = convert_int##W(y);                                                                                  \
        } else {                                                                                                     \
            float##W y = pf_rint##W(v * g.inv_pow2e * g.pow2_bm2);                                                   \
            y = select((float##W)(g.qmin), y, y >= g.qmin);                                                          \
            y = select(y, (float##W)(g.qmax), y > g.qmax);                                                           \
            qv = convert_int##W(y);                                                                                  \
        }                                                                                                            \
        const int##W u = qv + select((int##W)(0), (int##W)(1 << total_bits), qv < 0);                                \
        if (want_dq)                                                                                                 \
            vstore##W(g.bfp ? convert_float##W(qv) * g.scale : convert_float##W(qv) / g.k * g.divisor, 0, dq + e);  \
        for (int s = 0; s < nslices; s++) {                                                                          \
            const int mask = pf_slice_max_code(offs, s, nslices, total_bits);                                        \
            const int##W code = (u >> pf_slice_offset(offs, s)) & mask;                                              \
            pf_store_bytes##W(convert_uchar##W(code), codes + (ulong)s * total + e);                                 \
            if (g_level > 0)                                                                                         \
                pf_store_bytes##W(level_mul[s] ? convert_uchar##W(code * (int)level_mul[s])                           \
                                               : convert_uchar##W(convert_int##W(pf_rint##W(                          \
                                                     convert_float##W(code) / (float)mask * (float)(g_level - 1)))), \
                                  levels + (ulong)s * total + e);                                                    \
        }                                                                                                            \
    }
PF_SQ_STEP(16, ulong2)
PF_SQ_STEP(8, ulong)

/* level_mul[s] > 0: (g_level - 1) is a multiple of slice s's max code m, and
 * its level of code c, rint(c / m * (g_level - 1)) in floats
 * (pf_level_of_code), is exactly c * level_mul[s]: the float expression's
 * rounding error is below 2^-22 of a level <= 255. A multiply, not a divide
 * (the divide was half the weight case's time on PoCL). */
inline void pf_level_multipliers(uchar *level_mul, ulong offs, int nslices, int total_bits, int g_level)
{
    for (int s = 0; s < 16; s++) {
        level_mul[s] = 0;
        if (s < nslices && g_level > 0) {
            const int m = pf_slice_max_code(offs, s, nslices, total_bits);
            if ((g_level - 1) % m == 0)
                level_mul[s] = (uchar)((g_level - 1) / m);
        }
    }
}

/* global (ceil(C / PF_SQ_CHUNK), N*R): PF_SQ_CHUNK consecutive elements of
 * one row per work-item, the granule's parameters made once per granule run;
 * runs of 16 and 8 inside one granule go through pf_slice_quant16/8. offs:
 * bit offsets of the slices (pf_slice_code_packed); g_level > 0: programmed
 * levels too. row_max (granules one row high, qr = 1): the kernel finds each
 * granule's max itself, instead of pf_slice_max and pf_slice_stats before it,
 * so x is read from memory once (the granule is in cache when quantized); the
 * work-item holding a granule's first column writes its max, scale and
 * exponent, and *bad = 1 on NaN or infinity. */
kernel void pf_slice_quant(global const float *x, global float *gmax, global uchar *codes, global float *dq,
                           global uchar *levels, ulong total, ulong NR, ulong R, ulong C, ulong qr, ulong qc,
                           ulong gr, ulong gcn, int total_bits, int bfp, ulong offs, int nslices, int want_dq,
                           int g_level, int row_max, global float *gscale, global int *gexp, global int *bad)
{
    const ulong row = get_global_id(1), c0 = get_global_id(0) * PF_SQ_CHUNK;
    if (row >= NR || c0 >= C)
        return;
    const ulong c1 = min(c0 + PF_SQ_CHUNK, C);
    uchar level_mul[16];
    pf_level_multipliers(level_mul, offs, nslices, total_bits, g_level);
    const ulong gi0 = ((row / R) * gr + (row % R) / qr) * gcn;
    for (ulong c = c0; c < c1;) {
        /* one granule's run, its parameters in registers (a pf_qgran
         * reassigned inside the element loop is reloaded per vector step on PoCL) */
        const ulong q = c / qc, end = min((q + 1) * qc, c1);
        float mx;
        if (row_max) {
            const ulong g0 = q * qc, g1 = min(g0 + qc, C);
            uint m = 0;
            for (ulong k = g0; k < g1; k++)
                m = max(m, as_uint(x[row * C + k]) & 0x7fffffffu);
            mx = as_float(m);
            if (g0 >= c0) {
                gmax[gi0 + q] = mx;
                pf_granule_stats(m, gi0 + q, gscale, gexp, bad, total_bits, bfp);
            }
        } else {
            mx = gmax[gi0 + q];
        }
        const pf_qgran g = pf_qgran_make(mx, total_bits, bfp);
        while (c < end) {
            const ulong e = row * C + c;
            if (c + 16 <= end && e % 16 == 0) {
                pf_slice_quant16(x, e, g, codes, dq, levels, total, total_bits, offs, nslices, want_dq, g_level,
                                 level_mul);
                c += 16;
                continue;
            }
            if (c + 8 <= end && e % 8 == 0) {
                pf_slice_quant8(x, e, g, codes, dq, levels, total, total_bits, offs, nslices, want_dq, g_level,
                                level_mul);
                c += 8;
                continue;
            }
            const int qv = pf_quantize(x[e], &g);
            const int u = pf_twos_complement(qv, total_bits);
            if (want_dq)
                dq[e] = pf_dequantize(qv, &g);
            for (int s = 0; s < nslices; s++) {
                const uint code = pf_slice_code_packed(u, offs, s, nslices, total_bits);
                codes[(ulong)s * total + e] = (uchar)code;
                if (g_level > 0)
                    levels[(ulong)s * total + e] = (uchar)pf_rintf(
                        (float)code / (float)pf_slice_max_code(offs, s, nslices, total_bits) * (float)(g_level - 1));
            }
            c++;
        }
    }
}

/* Standard normals of one group as the CPU's scalar pf_normal4
 * (csrc/core/philox_noise.h): log, sqrt, sin and cos in double, as C's <math.h>
 * evaluates them there (float builtins without fp64: equal up to an ulp). */
inline float4 pf_normal4_scalar(ulong seed, uint stream, uint call, ulong group)
{
    const uint4 r = pf_philox_group(seed, stream, call, group);
    const float two_pi = 6.283185307179586f;
#ifdef PF_HAVE_FP64
    const float r0 = (float)sqrt(-2.0 * log((double)pf_u01(r.s0)));
    const float t0 = two_pi * pf_u01(r.s1);
    const float r1 = (float)sqrt(-2.0 * log((double)pf_u01(r.s2)));
    const float t1 = two_pi * pf_u01(r.s3);
    return (float4)((float)((double)r0 * cos((double)t0)), (float)((double)r0 * sin((double)t0)),
                    (float)((double)r1 * cos((double)t1)), (float)((double)r1 * sin((double)t1)));
#else
    const float r0 = sqrt(-2.0f * log(pf_u01(r.s0)));
    const float t0 = two_pi * pf_u01(r.s1);
    const float r1 = sqrt(-2.0f * log(pf_u01(r.s2)));
    const float t1 = two_pi * pf_u01(r.s3);
    return (float4)(r0 * cos(t0), r0 * sin(t0), r1 * cos(t1), r1 * sin(t1));
#endif
}

/* Programmed conductances (pf_program_conductance): one Philox group (4
 * cells) per work-item, global (ceil(total / 4)). th_hgs, th_any: the
 * smallest floats >= the double thresholds, so r < th equals the CPU's
 * double comparison for every float r. */
kernel void pf_program_cond(global const uchar *levels, global float *G, ulong total, float q_g, float lgs, float hgs,
                            float wv, int noisy, int stuck, float th_hgs, float th_any, ulong seed)
{
    const ulong q = get_global_id(0);
    if (q * 4 >= total)
        return;
    const float4 z = noisy ? pf_normal4_scalar(seed, PF_STREAM_WRITE, 0, q) : (float4)(0.0f);
    const uint4 w = stuck ? pf_philox_group(seed, PF_STREAM_STUCK, 0, q) : (uint4)(0);
    for (uint l = 0; l < 4; l++) {
        const ulong idx = q * 4 + l;
        if (idx >= total)
            break;
        float g = (float)levels[idx] * q_g + lgs;
        if (noisy)
            g = g + g * (wv * pf_lane(z, l));
        if (stuck) {
            const float r = pf_u01(l == 0 ? w.s0 : l == 1 ? w.s1 : l == 2 ? w.s2 : w.s3);
            if (r < th_hgs)
                g = hgs;
            else if (r < th_any)
                g = lgs;
        }
        G[idx] = g;
    }
}
