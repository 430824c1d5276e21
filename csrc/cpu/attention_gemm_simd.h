/* The attention GEMM's micro-kernel (attention_gemm.h), written once for any
 * vector width and instantiated per ISA: attention_gemm_avx2.c (VW 8),
 * attention_gemm_avx512.c (VW 16) and the portable one in attention_gemm.c
 * (VW 1, a "vector" is one float and V_FMA is fmaf). A tile is PF_ATTN_MR rows
 * x NV vectors of VW columns; each element is one accumulator continuing its
 * chain with one fused multiply-add per term in k order, so the vector width
 * changes only how many columns run at once, never the bits.
 *
 * The includer defines, before including (PF_GEMM_FN is undefined at the end,
 * so the file may be included again for another name):
 *   PF_GEMM_FN        the function name (pf_attn_kern_fn, cpu/kernels.h)
 *   PF_GEMM_DECL      optional: storage class and attributes (static, target)
 *   VW, NV            floats per vector, vectors per tile row
 *   VEC               the vector type
 *   V_ZERO()          V_LOADU(p)  V_STOREU(p, v)  V_BROADCAST(p) (*p in every lane)
 *   V_FMA(a, b, c)    a*b + c, one rounding
 *   V_PREFETCH(p)     optional: prefetch the C line at p */
#include "cpu/attention_gemm.h"

#include <stdint.h>

#ifndef V_PREFETCH
#define V_PREFETCH(p) ((void)(p))
#endif
#ifndef PF_GEMM_DECL
#define PF_GEMM_DECL
#endif

/* c (MR x NV*VW, row stride ldc) continues its sums with kc terms: term p of
 * row r is a[r][p * acs] (A read in place: rows of an edge tile repeat a valid
 * row), b an NV*VW-column packed panel; first: start from +0 instead of c. */
PF_GEMM_DECL void PF_GEMM_FN(int64_t kc, const float *const *a, int64_t acs, const float *b, float *c, int64_t ldc,
                             int first)
{
    enum { MR_ = PF_ATTN_MR, NR_ = NV * VW };
    const float *ar[MR_];
    VEC acc[MR_][NV];
#pragma GCC unroll 16
    for (int r = 0; r < MR_; r++) {
        ar[r] = a[r];
        /* the tile's rows, stored at the end (and read unless first): every 64-byte line */
        for (int q = 0; q < NR_; q += 16)
            V_PREFETCH(c + r * ldc + q);
        V_PREFETCH(c + r * ldc + NR_ - 1);
#pragma GCC unroll 16
        for (int v = 0; v < NV; v++)
            acc[r][v] = first ? V_ZERO() : V_LOADU(c + r * ldc + v * VW);
    }
#pragma GCC unroll 4
    for (int64_t p = 0; p < kc; p++) {
        VEC bv[NV];
#pragma GCC unroll 16
        for (int v = 0; v < NV; v++)
            bv[v] = V_LOADU(b + p * NR_ + v * VW);
        const int64_t o = p * acs;
#pragma GCC unroll 16
        for (int r = 0; r < MR_; r++) {
            const VEC av = V_BROADCAST(ar[r] + o);
#pragma GCC unroll 16
            for (int v = 0; v < NV; v++)
                acc[r][v] = V_FMA(av, bv[v], acc[r][v]);
        }
    }
#pragma GCC unroll 16
    for (int r = 0; r < MR_; r++)
#pragma GCC unroll 16
        for (int v = 0; v < NV; v++)
            V_STOREU(c + r * ldc + v * VW, acc[r][v]);
}

#undef PF_GEMM_FN
#undef PF_GEMM_DECL
