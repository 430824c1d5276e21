/* The `device=` argument of the op bindings (_core.dpe_mvm, dpe_conv2d, slice_quantize,
 * program_conductance, normals, and the attention kernels _attn_update, _attn_apply,
 * _attention_tanh): which backend table (core/backend.h) runs the call, and for an
 * OpenCL device handle (_core.OpenCLDevice, bind_opencl.c) its lock and resident weights.
 *
 *   device=None or "cpu"      the CPU backend
 *   device=<OpenCLDevice>     that device (a forked child refuses it: RuntimeError)
 *   any other string          ValueError naming 'device' (strings are resolved by
 *                             pyfastpim.resolve_device, not here)
 *   anything else             TypeError naming 'device'
 *
 * A binding parses its arguments once, then:
 *     pf_device d;  PyObject *kw;
 *     if (pf_device_from_kwds(kwds, &kw, "slice_quantize", &d) < 0) return NULL;
 *     ... parse (args, kw) ...
 *     pf_device_lock(&d); call d.be->op(d.dev, ...) with the GIL released; pf_device_unlock(&d);
 *     pf_device_clear(&d); Py_XDECREF(kw);
 * The lock is a no-op on the CPU. */
#ifndef PF_BIND_DEVICE_H
#define PF_BIND_DEVICE_H

#include "python/bind_dpe.h"
#include "python/bindings.h"
#include "core/backend.h"

typedef struct {
    const pf_backend *be;
    void *dev;        /* be's device: NULL for the CPU */
    PyObject *handle; /* the OpenCLDevice (a new reference), NULL for the CPU */
    char what[64];    /* the op for messages: "dpe_mvm", or "dpe_mvm on OpenCL" */
} pf_device;

/* device= from obj (NULL: None). 0, or -1 with an exception (d is then clear). */
int pf_device_resolve(PyObject *obj, const char *op, pf_device *d);
/* Takes keyword 'device' out of kwds: *kw is a new reference to a copy of kwds without it, or to
 * kwds itself (NULL when kwds is NULL); then pf_device_resolve. 0, or -1 with an exception (*kw
 * NULL, d clear). */
int pf_device_from_kwds(PyObject *kwds, PyObject **kw, const char *op, pf_device *d);
void pf_device_clear(pf_device *d);
/* The device lock (OpenCL; the CPU has none): 0, or -1 with RuntimeError for a reentrant call or
 * with KeyboardInterrupt (a signal handler's exception) raised while waiting for another thread. */
int pf_device_lock(pf_device *d);
void pf_device_unlock(pf_device *d);

/* With the lock held: the resident weights of `key` for the call a (OpenCL; the CPU has none and
 * takes no key: a key other than None is a ValueError naming 'weights_key'). *w: the weights to
 * pass to be->dpe_mvm (NULL: none), released by pf_device_weights_done after the call. 0, or -1
 * with an exception. */
int pf_device_weights(pf_device *d, PyObject *key, const pf_dpe_args *a, const pf_dpe_refs *refs, const void **w,
                      int *transient);
void pf_device_weights_done(pf_device *d, const void *w, int transient);

/* Runs `call` (a pf_status expression) on the device: lock, GIL released, unlock; st = the
 * status, or -1 (with its exception) when pf_device_lock failed. A failure (st > 0) is raised
 * through pf_raise_status naming d->what. */
#define PF_DEVICE_CALL(d, st, call)                                                                             \
    do {                                                                                                      \
        if (pf_device_lock(d) < 0) {                                                                          \
            (st) = -1;                                                                                        \
            break;                                                                                            \
        }                                                                                                     \
        pf_clear_error();                                                                                     \
        Py_BEGIN_ALLOW_THREADS                                                                                \
        (st) = (call);                                                                                        \
        Py_END_ALLOW_THREADS                                                                                  \
        pf_device_unlock(d);                                                                                  \
        if ((st) != PF_OK)                                                                                    \
            pf_raise_status((pf_status)(st), (d)->what);                                                     \
    } while (0)

#endif
