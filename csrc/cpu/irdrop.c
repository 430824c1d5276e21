/* IR drop: effective conductance of a crossbar block with wire resistance
 * (see physics.h and docs/physics.md).
 *
 * Network of an n x m block (all quantities in SI units; r_wire in ohms):
 * every cell (i, j) has a row node r(i,j) and a column node c(i,j) joined by
 * the cell conductance g(i,j). Row i: ideal driver V_i -- R -- r(i,0) -- R --
 * r(i,1) ... r(i,m-1) (open end). Column j: c(0,j) -- R -- c(1,j) ... c(n-1,j)
 * -- R -- virtual ground (the ADC input, 0 V); I_j = v(c(n-1,j)) / R.
 * The nodal equations, divided by G_w = 1/R (so the matrix holds 1s, 2s and
 * h = g R), form a symmetric matrix that is positive definite when every
 * g >= 0: each node reaches a fixed-potential node through wires.
 *
 * Solver (schur_block below): the row nodes of each row are eliminated
 * through their tridiagonal wire (O(m^2) per row), leaving the n m column
 * nodes in a symmetric positive definite system of half bandwidth m, factored
 * once by banded Cholesky and solved for the m unit currents injected at the
 * ADC ends; the row-node voltages at the drivers follow by one dot product per
 * row, and by reciprocity (the network is symmetric)
 *   geff(i,j) = G_w * x_i[c(n-1,j)]   (x_i: unit voltage on row i)
 *             = G_w * y_j[r(i,0)]     (y_j = A^-1 e_c(n-1,j)).
 * Blocks wider than tall run on the dual network (the shorter wires are
 * eliminated). Cost per 32 x 32 block ~2 n m^3 = 2M multiply-adds, about
 * 1.5 ms of one core here. A cell below 0 S (possible only with huge write
 * variation) conducts nothing in the network (docs/physics.md): every cell is
 * >= 0 and the system positive definite. Should the Schur path still break
 * down in rounding, the full 2nm-unknown system is solved instead (full_block:
 * same band ordering as below, banded Cholesky, else LAPACK's banded LU dgbsv
 * with partial pivoting).
 *
 * Full-system node ordering: cells in row-major order when m <= n (column-
 * major otherwise), the two nodes of a cell adjacent: r = 2q, c = 2q + 1, so
 * links span at most 2 min(n, m) indices (the half bandwidth kd). */
#include "core/physics.h"

#include <float.h>
#include <limits.h>
#include <math.h>
#include <string.h>

#include "core/memory.h"
#include "cpu/threads.h"

/* LAPACK (Fortran interface of OpenBLAS; 32-bit integers): banded LU with
 * partial pivoting, full_block's last resort only. */
void dgbsv_(const int *n, const int *kl, const int *ku, const int *nrhs, double *ab, const int *ldab, int *ipiv,
            double *b, const int *ldb, int *info);

/* Why the positive definite case uses the small banded Cholesky below rather
 * than LAPACK's dpbtrf/dpbtrs: blocks are solved in parallel by OpenMP
 * threads, and OpenBLAS (pthreads build) then hands its level-2/3 calls to its
 * own thread pool from every OpenMP thread; measured on this 2-core machine,
 * a 256 x 64 layer of 32 x 32 blocks took 4.5-5.8 s with OPENBLAS_NUM_THREADS=2
 * against 0.95 s with 1 (dpbtrf and the unblocked dpbtf2 alike). Forcing
 * OpenBLAS to one thread would change global state under other callers.
 * With kd <= 2 * 64 the band rows fit in L1/L2 and the row-oriented dot
 * products below vectorize (a fixed omp simd split, so the same on every
 * thread); the solves also exploit that every right-hand
 * side is a unit vector near the end of the ordering (forward substitution
 * starts there), which dpbtrs cannot. The result does not depend on threads. */

typedef struct {
    int64_t n, m, si, sj, base; /* cell index q(i, j) = base + i * si + j * sj */
    int kd;
} grid;

static inline int64_t node_r(const grid *gr, int64_t i, int64_t j) { return 2 * (gr->base + i * gr->si + j * gr->sj); }
static inline int64_t node_c(const grid *gr, int64_t i, int64_t j) { return node_r(gr, i, j) + 1; }

/* Visits every nonzero A(a, b) with a <= b (diagonal and upper triangle). */
#define FOR_EACH_ENTRY(gr, h, ldh, EMIT)                                                                      \
    for (int64_t i = 0; i < (gr)->n; i++)                                                                    \
        for (int64_t j = 0; j < (gr)->m; j++) {                                                              \
            const double hij = (h)[i * (ldh) + j];                                                           \
            const int64_t r = node_r(gr, i, j), c = node_c(gr, i, j);                                        \
            EMIT(r, r, hij + 1.0 + (j + 1 < (gr)->m ? 1.0 : 0.0));                                           \
            EMIT(c, c, hij + (i > 0 ? 1.0 : 0.0) + 1.0);                                                     \
            EMIT(r < c ? r : c, r < c ? c : r, -hij);                                                        \
            if (j + 1 < (gr)->m) {                                                                           \
                int64_t r2 = node_r(gr, i, j + 1);                                                           \
                EMIT(r < r2 ? r : r2, r < r2 ? r2 : r, -1.0);                                                \
            }                                                                                                \
            if (i + 1 < (gr)->n) {                                                                           \
                int64_t c2 = node_c(gr, i + 1, j);                                                           \
                EMIT(c < c2 ? c : c2, c < c2 ? c2 : c, -1.0);                                                \
            }                                                                                                \
        }

/* In-place banded Cholesky A = L L^T. Row a of the band holds A(a, a-kd..a)
 * at lb[a * w + kd - (a - b)], w = kd + 1 (entries before column 0 zero).
 * Returns 0, or -1 when A is not positive definite. */
static int band_cholesky(double *lb, int64_t N, int64_t kd)
{
    const int64_t w = kd + 1;
    for (int64_t a = 0; a < N; a++) {
        double *ra = lb + a * w + kd; /* ra[-d] = L(a, a - d) */
        const int64_t b0 = a - kd > 0 ? a - kd : 0;
        for (int64_t b = b0; b <= a; b++) {
            const double *rb = lb + b * w + kd;
            const int64_t k0 = b0 > b - kd ? b0 : b - kd; /* common columns k0 .. b-1 */
            double dot = 0.0;
#pragma omp simd reduction(+ : dot)
            for (int64_t k = k0; k < b; k++)
                dot += ra[k - a] * rb[k - b];
            const double s = ra[b - a] - dot;
            if (b < a) {
                ra[b - a] = s / rb[0];
            } else {
                if (!(s > 0.0))
                    return -1;
                ra[0] = sqrt(s);
            }
        }
    }
    return 0;
}

/* x = A^-1 e_s with A = L L^T (lb from band_cholesky); y is scratch of N. */
static void band_unit_solve(const double *lb, int64_t N, int64_t kd, int64_t s, double *x)
{
    const int64_t w = kd + 1;
    memset(x, 0, (size_t)s * sizeof(double));
    /* forward: L y = e_s, y zero before s */
    for (int64_t a = s; a < N; a++) {
        const double *ra = lb + a * w + kd;
        const int64_t k0 = a - kd > s ? a - kd : s;
        double dot = 0.0;
#pragma omp simd reduction(+ : dot)
        for (int64_t k = k0; k < a; k++)
            dot += ra[k - a] * x[k];
        x[a] = ((a == s ? 1.0 : 0.0) - dot) / ra[0];
    }
    /* backward: L^T x = y, column-oriented over the rows of L */
    for (int64_t a = N - 1; a >= 0; a--) {
        const double *ra = lb + a * w + kd;
        const double xa = x[a] / ra[0];
        x[a] = xa;
        const int64_t k0 = a - kd > 0 ? a - kd : 0;
        for (int64_t k = k0; k < a; k++)
            x[k] -= ra[k - a] * xa;
    }
}

/* The full 2nm-unknown system: banded Cholesky, or LAPACK's banded LU when
 * it is not positive definite in rounding. Used when the Schur path below
 * fails. Cells below 0 S count as 0 S, as there. */
static pf_status full_block(const double *g, int64_t n, int64_t m, int64_t ldg, double r_wire, double *geff,
                            int64_t ldo)
{
    const int N = (int)(2 * n * m);
    /* Cells in row-major order when m <= n, else column-major, both reversed
     * where needed so that the right-hand sides (unit currents injected at the
     * shorter side's terminals) sit near the end of the ordering. */
    grid gr = {.n = n, .m = m};
    const int by_rows = n < m; /* right-hand sides: rows (n of them) or columns (m) */
    if (!by_rows) {
        gr.si = m; /* c(n-1, j): the last m cells */
        gr.sj = 1;
        gr.base = 0;
    } else {
        gr.si = -1; /* r(i, 0): the last n cells */
        gr.sj = -n;
        gr.base = (m - 1) * n + (n - 1);
    }
    const int64_t kd64 = 2 * (by_rows ? n : m);
    gr.kd = (int)(kd64 < N - 1 ? kd64 : N - 1);
    const int kd = gr.kd;
    const int nrhs = (int)(by_rows ? n : m);

    size_t band_len, rhs_len, h_len;
    const int w_chol = kd + 1, ldab_lu = 3 * kd + 1;
    if (pf_mul_size((size_t)ldab_lu, (size_t)N, &band_len) != PF_OK ||
        pf_mul_size((size_t)N, (size_t)nrhs, &rhs_len) != PF_OK ||
        pf_mul_size((size_t)n, (size_t)m, &h_len) != PF_OK)
        return PF_EOVERFLOW;
    double *h = pf_alloc(h_len * sizeof(double));
    double *ab = pf_calloc(band_len, sizeof(double));
    double *rhs = pf_calloc(rhs_len, sizeof(double));
    int *ipiv = NULL;
    pf_status st = PF_OK;
    if (!h || !ab || !rhs) {
        st = PF_ENOMEM;
        goto done;
    }
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < m; j++) {
            double v = g[i * ldg + j];
            if (!isfinite(v)) {
                st = PF_EINVAL;
                goto done;
            }
            h[i * m + j] = (v > 0.0 ? v : 0.0) * r_wire; /* a cell below 0 S conducts nothing */
        }

    /* lower band by rows: L(a, b) at ab[a * (kd + 1) + kd - (a - b)], A(a, b) = A(b, a) */
#define EMIT_CHOL(a, b, v) ab[(size_t)(b) * (size_t)w_chol + (size_t)(kd - ((b) - (a)))] += (v)
    FOR_EACH_ENTRY(&gr, h, m, EMIT_CHOL)
#undef EMIT_CHOL
    if (band_cholesky(ab, N, kd) == 0) {
        for (int k = 0; k < nrhs; k++) {
            int64_t node = by_rows ? node_r(&gr, k, 0) : node_c(&gr, n - 1, k);
            band_unit_solve(ab, N, kd, node, rhs + (size_t)k * (size_t)N);
        }
    } else {
        /* not positive definite (rounding): LAPACK's banded
         * LU with partial pivoting, AB(2kd + a - b, b) = A(a, b) */
        ipiv = pf_alloc((size_t)N * sizeof(int));
        if (!ipiv) {
            st = PF_ENOMEM;
            goto done;
        }
        memset(ab, 0, band_len * sizeof(double));
#define EMIT_LU(a, b, v)                                                                                    \
    do {                                                                                                     \
        ab[(size_t)(2 * kd + (a) - (b)) + (size_t)(b) * (size_t)ldab_lu] += (v);                             \
        if ((a) != (b))                                                                                      \
            ab[(size_t)(2 * kd + (b) - (a)) + (size_t)(a) * (size_t)ldab_lu] += (v);                         \
    } while (0)
        FOR_EACH_ENTRY(&gr, h, m, EMIT_LU)
#undef EMIT_LU
        for (int k = 0; k < nrhs; k++) {
            int64_t node = by_rows ? node_r(&gr, k, 0) : node_c(&gr, n - 1, k);
            rhs[(size_t)k * (size_t)N + (size_t)node] = 1.0;
        }
        int info = 0;
        dgbsv_(&N, &kd, &kd, &nrhs, ab, &ldab_lu, ipiv, rhs, &N, &info);
        if (info != 0) {
            st = pf_fail(PF_EINVAL, "g", "the IR-drop network is singular");
            goto done;
        }
    }
    const double gw = 1.0 / r_wire;
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < m; j++) {
            double x = by_rows ? rhs[(size_t)i * (size_t)N + (size_t)node_c(&gr, n - 1, j)]
                               : rhs[(size_t)j * (size_t)N + (size_t)node_r(&gr, i, 0)];
            geff[i * ldo + j] = gw * x;
        }
done:
    pf_free(h);
    pf_free(ab);
    pf_free(rhs);
    pf_free(ipiv);
    return st;
}

/* Schur path for m <= n (the fast one). Scaled cell conductances h (n x m,
 * h = g R). Eliminating the row nodes of row i, whose wire is the
 * tridiagonal T_i = tridiag(-1, h_ij + 1 + [j < m-1], -1) (driver segment at
 * j = 0 included), leaves the column nodes c (nm unknowns, row-major) with
 *   S = blockdiag(diag(h_i) + (1 + [i > 0]) I - H_i T_i^-1 H_i) - (I on the
 *       first block off-diagonals),
 * symmetric positive definite with half bandwidth m. For a unit current
 * injected at c(n-1, j) (the ADC end of column j), S y = e; the row nodes
 * follow as r_i = T_i^-1 H_i y_i, so r(i, 0) = u_i . (h_i * y_i) with
 * u_i = T_i^-1 e_0, and by reciprocity geff(i, j) = r(i, 0) / R.
 * Cost: n m^2 to form S, n m^3 / 2 to factor it, n m^2 per right-hand side
 * (m of them): ~2 n m^3 multiply-adds against ~2 n m^3 * 4 for the full
 * 2nm system of band 2m. Returns 0, 1 when S or some T_i is not positive
 * definite, -1 on allocation failure. */
static int schur_block(const double *h, int64_t n, int64_t m, double r_wire, double *geff, int64_t ldo)
{
    const int64_t N = n * m, kd = m, w = kd + 1;
    double *lb = pf_calloc((size_t)N * (size_t)w, sizeof(double));
    double *u = pf_alloc((size_t)N * sizeof(double));
    double *x = pf_alloc((size_t)m * (size_t)m * sizeof(double));
    double *ld = pf_alloc((size_t)m * 2 * sizeof(double));
    double *y = pf_alloc((size_t)N * sizeof(double));
    int rc = 0;
    if (!lb || !u || !x || !ld || !y) {
        rc = -1;
        goto out;
    }
    double *diag = ld, *sub = ld + m; /* T_i = L L^T, L bidiagonal: diag[j], sub[j] = L(j, j-1) */
    for (int64_t i = 0; i < n; i++) {
        const double *hi = h + i * m;
        for (int64_t j = 0; j < m; j++) {
            double d = hi[j] + 1.0 + (j + 1 < m ? 1.0 : 0.0);
            if (j > 0) {
                sub[j] = -1.0 / diag[j - 1];
                d -= sub[j] * sub[j];
            }
            if (!(d > 0.0)) {
                rc = 1;
                goto out;
            }
            diag[j] = sqrt(d);
        }
        /* x = T_i^-1 column by column (only b <= a is needed: symmetric) */
        for (int64_t b = 0; b < m; b++) {
            double *col = x + b * m;
            for (int64_t a = 0; a < b; a++)
                col[a] = 0.0;
            col[b] = 1.0 / diag[b];
            for (int64_t a = b + 1; a < m; a++)
                col[a] = -sub[a] * col[a - 1] / diag[a];
            col[m - 1] /= diag[m - 1];
            for (int64_t a = m - 2; a >= 0; a--)
                col[a] = (col[a] - sub[a + 1] * col[a + 1]) / diag[a];
        }
        for (int64_t a = 0; a < m; a++)
            u[i * m + a] = x[a]; /* column 0: T_i^-1 e_0 */
        /* block i of S into the lower band rows */
        for (int64_t a = 0; a < m; a++) {
            double *row = lb + (i * m + a) * w + kd; /* row[-d] = S(A, A - d) */
            for (int64_t b = 0; b <= a; b++)
                row[b - a] = -hi[a] * x[b * m + a] * hi[b];
            row[0] += hi[a] + (i > 0 ? 1.0 : 0.0) + 1.0;
            if (i > 0)
                row[-kd] = -1.0;
        }
    }
    if (band_cholesky(lb, N, kd) != 0) {
        rc = 1;
        goto out;
    }
    const double gw = 1.0 / r_wire;
    for (int64_t j = 0; j < m; j++) {
        band_unit_solve(lb, N, kd, (n - 1) * m + j, y);
        for (int64_t i = 0; i < n; i++) {
            const double *hi = h + i * m, *ui = u + i * m, *yi = y + i * m;
            double r0 = 0.0;
            for (int64_t a = 0; a < m; a++)
                r0 += ui[a] * hi[a] * yi[a];
            geff[i * ldo + j] = gw * r0;
        }
    }
out:
    pf_free(lb);
    pf_free(u);
    pf_free(x);
    pf_free(ld);
    pf_free(y);
    return rc;
}

/* The one wire-resistance rule (docs/physics.md "Limits"): 1 / r_wire finite, and g_max * r_wire <=
 * PF_IRDROP_MAX_GR for the largest conductance g_max the network conducts (0: r_wire alone). PF_EINVAL
 * naming "r_wire". */
static pf_status check_wire(double r_wire, double g_max)
{
    if (!(r_wire >= DBL_MIN) || !isfinite(r_wire))
        return pf_fail(PF_EINVAL, "r_wire", "must be >= %g and finite (its inverse finite), got %g", DBL_MIN, r_wire);
    if (g_max * r_wire > PF_IRDROP_MAX_GR)
        return pf_fail(PF_EINVAL, "r_wire", "%g ohm times the largest conductance G = %g S is %g, above %g (a cell "
                       "conducting a million times a wire segment): the IR-drop network cannot be solved accurately",
                       r_wire, g_max, g_max * r_wire, PF_IRDROP_MAX_GR);
    return PF_OK;
}

/* The inputs of one block: finite g with max(g, 0) r_wire <= PF_IRDROP_MAX_GR. The bound is on the
 * conductance the network uses: a cell below 0 S is open (0 S), however negative. */
static pf_status check_block(const double *g, int64_t n, int64_t m, int64_t ldg, double r_wire)
{
    double gmax = 0.0;
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < m; j++) {
            const double v = g[i * ldg + j];
            if (!isfinite(v))
                return pf_fail(PF_ENONFINITE, "g", "conductances must be finite and the network solvable");
            gmax = v > gmax ? v : gmax;
        }
    return check_wire(r_wire, gmax);
}

/* The solve's result: finite and >= 0 (the network's cells are >= 0, so node voltages lie between 0
 * and the drive). The Schur path keeps those signs exactly; a violation means the solve broke down. */
static pf_status check_result(const double *geff, int64_t n, int64_t m, int64_t ldo, double r_wire)
{
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < m; j++) {
            const double v = geff[i * ldo + j];
            if (!isfinite(v) || v < 0.0)
                return pf_fail(PF_EINVAL, "r_wire", "the IR-drop solve with wire resistance %g ohm gave a %s "
                               "effective conductance (%g at cell (%lld, %lld)): the network is too ill-conditioned",
                               r_wire, isfinite(v) ? "negative" : "non-finite", v, (long long)i, (long long)j);
        }
    return PF_OK;
}

pf_status pf_irdrop_block(const double *g, int64_t n, int64_t m, int64_t ldg, double r_wire, double *geff,
                          int64_t ldo)
{
    if (check_wire(r_wire, 0.0) != PF_OK)
        return PF_EINVAL;
    if (!g || !geff || n < 1 || m < 1 || ldg < m || ldo < m)
        return pf_fail(PF_EINVAL, "g", "expected a non-empty block, got %lld x %lld", (long long)n, (long long)m);
    if (n > INT_MAX / 4 / m)
        return pf_fail(PF_EOVERFLOW, "g", "a %lld x %lld block is too large to solve", (long long)n, (long long)m);
    pf_status st = check_block(g, n, m, ldg, r_wire);
    if (st != PF_OK)
        return st;
    /* The Schur path eliminates the shorter wires (band = their length). For
     * n < m it runs on the dual network: rows' = the columns read from their
     * ADC end, columns' = the rows read from their driver end, i.e.
     * g'(a, b) = g(n-1-b, m-1-a); by reciprocity the transfer conductance
     * between driver i and ADC j is the same in both, geff(i, j) = geff'(m-1-j, n-1-i). */
    const int dual = n < m;
    const int64_t nn = dual ? m : n, mm = dual ? n : m;
    double *h = pf_alloc((size_t)n * (size_t)m * sizeof(double));
    double *e = pf_alloc((size_t)n * (size_t)m * sizeof(double));
    if (!h || !e) {
        pf_free(h);
        pf_free(e);
        return pf_fail(PF_ENOMEM, "g", "out of memory for a %lld x %lld block", (long long)n, (long long)m);
    }
    for (int64_t a = 0; a < nn; a++)
        for (int64_t b = 0; b < mm; b++) { /* a cell below 0 S (huge write variation) conducts nothing */
            const double v = dual ? g[(n - 1 - b) * ldg + (m - 1 - a)] : g[a * ldg + b];
            h[a * mm + b] = r_wire * (v > 0.0 ? v : 0.0);
        }
    int rc = schur_block(h, nn, mm, r_wire, e, mm);
    if (rc == 0) {
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < m; j++)
                geff[i * ldo + j] = dual ? e[(m - 1 - j) * mm + (n - 1 - i)] : e[i * mm + j];
    } else if (rc < 0) {
        st = pf_fail(PF_ENOMEM, "g", "out of memory for a %lld x %lld block", (long long)n, (long long)m);
    } else {
        st = full_block(g, n, m, ldg, r_wire, geff, ldo);
    }
    pf_free(h);
    pf_free(e);
    return st == PF_OK ? check_result(geff, n, m, ldo, r_wire) : st;
}

pf_status pf_irdrop_layer(const float *g, int64_t n_slices, int64_t rows, int64_t cols, int64_t block_rows,
                          int64_t block_cols, double r_wire, double pad_g, float *geff, pf_cancel *cancel)
{
    if (check_wire(r_wire, 0.0) != PF_OK)
        return PF_EINVAL;
    if (!isfinite(pad_g) || pad_g < 0.0)
        return pf_fail(isfinite(pad_g) ? PF_EINVAL : PF_ENONFINITE, "pad_g", "must be finite and >= 0, got %g", pad_g);
    if (block_rows < 1 || block_cols < 1 || block_rows > PF_IRDROP_MAX_BLOCK || block_cols > PF_IRDROP_MAX_BLOCK)
        return pf_fail(PF_EINVAL, block_rows < 1 || block_rows > PF_IRDROP_MAX_BLOCK ? "block_rows" : "block_cols",
                       "block sizes must be 1 to %d, got %lld x %lld", PF_IRDROP_MAX_BLOCK, (long long)block_rows,
                       (long long)block_cols);
    if (n_slices < 0 || rows < 0 || cols < 0)
        return pf_fail(PF_EINVAL, "g", "negative sizes");
    size_t dims[3] = {(size_t)n_slices, (size_t)rows, (size_t)cols}, total, blk;
    if (pf_mul_sizes(dims, 3, &total) != PF_OK || total > (size_t)INT64_MAX ||
        pf_mul_size((size_t)block_rows, (size_t)block_cols, &blk) != PF_OK || blk > (size_t)INT_MAX / 4)
        return pf_fail(PF_EOVERFLOW, "g", "array or block sizes overflow");
    if (total == 0)
        return PF_OK;
    if (!g || !geff)
        return pf_fail(PF_EINVAL, "g", "missing buffers");
    const int64_t nbr = pf_ceil_div(rows, block_rows), nbc = pf_ceil_div(cols, block_cols);
    const int64_t tasks = n_slices * nbr * nbc;
    pf_status st = PF_OK;
    pf_error first = {0}; /* the record of the first failing block (made on a worker thread) */
    int64_t first_t = tasks; /* that block's task: the smallest failing one (each thread stops at its first
                              * failure and takes tasks in increasing order), whatever the thread count */
#pragma omp parallel num_threads(pf_get_num_threads())
    {
        double *gb = pf_alloc(blk * sizeof(double));
        double *eb = pf_alloc(blk * sizeof(double));
        pf_status local = (gb && eb) ? PF_OK : PF_ENOMEM;
        int64_t failed_t = -1;
#pragma omp for schedule(dynamic, 1)
        for (int64_t t = 0; t < tasks; t++) {
            if (local != PF_OK || pf_cancelled(cancel))
                continue; /* a failed block or Ctrl-C: skip the rest */
            const int64_t s = t / (nbr * nbc), bi = (t / nbc) % nbr, bj = t % nbc;
            const int64_t r0 = bi * block_rows, c0 = bj * block_cols;
            const int64_t rv = pf_min64(block_rows, rows - r0), cv = pf_min64(block_cols, cols - c0);
            const float *src = g + ((size_t)s * (size_t)rows + (size_t)r0) * (size_t)cols + (size_t)c0;
            for (int64_t i = 0; i < block_rows; i++)
                for (int64_t j = 0; j < block_cols; j++)
                    gb[i * block_cols + j] = (i < rv && j < cv) ? (double)src[i * cols + j] : pad_g;
            pf_clear_error();
            local = pf_irdrop_block(gb, block_rows, block_cols, block_cols, r_wire, eb, block_cols);
            if (local != PF_OK) {
                failed_t = t;
                continue;
            }
            float *dst = geff + ((size_t)s * (size_t)rows + (size_t)r0) * (size_t)cols + (size_t)c0;
            for (int64_t i = 0; i < rv; i++)
                for (int64_t j = 0; j < cv; j++)
                    dst[i * cols + j] = (float)eb[i * block_cols + j];
        }
        pf_free(gb);
        pf_free(eb);
        if (local != PF_OK) {
#pragma omp critical(pf_irdrop_status)
            if (st == PF_OK || (failed_t >= 0 && failed_t < first_t)) {
                st = local;
                first = *pf_last_error();
                first_t = failed_t >= 0 ? failed_t : first_t;
            }
        }
    }
    /* the blocks ran on worker threads: record the failure (the block's own, when it made one) on the
     * calling thread */
    if (st != PF_OK && first.status == st && first.arg[0] && first_t < tasks)
        return pf_fail(st, first.arg, "slice %lld, block (%lld, %lld) of the programmed cells: %s",
                       (long long)(first_t / (nbr * nbc)), (long long)(first_t / nbc % nbr), (long long)(first_t % nbc),
                       first.message);
    if (st != PF_OK && first.status == st && first.arg[0])
        return pf_fail(st, first.arg, "%s", first.message);
    if (st == PF_ENOMEM)
        return pf_fail(st, "g", "out of memory for a %lld x %lld block", (long long)block_rows, (long long)block_cols);
    if (st != PF_OK)
        return pf_fail(st, "g", "conductances must be finite and the network solvable");
    return pf_cancelled(cancel) ? PF_EINTR : PF_OK;
}
