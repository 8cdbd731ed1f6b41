/* ONNX's linear algebra beyond MatMul and Gemm (t_nn.c) as varq ops:
 * Einsum as einsum (its equation read from the node as it is: longer than
 * the declared strings' bound) and Det as det. */
#include "onnx_internal.h"

#include <string.h>

/* Einsum(Inputs...; equation): einsum over every input. */
static int t_einsum(struct ox *x)
{
    const Onnx__AttributeProto *a = ox_attr(x, "equation");
    if (!a)
        return ox_fail(x, VQ_EINVAL, "attribute equation is missing");
    if (a->has_type && a->type != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING)
        return ox_fail(x, VQ_EINVAL, "attribute equation is not a string");
    char eq[256];
    if (a->s.len >= sizeof eq)
        return ox_fail(x, VQ_ENOSYS, "attribute equation has %zu characters, more than %zu",
                       a->s.len, sizeof eq - 1);
    if (a->s.len)
        memcpy(eq, a->s.data, a->s.len);
    eq[a->s.len] = 0;
    struct ox_val *in[VQ__MAX_SLOTS];
    int nin = (int)x->node->n_input;
    if (nin > VQ__MAX_SLOTS - 1)
        return ox_fail(x, VQ_ENOSYS, "%d inputs", nin);
    for (int i = 0; i < nin; i++)
        if (!(in[i] = ox_input(x, i)))
            return ox_fail(x, VQ_EINVAL, "input %d is absent", i);
    vq_attr at = VQ_ATTR_S("equation", eq);
    const char *o = ox_out0(x);
    return ox_emit(x, "einsum", in, nin, &o, 1, &at, 1, NULL);
}

/* Det(X): det. */
static int t_det(struct ox *x)
{
    struct ox_val *v = ox_input(x, 0);
    const char *o = ox_out0(x);
    return ox_emit(x, "det", &v, 1, &o, 1, NULL, 0, NULL);
}

const struct ox_op ox_op_Det = OX_ROW(t_det, NULL, 1, 1, true, NULL);
const struct ox_op ox_op_Einsum = OX_ROW(t_einsum, NULL, 1, OX_ANY, true, NULL);
