/* The table-driven kernel launcher: every kernel is declared once (PF_CL_KERNELS in internal.h);
 * its argument count is checked against the built program, its arguments' kinds at every launch. */
#include "opencl/internal.h"

#include <stdio.h>
#include <time.h>

#define PF_CL_KERNEL_DECL(id, name, kinds) [K_##id] = {name, kinds},
const pf_cl_kernel_decl pf_cl_kernel_table[K_COUNT] = {PF_CL_KERNELS(PF_CL_KERNEL_DECL)};
#undef PF_CL_KERNEL_DECL

pf_status pf_cl_check_kernel_args(const pf_cl_device *dev, int kid, cl_uint declared)
{
    cl_uint actual = 0;
    char what[96];
    snprintf(what, sizeof what, "clGetKernelInfo(%s, CL_KERNEL_NUM_ARGS)", pf_cl_kernel_table[kid].name);
    PF_CL_TRY(clGetKernelInfo(dev->k[kid], CL_KERNEL_NUM_ARGS, sizeof actual, &actual, NULL), what);
    if (actual != declared)
        return pf_fail(PF_EDEVICE, NULL, "OpenCL kernel table: %s is declared with %u arguments, the built program's "
                       "kernel takes %u (kernels/*.cl and csrc/opencl/internal.h disagree)",
                       pf_cl_kernel_table[kid].name, (unsigned)declared, (unsigned)actual);
    return PF_OK;
}

pf_status pf_cl_create_kernels(pf_cl_device *dev)
{
    for (int i = 0; i < K_COUNT; i++) {
        cl_int rc;
        char what[96];
        snprintf(what, sizeof what, "clCreateKernel(%s)", pf_cl_kernel_table[i].name);
        dev->k[i] = clCreateKernel(dev->program, pf_cl_kernel_table[i].name, &rc);
        PF_CL_TRY(rc, what);
        pf_status st = pf_cl_check_kernel_args(dev, i, (cl_uint)strlen(pf_cl_kernel_table[i].kinds));
        if (st != PF_OK)
            return st;
    }
    return PF_OK;
}

static size_t arg_size(const pf_cl_arg *a)
{
    switch (a->kind) {
    case 'm': return sizeof(cl_mem);
    case 'u': return sizeof(cl_ulong);
    case 'i': return sizeof(cl_int);
    case 'w': return sizeof(cl_uint);
    case 'f': return sizeof(cl_float);
    case 'g': return sizeof(cl_long16);
    default: return a->v.local_bytes;
    }
}

static pf_status set_args(pf_cl_device *dev, int kid, const pf_cl_arg *args, size_t nargs)
{
    const pf_cl_kernel_decl *d = &pf_cl_kernel_table[kid];
    if (nargs != strlen(d->kinds))
        return pf_fail(PF_EDEVICE, NULL, "OpenCL launch of %s: %zu arguments given, %zu declared", d->name, nargs,
                       strlen(d->kinds));
    for (size_t i = 0; i < nargs; i++) {
        if (args[i].kind != d->kinds[i])
            return pf_fail(PF_EDEVICE, NULL, "OpenCL launch of %s: argument %zu is of kind '%c', declared '%c'",
                           d->name, i, args[i].kind, d->kinds[i]);
        cl_int rc = clSetKernelArg(dev->k[kid], (cl_uint)i, arg_size(&args[i]),
                                   args[i].kind == 'l' ? NULL : (const void *)&args[i].v);
        if (rc != CL_SUCCESS) {
            char what[96];
            snprintf(what, sizeof what, "clSetKernelArg(%s, %zu)", d->name, i);
            return pf_cl_fail_call(rc, what);
        }
    }
    return PF_OK;
}

pf_cl_range pf_cl_range_1d(const pf_cl_device *dev, size_t n)
{
    pf_cl_range r = {1, {pf_cl_round_up(n, dev->pack_local), 1}, {dev->pack_local, 1}, NULL, 0, 0};
    return r;
}

/* Enqueues kernel kid; with profiling on, waits for it and prints its time. lws[0] == 0: a
 * work-group of pack_local x 1 (fits every such kernel, see pf_cl_build) with the global size
 * rounded up to it (every kernel checks its bounds), not a runtime-chosen group, which for an
 * awkward global size (a prime row count) can be a single work-item on a GPU. */
static pf_status enqueue(pf_cl_device *dev, int kid, cl_uint dims, const size_t *gws, const size_t *lws,
                         const size_t *offset)
{
    const char *name = pf_cl_kernel_table[kid].name;
    cl_event ev = NULL;
    char what[96];
    snprintf(what, sizeof what, "clEnqueueNDRangeKernel(%s)", name);
    PF_CL_TRY(clEnqueueNDRangeKernel(dev->queue, dev->k[kid], dims, offset, gws, lws, 0, NULL,
                                     dev->profile ? &ev : NULL), what);
    if (ev) {
        cl_ulong t0 = 0, t1 = 0;
        cl_int rc = clWaitForEvents(1, &ev);
        if (rc == CL_SUCCESS)
            rc = clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_START, sizeof t0, &t0, NULL);
        if (rc == CL_SUCCESS)
            rc = clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_END, sizeof t1, &t1, NULL);
        clReleaseEvent(ev);
        PF_CL_TRY(rc, "clGetEventProfilingInfo");
        fprintf(stderr, "pyfastpim opencl: %-18s %10.3f ms\n", name, (double)(t1 - t0) * 1e-6);
    }
    return PF_OK;
}

/* Seconds since an arbitrary start (CLOCK_MONOTONIC). */
static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Doubled, up to limit (a multiple of the work-group, as per is). */
static size_t grown(size_t per, size_t limit) { return per <= limit / 2 ? 2 * per : limit; }

/* With a cancel flag: in about `pieces` pieces (global offsets aligned to lws: the kernels index
 * by get_global_id only), waiting for each and polling the flag in between: PF_EINTR when set.
 * A piece that finished in under PF_CL_PIECE_S doubles the next one (along dimension 0, then 1):
 * the callers' counts suit PoCL's heaviest kernels, and on a fast device a piece of that size is
 * mostly its enqueue and wait. */
static pf_status enqueue_split(pf_cl_device *dev, int kid, const pf_cl_range *r, const size_t *gws,
                               const size_t *lws)
{
    const cl_uint dims = r->dims;
    PF_CL_TRY(clFinish(dev->queue), "clFinish"); /* what came before may be long too */
    if (pf_cancelled(r->cancel))
        return pf_fail(PF_EINTR, NULL, "interrupted");
    const size_t l0 = lws[0], l1 = dims > 1 ? lws[1] : 1;
    const uint64_t g0 = gws[0] / l0, g1 = dims > 1 ? gws[1] / l1 : 1; /* work-groups */
    if (g0 == 0 || g1 == 0)
        return PF_OK; /* nothing to run (and no piece size to divide by) */
    const uint64_t pieces = r->pieces < 1 ? 1 : r->pieces;
    const uint64_t p1 = pieces < g1 ? pieces : g1;
    uint64_t p0 = (pieces + p1 - 1) / p1;
    p0 = p0 < g0 ? p0 : g0;
    const size_t n1 = dims > 1 ? gws[1] : 1;
    size_t per1 = (size_t)((g1 + p1 - 1) / p1) * l1, per0 = (size_t)((g0 + p0 - 1) / p0) * l0;
    for (size_t y0 = 0; y0 < n1;) {
        const size_t h = n1 - y0 < per1 ? n1 - y0 : per1;
        int fast = 0;
        for (size_t x0 = 0; x0 < gws[0];) {
            if (pf_cancelled(r->cancel))
                return pf_fail(PF_EINTR, NULL, "interrupted");
            size_t off[2] = {x0, y0};
            size_t part[2] = {gws[0] - x0 < per0 ? gws[0] - x0 : per0, h};
            const double t0 = now_s();
            pf_status st = enqueue(dev, kid, dims, part, lws, off);
            if (st != PF_OK)
                return st;
            PF_CL_TRY(clFinish(dev->queue), "clFinish");
            fast = now_s() - t0 < PF_CL_PIECE_S;
            x0 += part[0];
            if (fast && x0 < gws[0])
                per0 = grown(per0, gws[0]);
        }
        y0 += h;
        if (fast && per0 >= gws[0])
            per1 = grown(per1, n1);
    }
    return pf_cancelled(r->cancel) ? pf_fail(PF_EINTR, NULL, "interrupted") : PF_OK;
}

pf_status pf_cl_launch(pf_cl_device *dev, int kid, const pf_cl_arg *args, size_t nargs, const pf_cl_range *r)
{
    pf_status st = set_args(dev, kid, args, nargs);
    if (st != PF_OK)
        return st;
    size_t gws[2] = {r->gws[0], r->dims > 1 ? r->gws[1] : 1}, lws[2] = {r->lws[0], r->lws[1]};
    if (r->lws[0] == 0) {
        lws[0] = dev->pack_local ? dev->pack_local : 1;
        lws[1] = 1;
        for (cl_uint d = 0; d < r->dims; d++) {
            if (gws[d] > SIZE_MAX - lws[d])
                return pf_fail(PF_EOVERFLOW, NULL, "%s: global size %zu too large", pf_cl_kernel_table[kid].name,
                               gws[d]);
            gws[d] = pf_cl_round_up(gws[d], lws[d]);
        }
    }
    if (r->cancel && !r->no_split)
        return enqueue_split(dev, kid, r, gws, lws);
    return enqueue(dev, kid, r->dims, gws, lws, NULL);
}

/* ---- the table, for tests ---- */

int pf_cl_kernel_count(void) { return K_COUNT; }

const char *pf_cl_kernel_name(int i) { return i >= 0 && i < K_COUNT ? pf_cl_kernel_table[i].name : NULL; }

unsigned pf_cl_kernel_declared_args(int i)
{
    return i >= 0 && i < K_COUNT ? (unsigned)strlen(pf_cl_kernel_table[i].kinds) : 0;
}

pf_status pf_cl_kernel_program_args(const pf_cl_device *dev, int i, unsigned *nargs)
{
    cl_uint n = 0;
    if (i < 0 || i >= K_COUNT || !dev->built)
        return pf_fail(PF_EINVAL, "kernel", "no kernel %d in a built program", i);
    PF_CL_TRY(clGetKernelInfo(dev->k[i], CL_KERNEL_NUM_ARGS, sizeof n, &n, NULL), "clGetKernelInfo(CL_KERNEL_NUM_ARGS)");
    *nargs = n;
    return PF_OK;
}

pf_status pf_cl_kernel_check(const pf_cl_device *dev, int i, unsigned declared)
{
    if (i < 0 || i >= K_COUNT || !dev->built)
        return pf_fail(PF_EINVAL, "kernel", "no kernel %d in a built program", i);
    return pf_cl_check_kernel_args(dev, i, declared);
}
