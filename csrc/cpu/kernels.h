/* One kernel table per ISA, chosen once: at the first use and again whenever
 * pf_set_isa_limit changes the active ISA (cpu_features.c). Every instance of
 * a slot computes the same bits; the table only decides how fast. */
#ifndef PF_CPU_KERNELS_H
#define PF_CPU_KERNELS_H

#include "core/dpe.h"
#include "cpu/cpu_features.h"

typedef void (*pf_dpe_tile_fn)(const pf_dpe_tile *t);
typedef void (*pf_normal_groups_fn)(uint64_t seed, uint32_t stream, uint32_t call, uint64_t group0, int64_t ngroups,
                                    float *out);

/* A product's conductance-noise constants for its weight rows
 * (dpe_packed.c: pf_dpe_read_noise_init, once per call and thread): Q_G and
 * LGS / Q_G, and with read noise on the call's key, read_sigma for every
 * uint8 level (levels past g_level - 1, never stored, read the top one: the
 * per-cell lookup needs no compare) and whether it is one value. */
typedef struct pf_read_noise pf_read_noise;
struct pf_read_noise {
    float qg, lgs;
    uint64_t seed;
    uint32_t call;
    float sigma[256];
    int uniform;
    pf_normal_groups_fn normal_groups; /* the active table's generator and fused pass (NULL: none) */
    void (*values)(const pf_read_noise *r, uint64_t cell0, int64_t w, const uint8_t *L, const float *G, float *val,
                   size_t panel);
};

/* A micro-kernel and its short instances (core/dpe.h: the first 1, 2, 4
 * rows) for a panel of few valid rows (small batches: no work on padding
 * rows); NULL: the full tile serves. */
typedef struct {
    pf_dpe_tile_fn full, short_rows[PF_SHORT_TILES];
} pf_dpe_tile_set;

/* The attention GEMM's micro-kernel (cpu/attention_gemm_simd.h: PF_ATTN_MR rows x nr columns of
 * packed B) and nr; fn NULL: the portable instance (attention_gemm.c). */
typedef void (*pf_attn_kern_fn)(int64_t kc, const float *const *a, int64_t acs, const float *b, float *c,
                                int64_t ldc, int first);
typedef struct {
    pf_attn_kern_fn fn;
    int nr;
} pf_attn_kernel;

typedef struct {
    pf_isa isa;
    /* DPE micro-kernel for integer-valued (noise-free) operands, and for
     * operands with noise (fused multiply-adds: the SIMD kernels' bits) */
    pf_dpe_tile_set exact, noisy;
    /* 4 * ngroups standard normals of Philox groups group0.. (noise.c), and
     * exp in place; the portable instances call SLEEF's scalar builds */
    pf_normal_groups_fn normal_groups;
    void (*exp_inplace)(float *v, int64_t count);
    /* Noisy values of w cells from cell0 (a multiple of 4) in one pass:
     * val[p] = base * exp(sigma[L[p]] * z) - lgs, base = G[p] / qg (G given)
     * or L[p] + lgs, z the read stream's normals; exp on SLEEF for every
     * cell (the last w % 8 as a padded run of 8, as pf_exp_inplace), so the
     * bits of the portable passes in dpe_packed.c. val[p] lies at
     * val + (p / NR) * panel + p % NR (NR = PF_DPE_NR): straight into the
     * column panels of packed weights, panel = NR for a contiguous run.
     * NULL: those passes. */
    void (*read_noise_values)(const pf_read_noise *r, uint64_t cell0, int64_t w, const uint8_t *L, const float *G,
                              float *val, size_t panel);
    pf_attn_kernel attn_gemm;
} pf_cpu_kernels;

/* The table of the active ISA. */
const pf_cpu_kernels *pf_cpu_kernels_active(void);
/* Tiles each DPE path computed with short instance s (core/dpe.h),
 * process-wide (dpe.c): the float kernels' and the integer kernels'. */
enum { PF_DPE_PATH_FLOAT, PF_DPE_PATH_INT, PF_DPE_PATHS };
uint64_t pf_dpe_short_tiles(int path, int s);
/* Adds one thread's counts of a call: once per call, not per tile (one shared line). */
void pf_dpe_count_short_tiles(int path, const uint64_t counts[PF_SHORT_TILES]);

/* Instances (dpe.c, noise.c, noise_avx2.c, noise_avx512.c). */
void pf_dpe_tile_generic_fused(const pf_dpe_tile *t);
void pf_normal_groups_generic(uint64_t seed, uint32_t stream, uint32_t call, uint64_t group0, int64_t ngroups,
                              float *out);
void pf_exp_inplace_generic(float *v, int64_t count);
void pf_normal_groups_avx2(uint64_t seed, uint32_t stream, uint32_t call, uint64_t group0, int64_t ngroups,
                           float *out);
void pf_exp_inplace_avx2(float *v, int64_t count);
void pf_read_noise_values_avx2(const pf_read_noise *r, uint64_t cell0, int64_t w, const uint8_t *L, const float *G,
                               float *val, size_t panel);
/* Test hook: counts[0..2] = lanes where the inline log, sincos and exp of
 * sleef_fma8.h differ from libsleef's (noise_avx2.c). AVX2 + FMA CPUs only. */
void pf_sleef_fma8_mismatches_avx2(int64_t counts[3]);
void pf_normal_groups_avx512(uint64_t seed, uint32_t stream, uint32_t call, uint64_t group0, int64_t ngroups,
                             float *out);
void pf_exp_inplace_avx512(float *v, int64_t count);
/* attention_gemm_avx2.c, attention_gemm_avx512.c */
void pf_attn_kern_avx2(int64_t kc, const float *const *a, int64_t acs, const float *b, float *c, int64_t ldc,
                       int first);
void pf_attn_kern_avx512(int64_t kc, const float *const *a, int64_t acs, const float *b, float *c, int64_t ldc,
                         int first);

#endif
