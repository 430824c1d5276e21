/* pyfastpim._core: module definition, memory statistics, threading and CPU
 * dispatch controls. Kernel families register themselves (bindings.h). */
#include "python/array.h"
#include "python/bindings.h"
#include "python/convert.h"
#include "opencl/cl_loader.h"
#include "cpu/attention_gemm.h"
#include "cpu/cpu_features.h"
#include "cpu/dpe_int.h"
#include "cpu/kernels.h"
#include "core/memory.h"
#include "core/pf_common.h"
#include "cpu/threads.h"

static const char *g_copy_names[PF_COPY_KINDS] = {"host_copy", "dtype_conversion", "host_to_device", "device_to_host"};

static PyObject *py_memory_stats(PyObject *self, PyObject *noargs)
{
    PF_UNUSED(self);
    PF_UNUSED(noargs);
    pf_memory_stats s;
    pf_memory_get(&s);
    PyObject *d = Py_BuildValue("{s:L,s:L,s:L}", "current_bytes", (long long)s.current_bytes, "peak_bytes",
                                (long long)s.peak_bytes, "n_allocs", (long long)s.n_allocs);
    if (!d)
        return NULL;
    for (int k = 0; k < PF_COPY_KINDS; k++) {
        char key[64];
        PyObject *v = PyLong_FromLongLong(s.copies[k]);
        snprintf(key, sizeof key, "%s_count", g_copy_names[k]);
        if (!v || PyDict_SetItemString(d, key, v) < 0) {
            Py_XDECREF(v);
            Py_DECREF(d);
            return NULL;
        }
        Py_DECREF(v);
        v = PyLong_FromLongLong(s.copy_bytes[k]);
        snprintf(key, sizeof key, "%s_bytes", g_copy_names[k]);
        if (!v || PyDict_SetItemString(d, key, v) < 0) {
            Py_XDECREF(v);
            Py_DECREF(d);
            return NULL;
        }
        Py_DECREF(v);
    }
    return d;
}

static PyObject *py_memory_reset_peak(PyObject *self, PyObject *noargs)
{
    PF_UNUSED(self);
    PF_UNUSED(noargs);
    pf_memory_reset_peak();
    Py_RETURN_NONE;
}

static PyObject *py_set_num_threads(PyObject *self, PyObject *arg)
{
    PF_UNUSED(self);
    int64_t n; /* ints only (NumPy's too): no silent truncation of 2.7 or parsing of "4" */
    if (pf_as_int64(arg, "n", &n) < 0)
        return NULL;
    if (n < 1 || n > PF_MAX_THREADS) {
        PyErr_Format(PyExc_ValueError, "argument 'n': the thread count must be in 1..%d, got %lld", PF_MAX_THREADS,
                     (long long)n);
        return NULL;
    }
    pf_set_num_threads((int)n);
    Py_RETURN_NONE;
}

static PyObject *py_get_num_threads(PyObject *self, PyObject *noargs)
{
    PF_UNUSED(self);
    PF_UNUSED(noargs);
    return PyLong_FromLong(pf_get_num_threads());
}

static PyObject *py_threads_by_work(PyObject *self, PyObject *args)
{
    PF_UNUSED(self);
    pf_flag_arg on = {.name = "enabled", .value = -1};
    if (!PyArg_ParseTuple(args, "|O&:_threads_by_work", pf_conv_flag, &on))
        return NULL;
    return PyBool_FromLong(pf_threads_by_work(on.value));
}

static PyObject *py_default_num_threads(PyObject *self, PyObject *noargs)
{
    PF_UNUSED(self);
    PF_UNUSED(noargs);
    return PyLong_FromLong(pf_default_num_threads());
}

static PyObject *py_cpu_isa(PyObject *self, PyObject *noargs)
{
    PF_UNUSED(self);
    PF_UNUSED(noargs);
    return Py_BuildValue("(ss)", pf_isa_name(pf_active_isa()), pf_isa_name(pf_detected_isa()));
}

static PyObject *py_set_isa_limit(PyObject *self, PyObject *arg)
{
    PF_UNUSED(self);
    if (!PyUnicode_Check(arg)) {
        PyErr_Format(PyExc_TypeError, "argument 'isa': expected a str ('generic', 'avx2', 'avxvnni', 'avx512' or "
                     "'avx512vnni'), got %R", arg);
        return NULL;
    }
    const char *name = PyUnicode_AsUTF8(arg);
    if (!name)
        return NULL;
    const int lim = pf_tier_from_name(name);
    if (lim < 0) {
        PyErr_Format(PyExc_ValueError,
                     "argument 'isa': expected 'generic', 'avx2', 'avxvnni', 'avx512' or 'avx512vnni', got '%s'", name);
        return NULL;
    }
    return PyUnicode_FromString(pf_isa_name(pf_set_tier_limit((pf_tier)lim)));
}

static PyObject *py_cpu_tier(PyObject *self, PyObject *noargs)
{
    PF_UNUSED(self);
    PF_UNUSED(noargs);
    return Py_BuildValue("(ss)", pf_tier_name(pf_active_tier()), pf_tier_name(pf_detected_tier()));
}

static PyObject *py_sleef_fma8_mismatches(PyObject *self, PyObject *noargs)
{
    PF_UNUSED(self);
    PF_UNUSED(noargs);
    if (pf_detected_isa() < PF_ISA_AVX2)
        Py_RETURN_NONE;
    int64_t counts[3];
    Py_BEGIN_ALLOW_THREADS
    pf_sleef_fma8_mismatches_avx2(counts);
    Py_END_ALLOW_THREADS
    return Py_BuildValue("(LLL)", (long long)counts[0], (long long)counts[1], (long long)counts[2]);
}

static PyObject *py_dpe_int_path(PyObject *self, PyObject *args)
{
    PF_UNUSED(self);
    pf_flag_arg on = {.name = "enabled", .value = -1};
    if (!PyArg_ParseTuple(args, "|O&:dpe_int_path", pf_conv_flag, &on))
        return NULL;
    if (on.value >= 0)
        pf_dpe_int_set_enabled(on.value);
    return Py_BuildValue("{s:O,s:K,s:s}", "enabled", pf_dpe_int_enabled() ? Py_True : Py_False, "calls",
                         (unsigned long long)pf_dpe_int_calls(), "kernel",
                         pf_tier_name((pf_tier)pf_dpe_int_kernel_tier()));
}

/* {rows: count} of one path's short-instance tiles (core/dpe.h) */
static PyObject *short_tile_counts(int path)
{
    PyObject *d = PyDict_New();
    for (int sh = 0; d && sh < PF_SHORT_TILES; sh++) {
        PyObject *k = PyLong_FromLong(pf_short_tile_rows(sh)), *v = PyLong_FromUnsignedLongLong(pf_dpe_short_tiles(path, sh));
        if (!k || !v || PyDict_SetItem(d, k, v) < 0)
            Py_CLEAR(d);
        Py_XDECREF(k);
        Py_XDECREF(v);
    }
    return d;
}

static PyObject *py_dpe_short_tiles(PyObject *self, PyObject *noargs)
{
    PF_UNUSED(self);
    PF_UNUSED(noargs);
    PyObject *fl = short_tile_counts(PF_DPE_PATH_FLOAT), *in = fl ? short_tile_counts(PF_DPE_PATH_INT) : NULL;
    PyObject *out = in ? Py_BuildValue("{s:O,s:O}", "float", fl, "int", in) : NULL;
    Py_XDECREF(fl);
    Py_XDECREF(in);
    return out;
}

static PyObject *py_attention_gemm_calls(PyObject *self, PyObject *noargs)
{
    PF_UNUSED(self);
    PF_UNUSED(noargs);
    return Py_BuildValue("{s:K,s:K,s:K}", pf_isa_name(PF_ISA_GENERIC),
                         (unsigned long long)pf_attn_gemm_calls(PF_ISA_GENERIC), pf_isa_name(PF_ISA_AVX2),
                         (unsigned long long)pf_attn_gemm_calls(PF_ISA_AVX2), pf_isa_name(PF_ISA_AVX512),
                         (unsigned long long)pf_attn_gemm_calls(PF_ISA_AVX512));
}

static PyObject *py_cl_library_error(PyObject *self, PyObject *noargs)
{
    PF_UNUSED(self);
    PF_UNUSED(noargs);
    int st;
    Py_BEGIN_ALLOW_THREADS
    st = pf_cl_load();
    Py_END_ALLOW_THREADS
    if (st == 0)
        Py_RETURN_NONE;
    return PyUnicode_FromString(pf_cl_loader_error());
}

static PyMethodDef core_methods[] = {
    {"asarray", (PyCFunction)(void (*)(void))pf_py_asarray, METH_VARARGS | METH_KEYWORDS,
     "asarray(obj, dtype=None, writable=False)\n--\n\nView obj as a C-contiguous pyfastpim.Array."},
    {"_view", pf_py_view, METH_VARARGS,
     "_view(obj, name, dtype='float32')\n--\n\nasarray(obj, dtype) with errors naming `name`."},
    {"memory_stats", py_memory_stats, METH_NOARGS, "Counters of the core's allocations and copies."},
    {"memory_reset_peak", py_memory_reset_peak, METH_NOARGS, "Set the peak counter to the current bytes."},
    {"set_num_threads", py_set_num_threads, METH_O,
     "Set the thread count of the CPU kernels for the whole process (every calling thread)."},
    {"get_num_threads", py_get_num_threads, METH_NOARGS, "The process-wide thread count of the CPU kernels."},
    {"_threads_by_work", py_threads_by_work, METH_VARARGS,
     "_threads_by_work([enabled])\n--\n\nTest hook: whether small kernels run on fewer threads than the count "
     "(one per some tens of microseconds of work); enabled=False gives every kernel the full count. Returns the "
     "previous setting."},
    {"default_num_threads", py_default_num_threads, METH_NOARGS,
     "OMP_NUM_THREADS when it is a positive integer, else the CPUs in the process's affinity mask."},
    {"cpu_isa", py_cpu_isa, METH_NOARGS, "(active ISA, detected ISA) of the CPU kernels."},
    {"set_isa_limit", py_set_isa_limit, METH_O,
     "Cap the SIMD tier ('generic', 'avx2', 'avxvnni', 'avx512', 'avx512vnni'); returns the active base ISA."},
    {"cpu_tier", py_cpu_tier, METH_NOARGS,
     "(active, detected) tier: 'generic', 'avx2', 'avxvnni', 'avx512' or 'avx512vnni' (VNNI bits included)."},
    {"_sleef_fma8_mismatches", py_sleef_fma8_mismatches, METH_NOARGS,
     "Test hook: (log, sincos, exp) lanes where the AVX2 generator's inline SLEEF algorithms differ from "
     "libsleef's; None without AVX2."},
    {"dpe_int_path", py_dpe_int_path, METH_VARARGS,
     "dpe_int_path([enabled])\n--\n\nSwitch the exact integer path of noise-free products on or off (process-wide); "
     "returns {'enabled', 'calls' (calls that took it), 'kernel' (the integer kernel's tier)}."},
    {"dpe_short_tiles", py_dpe_short_tiles, METH_NOARGS,
     "dpe_short_tiles()\n--\n\nTest hook: {'float': {rows: tiles}, 'int': {rows: tiles}}, process-wide counts of the "
     "tiles each DPE path computed with its micro-kernel's short instance for that many rows (panels of few valid "
     "rows, such as a small batch's last one)."},
    {"attention_gemm_calls", py_attention_gemm_calls, METH_NOARGS,
     "attention_gemm_calls()\n--\n\nTest hook: {isa: calls}, process-wide counts of the attention context's "
     "products that ran that ISA's GEMM micro-kernel."},
    {"check_seed", pf_py_check_seed, METH_O,
     "check_seed(seed)\n--\n\nThe seed as every entry point reads it: an int in [0, 2**64) (None: DEFAULT_SEED); "
     "TypeError / ValueError naming 'seed' otherwise."},
    {"check_bw_e", pf_py_check_bw_e, METH_O,
     "check_bw_e(bw_e)\n--\n\nTrue for BFP (a positive int), False for INT (None or 0), as every entry point reads "
     "bw_e; TypeError (not None or an int: bool, float, str) or ValueError (negative) naming 'bw_e' otherwise."},
    {"check_rdac", pf_py_check_rdac, METH_O,
     "check_rdac(rdac)\n--\n\nThe DAC resolution as every entry point reads it: an int in 2..2**24; TypeError / "
     "ValueError naming 'rdac' otherwise."},
    {"check_radc", pf_py_check_radc, METH_O,
     "check_radc(radc)\n--\n\nThe ADC resolutions as every entry point reads them: an int, or a sequence of 1 to 16 "
     "ints (a tuple is returned), each in 2..2**24; TypeError / ValueError naming 'radc' otherwise."},
    {"check_sigma", (PyCFunction)(void (*)(void))pf_py_check_sigma, METH_VARARGS | METH_KEYWORDS,
     "check_sigma(value, name, read=False)\n--\n\nA noise sigma as the core reads it, as a float: finite and in "
     "[0, READ_VARIATION_MAX] (read=True) or [0, NOISE_SIGMA_MAX]; TypeError / ValueError naming `name` otherwise."},
    {"check_number", (PyCFunction)(void (*)(void))pf_py_check_number, METH_VARARGS | METH_KEYWORDS,
     "check_number(value, name, integer=False)\n--\n\nA scalar argument as every entry point reads it, as a float "
     "(a real number: not a bool, a str or a container) or, with integer=True, an int (not a bool or a float); "
     "TypeError naming `name` otherwise (no range check)."},
    {"check_flag", pf_py_check_flag, METH_VARARGS,
     "check_flag(value, name)\n--\n\nA flag as every entry point reads it, as a bool: True/False, a NumPy bool or an "
     "int 0/1; TypeError (a str, None, a float, NaN, a container) or ValueError (another int) naming `name` "
     "otherwise."},
    {"cl_library_error", py_cl_library_error, METH_NOARGS,
     "cl_library_error()\n--\n\nNone when the OpenCL ICD loader is loaded (it is loaded here if needed), else why not."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef core_module = {
    PyModuleDef_HEAD_INIT, "pyfastpim._core", "pyfastpim C core.", -1, core_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__core(void)
{
    PyObject *m = PyModule_Create(&core_module);
    if (!m)
        return NULL;
    (void)pf_get_num_threads(); /* fixes the default from the environment at import */
    if (pf_array_module_init(m) < 0 || pf_bind_slicing_init(m) < 0 || pf_bind_dpe_init(m) < 0 ||
        pf_bind_attention_init(m) < 0 || pf_bind_opencl_init(m) < 0 ||
        pf_bind_process_init(m) < 0 ||
        pf_bind_physics_init(m) < 0 ||
        PyModule_AddIntConstant(m, "ISA_EMULATION", pf_cpu_isa_emulated()) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
