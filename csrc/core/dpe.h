/* Fused DAC -> crossbar MVM -> ADC product (spec section 7).
 *
 * One call computes out = MapReduceDot(x, W) for x (N, R, K) and programmed
 * weights W (K, P), reading slice codes and conductance levels directly and
 * writing the final product: nothing larger than one packed operand panel and
 * one output tile is ever allocated.
 *
 * Units. Voltages are kept in units of vread/(rdac-1) (a DAC code k, times
 * (1 + vnoise) when voltage noise is on) and conductances in units of Q_G
 * above LGS (a level L, or (G_r - LGS)/Q_G with device noise). Then the ADC
 * input I/adcRef*(radc-1) is acc * (radc-1)/D with acc = sum V*G over the n
 * rows of one crossbar and D = (rdac-1)(g_level-1)n, and the spec's
 * scale-back simplifies to code * coef[i][j] with
 * coef[i][j] = n * m_x[i] * m_w[j] * w_x[i] * w_w[j] / (radc_j - 1).
 *
 * Exactness. With every noise source off, acc is an integer <= D < 2^24, so
 * float32 accumulation is exact in any order; the ADC code is then
 * round-half-even(acc * (radc_j-1) / D), evaluated either as
 * rint(acc * alpha_j) when that was verified equal for every possible acc, or
 * through a table of exact codes. Outputs are accumulated in a fixed order,
 * identical for every thread count:
 *   out[r,c] = sum_b (t_b[r,c] * (scale_x[r,b] * scale_w[b,c])),
 *   t_b[r,c] = sum_i sum_j code_bij[r,c] * coef[i][j]        (all float32)
 * which tests/reference/dpe_ref.py transcribes operation by operation.
 *
 * Packed operand layouts (MR x NR micro-tiles, BLIS style):
 *   A: [row panel][b][i][k][MR] DAC voltages, rows past R zero
 *   B: [col panel][b][j][k][NR] conductances, cols past P zero
 * where k runs over the rows present in block b, pf_dpe_block_rows: n, or
 * K - (nb - 1) * n for the last block (no rows past K are stored or summed).
 *   row scales [row panel][b][MR], col scales [col panel][b][NR]. */
#ifndef PF_DPE_H
#define PF_DPE_H

#include "core/interrupt.h"
#include "core/pf_common.h"
#include <stdint.h>

#define PF_MAX_LEVELS 256 /* conductance levels are stored as uint8 (slicing.h) */

#include "core/quantize.h"

/* Where the input operand comes from. */
typedef enum {
    PF_DPE_X_CODES = 0,  /* slice codes uint8 (Sx, N, R, K), see slicing.h */
    PF_DPE_X_IM2COL = 1, /* a float32 image (N, C, H, W) read as its unfolded patch matrix
                            (N, Ho*Wo, C*kh*kw) in torch's unfold order, quantized and
                            sliced on the fly: the unfolded matrix never exists */
} pf_dpe_x_kind;

/* Convolution geometry of the implicit im2col input. */
typedef struct {
    const float *image;       /* (N, C, H, W) C-contiguous */
    int64_t channels, height, width;
    int64_t kh, kw, sh, sw, ph, pw, dh, dw;
    int64_t out_h, out_w;     /* Ho, Wo */
} pf_im2col;

/* Unfolded row r of item (torch's unfold order: channel, kernel row, kernel
 * column) into xrow[C*kh*kw]: zero outside the image. */
static inline void pf_im2col_row(const pf_im2col *c, int64_t item, int64_t r, float *xrow)
{
    const int64_t oh = r / c->out_w, ow = r % c->out_w;
    int64_t col = 0;
    for (int64_t ci = 0; ci < c->channels; ci++) {
        const float *plane = c->image + (item * c->channels + ci) * c->height * c->width;
        for (int64_t ki = 0; ki < c->kh; ki++) {
            const int64_t ih = oh * c->sh - c->ph + ki * c->dh;
            const int row_ok = ih >= 0 && ih < c->height;
            for (int64_t kj = 0; kj < c->kw; kj++, col++) {
                const int64_t iw = ow * c->sw - c->pw + kj * c->dw;
                xrow[col] = row_ok && iw >= 0 && iw < c->width ? plane[ih * c->width + iw] : 0.0f;
            }
        }
    }
}

/* Max-abs of every granule (qr, qc) of the unfolded matrix (N, R, K):
 * gran_max (N, ceil(R/qr), ceil(K/qc)). PF_EINVAL when an element is NaN or
 * infinite. */
pf_status pf_im2col_granule_max(const pf_im2col *c, int64_t batch, int64_t qr, int64_t qc, float *gran_max);
/* Dequantized unfolded input (N, R, K) for the backward pass, granules of
 * max-abs gran_max (N, ceil(R/qr), gc) quantized with sm (INT or BFP). */
pf_status pf_im2col_dequantize(const pf_im2col *c, int64_t batch, int64_t qr, int64_t qc, int64_t gc,
                               const float *gran_max, const pf_slice_method *sm, int bfp, float *out);

typedef struct {
    /* geometry */
    int64_t batch, rows, inner, cols; /* N, R, K, P */
    int64_t n;                        /* crossbar rows: x paral[1] == W paral[0] */

    /* input operand: slice codes (Sx, N, R, K) or an implicit im2col image,
     * and per-granule scales (N, x_gr, x_gc) of granule (x_qr, x_qc) */
    pf_dpe_x_kind x_kind;
    int64_t x_item0;                   /* batch offset of item 0 (noise indices of a chunked batch) */
    const uint8_t *x_codes;
    const pf_im2col *x_im2col;         /* PF_DPE_X_IM2COL */
    const float *x_gran_max;           /* PF_DPE_X_IM2COL: max-abs (N, x_gr, x_gc); scales derive from it */
    int x_bfp;                         /* PF_DPE_X_IM2COL: BFP (1) or INT (0) quantization */
    pf_slice_method x_method;          /* PF_DPE_X_IM2COL */
    const float *x_scale;
    int64_t x_qr, x_qc, x_gr, x_gc;
    int sx;
    int x_max[PF_MAX_SLICES];    /* m_x[i], least significant first */
    int64_t x_weight[PF_MAX_SLICES]; /* w_x[i] */

    /* weights: levels uint8 (Sw, K, P), optional programmed conductance
     * float32 (Sw, K, P) in siemens, per-granule scales (w_gr, w_gc) of
     * granule (w_qr, w_qc) over (K, P) */
    const uint8_t *w_levels;
    const float *w_conductance;
    const float *w_scale;
    int64_t w_qr, w_qc, w_gr, w_gc;
    int sw;
    int w_max[PF_MAX_SLICES];
    int64_t w_weight[PF_MAX_SLICES];

    /* the same weights packed once when programmed (pf_dpe_pack), or NULL to
     * pack per call; must match the weight fields above (pf_dpe_packed_check) */
    struct pf_dpe_packed *w_packed;

    /* device */
    int rdac, g_level;
    int64_t radc[PF_MAX_SLICES];     /* per weight slice, least significant first */
    double HGS, LGS;
    const float *read_sigma;         /* g_level entries, or NULL for none */
    double vnoise;
    uint64_t seed;
    uint32_t call;

    /* output: float32, element (item, r, p) at out[item*so_n + r*so_r + p*so_p] */
    float *out;
    int64_t so_n, so_r, so_p;

    pf_cancel *cancel;                 /* polled between blocks: PF_EINTR when set (NULL: never) */
} pf_dpe_args;

/* Inner blocks nb = ceil(K/n) and rows stored per block nk (n, or K when one
 * block holds all K < n rows). */
static inline void pf_dpe_blocks(const pf_dpe_args *a, int64_t *nb, int64_t *nk)
{
    *nb = pf_ceil_div(a->inner, a->n);
    *nk = *nb == 1 ? a->inner : a->n;
}

/* Rows of inner block b present in the weights: n, or what is left of K for
 * the last one (K when one block holds all K < n rows). Packed panels store
 * and kernels sum only these: block b starts at b * n * S rows (S slices) and
 * holds its slices rows-of-block apart. */
static inline int64_t pf_dpe_block_rows(const pf_dpe_args *a, int64_t b)
{
    const int64_t left = a->inner - b * a->n;
    return left < a->n ? left : a->n;
}

/* Some read_sigma entry is positive: conductances are re-drawn every call. */
static inline int pf_dpe_read_noise_on(const pf_dpe_args *a)
{
    if (a->read_sigma)
        for (int l = 0; l < a->g_level; l++)
            if (a->read_sigma[l] > 0.0f)
                return 1;
    return 0;
}

/* Per-call constants, the same for every backend (CPU, OpenCL): scale-back
 * coefficients coef[i*sw + j], ADC gains alpha[j], DAC codes dac[i][slice value]
 * (0 past the slice maximum) and, for noise-free slices whose fast rint is not
 * exact, tables of exact ADC codes adc_table[j][0..adc_table_max[j]]. */
typedef struct {
    int noise_x;                       /* DAC voltage noise on */
    int noise_w;                       /* any conductance noise on */
    float coef[PF_MAX_SLICES * PF_MAX_SLICES];
    float alpha[PF_MAX_SLICES];
    float *adc_table[PF_MAX_SLICES];
    int32_t adc_table_max[PF_MAX_SLICES];
    float dac[PF_MAX_SLICES][256];
    int64_t nb;                        /* inner blocks */
    int64_t nk;                        /* rows stored per block: n, or K when one block holds all K < n rows
                                          (the rows past K are zeros: packing them would only cost memory) */
} pf_dpe_consts;

pf_status pf_dpe_consts_init(const pf_dpe_args *a, pf_dpe_consts *c);
void pf_dpe_consts_free(pf_dpe_consts *c);

/* Programmed weights packed once (cpu/dpe_packed.c), owned by the C core and
 * allocated through the memory accounting (core/memory.h), so a call reads
 * the packed micro-panels instead of repacking the weights.
 *
 * Representations (kind), one per object; more can be added beside them
 * (e.g. an integer form of the levels, int8 panels [col panel][b][j][k][NR]
 * for an exact integer micro-kernel: a new kind with its own buffer, chosen
 * by pf_dpe_pack from the arguments, and the MVM selects the kernel by kind):
 *   PF_DPE_PACKED_READY  no read noise: B holds every call's conductance
 *                        values; a call does no weight work at all.
 *   PF_DPE_PACKED_NOISY  read noise on: only the column scales are final; B is
 *                        a resident work buffer (padding zeroed once) that each
 *                        call of the blocked path refills with its noisy
 *                        values, at the same Philox indices as the per-call
 *                        path. It is allocated by the first call that needs
 *                        it: small batches draw their noise beside the tiles
 *                        (cpu/dpe.c run_fused) and never do, so B stays NULL
 *                        for a layer only ever run at small batches. A second
 *                        concurrent call on the same object packs into its
 *                        own buffer. */
typedef enum {
    PF_DPE_PACKED_READY = 0,
    PF_DPE_PACKED_NOISY = 1,
} pf_dpe_packed_kind;

typedef struct pf_dpe_packed {
    pf_dpe_packed_kind kind;
    /* what it was packed from: checked against each call's arguments */
    int64_t inner, cols, n, w_qr, w_qc;
    int sw, g_level, has_conductance;
    double HGS, LGS;
    int64_t nb, nk, ncp;     /* inner blocks, rows per block, column panels */
    size_t b_panel;          /* floats per column panel of B */
    float *B;                /* [ncp][nb][sw][rows of block b][NR] conductance values (see above); NULL for
                                PF_DPE_PACKED_NOISY until a call needs it */
    size_t b_bytes;          /* bytes of B */
    float *Bs;               /* [ncp][nb][NR] column scales */
    int8_t *iB;              /* PF_DPE_PACKED_READY with every cell at a level (no programmed
                                conductances, or ones the float path reads as levels: cpu/dpe_int.c):
                                the exact integer path's panels (levels as int8), so its calls do no
                                weight work either; NULL otherwise */
    float *iBs;              /* their column scales */
    size_t bytes;            /* resident bytes (this struct, B, Bs, iB and iBs); grows when a
                                noisy call allocates B: read it with __atomic_load_n */
    int busy;                /* PF_DPE_PACKED_NOISY: B in use by a call (atomic builtins) */
} pf_dpe_packed;

/* Packs the weights of a (weight, device and noise fields; batch, rows and
 * the input are not read) into a new object: PF_DPE_PACKED_READY unless
 * a->read_sigma has a positive entry. PF_EINVAL, PF_EOVERFLOW, PF_ENOMEM. */
pf_status pf_dpe_pack(const pf_dpe_args *a, pf_dpe_packed **out);
void pf_dpe_packed_free(pf_dpe_packed *p);
/* PF_OK when p was packed from weights of a's geometry and device with a's
 * kind of read noise, else PF_EINVAL (naming the mismatch). */
pf_status pf_dpe_packed_check(const pf_dpe_packed *p, const pf_dpe_args *a);

/* Runs one MVM call. PF_EINVAL for inconsistent arguments (the binding
 * validates first; this re-checks what memory safety depends on); PF_EINTR
 * when a->cancel was set (out partly written). */
pf_status pf_dpe_mvm(const pf_dpe_args *a);

/* ---- micro-kernels (one per ISA, selected at run time) ---- */
typedef struct {
    const float *A, *B;          /* packed micro-panels */
    const float *row_scale;      /* [b][MR] */
    const float *col_scale;      /* [b][NR] */
    int64_t nb;                  /* inner blocks */
    int n, sx, sw, mr_valid, nr_valid; /* n: rows of every block but the last */
    int n_last;                  /* rows of the last block (pf_dpe_block_rows) */
    const float *coef;           /* [i*sw + j] */
    const float *alpha;          /* [j] */
    const float *const *adc_table; /* [j] exact codes indexed by acc, or NULL */
    const int32_t *adc_table_max;  /* [j] last valid index */
    float *out;                  /* tile origin */
    int64_t ldr, ldc;            /* element strides of out rows / cols */
    int accumulate;              /* out holds this tile's sums over earlier blocks: continue them */
} pf_dpe_tile;

#define PF_DPE_MR 6
#define PF_DPE_NR 16

/* Short tiles: instances of a micro-kernel that compute only the first 1, 2
 * or 4 rows of a row panel, for a panel with that few valid rows (a small
 * batch's last panel; batch 1 is a GEMV). They skip the padding rows' sums
 * and epilogues, and give the full tile's bits row for row. Index s of a
 * kernel's short instances covers pf_short_tile_rows(s) rows. */
#define PF_SHORT_TILES 3
static inline int pf_short_tile_rows(int s) { return 1 << s; }
/* The smallest short instance for mr_valid rows, -1 for none (the full tile). */
static inline int pf_short_tile(int mr_valid) { return mr_valid <= 1 ? 0 : mr_valid <= 2 ? 1 : mr_valid <= 4 ? 2 : -1; }

void pf_dpe_tile_generic(const pf_dpe_tile *t);
void pf_dpe_tile_avx2(const pf_dpe_tile *t);
void pf_dpe_tile_avx512(const pf_dpe_tile *t);
/* short instances (rows 1, 2, 4): mr_valid at most their rows */
void pf_dpe_tile_avx2_r1(const pf_dpe_tile *t);
void pf_dpe_tile_avx2_r2(const pf_dpe_tile *t);
void pf_dpe_tile_avx2_r4(const pf_dpe_tile *t);
void pf_dpe_tile_avx512_r1(const pf_dpe_tile *t);
void pf_dpe_tile_avx512_r2(const pf_dpe_tile *t);
void pf_dpe_tile_avx512_r4(const pf_dpe_tile *t);

#endif
