/* The attention context's products (attention.c): a float32 GEMM whose every
 * output element is one fixed sum, whatever the thread count or ISA.
 *
 *   c[i][j] = fma(a(i, K-1), b(K-1, j), ... fma(a(i, 1), b(1, j), fma(a(i, 0), b(0, j), 0)))
 *
 * one fused multiply-add per term, in k order, starting from +0. Threads split
 * only the output (rows, then column panels), never k; K blocks continue the
 * same chain through the stored partial sums (a float stored and reloaded is
 * the same float). The micro-kernel is one template (attention_gemm_simd.h)
 * instantiated per ISA and chosen at run time (cpu/kernels.h): the AVX-512,
 * AVX2 and portable instances (the FMA instruction where the CPU has it, else
 * libm's correctly rounded fmaf) therefore give identical bits. Our own rather
 * than OpenBLAS's sgemm, which the context used before: its blocking, hence
 * each element's summation order, changes with OPENBLAS_NUM_THREADS (outgoing
 * differed up to 5e-4 relative between 1 and 2 threads at T=512, D=768), and
 * no OpenCL device can reproduce its order. */
#ifndef PF_ATTENTION_GEMM_H
#define PF_ATTENTION_GEMM_H

#include "core/attention.h"
#include "cpu/cpu_features.h"

#include <stdint.h>

/* rows of a micro-tile (its columns: the active instance's nr, cpu/kernels.h) */
#define PF_ATTN_MR 6

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

/* Test hook: calls of pf_attn_gemm that chose the micro-kernel of `isa` (a product of k == 0
 * or an empty output chooses none), process-wide. */
uint64_t pf_attn_gemm_calls(pf_isa isa);

#endif
