/* Shared argument converters (convert.h); the range rules are core/contract.h's. */
#include <math.h>
#include <string.h>

#include "python/bindings.h"
#include "python/convert.h"
#include "core/contract.h"
#include "core/philox_noise.h"

#define STR_(x) #x
#define STR(x) STR_(x)

/* A bool scalar: Python's bool and NumPy's bool scalar (which still has __index__ and __float__), found
 * by type name without NumPy. The flags' converter takes these as bools. */
static int is_bool_scalar(PyObject *obj)
{
    if (PyBool_Check(obj))
        return 1;
    const char *tn = Py_TYPE(obj)->tp_name;
    return strcmp(tn, "numpy.bool_") == 0 || strcmp(tn, "numpy.bool") == 0;
}

/* The str() of obj's dtype ("bool", "complex128" for NumPy's scalars and 0-d arrays, "torch.bool" for a
 * 0-d tensor) into buf, or "" where it has none; found without importing NumPy or torch. An exception
 * of obj's own dtype property (or of its str()) other than AttributeError stays pending (user code's:
 * it propagates as it is); callers check PyErr_Occurred(). */
static void dtype_name(PyObject *obj, char *buf, size_t size)
{
    buf[0] = 0;
    if (PyLong_CheckExact(obj) || PyFloat_CheckExact(obj) || PyErr_Occurred())
        return;
    PyObject *dt = PyObject_GetAttrString(obj, "dtype");
    PyObject *str = dt ? PyObject_Str(dt) : NULL;
    const char *c = str ? PyUnicode_AsUTF8(str) : NULL;
    if (c)
        snprintf(buf, size, "%s", c);
    if (!dt && PyErr_ExceptionMatches(PyExc_AttributeError))
        PyErr_Clear(); /* no dtype: an ordinary number */
    Py_XDECREF(str);
    Py_XDECREF(dt);
}

static int is_bool_dtype(const char *dt) { return strcmp(dt, "bool") == 0 || strcmp(dt, "torch.bool") == 0; }

/* A bool or a complex number, neither of which is a real one, with one dtype lookup (its name left in dt,
 * "" where obj has none). A bool is a flag, not a quantity (True would read as 1 level, 1 ohm or 1 sigma):
 * a bool scalar, or a 0-d array or tensor of bools (their __float__ / __index__ take True as 1 too).
 * NumPy's complex scalars and 0-d arrays have a __float__ that drops the imaginary part (with only a
 * ComplexWarning), a complex tensor's raises an unnamed RuntimeError. */
static int is_bool_or_complex(PyObject *obj, char *dt, size_t size)
{
    dt[0] = 0;
    if (is_bool_scalar(obj) || PyComplex_Check(obj))
        return 1;
    dtype_name(obj, dt, size);
    return is_bool_dtype(dt) || strstr(dt, "complex") != NULL || PyErr_Occurred(); /* 1: not read */
}

/* After a value's own __index__ / __float__ failed: 0 (nothing pending) where the failure is the rule's
 * refusal, -1 (the exception pending) where it is the value's own. The array libraries' values (a NumPy
 * scalar or array, a tensor: anything with a dtype, dt) refuse a conversion they cannot make (a float
 * array's __index__, an object array's __float__) with a TypeError: the rule's refusal. Any other value's
 * __index__ / __float__ is its author's code, whose exception (a TypeError too) propagates as it is. */
static int own_failure(const char *dt)
{
    if (dt[0] && PyErr_ExceptionMatches(PyExc_TypeError)) {
        PyErr_Clear();
        return 0;
    }
    return -1;
}

/* obj's int through its own __index__ (obj has one, or is an int): 1 with a new reference in *idx; 0 where
 * obj is refused (nothing pending: its __index__ returned another type, or own_failure); -1 with the
 * exception of its own __index__ pending. */
static int own_index(PyObject *obj, const char *dt, PyObject **idx)
{
    if (PyLong_Check(obj)) {
        Py_INCREF(obj);
        *idx = obj;
        return 1;
    }
    *idx = Py_TYPE(obj)->tp_as_number->nb_index(obj);
    if (*idx && PyLong_Check(*idx))
        return 1;
    if (*idx) { /* "__index__ returned non-int": no int, the rule's refusal */
        Py_CLEAR(*idx);
        return 0;
    }
    return own_failure(dt);
}

/* obj as an int by the rule for ints: 1 with a new reference in *idx; 0 where obj is no int (a bool, a
 * float, no __index__, refused by own_index; nothing pending); -1 with an exception pending: obj's own,
 * raised by its __index__ or its dtype property (a TypeError too). */
static int int_value(PyObject *obj, PyObject **idx)
{
    char dt[32];
    *idx = NULL;
    if (is_bool_scalar(obj) || PyFloat_Check(obj) || !PyIndex_Check(obj))
        return 0;
    dtype_name(obj, dt, sizeof dt);
    if (PyErr_Occurred()) /* the dtype property's own exception (a TypeError too): user code's */
        return -1;
    return is_bool_dtype(dt) ? 0 : own_index(obj, dt, idx);
}

/* pf_as_int64 and pf_as_int64_clamped: `what` the accepted values in the TypeError, `clamp` whether
 * ints beyond int64 clamp (else ValueError). */
static int as_int64(PyObject *obj, const char *name, const char *what, int clamp, int64_t *out)
{
    PyObject *idx;
    int rc = int_value(obj, &idx);
    if (rc < 0)
        return -1;
    if (rc == 0) { /* e.g. a NumPy array or tensor of several elements: __index__ refuses it */
        PyErr_Format(PyExc_TypeError, "argument '%s': expected %s, got %s", name, what, Py_TYPE(obj)->tp_name);
        return -1;
    }
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(idx, &overflow);
    Py_DECREF(idx);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (overflow && !clamp) {
        PyErr_Format(PyExc_ValueError, "argument '%s': %R is out of range", name, obj);
        return -1;
    }
    *out = overflow > 0 ? INT64_MAX : overflow < 0 ? INT64_MIN : (int64_t)v;
    return 0;
}

int pf_as_int64(PyObject *obj, const char *name, int64_t *out) { return as_int64(obj, name, "an int", 0, out); }

int pf_as_int64_clamped(PyObject *obj, const char *name, const char *what, int64_t *out)
{
    return as_int64(obj, name, what, 1, out);
}

/* obj's length as len() takes it, except that a length len() refuses is told apart from obj's own exception:
 * >= 0; -1 with an exception pending (a TypeError where obj has no length, else the one obj's own __len__
 * raised); -2 (nothing pending) where obj's __len__ returned an int that is no length (negative, or beyond
 * Py_ssize_t: len() raises ValueError / OverflowError naming nothing, which a user's __len__ may raise
 * itself), or obj is a range too long to count. A Python class's __len__ is called here, so its own
 * exception and len()'s refusal of its result are not confused. */
static Py_ssize_t own_length(PyObject *obj)
{
    static PyObject *len_name;
    if (!len_name && !(len_name = PyUnicode_InternFromString("__len__")))
        return -1;
    /* the class's own attribute, unbound (as len() finds it): a plain function is called here; anything else
     * (a staticmethod, a callable object) is left to len()'s own binding */
    PyObject *len = PyType_HasFeature(Py_TYPE(obj), Py_TPFLAGS_HEAPTYPE) ? _PyType_Lookup(Py_TYPE(obj), len_name)
                                                                          : NULL;
    if (len && PyFunction_Check(len))
        Py_INCREF(len);
    else
        len = NULL;
    if (!len) {
        Py_ssize_t n = PyObject_Size(obj); /* a built-in type, or no __len__ (TypeError) */
        if (n < 0 && PyRange_Check(obj) && PyErr_ExceptionMatches(PyExc_OverflowError)) {
            PyErr_Clear(); /* range(2**100): a container, its length beyond Py_ssize_t (CPython's error) */
            return -2;
        }
        return n;
    }
    PyObject *r = PyObject_CallOneArg(len, obj);
    Py_DECREF(len);
    PyObject *idx = r ? PyNumber_Index(r) : NULL; /* a non-int result: len()'s TypeError, "no length" */
    Py_XDECREF(r);
    if (!idx)
        return -1;
    Py_ssize_t n = PyLong_AsSsize_t(idx);
    Py_DECREF(idx);
    if (n == -1 && PyErr_Occurred())
        PyErr_Clear();
    return n < 0 ? -2 : n;
}

/* Whether obj has a length (a list, a 1-D array, a tensor of one element): a container, not a number,
 * even where its __float__ would unwrap one element (NumPy deprecates that). A 0-d array or tensor
 * (len() refuses it with a TypeError, as it refuses any object without a length) is a number; a range
 * whose length len() cannot count (range(2**100)) or a sequence whose __len__ returns no length (2**100,
 * -1) is a container. Any other exception of obj's own __len__ (a KeyboardInterrupt, a MemoryError, a
 * ValueError) stays pending (user code's: it propagates as it is), with 1 (not read); callers check
 * PyErr_Occurred(). */
static int is_sized(PyObject *obj)
{
    if (!PySequence_Check(obj) && !PyMapping_Check(obj))
        return 0;
    if (own_length(obj) != -1)
        return 1;
    if (PyErr_ExceptionMatches(PyExc_TypeError)) {
        PyErr_Clear();
        return 0;
    }
    return 1;
}

/* obj (a number: not a float, a str, a bool, ...) as a double through its own __float__, or its int
 * (own_index) where it has none or has int's, as float() reads it: 0 with *out; -1 as own_index (0 or
 * -1, the exception pending); -2 (nothing pending) for an int beyond float64. */
static int own_float(PyObject *obj, const char *dt, double *out)
{
    PyNumberMethods *nb = Py_TYPE(obj)->tp_as_number;
    if (nb->nb_float && nb->nb_float != PyLong_Type.tp_as_number->nb_float) {
        PyObject *f = nb->nb_float(obj);
        if (!f) {
            own_failure(dt);
            return -1;
        }
        if (!PyFloat_Check(f)) { /* "__float__ returned non-float": no real number, the rule's refusal */
            Py_DECREF(f);
            return -1;
        }
        *out = PyFloat_AS_DOUBLE(f);
        Py_DECREF(f);
        return 0;
    }
    PyObject *idx = NULL;
    int rc = nb->nb_index || PyLong_Check(obj) ? own_index(obj, dt, &idx) : 0;
    if (rc <= 0)
        return -1;
    *out = PyLong_AsDouble(idx);
    Py_DECREF(idx);
    if (*out == -1.0 && PyErr_Occurred()) { /* an OverflowError: the int is beyond float64 */
        PyErr_Clear();
        return -2;
    }
    return 0;
}

int pf_as_double(PyObject *obj, const char *name, double *out)
{
    char dt[32];
    if (PyFloat_Check(obj)) {
        *out = PyFloat_AS_DOUBLE(obj);
        return 0;
    }
    int number = !PyUnicode_Check(obj) && !PyBytes_Check(obj) && !is_bool_or_complex(obj, dt, sizeof dt) &&
                 !is_sized(obj) && (PyIndex_Check(obj) || PyNumber_Check(obj));
    int rc = number ? own_float(obj, dt, out) : -1;
    if (rc == 0)
        return 0;
    if (rc == -2) {
        PyErr_Format(PyExc_ValueError, "argument '%s': must be finite, got an int beyond float64's range", name);
        return -1;
    }
    /* pending: the own exception of obj's __float__ / __index__ (number), of its dtype property (a TypeError
     * too) or __len__ (is_sized took a TypeError there for "no length") */
    if (PyErr_Occurred())
        return -1;
    PyErr_Clear();
    PyErr_Format(PyExc_TypeError, "argument '%s': expected a real number, got %s", name, Py_TYPE(obj)->tp_name);
    return -1;
}

int pf_conv_real(PyObject *obj, void *arg)
{
    pf_real_arg *a = arg;
    return pf_as_double(obj, a->name, &a->value) == 0;
}

/* obj as a flag: 1 or 0, or -1 with an exception naming `name`. One dtype lookup serves both rules: a bool
 * dtype (NumPy's bool, a 0-d bool array or tensor; a bool array of one element has a length and is
 * refused) reads as itself, any other value with __index__ must give 0 or 1. */
int pf_as_flag(PyObject *obj, const char *name)
{
    char dt[32];
    if (is_bool_scalar(obj))
        return PyObject_IsTrue(obj);
    dtype_name(obj, dt, sizeof dt);
    int sized = !PyErr_Occurred() && is_bool_dtype(dt) && is_sized(obj);
    if (PyErr_Occurred()) /* its dtype property's or __len__'s own exception */
        return -1;
    if (is_bool_dtype(dt) && !sized)
        return PyObject_IsTrue(obj);
    PyObject *idx = NULL;
    int rc = sized || PyFloat_Check(obj) || !PyIndex_Check(obj) ? 0 : own_index(obj, dt, &idx);
    if (rc < 0) /* the own exception of its __index__ (a TypeError too) */
        return -1;
    if (rc == 0) {
        PyErr_Format(PyExc_TypeError, "argument '%s': expected a bool (True/False or 0/1), got %s", name,
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(idx, &overflow);
    Py_DECREF(idx);
    if (overflow || (v != 0 && v != 1)) {
        PyErr_Format(PyExc_ValueError, "argument '%s': expected a bool (True/False or 0/1), got %R", name, obj);
        return -1;
    }
    return (int)v;
}

int pf_conv_flag(PyObject *obj, void *arg)
{
    pf_flag_arg *a = arg;
    int v = pf_as_flag(obj, a->name);
    if (v < 0)
        return 0;
    a->value = v;
    return 1;
}

PyObject *pf_py_check_flag(PyObject *self, PyObject *args)
{
    PF_UNUSED(self);
    PyObject *value;
    const char *name;
    if (!PyArg_ParseTuple(args, "Os:check_flag", &value, &name))
        return NULL;
    int v = pf_as_flag(value, name);
    return v < 0 ? NULL : PyBool_FromLong(v);
}

/* Raises the pf_fail record of a failed core validator; 0 for the converters' convention. */
static int fail_converter(pf_status st)
{
    pf_raise_status(st, NULL);
    return 0;
}

static int as_uint64(PyObject *obj, const char *name, uint64_t *out)
{
    PyObject *idx;
    int rc = int_value(obj, &idx);
    if (rc < 0) /* as as_int64: the object's own exception propagates, a refusal is reworded */
        return 0;
    if (rc == 0) {
        PyErr_Format(PyExc_TypeError, "argument '%s': expected an int in [0, 2**64), got %s", name,
                     Py_TYPE(obj)->tp_name);
        return 0;
    }
    unsigned long long v = PyLong_AsUnsignedLongLong(idx);
    Py_DECREF(idx);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "argument '%s': must be an int in [0, 2**64), got %R", name, obj);
        return 0;
    }
    *out = (uint64_t)v;
    return 1;
}

int pf_as_uint64(PyObject *obj, const char *name, uint64_t *out) { return as_uint64(obj, name, out) ? 0 : -1; }

int pf_conv_seed(PyObject *obj, void *out)
{
    if (obj == Py_None) {
        *(uint64_t *)out = PF_DEFAULT_SEED;
        return 1;
    }
    return as_uint64(obj, "seed", out);
}

int pf_conv_call(PyObject *obj, void *out) { return as_uint64(obj, "call", out); }

int pf_conv_int(PyObject *obj, void *arg)
{
    pf_int_arg *a = arg;
    if (pf_as_int64(obj, a->name, &a->value) < 0)
        return 0;
    if (a->value < a->min || a->value > a->max) {
        PyErr_Format(PyExc_ValueError, "argument '%s': must be in %lld..%lld, got %lld", a->name, (long long)a->min,
                     (long long)a->max, (long long)a->value);
        return 0;
    }
    return 1;
}

/* An int checked by a core validator into *(int *)out. */
static int conv_checked_int(PyObject *obj, void *out, const char *name, pf_status (*check)(const char *, int64_t))
{
    int64_t v;
    if (pf_as_int64(obj, name, &v) < 0)
        return 0;
    pf_status st = check(name, v);
    if (st != PF_OK)
        return fail_converter(st);
    *(int *)out = (int)v;
    return 1;
}

int pf_conv_g_level(PyObject *obj, void *out) { return conv_checked_int(obj, out, "g_level", pf_validate_g_level); }

int pf_conv_rdac(PyObject *obj, void *out) { return conv_checked_int(obj, out, "rdac", pf_validate_resolution); }

/* 0 where obj, a sequence, can be read item by item as `what` (1 for a 1-D array: its __index__, which it
 * has too, refuses it); else -1 with an exception naming `name`: an
 * array of two or more dimensions (np.array([[16, 16]]), whose items are its rows) is a TypeError, as the
 * Python layer's pair and slice rules refuse it; a range too long to count (range(2**100)) a ValueError.
 * An exception of obj's own ndim property (other than AttributeError) propagates. */
static int flat_sequence(PyObject *obj, const char *name, const char *what)
{
    if (PyList_Check(obj) || PyTuple_Check(obj))
        return 0;
    if (PyRange_Check(obj)) {
        if (own_length(obj) >= 0)
            return 0; /* a range too long to count is own_length's -2 */
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "argument '%s': expected %s, got %R", name, what, obj);
        return -1;
    }
    PyObject *nd = PyObject_GetAttrString(obj, "ndim");
    if (!nd) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError))
            return -1;
        PyErr_Clear();
        return 0;
    }
    long ndim = PyLong_Check(nd) ? PyLong_AsLong(nd) : 1;
    Py_DECREF(nd);
    if (ndim == -1 && PyErr_Occurred())
        PyErr_Clear(); /* an ndim beyond long: no array of ours */
    if (ndim < 2)
        return ndim == 1;
    PyErr_Format(PyExc_TypeError, "argument '%s': expected %s, got a %ld-D array", name, what, ndim);
    return -1;
}

/* At most `limit` of obj's items as a new tuple, read by iterating it (new reference), or NULL with an
 * exception. Not PySequence_Tuple: it calls len() again for a length hint, so a sequence's __len__ ran twice
 * per conversion, and a second answer that is no length (-1) was CPython's unnamed ValueError. The limit
 * ends the read of a sequence that never ends (a __getitem__ that never raises IndexError). */
static PyObject *items_tuple(PyObject *obj, Py_ssize_t limit)
{
    PyObject *it = PyObject_GetIter(obj);
    if (!it)
        return NULL;
    PyObject *items = PyList_New(0);
    PyObject *item;
    while (items && PyList_GET_SIZE(items) < limit && (item = PyIter_Next(it))) {
        int rc = PyList_Append(items, item);
        Py_DECREF(item);
        if (rc < 0)
            break;
    }
    Py_DECREF(it);
    PyObject *seq = items && !PyErr_Occurred() ? PyList_AsTuple(items) : NULL;
    Py_XDECREF(items);
    return seq;
}

/* The items of obj, which has no length (n < 0) or its length n <= cap, read by iteration: n + 1 at most
 * (cap + 1 without a length), so a sequence that never ends is an error, not an endless read. Items that
 * disagree with its __len__ (fewer or more), or more than cap without a length, are a ValueError naming
 * `name`. A new tuple, or NULL with an exception. */
static PyObject *bounded_items(PyObject *obj, Py_ssize_t n, Py_ssize_t cap, const char *name, const char *what)
{
    PyObject *seq = items_tuple(obj, (n >= 0 ? n : cap) + 1);
    if (!seq)
        return NULL;
    Py_ssize_t got = PyTuple_GET_SIZE(seq);
    if (n >= 0 && got != n)
        PyErr_Format(PyExc_ValueError, "argument '%s': expected %s, got %s whose __len__ says %zd items but it has "
                     "%s %zd", name, what, Py_TYPE(obj)->tp_name, n, got < n ? "only" : "more than", got < n ? got : n);
    else if (n < 0 && got > cap)
        PyErr_Format(PyExc_ValueError, "argument '%s': expected %s, got %s of more than %zd items", name, what,
                     Py_TYPE(obj)->tp_name, cap);
    else
        return seq;
    Py_DECREF(seq);
    return NULL;
}

/* Whether obj (PySequence_Check true) iterates, told without running any code of its own (the class's
 * __iter__ found as iter() finds it, on the type's MRO: not through a metaclass's attributes): 1, or 0 where
 * its type's __iter__ is None or nothing callable (no sequence after all). */
static int own_iterable(PyObject *obj)
{
    static PyObject *iter_name;
    if (Py_TYPE(obj)->tp_iter == NULL)
        return 1; /* iterates by __getitem__ */
    if (!iter_name && !(iter_name = PyUnicode_InternFromString("__iter__"))) {
        PyErr_Clear(); /* no memory for the name: let iteration itself tell */
        return 1;
    }
    PyObject *f = _PyType_Lookup(Py_TYPE(obj), iter_name); /* borrowed */
    if (!f)
        return 1; /* a C type's tp_iter */
    return f != Py_None && (PyCallable_Check(f) || Py_TYPE(f)->tp_descr_get);
}

/* obj as a tuple snapshot of a non-string sequence (new reference) or NULL with TypeError naming `name`,
 * with its count in *count: its length, or where it has none the number of items read. A tuple, not
 * PySequence_Fast's list: a list would be the caller's own object, which an item's __index__ can shorten
 * (items left unread) or free while it is read. The tuple holds the items only where *count <= cap (the
 * caller's most): a longer sequence is not read (callers refuse its count). A sequence with a length is
 * read for that many items and no more (NumPy's np.asarray iterates one to the end, which never comes for
 * a __getitem__ that never raises IndexError): items that run out before its length, or go on past it,
 * are a ValueError naming `name`. Bytes-like objects (bytes, bytearray, memoryview) are data, not
 * sequences of ints. An exception of the sequence's own __iter__ or __getitem__ (user code) propagates, a
 * TypeError too, and so does its __len__'s, but for a TypeError, which reads as no length (len() raises
 * the same for a type without one); only a type whose __iter__ is None or not callable (no sequence after
 * all, told before any of its code runs) is reworded. __len__ is called once. */
static PyObject *as_sequence(PyObject *obj, const char *name, const char *what, Py_ssize_t cap, Py_ssize_t *count)
{
    if (PyUnicode_Check(obj) || PyBytes_Check(obj) || PyByteArray_Check(obj) || PyMemoryView_Check(obj) ||
        !PySequence_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "argument '%s': expected %s, got %s", name, what, Py_TYPE(obj)->tp_name);
        return NULL;
    }
    if (flat_sequence(obj, name, what) < 0)
        return NULL;
    PyObject *seq = PyTuple_CheckExact(obj) ? Py_NewRef(obj) : PyList_CheckExact(obj) ? PyList_AsTuple(obj) : NULL;
    if (seq || PyErr_Occurred()) {
        *count = seq ? PyTuple_GET_SIZE(seq) : 0;
        return seq;
    }
    int iterable = own_iterable(obj);
    if (!iterable) {
        PyErr_Format(PyExc_TypeError, "argument '%s': expected %s, got %s", name, what, Py_TYPE(obj)->tp_name);
        return NULL;
    }
    Py_ssize_t n = own_length(obj); /* len()'s own refusal of a length names nothing */
    if (n == -2) {
        PyErr_Format(PyExc_ValueError, "argument '%s': expected %s, got %s whose __len__ returns no length "
                     "(an int in 0..sys.maxsize)", name, what, Py_TYPE(obj)->tp_name);
        return NULL;
    }
    if (n == -1 && !PyErr_ExceptionMatches(PyExc_TypeError))
        return NULL; /* its own __len__'s exception */
    PyErr_Clear(); /* no length: a sequence may still iterate */
    *count = n;
    if (n > cap)
        return PyTuple_New(0); /* too many for the caller: not read */
    seq = bounded_items(obj, n, cap, name, what); /* an exception here is user code's: it propagates */
    if (seq)
        *count = PyTuple_GET_SIZE(seq);
    return seq;
}

/* The items of a sequence made by as_sequence as int64 (v holds them all): 0, or -1 with an exception.
 * Callers check the count first, so a user sequence is read once and cannot change its length between
 * the check and the read. */
static int seq_int64s(PyObject *seq, const char *name, int64_t *v)
{
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(seq); i++)
        if (pf_as_int64(PyTuple_GET_ITEM(seq, i), name, &v[i]) < 0)
            return -1;
    return 0;
}

/* Items of a sequence as int64 (n <= cap): the count, or -1 with an exception. */
static Py_ssize_t int_items(PyObject *obj, const char *name, const char *what, int64_t *v, Py_ssize_t cap)
{
    Py_ssize_t n;
    PyObject *seq = as_sequence(obj, name, what, cap, &n);
    if (!seq)
        return -1;
    if (n > cap)
        PyErr_Format(PyExc_ValueError, "argument '%s': expected %s, got %zd values", name, what, n);
    int rc = n > cap ? -1 : seq_int64s(seq, name, v);
    Py_DECREF(seq);
    return rc < 0 ? -1 : n;
}

/* A pair: a sequence of another length than 2 is a ValueError, raised before its items are read (the rule
 * of every pair, pyfastpim.dpe._pair's and pyfastpim.sliced._pair's: a wrong type is a TypeError). */
int pf_conv_pair(PyObject *obj, void *arg)
{
    pf_pair_arg *a = arg;
    int64_t v[2];
    Py_ssize_t n;
    PyObject *seq = as_sequence(obj, a->name, "a pair of ints", 2, &n);
    if (!seq)
        return 0;
    if (n != 2)
        PyErr_Format(PyExc_ValueError, "argument '%s': expected a pair of ints, got %zd values", a->name, n);
    int rc = n != 2 ? -1 : seq_int64s(seq, a->name, v);
    Py_DECREF(seq);
    if (rc < 0)
        return 0;
    pf_status st = pf_validate_pair(a->name, v[0], v[1], a->min);
    if (st != PF_OK)
        return fail_converter(st);
    int64_t max = a->max ? a->max : INT64_MAX;
    if (v[0] > max || v[1] > max) {
        PyErr_Format(PyExc_ValueError, "argument '%s': values must be at most %lld, got (%lld, %lld)", a->name,
                     (long long)max, (long long)v[0], (long long)v[1]);
        return 0;
    }
    a->v[0] = v[0];
    a->v[1] = v[1];
    return 1;
}

int pf_conv_slice_method(PyObject *obj, void *arg)
{
    pf_method_arg *a = arg;
    int64_t w[PF_MAX_SLICES];
    Py_ssize_t n;
    PyObject *seq = as_sequence(obj, a->name, "a sequence of slice widths", PF_MAX_SLICES, &n);
    if (!seq)
        return 0;
    int bad_count = n < 1 || n > PF_MAX_SLICES;
    if (bad_count)
        PyErr_Format(PyExc_ValueError, "argument '%s': expected 1 to %d slice widths, got %zd", a->name,
                     PF_MAX_SLICES, n);
    int rc = bad_count ? -1 : seq_int64s(seq, a->name, w);
    Py_DECREF(seq);
    if (rc < 0)
        return 0;
    pf_status st = pf_validate_slice_method(a->name, w, n, a->min_total_bits, &a->sm);
    return st == PF_OK ? 1 : fail_converter(st);
}

int pf_conv_resolutions(PyObject *obj, void *arg)
{
    pf_resolutions_arg *a = arg;
    static const char what[] = "an int or a sequence of at most " STR(PF_MAX_SLICES) " ints (one per weight slice)";
    Py_ssize_t n = 0;
    int array = PySequence_Check(obj) ? flat_sequence(obj, a->name, what) : 0; /* an array has __index__ too */
    if (array < 0)
        return 0;
    if (!array && PyIndex_Check(obj) && !PyBool_Check(obj)) {
        if (pf_as_int64(obj, a->name, &a->v[0]) < 0)
            return 0;
    } else {
        if ((n = int_items(obj, a->name, what, a->v, PF_MAX_SLICES)) < 0)
            return 0;
        if (n < 1) {
            PyErr_Format(PyExc_ValueError, "argument '%s': expected at least one resolution", a->name);
            return 0;
        }
    }
    for (Py_ssize_t j = 0; j < (n ? n : 1); j++) {
        pf_status st = pf_validate_resolution(a->name, a->v[j]);
        if (st != PF_OK)
            return fail_converter(st);
    }
    a->count = (int)n;
    return 1;
}

int pf_conv_bw_e(PyObject *obj, void *out)
{
    /* None or 0: INT (as MemIntelli's `if bw_e:`); a positive int: BFP, 2**70 included (only the sign
     * matters) */
    int64_t v = 0;
    if (obj != NULL && obj != Py_None && pf_as_int64_clamped(obj, "bw_e", "None or an int", &v) < 0)
        return 0;
    if (v < 0) {
        PyErr_Format(PyExc_ValueError, "argument 'bw_e': must be None or >= 0, got %R", obj);
        return 0;
    }
    *(int *)out = v > 0;
    return 1;
}

/* obj through an int converter: the int it gives (a bool when `as_bool`), or NULL with its exception. */
static PyObject *checked_int(PyObject *obj, int (*conv)(PyObject *, void *), int as_bool)
{
    int v;
    if (!conv(obj, &v))
        return NULL;
    return as_bool ? PyBool_FromLong(v) : PyLong_FromLong(v);
}

PyObject *pf_py_check_bw_e(PyObject *self, PyObject *obj)
{
    PF_UNUSED(self);
    return checked_int(obj, pf_conv_bw_e, 1);
}

PyObject *pf_py_check_rdac(PyObject *self, PyObject *obj)
{
    PF_UNUSED(self);
    return checked_int(obj, pf_conv_rdac, 0);
}

PyObject *pf_py_check_radc(PyObject *self, PyObject *obj)
{
    PF_UNUSED(self);
    pf_resolutions_arg a = {.name = "radc"};
    if (!pf_conv_resolutions(obj, &a))
        return NULL;
    if (!a.count)
        return PyLong_FromLongLong((long long)a.v[0]);
    PyObject *out = PyTuple_New(a.count);
    for (int j = 0; out && j < a.count; j++) {
        PyObject *v = PyLong_FromLongLong((long long)a.v[j]);
        if (!v) {
            Py_CLEAR(out);
            break;
        }
        PyTuple_SET_ITEM(out, j, v);
    }
    return out;
}

PyObject *pf_py_check_sigma(PyObject *self, PyObject *args, PyObject *kwds)
{
    PF_UNUSED(self);
    static char *kwlist[] = {"value", "name", "read", NULL};
    PyObject *value;
    const char *name;
    pf_flag_arg read = {.name = "read"};
    double v;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "Os|O&:check_sigma", kwlist, &value, &name, pf_conv_flag, &read) ||
        pf_as_double(value, name, &v) < 0)
        return NULL;
    pf_status st = pf_validate_sigma(name, v, read.value ? PF_READ_SIGMA_MAX : PF_REL_SIGMA_MAX);
    if (st != PF_OK) {
        pf_raise_status(st, NULL);
        return NULL;
    }
    return PyFloat_FromDouble(v);
}

PyObject *pf_py_check_seed(PyObject *self, PyObject *obj)
{
    PF_UNUSED(self);
    uint64_t seed;
    if (!pf_conv_seed(obj, &seed))
        return NULL;
    return PyLong_FromUnsignedLongLong(seed);
}

PyObject *pf_py_check_number(PyObject *self, PyObject *args, PyObject *kwds)
{
    PF_UNUSED(self);
    static char *kwlist[] = {"value", "name", "integer", NULL};
    PyObject *value;
    const char *name;
    pf_flag_arg integer = {.name = "integer"};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "Os|O&:check_number", kwlist, &value, &name, pf_conv_flag, &integer))
        return NULL;
    if (integer.value) {
        int64_t v;
        return pf_as_int64(value, name, &v) < 0 ? NULL : PyLong_FromLongLong((long long)v);
    }
    double d;
    return pf_as_double(value, name, &d) < 0 ? NULL : PyFloat_FromDouble(d);
}
