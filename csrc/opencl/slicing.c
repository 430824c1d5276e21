/* Bit-slice/quantize (contract of pf_slice_quantize, core/slicing.h) and weight programming
 * (pf_program_conductance) on the device: kernels/slicing.cl. */
#include "opencl/internal.h"

#include <math.h>

#define PF_CL_SLICE_SUB 1024 /* columns per max-pass work-item */
#define PF_CL_SQ_CHUNK 256  /* columns per quantize work-item (PF_SQ_CHUNK in slicing.cl) */

cl_ulong pf_cl_slice_offsets(const pf_slice_method *sm)
{
    cl_ulong offs = 0;
    for (int i = 0; i < sm->n_slices && i < 16; i++)
        offs |= (cl_ulong)(sm->offset[i] & 15) << (4 * i);
    return offs;
}

static pf_status slice_validate(const float *x, int64_t n, int64_t rows, int64_t cols, int64_t gran_rows,
                                int64_t gran_cols, const pf_slice_method *sm, int bfp, const uint8_t *codes,
                                const float *gran_max, const float *gran_scale, const int32_t *gran_exp, int g_level,
                                const uint8_t *levels)
{
    pf_status st = pf_validate_slice_args(n, rows, cols, gran_rows, gran_cols, sm, levels != NULL, g_level);
    if (st != PF_OK) /* the one contract (core/contract.h) */
        return st;
    if (!x || !codes || !gran_max || !gran_scale || (bfp && !gran_exp))
        return pf_fail(PF_EINVAL, NULL, "slice_quantize: missing buffers");
    return PF_OK;
}

pf_status pf_cl_slice_quantize(pf_cl_device *dev, const float *x, int64_t n, int64_t rows, int64_t cols,
                               int64_t gran_rows, int64_t gran_cols, const pf_slice_method *sm, int bfp,
                               uint8_t *codes, float *gran_max, float *gran_scale, int32_t *gran_exp, float *dequant,
                               int g_level, uint8_t *levels, pf_cancel *cancel)
{
    pf_status st = slice_validate(x, n, rows, cols, gran_rows, gran_cols, sm, bfp, codes, gran_max, gran_scale,
                                  gran_exp, g_level, levels);
    if (st != PF_OK)
        return st;
    const size_t NR = (size_t)n * (size_t)rows;
    const size_t gr = (size_t)pf_ceil_div(rows, gran_rows), gcn = (size_t)pf_ceil_div(cols, gran_cols);
    size_t total, b_x, b_codes, ng, b_g;
    if (pf_mul_size(NR, (size_t)cols, &total) || pf_mul_size(total, sizeof(float), &b_x) ||
        pf_mul_size(total, (size_t)sm->n_slices, &b_codes) || pf_mul_size((size_t)n * gr, gcn, &ng) ||
        pf_mul_size(ng, sizeof(float), &b_g))
        return pf_fail(PF_EOVERFLOW, "data", "slice_quantize: array sizes overflow");
    if ((st = pf_cl_build(dev)) != PF_OK)
        return st;
    /* each kernel in pieces of about PF_CL_PIECE_ELEMS elements, polling cancel between them (Ctrl-C);
     * a call of one piece runs whole: a split launch waits on the queue before and after each piece */
    const uint64_t pieces = total / PF_CL_PIECE_ELEMS + 1;
    pf_cancel *const kcancel = pieces > 1 ? cancel : NULL;
    cl_int bad = 0;
    pf_cl_set s;
    pf_cl_set_init(&s, dev);
    cl_mem mbad = pf_cl_set_out(&s, &bad, sizeof bad, "flag");
    cl_mem mx = pf_cl_set_in(&s, x, b_x, "data");
    cl_mem mgmax = pf_cl_set_out(&s, gran_max, b_g, "gran_max");
    cl_mem mscale = pf_cl_set_out(&s, gran_scale, b_g, "gran_scale");
    cl_mem mcodes = pf_cl_set_out(&s, codes, b_codes, "codes");
    cl_mem mexp = pf_cl_set_out(&s, gran_exp, b_g, "gran_exp"); /* absent outputs: placeholders */
    cl_mem mdq = pf_cl_set_out(&s, dequant, b_x, "dequant");
    cl_mem mlev = pf_cl_set_out(&s, levels, b_codes, "levels");
    pf_cl_set_zero(&s, mbad, sizeof bad, "flag");
    /* granules one row high and at most a chunk wide: the quantize kernel finds their max itself */
    const int row_max = (gran_rows == 1 || rows == 1) && pf_min64(gran_cols, cols) <= PF_CL_SQ_CHUNK;
    if (!row_max) {
        pf_cl_set_zero(&s, mgmax, b_g, "gran_max");
        const pf_cl_range rmax = {2, {NR, ((size_t)cols + PF_CL_SLICE_SUB - 1) / PF_CL_SLICE_SUB}, {0, 0}, kcancel,
                                  pieces, 0};
        PF_CL_SET_LAUNCH(&s, K_SMAX, &rmax, ARG_MEM(mx), ARG_MEM(mgmax), ARG_U64(NR), ARG_U64(rows), ARG_U64(cols),
                         ARG_U64(gran_rows), ARG_U64(gran_cols), ARG_U64(gr), ARG_U64(gcn),
                         ARG_U64(PF_CL_SLICE_SUB));
        const pf_cl_range rstats = pf_cl_range_1d(dev, ng); /* a few flops per granule: whole */
        PF_CL_SET_LAUNCH(&s, K_SSTATS, &rstats, ARG_MEM(mgmax), ARG_MEM(mscale), ARG_MEM(mexp), ARG_MEM(mbad),
                         ARG_U64(ng), ARG_I32(sm->total_bits), ARG_I32(bfp != 0));
    }
    /* chunks of one row in dimension 0: a work-group streams along a row (with rows there, a group
     * read 256 columns of each of 64 rows: the weight case ran 1.6x slower on PoCL) */
    const pf_cl_range rq = {2, {((size_t)cols + PF_CL_SQ_CHUNK - 1) / PF_CL_SQ_CHUNK, NR}, {0, 0}, kcancel, pieces, 0};
    PF_CL_SET_LAUNCH(&s, K_SQUANT, &rq, ARG_MEM(mx), ARG_MEM(mgmax), ARG_MEM(mcodes), ARG_MEM(mdq),
                     ARG_MEM(mlev), ARG_U64(total), ARG_U64(NR), ARG_U64(rows), ARG_U64(cols), ARG_U64(gran_rows),
                     ARG_U64(gran_cols), ARG_U64(gr), ARG_U64(gcn), ARG_I32(sm->total_bits), ARG_I32(bfp != 0),
                     ARG_U64(pf_cl_slice_offsets(sm)), ARG_I32(sm->n_slices), ARG_I32(dequant != NULL),
                     ARG_I32(levels ? g_level : 0), ARG_I32(row_max), ARG_MEM(mscale), ARG_MEM(mexp),
                     ARG_MEM(mbad));
    if ((st = pf_cl_set_done(&s)) != PF_OK)
        return st;
    if (bad)
        return pf_fail(PF_ENONFINITE, "data", "contains NaN or infinity; quantization needs finite "
                       "values");
    return PF_OK;
}

/* smallest float >= t */
static float float_ceil(double t)
{
    float f = (float)t;
    if ((double)f < t)
        f = nextafterf(f, INFINITY);
    return f;
}

pf_status pf_cl_program_conductance(pf_cl_device *dev, const uint8_t *levels, int64_t n_slices, int64_t rows,
                                    int64_t cols, const pf_program_params *p, float *conductance,
                                    pf_cancel *cancel)
{
    pf_status vst = pf_validate_program_params(p); /* the one contract (core/contract.h) */
    if (vst != PF_OK)
        return vst;
    if (n_slices < 0 || rows < 0 || cols < 0)
        return pf_fail(PF_EINVAL, NULL, "program_conductance: negative sizes");
    size_t dims[3] = {(size_t)n_slices, (size_t)rows, (size_t)cols}, total, b_g;
    if (pf_mul_sizes(dims, 3, &total) || pf_mul_size(total, sizeof(float), &b_g) || total > (size_t)INT64_MAX)
        return pf_fail(PF_EOVERFLOW, "levels", "program_conductance: array sizes overflow");
    if (total == 0)
        return PF_OK;
    if (!levels || !conductance)
        return pf_fail(PF_EINVAL, NULL, "program_conductance: missing arrays");
    pf_status st = pf_cl_build(dev);
    if (st != PF_OK)
        return st;
    pf_cl_set s;
    pf_cl_set_init(&s, dev);
    cl_mem ml = pf_cl_set_in(&s, levels, total, "levels");
    cl_mem mg = pf_cl_set_out(&s, conductance, b_g, "conductance");
    pf_cl_range r = pf_cl_range_1d(dev, (total + 3) / 4);
    r.cancel = cancel; /* in pieces, polling it between them (Ctrl-C) */
    r.pieces = total / PF_CL_PIECE_ELEMS + 1;
    PF_CL_SET_LAUNCH(&s, K_PCOND, &r, ARG_MEM(ml), ARG_MEM(mg), ARG_U64(total),
                     ARG_F32((p->hgs - p->lgs) / (double)(p->g_level - 1)), ARG_F32(p->lgs), ARG_F32(p->hgs),
                     ARG_F32(p->write_variation), ARG_I32(p->write_variation > 0),
                     ARG_I32(p->rate_stuck_hgs > 0 || p->rate_stuck_lgs > 0), ARG_F32(float_ceil(p->rate_stuck_hgs)),
                     ARG_F32(float_ceil(p->rate_stuck_hgs + p->rate_stuck_lgs)), ARG_U64(p->seed));
    return pf_cl_set_done(&s);
}
