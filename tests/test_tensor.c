/* Tensors: creation, shapes and zeroed storage, scalars and empty tensors,
 * argument errors, dtype names, and what vq_tensor_wait says of a failure
 * the tensor inherited. The CPU allocator under them is test_alloc.c's;
 * ops called on tensors, test_imperative.c's. */
#include <varq/varq.h>

#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "leakcheck.h"

TestSuite(tensor, .fini = leak_check);

Test(tensor, new_tensor_is_zeroed_and_reports_its_shape)
{
    int64_t shape[3] = {2, 3, 4};
    vq_tensor *t;
    cr_assert_eq(vq_tensor_new(&t, VQ_F64, 3, shape), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_tensor_dtype(t), VQ_F64);
    cr_assert_eq(vq_tensor_ndim(t), 3);
    cr_assert_eq(vq_tensor_shape(t)[2], 4);
    cr_assert_eq(vq_tensor_numel(t), 24);
    cr_assert_eq(vq_tensor_nbytes(t), 24 * 8);
    cr_assert_eq((uintptr_t)vq_tensor_data(t) % 64, 0, "not 64-byte aligned");
    for (int i = 0; i < 24; i++)
        cr_assert_eq(((double *)vq_tensor_data(t))[i], 0.0);
    vq_tensor_release(t);
}

Test(tensor, scalars_and_empty_tensors_are_valid)
{
    vq_tensor *s, *e;
    int64_t zero[2] = {3, 0};
    cr_assert_eq(vq_tensor_new(&s, VQ_I32, 0, NULL), 0);
    cr_assert_eq(vq_tensor_numel(s), 1);
    cr_assert_eq(vq_tensor_new(&e, VQ_F32, 2, zero), 0);
    cr_assert_eq(vq_tensor_numel(e), 0);
    cr_assert_not_null(vq_tensor_data(e));
    vq_tensor_release(s);
    vq_tensor_release(e);
}

Test(tensor, bad_arguments_are_errors)
{
    vq_tensor *t;
    int64_t neg[1] = {-1}, big[2] = {INT64_C(1) << 40, INT64_C(1) << 40};
    int64_t nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    cr_assert_eq(vq_tensor_new(&t, VQ_F32, 1, neg), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "dim 0 is -1"), "%s", vq_errmsg());
    cr_assert_eq(vq_tensor_new(&t, VQ_F32, 9, nine), VQ_EINVAL);
    cr_assert_eq(vq_tensor_new(&t, (vq_dtype)VQ_DTYPE_COUNT, 1, nine), VQ_EINVAL);
    cr_assert_eq(vq_tensor_new(&t, VQ_F32, 2, big), VQ_ENOMEM);
    cr_assert_eq(vq_tensor_new(NULL, VQ_F32, 1, nine), VQ_EINVAL);
    unsigned char b[2] = {1, 2};
    int64_t two[1] = {2};
    cr_assert_eq(vq_tensor_from(&t, VQ_BOOL, 1, two, b), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "not 0 or 1"), "%s", vq_errmsg());
}

Test(tensor, dtype_names_round_trip)
{
    for (int i = 0; i < VQ_DTYPE_COUNT; i++) {
        vq_dtype d;
        cr_assert_eq(vq_dtype_parse(vq_dtype_name((vq_dtype)i), &d), 0);
        cr_assert_eq(d, (vq_dtype)i);
    }
    vq_dtype d;
    cr_assert_eq(vq_dtype_parse("float64", &d), 0);
    cr_assert_eq(d, VQ_F64);
    cr_assert_eq(vq_dtype_parse("float16", &d), 0);
    cr_assert_eq(d, VQ_F16);
    cr_assert_eq(vq_dtype_parse("bfloat16", &d), 0);
    cr_assert_eq(d, VQ_BF16);
    cr_assert_eq(vq_dtype_parse("uint8", &d), 0);
    cr_assert_eq(d, VQ_U8);
    cr_assert_eq(vq_dtype_parse("float8", &d), VQ_EINVAL);
    cr_assert_eq(vq_dtype_size(VQ_BOOL), 1);
    static const size_t sizes[VQ_DTYPE_COUNT] = {4, 8, 4, 8, 1, 2, 2, 1, 1, 2, 2, 4, 8};
    for (int i = 0; i < VQ_DTYPE_COUNT; i++)
        cr_assert_eq(vq_dtype_size((vq_dtype)i), sizes[i], "%s", vq_dtype_name((vq_dtype)i));
    cr_assert_eq(vq_dtype_size((vq_dtype)VQ_DTYPE_COUNT), 0);
}

/* ---- the failure a tensor inherited (vq_tensor_wait, tensor.h) ---- */

enum { EAGER, CAPTURED, MIXED }; /* MIXED: div eagerly, the ops after it captured */

struct wait_case {
    int kind; /* VQ_ENGINE_* */
    int mode;
};

/* div fails (b has a zero); add and mul, which read its output and write
 * tensors of their own, are skipped; so is abs, an op later in the chain
 * and pushed after a wait on an unrelated tensor. */
static void failed_chain(const struct wait_case *c, char *own, char *inherited, char *later)
{
    vq_engine_opts o = {.kind = c->kind, .cpu_workers = 2};
    vq_engine *e;
    cr_assert_eq(vq_engine_new(&e, &o), 0, "%s", vq_errmsg());
    int64_t sh[1] = {3};
    int32_t av[3] = {4, 5, 6}, bv[3] = {2, 0, 3};
    vq_tensor *a, *b, *q = NULL, *r = NULL, *m = NULL, *n = NULL;
    cr_assert_eq(vq_tensor_from(&a, VQ_I32, 1, sh, av), 0);
    cr_assert_eq(vq_tensor_from(&b, VQ_I32, 1, sh, bv), 0);
    if (c->mode == CAPTURED)
        cr_assert_eq(vq_capture_begin(e), 0);
    cr_assert_eq(vq_op_run(e, "div", (vq_tensor *[]){a, b}, 2, &q, 1, NULL, 0), 0);
    if (c->mode == MIXED)
        cr_assert_eq(vq_capture_begin(e), 0);
    cr_assert_eq(vq_op_run(e, "add", (vq_tensor *[]){q, a}, 2, &r, 1, NULL, 0), 0);
    cr_assert_eq(vq_op_run(e, "mul", (vq_tensor *[]){r, r}, 2, &m, 1, NULL, 0), 0);
    if (c->mode != EAGER)
        cr_assert_eq(vq_capture_end(e), 0);
    cr_assert_eq(vq_tensor_wait(a), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_op_run(e, "abs", &m, 1, &n, 1, NULL, 0), 0);
    cr_assert_eq(vq_tensor_wait(n), VQ_EINVAL);
    snprintf(later, 256, "%s", vq_errmsg());
    cr_assert_eq(vq_tensor_wait(m), VQ_EINVAL);
    snprintf(inherited, 256, "%s", vq_errmsg());
    cr_assert_eq(vq_tensor_wait(m), 0, "the wait took the failure");
    cr_assert_eq(vq_tensor_wait(q), VQ_EINVAL);
    snprintf(own, 256, "%s", vq_errmsg());
    vq_tensor *ts[] = {a, b, q, r, m, n};
    for (int i = 0; i < 6; i++)
        vq_tensor_release(ts[i]);
    vq_engine_free(e);
}

ParameterizedTestParameters(tensor, a_wait_names_the_op_that_failed_through_skipped_ops)
{
    static struct wait_case cases[] = {
        {VQ_ENGINE_THREADED, EAGER}, {VQ_ENGINE_THREADED, CAPTURED}, {VQ_ENGINE_THREADED, MIXED},
        {VQ_ENGINE_NAIVE, EAGER},    {VQ_ENGINE_NAIVE, CAPTURED},    {VQ_ENGINE_NAIVE, MIXED},
    };
    return cr_make_param_array(struct wait_case, cases, sizeof cases / sizeof cases[0]);
}

ParameterizedTest(struct wait_case *c, tensor, a_wait_names_the_op_that_failed_through_skipped_ops)
{
    char own[256], inherited[256], later[256];
    failed_chain(c, own, inherited, later);
    const char *what = "integer division by zero (or overflow) at output element 1";
    char want[256];
    snprintf(want, sizeof want, "div: %s", what);
    cr_assert_str_eq(own, want, "the failed op's own output: its message");
    snprintf(want, sizeof want, "an op this tensor depends on failed: op 'div' (%s)", what);
    cr_assert_str_eq(inherited, want);
    cr_assert_str_eq(later, want, "after a wait elsewhere, three skipped ops on");
}

/* ---- vq_tensor_wrap: the caller's memory as a tensor ---- */

static int wrap_released;

static void count_release(void *user)
{
    *(int *)user += 1;
}

Test(tensor, wrap_shares_the_callers_memory_and_releases_it_once)
{
    double buf[6] = {1, 2, 3, 4, 5, 6};
    int64_t shape[2] = {2, 3};
    int released = 0;
    vq_tensor *t;
    cr_assert_eq(vq_tensor_wrap(&t, VQ_F64, 2, shape, buf, count_release, &released), 0, "%s",
                 vq_errmsg());
    cr_assert_eq(vq_tensor_data(t), (void *)buf, "no copy: the tensor's bytes are the buffer");
    cr_assert_eq(vq_tensor_numel(t), 6);
    cr_assert_eq(vq_tensor_nbytes(t), 48);
    buf[4] = 50;
    cr_assert_eq(((double *)vq_tensor_data(t))[4], 50.0);
    vq_tensor_retain(t);
    vq_tensor_release(t);
    cr_assert_eq(released, 0, "a reference is still held");
    vq_tensor_release(t);
    cr_assert_eq(released, 1);
}

/* An op reads the wrapped bytes and writes a wrapped output in place; the
 * release waits for the ops pushed on the tensor (one still sleeping when
 * the caller lets go). */
static int sleep_then_read(void *arg, const vq_exec_ctx *x)
{
    (void)x;
    struct timespec ts = {0, 50 * 1000 * 1000};
    nanosleep(&ts, NULL);
    cr_assert_eq(wrap_released, 0, "released while an op on it ran");
    *(float *)arg = 7.0f;
    return 0;
}

Test(tensor, wrap_is_released_after_the_ops_pushed_on_it)
{
    vq_engine *e;
    cr_assert_eq(vq_engine_new(&e, NULL), 0);
    float a[4] = {1, 2, 3, 4}, out[4] = {0};
    int64_t n = 4;
    vq_tensor *ta, *to;
    wrap_released = 0;
    cr_assert_eq(vq_tensor_wrap(&ta, VQ_F32, 1, &n, a, count_release, &wrap_released), 0);
    cr_assert_eq(vq_tensor_wrap(&to, VQ_F32, 1, &n, out, NULL, NULL), 0);
    vq_tensor *in[2] = {ta, ta}, *o[1] = {to};
    cr_assert_eq(vq_op_run(e, "add", in, 2, o, 1, NULL, 0), 0, "%s", vq_errmsg());
    cr_assert_eq(o[0], to, "the given output is written in place");
    cr_assert_eq(vq_tensor_wait(to), 0, "%s", vq_errmsg());
    for (int i = 0; i < 4; i++)
        cr_assert_eq(out[i], 2.0f * a[i]);
    vq_var *v = vq_tensor_var(ta, e);
    cr_assert_not_null(v);
    vq_task task = {.fn = sleep_then_read, .arg = &a[0], .writes = &v, .nwrites = 1};
    cr_assert_eq(vq_push(e, &task), 0);
    vq_tensor_release(ta);
    cr_assert_eq(vq_wait_all(e), 0);
    cr_assert_eq(wrap_released, 1);
    cr_assert_eq(a[0], 7.0f);
    vq_tensor_release(to);
    vq_engine_free(e);
}

Test(tensor, wrap_refuses_bad_arguments_without_releasing)
{
    int released = 0;
    int64_t n = 2, bad = -1;
    char raw[16] = {0};
    vq_tensor *t = (vq_tensor *)raw;
    cr_assert_eq(vq_tensor_wrap(&t, VQ_I32, 1, &n, raw + 1, count_release, &released), VQ_EINVAL);
    cr_assert_null(t);
    cr_assert(strstr(vq_errmsg(), "aligned"), "%s", vq_errmsg());
    cr_assert_eq(vq_tensor_wrap(&t, VQ_I32, 1, &n, NULL, count_release, &released), VQ_EINVAL);
    cr_assert_eq(vq_tensor_wrap(&t, VQ_I32, 1, &bad, raw, count_release, &released), VQ_EINVAL);
    cr_assert_eq(vq_tensor_wrap(&t, (vq_dtype)99, 1, &n, raw, count_release, &released), VQ_EINVAL);
    cr_assert_eq(released, 0);
    /* an empty tensor needs no memory */
    int64_t zero = 0;
    cr_assert_eq(vq_tensor_wrap(&t, VQ_F32, 1, &zero, NULL, count_release, &released), 0);
    vq_tensor_release(t);
    cr_assert_eq(released, 1);
}
