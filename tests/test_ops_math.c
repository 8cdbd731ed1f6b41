/* exp, log, sqrt, reciprocal, erf, power, sin ... atanh, floor, ceil, round, math_grad, log_softmax and
 * log_softmax_grad against plain loops in f32 and f64, their gradients
 * against finite differences, and bad calls. */
#include "opcheck.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "leakcheck.h"

static uint64_t rng;

static void setup(void)
{
    rng = oc_seed("ops_math");
}

TestSuite(ops_math, .init = setup, .fini = leak_check);

struct shape {
    int ndim;
    int64_t d[4];
};

static const struct shape shapes[] = {
    {2, {3, 4}}, {1, {0}}, {1, {1}}, {0, {0}}, {3, {2, 3, 2}}, {4, {2, 1, 3, 2}},
};
#define NSHAPES (sizeof shapes / sizeof shapes[0])

static const vq_dtype floats[] = {VQ_F32, VQ_F64};

/* One op with its reference, the range its input is drawn from, and the
 * exponent for power. */
struct op {
    const char *name;
    double lo, hi, exponent;
};

static const struct op ops[] = {
    {"exp", -4, 4, 0},         {"log", 0.05, 5, 0},     {"sqrt", 0.05, 5, 0},
    {"reciprocal", 0.2, 3, 0}, {"erf", -3, 3, 0},       {"power", 0.1, 3, 2},
    {"power", 0.1, 3, 0.5},    {"power", 0.1, 3, -1.5}, {"power", -2, 2, 3},
    {"sin", -4, 4, 0},         {"cos", -4, 4, 0},       {"tan", -1.2, 1.2, 0},
    {"asin", -0.9, 0.9, 0},    {"acos", -0.9, 0.9, 0},  {"atan", -4, 4, 0},
    {"sinh", -3, 3, 0},        {"cosh", -3, 3, 0},      {"asinh", -4, 4, 0},
    {"acosh", 1.1, 5, 0},      {"atanh", -0.9, 0.9, 0}, {"floor", -5, 5, 0},
    {"ceil", -5, 5, 0},        {"round", -5, 5, 0},
};

/* functions whose derivative is zero between steps: no finite differences */
static bool stepwise(const struct op *o)
{
    return !strcmp(o->name, "floor") || !strcmp(o->name, "ceil") || !strcmp(o->name, "round");
}
#define NOPS (sizeof ops / sizeof ops[0])

static double ref(const struct op *o, double x)
{
    if (!strcmp(o->name, "exp"))
        return exp(x);
    if (!strcmp(o->name, "log"))
        return log(x);
    if (!strcmp(o->name, "sqrt"))
        return sqrt(x);
    if (!strcmp(o->name, "reciprocal"))
        return 1 / x;
    if (!strcmp(o->name, "erf"))
        return erf(x);
    static const struct {
        const char *name;
        double (*f)(double);
    } libm[] = {{"sin", sin},     {"cos", cos},        {"tan", tan},     {"asin", asin},
                {"acos", acos},   {"atan", atan},      {"sinh", sinh},   {"cosh", cosh},
                {"asinh", asinh}, {"acosh", acosh},    {"atanh", atanh}, {"floor", floor},
                {"ceil", ceil},   {"round", nearbyint}};
    for (size_t i = 0; i < sizeof libm / sizeof libm[0]; i++)
        if (!strcmp(o->name, libm[i].name))
            return libm[i].f(x);
    return pow(x, o->exponent);
}

static double dref(const struct op *o, double x)
{
    if (!strcmp(o->name, "exp"))
        return exp(x);
    if (!strcmp(o->name, "log"))
        return 1 / x;
    if (!strcmp(o->name, "sqrt"))
        return 0.5 / sqrt(x);
    if (!strcmp(o->name, "reciprocal"))
        return -1 / (x * x);
    if (!strcmp(o->name, "erf"))
        return 2 / sqrt(M_PI) * exp(-x * x);
    if (!strcmp(o->name, "sin"))
        return cos(x);
    if (!strcmp(o->name, "cos"))
        return -sin(x);
    if (!strcmp(o->name, "tan"))
        return 1 + tan(x) * tan(x);
    if (!strcmp(o->name, "asin"))
        return 1 / sqrt(1 - x * x);
    if (!strcmp(o->name, "acos"))
        return -1 / sqrt(1 - x * x);
    if (!strcmp(o->name, "atan"))
        return 1 / (1 + x * x);
    if (!strcmp(o->name, "sinh"))
        return cosh(x);
    if (!strcmp(o->name, "cosh"))
        return sinh(x);
    if (!strcmp(o->name, "asinh"))
        return 1 / sqrt(x * x + 1);
    if (!strcmp(o->name, "acosh"))
        return 1 / sqrt(x * x - 1);
    if (!strcmp(o->name, "atanh"))
        return 1 / (1 - x * x);
    if (stepwise(o))
        return 0;
    return o->exponent * pow(x, o->exponent - 1);
}

static int attrs_of(const struct op *o, vq_attr *a)
{
    if (strcmp(o->name, "power"))
        return 0;
    *a = VQ_ATTR_F("exponent", o->exponent);
    return 1;
}

Test(ops_math, every_op_matches_its_formula_in_f32_and_f64)
{
    for (size_t k = 0; k < NOPS; k++)
        for (int d = 0; d < 2; d++)
            for (size_t s = 0; s < NSHAPES; s++) {
                const struct shape *sh = &shapes[s];
                vq_tensor *x = oc_rand(&rng, floats[d], sh->ndim, sh->d, ops[k].lo, ops[k].hi);
                vq_attr a;
                int na = attrs_of(&ops[k], &a);
                vq_tensor *y = oc_run1(ops[k].name, &x, 1, &a, na);
                int64_t n = vq_tensor_numel(x);
                double *want = malloc((size_t)(n ? n : 1) * sizeof *want);
                for (int64_t i = 0; i < n; i++)
                    want[i] = ref(&ops[k], oc_get(x, i));
                oc_assert_close(y, sh->ndim, sh->d, want, floats[d] == VQ_F32 ? 2e-6 : 1e-14,
                                1e-30);
                cr_assert_eq(vq_tensor_dtype(y), floats[d]);
                free(want);
                vq_tensor_release(y);
                vq_tensor_release(x);
            }
}

Test(ops_math, math_grad_matches_the_derivative)
{
    for (size_t k = 0; k < NOPS; k++)
        for (int d = 0; d < 2; d++) {
            const int64_t sh[2] = {4, 5};
            vq_tensor *x = oc_rand(&rng, floats[d], 2, sh, ops[k].lo, ops[k].hi);
            vq_attr a;
            int na = attrs_of(&ops[k], &a);
            vq_tensor *y = oc_run1(ops[k].name, &x, 1, &a, na);
            vq_tensor *g = oc_rand(&rng, floats[d], 2, sh, -2, 2);
            vq_attr ga[2] = {VQ_ATTR_S("op", ops[k].name), VQ_ATTR_F("exponent", ops[k].exponent)};
            vq_tensor *in[3] = {x, y, g};
            vq_tensor *dx = oc_run1("math_grad", in, 3, ga, 2);
            double want[20];
            for (int i = 0; i < 20; i++)
                want[i] = oc_get(g, i) * dref(&ops[k], oc_get(x, i));
            oc_assert_close(dx, 2, sh, want, floats[d] == VQ_F32 ? 1e-5 : 1e-13, 1e-30);
            vq_tensor_release(dx);
            vq_tensor_release(g);
            vq_tensor_release(y);
            vq_tensor_release(x);
        }
}

Test(ops_math, gradients_match_finite_differences)
{
    for (size_t k = 0; k < NOPS; k++)
        for (size_t s = 0; s < NSHAPES && !stepwise(&ops[k]); s++) {
            vq_tensor *x = oc_rand(&rng, VQ_F64, shapes[s].ndim, shapes[s].d, ops[k].lo,
                                   ops[k].hi);
            vq_attr a;
            int na = attrs_of(&ops[k], &a);
            oc_grad_check(ops[k].name, &x, 1, 1, &a, na, 1, &rng);
            vq_tensor_release(x);
        }
    for (size_t s = 0; s < NSHAPES; s++)
        for (int axis = 0; axis < shapes[s].ndim; axis++) {
            vq_tensor *x = oc_rand(&rng, VQ_F64, shapes[s].ndim, shapes[s].d, -3, 3);
            vq_attr at = VQ_ATTR_I("axis", axis);
            oc_grad_check("log_softmax", &x, 1, 1, &at, 1, 1, &rng);
            vq_tensor_release(x);
        }
}

Test(ops_math, log_softmax_equals_the_log_of_softmax_on_every_axis)
{
    for (int d = 0; d < 2; d++)
        for (size_t s = 0; s < NSHAPES; s++)
            for (int axis = -1; axis < shapes[s].ndim; axis++) {
                const struct shape *sh = &shapes[s];
                if (sh->ndim == 0)
                    continue;
                vq_tensor *x = oc_rand(&rng, floats[d], sh->ndim, sh->d, -20, 20);
                vq_attr at = VQ_ATTR_I("axis", axis);
                vq_tensor *y = oc_run1("log_softmax", &x, 1, &at, 1);
                int ax = axis < 0 ? sh->ndim - 1 : axis;
                int64_t outer = 1, len = sh->d[ax], inner = 1;
                for (int i = 0; i < ax; i++)
                    outer *= sh->d[i];
                for (int i = ax + 1; i < sh->ndim; i++)
                    inner *= sh->d[i];
                int64_t n = vq_tensor_numel(x);
                double *want = malloc((size_t)(n ? n : 1) * sizeof *want);
                for (int64_t a = 0; a < outer; a++)
                    for (int64_t b = 0; b < inner; b++) {
                        double mx = -INFINITY, sum = 0;
                        for (int64_t j = 0; j < len; j++)
                            mx = fmax(mx, oc_get(x, (a * len + j) * inner + b));
                        for (int64_t j = 0; j < len; j++)
                            sum += exp(oc_get(x, (a * len + j) * inner + b) - mx);
                        for (int64_t j = 0; j < len; j++) {
                            int64_t i = (a * len + j) * inner + b;
                            want[i] = oc_get(x, i) - mx - log(sum);
                        }
                    }
                oc_assert_close(y, sh->ndim, sh->d, want, floats[d] == VQ_F32 ? 2e-6 : 1e-13,
                                1e-6);
                /* its gradient op, against the formula */
                vq_tensor *g = oc_rand(&rng, floats[d], sh->ndim, sh->d, -1, 1);
                vq_tensor *in[2] = {y, g};
                vq_tensor *dx = oc_run1("log_softmax_grad", in, 2, &at, 1);
                for (int64_t a = 0; a < outer; a++)
                    for (int64_t b = 0; b < inner; b++) {
                        double sum = 0;
                        for (int64_t j = 0; j < len; j++)
                            sum += oc_get(g, (a * len + j) * inner + b);
                        for (int64_t j = 0; j < len; j++) {
                            int64_t i = (a * len + j) * inner + b;
                            want[i] = oc_get(g, i) - exp(oc_get(y, i)) * sum;
                        }
                    }
                oc_assert_close(dx, sh->ndim, sh->d, want, floats[d] == VQ_F32 ? 1e-5 : 1e-12,
                                1e-6);
                free(want);
                vq_tensor_release(dx);
                vq_tensor_release(g);
                vq_tensor_release(y);
                vq_tensor_release(x);
            }
}

Test(ops_math, bad_calls_are_errors_naming_the_op)
{
    const int64_t s[1] = {3};
    vq_tensor *x = oc_rand(&rng, VQ_F32, 1, s, 1, 2), *i = oc_rand(&rng, VQ_I32, 1, s, 1, 2);
    cr_assert_eq(oc_try("power", &x, 1, 1, NULL, 0), VQ_EINVAL, "power needs its exponent");
    cr_assert(strstr(vq_errmsg(), "exponent"), "%s", vq_errmsg());
    cr_assert_eq(oc_try("exp", &i, 1, 1, NULL, 0), VQ_EINVAL, "integers");
    cr_assert(strstr(vq_errmsg(), "exp"), "%s", vq_errmsg());
    vq_tensor *in[3] = {x, x, x};
    vq_attr bad = VQ_ATTR_S("op", "cbrt");
    cr_assert_eq(oc_try("math_grad", in, 3, 1, &bad, 1), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "\"cbrt\" is not"), "%s", vq_errmsg());
    vq_tensor *scalar;
    cr_assert_eq(vq_tensor_new(&scalar, VQ_F32, 0, NULL), 0);
    cr_assert_eq(oc_try("log_softmax", &scalar, 1, 1, NULL, 0), VQ_EINVAL);
    vq_attr ax = VQ_ATTR_I("axis", 1);
    cr_assert_eq(oc_try("log_softmax", &x, 1, 1, &ax, 1), VQ_EINVAL);
    vq_tensor_release(scalar);
    vq_tensor_release(x);
    vq_tensor_release(i);
}
