/* Python bindings of the device physics kernels (physics.h):
 *
 *   irdrop_block(g, r_wire) -> geff
 *       g float64 (n, m) siemens; geff float64 (n, m): I_j = sum_i geff[i, j] V_i.
 *       max(g, 0) * r_wire <= IRDROP_MAX_GR (physics.h), else ValueError naming 'r_wire' (pyfastpim.physics
 *       renames it to its own 'wire_resistance' with pyfastpim.dpe._renamed).
 *   irdrop_layer(g, r_wire, block_rows, block_cols, pad_g) -> geff
 *       g float32 (S, K, P) programmed conductances; geff float32 (S, K, P).
 *   drift(g, seed, t, t0, nu_mean, nu_std, return_nu=False) -> out or (out, nu)
 *       g float32 (any shape); out float32, nu float64 of the same shape: nu as the drift formula uses it
 *       (a double), so out == (float)((double)g * exp(-nu * log(t / t0))) holds for the returned nu.
 */
#include <math.h>

#include "python/array.h"
#include "python/bind_interrupt.h"
#include "python/bindings.h"
#include "core/pf_common.h"
#include "core/physics.h"

/* A new float array shaped like g (dtype dt), or NULL with g released. */
static PfArray *output_like(PfArray *g, pf_dtype dt)
{
    PfArray *out = pf_array_new(dt, g->ndim, g->shape);
    if (!out)
        Py_DECREF(g);
    return out;
}

/* The result of a physics kernel: out, or NULL with the core's error (naming the argument). */
static PyObject *physics_result(pf_status st, PfArray *out, const char *what)
{
    if (st == PF_OK)
        return (PyObject *)out;
    Py_DECREF(out);
    return pf_raise_status(st, what);
}

static PyObject *py_irdrop_block(PyObject *self, PyObject *args, PyObject *kwds)
{
    PF_UNUSED(self);
    static char *kwlist[] = {"g", "r_wire", NULL};
    static const char fmt[] = "OO:irdrop_block";
    PyObject *g_obj, *r_obj;
    double r_wire;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, fmt, kwlist, &g_obj, &r_obj))
        return NULL;
    if (pf_as_double(r_obj, "r_wire", &r_wire) < 0)
        return NULL;
    PfArray *g = pf_array_from_object(g_obj, PF_DT_F64, 0, "g");
    if (!g)
        return NULL;
    if (g->ndim != 2 || g->shape[0] < 1 || g->shape[1] < 1) {
        PyErr_SetString(PyExc_ValueError, "argument 'g': expected a non-empty 2-D (rows, cols) array");
        Py_DECREF(g);
        return NULL;
    }
    PfArray *out = output_like(g, PF_DT_F64);
    if (!out)
        return NULL;
    pf_status st;
    const int64_t n = g->shape[0], m = g->shape[1];
    Py_BEGIN_ALLOW_THREADS
    st = pf_irdrop_block((const double *)g->data, n, m, m, r_wire, (double *)out->data, m);
    Py_END_ALLOW_THREADS
    Py_DECREF(g);
    return physics_result(st, out, "irdrop_block");
}

typedef struct {
    const PfArray *g, *out;
    int64_t block_rows, block_cols;
    double r_wire, pad_g;
} irdrop_run;

static pf_status irdrop_on_cpu(void *ctx, pf_cancel *cancel)
{
    const irdrop_run *r = ctx;
    return pf_irdrop_layer((const float *)r->g->data, r->g->shape[0], r->g->shape[1], r->g->shape[2], r->block_rows,
                           r->block_cols, r->r_wire, r->pad_g, (float *)r->out->data, cancel);
}

static PyObject *py_irdrop_layer(PyObject *self, PyObject *args, PyObject *kwds)
{
    PF_UNUSED(self);
    static char *kwlist[] = {"g", "r_wire", "block_rows", "block_cols", "pad_g", NULL};
    static const char fmt[] = "OOO&O&O&:irdrop_layer";
    PyObject *g_obj, *r_obj;
    double r_wire;
    /* ranges: pf_irdrop_layer's */
    pf_int_arg br = {.name = "block_rows", .min = INT64_MIN, .max = INT64_MAX};
    pf_int_arg bc = {.name = "block_cols", .min = INT64_MIN, .max = INT64_MAX};
    pf_real_arg pad_g = {"pad_g"};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, fmt, kwlist, &g_obj, &r_obj, pf_conv_int, &br, pf_conv_int, &bc,
                                     pf_conv_real, &pad_g))
        return NULL;
    if (pf_as_double(r_obj, "r_wire", &r_wire) < 0)
        return NULL;
    PfArray *g = pf_array_from_object(g_obj, PF_DT_F32, 0, "g");
    if (!g)
        return NULL;
    if (g->ndim != 3) {
        PyErr_Format(PyExc_ValueError, "argument 'g': expected 3-D (slices, rows, cols), got %d dimensions", g->ndim);
        Py_DECREF(g);
        return NULL;
    }
    PfArray *out = output_like(g, PF_DT_F32);
    if (!out)
        return NULL;
    irdrop_run r = {g, out, br.value, bc.value, r_wire, pad_g.value};
    pf_status st = pf_sigint_run(irdrop_on_cpu, &r); /* Ctrl-C stops the solve between blocks */
    Py_DECREF(g);
    return physics_result(st, out, "irdrop_layer");
}

static PyObject *py_drift(PyObject *self, PyObject *args, PyObject *kwds)
{
    PF_UNUSED(self);
    static char *kwlist[] = {"g", "seed", "t", "t0", "nu_mean", "nu_std", "return_nu", NULL};
    static const char fmt[] = "OO&O&O&O&O&|O&:drift";
    PyObject *g_obj;
    uint64_t seed;
    pf_real_arg t = {"t"}, t0 = {"t0"}, nu_mean = {"nu_mean"}, nu_std = {"nu_std"}; /* ranges: pf_drift's */
    pf_flag_arg rn = {.name = "return_nu"};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, fmt, kwlist, &g_obj, pf_conv_seed, &seed, pf_conv_real, &t,
                                     pf_conv_real, &t0, pf_conv_real, &nu_mean, pf_conv_real, &nu_std, pf_conv_flag, &rn))
        return NULL;
    const int return_nu = rn.value;
    PfArray *g = pf_array_from_object(g_obj, PF_DT_F32, 0, "g");
    if (!g)
        return NULL;
    PfArray *out = output_like(g, PF_DT_F32);
    if (!out)
        return NULL;
    PfArray *nu = NULL;
    if (return_nu && !(nu = pf_array_new(PF_DT_F64, g->ndim, g->shape))) {
        Py_DECREF(g);
        Py_DECREF(out);
        return NULL;
    }
    pf_status st;
    const int64_t count = (int64_t)pf_array_size(g);
    Py_BEGIN_ALLOW_THREADS
    st = pf_drift((const float *)g->data, count, 0, seed, t.value, t0.value, nu_mean.value, nu_std.value, (float *)out->data,
                  nu ? (double *)nu->data : NULL);
    Py_END_ALLOW_THREADS
    Py_DECREF(g);
    if (st != PF_OK)
        Py_XDECREF(nu);
    PyObject *res = physics_result(st, out, "drift");
    if (!res || !return_nu)
        return res;
    PyObject *pair = PyTuple_Pack(2, res, (PyObject *)nu);
    Py_DECREF(res);
    Py_DECREF(nu);
    return pair;
}

static PyMethodDef physics_methods[] = {
    {"irdrop_block", (PyCFunction)(void (*)(void))py_irdrop_block, METH_VARARGS | METH_KEYWORDS,
     "irdrop_block(g, r_wire)\n--\n\nEffective conductance (float64) of one crossbar block with wire resistance."},
    {"irdrop_layer", (PyCFunction)(void (*)(void))py_irdrop_layer, METH_VARARGS | METH_KEYWORDS,
     "irdrop_layer(g, r_wire, block_rows, block_cols, pad_g)\n--\n\nEffective conductances of every block of a "
     "programmed layer (S, K, P), float32."},
    {"drift", (PyCFunction)(void (*)(void))py_drift, METH_VARARGS | METH_KEYWORDS,
     "drift(g, seed, t, t0, nu_mean, nu_std, return_nu=False)\n--\n\nConductances after drift to time t."},
    {NULL, NULL, 0, NULL},
};

int pf_bind_physics_init(PyObject *module)
{
    if (PyModule_AddFunctions(module, physics_methods) < 0)
        return -1;
    if (PyModule_AddIntConstant(module, "IRDROP_MAX_BLOCK", PF_IRDROP_MAX_BLOCK) < 0)
        return -1;
    return PyModule_AddObject(module, "IRDROP_MAX_GR", PyFloat_FromDouble(PF_IRDROP_MAX_GR));
}
