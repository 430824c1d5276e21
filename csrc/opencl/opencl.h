/* OpenCL backend runtime (plain C, no Python): platforms and devices, one
 * context and in-order queue per opened device, the program built from the
 * embedded kernels (kernels/ *.cl) at first use, buffers, resident weights, and the
 * OpenCL version of each op (same contract as the CPU op, see dpe.h).
 *
 * Memory. On a device that reads and writes host memory in place (checked at
 * build time by a probe kernel on a CL_MEM_USE_HOST_PTR buffer: PoCL, and
 * integrated GPUs reporting CL_DEVICE_HOST_UNIFIED_MEMORY) every operand is
 * wrapped with CL_MEM_USE_HOST_PTR and outputs are synchronized with
 * map/unmap: NumPy, torch and the device share one buffer, zero copies. Else
 * (discrete devices, or zero copy turned off) operands are transferred
 * explicitly and every transfer is counted with pf_record_copy; programmed
 * weights can be made resident (pf_cl_weights) so they cross the bus once.
 * Scratch (packed operands) on zero-copy devices is pf_alloc'd host memory,
 * so pyfastpim.memory accounts for it.
 *
 * Errors. Every function returns a pf_status and, on failure, records it
 * with pf_fail (core/error.c): device errors name the failing OpenCL call and
 * the CL error name and code.
 * A device is not thread-safe: callers serialize calls per device. */
#ifndef PF_OPENCL_H
#define PF_OPENCL_H

#include "core/dpe.h"
#include "core/slicing.h"
#include "core/pf_common.h"

#include <stddef.h>
#include <stdint.h>

typedef struct {
    int platform, device;                 /* indices in loader order */
    char platform_name[128], platform_version[128];
    char name[128], vendor[128], version[128], driver[64];
    const char *type;                     /* "cpu", "gpu", "accelerator", "custom" or "other" */
    int host_unified_memory;              /* CL_DEVICE_HOST_UNIFIED_MEMORY */
    uint64_t global_mem_bytes, max_alloc_bytes;
    unsigned compute_units;
    size_t max_work_group_size;
    uint64_t local_mem_bytes;             /* CL_DEVICE_LOCAL_MEM_SIZE */
    int local_mem_dedicated;              /* CL_DEVICE_LOCAL_MEM_TYPE == CL_LOCAL (GPUs) */
    /* CL_DEVICE_SINGLE_FP_CONFIG: bit-identity with the CPU needs both (float
     * subnormals, e.g. tiny BFP scales; correctly rounded division and sqrt) */
    int fp32_denormals, fp32_correct_divsqrt;
} pf_cl_device_info;

/* Name of an OpenCL error code, e.g. "CL_OUT_OF_RESOURCES". */
const char *pf_cl_error_name(int code);

/* Every device of every platform. *count = *nplatforms = 0 (PF_OK) when the
 * ICD loader reports no platform. *out is pf_alloc'd (NULL when empty). */
pf_status pf_cl_list(pf_cl_device_info **out, int *count, int *nplatforms);
/* clGetPlatformIDs calls made by this process so far (every OpenCL path starts there; tests check
 * that a forked child makes none). */
uint64_t pf_cl_platform_queries(void);
/* pid of the process that first called into the OpenCL runtime (every path starts with clGetPlatformIDs),
 * 0 before: a process with another pid was forked from it after that, and must make no OpenCL call. */
long pf_cl_runtime_owner(void);

typedef struct pf_cl_device pf_cl_device;

/* Opens device `device` of platform `platform` (indices as in pf_cl_list).
 * allow_zero_copy = 0 forces explicit, counted transfers even on host-memory
 * devices (tests use it to exercise the discrete-device path on PoCL). */
pf_status pf_cl_open(int platform, int device, int allow_zero_copy, pf_cl_device **out);
void pf_cl_close(pf_cl_device *dev);
const pf_cl_device_info *pf_cl_info(const pf_cl_device *dev);

/* Builds the program (idempotent; the first call per device compiles). */
pf_status pf_cl_build(pf_cl_device *dev);
/* 1 when operands are shared in place (known after pf_cl_build). */
int pf_cl_zero_copy(const pf_cl_device *dev);
/* Tile sizes and work-group shape of the MVM kernel (after pf_cl_build). */
void pf_cl_tile(const pf_cl_device *dev, int *tm, int *tn, size_t *lx, size_t *ly);
/* The fused MVM's tile kernel: pf_dpe_mvm (each work-item reads its operands
 * from global memory) or pf_dpe_mvm_tiled (work-groups stage them in local
 * memory; bit-identical results). Mode PF_CL_MVM_AUTO (the default, or
 * PYFASTPIM_CL_MVM=auto|tiled|untiled at open) picks the tiled kernel on GPUs
 * and accelerators with dedicated local memory big enough for the tiles. */
enum { PF_CL_MVM_AUTO = 0, PF_CL_MVM_TILED = 1, PF_CL_MVM_UNTILED = 2 };
/* Mode from its name ("auto", "tiled", "untiled"); -1 for anything else. */
int pf_cl_mvm_mode_parse(const char *name);
const char *pf_cl_mvm_mode_name(int mode);
void pf_cl_set_mvm_mode(pf_cl_device *dev, int mode);
int pf_cl_get_mvm_mode(const pf_cl_device *dev);
/* After pf_cl_build: whether a product with crossbar size n runs the tiled
 * kernel under the current mode (*kt: crossbar rows per local-memory chunk),
 * and the largest chunk the device's local memory takes (0: tiling impossible). */
int pf_cl_mvm_uses_tiled(const pf_cl_device *dev, int64_t n, int *kt);
int pf_cl_mvm_kt_max(const pf_cl_device *dev);
/* Two weight slices per packed float in noise-free products whose crossbar sums are small
 * enough (exact, bit-identical outputs, half the multiply-adds; csrc/opencl/dpe.c
 * mvm_pair_shift). On by default; off: one slice per float, as before. paired_calls: the
 * MVM calls that paired slices. */
void pf_cl_set_pair_slices(pf_cl_device *dev, int on);
int pf_cl_get_pair_slices(const pf_cl_device *dev);
uint64_t pf_cl_paired_calls(const pf_cl_device *dev);
/* Kernels run in pieces so that Ctrl-C can stop them (the first of a fixed size, the next ones
 * sized from the last one's rate to take about `seconds`, at most PF_CL_PIECE_GROW times larger
 * or smaller than the last; launcher.c enqueue_split): the time a piece aims at, positive. */
void pf_cl_set_piece_time(pf_cl_device *dev, double seconds);
double pf_cl_get_piece_time(const pf_cl_device *dev);
/* Launches of kernel i (as pf_cl_kernel_name numbers them) on this device so far, a kernel run in
 * pieces counting each piece. */
uint64_t pf_cl_launches(const pf_cl_device *dev, int i);
/* CL_KERNEL_PREFERRED_WORK_GROUP_SIZE_MULTIPLE of the MVM kernel (the warp or wavefront width on GPUs) */
size_t pf_cl_mvm_wg_multiple(const pf_cl_device *dev);
/* Releases the cached scratch buffers (they are kept between calls). */
void pf_cl_release_scratch(pf_cl_device *dev);
/* Bytes of scratch currently held. */
size_t pf_cl_scratch_bytes(const pf_cl_device *dev);

/* Resident programmed weights: the levels, conductances and scales of a
 * pf_dpe_args, on the device. Valid for calls whose weight pointers and
 * shapes are the ones it was made from (checked); the host arrays must stay
 * alive (on zero-copy devices the buffers are the host memory). */
typedef struct pf_cl_weights pf_cl_weights;
pf_status pf_cl_weights_create(pf_cl_device *dev, const pf_dpe_args *a, pf_cl_weights **out);
void pf_cl_weights_free(pf_cl_weights *w);
size_t pf_cl_weights_bytes(const pf_cl_weights *w);
/* 1 when w holds exactly a's weights (same pointers and shapes). */
int pf_cl_weights_match(const pf_cl_weights *w, const pf_dpe_args *a);

/* One fused MVM call (contract of pf_dpe_mvm; out is contiguous (N, R, P), or
 * (N, P, R) as a convolution writes it; x_kind codes or implicit im2col).
 * w: resident weights for a, or NULL to transfer them for this call only. */
pf_status pf_cl_dpe_mvm(pf_cl_device *dev, const pf_dpe_args *a, const pf_cl_weights *w);

/* Implicit im2col (PF_DPE_X_IM2COL), the contract of dpe.h on the device:
 * pf_cl_im2col_granule_max fills gran_max (N, ceil(R/qr), ceil(K/qc)) (PF_EINVAL
 * naming 'input' when it holds NaN or infinity); pf_cl_dpe_mvm then takes
 * x_kind = PF_DPE_X_IM2COL with that gran_max, and pf_cl_im2col_dequantize
 * writes the dequantized unfolded input (N, R, K). */
pf_status pf_cl_im2col_granule_max(pf_cl_device *dev, const pf_im2col *c, int64_t batch, int64_t qr, int64_t qc,
                                   float *gran_max);
pf_status pf_cl_im2col_dequantize(pf_cl_device *dev, const pf_im2col *c, int64_t batch, int64_t qr, int64_t qc,
                                  const float *gran_max, int total_bits, int bfp, float *out);

/* Bit-slice/quantize (contract of pf_slice_quantize in slicing.h, same
 * outputs bit for bit) and weight programming (pf_program_conductance); both
 * run in pieces polling cancel (may be NULL) between them: PF_EINTR when set. */
pf_status pf_cl_slice_quantize(pf_cl_device *dev, const float *x, int64_t n, int64_t rows, int64_t cols,
                               int64_t gran_rows, int64_t gran_cols, const pf_slice_method *sm, int bfp,
                               uint8_t *codes, float *gran_max, float *gran_scale, int32_t *gran_exp, float *dequant,
                               int g_level, uint8_t *levels, pf_cancel *cancel);
pf_status pf_cl_program_conductance(pf_cl_device *dev, const uint8_t *levels, int64_t n_slices, int64_t rows,
                                    int64_t cols, const pf_program_params *p, float *conductance,
                                    pf_cancel *cancel);

/* Attention context (contract of attention.h): pf_attn_update (outgoing d x d
 * updated in place) and pf_attn_apply (out may be x itself, else must not
 * overlap x or w); bit-identical to the CPU, the products' fma chains in k
 * order included (cpu/attention_gemm.h). pf_cl_attn_tanh:
 * the update's tanh, elementwise (non-finite inputs as 0). */
pf_status pf_cl_attn_update(pf_cl_device *dev, float *outgoing, int64_t d, const float *x, int64_t ldx,
                            const float *y, int64_t ldy, int64_t t, double rate);
pf_status pf_cl_attn_apply(pf_cl_device *dev, float *out, const float *x, const float *w, int64_t t, int64_t d,
                           double s);
pf_status pf_cl_attn_tanh(pf_cl_device *dev, float *out, const float *x, int64_t count);

/* out[e] = standard normal of element idx0 + e of a Philox stream, on the device. */
pf_status pf_cl_normals(pf_cl_device *dev, uint64_t seed, uint32_t stream, uint32_t call, uint64_t idx0,
                        int64_t count, float *out);

/* The kernel table (csrc/opencl/internal.h), for tests: the number of kernels, the name and
 * declared argument count of kernel i, and the count the built program reports for it. */
int pf_cl_kernel_count(void);
const char *pf_cl_kernel_name(int i);
unsigned pf_cl_kernel_declared_args(int i);
pf_status pf_cl_kernel_program_args(const pf_cl_device *dev, int i, unsigned *nargs);
/* The build-time check: PF_EDEVICE unless `declared` is what the program reports for kernel i. */
pf_status pf_cl_kernel_check(const pf_cl_device *dev, int i, unsigned declared);

#endif
