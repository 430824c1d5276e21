/* Python bindings of the slicing kernel family (placeholder until the family lands). */
#include "bindings.h"

int pf_bind_slicing_init(PyObject *module)
{
    (void)module;
    return 0;
}
