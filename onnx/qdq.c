/* QDQ fusion at import: a Conv or MatMul between DequantizeLinear nodes
 * and a QuantizeLinear, as ONNX Runtime's quantizer writes a quantized
 * model ("QDQ format"),
 *
 *   x_q -> DequantizeLinear -> Conv / MatMul -> QuantizeLinear -> y_q
 *   w_q -> DequantizeLinear -^  (Conv: bias b_i32 -> DequantizeLinear -^)
 *
 * becomes one QLinearConv / QLinearMatMul of x_q, w_q (and b_i32) writing
 * y_q: the integer kernel (ops/cpu/qproduct.c) instead of dequantizing, an
 * f32 product and quantizing again. The product's sums are then exact and
 * rounded once (ONNX Runtime fuses the same way; the unfused ops round
 * each f32 sum, so a y_q may differ by one step where the f32 result lies
 * within rounding of a half step).
 *
 * How the import goes through it (import.c's ox_nodes and translate_at):
 * qdq_mark first marks, from the graph's structure alone, each
 * DequantizeLinear whose only reader is a Conv or MatMul whose only reader
 * is a QuantizeLinear: such a node is held (not translated where it
 * stands). At the product, whose inputs are all translated by then, the
 * values decide (zero points given, per-tensor scales for x and y,
 * weights per tensor or per output channel, f32 scales, a bias of i32):
 * fused, the product waits for its QuantizeLinear, which translates the
 * fused node, and the held nodes are never translated; not fused, the held
 * nodes are translated there, before the product, as they would have
 * been. */
#include "onnx_internal.h"

#include <string.h>

#define HELD SIZE_MAX /* a DequantizeLinear waiting for its product */

static bool is_op(const Onnx__NodeProto *n, const char *type)
{
    return n->op_type && !strcmp(n->op_type, type) && (!n->domain || !*n->domain);
}

static bool has_input(const Onnx__NodeProto *n, size_t k)
{
    return k < n->n_input && n->input[k] && *n->input[k];
}

/* The node before c that writes name (its output 0), or SIZE_MAX. */
static size_t producer(const Onnx__GraphProto *g, size_t c, const char *name)
{
    for (size_t p = 0; p < c; p++)
        if (g->node[p]->n_output >= 1 && g->node[p]->output[0] &&
            !strcmp(g->node[p]->output[0], name))
            return p;
    return SIZE_MAX;
}

/* The QuantizeLinear that is the only reader of product c's output, or
 * SIZE_MAX. */
static size_t quantizer(const Onnx__GraphProto *g, size_t c)
{
    const Onnx__NodeProto *n = g->node[c];
    if (!(is_op(n, "Conv") || is_op(n, "MatMul")) || n->n_output != 1 || !n->output[0] ||
        !*n->output[0] || ox_reads_of(g, n->output[0]) != 1)
        return SIZE_MAX;
    for (size_t q = c + 1; q < g->n_node; q++) {
        const Onnx__NodeProto *r = g->node[q];
        for (size_t k = 0; k < r->n_input; k++)
            if (r->input[k] && !strcmp(r->input[k], n->output[0]))
                return k == 0 && is_op(r, "QuantizeLinear") && r->n_output == 1 && has_input(r, 2)
                           ? q
                           : SIZE_MAX;
    }
    return SIZE_MAX;
}

/* Product c's input k's DequantizeLinear when only c reads it, or SIZE_MAX. */
static size_t held_input(const Onnx__GraphProto *g, size_t c, size_t k)
{
    const Onnx__NodeProto *n = g->node[c];
    if (!has_input(n, k))
        return SIZE_MAX;
    size_t p = producer(g, c, n->input[k]);
    if (p == SIZE_MAX || !is_op(g->node[p], "DequantizeLinear") || g->node[p]->n_output != 1 ||
        ox_reads_of(g, n->input[k]) != 1)
        return SIZE_MAX;
    return p;
}

void ox_qdq_mark(const Onnx__GraphProto *g, size_t *state)
{
    for (size_t c = 0; c < g->n_node; c++) {
        if (quantizer(g, c) == SIZE_MAX)
            continue;
        for (size_t k = 0; k < 3; k++) {
            size_t p = held_input(g, c, k);
            if (p != SIZE_MAX)
                state[p] = HELD;
        }
    }
}

/* The value named by node n's input k, when it is known to have one
 * element of a dtype in mask. */
static bool one_of(struct ox *x, const Onnx__NodeProto *n, size_t k, unsigned mask)
{
    struct ox_val *v = has_input(n, k) ? ox_find(x, n->input[k]) : NULL;
    if (!v || v->seq || v->none || !(mask & 1u << v->meta.dtype))
        return false;
    for (int d = 0; d < v->meta.ndim; d++)
        if (v->meta.shape[d] != 1)
            return false;
    return true;
}

static struct ox_val *val_of(struct ox *x, const Onnx__NodeProto *n, size_t k)
{
    struct ox_val *v = has_input(n, k) ? ox_find(x, n->input[k]) : NULL;
    return v && !v->seq && !v->none ? v : NULL;
}

#define BYTES ((1u << VQ_U8) | (1u << VQ_I8))
#define F32 (1u << VQ_F32)

/* Whether product c, its inputs' DequantizeLinear nodes dx, dw (db: the
 * bias's, or SIZE_MAX) and its QuantizeLinear q fuse: checked on the
 * values, all translated by now. */
static bool fusable(struct ox *x, const Onnx__GraphProto *g, size_t c, size_t dx, size_t dw,
                    size_t db, size_t q)
{
    const Onnx__NodeProto *nx = g->node[dx], *nw = g->node[dw], *nq = g->node[q];
    bool conv = is_op(g->node[c], "Conv");
    if (!has_input(nx, 2) || !has_input(nw, 2) || !one_of(x, nx, 1, F32) ||
        !one_of(x, nx, 2, BYTES) || !one_of(x, nq, 1, F32) || !one_of(x, nq, 2, BYTES))
        return false;
    struct ox_val *xv = val_of(x, nx, 0), *wv = val_of(x, nw, 0), *ws = val_of(x, nw, 1),
                  *wz = val_of(x, nw, 2);
    if (!xv || !wv || !ws || !wz || !(BYTES & 1u << xv->meta.dtype) ||
        !(BYTES & 1u << wv->meta.dtype) || ws->meta.dtype != VQ_F32 || wv->meta.ndim < 1)
        return false;
    if (conv && xv->meta.ndim != 3 && xv->meta.ndim != 4)
        return false;
    if (!conv && wv->meta.ndim != 2)
        return false;
    if (!one_of(x, nw, 1, F32)) {
        /* per channel: the output channels' axis (Conv: 0, MatMul: B's last) */
        const Onnx__NodeProto *outer = x->node;
        x->node = nw;
        const Onnx__AttributeProto *a = x->opset >= 13 ? ox_attr(x, "axis") : NULL;
        x->node = outer;
        int64_t axis = a ? a->i : 1, rank = wv->meta.ndim;
        if (axis < 0)
            axis += rank;
        if (axis != (conv ? 0 : rank - 1) || ws->meta.ndim != 1 || wz->meta.ndim != 1)
            return false;
    }
    if (db == SIZE_MAX)
        return !conv || !has_input(g->node[c], 2);
    /* the bias: i32, with no zero point or a zero one */
    const Onnx__NodeProto *nb = g->node[db];
    struct ox_val *bv = val_of(x, nb, 0), *bz = val_of(x, nb, 2);
    if (!bv || bv->meta.dtype != VQ_I32 || bv->meta.ndim != 1)
        return false;
    if (!has_input(nb, 2))
        return true;
    if (!bz || !ox_known(x, bz))
        return false;
    for (int64_t i = 0; i < bz->konst->numel; i++)
        if (((const int32_t *)bz->konst->data)[i] != 0)
            return false;
    return true;
}

/* Translates the held DequantizeLinear p where it is needed after all. */
static int translate_held(struct ox *x, const Onnx__GraphProto *g, size_t p, size_t *state)
{
    const Onnx__NodeProto *outer = x->node;
    int outer_index = x->node_index;
    x->node = g->node[p];
    x->node_index = (int)p;
    state[p] = 0;
    int rc = vq__onnx_translate(x);
    x->node = outer;
    x->node_index = outer_index;
    return rc;
}

/* The fused node of product c into q's output, translated at q. */
static int translate_fused(struct ox *x, const Onnx__GraphProto *g, size_t c, size_t q)
{
    const Onnx__NodeProto *prod = g->node[c], *nq = g->node[q];
    bool conv = is_op(prod, "Conv");
    const Onnx__NodeProto *nx = g->node[producer(g, c, prod->input[0])];
    const Onnx__NodeProto *nw = g->node[producer(g, c, prod->input[1])];
    char *in[9] = {nx->input[0], nx->input[1], nx->input[2], nw->input[0], nw->input[1],
                   nw->input[2], nq->input[1], nq->input[2], NULL};
    size_t nin = 8;
    if (conv && has_input(prod, 2))
        in[nin++] = g->node[producer(g, c, prod->input[2])]->input[0];
    Onnx__NodeProto fused = *prod; /* its attributes: the window's */
    fused.op_type = conv ? "QLinearConv" : "QLinearMatMul";
    fused.input = in;
    fused.n_input = nin;
    fused.output = nq->output;
    fused.n_output = nq->n_output;
    const Onnx__NodeProto *outer = x->node;
    int outer_index = x->node_index;
    x->node = &fused;
    x->node_index = (int)c;
    int rc = vq__onnx_translate(x);
    x->node = outer;
    x->node_index = outer_index;
    return rc;
}

bool ox_qdq_at(struct ox *x, const Onnx__GraphProto *g, size_t i, size_t *state, int *rc)
{
    *rc = 0;
    if (state[i] == HELD)
        return true;
    if (state[i]) /* a QuantizeLinear that a product waits for */
        return (*rc = translate_fused(x, g, state[i] - 1, i)), true;
    size_t q = quantizer(g, i);
    if (q == SIZE_MAX)
        return false;
    size_t held[3];
    for (size_t k = 0; k < 3; k++) {
        held[k] = held_input(g, i, k);
        if (held[k] != SIZE_MAX && state[held[k]] != HELD)
            held[k] = SIZE_MAX;
    }
    if (held[0] != SIZE_MAX && held[1] != SIZE_MAX &&
        (held[2] != SIZE_MAX || !has_input(g->node[i], 2)) &&
        fusable(x, g, i, held[0], held[1], held[2], q)) {
        state[q] = i + 1;
        return true;
    }
    for (size_t k = 0; k < 3 && *rc == 0; k++)
        if (held[k] != SIZE_MAX)
            *rc = translate_held(x, g, held[k], state);
    return *rc != 0;
}
