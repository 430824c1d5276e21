/* Argument contract of the slicing ops (bind_slicing.c): one parser and one
 * result builder for every backend (device=, bind_device.h), so both backends
 * take the same arguments, raise the same errors and return the same tuples. */
#ifndef PF_BIND_SLICING_H
#define PF_BIND_SLICING_H

#include "python/array.h"
#include "python/bindings.h"
#include "core/slicing.h"

/* slice_quantize(data, slice_method, paral_size, quant_gran=None, bw_e=None, dequant=False, g_level=None) */
typedef struct {
    PfArray *x;                                      /* float32 input */
    PfArray *codes, *gmax, *gscale, *gexp, *dq, *levels; /* outputs (gexp, dq, levels may be NULL) */
    pf_slice_method sm;
    int bfp, g_level;                                /* g_level 0: no levels */
    int64_t n, rows, cols, gran[2];
} pf_slice_call;

/* Parses and validates the arguments and allocates the outputs. 0, or -1 with
 * an exception naming the argument (c is then cleared). */
int pf_slice_call_parse(PyObject *args, PyObject *kwds, pf_slice_call *c);
/* The result tuple (codes, gran_max, gran_scale, gran_exp|None, dequant|None,
 * levels|None, (qr', qc')) from a run's status (a failure raised naming `what`);
 * clears c either way. */
PyObject *pf_slice_call_finish(pf_slice_call *c, pf_status status, const char *what);
void pf_slice_call_clear(pf_slice_call *c);

/* program_conductance(levels, g_level, HGS, LGS, write_variation=0, rate_stuck_HGS=0,
 * rate_stuck_LGS=0, seed=None): *levels (uint8 (S, rows, cols)) and *out (float32, same shape)
 * are new references on success; -1 with an exception otherwise. */
int pf_program_call_parse(PyObject *args, PyObject *kwds, PfArray **levels, PfArray **out, pf_program_params *p);

#endif
