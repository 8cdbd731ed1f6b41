/* Tensors: creation, shapes and zeroed storage, scalars and empty tensors,
 * argument errors, dtype names. The CPU allocator under them is
 * test_alloc.c's; ops called on tensors, test_imperative.c's. */
#include <varq/varq.h>

#include <criterion/criterion.h>
#include <string.h>
#include "leakcheck.h"

TestSuite(tensor, .fini = leak_check);

Test(tensor, new_tensor_is_zeroed_and_reports_its_shape)
{
    int64_t shape[3] = {2, 3, 4};
    vq_tensor *t;
    cr_assert_eq(vq_tensor_new(&t, VQ_F64, 3, shape), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_tensor_dtype(t), VQ_F64);
    cr_assert_eq(vq_tensor_ndim(t), 3);
    cr_assert_eq(vq_tensor_shape(t)[2], 4);
    cr_assert_eq(vq_tensor_numel(t), 24);
    cr_assert_eq(vq_tensor_nbytes(t), 24 * 8);
    cr_assert_eq((uintptr_t)vq_tensor_data(t) % 64, 0, "not 64-byte aligned");
    for (int i = 0; i < 24; i++)
        cr_assert_eq(((double *)vq_tensor_data(t))[i], 0.0);
    vq_tensor_release(t);
}

Test(tensor, scalars_and_empty_tensors_are_valid)
{
    vq_tensor *s, *e;
    int64_t zero[2] = {3, 0};
    cr_assert_eq(vq_tensor_new(&s, VQ_I32, 0, NULL), 0);
    cr_assert_eq(vq_tensor_numel(s), 1);
    cr_assert_eq(vq_tensor_new(&e, VQ_F32, 2, zero), 0);
    cr_assert_eq(vq_tensor_numel(e), 0);
    cr_assert_not_null(vq_tensor_data(e));
    vq_tensor_release(s);
    vq_tensor_release(e);
}

Test(tensor, bad_arguments_are_errors)
{
    vq_tensor *t;
    int64_t neg[1] = {-1}, big[2] = {INT64_C(1) << 40, INT64_C(1) << 40};
    int64_t nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    cr_assert_eq(vq_tensor_new(&t, VQ_F32, 1, neg), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "dim 0 is -1"), "%s", vq_errmsg());
    cr_assert_eq(vq_tensor_new(&t, VQ_F32, 9, nine), VQ_EINVAL);
    cr_assert_eq(vq_tensor_new(&t, (vq_dtype)7, 1, nine), VQ_EINVAL);
    cr_assert_eq(vq_tensor_new(&t, VQ_F32, 2, big), VQ_ENOMEM);
    cr_assert_eq(vq_tensor_new(NULL, VQ_F32, 1, nine), VQ_EINVAL);
    unsigned char b[2] = {1, 2};
    int64_t two[1] = {2};
    cr_assert_eq(vq_tensor_from(&t, VQ_BOOL, 1, two, b), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "not 0 or 1"), "%s", vq_errmsg());
}

Test(tensor, dtype_names_round_trip)
{
    for (int i = 0; i < VQ_DTYPE_COUNT; i++) {
        vq_dtype d;
        cr_assert_eq(vq_dtype_parse(vq_dtype_name((vq_dtype)i), &d), 0);
        cr_assert_eq(d, (vq_dtype)i);
    }
    vq_dtype d;
    cr_assert_eq(vq_dtype_parse("float64", &d), 0);
    cr_assert_eq(d, VQ_F64);
    cr_assert_eq(vq_dtype_parse("float16", &d), VQ_EINVAL);
    cr_assert_eq(vq_dtype_size(VQ_BOOL), 1);
}
