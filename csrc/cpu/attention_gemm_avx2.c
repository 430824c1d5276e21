/* AVX2 + FMA instance of the attention GEMM micro-kernel (attention_gemm_simd.h):
 * 6 x 16 tile, 12 ymm accumulators (two loads and six broadcasts per term). */
#pragma GCC target("avx2,fma")
#include <immintrin.h>

#include "cpu/kernels.h"

#define PF_GEMM_FN pf_attn_kern_avx2
#define VW 8
#define NV 2
#define VEC __m256
#define V_ZERO() _mm256_setzero_ps()
#define V_LOADU(p) _mm256_loadu_ps(p)
#define V_STOREU(p, v) _mm256_storeu_ps((p), (v))
#define V_BROADCAST(p) _mm256_broadcast_ss(p)
#define V_FMA(a, b, c) _mm256_fmadd_ps((a), (b), (c))
#define V_PREFETCH(p) _mm_prefetch((const char *)(p), _MM_HINT_T0)

#include "cpu/attention_gemm_simd.h"
