/* ONNX's signal-processing generators, computed at import: the cosine-sum
 * windows (HannWindow, HammingWindow, BlackmanWindow) and MelWeightMatrix
 * become constant tensors, made by the spec's formulas in double and then
 * converted to output_datatype. Their inputs (a window's size, the
 * matrix's bins, rate and edges) must be known when the model is imported:
 * initializers, Constants, values computed from those, or graph inputs
 * whose values the caller offers (vq_onnx_opts); otherwise the node fails
 * naming the input, since the output's shape depends on them. */
#include "onnx_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* Element i of a new tensor t made at import, from a double (integers
 * truncated, as Cast does). */
static void put(vq_tensor *t, int64_t i, double v)
{
    switch (t->dtype) {
    case VQ_F32: ((float *)t->data)[i] = (float)v; break;
    case VQ_F64: ((double *)t->data)[i] = v; break;
    case VQ_I32: ((int32_t *)t->data)[i] = (int32_t)v; break;
    case VQ_I64: ((int64_t *)t->data)[i] = (int64_t)v; break;
    default: ((unsigned char *)t->data)[i] = v != 0; break;
    }
}

/* The output_datatype attribute as a varq dtype. */
static int out_dtype(struct ox *x, vq_dtype *dt)
{
    int64_t to = ox_int(x, "output_datatype");
    if (!vq__onnx_dtype((int32_t)to, dt))
        return ox_fail(x, VQ_ENOSYS, "output_datatype %s is not a varq dtype",
                       vq__onnx_type_name((int32_t)to));
    return 0;
}

/* Input i, a known integer scalar (what: its name, for messages). */
static int known_int(struct ox *x, int i, const char *what, int64_t *out)
{
    int n, rc = ox_const_ints(x, i, what, out, 1, &n);
    if (rc == 0 && n != 1)
        rc = ox_fail(x, VQ_EINVAL, "input %d (%s) has %d values, not one", i, what, n);
    return rc;
}

/* Input i, a known float scalar. */
static int known_float(struct ox *x, int i, const char *what, double *out)
{
    struct ox_val *v = ox_input(x, i);
    const vq_tensor *t = ox_known(x, v) ? v->konst : NULL;
    int rc = ox_list_value(x, i, what, v, t, t && ox_is_float(t->dtype), "a float tensor", 1);
    if (rc == 0 && t->numel != 1)
        rc = ox_fail(x, VQ_EINVAL, "input %d (%s) has %lld values, not one", i, what,
                     (long long)t->numel);
    if (rc == 0)
        *out = ox_first_value(t);
    return rc;
}

/* HannWindow, HammingWindow, BlackmanWindow(size; periodic,
 * output_datatype): y[n] = a0 - a1 cos(2 pi n / N) + a2 cos(4 pi n / N)
 * for n < size, N = size (periodic) or size - 1 (symmetric; a symmetric
 * window of one point is a0 - a1 + a2, its angle taken as 0). The
 * coefficients are the spec's: Hann 0.5, 0.5, 0; Hamming 25/46, 21/46, 0;
 * Blackman 0.42, 0.5, 0.08. */
static int cosine_window(struct ox *x, double a0, double a1, double a2)
{
    int64_t size;
    vq_dtype dt;
    vq_tensor *t;
    int rc = known_int(x, 0, "size", &size);
    if (rc == 0 && size <= 0)
        rc = ox_fail(x, VQ_EINVAL, "input 0 (size) is %lld; a window needs at least one point",
                     (long long)size);
    if (rc || (rc = out_dtype(x, &dt)) || (rc = ox_tensor_new(x, &t, dt, 1, &size)))
        return rc;
    double n_div = (double)(ox_int(x, "periodic") ? size : size - 1);
    for (int64_t n = 0; n < size; n++) {
        double angle = n == 0 ? 0 : 2 * M_PI * (double)n / n_div;
        put(t, n, a0 - a1 * cos(angle) + a2 * cos(2 * angle));
    }
    return ox_const(x, ox_out0(x), t, NULL);
}

static int t_hann(struct ox *x)
{
    return cosine_window(x, 0.5, 0.5, 0);
}

static int t_hamming(struct ox *x)
{
    return cosine_window(x, 25.0 / 46, 21.0 / 46, 0);
}

static int t_blackman(struct ox *x)
{
    return cosine_window(x, 0.42, 0.5, 0.08);
}

/* MelWeightMatrix(num_mel_bins, dft_length, sample_rate, lower_edge_hertz,
 * upper_edge_hertz; output_datatype): [dft_length / 2 + 1, num_mel_bins]
 * triangles of peak 1 between num_mel_bins + 2 points equally spaced on
 * the mel scale (mel(f) = 2595 log10(1 + f / 700)), each point's bin
 * floor((dft_length + 1) * f / sample_rate), as ONNX's reference computes
 * them. A point outside the spectrogram's bins fails the node. */
static int t_mel_weight_matrix(struct ox *x)
{
    int64_t mels, dft, rate;
    double lo, hi;
    vq_dtype dt;
    int rc;
    if ((rc = known_int(x, 0, "num_mel_bins", &mels)) ||
        (rc = known_int(x, 1, "dft_length", &dft)) ||
        (rc = known_int(x, 2, "sample_rate", &rate)) ||
        (rc = known_float(x, 3, "lower_edge_hertz", &lo)) ||
        (rc = known_float(x, 4, "upper_edge_hertz", &hi)) || (rc = out_dtype(x, &dt)))
        return rc;
    if (mels <= 0 || dft <= 0 || rate <= 0 || mels > VQ_ONNX_MADE_MAX_ELEMS)
        return ox_fail(x, VQ_EINVAL,
                       "num_mel_bins %lld, dft_length %lld and sample_rate %lld must be positive",
                       (long long)mels, (long long)dft, (long long)rate);
    int64_t bins = dft / 2 + 1, shape[2] = {bins, mels};
    vq_tensor *t;
    if ((rc = ox_tensor_new(x, &t, dt, 2, shape)))
        return rc;
    int64_t *at = vq__malloc((size_t)(mels + 2) * sizeof *at);
    if (!at) {
        vq_tensor_release(t);
        return ox_fail(x, VQ_ENOMEM, "out of memory");
    }
    double lo_mel = 2595 * log10(1 + lo / 700), hi_mel = 2595 * log10(1 + hi / 700);
    double step = (hi_mel - lo_mel) / (double)(mels + 2);
    for (int64_t i = 0; i < mels + 2; i++) {
        double f = 700 * (pow(10, ((double)i * step + lo_mel) / 2595) - 1);
        at[i] = (int64_t)floor((double)(dft + 1) * f / (double)rate);
        if (at[i] < 0 || at[i] >= bins) {
            rc = ox_fail(x, VQ_EINVAL,
                         "point %lld of the mel scale falls in bin %lld, outside the %lld bins of "
                         "a DFT of %lld (is upper_edge_hertz %g above sample_rate / 2?)",
                         (long long)i, (long long)at[i], (long long)bins, (long long)dft, hi);
            free(at);
            vq_tensor_release(t);
            return rc;
        }
    }
    for (int64_t e = 0; e < bins * mels; e++)
        put(t, e, 0);
    for (int64_t i = 0; i < mels; i++) {
        int64_t left = at[i], center = at[i + 1], right = at[i + 2];
        if (center == left)
            put(t, center * mels + i, 1);
        else
            for (int64_t j = left; j <= center; j++)
                put(t, j * mels + i, (double)(j - left) / (double)(center - left));
        for (int64_t j = center; j < right; j++)
            put(t, j * mels + i, (double)(right - j) / (double)(right - center));
    }
    free(at);
    return ox_const(x, ox_out0(x), t, NULL);
}

/* ---- the rows ---- */

#define WINDOW_ATTRS \
    OX_ATTRS(OX_INT("periodic", 1), OX_INT("output_datatype", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT))
const struct ox_op ox_op_HannWindow = OX_ROW(t_hann, NULL, 1, 1, true, WINDOW_ATTRS);
const struct ox_op ox_op_HammingWindow = OX_ROW(t_hamming, NULL, 1, 1, true, WINDOW_ATTRS);
const struct ox_op ox_op_BlackmanWindow = OX_ROW(t_blackman, NULL, 1, 1, true, WINDOW_ATTRS);
const struct ox_op ox_op_MelWeightMatrix =
    OX_ROW(t_mel_weight_matrix, NULL, 5, 5, true,
           OX_ATTRS(OX_INT("output_datatype", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT)));
