/* OpenCL runtime: platforms and devices, the context and queue of an opened device, the program
 * built from the embedded kernels (kernels/ *.cl), the tile shape and the MVM kernel choice. */
#include "opencl/internal.h"
#include "pf_cl_sources.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#define PF_CL_PLATFORM_NOT_FOUND_KHR (-1001)

pf_status pf_cl_fail_call(cl_int rc, const char *what)
{
    return pf_fail(PF_EDEVICE, NULL, "%s: %s (%d)", what, pf_cl_error_name(rc), (int)rc);
}

/* ---- discovery ---- */

/* The ids an OpenCL query lists (platforms, or the devices of platform p): *out pf_alloc'd, NULL
 * and *n = 0 when there are none. */
static pf_status get_ids(cl_platform_id p, int devices, void **out, cl_uint *n)
{
    *out = NULL;
    *n = 0;
    cl_uint cnt = 0;
    const char *what = devices ? "clGetDeviceIDs" : "clGetPlatformIDs";
    cl_int rc = devices ? clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 0, NULL, &cnt) : clGetPlatformIDs(0, NULL, &cnt);
    if (rc == (devices ? CL_DEVICE_NOT_FOUND : PF_CL_PLATFORM_NOT_FOUND_KHR) || (rc == CL_SUCCESS && cnt == 0))
        return PF_OK;
    PF_CL_TRY(rc, what);
    void *ids = pf_alloc((devices ? sizeof(cl_device_id) : sizeof(cl_platform_id)) * cnt);
    if (!ids)
        return pf_fail(PF_ENOMEM, NULL, "%s: out of memory", what);
    rc = devices ? clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, cnt, ids, NULL) : clGetPlatformIDs(cnt, ids, NULL);
    if (rc != CL_SUCCESS) {
        pf_free(ids);
        return pf_cl_fail_call(rc, what);
    }
    *out = ids;
    *n = cnt;
    return PF_OK;
}

static pf_status get_platforms(cl_platform_id **out, cl_uint *n) { return get_ids(NULL, 0, (void **)out, n); }

static pf_status get_devices(cl_platform_id p, cl_device_id **out, cl_uint *n)
{
    return get_ids(p, 1, (void **)out, n);
}

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

static void info_str(cl_device_id d, cl_device_info what, char *buf, size_t len)
{
    buf[0] = 0;
    if (clGetDeviceInfo(d, what, len - 1, buf, NULL) != CL_SUCCESS)
        snprintf(buf, len, "?");
    buf[len - 1] = 0;
}

static pf_status fill_info(cl_platform_id p, cl_device_id d, int pi, int di, pf_cl_device_info *inf)
{
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
    PF_CL_TRY(clGetDeviceInfo(d, CL_DEVICE_TYPE, sizeof t, &t, NULL), "clGetDeviceInfo(CL_DEVICE_TYPE)");
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
    PF_CL_TRY(clGetDeviceInfo(d, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof gm, &gm, NULL), "clGetDeviceInfo(GLOBAL_MEM_SIZE)");
    PF_CL_TRY(clGetDeviceInfo(d, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof ma, &ma, NULL),
             "clGetDeviceInfo(MAX_MEM_ALLOC_SIZE)");
    PF_CL_TRY(clGetDeviceInfo(d, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof cu, &cu, NULL),
             "clGetDeviceInfo(MAX_COMPUTE_UNITS)");
    PF_CL_TRY(clGetDeviceInfo(d, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof wg, &wg, NULL),
             "clGetDeviceInfo(MAX_WORK_GROUP_SIZE)");
    inf->global_mem_bytes = gm;
    inf->max_alloc_bytes = ma;
    inf->compute_units = cu;
    inf->max_work_group_size = wg;
    cl_ulong lm = 0;
    cl_device_local_mem_type lt = CL_GLOBAL;
    cl_device_fp_config fp = 0;
    PF_CL_TRY(clGetDeviceInfo(d, CL_DEVICE_LOCAL_MEM_SIZE, sizeof lm, &lm, NULL), "clGetDeviceInfo(LOCAL_MEM_SIZE)");
    if (clGetDeviceInfo(d, CL_DEVICE_LOCAL_MEM_TYPE, sizeof lt, &lt, NULL) != CL_SUCCESS)
        lt = CL_GLOBAL;
    if (clGetDeviceInfo(d, CL_DEVICE_SINGLE_FP_CONFIG, sizeof fp, &fp, NULL) != CL_SUCCESS)
        fp = 0;
    inf->local_mem_bytes = lm;
    inf->local_mem_dedicated = lt == CL_LOCAL;
    inf->fp32_denormals = (fp & CL_FP_DENORM) != 0;
    inf->fp32_correct_divsqrt = (fp & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT) != 0;
    return PF_OK;
}

pf_status pf_cl_list(pf_cl_device_info **out, int *count, int *nplatforms)
{
    *out = NULL;
    *count = 0;
    *nplatforms = 0;
    cl_platform_id *plats = NULL;
    cl_uint np = 0;
    pf_status st = get_platforms(&plats, &np);
    if (st != PF_OK)
        return st;
    pf_cl_device_info *list = NULL;
    int n = 0;
    for (cl_uint pi = 0; pi < np && st == PF_OK; pi++) {
        cl_device_id *devs = NULL;
        cl_uint nd = 0;
        st = get_devices(plats[pi], &devs, &nd);
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
                        st = fill_info(plats[pi], devs[di], (int)pi, (int)di, &list[n++]);
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


/* ---- settings ---- */

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
void pf_cl_set_pair_slices(pf_cl_device *dev, int on) { dev->pair_slices = on != 0; }
int pf_cl_get_pair_slices(const pf_cl_device *dev) { return dev->pair_slices; }
uint64_t pf_cl_paired_calls(const pf_cl_device *dev) { return dev->paired_calls; }
void pf_cl_set_piece_time(pf_cl_device *dev, double seconds) { dev->piece_s = seconds; }
double pf_cl_get_piece_time(const pf_cl_device *dev) { return dev->piece_s; }
uint64_t pf_cl_launches(const pf_cl_device *dev, int i) { return i >= 0 && i < K_COUNT ? dev->launches[i] : 0; }
int pf_cl_mvm_kt_max(const pf_cl_device *dev) { return dev->kt_max; }
size_t pf_cl_mvm_wg_multiple(const pf_cl_device *dev) { return dev->wg_multiple; }
int pf_cl_zero_copy(const pf_cl_device *dev) { return dev->zero_copy; }

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

void pf_cl_tile(const pf_cl_device *dev, int *tm, int *tn, size_t *lx, size_t *ly)
{
    *tm = dev->tm;
    *tn = dev->tn;
    *lx = dev->lx;
    *ly = dev->ly;
}

/* The PYFASTPIM_CL_TILE tuning "TM,TN,LX,LY[,PANEL]" into v (PANEL keeps v[4]); 0, or -1 when the
 * value is not five or four integers within the kernels' limits (whole string, nothing after). */
static int parse_tile(const char *env, long v[5])
{
    const char *p = env;
    int n = 0;
    for (;;) {
        char *end;
        errno = 0;
        long x = strtol(p, &end, 10);
        if (end == p || errno)
            return -1;
        v[n++] = x;
        p = end;
        if (*p != ',' || n == 5)
            break;
        p++;
    }
    while (*p == ' ' || *p == '\t')
        p++;
    const long tn = v[1];
    if (*p || n < 4 || v[0] < 1 || v[0] > 16 || (tn != 1 && tn != 2 && tn != 4 && tn != 8 && tn != 16))
        return -1;
    return v[2] >= 1 && v[3] >= 1 && v[2] <= 1024 && v[3] <= 1024 && (v[4] == 0 || v[4] == 1) ? 0 : -1;
}

/* The register tile and work-group shape: the device type's, or PYFASTPIM_CL_TILE's (a malformed
 * value is an error naming the variable, not silently the default). */
static pf_status choose_tile(pf_cl_device *dev)
{
    int is_cpu = strcmp(dev->info.type, "cpu") == 0;
    dev->tm = is_cpu ? 6 : 4;
    dev->tn = is_cpu ? 16 : 4;
    dev->lx = is_cpu ? 1 : 16;
    dev->ly = is_cpu ? 1 : 8;
    dev->b_panel = is_cpu;
    const char *env = getenv("PYFASTPIM_CL_TILE");
    if (!env || !env[0])
        return PF_OK;
    long v[5] = {0, 0, 0, 0, dev->b_panel};
    if (parse_tile(env, v) < 0)
        return pf_fail(PF_EINVAL, "PYFASTPIM_CL_TILE", "expected 'TM,TN,LX,LY[,PANEL]' with TM in 1..16, "
                       "TN 1, 2, 4, 8 or 16, LX and LY in 1..1024 and PANEL 0 or 1, got '%.64s'", env);
    dev->tm = (int)v[0];
    dev->tn = (int)v[1];
    dev->lx = (size_t)v[2];
    dev->ly = (size_t)v[3];
    dev->b_panel = (int)v[4];
    return PF_OK;
}

/* ---- devices ---- */

/* The platform and device ids of (platform, device), with the messages of a wrong index. */
static pf_status find_device(int platform, int device, cl_platform_id *pid, cl_device_id *did)
{
    cl_platform_id *plats = NULL;
    cl_device_id *devs = NULL;
    cl_uint np = 0, nd = 0;
    pf_status st = get_platforms(&plats, &np);
    if (st != PF_OK)
        return st;
    if (np == 0 && pf_cl_loader_error())
        st = pf_fail(PF_EDEVICE, NULL, "OpenCL is not available: %s", pf_cl_loader_error());
    else if (np == 0)
        st = pf_fail(PF_EDEVICE, NULL, "no OpenCL platform found: the OpenCL ICD loader lists none (is an ICD such as "
                     "pocl-opencl-icd installed under /etc/OpenCL/vendors?)");
    else if (platform < 0 || (cl_uint)platform >= np)
        st = pf_fail(PF_EDEVICE, NULL, "no OpenCL platform %d: %u platform(s) found", platform, np);
    else if ((st = get_devices(plats[platform], &devs, &nd)) == PF_OK && (device < 0 || (cl_uint)device >= nd))
        st = pf_fail(PF_EDEVICE, NULL, "no OpenCL device %d on platform %d: it has %u device(s)", device, platform,
                     nd);
    if (st == PF_OK) {
        *pid = plats[platform];
        *did = devs[device];
    }
    pf_free(plats);
    pf_free(devs);
    return st;
}

/* Context, queue and the device's settings from the environment. */
static pf_status open_context(pf_cl_device *dev)
{
    const char *mv = getenv("PYFASTPIM_CL_MVM");
    dev->mvm_mode = mv && *mv ? pf_cl_mvm_mode_parse(mv) : PF_CL_MVM_AUTO;
    dev->pair_slices = 1;
    dev->piece_s = PF_CL_PIECE_S;
    if (dev->mvm_mode < 0)
        return pf_fail(PF_EINVAL, "PYFASTPIM_CL_MVM", "expected 'auto', 'tiled' or 'untiled', got '%.64s'", mv);
    /* "1" on; "0", empty or unset off (PYFASTPIM_PROGRESS's values); checked before a context opens */
    const char *prof = getenv("PYFASTPIM_CL_PROFILE");
    if (prof && *prof && strcmp(prof, "0") != 0 && strcmp(prof, "1") != 0)
        return pf_fail(PF_EINVAL, "PYFASTPIM_CL_PROFILE", "expected '1' (print kernel times) or '0', got '%.64s'",
                       prof);
    dev->profile = prof && strcmp(prof, "1") == 0;
    cl_int rc;
    cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)dev->platform, 0};
    dev->ctx = clCreateContext(props, 1, &dev->device, NULL, NULL, &rc);
    PF_CL_TRY(rc, "clCreateContext");
    dev->queue = clCreateCommandQueue(dev->ctx, dev->device, dev->profile ? CL_QUEUE_PROFILING_ENABLE : 0, &rc);
    PF_CL_TRY(rc, "clCreateCommandQueue");
    cl_device_fp_config fp = 0;
    if (clGetDeviceInfo(dev->device, CL_DEVICE_SINGLE_FP_CONFIG, sizeof fp, &fp, NULL) == CL_SUCCESS)
        dev->correct_divsqrt = (fp & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT) != 0;
    cl_device_fp_config dfp = 0;
    if (clGetDeviceInfo(dev->device, CL_DEVICE_DOUBLE_FP_CONFIG, sizeof dfp, &dfp, NULL) == CL_SUCCESS)
        dev->fp64 = dfp != 0;
    return PF_OK;
}

pf_status pf_cl_open(int platform, int device, int allow_zero_copy, pf_cl_device **out)
{
    *out = NULL;
    pf_cl_device *dev = pf_calloc(1, sizeof *dev);
    if (!dev)
        return pf_fail(PF_ENOMEM, NULL, "opening the OpenCL device: out of memory");
    dev->allow_zero_copy = allow_zero_copy;
    pf_status st = find_device(platform, device, &dev->platform, &dev->device);
    if (st == PF_OK)
        st = fill_info(dev->platform, dev->device, platform, device, &dev->info);
    if (st == PF_OK)
        st = open_context(dev);
    if (st != PF_OK) {
        pf_cl_close(dev);
        return st;
    }
    *out = dev;
    return PF_OK;
}

static void release_program(pf_cl_device *dev)
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

void pf_cl_close(pf_cl_device *dev)
{
    if (!dev)
        return;
    if (dev->queue)
        clFinish(dev->queue);
    pf_cl_release_scratch(dev);
    release_program(dev);
    if (dev->queue)
        clReleaseCommandQueue(dev->queue);
    if (dev->ctx)
        clReleaseContext(dev->ctx);
    pf_free(dev);
}

/* ---- the program ---- */

/* Runs pf_probe on USE_HOST_PTR buffers at host address `base + offset`:
 * *shared = 1 when the kernel read the input as changed after buffer creation
 * and wrote the output in place (before any map), i.e. no runtime copy. */
static pf_status probe_shared(pf_cl_device *dev, size_t offset, int *shared)
{
    *shared = 0;
    unsigned char *raw = pf_alloc(3 * 4096);
    if (!raw)
        return pf_fail(PF_ENOMEM, NULL, "zero-copy probe: out of memory");
    unsigned char *page = (unsigned char *)(((uintptr_t)raw + 4095) & ~(uintptr_t)4095);
    float *in = (float *)(page + offset), *outp = (float *)(page + 4096 + offset);
    in[0] = 1.0f;
    outp[0] = -1.0f;
    cl_int rc = CL_SUCCESS, rc2 = CL_SUCCESS;
    cl_mem bi = clCreateBuffer(dev->ctx, CL_MEM_READ_ONLY | CL_MEM_USE_HOST_PTR, sizeof(float), in, &rc);
    cl_mem bo = rc != CL_SUCCESS ? NULL : clCreateBuffer(dev->ctx, CL_MEM_WRITE_ONLY | CL_MEM_USE_HOST_PTR,
                                                         sizeof(float), outp, &rc);
    pf_status st = rc != CL_SUCCESS ? pf_cl_fail_call(rc, "clCreateBuffer(probe)") : PF_OK;
    in[0] = 41.0f; /* a copy made at creation would still hold 1 */
    const pf_cl_range one = {1, {1, 1}, {1, 1}, NULL, 0, 0};
    if (st == PF_OK && (st = PF_CL_LAUNCH(dev, K_PROBE, &one, ARG_MEM(bo), ARG_MEM(bi))) == PF_OK &&
        (rc = clFinish(dev->queue)) != CL_SUCCESS)
        st = pf_cl_fail_call(rc, "clFinish(probe)");
    if (st == PF_OK) {
        *shared = outp[0] == 42.0f;
        /* leave the buffers consistent before release */
        void *m = clEnqueueMapBuffer(dev->queue, bo, CL_TRUE, CL_MAP_READ, 0, sizeof(float), 0, NULL, NULL, &rc);
        if (rc == CL_SUCCESS && (rc2 = clEnqueueUnmapMemObject(dev->queue, bo, m, 0, NULL, NULL)) == CL_SUCCESS)
            rc2 = clFinish(dev->queue);
        st = rc != CL_SUCCESS ? pf_cl_fail_call(rc, "clEnqueueMapBuffer(probe)")
           : rc2 != CL_SUCCESS ? pf_cl_fail_call(rc2, "clEnqueueUnmapMemObject(probe)") : PF_OK;
    }
    if (bi)
        clReleaseMemObject(bi);
    if (bo)
        clReleaseMemObject(bo);
    pf_free(raw);
    return st;
}

/* Largest chunk kt of crossbar rows whose tiles ((TM*ly + TN*lx) floats per
 * row) fit the local memory CL_DEVICE_LOCAL_MEM_SIZE leaves beside the
 * kernel's own (CL_KERNEL_LOCAL_MEM_SIZE), keeping half of it free so more
 * than one work-group fits a compute unit; 0 when not even one row fits. */
static pf_status mvm_tiled_chunk(pf_cl_device *dev)
{
    cl_ulong used = 0;
    PF_CL_TRY(clGetKernelWorkGroupInfo(dev->k[K_MVM_TILED], dev->device, CL_KERNEL_LOCAL_MEM_SIZE, sizeof used, &used,
                                       NULL), "clGetKernelWorkGroupInfo(CL_KERNEL_LOCAL_MEM_SIZE)");
    const uint64_t per_row = ((uint64_t)dev->tm * dev->ly + (uint64_t)dev->tn * dev->lx) * sizeof(float);
    const uint64_t avail = dev->info.local_mem_bytes > used ? dev->info.local_mem_bytes - used : 0;
    uint64_t kt = avail / 2 / per_row;
    if (kt == 0 && avail >= per_row)
        kt = 1;
    dev->kt_max = kt > PF_CL_KT_MAX ? PF_CL_KT_MAX : (int)kt;
    return PF_OK;
}

/* Compiles base.cl (the prelude) then every other embedded kernel file, with the tile options. */
static pf_status compile_program(pf_cl_device *dev)
{
    cl_int rc;
    const char *srcs[64];
    cl_uint ns = 0;
    for (int i = 0; pf_cl_sources[i].name; i++)
        if (strcmp(pf_cl_sources[i].name, "base.cl") == 0)
            srcs[ns++] = pf_cl_sources[i].source;
    if (ns != 1)
        return pf_fail(PF_EDEVICE, NULL, "OpenCL program: the embedded kernels lack base.cl (rebuild the extension)");
    for (int i = 0; pf_cl_sources[i].name && ns < 64; i++)
        if (strcmp(pf_cl_sources[i].name, "base.cl") != 0)
            srcs[ns++] = pf_cl_sources[i].source;
    char opts[256];
    snprintf(opts, sizeof opts, "%s%s-DPF_TM=%d -DPF_TN=%d -DPF_B_PANEL=%d",
             dev->correct_divsqrt ? "-cl-fp32-correctly-rounded-divide-sqrt " : "", dev->fp64 ? "-DPF_HAVE_FP64 " : "",
             dev->tm, dev->tn, dev->b_panel);
    dev->program = clCreateProgramWithSource(dev->ctx, ns, srcs, NULL, &rc);
    PF_CL_TRY(rc, "clCreateProgramWithSource");
    rc = clBuildProgram(dev->program, 1, &dev->device, opts, NULL, NULL);
    if (rc != CL_SUCCESS) {
        char log[1536] = "";
        clGetProgramBuildInfo(dev->program, dev->device, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log, NULL);
        log[sizeof log - 1] = 0;
        return pf_fail(PF_EDEVICE, NULL, "clBuildProgram (options '%s') on %s: %s (%d); build log:\n%s", opts,
                       dev->info.name, pf_cl_error_name(rc), (int)rc, log);
    }
    return PF_OK;
}

/* pack_local is the 1-D work-group of every kernel but the MVMs (the launches that name no
 * work-group use it too): it must fit each compiled kernel (CL_KERNEL_WORK_GROUP_SIZE, which a GPU
 * lowers for kernels that use many registers) and the device's first work-item dimension. The MVM
 * work-group must fit both compiled MVM kernels (they share it): shrink y, then x. */
static pf_status fit_work_groups(pf_cl_device *dev)
{
    size_t wi[3] = {1, 1, 1};
    if (clGetDeviceInfo(dev->device, CL_DEVICE_MAX_WORK_ITEM_SIZES, sizeof wi, wi, NULL) != CL_SUCCESS)
        wi[0] = wi[1] = 1;
    dev->pack_local = PF_CL_PACK_LOCAL;
    while (dev->pack_local > wi[0] && dev->pack_local > 1)
        dev->pack_local /= 2;
    size_t kwg = SIZE_MAX;
    for (int i = 0; i < K_COUNT; i++) {
        size_t pwg = 0;
        char what[96];
        snprintf(what, sizeof what, "clGetKernelWorkGroupInfo(%s)", pf_cl_kernel_table[i].name);
        PF_CL_TRY(clGetKernelWorkGroupInfo(dev->k[i], dev->device, CL_KERNEL_WORK_GROUP_SIZE, sizeof pwg, &pwg, NULL),
                  what);
        if (i == K_MVM || i == K_MVM_TILED)
            kwg = pwg < kwg ? pwg : kwg;
        else if (i != K_PROBE)
            while (dev->pack_local > pwg && dev->pack_local > 1)
                dev->pack_local /= 2;
    }
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
    return mvm_tiled_chunk(dev);
}

/* Zero copy only where the device demonstrably shares host memory (at float, else page alignment). */
static pf_status choose_zero_copy(pf_cl_device *dev)
{
    dev->zero_copy = 0;
    dev->zc_align = 0;
    if (!dev->allow_zero_copy || !dev->info.host_unified_memory)
        return PF_OK;
    static const size_t offsets[2] = {4, 0}, aligns[2] = {sizeof(float), 4096};
    for (int i = 0; i < 2; i++) {
        int shared = 0;
        pf_status st = probe_shared(dev, offsets[i], &shared);
        if (st != PF_OK)
            return st;
        if (shared) {
            dev->zero_copy = 1;
            dev->zc_align = aligns[i];
            return PF_OK;
        }
    }
    return PF_OK;
}

pf_status pf_cl_build(pf_cl_device *dev)
{
    if (dev->built)
        return PF_OK;
    pf_status st = choose_tile(dev);
    if (st == PF_OK)
        st = compile_program(dev);
    if (st == PF_OK)
        st = pf_cl_create_kernels(dev);
    if (st == PF_OK)
        st = fit_work_groups(dev);
    if (st == PF_OK)
        st = choose_zero_copy(dev);
    if (st != PF_OK) {
        release_program(dev);
        return st;
    }
    dev->built = 1;
    return PF_OK;
}
