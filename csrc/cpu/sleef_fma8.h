/* SLEEF 3.5.1's AVX2 + FMA algorithms for logf_u35, sincosf_u35 and expf_u10
 * (src/libm/sleefsimdsp.c, Boost licence), inline, operation for operation,
 * for the arguments the normal generator and the read-noise pass give them.
 *
 * Why not libsleef's functions: Debian's SLEEF 3.5 has no inline headers, so
 * every call is an opaque call the compiler cannot interleave with the
 * Philox rounds and the other transforms of a block, and the library versions
 * carry paths our arguments never take (subnormal inputs to log, the
 * Payne-Hanek reduction of large angles). Inline, the read-noise pass takes
 * ~23% less time per cell on Zen 3. The results are libsleef's, bit for bit:
 * pf_sleef_fma8_mismatches (noise_avx2.c) compares them over every argument
 * the generator can produce (tests/core/test_noise.py), and kernels/base.cl
 * transcribes the same algorithms for OpenCL.
 *
 * Included by AVX2 + FMA code only (noise_avx2.c). */
#ifndef PF_SLEEF_FMA8_H
#define PF_SLEEF_FMA8_H

#include <immintrin.h>

#define PF_F8(x) _mm256_set1_ps(x)
#define PF_I8(x) _mm256_set1_epi32(x)

/* Sleef_logf8_u35avx2 for d in [FLT_MIN, inf): the generator's uniforms,
 * (0, 1) by construction, never 0, subnormal, negative or NaN. */
static inline __m256 pf_logf8_positive(__m256 d)
{
    /* ilogb2k(d / 0.75) and m = ldexp3(d, -e): m in [0.75, 1.5) */
    const __m256i e = _mm256_sub_epi32(
        _mm256_and_si256(_mm256_srli_epi32(_mm256_castps_si256(_mm256_mul_ps(d, PF_F8(0x1.555556p+0f))), 23),
                         PF_I8(0xff)),
        PF_I8(0x7f));
    const __m256 m = _mm256_castsi256_ps(_mm256_sub_epi32(_mm256_castps_si256(d), _mm256_slli_epi32(e, 23)));
    const __m256 x = _mm256_div_ps(_mm256_sub_ps(m, PF_F8(1.0f)), _mm256_add_ps(PF_F8(1.0f), m));
    const __m256 x2 = _mm256_mul_ps(x, x);
    __m256 t = PF_F8(0.2392828464508056640625f);
    t = _mm256_fmadd_ps(t, x2, PF_F8(0.28518211841583251953125f));
    t = _mm256_fmadd_ps(t, x2, PF_F8(0.400005877017974853515625f));
    t = _mm256_fmadd_ps(t, x2, PF_F8(0.666666686534881591796875f));
    t = _mm256_fmadd_ps(t, x2, PF_F8(2.0f));
    return _mm256_fmadd_ps(x, t, _mm256_mul_ps(PF_F8(0.693147180559945286226764f), _mm256_cvtepi32_ps(e)));
}

/* sin and cos of 8 lanes, SLEEF's order (Sleef___m256_2: .x sin, .y cos). */
typedef struct {
    __m256 x, y;
} pf_sincos8;

/* Sleef_sincosf8_u35avx2 for d in (0, 125) (SLEEF's TRIGRANGEMAX2f: below
 * it the library takes this path for every lane): the generator's angles,
 * 2 pi u with u in (0, 1). */
static inline pf_sincos8 pf_sincosf8_small(__m256 d)
{
    const __m256i q = _mm256_cvtps_epi32(_mm256_mul_ps(d, PF_F8((float)0.636619772367581343075535053490057448)));
    __m256 u = _mm256_cvtepi32_ps(q);
    __m256 s = _mm256_fmadd_ps(u, PF_F8(-3.1414794921875f * 0.5f), d);
    s = _mm256_fmadd_ps(u, PF_F8(-0.00011315941810607910156f * 0.5f), s);
    s = _mm256_fmadd_ps(u, PF_F8(-1.9841872589410058936e-09f * 0.5f), s);
    const __m256 t = s;
    s = _mm256_mul_ps(s, s);
    u = PF_F8(-0.000195169282960705459117889f);
    u = _mm256_fmadd_ps(u, s, PF_F8(0.00833215750753879547119141f));
    u = _mm256_fmadd_ps(u, s, PF_F8(-0.166666537523269653320312f));
    const __m256 rx = _mm256_fmadd_ps(_mm256_mul_ps(u, s), t, t);
    u = PF_F8(-2.71811842367242206819355e-07f);
    u = _mm256_fmadd_ps(u, s, PF_F8(2.47990446951007470488548e-05f));
    u = _mm256_fmadd_ps(u, s, PF_F8(-0.00138888787478208541870117f));
    u = _mm256_fmadd_ps(u, s, PF_F8(0.0416666641831398010253906f));
    u = _mm256_fmadd_ps(u, s, PF_F8(-0.5f));
    const __m256 ry = _mm256_fmadd_ps(s, u, PF_F8(1.0f));
    /* odd quadrants swap sin and cos; bit 1 of q (of q + 1) negates sin (cos) */
    const __m256 odd = _mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_and_si256(q, PF_I8(1)), PF_I8(1)));
    const __m256 neg_sin = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_and_si256(q, PF_I8(2)), 30));
    const __m256 neg_cos =
        _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_and_si256(_mm256_add_epi32(q, PF_I8(1)), PF_I8(2)), 30));
    return (pf_sincos8){_mm256_xor_ps(_mm256_blendv_ps(rx, ry, odd), neg_sin),
                        _mm256_xor_ps(_mm256_blendv_ps(ry, rx, odd), neg_cos)};
}

/* 2^q for q + 0x7f in [1, 254] (SLEEF's vpow2i) */
static inline __m256 pf_pow2i8(__m256i q)
{
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(q, PF_I8(0x7f)), 23));
}

/* Sleef_expf8_u10avx2, every argument (its overflow and underflow cut-offs included). */
static inline __m256 pf_expf8(__m256 d)
{
    const __m256i q = _mm256_cvtps_epi32(
        _mm256_mul_ps(d, PF_F8(1.442695040888963407359924681001892137426645954152985934135449406931f)));
    const __m256 qf = _mm256_cvtepi32_ps(q);
    __m256 s = _mm256_fmadd_ps(qf, PF_F8(-0.693145751953125f), d);
    s = _mm256_fmadd_ps(qf, PF_F8(-1.428606765330187045e-06f), s);
    __m256 u = PF_F8(0.000198527617612853646278381f);
    u = _mm256_fmadd_ps(u, s, PF_F8(0.00139304355252534151077271f));
    u = _mm256_fmadd_ps(u, s, PF_F8(0.00833336077630519866943359f));
    u = _mm256_fmadd_ps(u, s, PF_F8(0.0416664853692054748535156f));
    u = _mm256_fmadd_ps(u, s, PF_F8(0.166666671633720397949219f));
    u = _mm256_fmadd_ps(u, s, PF_F8(0.5f));
    u = _mm256_add_ps(PF_F8(1.0f), _mm256_fmadd_ps(_mm256_mul_ps(s, s), u, s));
    const __m256i h = _mm256_srai_epi32(q, 1); /* ldexp2: two steps keep 2^q in range */
    u = _mm256_mul_ps(_mm256_mul_ps(u, pf_pow2i8(h)), pf_pow2i8(_mm256_sub_epi32(q, h)));
    u = _mm256_andnot_ps(_mm256_cmp_ps(d, PF_F8(-104.0f), _CMP_LT_OQ), u);
    return _mm256_blendv_ps(u, PF_F8(__builtin_inff()), _mm256_cmp_ps(PF_F8(100.0f), d, _CMP_LT_OQ));
}

#undef PF_F8
#undef PF_I8

#endif
