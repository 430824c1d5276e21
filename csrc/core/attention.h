/* Attention-context kernels (spec section 9): the similarity context that
 * transformer / diffusion blocks share between layers.
 *
 * Plain pointers and sizes, no Python. Every matrix is row-major float32.
 * Outputs are caller-provided; the only memory a kernel touches besides its
 * arguments is the workspace (pf_attn_ws) owned by the calling context, which
 * grows when shapes grow and is reused otherwise, so steady-state calls
 * allocate nothing (the design this replaces allocated a covariance, a
 * denominator and an output matrix per call).
 *
 * Non-finite rule: every value read from x, y, g and every product x @ W,
 * g @ W^T is replaced by 0 when it is NaN or +-inf. Results are bit-identical
 * for any thread count (pyfastpim's or OpenBLAS's, which is not used) and SIMD
 * level: each product element is one fused multiply-add chain in k order
 * (cpu/attention_gemm.h), threads split only the output, the other reductions
 * run in a fixed order, and the elementwise passes use no FMA contraction. */
#ifndef PF_ATTENTION_H
#define PF_ATTENTION_H

#include <stddef.h>
#include <stdint.h>

/* Rows sampled by the update (spec: n = min(T, 32)); the CPU and OpenCL backends both use it. */
#define PF_ATTN_SAMPLES 32

/* The largest D of a context: its (D, D) float32 matrices (incoming, outgoing, the covariance) then hold
 * D * D * 4 <= INT64_MAX bytes, so every size computation of the kernels and bindings fits (isqrt(2**61)). */
#define PF_ATTN_MAX_DIM 1518500249LL

/* A growable pf_alloc block: grown (free + alloc) only when a call needs more. */
typedef struct {
    void *p;
    size_t cap; /* bytes */
} pf_scratch;

/* Workspace of one attention context. Zero-initialise; free with pf_attn_ws_free. */
typedef struct {
    pf_scratch sample; /* update: sampled, centred rows of x and y, column stats */
    pf_scratch cov;    /* update: d x d covariance */
    pf_scratch in;     /* apply/gradients: sanitized copy of x or g (only if non-finite) */
    pf_scratch prod;   /* apply/gradients: t x d product when it cannot go to the output */
    pf_scratch rows;   /* gradients: per-row float64 partial sums of grad_strength */
    pf_scratch pack;   /* products: packed operand panels (cpu/attention_gemm.h) */
} pf_attn_ws;

void pf_attn_ws_free(pf_attn_ws *ws);
size_t pf_attn_ws_bytes(const pf_attn_ws *ws);

/* Reserve nbytes in s (keeping the block when it is large enough). */
int pf_scratch_reserve(pf_scratch *s, size_t nbytes);

/* Sampled similarity update:
 *   outgoing (d x d, in/out; zeros for a fresh context)
 *     = (1 - rate) * outgoing + rate * tanh(cov / den)
 * from the first t rows and first d columns of x (row stride ldx) and y (ldy),
 * sampling n = min(t, 32) rows at 0, step, 2*step, ... (step = max(t / n, 1)).
 * rate <= 0 or t == 0 is a no-op. Requires d <= ldx, d <= ldy. */
int pf_attn_update(pf_attn_ws *ws, float *outgoing, int64_t d, const float *x, int64_t ldx, const float *y,
                   int64_t ldy, int64_t t, double rate);

/* Step update from one row each (first d elements of x and y): the vectors are
 * centred by the mean over their own elements; each "column" has one element. */
int pf_attn_update_step(pf_attn_ws *ws, float *outgoing, int64_t d, const float *x, const float *y, double rate);

/* 1 if any of the n values is NaN or +-inf. */
int pf_attn_has_nonfinite(const float *x, size_t n);

/* dst[k] = fin(src[k]), k < n (dst and src must not overlap). */
void pf_attn_sanitize(float *dst, const float *src, size_t n);

/* out[k] = fin(x[k]) + scale * fin(xw[k]), k < n; fin(v) = v if finite else 0.
 * out may be x or xw (elementwise, in place); any other overlap is not allowed. */
void pf_attn_epilogue(float *out, const float *x, const float *xw, size_t n, float scale);

/* out (t x d) = x + (s/d) * (x @ w), non-finite terms as 0, s != 0.
 * out may be exactly x; otherwise out must not overlap x or w. */
int pf_attn_apply(pf_attn_ws *ws, float *out, const float *x, const float *w, int64_t t, int64_t d, double s);

/* Gradients of apply for upstream g (t x d):
 *   *grad_s = (1/d) * sum(g * (x @ w))   (float64, fixed order)
 *   grad_x  = g + (s/d) * (g @ w^T)      (grad_x = g when s == 0)
 * grad_x may be exactly x or g; otherwise it must not overlap x, g or w.
 * grad_x == NULL computes grad_s only. */
int pf_attn_gradients(pf_attn_ws *ws, float *grad_x, double *grad_s, const float *x, const float *g,
                      const float *w, int64_t t, int64_t d, double s);

/* The tanh used by the update kernels (exposed for tests of its accuracy). */
void pf_attn_tanh(float *out, const float *x, size_t n);

#endif
