/* The OpenCL backend's table (core/backend.h): the pf_cl_* ops of opencl.h, dev a pf_cl_device.
 * The device's calls are serialized by the caller (the Python handle's lock). */
#include "opencl/backend.h"
#include "opencl/opencl.h"

static pf_status cl_dpe_mvm(void *dev, const pf_dpe_args *a, const void *resident)
{
    return pf_cl_dpe_mvm((pf_cl_device *)dev, a, (const pf_cl_weights *)resident);
}

static pf_status cl_granule_max(void *dev, const pf_im2col *c, int64_t batch, int64_t qr, int64_t qc,
                                float *gran_max)
{
    return pf_cl_im2col_granule_max((pf_cl_device *)dev, c, batch, qr, qc, gran_max);
}

static pf_status cl_dequantize(void *dev, const pf_im2col *c, int64_t batch, int64_t qr, int64_t qc, int64_t gc,
                               const float *gran_max, const pf_slice_method *sm, int bfp, float *out)
{
    (void)gc; /* the device derives the granule grid from c and qc */
    return pf_cl_im2col_dequantize((pf_cl_device *)dev, c, batch, qr, qc, gran_max, sm->total_bits, bfp, out);
}

static pf_status cl_slice_quantize(void *dev, const float *x, int64_t n, int64_t rows, int64_t cols,
                                   int64_t gran_rows, int64_t gran_cols, const pf_slice_method *sm, int bfp,
                                   uint8_t *codes, float *gran_max, float *gran_scale, int32_t *gran_exp,
                                   float *dequant, int g_level, uint8_t *levels, pf_cancel *cancel)
{
    return pf_cl_slice_quantize((pf_cl_device *)dev, x, n, rows, cols, gran_rows, gran_cols, sm, bfp, codes,
                                gran_max, gran_scale, gran_exp, dequant, g_level, levels, cancel);
}

static pf_status cl_program_conductance(void *dev, const uint8_t *levels, int64_t n_slices, int64_t rows,
                                        int64_t cols, const pf_program_params *p, float *conductance,
                                        pf_cancel *cancel)
{
    return pf_cl_program_conductance((pf_cl_device *)dev, levels, n_slices, rows, cols, p, conductance, cancel);
}

static pf_status cl_normals(void *dev, uint64_t seed, uint32_t stream, uint32_t call, uint64_t idx0, int64_t count,
                            float *out)
{
    return pf_cl_normals((pf_cl_device *)dev, seed, stream, call, idx0, count, out);
}

static pf_status cl_attn_update(void *dev, pf_attn_ws *ws, float *outgoing, int64_t d, const float *x, int64_t ldx,
                                const float *y, int64_t ldy, int64_t t, double rate)
{
    (void)ws; /* device buffers, no host workspace */
    return pf_cl_attn_update((pf_cl_device *)dev, outgoing, d, x, ldx, y, ldy, t, rate);
}

static pf_status cl_attn_apply(void *dev, pf_attn_ws *ws, float *out, const float *x, const float *w, int64_t t,
                               int64_t d, double s)
{
    (void)ws;
    return pf_cl_attn_apply((pf_cl_device *)dev, out, x, w, t, d, s);
}

static pf_status cl_attn_tanh(void *dev, float *out, const float *x, int64_t count)
{
    return pf_cl_attn_tanh((pf_cl_device *)dev, out, x, count);
}

const pf_backend pf_backend_opencl = {
    .name = "opencl",
    .dpe_mvm = cl_dpe_mvm,
    .im2col_granule_max = cl_granule_max,
    .im2col_dequantize = cl_dequantize,
    .slice_quantize = cl_slice_quantize,
    .program_conductance = cl_program_conductance,
    .normals = cl_normals,
    .attn_update = cl_attn_update,
    .attn_update_step = NULL, /* no step kernel: update_outgoing_step runs on the CPU */
    .attn_apply = cl_attn_apply,
    .attn_tanh = cl_attn_tanh,
};
