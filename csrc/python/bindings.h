/* Each kernel family registers its Python functions from its own bind_*.c;
 * module.c calls these in order. */
#ifndef PF_BINDINGS_H
#define PF_BINDINGS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "core/pf_common.h"
#include "python/convert.h"

int pf_bind_slicing_init(PyObject *module);
int pf_bind_dpe_init(PyObject *module);
int pf_bind_attention_init(PyObject *module);
int pf_bind_opencl_init(PyObject *module);
int pf_bind_process_init(PyObject *module); /* bind_process.c: CallCounter, fork handling */

/* Nonzero in a process forked after the module was loaded (bind_process.c). */
int pf_in_forked_child(void);

int pf_bind_physics_init(PyObject *module); /* bind_physics.c: IR drop, drift */

/* Python's error-message formatter has no %g (3.12+ raise SystemError on it):
 * doubles are formatted here and passed as %s. */
static inline const char *pf_fmt_double(char *buf, size_t size, double v)
{
    PyOS_snprintf(buf, size, "%.6g", v);
    return buf;
}

/* The one error mapper (errors.c): raises the Python exception for a failed core call from the
 * thread's pf_last_error() record (naming the argument at fault) when it holds status st, else a
 * message naming `what` (and, in pf_raise_status_text, the backend's own text). st == PF_OK uses the
 * record's status. Consumes the record; returns NULL for chaining. */
PyObject *pf_raise_status(pf_status st, const char *what);
PyObject *pf_raise_status_text(pf_status st, const char *what, const char *text);
PyObject *pf_raise_last_error(const char *what);

#endif
