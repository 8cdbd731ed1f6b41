/* Tensors and ops on GPUs, on the host-emulated stream backend with two
 * devices: copies host -> device -> host, add / matmul / softmax / adam and
 * lstm / lstm_grad run with vq_op_run on device 0 and device 1 of a
 * threaded engine and compared bit for bit with the same ops on the CPU,
 * device mixing refused naming the slot, the GPU allocator's counters,
 * and no backend -> VQ_ENOSYS. */
#include <varq/varq.h>

#include "../engine/engine_internal.h"
#include "../ops/ops_internal.h" /* vq__gpu_stage_stats */

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "leakcheck.h"

static void gpu_env(void)
{
    setenv("VARQ_GPU_BACKEND", "emulated", 1);
    setenv("VARQ_GPU_EMUL_DEVICES", "2", 1);
}

TestSuite(ops_gpu, .init = gpu_env, .fini = leak_check);

static vq_engine *engine(void)
{
    vq_engine_opts o = {.kind = VQ_ENGINE_THREADED, .cpu_workers = 2, .gpu_streams = 2};
    vq_engine *e = NULL;
    cr_assert_eq(vq_engine_new(&e, &o), 0, "%s", vq_errmsg());
    return e;
}

static vq_ctx gpu(int id)
{
    return (vq_ctx){VQ_DEV_GPU, id};
}

static const vq_ctx cpu = {VQ_DEV_CPU, 0};

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static double urand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) / (double)(1ull << 53);
}

static vq_tensor *rand_f32(int ndim, const int64_t *shape, double lo, double hi)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= shape[i];
    float *v = malloc((size_t)n * sizeof *v);
    for (int64_t i = 0; i < n; i++)
        v[i] = (float)(lo + (hi - lo) * urand());
    vq_tensor *t = NULL;
    cr_assert_eq(vq_tensor_from(&t, VQ_F32, ndim, shape, v), 0, "%s", vq_errmsg());
    free(v);
    return t;
}

static vq_tensor *to(vq_engine *e, vq_tensor *t, vq_ctx dev)
{
    vq_tensor *o = NULL;
    cr_assert_eq(vq_tensor_copy_to(e, t, dev, &o), 0, "%s", vq_errmsg());
    cr_assert_not_null(o);
    cr_assert_eq(vq_tensor_device(o).kind, dev.kind);
    cr_assert_eq(vq_tensor_device(o).id, dev.id);
    return o;
}

/* Copies a GPU tensor back and compares its bytes with a CPU tensor's. */
static void assert_same(vq_engine *e, vq_tensor *g, vq_tensor *c, const char *what)
{
    vq_tensor *h = to(e, g, cpu);
    cr_assert_eq(vq_tensor_wait(h), 0, "%s: %s", what, vq_errmsg());
    cr_assert_eq(vq_tensor_wait(c), 0, "%s: %s", what, vq_errmsg());
    cr_assert_eq(vq_tensor_nbytes(h), vq_tensor_nbytes(c), "%s", what);
    cr_assert_eq(vq_tensor_ndim(h), vq_tensor_ndim(c), "%s", what);
    cr_assert(!memcmp(vq_tensor_data(h), vq_tensor_data(c), vq_tensor_nbytes(c)),
              "%s: GPU result differs from the CPU's", what);
    vq_tensor_release(h);
}

static void run(vq_engine *e, const char *type, vq_tensor *const *in, int nin, vq_tensor **out,
                int nout, const vq_attr *at, int nat)
{
    cr_assert_eq(vq_op_run(e, type, in, nin, out, nout, at, nat), 0, "%s: %s", type,
                 vq_errmsg());
}

Test(ops_gpu, copy_round_trip_keeps_the_bytes)
{
    vq_engine *e = engine();
    int64_t shape[2] = {33, 17};
    vq_tensor *h = rand_f32(2, shape, -1, 1);
    for (int d = 0; d < 2; d++) {
        vq_tensor *g = to(e, h, gpu(d));
        vq_tensor *g2 = to(e, g, gpu(1 - d)); /* device to device */
        vq_tensor *g3 = to(e, g2, gpu(1 - d)); /* same device */
        assert_same(e, g3, h, "round trip");
        vq_tensor_release(g);
        vq_tensor_release(g2);
        vq_tensor_release(g3);
    }
    vq_tensor_release(h);
    cr_assert_eq(vq_wait_all(e), 0, "%s", vq_errmsg());
    vq_engine_free(e);
}

Test(ops_gpu, ops_on_both_devices_match_the_cpu_bit_for_bit)
{
    vq_engine *e = engine();
    int64_t sa[2] = {16, 24}, sb[2] = {24, 8}, sbias[1] = {24};
    vq_tensor *a = rand_f32(2, sa, -2, 2), *b = rand_f32(2, sb, -2, 2);
    vq_tensor *bias = rand_f32(1, sbias, -1, 1);
    vq_attr axis = VQ_ATTR_I("axis", -1);

    /* CPU reference, on the same engine */
    vq_tensor *c_add = NULL, *c_mm = NULL, *c_sm = NULL;
    run(e, "add", (vq_tensor *[]){a, bias}, 2, &c_add, 1, NULL, 0);
    run(e, "matmul", (vq_tensor *[]){c_add, b}, 2, &c_mm, 1, NULL, 0);
    run(e, "softmax", (vq_tensor *[]){c_mm}, 1, &c_sm, 1, &axis, 1);

    for (int d = 0; d < 2; d++) {
        vq_tensor *ga = to(e, a, gpu(d)), *gb = to(e, b, gpu(d)), *gbias = to(e, bias, gpu(d));
        vq_tensor *g_add = NULL, *g_mm = NULL, *g_sm = NULL;
        run(e, "add", (vq_tensor *[]){ga, gbias}, 2, &g_add, 1, NULL, 0);
        cr_assert_eq(vq_tensor_device(g_add).kind, VQ_DEV_GPU);
        cr_assert_eq(vq_tensor_device(g_add).id, d);
        run(e, "matmul", (vq_tensor *[]){g_add, gb}, 2, &g_mm, 1, NULL, 0);
        run(e, "softmax", (vq_tensor *[]){g_mm}, 1, &g_sm, 1, &axis, 1);
        cr_assert_eq(vq_tensor_device(g_sm).id, d);
        assert_same(e, g_add, c_add, "add");
        assert_same(e, g_mm, c_mm, "matmul");
        assert_same(e, g_sm, c_sm, "softmax");
        vq_tensor_release(ga);
        vq_tensor_release(gb);
        vq_tensor_release(gbias);
        vq_tensor_release(g_add);
        vq_tensor_release(g_mm);
        vq_tensor_release(g_sm);
    }
    vq_tensor_release(c_add);
    vq_tensor_release(c_mm);
    vq_tensor_release(c_sm);
    vq_tensor_release(a);
    vq_tensor_release(b);
    vq_tensor_release(bias);
    cr_assert_eq(vq_wait_all(e), 0, "%s", vq_errmsg());
    vq_engine_free(e);
}

Test(ops_gpu, adam_in_place_on_both_devices_matches_the_cpu)
{
    vq_engine *e = engine();
    int64_t shape[2] = {7, 9};
    vq_attr at[2] = {VQ_ATTR_F("learning_rate", 0.01), VQ_ATTR_F("beta1", 0.8)};
    for (int d = 0; d < 2; d++) {
        int64_t start = 3;
        vq_tensor *c[5] = {rand_f32(2, shape, -1, 1), NULL, rand_f32(2, shape, -0.1, 0.1),
                           rand_f32(2, shape, 0, 0.1), NULL};
        cr_assert_eq(vq_tensor_from(&c[4], VQ_I64, 0, NULL, &start), 0);
        vq_tensor *g[5];
        for (int i = 0; i < 5; i++)
            if (c[i])
                g[i] = to(e, c[i], gpu(d));
        for (int s = 0; s < 3; s++) {
            c[1] = rand_f32(2, shape, -1, 1);
            g[1] = to(e, c[1], gpu(d));
            run(e, "adam", c, 5, (vq_tensor *[]){c[0], c[2], c[3], c[4]}, 4, at, 2);
            run(e, "adam", g, 5, (vq_tensor *[]){g[0], g[2], g[3], g[4]}, 4, at, 2);
            vq_tensor_release(c[1]);
            vq_tensor_release(g[1]);
        }
        const char *names[5] = {"Param", "", "Moment1", "Moment2", "Step"};
        for (int i = 0; i < 5; i++)
            if (i != 1) {
                assert_same(e, g[i], c[i], names[i]);
                vq_tensor_release(g[i]);
                vq_tensor_release(c[i]);
            }
    }
    cr_assert_eq(vq_wait_all(e), 0, "%s", vq_errmsg());
    vq_engine_free(e);
}

Test(ops_gpu, mixing_devices_is_einval_naming_the_slot)
{
    vq_engine *e = engine();
    int64_t shape[1] = {4};
    vq_tensor *h = rand_f32(1, shape, 0, 1);
    vq_tensor *g0 = to(e, h, gpu(0)), *g1 = to(e, h, gpu(1));
    vq_tensor *out = NULL;
    cr_assert_eq(vq_op_run(e, "add", (vq_tensor *[]){g0, g1}, 2, &out, 1, NULL, 0), VQ_EINVAL);
    cr_assert_null(out);
    cr_assert(strstr(vq_errmsg(), "add: input Y (slot 1) is on GPU 1"), "%s", vq_errmsg());
    cr_assert_eq(vq_op_run(e, "add", (vq_tensor *[]){g0, h}, 2, &out, 1, NULL, 0), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "input Y (slot 1) is on the CPU"), "%s", vq_errmsg());
    /* a given output on another device */
    vq_tensor *o1 = NULL;
    cr_assert_eq(vq_tensor_new_on(&o1, gpu(1), VQ_F32, 1, shape), 0, "%s", vq_errmsg());
    vq_tensor *outs[1] = {o1};
    cr_assert_eq(vq_op_run(e, "add", (vq_tensor *[]){g0, g0}, 2, outs, 1, NULL, 0), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "output Out (slot 0) is on GPU 1"), "%s", vq_errmsg());
    /* GPU tensors without an engine */
    cr_assert_eq(vq_op_run(NULL, "add", (vq_tensor *[]){g0, g0}, 2, &out, 1, NULL, 0), VQ_EINVAL);
    cr_assert_null(out);
    vq_tensor *c = NULL;
    cr_assert_eq(vq_tensor_copy_to(NULL, g0, cpu, &c), VQ_EINVAL);
    cr_assert_null(c);
    /* no such device */
    vq_tensor *bad = NULL;
    cr_assert_eq(vq_tensor_new_on(&bad, gpu(2), VQ_F32, 1, shape), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "GPU 2"), "%s", vq_errmsg());
    vq_tensor_release(o1);
    vq_tensor_release(g0);
    vq_tensor_release(g1);
    vq_tensor_release(h);
    vq_engine_free(e);
}

Test(ops_gpu, npy_save_writes_a_gpu_tensor_through_a_host_copy)
{
    vq_engine *e = engine();
    int64_t shape[2] = {3, 5};
    vq_tensor *h = rand_f32(2, shape, 0, 1);
    vq_tensor *g = to(e, h, gpu(1));
    char path[] = "/tmp/varq_gpu_npy_XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    close(fd);
    cr_assert_eq(vq_npy_save(path, g), 0, "%s", vq_errmsg());
    vq_tensor *back;
    cr_assert_eq(vq_npy_load(path, &back), 0, "%s", vq_errmsg());
    unlink(path);
    cr_assert(!memcmp(vq_tensor_data(back), vq_tensor_data(h), vq_tensor_nbytes(h)));
    vq_tensor_release(back);
    vq_tensor_release(g);
    vq_tensor_release(h);
    vq_engine_free(e);
}

Test(ops_gpu, host_copies_are_staged_in_reused_pinned_buffers_at_every_size)
{
    vq_engine *e = engine();
    /* 1 byte .. past the staging limit (64 MiB), which copies direct. */
    int64_t sizes[] = {1, 1023, 1024, 1025, 262144, 17 << 20};
    uint64_t uses0, allocs0, uses1, allocs1;
    for (int round = 0; round < 3; round++) {
        if (round == 2)
            vq__gpu_stage_stats(&uses0, &allocs0);
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
            vq_tensor *h = rand_f32(1, &sizes[i], -1, 1);
            vq_tensor *g = to(e, h, gpu(round % 2));
            /* The buffer goes back when the stream reaches the end of the
             * copy: wait for that, so that the next copy finds it. */
            cr_assert_eq(vq_wait_all(e), 0, "%s", vq_errmsg());
            assert_same(e, g, h, "staged round trip");
            vq_tensor_release(g);
            vq_tensor_release(h);
        }
    }
    vq__gpu_stage_stats(&uses1, &allocs1);
    /* Every copy of the last round staged (2 per size but the biggest),
     * in buffers the earlier rounds left in the cache. */
    cr_assert_eq(uses1 - uses0, 2 * 5 + 0, "staged copies: %lu", (unsigned long)(uses1 - uses0));
    cr_assert_eq(allocs1, allocs0, "the last round allocated %lu buffers",
                 (unsigned long)(allocs1 - allocs0));
    int64_t big = (int64_t)(80 << 20) / 4; /* 80 MiB: direct */
    vq_tensor *h = rand_f32(1, &big, -1, 1);
    vq_tensor *g = to(e, h, gpu(0));
    assert_same(e, g, h, "direct round trip");
    vq__gpu_stage_stats(&uses0, &allocs0);
    cr_assert_eq(uses0, uses1, "a copy past 64 MiB was staged");
    vq_tensor_release(g);
    vq_tensor_release(h);
    vq_engine_free(e);
}

Test(ops_gpu, memory_stats_count_live_and_peak_bytes)
{
    vq_mem_stats s0, s;
    for (int d = 0; d < 2; d++) {
        cr_assert_eq(vq_mem_get_stats(gpu(d), &s0), 0, "%s", vq_errmsg());
        cr_assert_eq(vq_mem_reset_peak(gpu(d)), 0);
        cr_assert_eq(vq_mem_trim(gpu(d)), 0);
    }
    vq_engine *e = engine();
    int64_t shape[2] = {64, 64}; /* 16 KiB in f32 */
    vq_tensor *h = rand_f32(2, shape, 0, 1);
    vq_tensor *g = to(e, h, gpu(1));
    vq_tensor *sum = NULL;
    run(e, "add", (vq_tensor *[]){g, g}, 2, &sum, 1, NULL, 0);
    cr_assert_eq(vq_mem_get_stats(gpu(1), &s), 0);
    cr_assert_eq(s.live_bytes, s0.live_bytes + 2 * 16384);
    cr_assert_geq(s.peak_bytes, s.live_bytes);
    cr_assert_eq(s.system_bytes, s.live_bytes);
    cr_assert_geq(s.allocs, 2);
    vq_mem_stats other;
    cr_assert_eq(vq_mem_get_stats(gpu(0), &other), 0);
    cr_assert_eq(other.live_bytes, 0);
    vq_tensor_release(sum);
    vq_tensor_release(g);
    vq_tensor_release(h);
    cr_assert_eq(vq_wait_all(e), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_mem_get_stats(gpu(1), &s), 0);
    cr_assert_eq(s.live_bytes, 0, "live %zu after release", s.live_bytes);
    cr_assert_geq(s.peak_bytes, 2 * 16384);
    cr_assert_eq(vq_mem_reset_peak(gpu(1)), 0);
    cr_assert_eq(vq_mem_get_stats(gpu(1), &s), 0);
    cr_assert_eq(s.peak_bytes, 0);
    cr_assert_eq(vq_mem_get_stats(gpu(5), &s), VQ_EINVAL);
    vq_engine_free(e);
}

Test(ops_gpu, a_tensor_never_used_with_an_engine_frees_on_the_allocator_stream)
{
    /* A GPU tensor never used with an engine frees on the allocator's own
     * stream. */
    int64_t shape[1] = {100};
    vq_tensor *t = NULL;
    cr_assert_eq(vq_tensor_new_on(&t, gpu(0), VQ_F64, 1, shape), 0, "%s", vq_errmsg());
    vq_mem_stats s;
    cr_assert_eq(vq_mem_get_stats(gpu(0), &s), 0);
    cr_assert_eq(s.live_bytes, 800);
    vq_tensor_release(t);
    cr_assert_eq(vq_mem_get_stats(gpu(0), &s), 0);
    cr_assert_eq(s.live_bytes, 0);
}

Test(ops_gpu, no_backend_is_enosys_with_the_reason)
{
    unsetenv("VARQ_GPU_BACKEND");
    unsetenv("VARQ_GPU_EMUL_DEVICES");
    int64_t shape[1] = {4};
    vq_tensor *t = NULL;
    int rc = vq_tensor_new_on(&t, gpu(0), VQ_F32, 1, shape);
    if (rc == 0) {
        /* a real GPU is present: CUDA is the backend, nothing to refuse */
        vq_tensor_release(t);
        cr_skip_test("a CUDA device is present");
    }
    cr_assert_eq(rc, VQ_ENOSYS, "%s", vq_errmsg());
    cr_assert_null(t);
    cr_assert(strstr(vq_errmsg(), "VARQ_GPU_BACKEND=emulated"), "%s", vq_errmsg());
    vq_mem_stats s;
    cr_assert_eq(vq_mem_get_stats(gpu(0), &s), VQ_ENOSYS);
    /* ops on CPU tensors are unaffected */
    vq_tensor *c = NULL, *sum = NULL;
    cr_assert_eq(vq_tensor_new_on(&c, cpu, VQ_F32, 1, shape), 0);
    cr_assert_eq(vq_op_run(NULL, "add", (vq_tensor *[]){c, c}, 2, &sum, 1, NULL, 0), 0);
    vq_tensor_release(sum);
    vq_tensor_release(c);
}

Test(ops_gpu, a_kernel_error_in_stream_work_reaches_vq_tensor_wait)
{
    vq_engine *e = engine();
    const int64_t s[2] = {2, 3}, ls[2] = {2, 1};
    vq_tensor *x = rand_f32(2, s, -1, 1);
    int32_t labels[2] = {1, 7};
    vq_tensor *l = NULL;
    cr_assert_eq(vq_tensor_from(&l, VQ_I32, 2, ls, labels), 0);
    vq_tensor *gx = to(e, x, gpu(1)), *gl = to(e, l, gpu(1));
    vq_tensor *out[2] = {NULL, NULL};
    run(e, "softmax_cross_entropy", (vq_tensor *[]){gx, gl}, 2, out, 2, NULL, 0);
    cr_assert_eq(vq_tensor_wait(out[0]), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "softmax_cross_entropy: label 7 at row 1 is outside [0, 3)"),
              "%s", vq_errmsg());
    cr_assert(strstr(vq_errmsg(), "GPU 1"), "%s", vq_errmsg());
    cr_assert_eq(vq_tensor_wait(out[1]), VQ_EINVAL);
    vq_tensor_release(out[0]);
    vq_tensor_release(out[1]);
    vq_tensor_release(gx);
    vq_tensor_release(gl);
    vq_tensor_release(x);
    vq_tensor_release(l);
    cr_assert_eq(vq_wait_all(e), VQ_EINVAL); /* the stream's sticky error */
    vq_engine_free(e);
}

/* lstm (2 layers, bidirectional, with H0 and C0) and lstm_grad on the
 * emulated GPU: the CPU kernel as stream work, the CPU's bits. */
Test(ops_gpu, lstm_and_its_gradient_on_a_gpu_match_the_cpu_bit_for_bit)
{
    vq_engine *e = engine();
    enum { T = 6, B = 3, I = 5, H = 4, G = 4, NW = 16 };
    vq_tensor *in[NW + 3], *gin[NW + 3];
    int n = 0;
    in[n++] = rand_f32(3, (int64_t[]){T, B, I}, -1, 1);
    for (int l = 0; l < 2; l++)
        for (int d = 0; d < 2; d++) {
            in[n++] = rand_f32(2, (int64_t[]){G * H, l ? 2 * H : I}, -0.5, 0.5);
            in[n++] = rand_f32(2, (int64_t[]){G * H, H}, -0.5, 0.5);
            in[n++] = rand_f32(1, (int64_t[]){G * H}, -0.5, 0.5);
            in[n++] = rand_f32(1, (int64_t[]){G * H}, -0.5, 0.5);
        }
    in[n++] = rand_f32(3, (int64_t[]){4, B, H}, -0.5, 0.5);
    in[n++] = rand_f32(3, (int64_t[]){4, B, H}, -0.5, 0.5);
    vq_attr at[3] = {VQ_ATTR_I("hidden_size", H), VQ_ATTR_I("num_layers", 2),
                     VQ_ATTR_B("bidirectional", true)};
    vq_attr gat[4] = {at[0], at[1], at[2], VQ_ATTR_I("grads", 1)};
    vq_tensor *c_out[4] = {0}, *g_out[4] = {0}, *c_d[NW + 3] = {0}, *g_d[NW + 3] = {0};
    run(e, "lstm", in, n, c_out, 4, at, 3);
    vq_tensor *cg[NW + 5];
    memcpy(cg, in, sizeof in);
    cg[n] = c_out[3];
    cg[n + 1] = c_out[0]; /* dY: any tensor of Y's shape */
    run(e, "lstm_grad", cg, n + 2, c_d, n, gat, 4);
    for (int i = 0; i < n; i++)
        gin[i] = to(e, in[i], gpu(0));
    run(e, "lstm", gin, n, g_out, 4, at, 3);
    vq_tensor *gg[NW + 5];
    memcpy(gg, gin, sizeof gin);
    gg[n] = g_out[3];
    gg[n + 1] = g_out[0];
    run(e, "lstm_grad", gg, n + 2, g_d, n, gat, 4);
    for (int j = 0; j < 4; j++)
        assert_same(e, g_out[j], c_out[j], "lstm");
    for (int i = 0; i < n; i++)
        assert_same(e, g_d[i], c_d[i], "lstm_grad");
    for (int i = 0; i < n; i++) {
        vq_tensor_release(in[i]);
        vq_tensor_release(gin[i]);
        vq_tensor_release(c_d[i]);
        vq_tensor_release(g_d[i]);
    }
    for (int j = 0; j < 4; j++) {
        vq_tensor_release(c_out[j]);
        vq_tensor_release(g_out[j]);
    }
    cr_assert_eq(vq_wait_all(e), 0, "%s", vq_errmsg());
    vq_engine_free(e);
}
