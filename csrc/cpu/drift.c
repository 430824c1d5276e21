/* Conductance drift G(t) = G(t0) * (t / t0)^(-nu), per-cell nu from the
 * engine's counter-based generator (see physics.h). Every cell is a pure
 * function of (seed, index), so the result does not depend on the thread
 * count or on how the cells are split. */
#include "core/physics.h"

#include <math.h>

#include "core/philox_noise.h"
#include "cpu/threads.h"

pf_status pf_drift(const float *g, int64_t count, uint64_t index0, uint64_t seed, double t, double t0,
                   double nu_mean, double nu_std, float *out, double *nu_out)
{
    if (!(t0 > 0.0) || !isfinite(t0))
        return pf_fail(isfinite(t0) ? PF_EINVAL : PF_ENONFINITE, "t0", "must be finite and > 0, got %g", t0);
    if (!isfinite(t) || !(t >= t0))
        return pf_fail(isfinite(t) ? PF_EINVAL : PF_ENONFINITE, "t_seconds", "must be finite and >= t0 (%g), got %g",
                       t0, t);
    if (!isfinite(nu_mean))
        return pf_fail(PF_ENONFINITE, "nu_mean", "must be finite, got %g", nu_mean);
    if (!isfinite(nu_std) || !(nu_std >= 0.0))
        return pf_fail(isfinite(nu_std) ? PF_EINVAL : PF_ENONFINITE, "nu_std", "must be finite and >= 0, got %g",
                       nu_std);
    if (count < 0)
        return pf_fail(PF_EINVAL, "g", "negative size");
    if (count == 0)
        return PF_OK;
    if (!g || !out)
        return pf_fail(PF_EINVAL, "g", "missing buffers");
    for (int64_t k = 0; k < count; k++)
        if (!isfinite(g[k]))
            return pf_fail(PF_ENONFINITE, "g", "conductances must be finite, got %g at index %lld", (double)g[k],
                           (long long)k);
    /* log(t / t0); where t / t0 overflows (t0 tiny, t huge) the difference of the two finite logs
     * (log(inf) would drift every cell to 0, and to NaN where nu = 0) */
    const double ratio = t / t0;
    const double log_ratio = isfinite(ratio) ? log(ratio) : log(t) - log(t0);
#pragma omp parallel for num_threads(pf_threads_for((double)count)) schedule(static)
    for (int64_t k = 0; k < count; k++) {
        const uint64_t idx = index0 + (uint64_t)k;
        double nu = nu_mean;
        if (nu_std > 0.0)
            nu += nu_std * (double)pf_normal(seed, PF_STREAM_DRIFT, 0, idx);
        if (nu < 0.0)
            nu = 0.0;
        /* (t / t0)^0 = 1^nu = 1 exactly: also for a nu that overflowed to inf (nu_mean + nu_std z beyond
         * DBL_MAX), where -nu * 0 would be NaN */
        out[k] = nu == 0.0 || log_ratio == 0.0 ? g[k] : (float)((double)g[k] * exp(-nu * log_ratio));
        if (nu_out)
            nu_out[k] = nu;
    }
    return PF_OK;
}
