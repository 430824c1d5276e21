#include "noise.h"
#include "cpu_features.h"
#include "philox_noise.h"

#include <math.h>
#include <string.h>

/* Runs of this many groups go through the SIMD generator at once. */
#define GROUP_BATCH 64

void pf_normals(uint64_t seed, uint32_t stream, uint32_t call, uint64_t idx0, int64_t count, float *out)
{
    if (count <= 0)
        return;
    int simd = pf_active_isa() >= PF_ISA_AVX2;
    uint64_t g = idx0 >> 2, g_end = (idx0 + (uint64_t)count + 3) >> 2;
    float buf[4 * GROUP_BATCH];
    int64_t e = 0;
    while (g < g_end) {
        int64_t ng = (int64_t)(g_end - g) < GROUP_BATCH ? (int64_t)(g_end - g) : GROUP_BATCH;
        if (simd)
            pf_normals_avx2(seed, stream, call, g, ng, buf);
        else
            for (int64_t q = 0; q < ng; q++)
                pf_normal4(seed, stream, call, g + (uint64_t)q, buf + 4 * q);
        /* copy the part of this batch that lies inside [idx0, idx0 + count) */
        uint64_t first = g * 4;
        for (int64_t q = 0; q < 4 * ng; q++) {
            uint64_t idx = first + (uint64_t)q;
            if (idx >= idx0 && e < count)
                out[e++] = buf[q];
        }
        g += (uint64_t)ng;
    }
}

void pf_exp_inplace(float *v, int64_t count)
{
    if (pf_active_isa() >= PF_ISA_AVX2) {
        pf_exp_inplace_avx2(v, count);
        return;
    }
    for (int64_t e = 0; e < count; e++)
        v[e] = expf(v[e]);
}
