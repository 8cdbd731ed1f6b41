/* ONNX's sequences and optionals, resolved at import.
 *
 * varq's program holds tensors only, and its preparation gives each op
 * static shapes; a sequence's elements may each have another shape (ONNX
 * allows it, and SequenceMap's extract_shapes case does it), so no one
 * stacked tensor holds a sequence in general. The importer therefore keeps
 * a sequence as what it is at import: a list of values (struct ox_val's
 * elems), each a tensor of the program or a known value. SequenceConstruct,
 * SequenceInsert and SequenceErase make new lists, SequenceAt and
 * SequenceLength read them, SplitToSequence slices a tensor into one,
 * ConcatFromSequence concatenates one, and SequenceMap translates its body
 * once per element (a pass of its own, struct ox_frame). This needs every
 * length and position known at import, which covers what exporters write:
 * sequences of a fixed count (SequenceConstruct, a split), SequenceMap, and
 * Loops over a count known at import, which t_control.c unrolls when they
 * carry a sequence. A position or a trip count known only at run time,
 * which would need a run-time list, fails naming the node. Graph inputs
 * and outputs that are sequences become one feed or fetch per element,
 * NAME[i] (import.c; the length from the value offered at import).
 *
 * An optional is its value when it holds one, and a value marked none
 * when it does not (Optional without input, an optional graph input
 * offered empty): OptionalHasElement is then known at import, and an If
 * on it takes its branch then. */
#include "onnx_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A new sequence name of dtype dt holding elems[0..n) (copied). */
static int seq_make(struct ox *x, const char *name, vq_dtype dt, struct ox_val *const *elems, int n,
                    struct ox_val **out)
{
    struct ox_val *v;
    int rc = ox_val_new(x, name, &v);
    if (rc < 0)
        return rc;
    v->seq = true;
    v->meta = (vq__meta){.dtype = dt, .ndim = 0};
    v->seq_n = n;
    if (n > 0) {
        if (!(v->elems = vq__malloc((size_t)n * sizeof *v->elems)))
            return vq__fail(VQ_ENOMEM, "onnx: out of memory");
        memcpy(v->elems, elems, (size_t)n * sizeof *elems);
    }
    if (out)
        *out = v;
    return 0;
}

/* Input i, which must be a sequence. */
static int seq_in(struct ox *x, int i, struct ox_val **out)
{
    struct ox_val *v = *out = ox_input(x, i);
    if (!v || !v->seq)
        return ox_fail(x, VQ_EINVAL, "input %d is %s; the op takes a sequence", i,
                       !v        ? "absent"
                       : v->none ? "an optional that holds nothing"
                                 : "a tensor");
    return 0;
}

/* The position input i of a sequence of n elements, known at import, in
 * [-n, n] when insert (an insertion may append), else [-n, n); *pos gets
 * it counted from the front; def when the input is absent. */
static int seq_position(struct ox *x, int i, int n, bool insert, int def, int *pos)
{
    struct ox_val *p = ox_input(x, i);
    int64_t v;
    if (!p) {
        *pos = def;
        return 0;
    }
    if (!ox_known(x, p) || !ox_known_int1(p, &v))
        return ox_fail(x, VQ_ENOSYS,
                       "the position is %s; varq resolves sequences when the model is "
                       "imported, so it must be one integer known then (a constant, or an "
                       "input offered at import)",
                       ox_known(x, p) ? "not one integer" : "known only at run time");
    if (v < -n || v > (insert ? n : n - 1))
        return ox_fail(x, VQ_EINVAL, "position %lld is out of the sequence's range (%d elements)",
                       (long long)v, n);
    *pos = (int)(v < 0 ? v + n : v);
    return 0;
}

static int t_sequence_empty(struct ox *x)
{
    vq_dtype dt = VQ_F32;
    if (ox_given(x, "dtype") && !vq__onnx_dtype((int32_t)ox_int(x, "dtype"), &dt))
        return ox_fail(x, VQ_ENOSYS, "dtype %s; varq has float, double, int32, int64 and bool",
                       vq__onnx_type_name((int32_t)ox_int(x, "dtype")));
    return seq_make(x, ox_out0(x), dt, NULL, 0, NULL);
}

static int t_sequence_construct(struct ox *x)
{
    const Onnx__NodeProto *n = x->node;
    int count = (int)n->n_input, rc = 0;
    struct ox_val **e = vq__calloc((size_t)count + 1, sizeof *e);
    if (!e)
        return vq__fail(VQ_ENOMEM, "onnx: out of memory");
    for (int i = 0; i < count && rc == 0; i++) {
        e[i] = ox_input(x, i);
        if (!e[i])
            rc = ox_fail(x, VQ_EINVAL, "input %d is absent", i);
        else if ((rc = ox_tensor_in(x, i, e[i])) == 0 && e[i]->meta.dtype != e[0]->meta.dtype)
            rc = ox_fail(x, VQ_EINVAL, "input %d is %s, input 0 %s: a sequence has one dtype", i,
                         vq_dtype_name(e[i]->meta.dtype), vq_dtype_name(e[0]->meta.dtype));
    }
    if (rc == 0)
        rc = seq_make(x, ox_out0(x), e[0]->meta.dtype, e, count, NULL);
    free(e);
    return rc;
}

/* SequenceInsert(S, T, position = end) */
static int t_sequence_insert(struct ox *x)
{
    struct ox_val *s, *t = ox_input(x, 1);
    int rc = seq_in(x, 0, &s), pos;
    if (rc == 0)
        rc = ox_tensor_in(x, 1, t);
    if (rc == 0)
        rc = seq_position(x, 2, s->seq_n, true, s->seq_n, &pos);
    if (rc)
        return rc;
    /* an empty sequence takes the dtype of what is inserted only when it
     * has none of its own to check against */
    if (s->seq_n > 0 && t->meta.dtype != s->meta.dtype)
        return ox_fail(x, VQ_EINVAL, "inserting %s into a sequence of %s",
                       vq_dtype_name(t->meta.dtype), vq_dtype_name(s->meta.dtype));
    struct ox_val **e = vq__malloc((size_t)(s->seq_n + 1) * sizeof *e);
    if (!e)
        return vq__fail(VQ_ENOMEM, "onnx: out of memory");
    for (int i = 0, k = 0; i <= s->seq_n; i++)
        e[i] = i == pos ? t : s->elems[k++];
    rc = seq_make(x, ox_out0(x), t->meta.dtype, e, s->seq_n + 1, NULL);
    free(e);
    return rc;
}

/* SequenceErase(S, position = last) */
static int t_sequence_erase(struct ox *x)
{
    struct ox_val *s;
    int rc = seq_in(x, 0, &s), pos;
    if (rc == 0 && s->seq_n == 0)
        rc = ox_fail(x, VQ_EINVAL, "erasing from an empty sequence");
    if (rc == 0)
        rc = seq_position(x, 1, s->seq_n, false, s->seq_n - 1, &pos);
    if (rc)
        return rc;
    struct ox_val **e = vq__malloc((size_t)s->seq_n * sizeof *e);
    if (!e)
        return vq__fail(VQ_ENOMEM, "onnx: out of memory");
    for (int i = 0, k = 0; i < s->seq_n; i++)
        if (i != pos)
            e[k++] = s->elems[i];
    rc = seq_make(x, ox_out0(x), s->meta.dtype, e, s->seq_n - 1, NULL);
    free(e);
    return rc;
}

static int t_sequence_at(struct ox *x)
{
    struct ox_val *s;
    int rc = seq_in(x, 0, &s), pos;
    if (rc == 0 && s->seq_n == 0)
        rc = ox_fail(x, VQ_EINVAL, "SequenceAt of an empty sequence");
    if (rc == 0)
        rc = seq_position(x, 1, s->seq_n, false, 0, &pos);
    return rc ? rc : ox_alias(x, ox_out0(x), s->elems[pos]);
}

static int t_sequence_length(struct ox *x)
{
    struct ox_val *s;
    int rc = seq_in(x, 0, &s);
    if (rc)
        return rc;
    vq_tensor *t;
    int64_t n = s->seq_n;
    if ((rc = vq_tensor_from(&t, VQ_I64, 0, NULL, &n)) < 0)
        return ox_fail(x, rc, "%s", vq_errmsg());
    return ox_const(x, ox_out0(x), t, NULL);
}

/* v with a dim of 1 inserted at ax (unsqueeze) or dim ax dropped (it must
 * be 1), the other dims copied from v. */
static int reshape_axis(struct ox *x, struct ox_val *v, int ax, bool insert, struct ox_val **out)
{
    int64_t want[VQ_MAX_DIMS];
    int from[VQ_MAX_DIMS], n = v->meta.ndim + (insert ? 1 : -1);
    if (n > VQ_MAX_DIMS)
        return ox_fail(x, VQ_ENOSYS, "rank %d; varq has at most %d dims", n, VQ_MAX_DIMS);
    for (int i = 0; i < n; i++) {
        int src = insert ? (i < ax ? i : i - 1) : (i < ax ? i : i + 1);
        want[i] = insert && i == ax ? 1 : -1;
        from[i] = insert && i == ax ? -1 : src;
    }
    return ox_reshape_known(x, v, want, from, n, NULL, out);
}

/* SplitToSequence(input, split): equal parts of split's size (a scalar;
 * the last part may be smaller), parts of split's sizes (1-D), or, without
 * split, parts of 1 with the axis kept only when keepdims. */
static int t_split_to_sequence(struct ox *x)
{
    struct ox_val *v = ox_input(x, 0), *sp = ox_input(x, 1);
    int ax, rc = ox_axis(x, "axis", ox_int(x, "axis"), v->meta.ndim, &ax);
    if (rc)
        return rc;
    int64_t dim = v->meta.shape[ax];
    if (dim < 0)
        return ox_fail(x, VQ_ENOSYS,
                       "dim %d is known only at run time; varq resolves sequences when the "
                       "model is imported, so their lengths must be known then",
                       ax);
    int64_t *sizes = NULL;
    int64_t n = 0;
    bool squeeze = !sp && ox_int(x, "keepdims") == 0;
    if (sp && (!ox_known(x, sp) || (sp->konst->dtype != VQ_I64 && sp->konst->dtype != VQ_I32) ||
               sp->konst->ndim > 1))
        return ox_fail(x, VQ_ENOSYS, "split must be integers known when the model is imported");
    if (!sp || sp->konst->ndim == 0) {
        int64_t c = 1;
        if (sp && (!ox_known_int1(sp, &c) || c <= 0))
            return ox_fail(x, VQ_EINVAL, "split %lld: parts must have at least one element",
                           (long long)c);
        n = (dim + c - 1) / c;
        if (n > VQ_ONNX_MADE_MAX_ELEMS)
            return ox_fail(x, VQ_ENOSYS, "%lld parts", (long long)n);
        if (n > 0 && !(sizes = vq__malloc((size_t)n * sizeof *sizes)))
            return vq__fail(VQ_ENOMEM, "onnx: out of memory");
        for (int64_t i = 0; i < n; i++)
            sizes[i] = i < n - 1 ? c : dim - c * (n - 1);
    } else {
        n = sp->konst->numel;
        if (n > 0 && !(sizes = vq__malloc((size_t)n * sizeof *sizes)))
            return vq__fail(VQ_ENOMEM, "onnx: out of memory");
        int64_t sum = 0;
        for (int64_t i = 0; i < n; i++) {
            sizes[i] = sp->konst->dtype == VQ_I64 ? ((const int64_t *)sp->konst->data)[i]
                                                  : ((const int32_t *)sp->konst->data)[i];
            sum += sizes[i] < 0 ? dim + 1 : sizes[i];
        }
        if (sum != dim) {
            free(sizes);
            return ox_fail(x, VQ_EINVAL, "split sizes sum to %lld; dim %d is %lld", (long long)sum,
                           ax, (long long)dim);
        }
    }
    struct ox_val **e = vq__calloc((size_t)n + 1, sizeof *e);
    if (!e) {
        free(sizes);
        return vq__fail(VQ_ENOMEM, "onnx: out of memory");
    }
    int64_t start = 0;
    for (int64_t i = 0; i < n && rc == 0; i++) {
        int64_t axes = ax, end = start + sizes[i];
        vq_attr a[3] = {VQ_ATTR_IS("axes", &axes, 1), VQ_ATTR_IS("starts", &start, 1),
                        VQ_ATTR_IS("ends", &end, 1)};
        rc = ox_emit(x, "slice", &v, 1, NULL, 1, a, 3, &e[i]);
        if (rc == 0 && squeeze)
            rc = reshape_axis(x, e[i], ax, false, &e[i]);
        start = end;
    }
    if (rc == 0)
        rc = seq_make(x, ox_out0(x), v->meta.dtype, e, (int)n, NULL);
    free(e);
    free(sizes);
    return rc;
}

/* ConcatFromSequence(S): the elements joined along axis, or stacked along
 * a new axis when new_axis (each given a dim of 1 there first); concat
 * takes VQ__MAX_SLOTS inputs at most, so longer sequences are joined in
 * groups, and the groups then (concatenation is associative). */
static int t_concat_from_sequence(struct ox *x)
{
    struct ox_val *s;
    int rc = seq_in(x, 0, &s);
    if (rc == 0 && s->seq_n == 0)
        rc = ox_fail(x, VQ_EINVAL, "concatenating an empty sequence");
    if (rc)
        return rc;
    bool stack = ox_int(x, "new_axis") != 0;
    int rank = s->elems[0]->meta.ndim + (stack ? 1 : 0), ax;
    if ((rc = ox_axis(x, "axis", ox_int(x, "axis"), rank, &ax)) < 0)
        return rc;
    int n = s->seq_n;
    struct ox_val **e = vq__malloc((size_t)n * sizeof *e);
    if (!e)
        return vq__fail(VQ_ENOMEM, "onnx: out of memory");
    for (int i = 0; i < n && rc == 0; i++) {
        e[i] = s->elems[i];
        if (e[i]->meta.ndim + (stack ? 1 : 0) != rank)
            rc = ox_fail(x, VQ_EINVAL, "element %d has rank %d, element 0 rank %d", i,
                         e[i]->meta.ndim, s->elems[0]->meta.ndim);
        else if (stack)
            rc = reshape_axis(x, e[i], ax, true, &e[i]);
    }
    vq_attr a = VQ_ATTR_I("axis", ax);
    while (rc == 0 && n > 1) {
        int m = 0;
        for (int i = 0; i < n && rc == 0; i += VQ__MAX_SLOTS, m++) {
            int k = n - i < VQ__MAX_SLOTS ? n - i : VQ__MAX_SLOTS;
            rc = k == 1 ? (e[m] = e[i], 0) : ox_emit(x, "concat", e + i, k, NULL, 1, &a, 1, &e[m]);
        }
        n = m;
    }
    if (rc == 0)
        rc = ox_alias(x, ox_out0(x), e[0]);
    free(e);
    return rc;
}

/* SequenceMap(S, others...): its body once per element of the sequences
 * (which must have the same length), each pass in a frame of its own (the
 * body's names made anew), given element i of each sequence input and
 * each tensor input whole; output j is the sequence of the passes' body
 * output j. */
static int t_sequence_map(struct ox *x)
{
    const Onnx__NodeProto *n = x->node;
    const Onnx__GraphProto *g = ox_graph(x, "body");
    int nin = (int)n->n_input, nout = (int)n->n_output, rc = 0;
    if (!g || g->n_input != (size_t)nin || g->n_output != (size_t)nout)
        return ox_fail(x, VQ_EINVAL, "the body must be a graph of %d inputs and %d outputs", nin,
                       nout);
    struct ox_val *first;
    if ((rc = seq_in(x, 0, &first)) < 0)
        return rc;
    int len = first->seq_n;
    for (int i = 1; i < nin; i++) {
        struct ox_val *v = ox_input(x, i);
        if (!v || v->none)
            return ox_fail(x, VQ_EINVAL, "input %d is absent or holds nothing", i);
        if (v->seq && v->seq_n != len)
            return ox_fail(x, VQ_EINVAL, "input %d has %d elements, input 0 %d", i, v->seq_n, len);
    }
    struct ox_val **res = vq__calloc((size_t)nout * (size_t)len + 1, sizeof *res);
    if (!res)
        return vq__fail(VQ_ENOMEM, "onnx: out of memory");
    for (int k = 0; k < len && rc == 0; k++) {
        struct ox_frame f = {0};
        ox_frame_push(x, &f);
        for (int i = 0; i < nin && rc == 0; i++) {
            struct ox_val *v = ox_input(x, i);
            const char *nm = g->input[i]->name;
            rc = !nm || !*nm ? ox_fail(x, VQ_EINVAL, "body input %d has no name", i)
                             : ox_alias(x, nm, v->seq ? v->elems[k] : v);
        }
        const Onnx__NodeProto *node = x->node;
        int index = x->node_index;
        if (rc == 0)
            rc = ox_subgraph(x, g, x->block);
        x->node = node;
        x->node_index = index;
        for (int j = 0; j < nout && rc == 0; j++) {
            struct ox_val *o = ox_find(x, g->output[j]->name);
            if (!o)
                rc = ox_fail(x, VQ_EINVAL, "body output \"%s\" is produced by no node",
                             g->output[j]->name);
            else if (o->seq || o->none)
                rc = ox_fail(x, VQ_ENOSYS, "body output %d is not a tensor", j);
            else
                res[(size_t)j * (size_t)len + (size_t)k] = o;
        }
        ox_frame_pop(x);
    }
    for (int j = 0; j < nout && rc == 0; j++) {
        const char *nm = ox_out(x, j);
        /* an empty input sequence: outputs of the body's declared dtype */
        vq_dtype dt = len > 0 ? res[(size_t)j * (size_t)len]->meta.dtype : first->meta.dtype;
        const Onnx__TypeProto *tp = g->output[j]->type;
        if (len == 0 && tp && tp->value_case == ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE &&
            tp->tensor_type->has_elem_type)
            vq__onnx_dtype(tp->tensor_type->elem_type, &dt);
        if (nm)
            rc = seq_make(x, nm, dt, res + (size_t)j * (size_t)len, len, NULL);
    }
    free(res);
    return rc;
}

/* The element dtype and whether it is a sequence, of TypeProto tp (a
 * tensor, a sequence of tensors, or an optional of either). */
static int type_of(struct ox *x, const Onnx__TypeProto *tp, vq_dtype *dt, bool *seq)
{
    *seq = false;
    if (tp && tp->value_case == ONNX__TYPE_PROTO__VALUE_OPTIONAL_TYPE && tp->optional_type)
        tp = tp->optional_type->elem_type;
    if (tp && tp->value_case == ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE && tp->sequence_type) {
        *seq = true;
        tp = tp->sequence_type->elem_type;
    }
    if (!tp || tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !tp->tensor_type)
        return ox_fail(x, VQ_ENOSYS, "type: varq's optionals hold tensors or sequences of them");
    int32_t et = tp->tensor_type->has_elem_type ? tp->tensor_type->elem_type : 0;
    if (!vq__onnx_dtype(et, dt))
        return ox_fail(x, VQ_ENOSYS,
                       "element type %s; varq has float, double, int32, int64 and "
                       "bool",
                       vq__onnx_type_name(et));
    return 0;
}

/* Optional(input): the input itself; Optional() of attribute type: one
 * that holds nothing. */
static int t_optional(struct ox *x)
{
    struct ox_val *v = ox_input(x, 0);
    if (v)
        return ox_alias(x, ox_out0(x), v);
    const Onnx__AttributeProto *a = ox_attr(x, "type");
    if (!a || !a->tp)
        return ox_fail(x, VQ_EINVAL, "neither an input nor a type attribute");
    vq_dtype dt;
    bool seq;
    int rc = type_of(x, a->tp, &dt, &seq);
    struct ox_val *o;
    if (rc == 0 && (rc = ox_val_new(x, ox_out0(x), &o)) == 0) {
        o->none = true;
        o->seq = seq;
        o->meta = (vq__meta){.dtype = dt, .ndim = 0};
    }
    return rc;
}

/* OptionalHasElement(input): known at import (an absent input, since opset
 * 18, holds nothing). */
static int t_optional_has_element(struct ox *x)
{
    struct ox_val *v = ox_input(x, 0);
    unsigned char has = v && !v->none;
    vq_tensor *t;
    int rc = vq_tensor_from(&t, VQ_BOOL, 0, NULL, &has);
    if (rc < 0)
        return ox_fail(x, rc, "%s", vq_errmsg());
    return ox_const(x, ox_out0(x), t, NULL);
}

static int t_optional_get_element(struct ox *x)
{
    struct ox_val *v = ox_input(x, 0);
    if (v->none)
        return ox_fail(x, VQ_EINVAL, "input \"%s\" is an optional that holds nothing", v->name);
    return ox_alias(x, ox_out0(x), v);
}

/* ---- the rows ---- */

#define CONTAINER_ROW(f, lo, hi, a)                                                               \
    {                                                                                             \
        .fn = (f), .min_in = (lo), .max_in = (hi), .out0 = true, .attrs = (a), .containers = true \
    }

const struct ox_op ox_op_SequenceEmpty =
    CONTAINER_ROW(t_sequence_empty, 0, 0, OX_ATTRS(OX_INT("dtype", 1)));
const struct ox_op ox_op_SequenceConstruct = CONTAINER_ROW(t_sequence_construct, 1, OX_ANY, NULL);
const struct ox_op ox_op_SequenceInsert = CONTAINER_ROW(t_sequence_insert, 2, 3, NULL);
const struct ox_op ox_op_SequenceErase = CONTAINER_ROW(t_sequence_erase, 1, 2, NULL);
const struct ox_op ox_op_SequenceAt = CONTAINER_ROW(t_sequence_at, 2, 2, NULL);
const struct ox_op ox_op_SequenceLength = CONTAINER_ROW(t_sequence_length, 1, 1, NULL);
const struct ox_op ox_op_SplitToSequence =
    CONTAINER_ROW(t_split_to_sequence, 1, 2, OX_ATTRS(OX_INT("axis", 0), OX_INT("keepdims", 1)));
const struct ox_op ox_op_ConcatFromSequence =
    CONTAINER_ROW(t_concat_from_sequence, 1, 1, OX_ATTRS(OX_INT("axis", 0), OX_INT("new_axis", 0)));
const struct ox_op ox_op_SequenceMap =
    CONTAINER_ROW(t_sequence_map, 1, OX_ANY, OX_ATTRS(OX_GRAPH("body")));
const struct ox_op ox_op_Optional = {.fn = t_optional,
                                     .min_in = 0,
                                     .max_in = 1,
                                     .out0 = true,
                                     .containers = true};
const struct ox_op ox_op_OptionalHasElement = CONTAINER_ROW(t_optional_has_element, 0, 1, NULL);
const struct ox_op ox_op_OptionalGetElement = CONTAINER_ROW(t_optional_get_element, 1, 1, NULL);
