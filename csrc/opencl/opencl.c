/* OpenCL backend runtime: see opencl.h. */
#define CL_TARGET_OPENCL_VERSION 120
#include "opencl/opencl.h"
#include "core/attention.h"
#include "core/contract.h"
#include "core/memory.h"
#include "pf_cl_sources.h"

#include "opencl/cl_loader.h" /* <CL/cl.h>, with the library loaded at run time */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PF_CL_PLATFORM_NOT_FOUND_KHR (-1001)
/* Packed inputs of one row chunk are capped so a large batch streams through
 * a bounded scratch buffer, as on the CPU path. */
#define PF_CL_A_CHUNK_BYTES ((size_t)64 << 20)
/* Work per enqueued piece when a Ctrl-C may have to stop a kernel: ~0.05-0.1 s
 * on a 2-core CPU device, far less on a GPU. */
#define PF_CL_PIECE_MACS ((uint64_t)1 << 28) /* MVM multiply-adds */
#define PF_CL_PIECE_ELEMS ((uint64_t)1 << 21) /* packed elements (noise draws, DAC/conductance conversions) */
#define PF_CL_PACK_LOCAL 64 /* work-group size of the pack kernels (at most; one noise group per item) */

enum { SCR_A, SCR_RS, SCR_B, SCR_CS, SCR_Z, SCR_ZW, SCR_COUNT };

/* Every kernel of the program, created at build time. */
enum { K_PACK_X, K_PACK_XI, K_PACK_W, K_SCALES_W, K_MVM, K_NORMALS, K_GMAX, K_DEQUANT, K_SMAX, K_SSTATS, K_SQUANT, K_PCOND, K_NRANGE, K_ATANH, K_ACENTRE, K_AUPDATE, K_AMATMUL,
       K_AEPI, K_MVM_TILED, K_COUNT };
static const char *const kernel_names[K_COUNT] = {
    "pf_dpe_pack_x", "pf_dpe_pack_x_im2col", "pf_dpe_pack_w", "pf_dpe_scales_w", "pf_dpe_mvm", "pf_normals", "pf_im2col_gmax", "pf_im2col_dequant", "pf_slice_max", "pf_slice_stats", "pf_slice_quant", "pf_program_cond",
    "pf_normals_range", "pf_attn_tanh", "pf_attn_centre", "pf_attn_update", "pf_attn_matmul", "pf_attn_epilogue",
    "pf_dpe_mvm_tiled",
};

typedef struct {
    cl_mem mem;
    void *host; /* pf_alloc'd backing store on zero-copy devices */
    size_t bytes;
    int zeroed;        /* zero-filled for the geometry in sig (padding stays zero) */
    uint64_t sig[4];
} pf_cl_scratch;

struct pf_cl_device {
    pf_cl_device_info info;
    cl_platform_id platform;
    cl_device_id device;
    cl_context ctx;
    cl_command_queue queue;
    cl_program program;
    cl_kernel k[K_COUNT];
    size_t pack_local;
    int profile;          /* PYFASTPIM_CL_PROFILE=1: kernel times on stderr */
    int built;
    int allow_zero_copy;
    int zero_copy;        /* operands shared in place (probe passed) */
    size_t zc_align;      /* host pointer alignment the sharing needs */
    int correct_divsqrt;  /* -cl-fp32-correctly-rounded-divide-sqrt supported */
    int fp64;             /* cl_khr_fp64 (libm-equivalent expf on row tails) */
    int tm, tn, b_panel;
    size_t lx, ly;
    /* MVM kernel choice (PF_CL_MVM_*): pf_dpe_mvm_tiled where it pays
     * (auto: GPUs and accelerators with dedicated local memory) */
    int mvm_mode;
    int kt_max;           /* crossbar rows per local-memory chunk (0: the tiles do not fit) */
    size_t wg_multiple;   /* CL_KERNEL_PREFERRED_WORK_GROUP_SIZE_MULTIPLE of pf_dpe_mvm (warp/wavefront) */
    pf_cl_scratch scratch[SCR_COUNT];
};

struct pf_cl_weights {
    pf_cl_device *dev;
    cl_mem levels, cond, scale;
    const void *p_levels, *p_cond, *p_scale;
    int64_t sw, inner, cols, w_gr, w_gc;
    size_t bytes;
};

/* ---- errors ---- */

const char *pf_cl_error_name(int code)
{
    switch (code) {
#define E(x) case x: return #x;
    E(CL_SUCCESS) E(CL_DEVICE_NOT_FOUND) E(CL_DEVICE_NOT_AVAILABLE) E(CL_COMPILER_NOT_AVAILABLE)
    E(CL_MEM_OBJECT_ALLOCATION_FAILURE) E(CL_OUT_OF_RESOURCES) E(CL_OUT_OF_HOST_MEMORY)
    E(CL_PROFILING_INFO_NOT_AVAILABLE) E(CL_MEM_COPY_OVERLAP) E(CL_IMAGE_FORMAT_MISMATCH)
    E(CL_IMAGE_FORMAT_NOT_SUPPORTED) E(CL_BUILD_PROGRAM_FAILURE) E(CL_MAP_FAILURE)
    E(CL_MISALIGNED_SUB_BUFFER_OFFSET) E(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST)
    E(CL_COMPILE_PROGRAM_FAILURE) E(CL_LINKER_NOT_AVAILABLE) E(CL_LINK_PROGRAM_FAILURE)
    E(CL_DEVICE_PARTITION_FAILED) E(CL_KERNEL_ARG_INFO_NOT_AVAILABLE)
    E(CL_INVALID_VALUE) E(CL_INVALID_DEVICE_TYPE) E(CL_INVALID_PLATFORM) E(CL_INVALID_DEVICE)
    E(CL_INVALID_CONTEXT) E(CL_INVALID_QUEUE_PROPERTIES) E(CL_INVALID_COMMAND_QUEUE) E(CL_INVALID_HOST_PTR)
    E(CL_INVALID_MEM_OBJECT) E(CL_INVALID_IMAGE_FORMAT_DESCRIPTOR) E(CL_INVALID_IMAGE_SIZE) E(CL_INVALID_SAMPLER)
    E(CL_INVALID_BINARY) E(CL_INVALID_BUILD_OPTIONS) E(CL_INVALID_PROGRAM) E(CL_INVALID_PROGRAM_EXECUTABLE)
    E(CL_INVALID_KERNEL_NAME) E(CL_INVALID_KERNEL_DEFINITION) E(CL_INVALID_KERNEL) E(CL_INVALID_ARG_INDEX)
    E(CL_INVALID_ARG_VALUE) E(CL_INVALID_ARG_SIZE) E(CL_INVALID_KERNEL_ARGS) E(CL_INVALID_WORK_DIMENSION)
    E(CL_INVALID_WORK_GROUP_SIZE) E(CL_INVALID_WORK_ITEM_SIZE) E(CL_INVALID_GLOBAL_OFFSET)
    E(CL_INVALID_EVENT_WAIT_LIST) E(CL_INVALID_EVENT) E(CL_INVALID_OPERATION) E(CL_INVALID_GL_OBJECT)
    E(CL_INVALID_BUFFER_SIZE) E(CL_INVALID_MIP_LEVEL) E(CL_INVALID_GLOBAL_WORK_SIZE) E(CL_INVALID_PROPERTY)
    E(CL_INVALID_IMAGE_DESCRIPTOR) E(CL_INVALID_COMPILER_OPTIONS) E(CL_INVALID_LINKER_OPTIONS)
    E(CL_INVALID_DEVICE_PARTITION_COUNT)
#undef E
    case PF_CL_PLATFORM_NOT_FOUND_KHR: return "CL_PLATFORM_NOT_FOUND_KHR";
    default: return "unknown OpenCL error";
    }
}

static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || !errlen)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* Checks an OpenCL status: on failure writes "<what>: <CL name> (<code>)". */
#define CL_CHECK(call, what)                                                                                   \
    do {                                                                                                       \
        cl_int rc_ = (call);                                                                                   \
        if (rc_ != CL_SUCCESS) {                                                                               \
            set_err(err, errlen, "%s: %s (%d)", (what), pf_cl_error_name(rc_), (int)rc_);                     \
            st = PF_EDEVICE;                                                                                   \
            goto fail;                                                                                         \
        }                                                                                                      \
    } while (0)

/* ---- discovery ---- */

static pf_status get_platforms(cl_platform_id **out, cl_uint *n, char *err, size_t errlen)
{
    pf_status st = PF_OK;
    *out = NULL;
    *n = 0;
    cl_uint np = 0;
    cl_int rc = clGetPlatformIDs(0, NULL, &np);
    if (rc == PF_CL_PLATFORM_NOT_FOUND_KHR || (rc == CL_SUCCESS && np == 0))
        return PF_OK;
    CL_CHECK(rc, "clGetPlatformIDs");
    *out = pf_alloc(sizeof(cl_platform_id) * np);
    if (!*out)
        return PF_ENOMEM;
    CL_CHECK(clGetPlatformIDs(np, *out, NULL), "clGetPlatformIDs");
    *n = np;
    return PF_OK;
fail:
    pf_free(*out);
    *out = NULL;
    return st;
}

static pf_status get_devices(cl_platform_id p, cl_device_id **out, cl_uint *n, char *err, size_t errlen)
{
    pf_status st = PF_OK;
    *out = NULL;
    *n = 0;
    cl_uint nd = 0;
    cl_int rc = clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 0, NULL, &nd);
    if (rc == CL_DEVICE_NOT_FOUND || (rc == CL_SUCCESS && nd == 0))
        return PF_OK;
    CL_CHECK(rc, "clGetDeviceIDs");
    *out = pf_alloc(sizeof(cl_device_id) * nd);
    if (!*out)
        return PF_ENOMEM;
    CL_CHECK(clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, nd, *out, NULL), "clGetDeviceIDs");
    *n = nd;
    return PF_OK;
fail:
    pf_free(*out);
    *out = NULL;
    return st;
}

static void info_str(cl_device_id d, cl_device_info what, char *buf, size_t len)
{
    buf[0] = 0;
    if (clGetDeviceInfo(d, what, len - 1, buf, NULL) != CL_SUCCESS)
        snprintf(buf, len, "?");
    buf[len - 1] = 0;
}

static pf_status fill_info(cl_platform_id p, cl_device_id d, int pi, int di, pf_cl_device_info *inf, char *err,
                           size_t errlen)
{
    pf_status st = PF_OK;
    memset(inf, 0, sizeof *inf);
    inf->platform = pi;
    inf->device = di;
    if (clGetPlatformInfo(p, CL_PLATFORM_NAME, sizeof inf->platform_name - 1, inf->platform_name, NULL) != CL_SUCCESS)
        snprintf(inf->platform_name, sizeof inf->platform_name, "?");
    if (clGetPlatformInfo(p, CL_PLATFORM_VERSION, sizeof inf->platform_version - 1, inf->platform_version, NULL) !=
        CL_SUCCESS)
        snprintf(inf->platform_version, sizeof inf->platform_version, "?");
    info_str(d, CL_DEVICE_NAME, inf->name, sizeof inf->name);
    info_str(d, CL_DEVICE_VENDOR, inf->vendor, sizeof inf->vendor);
    info_str(d, CL_DEVICE_VERSION, inf->version, sizeof inf->version);
    info_str(d, CL_DRIVER_VERSION, inf->driver, sizeof inf->driver);
    cl_device_type t = 0;
    CL_CHECK(clGetDeviceInfo(d, CL_DEVICE_TYPE, sizeof t, &t, NULL), "clGetDeviceInfo(CL_DEVICE_TYPE)");
    inf->type = (t & CL_DEVICE_TYPE_GPU) ? "gpu" : (t & CL_DEVICE_TYPE_CPU) ? "cpu"
              : (t & CL_DEVICE_TYPE_ACCELERATOR) ? "accelerator" : (t & CL_DEVICE_TYPE_CUSTOM) ? "custom" : "other";
    cl_bool unified = CL_FALSE;
    /* deprecated in OpenCL 2.0 but answered by every runtime we know; a
     * refusal just means "not unified" (the probe decides zero copy anyway) */
    if (clGetDeviceInfo(d, CL_DEVICE_HOST_UNIFIED_MEMORY, sizeof unified, &unified, NULL) != CL_SUCCESS)
        unified = CL_FALSE;
    inf->host_unified_memory = unified == CL_TRUE;
    cl_ulong gm = 0, ma = 0;
    cl_uint cu = 0;
    size_t wg = 0;
    CL_CHECK(clGetDeviceInfo(d, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof gm, &gm, NULL), "clGetDeviceInfo(GLOBAL_MEM_SIZE)");
    CL_CHECK(clGetDeviceInfo(d, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof ma, &ma, NULL),
             "clGetDeviceInfo(MAX_MEM_ALLOC_SIZE)");
    CL_CHECK(clGetDeviceInfo(d, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof cu, &cu, NULL),
             "clGetDeviceInfo(MAX_COMPUTE_UNITS)");
    CL_CHECK(clGetDeviceInfo(d, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof wg, &wg, NULL),
             "clGetDeviceInfo(MAX_WORK_GROUP_SIZE)");
    inf->global_mem_bytes = gm;
    inf->max_alloc_bytes = ma;
    inf->compute_units = cu;
    inf->max_work_group_size = wg;
    cl_ulong lm = 0;
    cl_device_local_mem_type lt = CL_GLOBAL;
    cl_device_fp_config fp = 0;
    CL_CHECK(clGetDeviceInfo(d, CL_DEVICE_LOCAL_MEM_SIZE, sizeof lm, &lm, NULL), "clGetDeviceInfo(LOCAL_MEM_SIZE)");
    if (clGetDeviceInfo(d, CL_DEVICE_LOCAL_MEM_TYPE, sizeof lt, &lt, NULL) != CL_SUCCESS)
        lt = CL_GLOBAL;
    if (clGetDeviceInfo(d, CL_DEVICE_SINGLE_FP_CONFIG, sizeof fp, &fp, NULL) != CL_SUCCESS)
        fp = 0;
    inf->local_mem_bytes = lm;
    inf->local_mem_dedicated = lt == CL_LOCAL;
    inf->fp32_denormals = (fp & CL_FP_DENORM) != 0;
    inf->fp32_correct_divsqrt = (fp & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT) != 0;
    return PF_OK;
fail:
    return st;
}

pf_status pf_cl_list(pf_cl_device_info **out, int *count, int *nplatforms, char *err, size_t errlen)
{
    *out = NULL;
    *count = 0;
    *nplatforms = 0;
    cl_platform_id *plats = NULL;
    cl_uint np = 0;
    pf_status st = get_platforms(&plats, &np, err, errlen);
    if (st != PF_OK)
        return st;
    pf_cl_device_info *list = NULL;
    int n = 0;
    for (cl_uint pi = 0; pi < np && st == PF_OK; pi++) {
        cl_device_id *devs = NULL;
        cl_uint nd = 0;
        st = get_devices(plats[pi], &devs, &nd, err, errlen);
        if (st != PF_OK)
            break;
        if (nd) {
            size_t bytes;
            if (pf_mul_size((size_t)n + nd, sizeof *list, &bytes)) {
                st = PF_EOVERFLOW;
            } else {
                pf_cl_device_info *grown = pf_alloc(bytes);
                if (!grown) {
                    st = PF_ENOMEM;
                } else {
                    if (n)
                        memcpy(grown, list, (size_t)n * sizeof *list);
                    pf_free(list);
                    list = grown;
                    for (cl_uint di = 0; di < nd && st == PF_OK; di++)
                        st = fill_info(plats[pi], devs[di], (int)pi, (int)di, &list[n++], err, errlen);
                }
            }
        }
        pf_free(devs);
    }
    pf_free(plats);
    if (st != PF_OK) {
        pf_free(list);
        return st;
    }
    *out = list;
    *count = n;
    *nplatforms = (int)np;
    return PF_OK;
}

/* ---- devices ---- */

pf_status pf_cl_open(int platform, int device, int allow_zero_copy, pf_cl_device **out, char *err, size_t errlen)
{
    *out = NULL;
    cl_platform_id *plats = NULL;
    cl_device_id *devs = NULL;
    cl_uint np = 0, nd = 0;
    pf_cl_device *dev = NULL;
    pf_status st = get_platforms(&plats, &np, err, errlen);
    if (st != PF_OK)
        return st;
    if (np == 0) {
        set_err(err, errlen, "no OpenCL platform found: the OpenCL ICD loader lists none (is an ICD such as "
                "pocl-opencl-icd installed under /etc/OpenCL/vendors?)");
        st = PF_EDEVICE;
        goto fail;
    }
    if (platform < 0 || (cl_uint)platform >= np) {
        set_err(err, errlen, "no OpenCL platform %d: %u platform(s) found", platform, np);
        st = PF_EDEVICE;
        goto fail;
    }
    st = get_devices(plats[platform], &devs, &nd, err, errlen);
    if (st != PF_OK)
        goto fail;
    if (device < 0 || (cl_uint)device >= nd) {
        set_err(err, errlen, "no OpenCL device %d on platform %d: it has %u device(s)", device, platform, nd);
        st = PF_EDEVICE;
        goto fail;
    }
    dev = pf_calloc(1, sizeof *dev);
    if (!dev) {
        st = PF_ENOMEM;
        goto fail;
    }
    dev->platform = plats[platform];
    dev->device = devs[device];
    dev->allow_zero_copy = allow_zero_copy;
    st = fill_info(dev->platform, dev->device, platform, device, &dev->info, err, errlen);
    if (st != PF_OK)
        goto fail;
    {
        const char *mv = getenv("PYFASTPIM_CL_MVM");
        dev->mvm_mode = mv && *mv ? pf_cl_mvm_mode_parse(mv) : PF_CL_MVM_AUTO;
        if (dev->mvm_mode < 0) {
            set_err(err, errlen, "environment variable PYFASTPIM_CL_MVM: expected 'auto', 'tiled' or 'untiled', got "
                    "'%.64s'", mv);
            st = PF_EINVAL;
            goto fail;
        }
    }
    cl_int rc;
    cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)dev->platform, 0};
    dev->ctx = clCreateContext(props, 1, &dev->device, NULL, NULL, &rc);
    CL_CHECK(rc, "clCreateContext");
    const char *prof = getenv("PYFASTPIM_CL_PROFILE");
    dev->profile = prof && strcmp(prof, "1") == 0;
    dev->queue = clCreateCommandQueue(dev->ctx, dev->device, dev->profile ? CL_QUEUE_PROFILING_ENABLE : 0, &rc);
    CL_CHECK(rc, "clCreateCommandQueue");
    cl_device_fp_config fp = 0;
    if (clGetDeviceInfo(dev->device, CL_DEVICE_SINGLE_FP_CONFIG, sizeof fp, &fp, NULL) == CL_SUCCESS)
        dev->correct_divsqrt = (fp & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT) != 0;
    cl_device_fp_config dfp = 0;
    if (clGetDeviceInfo(dev->device, CL_DEVICE_DOUBLE_FP_CONFIG, sizeof dfp, &dfp, NULL) == CL_SUCCESS)
        dev->fp64 = dfp != 0;
    pf_free(plats);
    pf_free(devs);
    *out = dev;
    return PF_OK;
fail:
    pf_free(plats);
    pf_free(devs);
    pf_cl_close(dev);
    return st;
}

void pf_cl_release_scratch(pf_cl_device *dev)
{
    for (int s = 0; s < SCR_COUNT; s++) {
        if (dev->scratch[s].mem)
            clReleaseMemObject(dev->scratch[s].mem);
        pf_free(dev->scratch[s].host);
        memset(&dev->scratch[s], 0, sizeof dev->scratch[s]);
    }
}

size_t pf_cl_scratch_bytes(const pf_cl_device *dev)
{
    size_t total = 0;
    for (int s = 0; s < SCR_COUNT; s++)
        total += dev->scratch[s].bytes;
    return total;
}

void pf_cl_close(pf_cl_device *dev)
{
    if (!dev)
        return;
    if (dev->queue)
        clFinish(dev->queue);
    pf_cl_release_scratch(dev);
    for (int i = 0; i < K_COUNT; i++)
        if (dev->k[i])
            clReleaseKernel(dev->k[i]);
    if (dev->program)
        clReleaseProgram(dev->program);
    if (dev->queue)
        clReleaseCommandQueue(dev->queue);
    if (dev->ctx)
        clReleaseContext(dev->ctx);
    pf_free(dev);
}

const pf_cl_device_info *pf_cl_info(const pf_cl_device *dev) { return &dev->info; }

int pf_cl_mvm_mode_parse(const char *name)
{
    static const char *const names[] = {"auto", "tiled", "untiled"};
    for (int i = 0; i < 3; i++)
        if (name && strcmp(name, names[i]) == 0)
            return i;
    return -1;
}

const char *pf_cl_mvm_mode_name(int mode)
{
    return mode == PF_CL_MVM_TILED ? "tiled" : mode == PF_CL_MVM_UNTILED ? "untiled" : "auto";
}

void pf_cl_set_mvm_mode(pf_cl_device *dev, int mode) { dev->mvm_mode = mode; }
int pf_cl_get_mvm_mode(const pf_cl_device *dev) { return dev->mvm_mode; }
int pf_cl_mvm_kt_max(const pf_cl_device *dev) { return dev->kt_max; }
size_t pf_cl_mvm_wg_multiple(const pf_cl_device *dev) { return dev->wg_multiple; }

int pf_cl_mvm_uses_tiled(const pf_cl_device *dev, int64_t n, int *kt)
{
    *kt = dev->kt_max < n ? dev->kt_max : (int)n;
    if (dev->mvm_mode == PF_CL_MVM_TILED)
        return 1; /* forced: the caller reports kt_max == 0 as an error */
    if (dev->mvm_mode == PF_CL_MVM_UNTILED || dev->kt_max == 0)
        return 0;
    /* auto: where local memory is a separate, fast memory and holds chunks of
     * at least 8 crossbar rows (or the whole crossbar) */
    return strcmp(dev->info.type, "cpu") != 0 && dev->info.local_mem_dedicated && (dev->kt_max >= 8 || *kt == n);
}
int pf_cl_zero_copy(const pf_cl_device *dev) { return dev->zero_copy; }

void pf_cl_tile(const pf_cl_device *dev, int *tm, int *tn, size_t *lx, size_t *ly)
{
    *tm = dev->tm;
    *tn = dev->tn;
    *lx = dev->lx;
    *ly = dev->ly;
}

/* Tile shape per device type; PYFASTPIM_CL_TILE="TM,TN,LX,LY[,PANEL]"
 * overrides it (tuning on new hardware). CPUs: one 6 x 16 register tile per
 * work-item over panel-packed weights, like the AVX2 micro-kernel; GPUs: 4 x 4
 * per work-item, 16 x 8 work-groups, column-major weights (coalesced). */
static void choose_tile(pf_cl_device *dev)
{
    int is_cpu = strcmp(dev->info.type, "cpu") == 0;
    dev->tm = is_cpu ? 6 : 4;
    dev->tn = is_cpu ? 16 : 4;
    dev->lx = is_cpu ? 1 : 16;
    dev->ly = is_cpu ? 1 : 8;
    dev->b_panel = is_cpu;
    const char *env = getenv("PYFASTPIM_CL_TILE");
    int tm, tn, panel = dev->b_panel;
    long lx, ly;
    if (env && sscanf(env, "%d,%d,%ld,%ld,%d", &tm, &tn, &lx, &ly, &panel) >= 4 && tm >= 1 && tm <= 16 &&
        (tn == 1 || tn == 2 || tn == 4 || tn == 8 || tn == 16) && lx >= 1 && ly >= 1 && lx <= 1024 && ly <= 1024) {
        dev->tm = tm;
        dev->tn = tn;
        dev->lx = (size_t)lx;
        dev->ly = (size_t)ly;
        dev->b_panel = panel != 0;
    }
}

/* Runs pf_probe on USE_HOST_PTR buffers at host address `base + offset`:
 * returns 1 when the kernel read the input as changed after buffer creation
 * and wrote the output in place (before any map), i.e. no runtime copy. */
static pf_status probe_shared(pf_cl_device *dev, size_t offset, int *shared, char *err, size_t errlen)
{
    pf_status st = PF_OK;
    *shared = 0;
    unsigned char *raw = pf_alloc(3 * 4096);
    cl_mem bi = NULL, bo = NULL;
    if (!raw)
        return PF_ENOMEM;
    unsigned char *page = (unsigned char *)(((uintptr_t)raw + 4095) & ~(uintptr_t)4095);
    float *in = (float *)(page + offset), *outp = (float *)(page + 4096 + offset);
    in[0] = 1.0f;
    outp[0] = -1.0f;
    cl_int rc;
    bi = clCreateBuffer(dev->ctx, CL_MEM_READ_ONLY | CL_MEM_USE_HOST_PTR, sizeof(float), in, &rc);
    CL_CHECK(rc, "clCreateBuffer(probe)");
    bo = clCreateBuffer(dev->ctx, CL_MEM_WRITE_ONLY | CL_MEM_USE_HOST_PTR, sizeof(float), outp, &rc);
    CL_CHECK(rc, "clCreateBuffer(probe)");
    in[0] = 41.0f; /* a copy made at creation would still hold 1 */
    {
        cl_kernel kp = clCreateKernel(dev->program, "pf_probe", &rc);
        CL_CHECK(rc, "clCreateKernel(pf_probe)");
        cl_int a0 = clSetKernelArg(kp, 0, sizeof bo, &bo), a1 = clSetKernelArg(kp, 1, sizeof bi, &bi);
        size_t one = 1;
        cl_int r2 = a0 != CL_SUCCESS ? a0 : a1 != CL_SUCCESS ? a1
                  : clEnqueueNDRangeKernel(dev->queue, kp, 1, NULL, &one, NULL, 0, NULL, NULL);
        if (r2 == CL_SUCCESS)
            r2 = clFinish(dev->queue);
        clReleaseKernel(kp);
        CL_CHECK(r2, "clEnqueueNDRangeKernel(pf_probe)");
    }
    *shared = outp[0] == 42.0f;
    /* leave the buffers consistent before release */
    void *m = clEnqueueMapBuffer(dev->queue, bo, CL_TRUE, CL_MAP_READ, 0, sizeof(float), 0, NULL, NULL, &rc);
    CL_CHECK(rc, "clEnqueueMapBuffer(probe)");
    CL_CHECK(clEnqueueUnmapMemObject(dev->queue, bo, m, 0, NULL, NULL), "clEnqueueUnmapMemObject(probe)");
    CL_CHECK(clFinish(dev->queue), "clFinish(probe)");
fail:
    if (bi)
        clReleaseMemObject(bi);
    if (bo)
        clReleaseMemObject(bo);
    pf_free(raw);
    return st;
}

#define PF_CL_KT_MAX 32 /* crossbar rows per local-memory chunk of pf_dpe_mvm_tiled, at most */

/* Largest chunk kt of crossbar rows whose tiles ((TM*ly + TN*lx) floats per
 * row) fit the local memory CL_DEVICE_LOCAL_MEM_SIZE leaves beside the
 * kernel's own (CL_KERNEL_LOCAL_MEM_SIZE), keeping half of it free so more
 * than one work-group fits a compute unit; 0 when not even one row fits. */
static pf_status mvm_tiled_chunk(pf_cl_device *dev, char *err, size_t errlen)
{
    pf_status st = PF_OK;
    cl_ulong used = 0;
    CL_CHECK(clGetKernelWorkGroupInfo(dev->k[K_MVM_TILED], dev->device, CL_KERNEL_LOCAL_MEM_SIZE, sizeof used, &used,
                                      NULL), "clGetKernelWorkGroupInfo(CL_KERNEL_LOCAL_MEM_SIZE)");
    const uint64_t per_row = ((uint64_t)dev->tm * dev->ly + (uint64_t)dev->tn * dev->lx) * sizeof(float);
    const uint64_t avail = dev->info.local_mem_bytes > used ? dev->info.local_mem_bytes - used : 0;
    uint64_t kt = avail / 2 / per_row;
    if (kt == 0 && avail >= per_row)
        kt = 1;
    dev->kt_max = kt > PF_CL_KT_MAX ? PF_CL_KT_MAX : (int)kt;
    return PF_OK;
fail:
    return st;
}

pf_status pf_cl_build(pf_cl_device *dev, char *err, size_t errlen)
{
    if (dev->built)
        return PF_OK;
    pf_status st = PF_OK;
    cl_int rc;
    /* base.cl (prelude) first, then every other embedded kernel file */
    const char *srcs[64];
    cl_uint ns = 0;
    for (int i = 0; pf_cl_sources[i].name; i++)
        if (strcmp(pf_cl_sources[i].name, "base.cl") == 0)
            srcs[ns++] = pf_cl_sources[i].source;
    if (ns != 1) {
        set_err(err, errlen, "OpenCL program: the embedded kernels lack base.cl (rebuild the extension)");
        return PF_EDEVICE;
    }
    for (int i = 0; pf_cl_sources[i].name && ns < 64; i++)
        if (strcmp(pf_cl_sources[i].name, "base.cl") != 0)
            srcs[ns++] = pf_cl_sources[i].source;
    choose_tile(dev);
    char opts[256];
    snprintf(opts, sizeof opts, "%s%s-DPF_TM=%d -DPF_TN=%d -DPF_B_PANEL=%d",
             dev->correct_divsqrt ? "-cl-fp32-correctly-rounded-divide-sqrt " : "", dev->fp64 ? "-DPF_HAVE_FP64 " : "",
             dev->tm, dev->tn, dev->b_panel);
    dev->program = clCreateProgramWithSource(dev->ctx, ns, srcs, NULL, &rc);
    CL_CHECK(rc, "clCreateProgramWithSource");
    rc = clBuildProgram(dev->program, 1, &dev->device, opts, NULL, NULL);
    if (rc != CL_SUCCESS) {
        char log[1536] = "";
        clGetProgramBuildInfo(dev->program, dev->device, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log, NULL);
        log[sizeof log - 1] = 0;
        set_err(err, errlen, "clBuildProgram (options '%s') on %s: %s (%d); build log:\n%s", opts, dev->info.name,
                pf_cl_error_name(rc), (int)rc, log);
        st = PF_EDEVICE;
        goto fail;
    }
    for (int i = 0; i < K_COUNT; i++) {
        char what[96];
        snprintf(what, sizeof what, "clCreateKernel(%s)", kernel_names[i]);
        dev->k[i] = clCreateKernel(dev->program, kernel_names[i], &rc);
        CL_CHECK(rc, what);
    }
    size_t wi[3] = {1, 1, 1};
    if (clGetDeviceInfo(dev->device, CL_DEVICE_MAX_WORK_ITEM_SIZES, sizeof wi, wi, NULL) != CL_SUCCESS)
        wi[0] = wi[1] = 1;
    /* pack_local is the 1-D work-group of every kernel but the MVMs (enqueue()
     * also uses it for the launches that name no work-group): it must fit each
     * compiled kernel (CL_KERNEL_WORK_GROUP_SIZE, which a GPU lowers for kernels
     * that use many registers) and the device's first work-item dimension */
    dev->pack_local = PF_CL_PACK_LOCAL;
    while (dev->pack_local > wi[0] && dev->pack_local > 1)
        dev->pack_local /= 2;
    for (int i = 0; i < K_COUNT; i++) {
        if (i == K_MVM || i == K_MVM_TILED)
            continue;
        size_t pwg = 0;
        CL_CHECK(clGetKernelWorkGroupInfo(dev->k[i], dev->device, CL_KERNEL_WORK_GROUP_SIZE, sizeof pwg, &pwg, NULL),
                 "clGetKernelWorkGroupInfo(CL_KERNEL_WORK_GROUP_SIZE)");
        while (dev->pack_local > pwg && dev->pack_local > 1)
            dev->pack_local /= 2;
    }
    /* the MVM work-group must fit both compiled MVM kernels (they share it):
     * shrink y, then x */
    size_t kwg = 0, kwg_t = 0;
    CL_CHECK(clGetKernelWorkGroupInfo(dev->k[K_MVM], dev->device, CL_KERNEL_WORK_GROUP_SIZE, sizeof kwg, &kwg, NULL),
             "clGetKernelWorkGroupInfo(pf_dpe_mvm)");
    CL_CHECK(clGetKernelWorkGroupInfo(dev->k[K_MVM_TILED], dev->device, CL_KERNEL_WORK_GROUP_SIZE, sizeof kwg_t,
                                      &kwg_t, NULL), "clGetKernelWorkGroupInfo(pf_dpe_mvm_tiled)");
    if (kwg_t < kwg)
        kwg = kwg_t;
    if (clGetKernelWorkGroupInfo(dev->k[K_MVM], dev->device, CL_KERNEL_PREFERRED_WORK_GROUP_SIZE_MULTIPLE,
                                 sizeof dev->wg_multiple, &dev->wg_multiple, NULL) != CL_SUCCESS)
        dev->wg_multiple = 1;
    while (dev->lx * dev->ly > kwg || dev->ly > wi[1]) {
        if (dev->ly > 1)
            dev->ly /= 2;
        else if (dev->lx > 1)
            dev->lx /= 2;
        else
            break;
    }
    while (dev->lx > wi[0] && dev->lx > 1)
        dev->lx /= 2;
    if ((st = mvm_tiled_chunk(dev, err, errlen)) != PF_OK)
        goto fail;
    /* zero copy only where the device demonstrably shares host memory */
    dev->zero_copy = 0;
    dev->zc_align = 0;
    if (dev->allow_zero_copy && dev->info.host_unified_memory) {
        int shared = 0;
        st = probe_shared(dev, 4, &shared, err, errlen);
        if (st != PF_OK)
            goto fail;
        if (shared) {
            dev->zero_copy = 1;
            dev->zc_align = sizeof(float);
        } else {
            st = probe_shared(dev, 0, &shared, err, errlen);
            if (st != PF_OK)
                goto fail;
            if (shared) {
                dev->zero_copy = 1;
                dev->zc_align = 4096;
            }
        }
    }
    dev->built = 1;
    return PF_OK;
fail:
    {
        for (int i = 0; i < K_COUNT; i++)
            if (dev->k[i]) {
                clReleaseKernel(dev->k[i]);
                dev->k[i] = NULL;
            }
        if (dev->program)
            clReleaseProgram(dev->program);
        dev->program = NULL;
    }
    return st;
}

/* ---- buffers ---- */

static size_t round_up(size_t v, size_t m) { return (v + m - 1) / m * m; }

#define SET_ARG(k, idx, type, val)                                                                             \
    do {                                                                                                       \
        type v_ = (val);                                                                                       \
        CL_CHECK(clSetKernelArg((k), (idx), sizeof v_, &v_), "clSetKernelArg(" #k ", " #idx ")");           \
    } while (0)

static pf_status check_alloc_size(const pf_cl_device *dev, size_t bytes, const char *what, char *err, size_t errlen)
{
    if ((uint64_t)bytes > dev->info.max_alloc_bytes) {
        set_err(err, errlen, "%s needs a buffer of %zu bytes, above CL_DEVICE_MAX_MEM_ALLOC_SIZE = %llu of %s", what,
                bytes, (unsigned long long)dev->info.max_alloc_bytes, dev->info.name);
        return PF_EDEVICE;
    }
    return PF_OK;
}

static int shareable(const pf_cl_device *dev, const void *host)
{
    return dev->zero_copy && ((uintptr_t)host % dev->zc_align) == 0;
}

/* A read-only operand: host memory shared in place on zero-copy devices, else
 * a device buffer filled by one counted host-to-device transfer. */
static pf_status buf_in(pf_cl_device *dev, const void *host, size_t bytes, const char *what, cl_mem *out, char *err,
                        size_t errlen)
{
    pf_status st = PF_OK;
    cl_int rc;
    *out = NULL;
    if (bytes == 0 || !host) { /* absent operand: a small placeholder the kernel never reads */
        *out = clCreateBuffer(dev->ctx, CL_MEM_READ_ONLY, 64, NULL, &rc);
        CL_CHECK(rc, "clCreateBuffer(placeholder)");
        return PF_OK;
    }
    if ((st = check_alloc_size(dev, bytes, what, err, errlen)) != PF_OK)
        return st;
    if (shareable(dev, host)) {
        *out = clCreateBuffer(dev->ctx, CL_MEM_READ_ONLY | CL_MEM_USE_HOST_PTR, bytes, (void *)host, &rc);
        CL_CHECK(rc, "clCreateBuffer(CL_MEM_USE_HOST_PTR)");
        return PF_OK;
    }
    *out = clCreateBuffer(dev->ctx, CL_MEM_READ_ONLY, bytes, NULL, &rc);
    CL_CHECK(rc, "clCreateBuffer");
    CL_CHECK(clEnqueueWriteBuffer(dev->queue, *out, CL_TRUE, 0, bytes, host, 0, NULL, NULL), "clEnqueueWriteBuffer");
    pf_record_copy(PF_COPY_HOST_TO_DEVICE, bytes);
    return PF_OK;
fail:
    if (*out)
        clReleaseMemObject(*out);
    *out = NULL;
    return st;
}

/* The output: shared in place (written by the kernel, synchronized by
 * map/unmap) or a device buffer read back once (counted). */
static pf_status buf_out(pf_cl_device *dev, void *host, size_t bytes, cl_mem *out, int *shared, char *err,
                         size_t errlen)
{
    pf_status st = PF_OK;
    cl_int rc;
    *out = NULL;
    if ((st = check_alloc_size(dev, bytes, "the output", err, errlen)) != PF_OK)
        return st;
    *shared = shareable(dev, host);
    /* READ_WRITE, not WRITE_ONLY: some kernels read what they write (pf_slice_max's atomic_max, the
     * attention epilogue on out == x); reading a WRITE_ONLY buffer is undefined on GPUs */
    *out = clCreateBuffer(dev->ctx, CL_MEM_READ_WRITE | (*shared ? CL_MEM_USE_HOST_PTR : 0), bytes,
                          *shared ? host : NULL, &rc);
    CL_CHECK(rc, "clCreateBuffer(output)");
    return PF_OK;
fail:
    return st;
}

static pf_status buf_finish_out(pf_cl_device *dev, cl_mem mem, void *host, size_t bytes, int shared, char *err,
                                size_t errlen)
{
    pf_status st = PF_OK;
    cl_int rc;
    if (shared) {
        void *m = clEnqueueMapBuffer(dev->queue, mem, CL_TRUE, CL_MAP_READ, 0, bytes, 0, NULL, NULL, &rc);
        CL_CHECK(rc, "clEnqueueMapBuffer(output)");
        if (m != host) { /* a runtime that maps a shadow copy: count it and copy it back */
            memcpy(host, m, bytes);
            pf_record_copy(PF_COPY_DEVICE_TO_HOST, bytes);
        }
        CL_CHECK(clEnqueueUnmapMemObject(dev->queue, mem, m, 0, NULL, NULL), "clEnqueueUnmapMemObject(output)");
    } else {
        CL_CHECK(clEnqueueReadBuffer(dev->queue, mem, CL_TRUE, 0, bytes, host, 0, NULL, NULL),
                 "clEnqueueReadBuffer(output)");
        pf_record_copy(PF_COPY_DEVICE_TO_HOST, bytes);
    }
    CL_CHECK(clFinish(dev->queue), "clFinish");
    return PF_OK;
fail:
    return st;
}

/* Device scratch kept between calls, grown on demand. On zero-copy devices it
 * is pf_alloc'd host memory (accounted by pyfastpim.memory). */
static pf_status scratch_get(pf_cl_device *dev, int slot, size_t bytes, const char *what, cl_mem *out, char *err,
                             size_t errlen)
{
    pf_status st = PF_OK;
    cl_int rc;
    pf_cl_scratch *s = &dev->scratch[slot];
    if (bytes < 64)
        bytes = 64;
    if (s->mem && s->bytes >= bytes) {
        *out = s->mem;
        return PF_OK;
    }
    if ((st = check_alloc_size(dev, bytes, what, err, errlen)) != PF_OK)
        return st;
    if (s->mem)
        clReleaseMemObject(s->mem);
    pf_free(s->host);
    memset(s, 0, sizeof *s);
    if (dev->zero_copy && dev->zc_align <= PF_ALIGN) {
        s->host = pf_alloc(bytes);
        if (!s->host)
            return PF_ENOMEM;
        s->mem = clCreateBuffer(dev->ctx, CL_MEM_READ_WRITE | CL_MEM_USE_HOST_PTR, bytes, s->host, &rc);
    } else {
        s->mem = clCreateBuffer(dev->ctx, CL_MEM_READ_WRITE, bytes, NULL, &rc);
    }
    CL_CHECK(rc, "clCreateBuffer(scratch)");
    s->bytes = bytes;
    *out = s->mem;
    return PF_OK;
fail:
    pf_free(s->host);
    memset(s, 0, sizeof *s);
    return st;
}

/* Enqueues kernel `k`; with profiling on, waits for it and prints its time.
 * lws NULL: a work-group of pack_local x 1 x 1 (fits every such kernel, see
 * pf_cl_build) with the global size rounded up to it (every kernel checks its
 * bounds), not a runtime-chosen group, which for an awkward global size (a
 * prime row count) can be a single work-item on a GPU. */
static pf_status enqueue(pf_cl_device *dev, cl_kernel k, const char *name, cl_uint dims, const size_t *gws,
                         const size_t *lws, char *err, size_t errlen)
{
    pf_status st = PF_OK;
    cl_event ev = NULL;
    char what[96];
    size_t g_up[3], l_up[3] = {1, 1, 1};
    if (!lws && dims >= 1 && dims <= 3) {
        l_up[0] = dev->pack_local ? dev->pack_local : 1;
        for (cl_uint d = 0; d < dims; d++) {
            if (gws[d] > SIZE_MAX - l_up[d]) {
                set_err(err, errlen, "%s: global size %zu too large", name, gws[d]);
                return PF_EOVERFLOW;
            }
            g_up[d] = (gws[d] + l_up[d] - 1) / l_up[d] * l_up[d];
        }
        gws = g_up;
        lws = l_up;
    }
    snprintf(what, sizeof what, "clEnqueueNDRangeKernel(%s)", name);
    CL_CHECK(clEnqueueNDRangeKernel(dev->queue, k, dims, NULL, gws, lws, 0, NULL, dev->profile ? &ev : NULL), what);
    if (ev) {
        cl_ulong t0 = 0, t1 = 0;
        CL_CHECK(clWaitForEvents(1, &ev), "clWaitForEvents");
        CL_CHECK(clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_START, sizeof t0, &t0, NULL), "profiling");
        CL_CHECK(clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_END, sizeof t1, &t1, NULL), "profiling");
        fprintf(stderr, "pyfastpim opencl: %-18s %10.3f ms\n", name, (double)(t1 - t0) * 1e-6);
        clReleaseEvent(ev);
    }
    return PF_OK;
fail:
    if (ev)
        clReleaseEvent(ev);
    return st;
}

/* Zero-fills scratch `slot` unless it is already zero-filled for geometry
 * `sig`: the pack kernels never write the padding, so it stays zero. */
static pf_status scratch_zero(pf_cl_device *dev, int slot, const uint64_t sig[4], char *err, size_t errlen)
{
    pf_status st = PF_OK;
    pf_cl_scratch *s = &dev->scratch[slot];
    if (s->zeroed && memcmp(s->sig, sig, sizeof s->sig) == 0)
        return PF_OK;
    const float zero = 0.0f;
    CL_CHECK(clEnqueueFillBuffer(dev->queue, s->mem, &zero, sizeof zero, 0, s->bytes / sizeof(float) * sizeof(float),
                                 0, NULL, NULL), "clEnqueueFillBuffer(scratch)");
    memcpy(s->sig, sig, sizeof s->sig);
    s->zeroed = 1;
    return PF_OK;
fail:
    s->zeroed = 0;
    return st;
}

static void release_mems(cl_mem *m, int n)
{
    for (int i = 0; i < n; i++)
        if (m[i]) {
            clReleaseMemObject(m[i]);
            m[i] = NULL;
        }
}

/* ---- resident weights ---- */

static pf_status weight_sizes(const pf_dpe_args *a, size_t *levels, size_t *cond, size_t *scale)
{
    size_t dims[3] = {(size_t)a->sw, (size_t)a->inner, (size_t)a->cols};
    size_t sdims[2] = {(size_t)a->w_gr, (size_t)a->w_gc};
    if (pf_mul_sizes(dims, 3, levels) || pf_mul_size(*levels, sizeof(float), cond) || pf_mul_sizes(sdims, 2, scale) ||
        pf_mul_size(*scale, sizeof(float), scale))
        return PF_EOVERFLOW;
    if (!a->w_conductance)
        *cond = 0;
    return PF_OK;
}

pf_status pf_cl_weights_create(pf_cl_device *dev, const pf_dpe_args *a, pf_cl_weights **out, char *err,
                               size_t errlen)
{
    *out = NULL;
    pf_status st = pf_cl_build(dev, err, errlen);
    if (st != PF_OK)
        return st;
    size_t bl, bc, bs;
    if ((st = weight_sizes(a, &bl, &bc, &bs)) != PF_OK)
        return st;
    pf_cl_weights *w = pf_calloc(1, sizeof *w);
    if (!w)
        return PF_ENOMEM;
    w->dev = dev;
    if ((st = buf_in(dev, a->w_levels, bl, "w_levels", &w->levels, err, errlen)) != PF_OK ||
        (st = buf_in(dev, a->w_conductance, bc, "w_conductance", &w->cond, err, errlen)) != PF_OK ||
        (st = buf_in(dev, a->w_scale, bs, "w_scale", &w->scale, err, errlen)) != PF_OK) {
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
    *out = w;
    return PF_OK;
}

void pf_cl_weights_free(pf_cl_weights *w)
{
    if (!w)
        return;
    cl_mem m[3] = {w->levels, w->cond, w->scale};
    release_mems(m, 3);
    pf_free(w);
}

size_t pf_cl_weights_bytes(const pf_cl_weights *w) { return w ? w->bytes : 0; }

int pf_cl_weights_match(const pf_cl_weights *w, const pf_dpe_args *a)
{
    return w && w->p_levels == (const void *)a->w_levels && w->p_cond == (const void *)a->w_conductance &&
           w->p_scale == (const void *)a->w_scale && w->sw == a->sw && w->inner == a->inner && w->cols == a->cols &&
           w->w_gr == a->w_gr && w->w_gc == a->w_gc;
}

/* out[e - start] = normal of element e of a Philox stream, e in [start, end),
 * drawn 8 groups per work-item (pf_normals_range in base.cl). */
static pf_status enqueue_split(pf_cl_device *dev, cl_kernel k, const char *name, cl_uint dims, const size_t *gws,
                               const size_t *lws, pf_cancel *cancel, uint64_t pieces, char *err, size_t errlen);

/* Normals [start, end) of a stream into out; with cancel, in pieces polling it (enqueue_split). */
static pf_status normals_range_cancel(pf_cl_device *dev, cl_mem out, uint64_t seed, cl_uint stream, cl_uint call,
                                      cl_ulong start, cl_ulong end, pf_cancel *cancel, char *err, size_t errlen)
{
    pf_status st = PF_OK;
    if (end <= start)
        return PF_OK;
    cl_kernel k = dev->k[K_NRANGE];
    SET_ARG(k, 0, cl_mem, out);
    SET_ARG(k, 1, cl_ulong, seed);
    SET_ARG(k, 2, cl_uint, stream);
    SET_ARG(k, 3, cl_uint, call);
    SET_ARG(k, 4, cl_ulong, start);
    SET_ARG(k, 5, cl_ulong, end);
    {
        size_t gz = round_up(((end + 3) / 4 - ((start / 4) & ~(cl_ulong)7) + 7) / 8, dev->pack_local);
        size_t lz = dev->pack_local;
        return enqueue_split(dev, k, "pf_normals_range", 1, &gz, &lz, cancel, (end - start) / PF_CL_PIECE_ELEMS + 1,
                             err, errlen);
    }
fail:
    return st;
}

/* ---- implicit im2col (PF_DPE_X_IM2COL) ---- */

/* Geometry as the kernels take it: (C, H, W, kh, kw, sh, sw, ph, pw, dh, dw, Ho, Wo, 0, 0, 0). */
static cl_long16 im2col_geo(const pf_im2col *c)
{
    cl_long16 g;
    memset(&g, 0, sizeof g);
    if (c) {
        const int64_t v[13] = {c->channels, c->height, c->width, c->kh, c->kw, c->sh, c->sw,
                               c->ph, c->pw, c->dh, c->dw, c->out_h, c->out_w};
        for (int i = 0; i < 13; i++)
            g.s[i] = v[i];
    }
    return g;
}

/* Bytes of the (N, C, H, W) image; PF_EOVERFLOW when they overflow or a size is negative. */
static pf_status im2col_bytes(const pf_im2col *c, int64_t batch, size_t *bytes)
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

/* Bit offsets of the slices, 4 bits each (pf_slice_code_packed in base.cl). */
static cl_ulong slice_offsets(const pf_slice_method *sm)
{
    cl_ulong offs = 0;
    for (int i = 0; i < sm->n_slices && i < 16; i++)
        offs |= (cl_ulong)(sm->offset[i] & 15) << (4 * i);
    return offs;
}

pf_status pf_cl_im2col_granule_max(pf_cl_device *dev, const pf_im2col *c, int64_t batch, int64_t qr, int64_t qc,
                                   float *gran_max, char *err, size_t errlen)
{
    if (qr <= 0 || qc <= 0 || !c || !c->image) {
        set_err(err, errlen, "im2col granule max: invalid arguments");
        return PF_EINVAL;
    }
    size_t b_img, ng, b_g;
    if (im2col_bytes(c, batch, &b_img) != PF_OK)
        return PF_EOVERFLOW;
    const int64_t R = c->out_h * c->out_w, K = c->channels * c->kh * c->kw;
    const int64_t gr = pf_ceil_div(R, qr), gcn = pf_ceil_div(K, qc);
    size_t dg[3] = {(size_t)batch, (size_t)gr, (size_t)gcn};
    if (pf_mul_sizes(dg, 3, &ng) || pf_mul_size(ng, sizeof(float), &b_g))
        return PF_EOVERFLOW;
    if (ng == 0)
        return PF_OK;
    pf_status st = pf_cl_build(dev, err, errlen);
    if (st != PF_OK)
        return st;
    cl_int bad = 0;
    cl_mem mi = NULL, mg = NULL, mb = NULL;
    int g_shared = 0, b_shared = 0;
    if ((st = buf_in(dev, c->image, b_img, "input", &mi, err, errlen)) != PF_OK ||
        (st = buf_out(dev, gran_max, b_g, &mg, &g_shared, err, errlen)) != PF_OK ||
        (st = buf_out(dev, &bad, sizeof bad, &mb, &b_shared, err, errlen)) != PF_OK)
        goto fail;
    CL_CHECK(clEnqueueFillBuffer(dev->queue, mb, &bad, sizeof bad, 0, sizeof bad, 0, NULL, NULL),
             "clEnqueueFillBuffer(flag)");
    {
        cl_kernel k = dev->k[K_GMAX];
        SET_ARG(k, 0, cl_mem, mi);
        SET_ARG(k, 1, cl_long16, im2col_geo(c));
        SET_ARG(k, 2, cl_mem, mg);
        SET_ARG(k, 3, cl_mem, mb);
        SET_ARG(k, 4, cl_ulong, (cl_ulong)batch);
        SET_ARG(k, 5, cl_ulong, (cl_ulong)R);
        SET_ARG(k, 6, cl_ulong, (cl_ulong)K);
        SET_ARG(k, 7, cl_ulong, (cl_ulong)qr);
        SET_ARG(k, 8, cl_ulong, (cl_ulong)qc);
        SET_ARG(k, 9, cl_ulong, (cl_ulong)gr);
        SET_ARG(k, 10, cl_ulong, (cl_ulong)gcn);
        size_t gws = round_up(ng, dev->pack_local), lws = dev->pack_local;
        if ((st = enqueue(dev, k, "pf_im2col_gmax", 1, &gws, &lws, err, errlen)) != PF_OK)
            goto fail;
    }
    if ((st = buf_finish_out(dev, mg, gran_max, b_g, g_shared, err, errlen)) != PF_OK ||
        (st = buf_finish_out(dev, mb, &bad, sizeof bad, b_shared, err, errlen)) != PF_OK)
        goto fail;
    clReleaseMemObject(mi);
    clReleaseMemObject(mg);
    clReleaseMemObject(mb);
    if (bad)
        return pf_fail(PF_ENONFINITE, "input", "contains NaN or infinity");
    return PF_OK;
fail:
    clFinish(dev->queue);
    if (mi)
        clReleaseMemObject(mi);
    if (mg)
        clReleaseMemObject(mg);
    if (mb)
        clReleaseMemObject(mb);
    return st;
}

pf_status pf_cl_im2col_dequantize(pf_cl_device *dev, const pf_im2col *c, int64_t batch, int64_t qr, int64_t qc,
                                  const float *gran_max, int total_bits, int bfp, float *out, char *err,
                                  size_t errlen)
{
    if (qr <= 0 || qc <= 0 || !c || !c->image || total_bits < 2 || total_bits > PF_MAX_TOTAL_BITS) {
        set_err(err, errlen, "im2col dequantize: invalid arguments");
        return PF_EINVAL;
    }
    size_t b_img, total, b_out, ng, b_g;
    if (im2col_bytes(c, batch, &b_img) != PF_OK)
        return PF_EOVERFLOW;
    const int64_t R = c->out_h * c->out_w, K = c->channels * c->kh * c->kw;
    const int64_t gr = pf_ceil_div(R, qr), gcn = pf_ceil_div(K, qc);
    size_t d[3] = {(size_t)batch, (size_t)R, (size_t)K}, dg[3] = {(size_t)batch, (size_t)gr, (size_t)gcn};
    if (pf_mul_sizes(d, 3, &total) || pf_mul_size(total, sizeof(float), &b_out) || pf_mul_sizes(dg, 3, &ng) ||
        pf_mul_size(ng, sizeof(float), &b_g))
        return PF_EOVERFLOW;
    if (total == 0)
        return PF_OK;
    pf_status st = pf_cl_build(dev, err, errlen);
    if (st != PF_OK)
        return st;
    cl_mem mi = NULL, mg = NULL, mo = NULL;
    int shared = 0;
    if ((st = buf_in(dev, c->image, b_img, "input", &mi, err, errlen)) != PF_OK ||
        (st = buf_in(dev, gran_max, b_g, "x_gran_max", &mg, err, errlen)) != PF_OK ||
        (st = buf_out(dev, out, b_out, &mo, &shared, err, errlen)) != PF_OK)
        goto fail;
    {
        cl_kernel k = dev->k[K_DEQUANT];
        SET_ARG(k, 0, cl_mem, mi);
        SET_ARG(k, 1, cl_long16, im2col_geo(c));
        SET_ARG(k, 2, cl_mem, mg);
        SET_ARG(k, 3, cl_mem, mo);
        SET_ARG(k, 4, cl_ulong, (cl_ulong)total);
        SET_ARG(k, 5, cl_ulong, (cl_ulong)R);
        SET_ARG(k, 6, cl_ulong, (cl_ulong)K);
        SET_ARG(k, 7, cl_ulong, (cl_ulong)qr);
        SET_ARG(k, 8, cl_ulong, (cl_ulong)qc);
        SET_ARG(k, 9, cl_ulong, (cl_ulong)gr);
        SET_ARG(k, 10, cl_ulong, (cl_ulong)gcn);
        SET_ARG(k, 11, cl_int, total_bits);
        SET_ARG(k, 12, cl_int, bfp != 0);
        size_t gws = round_up(total, dev->pack_local), lws = dev->pack_local;
        if ((st = enqueue(dev, k, "pf_im2col_dequant", 1, &gws, &lws, err, errlen)) != PF_OK)
            goto fail;
    }
    st = buf_finish_out(dev, mo, out, b_out, shared, err, errlen);
    clReleaseMemObject(mi);
    clReleaseMemObject(mg);
    clReleaseMemObject(mo);
    return st;
fail:
    clFinish(dev->queue);
    if (mi)
        clReleaseMemObject(mi);
    if (mg)
        clReleaseMemObject(mg);
    if (mo)
        clReleaseMemObject(mo);
    return st;
}

/* ---- fused DPE MVM ---- */

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


/* Enqueues kernel k over gws (dims 1 or 2; lws may be NULL) like enqueue. With
 * a cancel flag, in about `pieces` pieces (global offsets aligned to lws: the
 * kernels index by get_global_id only), waiting for each and polling the flag
 * in between: PF_EINTR when it is set. */
static pf_status enqueue_split(pf_cl_device *dev, cl_kernel k, const char *name, cl_uint dims, const size_t *gws,
                               const size_t *lws, pf_cancel *cancel, uint64_t pieces, char *err, size_t errlen)
{
    pf_status st = PF_OK;
    if (!cancel)
        return enqueue(dev, k, name, dims, gws, lws, err, errlen);
    CL_CHECK(clFinish(dev->queue), "clFinish"); /* what came before may be long too */
    if (pf_cancelled(cancel))
        return PF_EINTR;
    const size_t l0 = lws ? lws[0] : 1, l1 = dims > 1 && lws ? lws[1] : 1;
    const uint64_t g0 = gws[0] / l0, g1 = dims > 1 ? gws[1] / l1 : 1; /* work-groups */
    if (pieces < 1)
        pieces = 1;
    const uint64_t p1 = pieces < g1 ? pieces : g1;
    uint64_t p0 = (pieces + p1 - 1) / p1;
    p0 = p0 < g0 ? p0 : g0;
    const size_t per1 = (size_t)((g1 + p1 - 1) / p1) * l1, per0 = (size_t)((g0 + p0 - 1) / p0) * l0;
    const size_t n1 = dims > 1 ? gws[1] : 1;
    for (size_t y0 = 0; y0 < n1; y0 += per1)
        for (size_t x0 = 0; x0 < gws[0]; x0 += per0) {
            if (pf_cancelled(cancel))
                return PF_EINTR;
            size_t off[2] = {x0, y0};
            size_t part[2] = {gws[0] - x0 < per0 ? gws[0] - x0 : per0, n1 - y0 < per1 ? n1 - y0 : per1};
            char what[96];
            snprintf(what, sizeof what, "clEnqueueNDRangeKernel(%s)", name);
            CL_CHECK(clEnqueueNDRangeKernel(dev->queue, k, dims, off, part, lws, 0, NULL, NULL), what);
            CL_CHECK(clFinish(dev->queue), "clFinish");
        }
    return pf_cancelled(cancel) ? PF_EINTR : PF_OK;
fail:
    return st;
}

/* Per-call constants in the device's layout (from pf_dpe_consts_init). */
typedef struct {
    int noise_x, noise_w, any_table;
    float *fparams;      /* coef[sx*sw], alpha[sw] */
    float *dac;          /* [sx][256] DAC code per slice value */
    float *tables;       /* exact ADC codes of the slices that need them, concatenated */
    size_t table_floats;
    int32_t tab_info[2 * PF_MAX_SLICES]; /* [2j] offset in tables or -1, [2j+1] last index */
} cl_setup;

static void setup_free(cl_setup *s)
{
    pf_free(s->fparams);
    pf_free(s->dac);
    pf_free(s->tables);
    memset(s, 0, sizeof *s);
}

/* The CPU path's constants (pf_dpe_consts_init), laid out for the device:
 * coef and alpha in one buffer, the DAC codes, the exact ADC tables
 * concatenated. */
static pf_status setup_init(const pf_dpe_args *a, cl_setup *s)
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
        pf_dpe_consts_free(&c);
        setup_free(s);
        return PF_ENOMEM;
    }
    memcpy(s->fparams, c.coef, (size_t)(a->sx * a->sw) * sizeof(float));
    memcpy(s->fparams + a->sx * a->sw, c.alpha, (size_t)a->sw * sizeof(float));
    for (int i = 0; i < a->sx; i++)
        memcpy(s->dac + i * 256, c.dac[i], 256 * sizeof(float));
    for (int j = 0; j < a->sw; j++) {
        s->tab_info[2 * j] = -1;
        s->tab_info[2 * j + 1] = 0;
        if (c.adc_table[j]) {
            s->tab_info[2 * j] = (int32_t)s->table_floats;
            s->tab_info[2 * j + 1] = c.adc_table_max[j];
            s->table_floats += (size_t)c.adc_table_max[j] + 1;
            s->any_table = 1;
        }
    }
    if (s->any_table) {
        s->tables = s->table_floats <= INT32_MAX ? pf_alloc(s->table_floats * sizeof(float)) : NULL;
        if (!s->tables) {
            st = s->table_floats > INT32_MAX ? PF_EOVERFLOW : PF_ENOMEM;
            pf_dpe_consts_free(&c);
            setup_free(s);
            return st;
        }
        for (int j = 0; j < a->sw; j++)
            if (c.adc_table[j])
                memcpy(s->tables + s->tab_info[2 * j], c.adc_table[j],
                       ((size_t)c.adc_table_max[j] + 1) * sizeof(float));
    }
    pf_dpe_consts_free(&c);
    return PF_OK;
}

/* pf_dpe_mvm_tiled's arguments beyond pf_dpe_mvm's: the chunk kt and the two
 * local tiles, lA [kt][TM*ly] and lB [kt][TN*lx] */
static pf_status mvm_tiled_args(pf_cl_device *dev, cl_kernel k, int kt, char *err, size_t errlen)
{
    pf_status st = PF_OK;
    const size_t a_bytes = (size_t)kt * (size_t)dev->tm * dev->ly * sizeof(float);
    const size_t b_bytes = (size_t)kt * (size_t)dev->tn * dev->lx * sizeof(float);
    SET_ARG(k, 21, cl_int, kt);
    CL_CHECK(clSetKernelArg(k, 22, a_bytes, NULL), "clSetKernelArg(pf_dpe_mvm_tiled, local inputs)");
    CL_CHECK(clSetKernelArg(k, 23, b_bytes, NULL), "clSetKernelArg(pf_dpe_mvm_tiled, local weights)");
    return PF_OK;
fail:
    return st;
}

pf_status pf_cl_dpe_mvm(pf_cl_device *dev, const pf_dpe_args *a, const pf_cl_weights *w, char *err, size_t errlen)
{
    pf_status vst = pf_validate_dpe_args(a); /* the one contract (core/contract.h) */
    if (vst != PF_OK)
        return vst;
    const int im2col = a->x_kind == PF_DPE_X_IM2COL;
    if (im2col && (!a->x_im2col || !a->x_gran_max || !a->x_im2col->image ||
                   a->x_im2col->out_h * a->x_im2col->out_w != a->rows ||
                   a->x_im2col->channels * a->x_im2col->kh * a->x_im2col->kw != a->inner ||
                   a->x_method.n_slices != a->sx)) {
        set_err(err, errlen, "dpe_mvm on OpenCL: inconsistent implicit im2col arguments");
        return PF_EINVAL;
    }
    if (im2col) {
        const pf_im2col *c = a->x_im2col;
        const int64_t lim = INT32_MAX;
        if (a->rows > lim || a->inner > lim || c->channels > lim || c->height > lim || c->width > lim ||
            c->kh * c->kw > lim) {
            set_err(err, errlen, "dpe_conv2d on OpenCL: image, patch and output sizes must be below 2**31");
            return PF_EINVAL;
        }
    }
    const int kx = im2col ? K_PACK_XI : K_PACK_X;
    const int out_nphw = a->so_p == a->rows && a->so_r == 1 && a->so_n == a->rows * a->cols;
    if (!out_nphw && (a->so_p != 1 || a->so_r != a->cols || a->so_n != a->rows * a->cols)) {
        set_err(err, errlen, "dpe_mvm on OpenCL: the output must be contiguous (N, R, P) or (N, P, R)");
        return PF_EINVAL;
    }
    if (w && !pf_cl_weights_match(w, a)) {
        set_err(err, errlen, "dpe_mvm on OpenCL: resident weights do not match the weight arguments");
        return PF_EINVAL;
    }
    if (a->batch == 0 || a->rows == 0 || a->cols == 0)
        return PF_OK;
    if (a->inner == 0) {
        for (int64_t e = 0; e < a->batch * a->rows * a->cols; e++)
            a->out[e] = 0.0f;
        return PF_OK;
    }
    const int64_t D = (int64_t)(a->rdac - 1) * (a->g_level - 1) * a->n;
    if (D >= ((int64_t)1 << 24)) {
        set_err(err, errlen, "dpe_mvm: (rdac-1)*(g_level-1)*n must be below 2**24");
        return PF_EINVAL;
    }
    pf_status st = pf_cl_build(dev, err, errlen);
    if (st != PF_OK)
        return st;
    int kt = 0;
    const int tiled = pf_cl_mvm_uses_tiled(dev, a->n, &kt);
    const int km = tiled ? K_MVM_TILED : K_MVM;
    if (tiled && kt < 1) {
        set_err(err, errlen, "dpe_mvm on OpenCL: the tiled MVM kernel was requested but %s has too little local "
                "memory (%llu bytes) for its tiles", dev->info.name, (unsigned long long)dev->info.local_mem_bytes);
        return PF_EDEVICE;
    }

    /* geometry, every size overflow-checked */
    const size_t n = (size_t)a->n, sx = (size_t)a->sx, sw = (size_t)a->sw;
    const size_t K = (size_t)a->inner, P = (size_t)a->cols, R = (size_t)a->rows;
    const size_t nb = (K + n - 1) / n;
    size_t Kp, G, unit_r, unit_c, Pp, a_row, cap_rows, Gc;
    size_t b_x, b_xs, b_out, b_A, b_RS, b_B, b_CS, b_sig, t1, b_img = 0;
    size_t nbase, t2;
    if (pf_mul_size(nb, n, &Kp) || pf_mul_size((size_t)a->batch, R, &G) || nb > INT32_MAX ||
        pf_mul_size((size_t)a->x_item0, R, &nbase) || pf_add_size(nbase, G, &t2) || pf_mul_size(t2, sx * K, &t2))
        return PF_EOVERFLOW; /* noise indices must fit too */
    unit_r = (size_t)dev->tm * dev->ly;
    unit_c = (size_t)dev->tn * dev->lx;
    if (pf_add_size(P, unit_c, &t1) || pf_add_size(G, unit_r, &t1))
        return PF_EOVERFLOW;
    Pp = round_up(P, unit_c);
    if (pf_mul_size(sx * sizeof(float), Kp, &a_row))
        return PF_EOVERFLOW;
    cap_rows = PF_CL_A_CHUNK_BYTES / a_row / unit_r * unit_r;
    if (cap_rows < unit_r)
        cap_rows = unit_r;
    Gc = round_up(G, unit_r);
    if (Gc > cap_rows)
        Gc = cap_rows;
    {
        size_t dx[3] = {sx, G, K}, dxs[3] = {(size_t)a->batch, (size_t)a->x_gr, (size_t)a->x_gc * sizeof(float)};
        size_t dout[3] = {G, P, sizeof(float)}, dA[3] = {a_row, Gc, 1}, dRS[3] = {nb, Gc, sizeof(float)};
        size_t dB[4] = {sw, Kp, Pp, sizeof(float)}, dCS[3] = {nb, Pp, sizeof(float)};
        if (pf_mul_sizes(dx, 3, &b_x) || pf_mul_sizes(dxs, 3, &b_xs) || pf_mul_sizes(dout, 3, &b_out) ||
            pf_mul_sizes(dA, 3, &b_A) || pf_mul_sizes(dRS, 3, &b_RS) || pf_mul_sizes(dB, 4, &b_B) ||
            pf_mul_sizes(dCS, 3, &b_CS) || pf_mul_size((size_t)a->g_level, sizeof(float), &b_sig))
            return PF_EOVERFLOW;
        if (im2col && im2col_bytes(a->x_im2col, a->batch, &b_img) != PF_OK)
            return PF_EOVERFLOW;
    }

    /* An output above the device's largest buffer (CL_DEVICE_MAX_MEM_ALLOC_SIZE, e.g. 4 GiB) is
     * computed a row chunk at a time into a chunk-sized buffer read back after each chunk. */
    const uint64_t out_limit = output_limit(dev);
    const int split_out = (uint64_t)b_out > out_limit;
    size_t b_out_chunk = 0;
    if (split_out) {
        if (out_nphw) {
            set_err(err, errlen, "dpe_conv2d on OpenCL: the output needs %zu bytes, above the largest buffer of %s "
                    "(%llu bytes, CL_DEVICE_MAX_MEM_ALLOC_SIZE); convolution outputs are not split: use a smaller "
                    "batch, or the CPU", b_out, dev->info.name, (unsigned long long)out_limit);
            return PF_EINVAL;
        }
        if (pf_mul_size(Gc, P * sizeof(float), &b_out_chunk))
            return PF_EOVERFLOW;
        if ((uint64_t)b_out_chunk > out_limit) {
            set_err(err, errlen, "dpe_mvm on OpenCL: the output needs %zu bytes, above the largest buffer of %s "
                    "(%llu bytes, CL_DEVICE_MAX_MEM_ALLOC_SIZE), and even one chunk of %zu rows (%zu bytes) does "
                    "not fit", b_out, dev->info.name, (unsigned long long)out_limit, Gc, b_out_chunk);
            return PF_EINVAL;
        }
    }

    cl_setup s;
    if ((st = setup_init(a, &s)) != PF_OK)
        return st;
    enum { M_X, M_XS, M_IMG, M_GMAX, M_WL, M_WC, M_WS, M_SIG, M_FP, M_DAC, M_TAB, M_TI, M_OUT, M_COUNT };
    cl_mem m[M_COUNT] = {0};
    cl_mem sA, sRS, sB, sCS;
    int out_shared = 0;
    if ((st = buf_in(dev, im2col ? NULL : a->x_codes, b_x, "x_codes", &m[M_X], err, errlen)) != PF_OK ||
        (st = buf_in(dev, im2col ? NULL : a->x_scale, b_xs, "x_scale", &m[M_XS], err, errlen)) != PF_OK ||
        (st = buf_in(dev, im2col ? a->x_im2col->image : NULL, b_img, "input", &m[M_IMG], err, errlen)) != PF_OK ||
        (st = buf_in(dev, im2col ? a->x_gran_max : NULL, b_xs, "x_gran_max", &m[M_GMAX], err, errlen)) != PF_OK ||
        (st = buf_in(dev, a->read_sigma, a->read_sigma ? b_sig : 0, "read_sigma", &m[M_SIG], err, errlen)) != PF_OK ||
        (st = buf_in(dev, s.fparams, (sx * sw + sw) * sizeof(float), "parameters", &m[M_FP], err, errlen)) != PF_OK ||
        (st = buf_in(dev, s.dac, sx * 256 * sizeof(float), "DAC table", &m[M_DAC], err, errlen)) != PF_OK ||
        (st = buf_in(dev, s.tables, s.table_floats * sizeof(float), "ADC tables", &m[M_TAB], err, errlen)) != PF_OK ||
        (st = buf_in(dev, s.tab_info, sizeof s.tab_info, "ADC table index", &m[M_TI], err, errlen)) != PF_OK ||
        (st = split_out ? PF_OK : buf_out(dev, a->out, b_out, &m[M_OUT], &out_shared, err, errlen)) != PF_OK)
        goto fail;
    if (!w) {
        size_t bl, bc, bs;
        if ((st = weight_sizes(a, &bl, &bc, &bs)) != PF_OK ||
            (st = buf_in(dev, a->w_levels, bl, "w_levels", &m[M_WL], err, errlen)) != PF_OK ||
            (st = buf_in(dev, a->w_conductance, bc, "w_conductance", &m[M_WC], err, errlen)) != PF_OK ||
            (st = buf_in(dev, a->w_scale, bs, "w_scale", &m[M_WS], err, errlen)) != PF_OK)
            goto fail;
    }
    cl_mem wl = w ? w->levels : m[M_WL], wc = w ? w->cond : m[M_WC], ws = w ? w->scale : m[M_WS];
    /* normals drawn by pf_normals_range: the chunk's voltage noise, the weights' read noise */
    cl_mem sZ = NULL, sZW = NULL;
    const int read_noise = s.noise_w && a->read_sigma;
    size_t b_zw;
    size_t dzw[4] = {sw, K, P, sizeof(float)};
    if (pf_mul_sizes(dzw, 4, &b_zw)) {
        st = PF_EOVERFLOW;
        goto fail;
    }
    if ((st = scratch_get(dev, SCR_Z, s.noise_x ? b_A : 64, "voltage noise", &sZ, err, errlen)) != PF_OK ||
        (st = scratch_get(dev, SCR_ZW, read_noise ? b_zw : 64, "read noise", &sZW, err, errlen)) != PF_OK)
        goto fail;
    if ((st = scratch_get(dev, SCR_A, b_A, "packed inputs", &sA, err, errlen)) != PF_OK ||
        (st = scratch_get(dev, SCR_RS, b_RS, "input scales", &sRS, err, errlen)) != PF_OK ||
        (st = scratch_get(dev, SCR_B, b_B, "packed weights", &sB, err, errlen)) != PF_OK ||
        (st = scratch_get(dev, SCR_CS, b_CS, "weight scales", &sCS, err, errlen)) != PF_OK)
        goto fail;

    const float QG = (float)((a->HGS - a->LGS) / (a->g_level - 1));
    const float lgs = (float)(a->LGS / ((a->HGS - a->LGS) / (a->g_level - 1)));
    {
        const uint64_t sig_b[4] = {sw, Kp, Pp, K * 0x100000000ull + P};
        const uint64_t sig_a[4] = {sx, Kp, Gc, K};
        if ((st = scratch_zero(dev, SCR_B, sig_b, err, errlen)) != PF_OK ||
            (st = scratch_zero(dev, SCR_A, sig_a, err, errlen)) != PF_OK)
            goto fail;
        size_t total, dw[3] = {sw, K, P};
        if (pf_mul_sizes(dw, 3, &total)) {
            st = PF_EOVERFLOW;
            goto fail;
        }
        if (read_noise && (st = normals_range_cancel(dev, sZW, a->seed, 0u /* PF_STREAM_READ */, a->call, 0, total,
                                                     a->cancel, err, errlen)) != PF_OK)
            goto fail;
        cl_kernel k = dev->k[K_PACK_W];
        SET_ARG(k, 0, cl_mem, wl);
        SET_ARG(k, 1, cl_mem, wc);
        SET_ARG(k, 2, cl_mem, m[M_SIG]);
        SET_ARG(k, 3, cl_mem, sB);
        SET_ARG(k, 4, cl_ulong, K);
        SET_ARG(k, 5, cl_ulong, P);
        SET_ARG(k, 6, cl_ulong, Kp);
        SET_ARG(k, 7, cl_ulong, Pp);
        SET_ARG(k, 8, cl_ulong, n);
        SET_ARG(k, 9, cl_ulong, total);
        SET_ARG(k, 10, cl_int, s.noise_w);
        SET_ARG(k, 11, cl_int, a->w_conductance != NULL);
        SET_ARG(k, 12, cl_int, a->read_sigma != NULL);
        SET_ARG(k, 13, cl_float, QG);
        SET_ARG(k, 14, cl_float, lgs);
        SET_ARG(k, 15, cl_ulong, a->seed);
        SET_ARG(k, 16, cl_uint, a->call);
        SET_ARG(k, 17, cl_uint, (cl_uint)(a->g_level - 1));
        SET_ARG(k, 18, cl_mem, sZW);
        size_t gws = round_up((total + 3) / 4, dev->pack_local), lws = dev->pack_local;
        if ((st = enqueue_split(dev, k, "pf_dpe_pack_w", 1, &gws, &lws, a->cancel, total / PF_CL_PIECE_ELEMS + 1,
                                err, errlen)) != PF_OK)
            goto fail;
        k = dev->k[K_SCALES_W];
        SET_ARG(k, 0, cl_mem, ws);
        SET_ARG(k, 1, cl_mem, sCS);
        SET_ARG(k, 2, cl_ulong, P);
        SET_ARG(k, 3, cl_ulong, Pp);
        SET_ARG(k, 4, cl_ulong, n);
        SET_ARG(k, 5, cl_ulong, (cl_ulong)a->w_qr);
        SET_ARG(k, 6, cl_ulong, (cl_ulong)a->w_qc);
        SET_ARG(k, 7, cl_ulong, (cl_ulong)a->w_gc);
        size_t gcs[2] = {Pp, nb};
        if ((st = enqueue(dev, k, "pf_dpe_scales_w", 2, gcs, NULL, err, errlen)) != PF_OK)
            goto fail;
    }
    {
        cl_kernel k = dev->k[kx];
        SET_ARG(k, 0, cl_mem, m[M_X]);
        SET_ARG(k, 1, cl_mem, m[M_XS]);
        SET_ARG(k, 2, cl_mem, m[M_DAC]);
        SET_ARG(k, 3, cl_mem, sA);
        SET_ARG(k, 4, cl_mem, sRS);
        SET_ARG(k, 5, cl_ulong, G);
        SET_ARG(k, 6, cl_ulong, R);
        SET_ARG(k, 7, cl_ulong, K);
        SET_ARG(k, 8, cl_ulong, Kp);
        SET_ARG(k, 9, cl_ulong, Gc);
        SET_ARG(k, 12, cl_ulong, n);
        SET_ARG(k, 13, cl_ulong, (cl_ulong)a->x_qr);
        SET_ARG(k, 14, cl_ulong, (cl_ulong)a->x_qc);
        SET_ARG(k, 15, cl_ulong, (cl_ulong)a->x_gr);
        SET_ARG(k, 16, cl_ulong, (cl_ulong)a->x_gc);
        SET_ARG(k, 17, cl_int, s.noise_x);
        SET_ARG(k, 18, cl_float, (float)a->vnoise);
        SET_ARG(k, 19, cl_ulong, a->seed);
        SET_ARG(k, 20, cl_uint, a->call);
        SET_ARG(k, 21, cl_ulong, sx);
        SET_ARG(k, 22, cl_ulong, nbase);
        if (im2col) {
            SET_ARG(k, 23, cl_mem, m[M_IMG]);
            SET_ARG(k, 24, cl_mem, m[M_GMAX]);
            SET_ARG(k, 25, cl_long16, im2col_geo(a->x_im2col));
            SET_ARG(k, 26, cl_int, a->x_method.total_bits);
            SET_ARG(k, 27, cl_int, a->x_bfp != 0);
            SET_ARG(k, 28, cl_ulong, slice_offsets(&a->x_method));
        }
        SET_ARG(k, im2col ? 29 : 23, cl_mem, sZ);
        k = dev->k[km];
        if (tiled && (st = mvm_tiled_args(dev, k, kt, err, errlen)) != PF_OK)
            goto fail;
        SET_ARG(k, 0, cl_mem, sA);
        SET_ARG(k, 1, cl_mem, sB);
        SET_ARG(k, 2, cl_mem, sRS);
        SET_ARG(k, 3, cl_mem, sCS);
        SET_ARG(k, 4, cl_mem, m[M_FP]);
        SET_ARG(k, 5, cl_mem, m[M_TAB]);
        SET_ARG(k, 6, cl_mem, m[M_TI]);
        SET_ARG(k, 7, cl_mem, m[M_OUT]);
        SET_ARG(k, 10, cl_ulong, Gc);
        SET_ARG(k, 11, cl_ulong, Kp);
        SET_ARG(k, 12, cl_ulong, Pp);
        SET_ARG(k, 13, cl_ulong, P);
        SET_ARG(k, 14, cl_int, (int)n);
        SET_ARG(k, 15, cl_int, (int)nb);
        SET_ARG(k, 16, cl_int, a->sx);
        SET_ARG(k, 17, cl_int, a->sw);
        SET_ARG(k, 18, cl_int, s.any_table);
        SET_ARG(k, 19, cl_ulong, R);
        SET_ARG(k, 20, cl_int, out_nphw);
    }
    for (size_t g0 = 0; g0 < G; g0 += Gc) {
        size_t rows = G - g0 < Gc ? G - g0 : Gc;
        SET_ARG(dev->k[kx], 10, cl_ulong, g0);
        SET_ARG(dev->k[kx], 11, cl_ulong, rows);
        if (s.noise_x && (st = normals_range_cancel(dev, sZ, a->seed, 1u /* PF_STREAM_VNOISE */, a->call,
                                                    (nbase + g0) * sx * K, (nbase + g0 + rows) * sx * K, a->cancel,
                                                    err, errlen)) != PF_OK)
            goto fail;
        if (im2col) {
            size_t gx[2] = {rows, (K + 3) / 4};
            if ((st = enqueue_split(dev, dev->k[kx], "pf_dpe_pack_x_im2col", 2, gx, NULL, a->cancel,
                                    rows * sx * K / PF_CL_PIECE_ELEMS + 1, err, errlen)) != PF_OK)
                goto fail;
        } else {
            size_t gx = round_up(rows * sx * K / 4 + 2, dev->pack_local), lx = dev->pack_local;
            if ((st = enqueue_split(dev, dev->k[kx], "pf_dpe_pack_x", 1, &gx, &lx, a->cancel,
                                    rows * sx * K / PF_CL_PIECE_ELEMS + 1, err, errlen)) != PF_OK)
                goto fail;
        }
        cl_mem out_chunk = NULL;
        if (split_out) { /* this chunk's rows only, read back below (rows g0.. are contiguous in (N, R, P)) */
            cl_int rc;
            out_chunk = clCreateBuffer(dev->ctx, CL_MEM_READ_WRITE, b_out_chunk, NULL, &rc);
            CL_CHECK(rc, "clCreateBuffer(output chunk)");
            m[M_OUT] = out_chunk;
            SET_ARG(dev->k[km], 7, cl_mem, out_chunk);
        }
        SET_ARG(dev->k[km], 8, cl_ulong, split_out ? 0 : g0);
        SET_ARG(dev->k[km], 9, cl_ulong, rows);
        size_t gm[2] = {Pp / (size_t)dev->tn, Gc / (size_t)dev->tm}, lm[2] = {dev->lx, dev->ly};
        /* the tiled kernel indexes by work-group (get_group_id ignores global offsets): never split it */
        if ((st = km == K_MVM
                      ? enqueue_split(dev, dev->k[km], kernel_names[km], 2, gm, lm, a->cancel,
                                      (uint64_t)rows * P * Kp * sx * sw / PF_CL_PIECE_MACS + 1, err, errlen)
                      : enqueue(dev, dev->k[km], kernel_names[km], 2, gm, lm, err, errlen)) != PF_OK)
            goto fail;
        if (split_out) {
            CL_CHECK(clEnqueueReadBuffer(dev->queue, out_chunk, CL_TRUE, 0, rows * P * sizeof(float), a->out + g0 * P,
                                         0, NULL, NULL), "clEnqueueReadBuffer(output chunk)");
            pf_record_copy(PF_COPY_DEVICE_TO_HOST, rows * P * sizeof(float));
            clReleaseMemObject(out_chunk);
            m[M_OUT] = NULL;
        }
    }
    st = split_out ? PF_OK : buf_finish_out(dev, m[M_OUT], a->out, b_out, out_shared, err, errlen);
    release_mems(m, M_COUNT);
    setup_free(&s);
    return st;
fail:
    clFinish(dev->queue); /* nothing may still read host memory freed below */
    release_mems(m, M_COUNT);
    setup_free(&s);
    return st;
}

pf_status pf_cl_normals(pf_cl_device *dev, uint64_t seed, uint32_t stream, uint32_t call, uint64_t idx0,
                        int64_t count, float *out, char *err, size_t errlen)
{
    if (count <= 0)
        return PF_OK;
    pf_status st = pf_cl_build(dev, err, errlen);
    if (st != PF_OK)
        return st;
    size_t bytes;
    if (pf_mul_size((size_t)count, sizeof(float), &bytes))
        return PF_EOVERFLOW;
    cl_mem mo = NULL;
    int shared = 0;
    if ((st = buf_out(dev, out, bytes, &mo, &shared, err, errlen)) != PF_OK)
        return st;
    cl_kernel k = dev->k[K_NORMALS];
    SET_ARG(k, 0, cl_mem, mo);
    SET_ARG(k, 1, cl_ulong, seed);
    SET_ARG(k, 2, cl_uint, stream);
    SET_ARG(k, 3, cl_uint, call);
    SET_ARG(k, 4, cl_ulong, idx0);
    SET_ARG(k, 5, cl_ulong, (cl_ulong)count);
    {
        size_t gws = (size_t)count;
        if ((st = enqueue(dev, k, "pf_normals", 1, &gws, NULL, err, errlen)) != PF_OK)
            goto fail;
    }
    st = buf_finish_out(dev, mo, out, bytes, shared, err, errlen);
    clReleaseMemObject(mo);
    return st;
fail:
    clFinish(dev->queue);
    clReleaseMemObject(mo);
    return st;
}

/* ---- bit-slice/quantize and weight programming (kernels/slicing.cl) ---- */

#define PF_CL_SLICE_SUB 1024 /* columns per max-pass work-item */
#define PF_CL_SQ_CHUNK 256  /* columns per quantize work-item (PF_SQ_CHUNK in slicing.cl) */

static void release_all(pf_cl_device *dev, cl_mem *m, int n)
{
    clFinish(dev->queue); /* nothing may still use host memory the caller frees */
    release_mems(m, n);
}

pf_status pf_cl_slice_quantize(pf_cl_device *dev, const float *x, int64_t n, int64_t rows, int64_t cols,
                               int64_t gran_rows, int64_t gran_cols, const pf_slice_method *sm, int bfp,
                               uint8_t *codes, float *gran_max, float *gran_scale, int32_t *gran_exp, float *dequant,
                               int g_level, uint8_t *levels, char *err, size_t errlen)
{
    pf_status vst = pf_validate_slice_args(n, rows, cols, gran_rows, gran_cols, sm, levels != NULL, g_level);
    if (vst != PF_OK) /* the one contract (core/contract.h) */
        return vst;
    if (!x || !codes || !gran_max || !gran_scale || (bfp && !gran_exp)) {
        set_err(err, errlen, "slice_quantize: missing buffers");
        return PF_EINVAL;
    }
    const size_t NR = (size_t)n * (size_t)rows;
    const size_t gr = (size_t)pf_ceil_div(rows, gran_rows) , gcn = (size_t)pf_ceil_div(cols, gran_cols);
    size_t total, b_x, b_codes, ng, b_g;
    if (pf_mul_size(NR, (size_t)cols, &total) || pf_mul_size(total, sizeof(float), &b_x) ||
        pf_mul_size(total, (size_t)sm->n_slices, &b_codes) || pf_mul_size((size_t)n * gr, gcn, &ng) ||
        pf_mul_size(ng, sizeof(float), &b_g))
        return PF_EOVERFLOW;
    pf_status st = pf_cl_build(dev, err, errlen);
    if (st != PF_OK)
        return st;
    enum { X, GMAX, GSCALE, GEXP, CODES, DQ, LEV, BAD, COUNT };
    cl_mem m[COUNT] = {0};
    int sh[COUNT] = {0};
    cl_int bad = 0;
    if ((st = buf_in(dev, x, b_x, "data", &m[X], err, errlen)) != PF_OK ||
        (st = buf_out(dev, gran_max, b_g, &m[GMAX], &sh[GMAX], err, errlen)) != PF_OK ||
        (st = buf_out(dev, gran_scale, b_g, &m[GSCALE], &sh[GSCALE], err, errlen)) != PF_OK ||
        (st = buf_out(dev, codes, b_codes, &m[CODES], &sh[CODES], err, errlen)) != PF_OK ||
        (st = buf_out(dev, &bad, sizeof bad, &m[BAD], &sh[BAD], err, errlen)) != PF_OK ||
        (gran_exp && (st = buf_out(dev, gran_exp, b_g, &m[GEXP], &sh[GEXP], err, errlen)) != PF_OK) ||
        (dequant && (st = buf_out(dev, dequant, b_x, &m[DQ], &sh[DQ], err, errlen)) != PF_OK) ||
        (levels && (st = buf_out(dev, levels, b_codes, &m[LEV], &sh[LEV], err, errlen)) != PF_OK))
        goto fail;
    /* kernels need a valid buffer in every argument: absent outputs get placeholders */
    if ((!m[GEXP] && (st = buf_in(dev, NULL, 0, "", &m[GEXP], err, errlen)) != PF_OK) ||
        (!m[DQ] && (st = buf_in(dev, NULL, 0, "", &m[DQ], err, errlen)) != PF_OK) ||
        (!m[LEV] && (st = buf_in(dev, NULL, 0, "", &m[LEV], err, errlen)) != PF_OK))
        goto fail;
    {
        const cl_uint zero = 0;
        CL_CHECK(clEnqueueFillBuffer(dev->queue, m[GMAX], &zero, sizeof zero, 0, b_g, 0, NULL, NULL),
                 "clEnqueueFillBuffer(gran_max)");
        CL_CHECK(clEnqueueFillBuffer(dev->queue, m[BAD], &zero, sizeof zero, 0, sizeof zero, 0, NULL, NULL),
                 "clEnqueueFillBuffer(flag)");
        cl_kernel k = dev->k[K_SMAX];
        SET_ARG(k, 0, cl_mem, m[X]);
        SET_ARG(k, 1, cl_mem, m[GMAX]);
        SET_ARG(k, 2, cl_ulong, NR);
        SET_ARG(k, 3, cl_ulong, (cl_ulong)rows);
        SET_ARG(k, 4, cl_ulong, (cl_ulong)cols);
        SET_ARG(k, 5, cl_ulong, (cl_ulong)gran_rows);
        SET_ARG(k, 6, cl_ulong, (cl_ulong)gran_cols);
        SET_ARG(k, 7, cl_ulong, gr);
        SET_ARG(k, 8, cl_ulong, gcn);
        SET_ARG(k, 9, cl_ulong, (cl_ulong)PF_CL_SLICE_SUB);
        size_t g2[2] = {NR, ((size_t)cols + PF_CL_SLICE_SUB - 1) / PF_CL_SLICE_SUB};
        if ((st = enqueue(dev, k, "pf_slice_max", 2, g2, NULL, err, errlen)) != PF_OK)
            goto fail;
        k = dev->k[K_SSTATS];
        SET_ARG(k, 0, cl_mem, m[GMAX]);
        SET_ARG(k, 1, cl_mem, m[GSCALE]);
        SET_ARG(k, 2, cl_mem, m[GEXP]);
        SET_ARG(k, 3, cl_mem, m[BAD]);
        SET_ARG(k, 4, cl_ulong, ng);
        SET_ARG(k, 5, cl_int, sm->total_bits);
        SET_ARG(k, 6, cl_int, bfp != 0);
        size_t g1 = round_up(ng, dev->pack_local), l1 = dev->pack_local;
        if ((st = enqueue(dev, k, "pf_slice_stats", 1, &g1, &l1, err, errlen)) != PF_OK)
            goto fail;
        k = dev->k[K_SQUANT];
        SET_ARG(k, 0, cl_mem, m[X]);
        SET_ARG(k, 1, cl_mem, m[GMAX]);
        SET_ARG(k, 2, cl_mem, m[CODES]);
        SET_ARG(k, 3, cl_mem, m[DQ]);
        SET_ARG(k, 4, cl_mem, m[LEV]);
        SET_ARG(k, 5, cl_ulong, total);
        SET_ARG(k, 6, cl_ulong, NR);
        SET_ARG(k, 7, cl_ulong, (cl_ulong)rows);
        SET_ARG(k, 8, cl_ulong, (cl_ulong)cols);
        SET_ARG(k, 9, cl_ulong, (cl_ulong)gran_rows);
        SET_ARG(k, 10, cl_ulong, (cl_ulong)gran_cols);
        SET_ARG(k, 11, cl_ulong, gr);
        SET_ARG(k, 12, cl_ulong, gcn);
        SET_ARG(k, 13, cl_int, sm->total_bits);
        SET_ARG(k, 14, cl_int, bfp != 0);
        SET_ARG(k, 15, cl_ulong, slice_offsets(sm));
        SET_ARG(k, 16, cl_int, sm->n_slices);
        SET_ARG(k, 17, cl_int, dequant != NULL);
        SET_ARG(k, 18, cl_int, levels ? g_level : 0);
        size_t gq[2] = {NR, ((size_t)cols + PF_CL_SQ_CHUNK - 1) / PF_CL_SQ_CHUNK};
        if ((st = enqueue(dev, k, "pf_slice_quant", 2, gq, NULL, err, errlen)) != PF_OK)
            goto fail;
    }
    if ((st = buf_finish_out(dev, m[BAD], &bad, sizeof bad, sh[BAD], err, errlen)) != PF_OK ||
        (st = buf_finish_out(dev, m[GMAX], gran_max, b_g, sh[GMAX], err, errlen)) != PF_OK ||
        (st = buf_finish_out(dev, m[GSCALE], gran_scale, b_g, sh[GSCALE], err, errlen)) != PF_OK ||
        (st = buf_finish_out(dev, m[CODES], codes, b_codes, sh[CODES], err, errlen)) != PF_OK ||
        (gran_exp && (st = buf_finish_out(dev, m[GEXP], gran_exp, b_g, sh[GEXP], err, errlen)) != PF_OK) ||
        (dequant && (st = buf_finish_out(dev, m[DQ], dequant, b_x, sh[DQ], err, errlen)) != PF_OK) ||
        (levels && (st = buf_finish_out(dev, m[LEV], levels, b_codes, sh[LEV], err, errlen)) != PF_OK))
        goto fail;
    release_mems(m, COUNT);
    if (bad)
        return pf_fail(PF_ENONFINITE, "data", "contains NaN or infinity; quantization needs finite values");
    return PF_OK;
fail:
    release_all(dev, m, COUNT);
    return st;
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
                                    int64_t cols, const pf_program_params *p, float *conductance, char *err,
                                    size_t errlen)
{
    pf_status vst = pf_validate_program_params(p); /* the one contract (core/contract.h) */
    if (vst != PF_OK)
        return vst;
    if (n_slices < 0 || rows < 0 || cols < 0) {
        set_err(err, errlen, "program_conductance: negative sizes");
        return PF_EINVAL;
    }
    size_t dims[3] = {(size_t)n_slices, (size_t)rows, (size_t)cols}, total, b_l, b_g;
    if (pf_mul_sizes(dims, 3, &total) || pf_mul_size(total, sizeof(float), &b_g) || total > (size_t)INT64_MAX)
        return PF_EOVERFLOW;
    b_l = total;
    if (total == 0)
        return PF_OK;
    if (!levels || !conductance) {
        set_err(err, errlen, "program_conductance: missing arrays");
        return PF_EINVAL;
    }
    pf_status st = pf_cl_build(dev, err, errlen);
    if (st != PF_OK)
        return st;
    cl_mem m[2] = {0};
    int shared = 0;
    if ((st = buf_in(dev, levels, b_l, "levels", &m[0], err, errlen)) != PF_OK ||
        (st = buf_out(dev, conductance, b_g, &m[1], &shared, err, errlen)) != PF_OK)
        goto fail;
    {
        cl_kernel k = dev->k[K_PCOND];
        SET_ARG(k, 0, cl_mem, m[0]);
        SET_ARG(k, 1, cl_mem, m[1]);
        SET_ARG(k, 2, cl_ulong, total);
        SET_ARG(k, 3, cl_float, (float)((p->hgs - p->lgs) / (double)(p->g_level - 1)));
        SET_ARG(k, 4, cl_float, (float)p->lgs);
        SET_ARG(k, 5, cl_float, (float)p->hgs);
        SET_ARG(k, 6, cl_float, (float)p->write_variation);
        SET_ARG(k, 7, cl_int, p->write_variation > 0);
        SET_ARG(k, 8, cl_int, p->rate_stuck_hgs > 0 || p->rate_stuck_lgs > 0);
        SET_ARG(k, 9, cl_float, float_ceil(p->rate_stuck_hgs));
        SET_ARG(k, 10, cl_float, float_ceil(p->rate_stuck_hgs + p->rate_stuck_lgs));
        SET_ARG(k, 11, cl_ulong, p->seed);
        size_t gws = round_up((total + 3) / 4, dev->pack_local), lws = dev->pack_local;
        if ((st = enqueue(dev, k, "pf_program_cond", 1, &gws, &lws, err, errlen)) != PF_OK)
            goto fail;
    }
    if ((st = buf_finish_out(dev, m[1], conductance, b_g, shared, err, errlen)) != PF_OK)
        goto fail;
    release_mems(m, 2);
    return PF_OK;
fail:
    release_all(dev, m, 2);
    return st;
}

/* ---- attention context (kernels/attention.cl) ---- */

pf_status pf_cl_attn_update(pf_cl_device *dev, float *outgoing, int64_t d, const float *x, int64_t ldx,
                            const float *y, int64_t ldy, int64_t t, double rate, char *err, size_t errlen)
{
    if (!(rate > 0.0) || t <= 0 || d <= 0)
        return PF_OK;
    if (d > ldx || d > ldy) {
        set_err(err, errlen, "attention update: D exceeds the rows' length");
        return PF_EINVAL;
    }
    const int64_t n = t < PF_ATTN_SAMPLES ? t : PF_ATTN_SAMPLES, step = t / n > 1 ? t / n : 1;
    size_t dd, b_o, b_x, b_y, b_s, t1;
    if (pf_mul_size((size_t)d, (size_t)d, &dd) || pf_mul_size(dd, sizeof(float), &b_o) ||
        pf_mul_size((size_t)((n - 1) * step), (size_t)ldx, &t1) || pf_add_size(t1, (size_t)d, &t1) ||
        pf_mul_size(t1, sizeof(float), &b_x) || pf_mul_size((size_t)((n - 1) * step), (size_t)ldy, &t1) ||
        pf_add_size(t1, (size_t)d, &t1) || pf_mul_size(t1, sizeof(float), &b_y) ||
        pf_mul_size((size_t)n * sizeof(float), (size_t)d, &b_s))
        return PF_EOVERFLOW;
    pf_status st = pf_cl_build(dev, err, errlen);
    if (st != PF_OK)
        return st;
    enum { MX, MY, MO, XS, YS, NX, NY, COUNT };
    cl_mem m[COUNT] = {0};
    int shared = 0;
    cl_int rc;
    if ((st = buf_in(dev, x, b_x, "x", &m[MX], err, errlen)) != PF_OK ||
        (st = buf_in(dev, y, b_y, "y", &m[MY], err, errlen)) != PF_OK)
        goto fail;
    /* outgoing is read and written: shared in place, or written to the device once and read back */
    shared = shareable(dev, outgoing);
    m[MO] = clCreateBuffer(dev->ctx, CL_MEM_READ_WRITE | (shared ? CL_MEM_USE_HOST_PTR : 0), b_o,
                           shared ? outgoing : NULL, &rc);
    CL_CHECK(rc, "clCreateBuffer(outgoing)");
    if (!shared) {
        CL_CHECK(clEnqueueWriteBuffer(dev->queue, m[MO], CL_TRUE, 0, b_o, outgoing, 0, NULL, NULL),
                 "clEnqueueWriteBuffer(outgoing)");
        pf_record_copy(PF_COPY_HOST_TO_DEVICE, b_o);
    }
    {
        const size_t bytes[4] = {b_s, b_s, (size_t)d * sizeof(float), (size_t)d * sizeof(float)};
        for (int i = 0; i < 4; i++) {
            m[XS + i] = clCreateBuffer(dev->ctx, CL_MEM_READ_WRITE, bytes[i], NULL, &rc);
            CL_CHECK(rc, "clCreateBuffer(attention sample)");
        }
    }
    for (int side = 0; side < 2; side++) {
        cl_kernel k = dev->k[K_ACENTRE];
        SET_ARG(k, 0, cl_mem, m[side ? MY : MX]);
        SET_ARG(k, 1, cl_ulong, (cl_ulong)(side ? ldy : ldx));
        SET_ARG(k, 2, cl_ulong, (cl_ulong)step);
        SET_ARG(k, 3, cl_ulong, (cl_ulong)n);
        SET_ARG(k, 4, cl_ulong, (cl_ulong)d);
        SET_ARG(k, 5, cl_mem, m[side ? YS : XS]);
        SET_ARG(k, 6, cl_mem, m[side ? NY : NX]);
        size_t g = (size_t)d;
        if ((st = enqueue(dev, k, "pf_attn_centre", 1, &g, NULL, err, errlen)) != PF_OK)
            goto fail;
    }
    {
        cl_kernel k = dev->k[K_AUPDATE];
        SET_ARG(k, 0, cl_mem, m[MO]);
        SET_ARG(k, 1, cl_mem, m[XS]);
        SET_ARG(k, 2, cl_mem, m[YS]);
        SET_ARG(k, 3, cl_mem, m[NX]);
        SET_ARG(k, 4, cl_mem, m[NY]);
        SET_ARG(k, 5, cl_ulong, (cl_ulong)n);
        SET_ARG(k, 6, cl_ulong, (cl_ulong)d);
        SET_ARG(k, 7, cl_float, (float)(1.0 - rate));
        SET_ARG(k, 8, cl_float, (float)rate);
        size_t g[2] = {(size_t)d, (size_t)d};
        if ((st = enqueue(dev, k, "pf_attn_update", 2, g, NULL, err, errlen)) != PF_OK)
            goto fail;
    }
    if ((st = buf_finish_out(dev, m[MO], outgoing, b_o, shared, err, errlen)) != PF_OK)
        goto fail;
    release_mems(m, COUNT);
    return PF_OK;
fail:
    release_all(dev, m, COUNT);
    return st;
}

pf_status pf_cl_attn_apply(pf_cl_device *dev, float *out, const float *x, const float *w, int64_t t, int64_t d,
                           double s, char *err, size_t errlen)
{
    size_t n, nbytes, b_w;
    if (t < 0 || d <= 0) {
        set_err(err, errlen, "attention apply: invalid sizes");
        return PF_EINVAL;
    }
    if (pf_mul_size((size_t)t, (size_t)d, &n) || pf_mul_size(n, sizeof(float), &nbytes) ||
        pf_mul_size((size_t)d * sizeof(float), (size_t)d, &b_w))
        return PF_EOVERFLOW;
    if (n == 0)
        return PF_OK;
    pf_status st = pf_cl_build(dev, err, errlen);
    if (st != PF_OK)
        return st;
    enum { MX, MW, MO, MP, COUNT };
    cl_mem m[COUNT] = {0};
    int shared = 0;
    cl_int rc;
    if ((st = buf_in(dev, x, nbytes, "x", &m[MX], err, errlen)) != PF_OK ||
        (st = buf_in(dev, w, b_w, "incoming", &m[MW], err, errlen)) != PF_OK ||
        (st = buf_out(dev, out, nbytes, &m[MO], &shared, err, errlen)) != PF_OK)
        goto fail;
    /* the product goes to the output unless the output is x itself (then to a device buffer) */
    if (out == x) {
        m[MP] = clCreateBuffer(dev->ctx, CL_MEM_READ_WRITE, nbytes, NULL, &rc);
        CL_CHECK(rc, "clCreateBuffer(product)");
    }
    {
        cl_mem prod = out == x ? m[MP] : m[MO];
        cl_kernel k = dev->k[K_AMATMUL];
        SET_ARG(k, 0, cl_mem, m[MX]);
        SET_ARG(k, 1, cl_mem, m[MW]);
        SET_ARG(k, 2, cl_mem, prod);
        SET_ARG(k, 3, cl_ulong, (cl_ulong)t);
        SET_ARG(k, 4, cl_ulong, (cl_ulong)d);
        size_t g[2] = {(size_t)d, (size_t)t};
        if ((st = enqueue(dev, k, "pf_attn_matmul", 2, g, NULL, err, errlen)) != PF_OK)
            goto fail;
        /* x as the output's buffer when out is x: on zero-copy devices both wrap the same memory */
        k = dev->k[K_AEPI];
        SET_ARG(k, 0, cl_mem, m[MO]);
        SET_ARG(k, 1, cl_mem, out == x ? m[MO] : m[MX]);
        SET_ARG(k, 2, cl_mem, prod);
        SET_ARG(k, 3, cl_ulong, (cl_ulong)n);
        SET_ARG(k, 4, cl_float, (float)(s / (double)d));
        if (out == x && !shared) { /* the output buffer must start as x */
            CL_CHECK(clEnqueueCopyBuffer(dev->queue, m[MX], m[MO], 0, 0, nbytes, 0, NULL, NULL),
                     "clEnqueueCopyBuffer(x)");
        }
        size_t ge = round_up(n, dev->pack_local), le = dev->pack_local;
        if ((st = enqueue(dev, k, "pf_attn_epilogue", 1, &ge, &le, err, errlen)) != PF_OK)
            goto fail;
    }
    if ((st = buf_finish_out(dev, m[MO], out, nbytes, shared, err, errlen)) != PF_OK)
        goto fail;
    release_mems(m, COUNT);
    return PF_OK;
fail:
    release_all(dev, m, COUNT);
    return st;
}

pf_status pf_cl_attn_tanh(pf_cl_device *dev, float *out, const float *x, int64_t count, char *err, size_t errlen)
{
    size_t bytes;
    if (count <= 0)
        return PF_OK;
    if (pf_mul_size((size_t)count, sizeof(float), &bytes))
        return PF_EOVERFLOW;
    pf_status st = pf_cl_build(dev, err, errlen);
    if (st != PF_OK)
        return st;
    cl_mem m[2] = {0};
    int shared = 0;
    if ((st = buf_in(dev, x, bytes, "x", &m[0], err, errlen)) != PF_OK ||
        (st = buf_out(dev, out, bytes, &m[1], &shared, err, errlen)) != PF_OK)
        goto fail;
    {
        cl_kernel k = dev->k[K_ATANH];
        SET_ARG(k, 0, cl_mem, m[0]);
        SET_ARG(k, 1, cl_mem, m[1]);
        SET_ARG(k, 2, cl_ulong, (cl_ulong)count);
        size_t g = round_up((size_t)count, dev->pack_local), l = dev->pack_local;
        if ((st = enqueue(dev, k, "pf_attn_tanh", 1, &g, &l, err, errlen)) != PF_OK)
            goto fail;
    }
    if ((st = buf_finish_out(dev, m[1], out, bytes, shared, err, errlen)) != PF_OK)
        goto fail;
    release_mems(m, 2);
    return PF_OK;
fail:
    release_all(dev, m, 2);
    return st;
}
