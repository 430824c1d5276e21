/* Ctrl-C during a kernel that runs with the GIL released.
 *
 * pf_sigint_begin (main thread only, and only while SIGINT has a handler, e.g.
 * Python's) installs a C SIGINT handler that sets a pf_cancel flag and then
 * calls the previous handler (so Python still sees the signal), and returns
 * the flag for the kernel to poll; elsewhere it returns NULL (the kernel then
 * runs to completion, as before). pf_sigint_end restores the previous handler.
 *
 * Callers use pf_sigint_run (below; begin and end are bind_interrupt.c's own), which loops (with the GIL
 * held around both):
 *     do {
 *         cancel = pf_sigint_begin(&g);
 *         Py_BEGIN_ALLOW_THREADS  st = kernel(..., cancel);  Py_END_ALLOW_THREADS
 *     } while (pf_sigint_end(&g, st == PF_EINTR) > 0);
 * and on st == PF_EINTR an exception is set (KeyboardInterrupt, or what the
 * Python handler raised): the caller returns NULL.
 * pf_sigint_end returns -1 when the kernel was interrupted and the Python
 * signal handlers raised, 1 when it was interrupted but they did not raise
 * (a handler that ignores Ctrl-C: the kernel is deterministic, run it again),
 * 0 otherwise. */
#ifndef PF_BIND_INTERRUPT_H
#define PF_BIND_INTERRUPT_H

#include "core/interrupt.h"
#include "core/pf_common.h"

/* The loop above around status = call(ctx, cancel), run with the GIL released (held on entry and
 * exit; the backend's error record cleared before each run). Returns call's status: PF_EINTR with
 * the signal handler's exception set, when interrupted. */
pf_status pf_sigint_run(pf_status (*call)(void *ctx, pf_cancel *cancel), void *ctx);

#endif
