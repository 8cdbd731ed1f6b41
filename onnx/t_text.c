/* ONNX's text op TfIdfVectorizer, as varq's tfidf_vectorizer: the pool,
 * its sections and columns and the weights, attributes in ONNX, become
 * constant inputs, checked here (so that a malformed model fails at
 * import, on every device) and the output's width computed from them.
 * Pools of strings are refused: varq has no string tensors. */
#include "onnx_internal.h"

#include <stdint.h>
#include <string.h>

enum { TABLE_MAX = 1 << 26 };

/* A 1-D i64 constant holding v[0..n). */
static int ints_const(struct ox *x, const int64_t *v, int n, struct ox_val **out)
{
    vq_tensor *t;
    int64_t len = n;
    int rc = vq_tensor_new(&t, VQ_I64, 1, &len);
    if (rc < 0)
        return rc;
    if (n)
        memcpy(vq_tensor_data(t), v, (size_t)n * sizeof *v);
    return ox_const(x, NULL, t, out);
}

/* TfIdfVectorizer(X; max_gram_length, max_skip_count, min_gram_length,
 * mode, ngram_counts, ngram_indexes, pool_int64s, weights). */
static int t_tfidf(struct ox *x)
{
    if (ox_attr(x, "pool_strings"))
        return ox_fail(x, VQ_ENOSYS,
                       "pool_strings: varq has no string tensors (pool_int64s is "
                       "supported)");
    int np, nc, ni, nw;
    const int64_t *pool = ox_ints(x, "pool_int64s", &np), *counts = ox_ints(x, "ngram_counts", &nc),
                  *idx = ox_ints(x, "ngram_indexes", &ni);
    const float *w = ox_floats(x, "weights", &nw);
    if (np < 0 || nc < 0 || ni < 0)
        return ox_fail(x, VQ_EINVAL, "%s is missing",
                       np < 0   ? "pool_int64s"
                       : nc < 0 ? "ngram_counts"
                                : "ngram_indexes");
    int64_t grams = 0, size = 0;
    for (int g = 0; g < nc; g++) {
        int64_t start = counts[g], end = g + 1 < nc ? counts[g + 1] : np;
        if ((g == 0 && start != 0) || start < 0 || end < start || end > np ||
            (end - start) % (g + 1))
            return ox_fail(x, VQ_EINVAL,
                           "ngram_counts[%d] = %lld does not start a whole "
                           "section of %d-grams in the pool's %d tokens",
                           g, (long long)start, g + 1, np);
        grams += (end - start) / (g + 1);
    }
    if (grams != ni)
        return ox_fail(x, VQ_EINVAL, "the pool holds %lld n-grams but ngram_indexes has %d",
                       (long long)grams, ni);
    for (int j = 0; j < ni; j++) {
        if (idx[j] < 0 || idx[j] >= INT32_MAX)
            return ox_fail(x, VQ_EINVAL, "ngram_indexes[%d] = %lld is not a column", j,
                           (long long)idx[j]);
        if (idx[j] + 1 > size)
            size = idx[j] + 1;
    }
    if (size == 0)
        return ox_fail(x, VQ_EINVAL, "the pool holds no n-gram");
    if (nw >= 0 && nw < size)
        return ox_fail(x, VQ_EINVAL, "weights has %d entries for %lld columns", nw,
                       (long long)size);
    struct ox_val *in[5] = {ox_input(x, 0)};
    int rc = ints_const(x, pool, np, &in[1]);
    if (rc == 0)
        rc = ints_const(x, counts, nc, &in[2]);
    if (rc == 0)
        rc = ints_const(x, idx, ni, &in[3]);
    if (rc == 0 && nw >= 0) {
        vq_tensor *t;
        int64_t len = nw;
        if ((rc = vq_tensor_new(&t, VQ_F32, 1, &len)) == 0) {
            if (nw)
                memcpy(vq_tensor_data(t), w, (size_t)nw * sizeof *w);
            rc = ox_const(x, NULL, t, &in[4]);
        }
    }
    if (rc < 0)
        return rc;
    vq_attr at[5] = {VQ_ATTR_I("min_gram", ox_int(x, "min_gram_length")),
                     VQ_ATTR_I("max_gram", ox_int(x, "max_gram_length")),
                     VQ_ATTR_I("max_skip", ox_int(x, "max_skip_count")),
                     VQ_ATTR_S("mode", ox_str(x, "mode")), VQ_ATTR_I("size", size)};
    const char *o = ox_out0(x);
    return ox_emit(x, "tfidf_vectorizer", in, nw >= 0 ? 5 : 4, &o, 1, at, 5, NULL);
}

const struct ox_op ox_op_TfIdfVectorizer =
    OX_ROW(t_tfidf, NULL, 1, 1, true,
           OX_ATTRS(OX_INT("max_gram_length", 0), OX_INT("max_skip_count", 0),
                    OX_INT("min_gram_length", 0), OX_STR("mode", "", 8),
                    OX_INTS("ngram_counts", TABLE_MAX), OX_INTS("ngram_indexes", TABLE_MAX),
                    OX_INTS("pool_int64s", TABLE_MAX), OX_FLOATS("weights", TABLE_MAX)));
