/* Python binding of the fused DPE MVM: validation and argument parsing only;
 * the kernel (dpe.c) sees plain pointers. */
#include "python/array.h"
#include "python/bind_device.h"
#include "python/bind_dpe.h"
#include "python/bind_interrupt.h"
#include "python/bindings.h"
#include "core/contract.h"
#include "core/dpe.h"
#include "core/memory.h"
#include "core/philox_noise.h"

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

/* A converted slice method as the kernel's per-slice maxima and weights (least significant first). */
static int method_slices(const pf_slice_method *sm, int *m, int64_t *w)
{
    for (int s = 0; s < sm->n_slices; s++) {
        m[s] = sm->max_code[s];
        w[s] = sm->weight[s];
    }
    return sm->n_slices;
}

void pf_dpe_device_init(pf_dpe_device_args *d)
{
    memset(d, 0, sizeof *d);
    d->w_granule.name = "w_granule";
    d->w_granule.min = 1;
    d->w_widths.name = "w_widths";
    d->w_widths.min_total_bits = 1;
    d->radc.name = "radc";
    d->n = (pf_int_arg){.name = "n", .min = INT64_MIN, .max = INT64_MAX}; /* its range: pf_validate_dpe_args */
    d->HGS.name = "HGS";
    d->LGS.name = "LGS";
    d->vnoise.name = "vnoise";
}

/* Weights and device arguments shared by every entry point; a->inner must be
 * set. Returns 0 or -1 with an exception naming the argument. */
int pf_dpe_parse_weights_and_device(pf_dpe_args *a, pf_dpe_refs *refs, const pf_dpe_device_args *d)
{
    a->sw = method_slices(&d->w_widths.sm, a->w_max, a->w_weight);
    a->w_qr = d->w_granule.v[0];
    a->w_qc = d->w_granule.v[1];
    if (d->radc.count != 0 && d->radc.count != a->sw) {
        PyErr_Format(PyExc_ValueError, "argument 'radc': %d values needed (one per weight slice), got %d", a->sw,
                     d->radc.count);
        return -1;
    }
    for (int j = 0; j < a->sw; j++)
        a->radc[j] = d->radc.v[d->radc.count ? j : 0];
    a->rdac = d->rdac;
    a->g_level = d->g_level;
    a->HGS = d->HGS.value;
    a->LGS = d->LGS.value;
    a->vnoise = d->vnoise.value;
    a->seed = d->seed;
    a->call = (uint32_t)d->call;
    a->n = d->n.value;
    /* the scalar contract first (before any array conversion), the read sigmas below */
    pf_status st = pf_validate_dpe_args(a);
    if (st != PF_OK)
        return pf_raise_status(st, "dpe_mvm"), -1;
    if (!(refs->wl = pf_array_from_object(d->owl, PF_DT_U8, 0, "w_levels")))
        return -1;
    int64_t shp_l[3] = {a->sw, a->inner, -1};
    if (pf_dpe_check_shape(refs->wl, "w_levels", 3, shp_l) < 0)
        return -1;
    a->cols = refs->wl->shape[2];
    a->w_gr = pf_ceil_div(a->inner, a->w_qr);
    a->w_gc = pf_ceil_div(a->cols, a->w_qc);
    if (d->owc != Py_None) {
        if (!(refs->wc = pf_array_from_object(d->owc, PF_DT_F32, 0, "w_conductance")))
            return -1;
        int64_t shp[3] = {a->sw, a->inner, a->cols};
        if (pf_dpe_check_shape(refs->wc, "w_conductance", 3, shp) < 0)
            return -1;
        a->w_conductance = (const float *)refs->wc->data;
    }
    if (!(refs->ws = pf_array_from_object(d->ows, PF_DT_F32, 0, "w_scale")))
        return -1;
    int64_t shp_s[2] = {a->w_gr, a->w_gc};
    if (pf_dpe_check_shape(refs->ws, "w_scale", 2, shp_s) < 0)
        return -1;
    /* scales come from quantization and are finite: a NaN's payload would reach the output (checked here, the
     * one place user scales enter: dpe_pack keeps them, OpenCL uploads them before its backend runs) */
    if ((st = pf_validate_finite("w_scale", "scales", (const float *)refs->ws->data, a->w_gr * a->w_gc)) != PF_OK)
        return pf_raise_status(st, "dpe_mvm"), -1;
    if (d->osig != Py_None) {
        if (!(refs->sig = pf_array_from_object(d->osig, PF_DT_F32, 0, "read_sigma")))
            return -1;
        int64_t shp[1] = {a->g_level};
        if (pf_dpe_check_shape(refs->sig, "read_sigma", 1, shp) < 0)
            return -1;
        a->read_sigma = (const float *)refs->sig->data;
        if ((st = pf_validate_read_sigma("read_sigma", a->read_sigma, a->g_level)) != PF_OK)
            return pf_raise_status(st, "dpe_mvm"), -1;
    }
    a->w_levels = (const uint8_t *)refs->wl->data;
    a->w_scale = (const float *)refs->ws->data;
    return 0;
}

typedef struct {
    pf_device *d;
    pf_dpe_args *a;
    const void *w;
} mvm_run;

static pf_status mvm_on_device(void *ctx, pf_cancel *cancel)
{
    mvm_run *r = ctx;
    r->a->cancel = cancel;
    return r->d->be->dpe_mvm(r->d->dev, r->a, r->w);
}

/* Runs the MVM on device d with the GIL released (its lock held, the resident weights of key;
 * bind_device.h); Ctrl-C stops it within one block of work and raises KeyboardInterrupt
 * (bind_interrupt.h). 0, or -1 with an exception. */
static int run_mvm(pf_device *d, pf_dpe_args *a, const pf_dpe_refs *refs, PyObject *key)
{
    if (key != Py_None && d->handle && PyObject_Hash(key) == -1)
        return -1; /* TypeError: unhashable weights_key (checked before the lock: hashing may run Python code) */
    if (pf_device_lock(d) < 0)
        return -1;
    const void *w;
    int transient;
    if (pf_device_weights(d, key, a, refs, &w, &transient) < 0) {
        pf_device_unlock(d);
        return -1;
    }
    mvm_run r = {d, a, w};
    pf_status st = pf_sigint_run(mvm_on_device, &r);
    a->cancel = NULL;
    pf_device_weights_done(d, w, transient);
    pf_device_unlock(d);
    return st == PF_OK ? 0 : (pf_raise_status(st, d->what), -1); /* PF_EINTR: the signal handler's exception */
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
    static const char fmt[] = "OOO&O&OOOO&O&O&O&O&O&O&O&OO&O&O&|OO&O:dpe_mvm";
    PyObject *ox, *oxs, *oout = Py_None, *okey = Py_None;
    pf_int_arg item0 = {.name = "item0", .min = INT64_MIN, .max = INT64_MAX}; /* its range: the core's */
    pf_pair_arg xg = {.name = "x_granule", .min = 1};
    pf_method_arg xw = {.name = "x_widths", .min_total_bits = 1};
    pf_dpe_device_args d;
    pf_dpe_device_init(&d);
    char fmt_cpu[sizeof fmt];
    memcpy(fmt_cpu, fmt, sizeof fmt);
    if (!key) /* drop the trailing weights_key 'O' */
        memmove(strrchr(fmt_cpu, ':') - 1, strrchr(fmt_cpu, ':'), strlen(strrchr(fmt_cpu, ':')) + 1);
    if (!PyArg_ParseTupleAndKeywords(args, kwds, fmt_cpu, key ? kwlist : kwlist_cpu, &ox, &oxs, pf_conv_pair, &xg,
                                     pf_conv_slice_method, &xw, &d.owl, &d.owc, &d.ows, pf_conv_pair, &d.w_granule,
                                     pf_conv_slice_method, &d.w_widths, pf_conv_int, &d.n, pf_conv_rdac, &d.rdac,
                                     pf_conv_g_level, &d.g_level, pf_conv_resolutions, &d.radc, pf_conv_real, &d.HGS,
                                     pf_conv_real, &d.LGS, &d.osig, pf_conv_real, &d.vnoise, pf_conv_seed, &d.seed,
                                     pf_conv_call, &d.call, &oout, pf_conv_int, &item0, &okey))
        return -1;
    if (key)
        *key = okey;
    memset(a, 0, sizeof *a);
    a->x_kind = PF_DPE_X_CODES;
    a->x_item0 = item0.value;
    a->sx = method_slices(&xw.sm, a->x_max, a->x_weight);
    a->x_qr = xg.v[0];
    a->x_qc = xg.v[1];
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
    pf_status st = pf_validate_finite("x_scale", "scales", (const float *)refs->xs->data, a->batch * a->x_gr * a->x_gc);
    if (st != PF_OK)
        return pf_raise_status(st, "dpe_mvm"), -1;
    if (pf_dpe_parse_weights_and_device(a, refs, &d) < 0)
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

/* dpe_mvm on device d; packed (CPU only): weights packed once, and no weights_key. */
static PyObject *mvm_call(PyObject *args, PyObject *kwds, pf_dpe_packed *packed, pf_device *d)
{
    pf_dpe_args a;
    pf_dpe_refs refs = {0};
    PyObject *key = Py_None, *result = NULL;
    if (pf_dpe_parse_mvm(args, kwds, &a, &refs, packed ? NULL : &key) == 0 &&
        ((a.w_packed = packed), run_mvm(d, &a, &refs, key) == 0))
        result = Py_NewRef((PyObject *)refs.out);
    pf_dpe_refs_release(&refs);
    return result;
}

/* dpe_conv2d on device d: granule max, the MVM with the implicit im2col input, the optional
 * dequantized unfolded input, each through d's backend table. */
static PyObject *conv2d_call(PyObject *args, PyObject *kwds, pf_dpe_packed *packed, pf_device *d)
{
    pf_dpe_args a;
    pf_dpe_refs refs = {0};
    pf_im2col c;
    int want_dq, st;
    PyObject *key = Py_None, *result = NULL;
    if (pf_dpe_parse_conv2d(args, kwds, &a, &refs, &c, &want_dq, packed ? NULL : &key) < 0)
        goto done;
    a.w_packed = packed;
    PF_DEVICE_CALL(d, st, d->be->im2col_granule_max(d->dev, &c, a.batch, a.x_qr, a.x_qc, (float *)refs.gmax->data));
    if (st != PF_OK || run_mvm(d, &a, &refs, key) < 0)
        goto done;
    if (want_dq) {
        PF_DEVICE_CALL(d, st, d->be->im2col_dequantize(d->dev, &c, a.batch, a.x_qr, a.x_qc, a.x_gc,
                                                       (const float *)refs.gmax->data, &a.x_method, a.x_bfp,
                                                       (float *)refs.dq->data));
        if (st != PF_OK)
            goto done;
    }
    result = Py_BuildValue("(OO)", (PyObject *)refs.out, refs.dq ? (PyObject *)refs.dq : Py_None);
done:
    pf_dpe_refs_release(&refs);
    return result;
}

/* An op binding taking device=: `fn` on the device named by kwds, with the rest of kwds. */
static PyObject *on_device(PyObject *args, PyObject *kwds, const char *op,
                           PyObject *(*fn)(PyObject *, PyObject *, pf_dpe_packed *, pf_device *))
{
    pf_device d;
    PyObject *kw;
    if (pf_device_from_kwds(kwds, &kw, op, &d) < 0)
        return NULL;
    PyObject *result = fn(args, kw, NULL, &d);
    Py_XDECREF(kw);
    pf_device_clear(&d);
    return result;
}

PyObject *pf_dpe_mvm_call(PyObject *args, PyObject *kwds, pf_dpe_packed *packed)
{
    pf_device cpu;
    pf_device_resolve(NULL, "dpe_mvm", &cpu); /* cannot fail */
    return mvm_call(args, kwds, packed, &cpu);
}

static PyObject *py_dpe_mvm(PyObject *self, PyObject *args, PyObject *kwds)
{
    (void)self;
    return on_device(args, kwds, "dpe_mvm", mvm_call);
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
    static const char fmt[] = "OO&O&O&O&O&O&O&OOOO&O&O&O&O&O&O&O&OO&O&O&|O&O:dpe_conv2d";
    PyObject *oimg, *okey = Py_None;
    pf_flag_arg bfp = {.name = "bfp"}, dq = {.name = "return_dequant"};
    pf_pair_arg ks = {.name = "kernel_size", .min = 1, .max = INT32_MAX};
    pf_pair_arg st = {.name = "stride", .min = 1, .max = INT32_MAX};
    pf_pair_arg pad = {.name = "padding", .min = 0, .max = INT32_MAX};
    pf_pair_arg dil = {.name = "dilation", .min = 1, .max = INT32_MAX};
    pf_pair_arg xg = {.name = "x_granule", .min = 1};
    pf_method_arg xw = {.name = "x_widths"};
    pf_dpe_device_args d;
    pf_dpe_device_init(&d);
    char fmt_cpu[sizeof fmt];
    memcpy(fmt_cpu, fmt, sizeof fmt);
    if (!key)
        memmove(strrchr(fmt_cpu, ':') - 1, strrchr(fmt_cpu, ':'), strlen(strrchr(fmt_cpu, ':')) + 1);
    *want_dq = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, fmt_cpu, key ? kwlist : kwlist_cpu, &oimg, pf_conv_pair, &ks,
                                     pf_conv_pair, &st, pf_conv_pair, &pad, pf_conv_pair, &dil, pf_conv_pair, &xg,
                                     pf_conv_slice_method, &xw, pf_conv_flag, &bfp, &d.owl, &d.owc, &d.ows, pf_conv_pair,
                                     &d.w_granule, pf_conv_slice_method, &d.w_widths, pf_conv_int, &d.n, pf_conv_rdac,
                                     &d.rdac, pf_conv_g_level, &d.g_level, pf_conv_resolutions, &d.radc, pf_conv_real,
                                     &d.HGS, pf_conv_real, &d.LGS, &d.osig, pf_conv_real, &d.vnoise, pf_conv_seed,
                                     &d.seed, pf_conv_call, &d.call, pf_conv_flag, &dq, &okey))
        return -1;
    *want_dq = dq.value;
    if (key)
        *key = okey;
    memset(a, 0, sizeof *a);
    memset(c, 0, sizeof *c);
    a->sx = method_slices(&xw.sm, a->x_max, a->x_weight);
    a->x_method = xw.sm;
    a->x_qr = xg.v[0];
    a->x_qc = xg.v[1];
    c->kh = ks.v[0], c->kw = ks.v[1], c->sh = st.v[0], c->sw = st.v[1];
    c->ph = pad.v[0], c->pw = pad.v[1], c->dh = dil.v[0], c->dw = dil.v[1];
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
    a->x_bfp = bfp.value;
    a->batch = refs->img->shape[0];
    if (__builtin_mul_overflow(c->out_h, c->out_w, &a->rows) || __builtin_mul_overflow(c->kh, c->kw, &a->inner) ||
        __builtin_mul_overflow(c->channels, a->inner, &a->inner)) {
        PyErr_SetString(PyExc_ValueError, "argument 'input': sizes overflow");
        return -1;
    }
    a->x_gr = pf_ceil_div(a->rows, a->x_qr);
    a->x_gc = pf_ceil_div(a->inner, a->x_qc);
    if (pf_dpe_parse_weights_and_device(a, refs, &d) < 0)
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
    pf_device cpu;
    pf_device_resolve(NULL, "dpe_conv2d", &cpu); /* cannot fail */
    return conv2d_call(args, kwds, packed, &cpu);
}

int pf_normals_parse(PyObject *args, pf_normals_call *c)
{
    static const char fmt[] = "O&O&O&OO&:normals";
    PyObject *oidx0;
    pf_int_arg stream = {.name = "stream", .min = 0, .max = UINT32_MAX};
    pf_int_arg call = {.name = "call", .min = 0, .max = UINT32_MAX};
    pf_int_arg count = {.name = "count", .min = 0, .max = (int64_t)(PY_SSIZE_T_MAX / sizeof(float))};
    memset(c, 0, sizeof *c);
    if (!PyArg_ParseTuple(args, fmt, pf_conv_seed, &c->seed, pf_conv_int, &stream, pf_conv_int, &call, &oidx0,
                          pf_conv_int, &count) ||
        pf_as_uint64(oidx0, "idx0", &c->idx0) < 0)
        return -1;
    if (count.value > 0 && c->idx0 > UINT64_MAX - (uint64_t)(count.value - 1)) {
        PyErr_Format(PyExc_ValueError, "argument 'idx0': elements idx0 .. idx0 + count - 1 must be below 2**64 (the "
                     "generator's counter does not wrap), got idx0 = %llu with count = %lld",
                     (unsigned long long)c->idx0, (long long)count.value);
        return -1;
    }
    c->stream = (unsigned int)stream.value;
    c->call = (unsigned int)call.value;
    c->count = (Py_ssize_t)count.value;
    c->out = pf_array_new(PF_DT_F32, 1, &c->count);
    return c->out ? 0 : -1;
}

static PyObject *py_dpe_conv2d(PyObject *self, PyObject *args, PyObject *kwds)
{
    (void)self;
    return on_device(args, kwds, "dpe_conv2d", conv2d_call);
}

/* normals(seed, stream, call, idx0, count, device=None): the noise generator, for statistical
 * tests and cross-device checks. */
static PyObject *py_normals(PyObject *self, PyObject *args, PyObject *kwds)
{
    (void)self;
    pf_device d;
    PyObject *kw;
    pf_normals_call c;
    if (pf_device_from_kwds(kwds, &kw, "normals", &d) < 0)
        return NULL;
    int rc = -1, st;
    if (kw && PyDict_GET_SIZE(kw) > 0)
        PyErr_SetString(PyExc_TypeError, "normals() takes no keyword arguments but 'device'");
    else
        rc = pf_normals_parse(args, &c);
    Py_XDECREF(kw);
    if (rc == 0) {
        PF_DEVICE_CALL(&d, st, d.be->normals(d.dev, c.seed, c.stream, c.call, c.idx0, c.count, (float *)c.out->data));
        if (st != PF_OK)
            Py_CLEAR(c.out);
    }
    pf_device_clear(&d);
    return rc == 0 ? (PyObject *)c.out : NULL;
}

static PyMethodDef dpe_methods[] = {
    {"dpe_conv2d", (PyCFunction)(void (*)(void))py_dpe_conv2d, METH_VARARGS | METH_KEYWORDS,
     "dpe_conv2d(image, kernel_size, stride, padding, dilation, x_granule, x_widths, bfp, w_levels, w_conductance, "
     "w_scale, w_granule, w_widths, n, rdac, g_level, radc, HGS, LGS, read_sigma, vnoise, seed, call, "
     "return_dequant=False, weights_key=None, *, device=None)\n--\n\n"
     "Convolution through the crossbar with implicit im2col: the unfolded input (N, Ho*Wo, C*kh*kw) is "
     "quantized and sliced on the fly and never stored. Returns (out (N, P, Ho, Wo), dequantized unfolded "
     "input or None). device: None or 'cpu' (the CPU), or an OpenCLDevice (every stage on that device); "
     "weights_key (OpenCL only) as for dpe_mvm."},
    {"normals", (PyCFunction)(void (*)(void))py_normals, METH_VARARGS | METH_KEYWORDS,
     "normals(seed, stream, call, idx0, count, *, device=None)\n--\n\nStandard normals of elements idx0.. of a "
     "Philox noise stream, drawn on device (None or 'cpu': the CPU; an OpenCLDevice: that device)."},
    {"dpe_mvm", (PyCFunction)(void (*)(void))py_dpe_mvm, METH_VARARGS | METH_KEYWORDS,
     "dpe_mvm(x_codes, x_scale, x_granule, x_widths, w_levels, w_conductance, w_scale, w_granule, w_widths, n, rdac, "
     "g_level, radc, HGS, LGS, read_sigma, vnoise, seed, call, out=None, item0=0, weights_key=None, *, "
     "device=None)\n--\n\n"
     "Fused DAC -> crossbar -> ADC product of sliced inputs and programmed weights (spec section 7). device: "
     "None or 'cpu' (the CPU), or an OpenCLDevice (that device). weights_key (OpenCL only; a ValueError on the "
     "CPU), hashable, e.g. (id(sliced), sliced._version), keeps the weights resident on the device between "
     "calls; an entry whose key changes is released."},
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
