/* Bit-slicing quantizer and weight programming (see slicing.h).
 *
 * Work is cut into granule row bands (item n, granule row gi). With enough
 * bands each band is one task: its max-abs pass and its quantization run
 * back to back while the band is still in cache. With few bands ("per-matrix",
 * "per-col", large granules) the max pass is split over row chunks merged with
 * an atomic max, then rows are quantized in parallel. Max-abs is exact, so
 * the split never changes a result.
 *
 * The element loops are written once (always_inline) and instantiated for the
 * portable ISA and for AVX2 (runtime dispatch, cpu_features.h), where
 * nearbyintf becomes vroundps. */
#include "core/slicing.h"
#include "core/contract.h"

#include <string.h>

#include "cpu/cpu_features.h"
#include "core/philox_noise.h"
#include "cpu/threads.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define PF_X86 1
#else
#define PF_X86 0
#endif

/* Columns quantized per step into the stack buffer of two's complement words. */
#define ROW_CHUNK 512
/* Granule columns whose running max a task keeps on the stack. */
#define MAX_CHUNK 256
/* Fewer bands than this: split the max pass over row chunks. Depends only on
 * the shape, never on the thread count. */
#define MIN_TASKS 16
/* abs bits at or above this are +-inf or NaN */
#define NONFINITE_BITS 0x7f800000u

/* ceil(a / b) for a >= 0, b >= 1 without the a + b - 1 overflow of huge granules */
static inline int64_t ceil_div(int64_t a, int64_t b) { return a / b + (a % b != 0); }

typedef struct {
    const float *x;
    int64_t n, rows, cols;
    int64_t gran_rows, gran_cols, grid_rows, grid_cols;
    size_t plane; /* N * R * C */
    const pf_slice_method *sm;
    int bfp;
    uint8_t *codes;
    float *gran_max, *gran_scale;
    int32_t *gran_exp;
    float *dequant;
    int g_level;
    uint8_t *levels;
    uint8_t level_lut[PF_MAX_SLICES][256]; /* pf_level_of_code of every code */
} slice_job;

/* ---- element loops ---- */

/* Max of the abs bit patterns of x[0..len): for non-negative floats the
 * integer order is the float order, and NaN/inf land at >= NONFINITE_BITS. */
PF_INLINE int32_t seg_absmax_bits(const float *x, int64_t len)
{
    int32_t m = 0;
    for (int64_t j = 0; j < len; j++) {
        int32_t b;
        memcpy(&b, &x[j], sizeof b);
        b &= 0x7fffffff;
        m = b > m ? b : m;
    }
    return m;
}

/* Running max of rows [ra, rb) of band (n, gi) for granule columns
 * [gj0, gj1) into acc (abs bits). */
PF_INLINE void band_rows_max(const slice_job *jb, int64_t n, int64_t ra, int64_t rb, int64_t gj0, int64_t gj1,
                             int32_t *acc)
{
    for (int64_t g = gj0; g < gj1; g++)
        acc[g - gj0] = 0;
    for (int64_t r = ra; r < rb; r++) {
        const float *row = jb->x + (size_t)(n * jb->rows + r) * (size_t)jb->cols;
        for (int64_t g = gj0; g < gj1; g++) {
            int64_t c0 = g * jb->gran_cols;
            int64_t c1 = pf_min64(jb->cols, c0 + jb->gran_cols);
            int32_t m = seg_absmax_bits(row + c0, c1 - c0);
            acc[g - gj0] = m > acc[g - gj0] ? m : acc[g - gj0];
        }
    }
}

PF_INLINE float bits_to_float(int32_t b)
{
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

PF_INLINE void quantize_seg_int(const float *x, int64_t len, float divisor, float k, int total_bits, int32_t *u,
                                float *dq)
{
    if (dq) {
        for (int64_t j = 0; j < len; j++) {
            int32_t q = pf_quantize_int(x[j], divisor, k);
            u[j] = pf_twos_complement(q, total_bits);
            dq[j] = pf_dequantize_int(q, divisor, k);
        }
    } else {
        for (int64_t j = 0; j < len; j++)
            u[j] = pf_twos_complement(pf_quantize_int(x[j], divisor, k), total_bits);
    }
}

PF_INLINE void quantize_seg_bfp(const float *x, int64_t len, const pf_quant_granule *g, int total_bits, int32_t *u,
                                float *dq)
{
    const float inv = g->inv_pow2e, up = g->pow2_bm2, lo = g->qmin, hi = g->qmax, scale = g->scale;
    if (dq) {
        for (int64_t j = 0; j < len; j++) {
            int32_t q = pf_quantize_bfp(x[j], inv, up, lo, hi);
            u[j] = pf_twos_complement(q, total_bits);
            dq[j] = pf_dequantize_bfp(q, scale);
        }
    } else {
        for (int64_t j = 0; j < len; j++)
            u[j] = pf_twos_complement(pf_quantize_bfp(x[j], inv, up, lo, hi), total_bits);
    }
}

PF_INLINE void extract_slice(const int32_t *u, int64_t len, int offset, int width, uint8_t *dst)
{
    for (int64_t j = 0; j < len; j++)
        dst[j] = pf_slice_code(u[j], offset, width);
}

/* Levels through the slice's table (exactly pf_level_of_code). */
PF_INLINE void codes_to_levels(const uint8_t *code, int64_t len, const uint8_t *lut, uint8_t *dst)
{
    for (int64_t j = 0; j < len; j++)
        dst[j] = lut[code[j]];
}

#if PF_X86
/* Same for codes < 16: one vpshufb per 32 codes. */
__attribute__((target("avx2"))) static void codes_to_levels16_avx2(const uint8_t *code, int64_t len,
                                                                    const uint8_t *lut, uint8_t *dst)
{
    const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)lut));
    int64_t j = 0;
    for (; j + 32 <= len; j += 32) {
        __m256i c = _mm256_loadu_si256((const __m256i *)(code + j));
        _mm256_storeu_si256((__m256i *)(dst + j), _mm256_shuffle_epi8(table, c));
    }
    for (; j < len; j++)
        dst[j] = lut[code[j]];
}
#endif

/* Quantizes and slices row r of item n (its granule row's stats are final).
 * avx2 is a compile-time constant of each ISA instance. */
PF_INLINE void quantize_row(const slice_job *jb, int64_t n, int64_t r, int avx2)
{
    const pf_slice_method *sm = jb->sm;
    const int B = sm->total_bits;
    const int64_t gi = r / jb->gran_rows;
    const size_t gbase = (size_t)(n * jb->grid_rows + gi) * (size_t)jb->grid_cols;
    const size_t row_off = (size_t)(n * jb->rows + r) * (size_t)jb->cols;
    const float *row = jb->x + row_off;
    const float k = (float)((1 << (B - 1)) - 1);
    int32_t u[ROW_CHUNK];
    for (int64_t c0 = 0; c0 < jb->cols; c0 += ROW_CHUNK) {
        int64_t c1 = pf_min64(jb->cols, c0 + ROW_CHUNK);
        for (int64_t c = c0; c < c1;) {
            int64_t g = c / jb->gran_cols;
            int64_t e = pf_min64(c1, (g + 1) * jb->gran_cols);
            float *dq = jb->dequant ? jb->dequant + row_off + c : NULL;
            if (!jb->bfp) {
                float m = jb->gran_max[gbase + g];
                quantize_seg_int(row + c, e - c, m > 0.0f ? m : 1.0f, k, B, u + (c - c0), dq);
            } else {
                pf_quant_granule gp = pf_quant_granule_bfp(jb->gran_exp[gbase + g], B);
                quantize_seg_bfp(row + c, e - c, &gp, B, u + (c - c0), dq);
            }
            c = e;
        }
        for (int s = 0; s < sm->n_slices; s++) {
            size_t at = (size_t)s * jb->plane + row_off + (size_t)c0;
            extract_slice(u, c1 - c0, sm->offset[s], sm->width[s], jb->codes + at);
            if (!jb->levels)
                continue;
#if PF_X86
            if (avx2 && sm->max_code[s] < 16) {
                codes_to_levels16_avx2(jb->codes + at, c1 - c0, jb->level_lut[s], jb->levels + at);
                continue;
            }
#endif
            codes_to_levels(jb->codes + at, c1 - c0, jb->level_lut[s], jb->levels + at);
        }
    }
}

/* Scale (and exponent) of granules [g0, g1) of granule row (n, gi); returns
 * 0, or -1 when one of their maxima is not finite. */
PF_INLINE int finish_granules(const slice_job *jb, size_t gbase, int64_t g0, int64_t g1)
{
    int bad = 0;
    for (int64_t g = g0; g < g1; g++) {
        float m = jb->gran_max[gbase + g];
        int32_t b;
        memcpy(&b, &m, sizeof b);
        if ((uint32_t)b >= NONFINITE_BITS) {
            bad = 1;
            continue;
        }
        pf_quant_granule gp = pf_quant_granule_make(m, jb->sm->total_bits, jb->bfp);
        jb->gran_scale[gbase + g] = gp.scale;
        if (jb->bfp)
            jb->gran_exp[gbase + g] = gp.exponent;
    }
    return bad ? -1 : 0;
}

/* Whole band b = n * grid_rows + gi: max pass, stats, quantization. */
PF_INLINE int band_task(const slice_job *jb, int64_t b, int avx2)
{
    int64_t n = b / jb->grid_rows, gi = b % jb->grid_rows;
    int64_t ra = gi * jb->gran_rows, rb = pf_min64(jb->rows, ra + jb->gran_rows);
    size_t gbase = (size_t)b * (size_t)jb->grid_cols;
    int32_t acc[MAX_CHUNK];
    for (int64_t g0 = 0; g0 < jb->grid_cols; g0 += MAX_CHUNK) {
        int64_t g1 = pf_min64(jb->grid_cols, g0 + MAX_CHUNK);
        band_rows_max(jb, n, ra, rb, g0, g1, acc);
        for (int64_t g = g0; g < g1; g++)
            jb->gran_max[gbase + g] = bits_to_float(acc[g - g0]);
    }
    if (finish_granules(jb, gbase, 0, jb->grid_cols) < 0)
        return -1;
    for (int64_t r = ra; r < rb; r++)
        quantize_row(jb, n, r, avx2);
    return 0;
}

/* Rows [ra, rb) of band b: partial maxima merged atomically into gran_max,
 * which holds abs bits (as uint32, zero-initialised) during this phase. */
PF_INLINE void split_max_task(const slice_job *jb, int64_t b, int64_t ra, int64_t rb)
{
    int64_t n = b / jb->grid_rows;
    uint32_t *dst = (uint32_t *)(void *)(jb->gran_max + (size_t)b * (size_t)jb->grid_cols);
    int32_t acc[MAX_CHUNK];
    for (int64_t g0 = 0; g0 < jb->grid_cols; g0 += MAX_CHUNK) {
        int64_t g1 = pf_min64(jb->grid_cols, g0 + MAX_CHUNK);
        band_rows_max(jb, n, ra, rb, g0, g1, acc);
        for (int64_t g = g0; g < g1; g++) {
            uint32_t v = (uint32_t)acc[g - g0];
            uint32_t cur = __atomic_load_n(&dst[g], __ATOMIC_RELAXED);
            while (v > cur && !__atomic_compare_exchange_n(&dst[g], &cur, v, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
                ;
        }
    }
}

/* ---- ISA instances ---- */

#define PF_DEFINE_SLICE_OPS(suffix, attr, avx2)                                                              \
    attr static int band_task_##suffix(const slice_job *jb, int64_t b) { return band_task(jb, b, avx2); }    \
    attr static void split_max_task_##suffix(const slice_job *jb, int64_t b, int64_t ra, int64_t rb)         \
    {                                                                                                        \
        split_max_task(jb, b, ra, rb);                                                                       \
    }                                                                                                        \
    attr static void quantize_row_##suffix(const slice_job *jb, int64_t n, int64_t r)                      \
    {                                                                                                        \
        quantize_row(jb, n, r, avx2);                                                                        \
    }

PF_DEFINE_SLICE_OPS(generic, , 0)
#if PF_X86
PF_DEFINE_SLICE_OPS(avx2, __attribute__((target("avx2,fma"))), 1)
#endif

typedef struct {
    int (*band_task)(const slice_job *, int64_t);
    void (*split_max_task)(const slice_job *, int64_t, int64_t, int64_t);
    void (*quantize_row)(const slice_job *, int64_t, int64_t);
} slice_ops;

static slice_ops select_ops(void)
{
#if PF_X86
    if (pf_active_isa() >= PF_ISA_AVX2)
        return (slice_ops){band_task_avx2, split_max_task_avx2, quantize_row_avx2};
#endif
    return (slice_ops){band_task_generic, split_max_task_generic, quantize_row_generic};
}

/* ---- drivers ---- */

static pf_status nonfinite_data(void)
{
    return pf_fail(PF_ENONFINITE, "data", "contains NaN or infinity; quantization needs finite values");
}

pf_status pf_slice_quantize(const float *x, int64_t n, int64_t rows, int64_t cols, int64_t gran_rows, int64_t gran_cols,
                      const pf_slice_method *sm, int bfp, uint8_t *codes, float *gran_max, float *gran_scale,
                      int32_t *gran_exp, float *dequant, int g_level, uint8_t *levels)
{
    return pf_slice_quantize_cancel(x, n, rows, cols, gran_rows, gran_cols, sm, bfp, codes, gran_max, gran_scale,
                                    gran_exp, dequant, g_level, levels, NULL);
}

pf_status pf_slice_quantize_cancel(const float *x, int64_t n, int64_t rows, int64_t cols, int64_t gran_rows,
                             int64_t gran_cols, const pf_slice_method *sm, int bfp, uint8_t *codes, float *gran_max,
                             float *gran_scale, int32_t *gran_exp, float *dequant, int g_level, uint8_t *levels,
                             pf_cancel *cancel)
{
    pf_status st = pf_validate_slice_args(n, rows, cols, gran_rows, gran_cols, sm, levels != NULL, g_level);
    if (st != PF_OK)
        return st;
    if (!x || !codes || !gran_max || !gran_scale || (bfp && !gran_exp))
        return pf_fail(PF_EINVAL, "codes", "missing output buffers");
    size_t dims[3] = {(size_t)n, (size_t)rows, (size_t)cols}, plane, all;
    if (pf_mul_sizes(dims, 3, &plane) != PF_OK || pf_mul_size(plane, (size_t)sm->n_slices, &all) != PF_OK ||
        all > (size_t)INT64_MAX)
        return pf_fail(PF_EOVERFLOW, "data", "array sizes overflow");
    slice_job jb = {
        .x = x, .n = n, .rows = rows, .cols = cols,
        .gran_rows = gran_rows, .gran_cols = gran_cols,
        .grid_rows = ceil_div(rows, gran_rows), .grid_cols = ceil_div(cols, gran_cols),
        .plane = plane, .sm = sm, .bfp = bfp ? 1 : 0, .codes = codes,
        .gran_max = gran_max, .gran_scale = gran_scale, .gran_exp = bfp ? gran_exp : NULL,
        .dequant = dequant, .g_level = g_level, .levels = levels,
    };
    if (levels)
        for (int s = 0; s < sm->n_slices; s++)
            for (int c = 0; c <= sm->max_code[s]; c++)
                jb.level_lut[s][c] = pf_level_of_code(c, sm->max_code[s], g_level);
    const slice_ops ops = select_ops();
    const int64_t bands = n * jb.grid_rows;
    const int64_t band_rows = pf_min64(rows, gran_rows);
    int bad = 0;
    const int nth = pf_threads_for((double)plane); /* elements */

    if (bands >= MIN_TASKS || band_rows == 1) {
#pragma omp parallel for num_threads(nth) schedule(dynamic, 1) reduction(| : bad)
        for (int64_t b = 0; b < bands; b++)
            if (!pf_cancelled(cancel))
                bad |= ops.band_task(&jb, b) < 0;
        return pf_cancelled(cancel) ? PF_EINTR : bad ? nonfinite_data() : PF_OK;
    }

    /* few bands: split each band's rows into chunks for the max pass */
    const int64_t nsplit = pf_min64(band_rows, ceil_div(MIN_TASKS, bands));
    const int64_t chunk = ceil_div(band_rows, nsplit);
    const int64_t tasks = bands * nsplit;
    const size_t ngran = (size_t)bands * (size_t)jb.grid_cols;
    memset(gran_max, 0, ngran * sizeof *gran_max); /* 0.0f and abs bits 0 alike */
#pragma omp parallel for num_threads(nth) schedule(dynamic, 1)
    for (int64_t t = 0; t < tasks; t++) {
        int64_t b = t / nsplit, k = t % nsplit;
        int64_t ra = (b % jb.grid_rows) * gran_rows + k * chunk;
        int64_t rb = pf_min64(pf_min64(rows, (b % jb.grid_rows + 1) * gran_rows), ra + chunk);
        if (ra < rb && !pf_cancelled(cancel))
            ops.split_max_task(&jb, b, ra, rb);
    }
    if (pf_cancelled(cancel))
        return PF_EINTR;
    /* abs bits -> float in place (same bytes: a no-op), then the stats */
    for (int64_t b = 0; b < bands; b++)
        bad |= finish_granules(&jb, (size_t)b * (size_t)jb.grid_cols, 0, jb.grid_cols) < 0;
    if (bad)
        return nonfinite_data();
    const int64_t total_rows = n * rows;
#pragma omp parallel for num_threads(nth) schedule(static)
    for (int64_t t = 0; t < total_rows; t++)
        if (!pf_cancelled(cancel))
            ops.quantize_row(&jb, t / rows, t % rows);
    return pf_cancelled(cancel) ? PF_EINTR : PF_OK;
}

pf_status pf_program_levels(const uint8_t *codes, int64_t cells_per_slice, const pf_slice_method *sm, int g_level,
                      uint8_t *levels)
{
    pf_status st = pf_validate_slice_method_struct("slice_method", sm);
    if (st != PF_OK || (st = pf_validate_g_level("g_level", g_level)) != PF_OK ||
        (st = pf_validate_levels_fit("g_level", sm, g_level)) != PF_OK)
        return st;
    if (cells_per_slice < 0 || (cells_per_slice > 0 && (!codes || !levels)))
        return pf_fail(PF_EINVAL, "codes", "invalid size %lld or missing buffers", (long long)cells_per_slice);
    size_t total;
    if (pf_mul_size((size_t)cells_per_slice, (size_t)sm->n_slices, &total) != PF_OK)
        return pf_fail(PF_EOVERFLOW, "codes", "array sizes overflow");
    int bad = 0;
    for (int s = 0; s < sm->n_slices; s++) {
        const uint8_t *src = codes + (size_t)s * (size_t)cells_per_slice;
        uint8_t *dst = levels + (size_t)s * (size_t)cells_per_slice;
        const int m = sm->max_code[s];
#pragma omp parallel for num_threads(pf_threads_for((double)cells_per_slice)) schedule(static) reduction(| : bad)
        for (int64_t i = 0; i < cells_per_slice; i++) {
            bad |= src[i] > m;
            dst[i] = pf_level_of_code(src[i] > m ? m : src[i], m, g_level);
        }
    }
    return bad ? pf_fail(PF_EINVAL, "codes", "a code exceeds its slice's maximum 2**width - 1") : PF_OK;
}

pf_status pf_program_conductance(const uint8_t *levels, int64_t n_slices, int64_t rows, int64_t cols,
                           const pf_program_params *p, float *conductance)
{
    return pf_program_conductance_cancel(levels, n_slices, rows, cols, p, conductance, NULL);
}

pf_status pf_program_conductance_cancel(const uint8_t *levels, int64_t n_slices, int64_t rows, int64_t cols,
                                        const pf_program_params *p, float *conductance, pf_cancel *cancel)
{
    pf_status st = pf_validate_program_params(p);
    if (st != PF_OK)
        return st;
    if (n_slices < 0 || rows < 0 || cols < 0)
        return pf_fail(PF_EINVAL, "levels", "negative sizes");
    size_t dims[3] = {(size_t)n_slices, (size_t)rows, (size_t)cols}, total;
    if (pf_mul_sizes(dims, 3, &total) != PF_OK || total > (size_t)INT64_MAX)
        return pf_fail(PF_EOVERFLOW, "levels", "array sizes overflow");
    if (total == 0)
        return PF_OK;
    if (!levels || !conductance)
        return pf_fail(PF_EINVAL, "levels", "missing buffers");
    const float q_g = (float)((p->hgs - p->lgs) / (double)(p->g_level - 1));
    const float lgs = (float)p->lgs, hgs = (float)p->hgs, wv = (float)p->write_variation;
    const int noisy = p->write_variation > 0, stuck = p->rate_stuck_hgs > 0 || p->rate_stuck_lgs > 0;
    const double r_hgs = p->rate_stuck_hgs, r_any = p->rate_stuck_hgs + p->rate_stuck_lgs;
    const int64_t lines = n_slices * rows;
    const uint64_t seed = p->seed;
#pragma omp parallel for num_threads(pf_threads_for((double)total)) schedule(static)
    for (int64_t line = 0; line < lines; line++) {
        if (pf_cancelled(cancel))
            continue; /* cancelled: skip the remaining rows (PF_EINTR below) */
        const size_t base = (size_t)line * (size_t)cols;
        for (int64_t c = 0; c < cols; c++) {
            const uint64_t idx = (uint64_t)base + (uint64_t)c;
            float g = (float)levels[idx] * q_g + lgs;
            if (noisy)
                g = g + g * (wv * pf_normal(seed, PF_STREAM_WRITE, 0, idx));
            if (stuck) {
                double r = (double)pf_uniform(seed, PF_STREAM_STUCK, 0, idx);
                if (r < r_hgs)
                    g = hgs;
                else if (r < r_any)
                    g = lgs;
            }
            conductance[idx] = g;
        }
    }
    return pf_cancelled(cancel) ? PF_EINTR : PF_OK;
}
