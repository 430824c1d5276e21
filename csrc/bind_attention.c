/* Python bindings of the attention kernel family (placeholder until the family lands). */
#include "bindings.h"

int pf_bind_attention_init(PyObject *module)
{
    (void)module;
    return 0;
}
