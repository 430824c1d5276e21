/* Philox normals on the device (pf_normals, pf_normals_range in kernels/base.cl). */
#include "opencl/internal.h"

pf_status pf_cl_normals_range(pf_cl_device *dev, cl_mem out, uint64_t seed, cl_uint stream, cl_uint call,
                              cl_ulong start, cl_ulong end, pf_cancel *cancel)
{
    if (end <= start)
        return PF_OK;
    /* 8 Philox groups of 4 per work-item, from group (start / 4) rounded down to 8 */
    pf_cl_range r = pf_cl_range_1d(dev, ((end + 3) / 4 - ((start / 4) & ~(cl_ulong)7) + 7) / 8);
    r.cancel = cancel;
    r.pieces = (end - start) / PF_CL_PIECE_ELEMS + 1;
    return PF_CL_LAUNCH(dev, K_NRANGE, &r, ARG_MEM(out), ARG_U64(seed), ARG_U32(stream), ARG_U32(call),
                        ARG_U64(start), ARG_U64(end));
}

pf_status pf_cl_normals(pf_cl_device *dev, uint64_t seed, uint32_t stream, uint32_t call, uint64_t idx0,
                        int64_t count, float *out)
{
    if (count <= 0)
        return PF_OK;
    size_t bytes;
    pf_status st = pf_cl_build(dev);
    if (st != PF_OK)
        return st;
    if (pf_mul_size((size_t)count, sizeof(float), &bytes))
        return pf_fail(PF_EOVERFLOW, "count", "normals: %lld floats overflow", (long long)count);
    pf_cl_set s;
    pf_cl_set_init(&s, dev);
    cl_mem mo = pf_cl_set_out(&s, out, bytes, "out");
    const pf_cl_range r = {1, {(size_t)count, 1}, {0, 0}, NULL, 0, 0};
    PF_CL_SET_LAUNCH(&s, K_NORMALS, &r, ARG_MEM(mo), ARG_U64(seed), ARG_U32(stream), ARG_U32(call), ARG_U64(idx0),
                     ARG_U64(count));
    return pf_cl_set_done(&s);
}
