/* fill_constant, uniform_random and gaussian_random: values, the counter-
 * based contract (element i depends on (seed, i) alone, so on no engine or
 * worker count), moments of the distributions, Philox's known answer, and
 * attribute errors. */
#include "opcheck.h"

#include "../ops/internal.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

TestSuite(ops_init);

#define BIG (1 << 16)

static vq_tensor *fill(const char *type, const vq_attr *at, int n)
{
    return oc_run1(type, NULL, 0, at, n);
}

static void expect_error(const char *type, const vq_attr *at, int n, const char *msg)
{
    cr_assert_eq(oc_try(type, NULL, 0, 1, at, n), VQ_EINVAL, "%s: expected \"%s\"", type, msg);
    cr_assert(strstr(vq_errmsg(), msg), "got \"%s\", expected \"%s\"", vq_errmsg(), msg);
}

Test(ops_init, fill_constant_fills_every_dtype)
{
    int64_t s[2] = {2, 3};
    struct {
        const char *dtype;
        vq_attr value;
        double want;
    } cases[] = {
        {"f32", VQ_ATTR_F("value", 2.5), 2.5},
        {"float64", VQ_ATTR_F("value", -1.25), -1.25},
        {"i32", VQ_ATTR_F("value", -7), -7},
        {"i64", VQ_ATTR_I("value", (int64_t)1 << 40), 1099511627776.0},
        {"bool", VQ_ATTR_I("value", 1), 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        vq_attr at[3] = {VQ_ATTR_IS("shape", s, 2), VQ_ATTR_S("dtype", cases[i].dtype),
                         cases[i].value};
        vq_tensor *o = fill("fill_constant", at, 3);
        double want[6];
        for (int j = 0; j < 6; j++)
            want[j] = cases[i].want;
        oc_assert_close(o, 2, s, want, 0, 0);
        vq_tensor_release(o);
    }
    /* i64 past 2^53 keeps every bit; the defaults are f32 zeros. */
    vq_attr big[3] = {VQ_ATTR_IS("shape", s, 1), VQ_ATTR_S("dtype", "i64"),
                      VQ_ATTR_I("value", INT64_MAX)};
    vq_tensor *o = fill("fill_constant", big, 3);
    cr_assert_eq(((int64_t *)vq_tensor_data(o))[1], INT64_MAX);
    vq_tensor_release(o);
    vq_attr dflt[1] = {VQ_ATTR_IS("shape", s, 2)};
    o = fill("fill_constant", dflt, 1);
    cr_assert_eq(vq_tensor_dtype(o), VQ_F32);
    oc_assert_close(o, 2, s, (double[]){0, 0, 0, 0, 0, 0}, 0, 0);
    vq_tensor_release(o);
}

Test(ops_init, fill_constant_makes_scalars_and_empty_tensors)
{
    vq_attr scalar[2] = {VQ_ATTR_IS("shape", NULL, 0), VQ_ATTR_F("value", 3)};
    vq_tensor *o = fill("fill_constant", scalar, 2);
    oc_assert_close(o, 0, NULL, (double[]){3}, 0, 0);
    vq_tensor_release(o);
    int64_t s[2] = {0, 4};
    vq_attr empty[2] = {VQ_ATTR_IS("shape", s, 2), VQ_ATTR_F("value", 3)};
    o = fill("fill_constant", empty, 2);
    cr_assert_eq(vq_tensor_numel(o), 0);
    vq_tensor_release(o);
    vq_attr rnd[1] = {VQ_ATTR_IS("shape", s, 2)};
    o = fill("gaussian_random", rnd, 1);
    cr_assert_eq(vq_tensor_numel(o), 0);
    vq_tensor_release(o);
}

Test(ops_init, fill_constant_rejects_values_the_dtype_cannot_hold)
{
    int64_t s[2] = {2, 3}, neg[2] = {2, -2};
    vq_attr at[3] = {VQ_ATTR_IS("shape", s, 2), VQ_ATTR_S("dtype", "i32"), VQ_ATTR_F("value", 2.5)};
    expect_error("fill_constant", at, 3, "fill_constant: attribute value: 2.5 does not fit i32");
    at[2] = VQ_ATTR_F("value", 3e9);
    expect_error("fill_constant", at, 3, "fill_constant: attribute value: 3000000000 does not fit i32");
    at[2] = VQ_ATTR_I("value", (int64_t)1 << 31);
    expect_error("fill_constant", at, 3, "fill_constant: attribute value: 2147483648 does not fit i32");
    at[2] = VQ_ATTR_F("value", NAN);
    expect_error("fill_constant", at, 3, "fill_constant: attribute value: nan does not fit i32");
    at[1] = VQ_ATTR_S("dtype", "i64");
    at[2] = VQ_ATTR_F("value", 9223372036854775808.0);
    expect_error("fill_constant", at, 3, "fill_constant: attribute value: 9.2233720368547758e+18 "
                                         "does not fit i64");
    at[1] = VQ_ATTR_S("dtype", "bool");
    at[2] = VQ_ATTR_I("value", 2);
    expect_error("fill_constant", at, 3, "fill_constant: attribute value: 2 does not fit bool");
    at[1] = VQ_ATTR_S("dtype", "f32");
    at[2] = VQ_ATTR_F("value", 1e300);
    expect_error("fill_constant", at, 3, "fill_constant: attribute value: 1e+300 is out of f32");
    at[1] = VQ_ATTR_S("dtype", "f16");
    expect_error("fill_constant", at, 3, "fill_constant: attribute dtype: unknown dtype \"f16\"");
    at[0] = VQ_ATTR_IS("shape", neg, 2);
    expect_error("fill_constant", at, 1, "fill_constant: attribute shape: dim 1 is -2");
    expect_error("fill_constant", NULL, 0, "fill_constant: attribute shape (ints) is required");
}

/* Random123's kat_vectors: philox4x32 10 with counter {0,0,0,0}, key {0,0}. */
Test(ops_init, philox_matches_the_random123_known_answer)
{
    uint32_t w[4];
    vq__philox(0, 0, w);
    const uint32_t want[4] = {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8};
    for (int i = 0; i < 4; i++)
        cr_assert_eq(w[i], want[i], "word %d is %08x, expected %08x", i, w[i], want[i]);
}

static vq_tensor *random_fill(vq_engine *e, const char *type, const char *dtype, int64_t n,
                              int64_t seed)
{
    vq_attr at[3] = {VQ_ATTR_IS("shape", &n, 1), VQ_ATTR_S("dtype", dtype),
                     VQ_ATTR_I("seed", seed)};
    vq_tensor *o = NULL;
    cr_assert_eq(vq_op_run(e, type, NULL, 0, &o, 1, at, 3), 0, "%s", vq_errmsg());
    return o;
}

static bool same_bits(vq_tensor *a, vq_tensor *b)
{
    return vq_tensor_nbytes(a) == vq_tensor_nbytes(b) &&
           !memcmp(vq_tensor_data(a), vq_tensor_data(b), vq_tensor_nbytes(a));
}

static const char *const types[2] = {"uniform_random", "gaussian_random"};
static const char *const dtypes[2] = {"f32", "f64"};

Test(ops_init, the_same_seed_gives_the_same_bits)
{
    for (int t = 0; t < 2; t++)
        for (int d = 0; d < 2; d++) {
            vq_tensor *a = random_fill(NULL, types[t], dtypes[d], 1000, 42);
            vq_tensor *b = random_fill(NULL, types[t], dtypes[d], 1000, 42);
            cr_assert(same_bits(a, b), "%s %s", types[t], dtypes[d]);
            vq_tensor_release(a);
            vq_tensor_release(b);
        }
}

Test(ops_init, different_seeds_give_different_values)
{
    for (int t = 0; t < 2; t++)
        for (int d = 0; d < 2; d++) {
            vq_tensor *a = random_fill(NULL, types[t], dtypes[d], 1000, 1);
            vq_tensor *b = random_fill(NULL, types[t], dtypes[d], 1000, 2);
            int equal = 0;
            for (int64_t i = 0; i < 1000; i++)
                equal += oc_get(a, i) == oc_get(b, i);
            cr_assert_lt(equal, 5, "%s %s: %d of 1000 equal", types[t], dtypes[d], equal);
            vq_tensor_release(a);
            vq_tensor_release(b);
        }
}

/* The documented formulas, from vq__philox directly; a shorter tensor is a
 * prefix of a longer one. */
Test(ops_init, element_i_depends_on_seed_and_i_alone)
{
    vq_tensor *f32 = random_fill(NULL, "uniform_random", "f32", 100, 7);
    vq_tensor *f64 = random_fill(NULL, "uniform_random", "f64", 100, 7);
    vq_tensor *g = random_fill(NULL, "gaussian_random", "f64", 100, 7);
    vq_tensor *g10 = random_fill(NULL, "gaussian_random", "f64", 10, 7);
    for (int64_t i = 0; i < 100; i++) {
        uint32_t w[4];
        vq__philox((uint64_t)i, 7, w);
        double u = (double)(w[0] >> 8) * 0x1p-24;
        cr_assert_eq(((float *)vq_tensor_data(f32))[i], (float)(-1.0 + 2.0 * u));
        u = (double)((((uint64_t)w[0] << 32) | w[1]) >> 11) * 0x1p-53;
        cr_assert_eq(((double *)vq_tensor_data(f64))[i], -1.0 + 2.0 * u);
        double u1 = (double)(((((uint64_t)w[0] << 32) | w[1]) >> 11) + 1) * 0x1p-53;
        double u2 = (double)((((uint64_t)w[2] << 32) | w[3]) >> 11) * 0x1p-53;
        double z = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
        cr_assert_eq(((double *)vq_tensor_data(g))[i], z, "element %lld", (long long)i);
    }
    cr_assert_eq(memcmp(vq_tensor_data(g), vq_tensor_data(g10), 10 * sizeof(double)), 0);
    vq_tensor_release(f32);
    vq_tensor_release(f64);
    vq_tensor_release(g);
    vq_tensor_release(g10);
}

Test(ops_init, values_do_not_depend_on_the_engine_or_worker_count, .timeout = 120)
{
    enum { NFILL = 8 };
    vq_tensor *want[NFILL];
    for (int i = 0; i < NFILL; i++)
        want[i] = random_fill(NULL, types[i & 1], dtypes[(i >> 1) & 1], BIG, 1000 + i);
    struct {
        int kind, workers;
    } engines[] = {
        {VQ_ENGINE_THREADED, 1},
        {VQ_ENGINE_THREADED, 2},
        {VQ_ENGINE_THREADED, 8},
        {VQ_ENGINE_NAIVE, 1},
    };
    for (size_t k = 0; k < sizeof engines / sizeof engines[0]; k++) {
        vq_engine *e;
        vq_engine_opts opts = {.kind = engines[k].kind, .cpu_workers = engines[k].workers};
        cr_assert_eq(vq_engine_new(&e, &opts), 0, "%s", vq_errmsg());
        vq_tensor *got[NFILL];
        for (int i = 0; i < NFILL; i++)
            got[i] = random_fill(e, types[i & 1], dtypes[(i >> 1) & 1], BIG, 1000 + i);
        for (int i = 0; i < NFILL; i++) {
            cr_assert_eq(vq_tensor_wait(got[i]), 0, "%s", vq_errmsg());
            cr_assert(same_bits(got[i], want[i]), "engine %zu, fill %d differs", k, i);
            vq_tensor_release(got[i]);
        }
        vq_engine_free(e);
    }
    for (int i = 0; i < NFILL; i++)
        vq_tensor_release(want[i]);
}

static void moments(vq_tensor *t, double *mean, double *var, double *lo, double *hi)
{
    int64_t n = vq_tensor_numel(t);
    double s = 0, s2 = 0;
    *lo = INFINITY;
    *hi = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
        double v = oc_get(t, i);
        s += v;
        *lo = fmin(*lo, v);
        *hi = fmax(*hi, v);
    }
    *mean = s / (double)n;
    for (int64_t i = 0; i < n; i++)
        s2 += (oc_get(t, i) - *mean) * (oc_get(t, i) - *mean);
    *var = s2 / (double)(n - 1);
}

Test(ops_init, uniform_samples_have_the_expected_mean_and_variance)
{
    int64_t n = BIG;
    for (int d = 0; d < 2; d++) {
        vq_attr at[5] = {VQ_ATTR_IS("shape", &n, 1), VQ_ATTR_S("dtype", dtypes[d]),
                         VQ_ATTR_F("min", 2), VQ_ATTR_F("max", 5), VQ_ATTR_I("seed", 11)};
        vq_tensor *o = fill("uniform_random", at, 5);
        double mean, var, lo, hi;
        moments(o, &mean, &var, &lo, &hi);
        /* mean 3.5 (sd of the estimate 0.0034), variance 9/12 = 0.75 */
        cr_assert(fabs(mean - 3.5) < 0.02, "%s: mean %g", dtypes[d], mean);
        cr_assert(fabs(var - 0.75) < 0.03, "%s: variance %g", dtypes[d], var);
        cr_assert(lo >= 2 && hi <= 5, "%s: values in [%g, %g]", dtypes[d], lo, hi);
        cr_assert(lo < 2.01 && hi > 4.99, "%s: values in [%g, %g]", dtypes[d], lo, hi);
        vq_tensor_release(o);
    }
}

Test(ops_init, gaussian_samples_have_the_expected_mean_and_variance)
{
    int64_t n = BIG;
    for (int d = 0; d < 2; d++) {
        vq_attr at[5] = {VQ_ATTR_IS("shape", &n, 1), VQ_ATTR_S("dtype", dtypes[d]),
                         VQ_ATTR_F("mean", 1), VQ_ATTR_F("std", 2), VQ_ATTR_I("seed", 12)};
        vq_tensor *o = fill("gaussian_random", at, 5);
        double mean, var, lo, hi;
        moments(o, &mean, &var, &lo, &hi);
        /* mean 1 (sd of the estimate 0.008), variance 4 (sd 0.022) */
        cr_assert(fabs(mean - 1) < 0.05, "%s: mean %g", dtypes[d], mean);
        cr_assert(fabs(var - 4) < 0.15, "%s: variance %g", dtypes[d], var);
        cr_assert(lo > 1 - 2 * 8.6 && hi < 1 + 2 * 8.6, "%s: values in [%g, %g]", dtypes[d], lo,
                  hi);
        int64_t within = 0;
        for (int64_t i = 0; i < n; i++)
            within += fabs(oc_get(o, i) - 1) < 2;
        /* 68.27% within one sd */
        cr_assert(fabs((double)within / (double)n - 0.6827) < 0.01, "%s: %lld within 1 sd",
                  dtypes[d], (long long)within);
        vq_tensor_release(o);
    }
}

Test(ops_init, bad_random_attributes_name_the_op_and_attribute)
{
    int64_t s[1] = {4};
    vq_attr at[2] = {VQ_ATTR_IS("shape", s, 1), VQ_ATTR_I("seed", -1)};
    expect_error("uniform_random", at, 2, "uniform_random: attribute seed: is -1");
    expect_error("gaussian_random", at, 2, "gaussian_random: attribute seed: is -1");
    at[1] = VQ_ATTR_F("std", -0.5);
    expect_error("gaussian_random", at, 2, "gaussian_random: attribute std: is -0.5");
    at[1] = VQ_ATTR_F("mean", INFINITY);
    expect_error("gaussian_random", at, 2, "gaussian_random: attribute mean: is inf");
    at[1] = VQ_ATTR_F("max", -1);
    expect_error("uniform_random", at, 2, "uniform_random: attribute max: -1 is not above min -1");
    at[1] = VQ_ATTR_S("dtype", "i32");
    expect_error("uniform_random", at, 2, "uniform_random: attribute dtype: i32 is not f32 or f64");
    at[1] = VQ_ATTR_S("seed", "x");
    expect_error("uniform_random", at, 2, "uniform_random: attribute seed: expected int, got string");
    expect_error("gaussian_random", NULL, 0, "gaussian_random: attribute shape (ints) is required");
}

Test(ops_init, init_ops_have_no_inputs_and_no_gradient)
{
    const char *ops[3] = {"fill_constant", "uniform_random", "gaussian_random"};
    for (int i = 0; i < 3; i++) {
        const vq__op_def *d = vq__op_find(ops[i]);
        cr_assert(d, "%s", ops[i]);
        cr_assert_eq(d->nin_slots, 0);
        cr_assert_null(d->grad);
    }
}

Test(ops_init, zeros_like_gives_zeros_of_the_input_shape_whatever_its_values)
{
    const vq_dtype dts[] = {VQ_F32, VQ_F64, VQ_I32, VQ_I64, VQ_BOOL};
    int64_t s[3] = {2, 0, 3}, s2[2] = {3, 4};
    for (int d = 0; d < 5; d++) {
        double vals[12];
        for (int i = 0; i < 12; i++)
            vals[i] = i % 3 == 0 ? 1 : i % 3 == 1 ? -5 : 2;
        vq_tensor *x = oc_from(dts[d], 2, s2, vals);
        if (dts[d] == VQ_F64) { /* inf and NaN give 0 too */
            ((double *)vq_tensor_data(x))[0] = INFINITY;
            ((double *)vq_tensor_data(x))[1] = NAN;
        }
        vq_tensor *o = oc_run1("zeros_like", &x, 1, NULL, 0);
        cr_assert_eq(vq_tensor_dtype(o), dts[d]);
        cr_assert_eq(vq_tensor_ndim(o), 2);
        cr_assert_eq(vq_tensor_shape(o)[1], 4);
        const unsigned char *b = vq_tensor_data(o);
        for (size_t i = 0; i < vq_tensor_nbytes(o); i++)
            cr_assert_eq(b[i], 0, "%s byte %zu", vq_dtype_name(dts[d]), i);
        vq_tensor_release(o);
        vq_tensor_release(x);
    }
    vq_tensor *e = oc_from(VQ_F32, 3, s, NULL), *o = oc_run1("zeros_like", &e, 1, NULL, 0);
    cr_assert_eq(vq_tensor_numel(o), 0);
    vq_tensor_release(o);
    vq_tensor_release(e);
}
