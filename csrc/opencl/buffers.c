/* Operands, scratch and the per-call buffer set (see internal.h). */
#include "opencl/internal.h"

#include <stdio.h>

pf_status pf_cl_check_alloc(const pf_cl_device *dev, size_t bytes, const char *what)
{
    if ((uint64_t)bytes > dev->info.max_alloc_bytes)
        return pf_fail(PF_EDEVICE, NULL, "%s needs a buffer of %zu bytes, above CL_DEVICE_MAX_MEM_ALLOC_SIZE = %llu "
                       "of %s", what, bytes, (unsigned long long)dev->info.max_alloc_bytes, dev->info.name);
    return PF_OK;
}

static int shareable(const pf_cl_device *dev, const void *host)
{
    return dev->zero_copy && ((uintptr_t)host % dev->zc_align) == 0;
}

static cl_mem create(pf_cl_device *dev, cl_mem_flags flags, size_t bytes, void *host, const char *what,
                     pf_status *st)
{
    cl_int rc;
    cl_mem m = clCreateBuffer(dev->ctx, flags, bytes, host, &rc);
    if (rc != CL_SUCCESS) {
        *st = pf_cl_fail_call(rc, what);
        return NULL;
    }
    return m;
}

/* Writes host into mem (one counted transfer). */
static pf_status upload(pf_cl_device *dev, cl_mem mem, const void *host, size_t bytes, const char *what)
{
    PF_CL_TRY(clEnqueueWriteBuffer(dev->queue, mem, CL_TRUE, 0, bytes, host, 0, NULL, NULL), what);
    pf_record_copy(PF_COPY_HOST_TO_DEVICE, bytes);
    return PF_OK;
}

pf_status pf_cl_buf_in(pf_cl_device *dev, const void *host, size_t bytes, const char *what, cl_mem *out)
{
    pf_status st = PF_OK;
    *out = NULL;
    if (bytes == 0 || !host) { /* absent operand: a small placeholder the kernel never reads */
        *out = create(dev, CL_MEM_READ_ONLY, 64, NULL, "clCreateBuffer(placeholder)", &st);
        return st;
    }
    if ((st = pf_cl_check_alloc(dev, bytes, what)) != PF_OK)
        return st;
    if (shareable(dev, host)) {
        *out = create(dev, CL_MEM_READ_ONLY | CL_MEM_USE_HOST_PTR, bytes, (void *)host,
                      "clCreateBuffer(CL_MEM_USE_HOST_PTR)", &st);
        return st;
    }
    *out = create(dev, CL_MEM_READ_ONLY, bytes, NULL, "clCreateBuffer", &st);
    if (st == PF_OK && (st = upload(dev, *out, host, bytes, "clEnqueueWriteBuffer")) != PF_OK) {
        clReleaseMemObject(*out);
        *out = NULL;
    }
    return st;
}

pf_status pf_cl_scratch_get(pf_cl_device *dev, int slot, size_t bytes, const char *what, cl_mem *out)
{
    pf_status st = PF_OK;
    pf_cl_scratch *s = &dev->scratch[slot];
    if (bytes < 64)
        bytes = 64;
    if (s->mem && s->bytes >= bytes) {
        *out = s->mem;
        return PF_OK;
    }
    if ((st = pf_cl_check_alloc(dev, bytes, what)) != PF_OK)
        return st;
    if (s->mem)
        clReleaseMemObject(s->mem);
    pf_free(s->host);
    memset(s, 0, sizeof *s);
    if (dev->zero_copy && dev->zc_align <= PF_ALIGN) {
        s->host = pf_alloc(bytes);
        if (!s->host)
            return pf_fail(PF_ENOMEM, NULL, "%s: out of memory", what);
        s->mem = create(dev, CL_MEM_READ_WRITE | CL_MEM_USE_HOST_PTR, bytes, s->host, "clCreateBuffer(scratch)", &st);
    } else {
        s->mem = create(dev, CL_MEM_READ_WRITE, bytes, NULL, "clCreateBuffer(scratch)", &st);
    }
    if (st != PF_OK) {
        pf_free(s->host);
        memset(s, 0, sizeof *s);
        return st;
    }
    s->bytes = bytes;
    *out = s->mem;
    return PF_OK;
}

pf_status pf_cl_scratch_zero(pf_cl_device *dev, int slot, const uint64_t sig[4])
{
    pf_cl_scratch *s = &dev->scratch[slot];
    if (s->zeroed && memcmp(s->sig, sig, sizeof s->sig) == 0)
        return PF_OK;
    const float zero = 0.0f;
    s->zeroed = 0;
    memset(s->content, 0, sizeof s->content);
    PF_CL_TRY(clEnqueueFillBuffer(dev->queue, s->mem, &zero, sizeof zero, 0, s->bytes / sizeof(float) * sizeof(float),
                                  0, NULL, NULL), "clEnqueueFillBuffer(scratch)");
    memcpy(s->sig, sig, sizeof s->sig);
    s->zeroed = 1;
    return PF_OK;
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

/* ---- the per-call buffer set ---- */

void pf_cl_set_init(pf_cl_set *s, pf_cl_device *dev)
{
    memset(s, 0, sizeof *s);
    s->dev = dev;
}

pf_status pf_cl_set_status(pf_cl_set *s, pf_status st)
{
    if (s->st == PF_OK)
        s->st = st;
    return s->st;
}

/* Appends mem (NULL when creating it failed: then st is recorded). */
static cl_mem add(pf_cl_set *s, cl_mem mem, void *host, size_t bytes, int shared, pf_status st)
{
    if (st != PF_OK) {
        pf_cl_set_status(s, st);
        return NULL;
    }
    if (s->n == PF_CL_SET_MAX) { /* a programming error: the sets are sized by the ops */
        clReleaseMemObject(mem);
        pf_cl_set_status(s, pf_fail(PF_EDEVICE, NULL, "OpenCL buffer set: more than %d buffers", PF_CL_SET_MAX));
        return NULL;
    }
    s->b[s->n].mem = mem;
    s->b[s->n].host = host;
    s->b[s->n].bytes = bytes;
    s->b[s->n].shared = shared;
    s->n++;
    return mem;
}

cl_mem pf_cl_set_in(pf_cl_set *s, const void *host, size_t bytes, const char *what)
{
    if (s->st != PF_OK)
        return NULL;
    cl_mem m = NULL;
    pf_status st = pf_cl_buf_in(s->dev, host, bytes, what, &m);
    return add(s, m, NULL, 0, 0, st);
}

cl_mem pf_cl_set_out(pf_cl_set *s, void *host, size_t bytes, const char *what)
{
    (void)what;
    if (s->st != PF_OK)
        return NULL;
    if (!host)
        return pf_cl_set_in(s, NULL, 0, "placeholder");
    pf_status st = pf_cl_check_alloc(s->dev, bytes, "the output");
    const int shared = shareable(s->dev, host);
    /* READ_WRITE, not WRITE_ONLY: some kernels read what they write (pf_slice_max's atomic_max, the
     * attention epilogue on out == x); reading a WRITE_ONLY buffer is undefined on GPUs */
    cl_mem m = st != PF_OK ? NULL : create(s->dev, CL_MEM_READ_WRITE | (shared ? CL_MEM_USE_HOST_PTR : 0), bytes,
                                           shared ? host : NULL, "clCreateBuffer(output)", &st);
    return add(s, m, host, bytes, shared, st);
}

cl_mem pf_cl_set_inout(pf_cl_set *s, void *host, size_t bytes, const char *what)
{
    if (s->st != PF_OK)
        return NULL;
    pf_status st = PF_OK;
    const int shared = shareable(s->dev, host);
    char call[96];
    snprintf(call, sizeof call, "clCreateBuffer(%s)", what);
    cl_mem m = create(s->dev, CL_MEM_READ_WRITE | (shared ? CL_MEM_USE_HOST_PTR : 0), bytes, shared ? host : NULL,
                      call, &st);
    if (!add(s, m, host, bytes, shared, st))
        return NULL;
    if (!shared) {
        snprintf(call, sizeof call, "clEnqueueWriteBuffer(%s)", what);
        if (pf_cl_set_status(s, upload(s->dev, m, host, bytes, call)) != PF_OK)
            return NULL;
    }
    return m;
}

cl_mem pf_cl_set_temp(pf_cl_set *s, size_t bytes, const char *what)
{
    if (s->st != PF_OK)
        return NULL;
    pf_status st = PF_OK;
    char call[96];
    snprintf(call, sizeof call, "clCreateBuffer(%s)", what);
    cl_mem m = create(s->dev, CL_MEM_READ_WRITE, bytes, NULL, call, &st);
    return add(s, m, NULL, 0, 0, st);
}

void pf_cl_set_zero(pf_cl_set *s, cl_mem mem, size_t bytes, const char *what)
{
    if (s->st != PF_OK)
        return;
    const cl_uint zero = 0;
    cl_int rc = clEnqueueFillBuffer(s->dev->queue, mem, &zero, sizeof zero, 0, bytes, 0, NULL, NULL);
    if (rc != CL_SUCCESS) {
        char call[96];
        snprintf(call, sizeof call, "clEnqueueFillBuffer(%s)", what);
        pf_cl_set_status(s, pf_cl_fail_call(rc, call));
    }
}

/* Makes an output's bytes visible in host memory: map/unmap when shared, else one counted read. */
static pf_status read_back(pf_cl_device *dev, cl_mem mem, void *host, size_t bytes, int shared)
{
    cl_int rc;
    if (!shared) {
        PF_CL_TRY(clEnqueueReadBuffer(dev->queue, mem, CL_TRUE, 0, bytes, host, 0, NULL, NULL),
                  "clEnqueueReadBuffer(output)");
        pf_record_copy(PF_COPY_DEVICE_TO_HOST, bytes);
        return PF_OK;
    }
    void *m = clEnqueueMapBuffer(dev->queue, mem, CL_TRUE, CL_MAP_READ, 0, bytes, 0, NULL, NULL, &rc);
    PF_CL_TRY(rc, "clEnqueueMapBuffer(output)");
    if (m != host) { /* a runtime that maps a shadow copy: count it and copy it back */
        memcpy(host, m, bytes);
        pf_record_copy(PF_COPY_DEVICE_TO_HOST, bytes);
    }
    PF_CL_TRY(clEnqueueUnmapMemObject(dev->queue, mem, m, 0, NULL, NULL), "clEnqueueUnmapMemObject(output)");
    return PF_OK;
}

pf_status pf_cl_set_finish(pf_cl_set *s)
{
    for (int i = 0; i < s->n && s->st == PF_OK; i++)
        if (s->b[i].host)
            pf_cl_set_status(s, read_back(s->dev, s->b[i].mem, s->b[i].host, s->b[i].bytes, s->b[i].shared));
    if (s->st == PF_OK) {
        cl_int rc = clFinish(s->dev->queue);
        if (rc != CL_SUCCESS)
            pf_cl_set_status(s, pf_cl_fail_call(rc, "clFinish"));
    }
    return s->st;
}

pf_status pf_cl_set_close(pf_cl_set *s)
{
    if (s->st != PF_OK)
        clFinish(s->dev->queue); /* nothing may still use host memory the caller frees */
    for (int i = 0; i < s->n; i++)
        if (s->b[i].mem)
            clReleaseMemObject(s->b[i].mem);
    s->n = 0;
    return s->st;
}

pf_status pf_cl_set_done(pf_cl_set *s)
{
    if (s->st == PF_OK)
        pf_cl_set_finish(s);
    return pf_cl_set_close(s);
}

pf_status pf_cl_set_launch(pf_cl_set *s, int kid, const pf_cl_arg *args, size_t nargs, const pf_cl_range *r)
{
    if (s->st != PF_OK)
        return s->st;
    return pf_cl_set_status(s, pf_cl_launch(s->dev, kid, args, nargs, r));
}
