/* pyfastpim.Array: the core's array type (binding layer).
 *
 * An Array either views memory owned by another object (a NumPy array, a
 * torch tensor through DLPack, any buffer exporter) or owns a pf_alloc block.
 * Arrays handed to kernels are always C-contiguous, native byte order, of a
 * supported dtype; pf_array_from_object makes at most one counted copy to get
 * there. */
#ifndef PF_ARRAY_H
#define PF_ARRAY_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "python/dlpack_compat.h" /* <dlpack/dlpack.h> plus the DLPack 1.0 versioned tensor */

#define PF_MAXDIM 8

typedef enum {
    PF_DT_F32 = 0,
    PF_DT_F64,
    PF_DT_U8,
    PF_DT_I8,
    PF_DT_I16,
    PF_DT_U16,
    PF_DT_I32,
    PF_DT_I64,
    PF_DT_COUNT,
    /* import-only element types: asarray converts them once (counted) to float32,
     * or to the requested float dtype; no Array ever holds them */
    PF_DT_F16_IN = PF_DT_COUNT,
    PF_DT_BF16_IN,
    PF_DT_ANY = -1
} pf_dtype;

typedef struct {
    PyObject_HEAD
    char *data;
    int ndim;
    Py_ssize_t shape[PF_MAXDIM];
    Py_ssize_t strides[PF_MAXDIM]; /* bytes */
    pf_dtype dtype;
    int readonly;
    PyObject *base;          /* keeps the memory alive when not owned */
    Py_buffer view;          /* held while viewing a buffer exporter */
    int has_view;
    DLManagedTensor *dl;     /* held while viewing an imported DLPack tensor */
    DLManagedTensorVersioned *dlv; /* same, for a DLPack 1.0 (versioned) tensor */
    int owns_data;           /* data is a pf_alloc block */
    Py_ssize_t exports;      /* live buffer-protocol exports */
    PyObject *weakreflist;
} PfArray;

extern PyTypeObject PfArray_Type;
#define PfArray_Check(o) PyObject_TypeCheck((o), &PfArray_Type)

size_t pf_dtype_size(pf_dtype dt);
const char *pf_dtype_name(pf_dtype dt);
/* Parses None / str / numpy dtype / torch dtype into *out (PF_DT_ANY for
 * None). Sets TypeError naming argname and returns -1 on failure. */
int pf_dtype_from_object(PyObject *obj, const char *argname, pf_dtype *out);

/* New owned, C-contiguous, uninitialised array; NULL with MemoryError or
 * ValueError (overflow) set. */
PfArray *pf_array_new(pf_dtype dt, int ndim, const Py_ssize_t *shape);
/* Same, zero-filled. */
PfArray *pf_array_zeros(pf_dtype dt, int ndim, const Py_ssize_t *shape);

/* View obj as a C-contiguous array of dtype dt (PF_DT_ANY keeps its dtype),
 * copying once (counted) only when dtype or layout require it. writable
 * demands a writable buffer and never copies (a copy would not write back):
 * ValueError instead. Errors name argname. Returns a new reference. */
PfArray *pf_array_from_object(PyObject *obj, pf_dtype dt, int writable, const char *argname);

size_t pf_array_size(const PfArray *a);   /* number of elements */
size_t pf_array_nbytes(const PfArray *a);

/* The module function pyfastpim._core.asarray(obj, dtype=None, writable=False). */
PyObject *pf_py_asarray(PyObject *self, PyObject *args, PyObject *kwds);
/* pyfastpim._core._view(obj, name): asarray(obj, 'float32') whose errors name the argument `name`. */
PyObject *pf_py_view(PyObject *self, PyObject *args);
int pf_array_module_init(PyObject *module);

#endif
