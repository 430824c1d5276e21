/* AVX2 + FMA instance of the normal generator and exp (noise_simd.h): 8
 * Philox groups per block. Only called through the AVX2 kernel table. */
#pragma GCC target("avx2,fma")
#include <immintrin.h>
#include <sleef.h>

#define PF_NORMALS_FN pf_normal_groups_avx2
#define PF_EXP_FN pf_exp_inplace_avx2
#define VW 8
#define IVEC __m256i
#define FVEC __m256
#define I_SET1(x) _mm256_set1_epi32(x)
#define I_ADD(a, b) _mm256_add_epi32((a), (b))
#define I_XOR(a, b) _mm256_xor_si256((a), (b))
#define I_LANES() _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)
#define I_MUL_EVEN(a, b) _mm256_mul_epu32((a), (b))
#define I_SRL64(a, n) _mm256_srli_epi64((a), (n))
#define I_SLL64(a, n) _mm256_slli_epi64((a), (n))
#define I_SRL32(a, n) _mm256_srli_epi32((a), (n))
#define I_BLEND_ODD(a, b) _mm256_blend_epi32((a), (b), 0xAA)
#define I_CARRY(hi, lo, base)                                                                                        \
    _mm256_sub_epi32((hi), _mm256_cmpgt_epi32(_mm256_xor_si256((base), _mm256_set1_epi32(INT32_MIN)),              \
                                              _mm256_xor_si256((lo), _mm256_set1_epi32(INT32_MIN))))
#define F_CVT(i) _mm256_cvtepi32_ps(i)
#define F_SET1(x) _mm256_set1_ps(x)
#define F_ADD(a, b) _mm256_add_ps((a), (b))
#define F_MUL(a, b) _mm256_mul_ps((a), (b))
#define F_SQRT(a) _mm256_sqrt_ps(a)
#define F_STORE(p, v) _mm256_store_ps((p), (v))
#define F_LOADU(p) _mm256_loadu_ps(p)
#define F_STOREU(p, v) _mm256_storeu_ps((p), (v))
#define S_LOG(v) Sleef_logf8_u35avx2(v)
#define S_SINCOS(v) Sleef_sincosf8_u35avx2(v)
#define S_SINCOS_T Sleef___m256_2
#define S_EXP(v) Sleef_expf8_u10avx2(v)
#define EXP_W 8
#define EXP8(p) _mm256_storeu_ps((p), Sleef_expf8_u10avx2(_mm256_loadu_ps(p)))

#include "cpu/noise_simd.h"
