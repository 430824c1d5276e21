/* The attention context's products (attention.c): a float32 GEMM whose every
 * output element is one fixed sum, whatever the thread count or ISA.
 *
 *   c[i][j] = fma(a(i, K-1), b(K-1, j), ... fma(a(i, 1), b(1, j), fma(a(i, 0), b(0, j), 0)))
 *
 * one fused multiply-add per term, in k order, starting from +0. Threads split
 * only the output (rows, then column panels), never k; K blocks continue the
 * same chain through the stored partial sums (a float stored and reloaded is
 * the same float). The AVX2 micro-kernel (used from the AVX2 tier up) and the
 * portable one (the FMA instruction where the CPU has it, else libm's correctly
 * rounded fmaf) therefore give identical bits. Our own rather than OpenBLAS's
 * sgemm, which the context used before: its blocking, hence each element's
 * summation order, changes with OPENBLAS_NUM_THREADS (outgoing differed up to
 * 5e-4 relative between 1 and 2 threads at T=512, D=768), and no OpenCL device
 * can reproduce its order. */
#ifndef PF_ATTENTION_GEMM_H
#define PF_ATTENTION_GEMM_H

#include "core/attention.h"

#include <stdint.h>

/* A read-only m x k (or k x n) operand: element (r, c) at p[r * rs + c * cs]. */
typedef struct {
    const float *p;
    int64_t rs, cs;
} pf_gemm_operand;

/* c (m x n, row stride ldc) = a (m x k) @ b (k x n); k == 0 gives zeros.
 * Packing buffers live in pack (grown when needed). Runs on pyfastpim's
 * thread count. c must not overlap a or b. Returns PF_OK or PF_ENOMEM /
 * PF_EOVERFLOW. */
int pf_attn_gemm(pf_scratch *pack, pf_gemm_operand a, pf_gemm_operand b, float *c, int64_t ldc, int64_t m,
                 int64_t n, int64_t k);

#endif
