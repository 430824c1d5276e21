/* The two epilogues of the DPE micro-kernels, written once for the float tile
 * (dpe_tile_simd.h) and the integer tile (dpe_int_tile.h), so both keep the
 * per-element order of pf_dpe_tile_generic (dpe.h) and give the same bits.
 *
 * P is the includer's vector-operation prefix (V for the float tile, VF for
 * the integer tile's float side): P##_SET1, _LOAD, _LOADU, _STORE, _ADD, _MUL,
 * _RINT and _TABLE(tab, sum, hi) must exist; VT is its float vector type. */
#ifndef PF_DPE_EPILOGUE_H
#define PF_DPE_EPILOGUE_H

#include "core/dpe.h"

#include <stdint.h>
#include <string.h>

#define PF_EPI_FLOAT(x) (x)

/* Every NaN of a finished tile as 0xFFC00000, the NaN x86 writes for an invalid operation (inf - inf,
 * 0 * inf from scales near FLT_MAX): a NaN operand keeps its own payload through x86 arithmetic, and
 * GPUs write one NaN of their own (kernels/base.cl pf_canonical_nan), so only this keeps the outputs'
 * bits equal on every device. Integer bits: -ffast-math style options cannot fold the test away. */
static inline void pf_dpe_tile_canonical_nan(float *out, int count)
{
    for (int e = 0; e < count; e++) {
        uint32_t bits;
        memcpy(&bits, out + e, sizeof bits);
        bits = (bits & 0x7fffffffu) > 0x7f800000u ? 0xffc00000u : bits;
        memcpy(out + e, &bits, sizeof bits);
    }
}

/* A float tile's starting sums, rows x nr: zero, or with t->accumulate the
 * sums of its earlier crossbar blocks that an earlier call left in t->out
 * (adding the next blocks to them gives the bits of one call over all
 * blocks: the same additions in the same order, starting from +0). */
static inline void pf_dpe_tile_start(const pf_dpe_tile *t, float *out, int rows, int nr)
{
    memset(out, 0, (size_t)rows * nr * sizeof(float));
    if (t->accumulate)
        for (int r = 0; r < t->mr_valid; r++)
            for (int c = 0; c < t->nr_valid; c++)
                out[r * nr + c] = t->out[r * t->ldr + c * t->ldc];
}

/* tb[r][v] += ADC(S[r][v]) * coef(i, j): the converter's table when it has one, else
 * rint(TOF(S) * alpha). TOF turns a crossbar sum into the float vector rint reads. */
#define PF_EPI_ADC(P, VT, TOF, t, i, j, tb, S, ROWS, NV, NR, VW)                                                     \
    do {                                                                                                           \
        const VT coef_ = P##_SET1((t)->coef[(i) * (t)->sw + (j)]);                                                 \
        const float *tab_ = (t)->adc_table ? (t)->adc_table[j] : NULL;                                             \
        if (tab_) {                                                                                                \
            const int32_t hi_ = (t)->adc_table_max[j];                                                             \
            _Pragma("GCC unroll 16") for (int r_ = 0; r_ < (ROWS); r_++)                                           \
                _Pragma("GCC unroll 16") for (int v_ = 0; v_ < (NV); v_++) {                                       \
                    float *cur_ = (tb) + r_ * (NR) + v_ * (VW);                                                    \
                    P##_STORE(cur_, P##_ADD(P##_LOAD(cur_), P##_MUL(P##_TABLE(tab_, S[r_][v_], hi_), coef_)));     \
                }                                                                                                  \
        } else {                                                                                                   \
            const VT alpha_ = P##_SET1((t)->alpha[j]);                                                             \
            _Pragma("GCC unroll 16") for (int r_ = 0; r_ < (ROWS); r_++)                                           \
                _Pragma("GCC unroll 16") for (int v_ = 0; v_ < (NV); v_++) {                                       \
                    float *cur_ = (tb) + r_ * (NR) + v_ * (VW);                                                    \
                    P##_STORE(cur_, P##_ADD(P##_LOAD(cur_),                                                        \
                                            P##_MUL(P##_RINT(P##_MUL(TOF(S[r_][v_]), alpha_)), coef_)));           \
                }                                                                                                  \
        }                                                                                                          \
    } while (0)

/* out[r][v] += tb[r][v] * (row_scale[r] * col_scale[v]) for crossbar block b (MR: packed rows). */
#define PF_EPI_SCALE(P, VT, t, b, out, tb, ROWS, MR, NV, NR, VW)                                                     \
    do {                                                                                                           \
        const float *rs_ = (t)->row_scale + (b) * (MR);                                                            \
        VT cs_[NV];                                                                                                \
        _Pragma("GCC unroll 16") for (int v_ = 0; v_ < (NV); v_++) cs_[v_] =                                       \
            P##_LOADU((t)->col_scale + (b) * (NR) + v_ * (VW));                                                    \
        _Pragma("GCC unroll 16") for (int r_ = 0; r_ < (ROWS); r_++) {                                             \
            const VT rv_ = P##_SET1(rs_[r_]);                                                                      \
            _Pragma("GCC unroll 16") for (int v_ = 0; v_ < (NV); v_++) {                                           \
                float *o_ = (out) + r_ * (NR) + v_ * (VW);                                                         \
                P##_STORE(o_, P##_ADD(P##_LOAD(o_), P##_MUL(P##_LOAD((tb) + r_ * (NR) + v_ * (VW)),                \
                                                            P##_MUL(rv_, cs_[v_]))));                              \
            }                                                                                                      \
        }                                                                                                          \
    } while (0)

#endif
