/* The integer micro-kernel of the exact DPE path (dpe_int.h), written once and
 * instantiated per ISA by dpe_int.c (portable), dpe_int_avx2.c,
 * dpe_int_avxvnni.c and dpe_int_avx512vnni.c under function target pragmas.
 * An MR x NR tile: integer crossbar sums S per (block, i, j), then the float
 * path's ADC epilogue on (float)S in the float path's order (dpe.h,
 * dpe_tile_simd.h), so every instance gives the float path's bits.
 *
 * The includer defines:
 *   PF_ITILE_FN                 the function name
 *   ITILE_MR                    tile rows (optional, default 4; the packed panel height)
 *   ITILE_ROWS                  rows computed (optional, default ITILE_MR): 1, 2 or 4 give
 *                               the short instances (core/dpe.h) for a panel of at most
 *                               that many valid rows, which skip the padding rows' sums
 *                               and epilogues; 1 is the GEMV-shaped one (batch 1)
 *   IVC                         columns per integer accumulator (= floats per VF)
 *   IACC, IAV, IBV              accumulator, broadcast-A and B operand types
 *   I_ZERO()                    zero accumulator
 *   I_BCASTA(p)                 the 4 codes at p (one row, one k quad) for every column
 *   I_LOADB(p)                  IVC columns x 4 levels at p
 *   I_DOT(acc, a, b)            acc + per column sum of the 4 products (int32 lanes)
 *   I_FINISH(acc)               int32 column sums (VI)
 *   I_DOT16, I_FINISH16         optional: the same with 16-bit lanes, used when t->acc16
 *   VF, VI                      float and int32 vectors of IVC lanes
 *   VI_LOAD1(p) (broadcast int32), VI_ADD(a, b), VI_CVT(v) (to float)
 *   VF_SET1(x) VF_LOAD(p) VF_STORE(p, v) (aligned) VF_LOADU(p) VF_MUL VF_ADD VF_RINT
 *   VF_TABLE(tab, vi, hi)       tab[clamp(vi, 0, hi)] */
#include "cpu/dpe_epilogue.h"
#include "cpu/dpe_int.h"

#include <string.h>

#ifndef ITILE_MR
#define ITILE_MR 4
#endif
#define IT_MR ITILE_MR
#ifdef ITILE_ROWS
#define IT_ROWS ITILE_ROWS
#else
#define IT_ROWS IT_MR
#endif
#define IT_NR PF_DPE_INR
#define IT_NV (IT_NR / IVC)

/* Accumulator sets over alternate k quads, summed at the end (integers: the
 * same S in any order): a tile of few accumulators (the short instances of
 * the VNNI kernels, one zmm at one row) would otherwise wait on the dot
 * product's latency at every quad; at least 4 chains in flight. */
#define IT_KS (IT_ROWS * IT_NV >= 4 ? 1 : 4 / (IT_ROWS * IT_NV))

/* one k quad at ap / bp into the accumulators acc_[r][v] */
#define IT_QUAD(DOT, acc_, ap_, bp_)                                                                               \
    do {                                                                                                           \
        IBV bv[IT_NV];                                                                                             \
        _Pragma("GCC unroll 16") for (int v = 0; v < IT_NV; v++) bv[v] = I_LOADB((bp_) + v * IVC * 4);             \
        _Pragma("GCC unroll 16") for (int r = 0; r < IT_ROWS; r++) {                                               \
            const IAV av = I_BCASTA((ap_) + r * 4);                                                                \
            _Pragma("GCC unroll 16") for (int v = 0; v < IT_NV; v++) acc_[r][v] = DOT(acc_[r][v], av, bv[v]);      \
        }                                                                                                          \
    } while (0)

/* S of one (block, i, j) for the tile into s[r][v], with DOT/FINISH: the A and
 * B pointers walk the k quads, every accumulator stays in a register. */
#if IT_KS > 1
#define IT_MAC(DOT, FINISH)                                                                                        \
    do {                                                                                                           \
        IACC acc[IT_KS][IT_ROWS][IT_NV];                                                                           \
        _Pragma("GCC unroll 4") for (int q = 0; q < IT_KS; q++)                                                    \
            _Pragma("GCC unroll 16") for (int r = 0; r < IT_ROWS; r++)                                             \
                _Pragma("GCC unroll 16") for (int v = 0; v < IT_NV; v++) acc[q][r][v] = I_ZERO();                  \
        const uint8_t *ap = A;                                                                                     \
        const int8_t *bp = B;                                                                                      \
        int kq = 0;                                                                                                \
        for (; kq + IT_KS <= nkq; kq += IT_KS, ap += IT_KS * IT_MR * 4, bp += IT_KS * IT_NR * 4)                   \
            _Pragma("GCC unroll 4") for (int q = 0; q < IT_KS; q++)                                                \
                IT_QUAD(DOT, acc[q], ap + q * IT_MR * 4, bp + q * IT_NR * 4);                                      \
        for (; kq < nkq; kq++, ap += IT_MR * 4, bp += IT_NR * 4)                                                   \
            IT_QUAD(DOT, acc[0], ap, bp);                                                                          \
        _Pragma("GCC unroll 16") for (int r = 0; r < IT_ROWS; r++)                                                 \
            _Pragma("GCC unroll 16") for (int v = 0; v < IT_NV; v++) {                                             \
                s[r][v] = FINISH(acc[0][r][v]);                                                                    \
                _Pragma("GCC unroll 4") for (int q = 1; q < IT_KS; q++)                                            \
                    s[r][v] = VI_ADD(s[r][v], FINISH(acc[q][r][v]));                                               \
            }                                                                                                      \
    } while (0)
#else
/* enough chains: one accumulator set. The loop above with IT_KS = 1 gives the
 * same sums, but the full tiles ran 2-3% slower with it (AVX2, interleaved
 * A/B), so they keep this one. */
#define IT_MAC(DOT, FINISH)                                                                                        \
    do {                                                                                                           \
        IACC acc[IT_ROWS][IT_NV];                                                                                  \
        _Pragma("GCC unroll 16") for (int r = 0; r < IT_ROWS; r++)                                                 \
            _Pragma("GCC unroll 16") for (int v = 0; v < IT_NV; v++) acc[r][v] = I_ZERO();                         \
        const uint8_t *ap = A;                                                                                     \
        const int8_t *bp = B;                                                                                      \
        for (int kq = 0; kq < nkq; kq++, ap += IT_MR * 4, bp += IT_NR * 4)                                         \
            IT_QUAD(DOT, acc, ap, bp);                                                                             \
        _Pragma("GCC unroll 16") for (int r = 0; r < IT_ROWS; r++)                                                 \
            _Pragma("GCC unroll 16") for (int v = 0; v < IT_NV; v++) s[r][v] = FINISH(acc[r][v]);                  \
    } while (0)
#endif

void PF_ITILE_FN(const pf_dpe_itile *t)
{
    _Alignas(64) float out[IT_ROWS * IT_NR];
    _Alignas(64) float tb[IT_ROWS * IT_NR];
    memset(out, 0, sizeof out);
    for (int64_t b = 0; b < t->nb; b++) {
        const int nkq = b == t->nb - 1 ? t->nkq_last : t->nkq; /* the quads present (dpe_int.h) */
        const uint8_t *Ab = t->A + b * t->sx * (int64_t)t->nkq * IT_MR * 4;
        const int8_t *Bb = t->B + b * t->sw * (int64_t)t->nkq * IT_NR * 4;
        memset(tb, 0, sizeof tb);
        for (int i = 0; i < t->sx; i++) {
            const uint8_t *A = Ab + (int64_t)i * nkq * IT_MR * 4;
            const int32_t *rsum = t->rowsum ? t->rowsum + (b * t->sx + i) * IT_MR : NULL;
            for (int j = 0; j < t->sw; j++) {
                const int8_t *B = Bb + (int64_t)j * nkq * IT_NR * 4;
                VI s[IT_ROWS][IT_NV];
#ifdef I_DOT16
                if (t->acc16)
                    IT_MAC(I_DOT16, I_FINISH16);
                else
#endif
                    IT_MAC(I_DOT, I_FINISH);
                if (rsum)
#pragma GCC unroll 16
                    for (int r = 0; r < IT_ROWS; r++) {
                        const VI off = VI_LOAD1(rsum + r);
#pragma GCC unroll 16
                        for (int v = 0; v < IT_NV; v++)
                            s[r][v] = VI_ADD(s[r][v], off);
                    }
                /* the float path's epilogue on the exact sums (dpe_epilogue.h) */
                PF_EPI_ADC(VF, VF, VI_CVT, t, i, j, tb, s, IT_ROWS, IT_NV, IT_NR, IVC);
            }
        }
        PF_EPI_SCALE(VF, VF, t, b, out, tb, IT_ROWS, IT_MR, IT_NV, IT_NR, IVC);
    }
    pf_dpe_tile_canonical_nan(out, (int)(sizeof out / sizeof out[0]));
    memcpy(t->out, out, sizeof out);
}

#undef IT_MAC
#undef IT_QUAD
#undef IT_KS
#undef IT_MR
#undef ITILE_MR
#undef IT_ROWS
#undef ITILE_ROWS
#undef IT_NR
#undef IT_NV
