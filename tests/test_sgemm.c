/* varq's own f32 product (ops/math/sgemm.c) at each width the CPU has
 * (AVX2 and, where there is one, AVX-512: vq__sgemm_at, so both run on an
 * AVX-512 machine whatever VARQ_ISA says), against a plain loop that sums
 * in double: every transpose form, m, n and k across the edges of the
 * tiles (6 and 8 rows, 8, 16 and 32 columns), the streaming products (m <=
 * 4) and the blocks of k and columns (256), alpha and beta 0, 1 and
 * others, C's rows longer than n (the rest untouched) and NaN in C under
 * beta 0. Each element must be within k 2^-23 (sum |alpha a b| + |beta
 * c|) of the loop's. Also: the fused epilogue gives the bits of the
 * product followed by conv2d's bias and clip; the packed-panels entry
 * point gives the bits of the plain one; both widths give the same bits
 * but for the dot products (their lanes differ). */
#include <criterion/criterion.h>

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../ops/math/isa.h"
#include "../ops/math/sgemm.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15u;

/* Uniform in [-1, 1) (xorshift64*: the same values every run). */
static float uniform(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    uint64_t r = rng_state * 0x2545f4914f6cdd1du;
    return (float)((double)(r >> 40) / (double)(1u << 23) - 1);
}

/* The widths to test: AVX2, and AVX-512 where the CPU has it. */
static int levels(enum vq__isa_level out[2])
{
    int n = 0;
    for (int l = VQ__ISA_AVX2; l <= (int)vq__isa_cpu(); l++)
        out[n++] = (enum vq__isa_level)l;
    return n;
}

struct prod {
    bool ta, tb;
    int64_t m, n, k, lda, ldb, ldc;
    float alpha, beta;
    float *a, *b, *c0; /* c0: C before the product (NaN for beta 0) */
};

static void prod_make(struct prod *p, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                      float alpha, float beta)
{
    *p = (struct prod){.ta = ta, .tb = tb, .m = m, .n = n, .k = k, .alpha = alpha, .beta = beta};
    p->lda = (ta ? m : k) + 3;
    p->ldb = (tb ? k : n) + 5;
    p->ldc = n + 7;
    size_t na = (size_t)((ta ? k : m) * p->lda), nb = (size_t)((tb ? n : k) * p->ldb);
    size_t nc = (size_t)(m * p->ldc);
    p->a = malloc(na * sizeof(float));
    p->b = malloc(nb * sizeof(float));
    p->c0 = malloc(nc * sizeof(float));
    cr_assert(p->a && p->b && p->c0);
    for (size_t i = 0; i < na; i++)
        p->a[i] = uniform();
    for (size_t i = 0; i < nb; i++)
        p->b[i] = uniform();
    for (size_t i = 0; i < nc; i++)
        p->c0[i] = beta == 0 ? NAN : uniform();
}

static void prod_free(struct prod *p)
{
    free(p->a);
    free(p->b);
    free(p->c0);
}

static float *prod_c(const struct prod *p)
{
    size_t nc = (size_t)(p->m * p->ldc);
    float *c = malloc(nc * sizeof(float));
    cr_assert(c);
    memcpy(c, p->c0, nc * sizeof(float));
    return c;
}

static bool run_at(enum vq__isa_level l, const struct prod *p, float *c, const vq__sg_epilogue *ep)
{
    return vq__sgemm_at(l, p->ta, p->tb, p->m, p->n, p->k, p->alpha, p->a, p->lda, p->b, p->ldb,
                        p->beta, c, p->ldc, ep);
}

/* c against the double loop, within the bound; C past n untouched. */
static void check(const struct prod *p, const float *c, const char *what)
{
    for (int64_t i = 0; i < p->m; i++) {
        for (int64_t j = 0; j < p->n; j++) {
            double s = 0, mag = 0;
            for (int64_t q = 0; q < p->k; q++) {
                double x = p->ta ? p->a[q * p->lda + i] : p->a[i * p->lda + q];
                double y = p->tb ? p->b[j * p->ldb + q] : p->b[q * p->ldb + j];
                s += x * y;
                mag += fabs(x * y);
            }
            double want = p->alpha * s, c0 = p->c0[i * p->ldc + j];
            mag = fabs(p->alpha) * mag;
            if (p->beta != 0) {
                want += p->beta * c0;
                mag += fabs(p->beta * c0);
            }
            double got = c[i * p->ldc + j];
            double bound = (double)(p->k + 2) * 0x1p-23 * mag + 1e-30;
            cr_assert(fabs(got - want) <= bound,
                      "%s: %lldx%lldx%lld ta=%d tb=%d alpha=%g beta=%g: C[%lld,%lld] = %.9g, "
                      "want %.9g (bound %.3g)",
                      what, (long long)p->m, (long long)p->n, (long long)p->k, p->ta, p->tb,
                      p->alpha, p->beta, (long long)i, (long long)j, got, want, bound);
        }
        for (int64_t j = p->n; j < p->ldc; j++) {
            float was = p->c0[i * p->ldc + j], is = c[i * p->ldc + j];
            cr_assert(memcmp(&was, &is, sizeof was) == 0, "%s: C[%lld,%lld] past n was written",
                      what, (long long)i, (long long)j);
        }
    }
}

static const int64_t edge_mn[] = {1,  2,  3,  4,  5,  6,  7,  8,  9,  12, 13, 15, 16,
                                  17, 24, 31, 32, 33, 47, 48, 49, 63, 64, 65, 67};
static const int64_t edge_k[] = {1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 64, 67};
static const float scales[][2] = {{1, 0}, {1, 1}, {0.75f, 0}, {-1.5f, 1}, {1, 0.5f}, {0, -2}};

/* Every form and level at the sizes above (alpha and beta cycling
 * through the pairs), each width's bits compared too. */
static void edges(bool ta, bool tb)
{
    enum vq__isa_level lv[2];
    int nl = levels(lv);
    if (nl == 0)
        cr_skip_test("no AVX2 + FMA here: varq's own product does not run");
    size_t nmn = sizeof edge_mn / sizeof edge_mn[0], nk = sizeof edge_k / sizeof edge_k[0];
    int ci = 0;
    for (size_t im = 0; im < nmn; im++)
        for (size_t in = 0; in < nmn; in++)
            for (size_t ik = 0; ik < nk; ik++, ci++) {
                const float *s = scales[ci % (sizeof scales / sizeof scales[0])];
                struct prod p;
                prod_make(&p, ta, tb, edge_mn[im], edge_mn[in], edge_k[ik], s[0], s[1]);
                float *c[2] = {NULL, NULL};
                for (int l = 0; l < nl; l++) {
                    c[l] = prod_c(&p);
                    cr_assert(run_at(lv[l], &p, c[l], NULL));
                    check(&p, c[l], vq__isa_name(lv[l]));
                }
                bool dots = tb && !ta && p.m <= VQ__SG_FEW;
                if (nl == 2 && !dots)
                    cr_assert(memcmp(c[0], c[1], (size_t)(p.m * p.ldc) * sizeof(float)) == 0,
                              "%lldx%lldx%lld ta=%d tb=%d: the widths' bits differ", (long long)p.m,
                              (long long)p.n, (long long)p.k, ta, tb);
                free(c[0]);
                free(c[1]);
                prod_free(&p);
            }
}

Test(sgemm, a_b_matches_double_at_every_edge)
{
    edges(false, false);
}

Test(sgemm, at_b_matches_double_at_every_edge)
{
    edges(true, false);
}

Test(sgemm, a_bt_matches_double_at_every_edge)
{
    edges(false, true);
}

Test(sgemm, at_bt_matches_double_at_every_edge)
{
    edges(true, true);
}

/* Past the blocks of k and of columns (256 each), and the shapes of the
 * models' layers that the bench times, in every form. */
Test(sgemm, blocks_of_k_and_columns_match_double)
{
    static const int64_t dims[][3] = {{8, 256, 256},   {9, 257, 257}, {6, 255, 513}, {3, 600, 700},
                                      {1, 1000, 1200}, {40, 70, 300}, {64, 96, 576}, {4, 33, 2000}};
    enum vq__isa_level lv[2];
    int nl = levels(lv);
    if (nl == 0)
        cr_skip_test("no AVX2 + FMA here");
    for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++)
        for (int f = 0; f < 8; f++) {
            struct prod p;
            prod_make(&p, f & 1, f & 2, dims[d][0], dims[d][1], dims[d][2], f & 4 ? 1 : 0.5f,
                      f & 4 ? 1 : 0);
            for (int l = 0; l < nl; l++) {
                float *c = prod_c(&p);
                cr_assert(run_at(lv[l], &p, c, NULL));
                check(&p, c, vq__isa_name(lv[l]));
                free(c);
            }
            prod_free(&p);
        }
}

/* conv2d's epilogue, as it does it after the product. */
static void epilogue_after(const struct prod *p, float *c, const vq__sg_epilogue *ep)
{
    for (int64_t i = 0; i < p->m; i++)
        for (int64_t j = 0; j < p->n; j++) {
            float v = c[i * p->ldc + j];
            if (ep->bias)
                v += ep->bias[i];
            if (ep->clip) {
                v = v <= ep->lo ? ep->lo : v;
                v = v >= ep->hi ? ep->hi : v;
            }
            c[i * p->ldc + j] = v;
        }
}

Test(sgemm, the_fused_epilogue_gives_the_bits_of_the_pass_after)
{
    enum vq__isa_level lv[2];
    int nl = levels(lv);
    if (nl == 0)
        cr_skip_test("no AVX2 + FMA here");
    static const int64_t dims[][3] = {{1, 40, 9},  {3, 17, 300},   {4, 70, 33},
                                      {7, 33, 20}, {13, 300, 270}, {64, 49, 64}};
    float bias[64];
    for (int i = 0; i < 64; i++)
        bias[i] = uniform();
    for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++)
        for (int f = 0; f < 4; f++)
            for (int e = 0; e < 3; e++) {
                vq__sg_epilogue ep = {.bias = e != 1 ? bias : NULL,
                                      .clip = e != 0,
                                      .lo = 0,
                                      .hi = e == 2 ? 6.f : INFINITY};
                struct prod p;
                prod_make(&p, f & 1, f & 2, dims[d][0], dims[d][1], dims[d][2], 1, 0);
                for (int l = 0; l < nl; l++) {
                    float *fused = prod_c(&p), *after = prod_c(&p);
                    cr_assert(run_at(lv[l], &p, fused, &ep));
                    cr_assert(run_at(lv[l], &p, after, NULL));
                    epilogue_after(&p, after, &ep);
                    cr_assert(memcmp(fused, after, (size_t)(p.m * p.ldc) * sizeof(float)) == 0,
                              "%s %lldx%lldx%lld form %d epilogue %d: not the pass's bits",
                              vq__isa_name(lv[l]), (long long)p.m, (long long)p.n, (long long)p.k,
                              f, e);
                    free(fused);
                    free(after);
                }
                prod_free(&p);
            }
}

/* B packed by pieces of panels (as conv2d shares the copy), then the
 * product from the panels: vq__sgemm's bits with the epilogue, and the
 * plain loops' sums at the portable level. */
Test(sgemm, the_panels_give_the_plain_entry_points_bits)
{
    enum vq__isa_level lv[2];
    int nl = levels(lv);
    static const int64_t dims[][3] = {{5, 31, 7}, {9, 100, 300}, {64, 49, 576}, {17, 257, 33}};
    float bias[64];
    for (int i = 0; i < 64; i++)
        bias[i] = uniform();
    vq__sg_epilogue ep = {.bias = bias, .clip = true, .lo = -0.5f, .hi = 0.5f};
    for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++) {
        struct prod p;
        prod_make(&p, false, false, dims[d][0], dims[d][1], dims[d][2], 1, 0);
        int64_t npan = (p.n + VQ__SG_PANEL - 1) / VQ__SG_PANEL;
        float *bp = malloc((size_t)(npan * VQ__SG_PANEL * p.k) * sizeof(float));
        cr_assert(bp);
        for (int64_t q = 0; q < npan; q += 2)
            vq__sgemm_pack(p.k, p.n, p.b, p.ldb, bp, q, q + 2 < npan ? q + 2 : npan);
        for (int l = 0; l < nl; l++) {
            float *c = prod_c(&p), *want = prod_c(&p);
            vq__sgemm_panels_at(lv[l], p.m, p.n, p.k, p.a, p.lda, bp, c, p.ldc, &ep);
            cr_assert(run_at(lv[l], &p, want, &ep));
            cr_assert(memcmp(c, want, (size_t)(p.m * p.ldc) * sizeof(float)) == 0,
                      "%s %lldx%lldx%lld: the panels' bits differ", vq__isa_name(lv[l]),
                      (long long)p.m, (long long)p.n, (long long)p.k);
            free(c);
            free(want);
        }
        float *c = prod_c(&p);
        vq__sgemm_panels_at(VQ__ISA_PORTABLE, p.m, p.n, p.k, p.a, p.lda, bp, c, p.ldc, NULL);
        check(&p, c, "portable panels");
        free(c);
        free(bp);
        prod_free(&p);
    }
}

Test(sgemm, no_kernel_at_the_portable_level)
{
    struct prod p;
    prod_make(&p, false, false, 9, 9, 9, 1, 0);
    float *c = prod_c(&p);
    cr_assert_not(run_at(VQ__ISA_PORTABLE, &p, c, NULL));
    free(c);
    prod_free(&p);
}
