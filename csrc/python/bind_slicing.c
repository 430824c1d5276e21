/* Python bindings of the slicing kernels (slicing.h): argument parsing and
 * validation only. Every error is a Python exception naming the argument.
 *
 *   slice_quantize(data, slice_method, paral_size, quant_gran=None, bw_e=None,
 *                  dequant=False, g_level=None, *, device=None)
 *       -> (codes, gran_max, gran_scale, gran_exp | None, dequant | None,
 *           levels | None, (qr', qc'))
 *   program_levels(codes, slice_method, g_level) -> levels
 *   program_conductance(levels, g_level, HGS, LGS, write_variation=0,
 *                       rate_stuck_HGS=0, rate_stuck_LGS=0, seed=DEFAULT_SEED, *,
 *                       device=None)
 *       -> conductance
 * device= (bind_device.h): None or "cpu", or an OpenCLDevice; the call runs
 * through that backend's table (core/backend.h).
 */
#include <math.h>
#include <string.h>

#include "python/array.h"
#include "python/bindings.h"
#include "core/pf_common.h"
#include "core/philox_noise.h"
#include "core/slicing.h"
#include "python/bind_device.h"
#include "python/bind_slicing.h"
#include "python/bind_interrupt.h"
#include "core/contract.h"

/* 0, or -1 with the exception of a failed core validator (errors.c). */
static int check(pf_status st) { return st == PF_OK ? 0 : (pf_raise_status(st, NULL), -1); }

/* Spec section 2: quant_gran (None, "per-row", "per-col", "per-matrix" or a
 * pair) rounded up to multiples of the block. */
static int resolve_granule(PyObject *quant_gran, const int64_t paral[2], int64_t rows, int64_t cols, int64_t out[2])
{
    int64_t g[2];
    if (quant_gran == NULL || quant_gran == Py_None) {
        g[0] = paral[0];
        g[1] = paral[1];
    } else if (PyUnicode_Check(quant_gran)) {
        const char *s = PyUnicode_AsUTF8(quant_gran);
        if (!s)
            return -1;
        if (strcmp(s, "per-matrix") == 0) {
            g[0] = rows;
            g[1] = cols;
        } else if (strcmp(s, "per-row") == 0) {
            g[0] = 1;
            g[1] = cols;
        } else if (strcmp(s, "per-col") == 0) {
            g[0] = rows;
            g[1] = 1;
        } else {
            PyErr_Format(PyExc_ValueError,
                         "argument 'quant_gran': expected None, 'per-matrix', 'per-row', 'per-col' or a pair of "
                         "positive ints, got '%s'", s);
            return -1;
        }
    } else {
        pf_pair_arg pair = {.name = "quant_gran", .min = 1};
        if (!pf_conv_pair(quant_gran, &pair))
            return -1;
        g[0] = pair.v[0];
        g[1] = pair.v[1];
    }
    for (int i = 0; i < 2; i++) {
        int64_t blocks = g[i] / paral[i] + (g[i] % paral[i] != 0);
        if (__builtin_mul_overflow(blocks, paral[i], &out[i])) {
            PyErr_SetString(PyExc_ValueError, "argument 'quant_gran': granule size overflows");
            return -1;
        }
    }
    return 0;
}

void pf_slice_call_clear(pf_slice_call *c)
{
    Py_CLEAR(c->x);
    Py_CLEAR(c->codes);
    Py_CLEAR(c->gmax);
    Py_CLEAR(c->gscale);
    Py_CLEAR(c->gexp);
    Py_CLEAR(c->dq);
    Py_CLEAR(c->levels);
}

int pf_slice_call_parse(PyObject *args, PyObject *kwds, pf_slice_call *c)
{
    static char *kwlist[] = {"data", "slice_method", "paral_size", "quant_gran", "bw_e", "dequant", "g_level", NULL};
    static const char fmt[] = "OO&O&|OOO&O:slice_quantize";
    PyObject *data_obj, *gran_obj = Py_None, *bw_e_obj = Py_None, *g_level_obj = Py_None;
    pf_method_arg method = {.name = "slice_method"};
    pf_pair_arg paral_arg = {.name = "paral_size", .min = 1};
    pf_flag_arg want_dequant = {.name = "dequant"};
    memset(c, 0, sizeof *c);
    if (!PyArg_ParseTupleAndKeywords(args, kwds, fmt, kwlist, &data_obj, pf_conv_slice_method, &method,
                                     pf_conv_pair, &paral_arg, &gran_obj, &bw_e_obj, pf_conv_flag, &want_dequant, &g_level_obj))
        return -1;
    c->sm = method.sm;
    const int64_t *paral = paral_arg.v;
    if (!pf_conv_bw_e(bw_e_obj, &c->bfp))
        return -1;
    if (g_level_obj != Py_None && (!pf_conv_g_level(g_level_obj, &c->g_level) ||
                                   check(pf_validate_levels_fit("g_level", &c->sm, c->g_level)) < 0))
        return -1;

    if (!(c->x = pf_array_from_object(data_obj, PF_DT_F32, 0, "data")))
        return -1;
    PfArray *x = c->x;
    if (x->ndim != 2 && x->ndim != 3) {
        PyErr_Format(PyExc_ValueError, "argument 'data': expected a 2-D (rows, cols) or 3-D (batch, rows, cols) "
                     "array, got %d dimensions", x->ndim);
        goto fail;
    }
    if (g_level_obj != Py_None && x->ndim != 2) {
        PyErr_Format(PyExc_ValueError, "argument 'data': weights must be 2-D (rows, cols), got %d dimensions", x->ndim);
        goto fail;
    }
    c->n = x->ndim == 3 ? x->shape[0] : 1;
    c->rows = x->shape[x->ndim - 2];
    c->cols = x->shape[x->ndim - 1];
    if (c->n == 0 || c->rows == 0 || c->cols == 0) {
        PyErr_SetString(PyExc_ValueError, "argument 'data': the array is empty");
        goto fail;
    }
    if (resolve_granule(gran_obj, paral, c->rows, c->cols, c->gran) < 0)
        goto fail;

    Py_ssize_t code_shape[4] = {c->sm.n_slices, c->n, c->rows, c->cols};
    /* ceil without a + b - 1, which overflows for huge granules */
    Py_ssize_t grid_shape[3] = {c->n, c->rows / c->gran[0] + (c->rows % c->gran[0] != 0),
                                c->cols / c->gran[1] + (c->cols % c->gran[1] != 0)};
    Py_ssize_t data_shape[3] = {c->n, c->rows, c->cols};
    if (!(c->codes = pf_array_new(PF_DT_U8, 4, code_shape)) || !(c->gmax = pf_array_new(PF_DT_F32, 3, grid_shape)) ||
        !(c->gscale = pf_array_new(PF_DT_F32, 3, grid_shape)))
        goto fail;
    if (c->bfp && !(c->gexp = pf_array_new(PF_DT_I32, 3, grid_shape)))
        goto fail;
    if (want_dequant.value && !(c->dq = pf_array_new(PF_DT_F32, 3, data_shape)))
        goto fail;
    if (c->g_level && !(c->levels = pf_array_new(PF_DT_U8, 4, code_shape)))
        goto fail;
    return 0;
fail:
    pf_slice_call_clear(c);
    return -1;
}

PyObject *pf_slice_call_finish(pf_slice_call *c, pf_status status, const char *what)
{
    PyObject *result = NULL;
    if (status != PF_OK) {
        pf_raise_status(status, what); /* NaN/inf data: PF_ENONFINITE naming 'data' */
    } else {
        result = Py_BuildValue("(OOOOOO(LL))", (PyObject *)c->codes, (PyObject *)c->gmax, (PyObject *)c->gscale,
                               c->gexp ? (PyObject *)c->gexp : Py_None, c->dq ? (PyObject *)c->dq : Py_None,
                               c->levels ? (PyObject *)c->levels : Py_None, (long long)c->gran[0],
                               (long long)c->gran[1]);
    }
    pf_slice_call_clear(c);
    return result;
}

/* Runs a parsed slice_quantize call on device d (lock held, GIL released); Ctrl-C stops the CPU's
 * slicing between bands / rows, OpenCL's between pieces of its kernels (bind_interrupt.h). */
typedef struct {
    pf_device *d;
    pf_slice_call *c;
} slice_run;

static pf_status slice_on_device(void *ctx, pf_cancel *cancel)
{
    const slice_run *r = ctx;
    pf_slice_call *c = r->c;
    return r->d->be->slice_quantize(r->d->dev, (const float *)c->x->data, c->n, c->rows, c->cols, c->gran[0],
                                    c->gran[1], &c->sm, c->bfp, (uint8_t *)c->codes->data, (float *)c->gmax->data,
                                    (float *)c->gscale->data, c->gexp ? (int32_t *)c->gexp->data : NULL,
                                    c->dq ? (float *)c->dq->data : NULL, c->g_level,
                                    c->levels ? (uint8_t *)c->levels->data : NULL, cancel);
}

static pf_status run_slice(pf_device *d, pf_slice_call *c)
{
    slice_run r = {d, c};
    return pf_sigint_run(slice_on_device, &r);
}

static PyObject *py_slice_quantize(PyObject *self, PyObject *args, PyObject *kwds)
{
    PF_UNUSED(self);
    pf_device d;
    PyObject *kw, *result = NULL;
    pf_slice_call c;
    if (pf_device_from_kwds(kwds, &kw, "slice_quantize", &d) < 0)
        return NULL;
    int rc = pf_slice_call_parse(args, kw, &c);
    Py_XDECREF(kw);
    if (rc == 0 && pf_device_lock(&d) < 0)
        pf_slice_call_clear(&c);
    else if (rc == 0) {
        pf_status status = run_slice(&d, &c);
        pf_device_unlock(&d);
        result = pf_slice_call_finish(&c, status, d.what);
    }
    pf_device_clear(&d);
    return result;
}

static PyObject *py_program_levels(PyObject *self, PyObject *args, PyObject *kwds)
{
    PF_UNUSED(self);
    static char *kwlist[] = {"codes", "slice_method", "g_level", NULL};
    static const char fmt[] = "OO&O&:program_levels";
    PyObject *codes_obj;
    pf_method_arg method = {.name = "slice_method"};
    int g_level;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, fmt, kwlist, &codes_obj, pf_conv_slice_method, &method,
                                     pf_conv_g_level, &g_level))
        return NULL;
    const pf_slice_method sm = method.sm;
    if (check(pf_validate_levels_fit("g_level", &sm, g_level)) < 0)
        return NULL;
    PfArray *codes = pf_array_from_object(codes_obj, PF_DT_U8, 0, "codes");
    if (!codes)
        return NULL;
    PfArray *levels = NULL;
    if (codes->ndim < 1 || codes->shape[0] != sm.n_slices) {
        PyErr_Format(PyExc_ValueError, "argument 'codes': expected a leading slice axis of %d (one per slice), got "
                     "shape with %d dimensions%s", sm.n_slices, codes->ndim,
                     codes->ndim >= 1 ? " and another leading size" : "");
        goto fail;
    }
    size_t cells = pf_array_size(codes) / (size_t)sm.n_slices;
    if (!(levels = pf_array_new(PF_DT_U8, codes->ndim, codes->shape)))
        goto fail;
    pf_status status;
    Py_BEGIN_ALLOW_THREADS
    status = pf_program_levels((const uint8_t *)codes->data, (int64_t)cells, &sm, g_level, (uint8_t *)levels->data);
    Py_END_ALLOW_THREADS
    if (status != PF_OK) {
        pf_raise_status(status, "program_levels");
        goto fail;
    }
    Py_DECREF(codes);
    return (PyObject *)levels;
fail:
    Py_XDECREF(levels);
    Py_DECREF(codes);
    return NULL;
}

int pf_program_call_parse(PyObject *args, PyObject *kwds, PfArray **levels_out, PfArray **out, pf_program_params *pp)
{
    static char *kwlist[] = {"levels", "g_level", "HGS", "LGS", "write_variation", "rate_stuck_HGS",
                             "rate_stuck_LGS", "seed", NULL};
    static const char fmt[] = "OO&O&O&|O&O&O&O&:program_conductance";
    PyObject *levels_obj;
    pf_program_params p = {0};
    pf_real_arg hgs = {"HGS"}, lgs = {"LGS"}, wv = {"write_variation"}, rh = {"rate_stuck_HGS"},
                rl = {"rate_stuck_LGS"}; /* defaults 0 */
    p.seed = PF_DEFAULT_SEED;
    *levels_out = *out = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, fmt, kwlist, &levels_obj, pf_conv_g_level, &p.g_level, pf_conv_real,
                                     &hgs, pf_conv_real, &lgs, pf_conv_real, &wv, pf_conv_real, &rh, pf_conv_real, &rl,
                                     pf_conv_seed, &p.seed))
        return -1;
    p.hgs = hgs.value, p.lgs = lgs.value, p.write_variation = wv.value;
    p.rate_stuck_hgs = rh.value, p.rate_stuck_lgs = rl.value;
    if (check(pf_validate_program_params(&p)) < 0)
        return -1;
    PfArray *levels = pf_array_from_object(levels_obj, PF_DT_U8, 0, "levels");
    if (!levels)
        return -1;
    if (levels->ndim != 3) {
        PyErr_Format(PyExc_ValueError, "argument 'levels': expected 3-D (slices, rows, cols), got %d dimensions",
                     levels->ndim);
        Py_DECREF(levels);
        return -1;
    }
    PfArray *g = pf_array_new(PF_DT_F32, 3, levels->shape);
    if (!g) {
        Py_DECREF(levels);
        return -1;
    }
    *levels_out = levels;
    *out = g;
    *pp = p;
    return 0;
}

/* Runs a parsed program_conductance call on device d (lock held, GIL released); Ctrl-C stops it
 * between rows of cells (CPU) or pieces (OpenCL) (bind_interrupt.h). */
typedef struct {
    pf_device *d;
    const PfArray *levels;
    const pf_program_params *p;
    PfArray *g;
} program_run;

static pf_status program_on_device(void *ctx, pf_cancel *cancel)
{
    const program_run *r = ctx;
    return r->d->be->program_conductance(r->d->dev, (const uint8_t *)r->levels->data, r->levels->shape[0],
                                         r->levels->shape[1], r->levels->shape[2], r->p, (float *)r->g->data,
                                         cancel);
}

static pf_status run_program(pf_device *d, const PfArray *levels, const pf_program_params *p, PfArray *g)
{
    program_run r = {d, levels, p, g};
    return pf_sigint_run(program_on_device, &r);
}

static PyObject *py_program_conductance(PyObject *self, PyObject *args, PyObject *kwds)
{
    PF_UNUSED(self);
    pf_device d;
    PyObject *kw;
    PfArray *levels, *g = NULL;
    pf_program_params p;
    if (pf_device_from_kwds(kwds, &kw, "program_conductance", &d) < 0)
        return NULL;
    int rc = pf_program_call_parse(args, kw, &levels, &g, &p);
    Py_XDECREF(kw);
    if (rc == 0 && pf_device_lock(&d) < 0) {
        Py_CLEAR(g);
    } else if (rc == 0) {
        pf_status st = run_program(&d, levels, &p, g);
        pf_device_unlock(&d);
        if (st != PF_OK) {
            pf_raise_status(st, d.what); /* PF_EINTR: the signal handler's exception (or KeyboardInterrupt) */
            Py_CLEAR(g);
        }
    }
    if (rc == 0)
        Py_DECREF(levels);
    pf_device_clear(&d);
    return (PyObject *)g;
}

/* check_conductance_range(HGS, LGS, g_level): None, or the contract's ValueError naming the argument. */
static PyObject *py_check_conductance_range(PyObject *self, PyObject *args, PyObject *kwds)
{
    PF_UNUSED(self);
    static char *kwlist[] = {"HGS", "LGS", "g_level", NULL};
    static const char fmt[] = "O&O&O&:check_conductance_range";
    pf_real_arg hgs = {"HGS"}, lgs = {"LGS"};
    int g_level;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, fmt, kwlist, pf_conv_real, &hgs, pf_conv_real, &lgs,
                                     pf_conv_g_level, &g_level))
        return NULL;
    if (check(pf_validate_conductance_range(hgs.value, lgs.value, g_level)) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* check_vread(vread, HGS, LGS, g_level, rdac): None, or the contract's ValueError naming vread. */
static PyObject *py_check_vread(PyObject *self, PyObject *args, PyObject *kwds)
{
    PF_UNUSED(self);
    static char *kwlist[] = {"vread", "HGS", "LGS", "g_level", "rdac", NULL};
    static const char fmt[] = "O&O&O&O&O&:check_vread";
    pf_real_arg vread = {"vread"}, hgs = {"HGS"}, lgs = {"LGS"};
    int g_level, rdac;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, fmt, kwlist, pf_conv_real, &vread, pf_conv_real, &hgs, pf_conv_real,
                                     &lgs, pf_conv_g_level, &g_level, pf_conv_rdac, &rdac))
        return NULL;
    /* the reference current needs a valid range (a NaN or infinite HGS made it NaN / inf unnoticed) */
    if (check(pf_validate_conductance_range(hgs.value, lgs.value, g_level)) < 0 ||
        check(pf_validate_vread(vread.value, hgs.value, lgs.value, g_level, rdac)) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef slicing_methods[] = {
    {"slice_quantize", (PyCFunction)(void (*)(void))py_slice_quantize, METH_VARARGS | METH_KEYWORDS,
     "slice_quantize(data, slice_method, paral_size, quant_gran=None, bw_e=None, dequant=False, g_level=None, *, "
     "device=None)\n--\n\n"
     "Quantize and bit-slice data (spec 1-5; weights also programmed to levels, spec 6, when g_level is given).\n"
     "Returns (codes, gran_max, gran_scale, gran_exp|None, dequant|None, levels|None, (qr, qc)). device: None or "
     "'cpu' (the CPU), or an OpenCLDevice (that device; bit-identical results)."},
    {"program_levels", (PyCFunction)(void (*)(void))py_program_levels, METH_VARARGS | METH_KEYWORDS,
     "program_levels(codes, slice_method, g_level)\n--\n\nConductance levels of slice codes (spec 6)."},
    {"program_conductance", (PyCFunction)(void (*)(void))py_program_conductance, METH_VARARGS | METH_KEYWORDS,
     "program_conductance(levels, g_level, HGS, LGS, write_variation=0, rate_stuck_HGS=0, rate_stuck_LGS=0, "
     "seed=None, *, device=None)\n--\n\nProgrammed conductances in siemens with write variation and stuck-at "
     "faults (spec 6), on device (None or 'cpu': the CPU; an OpenCLDevice: that device, same results)."},
    {"check_conductance_range", (PyCFunction)(void (*)(void))py_check_conductance_range, METH_VARARGS | METH_KEYWORDS,
     "check_conductance_range(HGS, LGS, g_level)\n--\n\nRaises the contract's ValueError (naming HGS, LGS or "
     "g_level) unless 0 <= LGS < HGS <= CONDUCTANCE_MAX and the level spacing (HGS - LGS) / (g_level - 1) is a "
     "normal float32 of at least HGS * 2**-22 (csrc/core/contract.c)."},
    {"check_vread", (PyCFunction)(void (*)(void))py_check_vread, METH_VARARGS | METH_KEYWORDS,
     "check_vread(vread, HGS, LGS, g_level, rdac)\n--\n\nRaises check_conductance_range's ValueError for HGS, "
     "LGS or g_level, and the contract's ValueError naming vread unless "
     "0 < vread <= VREAD_MAX and the ADC reference current (HGS - LGS) * vread * n of the tallest crossbar the "
     "exactness bound allows is a finite float32 (csrc/core/contract.c)."},
    {NULL, NULL, 0, NULL},
};

int pf_bind_slicing_init(PyObject *module)
{
    if (PyModule_AddFunctions(module, slicing_methods) < 0)
        return -1;
    if (PyModule_AddObject(module, "DEFAULT_SEED", PyLong_FromUnsignedLongLong(PF_DEFAULT_SEED)) < 0)
        return -1;
    if (PyModule_AddIntConstant(module, "SLICE_MAX_TOTAL_BITS", PF_MAX_TOTAL_BITS) < 0 ||
        PyModule_AddIntConstant(module, "SLICE_MAX_WIDTH", PF_MAX_SLICE_WIDTH) < 0)
        return -1;
    if (PyModule_AddObject(module, "CONDUCTANCE_MAX", PyFloat_FromDouble(PF_CONDUCTANCE_MAX)) < 0 ||
        PyModule_AddObject(module, "NORMAL_ABS_MAX", PyFloat_FromDouble(PF_NORMAL_ABS_MAX)) < 0 ||
        PyModule_AddObject(module, "VREAD_MAX", PyFloat_FromDouble(PF_VREAD_MAX)) < 0)
        return -1;
    return 0;
}
