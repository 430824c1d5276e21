/* Fused DPE MVM: setup, operand packing with in-kernel noise, the loop nest
 * and the portable micro-kernel. See dpe.h for the contract. */
#include "core/dpe.h"
#include "cpu/cpu_features.h"
#include "cpu/dpe_int.h"
#include "core/memory.h"
#include "cpu/noise.h"
#include "core/philox_noise.h"
#include "cpu/threads.h"

#include <float.h>
#include <pthread.h>
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


/* round-half-even(num / den) for num >= 0, den > 0, exactly in integers */
static int64_t rint_ratio(int64_t num, int64_t den)
{
    int64_t q = num / den, r = num % den;
    if (2 * r > den || (2 * r == den && (q & 1)))
        q++;
    return q;
}

/* Whether nearbyintf(acc * alpha) equals round-half-even(acc * (radc-1) / D)
 * for every acc in [0, D]: checked exhaustively once per (D, radc) and
 * remembered for the process (the check costs O(D), a call should not). */
static int rint_is_exact(int64_t D, int64_t radc, float alpha)
{
    enum { CACHE = 64 };
    static struct { int64_t D, radc; int exact; } cache[CACHE];
    static int cached, next;
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    int found = -1;
    pthread_mutex_lock(&lock);
    for (int e = 0; e < cached; e++)
        if (cache[e].D == D && cache[e].radc == radc)
            found = cache[e].exact;
    pthread_mutex_unlock(&lock);
    if (found >= 0)
        return found;
    int exact = 1;
    for (int64_t acc = 0; acc <= D && exact; acc++)
        if ((int64_t)nearbyintf((float)acc * alpha) != rint_ratio(acc * (radc - 1), D))
            exact = 0;
    pthread_mutex_lock(&lock);
    cache[next] = (typeof(cache[0])){D, radc, exact};
    next = (next + 1) % CACHE;
    if (cached < CACHE)
        cached++;
    pthread_mutex_unlock(&lock);
    return exact;
}

static float dac_code(int slice_value, int m, int rdac)
{
    /* spec: rint(slice / m * (rdac - 1)) in float32, in this order */
    return nearbyintf((float)slice_value / (float)m * (float)(rdac - 1));
}

void pf_dpe_consts_free(pf_dpe_consts *s)
{
    for (int j = 0; j < PF_MAX_SLICES; j++) {
        pf_free(s->adc_table[j]);
        s->adc_table[j] = NULL;
    }
}

pf_status pf_dpe_consts_init(const pf_dpe_args *a, pf_dpe_consts *s)
{
    memset(s, 0, sizeof *s);
    s->nb = pf_ceil_div(a->inner, a->n);
    s->nk = s->nb == 1 ? a->inner : a->n;
    s->noise_x = a->vnoise > 0.0;
    s->noise_w = a->w_conductance != NULL;
    if (a->read_sigma)
        for (int l = 0; l < a->g_level; l++)
            if (a->read_sigma[l] > 0.0f)
                s->noise_w = 1;
    int64_t D = (int64_t)(a->rdac - 1) * (a->g_level - 1) * a->n;
    for (int i = 0; i < a->sx; i++)
        for (int j = 0; j < a->sw; j++) {
            /* integers exact in double; one rounding to double, one to float */
            double num = (double)(a->n * (int64_t)a->x_max[i] * a->w_max[j] * a->x_weight[i] * a->w_weight[j]);
            s->coef[i * a->sw + j] = (float)(num / (double)(a->radc[j] - 1));
        }
    for (int i = 0; i < a->sx; i++)
        for (int v = 0; v <= a->x_max[i]; v++)
            s->dac[i][v] = dac_code(v, a->x_max[i], a->rdac);
    for (int j = 0; j < a->sw; j++) {
        s->alpha[j] = (float)((double)(a->radc[j] - 1) / (double)D);
        if (s->noise_x || s->noise_w)
            continue;
        /* Noise-free: accept the fast rint(acc * alpha) only if it equals the
         * exact code for every reachable acc in [0, D]; else use a table. */
        if (rint_is_exact(D, a->radc[j], s->alpha[j]))
            continue;
        float *tab = pf_alloc((size_t)(D + 1) * sizeof(float));
        if (!tab) {
            pf_dpe_consts_free(s);
            return PF_ENOMEM;
        }
        for (int64_t acc = 0; acc <= D; acc++)
            tab[acc] = (float)rint_ratio(acc * (a->radc[j] - 1), D);
        s->adc_table[j] = tab;
        s->adc_table_max[j] = (int32_t)D;
    }
    return PF_OK;
}

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
    const int64_t n = a->n, nk = s->nk, K = a->inner;
    for (int i = 0; i < a->sx; i++) {
        const uint8_t *codes = plane[i];
        if (z)
            pf_normals(a->seed, PF_STREAM_VNOISE, a->call, noise_base + (uint64_t)(i * K), K, z);
        /* branch-free: code 0 maps to 0 V through the table, with or without noise */
        const float *dac = s->dac[i];
        const float vn = (float)a->vnoise;
        for (int64_t b = 0, col = 0; col < K; b++) {
            float *dst = P + (b * a->sx + i) * nk * MR + rr;
            const int64_t kn = pf_min64(n, K - col);
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
#pragma omp parallel num_threads(pf_get_num_threads()) reduction(| : bad)
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
    return bad & 2 ? PF_ENOMEM : bad ? PF_EINVAL : PF_OK;
}

pf_status pf_im2col_dequantize(const pf_im2col *c, int64_t batch, int64_t qr, int64_t qc, int64_t gc,
                               const float *gran_max, const pf_slice_method *sm, int bfp, float *out)
{
    const int64_t R = c->out_h * c->out_w, K = c->channels * c->kh * c->kw;
    const int64_t gr = pf_ceil_div(R, qr);
#pragma omp parallel for num_threads(pf_get_num_threads()) collapse(2) schedule(static)
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

static void scratch_free(pack_scratch *sc)
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
    memset(P, 0, (size_t)(nb * a->sx * s->nk * MR) * sizeof(float));
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

/* Packs all column panels of the weights for this call, one weight row at a
 * time: conductances in units of Q_G above LGS, read noise applied. Bp and Bs
 * must be zeroed by the caller (padding). */
static pf_status pack_w(const pf_dpe_args *a, const pf_dpe_consts *s, float *Bp, float *Bs)
{
    const int64_t n = a->n, nb = s->nb, K = a->inner, P = a->cols;
    const int64_t ncp = pf_ceil_div(P, NR);
    const int64_t panel = nb * a->sw * s->nk * NR;
    const float QG = (float)((a->HGS - a->LGS) / (a->g_level - 1));
    const float lgs = (float)(a->LGS / ((a->HGS - a->LGS) / (a->g_level - 1)));
    for (int64_t cp = 0; cp < ncp; cp++) {
        int64_t c0 = cp * NR, cw = pf_min64(NR, P - c0);
        for (int64_t b = 0; b < nb; b++)
            for (int64_t cc = 0; cc < cw; cc++)
                Bs[(cp * nb + b) * NR + cc] = a->w_scale[((b * n) / a->w_qr) * a->w_gc + (c0 + cc) / a->w_qc];
    }
    int failed = 0;
#pragma omp parallel num_threads(pf_get_num_threads()) reduction(| : failed)
    {
        float *val = pf_alloc((size_t)P * 2 * sizeof(float));
        if (!val)
            failed = 1;
#pragma omp for schedule(static)
        for (int64_t row = 0; row < a->sw * K; row++) {
            if (failed || pf_cancelled(a->cancel))
                continue;
            const int64_t j = row / K, kk = row % K, cell0 = row * P;
            const uint8_t *L = a->w_levels + cell0;
            if (!s->noise_w) {
                for (int64_t p = 0; p < P; p++)
                    val[p] = (float)L[p];
            } else {
                float *f = val + P;
                if (a->read_sigma) {
                    pf_normals(a->seed, PF_STREAM_READ, a->call, (uint64_t)cell0, P, f);
                    const int top = a->g_level - 1; /* levels are validated upstream; clamp keeps reads in bounds */
                    for (int64_t p = 0; p < P; p++)
                        f[p] = a->read_sigma[L[p] < top ? L[p] : top] * f[p];
                    pf_exp_inplace(f, P);
                } else {
                    for (int64_t p = 0; p < P; p++)
                        f[p] = 1.0f;
                }
                /* G_r = G * exp(sigma z); value = (G_r - LGS) / Q_G */
                if (a->w_conductance) {
                    const float *G = a->w_conductance + cell0;
                    for (int64_t p = 0; p < P; p++)
                        val[p] = (G[p] / QG) * f[p] - lgs;
                } else {
                    for (int64_t p = 0; p < P; p++)
                        val[p] = ((float)L[p] + lgs) * f[p] - lgs;
                }
            }
            float *dst = Bp + ((kk / n * a->sw + j) * s->nk + kk % n) * NR;
            for (int64_t cp = 0; cp < ncp; cp++) {
                int64_t c0 = cp * NR, cw = pf_min64(NR, P - c0);
                memcpy(dst + cp * panel, val + c0, (size_t)cw * sizeof(float));
            }
        }
        pf_free(val);
    }
    return failed ? PF_ENOMEM : PF_OK;
}

/* ---- portable micro-kernel ----
 * The SIMD kernels accumulate with fused multiply-adds. Noise-free operands
 * are small integers (every product and partial sum exact in float32), where
 * a*b + c equals fma(a, b, c); with noise they are not, so the portable kernel
 * then fuses too (tile_generic_fused: the FMA instruction where the CPU has
 * it, else libm's correctly rounded fmaf) and gives the SIMD kernels' bits. */

static inline __attribute__((always_inline)) void tile_generic(const pf_dpe_tile *t, int fused)
{
    float out[MR * NR] = {0};
    float tb[MR * NR];
    float acc[MR * NR];
    const int n = t->n;
    for (int64_t b = 0; b < t->nb; b++) {
        memset(tb, 0, sizeof tb);
        for (int i = 0; i < t->sx; i++) {
            const float *A = t->A + (b * t->sx + i) * n * MR;
            for (int j = 0; j < t->sw; j++) {
                const float *B = t->B + (b * t->sw + j) * n * NR;
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
    for (int r = 0; r < t->mr_valid; r++)
        for (int c = 0; c < t->nr_valid; c++)
            t->out[r * t->ldr + c * t->ldc] = out[r * NR + c];
}

void pf_dpe_tile_generic(const pf_dpe_tile *t) { tile_generic(t, 0); }

#if defined(__x86_64__) || defined(__i386__)
__attribute__((target("fma"))) static void tile_generic_fma(const pf_dpe_tile *t) { tile_generic(t, 1); }
#endif
static void tile_generic_fmaf(const pf_dpe_tile *t) { tile_generic(t, 1); }

/* ---- driver ---- */

pf_status pf_dpe_mvm(const pf_dpe_args *a)
{
    if (a->n <= 0 || a->sx <= 0 || a->sw <= 0 || a->sx > PF_MAX_SLICES || a->sw > PF_MAX_SLICES ||
        a->rdac < 2 || a->g_level < 2 || a->g_level > PF_MAX_LEVELS || a->x_qr <= 0 || a->x_qc <= 0 ||
        a->w_qr <= 0 || a->w_qc <= 0 || a->x_qc % a->n || a->w_qr % a->n)
        return PF_EINVAL;
    for (int j = 0; j < a->sw; j++)
        if (a->radc[j] < 2 || a->radc[j] > ((int64_t)1 << 24) || a->w_max[j] > a->g_level - 1)
            return PF_EINVAL;
    for (int i = 0; i < a->sx; i++)
        if (a->x_max[i] > 255)
            return PF_EINVAL; /* slice codes are uint8 */
    if (a->batch == 0 || a->rows == 0 || a->cols == 0)
        return PF_OK;
    if (a->inner == 0) {
        for (int64_t it = 0; it < a->batch; it++)
            for (int64_t r = 0; r < a->rows; r++)
                for (int64_t p = 0; p < a->cols; p++)
                    a->out[it * a->so_n + r * a->so_r + p * a->so_p] = 0.0f;
        return PF_OK;
    }
    int64_t D = (int64_t)(a->rdac - 1) * (a->g_level - 1) * a->n;
    if (D >= ((int64_t)1 << 24))
        return PF_EINVAL; /* acc would leave float32's exact integer range */

    pf_dpe_consts s;
    pf_status st = pf_dpe_consts_init(a, &s);
    if (st != PF_OK)
        return st;
    if (pf_dpe_int_eligible(a, &s)) { /* noise-free: the exact integer path (dpe_int.c) */
        st = pf_dpe_mvm_int(a, &s);
        pf_dpe_consts_free(&s);
        return st;
    }

    const int64_t nb = s.nb, rows_total = a->batch * a->rows;
    const int64_t ncp = pf_ceil_div(a->cols, NR), nrp_total = pf_ceil_div(rows_total, MR);
    size_t b_panel, b_bytes, a_panel;
    if (pf_mul_size((size_t)nb * a->sw, (size_t)s.nk * NR, &b_panel) ||
        pf_mul_size(b_panel, (size_t)ncp * sizeof(float), &b_bytes) ||
        pf_mul_size((size_t)nb * a->sx, (size_t)s.nk * MR * sizeof(float), &a_panel)) {
        pf_dpe_consts_free(&s);
        return PF_EOVERFLOW;
    }
    /* Rows are processed in blocks of a few packed panels that stay in L2
     * while every column panel of the (shared, packed-once) weights passes;
     * threads take (row block, column chunk) items, repacking a row block only
     * when they move to the next one. Memory: one block per thread. */
    const int64_t block_panels = pf_max64(1, pf_min64((int64_t)(PF_DPE_A_BLOCK_BYTES / a_panel), nrp_total));
    const int64_t nrb = pf_ceil_div(nrp_total, block_panels);
    const int nthreads = pf_get_num_threads();
    int64_t cp_per_chunk = pf_ceil_div(ncp, pf_max64(1, pf_min64(ncp, pf_ceil_div(4 * nthreads, nrb))));
    const int64_t ncc = pf_ceil_div(ncp, cp_per_chunk);

    float *Bp = pf_calloc(b_bytes, 1);
    float *Bs = pf_calloc((size_t)ncp * nb * NR, sizeof(float));
    if (!Bp || !Bs) {
        pf_free(Bp); pf_free(Bs);
        pf_dpe_consts_free(&s);
        return PF_ENOMEM;
    }
    st = pack_w(a, &s, Bp, Bs);

    void (*tile_fn)(const pf_dpe_tile *) = pf_dpe_tile_generic;
    if (pf_active_isa() >= PF_ISA_AVX512)
        tile_fn = pf_dpe_tile_avx512;
    else if (pf_active_isa() >= PF_ISA_AVX2)
        tile_fn = pf_dpe_tile_avx2;
    else if (s.noise_x || s.noise_w) /* inexact operands: fuse as the SIMD kernels do */
#if defined(__x86_64__) || defined(__i386__)
        tile_fn = pf_cpu_has_fma() ? tile_generic_fma : tile_generic_fmaf;
#else
        tile_fn = tile_generic_fmaf;
#endif
    int any_table = 0;
    for (int j = 0; j < a->sw; j++)
        any_table |= s.adc_table[j] != NULL;

    int failed = st != PF_OK;
#pragma omp parallel num_threads(nthreads) reduction(| : failed)
    {
        pack_scratch sc;
        float *Ap = pf_alloc((size_t)block_panels * a_panel);
        float *As = pf_alloc((size_t)(block_panels * nb * MR) * sizeof(float));
        if (scratch_init(a, &s, &sc) < 0 || !Ap || !As)
            failed = 1;
        int64_t packed_rb = -1;
#pragma omp for schedule(static)
        for (int64_t work = 0; work < nrb * ncc; work++) {
            if (failed || pf_cancelled(a->cancel))
                continue; /* cancelled: skip the remaining blocks (PF_EINTR below) */
            const int64_t rb = work / ncc, cc = work % ncc;
            const int64_t rp0 = rb * block_panels, nrp = pf_min64(block_panels, nrp_total - rp0);
            if (rb != packed_rb) {
                for (int64_t rp = 0; rp < nrp; rp++)
                    pack_x_panel(a, &s, rp0 + rp, Ap + rp * (int64_t)(a_panel / sizeof(float)), As + rp * nb * MR,
                                 &sc);
                packed_rb = rb;
            }
            for (int64_t cp = cc * cp_per_chunk; cp < pf_min64((cc + 1) * cp_per_chunk, ncp); cp++)
                for (int64_t rp = 0; rp < nrp; rp++) {
                    int64_t g0 = (rp0 + rp) * MR;
                    int64_t item = g0 / a->rows, r0 = g0 % a->rows;
                    pf_dpe_tile t;
                    t.A = Ap + rp * (int64_t)(a_panel / sizeof(float));
                    t.B = Bp + cp * (int64_t)b_panel;
                    t.row_scale = As + rp * nb * MR;
                    t.col_scale = Bs + cp * nb * NR;
                    t.nb = nb;
                    t.n = (int)s.nk;
                    t.sx = a->sx;
                    t.sw = a->sw;
                    t.nr_valid = (int)pf_min64(NR, a->cols - cp * NR);
                    t.coef = s.coef;
                    t.alpha = s.alpha;
                    t.adc_table = any_table ? (const float *const *)s.adc_table : NULL;
                    t.adc_table_max = s.adc_table_max;
                    t.ldc = a->so_p;
                    /* a micro-panel may straddle two batch items: split it */
                    int64_t mr_total = pf_min64(MR, rows_total - g0);
                    t.mr_valid = (int)mr_total;
                    if (r0 + mr_total <= a->rows) {
                        t.out = a->out + item * a->so_n + r0 * a->so_r + cp * NR * a->so_p;
                        t.ldr = a->so_r;
                        tile_fn(&t);
                    } else {
                        float tmp[MR * NR];
                        t.out = tmp;
                        t.ldr = NR;
                        t.ldc = 1;
                        tile_fn(&t);
                        for (int64_t rr = 0; rr < mr_total; rr++) {
                            int64_t g = g0 + rr, it = g / a->rows, r = g % a->rows;
                            for (int c2 = 0; c2 < t.nr_valid; c2++)
                                a->out[it * a->so_n + r * a->so_r + (cp * NR + c2) * a->so_p] = tmp[rr * NR + c2];
                        }
                    }
                }
        }
        pf_free(Ap);
        pf_free(As);
        scratch_free(&sc);
    }
    if (failed && st == PF_OK)
        st = PF_ENOMEM;
    pf_free(Bp); pf_free(Bs);
    pf_dpe_consts_free(&s);
    return st == PF_OK && pf_cancelled(a->cancel) ? PF_EINTR : st;
}
