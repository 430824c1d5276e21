/* Memory accounting for the core: every byte the core allocates goes through
 * pf_alloc/pf_free, and every copy the core makes is recorded by kind, so
 * pyfastpim.memory can prove zero-copy claims in tests. */
#ifndef PF_MEMORY_H
#define PF_MEMORY_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    PF_COPY_HOST = 0,        /* same dtype, layout change or owned copy */
    PF_COPY_CONVERT = 1,     /* dtype conversion (e.g. float64 -> float32) */
    PF_COPY_HOST_TO_DEVICE = 2,
    PF_COPY_DEVICE_TO_HOST = 3,
    PF_COPY_KINDS = 4
} pf_copy_kind;

/* 64-byte aligned allocation, counted; NULL on failure or size 0 overflow. */
void *pf_alloc(size_t nbytes);
/* Zero-filled pf_alloc of n * size bytes, NULL on overflow or failure. */
void *pf_calloc(size_t n, size_t size);
void pf_free(void *p);

void pf_record_copy(pf_copy_kind kind, size_t nbytes);

typedef struct {
    int64_t current_bytes;
    int64_t peak_bytes;
    int64_t n_allocs;          /* allocations ever made */
    int64_t copies[PF_COPY_KINDS];
    int64_t copy_bytes[PF_COPY_KINDS];
} pf_memory_stats;

void pf_memory_get(pf_memory_stats *out);
void pf_memory_reset_peak(void);

#endif
