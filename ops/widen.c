/* The added dtypes (f16, bf16, i8, u8, i16, u16, u32; tensor.h) in ops
 * written for the first five, by widening: an input of an added dtype is
 * converted to its wide form (f16 and bf16 to f32, the narrow integers to
 * i64), the op's own kernel computes in that form, and each output of the
 * wide form is converted back to the input's dtype (cast's rules,
 * vq__cast_any).
 *
 * That is exact where the op's result in the wide form, converted back, is
 * the op's result in the narrow one: for the integers every op listed
 * wraps, compares, selects or moves (a sum of u8 in i64 keeps the low 8
 * bits, as u8 arithmetic does); for f16 and bf16 it is "compute in f32,
 * round once", what ONNX Runtime and PyTorch's CPU kernels do (f32's 24
 * bits make the one rounding of a single add, multiply or divide exact).
 * u64 has no wider integer: for the ops that only compare, select or
 * move elements (the "order" list) it is carried as i64 with its top bit
 * flipped, which maps u64's order onto i64's and back exactly; the binary
 * arithmetic ops (the "u64" list) take it in their own kernels; elsewhere
 * it is refused, as without widening. Ops whose kernels take floats only
 * (the "float" list: max_pool2d) compute the narrow integers as f64,
 * which holds every one of them exactly. Ops whose outputs are indices
 * or shapes (argmax, shape, top_k, nonzero) are not on the lists: their
 * i64 outputs would be mistaken for widened ones.
 *
 * Widening costs a conversion and a temporary per added-dtype operand;
 * calls with only the first five dtypes go straight to the op's own
 * inference and kernel. On the CUDA backend the op's CUDA kernel sees the
 * narrow tensors, and the dispatcher refuses them (ops/cuda/launch.c). */
#include "ops_internal.h"

#include <stdio.h>
#include <string.h>

static const char *const widened[] = {
    /* elementwise, comparisons */
    "abs", "acos", "acosh", "add", "asin", "asinh", "atan", "atanh", "ceil", "cos", "cosh", "div",
    "equal", "erf", "exp", "floor", "greater", "greater_equal", "hard_sigmoid", "hard_swish",
    "less", "less_equal", "log", "maximum", "minimum", "mod", "mul", "not_equal", "pow", "power",
    "reciprocal", "relu", "round", "scale", "sigmoid", "silu", "sin", "sinh", "sqrt", "sub", "tan",
    "tanh",
    /* reductions, products, windows */
    "avg_pool2d", "batch_norm", "conv2d", "conv3d", "conv_transpose2d", "conv_transpose3d",
    "cumsum", "einsum", "global_avg_pool", "log_softmax", "lrn", "matmul", "max_pool2d", "mean",
    "reduce_max", "reduce_min", "reduce_prod", "resize", "softmax", "sum",
    /* moving elements */
    "compress", "concat", "expand", "gather", "gather_elements", "gather_nd", "pad", "reshape",
    "reverse_sequence", "scatter_elements", "scatter_nd", "slice", "split", "tile", "transpose",
    "where", "zeros_like"};

/* The ops that carry u64 as flipped i64: they compare, select or move. */
static const char *const order_ops[] = {"concat",
                                        "equal",
                                        "expand",
                                        "gather",
                                        "gather_elements",
                                        "gather_nd",
                                        "greater",
                                        "greater_equal",
                                        "less",
                                        "less_equal",
                                        "maximum",
                                        "minimum",
                                        "not_equal",
                                        "pad",
                                        "reduce_max",
                                        "reduce_min",
                                        "reshape",
                                        "reverse_sequence",
                                        "slice",
                                        "split",
                                        "tile",
                                        "transpose",
                                        "where"};
/* The ops whose kernels take floats only, which compute the integers as f64. */
static const char *const float_ops[] = {"max_pool2d"};
/* The ops whose kernels take u64 themselves (elementwise.c). */
static const char *const u64_ops[] = {"add", "sub", "mul", "div", "mod", "pow"};

enum { WIDE_INT, WIDE_ORDER, WIDE_FLOAT, WIDE_U64 };

/* The wide form of dt in an op of class cls; dt itself for the first five
 * (and u64 where it is refused). */
static vq_dtype wide_of(vq_dtype dt, int cls)
{
    switch (dt) {
    case VQ_F16:
    case VQ_BF16: return VQ_F32;
    case VQ_I8:
    case VQ_U8:
    case VQ_I16:
    case VQ_U16:
    case VQ_U32: return cls == WIDE_FLOAT ? VQ_F64 : VQ_I64;
    case VQ_U64: return cls == WIDE_ORDER ? VQ_I64 : VQ_U64;
    default: return dt;
    }
}

static bool widens(vq_dtype dt, int cls)
{
    return wide_of(dt, cls) != dt;
}

#define TOP_BIT ((uint64_t)1 << 63)

/* n elements of from (dtype dt) into to (dtype wide), or back when back
 * is set: u64 by flipping its top bit, the others by cast's rules. */
static void convert(vq_dtype dt, vq_dtype wide, const void *from, void *to, int64_t n, bool back)
{
    if (dt == VQ_U64) {
        const uint64_t *a = from;
        uint64_t *b = to;
        for (int64_t i = 0; i < n; i++)
            b[i] = a[i] ^ TOP_BIT;
        return;
    }
    if (back)
        vq__cast_any(wide, from, dt, to, n);
    else
        vq__cast_any(dt, from, wide, to, n);
}

/* Whether input i of def is an index or a shape (gather's Indices,
 * reverse_sequence's Lens, reshape's Shape, tile's Repeats), whose i64
 * is its own dtype, not one that data of a narrow integer dtype must
 * share: gather of u8 with i64 indices is not a mismatch. */
static bool index_slot(const vq__op_def *def, int i)
{
    static const char *const names[] = {"Indices", "Lens", "Shape", "Repeats"};
    const char *slot = vq__op_in_slot(def, i);
    for (size_t k = 0; slot && k < sizeof names / sizeof names[0]; k++)
        if (!strcmp(slot, names[k]))
            return true;
    return false;
}

/* The call's inputs converted to wide metas in w; the narrow dtype whose
 * wide form each wide dtype stands for in *narrow_of (indexed by the wide
 * dtype), or an error when two inputs of one wide form differ (u8 with
 * i64: the op's own check of equal dtypes, made on the narrow ones). */
static int widen_metas(const vq__infer *c, vq__meta *w, vq_dtype *narrow_of, bool *any)
{
    int cls = c->def->wide_class;
    *any = false;
    for (int i = 0; i < VQ_DTYPE_COUNT; i++)
        narrow_of[i] = (vq_dtype)i;
    for (int i = 0; i < c->nin; i++) {
        w[i] = c->in[i];
        vq_dtype dt = c->in[i].dtype;
        if (dt == VQ_U64 && !widens(dt, cls) && cls != WIDE_U64)
            return vq__fail(VQ_ENOSYS, "%s: input %s (slot %d): dtype u64 is not supported by %s",
                            c->def->type, vq__op_in_slot(c->def, i), i, c->def->type);
        if (!widens(dt, cls))
            continue;
        *any = true;
        w[i].dtype = wide_of(dt, cls);
        narrow_of[w[i].dtype] = dt;
    }
    for (int i = 0; *any && i < c->nin; i++)
        for (int j = 0; j < i; j++)
            if (!index_slot(c->def, i) && !index_slot(c->def, j) &&
                wide_of(c->in[i].dtype, cls) == wide_of(c->in[j].dtype, cls) &&
                c->in[i].dtype != c->in[j].dtype)
                return vq__in_fail(c, i, "dtype %s differs from %s's %s",
                                   vq_dtype_name(c->in[i].dtype), vq__op_in_slot(c->def, j),
                                   vq_dtype_name(c->in[j].dtype));
    return 0;
}

static int widen_infer(vq__infer *c)
{
    const vq__op_def *d = c->def;
    vq__meta w[VQ__MAX_SLOTS];
    vq_dtype narrow_of[VQ_DTYPE_COUNT];
    bool any;
    if (c->nin > VQ__MAX_SLOTS)
        return d->wide_infer(c);
    int rc = widen_metas(c, w, narrow_of, &any);
    if (rc < 0 || !any)
        return rc < 0 ? rc : d->wide_infer(c);
    vq__infer wc = *c;
    wc.in = w;
    if ((rc = d->wide_infer(&wc)) < 0) {
        /* the op's message names the wide dtype: say which one it stands for */
        char msg[400];
        snprintf(msg, sizeof msg, "%s", vq_errmsg());
        for (int i = 0; i < c->nin; i++)
            if (widens(c->in[i].dtype, d->wide_class))
                return vq__fail(rc == VQ_EINVAL ? VQ_ENOSYS : rc,
                                "%s: dtype %s is not supported by %s (computed as %s: %s)", d->type,
                                vq_dtype_name(c->in[i].dtype), d->type, vq_dtype_name(w[i].dtype),
                                msg);
        return rc;
    }
    for (int j = 0; j < c->nout; j++)
        c->out[j].dtype = narrow_of[c->out[j].dtype];
    return 0;
}

/* The wide copy of t (a new CPU tensor of t's shape), its values converted
 * when convert is set; t itself when it does not widen. */
static int wide_tensor(vq_tensor *t, int cls, bool fill, vq_tensor **out)
{
    *out = t;
    if (!t || !widens(t->dtype, cls))
        return 0;
    int rc = vq__tensor_empty(out, wide_of(t->dtype, cls), t->ndim, t->shape);
    if (rc < 0)
        return rc;
    if (fill)
        convert(t->dtype, (*out)->dtype, t->data, (*out)->data, t->numel, false);
    return 0;
}

static int widen_kernel(const vq__kcall *k)
{
    const vq__op_def *d = k->def;
    int cls = d->wide_class;
    bool any = false;
    for (int i = 0; i < k->nin + k->nout; i++) {
        const vq_tensor *t = i < k->nin ? k->in[i] : k->out[i - k->nin];
        any |= t && widens(t->dtype, cls);
    }
    if (!any)
        return d->wide_kernel(k);
    vq_tensor *in[VQ__MAX_SLOTS] = {NULL}, *out[VQ__MAX_SLOTS] = {NULL};
    int rc = k->nin > VQ__MAX_SLOTS || k->nout > VQ__MAX_SLOTS
                 ? vq__op_fail(d, "too many operands to widen")
                 : 0;
    for (int i = 0; rc == 0 && i < k->nin; i++)
        rc = wide_tensor(k->in[i], cls, true, &in[i]);
    /* an output that is also an input (VQ__INPLACE_OK) shares its copy */
    for (int j = 0; rc == 0 && j < k->nout; j++) {
        for (int i = 0; i < k->nin && !out[j]; i++)
            if (k->out[j] && k->out[j] == k->in[i] && in[i] != k->in[i])
                out[j] = vq_tensor_retain(in[i]);
        if (!out[j])
            rc = wide_tensor(k->out[j], cls, false, &out[j]);
    }
    if (rc == 0) {
        vq__kcall wk = *k;
        wk.in = in;
        wk.out = out;
        rc = d->wide_kernel(&wk);
    }
    for (int j = 0; j < k->nout; j++) {
        if (out[j] && out[j] != k->out[j]) {
            if (rc == 0)
                convert(k->out[j]->dtype, out[j]->dtype, out[j]->data, k->out[j]->data,
                        k->out[j]->numel, true);
            vq_tensor_release(out[j]);
        }
    }
    for (int i = 0; i < k->nin; i++)
        if (in[i] != k->in[i])
            vq_tensor_release(in[i]);
    return rc;
}

void vq__widen_pick(vq__op_def *def)
{
    /* a META_ONLY kernel may be called on headers without data */
    if (!def->kernel[VQ_DEV_CPU] || def->user || (def->flags & VQ__META_ONLY))
        return;
    for (size_t i = 0; i < sizeof widened / sizeof widened[0]; i++)
        if (!strcmp(def->type, widened[i])) {
            def->wide_infer = def->infer;
            def->wide_kernel = def->kernel[VQ_DEV_CPU];
            def->infer = widen_infer;
            def->kernel[VQ_DEV_CPU] = widen_kernel;
            def->flags |= VQ__EXT_DTYPES;
            def->wide_class = WIDE_INT;
            for (size_t j = 0; j < sizeof order_ops / sizeof order_ops[0]; j++)
                if (!strcmp(def->type, order_ops[j]))
                    def->wide_class = WIDE_ORDER;
            for (size_t j = 0; j < sizeof float_ops / sizeof float_ops[0]; j++)
                if (!strcmp(def->type, float_ops[j]))
                    def->wide_class = WIDE_FLOAT;
            for (size_t j = 0; j < sizeof u64_ops / sizeof u64_ops[0]; j++)
                if (!strcmp(def->type, u64_ops[j]))
                    def->wide_class = WIDE_U64;
            return;
        }
}
