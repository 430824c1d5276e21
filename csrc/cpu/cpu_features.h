/* Runtime CPU dispatch (BLIS style): one build runs on any x86-64; kernels
 * compiled with target attributes are chosen at run time. */
#ifndef PF_CPU_FEATURES_H
#define PF_CPU_FEATURES_H

typedef enum {
    PF_ISA_GENERIC = 0, /* portable C */
    PF_ISA_AVX2 = 1,    /* AVX2 + FMA */
    PF_ISA_AVX512 = 2   /* AVX-512 F/BW/DQ/VL */
} pf_isa;

/* Tiers of set_isa_limit, in order: each includes the ones below it (as far as
 * the CPU has them). The float kernels use the base ISA of the active tier
 * (pf_active_isa); the exact integer kernels (dpe_int.c) also the VNNI tiers.
 * A CPU may have AVX-512 VNNI without AVX-VNNI (Ice Lake, Zen 4): the active
 * tier is the highest tier <= the limit whose CPUID bits are all present. */
typedef enum {
    PF_TIER_GENERIC = 0,
    PF_TIER_AVX2 = 1,      /* AVX2 + FMA */
    PF_TIER_AVXVNNI = 2,   /* AVX2 + AVX-VNNI (VEX vpdpbusd) */
    PF_TIER_AVX512 = 3,    /* AVX-512 F/BW/DQ/VL */
    PF_TIER_AVX512VNNI = 4 /* AVX-512 + AVX512_VNNI */
} pf_tier;

/* Best ISA of this CPU, capped by pf_set_isa_limit (tests use the cap to run
 * every code path on one machine). */
pf_isa pf_active_isa(void);
pf_isa pf_detected_isa(void);
/* Caps the ISA the kernels may use; returns the ISA now active. */
pf_isa pf_set_isa_limit(pf_isa limit);
const char *pf_isa_name(pf_isa isa);
pf_tier pf_active_tier(void);
pf_tier pf_detected_tier(void);
/* Caps the tier; returns the base ISA now active. */
pf_isa pf_set_tier_limit(pf_tier limit);
const char *pf_tier_name(pf_tier t);
int pf_tier_from_name(const char *name); /* -1 for an unknown name */
int pf_cpu_has_avxvnni(void);
/* The CPU has FMA (and AVX): the portable kernels may call FMA-compiled code
 * (SLEEF's scalar FMA builds, the fused portable micro-kernel) to compute the
 * same bits as the SIMD kernels. Independent of the ISA limit. */
int pf_cpu_has_fma(void);
/* 1 in the test build whose AVX-512 and VNNI instances run through SIMDe on AVX2 + FMA
 * (cpu/isa_emulation.h, make test-isa-emulation): every tier then reads as present. */
int pf_cpu_isa_emulated(void);

#endif
