/* The CPU backend's table (core/backend.h): thin wrappers of the C kernels; dev is unused (NULL). */
#include "cpu/backend.h"
#include "core/attention.h"
#include "cpu/noise.h"

static pf_status cpu_dpe_mvm(void *dev, const pf_dpe_args *a, const void *resident)
{
    (void)dev;
    (void)resident; /* the CPU reads the weights from a (or a->w_packed) */
    return pf_dpe_mvm(a);
}

static pf_status cpu_granule_max(void *dev, const pf_im2col *c, int64_t batch, int64_t qr, int64_t qc,
                                 float *gran_max)
{
    (void)dev;
    return pf_im2col_granule_max(c, batch, qr, qc, gran_max);
}

static pf_status cpu_dequantize(void *dev, const pf_im2col *c, int64_t batch, int64_t qr, int64_t qc, int64_t gc,
                                const float *gran_max, const pf_slice_method *sm, int bfp, float *out)
{
    (void)dev;
    return pf_im2col_dequantize(c, batch, qr, qc, gc, gran_max, sm, bfp, out);
}

static pf_status cpu_slice_quantize(void *dev, const float *x, int64_t n, int64_t rows, int64_t cols,
                                    int64_t gran_rows, int64_t gran_cols, const pf_slice_method *sm, int bfp,
                                    uint8_t *codes, float *gran_max, float *gran_scale, int32_t *gran_exp,
                                    float *dequant, int g_level, uint8_t *levels, pf_cancel *cancel)
{
    (void)dev;
    return pf_slice_quantize_cancel(x, n, rows, cols, gran_rows, gran_cols, sm, bfp, codes, gran_max, gran_scale,
                                    gran_exp, dequant, g_level, levels, cancel);
}

static pf_status cpu_program_conductance(void *dev, const uint8_t *levels, int64_t n_slices, int64_t rows,
                                         int64_t cols, const pf_program_params *p, float *conductance,
                                         pf_cancel *cancel)
{
    (void)dev;
    return pf_program_conductance_cancel(levels, n_slices, rows, cols, p, conductance, cancel);
}

static pf_status cpu_normals(void *dev, uint64_t seed, uint32_t stream, uint32_t call, uint64_t idx0, int64_t count,
                             float *out)
{
    (void)dev;
    pf_normals(seed, stream, call, idx0, count, out);
    return PF_OK;
}

static pf_status cpu_attn_update(void *dev, pf_attn_ws *ws, float *outgoing, int64_t d, const float *x, int64_t ldx,
                                 const float *y, int64_t ldy, int64_t t, double rate)
{
    (void)dev;
    return (pf_status)pf_attn_update(ws, outgoing, d, x, ldx, y, ldy, t, rate);
}

static pf_status cpu_attn_update_step(void *dev, pf_attn_ws *ws, float *outgoing, int64_t d, const float *x,
                                      const float *y, double rate)
{
    (void)dev;
    return (pf_status)pf_attn_update_step(ws, outgoing, d, x, y, rate);
}

static pf_status cpu_attn_apply(void *dev, pf_attn_ws *ws, float *out, const float *x, const float *w, int64_t t,
                                int64_t d, double s)
{
    (void)dev;
    return (pf_status)pf_attn_apply(ws, out, x, w, t, d, s);
}

static pf_status cpu_attn_tanh(void *dev, float *out, const float *x, int64_t count)
{
    (void)dev;
    if (count > 0)
        pf_attn_tanh(out, x, (size_t)count);
    return PF_OK;
}

const pf_backend pf_backend_cpu = {
    .name = "cpu",
    .dpe_mvm = cpu_dpe_mvm,
    .im2col_granule_max = cpu_granule_max,
    .im2col_dequantize = cpu_dequantize,
    .slice_quantize = cpu_slice_quantize,
    .program_conductance = cpu_program_conductance,
    .normals = cpu_normals,
    .attn_update = cpu_attn_update,
    .attn_update_step = cpu_attn_update_step,
    .attn_apply = cpu_attn_apply,
    .attn_tanh = cpu_attn_tanh,
};
