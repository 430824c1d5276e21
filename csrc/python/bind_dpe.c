/* Python binding of the fused DPE MVM: validation and argument parsing only;
 * the kernel (dpe.c) sees plain pointers. */
#include "python/array.h"
#include "python/bind_dpe.h"
#include "python/bind_interrupt.h"
#include "python/bindings.h"
#include "core/dpe.h"
#include "core/memory.h"
#include "cpu/noise.h"
#include "core/philox_noise.h"

/* Parses a slice-method tuple (most significant first) into m[s], w[s]
 * indexed least significant first. Returns the slice count or -1. */
int pf_dpe_parse_widths(PyObject *obj, const char *argname, int *m, int64_t *w)
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
        if (v <= 0 || v > 8) {
            Py_DECREF(seq);
            PyErr_Format(PyExc_ValueError, "argument '%s': slice widths must be in 1..8 (codes are uint8), got %ld",
                         argname, v);
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

int pf_dpe_parse_pair(PyObject *obj, const char *argname, int64_t *a, int64_t *b)
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

int pf_dpe_check_shape(PfArray *a, const char *argname, int ndim, const int64_t *shape)
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

void pf_dpe_refs_release(pf_dpe_refs *r)
{
    PfArray *all[] = {r->xc, r->xs, r->wl, r->wc, r->ws, r->sig, r->out, r->img, r->gmax, r->dq};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        Py_XDECREF(all[i]);
}

/* Weights and device arguments shared by every entry point; a->inner must be
 * set. Returns 0 or -1 with an exception naming the argument. */
int pf_dpe_parse_weights_and_device(pf_dpe_args *a, pf_dpe_refs *refs, PyObject *owl, PyObject *owc, PyObject *ows,
                                    PyObject *owg, PyObject *oww, long long n, int rdac, int g_level, PyObject *oradc,
                                    double HGS, double LGS, PyObject *osig, double vnoise, long long seed,
                                    unsigned long call)
{
    if ((a->sw = pf_dpe_parse_widths(oww, "w_widths", a->w_max, a->w_weight)) < 0)
        return -1;
    if (pf_dpe_parse_pair(owg, "w_granule", &a->w_qr, &a->w_qc) < 0)
        return -1;
    if (n <= 0 || n > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "argument 'n': crossbar rows must be in 1..2**31-1");
        return -1;
    }
    if (a->x_qc % n || a->w_qr % n) {
        PyErr_Format(PyExc_ValueError, "argument 'n': granules (x columns %lld, weight rows %lld) must be multiples "
                     "of the crossbar rows %lld", (long long)a->x_qc, (long long)a->w_qr, n);
        return -1;
    }
    if (rdac < 2 || rdac > (1 << 24) || g_level < 2 || g_level > PF_MAX_LEVELS) {
        PyErr_SetString(PyExc_ValueError, "arguments 'rdac'/'g_level': 2 <= rdac <= 2**24 and 2 <= g_level <= 65536 "
                        "required");
        return -1;
    }
    if (!(HGS > LGS) || !(LGS >= 0)) {
        PyErr_SetString(PyExc_ValueError, "arguments 'HGS'/'LGS': 0 <= LGS < HGS required");
        return -1;
    }
    if (!(vnoise >= 0) || !(vnoise <= PF_REL_SIGMA_MAX)) {
        char b1[40], b2[40];
        PyErr_Format(PyExc_ValueError, "argument 'vnoise': must be in [0, %s], got %s",
                     pf_fmt_double(b1, sizeof b1, PF_REL_SIGMA_MAX), pf_fmt_double(b2, sizeof b2, vnoise));
        return -1;
    }
    PyObject *rseq = PySequence_Fast(oradc, "argument 'radc': expected a sequence");
    if (!rseq)
        return -1;
    if (PySequence_Fast_GET_SIZE(rseq) != a->sw) {
        Py_DECREF(rseq);
        PyErr_Format(PyExc_ValueError, "argument 'radc': %d values needed (one per weight slice)", a->sw);
        return -1;
    }
    for (int j = 0; j < a->sw; j++) {
        a->radc[j] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(rseq, j));
        if (a->radc[j] < 2 || a->radc[j] > (1 << 24)) {
            Py_DECREF(rseq);
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "argument 'radc': every ADC resolution must be in 2..2**24");
            return -1;
        }
    }
    Py_DECREF(rseq);
    for (int j = 0; j < a->sw; j++)
        if (a->w_max[j] > g_level - 1) {
            PyErr_Format(PyExc_ValueError, "argument 'w_widths': weight slice maximum %d exceeds g_level - 1 = %d",
                         a->w_max[j], g_level - 1);
            return -1;
        }
    int64_t D = (int64_t)(rdac - 1) * (g_level - 1) * n;
    if (D >= ((int64_t)1 << 24)) {
        PyErr_Format(PyExc_ValueError, "arguments 'rdac', 'g_level', 'n': (rdac-1)*(g_level-1)*n = %lld must be "
                     "below 2**24 for exact crossbar sums", (long long)D);
        return -1;
    }
    if (!(refs->wl = pf_array_from_object(owl, PF_DT_U8, 0, "w_levels")))
        return -1;
    int64_t shp_l[3] = {a->sw, a->inner, -1};
    if (pf_dpe_check_shape(refs->wl, "w_levels", 3, shp_l) < 0)
        return -1;
    a->cols = refs->wl->shape[2];
    a->w_gr = pf_ceil_div(a->inner, a->w_qr);
    a->w_gc = pf_ceil_div(a->cols, a->w_qc);
    if (owc != Py_None) {
        if (!(refs->wc = pf_array_from_object(owc, PF_DT_F32, 0, "w_conductance")))
            return -1;
        int64_t shp[3] = {a->sw, a->inner, a->cols};
        if (pf_dpe_check_shape(refs->wc, "w_conductance", 3, shp) < 0)
            return -1;
        a->w_conductance = (const float *)refs->wc->data;
    }
    if (!(refs->ws = pf_array_from_object(ows, PF_DT_F32, 0, "w_scale")))
        return -1;
    int64_t shp_s[2] = {a->w_gr, a->w_gc};
    if (pf_dpe_check_shape(refs->ws, "w_scale", 2, shp_s) < 0)
        return -1;
    if (osig != Py_None) {
        if (!(refs->sig = pf_array_from_object(osig, PF_DT_F32, 0, "read_sigma")))
            return -1;
        int64_t shp[1] = {g_level};
        if (pf_dpe_check_shape(refs->sig, "read_sigma", 1, shp) < 0)
            return -1;
        const float *sv = (const float *)refs->sig->data;
        for (int l = 0; l < g_level; l++)
            if (!(sv[l] >= 0.0f) || !(sv[l] <= PF_READ_SIGMA_MAX)) {
                char b1[40], b2[40];
                PyErr_Format(PyExc_ValueError, "argument 'read_sigma': every sigma must be in [0, %s] (exp(sigma*z) "
                             "overflows float32 from about 15), got %s at level %d",
                             pf_fmt_double(b1, sizeof b1, PF_READ_SIGMA_MAX), pf_fmt_double(b2, sizeof b2, sv[l]), l);
                return -1;
            }
        a->read_sigma = sv;
    }
    a->w_levels = (const uint8_t *)refs->wl->data;
    a->w_scale = (const float *)refs->ws->data;
    a->rdac = rdac;
    a->g_level = g_level;
    a->HGS = HGS;
    a->LGS = LGS;
    a->vnoise = vnoise;
    a->seed = (uint64_t)seed;
    a->call = (uint32_t)call;
    a->n = n;
    return 0;
}

/* Runs the MVM with the GIL released; Ctrl-C stops it within one block of
 * work and raises KeyboardInterrupt (bind_interrupt.h). */
static int run_kernel(pf_dpe_args *a)
{
    pf_status st;
    pf_sigint_guard guard;
    do {
        a->cancel = pf_sigint_begin(&guard);
        Py_BEGIN_ALLOW_THREADS
        st = pf_dpe_mvm(a);
        Py_END_ALLOW_THREADS
    } while (pf_sigint_end(&guard, st == PF_EINTR) > 0);
    a->cancel = NULL;
    if (st != PF_OK) {
        pf_raise_status(st, "dpe_mvm");
        return -1;
    }
    return 0;
}

int pf_dpe_parse_mvm(PyObject *args, PyObject *kwds, pf_dpe_args *a, pf_dpe_refs *refs, PyObject **key)
{
    static char *kwlist[] = {"x_codes", "x_scale", "x_granule", "x_widths", "w_levels", "w_conductance", "w_scale",
                             "w_granule", "w_widths", "n", "rdac", "g_level", "radc", "HGS", "LGS", "read_sigma",
                             "vnoise", "seed", "call", "out", "item0", "weights_key", NULL};
    /* without a key pointer the call takes no weights_key: end the list early */
    static char *kwlist_cpu[sizeof kwlist / sizeof kwlist[0]];
    if (!kwlist_cpu[0]) {
        memcpy(kwlist_cpu, kwlist, sizeof kwlist);
        kwlist_cpu[sizeof kwlist / sizeof kwlist[0] - 2] = NULL;
    }
    PyObject *ox, *oxs, *oxg, *oxw, *owl, *owc, *ows, *owg, *oww, *oradc, *osig, *oout = Py_None, *okey = Py_None;
    long long n, seed_ll, item0 = 0;
    unsigned long call;
    int rdac, g_level;
    double HGS, LGS, vnoise;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, key ? "OOOOOOOOOLiiOddOdLk|OLO:dpe_mvm" : "OOOOOOOOOLiiOddOdLk|OL:dpe_mvm",
                                     key ? kwlist : kwlist_cpu, &ox, &oxs, &oxg, &oxw, &owl, &owc, &ows, &owg, &oww, &n, &rdac, &g_level,
                                     &oradc, &HGS, &LGS, &osig, &vnoise, &seed_ll, &call, &oout, &item0, &okey)) {
        pf_name_parse_error(args, kwds, "OOOOOOOOOLiiOddOdLk|OLO", kwlist);
        return -1;
    }
    if (key)
        *key = okey;
    if (item0 < 0) {
        PyErr_SetString(PyExc_ValueError, "argument 'item0': must be >= 0");
        return -1;
    }
    memset(a, 0, sizeof *a);
    a->x_kind = PF_DPE_X_CODES;
    a->x_item0 = item0;
    if ((a->sx = pf_dpe_parse_widths(oxw, "x_widths", a->x_max, a->x_weight)) < 0 ||
        pf_dpe_parse_pair(oxg, "x_granule", &a->x_qr, &a->x_qc) < 0)
        return -1;
    if (!(refs->xc = pf_array_from_object(ox, PF_DT_U8, 0, "x_codes")))
        return -1;
    if (refs->xc->ndim != 4 || refs->xc->shape[0] != a->sx) {
        PyErr_Format(PyExc_ValueError, "argument 'x_codes': expected shape (%d, N, R, K)", a->sx);
        return -1;
    }
    a->batch = refs->xc->shape[1];
    a->rows = refs->xc->shape[2];
    a->inner = refs->xc->shape[3];
    a->x_gr = pf_ceil_div(a->rows, a->x_qr);
    a->x_gc = pf_ceil_div(a->inner, a->x_qc);
    if (!(refs->xs = pf_array_from_object(oxs, PF_DT_F32, 0, "x_scale")))
        return -1;
    int64_t sshape[3] = {a->batch, a->x_gr, a->x_gc};
    if (pf_dpe_check_shape(refs->xs, "x_scale", 3, sshape) < 0)
        return -1;
    if (pf_dpe_parse_weights_and_device(a, refs, owl, owc, ows, owg, oww, n, rdac, g_level, oradc, HGS, LGS, osig,
                                        vnoise, seed_ll, call) < 0)
        return -1;
    Py_ssize_t oshape[3] = {(Py_ssize_t)a->batch, (Py_ssize_t)a->rows, (Py_ssize_t)a->cols};
    if (oout == Py_None) {
        if (!(refs->out = pf_array_new(PF_DT_F32, 3, oshape)))
            return -1;
    } else {
        if (!(refs->out = pf_array_from_object(oout, PF_DT_F32, 1, "out")))
            return -1;
        int64_t shp[3] = {a->batch, a->rows, a->cols};
        if (pf_dpe_check_shape(refs->out, "out", 3, shp) < 0)
            return -1;
    }
    a->x_codes = (const uint8_t *)refs->xc->data;
    a->x_scale = (const float *)refs->xs->data;
    a->out = (float *)refs->out->data;
    a->so_n = a->rows * a->cols;
    a->so_r = a->cols;
    a->so_p = 1;
    return 0;
}

PyObject *pf_dpe_mvm_call(PyObject *args, PyObject *kwds, pf_dpe_packed *packed)
{
    pf_dpe_args a;
    pf_dpe_refs refs = {0};
    PyObject *result = NULL;
    if (pf_dpe_parse_mvm(args, kwds, &a, &refs, NULL) == 0 && ((a.w_packed = packed), run_kernel(&a) == 0))
        result = Py_NewRef((PyObject *)refs.out);
    pf_dpe_refs_release(&refs);
    return result;
}

static PyObject *py_dpe_mvm(PyObject *self, PyObject *args, PyObject *kwds)
{
    (void)self;
    return pf_dpe_mvm_call(args, kwds, NULL);
}

int pf_dpe_parse_conv_pair(PyObject *obj, const char *argname, int64_t *a, int64_t *b, int64_t minimum)
{
    if (!PyArg_ParseTuple(obj, "LL", a, b)) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "argument '%s': expected a pair of ints", argname);
        return -1;
    }
    if (*a < minimum || *b < minimum || *a > INT32_MAX || *b > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "argument '%s': values must be in %lld..2**31-1", argname, (long long)minimum);
        return -1;
    }
    return 0;
}

int pf_dpe_parse_conv2d(PyObject *args, PyObject *kwds, pf_dpe_args *a, pf_dpe_refs *refs, pf_im2col *c,
                        int *want_dq, PyObject **key)
{
    static char *kwlist[] = {"image", "kernel_size", "stride", "padding", "dilation", "x_granule", "x_widths", "bfp",
                             "w_levels", "w_conductance", "w_scale", "w_granule", "w_widths", "n", "rdac", "g_level",
                             "radc", "HGS", "LGS", "read_sigma", "vnoise", "seed", "call", "return_dequant",
                             "weights_key", NULL};
    static char *kwlist_cpu[sizeof kwlist / sizeof kwlist[0]];
    if (!kwlist_cpu[0]) {
        memcpy(kwlist_cpu, kwlist, sizeof kwlist);
        kwlist_cpu[sizeof kwlist / sizeof kwlist[0] - 2] = NULL;
    }
    PyObject *oimg, *oks, *ost, *opad, *odil, *oxg, *oxw, *owl, *owc, *ows, *owg, *oww, *oradc, *osig;
    PyObject *okey = Py_None;
    long long n, seed_ll;
    unsigned long call;
    int rdac, g_level, bfp;
    double HGS, LGS, vnoise;
    *want_dq = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds,
                                     key ? "OOOOOOOpOOOOOLiiOddOdLk|pO:dpe_conv2d" : "OOOOOOOpOOOOOLiiOddOdLk|p:dpe_conv2d",
                                     key ? kwlist : kwlist_cpu, &oimg, &oks, &ost, &opad, &odil, &oxg, &oxw, &bfp, &owl, &owc, &ows, &owg,
                                     &oww, &n, &rdac, &g_level, &oradc, &HGS, &LGS, &osig, &vnoise, &seed_ll, &call,
                                     want_dq, &okey)) {
        pf_name_parse_error(args, kwds, "OOOOOOOpOOOOOLiiOddOdLk|pO", kwlist);
        return -1;
    }
    if (key)
        *key = okey;
    memset(a, 0, sizeof *a);
    memset(c, 0, sizeof *c);
    int widths[PF_MAX_SLICES];
    if ((a->sx = pf_dpe_parse_widths(oxw, "x_widths", a->x_max, a->x_weight)) < 0)
        return -1;
    for (int s2 = 0; s2 < a->sx; s2++)
        widths[a->sx - 1 - s2] = __builtin_ctz((unsigned)a->x_max[s2] + 1);
    if (pf_slice_method_init(&a->x_method, widths, a->sx) < 0) {
        PyErr_SetString(PyExc_ValueError, "argument 'x_widths': slices of 1..8 bits, 2..16 bits in total");
        return -1;
    }
    if (pf_dpe_parse_pair(oxg, "x_granule", &a->x_qr, &a->x_qc) < 0 ||
        pf_dpe_parse_conv_pair(oks, "kernel_size", &c->kh, &c->kw, 1) < 0 ||
        pf_dpe_parse_conv_pair(ost, "stride", &c->sh, &c->sw, 1) < 0 ||
        pf_dpe_parse_conv_pair(opad, "padding", &c->ph, &c->pw, 0) < 0 ||
        pf_dpe_parse_conv_pair(odil, "dilation", &c->dh, &c->dw, 1) < 0)
        return -1;
    if (!(refs->img = pf_array_from_object(oimg, PF_DT_F32, 0, "input")))
        return -1;
    if (refs->img->ndim != 4) {
        PyErr_Format(PyExc_ValueError, "argument 'input': expected a 4-D (N, C, H, W) tensor, got %d dimensions",
                     refs->img->ndim);
        return -1;
    }
    c->image = (const float *)refs->img->data;
    c->channels = refs->img->shape[1];
    c->height = refs->img->shape[2];
    c->width = refs->img->shape[3];
    if (c->height + 2 * c->ph < c->dh * (c->kh - 1) + 1 || c->width + 2 * c->pw < c->dw * (c->kw - 1) + 1) {
        PyErr_Format(PyExc_ValueError, "argument 'input': the (padded) image %lldx%lld is smaller than the dilated "
                     "kernel", (long long)(c->height + 2 * c->ph), (long long)(c->width + 2 * c->pw));
        return -1;
    }
    c->out_h = (c->height + 2 * c->ph - c->dh * (c->kh - 1) - 1) / c->sh + 1;
    c->out_w = (c->width + 2 * c->pw - c->dw * (c->kw - 1) - 1) / c->sw + 1;
    a->x_kind = PF_DPE_X_IM2COL;
    a->x_im2col = c;
    a->x_bfp = bfp;
    a->batch = refs->img->shape[0];
    if (__builtin_mul_overflow(c->out_h, c->out_w, &a->rows) || __builtin_mul_overflow(c->kh, c->kw, &a->inner) ||
        __builtin_mul_overflow(c->channels, a->inner, &a->inner)) {
        PyErr_SetString(PyExc_ValueError, "argument 'input': sizes overflow");
        return -1;
    }
    a->x_gr = pf_ceil_div(a->rows, a->x_qr);
    a->x_gc = pf_ceil_div(a->inner, a->x_qc);
    if (pf_dpe_parse_weights_and_device(a, refs, owl, owc, ows, owg, oww, n, rdac, g_level, oradc, HGS, LGS, osig,
                                        vnoise, seed_ll, call) < 0)
        return -1;
    Py_ssize_t gshape[3] = {(Py_ssize_t)a->batch, (Py_ssize_t)a->x_gr, (Py_ssize_t)a->x_gc};
    Py_ssize_t oshape[4] = {(Py_ssize_t)a->batch, (Py_ssize_t)a->cols, (Py_ssize_t)c->out_h, (Py_ssize_t)c->out_w};
    if (!(refs->gmax = pf_array_new(PF_DT_F32, 3, gshape)) || !(refs->out = pf_array_new(PF_DT_F32, 4, oshape)))
        return -1;
    if (*want_dq) {
        Py_ssize_t dshape[3] = {(Py_ssize_t)a->batch, (Py_ssize_t)a->rows, (Py_ssize_t)a->inner};
        if (!(refs->dq = pf_array_new(PF_DT_F32, 3, dshape)))
            return -1;
    }
    a->x_gran_max = (const float *)refs->gmax->data;
    a->out = (float *)refs->out->data;
    a->so_n = a->cols * a->rows;
    a->so_r = 1;
    a->so_p = a->rows;
    return 0;
}

PyObject *pf_dpe_conv2d_call(PyObject *args, PyObject *kwds, pf_dpe_packed *packed)
{
    pf_dpe_args a;
    pf_dpe_refs refs = {0};
    pf_im2col c;
    int want_dq;
    PyObject *result = NULL;
    if (pf_dpe_parse_conv2d(args, kwds, &a, &refs, &c, &want_dq, NULL) < 0)
        goto done;
    a.w_packed = packed;
    pf_status st;
    Py_BEGIN_ALLOW_THREADS
    st = pf_im2col_granule_max(&c, a.batch, a.x_qr, a.x_qc, (float *)refs.gmax->data);
    Py_END_ALLOW_THREADS
    if (st != PF_OK) {
        if (st == PF_EINVAL)
            PyErr_SetString(PyExc_ValueError, "argument 'input': contains NaN or infinity");
        else
            pf_raise_status(st, "dpe_conv2d");
        goto done;
    }
    if (run_kernel(&a) < 0)
        goto done;
    if (want_dq) {
        Py_BEGIN_ALLOW_THREADS
        pf_im2col_dequantize(&c, a.batch, a.x_qr, a.x_qc, a.x_gc, (const float *)refs.gmax->data, &a.x_method,
                             a.x_bfp, (float *)refs.dq->data);
        Py_END_ALLOW_THREADS
    }
    result = Py_BuildValue("(OO)", (PyObject *)refs.out, refs.dq ? (PyObject *)refs.dq : Py_None);
done:
    pf_dpe_refs_release(&refs);
    return result;
}

static PyObject *py_dpe_conv2d(PyObject *self, PyObject *args, PyObject *kwds)
{
    (void)self;
    return pf_dpe_conv2d_call(args, kwds, NULL);
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
    if (count < 0 || (size_t)count > PY_SSIZE_T_MAX / sizeof(float)) {
        PyErr_SetString(PyExc_ValueError, "argument 'count': must be in 0..PY_SSIZE_T_MAX/4");
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
    {"dpe_conv2d", (PyCFunction)(void (*)(void))py_dpe_conv2d, METH_VARARGS | METH_KEYWORDS,
     "dpe_conv2d(image, kernel_size, stride, padding, dilation, x_granule, x_widths, bfp, w_levels, w_conductance, "
     "w_scale, w_granule, w_widths, n, rdac, g_level, radc, HGS, LGS, read_sigma, vnoise, seed, call, "
     "return_dequant=False)\n--\n\n"
     "Convolution through the crossbar with implicit im2col: the unfolded input (N, Ho*Wo, C*kh*kw) is "
     "quantized and sliced on the fly and never stored. Returns (out (N, P, Ho, Wo), dequantized unfolded "
     "input or None)."},
    {"normals", py_normals, METH_VARARGS,
     "normals(seed, stream, call, idx0, count)\n--\n\nStandard normals of elements idx0.. of a Philox noise stream."},
    {"dpe_mvm", (PyCFunction)(void (*)(void))py_dpe_mvm, METH_VARARGS | METH_KEYWORDS,
     "dpe_mvm(x_codes, x_scale, x_granule, x_widths, w_levels, w_conductance, w_scale, w_granule, w_widths, n, rdac, "
     "g_level, radc, HGS, LGS, read_sigma, vnoise, seed, call, out=None, item0=0)\n--\n\n"
     "Fused DAC -> crossbar -> ADC product of sliced inputs and programmed weights (spec section 7)."},
    {NULL, NULL, 0, NULL},
};

int pf_bind_dpe_init(PyObject *module)
{
    if (PyModule_AddFunctions(module, dpe_methods) < 0 || pf_bind_packed_init(module) < 0)
        return -1;
    if (PyModule_AddIntConstant(module, "DEFAULT_SEED", PF_DEFAULT_SEED) < 0)
        return -1;
    if (PyModule_AddObject(module, "READ_VARIATION_MAX", PyFloat_FromDouble(PF_READ_SIGMA_MAX)) < 0 ||
        PyModule_AddObject(module, "NOISE_SIGMA_MAX", PyFloat_FromDouble(PF_REL_SIGMA_MAX)) < 0)
        return -1;
    return 0;
}
