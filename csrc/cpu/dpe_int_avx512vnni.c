/* AVX-512 VNNI instance of the integer micro-kernel (dpe_int_tile.h):
 * vpdpbusd on zmm, 16 columns per accumulator. Chosen at run time only when
 * CPUID reports AVX512_VNNI with AVX-512 F/BW/DQ/VL (cpu_features.c). */
#ifdef PF_ISA_EMULATION /* test build: cpu/isa_emulation.h */
#include "cpu/isa_emulation.h"
#else
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,fma")
#include <immintrin.h>
#endif
#include <stdint.h>
#include <string.h>

static inline __m512i bcast4_avx512(const uint8_t *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

#define PF_ITILE_FN pf_dpe_itile_avx512vnni
#define ITILE_MR 8
#define IVC 16
#define IACC __m512i
#define IAV __m512i
#define IBV __m512i
#define I_ZERO() _mm512_setzero_si512()
#define I_BCASTA(p) bcast4_avx512(p)
#define I_LOADB(p) _mm512_loadu_si512((const void *)(p))
#define I_DOT(acc, a, b) _mm512_dpbusd_epi32((acc), (a), (b))
#define I_FINISH(acc) (acc)
#define VF __m512
#define VI __m512i
#define VI_LOAD1(p) _mm512_set1_epi32(*(p))
#define VI_ADD(a, b) _mm512_add_epi32((a), (b))
#define VI_CVT(v) _mm512_cvtepi32_ps(v)
#define VF_SET1(x) _mm512_set1_ps(x)
#define VF_LOAD(p) _mm512_load_ps(p)
#define VF_LOADU(p) _mm512_loadu_ps(p)
#define VF_STORE(p, v) _mm512_store_ps((p), (v))
#define VF_MUL(a, b) _mm512_mul_ps((a), (b))
#define VF_ADD(a, b) _mm512_add_ps((a), (b))
#define VF_RINT(v) _mm512_roundscale_ps((v), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define VF_TABLE(tab, v, hi)                                                                                       \
    _mm512_i32gather_ps(_mm512_min_epi32(_mm512_max_epi32((v), _mm512_setzero_si512()), _mm512_set1_epi32(hi)), (tab), 4)

#include "cpu/dpe_int_tile.h"

/* the short instances (core/dpe.h); the tile header undefines ITILE_MR */
#undef PF_ITILE_FN
#define PF_ITILE_FN pf_dpe_itile_avx512vnni_r1
#define ITILE_MR 8
#define ITILE_ROWS 1
#include "cpu/dpe_int_tile.h"
#undef PF_ITILE_FN
#define PF_ITILE_FN pf_dpe_itile_avx512vnni_r2
#define ITILE_MR 8
#define ITILE_ROWS 2
#include "cpu/dpe_int_tile.h"
#undef PF_ITILE_FN
#define PF_ITILE_FN pf_dpe_itile_avx512vnni_r4
#define ITILE_MR 8
#define ITILE_ROWS 4
#include "cpu/dpe_int_tile.h"
