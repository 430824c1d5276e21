/* Attention-context kernels (spec section 9); see attention.h for the contract. */
#include "core/attention.h"

#include "cpu/attention_gemm.h"
#include "cpu/cpu_features.h"
#include "core/memory.h"
#include "core/pf_common.h"

#include <float.h>
#include <limits.h>
#include <math.h>
#include <string.h>

/* Threads: only the products (pf_attn_gemm, on pyfastpim's thread count) are
 * multi-threaded; the elementwise passes run on the calling thread, SIMD (8
 * lanes), and cost less than the products or the NumPy they replace. The
 * products once were OpenBLAS sgemm calls, whose sums follow OpenBLAS's thread
 * count: results now depend on no thread count. */

/* ---- workspace ---- */

int pf_scratch_reserve(pf_scratch *s, size_t nbytes)
{
    if (nbytes <= s->cap && s->p)
        return PF_OK;
    void *p = pf_alloc(nbytes ? nbytes : 1);
    if (!p)
        return PF_ENOMEM;
    pf_free(s->p);
    s->p = p;
    s->cap = nbytes;
    return PF_OK;
}

static void scratch_free(pf_scratch *s)
{
    pf_free(s->p);
    s->p = NULL;
    s->cap = 0;
}

void pf_attn_ws_free(pf_attn_ws *ws)
{
    scratch_free(&ws->sample);
    scratch_free(&ws->cov);
    scratch_free(&ws->in);
    scratch_free(&ws->prod);
    scratch_free(&ws->rows);
    scratch_free(&ws->pack);
}

size_t pf_attn_ws_bytes(const pf_attn_ws *ws)
{
    return ws->sample.cap + ws->cov.cap + ws->in.cap + ws->prod.cap + ws->rows.cap + ws->pack.cap;
}

/* ---- elementwise building blocks ----
 *
 * Written with GCC vector extensions (8 floats) rather than left to the
 * auto-vectorizer: GCC sinks the unused half of a select into a branch and,
 * under the default -ftrapping-math, will not if-convert the division back, so
 * these loops would stay scalar. The same source is compiled for the baseline
 * (two SSE2 halves) and for AVX2; without FMA contraction both give identical
 * bits, and partial tails go through the same vector code on zero padding. */

/* Every function returning v8f is always inlined (and none takes one by value,
 * hence the macros and pointers below): no 32-byte vector crosses a call, so
 * GCC's ABI warnings for builds without AVX do not apply. */
#pragma GCC diagnostic ignored "-Wpsabi"

typedef float v8f __attribute__((vector_size(32), aligned(16)));
typedef int32_t v8i __attribute__((vector_size(32), aligned(16)));

PF_INLINE v8f vload(const float *p, size_t m)
{
    v8f v = {0, 0, 0, 0, 0, 0, 0, 0};
    memcpy(&v, p, m * sizeof(float));
    return v;
}
#define VSTORE(p, v, m)                        \
    do {                                       \
        v8f v_ = (v);                          \
        memcpy((p), &v_, (m) * sizeof(float)); \
    } while (0)
PF_INLINE v8f vsplat(float c) { return (v8f){c, c, c, c, c, c, c, c}; }
/* m ? a : b for lane masks m of all ones / all zeros */
#define VSEL(m, a, b) ((v8f)(((m) & (v8i)(a)) | (~(m) & (v8i)(b))))
/* -1 where |v| < inf (false for NaN): an integer test on the bits */
#define VFINITE(v) (((v8i)(v)&0x7fffffff) < 0x7f800000)
/* fin(v): v when finite, else 0 */
#define VFIN(v) ((v8f)(VFINITE(v) & (v8i)(v)))

/* tanh for finite x. Our own rather than libm (a scalar call per element would
 * dominate the update) or SLEEF (an extra link dependency whose SIMD variants
 * need not agree bit for bit): Cephes tanhf, an odd polynomial below 0.625,
 * else 1 - 2 / (exp(2|x|) + 1) with Cephes' expf; about 2 ulp. exp's argument
 * is clamped at 40, where tanh is already 1.0f. */
PF_INLINE v8f vtanh(const v8f *xp)
{
    v8f x = *xp;
    const v8i absmask = (v8i){0, 0, 0, 0, 0, 0, 0, 0} + 0x7fffffff;
    v8f ax = (v8f)((v8i)x & absmask);
    v8f z = x * x;
    v8f p = vsplat(-5.70498872745e-3f);
    p = p * z + 2.06390887954e-2f;
    p = p * z - 5.37397155531e-2f;
    p = p * z + 1.33314422036e-1f;
    p = p * z - 3.33332819422e-1f;
    v8f small = p * z * x + x;

    v8f t = ax * 2.0f;
    t = VSEL(t > 40.0f, vsplat(40.0f), t);
    /* exp(t) = 2^k * exp(f), t = k ln2 + f; truncation is floor since t >= 0 */
    v8i k = __builtin_convertvector(t * 1.44269504088896341f + 0.5f, v8i);
    v8f kf = __builtin_convertvector(k, v8f);
    v8f f = t - kf * 0.693359375f;
    f = f + kf * 2.12194440e-4f;
    v8f q = vsplat(1.9875691500e-4f);
    q = q * f + 1.3981999507e-3f;
    q = q * f + 8.3334519073e-3f;
    q = q * f + 4.1665795894e-2f;
    q = q * f + 1.6666665459e-1f;
    q = q * f + 5.0000001201e-1f;
    v8f e = q * (f * f) + f + 1.0f;
    e = e * (v8f)((k + 127) << 23); /* k <= 58: a normal power of two */
    v8f big = 1.0f - 2.0f / (e + 1.0f);
    big = (v8f)(((v8i)big & absmask) | ((v8i)x & ~absmask)); /* copysign */
    return VSEL(ax < 0.625f, small, big);
}

/* sim = tanh(cov / den) where den > 1e-12 and the ratio is finite, else 0;
 * o = keep * o + rate * sim. */
PF_INLINE v8f blend_sim(const v8f *o, const v8f *cov, const v8f *den, float keep, float rate)
{
    v8f r = *cov / *den;
    v8f rs = (v8f)(((*den > 1e-12f) & VFINITE(r)) & (v8i)r);
    v8f sim = vtanh(&rs); /* tanh(0) == 0 */
    return *o * keep + sim * rate;
}

/* One row of the update: cov row against den = nxi * ny[j]. */
PF_INLINE void update_row(float *PF_RESTRICT o, const float *PF_RESTRICT cov, float nxi,
                          const float *PF_RESTRICT ny, int64_t d, float keep, float rate)
{
#define PF_UPDATE_CHUNK(m)                                                                  \
    do {                                                                                    \
        v8f o_ = vload(o + j, m), c_ = vload(cov + j, m), d_ = vload(ny + j, m) * nxi;      \
        VSTORE(o + j, blend_sim(&o_, &c_, &d_, keep, rate), m);                             \
    } while (0)
    int64_t j = 0;
    for (; j + 8 <= d; j += 8)
        PF_UPDATE_CHUNK(8);
    if (j < d)
        PF_UPDATE_CHUNK((size_t)(d - j));
#undef PF_UPDATE_CHUNK
}

/* Step mode: the covariance of one sample is the outer product xci * yc[j]. */
PF_INLINE void update_row_outer(float *PF_RESTRICT o, float xci, const float *PF_RESTRICT yc, float nxi,
                                const float *PF_RESTRICT ny, int64_t d, float keep, float rate)
{
#define PF_OUTER_CHUNK(m)                                                                   \
    do {                                                                                    \
        v8f o_ = vload(o + j, m), c_ = vload(yc + j, m) * xci, d_ = vload(ny + j, m) * nxi; \
        VSTORE(o + j, blend_sim(&o_, &c_, &d_, keep, rate), m);                             \
    } while (0)
    int64_t j = 0;
    for (; j + 8 <= d; j += 8)
        PF_OUTER_CHUNK(8);
    if (j < d)
        PF_OUTER_CHUNK((size_t)(d - j));
#undef PF_OUTER_CHUNK
}

/* out = fin(x) + scale * fin(xw); elementwise, so out may be x or xw */
PF_INLINE void epilogue_body(float *out, const float *x, const float *xw, size_t n, float scale)
{
#define PF_EPI_CHUNK(m) VSTORE(out + k, VFIN(vload(x + k, m)) + VFIN(vload(xw + k, m)) * scale, m)
    size_t k = 0;
    for (; k + 8 <= n; k += 8)
        PF_EPI_CHUNK(8);
    if (k < n)
        PF_EPI_CHUNK(n - k);
#undef PF_EPI_CHUNK
}

PF_INLINE void tanh_body(float *PF_RESTRICT out, const float *PF_RESTRICT x, size_t n)
{
    size_t k = 0;
#define PF_TANH_CHUNK(m)                      \
    do {                                      \
        v8f x_ = VFIN(vload(x + k, m));       \
        VSTORE(out + k, vtanh(&x_), m);       \
    } while (0)
    for (; k + 8 <= n; k += 8)
        PF_TANH_CHUNK(8);
    if (k < n)
        PF_TANH_CHUNK(n - k);
#undef PF_TANH_CHUNK
}

#define PF_ATTN_VARIANTS(SUFFIX, ATTR)                                                                        \
    ATTR static void update_row_##SUFFIX(float *o, const float *cov, float nxi, const float *ny, int64_t d,    \
                                         float keep, float rate)                                              \
    {                                                                                                         \
        update_row(o, cov, nxi, ny, d, keep, rate);                                                           \
    }                                                                                                         \
    ATTR static void update_row_outer_##SUFFIX(float *o, float xci, const float *yc, float nxi,               \
                                               const float *ny, int64_t d, float keep, float rate)            \
    {                                                                                                         \
        update_row_outer(o, xci, yc, nxi, ny, d, keep, rate);                                                 \
    }                                                                                                         \
    ATTR static void epilogue_##SUFFIX(float *out, const float *x, const float *xw, size_t n, float scale)    \
    {                                                                                                         \
        epilogue_body(out, x, xw, n, scale);                                                                  \
    }                                                                                                         \
    ATTR static void tanh_##SUFFIX(float *out, const float *x, size_t n) { tanh_body(out, x, n); }

PF_ATTN_VARIANTS(generic, __attribute__((noinline)))
PF_ATTN_VARIANTS(avx2, __attribute__((noinline, target("avx2"))))

/* Scalar versions for the scalar loops below (integer tests: they vectorize). */
PF_INLINE int is_finite_bits(float v)
{
    int32_t b;
    memcpy(&b, &v, sizeof b);
    return (b & 0x7fffffff) < 0x7f800000;
}
PF_INLINE float fin(float v) { return is_finite_bits(v) ? v : 0.0f; }

static int use_avx2(void) { return pf_active_isa() >= PF_ISA_AVX2; }

/* ---- public elementwise kernels (calling thread only: see the top) ---- */

int pf_attn_has_nonfinite(const float *x, size_t n)
{
    int bad = 0;
    for (size_t k = 0; k < n; k++)
        bad |= !is_finite_bits(x[k]);
    return bad;
}

void pf_attn_sanitize(float *PF_RESTRICT dst, const float *PF_RESTRICT src, size_t n)
{
    for (size_t k = 0; k < n; k++)
        dst[k] = fin(src[k]);
}

void pf_attn_epilogue(float *out, const float *x, const float *xw, size_t n, float scale)
{
    if (use_avx2())
        epilogue_avx2(out, x, xw, n, scale);
    else
        epilogue_generic(out, x, xw, n, scale);
}

void pf_attn_tanh(float *out, const float *x, size_t n)
{
    if (use_avx2())
        tanh_avx2(out, x, n);
    else
        tanh_generic(out, x, n);
}

/* ---- products ---- */

/* c (t x d) = a (t x d) @ (trans_w ? w^T : w), w (d x d) */
static int gemm_rows(pf_attn_ws *ws, const float *a, const float *w, float *c, int64_t t, int64_t d, int trans_w)
{
    pf_gemm_operand ao = {a, d, 1}, wo = {w, trans_w ? 1 : d, trans_w ? d : 1};
    return pf_attn_gemm(&ws->pack, ao, wo, c, d, t, d, d);
}

/* ---- update ---- */

/* Column statistics of the n x d sample a, mirroring NumPy's float32 order
 * (rows added one after another): centre by mean, return column norms. */
static void centre_columns(float *PF_RESTRICT a, float *PF_RESTRICT mean, float *PF_RESTRICT norm, int64_t n,
                           int64_t d)
{
    memcpy(mean, a, (size_t)d * sizeof(float));
    for (int64_t k = 1; k < n; k++)
        for (int64_t j = 0; j < d; j++)
            mean[j] += a[k * d + j];
    for (int64_t j = 0; j < d; j++)
        mean[j] /= (float)n;
    for (int64_t k = 0; k < n; k++)
        for (int64_t j = 0; j < d; j++)
            a[k * d + j] -= mean[j];
    for (int64_t j = 0; j < d; j++)
        norm[j] = a[j] * a[j];
    for (int64_t k = 1; k < n; k++)
        for (int64_t j = 0; j < d; j++)
            norm[j] += a[k * d + j] * a[k * d + j];
    for (int64_t j = 0; j < d; j++)
        norm[j] = sqrtf(norm[j]);
}

int pf_attn_update(pf_attn_ws *ws, float *outgoing, int64_t d, const float *x, int64_t ldx, const float *y,
                   int64_t ldy, int64_t t, double rate)
{
    if (!(rate > 0.0) || t <= 0 || d <= 0)
        return PF_OK;
    if (d > ldx || d > ldy || d > INT_MAX)
        return PF_EINVAL;
    int64_t n = t < PF_ATTN_SAMPLES ? t : PF_ATTN_SAMPLES;
    int64_t step = t / n > 1 ? t / n : 1;

    /* sample: xs, ys (n x d each), mean x/y, norm x/y (d each) */
    size_t nd, sample_floats, sample_bytes, dd, cov_bytes;
    if (pf_mul_size((size_t)n, (size_t)d, &nd) || pf_mul_size(nd, 2, &sample_floats) ||
        pf_add_size(sample_floats, 4 * (size_t)d, &sample_floats) ||
        pf_mul_size(sample_floats, sizeof(float), &sample_bytes) || pf_mul_size((size_t)d, (size_t)d, &dd) ||
        pf_mul_size(dd, sizeof(float), &cov_bytes))
        return PF_EOVERFLOW;
    int st;
    if ((st = pf_scratch_reserve(&ws->sample, sample_bytes)) || (st = pf_scratch_reserve(&ws->cov, cov_bytes)))
        return st;
    float *xs = ws->sample.p, *ys = xs + nd;
    float *mx = ys + nd, *my = mx + d, *nx = my + d, *ny = nx + d;
    float *cov = ws->cov.p;

    for (int64_t k = 0; k < n; k++) {
        size_t row = (size_t)(k * step);
        const float *xr = x + row * (size_t)ldx, *yr = y + row * (size_t)ldy;
        for (int64_t j = 0; j < d; j++) {
            xs[k * d + j] = fin(xr[j]);
            ys[k * d + j] = fin(yr[j]);
        }
    }
    centre_columns(xs, mx, nx, n, d);
    centre_columns(ys, my, ny, n, d);

    /* cov = Xc^T Yc: (d x n) @ (n x d) */
    pf_gemm_operand xt = {xs, 1, d}, yo = {ys, d, 1};
    if ((st = pf_attn_gemm(&ws->pack, xt, yo, cov, d, d, d, n)))
        return st;

    float keep = (float)(1.0 - rate), r = (float)rate;
    int avx2 = use_avx2();
    for (int64_t i = 0; i < d; i++) {
        if (avx2)
            update_row_avx2(outgoing + (size_t)i * d, cov + (size_t)i * d, nx[i], ny, d, keep, r);
        else
            update_row_generic(outgoing + (size_t)i * d, cov + (size_t)i * d, nx[i], ny, d, keep, r);
    }
    return PF_OK;
}

int pf_attn_update_step(pf_attn_ws *ws, float *outgoing, int64_t d, const float *x, const float *y, double rate)
{
    if (!(rate > 0.0) || d <= 0)
        return PF_OK;
    size_t bytes, dd;
    if (pf_mul_size((size_t)d, 4 * sizeof(float), &bytes) || pf_mul_size((size_t)d, (size_t)d, &dd) ||
        pf_mul_size(dd, sizeof(float), &dd)) /* outgoing's size, checked for the row offsets */
        return PF_EOVERFLOW;
    int st = pf_scratch_reserve(&ws->sample, bytes);
    if (st)
        return st;
    float *xc = ws->sample.p, *yc = xc + d, *nx = yc + d, *ny = nx + d;
    /* the mean over the vector's elements, accumulated in float64 */
    double sx = 0.0, sy = 0.0;
    for (int64_t j = 0; j < d; j++) {
        xc[j] = fin(x[j]);
        yc[j] = fin(y[j]);
        sx += xc[j];
        sy += yc[j];
    }
    float mx = (float)(sx / (double)d), my = (float)(sy / (double)d);
    for (int64_t j = 0; j < d; j++) {
        xc[j] -= mx;
        yc[j] -= my;
        nx[j] = sqrtf(xc[j] * xc[j]); /* the norm of a one-element column */
        ny[j] = sqrtf(yc[j] * yc[j]);
    }
    float keep = (float)(1.0 - rate), r = (float)rate;
    int avx2 = use_avx2();
    for (int64_t i = 0; i < d; i++) {
        if (avx2)
            update_row_outer_avx2(outgoing + (size_t)i * d, xc[i], yc, nx[i], ny, d, keep, r);
        else
            update_row_outer_generic(outgoing + (size_t)i * d, xc[i], yc, nx[i], ny, d, keep, r);
    }
    return PF_OK;
}

/* ---- apply ---- */

/* src, or its sanitized copy in ws->in when it holds non-finite values. */
static int finite_input(pf_attn_ws *ws, const float *src, size_t n, const float **out)
{
    *out = src;
    if (!pf_attn_has_nonfinite(src, n))
        return PF_OK;
    size_t nbytes;
    if (pf_mul_size(n, sizeof(float), &nbytes))
        return PF_EOVERFLOW;
    int st = pf_scratch_reserve(&ws->in, nbytes);
    if (st)
        return st;
    pf_attn_sanitize(ws->in.p, src, n);
    *out = ws->in.p;
    return PF_OK;
}

int pf_attn_apply(pf_attn_ws *ws, float *out, const float *x, const float *w, int64_t t, int64_t d, double s)
{
    size_t n, nbytes;
    if (t < 0 || d <= 0 || pf_mul_size((size_t)t, (size_t)d, &n) || pf_mul_size(n, sizeof(float), &nbytes))
        return t < 0 || d <= 0 ? PF_EINVAL : PF_EOVERFLOW;
    if (n == 0)
        return PF_OK;
    const float *xs;
    int st = finite_input(ws, x, n, &xs);
    if (st)
        return st;
    /* the product goes straight into out unless out is x itself */
    float *xw = out;
    if (out == x) {
        if ((st = pf_scratch_reserve(&ws->prod, nbytes)))
            return st;
        xw = ws->prod.p;
    }
    if ((st = gemm_rows(ws, xs, w, xw, t, d, 0)))
        return st;
    pf_attn_epilogue(out, x, xw, n, (float)(s / (double)d));
    return PF_OK;
}

/* ---- gradients ---- */

/* sum_j fin(g[j]) * fin(xw[j]) in float64 over 8 fixed lanes: vectorizes, and
 * the order depends on neither the SIMD level nor the thread count. */
static double dot_row(const float *PF_RESTRICT g, const float *PF_RESTRICT xw, int64_t d)
{
    double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t j = 0;
    for (; j + 8 <= d; j += 8)
        for (int l = 0; l < 8; l++)
            acc[l] += (double)fin(g[j + l]) * (double)fin(xw[j + l]);
    double tail = 0.0;
    for (; j < d; j++)
        tail += (double)fin(g[j]) * (double)fin(xw[j]);
    return (((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]))) + tail;
}

int pf_attn_gradients(pf_attn_ws *ws, float *grad_x, double *grad_s, const float *x, const float *g,
                      const float *w, int64_t t, int64_t d, double s)
{
    size_t n, nbytes, rbytes;
    *grad_s = 0.0;
    if (t < 0 || d <= 0)
        return PF_EINVAL;
    if (pf_mul_size((size_t)t, (size_t)d, &n) || pf_mul_size(n, sizeof(float), &nbytes) ||
        pf_mul_size((size_t)t, sizeof(double), &rbytes))
        return PF_EOVERFLOW;
    if (n == 0)
        return PF_OK;
    int st;
    if ((st = pf_scratch_reserve(&ws->prod, nbytes)) || (st = pf_scratch_reserve(&ws->rows, rbytes)))
        return st;
    float *prod = ws->prod.p;
    double *rows = ws->rows.p;

    const float *xs;
    if ((st = finite_input(ws, x, n, &xs)) || (st = gemm_rows(ws, xs, w, prod, t, d, 0)))
        return st;
    for (int64_t i = 0; i < t; i++)
        rows[i] = dot_row(g + (size_t)i * d, prod + (size_t)i * d, d);
    double total = 0.0;
    for (int64_t i = 0; i < t; i++)
        total += rows[i];
    *grad_s = total / (double)d;

    if (!grad_x)
        return PF_OK;
    if (s == 0.0) { /* apply was the identity */
        if (grad_x != g)
            memmove(grad_x, g, nbytes);
        return PF_OK;
    }
    /* x and x @ w are no longer needed: ws->in and prod are free for g */
    const float *gs;
    if ((st = finite_input(ws, g, n, &gs)) || (st = gemm_rows(ws, gs, w, prod, t, d, 1)))
        return st;
    pf_attn_epilogue(grad_x, g, prod, n, (float)(s / (double)d));
    return PF_OK;
}
