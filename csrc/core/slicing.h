/* Bit-slicing quantizer and weight programming kernels (spec sections 1-6).
 *
 * Plain pointers and sizes, no Python. OpenMP over granule rows; every output
 * element is a pure function of its input and its granule's max-abs, so the
 * results do not depend on the thread count or the ISA path.
 *
 * Layout contract (what the fused MVM kernel reads):
 *   data       float32 (N, R, C), C-contiguous. Weights are 2-D (C, P) and
 *              passed as N = 1.
 *   granule    (qr', qc') = quant_gran rounded up to multiples of paral_size;
 *              grid gr = ceil(R / qr'), gc = ceil(C / qc'). The padded matrix
 *              is never materialized: padding quantizes to q = 0.
 *   codes      uint8 (S, N, R, C), slice-major, s = 0 least significant,
 *              UNPADDED; plane s starts at codes + s * N*R*C.
 *              q = sum_s w[s] * codes[s] (pf_slice_method.weight).
 *   gran_max   float32 (N, gr, gc): M, max |x| over the granule.
 *   gran_scale float32 (N, gr, gc): INT M / K (0 when M == 0), BFP 2**(e+2-B).
 *   gran_exp   int32   (N, gr, gc): BFP exponent e (BFP only).
 *   dequant    float32 (N, R, C), optional: INT (q / K) * M, BFP q * scale.
 *   levels     uint8 (S, C, P) for weights: L = rint(code / m[s] * (g_level-1)).
 *   conductance float32 (S, C, P): programmed G in siemens (spec 6) with write
 *              variation pf_normal(seed, PF_STREAM_WRITE, 0, idx) and stuck-at
 *              draws pf_uniform(seed, PF_STREAM_STUCK, 0, idx), idx = (s*C + c)*P + p.
 */
#ifndef PF_SLICING_H
#define PF_SLICING_H

#include <stdint.h>

#include "core/interrupt.h"
#include "core/pf_common.h"
#include "core/quantize.h"

/* pf_slice_quantize: one pass over x per granule row band (a second,
 * read-only max pass only when there are too few bands to keep the threads
 * busy, e.g. "per-matrix"): max-abs per granule, INT (bfp = 0) or BFP
 * (bfp = 1) quantization, two's complement, slicing; optionally the
 * dequantized values and the programmed levels.
 *
 * gran_rows/gran_cols are the rounded granule (qr', qc'), >= 1.
 * gran_exp is required when bfp (else ignored, may be NULL); dequant and
 * levels may be NULL. levels needs 2 <= g_level <= 256 and
 * m[s] <= g_level - 1 for every slice.
 *
 * Returns PF_OK; PF_EINVAL for invalid sizes or method, and for data holding
 * NaN or +-inf (detected in the max pass, outputs then undefined);
 * PF_EOVERFLOW when N*R*C or S*N*R*C overflows. Allocates nothing. */
pf_status pf_slice_quantize(const float *x, int64_t n, int64_t rows, int64_t cols, int64_t gran_rows, int64_t gran_cols,
                      const pf_slice_method *sm, int bfp, uint8_t *codes, float *gran_max, float *gran_scale,
                      int32_t *gran_exp, float *dequant, int g_level, uint8_t *levels);
/* The same, polling cancel (may be NULL) between bands / rows: PF_EINTR when
 * it is set (outputs then partly written). */
pf_status pf_slice_quantize_cancel(const float *x, int64_t n, int64_t rows, int64_t cols, int64_t gran_rows,
                             int64_t gran_cols, const pf_slice_method *sm, int bfp, uint8_t *codes, float *gran_max,
                             float *gran_scale, int32_t *gran_exp, float *dequant, int g_level, uint8_t *levels,
                             pf_cancel *cancel);

/* Levels of existing codes (S planes of cells_per_slice codes each):
 * L = rint(code / m[s] * (g_level - 1)). PF_EINVAL when g_level is outside
 * 2..256 or some m[s] > g_level - 1 or a code exceeds m[s] (the result would
 * not be a level). */
pf_status pf_program_levels(const uint8_t *codes, int64_t cells_per_slice, const pf_slice_method *sm, int g_level,
                      uint8_t *levels);

/* Device parameters of weight programming (spec 6). */
typedef struct {
    int g_level;
    double hgs, lgs;          /* siemens, lgs < hgs */
    double write_variation;   /* sigma of the relative write noise, >= 0 */
    double rate_stuck_hgs;    /* probabilities, >= 0, sum <= 1 */
    double rate_stuck_lgs;
    uint64_t seed;            /* Philox key (PF_DEFAULT_SEED by default) */
} pf_program_params;

/* Programmed conductance of every cell, float32 arithmetic:
 *   Q_G = (float)((hgs - lgs) / (g_level - 1)), G = (float)L * Q_G + (float)lgs,
 *   G = G + G * ((float)write_variation * pf_normal(seed, PF_STREAM_WRITE, 0, idx)),
 *   r = pf_uniform(seed, PF_STREAM_STUCK, 0, idx): r < rate_stuck_hgs -> (float)hgs,
 *   else r < rate_stuck_hgs + rate_stuck_lgs -> (float)lgs (compared in double),
 * with idx = (s * rows + c) * cols + p. levels and conductance are (S, rows, cols).
 * PF_EINVAL for invalid parameters. */
pf_status pf_program_conductance(const uint8_t *levels, int64_t n_slices, int64_t rows, int64_t cols,
                           const pf_program_params *params, float *conductance);
/* The same, polling cancel (may be NULL) between rows of cells: PF_EINTR when it is set
 * (conductance then partly written). */
pf_status pf_program_conductance_cancel(const uint8_t *levels, int64_t n_slices, int64_t rows, int64_t cols,
                                        const pf_program_params *params, float *conductance, pf_cancel *cancel);

#endif
