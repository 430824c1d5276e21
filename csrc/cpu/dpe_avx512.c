/* AVX-512F instance of the DPE micro-kernel (dpe_tile_simd.h): 6 x 16 tile,
 * one zmm accumulator per row. The same template source as the AVX2 instance,
 * which the test suite checks bit for bit against the reference on every
 * machine; this instance differs only in vector width. */
#ifdef PF_ISA_EMULATION /* test build: cpu/isa_emulation.h */
#include "cpu/isa_emulation.h"
#else
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,fma")
#include <immintrin.h>
#endif

#define PF_TILE_FN pf_dpe_tile_avx512
#define VW 16
#define VEC __m512
#define V_ZERO() _mm512_setzero_ps()
#define V_LOAD(p) _mm512_load_ps(p)
#define V_LOADU(p) _mm512_loadu_ps(p)
#define V_STORE(p, v) _mm512_store_ps((p), (v))
#define V_SET1(x) _mm512_set1_ps(x)
#define V_FMA(a, b, c) _mm512_fmadd_ps((a), (b), (c))
#define V_MUL(a, b) _mm512_mul_ps((a), (b))
#define V_ADD(a, b) _mm512_add_ps((a), (b))
#define V_RINT(v) _mm512_roundscale_ps((v), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define V_TABLE(tab, v, hi)                                                                                          \
    _mm512_i32gather_ps(_mm512_min_epi32(_mm512_max_epi32(_mm512_cvttps_epi32(v), _mm512_setzero_si512()),          \
                                         _mm512_set1_epi32(hi)),                                                    \
                        (tab), 4)

#include "cpu/dpe_tile_simd.h"

/* the short instances (core/dpe.h) */
#define PF_TILE_FN pf_dpe_tile_avx512_r1
#define PF_TILE_ROWS 1
#include "cpu/dpe_tile_simd.h"
#define PF_TILE_FN pf_dpe_tile_avx512_r2
#define PF_TILE_ROWS 2
#include "cpu/dpe_tile_simd.h"
#define PF_TILE_FN pf_dpe_tile_avx512_r4
#define PF_TILE_ROWS 4
#include "cpu/dpe_tile_simd.h"
