/* Weight packing of the fused DPE MVM and the packed-weights object
 * (dpe.h): programmed weights packed once, read by every later call. */
#include "cpu/dpe_internal.h"
#include "cpu/dpe_int.h"
#include "cpu/kernels.h"
#include "core/memory.h"
#include "cpu/noise.h"
#include "core/philox_noise.h"
#include "cpu/threads.h"

#include <string.h>

#define NR PF_DPE_NR
#define PREFETCH_ROWS 4 /* weight rows ahead whose levels pack_w_row prefetches */

void pf_dpe_pack_w_scales(const pf_dpe_args *a, int64_t nb, float *Bs)
{
    const int64_t P = a->cols, ncp = pf_ceil_div(P, NR);
    for (int64_t cp = 0; cp < ncp; cp++) {
        int64_t c0 = cp * NR, cw = pf_min64(NR, P - c0);
        for (int64_t b = 0; b < nb; b++)
            for (int64_t cc = 0; cc < cw; cc++)
                Bs[(cp * nb + b) * NR + cc] = a->w_scale[((b * a->n) / a->w_qr) * a->w_gc + (c0 + cc) / a->w_qc];
    }
}

void pf_dpe_read_noise_init(const pf_dpe_args *a, pf_read_noise *r)
{
    const pf_cpu_kernels *kt = pf_cpu_kernels_active();
    const double qg = (a->HGS - a->LGS) / (a->g_level - 1);
    memset(r, 0, sizeof *r);
    r->qg = (float)qg;
    r->lgs = (float)(a->LGS / qg);
    r->seed = a->seed;
    r->call = a->call;
    r->normal_groups = kt->normal_groups;
    r->values = kt->read_noise_values;
    if (!a->read_sigma)
        return;
    const int top = a->g_level - 1;
    r->uniform = 1;
    for (int l = 0; l < 256; l++) {
        r->sigma[l] = a->read_sigma[l < top ? l : top];
        r->uniform &= memcmp(&r->sigma[l], &r->sigma[0], sizeof(float)) == 0;
    }
}

/* Columns [c0, c1) of one weight row (slice j, inner row kk = row % K) into
 * val[0..c1-c0): levels, or with noise G_r = G * exp(sigma z) as value
 * (G_r - LGS) / Q_G. f: c1 - c0 floats. c0 is a multiple of 8, so exp's runs
 * of 8 fall where they fall for the whole row: a column range gives the
 * whole row's bits. The portable passes: pack_w_row calls the kernel
 * table's fused pass (kernels.h) itself where there is one. */
static void weight_row(const pf_dpe_args *a, int noise_w, const pf_read_noise *rn, int64_t row, int64_t c0,
                       int64_t c1, float *val, float *f)
{
    const int64_t P = a->cols, cell0 = row * P + c0, w = c1 - c0;
    const uint8_t *L = a->w_levels + cell0;
    const float *G = a->w_conductance ? a->w_conductance + cell0 : NULL;
    if (!noise_w) {
        for (int64_t p = 0; p < w; p++)
            val[p] = (float)L[p];
        return;
    }
    if (a->read_sigma) {
        pf_normals(a->seed, PF_STREAM_READ, a->call, (uint64_t)cell0, w, f);
        if (rn->uniform) {
            const float s0 = rn->sigma[0];
            for (int64_t p = 0; p < w; p++)
                f[p] = s0 * f[p];
        } else {
            for (int64_t p = 0; p < w; p++)
                f[p] = rn->sigma[L[p]] * f[p];
        }
        pf_exp_inplace(f, w);
    } else {
        for (int64_t p = 0; p < w; p++)
            f[p] = 1.0f;
    }
    const float lgs = rn->lgs;
    if (G) {
        for (int64_t p = 0; p < w; p++)
            val[p] = pf_dpe_cell_value(G[p], f[p], rn);
    } else {
        for (int64_t p = 0; p < w; p++)
            val[p] = ((float)L[p] + lgs) * f[p] - lgs;
    }
}

/* Weight row `row` (of sw * K), column panels [cp0, cp1), into the panels at
 * dst (the row's place in panel cp0; the next panels `panel` floats apart);
 * the last panel's columns past P are written as zeros. val: 2 * (cp1 - cp0) *
 * NR floats of scratch. The callers place the row (no divisions per row). */
static void pack_w_row(const pf_dpe_args *a, int noise_w, const pf_read_noise *rn, int64_t cp0, int64_t cp1,
                       int64_t row, size_t panel, float *dst, float *val)
{
    const int64_t K = a->inner, P = a->cols, c0 = cp0 * NR, c1 = pf_min64(cp1 * NR, P);
    if (row + PREFETCH_ROWS < a->sw * K) {
        /* a column chunk reads a short piece of every row: the hardware
         * prefetcher misses the stride, and the first touch of each row's
         * levels stalled longer than drawing its noise */
        const int64_t ahead = (row + PREFETCH_ROWS) * P;
        for (int64_t c = c0; c < c1; c += 64) {
            __builtin_prefetch(a->w_levels + ahead + c);
            if (a->w_conductance)
                for (int64_t g = c; g < pf_min64(c + 64, c1); g += 16)
                    __builtin_prefetch(a->w_conductance + ahead + g);
        }
    }
    const int64_t cell0 = row * P + c0, cw = P - (cp1 - 1) * NR; /* cw: columns of the last panel */
    if (noise_w && a->read_sigma && rn->values && cell0 % 4 == 0) {
        /* the fused pass writes straight into the panels (no copy through val) */
        rn->values(rn, (uint64_t)cell0, c1 - c0, a->w_levels + cell0,
                   a->w_conductance ? a->w_conductance + cell0 : NULL, dst, panel);
    } else {
        weight_row(a, noise_w, rn, row, c0, c1, val, val + (cp1 - cp0) * NR);
        for (int64_t cp = cp0; cp < cp1; cp++)
            memcpy(dst + (cp - cp0) * panel, val + (cp - cp0) * NR, (size_t)pf_min64(NR, P - cp * NR) * sizeof(float));
    }
    if (cw < NR) /* the last panel's columns past P */
        memset(dst + (cp1 - 1 - cp0) * panel + cw, 0, (size_t)(NR - cw) * sizeof(float));
}

pf_status pf_dpe_pack_w_values(const pf_dpe_args *a, int noise_w, int64_t nk, float *Bp)
{
    const int64_t ncp = pf_ceil_div(a->cols, NR);
    const size_t panel = (size_t)(a->sw * a->inner * NR); /* the rows present (core/dpe.h) */
    int failed = 0;
    const int nth = pf_threads_for((double)a->sw * (double)a->inner * (double)a->cols); /* cells */
#pragma omp parallel num_threads(nth) reduction(| : failed)
    {
        float *val = pf_alloc((size_t)ncp * NR * 2 * sizeof(float));
        pf_read_noise rn;
        pf_dpe_read_noise_init(a, &rn);
        if (!val)
            failed = 1;
#pragma omp for schedule(static)
        for (int64_t row = 0; row < a->sw * a->inner; row++) {
            /* block b holds its slices rows-present apart (core/dpe.h) */
            const int64_t j = row / a->inner, kk = row % a->inner, b = kk / a->n;
            if (!failed && !pf_cancelled(a->cancel))
                pack_w_row(a, noise_w, &rn, 0, ncp, row, panel,
                           Bp + (b * a->sw * nk + j * pf_dpe_block_rows(a, b) + kk % a->n) * NR, val);
        }
        pf_free(val);
    }
    return failed ? PF_ENOMEM : PF_OK;
}

void pf_dpe_pack_w_block(const pf_dpe_args *a, int noise_w, const pf_read_noise *rn, int64_t nk, int64_t cp0,
                         int64_t cp1, int64_t b, float *Bc, float *val)
{
    const size_t panel = (size_t)(a->sw * nk * NR);
    const int64_t K = a->inner, k0 = b * a->n, k1 = pf_min64(k0 + a->n, K);
    for (int64_t j = 0; j < a->sw; j++) /* a short last block holds its rows only (core/dpe.h) */
        for (int64_t kk = k0; kk < k1; kk++)
            pack_w_row(a, noise_w, rn, cp0, cp1, j * K + kk, panel, Bc + (j * (k1 - k0) + (kk - k0)) * NR, val);
}

void pf_dpe_packed_free(pf_dpe_packed *p)
{
    if (!p)
        return;
    pf_free(p->B);
    pf_free(p->Bs);
    pf_free(p->iB);
    pf_free(p->iBs);
    pf_free(p);
}

pf_status pf_dpe_pack(const pf_dpe_args *a, pf_dpe_packed **out)
{
    *out = NULL;
    if (a->n <= 0 || a->sw <= 0 || a->sw > PF_MAX_SLICES || a->inner < 0 || a->cols < 0 || a->w_qr <= 0 ||
        a->w_qc <= 0 || a->w_qr % a->n || a->g_level < 2 || a->g_level > PF_MAX_LEVELS || !(a->HGS > a->LGS))
        return pf_fail(PF_EINVAL, "w_levels", "inconsistent weight arguments");
    pf_dpe_packed *p = pf_calloc(1, sizeof *p);
    if (!p)
        return PF_ENOMEM;
    p->kind = pf_dpe_read_noise_on(a) ? PF_DPE_PACKED_NOISY : PF_DPE_PACKED_READY;
    p->inner = a->inner, p->cols = a->cols, p->n = a->n, p->w_qr = a->w_qr, p->w_qc = a->w_qc;
    p->sw = a->sw, p->g_level = a->g_level, p->has_conductance = a->w_conductance != NULL;
    p->HGS = a->HGS, p->LGS = a->LGS;
    pf_dpe_blocks(a, &p->nb, &p->nk);
    p->ncp = pf_ceil_div(a->cols, NR);
    size_t s_bytes;
    if (pf_mul_size((size_t)a->sw, (size_t)a->inner * NR, &p->b_panel) || /* the rows present (core/dpe.h) */
        pf_mul_size(p->b_panel, (size_t)p->ncp * sizeof(float), &p->b_bytes) ||
        pf_mul_size((size_t)p->ncp * (size_t)p->nb, NR * sizeof(float), &s_bytes)) {
        pf_dpe_packed_free(p);
        return PF_EOVERFLOW;
    }
    p->b_bytes = p->b_bytes ? p->b_bytes : 1; /* as pf_alloc counts it */
    p->Bs = pf_calloc(s_bytes ? s_bytes : 1, 1);
    if (!p->Bs || (p->kind == PF_DPE_PACKED_READY && !(p->B = pf_calloc(p->b_bytes, 1)))) {
        pf_dpe_packed_free(p);
        return PF_ENOMEM;
    }
    p->bytes = sizeof *p + (s_bytes ? s_bytes : 1) + (p->B ? p->b_bytes : 0);
    pf_dpe_pack_w_scales(a, p->nb, p->Bs);
    if (p->kind == PF_DPE_PACKED_READY) {
        /* the values of every call: no read noise (an all-zero sigma draws exp(0) = 1) */
        pf_dpe_args b = *a;
        b.read_sigma = NULL;
        b.cancel = NULL;
        pf_status st = pf_dpe_pack_w_values(&b, b.w_conductance != NULL, p->nk, p->B);
        size_t ibytes = 0;
        if (st == PF_OK) /* cells at levels (ideal, or conductances that are levels): the integer path's too */
            st = pf_dpe_int_pack_weights(&b, p->nb, p->nk, &p->iB, &p->iBs, &ibytes);
        if (st != PF_OK) {
            pf_dpe_packed_free(p);
            return st;
        }
        p->bytes += ibytes;
    }
    *out = p;
    return PF_OK;
}

pf_status pf_dpe_packed_check(const pf_dpe_packed *p, const pf_dpe_args *a)
{
    if (p->inner != a->inner || p->cols != a->cols || p->sw != a->sw)
        return pf_fail(PF_EINVAL, "packed", "packed for weights (%d, %lld, %lld), the call has (%d, %lld, %lld)",
                       p->sw, (long long)p->inner, (long long)p->cols, a->sw, (long long)a->inner,
                       (long long)a->cols);
    if (p->n != a->n || p->w_qr != a->w_qr || p->w_qc != a->w_qc)
        return pf_fail(PF_EINVAL, "packed", "packed for another crossbar height or weight granule");
    if (p->g_level != a->g_level || p->HGS != a->HGS || p->LGS != a->LGS ||
        p->has_conductance != (a->w_conductance != NULL))
        return pf_fail(PF_EINVAL, "packed", "packed for other device parameters (g_level, HGS, LGS, conductances)");
    if ((p->kind == PF_DPE_PACKED_NOISY) != pf_dpe_read_noise_on(a))
        return pf_fail(PF_EINVAL, "packed", "packed %s read noise, the call has %s", p->kind ? "with" : "without",
                       p->kind ? "none" : "read noise");
    return PF_OK;
}
