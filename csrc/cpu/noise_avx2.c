/* AVX2 + FMA instance of the normal generator and exp (noise_simd.h): 8
 * Philox groups per block, SLEEF's algorithms inline (sleef_fma8.h). Only
 * called through the AVX2 kernel table. */
#pragma GCC target("avx2,fma")
#include <immintrin.h>
#include <sleef.h>

#include "cpu/sleef_fma8.h"

#define PF_NORMALS_FN pf_normal_groups_avx2
#define PF_EXP_FN pf_exp_inplace_avx2
#define VW 8
#define IVEC __m256i
#define FVEC __m256
#define I_SET1(x) _mm256_set1_epi32(x)
#define I_ADD(a, b) _mm256_add_epi32((a), (b))
#define I_XOR(a, b) _mm256_xor_si256((a), (b))
#define I_LANES() _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)
#define I_MUL_EVEN(a, b) _mm256_mul_epu32((a), (b))
#define I_SRL64(a, n) _mm256_srli_epi64((a), (n))
#define I_MULLO(a, b) _mm256_mullo_epi32((a), (b))
#define I_SRL32(a, n) _mm256_srli_epi32((a), (n))
#define I_BLEND_ODD(a, b) _mm256_blend_epi32((a), (b), 0xAA)
#define I_CARRY(hi, lo, base)                                                                                        \
    _mm256_sub_epi32((hi), _mm256_cmpgt_epi32(_mm256_xor_si256((base), _mm256_set1_epi32(INT32_MIN)),              \
                                              _mm256_xor_si256((lo), _mm256_set1_epi32(INT32_MIN))))
#define F_CVT(i) _mm256_cvtepi32_ps(i)
#define F_SET1(x) _mm256_set1_ps(x)
#define F_ADD(a, b) _mm256_add_ps((a), (b))
#define F_MUL(a, b) _mm256_mul_ps((a), (b))
#define F_SQRT(a) _mm256_sqrt_ps(a)
#define F_STORE(p, v) _mm256_store_ps((p), (v))
#define F_LOADU(p) _mm256_loadu_ps(p)
#define F_STOREU(p, v) _mm256_storeu_ps((p), (v))
#define S_LOG(v) pf_logf8_positive(v)
#define S_SINCOS(v) pf_sincosf8_small(v)
#define S_SINCOS_T pf_sincos8
#define S_EXP(v) pf_expf8(v)
#define EXP_W 8
#define EXP8(p) _mm256_storeu_ps((p), pf_expf8(_mm256_loadu_ps(p)))
/* 4 x 8 transpose: groups (v0[g], v1[g], v2[g], v3[g]) in order */
static inline void store_groups8(float *out, __m256 v0, __m256 v1, __m256 v2, __m256 v3)
{
    __m256 t0 = _mm256_unpacklo_ps(v0, v1), t1 = _mm256_unpackhi_ps(v0, v1);
    __m256 t2 = _mm256_unpacklo_ps(v2, v3), t3 = _mm256_unpackhi_ps(v2, v3);
    __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE); /* groups 0|4, 1|5 */
    __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE); /* groups 2|6, 3|7 */
    _mm256_storeu_ps(out, _mm256_permute2f128_ps(u0, u1, 0x20));
    _mm256_storeu_ps(out + 8, _mm256_permute2f128_ps(u2, u3, 0x20));
    _mm256_storeu_ps(out + 16, _mm256_permute2f128_ps(u0, u1, 0x31));
    _mm256_storeu_ps(out + 24, _mm256_permute2f128_ps(u2, u3, 0x31));
}
#define STORE_GROUPS(out, v0, v1, v2, v3) store_groups8((out), (v0), (v1), (v2), (v3))

#include "cpu/noise_simd.h"

/* A weight row's constants for its fused read-noise pass, held in registers
 * (the stores into the panels could alias the pf_read_noise they come from). */
typedef struct {
    __m256 lgs, qg, s0;
    const float *sigma;
} noisy_consts;

/* Cells [p, p + 8) of a weight row's fused read-noise pass: z their normals;
 * uniform and has_g are constants after inlining (one loop per case, no
 * per-cell test). */
static inline __attribute__((always_inline)) __m256 noisy8(const noisy_consts *k, const uint8_t *L, const float *G,
                                                           const float *z, int64_t p, int uniform, int has_g)
{
    const __m256i li = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(L + p)));
    const __m256 s = uniform ? k->s0 : _mm256_i32gather_ps(k->sigma, li, 4);
    const __m256 e = pf_expf8(_mm256_mul_ps(s, _mm256_load_ps(z)));
    const __m256 base =
        has_g ? _mm256_div_ps(_mm256_loadu_ps(G + p), k->qg) : _mm256_add_ps(_mm256_cvtepi32_ps(li), k->lgs);
    return _mm256_sub_ps(_mm256_mul_ps(base, e), k->lgs);
}

/* The last m < 8 cells from p into out[0..m): SLEEF's exp on a zero-padded run of 8, as the portable pass. */
static void noisy_tail(const pf_read_noise *r, const uint8_t *L, const float *G, const float *z, int64_t p,
                       int64_t m, float *out)
{
    _Alignas(32) float e[8] = {0};
    for (int64_t l = 0; l < m; l++)
        e[l] = r->sigma[L[p + l]] * z[l];
    _mm256_store_ps(e, pf_expf8(_mm256_load_ps(e)));
    for (int64_t l = 0; l < m; l++) {
        const float base = G ? G[p + l] / r->qg : (float)L[p + l] + r->lgs;
        out[l] = base * e[l] - r->lgs;
    }
}

#define NR PF_DPE_NR
_Static_assert(NR % 8 == 0 && 128 % NR == 0, "runs of 8 and chunks of 128 cells fill whole panels");

/* The pass over cells [0, w), 128 normals at a time, a panel of NR cells at
 * a time (runs of 8 never straddle two panels). */
static inline __attribute__((always_inline)) void noisy_row(const pf_read_noise *r, uint64_t cell0, int64_t w,
                                                            const uint8_t *L, const float *G, float *val,
                                                            size_t panel, int uniform, int has_g)
{
    _Alignas(32) float z[128];
    const noisy_consts k = {_mm256_set1_ps(r->lgs), _mm256_set1_ps(r->qg), _mm256_set1_ps(r->sigma[0]), r->sigma};
    const pf_normal_groups_fn normal_groups = r->normal_groups;
    const uint64_t seed = r->seed;
    const uint32_t call = r->call;
    float *d = val; /* the panel of cell p0 + q */
    for (int64_t p0 = 0; p0 < w; p0 += 128) {
        const int64_t m = w - p0 < 128 ? w - p0 : 128;
        normal_groups(seed, PF_STREAM_READ, call, (cell0 + (uint64_t)p0) / 4, (m + 3) / 4, z);
        int64_t q = 0;
        for (; q + NR <= m; q += NR, d += panel)
            for (int h = 0; h < NR; h += 8)
                _mm256_storeu_ps(d + h, noisy8(&k, L, G, z + q + h, p0 + q + h, uniform, has_g));
        for (; q + 8 <= m; q += 8) /* the last panel's runs of 8 (it ends the row) */
            _mm256_storeu_ps(d + q % NR, noisy8(&k, L, G, z + q, p0 + q, uniform, has_g));
        if (q < m)
            noisy_tail(r, L, G, z + q, p0 + q, m - q, d + q % NR);
    }
}

#undef NR

/* The read-noise pass of dpe_packed.c's weight rows, fused (kernels.h), 8
 * lanes; the AVX-512 table uses it too with its own normal generator (SLEEF's
 * 8- and 16-wide expf agree lane for lane). */
void pf_read_noise_values_avx2(const pf_read_noise *r, uint64_t cell0, int64_t w, const uint8_t *L, const float *G,
                               float *val, size_t panel)
{
    if (r->uniform && !G)
        noisy_row(r, cell0, w, L, G, val, panel, 1, 0);
    else if (r->uniform)
        noisy_row(r, cell0, w, L, G, val, panel, 1, 1);
    else if (!G)
        noisy_row(r, cell0, w, L, G, val, panel, 0, 0);
    else
        noisy_row(r, cell0, w, L, G, val, panel, 0, 1);
}

/* lanes of 8 where a and b differ in any bit */
static inline int64_t lanes_differing(__m256 a, __m256 b)
{
    const __m256i same = _mm256_cmpeq_epi32(_mm256_castps_si256(a), _mm256_castps_si256(b));
    return __builtin_popcount((unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(same)) ^ 0xffu);
}

/* Test hook (_core._sleef_fma8_mismatches): lanes where sleef_fma8.h differs
 * from libsleef's AVX2 functions, bit for bit. log and sincos over every
 * argument the generator can produce (u01 of each 24-bit word, 2 pi times
 * it); exp over every 61st float bit pattern of both signs, which crosses
 * every binade, subnormals, the cut-offs, infinities and NaNs. */
void pf_sleef_fma8_mismatches_avx2(int64_t counts[3])
{
    counts[0] = counts[1] = counts[2] = 0;
    const __m256i lanes = I_LANES();
    for (uint32_t w = 0; w < (1u << 24); w += 8) {
        const __m256i words = _mm256_slli_epi32(_mm256_add_epi32(_mm256_set1_epi32((int)w), lanes), 8);
        const __m256 u = u01(words), angle = _mm256_mul_ps(_mm256_set1_ps(6.283185307179586f), u);
        counts[0] += lanes_differing(Sleef_logf8_u35avx2(u), pf_logf8_positive(u));
        const Sleef___m256_2 sc_ref = Sleef_sincosf8_u35avx2(angle);
        const pf_sincos8 sc_ours = pf_sincosf8_small(angle);
        /* a lane counts once whether its sin, its cos or both differ */
        const __m256 diff = _mm256_or_ps(_mm256_xor_ps(sc_ref.x, sc_ours.x), _mm256_xor_ps(sc_ref.y, sc_ours.y));
        counts[1] += lanes_differing(diff, _mm256_setzero_ps());
    }
    const __m256i step = _mm256_mullo_epi32(lanes, _mm256_set1_epi32(61));
    for (uint64_t b = 0; b < (1ull << 32); b += 8 * 61) {
        const __m256 d = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_set1_epi32((int)(uint32_t)b), step));
        counts[2] += lanes_differing(Sleef_expf8_u10avx2(d), pf_expf8(d));
    }
}
