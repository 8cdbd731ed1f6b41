/* tfidf_vectorizer (ONNX's TfIdfVectorizer): counts of the n-grams of a
 * pool in each row of a sequence of integer tokens, as term frequencies,
 * their presence, or frequencies scaled by weights.
 *
 * tfidf_vectorizer(X, Pool, Counts, Indexes [, Weights]; min_gram,
 * max_gram, max_skip, mode, size) -> Out:
 *   X        i32 or i64, [C] or [N, C]: the tokens, a row per sequence;
 *   Pool     i64 [P]: the n-grams, the 1-grams first, then the 2-grams...;
 *   Counts   i64 [G]: where the (g+1)-grams start in Pool (Counts[0] = 0,
 *            non-decreasing, each section a whole number of (g+1)-grams);
 *   Indexes  i64 [Q]: the output column of each n-gram of Pool, in order;
 *   Weights  f32 [>= size] (optional): a weight per output column;
 *   Out      f32 [size] or [N, size].
 * At every position s of a row and every skip distance d in 1..max_skip+1,
 * the tokens at s, s+d, ..., s+(n-1)d form an n-gram for each n from
 * min_gram to max_gram; one found in the pool's n-grams adds 1 to its
 * column. 1-grams do not depend on d and are counted at d = 1 only (ONNX
 * Runtime's rule, which the ONNX tests encode). mode "TF" gives the
 * counts, "IDF" the weight (1 without Weights) of each column whose count
 * is above 0, "TFIDF" count times weight.
 *
 * The CPU kernel checks the tables and sorts each length's n-grams once
 * per call, then looks every candidate up by binary search; the CUDA
 * kernel (a thread per row) scans them, and cannot report a malformed
 * table: an n-gram whose column is outside [0, size) is skipped there. */
#include "../ops_internal.h"
#include "../params.h"
#include "../cuda/cuda_ops.h"

#include <stdlib.h>
#include <string.h>

static const char *const tfidf_in[] = {"X", "Pool", "Counts", "Indexes", "Weights"};
static const char *const out_slot[] = {"Out"};

static const vq__attr_spec tfidf_attrs[] = {
    {"min_gram", VQ_ATTR_INT, true, NULL}, {"max_gram", VQ_ATTR_INT, true, NULL},
    {"max_skip", VQ_ATTR_INT, false, "0"}, {"mode", VQ_ATTR_STRING, true, NULL},
    {"size", VQ_ATTR_INT, true, NULL},
};

static int tfidf_infer(vq__infer *c)
{
    vq__tfidf_params *p = c->params;
    int rc;
    if (c->nin < 4)
        return vq__op_fail(c->def,
                           "takes X, Pool, Counts, Indexes and optional Weights, got %d "
                           "inputs",
                           c->nin);
    if ((rc = vq__check_dtype(c, 0, (1u << VQ_I32) | (1u << VQ_I64))) < 0)
        return rc;
    if (c->in[0].ndim != 1 && c->in[0].ndim != 2)
        return vq__in_fail(c, 0, "has %d dims; tfidf_vectorizer takes [C] or [N, C]",
                           c->in[0].ndim);
    for (int i = 1; i < 4; i++)
        if ((rc = vq__check_dtype(c, i, 1u << VQ_I64)) < 0 || (rc = vq__check_rank(c, i, 1)) < 0)
            return rc;
    if (c->nin > 4 &&
        ((rc = vq__check_dtype(c, 4, 1u << VQ_F32)) < 0 || (rc = vq__check_rank(c, 4, 1)) < 0))
        return rc;
    int64_t lo = vq__attr_int(c, "min_gram", 1), hi = vq__attr_int(c, "max_gram", 1),
            skip = vq__attr_int(c, "max_skip", 0), size = vq__attr_int(c, "size", 1);
    if (lo < 1 || hi < lo || hi > 64)
        return vq__op_fail(c->def,
                           "min_gram %lld and max_gram %lld: want 1 <= min_gram <= "
                           "max_gram <= 64",
                           (long long)lo, (long long)hi);
    if (skip < 0 || skip > INT32_MAX / 2)
        return vq__op_fail(c->def, "max_skip %lld is negative or too large", (long long)skip);
    if (size < 1 || size > INT32_MAX)
        return vq__op_fail(c->def, "size %lld is not a column count", (long long)size);
    const vq_attr *m = vq__attr_find(c, "mode");
    const char *mode = m && m->s ? m->s : "";
    p->mode = !strcmp(mode, "TF")      ? VQ__TFIDF_TF
              : !strcmp(mode, "IDF")   ? VQ__TFIDF_IDF
              : !strcmp(mode, "TFIDF") ? VQ__TFIDF_TFIDF
                                       : -1;
    if (p->mode < 0)
        return vq__op_fail(c->def, "mode \"%s\" is none of TF, IDF, TFIDF", mode);
    if (c->nin > 4 && c->in[4].shape[0] >= 0 && c->in[4].shape[0] < size)
        return vq__in_fail(c, 4, "has %lld weights for %lld columns", (long long)c->in[4].shape[0],
                           (long long)size);
    p->min_gram = (int)lo;
    p->max_gram = (int)hi;
    p->max_skip = (int)skip;
    p->size = size;
    vq__meta *o = &c->out[0];
    *o = c->in[0];
    o->dtype = VQ_F32;
    o->shape[o->ndim - 1] = size;
    return 0;
}

/* ---- the CPU kernel ---- */

/* The n-grams of one length: sorted positions into the pool. */
struct grams {
    const int64_t *at; /* the section of the pool */
    int n;             /* tokens per n-gram */
    int64_t count;     /* n-grams */
    int64_t first;     /* the number of the section's first n-gram in Pool */
    int64_t *order;    /* count n-gram numbers (within the section), sorted */
};

static int gram_cmp(const void *a, const void *b, void *arg)
{
    const struct grams *g = arg;
    int64_t i = *(const int64_t *)a, j = *(const int64_t *)b;
    const int64_t *x = g->at + i * g->n, *y = g->at + j * g->n;
    for (int t = 0; t < g->n; t++)
        if (x[t] != y[t])
            return x[t] < y[t] ? -1 : 1;
    return i < j ? -1 : i > j; /* equal n-grams: the first in Pool first */
}

/* The number (within g) of the first n-gram of g equal to the tokens
 * x[0], x[d], ..., or -1. */
static int64_t gram_find(const struct grams *g, const int64_t *x, int64_t d)
{
    int64_t lo = 0, hi = g->count;
    while (lo < hi) { /* the first n-gram not below x */
        int64_t mid = lo + (hi - lo) / 2;
        const int64_t *y = g->at + g->order[mid] * g->n;
        int c = 0;
        for (int t = 0; t < g->n && !c; t++)
            c = y[t] < x[t * d] ? -1 : y[t] > x[t * d];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == g->count)
        return -1;
    const int64_t *y = g->at + g->order[lo] * g->n;
    for (int t = 0; t < g->n; t++)
        if (y[t] != x[t * d])
            return -1;
    return g->order[lo];
}

/* Checks the tables and fills gr[n-1] for n in 1..max (those beyond the
 * pool's lengths empty). */
static int grams_make(const vq__kcall *k, const vq__tfidf_params *p, struct grams *gr)
{
    const vq_tensor *pool = k->in[1], *counts = k->in[2], *idx = k->in[3];
    const int64_t *pv = pool->data, *cv = counts->data, *iv = idx->data;
    int64_t P = pool->numel, G = counts->numel, next = 0;
    for (int64_t g = 0; g < G; g++) {
        int64_t start = cv[g], end = g + 1 < G ? cv[g + 1] : P;
        if ((g == 0 && start != 0) || start < 0 || end < start || end > P)
            return vq__op_fail(k->def,
                               "Counts[%lld] = %lld: the sections of Pool must start at "
                               "0 and not go back or past its %lld tokens",
                               (long long)g, (long long)start, (long long)P);
        if ((end - start) % (g + 1))
            return vq__op_fail(k->def, "Pool's %lld-grams take %lld tokens, not a multiple of %lld",
                               (long long)(g + 1), (long long)(end - start), (long long)(g + 1));
        if (g < p->max_gram)
            gr[g] = (struct grams){.at = pv + start,
                                   .n = (int)g + 1,
                                   .count = (end - start) / (g + 1),
                                   .first = next};
        next += (end - start) / (g + 1);
    }
    if (G == 0 && P > 0)
        return vq__op_fail(k->def, "Counts is empty but Pool has %lld tokens", (long long)P);
    if (next != idx->numel)
        return vq__op_fail(k->def, "Pool holds %lld n-grams but Indexes gives %lld columns",
                           (long long)next, (long long)idx->numel);
    for (int64_t j = 0; j < idx->numel; j++)
        if (iv[j] < 0 || iv[j] >= p->size)
            return vq__op_fail(k->def, "Indexes[%lld] = %lld is outside [0, %lld)", (long long)j,
                               (long long)iv[j], (long long)p->size);
    for (int n = 0; n < p->max_gram; n++) {
        if (!gr[n].count)
            continue;
        gr[n].order = vq__malloc((size_t)gr[n].count * sizeof *gr[n].order);
        if (!gr[n].order)
            return vq__op_fail(k->def, "out of memory");
        for (int64_t i = 0; i < gr[n].count; i++)
            gr[n].order[i] = i;
        qsort_r(gr[n].order, (size_t)gr[n].count, sizeof *gr[n].order, gram_cmp, &gr[n]);
    }
    return 0;
}

static int tfidf_kernel(const vq__kcall *k)
{
    const vq__tfidf_params *p = k->params;
    const vq_tensor *x = k->in[0], *w = k->nin > 4 ? k->in[4] : NULL;
    vq_tensor *out = k->out[0];
    const int64_t *iv = k->in[3]->data;
    int64_t C = x->shape[x->ndim - 1], rows = x->ndim == 2 ? x->shape[0] : 1;
    struct grams gr[64];
    memset(gr, 0, sizeof gr);
    int64_t *row = NULL;
    int rc = grams_make(k, p, gr);
    if (rc == 0 && C > 0 && !(row = vq__malloc((size_t)C * sizeof *row)))
        rc = vq__op_fail(k->def, "out of memory");
    float *o = out->data;
    for (int64_t r = 0; rc == 0 && r < rows; r++) {
        float *orow = o + r * p->size;
        memset(orow, 0, (size_t)p->size * sizeof *orow);
        for (int64_t i = 0; i < C; i++) /* the row's tokens as i64 */
            row[i] = x->dtype == VQ_I32 ? ((const int32_t *)x->data)[r * C + i]
                                        : ((const int64_t *)x->data)[r * C + i];
        int start = p->min_gram;
        for (int64_t d = 1; d <= (int64_t)p->max_skip + 1; d++) {
            for (int64_t s = 0; s < C && s + d * (start - 1) < C; s++)
                for (int n = start; n <= p->max_gram && s + d * (n - 1) < C; n++) {
                    const struct grams *g = &gr[n - 1];
                    int64_t at = g->count ? gram_find(g, row + s, d) : -1;
                    if (at >= 0)
                        orow[iv[g->first + at]] += 1;
                }
            if (start == 1 && ++start > p->max_gram)
                break; /* 1-grams once: they do not depend on the skip */
        }
        for (int64_t j = 0; j < p->size; j++) {
            float wt = w ? ((const float *)w->data)[j] : 1.0f;
            if (p->mode == VQ__TFIDF_IDF)
                orow[j] = orow[j] > 0 ? wt : 0;
            else if (p->mode == VQ__TFIDF_TFIDF)
                orow[j] *= wt;
        }
    }
    for (int n = 0; n < 64; n++)
        free(gr[n].order);
    free(row);
    return rc;
}

const vq__op_def vq__ops_tfidf[] = {
    {.type = "tfidf_vectorizer",
     .in_slots = tfidf_in,
     .nin_slots = 5,
     .out_slots = out_slot,
     .nout_slots = 1,
     .flags = VQ__OPTIONAL_IN,
     .attrs = tfidf_attrs,
     .nattrs = 5,
     .params_size = sizeof(vq__tfidf_params),
     .infer = tfidf_infer,
     .kernel = {tfidf_kernel},
     .cuda = VQ__CUDA_OP(vq__tfidf_gpu)},
    {0},
};
