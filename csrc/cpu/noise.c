/* Bulk device noise on the CPU (noise.h). Every ISA computes the same bits:
 * the SIMD paths (noise_simd.h: noise_avx2.c, noise_avx512.c, chosen through
 * the kernel table, kernels.h) evaluate log and sin/cos with SLEEF's FMA vector
 * algorithms (logf_u35, sincosf_u35: libsleef's AVX-512 functions, the AVX2
 * ones inline, cpu/sleef_fma8.h), sqrt with the correctly rounded
 * instruction and exp with expf_u10 (a row's tail of fewer than 8 too, padded to 8 lanes); the portable path below calls SLEEF's scalar builds of
 * the same algorithms (Sleef_*f1_*purecfma: the same FMA polynomials and
 * operation order, so lane for lane the same results) in the same places, and
 * kernels/base.cl transcribes those algorithms for OpenCL. A CPU without FMA
 * (where no SIMD path exists) uses SLEEF's non-FMA scalar builds (purec),
 * within an ulp or so of the others. */
#include "cpu/noise.h"
#include "cpu/cpu_features.h"
#include "cpu/kernels.h"
#include "core/philox_noise.h"
#include "cpu/threads.h"

#include <math.h>
#include <sleef.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* libsleef exports its FMA scalar builds; sleef.h declares them only when the
 * includer itself is compiled with FMA (FP_FAST_FMA). Called only after the
 * CPU was seen to have FMA. */
float Sleef_logf1_u35purecfma(float);
Sleef_float_2 Sleef_sincosf1_u35purecfma(float);
float Sleef_expf1_u10purecfma(float);

/* Runs of this many groups go through the SIMD generator at once. */
#define GROUP_BATCH 64

/* Four standard normals of one group, in lane order, as the SIMD instances (noise_simd.h)
 * computes each lane: r = sqrt(-2 * logf_u35(u)), (sin, cos) = sincosf_u35(2 pi u'). */
static void normal4_sleef(uint64_t seed, uint32_t stream, uint32_t call, uint64_t group, int fma, float out[4])
{
    philox4x32_ctr_t r = pf_philox_group(seed, stream, call, group);
    const float two_pi = 6.283185307179586f;
    float u0 = pf_u01(r.v[0]), a0 = two_pi * pf_u01(r.v[1]);
    float u1 = pf_u01(r.v[2]), a1 = two_pi * pf_u01(r.v[3]);
    float l0, l1;
    Sleef_float_2 sc0, sc1;
    if (fma) {
        l0 = Sleef_logf1_u35purecfma(u0);
        l1 = Sleef_logf1_u35purecfma(u1);
        sc0 = Sleef_sincosf1_u35purecfma(a0);
        sc1 = Sleef_sincosf1_u35purecfma(a1);
    } else {
        l0 = Sleef_logf1_u35purec(u0);
        l1 = Sleef_logf1_u35purec(u1);
        sc0 = Sleef_sincosf1_u35purec(a0);
        sc1 = Sleef_sincosf1_u35purec(a1);
    }
    const float r0 = sqrtf(-2.0f * l0), r1 = sqrtf(-2.0f * l1);
    out[0] = r0 * sc0.y; /* cos */
    out[1] = r0 * sc0.x; /* sin */
    out[2] = r1 * sc1.y;
    out[3] = r1 * sc1.x;
}

void pf_normal_groups_generic(uint64_t seed, uint32_t stream, uint32_t call, uint64_t group0, int64_t ngroups,
                              float *out)
{
    const int fma = pf_cpu_has_fma();
    for (int64_t q = 0; q < ngroups; q++)
        normal4_sleef(seed, stream, call, group0 + (uint64_t)q, fma, out + 4 * q);
}

static void normals_range(uint64_t seed, uint32_t stream, uint32_t call, uint64_t idx0, int64_t count, float *out)
{
    const pf_cpu_kernels *kt = pf_cpu_kernels_active();
    /* groups up to the one of the last element (idx0 + count itself may be 2**64, which wraps to 0) */
    uint64_t g = idx0 >> 2, g_end = ((idx0 + (uint64_t)(count - 1)) >> 2) + 1;
    float buf[4 * GROUP_BATCH];
    int64_t e = 0;
    while (g < g_end) {
        int64_t ng = (int64_t)(g_end - g) < GROUP_BATCH ? (int64_t)(g_end - g) : GROUP_BATCH;
        uint64_t first = g * 4;
        if (first >= idx0 && e + 4 * ng <= count) { /* whole groups inside the range: straight into out */
            kt->normal_groups(seed, stream, call, g, ng, out + e);
            e += 4 * ng;
            g += (uint64_t)ng;
            continue;
        }
        kt->normal_groups(seed, stream, call, g, ng, buf);
        /* copy the part of this batch that lies inside [idx0, idx0 + count) */
        for (int64_t q = 0; q < 4 * ng; q++) {
            uint64_t idx = first + (uint64_t)q;
            if (idx >= idx0 && e < count)
                out[e++] = buf[q];
        }
        g += (uint64_t)ng;
    }
}

/* Elements per thread's piece of a long run (counter-based: any split gives the same values). */
#define PARALLEL_PIECE ((int64_t)1 << 16)

void pf_normals(uint64_t seed, uint32_t stream, uint32_t call, uint64_t idx0, int64_t count, float *out)
{
    if (count <= 0)
        return;
#ifdef _OPENMP
    /* a long run outside a parallel region (inside one, the caller already uses every thread) */
    const int nthreads = pf_threads_for((double)count);
    if (count >= 2 * PARALLEL_PIECE && nthreads > 1 && !omp_in_parallel()) {
        const int64_t pieces = (count + PARALLEL_PIECE - 1) / PARALLEL_PIECE;
#pragma omp parallel for num_threads(nthreads) schedule(static)
        for (int64_t q = 0; q < pieces; q++) {
            const int64_t e0 = q * PARALLEL_PIECE;
            const int64_t ne = count - e0 < PARALLEL_PIECE ? count - e0 : PARALLEL_PIECE;
            normals_range(seed, stream, call, idx0 + (uint64_t)e0, ne, out + e0);
        }
        return;
    }
#endif
    normals_range(seed, stream, call, idx0, count, out);
}

void pf_exp_inplace_generic(float *v, int64_t count)
{
    /* every element with SLEEF's expf_u10, as the SIMD paths' lanes (a row's tail included: glibc's
     * expf, within 0.502 ulp, is not correctly rounded, so no other device could give its bits) */
    if (pf_cpu_has_fma())
        for (int64_t e = 0; e < count; e++)
            v[e] = Sleef_expf1_u10purecfma(v[e]);
    else
        for (int64_t e = 0; e < count; e++)
            v[e] = Sleef_expf1_u10purec(v[e]);
}

void pf_exp_inplace(float *v, int64_t count)
{
    pf_cpu_kernels_active()->exp_inplace(v, count);
}
