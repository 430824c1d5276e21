/* The one mapping from the core's error channel (pf_status + the thread's pf_last_error() record,
 * core/pf_common.h) to a Python exception. Every binding raises through here:
 *   PF_EINVAL, PF_EOVERFLOW, PF_ENONFINITE -> ValueError
 *   PF_ENOMEM                              -> MemoryError
 *   PF_EDEVICE (and unknown statuses)      -> RuntimeError
 *   PF_EINTR                               -> the pending exception (a signal handler's), else KeyboardInterrupt
 * The message names the argument recorded by pf_fail ("argument 'g_level': must be ..."), or the
 * environment variable it records ("environment variable PYFASTPIM_CL_TILE: expected ...", the wording
 * of pyfastpim.devices' PYFASTPIM_OPENCL_DEVICE error too); without a record for this status it names
 * the operation and, when given, the backend's own text. */
#include <string.h>

#include "python/bindings.h"
#include "core/pf_common.h"

static PyObject *exception_type(pf_status st)
{
    switch (st) {
    case PF_EINVAL:
    case PF_EOVERFLOW:
    case PF_ENONFINITE: return PyExc_ValueError;
    case PF_ENOMEM: return PyExc_MemoryError;
    default: return PyExc_RuntimeError;
    }
}

static const char *generic_text(pf_status st)
{
    switch (st) {
    case PF_EINVAL: return "invalid arguments";
    case PF_EOVERFLOW: return "array sizes overflow";
    case PF_ENONFINITE: return "an input holds NaN or infinity";
    case PF_ENOMEM: return "out of memory";
    case PF_EDEVICE: return "device error";
    default: return "failed";
    }
}

PyObject *pf_raise_status_text(pf_status st, const char *what, const char *text)
{
    const pf_error *rec = pf_last_error();
    if (st == PF_OK)
        st = rec->status != PF_OK ? rec->status : PF_EINVAL;
    if (st == PF_EINTR) {
        if (!PyErr_Occurred())
            PyErr_SetNone(PyExc_KeyboardInterrupt);
        pf_clear_error();
        return NULL;
    }
    PyObject *type = exception_type(st);
    if (text && text[0]) /* the backend described this failure itself (OpenCL runtime errors) */
        PyErr_Format(type, "%s: %s", what ? what : "pyfastpim", text);
    else if (rec->status == st && rec->arg[0])
        PyErr_Format(type, strncmp(rec->arg, PF_ENV_PREFIX, sizeof PF_ENV_PREFIX - 1) == 0
                     ? "environment variable %s: %s" : "argument '%s': %s",
                     rec->arg, rec->message[0] ? rec->message : generic_text(st));
    else if (rec->status == st && rec->message[0])
        PyErr_Format(type, "%s: %s", what ? what : "pyfastpim", rec->message);
    else if (st < PF_OK || st > PF_ENONFINITE)
        PyErr_Format(type, "%s: failed with status %d", what ? what : "pyfastpim", (int)st);
    else
        PyErr_Format(type, "%s: %s", what ? what : "pyfastpim", generic_text(st));
    pf_clear_error();
    return NULL;
}

PyObject *pf_raise_status(pf_status st, const char *what) { return pf_raise_status_text(st, what, NULL); }

PyObject *pf_raise_last_error(const char *what) { return pf_raise_status_text(PF_OK, what, NULL); }
