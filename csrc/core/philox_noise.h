/* Counter-based device noise shared by every kernel and backend.
 *
 * Philox4x32-10 (Random123, header-only; the same header compiles as OpenCL
 * C) maps (key = engine seed, counter = element group, call number, stream)
 * to 4 independent 32-bit words, so any element's noise can be drawn by any
 * thread or device in any order: no noise array is ever materialized and
 * results do not depend on tiling or thread count.
 *
 * Element idx uses lane idx % 4 of group idx / 4. Normals come from
 * Box-Muller on the two pairs of a group: lanes 0,1 = r0*cos, r0*sin of
 * pair (w0, w1); lanes 2,3 = r1*cos, r1*sin of pair (w2, w3). */
#ifndef PF_PHILOX_NOISE_H
#define PF_PHILOX_NOISE_H

#include <Random123/philox.h>

#ifndef __OPENCL_VERSION__
#include <math.h>
#include <stdint.h>
#define PF_NOISE_INLINE static inline
#else
#define PF_NOISE_INLINE inline
typedef ulong uint64_t;
typedef uint uint32_t;
#endif

/* Streams: independent noise families of one engine. */
#define PF_STREAM_READ 0u   /* read variation, per weight cell and call */
#define PF_STREAM_VNOISE 1u /* DAC voltage noise, per input element, slice and call */
#define PF_STREAM_WRITE 2u  /* write variation, per cell, fixed per programming */
#define PF_STREAM_STUCK 3u  /* stuck-at faults, per cell, fixed per programming */

/* Seed used for weight programming (write variation, stuck-at faults) and as
 * the engine seed when none is given: programming the same weights twice
 * gives the same cells, as in MemIntelli. */
#define PF_DEFAULT_SEED 20240627u

PF_NOISE_INLINE philox4x32_ctr_t pf_philox_group(uint64_t seed, uint32_t stream, uint32_t call, uint64_t group)
{
    philox4x32_ctr_t ctr = {{(uint32_t)group, (uint32_t)(group >> 32), call, stream}};
    philox4x32_key_t key = {{(uint32_t)seed, (uint32_t)(seed >> 32)}};
    return philox4x32(ctr, key);
}

/* Uniform in (0, 1), never 0 (log-safe), from the top 24 bits. */
PF_NOISE_INLINE float pf_u01(uint32_t w)
{
    return ((float)(w >> 8) + 0.5f) * (1.0f / 16777216.0f);
}

/* Four standard normals of one group, in lane order. */
PF_NOISE_INLINE void pf_normal4(uint64_t seed, uint32_t stream, uint32_t call, uint64_t group, float out[4])
{
    philox4x32_ctr_t r = pf_philox_group(seed, stream, call, group);
    const float two_pi = 6.283185307179586f;
    float r0 = sqrt(-2.0f * log(pf_u01(r.v[0])));
    float t0 = two_pi * pf_u01(r.v[1]);
    float r1 = sqrt(-2.0f * log(pf_u01(r.v[2])));
    float t1 = two_pi * pf_u01(r.v[3]);
    out[0] = r0 * cos(t0);
    out[1] = r0 * sin(t0);
    out[2] = r1 * cos(t1);
    out[3] = r1 * sin(t1);
}

/* One standard normal for element idx. */
PF_NOISE_INLINE float pf_normal(uint64_t seed, uint32_t stream, uint32_t call, uint64_t idx)
{
    float v[4];
    pf_normal4(seed, stream, call, idx >> 2, v);
    return v[idx & 3];
}

/* One uniform in (0, 1) for element idx. */
PF_NOISE_INLINE float pf_uniform(uint64_t seed, uint32_t stream, uint32_t call, uint64_t idx)
{
    philox4x32_ctr_t r = pf_philox_group(seed, stream, call, idx >> 2);
    return pf_u01(r.v[idx & 3]);
}

#endif
