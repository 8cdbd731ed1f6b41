/* einsum (ops/cpu/einsum.c) against a plain loop over every assignment of
 * its labels (the equation written out without "...", broadcasting dims
 * of 1): products on the GEMM path and on the general loop, diagonals,
 * traces, sums, transposes, implicit outputs, ellipses that broadcast,
 * three operands, integers; the gradient (einsum again, with a shape
 * donor) against finite differences; equation errors naming the
 * equation. */
#include "opcheck.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "leakcheck.h"

static uint64_t rng;

static void setup(void)
{
    rng = oc_seed("ops_einsum");
}

TestSuite(ops_einsum, .init = setup, .fini = leak_check);

#define N_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))
#define MAXIN 4

/* The plain loop of ref ("ab,bc->ac": letters only, the output explicit):
 * every assignment of the labels, the product of the operands' elements
 * (index 0 along a dim of 1 whose label is larger elsewhere) added into
 * the output's. Returns the output (malloc'd) and its shape. */
static double *reference(const char *ref, vq_tensor **in, int nin, int *ondim, int64_t *oshape)
{
    char terms[MAXIN + 1][16];
    int nt = 0, len = 0;
    for (const char *s = ref;; s++) {
        if (*s == ',' || *s == '-' || !*s) {
            terms[nt][len] = 0;
            nt++;
            len = 0;
            if (*s == '-')
                s++;
            if (!*s)
                break;
            continue;
        }
        terms[nt][len++] = *s;
    }
    cr_assert_eq(nt, nin + 1, "reference %s", ref);
    int64_t size[128] = {0};
    for (int i = 0; i < nin; i++)
        for (int d = 0; terms[i][d]; d++) {
            int64_t n = vq_tensor_shape(in[i])[d];
            if (size[(int)terms[i][d]] <= 1)
                size[(int)terms[i][d]] = n;
        }
    char labels[64];
    int nl = 0;
    for (int c = 0; c < 128; c++)
        if (size[c] > 0 || strchr(ref, c) != NULL) {
            if (c == ',' || c == '-' || c == '>' || !c)
                continue;
            labels[nl++] = (char)c;
        }
    *ondim = (int)strlen(terms[nin]);
    int64_t on = 1;
    for (int d = 0; d < *ondim; d++) {
        oshape[d] = size[(int)terms[nin][d]];
        on *= oshape[d];
    }
    double *w = calloc((size_t)(on ? on : 1), sizeof *w);
    cr_assert(w);
    int64_t total = 1, idx[128] = {0};
    for (int k = 0; k < nl; k++)
        total *= size[(int)labels[k]];
    for (int64_t a = 0; a < total; a++) {
        int64_t rest = a;
        for (int k = nl - 1; k >= 0; k--) {
            idx[(int)labels[k]] = rest % size[(int)labels[k]];
            rest /= size[(int)labels[k]];
        }
        double prod = 1;
        for (int i = 0; i < nin; i++) {
            int64_t off = 0;
            for (int d = 0; terms[i][d]; d++) {
                int64_t n = vq_tensor_shape(in[i])[d];
                off = off * n + (n == 1 ? 0 : idx[(int)terms[i][d]]);
            }
            prod *= oc_get(in[i], off);
        }
        int64_t oo = 0;
        for (int d = 0; d < *ondim; d++)
            oo = oo * oshape[d] + idx[(int)terms[nin][d]];
        w[oo] += prod;
    }
    return w;
}

static const struct einsum_case {
    const char *eq, *ref; /* the equation, and written out for the reference */
    int nin;
    int ndim[MAXIN];
    int64_t shape[MAXIN][6];
} cases[] = {
    /* products: small ones on the loop, large ones on GEMM */
    {"ij,jk->ik", "ij,jk->ik", 2, {2, 2}, {{3, 4}, {4, 5}}},
    {"ij,jk->ik", "ij,jk->ik", 2, {2, 2}, {{24, 17}, {17, 30}}},
    {"ij,kj->ik", "ij,kj->ik", 2, {2, 2}, {{24, 17}, {30, 17}}},
    {"ji,jk->ki", "ji,jk->ki", 2, {2, 2}, {{17, 24}, {17, 30}}},
    {"bij,bjk->bik", "bij,bjk->bik", 2, {3, 3}, {{2, 3, 4}, {2, 4, 5}}},
    {"bij,bjk->bik", "bij,bjk->bik", 2, {3, 3}, {{3, 16, 12}, {3, 12, 20}}},
    {"bhqd,bhkd->bhqk", "bhqd,bhkd->bhqk", 2, {4, 4}, {{2, 3, 16, 8}, {2, 3, 12, 8}}},
    {"bqhd,bkhd->bhqk", "bqhd,bkhd->bhqk", 2, {4, 4}, {{2, 16, 3, 8}, {2, 12, 3, 8}}},
    {"bhqk,bkhd->bqhd", "bhqk,bkhd->bqhd", 2, {4, 4}, {{2, 3, 16, 12}, {2, 12, 3, 8}}},
    {"i,i", "i,i->", 2, {1, 1}, {{7}, {7}}},
    {"i,i->", "i,i->", 2, {1, 1}, {{2000}, {2000}}},
    {"i,j->ij", "i,j->ij", 2, {1, 1}, {{4}, {6}}},
    {"ij,ij->ij", "ij,ij->ij", 2, {2, 2}, {{4, 6}, {4, 6}}},
    {"Ab,bC->CA", "Ab,bC->CA", 2, {2, 2}, {{20, 16}, {16, 18}}},
    /* one operand */
    {"ii->i", "ii->i", 1, {2}, {{5, 5}}},
    {"ii", "ii->", 1, {2}, {{5, 5}}},
    {"ij->", "ij->", 1, {2}, {{3, 4}}},
    {"ij->ji", "ij->ji", 1, {2}, {{3, 4}}},
    {"ji", "ji->ij", 1, {2}, {{3, 4}}},
    {"ij->i", "ij->i", 1, {2}, {{3, 4}}},
    {"iji->j", "iji->j", 1, {3}, {{3, 4, 3}}},
    {"...ii->...i", "xii->xi", 1, {3}, {{3, 4, 4}}},
    {"i...->...", "ixy->xy", 1, {3}, {{3, 2, 5}}},
    /* ellipses, broadcasting from the right */
    {"...ij,...jk->...ik", "xyij,yjk->xyik", 2, {4, 3}, {{2, 1, 3, 4}, {5, 4, 2}}},
    {"...ij,...jk", "xyij,yjk->xyik", 2, {4, 3}, {{2, 1, 3, 4}, {5, 4, 2}}},
    {"b...d,b...d->b...", "bxyd,bxyd->bxy", 2, {4, 4}, {{2, 3, 1, 40}, {2, 1, 4, 40}}},
    /* diagonals and sums before a product; three operands */
    {"iij,jk->ik", "iij,jk->ik", 2, {3, 2}, {{4, 4, 30}, {30, 40}}},
    {"ijx,jk->ik", "ijx,jk->ik", 2, {3, 2}, {{24, 30, 3}, {30, 40}}},
    {"ij,jk,kl->il", "ij,jk,kl->il", 3, {2, 2, 2}, {{3, 4}, {4, 5}, {5, 2}}},
    {"ij,jk,kl->li", "ij,jk,kl->li", 3, {2, 2, 2}, {{12, 14}, {14, 15}, {15, 12}}},
    {"i,ij,j->", "i,ij,j->", 3, {1, 2, 1}, {{3}, {3, 4}, {4}}},
    /* sizes 0 and 1 */
    {"ij,jk->ik", "ij,jk->ik", 2, {2, 2}, {{3, 0}, {0, 5}}},
    {"ij,jk->ik", "ij,jk->ik", 2, {2, 2}, {{0, 40}, {40, 50}}},
    {"ij->j", "ij->j", 1, {2}, {{1, 4}}},
};

static void check_case(const struct einsum_case *c, vq_dtype dt)
{
    bool ints = dt == VQ_I32 || dt == VQ_I64;
    vq_tensor *in[MAXIN];
    for (int i = 0; i < c->nin; i++)
        in[i] = oc_rand(&rng, dt, c->ndim[i], c->shape[i], ints ? -5 : -1, ints ? 5 : 1);
    vq_attr at = VQ_ATTR_S("equation", c->eq);
    vq_tensor *o = oc_run1("einsum", in, c->nin, &at, 1);
    int ondim;
    int64_t oshape[8];
    double *w = reference(c->ref, in, c->nin, &ondim, oshape);
    oc_assert_close(o, ondim, oshape, w, dt == VQ_F32 ? 1e-4 : 1e-12, dt == VQ_F32 ? 1e-4 : 1e-12);
    free(w);
    vq_tensor_release(o);
    for (int i = 0; i < c->nin; i++)
        vq_tensor_release(in[i]);
}

Test(ops_einsum, einsum_matches_the_plain_loop_in_every_dtype)
{
    vq_dtype dts[] = {VQ_F32, VQ_F64, VQ_I32, VQ_I64};
    for (int c = 0; c < N_OF(cases); c++)
        for (int d = 0; d < N_OF(dts); d++)
            check_case(&cases[c], dts[d]);
}

/* Each input's gradient (einsum of dOut with the others, X_i the shape
 * donor) against finite differences: a diagonal's gradient lands on the
 * diagonal, a broadcast operand's is summed, a summed one's broadcast. */
Test(ops_einsum, einsum_gradients_match_finite_differences)
{
    static const int picks[] = {0,  4,  6,  7,  9,  11, 14, 15, 16, 17,
                                19, 20, 21, 22, 23, 25, 26, 28, 30};
    for (int k = 0; k < N_OF(picks); k++) {
        const struct einsum_case *c = &cases[picks[k]];
        vq_tensor *in[MAXIN];
        for (int i = 0; i < c->nin; i++)
            in[i] = oc_rand(&rng, VQ_F64, c->ndim[i], c->shape[i], -1, 1);
        vq_attr at = VQ_ATTR_S("equation", c->eq);
        double err = oc_grad_check("einsum", in, c->nin, 1, &at, 1, (1u << c->nin) - 1, &rng);
        cr_assert_lt(err, 1e-6, "%s: %g", c->eq, err);
        for (int i = 0; i < c->nin; i++)
            vq_tensor_release(in[i]);
    }
}

/* A label repeated in the output of a call with a shape donor writes the
 * diagonal (the rest zero); a label only the donor has broadcasts. */
Test(ops_einsum, a_shape_donor_lets_the_output_repeat_and_broadcast_labels)
{
    int64_t three = 3, sq[2] = {3, 3}, r[2] = {3, 2};
    vq_tensor *v = oc_from(VQ_F64, 1, &three, (double[]){1, 2, 3});
    vq_tensor *d = oc_rand(&rng, VQ_F64, 2, sq, -1, 1), *e = oc_rand(&rng, VQ_F64, 2, r, -1, 1);
    vq_tensor *in[2] = {v, d};
    vq_attr at[2] = {VQ_ATTR_S("equation", "i,ii->ii"), VQ_ATTR_I("shape_of", 1)};
    vq_tensor *o = oc_run1("einsum", in, 2, at, 2);
    oc_assert_close(o, 2, sq, (double[]){1, 0, 0, 0, 2, 0, 0, 0, 3}, 0, 0);
    vq_tensor_release(o);
    in[1] = e;
    at[0] = VQ_ATTR_S("equation", "i,ij->ij");
    o = oc_run1("einsum", in, 2, at, 2);
    oc_assert_close(o, 2, r, (double[]){1, 1, 2, 2, 3, 3}, 0, 0);
    vq_tensor_release(o);
    vq_tensor_release(v);
    vq_tensor_release(d);
    vq_tensor_release(e);
}

static void expect_error(const char *eq, int nin, const int *ndim, const int64_t (*shape)[4],
                         const char *msg)
{
    vq_tensor *in[MAXIN];
    for (int i = 0; i < nin; i++)
        in[i] = oc_rand(&rng, VQ_F32, ndim[i], shape[i], 0, 1);
    vq_attr at = VQ_ATTR_S("equation", eq);
    cr_assert_eq(oc_try("einsum", in, nin, 1, &at, 1), VQ_EINVAL, "%s", eq);
    cr_assert(strstr(vq_errmsg(), msg), "%s: %s", eq, vq_errmsg());
    cr_assert(strstr(vq_errmsg(), eq), "%s: the message does not name it: %s", eq, vq_errmsg());
    for (int i = 0; i < nin; i++)
        vq_tensor_release(in[i]);
}

Test(ops_einsum, equation_errors_name_the_equation)
{
    static const int64_t s[2][4] = {{3, 4}, {4, 5}}, t[2][4] = {{3, 4}, {5, 6}};
    static const int two[2] = {2, 2};
    expect_error("ij,j1->i", 2, two, s, "not a letter");
    expect_error("ij,jk->ik", 2, two, t, "letter 'j' is 5 in input 1 (dim 0) and 4 elsewhere");
    expect_error("ij->ik", 1, two, s, "output letter 'k' is in no input term");
    expect_error("ij,jk->ii", 2, two, s, "output letter 'i' is repeated");
    expect_error("ijk,jk->i", 2, two, s, "term 0 names 3 dim(s), input 0 has 2");
    expect_error("ij->i", 2, two, s, "has 1 operand term(s) for 2 input(s)");
    expect_error("i.j,jk->ik", 2, two, s, "not part of \"...\"");
    expect_error("ij,jk->i->k", 2, two, s, "more than one output term");
    static const int64_t b[2][4] = {{2, 3, 4}, {3, 4, 5}};
    static const int three[2] = {3, 3};
    expect_error("...ij,...jk->...ik", 2, three, b, "does not broadcast");
}
