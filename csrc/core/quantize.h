/* Per-element bit-slicing quantizer (spec sections 1, 3, 4, 5).
 *
 * Header-only and Python-free so that slicing.c and the fused MVM kernel
 * (which quantizes inputs on the fly, e.g. for an implicit im2col) compute
 * bit-identical codes. Every function is float32 arithmetic in the spec's
 * order, rounding half to even with nearbyintf (never roundf); the file is
 * compiled with -ffp-contract=off so nothing is fused into an FMA.
 *
 * Use: once per granule, g = pf_quant_granule_make(M, B, bfp) from its
 * max-abs M (gran_max; for BFP pf_quant_granule_bfp(e, B) from gran_exp gives
 * the same); then per element, q = pf_quantize(x, &g) and
 * code_s = pf_slice_code(pf_twos_complement(q, B), sm.offset[s], sm.width[s]).
 * Host C (memcpy, frexpf); an OpenCL port would swap memcpy for as_uint.
 * The specialised pf_quantize_int / pf_quantize_bfp are what vectorizing
 * loops call (the granule's mode is hoisted out of the loop). */
#ifndef PF_QUANTIZE_H
#define PF_QUANTIZE_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#define PF_MAX_SLICES 16    /* at most 16 bits in total, each slice >= 1 bit */
#define PF_MAX_TOTAL_BITS 16
#define PF_MAX_SLICE_WIDTH 8 /* slice codes are uint8 */
#define PF_BFP_EPS 1e-10f   /* e = floor(log2(M + 1e-10)) */

/* A slice method, indexed least significant first (s = 0 holds the lowest
 * bits, s = n_slices - 1 the sign bit). Built by pf_slice_method_init. */
typedef struct {
    int n_slices;                  /* S */
    int total_bits;                /* B = sum of widths */
    int width[PF_MAX_SLICES];      /* widths[S-1-s] of the user's list */
    int offset[PF_MAX_SLICES];     /* off[s]: bits below slice s */
    int max_code[PF_MAX_SLICES];   /* m[s] = 2**width - 1 */
    int32_t weight[PF_MAX_SLICES]; /* w[s] = 2**off[s]; w[S-1] = -2**(B-1) */
} pf_slice_method;

/* Quantization parameters of one granule. INT: q = rint(x / divisor * k).
 * BFP: q = clip(rint(x * inv_pow2e * pow2_bm2), qmin, qmax); multiplying by
 * the exact power of two 2**-e gives the same float as dividing by 2**e
 * (both are the correctly rounded x * 2**-e, and 2**-e is representable for
 * every e this code produces, -34..127). */
typedef struct {
    int bfp;          /* 0: INT (section 3), 1: BFP (section 4) */
    float divisor;    /* INT: M, or 1 when M == 0 (then every x is 0 and q = 0) */
    float k;          /* INT: K = 2**(B-1) - 1 */
    float inv_pow2e;  /* BFP: 2**-e */
    float pow2_bm2;   /* BFP: 2**(B-2) */
    float qmin, qmax; /* BFP clip: -2**(B-1), 2**(B-1) - 1 */
    float scale;      /* block scale: INT M / K (0 when M == 0), BFP 2**(e+2-B) */
    int32_t exponent; /* BFP: e */
} pf_quant_granule;

/* Fills *sm from widths given most significant first (as users write them).
 * Returns 0, or -1 when the method is invalid: n outside 1..PF_MAX_SLICES,
 * widths[0] != 1, a width outside 1..PF_MAX_SLICE_WIDTH, or B outside
 * 2..PF_MAX_TOTAL_BITS (B = 1 would give K = 0). */
static inline int pf_slice_method_init(pf_slice_method *sm, const int *widths, int n)
{
    if (n < 1 || n > PF_MAX_SLICES || widths[0] != 1)
        return -1;
    int total = 0;
    for (int i = 0; i < n; i++) {
        if (widths[i] < 1 || widths[i] > PF_MAX_SLICE_WIDTH)
            return -1;
        total += widths[i];
    }
    if (total < 2 || total > PF_MAX_TOTAL_BITS)
        return -1;
    memset(sm, 0, sizeof *sm);
    sm->n_slices = n;
    sm->total_bits = total;
    int off = 0;
    for (int s = 0; s < n; s++) {
        sm->width[s] = widths[n - 1 - s];
        sm->offset[s] = off;
        sm->max_code[s] = (1 << sm->width[s]) - 1;
        sm->weight[s] = (int32_t)1 << off;
        off += sm->width[s];
    }
    sm->weight[n - 1] = -((int32_t)1 << (total - 1));
    return 0;
}

/* Whether *sm is a slice method pf_slice_method_init could have built (the
 * kernels re-check what memory safety depends on). */
static inline int pf_slice_method_valid(const pf_slice_method *sm)
{
    if (!sm || sm->n_slices < 1 || sm->n_slices > PF_MAX_SLICES || sm->total_bits < 2 ||
        sm->total_bits > PF_MAX_TOTAL_BITS)
        return 0;
    int total = 0;
    for (int s = 0; s < sm->n_slices; s++) {
        if (sm->width[s] < 1 || sm->width[s] > PF_MAX_SLICE_WIDTH || sm->offset[s] != total)
            return 0;
        total += sm->width[s];
    }
    return total == sm->total_bits && sm->width[sm->n_slices - 1] == 1;
}

/* Exact 2**e as a float for e in [-149, 127] (normals by their bits, the
 * few subnormals through ldexpf): cheaper than ldexpf per granule. */
static inline float pf_pow2f(int e)
{
    if (e < -126)
        return ldexpf(1.0f, e);
    uint32_t bits = (uint32_t)(e + 127) << 23;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* e = floor(log2(M + 1e-10)), the sum in float32 and the logarithm exact
 * (frexpf), so e never depends on a libm's log2f rounding near powers of two. */
static inline int32_t pf_bfp_exponent(float max_abs)
{
    int ex;
    float v = max_abs + PF_BFP_EPS;
    (void)frexpf(v, &ex); /* v = f * 2**ex, f in [0.5, 1) */
    return (int32_t)(ex - 1);
}

/* BFP parameters from the exponent alone (what the MVM kernel has stored). */
static inline pf_quant_granule pf_quant_granule_bfp(int32_t e, int total_bits)
{
    pf_quant_granule g;
    memset(&g, 0, sizeof g);
    g.bfp = 1;
    g.exponent = e;
    g.inv_pow2e = pf_pow2f(-e);
    g.pow2_bm2 = pf_pow2f(total_bits - 2);
    g.qmin = -pf_pow2f(total_bits - 1);
    g.qmax = pf_pow2f(total_bits - 1) - 1.0f;
    g.scale = pf_pow2f(e + 2 - total_bits);
    return g;
}

/* Parameters of a granule of max-abs M (finite, >= 0) for a method of B bits. */
static inline pf_quant_granule pf_quant_granule_make(float max_abs, int total_bits, int bfp)
{
    pf_quant_granule g;
    memset(&g, 0, sizeof g);
    g.bfp = bfp;
    if (!bfp) {
        g.k = (float)((1 << (total_bits - 1)) - 1);
        g.divisor = max_abs > 0.0f ? max_abs : 1.0f;
        g.scale = max_abs > 0.0f ? max_abs / g.k : 0.0f;
        return g;
    }
    return pf_quant_granule_bfp(pf_bfp_exponent(max_abs), total_bits);
}

/* Section 3: q = rint(x / M * K); divisor = M, or 1 when M == 0.
 * q is clamped to [-K, K] (NaN to -K): a no-op when |x| <= M, as the max pass
 * guarantees, but an input another thread writes between the max pass and
 * this one then gives a bounded error instead of wrapped two's complement
 * codes (and no undefined float-to-int conversion). */
static inline int32_t pf_quantize_int(float x, float divisor, float k)
{
    float y = nearbyintf(x / divisor * k);
    y = !(y >= -k) ? -k : y;
    y = y > k ? k : y;
    return (int32_t)y;
}

/* Section 4: q = clip(rint(x / 2**e * 2**(B-2)), -2**(B-1), 2**(B-1)-1) (NaN, only
 * possible from a racing writer, to qmin). */
static inline int32_t pf_quantize_bfp(float x, float inv_pow2e, float pow2_bm2, float qmin, float qmax)
{
    float y = nearbyintf(x * inv_pow2e * pow2_bm2);
    y = !(y >= qmin) ? qmin : y;
    y = y > qmax ? qmax : y;
    return (int32_t)y;
}

static inline int32_t pf_quantize(float x, const pf_quant_granule *g)
{
    return g->bfp ? pf_quantize_bfp(x, g->inv_pow2e, g->pow2_bm2, g->qmin, g->qmax)
                  : pf_quantize_int(x, g->divisor, g->k);
}

/* Dequantized value: INT (q / K) * M, BFP q * 2**(e+2-B). (When M == 0 the
 * only q is 0, so the divisor 1 standing in for M still gives 0.) */
static inline float pf_dequantize_int(int32_t q, float divisor, float k) { return (float)q / k * divisor; }
static inline float pf_dequantize_bfp(int32_t q, float scale) { return (float)q * scale; }
static inline float pf_dequantize(int32_t q, const pf_quant_granule *g)
{
    return g->bfp ? pf_dequantize_bfp(q, g->scale) : pf_dequantize_int(q, g->divisor, g->k);
}

/* Section 5: u = q, or q + 2**B when q < 0 (two's complement in B bits). */
static inline int32_t pf_twos_complement(int32_t q, int total_bits)
{
    return q < 0 ? q + ((int32_t)1 << total_bits) : q;
}

/* Code of the slice at bit offset off and width bits: (u >> off) & (2**width - 1). */
static inline uint8_t pf_slice_code(int32_t u, int offset, int width)
{
    return (uint8_t)((u >> offset) & ((1 << width) - 1));
}

/* Section 6: L = rint(code / m * (g_level - 1)), float32. */
static inline uint8_t pf_level_of_code(int code, int max_code, int g_level)
{
    return (uint8_t)nearbyintf((float)code / (float)max_code * (float)(g_level - 1));
}

#endif
