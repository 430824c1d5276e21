/* Python bindings of the device physics kernels (physics.h):
 *
 *   irdrop_block(g, r_wire) -> geff
 *       g float64 (n, m) siemens; geff float64 (n, m): I_j = sum_i geff[i, j] V_i.
 *   irdrop_layer(g, r_wire, block_rows, block_cols, pad_g) -> geff
 *       g float32 (S, K, P) programmed conductances; geff float32 (S, K, P).
 *   drift(g, seed, t, t0, nu_mean, nu_std, return_nu=False) -> out or (out, nu)
 *       g float32 (any shape); out, nu float32 of the same shape.
 */
#include <math.h>

#include "python/array.h"
#include "python/bindings.h"
#include "core/pf_common.h"
#include "core/physics.h"

static int positive_finite(double v, const char *name)
{
    if (!(v > 0.0) || !isfinite(v)) {
        char b[40];
        PyErr_Format(PyExc_ValueError, "argument '%s': must be finite and > 0, got %s", name,
                     pf_fmt_double(b, sizeof b, v));
        return -1;
    }
    return 0;
}

static PyObject *py_irdrop_block(PyObject *self, PyObject *args, PyObject *kwds)
{
    PF_UNUSED(self);
    static char *kwlist[] = {"g", "r_wire", NULL};
    PyObject *g_obj;
    double r_wire;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "Od:irdrop_block", kwlist, &g_obj, &r_wire))
        return NULL;
    if (positive_finite(r_wire, "r_wire") < 0)
        return NULL;
    PfArray *g = pf_array_from_object(g_obj, PF_DT_F64, 0, "g");
    if (!g)
        return NULL;
    if (g->ndim != 2 || g->shape[0] < 1 || g->shape[1] < 1) {
        PyErr_SetString(PyExc_ValueError, "argument 'g': expected a non-empty 2-D (rows, cols) array");
        Py_DECREF(g);
        return NULL;
    }
    PfArray *out = pf_array_new(PF_DT_F64, 2, g->shape);
    if (!out) {
        Py_DECREF(g);
        return NULL;
    }
    pf_status st;
    const int64_t n = g->shape[0], m = g->shape[1];
    Py_BEGIN_ALLOW_THREADS
    st = pf_irdrop_block((const double *)g->data, n, m, m, r_wire, (double *)out->data, m);
    Py_END_ALLOW_THREADS
    Py_DECREF(g);
    if (st != PF_OK) {
        Py_DECREF(out);
        if (st == PF_EINVAL)
            PyErr_SetString(PyExc_ValueError, "irdrop_block: conductances must be finite and the network solvable");
        else
            pf_raise_status(st, "irdrop_block");
        return NULL;
    }
    return (PyObject *)out;
}

static PyObject *py_irdrop_layer(PyObject *self, PyObject *args, PyObject *kwds)
{
    PF_UNUSED(self);
    static char *kwlist[] = {"g", "r_wire", "block_rows", "block_cols", "pad_g", NULL};
    PyObject *g_obj;
    double r_wire, pad_g;
    long long br, bc;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OdLLd:irdrop_layer", kwlist, &g_obj, &r_wire, &br, &bc, &pad_g))
        return NULL;
    if (positive_finite(r_wire, "r_wire") < 0)
        return NULL;
    if (br < 1 || bc < 1 || br > (1 << 14) || bc > (1 << 14)) {
        PyErr_Format(PyExc_ValueError, "arguments 'block_rows'/'block_cols': must be 1 to %d, got %lld, %lld",
                     1 << 14, br, bc);
        return NULL;
    }
    if (!isfinite(pad_g) || pad_g < 0.0) {
        char b[40];
        PyErr_Format(PyExc_ValueError, "argument 'pad_g': must be finite and >= 0, got %s",
                     pf_fmt_double(b, sizeof b, pad_g));
        return NULL;
    }
    PfArray *g = pf_array_from_object(g_obj, PF_DT_F32, 0, "g");
    if (!g)
        return NULL;
    if (g->ndim != 3) {
        PyErr_Format(PyExc_ValueError, "argument 'g': expected 3-D (slices, rows, cols), got %d dimensions", g->ndim);
        Py_DECREF(g);
        return NULL;
    }
    PfArray *out = pf_array_new(PF_DT_F32, 3, g->shape);
    if (!out) {
        Py_DECREF(g);
        return NULL;
    }
    pf_status st;
    Py_BEGIN_ALLOW_THREADS
    st = pf_irdrop_layer((const float *)g->data, g->shape[0], g->shape[1], g->shape[2], br, bc, r_wire, pad_g,
                         (float *)out->data);
    Py_END_ALLOW_THREADS
    Py_DECREF(g);
    if (st != PF_OK) {
        Py_DECREF(out);
        if (st == PF_EINVAL)
            PyErr_SetString(PyExc_ValueError, "irdrop_layer: conductances must be finite and the network solvable");
        else
            pf_raise_status(st, "irdrop_layer");
        return NULL;
    }
    return (PyObject *)out;
}

static PyObject *py_drift(PyObject *self, PyObject *args, PyObject *kwds)
{
    PF_UNUSED(self);
    static char *kwlist[] = {"g", "seed", "t", "t0", "nu_mean", "nu_std", "return_nu", NULL};
    PyObject *g_obj, *seed_obj;
    double t, t0, nu_mean, nu_std;
    int return_nu = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOdddd|p:drift", kwlist, &g_obj, &seed_obj, &t, &t0, &nu_mean,
                                     &nu_std, &return_nu))
        return NULL;
    if (!PyLong_Check(seed_obj) || PyBool_Check(seed_obj)) {
        PyErr_Format(PyExc_TypeError, "argument 'seed': expected an int, got %s", Py_TYPE(seed_obj)->tp_name);
        return NULL;
    }
    unsigned long long seed = PyLong_AsUnsignedLongLong(seed_obj);
    if (seed == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        PyErr_SetString(PyExc_ValueError, "argument 'seed': must be an int in [0, 2**64)");
        return NULL;
    }
    if (positive_finite(t0, "t0") < 0)
        return NULL;
    if (!isfinite(t) || !(t >= t0)) {
        char b1[40], b2[40];
        PyErr_Format(PyExc_ValueError, "argument 't_seconds': must be finite and >= t0 (%s), got %s",
                     pf_fmt_double(b1, sizeof b1, t0), pf_fmt_double(b2, sizeof b2, t));
        return NULL;
    }
    if (!isfinite(nu_mean)) {
        char b[40];
        PyErr_Format(PyExc_ValueError, "argument 'nu_mean': must be finite, got %s", pf_fmt_double(b, sizeof b, nu_mean));
        return NULL;
    }
    if (!isfinite(nu_std) || nu_std < 0.0) {
        char b[40];
        PyErr_Format(PyExc_ValueError, "argument 'nu_std': must be finite and >= 0, got %s", pf_fmt_double(b, sizeof b, nu_std));
        return NULL;
    }
    PfArray *g = pf_array_from_object(g_obj, PF_DT_F32, 0, "g");
    if (!g)
        return NULL;
    PfArray *out = pf_array_new(PF_DT_F32, g->ndim, g->shape);
    PfArray *nu = return_nu ? pf_array_new(PF_DT_F32, g->ndim, g->shape) : NULL;
    if (!out || (return_nu && !nu)) {
        Py_DECREF(g);
        Py_XDECREF(out);
        Py_XDECREF(nu);
        return NULL;
    }
    pf_status st;
    const int64_t count = (int64_t)pf_array_size(g);
    Py_BEGIN_ALLOW_THREADS
    st = pf_drift((const float *)g->data, count, 0, (uint64_t)seed, t, t0, nu_mean, nu_std, (float *)out->data,
                  nu ? (float *)nu->data : NULL);
    Py_END_ALLOW_THREADS
    Py_DECREF(g);
    if (st != PF_OK) {
        Py_DECREF(out);
        Py_XDECREF(nu);
        return pf_raise_status(st, "drift");
    }
    if (!return_nu)
        return (PyObject *)out;
    PyObject *res = PyTuple_Pack(2, (PyObject *)out, (PyObject *)nu);
    Py_DECREF(out);
    Py_DECREF(nu);
    return res;
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
    return PyModule_AddFunctions(module, physics_methods);
}
