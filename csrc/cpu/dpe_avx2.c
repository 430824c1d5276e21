/* AVX2 + FMA instance of the DPE micro-kernel (dpe_tile_simd.h): 6 x 16 tile,
 * 12 ymm accumulators. */
#pragma GCC target("avx2,fma")
#include <immintrin.h>

#define PF_TILE_FN pf_dpe_tile_avx2
#define VW 8
#define VEC __m256
#define V_ZERO() _mm256_setzero_ps()
#define V_LOAD(p) _mm256_load_ps(p)
#define V_LOADU(p) _mm256_loadu_ps(p)
#define V_STORE(p, v) _mm256_store_ps((p), (v))
#define V_SET1(x) _mm256_set1_ps(x)
#define V_FMA(a, b, c) _mm256_fmadd_ps((a), (b), (c))
#define V_MUL(a, b) _mm256_mul_ps((a), (b))
#define V_ADD(a, b) _mm256_add_ps((a), (b))
#define V_RINT(v) _mm256_round_ps((v), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define V_TABLE(tab, v, hi)                                                                                          \
    _mm256_i32gather_ps((tab),                                                                                      \
                        _mm256_min_epi32(_mm256_max_epi32(_mm256_cvttps_epi32(v), _mm256_setzero_si256()),         \
                                         _mm256_set1_epi32(hi)),                                                    \
                        4)

#include "cpu/dpe_tile_simd.h"

/* the short instances (core/dpe.h) */
#define PF_TILE_FN pf_dpe_tile_avx2_r1
#define PF_TILE_ROWS 1
#include "cpu/dpe_tile_simd.h"
#define PF_TILE_FN pf_dpe_tile_avx2_r2
#define PF_TILE_ROWS 2
#include "cpu/dpe_tile_simd.h"
#define PF_TILE_FN pf_dpe_tile_avx2_r4
#define PF_TILE_ROWS 4
#include "cpu/dpe_tile_simd.h"
