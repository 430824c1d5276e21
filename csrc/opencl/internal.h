/* Internals of the OpenCL backend (csrc/opencl/ only; the public API is opencl.h).
 *
 *   runtime.c    platforms, devices, context and queue, program build, tile and MVM-kernel choice
 *   launcher.c   the kernel table (PF_CL_KERNELS below), argument checks, enqueue (whole or in pieces)
 *   buffers.c    operands (shared in place or transferred), scratch, the per-call buffer set
 *   noise.c      Philox normals on the device
 *   dpe.c        resident weights and the fused MVM
 *   conv.c       implicit im2col (granule max, dequantized unfolded input)
 *   slicing.c    bit-slice/quantize and weight programming
 *   attention.c  the attention context's kernels
 *
 * Errors go through the core channel (pf_fail): a failing OpenCL call is reported as PF_EDEVICE
 * with the call and the CL error name and code (pf_cl_fail_call). */
#ifndef PF_OPENCL_INTERNAL_H
#define PF_OPENCL_INTERNAL_H

#define CL_TARGET_OPENCL_VERSION 120
#include "opencl/opencl.h"
#include "core/contract.h"
#include "core/interrupt.h"
#include "core/memory.h"
#include "opencl/cl_loader.h" /* <CL/cl.h>, with the library loaded at run time */

#include <stdint.h>
#include <string.h>


/* Packed inputs of one row chunk are capped so a large batch streams through
 * a bounded scratch buffer, as on the CPU path. */
#define PF_CL_A_CHUNK_BYTES ((size_t)64 << 20)
/* Work of the first enqueued piece when a Ctrl-C may have to stop a kernel: ~0.05-0.1 s
 * on a 2-core CPU device, far less on a GPU. The next pieces are sized from the measured rate
 * (launcher.c enqueue_split). */
#define PF_CL_PIECE_MACS ((uint64_t)1 << 28) /* MVM multiply-adds */
#define PF_CL_PIECE_ELEMS ((uint64_t)1 << 21) /* packed elements (noise draws, DAC/conductance conversions) */
#define PF_CL_PIECE_S 0.05  /* default time a piece aims at (handle.piece_time) */
#define PF_CL_PIECE_GROW 8  /* a piece is at most this many times larger (or smaller) than the last */
#define PF_CL_PACK_LOCAL 64 /* work-group size of the pack kernels (at most; one noise group per item) */
#define PF_CL_KT_MAX 32     /* crossbar rows per local-memory chunk of pf_dpe_mvm_tiled, at most */

/* ---- the kernel table ----
 * Every kernel of the program, declared once: id, name in kernels/ *.cl, and argument kinds, one
 * letter per argument: m global buffer, u ulong, i int, w uint, f float, g long16, l local buffer.
 * pf_cl_build creates each kernel and refuses a program whose kernel has another argument count
 * (CL_KERNEL_NUM_ARGS); every launch checks its arguments' kinds against the declaration. */
#define PF_CL_KERNELS(X)                                                                                       \
    X(PACK_X, "pf_dpe_pack_x", "mmmmm" "uuuuuuuu" "uuuu" "if" "u" "m")                                         \
    X(PACK_XI, "pf_dpe_pack_x_im2col", "mmm" "uuuuuuu" "uuuu" "if" "u" "mmgiiu" "m")                            \
    X(PACK_W, "pf_dpe_pack_w", "mmmm" "uuuuuu" "iiiff" "w" "m" "im")                                           \
    X(SCALES_W, "pf_dpe_scales_w", "mm" "uuuuuu")                                                              \
    X(MVM, "pf_dpe_mvm", "mmmmmmmm" "uuuuuu" "iiiii" "u" "ii")                                                 \
    X(MVM_TILED, "pf_dpe_mvm_tiled", "mmmmmmmm" "uuuuuu" "iiiii" "u" "ii" "ill")                               \
    X(NORMALS, "pf_normals", "m" "u" "ww" "uu")                                                                \
    X(NRANGE, "pf_normals_range", "m" "u" "ww" "uu")                                                           \
    X(GMAX, "pf_im2col_gmax", "mgmm" "uuuuuuu")                                                                \
    X(DEQUANT, "pf_im2col_dequant", "mgmm" "uuuuuuu" "ii")                                                     \
    X(SMAX, "pf_slice_max", "mm" "uuuuuuuu")                                                                   \
    X(SSTATS, "pf_slice_stats", "mmmm" "u" "ii")                                                               \
    X(SQUANT, "pf_slice_quant", "mmmmm" "uuuuuuuu" "ii" "u" "iii" "i" "mmm")                                   \
    X(PCOND, "pf_program_cond", "mm" "u" "ffff" "ii" "ff" "u")                                                 \
    X(ATANH, "pf_attn_tanh", "mm" "u")                                                                         \
    X(ACENTRE, "pf_attn_centre", "m" "uuuu" "mm")                                                              \
    X(AUPDATE, "pf_attn_update", "mmmmm" "uu" "ff")                                                            \
    X(AMATMUL, "pf_attn_matmul", "mmm" "uu")                                                                   \
    X(AEPI, "pf_attn_epilogue", "mmm" "u" "f")                                                                 \
    X(PROBE, "pf_probe", "mm")

#define PF_CL_KERNEL_ID(id, name, kinds) K_##id,
enum { PF_CL_KERNELS(PF_CL_KERNEL_ID) K_COUNT };
#undef PF_CL_KERNEL_ID

typedef struct {
    const char *name;
    const char *kinds;
} pf_cl_kernel_decl;

extern const pf_cl_kernel_decl pf_cl_kernel_table[K_COUNT];

/* ---- the device ---- */

/* SCR_B: packed weights, one slice per float; SCR_BP: two (noise-free products, dpe.c mvm_pair_shift) */
enum { SCR_A, SCR_RS, SCR_B, SCR_BP, SCR_CS, SCR_Z, SCR_ZW, SCR_COUNT };

typedef struct {
    cl_mem mem;
    void *host; /* pf_alloc'd backing store on zero-copy devices */
    size_t bytes;
    int zeroed;        /* zero-filled for the geometry in sig (padding stays zero) */
    uint64_t sig[4];
    uint64_t content[3]; /* what the caller last wrote there, zeros: unknown (reset by every refill) */
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
    int fp64;             /* cl_khr_fp64 (slicing.cl's scalar normals in double, as C's libm) */
    int tm, tn, b_panel;
    size_t lx, ly;
    /* MVM kernel choice (PF_CL_MVM_*): pf_dpe_mvm_tiled where it pays
     * (auto: GPUs and accelerators with dedicated local memory) */
    int mvm_mode;
    int kt_max;           /* crossbar rows per local-memory chunk (0: the tiles do not fit) */
    int pair_slices;      /* two weight slices per packed float where exact (dpe.c mvm_pair_shift) */
    int bp_levels_ok;     /* SCR_BP's weights have every level below g_level (else unusable; while its tag holds) */
    uint64_t paired_calls; /* MVM calls that paired weight slices */
    uint64_t launches[K_COUNT]; /* kernel launches (each piece of a split one) per kernel */
    double piece_s;       /* seconds a piece of a split launch aims at (PF_CL_PIECE_S) */
    size_t wg_multiple;   /* CL_KERNEL_PREFERRED_WORK_GROUP_SIZE_MULTIPLE of pf_dpe_mvm (warp/wavefront) */
    pf_cl_scratch scratch[SCR_COUNT];
};

struct pf_cl_weights {
    pf_cl_device *dev;
    cl_mem levels, cond, scale;
    const void *p_levels, *p_cond, *p_scale;
    int64_t sw, inner, cols, w_gr, w_gc;
    size_t bytes;
    uint64_t serial; /* unique per creation (never 0): names these weights' packing in SCR_B, SCR_BP */
};

/* PF_EDEVICE naming the failed call: "<what>: <CL name> (<code>)". */
pf_status pf_cl_fail_call(cl_int rc, const char *what);
/* Evaluates an OpenCL call; on failure returns pf_cl_fail_call from the enclosing function. */
#define PF_CL_TRY(call, what)                                                                                  \
    do {                                                                                                       \
        cl_int rc_ = (call);                                                                                   \
        if (rc_ != CL_SUCCESS)                                                                                 \
            return pf_cl_fail_call(rc_, (what));                                                               \
    } while (0)

static inline size_t pf_cl_round_up(size_t v, size_t m) { return (v + m - 1) / m * m; }

/* ---- launcher (launcher.c) ---- */

/* One kernel argument, tagged with its kind (a letter of the kernel table). */
typedef struct {
    char kind;
    union {
        cl_mem m;
        cl_ulong u;
        cl_int i;
        cl_uint w;
        cl_float f;
        cl_long16 g;
        size_t local_bytes;
    } v;
} pf_cl_arg;

#define ARG_MEM(x) ((pf_cl_arg){.kind = 'm', .v.m = (x)})
#define ARG_U64(x) ((pf_cl_arg){.kind = 'u', .v.u = (cl_ulong)(x)})
#define ARG_I32(x) ((pf_cl_arg){.kind = 'i', .v.i = (cl_int)(x)})
#define ARG_U32(x) ((pf_cl_arg){.kind = 'w', .v.w = (cl_uint)(x)})
#define ARG_F32(x) ((pf_cl_arg){.kind = 'f', .v.f = (cl_float)(x)})
#define ARG_L16(x) ((pf_cl_arg){.kind = 'g', .v.g = (x)})
#define ARG_LOCAL(bytes) ((pf_cl_arg){.kind = 'l', .v.local_bytes = (bytes)})

/* Where and how a kernel runs: dims 1 or 2 over gws; lws as given, or (lws[0] == 0) a work-group
 * of pack_local x 1 with gws rounded up to it. With cancel, in about `pieces` pieces polling it
 * (split = 0: in one piece, for kernels indexed by work-group). */
typedef struct {
    cl_uint dims;
    size_t gws[2], lws[2];
    pf_cancel *cancel;
    uint64_t pieces;
    int no_split;
} pf_cl_range;

/* 1-D over n work-items in work-groups of pack_local. */
pf_cl_range pf_cl_range_1d(const pf_cl_device *dev, size_t n);

/* Sets every argument of kernel `kid` (nargs must be its declared count, each kind its declared
 * kind) and enqueues it over r. */
pf_status pf_cl_launch(pf_cl_device *dev, int kid, const pf_cl_arg *args, size_t nargs, const pf_cl_range *r);
#define PF_CL_LAUNCH(dev, kid, range, ...)                                                                     \
    pf_cl_launch((dev), (kid), (const pf_cl_arg[]){__VA_ARGS__},                                              \
                 sizeof((const pf_cl_arg[]){__VA_ARGS__}) / sizeof(pf_cl_arg), (range))

/* Creates every kernel of the table in dev->program, checking each argument count. */
pf_status pf_cl_create_kernels(pf_cl_device *dev);
/* PF_EDEVICE unless `declared` equals the argument count the program reports for kernel kid. */
pf_status pf_cl_check_kernel_args(const pf_cl_device *dev, int kid, cl_uint declared);

/* ---- buffers (buffers.c) ---- */

pf_status pf_cl_check_alloc(const pf_cl_device *dev, size_t bytes, const char *what);
/* A read-only operand: host memory shared in place on zero-copy devices, else a device buffer
 * filled by one counted transfer; absent (NULL or 0 bytes): a small placeholder never read. */
pf_status pf_cl_buf_in(pf_cl_device *dev, const void *host, size_t bytes, const char *what, cl_mem *out);
/* Device scratch kept between calls, grown on demand; pf_cl_scratch_zero zero-fills it unless it
 * already is for geometry sig (the pack kernels never write the padding). */
pf_status pf_cl_scratch_get(pf_cl_device *dev, int slot, size_t bytes, const char *what, cl_mem *out);
pf_status pf_cl_scratch_zero(pf_cl_device *dev, int slot, const uint64_t sig[4]);

/* The buffers of one call: added with a sticky status (after a failure every add returns NULL
 * and changes nothing), outputs read back in order by pf_cl_set_finish, everything released by
 * pf_cl_set_close, the one cleanup path (it waits for the queue first when the call failed, so
 * nothing still reads host memory the caller frees). */
#define PF_CL_SET_MAX 16
typedef struct {
    pf_cl_device *dev;
    pf_status st;
    int n;
    struct {
        cl_mem mem;
        void *host;     /* output or in/out: where it is read back (NULL: not read back) */
        size_t bytes;
        int shared;     /* host memory used in place */
    } b[PF_CL_SET_MAX];
} pf_cl_set;

void pf_cl_set_init(pf_cl_set *s, pf_cl_device *dev);
cl_mem pf_cl_set_in(pf_cl_set *s, const void *host, size_t bytes, const char *what);
/* An output (host NULL: a placeholder, not read back). */
cl_mem pf_cl_set_out(pf_cl_set *s, void *host, size_t bytes, const char *what);
/* Read and written: shared in place, or written to the device once and read back. */
cl_mem pf_cl_set_inout(pf_cl_set *s, void *host, size_t bytes, const char *what);
/* A device-only buffer of the call. */
cl_mem pf_cl_set_temp(pf_cl_set *s, size_t bytes, const char *what);
/* Fills `bytes` of mem with zero (a flag or an accumulator). */
void pf_cl_set_zero(pf_cl_set *s, cl_mem mem, size_t bytes, const char *what);
/* Records st (PF_OK keeps the set's status); returns the set's status. */
pf_status pf_cl_set_status(pf_cl_set *s, pf_status st);
pf_status pf_cl_set_finish(pf_cl_set *s);
pf_status pf_cl_set_close(pf_cl_set *s);
/* The end of a call: its outputs read back when it succeeded, then pf_cl_set_close. */
pf_status pf_cl_set_done(pf_cl_set *s);
/* pf_cl_launch when the set has not failed; records the result. */
pf_status pf_cl_set_launch(pf_cl_set *s, int kid, const pf_cl_arg *args, size_t nargs, const pf_cl_range *r);
#define PF_CL_SET_LAUNCH(set, kid, range, ...)                                                                 \
    pf_cl_set_launch((set), (kid), (const pf_cl_arg[]){__VA_ARGS__},                                          \
                     sizeof((const pf_cl_arg[]){__VA_ARGS__}) / sizeof(pf_cl_arg), (range))

/* ---- shared by the op files ---- */

/* Normals [start, end) of a Philox stream into out (pf_normals_range), in pieces polling cancel. */
pf_status pf_cl_normals_range(pf_cl_device *dev, cl_mem out, uint64_t seed, cl_uint stream, cl_uint call,
                              cl_ulong start, cl_ulong end, pf_cancel *cancel);
/* The im2col geometry as the kernels take it, and the image's bytes (PF_EOVERFLOW when they overflow). */
cl_long16 pf_cl_im2col_geo(const pf_im2col *c);
pf_status pf_cl_im2col_bytes(const pf_im2col *c, int64_t batch, size_t *bytes);
/* Bit offsets of the slices, 4 bits each (pf_slice_code_packed in base.cl). */
cl_ulong pf_cl_slice_offsets(const pf_slice_method *sm);

#endif
