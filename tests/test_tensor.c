/* Tensors, the CPU allocator, the registry's listing, and imperative op
 * calls on an engine: ordering, references held by pending ops, errors
 * reaching vq_tensor_wait. */
#include <varq/varq.h>

#include <criterion/criterion.h>
#include <string.h>
#include <time.h>
#include "leakcheck.h"

TestSuite(tensor, .fini = leak_check);
TestSuite(alloc, .fini = leak_check);
TestSuite(registry, .fini = leak_check);
TestSuite(imperative, .fini = leak_check);


static vq_ctx cpu0 = {VQ_DEV_CPU, 0};

static vq_mem_stats stats(void)
{
    vq_mem_stats s;
    cr_assert_eq(vq_mem_get_stats(cpu0, &s), 0);
    return s;
}

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
    cr_assert_eq(vq_tensor_new(&t, (vq_dtype)7, 1, nine), VQ_EINVAL);
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
    cr_assert_eq(vq_dtype_parse("float16", &d), VQ_EINVAL);
    cr_assert_eq(vq_dtype_size(VQ_BOOL), 1);
}

Test(alloc, released_storage_returns_to_the_allocator)
{
    vq_mem_stats before = stats();
    int64_t shape[1] = {1000};
    vq_tensor *t;
    cr_assert_eq(vq_tensor_new(&t, VQ_F32, 1, shape), 0);
    vq_tensor_retain(t);
    cr_assert_eq(stats().live_bytes, before.live_bytes + 4000);
    vq_tensor_release(t);
    cr_assert_eq(stats().live_bytes, before.live_bytes + 4000, "one reference is left");
    vq_tensor_release(t);
    vq_mem_stats after = stats();
    cr_assert_eq(after.live_bytes, before.live_bytes);
    cr_assert_geq(after.cached_bytes, 4000, "freed block is cached for reuse");
    cr_assert_eq(vq_mem_trim(cpu0), 0);
    cr_assert_eq(stats().cached_bytes, 0);
}

Test(alloc, steady_state_reuses_blocks_and_peak_stays_flat)
{
    int64_t shapes[4][2] = {{64, 64}, {64, 10}, {1, 64}, {300, 7}};
    size_t peak_after_first = 0, system_after_first = 0;
    uint64_t allocs_before = 0, reuses_before = 0;
    for (int it = 0; it < 100; it++) {
        vq_tensor *t[4];
        for (int i = 0; i < 4; i++)
            cr_assert_eq(vq_tensor_new(&t[i], VQ_F32, 2, shapes[i]), 0);
        for (int i = 0; i < 4; i++)
            vq_tensor_release(t[i]);
        vq_mem_stats s = stats();
        if (it == 0) {
            peak_after_first = s.peak_bytes;
            system_after_first = s.system_bytes;
            allocs_before = s.allocs;
            reuses_before = s.reuses;
        } else {
            cr_assert_eq(s.peak_bytes, peak_after_first, "peak grew at iteration %d", it);
            cr_assert_eq(s.system_bytes, system_after_first, "new memory at iteration %d", it);
        }
    }
    vq_mem_stats s = stats();
    cr_assert_eq(s.allocs - allocs_before, 99 * 4);
    cr_assert_eq(s.reuses - reuses_before, 99 * 4, "every later allocation is a reuse");
}

Test(alloc, size_classes_waste_at_most_a_quarter)
{
    cr_assert_eq(vq_mem_trim(cpu0), 0);
    for (int64_t n = 1; n < 100000; n = n * 3 + 1) {
        vq_mem_stats b = stats();
        vq_tensor *t;
        cr_assert_eq(vq_tensor_new(&t, VQ_BOOL, 1, &n), 0);
        vq_mem_stats a = stats();
        size_t got = a.system_bytes - b.system_bytes;
        cr_assert_geq(got, (size_t)n);
        cr_assert_leq(got, n <= 64 ? 64 : (size_t)n * 5 / 4 + 1, "%lld bytes took %zu",
                      (long long)n, got);
        vq_tensor_release(t);
        cr_assert_eq(vq_mem_trim(cpu0), 0);
    }
}

Test(alloc, peak_can_be_reset)
{
    int64_t n = 4096;
    vq_tensor *t;
    cr_assert_eq(vq_tensor_new(&t, VQ_F64, 1, &n), 0);
    vq_tensor_release(t);
    cr_assert_geq(stats().peak_bytes, 4096 * 8);
    cr_assert_eq(vq_mem_reset_peak(cpu0), 0);
    cr_assert_eq(stats().peak_bytes, stats().live_bytes);
    cr_assert_eq(vq_mem_get_stats((vq_ctx){VQ_DEV_GPU, 0}, &(vq_mem_stats){0}), VQ_ENOSYS);
}

Test(registry, lists_every_op_in_order_with_a_signature)
{
    int n = vq_op_count();
    cr_assert_geq(n, 6);
    for (int i = 0; i < n; i++) {
        cr_assert_not_null(vq_op_name(i));
        if (i)
            cr_assert_lt(strcmp(vq_op_name(i - 1), vq_op_name(i)), 0);
        cr_assert_not_null(vq_op_signature(vq_op_name(i)));
    }
    cr_assert_null(vq_op_name(n));
    cr_assert_str_eq(vq_op_signature("scale"), "scale(X) -> Out; scale:float=1 bias:float=0");
    cr_assert_null(vq_op_signature("nope"));
}

static vq_engine *engine(int kind, int workers)
{
    vq_engine *e;
    vq_engine_opts o = {.kind = kind, .cpu_workers = workers};
    cr_assert_eq(vq_engine_new(&e, &o), 0, "%s", vq_errmsg());
    return e;
}

/* x = 1, then 200 times x = x + x alternated with y = x * 0.5: the engine
 * must keep each read after the write before it. */
static void chain(vq_engine *e)
{
    int64_t n = 1000;
    vq_tensor *x, *half, *y = NULL;
    cr_assert_eq(vq_tensor_new(&x, VQ_F64, 1, &n), 0);
    double h = 0.5;
    int64_t one = 1;
    cr_assert_eq(vq_tensor_from(&half, VQ_F64, 1, &one, &h), 0);
    for (int64_t i = 0; i < n; i++)
        ((double *)vq_tensor_data(x))[i] = (double)i;
    for (int it = 0; it < 20; it++) {
        vq_tensor *in[2] = {x, x}, *out[1] = {x};
        cr_assert_eq(vq_op_run(e, "add", in, 2, out, 1, NULL, 0), 0, "%s", vq_errmsg());
        vq_tensor *in2[2] = {x, half}, *o2[1] = {NULL};
        cr_assert_eq(vq_op_run(e, "mul", in2, 2, o2, 1, NULL, 0), 0, "%s", vq_errmsg());
        vq_tensor_release(y); /* the pending mul that wrote it keeps it alive */
        y = o2[0];
    }
    cr_assert_eq(vq_tensor_wait(y), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_tensor_wait(x), 0);
    for (int64_t i = 0; i < n; i++) {
        double want = (double)i * (double)(1 << 20);
        cr_assert_eq(((double *)vq_tensor_data(x))[i], want);
        cr_assert_eq(((double *)vq_tensor_data(y))[i], want / 2);
    }
    vq_tensor_release(x);
    vq_tensor_release(y);
    vq_tensor_release(half);
}

Test(imperative, ops_on_an_engine_run_in_program_order)
{
    vq_engine *engines[4] = {engine(VQ_ENGINE_THREADED, 1), engine(VQ_ENGINE_THREADED, 2),
                             engine(VQ_ENGINE_THREADED, 8), engine(VQ_ENGINE_NAIVE, 0)};
    for (int i = 0; i < 4; i++) {
        chain(engines[i]);
        cr_assert_eq(vq_wait_all(engines[i]), 0);
        vq_engine_free(engines[i]);
    }
}

static int slow_fill(void *arg, const vq_exec_ctx *x)
{
    (void)x;
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
    double *d = vq_tensor_data(arg);
    d[0] = 42;
    return 0;
}

Test(imperative, released_tensors_live_until_their_ops_are_done)
{
    vq_engine *e = engine(VQ_ENGINE_THREADED, 2);
    vq_mem_stats before = stats();
    int64_t n = 1;
    vq_tensor *x, *y[1] = {NULL};
    cr_assert_eq(vq_tensor_new(&x, VQ_F64, 1, &n), 0);
    /* A caller's own op on the tensor's var, holding no reference. */
    vq_var *w[1] = {vq_tensor_var(x, e)};
    cr_assert_not_null(w[0]);
    vq_task t = {.fn = slow_fill, .arg = x, .writes = w, .nwrites = 1};
    cr_assert_eq(vq_push(e, &t), 0);
    vq_attr a = VQ_ATTR_F("scale", 2);
    cr_assert_eq(vq_op_run(e, "scale", &x, 1, y, 1, &a, 1), 0, "%s", vq_errmsg());
    vq_tensor_release(x); /* storage must outlive slow_fill and scale */
    cr_assert_eq(vq_tensor_wait(y[0]), 0);
    cr_assert_eq(((double *)vq_tensor_data(y[0]))[0], 84);
    vq_tensor_release(y[0]);
    cr_assert_eq(vq_wait_all(e), 0);
    cr_assert_eq(stats().live_bytes, before.live_bytes);
    vq_engine_free(e);
}

Test(imperative, kernel_errors_reach_the_outputs_and_what_depends_on_them)
{
    vq_engine *e = engine(VQ_ENGINE_THREADED, 2);
    int64_t n = 2;
    int32_t a[2] = {4, 6}, b[2] = {2, 0};
    vq_tensor *x, *y, *q[1] = {NULL}, *r[1] = {NULL};
    cr_assert_eq(vq_tensor_from(&x, VQ_I32, 1, &n, a), 0);
    cr_assert_eq(vq_tensor_from(&y, VQ_I32, 1, &n, b), 0);
    vq_tensor *in[2] = {x, y};
    cr_assert_eq(vq_op_run(e, "div", in, 2, q, 1, NULL, 0), 0, "checks pass; the kernel fails");
    vq_tensor *in2[2] = {q[0], x};
    cr_assert_eq(vq_op_run(e, "add", in2, 2, r, 1, NULL, 0), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_tensor_wait(r[0]), VQ_EINVAL);
    cr_assert_eq(vq_tensor_wait(q[0]), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "div: integer division by zero"), "%s", vq_errmsg());
    cr_assert_eq(vq_tensor_wait(q[0]), 0, "the error was reported once");
    vq_tensor_release(x);
    vq_tensor_release(y);
    vq_tensor_release(q[0]);
    vq_tensor_release(r[0]);
    vq_wait_all(e);
    vq_engine_free(e);
}

Test(imperative, static_errors_push_nothing_and_create_nothing)
{
    vq_engine *e = engine(VQ_ENGINE_THREADED, 1);
    int64_t s1[1] = {3}, s2[1] = {4};
    vq_tensor *x, *y, *o[1] = {NULL};
    cr_assert_eq(vq_tensor_new(&x, VQ_F32, 1, s1), 0);
    cr_assert_eq(vq_tensor_new(&y, VQ_F32, 1, s2), 0);
    vq_mem_stats before = stats();
    vq_tensor *in[2] = {x, y};
    cr_assert_eq(vq_op_run(e, "add", in, 2, o, 1, NULL, 0), VQ_EINVAL);
    cr_assert_null(o[0]);
    cr_assert_eq(stats().live_bytes, before.live_bytes);
    in[1] = NULL;
    cr_assert_eq(vq_op_run(e, "add", in, 2, o, 1, NULL, 0), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "add: input Y (slot 1) is NULL"), "%s", vq_errmsg());
    cr_assert_eq(vq_op_run(e, NULL, in, 2, o, 1, NULL, 0), VQ_EINVAL);
    vq_tensor_release(x);
    vq_tensor_release(y);
    vq_engine_free(e);
}

Test(imperative, a_tensor_belongs_to_one_engine)
{
    vq_engine *e1 = engine(VQ_ENGINE_THREADED, 1), *e2 = engine(VQ_ENGINE_NAIVE, 0);
    int64_t n = 2;
    vq_tensor *x, *o[1] = {NULL};
    cr_assert_eq(vq_tensor_new(&x, VQ_F32, 1, &n), 0);
    cr_assert_not_null(vq_tensor_var(x, e1));
    cr_assert_eq(vq_tensor_var(x, e1), vq_tensor_var(x, e1));
    cr_assert_null(vq_tensor_var(x, e2));
    cr_assert_eq(vq_op_run(e2, "relu", &x, 1, o, 1, NULL, 0) < 0, 1);
    cr_assert_null(o[0]);
    vq_tensor_release(x);
    vq_wait_all(e1);
    vq_engine_free(e1);
    vq_engine_free(e2);
}
