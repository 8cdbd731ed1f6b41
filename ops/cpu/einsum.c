/* einsum (numpy's einsum, ONNX's Einsum): products of operands summed over
 * the labels an equation names, and its gradient, which is einsum again.
 *
 * einsum(X...; equation, shape_of) -> Out. The equation is numpy's:
 * "ij,jk->ik", terms of letters (a-z, A-Z; spaces ignored) with at most one
 * "..." each, one term per input; a letter repeated within a term reads a
 * diagonal; letters missing from the output term are summed; "..." stands
 * for the leading dims a term leaves unnamed, which broadcast numpy-style
 * (from the right, 1 against n) across the terms. Without "->" the output
 * is "..." then the letters that occur once, in character order (upper
 * case first). f32, f64, i32 and i64 (integers wrap), every input of the
 * same dtype; a letter's dims must be equal in every term. Errors name
 * the equation.
 *
 * shape_of = i (default -1: none) makes input i a shape donor: Out takes
 * its shape, and it is not multiplied. Its term may then repeat a letter
 * in the output (Out is zero but for that diagonal), name letters no
 * other input has (Out is broadcast along them), and have dims of 1 where
 * the others have n (summed): what einsum's gradient needs. The gradient
 * of input i is einsum("<out>,<the other terms>,<term i>-><term i>";
 * shape_of = the last input) of dOut, the other inputs and X_i as the
 * donor.
 *
 * The kernel runs a plan (ops/einsum_shared.h): the operands contracted
 * two at a time, left to right, keeping the labels needed later. A pair
 * whose product is a batch of matrix products of at least GEMM_MIN
 * multiply-adds each (floats) runs as GEMM steps on varq's GEMM (the
 * operands copied into [batch, m, k] / [batch, k, n] order first unless
 * they are already, transposed or not); other steps run the general loop,
 * one output element at a time, summing in a fixed order. The CUDA side
 * runs the same plan (cuBLAS for the GEMM steps). */
#include "../ops_internal.h"
#include "../params.h"
#include "../cuda/cuda_ops.h"
#include "../einsum_shared.h"
#include "../math/sgemm.h" /* vq__sgemm_ok */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const x_in[] = {"X"};
static const char *const out_slot[] = {"Out"};

static const vq__attr_spec einsum_attrs[] = {
    {"equation", VQ_ATTR_STRING, true, NULL},
    {"shape_of", VQ_ATTR_INT, false, "-1"},
};

/* Labels: letters by character order, then the ellipsis's dims. */
#define NLABELS 64
#define ELL 52

/* Multiply-adds per matrix product from which a pair runs on GEMM. */
#define GEMM_MIN 1024

/* ---- the equation ---- */

/* One term as written: its letters (labels) and where "..." sits among
 * them (-1: none). */
struct term {
    int nlet, ell;
    uint8_t let[VQ_MAX_DIMS];
};

#define EQ_MAX 256

struct equation {
    int nterms;
    struct term in[VQ__EINSUM_MAX_IN];
    bool arrow;
    struct term out;
};

static int label_of(char ch)
{
    if (ch >= 'A' && ch <= 'Z')
        return ch - 'A';
    if (ch >= 'a' && ch <= 'z')
        return 26 + ch - 'a';
    return -1;
}

static char letter_of(int l)
{
    return (char)(l < 26 ? 'A' + l : 'a' + l - 26);
}

/* Parses term text [s, e) into t; why gets the reason it is bad. */
static bool term_parse(const char *s, const char *e, struct term *t, const char **why)
{
    t->nlet = 0;
    t->ell = -1;
    while (s < e) {
        if (*s == '.') {
            if (e - s < 3 || s[1] != '.' || s[2] != '.') {
                *why = "a '.' that is not part of \"...\"";
                return false;
            }
            if (t->ell >= 0) {
                *why = "a term with two \"...\"";
                return false;
            }
            t->ell = t->nlet;
            s += 3;
            continue;
        }
        int l = label_of(*s);
        if (l < 0) {
            *why = "a character that is not a letter, ',', \"->\" or \"...\"";
            return false;
        }
        if (t->nlet == VQ_MAX_DIMS) {
            *why = "a term of more letters than a tensor has dims";
            return false;
        }
        t->let[t->nlet++] = (uint8_t)l;
        s++;
    }
    return true;
}

/* Parses eq (spaces dropped) into q; VQ_EINVAL naming it. */
static int equation_parse(const vq__infer *c, const char *eq, struct equation *q)
{
    char buf[EQ_MAX];
    size_t n = 0;
    for (const char *s = eq; *s; s++)
        if (*s != ' ') {
            if (n + 1 == sizeof buf)
                return vq__attr_fail(c, "equation", "\"%.40s...\" is longer than %d characters", eq,
                                     EQ_MAX - 1);
            buf[n++] = *s;
        }
    buf[n] = 0;
    const char *arrow = strstr(buf, "->"), *end = arrow ? arrow : buf + n, *why = NULL;
    q->arrow = arrow != NULL;
    q->nterms = 0;
    for (const char *s = buf;;) {
        const char *comma = memchr(s, ',', (size_t)(end - s));
        const char *te = comma ? comma : end;
        if (q->nterms == VQ__EINSUM_MAX_IN)
            return vq__attr_fail(c, "equation", "\"%s\" has more than %d operands", eq,
                                 VQ__EINSUM_MAX_IN);
        if (!term_parse(s, te, &q->in[q->nterms++], &why))
            return vq__attr_fail(c, "equation", "\"%s\" has %s", eq, why);
        if (!comma)
            break;
        s = comma + 1;
    }
    if (arrow && (strstr(arrow + 2, "->") || strchr(arrow + 2, ',')))
        return vq__attr_fail(c, "equation", "\"%s\" has more than one output term", eq);
    if (arrow && !term_parse(arrow + 2, buf + n, &q->out, &why))
        return vq__attr_fail(c, "equation", "\"%s\" has %s", eq, why);
    return 0;
}

/* ---- infer ---- */

static int einsum_infer(vq__infer *c)
{
    vq__einsum_params *p = c->params;
    const char *eq = vq__attr_find(c, "equation")->s;
    struct equation q;
    int rc = equation_parse(c, eq, &q);
    if (rc < 0)
        return rc;
    if (q.nterms != c->nin)
        return vq__attr_fail(c, "equation", "\"%s\" has %d operand term(s) for %d input(s)", eq,
                             q.nterms, c->nin);
    if (c->nin > VQ__EINSUM_MAX_IN)
        return vq__op_fail(c->def, "takes at most %d inputs, got %d", VQ__EINSUM_MAX_IN, c->nin);
    int64_t so = vq__attr_int(c, "shape_of", -1);
    if (so < -1 || so >= c->nin || (so >= 0 && c->nin < 2))
        return vq__attr_fail(c, "shape_of", "is %lld: not -1 nor an input other than the only one",
                             (long long)so);
    if (so >= 0 && !q.arrow)
        return vq__attr_fail(c, "equation", "\"%s\" has no output term (shape_of needs one)", eq);
    p->nin = c->nin;
    p->shape_of = (int)so;
    for (int i = 0; i < c->nin; i++)
        if ((rc = vq__check_dtype(c, i, VQ__NUMERIC)) < 0 ||
            (i && (rc = vq__check_same_dtype(c, 0, i)) < 0))
            return rc;
    /* each input's dims as labels, and each label's size (-2: not seen) */
    int64_t size[NLABELS];
    int count[NLABELS] = {0}, ell_rank = 0;
    for (int l = 0; l < NLABELS; l++)
        size[l] = -2;
    for (int i = 0; i < c->nin; i++) {
        const struct term *t = &q.in[i];
        int r = c->in[i].ndim, e = r - t->nlet;
        if (t->ell < 0 ? e != 0 : e < 0)
            return vq__attr_fail(c, "equation", "\"%s\": term %d names %d dim(s), input %d has %d",
                                 eq, i, t->nlet, i, r);
        if (t->ell >= 0 && e > ell_rank && i != so)
            ell_rank = e;
        p->rank[i] = (int8_t)r;
        for (int d = 0, k = 0; d < r; d++) {
            bool in_ell = t->ell >= 0 && d >= t->ell && d < t->ell + e;
            int l = in_ell ? ELL + (t->ell + e - 1 - d) : t->let[k++];
            p->label[i][d] = (uint8_t)l;
            int64_t n = c->in[i].shape[d];
            if (!in_ell && i != so)
                count[l]++;
            if (n < 0)
                continue;
            if (size[l] < 0 || (size[l] == 1 && in_ell) || (size[l] == 1 && i == so)) {
                size[l] = n;
            } else if (n != size[l] && !((in_ell || i == so) && n == 1)) {
                if (in_ell)
                    return vq__attr_fail(c, "equation",
                                         "\"%s\": input %d's dim %d (%lld) does not broadcast "
                                         "against %lld in the \"...\" of the others",
                                         eq, i, d, (long long)n, (long long)size[l]);
                return vq__attr_fail(c, "equation",
                                     "\"%s\": letter '%c' is %lld in input %d (dim %d) and %lld "
                                     "elsewhere",
                                     eq, letter_of(l), (long long)n, i, d, (long long)size[l]);
            }
        }
    }
    /* Out's labels */
    int no = 0;
    if (!q.arrow) {
        for (int j = ell_rank - 1; j >= 0; j--)
            p->out[no++] = (uint8_t)(ELL + j);
        for (int l = 0; l < ELL; l++)
            if (count[l] == 1) {
                if (no == VQ_MAX_DIMS)
                    return vq__attr_fail(c, "equation", "\"%s\": its output has more than %d dims",
                                         eq, VQ_MAX_DIMS);
                p->out[no++] = (uint8_t)l;
            }
    } else {
        const struct term *t = &q.out;
        int e = t->ell < 0 ? 0 : so >= 0 ? c->in[so].ndim - q.in[so].nlet : ell_rank;
        if (t->nlet + e > VQ_MAX_DIMS)
            return vq__attr_fail(c, "equation", "\"%s\": its output has more than %d dims", eq,
                                 VQ_MAX_DIMS);
        for (int k = 0; k < t->nlet; k++) {
            int l = t->let[k];
            if (size[l] == -2)
                return vq__attr_fail(c, "equation",
                                     "\"%s\": output letter '%c' is in no input term", eq,
                                     letter_of(l));
            for (int j = 0; j < k && so < 0; j++)
                if (t->let[j] == l)
                    return vq__attr_fail(c, "equation", "\"%s\": output letter '%c' is repeated",
                                         eq, letter_of(l));
        }
        for (int d = 0, k = 0; d < t->nlet + e; d++) {
            bool in_ell = t->ell >= 0 && d >= t->ell && d < t->ell + e;
            p->out[no++] = (uint8_t)(in_ell ? ELL + (t->ell + e - 1 - d) : t->let[k++]);
        }
    }
    p->nout = no;
    c->out[0].dtype = c->in[0].dtype;
    c->out[0].ndim = no;
    if (so >= 0) {
        if (c->in[so].ndim != no)
            return vq__attr_fail(c, "equation",
                                 "\"%s\": the output term names %d dim(s), input %lld (shape_of) "
                                 "has %d",
                                 eq, no, (long long)so, c->in[so].ndim);
        for (int d = 0; d < no; d++)
            c->out[0].shape[d] = c->in[so].shape[d];
    } else {
        for (int d = 0; d < no; d++)
            c->out[0].shape[d] = size[p->out[d]] < 0 ? -1 : size[p->out[d]];
    }
    return 0;
}

/* ---- the plan ---- */

/* A value of the plan: a buffer (einsum_shared.h's numbering) holding a
 * C-contiguous tensor whose dims carry labels. */
struct val {
    int buf, rank;
    uint8_t lab[VQ__ES_MAX_RANK];
    int64_t dim[VQ__ES_MAX_RANK];
};

struct planner {
    const char *op;
    int64_t size[NLABELS];
    vq__es_plan *plan;
    /* Out as the last step writes it: its labels (each once, those of size
     * other than 1 and of its full size) and their strides */
    int nol;
    uint8_t ol[VQ_MAX_DIMS];
    int64_t ostride[VQ_MAX_DIMS];
    bool out_plain; /* Out is C-contiguous in the order ol */
    bool b_plain;   /* GEMM's B is copied rather than read transposed */
};

/* Whether v's dim d counts: its label's full size, other than 1 (a dim of
 * 1 against n broadcasts; a label of size 1 changes nothing). */
static bool counts(const struct planner *pl, const struct val *v, int d)
{
    return v->dim[d] == pl->size[v->lab[d]] && v->dim[d] != 1;
}

/* The labels that count in v, as a bit set. */
static uint64_t labels_of(const struct planner *pl, const struct val *v)
{
    uint64_t s = 0;
    for (int d = 0; d < v->rank; d++)
        if (counts(pl, v, d))
            s |= 1ull << v->lab[d];
    return s;
}

/* v's strides (contiguous), summed per label where it counts. */
static void strides_of(const struct planner *pl, const struct val *v, int64_t *per_label)
{
    memset(per_label, 0, NLABELS * sizeof *per_label);
    int64_t s = 1;
    for (int d = v->rank - 1; d >= 0; d--) {
        if (counts(pl, v, d))
            per_label[v->lab[d]] += s;
        s *= v->dim[d];
    }
}

static vq__es_step *step_new(struct planner *pl)
{
    /* at most 3 steps per pair and one more: within VQ__ES_MAX_STEPS */
    vq__es_plan *P = pl->plan;
    vq__es_step *s = &P->step[P->nsteps++];
    memset(s, 0, sizeof *s);
    return s;
}

/* A temporary of labels lab[0..n) into *v. */
static int tmp_new(struct planner *pl, const uint8_t *lab, int n, struct val *v)
{
    if (n > VQ__ES_MAX_RANK)
        return vq__fail(VQ_ENOSYS, "%s: an intermediate product would have %d dims (at most %d)",
                        pl->op, n, VQ__ES_MAX_RANK);
    vq__es_plan *P = pl->plan;
    v->buf = VQ__ES_TMP + P->ntmp;
    v->rank = n;
    int64_t numel = 1;
    for (int d = 0; d < n; d++) {
        v->lab[d] = lab[d];
        v->dim[d] = pl->size[lab[d]];
        numel *= v->dim[d];
    }
    P->tmp_numel[P->ntmp++] = numel;
    return 0;
}

/* A loop step over ops[0..nop) into the labels ol[0..nol) with strides
 * ostride (out: the buffer). */
static void loop_step(struct planner *pl, const struct val *ops, int nop, int out,
                      const uint8_t *ol, const int64_t *ostride, int nol)
{
    vq__es_step *s = step_new(pl);
    vq__es_loop *lp = &s->loop;
    s->kind = VQ__ES_LOOP;
    s->out = out;
    lp->nop = nop;
    int64_t st[2][NLABELS];
    uint64_t outs = 0, seen = 0;
    for (int j = 0; j < nop; j++) {
        s->in[j] = ops[j].buf;
        strides_of(pl, &ops[j], st[j]);
    }
    int n = 0;
    lp->out_numel = 1;
    for (int i = 0; i < nol; i++) {
        outs |= 1ull << ol[i];
        if (pl->size[ol[i]] == 1)
            continue;
        lp->size[n] = pl->size[ol[i]];
        lp->ostride[n] = ostride[i];
        for (int j = 0; j < nop; j++)
            lp->stride[j][n] = st[j][ol[i]];
        lp->out_numel *= lp->size[n];
        n++;
    }
    lp->nout = n;
    lp->sum_numel = 1;
    for (int j = 0; j < nop; j++)
        for (int d = 0; d < ops[j].rank; d++) {
            int l = ops[j].lab[d];
            if (!counts(pl, &ops[j], d) || (outs >> l & 1) || (seen >> l & 1))
                continue;
            seen |= 1ull << l; /* n < VQ__ES_MAX_LOOP: a product's and an input's dims */
            lp->size[n] = pl->size[l];
            for (int k = 0; k < nop; k++)
                lp->stride[k][n] = st[k][l];
            lp->sum_numel *= lp->size[n];
            n++;
        }
    lp->nsum = n - lp->nout;
}

/* A loop step into a new temporary of labels lab[0..n) (contiguous). */
static int loop_to_tmp(struct planner *pl, const struct val *ops, int nop, const uint8_t *lab,
                       int n, struct val *v)
{
    int rc = tmp_new(pl, lab, n, v);
    if (rc < 0)
        return rc;
    int64_t os[VQ__ES_MAX_RANK], s = 1;
    for (int d = n - 1; d >= 0; d--) {
        os[d] = s;
        s *= v->dim[d];
    }
    loop_step(pl, ops, nop, v->buf, lab, os, n);
    return 0;
}

/* The labels of set in the order they first count in a, then b. */
static int order_of(const struct planner *pl, uint64_t set, const struct val *a,
                    const struct val *b, uint8_t *lab)
{
    int n = 0;
    uint64_t seen = 0;
    for (int k = 0; k < 2; k++) {
        const struct val *v = k ? b : a;
        for (int d = 0; v && d < v->rank; d++) {
            int l = v->lab[d];
            if (counts(pl, v, d) && (set >> l & 1) && !(seen >> l & 1)) {
                seen |= 1ull << l;
                lab[n++] = (uint8_t)l;
            }
        }
    }
    return n;
}

/* Whether v is contiguous in the order g0 ++ g1 ++ g2 (*t = 0) or g0 ++
 * g2 ++ g1 (*t = 1), each label once, and nothing else counts. */
static bool layout_is(const struct planner *pl, const struct val *v, const uint8_t *g0, int n0,
                      const uint8_t *g1, int n1, const uint8_t *g2, int n2, int *t)
{
    uint8_t seq[VQ__ES_MAX_RANK];
    int n = 0;
    for (int d = 0; d < v->rank; d++)
        if (counts(pl, v, d))
            seq[n++] = v->lab[d];
    if (n != n0 + n1 + n2)
        return false;
    for (int tr = 0; tr < 2; tr++) {
        const uint8_t *a = tr ? g2 : g1, *b = tr ? g1 : g2;
        int na = tr ? n2 : n1;
        bool ok = !memcmp(seq, g0, (size_t)n0) && !memcmp(seq + n0, a, (size_t)na) &&
                  !memcmp(seq + n0 + na, b, (size_t)(n - n0 - na));
        if (ok) {
            *t = tr;
            return true;
        }
    }
    return false;
}

static int64_t size_of(const struct planner *pl, const uint8_t *lab, int n)
{
    int64_t s = 1;
    for (int i = 0; i < n; i++)
        s *= pl->size[lab[i]];
    return s;
}

static int cat3(uint8_t *dst, const uint8_t *a, int na, const uint8_t *b, int nb, const uint8_t *c,
                int nc)
{
    memcpy(dst, a, (size_t)na);
    memcpy(dst + na, b, (size_t)nb);
    memcpy(dst + na + nb, c, (size_t)nc);
    return na + nb + nc;
}

/* Contracts *cur with b, keeping the labels of keep; into Out when last.
 * *cur becomes the product. A last GEMM product whose Out is in the order
 * (batch, b's labels, cur's) swaps the operands (swapped: done). */
static int pair_step(struct planner *pl, struct val *cur, const struct val *b, uint64_t keep,
                     bool last, bool gemm, bool swapped)
{
    uint64_t la = labels_of(pl, cur), lb = labels_of(pl, b);
    uint8_t bat[VQ__ES_MAX_LOOP], m[VQ__ES_MAX_LOOP], n[VQ__ES_MAX_LOOP], k[VQ__ES_MAX_LOOP];
    uint8_t kb[VQ__ES_MAX_LOOP], bb[VQ__ES_MAX_LOOP];
    int nb = order_of(pl, la & lb & keep, cur, NULL, bat);
    int nm = order_of(pl, (la & keep) & ~lb, cur, NULL, m);
    int nn = order_of(pl, (lb & keep) & ~la, b, NULL, n);
    int nk = order_of(pl, (la & lb) & ~keep, cur, NULL, k);
    order_of(pl, la & lb & keep, b, NULL, bb);
    order_of(pl, (la & lb) & ~keep, b, NULL, kb);
    int64_t M = size_of(pl, m, nm), N = size_of(pl, n, nn), K = size_of(pl, k, nk);
    if (gemm && last && !swapped && pl->out_plain) {
        /* Out in the order batch, n, m: the product of b and cur lands
         * there directly */
        uint8_t lab[VQ__ES_MAX_LOOP];
        int nc = cat3(lab, bat, nb, m, nm, n, nn);
        int ns = cat3(lab + nc, bb, nb, n, nn, m, nm);
        if (nc == pl->nol && memcmp(lab, pl->ol, (size_t)nc) &&
            !memcmp(lab + nc, pl->ol, (size_t)ns)) {
            struct val a = *cur;
            *cur = *b;
            return pair_step(pl, cur, &a, keep, last, gemm, true);
        }
    }
    const struct val ops[2] = {*cur, *b};
    if (!gemm || M * N * K < GEMM_MIN || M > INT32_MAX || N > INT32_MAX || K > INT32_MAX) {
        if (last) {
            loop_step(pl, ops, 2, VQ__ES_OUT, pl->ol, pl->ostride, pl->nol);
            return 0;
        }
        uint8_t lab[VQ__ES_MAX_LOOP];
        int nl = order_of(pl, (la | lb) & keep, cur, b, lab);
        return loop_to_tmp(pl, ops, 2, lab, nl, cur);
    }
    /* batch and k in a's order or in b's: the one that copies fewer
     * operands */
    int ta = 0, tb = 0, ta2 = 0, tb2 = 0;
    bool a1 = layout_is(pl, cur, bat, nb, m, nm, k, nk, &ta);
    bool b1 = layout_is(pl, b, bat, nb, k, nk, n, nn, &tb) && !(tb && pl->b_plain);
    bool a2 = layout_is(pl, cur, bb, nb, m, nm, kb, nk, &ta2);
    bool b2 = layout_is(pl, b, bb, nb, kb, nk, n, nn, &tb2) && !(tb2 && pl->b_plain);
    if ((int)a2 + (int)b2 > (int)a1 + (int)b1) {
        memcpy(bat, bb, (size_t)nb);
        memcpy(k, kb, (size_t)nk);
        a1 = a2;
        b1 = b2;
        ta = ta2;
        tb = tb2;
    }
    struct val A = *cur, B = *b, C = {.buf = VQ__ES_OUT};
    uint8_t lab[VQ__ES_MAX_LOOP];
    int rc;
    if (!a1) {
        ta = 0;
        if ((rc = loop_to_tmp(pl, ops, 1, lab, cat3(lab, bat, nb, m, nm, k, nk), &A)) < 0)
            return rc;
    }
    if (!b1) {
        tb = 0;
        if ((rc = loop_to_tmp(pl, ops + 1, 1, lab, cat3(lab, bat, nb, k, nk, n, nn), &B)) < 0)
            return rc;
    }
    int nc = cat3(lab, bat, nb, m, nm, n, nn);
    bool direct = last && pl->out_plain && nc == pl->nol && !memcmp(lab, pl->ol, (size_t)nc);
    if (!direct && (rc = tmp_new(pl, lab, nc, &C)) < 0)
        return rc;
    vq__es_step *s = step_new(pl);
    s->kind = VQ__ES_GEMM;
    s->in[0] = A.buf;
    s->in[1] = B.buf;
    s->out = C.buf;
    s->ta = ta;
    s->tb = tb;
    s->batch = size_of(pl, bat, nb);
    s->m = M;
    s->n = N;
    s->k = K;
    if (last && !direct)
        loop_step(pl, &C, 1, VQ__ES_OUT, pl->ol, pl->ostride, pl->nol);
    *cur = C;
    return 0;
}

int vq__einsum_plan(const vq__einsum_params *p, const char *op, const int *rank,
                    const int64_t *const *shape, const int64_t *oshape, int flags,
                    vq__es_plan *plan)
{
    struct planner pl = {.op = op, .plan = plan, .b_plain = flags & VQ__ES_B_PLAIN};
    bool gemm = flags & VQ__ES_GEMM_OK;
    memset(plan, 0, sizeof *plan);
    for (int l = 0; l < NLABELS; l++)
        pl.size[l] = 1;
    for (int i = 0; i < p->nin; i++)
        for (int d = 0; d < rank[i]; d++)
            if (pl.size[p->label[i][d]] == 1)
                pl.size[p->label[i][d]] = shape[i][d];
    /* Out as the last step sees it */
    struct val out = {.buf = VQ__ES_OUT, .rank = p->nout};
    int64_t onumel = 1, s = 1, ostr[NLABELS];
    for (int d = 0; d < p->nout; d++) {
        out.lab[d] = p->out[d];
        out.dim[d] = oshape[d];
        onumel *= oshape[d];
    }
    strides_of(&pl, &out, ostr);
    pl.nol = order_of(&pl, labels_of(&pl, &out), &out, NULL, pl.ol);
    int64_t covered = 1;
    for (int i = 0; i < pl.nol; i++)
        pl.ostride[i] = ostr[pl.ol[i]];
    covered = size_of(&pl, pl.ol, pl.nol);
    plan->zero_out = covered < onumel;
    pl.out_plain = !plan->zero_out;
    for (int i = pl.nol - 1; i >= 0 && pl.out_plain; i--) {
        pl.out_plain = pl.ostride[i] == s;
        s *= pl.size[pl.ol[i]];
    }
    uint64_t out_labels = labels_of(&pl, &out);
    /* the operands, the donor left out */
    struct val ops[VQ__EINSUM_MAX_IN];
    int nops = 0;
    for (int i = 0; i < p->nin; i++) {
        if (i == p->shape_of)
            continue;
        struct val *v = &ops[nops++];
        v->buf = i;
        v->rank = rank[i];
        for (int d = 0; d < rank[i]; d++) {
            v->lab[d] = p->label[i][d];
            v->dim[d] = shape[i][d];
        }
    }
    if (nops == 1) {
        loop_step(&pl, ops, 1, VQ__ES_OUT, pl.ol, pl.ostride, pl.nol);
        return 0;
    }
    struct val cur = ops[0];
    for (int i = 1; i < nops; i++) {
        uint64_t keep = out_labels;
        for (int j = i + 1; j < nops; j++)
            keep |= labels_of(&pl, &ops[j]);
        int rc = pair_step(&pl, &cur, &ops[i], keep, i == nops - 1, gemm, false);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* ---- the CPU kernel ---- */

struct loop_run {
    const vq__es_loop *lp;
    const void *a, *b;
    void *out;
    vq_dtype dt;
};

/* Elements [lo, hi) of a loop step's output: lo's index decomposed once,
 * then an odometer over the output labels. */
#define LOOP(T, U)                                                                \
    do {                                                                          \
        const T *a = r->a, *b = r->b;                                             \
        T *out = r->out;                                                          \
        int64_t oidx[VQ__ES_MAX_LOOP] = {0}, rest = lo, ao = 0, bo = 0, oo = 0;   \
        for (int d = lp->nout - 1; d >= 0; d--) {                                 \
            oidx[d] = rest % lp->size[d];                                         \
            rest /= lp->size[d];                                                  \
            ao += oidx[d] * lp->stride[0][d];                                     \
            bo += oidx[d] * lp->stride[1][d];                                     \
            oo += oidx[d] * lp->ostride[d];                                       \
        }                                                                         \
        for (int64_t o = lo; o < hi; o++) {                                       \
            if (lp->nsum == 0) {                                                  \
                out[oo] = two ? (T)((U)a[ao] * (U)b[bo]) : a[ao];                 \
            } else {                                                              \
                int64_t idx[VQ__ES_MAX_LOOP] = {0}, sa = ao, sb = bo;             \
                U acc = 0;                                                        \
                for (int64_t j = 0; j < lp->sum_numel; j++) {                     \
                    acc = (U)(acc + (two ? (U)((U)a[sa] * (U)b[sb]) : (U)a[sa])); \
                    for (int d = lp->nout + lp->nsum - 1; d >= lp->nout; d--) {   \
                        sa += lp->stride[0][d];                                   \
                        sb += lp->stride[1][d];                                   \
                        if (++idx[d] < lp->size[d])                               \
                            break;                                                \
                        sa -= lp->stride[0][d] * lp->size[d];                     \
                        sb -= lp->stride[1][d] * lp->size[d];                     \
                        idx[d] = 0;                                               \
                    }                                                             \
                }                                                                 \
                out[oo] = (T)acc;                                                 \
            }                                                                     \
            for (int d = lp->nout - 1; d >= 0; d--) {                             \
                ao += lp->stride[0][d];                                           \
                bo += lp->stride[1][d];                                           \
                oo += lp->ostride[d];                                             \
                if (++oidx[d] < lp->size[d])                                      \
                    break;                                                        \
                ao -= lp->stride[0][d] * lp->size[d];                             \
                bo -= lp->stride[1][d] * lp->size[d];                             \
                oo -= lp->ostride[d] * lp->size[d];                               \
                oidx[d] = 0;                                                      \
            }                                                                     \
        }                                                                         \
    } while (0)

static int loop_part(void *arg, int64_t lo, int64_t hi, int slot)
{
    (void)slot;
    const struct loop_run *r = arg;
    const vq__es_loop *lp = r->lp;
    bool two = lp->nop == 2;
    switch (r->dt) {
    case VQ_F32: LOOP(float, float); break;
    case VQ_F64: LOOP(double, double); break;
    case VQ_I32: LOOP(int32_t, uint32_t); break;
    default: LOOP(int64_t, uint64_t); break;
    }
    return 0;
}

struct gemm_run {
    const vq__es_step *s;
    const char *a, *b;
    char *c;
    vq_dtype dt;
};

static int gemm_part(void *arg, int64_t lo, int64_t hi, int slot)
{
    (void)slot;
    const struct gemm_run *r = arg;
    const vq__es_step *s = r->s;
    size_t es = vq_dtype_size(r->dt);
    for (int64_t i = lo; i < hi; i++)
        vq__gemm(r->dt, s->ta, s->tb, s->m, s->n, s->k, 1.0, r->a + (size_t)(i * s->m * s->k) * es,
                 s->ta ? s->m : s->k, r->b + (size_t)(i * s->k * s->n) * es, s->tb ? s->k : s->n,
                 0.0, r->c + (size_t)(i * s->m * s->n) * es);
    return 0;
}

static int einsum_kernel(const vq__kcall *k)
{
    const vq__einsum_params *p = k->params;
    vq_tensor *out = k->out[0];
    int rank[VQ__EINSUM_MAX_IN];
    const int64_t *shape[VQ__EINSUM_MAX_IN];
    for (int i = 0; i < k->nin; i++) {
        rank[i] = k->in[i]->ndim;
        shape[i] = k->in[i]->shape;
    }
    vq__es_plan *plan = vq__malloc(sizeof *plan);
    if (!plan)
        return vq__fail(VQ_ENOMEM, "einsum: out of memory for its plan");
    /* varq's own f32 GEMM (math/sgemm.c) packs B untransposed by plain
     * copies, transposed by 8 x 8 transposes: the plain form is cheaper */
    bool f32 = out->dtype == VQ_F32;
    int flags = f32 || out->dtype == VQ_F64 ? VQ__ES_GEMM_OK : 0;
    if (f32 && vq__sgemm_ok())
        flags |= VQ__ES_B_PLAIN;
    int rc = vq__einsum_plan(p, k->def->type, rank, shape, out->shape, flags, plan);
    vq_tensor *tmp[VQ__ES_MAX_STEPS] = {NULL};
    if (rc == 0 && plan->zero_out)
        memset(out->data, 0, out->nbytes);
    for (int i = 0; rc == 0 && i < plan->nsteps; i++) {
        const vq__es_step *s = &plan->step[i];
        void *buf[3] = {NULL, NULL, NULL};
        for (int j = 0; j < 3; j++) {
            int b = j < 2 ? s->in[j] : s->out;
            if (j == 1 && s->kind == VQ__ES_LOOP && s->loop.nop == 1)
                continue;
            if (b == VQ__ES_OUT) {
                buf[j] = out->data;
            } else if (b >= VQ__ES_TMP) {
                if (!tmp[b - VQ__ES_TMP] &&
                    (rc = vq__kernel_scratch(k, out->dtype, plan->tmp_numel[b - VQ__ES_TMP],
                                             "intermediate product", &tmp[b - VQ__ES_TMP])) < 0)
                    break;
                buf[j] = tmp[b - VQ__ES_TMP] ? tmp[b - VQ__ES_TMP]->data : NULL;
            } else {
                buf[j] = k->in[b]->data;
            }
        }
        if (rc < 0)
            break;
        if (s->kind == VQ__ES_GEMM) {
            struct gemm_run g = {s, buf[0], buf[1], buf[2], out->dtype};
            if (s->batch > 0)
                vq__parallel_for(s->batch, 1, gemm_part, &g);
        } else if (s->loop.out_numel > 0) {
            struct loop_run lr = {&s->loop, buf[0], buf[1], buf[2], out->dtype};
            int64_t work = s->loop.sum_numel > 0 ? s->loop.sum_numel : 1;
            int64_t chunk = VQ__PAR_ELEMS / work > 0 ? VQ__PAR_ELEMS / work : 1;
            vq__parallel_for(s->loop.out_numel, chunk, loop_part, &lr);
        }
        /* each temporary is read by one step: done with it */
        for (int j = 0; j < 2; j++)
            if (s->in[j] >= VQ__ES_TMP) {
                vq_tensor_release(tmp[s->in[j] - VQ__ES_TMP]);
                tmp[s->in[j] - VQ__ES_TMP] = NULL;
            }
    }
    for (int i = 0; i < VQ__ES_MAX_STEPS; i++)
        vq_tensor_release(tmp[i]);
    free(plan);
    return rc;
}

/* ---- the gradient ---- */

/* Appends term i of eq's left side (the text between commas) to buf. */
static bool term_text(const char *lhs, int i, char *buf, size_t cap)
{
    const char *s = lhs;
    for (int k = 0; k < i; k++) {
        s = strchr(s, ',');
        if (!s)
            return false;
        s++;
    }
    const char *e = s;
    while (*e && *e != ',' && *e != '-')
        e++;
    size_t n = strlen(buf);
    if (n + (size_t)(e - s) + 1 > cap)
        return false;
    memcpy(buf + n, s, (size_t)(e - s));
    buf[n + (size_t)(e - s)] = 0;
    return true;
}

/* dX_i = einsum("<out>,<terms j != i>,<term i>-><term i>"; shape_of = the
 * last) of dOut, the other inputs and X_i. */
static int einsum_grad(const vq__grad *g)
{
    int wanted = vq__grad_wanted(g);
    if (wanted <= 0)
        return wanted;
    const char *eq0 = NULL;
    int64_t so = -1;
    for (int i = 0; i < g->nattrs; i++) {
        if (!strcmp(g->attrs[i].name, "equation"))
            eq0 = g->attrs[i].s;
        else if (!strcmp(g->attrs[i].name, "shape_of"))
            so = g->attrs[i].i;
    }
    if (!eq0)
        return vq__op_fail(g->def, "has no equation");
    if (so >= 0 && so < g->nin && g->din[so])
        return vq__op_fail(g->def, "input %lld (shape_of) has no gradient", (long long)so);
    char eq[EQ_MAX], outt[EQ_MAX];
    size_t n = 0;
    for (const char *s = eq0; *s && n + 1 < sizeof eq; s++)
        if (*s != ' ')
            eq[n++] = *s;
    eq[n] = 0;
    const char *arrow = strstr(eq, "->");
    if (arrow) {
        snprintf(outt, sizeof outt, "%s", arrow + 2);
    } else { /* numpy's implicit output */
        int count[ELL] = {0};
        for (const char *s = eq; *s; s++)
            if (label_of(*s) >= 0)
                count[label_of(*s)]++;
        size_t o = 0;
        if (strstr(eq, "..."))
            o = (size_t)snprintf(outt, sizeof outt, "...");
        for (int l = 0; l < ELL; l++)
            if (count[l] == 1 && o + 1 < sizeof outt)
                outt[o++] = letter_of(l);
        outt[o] = 0;
    }
    for (int i = 0; i < g->nin; i++) {
        if (!g->din[i])
            continue;
        char ge[3 * EQ_MAX] = "";
        const char *in[VQ__EINSUM_MAX_IN + 1];
        int nin = 0;
        snprintf(ge, sizeof ge, "%s", outt);
        in[nin++] = g->dout[0];
        for (int j = 0; j < g->nin; j++) {
            if (j == i || j == so)
                continue;
            strncat(ge, ",", sizeof ge - strlen(ge) - 1);
            if (!term_text(eq, j, ge, sizeof ge))
                return vq__op_fail(g->def, "equation \"%s\" has no term %d", eq0, j);
            in[nin++] = g->in[j];
        }
        strncat(ge, ",", sizeof ge - strlen(ge) - 1);
        size_t mark = strlen(ge);
        if (!term_text(eq, i, ge, sizeof ge))
            return vq__op_fail(g->def, "equation \"%s\" has no term %d", eq0, i);
        char ti[EQ_MAX];
        snprintf(ti, sizeof ti, "%s", ge + mark);
        strncat(ge, "->", sizeof ge - strlen(ge) - 1);
        strncat(ge, ti, sizeof ge - strlen(ge) - 1);
        in[nin++] = g->in[i];
        if (nin > VQ__EINSUM_MAX_IN)
            return vq__op_fail(g->def, "the gradient of input %d would take %d inputs (at most %d)",
                               i, nin, VQ__EINSUM_MAX_IN);
        vq_attr at[2] = {VQ_ATTR_S("equation", ge), VQ_ATTR_I("shape_of", nin - 1)};
        int rc = vq__emit(g, "einsum", in, nin, &g->din[i], 1, at, 2);
        if (rc < 0)
            return rc;
    }
    return 0;
}

const vq__op_def vq__ops_einsum[] = {
    {.type = "einsum",
     .in_slots = x_in,
     .nin_slots = 1,
     .out_slots = out_slot,
     .nout_slots = 1,
     .flags = VQ__VARIADIC_IN,
     .attrs = einsum_attrs,
     .nattrs = 2,
     .params_size = sizeof(vq__einsum_params),
     .infer = einsum_infer,
     .kernel = {einsum_kernel},
     .cuda = VQ__CUDA_OP(vq__einsum_gpu),
     .grad = einsum_grad},
    {0},
};
