/* Shared definitions for the pyfastpim C core.
 *
 * Everything below the binding layer (bind_*.c) takes plain pointers, sizes
 * and strides and reports failure through pf_status; nothing here includes
 * Python.h so the kernels build unchanged for tests, sanitizers and OpenCL
 * host code. */
#ifndef PF_COMMON_H
#define PF_COMMON_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    PF_OK = 0,
    PF_ENOMEM = 1,    /* allocation failed */
    PF_EOVERFLOW = 2, /* a size computation overflowed */
    PF_EINVAL = 3,    /* invalid argument (checked again below the binding) */
    PF_EDEVICE = 4,   /* accelerator runtime error */
    PF_EINTR = 5,     /* stopped early: the caller's pf_cancel flag was set (interrupt.h) */
    PF_ENONFINITE = 6 /* an input held NaN or +-inf where the contract needs finite values */
} pf_status;

/* The one error channel (core/error.c): a layer that fails calls
 *     return pf_fail(PF_EINVAL, "g_level", "must be in [2, 256], got %d", g_level);
 * which records the status, the argument at fault and a message for the calling thread and
 * returns the status; the Python layer maps the record to one exception (csrc/python/errors.c).
 * Both backends fill it the same way. Only the thread that called into the core records errors
 * (kernels detect them before or after their parallel regions, never inside). */
typedef struct {
    pf_status status;
    char arg[48];      /* the argument at fault, "" when none is; an environment variable's name
                        * (PF_ENV_PREFIX...) where the value at fault was read from the environment */
    char message[2048]; /* without the argument name; room for an OpenCL build log or a loader path */
} pf_error;

/* pf_fail's arg naming an environment variable starts with this (the library's variables all do). */
#define PF_ENV_PREFIX "PYFASTPIM_"

pf_status pf_fail(pf_status status, const char *arg, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The calling thread's last record; status PF_OK when pf_clear_error ran after it. */
const pf_error *pf_last_error(void);
void pf_clear_error(void);

/* Overflow-checked size arithmetic: every size that reaches an allocation goes
 * through these, so a hostile shape yields PF_EOVERFLOW instead of a short
 * buffer. */
static inline int pf_mul_size(size_t a, size_t b, size_t *out)
{
    return __builtin_mul_overflow(a, b, out) ? PF_EOVERFLOW : PF_OK;
}
static inline int pf_add_size(size_t a, size_t b, size_t *out)
{
    return __builtin_add_overflow(a, b, out) ? PF_EOVERFLOW : PF_OK;
}
/* Product of n sizes, PF_EOVERFLOW on overflow. */
static inline int pf_mul_sizes(const size_t *v, int n, size_t *out)
{
    size_t acc = 1;
    for (int i = 0; i < n; i++)
        if (__builtin_mul_overflow(acc, v[i], &acc))
            return PF_EOVERFLOW;
    *out = acc;
    return PF_OK;
}

/* ceil(a / b) for a >= 0, b >= 1, without the a + b - 1 that overflows for sizes near 2**63 */
static inline int64_t pf_ceil_div(int64_t a, int64_t b) { return a / b + (a % b != 0); }
static inline int64_t pf_min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t pf_max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* Noise sigma limits (validated by every binding, documented in DPETensor and README):
 * read noise multiplies by exp(sigma * z) with |z| <= 5.9 (normals from 24-bit uniforms),
 * so sigma <= 5 keeps that factor below 7e12 and the crossbar sums finite in float32
 * (exp overflows float32 from sigma ~15); the relative write and DAC voltage noises are
 * linear and bounded at 1e6 for the same reason. */
#define PF_READ_SIGMA_MAX 5.0
#define PF_REL_SIGMA_MAX 1e6
#define PF_NORMAL_ABS_MAX 5.9 /* |z| of the engine's normals: sqrt(-2 log(2**-25)) = 5.89 */

/* Conductance range (validated with g_level by pf_validate_conductance_range, contract.c):
 * cells live in float32, so HGS * (1 + PF_REL_SIGMA_MAX * PF_NORMAL_ABS_MAX), the largest
 * conductance write variation can program, must stay finite (6e36 S at HGS = 1e30), the level
 * spacing Q_G = (HGS - LGS) / (g_level - 1) must be a normal float32, and at least
 * HGS / PF_LEVEL_SPAN_MAX (two float32 ulps of HGS) so that the g_level levels are distinct
 * float32 numbers and the kernels' level units (HGS / Q_G at most 2**22) stay precise. */
#define PF_CONDUCTANCE_MAX 1e30
/* Largest read voltage vread: the spec's DAC voltage with the largest voltage noise,
 * vread * (1 + PF_REL_SIGMA_MAX * PF_NORMAL_ABS_MAX), stays a finite float32 (pf_validate_vread,
 * contract.c, also bounds the ADC reference current). The kernels work in units of
 * vread / (rdac - 1), where vread cancels; the bound keeps the spec's own quantities finite. */
#define PF_VREAD_MAX 5.7e31
#define PF_LEVEL_SPAN_MAX 4194304.0 /* 2**22 */

#define PF_ALIGN 64
#define PF_RESTRICT __restrict__
#define PF_UNUSED(x) (void)(x)
/* Hot helpers of the CPU loop nests, inlined whatever the optimisation level. */
#define PF_INLINE static inline __attribute__((always_inline))

#endif
