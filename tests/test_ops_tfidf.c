/* tfidf_vectorizer (ops/cpu/tfidf.c): counts against worked examples and
 * against a plain scan of the pool on random rows and pools, the three
 * modes, and the tables it refuses. */
#include "opcheck.h"

#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>
#include "leakcheck.h"

static uint64_t rng;

static void setup(void)
{
    rng = oc_seed("ops_tfidf");
}

TestSuite(ops_tfidf, .init = setup, .fini = leak_check);

static vq_tensor *ints(int n, const int64_t *v)
{
    int64_t len = n;
    vq_tensor *t;
    cr_assert_eq(vq_tensor_new(&t, VQ_I64, 1, &len), 0);
    if (n)
        memcpy(vq_tensor_data(t), v, (size_t)n * sizeof *v);
    return t;
}

/* Out of tfidf_vectorizer on x with the tables; NULL when it fails (*rc). */
static vq_tensor *tfidf(vq_tensor *x, int np, const int64_t *pool, int nc, const int64_t *counts,
                        int ni, const int64_t *idx, vq_tensor *w, int lo, int hi, int skip,
                        const char *mode, int64_t size, int *rc)
{
    vq_tensor *in[5] = {x, ints(np, pool), ints(nc, counts), ints(ni, idx), w};
    vq_attr at[5] = {VQ_ATTR_I("min_gram", lo), VQ_ATTR_I("max_gram", hi),
                     VQ_ATTR_I("max_skip", skip), VQ_ATTR_S("mode", mode), VQ_ATTR_I("size", size)};
    vq_tensor *out = NULL;
    *rc = vq_op_run(NULL, "tfidf_vectorizer", in, w ? 5 : 4, &out, 1, at, 5);
    for (int i = 1; i < 4; i++)
        vq_tensor_release(in[i]);
    return *rc == 0 ? out : NULL;
}

/* Row [2, 5, 3, 2, 3]; pool: 1-grams 2, 3; 2-grams (2, 3), (5, 2). */
Test(ops_tfidf, counts_the_pools_n_grams_at_every_skip)
{
    int64_t five = 5, four = 4;
    const int64_t pool[6] = {2, 3, 2, 3, 5, 2}, counts[2] = {0, 2}, idx[4] = {0, 1, 2, 3};
    vq_tensor *x = oc_from(VQ_I64, 1, &five, (double[]){2, 5, 3, 2, 3});
    int rc;
    /* skip 0: 2 twice, 3 twice, (2,3) once (positions 3-4), (5,2) none */
    vq_tensor *o = tfidf(x, 6, pool, 2, counts, 4, idx, NULL, 1, 2, 0, "TF", 4, &rc);
    cr_assert_eq(rc, 0, "%s", vq_errmsg());
    oc_assert_close(o, 1, &four, (double[]){2, 2, 1, 0}, 0, 0);
    vq_tensor_release(o);
    /* skip up to 1: (2,3) also at distance 2 (positions 0-2), (5,2) at 1-3;
     * the 1-grams counted once */
    o = tfidf(x, 6, pool, 2, counts, 4, idx, NULL, 1, 2, 1, "TF", 4, &rc);
    oc_assert_close(o, 1, &four, (double[]){2, 2, 2, 1}, 0, 0);
    vq_tensor_release(o);
    /* bigrams only, columns permuted, one column left empty, IDF with weights */
    const int64_t idx2[4] = {4, 0, 3, 1};
    vq_tensor *w = oc_from(VQ_F32, 1, &five, (double[]){0.5, 2, 4, 8, 16});
    o = tfidf(x, 6, pool, 2, counts, 4, idx2, w, 2, 2, 1, "IDF", 5, &rc);
    cr_assert_eq(rc, 0, "%s", vq_errmsg());
    int64_t fives = 5;
    oc_assert_close(o, 1, &fives, (double[]){0, 2, 0, 8, 0}, 0, 0);
    vq_tensor_release(o);
    o = tfidf(x, 6, pool, 2, counts, 4, idx2, w, 1, 2, 1, "TFIDF", 5, &rc);
    oc_assert_close(o, 1, &fives, (double[]){2 * 0.5, 1 * 2, 0, 2 * 8, 2 * 16}, 0, 0);
    vq_tensor_release(o);
    vq_tensor_release(w);
    vq_tensor_release(x);
}

/* The count of one row by a plain scan, as the spec reads. */
static void reference(const int64_t *row, int64_t C, const int64_t *pool, int np,
                      const int64_t *counts, int nc, const int64_t *idx, int lo, int hi, int skip,
                      double *out)
{
    int start = lo;
    for (int64_t d = 1; d <= skip + 1; d++) {
        for (int64_t s = 0; s < C; s++) {
            int64_t first = 0;
            for (int g = 0; g < nc; g++) {
                int n = g + 1;
                int64_t beg = counts[g], end = g + 1 < nc ? counts[g + 1] : np,
                        cnt = (end - beg) / n;
                if (n >= start && n <= hi && s + d * (n - 1) < C)
                    for (int64_t q = 0; q < cnt; q++) {
                        int t = 0;
                        while (t < n && pool[beg + q * n + t] == row[s + t * d])
                            t++;
                        if (t == n) {
                            out[idx[first + q]] += 1;
                            break;
                        }
                    }
                first += cnt;
            }
        }
        if (start == 1 && ++start > hi)
            break;
    }
}

Test(ops_tfidf, random_rows_and_pools_match_a_plain_scan)
{
    for (int trial = 0; trial < 60; trial++) {
        int nc = 1 + (int)(oc_next(&rng) % 4), lo = 1 + (int)(oc_next(&rng) % (uint64_t)nc);
        int hi = lo + (int)(oc_next(&rng) % (uint64_t)(nc - lo + 1)),
            skip = (int)(oc_next(&rng) % 4);
        int64_t counts[4], pool[200];
        int np = 0, ni = 0;
        for (int g = 0; g < nc; g++) {
            counts[g] = np;
            int grams = (int)(oc_next(&rng) % 8);
            for (int q = 0; q < grams * (g + 1); q++)
                pool[np++] = (int64_t)(oc_next(&rng) % 4); /* few tokens: many hits, repeats */
            ni += grams;
        }
        int64_t idx[200], size = 1 + (int64_t)(oc_next(&rng) % 12);
        for (int j = 0; j < ni; j++)
            idx[j] = (int64_t)(oc_next(&rng) % (uint64_t)size);
        int64_t shape[2] = {3, (int64_t)(oc_next(&rng) % 20)};
        bool i32 = trial % 2;
        vq_tensor *x = oc_rand(&rng, i32 ? VQ_I32 : VQ_I64, 2, shape, 0, 4);
        int rc;
        vq_tensor *o = tfidf(x, np, pool, nc, counts, ni, idx, NULL, lo, hi, skip, "TF", size, &rc);
        cr_assert_eq(rc, 0, "trial %d: %s", trial, vq_errmsg());
        double want[3 * 12] = {0};
        for (int64_t r = 0; r < 3; r++) {
            int64_t row[20];
            for (int64_t i = 0; i < shape[1]; i++)
                row[i] = (int64_t)oc_get(x, r * shape[1] + i);
            reference(row, shape[1], pool, np, counts, nc, idx, lo, hi, skip, want + r * size);
        }
        int64_t oshape[2] = {3, size};
        oc_assert_close(o, 2, oshape, want, 0, 0);
        vq_tensor_release(o);
        vq_tensor_release(x);
    }
}

Test(ops_tfidf, malformed_tables_and_arguments_are_refused)
{
    int64_t four = 4;
    vq_tensor *x = oc_from(VQ_I64, 1, &four, (double[]){1, 2, 3, 4});
    const int64_t pool[4] = {1, 2, 1, 2}, idx[3] = {0, 1, 2};
    int rc;
    /* sections: must start at 0, whole 2-grams, as many columns as n-grams */
    cr_assert_null(tfidf(x, 4, pool, 2, (int64_t[]){1, 2}, 3, idx, NULL, 1, 2, 0, "TF", 3, &rc));
    cr_assert_eq(rc, VQ_EINVAL);
    cr_assert_null(tfidf(x, 4, pool, 2, (int64_t[]){0, 1}, 3, idx, NULL, 1, 2, 0, "TF", 3, &rc));
    cr_assert(strstr(vq_errmsg(), "multiple of 2"), "%s", vq_errmsg());
    cr_assert_null(tfidf(x, 4, pool, 2, (int64_t[]){0, 2}, 2, idx, NULL, 1, 2, 0, "TF", 3, &rc));
    cr_assert(strstr(vq_errmsg(), "Indexes gives 2"), "%s", vq_errmsg());
    cr_assert_null(tfidf(x, 4, pool, 2, (int64_t[]){0, 2}, 3, (int64_t[]){0, 1, 3}, NULL, 1, 2, 0,
                         "TF", 3, &rc));
    cr_assert(strstr(vq_errmsg(), "outside [0, 3)"), "%s", vq_errmsg());
    cr_assert_null(tfidf(x, 4, pool, 2, (int64_t[]){0, 2}, 3, idx, NULL, 1, 2, 0, "BM25", 3, &rc));
    cr_assert(strstr(vq_errmsg(), "BM25"), "%s", vq_errmsg());
    cr_assert_null(tfidf(x, 4, pool, 2, (int64_t[]){0, 2}, 3, idx, NULL, 2, 1, 0, "TF", 3, &rc));
    int64_t two = 2;
    vq_tensor *w = oc_from(VQ_F32, 1, &two, (double[]){1, 1});
    cr_assert_null(tfidf(x, 4, pool, 2, (int64_t[]){0, 2}, 3, idx, w, 1, 2, 0, "TF", 3, &rc));
    cr_assert(strstr(vq_errmsg(), "2 weights for 3 columns"), "%s", vq_errmsg());
    vq_tensor_release(w);
    vq_tensor *xf = oc_from(VQ_F32, 1, &four, (double[]){1, 2, 3, 4});
    cr_assert_null(tfidf(xf, 4, pool, 2, (int64_t[]){0, 2}, 3, idx, NULL, 1, 2, 0, "TF", 3, &rc));
    vq_tensor_release(xf);
    vq_tensor_release(x);
}
