/* Fixed-order GEMM of the attention context; see attention_gemm.h. */
#include "cpu/attention_gemm.h"

#include "cpu/kernels.h"
#include "cpu/threads.h"
#include "core/pf_common.h"

#include <math.h>
#include <omp.h>
#include <stdatomic.h>
#include <string.h>

#define MR PF_ATTN_MR
#define NR_MAX 32        /* the widest instance's columns (AVX-512: two zmm) */
#define MC 72            /* rows of an A block: 12 micro-panels, 72 KB of one K block (L2) */
#define KC_FLOATS 4096   /* a B micro-panel's K block, 16 KB (L1): KC_FLOATS / nr terms */
#define CHUNK 4          /* row panels a thread takes at a time (24 rows) */
#define PF_GEMM_FLOPS_PER_THREAD 33554432.0 /* 2^25 multiply-adds (about 1 ms of one core) per thread */

/* The portable instances: 16 one-float "vectors" per row, fmaf per term. */
#define VW 1
#define NV 16
#define VEC float
#define V_ZERO() 0.0f
#define V_LOADU(p) (*(p))
#define V_STOREU(p, v) (*(p) = (v))
#define V_BROADCAST(p) (*(p))
#define V_FMA(a, b, c) fmaf((a), (b), (c))

/* libm's fmaf is correctly rounded: the same bits as the instruction */
#define PF_GEMM_FN kern_fmaf
#define PF_GEMM_DECL static
#include "cpu/attention_gemm_simd.h"

#if defined(__x86_64__) || defined(__i386__)
/* the FMA instruction inline, where the CPU has it (an attribute: clang, make tsan, ignores
 * "#pragma GCC target") */
#define PF_GEMM_FN kern_fma
#define PF_GEMM_DECL static __attribute__((target("fma")))
#include "cpu/attention_gemm_simd.h"
#endif

static _Atomic uint64_t g_calls[PF_ISA_AVX512 + 1];

uint64_t pf_attn_gemm_calls(pf_isa isa)
{
    return isa >= PF_ISA_GENERIC && isa <= PF_ISA_AVX512 ? atomic_load(&g_calls[isa]) : 0;
}

/* The active table's instance (the portable one is NV columns wide), counted by the
 * function itself: the hook sees what runs, not what the table is named. */
static pf_attn_kernel pick_kernel(void)
{
    pf_attn_kernel k = pf_cpu_kernels_active()->attn_gemm;
    if (!k.fn)
        k = (pf_attn_kernel){kern_fmaf, NV};
#if defined(__x86_64__) || defined(__i386__)
    if (k.fn == kern_fmaf && pf_cpu_has_fma())
        k.fn = kern_fma;
    const pf_isa isa = k.fn == pf_attn_kern_avx512 ? PF_ISA_AVX512 : k.fn == pf_attn_kern_avx2 ? PF_ISA_AVX2
                                                                                             : PF_ISA_GENERIC;
#else
    const pf_isa isa = PF_ISA_GENERIC;
#endif
    atomic_fetch_add_explicit(&g_calls[isa], 1, memory_order_relaxed);
    return k;
}

/* B columns j0 .. j0 + nv - 1 (nv <= nr), all k terms, zero-padded to nr.
 * Reads run along B's contiguous direction: rows for cs == 1, columns for rs == 1. */
static void pack_b_panel(float *PF_RESTRICT dst, pf_gemm_operand b, int64_t j0, int64_t nv, int64_t nr, int64_t k)
{
    if (nv < nr)
        memset(dst, 0, (size_t)k * (size_t)nr * sizeof(float));
    if (b.cs == 1) {
        for (int64_t p = 0; p < k; p++)
            memcpy(dst + p * nr, b.p + p * b.rs + j0, (size_t)nv * sizeof(float));
        return;
    }
    for (int64_t j = 0; j < nv; j++) {
        const float *src = b.p + (j0 + j) * b.cs;
        for (int64_t p = 0; p < k; p++)
            dst[p * nr + j] = src[p * b.rs];
    }
}

/* One micro-tile's K block; edge tiles (mv < MR or nv < nr) go through a local tile. */
static void run_tile(pf_attn_kernel kern, int64_t kc, pf_gemm_operand a, const float *bp, float *c, int64_t ldc,
                     int64_t mv, int64_t nv, int first)
{
    const float *rows[MR];
    for (int64_t r = 0; r < MR; r++)
        rows[r] = a.p + (r < mv ? r : mv - 1) * a.rs;
    if (mv == MR && nv == kern.nr) {
        kern.fn(kc, rows, a.cs, bp, c, ldc, first);
        return;
    }
    float tile[MR * NR_MAX] = {0};
    for (int64_t r = 0; r < mv && !first; r++)
        memcpy(tile + r * kern.nr, c + r * ldc, (size_t)nv * sizeof(float));
    kern.fn(kc, rows, a.cs, bp, tile, kern.nr, first);
    for (int64_t r = 0; r < mv; r++)
        memcpy(c + r * ldc, tile + r * kern.nr, (size_t)nv * sizeof(float));
}

typedef struct {
    pf_gemm_operand a;
    float *bpack; /* every B panel, k * nr floats each */
    float *c;
    int64_t ldc, m, n, k;
    pf_attn_kernel kern;
} gemm_job;

/* Rows [i0, i1) x column panels [j0, j1) of c, in blocks of MC rows. */
static void gemm_region(const gemm_job *g, int64_t i0, int64_t i1, int64_t j0, int64_t j1)
{
    const int64_t nr = g->kern.nr, kcmax = KC_FLOATS / nr;
    for (int64_t ic = i0; ic < i1; ic += MC) {
        int64_t mc = i1 - ic < MC ? i1 - ic : MC;
        for (int64_t pc = 0; pc < g->k; pc += kcmax) {
            int64_t kc = g->k - pc < kcmax ? g->k - pc : kcmax;
            for (int64_t jp = j0; jp < j1; jp++) {
                int64_t nv = g->n - jp * nr < nr ? g->n - jp * nr : nr;
                const float *bp = g->bpack + (jp * g->k + pc) * nr;
                for (int64_t q = 0; q * MR < mc; q++) {
                    int64_t mv = mc - q * MR < MR ? mc - q * MR : MR;
                    pf_gemm_operand a = {g->a.p + (ic + q * MR) * g->a.rs + pc * g->a.cs, g->a.rs, g->a.cs};
                    run_tile(g->kern, kc, a, bp, g->c + (ic + q * MR) * g->ldc + jp * nr, g->ldc, mv, nv, pc == 0);
                }
            }
        }
    }
}

/* B's panels, shared by the team (inside its parallel region); dynamic: a descheduled thread
 * (a busy machine) leaves its panels to the others. */
static void pack_b_shared(const gemm_job *g, pf_gemm_operand b, int64_t np)
{
    const int64_t nr = g->kern.nr;
#pragma omp for schedule(dynamic, 4)
    for (int64_t jp = 0; jp < np; jp++)
        pack_b_panel(g->bpack + jp * g->k * nr, b, jp * nr, g->n - jp * nr < nr ? g->n - jp * nr : nr, nr, g->k);
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
    const pf_attn_kernel kern = pick_kernel();
    const int64_t rp = (m + MR - 1) / MR, np = (n + kern.nr - 1) / kern.nr;
    const double work = (double)m * (double)n * (double)k / PF_GEMM_FLOPS_PER_THREAD;
    const int64_t nth = work < (double)pf_get_num_threads() ? (int64_t)work + 1 : pf_get_num_threads();
    size_t bfloats, bytes;
    if (pf_mul_size((size_t)np * (size_t)kern.nr, (size_t)k, &bfloats) || pf_mul_size(bfloats, sizeof(float), &bytes))
        return PF_EOVERFLOW;
    int st = pf_scratch_reserve(pack, bytes);
    if (st)
        return st;
    const gemm_job g = {a, pack->p, c, ldc, m, n, k, kern};
    if (rp >= 2 * CHUNK * nth)
        gemm_rows_dynamic(&g, (int)nth, b, rp, np);
    else
        gemm_grid(&g, nth, b, rp, np);
    return PF_OK;
}
