/* The per-call constants of the DPE (pf_dpe_consts_init, core/dpe.h): computed
 * once here for every backend, so the CPU kernels and the OpenCL kernels scale,
 * convert and round with the same numbers. */
#include "core/dpe.h"
#include "core/memory.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

/* round-half-even(num / den) for num >= 0, den > 0, exactly in integers */
static int64_t rint_ratio(int64_t num, int64_t den)
{
    int64_t q = num / den, r = num % den;
    if (2 * r > den || (2 * r == den && (q & 1)))
        q++;
    return q;
}

/* Whether nearbyintf(acc * alpha) equals round-half-even(acc * (radc-1) / D)
 * for every acc in [0, D]: checked exhaustively once per (D, radc) and
 * remembered for the process (the check costs O(D), a call should not). */
static int rint_is_exact(int64_t D, int64_t radc, float alpha)
{
    enum { CACHE = 64 };
    static struct { int64_t D, radc; int exact; } cache[CACHE];
    static int cached, next;
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    int found = -1;
    pthread_mutex_lock(&lock);
    for (int e = 0; e < cached; e++)
        if (cache[e].D == D && cache[e].radc == radc)
            found = cache[e].exact;
    pthread_mutex_unlock(&lock);
    if (found >= 0)
        return found;
    int exact = 1;
    for (int64_t acc = 0; acc <= D && exact; acc++)
        if ((int64_t)nearbyintf((float)acc * alpha) != rint_ratio(acc * (radc - 1), D))
            exact = 0;
    pthread_mutex_lock(&lock);
    cache[next] = (typeof(cache[0])){D, radc, exact};
    next = (next + 1) % CACHE;
    if (cached < CACHE)
        cached++;
    pthread_mutex_unlock(&lock);
    return exact;
}

static float dac_code(int slice_value, int m, int rdac)
{
    /* spec: rint(slice / m * (rdac - 1)) in float32, in this order */
    return nearbyintf((float)slice_value / (float)m * (float)(rdac - 1));
}

void pf_dpe_consts_free(pf_dpe_consts *s)
{
    for (int j = 0; j < PF_MAX_SLICES; j++) {
        pf_free(s->adc_table[j]);
        s->adc_table[j] = NULL;
    }
}

pf_status pf_dpe_consts_init(const pf_dpe_args *a, pf_dpe_consts *s)
{
    memset(s, 0, sizeof *s);
    pf_dpe_blocks(a, &s->nb, &s->nk);
    s->noise_x = a->vnoise > 0.0;
    s->noise_w = a->w_conductance != NULL || pf_dpe_read_noise_on(a);
    int64_t D = (int64_t)(a->rdac - 1) * (a->g_level - 1) * a->n;
    for (int i = 0; i < a->sx; i++)
        for (int j = 0; j < a->sw; j++) {
            /* integers exact in double; one rounding to double, one to float */
            double num = (double)(a->n * (int64_t)a->x_max[i] * a->w_max[j] * a->x_weight[i] * a->w_weight[j]);
            s->coef[i * a->sw + j] = (float)(num / (double)(a->radc[j] - 1));
        }
    for (int i = 0; i < a->sx; i++)
        for (int v = 0; v <= a->x_max[i]; v++)
            s->dac[i][v] = dac_code(v, a->x_max[i], a->rdac);
    for (int j = 0; j < a->sw; j++) {
        s->alpha[j] = (float)((double)(a->radc[j] - 1) / (double)D);
        if (s->noise_x || s->noise_w)
            continue;
        /* Noise-free: accept the fast rint(acc * alpha) only if it equals the
         * exact code for every reachable acc in [0, D]; else use a table. */
        if (rint_is_exact(D, a->radc[j], s->alpha[j]))
            continue;
        float *tab = pf_alloc((size_t)(D + 1) * sizeof(float));
        if (!tab) {
            pf_dpe_consts_free(s);
            return PF_ENOMEM;
        }
        for (int64_t acc = 0; acc <= D; acc++)
            tab[acc] = (float)rint_ratio(acc * (a->radc[j] - 1), D);
        s->adc_table[j] = tab;
        s->adc_table_max[j] = (int32_t)D;
    }
    return PF_OK;
}
