/* Bulk device noise on the CPU: the values of philox_noise.h for a run of
 * consecutive element indices, vectorized where the CPU allows (the scalar
 * and SIMD paths compute the same bits: the same SLEEF algorithms, see noise.c). */
#ifndef PF_NOISE_H
#define PF_NOISE_H

#include <stdint.h>

/* out[e] = standard normal of element idx0 + e, e in [0, count). */
void pf_normals(uint64_t seed, uint32_t stream, uint32_t call, uint64_t idx0, int64_t count, float *out);
/* v[e] = exp(v[e]) in place. */
void pf_exp_inplace(float *v, int64_t count);
/* (per-ISA instances: kernels.h) */

#endif
