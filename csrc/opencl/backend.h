/* The OpenCL backend's table (core/backend.h): dev is a pf_cl_device (opencl.h). */
#ifndef PF_OPENCL_BACKEND_H
#define PF_OPENCL_BACKEND_H

#include "core/backend.h"

extern const pf_backend pf_backend_opencl;

#endif
