/* rnn_bench: training steps per second of the tanh RNN of
 * examples/rnn_sequence.c (a `while` loop over time steps, autodiff through
 * it, Adam), to compare with PyTorch eager running the same RNN with a
 * Python loop over the time steps (bench/rnn_torch.py, which also runs this
 * program and compares the two).
 *
 * The model: seq [L, 32, 10] one-hot digits, h_t = tanh(x_t Wx + h_{t-1} Wh
 * + b) with H = 16, logits = h_L Wo + bo [32, 2], mean softmax cross-entropy
 * with the label (digit sum > 4.5 L), Adam lr 0.003. The batches: 64 of
 * them, drawn once from a fixed splitmix64 stream, each of one length L in
 * 3..12; step s trains on batch s mod 64.
 *
 * Startup once, W warm-up steps, then R repetitions of K timed steps, one
 * vq_exec_run per step fetching and reading the loss; the step counter
 * runs on across warm-up and repetitions. Reported: the median (min, max)
 * over the repetitions of K / seconds, and "steps_per_s <median>" on a line
 * of its own for scripts.
 *
 * usage: rnn_bench [--tiny] [--dtype f32|f64] [--steps K] [--reps R]
 *                  [--warmup W] [--workers N] [--dir DIR]
 *   --dir    writes the initial parameters (DIR/init/<name>.npy, right after
 *            startup), the batches (DIR/batches/seq_<i>.npy, label_<i>.npy)
 *            and the losses of the first 64 steps (DIR/losses.npy, f64) for
 *            rnn_torch.py
 *   --tiny   a few steps (well under a second); no timing is asserted
 *   The exit status is 1 when a call fails or the loss is not finite. */
#include <varq/varq.h>

#include "../examples/rnn_model.h"
#include "measure.h" /* bench_now, bench_median, bench_stats */

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define HIDDEN RNN_HIDDEN
#define FEATURES RNN_FEATURES
#define CLASSES RNN_CLASSES
#define BATCH 32
#define MIN_LEN 3
#define MAX_LEN 12
#define NBATCHES 64
#define NLOSSES 64 /* losses of the first steps written for the comparison */

#define CHECK(call)                                                                        \
    do {                                                                                   \
        int rc_ = (call);                                                                  \
        if (rc_ < 0) {                                                                     \
            fprintf(stderr, "rnn_bench: %s: %s\n", #call, vq_errmsg());                    \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

#define NAMES(...) ((const char *const[]){__VA_ARGS__})

/* The model with Adam (lr 0.003, the example's). */
static void build(vq_dtype dt, vq_program **startup, vq_program **main)
{
    rnn_model_build(dt, startup, main);
    vq_optimizer adam = {.kind = VQ_OPT_ADAM, .learning_rate = 0.003};
    CHECK(vq_optimizer_minimize(*main, *startup, "loss", &adam));
}

/* ---- batches ---- */

struct batch {
    vq_tensor *seq, *label, *n;
};

static vq_tensor *scalar(vq_dtype dt, double v)
{
    vq_tensor *t;
    float f = (float)v;
    CHECK(vq_tensor_from(&t, dt, 0, NULL, dt == VQ_F32 ? (void *)&f : (void *)&v));
    return t;
}

static struct batch make_batch(vq_dtype dt, uint64_t *rng)
{
    struct batch bt;
    int len = MIN_LEN + (int)(rnn_splitmix64(rng) % (MAX_LEN - MIN_LEN + 1));
    rnn_task_batch(dt, rng, len, BATCH, &bt.seq, &bt.label);
    bt.n = scalar(dt, len);
    return bt;
}

static void make_dir(const char *path)
{
    if (mkdir(path, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "rnn_bench: cannot create %s: %s\n", path, strerror(errno));
        exit(1);
    }
}

static void save_batches(const char *dir, struct batch *b)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/batches", dir);
    make_dir(path);
    for (int i = 0; i < NBATCHES; i++) {
        snprintf(path, sizeof path, "%s/batches/seq_%d.npy", dir, i);
        CHECK(vq_npy_save(path, b[i].seq));
        snprintf(path, sizeof path, "%s/batches/label_%d.npy", dir, i);
        CHECK(vq_npy_save(path, b[i].label));
    }
}

int main(int argc, char **argv)
{
    int steps = 500, reps = 5, warmup = 64, workers = 2, tiny = 0;
    const char *dir = NULL;
    vq_dtype dt = VQ_F32;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tiny"))
            tiny = 1;
        else if (!strcmp(argv[i], "--dtype") && i + 1 < argc &&
                 vq_dtype_parse(argv[i + 1], &dt) == 0 && (dt == VQ_F32 || dt == VQ_F64))
            i++;
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc)
            steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--warmup") && i + 1 < argc)
            warmup = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--workers") && i + 1 < argc)
            workers = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--dir") && i + 1 < argc)
            dir = argv[++i];
        else {
            fprintf(stderr, "usage: rnn_bench [--tiny] [--dtype f32|f64] [--steps K] [--reps R] "
                            "[--warmup W] [--workers N] [--dir DIR]\n");
            return 2;
        }
    }
    if (tiny) {
        steps = 20;
        reps = 2;
        warmup = 4;
    }
    if (steps < 1 || reps < 1 || warmup < 0 || workers < 1) {
        fprintf(stderr, "rnn_bench: steps, reps and workers must be >= 1, warmup >= 0\n");
        return 2;
    }

    vq_program *startup, *main_p;
    build(dt, &startup, &main_p);
    struct batch b[NBATCHES];
    uint64_t rng = 20260101;
    for (int i = 0; i < NBATCHES; i++)
        b[i] = make_batch(dt, &rng);
    vq_tensor *h0, *i0 = scalar(dt, 0), *one = scalar(dt, 1);
    CHECK(vq_tensor_new(&h0, dt, 2, (int64_t[]){BATCH, HIDDEN}));
    memset(vq_tensor_data(h0), 0, vq_tensor_nbytes(h0));

    vq_engine *e;
    vq_exec *ex;
    vq_scope *s;
    vq_engine_opts eo = {.cpu_workers = workers};
    CHECK(vq_engine_new(&e, &eo));
    CHECK(vq_exec_new(&ex, e, NULL));
    CHECK(vq_scope_new(&s));
    CHECK(vq_exec_run(ex, startup, s, NULL, 0, NULL, 0));
    if (dir) {
        char path[1024];
        make_dir(dir);
        snprintf(path, sizeof path, "%s/init", dir);
        CHECK(vq_scope_save(s, path));
        save_batches(dir, b);
    }

    int total = warmup + reps * steps;
    double *losses = malloc((size_t)total * sizeof *losses);
    double *rate = malloc((size_t)reps * sizeof *rate);
    long step = 0;
    for (int r = -1; r < reps; r++) { /* r = -1: the warm-up */
        int k = r < 0 ? warmup : steps;
        double t0 = bench_now();
        for (int i = 0; i < k; i++, step++) {
            struct batch *bt = &b[step % NBATCHES];
            vq_feed feeds[] = {{"seq", bt->seq}, {"label", bt->label}, {"h0", h0},
                               {"n", bt->n},     {"i0", i0},          {"one", one}};
            vq_fetch fetch = {"loss", NULL};
            CHECK(vq_exec_run(ex, main_p, s, feeds, 6, &fetch, 1));
            losses[step] = dt == VQ_F32 ? *(const float *)vq_tensor_data(fetch.tensor)
                                        : *(const double *)vq_tensor_data(fetch.tensor);
            vq_tensor_release(fetch.tensor);
        }
        if (r >= 0)
            rate[r] = k / (bench_now() - t0);
    }
    int bad = 0;
    for (long i = 0; i < step; i++)
        bad |= !isfinite(losses[i]);
    double sorted[64];
    int nr = reps < 64 ? reps : 64;
    memcpy(sorted, rate, (size_t)nr * sizeof *rate);
    double med = bench_median(sorted, nr);
    printf("varq rnn (%s, H=%d, batch %d, lengths %d..%d, %d workers): %.1f steps/s "
           "(min %.1f, max %.1f; %d x %d steps after %d warm-up)\n",
           vq_dtype_name(dt), HIDDEN, BATCH, MIN_LEN, MAX_LEN, workers, med, sorted[0],
           sorted[nr - 1], reps, steps, warmup);
    printf("loss: first %.6f, last %.6f\n", losses[0], losses[step - 1]);
    printf("steps_per_s %.3f\n", med);
    if (dir) {
        char path[1024];
        int n = step < NLOSSES ? (int)step : NLOSSES;
        vq_tensor *lt;
        CHECK(vq_tensor_from(&lt, VQ_F64, 1, (int64_t[]){n}, losses));
        snprintf(path, sizeof path, "%s/losses.npy", dir);
        CHECK(vq_npy_save(path, lt));
        vq_tensor_release(lt);
    }
    if (bad)
        fprintf(stderr, "rnn_bench: a loss is not finite\n");

    free(losses);
    free(rate);
    for (int i = 0; i < NBATCHES; i++) {
        vq_tensor_release(b[i].seq);
        vq_tensor_release(b[i].label);
        vq_tensor_release(b[i].n);
    }
    vq_tensor_release(h0);
    vq_tensor_release(i0);
    vq_tensor_release(one);
    vq_exec_free(ex);
    vq_scope_free(s);
    vq_engine_free(e);
    vq_program_free(startup);
    vq_program_free(main_p);
    return bad ? 1 : 0;
}
