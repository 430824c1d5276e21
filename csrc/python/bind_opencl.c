/* Python bindings of the OpenCL backend: device listing, the device handle
 * type pyfastpim._core.OpenCLDevice (context, queue, program, scratch and the
 * resident-weights cache of one device), the `device=` argument of the op
 * bindings (bind_device.h: _core.dpe_mvm(..., device=handle) and every other op,
 * the attention kernels included, run through the backend table, core/backend.h);
 * the handle has no op methods. csrc/opencl/ sees plain pointers.
 *
 * Threading: one lock per handle serializes its calls. It is taken after the
 * call's arguments are converted, waited for with the GIL released (Ctrl-C ends the
 * wait with KeyboardInterrupt, the lock not taken), and held
 * while the kernels run with the GIL released and while the resident-weights
 * cache is searched or changed (which may run Python code: a weights_key's
 * __eq__, a dropped reference's finalizer); a call made by such code on the
 * same handle raises RuntimeError instead of deadlocking. */
#include "python/array.h"
#include "python/bind_device.h"
#include "python/bind_dpe.h"
#include "python/bindings.h"
#include "core/dpe.h"
#include "core/memory.h"
#include "cpu/backend.h"
#include "opencl/backend.h"
#include "opencl/opencl.h"

#include <math.h>
#include <pythread.h>
#include <unistd.h>

/* Resident weights: a per-device cache bounded by bytes (least recently used
 * evicted past the budget; a set larger than the whole budget is used for its
 * call only). Callers release entries when the weights they hold die
 * (forget_weights, called by SlicedData finalizers in pyfastpim/dpe.py). */
#define PF_CL_BUDGET_DEFAULT ((size_t)256 << 20) /* when the device reports no memory size */

typedef struct {
    PyObject *key;        /* weights_key given by the caller */
    PyObject *refs[3];    /* w_levels, w_conductance, w_scale arrays the buffers belong to */
    pf_cl_weights *w;
    uint64_t last_use;
} wentry;

typedef struct {
    PyObject_HEAD
    pf_cl_device *dev;
    PyThread_type_lock lock;
    unsigned long owner; /* thread ident of the lock's holder, 0 when free (read and written with the GIL) */
    wentry *cache;        /* ncache entries, room for cap */
    int ncache, cap;
    size_t cache_bytes;   /* sum of the entries' bytes */
    size_t budget;        /* bound on cache_bytes */
    PyObject *pending;    /* list of keys to forget, queued while the device was busy */
    uint64_t clock;
} PfCLDevice;

/* The exception of a failed OpenCL call: the message the backend recorded with pf_fail (when its
 * record is of this failure), prefixed with what was done. */
static PyObject *raise_cl(int st, const char *what)
{
    return pf_raise_status((pf_status)st, what); /* the one error mapper (errors.c) */
}

/* How long one wait for a busy device lock lasts before the waiter looks at pending signals. */
#define PF_CL_LOCK_POLL_US 50000

/* Waits for the device lock held by another thread, with the GIL released, in slices of
 * PF_CL_LOCK_POLL_US (a signal also ends a slice early); between slices the pending signals'
 * Python handlers run (on the main thread only, as for threading.Lock.acquire), so Ctrl-C
 * raises KeyboardInterrupt instead of waiting for the holder's call (which may take minutes).
 * A handler that does not raise lets the wait go on. 0 with the lock, or -1 with the handler's
 * exception and the lock not taken. */
static int wait_device_lock(PfCLDevice *self)
{
    PyLockStatus r;
    for (;;) {
        Py_BEGIN_ALLOW_THREADS
        r = PyThread_acquire_lock_timed(self->lock, PF_CL_LOCK_POLL_US, 1);
        Py_END_ALLOW_THREADS
        if (r == PY_LOCK_ACQUIRED)
            return 0;
        if (PyErr_CheckSignals() < 0)
            return -1;
    }
}

static int fork_check_dev(const char *what, const pf_cl_device *dev);

/* 0, or -1 with RuntimeError for a reentrant call from the holding thread or in a forked child
 * (see "fork" below: the lock may have been held by a thread of the parent, which the child
 * lacks, so waiting would never end), or with the exception of a signal handler
 * (KeyboardInterrupt) raised while waiting for another thread. */
static int lock_device(PfCLDevice *self)
{
    if (fork_check_dev("using the OpenCL device handle", self->dev) < 0)
        return -1;
    unsigned long me = PyThread_get_thread_ident();
    if (self->owner == me) {
        PyErr_SetString(PyExc_RuntimeError, "OpenCL device handle is in use by this thread (a reentrant call from "
                        "Python code run during one of its own calls, e.g. a weights_key's __eq__)");
        return -1;
    }
    if (!PyThread_acquire_lock(self->lock, NOWAIT_LOCK) && wait_device_lock(self) < 0)
        return -1;
    self->owner = me;
    return 0;
}

static void unlock_device(PfCLDevice *self)
{
    self->owner = 0;
    PyThread_release_lock(self->lock);
}

/* int st = `call` (a pf_cl_* call returning pf_status) run with the GIL released; a failure
 * raises the exception of raise_cl naming `what`. */
#define PF_CL_NOGIL(st, what, call)                                                                            \
    do {                                                                                                       \
        pf_clear_error();                                                                                      \
        Py_BEGIN_ALLOW_THREADS                                                                                 \
        (st) = (call);                                                                                         \
        Py_END_ALLOW_THREADS                                                                                   \
        if ((st) != PF_OK)                                                                                     \
            raise_cl((st), (what));                                                                            \
    } while (0)

/* PF_CL_NOGIL with the device lock of `self` held around the call; st = -1 (with lock_device's exception)
 * when the lock is not taken (a reentrant call, Ctrl-C while waiting). */
#define PF_CL_LOCKED(self, st, what, call)                                                                     \
    do {                                                                                                       \
        if (lock_device(self) < 0) {                                                                           \
            (st) = -1;                                                                                         \
            break;                                                                                             \
        }                                                                                                      \
        PF_CL_NOGIL(st, what, call);                                                                           \
        unlock_device(self);                                                                                   \
    } while (0)

/* ---- device listing ---- */

static PyObject *info_dict(const pf_cl_device_info *d)
{
    PyObject *r = Py_BuildValue("{s:i,s:i,s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:O,s:K,s:K,s:I,s:n}", "platform", d->platform,
                         "device", d->device, "platform_name", d->platform_name, "platform_version",
                         d->platform_version, "name", d->name, "vendor", d->vendor, "version", d->version, "driver",
                         d->driver, "type", d->type, "host_unified_memory",
                         d->host_unified_memory ? Py_True : Py_False, "global_mem_bytes",
                         (unsigned long long)d->global_mem_bytes, "max_alloc_bytes",
                         (unsigned long long)d->max_alloc_bytes, "compute_units", d->compute_units,
                         "max_work_group_size", (Py_ssize_t)d->max_work_group_size);
    /* what GPU portability depends on: local memory (the tiled MVM kernel), float semantics (bit-identity) */
    PyObject *extra = r ? Py_BuildValue("{s:K,s:O,s:O,s:O}", "local_mem_bytes", (unsigned long long)d->local_mem_bytes,
                                        "local_mem_dedicated", d->local_mem_dedicated ? Py_True : Py_False,
                                        "fp32_denormals", d->fp32_denormals ? Py_True : Py_False,
                                        "fp32_correctly_rounded_divide_sqrt",
                                        d->fp32_correct_divsqrt ? Py_True : Py_False)
                        : NULL;
    if (!extra || PyDict_Update(r, extra) < 0)
        Py_CLEAR(r);
    Py_XDECREF(extra);
    return r;
}

static int cl_forked(void);
static int fork_check(const char *what);

/* The last listing made by this process, (platforms, [dict, ...]): a forked child answers with it
 * (copies) instead of asking its driver (see "fork" below). */
static PyObject *g_cl_listing;

static PyObject *listing_copy(PyObject *listing)
{
    PyObject *src = PyTuple_GET_ITEM(listing, 1);
    PyObject *devs = PyList_New(PyList_GET_SIZE(src));
    for (Py_ssize_t i = 0; devs && i < PyList_GET_SIZE(src); i++) {
        PyObject *d = PyDict_Copy(PyList_GET_ITEM(src, i));
        if (!d)
            Py_CLEAR(devs);
        else
            PyList_SET_ITEM(devs, i, d);
    }
    return devs ? Py_BuildValue("(ON)", PyTuple_GET_ITEM(listing, 0), devs) : NULL;
}

static PyObject *py_cl_devices(PyObject *self, PyObject *noargs)
{
    (void)self;
    (void)noargs;
    if (cl_forked()) { /* no OpenCL call here: some drivers hang in a forked child */
        if (g_cl_listing)
            return listing_copy(g_cl_listing);
        fork_check("listing OpenCL devices (the parent listed none completely)");
        return NULL;
    }
    pf_cl_device_info *list = NULL;
    int count = 0, np = 0;
    int st;
    PF_CL_NOGIL(st, "listing OpenCL devices", pf_cl_list(&list, &count, &np));
    if (st != PF_OK)
        return NULL;
    PyObject *devs = PyList_New(count);
    for (int i = 0; devs && i < count; i++) {
        PyObject *d = info_dict(&list[i]);
        if (!d) {
            Py_CLEAR(devs);
            break;
        }
        PyList_SET_ITEM(devs, i, d);
    }
    pf_free(list);
    if (!devs)
        return NULL;
    PyObject *r = Py_BuildValue("(iN)", np, devs);
    if (r) {
        PyObject *kept = listing_copy(r); /* the caller may change its dicts */
        if (!kept) {
            Py_DECREF(r);
            return NULL;
        }
        Py_XSETREF(g_cl_listing, kept);
    }
    return r;
}


/* ---- fork ----
 * OpenCL runtimes do not survive fork: a child forked after its parent
 * initialised the runtime has the parent's context, queues and driver state
 * but none of the runtime's threads (PoCL 3: the parent's context and any new
 * one both hang at the first kernel, even when the parent only listed the
 * devices; other drivers can hang already listing the platforms). So a forked child
 * makes no OpenCL call: it refuses every OpenCL operation, and opening a device, with a
 * RuntimeError naming the cause (and the device, for a handle of the parent's), answers a
 * listing with the parent's (g_cl_listing), and never releases the parent's objects (their
 * memory is reclaimed with the process). */
static int cl_forked(void)
{
    long owner = pf_cl_runtime_owner();
    return owner != 0 && owner != (long)getpid();
}

#define PF_FORK_ADVICE                                                                                         \
    "Create OpenCL devices (and the engines, contexts and layers using them) in the worker itself, started "  \
    "with multiprocessing's 'spawn' or 'forkserver' method (torch: DataLoader(..., "                          \
    "multiprocessing_context='spawn')), or use a CPU engine in forked workers"

static int fork_check(const char *what)
{
    if (!cl_forked())
        return 0;
    PyErr_Format(PyExc_RuntimeError,
                 "%s: this process (pid %ld) was forked from pid %ld after that process had initialised "
                 "OpenCL; OpenCL runtimes and their device handles do not survive fork (the parent's context, or a "
                 "new one, would hang). " PF_FORK_ADVICE,
                 what, (long)getpid(), pf_cl_runtime_owner());
    return -1;
}

/* fork_check for a call on the handle of `dev`, which the message names ('opencl:P:D' and its name). */
static int fork_check_dev(const char *what, const pf_cl_device *dev)
{
    if (!cl_forked())
        return 0;
    const pf_cl_device_info *d = pf_cl_info(dev); /* host memory: no OpenCL call */
    PyErr_Format(PyExc_RuntimeError,
                 "%s: the OpenCL device 'opencl:%d:%d' (%s) was opened by pid %ld, and this process (pid %ld) "
                 "was forked from it; OpenCL device handles do not survive fork (the handle's context would "
                 "hang here, and so would a new one). " PF_FORK_ADVICE,
                 what, d->platform, d->device, d->name, pf_cl_runtime_owner(), (long)getpid());
    return -1;
}

static PyObject *py_cl_platform_queries(PyObject *self, PyObject *noargs)
{
    (void)self;
    (void)noargs;
    return PyLong_FromUnsignedLongLong((unsigned long long)pf_cl_platform_queries());
}

/* _cl_refuse_forked(what): the RuntimeError of a forked child for `what` (pyfastpim.resolve_device
 * calls it before listing devices), None elsewhere. */
static PyObject *py_cl_refuse_forked(PyObject *self, PyObject *what)
{
    (void)self;
    const char *w = PyUnicode_Check(what) ? PyUnicode_AsUTF8(what) : NULL;
    if (!w) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_TypeError, "argument 'what': expected a str, got %s", Py_TYPE(what)->tp_name);
        return NULL;
    }
    if (fork_check(w) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* ---- the handle type ---- */

static void wentry_clear(wentry *e)
{
    if (!cl_forked()) /* a forked child must not call into the parent's runtime */
        pf_cl_weights_free(e->w);
    e->w = NULL;
    Py_CLEAR(e->key);
    for (int i = 0; i < 3; i++)
        Py_CLEAR(e->refs[i]);
}

static void cache_remove(PfCLDevice *self, int idx)
{
    self->cache_bytes -= pf_cl_weights_bytes(self->cache[idx].w);
    wentry_clear(&self->cache[idx]);
    self->cache[idx] = self->cache[self->ncache - 1];
    memset(&self->cache[self->ncache - 1], 0, sizeof(wentry));
    self->ncache--;
}

static void cache_clear(PfCLDevice *self)
{
    while (self->ncache > 0)
        cache_remove(self, self->ncache - 1);
}

/* Removes the entries whose key is `key` or a tuple whose first item is `key`
 * (device lock held). Returns the number removed, or -1 with an exception. */
static int cache_forget(PfCLDevice *self, PyObject *key)
{
    int removed = 0;
    for (int i = self->ncache - 1; i >= 0; i--) {
        PyObject *k = self->cache[i].key;
        int eq = PyObject_RichCompareBool(k, key, Py_EQ);
        if (eq == 0 && PyTuple_Check(k) && PyTuple_GET_SIZE(k) > 0)
            eq = PyObject_RichCompareBool(PyTuple_GET_ITEM(k, 0), key, Py_EQ);
        if (eq < 0)
            return -1;
        if (eq) {
            cache_remove(self, i);
            removed++;
        }
    }
    return removed;
}

/* Forgets the keys queued while the device was busy (device lock held). */
static int cache_forget_pending(PfCLDevice *self)
{
    if (!self->pending || PyList_GET_SIZE(self->pending) == 0)
        return 0;
    PyObject *keys = self->pending;
    self->pending = PyList_New(0);
    if (!self->pending) {
        self->pending = keys;
        return -1;
    }
    int rc = 0;
    for (Py_ssize_t i = 0; rc == 0 && i < PyList_GET_SIZE(keys); i++)
        rc = cache_forget(self, PyList_GET_ITEM(keys, i)) < 0 ? -1 : 0;
    Py_DECREF(keys);
    return rc;
}

static PyObject *PfCLDevice_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"platform", "device", "zero_copy", NULL};
    /* numbers as pyfastpim.devices() lists them: a negative one is a bad argument, not a missing device */
    pf_int_arg pa = {.name = "platform", .min = 0, .max = INT_MAX};
    pf_int_arg da = {.name = "device", .min = 0, .max = INT_MAX};
    pf_flag_arg zc = {.name = "zero_copy", .value = 1};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O&O&|O&:OpenCLDevice", kwlist, pf_conv_int, &pa, pf_conv_int, &da,
                                     pf_conv_flag, &zc))
        return NULL;
    const int zero_copy = zc.value;
    const int platform = (int)pa.value, device = (int)da.value;
    char opening[64]; /* the device named as pyfastpim.devices() lists it ('opencl:P:D') */
    snprintf(opening, sizeof opening, "opening the OpenCL device 'opencl:%d:%d'", platform, device);
    if (fork_check(opening) < 0)
        return NULL;
    PfCLDevice *self = (PfCLDevice *)type->tp_alloc(type, 0);
    if (!self)
        return NULL;
    self->lock = PyThread_allocate_lock();
    if (!self->lock) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    int st;
    PF_CL_NOGIL(st, "opening the OpenCL device", pf_cl_open(platform, device, zero_copy, &self->dev));
    if (st != PF_OK) {
        Py_DECREF(self);
        return NULL;
    }
    /* default budget: a quarter of the device's global memory */
    uint64_t mem = pf_cl_info(self->dev)->global_mem_bytes;
    self->budget = mem ? (size_t)(mem / 4 < SIZE_MAX ? mem / 4 : SIZE_MAX) : PF_CL_BUDGET_DEFAULT;
    if (!(self->pending = PyList_New(0))) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static void PfCLDevice_dealloc(PfCLDevice *self)
{
    cache_clear(self);
    PyMem_Free(self->cache);
    Py_CLEAR(self->pending);
    if (self->dev && !cl_forked())
        pf_cl_close(self->dev);
    if (self->lock)
        PyThread_free_lock(self->lock);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int ensure_built(PfCLDevice *self)
{
    if (fork_check_dev("building the OpenCL kernels", self->dev) < 0)
        return -1;
    int st;
    PF_CL_LOCKED(self, st, "building the OpenCL kernels", pf_cl_build(self->dev));
    return st == PF_OK ? 0 : -1;
}

static PyObject *PfCLDevice_build(PfCLDevice *self, PyObject *noargs)
{
    (void)noargs;
    if (ensure_built(self) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *PfCLDevice_info(PfCLDevice *self, void *closure)
{
    (void)closure;
    return info_dict(pf_cl_info(self->dev));
}

static PyObject *PfCLDevice_get_zero_copy(PfCLDevice *self, void *closure)
{
    (void)closure;
    if (ensure_built(self) < 0)
        return NULL;
    return PyBool_FromLong(pf_cl_zero_copy(self->dev));
}

static PyObject *PfCLDevice_get_tile(PfCLDevice *self, void *closure)
{
    (void)closure;
    if (ensure_built(self) < 0)
        return NULL;
    int tm, tn;
    size_t lx, ly;
    pf_cl_tile(self->dev, &tm, &tn, &lx, &ly);
    return Py_BuildValue("{s:i,s:i,s:n,s:n,s:i,s:n}", "rows", tm, "cols", tn, "local_x", (Py_ssize_t)lx, "local_y",
                         (Py_ssize_t)ly, "k_chunk", pf_cl_mvm_kt_max(self->dev), "preferred_multiple",
                         (Py_ssize_t)pf_cl_mvm_wg_multiple(self->dev));
}

static PyObject *PfCLDevice_get_mvm_kernel(PfCLDevice *self, void *closure)
{
    (void)closure;
    return PyUnicode_FromString(pf_cl_mvm_mode_name(pf_cl_get_mvm_mode(self->dev)));
}

static int PfCLDevice_set_mvm_kernel(PfCLDevice *self, PyObject *value, void *closure)
{
    (void)closure;
    const char *name = value && PyUnicode_Check(value) ? PyUnicode_AsUTF8(value) : NULL;
    const int mode = name ? pf_cl_mvm_mode_parse(name) : -1;
    if (mode < 0) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_ValueError, "argument 'mvm_kernel': expected 'auto', 'tiled' or 'untiled', got %R",
                         value ? value : Py_None);
        return -1;
    }
    if (lock_device(self) < 0)
        return -1;
    pf_cl_set_mvm_mode(self->dev, mode);
    unlock_device(self);
    return 0;
}

static PyObject *PfCLDevice_mvm_uses_tiled(PfCLDevice *self, PyObject *arg)
{
    int64_t n;
    if (pf_as_int64(arg, "n", &n) < 0)
        return NULL;
    if (n < 1) {
        PyErr_SetString(PyExc_ValueError, "argument 'n': must be >= 1");
        return NULL;
    }
    if (ensure_built(self) < 0)
        return NULL;
    int kt;
    if (lock_device(self) < 0)
        return NULL;
    const int tiled = pf_cl_mvm_uses_tiled(self->dev, (int64_t)n, &kt);
    unlock_device(self);
    return PyBool_FromLong(tiled && kt >= 1);
}

static PyObject *PfCLDevice_get_pair_slices(PfCLDevice *self, void *closure)
{
    (void)closure;
    return PyBool_FromLong(pf_cl_get_pair_slices(self->dev));
}

static int PfCLDevice_set_pair_slices(PfCLDevice *self, PyObject *value, void *closure)
{
    (void)closure;
    if (!value || !PyBool_Check(value)) {
        PyErr_Format(PyExc_TypeError, "argument 'pair_slices': expected True or False, got %R", value ? value : Py_None);
        return -1;
    }
    if (lock_device(self) < 0)
        return -1;
    pf_cl_set_pair_slices(self->dev, value == Py_True);
    unlock_device(self);
    return 0;
}

static PyObject *PfCLDevice_get_paired_calls(PfCLDevice *self, void *closure)
{
    (void)closure;
    if (lock_device(self) < 0) /* counted while a call runs with the GIL released */
        return NULL;
    const uint64_t n = pf_cl_paired_calls(self->dev);
    unlock_device(self);
    return PyLong_FromUnsignedLongLong((unsigned long long)n);
}

static PyObject *PfCLDevice_get_launches(PfCLDevice *self, void *closure)
{
    (void)closure;
    if (lock_device(self) < 0) /* counted while a call runs with the GIL released */
        return NULL;
    PyObject *d = PyDict_New(); /* str keys: no Python code runs under the lock */
    for (int i = 0; d && i < pf_cl_kernel_count(); i++) {
        PyObject *v = PyLong_FromUnsignedLongLong((unsigned long long)pf_cl_launches(self->dev, i));
        if (!v || PyDict_SetItemString(d, pf_cl_kernel_name(i), v) < 0)
            Py_CLEAR(d);
        Py_XDECREF(v);
    }
    unlock_device(self);
    return d;
}

static PyObject *PfCLDevice_get_piece_time(PfCLDevice *self, void *closure)
{
    (void)closure;
    return PyFloat_FromDouble(pf_cl_get_piece_time(self->dev));
}

static int PfCLDevice_set_piece_time(PfCLDevice *self, PyObject *value, void *closure)
{
    (void)closure;
    if (!value) {
        PyErr_SetString(PyExc_TypeError, "argument 'piece_time': cannot be deleted");
        return -1;
    }
    double s; /* the library's number rule (pf_as_double: NumPy numbers, Fractions; no bool, str, None) */
    if (pf_as_double(value, "piece_time", &s) < 0)
        return -1;
    if (!(s > 0) || !isfinite(s)) {
        PyErr_Format(PyExc_ValueError, "argument 'piece_time': expected a positive finite number of seconds, got %R",
                     value);
        return -1;
    }
    if (lock_device(self) < 0)
        return -1;
    pf_cl_set_piece_time(self->dev, s);
    unlock_device(self);
    return 0;
}

static PyObject *PfCLDevice_get_scratch_bytes(PfCLDevice *self, void *closure)
{
    (void)closure;
    if (lock_device(self) < 0) /* scratch grows while a call runs with the GIL released */
        return NULL;
    size_t b = pf_cl_scratch_bytes(self->dev);
    unlock_device(self);
    return PyLong_FromSize_t(b);
}

static PyObject *PfCLDevice_get_resident(PfCLDevice *self, void *closure)
{
    (void)closure;
    /* the cache is read under the lock: PyDict_SetItem hashes the keys, which may
     * run Python code and let another thread change the cache */
    if (lock_device(self) < 0)
        return NULL;
    PyObject *d = PyDict_New();
    for (int i = 0; d && i < self->ncache; i++) {
        PyObject *v = PyLong_FromSize_t(pf_cl_weights_bytes(self->cache[i].w));
        if (!v || PyDict_SetItem(d, self->cache[i].key, v) < 0)
            Py_CLEAR(d);
        Py_XDECREF(v);
    }
    unlock_device(self);
    return d;
}

static PyObject *PfCLDevice_release(PfCLDevice *self, PyObject *noargs)
{
    if (fork_check_dev("release()", self->dev) < 0)
        return NULL;
    (void)noargs;
    if (lock_device(self) < 0)
        return NULL;
    cache_clear(self);
    if (self->pending)
        PyList_SetSlice(self->pending, 0, PyList_GET_SIZE(self->pending), NULL);
    pf_cl_release_scratch(self->dev);
    unlock_device(self);
    Py_RETURN_NONE;
}

/* Releases the resident weights of key (or of tuple keys starting with key) now, or at the next call
 * when the device is busy (so it is safe from finalizers, which may run while this thread holds the
 * lock). Not in a forked child: the caller refuses there (forget_weights) or does nothing
 * (_weights_died). */
static PyObject *forget_hashed(PfCLDevice *self, PyObject *key)
{
    if (!PyThread_acquire_lock(self->lock, NOWAIT_LOCK)) {
        if (!self->pending || PyList_Append(self->pending, key) < 0)
            return NULL;
        Py_RETURN_NONE;
    }
    self->owner = PyThread_get_thread_ident();
    int rc = cache_forget_pending(self);
    if (rc == 0)
        rc = cache_forget(self, key) < 0 ? -1 : 0;
    unlock_device(self);
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* forget_hashed for a key that hashes (a TypeError first, as a dict key), its __hash__ called once */
static PyObject *forget_key(PfCLDevice *self, PyObject *key)
{
    return PyObject_Hash(key) == -1 ? NULL : forget_hashed(self, key);
}

/* forget_weights(key): forget_key, refused in a forked child as every other use of the handle (the
 * child's copy of the cache is not the parent's: changing it there would release nothing). */
static PyObject *PfCLDevice_forget_weights(PfCLDevice *self, PyObject *key)
{
    if (PyObject_Hash(key) == -1 || fork_check_dev("forget_weights()", self->dev) < 0)
        return NULL; /* a bad key is a TypeError first, as the setters check their value first */
    return forget_hashed(self, key); /* hashed once: its __hash__ is user code */
}

/* _weights_died(key): what a SlicedData's finalizer calls (pyfastpim/dpe.py): forget_key, and nothing
 * in a forked child, where a finalizer must neither raise nor touch the parent's handle. */
static PyObject *PfCLDevice_weights_died(PfCLDevice *self, PyObject *key)
{
    if (cl_forked())
        Py_RETURN_NONE;
    return forget_key(self, key);
}

static PyObject *PfCLDevice_get_resident_bytes(PfCLDevice *self, void *closure)
{
    (void)closure;
    return PyLong_FromSize_t(self->cache_bytes);
}

static PyObject *PfCLDevice_get_budget(PfCLDevice *self, void *closure)
{
    (void)closure;
    return PyLong_FromSize_t(self->budget);
}

static int PfCLDevice_set_budget(PfCLDevice *self, PyObject *value, void *closure)
{
    (void)closure;
    if (!value) {
        PyErr_SetString(PyExc_TypeError, "resident_budget cannot be deleted");
        return -1;
    }
    uint64_t u; /* an int (a NumPy integer too), not a bool */
    if (pf_as_uint64(value, "resident_budget", &u) < 0)
        return -1;
    size_t v = u > SIZE_MAX ? SIZE_MAX : (size_t)u;
    if (lock_device(self) < 0)
        return -1;
    self->budget = v;
    while (self->ncache > 0 && self->cache_bytes > self->budget) { /* evict least recently used */
        int lru = 0;
        for (int i = 1; i < self->ncache; i++)
            if (self->cache[i].last_use < self->cache[lru].last_use)
                lru = i;
        cache_remove(self, lru);
    }
    unlock_device(self);
    return 0;
}

static PyObject *PfCLDevice_repr(PfCLDevice *self)
{
    const pf_cl_device_info *d = pf_cl_info(self->dev);
    return PyUnicode_FromFormat("<pyfastpim OpenCL device opencl:%d:%d '%s' (%s, %s)>", d->platform, d->device,
                                d->name, d->type, d->platform_name);
}

/* ---- resident weights of the dpe_mvm / dpe_conv2d calls (weights_key) ---- */

/* Finds or makes the resident weights for weights_key (device lock held).
 * Returns 0 with *w set (NULL: no key, transfer per call) or -1 with an
 * exception. *transient is set when *w is not cached (larger than the whole
 * budget): the caller frees it after the call. */
static int resident_weights(PfCLDevice *self, PyObject *key, const pf_dpe_args *a, PfArray *wl, PfArray *wc,
                            PfArray *ws, pf_cl_weights **w, int *transient)
{
    *w = NULL;
    *transient = 0;
    if (cache_forget_pending(self) < 0)
        return -1;
    if (key == Py_None)
        return 0;
    if (PyObject_Hash(key) == -1)
        return -1; /* TypeError: unhashable weights_key */
    for (int i = 0; i < self->ncache; i++) {
        int eq = PyObject_RichCompareBool(self->cache[i].key, key, Py_EQ);
        if (eq < 0)
            return -1;
        if (eq) {
            if (pf_cl_weights_match(self->cache[i].w, a)) {
                self->cache[i].last_use = ++self->clock;
                *w = self->cache[i].w;
                return 0;
            }
            cache_remove(self, i); /* same key, other arrays: stale */
            break;
        }
    }
    /* the key changed: an entry for the same object (equal first item of a
     * tuple key, e.g. (id(sliced), version)) is stale */
    if (PyTuple_Check(key) && PyTuple_GET_SIZE(key) > 0) {
        for (int i = self->ncache - 1; i >= 0; i--) {
            PyObject *k = self->cache[i].key;
            if (!PyTuple_Check(k) || PyTuple_GET_SIZE(k) == 0)
                continue;
            int eq = PyObject_RichCompareBool(PyTuple_GET_ITEM(k, 0), PyTuple_GET_ITEM(key, 0), Py_EQ);
            if (eq < 0)
                return -1;
            if (eq)
                cache_remove(self, i);
        }
    }
    int st;
    pf_cl_weights *made = NULL;
    PF_CL_NOGIL(st, "making weights resident on the OpenCL device", pf_cl_weights_create(self->dev, a, &made));
    if (st != PF_OK)
        return -1;
    size_t bytes = pf_cl_weights_bytes(made);
    if (bytes > self->budget) { /* never kept: used for this call only */
        *w = made;
        *transient = 1;
        return 0;
    }
    /* evict the least recently used entries until the new one fits the budget */
    while (self->ncache > 0 && self->cache_bytes > self->budget - bytes) {
        int lru = 0;
        for (int i = 1; i < self->ncache; i++)
            if (self->cache[i].last_use < self->cache[lru].last_use)
                lru = i;
        cache_remove(self, lru);
    }
    if (self->ncache == self->cap) {
        int cap = self->cap ? 2 * self->cap : 8;
        wentry *grown = self->cap < INT32_MAX / 2 ? PyMem_Realloc(self->cache, (size_t)cap * sizeof(wentry)) : NULL;
        if (!grown) {
            pf_cl_weights_free(made);
            PyErr_NoMemory();
            return -1;
        }
        self->cache = grown;
        self->cap = cap;
    }
    self->cache_bytes += bytes;
    wentry *e = &self->cache[self->ncache++];
    memset(e, 0, sizeof *e);
    e->w = made;
    e->key = Py_NewRef(key);
    e->refs[0] = Py_NewRef((PyObject *)wl);
    e->refs[1] = wc ? Py_NewRef((PyObject *)wc) : NULL;
    e->refs[2] = Py_NewRef((PyObject *)ws);
    e->last_use = ++self->clock;
    *w = made;
    return 0;
}

/* ---- the kernel table, for tests (tests/test_opencl_launcher.py) ---- */

static PyObject *PfCLDevice_kernel_table(PfCLDevice *self, PyObject *noargs)
{
    (void)noargs;
    if (ensure_built(self) < 0)
        return NULL;
    PyObject *list = PyList_New(0);
    for (int i = 0; list && i < pf_cl_kernel_count(); i++) {
        unsigned actual = 0;
        int st;
        PF_CL_LOCKED(self, st, "reading the OpenCL kernel table", pf_cl_kernel_program_args(self->dev, i, &actual));
        PyObject *row = st == PF_OK ? Py_BuildValue("(sII)", pf_cl_kernel_name(i), pf_cl_kernel_declared_args(i),
                                                    actual)
                                    : NULL;
        if (!row || PyList_Append(list, row) < 0)
            Py_CLEAR(list);
        Py_XDECREF(row);
    }
    return list;
}

static PyObject *PfCLDevice_check_kernel_args(PfCLDevice *self, PyObject *args)
{
    const char *name;
    unsigned int declared;
    if (!PyArg_ParseTuple(args, "sI:_check_kernel_args", &name, &declared) || ensure_built(self) < 0)
        return NULL;
    int i = 0;
    while (i < pf_cl_kernel_count() && strcmp(pf_cl_kernel_name(i), name) != 0)
        i++;
    if (i == pf_cl_kernel_count())
        return PyErr_Format(PyExc_ValueError, "argument 'name': no kernel '%s' in the table", name);
    int st;
    PF_CL_LOCKED(self, st, "checking the OpenCL kernel table", pf_cl_kernel_check(self->dev, i, declared));
    if (st != PF_OK)
        return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef PfCLDevice_methods[] = {
    {"build", (PyCFunction)PfCLDevice_build, METH_NOARGS,
     "build()\n--\n\nCompile the kernels for this device now (otherwise done at first use)."},
    {"_kernel_table", (PyCFunction)PfCLDevice_kernel_table, METH_NOARGS,
     "_kernel_table()\n--\n\nTests: (name, declared argument count, the built program's count) of every kernel of "
     "the launcher's table."},
    {"_check_kernel_args", (PyCFunction)PfCLDevice_check_kernel_args, METH_VARARGS,
     "_check_kernel_args(name, declared)\n--\n\nTests: the build-time check of one kernel's argument count against "
     "`declared` (RuntimeError when they differ)."},
    {"mvm_uses_tiled", (PyCFunction)PfCLDevice_mvm_uses_tiled, METH_O,
     "mvm_uses_tiled(n)\n--\n\nWhether a product with crossbar size n runs the local-memory tiled MVM kernel "
     "(pf_dpe_mvm_tiled) under the current mvm_kernel mode."},
    {"release", (PyCFunction)PfCLDevice_release, METH_NOARGS,
     "release()\n--\n\nRelease resident weights and scratch buffers (the kernels stay built)."},
    {"forget_weights", (PyCFunction)PfCLDevice_forget_weights, METH_O,
     "forget_weights(key)\n--\n\nRelease the resident weights whose weights_key is key or a tuple starting with key "
     "(now, or at the next call when the device is busy); RuntimeError in a forked child, as every use of a "
     "parent's handle."},
    {"_weights_died", (PyCFunction)PfCLDevice_weights_died, METH_O,
     "_weights_died(key)\n--\n\nforget_weights(key) for the finalizer of a SlicedData that dies (pyfastpim calls "
     "it), except in a forked child, where it does nothing and raises nothing."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef PfCLDevice_getset[] = {
    {"info", (getter)PfCLDevice_info, NULL, "dict describing the device (as pyfastpim.devices() lists it)", NULL},
    {"zero_copy", (getter)PfCLDevice_get_zero_copy, NULL,
     "True when operands are shared with the device in place (builds the kernels if needed)", NULL},
    {"tile", (getter)PfCLDevice_get_tile, NULL,
     "register tile and work-group shape of the MVM kernels; k_chunk: crossbar rows per local-memory chunk of the "
     "tiled kernel (0: the device's local memory cannot hold its tiles)", NULL},
    {"mvm_kernel", (getter)PfCLDevice_get_mvm_kernel, (setter)PfCLDevice_set_mvm_kernel,
     "MVM tile kernel: 'auto' (default; PYFASTPIM_CL_MVM overrides it at open), 'tiled' (local-memory tiles, "
     "pf_dpe_mvm_tiled) or 'untiled' (pf_dpe_mvm); the results are bit-identical", NULL},
    {"pair_slices", (getter)PfCLDevice_get_pair_slices, (setter)PfCLDevice_set_pair_slices,
     "True (default): noise-free products whose crossbar sums are small enough pack two weight slices per float "
     "(L_2j + 2**s L_2j+1) and split the exact sums before the ADC, half the multiply-adds with bit-identical "
     "results; False: one slice per float", NULL},
    {"paired_calls", (getter)PfCLDevice_get_paired_calls, NULL, "MVM calls on this device that paired weight slices",
     NULL},
    {"launches", (getter)PfCLDevice_get_launches, NULL,
     "{kernel name: launches} on this device so far; a kernel run in pieces (so that Ctrl-C can stop it) counts "
     "each piece", NULL},
    {"piece_time", (getter)PfCLDevice_get_piece_time, (setter)PfCLDevice_set_piece_time,
     "seconds each piece of a kernel run in pieces (calls on the main thread, so that Ctrl-C can stop them "
     "between pieces) aims at: the first piece has a fixed size, each next one is sized from the last one's "
     "measured rate, at most 8 times larger or smaller (default 0.05; results do not depend on it)", NULL},
    {"scratch_bytes", (getter)PfCLDevice_get_scratch_bytes, NULL, "bytes of scratch buffers held", NULL},
    {"resident_weights", (getter)PfCLDevice_get_resident, NULL, "{weights_key: bytes} of resident weights", NULL},
    {"resident_bytes", (getter)PfCLDevice_get_resident_bytes, NULL, "bytes of resident weights held", NULL},
    {"resident_budget", (getter)PfCLDevice_get_budget, (setter)PfCLDevice_set_budget,
     "bound on resident_bytes (default: a quarter of the device's global memory); least recently used weights "
     "are evicted past it, and a weight set larger than the whole budget is transferred for its call only", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject PfCLDevice_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pyfastpim._core.OpenCLDevice",
    .tp_basicsize = sizeof(PfCLDevice),
    .tp_dealloc = (destructor)PfCLDevice_dealloc,
    .tp_repr = (reprfunc)PfCLDevice_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "OpenCLDevice(platform, device, zero_copy=True)\n--\n\n"
              "One OpenCL device: context, queue, kernels (built at first use), scratch and resident weights. "
              "zero_copy=False forces explicit, counted transfers even on host-memory devices.",
    .tp_methods = PfCLDevice_methods,
    .tp_getset = PfCLDevice_getset,
    .tp_new = PfCLDevice_new,
};

static PyMethodDef opencl_methods[] = {
    {"cl_devices", py_cl_devices, METH_NOARGS,
     "cl_devices()\n--\n\n(number of platforms, [device info dict, ...]) as the OpenCL ICD loader reports them (in "
     "a child forked after OpenCL was initialised: the parent's last listing, without an OpenCL call; RuntimeError "
     "when it had none)."},
    {"_cl_refuse_forked", py_cl_refuse_forked, METH_O,
     "_cl_refuse_forked(what)\n--\n\nRuntimeError naming `what` in a child forked after OpenCL was initialised "
     "(no OpenCL call is made there), else None."},
    {"_cl_platform_queries", py_cl_platform_queries, METH_NOARGS,
     "_cl_platform_queries()\n--\n\nTests: clGetPlatformIDs calls made by this process (a forked child starts "
     "from its parent's count)."},
    {NULL, NULL, 0, NULL},
};

/* ---- device= of the op bindings (bind_device.h) ---- */

int pf_device_resolve(PyObject *obj, const char *op, pf_device *d)
{
    memset(d, 0, sizeof *d);
    d->be = &pf_backend_cpu;
    PyOS_snprintf(d->what, sizeof d->what, "%s", op);
    if (!obj || obj == Py_None)
        return 0;
    if (PyObject_TypeCheck(obj, &PfCLDevice_Type)) {
        PyOS_snprintf(d->what, sizeof d->what, "%s on OpenCL", op);
        if (fork_check_dev(d->what, ((PfCLDevice *)obj)->dev) < 0)
            return -1;
        d->be = &pf_backend_opencl;
        d->dev = ((PfCLDevice *)obj)->dev;
        d->handle = Py_NewRef(obj);
        return 0;
    }
    if (PyUnicode_Check(obj)) {
        if (PyUnicode_CompareWithASCIIString(obj, "cpu") == 0)
            return 0;
        PyErr_Format(PyExc_ValueError, "argument 'device': expected None, 'cpu' or an OpenCLDevice handle, got %R "
                     "(device strings such as 'opencl' are resolved by pyfastpim.resolve_device)", obj);
        return -1;
    }
    PyErr_Format(PyExc_TypeError, "argument 'device': expected None, 'cpu' or a pyfastpim._core.OpenCLDevice, got %s",
                 Py_TYPE(obj)->tp_name);
    return -1;
}

int pf_device_from_kwds(PyObject *kwds, PyObject **kw, const char *op, pf_device *d)
{
    static PyObject *name; /* interned "device" */
    PyObject *obj = NULL;
    *kw = NULL;
    if (!name && !(name = PyUnicode_InternFromString("device")))
        return -1;
    if (kwds && !(obj = PyDict_GetItemWithError(kwds, name)) && PyErr_Occurred())
        return -1;
    if (pf_device_resolve(obj, op, d) < 0)
        return -1;
    if (!obj) {
        *kw = Py_XNewRef(kwds);
        return 0;
    }
    /* a copy: the caller's dict may be shared (PyObject_Call passes it as is) */
    if (!(*kw = PyDict_Copy(kwds)) || PyDict_DelItem(*kw, name) < 0) {
        Py_CLEAR(*kw);
        pf_device_clear(d);
        return -1;
    }
    return 0;
}

void pf_device_clear(pf_device *d) { Py_CLEAR(d->handle); }

int pf_device_lock(pf_device *d) { return d->handle ? lock_device((PfCLDevice *)d->handle) : 0; }

void pf_device_unlock(pf_device *d)
{
    if (d->handle)
        unlock_device((PfCLDevice *)d->handle);
}

int pf_device_weights(pf_device *d, PyObject *key, const pf_dpe_args *a, const pf_dpe_refs *refs, const void **w,
                      int *transient)
{
    *w = NULL;
    *transient = 0;
    if (!d->handle) {
        if (key == Py_None)
            return 0;
        PyErr_SetString(PyExc_ValueError, "argument 'weights_key': only an OpenCL device keeps weights resident; "
                        "pass None (the default) on the CPU");
        return -1;
    }
    if (a->batch == 0 || a->rows == 0 || a->cols == 0 || a->inner == 0)
        return 0; /* an empty product reads no weights */
    pf_cl_weights *cw = NULL;
    if (resident_weights((PfCLDevice *)d->handle, key, a, refs->wl, refs->wc, refs->ws, &cw, transient) < 0)
        return -1;
    *w = cw;
    return 0;
}

void pf_device_weights_done(pf_device *d, const void *w, int transient)
{
    if (d->handle && transient)
        pf_cl_weights_free((pf_cl_weights *)w);
}

int pf_bind_opencl_init(PyObject *module)
{
    if (PyType_Ready(&PfCLDevice_Type) < 0)
        return -1;
    Py_INCREF(&PfCLDevice_Type);
    if (PyModule_AddObject(module, "OpenCLDevice", (PyObject *)&PfCLDevice_Type) < 0) {
        Py_DECREF(&PfCLDevice_Type);
        return -1;
    }
    return PyModule_AddFunctions(module, opencl_methods);
}
