/* Process-level reliability: the atomic call counter behind every noise
 * counter, and fork handling.
 *
 * CallCounter: a 64-bit counter whose reserve() is one atomic fetch-and-add.
 * Engines reserve their call number with it before any kernel releases the
 * GIL, so concurrent calls from several Python threads (or, later, without a
 * GIL) never share a number and never draw the same noise.
 *
 * fork: GNU libgomp is not fork-safe. A child forked after the parent ran a
 * parallel region inherits the parent's thread pool bookkeeping but not its
 * threads, and its next parallel region waits forever for them (checked with
 * GCC 12: omp_set_num_threads(1) does not help because the kernels' num_threads
 * clauses override it). Setting max-active-levels to 0 in the child makes
 * every parallel region inactive: libgomp runs it on the calling thread alone
 * and never touches the stale pool. Forked children (multiprocessing's fork
 * start method, torch DataLoader workers) therefore run the kernels on one
 * thread, with the same results (results never depend on the thread count).
 * A child made with the spawn or forkserver start method is a fresh process
 * and keeps all threads. */
#include "python/bindings.h"
#include "cpu/threads.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <unistd.h>

#ifdef _OPENMP
#include <omp.h>
#endif

/* ---- fork ---- */

static _Atomic int g_forked; /* set in children forked after this module was loaded */

static void after_fork_child(void)
{
    atomic_store(&g_forked, 1);
#ifdef _OPENMP
    omp_set_max_active_levels(0); /* every parallel region runs on the calling thread only */
    omp_set_num_threads(1);
#endif
    pf_set_num_threads(1); /* pyfastpim's own count, so that get_num_threads() reports what runs */
}

int pf_in_forked_child(void) { return atomic_load(&g_forked); }

static PyObject *py_forked_child(PyObject *self, PyObject *noargs)
{
    (void)self;
    (void)noargs;
    return PyBool_FromLong(pf_in_forked_child());
}

/* ---- argument errors ----
 * PyArg_ParseTupleAndKeywords reports a wrong scalar as "must be real number, not tuple",
 * without saying which argument. After such a failure, this finds the first argument whose
 * format unit rejects it and prefixes its name to the message. Format units handled: the
 * single-letter scalar codes; 'O' never fails; '|' and ':' are skipped. */
/* Whether the pending exception's message starts with "argument '" (or is PyArg's "missing required
 * argument '...'" / "got an unexpected keyword argument '...'" form, which names it too). */
static int already_named(void)
{
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    PyErr_NormalizeException(&et, &ev, &tb);
    PyObject *str = ev ? PyObject_Str(ev) : NULL;
    const char *msg = str ? PyUnicode_AsUTF8(str) : NULL;
    int named = msg && (strncmp(msg, "argument '", 10) == 0 || strstr(msg, "argument '") != NULL);
    if (!msg)
        PyErr_Clear();
    Py_XDECREF(str);
    PyErr_Restore(et, ev, tb);
    return named;
}

void pf_name_parse_error(PyObject *args, PyObject *kwds, const char *format, char **kwlist)
{
    if (!PyErr_Occurred() || !(PyErr_ExceptionMatches(PyExc_TypeError) || PyErr_ExceptionMatches(PyExc_ValueError) ||
                               PyErr_ExceptionMatches(PyExc_OverflowError)))
        return;
    if (already_named())
        return; /* a converter (convert.c) named its argument */
    Py_ssize_t npos = args ? PyTuple_GET_SIZE(args) : 0;
    int k = 0;
    for (const char *f = format; *f && *f != ':' && *f != ';' && kwlist[k]; f++) {
        if (*f == '|' || *f == '$' || *f == '&')
            continue; /* markers; "O&" is one argument */
        PyObject *obj = k < npos ? PyTuple_GET_ITEM(args, k) : (kwds ? PyDict_GetItemString(kwds, kwlist[k]) : NULL);
        const char *name = kwlist[k++];
        if (!obj || *f == 'O')
            continue;
        char unit[2] = {*f, 0};
        union { long long ll; double d; unsigned long long ull; Py_ssize_t n; int i; } tmp;
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        PyObject *one = PyTuple_Pack(1, obj);
        int ok = one && PyArg_ParseTuple(one, unit, &tmp);
        Py_XDECREF(one);
        if (ok) {
            PyErr_Restore(et, ev, tb);
            continue;
        }
        PyObject *e2t, *e2v, *e2tb;
        PyErr_Fetch(&e2t, &e2v, &e2tb);
        PyErr_NormalizeException(&e2t, &e2v, &e2tb);
        PyErr_Format(e2t ? e2t : et, "argument '%s': %S", name, e2v ? e2v : (ev ? ev : Py_None));
        Py_XDECREF(e2t);
        Py_XDECREF(e2v);
        Py_XDECREF(e2tb);
        Py_XDECREF(et);
        Py_XDECREF(ev);
        Py_XDECREF(tb);
        return;
    }
}

/* ---- CallCounter ---- */

typedef struct {
    PyObject_HEAD
    _Atomic uint64_t value;
} PfCallCounter;

static int counter_value_from(PyObject *obj, uint64_t *out)
{
    if (!PyLong_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "argument 'calls': expected an int, got %s", Py_TYPE(obj)->tp_name);
        return -1;
    }
    unsigned long long v = PyLong_AsUnsignedLongLong(obj);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        PyErr_SetString(PyExc_ValueError, "argument 'calls': expected an int in [0, 2**64)");
        return -1;
    }
    *out = (uint64_t)v;
    return 0;
}

static PyObject *PfCallCounter_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"value", NULL};
    PyObject *ov = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O:CallCounter", kwlist, &ov))
        return NULL;
    uint64_t v = 0;
    if (ov && counter_value_from(ov, &v) < 0)
        return NULL;
    PfCallCounter *self = (PfCallCounter *)type->tp_alloc(type, 0);
    if (!self)
        return NULL;
    atomic_init(&self->value, v);
    return (PyObject *)self;
}

static PyObject *PfCallCounter_reserve(PfCallCounter *self, PyObject *noargs)
{
    (void)noargs;
    /* wraps modulo 2**64 (unsigned arithmetic), 584 years at 1e9 calls/s */
    return PyLong_FromUnsignedLongLong(atomic_fetch_add(&self->value, 1));
}

static PyObject *PfCallCounter_get_value(PfCallCounter *self, void *closure)
{
    (void)closure;
    return PyLong_FromUnsignedLongLong(atomic_load(&self->value));
}

static int PfCallCounter_set_value(PfCallCounter *self, PyObject *v, void *closure)
{
    (void)closure;
    if (!v) {
        PyErr_SetString(PyExc_AttributeError, "the counter value cannot be deleted");
        return -1;
    }
    uint64_t u;
    if (counter_value_from(v, &u) < 0)
        return -1;
    atomic_store(&self->value, u);
    return 0;
}

static PyObject *PfCallCounter_reduce(PfCallCounter *self, PyObject *noargs)
{
    (void)noargs;
    return Py_BuildValue("(O(K))", (PyObject *)Py_TYPE(self), (unsigned long long)atomic_load(&self->value));
}

static PyObject *PfCallCounter_repr(PfCallCounter *self)
{
    return PyUnicode_FromFormat("CallCounter(%llu)", (unsigned long long)atomic_load(&self->value));
}

static PyMethodDef PfCallCounter_methods[] = {
    {"reserve", (PyCFunction)PfCallCounter_reserve, METH_NOARGS,
     "reserve()\n--\n\nReturn the current value and increment it, in one atomic step."},
    {"__reduce__", (PyCFunction)PfCallCounter_reduce, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef PfCallCounter_getset[] = {
    {"value", (getter)PfCallCounter_get_value, (setter)PfCallCounter_set_value,
     "The next value reserve() returns.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static void PfCallCounter_dealloc(PyObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    tp->tp_free(self);
    Py_DECREF(tp); /* instances of a heap type hold a reference to it */
}

/* A heap type built from slots (PyType_FromSpec): the one list of what CallCounter provides. */
static PyType_Slot PfCallCounter_slots[] = {
    {Py_tp_repr, (void *)PfCallCounter_repr},
    {Py_tp_dealloc, (void *)PfCallCounter_dealloc},
    {Py_tp_doc, (void *)"CallCounter(value=0)\n--\n\n"
                        "A 64-bit counter (wrapping modulo 2**64) whose reserve() is one atomic fetch-and-add: "
                        "concurrent callers always get distinct values."},
    {Py_tp_methods, PfCallCounter_methods},
    {Py_tp_getset, PfCallCounter_getset},
    {Py_tp_new, (void *)PfCallCounter_new},
    {0, NULL},
};

#ifndef Py_TPFLAGS_IMMUTABLETYPE
#define Py_TPFLAGS_IMMUTABLETYPE 0
#endif
static PyType_Spec PfCallCounter_spec = {
    .name = "pyfastpim._core.CallCounter",
    .basicsize = sizeof(PfCallCounter),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = PfCallCounter_slots,
};

static PyMethodDef process_methods[] = {
    {"forked_child", py_forked_child, METH_NOARGS,
     "forked_child()\n--\n\nTrue in a process forked after pyfastpim was imported: its kernels run on one "
     "thread (GNU libgomp's thread pool does not survive fork)."},
    {NULL, NULL, 0, NULL},
};

int pf_bind_process_init(PyObject *module)
{
    static int registered;
    if (!registered) {
        if (pthread_atfork(NULL, NULL, after_fork_child) != 0) {
            PyErr_SetString(PyExc_RuntimeError, "pthread_atfork failed");
            return -1;
        }
        registered = 1;
    }
    PyObject *type = PyType_FromSpec(&PfCallCounter_spec);
    if (!type)
        return -1;
    if (PyModule_AddObject(module, "CallCounter", type) < 0) {
        Py_DECREF(type);
        return -1;
    }
    return PyModule_AddFunctions(module, process_methods);
}
