/* Exact integer MVM of the noise-free DPE path: eligibility, kernel choice,
 * operand packing and the loop nest (dpe_int.h). The portable micro-kernel is
 * the template instance at the end of this file. */
#include "cpu/dpe_int.h"
#include "cpu/dpe_internal.h"
#include "cpu/kernels.h"
#include "core/memory.h"
#include "cpu/cpu_features.h"
#include "cpu/threads.h"

#include <stdatomic.h>
#include <string.h>

#define NR PF_DPE_INR
/* Packed input rows per block, as the float path: a few panels kept in L2. */
#define PF_DPE_INT_A_BLOCK_BYTES ((size_t)96 << 10)

static _Atomic int g_enabled = 1;
static _Atomic uint64_t g_calls;

void pf_dpe_int_set_enabled(int on) { atomic_store(&g_enabled, on != 0); }
int pf_dpe_int_enabled(void) { return atomic_load(&g_enabled); }
uint64_t pf_dpe_int_calls(void) { return atomic_load(&g_calls); }

int pf_dpe_int_kernel_tier(void)
{
    const pf_tier t = pf_active_tier();
    if (t >= PF_TIER_AVX512VNNI)
        return PF_TIER_AVX512VNNI;
    if (t >= PF_TIER_AVXVNNI && pf_cpu_has_avxvnni())
        return PF_TIER_AVXVNNI;
    return t >= PF_TIER_AVX2 ? PF_TIER_AVX2 : PF_TIER_GENERIC;
}

int pf_dpe_int_eligible(const pf_dpe_args *a, const pf_dpe_consts *s)
{
    /* read noise makes the crossbar sums non-integer; programmed conductances
     * (write variation, stuck cells, assigned G) may: a pack holds integer
     * panels only when every cell is a level, an unpacked call checks them
     * (pf_dpe_mvm_int declines) */
    if (!pf_dpe_int_enabled() || s->noise_x || pf_dpe_read_noise_on(a) || a->rdac > 256 || a->g_level > 256)
        return 0;
    return !a->w_conductance || !a->w_packed || a->w_packed->iB;
}

/* Level of a programmed cell when the float path's value of it without read
 * noise (pf_dpe_cell_value) is one, an integer in [0, top], else -1: then the
 * float path's sums are the integer dot products of these levels. Cells stuck
 * at HGS or LGS, and cells at their ideal conductances, are levels whenever
 * G / Q_G - LGS / Q_G is exact in float32 (e.g. HGS 1e-5, LGS 1e-7, g_level 4;
 * not g_level 16, where level 2 gives 1.9999999). */
static inline int cell_level(float G, const pf_read_noise *rn, int top)
{
    const float v = pf_dpe_cell_value(G, 1.0f, rn);
    return v >= 0.0f && v <= (float)top && v == (float)(int)v ? (int)v : -1;
}

/* Whether a's first cells (at most 64) are levels: conductances with write
 * variation are declined here, before any weight panel is allocated. */
static int first_cells_are_levels(const pf_dpe_args *a)
{
    pf_read_noise rn;
    pf_dpe_read_noise_init(a, &rn);
    const int64_t cells = pf_min64(64, a->sw * a->inner * a->cols);
    for (int64_t c = 0; c < cells; c++)
        if (cell_level(a->w_conductance[c], &rn, a->g_level - 1) < 0)
            return 0;
    return 1;
}

/* Per-call integer operand constants. */
typedef struct {
    uint8_t dac[PF_MAX_SLICES][256]; /* DAC code of each slice value */
    int boff;                        /* levels are stored as L - boff in int8 */
    int nkq, nkq_last;               /* k quads per block, of the last block (the rows present) */
    int64_t quads;                   /* k quads of all blocks: (nb - 1) * nkq + nkq_last */
    int mr;                          /* rows of the kernel's tile (packed row panel height) */
    size_t a_panel, b_panel;         /* bytes of one packed row / column panel */
} int_consts;

/* Slice codes of unfolded row r of item into codes[i*K + col] (the slicing
 * stage's arithmetic, quantize.h), for the implicit im2col input. */
static void im2col_codes(const pf_dpe_args *a, int64_t item, int64_t r, float *xrow, uint8_t *codes)
{
    const int64_t K = a->inner;
    const float *mrow = a->x_gran_max + (item * a->x_gr + r / a->x_qr) * a->x_gc;
    pf_im2col_row(a->x_im2col, item, r, xrow);
    for (int64_t c0 = 0; c0 < K; c0 += a->x_qc) {
        const pf_quant_granule g = pf_quant_granule_make(mrow[c0 / a->x_qc], a->x_method.total_bits, a->x_bfp);
        for (int64_t col = c0; col < pf_min64(c0 + a->x_qc, K); col++) {
            const int32_t u = pf_twos_complement(pf_quantize(xrow[col], &g), a->x_method.total_bits);
            for (int i = 0; i < a->sx; i++)
                codes[i * K + col] = pf_slice_code(u, a->x_method.offset[i], a->x_method.width[i]);
        }
    }
}

/* Packs row panel rp: codes into A, block row scales into S, row sums into
 * RS. xrow / codes: im2col scratch (K floats, sx*K bytes). */
static void pack_a(const pf_dpe_args *a, const pf_dpe_consts *s, const int_consts *ic, int64_t rp, uint8_t *A,
                   float *S, int32_t *RS, float *xrow, uint8_t *codes)
{
    const int64_t n = a->n, nb = s->nb, K = a->inner, R = a->rows;
    const int64_t astep = (int64_t)ic->nkq * ic->mr * 4, astep_last = (int64_t)ic->nkq_last * ic->mr * 4;
    memset(A, 0, ic->a_panel);
    memset(S, 0, (size_t)(nb * ic->mr) * sizeof(float));
    memset(RS, 0, (size_t)(nb * a->sx * ic->mr) * sizeof(int32_t));
    for (int rr = 0; rr < ic->mr && rp * ic->mr + rr < a->batch * R; rr++) {
        const int64_t g = rp * ic->mr + rr, item = g / R, r = g % R;
        const int64_t gofs = (item * a->x_gr + r / a->x_qr) * a->x_gc;
        const int im2col = a->x_kind == PF_DPE_X_IM2COL;
        for (int64_t b = 0; b < nb; b++)
            S[b * ic->mr + rr] = im2col ? pf_quant_granule_make(a->x_gran_max[gofs + (b * n) / a->x_qc],
                                                            a->x_method.total_bits, a->x_bfp).scale
                                    : a->x_scale[gofs + (b * n) / a->x_qc];
        if (im2col)
            im2col_codes(a, item, r, xrow, codes);
        for (int i = 0; i < a->sx; i++) {
            const uint8_t *src = im2col ? codes + i * K : a->x_codes + ((i * a->batch + item) * R + r) * K;
            for (int64_t b = 0; b < nb; b++) {
                uint8_t *dst = A + b * a->sx * astep + i * (b == nb - 1 ? astep_last : astep) + rr * 4;
                const int64_t k0 = b * n, kn = pf_min64(n, K - k0);
                int32_t sum = 0;
                for (int64_t k = 0; k < kn; k++) {
                    const uint8_t c = ic->dac[i][src[k0 + k]];
                    dst[(k >> 2) * ic->mr * 4 + (k & 3)] = c;
                    sum += c;
                }
                RS[b * a->sx * ic->mr + i * ic->mr + rr] = ic->boff * sum;
            }
        }
    }
}

/* Packs every column panel of the levels (L - boff) and the column scales. B
 * and Bs zeroed by the caller. With programmed conductances the levels are
 * those of cell_level; 1 when some cell is none (B then holds garbage). */
static int pack_b(const pf_dpe_args *a, int64_t nb, const int_consts *ic, int8_t *Bp, float *Bs)
{
    const int64_t n = a->n, K = a->inner, P = a->cols, ncp = pf_ceil_div(P, NR);
    const int64_t bstep = (int64_t)ic->nkq * NR * 4, bstep_last = (int64_t)ic->nkq_last * NR * 4;
    for (int64_t cp = 0; cp < ncp; cp++)
        for (int64_t b = 0; b < nb; b++)
            for (int64_t cc = 0; cc < pf_min64(NR, P - cp * NR); cc++)
                Bs[(cp * nb + b) * NR + cc] = a->w_scale[((b * n) / a->w_qr) * a->w_gc + (cp * NR + cc) / a->w_qc];
    pf_read_noise rn;
    pf_dpe_read_noise_init(a, &rn);
    const int top = a->g_level - 1;
    int bad = 0;
    const int nth = pf_threads_for((double)a->sw * (double)K * (double)P); /* cells */
#pragma omp parallel for num_threads(nth) schedule(static) reduction(| : bad)
    for (int64_t row = 0; row < a->sw * K; row++) {
        if (bad || pf_cancelled(a->cancel))
            continue;
        const int64_t j = row / K, kk = row % K, b = kk / n, kl = kk % n;
        const uint8_t *L = a->w_levels + row * P;
        const float *G = a->w_conductance ? a->w_conductance + row * P : NULL;
        int8_t *dst = Bp + b * a->sw * bstep + j * (b == nb - 1 ? bstep_last : bstep) + (kl >> 2) * NR * 4 + (kl & 3);
        for (int64_t p0 = 0; p0 < P; p0 += NR, dst += ic->b_panel) {
            const int64_t cw = pf_min64(NR, P - p0);
            for (int64_t c = 0; c < cw; c++) {
                const int lv = G ? cell_level(G[p0 + c], &rn, top) : L[p0 + c];
                bad |= lv < 0;
                dst[c * 4] = (int8_t)(lv - ic->boff);
            }
        }
    }
    return bad;
}

/* The weight side of the integer operands: level offset, k quads per block,
 * bytes per column panel of B and of B and Bs in all. */
static pf_status weight_layout(const pf_dpe_args *a, int64_t nb, int64_t nk, int_consts *ic, size_t *b_bytes,
                               size_t *s_bytes)
{
    const int64_t ncp = pf_ceil_div(a->cols, NR);
    ic->boff = a->g_level - 1 > 127 ? 128 : 0;
    ic->nkq = (int)pf_ceil_div(nk, 4);
    ic->nkq_last = nb ? (int)pf_ceil_div(pf_dpe_block_rows(a, nb - 1), 4) : 0;
    ic->quads = nb ? (nb - 1) * ic->nkq + ic->nkq_last : 0; /* no block padded to n rows (dpe_int.h) */
    if (pf_mul_size((size_t)a->sw, (size_t)ic->quads * NR * 4, &ic->b_panel) ||
        pf_mul_size(ic->b_panel, (size_t)ncp, b_bytes) ||
        pf_mul_size((size_t)ncp * (size_t)nb, NR * sizeof(float), s_bytes))
        return PF_EOVERFLOW;
    return PF_OK;
}

pf_status pf_dpe_int_pack_weights(const pf_dpe_args *a, int64_t nb, int64_t nk, int8_t **B, float **Bs,
                                  size_t *bytes)
{
    int_consts ic;
    size_t b_bytes, s_bytes;
    memset(&ic, 0, sizeof ic);
    *B = NULL;
    *Bs = NULL;
    *bytes = 0;
    pf_status st = weight_layout(a, nb, nk, &ic, &b_bytes, &s_bytes);
    if (st != PF_OK || (a->w_conductance && !first_cells_are_levels(a)))
        return st;
    *B = pf_calloc(b_bytes ? b_bytes : 1, 1);
    *Bs = pf_calloc(s_bytes ? s_bytes : 1, 1);
    int declined = 0;
    if (!*B || !*Bs)
        st = PF_ENOMEM;
    else
        declined = pack_b(a, nb, &ic, *B, *Bs);
    if (st != PF_OK || declined) {
        pf_free(*B);
        pf_free(*Bs);
        *B = NULL;
        *Bs = NULL;
        return st;
    }
    *bytes = (b_bytes ? b_bytes : 1) + (s_bytes ? s_bytes : 1);
    return PF_OK;
}

typedef void (*itile_fn)(const pf_dpe_itile *);

/* A call's tile kernel and its short instances (core/dpe.h; NULL: the full
 * kernel serves). The packing is the same, so any panel can take the full one. */
typedef struct {
    itile_fn full, short_rows[PF_SHORT_TILES];
} itile_kernels;

/* The tile kernels for the machine and operands; sets ic->mr. The widened AVX2
 * kernel, for rare operands, has no short instances. */
static itile_kernels choose_kernel(const pf_dpe_args *a, int_consts *ic, int *acc16)
{
    /* vpmaddubsw's 16-bit pair sums: bound the operands (dpe_int_avx2.c) */
    const int64_t amax = a->rdac - 1, bmax = ic->boff ? 128 : a->g_level - 1;
    *acc16 = (int64_t)ic->nkq * 2 * amax * bmax <= 32767;
    ic->mr = 4; /* 4-row kernels: their 4-row short instance would be the full tile */
    switch (pf_dpe_int_kernel_tier()) {
#if defined(__x86_64__) || defined(__i386__)
    case PF_TIER_AVX512VNNI:
        ic->mr = 8; /* 32 zmm: 8 accumulator chains */
        return (itile_kernels){pf_dpe_itile_avx512vnni,
                               {pf_dpe_itile_avx512vnni_r1, pf_dpe_itile_avx512vnni_r2, pf_dpe_itile_avx512vnni_r4}};
    case PF_TIER_AVXVNNI:
        return (itile_kernels){pf_dpe_itile_avxvnni, {pf_dpe_itile_avxvnni_r1, pf_dpe_itile_avxvnni_r2, NULL}};
    case PF_TIER_AVX2:
        if (2 * amax * bmax > 32767)
            return (itile_kernels){pf_dpe_itile_avx2_wide, {NULL, NULL, NULL}};
        return (itile_kernels){pf_dpe_itile_avx2, {pf_dpe_itile_avx2_r1, pf_dpe_itile_avx2_r2, NULL}};
#endif
    default:
        ic->mr = 8; /* the AVX-512 VNNI kernel's packing, tested everywhere */
        return (itile_kernels){pf_dpe_itile_generic,
                               {pf_dpe_itile_generic_r1, pf_dpe_itile_generic_r2, pf_dpe_itile_generic_r4}};
    }
}

/* Writes the mr x NR tile (row stride NR) of row panel rp, column panel cp. */
static void store_tile(const pf_dpe_args *a, int mr, int64_t rp, int64_t cp, const float *tile)
{
    const int64_t rows_total = a->batch * a->rows, cw = pf_min64(NR, a->cols - cp * NR);
    for (int64_t rr = 0; rr < mr && rp * mr + rr < rows_total; rr++) {
        const int64_t g = rp * mr + rr, item = g / a->rows, r = g % a->rows;
        float *o = a->out + item * a->so_n + r * a->so_r + cp * NR * a->so_p;
        if (a->so_p == 1)
            memcpy(o, tile + rr * NR, (size_t)cw * sizeof(float));
        else
            for (int64_t c = 0; c < cw; c++)
                o[c * a->so_p] = tile[rr * NR + c];
    }
}

pf_status pf_dpe_mvm_int(const pf_dpe_args *a, const pf_dpe_consts *s, int *declined)
{
    *declined = 0;
    int_consts ic;
    memset(&ic, 0, sizeof ic);
    int acc16;
    size_t b_bytes, s_bytes;
    if (weight_layout(a, s->nb, s->nk, &ic, &b_bytes, &s_bytes) != PF_OK)
        return PF_EOVERFLOW;
    const itile_kernels kern = choose_kernel(a, &ic, &acc16); /* sets ic.mr */
    for (int i = 0; i < a->sx; i++)
        for (int v = 0; v <= a->x_max[i]; v++)
            ic.dac[i][v] = (uint8_t)s->dac[i][v]; /* exact: integers in [0, rdac-1], rdac <= 256 */
    const int64_t nb = s->nb, rows_total = a->batch * a->rows;
    const int64_t ncp = pf_ceil_div(a->cols, NR), nrp_total = pf_ceil_div(rows_total, ic.mr);
    if (pf_mul_size((size_t)a->sx, (size_t)ic.quads * ic.mr * 4, &ic.a_panel))
        return PF_EOVERFLOW;
    const int64_t block_panels =
        pf_max64(1, pf_min64((int64_t)(PF_DPE_INT_A_BLOCK_BYTES / ic.a_panel), nrp_total));
    const int64_t nrb = pf_ceil_div(nrp_total, block_panels);
    const int nthreads = pf_dpe_product_threads(a, rows_total);
    const int64_t cp_per_chunk = pf_ceil_div(ncp, pf_max64(1, pf_min64(ncp, pf_ceil_div(4 * nthreads, nrb))));
    const int64_t ncc = pf_ceil_div(ncp, cp_per_chunk);
    int any_table = 0;
    for (int j = 0; j < a->sw; j++)
        any_table |= s->adc_table[j] != NULL;

    /* weights packed once at programming (pf_dpe_pack), else packed for this call */
    const pf_dpe_packed *pk = a->w_packed && a->w_packed->iB ? a->w_packed : NULL;
    *declined = !pk && a->w_conductance && !first_cells_are_levels(a);
    if (*declined)
        return PF_OK;
    int8_t *own_B = pk ? NULL : pf_calloc(b_bytes, 1);
    float *own_Bs = pk ? NULL : pf_calloc(s_bytes, 1);
    const int8_t *Bp = pk ? pk->iB : own_B;
    const float *Bs = pk ? pk->iBs : own_Bs;
    pf_status st = pk || (own_B && own_Bs) ? PF_OK : PF_ENOMEM;
    if (st == PF_OK && !pk && pack_b(a, nb, &ic, own_B, own_Bs)) { /* some cell is no level: the float path */
        pf_free(own_B);
        pf_free(own_Bs);
        *declined = 1;
        return PF_OK;
    }
    int failed = st != PF_OK;
#pragma omp parallel num_threads(nthreads) reduction(| : failed)
    {
        const int im2col = a->x_kind == PF_DPE_X_IM2COL;
        uint8_t *Ap = pf_alloc((size_t)block_panels * ic.a_panel);
        float *As = pf_alloc((size_t)(block_panels * nb * ic.mr) * sizeof(float));
        int32_t *Ar = pf_alloc((size_t)(block_panels * nb * a->sx * ic.mr) * sizeof(int32_t));
        float *xrow = im2col ? pf_alloc((size_t)a->inner * sizeof(float)) : NULL;
        uint8_t *codes = im2col ? pf_alloc((size_t)a->inner * a->sx) : NULL;
        if (!Ap || !As || !Ar || (im2col && (!xrow || !codes)))
            failed = 1;
        int64_t packed_rb = -1;
        uint64_t short_tiles[PF_SHORT_TILES] = {0};
#pragma omp for schedule(static)
        for (int64_t work = 0; work < nrb * ncc; work++) {
            if (failed || pf_cancelled(a->cancel))
                continue;
            const int64_t rb = work / ncc, cc = work % ncc;
            const int64_t rp0 = rb * block_panels, nrp = pf_min64(block_panels, nrp_total - rp0);
            if (rb != packed_rb) {
                for (int64_t rp = 0; rp < nrp; rp++)
                    pack_a(a, s, &ic, rp0 + rp, Ap + rp * ic.a_panel, As + rp * nb * ic.mr, Ar + rp * nb * a->sx * ic.mr,
                           xrow, codes);
                packed_rb = rb;
            }
            for (int64_t cp = cc * cp_per_chunk; cp < pf_min64((cc + 1) * cp_per_chunk, ncp); cp++)
                for (int64_t rp = 0; rp < nrp; rp++) {
                    _Alignas(64) float tile[PF_DPE_IMR_MAX * NR];
                    const pf_dpe_itile t = {
                        .A = Ap + rp * ic.a_panel, .B = Bp + cp * ic.b_panel,
                        .rowsum = ic.boff ? Ar + rp * nb * a->sx * ic.mr : NULL,
                        .row_scale = As + rp * nb * ic.mr, .col_scale = Bs + cp * nb * NR,
                        .nb = nb, .nkq = ic.nkq, .nkq_last = ic.nkq_last, .sx = a->sx, .sw = a->sw,
                        .mr_valid = (int)pf_min64(ic.mr, rows_total - (rp0 + rp) * ic.mr),
                        .nr_valid = (int)pf_min64(NR, a->cols - cp * NR), .acc16 = acc16,
                        .coef = s->coef, .alpha = s->alpha,
                        .adc_table = any_table ? (const float *const *)s->adc_table : NULL,
                        .adc_table_max = s->adc_table_max, .out = tile};
                    const int sh = pf_short_tile(t.mr_valid);
                    if (sh >= 0 && kern.short_rows[sh]) {
                        kern.short_rows[sh](&t);
                        short_tiles[sh]++;
                    } else {
                        kern.full(&t);
                    }
                    store_tile(a, ic.mr, rp0 + rp, cp, tile);
                }
        }
        pf_dpe_count_short_tiles(PF_DPE_PATH_INT, short_tiles);
        pf_free(Ap);
        pf_free(As);
        pf_free(Ar);
        pf_free(xrow);
        pf_free(codes);
    }
    if (failed && st == PF_OK)
        st = PF_ENOMEM;
    pf_free(own_B);
    pf_free(own_Bs);
    if (st == PF_OK)
        atomic_fetch_add(&g_calls, 1);
    return st == PF_OK && pf_cancelled(a->cancel) ? PF_EINTR : st;
}

#define PF_ITILE_FN pf_dpe_itile_generic
#define ITILE_MR 8
#include "cpu/dpe_int_scalar.h"

/* its short instances (core/dpe.h) */
#define PF_ITILE_FN pf_dpe_itile_generic_r1
#define ITILE_MR 8
#define ITILE_ROWS 1
#include "cpu/dpe_int_scalar.h"
#define PF_ITILE_FN pf_dpe_itile_generic_r2
#define ITILE_MR 8
#define ITILE_ROWS 2
#include "cpu/dpe_int_scalar.h"
#define PF_ITILE_FN pf_dpe_itile_generic_r4
#define ITILE_MR 8
#define ITILE_ROWS 4
#include "cpu/dpe_int_scalar.h"
