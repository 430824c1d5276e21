/* The SIMD micro-kernel of the fused DPE MVM, written once for any vector
 * width and instantiated per ISA (dpe_avx2.c, dpe_avx512.c): an MR x NR tile
 * with MR * NR/VW accumulators, the ADC epilogue applied per crossbar block
 * and slice pair. Same operation order as pf_dpe_tile_generic (see dpe.h), so
 * noise-free results are bit-identical across ISAs.
 *
 * The includer defines, before including (and may include it again for
 * another PF_TILE_FN / PF_TILE_ROWS):
 *   PF_TILE_FN            the function name
 *   PF_TILE_ROWS          rows computed (optional, default MR): 1 gives the
 *                         GEMV-shaped instance for a panel of one valid row
 *                         (batch 1), the same per-element operations
 *   VW                    floats per vector
 *   VEC, IVEC             float and int32 vector types
 *   V_ZERO()              V_LOAD(p) (aligned)  V_LOADU(p)  V_STORE(p, v) (aligned)
 *   V_SET1(x)             V_FMA(a, b, c) = a*b + c (fused)  V_MUL(a, b)  V_ADD(a, b)
 *   V_RINT(v)             round half to even
 *   V_TABLE(tab, v, hi)   tab[clamp((int)v, 0, hi)] (exact ADC codes) */
#include "core/dpe.h"
#include "cpu/dpe_epilogue.h"

#include <string.h>

#define TILE_MR PF_DPE_MR
#ifdef PF_TILE_ROWS
#define TILE_ROWS PF_TILE_ROWS
#else
#define TILE_ROWS TILE_MR
#endif
#define TILE_NR PF_DPE_NR
#define TILE_NV (TILE_NR / VW)

void PF_TILE_FN(const pf_dpe_tile *t)
{
    _Alignas(64) float out[TILE_ROWS * TILE_NR];
    _Alignas(64) float tb[TILE_ROWS * TILE_NR];
    pf_dpe_tile_start(t, out, TILE_ROWS, TILE_NR);
    const int n = t->n;
    for (int64_t b = 0; b < t->nb; b++) {
        memset(tb, 0, sizeof tb);
        for (int i = 0; i < t->sx; i++) {
            const float *A = t->A + (b * t->sx + i) * n * TILE_MR;
            for (int j = 0; j < t->sw; j++) {
                const float *B = t->B + (b * t->sw + j) * n * TILE_NR;
                VEC acc[TILE_ROWS][TILE_NV];
#pragma GCC unroll 16
                for (int r = 0; r < TILE_ROWS; r++)
#pragma GCC unroll 4
                    for (int v = 0; v < TILE_NV; v++)
                        acc[r][v] = V_ZERO();
                for (int k = 0; k < n; k++) {
                    VEC bv[TILE_NV];
#pragma GCC unroll 4
                    for (int v = 0; v < TILE_NV; v++)
                        bv[v] = V_LOAD(B + k * TILE_NR + v * VW);
                    const float *a = A + k * TILE_MR;
#pragma GCC unroll 16
                    for (int r = 0; r < TILE_ROWS; r++) {
                        const VEC av = V_SET1(a[r]);
#pragma GCC unroll 4
                        for (int v = 0; v < TILE_NV; v++)
                            acc[r][v] = V_FMA(av, bv[v], acc[r][v]);
                    }
                }
                PF_EPI_ADC(V, VEC, PF_EPI_FLOAT, t, i, j, tb, acc, TILE_ROWS, TILE_NV, TILE_NR, VW);
            }
        }
        PF_EPI_SCALE(V, VEC, t, b, out, tb, TILE_ROWS, TILE_MR, TILE_NV, TILE_NR, VW);
    }
    if (t->ldc == 1 && t->nr_valid == TILE_NR) {
        for (int r = 0; r < t->mr_valid; r++)
            memcpy(t->out + r * t->ldr, out + r * TILE_NR, TILE_NR * sizeof(float));
        return;
    }
    for (int r = 0; r < t->mr_valid; r++)
        for (int c = 0; c < t->nr_valid; c++)
            t->out[r * t->ldr + c * t->ldc] = out[r * TILE_NR + c];
}

#undef TILE_MR
#undef TILE_ROWS
#undef TILE_NR
#undef TILE_NV
