/* Runtime CPU dispatch (BLIS style): one build runs on any x86-64; kernels
 * compiled with target attributes are chosen at run time. */
#ifndef PF_CPU_FEATURES_H
#define PF_CPU_FEATURES_H

typedef enum {
    PF_ISA_GENERIC = 0, /* portable C */
    PF_ISA_AVX2 = 1,    /* AVX2 + FMA */
    PF_ISA_AVX512 = 2   /* AVX-512 F/BW/DQ/VL */
} pf_isa;

/* Best ISA of this CPU, capped by pf_set_isa_limit (tests use the cap to run
 * every code path on one machine). */
pf_isa pf_active_isa(void);
pf_isa pf_detected_isa(void);
/* Caps the ISA the kernels may use; returns the ISA now active. */
pf_isa pf_set_isa_limit(pf_isa limit);
const char *pf_isa_name(pf_isa isa);
/* The CPU has FMA (and AVX): the portable kernels may call FMA-compiled code
 * (SLEEF's scalar FMA builds, the fused portable micro-kernel) to compute the
 * same bits as the SIMD kernels. Independent of the ISA limit. */
int pf_cpu_has_fma(void);

#endif
