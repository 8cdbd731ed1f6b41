/* vmath_bench: the f32 transcendentals of ops/math/vmath.c against the
 * scalar loops the kernels ran before them, in ns per element over 1M
 * floats (one thread, the arrays outside the caches as a model's
 * activations are).
 *
 *   scalar  the loops as the ops had them: sigmoid with libm's expf (a
 *           branch on the sign), exp, log and erf with expf / logf / erff,
 *           tanh with tanhf, silu as the two ops it was, sigmoid then
 *           mul (two passes);
 *   vmath   vq__vmath_at(level) at each ISA level the CPU has (portable,
 *           avx2, avx512), the same bits at each.
 *
 * Inputs uniform in [-8, 8] ([1e-3, 100] for log). Each timing is the
 * minimum and the median of the repetitions.
 *
 * usage: vmath_bench [--tiny] [--n N] [--reps R] */
#include "measure.h"

#include "../ops/math/vmath.h"

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void sigmoid_scalar(const float *x, float *o, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        float v = x[i];
        if (v >= 0) {
            o[i] = 1 / (1 + expf(-v));
        } else {
            float e = expf(v);
            o[i] = e / (1 + e);
        }
    }
}

static void tanh_scalar(const float *x, float *o, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        o[i] = tanhf(x[i]);
}

static void exp_scalar(const float *x, float *o, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        o[i] = expf(x[i]);
}

static void log_scalar(const float *x, float *o, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        o[i] = logf(x[i]);
}

static void erf_scalar(const float *x, float *o, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        o[i] = erff(x[i]);
}

/* the sigmoid op, then the mul op of x by its output */
static void silu_scalar(const float *x, float *o, int64_t n)
{
    sigmoid_scalar(x, o, n);
    for (int64_t i = 0; i < n; i++)
        o[i] = x[i] * o[i];
}

struct fn {
    const char *name;
    vq__vmath_fn scalar;
    size_t at; /* offset in struct vq__vmath */
};

static const struct fn fns[] = {
    {"sigmoid", sigmoid_scalar, offsetof(struct vq__vmath, sigmoid)},
    {"tanh", tanh_scalar, offsetof(struct vq__vmath, tanh)},
    {"exp", exp_scalar, offsetof(struct vq__vmath, exp)},
    {"silu", silu_scalar, offsetof(struct vq__vmath, silu)},
    {"erf", erf_scalar, offsetof(struct vq__vmath, erf)},
    {"log", log_scalar, offsetof(struct vq__vmath, log)},
};

/* ns per element of f over x: minimum and median of reps runs */
static void time_fn(vq__vmath_fn f, const float *x, float *o, int64_t n, int reps, double *min,
                    double *med)
{
    double *t = malloc((size_t)reps * sizeof *t);
    if (!t) {
        perror("malloc");
        exit(1);
    }
    f(x, o, n); /* the pages touched, the code warm */
    for (int r = 0; r < reps; r++) {
        double t0 = bench_now();
        f(x, o, n);
        t[r] = (bench_now() - t0) * 1e9 / (double)n;
    }
    *med = bench_median(t, reps);
    *min = t[0];
    free(t);
}

int main(int argc, char **argv)
{
    int64_t n = 1 << 20;
    int reps = 20;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tiny")) {
            n = 4096;
            reps = 3;
        } else if (!strcmp(argv[i], "--n") && i + 1 < argc) {
            n = atoll(argv[++i]);
        } else if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
            reps = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: %s [--tiny] [--n N] [--reps R]\n", argv[0]);
            return 2;
        }
    }
    if (n < 1 || reps < 1) {
        fprintf(stderr, "vmath_bench: --n and --reps must be positive\n");
        return 2;
    }
    float *x = malloc((size_t)n * sizeof *x), *xl = malloc((size_t)n * sizeof *xl);
    float *o = malloc((size_t)n * sizeof *o), *ref = malloc((size_t)n * sizeof *ref);
    if (!x || !xl || !o || !ref) {
        perror("malloc");
        return 1;
    }
    uint64_t s = 0x9e3779b97f4a7c15u;
    for (int64_t i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        double u = (double)(s >> 11) / 9007199254740992.0;
        x[i] = (float)(u * 16 - 8);
        xl[i] = (float)(1e-3 + u * 100);
    }
    int top = vq__isa_cpu();
    printf("%lld f32 elements, %d repetitions; ns per element, minimum (median)\n", (long long)n,
           reps);
    printf("%-8s %17s", "", "scalar");
    for (int l = VQ__ISA_PORTABLE; l <= top; l++)
        printf(" %17s", vq__isa_name((enum vq__isa_level)l));
    printf("\n");
    int bad = 0;
    for (size_t f = 0; f < sizeof fns / sizeof fns[0]; f++) {
        const float *in = !strcmp(fns[f].name, "log") ? xl : x;
        double min, med;
        time_fn(fns[f].scalar, in, ref, n, reps, &min, &med);
        printf("%-8s %8.3f (%6.3f)", fns[f].name, min, med);
        for (int l = VQ__ISA_PORTABLE; l <= top; l++) {
            vq__vmath_fn g;
            memcpy(&g, (const char *)vq__vmath_at((enum vq__isa_level)l) + fns[f].at, sizeof g);
            time_fn(g, in, o, n, reps, &min, &med);
            printf(" %8.3f (%6.3f)", min, med);
            /* the same functions: a few ulp apart at most (libm's are
             * within 1 ulp, vmath's too; silu_scalar rounds twice) */
            for (int64_t i = 0; i < n; i++)
                if (!(fabsf(o[i] - ref[i]) <= 4e-7f * fabsf(ref[i]) + 1e-37f)) {
                    fprintf(stderr, "\n%s at %s: f(%a) = %a, scalar %a\n", fns[f].name,
                            vq__isa_name((enum vq__isa_level)l), in[i], o[i], ref[i]);
                    bad = 1;
                    break;
                }
        }
        printf("\n");
    }
    free(x);
    free(xl);
    free(o);
    free(ref);
    return bad;
}
