/* Device physics applied to programmed conductances: IR drop from wire
 * resistance (irdrop.c) and conductance drift (drift.c). See docs/physics.md
 * for the network, boundary conditions and units.
 *
 * Plain pointers and sizes, nothing Python-specific. */
#ifndef PF_PHYSICS_H
#define PF_PHYSICS_H

#include <stdint.h>

#include "core/interrupt.h"
#include "core/pf_common.h"

/* Philox stream of the per-cell drift exponents nu (counter = cell index,
 * call = 0). Chosen far from the streams of philox_noise.h (0..3) so that
 * new noise families added there do not collide with it. */
#define PF_STREAM_DRIFT 64u
#define PF_IRDROP_MAX_BLOCK (1 << 14) /* rows or columns of one crossbar block */
/* Largest g * r_wire (a cell's conductance over a wire segment's): the solve's error grows
 * as ~1e-16 * g r relative to the block's largest G_eff (measured against 80-digit solves:
 * 1e-10 at 1e6, 1e-4 at 1e13; wrong-signed and NaN entries at 1e95), so 1e6 keeps it far
 * below float32 rounding. Physical crossbars have g r ~ 1e-4 to 1e-2. */
#define PF_IRDROP_MAX_GR 1e6

/* Effective conductance matrix of one crossbar block with wire resistance.
 *
 * g: cell conductances in siemens, n rows x m columns, element (i, j) at
 * g[i * ldg + j]; every g >= 0 is physical (a negative value, possible with
 * large write variation, is accepted as an open cell: the network conducts
 * max(g, 0)). r_wire: resistance in ohms of one
 * wire segment, > 0. Network: row i is driven by an ideal source at its left
 * end, one segment before cell (i, 0) and one between adjacent cells; column j
 * is read by a virtual-ground ADC at its bottom end, one segment after cell
 * (n-1, j) and one between adjacent cells. The column current is then linear
 * in the row voltages: I_j = sum_i geff[i * ldo + j] * V_i.
 * Requires r_wire >= DBL_MIN (1 / r_wire finite) and max(g, 0) * r_wire <=
 * PF_IRDROP_MAX_GR for every cell (PF_EINVAL naming "r_wire"; an open cell
 * passes, however negative its g); the result is checked: every geff finite
 * and >= 0 (the network's cells are >= 0, so all node voltages lie between 0
 * and the drive), else PF_EINVAL naming "r_wire".
 *
 * Returns PF_OK, PF_EINVAL (bad sizes/values, a singular network),
 * PF_ENONFINITE, PF_EOVERFLOW, PF_ENOMEM. */
pf_status pf_irdrop_block(const double *g, int64_t n, int64_t m, int64_t ldg, double r_wire, double *geff,
                          int64_t ldo);

/* G_eff of every crossbar block of programmed layer conductances g (S, K, P)
 * float32 siemens: blocks of block_rows x block_cols cells tile (K, P); the
 * cells of a partial block past K or P are padding (conductance pad_g,
 * rows driven at 0 V). Writes geff (S, K, P) float32, the valid cells only.
 * Blocks run in parallel (OpenMP, pyfastpim's thread count); each block's
 * result is independent of the thread count. A failing block's error record
 * (pf_irdrop_block's argument and message) is the call's. A set cancel flag
 * (may be NULL) stops the solve between blocks: PF_EINTR, geff partly written. */
pf_status pf_irdrop_layer(const float *g, int64_t n_slices, int64_t rows, int64_t cols, int64_t block_rows,
                          int64_t block_cols, double r_wire, double pad_g, float *geff, pf_cancel *cancel);

/* Conductance drift of count cells:
 *   nu[idx]  = max(0, nu_mean + nu_std * pf_normal(seed, PF_STREAM_DRIFT, 0, idx))
 *   out[idx] = (float)((double)g[idx] * exp(-nu[idx] * log(t / t0)))
 * for idx = index0 .. index0 + count - 1 (g, out and nu_out indexed from 0;
 * nu_out may be NULL; nu_out gets the double nu the formula used, not a float32
 * rounding of it). Requires t >= t0 > 0 and finite values (g included:
 * PF_ENONFINITE naming "g"), nu_std >= 0. */
pf_status pf_drift(const float *g, int64_t count, uint64_t index0, uint64_t seed, double t, double t0,
                   double nu_mean, double nu_std, float *out, double *nu_out);

#endif
