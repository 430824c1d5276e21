/* Local-memory tiled variant of pf_dpe_mvm (dpe.cl): the same arguments 0-21,
 * the same packed operands (A, B, RS, CS, in either B layout), the same
 * global size (Pp / PF_TN, Gc / PF_TM) and the same work-group shape
 * (lx, ly), and the same arithmetic in the same order, so its output is
 * bit-identical to pf_dpe_mvm's (and so to the CPU path's with noise off).
 * Noise lives in the packed operands (pf_dpe_pack_x / pf_dpe_pack_w draw it
 * keyed by element index), so one tile kernel serves noisy and noise-free
 * products alike.
 *
 * What changes is where the operands come from: for each block b and slice
 * pair (i, j), the work-group walks the block's rows present (nk_b, dpe.cl) in chunks of kt and
 * first copies the chunk's inputs of its TM*ly rows (lA: [kt][TM*ly]) and
 * weights of its TN*lx columns (lB: [kt][TN*lx]) into local memory, all work-
 * items together (coalesced reads: each row panel's chunk and each weight row
 * are contiguous in global memory); every work-item then reads its TM inputs
 * and TN weights per crossbar row from local memory. Global traffic per
 * work-group drops by lx (inputs) and ly (weights) against pf_dpe_mvm.
 *
 * kt, lA and lB are sized by the host (csrc/opencl/runtime.c: mvm_tiled_chunk) from
 * CL_DEVICE_LOCAL_MEM_SIZE less the kernel's own local use; the kernel takes
 * its work-group shape from get_local_size. Every work-item reaches every
 * barrier: out-of-range work-items (none with the host's exact global sizes)
 * still help load and only skip the final store. */
#pragma OPENCL FP_CONTRACT OFF

kernel void pf_dpe_mvm_tiled(global const float *A, global const float *B, global const float *RS,
                             global const float *CS, global const float *fparams, global const float *tables,
                             global const int *tab_info, global float *out,
                             ulong g0, ulong rows_valid, ulong Gc, ulong Kp, ulong Pp, ulong P,
                             int n, int nb, int sx, int sw, int use_table, ulong R, int out_nphw,
                             int pair_shift, int kt, local float *lA, local float *lB)
{
    /* slices of B (pf_adc_slice); arithmetic, not a select: PoCL 3.1 fails an assertion
     * (ParallelRegion::Create) on the tiled kernel with the select */
    const int paired = pair_shift != 0, swb = (sw + paired) >> paired;
    const uint lx = (uint)get_local_size(0), ly = (uint)get_local_size(1);
    const uint tx = (uint)get_local_id(0), ty = (uint)get_local_id(1);
    const uint lid = ty * lx + tx, nthreads = lx * ly;
    const uint wa = PF_TM * ly, wb = PF_TN * lx; /* local row widths of lA and lB */
    const ulong cb = get_global_id(0) * PF_TN, rb = get_global_id(1) * PF_TM;
    /* first column and first row panel of the work-group */
    const ulong cb0 = get_group_id(0) * (ulong)wb, p0 = get_group_id(1) * (ulong)ly;
    const int active = cb < Pp && rb < Gc;
    const uint bk = lid / wb, bc = lid % wb; /* first element of lB this work-item loads */
    pf_vec o[PF_TM];
    pf_vec tb[PF_TM];
    pf_vec acc[PF_TM];
    for (int r = 0; r < PF_TM; r++)
        o[r] = (pf_vec)(0.0f);
    for (int b = 0; b < nb; b++) {
        const int nk = (int)pf_block_rows((ulong)b, (ulong)n, Kp); /* the rows present (dpe.cl) */
        for (int r = 0; r < PF_TM; r++)
            tb[r] = (pf_vec)(0.0f);
        for (int i = 0; i < sx; i++) {
            for (int j = 0; j < swb; j++) {
                for (int r = 0; r < PF_TM; r++)
                    acc[r] = (pf_vec)(0.0f);
                for (int k0 = 0; k0 < nk; k0 += kt) {
                    const uint kc = (uint)min(kt, nk - k0);
                    /* inputs: for each row panel pl of the group, rows k0 .. k0+kc of block b,
                     * slice i: kc * PF_TM contiguous floats at
                     * A[((p0+pl)*sx*Kp + pf_panel_row(b, i, sx, n, Kp) + k0)*TM]
                     * (divisions by the compile-time PF_TM only) */
                    for (uint pl = 0; pl < ly; pl++) {
                        const ulong p = p0 + pl;
                        if (p * PF_TM >= Gc)
                            break; /* never with the host's sizes: Gc is a multiple of TM*ly */
                        global const float *src = A + (p * sx * Kp + pf_panel_row(b, i, sx, n, Kp) + k0) * PF_TM;
                        for (uint e = lid; e < kc * PF_TM; e += nthreads)
                            lA[(e / PF_TM) * wa + pl * PF_TM + e % PF_TM] = src[e];
                    }
                    /* weights: rows k0 .. k0+kc of block b, slice j, columns cb0 .. cb0+wb; element
                     * e = kk * wb + c stepped by nthreads without divisions (bk, bc: lid / wb, lid % wb) */
                    {
                        uint kk = bk, c = bc;
                        while (kk < kc) {
                            const ulong col = cb0 + c;
#if PF_B_PANEL
                            const ulong src = ((col / PF_TN) * swb * Kp + pf_panel_row(b, j, swb, n, Kp) + k0 + kk) *
                                              PF_TN + col % PF_TN;
#else
                            const ulong src = ((ulong)j * Kp + (ulong)b * n + k0 + kk) * Pp + col;
#endif
                            lB[kk * wb + c] = col < Pp ? B[src] : 0.0f;
                            c += nthreads;
                            if (c >= wb) {
                                if (c < 2 * wb) {
                                    c -= wb;
                                    kk++;
                                } else {
                                    kk += c / wb;
                                    c %= wb;
                                }
                            }
                        }
                    }
                    barrier(CLK_LOCAL_MEM_FENCE);
                    local const float *la = lA + ty * PF_TM;
                    local const float *lb = lB + tx * PF_TN;
                    for (uint kk = 0; kk < kc; kk++) {
                        const pf_vec bv = PF_VLOAD(lb + kk * wb);
                        local const float *ak = la + kk * wa;
#pragma unroll
                        for (int r = 0; r < PF_TM; r++)
                            acc[r] = fma((pf_vec)(ak[r]), bv, acc[r]);
                    }
                    barrier(CLK_LOCAL_MEM_FENCE);
                }
                if (!active)
                    continue;
                pf_adc_slice(tb, acc, fparams, tables, tab_info, i, j, sx, sw, use_table, pair_shift);
            }
        }
        if (!active)
            continue;
        const pf_vec cs = PF_VLOAD(CS + (ulong)b * Pp + cb);
        global const float *rs = RS + (ulong)b * Gc + rb;
        for (int r = 0; r < PF_TM; r++)
            o[r] = o[r] + tb[r] * ((pf_vec)(rs[r]) * cs);
    }
    if (!active)
        return;
    pf_tile_store(out, o, rb, cb, g0, rows_valid, P, R, out_nphw);
}
