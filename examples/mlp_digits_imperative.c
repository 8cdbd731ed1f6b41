/* The digits MLP of mlp_digits.c (64 -> 128 -> 10, ReLU, softmax
 * cross-entropy, Adam) written imperatively: every training step is plain
 * vq_op_run calls for the forward pass, vq_capture_backward for the
 * gradients and vq_op_run calls of adam for the updates, between
 * vq_capture_begin and vq_capture_end. No program is built by hand; each
 * step records the same calls, so from the second step on the step replays
 * from the capture's cache (one engine op per step, no per-call checks).
 * Prints the loss and held-out accuracy of each epoch and the capture's
 * counters.
 *
 * Usage: mlp_digits_imperative [DATA_DIR] [--epochs N]
 * DATA_DIR holds train_x/train_y/test_x/test_y .npy files written by
 * scripts/digits_to_npy.py (default build/digits). Exit status 0 when the
 * final accuracy is at least 95%. */
#include <varq/varq.h>

#define EXAMPLE_NAME "mlp_digits_imperative"
#include "digits_data.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BATCH 64

static vq_engine *e;

/* One call with one created output. */
static vq_tensor *run1(const char *type, vq_tensor *const *in, int nin, const vq_attr *attrs,
                       int nattrs)
{
    vq_tensor *out = NULL;
    CHECK(vq_op_run(e, type, in, nin, &out, 1, attrs, nattrs));
    return out;
}

/* The model's parameters and Adam's state for each. */
enum { W1, B1, W2, B2, NPARAMS };
static vq_tensor *param[NPARAMS], *moment1[NPARAMS], *moment2[NPARAMS], *steps[NPARAMS];

/* Like PyTorch's nn.Linear: uniform in [-1/sqrt(in), 1/sqrt(in)]. */
static vq_tensor *uniform(int ndim, const int64_t *shape, int64_t fan_in, int64_t seed)
{
    double bound = 1 / sqrt((double)fan_in);
    vq_attr a[4] = {VQ_ATTR_IS("shape", shape, ndim), VQ_ATTR_F("min", -bound),
                    VQ_ATTR_F("max", bound), VQ_ATTR_I("seed", seed)};
    return run1("uniform_random", NULL, 0, a, 4);
}

/* logits = relu(x w1 + b1) w2 + b2 */
static vq_tensor *forward(vq_tensor *x)
{
    vq_tensor *h = run1("matmul", (vq_tensor *[]){x, param[W1]}, 2, NULL, 0);
    vq_tensor *z = run1("add", (vq_tensor *[]){h, param[B1]}, 2, NULL, 0);
    vq_tensor *a = run1("relu", &z, 1, NULL, 0);
    vq_tensor *l = run1("matmul", (vq_tensor *[]){a, param[W2]}, 2, NULL, 0);
    vq_tensor *logits = run1("add", (vq_tensor *[]){l, param[B2]}, 2, NULL, 0);
    vq_tensor_release(h); /* the segment keeps what it needs */
    vq_tensor_release(z);
    vq_tensor_release(a);
    vq_tensor_release(l);
    return logits;
}

/* One training step, captured: forward, loss, gradients, Adam. Returns the
 * loss tensor (pending). */
static vq_tensor *train_step(vq_tensor *x, vq_tensor *y)
{
    CHECK(vq_capture_begin(e));
    vq_tensor *logits = forward(x);
    vq_tensor *out[2] = {NULL, NULL};
    CHECK(vq_op_run(e, "softmax_cross_entropy", (vq_tensor *[]){logits, y}, 2, out, 2, NULL,
                    0));
    vq_tensor *loss = run1("mean", &out[1], 1, NULL, 0);
    vq_tensor *grad[NPARAMS];
    CHECK(vq_capture_backward(e, loss, param, NPARAMS, grad));
    vq_attr lr = VQ_ATTR_F("learning_rate", 0.005);
    for (int i = 0; i < NPARAMS; i++) {
        vq_tensor *in[5] = {param[i], grad[i], moment1[i], moment2[i], steps[i]};
        vq_tensor *upd[4] = {param[i], moment1[i], moment2[i], steps[i]}; /* in place */
        CHECK(vq_op_run(e, "adam", in, 5, upd, 4, &lr, 1));
        vq_tensor_release(grad[i]);
    }
    vq_tensor_release(logits);
    vq_tensor_release(out[0]);
    vq_tensor_release(out[1]);
    CHECK(vq_capture_end(e));
    return loss;
}

static double accuracy(vq_tensor *x, vq_tensor *y)
{
    CHECK(vq_capture_begin(e));
    vq_tensor *logits = forward(x);
    CHECK(vq_capture_end(e));
    CHECK(vq_tensor_wait(logits));
    int64_t n = vq_tensor_shape(y)[0];
    int64_t right = digits_right(vq_tensor_data(logits), y, n);
    vq_tensor_release(logits);
    return (double)right / (double)n;
}

int main(int argc, char **argv)
{
    const char *dir = "build/digits";
    int epochs = 20;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--epochs") && i + 1 < argc)
            epochs = atoi(argv[++i]);
        else if (argv[i][0] != '-')
            dir = argv[i];
        else {
            fprintf(stderr, "usage: mlp_digits_imperative [DATA_DIR] [--epochs N]\n");
            return 2;
        }
    }
    vq_tensor *train_x = digits_load(dir, "train_x"), *train_y = digits_load(dir, "train_y");
    vq_tensor *test_x = digits_load(dir, "test_x"), *test_y = digits_load(dir, "test_y");
    CHECK(vq_engine_new(&e, NULL));

    int64_t s1[2] = {64, 128}, s2[1] = {128}, s3[2] = {128, 10}, s4[1] = {10}, one[1] = {1};
    param[W1] = uniform(2, s1, 64, 1);
    param[B1] = uniform(1, s2, 64, 2);
    param[W2] = uniform(2, s3, 128, 3);
    param[B2] = uniform(1, s4, 128, 4);
    for (int i = 0; i < NPARAMS; i++) {
        CHECK(vq_tensor_new(&moment1[i], VQ_F32, vq_tensor_ndim(param[i]),
                            vq_tensor_shape(param[i])));
        CHECK(vq_tensor_new(&moment2[i], VQ_F32, vq_tensor_ndim(param[i]),
                            vq_tensor_shape(param[i])));
        CHECK(vq_tensor_new(&steps[i], VQ_I64, 1, one));
    }

    int n = (int)vq_tensor_shape(train_x)[0], nbatches = n / BATCH;
    int *order = malloc((size_t)n * sizeof *order);
    if (!order)
        return 1;
    for (int i = 0; i < n; i++)
        order[i] = i;
    unsigned seed = 7;
    double acc = 0;
    for (int epoch = 1; epoch <= epochs; epoch++) {
        for (int i = n - 1; i > 0; i--) { /* shuffle */
            int j = (int)(rand_r(&seed) % (unsigned)(i + 1)), t = order[i];
            order[i] = order[j];
            order[j] = t;
        }
        vq_tensor *loss = NULL;
        for (int b = 0; b < nbatches; b++) {
            vq_tensor *x = digits_rows(train_x, order + b * BATCH, BATCH);
            vq_tensor *y = digits_rows(train_y, order + b * BATCH, BATCH);
            vq_tensor_release(loss);
            loss = train_step(x, y); /* returns at once: steps queue up */
            vq_tensor_release(x);
            vq_tensor_release(y);
        }
        CHECK(vq_tensor_wait(loss));
        double l = *(const float *)vq_tensor_data(loss);
        vq_tensor_release(loss);
        acc = accuracy(test_x, test_y);
        printf("epoch %2d  loss %.4f  test accuracy %.2f%%\n", epoch, l, 100 * acc);
    }
    vq_capture_stats st;
    CHECK(vq_capture_get_stats(e, &st));
    printf("capture: %llu calls recorded (%llu matched a cached node), %llu segments run, "
           "%llu plan cache hits, %llu plans built\n",
           (unsigned long long)st.ops_recorded, (unsigned long long)st.op_hits,
           (unsigned long long)st.segments_run, (unsigned long long)st.cache_hits,
           (unsigned long long)st.plans_built);
    free(order);
    for (int i = 0; i < NPARAMS; i++) {
        vq_tensor_release(param[i]);
        vq_tensor_release(moment1[i]);
        vq_tensor_release(moment2[i]);
        vq_tensor_release(steps[i]);
    }
    vq_tensor_release(train_x);
    vq_tensor_release(train_y);
    vq_tensor_release(test_x);
    vq_tensor_release(test_y);
    vq_engine_free(e);
    return acc >= 0.95 ? 0 : 1;
}
