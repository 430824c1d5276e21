#include "cpu/cpu_features.h"
#include "cpu/kernels.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* The limit is a tier (pf_tier): the float kernels use its base ISA, the
 * integer kernels (dpe_int.c) may also use the VNNI tiers. */
static _Atomic int g_limit = PF_TIER_AVX512VNNI;

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

/* CPUID.(EAX=7, ECX=1):EAX bit 4. Read directly: clang 14's __builtin_cpu_supports does not know
 * "avxvnni" (the TSan build, .ci/tsan-cc, compiles with clang). The OS state is AVX's (avx2). */
static int cpuid_avxvnni(void)
{
    unsigned int a, b, c, d;
    if (__get_cpuid_max(0, NULL) < 7)
        return 0;
    __cpuid_count(7, 1, a, b, c, d);
    return (a >> 4) & 1;
}
#endif

static int cpu_has(pf_tier t)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    const int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#ifdef PF_ISA_EMULATION /* every tier's instances run on AVX2 + FMA (cpu/isa_emulation.h) */
    if (t > PF_TIER_AVX2)
        return avx2;
#endif
    const int avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                       __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
    switch (t) {
    case PF_TIER_AVX512VNNI: return avx512 && __builtin_cpu_supports("avx512vnni");
    case PF_TIER_AVX512: return avx512;
    case PF_TIER_AVXVNNI: return avx2 && cpuid_avxvnni();
    case PF_TIER_AVX2: return avx2;
    default: return 1;
    }
#else
    return t == PF_TIER_GENERIC;
#endif
}

/* The highest tier <= cap this CPU supports. */
static pf_tier best_tier(int cap)
{
    for (int t = cap; t > PF_TIER_GENERIC; t--)
        if (cpu_has((pf_tier)t))
            return (pf_tier)t;
    return PF_TIER_GENERIC;
}

static pf_isa tier_base(pf_tier t)
{
    return t >= PF_TIER_AVX512 ? PF_ISA_AVX512 : t >= PF_TIER_AVX2 ? PF_ISA_AVX2 : PF_ISA_GENERIC;
}

pf_tier pf_detected_tier(void) { return best_tier(PF_TIER_AVX512VNNI); }
pf_tier pf_active_tier(void) { return best_tier(atomic_load(&g_limit)); }
pf_isa pf_detected_isa(void) { return tier_base(pf_detected_tier()); }
pf_isa pf_active_isa(void) { return tier_base(pf_active_tier()); }

/* ---- kernel tables, one per ISA ---- */

#define SIMD_TILES(isa) {pf_dpe_tile_##isa, {pf_dpe_tile_##isa##_r1, pf_dpe_tile_##isa##_r2, pf_dpe_tile_##isa##_r4}}
static const pf_cpu_kernels k_avx512 = {.isa = PF_ISA_AVX512,
                                        .exact = SIMD_TILES(avx512),
                                        .noisy = SIMD_TILES(avx512),
                                        .normal_groups = pf_normal_groups_avx512,
                                        .exp_inplace = pf_exp_inplace_avx512,
                                        .read_noise_values = pf_read_noise_values_avx2,
                                        .attn_gemm = {pf_attn_kern_avx512, 32}};
static const pf_cpu_kernels k_avx2 = {.isa = PF_ISA_AVX2,
                                      .exact = SIMD_TILES(avx2),
                                      .noisy = SIMD_TILES(avx2),
                                      .normal_groups = pf_normal_groups_avx2,
                                      .exp_inplace = pf_exp_inplace_avx2,
                                      .read_noise_values = pf_read_noise_values_avx2,
                                      .attn_gemm = {pf_attn_kern_avx2, 16}};
/* portable: integer operands need no fusing; noisy ones fuse as the SIMD kernels do. No short
 * instances: the reference-shaped tile stays one function. */
static const pf_cpu_kernels k_generic = {.isa = PF_ISA_GENERIC,
                                         .exact = {pf_dpe_tile_generic},
                                         .noisy = {pf_dpe_tile_generic_fused},
                                         .normal_groups = pf_normal_groups_generic,
                                         .exp_inplace = pf_exp_inplace_generic};
#undef SIMD_TILES

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
    return pf_set_tier_limit(limit == PF_ISA_AVX512 ? PF_TIER_AVX512 : limit == PF_ISA_AVX2 ? PF_TIER_AVX2
                                                                                            : PF_TIER_GENERIC);
}

pf_isa pf_set_tier_limit(pf_tier limit)
{
    atomic_store(&g_limit, (int)limit);
    pf_isa active = pf_active_isa();
    atomic_store(&g_kernels, table_for(active));
    return active;
}

int pf_cpu_has_avxvnni(void) { return cpu_has(PF_TIER_AVXVNNI); }

int pf_cpu_isa_emulated(void)
{
#ifdef PF_ISA_EMULATION
    return 1;
#else
    return 0;
#endif
}

static const char *const tier_names[] = {"generic", "avx2", "avxvnni", "avx512", "avx512vnni"};

const char *pf_tier_name(pf_tier t) { return t >= PF_TIER_GENERIC && t <= PF_TIER_AVX512VNNI ? tier_names[t] : "?"; }

int pf_tier_from_name(const char *name)
{
    for (int t = PF_TIER_GENERIC; t <= PF_TIER_AVX512VNNI; t++)
        if (strcmp(name, tier_names[t]) == 0)
            return t;
    return -1;
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
