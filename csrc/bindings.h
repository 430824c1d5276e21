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
int pf_bind_physics_init(PyObject *module);

/* Converts a pf_status into a Python exception (returns NULL for chaining). */
PyObject *pf_raise_status(int status, const char *what);

#endif
