/* Program-building helpers shared by the executor suites (test_exec.c,
 * test_exec_gpu.c, test_scope.c): builder calls that fail the test with
 * varq's message, a bitwise comparison of tensors, and the small programs
 * the suites run. */
#ifndef VARQ_TESTS_PROGRAMS_H
#define VARQ_TESTS_PROGRAMS_H

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

#endif
