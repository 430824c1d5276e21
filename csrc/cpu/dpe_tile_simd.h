/* The SIMD micro-kernel of the fused DPE MVM, written once for any vector
 * width and instantiated per ISA (dpe_avx2.c, dpe_avx512.c): an MR x NR tile
 * with MR * NR/VW accumulators, the ADC epilogue applied per crossbar block
 * and slice pair. Same operation order as pf_dpe_tile_generic (see dpe.h), so
 * noise-free results are bit-identical across ISAs.
 *
 * The includer defines, before including (and may include it again for
 * another PF_TILE_FN / PF_TILE_ROWS; both are undefined at the end):
 *   PF_TILE_FN            the function name
 *   PF_TILE_ROWS          rows computed (optional, default MR): 1, 2 or 4 give
 *                         the short instances (core/dpe.h) for a panel of at
 *                         most that many valid rows, the same per-element
 *                         operations; 1 is the GEMV-shaped one (batch 1)
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

/* Weight slices side by side: up to 4 for the one-row tile, whose single
 * accumulator pair per slice pair would otherwise wait on the FMA latency at
 * every k (independent chains of several slices overlap: the batch-1 tile
 * ~2x faster), 2 for the two-row tile; one from 4 rows on, whose accumulators
 * are enough chains (the MR-row tile's fill the registers). */
#define TILE_JB (TILE_ROWS == 1 ? 4 : TILE_ROWS == 2 ? 2 : 1)

#ifndef TILE_SLICE_SUMS
/* Sums over the block's n rows (those present) of input slice i (A) times weight slices
 * j0 .. j0 + JN - 1, each in k order (the bits of one slice at a time), then
 * their ADC epilogues in j order. Uses t, A, b, i, j0, n, tb of the tile. */
#define TILE_SLICE_SUMS(JN)                                                                                          \
    do {                                                                                                           \
        const float *B_ = t->B + (b * t->sw * t->n + (int64_t)j0 * n) * TILE_NR;                                    \
        VEC acc_[JN][TILE_ROWS][TILE_NV];                                                                          \
        _Pragma("GCC unroll 4") for (int jj_ = 0; jj_ < (JN); jj_++)                                               \
            _Pragma("GCC unroll 16") for (int r_ = 0; r_ < TILE_ROWS; r_++)                                        \
                _Pragma("GCC unroll 4") for (int v_ = 0; v_ < TILE_NV; v_++) acc_[jj_][r_][v_] = V_ZERO();         \
        for (int k = 0; k < n; k++) {                                                                              \
            const float *a_ = A + k * TILE_MR;                                                                     \
            _Pragma("GCC unroll 4") for (int jj_ = 0; jj_ < (JN); jj_++) {                                         \
                VEC bv_[TILE_NV];                                                                                  \
                _Pragma("GCC unroll 4") for (int v_ = 0; v_ < TILE_NV; v_++)                                       \
                    bv_[v_] = V_LOAD(B_ + ((int64_t)jj_ * n + k) * TILE_NR + v_ * VW);                             \
                _Pragma("GCC unroll 16") for (int r_ = 0; r_ < TILE_ROWS; r_++) {                                  \
                    const VEC av_ = V_SET1(a_[r_]);                                                                \
                    _Pragma("GCC unroll 4") for (int v_ = 0; v_ < TILE_NV; v_++)                                   \
                        acc_[jj_][r_][v_] = V_FMA(av_, bv_[v_], acc_[jj_][r_][v_]);                               \
                }                                                                                                  \
            }                                                                                                      \
        }                                                                                                          \
        _Pragma("GCC unroll 4") for (int jj_ = 0; jj_ < (JN); jj_++)                                               \
            PF_EPI_ADC(V, VEC, PF_EPI_FLOAT, t, i, j0 + jj_, tb, acc_[jj_], TILE_ROWS, TILE_NV, TILE_NR, VW);      \
    } while (0)
#endif

void PF_TILE_FN(const pf_dpe_tile *t)
{
    _Alignas(64) float out[TILE_ROWS * TILE_NR];
    _Alignas(64) float tb[TILE_ROWS * TILE_NR];
    pf_dpe_tile_start(t, out, TILE_ROWS, TILE_NR);
    for (int64_t b = 0; b < t->nb; b++) {
        const int n = b == t->nb - 1 ? t->n_last : t->n; /* the rows present (core/dpe.h) */
        memset(tb, 0, sizeof tb);
        for (int i = 0; i < t->sx; i++) {
            const float *A = t->A + (b * t->sx * t->n + (int64_t)i * n) * TILE_MR;
            for (int j0 = 0; j0 < t->sw;) {
                const int left = t->sw - j0;
                if (TILE_JB >= 4 && left >= 4) {
                    TILE_SLICE_SUMS(4);
                    j0 += 4;
                } else if (TILE_JB >= 2 && left >= 2) {
                    TILE_SLICE_SUMS(2);
                    j0 += 2;
                } else {
                    TILE_SLICE_SUMS(1);
                    j0 += 1;
                }
            }
        }
        PF_EPI_SCALE(V, VEC, t, b, out, tb, TILE_ROWS, TILE_MR, TILE_NV, TILE_NR, VW);
    }
    pf_dpe_tile_canonical_nan(out, TILE_ROWS * TILE_NR);
    if (t->ldc == 1 && t->nr_valid == TILE_NR) {
        for (int r = 0; r < t->mr_valid; r++)
            memcpy(t->out + r * t->ldr, out + r * TILE_NR, TILE_NR * sizeof(float));
        return;
    }
    for (int r = 0; r < t->mr_valid; r++)
        for (int c = 0; c < t->nr_valid; c++)
            t->out[r * t->ldr + c * t->ldc] = out[r * TILE_NR + c];
}

#undef PF_TILE_FN
#undef PF_TILE_ROWS
#undef TILE_MR
#undef TILE_ROWS
#undef TILE_NR
#undef TILE_NV
#undef TILE_JB
