/* lstm_train: training steps per second of a 2-layer LSTM classifier on
 * varq's native lstm op (vq_layer_lstm), to compare with PyTorch eager's
 * nn.LSTM on the same model, weights and batches
 * (bench/lstm_train_torch.py runs this program and compares the two, their
 * steps per second and their first losses).
 *
 * The model: x [50, 32, 32] (sequence 50, batch 32, input 32), a 2-layer
 * LSTM of hidden 128 ("rnn", PyTorch's parameters and init), its last
 * step's outputs [32, 128] into a linear layer ("logits", 10 classes),
 * mean softmax cross-entropy with the labels, Adam lr 0.001. The batches:
 * 8, drawn once from a fixed splitmix64 stream (x uniform in [-1, 1), the
 * label in 0..9); step s trains on batch s mod 8.
 *
 * Startup once, W warm-up steps, then R repetitions of K timed steps, one
 * vq_exec_run per step fetching and reading the loss. Reported: the
 * median (min, max) over the repetitions of K / seconds, and
 * "steps_per_s <median>" on a line of its own for scripts.
 *
 * usage: lstm_train [--tiny] [--dtype f32|f64] [--steps K] [--reps R]
 *                   [--warmup W] [--workers N] [--dir DIR]
 *   --dir    writes the initial parameters (DIR/init/<name>.npy, right
 *            after startup), the batches (DIR/batches/x_<i>.npy,
 *            label_<i>.npy) and the losses of the first 20 steps
 *            (DIR/losses.npy, f64) for lstm_train_torch.py
 *   --tiny   a few steps; exits 1 unless the loss decreases
 *   The exit status is 1 when a call fails or a loss is not finite. */
#include <varq/varq.h>

#include "measure.h" /* bench_now, bench_median */

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define SEQ 50
#define BATCH 32
#define INPUT 32
#define HIDDEN 128
#define CLASSES 10
#define NBATCHES 8
#define NLOSSES 20

#define CHECK(call)                                                      \
    do {                                                                 \
        int rc_ = (call);                                                \
        if (rc_ < 0) {                                                   \
            fprintf(stderr, "lstm_train: %s: %s\n", #call, vq_errmsg()); \
            exit(1);                                                     \
        }                                                                \
    } while (0)

#define NAMES(...) ((const char *const[]){__VA_ARGS__})

static void build(vq_dtype dt, vq_program **startup, vq_program **main)
{
    CHECK(vq_program_new(main));
    CHECK(vq_program_new(startup));
    vq_program *m = *main;
    CHECK(vq_program_add_var(m, 0, "x", dt, 3, (int64_t[]){SEQ, BATCH, INPUT}, false));
    CHECK(vq_program_add_var(m, 0, "label", VQ_I64, 1, (int64_t[]){BATCH}, false));
    vq_rnn_layer_opts o = {.num_layers = 2};
    CHECK(vq_layer_lstm(m, *startup, "x", "rnn", HIDDEN, &o, 1));
    /* the last step's outputs */
    CHECK(vq_program_add_var(m, 0, "last3", dt, 3, (int64_t[]){1, BATCH, HIDDEN}, false));
    CHECK(vq_program_add_var(m, 0, "last", dt, 2, (int64_t[]){BATCH, HIDDEN}, false));
    int64_t ax = 0, lo = SEQ - 1, hi = SEQ, shape[2] = {BATCH, HIDDEN};
    vq_attr sl[3] = {VQ_ATTR_IS("axes", &ax, 1), VQ_ATTR_IS("starts", &lo, 1),
                     VQ_ATTR_IS("ends", &hi, 1)};
    vq_attr rs = VQ_ATTR_IS("shape", shape, 2);
    CHECK(vq_program_add_op(m, 0, "slice", NAMES("rnn"), 1, NAMES("last3"), 1, sl, 3));
    CHECK(vq_program_add_op(m, 0, "reshape", NAMES("last3"), 1, NAMES("last"), 1, &rs, 1));
    CHECK(vq_layer_linear(m, *startup, "last", "logits", CLASSES, 100));
    CHECK(vq_layer_softmax_cross_entropy(m, "logits", "label", "probs", "loss"));
    vq_optimizer adam = {.kind = VQ_OPT_ADAM, .learning_rate = 0.001};
    CHECK(vq_optimizer_minimize(m, *startup, "loss", &adam));
}

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

struct batch {
    vq_tensor *x, *label;
};

static struct batch make_batch(vq_dtype dt, uint64_t *rng)
{
    struct batch b;
    int64_t n = (int64_t)SEQ * BATCH * INPUT;
    CHECK(vq_tensor_new(&b.x, dt, 3, (int64_t[]){SEQ, BATCH, INPUT}));
    for (int64_t i = 0; i < n; i++) {
        double v = (double)(splitmix64(rng) >> 11) * 0x1p-52 - 1; /* [-1, 1) */
        if (dt == VQ_F32)
            ((float *)vq_tensor_data(b.x))[i] = (float)v;
        else
            ((double *)vq_tensor_data(b.x))[i] = v;
    }
    CHECK(vq_tensor_new(&b.label, VQ_I64, 1, (int64_t[]){BATCH}));
    for (int i = 0; i < BATCH; i++)
        ((int64_t *)vq_tensor_data(b.label))[i] = (int64_t)(splitmix64(rng) % CLASSES);
    return b;
}

static void make_dir(const char *path)
{
    if (mkdir(path, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "lstm_train: cannot create %s: %s\n", path, strerror(errno));
        exit(1);
    }
}

static void save_batches(const char *dir, struct batch *b)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/batches", dir);
    make_dir(path);
    for (int i = 0; i < NBATCHES; i++) {
        snprintf(path, sizeof path, "%s/batches/x_%d.npy", dir, i);
        CHECK(vq_npy_save(path, b[i].x));
        snprintf(path, sizeof path, "%s/batches/label_%d.npy", dir, i);
        CHECK(vq_npy_save(path, b[i].label));
    }
}

int main(int argc, char **argv)
{
    int steps = 20, reps = 5, warmup = 3, workers = 2, tiny = 0;
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
            fprintf(stderr, "usage: lstm_train [--tiny] [--dtype f32|f64] [--steps K] "
                            "[--reps R] [--warmup W] [--workers N] [--dir DIR]\n");
            return 2;
        }
    }
    if (tiny) {
        steps = 3;
        reps = 1;
        warmup = 1;
    }
    if (steps < 1 || reps < 1 || warmup < 0 || workers < 1) {
        fprintf(stderr, "lstm_train: steps, reps and workers must be >= 1, warmup >= 0\n");
        return 2;
    }

    vq_program *startup, *main_p;
    build(dt, &startup, &main_p);
    struct batch b[NBATCHES];
    uint64_t rng = 20261207;
    for (int i = 0; i < NBATCHES; i++)
        b[i] = make_batch(dt, &rng);

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
            vq_feed feeds[] = {{"x", bt->x}, {"label", bt->label}};
            vq_fetch fetch = {"loss", NULL};
            CHECK(vq_exec_run(ex, main_p, s, feeds, 2, &fetch, 1));
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
    double med = bench_median(rate, reps);
    printf("varq lstm classifier (%s, T %d, batch %d, hidden %d, 2 layers, %d workers): %.2f "
           "steps/s (min %.2f, max %.2f; %d x %d steps after %d warm-up)\n",
           vq_dtype_name(dt), SEQ, BATCH, HIDDEN, workers, med, rate[0], rate[reps - 1], reps,
           steps, warmup);
    printf("loss: first %.6f, last %.6f\n", losses[0], losses[step - 1]);
    printf("steps_per_s %.3f\n", med);
    printf("best_steps_per_s %.3f\n", rate[reps - 1]);
    if (tiny && !(losses[step - 1] < losses[0])) {
        fprintf(stderr, "lstm_train: the loss did not decrease (%g -> %g)\n", losses[0],
                losses[step - 1]);
        bad = 1;
    }
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
        fprintf(stderr, "lstm_train: a loss is not finite or did not decrease\n");

    free(losses);
    free(rate);
    for (int i = 0; i < NBATCHES; i++) {
        vq_tensor_release(b[i].x);
        vq_tensor_release(b[i].label);
    }
    vq_exec_free(ex);
    vq_scope_free(s);
    vq_engine_free(e);
    vq_program_free(startup);
    vq_program_free(main_p);
    return bad ? 1 : 0;
}
