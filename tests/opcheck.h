/* Helpers for the op suites: random tensors, element access as double,
 * running an op outside any engine, comparing with a reference, and the
 * gradient check (an op's gradient maker, run op by op, against central
 * finite differences in f64). */
#ifndef VARQ_TESTS_OPCHECK_H
#define VARQ_TESTS_OPCHECK_H

#include <varq/varq.h>

#include <stdint.h>

/* splitmix64 step: the suites' PRNG (seeded from VARQ_TEST_SEED if set). */
uint64_t oc_next(uint64_t *state);
double oc_uniform(uint64_t *state, double lo, double hi);
uint64_t oc_seed(const char *suite); /* prints the seed it uses */

/* A tensor of dtype dt with values uniform in [lo, hi) (integers: rounded
 * down; bool: 0/1). Asserts on failure. */
vq_tensor *oc_rand(uint64_t *rng, vq_dtype dt, int ndim, const int64_t *shape, double lo,
                   double hi);
/* A tensor from doubles (converted to dt). */
vq_tensor *oc_from(vq_dtype dt, int ndim, const int64_t *shape, const double *values);
double oc_get(vq_tensor *t, int64_t i);
/* numpy's broadcasting rule, the slow way: the index in an input of shape
 * (ndim, shape) of element i of the broadcast output (ondim, oshape). */
int64_t oc_bcast_index(int64_t i, int ondim, const int64_t *oshape, int ndim,
                       const int64_t *shape);

/* Pairs of shapes (X, Y) with their broadcast shape (O), for the suites of
 * broadcasting ops: same shapes, a trailing vector, 1s on both sides, size
 * 0, a scalar, rank 4. */
struct oc_bcast_case {
    int nx, ny, no;
    int64_t x[4], y[4], o[4];
};
extern const struct oc_bcast_case oc_bcast_cases[];
extern const int oc_nbcast_cases;
void oc_set(vq_tensor *t, int64_t i, double v);

/* Runs op type synchronously (engine NULL) on in, creating nout outputs in
 * out. Asserts that it succeeds. */
void oc_run(const char *type, vq_tensor *const *in, int nin, vq_tensor **out, int nout,
            const vq_attr *attrs, int nattrs);
/* The same with one output, returned. */
vq_tensor *oc_run1(const char *type, vq_tensor *const *in, int nin, const vq_attr *attrs,
                   int nattrs);
/* Runs type on a 2-worker engine e (large calls are then shared with the
 * idle worker) and outside any engine, and asserts the same bits. */
void oc_assert_shared_equals_serial(vq_engine *e, const char *type, vq_tensor **in, int nin,
                                    const vq_attr *at, int na);
/* Returns vq_op_run's result (for error tests); releases created outputs. */
int oc_try(const char *type, vq_tensor *const *in, int nin, int nout, const vq_attr *attrs,
           int nattrs);

/* Asserts got has the shape and |got - want| <= atol + rtol * |want|
 * elementwise; names the first bad element. */
void oc_assert_close(vq_tensor *got, int ndim, const int64_t *shape, const double *want,
                     double rtol, double atol);

/* Gradient check of op type at the f64 inputs in (not modified in the end):
 * with random upstream gradients dY for the nout outputs, compares the
 * gradient of L = sum_j <dY_j, Y_j> with respect to every input whose bit
 * is set in wrt, computed by the op's gradient maker and the ops it emits,
 * against central differences. Returns the largest error
 * |a - n| / max(|a|, |n|, 1e-3) over all checked elements, and also keeps
 * the largest seen in the process (oc_worst_grad_error). */
double oc_grad_check(const char *type, vq_tensor *const *in, int nin, int nout,
                     const vq_attr *attrs, int nattrs, unsigned wrt, uint64_t *rng);
double oc_worst_grad_error(void);

#endif
