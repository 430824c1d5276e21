/* Attention-context update and apply on OpenCL devices (contract of
 * csrc/core/attention.h: pf_attn_update, pf_attn_apply). The elementwise parts
 * transcribe csrc/cpu/attention.c operation by operation (non-finite values read
 * as 0, the sample's column statistics in the CPU's order, the same Cephes
 * tanh), and the products (covariance, x @ w) are the CPU's
 * (cpu/attention_gemm.h): each element one fma chain in k order from +0 (fma
 * is correctly rounded in OpenCL C), so results are bit-identical. */
#pragma OPENCL FP_CONTRACT OFF

inline float pf_fin(float v) { return (as_uint(v) & 0x7fffffffu) < 0x7f800000u ? v : 0.0f; }

/* vtanh of attention.c for finite x: Cephes tanhf, odd polynomial below 0.625,
 * else 1 - 2 / (exp(2|x|) + 1) with Cephes' expf (argument clamped at 40). */
inline float pf_attn_tanhf(float x)
{
    const float ax = fabs(x);
    const float z = x * x;
    float p = -5.70498872745e-3f;
    p = p * z + 2.06390887954e-2f;
    p = p * z - 5.37397155531e-2f;
    p = p * z + 1.33314422036e-1f;
    p = p * z - 3.33332819422e-1f;
    const float small = p * z * x + x;
    float t = ax * 2.0f;
    t = t > 40.0f ? 40.0f : t;
    const int k = convert_int_rtz(t * 1.44269504088896341f + 0.5f);
    const float kf = (float)k;
    float f = t - kf * 0.693359375f;
    f = f + kf * 2.12194440e-4f;
    float q = 1.9875691500e-4f;
    q = q * f + 1.3981999507e-3f;
    q = q * f + 8.3334519073e-3f;
    q = q * f + 4.1665795894e-2f;
    q = q * f + 1.6666665459e-1f;
    q = q * f + 5.0000001201e-1f;
    float e = q * (f * f) + f + 1.0f;
    e = e * as_float((k + 127) << 23);
    float big = 1.0f - 2.0f / (e + 1.0f);
    big = as_float((as_uint(big) & 0x7fffffffu) | (as_uint(x) & 0x80000000u));
    return ax < 0.625f ? small : big;
}

kernel void pf_attn_tanh(global const float *x, global float *out, ulong count)
{
    const ulong i = get_global_id(0);
    if (i < count)
        out[i] = pf_attn_tanhf(pf_fin(x[i]));
}

/* Sampled, centred columns (centre_columns): global (d). Rows 0, step, ..
 * (n of them) of src (row stride ld) into a (n x d), mean and norm per column,
 * accumulated row after row as the CPU does. */
kernel void pf_attn_centre(global const float *src, ulong ld, ulong step, ulong n, ulong d, global float *a,
                           global float *norm)
{
    const ulong j = get_global_id(0);
    if (j >= d)
        return;
    for (ulong k = 0; k < n; k++)
        a[k * d + j] = pf_fin(src[k * step * ld + j]);
    float mean = a[j];
    for (ulong k = 1; k < n; k++)
        mean += a[k * d + j];
    mean /= (float)n;
    for (ulong k = 0; k < n; k++)
        a[k * d + j] -= mean;
    float nm = a[j] * a[j];
    for (ulong k = 1; k < n; k++)
        nm += a[k * d + j] * a[k * d + j];
    norm[j] = sqrt(nm);
}

/* outgoing = keep * outgoing + rate * tanh(cov / den) (update_row), cov =
 * Xc^T Yc summed over the n sample rows: global (d, d), (column j, row i). */
kernel void pf_attn_update(global float *o, global const float *xs, global const float *ys, global const float *nx,
                           global const float *ny, ulong n, ulong d, float keep, float rate)
{
    const ulong j = get_global_id(0), i = get_global_id(1);
    if (i >= d || j >= d)
        return;
    float cov = 0.0f;
    for (ulong k = 0; k < n; k++)
        cov = fma(xs[k * d + i], ys[k * d + j], cov);
    const float den = ny[j] * nx[i];
    const float r = cov / den;
    const float rs = den > 1e-12f && (as_uint(r) & 0x7fffffffu) < 0x7f800000u ? r : 0.0f;
    const ulong at = i * d + j;
    o[at] = o[at] * keep + pf_attn_tanhf(rs) * rate;
}

/* prod (t x d) = fin(x) @ w, fma chains in k order: global (d, t). */
kernel void pf_attn_matmul(global const float *x, global const float *w, global float *prod, ulong t, ulong d)
{
    const ulong j = get_global_id(0), i = get_global_id(1);
    if (i >= t || j >= d)
        return;
    global const float *xr = x + i * d;
    float acc = 0.0f;
    for (ulong k = 0; k < d; k++)
        acc = fma(pf_fin(xr[k]), w[k * d + j], acc);
    prod[i * d + j] = acc;
}

/* out = fin(x) + scale * fin(xw) (pf_attn_epilogue; elementwise, so out may be x or xw) */
kernel void pf_attn_epilogue(global float *out, global const float *x, global const float *xw, ulong count,
                             float scale)
{
    const ulong e = get_global_id(0);
    if (e < count)
        out[e] = pf_fin(x[e]) + pf_fin(xw[e]) * scale;
}
