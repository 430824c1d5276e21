/* Pieces of the CPU DPE shared by the driver (dpe.c) and the packed-weights
 * object (dpe_packed.c). */
#ifndef PF_DPE_INTERNAL_H
#define PF_DPE_INTERNAL_H

#include "core/dpe.h"
#include "cpu/kernels.h"
#include "cpu/threads.h"

/* Column scales of every column panel, Bs [ncp][nb][NR] (zeroed by the caller). */
void pf_dpe_pack_w_scales(const pf_dpe_args *a, int64_t nb, float *Bs);
/* Conductance values of every column panel, Bp [ncp][nb][sw][rows of block b][NR]
 * (core/dpe.h; padding columns zeroed by the caller, only real cells written): in units of Q_G above LGS,
 * read noise of call a->call applied when on; noise_w: any conductance noise
 * (programmed conductances or read noise). All threads, one weight row each. */
pf_status pf_dpe_pack_w_values(const pf_dpe_args *a, int noise_w, int64_t nk, float *Bp);
/* A programmed cell G (siemens) as the float path packs it, in units of Q_G
 * above LGS, times the read-noise factor f (1 without read noise). The
 * integer path takes programmed conductances when this is a level for every
 * cell (cpu/dpe_int.c). */
static inline float pf_dpe_cell_value(float G, float f, const pf_read_noise *rn)
{
    return (G / rn->qg) * f - rn->lgs;
}
/* The conductance-noise constants of a's weight rows (kernels.h). */
void pf_dpe_read_noise_init(const pf_dpe_args *a, pf_read_noise *r);
/* Crossbar block b of column panels [cp0, cp1) only, on the calling thread,
 * into Bc [cp1 - cp0][sw][rows of block b][NR], panels sw * nk * NR floats apart
 * (columns past P written here, so Bc can be reused). rn: from
 * pf_dpe_read_noise_init. val: 2 * (cp1 - cp0) * NR floats of scratch. */
void pf_dpe_pack_w_block(const pf_dpe_args *a, int noise_w, const pf_read_noise *rn, int64_t nk, int64_t cp0,
                         int64_t cp1, int64_t b, float *Bc, float *val);
/* The team a product of `rows` input rows is worth (the float and the integer path alike): its
 * multiply-adds, every (row, column, inner) cell for each input and weight slice. */
static inline int pf_dpe_product_threads(const pf_dpe_args *a, int64_t rows)
{
    return pf_threads_for((double)rows * (double)a->inner * (double)a->cols * a->sx * a->sw / PF_MACS_PER_UNIT);
}

#endif
