/* The fused DPE MVM on the device (contract of pf_dpe_mvm, core/dpe.h) and resident weights. */
#include "opencl/internal.h"
#include "core/philox_noise.h" /* the stream ids */

#include <stdatomic.h>
#include <stdlib.h>

/* ---- resident weights ---- */

static _Atomic uint64_t g_weights_serial;

static pf_status weight_sizes(const pf_dpe_args *a, size_t *levels, size_t *cond, size_t *scale)
{
    size_t dims[3] = {(size_t)a->sw, (size_t)a->inner, (size_t)a->cols};
    size_t sdims[2] = {(size_t)a->w_gr, (size_t)a->w_gc};
    if (pf_mul_sizes(dims, 3, levels) || pf_mul_size(*levels, sizeof(float), cond) || pf_mul_sizes(sdims, 2, scale) ||
        pf_mul_size(*scale, sizeof(float), scale))
        return pf_fail(PF_EOVERFLOW, "w_levels", "weight sizes overflow");
    if (!a->w_conductance)
        *cond = 0;
    return PF_OK;
}

pf_status pf_cl_weights_create(pf_cl_device *dev, const pf_dpe_args *a, pf_cl_weights **out)
{
    *out = NULL;
    pf_status st = pf_cl_build(dev);
    size_t bl, bc, bs;
    if (st != PF_OK || (st = weight_sizes(a, &bl, &bc, &bs)) != PF_OK)
        return st;
    pf_cl_weights *w = pf_calloc(1, sizeof *w);
    if (!w)
        return pf_fail(PF_ENOMEM, NULL, "resident weights: out of memory");
    w->dev = dev;
    if ((st = pf_cl_buf_in(dev, a->w_levels, bl, "w_levels", &w->levels)) != PF_OK ||
        (st = pf_cl_buf_in(dev, a->w_conductance, bc, "w_conductance", &w->cond)) != PF_OK ||
        (st = pf_cl_buf_in(dev, a->w_scale, bs, "w_scale", &w->scale)) != PF_OK) {
        pf_cl_weights_free(w);
        return st;
    }
    w->p_levels = a->w_levels;
    w->p_cond = a->w_conductance;
    w->p_scale = a->w_scale;
    w->sw = a->sw;
    w->inner = a->inner;
    w->cols = a->cols;
    w->w_gr = a->w_gr;
    w->w_gc = a->w_gc;
    w->bytes = bl + bc + bs;
    w->serial = atomic_fetch_add(&g_weights_serial, 1) + 1;
    *out = w;
    return PF_OK;
}

void pf_cl_weights_free(pf_cl_weights *w)
{
    if (!w)
        return;
    cl_mem m[3] = {w->levels, w->cond, w->scale};
    for (int i = 0; i < 3; i++)
        if (m[i])
            clReleaseMemObject(m[i]);
    pf_free(w);
}

size_t pf_cl_weights_bytes(const pf_cl_weights *w) { return w ? w->bytes : 0; }

int pf_cl_weights_match(const pf_cl_weights *w, const pf_dpe_args *a)
{
    return w && w->p_levels == (const void *)a->w_levels && w->p_cond == (const void *)a->w_conductance &&
           w->p_scale == (const void *)a->w_scale && w->sw == a->sw && w->inner == a->inner && w->cols == a->cols &&
           w->w_gr == a->w_gr && w->w_gc == a->w_gc;
}

/* ---- per-call constants ---- */

/* The constants of every backend (pf_dpe_consts_init, core/dpe_consts.c) laid out for the
 * device: coef[sx*sw] then alpha[sw] in one buffer, the DAC codes [sx][256], the exact ADC
 * tables concatenated. */
typedef struct {
    int noise_x, noise_w, any_table;
    float *fparams;
    float *dac;
    float *tables;
    size_t table_floats;
    int32_t tab_info[2 * PF_MAX_SLICES]; /* [2j] offset in tables or -1, [2j+1] last index */
} pf_cl_consts;

static void consts_free(pf_cl_consts *s)
{
    pf_free(s->fparams);
    pf_free(s->dac);
    pf_free(s->tables);
    memset(s, 0, sizeof *s);
}

static pf_status consts_tables(const pf_dpe_args *a, const pf_dpe_consts *c, pf_cl_consts *s)
{
    for (int j = 0; j < a->sw; j++) {
        s->tab_info[2 * j] = -1;
        s->tab_info[2 * j + 1] = 0;
        if (c->adc_table[j]) {
            s->tab_info[2 * j] = (int32_t)s->table_floats;
            s->tab_info[2 * j + 1] = c->adc_table_max[j];
            s->table_floats += (size_t)c->adc_table_max[j] + 1;
            s->any_table = 1;
        }
    }
    if (!s->any_table)
        return PF_OK;
    if (s->table_floats > INT32_MAX)
        return pf_fail(PF_EOVERFLOW, "radc", "the exact ADC tables exceed 2**31 entries");
    s->tables = pf_alloc(s->table_floats * sizeof(float));
    if (!s->tables)
        return pf_fail(PF_ENOMEM, NULL, "ADC tables: out of memory");
    for (int j = 0; j < a->sw; j++)
        if (c->adc_table[j])
            memcpy(s->tables + s->tab_info[2 * j], c->adc_table[j], ((size_t)c->adc_table_max[j] + 1) * sizeof(float));
    return PF_OK;
}

static pf_status consts_init(const pf_dpe_args *a, pf_cl_consts *s)
{
    memset(s, 0, sizeof *s);
    pf_dpe_consts c;
    pf_status st = pf_dpe_consts_init(a, &c);
    if (st != PF_OK)
        return st;
    s->noise_x = c.noise_x;
    s->noise_w = c.noise_w;
    s->fparams = pf_calloc((size_t)(a->sx * a->sw + a->sw), sizeof(float));
    s->dac = pf_calloc((size_t)a->sx * 256, sizeof(float));
    if (!s->fparams || !s->dac) {
        st = pf_fail(PF_ENOMEM, NULL, "dpe_mvm constants: out of memory");
    } else {
        memcpy(s->fparams, c.coef, (size_t)(a->sx * a->sw) * sizeof(float));
        memcpy(s->fparams + a->sx * a->sw, c.alpha, (size_t)a->sw * sizeof(float));
        for (int i = 0; i < a->sx; i++)
            memcpy(s->dac + i * 256, c.dac[i], 256 * sizeof(float));
        st = consts_tables(a, &c, s);
    }
    pf_dpe_consts_free(&c);
    if (st != PF_OK)
        consts_free(s);
    return st;
}

/* ---- validation ---- */

/* The arguments pf_cl_dpe_mvm accepts (the binding checks them first, with argument names). */
static pf_status mvm_validate(const pf_dpe_args *a, const pf_cl_weights *w)
{
    pf_status vst = pf_validate_dpe_args(a); /* the one contract (core/contract.h) */
    if (vst != PF_OK)
        return vst;
    const int im2col = a->x_kind == PF_DPE_X_IM2COL;
    if (a->x_kind != PF_DPE_X_CODES && !im2col)
        return pf_fail(PF_EINVAL, NULL, "dpe_mvm on OpenCL: unknown input kind %d", (int)a->x_kind);
    const pf_im2col *c = a->x_im2col;
    if (im2col && (!c || !a->x_gran_max || !c->image || c->out_h * c->out_w != a->rows ||
                   c->channels * c->kh * c->kw != a->inner || a->x_method.n_slices != a->sx))
        return pf_fail(PF_EINVAL, NULL, "dpe_mvm on OpenCL: inconsistent implicit im2col arguments");
    const int64_t lim = INT32_MAX;
    if (im2col && (a->rows > lim || a->inner > lim || c->channels > lim || c->height > lim || c->width > lim ||
                   c->kh * c->kw > lim))
        return pf_fail(PF_EINVAL, "input", "dpe_conv2d on OpenCL: image, patch and output sizes must be below 2**31");
    const int out_nphw = a->so_p == a->rows && a->so_r == 1 && a->so_n == a->rows * a->cols;
    if (!out_nphw && (a->so_p != 1 || a->so_r != a->cols || a->so_n != a->rows * a->cols))
        return pf_fail(PF_EINVAL, "out", "dpe_mvm on OpenCL: the output must be contiguous (N, R, P) or (N, P, R)");
    if (w && !pf_cl_weights_match(w, a))
        return pf_fail(PF_EINVAL, NULL, "dpe_mvm on OpenCL: resident weights do not match the weight arguments");
    const int64_t D = (int64_t)(a->rdac - 1) * (a->g_level - 1) * a->n;
    if (a->batch != 0 && a->rows != 0 && a->cols != 0 && a->inner != 0 && D >= ((int64_t)1 << 24))
        return pf_fail(PF_EINVAL, NULL, "dpe_mvm: (rdac-1)*(g_level-1)*n must be below 2**24");
    return PF_OK;
}

/* ---- geometry ---- */

/* One MVM call: its geometry (every size overflow-checked), constants and buffers. */
typedef struct {
    const pf_dpe_args *a;
    const pf_cl_weights *resident; /* NULL: weights passed for this call only */
    int im2col, tiled, kt, out_nphw, split_out, read_noise;
    int pair_shift; /* two weight slices per packed float (mvm_pair_shift), 0: one */
    size_t n, sx, sw, sb, K, P, R, nb, Kp, G, Pp, Gc, nbase; /* sb: slices of the packed weights B */
    size_t b_x, b_xs, b_out, b_A, b_RS, b_B, b_CS, b_sig, b_img, b_zw, b_out_chunk;
    pf_cl_consts c;
    cl_mem x, xs, img, gmax, wl, wc, ws, sig, fp, dac, tab, ti, out;
    cl_mem sA, sRS, sB, sCS, sZ, sZW;
} mvm_call;

/* The largest output buffer: CL_DEVICE_MAX_MEM_ALLOC_SIZE, or less when the
 * internal testing hook PYFASTPIM_CL_OUTPUT_LIMIT (bytes) says so (it lets the
 * tests exercise the split output path without a 4 GiB output). */
static uint64_t output_limit(const pf_cl_device *dev)
{
    uint64_t limit = dev->info.max_alloc_bytes;
    const char *env = getenv("PYFASTPIM_CL_OUTPUT_LIMIT");
    if (env && *env) {
        char *end;
        unsigned long long v = strtoull(env, &end, 10);
        if (*end == 0 && v > 0 && v < limit)
            limit = v;
    }
    return limit;
}

static pf_status mvm_sizes(const pf_cl_device *dev, mvm_call *m)
{
    const pf_dpe_args *a = m->a;
    const size_t unit_r = (size_t)dev->tm * dev->ly, unit_c = (size_t)dev->tn * dev->lx;
    size_t t1, t2, a_row;
    m->n = (size_t)a->n, m->sx = (size_t)a->sx, m->sw = (size_t)a->sw;
    m->K = (size_t)a->inner, m->P = (size_t)a->cols, m->R = (size_t)a->rows;
    m->nb = (m->K + m->n - 1) / m->n;
    m->Kp = m->K; /* rows packed: only those present, min(n, K - b*n) in block b (kernels/dpe.cl) */
    if (pf_mul_size((size_t)a->batch, m->R, &m->G) || m->nb > INT32_MAX ||
        pf_mul_size((size_t)a->x_item0, m->R, &m->nbase) || pf_add_size(m->nbase, m->G, &t2) ||
        pf_mul_size(t2, m->sx * m->K, &t2) || /* noise indices must fit too */
        pf_add_size(m->P, unit_c, &t1) || pf_add_size(m->G, unit_r, &t1) ||
        pf_mul_size(m->sx * sizeof(float), m->Kp, &a_row))
        return pf_fail(PF_EOVERFLOW, NULL, "dpe_mvm: array sizes overflow");
    m->Pp = pf_cl_round_up(m->P, unit_c);
    size_t cap_rows = PF_CL_A_CHUNK_BYTES / a_row / unit_r * unit_r;
    if (cap_rows < unit_r)
        cap_rows = unit_r;
    m->Gc = pf_cl_round_up(m->G, unit_r);
    if (m->Gc > cap_rows)
        m->Gc = cap_rows;
    size_t dx[3] = {m->sx, m->G, m->K}, dxs[3] = {(size_t)a->batch, (size_t)a->x_gr, (size_t)a->x_gc * sizeof(float)};
    size_t dout[3] = {m->G, m->P, sizeof(float)}, dA[3] = {a_row, m->Gc, 1}, dRS[3] = {m->nb, m->Gc, sizeof(float)};
    size_t dB[4] = {m->sw, m->Kp, m->Pp, sizeof(float)}, dCS[3] = {m->nb, m->Pp, sizeof(float)};
    size_t dzw[4] = {m->sw, m->K, m->P, sizeof(float)};
    if (pf_mul_sizes(dx, 3, &m->b_x) || pf_mul_sizes(dxs, 3, &m->b_xs) || pf_mul_sizes(dout, 3, &m->b_out) ||
        pf_mul_sizes(dA, 3, &m->b_A) || pf_mul_sizes(dRS, 3, &m->b_RS) || pf_mul_sizes(dB, 4, &m->b_B) ||
        pf_mul_sizes(dCS, 3, &m->b_CS) || pf_mul_size((size_t)a->g_level, sizeof(float), &m->b_sig) ||
        pf_mul_sizes(dzw, 4, &m->b_zw))
        return pf_fail(PF_EOVERFLOW, NULL, "dpe_mvm: array sizes overflow");
    if (m->im2col && pf_cl_im2col_bytes(a->x_im2col, a->batch, &m->b_img) != PF_OK)
        return pf_fail(PF_EOVERFLOW, "input", "dpe_conv2d: image sizes overflow");
    return PF_OK;
}

/* An output above the device's largest buffer (CL_DEVICE_MAX_MEM_ALLOC_SIZE, e.g. 4 GiB) is
 * computed a row chunk at a time into a chunk-sized buffer read back after each chunk. */
static pf_status mvm_output_split(const pf_cl_device *dev, mvm_call *m)
{
    const uint64_t out_limit = output_limit(dev);
    m->split_out = (uint64_t)m->b_out > out_limit;
    if (!m->split_out)
        return PF_OK;
    if (m->out_nphw)
        return pf_fail(PF_EINVAL, "out", "dpe_conv2d on OpenCL: the output needs %zu bytes, above the largest buffer "
                       "of %s (%llu bytes, CL_DEVICE_MAX_MEM_ALLOC_SIZE); convolution outputs are not split: use a "
                       "smaller batch, or the CPU", m->b_out, dev->info.name, (unsigned long long)out_limit);
    if (pf_mul_size(m->Gc, m->P * sizeof(float), &m->b_out_chunk))
        return pf_fail(PF_EOVERFLOW, NULL, "dpe_mvm: array sizes overflow");
    if ((uint64_t)m->b_out_chunk > out_limit)
        return pf_fail(PF_EINVAL, "out", "dpe_mvm on OpenCL: the output needs %zu bytes, above the largest buffer of "
                       "%s (%llu bytes, CL_DEVICE_MAX_MEM_ALLOC_SIZE), and even one chunk of %zu rows (%zu bytes) "
                       "does not fit", m->b_out, dev->info.name, (unsigned long long)out_limit, m->Gc,
                       m->b_out_chunk);
    return PF_OK;
}

/* ---- buffers ---- */

static pf_status mvm_buffers(pf_cl_device *dev, mvm_call *m, const pf_cl_weights *w, pf_cl_set *s)
{
    const pf_dpe_args *a = m->a;
    const int ic = m->im2col;
    const size_t sx = m->sx, sw = m->sw;
    m->x = pf_cl_set_in(s, ic ? NULL : a->x_codes, m->b_x, "x_codes");
    m->xs = pf_cl_set_in(s, ic ? NULL : a->x_scale, m->b_xs, "x_scale");
    m->img = pf_cl_set_in(s, ic ? a->x_im2col->image : NULL, m->b_img, "input");
    m->gmax = pf_cl_set_in(s, ic ? a->x_gran_max : NULL, m->b_xs, "x_gran_max");
    m->sig = pf_cl_set_in(s, a->read_sigma, a->read_sigma ? m->b_sig : 0, "read_sigma");
    m->fp = pf_cl_set_in(s, m->c.fparams, (sx * sw + sw) * sizeof(float), "parameters");
    m->dac = pf_cl_set_in(s, m->c.dac, sx * 256 * sizeof(float), "DAC table");
    m->tab = pf_cl_set_in(s, m->c.tables, m->c.table_floats * sizeof(float), "ADC tables");
    m->ti = pf_cl_set_in(s, m->c.tab_info, sizeof m->c.tab_info, "ADC table index");
    if (!m->split_out)
        m->out = pf_cl_set_out(s, a->out, m->b_out, "out");
    m->resident = w;
    if (w) {
        m->wl = w->levels, m->wc = w->cond, m->ws = w->scale;
    } else {
        size_t bl = 0, bc = 0, bs = 0;
        pf_cl_set_status(s, s->st == PF_OK ? weight_sizes(a, &bl, &bc, &bs) : PF_OK);
        m->wl = pf_cl_set_in(s, a->w_levels, bl, "w_levels");
        m->wc = pf_cl_set_in(s, a->w_conductance, bc, "w_conductance");
        m->ws = pf_cl_set_in(s, a->w_scale, bs, "w_scale");
    }
    if (s->st != PF_OK)
        return s->st;
    /* normals drawn by pf_normals_range: the chunk's voltage noise, the weights' read noise */
    m->read_noise = m->c.noise_w && a->read_sigma;
    pf_status st;
    if ((st = pf_cl_scratch_get(dev, SCR_Z, m->c.noise_x ? m->b_A : 64, "voltage noise", &m->sZ)) != PF_OK ||
        (st = pf_cl_scratch_get(dev, SCR_ZW, m->read_noise ? m->b_zw : 64, "read noise", &m->sZW)) != PF_OK ||
        (st = pf_cl_scratch_get(dev, SCR_A, m->b_A, "packed inputs", &m->sA)) != PF_OK ||
        (st = pf_cl_scratch_get(dev, SCR_RS, m->b_RS, "input scales", &m->sRS)) != PF_OK ||
        (st = pf_cl_scratch_get(dev, SCR_CS, m->b_CS, "weight scales", &m->sCS)) != PF_OK)
        return st;
    /* the padding's positions: the crossbar size n with the padded sizes (the block boundaries,
     * at multiples of n, place each slice's rows); B's where it is packed (mvm_pack_b) */
    const uint64_t sig_a[4] = {sx * 0x100000000ull + m->n, m->Kp, m->Gc, m->K};
    return pf_cl_scratch_zero(dev, SCR_A, sig_a);
}

/* ---- kernels ---- */

/* Two weight slices per packed float: B slice jb = L_2jb + 2**s L_2jb+1 (kernels/dpe.cl), so the
 * tile kernel runs half the multiply-adds and splits each sum (pf_adc_slice). Exact only where
 * every crossbar sum is an integer below 2**s, noise free with ideal levels: DAC codes <= rdac-1
 * times levels <= g_level-1 over n rows, D = (rdac-1)(g_level-1)n < 2**s; and where every partial
 * sum of the packed product, at most D + 2**s D, is an integer float32 holds (< 2**24). Then the
 * split gives each slice's sum exactly as the unpaired kernel accumulates it, and the outputs are
 * bit-identical. (A level above g_level-1 breaks the bound: pf_dpe_pack_w flags it, and mvm_pack_b
 * packs one slice per float instead.) Returns s, or 0: one slice per float. */
static int mvm_pair_shift(const pf_cl_device *dev, const pf_dpe_args *a, const pf_cl_consts *c)
{
    const int64_t D = (int64_t)(a->rdac - 1) * (a->g_level - 1) * a->n; /* < 2**24 (mvm_validate) */
    if (!dev->pair_slices || c->noise_x || c->noise_w || a->sw < 2 || D < 1)
        return 0;
    int s = 1;
    while (((int64_t)1 << s) <= D)
        s++;
    return D + (D << s) < ((int64_t)1 << 24) ? s : 0;
}

/* B (m->sB): the weights' levels (or conductances) with read noise, in the tile kernel's
 * layout, m->pair_shift slices paired. *bad: a paired packing met a level above g_level-1. */
static pf_status mvm_pack_b(pf_cl_device *dev, const mvm_call *m, size_t total, int *bad)
{
    const pf_dpe_args *a = m->a;
    pf_status st = PF_OK;
    if (m->read_noise && (st = pf_cl_normals_range(dev, m->sZW, a->seed, PF_STREAM_READ, a->call, 0, total,
                                                   a->cancel)) != PF_OK)
        return st;
    const float QG = (float)((a->HGS - a->LGS) / (a->g_level - 1));
    const float lgs = (float)(a->LGS / ((a->HGS - a->LGS) / (a->g_level - 1)));
    /* rows and 16-column groups; the rows in dimension 0 for the panel layout (pf_dpe_pack_w) */
    const size_t rows = m->sb * m->K, groups = (m->P + 15) / 16;
    pf_cl_range rw = {2, {dev->b_panel ? rows : groups, dev->b_panel ? groups : rows}, {0, 0}, NULL, 0, 0};
    rw.cancel = a->cancel;
    rw.pieces = total / PF_CL_PIECE_ELEMS + 1;
    cl_int flag = 0;
    pf_cl_set fs; /* a paired packing's level flag, read back (unpaired: sZW stands in, never written) */
    pf_cl_set_init(&fs, dev);
    cl_mem mflag = m->sZW;
    if (m->pair_shift) {
        mflag = pf_cl_set_out(&fs, &flag, sizeof flag, "flag");
        pf_cl_set_zero(&fs, mflag, sizeof flag, "flag");
    }
    PF_CL_SET_LAUNCH(&fs, K_PACK_W, &rw, ARG_MEM(m->wl), ARG_MEM(m->wc), ARG_MEM(m->sig), ARG_MEM(m->sB),
                     ARG_U64(m->K), ARG_U64(m->P), ARG_U64(m->Kp), ARG_U64(m->Pp), ARG_U64(m->n), ARG_U64(total),
                     ARG_I32(m->c.noise_w), ARG_I32(a->w_conductance != NULL), ARG_I32(a->read_sigma != NULL),
                     ARG_F32(QG), ARG_F32(lgs), ARG_U32(a->g_level - 1), ARG_MEM(m->sZW), ARG_I32(m->pair_shift),
                     ARG_MEM(mflag));
    st = m->pair_shift ? pf_cl_set_done(&fs) : pf_cl_set_close(&fs);
    *bad = flag != 0;
    return st;
}

/* The packed weights of this call in their scratch slot (SCR_BP paired, else SCR_B), packed
 * unless the slot's content tag says it holds them: resident weights without read noise or
 * programmed conductances are a function of the levels, n and the pairing alone. A paired
 * packing that meets a level above g_level-1 is marked unusable (bp_levels_ok) and the call
 * takes one slice per float (m->pair_shift = 0). Two slots, so that calls alternating
 * between noise-free and voltage-noise products keep both packings. */
static pf_status mvm_pack_slot(pf_cl_device *dev, mvm_call *m, size_t total)
{
    const int slot = m->pair_shift ? SCR_BP : SCR_B;
    m->sb = m->pair_shift ? (m->sw + 1) / 2 : m->sw;
    pf_status st = pf_cl_scratch_get(dev, slot, m->b_B / m->sw * m->sb, "packed weights", &m->sB);
    if (st != PF_OK)
        return st;
    pf_cl_scratch *sc = &dev->scratch[slot];
    const uint64_t content[3] = {m->resident && !m->c.noise_w ? m->resident->serial : 0, m->n,
                                 (uint64_t)m->pair_shift};
    if (content[0] == 0 || memcmp(sc->content, content, sizeof content) != 0) {
        /* the padding's positions: the crossbar size n with the padded sizes */
        const uint64_t sig[4] = {m->sb * 0x100000000ull + m->n, m->Kp, m->Pp, m->K * 0x100000000ull + m->P};
        int bad = 0;
        memset(sc->content, 0, sizeof sc->content); /* unknown until the packing succeeds */
        if ((st = pf_cl_scratch_zero(dev, slot, sig)) != PF_OK || (st = mvm_pack_b(dev, m, total, &bad)) != PF_OK)
            return st;
        memcpy(sc->content, content, sizeof content);
        if (m->pair_shift)
            dev->bp_levels_ok = !bad;
    }
    if (m->pair_shift && !dev->bp_levels_ok) {
        m->pair_shift = 0;
        return mvm_pack_slot(dev, m, total);
    }
    return PF_OK;
}

/* Packed weights B (with read noise) and their block scales CS. Without read noise or
 * programmed conductances B is a function of the levels and the layout alone: resident weights
 * packed by an earlier call are still in their slot unless another packing or a refill replaced
 * them (mvm_pack_slot), and are not packed again (as the CPU keeps its packed weights: no
 * per-call weight packing without read noise). */
static pf_status mvm_pack_weights(pf_cl_device *dev, mvm_call *m)
{
    const pf_dpe_args *a = m->a;
    pf_status st = mvm_pack_slot(dev, m, m->sw * m->K * m->P); /* b_zw checked the product */
    if (st != PF_OK)
        return st;
    const pf_cl_range rs = {2, {m->Pp, m->nb}, {0, 0}, NULL, 0, 0};
    return PF_CL_LAUNCH(dev, K_SCALES_W, &rs, ARG_MEM(m->ws), ARG_MEM(m->sCS), ARG_U64(m->P), ARG_U64(m->Pp),
                        ARG_U64(m->n), ARG_U64(a->w_qr), ARG_U64(a->w_qc), ARG_U64(a->w_gc));
}

#define MVM_MAX_ARGS 32 /* of the input pack and tile kernels */

/* The input pack kernel's arguments; *at: index of its (g0, rows) pair, set per chunk. */
static size_t mvm_pack_x_args(const mvm_call *m, pf_cl_arg *args, size_t *at)
{
    const pf_dpe_args *a = m->a;
    const pf_cl_arg common[] = {ARG_MEM(m->dac), ARG_MEM(m->sA), ARG_MEM(m->sRS), ARG_U64(m->R),
                                ARG_U64(m->K), ARG_U64(m->Kp), ARG_U64(m->Gc), ARG_U64(0), ARG_U64(0), ARG_U64(m->n),
                                ARG_U64(a->x_qr), ARG_U64(a->x_qc), ARG_U64(a->x_gr), ARG_U64(a->x_gc),
                                ARG_I32(m->c.noise_x), ARG_F32(a->vnoise), ARG_U64(m->sx)};
    const size_t nc = sizeof common / sizeof common[0];
    size_t n = 0;
    if (!m->im2col) { /* codes, x_scale, dac, A, RS, G, R, ... */
        args[n++] = ARG_MEM(m->x);
        args[n++] = ARG_MEM(m->xs);
        memcpy(args + n, common, 3 * sizeof *args);
        n += 3;
        args[n++] = ARG_U64(m->G);
        memcpy(args + n, common + 3, (nc - 3) * sizeof *args);
        n += nc - 3;
        *at = 2 + 3 + 1 + 4;
    } else {
        memcpy(args, common, nc * sizeof *args);
        n = nc;
        args[n++] = ARG_MEM(m->img);
        args[n++] = ARG_MEM(m->gmax);
        args[n++] = ARG_L16(pf_cl_im2col_geo(a->x_im2col));
        args[n++] = ARG_I32(a->x_method.total_bits);
        args[n++] = ARG_I32(a->x_bfp != 0);
        args[n++] = ARG_U64(pf_cl_slice_offsets(&a->x_method));
        *at = 7;
    }
    args[n++] = ARG_MEM(m->sZ);
    return n;
}

/* The tile kernel's arguments; (g0, rows) at 8 and 9, set per chunk. */
static size_t mvm_tile_args(const pf_cl_device *dev, const mvm_call *m, pf_cl_arg *args)
{
    const pf_dpe_args *a = m->a;
    const pf_cl_arg v[] = {ARG_MEM(m->sA), ARG_MEM(m->sB), ARG_MEM(m->sRS), ARG_MEM(m->sCS),
                           ARG_MEM(m->fp), ARG_MEM(m->tab), ARG_MEM(m->ti), ARG_MEM(m->out),
                           ARG_U64(0), ARG_U64(0), ARG_U64(m->Gc), ARG_U64(m->Kp), ARG_U64(m->Pp), ARG_U64(m->P),
                           ARG_I32(m->n), ARG_I32(m->nb), ARG_I32(a->sx), ARG_I32(a->sw), ARG_I32(m->c.any_table),
                           ARG_U64(m->R), ARG_I32(m->out_nphw), ARG_I32(m->pair_shift),
                           /* pf_dpe_mvm_tiled: the chunk kt and the local tiles lA [kt][TM*ly], lB [kt][TN*lx] */
                           ARG_I32(m->kt), ARG_LOCAL((size_t)m->kt * (size_t)dev->tm * dev->ly * sizeof(float)),
                           ARG_LOCAL((size_t)m->kt * (size_t)dev->tn * dev->lx * sizeof(float))};
    _Static_assert(sizeof v / sizeof v[0] <= MVM_MAX_ARGS, "mvm_run's argument arrays are too short");
    const size_t n = m->tiled ? sizeof v / sizeof v[0] : sizeof v / sizeof v[0] - 3;
    memcpy(args, v, n * sizeof *args);
    return n;
}

/* Rows [g0, g0 + rows) of the output: voltage noise, packed inputs, the tile kernel, and with a
 * split output the chunk's read-back. */
static pf_status mvm_chunk(pf_cl_device *dev, mvm_call *m, pf_cl_arg *xargs, size_t nx, size_t at, pf_cl_arg *margs,
                           size_t nm, size_t g0, size_t rows)
{
    const pf_dpe_args *a = m->a;
    const size_t SK = m->sx * m->K;
    pf_status st = PF_OK;
    xargs[at] = ARG_U64(g0);
    xargs[at + 1] = ARG_U64(rows);
    if (m->c.noise_x && (st = pf_cl_normals_range(dev, m->sZ, a->seed, PF_STREAM_VNOISE, a->call,
                                                  (m->nbase + g0) * SK, (m->nbase + g0 + rows) * SK,
                                                  a->cancel)) != PF_OK)
        return st;
    pf_cl_range rx = {2, {(m->K + 3) / 4, (rows + (size_t)dev->tm - 1) / (size_t)dev->tm}, {0, 0}, NULL, 0, 0};
    rx.cancel = a->cancel;
    rx.pieces = rows * SK / PF_CL_PIECE_ELEMS + 1;
    if ((st = pf_cl_launch(dev, m->im2col ? K_PACK_XI : K_PACK_X, xargs, nx, &rx)) != PF_OK)
        return st;
    pf_cl_set cs; /* this chunk's rows only, read back below (rows g0.. are contiguous in (N, R, P)) */
    pf_cl_set_init(&cs, dev);
    if (m->split_out)
        margs[7] = ARG_MEM(pf_cl_set_temp(&cs, m->b_out_chunk, "output chunk"));
    margs[8] = ARG_U64(m->split_out ? 0 : g0);
    margs[9] = ARG_U64(rows);
    /* the tiled kernel indexes by work-group (get_group_id ignores global offsets): never split it */
    const pf_cl_range rm = {2, {m->Pp / (size_t)dev->tn, m->Gc / (size_t)dev->tm}, {dev->lx, dev->ly}, a->cancel,
                            (uint64_t)rows * m->P * m->Kp * m->sx * m->sb / PF_CL_PIECE_MACS + 1, m->tiled};
    if (cs.st == PF_OK)
        pf_cl_set_status(&cs, pf_cl_launch(dev, m->tiled ? K_MVM_TILED : K_MVM, margs, nm, &rm));
    if (m->split_out && cs.st == PF_OK) {
        cl_int rc = clEnqueueReadBuffer(dev->queue, cs.b[0].mem, CL_TRUE, 0, rows * m->P * sizeof(float),
                                        a->out + g0 * m->P, 0, NULL, NULL);
        if (rc != CL_SUCCESS)
            pf_cl_set_status(&cs, pf_cl_fail_call(rc, "clEnqueueReadBuffer(output chunk)"));
        else
            pf_record_copy(PF_COPY_DEVICE_TO_HOST, rows * m->P * sizeof(float));
    }
    return pf_cl_set_close(&cs);
}

static pf_status mvm_run(pf_cl_device *dev, mvm_call *m)
{
    pf_status st = mvm_pack_weights(dev, m);
    if (st != PF_OK)
        return st;
    pf_cl_arg xargs[MVM_MAX_ARGS], margs[MVM_MAX_ARGS];
    size_t at = 0;
    const size_t nx = mvm_pack_x_args(m, xargs, &at), nm = mvm_tile_args(dev, m, margs);
    for (size_t g0 = 0; g0 < m->G && st == PF_OK; g0 += m->Gc)
        st = mvm_chunk(dev, m, xargs, nx, at, margs, nm, g0, m->G - g0 < m->Gc ? m->G - g0 : m->Gc);
    return st;
}

pf_status pf_cl_dpe_mvm(pf_cl_device *dev, const pf_dpe_args *a, const pf_cl_weights *w)
{
    pf_status st = mvm_validate(a, w);
    if (st != PF_OK)
        return st;
    if (a->batch == 0 || a->rows == 0 || a->cols == 0)
        return PF_OK;
    if (a->inner == 0) {
        for (int64_t e = 0; e < a->batch * a->rows * a->cols; e++)
            a->out[e] = 0.0f;
        return PF_OK;
    }
    if ((st = pf_cl_build(dev)) != PF_OK)
        return st;
    mvm_call m;
    memset(&m, 0, sizeof m);
    m.a = a;
    m.im2col = a->x_kind == PF_DPE_X_IM2COL;
    m.out_nphw = a->so_p == a->rows && a->so_r == 1 && a->so_n == a->rows * a->cols;
    m.tiled = pf_cl_mvm_uses_tiled(dev, a->n, &m.kt);
    if (m.tiled && m.kt < 1)
        return pf_fail(PF_EDEVICE, NULL, "dpe_mvm on OpenCL: the tiled MVM kernel was requested but %s has too little "
                       "local memory (%llu bytes) for its tiles", dev->info.name,
                       (unsigned long long)dev->info.local_mem_bytes);
    if ((st = mvm_sizes(dev, &m)) != PF_OK || (st = mvm_output_split(dev, &m)) != PF_OK ||
        (st = consts_init(a, &m.c)) != PF_OK)
        return st;
    m.pair_shift = mvm_pair_shift(dev, a, &m.c);
    pf_cl_set s;
    pf_cl_set_init(&s, dev);
    if (pf_cl_set_status(&s, mvm_buffers(dev, &m, w, &s)) == PF_OK)
        pf_cl_set_status(&s, mvm_run(dev, &m));
    st = pf_cl_set_done(&s);
    if (st == PF_OK && m.pair_shift)
        dev->paired_calls++;
    consts_free(&m.c);
    return st;
}
