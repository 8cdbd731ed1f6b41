/* qgemm_bench: the quantized products against the f32 one, one thread, on
 * A [M, K] times B [K, N] (default 256 x 1024 x 1024): the ops matmul
 * (f32, varq's own sgemm), matmul_integer (u8 x i8 -> i32) and
 * qlinear_matmul (u8 x i8 -> u8, requantized) as vq_op_run runs them
 * outside any engine, and the integer product itself (ops/math/qgemm.c)
 * at each level the CPU has. Milliseconds per call, median and fastest of
 * the repetitions (the methods alternated), and each one's speed over the
 * f32 matmul's. Then convolutions of ResNet-50 and MobileNet at batch 1:
 * conv2d in f32 against qlinear_conv (u8 activations, i8 weights per
 * output channel).
 *
 * usage: qgemm_bench [--tiny] [--reps R] [--size M N K] */
#include "measure.h"

#include "../ops/math/isa.h"
#include "../ops/math/qgemm.h"

#include <varq/varq.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NMETHODS 6

static int64_t M = 256, N = 1024, K = 1024;
static vq_tensor *af, *bf, *aq, *bq, *za, *zb, *sa, *sb, *sy, *zy;
static int32_t *craw;

static vq_tensor *filled(vq_dtype dt, int ndim, const int64_t *shape, unsigned seed)
{
    vq_tensor *t;
    if (vq_tensor_new(&t, dt, ndim, shape) < 0)
        exit(1);
    int64_t n = vq_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        if (dt == VQ_F32)
            ((float *)vq_tensor_data(t))[i] = (float)(seed >> 8) / (float)(1u << 24) - 0.5f;
        else
            ((uint8_t *)vq_tensor_data(t))[i] = (uint8_t)(seed >> 24);
    }
    return t;
}

static vq_tensor *scalar(vq_dtype dt, double v)
{
    vq_tensor *t;
    if (vq_tensor_new(&t, dt, 0, NULL) < 0)
        exit(1);
    if (dt == VQ_F32)
        *(float *)vq_tensor_data(t) = (float)v;
    else
        *(uint8_t *)vq_tensor_data(t) = (uint8_t)v;
    return t;
}

static const char *names[NMETHODS] = {"matmul f32",
                                      "matmul_integer u8 x i8",
                                      "qlinear_matmul u8 x i8",
                                      "qgemm portable",
                                      "qgemm avx2",
                                      "qgemm avx512vnni"};

static void run_op(const char *type, vq_tensor **in, int nin)
{
    vq_tensor *out = NULL;
    if (vq_op_run(NULL, type, in, nin, &out, 1, NULL, 0) < 0) {
        fprintf(stderr, "%s: %s\n", type, vq_errmsg());
        exit(1);
    }
    vq_tensor_release(out);
}

static void call(int method)
{
    if (method == 0) {
        vq_tensor *in[2] = {af, bf};
        run_op("matmul", in, 2);
    } else if (method == 1) {
        vq_tensor *in[4] = {aq, bq, za, zb};
        run_op("matmul_integer", in, 4);
    } else if (method == 2) {
        vq_tensor *in[8] = {aq, sa, za, bq, sb, zb, sy, zy};
        run_op("qlinear_matmul", in, 8);
    } else {
        int32_t z0 = 3, z1 = -2;
        vq__qgemm_args g = {.m = M,
                            .n = N,
                            .k = K,
                            .a = vq_tensor_data(aq),
                            .lda = K,
                            .za = &z0,
                            .b = vq_tensor_data(bq),
                            .ldb = N,
                            .b_signed = true,
                            .zb = &z1,
                            .c = craw,
                            .ldc = N};
        vq__qgemm_at((enum vq__isa_level)(method - 3), &g);
    }
}

struct conv_case {
    const char *name;
    int64_t c, h, m, k, stride, groups;
};

static const struct conv_case convs[] = {
    {"resnet50 3x3 64 56x56", 64, 56, 64, 3, 1, 1},
    {"resnet50 1x1 256->64 56x56", 256, 56, 64, 1, 1, 1},
    {"resnet50 3x3 256 14x14", 256, 14, 256, 3, 1, 1},
    {"mobilenet dw 3x3 144 56x56", 144, 56, 144, 3, 1, 144},
};

/* conv2d f32 against qlinear_conv on one case, alternated. */
static void conv_bench(const struct conv_case *cc, int reps)
{
    int64_t xs[4] = {1, cc->c, cc->h, cc->h}, ws[4] = {cc->m, cc->c / cc->groups, cc->k, cc->k};
    int64_t pad = cc->k / 2, pads[4] = {pad, pad, pad, pad}, st[2] = {cc->stride, cc->stride};
    vq_attr at[3] = {VQ_ATTR_IS("pads", pads, 4), VQ_ATTR_IS("strides", st, 2),
                     VQ_ATTR_I("groups", cc->groups)};
    vq_tensor *xf = filled(VQ_F32, 4, xs, 5), *wf = filled(VQ_F32, 4, ws, 6);
    vq_tensor *xq = filled(VQ_U8, 4, xs, 7), *wq = filled(VQ_I8, 4, ws, 8);
    vq_tensor *wsc, *wz;
    if (vq_tensor_new(&wsc, VQ_F32, 1, &cc->m) < 0 || vq_tensor_new(&wz, VQ_I8, 1, &cc->m) < 0)
        exit(1);
    for (int64_t i = 0; i < cc->m; i++) {
        ((float *)vq_tensor_data(wsc))[i] = 0.01f;
        ((int8_t *)vq_tensor_data(wz))[i] = 0;
    }
    vq_tensor *fin[2] = {xf, wf}, *qin[8] = {xq, sa, za, wq, wsc, wz, sy, zy};
    double *t = calloc((size_t)(2 * reps), sizeof *t);
    for (int r = -1; r < reps; r++)
        for (int m = 0; m < 2; m++) {
            vq_tensor *out = NULL;
            double t0 = bench_now();
            int rc = m ? vq_op_run(NULL, "qlinear_conv", qin, 8, &out, 1, at, 3)
                       : vq_op_run(NULL, "conv2d", fin, 2, &out, 1, at, 3);
            if (rc < 0) {
                fprintf(stderr, "%s\n", vq_errmsg());
                exit(1);
            }
            if (r >= 0)
                t[m * reps + r] = bench_now() - t0;
            vq_tensor_release(out);
        }
    double fmed, fmin, qmed, qmin;
    bench_stats(t, reps, &fmed, &fmin);
    bench_stats(t + reps, reps, &qmed, &qmin);
    printf("  %-28s conv2d f32 %7.3f %7.3f  qlinear_conv %7.3f %7.3f  %5.2fx\n", cc->name,
           fmed * 1e3, fmin * 1e3, qmed * 1e3, qmin * 1e3, fmed / qmed);
    free(t);
    vq_tensor *all[] = {xf, wf, xq, wq, wsc, wz};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        vq_tensor_release(all[i]);
}

int main(int argc, char **argv)
{
    int reps = 15;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tiny"))
            M = 16, N = 64, K = 64, reps = 2;
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--size") && i + 3 < argc) {
            M = atoll(argv[++i]);
            N = atoll(argv[++i]);
            K = atoll(argv[++i]);
        } else {
            fprintf(stderr, "usage: qgemm_bench [--tiny] [--reps R] [--size M N K]\n");
            return 2;
        }
    }
    if (reps < 1 || M < 1 || N < 1 || K < 1)
        return 2;
    int64_t as[2] = {M, K}, bs[2] = {K, N};
    af = filled(VQ_F32, 2, as, 1), bf = filled(VQ_F32, 2, bs, 2);
    aq = filled(VQ_U8, 2, as, 3), bq = filled(VQ_I8, 2, bs, 4);
    za = scalar(VQ_U8, 128), zb = scalar(VQ_I8, 0);
    sa = scalar(VQ_F32, 0.01), sb = scalar(VQ_F32, 0.02), sy = scalar(VQ_F32, 0.5);
    zy = scalar(VQ_U8, 128);
    craw = malloc((size_t)(M * N) * sizeof *craw);
    int nm = 3 + (int)vq__isa_cpu() + 1;
    double *t = calloc((size_t)(NMETHODS * reps), sizeof *t);
    for (int m = 0; m < nm; m++)
        call(m); /* warm: allocators, pages, the ISA's one-time reads */
    for (int r = 0; r < reps; r++)
        for (int m = 0; m < nm; m++) {
            double t0 = bench_now();
            call(m);
            t[m * reps + r] = bench_now() - t0;
        }
    printf("%lld x %lld x %lld, one thread, %d reps (ms per call: median, fastest; speed "
           "over matmul f32 by median)\n",
           (long long)M, (long long)N, (long long)K, reps);
    double base = 0;
    for (int m = 0; m < nm; m++) {
        double med, min;
        bench_stats(t + m * reps, reps, &med, &min);
        if (m == 0)
            base = med;
        const char *name = names[m];
        if (m >= 3)
            name = m == 5 && strcmp(vq__qgemm_path(VQ__ISA_AVX512), "avx512vnni")
                       ? "qgemm avx2 (no VNNI)"
                       : names[m];
        printf("  %-26s %8.3f %8.3f  %5.2fx  %6.1f Gop/s\n", name, med * 1e3, min * 1e3, base / med,
               2.0 * (double)M * (double)N * (double)K / med * 1e-9);
    }
    free(t);
    free(craw);
    printf("convolutions, batch 1, one thread (ms per call: median, fastest; speed of "
           "qlinear_conv over conv2d by median)\n");
    for (size_t c = 0; c < sizeof convs / sizeof *convs; c++) {
        struct conv_case cc = convs[c];
        if (reps <= 2) /* --tiny */
            cc.h = 6;
        conv_bench(&cc, reps);
    }
    vq_tensor *all[] = {af, bf, aq, bq, za, zb, sa, sb, sy, zy};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        vq_tensor_release(all[i]);
    return 0;
}
