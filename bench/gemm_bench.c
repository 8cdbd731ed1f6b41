/* gemm_bench: varq's own f32 product (ops/math/sgemm.c) at each width the
 * CPU has against OpenBLAS's cblas_sgemm as the process loaded it (its
 * kernel is printed: Debian 12's OpenBLAS takes Prescott's SSE3 kernel on
 * CPUs newer than its release; OPENBLAS_CORETYPE=Haswell or SkylakeX in
 * the environment picks another), one thread each, on the products of the
 * models varq is measured on: ResNet-50's 1x1 and 3x3 (im2col)
 * convolutions at batch 1, MobileNet's 1x1, AlexNet's fully connected
 * layers at batch 1 and 8 (B transposed, as ONNX's Gemm with transB gives
 * them) and a small transformer's linear layer. GFLOP/s of the median and
 * of the fastest of the repetitions (each about 2 ms of calls, the three
 * alternated; the fastest is the figure nearest a quiet machine).
 *
 * usage: gemm_bench [--tiny] [--reps R] */
#include "measure.h"

#include "../ops/math/isa.h"
#include "../ops/math/sgemm.h"

#include <cblas.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* OpenBLAS's own calls (openblas_config.h), declared here so that a CBLAS
 * without them is a link error rather than a silent other library. */
char *openblas_get_corename(void);
void openblas_set_num_threads(int n);

struct shape {
    const char *name;
    bool ta, tb;
    int64_t m, n, k;
};

static const struct shape shapes[] = {
    {"resnet50 1x1 64->256 56x56", false, false, 256, 3136, 64},
    {"resnet50 1x1 256->64 56x56", false, false, 64, 3136, 256},
    {"resnet50 3x3 im2col 64 56x56", false, false, 64, 3136, 576},
    {"resnet50 1x1 1024->256 14x14", false, false, 256, 196, 1024},
    {"mobilenet 1x1 16->96 28x28", false, false, 96, 784, 16},
    {"mobilenet 1x1 96->24 56x56", false, false, 24, 3136, 96},
    {"alexnet fc b1 (transB)", false, true, 1, 4096, 9216},
    {"alexnet fc b8 (transB)", false, true, 8, 4096, 9216},
    {"alexnet fc b1 (B plain)", false, false, 1, 4096, 9216},
    {"transformer linear (transB)", false, true, 32, 512, 128},
    {"transformer linear", false, false, 32, 512, 128},
    {"matmul grad A^T B", true, false, 128, 512, 256},
};

struct timing {
    const struct shape *s;
    const float *a, *b;
    float *c;
};

/* method: -1 OpenBLAS, else the ISA level of varq's kernel. */
static void call(int method, const struct timing *t)
{
    const struct shape *s = t->s;
    int64_t lda = s->ta ? s->m : s->k, ldb = s->tb ? s->k : s->n;
    if (method < 0)
        cblas_sgemm(CblasRowMajor, s->ta ? CblasTrans : CblasNoTrans,
                    s->tb ? CblasTrans : CblasNoTrans, (int)s->m, (int)s->n, (int)s->k, 1, t->a,
                    (int)lda, t->b, (int)ldb, 0, t->c, (int)s->n);
    else if (!vq__sgemm_at((enum vq__isa_level)method, s->ta, s->tb, s->m, s->n, s->k, 1, t->a, lda,
                           t->b, ldb, 0, t->c, s->n, NULL))
        fprintf(stderr, "gemm_bench: no packing buffer\n");
}

/* Calls per timing: enough to take about 2 ms (1 with tiny), after a
 * warm-up call (buffers, pages, caches). */
static int calls_for(int method, const struct timing *t, bool tiny)
{
    call(method, t);
    double t0 = bench_now();
    call(method, t);
    double one = bench_now() - t0;
    return tiny ? 1 : (int)(2e-3 / (one > 1e-7 ? one : 1e-7)) + 1;
}

#define METHODS 3 /* OpenBLAS, AVX2, AVX-512 */

/* GFLOP/s of the median and of the fastest of reps timings per method,
 * the methods alternated within each repetition so that a busy phase of a
 * shared machine falls on all of them; 0 for a method the CPU lacks. */
static void measure(const struct timing *t, int reps, bool tiny, enum vq__isa_level cpu,
                    double gf[METHODS], double best[METHODS])
{
    double flop = 2.0 * (double)t->s->m * (double)t->s->n * (double)t->s->k;
    int calls[METHODS];
    double *v = malloc((size_t)(METHODS * reps) * sizeof *v);
    if (!v)
        return;
    for (int i = 0; i < METHODS; i++) {
        gf[i] = best[i] = 0;
        calls[i] = i == 0 || i <= (int)cpu ? calls_for(i == 0 ? -1 : i, t, tiny) : 0;
    }
    for (int r = 0; r < reps; r++)
        for (int i = 0; i < METHODS; i++) {
            if (!calls[i])
                continue;
            double t0 = bench_now();
            for (int c = 0; c < calls[i]; c++)
                call(i == 0 ? -1 : i, t);
            v[i * reps + r] = (bench_now() - t0) / calls[i];
        }
    for (int i = 0; i < METHODS; i++)
        if (calls[i]) {
            gf[i] = flop / bench_median(v + i * reps, reps) * 1e-9;
            best[i] = flop / v[i * reps] * 1e-9; /* sorted by bench_median */
        }
    free(v);
}

int main(int argc, char **argv)
{
    bool tiny = false;
    int reps = 21;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tiny"))
            tiny = true;
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: gemm_bench [--tiny] [--reps R]\n");
            return 2;
        }
    }
    if (tiny)
        reps = 1;
    if (reps < 1)
        reps = 1;
    openblas_set_num_threads(1);
    enum vq__isa_level cpu = vq__isa_cpu();
    const char *core = getenv("OPENBLAS_CORETYPE");
    printf("varq's own f32 product against OpenBLAS (kernel %s%s%s), one thread, GFLOP/s "
           "(median of %d)\n",
           openblas_get_corename(), core ? ", OPENBLAS_CORETYPE=" : "", core ? core : "", reps);
    printf("%-32s %6s %6s %6s %6s | %13s %13s %13s\n", "", "", "", "", "", "openblas", "avx2",
           "avx512");
    printf("%-32s %6s %6s %6s %6s | %6s %6s %6s %6s %6s %6s\n", "shape", "m", "n", "k", "form",
           "median", "best", "median", "best", "median", "best");
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const struct shape *s = &shapes[si];
        size_t na = (size_t)(s->m * s->k), nb = (size_t)(s->k * s->n), nc = (size_t)(s->m * s->n);
        if (tiny && (na + nb) * 4 > (64u << 20))
            continue;
        float *a = malloc(na * sizeof *a), *b = malloc(nb * sizeof *b), *c = malloc(nc * sizeof *c);
        if (!a || !b || !c) {
            fprintf(stderr, "gemm_bench: out of memory\n");
            return 1;
        }
        for (size_t i = 0; i < na; i++)
            a[i] = (float)(i % 17) * 0.01f - 0.08f;
        for (size_t i = 0; i < nb; i++)
            b[i] = (float)(i % 13) * 0.01f - 0.06f;
        struct timing t = {s, a, b, c};
        char form[8];
        snprintf(form, sizeof form, "%s%s", s->ta ? "AT" : "A", s->tb ? "BT" : "B");
        double gf[METHODS], best[METHODS];
        measure(&t, reps, tiny, cpu, gf, best);
        printf("%-32s %6lld %6lld %6lld %6s |", s->name, (long long)s->m, (long long)s->n,
               (long long)s->k, form);
        for (int i = 0; i < METHODS; i++) {
            if (gf[i] > 0)
                printf(" %6.1f %6.1f", gf[i], best[i]);
            else
                printf(" %6s %6s", "-", "-");
        }
        printf("\n");
        fflush(stdout);
        free(a);
        free(b);
        free(c);
    }
    return 0;
}
