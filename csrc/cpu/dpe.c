/* Fused DPE MVM: setup, operand packing with in-kernel noise, the loop nest
 * and the portable micro-kernel. See dpe.h for the contract. */
#include "core/contract.h"
#include "cpu/dpe_internal.h"
#include "cpu/cpu_features.h"
#include "cpu/dpe_int.h"
#include "cpu/dpe_epilogue.h"
#include "cpu/kernels.h"
#include "core/memory.h"
#include "cpu/noise.h"
#include "core/philox_noise.h"
#include "cpu/threads.h"

#include <float.h>
#include <stdatomic.h>
#include <math.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define MR PF_DPE_MR
#define NR PF_DPE_NR
/* Packed input rows per block: a few panels that stay in L2 while the weight
 * panels pass. Peak memory is one block per thread, whatever the batch. */
#define PF_DPE_A_BLOCK_BYTES ((size_t)192 << 10)
/* run_fused: every packed input row at once up to this size (batch 64 of the
 * engine case: 1.1 MB), and column chunks of at most this many panels. */
#define PF_DPE_FUSED_A_BYTES ((size_t)4 << 20)
#define PF_DPE_FUSED_CHUNK_PANELS 8


/* ---- packing ---- */

/* First voltage-noise index of input row r of item: element (item, r, col)
 * of slice i draws index ((item0 + item) * R + r) * Sx * K + i * K + col. It
 * does not depend on the batch size, so a batch split into chunks (item0 =
 * chunk start) sees exactly the noise of the whole batch. */
static inline uint64_t pf_vnoise_index(const pf_dpe_args *a, int64_t item, int64_t r)
{
    return (uint64_t)(((a->x_item0 + item) * a->rows + r) * a->sx) * (uint64_t)a->inner;
}

/* DAC voltages of one input row from its slice codes (one plane per slice),
 * into row rr of a packed panel. z: scratch of K floats when voltage noise is
 * on, else NULL. */
static void pack_x_row(const pf_dpe_args *a, const pf_dpe_consts *s, const uint8_t *const *plane, uint64_t noise_base,
                       int rr, float *P, float *z)
{
    const int64_t n = a->n, K = a->inner;
    for (int i = 0; i < a->sx; i++) {
        const uint8_t *codes = plane[i];
        if (z)
            pf_normals(a->seed, PF_STREAM_VNOISE, a->call, noise_base + (uint64_t)(i * K), K, z);
        /* branch-free: code 0 maps to 0 V through the table, with or without noise */
        const float *dac = s->dac[i];
        const float vn = (float)a->vnoise;
        for (int64_t b = 0, col = 0; col < K; b++) {
            const int64_t kn = pf_min64(n, K - col); /* the rows present (core/dpe.h) */
            float *dst = P + (b * a->sx * n + i * kn) * MR + rr;
            if (z)
                for (int64_t k = 0; k < kn; k++)
                    dst[k * MR] = dac[codes[col + k]] * (1.0f + vn * z[col + k]);
            else
                for (int64_t k = 0; k < kn; k++)
                    dst[k * MR] = dac[codes[col + k]];
            col += kn;
        }
    }
}

/* One input row of the implicit im2col source: gather the unfolded row,
 * quantize each element with its granule (quantize.h, the slicing stage's own
 * arithmetic) and slice it into per-slice code planes, then pack as codes.
 * Noise indices are those of the equivalent slice-code tensor, so fused and
 * pre-sliced inputs see the same noise. xrow: K floats; codes: sx*K bytes. */
static void pack_x_row_im2col(const pf_dpe_args *a, const pf_dpe_consts *s, int64_t item, int64_t r, int rr, float *P,
                              float *xrow, uint8_t *codes, float *z)
{
    const int64_t K = a->inner;
    const float *mrow = a->x_gran_max + (item * a->x_gr + r / a->x_qr) * a->x_gc;
    const int B = a->x_method.total_bits;
    const uint8_t *plane[PF_MAX_SLICES];
    pf_im2col_row(a->x_im2col, item, r, xrow);
    for (int64_t c0 = 0, g = 0; c0 < K; c0 += a->x_qc, g++) {
        const pf_quant_granule gr = pf_quant_granule_make(mrow[g], B, a->x_bfp);
        const int64_t c1 = pf_min64(c0 + a->x_qc, K);
        for (int64_t col = c0; col < c1; col++) {
            int32_t u = pf_twos_complement(pf_quantize(xrow[col], &gr), B);
            for (int i = 0; i < a->sx; i++)
                codes[i * K + col] = pf_slice_code(u, a->x_method.offset[i], a->x_method.width[i]);
        }
    }
    for (int i = 0; i < a->sx; i++)
        plane[i] = codes + i * K;
    pack_x_row(a, s, plane, pf_vnoise_index(a, item, r), rr, P, z);
}

pf_status pf_im2col_granule_max(const pf_im2col *c, int64_t batch, int64_t qr, int64_t qc, float *gran_max)
{
    const int64_t R = c->out_h * c->out_w, K = c->channels * c->kh * c->kw;
    const int64_t gr = pf_ceil_div(R, qr), gc = pf_ceil_div(K, qc);
    int bad = 0;
#pragma omp parallel num_threads(pf_threads_for((double)batch * (double)R * (double)K)) reduction(| : bad)
    {
        float *xrow = pf_alloc((size_t)K * sizeof(float));
        if (!xrow)
            bad = 2;
#pragma omp for collapse(2) schedule(static)
        for (int64_t item = 0; item < batch; item++)
            for (int64_t g = 0; g < gr; g++) {
                if (!xrow)
                    continue;
                float *m = gran_max + (item * gr + g) * gc;
                for (int64_t q = 0; q < gc; q++)
                    m[q] = 0.0f;
                for (int64_t r = g * qr; r < pf_min64((g + 1) * qr, R); r++) {
                    pf_im2col_row(c, item, r, xrow);
                    for (int64_t c0 = 0, q = 0; c0 < K; c0 += qc, q++) {
                        float mx = m[q];
                        for (int64_t col = c0; col < pf_min64(c0 + qc, K); col++) {
                            float v = fabsf(xrow[col]);
                            bad |= !(v <= FLT_MAX);
                            mx = v > mx ? v : mx;
                        }
                        m[q] = mx;
                    }
                }
            }
        pf_free(xrow);
    }
    if (bad & 2)
        return pf_fail(PF_ENOMEM, "input", "out of memory for an unfolded row of %lld floats", (long long)K);
    return bad ? pf_fail(PF_ENONFINITE, "input", "contains NaN or infinity") : PF_OK;
}

pf_status pf_im2col_dequantize(const pf_im2col *c, int64_t batch, int64_t qr, int64_t qc, int64_t gc,
                               const float *gran_max, const pf_slice_method *sm, int bfp, float *out)
{
    const int64_t R = c->out_h * c->out_w, K = c->channels * c->kh * c->kw;
    const int64_t gr = pf_ceil_div(R, qr);
#pragma omp parallel for num_threads(pf_threads_for((double)batch * (double)R * (double)K)) collapse(2) schedule(static)
    for (int64_t item = 0; item < batch; item++)
        for (int64_t r = 0; r < R; r++) {
            const float *mrow = gran_max + (item * gr + r / qr) * gc;
            float *o = out + (item * R + r) * K;
            pf_im2col_row(c, item, r, o);
            for (int64_t c0 = 0, q = 0; c0 < K; c0 += qc, q++) {
                const pf_quant_granule g = pf_quant_granule_make(mrow[q], sm->total_bits, bfp);
                for (int64_t col = c0; col < pf_min64(c0 + qc, K); col++)
                    o[col] = pf_dequantize(pf_quantize(o[col], &g), &g);
            }
        }
    return PF_OK;
}

/* Per-thread scratch of the input packer. */
typedef struct {
    float *z;         /* K normals (voltage noise on) */
    float *xrow;      /* K values of an unfolded row (im2col) */
    uint8_t *codes;   /* sx * K codes of an unfolded row (im2col) */
} pack_scratch;

static int scratch_init(const pf_dpe_args *a, const pf_dpe_consts *s, pack_scratch *sc)
{
    const int im2col = a->x_kind == PF_DPE_X_IM2COL;
    sc->z = s->noise_x ? pf_alloc((size_t)a->inner * sizeof(float)) : NULL;
    sc->xrow = im2col ? pf_alloc((size_t)a->inner * sizeof(float)) : NULL;
    sc->codes = im2col ? pf_alloc((size_t)a->inner * a->sx) : NULL;
    return (s->noise_x && !sc->z) || (im2col && (!sc->xrow || !sc->codes)) ? -1 : 0;
}

static void pack_scratch_free(pack_scratch *sc)
{
    pf_free(sc->z);
    pf_free(sc->xrow);
    pf_free(sc->codes);
}

/* Packs row panel rp of the flattened (N*R) input rows into P (DAC voltages)
 * and S (row scales per block). */
static void pack_x_panel(const pf_dpe_args *a, const pf_dpe_consts *s, int64_t rp, float *P, float *S,
                         const pack_scratch *sc)
{
    const int64_t n = a->n, nb = s->nb, K = a->inner, R = a->rows, N = a->batch;
    memset(P, 0, (size_t)(a->sx * K * MR) * sizeof(float));
    memset(S, 0, (size_t)(nb * MR) * sizeof(float));
    for (int rr = 0; rr < MR; rr++) {
        int64_t g = rp * MR + rr;
        if (g >= N * R)
            break;
        int64_t item = g / R, r = g % R;
        const int64_t gofs = (item * a->x_gr + r / a->x_qr) * a->x_gc;
        if (a->x_kind == PF_DPE_X_IM2COL)
            for (int64_t b = 0; b < nb; b++)
                S[b * MR + rr] =
                    pf_quant_granule_make(a->x_gran_max[gofs + (b * n) / a->x_qc], a->x_method.total_bits, a->x_bfp)
                        .scale;
        else
            for (int64_t b = 0; b < nb; b++)
                S[b * MR + rr] = a->x_scale[gofs + (b * n) / a->x_qc];
        if (a->x_kind == PF_DPE_X_IM2COL) {
            pack_x_row_im2col(a, s, item, r, rr, P, sc->xrow, sc->codes, sc->z);
        } else {
            const uint8_t *plane[PF_MAX_SLICES];
            for (int i = 0; i < a->sx; i++)
                plane[i] = a->x_codes + ((i * N + item) * R + r) * K;
            pack_x_row(a, s, plane, pf_vnoise_index(a, item, r), rr, P, sc->z);
        }
    }
}

/* ---- portable micro-kernel ----
 * The SIMD kernels accumulate with fused multiply-adds. Noise-free operands
 * are small integers (every product and partial sum exact in float32), where
 * a*b + c equals fma(a, b, c); with noise they are not, so the portable kernel
 * then fuses too (tile_generic_fused: the FMA instruction where the CPU has
 * it, else libm's correctly rounded fmaf) and gives the SIMD kernels' bits. */

static inline __attribute__((always_inline)) void tile_generic(const pf_dpe_tile *t, int fused)
{
    float out[MR * NR];
    float tb[MR * NR];
    float acc[MR * NR];
    pf_dpe_tile_start(t, out, MR, NR);
    for (int64_t b = 0; b < t->nb; b++) {
        const int n = b == t->nb - 1 ? t->n_last : t->n; /* the rows present (core/dpe.h) */
        memset(tb, 0, sizeof tb);
        for (int i = 0; i < t->sx; i++) {
            const float *A = t->A + (b * t->sx * t->n + (int64_t)i * n) * MR;
            for (int j = 0; j < t->sw; j++) {
                const float *B = t->B + (b * t->sw * t->n + (int64_t)j * n) * NR;
                memset(acc, 0, sizeof acc);
                for (int k = 0; k < n; k++)
                    for (int r = 0; r < MR; r++) {
                        float av = A[k * MR + r];
                        if (fused)
                            for (int c = 0; c < NR; c++)
                                acc[r * NR + c] = fmaf(av, B[k * NR + c], acc[r * NR + c]);
                        else
                            for (int c = 0; c < NR; c++)
                                acc[r * NR + c] += av * B[k * NR + c];
                    }
                const float coef = t->coef[i * t->sw + j];
                const float *tab = t->adc_table ? t->adc_table[j] : NULL;
                for (int e = 0; e < MR * NR; e++) {
                    float code;
                    if (tab) {
                        int32_t idx = (int32_t)acc[e];
                        idx = idx < 0 ? 0 : idx > t->adc_table_max[j] ? t->adc_table_max[j] : idx;
                        code = tab[idx];
                    } else {
                        code = nearbyintf(acc[e] * t->alpha[j]);
                    }
                    tb[e] = tb[e] + code * coef;
                }
            }
        }
        const float *rs = t->row_scale + b * MR;
        const float *cs = t->col_scale + b * NR;
        for (int r = 0; r < MR; r++)
            for (int c = 0; c < NR; c++)
                out[r * NR + c] = out[r * NR + c] + tb[r * NR + c] * (rs[r] * cs[c]);
    }
    pf_dpe_tile_canonical_nan(out, MR * NR);
    for (int r = 0; r < t->mr_valid; r++)
        for (int c = 0; c < t->nr_valid; c++)
            t->out[r * t->ldr + c * t->ldc] = out[r * NR + c];
}

void pf_dpe_tile_generic(const pf_dpe_tile *t) { tile_generic(t, 0); }

#if defined(__x86_64__) || defined(__i386__)
__attribute__((target("fma"))) static void tile_generic_fma(const pf_dpe_tile *t) { tile_generic(t, 1); }
#endif
static void tile_generic_fmaf(const pf_dpe_tile *t) { tile_generic(t, 1); }

/* The portable kernel for noisy operands: the FMA instruction where the CPU
 * has it, else libm's correctly rounded fmaf (the same bits). */
void pf_dpe_tile_generic_fused(const pf_dpe_tile *t)
{
#if defined(__x86_64__) || defined(__i386__)
    if (pf_cpu_has_fma()) {
        tile_generic_fma(t);
        return;
    }
#endif
    tile_generic_fmaf(t);
}

/* ---- driver ---- */

/* The packed weights a call reads: the programmed object's panels (no weight
 * work), its resident buffer refilled with this call's read noise, or, without
 * one (or while another call holds its buffer), panels packed for this call. */
typedef struct {
    const float *B, *Bs;
    float *own_B, *own_Bs;
    pf_dpe_packed *held;
} weights_view;

static void weights_release(weights_view *v)
{
    pf_free(v->own_B);
    pf_free(v->own_Bs);
    if (v->held)
        __atomic_store_n(&v->held->busy, 0, __ATOMIC_RELEASE);
}

static pf_status weights_acquire(const pf_dpe_args *a, const pf_dpe_consts *s, int64_t ncp, size_t b_bytes,
                                 int values, weights_view *v)
{
    pf_dpe_packed *pk = a->w_packed;
    memset(v, 0, sizeof *v);
    if (pk) {
        v->Bs = pk->Bs; /* checked against the call by pf_dpe_mvm */
        if (!values)
            return PF_OK;
        if (pk->kind == PF_DPE_PACKED_READY) {
            v->B = pk->B;
            return PF_OK;
        }
        if (!__atomic_exchange_n(&pk->busy, 1, __ATOMIC_ACQUIRE)) {
            v->held = pk; /* B is ours until weights_release: allocate it here on first use */
            if (!pk->B) {
                if (!(pk->B = pf_calloc(pk->b_bytes, 1)))
                    return PF_ENOMEM;
                __atomic_add_fetch(&pk->bytes, pk->b_bytes, __ATOMIC_RELAXED);
            }
            v->B = pk->B;
            return pf_dpe_pack_w_values(a, s->noise_w, s->nk, pk->B);
        }
    }
    if (values && !(v->B = v->own_B = pf_calloc(b_bytes, 1)))
        return PF_ENOMEM;
    if (!v->Bs && !(v->Bs = v->own_Bs = pf_calloc((size_t)ncp * s->nb * NR, sizeof(float))))
        return PF_ENOMEM;
    if (v->own_Bs)
        pf_dpe_pack_w_scales(a, s->nb, v->own_Bs);
    return values ? pf_dpe_pack_w_values(a, s->noise_w, s->nk, v->own_B) : PF_OK;
}

/* Loop-nest sizes of one call. */
typedef struct {
    int64_t rows_total, ncp, nrp_total, block_panels, nrb, cp_per_chunk, ncc;
    size_t b_panel, b_bytes, a_panel; /* floats per B panel, bytes of B, bytes per A panel */
    int nthreads;
    int64_t fused_panels; /* > 0: read noise drawn per chunk of this many column panels (run_fused) */
} mvm_plan;

static pf_status plan_init(const pf_dpe_args *a, const pf_dpe_consts *s, mvm_plan *p)
{
    p->rows_total = a->batch * a->rows;
    p->ncp = pf_ceil_div(a->cols, NR);
    p->nrp_total = pf_ceil_div(p->rows_total, MR);
    /* the K rows present, no block padded to n (core/dpe.h) */
    if (pf_mul_size((size_t)a->sw, (size_t)a->inner * NR, &p->b_panel) ||
        pf_mul_size(p->b_panel, (size_t)p->ncp * sizeof(float), &p->b_bytes) ||
        pf_mul_size((size_t)a->sx, (size_t)a->inner * MR * sizeof(float), &p->a_panel))
        return PF_EOVERFLOW;
    /* Rows are processed in blocks of a few packed panels that stay in L2
     * while every column panel of the (shared, packed-once) weights passes;
     * threads take (row block, column chunk) items, repacking a row block only
     * when they move to the next one. Memory: one block per thread. */
    p->block_panels = pf_max64(1, pf_min64((int64_t)(PF_DPE_A_BLOCK_BYTES / p->a_panel), p->nrp_total));
    p->nrb = pf_ceil_div(p->nrp_total, p->block_panels);
    p->nthreads = pf_dpe_product_threads(a, p->rows_total);
    p->cp_per_chunk = pf_ceil_div(p->ncp, pf_max64(1, pf_min64(p->ncp, pf_ceil_div(4 * p->nthreads, p->nrb))));
    p->ncc = pf_ceil_div(p->ncp, p->cp_per_chunk);
    /* two chunks per thread at least (balance), 8 panels at most (128
     * columns: the AVX2 normal generator's 4-vector blocks) */
    size_t a_all;
    p->fused_panels = pf_max64(1, pf_min64(PF_DPE_FUSED_CHUNK_PANELS, p->ncp / (2 * (int64_t)p->nthreads)));
    if (!pf_dpe_read_noise_on(a) || pf_mul_size((size_t)p->nrp_total, p->a_panel, &a_all) ||
        a_all > PF_DPE_FUSED_A_BYTES)
        p->fused_panels = 0;
    return PF_OK;
}

/* Rows g0.. (mr of them, across batch items) of column panel cp between the
 * output and a tile-shaped buffer: to_out 1 writes tmp out, 0 reads it in. */
static void straddle_copy(const pf_dpe_args *a, int64_t g0, int64_t mr, int64_t cp, int nr, float *tmp, int to_out)
{
    for (int64_t rr = 0; rr < mr; rr++) {
        const int64_t g = g0 + rr, it = g / a->rows, r = g % a->rows;
        float *o = a->out + it * a->so_n + r * a->so_r + cp * NR * a->so_p;
        for (int c = 0; c < nr; c++) {
            if (to_out)
                o[c * a->so_p] = tmp[rr * NR + c];
            else
                tmp[rr * NR + c] = o[c * a->so_p];
        }
    }
}

static _Atomic uint64_t g_short_tiles[PF_DPE_PATHS][PF_SHORT_TILES];

uint64_t pf_dpe_short_tiles(int path, int s)
{
    return path >= 0 && path < PF_DPE_PATHS && s >= 0 && s < PF_SHORT_TILES ? atomic_load(&g_short_tiles[path][s]) : 0;
}

void pf_dpe_count_short_tiles(int path, const uint64_t counts[PF_SHORT_TILES])
{
    for (int sh = 0; sh < PF_SHORT_TILES; sh++)
        if (counts[sh])
            atomic_fetch_add(&g_short_tiles[path][sh], counts[sh]);
}

/* One micro-tile: packed row panel A (global panel rp) times column panel cp,
 * written into the output (through a small buffer when the panel straddles
 * two batch items). blk: the one crossbar block A and B hold, or -1 for all. */
static void run_tile(const pf_dpe_args *a, const pf_dpe_consts *s, const mvm_plan *p, const pf_dpe_tile_set *tk,
                     const float *A, const float *As, const float *B, const float *Bs, int64_t rp, int64_t cp,
                     int64_t blk, int accumulate, uint64_t short_tiles[PF_SHORT_TILES])
{
    const int64_t g0 = rp * MR, item = g0 / a->rows, r0 = g0 % a->rows;
    const int64_t mr_total = pf_min64(MR, p->rows_total - g0);
    const int sh = pf_short_tile((int)mr_total);
    pf_dpe_tile_fn tile_fn = tk->full;
    if (sh >= 0 && tk->short_rows[sh]) {
        tile_fn = tk->short_rows[sh];
        short_tiles[sh]++;
    }
    int any_table = 0;
    for (int j = 0; j < a->sw; j++)
        any_table |= s->adc_table[j] != NULL;
    const int64_t nb = blk < 0 ? s->nb : 1, n_last = pf_dpe_block_rows(a, blk < 0 ? s->nb - 1 : blk);
    pf_dpe_tile t = {.A = A, .B = B, .row_scale = As, .col_scale = Bs, .nb = nb, .n = (int)(blk < 0 ? s->nk : n_last),
                     .n_last = (int)n_last, .sx = a->sx, .sw = a->sw, .mr_valid = (int)mr_total, .nr_valid = (int)pf_min64(NR, a->cols - cp * NR), .coef = s->coef,
                     .alpha = s->alpha, .adc_table = any_table ? (const float *const *)s->adc_table : NULL,
                     .adc_table_max = s->adc_table_max, .ldc = a->so_p, .accumulate = accumulate};
    if (r0 + mr_total <= a->rows) {
        t.out = a->out + item * a->so_n + r0 * a->so_r + cp * NR * a->so_p;
        t.ldr = a->so_r;
        tile_fn(&t);
        return;
    }
    float tmp[MR * NR];
    if (accumulate)
        straddle_copy(a, g0, mr_total, cp, t.nr_valid, tmp, 0);
    t.out = tmp;
    t.ldr = NR;
    t.ldc = 1;
    tile_fn(&t);
    straddle_copy(a, g0, mr_total, cp, t.nr_valid, tmp, 1);
}

/* The parallel loop nest over (row block, column chunk) items. */
static int run_blocks(const pf_dpe_args *a, const pf_dpe_consts *s, const mvm_plan *p, const weights_view *w,
                      const pf_dpe_tile_set *tk)
{
    const int64_t nb = s->nb, a_floats = (int64_t)(p->a_panel / sizeof(float));
    int failed = 0;
#pragma omp parallel num_threads(p->nthreads) reduction(| : failed)
    {
        pack_scratch sc;
        float *Ap = pf_alloc((size_t)p->block_panels * p->a_panel);
        float *As = pf_alloc((size_t)(p->block_panels * nb * MR) * sizeof(float));
        if (scratch_init(a, s, &sc) < 0 || !Ap || !As)
            failed = 1;
        int64_t packed_rb = -1;
        uint64_t short_tiles[PF_SHORT_TILES] = {0};
#pragma omp for schedule(static)
        for (int64_t work = 0; work < p->nrb * p->ncc; work++) {
            if (failed || pf_cancelled(a->cancel))
                continue; /* cancelled: skip the remaining blocks (PF_EINTR below) */
            const int64_t rb = work / p->ncc, cc = work % p->ncc;
            const int64_t rp0 = rb * p->block_panels, nrp = pf_min64(p->block_panels, p->nrp_total - rp0);
            if (rb != packed_rb) {
                for (int64_t rp = 0; rp < nrp; rp++)
                    pack_x_panel(a, s, rp0 + rp, Ap + rp * a_floats, As + rp * nb * MR, &sc);
                packed_rb = rb;
            }
            for (int64_t cp = cc * p->cp_per_chunk; cp < pf_min64((cc + 1) * p->cp_per_chunk, p->ncp); cp++)
                for (int64_t rp = 0; rp < nrp; rp++)
                    run_tile(a, s, p, tk, Ap + rp * a_floats, As + rp * nb * MR, w->B + cp * (int64_t)p->b_panel,
                             w->Bs + cp * nb * NR, rp0 + rp, cp, -1, 0, short_tiles);
        }
        pf_dpe_count_short_tiles(PF_DPE_PATH_FLOAT, short_tiles);
        pf_free(Ap);
        pf_free(As);
        pack_scratch_free(&sc);
    }
    return failed;
}

/* Read noise on and few input rows: a call draws noise for every weight
 * cell, so rather than writing all noisy panels to memory and streaming them
 * back once per row block (run_blocks), each thread takes a chunk of column
 * panels and, crossbar block by crossbar block, draws that block's noisy
 * panels into a buffer of a few dozen KB and runs every row panel (packed
 * once, up front) against it while it is in cache, the tiles continuing
 * their sums over the blocks (pf_dpe_tile.accumulate): the bits of one tile
 * call over all blocks. */
static int run_fused(const pf_dpe_args *a, const pf_dpe_consts *s, const mvm_plan *p, const float *Bs,
                     const pf_dpe_tile_set *tk)
{
    const int64_t nb = s->nb, a_floats = (int64_t)(p->a_panel / sizeof(float));
    const int64_t cpc = p->fused_panels, nchunks = pf_ceil_div(p->ncp, cpc);
    const size_t bc_panel = (size_t)(a->sw * s->nk * NR); /* floats of one block of one panel */
    float *Ap = pf_alloc((size_t)p->nrp_total * p->a_panel); /* size checked by plan_init */
    float *As = pf_alloc((size_t)(p->nrp_total * nb * MR) * sizeof(float));
    pf_read_noise rn;
    pf_dpe_read_noise_init(a, &rn);
    int failed = !Ap || !As;
#pragma omp parallel num_threads(p->nthreads) if (!failed)
    {
        pack_scratch sc;
        float *Bc = pf_alloc((size_t)cpc * bc_panel * sizeof(float));
        float *val = pf_alloc((size_t)cpc * NR * 2 * sizeof(float));
        uint64_t short_tiles[PF_SHORT_TILES] = {0};
        if (scratch_init(a, s, &sc) < 0 || !Bc || !val)
            __atomic_store_n(&failed, 1, __ATOMIC_RELAXED);
#pragma omp for schedule(static)
        for (int64_t rp = 0; rp < p->nrp_total; rp++)
            if (!__atomic_load_n(&failed, __ATOMIC_RELAXED))
                pack_x_panel(a, s, rp, Ap + rp * a_floats, As + rp * nb * MR, &sc);
#pragma omp for schedule(dynamic, 1)
        for (int64_t c = 0; c < nchunks; c++) {
            const int64_t cp0 = c * cpc, cp1 = pf_min64(cp0 + cpc, p->ncp);
            for (int64_t b = 0; b < nb; b++) {
                if (__atomic_load_n(&failed, __ATOMIC_RELAXED) || pf_cancelled(a->cancel))
                    break; /* cancelled: PF_EINTR from the caller */
                pf_dpe_pack_w_block(a, s->noise_w, &rn, s->nk, cp0, cp1, b, Bc, val);
                for (int64_t cp = cp0; cp < cp1; cp++)
                    for (int64_t rp = 0; rp < p->nrp_total; rp++)
                        run_tile(a, s, p, tk, Ap + rp * a_floats + b * a->sx * a->n * MR,
                                 As + (rp * nb + b) * MR, Bc + (cp - cp0) * bc_panel, Bs + (cp * nb + b) * NR,
                                 rp, cp, b, b > 0, short_tiles);
            }
        }
        pf_dpe_count_short_tiles(PF_DPE_PATH_FLOAT, short_tiles);
        pf_free(Bc);
        pf_free(val);
        pack_scratch_free(&sc);
    }
    pf_free(Ap);
    pf_free(As);
    return failed;
}

static void zero_output(const pf_dpe_args *a)
{
    for (int64_t it = 0; it < a->batch; it++)
        for (int64_t r = 0; r < a->rows; r++)
            for (int64_t p = 0; p < a->cols; p++)
                a->out[it * a->so_n + r * a->so_r + p * a->so_p] = 0.0f;
}


pf_status pf_dpe_mvm(const pf_dpe_args *a)
{
    pf_status st = pf_validate_dpe_args(a); /* the one contract (core/contract.h) */
    if (st != PF_OK)
        return st;
    if (a->batch == 0 || a->rows == 0 || a->cols == 0)
        return PF_OK;
    if (a->inner == 0) {
        zero_output(a);
        return PF_OK;
    }
    if (a->w_packed && (st = pf_dpe_packed_check(a->w_packed, a)) != PF_OK)
        return st; /* a pack of other weights or other read noise, on either path */
    pf_dpe_consts s;
    if ((st = pf_dpe_consts_init(a, &s)) != PF_OK)
        return st;
    int declined = 1;
    if (pf_dpe_int_eligible(a, &s)) /* noise-free, cells at levels: the exact integer path (dpe_int.c) */
        st = pf_dpe_mvm_int(a, &s, &declined);
    if (!declined) {
        pf_dpe_consts_free(&s);
        return st;
    }
    mvm_plan plan;
    weights_view w = {0};
    if ((st = plan_init(a, &s, &plan)) == PF_OK)
        st = weights_acquire(a, &s, plan.ncp, plan.b_bytes, !plan.fused_panels, &w);
    const pf_cpu_kernels *kt = pf_cpu_kernels_active();
    const int noisy = s.noise_x || s.noise_w;
    const pf_dpe_tile_set *tk = noisy ? &kt->noisy : &kt->exact;
    if (st == PF_OK && (plan.fused_panels ? run_fused(a, &s, &plan, w.Bs, tk) : run_blocks(a, &s, &plan, &w, tk)))
        st = PF_ENOMEM;
    weights_release(&w);
    pf_dpe_consts_free(&s);
    return st == PF_OK && pf_cancelled(a->cancel) ? PF_EINTR : st;
}
