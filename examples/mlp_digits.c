/* Trains a 64 -> 128 -> 10 MLP (ReLU, softmax cross-entropy, Adam) on
 * scikit-learn's digits through varq's graph layer and prints the loss and
 * the held-out accuracy of each epoch.
 *
 * Usage: mlp_digits [DATA_DIR] [--epochs N] [--gpu ID] [--trace FILE]
 * DATA_DIR holds train_x/train_y/test_x/test_y .npy files written by
 * scripts/digits_to_npy.py (default build/digits). --gpu trains on GPU ID
 * (the backend is VARQ_GPU_BACKEND's: CUDA, or emulated). With --trace, one more
 * training step runs on a profiling engine and its Chrome trace is written
 * to FILE. Exit status 0 when the final accuracy is at least 95%.
 *
 * Data parallel: `mpirun -np 2 mlp_digits --dist [--bucket BYTES]
 * [--check-steps N]` (any number of ranks dividing the batch of 64) trains
 * the same model with every rank computing the gradient of its shard of
 * each global batch of 64, averaged by bucketed all-reduces
 * (vq_dist_data_parallel; buckets of BYTES, default 8192, so that the
 * last layer's all-reduce overlaps the first layer's backward). An epoch
 * then uses only whole batches. Every rank also trains the plain model on
 * the whole global batches for the first N steps (default 20) and prints
 * how far apart the two sets of weights are (they must be within 1e-5
 * relative, else the exit status is 1), and at the end the step time
 * against compute alone and the all-reduces alone: the overlap fraction. */
#include <varq/varq.h>

#define EXAMPLE_NAME "mlp_digits"
#include "digits_data.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BATCH 64

/* The forward program: x [-1,64] -> linear h1 [.,128] -> relu -> linear
 * logits [.,10]; probs and loss by softmax cross-entropy with labels y. */
static void build(vq_program **startup, vq_program **main)
{
    CHECK(vq_program_new(startup));
    CHECK(vq_program_new(main));
    int64_t xs[2] = {-1, 64}, ys[1] = {-1};
    CHECK(vq_program_add_var(*main, 0, "x", VQ_F32, 2, xs, false));
    CHECK(vq_program_add_var(*main, 0, "y", VQ_I64, 1, ys, false));
    CHECK(vq_layer_linear(*main, *startup, "x", "h1", 128, 1));
    CHECK(vq_layer_activation(*main, "relu", "h1", "a1"));
    CHECK(vq_layer_linear(*main, *startup, "a1", "logits", 10, 3));
    CHECK(vq_layer_softmax_cross_entropy(*main, "logits", "y", "probs", "loss"));
}

/* t itself when it is on the CPU, else a host copy made through e; the
 * caller releases the result and t. */
static vq_tensor *on_host(vq_engine *e, vq_tensor *t)
{
    if (vq_tensor_device(t).kind == VQ_DEV_CPU)
        return vq_tensor_retain(t);
    vq_tensor *h;
    CHECK(vq_tensor_copy_to(e, t, (vq_ctx){VQ_DEV_CPU, 0}, &h));
    CHECK(vq_tensor_wait(h));
    return h;
}

static double accuracy(vq_engine *e, vq_exec *ex, vq_program *eval, vq_scope *s, vq_tensor *x,
                       vq_tensor *y)
{
    vq_feed feeds[2] = {{"x", x}, {"y", y}};
    vq_fetch fetch = {"probs", NULL};
    CHECK(vq_exec_run(ex, eval, s, feeds, 2, &fetch, 1));
    vq_tensor *probs = on_host(e, fetch.tensor);
    int64_t n = vq_tensor_shape(y)[0];
    int64_t right = digits_right(vq_tensor_data(probs), y, n);
    vq_tensor_release(probs);
    vq_tensor_release(fetch.tensor);
    return (double)right / (double)n;
}

/* One more step on a fresh engine that records a trace, with a copy of
 * the scope (tensors belong to the engine they were used with). */
static void trace_one_step(vq_engine *e_main, vq_ctx dev, vq_program *main, vq_scope *s,
                           vq_tensor *x, vq_tensor *y, const char *path)
{
    vq_engine *e;
    vq_exec *ex;
    vq_scope *copy;
    vq_engine_opts o = {.flags = VQ_ENGINE_PROFILE};
    vq_exec_opts xo = {.device = dev};
    CHECK(vq_engine_new(&e, &o));
    CHECK(vq_exec_new(&ex, e, &xo));
    CHECK(vq_scope_new(&copy));
    for (int i = 0; i < vq_scope_count(s); i++) {
        vq_tensor *t = on_host(e_main, vq_scope_get(s, vq_scope_name(s, i))), *c;
        CHECK(vq_tensor_from(&c, vq_tensor_dtype(t), vq_tensor_ndim(t), vq_tensor_shape(t),
                             vq_tensor_data(t)));
        CHECK(vq_scope_set(copy, vq_scope_name(s, i), c));
        vq_tensor_release(c);
        vq_tensor_release(t);
    }
    vq_tensor *xc, *yc;
    CHECK(vq_tensor_from(&xc, VQ_F32, 2, vq_tensor_shape(x), vq_tensor_data(x)));
    CHECK(vq_tensor_from(&yc, VQ_I64, 1, vq_tensor_shape(y), vq_tensor_data(y)));
    vq_feed feeds[2] = {{"x", xc}, {"y", yc}};
    CHECK(vq_exec_run(ex, main, copy, feeds, 2, NULL, 0));
    CHECK(vq_profiler_dump(e, path));
    printf("trace of one training step: %s (open in https://ui.perfetto.dev)\n", path);
    vq_tensor_release(xc);
    vq_tensor_release(yc);
    vq_exec_free(ex);
    vq_scope_free(copy);
    vq_engine_free(e);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The largest relative difference (norm of the difference over the norm)
 * between the parameters of two scopes. */
static double params_differ(vq_scope *a, vq_scope *b)
{
    const char *names[] = {"h1.w", "h1.b", "logits.w", "logits.b"};
    double worst = 0;
    for (int i = 0; i < 4; i++) {
        vq_tensor *x = vq_scope_get(a, names[i]), *y = vq_scope_get(b, names[i]);
        CHECK(vq_tensor_wait(x));
        CHECK(vq_tensor_wait(y));
        double diff = 0, norm = 0;
        for (int64_t k = 0; k < vq_tensor_numel(y); k++) {
            double u = ((float *)vq_tensor_data(x))[k], v = ((float *)vq_tensor_data(y))[k];
            diff += (u - v) * (u - v);
            norm += v * v;
        }
        double rel = norm > 0 ? sqrt(diff / norm) : sqrt(diff);
        worst = rel > worst ? rel : worst;
    }
    return worst;
}

/* Seconds per step of `steps` runs of main on batches of m rows (the
 * first rows of x, y), on scope s. */
static double time_steps(vq_exec *ex, vq_program *main, vq_scope *s, vq_tensor *train_x,
                         vq_tensor *train_y, const int *order, int m, int steps)
{
    vq_tensor *x = digits_rows(train_x, order, m), *y = digits_rows(train_y, order, m);
    vq_feed feeds[2] = {{"x", x}, {"y", y}};
    CHECK(vq_exec_run(ex, main, s, feeds, 2, NULL, 0)); /* warm */
    double t0 = now_s();
    for (int i = 0; i < steps; i++)
        CHECK(vq_exec_run(ex, main, s, feeds, 2, NULL, 0));
    double t = (now_s() - t0) / steps;
    vq_tensor_release(x);
    vq_tensor_release(y);
    return t;
}

/* The data-parallel run's closing figures: step time against compute
 * alone (the plain program on one shard) and the all-reduces alone (the
 * gradients' bytes in buckets of the same size), on scratch copies; each
 * the best of 5 interleaved rounds (the machine may be shared). */
static void overlap_report(vq_engine *e, vq_dist *d, vq_program *main_dp, vq_program *main_plain,
                           vq_scope *s, vq_tensor *train_x, vq_tensor *train_y,
                           const int *order, int m, size_t bucket)
{
    int steps = 20;
    vq_exec *ex;
    vq_scope *scratch;
    CHECK(vq_exec_new(&ex, e, NULL));
    CHECK(vq_scope_new(&scratch));
    for (int i = 0; i < vq_scope_count(s); i++) { /* a copy: training state stays as it is */
        vq_tensor *t = vq_scope_get(s, vq_scope_name(s, i)), *c;
        CHECK(vq_tensor_wait(t));
        CHECK(vq_tensor_from(&c, vq_tensor_dtype(t), vq_tensor_ndim(t), vq_tensor_shape(t),
                             vq_tensor_data(t)));
        CHECK(vq_scope_set(scratch, vq_scope_name(s, i), c));
        vq_tensor_release(c);
    }
    /* the all-reduces alone: the gradients in backward order, bucketed as
     * vq_dist_data_parallel does (greedy, a large one alone) */
    const int64_t grads[4] = {10, 128 * 10, 128, 64 * 128};
    int64_t fill[4];
    int nb = 0;
    for (int i = 0; i < 4; i++) {
        if (nb == 0 || (size_t)(fill[nb - 1] + grads[i]) * sizeof(float) > bucket)
            fill[nb++] = 0;
        fill[nb - 1] += grads[i];
    }
    vq_tensor *g[4];
    for (int i = 0; i < nb; i++)
        CHECK(vq_tensor_new(&g[i], VQ_F32, 1, &fill[i]));
    CHECK(vq_wait_all(e));
    double step = 1e30, compute = 1e30, comm = 1e30;
    for (int round = 0; round < 5; round++) {
        step = fmin(step, time_steps(ex, main_dp, scratch, train_x, train_y, order, m, steps));
        compute = fmin(compute,
                       time_steps(ex, main_plain, scratch, train_x, train_y, order, m, steps));
        double t0 = now_s();
        for (int k = 0; k < steps; k++) {
            for (int i = 0; i < nb; i++)
                CHECK(vq_dist_allreduce(d, g[i], g[i], VQ_REDUCE_MEAN));
            CHECK(vq_wait_all(e));
        }
        comm = fmin(comm, (now_s() - t0) / steps);
    }
    for (int i = 0; i < nb; i++)
        vq_tensor_release(g[i]);
    if (vq_dist_rank(d) == 0)
        printf("step %.0f us = compute alone %.0f us + all-reduces alone %.0f us (%d buckets) "
               "- overlap: overlap fraction %.2f (1: communication fully hidden)\n",
               1e6 * step, 1e6 * compute, 1e6 * comm, nb, (compute + comm - step) / comm);
    vq_exec_free(ex);
    vq_scope_free(scratch);
}

int main(int argc, char **argv)
{
    const char *dir = "build/digits", *trace = NULL;
    int epochs = 20, dist = 0, check_steps = 20;
    size_t bucket = 8192;
    vq_ctx dev = {VQ_DEV_CPU, 0};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--epochs") && i + 1 < argc)
            epochs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--gpu") && i + 1 < argc)
            dev = (vq_ctx){VQ_DEV_GPU, atoi(argv[++i])};
        else if (!strcmp(argv[i], "--trace") && i + 1 < argc)
            trace = argv[++i];
        else if (!strcmp(argv[i], "--dist"))
            dist = 1;
        else if (!strcmp(argv[i], "--bucket") && i + 1 < argc)
            bucket = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--check-steps") && i + 1 < argc)
            check_steps = atoi(argv[++i]);
        else if (argv[i][0] != '-')
            dir = argv[i];
        else {
            fprintf(stderr,
                    "usage: mlp_digits [DATA_DIR] [--epochs N] [--gpu ID] [--trace FILE]\n"
                    "       mpirun -np P mlp_digits [DATA_DIR] --dist [--bucket BYTES] "
                    "[--check-steps N]\n");
            return 2;
        }
    }
    vq_tensor *train_x = digits_load(dir, "train_x"), *train_y = digits_load(dir, "train_y");
    vq_tensor *test_x = digits_load(dir, "test_x"), *test_y = digits_load(dir, "test_y");
    int n = (int)vq_tensor_shape(train_x)[0];

    vq_program *startup, *main_p, *eval;
    build(&startup, &main_p);
    CHECK(vq_program_clone(main_p, &eval)); /* forward only, for accuracy */
    vq_optimizer adam = {.kind = VQ_OPT_ADAM, .learning_rate = 0.005};
    CHECK(vq_optimizer_minimize(main_p, startup, "loss", &adam));

    vq_engine *e;
    vq_exec *ex;
    vq_scope *s;
    vq_exec_opts xo = {.device = dev};
    CHECK(vq_engine_new(&e, NULL));
    /* Data parallel: the gradient all-reduces and the startup broadcast
     * go into the programs; the plain ones stay for the reference run. */
    vq_dist *d = NULL;
    vq_program *ref_startup = NULL, *ref_main = NULL;
    int rank = 0, size = 1;
    if (dist) {
        if (dev.kind == VQ_DEV_GPU) {
            fprintf(stderr, "mlp_digits: --dist trains on the CPU\n");
            return 2;
        }
        CHECK(vq_dist_new(&d, e, NULL));
        rank = vq_dist_rank(d);
        size = vq_dist_size(d);
        if (BATCH % size) {
            fprintf(stderr, "mlp_digits: %d ranks do not divide the batch of %d\n", size, BATCH);
            return 2;
        }
        build(&ref_startup, &ref_main);
        CHECK(vq_optimizer_minimize(ref_main, ref_startup, "loss", &adam));
        vq_dist_dp_opts dpo = {.bucket_bytes = bucket};
        int nb = vq_dist_data_parallel(main_p, startup, d, &dpo);
        CHECK(nb);
        if (rank == 0)
            printf("data parallel on %d ranks: shards of %d rows, %d gradient buckets of at most "
                   "%zu bytes\n",
                   size, BATCH / size, nb, bucket);
    }
    CHECK(vq_exec_new(&ex, e, &xo));
    CHECK(vq_scope_new(&s));
    CHECK(vq_exec_run(ex, startup, s, NULL, 0, NULL, 0));
    if (dev.kind == VQ_DEV_GPU)
        printf("training on GPU %d\n", dev.id);
    /* the reference: one process, the whole global batch */
    vq_exec *ref_ex = NULL;
    vq_scope *ref_s = NULL;
    int global_step = 0, bad_equivalence = 0;
    if (dist) {
        CHECK(vq_exec_new(&ref_ex, e, NULL));
        CHECK(vq_scope_new(&ref_s));
        CHECK(vq_exec_run(ref_ex, ref_startup, ref_s, NULL, 0, NULL, 0));
    }
    double train_s = 0;
    int train_steps = 0;

    int *order = malloc((size_t)n * sizeof *order);
    for (int i = 0; i < n; i++)
        order[i] = i;
    unsigned rng = 12345;
    double acc = 0;
    for (int epoch = 1; epoch <= epochs; epoch++) {
        for (int i = n - 1; i > 0; i--) { /* a seeded shuffle */
            rng = rng * 1103515245u + 12345u;
            int j = (int)((rng >> 8) % (unsigned)(i + 1)), t = order[i];
            order[i] = order[j];
            order[j] = t;
        }
        double sum = 0;
        int steps = 0;
        for (int b = 0; b < n; b += BATCH, steps++) {
            int m = n - b < BATCH ? n - b : BATCH;
            if (dist && m < BATCH)
                break; /* whole global batches only: equal shards */
            int shard = m / size; /* this rank's rows of the global batch */
            vq_tensor *x = digits_rows(train_x, order + b + rank * shard, shard);
            vq_tensor *y = digits_rows(train_y, order + b + rank * shard, shard);
            vq_feed feeds[2] = {{"x", x}, {"y", y}};
            vq_fetch fetch = {"loss", NULL};
            double t0 = now_s();
            CHECK(vq_exec_run(ex, main_p, s, feeds, 2, &fetch, 1));
            train_s += now_s() - t0;
            train_steps++;
            if (ref_ex && global_step < check_steps) {
                vq_tensor *gx = digits_rows(train_x, order + b, m);
                vq_tensor *gy = digits_rows(train_y, order + b, m);
                vq_feed gf[2] = {{"x", gx}, {"y", gy}};
                CHECK(vq_exec_run(ref_ex, ref_main, ref_s, gf, 2, NULL, 0));
                vq_tensor_release(gx);
                vq_tensor_release(gy);
                if (++global_step == check_steps) {
                    double err = params_differ(s, ref_s);
                    bad_equivalence = !(err <= 1e-5);
                    if (rank == 0)
                        printf("after %d steps the data-parallel weights differ from one "
                               "process's on the global batches by %.3g relative (limit "
                               "1e-5): %s\n",
                               check_steps, err, bad_equivalence ? "FAILED" : "ok");
                }
            }
            vq_tensor *loss = on_host(e, fetch.tensor);
            sum += *(float *)vq_tensor_data(loss);
            vq_tensor_release(loss);
            vq_tensor_release(fetch.tensor);
            vq_tensor_release(x);
            vq_tensor_release(y);
        }
        acc = accuracy(e, ex, eval, s, test_x, test_y);
        if (rank == 0)
            printf("epoch %2d  loss %.4f  held-out accuracy %.2f%%\n", epoch, sum / steps,
                   100 * acc);
    }
    if (trace) {
        int idx[BATCH];
        for (int i = 0; i < BATCH; i++)
            idx[i] = order[i];
        vq_tensor *x = digits_rows(train_x, idx, BATCH), *y = digits_rows(train_y, idx, BATCH);
        trace_one_step(e, dev, main_p, s, x, y, trace);
        vq_tensor_release(x);
        vq_tensor_release(y);
    }
    if (rank == 0)
        printf("final held-out accuracy: %.2f%% (%s 95%%); %.0f us per training step\n",
               100 * acc, acc >= 0.95 ? "at least" : "BELOW", 1e6 * train_s / train_steps);
    if (dist) {
        overlap_report(e, d, main_p, ref_main, s, train_x, train_y, order, BATCH / size, bucket);
        vq_exec_free(ref_ex);
        vq_scope_free(ref_s);
        vq_program_free(ref_startup);
        vq_program_free(ref_main);
    }
    free(order);
    vq_exec_free(ex);
    vq_scope_free(s);
    CHECK(vq_wait_all(e));
    CHECK(vq_dist_free(d));
    vq_engine_free(e);
    vq_program_free(startup);
    vq_program_free(main_p);
    vq_program_free(eval);
    vq_tensor_release(train_x);
    vq_tensor_release(train_y);
    vq_tensor_release(test_x);
    vq_tensor_release(test_y);
    return acc >= 0.95 && !bad_equivalence ? 0 : 1;
}
