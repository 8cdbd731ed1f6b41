/* Trains a tanh RNN written with a `while` op on a variable-length sequence
 * task, through varq's graph layer: autodiff through the loop, Adam, a
 * startup program for the parameters, and a held-out evaluation.
 *
 * The task: a sequence of L digits 0..9 (L in 3..12, one-hot, 10 features)
 * is labelled 1 when its digit sum is greater than 4.5 L, else 0. All the
 * sequences of a batch have the same length, so a batch is a tensor
 * seq [L, B, 10] whose L the program does not know when it is prepared.
 *
 * The model (hidden size H = 16):
 *   h_0 = 0;  h_t = tanh(x_t Wx + h_{t-1} Wh + b)   for t = 1 .. L
 *   logits = h_L Wo + bo,  loss = mean softmax cross-entropy(logits, label)
 * The loop carries (h, i, rest): each iteration takes x_t as the first row
 * of `rest` (slice along axis 0, reshape to [B, 10]), carries the rest of
 * the sequence on (slice from 1 to the end), and counts i up to the fed
 * length n. The body is flat (no nested control flow), as autodiff through
 * while requires.
 *
 * Usage: rnn_sequence [--steps N] [--min-accuracy A]
 * Trains N steps (default 2000) on fresh batches of 32 drawn from a fixed
 * seed (each step a random length), then evaluates on 2000 held-out
 * sequences drawn from another seed. Prints the held-out accuracy and the
 * training steps per second; exit status 1 when the accuracy is below A
 * (default 0.95). */
#include <varq/varq.h>

#include "rnn_model.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define HIDDEN RNN_HIDDEN
#define FEATURES RNN_FEATURES
#define CLASSES RNN_CLASSES
#define BATCH 32
#define MIN_LEN 3
#define MAX_LEN 12
#define EVAL_PER_LEN 200 /* held-out sequences of each length */

#define CHECK(call)                                                                        \
    do {                                                                                   \
        int rc_ = (call);                                                                  \
        if (rc_ < 0) {                                                                     \
            fprintf(stderr, "rnn_sequence: %s: %s\n", #call, vq_errmsg());                 \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

#define NAMES(...) ((const char *const[]){__VA_ARGS__})

/* The model (examples/rnn_model.h) in f32. */
static void build(vq_program **startup, vq_program **main)
{
    rnn_model_build(VQ_F32, startup, main);
}

/* ---- data ---- */

/* A batch of b sequences of length len drawn from *rng: seq [len, b, 10]
 * one-hot, label [b]. */
struct batch {
    vq_tensor *seq, *label, *n, *h0;
};

static struct batch make_batch(uint64_t *rng, int len, int b)
{
    struct batch bt;
    rnn_task_batch(VQ_F32, rng, len, b, &bt.seq, &bt.label);
    CHECK(vq_tensor_new(&bt.h0, VQ_F32, 2, (int64_t[]){b, HIDDEN}));
    memset(vq_tensor_data(bt.h0), 0, vq_tensor_nbytes(bt.h0));
    float n = (float)len;
    CHECK(vq_tensor_from(&bt.n, VQ_F32, 0, NULL, &n));
    return bt;
}

static void batch_free(struct batch *bt)
{
    vq_tensor_release(bt->seq);
    vq_tensor_release(bt->label);
    vq_tensor_release(bt->n);
    vq_tensor_release(bt->h0);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- training and evaluation ---- */

struct trainer {
    vq_exec *ex;
    vq_scope *s;
    vq_tensor *i0, *one; /* the constant feeds */
};

/* Runs p on bt, fetching `what` (the caller releases it). */
static vq_tensor *run_batch(struct trainer *t, vq_program *p, struct batch *bt, const char *what)
{
    vq_feed feeds[] = {{"seq", bt->seq}, {"label", bt->label}, {"h0", bt->h0},
                       {"n", bt->n},     {"i0", t->i0},       {"one", t->one}};
    vq_fetch fetch = {what, NULL};
    CHECK(vq_exec_run(t->ex, p, t->s, feeds, 6, &fetch, 1));
    return fetch.tensor;
}

/* Held-out accuracy: EVAL_PER_LEN sequences of every length, another seed. */
static double accuracy(struct trainer *t, vq_program *eval)
{
    uint64_t rng = 777;
    long right = 0, total = 0;
    for (int len = MIN_LEN; len <= MAX_LEN; len++) {
        struct batch bt = make_batch(&rng, len, EVAL_PER_LEN);
        vq_tensor *probs = run_batch(t, eval, &bt, "probs");
        const float *pr = vq_tensor_data(probs);
        const int64_t *y = vq_tensor_data(bt.label);
        for (int r = 0; r < EVAL_PER_LEN; r++)
            right += (pr[2 * r + 1] > pr[2 * r]) == (y[r] == 1);
        total += EVAL_PER_LEN;
        vq_tensor_release(probs);
        batch_free(&bt);
    }
    return (double)right / (double)total;
}

int main(int argc, char **argv)
{
    int steps = 2000;
    double min_acc = 0.95;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--steps") && i + 1 < argc)
            steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--min-accuracy") && i + 1 < argc)
            min_acc = atof(argv[++i]);
        else {
            fprintf(stderr, "usage: rnn_sequence [--steps N] [--min-accuracy A]\n");
            return 2;
        }
    }

    vq_program *startup, *main_p, *eval;
    build(&startup, &main_p);
    CHECK(vq_program_clone(main_p, &eval)); /* forward only, for the accuracy */
    vq_optimizer adam = {.kind = VQ_OPT_ADAM, .learning_rate = 0.003};
    CHECK(vq_optimizer_minimize(main_p, startup, "loss", &adam));

    vq_engine *e;
    struct trainer t;
    CHECK(vq_engine_new(&e, NULL));
    CHECK(vq_exec_new(&t.ex, e, NULL));
    CHECK(vq_scope_new(&t.s));
    float zero = 0, one = 1;
    CHECK(vq_tensor_from(&t.i0, VQ_F32, 0, NULL, &zero));
    CHECK(vq_tensor_from(&t.one, VQ_F32, 0, NULL, &one));
    CHECK(vq_exec_run(t.ex, startup, t.s, NULL, 0, NULL, 0));

    printf("tanh RNN (H=%d) over digit sequences of length %d..%d, batch %d, Adam lr %g\n",
           HIDDEN, MIN_LEN, MAX_LEN, BATCH, adam.learning_rate);
    uint64_t rng = 2026;
    double sum = 0, t0 = now();
    int report = steps >= 10 ? steps / 10 : 1;
    for (int step = 1; step <= steps; step++) {
        int len = MIN_LEN + (int)(rnn_splitmix64(&rng) % (MAX_LEN - MIN_LEN + 1));
        struct batch bt = make_batch(&rng, len, BATCH);
        vq_tensor *loss = run_batch(&t, main_p, &bt, "loss");
        sum += *(const float *)vq_tensor_data(loss);
        vq_tensor_release(loss);
        batch_free(&bt);
        if (step % report == 0) {
            printf("step %5d  mean loss %.4f\n", step, sum / report);
            sum = 0;
        }
    }
    double secs = now() - t0;
    double acc = accuracy(&t, eval);
    printf("%d steps in %.2f s: %.0f steps/s\n", steps, secs, steps / secs);
    printf("held-out accuracy: %.2f%% over %d sequences (%s %.0f%%)\n", 100 * acc,
           EVAL_PER_LEN * (MAX_LEN - MIN_LEN + 1), acc >= min_acc ? "at least" : "BELOW",
           100 * min_acc);

    vq_tensor_release(t.i0);
    vq_tensor_release(t.one);
    vq_exec_free(t.ex);
    vq_scope_free(t.s);
    vq_engine_free(e);
    vq_program_free(startup);
    vq_program_free(main_p);
    vq_program_free(eval);
    return acc >= min_acc ? 0 : 1;
}
