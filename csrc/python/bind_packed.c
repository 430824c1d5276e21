/* Python handle of programmed weights packed once (core/dpe.h pf_dpe_packed):
 * _core.dpe_pack(...) packs, _core.dpe_mvm_packed / dpe_conv2d_packed run a
 * product reading the packed panels. pyfastpim.sliced keeps one handle with
 * the programmed SlicedData and drops it when the weights are re-programmed;
 * the packed memory (pf_alloc: counted by pyfastpim.memory.stats()) is freed
 * when the handle is collected. */
#include "python/array.h"
#include "python/bind_dpe.h"
#include "python/bindings.h"
#include "core/dpe.h"

typedef struct {
    PyObject_HEAD
    pf_dpe_packed *p;
} PackedWeights;

static void packed_dealloc(PyObject *self)
{
    pf_dpe_packed_free(((PackedWeights *)self)->p);
    Py_TYPE(self)->tp_free(self);
}

static PyObject *packed_nbytes(PyObject *self, void *closure)
{
    (void)closure;
    return PyLong_FromSize_t(__atomic_load_n(&((PackedWeights *)self)->p->bytes, __ATOMIC_RELAXED));
}

static PyObject *packed_kind(PyObject *self, void *closure)
{
    (void)closure;
    return PyUnicode_FromString(((PackedWeights *)self)->p->kind == PF_DPE_PACKED_READY ? "ready" : "noisy");
}

static PyObject *packed_repr(PyObject *self)
{
    const pf_dpe_packed *p = ((PackedWeights *)self)->p;
    return PyUnicode_FromFormat("<pyfastpim PackedWeights %s, %d slices x %lld x %lld, %zu bytes>",
                                p->kind == PF_DPE_PACKED_READY ? "ready" : "noisy", p->sw, (long long)p->inner,
                                (long long)p->cols, __atomic_load_n(&p->bytes, __ATOMIC_RELAXED));
}

static PyGetSetDef packed_getset[] = {
    {"nbytes", packed_nbytes, NULL, "resident bytes of the packed panels and scales (a 'noisy' pack grows by its "
     "work buffer at the first product whose batch is too large to draw the noise beside the tiles)", NULL},
    {"kind", packed_kind, NULL, "'ready' (no read noise: no per-call weight work) or 'noisy' (read noise refilled "
     "per call into the resident buffer)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject PackedWeightsType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "pyfastpim._core.PackedWeights",
    .tp_basicsize = sizeof(PackedWeights),
    .tp_dealloc = packed_dealloc,
    .tp_repr = packed_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Programmed weights packed once for the CPU DPE kernel (made by _core.dpe_pack).",
    .tp_getset = packed_getset,
};

/* dpe_pack(w_levels, w_conductance, w_scale, w_granule, w_widths, n, rdac, g_level, radc, HGS, LGS, read_sigma) */
static PyObject *py_dpe_pack(PyObject *self, PyObject *args, PyObject *kwds)
{
    (void)self;
    static char *kwlist[] = {"w_levels", "w_conductance", "w_scale", "w_granule", "w_widths", "n", "rdac",
                             "g_level", "radc", "HGS", "LGS", "read_sigma", NULL};
    static const char fmt[] = "OOOO&O&O&O&O&O&O&O&O:dpe_pack"; /* the converters of dpe_mvm (convert.h) */
    pf_dpe_device_args d;
    pf_dpe_device_init(&d);
    if (!PyArg_ParseTupleAndKeywords(args, kwds, fmt, kwlist, &d.owl, &d.owc, &d.ows, pf_conv_pair, &d.w_granule,
                                     pf_conv_slice_method, &d.w_widths, pf_conv_int, &d.n, pf_conv_rdac, &d.rdac,
                                     pf_conv_g_level, &d.g_level, pf_conv_resolutions, &d.radc, pf_conv_real, &d.HGS,
                                     pf_conv_real, &d.LGS, &d.osig))
        return NULL;
    PfArray *wl = pf_array_from_object(d.owl, PF_DT_U8, 0, "w_levels");
    if (!wl)
        return NULL;
    if (wl->ndim != 3) {
        Py_DECREF(wl);
        PyErr_Format(PyExc_ValueError, "argument 'w_levels': expected 3 dimensions (Sw, K, P), got %d", wl->ndim);
        return NULL;
    }
    pf_dpe_args a;
    memset(&a, 0, sizeof a);
    a.inner = wl->shape[1];
    Py_DECREF(wl);
    /* no input yet: a one-bit slice and a granule of one crossbar pass the contract's input checks */
    a.sx = 1;
    a.x_max[0] = 1;
    a.x_weight[0] = 1;
    a.x_qr = 1;
    a.x_qc = d.n.value > 0 ? d.n.value : 1;
    pf_dpe_refs refs = {0};
    PackedWeights *obj = NULL;
    if (pf_dpe_parse_weights_and_device(&a, &refs, &d) == 0 &&
        (obj = PyObject_New(PackedWeights, &PackedWeightsType))) {
        obj->p = NULL;
        pf_status st;
        Py_BEGIN_ALLOW_THREADS
        st = pf_dpe_pack(&a, &obj->p);
        Py_END_ALLOW_THREADS
        if (st != PF_OK) {
            Py_CLEAR(obj);
            pf_raise_status(st, "dpe_pack");
        }
    }
    pf_dpe_refs_release(&refs);
    return (PyObject *)obj;
}

/* (packed, rest of the arguments) of a *_packed call, or -1. */
static int split_packed(PyObject *args, pf_dpe_packed **p, PyObject **rest)
{
    if (PyTuple_GET_SIZE(args) < 1 || !PyObject_TypeCheck(PyTuple_GET_ITEM(args, 0), &PackedWeightsType)) {
        PyErr_SetString(PyExc_TypeError, "argument 'packed': expected a PackedWeights (from _core.dpe_pack) first");
        return -1;
    }
    *p = ((PackedWeights *)PyTuple_GET_ITEM(args, 0))->p;
    *rest = PyTuple_GetSlice(args, 1, PyTuple_GET_SIZE(args));
    return *rest ? 0 : -1;
}

static PyObject *py_dpe_mvm_packed(PyObject *self, PyObject *args, PyObject *kwds)
{
    (void)self;
    pf_dpe_packed *p;
    PyObject *rest, *result;
    if (split_packed(args, &p, &rest) < 0)
        return NULL;
    result = pf_dpe_mvm_call(rest, kwds, p); /* args holds the handle alive for the call */
    Py_DECREF(rest);
    return result;
}

static PyObject *py_dpe_conv2d_packed(PyObject *self, PyObject *args, PyObject *kwds)
{
    (void)self;
    pf_dpe_packed *p;
    PyObject *rest, *result;
    if (split_packed(args, &p, &rest) < 0)
        return NULL;
    result = pf_dpe_conv2d_call(rest, kwds, p);
    Py_DECREF(rest);
    return result;
}

static PyMethodDef packed_methods[] = {
    {"dpe_pack", (PyCFunction)(void (*)(void))py_dpe_pack, METH_VARARGS | METH_KEYWORDS,
     "dpe_pack(w_levels, w_conductance, w_scale, w_granule, w_widths, n, rdac, g_level, radc, HGS, LGS, "
     "read_sigma)\n--\n\nPacks programmed weights once for dpe_mvm_packed / dpe_conv2d_packed."},
    {"dpe_mvm_packed", (PyCFunction)(void (*)(void))py_dpe_mvm_packed, METH_VARARGS | METH_KEYWORDS,
     "dpe_mvm_packed(packed, <the arguments of dpe_mvm>)\n--\n\ndpe_mvm reading weights packed by dpe_pack from "
     "the same weight arrays (the caller keeps them matched; geometry and device are checked)."},
    {"dpe_conv2d_packed", (PyCFunction)(void (*)(void))py_dpe_conv2d_packed, METH_VARARGS | METH_KEYWORDS,
     "dpe_conv2d_packed(packed, <the arguments of dpe_conv2d>)\n--\n\ndpe_conv2d reading weights packed by "
     "dpe_pack."},
    {NULL, NULL, 0, NULL},
};

int pf_bind_packed_init(PyObject *module)
{
    if (PyType_Ready(&PackedWeightsType) < 0)
        return -1;
    Py_INCREF(&PackedWeightsType);
    if (PyModule_AddObject(module, "PackedWeights", (PyObject *)&PackedWeightsType) < 0) {
        Py_DECREF(&PackedWeightsType);
        return -1;
    }
    return PyModule_AddFunctions(module, packed_methods);
}
