/* The CPU backend's table (core/backend.h): the C kernels of csrc/cpu/, device NULL. */
#ifndef PF_CPU_BACKEND_H
#define PF_CPU_BACKEND_H

#include "core/backend.h"

extern const pf_backend pf_backend_cpu;

#endif
