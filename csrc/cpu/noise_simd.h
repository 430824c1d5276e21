/* The SIMD normal generator, written once for any vector width and
 * instantiated per ISA (noise_avx2.c, noise_avx512.c): Philox4x32-10 over VW
 * counter groups at once, Box-Muller with SLEEF's vector logf/sincosf (u35)
 * and the correctly rounded sqrt, exp with SLEEF's expf (u10) on every
 * element (a row's tail of fewer than 8 through EXP8 on a padded copy).
 * SLEEF builds every vector width from the same FMA algorithms, so lane for
 * lane every instance gives the portable path's bits (the AVX2 instance has
 * them inline: sleef_fma8.h).
 *
 * The includer defines, before including:
 *   PF_NORMALS_FN, PF_EXP_FN  the function names
 *   VW                        32-bit lanes per vector
 *   IVEC, FVEC                int and float vector types
 *   I_SET1(x) I_ADD(a, b) I_XOR(a, b) I_LANES() (0, 1, .., VW-1)
 *   I_MUL_EVEN(a, b)          64-bit products of the even 32-bit lanes (mul_epu32)
 *   I_MULLO(a, b)             low 32 bits of the 32-bit lane products (mullo_epi32)
 *   I_SRL64(a, n) I_SRL32(a, n)
 *   I_BLEND_ODD(a, b)         even 32-bit lanes of a, odd lanes of b
 *   I_CARRY(hi, lo, base)     hi + 1 in lanes where lo < base (unsigned: lo wrapped), else hi
 *   F_CVT(i) F_SET1(x) F_ADD(a, b) F_MUL(a, b) F_SQRT(a) F_STORE(p, v) (aligned)
 *   F_LOADU(p) F_STOREU(p, v)
 *   S_LOG(v) S_SINCOS(v) (a struct with .x = sin, .y = cos) S_EXP(v)
 *   EXP_W                     floats per S_EXP call (8 or a multiple)
 *   EXP8(p)                   SLEEF's 8-wide expf_u10 on p[0..8) in place (runs below EXP_W, the tail)
 *   STORE_GROUPS(out, v0, v1, v2, v3)  optional: out[4g + l] = v_l[g] (a transpose), else scalar */
#include "cpu/kernels.h"
#include "core/philox_noise.h"

#include <math.h>

/* The low words from one 32-bit multiply and the high words from the two
 * 64-bit products: one operation fewer than taking both from the products
 * (~4% of the normal generator on Zen 3). */
static inline void mulhilo(IVEC a, IVEC m, IVEC *hi, IVEC *lo)
{
    IVEC even = I_MUL_EVEN(a, m);
    IVEC odd = I_MUL_EVEN(I_SRL64(a, 32), m);
    *lo = I_MULLO(a, m);
    *hi = I_BLEND_ODD(I_SRL64(even, 32), odd);
}

static inline FVEC u01(IVEC w)
{
    FVEC f = F_CVT(I_SRL32(w, 8));
    return F_MUL(F_ADD(f, F_SET1(0.5f)), F_SET1(1.0f / 16777216.0f));
}

/* Philox4x32-10 of nv (a constant after inlining, at most PHILOX_VECS)
 * independent vectors of VW groups, nv * VW groups g0..: the rounds are one
 * dependent chain per vector, so interleaving vectors gives the out-of-order
 * core independent work (4 vectors: ~1.3x the normals per second of 1 on Zen 3). */
#define PHILOX_VECS 4
static inline void philox_blocks(uint64_t seed, uint32_t stream, uint32_t call, uint64_t g0, int nv,
                                 IVEC c[PHILOX_VECS][4])
{
    for (int v = 0; v < nv; v++) {
        /* 64-bit group index split into lo/hi words per lane (carry-aware) */
        const IVEC base = I_SET1((int)(uint32_t)(g0 + (uint64_t)(v * VW)));
        c[v][0] = I_ADD(base, I_LANES());
        c[v][1] = I_CARRY(I_SET1((int)(uint32_t)((g0 + (uint64_t)(v * VW)) >> 32)), c[v][0], base);
        c[v][2] = I_SET1((int)call);
        c[v][3] = I_SET1((int)stream);
    }
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    const IVEC M0 = I_SET1((int)PHILOX_M4x32_0), M1 = I_SET1((int)PHILOX_M4x32_1);
    for (int round = 0; round < 10; round++) {
        if (round > 0) {
            k0 += PHILOX_W32_0;
            k1 += PHILOX_W32_1;
        }
        const IVEC K0 = I_SET1((int)k0), K1 = I_SET1((int)k1);
        for (int v = 0; v < nv; v++) {
            IVEC hi0, lo0, hi1, lo1;
            mulhilo(c[v][0], M0, &hi0, &lo0);
            mulhilo(c[v][2], M1, &hi1, &lo1);
            c[v][0] = I_XOR(I_XOR(hi1, c[v][1]), K0);
            c[v][1] = lo1;
            c[v][2] = I_XOR(I_XOR(hi0, c[v][3]), K1);
            c[v][3] = lo0;
        }
    }
}

/* 4 normals of each lane of v[0..4) (cos, sin of pair 0, cos, sin of pair 1)
 * -> out[4 * g + l] in element order. */
static inline void store_normals(FVEC v0, FVEC v1, FVEC v2, FVEC v3, float *out)
{
#ifdef STORE_GROUPS
    STORE_GROUPS(out, v0, v1, v2, v3);
#else
    _Alignas(64) float v[4][VW];
    F_STORE(v[0], v0);
    F_STORE(v[1], v1);
    F_STORE(v[2], v2);
    F_STORE(v[3], v3);
    for (int g = 0; g < VW; g++)
        for (int l = 0; l < 4; l++)
            out[4 * g + l] = v[l][g];
#endif
}

/* nv * VW groups g0.. -> 4 * nv * VW normals in element order. Box-Muller
 * one stage at a time over the nv vectors (every log, then every sincos,
 * ...): each stage is a long dependent chain per vector, and side by side
 * the chains of independent vectors overlap (~13% faster than one vector
 * after the other on Zen 3). */
static inline void normals_block(uint64_t seed, uint32_t stream, uint32_t call, uint64_t g0, int nv, float *out)
{
    IVEC c[PHILOX_VECS][4];
    philox_blocks(seed, stream, call, g0, nv, c);
    const FVEC m2 = F_SET1(-2.0f), two_pi = F_SET1(6.283185307179586f);
    FVEC r[PHILOX_VECS][2];
    S_SINCOS_T sc[PHILOX_VECS][2];
    for (int v = 0; v < nv; v++) {
        r[v][0] = S_LOG(u01(c[v][0]));
        r[v][1] = S_LOG(u01(c[v][2]));
    }
    for (int v = 0; v < nv; v++) {
        sc[v][0] = S_SINCOS(F_MUL(two_pi, u01(c[v][1])));
        sc[v][1] = S_SINCOS(F_MUL(two_pi, u01(c[v][3])));
    }
    for (int v = 0; v < nv; v++) {
        r[v][0] = F_SQRT(F_MUL(m2, r[v][0]));
        r[v][1] = F_SQRT(F_MUL(m2, r[v][1]));
    }
    for (int v = 0; v < nv; v++) /* .y = cos, .x = sin */
        store_normals(F_MUL(r[v][0], sc[v][0].y), F_MUL(r[v][0], sc[v][0].x), F_MUL(r[v][1], sc[v][1].y),
                      F_MUL(r[v][1], sc[v][1].x), out + 4 * VW * v);
}

void PF_NORMALS_FN(uint64_t seed, uint32_t stream, uint32_t call, uint64_t group0, int64_t ngroups, float *out)
{
    int64_t q = 0;
    for (; q + PHILOX_VECS * VW <= ngroups; q += PHILOX_VECS * VW)
        normals_block(seed, stream, call, group0 + (uint64_t)q, PHILOX_VECS, out + 4 * q);
    for (; q + VW <= ngroups; q += VW) /* short runs (column chunks of the fused DPE path) */
        normals_block(seed, stream, call, group0 + (uint64_t)q, 1, out + 4 * q);
    if (q < ngroups) {
        float tmp[4 * VW];
        normals_block(seed, stream, call, group0 + (uint64_t)q, 1, tmp);
        for (int64_t e = 0; e < 4 * (ngroups - q); e++)
            out[4 * q + e] = tmp[e];
    }
}

void PF_EXP_FN(float *v, int64_t count)
{
    int64_t e = 0;
    for (; e + EXP_W <= count; e += EXP_W)
        F_STOREU(v + e, S_EXP(F_LOADU(v + e)));
    for (; e + 8 <= count; e += 8) /* runs of 8 below EXP_W: the portable path's SLEEF runs */
        EXP8(v + e);
    if (e < count) { /* the tail: one run of 8 on a zero-padded copy, lane for lane the same SLEEF bits */
        float t[8] = {0};
        for (int64_t q = e; q < count; q++)
            t[q - e] = v[q];
        EXP8(t);
        for (int64_t q = e; q < count; q++)
            v[q] = t[q - e];
    }
}
