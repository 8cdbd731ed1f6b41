/* Matrix products: matmul (batched, optionally transposed operands, scaled
 * by alpha) and its gradient op matmul_grad, both through vq__gemm_ldc:
 * f32 on varq's own kernel where the CPU has AVX2 + FMA (ops/math/sgemm.c,
 * every transpose form; VARQ_GEMM=openblas turns it off), f64 and the
 * rest on OpenBLAS's gemm, f32 products too small for either's per-call
 * cost on plain loops (sgemm_small).
 *
 * X holds matrices [..., M, K] ([..., K, M] with transpose_x), Y [..., K, N]
 * ([..., N, K] with transpose_y); Out is [..., M, N]. The leading (batch)
 * dims of X and Y are equal, or Y is one matrix shared by every batch of X.
 * Every call runs gemm in the calling worker with one BLAS thread: the engine
 * already runs independent ops in parallel, and OpenBLAS's own threads would
 * fight its workers for the cores. */
#include "../ops_internal.h"
#include "../params.h"
#include "../cuda/cuda_ops.h"
#include "../shape_shared.h" /* vq__matmul_dims_of */
#include "../math/sgemm.h"

#include <cblas.h>
#include <limits.h>
#include <pthread.h>
#include <string.h>

static const char *const mm_in[] = {"X", "Y"};
static const char *const mm_out[] = {"Out"};
static const char *const grad_in[] = {"X", "Y", "dOut"};
static const char *const grad_out[] = {"dZ"};

/* ---- shapes ---- */

/* Checks X (slot 0) and Y (slot 1) as matmul operands and writes Out's
 * shape and dtype into *out; unknown (-1) dims stay unknown. */
static int product_meta(const vq__infer *c, bool tx, bool ty, vq__meta *out)
{
    int rc;
    if ((rc = vq__check_dtype(c, 0, VQ__FLOATS)) < 0 || (rc = vq__check_same_dtype(c, 0, 1)) < 0)
        return rc;
    const vq__meta *x = &c->in[0], *y = &c->in[1];
    for (int s = 0; s < 2; s++)
        if (c->in[s].ndim < 2)
            return vq__in_fail(c, s, "has %d dims; matmul needs at least 2", c->in[s].ndim);
    /* the shapes, for a message: formatted only on a failure (infer runs
     * every time an op of a plan with unknown dims executes) */
    char sx[100], sy[100];
#define SHAPES() (vq__shape_str(sx, sizeof sx, x->ndim, x->shape), \
                  vq__shape_str(sy, sizeof sy, y->ndim, y->shape))
    int nb = x->ndim - 2;
    if (y->ndim != 2 && y->ndim != x->ndim && (SHAPES(), true))
        return vq__in_fail(c, 1, "has %d dims; expected X's %d (one matrix per batch) or 2 "
                                 "(shared): X is %s, Y is %s",
                           y->ndim, x->ndim, sx, sy);
    out->dtype = x->dtype;
    out->ndim = x->ndim;
    for (int i = 0; i < nb; i++) {
        int64_t dx = x->shape[i], dy = y->ndim == 2 ? dx : y->shape[i];
        if (!vq__dim_match(dx, dy) && (SHAPES(), true))
            return vq__in_fail(c, 1, "batch dim %d differs: X is %s, Y is %s", i, sx, sy);
        out->shape[i] = dx >= 0 ? dx : dy;
    }
    const int64_t *xm = x->shape + nb, *ym = y->shape + y->ndim - 2;
    int64_t m = tx ? xm[1] : xm[0], kx = tx ? xm[0] : xm[1];
    int64_t ky = ty ? ym[1] : ym[0], n = ty ? ym[0] : ym[1];
    if (!vq__dim_match(kx, ky) && (SHAPES(), true))
        return vq__in_fail(c, 1, "inner dims differ: X is %s%s, Y is %s%s", sx,
                           tx ? " (transposed)" : "", sy, ty ? " (transposed)" : "");
    /* CBLAS takes int sizes; the batch count is ours and may be larger. */
    for (int s = 0; s < 2; s++)
        for (int i = c->in[s].ndim - 2; i < c->in[s].ndim; i++)
            if (c->in[s].shape[i] > INT_MAX)
                return vq__in_fail(c, s, "matrix dim %lld is past BLAS's limit of %d",
                                   (long long)c->in[s].shape[i], INT_MAX);
    out->shape[nb] = m;
    out->shape[nb + 1] = n;
    return 0;
#undef SHAPES
}

static void read_flags(const vq__infer *c, vq__matmul_params *p)
{
    p->tx = vq__attr_bool(c, "transpose_x", false);
    p->ty = vq__attr_bool(c, "transpose_y", false);
    p->alpha = vq__attr_float(c, "alpha", 1.0);
}

static int matmul_infer(vq__infer *c)
{
    vq__matmul_params *p = c->params;
    read_flags(c, p);
    return product_meta(c, p->tx, p->ty, &c->out[0]);
}

static int grad_infer(vq__infer *c)
{
    vq__matmul_params *p = c->params;
    read_flags(c, p);
    int64_t wrt = vq__attr_int(c, "wrt", 0);
    if (wrt != 0 && wrt != 1)
        return vq__attr_fail(c, "wrt", "is %lld, not 0 (X) or 1 (Y)", (long long)wrt);
    p->wrt = (int)wrt;
    vq__meta full;
    int rc = product_meta(c, p->tx, p->ty, &full);
    if (rc < 0 || (rc = vq__check_same_dtype(c, 0, 2)) < 0)
        return rc;
    const vq__meta *g = &c->in[2];
    bool same = g->ndim == full.ndim;
    for (int i = 0; same && i < g->ndim; i++)
        same = vq__dim_match(g->shape[i], full.shape[i]);
    if (!same) {
        char a[100], b[100];
        return vq__in_fail(c, 2, "shape %s is not the product's shape %s",
                           vq__shape_str(a, sizeof a, g->ndim, g->shape),
                           vq__shape_str(b, sizeof b, full.ndim, full.shape));
    }
    c->out[0] = c->in[p->wrt];
    return 0;
}

/* ---- gemm ---- */

static pthread_once_t blas_once = PTHREAD_ONCE_INIT;

static void blas_single_threaded(void)
{
    openblas_set_num_threads(1);
}

/* Row-major C[m,n] = alpha * op(A) op(B) + beta * C, beta 0 or 1, for any
 * sizes: OpenBLAS rejects leading dims of 0, so empty products never reach
 * it, and k == 0 leaves beta * C (zeros for beta 0). Also the convolutions'
 * product (cpu/conv.c; ops_internal.h); vq__gemm_ldc writes C's rows ldc
 * apart (a block of columns of a wider C). */
void vq__gemm(vq_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha,
              const void *a, int64_t lda, const void *b, int64_t ldb, double beta, void *c)
{
    vq__gemm_ldc(dt, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, n);
}

/* ---- small f32 products ----
 *
 * OpenBLAS's sgemm spends about 2,000 instructions per call (its interface,
 * a buffer from its pool, packing both operands) before its kernel starts:
 * ten times the arithmetic of a 16x16 by 16x1 product, the shape of a
 * small model's linear layer. Up to SMALL_MACS multiply-adds, plain loops
 * do the product in place instead, in the order that keeps the innermost
 * operands contiguous, in blocks of lanes the compiler turns into vector
 * instructions: 8 columns of a row of C as sums of rows of B (B not
 * transposed, n >= 8), 8 rows of a column of C as sums of columns of A (A
 * transposed), else dot products of A's rows with B's columns in 4
 * lanes. Each element's sum runs over k in order (in 4 lanes, added
 * pairwise at the end, for the dot products), so the result differs from
 * OpenBLAS's only by rounding. */
#define SMALL_MACS 4096

static inline void store(float *c, float alpha, float beta, float sum)
{
    *c = beta == 0 ? alpha * sum : alpha * sum + beta * *c;
}

/* w <= 8 elements of C (c[l * cs]), each the sum over p of a scalar
 * (sc[p * ss]) times a contiguous vector's element l (v + p * ld): a row of
 * C from the rows of B, or a column of C from the columns of A. */
static void axpy_block(int w, int64_t k, const float *sc, int64_t ss, const float *v, int64_t ld,
                       float alpha, float beta, float *c, int64_t cs)
{
    float s[8] = {0};
    for (int64_t p = 0; p < k; p++) {
        float av = sc[p * ss];
        const float *vp = v + p * ld;
        if (w == 8)
            for (int l = 0; l < 8; l++)
                s[l] += av * vp[l];
        else
            for (int l = 0; l < w; l++)
                s[l] += av * vp[l];
    }
    for (int l = 0; l < w; l++)
        store(&c[l * cs], alpha, beta, s[l]);
}

/* A's row x dotted with B's column y (y[p * ys]), in 4 lanes when y is
 * contiguous. */
static float dot4(const float *x, const float *y, int64_t ys, int64_t k)
{
    float s[4] = {0};
    int64_t p = 0;
    if (ys == 1)
        for (; p + 4 <= k; p += 4)
            for (int l = 0; l < 4; l++)
                s[l] += x[p + l] * y[p + l];
    float t = (s[0] + s[2]) + (s[1] + s[3]);
    for (; p < k; p++)
        t += x[p] * y[p * ys];
    return t;
}

static void sgemm_small(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                        const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                        float *c, int64_t ldc)
{
    if (!tb && n >= 8) { /* C(i, j0..) from A(i, p) and B's rows */
        for (int64_t i = 0; i < m; i++)
            for (int64_t j0 = 0; j0 < n; j0 += 8)
                axpy_block(n - j0 < 8 ? (int)(n - j0) : 8, k, ta ? a + i : a + i * lda,
                           ta ? lda : 1, b + j0, ldb, alpha, beta, c + i * ldc + j0, 1);
    } else if (ta) { /* C(i0.., j) from B(p, j) and A's columns (a[p * lda + i]) */
        for (int64_t j = 0; j < n; j++)
            for (int64_t i0 = 0; i0 < m; i0 += 8)
                axpy_block(m - i0 < 8 ? (int)(m - i0) : 8, k, tb ? b + j * ldb : b + j,
                           tb ? 1 : ldb, a + i0, lda, alpha, beta, c + i0 * ldc + j, ldc);
    } else { /* C(i, j) = A's row i . B's column j */
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++)
                store(&c[i * ldc + j], alpha, beta,
                      dot4(a + i * lda, tb ? b + j * ldb : b + j, tb ? 1 : ldb, k));
    }
}

void vq__gemm_ldc(vq_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha,
                  const void *a, int64_t lda, const void *b, int64_t ldb, double beta, void *c,
                  int64_t ldc)
{
    if (m == 0 || n == 0)
        return;
    if (dt == VQ_F32 && k > 0 && m <= SMALL_MACS && n <= SMALL_MACS && k <= SMALL_MACS &&
        m * n * k <= SMALL_MACS) {
        sgemm_small(ta, tb, m, n, k, (float)alpha, a, lda, b, ldb, (float)beta, c, ldc);
        return;
    }
    pthread_once(&blas_once, blas_single_threaded);
    if (k == 0) {
        size_t es = vq_dtype_size(dt);
        for (int64_t i = 0; beta == 0 && i < m; i++)
            memset((char *)c + (size_t)(i * ldc) * es, 0, (size_t)n * es);
        return;
    }
    if (dt == VQ_F32 && vq__sgemm_ok() &&
        vq__sgemm(ta, tb, m, n, k, (float)alpha, a, lda, b, ldb, (float)beta, c, ldc, NULL))
        return;
    enum CBLAS_TRANSPOSE opa = ta ? CblasTrans : CblasNoTrans, opb = tb ? CblasTrans : CblasNoTrans;
    if (dt == VQ_F32)
        cblas_sgemm(CblasRowMajor, opa, opb, (blasint)m, (blasint)n, (blasint)k, (float)alpha, a,
                    (blasint)lda, b, (blasint)ldb, (float)beta, c, (blasint)ldc);
    else
        cblas_dgemm(CblasRowMajor, opa, opb, (blasint)m, (blasint)n, (blasint)k, alpha, a,
                    (blasint)lda, b, (blasint)ldb, beta, c, (blasint)ldc);
}

/* ---- sharing a product with the engine's idle workers ----
 *
 * A product of at least MM_PARALLEL_MACS multiply-adds (about 50 us) is
 * cut into up to MM_BLOCKS blocks of Out's columns (of its rows, when
 * there are more rows than columns), each a product of its own, and the
 * blocks of every batch are shared out (vq__parallel_for). Each element's
 * sum is the same however the columns are cut (varq's kernel sums each
 * element over k alone), and the blocks depend only on the shapes, so
 * the bits do not depend on who runs them. The memory-bound products
 * gain most: a linear layer at batch 1 streams its weights through two
 * cores' caches instead of one (AlexNet's 9216 x 4096). */
#define MM_PARALLEL_MACS (1 << 20)
#define MM_BLOCKS 8

struct mm_job {
    const vq__matmul_params *p;
    vq__matmul_dims d;
    vq_dtype dt;
    size_t es;
    const char *x, *y;
    char *o;
    int64_t ldx, ldy, xs, ys, os;
    bool by_rows;        /* blocks of Out's rows, else of its columns */
    int64_t block, nblk; /* rows or columns per block, blocks per batch */
};

static int mm_blocks(void *arg, int64_t lo, int64_t hi, int slot)
{
    (void)slot;
    const struct mm_job *j = arg;
    const vq__matmul_params *p = j->p;
    for (int64_t item = lo; item < hi; item++) {
        int64_t b = item / j->nblk, i0 = item % j->nblk * j->block;
        const char *x = vq__elem_at(j->x, b * j->xs, j->es);
        const char *y = vq__elem_at(j->y, b * j->ys, j->es);
        char *o = (char *)vq__elem_at(j->o, b * j->os, j->es);
        if (j->by_rows) {
            int64_t m = j->d.m - i0 < j->block ? j->d.m - i0 : j->block;
            vq__gemm_ldc(j->dt, p->tx, p->ty, m, j->d.n, j->d.k, p->alpha,
                         vq__elem_at(x, p->tx ? i0 : i0 * j->ldx, j->es), j->ldx, y, j->ldy, 0,
                         vq__elem_at(o, i0 * j->d.n, j->es), j->d.n);
        } else {
            int64_t n = j->d.n - i0 < j->block ? j->d.n - i0 : j->block;
            vq__gemm_ldc(j->dt, p->tx, p->ty, j->d.m, n, j->d.k, p->alpha, x, j->ldx,
                         vq__elem_at(y, p->ty ? i0 * j->ldy : i0, j->es), j->ldy, 0,
                         vq__elem_at(o, i0, j->es), j->d.n);
        }
    }
    return 0;
}

static int64_t mm_ceil_div(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

static int matmul_kernel(const vq__kcall *k)
{
    const vq__matmul_params *p = k->params;
    vq_tensor *x = k->in[0], *y = k->in[1], *o = k->out[0];
    vq__matmul_dims d = vq__matmul_dims_of(x->ndim, x->shape, y->ndim, y->shape, p->tx, p->ty);
    struct mm_job j = {.p = p,
                       .d = d,
                       .dt = x->dtype,
                       .es = vq_dtype_size(x->dtype),
                       .x = x->data,
                       .y = y->data,
                       .o = o->data,
                       .ldx = p->tx ? d.m : d.k,
                       .ldy = p->ty ? d.k : d.n,
                       .xs = d.m * d.k,
                       .ys = d.shared ? 0 : d.k * d.n,
                       .os = d.m * d.n,
                       .by_rows = d.m > d.n};
    /* whole products per batch below the threshold (the same single call
     * as without workers); blocks of a multiple of 32 columns (a panel of
     * varq's kernel) or 8 rows above it */
    int64_t outer = j.by_rows ? d.m : d.n, unit = j.by_rows ? 8 : 32;
    bool cut = (double)d.m * (double)d.n * (double)d.k >= MM_PARALLEL_MACS;
    j.block = cut ? mm_ceil_div(mm_ceil_div(outer, MM_BLOCKS), unit) * unit : outer;
    j.block = j.block > 0 ? j.block : 1;
    j.nblk = mm_ceil_div(outer, j.block);
    if (d.batch == 0 || j.nblk == 0)
        return 0;
    bool share = (double)d.batch * (double)d.m * (double)d.n * (double)d.k >= MM_PARALLEL_MACS;
    return share ? vq__parallel_for(d.batch * j.nblk, 1, mm_blocks, &j)
                 : mm_blocks(&j, 0, d.batch * j.nblk, 0);
}

/* With Out_b = alpha A B, A = op(X_b), B = op(Y_b), G = dOut_b:
 *   dA = alpha G B^T, so dX_b = alpha G op(Y_b)^T, or its transpose
 *        alpha op(Y_b) G^T when X is transposed;
 *   dB = alpha A^T G, so dY_b = alpha op(X_b)^T G, or its transpose
 *        alpha G^T op(X_b) when Y is transposed.
 * A shared Y gets the sum over the batches: it is zeroed, then every
 * batch's product is added (beta 1). */
static int grad_kernel(const vq__kcall *k)
{
    const vq__matmul_params *p = k->params;
    vq_tensor *x = k->in[0], *y = k->in[1], *g = k->in[2], *dz = k->out[0];
    vq__matmul_dims d = vq__matmul_dims_of(x->ndim, x->shape, y->ndim, y->shape, p->tx, p->ty);
    size_t es = vq_dtype_size(x->dtype);
    int64_t ldx = p->tx ? d.m : d.k, ldy = p->ty ? d.k : d.n;
    int64_t xs = d.m * d.k, ys = d.shared ? 0 : d.k * d.n, gs = d.m * d.n;
    double beta = 0;
    if (p->wrt == 1 && d.shared) {
        memset(dz->data, 0, dz->nbytes);
        beta = 1;
    }
    for (int64_t b = 0; b < d.batch; b++) {
        const void *xb = vq__elem_at(x->data, b * xs, es), *yb = vq__elem_at(y->data, b * ys, es);
        const void *gb = vq__elem_at(g->data, b * gs, es);
        if (p->wrt == 0) {
            char *dx = (char *)vq__elem_at(dz->data, b * xs, es);
            if (!p->tx)
                vq__gemm(x->dtype, false, !p->ty, d.m, d.k, d.n, p->alpha, gb, d.n, yb, ldy, 0,
                         dx);
            else
                vq__gemm(x->dtype, p->ty, true, d.k, d.m, d.n, p->alpha, yb, ldy, gb, d.n, 0,
                         dx);
        } else {
            char *dy = (char *)vq__elem_at(dz->data, b * ys, es);
            if (!p->ty)
                vq__gemm(x->dtype, !p->tx, false, d.k, d.n, d.m, p->alpha, xb, ldx, gb, d.n,
                         beta, dy);
            else
                vq__gemm(x->dtype, true, p->tx, d.n, d.k, d.m, p->alpha, gb, d.n, xb, ldx,
                         beta, dy);
        }
    }
    return 0;
}

/* Both gradients are matmul_grad ops that read X, Y and dOut. */
static int matmul_grad(const vq__grad *g)
{
    if (!g->dout[0])
        return vq__op_fail(g->def, "no gradient flows into Out");
    /* matmul's schema has three attributes, each given at most once. */
    if (g->nattrs < 0 || g->nattrs > 3)
        return vq__op_fail(g->def, "%d attributes; matmul has 3", g->nattrs);
    vq_attr attrs[4];
    int n = 0;
    for (int i = 0; i < g->nattrs; i++)
        attrs[n++] = g->attrs[i];
    for (int i = 0; i < 2; i++) {
        if (!g->din[i])
            continue;
        attrs[n] = VQ_ATTR_I("wrt", i);
        const char *in[3] = {g->in[0], g->in[1], g->dout[0]};
        int rc = vq__emit(g, "matmul_grad", in, 3, &g->din[i], 1, attrs, n + 1);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static const vq__attr_spec matmul_attrs[] = {
    {"transpose_x", VQ_ATTR_BOOL, false, "0"},
    {"transpose_y", VQ_ATTR_BOOL, false, "0"},
    {"alpha", VQ_ATTR_FLOAT, false, "1"},
    {"wrt", VQ_ATTR_INT, true, NULL}, /* matmul_grad only */
};

const vq__op_def vq__ops_matmul[] = {
    {.type = "matmul",
     .in_slots = mm_in,
     .nin_slots = 2,
     .out_slots = mm_out,
     .nout_slots = 1,
     .attrs = matmul_attrs,
     .nattrs = 3,
     .params_size = sizeof(vq__matmul_params),
     .infer = matmul_infer,
     .kernel = {matmul_kernel},
     .cuda = VQ__CUDA_OP(vq__matmul_gpu),
     .grad = matmul_grad},
    {.type = "matmul_grad",
     .in_slots = grad_in,
     .nin_slots = 3,
     .out_slots = grad_out,
     .nout_slots = 1,
     .attrs = matmul_attrs,
     .nattrs = 4,
     .params_size = sizeof(vq__matmul_params),
     .infer = grad_infer,
     .kernel = {grad_kernel},
     .cuda = VQ__CUDA_OP(vq__matmul_grad_gpu)},
    {0},
};
