/* rnn_ops_bench: one call of the lstm and gru ops (ops/cpu/rnn.c) on a
 * 2-layer network, forward alone (no Reserve: inference) and forward with
 * Reserve plus the gradient op (a training step's share), f32, on a
 * threaded engine; bench/rnn_ops_torch.py times PyTorch eager's nn.LSTM and
 * nn.GRU on the same sizes.
 *
 * usage: rnn_ops_bench [--workers N] [--reps R] [--tiny]
 *   sizes: input 32, hidden 64, seq 20, batch 4; input 32, hidden 256,
 *   seq 200, batch 32 (--tiny: the first alone, a few reps).
 *   Prints per case the median (min) milliseconds of R calls, and the
 *   median CPU milliseconds of the process (all its threads) per call: the
 *   figure to compare on a loaded machine. */
#include <varq/varq.h>

#include "measure.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAXIN 32

static uint64_t seed = 42;

static float uniform(float a)
{
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    return a * (2.0f * (float)(seed >> 40) / (float)(1ull << 24) - 1.0f);
}

static vq_tensor *rand_tensor(int nd, const int64_t *shape, float a)
{
    int64_t n = 1;
    for (int d = 0; d < nd; d++)
        n *= shape[d];
    float *v = malloc((size_t)n * sizeof *v);
    for (int64_t i = 0; i < n; i++)
        v[i] = uniform(a);
    vq_tensor *t;
    if (vq_tensor_from(&t, VQ_F32, nd, shape, v) < 0)
        t = NULL;
    free(v);
    return t;
}

static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int fail(const char *what)
{
    fprintf(stderr, "rnn_ops_bench: %s: %s\n", what, vq_errmsg());
    return 1;
}

/* The median and minimum of reps runs of forward (train: and backward). */
static int run_case(vq_engine *e, const char *type, int64_t I, int64_t H, int64_t T, int64_t B,
                    int reps, bool train)
{
    int G = !strcmp(type, "lstm") ? 4 : 3, L = 2, nin = 0;
    vq_tensor *in[MAXIN];
    in[nin++] = rand_tensor(3, (int64_t[]){T, B, I}, 1);
    for (int l = 0; l < L; l++) {
        in[nin++] = rand_tensor(2, (int64_t[]){G * H, l ? H : I}, 0.1f);
        in[nin++] = rand_tensor(2, (int64_t[]){G * H, H}, 0.1f);
        in[nin++] = rand_tensor(1, (int64_t[]){G * H}, 0.1f);
        in[nin++] = rand_tensor(1, (int64_t[]){G * H}, 0.1f);
    }
    vq_attr at[3] = {VQ_ATTR_I("hidden_size", H), VQ_ATTR_I("num_layers", L),
                     VQ_ATTR_I("grads", 1)};
    int nout = (G == 4 ? 3 : 2) + train;
    char gt[16];
    snprintf(gt, sizeof gt, "%s_grad", type);
    double *t = malloc((size_t)reps * sizeof *t), *cpu = malloc((size_t)reps * sizeof *cpu);
    for (int r = -2; r < reps; r++) {
        vq_tensor *out[4] = {0}, *g[MAXIN] = {0}, *gin[MAXIN];
        double t0 = bench_now(), c0 = cpu_now();
        if (vq_op_run(e, type, in, nin, out, nout, at, 2) < 0)
            return fail(type);
        if (train) {
            memcpy(gin, in, sizeof(vq_tensor *) * (size_t)nin);
            gin[nin] = out[nout - 1];
            gin[nin + 1] = out[0]; /* dY: any tensor of Y's shape */
            if (vq_op_run(e, gt, gin, nin + 2, g, nin, at, 3) < 0)
                return fail(gt);
            for (int i = 0; i < nin; i++)
                if (vq_tensor_wait(g[i]) < 0)
                    return fail(gt);
        }
        if (vq_tensor_wait(out[0]) < 0)
            return fail(type);
        double dt = bench_now() - t0;
        if (r >= 0) {
            t[r] = dt;
            cpu[r] = cpu_now() - c0;
        }
        for (int j = 0; j < nout; j++)
            vq_tensor_release(out[j]);
        for (int i = 0; train && i < nin; i++)
            vq_tensor_release(g[i]);
    }
    double med = bench_median(t, reps), cmed = bench_median(cpu, reps);
    printf("%-4s %-8s I=%lld H=%lld T=%lld B=%lld L=2: %.3f ms (min %.3f), cpu %.3f ms\n", type,
           train ? "fwd+bwd" : "forward", (long long)I, (long long)H, (long long)T, (long long)B,
           med * 1e3, t[0] * 1e3, cmed * 1e3);
    free(t);
    free(cpu);
    for (int i = 0; i < nin; i++)
        vq_tensor_release(in[i]);
    return 0;
}

int main(int argc, char **argv)
{
    int workers = 2, reps = 20;
    bool tiny = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--workers") && i + 1 < argc)
            workers = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--tiny"))
            tiny = true;
        else {
            fprintf(stderr, "usage: rnn_ops_bench [--workers N] [--reps R] [--tiny]\n");
            return 2;
        }
    }
    if (tiny)
        reps = 3;
    vq_engine *e;
    if (vq_engine_new(&e, &(vq_engine_opts){.kind = VQ_ENGINE_THREADED, .cpu_workers = workers}) <
        0)
        return fail("engine");
    static const int64_t sizes[2][4] = {{32, 64, 20, 4}, {32, 256, 200, 32}};
    static const char *const types[2] = {"lstm", "gru"};
    int rc = 0;
    for (int s = 0; s < (tiny ? 1 : 2) && !rc; s++)
        for (int ty = 0; ty < 2 && !rc; ty++)
            for (int tr = 0; tr < 2 && !rc; tr++)
                rc = run_case(e, types[ty], sizes[s][0], sizes[s][1], sizes[s][2], sizes[s][3],
                              s ? (reps + 3) / 4 : reps, tr);
    vq_engine_free(e);
    return rc;
}
