/* newton_sqrt: a loop whose length depends on the data, as a program.
 *
 * It builds a program that computes sqrt(a) for an f64 vector a of any
 * length by Newton's method, x <- 0.5 * (x + a / x) from x = a, inside a
 * `while` op that runs while some element still has |x*x - a| >= 1e-6
 * (at most 100 iterations), and counts the iterations in a second
 * loop-carried var:
 *
 *   block 0:  eps, one, zero, i0 = fill_constant    c0 = not_converged(a)
 *             x, iters = while(c0, X=[a, i0]) {body_block=1, max_iters=100}
 *   block 1:  bx2 = scale(bx + a / bx, 0.5)         bi2 = bi + one
 *             bc = not_converged(bx2)
 *
 * where not_converged(x) is sum(cast(|x*x - a| >= eps, f64)) > zero: there
 * is no max reduction, so the predicate counts the elements that are not
 * there yet. The body reads one, eps and zero from block 0 without the
 * while listing them (a it does list: it is the first x); the executor
 * makes them inputs of the while, and `varq dump` shows them on its
 * "# reads also:" line.
 *
 * It saves the program (argv[1], default newton.pb) so that the command-line
 * tool can run it:
 *
 *   varq run newton.pb --feed a=a.npy --fetch x --fetch iters
 *
 * then runs it once itself on a = [2, 9, 1e-4, 12345], prints x and the
 * iteration count, and checks them against the same loop written in C.
 * Exit status 0 when they agree. */
#include <varq/varq.h>

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(call)                                                                        \
    do {                                                                                   \
        int rc_ = (call);                                                                  \
        if (rc_ < 0) {                                                                     \
            fprintf(stderr, "newton_sqrt: %s: %s\n", #call, vq_errmsg());                  \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

#define NAMES(...) ((const char *const[]){__VA_ARGS__})

#define EPS 1e-6
#define MAX_ITERS 100

static const int64_t any_length[1] = {-1};

static void f64_var(vq_program *p, int block, const char *name, int ndim)
{
    CHECK(vq_program_add_var(p, block, name, VQ_F64, ndim, any_length, false));
}

static void op(vq_program *p, int block, const char *type, const char *const *in, int nin,
               const char *out, const vq_attr *attrs, int nattrs)
{
    CHECK(vq_program_add_op(p, block, type, in, nin, &out, 1, attrs, nattrs));
}

static void scalar_constant(vq_program *p, const char *name, vq_dtype dt, double value)
{
    CHECK(vq_program_add_var(p, 0, name, dt, 0, NULL, false));
    vq_attr a[] = {VQ_ATTR_IS("shape", NULL, 0), VQ_ATTR_S("dtype", vq_dtype_name(dt)),
                   VQ_ATTR_F("value", value)};
    op(p, 0, "fill_constant", NULL, 0, name, a, 3);
}

/* Appends to block the ops of `name = any(|x*x - a| >= eps)`; the vars in
 * between are named name_sq, name_err, ... (names are program-wide). */
static void not_converged(vq_program *p, int block, const char *x, const char *name)
{
    char sq[32], diff[32], err[32], far[32], farf[32], count[32];
    snprintf(sq, sizeof sq, "%s_sq", name);
    snprintf(diff, sizeof diff, "%s_diff", name);
    snprintf(err, sizeof err, "%s_err", name);
    snprintf(far, sizeof far, "%s_far", name);
    snprintf(farf, sizeof farf, "%s_far_f64", name);
    snprintf(count, sizeof count, "%s_count", name);
    f64_var(p, block, sq, 1);
    f64_var(p, block, diff, 1);
    f64_var(p, block, err, 1);
    CHECK(vq_program_add_var(p, block, far, VQ_BOOL, 1, any_length, false));
    f64_var(p, block, farf, 1);
    f64_var(p, block, count, 0);
    CHECK(vq_program_add_var(p, block, name, VQ_BOOL, 0, NULL, false));
    op(p, block, "mul", NAMES(x, x), 2, sq, NULL, 0);
    op(p, block, "sub", NAMES(sq, "a"), 2, diff, NULL, 0);
    op(p, block, "abs", NAMES(diff), 1, err, NULL, 0);
    op(p, block, "greater_equal", NAMES(err, "eps"), 2, far, NULL, 0);
    vq_attr f64 = VQ_ATTR_S("dtype", "f64");
    op(p, block, "cast", NAMES(far), 1, farf, &f64, 1);
    op(p, block, "sum", NAMES(farf), 1, count, NULL, 0);
    op(p, block, "greater", NAMES(count, "zero"), 2, name, NULL, 0);
}

static vq_program *build(void)
{
    vq_program *p;
    CHECK(vq_program_new(&p));
    f64_var(p, 0, "a", 1);
    f64_var(p, 0, "x", 1);
    CHECK(vq_program_add_var(p, 0, "iters", VQ_I64, 0, NULL, false));
    scalar_constant(p, "eps", VQ_F64, EPS);
    scalar_constant(p, "zero", VQ_F64, 0);
    scalar_constant(p, "one", VQ_I64, 1);
    scalar_constant(p, "i0", VQ_I64, 0);
    not_converged(p, 0, "a", "c0");

    int body = vq_program_add_block(p, 0);
    CHECK(body);
    f64_var(p, body, "bx", 1);
    f64_var(p, body, "q", 1);
    f64_var(p, body, "s", 1);
    f64_var(p, body, "bx2", 1);
    CHECK(vq_program_add_var(p, body, "bi", VQ_I64, 0, NULL, false));
    CHECK(vq_program_add_var(p, body, "bi2", VQ_I64, 0, NULL, false));
    op(p, body, "div", NAMES("a", "bx"), 2, "q", NULL, 0);
    op(p, body, "add", NAMES("bx", "q"), 2, "s", NULL, 0);
    vq_attr half = VQ_ATTR_F("scale", 0.5);
    op(p, body, "scale", NAMES("s"), 1, "bx2", &half, 1);
    op(p, body, "add", NAMES("bi", "one"), 2, "bi2", NULL, 0);
    not_converged(p, body, "bx2", "bc");

    vq_attr w[] = {VQ_ATTR_I("body_block", body), VQ_ATTR_SS("body_inputs", NAMES("bx", "bi"), 2),
                   VQ_ATTR_SS("body_outputs", NAMES("bx2", "bi2"), 2),
                   VQ_ATTR_S("body_cond", "bc"), VQ_ATTR_I("max_iters", MAX_ITERS)};
    CHECK(vq_program_add_op(p, 0, "while", NAMES("c0", "a", "i0"), 3, NAMES("x", "iters"), 2, w,
                            5));
    return p;
}

/* The same loop in C, on the same doubles: the iteration count, x in x[]. */
static int64_t newton_ref(const double *a, double *x, int n)
{
    for (int j = 0; j < n; j++)
        x[j] = a[j];
    int64_t it = 0;
    for (;;) {
        bool far = false;
        for (int j = 0; j < n; j++)
            far |= fabs(x[j] * x[j] - a[j]) >= EPS;
        if (!far || it == MAX_ITERS)
            return it;
        for (int j = 0; j < n; j++)
            x[j] = (x[j] + a[j] / x[j]) * 0.5;
        it++;
    }
}

static void print_vec(const char *name, const double *v, int n)
{
    printf("%-6s= [", name);
    for (int j = 0; j < n; j++)
        printf("%s%.17g", j ? ", " : "", v[j]);
    printf("]\n");
}

int main(int argc, char **argv)
{
    const char *path = argc > 1 ? argv[1] : "newton.pb";
    vq_program *p = build();
    CHECK(vq_program_save(p, path));
    printf("saved the program to %s\n", path);

    enum { N = 4 };
    const double a[N] = {2, 9, 1e-4, 12345};
    vq_engine *e;
    vq_exec *ex;
    vq_scope *s;
    CHECK(vq_engine_new(&e, NULL));
    CHECK(vq_exec_new(&ex, e, NULL));
    CHECK(vq_scope_new(&s));
    vq_tensor *ta;
    CHECK(vq_tensor_from(&ta, VQ_F64, 1, (const int64_t[]){N}, a));
    vq_feed feed = {"a", ta};
    vq_fetch fetches[] = {{"x", NULL}, {"iters", NULL}};
    CHECK(vq_exec_run(ex, p, s, &feed, 1, fetches, 2));
    const double *x = vq_tensor_data(fetches[0].tensor);
    int64_t iters = *(const int64_t *)vq_tensor_data(fetches[1].tensor);

    double want[N], roots[N];
    int64_t want_iters = newton_ref(a, want, N);
    bool same = iters == want_iters;
    for (int j = 0; j < N; j++) {
        roots[j] = sqrt(a[j]);
        same &= x[j] == want[j];
    }
    print_vec("a", a, N);
    print_vec("x", x, N);
    print_vec("sqrt", roots, N);
    printf("iterations: %lld (the loop in C: %lld); %s\n", (long long)iters,
           (long long)want_iters, same ? "x matches it bit for bit" : "x DIFFERS from it");

    vq_tensor_release(fetches[0].tensor);
    vq_tensor_release(fetches[1].tensor);
    vq_tensor_release(ta);
    vq_scope_free(s);
    vq_exec_free(ex);
    vq_engine_free(e);
    vq_program_free(p);
    return same ? 0 : 1;
}
