/* The one validator of the slicing / programming / DPE argument contract (contract.h). */
#include <float.h>
#include <math.h>
#include <string.h>

#include "core/contract.h"
#include "core/physics.h"

pf_status pf_validate_slice_method(const char *arg, const int64_t *widths, int64_t n, int min_total_bits,
                                   pf_slice_method *sm)
{
    if (n < 1 || n > PF_MAX_SLICES)
        return pf_fail(PF_EINVAL, arg, "expected 1 to %d slice widths, got %lld", PF_MAX_SLICES, (long long)n);
    int w[PF_MAX_SLICES], total = 0;
    for (int64_t i = 0; i < n; i++) {
        if (widths[i] < 1 || widths[i] > PF_MAX_SLICE_WIDTH)
            return pf_fail(PF_EINVAL, arg, "slice widths must be in 1..%d (codes are uint8): width %lld is %lld",
                           PF_MAX_SLICE_WIDTH, (long long)i, (long long)widths[i]);
        w[i] = (int)widths[i];
        total += w[i];
    }
    if (w[0] != 1)
        return pf_fail(PF_EINVAL, arg, "the first (sign) slice must be 1 bit wide, got %d", w[0]);
    if (min_total_bits < 1)
        min_total_bits = 2;
    if (total < min_total_bits || total > PF_MAX_TOTAL_BITS)
        return pf_fail(PF_EINVAL, arg, "total bits must be %d to %d, got %d", min_total_bits, PF_MAX_TOTAL_BITS,
                       total);
    pf_slice_method tmp;
    if (!sm)
        sm = &tmp;
    if (total == 1) { /* the sign bit alone: code 1 weighs -1 (not a quantizer's method) */
        memset(sm, 0, sizeof *sm);
        sm->n_slices = sm->total_bits = sm->width[0] = sm->max_code[0] = 1;
        sm->weight[0] = -1;
        return PF_OK;
    }
    if (pf_slice_method_init(sm, w, (int)n) < 0)
        return pf_fail(PF_EINVAL, arg, "invalid slice method");
    return PF_OK;
}

pf_status pf_validate_slice_method_struct(const char *arg, const pf_slice_method *sm)
{
    int ok = pf_slice_method_valid(sm);
    for (int s = 0; ok && s < sm->n_slices; s++)
        ok = sm->max_code[s] == (1 << sm->width[s]) - 1;
    if (!ok)
        return pf_fail(PF_EINVAL, arg, "invalid slice method: 1..%d slices of 1..%d bits, 2..%d bits in total",
                       PF_MAX_SLICES, PF_MAX_SLICE_WIDTH, PF_MAX_TOTAL_BITS);
    return PF_OK;
}

pf_status pf_validate_g_level(const char *arg, int64_t g_level)
{
    if (g_level < PF_MIN_LEVELS || g_level > PF_MAX_LEVELS)
        return pf_fail(PF_EINVAL, arg, "must be %d to %d (conductance levels are stored as uint8), got %lld",
                       PF_MIN_LEVELS, PF_MAX_LEVELS, (long long)g_level);
    return PF_OK;
}

pf_status pf_validate_levels_fit(const char *arg, const pf_slice_method *sm, int64_t g_level)
{
    for (int s = 0; s < sm->n_slices; s++)
        if (sm->max_code[s] > g_level - 1)
            return pf_fail(PF_EINVAL, arg, "a %d-bit weight slice needs %d levels but g_level is %lld; use narrower "
                           "weight slices or more conductance levels", sm->width[s], sm->max_code[s] + 1,
                           (long long)g_level);
    return PF_OK;
}

pf_status pf_validate_resolution(const char *arg, int64_t r)
{
    if (r < 2 || r > PF_MAX_RESOLUTION)
        return pf_fail(PF_EINVAL, arg, "converter resolutions must be in 2..2**24, got %lld", (long long)r);
    return PF_OK;
}

pf_status pf_validate_pair(const char *arg, int64_t a, int64_t b, int64_t minimum)
{
    if (a < minimum || b < minimum)
        return pf_fail(PF_EINVAL, arg, "values must be >= %lld, got (%lld, %lld)", (long long)minimum, (long long)a,
                       (long long)b);
    return PF_OK;
}

pf_status pf_validate_sigma(const char *arg, double v, double max)
{
    if (!isfinite(v))
        return pf_fail(PF_ENONFINITE, arg, "must be finite, got %g", v);
    if (!(v >= 0.0) || !(v <= max))
        return pf_fail(PF_EINVAL, arg, "must be in [0, %g], got %g", max, v);
    return PF_OK;
}

pf_status pf_validate_read_sigma(const char *arg, const float *sigma, int64_t g_level)
{
    if (!sigma)
        return PF_OK;
    for (int64_t l = 0; l < g_level; l++) {
        if (!isfinite(sigma[l]))
            return pf_fail(PF_ENONFINITE, arg, "every sigma must be finite, got %g at level %lld", (double)sigma[l],
                           (long long)l);
        if (!(sigma[l] >= 0.0f) || !(sigma[l] <= PF_READ_SIGMA_MAX))
            return pf_fail(PF_EINVAL, arg, "every sigma must be in [0, %g] (exp(sigma*z) overflows float32 from "
                           "about 15), got %g at level %lld", PF_READ_SIGMA_MAX, (double)sigma[l], (long long)l);
    }
    return PF_OK;
}

pf_status pf_validate_conductance_range(double hgs, double lgs, int64_t g_level)
{
    if (!isfinite(hgs))
        return pf_fail(PF_ENONFINITE, "HGS", "must be finite, got %g", hgs);
    if (!isfinite(lgs))
        return pf_fail(PF_ENONFINITE, "LGS", "must be finite, got %g", lgs);
    if (!(lgs >= 0.0))
        return pf_fail(PF_EINVAL, "LGS", "must be >= 0 and below HGS (conductances are not negative; LGS=%g, "
                       "HGS=%g)", lgs, hgs);
    /* a negative (or zero) HGS is HGS's fault, not LGS's: it cannot be above an LGS >= 0 */
    if (!(hgs > 0.0))
        return pf_fail(PF_EINVAL, "HGS", "must be > 0 and above LGS (conductances are not negative; HGS=%g, "
                       "LGS=%g)", hgs, lgs);
    if (!(lgs < hgs))
        return pf_fail(PF_EINVAL, "LGS", "must be >= 0 and below HGS (conductances are not negative; LGS=%g, "
                       "HGS=%g)", lgs, hgs);
    if (!(hgs <= PF_CONDUCTANCE_MAX))
        return pf_fail(PF_EINVAL, "HGS", "must be at most %g siemens (programmed conductances, write variation "
                       "included, must stay finite in float32), got %g", PF_CONDUCTANCE_MAX, hgs);
    if (g_level < PF_MIN_LEVELS)
        return pf_validate_g_level("g_level", g_level);
    const double q_g = (hgs - lgs) / (double)(g_level - 1);
    if (!(q_g >= FLT_MIN))
        return pf_fail(PF_EINVAL, "HGS", "the level spacing (HGS - LGS) / (g_level - 1) = %g is below float32's "
                       "smallest normal number %g (HGS=%g, LGS=%g, g_level=%lld)", q_g, (double)FLT_MIN, hgs, lgs,
                       (long long)g_level);
    if (!(q_g * PF_LEVEL_SPAN_MAX >= hgs))
        return pf_fail(PF_EINVAL, "LGS", "too close to HGS: the level spacing (HGS - LGS) / (g_level - 1) = %g is "
                       "below HGS * 2**-22 = %g, so the conductance levels are not distinct in float32 (LGS=%g, "
                       "HGS=%g, g_level=%lld)", q_g, hgs / PF_LEVEL_SPAN_MAX, lgs, hgs, (long long)g_level);
    return PF_OK;
}

pf_status pf_validate_vread(double vread, double hgs, double lgs, int64_t g_level, int64_t rdac)
{
    if (!isfinite(vread))
        return pf_fail(PF_ENONFINITE, "vread", "must be finite, got %g", vread);
    if (!(vread > 0.0) || !(vread <= PF_VREAD_MAX))
        return pf_fail(PF_EINVAL, "vread", "must be > 0 and at most %g volts (the DAC voltage with the largest "
                       "voltage noise, vread * (1 + 1e6 * 5.9), must stay finite in float32), got %g",
                       PF_VREAD_MAX, vread);
    const int64_t levels = (rdac - 1) * (g_level - 1);
    const int64_t n_max = levels >= 1 && levels < ((int64_t)1 << 24) ? (((int64_t)1 << 24) - 1) / levels : 1;
    const double ref = (hgs - lgs) * vread * (double)n_max;
    if (!(ref <= FLT_MAX))
        return pf_fail(PF_EINVAL, "vread", "the ADC reference current (HGS - LGS) * vread * n of the tallest "
                       "crossbar rdac = %lld and g_level = %lld allow (n = %lld) is %g A, above float32's largest "
                       "%g: vread must be at most %g volts here (HGS=%g, LGS=%g)", (long long)rdac,
                       (long long)g_level, (long long)n_max, ref, (double)FLT_MAX,
                       (double)FLT_MAX / ((hgs - lgs) * (double)n_max), hgs, lgs);
    return PF_OK;
}

pf_status pf_validate_slice_args(int64_t n, int64_t rows, int64_t cols, int64_t gran_rows, int64_t gran_cols,
                                 const pf_slice_method *sm, int want_levels, int64_t g_level)
{
    pf_status st;
    if (n < 1 || rows < 1 || cols < 1)
        return pf_fail(PF_EINVAL, "data", "expected a non-empty array, got (%lld, %lld, %lld)", (long long)n,
                       (long long)rows, (long long)cols);
    if ((st = pf_validate_pair("quant_gran", gran_rows, gran_cols, 1)) != PF_OK ||
        (st = pf_validate_slice_method_struct("slice_method", sm)) != PF_OK)
        return st;
    if (want_levels && ((st = pf_validate_g_level("g_level", g_level)) != PF_OK ||
                        (st = pf_validate_levels_fit("g_level", sm, g_level)) != PF_OK))
        return st;
    return PF_OK;
}

pf_status pf_validate_program_params(const pf_program_params *p)
{
    pf_status st;
    if (!p)
        return pf_fail(PF_EINVAL, "params", "missing");
    if ((st = pf_validate_g_level("g_level", p->g_level)) != PF_OK ||
        (st = pf_validate_conductance_range(p->hgs, p->lgs, p->g_level)) != PF_OK ||
        (st = pf_validate_sigma("write_variation", p->write_variation, PF_REL_SIGMA_MAX)) != PF_OK ||
        (st = pf_validate_sigma("rate_stuck_HGS", p->rate_stuck_hgs, 1.0)) != PF_OK ||
        (st = pf_validate_sigma("rate_stuck_LGS", p->rate_stuck_lgs, 1.0)) != PF_OK)
        return st;
    if (!(p->rate_stuck_hgs + p->rate_stuck_lgs <= 1.0))
        return pf_fail(PF_EINVAL, "rate_stuck_LGS", "rate_stuck_HGS + rate_stuck_LGS exceeds 1 (%g + %g)",
                       p->rate_stuck_hgs, p->rate_stuck_lgs);
    return PF_OK;
}

/* Slices of one operand given as (count, max codes): 1..16 slices of 1..8 bits. */
static pf_status check_slices(const char *arg, int count, const int *max_code)
{
    if (count < 1 || count > PF_MAX_SLICES)
        return pf_fail(PF_EINVAL, arg, "expected 1 to %d slices, got %d", PF_MAX_SLICES, count);
    for (int i = 0; i < count; i++)
        if (max_code[i] < 1 || max_code[i] > 255)
            return pf_fail(PF_EINVAL, arg, "slice widths must be in 1..8 (codes are uint8)");
    return PF_OK;
}

static pf_status check_dpe_geometry(const pf_dpe_args *a)
{
    pf_status st;
    if (a->n <= 0 || a->n > INT32_MAX)
        return pf_fail(PF_EINVAL, "n", "crossbar rows must be in 1..2**31-1, got %lld", (long long)a->n);
    if ((st = pf_validate_pair("x_granule", a->x_qr, a->x_qc, 1)) != PF_OK ||
        (st = pf_validate_pair("w_granule", a->w_qr, a->w_qc, 1)) != PF_OK)
        return st;
    if (a->x_qc % a->n || a->w_qr % a->n)
        return pf_fail(PF_EINVAL, "n", "granules (x columns %lld, weight rows %lld) must be multiples of the "
                       "crossbar rows %lld", (long long)a->x_qc, (long long)a->w_qr, (long long)a->n);
    if (a->x_item0 < 0)
        return pf_fail(PF_EINVAL, "item0", "must be >= 0, got %lld", (long long)a->x_item0);
    if (a->x_kind != PF_DPE_X_CODES && a->x_kind != PF_DPE_X_IM2COL)
        return pf_fail(PF_EINVAL, "x_kind", "unknown input kind %d", (int)a->x_kind);
    if (a->batch < 0 || a->rows < 0 || a->inner < 0 || a->cols < 0)
        return pf_fail(PF_EINVAL, "x_codes", "negative sizes");
    return PF_OK;
}

/* An upper bound of every float32 magnitude a noisy product's crossbar sums and shift-and-add
 * reach in one crossbar block (the scale-back before the data's block scales), whatever the data:
 * DAC voltages (rdac-1)(1 + 5.9 vnoise), cell values (g_max exp(5.9 sigma) + LGS) / Q_G (|z| <=
 * PF_NORMAL_ABS_MAX), rows of them, the ADC codes of that sum and their coefficients. */
static double noisy_sum_bound(const pf_dpe_args *a, double g_max, double sigma)
{
    const double qg = (a->HGS - a->LGS) / (double)(a->g_level - 1);
    const double rows = (double)(a->inner > 0 ? pf_min64(a->n, a->inner) : a->n);
    const double D = (double)(a->rdac - 1) * (double)(a->g_level - 1) * (double)a->n;
    const double v = (double)(a->rdac - 1) * (1.0 + PF_NORMAL_ABS_MAX * a->vnoise);
    const double s = rows * v * ((g_max * exp(PF_NORMAL_ABS_MAX * sigma) + a->LGS) / qg);
    double t = s;
    for (int j = 0; j < a->sw; j++) {
        const double code = s * (double)(a->radc[j] - 1) / D + 1.0;
        for (int i = 0; i < a->sx; i++)
            t += code * (double)a->n * a->x_max[i] * a->w_max[j] * fabs((double)a->x_weight[i]) *
                 fabs((double)a->w_weight[j]) / (double)(a->radc[j] - 1);
    }
    return t;
}

/* Noisy products stay finite (docs/semantics.md section 7): the bound above, for the largest
 * programmed |G|, at most 2**126 (float32's largest, 3.4e38, over the rounding of up to 2**24
 * additions). The cells are read only when a cheaper upper bound of |G| fails: what write
 * variation or an assignment to SlicedData.G can program, HGS (1 + 1e6 * 5.9), times the widest
 * IR-drop block (a G_eff is at most its row's total of G; drift only lowers G). */
static pf_status check_noise_range(const pf_dpe_args *a)
{
    const double limit = 0x1p126;
    float sigma = 0.0f;
    if (a->read_sigma)
        for (int l = 0; l < a->g_level; l++)
            sigma = a->read_sigma[l] > sigma ? a->read_sigma[l] : sigma;
    if (!(a->vnoise > 0.0) && !(sigma > 0.0f) && !a->w_conductance)
        return PF_OK; /* the exact integer path (section 7.1) */
    const double cap = (1.0 + PF_REL_SIGMA_MAX * PF_NORMAL_ABS_MAX) * PF_IRDROP_MAX_BLOCK;
    double g_max = a->HGS * (a->w_conductance ? cap : 1.0);
    double b = noisy_sum_bound(a, g_max, sigma);
    if (b <= limit)
        return PF_OK;
    if (a->w_conductance) {
        float m = 0.0f;
        const int64_t cells = (int64_t)a->sw * a->inner * a->cols;
        for (int64_t c = 0; c < cells; c++)
            m = fabsf(a->w_conductance[c]) > m ? fabsf(a->w_conductance[c]) : m;
        g_max = m > a->HGS ? (double)m : a->HGS;
        if ((b = noisy_sum_bound(a, g_max, sigma)) <= limit)
            return PF_OK;
    }
    return pf_fail(PF_EINVAL, sigma > 0.0f ? "read_variation" : "vnoise", "the device noise can overflow float32: "
                   "with read-noise sigma up to %g, vnoise %g, conductances up to %g S (LGS %g, Q_G %g) and n = %lld "
                   "crossbar rows, a crossbar sum or its shift-and-add can reach %.3g, above 2**126 = %.3g; lower the "
                   "noise, or use fewer crossbar rows or narrower slices", (double)sigma, a->vnoise, g_max, a->LGS,
                   (a->HGS - a->LGS) / (double)(a->g_level - 1), (long long)a->n, b, limit);
}

pf_status pf_validate_finite(const char *arg, const char *what, const float *v, int64_t count)
{
    for (int64_t i = 0; v && i < count; i++)
        if (!isfinite(v[i]))
            return pf_fail(PF_ENONFINITE, arg, "expected finite %s, got %g at element %lld (C order)", what,
                           (double)v[i], (long long)i);
    return PF_OK;
}

pf_status pf_validate_dpe_args(const pf_dpe_args *a)
{
    pf_status st;
    if ((st = check_slices("x_widths", a->sx, a->x_max)) != PF_OK ||
        (st = check_slices("w_widths", a->sw, a->w_max)) != PF_OK || (st = check_dpe_geometry(a)) != PF_OK ||
        (st = pf_validate_resolution("rdac", a->rdac)) != PF_OK ||
        (st = pf_validate_g_level("g_level", a->g_level)) != PF_OK)
        return st;
    for (int j = 0; j < a->sw; j++) {
        if ((st = pf_validate_resolution("radc", a->radc[j])) != PF_OK)
            return st;
        if (a->w_max[j] > a->g_level - 1)
            return pf_fail(PF_EINVAL, "w_widths", "weight slice maximum %d exceeds g_level - 1 = %d", a->w_max[j],
                           a->g_level - 1);
    }
    int64_t D = (int64_t)(a->rdac - 1) * (a->g_level - 1) * a->n;
    if (D >= ((int64_t)1 << 24))
        return pf_fail(PF_EINVAL, "rdac", "(rdac-1)*(g_level-1)*n = %lld (arguments 'rdac', 'g_level', 'n') must be "
                       "below 2**24 for exact crossbar sums", (long long)D);
    if ((st = pf_validate_conductance_range(a->HGS, a->LGS, a->g_level)) != PF_OK ||
        (st = pf_validate_sigma("vnoise", a->vnoise, PF_REL_SIGMA_MAX)) != PF_OK ||
        (st = pf_validate_read_sigma("read_sigma", a->read_sigma, a->g_level)) != PF_OK)
        return st;
    return check_noise_range(a);
}
