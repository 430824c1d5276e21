/* Implicit im2col (PF_DPE_X_IM2COL) on the device: the granule max-abs and the dequantized
 * unfolded input of a convolution's input (contract of core/dpe.h). */
#include "opencl/internal.h"

cl_long16 pf_cl_im2col_geo(const pf_im2col *c)
{
    cl_long16 g; /* (C, H, W, kh, kw, sh, sw, ph, pw, dh, dw, Ho, Wo, 0, 0, 0) */
    memset(&g, 0, sizeof g);
    if (c) {
        const int64_t v[13] = {c->channels, c->height, c->width, c->kh, c->kw, c->sh, c->sw,
                               c->ph, c->pw, c->dh, c->dw, c->out_h, c->out_w};
        for (int i = 0; i < 13; i++)
            g.s[i] = v[i];
    }
    return g;
}

pf_status pf_cl_im2col_bytes(const pf_im2col *c, int64_t batch, size_t *bytes)
{
    if (batch < 0 || c->channels < 0 || c->height < 0 || c->width < 0 || c->kh < 1 || c->kw < 1 || c->sh < 1 ||
        c->sw < 1 || c->dh < 1 || c->dw < 1 || c->ph < 0 || c->pw < 0 || c->out_h < 0 || c->out_w < 0)
        return PF_EOVERFLOW;
    size_t d[5] = {(size_t)batch, (size_t)c->channels, (size_t)c->height, (size_t)c->width, sizeof(float)};
    size_t t;
    if (pf_mul_sizes(d, 5, bytes) || pf_mul_size((size_t)c->out_h, (size_t)c->out_w, &t) ||
        pf_mul_size(t, (size_t)c->channels * (size_t)c->kh, &t) || pf_mul_size(t, (size_t)c->kw, &t))
        return PF_EOVERFLOW;
    return PF_OK;
}

/* The geometry of both ops: image bytes, (R, K) of the unfolded matrix, granule grid (gr, gcn)
 * and its bytes, and the unfolded elements; PF_EOVERFLOW (recorded) when a size overflows. */
typedef struct {
    size_t b_img, ng, b_g, total, b_out;
    int64_t R, K, gr, gcn;
} im2col_geo;

static pf_status im2col_sizes(const pf_im2col *c, int64_t batch, int64_t qr, int64_t qc, im2col_geo *g)
{
    if (pf_cl_im2col_bytes(c, batch, &g->b_img) != PF_OK)
        return pf_fail(PF_EOVERFLOW, "input", "im2col: image sizes overflow");
    g->R = c->out_h * c->out_w, g->K = c->channels * c->kh * c->kw;
    g->gr = pf_ceil_div(g->R, qr), g->gcn = pf_ceil_div(g->K, qc);
    size_t d[3] = {(size_t)batch, (size_t)g->R, (size_t)g->K}, dg[3] = {(size_t)batch, (size_t)g->gr, (size_t)g->gcn};
    if (pf_mul_sizes(d, 3, &g->total) || pf_mul_size(g->total, sizeof(float), &g->b_out) ||
        pf_mul_sizes(dg, 3, &g->ng) || pf_mul_size(g->ng, sizeof(float), &g->b_g))
        return pf_fail(PF_EOVERFLOW, "input", "im2col: array sizes overflow");
    return PF_OK;
}

pf_status pf_cl_im2col_granule_max(pf_cl_device *dev, const pf_im2col *c, int64_t batch, int64_t qr, int64_t qc,
                                   float *gran_max)
{
    im2col_geo g;
    if (qr <= 0 || qc <= 0 || !c || !c->image)
        return pf_fail(PF_EINVAL, NULL, "im2col granule max: invalid arguments");
    pf_status st = im2col_sizes(c, batch, qr, qc, &g);
    if (st != PF_OK || g.ng == 0 || (st = pf_cl_build(dev)) != PF_OK)
        return st;
    cl_int bad = 0;
    pf_cl_set s;
    pf_cl_set_init(&s, dev);
    cl_mem mi = pf_cl_set_in(&s, c->image, g.b_img, "input");
    cl_mem mg = pf_cl_set_out(&s, gran_max, g.b_g, "gran_max");
    cl_mem mb = pf_cl_set_out(&s, &bad, sizeof bad, "flag");
    pf_cl_set_zero(&s, mb, sizeof bad, "flag");
    const pf_cl_range r = pf_cl_range_1d(dev, g.ng);
    PF_CL_SET_LAUNCH(&s, K_GMAX, &r, ARG_MEM(mi), ARG_L16(pf_cl_im2col_geo(c)), ARG_MEM(mg), ARG_MEM(mb),
                     ARG_U64(batch), ARG_U64(g.R), ARG_U64(g.K), ARG_U64(qr), ARG_U64(qc), ARG_U64(g.gr), ARG_U64(g.gcn));
    if ((st = pf_cl_set_done(&s)) != PF_OK)
        return st;
    if (bad)
        return pf_fail(PF_ENONFINITE, "input", "contains NaN or infinity");
    return PF_OK;
}

pf_status pf_cl_im2col_dequantize(pf_cl_device *dev, const pf_im2col *c, int64_t batch, int64_t qr, int64_t qc,
                                  const float *gran_max, int total_bits, int bfp, float *out)
{
    im2col_geo g;
    if (qr <= 0 || qc <= 0 || !c || !c->image || total_bits < 2 || total_bits > PF_MAX_TOTAL_BITS)
        return pf_fail(PF_EINVAL, NULL, "im2col dequantize: invalid arguments");
    pf_status st = im2col_sizes(c, batch, qr, qc, &g);
    if (st != PF_OK || g.total == 0 || (st = pf_cl_build(dev)) != PF_OK)
        return st;
    pf_cl_set s;
    pf_cl_set_init(&s, dev);
    cl_mem mi = pf_cl_set_in(&s, c->image, g.b_img, "input");
    cl_mem mg = pf_cl_set_in(&s, gran_max, g.b_g, "x_gran_max");
    cl_mem mo = pf_cl_set_out(&s, out, g.b_out, "out");
    const pf_cl_range r = pf_cl_range_1d(dev, g.total);
    PF_CL_SET_LAUNCH(&s, K_DEQUANT, &r, ARG_MEM(mi), ARG_L16(pf_cl_im2col_geo(c)), ARG_MEM(mg), ARG_MEM(mo),
                     ARG_U64(g.total), ARG_U64(g.R), ARG_U64(g.K), ARG_U64(qr), ARG_U64(qc), ARG_U64(g.gr), ARG_U64(g.gcn),
                     ARG_I32(total_bits), ARG_I32(bfp != 0));
    return pf_cl_set_done(&s);
}
