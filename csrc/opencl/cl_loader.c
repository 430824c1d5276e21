/* Run-time loading of the OpenCL ICD loader: see cl_loader.h. */
#define PF_CL_LOADER_IMPL
#include "opencl/cl_loader.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

pf_cl_api_table pf_cl_api;

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static int load_status = -1;
static char load_error[512];
static _Atomic uint64_t platform_queries; /* clGetPlatformIDs calls, for tests of forked children */
/* pid of the process whose call first reached the runtime, 0 before: set before the call, so a child forked
 * while it runs, or after it failed (a bad device number), still counts as forked (PoCL hangs there) */
static _Atomic long runtime_owner;

static void load(void)
{
    const char *name = getenv("PYFASTPIM_OPENCL_LIBRARY");
    if (!name || !name[0])
        name = PF_CL_LIBRARY;
    void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *why = dlerror();
        snprintf(load_error, sizeof load_error,
                 "the OpenCL ICD loader %s could not be loaded (%s); install it (Debian: apt install %s, plus an "
                 "OpenCL driver such as pocl-opencl-icd)",
                 name, why ? why : "not found", PF_CL_DEBIAN_PACKAGE);
        return;
    }
    pf_cl_api_table t;
    memset(&t, 0, sizeof t);
#define PF_CL_SYM(fn)                                                                                          \
    do {                                                                                                       \
        void *p_ = dlsym(lib, #fn);                                                                            \
        if (!p_) {                                                                                             \
            snprintf(load_error, sizeof load_error,                                                            \
                     "the OpenCL ICD loader %s lacks %s (an OpenCL 1.2 loader is needed; Debian: %s)", name,   \
                     #fn, PF_CL_DEBIAN_PACKAGE);                                                               \
            dlclose(lib);                                                                                      \
            return;                                                                                            \
        }                                                                                                      \
        memcpy(&t.fn, &p_, sizeof p_);                                                                         \
    } while (0);
    PF_CL_FUNCTIONS(PF_CL_SYM)
#undef PF_CL_SYM
    pf_cl_api = t; /* the library stays loaded for the life of the process */
    load_status = 0;
}

int pf_cl_load(void)
{
    pthread_once(&load_once, load);
    return load_status;
}

const char *pf_cl_loader_error(void)
{
    return load_status == 0 || !load_error[0] ? NULL : load_error;
}

cl_int pf_cl_get_platform_ids_lazy(cl_uint num_entries, cl_platform_id *platforms, cl_uint *num_platforms)
{
    atomic_fetch_add_explicit(&platform_queries, 1, memory_order_relaxed);
    if (pf_cl_load() < 0) {
        if (num_platforms)
            *num_platforms = 0;
        return -1001; /* CL_PLATFORM_NOT_FOUND_KHR */
    }
    long none = 0;
    atomic_compare_exchange_strong(&runtime_owner, &none, (long)getpid());
    return pf_cl_api.clGetPlatformIDs(num_entries, platforms, num_platforms);
}

long pf_cl_runtime_owner(void) { return atomic_load(&runtime_owner); }

uint64_t pf_cl_platform_queries(void) { return atomic_load_explicit(&platform_queries, memory_order_relaxed); }
