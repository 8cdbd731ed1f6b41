/* Program-building helpers shared by the executor suites (test_exec.c,
 * test_exec_gpu.c, test_scope.c): builder calls that fail the test with
 * varq's message, a bitwise comparison of tensors, and the small programs
 * the suites run. */
#ifndef VARQ_TESTS_PROGRAMS_H
#define VARQ_TESTS_PROGRAMS_H

#include "fixtures.h"

#include <varq/varq.h>

#include <criterion/criterion.h>
#include <string.h>

#define NAMES(...) ((const char *const[]){__VA_ARGS__})

/* Fails the test unless a and b have the same dtype, shape and bytes. */
static inline void assert_same_bits(vq_tensor *a, vq_tensor *b)
{
    cr_assert_eq(vq_tensor_dtype(a), vq_tensor_dtype(b));
    cr_assert_eq(vq_tensor_ndim(a), vq_tensor_ndim(b));
    cr_assert_eq(vq_tensor_nbytes(a), vq_tensor_nbytes(b));
    for (int i = 0; i < vq_tensor_ndim(a); i++)
        cr_assert_eq(vq_tensor_shape(a)[i], vq_tensor_shape(b)[i]);
    cr_assert_eq(memcmp(vq_tensor_data(a), vq_tensor_data(b), vq_tensor_nbytes(a)), 0,
                 "bits differ");
}

static inline void var(vq_program *p, const char *name, vq_dtype dt, int ndim,
                       const int64_t *shape, bool persistable)
{
    cr_assert_eq(vq_program_add_var(p, 0, name, dt, ndim, shape, persistable), 0, "%s",
                 vq_errmsg());
}

static inline void op(vq_program *p, const char *type, const char *const *in, int nin,
                      const char *const *out, int nout, const vq_attr *attrs, int nattrs)
{
    int rc = vq_program_add_op(p, 0, type, in, nin, out, nout, attrs, nattrs);
    cr_assert_geq(rc, 0, "%s", vq_errmsg());
}

/* y = softmax(relu(x @ w + b) * 0.5), batch unknown (-1). */
static inline vq_program *mlp_program(void)
{
    vq_program *p;
    cr_assert_eq(vq_program_new(&p), 0);
    int64_t x[2] = {-1, 5}, w[2] = {5, 3}, b[1] = {3}, h[2] = {-1, 3};
    var(p, "x", VQ_F64, 2, x, false);
    var(p, "w", VQ_F64, 2, w, true);
    var(p, "b", VQ_F64, 1, b, true);
    var(p, "xw", VQ_F64, 2, h, false);
    var(p, "z", VQ_F64, 2, h, false);
    var(p, "r", VQ_F64, 2, h, false);
    var(p, "s", VQ_F64, 2, h, false);
    var(p, "y", VQ_F64, 2, h, false);
    op(p, "matmul", NAMES("x", "w"), 2, NAMES("xw"), 1, NULL, 0);
    op(p, "add", NAMES("xw", "b"), 2, NAMES("z"), 1, NULL, 0);
    op(p, "relu", NAMES("z"), 1, NAMES("r"), 1, NULL, 0);
    vq_attr half = VQ_ATTR_F("scale", 0.5);
    op(p, "scale", NAMES("r"), 1, NAMES("s"), 1, &half, 1);
    op(p, "softmax", NAMES("s"), 1, NAMES("y"), 1, NULL, 0);
    return p;
}

/* r = a / b + a over i32[2]: fails in the kernel when b has a zero. */
static inline vq_program *div_program(void)
{
    vq_program *p;
    cr_assert_eq(vq_program_new(&p), 0);
    int64_t s[1] = {2};
    var(p, "a", VQ_I32, 1, s, false);
    var(p, "b", VQ_I32, 1, s, false);
    var(p, "q", VQ_I32, 1, s, false);
    var(p, "r", VQ_I32, 1, s, false);
    op(p, "div", NAMES("a", "b"), 2, NAMES("q"), 1, NULL, 0);
    op(p, "add", NAMES("q", "a"), 2, NAMES("r"), 1, NULL, 0);
    return p;
}

/* ---- random ops (the executor's default generator, vq_exec_opts.seed) ---- */

enum { RANDOM_X = 256, RANDOM_ITERS = 5 };

/* y = dropout(x, p 0.5) (x f64[256]) and u = uniform_random f64[64], both
 * without a seed; s = uniform_random f64[64] with seed 7; and a while of
 * n iterations adding uniform_random f64[8] (no seed) to acc (from acc0):
 * random ops in the root frame and in a loop's ring of frames. */
static inline vq_program *random_program(void)
{
    vq_program *p;
    cr_assert_eq(vq_program_new(&p), 0);
    int64_t xs[1] = {RANDOM_X}, us[1] = {64}, as[1] = {8};
    var(p, "x", VQ_F64, 1, xs, false);
    var(p, "y", VQ_F64, 1, xs, false);
    var(p, "y.mask", VQ_F64, 1, xs, false);
    var(p, "u", VQ_F64, 1, us, false);
    var(p, "s", VQ_F64, 1, us, false);
    var(p, "acc0", VQ_F64, 1, as, false);
    var(p, "acc", VQ_F64, 1, as, false);
    const char *scalars[] = {"i0", "n", "one", "io"};
    for (int i = 0; i < 4; i++)
        var(p, scalars[i], VQ_F64, 0, NULL, false);
    var(p, "c0", VQ_BOOL, 0, NULL, false);
    vq_attr half = VQ_ATTR_F("p", 0.5);
    op(p, "dropout", NAMES("x"), 1, NAMES("y", "y.mask"), 2, &half, 1);
    vq_attr u[2] = {VQ_ATTR_IS("shape", us, 1), VQ_ATTR_S("dtype", "f64")};
    op(p, "uniform_random", NULL, 0, NAMES("u"), 1, u, 2);
    vq_attr seeded[3] = {VQ_ATTR_IS("shape", us, 1), VQ_ATTR_S("dtype", "f64"),
                         VQ_ATTR_I("seed", 7)};
    op(p, "uniform_random", NULL, 0, NAMES("s"), 1, seeded, 3);
    int b = vq_program_add_block(p, 0);
    cr_assert_gt(b, 0, "%s", vq_errmsg());
    const char *bvecs[] = {"bacc", "br", "bacc2"}, *bscalars[] = {"bi", "bi2"};
    for (int i = 0; i < 3; i++)
        cr_assert_eq(vq_program_add_var(p, b, bvecs[i], VQ_F64, 1, as, false), 0);
    for (int i = 0; i < 2; i++)
        cr_assert_eq(vq_program_add_var(p, b, bscalars[i], VQ_F64, 0, NULL, false), 0);
    cr_assert_eq(vq_program_add_var(p, b, "bc", VQ_BOOL, 0, NULL, false), 0);
    vq_attr r[2] = {VQ_ATTR_IS("shape", as, 1), VQ_ATTR_S("dtype", "f64")};
    cr_assert_geq(vq_program_add_op(p, b, "uniform_random", NULL, 0, NAMES("br"), 1, r, 2), 0);
    cr_assert_geq(vq_program_add_op(p, b, "add", NAMES("bacc", "br"), 2, NAMES("bacc2"), 1, NULL,
                                    0),
                  0);
    cr_assert_geq(vq_program_add_op(p, b, "add", NAMES("bi", "one"), 2, NAMES("bi2"), 1, NULL, 0),
                  0);
    cr_assert_geq(vq_program_add_op(p, b, "less", NAMES("bi2", "n"), 2, NAMES("bc"), 1, NULL, 0),
                  0);
    op(p, "less", NAMES("i0", "n"), 2, NAMES("c0"), 1, NULL, 0);
    vq_attr w[5] = {VQ_ATTR_I("body_block", b), VQ_ATTR_SS("body_inputs", NAMES("bacc", "bi"), 2),
                    VQ_ATTR_SS("body_outputs", NAMES("bacc2", "bi2"), 2),
                    VQ_ATTR_S("body_cond", "bc"), VQ_ATTR_I("max_iters", -1)};
    op(p, "while", NAMES("c0", "acc0", "i0"), 3, NAMES("acc", "io"), 2, w, 5);
    return p;
}

enum { RANDOM_FETCHES = 4 }; /* y, u, s, acc */

/* One run of random_program on ex (x = 1.5 everywhere, n = RANDOM_ITERS):
 * got[] = y, u, s, acc, each a new reference, finished. */
static inline void random_run(vq_exec *ex, vq_program *p, vq_tensor *got[RANDOM_FETCHES])
{
    int64_t xs[1] = {RANDOM_X}, as[1] = {8};
    double xv[RANDOM_X], zeros[8] = {0}, scal[3] = {0, RANDOM_ITERS, 1};
    for (int i = 0; i < RANDOM_X; i++)
        xv[i] = 1.5;
    vq_tensor *in[5];
    cr_assert_eq(vq_tensor_from(&in[0], VQ_F64, 1, xs, xv), 0);
    cr_assert_eq(vq_tensor_from(&in[1], VQ_F64, 1, as, zeros), 0);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(vq_tensor_from(&in[2 + i], VQ_F64, 0, NULL, &scal[i]), 0);
    vq_feed feeds[5] = {{"x", in[0]}, {"acc0", in[1]}, {"i0", in[2]}, {"n", in[3]}, {"one", in[4]}};
    vq_fetch f[RANDOM_FETCHES] = {{"y", NULL}, {"u", NULL}, {"s", NULL}, {"acc", NULL}};
    cr_assert_eq(vq_exec_run(ex, p, NULL, feeds, 5, f, RANDOM_FETCHES), 0, "%s", vq_errmsg());
    for (int i = 0; i < RANDOM_FETCHES; i++) {
        cr_assert_eq(vq_tensor_wait(f[i].tensor), 0, "%s", vq_errmsg());
        got[i] = f[i].tensor;
    }
    for (int i = 0; i < 5; i++)
        vq_tensor_release(in[i]);
}

/* How many elements of a and b (f64, as many) are equal. */
static inline int64_t random_same(vq_tensor *a, vq_tensor *b)
{
    const double *x = vq_tensor_data(a), *y = vq_tensor_data(b);
    int64_t n = 0;
    for (int64_t i = 0; i < vq_tensor_numel(a); i++)
        n += x[i] == y[i];
    return n;
}

static inline void random_release(vq_tensor *got[RANDOM_FETCHES])
{
    for (int i = 0; i < RANDOM_FETCHES; i++)
        vq_tensor_release(got[i]);
}

#endif
