/* dft (ONNX DFT, numpy.fft's fft and ifft): the discrete Fourier transform
 * along one axis of a real or complex signal, whose last dim holds the
 * real part (size 1) or the real and imaginary parts (size 2).
 *
 * dft(X; axis, inverse, onesided, length) -> Out, X f32 or f64 [..., 1]
 * or [..., 2]: along axis (never the last dim), each line's first n
 * values (n = length, or the axis' size when length is 0; a shorter line
 * is padded with zeros) transform to Out[k] = sum_j x[j] exp(-2 pi i j k
 * / n) (inverse: exp(+2 pi i j k / n) / n), for k < n, or k <= n / 2 when
 * onesided (the rest of a real signal's spectrum is their conjugates).
 * Out is X's shape with n (or n / 2 + 1) along the axis and 2 in the last
 * dim, X's dtype.
 *
 * The CPU works in double: a radix-2 FFT when n is a power of two, else
 * the sums in j's order, each twiddle exp(-2 pi i (j k mod n) / n) from
 * cos and sin of its own angle (no recurrence, so no error builds up
 * along a line). The CUDA kernel (ops/cuda/dft.cu) computes each output
 * element's sum directly, one thread each: equal to rounding. No
 * gradient. */
#include "../ops_internal.h"
#include "../params.h"
#include "../cuda/cuda_ops.h"
#include "../shape_shared.h" /* vq__lines_of */

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const x_in[] = {"X"};
static const char *const out_slot[] = {"Out"};

static const vq__attr_spec dft_attrs[] = {
    {"axis", VQ_ATTR_INT, false, "1"},
    {"inverse", VQ_ATTR_BOOL, false, "false"},
    {"onesided", VQ_ATTR_BOOL, false, "false"},
    {"length", VQ_ATTR_INT, false, "0"},
};

static int dft_infer(vq__infer *c)
{
    vq__dft_params *p = c->params;
    const vq__meta *x = &c->in[0];
    int rc = vq__check_dtype(c, 0, VQ__FLOATS);
    if (rc < 0)
        return rc;
    if (x->ndim < 2)
        return vq__in_fail(c, 0,
                           "has rank %d; dft needs a signal axis and a last dim of 1 "
                           "(real) or 2 (complex)",
                           x->ndim);
    int64_t parts = x->shape[x->ndim - 1];
    if (parts >= 0 && parts != 1 && parts != 2)
        return vq__in_fail(c, 0, "has a last dim of %lld; expected 1 (real) or 2 (complex)",
                           (long long)parts);
    if ((rc = vq__axis(c, "axis", vq__attr_int(c, "axis", 1), x->ndim, &p->axis)) < 0)
        return rc;
    if (p->axis == x->ndim - 1)
        return vq__attr_fail(c, "axis", "is the last dim, which holds the complex parts");
    p->inverse = vq__attr_bool(c, "inverse", false);
    p->onesided = vq__attr_bool(c, "onesided", false);
    p->length = vq__attr_int(c, "length", 0);
    if (p->length < 0 || p->length > INT32_MAX)
        return vq__attr_fail(c, "length", "is %lld, outside [0, 2^31) (0: the axis' size)",
                             (long long)p->length);
    if (p->onesided && p->inverse)
        return vq__attr_fail(c, "onesided",
                             "is set with inverse; a onesided inverse "
                             "transform is not supported");
    int64_t n = p->length ? p->length : x->shape[p->axis];
    if (n == 0)
        return vq__in_fail(c, 0, "has an empty axis %d: a transform of length 0", p->axis);
    c->out[0] = *x;
    c->out[0].shape[p->axis] = n < 0 ? -1 : p->onesided ? n / 2 + 1 : n;
    c->out[0].shape[x->ndim - 1] = 2;
    return 0;
}

/* exp(sign 2 pi i m / n) for m in [0, n), into (*re, *im). */
static void twiddle(int64_t m, int64_t n, double sign, double *re, double *im)
{
    double a = sign * 2 * M_PI * (double)m / (double)n;
    *re = cos(a);
    *im = sin(a);
}

/* In place over buf (n complex values, re and im interleaved), n a power
 * of two: bit reversal, then butterflies of growing span. */
static void fft_pow2(double *buf, int64_t n, double sign)
{
    for (int64_t i = 1, j = 0; i < n; i++) {
        int64_t bit = n >> 1;
        for (; j & bit; bit >>= 1)
            j ^= bit;
        j ^= bit;
        if (i < j) {
            double tr = buf[2 * i], ti = buf[2 * i + 1];
            buf[2 * i] = buf[2 * j];
            buf[2 * i + 1] = buf[2 * j + 1];
            buf[2 * j] = tr;
            buf[2 * j + 1] = ti;
        }
    }
    for (int64_t span = 2; span <= n; span <<= 1)
        for (int64_t k = 0; k < span / 2; k++) {
            double wr, wi;
            twiddle(k, span, sign, &wr, &wi);
            for (int64_t s = 0; s < n; s += span) {
                double *a = buf + 2 * (s + k), *b = buf + 2 * (s + k + span / 2);
                double br = b[0] * wr - b[1] * wi, bi = b[0] * wi + b[1] * wr;
                b[0] = a[0] - br;
                b[1] = a[1] - bi;
                a[0] += br;
                a[1] += bi;
            }
        }
}

/* in (n complex values) to out's first nout bins, by the sums. */
static void dft_plain(const double *in, double *out, int64_t n, int64_t nout, double sign)
{
    for (int64_t k = 0; k < nout; k++) {
        double sr = 0, si = 0;
        for (int64_t j = 0; j < n; j++) {
            double wr, wi;
            twiddle(j * k % n, n, sign, &wr, &wi);
            sr += in[2 * j] * wr - in[2 * j + 1] * wi;
            si += in[2 * j] * wi + in[2 * j + 1] * wr;
        }
        out[2 * k] = sr;
        out[2 * k + 1] = si;
    }
}

static int dft_kernel(const vq__kcall *k)
{
    const vq__dft_params *p = k->params;
    vq_tensor *x = k->in[0], *o = k->out[0];
    if (o->numel == 0)
        return 0;
    int64_t outer, len, inner, parts = x->shape[x->ndim - 1];
    vq__lines_of(x->ndim - 1, x->shape, p->axis, &outer, &len, &inner);
    int64_t n = p->length ? p->length : len, nout = o->shape[p->axis];
    bool pow2 = (n & (n - 1)) == 0;
    double sign = p->inverse ? 1 : -1, scale = p->inverse ? 1.0 / (double)n : 1;
    double *buf = vq__malloc((size_t)(pow2 ? 2 * n : 4 * n) * sizeof *buf);
    if (!buf)
        return vq__op_fail(k->def, "out of memory for a line of %lld values", (long long)n);
    double *res = pow2 ? buf : buf + 2 * n;
    bool f32 = x->dtype == VQ_F32;
    for (int64_t ob = 0; ob < outer; ob++)
        for (int64_t i = 0; i < inner; i++) {
            /* the line, zero-padded or cut to n */
            for (int64_t j = 0; j < n; j++) {
                double re = 0, im = 0;
                if (j < len) {
                    int64_t at = ((ob * len + j) * inner + i) * parts;
                    re = f32 ? ((const float *)x->data)[at] : ((const double *)x->data)[at];
                    if (parts == 2)
                        im = f32 ? ((const float *)x->data)[at + 1]
                                 : ((const double *)x->data)[at + 1];
                }
                buf[2 * j] = re;
                buf[2 * j + 1] = im;
            }
            if (pow2)
                fft_pow2(buf, n, sign);
            else
                dft_plain(buf, res, n, nout, sign);
            for (int64_t q = 0; q < nout; q++) {
                int64_t at = ((ob * nout + q) * inner + i) * 2;
                double re = res[2 * q] * scale, im = res[2 * q + 1] * scale;
                if (f32) {
                    ((float *)o->data)[at] = (float)re;
                    ((float *)o->data)[at + 1] = (float)im;
                } else {
                    ((double *)o->data)[at] = re;
                    ((double *)o->data)[at + 1] = im;
                }
            }
        }
    free(buf);
    return 0;
}

const vq__op_def vq__ops_dft[] = {
    {.type = "dft",
     .in_slots = x_in,
     .nin_slots = 1,
     .out_slots = out_slot,
     .nout_slots = 1,
     .attrs = dft_attrs,
     .nattrs = 4,
     .params_size = sizeof(vq__dft_params),
     .infer = dft_infer,
     .kernel = {dft_kernel},
     .cuda = VQ__CUDA_OP(vq__dft_gpu)},
    {0},
};
