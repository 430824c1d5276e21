/* AVX-VNNI instance of the integer micro-kernel (dpe_int_tile.h): the VEX
 * vpdpbusd adds four u8 x s8 products into int32 without saturation. Chosen
 * at run time only when CPUID reports AVX-VNNI (cpu_features.c); the
 * epilogue is the AVX2 one. */
#pragma GCC target("avx2,fma,avxvnni")
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

static inline __m256i bcast4_avxvnni(const uint8_t *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

#define PF_ITILE_FN pf_dpe_itile_avxvnni
#define IVC 8
#define IACC __m256i
#define IAV __m256i
#define IBV __m256i
#define I_ZERO() _mm256_setzero_si256()
#define I_BCASTA(p) bcast4_avxvnni(p)
#define I_LOADB(p) _mm256_loadu_si256((const __m256i *)(const void *)(p))
#define I_DOT(acc, a, b) _mm256_dpbusd_avx_epi32((acc), (a), (b))
#define I_FINISH(acc) (acc)
#include "cpu/dpe_int_vf256.h"
#include "cpu/dpe_int_tile.h"
