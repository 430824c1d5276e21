/* Prelude of every pyfastpim OpenCL program (csrc/opencl/runtime.c puts it first).
 *
 * Exact float semantics: no contraction of a*b+c into fma behind our back
 * (kernels call fma() explicitly where the CPU path uses FMA instructions),
 * and the host adds -cl-fp32-correctly-rounded-divide-sqrt when the device
 * supports it.
 *
 * Counter-based device noise: a transcription of csrc/core/philox_noise.h into
 * OpenCL C (Random123's philox4x32-10 with the same key/counter layout, the
 * same u01 and Box-Muller formulas), embedded so the module needs no headers
 * at run time.
 *
 * Bit-identical noise. The CPU path (noise_avx2.c) evaluates log and sin/cos
 * with SLEEF 3.5's AVX2 algorithms (logf_u35, sincosf_u35; inline there too,
 * cpu/sleef_fma8.h), sqrt with the
 * correctly rounded instruction and exp with expf_u10. The device's builtins
 * differ from those by an ulp here and there, which flips an ADC code now and
 * then (a norm-wise relative difference of ~1e-5 at 12-bit ADCs, more at
 * coarse ADCs). So the pf_sleef_* functions below transcribe SLEEF's FMA
 * algorithms operation by operation (scalar, explicit fma(), no contraction;
 * source: SLEEF 3.5.1 src/libm/sleefsimdsp.c, Boost licence): with IEEE float
 * arithmetic (the host adds -cl-fp32-correctly-rounded-divide-sqrt for the
 * division and sqrt) they return exactly what the CPU path computes, on any
 * OpenCL device. (The CPU uses SLEEF's expf on every element, a row's tail
 * included: glibc's expf is not correctly rounded, so no device could match it.)
 * tests/backends/test_opencl.py checks normals and noisy products against the CPU. */
#pragma OPENCL FP_CONTRACT OFF

#define PF_STREAM_READ 0u
#define PF_STREAM_VNOISE 1u
#define PF_STREAM_WRITE 2u
#define PF_STREAM_STUCK 3u

#define PF_PHILOX_M0 0xD2511F53u
#define PF_PHILOX_M1 0xCD9E8D57u
#define PF_PHILOX_W0 0x9E3779B9u
#define PF_PHILOX_W1 0xBB67AE85u

/* philox4x32-10 of counter (group lo, group hi, call, stream), key = seed. */
inline uint4 pf_philox_group(ulong seed, uint stream, uint call, ulong group)
{
    uint c0 = (uint)group, c1 = (uint)(group >> 32), c2 = call, c3 = stream;
    uint k0 = (uint)seed, k1 = (uint)(seed >> 32);
    for (int round = 0; round < 10; round++) {
        if (round > 0) {
            k0 += PF_PHILOX_W0;
            k1 += PF_PHILOX_W1;
        }
        uint hi0 = mul_hi(PF_PHILOX_M0, c0), lo0 = PF_PHILOX_M0 * c0;
        uint hi1 = mul_hi(PF_PHILOX_M1, c2), lo1 = PF_PHILOX_M1 * c2;
        uint n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
        c0 = n0;
        c1 = lo1;
        c2 = n2;
        c3 = lo0;
    }
    return (uint4)(c0, c1, c2, c3);
}

/* ---- SLEEF 3.5.1 (FMA variants) transcribed ---- */

/* Sleef_logf_u35 (xlogf) */
inline float pf_sleef_logf(float d)
{
    const int o = d < FLT_MIN;
    if (o)
        d = d * (18446744073709551616.0f * 18446744073709551616.0f);
    int e = ((as_int(d * 0x1.555556p+0f) >> 23) & 0xff) - 0x7f; /* ilogb2k(d * (1.0f / 0.75f)) */
    const float m = as_float(as_int(d) + ((-e) << 23));
    if (o)
        e -= 64;
    float x = (m - 1.0f) / (1.0f + m);
    const float x2 = x * x;
    float t = 0.2392828464508056640625f;
    t = fma(t, x2, 0.28518211841583251953125f);
    t = fma(t, x2, 0.400005877017974853515625f);
    t = fma(t, x2, 0.666666686534881591796875f);
    t = fma(t, x2, 2.0f);
    x = fma(x, t, 0.693147180559945286226764f * (float)e);
    if (isinf(d) && d > 0.0f)
        x = INFINITY;
    if (d < 0.0f || isnan(d))
        x = NAN;
    if (d == 0.0f)
        x = -INFINITY;
    return x;
}

/* Sleef_sincosf_u35 (xsincosf) for |d| < 125 (our angles are in (0, 2 pi)): (sin, cos) */
inline float2 pf_sleef_sincosf(float d)
{
    const int q = convert_int_rte(d * (float)0.636619772367581343075535053490057448);
    float u = (float)q;
    float s = fma(u, -3.1414794921875f * 0.5f, d);
    s = fma(u, -0.00011315941810607910156f * 0.5f, s);
    s = fma(u, -1.9841872589410058936e-09f * 0.5f, s);
    const float t = s;
    s = s * s;
    u = -0.000195169282960705459117889f;
    u = fma(u, s, 0.00833215750753879547119141f);
    u = fma(u, s, -0.166666537523269653320312f);
    float rx = fma(u * s, t, t);
    if (d == 0.0f && signbit(d))
        rx = -0.0f;
    u = -2.71811842367242206819355e-07f;
    u = fma(u, s, 2.47990446951007470488548e-05f);
    u = fma(u, s, -0.00138888787478208541870117f);
    u = fma(u, s, 0.0416666641831398010253906f);
    u = fma(u, s, -0.5f);
    const float ry = fma(s, u, 1.0f);
    const int even = (q & 1) == 0;
    float2 r = (float2)(even ? rx : ry, even ? ry : rx);
    if ((q & 2) == 2)
        r.x = as_float(as_int(r.x) ^ (int)0x80000000);
    if (((q + 1) & 2) == 2)
        r.y = as_float(as_int(r.y) ^ (int)0x80000000);
    return r;
}

/* Sleef_expf_u10 (xexpf) */
inline float pf_sleef_expf(float d)
{
    int q = convert_int_rte(d * 1.442695040888963407359924681001892137426645954152985934135449406931f);
    float s = fma((float)q, -0.693145751953125f, d);
    s = fma((float)q, -1.428606765330187045e-06f, s);
    float u = 0.000198527617612853646278381f;
    u = fma(u, s, 0.00139304355252534151077271f);
    u = fma(u, s, 0.00833336077630519866943359f);
    u = fma(u, s, 0.0416664853692054748535156f);
    u = fma(u, s, 0.166666671633720397949219f);
    u = fma(u, s, 0.5f);
    u = 1.0f + fma(s * s, u, s);
    u = (u * as_float(((q >> 1) + 0x7f) << 23)) * as_float(((q - (q >> 1)) + 0x7f) << 23);
    if (d < -104.0f)
        u = 0.0f;
    if (100.0f < d)
        u = INFINITY;
    return u;
}

#ifdef PF_HAVE_FP64 /* double arithmetic for kernels that need it (slicing.cl's scalar normals) */
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif

/* Uniform in (0, 1), never 0, from the top 24 bits (exact in float). */
inline float pf_u01(uint w)
{
    return ((float)(w >> 8) + 0.5f) * (1.0f / 16777216.0f);
}

/* Four standard normals of one group, in lane order. */
inline float4 pf_normal4(ulong seed, uint stream, uint call, ulong group)
{
    uint4 r = pf_philox_group(seed, stream, call, group);
    const float two_pi = 6.283185307179586f;
    float r0 = sqrt(-2.0f * pf_sleef_logf(pf_u01(r.s0)));
    float2 sc0 = pf_sleef_sincosf(two_pi * pf_u01(r.s1));
    float r1 = sqrt(-2.0f * pf_sleef_logf(pf_u01(r.s2)));
    float2 sc1 = pf_sleef_sincosf(two_pi * pf_u01(r.s3));
    return (float4)(r0 * sc0.y, r0 * sc0.x, r1 * sc1.y, r1 * sc1.x);
}

inline float pf_lane(float4 v, uint lane)
{
    return lane == 0 ? v.s0 : lane == 1 ? v.s1 : lane == 2 ? v.s2 : v.s3;
}

/* ---- csrc/core/quantize.h transcribed (spec sections 3-5) ----
 * Float32 in the spec's order, rint = round half to even, no contraction, the
 * division correctly rounded (host build option): the same codes as the CPU's
 * slicing stage and fused im2col packer. */
#define PF_BFP_EPS 1e-10f

typedef struct {
    float divisor, k;            /* INT: M (1 when M == 0), 2**(B-1) - 1 */
    float inv_pow2e, pow2_bm2;   /* BFP: 2**-e, 2**(B-2) */
    float qmin, qmax;            /* BFP clip */
    float scale;                 /* INT M / K (0 when M == 0), BFP 2**(e+2-B) */
    int exponent, bfp;
} pf_qgran;

/* rint (round half to even) by the 2^23 trick, exact for every float (see
 * pf_rint in dpe.cl): builtin rint is a library call on some runtimes (PoCL). */
inline float pf_rintf(float x)
{
    const float ax = fabs(x);
    const float r = copysign((ax + 8388608.0f) - 8388608.0f, x);
    return ax < 8388608.0f ? r : x;
}

/* exact 2**e for e in [-149, 127] */
inline float pf_pow2f(int e)
{
    return e < -126 ? ldexp(1.0f, e) : as_float((uint)(e + 127) << 23);
}

/* e = floor(log2(M + 1e-10)) by frexp (exact) */
inline int pf_bfp_exponent(float max_abs)
{
    int ex;
    (void)frexp(max_abs + PF_BFP_EPS, &ex);
    return ex - 1;
}

inline pf_qgran pf_qgran_bfp(int e, int total_bits)
{
    pf_qgran g;
    g.bfp = 1;
    g.exponent = e;
    g.divisor = 1.0f;
    g.k = 0.0f;
    g.inv_pow2e = pf_pow2f(-e);
    g.pow2_bm2 = pf_pow2f(total_bits - 2);
    g.qmin = -pf_pow2f(total_bits - 1);
    g.qmax = pf_pow2f(total_bits - 1) - 1.0f;
    g.scale = pf_pow2f(e + 2 - total_bits);
    return g;
}

inline pf_qgran pf_qgran_make(float max_abs, int total_bits, int bfp)
{
    if (bfp)
        return pf_qgran_bfp(pf_bfp_exponent(max_abs), total_bits);
    pf_qgran g;
    g.bfp = 0;
    g.exponent = 0;
    g.inv_pow2e = g.pow2_bm2 = g.qmin = g.qmax = 0.0f;
    g.k = (float)((1 << (total_bits - 1)) - 1);
    g.divisor = max_abs > 0.0f ? max_abs : 1.0f;
    g.scale = max_abs > 0.0f ? max_abs / g.k : 0.0f;
    return g;
}

inline int pf_quantize(float x, const pf_qgran *g)
{
    if (!g->bfp) { /* clamped to [-K, K] (NaN to -K) as csrc/core/quantize.h: racing writers */
        float q = pf_rintf(x / g->divisor * g->k);
        q = !(q >= -g->k) ? -g->k : q;
        return (int)(q > g->k ? g->k : q);
    }
    float y = pf_rintf(x * g->inv_pow2e * g->pow2_bm2);
    y = !(y >= g->qmin) ? g->qmin : y;
    y = y > g->qmax ? g->qmax : y;
    return (int)y;
}

inline float pf_dequantize(int q, const pf_qgran *g)
{
    return g->bfp ? (float)q * g->scale : (float)q / g->k * g->divisor;
}

inline int pf_twos_complement(int q, int total_bits)
{
    return q < 0 ? q + (1 << total_bits) : q;
}

/* The bit offsets of the slices are packed 4 bits each into offs (slice s at
 * bits 4s..4s+3); total_bits closes the last slice. */
inline int pf_slice_offset(ulong offs, int s) { return (int)((offs >> (4 * s)) & 15); }

/* Largest code of slice s: 2^width - 1. */
inline int pf_slice_max_code(ulong offs, int s, int nslices, int total_bits)
{
    const int next = s + 1 < nslices ? pf_slice_offset(offs, s + 1) : total_bits;
    return (1 << (next - pf_slice_offset(offs, s))) - 1;
}

/* Code of slice s of the two's-complement value u. */
inline uint pf_slice_code_packed(int u, ulong offs, int s, int nslices, int total_bits)
{
    return (uint)((u >> pf_slice_offset(offs, s)) & pf_slice_max_code(offs, s, nslices, total_bits));
}

/* ---- eight Philox groups at once (32 normals), as csrc/noise_avx2.c ----
 * The same operations lane by lane as pf_philox_group / pf_sleef_logf /
 * pf_sleef_sincosf / pf_normal4, on 8-lane vectors, for the arguments the
 * generator produces: u01 values in (0, 1) (normal floats, so logf's special
 * cases never apply) and angles in (0, 2 pi) (never -0). Bit-identical to the
 * scalar path; PoCL and GPUs run the vector code without relying on
 * work-item vectorization. */
/* hi and lo words of a * m, lane by lane, as the CPU's AVX2 Philox: even and
 * odd lanes as 64-bit products in place (32 x 32 -> 64 multiplies), no
 * repacking. PoCL builds a vector mul_hi from 16-bit pieces. */
inline void pf_mul_wide8(uint8 a, uint m, uint8 *hi, uint8 *lo)
{
    const ulong4 x = as_ulong4(a), lo32 = (ulong4)(0xffffffffUL);
    const ulong4 pe = (x & lo32) * (ulong)m, po = (x >> 32) * (ulong)m;
    *hi = as_uint8((pe >> 32) | (po & ~lo32));
    *lo = as_uint8((pe & lo32) | (po << 32));
}

inline void pf_philox8(ulong seed, uint stream, uint call, ulong group0, uint8 *o0, uint8 *o1, uint8 *o2, uint8 *o3)
{
    const ulong8 g = (ulong8)(group0) + (ulong8)(0, 1, 2, 3, 4, 5, 6, 7);
    uint8 c0 = convert_uint8(g), c1 = convert_uint8(g >> 32), c2 = (uint8)(call), c3 = (uint8)(stream);
    uint k0 = (uint)seed, k1 = (uint)(seed >> 32);
    for (int round = 0; round < 10; round++) {
        if (round > 0) {
            k0 += PF_PHILOX_W0;
            k1 += PF_PHILOX_W1;
        }
        uint8 hi0, lo0, hi1, lo1;
        pf_mul_wide8(c0, PF_PHILOX_M0, &hi0, &lo0);
        pf_mul_wide8(c2, PF_PHILOX_M1, &hi1, &lo1);
        const uint8 n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
        c0 = n0;
        c1 = lo1;
        c2 = n2;
        c3 = lo0;
    }
    *o0 = c0;
    *o1 = c1;
    *o2 = c2;
    *o3 = c3;
}

/* pf_sleef_expf lane by lane (pack_w's runs of 8, as the CPU's SLEEF expf8). */
inline float8 pf_sleef_expf8(float8 d)
{
    const int8 q = convert_int8_rte(d * 1.442695040888963407359924681001892137426645954152985934135449406931f);
    const float8 qf = convert_float8(q);
    float8 s = fma(qf, (float8)(-0.693145751953125f), d);
    s = fma(qf, (float8)(-1.428606765330187045e-06f), s);
    float8 u = (float8)(0.000198527617612853646278381f);
    u = fma(u, s, (float8)(0.00139304355252534151077271f));
    u = fma(u, s, (float8)(0.00833336077630519866943359f));
    u = fma(u, s, (float8)(0.0416664853692054748535156f));
    u = fma(u, s, (float8)(0.166666671633720397949219f));
    u = fma(u, s, (float8)(0.5f));
    u = 1.0f + fma(s * s, u, s);
    u = (u * as_float8(((q >> 1) + 0x7f) << 23)) * as_float8(((q - (q >> 1)) + 0x7f) << 23);
    u = select(u, (float8)(0.0f), d < -104.0f);
    return select(u, (float8)(INFINITY), 100.0f < d);
}

inline float8 pf_u01_8(uint8 w) { return (convert_float8(w >> 8) + 0.5f) * (1.0f / 16777216.0f); }

/* pf_sleef_logf for normal d in (0, 1) */
inline float8 pf_sleef_logf8(float8 d)
{
    const int8 e = ((as_int8(d * 0x1.555556p+0f) >> 23) & 0xff) - 0x7f;
    const float8 m = as_float8(as_int8(d) + ((-e) << 23));
    float8 x = (m - 1.0f) / (1.0f + m);
    const float8 x2 = x * x;
    float8 t = (float8)(0.2392828464508056640625f);
    t = fma(t, x2, (float8)(0.28518211841583251953125f));
    t = fma(t, x2, (float8)(0.400005877017974853515625f));
    t = fma(t, x2, (float8)(0.666666686534881591796875f));
    t = fma(t, x2, (float8)(2.0f));
    return fma(x, t, 0.693147180559945286226764f * convert_float8(e));
}

/* pf_sleef_sincosf for d in (0, 2 pi): *s = sin, *c = cos */
inline void pf_sleef_sincosf8(float8 d, float8 *sn, float8 *cs)
{
    const int8 q = convert_int8_rte(d * (float)0.636619772367581343075535053490057448);
    float8 u = convert_float8(q);
    float8 s = fma(u, (float8)(-3.1414794921875f * 0.5f), d);
    s = fma(u, (float8)(-0.00011315941810607910156f * 0.5f), s);
    s = fma(u, (float8)(-1.9841872589410058936e-09f * 0.5f), s);
    const float8 t = s;
    s = s * s;
    u = (float8)(-0.000195169282960705459117889f);
    u = fma(u, s, (float8)(0.00833215750753879547119141f));
    u = fma(u, s, (float8)(-0.166666537523269653320312f));
    const float8 rx = fma(u * s, t, t);
    u = (float8)(-2.71811842367242206819355e-07f);
    u = fma(u, s, (float8)(2.47990446951007470488548e-05f));
    u = fma(u, s, (float8)(-0.00138888787478208541870117f));
    u = fma(u, s, (float8)(0.0416666641831398010253906f));
    u = fma(u, s, (float8)(-0.5f));
    const float8 ry = fma(s, u, (float8)(1.0f));
    const int8 odd = (q & 1) != 0;
    const float8 a = select(rx, ry, odd), b = select(ry, rx, odd);
    *sn = as_float8(as_int8(a) ^ ((q & 2) << 30));
    *cs = as_float8(as_int8(b) ^ (((q + 1) & 2) << 30));
}

/* Normals of groups group0 .. group0 + 7: lane j of n0..n3 is element 4 (group0 + j) + 0..3. */
inline void pf_normal8x4(ulong seed, uint stream, uint call, ulong group0, float8 *n0, float8 *n1, float8 *n2,
                         float8 *n3)
{
    uint8 w0, w1, w2, w3;
    pf_philox8(seed, stream, call, group0, &w0, &w1, &w2, &w3);
    const float two_pi = 6.283185307179586f;
    const float8 r0 = sqrt(-2.0f * pf_sleef_logf8(pf_u01_8(w0)));
    const float8 r1 = sqrt(-2.0f * pf_sleef_logf8(pf_u01_8(w2)));
    float8 s0, c0, s1, c1;
    pf_sleef_sincosf8(two_pi * pf_u01_8(w1), &s0, &c0);
    pf_sleef_sincosf8(two_pi * pf_u01_8(w3), &s1, &c1);
    *n0 = r0 * c0;
    *n1 = r0 * s0;
    *n2 = r1 * c1;
    *n3 = r1 * s1;
}

/* ---- the MVM tile kernels' vector type and ADC (dpe.cl, dpe_tiled.cl) ---- */

#if PF_TN == 1
typedef float pf_vec;
#define PF_VLOAD(p) (*(p))
#define PF_VSTORE(v, p) (*(p) = (v))
typedef int pf_ivec;
#define PF_TO_INT convert_int
#define PF_TO_FLOAT convert_float
#elif PF_TN == 2
typedef float2 pf_vec;
#define PF_VLOAD(p) vload2(0, p)
#define PF_VSTORE(v, p) vstore2(v, 0, p)
typedef int2 pf_ivec;
#define PF_TO_INT convert_int2
#define PF_TO_FLOAT convert_float2
#elif PF_TN == 4
typedef float4 pf_vec;
#define PF_VLOAD(p) vload4(0, p)
#define PF_VSTORE(v, p) vstore4(v, 0, p)
typedef int4 pf_ivec;
#define PF_TO_INT convert_int4
#define PF_TO_FLOAT convert_float4
#elif PF_TN == 8
typedef float8 pf_vec;
#define PF_VLOAD(p) vload8(0, p)
#define PF_VSTORE(v, p) vstore8(v, 0, p)
typedef int8 pf_ivec;
#define PF_TO_INT convert_int8
#define PF_TO_FLOAT convert_float8
#elif PF_TN == 16
typedef float16 pf_vec;
#define PF_VLOAD(p) vload16(0, p)
#define PF_VSTORE(v, p) vstore16(v, 0, p)
typedef int16 pf_ivec;
#define PF_TO_INT convert_int16
#define PF_TO_FLOAT convert_float16
#else
#error "PF_TN must be 1, 2, 4, 8 or 16"
#endif

/* rint (round half to even) by the 2^23 trick, exact for every float: for
 * |x| < 2^23, (|x| + 2^23) - 2^23 rounds |x| to an integer in round-to-
 * nearest-even; |x| >= 2^23 is already an integer (or inf/nan). Builtin rint
 * on vectors is a library call on some runtimes (PoCL). */
inline pf_vec pf_rint(pf_vec x)
{
    const pf_vec ax = fabs(x);
    const pf_vec r = copysign((ax + 8388608.0f) - 8388608.0f, x);
    return ax < 8388608.0f ? r : x;
}

/* The ADC of slice pair (i, j) of one tile (pf_dpe_mvm, pf_dpe_mvm_tiled): tb[r] += code(acc[r]) *
 * coef[i][j], code the exact table of slice j where it has one (tab_info[2j] >= 0, indices clamped
 * to [0, tab_info[2j+1]]), else rint(acc * alpha[j]). fparams = coef[sx*sw] then alpha[sw]. */
inline void pf_adc_accumulate(pf_vec *tb, const pf_vec *acc, global const float *fparams, global const float *tables,
                              global const int *tab_info, int i, int j, int sx, int sw, int use_table)
{
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
            tb[r] = tb[r] + pf_rint(acc[r] * alpha) * coef;
    }
}

/* The ADC of B slice jb's sums acc (pf_dpe_mvm, pf_dpe_mvm_tiled). pair_shift = 0: one weight
 * slice per B slice, pf_adc_accumulate of pair (i, jb). pair_shift = s > 0: B slice jb packs weight
 * slices 2jb and 2jb+1 as L_2jb + 2**s L_2jb+1 (csrc/opencl/dpe.c mvm_pair_shift: only where acc
 * is an exact integer below 2**24 and each slice's sum below 2**s), so acc = S_2jb + 2**s S_2jb+1
 * splits exactly into both sums, and each goes through pf_adc_accumulate in the unpaired
 * kernel's slice order: bit-identical outputs with half the multiply-adds. */
inline void pf_adc_slice(pf_vec *tb, const pf_vec *acc, global const float *fparams, global const float *tables,
                         global const int *tab_info, int i, int jb, int sx, int sw, int use_table, int pair_shift)
{
    if (pair_shift) {
        pf_vec lo[PF_TM], hi[PF_TM];
        for (int r = 0; r < PF_TM; r++) {
            const pf_ivec t = PF_TO_INT(acc[r]);
            lo[r] = PF_TO_FLOAT(t & ((1 << pair_shift) - 1));
            hi[r] = PF_TO_FLOAT(t >> pair_shift);
        }
        pf_adc_accumulate(tb, lo, fparams, tables, tab_info, i, 2 * jb, sx, sw, use_table);
        if (2 * jb + 1 < sw)
            pf_adc_accumulate(tb, hi, fparams, tables, tab_info, i, 2 * jb + 1, sx, sw, use_table);
    } else {
        pf_adc_accumulate(tb, acc, fparams, tables, tab_info, i, jb, sx, sw, use_table);
    }
}

/* A NaN output (inf - inf or 0 * inf from scales near FLT_MAX) as the CPU path and x86 write it,
 * 0xFFC00000 (the default NaN of an invalid operation): NVIDIA GPUs write 0x7FFFFFFF, so the outputs'
 * bits would differ by device. Tested on integer bits: fast-math options may fold isnan away. */
inline float pf_canonical_nan(float x)
{
    return (as_uint(x) & 0x7fffffffu) > 0x7f800000u ? as_float(0xffc00000u) : x;
}

/* Rows rb .. rb+PF_TM (those below rows_valid) and columns cb .. cb+PF_TN (those below P) of a
 * tile's output o, at rows g0 + rb.. of out: (N, R, P), or (N, P, R) (out_nphw: a convolution's
 * (N, C_out, H_out, W_out)). */
inline void pf_tile_store(global float *out, const pf_vec *o, ulong rb, ulong cb, ulong g0, ulong rows_valid, ulong P,
                          ulong R, int out_nphw)
{
    for (int r = 0; r < PF_TM; r++) {
        if (rb + r >= rows_valid)
            break;
        float v[PF_TN];
        PF_VSTORE(o[r], v);
        for (int c = 0; c < PF_TN; c++)
            v[c] = pf_canonical_nan(v[c]);
        const ulong g = g0 + rb + r;
        if (out_nphw) {
            global float *dst = out + ((g / R) * P + cb) * R + g % R;
            for (int c = 0; c < PF_TN && cb + c < P; c++)
                dst[(ulong)c * R] = v[c];
        } else {
            global float *dst = out + g * P + cb;
            for (int c = 0; c < PF_TN && cb + c < P; c++)
                dst[c] = v[c];
        }
    }
}

/* out[e - start] = normal of element e for e in [start, end): global (ceil over
 * 32-element blocks from (start >> 2) & ~7 groups). */
kernel void pf_normals_range(global float *out, ulong seed, uint stream, uint call, ulong start, ulong end)
{
    const ulong group0 = ((start >> 2) & ~(ulong)7) + get_global_id(0) * 8;
    if (group0 * 4 >= end)
        return;
    float8 n[4];
    pf_normal8x4(seed, stream, call, group0, &n[0], &n[1], &n[2], &n[3]);
    float v[32];
    for (int j = 0; j < 4; j++) {
        float tmp[8];
        vstore8(n[j], 0, tmp);
        for (int g = 0; g < 8; g++)
            v[g * 4 + j] = tmp[g];
    }
    const ulong e0 = group0 * 4;
    if (e0 >= start && e0 + 32 <= end) {
        for (int q = 0; q < 4; q++)
            vstore8(vload8(q, v), 0, out + (e0 - start) + q * 8);
        return;
    }
    for (int l = 0; l < 32; l++)
        if (e0 + l >= start && e0 + l < end)
            out[e0 + l - start] = v[l];
}

/* out[e] = standard normal of element idx0 + e (tests and cross-device checks). */
kernel void pf_normals(global float *out, ulong seed, uint stream, uint call, ulong idx0, ulong count)
{
    ulong e = get_global_id(0);
    if (e >= count)
        return;
    ulong idx = idx0 + e;
    out[e] = pf_lane(pf_normal4(seed, stream, call, idx >> 2), (uint)(idx & 3));
}

/* Zero-copy probe (csrc/opencl/runtime.c): does the device read and write host memory
 * given with CL_MEM_USE_HOST_PTR in place, without a runtime copy? */
kernel void pf_probe(global float *out, global const float *in)
{
    out[0] = in[0] + 1.0f;
}
