/* AVX2 Philox4x32-10 over 8 counter groups at once, Box-Muller and exp with
 * SLEEF's vector functions (libsleef's vectorized logf/sincosf/expf, rather
 * than our own polynomials). Only called after runtime
 * dispatch has seen AVX2 + FMA. */
#pragma GCC target("avx2,fma")
#include "cpu/noise.h"
#include "core/philox_noise.h"

#include <immintrin.h>
#include <math.h>
#include <sleef.h>

static inline void mulhilo8(__m256i a, __m256i m, __m256i *hi, __m256i *lo)
{
    __m256i even = _mm256_mul_epu32(a, m);
    __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), m);
    *lo = _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xAA);
    *hi = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA);
}

static inline __m256 u01(__m256i w)
{
    __m256 f = _mm256_cvtepi32_ps(_mm256_srli_epi32(w, 8));
    return _mm256_mul_ps(_mm256_add_ps(f, _mm256_set1_ps(0.5f)), _mm256_set1_ps(1.0f / 16777216.0f));
}

/* 8 groups g0..g0+7 -> 32 normals in element order. */
static void normals8(uint64_t seed, uint32_t stream, uint32_t call, uint64_t g0, float *out)
{
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    /* 64-bit group index split into lo/hi words per lane (carry-aware) */
    uint32_t lo0 = (uint32_t)g0;
    __m256i c0 = _mm256_add_epi32(_mm256_set1_epi32((int)lo0), lane);
    __m256i carry = _mm256_cmpgt_epi32(_mm256_xor_si256(_mm256_set1_epi32((int)lo0), _mm256_set1_epi32(INT32_MIN)),
                                       _mm256_xor_si256(c0, _mm256_set1_epi32(INT32_MIN)));
    __m256i c1 = _mm256_sub_epi32(_mm256_set1_epi32((int)(uint32_t)(g0 >> 32)), carry);
    __m256i c2 = _mm256_set1_epi32((int)call);
    __m256i c3 = _mm256_set1_epi32((int)stream);
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    const __m256i M0 = _mm256_set1_epi32((int)PHILOX_M4x32_0), M1 = _mm256_set1_epi32((int)PHILOX_M4x32_1);
    for (int round = 0; round < 10; round++) {
        if (round > 0) {
            k0 += PHILOX_W32_0;
            k1 += PHILOX_W32_1;
        }
        __m256i hi0, lo0v, hi1, lo1v;
        mulhilo8(c0, M0, &hi0, &lo0v);
        mulhilo8(c2, M1, &hi1, &lo1v);
        __m256i n0 = _mm256_xor_si256(_mm256_xor_si256(hi1, c1), _mm256_set1_epi32((int)k0));
        __m256i n2 = _mm256_xor_si256(_mm256_xor_si256(hi0, c3), _mm256_set1_epi32((int)k1));
        c0 = n0;
        c1 = lo1v;
        c2 = n2;
        c3 = lo0v;
    }
    const __m256 m2 = _mm256_set1_ps(-2.0f), two_pi = _mm256_set1_ps(6.283185307179586f);
    /* u35 variants (3.5 ulp) are plenty for noise and ~1.5x faster; sqrt is the
     * correctly rounded instruction, as sqrtf in the scalar path */
    __m256 r0 = _mm256_sqrt_ps(_mm256_mul_ps(m2, Sleef_logf8_u35avx2(u01(c0))));
    __m256 r1 = _mm256_sqrt_ps(_mm256_mul_ps(m2, Sleef_logf8_u35avx2(u01(c2))));
    Sleef___m256_2 sc0 = Sleef_sincosf8_u35avx2(_mm256_mul_ps(two_pi, u01(c1)));
    Sleef___m256_2 sc1 = Sleef_sincosf8_u35avx2(_mm256_mul_ps(two_pi, u01(c3)));
    _Alignas(32) float v[4][8];
    _mm256_store_ps(v[0], _mm256_mul_ps(r0, sc0.y)); /* cos */
    _mm256_store_ps(v[1], _mm256_mul_ps(r0, sc0.x)); /* sin */
    _mm256_store_ps(v[2], _mm256_mul_ps(r1, sc1.y));
    _mm256_store_ps(v[3], _mm256_mul_ps(r1, sc1.x));
    for (int g = 0; g < 8; g++)
        for (int l = 0; l < 4; l++)
            out[4 * g + l] = v[l][g];
}

void pf_normals_avx2(uint64_t seed, uint32_t stream, uint32_t call, uint64_t group0, int64_t ngroups, float *out)
{
    int64_t q = 0;
    for (; q + 8 <= ngroups; q += 8)
        normals8(seed, stream, call, group0 + (uint64_t)q, out + 4 * q);
    if (q < ngroups) {
        float tmp[32];
        normals8(seed, stream, call, group0 + (uint64_t)q, tmp);
        for (int64_t e = 0; e < 4 * (ngroups - q); e++)
            out[4 * q + e] = tmp[e];
    }
}

void pf_exp_inplace_avx2(float *v, int64_t count)
{
    int64_t e = 0;
    for (; e + 8 <= count; e += 8)
        _mm256_storeu_ps(v + e, Sleef_expf8_u10avx2(_mm256_loadu_ps(v + e)));
    for (; e < count; e++)
        v[e] = expf(v[e]);
}
