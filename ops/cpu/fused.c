/* fused_elementwise: a chain of f32 elementwise ops run as one op, block
 * by block, so that the intermediate values stay in a 2 KiB buffer in the
 * cache instead of each making a pass over memory (and a tensor) of its
 * own. graph/optimize.c's elementwise pass makes these ops from chains in
 * inference programs; they have no gradient.
 *
 * fused_elementwise(X, Y...; steps, consts) -> Out: Out has X's shape. The
 * value v starts as X; each step of `steps` (4 ints: kind, code, operand,
 * side) changes it:
 *   kind 0  activation `code` (VQ__ACT_*; consts: hard_sigmoid's alpha, beta)
 *   kind 1  math op `code` (VQ__MATH_*; consts[0]: power's exponent)
 *   kind 2  binary op `code` (VQ__BINARY_ADD, SUB, MUL, DIV) of v and
 *           input `operand` (0 is X itself): op(v, y), or op(y, v) with side 1
 *   kind 3  scale: consts[0] v + consts[1]
 *   kind 4, 5  maximum, minimum of v and input `operand`, side as for 2
 * with two consts per step. An operand other than X broadcasts into X's
 * shape where its dims, aligned right, are each 1 or X's, and those equal
 * to X's (and not 1) are consecutive: element i reads operand element
 * (i / inner) % mid (a scalar, a per-channel [C, 1, 1] or [N, C, 1, 1], a
 * trailing [D], or the whole shape).
 *
 * Each step computes what its op's own kernel does, in the same f32
 * arithmetic (the activations and math through vq__act_apply and
 * vq__math_apply, the binary ones as the same expressions, with floating
 * point contraction off), so a fused chain gives the unfused chain's bits.
 * Long tensors are shared with the idle workers like the other
 * elementwise ops. */
#include "../ops_internal.h"
#include "../params.h"

#include <string.h>

#ifdef __clang__
#pragma clang fp contract(off)
#endif

enum { FE_ACT, FE_MATH, FE_BIN, FE_SCALE, FE_MAX, FE_MIN, FE_KINDS };
enum { FE_MAX_STEPS = 16, FE_MAX_IN = 16, FE_BLOCK = 512 };

struct fe_step {
    unsigned char kind, code, operand, side;
    float c0, c1;
};

typedef struct fe_params {
    int nsteps;
    struct fe_step step[FE_MAX_STEPS];
} fe_params;

_Static_assert(sizeof(fe_params) <= VQ__MAX_PARAMS, "fused_elementwise's params");

static const char *const x_in[] = {"X"};
static const char *const out_slot[] = {"Out"};

static const vq__attr_spec fe_attrs[] = {
    {"steps", VQ_ATTR_INTS, true, NULL},
    {"consts", VQ_ATTR_FLOATS, false, "[]"},
};

/* Operand o's dims (shape s, ndim on) into X's (x, nx): whether they fit
 * the (i / inner) % mid form, and those two. Unknown dims (-1) of either
 * pass (inference at preparation; the kernel sees real shapes). */
static bool fe_bcast(const int64_t *x, int nx, const int64_t *s, int on, int64_t *inner,
                     int64_t *mid)
{
    if (on > nx)
        return false;
    int first = -1, last = -1;
    int64_t in = 1, md = 1;
    for (int d = nx - 1; d >= 0; d--) {
        int od = d - (nx - on);
        int64_t sd = od >= 0 ? s[od] : 1;
        if (sd == 1 && x[d] != 1) {
            if (first < 0)
                in *= x[d];
            continue;
        }
        if (sd != x[d] && sd >= 0 && x[d] >= 0)
            return false;
        if (x[d] == 1) { /* neutral: keeps a run of kept dims going */
            if (first >= 0 && last == d + 1)
                last = d;
            continue;
        }
        if (first >= 0 && last != d + 1)
            return false; /* a broadcast dim between two kept ones */
        if (first < 0)
            first = d;
        last = d;
        md *= x[d];
    }
    *inner = in;
    *mid = md;
    return true;
}

static int fe_infer(vq__infer *c)
{
    fe_params *p = c->params;
    const vq_attr *st = vq__attr_find(c, "steps"), *cs = vq__attr_find(c, "consts");
    int n = st ? st->n : 0;
    if (n <= 0 || n % 4 || n / 4 > FE_MAX_STEPS)
        return vq__attr_fail(c, "steps", "has %d ints: 4 per step, 1 to %d steps", n, FE_MAX_STEPS);
    p->nsteps = n / 4;
    if (cs && cs->n != 2 * p->nsteps)
        return vq__attr_fail(c, "consts", "has %d values; expected 2 per step (%d)", cs->n,
                             2 * p->nsteps);
    if (c->nin > FE_MAX_IN)
        return vq__op_fail(c->def, "takes at most %d inputs, got %d", FE_MAX_IN, c->nin);
    for (int i = 0; i < p->nsteps; i++) {
        const int64_t *s = st->ints + 4 * i;
        int64_t lim[FE_KINDS] =
            {VQ__ACT_HARD_SWISH + 1, VQ__MATH_ROUND + 1, VQ__BINARY_DIV + 1, 1, 1, 1};
        if (s[0] < 0 || s[0] >= FE_KINDS || s[1] < 0 || s[1] >= lim[s[0]] || s[2] < 0 ||
            s[2] >= c->nin || s[3] < 0 || s[3] > 1)
            return vq__attr_fail(c, "steps", "step %d (%lld, %lld, %lld, %lld) is not one", i,
                                 (long long)s[0], (long long)s[1], (long long)s[2],
                                 (long long)s[3]);
        p->step[i] = (struct fe_step){.kind = (unsigned char)s[0],
                                      .code = (unsigned char)s[1],
                                      .operand = (unsigned char)s[2],
                                      .side = (unsigned char)s[3],
                                      .c0 = cs ? (float)cs->floats[2 * i] : 0,
                                      .c1 = cs ? (float)cs->floats[2 * i + 1] : 0};
    }
    for (int i = 0; i < c->nin; i++) {
        int rc = vq__check_dtype(c, i, 1u << VQ_F32);
        if (rc < 0)
            return rc;
        int64_t inner, mid;
        if (i > 0 &&
            !fe_bcast(c->in[0].shape, c->in[0].ndim, c->in[i].shape, c->in[i].ndim, &inner, &mid))
            return vq__in_fail(c, i,
                               "does not broadcast into X's shape as fused_elementwise "
                               "takes it (dims 1 or X's, those kept consecutive)");
    }
    c->out[0] = c->in[0];
    return 0;
}

/* An operand's block [b0, b0 + n) as a contiguous array: the tensor itself
 * when it is X's shape, else gathered into tmp. */
struct fe_operand {
    const float *data;
    int64_t inner, mid;
    bool full;
};

static const float *fe_block_of(const struct fe_operand *op, int64_t b0, int64_t n, float *tmp)
{
    if (op->full)
        return op->data + b0;
    if (op->inner == 1) { /* trailing dims: runs of the operand itself */
        for (int64_t j = b0, end = b0 + n; j < end;) {
            int64_t idx = j % op->mid, run = op->mid - idx < end - j ? op->mid - idx : end - j;
            memcpy(tmp + (j - b0), op->data + idx, (size_t)run * sizeof(float));
            j += run;
        }
        return tmp;
    }
    for (int64_t j = b0, end = b0 + n; j < end;) {
        float v = op->data[(j / op->inner) % op->mid];
        int64_t run = op->inner - j % op->inner;
        if (run > end - j)
            run = end - j;
        for (int64_t i = 0; i < run; i++)
            tmp[j - b0 + i] = v;
        j += run;
    }
    return tmp;
}

/* v = op(v, y) or, with side 1, op(y, v): the binary kernels'
 * expressions (elementwise.c, compare.c's maximum and minimum). */
#define FE_BINARY(EXPR)                       \
    do {                                      \
        if (s->side == 0)                     \
            for (int64_t i = 0; i < n; i++) { \
                float a = v[i], b = y[i];     \
                v[i] = (EXPR);                \
            }                                 \
        else                                  \
            for (int64_t i = 0; i < n; i++) { \
                float a = y[i], b = v[i];     \
                v[i] = (EXPR);                \
            }                                 \
    } while (0)

struct fe_call {
    const fe_params *p;
    const float *x;
    float *out;
    struct fe_operand ops[FE_MAX_IN];
};

static void fe_steps(const struct fe_call *f, int64_t b0, int64_t n, float *v, float *tmp)
{
    for (int k = 0; k < f->p->nsteps; k++) {
        const struct fe_step *s = &f->p->step[k];
        const float *y = NULL;
        if (s->kind == FE_BIN || s->kind == FE_MAX || s->kind == FE_MIN)
            y = s->operand == 0 ? f->x + b0 : fe_block_of(&f->ops[s->operand], b0, n, tmp);
        switch (s->kind) {
        case FE_ACT: {
            vq__unary_params u = {.op = s->code, .alpha = s->c0, .beta = s->c1};
            if (s->code == VQ__ACT_HARD_SWISH) { /* the op's fixed ones */
                u.alpha = 1.0 / 6;
                u.beta = 0.5;
            }
            vq__act_apply(&u, VQ_F32, v, v, n);
            break;
        }
        case FE_MATH: vq__math_apply(s->code, s->c0, VQ_F32, v, v, n); break;
        case FE_SCALE: {
            float sc = s->c0, bi = s->c1;
            for (int64_t i = 0; i < n; i++)
                v[i] = sc * v[i] + bi;
            break;
        }
        case FE_BIN:
            switch (s->code) {
            case VQ__BINARY_ADD: FE_BINARY(a + b); break;
            case VQ__BINARY_SUB: FE_BINARY(a - b); break;
            case VQ__BINARY_MUL: FE_BINARY(a * b); break;
            default: FE_BINARY(a / b); break;
            }
            break;
        case FE_MAX: FE_BINARY(a > b || a != a ? a : b); break;
        default: FE_BINARY(a < b || a != a ? a : b); break;
        }
    }
}

/* Elements [lo, hi): each block copied from X into v, through the steps,
 * and out. */
static int fe_part(void *arg, int64_t lo, int64_t hi, int slot)
{
    (void)slot;
    const struct fe_call *f = arg;
    float v[FE_BLOCK], tmp[FE_BLOCK];
    for (int64_t b0 = lo; b0 < hi; b0 += FE_BLOCK) {
        int64_t n = hi - b0 < FE_BLOCK ? hi - b0 : FE_BLOCK;
        memcpy(v, f->x + b0, (size_t)n * sizeof(float));
        fe_steps(f, b0, n, v, tmp);
        memcpy(f->out + b0, v, (size_t)n * sizeof(float));
    }
    return 0;
}

static int fe_kernel(const vq__kcall *k)
{
    const fe_params *p = k->params;
    vq_tensor *x = k->in[0];
    struct fe_call f = {.p = p, .x = x->data, .out = k->out[0]->data};
    for (int i = 1; i < k->nin; i++) {
        vq_tensor *t = k->in[i];
        struct fe_operand *o = &f.ops[i];
        o->data = t->data;
        o->full = t->numel == x->numel && t->ndim == x->ndim &&
                  !memcmp(t->shape, x->shape, (size_t)x->ndim * sizeof *x->shape);
        if (!o->full && !fe_bcast(x->shape, x->ndim, t->shape, t->ndim, &o->inner, &o->mid))
            return vq__op_fail(k->def, "input %d does not broadcast into X's shape", i);
        if (!o->full && o->mid == x->numel && o->inner == 1)
            o->full = true;
    }
    int64_t n = x->numel;
    if (n >= 2 * VQ__PAR_ELEMS)
        return vq__parallel_for(n, VQ__PAR_ELEMS, fe_part, &f);
    return fe_part(&f, 0, n, 0);
}

const vq__op_def vq__ops_fused[] = {
    {.type = "fused_elementwise",
     .in_slots = x_in,
     .nin_slots = 1,
     .out_slots = out_slot,
     .nout_slots = 1,
     .flags = VQ__VARIADIC_IN,
     .attrs = fe_attrs,
     .nattrs = 2,
     .params_size = sizeof(fe_params),
     .infer = fe_infer,
     .kernel = {fe_kernel}},
    {0},
};
