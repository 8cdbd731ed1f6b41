/* Binary elementwise ops with broadcasting, scale, and their gradients,
 * against plain loops over numpy's broadcasting rule. */
#include "opcheck.h"

#include <criterion/criterion.h>
#include <math.h>
#include <string.h>
#include "leakcheck.h"

static uint64_t rng;

static void setup(void)
{
    rng = oc_seed("ops_elementwise");
}

TestSuite(ops_elementwise, .init = setup, .fini = leak_check);

static double apply(const char *op, double a, double b, vq_dtype dt)
{
    if (!strcmp(op, "add"))
        return a + b;
    if (!strcmp(op, "sub"))
        return a - b;
    if (!strcmp(op, "mul"))
        return a * b;
    if (dt == VQ_I32 || dt == VQ_I64)
        return (double)((int64_t)a / (int64_t)b);
    return a / b;
}

static void check_op(const char *op, vq_dtype dt)
{
    for (int c = 0; c < oc_nbcast_cases; c++) {
        const struct oc_bcast_case *s = &oc_bcast_cases[c];
        bool ints = dt == VQ_I32 || dt == VQ_I64;
        vq_tensor *x = oc_rand(&rng, dt, s->nx, s->x, -10, 10);
        vq_tensor *y = oc_rand(&rng, dt, s->ny, s->y, ints ? 1 : 0.5, ints ? 9 : 4);
        vq_tensor *in[2] = {x, y};
        vq_tensor *o = oc_run1(op, in, 2, NULL, 0);
        int64_t n = 1;
        for (int d = 0; d < s->no; d++)
            n *= s->o[d];
        double want[64];
        for (int64_t i = 0; i < n; i++)
            want[i] = apply(op, oc_get(x, oc_bcast_index(i, s->no, s->o, s->nx, s->x)),
                            oc_get(y, oc_bcast_index(i, s->no, s->o, s->ny, s->y)), dt);
        oc_assert_close(o, s->no, s->o, want, dt == VQ_F32 ? 1e-6 : 1e-15, 0);
        vq_tensor_release(o);
        vq_tensor_release(x);
        vq_tensor_release(y);
    }
}

Test(ops_elementwise, binary_ops_match_numpy_broadcasting_in_every_dtype)
{
    const char *ops[] = {"add", "sub", "mul", "div"};
    vq_dtype dts[] = {VQ_F32, VQ_F64, VQ_I32, VQ_I64};
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++)
            check_op(ops[i], dts[j]);
}

/* pow (ONNX's Pow with a tensor exponent): X^Y with broadcasting, floats;
 * its gradients Y X^(Y-1) and X^Y ln X against finite differences
 * (positive bases). */
Test(ops_elementwise, pow_raises_x_to_y_with_broadcasting_and_its_gradients_match)
{
    for (int d = 0; d < 2; d++) {
        vq_dtype dt = d ? VQ_F64 : VQ_F32;
        for (int c = 0; c < oc_nbcast_cases; c++) {
            const struct oc_bcast_case *s = &oc_bcast_cases[c];
            vq_tensor *in[2] = {oc_rand(&rng, dt, s->nx, s->x, 0.1, 3),
                                oc_rand(&rng, dt, s->ny, s->y, -2, 2)};
            vq_tensor *o = oc_run1("pow", in, 2, NULL, 0);
            int64_t n = 1;
            for (int k = 0; k < s->no; k++)
                n *= s->o[k];
            double want[64];
            for (int64_t i = 0; i < n; i++)
                want[i] = pow(oc_get(in[0], oc_bcast_index(i, s->no, s->o, s->nx, s->x)),
                              oc_get(in[1], oc_bcast_index(i, s->no, s->o, s->ny, s->y)));
            oc_assert_close(o, s->no, s->o, want, dt == VQ_F32 ? 1e-6 : 1e-15, 0);
            vq_tensor_release(o);
            if (dt == VQ_F64)
                oc_grad_check("pow", in, 2, 1, NULL, 0, 3, &rng);
            vq_tensor_release(in[0]);
            vq_tensor_release(in[1]);
        }
    }
}

/* Integer pow: exact powers (wrapping like the multiplications they are),
 * negative exponents truncated (1 and -1 keep a magnitude of 1), 0 to a
 * negative power an error naming the element. */
Test(ops_elementwise, integer_pow_is_exact_wraps_and_truncates_negative_exponents)
{
    int64_t six = 6, one = 1;
    double x[6] = {3, -2, 7, 1, -1, 2}, y[6] = {4, 5, 0, -3, -3, -1};
    for (int d = 0; d < 2; d++) {
        vq_dtype dt = d ? VQ_I64 : VQ_I32;
        vq_tensor *in[2] = {oc_from(dt, 1, &six, x), oc_from(dt, 1, &six, y)};
        vq_tensor *o = oc_run1("pow", in, 2, NULL, 0);
        double want[6] = {81, -32, 1, 1, -1, 0};
        oc_assert_close(o, 1, &six, want, 0, 0);
        vq_tensor_release(o);
        vq_tensor_release(in[0]);
        vq_tensor_release(in[1]);
        /* broadcast scalar exponent; 3^40 wraps as the multiplications do */
        double b[1] = {40};
        in[0] = oc_from(dt, 1, &six, x);
        in[1] = oc_from(dt, 1, &one, b);
        o = oc_run1("pow", in, 2, NULL, 0);
        const void *od = vq_tensor_data(o);
        uint64_t w = 1;
        for (int k = 0; k < 40; k++)
            w *= 3;
        if (dt == VQ_I64)
            cr_assert_eq(((const int64_t *)od)[0], (int64_t)w);
        else
            cr_assert_eq(((const int32_t *)od)[0], (int32_t)(uint32_t)w);
        vq_tensor_release(o);
        vq_tensor_release(in[0]);
        vq_tensor_release(in[1]);
        double zx[3] = {2, 0, 0}, zy[3] = {1, 2, -1};
        int64_t three = 3;
        in[0] = oc_from(dt, 1, &three, zx);
        in[1] = oc_from(dt, 1, &three, zy);
        cr_assert_eq(oc_try("pow", in, 2, 1, NULL, 0), VQ_EINVAL);
        cr_assert(strstr(vq_errmsg(), "negative power at output element 2"), "%s", vq_errmsg());
        vq_tensor_release(in[0]);
        vq_tensor_release(in[1]);
    }
}

Test(ops_elementwise, integer_division_by_zero_is_an_error)
{
    int64_t s[1] = {3};
    vq_tensor *x = oc_from(VQ_I32, 1, s, (double[]){1, 2, 3});
    vq_tensor *y = oc_from(VQ_I32, 1, s, (double[]){1, 0, 3});
    vq_tensor *in[2] = {x, y};
    cr_assert_eq(oc_try("div", in, 2, 1, NULL, 0), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "div: integer division by zero"), "%s", vq_errmsg());
    vq_tensor_release(x);
    vq_tensor_release(y);
}

Test(ops_elementwise, integer_overflow_wraps)
{
    int64_t s[1] = {1};
    vq_tensor *x = oc_from(VQ_I32, 1, s, (double[]){2147483647.0});
    vq_tensor *y = oc_from(VQ_I32, 1, s, (double[]){1});
    vq_tensor *in[2] = {x, y};
    vq_tensor *o = oc_run1("add", in, 2, NULL, 0);
    cr_assert_eq(oc_get(o, 0), -2147483648.0);
    vq_tensor_release(o);
    vq_tensor_release(x);
    vq_tensor_release(y);
}

Test(ops_elementwise, mismatched_shapes_and_dtypes_name_the_slot)
{
    int64_t a[2] = {3, 4}, b[2] = {2, 4};
    vq_tensor *x = oc_rand(&rng, VQ_F32, 2, a, 0, 1), *y = oc_rand(&rng, VQ_F32, 2, b, 0, 1);
    vq_tensor *z = oc_rand(&rng, VQ_F64, 2, a, 0, 1);
    vq_tensor *in[2] = {x, y};
    cr_assert_eq(oc_try("add", in, 2, 1, NULL, 0), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "add: input Y (slot 1)"), "%s", vq_errmsg());
    in[1] = z;
    cr_assert_eq(oc_try("mul", in, 2, 1, NULL, 0), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "mul: input Y (slot 1): dtype f64 differs"), "%s", vq_errmsg());
    cr_assert_eq(oc_try("mul", in, 1, 1, NULL, 0), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "mul: takes 2 inputs, got 1"), "%s", vq_errmsg());
    vq_attr bad = VQ_ATTR_F("sclae", 2);
    cr_assert_eq(oc_try("scale", in, 1, 1, &bad, 1), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "scale: unknown attribute 'sclae'"), "%s", vq_errmsg());
    vq_attr typed = VQ_ATTR_S("scale", "two");
    cr_assert_eq(oc_try("scale", in, 1, 1, &typed, 1), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "scale: attribute scale: expected float, got string"), "%s",
              vq_errmsg());
    vq_attr untyped = VQ_ATTR_F("scale", 2);
    untyped.type = (vq_attr_type)99;
    cr_assert_eq(oc_try("scale", in, 1, 1, &untyped, 1), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "scale: attribute scale: expected float, got type 99, which is "
                                  "no vq_attr_type"),
              "%s", vq_errmsg());
    cr_assert_eq(oc_try("no_such_op", in, 1, 1, NULL, 0), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "no_such_op"), "%s", vq_errmsg());
    vq_tensor_release(x);
    vq_tensor_release(y);
    vq_tensor_release(z);
}

Test(ops_elementwise, scale_computes_scale_times_x_plus_bias)
{
    int64_t s[2] = {2, 3};
    vq_tensor *x = oc_rand(&rng, VQ_F64, 2, s, -5, 5);
    vq_attr at[2] = {VQ_ATTR_F("scale", -1.5), VQ_ATTR_I("bias", 2)};
    vq_tensor *o = oc_run1("scale", &x, 1, at, 2);
    double want[6];
    for (int i = 0; i < 6; i++)
        want[i] = -1.5 * oc_get(x, i) + 2;
    oc_assert_close(o, 2, s, want, 1e-15, 0);
    vq_tensor_release(o);
    vq_tensor_release(x);
}

Test(ops_elementwise, gradients_match_finite_differences)
{
    const char *ops[] = {"add", "sub", "mul", "div"};
    for (int i = 0; i < 4; i++)
        for (int c = 0; c < oc_nbcast_cases; c++) {
            const struct oc_bcast_case *s = &oc_bcast_cases[c];
            vq_tensor *x = oc_rand(&rng, VQ_F64, s->nx, s->x, -2, 2);
            vq_tensor *y = oc_rand(&rng, VQ_F64, s->ny, s->y, 0.5, 2);
            vq_tensor *in[2] = {x, y};
            oc_grad_check(ops[i], in, 2, 1, NULL, 0, 3, &rng);
            vq_tensor_release(x);
            vq_tensor_release(y);
        }
    int64_t s[2] = {3, 2};
    vq_tensor *x = oc_rand(&rng, VQ_F64, 2, s, -2, 2);
    vq_attr at[2] = {VQ_ATTR_F("scale", 3.5), VQ_ATTR_F("bias", 1)};
    oc_grad_check("scale", &x, 1, 1, at, 2, 1, &rng);
    vq_tensor_release(x);
    cr_log_info("largest gradient error: %.3g", oc_worst_grad_error());
}

Test(ops_elementwise, outputs_given_by_the_caller_are_checked_and_written_in_place)
{
    int64_t s[1] = {4};
    vq_tensor *x = oc_from(VQ_F32, 1, s, (double[]){1, 2, 3, 4});
    vq_tensor *y = oc_from(VQ_F32, 1, s, (double[]){10, 20, 30, 40});
    vq_tensor *in[2] = {x, y}, *out[1] = {x};
    cr_assert_eq(vq_op_run(NULL, "add", in, 2, out, 1, NULL, 0), 0, "%s", vq_errmsg());
    oc_assert_close(x, 1, s, (double[]){11, 22, 33, 44}, 0, 0);
    int64_t s2[1] = {3};
    vq_tensor *wrong = oc_from(VQ_F32, 1, s2, (double[]){0, 0, 0});
    out[0] = wrong;
    cr_assert_eq(vq_op_run(NULL, "add", in, 2, out, 1, NULL, 0), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "add: output Out (slot 0): expected f32 [4], got f32 [3]"), "%s",
              vq_errmsg());
    vq_tensor_release(wrong);
    vq_tensor_release(x);
    vq_tensor_release(y);
}

/* Long calls (over 2^16 elements) are shared with the idle workers: the
 * same bits as the call outside any engine, in place too. */
Test(ops_elementwise, long_calls_shared_by_two_workers_equal_the_serial_call)
{
    vq_engine *e;
    cr_assert_eq(vq_engine_new(&e, &(vq_engine_opts){.kind = VQ_ENGINE_THREADED, .cpu_workers = 2}),
                 0, "%s", vq_errmsg());
    int64_t n = 3 * (1 << 15) + 123;
    for (int d = 0; d < 2; d++) {
        vq_dtype dt = d ? VQ_F64 : VQ_F32;
        vq_tensor *in[2] = {oc_rand(&rng, dt, 1, &n, -2, 2), oc_rand(&rng, dt, 1, &n, -2, 2)};
        static const char *const binary[] = {"add", "sub", "mul", "div"};
        for (int i = 0; i < 4; i++)
            oc_assert_shared_equals_serial(e, binary[i], in, 2, NULL, 0);
        static const char *const unary[] = {"relu", "sigmoid", "tanh"};
        for (int i = 0; i < 3; i++)
            oc_assert_shared_equals_serial(e, unary[i], in, 1, NULL, 0);
        vq_tensor_release(in[0]);
        vq_tensor_release(in[1]);
    }
    vq_engine_free(e);
}

/* mod against numpy (remainder: fmod false; fmod: fmod true), the same
 * elements in f32 and f64, signed zeros included. */
Test(ops_elementwise, mod_and_fmod_match_numpy_remainder_and_fmod_with_their_signs)
{
    static const double x[12] = {5.5, -5.5, 5.5,  -5.5,  7.0,  -7.0,
                                 0.0, -0.0, 3.25, -1e-3, 1e10, 2.0};
    static const double y[12] = {2.0, 2.0,  -2.0, -2.0, 3.5,  -3.5,
                                 3.0, -3.0, 0.75, 4.0,  -3.0, INFINITY};
    /* np.remainder(x, y) and np.fmod(x, y) (f64; f32 rounds element 9) */
    static const double rem[12] = {1.5, 0.5,  -0.5, -1.5,  0.0,  -0.0,
                                   0.0, -0.0, 0.25, 3.999, -2.0, 2.0};
    static const double fm[12] = {1.5, -1.5, 1.5,  -1.5,   0.0, -0.0,
                                  0.0, -0.0, 0.25, -0.001, 1.0, 2.0};
    int64_t n = 12;
    for (int d = 0; d < 2; d++) {
        vq_dtype dt = d ? VQ_F64 : VQ_F32;
        for (int f = 0; f < 2; f++) {
            vq_tensor *in[2] = {oc_from(dt, 1, &n, x), oc_from(dt, 1, &n, y)};
            vq_attr at = VQ_ATTR_B("fmod", f);
            vq_tensor *o = oc_run1("mod", in, 2, &at, 1);
            const double *want = f ? fm : rem;
            for (int i = 0; i < 12; i++) {
                double g = oc_get(o, i), w = want[i];
                if (dt == VQ_F32 && i == 9)
                    w = f ? (double)fmodf(-1e-3f, 4.0f) : 3.999000072479248;
                if (dt == VQ_F32 && i == 10)
                    w = f ? (double)fmodf(1e10f, -3.0f) : (double)fmodf(1e10f, -3.0f) - 3.0;
                cr_assert(g == w && signbit(g) == signbit(w),
                          "%s fmod %d element %d: %.17g, want %.17g", vq_dtype_name(dt), f, i, g,
                          w);
            }
            vq_tensor_release(o);
            vq_tensor_release(in[0]);
            vq_tensor_release(in[1]);
        }
    }
}

/* Integer mod with broadcasting against floor and truncated division
 * written out (Python's a - b * (a // b), C's a - b * (a / b)); mixed
 * signs, x mod -1 (INT_MIN's too) is 0. */
Test(ops_elementwise, integer_mod_takes_the_divisors_sign_and_fmod_the_dividends)
{
    for (int d = 0; d < 2; d++) {
        vq_dtype dt = d ? VQ_I64 : VQ_I32;
        for (int f = 0; f < 2; f++)
            for (int c = 0; c < oc_nbcast_cases; c++) {
                const struct oc_bcast_case *s = &oc_bcast_cases[c];
                vq_tensor *x = oc_rand(&rng, dt, s->nx, s->x, -40, 40);
                vq_tensor *y = oc_rand(&rng, dt, s->ny, s->y, -9, 9);
                for (int64_t i = 0; i < vq_tensor_numel(y); i++)
                    if (oc_get(y, i) == 0)
                        oc_set(y, i, 7);
                vq_tensor *in[2] = {x, y};
                vq_attr at = VQ_ATTR_B("fmod", f);
                vq_tensor *o = oc_run1("mod", in, 2, &at, 1);
                int64_t no = 1;
                for (int k = 0; k < s->no; k++)
                    no *= s->o[k];
                double want[64];
                for (int64_t i = 0; i < no; i++) {
                    int64_t a = (int64_t)oc_get(x, oc_bcast_index(i, s->no, s->o, s->nx, s->x));
                    int64_t b = (int64_t)oc_get(y, oc_bcast_index(i, s->no, s->o, s->ny, s->y));
                    int64_t q = a / b;
                    if (!f && (a % b != 0) && ((a < 0) != (b < 0)))
                        q -= 1; /* floor division */
                    want[i] = (double)(a - b * q);
                }
                oc_assert_close(o, s->no, s->o, want, 0, 0);
                vq_tensor_release(o);
                vq_tensor_release(x);
                vq_tensor_release(y);
            }
        int64_t two = 2;
        vq_tensor *in[2] = {oc_from(dt, 1, &two, (double[]){d ? (double)INT64_MIN : INT32_MIN, 9}),
                            oc_from(dt, 1, &two, (double[]){-1, -1})};
        vq_tensor *o = oc_run1("mod", in, 2, NULL, 0);
        oc_assert_close(o, 1, &two, (double[]){0, 0}, 0, 0);
        vq_tensor_release(o);
        vq_tensor_release(in[1]);
        in[1] = oc_from(dt, 1, &two, (double[]){3, 0});
        vq_attr at = VQ_ATTR_B("fmod", d);
        cr_assert_eq(oc_try("mod", in, 2, 1, &at, 1), VQ_EINVAL);
        cr_assert(strstr(vq_errmsg(),
                         "mod: integer division by zero (or overflow) at output element 1"),
                  "%s", vq_errmsg());
        vq_tensor_release(in[0]);
        vq_tensor_release(in[1]);
    }
}

/* The gradients of mod: 1 for X, -floor(X / Y) (fmod: -trunc) for Y,
 * against finite differences away from the jumps (X / Y a quarter to
 * three quarters past an integer), broadcasting summed. */
Test(ops_elementwise, mod_gradients_match_finite_differences)
{
    for (int f = 0; f < 2; f++)
        for (int c = 0; c < oc_nbcast_cases; c++) {
            const struct oc_bcast_case *s = &oc_bcast_cases[c];
            vq_tensor *y = oc_rand(&rng, VQ_F64, s->ny, s->y, 0.5, 2);
            for (int64_t i = 0; i < vq_tensor_numel(y); i++)
                if (i % 2)
                    oc_set(y, i, -oc_get(y, i));
            /* draws X until no quotient is near a jump */
            int64_t no = 1;
            for (int k = 0; k < s->no; k++)
                no *= s->o[k];
            vq_tensor *x = NULL;
            bool ok = false;
            for (int tries = 0; tries < 1000 && !ok; tries++) {
                vq_tensor_release(x);
                x = oc_rand(&rng, VQ_F64, s->nx, s->x, -3, 3);
                ok = true;
                for (int64_t i = 0; i < no && ok; i++) {
                    double a = oc_get(x, oc_bcast_index(i, s->no, s->o, s->nx, s->x));
                    double b = oc_get(y, oc_bcast_index(i, s->no, s->o, s->ny, s->y));
                    double fr = a / b - floor(a / b);
                    ok = fr > 0.05 && fr < 0.95;
                }
            }
            cr_assert(ok, "case %d: no X away from the jumps", c);
            vq_tensor *in[2] = {x, y};
            vq_attr at = VQ_ATTR_B("fmod", f);
            double err = oc_grad_check("mod", in, 2, 1, &at, 1, 3, &rng);
            cr_assert_lt(err, 1e-6, "fmod %d case %d: %g", f, c, err);
            vq_tensor_release(x);
            vq_tensor_release(y);
        }
}
