/* Scalar operand macros of the integer micro-kernel (dpe_int_tile.h): one
 * column per accumulator. Included by dpe_int.c (portable instance) and
 * dpe_int_avx2.c (the same code compiled for AVX2, for operands whose
 * vpmaddubsw pair sums could saturate). The includer defines PF_ITILE_FN. */
#include <math.h>
#include <stdint.h>

#ifndef PF_DPE_INT_SCALAR_TYPES
#define PF_DPE_INT_SCALAR_TYPES
typedef const uint8_t *pf_itile_codes; /* a typedef: the tile declares `const IAV` */
#endif
#define IVC 1
#define IACC int32_t
#define IAV pf_itile_codes
#define IBV const int8_t *
#define I_ZERO() 0
#define I_BCASTA(p) (p)
#define I_LOADB(p) (p)
#define I_DOT(acc, a, b) ((acc) + (a)[0] * (b)[0] + (a)[1] * (b)[1] + (a)[2] * (b)[2] + (a)[3] * (b)[3])
#define I_FINISH(acc) (acc)
#define VF float
#define VI int32_t
#define VI_LOAD1(p) (*(p))
#define VI_ADD(a, b) ((a) + (b))
#define VI_CVT(v) ((float)(v))
#define VF_SET1(x) (x)
#define VF_LOAD(p) (*(p))
#define VF_LOADU(p) (*(p))
#define VF_STORE(p, v) (*(p) = (v))
#define VF_MUL(a, b) ((a) * (b))
#define VF_ADD(a, b) ((a) + (b))
#define VF_RINT(v) nearbyintf(v)
#define VF_TABLE(tab, v, hi) ((tab)[(v) < 0 ? 0 : (v) > (hi) ? (hi) : (v)])

#include "cpu/dpe_int_tile.h"

#undef PF_ITILE_FN
#undef IVC
#undef IACC
#undef IAV
#undef IBV
#undef I_ZERO
#undef I_BCASTA
#undef I_LOADB
#undef I_DOT
#undef I_FINISH
#undef VF
#undef VI
#undef VI_LOAD1
#undef VI_ADD
#undef VI_CVT
#undef VF_SET1
#undef VF_LOAD
#undef VF_LOADU
#undef VF_STORE
#undef VF_MUL
#undef VF_ADD
#undef VF_RINT
#undef VF_TABLE
