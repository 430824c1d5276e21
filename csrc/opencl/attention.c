/* The attention context's kernels on the device (contract of core/attention.h): kernels/attention.cl. */
#include "opencl/internal.h"
#include "core/attention.h"

pf_status pf_cl_attn_update(pf_cl_device *dev, float *outgoing, int64_t d, const float *x, int64_t ldx,
                            const float *y, int64_t ldy, int64_t t, double rate)
{
    if (!(rate > 0.0) || t <= 0 || d <= 0)
        return PF_OK;
    if (d > ldx || d > ldy)
        return pf_fail(PF_EINVAL, "d", "attention update: D exceeds the rows' length");
    const int64_t n = t < PF_ATTN_SAMPLES ? t : PF_ATTN_SAMPLES, step = t / n > 1 ? t / n : 1;
    size_t dd, b_o, b_x, b_y, b_s, t1;
    if (pf_mul_size((size_t)d, (size_t)d, &dd) || pf_mul_size(dd, sizeof(float), &b_o) ||
        pf_mul_size((size_t)((n - 1) * step), (size_t)ldx, &t1) || pf_add_size(t1, (size_t)d, &t1) ||
        pf_mul_size(t1, sizeof(float), &b_x) || pf_mul_size((size_t)((n - 1) * step), (size_t)ldy, &t1) ||
        pf_add_size(t1, (size_t)d, &t1) || pf_mul_size(t1, sizeof(float), &b_y) ||
        pf_mul_size((size_t)n * sizeof(float), (size_t)d, &b_s))
        return pf_fail(PF_EOVERFLOW, "x", "attention update: array sizes overflow");
    pf_status st = pf_cl_build(dev);
    if (st != PF_OK)
        return st;
    pf_cl_set s;
    pf_cl_set_init(&s, dev);
    cl_mem m[2] = {pf_cl_set_in(&s, x, b_x, "x"), pf_cl_set_in(&s, y, b_y, "y")};
    cl_mem mo = pf_cl_set_inout(&s, outgoing, b_o, "outgoing");
    cl_mem samples[2] = {pf_cl_set_temp(&s, b_s, "attention sample"), pf_cl_set_temp(&s, b_s, "attention sample")};
    cl_mem norms[2] = {pf_cl_set_temp(&s, (size_t)d * sizeof(float), "attention sample"),
                       pf_cl_set_temp(&s, (size_t)d * sizeof(float), "attention sample")};
    const pf_cl_range rc = {1, {(size_t)d, 1}, {0, 0}, NULL, 0, 0};
    for (int side = 0; side < 2; side++)
        PF_CL_SET_LAUNCH(&s, K_ACENTRE, &rc, ARG_MEM(m[side]), ARG_U64(side ? ldy : ldx), ARG_U64(step), ARG_U64(n),
                         ARG_U64(d), ARG_MEM(samples[side]), ARG_MEM(norms[side]));
    const pf_cl_range ru = {2, {(size_t)d, (size_t)d}, {0, 0}, NULL, 0, 0};
    PF_CL_SET_LAUNCH(&s, K_AUPDATE, &ru, ARG_MEM(mo), ARG_MEM(samples[0]), ARG_MEM(samples[1]),
                     ARG_MEM(norms[0]), ARG_MEM(norms[1]), ARG_U64(n), ARG_U64(d), ARG_F32(1.0 - rate),
                     ARG_F32(rate));
    return pf_cl_set_done(&s);
}

pf_status pf_cl_attn_apply(pf_cl_device *dev, float *out, const float *x, const float *w, int64_t t, int64_t d,
                           double scale)
{
    size_t n, nbytes, b_w;
    if (t < 0 || d <= 0)
        return pf_fail(PF_EINVAL, "x", "attention apply: invalid sizes");
    if (pf_mul_size((size_t)t, (size_t)d, &n) || pf_mul_size(n, sizeof(float), &nbytes) ||
        pf_mul_size((size_t)d * sizeof(float), (size_t)d, &b_w))
        return pf_fail(PF_EOVERFLOW, "x", "attention apply: array sizes overflow");
    pf_status st;
    if (n == 0 || (st = pf_cl_build(dev)) != PF_OK)
        return n == 0 ? PF_OK : st;
    pf_cl_set s;
    pf_cl_set_init(&s, dev);
    cl_mem mx = pf_cl_set_in(&s, x, nbytes, "x");
    cl_mem mw = pf_cl_set_in(&s, w, b_w, "incoming");
    cl_mem mo = pf_cl_set_out(&s, out, nbytes, "out");
    /* the product goes to the output unless the output is x itself (then to a device buffer) */
    cl_mem prod = out == x ? pf_cl_set_temp(&s, nbytes, "product") : mo;
    const pf_cl_range rm = {2, {(size_t)d, (size_t)t}, {0, 0}, NULL, 0, 0};
    PF_CL_SET_LAUNCH(&s, K_AMATMUL, &rm, ARG_MEM(mx), ARG_MEM(mw), ARG_MEM(prod), ARG_U64(t), ARG_U64(d));
    if (out == x && s.st == PF_OK && s.b[2].shared == 0) { /* the output buffer must start as x */
        cl_int rc = clEnqueueCopyBuffer(dev->queue, mx, mo, 0, 0, nbytes, 0, NULL, NULL);
        if (rc != CL_SUCCESS)
            pf_cl_set_status(&s, pf_cl_fail_call(rc, "clEnqueueCopyBuffer(x)"));
    }
    /* x as the output's buffer when out is x: on zero-copy devices both wrap the same memory */
    const pf_cl_range re = pf_cl_range_1d(dev, n);
    PF_CL_SET_LAUNCH(&s, K_AEPI, &re, ARG_MEM(mo), ARG_MEM(out == x ? mo : mx), ARG_MEM(prod), ARG_U64(n),
                     ARG_F32(scale / (double)d));
    return pf_cl_set_done(&s);
}

pf_status pf_cl_attn_tanh(pf_cl_device *dev, float *out, const float *x, int64_t count)
{
    size_t bytes;
    if (count <= 0)
        return PF_OK;
    if (pf_mul_size((size_t)count, sizeof(float), &bytes))
        return pf_fail(PF_EOVERFLOW, "x", "attention tanh: array sizes overflow");
    pf_status st = pf_cl_build(dev);
    if (st != PF_OK)
        return st;
    pf_cl_set s;
    pf_cl_set_init(&s, dev);
    cl_mem mx = pf_cl_set_in(&s, x, bytes, "x");
    cl_mem mo = pf_cl_set_out(&s, out, bytes, "out");
    const pf_cl_range r = pf_cl_range_1d(dev, (size_t)count);
    PF_CL_SET_LAUNCH(&s, K_ATANH, &r, ARG_MEM(mx), ARG_MEM(mo), ARG_U64(count));
    return pf_cl_set_done(&s);
}
