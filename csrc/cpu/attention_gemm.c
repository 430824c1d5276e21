/* Fixed-order GEMM of the attention context; see attention_gemm.h. */
#include "cpu/attention_gemm.h"

#include "cpu/cpu_features.h"
#include "cpu/threads.h"
#include "core/pf_common.h"

#include <math.h>
#include <omp.h>
#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#define MR 6    /* rows of a micro-tile */
#define NR 16   /* columns of a micro-tile (two AVX2 vectors) */
#define MC 72   /* rows of an A block: 12 micro-panels, 72 KB of one K block (L2) */
#define KC 256  /* terms per K block: a B micro-panel's K block is 16 KB (L1) */
#define CHUNK 4 /* row panels a thread takes at a time (24 rows) */
#define PF_GEMM_FLOPS_PER_THREAD 33554432.0 /* 2^25 multiply-adds (about 1 ms of one core) per thread */

/* c (MR x NR, row stride ldc) continues its sums with kc terms: term p of row
 * r is a[r][p * acs] (A read in place: rows of an edge tile repeat a valid
 * row), b an NR-column packed panel (NR floats per term); first: start from +0
 * instead of c. */
typedef void (*kern_fn)(int64_t kc, const float *const *a, int64_t acs, const float *b, float *c, int64_t ldc,
                        int first);

PF_INLINE void kern_portable(int64_t kc, const float *const *a, int64_t acs, const float *PF_RESTRICT b,
                             float *PF_RESTRICT c, int64_t ldc, int first)
{
    float acc[MR][NR];
    for (int r = 0; r < MR; r++)
        for (int j = 0; j < NR; j++)
            acc[r][j] = first ? 0.0f : c[r * ldc + j];
    for (int64_t p = 0; p < kc; p++)
        for (int r = 0; r < MR; r++)
            for (int j = 0; j < NR; j++)
                acc[r][j] = fmaf(a[r][p * acs], b[p * NR + j], acc[r][j]);
    for (int r = 0; r < MR; r++)
        for (int j = 0; j < NR; j++)
            c[r * ldc + j] = acc[r][j];
}

/* libm's fmaf is correctly rounded: the same bits as the instruction */
static void kern_fmaf(int64_t kc, const float *const *a, int64_t acs, const float *b, float *c, int64_t ldc,
                      int first)
{
    kern_portable(kc, a, acs, b, c, ldc, first);
}

#if defined(__x86_64__) || defined(__i386__)
__attribute__((target("fma"))) static void kern_fma(int64_t kc, const float *const *a, int64_t acs,
                                                    const float *b, float *c, int64_t ldc, int first)
{
    kern_portable(kc, a, acs, b, c, ldc, first);
}

/* 12 accumulators (6 rows x 2 vectors): two loads and six broadcasts per term. */
__attribute__((target("avx2,fma"))) static void kern_avx2(int64_t kc, const float *const *a, int64_t acs,
                                                          const float *b, float *c, int64_t ldc, int first)
{
    const float *a0 = a[0], *a1 = a[1], *a2 = a[2], *a3 = a[3], *a4 = a[4], *a5 = a[5];
    for (int r = 0; r < MR; r++) { /* the tile's rows, stored at the end (and read unless first) */
        _mm_prefetch((const char *)(c + r * ldc), _MM_HINT_T0);
        _mm_prefetch((const char *)(c + r * ldc + NR - 1), _MM_HINT_T0);
    }
    __m256 acc[MR][2];
#pragma GCC unroll 6
    for (int r = 0; r < MR; r++) {
        acc[r][0] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(c + r * ldc);
        acc[r][1] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(c + r * ldc + 8);
    }
#pragma GCC unroll 4
    for (int64_t p = 0; p < kc; p++) {
        const __m256 b0 = _mm256_loadu_ps(b + p * NR), b1 = _mm256_loadu_ps(b + p * NR + 8);
        const int64_t o = p * acs;
#define PF_GEMM_ROW(r, ar)                                  \
    do {                                                    \
        const __m256 av = _mm256_broadcast_ss((ar) + o);    \
        acc[r][0] = _mm256_fmadd_ps(av, b0, acc[r][0]);     \
        acc[r][1] = _mm256_fmadd_ps(av, b1, acc[r][1]);     \
    } while (0)
        PF_GEMM_ROW(0, a0);
        PF_GEMM_ROW(1, a1);
        PF_GEMM_ROW(2, a2);
        PF_GEMM_ROW(3, a3);
        PF_GEMM_ROW(4, a4);
        PF_GEMM_ROW(5, a5);
#undef PF_GEMM_ROW
    }
#pragma GCC unroll 6
    for (int r = 0; r < MR; r++) {
        _mm256_storeu_ps(c + r * ldc, acc[r][0]);
        _mm256_storeu_ps(c + r * ldc + 8, acc[r][1]);
    }
}
#endif

static kern_fn pick_kernel(void)
{
#if defined(__x86_64__) || defined(__i386__)
    if (pf_active_isa() >= PF_ISA_AVX2)
        return kern_avx2;
    if (pf_cpu_has_fma())
        return kern_fma;
#endif
    return kern_fmaf;
}

/* B columns j0 .. j0 + nv - 1 (nv <= NR), all k terms, zero-padded to NR.
 * Reads run along B's contiguous direction: rows for cs == 1, columns for rs == 1. */
static void pack_b_panel(float *PF_RESTRICT dst, pf_gemm_operand b, int64_t j0, int64_t nv, int64_t k)
{
    if (nv < NR)
        memset(dst, 0, (size_t)k * NR * sizeof(float));
    if (b.cs == 1) {
        for (int64_t p = 0; p < k; p++)
            memcpy(dst + p * NR, b.p + p * b.rs + j0, (size_t)nv * sizeof(float));
        return;
    }
    for (int64_t j = 0; j < nv; j++) {
        const float *src = b.p + (j0 + j) * b.cs;
        for (int64_t p = 0; p < k; p++)
            dst[p * NR + j] = src[p * b.rs];
    }
}

/* One micro-tile's K block; edge tiles (mv < MR or nv < NR) go through a local tile. */
static void run_tile(kern_fn kern, int64_t kc, pf_gemm_operand a, const float *bp, float *c, int64_t ldc,
                     int64_t mv, int64_t nv, int first)
{
    const float *rows[MR];
    for (int64_t r = 0; r < MR; r++)
        rows[r] = a.p + (r < mv ? r : mv - 1) * a.rs;
    if (mv == MR && nv == NR) {
        kern(kc, rows, a.cs, bp, c, ldc, first);
        return;
    }
    float tile[MR * NR] = {0};
    for (int64_t r = 0; r < mv && !first; r++)
        memcpy(tile + r * NR, c + r * ldc, (size_t)nv * sizeof(float));
    kern(kc, rows, a.cs, bp, tile, NR, first);
    for (int64_t r = 0; r < mv; r++)
        memcpy(c + r * ldc, tile + r * NR, (size_t)nv * sizeof(float));
}

typedef struct {
    pf_gemm_operand a;
    float *bpack; /* every B panel, k * NR floats each */
    float *c;
    int64_t ldc, m, n, k;
    kern_fn kern;
} gemm_job;

/* Rows [i0, i1) x column panels [j0, j1) of c, in blocks of MC rows. */
static void gemm_region(const gemm_job *g, int64_t i0, int64_t i1, int64_t j0, int64_t j1)
{
    for (int64_t ic = i0; ic < i1; ic += MC) {
        int64_t mc = i1 - ic < MC ? i1 - ic : MC;
        for (int64_t pc = 0; pc < g->k; pc += KC) {
            int64_t kc = g->k - pc < KC ? g->k - pc : KC;
            for (int64_t jp = j0; jp < j1; jp++) {
                int64_t nv = g->n - jp * NR < NR ? g->n - jp * NR : NR;
                const float *bp = g->bpack + (jp * g->k + pc) * NR;
                for (int64_t q = 0; q * MR < mc; q++) {
                    int64_t mv = mc - q * MR < MR ? mc - q * MR : MR;
                    pf_gemm_operand a = {g->a.p + (ic + q * MR) * g->a.rs + pc * g->a.cs, g->a.rs, g->a.cs};
                    run_tile(g->kern, kc, a, bp, g->c + (ic + q * MR) * g->ldc + jp * NR, g->ldc, mv, nv, pc == 0);
                }
            }
        }
    }
}

/* B's panels, shared by the team (inside its parallel region); dynamic: a descheduled thread
 * (a busy machine) leaves its panels to the others. */
static void pack_b_shared(const gemm_job *g, pf_gemm_operand b, int64_t np)
{
#pragma omp for schedule(dynamic, 4)
    for (int64_t jp = 0; jp < np; jp++)
        pack_b_panel(g->bpack + jp * g->k * NR, b, jp * NR, g->n - jp * NR < NR ? g->n - jp * NR : NR, g->k);
}

/* Many row panels: whole-width chunks of CHUNK row panels handed out one at a time, so the
 * team finishes together (within a chunk) even when a thread loses its core for a while. */
static void gemm_rows_dynamic(const gemm_job *g, int nth, pf_gemm_operand b, int64_t rp, int64_t np)
{
#pragma omp parallel num_threads(nth) if (nth > 1)
    {
        pack_b_shared(g, b, np);
#pragma omp for schedule(dynamic, 1)
        for (int64_t q = 0; q < rp; q += CHUNK)
            gemm_region(g, q * MR, (q + CHUNK) * MR < g->m ? (q + CHUNK) * MR : g->m, 0, np);
    }
}

/* Few row panels (a short batch): a grid of tr row ranges x tc column-panel ranges. */
static void gemm_grid(const gemm_job *g, int64_t nth, pf_gemm_operand b, int64_t rp, int64_t np)
{
    const int64_t tr = nth < rp ? nth : rp, tc = nth / tr < np ? nth / tr : np, team = tr * tc;
#pragma omp parallel num_threads((int)team) if (team > 1)
    {
        pack_b_shared(g, b, np);
        /* every region runs even when the runtime gives fewer threads than asked */
        for (int64_t t = omp_get_thread_num(); t < team; t += omp_get_num_threads()) {
            const int64_t ri = t / tc, ci = t % tc, i0 = ri * rp / tr * MR, i1 = (ri + 1) * rp / tr * MR;
            gemm_region(g, i0, i1 < g->m ? i1 : g->m, ci * np / tc, (ci + 1) * np / tc);
        }
    }
}

int pf_attn_gemm(pf_scratch *pack, pf_gemm_operand a, pf_gemm_operand b, float *c, int64_t ldc, int64_t m,
                 int64_t n, int64_t k)
{
    if (m <= 0 || n <= 0)
        return PF_OK;
    if (k <= 0) {
        for (int64_t i = 0; i < m; i++)
            memset(c + i * ldc, 0, (size_t)n * sizeof(float));
        return PF_OK;
    }
    /* threads: at most one per PF_GEMM_FLOPS_PER_THREAD multiply-adds (a small product, such as
     * the update's covariance or a one-row apply, runs on the calling thread: no OpenMP region to
     * wake, nor workers left spinning where NumPy's OpenBLAS threads run next) */
    const int64_t rp = (m + MR - 1) / MR, np = (n + NR - 1) / NR;
    const double work = (double)m * (double)n * (double)k / PF_GEMM_FLOPS_PER_THREAD;
    const int64_t nth = work < (double)pf_get_num_threads() ? (int64_t)work + 1 : pf_get_num_threads();
    size_t bfloats, bytes;
    if (pf_mul_size((size_t)np * NR, (size_t)k, &bfloats) || pf_mul_size(bfloats, sizeof(float), &bytes))
        return PF_EOVERFLOW;
    int st = pf_scratch_reserve(pack, bytes);
    if (st)
        return st;
    const gemm_job g = {a, pack->p, c, ldc, m, n, k, pick_kernel()};
    if (rp >= 2 * CHUNK * nth)
        gemm_rows_dynamic(&g, (int)nth, b, rp, np);
    else
        gemm_grid(&g, nth, b, rp, np);
    return PF_OK;
}
