/* One kernel table per ISA, chosen once: at the first use and again whenever
 * pf_set_isa_limit changes the active ISA (cpu_features.c). Every instance of
 * a slot computes the same bits; the table only decides how fast. */
#ifndef PF_CPU_KERNELS_H
#define PF_CPU_KERNELS_H

#include "core/dpe.h"
#include "cpu/cpu_features.h"

typedef void (*pf_dpe_tile_fn)(const pf_dpe_tile *t);

typedef struct {
    pf_isa isa;
    /* DPE micro-kernel for integer-valued (noise-free) operands, and for
     * operands with noise (fused multiply-adds: the SIMD kernels' bits) */
    pf_dpe_tile_fn tile_exact, tile_noisy;
    /* the same for a panel with one valid row (batch 1: no work on padding rows) */
    pf_dpe_tile_fn tile1_exact, tile1_noisy;
    /* 4 * ngroups standard normals of Philox groups group0.. (noise.c), and
     * exp in place; the portable instances call SLEEF's scalar builds */
    void (*normal_groups)(uint64_t seed, uint32_t stream, uint32_t call, uint64_t group0, int64_t ngroups,
                          float *out);
    void (*exp_inplace)(float *v, int64_t count);
} pf_cpu_kernels;

/* The table of the active ISA. */
const pf_cpu_kernels *pf_cpu_kernels_active(void);

/* Instances (dpe.c, noise.c, noise_avx2.c, noise_avx512.c). */
void pf_dpe_tile_generic_fused(const pf_dpe_tile *t);
void pf_normal_groups_generic(uint64_t seed, uint32_t stream, uint32_t call, uint64_t group0, int64_t ngroups,
                              float *out);
void pf_exp_inplace_generic(float *v, int64_t count);
void pf_normal_groups_avx2(uint64_t seed, uint32_t stream, uint32_t call, uint64_t group0, int64_t ngroups,
                           float *out);
void pf_exp_inplace_avx2(float *v, int64_t count);
void pf_normal_groups_avx512(uint64_t seed, uint32_t stream, uint32_t call, uint64_t group0, int64_t ngroups,
                             float *out);
void pf_exp_inplace_avx512(float *v, int64_t count);

#endif
