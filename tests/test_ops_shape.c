/* transpose, reshape, concat, slice and cast, and their gradients, against
 * element-by-element references written with multi-indices. */
#include "opcheck.h"

#include "../ops/ops_internal.h"

#include <criterion/criterion.h>
#include <math.h>
#include <string.h>
#include "leakcheck.h"

static uint64_t rng;

static void setup(void)
{
    rng = oc_seed("ops_shape");
}

TestSuite(ops_shape, .init = setup, .fini = leak_check);

static const vq_dtype all_dtypes[] = {VQ_F32, VQ_F64, VQ_I32, VQ_I64, VQ_BOOL};

static int64_t count(int n, const int64_t *shape)
{
    int64_t c = 1;
    for (int i = 0; i < n; i++)
        c *= shape[i];
    return c;
}

static void unravel(int64_t i, int n, const int64_t *shape, int64_t *idx)
{
    for (int d = n - 1; d >= 0; d--) {
        idx[d] = i % shape[d];
        i /= shape[d];
    }
}

static int64_t ravel(const int64_t *idx, int n, const int64_t *shape)
{
    int64_t i = 0;
    for (int d = 0; d < n; d++)
        i = i * shape[d] + idx[d];
    return i;
}

static void assert_error(const char *op, vq_tensor *const *in, int nin, const vq_attr *at,
                         int nat, const char *msg)
{
    cr_assert_eq(oc_try(op, in, nin, 1, at, nat), VQ_EINVAL, "%s did not fail (want %s)", op,
                 msg);
    cr_assert(strstr(vq_errmsg(), msg), "message \"%s\" lacks \"%s\"", vq_errmsg(), msg);
}

/* ---- transpose ---- */

struct transpose_case {
    int ndim;
    int64_t shape[4];
    int64_t perm[4];
};

static const struct transpose_case tcases[] = {
    {2, {2, 3}, {1, 0}},
    {3, {2, 3, 4}, {2, 0, 1}},
    {3, {2, 3, 4}, {0, 2, 1}},
    {3, {2, 3, 4}, {1, 0, 2}},
    {3, {2, 3, 4}, {0, 1, 2}},
    {2, {0, 3}, {1, 0}},
    {3, {1, 4, 1}, {2, 1, 0}},
    {0, {0}, {0}},
    {4, {2, 3, 4, 5}, {3, 1, 0, 2}},
    {4, {2, 1, 3, 2}, {0, 2, 1, 3}},
};

Test(ops_shape, transpose_matches_reference_in_every_dtype)
{
    for (int t = 0; t < 5; t++)
        for (size_t c = 0; c < sizeof tcases / sizeof tcases[0]; c++) {
            const struct transpose_case *tc = &tcases[c];
            vq_tensor *x = oc_rand(&rng, all_dtypes[t], tc->ndim, tc->shape, -50, 50);
            vq_attr at = VQ_ATTR_IS("perm", tc->perm, tc->ndim);
            vq_tensor *o = oc_run1("transpose", &x, 1, &at, 1);
            int64_t oshape[4], idx[4], xidx[4];
            for (int d = 0; d < tc->ndim; d++)
                oshape[d] = tc->shape[tc->perm[d]];
            double want[128];
            for (int64_t j = 0; j < count(tc->ndim, oshape); j++) {
                unravel(j, tc->ndim, oshape, idx);
                for (int d = 0; d < tc->ndim; d++)
                    xidx[tc->perm[d]] = idx[d];
                want[j] = oc_get(x, ravel(xidx, tc->ndim, tc->shape));
            }
            oc_assert_close(o, tc->ndim, oshape, want, 0, 0);
            vq_tensor_release(o);
            vq_tensor_release(x);
        }
}

/* ---- reshape ---- */

struct reshape_case {
    int ndim;
    int64_t shape[4];
    int nattr;
    int64_t attr[4];
    int ondim;
    int64_t oshape[4];
};

static const struct reshape_case rcases[] = {
    {2, {3, 4}, 2, {4, 3}, 2, {4, 3}},
    {2, {3, 4}, 1, {-1}, 1, {12}},
    {2, {3, 4}, 2, {0, -1}, 2, {3, 4}},
    {2, {3, 4}, 3, {2, -1, 2}, 3, {2, 3, 2}},
    {2, {1, 1}, 0, {0}, 0, {0}},
    {0, {0}, 3, {1, -1, 1}, 3, {1, 1, 1}},
    {2, {0, 3}, 2, {3, -1}, 2, {3, 0}},
    {3, {2, 0, 3}, 2, {0, -1}, 2, {2, 0}},
    {3, {2, 3, 4}, 4, {0, 0, 2, 2}, 4, {2, 3, 2, 2}},
};

Test(ops_shape, reshape_keeps_the_elements_in_order_in_every_dtype)
{
    for (int t = 0; t < 5; t++)
        for (size_t c = 0; c < sizeof rcases / sizeof rcases[0]; c++) {
            const struct reshape_case *rc = &rcases[c];
            vq_tensor *x = oc_rand(&rng, all_dtypes[t], rc->ndim, rc->shape, -50, 50);
            vq_attr at = VQ_ATTR_IS("shape", rc->attr, rc->nattr);
            vq_tensor *o = oc_run1("reshape", &x, 1, &at, 1);
            double want[64];
            for (int64_t i = 0; i < count(rc->ndim, rc->shape); i++)
                want[i] = oc_get(x, i);
            oc_assert_close(o, rc->ondim, rc->oshape, want, 0, 0);
            vq_tensor_release(o);
            vq_tensor_release(x);
        }
}

/* allowzero (ONNX's Reshape): a 0 in the shape is an empty dim, not X's. */
Test(ops_shape, reshape_with_allowzero_makes_a_0_an_empty_dim)
{
    vq_tensor *x = oc_rand(&rng, VQ_F32, 3, (int64_t[]){0, 3, 4}, -1, 1);
    int64_t shape[3] = {3, 4, 0};
    vq_attr at[2] = {VQ_ATTR_IS("shape", shape, 3), VQ_ATTR_I("allowzero", 1)};
    vq_tensor *o = oc_run1("reshape", &x, 1, at, 2);
    cr_assert_eq(vq_tensor_ndim(o), 3);
    const int64_t *sh = vq_tensor_shape(o);
    cr_assert(sh[0] == 3 && sh[1] == 4 && sh[2] == 0, "[%lld, %lld, %lld]", (long long)sh[0],
              (long long)sh[1], (long long)sh[2]);
    vq_tensor_release(o);
    /* without it, the 0 copies X's dim 2 (4): 48 elements, not X's 0 */
    cr_assert_eq(oc_try("reshape", &x, 1, 1, at, 1), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "different element count"), "%s", vq_errmsg());
    vq_tensor_release(x);
}

/* ---- concat ---- */

struct concat_case {
    int ndim, n, axis;
    int64_t shape[3][3];
};

static const struct concat_case ccases[] = {
    {2, 3, 0, {{2, 3}, {1, 3}, {4, 3}}},
    {2, 3, 1, {{2, 3}, {2, 1}, {2, 0}}},
    {3, 2, -1, {{2, 3, 1}, {2, 3, 4}}},
    {3, 2, 1, {{2, 1, 3}, {2, 2, 3}}},
    {2, 1, 0, {{3, 2}}},
    {2, 2, 0, {{0, 2}, {3, 2}}},
    {1, 3, 0, {{1}, {1}, {1}}},
    {3, 2, 0, {{1, 0, 2}, {2, 0, 2}}},
};

/* The concatenated shape and, for output element j, which input and which
 * of its elements it is. */
static void concat_shape(const struct concat_case *cc, int64_t *out)
{
    int axis = (cc->axis + cc->ndim) % cc->ndim;
    memcpy(out, cc->shape[0], sizeof cc->shape[0]);
    out[axis] = 0;
    for (int i = 0; i < cc->n; i++)
        out[axis] += cc->shape[i][axis];
}

static void concat_source(const struct concat_case *cc, const int64_t *oshape, int64_t j,
                          int *which, int64_t *elem)
{
    int axis = (cc->axis + cc->ndim) % cc->ndim;
    int64_t idx[3] = {0};
    unravel(j, cc->ndim, oshape, idx);
    int i = 0;
    while (idx[axis] >= cc->shape[i][axis]) {
        idx[axis] -= cc->shape[i][axis];
        i++;
    }
    *which = i;
    *elem = ravel(idx, cc->ndim, cc->shape[i]);
}

Test(ops_shape, concat_matches_reference_in_every_dtype)
{
    for (int t = 0; t < 5; t++)
        for (size_t c = 0; c < sizeof ccases / sizeof ccases[0]; c++) {
            const struct concat_case *cc = &ccases[c];
            vq_tensor *x[3];
            for (int i = 0; i < cc->n; i++)
                x[i] = oc_rand(&rng, all_dtypes[t], cc->ndim, cc->shape[i], -50, 50);
            vq_attr at = VQ_ATTR_I("axis", cc->axis);
            vq_tensor *o = oc_run1("concat", x, cc->n, &at, 1);
            int64_t oshape[3];
            concat_shape(cc, oshape);
            double want[64];
            for (int64_t j = 0; j < count(cc->ndim, oshape); j++) {
                int which;
                int64_t e;
                concat_source(cc, oshape, j, &which, &e);
                want[j] = oc_get(x[which], e);
            }
            oc_assert_close(o, cc->ndim, oshape, want, 0, 0);
            vq_tensor_release(o);
            for (int i = 0; i < cc->n; i++)
                vq_tensor_release(x[i]);
        }
}

/* ---- slice ---- */

struct slice_case {
    int ndim;
    int64_t shape[3];
    int n;
    int64_t axes[3], starts[3], ends[3];
};

static const struct slice_case scases[] = {
    {2, {5, 6}, 1, {0}, {1}, {4}},
    {2, {5, 6}, 2, {1, 0}, {-4, 0}, {-1, 100}},
    {2, {5, 6}, 1, {1}, {4}, {2}},
    {3, {2, 3, 4}, 1, {2}, {1}, {3}},
    {3, {2, 3, 4}, 2, {0, 2}, {1, -100}, {INT64_MAX, INT64_MIN}},
    {3, {2, 3, 4}, 1, {-2}, {INT64_MIN}, {INT64_MAX}},
    {3, {2, 3, 4}, 3, {1, 2, 0}, {1, -3, -1}, {-1, 4, 2}},
    {1, {4}, 0, {0}, {0}, {0}},
    {0, {0}, 0, {0}, {0}, {0}},
    {3, {3, 1, 4}, 1, {1}, {0}, {1}},
    {2, {0, 4}, 1, {1}, {1}, {3}},
};

/* Python's rule for one bound: negative counts from the end, then clamp. */
static int64_t bound(int64_t v, int64_t dim)
{
    if (v < 0) {
        v += dim;
        if (v < 0)
            v = 0;
    }
    return v > dim ? dim : v;
}

/* The slice's shape and each dim's first index. */
static void slice_geometry(const struct slice_case *sc, int64_t *shape, int64_t *first)
{
    for (int d = 0; d < sc->ndim; d++) {
        shape[d] = sc->shape[d];
        first[d] = 0;
    }
    for (int i = 0; i < sc->n; i++) {
        int a = (int)((sc->axes[i] + sc->ndim) % sc->ndim);
        int64_t s = bound(sc->starts[i], sc->shape[a]), e = bound(sc->ends[i], sc->shape[a]);
        first[a] = s;
        shape[a] = e > s ? e - s : 0;
    }
}

static void slice_attrs(const struct slice_case *sc, vq_attr *at)
{
    at[0] = VQ_ATTR_IS("axes", sc->axes, sc->n);
    at[1] = VQ_ATTR_IS("starts", sc->starts, sc->n);
    at[2] = VQ_ATTR_IS("ends", sc->ends, sc->n);
}

Test(ops_shape, slice_follows_numpy_bounds_in_every_dtype)
{
    for (int t = 0; t < 5; t++)
        for (size_t c = 0; c < sizeof scases / sizeof scases[0]; c++) {
            const struct slice_case *sc = &scases[c];
            vq_tensor *x = oc_rand(&rng, all_dtypes[t], sc->ndim, sc->shape, -50, 50);
            vq_attr at[3];
            slice_attrs(sc, at);
            vq_tensor *o = oc_run1("slice", &x, 1, at, 3);
            int64_t oshape[3], first[3], idx[3];
            slice_geometry(sc, oshape, first);
            double want[64];
            for (int64_t j = 0; j < count(sc->ndim, oshape); j++) {
                unravel(j, sc->ndim, oshape, idx);
                for (int d = 0; d < sc->ndim; d++)
                    idx[d] += first[d];
                want[j] = oc_get(x, ravel(idx, sc->ndim, sc->shape));
            }
            oc_assert_close(o, sc->ndim, oshape, want, 0, 0);
            vq_tensor_release(o);
            vq_tensor_release(x);
        }
}

/* ---- cast ---- */

static const char *const dtype_names[] = {"f32", "float64", "i32", "int64", "bool"};

/* What x converts to, for values well inside every range. */
static double cast_value(double v, vq_dtype to)
{
    switch (to) {
    case VQ_F32: return (float)v;
    case VQ_F64: return v;
    case VQ_I32:
    case VQ_I64: return trunc(v);
    default: return v != 0;
    }
}

Test(ops_shape, cast_converts_between_every_pair_of_dtypes)
{
    int64_t shapes[3][2] = {{3, 5}, {0, 2}, {1, 1}};
    for (int from = 0; from < 5; from++)
        for (int to = 0; to < 5; to++)
            for (int s = 0; s < 3; s++) {
                vq_tensor *x = oc_rand(&rng, all_dtypes[from], 2, shapes[s], -100, 100);
                if (s == 0)
                    oc_set(x, 0, 0); /* a zero, for bool */
                vq_attr at = VQ_ATTR_S("dtype", dtype_names[to]);
                vq_tensor *o = oc_run1("cast", &x, 1, &at, 1);
                cr_assert_eq(vq_tensor_dtype(o), all_dtypes[to]);
                double want[16];
                for (int64_t i = 0; i < count(2, shapes[s]); i++)
                    want[i] = cast_value(oc_get(x, i), all_dtypes[to]);
                oc_assert_close(o, 2, shapes[s], want, 0, 0);
                vq_tensor_release(o);
                vq_tensor_release(x);
            }
    vq_tensor *sc = oc_rand(&rng, VQ_F64, 0, NULL, -9, 9);
    vq_attr at = VQ_ATTR_S("dtype", "i64");
    vq_tensor *o = oc_run1("cast", &sc, 1, &at, 1);
    oc_assert_close(o, 0, NULL, (double[]){trunc(oc_get(sc, 0))}, 0, 0);
    vq_tensor_release(o);
    vq_tensor_release(sc);
}

static vq_tensor *cast_to(vq_tensor *x, const char *dtype)
{
    vq_attr at = VQ_ATTR_S("dtype", dtype);
    return oc_run1("cast", &x, 1, &at, 1);
}

Test(ops_shape, float_to_int_casts_truncate_saturate_and_send_nan_to_zero)
{
    int64_t s[1] = {11};
    double v[11] = {NAN, INFINITY, -INFINITY, 3e9, -3e9, 2.9, -2.9, 1e19, -1e19,
                    -2147483648.9, 2147483647.9};
    int32_t w32[11] = {0, INT32_MAX, INT32_MIN, INT32_MAX, INT32_MIN, 2, -2, INT32_MAX,
                       INT32_MIN, INT32_MIN, INT32_MAX};
    int64_t w64[11] = {0, INT64_MAX, INT64_MIN, 3000000000, -3000000000, 2, -2, INT64_MAX,
                       INT64_MIN, -2147483648, 2147483647};
    vq_tensor *x;
    cr_assert_eq(vq_tensor_from(&x, VQ_F64, 1, s, v), 0);
    vq_tensor *a = cast_to(x, "i32"), *b = cast_to(x, "i64");
    cr_assert_eq(memcmp(vq_tensor_data(a), w32, sizeof w32), 0);
    cr_assert_eq(memcmp(vq_tensor_data(b), w64, sizeof w64), 0);
    vq_tensor_release(a);
    vq_tensor_release(b);
    vq_tensor_release(x);

    int64_t s6[1] = {6};
    float f[6] = {NAN, INFINITY, -INFINITY, 1e10f, -1e10f, -2.5f};
    int32_t f32[6] = {0, INT32_MAX, INT32_MIN, INT32_MAX, INT32_MIN, -2};
    int64_t f64[6] = {0, INT64_MAX, INT64_MIN, 10000000000, -10000000000, -2};
    cr_assert_eq(vq_tensor_from(&x, VQ_F32, 1, s6, f), 0);
    a = cast_to(x, "i32");
    b = cast_to(x, "i64");
    cr_assert_eq(memcmp(vq_tensor_data(a), f32, sizeof f32), 0);
    cr_assert_eq(memcmp(vq_tensor_data(b), f64, sizeof f64), 0);
    vq_tensor_release(a);
    vq_tensor_release(b);
    vq_tensor_release(x);
}

Test(ops_shape, narrowing_integer_casts_wrap_and_bool_is_nonzero)
{
    int64_t s[1] = {4};
    int64_t v[4] = {4294967297, 2147483648, -2147483649, -1};
    int32_t w[4] = {1, INT32_MIN, INT32_MAX, -1};
    vq_tensor *x;
    cr_assert_eq(vq_tensor_from(&x, VQ_I64, 1, s, v), 0);
    vq_tensor *o = cast_to(x, "i32");
    cr_assert_eq(memcmp(vq_tensor_data(o), w, sizeof w), 0);
    vq_tensor_release(o);
    vq_tensor_release(x);

    int64_t s5[1] = {5};
    x = oc_from(VQ_F64, 1, s5, (double[]){0, -0.0, NAN, 0.5, -3});
    o = cast_to(x, "bool");
    uint8_t wb[5] = {0, 0, 1, 1, 1};
    cr_assert_eq(memcmp(vq_tensor_data(o), wb, sizeof wb), 0);
    vq_tensor_release(o);
    vq_tensor_release(x);
}

Test(ops_shape, cast_grad_converts_back_to_the_input_dtype)
{
    int64_t s[2] = {2, 3};
    vq_tensor *x = oc_rand(&rng, VQ_F32, 2, s, -1, 1), *g = oc_rand(&rng, VQ_F64, 2, s, -1, 1);
    vq_tensor *in[2] = {x, g};
    vq_tensor *d = oc_run1("cast_grad", in, 2, NULL, 0);
    cr_assert_eq(vq_tensor_dtype(d), VQ_F32);
    double want[6];
    for (int i = 0; i < 6; i++)
        want[i] = (float)oc_get(g, i);
    oc_assert_close(d, 2, s, want, 0, 0);
    vq_tensor_release(d);
    in[0] = g;
    in[1] = x;
    d = oc_run1("cast_grad", in, 2, NULL, 0);
    cr_assert_eq(vq_tensor_dtype(d), VQ_F64);
    for (int i = 0; i < 6; i++)
        want[i] = oc_get(x, i);
    oc_assert_close(d, 2, s, want, 0, 0);
    vq_tensor_release(d);
    vq_tensor_release(x);
    vq_tensor_release(g);
}

/* ---- gradients ---- */

Test(ops_shape, gradients_match_finite_differences)
{
    for (size_t c = 0; c < sizeof tcases / sizeof tcases[0]; c++) {
        const struct transpose_case *tc = &tcases[c];
        vq_tensor *x = oc_rand(&rng, VQ_F64, tc->ndim, tc->shape, -2, 2);
        vq_attr at = VQ_ATTR_IS("perm", tc->perm, tc->ndim);
        oc_grad_check("transpose", &x, 1, 1, &at, 1, 1, &rng);
        vq_tensor_release(x);
    }
    for (size_t c = 0; c < sizeof rcases / sizeof rcases[0]; c++) {
        const struct reshape_case *rc = &rcases[c];
        vq_tensor *x = oc_rand(&rng, VQ_F64, rc->ndim, rc->shape, -2, 2);
        vq_attr at = VQ_ATTR_IS("shape", rc->attr, rc->nattr);
        oc_grad_check("reshape", &x, 1, 1, &at, 1, 1, &rng);
        vq_tensor_release(x);
    }
    for (size_t c = 0; c < sizeof ccases / sizeof ccases[0]; c++) {
        const struct concat_case *cc = &ccases[c];
        vq_tensor *x[3];
        for (int i = 0; i < cc->n; i++)
            x[i] = oc_rand(&rng, VQ_F64, cc->ndim, cc->shape[i], -2, 2);
        vq_attr at = VQ_ATTR_I("axis", cc->axis);
        oc_grad_check("concat", x, cc->n, 1, &at, 1, (1u << cc->n) - 1, &rng);
        /* Only the last input's gradient wanted. */
        oc_grad_check("concat", x, cc->n, 1, &at, 1, 1u << (cc->n - 1), &rng);
        for (int i = 0; i < cc->n; i++)
            vq_tensor_release(x[i]);
    }
    for (size_t c = 0; c < sizeof scases / sizeof scases[0]; c++) {
        const struct slice_case *sc = &scases[c];
        vq_tensor *x = oc_rand(&rng, VQ_F64, sc->ndim, sc->shape, -2, 2);
        vq_attr at[3];
        slice_attrs(sc, at);
        oc_grad_check("slice", &x, 1, 1, at, 3, 1, &rng);
        vq_tensor_release(x);
    }
    int64_t s[2] = {3, 2};
    vq_tensor *x = oc_rand(&rng, VQ_F64, 2, s, -2, 2);
    vq_attr at = VQ_ATTR_S("dtype", "f64");
    oc_grad_check("cast", &x, 1, 1, &at, 1, 1, &rng);
    vq_tensor_release(x);
    cr_log_info("largest gradient error: %.3g", oc_worst_grad_error());
}

static int emit_must_not_run(void *user, const char *type, const char *const *in, int nin,
                             const char *const *out, int nout, const vq_attr *attrs, int nattrs)
{
    (void)user, (void)in, (void)nin, (void)out, (void)nout, (void)attrs, (void)nattrs;
    cr_assert_fail("the maker emitted %s", type);
    return 0;
}

Test(ops_shape, integer_casts_have_no_gradient)
{
    const vq__op_def *def = vq__op_find("cast");
    cr_assert(def && def->grad);
    const char *in[1] = {"x"}, *out[1] = {"y"}, *din[1] = {"x@GRAD"}, *dout[1] = {"y@GRAD"};
    vq_attr at = VQ_ATTR_S("dtype", "i32");
    vq__grad g = {.def = def, .in = in, .nin = 1, .out = out, .nout = 1, .din = din,
                  .dout = dout, .attrs = &at, .nattrs = 1, .emit = emit_must_not_run};
    cr_assert_eq(def->grad(&g), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "cast: cast to i32 has no gradient"), "%s", vq_errmsg());
    /* From an integer X the gradient op itself refuses. */
    int64_t s[1] = {2};
    vq_tensor *xi = oc_rand(&rng, VQ_I32, 1, s, 0, 5), *gf = oc_rand(&rng, VQ_F32, 1, s, 0, 1);
    vq_tensor *gin[2] = {xi, gf};
    assert_error("cast_grad", gin, 2, NULL, 0,
                 "cast_grad: input X (slot 0): dtype i32: integer and bool casts have no gradient");
    vq_tensor_release(xi);
    vq_tensor_release(gf);
}

/* ---- errors ---- */

Test(ops_shape, bad_perm_is_an_error_naming_the_attribute)
{
    int64_t s[2] = {3, 4};
    vq_tensor *x = oc_rand(&rng, VQ_F32, 2, s, 0, 1);
    vq_attr short_perm = VQ_ATTR_IS("perm", (int64_t[]){0}, 1);
    assert_error("transpose", &x, 1, &short_perm, 1,
                 "transpose: attribute perm: has 1 entries for X's 2 dims");
    vq_attr dup = VQ_ATTR_IS("perm", ((int64_t[]){1, 1}), 2);
    assert_error("transpose", &x, 1, &dup, 1,
                 "transpose: attribute perm: is not a permutation of 0..1 (entry 1 is 1)");
    vq_attr big = VQ_ATTR_IS("perm", ((int64_t[]){0, 2}), 2);
    assert_error("transpose", &x, 1, &big, 1, "transpose: attribute perm: is not a permutation");
    vq_attr neg = VQ_ATTR_IS("perm", ((int64_t[]){-1, 0}), 2);
    assert_error("transpose", &x, 1, &neg, 1, "transpose: attribute perm: is not a permutation");
    assert_error("transpose", &x, 1, NULL, 0, "transpose: attribute perm (ints) is required");
    vq_tensor_release(x);
}

Test(ops_shape, bad_reshape_is_an_error_naming_the_attribute)
{
    int64_t s[2] = {3, 4};
    vq_tensor *x = oc_rand(&rng, VQ_F64, 2, s, 0, 1);
    vq_attr count5 = VQ_ATTR_IS("shape", (int64_t[]){5}, 1);
    assert_error("reshape", &x, 1, &count5, 1,
                 "reshape: attribute shape: [5] has a different element count from X's [3,4]");
    vq_attr two = VQ_ATTR_IS("shape", ((int64_t[]){-1, -1}), 2);
    assert_error("reshape", &x, 1, &two, 1, "reshape: attribute shape: has more than one -1");
    vq_attr left = VQ_ATTR_IS("shape", ((int64_t[]){5, -1}), 2);
    assert_error("reshape", &x, 1, &left, 1,
                 "reshape: attribute shape: cannot take X's 12 elements (X is [3,4])");
    vq_attr zero_left = VQ_ATTR_IS("shape", ((int64_t[]){0, -1, 0}), 3);
    assert_error("reshape", &x, 1, &zero_left, 1,
                 "reshape: attribute shape: entry 2 is 0 (copy X's dim), but X has 2 dims");
    vq_attr minus2 = VQ_ATTR_IS("shape", ((int64_t[]){-2, -6}), 2);
    assert_error("reshape", &x, 1, &minus2, 1, "reshape: attribute shape: entry 0 is -2");
    vq_attr nine = VQ_ATTR_IS("shape", ((int64_t[]){1, 1, 1, 1, 1, 1, 1, 3, 4}), 9);
    assert_error("reshape", &x, 1, &nine, 1, "reshape: attribute shape: has 9 dims");
    vq_attr huge = VQ_ATTR_IS("shape", ((int64_t[]){INT64_MAX, INT64_MAX, -1}), 3);
    assert_error("reshape", &x, 1, &huge, 1, "reshape: attribute shape: cannot take");
    int64_t gs[1] = {10};
    vq_tensor *g = oc_rand(&rng, VQ_F64, 1, gs, 0, 1);
    vq_tensor *in[2] = {x, g};
    assert_error("reshape_grad", in, 2, NULL, 0,
                 "reshape_grad: input dOut (slot 1): shape [10] has a different element count");
    vq_tensor_release(g);
    vq_tensor_release(x);
}

Test(ops_shape, mismatched_concat_inputs_name_the_slot)
{
    int64_t a[2] = {3, 4}, b[2] = {2, 5}, r1[1] = {4};
    vq_tensor *x = oc_rand(&rng, VQ_F32, 2, a, 0, 1), *y = oc_rand(&rng, VQ_F32, 2, b, 0, 1);
    vq_tensor *z = oc_rand(&rng, VQ_F64, 2, a, 0, 1), *v = oc_rand(&rng, VQ_F32, 1, r1, 0, 1);
    vq_tensor *sc = oc_rand(&rng, VQ_F32, 0, NULL, 0, 1);
    vq_tensor *in[3] = {x, y, x};
    assert_error("concat", in, 2, NULL, 0,
                 "concat: input X (slot 1): shape [2,5] differs from X's [3,4] in dim 1");
    vq_attr ax1 = VQ_ATTR_I("axis", 1);
    assert_error("concat", in, 2, &ax1, 1, "concat: input X (slot 1): shape [2,5] differs");
    in[1] = x;
    in[2] = z;
    assert_error("concat", in, 3, NULL, 0, "concat: input X (slot 2): dtype f64 differs from X's f32");
    in[2] = v;
    assert_error("concat", in, 3, NULL, 0, "concat: input X (slot 2): has 1 dims, expected 2");
    vq_attr ax2 = VQ_ATTR_I("axis", 2);
    assert_error("concat", in, 2, &ax2, 1, "concat: attribute axis: axis 2 is outside [-2, 2)");
    assert_error("concat", &sc, 1, NULL, 0, "concat: input X (slot 0): is a scalar");
    assert_error("concat", in, 0, NULL, 0, "concat: takes at least 1 inputs, got 0");

    int64_t w[2] = {6, 4}, wrong[2] = {5, 4};
    vq_tensor *g = oc_rand(&rng, VQ_F32, 2, w, 0, 1), *gw = oc_rand(&rng, VQ_F32, 2, wrong, 0, 1);
    vq_tensor *gin[3] = {g, x, x};
    vq_attr idx2 = VQ_ATTR_I("index", 2);
    assert_error("concat_grad", gin, 3, &idx2, 1,
                 "concat_grad: attribute index: is 2, outside [0, 2)");
    gin[0] = gw;
    vq_attr idx0 = VQ_ATTR_I("index", 0);
    assert_error("concat_grad", gin, 3, &idx0, 1,
                 "concat_grad: input dOut (slot 0): shape [5,4] is not the concatenated shape [6,4]");
    vq_tensor *ok = oc_run1("concat_grad", (vq_tensor *[]){g, x, x}, 3, &idx0, 1);
    vq_tensor_release(ok);
    vq_tensor *xs[5] = {x, y, z, v, sc};
    for (int i = 0; i < 5; i++)
        vq_tensor_release(xs[i]);
    vq_tensor_release(g);
    vq_tensor_release(gw);
}

Test(ops_shape, bad_slice_attributes_name_the_attribute)
{
    int64_t s[2] = {3, 4};
    vq_tensor *x = oc_rand(&rng, VQ_F32, 2, s, 0, 1);
    vq_attr at[3] = {VQ_ATTR_IS("axes", (int64_t[]){0}, 1),
                     VQ_ATTR_IS("starts", ((int64_t[]){0, 1}), 2),
                     VQ_ATTR_IS("ends", (int64_t[]){2}, 1)};
    assert_error("slice", &x, 1, at, 3, "slice: attribute starts: has 2 entries, axes has 1");
    at[1] = VQ_ATTR_IS("starts", (int64_t[]){0}, 1);
    at[2] = VQ_ATTR_IS("ends", (int64_t[]){0}, 0);
    assert_error("slice", &x, 1, at, 3, "slice: attribute ends: has 0 entries, axes has 1");
    at[2] = VQ_ATTR_IS("ends", (int64_t[]){2}, 1);
    at[0] = VQ_ATTR_IS("axes", (int64_t[]){3}, 1);
    assert_error("slice", &x, 1, at, 3, "slice: attribute axes: axis 3 is outside [-2, 2)");
    at[0] = VQ_ATTR_IS("axes", ((int64_t[]){0, -2}), 2);
    at[1] = VQ_ATTR_IS("starts", ((int64_t[]){0, 0}), 2);
    at[2] = VQ_ATTR_IS("ends", ((int64_t[]){1, 1}), 2);
    assert_error("slice", &x, 1, at, 3, "slice: attribute axes: axis -2 repeats axis 0");
    assert_error("slice", &x, 1, at, 2, "slice: attribute ends (ints) is required");
    /* slice_grad's dOut must have the slice's shape: [1,4] here. */
    at[0] = VQ_ATTR_IS("axes", (int64_t[]){0}, 1);
    at[1] = VQ_ATTR_IS("starts", (int64_t[]){1}, 1);
    at[2] = VQ_ATTR_IS("ends", (int64_t[]){2}, 1);
    vq_tensor *g = oc_rand(&rng, VQ_F32, 2, s, 0, 1);
    vq_tensor *in[2] = {x, g};
    assert_error("slice_grad", in, 2, at, 3,
                 "slice_grad: input dOut (slot 1): shape [3,4] is not the slice's shape [1,4]");
    vq_tensor_release(g);
    vq_tensor_release(x);
}

Test(ops_shape, unknown_cast_dtype_is_an_error_naming_the_attribute)
{
    int64_t s[1] = {2};
    vq_tensor *x = oc_rand(&rng, VQ_F32, 1, s, 0, 1);
    vq_attr at = VQ_ATTR_S("dtype", "float8");
    assert_error("cast", &x, 1, &at, 1, "cast: attribute dtype: unknown dtype \"float8\"");
    assert_error("cast", &x, 1, NULL, 0, "cast: attribute dtype (string) is required");
    vq_attr typed = VQ_ATTR_I("dtype", 1);
    assert_error("cast", &x, 1, &typed, 1, "cast: attribute dtype: expected string, got int");
    vq_tensor_release(x);
}

/* ---- inference with unknown dims (graph preparation) ---- */

static void infer_ok(const char *op, const vq_attr *at, int nat, int nin, const vq__meta *in,
                     int ndim, const int64_t *want)
{
    unsigned char params[VQ__MAX_PARAMS];
    vq__meta out;
    cr_assert_eq(vq__op_infer(vq__op_find(op), at, nat, nin, in, 1, &out, params), 0, "%s: %s",
                 op, vq_errmsg());
    cr_assert_eq(out.ndim, ndim, "%s: rank %d, expected %d", op, out.ndim, ndim);
    for (int i = 0; i < ndim; i++)
        cr_assert_eq(out.shape[i], want[i], "%s: dim %d is %lld, expected %lld", op, i,
                     (long long)out.shape[i], (long long)want[i]);
}

Test(ops_shape, inference_propagates_unknown_dims)
{
    vq__meta x = {.dtype = VQ_F32, .ndim = 2, .shape = {-1, 4}};
    vq_attr perm = VQ_ATTR_IS("perm", ((int64_t[]){1, 0}), 2);
    infer_ok("transpose", &perm, 1, 1, &x, 2, (int64_t[]){4, -1});

    vq_attr r1 = VQ_ATTR_IS("shape", ((int64_t[]){0, -1}), 2);
    infer_ok("reshape", &r1, 1, 1, &x, 2, (int64_t[]){-1, -1});
    vq_attr r2 = VQ_ATTR_IS("shape", ((int64_t[]){-1, 2, 2}), 3);
    infer_ok("reshape", &r2, 1, 1, &x, 3, (int64_t[]){-1, 2, 2});
    vq_attr r3 = VQ_ATTR_IS("shape", ((int64_t[]){8}), 1);
    infer_ok("reshape", &r3, 1, 1, &x, 1, (int64_t[]){8});

    vq__meta two[2] = {x, {.dtype = VQ_F32, .ndim = 2, .shape = {3, -1}}};
    infer_ok("concat", NULL, 0, 2, two, 2, (int64_t[]){-1, 4});
    vq_attr ax1 = VQ_ATTR_I("axis", 1);
    infer_ok("concat", &ax1, 1, 2, two, 2, (int64_t[]){3, -1});

    vq_attr sl[3] = {VQ_ATTR_IS("axes", ((int64_t[]){0, 1}), 2),
                     VQ_ATTR_IS("starts", ((int64_t[]){1, 1}), 2),
                     VQ_ATTR_IS("ends", ((int64_t[]){3, 3}), 2)};
    infer_ok("slice", sl, 3, 1, &x, 2, (int64_t[]){-1, 2});

    vq_attr dt = VQ_ATTR_S("dtype", "i64");
    infer_ok("cast", &dt, 1, 1, &x, 2, (int64_t[]){-1, 4});
}
