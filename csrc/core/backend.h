/* The backend table: the ops every compute backend provides, as plain C function pointers.
 *
 * One table per backend: pf_backend_cpu (csrc/cpu/backend.c) and pf_backend_opencl
 * (csrc/opencl/backend.c). The Python layer parses an op's arguments once and then calls
 * through the table of the device it was given (csrc/python/bind_device.h), so the two backends
 * take the same arguments, raise the same errors and, per docs/semantics.md, return the same
 * results. Each entry has the contract of the CPU function it names (core/dpe.h, core/slicing.h,
 * cpu/noise.h, core/attention.h); `dev` is the backend's device (NULL for the CPU; the OpenCL backend's
 * pf_cl_device, whose calls the caller serializes). Every entry returns a pf_status and records a
 * failure with pf_fail (core/pf_common.h). Core declares the table only: it includes no backend. */
#ifndef PF_BACKEND_H
#define PF_BACKEND_H

#include "core/attention.h"
#include "core/dpe.h"
#include "core/interrupt.h"
#include "core/pf_common.h"
#include "core/slicing.h"

#include <stdint.h>

typedef struct pf_backend {
    const char *name; /* "cpu", "opencl" */
    /* One fused MVM (pf_dpe_mvm). resident: weights the backend made resident for a (OpenCL:
     * a pf_cl_weights), or NULL to read them from a (the CPU always reads a, including
     * a->w_packed). a->cancel is polled where the backend can stop (PF_EINTR). */
    pf_status (*dpe_mvm)(void *dev, const pf_dpe_args *a, const void *resident);
    /* Implicit im2col: granule max-abs (pf_im2col_granule_max; PF_ENONFINITE naming 'input')
     * before the MVM, and the dequantized unfolded input (pf_im2col_dequantize; gc =
     * ceil(K / qc)) after it. */
    pf_status (*im2col_granule_max)(void *dev, const pf_im2col *c, int64_t batch, int64_t qr, int64_t qc,
                                    float *gran_max);
    pf_status (*im2col_dequantize)(void *dev, const pf_im2col *c, int64_t batch, int64_t qr, int64_t qc,
                                   int64_t gc, const float *gran_max, const pf_slice_method *sm, int bfp, float *out);
    /* pf_slice_quantize_cancel (cancel may be NULL; a backend may also ignore it). */
    pf_status (*slice_quantize)(void *dev, const float *x, int64_t n, int64_t rows, int64_t cols,
                                int64_t gran_rows, int64_t gran_cols, const pf_slice_method *sm, int bfp,
                                uint8_t *codes, float *gran_max, float *gran_scale, int32_t *gran_exp,
                                float *dequant, int g_level, uint8_t *levels, pf_cancel *cancel);
    /* pf_program_conductance_cancel (cancel may be NULL) */
    pf_status (*program_conductance)(void *dev, const uint8_t *levels, int64_t n_slices, int64_t rows,
                                     int64_t cols, const pf_program_params *p, float *conductance,
                                     pf_cancel *cancel);
    /* out[e] = standard normal of element idx0 + e of a Philox stream (cpu/noise.h pf_normals) */
    pf_status (*normals)(void *dev, uint64_t seed, uint32_t stream, uint32_t call, uint64_t idx0, int64_t count,
                         float *out);
    /* The attention context's kernels (core/attention.h). ws: the CPU's workspace (the OpenCL
     * backend needs none and ignores it). attn_update_step is NULL where the backend has no
     * step kernel (OpenCL: the binding raises NotImplementedError naming 'device'). */
    pf_status (*attn_update)(void *dev, pf_attn_ws *ws, float *outgoing, int64_t d, const float *x, int64_t ldx,
                             const float *y, int64_t ldy, int64_t t, double rate);
    pf_status (*attn_update_step)(void *dev, pf_attn_ws *ws, float *outgoing, int64_t d, const float *x,
                                  const float *y, double rate);
    pf_status (*attn_apply)(void *dev, pf_attn_ws *ws, float *out, const float *x, const float *w, int64_t t,
                            int64_t d, double s);
    /* the update's float32 tanh, elementwise, non-finite inputs as 0 (pf_attn_tanh) */
    pf_status (*attn_tanh)(void *dev, float *out, const float *x, int64_t count);
} pf_backend;

#endif
