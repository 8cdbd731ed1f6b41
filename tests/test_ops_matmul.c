/* matmul and matmul_grad: every transpose combination, batched and shared Y,
 * empty and unit dims, f32 and f64, against a plain triple loop; gradients
 * against finite differences; shape errors; OpenBLAS kept single-threaded. */
#include "opcheck.h"

#include "../ops/math/sgemm.h"
#include "../ops/ops_internal.h"

#include <cblas.h>
#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng;

static void setup(void)
{
    rng = oc_seed("ops_matmul");
}

TestSuite(ops_matmul, .init = setup);

/* A product of op(X) [m,k] by op(Y) [k,n] per batch; shared: Y has no batch
 * dims. */
struct mm_case {
    int nb;
    int64_t batch[2];
    int64_t m, k, n;
    bool shared;
};

struct mm_tensors {
    vq_tensor *x, *y;
    int ndim;
    int64_t oshape[4];
    int64_t nbatch;
};

static struct mm_tensors make(const struct mm_case *c, vq_dtype dt, bool tx, bool ty)
{
    struct mm_tensors t = {.ndim = c->nb + 2, .nbatch = 1};
    int64_t xs[4], ys[4];
    int ny = c->shared ? 2 : c->nb + 2;
    for (int i = 0; i < c->nb; i++) {
        xs[i] = ys[i] = t.oshape[i] = c->batch[i];
        t.nbatch *= c->batch[i];
    }
    xs[c->nb] = tx ? c->k : c->m;
    xs[c->nb + 1] = tx ? c->m : c->k;
    ys[ny - 2] = ty ? c->n : c->k;
    ys[ny - 1] = ty ? c->k : c->n;
    t.oshape[c->nb] = c->m;
    t.oshape[c->nb + 1] = c->n;
    t.x = oc_rand(&rng, dt, c->nb + 2, xs, -1, 1);
    t.y = oc_rand(&rng, dt, ny, ys, -1, 1);
    return t;
}

/* The triple loop, in double. want has room for every output element. */
static void reference(const struct mm_case *c, const struct mm_tensors *t, bool tx, bool ty,
                      double alpha, double *want)
{
    int64_t m = c->m, k = c->k, n = c->n;
    for (int64_t b = 0; b < t->nbatch; b++) {
        int64_t xb = b * m * k, yb = c->shared ? 0 : b * k * n;
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                double s = 0;
                for (int64_t l = 0; l < k; l++) {
                    double a = oc_get(t->x, xb + (tx ? l * m + i : i * k + l));
                    double v = oc_get(t->y, yb + (ty ? j * k + l : l * n + j));
                    s += a * v;
                }
                want[(b * m + i) * n + j] = alpha * s;
            }
    }
}

static void check_cases(const struct mm_case *cases, size_t ncases)
{
    static double want[8192];
    vq_dtype dts[2] = {VQ_F32, VQ_F64};
    for (size_t ci = 0; ci < ncases; ci++)
        for (int d = 0; d < 2; d++)
            for (int tr = 0; tr < 4; tr++) {
                bool tx = tr & 1, ty = tr & 2;
                double alpha = tr == 3 ? -1.5 : 1.0;
                const struct mm_case *c = &cases[ci];
                struct mm_tensors t = make(c, dts[d], tx, ty);
                cr_assert_leq(t.nbatch * c->m * c->n, 8192);
                reference(c, &t, tx, ty, alpha, want);
                vq_attr at[3] = {VQ_ATTR_B("transpose_x", tx), VQ_ATTR_B("transpose_y", ty),
                                 VQ_ATTR_F("alpha", alpha)};
                vq_tensor *in[2] = {t.x, t.y};
                vq_tensor *o = oc_run1("matmul", in, 2, at, 3);
                cr_log_info("case %zu %s tx=%d ty=%d", ci, vq_dtype_name(dts[d]), tx, ty);
                oc_assert_close(o, t.ndim, t.oshape, want, dts[d] == VQ_F32 ? 1e-5 : 1e-13,
                                dts[d] == VQ_F32 ? 1e-5 : 1e-13);
                vq_tensor_release(o);
                vq_tensor_release(t.x);
                vq_tensor_release(t.y);
            }
}

Test(ops_matmul, matches_the_triple_loop_for_every_transpose_and_dtype)
{
    const struct mm_case cases[] = {
        {0, {0}, 3, 4, 5, false},
        {0, {0}, 17, 33, 9, false},
        {0, {0}, 64, 48, 40, false},
    };
    check_cases(cases, sizeof cases / sizeof cases[0]);
}

/* Products of at least 2^20 multiply-adds are cut into blocks of Out's
 * columns (or rows, when there are more) that the engine's workers share
 * (cpu/matmul.c): two workers give the serial call's bits, and the triple
 * loop's values, in every form, for one product and for a batch, a linear
 * layer at batch 1 among them. */
Test(ops_matmul, a_product_shared_by_two_workers_equals_the_serial_call_bit_for_bit)
{
    static const struct mm_case cases[] = {
        {0, {0}, 1, 2048, 1000, false}, /* by columns, the streaming kernel */
        {0, {0}, 700, 200, 30, false},  /* by rows */
        {1, {3}, 40, 130, 300, true},   /* batches of blocks */
        {0, {0}, 64, 256, 257, false},  /* a last block of one column */
    };
    vq_engine *e;
    cr_assert_eq(vq_engine_new(&e, &(vq_engine_opts){.kind = VQ_ENGINE_THREADED, .cpu_workers = 2}),
                 0, "%s", vq_errmsg());
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
        for (int d = 0; d < 2; d++)
            for (int tr = 0; tr < 4; tr++) {
                vq_dtype dt = d ? VQ_F64 : VQ_F32;
                bool tx = tr & 1, ty = tr & 2;
                const struct mm_case *c = &cases[ci];
                struct mm_tensors t = make(c, dt, tx, ty);
                vq_attr at[3] = {VQ_ATTR_B("transpose_x", tx), VQ_ATTR_B("transpose_y", ty),
                                 VQ_ATTR_F("alpha", 0.5)};
                vq_tensor *in[2] = {t.x, t.y}, *par = NULL;
                vq_tensor *ser = oc_run1("matmul", in, 2, at, 3);
                cr_assert_eq(vq_op_run(e, "matmul", in, 2, &par, 1, at, 3), 0, "%s", vq_errmsg());
                cr_assert_eq(vq_tensor_wait(par), 0, "%s", vq_errmsg());
                cr_assert_eq(memcmp(vq_tensor_data(par), vq_tensor_data(ser),
                                    (size_t)vq_tensor_numel(ser) * vq_dtype_size(dt)),
                             0, "case %zu %s tx=%d ty=%d: the shared call differs", ci,
                             vq_dtype_name(dt), tx, ty);
                double *want = malloc((size_t)(t.nbatch * c->m * c->n) * sizeof *want);
                cr_assert(want);
                reference(c, &t, tx, ty, 0.5, want);
                double tol = dt == VQ_F32 ? 1e-5 * (double)c->k : 1e-13 * (double)c->k;
                oc_assert_close(par, t.ndim, t.oshape, want, tol, tol);
                free(want);
                vq_tensor_release(par);
                vq_tensor_release(ser);
                vq_tensor_release(t.x);
                vq_tensor_release(t.y);
            }
    vq_engine_free(e);
}

/* want = alpha op(A) op(B) (+ C with acc) in double, C's rows ldc apart. */
static void ref_product(int64_t m, int64_t n, int64_t k, bool ta, bool tb, double alpha,
                        const float *a, int64_t lda, const float *b, int64_t ldb, bool acc,
                        const float *c, int64_t ldc, double *want)
{
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double s = 0;
            for (int64_t p = 0; p < k; p++)
                s += (double)(ta ? a[p * lda + i] : a[i * lda + p]) *
                     (double)(tb ? b[j * ldb + p] : b[p * ldb + j]);
            want[i * ldc + j] = alpha * s + (acc ? c[i * ldc + j] : 0);
        }
}

/* Products up to 4,096 multiply-adds skip OpenBLAS (cpu/matmul.c's small
 * loops): each of their three forms, pieces of C wider than the stack
 * block, a row stride past n, alpha, beta 1 (accumulate) and beta 0 over
 * NaN (C not read), on both sides of the size limit, against double. */
Test(ops_matmul, small_products_match_double_in_every_form)
{
    const int64_t dims[][3] = {{16, 1, 16}, {16, 16, 1},  {1, 100, 40}, {100, 1, 40}, {7, 9, 3},
                               {3, 5, 70},  {16, 16, 16}, {16, 16, 17}, {1, 1, 1},    {65, 2, 31}};
    static float a[8192], b[8192], c[8192];
    static double want[8192];
    for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++)
        for (int tr = 0; tr < 8; tr++) {
            int64_t m = dims[di][0], n = dims[di][1], k = dims[di][2], ldc = n + 3;
            bool ta = tr & 1, tb = tr & 2, acc = tr & 4;
            int64_t lda = ta ? m + 1 : k + 2, ldb = tb ? k + 1 : n;
            for (int i = 0; i < 8192; i++) {
                a[i] = (float)oc_uniform(&rng, -1, 1);
                b[i] = (float)oc_uniform(&rng, -1, 1);
                c[i] = acc ? (float)oc_uniform(&rng, -1, 1) : NAN;
            }
            ref_product(m, n, k, ta, tb, -1.5, a, lda, b, ldb, acc, c, ldc, want);
            vq__gemm_ldc(VQ_F32, ta, tb, m, n, k, -1.5, a, lda, b, ldb, acc ? 1 : 0, c, ldc);
            for (int64_t i = 0; i < m; i++)
                for (int64_t j = 0; j < n; j++)
                    cr_assert(fabs(c[i * ldc + j] - want[i * ldc + j]) <= 1e-5 * (double)k,
                              "%lldx%lldx%lld ta=%d tb=%d beta=%d: C[%lld,%lld] = %g, want %g",
                              (long long)m, (long long)n, (long long)k, ta, tb, acc, (long long)i,
                              (long long)j, c[i * ldc + j], want[i * ldc + j]);
        }
}

/* Products past the small loops (OpenBLAS, or on CPUs with AVX-512 varq's
 * own kernel, ops/math/sgemm.c): sizes across its tile edges (8 rows,
 * 16 and 32 columns) and its blocks of k (256) and of columns (256), each
 * transpose form, alpha, beta 1, and beta 0 over NaN, C's rows past n, in
 * f32 against double. Then the AVX-512 kernel directly where it runs: the
 * same sizes, and the same bits whichever thread calls it. */
static void wide_case(int64_t m, int64_t n, int64_t k, int tr, bool direct)
{
    bool ta = tr & 1, tb = tr & 2, acc = tr & 4;
    int64_t ldc = n + 5, lda = ta ? m + 3 : k + 1, ldb = tb ? k + 2 : n + 7;
    size_t na = (size_t)((ta ? k : m) * lda), nb = (size_t)((tb ? n : k) * ldb);
    size_t nc = (size_t)(m * ldc);
    float *a = malloc(na * sizeof *a), *b = malloc(nb * sizeof *b), *c = malloc(nc * sizeof *c);
    double *want = malloc(nc * sizeof *want);
    cr_assert(a && b && c && want);
    for (size_t i = 0; i < na; i++)
        a[i] = (float)oc_uniform(&rng, -1, 1);
    for (size_t i = 0; i < nb; i++)
        b[i] = (float)oc_uniform(&rng, -1, 1);
    for (size_t i = 0; i < nc; i++)
        c[i] = acc ? (float)oc_uniform(&rng, -1, 1) : NAN;
    ref_product(m, n, k, ta, tb, 0.75, a, lda, b, ldb, acc, c, ldc, want);
    if (direct)
        cr_assert(vq__sgemm(ta, tb, m, n, k, 0.75f, a, lda, b, ldb, acc ? 1 : 0, c, ldc, NULL));
    else
        vq__gemm_ldc(VQ_F32, ta, tb, m, n, k, 0.75, a, lda, b, ldb, acc ? 1 : 0, c, ldc);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < ldc; j++) {
            if (j >= n) { /* past n: untouched */
                cr_assert(acc ? !isnan(c[i * ldc + j]) : isnan(c[i * ldc + j]),
                          "%lldx%lldx%lld: C[%lld,%lld] past n was written", (long long)m,
                          (long long)n, (long long)k, (long long)i, (long long)j);
                continue;
            }
            cr_assert(fabs(c[i * ldc + j] - want[i * ldc + j]) <= 2e-6 * (double)k,
                      "%lldx%lldx%lld ta=%d tb=%d beta=%d direct=%d: C[%lld,%lld] = %g, want %g",
                      (long long)m, (long long)n, (long long)k, ta, tb, acc, direct, (long long)i,
                      (long long)j, c[i * ldc + j], want[i * ldc + j]);
        }
    free(a);
    free(b);
    free(c);
    free(want);
}

static const int64_t wide_dims[][3] = {
    {8, 32, 70},  {9, 33, 65},   {1, 600, 9},  {17, 17, 300}, {64, 49, 520},
    {7, 257, 33}, {40, 16, 600}, {3, 1, 2000}, {100, 15, 40}, {23, 290, 257},
};

Test(ops_matmul, wide_products_match_double_in_every_form)
{
    for (size_t di = 0; di < sizeof wide_dims / sizeof wide_dims[0]; di++)
        for (int tr = 0; tr < 8; tr++)
            wide_case(wide_dims[di][0], wide_dims[di][1], wide_dims[di][2], tr, false);
}

struct sg_thread_arg {
    const float *a, *b;
    float *c;
};

static void *sg_thread(void *p)
{
    struct sg_thread_arg *t = p;
    vq__sgemm(false, false, 37, 75, 600, 1, t->a, 600, t->b, 75, 0, t->c, 75, NULL);
    return NULL;
}

Test(ops_matmul, the_own_kernel_matches_double_and_any_thread_gets_its_bits)
{
    if (!vq__sgemm_ok())
        cr_skip_test("no AVX2 + FMA here, or VARQ_GEMM=openblas: vq__gemm uses OpenBLAS");
    for (size_t di = 0; di < sizeof wide_dims / sizeof wide_dims[0]; di++)
        for (int tr = 0; tr < 8; tr++)
            wide_case(wide_dims[di][0], wide_dims[di][1], wide_dims[di][2], tr, true);
    static float a[37 * 600], b[600 * 75], c0[37 * 75], c1[37 * 75];
    for (size_t i = 0; i < sizeof a / sizeof a[0]; i++)
        a[i] = (float)oc_uniform(&rng, -1, 1);
    for (size_t i = 0; i < sizeof b / sizeof b[0]; i++)
        b[i] = (float)oc_uniform(&rng, -1, 1);
    cr_assert(vq__sgemm(false, false, 37, 75, 600, 1, a, 600, b, 75, 0, c0, 75, NULL));
    struct sg_thread_arg t = {a, b, c1};
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, sg_thread, &t), 0);
    pthread_join(th, NULL);
    cr_assert_eq(memcmp(c0, c1, sizeof c0), 0, "another thread's product has other bits");
}

Test(ops_matmul, empty_and_unit_dims_work)
{
    const struct mm_case cases[] = {
        {0, {0}, 1, 1, 1, false}, {0, {0}, 0, 3, 4, false}, {0, {0}, 3, 0, 4, false},
        {0, {0}, 3, 4, 0, false}, {0, {0}, 0, 0, 0, false}, {0, {0}, 1, 7, 1, false},
        {0, {0}, 5, 1, 6, false}, {1, {0}, 2, 3, 4, false}, {1, {0}, 2, 3, 4, true},
        {1, {3}, 2, 0, 4, false}, {1, {2}, 3, 0, 2, true},  {1, {2}, 0, 3, 2, true},
        {2, {1, 1}, 1, 1, 1, false},
    };
    check_cases(cases, sizeof cases / sizeof cases[0]);
}

Test(ops_matmul, batched_products_pair_each_x_with_its_y)
{
    const struct mm_case cases[] = {
        {1, {2}, 3, 4, 5, false},
        {2, {2, 3}, 2, 3, 4, false},
        {1, {4}, 1, 5, 1, false},
        {1, {5}, 8, 6, 7, false},
    };
    check_cases(cases, sizeof cases / sizeof cases[0]);
}

Test(ops_matmul, a_rank_2_y_is_shared_by_every_batch)
{
    const struct mm_case cases[] = {
        {1, {3}, 2, 3, 4, true},
        {2, {2, 2}, 1, 3, 2, true},
        {1, {6}, 5, 4, 3, true},
        {2, {3, 1}, 4, 2, 5, true},
    };
    check_cases(cases, sizeof cases / sizeof cases[0]);
}

static void grad_cases(const struct mm_case *cases, size_t ncases)
{
    for (size_t ci = 0; ci < ncases; ci++)
        for (int tr = 0; tr < 4; tr++) {
            bool tx = tr & 1, ty = tr & 2;
            struct mm_tensors t = make(&cases[ci], VQ_F64, tx, ty);
            vq_attr at[3] = {VQ_ATTR_B("transpose_x", tx), VQ_ATTR_B("transpose_y", ty),
                             VQ_ATTR_F("alpha", tr == 2 ? 0.75 : 1.0)};
            vq_tensor *in[2] = {t.x, t.y};
            oc_grad_check("matmul", in, 2, 1, at, 3, 3, &rng);
            /* One input alone: the maker emits only what is asked for. */
            oc_grad_check("matmul", in, 2, 1, at, 3, 1u << (tr & 1), &rng);
            vq_tensor_release(t.x);
            vq_tensor_release(t.y);
        }
    cr_log_info("largest gradient error: %.3g", oc_worst_grad_error());
}

Test(ops_matmul, gradients_match_finite_differences)
{
    const struct mm_case cases[] = {
        {0, {0}, 3, 4, 2, false},
        {0, {0}, 1, 1, 1, false},
        {0, {0}, 2, 0, 3, false},
        {0, {0}, 0, 2, 3, false},
    };
    grad_cases(cases, sizeof cases / sizeof cases[0]);
}

Test(ops_matmul, batched_gradients_match_finite_differences)
{
    const struct mm_case cases[] = {
        {1, {2}, 2, 3, 2, false},
        {2, {2, 2}, 2, 2, 3, false},
    };
    grad_cases(cases, sizeof cases / sizeof cases[0]);
}

Test(ops_matmul, shared_y_gradient_sums_over_the_batch)
{
    const struct mm_case cases[] = {
        {1, {3}, 2, 3, 2, true},
        {2, {2, 2}, 1, 2, 3, true},
        {1, {2}, 0, 2, 2, true},
    };
    grad_cases(cases, sizeof cases / sizeof cases[0]);
}

static vq_tensor *zeros(vq_dtype dt, int ndim, const int64_t *shape)
{
    vq_tensor *t;
    cr_assert_eq(vq_tensor_new(&t, dt, ndim, shape), 0, "%s", vq_errmsg());
    return t;
}

static void expect_error(const char *type, vq_tensor *const *in, int nin, const vq_attr *at,
                         int nat, const char *msg)
{
    cr_assert_eq(oc_try(type, in, nin, 1, at, nat), VQ_EINVAL, "%s: expected %s", type, msg);
    cr_assert(strstr(vq_errmsg(), msg), "got \"%s\", expected \"%s\"", vq_errmsg(), msg);
}

Test(ops_matmul, bad_shapes_and_dtypes_name_the_slot)
{
    vq_tensor *a = zeros(VQ_F32, 2, (int64_t[]){2, 3}), *b = zeros(VQ_F32, 2, (int64_t[]){4, 5});
    vq_tensor *in[2] = {a, b};
    expect_error("matmul", in, 2, NULL, 0,
                 "matmul: input Y (slot 1): inner dims differ: X is [2,3], Y is [4,5]");
    vq_attr tx = VQ_ATTR_B("transpose_x", true);
    expect_error("matmul", in, 2, &tx, 1,
                 "matmul: input Y (slot 1): inner dims differ: X is [2,3] (transposed), Y is [4,5]");

    vq_tensor *v = zeros(VQ_F32, 1, (int64_t[]){3});
    in[1] = v;
    expect_error("matmul", in, 2, NULL, 0, "matmul: input Y (slot 1): has 1 dims");

    vq_tensor *x3 = zeros(VQ_F32, 3, (int64_t[]){2, 2, 3}), *y3 = zeros(VQ_F32, 3, (int64_t[]){3, 3, 2});
    in[0] = x3;
    in[1] = y3;
    expect_error("matmul", in, 2, NULL, 0, "matmul: input Y (slot 1): batch dim 0 differs");
    in[0] = a;
    expect_error("matmul", in, 2, NULL, 0, "matmul: input Y (slot 1): has 3 dims; expected X's 2");

    vq_tensor *d = zeros(VQ_F64, 2, (int64_t[]){3, 5});
    in[1] = d;
    expect_error("matmul", in, 2, NULL, 0, "matmul: input Y (slot 1): dtype f64 differs");
    vq_tensor *i1 = zeros(VQ_I32, 2, (int64_t[]){2, 3}), *i2 = zeros(VQ_I32, 2, (int64_t[]){3, 2});
    in[0] = i1;
    in[1] = i2;
    expect_error("matmul", in, 2, NULL, 0, "matmul: input X (slot 0): dtype i32 not supported");

    vq_attr s = VQ_ATTR_S("alpha", "two");
    in[0] = a;
    in[1] = zeros(VQ_F32, 2, (int64_t[]){3, 2});
    expect_error("matmul", in, 2, &s, 1, "matmul: attribute alpha: expected float");

    /* matmul_grad checks dOut against the product's shape, and wrt. */
    vq_tensor *g = zeros(VQ_F32, 2, (int64_t[]){2, 3});
    vq_tensor *gin[3] = {a, in[1], g};
    vq_attr w = VQ_ATTR_I("wrt", 0);
    expect_error("matmul_grad", gin, 3, &w, 1,
                 "matmul_grad: input dOut (slot 2): shape [2,3] is not the product's shape [2,2]");
    vq_attr w2 = VQ_ATTR_I("wrt", 2);
    expect_error("matmul_grad", gin, 3, &w2, 1, "matmul_grad: attribute wrt: is 2");
    expect_error("matmul_grad", gin, 3, NULL, 0, "matmul_grad: attribute wrt (int) is required");

    vq_tensor *all[] = {a, b, v, x3, y3, d, i1, i2, in[1], g};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        vq_tensor_release(all[i]);
}

Test(ops_matmul, unknown_dims_are_accepted_and_propagated)
{
    const vq__op_def *def = vq__op_find("matmul");
    cr_assert(def);
    vq__meta in[2] = {{.dtype = VQ_F32, .ndim = 3, .shape = {-1, 4, -1}},
                      {.dtype = VQ_F32, .ndim = 3, .shape = {2, 5, -1}}};
    vq__meta out[1];
    unsigned char params[VQ__MAX_PARAMS];
    cr_assert_eq(vq__op_infer(def, NULL, 0, 2, in, 1, out, params), 0, "%s", vq_errmsg());
    cr_assert_eq(out[0].ndim, 3);
    cr_assert_eq(out[0].shape[0], 2);
    cr_assert_eq(out[0].shape[1], 4);
    cr_assert_eq(out[0].shape[2], -1);
    /* A known mismatch is still caught. */
    in[0].shape[2] = 3;
    cr_assert_eq(vq__op_infer(def, NULL, 0, 2, in, 1, out, params), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "inner dims differ"), "%s", vq_errmsg());
}

Test(ops_matmul, openblas_runs_single_threaded_inside_ops)
{
    vq_tensor *a = oc_rand(&rng, VQ_F64, 2, (int64_t[]){8, 8}, -1, 1);
    vq_tensor *in[2] = {a, a};
    vq_tensor *o = oc_run1("matmul", in, 2, NULL, 0);
    cr_assert_eq(openblas_get_num_threads(), 1);
    vq_tensor_release(o);
    vq_tensor_release(a);
}

Test(ops_matmul, concurrent_products_on_an_engine_match_synchronous_ones)
{
    vq_engine *e;
    vq_engine_opts opts = {.kind = VQ_ENGINE_THREADED, .cpu_workers = 4};
    cr_assert_eq(vq_engine_new(&e, &opts), 0, "%s", vq_errmsg());
    enum { N = 16 };
    vq_tensor *x[N], *y[N], *got[N], *want[N];
    for (int i = 0; i < N; i++) {
        x[i] = oc_rand(&rng, VQ_F32, 3, (int64_t[]){2, 40, 30}, -1, 1);
        y[i] = oc_rand(&rng, VQ_F32, 2, (int64_t[]){30, 20}, -1, 1);
        vq_tensor *in[2] = {x[i], y[i]};
        want[i] = oc_run1("matmul", in, 2, NULL, 0);
        got[i] = NULL;
        cr_assert_eq(vq_op_run(e, "matmul", in, 2, &got[i], 1, NULL, 0), 0, "%s", vq_errmsg());
    }
    for (int i = 0; i < N; i++) {
        cr_assert_eq(vq_tensor_wait(got[i]), 0, "%s", vq_errmsg());
        cr_assert_eq(memcmp(vq_tensor_data(got[i]), vq_tensor_data(want[i]),
                            vq_tensor_nbytes(want[i])),
                     0, "product %d differs", i);
    }
    for (int i = 0; i < N; i++) {
        vq_tensor_release(x[i]);
        vq_tensor_release(y[i]);
        vq_tensor_release(got[i]);
        vq_tensor_release(want[i]);
    }
    vq_engine_free(e);
}

Test(ops_matmul, signature_lists_slots_and_attributes)
{
    cr_assert_str_eq(vq_op_signature("matmul"),
                     "matmul(X, Y) -> Out; transpose_x:bool=false transpose_y:bool=false alpha:float=1");
    cr_assert_str_eq(vq_op_signature("matmul_grad"),
                     "matmul_grad(X, Y, dOut) -> dZ; transpose_x:bool=false transpose_y:bool=false "
                     "alpha:float=1 wrt:int");
}
