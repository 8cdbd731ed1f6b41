/* ONNX's DFT and STFT (opset 17) as varq's dft (ops/cpu/dft.c). DFT maps
 * one to one, its dft_length input known at import. STFT is composed:
 * the frames gathered from the signal by a table of indices made at import
 * ([frames, frame_length]: frame f's j-th sample is f frame_step + j),
 * times the window, then dft along the frame's axis (onesided as the
 * node says, 1 by default). frame_step, frame_length and the signal's
 * length must therefore be known at import. */
#include "onnx_internal.h"

#include <string.h>

/* A known one-element integer input i (what: its name), into *out; absent:
 * *given false. */
static int known_int(struct ox *x, int i, const char *what, int64_t *out, bool *given)
{
    int64_t v[1];
    int n;
    int rc = ox_const_ints(x, i, what, v, 1, &n);
    *given = n >= 0;
    if (rc == 0 && n == 0)
        rc = ox_fail(x, VQ_EINVAL, "%s is empty; expected one value", what);
    if (rc == 0 && *given)
        *out = v[0];
    return rc;
}

static int t_dft(struct ox *x)
{
    struct ox_val *v = ox_input(x, 0);
    int64_t length = 0;
    bool given;
    int rc = known_int(x, 1, "dft_length", &length, &given);
    if (rc)
        return rc;
    if (given && length < 1)
        return ox_fail(x, VQ_EINVAL, "dft_length is %lld; expected at least 1", (long long)length);
    vq_attr a[4] = {VQ_ATTR_I("axis", ox_int(x, "axis")),
                    VQ_ATTR_B("inverse", ox_int(x, "inverse") != 0),
                    VQ_ATTR_B("onesided", ox_int(x, "onesided") != 0), VQ_ATTR_I("length", length)};
    const char *o = ox_out0(x);
    return ox_emit(x, "dft", &v, 1, &o, 1, a, 4, NULL);
}

static int t_stft(struct ox *x)
{
    struct ox_val *v = ox_input(x, 0), *win = ox_input(x, 2);
    int64_t step = 0, flen = 0;
    bool has_step, has_len;
    int rc = known_int(x, 1, "frame_step", &step, &has_step);
    if (rc == 0)
        rc = known_int(x, 3, "frame_length", &flen, &has_len);
    if (rc)
        return rc;
    if (v->meta.ndim != 3)
        return ox_fail(x, VQ_EINVAL, "signal has rank %d; expected [batch, length, 1 or 2]",
                       v->meta.ndim);
    if (win && win->meta.ndim != 1)
        return ox_fail(x, VQ_EINVAL, "window has rank %d; expected 1", win->meta.ndim);
    int64_t wlen = win ? win->meta.shape[0] : -1;
    if (!has_len && !win)
        return ox_fail(x, VQ_EINVAL, "neither window nor frame_length gives the frame's length");
    if (!has_len && wlen < 0)
        return ox_fail(x, VQ_ENOSYS,
                       "the window's length must be known when the model is "
                       "imported");
    if (!has_len)
        flen = wlen;
    if (wlen >= 0 && wlen != flen)
        return ox_fail(x, VQ_EINVAL, "window has %lld values, frame_length is %lld",
                       (long long)wlen, (long long)flen);
    int64_t len = v->meta.shape[1];
    if (step < 1 || flen < 1)
        return ox_fail(x, VQ_EINVAL,
                       "frame_step %lld and frame_length %lld; both must be at "
                       "least 1",
                       (long long)step, (long long)flen);
    if (len < 0)
        return ox_fail(x, VQ_ENOSYS,
                       "the signal's length must be known when the model is "
                       "imported");
    if (len < flen)
        return ox_fail(x, VQ_EINVAL, "the signal's %lld samples are fewer than a frame's %lld",
                       (long long)len, (long long)flen);
    int64_t frames = (len - flen) / step + 1;
    vq_tensor *t;
    if ((rc = ox_tensor_new(x, &t, VQ_I64, 2, (int64_t[]){frames, flen})) < 0)
        return rc;
    int64_t *ix = vq_tensor_data(t);
    for (int64_t f = 0; f < frames; f++)
        for (int64_t j = 0; j < flen; j++)
            ix[f * flen + j] = f * step + j;
    struct ox_val *idx, *fr;
    vq_attr ga = VQ_ATTR_I("axis", 1);
    if ((rc = ox_const(x, NULL, t, &idx)) < 0 ||
        (rc = ox_emit(x, "gather", (struct ox_val *[]){v, idx}, 2, NULL, 1, &ga, 1, &fr)) < 0)
        return rc;
    if (win) {
        struct ox_val *w = win, *w4;
        if ((rc = ox_cast(x, &w, v->meta.dtype)) < 0 ||
            (rc = ox_reshape(x, w, (int64_t[]){1, 1, flen, 1}, 4, NULL, &w4)) < 0 ||
            (rc = ox_emit(x, "mul", (struct ox_val *[]){fr, w4}, 2, NULL, 1, NULL, 0, &fr)) < 0)
            return rc;
    }
    vq_attr a[2] = {VQ_ATTR_I("axis", 2), VQ_ATTR_B("onesided", ox_int(x, "onesided") != 0)};
    const char *o = ox_out0(x);
    return ox_emit(x, "dft", &fr, 1, &o, 1, a, 2, NULL);
}

const struct ox_op ox_op_DFT =
    OX_ROW(t_dft, NULL, 1, 2, true,
           OX_ATTRS(OX_INT("axis", 1), OX_INT("inverse", 0), OX_INT("onesided", 0)));
const struct ox_op ox_op_STFT = OX_ROW(t_stft, NULL, 2, 4, true, OX_ATTRS(OX_INT("onesided", 1)));
