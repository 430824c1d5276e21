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
 * and keeps all threads.
 *
 * Noise streams across fork: a forked child inherits every engine with its
 * seed and call counter, so two DataLoader workers using the same layer would
 * draw the same noise for the same call numbers. Each process therefore has a
 * noise stream: none in a process started normally (spawn included); in a
 * forked child, the parent's stream mixed with the parent's fork number (the
 * prepare handler counts forks, so sibling workers get distinct streams and
 * the same program forking in the same order gets the same streams). A
 * CallCounter remembers whether it was created in this process; one inherited
 * through fork or unpickled (spawn workers get their dataset pickled) keys its
 * noise with noise_key(seed) = mix(seed, stream) while the process has a
 * stream, and with the seed otherwise. Counters created in the process keep
 * the plain seed: an engine made in a worker with seed s behaves as one made
 * anywhere with seed s. set_noise_stream() sets the stream explicitly
 * (pyfastpim.seed_worker derives it from torch's per-worker seed). */
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
static _Atomic uint64_t g_forks;      /* forks made by this process (prepare handler) */
static _Atomic uint64_t g_stream;     /* this process's noise stream, when g_stream_on */
static _Atomic int g_stream_on;

static uint64_t splitmix64(uint64_t z)
{
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void before_fork(void) { atomic_fetch_add(&g_forks, 1); }

static void after_fork_child(void)
{
    atomic_store(&g_forked, 1);
    /* the child's stream: the parent's (or none) mixed with the parent's fork number */
    uint64_t parent = atomic_load(&g_stream_on) ? atomic_load(&g_stream) : 0;
    atomic_store(&g_stream, splitmix64(parent ^ splitmix64(atomic_load(&g_forks))));
    atomic_store(&g_stream_on, 1);
    atomic_store(&g_forks, 0);
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

static PyObject *py_noise_stream(PyObject *self, PyObject *noargs)
{
    (void)self;
    (void)noargs;
    if (!atomic_load(&g_stream_on))
        Py_RETURN_NONE;
    return PyLong_FromUnsignedLongLong(atomic_load(&g_stream));
}

static PyObject *py_set_noise_stream(PyObject *self, PyObject *arg)
{
    (void)self;
    if (arg == Py_None) {
        atomic_store(&g_stream_on, 0);
        Py_RETURN_NONE;
    }
    uint64_t v; /* the seed's rule (convert.h): a NumPy integer too, not a bool */
    if (pf_as_uint64(arg, "stream", &v) < 0)
        return NULL;
    atomic_store(&g_stream, (uint64_t)v);
    atomic_store(&g_stream_on, 1);
    Py_RETURN_NONE;
}

/* ---- CallCounter ---- */

typedef struct {
    PyObject_HEAD
    _Atomic uint64_t value;
    pid_t born_pid; /* the process that created it; 0: unpickled (made elsewhere) */
} PfCallCounter;

static int counter_value_from(PyObject *obj, uint64_t *out)
{
    return pf_as_uint64(obj, "calls", out); /* a NumPy integer too, not a bool (convert.h) */
}

static PyObject *PfCallCounter_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"value", "inherited", NULL};
    PyObject *ov = NULL;
    pf_flag_arg inherited = {.name = "inherited"};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|OO&:CallCounter", kwlist, &ov, pf_conv_flag, &inherited))
        return NULL;
    uint64_t v = 0;
    if (ov && counter_value_from(ov, &v) < 0)
        return NULL;
    PfCallCounter *self = (PfCallCounter *)type->tp_alloc(type, 0);
    if (!self)
        return NULL;
    atomic_init(&self->value, v);
    self->born_pid = inherited.value ? 0 : getpid();
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

static int counter_inherited(PfCallCounter *self) { return self->born_pid != getpid(); }

static PyObject *PfCallCounter_get_inherited(PfCallCounter *self, void *closure)
{
    (void)closure;
    return PyBool_FromLong(counter_inherited(self));
}

static PyObject *PfCallCounter_noise_key(PfCallCounter *self, PyObject *oseed)
{
    uint64_t seed;
    if (pf_as_uint64(oseed, "seed", &seed) < 0)
        return NULL;
    if (!counter_inherited(self) || !atomic_load(&g_stream_on))
        return PyLong_FromUnsignedLongLong(seed);
    /* a distinct Philox key per (seed, stream), below 2**63 like any seed the kernels take */
    uint64_t key = splitmix64((uint64_t)seed ^ splitmix64(atomic_load(&g_stream) ^ 0x6E6F697365ull));
    return PyLong_FromUnsignedLongLong(key >> 1);
}

static PyObject *PfCallCounter_reduce(PfCallCounter *self, PyObject *noargs)
{
    (void)noargs;
    /* an unpickled counter counts as inherited: its noise follows the unpickling process's stream */
    return Py_BuildValue("(O(KO))", (PyObject *)Py_TYPE(self), (unsigned long long)atomic_load(&self->value),
                         Py_True);
}

static PyObject *PfCallCounter_repr(PfCallCounter *self)
{
    return PyUnicode_FromFormat("CallCounter(%llu)", (unsigned long long)atomic_load(&self->value));
}

static PyMethodDef PfCallCounter_methods[] = {
    {"reserve", (PyCFunction)PfCallCounter_reserve, METH_NOARGS,
     "reserve()\n--\n\nReturn the current value and increment it, in one atomic step."},
    {"noise_key", (PyCFunction)PfCallCounter_noise_key, METH_O,
     "noise_key(seed)\n--\n\nThe Philox key of noisy calls: seed for a counter created in this process or "
     "while the process has no noise stream; else a key mixed from seed and the process's noise stream."},
    {"__reduce__", (PyCFunction)PfCallCounter_reduce, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef PfCallCounter_getset[] = {
    {"value", (getter)PfCallCounter_get_value, (setter)PfCallCounter_set_value,
     "The next value reserve() returns.", NULL},
    {"inherited", (getter)PfCallCounter_get_inherited, NULL,
     "True when the counter was made in another process (inherited through fork, or unpickled).", NULL},
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
    {Py_tp_doc, (void *)"CallCounter(value=0, inherited=False)\n--\n\n"
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
    {"noise_stream", py_noise_stream, METH_NOARGS,
     "noise_stream()\n--\n\nThis process's noise stream (an int), or None: set automatically in a forked child, "
     "or by set_noise_stream()."},
    {"set_noise_stream", py_set_noise_stream, METH_O,
     "set_noise_stream(stream)\n--\n\nSet this process's noise stream (an int in [0, 2**64)), or None for none."},
    {NULL, NULL, 0, NULL},
};

int pf_bind_process_init(PyObject *module)
{
    static int registered;
    if (!registered) {
        if (pthread_atfork(before_fork, NULL, after_fork_child) != 0) {
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
