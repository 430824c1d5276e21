/* AVX2 instances of the integer micro-kernel (dpe_int_tile.h). vpmaddubsw
 * adds two u8 x s8 products with signed 16-bit saturation, so the driver uses
 * pf_dpe_itile_avx2 only when 2 * max(code) * max|B| <= 32767 (no pair can
 * saturate), with 16-bit accumulation when every partial sum fits int16
 * (t->acc16) and vpmaddwd widening to int32 otherwise; larger operands take
 * pf_dpe_itile_avx2_wide, the portable kernel compiled for AVX2. */
#pragma GCC target("avx2,fma")
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#define PF_ITILE_FN pf_dpe_itile_avx2_wide
#include "cpu/dpe_int_scalar.h"

static inline __m256i bcast4_avx2(const uint8_t *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

#define PF_ITILE_FN pf_dpe_itile_avx2
#define IVC 8
#define IACC __m256i
#define IAV __m256i
#define IBV __m256i
#define I_ZERO() _mm256_setzero_si256()
#define I_BCASTA(p) bcast4_avx2(p)
#define I_LOADB(p) _mm256_loadu_si256((const __m256i *)(const void *)(p))
#define I_DOT(acc, a, b) _mm256_add_epi32((acc), _mm256_madd_epi16(_mm256_maddubs_epi16((a), (b)), _mm256_set1_epi16(1)))
#define I_FINISH(acc) (acc)
#define I_DOT16(acc, a, b) _mm256_add_epi16((acc), _mm256_maddubs_epi16((a), (b)))
#define I_FINISH16(acc) _mm256_madd_epi16((acc), _mm256_set1_epi16(1))
#include "cpu/dpe_int_vf256.h"
#include "cpu/dpe_int_tile.h"
