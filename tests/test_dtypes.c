/* The dtypes added after the first five (tensor.h: f16, bf16, i8, u8, i16,
 * u16, u32, u64): sizes and names, wrapping, the refusal of ops that do
 * not take them (VQ__EXT_DTYPES), and the exact 16-bit float conversions
 * against an independent reference (numpy's float16 through
 * /usr/bin/python3, and bf16 by integer rounding of the f32 pattern). */
#include "opcheck.h"

#include "tensor_services.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- tensors ---- */

Test(dtypes, wrap_takes_every_new_dtype_at_its_element_size)
{
    static const vq_dtype dts[] = {VQ_F16, VQ_BF16, VQ_I8, VQ_U8, VQ_I16, VQ_U16, VQ_U32, VQ_U64};
    _Alignas(8) unsigned char raw[64] = {0};
    for (size_t i = 0; i < sizeof dts / sizeof dts[0]; i++) {
        vq_tensor *t;
        int64_t n = 4;
        cr_assert_eq(vq_tensor_wrap(&t, dts[i], 1, &n, raw, NULL, NULL), 0, "%s", vq_errmsg());
        cr_assert_eq(vq_tensor_nbytes(t), 4 * vq_dtype_size(dts[i]));
        cr_assert_eq(vq_tensor_data(t), raw);
        vq_tensor_release(t);
        if (vq_dtype_size(dts[i]) > 1) /* misaligned for the element size */
            cr_assert_eq(vq_tensor_wrap(&t, dts[i], 1, &n, raw + 1, NULL, NULL), VQ_EINVAL);
    }
}

/* An op that does not take a new dtype refuses it by name, before its
 * kernel could misread the bytes. */
Test(dtypes, ops_without_the_dtype_refuse_it_naming_op_slot_and_dtype)
{
    vq_tensor *x;
    cr_assert_eq(vq_tensor_new(&x, VQ_F16, 1, (int64_t[]){3}), 0);
    cr_assert_eq(oc_try("softmax", &x, 1, 1, NULL, 0), VQ_ENOSYS);
    cr_assert(strstr(vq_errmsg(), "softmax") && strstr(vq_errmsg(), "dtype f16") &&
                  strstr(vq_errmsg(), "input X"),
              "%s", vq_errmsg());
    vq_tensor_release(x);
    /* an output of a refused dtype, from an attribute */
    vq_attr at[] = {VQ_ATTR_IS("shape", ((int64_t[]){2, 2}), 2), VQ_ATTR_S("dtype", "u8"),
                    VQ_ATTR_F("value", 1)};
    cr_assert_eq(oc_try("fill_constant", NULL, 0, 1, at, 3), VQ_ENOSYS, "%s", vq_errmsg());
    cr_assert(strstr(vq_errmsg(), "fill_constant") && strstr(vq_errmsg(), "dtype u8"), "%s",
              vq_errmsg());
}
