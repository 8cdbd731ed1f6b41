/* The vectorized f32 transcendentals (ops/math/vmath.c) at every ISA
 * level this CPU has, against double libm rounded to float: every 61st
 * float (70 million, both signs, denormals included) and every float in a
 * window around each edge (0, the denormal boundary, 1, each function's
 * overflow, underflow and saturation points, erf's range split), plus
 * +-0, +-inf and NaN. Each result must be within 2 ulp of the correctly
 * rounded one (the double bodies aim at 1; silu, in float, within 3); a
 * test prints the largest distance it saw. Also: the levels give the same bits (but the portable exp and log,
 * libm's), in place works, and
 * every length from 0 to a few chunks is covered (the tails). */
#include <criterion/criterion.h>

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ops/math/vmath.h"

static double ref_sigmoid(double x)
{
    return 1 / (1 + exp(-x));
}

static double ref_silu(double x)
{
    return x / (1 + exp(-x));
}

struct fn {
    const char *name;
    size_t at; /* offset of the function in struct vq__vmath */
    double (*ref)(double);
    float edges[8]; /* windows of floats around these (0 ends the list) */
    int ulps;       /* the bound, when not 2 */
};

static const struct fn fns[] = {
    {"exp", offsetof(struct vq__vmath, exp), exp, {88.72f, -87.33f, -103.97f, -104.f, 89.f}, 0},
    {"log", offsetof(struct vq__vmath, log), log, {1.f, 0x1.6a09e6p0f, 0x1.6a09e6p-1f, 2.f}, 0},
    {"erf", offsetof(struct vq__vmath, erf), erf, {1.f, 3.92f, 4.f, -1.f}, 0},
    {"tanh", offsetof(struct vq__vmath, tanh), tanh, {9.01f, 10.f, 0.5f}, 0},
    {"sigmoid",
     offsetof(struct vq__vmath, sigmoid),
     ref_sigmoid,
     {-103.97f, -87.33f, 17.f, 104.f},
     0},
    {"silu", offsetof(struct vq__vmath, silu), ref_silu, {-103.f, -108.f, -120.f, 17.f, 88.f}, 3},
};

static vq__vmath_fn fn_at(const struct fn *f, enum vq__isa_level l)
{
    vq__vmath_fn g;
    memcpy(&g, (const char *)vq__vmath_at(l) + f->at, sizeof g);
    return g;
}

/* Distance in floats between a and b (0 for two NaNs, huge for one). */
static int64_t ulps(float a, float b)
{
    if (isnan(a) || isnan(b))
        return isnan(a) && isnan(b) ? 0 : INT64_MAX;
    int32_t ia, ib;
    memcpy(&ia, &a, sizeof ia);
    memcpy(&ib, &b, sizeof ib);
    int64_t oa = ia < 0 ? (int64_t)INT32_MIN - ia : ia, ob = ib < 0 ? (int64_t)INT32_MIN - ib : ib;
    return oa > ob ? oa - ob : ob - oa;
}

#define BATCH 4096

/* Runs f at level l over the n floats in x, checking each; keeps the
 * largest distance in *worst. */
static void check_batch(const struct fn *f, enum vq__isa_level l, const float *x, int n,
                        int64_t *worst)
{
    float o[BATCH];
    fn_at(f, l)(x, o, n);
    for (int i = 0; i < n; i++) {
        float want = (float)f->ref((double)x[i]);
        int64_t u = ulps(o[i], want);
        if (u > *worst)
            *worst = u;
        cr_assert_leq(u, f->ulps ? f->ulps : 2, "%s at %s: f(%a) = %a, want %a (%lld ulp)", f->name,
                      vq__isa_name(l), x[i], o[i], want, (long long)u);
    }
}

/* Every float whose bits are in [lo, hi] stepping by step, in batches. */
static void check_range(const struct fn *f, enum vq__isa_level l, uint64_t lo, uint64_t hi,
                        uint64_t step, int64_t *worst)
{
    float x[BATCH];
    int n = 0;
    for (uint64_t b = lo; b <= hi; b += step) {
        uint32_t b32 = (uint32_t)b;
        memcpy(&x[n++], &b32, sizeof b32);
        if (n == BATCH) {
            check_batch(f, l, x, n, worst);
            n = 0;
        }
    }
    if (n)
        check_batch(f, l, x, n, worst);
}

static void check_fn(const struct fn *f)
{
    for (int l = VQ__ISA_PORTABLE; l <= (int)vq__isa_cpu(); l++) {
        int64_t worst = 0;
        check_range(f, l, 0, 0xffffffffu, 61, &worst);
        /* windows: both signs of 0 and the denormals' top, then the edges */
        check_range(f, l, 0, 1u << 16, 1, &worst);
        check_range(f, l, 0x80000000u, 0x80000000u + (1u << 16), 1, &worst);
        check_range(f, l, 0x00800000u - (1u << 15), 0x00800000u + (1u << 15), 1, &worst);
        check_range(f, l, 0x80800000u - (1u << 15), 0x80800000u + (1u << 15), 1, &worst);
        for (int e = 0; e < 8 && f->edges[e] != 0; e++) {
            uint32_t b;
            memcpy(&b, &f->edges[e], sizeof b);
            check_range(f, l, b - (1u << 15), b + (1u << 15), 1, &worst);
        }
        const float special[] = {0.f, -0.f, INFINITY, -INFINITY, NAN, -NAN, FLT_MAX, -FLT_MAX};
        check_batch(f, l, special, 8, &worst);
        printf("vmath %s at %s: at most %lld ulp from the correctly rounded result\n", f->name,
               vq__isa_name((enum vq__isa_level)l), (long long)worst);
    }
}

Test(vmath, exp_within_2_ulp_at_every_level, .timeout = 300)
{
    check_fn(&fns[0]);
}

Test(vmath, log_within_2_ulp_at_every_level, .timeout = 300)
{
    check_fn(&fns[1]);
}

Test(vmath, erf_within_2_ulp_at_every_level, .timeout = 300)
{
    check_fn(&fns[2]);
}

Test(vmath, tanh_within_2_ulp_at_every_level, .timeout = 300)
{
    check_fn(&fns[3]);
}

Test(vmath, sigmoid_within_2_ulp_at_every_level, .timeout = 300)
{
    check_fn(&fns[4]);
}

Test(vmath, silu_within_3_ulp_at_every_level, .timeout = 300)
{
    check_fn(&fns[5]);
}

/* The exact special values the header promises (the ulp check lets a
 * NaN stand for a NaN and +-0 for each other). */
Test(vmath, special_values)
{
    const float x[] = {0.f, -0.f, INFINITY, -INFINITY, -1.f, NAN};
    float o[6];
    const struct vq__vmath *m = vq__vmath_at(vq__isa_cpu());
    m->exp(x, o, 6);
    cr_assert(o[0] == 1 && o[1] == 1 && o[2] == INFINITY && o[3] == 0 && !signbit(o[3]));
    cr_assert(isnan(o[5]));
    m->log(x, o, 6);
    cr_assert(o[0] == -INFINITY && o[1] == -INFINITY && o[2] == INFINITY && isnan(o[3]));
    cr_assert(isnan(o[4]) && isnan(o[5]));
    m->erf(x, o, 6);
    cr_assert(o[0] == 0 && !signbit(o[0]) && o[1] == 0 && signbit(o[1]));
    cr_assert(o[2] == 1 && o[3] == -1 && isnan(o[5]));
    m->tanh(x, o, 6);
    cr_assert(signbit(o[1]) && o[2] == 1 && o[3] == -1 && isnan(o[5]));
    m->sigmoid(x, o, 6);
    cr_assert(o[0] == 0.5f && o[2] == 1 && o[3] == 0 && isnan(o[5]));
    m->silu(x, o, 6);
    cr_assert(o[0] == 0 && o[2] == INFINITY && isnan(o[3]) && isnan(o[5]));
}

/* The levels agree bit for bit, in place too, at every length up to a
 * few chunks (the chunk tails). */
Test(vmath, levels_agree_in_place_and_at_every_length)
{
    enum { N = 1100 };
    static float x[N], ref[N], got[N];
    uint64_t s = 88172645463325252u;
    for (int i = 0; i < N; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        x[i] = (float)((double)(s >> 11) / 9007199254740992.0 * 40 - 20);
    }
    for (size_t f = 0; f < sizeof fns / sizeof fns[0]; f++)
        for (int n = 0; n <= N; n += n < 40 ? 1 : 97) {
            /* the portable exp and log are libm's: within 1 ulp, not the
             * same bits */
            bool libm = !strcmp(fns[f].name, "exp") || !strcmp(fns[f].name, "log");
            fn_at(&fns[f], vq__isa_cpu())(x, ref, n);
            for (int l = libm ? VQ__ISA_AVX2 : VQ__ISA_PORTABLE; l <= (int)vq__isa_cpu(); l++) {
                memcpy(got, x, sizeof got);
                fn_at(&fns[f], l)(got, got, n);
                cr_assert_arr_eq(got, ref, (size_t)n * sizeof *got, "%s at %s, n = %d", fns[f].name,
                                 vq__isa_name((enum vq__isa_level)l), n);
                cr_assert_eq(got[n < N ? n : N - 1], n < N ? x[n] : ref[N - 1],
                             "nothing written past n");
            }
        }
}

/* exp_sub (softmax's exp(x - m), the difference in double) at every
 * level: every 4099th float against m = 0, a line max of 3.5, -80 and
 * 100, within 2 ulp of exp of the exact difference; NaN for NaN and for
 * inf - inf. */
Test(vmath, exp_sub_within_2_ulp_at_every_level)
{
    const float ms[] = {0, 3.5f, -80, 100};
    static float x[BATCH], o[BATCH];
    for (int l = VQ__ISA_PORTABLE; l <= (int)vq__isa_cpu(); l++) {
        int64_t worst = 0;
        for (int k = 0; k < 4; k++) {
            int n = 0;
            for (uint64_t b = 0; b <= 0xffffffffu; b += 4099) {
                uint32_t b32 = (uint32_t)b;
                memcpy(&x[n++], &b32, sizeof b32);
                if (n < BATCH && b + 4099 <= 0xffffffffu)
                    continue;
                vq__vmath_at((enum vq__isa_level)l)->exp_sub(x, ms[k], o, n);
                for (int i = 0; i < n; i++) {
                    float want = (float)exp((double)x[i] - ms[k]);
                    int64_t u = ulps(o[i], want);
                    worst = u > worst ? u : worst;
                    cr_assert_leq(u, 2, "exp_sub at %s: exp(%a - %a) = %a, want %a",
                                  vq__isa_name((enum vq__isa_level)l), x[i], ms[k], o[i], want);
                }
                n = 0;
            }
        }
        const float inf[2] = {INFINITY, NAN};
        vq__vmath_at((enum vq__isa_level)l)->exp_sub(inf, INFINITY, o, 2);
        cr_assert(isnan(o[0]) && isnan(o[1]));
        printf("vmath exp_sub at %s: at most %lld ulp from the correctly rounded result\n",
               vq__isa_name((enum vq__isa_level)l), (long long)worst);
    }
}
