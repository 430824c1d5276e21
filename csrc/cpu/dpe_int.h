/* Exact integer MVM of the noise-free DPE path (docs/semantics.md 7.1).
 *
 * With every noise source off and conductances at levels (ideal levels, or
 * programmed conductances whose float-path values G / Q_G - LGS / Q_G are all
 * integers, e.g. stuck cells without write variation for some HGS, LGS) the crossbar
 * sum of one block and slice pair is the integer S = sum_k dac_k * L_k, which
 * the float path accumulates exactly in float32. This path computes the same S
 * with u8 x s8 integer dot products (vpdpbusd, vpmaddubsw) and hands (float)S
 * to the float path's ADC epilogue operation by operation, so the outputs are
 * bit-identical to pf_dpe_mvm's float path and to tests/reference/dpe_ref.py.
 *
 * Operands: DAC codes k in [0, rdac-1] as u8 (needs rdac <= 256); levels as
 * s8 B = L - boff with boff = 0 when g_level <= 128, else 128, in which case
 * S = sum k*B + boff * sum k (the row sums are packed with the codes).
 *
 * Packed layouts (k in quads, the 4 bytes of one row or column contiguous):
 *   A: [row panel][b][i][kq][mr][4] u8, rows past R and k past K zero
 *   B: [col panel][b][j][kq][NR][4] s8, cols past P and k past K zero
 * with kq over the quads of the rows present in block b (pf_dpe_block_rows):
 * nkq, or nkq_last for the last block (no block padded to n rows).
 *   row sums [row panel][b][i][mr] int32 (boff * sum of the codes). */
#ifndef PF_DPE_INT_H
#define PF_DPE_INT_H

#include "core/dpe.h"

#define PF_DPE_IMR_MAX 8 /* tile rows: 4 (AVX2, AVX-VNNI) or 8 (AVX-512 VNNI, portable) */
#define PF_DPE_INR PF_DPE_NR

typedef struct {
    const uint8_t *A;              /* packed codes of the row panel */
    const int8_t *B;               /* packed levels of the column panel */
    const int32_t *rowsum;         /* [b][i][mr], or NULL when boff == 0 */
    const float *row_scale;        /* [b][mr] */
    const float *col_scale;        /* [b][NR] */
    int64_t nb;
    int nkq, sx, sw, mr_valid, nr_valid; /* nkq: k quads of every block but the last */
    int nkq_last;                  /* k quads of the last block */
    int acc16;                     /* every partial sum fits int16 (AVX2 kernel: 16-bit accumulation) */
    const float *coef;             /* [i*sw + j] */
    const float *alpha;            /* [j] */
    const float *const *adc_table; /* [j] exact codes indexed by S, or NULL */
    const int32_t *adc_table_max;
    float *out;                    /* mr x NR, row stride NR */
} pf_dpe_itile;

void pf_dpe_itile_generic(const pf_dpe_itile *t);
void pf_dpe_itile_avx2(const pf_dpe_itile *t);      /* vpmaddubsw: needs 2*max(k)*max|B| <= 32767 */
void pf_dpe_itile_avx2_wide(const pf_dpe_itile *t); /* the portable kernel compiled for AVX2 (no saturation) */
void pf_dpe_itile_avxvnni(const pf_dpe_itile *t);
void pf_dpe_itile_avx512vnni(const pf_dpe_itile *t);
/* Short instances (core/dpe.h): the first 1, 2 or 4 rows of a panel (4 only
 * for the 8-row kernels), mr_valid at most that */
void pf_dpe_itile_generic_r1(const pf_dpe_itile *t);
void pf_dpe_itile_generic_r2(const pf_dpe_itile *t);
void pf_dpe_itile_generic_r4(const pf_dpe_itile *t);
void pf_dpe_itile_avx2_r1(const pf_dpe_itile *t);
void pf_dpe_itile_avx2_r2(const pf_dpe_itile *t);
void pf_dpe_itile_avxvnni_r1(const pf_dpe_itile *t);
void pf_dpe_itile_avxvnni_r2(const pf_dpe_itile *t);
void pf_dpe_itile_avx512vnni_r1(const pf_dpe_itile *t);
void pf_dpe_itile_avx512vnni_r2(const pf_dpe_itile *t);
void pf_dpe_itile_avx512vnni_r4(const pf_dpe_itile *t);

/* Whether the call can take the integer path (no read or DAC noise, rdac <= 256, enabled; programmed
 * conductances only with a pack holding integer panels, or unpacked: pf_dpe_mvm_int checks them). */
int pf_dpe_int_eligible(const pf_dpe_args *a, const pf_dpe_consts *s);
/* The integer path's weight panels of a (levels - boff as int8, column scales),
 * allocated (pf_calloc) and packed for pf_dpe_pack: with them in a->w_packed a
 * call does no weight work. *bytes: what they hold. With programmed conductances
 * (a->w_conductance) the levels are the cells' values in the float path when
 * every one is a level (stuck cells without write variation, for some HGS, LGS
 * and g_level), else PF_OK with *B = *Bs = NULL and *bytes = 0. */
pf_status pf_dpe_int_pack_weights(const pf_dpe_args *a, int64_t nb, int64_t nk, int8_t **B, float **Bs,
                                  size_t *bytes);
/* The integer MVM; same contract as pf_dpe_mvm after its validation. *declined
 * (nothing written, PF_OK): unpacked programmed conductances that are not all
 * levels; the caller takes the float path. */
pf_status pf_dpe_mvm_int(const pf_dpe_args *a, const pf_dpe_consts *s, int *declined);

/* Process-wide switch (tests compare against the float path) and counters. */
void pf_dpe_int_set_enabled(int on);
int pf_dpe_int_enabled(void);
uint64_t pf_dpe_int_calls(void);  /* calls that took the integer path */
/* The integer kernel the next call would use: a pf_tier value (PF_TIER_AVX512
 * never: an AVX-512 CPU without VNNI uses the AVX2 or AVX-VNNI kernel). */
int pf_dpe_int_kernel_tier(void);

#endif
