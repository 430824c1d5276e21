/* Each kernel family registers its Python functions from its own bind_*.c;
 * module.c calls these in order. */
#ifndef PF_BINDINGS_H
#define PF_BINDINGS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

int pf_bind_slicing_init(PyObject *module);
int pf_bind_dpe_init(PyObject *module);
int pf_bind_attention_init(PyObject *module);
int pf_bind_opencl_init(PyObject *module);
int pf_bind_process_init(PyObject *module); /* bind_process.c: CallCounter, fork handling */

/* After a failed PyArg_ParseTupleAndKeywords: prefix the name of the argument that failed to
 * convert (bind_process.c). */
void pf_name_parse_error(PyObject *args, PyObject *kwds, const char *format, char **kwlist);

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

/* Converts a pf_status into a Python exception (returns NULL for chaining). */
PyObject *pf_raise_status(int status, const char *what);

#endif
