/* Shapes computed from values: the shape and range ops
 * (ops/cpu/shape_value.c), and the ops that read a shape from an input's
 * value (reshape, expand, fill_constant: vq__op_def's value_in), called
 * imperatively and in programs whose feeds change size from run to run,
 * on the CPU and on the emulated GPU backend: a plan per feed-shape
 * signature computes the shape arithmetic when it is prepared; ops whose
 * values preparation cannot know infer when they run. */
#include "fixtures.h"
#include "opcheck.h"

#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "leakcheck.h"

static void setup(void)
{
    setenv("VARQ_GPU_BACKEND", "emulated", 0);
}

TestSuite(shape_values, .init = setup, .fini = leak_check);

static vq_tensor *ints(int n, const int64_t *v)
{
    int64_t shape[1] = {n};
    return tensor_of(VQ_I64, 1, shape, v);
}

static vq_tensor *scalar_of(vq_dtype dt, double v)
{
    return oc_from(dt, 0, NULL, &v);
}

static void assert_ints(vq_tensor *t, int n, const int64_t *want)
{
    cr_assert_eq(vq_tensor_dtype(t), VQ_I64);
    cr_assert_eq(vq_tensor_ndim(t), 1);
    cr_assert_eq(vq_tensor_shape(t)[0], n);
    for (int i = 0; i < n; i++)
        cr_assert_eq(((const int64_t *)vq_tensor_data(t))[i], want[i], "entry %d", i);
}

Test(shape_values, shape_reports_the_dims_between_start_and_end_as_onnx_clamps_them)
{
    static const int64_t dims[4] = {2, 3, 5, 7};
    vq_tensor *x = tensor_new(VQ_F32, 4, dims);
    static const struct {
        int64_t start, end; /* end 99: absent */
        int n;
        int64_t want[4];
    } cases[] = {
        {0, 99, 4, {2, 3, 5, 7}}, {1, 99, 3, {3, 5, 7}}, {-1, 99, 1, {7}},
        {1, 3, 2, {3, 5}},        {-3, -1, 2, {3, 5}},   {0, 100, 4, {2, 3, 5, 7}},
        {-10, 1, 1, {2}},         {3, 1, 0, {0}},        {4, 99, 0, {0}},
    };
    for (int c = 0; c < N_OF(cases); c++) {
        vq_attr at[2] = {VQ_ATTR_I("start", cases[c].start), VQ_ATTR_I("end", cases[c].end)};
        vq_tensor *s = oc_run1("shape", &x, 1, at, cases[c].end == 99 ? 1 : 2);
        assert_ints(s, cases[c].n, cases[c].want);
        vq_tensor_release(s);
    }
    vq_tensor *sc = tensor_new(VQ_F64, 0, NULL);
    vq_tensor *s = oc_run1("shape", &sc, 1, NULL, 0);
    assert_ints(s, 0, NULL);
    vq_tensor_release(s);
    vq_tensor_release(sc);
    vq_tensor_release(x);
}

Test(shape_values, range_gives_start_plus_i_delta_for_ceil_of_the_span_over_delta_elements)
{
    static const struct {
        vq_dtype dt;
        double start, limit, delta;
        int n;
    } cases[] = {
        {VQ_I64, 0, 5, 1, 5},     {VQ_I64, 10, 4, -3, 2}, {VQ_I32, 1, 10, 4, 3},
        {VQ_I32, 3, 3, 1, 0},     {VQ_I64, 5, 0, 1, 0},   {VQ_F32, 1, 2, 0.25, 4},
        {VQ_F64, 1, -1, -0.5, 4}, {VQ_F64, 0, 1, 0.3, 4}, {VQ_I64, -7, 7, 7, 2},
    };
    for (int c = 0; c < N_OF(cases); c++) {
        vq_tensor *in[3] = {scalar_of(cases[c].dt, cases[c].start),
                            scalar_of(cases[c].dt, cases[c].limit),
                            scalar_of(cases[c].dt, cases[c].delta)};
        vq_tensor *r = oc_run1("range", in, 3, NULL, 0);
        cr_assert_eq(vq_tensor_dtype(r), cases[c].dt);
        cr_assert_eq(vq_tensor_ndim(r), 1);
        cr_assert_eq(vq_tensor_shape(r)[0], cases[c].n, "case %d: %lld elements", c,
                     (long long)vq_tensor_shape(r)[0]);
        for (int i = 0; i < cases[c].n; i++) {
            double want = cases[c].dt == VQ_F32
                              ? (double)((float)cases[c].start + (float)i * (float)cases[c].delta)
                              : cases[c].start + i * cases[c].delta;
            cr_assert_eq(oc_get(r, i), want, "case %d entry %d: %g", c, i, oc_get(r, i));
        }
        vq_tensor_release(r);
        release_tensors(in, 3);
    }
}

Test(shape_values, range_refuses_a_zero_delta_and_bounds_that_are_not_scalars)
{
    vq_tensor *in[3] = {scalar_of(VQ_I64, 0), scalar_of(VQ_I64, 4), scalar_of(VQ_I64, 0)};
    cr_assert_eq(oc_try("range", in, 3, 1, NULL, 0), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "Delta"), "%s", vq_errmsg());
    vq_tensor_release(in[2]);
    static const int64_t two[2] = {2, 2};
    in[2] = ints(2, two);
    cr_assert_eq(oc_try("range", in, 3, 1, NULL, 0), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "scalar"), "%s", vq_errmsg());
    vq_tensor_release(in[2]);
    in[2] = scalar_of(VQ_I32, 1);
    cr_assert_eq(oc_try("range", in, 3, 1, NULL, 0), VQ_EINVAL);
    release_tensors(in, 3);
}

Test(shape_values, reshape_expand_and_fill_take_their_shape_from_an_input)
{
    static const int64_t xs[3] = {2, 3, 4};
    uint64_t rng = 7;
    vq_tensor *x = oc_rand(&rng, VQ_F32, 3, xs, -1, 1);
    static const int64_t to[3] = {0, -1, 2};
    vq_tensor *in[2] = {x, ints(3, to)};
    vq_tensor *r = oc_run1("reshape", in, 2, NULL, 0);
    static const int64_t want[3] = {2, 6, 2};
    cr_assert_eq(vq_tensor_ndim(r), 3);
    cr_assert_eq(memcmp(vq_tensor_shape(r), want, sizeof want), 0);
    cr_assert_eq(memcmp(vq_tensor_data(r), vq_tensor_data(x), 24 * sizeof(float)), 0);
    vq_tensor_release(r);
    /* the attribute and the input together, and a float shape, are refused */
    vq_attr at = VQ_ATTR_IS("shape", want, 3);
    cr_assert_eq(oc_try("reshape", in, 2, 1, &at, 1), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "give one"), "%s", vq_errmsg());
    vq_tensor_release(in[1]);
    static const int64_t three[1] = {3}, col_shape[2] = {3, 1};
    in[1] = oc_rand(&rng, VQ_F32, 1, three, 1, 2);
    cr_assert_eq(oc_try("reshape", in, 2, 1, NULL, 0), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "not i64 or i32"), "%s", vq_errmsg());
    vq_tensor_release(in[1]);

    /* expand: [3, 1] to [2, 3, 4] through a shape input */
    vq_tensor *col = oc_rand(&rng, VQ_F64, 2, col_shape, -1, 1);
    in[0] = col, in[1] = ints(3, xs);
    vq_tensor *e = oc_run1("expand", in, 2, NULL, 0);
    cr_assert_eq(memcmp(vq_tensor_shape(e), xs, sizeof xs), 0);
    for (int64_t i = 0; i < 24; i++)
        cr_assert_eq(oc_get(e, i), oc_get(col, i / 4 % 3));
    vq_tensor_release(e);
    vq_tensor_release(col);

    /* fill_constant of a shape given as an input */
    vq_attr fa[2] = {VQ_ATTR_S("dtype", "i32"), VQ_ATTR_F("value", 9)};
    vq_tensor *f = oc_run1("fill_constant", &in[1], 1, fa, 2);
    cr_assert_eq(vq_tensor_dtype(f), VQ_I32);
    cr_assert_eq(memcmp(vq_tensor_shape(f), xs, sizeof xs), 0);
    for (int64_t i = 0; i < 24; i++)
        cr_assert_eq(oc_get(f, i), 9);
    vq_tensor_release(f);
    static const int64_t neg[2] = {2, -1};
    vq_tensor *bad = ints(2, neg);
    cr_assert_eq(oc_try("fill_constant", &bad, 1, 1, fa, 2), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "input Shape: dim 1 is -1"), "%s", vq_errmsg());
    vq_tensor_release(bad);
    vq_tensor_release(in[1]);
    vq_tensor_release(x);
}

/* Out = X + expand(B, shape(X)) and R = range(0, shape(X)[0], 1), with X
 * of any [n, 6]; Y = reshape(X, shape(T)), T a second feed of X's
 * element count. */
static vq_program *dynamic_program(void)
{
    vq_program *p = program_with_vars("f32[-1,6] X; f32[-1,-1] T; f32[1,1] B; i64[2] S; "
                                      "i64[2] ST; i64 zero; i64 one; i64 n; f32[-1,6] E; "
                                      "f32[-1,6] Out; i64[-1] R; f32[-1,-1] Y");
    static const int64_t none[1] = {0}, one_one[2] = {1, 1};
    vq_attr fb[2] = {VQ_ATTR_IS("shape", one_one, 2), VQ_ATTR_F("value", 0.5)};
    cr_assert_geq(vq_program_add_op(p, 0, "fill_constant", NULL, 0, NAMES("B"), 1, fb, 2), 0);
    vq_attr f0[3] = {VQ_ATTR_IS("shape", none, 0), VQ_ATTR_S("dtype", "i64"),
                     VQ_ATTR_F("value", 0)};
    vq_attr f1[3] = {VQ_ATTR_IS("shape", none, 0), VQ_ATTR_S("dtype", "i64"),
                     VQ_ATTR_F("value", 1)};
    cr_assert_geq(vq_program_add_op(p, 0, "fill_constant", NULL, 0, NAMES("zero"), 1, f0, 3), 0);
    cr_assert_geq(vq_program_add_op(p, 0, "fill_constant", NULL, 0, NAMES("one"), 1, f1, 3), 0);
    add_ops(p, 0,
            "shape X -> S; expand B S -> E; add X E -> Out; gather S zero -> n; "
            "range zero n one -> R; shape T -> ST; reshape X ST -> Y");
    return p;
}

static void run_dynamic(vq_engine *e, vq_ctx dev)
{
    vq_exec *ex;
    vq_exec_opts o = {.device = dev};
    cr_assert_eq(vq_exec_new(&ex, e, &o), 0, "%s", vq_errmsg());
    vq_scope *s;
    cr_assert_eq(vq_scope_new(&s), 0);
    vq_program *p = dynamic_program();
    uint64_t rng = 3;
    for (int round = 0; round < 2; round++)
        for (int n = 1; n <= 5; n += 2) {
            int64_t xs[2] = {n, 6}, ts[2] = {3, 2 * n};
            vq_tensor *x = oc_rand(&rng, VQ_F32, 2, xs, -1, 1), *t = tensor_new(VQ_F32, 2, ts);
            vq_tensor *xd = x, *td = t;
            if (dev.kind == VQ_DEV_GPU) {
                cr_assert_eq(vq_tensor_copy_to(e, x, dev, &xd), 0, "%s", vq_errmsg());
                cr_assert_eq(vq_tensor_copy_to(e, t, dev, &td), 0, "%s", vq_errmsg());
            }
            vq_feed fd[2] = {{"X", xd}, {"T", td}};
            vq_fetch ft[3] = {{"Out", NULL}, {"R", NULL}, {"Y", NULL}};
            cr_assert_eq(vq_exec_run(ex, p, s, fd, 2, ft, 3), 0, "n %d: %s", n, vq_errmsg());
            vq_tensor *out = on_host(e, ft[0].tensor), *r = on_host(e, ft[1].tensor);
            vq_tensor *y = on_host(e, ft[2].tensor);
            cr_assert_eq(memcmp(vq_tensor_shape(out), xs, sizeof xs), 0);
            for (int64_t i = 0; i < 6 * n; i++)
                cr_assert_eq(oc_get(out, i), (double)((float)oc_get(x, i) + 0.5f));
            int64_t want[5] = {0, 1, 2, 3, 4};
            assert_ints(r, n, want);
            cr_assert_eq(memcmp(vq_tensor_shape(y), ts, sizeof ts), 0);
            cr_assert_eq(memcmp(vq_tensor_data(y), vq_tensor_data(x), (size_t)(6 * n) * 4), 0);
            vq_tensor *rel[5] = {out, r, y, xd != x ? xd : NULL, td != t ? td : NULL};
            release_tensors(rel, 5);
            vq_tensor_release(x);
            vq_tensor_release(t);
        }
    vq_exec_stats st;
    cr_assert_eq(vq_exec_get_stats(ex, &st), 0);
    /* a plan per feed-shape signature, its shape arithmetic done when it
     * is prepared; the second round finds them all cached */
    cr_assert_eq(st.prepares, 3, "one plan per size (%llu prepared)",
                 (unsigned long long)st.prepares);
    cr_assert_geq(st.cache_hits, 3);
    vq_program_free(p);
    vq_scope_free(s);
    vq_exec_free(ex);
}

Test(shape_values, one_program_runs_feeds_of_every_size_on_the_cpu)
{
    for (int workers = 1; workers <= 2; workers++) {
        vq_engine *e;
        vq_engine_opts eo = {.kind = workers == 1 ? VQ_ENGINE_NAIVE : VQ_ENGINE_THREADED,
                             .cpu_workers = workers};
        cr_assert_eq(vq_engine_new(&e, &eo), 0, "%s", vq_errmsg());
        run_dynamic(e, (vq_ctx){VQ_DEV_CPU, 0});
        vq_engine_free(e);
    }
}

Test(shape_values, one_program_runs_feeds_of_every_size_on_the_gpu)
{
    vq_engine *e;
    vq_engine_opts eo = {.kind = VQ_ENGINE_THREADED, .cpu_workers = 2, .gpu_streams = 2};
    cr_assert_eq(vq_engine_new(&e, &eo), 0, "%s", vq_errmsg());
    run_dynamic(e, (vq_ctx){VQ_DEV_GPU, 0});
    vq_engine_free(e);
}

Test(shape_values, a_program_shape_that_contradicts_the_computed_one_fails_the_run)
{
    vq_engine *e;
    cr_assert_eq(vq_engine_new(&e, NULL), 0);
    vq_exec *ex;
    cr_assert_eq(vq_exec_new(&ex, e, NULL), 0);
    vq_scope *s;
    cr_assert_eq(vq_scope_new(&s), 0);
    vq_program *p =
        program_of("f32[-1,6] X; i64[2] S; f32[4,3] Y", "shape X -> S; reshape X S -> Y");
    int64_t xs[2] = {2, 6};
    vq_tensor *x = tensor_new(VQ_F32, 2, xs);
    run_refused(ex, p, s, "X", x, "Y", "Y");
    vq_tensor_release(x);
    vq_program_free(p);
    vq_scope_free(s);
    vq_exec_free(ex);
    vq_engine_free(e);
}
