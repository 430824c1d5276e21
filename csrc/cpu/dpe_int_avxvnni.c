/* AVX-VNNI instance of the integer micro-kernel (dpe_int_tile.h): the VEX
 * vpdpbusd adds four u8 x s8 products into int32 without saturation. Chosen
 * at run time only when CPUID reports AVX-VNNI (cpu_features.c); the
 * epilogue is the AVX2 one. */
#ifdef PF_ISA_EMULATION /* test build: cpu/isa_emulation.h */
#include "cpu/isa_emulation.h"
#else
#pragma GCC target("avx2,fma,avxvnni")
#include <immintrin.h>
#endif
#include <stdint.h>
#include <string.h>

#define PF_ITILE_FN pf_dpe_itile_avxvnni
#define I_DOT(acc, a, b) _mm256_dpbusd_avx_epi32((acc), (a), (b))
#define I_FINISH(acc) (acc)
#include "cpu/dpe_int_vf256.h"
#include "cpu/dpe_int_tile.h"

/* the short instances (core/dpe.h) */
#undef PF_ITILE_FN
#define PF_ITILE_FN pf_dpe_itile_avxvnni_r1
#define ITILE_ROWS 1
#include "cpu/dpe_int_tile.h"
#undef PF_ITILE_FN
#define PF_ITILE_FN pf_dpe_itile_avxvnni_r2
#define ITILE_ROWS 2
#include "cpu/dpe_int_tile.h"
