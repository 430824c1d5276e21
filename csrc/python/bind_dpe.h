/* The DPE call's argument contract, shared by the CPU binding (bind_dpe.c)
 * and the OpenCL binding (bind_opencl.c): one set of rules and messages. */
#ifndef PF_BIND_DPE_H
#define PF_BIND_DPE_H

#include "python/array.h"
#include "core/dpe.h"

/* Arrays a call keeps alive while the kernels run. */
typedef struct {
    PfArray *xc, *xs, *wl, *wc, *ws, *sig, *out, *img, *gmax, *dq;
} pf_dpe_refs;

void pf_dpe_refs_release(pf_dpe_refs *r);

/* A slice-method sequence (most significant first, widths 1..8, sign first,
 * <= 16 bits) into m[s], w[s] least significant first: the slice count, or -1. */
int pf_dpe_parse_widths(PyObject *obj, const char *argname, int *m, int64_t *w);
/* A pair of positive ints. */
int pf_dpe_parse_pair(PyObject *obj, const char *argname, int64_t *a, int64_t *b);
/* A pair of ints in minimum..2**31-1 (convolution geometry). */
int pf_dpe_parse_conv_pair(PyObject *obj, const char *argname, int64_t *a, int64_t *b, int64_t minimum);
/* ndim and each shape[i] >= 0 of a (shape[i] < 0: any). */
int pf_dpe_check_shape(PfArray *a, const char *argname, int ndim, const int64_t *shape);
/* Weights and device arguments; a->inner, x_qr, x_qc must be set. 0, or -1
 * with an exception naming the argument. */
int pf_dpe_parse_weights_and_device(pf_dpe_args *a, pf_dpe_refs *refs, PyObject *owl, PyObject *owc, PyObject *ows,
                                    PyObject *owg, PyObject *oww, long long n, int rdac, int g_level, PyObject *oradc,
                                    double HGS, double LGS, PyObject *osig, double vnoise, long long seed,
                                    unsigned long call);

/* A whole dpe_mvm call (the arguments of _core.dpe_mvm, plus a trailing
 * weights_key when key is not NULL) into *a, ready to run: operands, output
 * (given or new) and strides. 0, or -1 with an exception; the caller releases
 * refs either way. */
int pf_dpe_parse_mvm(PyObject *args, PyObject *kwds, pf_dpe_args *a, pf_dpe_refs *refs, PyObject **key);
/* A whole dpe_conv2d call into *a and the im2col geometry *c (which *a points
 * to), with refs->gmax (to be filled by the backend's granule-max pass before
 * the MVM), refs->out and, when *want_dq, refs->dq allocated. */
int pf_dpe_parse_conv2d(PyObject *args, PyObject *kwds, pf_dpe_args *a, pf_dpe_refs *refs, pf_im2col *c,
                        int *want_dq, PyObject **key);

/* The whole _core.dpe_mvm / dpe_conv2d call, reading weights packed once
 * (bind_packed.c) when packed is not NULL. */
PyObject *pf_dpe_mvm_call(PyObject *args, PyObject *kwds, pf_dpe_packed *packed);
PyObject *pf_dpe_conv2d_call(PyObject *args, PyObject *kwds, pf_dpe_packed *packed);
/* bind_packed.c: PackedWeights, dpe_pack, dpe_mvm_packed, dpe_conv2d_packed. */
int pf_bind_packed_init(PyObject *module);

#endif
