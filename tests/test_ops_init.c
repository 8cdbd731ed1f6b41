/* fill_constant, uniform_random and gaussian_random: values, the counter-
 * based contract (element i depends on (seed, i) alone, so on no engine or
 * worker count), moments of the distributions, Philox's known answer, and
 * attribute errors. The generator state (State / StateOut: (seed,
 * counter) advanced by each op, ordered by the engine, the same on an
 * emulated GPU) and dropout (keep rule, scaling, inference mode, gradient,
 * errors). */
#include "opcheck.h"

#include "../ops/ops_internal.h"

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
    at[1] = VQ_ATTR_S("dtype", "f8");
    expect_error("fill_constant", at, 3, "fill_constant: attribute dtype: unknown dtype \"f8\"");
    at[0] = VQ_ATTR_IS("shape", neg, 2);
    expect_error("fill_constant", at, 1, "fill_constant: attribute shape: dim 1 is -2");
    expect_error("fill_constant", NULL, 0, "fill_constant: needs attribute shape or input Shape");
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

Test(ops_init, init_ops_have_no_inputs_but_the_state_and_no_gradient)
{
    const char *ops[3] = {"fill_constant", "uniform_random", "gaussian_random"};
    for (int i = 0; i < 3; i++) {
        const vq__op_def *d = vq__op_find(ops[i]);
        cr_assert(d, "%s", ops[i]);
        cr_assert_null(d->grad);
        if (i == 0) { /* the optional shape, read when the op runs */
            cr_assert_eq(d->nin_slots, 1);
            cr_assert_str_eq(d->in_slots[0], "Shape");
            cr_assert(d->flags & VQ__OPTIONAL_IN && d->value_in == 1u);
            continue;
        }
        /* The random fills' only input is the optional generator state. */
        cr_assert_eq(d->nin_slots, 1, "%s", ops[i]);
        cr_assert_str_eq(d->in_slots[0], "State");
        cr_assert_str_eq(d->out_slots[1], "StateOut");
        cr_assert(d->flags & VQ__OPTIONAL_IN && d->flags & VQ__OPTIONAL_OUT, "%s", ops[i]);
    }
    cr_assert_str_eq(vq_op_signature("dropout"),
                     "dropout(X, State?) -> Out, Mask, StateOut?; p:float=0.5 "
                     "is_test:bool=false seed:int=none");
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

/* ---- the generator state ---- */

static vq_tensor *state_new(int64_t seed, int64_t counter)
{
    vq_tensor *t = NULL;
    int64_t two = 2, v[2] = {seed, counter};
    cr_assert_eq(vq_tensor_from(&t, VQ_I64, 1, &two, v), 0, "%s", vq_errmsg());
    return t;
}

static void assert_state(vq_tensor *st, int64_t seed, int64_t counter)
{
    cr_assert_eq(vq_tensor_wait(st), 0, "%s", vq_errmsg());
    const int64_t *v = vq_tensor_data(st);
    cr_assert(v[0] == seed && v[1] == counter, "state (%lld, %lld), expected (%lld, %lld)",
              (long long)v[0], (long long)v[1], (long long)seed, (long long)counter);
}

/* type with n elements of dtype from State st, written back in place
 * (StateOut = st); on engine e when not NULL. */
static vq_tensor *random_from(vq_engine *e, const char *type, const char *dtype, int64_t n,
                              vq_tensor *st)
{
    vq_attr at[2] = {VQ_ATTR_IS("shape", &n, 1), VQ_ATTR_S("dtype", dtype)};
    vq_tensor *out[2] = {NULL, st};
    cr_assert_eq(vq_op_run(e, type, &st, 1, out, 2, at, 2), 0, "%s", vq_errmsg());
    return out[0];
}

Test(ops_init, state_seed_s_counter_0_gives_the_numbers_of_seed_s)
{
    for (int t = 0; t < 2; t++)
        for (int d = 0; d < 2; d++) {
            vq_tensor *st = state_new(42, 0);
            vq_tensor *a = random_from(NULL, types[t], dtypes[d], 1000, st);
            vq_tensor *b = random_fill(NULL, types[t], dtypes[d], 1000, 42);
            cr_assert(same_bits(a, b), "%s %s", types[t], dtypes[d]);
            assert_state(st, 42, 1000);
            vq_tensor_release(a);
            vq_tensor_release(b);
            vq_tensor_release(st);
        }
}

/* Two calls on one state: the second continues where the first stopped,
 * so together they are one longer draw, and they differ. */
Test(ops_init, consecutive_calls_on_a_state_draw_fresh_numbers)
{
    for (int t = 0; t < 2; t++)
        for (int d = 0; d < 2; d++) {
            vq_tensor *st = state_new(5, 0);
            vq_tensor *a = random_from(NULL, types[t], dtypes[d], 100, st);
            assert_state(st, 5, 100);
            vq_tensor *b = random_from(NULL, types[t], dtypes[d], 50, st);
            assert_state(st, 5, 150);
            vq_tensor *st0 = state_new(5, 0);
            vq_tensor *whole = random_from(NULL, types[t], dtypes[d], 150, st0);
            vq_tensor_release(st0);
            size_t es = vq_dtype_size(vq_tensor_dtype(a));
            const char *w = vq_tensor_data(whole);
            cr_assert_eq(memcmp(w, vq_tensor_data(a), 100 * es), 0, "%s %s", types[t], dtypes[d]);
            cr_assert_eq(memcmp(w + 100 * es, vq_tensor_data(b), 50 * es), 0, "%s %s", types[t],
                         dtypes[d]);
            int equal = 0;
            for (int64_t i = 0; i < 50; i++)
                equal += oc_get(a, i) == oc_get(b, i);
            cr_assert_lt(equal, 3, "%s %s: %d of 50 equal", types[t], dtypes[d], equal);
            vq_tensor_release(a);
            vq_tensor_release(b);
            vq_tensor_release(whole);
            vq_tensor_release(st);
        }
}

/* StateOut may be another tensor; State then stays as it was. The counter
 * is 64 bits that wrap. */
Test(ops_init, state_out_is_state_advanced_by_the_count_modulo_2_64)
{
    vq_tensor *st = state_new(-3, -10), *so = NULL;
    int64_t n = 7;
    vq_attr at[1] = {VQ_ATTR_IS("shape", &n, 1)};
    vq_tensor *out[2] = {NULL, NULL};
    cr_assert_eq(vq_op_run(NULL, "uniform_random", &st, 1, out, 2, at, 1), 0, "%s", vq_errmsg());
    so = out[1];
    assert_state(st, -3, -10);
    assert_state(so, -3, -3);
    /* key = the seed's 64 bits, counter (uint64_t)-10 + i */
    uint32_t w[4];
    vq__philox((uint64_t)-10 + 2, (uint64_t)-3, w);
    cr_assert_eq(((float *)vq_tensor_data(out[0]))[2],
                 (float)(-1.0 + 2.0 * ((double)(w[0] >> 8) * 0x1p-24)));
    vq_tensor_release(out[0]);
    vq_tensor_release(so);
    vq_tensor_release(st);
    /* An empty draw leaves the counter. */
    st = state_new(1, 9);
    n = 0;
    vq_tensor *e = random_from(NULL, "gaussian_random", "f64", 0, st);
    assert_state(st, 1, 9);
    vq_tensor_release(e);
    vq_tensor_release(st);
}

/* Random ops that share a state var are ordered by the engine (each reads
 * and writes it): whatever the worker count, each gets the numbers it
 * gets run one at a time in push order. */
Test(ops_init, ops_on_one_state_get_the_same_numbers_on_any_engine, .timeout = 120)
{
    enum { NOPS = 12, N = 4096 };
    vq_tensor *want[NOPS], *wst = state_new(77, 0);
    for (int i = 0; i < NOPS; i++)
        want[i] = random_from(NULL, types[i & 1], dtypes[(i >> 1) & 1], N + i, wst);
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
        vq_tensor *st = state_new(77, 0), *got[NOPS];
        for (int i = 0; i < NOPS; i++)
            got[i] = random_from(e, types[i & 1], dtypes[(i >> 1) & 1], N + i, st);
        for (int i = 0; i < NOPS; i++) {
            cr_assert_eq(vq_tensor_wait(got[i]), 0, "%s", vq_errmsg());
            cr_assert(same_bits(got[i], want[i]), "engine %zu, op %d differs", k, i);
            vq_tensor_release(got[i]);
        }
        assert_state(st, 77, NOPS * N + NOPS * (NOPS - 1) / 2);
        vq_tensor_release(st);
        vq_engine_free(e);
    }
    for (int i = 0; i < NOPS; i++)
        vq_tensor_release(want[i]);
    vq_tensor_release(wst);
}

static vq_tensor *copy_to(vq_engine *e, vq_tensor *t, vq_ctx dev)
{
    vq_tensor *o = NULL;
    cr_assert_eq(vq_tensor_copy_to(e, t, dev, &o), 0, "%s", vq_errmsg());
    return o;
}

/* The state lives on the GPU with the op: the kernel reads it there and
 * advances it there. On the emulated backend (the CUDA kernels run in
 * test_ops_gpu_kernels with VARQ_GPU_BACKEND=cuda). */
Test(ops_init, state_ops_on_an_emulated_gpu_match_the_cpu)
{
    setenv("VARQ_GPU_BACKEND", "emulated", 1);
    const vq_ctx cpu = {VQ_DEV_CPU, 0}, gpu = {VQ_DEV_GPU, 0};
    vq_engine_opts o = {.kind = VQ_ENGINE_THREADED, .cpu_workers = 2, .gpu_streams = 2};
    vq_engine *e;
    cr_assert_eq(vq_engine_new(&e, &o), 0, "%s", vq_errmsg());
    vq_tensor *cst = state_new(1234, 99), *hst = state_new(1234, 99);
    vq_tensor *gst = copy_to(e, hst, gpu);
    int64_t n = 3000;
    vq_tensor *x = NULL;
    cr_assert_eq(vq_tensor_new(&x, VQ_F32, 1, &n), 0, "%s", vq_errmsg());
    for (int64_t i = 0; i < n; i++)
        oc_set(x, i, (double)i - 1500);
    vq_tensor *gx = copy_to(e, x, gpu);
    for (int round = 0; round < 2; round++) {
        for (int t = 0; t < 2; t++)
            for (int d = 0; d < 2; d++) {
                vq_tensor *c = random_from(NULL, types[t], dtypes[d], n, cst);
                vq_tensor *g = random_from(e, types[t], dtypes[d], n, gst);
                vq_tensor *h = copy_to(e, g, cpu);
                cr_assert_eq(vq_tensor_wait(h), 0, "%s", vq_errmsg());
                cr_assert(same_bits(h, c), "round %d, %s %s differs", round, types[t], dtypes[d]);
                vq_tensor_release(c);
                vq_tensor_release(g);
                vq_tensor_release(h);
            }
        vq_attr p = VQ_ATTR_F("p", 0.25);
        vq_tensor *cout[3] = {NULL, NULL, cst}, *gout[3] = {NULL, NULL, gst};
        cr_assert_eq(vq_op_run(NULL, "dropout", (vq_tensor *[]){x, cst}, 2, cout, 3, &p, 1), 0,
                     "%s", vq_errmsg());
        cr_assert_eq(vq_op_run(e, "dropout", (vq_tensor *[]){gx, gst}, 2, gout, 3, &p, 1), 0,
                     "%s", vq_errmsg());
        for (int j = 0; j < 2; j++) {
            vq_tensor *h = copy_to(e, gout[j], cpu);
            cr_assert_eq(vq_tensor_wait(h), 0, "%s", vq_errmsg());
            cr_assert(same_bits(h, cout[j]), "round %d, dropout output %d differs", round, j);
            vq_tensor_release(h);
            vq_tensor_release(cout[j]);
            vq_tensor_release(gout[j]);
        }
    }
    vq_tensor *h = copy_to(e, gst, cpu);
    assert_state(h, 1234, 99 + 2 * 5 * n);
    assert_state(cst, 1234, 99 + 2 * 5 * n);
    vq_tensor_release(h);
    vq_tensor_release(gst);
    vq_tensor_release(gx);
    vq_tensor_release(x);
    vq_tensor_release(hst);
    vq_tensor_release(cst);
    cr_assert_eq(vq_wait_all(e), 0, "%s", vq_errmsg());
    vq_engine_free(e);
}

static void expect_state_error(const char *type, vq_tensor *const *in, int nin, int nout,
                               const vq_attr *at, int nat, const char *msg)
{
    cr_assert_eq(oc_try(type, in, nin, nout, at, nat), VQ_EINVAL, "%s: expected \"%s\"", type,
                 msg);
    cr_assert(strstr(vq_errmsg(), msg), "got \"%s\", expected \"%s\"", vq_errmsg(), msg);
}

Test(ops_init, bad_states_are_refused_naming_the_op_and_slot)
{
    int64_t n = 4, two = 2, three = 3;
    vq_attr at[2] = {VQ_ATTR_IS("shape", &n, 1), VQ_ATTR_I("seed", 3)};
    vq_tensor *good = state_new(1, 0), *f64 = NULL, *long3 = NULL, *scalar = NULL;
    cr_assert_eq(vq_tensor_new(&f64, VQ_F64, 1, &two), 0);
    cr_assert_eq(vq_tensor_new(&long3, VQ_I64, 1, &three), 0);
    cr_assert_eq(vq_tensor_new(&scalar, VQ_I64, 0, NULL), 0);
    for (int t = 0; t < 2; t++) {
        char msg[200];
        snprintf(msg, sizeof msg, "%s: input State (slot 0): dtype f64 not supported", types[t]);
        expect_state_error(types[t], &f64, 1, 2, at, 1, msg);
        snprintf(msg, sizeof msg, "%s: input State (slot 0): shape [3] is not [2] (seed, counter)",
                 types[t]);
        expect_state_error(types[t], &long3, 1, 2, at, 1, msg);
        snprintf(msg, sizeof msg, "%s: input State (slot 0): shape [] is not [2]", types[t]);
        expect_state_error(types[t], &scalar, 1, 2, at, 1, msg);
        snprintf(msg, sizeof msg, "%s: input State (slot 0): is given but output StateOut "
                                  "(slot 1) is not; give both or neither",
                 types[t]);
        expect_state_error(types[t], &good, 1, 1, at, 1, msg);
        snprintf(msg, sizeof msg, "%s: output StateOut (slot 1) is given but input State (slot "
                                  "0) is not",
                 types[t]);
        expect_state_error(types[t], NULL, 0, 2, at, 1, msg);
        snprintf(msg, sizeof msg, "%s: attribute seed: is given, but input State (slot 0) "
                                  "supplies the seed",
                 types[t]);
        expect_state_error(types[t], &good, 1, 2, at, 2, msg);
        snprintf(msg, sizeof msg, "%s: takes 0 or 1 inputs, got 2", types[t]);
        expect_state_error(types[t], (vq_tensor *[]){good, good}, 2, 2, at, 1, msg);
    }
    int64_t xs[1] = {4};
    vq_tensor *x = oc_from(VQ_F32, 1, xs, (double[]){1, 2, 3, 4});
    expect_state_error("dropout", (vq_tensor *[]){x, f64}, 2, 3, NULL, 0,
                       "dropout: input State (slot 1): dtype f64 not supported");
    expect_state_error("dropout", (vq_tensor *[]){x, good}, 2, 2, NULL, 0,
                       "dropout: input State (slot 1): is given but output StateOut (slot 2) is "
                       "not");
    expect_state_error("dropout", &x, 1, 3, NULL, 0,
                       "dropout: output StateOut (slot 2) is given but input State (slot 1) is "
                       "not");
    vq_tensor_release(x);
    vq_tensor_release(good);
    vq_tensor_release(f64);
    vq_tensor_release(long3);
    vq_tensor_release(scalar);
}

/* ---- dropout ---- */

static void dropout_run(vq_tensor *x, vq_tensor *st, vq_tensor **out, const vq_attr *at, int nat)
{
    vq_tensor *in[2] = {x, st};
    out[0] = out[1] = NULL;
    out[2] = st;
    cr_assert_eq(vq_op_run(NULL, "dropout", in, st ? 2 : 1, out, st ? 3 : 2, at, nat), 0, "%s",
                 vq_errmsg());
}

/* Over 2^16 elements: the kept fraction is 1 - p (sd of the estimate
 * 0.0018), Mask is 0 or 1 / (1 - p) in X's dtype, Out is mul(X, Mask) bit
 * for bit. */
Test(ops_init, dropout_keeps_about_1_minus_p_and_scales_what_it_keeps)
{
    uint64_t rng = oc_seed("ops_init");
    int64_t s[2] = {256, 256};
    const vq_dtype dts[2] = {VQ_F32, VQ_F64};
    const double ps[3] = {0.1, 0.3, 0.75};
    for (int d = 0; d < 2; d++)
        for (int k = 0; k < 3; k++) {
            vq_tensor *x = oc_rand(&rng, dts[d], 2, s, -2, 2), *out[3];
            vq_attr at[2] = {VQ_ATTR_F("p", ps[k]), VQ_ATTR_I("seed", 100 + k)};
            dropout_run(x, NULL, out, at, 2);
            vq_tensor *prod = oc_run1("mul", (vq_tensor *[]){x, out[1]}, 2, NULL, 0);
            cr_assert(same_bits(prod, out[0]), "%s p %g: Out is not X * Mask",
                      vq_dtype_name(dts[d]), ps[k]);
            double scale = dts[d] == VQ_F32 ? (double)(float)(1 / (1 - ps[k])) : 1 / (1 - ps[k]);
            int64_t kept = 0;
            for (int64_t i = 0; i < 65536; i++) {
                double m = oc_get(out[1], i);
                cr_assert(m == 0 || m == scale, "%s p %g: mask %.17g", vq_dtype_name(dts[d]),
                          ps[k], m);
                kept += m != 0;
            }
            double frac = (double)kept / 65536;
            cr_assert(fabs(frac - (1 - ps[k])) < 0.01, "%s p %g: kept %g", vq_dtype_name(dts[d]),
                      ps[k], frac);
            vq_tensor_release(prod);
            vq_tensor_release(out[0]);
            vq_tensor_release(out[1]);
            vq_tensor_release(x);
        }
}

/* The contract: element i is kept iff uniform_random (f64, min 0, max 1)
 * from the same state gives element i >= p; the state advances by X's
 * element count. */
Test(ops_init, dropout_keeps_where_the_uniform_draw_is_at_least_p)
{
    int64_t n = 5000;
    vq_tensor *x = NULL;
    cr_assert_eq(vq_tensor_new(&x, VQ_F64, 1, &n), 0);
    for (int64_t i = 0; i < n; i++)
        oc_set(x, i, 1);
    vq_tensor *st = state_new(9, 77), *out[3];
    vq_attr at = VQ_ATTR_F("p", 0.4);
    dropout_run(x, st, out, &at, 1);
    assert_state(st, 9, 77 + n);
    vq_attr bounds[4] = {VQ_ATTR_IS("shape", &n, 1), VQ_ATTR_S("dtype", "f64"),
                         VQ_ATTR_F("min", 0), VQ_ATTR_F("max", 1)};
    vq_tensor *st2 = state_new(9, 77), *uo[2] = {NULL, st2};
    cr_assert_eq(vq_op_run(NULL, "uniform_random", &st2, 1, uo, 2, bounds, 4), 0, "%s",
                 vq_errmsg());
    for (int64_t i = 0; i < n; i++) {
        bool keep = oc_get(uo[0], i) >= 0.4;
        cr_assert_eq(oc_get(out[1], i), keep ? 1 / 0.6 : 0, "element %lld", (long long)i);
        cr_assert_eq(oc_get(out[0], i), keep ? 1 / 0.6 : 0, "element %lld", (long long)i);
    }
    vq_tensor_release(uo[0]);
    vq_tensor_release(st2);
    vq_tensor_release(out[0]);
    vq_tensor_release(out[1]);
    vq_tensor_release(st);
    vq_tensor_release(x);
}

Test(ops_init, dropout_in_inference_and_with_p_0_passes_x_through)
{
    uint64_t rng = oc_seed("ops_init");
    int64_t s[2] = {30, 40};
    const vq_dtype dts[2] = {VQ_F32, VQ_F64};
    for (int d = 0; d < 2; d++) {
        vq_tensor *x = oc_rand(&rng, dts[d], 2, s, -3, 3), *out[3];
        /* is_test: Out = X, Mask = 1, the state is not advanced */
        vq_tensor *st = state_new(4, 10);
        vq_attr test[2] = {VQ_ATTR_F("p", 0.9), VQ_ATTR_B("is_test", true)};
        dropout_run(x, st, out, test, 2);
        cr_assert(same_bits(out[0], x), "%s: is_test changed X", vq_dtype_name(dts[d]));
        for (int64_t i = 0; i < 1200; i++)
            cr_assert_eq(oc_get(out[1], i), 1);
        assert_state(st, 4, 10);
        vq_tensor_release(out[0]);
        vq_tensor_release(out[1]);
        /* p = 0 keeps every element, unscaled; the state advances */
        vq_attr p0 = VQ_ATTR_F("p", 0);
        dropout_run(x, st, out, &p0, 1);
        cr_assert(same_bits(out[0], x), "%s: p 0 changed X", vq_dtype_name(dts[d]));
        for (int64_t i = 0; i < 1200; i++)
            cr_assert_eq(oc_get(out[1], i), 1);
        assert_state(st, 4, 1210);
        vq_tensor_release(out[0]);
        vq_tensor_release(out[1]);
        vq_tensor_release(st);
        vq_tensor_release(x);
    }
}

/* Out and Mask may be X itself: each element is read before it is
 * written. */
Test(ops_init, dropout_works_in_place)
{
    uint64_t rng = oc_seed("ops_init");
    int64_t s[1] = {1000};
    vq_tensor *x = oc_rand(&rng, VQ_F64, 1, s, -1, 1), *want[3];
    vq_attr at[2] = {VQ_ATTR_F("p", 0.5), VQ_ATTR_I("seed", 8)};
    dropout_run(x, NULL, want, at, 2);
    vq_tensor *y = oc_rand(&rng, VQ_F64, 1, s, -1, 1);
    memcpy(vq_tensor_data(y), vq_tensor_data(x), vq_tensor_nbytes(x));
    vq_tensor *out[2] = {x, NULL};
    cr_assert_eq(vq_op_run(NULL, "dropout", &x, 1, out, 2, at, 2), 0, "%s", vq_errmsg());
    cr_assert(same_bits(x, want[0]));
    vq_tensor_release(out[1]);
    vq_tensor *out2[2] = {NULL, y};
    cr_assert_eq(vq_op_run(NULL, "dropout", &y, 1, out2, 2, at, 2), 0, "%s", vq_errmsg());
    cr_assert(same_bits(out2[0], want[0]));
    cr_assert(same_bits(y, want[1]));
    vq_tensor_release(out2[0]);
    vq_tensor_release(want[0]);
    vq_tensor_release(want[1]);
    vq_tensor_release(x);
    vq_tensor_release(y);
}

Test(ops_init, bad_dropout_arguments_name_the_op_and_attribute)
{
    int64_t s[1] = {4};
    vq_tensor *x = oc_from(VQ_F32, 1, s, (double[]){1, 2, 3, 4});
    vq_tensor *xi = oc_from(VQ_I32, 1, s, (double[]){1, 2, 3, 4});
    vq_attr at = VQ_ATTR_F("p", 1);
    expect_state_error("dropout", &x, 1, 2, &at, 1, "dropout: attribute p: is 1, not in [0, 1)");
    at = VQ_ATTR_F("p", -0.25);
    expect_state_error("dropout", &x, 1, 2, &at, 1, "dropout: attribute p: is -0.25, not in");
    at = VQ_ATTR_F("p", NAN);
    expect_state_error("dropout", &x, 1, 2, &at, 1, "dropout: attribute p: is nan, not in");
    at = VQ_ATTR_I("seed", -2);
    expect_state_error("dropout", &x, 1, 2, &at, 1, "dropout: attribute seed: is -2");
    expect_state_error("dropout", &xi, 1, 2, NULL, 0, "dropout: input X (slot 0): dtype i32");
    vq_tensor *st = state_new(1, 0);
    at = VQ_ATTR_I("seed", 2);
    expect_state_error("dropout", (vq_tensor *[]){x, st}, 2, 3, &at, 1,
                       "dropout: attribute seed: is given, but input State (slot 1) supplies");
    vq_tensor_release(st);
    vq_tensor_release(x);
    vq_tensor_release(xi);
}

/* dX = dOut * Mask against finite differences: a fixed state (or seed)
 * draws the same mask at every evaluation. */
Test(ops_init, dropout_gradient_matches_finite_differences)
{
    uint64_t rng = oc_seed("ops_init");
    int64_t s[2] = {6, 7};
    vq_attr at[2] = {VQ_ATTR_F("p", 0.3), VQ_ATTR_I("seed", 5)};
    vq_tensor *x = oc_rand(&rng, VQ_F64, 2, s, -2, 2);
    oc_grad_check("dropout", &x, 1, 2, at, 2, 1, &rng);
    vq_tensor *st = state_new(11, 1000);
    oc_grad_check("dropout", (vq_tensor *[]){x, st}, 2, 3, at, 1, 1, &rng);
    at[1] = VQ_ATTR_B("is_test", true);
    oc_grad_check("dropout", (vq_tensor *[]){x, st}, 2, 3, at, 2, 1, &rng);
    assert_state(st, 11, 1000); /* oc_grad_check's outputs are new tensors */
    vq_tensor_release(st);
    vq_tensor_release(x);
}

/* ---- the process's default generator: calls with neither a seed nor a
 * State ---- */

static vq_tensor *unseeded(vq_engine *e, int64_t n)
{
    vq_attr at[2] = {VQ_ATTR_IS("shape", &n, 1), VQ_ATTR_S("dtype", "f64")};
    vq_tensor *o = NULL;
    cr_assert_eq(vq_op_run(e, "uniform_random", NULL, 0, &o, 1, at, 2), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_tensor_wait(o), 0, "%s", vq_errmsg());
    return o;
}

/* The documented f64 uniform (min -1, max 1) of element i under key. */
static double uniform_at(uint64_t key, int64_t i)
{
    uint32_t w[4];
    vq__philox((uint64_t)i, key, w);
    double u = (double)vq__bits53(w[0], w[1]) * 0x1p-53;
    return -1.0 + 2.0 * u;
}

static void assert_drawn_with(vq_tensor *t, uint64_t key, const char *what)
{
    for (int64_t i = 0; i < vq_tensor_numel(t); i++)
        cr_assert_eq(oc_get(t, i), uniform_at(key, i), "%s: element %lld", what, (long long)i);
}

/* Dropout's mask (p 0.5) against the keep rule under key: kept iff the
 * uniform draw in [0, 1) is >= p. */
static void assert_mask_drawn_with(vq_tensor *mask, uint64_t key, const char *what)
{
    for (int64_t i = 0; i < vq_tensor_numel(mask); i++) {
        uint32_t w[4];
        vq__philox((uint64_t)i, key, w);
        bool keep = (double)vq__bits53(w[0], w[1]) * 0x1p-53 >= 0.5;
        cr_assert_eq(oc_get(mask, i), keep ? 2 : 0, "%s: element %lld", what, (long long)i);
    }
}

/* The n-th call without a seed or State in the process draws with key
 * fold(VQ_DEFAULT_SEED, n), with or without an engine, on the CPU or the
 * emulated GPU; calls with a seed or a State take no number. So every call
 * draws anew. */
Test(ops_init, calls_without_a_seed_take_the_process_generators_keys_in_order)
{
    unsetenv("VARQ_SEED");
    setenv("VARQ_GPU_BACKEND", "emulated", 1);
    vq_engine_opts o = {.kind = VQ_ENGINE_THREADED, .cpu_workers = 2, .gpu_streams = 2};
    vq_engine *e;
    cr_assert_eq(vq_engine_new(&e, &o), 0, "%s", vq_errmsg());
    vq_tensor *a = unseeded(NULL, 100);
    vq_tensor *b = unseeded(e, 100);
    vq_tensor *seeded = random_fill(NULL, "uniform_random", "f64", 10, 3);
    vq_tensor *st = state_new(5, 0),
              *fromstate = random_from(NULL, "uniform_random", "f64", 10, st);
    int64_t n = 500;
    vq_tensor *x = NULL;
    cr_assert_eq(vq_tensor_new(&x, VQ_F64, 1, &n), 0);
    for (int64_t i = 0; i < n; i++)
        oc_set(x, i, 1);
    vq_tensor *gx = copy_to(e, x, (vq_ctx){VQ_DEV_GPU, 0}), *gout[2] = {NULL, NULL};
    vq_attr p = VQ_ATTR_F("p", 0.5);
    cr_assert_eq(vq_op_run(e, "dropout", &gx, 1, gout, 2, &p, 1), 0, "%s", vq_errmsg());
    vq_tensor *gmask = copy_to(e, gout[1], (vq_ctx){VQ_DEV_CPU, 0});
    cr_assert_eq(vq_tensor_wait(gmask), 0, "%s", vq_errmsg());
    vq_tensor *c = unseeded(NULL, 100);
    assert_drawn_with(a, vq__rng_fold(VQ_DEFAULT_SEED, 0), "first call");
    assert_drawn_with(b, vq__rng_fold(VQ_DEFAULT_SEED, 1), "second call (pushed)");
    assert_mask_drawn_with(gmask, vq__rng_fold(VQ_DEFAULT_SEED, 2), "third call (GPU dropout)");
    assert_drawn_with(c, vq__rng_fold(VQ_DEFAULT_SEED, 3), "fourth call");
    int equal = 0;
    for (int64_t i = 0; i < 100; i++)
        equal += oc_get(a, i) == oc_get(c, i);
    cr_assert_eq(equal, 0, "%d of 100 repeat", equal);
    vq_tensor *refs[] = {a, b, seeded, st, fromstate, x, gx, gout[0], gout[1], gmask, c};
    for (size_t i = 0; i < sizeof refs / sizeof refs[0]; i++)
        vq_tensor_release(refs[i]);
    vq_engine_free(e);
}

Test(ops_init, varq_seed_seeds_the_process_generator)
{
    setenv("VARQ_SEED", "77", 1);
    vq_tensor *a = unseeded(NULL, 64), *b = unseeded(NULL, 64);
    assert_drawn_with(a, vq__rng_fold(77, 0), "first call");
    assert_drawn_with(b, vq__rng_fold(77, 1), "second call");
    vq_tensor_release(a);
    vq_tensor_release(b);
}

/* A bad VARQ_SEED fails the calls that would draw from it, naming it, and
 * nothing else. */
Test(ops_init, a_bad_varq_seed_fails_only_the_calls_that_draw_from_it)
{
    setenv("VARQ_SEED", "7up", 1);
    vq_tensor *seeded = random_fill(NULL, "gaussian_random", "f64", 10, 3);
    vq_tensor *st = state_new(5, 0),
              *fromstate = random_from(NULL, "uniform_random", "f64", 10, st);
    int64_t n = 4;
    vq_attr at[1] = {VQ_ATTR_IS("shape", &n, 1)};
    vq_tensor *o = NULL;
    cr_assert_eq(vq_op_run(NULL, "uniform_random", NULL, 0, &o, 1, at, 1), VQ_EINVAL);
    cr_assert_null(o);
    cr_assert(strstr(vq_errmsg(), "uniform_random: VARQ_SEED is \"7up\", not decimal digits"), "%s",
              vq_errmsg());
    vq_tensor *x = oc_from(VQ_F32, 1, &n, (double[]){1, 2, 3, 4}), *out[2] = {NULL, NULL};
    cr_assert_eq(vq_op_run(NULL, "dropout", &x, 1, out, 2, NULL, 0), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "dropout: VARQ_SEED is \"7up\""), "%s", vq_errmsg());
    vq_tensor_release(x);
    vq_tensor_release(seeded);
    vq_tensor_release(fromstate);
    vq_tensor_release(st);
}
