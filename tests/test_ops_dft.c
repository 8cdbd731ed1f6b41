/* dft (ops/cpu/dft.c) against numpy.fft: real and complex signals, powers
 * of two (the FFT) and not (the sums), an inner dim after the axis, the
 * axis first, zero padding and truncation to length, onesided, inverse;
 * in f64 (to 1e-12) and f32 (to 1e-5). The values below are numpy's
 * (/usr/bin/python3: numpy.fft.fft / ifft with n and axis, the onesided
 * bins taken), for inputs x[i] = sin(0.37 i^2 + 0.11 i + 1) over X's flat
 * index i, which input() makes alike. Errors name the slot or attribute. */
#include "opcheck.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "leakcheck.h"

TestSuite(ops_dft, .fini = leak_check);

/* a: X [2, 8, 1], axis 1, inverse 0, onesided 0, length 0 -> [2, 8, 2] */
static const double WANT_A[32] = {2.6986141107845758,   0,
                                  2.6784933997006815,   0.1598035592606184,
                                  0.62919258184260252,  -0.14592852503698006,
                                  -2.7564554491909568,  -0.31613774484071877,
                                  2.9306927029739422,   0,
                                  -2.7564554491909568,  0.31613774484071877,
                                  0.62919258184260252,  0.14592852503698006,
                                  2.6784933997006815,   -0.1598035592606184,
                                  0.88466581441201786,  0,
                                  0.26891121104625004,  -1.807365799268247,
                                  -1.0520506481569711,  -2.103430300990214,
                                  2.1851235902726494,   0.82745867577789245,
                                  -0.37361367049317451, 0,
                                  2.1851235902726494,   -0.82745867577789245,
                                  -1.0520506481569711,  2.103430300990214,
                                  0.26891121104625004,  1.807365799268247};
/* b: X [3, 6, 2], axis 1, inverse 1, onesided 0, length 0 -> [3, 6, 2] */
static const double WANT_B[36] =
    {0.70243854365837155,   0.090830010184688573,  0.4203347060360641,    -0.024587629471368479,
     -0.025976006719216755, 0.27262200120740371,   0.0096616398887178212, 0.086693381959964927,
     0.076948221607042594,  0.56831046119756123,   -0.34193611966308285,  0.0020126194593898987,
     -0.14834744260461236,  -0.30429407831167588,  -0.14165444321480328,  -0.019926708023725832,
     -0.20639832454748522,  0.095216573007394126,  -0.02180439378021843,  0.64702131235054694,
     -0.21732107816138024,  0.13340736462840297,   -0.077114162070612613, 0.29723499610765058,
     -0.35034847490580301,  0.13565791467707022,   -0.082175958138560601, -0.11012114543658121,
     0.16775598527468855,   0.66332832981028889,   0.091219561048952527,  0.11886369288219792,
     -0.26875842980174314,  -0.026494228870130827, 0.45220025284053805,   -0.20064792207320051};
/* c: X [2, 5, 3, 1], axis 1, inverse 0, onesided 1, length 8 -> [2, 5, 3, 2] */
static const double WANT_C[60] = {0.21317922346859586,   0,
                                  4.5782367132815676,    0,
                                  -0.32759693704475834,  0,
                                  0.58195764559994867,   -0.32523043865624218,
                                  0.072870316428976567,  -2.1871423419202847,
                                  -0.035829566219598097, 0.17785437891696487,
                                  -0.63651939185571405,  1.5162535731703111,
                                  0.97689620365456564,   0.10514828923759878,
                                  -0.31880961477894437,  1.1243300253064941,
                                  2.7262640127740685,    1.0054706259127546,
                                  0.22157245312911766,   -0.45185414063695029,
                                  1.554213204152131,     1.0066094914776398,
                                  1.1751841219579695,    0,
                                  0.84613209659423294,   0,
                                  1.3474879326082196,    0,
                                  -1.5499883295251631,   0,
                                  -1.1388854017273076,   0,
                                  0.97644745389685295,   0,
                                  -0.74967942235020779,  0.20299796821526533,
                                  -0.29550186799750733,  0.012893208706725223,
                                  -0.83168038879045025,  0.36357319158504087,
                                  -1.2772038516590718,   0.34138678256591587,
                                  -1.2868255786207983,   1.580586382099995,
                                  2.0608264199980342,    0.077059617107403222,
                                  -0.26688560443057463,  0.25181440027894519,
                                  1.9397848300705287,    0.58024648572092197,
                                  -0.72270163316588287,  -1.5832415211499724,
                                  -0.90678650966562069,  0,
                                  -0.30005920148589571,  0,
                                  -0.74842403937081092,  0};
/* d: X [1, 7, 2], axis 1, inverse 0, onesided 0, length 4 -> [1, 4, 2] */
static const double WANT_D[8] = {2.814653406879259,  -0.11603929609468311, -1.905253136594304,
                                 2.2147877266548002, 0.62919258184260252,  0.14592852503698006,
                                 1.8272910871040287, 1.738846422553463};
/* e: X [6, 2, 2], axis 0, inverse 0, onesided 1, length 0 -> [4, 2, 2] */
static const double WANT_E[16] = {1.6258450414867758,  1.5607518785505738,   1.6987015648357795,
                                  -2.8415362873124974, 1.572034322125742,    -1.5270684030354162,
                                  3.4912573585373003,  -1.213843868378051,   -1.9542738390011927,
                                  2.0012585693455152,  -0.10180938772383308, -0.58788478411170186,
                                  0.70484458161250307, 1.776488987102691,    0.46427110071745936,
                                  -0.86893162684319625};

static vq_tensor *input(vq_dtype dt, int ndim, const int64_t *shape)
{
    vq_tensor *t;
    cr_assert_eq(vq_tensor_new(&t, dt, ndim, shape), 0, "%s", vq_errmsg());
    for (int64_t i = 0; i < vq_tensor_numel(t); i++)
        oc_set(t, i, sin(0.37 * (double)i * (double)i + 0.11 * (double)i + 1));
    return t;
}

static const struct dft_case {
    int ndim;
    int64_t x[4];
    int axis, inverse, onesided;
    int64_t length;
    int64_t out[4];
    const double *want;
} cases[] = {
    {3, {2, 8, 1}, 1, 0, 0, 0, {2, 8, 2}, WANT_A},
    {3, {3, 6, 2}, 1, 1, 0, 0, {3, 6, 2}, WANT_B},
    {4, {2, 5, 3, 1}, 1, 0, 1, 8, {2, 5, 3, 2}, WANT_C},
    {3, {1, 7, 2}, 1, 0, 0, 4, {1, 4, 2}, WANT_D},
    {3, {6, 2, 2}, 0, 0, 1, 0, {4, 2, 2}, WANT_E},
};

Test(ops_dft, transforms_match_numpy_fft_in_f64_and_f32)
{
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (int d = 0; d < 2; d++) {
            const struct dft_case *k = &cases[c];
            vq_dtype dt = d ? VQ_F32 : VQ_F64;
            vq_tensor *x = input(dt, k->ndim, k->x);
            vq_attr at[4] = {VQ_ATTR_I("axis", k->axis), VQ_ATTR_B("inverse", k->inverse),
                             VQ_ATTR_B("onesided", k->onesided), VQ_ATTR_I("length", k->length)};
            vq_tensor *out = oc_run1("dft", &x, 1, at, 4);
            cr_assert_eq(vq_tensor_dtype(out), dt);
            /* f32: the input rounded to float, then the sums in double */
            oc_assert_close(out, k->ndim, k->out, k->want, 0, d ? 1e-5 : 1e-12);
            vq_tensor_release(out);
            vq_tensor_release(x);
        }
}

Test(ops_dft, a_negative_axis_counts_from_the_end_and_the_default_is_1)
{
    vq_tensor *x = input(VQ_F64, 3, (int64_t[]){2, 8, 1});
    vq_attr neg = VQ_ATTR_I("axis", -2);
    vq_tensor *a = oc_run1("dft", &x, 1, NULL, 0), *b = oc_run1("dft", &x, 1, &neg, 1);
    oc_assert_close(a, 3, (int64_t[]){2, 8, 2}, WANT_A, 0, 1e-12);
    oc_assert_close(b, 3, (int64_t[]){2, 8, 2}, WANT_A, 0, 1e-12);
    vq_tensor_release(a);
    vq_tensor_release(b);
    vq_tensor_release(x);
}

Test(ops_dft, bad_inputs_name_the_slot_or_attribute)
{
    vq_tensor *three = input(VQ_F32, 2, (int64_t[]){4, 3}),
              *ok = input(VQ_F32, 2, (int64_t[]){4, 1});
    vq_tensor *ints;
    cr_assert_eq(vq_tensor_new(&ints, VQ_I32, 2, (int64_t[]){4, 1}), 0);
    vq_attr ax0 = VQ_ATTR_I("axis", 0), last = VQ_ATTR_I("axis", 1);
    cr_assert_eq(oc_try("dft", &three, 1, 1, &ax0, 1), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "dft: input X (slot 0): has a last dim of 3"), "%s", vq_errmsg());
    cr_assert_eq(oc_try("dft", &ok, 1, 1, &last, 1), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "attribute axis"), "%s", vq_errmsg());
    cr_assert_eq(oc_try("dft", &ints, 1, 1, &ax0, 1), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "input X (slot 0)"), "%s", vq_errmsg());
    vq_attr both[3] = {ax0, VQ_ATTR_B("inverse", true), VQ_ATTR_B("onesided", true)};
    cr_assert_eq(oc_try("dft", &ok, 1, 1, both, 3), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "attribute onesided"), "%s", vq_errmsg());
    vq_attr neg[2] = {ax0, VQ_ATTR_I("length", -1)};
    cr_assert_eq(oc_try("dft", &ok, 1, 1, neg, 2), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "attribute length"), "%s", vq_errmsg());
    vq_tensor_release(three);
    vq_tensor_release(ok);
    vq_tensor_release(ints);
}
