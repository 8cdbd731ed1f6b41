/* conv3d, conv3d_grad and conv_transpose3d (ops/cpu/conv3d.c): outputs
 * against the definition summed the slow way (every output element over
 * its window, in double), over strides, asymmetric pads, dilations, groups
 * and the optional bias; the transpose against the scatter of each input
 * element through the kernel; gradients by central differences in f64;
 * the attribute and shape errors; a shared (2-worker) call against the
 * serial one. */
#include <varq/varq.h>

#include "opcheck.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "leakcheck.h"

TestSuite(ops_conv3d, .fini = leak_check);

static uint64_t rng = 0x3d3d;

struct geo {
    int64_t n, c, m, groups;
    int64_t d, h, w;   /* input */
    int64_t k[3];      /* kernel */
    int64_t stride[3]; /* depth, height, width */
    int64_t pad[6];    /* front, top, left, back, bottom, right */
    int64_t dil[3];
    int64_t outpad[3]; /* the transpose's */
    bool bias;
};

static const struct geo cases[] = {
    {1, 1, 1, 1, 3, 3, 3, {2, 2, 2}, {1, 1, 1}, {0}, {1, 1, 1}, {0}, false},
    {2, 2, 3, 1, 4, 5, 3, {3, 2, 2}, {1, 2, 1}, {1, 0, 1, 0, 1, 2}, {1, 1, 2}, {0, 1, 0}, true},
    {1, 4, 2, 2, 5, 4, 4, {2, 3, 1}, {2, 1, 3}, {0, 1, 0, 1, 0, 0}, {2, 1, 1}, {1, 0, 2}, true},
    {2, 3, 3, 3, 3, 3, 5, {1, 1, 3}, {1, 1, 2}, {0, 0, 2, 0, 0, 1}, {1, 1, 1}, {0, 0, 1}, false},
    {1, 2, 4, 1, 2, 3, 2, {2, 3, 2}, {2, 2, 2}, {1, 1, 1, 1, 1, 1}, {1, 1, 1}, {1, 1, 1}, true},
};

static void attrs_of(const struct geo *g, vq_attr *a, bool transpose)
{
    a[0] = VQ_ATTR_IS("strides", g->stride, 3);
    a[1] = VQ_ATTR_IS("pads", g->pad, 6);
    a[2] = VQ_ATTR_IS("dilations", g->dil, 3);
    a[3] = VQ_ATTR_I("groups", g->groups);
    if (transpose)
        a[4] = VQ_ATTR_IS("output_padding", g->outpad, 3);
}

static int64_t out_dim(int64_t n, int64_t p0, int64_t p1, int64_t k, int64_t s, int64_t d)
{
    return (n + p0 + p1 - d * (k - 1) - 1) / s + 1;
}

/* conv3d by its definition. */
static double *reference(const struct geo *g, vq_tensor *x, vq_tensor *w, vq_tensor *b, int64_t *os)
{
    int64_t in[3] = {g->d, g->h, g->w};
    os[0] = g->n;
    os[1] = g->m;
    for (int i = 0; i < 3; i++)
        os[2 + i] = out_dim(in[i], g->pad[i], g->pad[3 + i], g->k[i], g->stride[i], g->dil[i]);
    int64_t total = os[0] * os[1] * os[2] * os[3] * os[4];
    double *want = calloc((size_t)total, sizeof *want);
    int64_t cg = g->c / g->groups, mg = g->m / g->groups;
    for (int64_t e = 0; e < total; e++) {
        int64_t ox = e % os[4], oy = e / os[4] % os[3], oz = e / (os[4] * os[3]) % os[2];
        int64_t m = e / (os[4] * os[3] * os[2]) % g->m, n = e / (os[4] * os[3] * os[2] * g->m);
        int64_t grp = m / mg;
        double s = b ? oc_get(b, m) : 0;
        for (int64_t c = 0; c < cg; c++)
            for (int64_t a = 0; a < g->k[0]; a++)
                for (int64_t bb = 0; bb < g->k[1]; bb++)
                    for (int64_t ee = 0; ee < g->k[2]; ee++) {
                        int64_t iz = oz * g->stride[0] - g->pad[0] + a * g->dil[0];
                        int64_t iy = oy * g->stride[1] - g->pad[1] + bb * g->dil[1];
                        int64_t ix = ox * g->stride[2] - g->pad[2] + ee * g->dil[2];
                        if (iz < 0 || iz >= g->d || iy < 0 || iy >= g->h || ix < 0 || ix >= g->w)
                            continue;
                        int64_t ci = grp * cg + c;
                        s +=
                            oc_get(x, (((n * g->c + ci) * g->d + iz) * g->h + iy) * g->w + ix) *
                            oc_get(w, (((m * cg + c) * g->k[0] + a) * g->k[1] + bb) * g->k[2] + ee);
                    }
        want[e] = s;
    }
    return want;
}

Test(ops_conv3d, conv3d_matches_its_definition_and_its_gradients_match)
{
    for (size_t t = 0; t < sizeof cases / sizeof *cases; t++)
        for (int d = 0; d < 2; d++) {
            const struct geo *g = &cases[t];
            vq_dtype dt = d ? VQ_F64 : VQ_F32;
            int64_t xs[5] = {g->n, g->c, g->d, g->h, g->w};
            int64_t ws[5] = {g->m, g->c / g->groups, g->k[0], g->k[1], g->k[2]};
            vq_tensor *in[3] = {oc_rand(&rng, dt, 5, xs, -1, 1), oc_rand(&rng, dt, 5, ws, -1, 1),
                                g->bias ? oc_rand(&rng, dt, 1, &g->m, -1, 1) : NULL};
            int nin = g->bias ? 3 : 2;
            vq_attr a[4];
            attrs_of(g, a, false);
            vq_tensor *o = oc_run1("conv3d", in, nin, a, 4);
            int64_t os[5];
            double *want = reference(g, in[0], in[1], in[2], os);
            oc_assert_close(o, 5, os, want, dt == VQ_F32 ? 1e-5 : 1e-12, dt == VQ_F32 ? 1e-5 : 0);
            free(want);
            vq_tensor_release(o);
            if (dt == VQ_F64) {
                double err = oc_grad_check("conv3d", in, nin, 1, a, 4, g->bias ? 7u : 3u, &rng);
                cr_assert_lt(err, 1e-6, "case %zu: gradient error %g", t, err);
            }
            for (int i = 0; i < nin; i++)
                vq_tensor_release(in[i]);
        }
}

/* conv_transpose3d by scattering: every input element times the kernel
 * into the windows it would be read from, minus the pads. */
Test(ops_conv3d, conv_transpose3d_scatters_each_input_through_the_kernel)
{
    for (size_t t = 0; t < sizeof cases / sizeof *cases; t++)
        for (int d = 0; d < 2; d++) {
            const struct geo *g = &cases[t];
            vq_dtype dt = d ? VQ_F64 : VQ_F32;
            /* X [n, c, ...] to m channels; W [c, m / groups, k] */
            int64_t xs[5] = {g->n, g->c, g->d, g->h, g->w};
            int64_t ws[5] = {g->c, g->m / g->groups, g->k[0], g->k[1], g->k[2]};
            vq_tensor *in[3] = {oc_rand(&rng, dt, 5, xs, -1, 1), oc_rand(&rng, dt, 5, ws, -1, 1),
                                g->bias ? oc_rand(&rng, dt, 1, &g->m, -1, 1) : NULL};
            int nin = g->bias ? 3 : 2;
            vq_attr a[5];
            attrs_of(g, a, true);
            vq_tensor *o = oc_run1("conv_transpose3d", in, nin, a, 5);
            int64_t os[5] = {g->n, g->m}, in3[3] = {g->d, g->h, g->w};
            for (int i = 0; i < 3; i++)
                os[2 + i] = g->stride[i] * (in3[i] - 1) + g->outpad[i] + g->dil[i] * (g->k[i] - 1) +
                            1 - g->pad[i] - g->pad[3 + i];
            int64_t total = os[0] * os[1] * os[2] * os[3] * os[4];
            double *want = calloc((size_t)total, sizeof *want);
            int64_t cg = g->c / g->groups, mg = g->m / g->groups;
            for (int64_t n = 0; n < g->n; n++)
                for (int64_t c = 0; c < g->c; c++)
                    for (int64_t z = 0; z < g->d; z++)
                        for (int64_t y = 0; y < g->h; y++)
                            for (int64_t xx = 0; xx < g->w; xx++) {
                                double v =
                                    oc_get(in[0],
                                           (((n * g->c + c) * g->d + z) * g->h + y) * g->w + xx);
                                for (int64_t j = 0; j < mg; j++)
                                    for (int64_t a0 = 0; a0 < g->k[0]; a0++)
                                        for (int64_t a1 = 0; a1 < g->k[1]; a1++)
                                            for (int64_t a2 = 0; a2 < g->k[2]; a2++) {
                                                int64_t oz =
                                                    z * g->stride[0] - g->pad[0] + a0 * g->dil[0];
                                                int64_t oy =
                                                    y * g->stride[1] - g->pad[1] + a1 * g->dil[1];
                                                int64_t ox =
                                                    xx * g->stride[2] - g->pad[2] + a2 * g->dil[2];
                                                if (oz < 0 || oz >= os[2] || oy < 0 ||
                                                    oy >= os[3] || ox < 0 || ox >= os[4])
                                                    continue;
                                                int64_t m = c / cg * mg + j;
                                                want[(((n * g->m + m) * os[2] + oz) * os[3] + oy) *
                                                         os[4] +
                                                     ox] +=
                                                    v *
                                                    oc_get(in[1], (((c * mg + j) * g->k[0] + a0) *
                                                                       g->k[1] +
                                                                   a1) * g->k[2] +
                                                                      a2);
                                            }
                            }
            for (int64_t e = 0; g->bias && e < total; e++)
                want[e] += oc_get(in[2], e / (os[2] * os[3] * os[4]) % g->m);
            oc_assert_close(o, 5, os, want, dt == VQ_F32 ? 1e-5 : 1e-12, dt == VQ_F32 ? 1e-5 : 0);
            free(want);
            vq_tensor_release(o);
            if (dt == VQ_F64) {
                double err =
                    oc_grad_check("conv_transpose3d", in, nin, 1, a, 5, g->bias ? 7u : 3u, &rng);
                cr_assert_lt(err, 1e-6, "case %zu: gradient error %g", t, err);
            }
            for (int i = 0; i < nin; i++)
                vq_tensor_release(in[i]);
        }
}

Test(ops_conv3d, bad_shapes_and_attributes_are_errors_naming_them)
{
    int64_t xs[5] = {1, 4, 3, 3, 3}, ws[5] = {2, 2, 2, 2, 2}, w4[4] = {2, 4, 2, 2};
    vq_tensor *in[2] = {oc_rand(&rng, VQ_F32, 5, xs, -1, 1), oc_rand(&rng, VQ_F32, 5, ws, -1, 1)};
    /* W's 2 input channels need groups 2 */
    cr_assert_eq(oc_try("conv3d", in, 2, 1, NULL, 0), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "input channels per group"), "%s", vq_errmsg());
    vq_attr bad[2] = {VQ_ATTR_I("groups", 2), VQ_ATTR_IS("strides", ((int64_t[]){1, 0, 1}), 3)};
    cr_assert_eq(oc_try("conv3d", in, 2, 1, bad, 2), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "strides"), "%s", vq_errmsg());
    vq_attr pads = VQ_ATTR_IS("pads", ((int64_t[]){1, 1, 1, 1}), 4);
    cr_assert_eq(oc_try("conv3d", in, 2, 1, (vq_attr[]){bad[0], pads}, 2), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "pads"), "%s", vq_errmsg());
    /* a window larger than the padded input */
    vq_attr dil = VQ_ATTR_IS("dilations", ((int64_t[]){3, 1, 1}), 3);
    cr_assert_eq(oc_try("conv3d", in, 2, 1, (vq_attr[]){bad[0], dil}, 2), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "larger than the padded input"), "%s", vq_errmsg());
    vq_tensor_release(in[1]);
    in[1] = oc_rand(&rng, VQ_F32, 4, w4, -1, 1);
    cr_assert_eq(oc_try("conv3d", in, 2, 1, NULL, 0), VQ_EINVAL);
    vq_tensor_release(in[1]);
    /* output_padding must be below the stride or the dilation */
    in[1] = oc_rand(&rng, VQ_F32, 5, (int64_t[]){4, 1, 2, 2, 2}, -1, 1);
    vq_attr op = VQ_ATTR_IS("output_padding", ((int64_t[]){0, 1, 0}), 3);
    cr_assert_eq(oc_try("conv_transpose3d", in, 2, 1, &op, 1), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "output_padding"), "%s", vq_errmsg());
    vq_tensor_release(in[0]);
    vq_tensor_release(in[1]);
}

/* A call large enough to be shared by the workers: the same bits. */
Test(ops_conv3d, a_shared_call_equals_the_serial_one)
{
    vq_engine *e;
    cr_assert_eq(vq_engine_new(&e, &(vq_engine_opts){.kind = VQ_ENGINE_THREADED, .cpu_workers = 2}),
                 0, "%s", vq_errmsg());
    int64_t xs[5] = {4, 8, 8, 8, 8}, ws[5] = {16, 8, 3, 3, 3};
    vq_tensor *in[2] = {oc_rand(&rng, VQ_F32, 5, xs, -1, 1), oc_rand(&rng, VQ_F32, 5, ws, -1, 1)};
    vq_attr p = VQ_ATTR_IS("pads", ((int64_t[]){1, 1, 1, 1, 1, 1}), 6);
    oc_assert_shared_equals_serial(e, "conv3d", in, 2, &p, 1);
    vq_tensor_release(in[0]);
    vq_tensor_release(in[1]);
    vq_engine_free(e);
}
