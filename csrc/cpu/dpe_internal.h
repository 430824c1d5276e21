/* Pieces of the CPU DPE shared by the driver (dpe.c) and the packed-weights
 * object (dpe_packed.c). */
#ifndef PF_DPE_INTERNAL_H
#define PF_DPE_INTERNAL_H

#include "core/dpe.h"

/* Inner blocks nb = ceil(K/n) and rows stored per block nk (n, or K when one
 * block holds all K < n rows). */
static inline void pf_dpe_blocks(const pf_dpe_args *a, int64_t *nb, int64_t *nk)
{
    *nb = pf_ceil_div(a->inner, a->n);
    *nk = *nb == 1 ? a->inner : a->n;
}

/* Some read_sigma entry is positive: conductances are re-drawn every call. */
static inline int pf_dpe_read_noise_on(const pf_dpe_args *a)
{
    if (a->read_sigma)
        for (int l = 0; l < a->g_level; l++)
            if (a->read_sigma[l] > 0.0f)
                return 1;
    return 0;
}

/* Column scales of every column panel, Bs [ncp][nb][NR] (zeroed by the caller). */
void pf_dpe_pack_w_scales(const pf_dpe_args *a, int64_t nb, float *Bs);
/* Conductance values of every column panel, Bp [ncp][nb][sw][nk][NR] (padding
 * zeroed by the caller, only real cells written): in units of Q_G above LGS,
 * read noise of call a->call applied when on; noise_w: any conductance noise
 * (programmed conductances or read noise). All threads, one weight row each. */
pf_status pf_dpe_pack_w_values(const pf_dpe_args *a, int noise_w, int64_t nb, int64_t nk, float *Bp);

#endif
