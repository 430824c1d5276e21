#include "core/memory.h"
#include "core/pf_common.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* Large blocks are first touched by a kernel: transparent huge pages (as
 * NumPy asks for its large arrays) cut the page-fault cost of that first
 * write by ~10x where THP is in "madvise" mode. */
#define PF_HUGE_PAGE_MIN ((size_t)4 << 20)

static void advise_huge_pages(void *p, size_t nbytes)
{
#ifdef MADV_HUGEPAGE
    if (nbytes < PF_HUGE_PAGE_MIN)
        return;
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t begin = ((uintptr_t)p + page - 1) & ~(page - 1);
    uintptr_t end = ((uintptr_t)p + nbytes) & ~(page - 1);
    if (end > begin)
        (void)madvise((void *)begin, end - begin, MADV_HUGEPAGE); /* advisory: failure is harmless */
#else
    (void)p;
    (void)nbytes;
#endif
}

/* A 64-byte header in front of each block keeps the size for pf_free and
 * keeps the user pointer 64-byte aligned for SIMD loads. */
#define PF_HEADER PF_ALIGN

static _Atomic int64_t g_current;
static _Atomic int64_t g_peak;
static _Atomic int64_t g_nallocs;
static _Atomic int64_t g_copies[PF_COPY_KINDS];
static _Atomic int64_t g_copy_bytes[PF_COPY_KINDS];

static void raise_peak(int64_t now)
{
    int64_t peak = atomic_load(&g_peak);
    while (now > peak && !atomic_compare_exchange_weak(&g_peak, &peak, now))
        ;
}

void *pf_alloc(size_t nbytes)
{
    size_t total;
    if (pf_add_size(nbytes, PF_HEADER, &total) != PF_OK)
        return NULL;
    /* aligned_alloc needs a multiple of the alignment */
    if (pf_add_size(total, PF_ALIGN - 1, &total) != PF_OK)
        return NULL;
    total &= ~(size_t)(PF_ALIGN - 1);
    unsigned char *base = aligned_alloc(PF_ALIGN, total);
    if (!base)
        return NULL;
    memcpy(base, &nbytes, sizeof nbytes);
    advise_huge_pages(base + PF_HEADER, nbytes);
    int64_t now = atomic_fetch_add(&g_current, (int64_t)nbytes) + (int64_t)nbytes;
    atomic_fetch_add(&g_nallocs, 1);
    raise_peak(now);
    return base + PF_HEADER;
}

void *pf_calloc(size_t n, size_t size)
{
    size_t nbytes;
    if (pf_mul_size(n, size, &nbytes) != PF_OK)
        return NULL;
    void *p = pf_alloc(nbytes);
    if (p)
        memset(p, 0, nbytes);
    return p;
}

void pf_free(void *p)
{
    if (!p)
        return;
    unsigned char *base = (unsigned char *)p - PF_HEADER;
    size_t nbytes;
    memcpy(&nbytes, base, sizeof nbytes);
    atomic_fetch_sub(&g_current, (int64_t)nbytes);
    free(base);
}

void pf_record_copy(pf_copy_kind kind, size_t nbytes)
{
    atomic_fetch_add(&g_copies[kind], 1);
    atomic_fetch_add(&g_copy_bytes[kind], (int64_t)nbytes);
}

void pf_memory_get(pf_memory_stats *out)
{
    out->current_bytes = atomic_load(&g_current);
    out->peak_bytes = atomic_load(&g_peak);
    out->n_allocs = atomic_load(&g_nallocs);
    for (int k = 0; k < PF_COPY_KINDS; k++) {
        out->copies[k] = atomic_load(&g_copies[k]);
        out->copy_bytes[k] = atomic_load(&g_copy_bytes[k]);
    }
}

void pf_memory_reset_peak(void)
{
    atomic_store(&g_peak, atomic_load(&g_current));
}
