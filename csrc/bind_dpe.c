/* Python bindings of the dpe kernel family (placeholder until the family lands). */
#include "bindings.h"

int pf_bind_dpe_init(PyObject *module)
{
    (void)module;
    return 0;
}
