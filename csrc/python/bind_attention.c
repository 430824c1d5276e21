/* Python bindings of the attention kernel family: thin, stateless entry points.
 *
 * pyfastpim/attention.py owns the AttentionContext (its parameters, matrices,
 * guard, argument flow and the engine= product); this file only binds the
 * kernels of csrc/cpu/attention.c (and, with device=<OpenCLDevice>, those of
 * csrc/opencl/attention.c, through the backend table) on pyfastpim.Array operands
 * the Python layer has already converted and shaped, plus AttentionWorkspace, the reusable
 * scratch memory that keeps steady-state calls free of allocations. Every entry
 * point re-checks the sizes it hands to C (a wrong call raises, never crashes)
 * and releases the GIL around the arithmetic. No Python module is imported. */
#include "python/array.h"
#include "core/attention.h"
#include "python/bind_device.h"
#include "python/bindings.h"
#include "core/memory.h"
#include "core/pf_common.h"

#include <math.h>
#include <string.h>

/* ---- workspace ---- */

typedef struct {
    PyObject_HEAD
    pf_attn_ws ws;
    int busy; /* a kernel runs in it (GIL released): a second caller raises instead of racing */
} PfAttnWs;

static PyTypeObject PfAttnWs_Type;

static void PfAttnWs_dealloc(PfAttnWs *self)
{
    pf_attn_ws_free(&self->ws); /* no kernel can be running: each holds a reference to self */
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *PfAttnWs_nbytes(PfAttnWs *self, PyObject *noargs)
{
    PF_UNUSED(noargs);
    return PyLong_FromSize_t(pf_attn_ws_bytes(&self->ws));
}

static PyMethodDef PfAttnWs_methods[] = {
    {"nbytes", (PyCFunction)PfAttnWs_nbytes, METH_NOARGS, "nbytes()\n--\n\nBytes the workspace holds."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject PfAttnWs_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "pyfastpim._core.AttentionWorkspace",
    .tp_basicsize = sizeof(PfAttnWs),
    .tp_dealloc = (destructor)PfAttnWs_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "AttentionWorkspace()\n--\n\nScratch memory of one attention context, grown when shapes grow and "
              "reused otherwise. Not shareable between threads at the same time (RuntimeError).",
    .tp_methods = PfAttnWs_methods,
    .tp_new = PyType_GenericNew,
};

static pf_attn_ws *ws_take(PfAttnWs *w)
{
    if (w->busy) {
        PyErr_SetString(PyExc_RuntimeError, "AttentionWorkspace is in use by another call");
        return NULL;
    }
    w->busy = 1;
    return &w->ws;
}

/* ---- operand checks ---- */

static int f32(PfArray *a, const char *name, int writable)
{
    if (a->dtype != PF_DT_F32) {
        PyErr_Format(PyExc_TypeError, "argument '%s': expected float32, got %s", name, pf_dtype_name(a->dtype));
        return -1;
    }
    if (writable && a->readonly) {
        PyErr_Format(PyExc_ValueError, "argument '%s': must be writable", name);
        return -1;
    }
    return 0;
}

/* w is a float32 (d, d) matrix; returns d, or -1 with ValueError. */
static Py_ssize_t square(PfArray *w, const char *name, int writable)
{
    if (f32(w, name, writable) < 0)
        return -1;
    if (w->ndim != 2 || w->shape[0] != w->shape[1] || w->shape[0] < 1) {
        PyErr_Format(PyExc_ValueError, "argument '%s': expected a square (D, D) matrix with D >= 1", name);
        return -1;
    }
    return w->shape[0];
}

/* a holds whole rows of d: returns the row count, or -1 with ValueError. */
static Py_ssize_t rows_of(PfArray *a, Py_ssize_t d, const char *name)
{
    if (a->ndim < 1 || a->shape[a->ndim - 1] != d) {
        PyErr_Format(PyExc_ValueError, "argument '%s': last dimension does not match D = %zd", name, d);
        return -1;
    }
    return (Py_ssize_t)(pf_array_size(a) / (size_t)d);
}

static int overlap(const PfArray *a, const PfArray *b)
{
    size_t na = pf_array_nbytes(a), nb = pf_array_nbytes(b);
    if (na == 0 || nb == 0)
        return 0;
    const char *pa = a->data, *pb = b->data;
    return pa < pb + nb && pb < pa + na;
}

/* Exactly the same memory (an in-place call), as opposed to a partial overlap. */
static int identical(const PfArray *a, const PfArray *b)
{
    return a->data == b->data && pf_array_nbytes(a) == pf_array_nbytes(b);
}

/* out may be exactly one of a/b (an in-place call); any other overlap is refused. */
static int no_partial_overlap(const PfArray *out, const PfArray *a, const PfArray *b)
{
    return !(overlap(out, a) && !identical(out, a)) && !(b && overlap(out, b) && !identical(out, b));
}

static int same_size(PfArray *out, PfArray *ref, const char *name)
{
    if (out->ndim != ref->ndim || pf_array_size(out) != pf_array_size(ref)) {
        PyErr_Format(PyExc_ValueError, "argument '%s': does not match the input's shape", name);
        return -1;
    }
    return 0;
}

/* ---- entry points ---- */

/* _attn_view(obj, writable, name): obj as a float32 C-contiguous pyfastpim.Array
 * (zero-copy when it already is one), errors naming the argument. */
static PyObject *py_view(PyObject *self, PyObject *args)
{
    PF_UNUSED(self);
    PyObject *obj;
    pf_flag_arg writable = {.name = "writable"};
    const char *name;
    if (!PyArg_ParseTuple(args, "OO&s:_attn_view", &obj, pf_conv_flag, &writable, &name))
        return NULL;
    return (PyObject *)pf_array_from_object(obj, PF_DT_F32, writable.value, name);
}

/* _attn_new(shape, zeros): a new owned float32 C-contiguous array (zero-filled when zeros). */
static PyObject *py_new(PyObject *self, PyObject *args)
{
    PF_UNUSED(self);
    PyObject *shape_o;
    pf_flag_arg zeros = {.name = "zeros"};
    if (!PyArg_ParseTuple(args, "O!O&:_attn_new", &PyTuple_Type, &shape_o, pf_conv_flag, &zeros))
        return NULL;
    Py_ssize_t shape[PF_MAXDIM], n = PyTuple_GET_SIZE(shape_o);
    if (n > PF_MAXDIM)
        return PyErr_Format(PyExc_ValueError, "argument 'shape': at most %d dimensions", PF_MAXDIM);
    for (Py_ssize_t i = 0; i < n; i++) {
        shape[i] = PyLong_AsSsize_t(PyTuple_GET_ITEM(shape_o, i));
        if (shape[i] == -1 && PyErr_Occurred())
            return NULL;
        if (shape[i] < 0)
            return PyErr_Format(PyExc_ValueError, "argument 'shape': negative dimension %zd", shape[i]);
    }
    return (PyObject *)(zeros.value ? pf_array_zeros(PF_DT_F32, (int)n, shape) : pf_array_new(PF_DT_F32, (int)n, shape));
}

/* _attn_copy(dst, src, counted): dst[:] = src for arrays of equal size; counted
 * records a host copy in pyfastpim.memory. */
static PyObject *py_copy(PyObject *self, PyObject *args)
{
    PF_UNUSED(self);
    PfArray *dst, *src;
    pf_flag_arg counted = {.name = "counted"};
    if (!PyArg_ParseTuple(args, "O!O!O&:_attn_copy", &PfArray_Type, &dst, &PfArray_Type, &src, pf_conv_flag,
                          &counted))
        return NULL;
    if (f32(dst, "dst", 1) < 0 || f32(src, "src", 0) < 0 || same_size(dst, src, "dst") < 0)
        return NULL;
    if (dst->data != src->data) {
        memmove(dst->data, src->data, pf_array_nbytes(src));
        if (counted.value)
            pf_record_copy(PF_COPY_HOST, pf_array_nbytes(src));
    }
    Py_RETURN_NONE;
}

/* ---- device= (python/bind_device.h) ----
 * _attn_update, _attn_apply and _attention_tanh take a keyword-only device=: None or "cpu" (the
 * kernels of csrc/cpu/attention.c) or an OpenCLDevice (those of csrc/opencl/attention.c, under the
 * device's lock, refused in a forked child). The arguments are checked once, by the same code,
 * for either device; the call then goes through the backend table (core/backend.h). */

/* device= of an attention binding, whose only keyword it is. 0, or -1 with an exception (d clear). */
static int attn_device(PyObject *kwds, const char *op, pf_device *d)
{
    PyObject *kw;
    if (pf_device_from_kwds(kwds, &kw, op, d) < 0)
        return -1;
    int extra = kw && PyDict_GET_SIZE(kw) > 0;
    Py_XDECREF(kw);
    if (!extra)
        return 0;
    PyErr_Format(PyExc_TypeError, "%s() takes no keyword arguments but 'device'", op);
    pf_device_clear(d);
    return -1;
}

/* Names the kernel in the messages of a failed call ("update_outgoing", "apply on OpenCL"). */
static void attn_what(pf_device *d, const char *kernel)
{
    PyOS_snprintf(d->what, sizeof d->what, "%s%s", kernel, d->handle ? " on OpenCL" : "");
}

/* The workspace of one call: the caller's AttentionWorkspace (taken: a second concurrent caller
 * raises), or for ws=None a temporary one freed after the call. The OpenCL backend uses device
 * buffers and no workspace: ws stays NULL and the caller's workspace is not touched. */
typedef struct {
    PfAttnWs *owner;
    pf_attn_ws tmp;
    pf_attn_ws *ws;
} ws_use;

static int ws_check(PyObject *o)
{
    if (o == Py_None || PyObject_TypeCheck(o, &PfAttnWs_Type))
        return 0;
    PyErr_Format(PyExc_TypeError, "argument 'ws': expected an AttentionWorkspace or None, got %s",
                 Py_TYPE(o)->tp_name);
    return -1;
}

static int ws_begin(ws_use *u, PyObject *o, const pf_device *d)
{
    memset(u, 0, sizeof *u);
    if (d->handle)
        return 0;
    if (o == Py_None) {
        u->ws = &u->tmp;
        return 0;
    }
    u->owner = (PfAttnWs *)o;
    u->ws = ws_take(u->owner);
    return u->ws ? 0 : -1;
}

static void ws_end(ws_use *u)
{
    if (u->owner)
        u->owner->busy = 0;
    else
        pf_attn_ws_free(&u->tmp);
}

/* The checks of _attn_update on either device: outgoing a writable float32 (d, d) matrix; x and y
 * float32 with at least d columns and t rows (one vector each when step); rate finite. */
static int update_check(PfArray *o, PfArray *x, PfArray *y, Py_ssize_t t, Py_ssize_t d, double rate, int step)
{
    Py_ssize_t n = square(o, "outgoing", 1);
    if (n < 0 || f32(x, "x", 0) < 0 || f32(y, "y", 0) < 0)
        return -1;
    if (n != d) {
        PyErr_Format(PyExc_ValueError, "argument 'outgoing': expected (%zd, %zd), got (%zd, %zd)", d, d, n, n);
        return -1;
    }
    if (step && (x->ndim != 1 || y->ndim != 1)) {
        PyErr_Format(PyExc_ValueError, "argument '%s': step=True takes one vector (D,) each for 'x' and 'y'",
                     x->ndim != 1 ? "x" : "y");
        return -1;
    }
    Py_ssize_t dx = x->ndim ? x->shape[x->ndim - 1] : 0, dy = y->ndim ? y->shape[y->ndim - 1] : 0;
    if (d > dx || d > dy) {
        PyErr_Format(PyExc_ValueError, "argument 'outgoing': D = %zd exceeds the columns of 'x' (%zd) or 'y' (%zd)",
                     d, dx, dy);
        return -1;
    }
    size_t tx = pf_array_size(x) / (size_t)dx, ty = pf_array_size(y) / (size_t)dy;
    if (t < 0 || (size_t)t > tx || (size_t)t > ty) {
        PyErr_Format(PyExc_ValueError, "argument 't': t = %zd is negative or exceeds the rows of 'x' (%zu) or 'y' "
                     "(%zu)", t, tx, ty);
        return -1;
    }
    if (!isfinite(rate)) {
        PyErr_Format(PyExc_ValueError, "argument 'rate': must be finite, got %s",
                     isnan(rate) ? "nan" : rate > 0 ? "inf" : "-inf");
        return -1;
    }
    return 0;
}

/* _attn_update(ws, outgoing, x, y, t, d, rate, step, *, device=None): the update of outgoing
 * (d, d) from the first t rows and d columns of x and y (one vector each when step). */
static PyObject *py_update(PyObject *self, PyObject *args, PyObject *kwds)
{
    PF_UNUSED(self);
    PyObject *wso, *ret = NULL;
    PfArray *o, *x, *y;
    pf_int_arg ta = {.name = "t", .min = 0, .max = PY_SSIZE_T_MAX}, da = {.name = "d", .min = 0, .max = PY_SSIZE_T_MAX};
    pf_real_arg ra = {"rate"};
    pf_flag_arg sa = {.name = "step"};
    int step, st;
    pf_device dv;
    ws_use u;
    if (attn_device(kwds, "_attn_update", &dv) < 0)
        return NULL;
    if (!PyArg_ParseTuple(args, "OO!O!O!O&O&O&O&:_attn_update", &wso, &PfArray_Type, &o, &PfArray_Type, &x,
                          &PfArray_Type, &y, pf_conv_int, &ta, pf_conv_int, &da, pf_conv_real, &ra, pf_conv_flag, &sa))
        goto done;
    step = sa.value;
    const Py_ssize_t t = (Py_ssize_t)ta.value, d = (Py_ssize_t)da.value;
    const double rate = ra.value;
    if (ws_check(wso) < 0 || update_check(o, x, y, t, d, rate, step) < 0)
        goto done;
    if (step && !dv.be->attn_update_step) {
        PyErr_Format(PyExc_NotImplementedError, "argument 'device': the %s backend has no step update "
                     "(update_outgoing_step, step=True); run it with device=None", dv.be->name);
        goto done;
    }
    attn_what(&dv, step ? "update_outgoing_step" : "update_outgoing");
    if (ws_begin(&u, wso, &dv) < 0)
        goto done;
    float *od = (float *)o->data;
    const float *xd = (const float *)x->data, *yd = (const float *)y->data;
    PF_DEVICE_CALL(&dv, st,
                   step ? dv.be->attn_update_step(dv.dev, u.ws, od, d, xd, yd, rate)
                        : dv.be->attn_update(dv.dev, u.ws, od, d, xd, x->shape[x->ndim - 1], yd,
                                             y->shape[y->ndim - 1], t, rate));
    ws_end(&u);
    if (st == PF_OK)
        ret = Py_NewRef(Py_None);
done:
    pf_device_clear(&dv);
    return ret;
}

/* _attn_apply(ws, out, x, w, s, xname, *, device=None): out = x + (s/D) * (x @ w), s != 0. */
static PyObject *py_apply(PyObject *self, PyObject *args, PyObject *kwds)
{
    PF_UNUSED(self);
    PyObject *wso, *ret = NULL;
    PfArray *out, *x, *m;
    pf_real_arg sa = {"strength"};
    const char *xname;
    int st;
    pf_device dv;
    ws_use u;
    if (attn_device(kwds, "_attn_apply", &dv) < 0)
        return NULL;
    if (!PyArg_ParseTuple(args, "OO!O!O!O&s:_attn_apply", &wso, &PfArray_Type, &out, &PfArray_Type, &x,
                          &PfArray_Type, &m, pf_conv_real, &sa, &xname) ||
        ws_check(wso) < 0)
        goto done;
    const double s = sa.value;
    Py_ssize_t d = square(m, "incoming", 0);
    Py_ssize_t t = d < 0 || f32(x, xname, 0) < 0 ? -1 : rows_of(x, d, xname);
    if (t < 0 || f32(out, "out", 1) < 0 || same_size(out, x, "out") < 0)
        goto done;
    if (!no_partial_overlap(out, x, NULL) || overlap(out, m)) {
        PyErr_Format(PyExc_ValueError, "argument 'out': must not overlap the context's incoming matrix or "
                     "partially overlap '%s' (out=%s itself is allowed)", xname, xname);
        goto done;
    }
    attn_what(&dv, xname[1] ? "apply_step" : "apply");
    if (ws_begin(&u, wso, &dv) < 0)
        goto done;
    PF_DEVICE_CALL(&dv, st,
                   dv.be->attn_apply(dv.dev, u.ws, (float *)out->data, (const float *)x->data,
                                     (const float *)m->data, t, d, s));
    ws_end(&u);
    if (st == PF_OK)
        ret = Py_NewRef(Py_None);
done:
    pf_device_clear(&dv);
    return ret;
}

/* _attn_gradients(ws, out, x, g, w, s) -> grad_strength; out (or None: grad_s only)
 * receives grad_x. */
static PyObject *py_gradients(PyObject *self, PyObject *args)
{
    PF_UNUSED(self);
    PfAttnWs *w;
    PyObject *outo;
    PfArray *x, *g, *m, *out = NULL;
    double ds = 0.0;
    pf_real_arg sa = {"strength"};
    if (!PyArg_ParseTuple(args, "O!OO!O!O!O&:_attn_gradients", &PfAttnWs_Type, &w, &outo, &PfArray_Type, &x,
                          &PfArray_Type, &g, &PfArray_Type, &m, pf_conv_real, &sa))
        return NULL;
    const double s = sa.value;
    if (outo != Py_None) {
        if (!PfArray_Check(outo))
            return PyErr_Format(PyExc_TypeError, "argument 'out': expected a pyfastpim.Array or None");
        out = (PfArray *)outo;
    }
    Py_ssize_t d = square(m, "incoming", 0);
    Py_ssize_t t = d < 0 || f32(x, "x", 0) < 0 || f32(g, "grad_out", 0) < 0 ? -1 : rows_of(x, d, "x");
    if (t < 0 || same_size(g, x, "grad_out") < 0 ||
        (out && (f32(out, "out", 1) < 0 || same_size(out, g, "out") < 0)))
        return NULL;
    if (out && (!no_partial_overlap(out, x, g) || overlap(out, m)))
        return PyErr_Format(PyExc_ValueError, "argument 'out': must not overlap the context's incoming matrix or "
                            "partially overlap 'x' or 'grad_out' (out=x or out=grad_out itself is allowed)");
    pf_attn_ws *ws = ws_take(w);
    if (!ws)
        return NULL;
    int st;
    float *gx = out ? (float *)out->data : NULL;
    Py_BEGIN_ALLOW_THREADS
    st = pf_attn_gradients(ws, gx, &ds, (const float *)x->data, (const float *)g->data, (const float *)m->data, t, d,
                           s);
    Py_END_ALLOW_THREADS
    w->busy = 0;
    if (st)
        return pf_raise_status(st, "gradients");
    return PyFloat_FromDouble(ds);
}

/* _attn_finite(x): x itself when every value is finite, else a new copy with the
 * non-finite values as 0 (what the crossbar of the engine= product sees). */
static PyObject *py_finite(PyObject *self, PyObject *arg)
{
    PF_UNUSED(self);
    if (!PfArray_Check(arg))
        return PyErr_Format(PyExc_TypeError, "argument 'x': expected a pyfastpim.Array");
    if (f32((PfArray *)arg, "x", 0) < 0)
        return NULL;
    PfArray *x = (PfArray *)arg;
    if (!pf_attn_has_nonfinite((const float *)x->data, pf_array_size(x)))
        return Py_NewRef(arg);
    PfArray *c = pf_array_new(PF_DT_F32, x->ndim, x->shape);
    if (c)
        pf_attn_sanitize((float *)c->data, (const float *)x->data, pf_array_size(x));
    return (PyObject *)c;
}

/* _attn_epilogue(out, x, xw, scale): out = fin(x) + scale * fin(xw), elementwise. */
static PyObject *py_epilogue(PyObject *self, PyObject *args)
{
    PF_UNUSED(self);
    PfArray *out, *x, *xw;
    pf_real_arg sc = {"scale"};
    if (!PyArg_ParseTuple(args, "O!O!O!O&:_attn_epilogue", &PfArray_Type, &out, &PfArray_Type, &x, &PfArray_Type,
                          &xw, pf_conv_real, &sc))
        return NULL;
    const double scale = sc.value;
    if (f32(out, "out", 1) < 0 || f32(x, "x", 0) < 0 || f32(xw, "dpe_matmul result", 0) < 0 ||
        same_size(out, x, "out") < 0 || pf_array_size(xw) != pf_array_size(x))
        return PyErr_Occurred() ? NULL : PyErr_Format(PyExc_ValueError, "dpe_matmul result: size does not match x");
    if (!no_partial_overlap(out, x, xw))
        return PyErr_Format(PyExc_ValueError, "dpe_matmul result overlaps 'out'");
    Py_BEGIN_ALLOW_THREADS
    pf_attn_epilogue((float *)out->data, (const float *)x->data, (const float *)xw->data, pf_array_size(x),
                     (float)scale);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

/* _attention_tanh(x, *, device=None): the update kernels' float32 tanh of x (non-finite as 0). */
static PyObject *py_tanh(PyObject *self, PyObject *args, PyObject *kwds)
{
    PF_UNUSED(self);
    PyObject *xo;
    PfArray *x = NULL, *out = NULL;
    int st;
    pf_device dv;
    if (attn_device(kwds, "_attention_tanh", &dv) < 0)
        return NULL;
    if (PyArg_ParseTuple(args, "O:_attention_tanh", &xo) && (x = pf_array_from_object(xo, PF_DT_F32, 0, "x")) &&
        (out = pf_array_new(PF_DT_F32, x->ndim, x->shape))) {
        attn_what(&dv, "attention tanh");
        PF_DEVICE_CALL(&dv, st,
                       dv.be->attn_tanh(dv.dev, (float *)out->data, (const float *)x->data,
                                        (int64_t)pf_array_size(x)));
        if (st != PF_OK)
            Py_CLEAR(out);
    }
    Py_XDECREF(x);
    pf_device_clear(&dv);
    return (PyObject *)out;
}

/* The function and flags of a binding taking keywords (device=). */
#define ATTN_KW(fn) (PyCFunction)(void (*)(void))(fn), METH_VARARGS | METH_KEYWORDS

static PyMethodDef attn_functions[] = {
    {"_attn_view", py_view, METH_VARARGS, "_attn_view(obj, writable, name): a float32 C-contiguous Array view."},
    {"_attn_new", py_new, METH_VARARGS, "_attn_new(shape, zeros): a new float32 Array."},
    {"_attn_copy", py_copy, METH_VARARGS, "_attn_copy(dst, src, counted): dst[:] = src."},
    {"_attn_update", ATTN_KW(py_update),
     "_attn_update(ws, outgoing, x, y, t, d, rate, step, *, device=None)\n--\n\n"
     "The context update (spec section 9) of outgoing (d, d) in place from the first t rows and d columns of x "
     "and y (one vector each when step). ws: an AttentionWorkspace, or None for a temporary one (the OpenCL "
     "backend uses none and ignores ws). device: None or 'cpu' (the CPU), or an OpenCLDevice (that device; no "
     "step update there: NotImplementedError naming 'device'). Same checks and errors on either device."},
    {"_attn_apply", ATTN_KW(py_apply),
     "_attn_apply(ws, out, x, w, s, xname, *, device=None)\n--\n\n"
     "out = x + (s/D) * (x @ w), non-finite terms as 0; out may be x itself. ws and device as for _attn_update; "
     "xname names x in messages."},
    {"_attn_gradients", py_gradients, METH_VARARGS,
     "_attn_gradients(ws, out, x, g, w, s) -> grad_strength; grad_x into out (None: not computed)."},
    {"_attn_finite", py_finite, METH_O, "_attn_finite(x): x, or a copy with non-finite values as 0."},
    {"_attn_epilogue", py_epilogue, METH_VARARGS, "_attn_epilogue(out, x, xw, scale): out = fin(x) + scale*fin(xw)."},
    {"_attention_tanh", ATTN_KW(py_tanh),
     "_attention_tanh(x, *, device=None)\n--\n\nThe update kernels' float32 tanh of x, non-finite values as 0 "
     "(for accuracy and cross-device tests); returns an Array. device as for _attn_update."},
    {NULL, NULL, 0, NULL},
};

int pf_bind_attention_init(PyObject *module)
{
    if (PyType_Ready(&PfAttnWs_Type) < 0)
        return -1;
    Py_INCREF(&PfAttnWs_Type);
    if (PyModule_AddObject(module, "AttentionWorkspace", (PyObject *)&PfAttnWs_Type) < 0) {
        Py_DECREF(&PfAttnWs_Type);
        return -1;
    }
    if (PyModule_AddIntConstant(module, "ATTN_MAX_DIM", PF_ATTN_MAX_DIM) < 0)
        return -1;
    return PyModule_AddFunctions(module, attn_functions);
}
