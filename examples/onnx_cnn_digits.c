/* onnx_cnn_digits: fine-tunes a model that PyTorch defined and exported.
 * A small CNN for scikit-learn's 8x8 digits (conv-bn-relu twice, max pool,
 * linear: scripts/cnn_torch.py writes it as ONNX with random weights) is
 * imported with vq_program_from_onnx_file, a softmax cross-entropy loss is
 * appended to the imported program, and vq_optimizer_minimize adds Adam:
 * autodiff goes through the imported convolutions, batch normalizations
 * (inference form: their running statistics stay as exported, their scale
 * and shift train) and pooling. Prints the loss and held-out accuracy per
 * epoch.
 *
 * usage: onnx_cnn_digits MODEL.onnx [DATA_DIR] [--epochs N] [--steps K]
 *                        [--losses FILE.npy] [--f64]
 *   DATA_DIR   train/test .npy files of scripts/digits_to_npy.py
 *              (default build/digits)
 *   --steps K  stop after K steps (no evaluation)
 *   --losses   write the loss of every step run (f64 [steps]) to FILE
 *   --f64      the model computes in f64 (exported from a model.double()):
 *              the images are fed as f64. The test compares such a run
 *              with PyTorch's in f64, where rounding cannot grow through
 *              the training steps into a visible difference as it does
 *              in f32.
 * Batches: 32 rows in the training set's order, the last partial batch
 * dropped, step s on batch s mod 44; Adam with learning rate 0.003 (the
 * protocol cnn_torch.py follows in PyTorch). */
#include <varq/varq.h>

#define EXAMPLE_NAME "onnx_cnn_digits"
#include "digits_data.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BATCH 32

/* x [N, 64] f32 as a new f64 tensor (x is released). */
static vq_tensor *widen(vq_tensor *x)
{
    vq_tensor *w;
    int64_t n = vq_tensor_numel(x);
    CHECK(vq_tensor_new(&w, VQ_F64, vq_tensor_ndim(x), vq_tensor_shape(x)));
    const float *f = vq_tensor_data(x);
    double *d = vq_tensor_data(w);
    for (int64_t i = 0; i < n; i++)
        d[i] = f[i];
    vq_tensor_release(x);
    return w;
}

/* Rows [first, first + n) of x [N, 64] (f32 or f64) as images
 * [n, 1, 8, 8], and of the labels. */
static void batch(vq_tensor *x, vq_tensor *y, int64_t first, int64_t n, vq_tensor **bx,
                  vq_tensor **by)
{
    vq_dtype dt = vq_tensor_dtype(x);
    size_t el = dt == VQ_F64 ? sizeof(double) : sizeof(float);
    CHECK(vq_tensor_from(bx, dt, 4, (int64_t[]){n, 1, 8, 8},
                         (const char *)vq_tensor_data(x) + (size_t)(first * 64) * el));
    CHECK(vq_tensor_from(by, VQ_I64, 1, (int64_t[]){n},
                         (const int64_t *)vq_tensor_data(y) + first));
}

static double accuracy(vq_exec *ex, vq_program *eval, vq_scope *s, vq_tensor *x, vq_tensor *y)
{
    int64_t n = vq_tensor_shape(y)[0];
    vq_tensor *bx, *by;
    batch(x, y, 0, n, &bx, &by);
    vq_feed feed = {"x", bx};
    vq_fetch fetch = {"logits", NULL};
    CHECK(vq_exec_run(ex, eval, s, &feed, 1, &fetch, 1));
    float *scores = vq_tensor_data(fetch.tensor);
    float *narrow = NULL;
    if (vq_tensor_dtype(fetch.tensor) == VQ_F64) {
        const double *d = vq_tensor_data(fetch.tensor);
        narrow = malloc((size_t)n * 10 * sizeof *narrow);
        if (!narrow) {
            fprintf(stderr, "onnx_cnn_digits: out of memory\n");
            exit(1);
        }
        for (int64_t i = 0; i < n * 10; i++)
            narrow[i] = (float)d[i];
        scores = narrow;
    }
    int64_t right = digits_right(scores, y, n);
    free(narrow);
    vq_tensor_release(fetch.tensor);
    vq_tensor_release(bx);
    vq_tensor_release(by);
    return (double)right / (double)n;
}

int main(int argc, char **argv)
{
    const char *model = NULL, *dir = "build/digits", *losses_path = NULL;
    int epochs = 30;
    long steps = -1;
    bool f64 = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--epochs") && i + 1 < argc)
            epochs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc)
            steps = atol(argv[++i]);
        else if (!strcmp(argv[i], "--losses") && i + 1 < argc)
            losses_path = argv[++i];
        else if (!strcmp(argv[i], "--f64"))
            f64 = true;
        else if (argv[i][0] != '-' && !model)
            model = argv[i];
        else if (argv[i][0] != '-')
            dir = argv[i];
        else {
            fprintf(stderr, "usage: onnx_cnn_digits MODEL.onnx [DATA_DIR] [--epochs N] "
                            "[--steps K] [--losses FILE.npy] [--f64]\n");
            return 2;
        }
    }
    if (!model) {
        fprintf(stderr, "onnx_cnn_digits: no MODEL.onnx (scripts/cnn_torch.py writes one)\n");
        return 2;
    }
    vq_tensor *train_x = digits_load(dir, "train_x"), *train_y = digits_load(dir, "train_y");
    vq_tensor *test_x = digits_load(dir, "test_x"), *test_y = digits_load(dir, "test_y");
    if (f64) {
        train_x = widen(train_x);
        test_x = widen(test_x);
    }

    /* the imported model, a copy of it for evaluation, then the loss and
     * Adam appended to the training program */
    vq_scope *s;
    vq_program *main_p, *eval, *startup;
    CHECK(vq_scope_new(&s));
    CHECK(vq_program_from_onnx_file(&main_p, s, model));
    CHECK(vq_program_clone(main_p, &eval));
    CHECK(vq_program_new(&startup));
    CHECK(vq_program_add_var(main_p, 0, "label", VQ_I64, 1, (int64_t[]){-1}, false));
    CHECK(vq_layer_softmax_cross_entropy(main_p, "logits", "label", "probs", "loss"));
    vq_optimizer adam = {.kind = VQ_OPT_ADAM, .learning_rate = 0.003};
    int nparams = vq_optimizer_minimize(main_p, startup, "loss", &adam);
    CHECK(nparams);

    vq_engine *e;
    vq_exec *ex;
    CHECK(vq_engine_new(&e, NULL));
    CHECK(vq_exec_new(&ex, e, NULL));
    CHECK(vq_exec_run(ex, startup, s, NULL, 0, NULL, 0));

    int64_t n = vq_tensor_shape(train_y)[0], nbatches = n / BATCH;
    long total = steps >= 0 ? steps : (long)epochs * nbatches;
    double *losses = calloc((size_t)(total ? total : 1), sizeof *losses);
    printf("onnx_cnn_digits: %s imported, %d parameters trained, %lld training images\n", model,
           nparams, (long long)n);
    for (long step = 0; step < total; step++) {
        vq_tensor *bx, *by;
        batch(train_x, train_y, (step % nbatches) * BATCH, BATCH, &bx, &by);
        vq_feed feeds[2] = {{"x", bx}, {"label", by}};
        vq_fetch fetch = {"loss", NULL};
        CHECK(vq_exec_run(ex, main_p, s, feeds, 2, &fetch, 1));
        losses[step] = f64 ? *(const double *)vq_tensor_data(fetch.tensor)
                           : *(const float *)vq_tensor_data(fetch.tensor);
        vq_tensor_release(fetch.tensor);
        vq_tensor_release(bx);
        vq_tensor_release(by);
        if (steps < 0 && (step + 1) % nbatches == 0) {
            long epoch = (step + 1) / nbatches;
            if (epoch % 5 == 0 || epoch == epochs)
                printf("epoch %2ld: loss %.4f, held-out accuracy %.2f%%\n", epoch, losses[step],
                       100 * accuracy(ex, eval, s, test_x, test_y));
        }
    }
    if (losses_path) {
        vq_tensor *t;
        CHECK(vq_tensor_from(&t, VQ_F64, 1, (int64_t[]){total}, losses));
        CHECK(vq_npy_save(losses_path, t));
        vq_tensor_release(t);
    }
    free(losses);
    /* Tensors used with an engine go before it: the last release of one
     * that has a var pushes its free on that engine. */
    vq_exec_free(ex);
    vq_scope_free(s);
    vq_tensor *all[] = {train_x, train_y, test_x, test_y};
    for (int i = 0; i < 4; i++)
        vq_tensor_release(all[i]);
    vq_engine_free(e);
    vq_program_free(main_p);
    vq_program_free(eval);
    vq_program_free(startup);
    return 0;
}
