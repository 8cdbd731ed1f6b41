/* The ops whose output shapes depend on data (ops/cpu/dynamic.c):
 * nonzero, top_k, unique, compress and non_max_suppression, and tile's
 * Repeats input (ops/cpu/layout.c), called imperatively: against numpy's
 * results (constants generated with numpy 1.24 and ONNX's backend cases)
 * and against plain reference loops over random data with ties; the
 * gradients of top_k, compress and tile against finite differences; the
 * errors, each naming what is wrong; and a program of all of them that one
 * prepared plan runs on feeds of two sizes, on the CPU and the emulated
 * GPU executor, against the same ops run imperatively. */
#include "fixtures.h"
#include "opcheck.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "leakcheck.h"

static uint64_t rng;

static void setup(void)
{
    rng = oc_seed("ops_dynamic");
    setenv("VARQ_GPU_BACKEND", "emulated", 0);
}

TestSuite(ops_dynamic, .init = setup, .fini = leak_check);

static vq_tensor *i64s(int ndim, const int64_t *shape, const int64_t *v)
{
    vq_tensor *t = NULL;
    cr_assert_eq(vq_tensor_from(&t, VQ_I64, ndim, shape, v), 0, "%s", vq_errmsg());
    return t;
}

static vq_tensor *scalar(vq_dtype dt, double v)
{
    return oc_from(dt, 0, NULL, &v);
}

static void assert_shape(vq_tensor *t, int ndim, const int64_t *shape)
{
    cr_assert_eq(vq_tensor_ndim(t), ndim, "rank %d, want %d", vq_tensor_ndim(t), ndim);
    for (int d = 0; d < ndim; d++)
        cr_assert_eq(vq_tensor_shape(t)[d], shape[d], "dim %d is %lld, want %lld", d,
                     (long long)vq_tensor_shape(t)[d], (long long)shape[d]);
}

static void assert_values(vq_tensor *t, int64_t n, const double *want, const char *what)
{
    cr_assert_eq(vq_tensor_numel(t), n, "%s: %lld elements, want %lld", what,
                 (long long)vq_tensor_numel(t), (long long)n);
    for (int64_t i = 0; i < n; i++) {
        double g = oc_get(t, i);
        cr_assert(g == want[i] || (isnan(g) && isnan(want[i])), "%s element %lld: %g, want %g",
                  what, (long long)i, g, want[i]);
    }
}

/* ---- nonzero ---- */

Test(ops_dynamic, nonzero_gives_numpys_coordinates_in_row_major_order)
{
    static const double x[12] = {0, 1.5, 0, -2, 3, 0, 0, 0, 0, 0, -0.0, NAN};
    vq_tensor *t = oc_from(VQ_F64, 2, (const int64_t[]){3, 4}, x);
    vq_tensor *o = oc_run1("nonzero", &t, 1, NULL, 0);
    cr_assert_eq(vq_tensor_dtype(o), VQ_I64);
    assert_shape(o, 2, (const int64_t[]){2, 4});
    static const double want[8] = {0, 0, 1, 2, 1, 3, 0, 3}; /* numpy */
    assert_values(o, 8, want, "nonzero");
    vq_tensor_release(o);
    vq_tensor_release(t);
}

Test(ops_dynamic, nonzero_matches_a_plain_loop_in_every_dtype_and_rank)
{
    static const struct {
        int n;
        int64_t s[4];
    } shapes[] = {{1, {9}}, {2, {3, 5}}, {3, {2, 3, 4}}, {4, {2, 1, 3, 2}}, {2, {0, 3}}, {0, {0}}};
    static const vq_dtype dts[] = {VQ_F32, VQ_F64, VQ_I32, VQ_I64, VQ_BOOL};
    for (int c = 0; c < N_OF(shapes); c++)
        for (int d = 0; d < N_OF(dts); d++) {
            vq_tensor *x = oc_rand(&rng, dts[d], shapes[c].n, shapes[c].s, -1, 2);
            int64_t n = vq_tensor_numel(x), count = 0;
            for (int64_t i = 0; i < n; i++) /* about a third zeros */
                if (dts[d] != VQ_BOOL && oc_get(x, i) < 0)
                    oc_set(x, i, 0);
            for (int64_t i = 0; i < n; i++)
                count += oc_get(x, i) != 0;
            vq_tensor *o = oc_run1("nonzero", &x, 1, NULL, 0);
            int rank = shapes[c].n ? shapes[c].n : 1;
            assert_shape(o, 2, (const int64_t[]){rank, count});
            int64_t j = 0;
            for (int64_t i = 0; i < n; i++) {
                if (oc_get(x, i) == 0)
                    continue;
                int64_t r = i;
                for (int dd = shapes[c].n - 1; dd >= 0; dd--) {
                    cr_assert_eq(oc_get(o, dd * count + j), r % shapes[c].s[dd],
                                 "case %d dtype %d: element %lld dim %d", c, d, (long long)i, dd);
                    r /= shapes[c].s[dd];
                }
                j++;
            }
            vq_tensor_release(o);
            vq_tensor_release(x);
        }
}

/* ---- top_k ---- */

Test(ops_dynamic, top_k_matches_numpys_stable_argsort_with_ties)
{
    static const int64_t v[10] = {3, 1, 3, 2, 1, 0, 5, 5, 5, -1};
    vq_tensor *in[2] = {i64s(2, (const int64_t[]){2, 5}, v),
                        i64s(1, (const int64_t[]){1}, (const int64_t[]){3})};
    /* np.argsort(-t or t, axis=1, kind='stable')[:, :3] */
    static const double want[2][2][6] = {
        {{3, 3, 2, 5, 5, 5}, {0, 2, 3, 1, 2, 3}},
        {{1, 1, 2, -1, 0, 5}, {1, 4, 3, 4, 0, 1}},
    };
    for (int largest = 1; largest >= 0; largest--) {
        vq_attr at = VQ_ATTR_B("largest", largest);
        vq_tensor *out[2];
        oc_run("top_k", in, 2, out, 2, &at, 1);
        assert_shape(out[0], 2, (const int64_t[]){2, 3});
        cr_assert_eq(vq_tensor_dtype(out[1]), VQ_I64);
        assert_values(out[0], 6, want[!largest][0], "values");
        assert_values(out[1], 6, want[!largest][1], "indices");
        release_tensors(out, 2);
    }
    release_tensors(in, 2);
}

/* The reference: k picks, each the first element in the order not yet
 * picked (a plain O(n k) loop). */
static void top_k_reference(vq_tensor *x, int axis, int64_t k, bool largest, double *vals,
                            int64_t *idx)
{
    int nd = vq_tensor_ndim(x);
    const int64_t *s = vq_tensor_shape(x);
    int64_t outer = 1, inner = 1, n = s[axis];
    for (int d = 0; d < axis; d++)
        outer *= s[d];
    for (int d = axis + 1; d < nd; d++)
        inner *= s[d];
    bool *taken = calloc((size_t)(n ? n : 1), 1);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            memset(taken, 0, (size_t)(n ? n : 1));
            for (int64_t j = 0; j < k; j++) {
                int64_t best = -1;
                for (int64_t c = 0; c < n; c++) {
                    if (taken[c])
                        continue;
                    double a = oc_get(x, (o * n + c) * inner + i);
                    if (best < 0) {
                        best = c;
                        continue;
                    }
                    double b = oc_get(x, (o * n + best) * inner + i);
                    bool better = isnan(a)   ? !isnan(b) && largest
                                  : isnan(b) ? !largest
                                  : largest  ? a > b
                                             : a < b;
                    if (better)
                        best = c;
                }
                taken[best] = true;
                vals[(o * k + j) * inner + i] = oc_get(x, (o * n + best) * inner + i);
                idx[(o * k + j) * inner + i] = best;
            }
        }
    free(taken);
}

Test(ops_dynamic, top_k_matches_a_plain_loop_along_every_axis)
{
    static const struct {
        int n;
        int64_t s[3];
    } shapes[] = {{1, {17}}, {2, {4, 6}}, {3, {3, 5, 4}}, {2, {0, 3}}};
    static const vq_dtype dts[] = {VQ_F32, VQ_F64, VQ_I32, VQ_I64};
    double vals[256];
    int64_t idx[256];
    for (int c = 0; c < N_OF(shapes); c++)
        for (int d = 0; d < N_OF(dts); d++)
            for (int axis = 0; axis < shapes[c].n; axis++)
                for (int largest = 0; largest < 2; largest++) {
                    /* few distinct values: ties; a NaN among floats */
                    vq_tensor *x = oc_rand(&rng, dts[d], shapes[c].n, shapes[c].s, -3, 3);
                    if ((dts[d] == VQ_F32 || dts[d] == VQ_F64) && vq_tensor_numel(x) > 2) {
                        for (int64_t i = 0; i < vq_tensor_numel(x); i++)
                            oc_set(x, i, floor(oc_get(x, i)));
                        oc_set(x, 1, NAN);
                    }
                    int64_t dim = shapes[c].s[axis];
                    int64_t k = dim < 3 ? dim : (int64_t)oc_uniform(&rng, 0, (double)dim + 1);
                    vq_tensor *in[2] = {x, scalar(VQ_I64, (double)k)};
                    vq_attr at[2] = {VQ_ATTR_I("axis", axis - shapes[c].n),
                                     VQ_ATTR_B("largest", largest)};
                    vq_tensor *out[2];
                    oc_run("top_k", in, 2, out, 2, at, 2);
                    top_k_reference(x, axis, k, largest, vals, idx);
                    int64_t want[3];
                    memcpy(want, shapes[c].s, sizeof want);
                    want[axis] = k;
                    assert_shape(out[0], shapes[c].n, want);
                    int64_t n = vq_tensor_numel(out[0]);
                    assert_values(out[0], n, vals, "values");
                    for (int64_t i = 0; i < n; i++)
                        cr_assert_eq(oc_get(out[1], i), (double)idx[i],
                                     "case %d dtype %d axis %d largest %d: index %lld", c, d, axis,
                                     largest, (long long)i);
                    release_tensors(out, 2);
                    release_tensors(in, 2);
                }
}

Test(ops_dynamic, top_k_takes_k_as_an_attribute_and_refuses_a_bad_k)
{
    static const int64_t s[1] = {5};
    vq_tensor *x = oc_rand(&rng, VQ_F32, 1, s, -1, 1);
    vq_attr k2 = VQ_ATTR_I("k", 2);
    vq_tensor *out[2];
    oc_run("top_k", &x, 1, out, 2, &k2, 1);
    assert_shape(out[1], 1, (const int64_t[]){2});
    release_tensors(out, 2);
    vq_tensor *in[2] = {x, scalar(VQ_I64, 6)};
    cr_assert_eq(oc_try("top_k", in, 2, 2, NULL, 0), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "K is 6"), "%s", vq_errmsg());
    cr_assert_eq(oc_try("top_k", in, 2, 2, &k2, 1), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "give one"), "%s", vq_errmsg());
    vq_tensor_release(in[1]);
    in[1] = scalar(VQ_I64, -1);
    cr_assert_eq(oc_try("top_k", in, 2, 2, NULL, 0), VQ_EINVAL);
    vq_tensor_release(in[1]);
    in[1] = oc_from(VQ_I64, 1, (const int64_t[]){2}, (const double[]){1, 1});
    cr_assert_eq(oc_try("top_k", in, 2, 2, NULL, 0), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "one element"), "%s", vq_errmsg());
    vq_tensor_release(in[1]);
    cr_assert_eq(oc_try("top_k", &x, 1, 2, NULL, 0), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "input K or attribute k"), "%s", vq_errmsg());
    vq_tensor_release(x);
}

Test(ops_dynamic, top_k_gradient_matches_finite_differences)
{
    static const int64_t s[3] = {3, 7, 2};
    for (int axis = 0; axis < 3; axis++) {
        vq_tensor *in[2] = {oc_rand(&rng, VQ_F64, 3, s, -2, 2), scalar(VQ_I64, 2)};
        vq_attr at[2] = {VQ_ATTR_I("axis", axis), VQ_ATTR_B("largest", axis != 1)};
        double err = oc_grad_check("top_k", in, 2, 2, at, 2, 1u, &rng);
        cr_assert_lt(err, 1e-6, "axis %d: %g", axis, err);
        release_tensors(in, 2);
    }
}

/* ---- unique ---- */

static void run_unique(vq_tensor *x, const vq_attr *at, int nat, vq_tensor **out)
{
    oc_run("unique", &x, 1, out, 4, at, nat);
    for (int j = 1; j < 4; j++)
        cr_assert_eq(vq_tensor_dtype(out[j]), VQ_I64);
}

Test(ops_dynamic, unique_matches_numpy_sorted_and_in_first_occurrence_order)
{
    static const double v[6] = {2, 1, 1, 3, 4, 3};
    vq_tensor *x = oc_from(VQ_F32, 1, (const int64_t[]){6}, v), *out[4];
    /* numpy.unique(v, return_index, return_inverse, return_counts), and
     * reordered by first occurrence as ONNX's cases do */
    static const double want[2][4][6] = {
        {{1, 2, 3, 4}, {1, 0, 3, 4}, {1, 0, 0, 2, 3, 2}, {2, 1, 2, 1}},
        {{2, 1, 3, 4}, {0, 1, 3, 4}, {0, 1, 1, 2, 3, 2}, {1, 2, 2, 1}},
    };
    for (int sorted = 1; sorted >= 0; sorted--) {
        vq_attr at = VQ_ATTR_B("sorted", sorted);
        run_unique(x, &at, 1, out);
        for (int j = 0; j < 4; j++)
            assert_values(out[j], j == 2 ? 6 : 4, want[!sorted][j], "unique");
        release_tensors(out, 4);
    }
    vq_tensor_release(x);

    static const double u[15] = {1, 0, 0, 1, 0, 0, 2, 3, 4, 2, 3, 4, 1, 0, 0};
    x = oc_from(VQ_F32, 2, (const int64_t[]){5, 3}, u);
    static const double y0[6] = {1, 0, 0, 2, 3, 4}, i0[2] = {0, 2}, v0[5] = {0, 0, 1, 1, 0},
                        c0[2] = {3, 2};
    static const double y1[15] = {0, 0, 1, 0, 0, 1, 3, 4, 2, 3, 4, 2, 0, 0, 1}, i1[3] = {1, 2, 0},
                        v1[3] = {2, 0, 1}, c1[3] = {1, 1, 1};
    for (int axis = 0; axis < 2; axis++) {
        vq_attr at = VQ_ATTR_I("axis", axis - 2 * axis); /* 0, and 1 as -1 */
        run_unique(x, &at, 1, out);
        assert_shape(out[0], 2, axis ? (const int64_t[]){5, 3} : (const int64_t[]){2, 3});
        assert_values(out[0], axis ? 15 : 6, axis ? y1 : y0, "Y");
        assert_values(out[1], axis ? 3 : 2, axis ? i1 : i0, "indices");
        assert_values(out[2], axis ? 3 : 5, axis ? v1 : v0, "inverse");
        assert_values(out[3], axis ? 3 : 2, axis ? c1 : c0, "counts");
        release_tensors(out, 4);
    }
    vq_tensor_release(x);
}

Test(ops_dynamic, unique_merges_nans_and_signed_zeros_as_numpy_does)
{
    static const double v[5] = {NAN, 1, NAN, 0.0, -0.0};
    vq_tensor *x = oc_from(VQ_F64, 1, (const int64_t[]){5}, v), *out[4];
    run_unique(x, NULL, 0, out);
    /* numpy 1.24: [0, 1, nan], [3, 1, 0], [2, 1, 2, 0, 0], [2, 1, 2] */
    static const double y[3] = {0, 1, NAN}, i[3] = {3, 1, 0}, inv[5] = {2, 1, 2, 0, 0},
                        c[3] = {2, 1, 2};
    assert_values(out[0], 3, y, "Y");
    cr_assert(!signbit(oc_get(out[0], 0)), "the first occurrence's zero, +0");
    assert_values(out[1], 3, i, "indices");
    assert_values(out[2], 5, inv, "inverse");
    assert_values(out[3], 3, c, "counts");
    release_tensors(out, 4);
    vq_tensor_release(x);
}

/* The reference: slices compared pairwise (a plain O(m^2) loop). */
Test(ops_dynamic, unique_matches_a_plain_loop_over_random_slices)
{
    static const vq_dtype dts[] = {VQ_F32, VQ_F64, VQ_I32, VQ_I64, VQ_BOOL};
    for (int d = 0; d < N_OF(dts); d++)
        for (int axis = -1; axis < 3; axis++)
            for (int sorted = 0; sorted < 2; sorted++) {
                static const int64_t s[3] = {2, 9, 2};
                vq_tensor *x = oc_rand(&rng, dts[d], 3, s, 0, 2); /* 0 or 1: many repeats */
                for (int64_t i = 0; i < 36; i++)
                    oc_set(x, i, floor(oc_get(x, i)));
                vq_attr at[2] = {VQ_ATTR_B("sorted", sorted), VQ_ATTR_I("axis", axis)};
                vq_tensor *out[4];
                run_unique(x, at, axis < 0 ? 1 : 2, out);
                int64_t outer = 1, m = 36, inner = 1;
                if (axis >= 0) {
                    m = s[axis];
                    for (int i = 0; i < axis; i++)
                        outer *= s[i];
                    for (int i = axis + 1; i < 3; i++)
                        inner *= s[i];
                }
                int64_t u = vq_tensor_numel(out[1]);
#define SLICE_CMP(xa, a, xb, b, ma, mb)                               \
    ({                                                                \
        int r_ = 0;                                                   \
        for (int64_t o = 0; o < outer && !r_; o++)                    \
            for (int64_t i = 0; i < inner && !r_; i++) {              \
                double p_ = oc_get(xa, (o * (ma) + (a)) * inner + i), \
                       q_ = oc_get(xb, (o * (mb) + (b)) * inner + i); \
                r_ = (p_ > q_) - (p_ < q_);                           \
            }                                                         \
        r_;                                                           \
    })
                int64_t distinct = 0;
                for (int64_t a = 0; a < m; a++) {
                    int64_t first = a;
                    for (int64_t b = 0; b < a && first == a; b++)
                        if (SLICE_CMP(x, a, x, b, m, m) == 0)
                            first = b;
                    distinct += first == a;
                    /* its Y slice holds it, and Indices its first occurrence */
                    int64_t r = (int64_t)oc_get(out[2], a);
                    cr_assert(r >= 0 && r < u);
                    cr_assert_eq(SLICE_CMP(out[0], r, x, a, u, m), 0, "slice %lld", (long long)a);
                    cr_assert_eq(oc_get(out[1], r), (double)first);
                }
                cr_assert_eq(u, distinct, "dtype %d axis %d: %lld distinct, want %lld", d, axis,
                             (long long)u, (long long)distinct);
                for (int64_t r = 0; r + 1 < u; r++) /* the order */
                    if (sorted)
                        cr_assert_lt(SLICE_CMP(out[0], r, out[0], r + 1, u, u), 0);
                    else
                        cr_assert_lt(oc_get(out[1], r), oc_get(out[1], r + 1));
                for (int64_t r = 0; r < u; r++) {
                    int64_t n = 0;
                    for (int64_t a = 0; a < m; a++)
                        n += oc_get(out[2], a) == r;
                    cr_assert_eq(oc_get(out[3], r), (double)n);
                }
#undef SLICE_CMP
                release_tensors(out, 4);
                vq_tensor_release(x);
            }
}

/* ---- compress ---- */

static vq_tensor *bools(int n, const int *v)
{
    double d[32];
    for (int i = 0; i < n; i++)
        d[i] = v[i];
    return oc_from(VQ_BOOL, 1, (const int64_t[]){n}, d);
}

Test(ops_dynamic, compress_matches_numpy_along_an_axis_and_flattened)
{
    double a[24];
    for (int i = 0; i < 24; i++)
        a[i] = i;
    vq_tensor *in[2] = {oc_from(VQ_F64, 3, (const int64_t[]){2, 3, 4}, a),
                        bools(3, (const int[]){1, 0, 1})};
    vq_attr ax = VQ_ATTR_I("axis", 1);
    vq_tensor *o = oc_run1("compress", in, 2, &ax, 1);
    static const double want[16] = {0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15, 20, 21, 22, 23};
    assert_shape(o, 3, (const int64_t[]){2, 2, 4});
    assert_values(o, 16, want, "compress axis 1");
    vq_tensor_release(o);
    vq_tensor_release(in[1]);
    in[1] = bools(12, (const int[]){0, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 1});
    o = oc_run1("compress", in, 2, NULL, 0);
    static const double flat[4] = {1, 2, 5, 11};
    assert_shape(o, 1, (const int64_t[]){4});
    assert_values(o, 4, flat, "compress flattened");
    vq_tensor_release(o);
    vq_tensor_release(in[1]);
    /* shorter: the rest left out; longer: false past the dim, or refused */
    vq_attr a0 = VQ_ATTR_I("axis", -3);
    in[1] = bools(1, (const int[]){1});
    o = oc_run1("compress", in, 2, &a0, 1);
    assert_shape(o, 3, (const int64_t[]){1, 3, 4});
    assert_values(o, 12, a, "compress short");
    vq_tensor_release(o);
    vq_tensor_release(in[1]);
    in[1] = bools(4, (const int[]){0, 1, 0, 0});
    o = oc_run1("compress", in, 2, &a0, 1);
    assert_values(o, 12, a + 12, "compress long");
    vq_tensor_release(o);
    vq_tensor_release(in[1]);
    in[1] = bools(4, (const int[]){0, 1, 0, 1});
    cr_assert_eq(oc_try("compress", in, 2, 1, &a0, 1), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "true at 3"), "%s", vq_errmsg());
    vq_tensor_release(in[1]);
    in[1] = oc_from(VQ_I64, 1, (const int64_t[]){2}, (const double[]){1, 0});
    cr_assert_eq(oc_try("compress", in, 2, 1, &a0, 1), VQ_EINVAL);
    release_tensors(in, 2);
}

Test(ops_dynamic, compress_matches_a_plain_loop_and_its_gradient_finite_differences)
{
    static const int64_t s[3] = {3, 4, 5};
    for (int axis = -1; axis < 3; axis++) {
        int64_t dim = axis < 0 ? 60 : s[axis];
        double cond[60];
        for (int i = 0; i < dim; i++)
            cond[i] = oc_uniform(&rng, 0, 1) < 0.5;
        cond[0] = 1;
        vq_tensor *in[2] = {oc_rand(&rng, VQ_F64, 3, s, -2, 2), oc_from(VQ_BOOL, 1, &dim, cond)};
        vq_attr at = VQ_ATTR_I("axis", axis);
        vq_tensor *o = oc_run1("compress", in, 2, &at, axis < 0 ? 0 : 1);
        int64_t outer = 1, inner = 1, j = 0;
        if (axis >= 0) {
            for (int i = 0; i < axis; i++)
                outer *= s[i];
            for (int i = axis + 1; i < 3; i++)
                inner *= s[i];
        }
        for (int64_t q = 0; q < outer; q++)
            for (int64_t c = 0; c < dim; c++)
                for (int64_t i = 0; i < inner && cond[c]; i++)
                    cr_assert_eq(oc_get(o, j++), oc_get(in[0], (q * dim + c) * inner + i));
        cr_assert_eq(j, vq_tensor_numel(o));
        vq_tensor_release(o);
        double err = oc_grad_check("compress", in, 2, 1, &at, axis < 0 ? 0 : 1, 1u, &rng);
        cr_assert_lt(err, 1e-6, "axis %d: %g", axis, err);
        release_tensors(in, 2);
    }
}

/* ---- non_max_suppression ---- */

/* ONNX's backend cases (onnx/backend/test/case/node/nonmaxsuppression.py):
 * six boxes, one class. */
static const float onnx_boxes[24] = {0, 0,  1, 1,  0, 0.1f,  1, 1.1f,  0, -0.1f, 1, 0.9f,
                                     0, 10, 1, 11, 0, 10.1f, 1, 11.1f, 0, 100,   1, 101};
static const float onnx_flipped[24] = {1, 1,  0, 0,  0, 0.1f,  1, 1.1f,  0, 0.9f, 1, -0.1f,
                                       0, 10, 1, 11, 1, 10.1f, 0, 11.1f, 1, 101,  0, 100};
static const float onnx_centers[24] = {0.5f, 0.5f,  1, 1, 0.5f, 0.6f,  1, 1, 0.5f, 0.4f,   1, 1,
                                       0.5f, 10.5f, 1, 1, 0.5f, 10.6f, 1, 1, 0.5f, 100.5f, 1, 1};
static const float onnx_scores[6] = {0.9f, 0.75f, 0.6f, 0.95f, 0.5f, 0.3f};

static vq_tensor *f32s(int ndim, const int64_t *shape, const float *v)
{
    vq_tensor *t = NULL;
    cr_assert_eq(vq_tensor_from(&t, VQ_F32, ndim, shape, v), 0, "%s", vq_errmsg());
    return t;
}

static vq_tensor *nms(const float *boxes, const float *scores, int64_t b, int64_t c, int64_t s,
                      double max_out, double iou, double thr, int center)
{
    vq_tensor *in[5] = {f32s(3, (const int64_t[]){b, s, 4}, boxes),
                        f32s(3, (const int64_t[]){b, c, s}, scores),
                        oc_from(VQ_I64, 1, (const int64_t[]){1}, &max_out),
                        oc_from(VQ_F32, 1, (const int64_t[]){1}, &iou),
                        isnan(thr) ? NULL : oc_from(VQ_F32, 1, (const int64_t[]){1}, &thr)};
    vq_attr at = VQ_ATTR_I("center_point_box", center);
    vq_tensor *o = oc_run1("non_max_suppression", in, in[4] ? 5 : 4, &at, 1);
    release_tensors(in, in[4] ? 5 : 4);
    cr_assert_eq(vq_tensor_dtype(o), VQ_I64);
    cr_assert_eq(vq_tensor_ndim(o), 2);
    cr_assert_eq(vq_tensor_shape(o)[1], 3);
    return o;
}

static void assert_selected(vq_tensor *o, int n, const double *boxes, const char *what)
{
    double want[3 * 16] = {0};
    for (int i = 0; i < n; i++)
        want[3 * i] = 0, want[3 * i + 1] = 0, want[3 * i + 2] = boxes[i];
    assert_values(o, 3 * n, want, what);
    vq_tensor_release(o);
}

Test(ops_dynamic, non_max_suppression_gives_onnxs_selections)
{
    static const double by_iou[3] = {3, 0, 5}, by_scores[2] = {3, 0}, limit[2] = {3, 0};
    assert_selected(nms(onnx_boxes, onnx_scores, 1, 1, 6, 3, 0.5, 0, 0), 3, by_iou, "by IOU");
    assert_selected(nms(onnx_boxes, onnx_scores, 1, 1, 6, 3, 0.5, 0.4, 0), 2, by_scores,
                    "by IOU and scores");
    assert_selected(nms(onnx_flipped, onnx_scores, 1, 1, 6, 3, 0.5, 0, 0), 3, by_iou, "flipped");
    assert_selected(nms(onnx_centers, onnx_scores, 1, 1, 6, 3, 0.5, 0, 1), 3, by_iou,
                    "center point boxes");
    assert_selected(nms(onnx_boxes, onnx_scores, 1, 1, 6, 2, 0.5, 0, 0), 2, limit, "limit");
    assert_selected(nms(onnx_boxes, onnx_scores, 1, 1, 6, 0, 0.5, 0, 0), 0, NULL, "max 0");
    assert_selected(nms(onnx_boxes, onnx_scores, 1, 1, 6, 3, 0.5, NAN, 0), 3, by_iou,
                    "no score threshold");
    /* identical boxes, equal scores: the first wins */
    float same[40], eq[10];
    for (int i = 0; i < 10; i++) {
        memcpy(same + 4 * i, (const float[]){0, 0, 1, 1}, sizeof(float[4]));
        eq[i] = 0.9f;
    }
    static const double first[1] = {0};
    assert_selected(nms(same, eq, 1, 1, 10, 3, 0.5, 0, 0), 1, first, "identical boxes");
    /* two batches and two classes: batch-major, then class */
    float boxes2[48], scores2[12];
    memcpy(boxes2, onnx_boxes, sizeof onnx_boxes);
    memcpy(boxes2 + 24, onnx_boxes, sizeof onnx_boxes);
    memcpy(scores2, onnx_scores, sizeof onnx_scores);
    memcpy(scores2 + 6, onnx_scores, sizeof onnx_scores);
    vq_tensor *o = nms(boxes2, scores2, 2, 1, 6, 2, 0.5, 0, 0);
    static const double two_batches[12] = {0, 0, 3, 0, 0, 0, 1, 0, 3, 1, 0, 0};
    assert_values(o, 12, two_batches, "two batches");
    vq_tensor_release(o);
    o = nms(onnx_boxes, scores2, 1, 2, 6, 2, 0.5, 0, 0);
    static const double two_classes[12] = {0, 0, 3, 0, 0, 0, 0, 1, 3, 0, 1, 0};
    assert_values(o, 12, two_classes, "two classes");
    vq_tensor_release(o);
}

/* The reference: per class, repeatedly the best remaining candidate (a
 * plain loop), kept unless a kept box's IoU with it is over the threshold,
 * IoU computed in double from the corners. */
static double iou_of(const float *a, const float *b)
{
    double ax0 = fmin(a[1], a[3]), ax1 = fmax(a[1], a[3]), ay0 = fmin(a[0], a[2]),
           ay1 = fmax(a[0], a[2]), bx0 = fmin(b[1], b[3]), bx1 = fmax(b[1], b[3]),
           by0 = fmin(b[0], b[2]), by1 = fmax(b[0], b[2]);
    double w = fmin(ax1, bx1) - fmax(ax0, bx0), h = fmin(ay1, by1) - fmax(ay0, by0);
    if (w <= 0 || h <= 0)
        return 0;
    double i = w * h;
    return i / ((ax1 - ax0) * (ay1 - ay0) + (bx1 - bx0) * (by1 - by0) - i);
}

Test(ops_dynamic, non_max_suppression_matches_a_plain_loop_on_random_boxes)
{
    enum { B = 2, C = 3, S = 40 };
    float boxes[B * S * 4], scores[B * C * S];
    for (int i = 0; i < B * S; i++) {
        float y = (float)oc_uniform(&rng, 0, 10), x = (float)oc_uniform(&rng, 0, 10);
        float h = (float)oc_uniform(&rng, 0.5, 4), w = (float)oc_uniform(&rng, 0.5, 4);
        float v[4] = {y, x, y + h, x + w};
        memcpy(boxes + 4 * i, v, sizeof v);
    }
    for (int i = 0; i < B * C * S; i++) /* ties among a few scores */
        scores[i] = (float)floor(oc_uniform(&rng, 0, 8)) / 8;
    const double iou = 0.3, thr = 0.2;
    const int max_out = 5;
    vq_tensor *o = nms(boxes, scores, B, C, S, max_out, iou, thr, 0);
    int64_t row = 0;
    for (int b = 0; b < B; b++)
        for (int c = 0; c < C; c++) {
            const float *s = scores + (b * C + c) * S;
            bool done[S] = {0};
            int kept[S], nk = 0;
            while (nk < max_out) {
                int best = -1;
                for (int i = 0; i < S; i++)
                    if (!done[i] && s[i] > (float)thr && (best < 0 || s[i] > s[best]))
                        best = i;
                if (best < 0)
                    break;
                done[best] = true;
                bool keep = true;
                for (int q = 0; q < nk && keep; q++) {
                    double v = iou_of(boxes + (b * S + best) * 4, boxes + (b * S + kept[q]) * 4);
                    cr_assert(fabs(v - iou) > 1e-5, "an IoU at the threshold: pick another seed");
                    keep = v <= iou;
                }
                if (!keep)
                    continue;
                kept[nk++] = best;
                cr_assert_lt(row, vq_tensor_shape(o)[0]);
                cr_assert_eq(oc_get(o, 3 * row), b);
                cr_assert_eq(oc_get(o, 3 * row + 1), c);
                cr_assert_eq(oc_get(o, 3 * row + 2), best, "row %lld", (long long)row);
                row++;
            }
        }
    cr_assert_eq(row, vq_tensor_shape(o)[0]);
    vq_tensor_release(o);
}

/* torchvision's batched_nms: one NMS over every class, each class' boxes
 * shifted apart, thousands kept; against the plain loop. The CPU kernel
 * compares a candidate only with kept boxes near it in x (ops/cpu/
 * dynamic.c), which must not change what it keeps: boxes of one class
 * overlap, some have no width, and with a NaN box every pair is
 * compared. */
Test(ops_dynamic, non_max_suppression_of_many_shifted_classes_keeps_what_a_plain_loop_keeps)
{
    enum { S = 3000, GROUPS = 60 };
    static float boxes[S * 4], scores[S];
    for (int with_nan = 0; with_nan < 2; with_nan++) {
        for (int i = 0; i < S; i++) {
            float off = (float)(i % GROUPS) * 1000;
            float y = (float)oc_uniform(&rng, 0, 50) + off,
                  x = (float)oc_uniform(&rng, 0, 50) + off;
            float h = (float)oc_uniform(&rng, 1, 20),
                  w = i % 97 ? (float)oc_uniform(&rng, 1, 20) : 0;
            float v[4] = {y, x, y + h, x + w};
            memcpy(boxes + 4 * i, v, sizeof v);
            scores[i] = (float)oc_uniform(&rng, 0, 1);
        }
        if (with_nan)
            boxes[4 * 17 + 1] = NAN;
        const double iou = 0.5;
        vq_tensor *o = nms(boxes, scores, 1, 1, S, 100000, iou, 0, 0);
        static bool done[S];
        static int kept[S];
        memset(done, 0, sizeof done);
        int nk = 0;
        int64_t row = 0;
        for (;;) {
            int best = -1;
            for (int i = 0; i < S; i++)
                if (!done[i] && scores[i] > 0 && (best < 0 || scores[i] > scores[best]))
                    best = i;
            if (best < 0)
                break;
            done[best] = true;
            bool keep = true;
            for (int q = 0; q < nk && keep; q++) {
                double v = iou_of(boxes + best * 4, boxes + kept[q] * 4);
                cr_assert(fabs(v - iou) > 1e-5, "an IoU at the threshold: pick another seed");
                keep = !(v > iou);
            }
            if (!keep)
                continue;
            kept[nk++] = best;
            cr_assert_lt(row, vq_tensor_shape(o)[0]);
            cr_assert_eq(oc_get(o, 3 * row + 2), best, "nan %d row %lld", with_nan, (long long)row);
            row++;
        }
        cr_assert_eq(row, vq_tensor_shape(o)[0]);
        cr_assert_gt(row, S / 4, "only %lld kept", (long long)row);
        vq_tensor_release(o);
    }
}

Test(ops_dynamic, non_max_suppression_refuses_bad_shapes_and_thresholds)
{
    vq_tensor *in[4] = {f32s(3, (const int64_t[]){1, 6, 4}, onnx_boxes),
                        f32s(3, (const int64_t[]){1, 1, 5}, onnx_scores), scalar(VQ_I64, 3),
                        scalar(VQ_F32, 0.5)};
    cr_assert_eq(oc_try("non_max_suppression", in, 4, 1, NULL, 0), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "disagree"), "%s", vq_errmsg());
    vq_tensor_release(in[1]);
    in[1] = f32s(3, (const int64_t[]){1, 1, 6}, onnx_scores);
    vq_tensor_release(in[3]);
    in[3] = scalar(VQ_F32, 1.5);
    cr_assert_eq(oc_try("non_max_suppression", in, 4, 1, NULL, 0), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "IouThreshold"), "%s", vq_errmsg());
    vq_tensor_release(in[3]);
    in[3] = scalar(VQ_F32, 0.5);
    vq_attr at = VQ_ATTR_I("center_point_box", 2);
    cr_assert_eq(oc_try("non_max_suppression", in, 4, 1, &at, 1), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "center_point_box"), "%s", vq_errmsg());
    release_tensors(in, 4);
}

/* ---- tile's Repeats input ---- */

Test(ops_dynamic, tile_takes_its_repeats_from_an_input_and_its_gradient_sums_the_tiles)
{
    static const int64_t s[2] = {2, 3};
    vq_tensor *in[2] = {oc_rand(&rng, VQ_F64, 2, s, -1, 1),
                        i64s(1, (const int64_t[]){2}, (const int64_t[]){3, 2})};
    vq_tensor *o = oc_run1("tile", in, 2, NULL, 0);
    assert_shape(o, 2, (const int64_t[]){6, 6});
    for (int64_t i = 0; i < 36; i++)
        cr_assert_eq(oc_get(o, i), oc_get(in[0], (i / 6 % 2) * 3 + i % 3));
    vq_tensor_release(o);
    double err = oc_grad_check("tile", in, 2, 1, NULL, 0, 1u, &rng);
    cr_assert_lt(err, 1e-6, "%g", err);
    vq_attr at = VQ_ATTR_IS("repeats", ((const int64_t[]){1, 1}), 2);
    cr_assert_eq(oc_try("tile", in, 2, 1, &at, 1), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "give one"), "%s", vq_errmsg());
    vq_tensor_release(in[1]);
    in[1] = i64s(1, (const int64_t[]){2}, (const int64_t[]){3, -1});
    cr_assert_eq(oc_try("tile", in, 2, 1, NULL, 0), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "below 0"), "%s", vq_errmsg());
    release_tensors(in, 2);
}

/* ---- in programs ---- */

/* Every op here over the feeds X (f32[-1,-1]), C (a condition on X's
 * elements), K, Repeats, Boxes and Scores, whose sizes change between
 * runs of the one plan. */
static vq_program *dynamic_program(void)
{
    return program_of("f32[-1,-1] X; bool[-1] C; i64[1] K; i64[2] R; f32[1,-1,4] B; "
                      "f32[1,2,-1] S; i64[1] M; f32[1] I; i64[2,-1] NZ; f32[-1,-1] TV; "
                      "i64[-1,-1] TI; f32[-1] UY; i64[-1] UI; i64[-1] UV; i64[-1] UC; "
                      "f32[-1] CX; i64[-1,3] SEL; f32[-1,-1] T",
                      "nonzero X -> NZ; top_k X K -> TV TI; unique X -> UY UI UV UC; "
                      "compress X C -> CX; non_max_suppression B S M I -> SEL; tile X R -> T");
}

static const char *const fetched[] = {"NZ", "TV", "TI", "UY", "UI", "UV", "UC", "CX", "SEL", "T"};

static void run_program(vq_ctx dev)
{
    vq_engine *e;
    vq_engine_opts eo = {.kind = VQ_ENGINE_THREADED, .cpu_workers = 2, .gpu_streams = 2};
    cr_assert_eq(vq_engine_new(&e, &eo), 0, "%s", vq_errmsg());
    vq_exec *ex;
    vq_exec_opts o = {.device = dev};
    cr_assert_eq(vq_exec_new(&ex, e, &o), 0, "%s", vq_errmsg());
    vq_scope *sc;
    cr_assert_eq(vq_scope_new(&sc), 0);
    vq_program *p = dynamic_program();
    for (int round = 0; round < 4; round++) {
        int64_t rows = round % 2 ? 5 : 3, cols = round % 2 ? 6 : 4, n = rows * cols;
        int64_t xs[2] = {rows, cols}, spatial = 4 + 3 * (round % 2);
        vq_tensor *x = oc_rand(&rng, VQ_F32, 2, xs, -2, 3);
        for (int64_t i = 0; i < n; i++)
            oc_set(x, i, floor(oc_get(x, i)) * (i % 3 != 0)); /* zeros and repeats */
        double cond[30], k = (double)(round % 2 ? 4 : 2), reps[2] = {2, (double)(round + 1)};
        for (int64_t i = 0; i < n; i++)
            cond[i] = oc_uniform(&rng, 0, 1) < 0.5;
        double mo = 2, iou = 0.4;
        vq_tensor *in[8] = {
            x,
            oc_from(VQ_BOOL, 1, &n, cond),
            oc_from(VQ_I64, 1, (const int64_t[]){1}, &k),
            oc_from(VQ_I64, 1, (const int64_t[]){2}, reps),
            oc_rand(&rng, VQ_F32, 3, (const int64_t[]){1, spatial, 4}, 0, 3),
            oc_rand(&rng, VQ_F32, 3, (const int64_t[]){1, 2, spatial}, 0, 1),
            oc_from(VQ_I64, 1, (const int64_t[]){1}, &mo),
            oc_from(VQ_F32, 1, (const int64_t[]){1}, &iou),
        };
        static const char *const names[8] = {"X", "C", "K", "R", "B", "S", "M", "I"};
        vq_feed fd[8];
        vq_tensor *dv[8] = {0};
        for (int i = 0; i < 8; i++) {
            dv[i] = in[i];
            if (dev.kind == VQ_DEV_GPU)
                cr_assert_eq(vq_tensor_copy_to(e, in[i], dev, &dv[i]), 0, "%s", vq_errmsg());
            fd[i] = (vq_feed){names[i], dv[i]};
        }
        vq_fetch ft[10];
        for (int j = 0; j < 10; j++)
            ft[j] = (vq_fetch){fetched[j], NULL};
        cr_assert_eq(vq_exec_run(ex, p, sc, fd, 8, ft, 10), 0, "round %d: %s", round, vq_errmsg());
        /* the same ops imperatively */
        vq_tensor *want[10];
        oc_run("nonzero", &in[0], 1, &want[0], 1, NULL, 0);
        oc_run("top_k", (vq_tensor *[]){in[0], in[2]}, 2, &want[1], 2, NULL, 0);
        oc_run("unique", &in[0], 1, &want[3], 4, NULL, 0);
        oc_run("compress", (vq_tensor *[]){in[0], in[1]}, 2, &want[7], 1, NULL, 0);
        oc_run("non_max_suppression", (vq_tensor *[]){in[4], in[5], in[6], in[7]}, 4, &want[8], 1,
               NULL, 0);
        oc_run("tile", (vq_tensor *[]){in[0], in[3]}, 2, &want[9], 1, NULL, 0);
        for (int j = 0; j < 10; j++) {
            vq_tensor *got = on_host(e, ft[j].tensor);
            cr_assert_eq(vq_tensor_dtype(got), vq_tensor_dtype(want[j]), "%s", fetched[j]);
            assert_shape(got, vq_tensor_ndim(want[j]), vq_tensor_shape(want[j]));
            cr_assert_eq(memcmp(vq_tensor_data(got), vq_tensor_data(want[j]),
                                vq_tensor_numel(want[j]) * vq_dtype_size(vq_tensor_dtype(got))),
                         0, "round %d: %s differs", round, fetched[j]);
            vq_tensor_release(got);
        }
        release_tensors(want, 10);
        for (int i = 0; i < 8; i++)
            if (dv[i] != in[i])
                vq_tensor_release(dv[i]);
        release_tensors(in, 8);
    }
    vq_exec_stats st;
    cr_assert_eq(vq_exec_get_stats(ex, &st), 0);
    /* a plan per feed-shape signature; the values read at run time (the
     * data's count of nonzeros, K) change nothing there */
    cr_assert_eq(st.prepares, 2, "a plan per size (%llu prepared)",
                 (unsigned long long)st.prepares);
    vq_program_free(p);
    vq_scope_free(sc);
    vq_exec_free(ex);
    vq_engine_free(e);
}

Test(ops_dynamic, one_program_runs_every_op_on_data_of_two_sizes_on_the_cpu)
{
    run_program((vq_ctx){VQ_DEV_CPU, 0});
}

Test(ops_dynamic, one_program_runs_every_op_on_data_of_two_sizes_on_the_gpu)
{
    run_program((vq_ctx){VQ_DEV_GPU, 0});
}
