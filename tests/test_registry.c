/* The op registry's listing: every op by name, in order, with its
 * signature. */
#include <varq/varq.h>

#include <criterion/criterion.h>
#include <string.h>
#include "leakcheck.h"

TestSuite(registry, .fini = leak_check);

Test(registry, lists_every_op_in_order_with_a_signature)
{
    int n = vq_op_count();
    cr_assert_geq(n, 6);
    for (int i = 0; i < n; i++) {
        cr_assert_not_null(vq_op_name(i));
        if (i)
            cr_assert_lt(strcmp(vq_op_name(i - 1), vq_op_name(i)), 0);
        cr_assert_not_null(vq_op_signature(vq_op_name(i)));
    }
    cr_assert_null(vq_op_name(n));
    cr_assert_str_eq(vq_op_signature("scale"), "scale(X) -> Out; scale:float=1 bias:float=0");
    cr_assert_null(vq_op_signature("nope"));
}

static int traits_infer(const vq_op_infer_call *c)
{
    c->out[0] = c->in[0];
    return 0;
}

static void traits_async(const vq_op_kernel_call *k, vq_op_done *done)
{
    (void)k;
    vq_op_done_finish(done, 0);
}

Test(registry, traits_say_kernels_gradient_and_kind)
{
    int mm = vq_op_traits("matmul");
    cr_assert_eq(mm & (VQ_OP_HAS_CPU | VQ_OP_HAS_GRAD), VQ_OP_HAS_CPU | VQ_OP_HAS_GRAD);
    cr_assert_eq(mm & (VQ_OP_HAS_ASYNC | VQ_OP_IS_CONTROL | VQ_OP_IS_REGISTERED), 0);
    /* argmax has no gradient: autodiff takes its outputs as constants */
    cr_assert_eq(vq_op_traits("argmax") & VQ_OP_HAS_GRAD, 0);
    /* cond has no kernel; autodiff differentiates through it */
    int cond = vq_op_traits("cond");
    cr_assert_eq(cond & (VQ_OP_HAS_CPU | VQ_OP_HAS_GPU), 0);
    cr_assert_eq(cond & (VQ_OP_IS_CONTROL | VQ_OP_HAS_GRAD), VQ_OP_IS_CONTROL | VQ_OP_HAS_GRAD);

    cr_assert_eq(vq_op_traits("nope"), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "nope"), "%s", vq_errmsg());
    cr_assert_eq(vq_op_traits(NULL), VQ_EINVAL);

    static const char *const X[] = {"X"}, *const Out[] = {"Out"};
    vq_op_def def = {.name = "t_traits_async", .infer = traits_infer, .cpu_async = traits_async};
    def.inputs = X, def.ninputs = 1, def.outputs = Out, def.noutputs = 1;
    cr_assert_eq(vq_op_register(&def), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_op_traits("t_traits_async"),
                 VQ_OP_HAS_CPU | VQ_OP_HAS_ASYNC | VQ_OP_IS_REGISTERED);
}
