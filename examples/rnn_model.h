/* The tanh RNN of examples/rnn_sequence.c and bench/rnn_bench.c, written
 * once: a while loop over a sequence fed as [L, B, 10] (L unknown when
 * the program is prepared), its parameters initialized by a startup
 * program, and the loss. Header-only (static functions) so that the
 * example and the benchmark build alone; a failing call prints its
 * message and exits, as both programs do.
 *
 * The model (hidden size RNN_HIDDEN):
 *   h_0 = 0;  h_t = tanh(x_t Wx + h_{t-1} Wh + b)   for t = 1 .. L
 *   logits = h_L Wo + bo,  loss = mean softmax cross-entropy(logits, label)
 * The loop carries (h, i, rest): each iteration takes x_t as the first row
 * of `rest` (slice along axis 0, reshape to [B, 10]), carries the rest of
 * the sequence on (slice from 1 to the end), and counts i up to the fed
 * length n. */
#ifndef VARQ_EXAMPLES_RNN_MODEL_H
#define VARQ_EXAMPLES_RNN_MODEL_H

#include <varq/varq.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RNN_HIDDEN 16
#define RNN_FEATURES 10
#define RNN_CLASSES 2

#define RNN_NAMES(...) ((const char *const[]){__VA_ARGS__})

static void rnn_check(int rc, const char *what)
{
    if (rc < 0) {
        fprintf(stderr, "rnn model: %s: %s\n", what, vq_errmsg());
        exit(1);
    }
}

#define RNN_CHECK(call) rnn_check((call), #call)

static void rnn_add_op(vq_program *p, int block, const char *type, const char *const *in, int nin,
                   const char *out, const vq_attr *attrs, int nattrs)
{
    RNN_CHECK(vq_program_add_op(p, block, type, in, nin, (const char *const[]){out}, 1, attrs,
                            nattrs));
}

static void rnn_add_param(vq_program *main, vq_program *startup, vq_dtype dt, const char *name,
                      int ndim, const int64_t *shape, double bound, int64_t seed)
{
    RNN_CHECK(vq_program_add_var(main, 0, name, dt, ndim, shape, true));
    RNN_CHECK(vq_program_add_var(startup, 0, name, dt, ndim, shape, true));
    vq_attr a[] = {VQ_ATTR_IS("shape", shape, ndim), VQ_ATTR_S("dtype", vq_dtype_name(dt)),
                   VQ_ATTR_F("min", -bound), VQ_ATTR_F("max", bound), VQ_ATTR_I("seed", seed)};
    RNN_CHECK(vq_program_add_op(startup, 0, "uniform_random", NULL, 0, RNN_NAMES(name), 1, a, 5));
}

/* The startup and main programs, in dtype dt (f32 or f64). Feeds: seq
 * [-1,-1,10], label i64[-1], h0 [-1,H] (zeros), scalars n (the length),
 * i0 (0), one (1). Parameters rnn.wx, rnn.wh, rnn.b, logits.w, logits.b;
 * fetches probs and loss "loss". No optimizer: the caller adds one. */
static void rnn_model_build(vq_dtype dt, vq_program **startup, vq_program **main)
{
    RNN_CHECK(vq_program_new(startup));
    RNN_CHECK(vq_program_new(main));
    vq_program *p = *main;
    const double bound = 1.0 / sqrt(RNN_HIDDEN);
    rnn_add_param(p, *startup, dt, "rnn.wx", 2, (int64_t[]){RNN_FEATURES, RNN_HIDDEN}, bound, 11);
    rnn_add_param(p, *startup, dt, "rnn.wh", 2, (int64_t[]){RNN_HIDDEN, RNN_HIDDEN}, bound, 12);
    rnn_add_param(p, *startup, dt, "rnn.b", 1, (int64_t[]){RNN_HIDDEN}, bound, 13);

    const int64_t seq_shape[3] = {-1, -1, RNN_FEATURES}, h_shape[2] = {-1, RNN_HIDDEN};
    RNN_CHECK(vq_program_add_var(p, 0, "seq", dt, 3, seq_shape, false));
    RNN_CHECK(vq_program_add_var(p, 0, "label", VQ_I64, 1, (int64_t[]){-1}, false));
    RNN_CHECK(vq_program_add_var(p, 0, "h0", dt, 2, h_shape, false));
    RNN_CHECK(vq_program_add_var(p, 0, "h", dt, 2, h_shape, false));
    RNN_CHECK(vq_program_add_var(p, 0, "rest", dt, 3, seq_shape, false));
    const char *scalars[] = {"n", "i0", "one", "i"};
    for (int k = 0; k < 4; k++)
        RNN_CHECK(vq_program_add_var(p, 0, scalars[k], dt, 0, NULL, false));
    RNN_CHECK(vq_program_add_var(p, 0, "go", VQ_BOOL, 0, NULL, false));

    int body = vq_program_add_block(p, 0);
    RNN_CHECK(body);
    RNN_CHECK(vq_program_add_var(p, body, "b.seq", dt, 3, seq_shape, false));
    RNN_CHECK(vq_program_add_var(p, body, "b.seq2", dt, 3, seq_shape, false));
    RNN_CHECK(vq_program_add_var(p, body, "b.x3", dt, 3, (int64_t[]){1, -1, RNN_FEATURES}, false));
    RNN_CHECK(vq_program_add_var(p, body, "b.x", dt, 2, (int64_t[]){-1, RNN_FEATURES}, false));
    const char *hs[] = {"b.h", "b.xw", "b.hw", "b.z", "b.zb", "b.h2"};
    for (int k = 0; k < 6; k++)
        RNN_CHECK(vq_program_add_var(p, body, hs[k], dt, 2, h_shape, false));
    RNN_CHECK(vq_program_add_var(p, body, "b.i", dt, 0, NULL, false));
    RNN_CHECK(vq_program_add_var(p, body, "b.i2", dt, 0, NULL, false));
    RNN_CHECK(vq_program_add_var(p, body, "b.go", VQ_BOOL, 0, NULL, false));

    const int64_t axis0[1] = {0}, zero[1] = {0}, one[1] = {1}, end[1] = {INT64_MAX};
    const int64_t row_shape[2] = {-1, RNN_FEATURES};
    vq_attr first[] = {VQ_ATTR_IS("axes", axis0, 1), VQ_ATTR_IS("starts", zero, 1),
                       VQ_ATTR_IS("ends", one, 1)};
    vq_attr rest[] = {VQ_ATTR_IS("axes", axis0, 1), VQ_ATTR_IS("starts", one, 1),
                      VQ_ATTR_IS("ends", end, 1)};
    vq_attr reshape[] = {VQ_ATTR_IS("shape", row_shape, 2)};
    rnn_add_op(p, body, "slice", RNN_NAMES("b.seq"), 1, "b.x3", first, 3);
    rnn_add_op(p, body, "reshape", RNN_NAMES("b.x3"), 1, "b.x", reshape, 1);
    rnn_add_op(p, body, "slice", RNN_NAMES("b.seq"), 1, "b.seq2", rest, 3);
    rnn_add_op(p, body, "matmul", RNN_NAMES("b.x", "rnn.wx"), 2, "b.xw", NULL, 0);
    rnn_add_op(p, body, "matmul", RNN_NAMES("b.h", "rnn.wh"), 2, "b.hw", NULL, 0);
    rnn_add_op(p, body, "add", RNN_NAMES("b.xw", "b.hw"), 2, "b.z", NULL, 0);
    rnn_add_op(p, body, "add", RNN_NAMES("b.z", "rnn.b"), 2, "b.zb", NULL, 0);
    rnn_add_op(p, body, "tanh", RNN_NAMES("b.zb"), 1, "b.h2", NULL, 0);
    rnn_add_op(p, body, "add", RNN_NAMES("b.i", "one"), 2, "b.i2", NULL, 0);
    rnn_add_op(p, body, "less", RNN_NAMES("b.i2", "n"), 2, "b.go", NULL, 0);

    rnn_add_op(p, 0, "less", RNN_NAMES("i0", "n"), 2, "go", NULL, 0);
    vq_attr w[] = {VQ_ATTR_I("body_block", body),
                   VQ_ATTR_SS("body_inputs", RNN_NAMES("b.h", "b.i", "b.seq"), 3),
                   VQ_ATTR_SS("body_outputs", RNN_NAMES("b.h2", "b.i2", "b.seq2"), 3),
                   VQ_ATTR_S("body_cond", "b.go"), VQ_ATTR_I("max_iters", -1)};
    RNN_CHECK(vq_program_add_op(p, 0, "while", RNN_NAMES("go", "h0", "i0", "seq"), 4,
                            RNN_NAMES("h", "i", "rest"), 3, w, 5));

    RNN_CHECK(vq_layer_linear(p, *startup, "h", "logits", RNN_CLASSES, 14));
    RNN_CHECK(vq_layer_softmax_cross_entropy(p, "logits", "label", "probs", "loss"));
}

/* ---- the task ---- */

static uint64_t rnn_splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* b sequences of len digits 0..9 drawn from *rng: *seq [len, b, 10]
 * one-hot in dtype dt, *label i64[b], 1 when the digit sum exceeds 4.5
 * len. New tensors; the caller releases them. */
static void rnn_task_batch(vq_dtype dt, uint64_t *rng, int len, int b, vq_tensor **seq,
                           vq_tensor **label)
{
    RNN_CHECK(vq_tensor_new(seq, dt, 3, (int64_t[]){len, b, RNN_FEATURES}));
    RNN_CHECK(vq_tensor_new(label, VQ_I64, 1, (int64_t[]){b}));
    memset(vq_tensor_data(*seq), 0, vq_tensor_nbytes(*seq));
    int64_t *y = vq_tensor_data(*label);
    for (int r = 0; r < b; r++) {
        int sum = 0;
        for (int t = 0; t < len; t++) {
            int d = (int)(rnn_splitmix64(rng) % 10);
            size_t at = ((size_t)t * (size_t)b + (size_t)r) * RNN_FEATURES + (size_t)d;
            sum += d;
            if (dt == VQ_F32)
                ((float *)vq_tensor_data(*seq))[at] = 1;
            else
                ((double *)vq_tensor_data(*seq))[at] = 1;
        }
        y[r] = 2 * sum > 9 * len; /* sum > 4.5 len */
    }
}

#endif
