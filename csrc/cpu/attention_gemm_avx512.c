/* AVX-512F instance of the attention GEMM micro-kernel (attention_gemm_simd.h):
 * 6 x 32 tile, 12 zmm accumulators, the AVX2 instance's loop at twice the
 * width (its nr, cpu_features.c, packs B 32 columns wide). */
#ifdef PF_ISA_EMULATION /* test build: cpu/isa_emulation.h */
#include "cpu/isa_emulation.h"
#else
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,fma")
#include <immintrin.h>
#endif

#include "cpu/kernels.h"

#define PF_GEMM_FN pf_attn_kern_avx512
#define VW 16
#define NV 2
#define VEC __m512
#define V_ZERO() _mm512_setzero_ps()
#define V_LOADU(p) _mm512_loadu_ps(p)
#define V_STOREU(p, v) _mm512_storeu_ps((p), (v))
#define V_BROADCAST(p) _mm512_set1_ps(*(p))
#define V_FMA(a, b, c) _mm512_fmadd_ps((a), (b), (c))
#define V_PREFETCH(p) _mm_prefetch((const char *)(p), _MM_HINT_T0)

#include "cpu/attention_gemm_simd.h"
