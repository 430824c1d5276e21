#include "cpu/cpu_features.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static _Atomic int g_limit = PF_ISA_AVX512;

pf_isa pf_detected_isa(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
        return PF_ISA_AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return PF_ISA_AVX2;
#endif
    return PF_ISA_GENERIC;
}

pf_isa pf_active_isa(void)
{
    pf_isa d = pf_detected_isa();
    int lim = atomic_load(&g_limit);
    return (int)d < lim ? d : (pf_isa)lim;
}

pf_isa pf_set_isa_limit(pf_isa limit)
{
    atomic_store(&g_limit, (int)limit);
    return pf_active_isa();
}

const char *pf_isa_name(pf_isa isa)
{
    switch (isa) {
    case PF_ISA_AVX512: return "avx512";
    case PF_ISA_AVX2: return "avx2";
    default: return "generic";
    }
}

int pf_cpu_has_fma(void)
{
    static _Atomic int cached = -1;
    int v = atomic_load(&cached);
    if (v < 0) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_cpu_init();
        v = __builtin_cpu_supports("fma") && __builtin_cpu_supports("avx");
#else
        v = 0;
#endif
        atomic_store(&cached, v);
    }
    return v;
}
