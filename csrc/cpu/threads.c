/* Process-wide thread count of the CPU kernels (threads.h). */
#define _GNU_SOURCE
#include "cpu/threads.h"

#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

static atomic_int g_threads; /* 0: not initialized yet */
static atomic_int g_by_work = 1; /* pf_threads_by_work */

static int clamp(long n) { return n < 1 ? 1 : n > PF_MAX_THREADS ? PF_MAX_THREADS : (int)n; }

/* CPUs this process may run on (sched_getaffinity, growing the mask for
 * machines with more than CPU_SETSIZE CPUs); 0 when unknown. */
static int affinity_cpus(void)
{
    for (int ncpu = 1024; ncpu <= (1 << 20); ncpu *= 2) {
        cpu_set_t *set = CPU_ALLOC(ncpu);
        if (!set)
            return 0;
        size_t size = CPU_ALLOC_SIZE(ncpu);
        CPU_ZERO_S(size, set);
        if (sched_getaffinity(0, size, set) == 0) {
            int n = CPU_COUNT_S(size, set);
            CPU_FREE(set);
            return n;
        }
        CPU_FREE(set);
        if (errno != EINVAL)
            return 0;
    }
    return 0;
}

int pf_default_num_threads(void)
{
    const char *env = getenv("OMP_NUM_THREADS");
    if (env) {
        char *end;
        errno = 0;
        long n = strtol(env, &end, 10);
        /* a positive integer, alone or first in a list ("4" or "4,2") */
        while (*end == ' ' || *end == '\t')
            end++;
        if (errno == 0 && end != env && n >= 1 && (*end == '\0' || *end == ','))
            return clamp(n);
    }
    int n = affinity_cpus();
    if (n < 1) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        n = c > 0 ? (int)(c > PF_MAX_THREADS ? PF_MAX_THREADS : c) : 1;
    }
    return clamp(n);
}

int pf_get_num_threads(void)
{
    int n = atomic_load_explicit(&g_threads, memory_order_relaxed);
    if (n > 0)
        return n;
    int expected = 0, def = pf_default_num_threads();
    /* the first caller wins; a concurrent set_num_threads is kept */
    if (!atomic_compare_exchange_strong(&g_threads, &expected, def))
        return expected;
    return def;
}

void pf_set_num_threads(int n) { atomic_store_explicit(&g_threads, clamp(n), memory_order_relaxed); }

int pf_threads_for(double work)
{
    const int all = pf_get_num_threads();
    if (!atomic_load_explicit(&g_by_work, memory_order_relaxed))
        return all;
    const double n = work / PF_WORK_PER_THREAD; /* NaN or below 1: one thread */
    return n >= (double)all ? all : n >= 1.0 ? (int)n : 1;
}

int pf_threads_by_work(int on)
{
    return on < 0 ? atomic_load_explicit(&g_by_work, memory_order_relaxed)
                  : atomic_exchange_explicit(&g_by_work, on != 0, memory_order_relaxed);
}
