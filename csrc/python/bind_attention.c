/* Python bindings of the attention kernel family: pyfastpim.AttentionContext.
 *
 * Parsing, validation (exceptions name the argument), output allocation and
 * the NumPy/torch round trip live here; the arithmetic is in attention.c.
 * Inputs are viewed without copying when they are float32 and C-contiguous
 * (NumPy, CPU torch, any buffer); results come back as torch tensors for torch
 * inputs and NumPy arrays otherwise, or are written into out=. */
#include "python/array.h"
#include "core/attention.h"
#include "python/bindings.h"
#include "core/memory.h"
#include "core/pf_common.h"

#include <math.h>
#include <pythread.h>
#include <string.h>

typedef struct {
    PyObject_HEAD
    double update_rate;
    double strength;
    Py_ssize_t embed_dim; /* 0: None */
    PfArray *incoming;    /* owned D x D buffers or NULL */
    PfArray *outgoing;
    pf_attn_ws ws;
    /* The guard: every method that reads or writes the matrices, the workspace
     * or the parameters holds it from after its arguments are converted until
     * its last access, GIL-released kernels and engine= calls into Python
     * included. Another thread's call waits for it (GIL released); a call
     * from the holding thread itself (code run by engine=) raises. Only
     * taken and released with the GIL held, so owner is read consistently. */
    PyThread_type_lock lock;
    unsigned long owner; /* thread ident of the holder, 0 when free */
    PyObject *weakreflist;
} PfAttnCtx;

static PyTypeObject PfAttnCtx_Type;

/* ---- helpers ---- */

static PyObject *g_numpy;

static PyObject *numpy_module(void)
{
    if (!g_numpy)
        g_numpy = PyImport_ImportModule("numpy");
    return g_numpy;
}

/* torch.Tensor when torch has been imported (an object cannot be a tensor otherwise). */
static int is_torch_tensor(PyObject *obj)
{
    static PyObject *tensor_type;
    if (!tensor_type) {
        PyObject *name = PyUnicode_FromString("torch");
        if (!name)
            return -1;
        PyObject *torch = PyImport_GetModule(name);
        Py_DECREF(name);
        if (!torch)
            return PyErr_Occurred() ? -1 : 0;
        tensor_type = PyObject_GetAttrString(torch, "Tensor");
        Py_DECREF(torch);
        if (!tensor_type)
            return -1;
    }
    return PyObject_IsInstance(obj, tensor_type);
}

/* float32 C-contiguous view of obj (torch tensors that require grad are detached
 * first: DLPack refuses them). New reference or NULL with an exception naming argname. */
static PfArray *as_f32(PyObject *obj, int writable, const char *argname)
{
    int t = is_torch_tensor(obj);
    if (t < 0)
        return NULL;
    if (t) {
        PyObject *rg = PyObject_GetAttrString(obj, "requires_grad");
        if (!rg)
            return NULL;
        int need = PyObject_IsTrue(rg);
        Py_DECREF(rg);
        if (need < 0)
            return NULL;
        if (need) {
            PyObject *d = PyObject_CallMethod(obj, "detach", NULL);
            if (!d)
                return NULL;
            PfArray *a = pf_array_from_object(d, PF_DT_F32, writable, argname);
            Py_DECREF(d);
            return a;
        }
    }
    return pf_array_from_object(obj, PF_DT_F32, writable, argname);
}

/* The Python object handed back for a new output array: torch for torch inputs. */
static PyObject *wrap_output(PfArray *a, PyObject *like)
{
    int t = is_torch_tensor(like);
    if (t < 0)
        return NULL;
    if (t)
        return PyObject_CallMethod((PyObject *)a, "to_torch", NULL);
    PyObject *np = numpy_module();
    if (!np)
        return NULL;
    return PyObject_CallMethod(np, "asarray", "O", (PyObject *)a);
}

static int same_shape(const PfArray *a, const PfArray *b)
{
    if (a->ndim != b->ndim)
        return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i])
            return 0;
    return 1;
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

static PyObject *shape_str(const PfArray *a)
{
    PyObject *t = PyTuple_New(a->ndim);
    if (!t)
        return NULL;
    for (int i = 0; i < a->ndim; i++) {
        PyObject *v = PyLong_FromSsize_t(a->shape[i]);
        if (!v) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, v);
    }
    return t;
}

/* Takes the context's guard (see PfAttnCtx.lock): 0, or -1 with an exception
 * (a reentrant call from the holding thread, or a signal while waiting). */
static int ctx_acquire(PfAttnCtx *self, const char *what)
{
    unsigned long me = PyThread_get_thread_ident();
    if (!self->lock) {
        PyErr_Format(PyExc_RuntimeError, "%s: AttentionContext is not initialized", what);
        return -1;
    }
    if (self->owner == me) {
        PyErr_Format(PyExc_RuntimeError, "%s: AttentionContext is in use by this thread (a reentrant call, e.g. "
                     "from the engine= product of one of its own calls)", what);
        return -1;
    }
    if (!PyThread_acquire_lock(self->lock, NOWAIT_LOCK)) {
        PyLockStatus r;
        do {
            Py_BEGIN_ALLOW_THREADS
            r = PyThread_acquire_lock_timed(self->lock, -1, 1);
            Py_END_ALLOW_THREADS
            if (r == PY_LOCK_INTR && PyErr_CheckSignals() < 0)
                return -1;
        } while (r != PY_LOCK_ACQUIRED);
    }
    self->owner = me;
    return 0;
}

static void ctx_release(PfAttnCtx *self)
{
    self->owner = 0;
    PyThread_release_lock(self->lock);
}

/* Validates out= against the shape of ref; returns a writable view, a new owned
 * array when outo is None, or NULL with ValueError naming 'out'. */
static PfArray *output_for(PyObject *outo, const PfArray *ref)
{
    if (outo == Py_None)
        return pf_array_new(PF_DT_F32, ref->ndim, ref->shape);
    PfArray *out = as_f32(outo, 1, "out");
    if (!out)
        return NULL;
    if (!same_shape(out, ref)) {
        PyObject *a = shape_str(out), *b = shape_str(ref);
        if (a && b)
            PyErr_Format(PyExc_ValueError, "argument 'out': shape %R does not match the result's shape %R", a, b);
        Py_XDECREF(a);
        Py_XDECREF(b);
        Py_DECREF(out);
        return NULL;
    }
    return out;
}

/* Pops name from the keyword dict kw (a private copy) into *dst; TypeError if
 * it was also given by position. */
static int pop_kw(PyObject *kw, const char *name, PyObject **dst, int given, const char *fn)
{
    if (!kw)
        return 0;
    PyObject *v = PyDict_GetItemString(kw, name);
    if (!v)
        return 0;
    if (given) {
        PyErr_Format(PyExc_TypeError, "%s() got multiple values for argument '%s'", fn, name);
        return -1;
    }
    *dst = v;
    Py_INCREF(v); /* survives the deletion below; the caller drops it with the dict */
    if (PyDict_DelItemString(kw, name) < 0) {
        Py_DECREF(v);
        return -1;
    }
    return 1;
}

/* ---- construction ---- */

static int parse_finite(PyObject *v, const char *name, double *out)
{
    double d = PyFloat_AsDouble(v);
    if (d == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "argument '%s': expected a real number, got %s", name, Py_TYPE(v)->tp_name);
        return -1;
    }
    if (!isfinite(d)) {
        PyErr_Format(PyExc_ValueError, "argument '%s': must be finite, got %R", name, v);
        return -1;
    }
    *out = d;
    return 0;
}

static int PfAttnCtx_init(PfAttnCtx *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"update_rate", "strength", "embed_dim", NULL};
    PyObject *rate = NULL, *strength = NULL, *embed = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|OOO:AttentionContext", kwlist, &rate, &strength, &embed))
        return -1;
    double r = 0.01, s = 0.0;
    if (rate && parse_finite(rate, "update_rate", &r) < 0)
        return -1;
    if (strength && parse_finite(strength, "strength", &s) < 0)
        return -1;
    Py_ssize_t e = 0;
    if (embed != Py_None) {
        if (!PyLong_Check(embed)) {
            PyErr_Format(PyExc_TypeError, "argument 'embed_dim': expected an int or None, got %s",
                         Py_TYPE(embed)->tp_name);
            return -1;
        }
        e = PyLong_AsSsize_t(embed);
        if (e == -1 && PyErr_Occurred())
            return -1;
        if (e < 1) {
            PyErr_Format(PyExc_ValueError, "argument 'embed_dim': must be >= 1 or None, got %zd", e);
            return -1;
        }
    }
    if (ctx_acquire(self, "AttentionContext.__init__") < 0)
        return -1;
    self->update_rate = r;
    self->strength = s;
    self->embed_dim = e;
    ctx_release(self);
    return 0;
}

static PyObject *PfAttnCtx_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PfAttnCtx *self = (PfAttnCtx *)PyType_GenericNew(type, args, kwds);
    if (!self)
        return NULL;
    self->lock = PyThread_allocate_lock();
    if (!self->lock) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    return (PyObject *)self;
}

static void PfAttnCtx_dealloc(PfAttnCtx *self)
{
    if (self->weakreflist)
        PyObject_ClearWeakRefs((PyObject *)self);
    Py_CLEAR(self->incoming);
    Py_CLEAR(self->outgoing);
    pf_attn_ws_free(&self->ws);
    if (self->lock) /* no call can be running: each holds a reference to self */
        PyThread_free_lock(self->lock);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* ---- incoming / outgoing ---- */

static PyObject *get_matrix(PfArray *m)
{
    if (!m)
        Py_RETURN_NONE;
    PyObject *np = numpy_module();
    if (!np)
        return NULL;
    return PyObject_CallMethod(np, "asarray", "O", (PyObject *)m);
}

/* Copies value into *slot (reusing the buffer when the shape is unchanged), so the
 * context holds a snapshot: ctx.incoming = other.outgoing is not changed by
 * other's later in-place updates. */
static int set_matrix(PfAttnCtx *self, PfArray **slot, PyObject *value, const char *name)
{
    if (!value) {
        PyErr_Format(PyExc_AttributeError, "cannot delete '%s' (assign None instead)", name);
        return -1;
    }
    if (value == Py_None) {
        if (ctx_acquire(self, name) < 0)
            return -1;
        PfArray *old = *slot;
        *slot = NULL;
        ctx_release(self);
        Py_XDECREF(old); /* after the release: dropping it may run Python code */
        return 0;
    }
    /* converted before the guard is taken: the conversion may run Python code
     * (an __array_interface__ property, __dlpack__) and release the GIL */
    PfArray *v = as_f32(value, 0, name);
    if (!v)
        return -1;
    if (v->ndim != 2 || v->shape[0] != v->shape[1] || v->shape[0] < 1) {
        PyObject *s = shape_str(v);
        if (s)
            PyErr_Format(PyExc_ValueError, "argument '%s': expected a square (D, D) matrix with D >= 1, got shape %R",
                         name, s);
        Py_XDECREF(s);
        Py_DECREF(v);
        return -1;
    }
    if (ctx_acquire(self, name) < 0) {
        Py_DECREF(v);
        return -1;
    }
    PfArray *dst = *slot, *old = NULL;
    if (!dst || !same_shape(dst, v)) {
        dst = pf_array_new(PF_DT_F32, 2, v->shape);
        if (!dst) {
            ctx_release(self);
            Py_DECREF(v);
            return -1;
        }
        old = *slot;
        *slot = dst;
    }
    if (dst->data != v->data) {
        memmove(dst->data, v->data, pf_array_nbytes(v));
        pf_record_copy(PF_COPY_HOST, pf_array_nbytes(v));
    }
    ctx_release(self);
    Py_XDECREF(old);
    Py_DECREF(v);
    return 0;
}

static PyObject *get_incoming(PfAttnCtx *self, void *c) { PF_UNUSED(c); return get_matrix(self->incoming); }
static PyObject *get_outgoing(PfAttnCtx *self, void *c) { PF_UNUSED(c); return get_matrix(self->outgoing); }
static int set_incoming(PfAttnCtx *self, PyObject *v, void *c)
{
    PF_UNUSED(c);
    return set_matrix(self, &self->incoming, v, "incoming");
}
static int set_outgoing(PfAttnCtx *self, PyObject *v, void *c)
{
    PF_UNUSED(c);
    return set_matrix(self, &self->outgoing, v, "outgoing");
}

static PyObject *get_strength(PfAttnCtx *self, void *c) { PF_UNUSED(c); return PyFloat_FromDouble(self->strength); }
static PyObject *get_rate(PfAttnCtx *self, void *c) { PF_UNUSED(c); return PyFloat_FromDouble(self->update_rate); }
static int set_strength(PfAttnCtx *self, PyObject *v, void *c)
{
    PF_UNUSED(c);
    if (!v) {
        PyErr_SetString(PyExc_AttributeError, "cannot delete 'strength'");
        return -1;
    }
    double d;
    if (parse_finite(v, "strength", &d) < 0 || ctx_acquire(self, "strength") < 0)
        return -1;
    self->strength = d;
    ctx_release(self);
    return 0;
}
static int set_rate(PfAttnCtx *self, PyObject *v, void *c)
{
    PF_UNUSED(c);
    if (!v) {
        PyErr_SetString(PyExc_AttributeError, "cannot delete 'update_rate'");
        return -1;
    }
    double d;
    if (parse_finite(v, "update_rate", &d) < 0 || ctx_acquire(self, "update_rate") < 0)
        return -1;
    self->update_rate = d;
    ctx_release(self);
    return 0;
}
static PyObject *get_embed(PfAttnCtx *self, void *c)
{
    PF_UNUSED(c);
    if (!self->embed_dim)
        Py_RETURN_NONE;
    return PyLong_FromSsize_t(self->embed_dim);
}

/* ---- update ---- */

/* outgoing ready for an update with size d: created as zeros, or checked. */
static float *outgoing_for(PfAttnCtx *self, Py_ssize_t d, const char *fn)
{
    if (self->outgoing) {
        if (self->outgoing->shape[0] != d) {
            PyErr_Format(PyExc_ValueError,
                         "%s: the inputs give D = %zd but outgoing is %zd x %zd (D = min(columns, embed_dim)); "
                         "set outgoing = None to start a new context",
                         fn, d, self->outgoing->shape[0], self->outgoing->shape[0]);
            return NULL;
        }
        return (float *)self->outgoing->data;
    }
    Py_ssize_t shape[2] = {d, d};
    self->outgoing = pf_array_zeros(PF_DT_F32, 2, shape);
    return self->outgoing ? (float *)self->outgoing->data : NULL;
}

static PyObject *PfAttnCtx_update(PfAttnCtx *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"x", "y", NULL};
    PyObject *xo, *yo;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO:update_outgoing", kwlist, &xo, &yo))
        return NULL;
    if (!(self->update_rate > 0.0))
        Py_RETURN_NONE; /* spec: return if r <= 0 */
    PfArray *x = as_f32(xo, 0, "x"), *y = x ? as_f32(yo, 0, "y") : NULL;
    PyObject *ret = NULL;
    int locked = 0;
    if (!x || !y)
        goto done;
    if (x->ndim < 2 || y->ndim < 2) {
        PyErr_Format(PyExc_ValueError, "argument '%s': expected (T, D) rows (got %d dimensions); use "
                     "update_outgoing_step for one vector", x->ndim < 2 ? "x" : "y", x->ndim < 2 ? x->ndim : y->ndim);
        goto done;
    }
    Py_ssize_t dx = x->shape[x->ndim - 1], dy = y->shape[y->ndim - 1];
    if (dx < 1 || dy < 1) {
        PyErr_Format(PyExc_ValueError, "argument '%s': needs at least one column", dx < 1 ? "x" : "y");
        goto done;
    }
    /* leading dimensions are flattened into rows */
    Py_ssize_t tx = (Py_ssize_t)(pf_array_size(x) / (size_t)dx), ty = (Py_ssize_t)(pf_array_size(y) / (size_t)dy);
    Py_ssize_t t = tx < ty ? tx : ty, d = dx < dy ? dx : dy;
    if (ctx_acquire(self, "update_outgoing") < 0)
        goto done;
    locked = 1;
    if (!(self->update_rate > 0.0)) { /* changed by another thread meanwhile */
        ret = Py_NewRef(Py_None);
        goto done;
    }
    if (self->embed_dim && self->embed_dim < d)
        d = self->embed_dim;
    if (t == 0) {
        ret = Py_None;
        Py_INCREF(ret);
        goto done;
    }
    float *o = outgoing_for(self, d, "update_outgoing");
    if (!o)
        goto done;
    int st;
    double rate = self->update_rate;
    Py_BEGIN_ALLOW_THREADS
    st = pf_attn_update(&self->ws, o, d, (const float *)x->data, dx, (const float *)y->data, dy, t, rate);
    Py_END_ALLOW_THREADS
    if (st) {
        pf_raise_status(st, "update_outgoing");
        goto done;
    }
    ret = Py_None;
    Py_INCREF(ret);
done:
    if (locked)
        ctx_release(self);
    Py_XDECREF(x);
    Py_XDECREF(y);
    return ret;
}

static PyObject *PfAttnCtx_update_step(PfAttnCtx *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"x_vec", "y_vec", NULL};
    PyObject *xo, *yo;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO:update_outgoing_step", kwlist, &xo, &yo))
        return NULL;
    if (!(self->update_rate > 0.0))
        Py_RETURN_NONE;
    PfArray *x = as_f32(xo, 0, "x_vec"), *y = x ? as_f32(yo, 0, "y_vec") : NULL;
    PyObject *ret = NULL;
    int locked = 0;
    if (!x || !y)
        goto done;
    if (x->ndim != 1 || y->ndim != 1) {
        PyErr_Format(PyExc_ValueError, "argument '%s': expected a vector (D,), got %d dimensions",
                     x->ndim != 1 ? "x_vec" : "y_vec", x->ndim != 1 ? x->ndim : y->ndim);
        goto done;
    }
    Py_ssize_t d = x->shape[0] < y->shape[0] ? x->shape[0] : y->shape[0];
    if (d < 1) {
        PyErr_Format(PyExc_ValueError, "argument '%s': needs at least one element", x->shape[0] < 1 ? "x_vec" : "y_vec");
        goto done;
    }
    if (ctx_acquire(self, "update_outgoing_step") < 0)
        goto done;
    locked = 1;
    if (!(self->update_rate > 0.0)) { /* changed by another thread meanwhile */
        ret = Py_NewRef(Py_None);
        goto done;
    }
    if (self->embed_dim && self->embed_dim < d)
        d = self->embed_dim;
    float *o = outgoing_for(self, d, "update_outgoing_step");
    if (!o)
        goto done;
    int st;
    double rate = self->update_rate;
    Py_BEGIN_ALLOW_THREADS
    st = pf_attn_update_step(&self->ws, o, d, (const float *)x->data, (const float *)y->data, rate);
    Py_END_ALLOW_THREADS
    if (st) {
        pf_raise_status(st, "update_outgoing_step");
        goto done;
    }
    ret = Py_None;
    Py_INCREF(ret);
done:
    if (locked)
        ctx_release(self);
    Py_XDECREF(x);
    Py_XDECREF(y);
    return ret;
}

/* ---- apply ---- */

/* xw = pyfastpim.dpe_matmul(x (t, d), incoming, engine, **slice_kwargs), as a
 * float32 (t, d) view. The caller holds the context's guard while Python code
 * runs here (a reentrant call on the context from that code raises). */
static PfArray *engine_product(PfArray *incoming, PfArray *x, Py_ssize_t t, Py_ssize_t d, PyObject *engine,
                               PyObject *slice_kwargs)
{
    PfArray *xw = NULL, *xin = NULL;
    PyObject *mod = NULL, *fn = NULL, *np = numpy_module(), *xv = NULL, *x2 = NULL, *wv = NULL, *res = NULL;
    if (!np)
        return NULL;
    mod = PyImport_ImportModule("pyfastpim");
    if (!mod)
        goto done;
    fn = PyObject_GetAttrString(mod, "dpe_matmul");
    if (!fn) {
        if (PyErr_ExceptionMatches(PyExc_AttributeError)) {
            PyErr_Clear();
            PyErr_SetString(PyExc_NotImplementedError,
                            "argument 'engine': pyfastpim.dpe_matmul (the DPE family) is not available in this build");
        }
        goto done;
    }
    size_t n = (size_t)t * (size_t)d;
    if (pf_attn_has_nonfinite((const float *)x->data, n)) {
        /* the crossbar sees the sanitized input, as the sgemm path does */
        Py_ssize_t shape[2] = {t, d};
        xin = pf_array_new(PF_DT_F32, 2, shape);
        if (!xin)
            goto done;
        pf_attn_sanitize((float *)xin->data, (const float *)x->data, n);
    } else {
        xin = x;
        Py_INCREF(xin);
    }
    xv = PyObject_CallMethod(np, "asarray", "O", (PyObject *)xin);
    x2 = xv ? PyObject_CallMethod(xv, "reshape", "nn", t, d) : NULL;
    wv = x2 ? PyObject_CallMethod(np, "asarray", "O", (PyObject *)incoming) : NULL;
    if (!wv)
        goto done;
    PyObject *call_args = PyTuple_Pack(3, x2, wv, engine);
    if (!call_args)
        goto done;
    res = PyObject_Call(fn, call_args, slice_kwargs);
    Py_DECREF(call_args);
    if (!res)
        goto done;
    xw = as_f32(res, 0, "dpe_matmul result");
    if (xw && (xw->ndim != 2 || xw->shape[0] != t || xw->shape[1] != d)) {
        PyObject *s = shape_str(xw);
        if (s)
            PyErr_Format(PyExc_ValueError, "dpe_matmul returned shape %R, expected (%zd, %zd)", s, t, d);
        Py_XDECREF(s);
        Py_CLEAR(xw);
    }
done:
    Py_XDECREF(mod);
    Py_XDECREF(fn);
    Py_XDECREF(xin);
    Py_XDECREF(xv);
    Py_XDECREF(x2);
    Py_XDECREF(wv);
    Py_XDECREF(res);
    return xw;
}

static PyObject *do_apply(PfAttnCtx *self, PyObject *args, PyObject *kwds, int step)
{
    const char *fn = step ? "apply_step" : "apply";
    const char *xname = step ? "x_vec" : "x";
    PyObject *xo = NULL, *outo = Py_None, *engine = Py_None, *kw = NULL, *ret = NULL;
    PyObject *owned[3] = {NULL, NULL, NULL};
    PfArray *x = NULL, *out = NULL, *xw = NULL, *incoming = NULL;
    int locked = 0;
    Py_ssize_t npos = PyTuple_GET_SIZE(args);
    if (npos > 3) {
        PyErr_Format(PyExc_TypeError, "%s() takes at most 3 positional arguments (%zd given)", fn, npos);
        return NULL;
    }
    if (npos > 0) xo = PyTuple_GET_ITEM(args, 0);
    if (npos > 1) outo = PyTuple_GET_ITEM(args, 1);
    if (npos > 2) engine = PyTuple_GET_ITEM(args, 2);
    if (kwds && PyDict_GET_SIZE(kwds) > 0) {
        kw = PyDict_Copy(kwds);
        if (!kw)
            return NULL;
        if (pop_kw(kw, xname, &owned[0], npos > 0, fn) < 0 || pop_kw(kw, "out", &owned[1], npos > 1, fn) < 0 ||
            pop_kw(kw, "engine", &owned[2], npos > 2, fn) < 0)
            goto done;
        if (owned[0]) xo = owned[0];
        if (owned[1]) outo = owned[1];
        if (owned[2]) engine = owned[2];
        if (PyDict_GET_SIZE(kw) == 0)
            Py_CLEAR(kw);
    }
    if (!xo) {
        PyErr_Format(PyExc_TypeError, "%s() missing required argument '%s'", fn, xname);
        goto done;
    }
    if (kw && engine == Py_None) {
        PyErr_Format(PyExc_TypeError, "%s(): slicing options %R apply only with engine=", fn, kw);
        goto done;
    }
    /* every argument is converted before the guard is taken: conversions may
     * run Python code and release the GIL */
    x = as_f32(xo, 0, xname);
    if (!x)
        goto done;
    if (step ? x->ndim != 1 : x->ndim < 1) {
        PyErr_Format(PyExc_ValueError, "argument '%s': expected %s, got %d dimensions", xname,
                     step ? "a vector (D,)" : "an array (..., D)", x->ndim);
        goto done;
    }
    if (outo != Py_None && !(out = output_for(outo, x)))
        goto done;
    if (ctx_acquire(self, fn) < 0)
        goto done;
    locked = 1;
    if (!self->incoming || self->strength == 0.0) {
        /* spec: out = x (returned as is, or copied into out=) */
        if (outo == Py_None) {
            ret = xo;
            Py_INCREF(ret);
            goto done;
        }
        if (out->data != x->data)
            memmove(out->data, x->data, pf_array_nbytes(x));
        ret = outo;
        Py_INCREF(ret);
        goto done;
    }
    incoming = (PfArray *)Py_NewRef((PyObject *)self->incoming);
    Py_ssize_t d = incoming->shape[0];
    if (x->shape[x->ndim - 1] != d) {
        PyErr_Format(PyExc_ValueError, "argument '%s': last dimension %zd does not match the context's D = %zd",
                     xname, x->shape[x->ndim - 1], d);
        goto done;
    }
    Py_ssize_t t = (Py_ssize_t)(pf_array_size(x) / (size_t)d);
    if (!out && !(out = pf_array_new(PF_DT_F32, x->ndim, x->shape)))
        goto done;
    if ((overlap(out, x) && !identical(out, x)) || overlap(out, incoming)) {
        PyErr_Format(PyExc_ValueError, "argument 'out': must not overlap the context's incoming matrix or partially "
                     "overlap '%s' (out=%s itself is allowed)", xname, xname);
        goto done;
    }
    int st = 0;
    double s = self->strength;
    if (engine != Py_None) {
        if (!(xw = engine_product(incoming, x, t, d, engine, kw)))
            goto done;
        if (overlap(xw, out) && !identical(xw, out)) {
            PyErr_SetString(PyExc_ValueError, "dpe_matmul result overlaps 'out'");
            goto done;
        }
        float scale = (float)(s / (double)d);
        Py_BEGIN_ALLOW_THREADS
        pf_attn_epilogue((float *)out->data, (const float *)x->data, (const float *)xw->data, pf_array_size(x), scale);
        Py_END_ALLOW_THREADS
    } else {
        Py_BEGIN_ALLOW_THREADS
        st = pf_attn_apply(&self->ws, (float *)out->data, (const float *)x->data, (const float *)incoming->data, t,
                           d, s);
        Py_END_ALLOW_THREADS
    }
    ctx_release(self);
    locked = 0;
    if (st) {
        pf_raise_status(st, fn);
        goto done;
    }
    if (outo != Py_None) {
        ret = outo;
        Py_INCREF(ret);
    } else {
        ret = wrap_output(out, xo);
    }
done:
    if (locked)
        ctx_release(self);
    Py_XDECREF(incoming);
    for (int i = 0; i < 3; i++)
        Py_XDECREF(owned[i]);
    Py_XDECREF(kw);
    Py_XDECREF(x);
    Py_XDECREF(out);
    Py_XDECREF(xw);
    return ret;
}

static PyObject *PfAttnCtx_apply(PfAttnCtx *self, PyObject *args, PyObject *kwds) { return do_apply(self, args, kwds, 0); }
static PyObject *PfAttnCtx_apply_step(PfAttnCtx *self, PyObject *args, PyObject *kwds)
{
    return do_apply(self, args, kwds, 1);
}

/* ---- gradients ---- */

static PyObject *PfAttnCtx_gradients(PfAttnCtx *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"x", "grad_out", "out", NULL};
    PyObject *xo, *go, *outo = Py_None, *gx = NULL, *ret = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO|O:gradients", kwlist, &xo, &go, &outo))
        return NULL;
    PfArray *x = as_f32(xo, 0, "x"), *g = x ? as_f32(go, 0, "grad_out") : NULL, *out = NULL, *incoming = NULL;
    double ds = 0.0;
    int locked = 0;
    if (!x || !g)
        goto done;
    if (x->ndim < 1 || !same_shape(x, g)) {
        PyObject *a = shape_str(x), *b = shape_str(g);
        if (a && b)
            PyErr_Format(PyExc_ValueError, "argument 'grad_out': shape %R does not match x's shape %R "
                         "(both must be (..., D))", b, a);
        Py_XDECREF(a);
        Py_XDECREF(b);
        goto done;
    }
    /* out= is converted before the guard is taken (the conversion may run Python code) */
    if (outo != Py_None && !(out = output_for(outo, g)))
        goto done;
    if (ctx_acquire(self, "gradients") < 0)
        goto done;
    locked = 1;
    if (!self->incoming) { /* apply was the identity: dx = g, ds = 0 */
        if (outo == Py_None) {
            gx = go;
            Py_INCREF(gx);
        } else {
            if (out->data != g->data)
                memmove(out->data, g->data, pf_array_nbytes(g));
            gx = outo;
            Py_INCREF(gx);
        }
        ctx_release(self);
        locked = 0;
        ret = Py_BuildValue("(Nd)", gx, 0.0);
        goto done;
    }
    incoming = (PfArray *)Py_NewRef((PyObject *)self->incoming);
    Py_ssize_t d = incoming->shape[0];
    if (x->shape[x->ndim - 1] != d) {
        PyErr_Format(PyExc_ValueError, "argument 'x': last dimension %zd does not match the context's D = %zd",
                     x->shape[x->ndim - 1], d);
        goto done;
    }
    Py_ssize_t t = (Py_ssize_t)(pf_array_size(x) / (size_t)d);
    double s = self->strength;
    int pass_g = s == 0.0 && outo == Py_None; /* apply was the identity: grad_x is g itself */
    if (!pass_g && !out && !(out = pf_array_new(PF_DT_F32, g->ndim, g->shape)))
        goto done;
    if (out && ((overlap(out, x) && !identical(out, x)) || (overlap(out, g) && !identical(out, g)) ||
                overlap(out, incoming))) {
        PyErr_SetString(PyExc_ValueError, "argument 'out': must not overlap the context's incoming matrix or "
                        "partially overlap 'x' or 'grad_out' (out=x or out=grad_out itself is allowed)");
        goto done;
    }
    int st;
    float *gxp = out ? (float *)out->data : NULL;
    Py_BEGIN_ALLOW_THREADS
    st = pf_attn_gradients(&self->ws, gxp, &ds, (const float *)x->data, (const float *)g->data,
                           (const float *)incoming->data, t, d, s);
    Py_END_ALLOW_THREADS
    ctx_release(self);
    locked = 0;
    if (st) {
        pf_raise_status(st, "gradients");
        goto done;
    }
    if (outo != Py_None || pass_g) {
        gx = pass_g ? go : outo;
        Py_INCREF(gx);
    } else if (!(gx = wrap_output(out, go))) {
        goto done;
    }
    ret = Py_BuildValue("(Nd)", gx, ds);
done:
    if (locked)
        ctx_release(self);
    Py_XDECREF(incoming);
    Py_XDECREF(x);
    Py_XDECREF(g);
    Py_XDECREF(out);
    return ret;
}

/* ---- misc ---- */

static PyObject *PfAttnCtx_memory_usage(PfAttnCtx *self, PyObject *noargs)
{
    PF_UNUSED(noargs);
    if (ctx_acquire(self, "memory_usage_bytes") < 0) /* the workspace grows with the GIL released */
        return NULL;
    size_t b = pf_attn_ws_bytes(&self->ws);
    if (self->incoming)
        b += pf_array_nbytes(self->incoming);
    if (self->outgoing)
        b += pf_array_nbytes(self->outgoing);
    ctx_release(self);
    return PyLong_FromSize_t(b);
}

/* Private API of pyfastpim.devices, whose OpenCL path runs a context's update and
 * apply on a device: _hold() takes the guard for the calling thread (waiting like
 * any call), _release() gives it back, and _held_outgoing(d, fn) returns the
 * outgoing matrix ready for an update of size d (created as zeros, or checked)
 * while the caller holds the guard. */
static PyObject *PfAttnCtx_hold(PfAttnCtx *self, PyObject *noargs)
{
    PF_UNUSED(noargs);
    if (ctx_acquire(self, "AttentionContext") < 0)
        return NULL;
    Py_RETURN_NONE;
}

static int held_by_me(PfAttnCtx *self, const char *what)
{
    if (!self->lock || self->owner != PyThread_get_thread_ident()) {
        PyErr_Format(PyExc_RuntimeError, "%s: the AttentionContext is not held by this thread", what);
        return 0;
    }
    return 1;
}

static PyObject *PfAttnCtx_unhold(PfAttnCtx *self, PyObject *noargs)
{
    PF_UNUSED(noargs);
    if (!held_by_me(self, "_release"))
        return NULL;
    ctx_release(self);
    Py_RETURN_NONE;
}

static PyObject *PfAttnCtx_held_outgoing(PfAttnCtx *self, PyObject *args)
{
    Py_ssize_t d;
    const char *fn;
    if (!PyArg_ParseTuple(args, "ns:_held_outgoing", &d, &fn))
        return NULL;
    if (!held_by_me(self, "_held_outgoing"))
        return NULL;
    if (d < 1) {
        PyErr_SetString(PyExc_ValueError, "argument 'd': must be >= 1");
        return NULL;
    }
    if (!outgoing_for(self, d, fn))
        return NULL;
    return get_matrix(self->outgoing);
}

static PyObject *PfAttnCtx_repr(PfAttnCtx *self)
{
    char buf[160];
    PyOS_snprintf(buf, sizeof buf, "AttentionContext(update_rate=%.17g, strength=%.17g, embed_dim=", self->update_rate,
                  self->strength);
    PyObject *e = get_embed(self, NULL);
    if (!e)
        return NULL;
    PyObject *r = PyUnicode_FromFormat("%s%R, incoming=%s, outgoing=%s)", buf, e,
                                       self->incoming ? "(D, D)" : "None", self->outgoing ? "(D, D)" : "None");
    Py_DECREF(e);
    return r;
}

static PyObject *pf_py_attn_tanh(PyObject *self, PyObject *arg)
{
    PF_UNUSED(self);
    PfArray *x = as_f32(arg, 0, "x");
    if (!x)
        return NULL;
    PfArray *out = pf_array_new(PF_DT_F32, x->ndim, x->shape);
    if (!out) {
        Py_DECREF(x);
        return NULL;
    }
    pf_attn_tanh((float *)out->data, (const float *)x->data, pf_array_size(x));
    Py_DECREF(x);
    PyObject *r = wrap_output(out, arg);
    Py_DECREF(out);
    return r;
}

static PyGetSetDef PfAttnCtx_getset[] = {
    {"incoming", (getter)get_incoming, (setter)set_incoming,
     "The context applied by apply(): a float32 (D, D) NumPy view of the context's buffer, or None. Assigning "
     "copies the values in (a snapshot; the buffer is reused when D is unchanged).", NULL},
    {"outgoing", (getter)get_outgoing, (setter)set_outgoing,
     "The context built by update_outgoing(): a float32 (D, D) NumPy view of the context's buffer (updated in "
     "place by later updates; copy it to keep a snapshot), or None. Assigning copies the values in.", NULL},
    {"strength", (getter)get_strength, (setter)set_strength, "Mixing strength s of apply() (a finite float).", NULL},
    {"update_rate", (getter)get_rate, (setter)set_rate, "Update rate r of update_outgoing(); r <= 0 disables it.",
     NULL},
    {"embed_dim", (getter)get_embed, NULL, "Upper bound on D for updates, or None.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef PfAttnCtx_methods[] = {
    {"update_outgoing", (PyCFunction)(void (*)(void))PfAttnCtx_update, METH_VARARGS | METH_KEYWORDS,
     "update_outgoing(x, y)\n--\n\n"
     "Blend the sampled similarity of x and y (T, D) into outgoing (spec 9):\n"
     "outgoing = (1 - r) * outgoing + r * tanh(cov / den). T = min rows, D = min(columns, embed_dim);\n"
     "leading dimensions are flattened into rows. No-op when update_rate <= 0 or T == 0. ValueError\n"
     "when D differs from an existing outgoing (assign outgoing = None to start over)."},
    {"update_outgoing_step", (PyCFunction)(void (*)(void))PfAttnCtx_update_step, METH_VARARGS | METH_KEYWORDS,
     "update_outgoing_step(x_vec, y_vec)\n--\n\n"
     "The update for one row each (T = 1): vectors are centred by the mean over their elements, and each\n"
     "one-element column has norm |x_i - mean|."},
    {"apply", (PyCFunction)(void (*)(void))PfAttnCtx_apply, METH_VARARGS | METH_KEYWORDS,
     "apply(x, out=None, engine=None, **slice_kwargs)\n--\n\n"
     "out = x + (s / D) * (x @ incoming) for x (..., D), non-finite terms of x and of the product as 0.\n"
     "Without incoming or with s == 0, returns x itself (or copies it into out=). With engine= the product\n"
     "is pyfastpim.dpe_matmul(x, incoming, engine, **slice_kwargs) on the simulated crossbar. Returns torch\n"
     "for torch x, NumPy otherwise, or out (float32, shape of x; out=x is allowed)."},
    {"apply_step", (PyCFunction)(void (*)(void))PfAttnCtx_apply_step, METH_VARARGS | METH_KEYWORDS,
     "apply_step(x_vec, out=None, engine=None, **slice_kwargs)\n--\n\napply() for one vector (D,)."},
    {"gradients", (PyCFunction)(void (*)(void))PfAttnCtx_gradients, METH_VARARGS | METH_KEYWORDS,
     "gradients(x, grad_out, out=None)\n--\n\n"
     "(grad_x, grad_strength) of apply(x) for the upstream gradient grad_out:\n"
     "grad_strength = (1/D) * sum(g * (x @ incoming)) (float64), grad_x = g + (s/D) * (g @ incoming.T),\n"
     "non-finite terms as 0; grad_x = g and grad_strength = 0 without incoming; grad_x = g when s == 0."},
    {"_hold", (PyCFunction)PfAttnCtx_hold, METH_NOARGS,
     "_hold()\n--\n\nPrivate (pyfastpim.devices): take the context's guard for this thread."},
    {"_release", (PyCFunction)PfAttnCtx_unhold, METH_NOARGS,
     "_release()\n--\n\nPrivate (pyfastpim.devices): give back the guard taken by _hold()."},
    {"_held_outgoing", (PyCFunction)PfAttnCtx_held_outgoing, METH_VARARGS,
     "_held_outgoing(d, fn)\n--\n\nPrivate (pyfastpim.devices): outgoing ready for an update of size d, guard held."},
    {"memory_usage_bytes", (PyCFunction)PfAttnCtx_memory_usage, METH_NOARGS,
     "memory_usage_bytes()\n--\n\nBytes held by the context: incoming, outgoing and the reusable workspace."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject PfAttnCtx_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "pyfastpim.AttentionContext",
    .tp_basicsize = sizeof(PfAttnCtx),
    .tp_dealloc = (destructor)PfAttnCtx_dealloc,
    .tp_repr = (reprfunc)PfAttnCtx_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "AttentionContext(update_rate=0.01, strength=0.0, embed_dim=None)\n--\n\n"
              "Similarity context shared between transformer / diffusion layers (spec section 9).\n"
              "Calls allocate nothing after the first with the same shapes (the workspace is reused).",
    .tp_methods = PfAttnCtx_methods,
    .tp_getset = PfAttnCtx_getset,
    .tp_init = (initproc)PfAttnCtx_init,
    .tp_new = PfAttnCtx_new,
    .tp_weaklistoffset = offsetof(PfAttnCtx, weakreflist),
};

static PyMethodDef attn_functions[] = {
    {"_attention_tanh", pf_py_attn_tanh, METH_O, "The update kernels' float32 tanh (for accuracy tests)."},
    {NULL, NULL, 0, NULL},
};

int pf_bind_attention_init(PyObject *module)
{
    if (PyType_Ready(&PfAttnCtx_Type) < 0)
        return -1;
    Py_INCREF(&PfAttnCtx_Type);
    if (PyModule_AddObject(module, "AttentionContext", (PyObject *)&PfAttnCtx_Type) < 0) {
        Py_DECREF(&PfAttnCtx_Type);
        return -1;
    }
    return PyModule_AddFunctions(module, attn_functions);
}
