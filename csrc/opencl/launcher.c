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
    dev->launches[kid]++;
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

/* Work-items of the next piece after one of `items` that took `dt` seconds: as many as take
 * dev->piece_s at that rate (the rate of the last piece: the device's speed now, its enqueue and
 * wait included), within a factor PF_CL_PIECE_GROW of `items`. */
static double next_piece(const pf_cl_device *dev, double items, double dt)
{
    const double hi = items * PF_CL_PIECE_GROW, lo = items / PF_CL_PIECE_GROW;
    const double want = dt > 0 ? items * (dev->piece_s / dt) : hi;
    return want > hi ? hi : want < lo ? lo : want;
}

/* A piece's extent along one dimension: `units` steps (work-groups) rounded down, at least one, at
 * most what is `left`; all that is left when less than half a piece would remain (no sliver of a
 * last piece). */
static size_t extent(double units, size_t step, size_t left)
{
    const double most = (double)(left / step);
    const size_t n = units < 1 ? step : units >= most ? left : (size_t)units * step;
    return n >= left || left - n < n / 2 ? left : n;
}

/* With a cancel flag: in pieces (global offsets aligned to lws: the kernels index by
 * get_global_id only), waiting for each and polling the flag in between: PF_EINTR when set.
 * The first piece is about 1/r->pieces of the work (the callers' counts suit PoCL's heaviest
 * kernels); each next one is sized from the last one's measured rate to take dev->piece_s
 * (next_piece), so a large call takes few launches on any device while Ctrl-C still stops it
 * within about a piece. A piece spans whole rows of work-groups (dimension 1) when it holds at
 * least one, else part of one such row (dimension 0). Results do not depend on the pieces. */
static pf_status enqueue_split(pf_cl_device *dev, int kid, const pf_cl_range *r, const size_t *gws,
                               const size_t *lws)
{
    const cl_uint dims = r->dims;
    PF_CL_TRY(clFinish(dev->queue), "clFinish"); /* what came before may be long too */
    if (pf_cancelled(r->cancel))
        return pf_fail(PF_EINTR, NULL, "interrupted");
    const size_t l0 = lws[0], l1 = dims > 1 ? lws[1] : 1;
    const size_t n0 = gws[0], n1 = dims > 1 ? gws[1] : 1;
    if (n0 / l0 == 0 || n1 / l1 == 0)
        return PF_OK; /* nothing to run */
    double want = (double)n0 * (double)n1 / (double)(r->pieces < 1 ? 1 : r->pieces); /* work-items */
    size_t x0 = 0, y0 = 0, h = 0;
    int whole_rows = 0;
    while (y0 < n1) {
        if (pf_cancelled(r->cancel))
            return pf_fail(PF_EINTR, NULL, "interrupted");
        if (x0 == 0) { /* a new band of rows */
            whole_rows = want >= (double)n0 * (double)l1;
            h = whole_rows ? extent(want / ((double)n0 * (double)l1), l1, n1 - y0) : (n1 - y0 < l1 ? n1 - y0 : l1);
        }
        const size_t w = whole_rows ? n0 : extent(want / ((double)h * (double)l0), l0, n0 - x0);
        size_t off[2] = {x0, y0}, part[2] = {w, h};
        const double t0 = now_s();
        pf_status st = enqueue(dev, kid, dims, part, lws, off);
        if (st != PF_OK)
            return st;
        PF_CL_TRY(clFinish(dev->queue), "clFinish");
        want = next_piece(dev, (double)w * (double)h, now_s() - t0);
        x0 += w;
        if (x0 >= n0) {
            x0 = 0;
            y0 += h;
        }
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
