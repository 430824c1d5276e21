/* The 256-bit operand and float epilogue macros of the integer micro-kernel
 * (dpe_int_tile.h), shared by the AVX2 and AVX-VNNI instances; the includer
 * defines PF_ITILE_FN and its dot product (I_DOT, I_FINISH, optionally
 * I_DOT16, I_FINISH16). */
static inline __m256i pf_int256_bcast4(const uint8_t *p)
{
    int32_t v;
    memcpy(&v, p, 4); /* the 4 codes of one row and k quad, in every 32-bit lane */
    return _mm256_set1_epi32(v);
}

#define IVC 8
#define IACC __m256i
#define IAV __m256i
#define IBV __m256i
#define I_ZERO() _mm256_setzero_si256()
#define I_BCASTA(p) pf_int256_bcast4(p)
#define I_LOADB(p) _mm256_loadu_si256((const __m256i *)(const void *)(p))
#define VF __m256
#define VI __m256i
#define VI_LOAD1(p) _mm256_set1_epi32(*(p))
#define VI_ADD(a, b) _mm256_add_epi32((a), (b))
#define VI_CVT(v) _mm256_cvtepi32_ps(v)
#define VF_SET1(x) _mm256_set1_ps(x)
#define VF_LOAD(p) _mm256_load_ps(p)
#define VF_LOADU(p) _mm256_loadu_ps(p)
#define VF_STORE(p, v) _mm256_store_ps((p), (v))
#define VF_MUL(a, b) _mm256_mul_ps((a), (b))
#define VF_ADD(a, b) _mm256_add_ps((a), (b))
#define VF_RINT(v) _mm256_round_ps((v), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define VF_TABLE(tab, v, hi)                                                                                       \
    _mm256_i32gather_ps((tab), _mm256_min_epi32(_mm256_max_epi32((v), _mm256_setzero_si256()), _mm256_set1_epi32(hi)), 4)

