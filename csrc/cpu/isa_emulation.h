/* Test builds only (make test-isa-emulation, -DPF_ISA_EMULATION): the AVX-512, AVX-512 VNNI and
 * AVX-VNNI kernel instances compiled against SIMDe (libsimde-dev), which implements each of
 * those intrinsics with AVX2 + FMA, so that their loop nests, short instances and epilogues run,
 * and are checked bit for bit against the reference, on a CPU without those extensions. What
 * this cannot check is the instruction selection and speed; the regular build is unchanged.
 *
 * Included by an instance file in place of its `#pragma GCC target` and <immintrin.h>. */
#ifndef PF_ISA_EMULATION_H
#define PF_ISA_EMULATION_H

/* AVX2 + FMA underneath: SIMDe then splits each 512-bit operation into two native 256-bit ones,
 * FMAs included, so float results round as the hardware instruction would. */
#pragma GCC target("avx2,fma")
#include <immintrin.h>
#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>
#include <sleef.h>

#include <stdint.h>

/* AVX-VNNI's VEX vpdpbusd computes what the AVX512VL form does: SIMDe has only the latter. */
#define _mm256_dpbusd_avx_epi32(acc, a, b) simde_mm256_dpbusd_epi32((acc), (a), (b))

/* What SIMDe 0.7.4 lacks or gets wrong, each as the instruction's definition, through memory. */

/* no AVX-512 gathers */
static inline simde__m512 pf_emu_i32gather_ps(simde__m512i index, const float *base, int scale)
{
    int32_t i[16];
    float r[16];
    simde_mm512_storeu_si512(i, index);
    for (int l = 0; l < 16; l++)
        r[l] = *(const float *)((const char *)base + (int64_t)i[l] * scale);
    return simde_mm512_loadu_ps(r);
}
#undef _mm512_i32gather_ps
#define _mm512_i32gather_ps(index, base, scale) pf_emu_i32gather_ps((index), (const float *)(base), (scale))

/* no 512-bit int32 <-> float conversions: AVX2's per half */
static inline simde__m512i pf_emu_cvttps_epi32(simde__m512 v)
{
    float f[16];
    int32_t i[16];
    simde_mm512_storeu_ps(f, v);
    _mm256_storeu_si256((__m256i *)i, _mm256_cvttps_epi32(_mm256_loadu_ps(f)));
    _mm256_storeu_si256((__m256i *)(i + 8), _mm256_cvttps_epi32(_mm256_loadu_ps(f + 8)));
    return simde_mm512_loadu_si512(i);
}
#undef _mm512_cvttps_epi32
#define _mm512_cvttps_epi32(v) pf_emu_cvttps_epi32(v)

static inline simde__m512 pf_emu_cvtepi32_ps(simde__m512i v)
{
    int32_t i[16];
    float f[16];
    simde_mm512_storeu_si512(i, v);
    _mm256_storeu_ps(f, _mm256_cvtepi32_ps(_mm256_loadu_si256((const __m256i *)i)));
    _mm256_storeu_ps(f + 8, _mm256_cvtepi32_ps(_mm256_loadu_si256((const __m256i *)(i + 8))));
    return simde_mm512_loadu_ps(f);
}
#undef _mm512_cvtepi32_ps
#define _mm512_cvtepi32_ps(v) pf_emu_cvtepi32_ps(v)

/* no unsigned compare into a mask */
static inline simde__mmask16 pf_emu_cmplt_epu32_mask(simde__m512i a, simde__m512i b)
{
    uint32_t x[16], y[16];
    simde_mm512_storeu_si512(x, a);
    simde_mm512_storeu_si512(y, b);
    simde__mmask16 m = 0;
    for (int l = 0; l < 16; l++)
        m |= (simde__mmask16)((x[l] < y[l]) << l);
    return m;
}
#undef _mm512_cmplt_epu32_mask
#define _mm512_cmplt_epu32_mask(a, b) pf_emu_cmplt_epu32_mask((a), (b))

/* its 32-bit multiply is a signed C multiply, undefined behaviour (a UBSan report) where the
 * instruction wraps */
static inline simde__m512i pf_emu_mullo_epi32(simde__m512i a, simde__m512i b)
{
    uint32_t x[16], y[16];
    simde_mm512_storeu_si512(x, a);
    simde_mm512_storeu_si512(y, b);
    for (int l = 0; l < 16; l++)
        x[l] *= y[l];
    return simde_mm512_loadu_si512(x);
}
#undef _mm512_mullo_epi32
#define _mm512_mullo_epi32(a, b) pf_emu_mullo_epi32((a), (b))

/* libsleef's AVX-512F builds need the CPU: its AVX2 builds of the same algorithms, per half (the
 * AVX2 and AVX-512 instances of the normal generator give the same bits on a CPU that has both:
 * tests/backends/test_noise_isa.py). */
static inline void pf_emu_split(simde__m512 v, __m256 *lo, __m256 *hi)
{
    float f[16];
    simde_mm512_storeu_ps(f, v);
    *lo = _mm256_loadu_ps(f);
    *hi = _mm256_loadu_ps(f + 8);
}

static inline simde__m512 pf_emu_join(__m256 lo, __m256 hi)
{
    float f[16];
    _mm256_storeu_ps(f, lo);
    _mm256_storeu_ps(f + 8, hi);
    return simde_mm512_loadu_ps(f);
}

#define PF_EMU_SLEEF16(name, f8)                                                                                   \
    static inline simde__m512 name(simde__m512 v)                                                                 \
    {                                                                                                              \
        __m256 lo, hi;                                                                                             \
        pf_emu_split(v, &lo, &hi);                                                                                 \
        return pf_emu_join(f8(lo), f8(hi));                                                                        \
    }
PF_EMU_SLEEF16(pf_emu_logf16_u35, Sleef_logf8_u35avx2)
PF_EMU_SLEEF16(pf_emu_expf16_u10, Sleef_expf8_u10avx2)
#undef PF_EMU_SLEEF16

typedef struct {
    simde__m512 x, y;
} pf_emu_sincos16;

static inline pf_emu_sincos16 pf_emu_sincosf16_u35(simde__m512 v)
{
    __m256 lo, hi;
    pf_emu_split(v, &lo, &hi);
    const Sleef___m256_2 l = Sleef_sincosf8_u35avx2(lo), h = Sleef_sincosf8_u35avx2(hi);
    return (pf_emu_sincos16){pf_emu_join(l.x, h.x), pf_emu_join(l.y, h.y)};
}

#endif
