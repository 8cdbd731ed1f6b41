/* The seed program of varq, in C: a startup program that initializes a
 * Linear(16 -> 1) layer and a main program with MSE loss and Adam, run
 * through the executor on the threaded engine.
 *
 * Part 1 feeds ones, as the seed does, and prints the loss of each step.
 * Part 2 learns a real linear target y = x w* + b* from random data and
 * stops once the loss is below 1e-4. Exit status 0 when it got there. */
#include <varq/varq.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(call)                                                                        \
    do {                                                                                   \
        int rc_ = (call);                                                                  \
        if (rc_ < 0) {                                                                     \
            fprintf(stderr, "linear_regression: %s: %s\n", #call, vq_errmsg());            \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

/* startup + main: x [batch,16], label [batch,1], out = Linear(x), loss = MSE. */
static void build(vq_program **startup, vq_program **main, int64_t batch, double lr)
{
    CHECK(vq_program_new(startup));
    CHECK(vq_program_new(main));
    int64_t xs[2] = {batch, 16}, ls[2] = {batch, 1};
    CHECK(vq_program_add_var(*main, 0, "x", VQ_F32, 2, xs, false));
    CHECK(vq_program_add_var(*main, 0, "label", VQ_F32, 2, ls, false));
    CHECK(vq_layer_linear(*main, *startup, "x", "out", 1, 2026));
    CHECK(vq_layer_mse_loss(*main, "out", "label", "loss"));
    vq_optimizer adam = {.kind = VQ_OPT_ADAM, .learning_rate = lr};
    CHECK(vq_optimizer_minimize(*main, *startup, "loss", &adam));
}

static float train_step(vq_exec *ex, vq_program *main, vq_scope *s, vq_tensor *x,
                        vq_tensor *label)
{
    vq_feed feeds[2] = {{"x", x}, {"label", label}};
    vq_fetch fetch = {"loss", NULL};
    CHECK(vq_exec_run(ex, main, s, feeds, 2, &fetch, 1));
    float loss = *(float *)vq_tensor_data(fetch.tensor);
    vq_tensor_release(fetch.tensor);
    return loss;
}

static vq_tensor *filled(int64_t rows, int64_t cols, float value)
{
    int64_t shape[2] = {rows, cols};
    vq_tensor *t;
    CHECK(vq_tensor_new(&t, VQ_F32, 2, shape));
    float *d = vq_tensor_data(t);
    for (int64_t i = 0; i < rows * cols; i++)
        d[i] = value;
    return t;
}

int main(void)
{
    vq_engine *e;
    vq_exec *ex;
    CHECK(vq_engine_new(&e, NULL));
    CHECK(vq_exec_new(&ex, e, NULL));

    /* Part 1: the seed, with Paddle's default Adam learning rate. */
    vq_program *startup, *main_p;
    vq_scope *s;
    build(&startup, &main_p, 16, 0.001);
    CHECK(vq_scope_new(&s));
    CHECK(vq_exec_run(ex, startup, s, NULL, 0, NULL, 0));
    vq_tensor *x = filled(16, 16, 1), *label = filled(16, 1, 1);
    printf("seed program: x = ones[16,16], label = ones[16,1], Linear(16->1), MSE, Adam\n");
    for (int step = 0; step < 10; step++)
        printf("step %2d  loss %.6f\n", step, train_step(ex, main_p, s, x, label));
    vq_tensor_release(x);
    vq_tensor_release(label);
    vq_scope_free(s);
    vq_program_free(startup);
    vq_program_free(main_p);

    /* Part 2: y = x w* + b* with w*_i = (i - 7.5) / 8, b* = 0.25. */
    enum { N = 256 };
    build(&startup, &main_p, N, 0.05);
    CHECK(vq_scope_new(&s));
    CHECK(vq_exec_run(ex, startup, s, NULL, 0, NULL, 0));
    x = NULL;
    int64_t xs[2] = {N, 16};
    vq_attr init[3] = {VQ_ATTR_IS("shape", xs, 2), VQ_ATTR_I("seed", 11), VQ_ATTR_F("min", -1)};
    CHECK(vq_op_run(NULL, "uniform_random", NULL, 0, &x, 1, init, 3));
    label = filled(N, 1, 0);
    const float *xd = vq_tensor_data(x);
    float *yd = vq_tensor_data(label);
    for (int r = 0; r < N; r++) {
        double y = 0.25;
        for (int i = 0; i < 16; i++)
            y += xd[r * 16 + i] * (i - 7.5) / 8;
        yd[r] = (float)y;
    }
    float loss = INFINITY;
    int step = 0;
    for (; step < 3000 && !(loss < 1e-4f); step++) {
        loss = train_step(ex, main_p, s, x, label);
        if (step % 100 == 0)
            printf("linear target: step %4d  loss %.6g\n", step, loss);
    }
    printf("linear target: loss %.3g after %d steps (%s)\n", loss, step,
           loss < 1e-4f ? "below 1e-4" : "NOT below 1e-4");
    vq_tensor_release(x);
    vq_tensor_release(label);
    vq_scope_free(s);
    vq_program_free(startup);
    vq_program_free(main_p);
    vq_exec_free(ex);
    vq_engine_free(e);
    return loss < 1e-4f ? 0 : 1;
}
