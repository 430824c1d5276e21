/* AVX2 + FMA micro-kernel of the fused DPE MVM: a 6 x 16 tile, 12 ymm
 * accumulators, the ADC epilogue applied per crossbar block and slice pair.
 * Same operation order as pf_dpe_tile_generic (see dpe.h), so noise-free
 * results are bit-identical across ISAs. */
#include "dpe.h"

#include <immintrin.h>
#include <string.h>

#define MR PF_DPE_MR
#define NR PF_DPE_NR

__attribute__((target("avx2,fma"))) void pf_dpe_tile_avx2(const pf_dpe_tile *t)
{
    _Alignas(32) float out[MR * NR];
    _Alignas(32) float tb[MR * NR];
    memset(out, 0, sizeof out);
    const int n = t->n;
    const __m256i zero_i = _mm256_setzero_si256();
    for (int64_t b = 0; b < t->nb; b++) {
        memset(tb, 0, sizeof tb);
        for (int i = 0; i < t->sx; i++) {
            const float *A = t->A + (b * t->sx + i) * n * MR;
            for (int j = 0; j < t->sw; j++) {
                const float *B = t->B + (b * t->sw + j) * n * NR;
                __m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps();
                __m256 c10 = _mm256_setzero_ps(), c11 = _mm256_setzero_ps();
                __m256 c20 = _mm256_setzero_ps(), c21 = _mm256_setzero_ps();
                __m256 c30 = _mm256_setzero_ps(), c31 = _mm256_setzero_ps();
                __m256 c40 = _mm256_setzero_ps(), c41 = _mm256_setzero_ps();
                __m256 c50 = _mm256_setzero_ps(), c51 = _mm256_setzero_ps();
                for (int k = 0; k < n; k++) {
                    const __m256 b0 = _mm256_load_ps(B + k * NR);
                    const __m256 b1 = _mm256_load_ps(B + k * NR + 8);
                    const float *a = A + k * MR;
                    __m256 av;
                    av = _mm256_broadcast_ss(a + 0);
                    c00 = _mm256_fmadd_ps(av, b0, c00);
                    c01 = _mm256_fmadd_ps(av, b1, c01);
                    av = _mm256_broadcast_ss(a + 1);
                    c10 = _mm256_fmadd_ps(av, b0, c10);
                    c11 = _mm256_fmadd_ps(av, b1, c11);
                    av = _mm256_broadcast_ss(a + 2);
                    c20 = _mm256_fmadd_ps(av, b0, c20);
                    c21 = _mm256_fmadd_ps(av, b1, c21);
                    av = _mm256_broadcast_ss(a + 3);
                    c30 = _mm256_fmadd_ps(av, b0, c30);
                    c31 = _mm256_fmadd_ps(av, b1, c31);
                    av = _mm256_broadcast_ss(a + 4);
                    c40 = _mm256_fmadd_ps(av, b0, c40);
                    c41 = _mm256_fmadd_ps(av, b1, c41);
                    av = _mm256_broadcast_ss(a + 5);
                    c50 = _mm256_fmadd_ps(av, b0, c50);
                    c51 = _mm256_fmadd_ps(av, b1, c51);
                }
                __m256 acc[12] = {c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51};
                const __m256 coef = _mm256_set1_ps(t->coef[i * t->sw + j]);
                const float *tab = t->adc_table ? t->adc_table[j] : NULL;
                if (tab) {
                    const __m256i hi = _mm256_set1_epi32(t->adc_table_max[j]);
                    for (int v = 0; v < 12; v++) {
                        __m256i idx = _mm256_cvttps_epi32(acc[v]);
                        idx = _mm256_min_epi32(_mm256_max_epi32(idx, zero_i), hi);
                        __m256 code = _mm256_i32gather_ps(tab, idx, 4);
                        __m256 cur = _mm256_load_ps(tb + v * 8);
                        _mm256_store_ps(tb + v * 8, _mm256_add_ps(cur, _mm256_mul_ps(code, coef)));
                    }
                } else {
                    const __m256 alpha = _mm256_set1_ps(t->alpha[j]);
                    for (int v = 0; v < 12; v++) {
                        __m256 code = _mm256_round_ps(_mm256_mul_ps(acc[v], alpha),
                                                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
                        __m256 cur = _mm256_load_ps(tb + v * 8);
                        _mm256_store_ps(tb + v * 8, _mm256_add_ps(cur, _mm256_mul_ps(code, coef)));
                    }
                }
            }
        }
        const float *rs = t->row_scale + b * MR;
        const __m256 cs0 = _mm256_loadu_ps(t->col_scale + b * NR);
        const __m256 cs1 = _mm256_loadu_ps(t->col_scale + b * NR + 8);
        for (int r = 0; r < MR; r++) {
            const __m256 rv = _mm256_broadcast_ss(rs + r);
            __m256 s0 = _mm256_mul_ps(rv, cs0), s1 = _mm256_mul_ps(rv, cs1);
            __m256 o0 = _mm256_load_ps(out + r * NR), o1 = _mm256_load_ps(out + r * NR + 8);
            _mm256_store_ps(out + r * NR, _mm256_add_ps(o0, _mm256_mul_ps(_mm256_load_ps(tb + r * NR), s0)));
            _mm256_store_ps(out + r * NR + 8, _mm256_add_ps(o1, _mm256_mul_ps(_mm256_load_ps(tb + r * NR + 8), s1)));
        }
    }
    if (t->ldc == 1 && t->nr_valid == NR) {
        for (int r = 0; r < t->mr_valid; r++)
            memcpy(t->out + r * t->ldr, out + r * NR, NR * sizeof(float));
        return;
    }
    for (int r = 0; r < t->mr_valid; r++)
        for (int c = 0; c < t->nr_valid; c++)
            t->out[r * t->ldr + c * t->ldc] = out[r * NR + c];
}
