/* Python binding of the fused DPE MVM: validation and argument parsing only;
 * the kernel (dpe.c) sees plain pointers. */
#include "array.h"
#include "bindings.h"
#include "dpe.h"
#include "noise.h"
#include "philox_noise.h"

/* Parses a slice-method tuple (most significant first) into m[s], w[s]
 * indexed least significant first. Returns the slice count or -1. */
static int parse_widths(PyObject *obj, const char *argname, int *m, int64_t *w)
{
    PyObject *seq = PySequence_Fast(obj, "");
    if (!seq) {
        PyErr_Format(PyExc_TypeError, "argument '%s': expected a sequence of slice widths", argname);
        return -1;
    }
    Py_ssize_t S = PySequence_Fast_GET_SIZE(seq);
    if (S < 1 || S > PF_MAX_SLICES) {
        Py_DECREF(seq);
        PyErr_Format(PyExc_ValueError, "argument '%s': 1 to %d slices are supported, got %zd", argname, PF_MAX_SLICES, S);
        return -1;
    }
    int widths[PF_MAX_SLICES], total = 0;
    for (Py_ssize_t t = 0; t < S; t++) {
        long v = PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, t));
        if (v == -1 && PyErr_Occurred()) {
            Py_DECREF(seq);
            return -1;
        }
        if (v <= 0 || v > 16) {
            Py_DECREF(seq);
            PyErr_Format(PyExc_ValueError, "argument '%s': slice widths must be in 1..16, got %ld", argname, v);
            return -1;
        }
        widths[t] = (int)v;
        total += (int)v;
    }
    Py_DECREF(seq);
    if (widths[0] != 1 || total > 16) {
        PyErr_Format(PyExc_ValueError, "argument '%s': the first (sign) width must be 1 and the total at most 16 bits",
                     argname);
        return -1;
    }
    int off = 0;
    for (int s = 0; s < S; s++) {
        int width = widths[S - 1 - s];
        m[s] = (1 << width) - 1;
        w[s] = (int64_t)1 << off;
        off += width;
    }
    w[S - 1] = -((int64_t)1 << (total - 1));
    return (int)S;
}

static int parse_pair(PyObject *obj, const char *argname, int64_t *a, int64_t *b)
{
    if (!PyArg_ParseTuple(obj, "LL", a, b)) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "argument '%s': expected a pair of ints", argname);
        return -1;
    }
    if (*a <= 0 || *b <= 0) {
        PyErr_Format(PyExc_ValueError, "argument '%s': sizes must be positive", argname);
        return -1;
    }
    return 0;
}

static int check_shape(PfArray *a, const char *argname, int ndim, const int64_t *shape)
{
    if (a->ndim != ndim) {
        PyErr_Format(PyExc_ValueError, "argument '%s': expected %d dimensions, got %d", argname, ndim, a->ndim);
        return -1;
    }
    for (int i = 0; i < ndim; i++)
        if (shape[i] >= 0 && a->shape[i] != shape[i]) {
            PyErr_Format(PyExc_ValueError, "argument '%s': dimension %d is %zd, expected %lld", argname, i,
                         a->shape[i], (long long)shape[i]);
            return -1;
        }
    return 0;
}

static PyObject *py_dpe_mvm(PyObject *self, PyObject *args, PyObject *kwds)
{
    (void)self;
    static char *kwlist[] = {"x_codes", "x_scale", "x_granule", "x_widths", "w_levels", "w_conductance", "w_scale",
                             "w_granule", "w_widths", "n", "rdac", "g_level", "radc", "HGS", "LGS", "read_sigma",
                             "vnoise", "seed", "call", "out", NULL};
    PyObject *ox, *oxs, *oxg, *oxw, *owl, *owc, *ows, *owg, *oww, *oradc, *osig, *oout = Py_None;
    long long n, seed_ll;
    unsigned long call;
    int rdac, g_level;
    double HGS, LGS, vnoise;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOOOOOOLiiOddOdLk|O:dpe_mvm", kwlist, &ox, &oxs, &oxg, &oxw,
                                     &owl, &owc, &ows, &owg, &oww, &n, &rdac, &g_level, &oradc, &HGS, &LGS, &osig,
                                     &vnoise, &seed_ll, &call, &oout))
        return NULL;
    pf_dpe_args a;
    memset(&a, 0, sizeof a);
    PyObject *keep[8] = {0};
    PyObject *result = NULL;
    PfArray *xc = NULL, *xs = NULL, *wl = NULL, *wc = NULL, *ws = NULL, *out = NULL, *sig = NULL;

    if ((a.sx = parse_widths(oxw, "x_widths", a.x_max, a.x_weight)) < 0 ||
        (a.sw = parse_widths(oww, "w_widths", a.w_max, a.w_weight)) < 0)
        return NULL;
    if (parse_pair(oxg, "x_granule", &a.x_qr, &a.x_qc) < 0 || parse_pair(owg, "w_granule", &a.w_qr, &a.w_qc) < 0)
        return NULL;
    if (n <= 0) {
        PyErr_SetString(PyExc_ValueError, "argument 'n': crossbar rows must be positive");
        return NULL;
    }
    if (a.x_qc % n || a.w_qr % n) {
        PyErr_Format(PyExc_ValueError, "argument 'n': granules (x columns %lld, weight rows %lld) must be multiples "
                     "of the crossbar rows %lld", (long long)a.x_qc, (long long)a.w_qr, n);
        return NULL;
    }
    if (rdac < 2 || g_level < 2 || g_level > PF_MAX_LEVELS) {
        PyErr_SetString(PyExc_ValueError, "arguments 'rdac'/'g_level': rdac >= 2 and 2 <= g_level <= 65536 required");
        return NULL;
    }
    if (!(HGS > LGS) || !(LGS >= 0)) {
        PyErr_SetString(PyExc_ValueError, "arguments 'HGS'/'LGS': 0 <= LGS < HGS required");
        return NULL;
    }
    if (!(vnoise >= 0)) {
        PyErr_SetString(PyExc_ValueError, "argument 'vnoise': must be >= 0");
        return NULL;
    }
    /* radc: per weight slice, least significant first */
    PyObject *rseq = PySequence_Fast(oradc, "argument 'radc': expected a sequence");
    if (!rseq)
        return NULL;
    if (PySequence_Fast_GET_SIZE(rseq) != a.sw) {
        Py_DECREF(rseq);
        PyErr_Format(PyExc_ValueError, "argument 'radc': %d values needed (one per weight slice)", a.sw);
        return NULL;
    }
    for (int j = 0; j < a.sw; j++) {
        a.radc[j] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(rseq, j));
        if (a.radc[j] < 2) {
            Py_DECREF(rseq);
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "argument 'radc': every ADC resolution must be >= 2");
            return NULL;
        }
    }
    Py_DECREF(rseq);
    for (int j = 0; j < a.sw; j++)
        if (a.w_max[j] > g_level - 1) {
            PyErr_Format(PyExc_ValueError, "argument 'w_widths': weight slice maximum %d exceeds g_level - 1 = %d",
                         a.w_max[j], g_level - 1);
            return NULL;
        }

    xc = pf_array_from_object(ox, PF_DT_U8, 0, "x_codes");
    if (!xc) goto done;
    if (xc->ndim != 4 || xc->shape[0] != a.sx) {
        PyErr_Format(PyExc_ValueError, "argument 'x_codes': expected shape (%d, N, R, K)", a.sx);
        goto done;
    }
    a.batch = xc->shape[1];
    a.rows = xc->shape[2];
    a.inner = xc->shape[3];
    a.x_gr = pf_ceil_div(a.rows, a.x_qr);
    a.x_gc = pf_ceil_div(a.inner, a.x_qc);
    xs = pf_array_from_object(oxs, PF_DT_F32, 0, "x_scale");
    if (!xs) goto done;
    {
        int64_t shp[3] = {a.batch, a.x_gr, a.x_gc};
        if (check_shape(xs, "x_scale", 3, shp) < 0) goto done;
    }
    wl = pf_array_from_object(owl, PF_DT_U8, 0, "w_levels");
    if (!wl) goto done;
    {
        int64_t shp[3] = {a.sw, a.inner, -1};
        if (check_shape(wl, "w_levels", 3, shp) < 0) goto done;
    }
    a.cols = wl->shape[2];
    a.w_gr = pf_ceil_div(a.inner, a.w_qr);
    a.w_gc = pf_ceil_div(a.cols, a.w_qc);
    if (owc != Py_None) {
        wc = pf_array_from_object(owc, PF_DT_F32, 0, "w_conductance");
        if (!wc) goto done;
        int64_t shp[3] = {a.sw, a.inner, a.cols};
        if (check_shape(wc, "w_conductance", 3, shp) < 0) goto done;
        a.w_conductance = (const float *)wc->data;
    }
    ws = pf_array_from_object(ows, PF_DT_F32, 0, "w_scale");
    if (!ws) goto done;
    {
        int64_t shp[2] = {a.w_gr, a.w_gc};
        if (check_shape(ws, "w_scale", 2, shp) < 0) goto done;
    }
    if (osig != Py_None) {
        sig = pf_array_from_object(osig, PF_DT_F32, 0, "read_sigma");
        if (!sig) goto done;
        int64_t shp[1] = {g_level};
        if (check_shape(sig, "read_sigma", 1, shp) < 0) goto done;
        const float *sv = (const float *)sig->data;
        for (int l = 0; l < g_level; l++)
            if (!(sv[l] >= 0.0f) || !isfinite(sv[l])) {
                PyErr_SetString(PyExc_ValueError, "argument 'read_sigma': must be finite and >= 0");
                goto done;
            }
        a.read_sigma = sv;
    }
    {
        Py_ssize_t oshape[3] = {(Py_ssize_t)a.batch, (Py_ssize_t)a.rows, (Py_ssize_t)a.cols};
        if (oout == Py_None) {
            out = pf_array_new(PF_DT_F32, 3, oshape);
            if (!out) goto done;
        } else {
            out = pf_array_from_object(oout, PF_DT_F32, 1, "out");
            if (!out) goto done;
            int64_t shp[3] = {a.batch, a.rows, a.cols};
            if (check_shape(out, "out", 3, shp) < 0) goto done;
        }
    }
    a.x_codes = (const uint8_t *)xc->data;
    a.x_scale = (const float *)xs->data;
    a.w_levels = (const uint8_t *)wl->data;
    a.w_scale = (const float *)ws->data;
    a.rdac = rdac;
    a.g_level = g_level;
    a.HGS = HGS;
    a.LGS = LGS;
    a.vnoise = vnoise;
    a.seed = (uint64_t)seed_ll;
    a.call = (uint32_t)call;
    a.n = n;
    a.out = (float *)out->data;
    a.so_n = a.rows * a.cols;
    a.so_r = a.cols;
    a.so_p = 1;
    {
        int64_t D = (int64_t)(rdac - 1) * (g_level - 1) * n;
        if (D >= ((int64_t)1 << 24)) {
            PyErr_Format(PyExc_ValueError, "arguments 'rdac', 'g_level', 'n': (rdac-1)*(g_level-1)*n = %lld must be "
                         "below 2**24 for exact crossbar sums", (long long)D);
            goto done;
        }
    }
    {
        pf_status st;
        Py_BEGIN_ALLOW_THREADS
        st = pf_dpe_mvm(&a);
        Py_END_ALLOW_THREADS
        if (st != PF_OK) {
            pf_raise_status(st, "dpe_mvm");
            goto done;
        }
    }
    result = (PyObject *)out;
    Py_INCREF(result);
done:
    Py_XDECREF(xc);
    Py_XDECREF(xs);
    Py_XDECREF(wl);
    Py_XDECREF(wc);
    Py_XDECREF(ws);
    Py_XDECREF(sig);
    Py_XDECREF(out);
    (void)keep;
    return result;
}

/* Exposes the noise generator for statistical tests and cross-device checks. */
static PyObject *py_normals(PyObject *self, PyObject *args)
{
    (void)self;
    unsigned long long seed, idx0;
    unsigned int stream, call;
    Py_ssize_t count;
    if (!PyArg_ParseTuple(args, "KIIKn:normals", &seed, &stream, &call, &idx0, &count))
        return NULL;
    if (count < 0) {
        PyErr_SetString(PyExc_ValueError, "argument 'count': must be >= 0");
        return NULL;
    }
    PfArray *out = pf_array_new(PF_DT_F32, 1, &count);
    if (!out)
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    pf_normals(seed, stream, call, idx0, count, (float *)out->data);
    Py_END_ALLOW_THREADS
    return (PyObject *)out;
}

static PyMethodDef dpe_methods[] = {
    {"normals", py_normals, METH_VARARGS,
     "normals(seed, stream, call, idx0, count)\n--\n\nStandard normals of elements idx0.. of a Philox noise stream."},
    {"dpe_mvm", (PyCFunction)(void (*)(void))py_dpe_mvm, METH_VARARGS | METH_KEYWORDS,
     "dpe_mvm(x_codes, x_scale, x_granule, x_widths, w_levels, w_conductance, w_scale, w_granule, w_widths, n, rdac, "
     "g_level, radc, HGS, LGS, read_sigma, vnoise, seed, call, out=None)\n--\n\n"
     "Fused DAC -> crossbar -> ADC product of sliced inputs and programmed weights (spec section 7)."},
    {NULL, NULL, 0, NULL},
};

int pf_bind_dpe_init(PyObject *module)
{
    if (PyModule_AddFunctions(module, dpe_methods) < 0)
        return -1;
    if (PyModule_AddIntConstant(module, "DEFAULT_SEED", PF_DEFAULT_SEED) < 0)
        return -1;
    return 0;
}
