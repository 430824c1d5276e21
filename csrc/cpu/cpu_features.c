#include "cpu/cpu_features.h"
#include "cpu/kernels.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static _Atomic int g_limit = PF_ISA_AVX512;
static _Atomic int g_detected = -1;

static pf_isa detect(void)
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

pf_isa pf_detected_isa(void)
{
    int d = atomic_load(&g_detected);
    if (d < 0) {
        d = (int)detect();
        atomic_store(&g_detected, d);
    }
    return (pf_isa)d;
}

pf_isa pf_active_isa(void)
{
    pf_isa d = pf_detected_isa();
    int lim = atomic_load(&g_limit);
    return (int)d < lim ? d : (pf_isa)lim;
}

/* ---- kernel tables, one per ISA ---- */

static const pf_cpu_kernels k_avx512 = {PF_ISA_AVX512,         pf_dpe_tile_avx512,  pf_dpe_tile_avx512,
                                        pf_dpe_tile1_avx512,   pf_dpe_tile1_avx512, pf_normal_groups_avx512,
                                        pf_exp_inplace_avx512};
static const pf_cpu_kernels k_avx2 = {PF_ISA_AVX2,         pf_dpe_tile_avx2,  pf_dpe_tile_avx2,
                                      pf_dpe_tile1_avx2,   pf_dpe_tile1_avx2, pf_normal_groups_avx2,
                                      pf_exp_inplace_avx2};
/* portable: integer operands need no fusing; noisy ones fuse as the SIMD kernels do */
static const pf_cpu_kernels k_generic = {PF_ISA_GENERIC,           pf_dpe_tile_generic,      pf_dpe_tile_generic_fused,
                                         pf_dpe_tile_generic,      pf_dpe_tile_generic_fused, pf_normal_groups_generic,
                                         pf_exp_inplace_generic};

static const pf_cpu_kernels *table_for(pf_isa isa)
{
    return isa >= PF_ISA_AVX512 ? &k_avx512 : isa >= PF_ISA_AVX2 ? &k_avx2 : &k_generic;
}

static const pf_cpu_kernels *_Atomic g_kernels;

const pf_cpu_kernels *pf_cpu_kernels_active(void)
{
    const pf_cpu_kernels *k = atomic_load(&g_kernels);
    if (!k) { /* first use: unless pf_set_isa_limit chose meanwhile */
        const pf_cpu_kernels *none = NULL;
        atomic_compare_exchange_strong(&g_kernels, &none, table_for(pf_active_isa()));
        k = atomic_load(&g_kernels);
    }
    return k;
}

pf_isa pf_set_isa_limit(pf_isa limit)
{
    atomic_store(&g_limit, (int)limit);
    pf_isa active = pf_active_isa();
    atomic_store(&g_kernels, table_for(active));
    return active;
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
