/* The translate table: every op of OX_OPS (onnx_ops.h) with its row, found
 * by binary search for each node (and by the census, census.c, for every
 * node before the translation starts); before a row's translation runs, what
 * the row declares (inputs, output 0, attributes) is checked and read
 * (ox_args_read), so a translation starts from valid, typed values. The
 * rows and translations live in the families' files (t_*.c). */
#include "onnx_internal.h"

#include <string.h>

/* ---- the table ---- */

static const struct {
    const char *name;
    const struct ox_op *op;
} table[] = {
#define OX_TABLE_ROW(name) {#name, &ox_op_##name},
    OX_OPS(OX_TABLE_ROW)
#undef OX_TABLE_ROW
};

#define NTABLE ((int)(sizeof table / sizeof table[0]))

VQ_API const char *vq_onnx_op_name(int i)
{
    return i >= 0 && i < NTABLE ? table[i].name : NULL;
}

VQ_API const char *vq_onnx_op_domain(int i)
{
    return i >= 0 && i < NTABLE ? table[i].op->domain ? table[i].op->domain : "" : NULL;
}

const struct ox_op *vq__onnx_op_find(const char *domain, const char *type)
{
    int lo = 0, hi = NTABLE - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2, c = strcmp(type, table[mid].name);
        if (c < 0)
            hi = mid - 1;
        else if (c > 0)
            lo = mid + 1;
        else if (!table[mid].op->domain)
            return vq__onnx_default_domain(domain) ? table[mid].op : NULL;
        else
            return domain && !strcmp(domain, table[mid].op->domain) ? table[mid].op : NULL;
    }
    return NULL;
}

int vq__onnx_translate(struct ox *x)
{
    const char *op = x->node->op_type;
    const struct ox_op *row = vq__onnx_op_find(x->node->domain, op);
    if (!row) {
        /* the census taken before translating names every such op */
        if (x->unsupported)
            return vq__onnx_ops_fail(x->unsupported, x->opset);
        return ox_fail(x, VQ_ENOSYS, "op %s (domain ai.onnx, opset %lld) is not supported", op,
                       (long long)x->opset);
    }
    /* the node's declared attributes live here while it is translated; an
     * If or Loop translates its subgraphs' nodes in between, each with its
     * own */
    const struct ox_args *outer = x->args;
    struct ox_args args;
    int rc = ox_args_read(x, row, &args);
    for (int i = 0; rc == 0 && !row->containers && (size_t)i < x->node->n_input; i++)
        rc = ox_tensor_in(x, i, ox_input(x, i));
    if (rc == 0)
        rc = row->fn(x);
    x->args = outer;
    return rc;
}
