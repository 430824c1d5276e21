/* The DPE call's argument contract (bind_dpe.c, bind_packed.c): one set of
 * rules and messages for every backend (device=, bind_device.h). */
#ifndef PF_BIND_DPE_H
#define PF_BIND_DPE_H

#include "python/array.h"
#include "core/dpe.h"
#include "python/convert.h"

/* Arrays a call keeps alive while the kernels run. */
typedef struct {
    PfArray *xc, *xs, *wl, *wc, *ws, *sig, *out, *img, *gmax, *dq;
} pf_dpe_refs;

void pf_dpe_refs_release(pf_dpe_refs *r);

/* ndim and each shape[i] >= 0 of a (shape[i] < 0: any). */
int pf_dpe_check_shape(PfArray *a, const char *argname, int ndim, const int64_t *shape);

/* The weight and device arguments every DPE entry point takes, as converted (convert.h). */
typedef struct {
    PyObject *owl, *owc, *ows, *osig; /* w_levels, w_conductance, w_scale, read_sigma */
    pf_pair_arg w_granule;
    pf_method_arg w_widths;
    pf_int_arg n;
    int rdac, g_level;
    pf_resolutions_arg radc;
    pf_real_arg HGS, LGS, vnoise;
    uint64_t seed;
    uint64_t call;
} pf_dpe_device_args;

void pf_dpe_device_init(pf_dpe_device_args *d);
/* Weights and device arguments into *a (a->inner, the input granule and slices must be set): the
 * core contract (pf_validate_dpe_args) first, then the arrays. 0, or -1 with an exception naming
 * the argument. */
int pf_dpe_parse_weights_and_device(pf_dpe_args *a, pf_dpe_refs *refs, const pf_dpe_device_args *d);

/* normals(seed, stream, call, idx0, count): the arguments and a new float32 (count,) output of
 * _core.normals. 0, or -1 with an exception naming the argument. */
typedef struct {
    uint64_t seed;
    unsigned int stream, call;
    uint64_t idx0;
    Py_ssize_t count;
    PfArray *out;
} pf_normals_call;
int pf_normals_parse(PyObject *args, pf_normals_call *c);

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

/* The whole _core.dpe_mvm / dpe_conv2d call on the CPU without weights_key,
 * reading weights packed once (bind_packed.c) when packed is not NULL. */
PyObject *pf_dpe_mvm_call(PyObject *args, PyObject *kwds, pf_dpe_packed *packed);
PyObject *pf_dpe_conv2d_call(PyObject *args, PyObject *kwds, pf_dpe_packed *packed);
/* bind_packed.c: PackedWeights, dpe_pack, dpe_mvm_packed, dpe_conv2d_packed. */
int pf_bind_packed_init(PyObject *module);

#endif
