/* pyfastpim.Array and asarray: zero-copy exchange with NumPy (buffer
 * protocol, __array_interface__), torch (DLPack) and any buffer exporter. */
#include "python/array.h"
#include "python/convert.h"
#include "core/memory.h"
#include "core/pf_common.h"

#include <ctype.h>
#include <math.h>
#include <string.h>

static const struct {
    const char *name;
    size_t size;
    char fmt;        /* struct-module format character */
    uint8_t dl_code; /* DLDataTypeCode */
} g_dtypes[PF_DT_COUNT] = {
    [PF_DT_F32] = {"float32", 4, 'f', kDLFloat},
    [PF_DT_F64] = {"float64", 8, 'd', kDLFloat},
    [PF_DT_U8] = {"uint8", 1, 'B', kDLUInt},
    [PF_DT_I8] = {"int8", 1, 'b', kDLInt},
    [PF_DT_I16] = {"int16", 2, 'h', kDLInt},
    [PF_DT_U16] = {"uint16", 2, 'H', kDLUInt},
    [PF_DT_I32] = {"int32", 4, 'i', kDLInt},
    [PF_DT_I64] = {"int64", 8, 'q', kDLInt},
};

size_t pf_dtype_size(pf_dtype dt)
{
    return dt == PF_DT_F16_IN || dt == PF_DT_BF16_IN ? 2 : g_dtypes[dt].size;
}
const char *pf_dtype_name(pf_dtype dt)
{
    return dt == PF_DT_F16_IN ? "float16" : dt == PF_DT_BF16_IN ? "bfloat16" : g_dtypes[dt].name;
}

static int dtype_is_half(pf_dtype dt) { return dt == PF_DT_F16_IN || dt == PF_DT_BF16_IN; }
static int dtype_is_float(pf_dtype dt) { return dt == PF_DT_F32 || dt == PF_DT_F64 || dtype_is_half(dt); }

/* IEEE binary16 -> float on the bits (exact, branch-free so that a row of them vectorises: every half is
 * a float; a NaN keeps its payload and signalling bit, as NumPy's conversion to float32; widened on to
 * double, a signalling NaN is quieted, where NumPy's float16 -> float64 keeps it signalling). */
static inline float half_to_float(uint16_t h)
{
    uint32_t o = (uint32_t)(h & 0x7fffu) << 13, e = o & 0x0f800000u;
    o += 112u << 23; /* rebias the exponent: 127 - 15 */
    uint32_t special = o + (112u << 23), subn = o + (1u << 23);
    float fs;
    memcpy(&fs, &subn, 4);
    fs -= 0x1p-14f; /* a subnormal half (or zero) as the float difference, exact */
    uint32_t us;
    memcpy(&us, &fs, 4);
    uint32_t sp = 0u - (uint32_t)(e == 0x0f800000u), sub = 0u - (uint32_t)(e == 0); /* masks, not branches */
    uint32_t u = (special & sp) | (us & sub) | (o & ~(sp | sub)) | (uint32_t)(h & 0x8000u) << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* bfloat16 is the upper half of a float32 (exact). */
static inline float bf16_to_float(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static int dtype_by_name(PyObject *name, pf_dtype *out)
{
    const char *c = name && PyUnicode_Check(name) ? PyUnicode_AsUTF8(name) : NULL;
    for (int i = 0; c && i < PF_DT_COUNT; i++) {
        if (strcmp(c, g_dtypes[i].name) == 0) {
            *out = (pf_dtype)i;
            return 1;
        }
    }
    PyErr_Clear();
    return 0;
}

/* NumPy's reading of obj as a dtype ('f4', 'double', float, numpy.dtype('<f4')): 1 with *out set when
 * it is a supported dtype, 0 when NumPy is absent, does not read obj or reads another dtype, -1 with
 * ValueError naming the argument for a byte-swapped dtype (numpy.dtype('>f4') is named 'float32'). */
static int dtype_by_numpy(PyObject *obj, const char *argname, pf_dtype *out)
{
    PyObject *np = PyImport_ImportModule("numpy");
    PyObject *dt = np ? PyObject_CallMethod(np, "dtype", "O", obj) : NULL;
    Py_XDECREF(np);
    if (!dt) {
        if (!PyErr_ExceptionMatches(PyExc_Exception))
            return -1; /* KeyboardInterrupt and the like pass through */
        PyErr_Clear();
        return 0;
    }
    PyObject *native = PyObject_GetAttrString(dt, "isnative");
    int swapped = native ? PyObject_Not(native) : -1;
    Py_XDECREF(native);
    PyObject *name = swapped == 0 ? PyObject_GetAttrString(dt, "name") : NULL;
    Py_DECREF(dt);
    if (swapped == 1)
        PyErr_Format(PyExc_ValueError, "argument '%s': non-native (byte-swapped) dtype %R is not supported; pass "
                     "its native spelling", argname, obj);
    int found = swapped == 0 && dtype_by_name(name, out);
    Py_XDECREF(name);
    return swapped == 1 ? -1 : found;
}

/* dtype: None (any), a name ('float32'), a NumPy spelling ('f4', 'double', float, numpy.float32,
 * numpy.dtype), or a torch dtype; 0, or -1 with TypeError naming the argument (ValueError for a
 * byte-swapped NumPy dtype). */
int pf_dtype_from_object(PyObject *obj, const char *argname, pf_dtype *out)
{
    if (obj == NULL || obj == Py_None) {
        *out = PF_DT_ANY;
        return 0;
    }
    if (PyUnicode_Check(obj) && dtype_by_name(obj, out))
        return 0;
    PyObject *s = PyObject_Str(obj);
    if (!s)
        return -1;
    const char *c = PyUnicode_AsUTF8(s);
    int is_torch = !PyUnicode_Check(obj) && c && strncmp(c, "torch.", 6) == 0;
    int found = is_torch ? 0 : dtype_by_numpy(obj, argname, out);
    PyObject *name = NULL; /* the name an error quotes: the caller's */
    if (found == 0) {
        if (PyUnicode_Check(obj) || is_torch)
            name = PyUnicode_FromString(c + (is_torch ? 6 : 0));
        else if (PyObject_HasAttrString(obj, "name")) /* numpy.dtype and scalar types */
            name = PyObject_GetAttrString(obj, "name");
        else if (PyType_Check(obj) && PyObject_HasAttrString(obj, "__name__"))
            name = PyObject_GetAttrString(obj, "__name__");
        found = dtype_by_name(name, out);
    }
    Py_DECREF(s);
    if (found != 0) {
        Py_XDECREF(name);
        return found > 0 ? 0 : -1;
    }
    if (!name || !PyUnicode_Check(name))
        PyErr_Format(PyExc_TypeError, "argument '%s': cannot interpret %R as a dtype", argname, obj);
    else
        PyErr_Format(PyExc_TypeError, "argument '%s': unsupported dtype '%U' (supported: float32, float64, uint8, "
                     "int8, int16, uint16, int32, int64)", argname, name);
    Py_XDECREF(name);
    return -1;
}

size_t pf_array_size(const PfArray *a)
{
    size_t n = 1;
    for (int i = 0; i < a->ndim; i++)
        n *= (size_t)a->shape[i];
    return n;
}

size_t pf_array_nbytes(const PfArray *a) { return pf_array_size(a) * pf_dtype_size(a->dtype); }

/* An exporter's shape may be anything (a lying __array_interface__ claims (2**40, 2**40)): a stride
 * that overflows saturates at PY_SSIZE_T_MAX, which check_extent then rejects with the argument's
 * name, instead of a signed overflow here. */
static void set_c_strides(PfArray *a)
{
    Py_ssize_t s = (Py_ssize_t)pf_dtype_size(a->dtype);
    for (int i = a->ndim - 1; i >= 0; i--) {
        a->strides[i] = s;
        if (__builtin_mul_overflow(s, a->shape[i] > 0 ? a->shape[i] : 1, &s))
            s = PY_SSIZE_T_MAX;
    }
}

static PyObject *shape_tuple(const Py_ssize_t *v, int n);

/* A shape is refused, as NumPy refuses it ("array is too big"), when its nonzero dimensions times the
 * item size overflow Py_ssize_t, even when another dimension is 0 (no element; NumPy could not view
 * it, and its C strides would overflow). Returns 0 or -1 with ValueError naming the argument. */
static int check_shape(const PfArray *a, const char *argname)
{
    Py_ssize_t n = (Py_ssize_t)pf_dtype_size(a->dtype);
    for (int i = 0; i < a->ndim; i++) {
        if (a->shape[i] > 0 && __builtin_mul_overflow(n, a->shape[i], &n)) {
            PyObject *t = shape_tuple(a->shape, a->ndim);
            if (t)
                PyErr_Format(PyExc_ValueError, "argument '%s': shape %R is too big: its nonzero dimensions times "
                             "the %zu-byte item size overflow the address space (refused as NumPy refuses it, "
                             "also when a dimension of 0 leaves it empty)", argname, t, pf_dtype_size(a->dtype));
            Py_XDECREF(t);
            return -1;
        }
    }
    return 0;
}

/* As NumPy's flag: the strides of dimensions of size 1 do not matter, and an empty array is contiguous. */
static int is_c_contiguous(const PfArray *a)
{
    Py_ssize_t s = (Py_ssize_t)pf_dtype_size(a->dtype);
    if (pf_array_size(a) == 0)
        return 1;
    for (int i = a->ndim - 1; i >= 0; i--) {
        if (a->shape[i] != 1 && a->strides[i] != s)
            return 0;
        s *= a->shape[i];
    }
    return 1;
}

static PfArray *alloc_struct(void)
{
    PfArray *a = PyObject_New(PfArray, &PfArray_Type);
    if (!a)
        return NULL;
    a->data = NULL;
    a->ndim = 0;
    a->dtype = PF_DT_F32;
    a->readonly = 0;
    a->base = NULL;
    a->has_view = 0;
    a->dl = NULL;
    a->dlv = NULL;
    a->owns_data = 0;
    a->exports = 0;
    a->weakreflist = NULL;
    return a;
}

static PfArray *new_owned(pf_dtype dt, int ndim, const Py_ssize_t *shape, int zero)
{
    if (ndim < 0 || ndim > PF_MAXDIM) {
        PyErr_Format(PyExc_ValueError, "arrays may have at most %d dimensions", PF_MAXDIM);
        return NULL;
    }
    size_t nbytes = pf_dtype_size(dt);
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) {
            PyErr_SetString(PyExc_ValueError, "negative dimension");
            return NULL;
        }
        if (pf_mul_size(nbytes, (size_t)shape[i], &nbytes) != PF_OK || nbytes > (size_t)PY_SSIZE_T_MAX) {
            PyErr_Format(PyExc_ValueError, "the result array's size overflows (dimension %d of shape is %zd)", i,
                         shape[i]);
            return NULL;
        }
    }
    PfArray *a = alloc_struct();
    if (!a)
        return NULL;
    a->dtype = dt;
    a->ndim = ndim;
    for (int i = 0; i < ndim; i++)
        a->shape[i] = shape[i];
    set_c_strides(a);
    /* size 0 still gets a valid (minimal) block so data is never NULL */
    a->data = zero ? pf_calloc(nbytes ? nbytes : 1, 1) : pf_alloc(nbytes ? nbytes : 1);
    if (!a->data) {
        Py_DECREF(a);
        PyErr_Format(PyExc_MemoryError, "out of memory for a result array of %zu bytes (%d-D shape, %s)", nbytes,
                     ndim, pf_dtype_name(dt));
        return NULL;
    }
    a->owns_data = 1;
    return a;
}

PfArray *pf_array_new(pf_dtype dt, int ndim, const Py_ssize_t *shape) { return new_owned(dt, ndim, shape, 0); }
PfArray *pf_array_zeros(pf_dtype dt, int ndim, const Py_ssize_t *shape) { return new_owned(dt, ndim, shape, 1); }

static void PfArray_dealloc(PfArray *a)
{
    if (a->weakreflist)
        PyObject_ClearWeakRefs((PyObject *)a);
    if (a->owns_data)
        pf_free(a->data);
    if (a->has_view)
        PyBuffer_Release(&a->view);
    if ((a->dl && a->dl->deleter) || (a->dlv && a->dlv->deleter)) {
        /* a producer's deleter may run Python code: keep a pending exception */
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        if (a->dl && a->dl->deleter)
            a->dl->deleter(a->dl);
        if (a->dlv && a->dlv->deleter)
            a->dlv->deleter(a->dlv);
        PyErr_Restore(et, ev, tb);
    }
    Py_XDECREF(a->base);
    PyObject_Free(a);
}

/* ---- element conversion for the one counted copy ---- */

static double load_f(const char *p, pf_dtype dt)
{
    switch (dt) {
    case PF_DT_F32: { float v; memcpy(&v, p, 4); return v; }
    case PF_DT_F64: { double v; memcpy(&v, p, 8); return v; }
    case PF_DT_F16_IN: { uint16_t h; memcpy(&h, p, 2); return half_to_float(h); }
    case PF_DT_BF16_IN: { uint16_t h; memcpy(&h, p, 2); return bf16_to_float(h); }
    default: return 0.0;
    }
}

static int64_t load_i(const char *p, pf_dtype dt)
{
    switch (dt) {
    case PF_DT_U8: return *(const uint8_t *)p;
    case PF_DT_I8: return *(const int8_t *)p;
    case PF_DT_I16: { int16_t v; memcpy(&v, p, 2); return v; }
    case PF_DT_U16: { uint16_t v; memcpy(&v, p, 2); return v; }
    case PF_DT_I32: { int32_t v; memcpy(&v, p, 4); return v; }
    case PF_DT_I64: { int64_t v; memcpy(&v, p, 8); return v; }
    default: return 0;
    }
}

/* Whether the integer v is a value of the integer dtype dt. */
static int int_fits(int64_t v, pf_dtype dt)
{
    switch (dt) {
    case PF_DT_U8: return v >= 0 && v <= UINT8_MAX;
    case PF_DT_I8: return v >= INT8_MIN && v <= INT8_MAX;
    case PF_DT_I16: return v >= INT16_MIN && v <= INT16_MAX;
    case PF_DT_U16: return v >= 0 && v <= UINT16_MAX;
    case PF_DT_I32: return v >= INT32_MIN && v <= INT32_MAX;
    default: return 1;
    }
}

/* One element converted into dt: 0; -1 (nothing stored, *bad the value) for an integer that dt cannot
 * hold; -2 (nothing stored, *bad_f the value) for a finite float beyond float32's range, which the cast
 * would turn into an infinity (a value the caller never gave: quantization would report it as one, the
 * attention kernels count it as 0). Integer conversions are exact (codes, levels: a wrapped 256 would
 * read as code 0); NaN and infinities keep their meaning. */
static int store(char *p, pf_dtype dt, const char *src, pf_dtype sdt, int64_t *bad, double *bad_f)
{
    if (dtype_is_float(dt)) {
        double v = dtype_is_float(sdt) ? load_f(src, sdt) : (double)load_i(src, sdt);
        if (dt == PF_DT_F32) {
            float f = sdt == PF_DT_I64 ? (float)load_i(src, sdt) : (float)v; /* int64: rounded once */
            if (isinf(f) && !isinf(v) && !isnan(v)) {
                *bad_f = v;
                return -2;
            }
            memcpy(p, &f, 4);
        }
        else memcpy(p, &v, 8);
        return 0;
    }
    int64_t v = load_i(src, sdt);
    if (!int_fits(v, dt)) {
        *bad = v;
        return -1;
    }
    switch (dt) {
    case PF_DT_U8: *(uint8_t *)p = (uint8_t)v; break;
    case PF_DT_I8: *(int8_t *)p = (int8_t)v; break;
    case PF_DT_I16: { int16_t w = (int16_t)v; memcpy(p, &w, 2); break; }
    case PF_DT_U16: { uint16_t w = (uint16_t)v; memcpy(p, &w, 2); break; }
    case PF_DT_I32: { int32_t w = (int32_t)v; memcpy(p, &w, 4); break; }
    case PF_DT_I64: memcpy(p, &v, 8); break;
    default: break;
    }
    return 0;
}

/* ---- the conversion by rows: loops the compiler vectorises (at -O3, for the baseline ISA) ----
 * A row converts n elements from src (byte stride st) into the contiguous dst: 0, or 1 where some element
 * is refused (a finite float beyond float32's range for a float32 destination, an integer the destination
 * cannot hold); dst is then partly written and the caller scans again for the first one (its index and
 * value for the message). Element results are store()'s, bit for bit (and NumPy's astype's, but for a
 * float16 signalling NaN to float64, quieted: half_to_float): exact integer conversions, an int64 rounded
 * once to float32, NaN and infinities kept. */
typedef int (*row_fn)(char *dst, const char *src, Py_ssize_t st, Py_ssize_t n);

#define LD_PLAIN(T) static inline T ld_##T(const char *p) { T v; memcpy(&v, p, sizeof v); return v; }
LD_PLAIN(float)
LD_PLAIN(double)
LD_PLAIN(uint8_t)
LD_PLAIN(int8_t)
LD_PLAIN(int16_t)
LD_PLAIN(uint16_t)
LD_PLAIN(int32_t)
LD_PLAIN(int64_t)

static inline float ld_f16(const char *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return half_to_float(h);
}

static inline float ld_bf16(const char *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return bf16_to_float(h);
}

/* one loop for a contiguous row (a constant stride: vectorised) and one for any other stride */
#define ROW_LOOP(LD, D, STRIDE, BAD)                                                                             \
    for (Py_ssize_t i = 0; i < n; i++) {                                                                         \
        __typeof__(LD(src)) x = LD(src + i * (STRIDE));                                                          \
        D y = (D)x;                                                                                              \
        d[i] = y;                                                                                                \
        bad |= (BAD);                                                                                            \
    }
#define ROW(NAME, LD, SZ, D, BAD)                                                                                \
    static int NAME(char *dst, const char *src, Py_ssize_t st, Py_ssize_t n)                                     \
    {                                                                                                            \
        D *d = (D *)dst;                                                                                         \
        int bad = 0;                                                                                             \
        if (st == (SZ))                                                                                          \
            ROW_LOOP(LD, D, (SZ), BAD)                                                                           \
        else                                                                                                     \
            ROW_LOOP(LD, D, st, BAD)                                                                             \
        return bad != 0;                                                                                         \
    }
/* an infinity the cast made of a finite value */
#define F32_OVERFLOW ((fabsf(y) == INFINITY) & (fabs((double)x) != INFINITY))
static inline int outside(int64_t v, int64_t lo, int64_t hi) { return (v < lo) | (v > hi); }
#define OUTSIDE(LO, HI) outside((int64_t)x, LO, HI)
/* the rows into float32, float64 and each integer dtype from each source dtype that converts to it
 * (a float never converts to an integer: refused before the copy) */
#define ROWS_TO_FLOAT(S, LD, SZ)                                                                                 \
    ROW(row_##S##_f32, LD, SZ, float, 0)                                                                         \
    ROW(row_##S##_f64, LD, SZ, double, 0)
#define ROWS_TO_INT(S, LD, SZ)                                                                                   \
    ROWS_TO_FLOAT(S, LD, SZ)                                                                                     \
    ROW(row_##S##_u8, LD, SZ, uint8_t, OUTSIDE(0, UINT8_MAX))                                                    \
    ROW(row_##S##_i8, LD, SZ, int8_t, OUTSIDE(INT8_MIN, INT8_MAX))                                               \
    ROW(row_##S##_i16, LD, SZ, int16_t, OUTSIDE(INT16_MIN, INT16_MAX))                                           \
    ROW(row_##S##_u16, LD, SZ, uint16_t, OUTSIDE(0, UINT16_MAX))                                                 \
    ROW(row_##S##_i32, LD, SZ, int32_t, OUTSIDE(INT32_MIN, INT32_MAX))                                           \
    ROW(row_##S##_i64, LD, SZ, int64_t, 0)
ROW(row_f64_f32, ld_double, 8, float, F32_OVERFLOW)
ROW(row_f32_f64, ld_float, 4, double, 0)
ROWS_TO_FLOAT(f16, ld_f16, 2)
ROWS_TO_FLOAT(bf16, ld_bf16, 2)
ROWS_TO_INT(u8, ld_uint8_t, 1)
ROWS_TO_INT(i8, ld_int8_t, 1)
ROWS_TO_INT(i16, ld_int16_t, 2)
ROWS_TO_INT(u16, ld_uint16_t, 2)
ROWS_TO_INT(i32, ld_int32_t, 4)
ROWS_TO_INT(i64, ld_int64_t, 8)
/* the same dtype: a copy (as the bits) */
ROW(row_same1, ld_uint8_t, 1, uint8_t, 0)
ROW(row_same2, ld_uint16_t, 2, uint16_t, 0)
ROW(row_same4, ld_int32_t, 4, int32_t, 0)
ROW(row_same8, ld_int64_t, 8, int64_t, 0)

#define INT_ROWS(S) {row_##S##_f32, row_##S##_f64, row_##S##_u8, row_##S##_i8, row_##S##_i16, row_##S##_u16,    \
                     row_##S##_i32, row_##S##_i64}
/* [source][destination] in pf_dtype order (sources: the import-only half dtypes too); NULL: no row */
static const row_fn g_rows[PF_DT_BF16_IN + 1][PF_DT_COUNT] = {
    [PF_DT_F32] = {[PF_DT_F32] = row_same4, [PF_DT_F64] = row_f32_f64},
    [PF_DT_F64] = {[PF_DT_F32] = row_f64_f32, [PF_DT_F64] = row_same8},
    [PF_DT_U8] = INT_ROWS(u8),
    [PF_DT_I8] = INT_ROWS(i8),
    [PF_DT_I16] = INT_ROWS(i16),
    [PF_DT_U16] = INT_ROWS(u16),
    [PF_DT_I32] = INT_ROWS(i32),
    [PF_DT_I64] = INT_ROWS(i64),
    [PF_DT_F16_IN] = {[PF_DT_F32] = row_f16_f32, [PF_DT_F64] = row_f16_f64},
    [PF_DT_BF16_IN] = {[PF_DT_F32] = row_bf16_f32, [PF_DT_F64] = row_bf16_f64},
};

static row_fn row_for(pf_dtype sdt, pf_dtype ddt)
{
    if (sdt == ddt) {
        size_t sz = pf_dtype_size(sdt);
        return sz == 1 ? row_same1 : sz == 2 ? row_same2 : sz == 4 ? row_same4 : sz == 8 ? row_same8 : NULL;
    }
    if ((int)sdt < 0 || sdt > PF_DT_BF16_IN || (int)ddt < 0 || ddt >= PF_DT_COUNT)
        return NULL;
    return g_rows[sdt][ddt];
}

/* Converts the n > 0 elements of src into the C-contiguous dst by rows: 0, or 1 where some element is
 * refused or no row converts these dtypes (the caller then goes element by element). Dimensions of size
 * 1 are dropped and C-adjacent ones merged, so a contiguous array is one row. */
static int copy_rows(char *dst, pf_dtype ddt, const PfArray *src, size_t n)
{
    row_fn f = row_for(src->dtype, ddt);
    if (!f)
        return 1;
    Py_ssize_t shape[PF_MAXDIM] = {1}, strides[PF_MAXDIM] = {0}, idx[PF_MAXDIM] = {0};
    int nd = 0;
    for (int i = 0; i < src->ndim; i++) {
        if (src->shape[i] == 1)
            continue;
        if (nd > 0 && strides[nd - 1] == src->strides[i] * src->shape[i]) {
            shape[nd - 1] *= src->shape[i];
            strides[nd - 1] = src->strides[i];
            continue;
        }
        shape[nd] = src->shape[i];
        strides[nd++] = src->strides[i];
    }
    nd = nd ? nd : 1;
    Py_ssize_t len = shape[nd - 1];
    size_t rows = n / (size_t)len, step = (size_t)len * pf_dtype_size(ddt);
    const char *p = src->data;
    int bad = 0;
    for (size_t r = 0; r < rows; r++) {
        bad |= f(dst + r * step, p, strides[nd - 1], len);
        for (int d = nd - 2; d >= 0; d--) {
            if (++idx[d] < shape[d]) {
                p += strides[d];
                break;
            }
            p -= strides[d] * (shape[d] - 1);
            idx[d] = 0;
        }
    }
    return bad;
}

/* Copies the strided source into the C-contiguous destination, converting: 0, or -1 with a ValueError
 * naming argname for an integer the destination dtype cannot hold or a finite float beyond float32's
 * range (float32 destinations). */
static int copy_strided(char *dst, pf_dtype ddt, const PfArray *src, const char *argname)
{
    size_t n = pf_array_size(src);
    if (n == 0 || copy_rows(dst, ddt, src, n) == 0)
        return 0;
    /* element by element: the first refused element, for its index and value */
    size_t isz = pf_dtype_size(ddt);
    Py_ssize_t idx[PF_MAXDIM] = {0};
    const char *p = src->data;
    int same = ddt == src->dtype;
    int64_t bad;
    double bad_f;
    for (size_t k = 0; k < n; k++) {
        int rc = 0;
        if (same)
            memcpy(dst + k * isz, p, isz);
        else
            rc = store(dst + k * isz, ddt, p, src->dtype, &bad, &bad_f);
        if (rc == -1) {
            PyErr_Format(PyExc_ValueError, "argument '%s': value %lld (element %zu) does not fit %s; integer "
                         "conversions are exact, not wrapped", argname, (long long)bad, k, pf_dtype_name(ddt));
            return -1;
        }
        if (rc == -2) {
            char *text = PyOS_double_to_string(bad_f, 'r', 0, 0, NULL);
            if (text == NULL)
                return -1;
            PyErr_Format(PyExc_ValueError, "argument '%s': values must be finite in float32 (|x| <= 3.4e38): "
                         "value %s (element %zu) is beyond float32's range, not rounded to an infinity",
                         argname, text, k);
            PyMem_Free(text);
            return -1;
        }
        for (int d = src->ndim - 1; d >= 0; d--) {
            if (++idx[d] < src->shape[d]) {
                p += src->strides[d];
                break;
            }
            p -= src->strides[d] * (src->shape[d] - 1);
            idx[d] = 0;
        }
    }
    return 0;
}

/* ---- importing ---- */

static int parse_format(const char *fmt, Py_ssize_t itemsize, pf_dtype *out, const char *argname)
{
    if (!fmt)
        fmt = "B";
    char order = '@';
    if (*fmt == '@' || *fmt == '=' || *fmt == '<' || *fmt == '>' || *fmt == '!')
        order = *fmt++;
    if ((order == '>' || order == '!') && itemsize != 1) { /* one byte has no byte order (NumPy: '>B' is uint8) */
        PyErr_Format(PyExc_ValueError,
                     "argument '%s': non-native (big-endian) byte order is not supported; "
                     "convert with .astype(dtype.newbyteorder('='))", argname);
        return -1;
    }
    if (fmt[0] && fmt[1] == '\0') {
        char c = fmt[0];
        /* 'l'/'L' are 8 bytes on LP64 in native mode, NumPy uses them for int64 */
        if (c == 'l' && itemsize == 8) c = 'q';
        if (c == 'l' && itemsize == 4) c = 'i';
        for (int i = 0; i < PF_DT_COUNT; i++) {
            if (g_dtypes[i].fmt == c && (Py_ssize_t)g_dtypes[i].size == itemsize) {
                *out = (pf_dtype)i;
                return 0;
            }
        }
        if (c == 'e' && itemsize == 2) { /* float16: converted on import */
            *out = PF_DT_F16_IN;
            return 0;
        }
    }
    if (strcmp(fmt, "bfloat16") == 0 && itemsize == 2) { /* MLX's buffer format: converted on import */
        *out = PF_DT_BF16_IN;
        return 0;
    }
    PyErr_Format(PyExc_TypeError,
                 "argument '%s': unsupported element format '%s' (supported: float32, float64, uint8, "
                 "int8, int16, uint16, int32, int64; float16 and bfloat16 are converted to float32)", argname, fmt);
    return -1;
}

static PyObject *producer_failed(PyObject *obj, const char *argname, const char *what);

/* Whether obj exports a read-only buffer (0 with the exception of the writable export left pending, else 1
 * with it cleared): tells a read-only producer from one that exports no buffer of its type at all. */
static int exports_read_only(PyObject *obj)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    Py_buffer view;
    if (PyObject_GetBuffer(obj, &view, PyBUF_RECORDS_RO) < 0) {
        PyErr_Clear();
        PyErr_Restore(type, value, tb);
        return 0;
    }
    PyBuffer_Release(&view);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    return 1;
}

static PfArray *view_from_buffer(PyObject *obj, int writable, const char *argname)
{
    PfArray *a = alloc_struct();
    if (!a)
        return NULL;
    int flags = PyBUF_RECORDS_RO;
    if (writable)
        flags |= PyBUF_WRITABLE;
    if (PyObject_GetBuffer(obj, &a->view, flags) < 0) {
        Py_DECREF(a);
        /* NumPy reports a read-only array as ValueError, others as BufferError; read-only only where a
         * read-only export succeeds (NumPy refuses datetime64 with a ValueError too) */
        if (writable && (PyErr_ExceptionMatches(PyExc_BufferError) || PyErr_ExceptionMatches(PyExc_ValueError)) &&
            exports_read_only(obj)) {
            PyErr_Format(PyExc_ValueError, "argument '%s': a writable buffer is required but %s is read-only",
                         argname, Py_TYPE(obj)->tp_name);
            return NULL;
        }
        /* NumPy's refusal of a dtype it exports no buffer for (datetime64: "cannot include dtype 'M' in a
         * buffer") names nothing */
        return (PfArray *)producer_failed(obj, argname, "buffer export");
    }
    a->has_view = 1;
    Py_buffer *v = &a->view;
    if (v->ndim > PF_MAXDIM) {
        PyErr_Format(PyExc_ValueError, "argument '%s': at most %d dimensions are supported", argname, PF_MAXDIM);
        Py_DECREF(a);
        return NULL;
    }
    if (parse_format(v->format, v->itemsize, &a->dtype, argname) < 0) {
        Py_DECREF(a);
        return NULL;
    }
    a->ndim = v->ndim;
    a->data = v->buf;
    a->readonly = v->readonly;
    if (v->ndim == 0) {
        /* scalar buffer */
    } else if (v->shape == NULL) {
        a->ndim = 1;
        a->shape[0] = v->len / v->itemsize;
        a->strides[0] = v->itemsize;
    } else {
        for (int i = 0; i < v->ndim; i++) {
            a->shape[i] = v->shape[i];
            a->strides[i] = v->strides ? v->strides[i] : 0;
        }
        if (!v->strides)
            set_c_strides(a);
    }
    return a;
}

static void dl_capsule_destructor(PyObject *cap)
{
    if (PyCapsule_IsValid(cap, "dltensor")) {
        DLManagedTensor *m = PyCapsule_GetPointer(cap, "dltensor");
        if (m && m->deleter)
            m->deleter(m);
    }
}

static void dlv_capsule_destructor(PyObject *cap)
{
    if (PyCapsule_IsValid(cap, "dltensor_versioned")) {
        DLManagedTensorVersioned *m = PyCapsule_GetPointer(cap, "dltensor_versioned");
        if (m && m->deleter)
            m->deleter(m);
    }
}

/* Calls obj.__dlpack__(max_version=(1, 0)); producers older than DLPack 1.0 do not take the
 * keyword (TypeError): they are asked again without it and give an unversioned capsule. */
static PyObject *call_dlpack(PyObject *obj)
{
    PyObject *meth = PyObject_GetAttrString(obj, "__dlpack__");
    if (!meth)
        return NULL;
    PyObject *args = PyTuple_New(0);
    PyObject *kw = Py_BuildValue("{s:(ii)}", "max_version", PF_DLPACK_MAJOR, PF_DLPACK_MINOR);
    PyObject *cap = args && kw ? PyObject_Call(meth, args, kw) : NULL;
    Py_XDECREF(kw);
    if (!cap && args && PyErr_ExceptionMatches(PyExc_TypeError)) {
        PyErr_Clear();
        cap = PyObject_Call(meth, args, NULL);
    }
    Py_XDECREF(args);
    Py_DECREF(meth);
    return cap;
}

/* torch's lazy negation (a tensor with the negative bit, e.g. z.conj().imag): torch 1.13's __dlpack__
 * exports its memory without the sign, so reading it would give -x. Refused as NumPy refuses it.
 * Returns 0, or -1 with TypeError (or the error of is_neg()). */
static int refuse_lazy_negation(PyObject *obj, const char *argname)
{
    if (!PyObject_HasAttrString(obj, "is_neg"))
        return 0;
    PyObject *neg = PyObject_CallMethod(obj, "is_neg", NULL);
    if (!neg)
        return -1;
    const int set = PyObject_IsTrue(neg);
    Py_DECREF(neg);
    if (set > 0)
        PyErr_Format(PyExc_TypeError, "argument '%s': the tensor has its negative bit set (a lazy negation, e.g. "
                     "z.conj().imag) that DLPack does not carry; pass t.resolve_neg()", argname);
    return set != 0 ? -1 : 0;
}

/* Whether a type named `a` (or `b`, where not NULL) is in obj's type's mro: a library's type found by name,
 * without importing the library. */
static int has_base(PyObject *obj, const char *a, const char *b)
{
    PyObject *mro = Py_TYPE(obj)->tp_mro;
    for (Py_ssize_t i = 0; mro && PyTuple_Check(mro) && i < PyTuple_GET_SIZE(mro); i++) {
        const char *tn = ((PyTypeObject *)PyTuple_GET_ITEM(mro, i))->tp_name;
        if (strcmp(tn, a) == 0 || (b && strcmp(tn, b) == 0))
            return 1;
    }
    return 0;
}

/* Whether obj is a torch tensor (torch.Tensor, Parameter or a subclass: torch._C._TensorBase, torch 2's
 * torch._C.TensorBase, in its MRO), found without importing torch and without raising. */
static int is_torch_tensor(PyObject *obj) { return has_base(obj, "torch._C._TensorBase", "torch._C.TensorBase"); }

/* A numpy.ma masked array: an ndarray whose buffer holds its masked elements as data. */
static int is_masked_array(PyObject *obj)
{
    return has_base(obj, "MaskedArray", NULL) && has_base(obj, "numpy.ndarray", NULL);
}

/* obj's method `what` raised. A producer's exception propagates unchanged (user code's, as everywhere:
 * convert.h), but for torch's own refusals of a tensor it cannot export (a meta tensor's __dlpack_device__:
 * "ValueError: Unknown device type meta for Dlpack"; a bool or sparse tensor's __dlpack__: "RuntimeError:
 * Bool type is not supported by dlpack") and NumPy's of an array it exports no buffer for (datetime64),
 * which name neither the argument nor pyfastpim: from a torch tensor or a NumPy array, an Exception (not
 * MemoryError) becomes a TypeError naming the argument and quoting it. Returns NULL. */
static PyObject *producer_failed(PyObject *obj, const char *argname, const char *what)
{
    if (!(is_torch_tensor(obj) || has_base(obj, "numpy.ndarray", NULL)) || !PyErr_ExceptionMatches(PyExc_Exception) ||
        PyErr_ExceptionMatches(PyExc_MemoryError))
        return NULL;
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    PyErr_NormalizeException(&et, &ev, &tb);
    PyErr_Format(PyExc_TypeError, "argument '%s': its %s failed: %S: %S", argname, what, et ? et : Py_None,
                 ev ? ev : Py_None);
    Py_XDECREF(et);
    Py_XDECREF(ev);
    Py_XDECREF(tb);
    return NULL;
}

/* A converter's error about an interface key ("argument '<key>': expected ...") as one about the argument:
 * "argument 'obj': <key>: expected ...". Any other exception (raised by the value's own __index__: a
 * KeyboardInterrupt, a UnicodeDecodeError, a plain ValueError too) propagates as it is (convert.h): only
 * the converters' own words, exactly a TypeError or ValueError naming the key, are reworded. */
static void prefix_error(const char *argname, const char *key)
{
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    if (et != PyExc_TypeError && et != PyExc_ValueError) { /* the converters' are exactly these */
        PyErr_Restore(et, ev, tb);
        return;
    }
    PyErr_NormalizeException(&et, &ev, &tb);
    PyObject *msg = ev ? PyObject_Str(ev) : NULL;
    const char *m = msg ? PyUnicode_AsUTF8(msg) : NULL;
    size_t kl = strlen(key);
    if (!m || strncmp(m, "argument '", 10) != 0 || strncmp(m + 10, key, kl) != 0 || strncmp(m + 10 + kl, "': ", 3)) {
        PyErr_Clear(); /* a failed str(): the value's own exception stands */
        Py_XDECREF(msg);
        PyErr_Restore(et, ev, tb);
        return;
    }
    m += 13 + kl;
    PyErr_Clear();
    PyErr_Format(et, "argument '%s': %s: %s", argname, key, m);
    Py_XDECREF(msg);
    Py_XDECREF(et);
    Py_XDECREF(ev);
    Py_XDECREF(tb);
}

/* Memory a host kernel may read: the CPU's, or CUDA's pinned host memory. */
static int dl_host_device(long type) { return type == kDLCPU || type == kDLCUDAHost; }

static int refuse_device(long type, const char *argname)
{
    PyErr_Format(PyExc_ValueError, "argument '%s': DLPack device type %ld is not host memory; "
                 "move the tensor to the CPU first", argname, type);
    return -1;
}

/* obj.__dlpack_device__() must be a (device_type, device_id) tuple of ints (the int rule, convert.h: an
 * IntEnum as torch's or a NumPy integer, not a bool) naming host memory, the id >= 0. Returns 0, or -1 with
 * TypeError (not such a tuple) or ValueError (another device, an int out of range, a negative id), each
 * naming the argument; an exception of an item's own __index__ propagates as it is. */
static int check_dlpack_device(PyObject *obj, const char *argname)
{
    PyObject *dev = PyObject_CallMethod(obj, "__dlpack_device__", NULL);
    if (!dev) { /* e.g. torch's meta tensors: "Unknown device type meta for Dlpack" */
        producer_failed(obj, argname, "__dlpack_device__()");
        return -1;
    }
    int64_t v[2] = {0, 0};
    int rc = PyTuple_Check(dev) && PyTuple_GET_SIZE(dev) == 2 ? 0 : -1;
    if (rc < 0)
        PyErr_Format(PyExc_TypeError, "argument '%s': __dlpack_device__() returned %R, not a (device_type, "
                     "device_id) tuple of ints", argname, dev);
    for (int i = 0; rc == 0 && i < 2; i++) {
        const char *name = i ? "__dlpack_device__() device_id" : "__dlpack_device__() device_type";
        if ((rc = pf_as_int64(PyTuple_GET_ITEM(dev, i), name, &v[i])) < 0)
            prefix_error(argname, name);
    }
    if (rc == 0 && (v[1] < 0 || v[0] < 0 || v[0] > INT32_MAX)) {
        PyErr_Format(PyExc_ValueError, "argument '%s': __dlpack_device__() returned %R: the device type and id must "
                     "be ints >= 0", argname, dev);
        rc = -1;
    }
    Py_DECREF(dev);
    return rc < 0 ? -1 : dl_host_device((long)v[0]) ? 0 : refuse_device((long)v[0], argname);
}

/* The consumed tensor's device, shape, strides and data: host memory (whatever __dlpack_device__
 * said), a shape array when ndim > 0, a data pointer when there are elements, byte strides that fit
 * in Py_ssize_t. Fills a's shape and strides (a->dtype set); 0, or -1 with ValueError naming the
 * argument. */
static int dl_layout(PfArray *a, const DLTensor *t, const char *argname)
{
    if (!dl_host_device(t->device.device_type))
        return refuse_device(t->device.device_type, argname);
    if (t->ndim > 0 && !t->shape) {
        PyErr_Format(PyExc_ValueError, "argument '%s': the DLPack tensor has %d dimensions but no shape", argname,
                     t->ndim);
        return -1;
    }
    int empty = 0;
    for (int i = 0; i < t->ndim; i++) {
        if (t->shape[i] < 0) {
            PyErr_Format(PyExc_ValueError, "argument '%s': negative dimension in the DLPack tensor", argname);
            return -1;
        }
        a->shape[i] = (Py_ssize_t)t->shape[i];
        empty |= t->shape[i] == 0;
    }
    a->ndim = t->ndim;
    if (check_shape(a, argname) < 0) /* before its strides are scaled to bytes (check_extent relies on it) */
        return -1;
    if (!t->data && !empty) {
        PyErr_Format(PyExc_ValueError, "argument '%s': the DLPack tensor has elements but a NULL data pointer",
                     argname);
        return -1;
    }
    a->data = (char *)t->data + t->byte_offset;
    if (!t->strides) {
        set_c_strides(a);
        return 0;
    }
    for (int i = 0; i < t->ndim; i++)
        if (t->shape[i] < 2) /* any stride: no step is taken (pf_array_from_object gives a view C strides) */
            a->strides[i] = 0;
        else if (__builtin_mul_overflow((Py_ssize_t)t->strides[i], (Py_ssize_t)pf_dtype_size(a->dtype),
                                        &a->strides[i])) {
            PyErr_Format(PyExc_ValueError, "argument '%s': DLPack stride %lld of dimension %d overflows in bytes",
                         argname, (long long)t->strides[i], i);
            return -1;
        }
    return 0;
}

static PfArray *view_from_dlpack(PyObject *obj, int writable, const char *argname)
{
    if (refuse_lazy_negation(obj, argname) < 0)
        return NULL;
    if (check_dlpack_device(obj, argname) < 0)
        return NULL;
    PyObject *cap = call_dlpack(obj);
    if (!cap) /* e.g. torch: "Bool type is not supported by dlpack": say which argument */
        return (PfArray *)producer_failed(obj, argname, "__dlpack__()");
    DLManagedTensor *m = NULL;
    DLManagedTensorVersioned *mv = NULL;
    if (PyCapsule_IsValid(cap, "dltensor_versioned")) {
        mv = PyCapsule_GetPointer(cap, "dltensor_versioned");
        if (mv && (PyCapsule_SetName(cap, "used_dltensor_versioned") < 0 || PyCapsule_SetDestructor(cap, NULL) < 0))
            mv = NULL;
    } else if (PyCapsule_IsValid(cap, "dltensor")) {
        m = PyCapsule_GetPointer(cap, "dltensor");
        if (m && (PyCapsule_SetName(cap, "used_dltensor") < 0 || PyCapsule_SetDestructor(cap, NULL) < 0))
            m = NULL;
    } else { /* a consumed capsule is renamed "used_dltensor[_versioned]" */
        PyErr_Format(PyExc_ValueError, "argument '%s': __dlpack__() returned %s, not an unconsumed DLPack capsule "
                     "(each capsule can be consumed once)", argname,
                     PyCapsule_CheckExact(cap) ? "an already consumed or foreign capsule" : Py_TYPE(cap)->tp_name);
    }
    Py_DECREF(cap);
    if (!m && !mv)
        return NULL;
    /* the capsule is consumed: from now on we own the tensor and call its deleter */
    PfArray *a = alloc_struct();
    if (!a) {
        if (mv && mv->deleter) mv->deleter(mv);
        if (m && m->deleter) m->deleter(m);
        return NULL;
    }
    a->dl = m;
    a->dlv = mv;
    if (mv && mv->version.major != PF_DLPACK_MAJOR) {
        PyErr_Format(PyExc_BufferError, "argument '%s': DLPack version %u.%u is not supported (asked for at most %d.%d)",
                     argname, (unsigned)mv->version.major, (unsigned)mv->version.minor, PF_DLPACK_MAJOR,
                     PF_DLPACK_MINOR);
        Py_DECREF(a);
        return NULL;
    }
    DLTensor *t = mv ? &mv->dl_tensor : &m->dl_tensor;
    a->readonly = mv && (mv->flags & DLPACK_FLAG_BITMASK_READ_ONLY) ? 1 : 0;
    if (writable && a->readonly) {
        PyErr_Format(PyExc_ValueError, "argument '%s': a writable buffer is required but %s exported read-only "
                     "memory (DLPack read-only flag)", argname, Py_TYPE(obj)->tp_name);
        Py_DECREF(a);
        return NULL;
    }
    if (t->ndim > PF_MAXDIM || t->ndim < 0) {
        PyErr_Format(PyExc_ValueError, "argument '%s': at most %d dimensions are supported", argname, PF_MAXDIM);
        Py_DECREF(a);
        return NULL;
    }
    int found = 0;
    for (int i = 0; i < PF_DT_COUNT; i++) {
        if (g_dtypes[i].dl_code == t->dtype.code && g_dtypes[i].size * 8 == t->dtype.bits && t->dtype.lanes == 1) {
            a->dtype = (pf_dtype)i;
            found = 1;
            break;
        }
    }
    if (!found && t->dtype.bits == 16 && t->dtype.lanes == 1 &&
        (t->dtype.code == kDLFloat || t->dtype.code == kDLBfloat)) {
        a->dtype = t->dtype.code == kDLFloat ? PF_DT_F16_IN : PF_DT_BF16_IN; /* converted on import */
        found = 1;
    }
    if (!found) {
        PyErr_Format(PyExc_TypeError, "argument '%s': unsupported DLPack dtype (code %d, %d bits, %d lanes); "
                     "supported: float32, float64, uint8, int8, int16, uint16, int32, int64 (float16 and bfloat16 "
                     "are converted to float32)",
                     argname, t->dtype.code, t->dtype.bits, t->dtype.lanes);
        Py_DECREF(a);
        return NULL;
    }
    if (dl_layout(a, t, argname) < 0) {
        Py_DECREF(a);
        return NULL;
    }
    return a;
}

/* An __array_interface__ key present and of the expected type (TypeError naming it otherwise). */
static int iface_key(PyObject *v, PyTypeObject *type, const char *key, const char *what, const char *argname)
{
    if (v && PyObject_TypeCheck(v, type))
        return 0;
    if (!v)
        PyErr_Format(PyExc_TypeError, "argument '%s': __array_interface__ has no '%s' (%s)", argname, key, what);
    else
        PyErr_Format(PyExc_TypeError, "argument '%s': __array_interface__ '%s' must be %s, got %s", argname, key,
                     what, Py_TYPE(v)->tp_name);
    return -1;
}

/* The ints of an interface's shape (sizes >= 0) or strides (any sign) tuple, as the scalar rule reads ints
 * (no bool, no float); errors name the key and the argument. */
static int iface_ints(PyObject *tup, const char *key, int any_sign, Py_ssize_t *out, const char *argname)
{
    char name[48];
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(tup); i++) {
        int64_t v;
        snprintf(name, sizeof name, "__array_interface__ '%s'[%d]", key, (int)i);
        if (pf_as_int64(PyTuple_GET_ITEM(tup, i), name, &v) < 0) {
            prefix_error(argname, name);
            return -1;
        }
        if (!any_sign && v < 0) { /* int64 is Py_ssize_t; check_extent bounds what strides reach */
            PyErr_Format(PyExc_ValueError, "argument '%s': %s must be a size >= 0, got %lld", argname, name,
                         (long long)v);
            return -1;
        }
        out[i] = (Py_ssize_t)v;
    }
    return 0;
}

/* The interface's strides: one int per dimension of its shape. */
static int iface_strides(PyObject *strides, Py_ssize_t nd, Py_ssize_t *out, const char *argname)
{
    if (PyTuple_GET_SIZE(strides) != nd) {
        PyErr_Format(PyExc_ValueError, "argument '%s': __array_interface__ 'strides' has %zd values for the %zd "
                     "dimensions of 'shape'", argname, PyTuple_GET_SIZE(strides), nd);
        return -1;
    }
    return iface_ints(strides, "strides", 1, out, argname);
}

/* Whether descr is the default NumPy writes for a plain dtype, [('', typestr)] (NumPy reads descr only for a
 * void typestr, which pyfastpim does not take). */
static int default_descr(PyObject *descr, PyObject *typestr)
{
    if (!PyList_Check(descr) || PyList_GET_SIZE(descr) != 1)
        return 0;
    PyObject *f = PyList_GET_ITEM(descr, 0);
    if (!PyTuple_Check(f) || PyTuple_GET_SIZE(f) != 2 || !PyUnicode_Check(PyTuple_GET_ITEM(f, 0)) ||
        !PyUnicode_Check(PyTuple_GET_ITEM(f, 1)))
        return 0;
    return PyUnicode_GET_LENGTH(PyTuple_GET_ITEM(f, 0)) == 0 &&
           PyUnicode_Compare(PyTuple_GET_ITEM(f, 1), typestr) == 0;
}

/* An optional int key: 0 with *v set (*v untouched when absent), or -1 with its error naming the key. */
static int iface_opt_int(PyObject *iface, const char *key, int64_t *v, const char *argname)
{
    PyObject *o = PyDict_GetItemString(iface, key);
    char name[48];
    snprintf(name, sizeof name, "__array_interface__ '%s'", key);
    if (o && pf_as_int64(o, name, v) < 0) {
        prefix_error(argname, name);
        return -1;
    }
    return 0;
}

/* The keys pyfastpim reads nothing from must not describe other elements than it reads: 'version' absent
 * (NumPy takes that) or 3; 'mask' absent or None (masked elements would be read as data; NumPy ignores
 * it); 'offset' absent or 0 (with a pointer 'data' NumPy ignores it: honouring it would read other
 * elements than numpy.asarray(obj)); 'descr' absent or NumPy's default [('', typestr)] (a structured
 * dtype or one that disagrees). 0, or -1 with TypeError / ValueError naming the argument and the key. */
static int iface_unread_keys(PyObject *iface, PyObject *typestr, const char *argname)
{
    int64_t version = 3, offset = 0;
    PyObject *mask = PyDict_GetItemString(iface, "mask"), *descr = PyDict_GetItemString(iface, "descr");
    if (iface_opt_int(iface, "version", &version, argname) < 0 || iface_opt_int(iface, "offset", &offset, argname) < 0)
        return -1;
    if (version != 3)
        PyErr_Format(PyExc_ValueError, "argument '%s': __array_interface__ 'version' must be 3, got %lld", argname,
                     (long long)version);
    else if (mask && mask != Py_None)
        PyErr_Format(PyExc_ValueError, "argument '%s': __array_interface__ 'mask' is not supported (got %s): the "
                     "masked elements would be read as data; pass the data with the mask applied", argname,
                     Py_TYPE(mask)->tp_name);
    else if (offset != 0)
        PyErr_Format(PyExc_ValueError, "argument '%s': __array_interface__ 'offset' %lld is not supported with a "
                     "pointer 'data' (NumPy ignores it there); add it to the pointer", argname, (long long)offset);
    else if (descr && !default_descr(descr, typestr))
        PyErr_Format(PyExc_ValueError, "argument '%s': __array_interface__ 'descr' %R does not agree with 'typestr' "
                     "%R (only the default [('', typestr)] is supported: no structured dtype)", argname, descr,
                     typestr);
    else
        return 0;
    return -1;
}

/* The interface's 'data' (pointer, read-only flag): the pointer an int that fits one, the flag as every flag
 * reads (pf_as_flag). 0 with *ptr and *readonly set, or -1 with the error naming the argument and the item. */
static int iface_data(PyObject *pointer, PyObject *flag, const char *argname, char **ptr, int *readonly)
{
    static const char pname[] = "__array_interface__ 'data' pointer";
    static const char fname[] = "__array_interface__ 'data' read-only flag";
    uint64_t p;
    if (pf_as_uint64(pointer, pname, &p) < 0) {
        prefix_error(argname, pname);
        return -1;
    }
    if (p > UINTPTR_MAX) {
        PyErr_Format(PyExc_ValueError, "argument '%s': %s does not fit a pointer", argname, pname);
        return -1;
    }
    const int ro = pf_as_flag(flag, fname);
    if (ro < 0) {
        prefix_error(argname, fname);
        return -1;
    }
    *ptr = (char *)(uintptr_t)p;
    *readonly = ro;
    return 0;
}

static PfArray *view_from_array_interface(PyObject *obj, PyObject *iface, int writable, const char *argname)
{
    if (!PyDict_Check(iface)) {
        PyErr_Format(PyExc_TypeError, "argument '%s': __array_interface__ is not a dict", argname);
        return NULL;
    }
    PyObject *shape = PyDict_GetItemString(iface, "shape");
    PyObject *typestr = PyDict_GetItemString(iface, "typestr");
    PyObject *data = PyDict_GetItemString(iface, "data");
    PyObject *strides = PyDict_GetItemString(iface, "strides");
    if (iface_key(shape, &PyTuple_Type, "shape", "a tuple of sizes", argname) < 0 ||
        iface_key(typestr, &PyUnicode_Type, "typestr", "a str such as '<f4'", argname) < 0 ||
        iface_key(data, &PyTuple_Type, "data", "a (pointer, read-only flag) tuple", argname) < 0)
        return NULL;
    if (PyTuple_GET_SIZE(data) != 2) {
        PyErr_Format(PyExc_ValueError, "argument '%s': __array_interface__ 'data' must be a (pointer, read-only flag) "
                     "tuple, got %zd items", argname, PyTuple_GET_SIZE(data));
        return NULL;
    }
    const char *ts = PyUnicode_AsUTF8(typestr);
    if (!ts || iface_unread_keys(iface, typestr, argname) < 0)
        return NULL;
    char *end = NULL;
    long isz = strlen(ts) >= 3 && isdigit((unsigned char)ts[2]) ? strtol(ts + 2, &end, 10) : 0;
    if (!end || *end || !strchr("<>|=", ts[0])) { /* byte order, kind, item size; nothing after it */
        PyErr_Format(PyExc_TypeError, "argument '%s': bad typestr %R (expected a byte order '<', '>', '|' or '=', a "
                     "kind and an item size, such as '<f4')", argname, typestr);
        return NULL;
    }
    if (ts[0] == '>' && isz != 1) { /* one byte has no byte order (NumPy: '>u1' is uint8) */
        PyErr_Format(PyExc_ValueError, "argument '%s': non-native (big-endian) byte order is not supported", argname);
        return NULL;
    }
    char kind = ts[1];
    pf_dtype dt = PF_DT_ANY;
    for (int i = 0; i < PF_DT_COUNT; i++) {
        char k = g_dtypes[i].dl_code == kDLFloat ? 'f' : g_dtypes[i].dl_code == kDLInt ? 'i' : 'u';
        if (k == kind && (long)g_dtypes[i].size == isz)
            dt = (pf_dtype)i;
    }
    if (kind == 'f' && isz == 2)
        dt = PF_DT_F16_IN; /* converted on import */
    if (dt == PF_DT_ANY) {
        PyErr_Format(PyExc_TypeError, "argument '%s': unsupported typestr '%s'", argname, ts);
        return NULL;
    }
    Py_ssize_t nd = PyTuple_GET_SIZE(shape);
    if (nd > PF_MAXDIM) {
        PyErr_Format(PyExc_ValueError, "argument '%s': at most %d dimensions are supported", argname, PF_MAXDIM);
        return NULL;
    }
    PfArray *a = alloc_struct();
    if (!a)
        return NULL;
    a->dtype = dt;
    a->ndim = (int)nd;
    if (strides == Py_None)
        strides = NULL;
    if ((strides && iface_key(strides, &PyTuple_Type, "strides", "None or a tuple of byte strides", argname) < 0) ||
        iface_ints(shape, "shape", 0, a->shape, argname) < 0 ||
        (strides && iface_strides(strides, nd, a->strides, argname) < 0)) {
        Py_DECREF(a);
        return NULL;
    }
    if (!strides)
        set_c_strides(a);
    if (iface_data(PyTuple_GET_ITEM(data, 0), PyTuple_GET_ITEM(data, 1), argname, &a->data, &a->readonly) < 0) {
        Py_DECREF(a);
        return NULL;
    }
    if (writable && a->readonly) {
        PyErr_Format(PyExc_ValueError, "argument '%s': a writable buffer is required but %s is read-only",
                     argname, Py_TYPE(obj)->tp_name);
        Py_DECREF(a);
        return NULL;
    }
    if (!a->data && pf_array_size(a) > 0) {
        PyErr_Format(PyExc_ValueError, "argument '%s': NULL data pointer", argname);
        Py_DECREF(a);
        return NULL;
    }
    Py_INCREF(obj);
    a->base = obj;
    return a;
}

/* Any supported exporter -> PfArray view (dtype and layout as found). */
static PfArray *view_any(PyObject *obj, int writable, const char *argname)
{
    if (PfArray_Check(obj)) {
        PfArray *src = (PfArray *)obj;
        if (writable && src->readonly) {
            PyErr_Format(PyExc_ValueError, "argument '%s': a writable buffer is required but the Array is read-only",
                         argname);
            return NULL;
        }
        Py_INCREF(obj);
        return src;
    }
    if (is_masked_array(obj)) { /* as an __array_interface__ 'mask' (iface_neutral) */
        PyErr_Format(PyExc_ValueError, "argument '%s': a masked array is not supported (its buffer holds the masked "
                     "elements as data): pass the data with the mask applied (x.filled(value))", argname);
        return NULL;
    }
    if (PyBytes_Check(obj) || PyByteArray_Check(obj)) { /* a buffer of chars: read as uint8, b"ab" was 97, 98 */
        PyErr_Format(PyExc_TypeError, "argument '%s': expected an array of numbers, got %s (bytes and bytearray "
                     "hold text or raw bytes, not numbers; NumPy reads bytes as a string array): for byte values "
                     "pass np.frombuffer(value, dtype=np.uint8)", argname, Py_TYPE(obj)->tp_name);
        return NULL;
    }
    if (PyObject_CheckBuffer(obj))
        return view_from_buffer(obj, writable, argname);
    if (PyObject_HasAttrString(obj, "__array_interface__")) {
        PyObject *got = PyObject_GetAttrString(obj, "__array_interface__");
        /* a copy holds the values: their own __index__ may empty the producer's dict while they are read
         * (borrowed from it, the shape, strides and data tuples would be freed under the reader) */
        PyObject *iface = got && PyDict_Check(got) ? PyDict_Copy(got) : got;
        if (got && iface != got)
            Py_DECREF(got);
        if (!iface)
            return NULL;
        PfArray *a = view_from_array_interface(obj, iface, writable, argname);
        Py_DECREF(iface);
        return a;
    }
    if (PyObject_HasAttrString(obj, "__dlpack__") && PyObject_HasAttrString(obj, "__dlpack_device__"))
        return view_from_dlpack(obj, writable, argname);
    PyErr_Format(PyExc_TypeError,
                 "argument '%s': %s exposes no buffer, __array_interface__ or __dlpack__; pass a NumPy array, "
                 "a CPU torch tensor or a buffer%s", argname, Py_TYPE(obj)->tp_name,
                 PyList_Check(obj) || PyTuple_Check(obj)
                     ? " (data operands are shared without copies, as pyfastpim.asarray takes them: "
                       "numpy.asarray(value, numpy.float32) makes the array once)"
                     : "");
    return NULL;
}

/* The exporter's shape and strides must describe a byte range whose size and every offset fit in
 * Py_ssize_t (an exporter can claim anything: a lying __array_interface__ with strides of 2**62
 * would otherwise send the copy loops far outside the buffer). The shape first (check_shape), except
 * for a DLPack import, whose shape dl_layout checked before scaling its strides to bytes. The stride of
 * a dimension of size 1 is never stepped along: any value passes (a view is given C strides, a copy
 * reads index 0 only). Returns 0 or -1 with ValueError. */
static int check_extent(const PfArray *a, const char *argname)
{
    if (!a->dl && !a->dlv && check_shape(a, argname) < 0)
        return -1;
    Py_ssize_t span = (Py_ssize_t)pf_dtype_size(a->dtype), n = 1;
    uintptr_t below = 0; /* bytes before the data pointer (negative strides) */
    for (int i = 0; i < a->ndim; i++) {
        if (a->shape[i] == 0)
            return 0; /* empty: nothing is read */
        if (a->shape[i] == 1)
            continue; /* any stride, -2**63 too: no step is taken along it (as dl_layout's DLPack import) */
        Py_ssize_t st = a->strides[i], term;
        if (st == PY_SSIZE_T_MIN || __builtin_mul_overflow(st < 0 ? -st : st, a->shape[i] - 1, &term) ||
            __builtin_add_overflow(span, term, &span) || __builtin_mul_overflow(n, a->shape[i], &n) ||
            __builtin_mul_overflow(n, (Py_ssize_t)pf_dtype_size(a->dtype), &term)) {
            PyErr_Format(PyExc_ValueError, "argument '%s': its shape and strides overflow the address space "
                         "(dimension %d: size %zd, stride %zd)", argname, i, a->shape[i], a->strides[i]);
            return -1;
        }
        if (st < 0)
            below += (uintptr_t)-st * (uintptr_t)(a->shape[i] - 1);
    }
    /* the bytes read lie in [data - below, data - below + span): an exporter's pointer (an
     * __array_interface__ claims any int) must leave that range inside the address space */
    uintptr_t p = (uintptr_t)a->data;
    if (p < below || p - below > UINTPTR_MAX - (uintptr_t)span) {
        PyErr_Format(PyExc_ValueError, "argument '%s': its data pointer %p with its shape and strides reaches "
                     "outside the address space", argname, (void *)p);
        return -1;
    }
    return 0;
}

PfArray *pf_array_from_object(PyObject *obj, pf_dtype dt, int writable, const char *argname)
{
    PfArray *v = view_any(obj, writable, argname);
    if (!v)
        return NULL;
    if (dtype_is_half(v->dtype) && dt == PF_DT_ANY)
        dt = PF_DT_F32; /* float16 / bfloat16: one counted conversion to float32 */
    if (check_extent(v, argname) < 0) {
        Py_DECREF(v);
        return NULL;
    }
    int need_convert = dt != PF_DT_ANY && dt != v->dtype;
    /* kernels read elements with aligned loads (and vector code assumes element
     * alignment): data at an address that is not a multiple of the element
     * size (e.g. a NumPy view at byte offset 1 into a bytes buffer) is copied */
    int aligned = pf_array_size(v) == 0 || ((uintptr_t)v->data % pf_dtype_size(v->dtype)) == 0;
    if (!need_convert && aligned && is_c_contiguous(v)) {
        /* C-contiguous whatever the exporter's strides on dimensions of size 1 (or of an empty array):
         * the view reports C strides, as NumPy's buffer export reports a contiguous array, so its buffer
         * and DLPack exports agree (a stride of 2 bytes went out as 0 elements) and carry no negative or
         * huge stride that a strict consumer would refuse */
        if ((PyObject *)v != obj)
            set_c_strides(v);
        return v;
    }
    if (writable) {
        PyErr_Format(PyExc_ValueError,
                     "argument '%s': a writable %s C-contiguous array%s is required (got %s%s%s); it cannot be "
                     "written through a copy", argname, pf_dtype_name(dt == PF_DT_ANY ? v->dtype : dt),
                     aligned ? "" : " aligned to its element size", pf_dtype_name(v->dtype),
                     is_c_contiguous(v) ? "" : ", non-contiguous", aligned ? "" : ", misaligned");
        Py_DECREF(v);
        return NULL;
    }
    pf_dtype target = need_convert ? dt : v->dtype;
    if (need_convert && dtype_is_float(v->dtype) && !dtype_is_float(target)) {
        PyErr_Format(PyExc_TypeError, "argument '%s': refusing to convert %s to %s (float to integer)", argname,
                     pf_dtype_name(v->dtype), pf_dtype_name(target));
        Py_DECREF(v);
        return NULL;
    }
    PfArray *c = pf_array_new(target, v->ndim, v->shape);
    if (!c) {
        Py_DECREF(v);
        return NULL;
    }
    int rc = copy_strided(c->data, target, v, argname);
    Py_DECREF(v);
    if (rc < 0) {
        Py_DECREF(c);
        return NULL;
    }
    pf_record_copy(need_convert ? PF_COPY_CONVERT : PF_COPY_HOST, pf_array_nbytes(c));
    return c;
}

PyObject *pf_py_asarray(PyObject *self, PyObject *args, PyObject *kwds)
{
    PF_UNUSED(self);
    static char *kwlist[] = {"obj", "dtype", "writable", NULL};
    PyObject *obj, *dtype = Py_None;
    pf_flag_arg writable = {.name = "writable"};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|OO&:asarray", kwlist, &obj, &dtype, pf_conv_flag, &writable))
        return NULL;
    pf_dtype dt;
    if (pf_dtype_from_object(dtype, "dtype", &dt) < 0)
        return NULL;
    return (PyObject *)pf_array_from_object(obj, dt, writable.value, "obj");
}

/* _view(obj, name, dtype='float32'): obj as a C-contiguous pyfastpim.Array of dtype (float32: what the
 * product kernels read; pyfastpim.physics asks float64), zero-copy when it already is one, else the one
 * counted copy; errors name the argument `name` (the Python API's operand entry points). */
PyObject *pf_py_view(PyObject *self, PyObject *args)
{
    PF_UNUSED(self);
    PyObject *obj, *dtype = NULL;
    const char *name;
    if (!PyArg_ParseTuple(args, "Os|O:_view", &obj, &name, &dtype))
        return NULL;
    pf_dtype dt = PF_DT_F32;
    if (dtype && pf_dtype_from_object(dtype, "dtype", &dt) < 0)
        return NULL;
    return (PyObject *)pf_array_from_object(obj, dt, 0, name);
}

/* ---- exporting: buffer protocol ---- */

/* Fortran-contiguous too: empty, or at most one dimension longer than 1 (every Array is C-contiguous). */
static int is_f_contiguous(const PfArray *a)
{
    int long_dims = 0;
    for (int i = 0; i < a->ndim; i++) {
        if (a->shape[i] == 0)
            return 1;
        long_dims += a->shape[i] > 1;
    }
    return long_dims <= 1;
}

/* Every Array is C-contiguous: requests for strides, C or any contiguity get its layout; a
 * Fortran-contiguous request is refused unless the layout is both. A request without PyBUF_ND gets
 * no shape and so (as PyBuffer_FillInfo gives) ndim 1 (0 for a 0-d Array): CPython's
 * PyBuffer_IsContiguous reads shape[] when ndim > 1. */
static int PfArray_getbuffer(PfArray *a, Py_buffer *view, int flags)
{
    const char *refuse = (flags & PyBUF_WRITABLE) && a->readonly ? "pyfastpim.Array is read-only"
                         : (flags & PyBUF_F_CONTIGUOUS) == PyBUF_F_CONTIGUOUS && !is_f_contiguous(a)
                             ? "pyfastpim.Array is C-contiguous, not Fortran-contiguous"
                             : NULL;
    if (refuse) {
        PyErr_SetString(PyExc_BufferError, refuse);
        view->obj = NULL;
        return -1;
    }
    view->buf = a->data;
    view->obj = (PyObject *)a;
    Py_INCREF(a);
    view->len = (Py_ssize_t)pf_array_nbytes(a);
    view->readonly = a->readonly;
    view->itemsize = (Py_ssize_t)pf_dtype_size(a->dtype);
    static const char *fmtstr[PF_DT_COUNT] = {"f", "d", "B", "b", "h", "H", "i", "q"};
    view->format = (flags & PyBUF_FORMAT) ? (char *)fmtstr[a->dtype] : NULL;
    view->ndim = (flags & PyBUF_ND) == PyBUF_ND || a->ndim == 0 ? a->ndim : 1;
    view->shape = (flags & PyBUF_ND) == PyBUF_ND ? a->shape : NULL;
    view->strides = (flags & PyBUF_STRIDES) == PyBUF_STRIDES ? a->strides : NULL;
    view->suboffsets = NULL;
    view->internal = NULL;
    a->exports++;
    return 0;
}

static void PfArray_releasebuffer(PfArray *a, Py_buffer *view)
{
    PF_UNUSED(view);
    a->exports--;
}

static PyBufferProcs PfArray_as_buffer = {
    (getbufferproc)PfArray_getbuffer,
    (releasebufferproc)PfArray_releasebuffer,
};

/* ---- exporting: DLPack ---- */

typedef struct {
    DLManagedTensor managed;
    int64_t shape[PF_MAXDIM];
    int64_t strides[PF_MAXDIM];
} pf_dl_export;

typedef struct {
    DLManagedTensorVersioned managed;
    int64_t shape[PF_MAXDIM];
    int64_t strides[PF_MAXDIM];
} pf_dlv_export;

/* Deleters may be called from any thread by the consumer. */
static void dl_export_deleter(DLManagedTensor *m)
{
    PyGILState_STATE st = PyGILState_Ensure();
    Py_XDECREF((PyObject *)m->manager_ctx);
    PyGILState_Release(st);
    PyMem_RawFree(m);
}

static void dlv_export_deleter(DLManagedTensorVersioned *m)
{
    PyGILState_STATE st = PyGILState_Ensure();
    Py_XDECREF((PyObject *)m->manager_ctx);
    PyGILState_Release(st);
    PyMem_RawFree(m);
}

static void fill_dltensor(DLTensor *t, int64_t *shape, int64_t *strides, const PfArray *a)
{
    t->data = a->data;
    t->device.device_type = kDLCPU;
    t->device.device_id = 0;
    t->ndim = a->ndim;
    t->dtype.code = g_dtypes[a->dtype].dl_code;
    t->dtype.bits = (uint8_t)(g_dtypes[a->dtype].size * 8);
    t->dtype.lanes = 1;
    for (int i = 0; i < a->ndim; i++) {
        shape[i] = a->shape[i];
        strides[i] = a->strides[i] / (Py_ssize_t)pf_dtype_size(a->dtype);
    }
    t->shape = shape;
    t->strides = strides;
    t->byte_offset = 0;
}

/* max_version / dl_device: None handled by the caller, else a tuple of two ints >= 0 (not bools, as every
 * int argument: convert.h); TypeError / ValueError naming the argument. */
static int dl_int_pair(PyObject *obj, const char *name, const char *what, int64_t v[2])
{
    if (!PyTuple_Check(obj) || PyTuple_GET_SIZE(obj) != 2) {
        PyErr_Format(PyExc_TypeError, "argument '%s': expected None or a %s tuple of ints, got %R", name, what, obj);
        return -1;
    }
    for (int i = 0; i < 2; i++) {
        if (pf_as_int64(PyTuple_GET_ITEM(obj, i), name, &v[i]) < 0)
            return -1;
        if (v[i] < 0) {
            PyErr_Format(PyExc_ValueError, "argument '%s': expected a %s tuple of ints >= 0, got %R", name, what, obj);
            return -1;
        }
    }
    return 0;
}

/* __dlpack__(stream=None, *, max_version=None, dl_device=None, copy=None), DLPack 1.0:
 * max_version >= (1, 0) gives a "dltensor_versioned" capsule (read-only arrays carry the
 * read-only flag), else a "dltensor" capsule (read-only arrays are refused: that format
 * cannot say so). dl_device must be None or the CPU (1, 0). copy=True exports a counted
 * copy (flagged IS_COPIED); copy=False and None share the memory (never a copy). copy is None or
 * a flag (pf_as_flag: a NumPy bool or 0/1 too). */
static PyObject *PfArray_dlpack(PfArray *a, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"stream", "max_version", "dl_device", "copy", NULL};
    PyObject *stream = Py_None, *max_version = Py_None, *dl_device = Py_None, *copy_obj = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O$OOO:__dlpack__", kwlist, &stream, &max_version, &dl_device,
                                     &copy_obj))
        return NULL;
    if (stream != Py_None) {
        PyErr_SetString(PyExc_ValueError, "argument 'stream': pyfastpim arrays live in host memory; stream must be None");
        return NULL;
    }
    int versioned = 0;
    int64_t v[2];
    if (max_version != Py_None) {
        if (dl_int_pair(max_version, "max_version", "(major, minor)", v) < 0)
            return NULL;
        versioned = v[0] >= PF_DLPACK_MAJOR;
    }
    if (dl_device != Py_None) {
        if (dl_int_pair(dl_device, "dl_device", "(device_type, device_id)", v) < 0)
            return NULL;
        if (v[0] != kDLCPU || v[1] != 0) {
            PyErr_Format(PyExc_BufferError, "argument 'dl_device': pyfastpim.Array lives in host memory (kDLCPU, 0) "
                         "and cannot be exported to device (%lld, %lld)", (long long)v[0], (long long)v[1]);
            return NULL;
        }
    }
    /* the array API's copy is Optional[bool]: None, or a flag as every flag of the library reads it
     * (pf_as_flag: True/False, a NumPy bool, 0/1; copy='no' is a TypeError, not a truthy wish) */
    const int copy = copy_obj == Py_None ? 0 : pf_as_flag(copy_obj, "copy");
    if (copy < 0)
        return NULL;
    if (a->readonly && !versioned && !copy) {
        PyErr_SetString(PyExc_BufferError, "cannot export a read-only pyfastpim.Array through an unversioned DLPack "
                        "capsule (it cannot signal read-only memory): pass max_version=(1, 0), or copy=True");
        return NULL;
    }
    PfArray *src = a;
    if (copy) {
        src = pf_array_new(a->dtype, a->ndim, a->shape);
        if (!src)
            return NULL;
        (void)copy_strided(src->data, src->dtype, a, "self"); /* same dtype: cannot fail */
        pf_record_copy(PF_COPY_HOST, pf_array_nbytes(src));
    } else {
        Py_INCREF(src);
    }
    PyObject *cap;
    if (versioned) {
        pf_dlv_export *e = PyMem_RawCalloc(1, sizeof *e);
        if (!e) {
            Py_DECREF(src);
            return PyErr_NoMemory();
        }
        fill_dltensor(&e->managed.dl_tensor, e->shape, e->strides, src);
        e->managed.version.major = PF_DLPACK_MAJOR;
        e->managed.version.minor = PF_DLPACK_MINOR;
        e->managed.flags = (src->readonly ? DLPACK_FLAG_BITMASK_READ_ONLY : 0) |
                           (copy ? DLPACK_FLAG_BITMASK_IS_COPIED : 0);
        e->managed.manager_ctx = src;
        e->managed.deleter = dlv_export_deleter;
        cap = PyCapsule_New(&e->managed, "dltensor_versioned", dlv_capsule_destructor);
        if (!cap)
            PyMem_RawFree(e);
    } else {
        pf_dl_export *e = PyMem_RawCalloc(1, sizeof *e);
        if (!e) {
            Py_DECREF(src);
            return PyErr_NoMemory();
        }
        fill_dltensor(&e->managed.dl_tensor, e->shape, e->strides, src);
        e->managed.manager_ctx = src;
        e->managed.deleter = dl_export_deleter;
        cap = PyCapsule_New(&e->managed, "dltensor", dl_capsule_destructor);
        if (!cap)
            PyMem_RawFree(e);
    }
    if (!cap)
        Py_DECREF(src);
    return cap;
}

static PyObject *PfArray_dlpack_device(PfArray *a, PyObject *noargs)
{
    PF_UNUSED(a);
    PF_UNUSED(noargs);
    return Py_BuildValue("(ii)", (int)kDLCPU, 0);
}

/* ---- Python-visible attributes ---- */

static PyObject *shape_tuple(const Py_ssize_t *v, int n)
{
    PyObject *t = PyTuple_New(n);
    if (!t)
        return NULL;
    for (int i = 0; i < n; i++) {
        PyObject *x = PyLong_FromSsize_t(v[i]);
        if (!x) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, x);
    }
    return t;
}

static PyObject *PfArray_get_shape(PfArray *a, void *c) { PF_UNUSED(c); return shape_tuple(a->shape, a->ndim); }
static PyObject *PfArray_get_strides(PfArray *a, void *c) { PF_UNUSED(c); return shape_tuple(a->strides, a->ndim); }
static PyObject *PfArray_get_dtype(PfArray *a, void *c) { PF_UNUSED(c); return PyUnicode_FromString(pf_dtype_name(a->dtype)); }
static PyObject *PfArray_get_ndim(PfArray *a, void *c) { PF_UNUSED(c); return PyLong_FromLong(a->ndim); }
static PyObject *PfArray_get_size(PfArray *a, void *c) { PF_UNUSED(c); return PyLong_FromSize_t(pf_array_size(a)); }
static PyObject *PfArray_get_nbytes(PfArray *a, void *c) { PF_UNUSED(c); return PyLong_FromSize_t(pf_array_nbytes(a)); }
static PyObject *PfArray_get_readonly(PfArray *a, void *c) { PF_UNUSED(c); return PyBool_FromLong(a->readonly); }
static PyObject *PfArray_get_owns(PfArray *a, void *c) { PF_UNUSED(c); return PyBool_FromLong(a->owns_data); }
static PyObject *PfArray_get_ptr(PfArray *a, void *c) { PF_UNUSED(c); return PyLong_FromVoidPtr(a->data); }

static PyGetSetDef PfArray_getset[] = {
    {"shape", (getter)PfArray_get_shape, NULL, "Tuple of dimensions.", NULL},
    {"strides", (getter)PfArray_get_strides, NULL, "Tuple of byte strides.", NULL},
    {"dtype", (getter)PfArray_get_dtype, NULL, "Element type name, e.g. 'float32'.", NULL},
    {"ndim", (getter)PfArray_get_ndim, NULL, "Number of dimensions.", NULL},
    {"size", (getter)PfArray_get_size, NULL, "Number of elements.", NULL},
    {"nbytes", (getter)PfArray_get_nbytes, NULL, "Bytes spanned by the elements.", NULL},
    {"readonly", (getter)PfArray_get_readonly, NULL, "True when the memory may not be written.", NULL},
    {"owns_data", (getter)PfArray_get_owns, NULL, "True when the core allocated the memory (a copy or an output).", NULL},
    {"data_ptr", (getter)PfArray_get_ptr, NULL, "Address of the first element (for sharing checks).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyObject *PfArray_to_numpy(PfArray *a, PyObject *noargs)
{
    PF_UNUSED(noargs);
    PyObject *np = PyImport_ImportModule("numpy");
    if (!np)
        return NULL;
    PyObject *r = PyObject_CallMethod(np, "asarray", "O", (PyObject *)a);
    Py_DECREF(np);
    return r;
}

static PyObject *PfArray_to_torch(PfArray *a, PyObject *noargs)
{
    PF_UNUSED(noargs);
    if (a->readonly) {
        /* __dlpack__'s own advice (max_version, copy=True) names arguments to_torch() does not take */
        PyErr_SetString(PyExc_BufferError, "to_torch(): cannot share a read-only pyfastpim.Array with torch (a torch "
                        "tensor is always writable); for a copy use torch.from_dlpack(a.__dlpack__(copy=True)), or "
                        "read it without a copy through a.to_numpy() (read-only)");
        return NULL;
    }
    PyObject *tu = PyImport_ImportModule("torch.utils.dlpack");
    if (!tu)
        return NULL;
    PyObject *noargs_tuple = PyTuple_New(0);
    if (!noargs_tuple) {
        Py_DECREF(tu);
        return NULL;
    }
    PyObject *cap = PfArray_dlpack(a, noargs_tuple, NULL);
    Py_DECREF(noargs_tuple);
    if (!cap) {
        Py_DECREF(tu);
        return NULL;
    }
    PyObject *r = PyObject_CallMethod(tu, "from_dlpack", "O", cap);
    Py_DECREF(cap);
    Py_DECREF(tu);
    if (!r && PyErr_ExceptionMatches(PyExc_RuntimeError)) {
        /* torch's own words name neither the call nor the dtype (torch 1.13: "Unsupported kUInt bits 16") */
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        PyErr_Format(PyExc_TypeError, "to_torch(): torch refused the Array of dtype %s (%S; torch 1.13 has no "
                     "uint16 tensor); read it through a.to_numpy() instead", pf_dtype_name(a->dtype),
                     value ? value : Py_None);
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
    }
    return r;
}

/* Pickling (and copy.copy / deepcopy): the elements as bytes, rebuilt by Array._rebuild into an Array
 * owning a copy of the same dtype, shape and read-only flag. Both copies are counted (host_copy). */
static PyObject *PfArray_reduce(PfArray *a, PyObject *noargs)
{
    PF_UNUSED(noargs);
    PyObject *rebuild = PyObject_GetAttrString((PyObject *)Py_TYPE(a), "_rebuild");
    PyObject *shape = PfArray_get_shape(a, NULL);
    PyObject *data = PyBytes_FromStringAndSize(a->data, (Py_ssize_t)pf_array_nbytes(a));
    if (!rebuild || !shape || !data) {
        Py_XDECREF(rebuild);
        Py_XDECREF(shape);
        Py_XDECREF(data);
        return NULL;
    }
    pf_record_copy(PF_COPY_HOST, pf_array_nbytes(a));
    /* "N" hands the three references over (released by Py_BuildValue on failure too) */
    return Py_BuildValue("N(NsNO)", rebuild, data, pf_dtype_name(a->dtype), shape, a->readonly ? Py_True : Py_False);
}

/* Array._rebuild(data, dtype, shape, readonly): what __reduce__ gives; data must hold exactly the elements. */
static PyObject *PfArray_rebuild(PyObject *cls, PyObject *args)
{
    PF_UNUSED(cls);
    Py_buffer data;
    PyObject *dtype, *shape;
    pf_flag_arg ro = {.name = "readonly"};
    if (!PyArg_ParseTuple(args, "y*OO!O&:_rebuild", &data, &dtype, &PyTuple_Type, &shape, pf_conv_flag, &ro))
        return NULL;
    PfArray *a = NULL;
    pf_dtype dt;
    Py_ssize_t nd = PyTuple_GET_SIZE(shape), dims[PF_MAXDIM];
    if (pf_dtype_from_object(dtype, "dtype", &dt) < 0 || dt == PF_DT_ANY || nd > PF_MAXDIM) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_ValueError, dt == PF_DT_ANY ? "argument 'dtype': an Array's dtype is required"
                         : "argument 'shape': at most %d dimensions are supported", PF_MAXDIM);
        goto done;
    }
    PfArray probe = {.dtype = dt, .ndim = (int)nd};
    for (Py_ssize_t i = 0; i < nd; i++) {
        probe.shape[i] = dims[i] = PyLong_AsSsize_t(PyTuple_GET_ITEM(shape, i));
        if (dims[i] < 0) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "argument 'shape': negative dimension");
            goto done;
        }
    }
    if (check_shape(&probe, "shape") < 0)
        goto done;
    if ((size_t)data.len != pf_array_nbytes(&probe)) {
        PyErr_Format(PyExc_ValueError, "argument 'data': %zd bytes for shape %R of %s", data.len, shape,
                     pf_dtype_name(dt));
        goto done;
    }
    if (!(a = pf_array_new(dt, (int)nd, dims)))
        goto done;
    memcpy(a->data, data.buf, (size_t)data.len);
    pf_record_copy(PF_COPY_HOST, (size_t)data.len);
    a->readonly = ro.value;
done:
    PyBuffer_Release(&data);
    return (PyObject *)a;
}

static PyMethodDef PfArray_methods[] = {
    {"__reduce__", (PyCFunction)PfArray_reduce, METH_NOARGS,
     "Pickle support: the elements as bytes (a counted copy), rebuilt as an Array owning them."},
    {"_rebuild", (PyCFunction)PfArray_rebuild, METH_VARARGS | METH_CLASS,
     "_rebuild(data, dtype, shape, readonly)\n--\n\nThe Array a pickle holds (see __reduce__)."},
    {"__dlpack__", (PyCFunction)(void (*)(void))PfArray_dlpack, METH_VARARGS | METH_KEYWORDS,
     "__dlpack__(stream=None, *, max_version=None, dl_device=None, copy=None)\n--\n\n"
     "Export as a DLPack capsule sharing this memory: versioned (DLPack 1.0, read-only flag) when\n"
     "max_version >= (1, 0); dl_device must be None or (1, 0) (the CPU); copy=True exports a counted copy\n(copy: None or a flag: True/False, a NumPy bool, 0/1)."},
    {"__dlpack_device__", (PyCFunction)PfArray_dlpack_device, METH_NOARGS,
     "Return (device_type, device_id) = (kDLCPU, 0)."},
    {"to_numpy", (PyCFunction)PfArray_to_numpy, METH_NOARGS,
     "to_numpy()\n--\n\nA numpy.ndarray sharing this memory (no copy)."},
    {"to_torch", (PyCFunction)PfArray_to_torch, METH_NOARGS,
     "to_torch()\n--\n\nA CPU torch.Tensor sharing this memory (no copy, through DLPack); a read-only Array\n"
     "raises BufferError (torch.from_dlpack(a.__dlpack__(copy=True)) gives a copy)."},
    {NULL, NULL, 0, NULL},
};

static PyObject *PfArray_repr(PfArray *a)
{
    PyObject *shape = PfArray_get_shape(a, NULL);
    if (!shape)
        return NULL;
    PyObject *r = PyUnicode_FromFormat("pyfastpim.Array(shape=%R, dtype=%s%s)", shape, pf_dtype_name(a->dtype),
                                       a->readonly ? ", readonly" : "");
    Py_DECREF(shape);
    return r;
}

static Py_ssize_t PfArray_len(PfArray *a)
{
    if (a->ndim == 0) {
        PyErr_SetString(PyExc_TypeError, "len() of a 0-d Array");
        return -1;
    }
    return a->shape[0];
}

static PySequenceMethods PfArray_as_sequence = {
    .sq_length = (lenfunc)PfArray_len,
};

static PyObject *PfArray_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PF_UNUSED(type);
    return pf_py_asarray(NULL, args, kwds);
}

PyTypeObject PfArray_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "pyfastpim.Array",
    .tp_basicsize = sizeof(PfArray),
    .tp_dealloc = (destructor)PfArray_dealloc,
    .tp_repr = (reprfunc)PfArray_repr,
    .tp_as_buffer = &PfArray_as_buffer,
    .tp_as_sequence = &PfArray_as_sequence,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Array(obj, dtype=None, writable=False)\n--\n\n"
              "An n-dimensional array in host memory shared with NumPy (buffer protocol) and torch (DLPack).\n"
              "Constructing one is the same as pyfastpim.asarray(obj, dtype, writable).",
    .tp_methods = PfArray_methods,
    .tp_getset = PfArray_getset,
    .tp_new = PfArray_new,
    .tp_weaklistoffset = offsetof(PfArray, weakreflist),
};

int pf_array_module_init(PyObject *module)
{
    if (PyType_Ready(&PfArray_Type) < 0)
        return -1;
    Py_INCREF(&PfArray_Type);
    if (PyModule_AddObject(module, "Array", (PyObject *)&PfArray_Type) < 0) {
        Py_DECREF(&PfArray_Type);
        return -1;
    }
    return 0;
}
