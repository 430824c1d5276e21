/* Cooperative cancellation of long kernels (Ctrl-C).
 *
 * Kernels take an optional pf_cancel pointer and poll it between blocks of
 * work (pf_cancelled: one relaxed atomic load); when it is set they stop
 * early and return PF_EINTR, leaving their outputs partly written. The Python
 * bindings set it from a SIGINT handler (bind_interrupt.c) while the GIL is
 * released. Plain C, nothing Python-specific. */
#ifndef PF_INTERRUPT_H
#define PF_INTERRUPT_H

#include <stdatomic.h>

typedef struct {
    atomic_int flag;
} pf_cancel;

static inline int pf_cancelled(pf_cancel *c)
{
    return c && atomic_load_explicit(&c->flag, memory_order_relaxed);
}

#endif
