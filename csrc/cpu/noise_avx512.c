/* AVX-512F instance of the normal generator and exp (noise_simd.h): 16
 * Philox groups per block, SLEEF's 16-wide builds of the same algorithms as
 * the AVX2 instance (and runs of 8 through the AVX2 build, as the portable
 * split does). Only called through the AVX-512 kernel table; compiled on every
 * x86-64 build, run only where the CPU has AVX-512 F/BW/DQ/VL (or, in the
 * test build of make test-isa-emulation, through SIMDe). */
#ifdef PF_ISA_EMULATION /* test build: cpu/isa_emulation.h */
#include "cpu/isa_emulation.h"
#else
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")
#include <immintrin.h>
#endif
#include <sleef.h>

#define PF_NORMALS_FN pf_normal_groups_avx512
#define PF_EXP_FN pf_exp_inplace_avx512
#define VW 16
#define IVEC __m512i
#define FVEC __m512
#define I_SET1(x) _mm512_set1_epi32(x)
#define I_ADD(a, b) _mm512_add_epi32((a), (b))
#define I_XOR(a, b) _mm512_xor_si512((a), (b))
#define I_LANES() _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)
#define I_MUL_EVEN(a, b) _mm512_mul_epu32((a), (b))
#define I_SRL64(a, n) _mm512_srli_epi64((a), (n))
#define I_MULLO(a, b) _mm512_mullo_epi32((a), (b))
#define I_SRL32(a, n) _mm512_srli_epi32((a), (n))
#define I_BLEND_ODD(a, b) _mm512_mask_blend_epi32((__mmask16)0xAAAA, (a), (b))
#define I_CARRY(hi, lo, base)                                                                                        \
    _mm512_mask_add_epi32((hi), _mm512_cmplt_epu32_mask((lo), (base)), (hi), _mm512_set1_epi32(1))
#define F_CVT(i) _mm512_cvtepi32_ps(i)
#define F_SET1(x) _mm512_set1_ps(x)
#define F_ADD(a, b) _mm512_add_ps((a), (b))
#define F_MUL(a, b) _mm512_mul_ps((a), (b))
#define F_SQRT(a) _mm512_sqrt_ps(a)
#define F_STORE(p, v) _mm512_store_ps((p), (v))
#define F_LOADU(p) _mm512_loadu_ps(p)
#define F_STOREU(p, v) _mm512_storeu_ps((p), (v))
#ifdef PF_ISA_EMULATION
#define S_LOG(v) pf_emu_logf16_u35(v)
#define S_SINCOS(v) pf_emu_sincosf16_u35(v)
#define S_SINCOS_T pf_emu_sincos16
#define S_EXP(v) pf_emu_expf16_u10(v)
#else
#define S_LOG(v) Sleef_logf16_u35avx512f(v)
#define S_SINCOS(v) Sleef_sincosf16_u35avx512f(v)
#define S_SINCOS_T Sleef___m512_2
#define S_EXP(v) Sleef_expf16_u10avx512f(v)
#endif
#define EXP_W 16
#define EXP8(p) _mm256_storeu_ps((p), Sleef_expf8_u10avx2(_mm256_loadu_ps(p)))

#include "cpu/noise_simd.h"
