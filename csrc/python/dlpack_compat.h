/* DLPack 1.0 declarations for headers older than 1.0 (Debian 12 ships dlpack 0.6).
 *
 * DLPack 1.0 adds DLManagedTensorVersioned (a version, flags such as read-only,
 * then the same DLTensor), exchanged in capsules named "dltensor_versioned"
 * when the consumer passes max_version >= (1, 0) to __dlpack__. The layout
 * below is the ABI the 1.0 header defines; with a 1.0 header it is not
 * redeclared. */
#ifndef PF_DLPACK_COMPAT_H
#define PF_DLPACK_COMPAT_H

#include <dlpack/dlpack.h>
#include <stdint.h>

#ifndef DLPACK_MAJOR_VERSION
typedef struct {
    uint32_t major;
    uint32_t minor;
} DLPackVersion;

typedef struct DLManagedTensorVersioned {
    DLPackVersion version;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensorVersioned *self);
    uint64_t flags;
    DLTensor dl_tensor;
} DLManagedTensorVersioned;

#define DLPACK_FLAG_BITMASK_READ_ONLY (UINT64_C(1) << 0)
#define DLPACK_FLAG_BITMASK_IS_COPIED (UINT64_C(1) << 1)
#endif

/* The DLPack version pyfastpim produces and consumes in versioned capsules. */
#define PF_DLPACK_MAJOR 1
#define PF_DLPACK_MINOR 0

#endif
