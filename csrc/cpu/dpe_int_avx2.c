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

#define PF_ITILE_FN pf_dpe_itile_avx2
#define I_DOT(acc, a, b) _mm256_add_epi32((acc), _mm256_madd_epi16(_mm256_maddubs_epi16((a), (b)), _mm256_set1_epi16(1)))
#define I_FINISH(acc) (acc)
#define I_DOT16(acc, a, b) _mm256_add_epi16((acc), _mm256_maddubs_epi16((a), (b)))
#define I_FINISH16(acc) _mm256_madd_epi16((acc), _mm256_set1_epi16(1))
#include "cpu/dpe_int_vf256.h"
#include "cpu/dpe_int_tile.h"

/* the short instances (core/dpe.h) */
#undef PF_ITILE_FN
#define PF_ITILE_FN pf_dpe_itile_avx2_r1
#define ITILE_ROWS 1
#include "cpu/dpe_int_tile.h"
#undef PF_ITILE_FN
#define PF_ITILE_FN pf_dpe_itile_avx2_r2
#define ITILE_ROWS 2
#include "cpu/dpe_int_tile.h"
