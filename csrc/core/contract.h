/* The argument contract of slicing, programming and the DPE product, checked in ONE place for
 * every backend (CPU kernels, OpenCL host code) and every binding. Each validator returns PF_OK or
 * fails through pf_fail (core/error.c) with the argument at fault and a message, so the Python
 * layer raises the same exception with the same words whatever the entry point or device.
 *
 * Limits (spec / README):
 *   slice method  1..16 widths, most significant first, each 1..8 bits (uint8 codes), the first
 *                 (sign) width 1, 2..16 bits in total
 *   g_level       2..256 conductance levels (stored as uint8), and every weight slice's maximum
 *                 code 2**width - 1 at most g_level - 1
 *   rdac, radc    DAC / ADC resolutions 2..2**24
 *   granules      positive sizes
 *   HGS, LGS      finite, 0 <= LGS < HGS <= PF_CONDUCTANCE_MAX, the level spacing
 *                 Q_G = (HGS - LGS) / (g_level - 1) a normal float32 and >= HGS / PF_LEVEL_SPAN_MAX
 *                 (pf_common.h), for programming and products alike
 *   sigmas        finite (NaN/inf: PF_ENONFINITE), read noise in [0, PF_READ_SIGMA_MAX],
 *                 relative write/DAC noise in [0, PF_REL_SIGMA_MAX]; stuck-at rates in [0, 1], sum <= 1 */
#ifndef PF_CONTRACT_H
#define PF_CONTRACT_H

#include <stdint.h>

#include "core/dpe.h"
#include "core/pf_common.h"
#include "core/quantize.h"
#include "core/slicing.h"

#define PF_MAX_RESOLUTION ((int64_t)1 << 24) /* rdac, radc */
#define PF_MIN_LEVELS 2

/* widths[0..n) most significant first into *sm (may be NULL: check only). min_total_bits is 2 for
 * quantizers (B = 1 would give K = 0); the product of given codes (dpe_mvm) also takes the 1-bit
 * sign-only method (min_total_bits 1). */
pf_status pf_validate_slice_method(const char *arg, const int64_t *widths, int64_t n, int min_total_bits,
                                   pf_slice_method *sm);
/* A slice method built elsewhere (pf_slice_method_init's invariants). */
pf_status pf_validate_slice_method_struct(const char *arg, const pf_slice_method *sm);
/* 2 <= g_level <= 256. */
pf_status pf_validate_g_level(const char *arg, int64_t g_level);
/* Every slice of sm fits g_level levels (max code <= g_level - 1); arg names the failing side. */
pf_status pf_validate_levels_fit(const char *arg, const pf_slice_method *sm, int64_t g_level);
/* 2 <= r <= 2**24. */
pf_status pf_validate_resolution(const char *arg, int64_t r);
/* Both sizes >= minimum. */
pf_status pf_validate_pair(const char *arg, int64_t a, int64_t b, int64_t minimum);
/* finite v in [0, max]: PF_ENONFINITE for NaN/inf, PF_EINVAL outside the range. */
pf_status pf_validate_sigma(const char *arg, double v, double max);
/* g_level read sigmas (NULL: none). */
pf_status pf_validate_read_sigma(const char *arg, const float *sigma, int64_t g_level);
/* finite, 0 <= LGS < HGS <= PF_CONDUCTANCE_MAX, Q_G = (HGS - LGS) / (g_level - 1) >= FLT_MIN and
 * >= HGS / PF_LEVEL_SPAN_MAX (float32 levels distinct and finite with write variation). */
pf_status pf_validate_conductance_range(double hgs, double lgs, int64_t g_level);
/* finite 0 < vread <= PF_VREAD_MAX, and the ADC reference current (HGS - LGS) * vread * n of the
 * tallest crossbar the exactness bound allows for rdac and g_level at most FLT_MAX. */
pf_status pf_validate_vread(double vread, double hgs, double lgs, int64_t g_level, int64_t rdac);
/* One slice_quantize call: a non-empty (n, rows, cols), granule >= 1, the slice method and, when
 * levels are wanted, g_level and its fit (the CPU kernels and the OpenCL host code call it first). */
pf_status pf_validate_slice_args(int64_t n, int64_t rows, int64_t cols, int64_t gran_rows, int64_t gran_cols,
                                 const pf_slice_method *sm, int want_levels, int64_t g_level);
/* Weight programming (program_conductance on every backend). */
pf_status pf_validate_program_params(const pf_program_params *p);
/* Every one of count values finite (`what` names them in the message, arg the argument). */
pf_status pf_validate_finite(const char *arg, const char *what, const float *v, int64_t count);
/* Everything pf_dpe_mvm relies on (sizes, slices, levels, resolutions, granules, the exact-sum bound
 * (rdac-1)(g_level-1)n < 2**24, conductances, noise); both backends call it first. */
pf_status pf_validate_dpe_args(const pf_dpe_args *a);

#endif
