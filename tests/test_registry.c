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
