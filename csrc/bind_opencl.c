/* Python bindings of the opencl kernel family (placeholder until the family lands). */
#include "bindings.h"

int pf_bind_opencl_init(PyObject *module)
{
    (void)module;
    return 0;
}
