/* Shared argument converters (convert.c): every entry point (CPU bindings, the OpenCL device
 * handle, layers through them) parses seeds, slice methods, pairs/granules, levels, converter
 * resolutions and sigmas here, so the same input gets the same answer or the same error (type and
 * words) everywhere. Each is a PyArg "O&" converter (1 on success, 0 with an exception naming the
 * argument); the named ones take a struct whose `name` field is the argument's name. Range rules
 * are the core's (core/contract.h). Ints: Python ints or objects with __index__ (NumPy integers),
 * never bool or float. Sequences: list, tuple or any non-string sequence. */
#ifndef PF_CONVERT_H
#define PF_CONVERT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#if PY_VERSION_HEX < 0x030A0000
/* Py_NewRef / Py_XNewRef are 3.10 API; pyproject says 3.9 and newer. */
static inline PyObject *Py_NewRef(PyObject *obj)
{
    Py_INCREF(obj);
    return obj;
}
static inline PyObject *Py_XNewRef(PyObject *obj)
{
    Py_XINCREF(obj);
    return obj;
}
#endif

#include "core/pf_common.h"
#include "core/quantize.h"

/* uint64_t *: an int in [0, 2**64); None gives PF_DEFAULT_SEED (argument 'seed'). */
int pf_conv_seed(PyObject *obj, void *out);
/* uint64_t *: a call counter, an int in [0, 2**64) (argument 'call'; kernels use it modulo 2**32). */
int pf_conv_call(PyObject *obj, void *out);
/* int *: 2 <= g_level <= 256 (argument 'g_level'). */
int pf_conv_g_level(PyObject *obj, void *out);
/* int *: 2 <= rdac <= 2**24 (argument 'rdac'). */
int pf_conv_rdac(PyObject *obj, void *out);

/* int *: bw_e as every entry point reads it: None or 0 for INT (0), a positive int (any size) for BFP
 * (1); TypeError for other types (bool, float, str), ValueError for a negative int (argument 'bw_e'). */
int pf_conv_bw_e(PyObject *obj, void *out);

/* An int in [min, max] under a name. */
typedef struct {
    const char *name;
    int64_t min, max;
    int64_t value;
} pf_int_arg;
int pf_conv_int(PyObject *obj, void *arg);

/* A boolean flag under a name (bfp, dequant, return_nu, zero_copy, writable, ...): True/False, a NumPy
 * bool (a 0-d bool array or tensor too), or an int 0/1 (a NumPy integer too); anything else (a str: 'False' would be true, None, a float,
 * NaN, a container) is a TypeError "argument 'X': expected a bool (True/False or 0/1), got T", another
 * int a ValueError. Stricter than PyArg "p" (any truthy object), like torch's bool arguments. `value`
 * holds the default until the converter runs. */
typedef struct {
    const char *name;
    int value;
} pf_flag_arg;
int pf_conv_flag(PyObject *obj, void *arg);
/* The flag in obj under a name: 0 or 1, or -1 with the exception of pf_conv_flag. */
int pf_as_flag(PyObject *obj, const char *name);

/* A real number under a name (pf_as_double: no range check, the core validators give the ranges). */
typedef struct {
    const char *name;
    double value;
} pf_real_arg;
int pf_conv_real(PyObject *obj, void *arg);

/* A pair of ints >= min (granules, paral sizes: min 1; padding: min 0), each <= max (0: INT64_MAX). */
typedef struct {
    const char *name;
    int64_t min, max;
    int64_t v[2];
} pf_pair_arg;
int pf_conv_pair(PyObject *obj, void *arg);

/* A slice method: a sequence of widths, most significant first. */
typedef struct {
    const char *name;
    int min_total_bits; /* 0: 2 (quantizers); 1: also the sign-only method (products of given codes) */
    pf_slice_method sm;
} pf_method_arg;
int pf_conv_slice_method(PyObject *obj, void *arg);

/* ADC resolutions: one int (for every slice) or a sequence of ints, each in 2..2**24, in the given
 * order (count = how many; 0 for a single int). */
typedef struct {
    const char *name;
    int count;
    int64_t v[PF_MAX_SLICES];
} pf_resolutions_arg;
int pf_conv_resolutions(PyObject *obj, void *arg);

/* _core.check_seed(seed) -> int: the seed every entry point accepts (pf_conv_seed), for Python-level
 * callers that store a seed before any kernel sees it (DPETensor.reset). */
PyObject *pf_py_check_seed(PyObject *self, PyObject *obj);

/* Python-level callers' checks (DPETensor, SlicedData, the layers), the converters' rules and errors:
 * check_bw_e(bw_e) -> bool (BFP; pf_conv_bw_e), check_rdac(rdac) -> int (pf_conv_rdac),
 * check_radc(radc) -> int or tuple of ints (pf_conv_resolutions, argument 'radc': 1..PF_MAX_SLICES values),
 * check_sigma(value, name, read=False) -> float (pf_validate_sigma: finite, in [0, PF_READ_SIGMA_MAX] for
 * read noise, else [0, PF_REL_SIGMA_MAX]). */
PyObject *pf_py_check_bw_e(PyObject *self, PyObject *obj);
PyObject *pf_py_check_rdac(PyObject *self, PyObject *obj);
PyObject *pf_py_check_radc(PyObject *self, PyObject *obj);
PyObject *pf_py_check_sigma(PyObject *self, PyObject *args, PyObject *kwds);
/* check_number(value, name, integer=False) -> float (pf_as_double) or int (pf_as_int64): the type rule
 * of every scalar argument, for Python-level callers (DPETensor, pyfastpim.physics, attention). */
PyObject *pf_py_check_number(PyObject *self, PyObject *args, PyObject *kwds);
/* check_flag(value, name) -> bool: a flag as every entry point reads it (pf_conv_flag), for Python-level
 * flags (asarray's writable, SlicedData's is_weight, drift's compensation, the layers' bias). */
PyObject *pf_py_check_flag(PyObject *self, PyObject *args);

/* Ints and reals: a bool (Python's or NumPy's, a 0-d bool array or tensor) is refused as a TypeError (a
 * flag, not a quantity), as is a complex number (NumPy's __float__ drops the imaginary part); an
 * exception other than TypeError raised by the object's own __index__ / __float__ propagates. */
/* The int in obj under a name (no range check): 0, or -1 with TypeError/ValueError naming it. */
int pf_as_int64(PyObject *obj, const char *name, int64_t *out);
/* pf_as_int64, ints beyond int64 clamped to INT64_MIN / INT64_MAX (where only the sign or a bound
 * matters); `what` names the accepted values in the TypeError ("an int", "None or an int"). */
int pf_as_int64_clamped(PyObject *obj, const char *name, const char *what, int64_t *out);
/* uint64_t: an int in [0, 2**64) under a name (the seed's rule): 0, or -1 with TypeError/ValueError. */
int pf_as_uint64(PyObject *obj, const char *name, uint64_t *out);
/* The real number in obj (a float, an int or an object with __float__, a 0-d array; not a str, a bool,
 * nor anything with a length such as a 1-element array) under a name: 0, or -1 with TypeError naming
 * it (ValueError for an int beyond float64). No range check. */
int pf_as_double(PyObject *obj, const char *name, double *out);

#endif
