/* The optimization stage of preparation: graph rewrites that make an
 * inference program cheaper to run without changing what it computes
 * (beyond the bounds docs/design/optimizer.md states), done on the program
 * before the executor freezes its copy, so that ONNX imports and programs
 * built op by op get them alike.
 *
 * The program is read into a list of ops over its vars; each pass marks
 * ops dead, changes their attributes or the vars they read, or makes a
 * new op in the place of the last op it replaces; a new program with the
 * same vars (unused ones included: a fetch may name any) and the ops left
 * is built at the end through the builder, which checks it as any.
 *
 * Safety rests on the vars a rewrite removes: an intermediate value goes
 * away only when it is written once, read by exactly one op, and neither
 * fed, fetched nor persistable (nothing outside the program sees it), and
 * the vars a moved read refers to are written at most once, so that no
 * other version of them lies between the old place and the new one. */
#include "optimize.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- the switch ---- */

static const struct {
    const char *name;
    unsigned bit;
} pass_names[] = {
    {"noop", VQ__OPT_NOOP},
    {"conv-act", VQ__OPT_CONV_ACT},
    {"elementwise", VQ__OPT_ELEMENTWISE},
};
#define NPASSES ((int)(sizeof pass_names / sizeof pass_names[0]))

int vq__opt_parse(const char *spec, unsigned *passes)
{
    *passes = VQ__OPT_ALL;
    if (!spec || !*spec || !strcmp(spec, "1") || !strcmp(spec, "all"))
        return 0;
    if (!strcmp(spec, "0") || !strcmp(spec, "none")) {
        *passes = 0;
        return 0;
    }
    bool relative = spec[0] == '-' || spec[0] == '+';
    unsigned set = relative ? VQ__OPT_ALL : 0;
    for (const char *s = spec; *s;) {
        const char *end = strchr(s, ',');
        size_t len = end ? (size_t)(end - s) : strlen(s);
        char sign = *s == '-' || *s == '+' ? *s : 0;
        const char *name = s + (sign != 0);
        size_t nlen = len - (sign != 0);
        if ((sign != 0) != relative)
            return vq__fail(VQ_EINVAL,
                            "VARQ_OPT is \"%s\": either pass names (only those run) or "
                            "+name/-name items (changes from all), not both",
                            spec);
        int found = -1;
        for (int i = 0; i < NPASSES; i++)
            if (strlen(pass_names[i].name) == nlen && !strncmp(pass_names[i].name, name, nlen))
                found = i;
        if (found < 0)
            return vq__fail(VQ_EINVAL,
                            "VARQ_OPT is \"%s\": \"%.*s\" is not a pass (noop, conv-act, "
                            "elementwise; or 0, 1, all, none)",
                            spec, (int)nlen, name);
        if (sign == '-')
            set &= ~pass_names[found].bit;
        else
            set |= pass_names[found].bit;
        s += len;
        if (*s == ',')
            s++;
    }
    *passes = set;
    return 0;
}

/* ---- the ops being rewritten ---- */

enum { MAX_IO = 16 };

struct xop {
    const char *type; /* the program's, or a static string */
    const vq__op_def *def;
    int nin, nout;
    int *in, *out;        /* own copies (room for MAX_IO inputs) */
    const vq_attr *attrs; /* the program's, or own */
    int nattrs;
    int priority;
    bool dead;
    /* what a rewrite allocated: attrs and the lists they point to */
    vq_attr *own;
    int64_t *own_ints;
    double *own_floats;
};

struct opt {
    const vq_program *p;
    const vq__block *b;
    struct xop *ops;
    int nops;
    int nvars;
    bool *keep;   /* fed, fetched or persistable */
    int *writers; /* ops writing the var */
    int *readers; /* reads of it (an op reading it twice counts two) */
    int *writer;  /* the last op writing it */
    int *reader;  /* the last op reading it */
    vq__opt_scalar_fn scalar;
    void *user;
    vq__opt_stats st;
};

static void count(struct opt *o)
{
    for (int v = 0; v < o->nvars; v++)
        o->writers[v] = o->readers[v] = 0, o->writer[v] = o->reader[v] = -1;
    for (int i = 0; i < o->nops; i++) {
        const struct xop *x = &o->ops[i];
        if (x->dead)
            continue;
        for (int k = 0; k < x->nin; k++)
            o->readers[x->in[k]]++, o->reader[x->in[k]] = i;
        for (int k = 0; k < x->nout; k++)
            o->writers[x->out[k]]++, o->writer[x->out[k]] = i;
    }
}

/* v is a value only the program's ops see, written once and read once:
 * the op reading it may take over what writes it. */
static bool internal(const struct opt *o, int v)
{
    return !o->keep[v] && o->writers[v] == 1 && o->readers[v] == 1;
}

/* A read of v may move from op `at` to a later op: no version of v but
 * the one `at` reads exists (v is written at most once, and if once,
 * before `at`: a fed var that an op writes later is not moved past it). */
static bool movable(const struct opt *o, int v, int at)
{
    return o->writers[v] == 0 || (o->writers[v] == 1 && o->writer[v] < at);
}

static const vq__pvar *decl(const struct opt *o, int v)
{
    return &o->p->vars[v];
}

static bool shape_known(const vq__pvar *d)
{
    for (int i = 0; i < d->ndim; i++)
        if (d->shape[i] < 0)
            return false;
    return true;
}

static bool same_meta(const vq__pvar *a, const vq__pvar *b)
{
    return a->dtype == b->dtype && a->ndim == b->ndim && shape_known(a) && shape_known(b) &&
           !memcmp(a->shape, b->shape, (size_t)a->ndim * sizeof a->shape[0]);
}

static const vq_attr *attr_of(const struct xop *x, const char *name)
{
    for (int i = 0; i < x->nattrs; i++)
        if (!strcmp(x->attrs[i].name, name))
            return &x->attrs[i];
    return NULL;
}

static double attr_float(const struct xop *x, const char *name, double dflt)
{
    const vq_attr *a = attr_of(x, name);
    if (!a)
        return dflt;
    return a->type == VQ_ATTR_INT ? (double)a->i : a->f;
}

static bool is(const struct xop *x, const char *type)
{
    return !x->dead && !strcmp(x->type, type);
}

/* Gives x room for `more` attributes past its own (copied into memory of
 * its own the first time). */
static vq_attr *attrs_grow(struct xop *x, int more)
{
    vq_attr *a = malloc((size_t)(x->nattrs + more) * sizeof *a);
    if (!a)
        return NULL;
    if (x->nattrs)
        memcpy(a, x->attrs, (size_t)x->nattrs * sizeof *a);
    free(x->own);
    x->own = a;
    x->attrs = a;
    return a;
}

/* The one op reading v when v is internal, else -1. */
static int only_reader(const struct opt *o, int v)
{
    return internal(o, v) ? o->reader[v] : -1;
}

/* The value of a constant operand: a persistable var no op writes, whose
 * scope tensor is a host scalar. */
static bool constant(const struct opt *o, int v, double *val)
{
    return o->scalar && decl(o, v)->persistable && o->writers[v] == 0 &&
           o->scalar(o->user, decl(o, v)->name, val);
}

/* op x is a binary op reading `from` and a constant c (either side):
 * *side 0 when `from` is its X. */
static bool binary_const(const struct opt *o, const struct xop *x, int from, double *c, int *side)
{
    if (x->nin != 2 || x->nout != 1)
        return false;
    int k = x->in[0] == from ? 0 : x->in[1] == from ? 1 : -1;
    if (k < 0 || x->in[1 - k] == from)
        return false;
    *side = k;
    return constant(o, x->in[1 - k], c);
}

/* ---- noop ---- */

static bool perm_identity(const struct xop *x)
{
    const vq_attr *a = attr_of(x, "perm");
    if (!a || a->type != VQ_ATTR_INTS)
        return false;
    for (int i = 0; i < a->n; i++)
        if (a->ints[i] != i)
            return false;
    return true;
}

/* One walk in program order: each op first reads through the renames of
 * the no-ops before it, then is one itself or not. Only the writers'
 * counts are read, which renames leave as they are. */
static int pass_noop(struct opt *o)
{
    count(o);
    int *alias = malloc((size_t)(o->nvars ? o->nvars : 1) * sizeof *alias);
    if (!alias)
        return VQ_ENOMEM;
    for (int v = 0; v < o->nvars; v++)
        alias[v] = v;
    for (int i = 0; i < o->nops; i++) {
        struct xop *x = &o->ops[i];
        if (x->dead)
            continue;
        for (int k = 0; k < x->nin; k++)
            x->in[k] = alias[x->in[k]];
        if (x->nout != 1 || x->nin < 1)
            continue;
        int in = x->in[0], out = x->out[0];
        bool noop = false;
        if (!strcmp(x->type, "reshape") || !strcmp(x->type, "transpose"))
            noop = same_meta(decl(o, in), decl(o, out)) && (x->type[0] == 'r' || perm_identity(x));
        else if (!strcmp(x->type, "cast"))
            noop = decl(o, in)->dtype == decl(o, out)->dtype;
        if (!noop || o->keep[out] || o->writers[out] != 1 || !movable(o, in, i))
            continue;
        alias[out] = in; /* the readers of out read in */
        x->dead = true;
        o->st.noop++;
    }
    free(alias);
    return 0;
}

/* ---- conv-act ---- */

/* x * clip(x + 3, 0, 6) / 6, from its add (or scale) a, as the exporters
 * write HardSwish (the clip as maximum and minimum, in either order; the
 * division as div, a scale or a mul by 1/6, before or after the product)
 * into one hard_swish writing the last op's output. */
static bool hard_swish_at(struct opt *o, int ia)
{
    struct xop *a = &o->ops[ia];
    int x, side;
    double c;
    if (is(a, "add") && a->nin == 2) {
        x = a->in[0];
        if (!binary_const(o, a, x, &c, &side) || c != 3) {
            x = a->in[1];
            if (!binary_const(o, a, x, &c, &side) || c != 3)
                return false;
        }
    } else if (is(a, "scale")) {
        x = a->in[0];
        if (attr_float(a, "scale", 1) != 1 || attr_float(a, "bias", 0) != 3)
            return false;
    } else {
        return false;
    }
    int chain[5] = {ia}, n = 1, v = a->out[0];
    bool have_max = false, have_min = false, have_mul = false, have_div = false;
    while (n < 5) {
        int r = only_reader(o, v);
        if (r < 0)
            return false;
        struct xop *y = &o->ops[r];
        if (y->nout != 1 || y->priority != a->priority)
            return false;
        if (!have_max && is(y, "maximum") && binary_const(o, y, v, &c, &side) && c == 0) {
            have_max = true;
        } else if (!have_min && is(y, "minimum") && binary_const(o, y, v, &c, &side) && c == 6) {
            have_min = true;
        } else if (have_max && have_min && !have_mul && is(y, "mul") && y->nin == 2 &&
                   ((y->in[0] == x && y->in[1] == v) || (y->in[0] == v && y->in[1] == x))) {
            have_mul = true;
        } else if (have_max && have_min && !have_div &&
                   ((is(y, "div") && binary_const(o, y, v, &c, &side) && side == 0 && c == 6) ||
                    (is(y, "mul") && binary_const(o, y, v, &c, &side) && fabs(c * 6 - 1) < 1e-6) ||
                    (is(y, "scale") && fabs(attr_float(y, "scale", 1) * 6 - 1) < 1e-6 &&
                     attr_float(y, "bias", 0) == 0))) {
            have_div = true;
        } else {
            return false;
        }
        chain[n++] = r;
        v = y->out[0];
    }
    if (!movable(o, x, ia) || decl(o, x)->dtype != decl(o, v)->dtype)
        return false;
    struct xop *last = &o->ops[chain[4]];
    for (int k = 0; k < 4; k++)
        o->ops[chain[k]].dead = true;
    last->type = "hard_swish";
    last->def = vq__op_find("hard_swish");
    last->nin = 1;
    last->in[0] = x;
    last->nattrs = 0;
    last->attrs = NULL;
    o->st.hard_swish++;
    return true;
}

/* sigmoid(x) and mul(x, that) (either order) into one silu, from the
 * sigmoid s. */
static bool silu_at(struct opt *o, int is_)
{
    struct xop *s = &o->ops[is_];
    if (!is(s, "sigmoid") || s->nin != 1 || s->nout != 1)
        return false;
    int x = s->in[0], v = s->out[0], r = only_reader(o, v);
    if (r < 0 || !movable(o, x, is_))
        return false;
    struct xop *m = &o->ops[r];
    if (!is(m, "mul") || m->nin != 2 || m->nout != 1 || m->priority != s->priority ||
        !((m->in[0] == x && m->in[1] == v) || (m->in[0] == v && m->in[1] == x)))
        return false;
    s->dead = true;
    m->type = "silu";
    m->def = vq__op_find("silu");
    m->nin = 1;
    m->in[0] = x;
    m->nattrs = 0;
    m->attrs = NULL;
    o->st.silu++;
    return true;
}

static const char *const conv_acts[] = {"relu", "sigmoid",      "tanh",
                                        "silu", "hard_sigmoid", "hard_swish"};

static int pass_conv_act(struct opt *o)
{
    count(o);
    for (int i = 0; i < o->nops; i++)
        if (!hard_swish_at(o, i))
            silu_at(o, i);
    /* Counts are taken once per walk: a rewrite only lowers the counts of
     * the vars it touches (and kills ops, which every match checks), so
     * what the walk reads is never less safe than the truth. The patterns
     * moved reads onto their inputs: counted again for the convolutions. */
    count(o);
    for (int i = 0; i < o->nops; i++) {
        struct xop *c = &o->ops[i];
        if (!is(c, "conv2d") || c->nout != 1 || attr_of(c, "act"))
            continue;
        int v = c->out[0], r = only_reader(o, v);
        if (r < 0)
            continue;
        struct xop *a = &o->ops[r];
        int which = -1;
        for (int k = 0; k < (int)(sizeof conv_acts / sizeof conv_acts[0]); k++)
            if (is(a, conv_acts[k]))
                which = k;
        if (which < 0 || a->nin != 1 || a->nout != 1 || a->in[0] != v || a->priority != c->priority)
            continue;
        bool hs = !strcmp(conv_acts[which], "hard_sigmoid");
        vq_attr *at = attrs_grow(c, 3);
        if (!at)
            return VQ_ENOMEM;
        at[c->nattrs++] = VQ_ATTR_S("act", conv_acts[which]);
        if (hs) {
            at[c->nattrs++] = VQ_ATTR_F("act_alpha", attr_float(a, "alpha", 0.2));
            at[c->nattrs++] = VQ_ATTR_F("act_beta", attr_float(a, "beta", 0.5));
        }
        c->out[0] = a->out[0];
        a->dead = true;
        o->st.conv_act++;
    }
    return 0;
}

/* ---- elementwise ---- */

enum { FE_ACT, FE_MATH, FE_BIN, FE_SCALE, FE_MAX, FE_MIN }; /* ops/cpu/fused.c's kinds */
enum { FE_MAX_STEPS = 16 };

static const char *const fe_acts[] = {"relu", "sigmoid",      "tanh",
                                      "silu", "hard_sigmoid", "hard_swish"};
static const char *const fe_maths[] = {"exp", "log", "sqrt", "reciprocal", "erf", "power"};

/* The kind of step op x would be, or -1. */
static int fe_kind(const struct xop *x)
{
    if (x->dead || x->nout != 1)
        return -1;
    for (int k = 0; k < (int)(sizeof fe_acts / sizeof fe_acts[0]); k++)
        if (!strcmp(x->type, fe_acts[k]))
            return x->nin == 1 ? FE_ACT : -1;
    for (int k = 0; k < (int)(sizeof fe_maths / sizeof fe_maths[0]); k++)
        if (!strcmp(x->type, fe_maths[k]))
            return x->nin == 1 ? FE_MATH : -1;
    if (!strcmp(x->type, "scale"))
        return x->nin == 1 ? FE_SCALE : -1;
    if (x->nin != 2)
        return -1;
    if (!strcmp(x->type, "add") || !strcmp(x->type, "sub") || !strcmp(x->type, "mul") ||
        !strcmp(x->type, "div"))
        return FE_BIN;
    if (!strcmp(x->type, "maximum"))
        return FE_MAX;
    if (!strcmp(x->type, "minimum"))
        return FE_MIN;
    return -1;
}

/* Operand var y (shape known) broadcasts into the chain's shape s as
 * fused_elementwise takes it: dims, aligned right, 1 or s's, those kept
 * (and not 1) consecutive. */
static bool fe_fits(const vq__pvar *s, const vq__pvar *y)
{
    if (y->dtype != VQ_F32 || !shape_known(y) || y->ndim > s->ndim)
        return false;
    int last = -1;
    bool started = false;
    for (int d = s->ndim - 1; d >= 0; d--) {
        int od = d - (s->ndim - y->ndim);
        int64_t yd = od >= 0 ? y->shape[od] : 1;
        if (s->shape[d] == 1) {
            if (started && last == d + 1)
                last = d;
            continue;
        }
        if (yd == 1)
            continue;
        if (yd != s->shape[d] || (started && last != d + 1))
            return false;
        started = true;
        last = d;
    }
    return true;
}

struct chain {
    int x0; /* the chain's input: X of the fused op */
    int ops[FE_MAX_STEPS];
    int n;
    int64_t steps[4 * FE_MAX_STEPS];
    double consts[2 * FE_MAX_STEPS];
    int in[MAX_IO]; /* the fused op's inputs: x0 first */
    int nin;
};

/* The fused op's input index of var y, added when new; -1 when full. */
static int fe_input(struct chain *ch, int y)
{
    for (int k = 0; k < ch->nin; k++)
        if (ch->in[k] == y)
            return k;
    if (ch->nin == MAX_IO)
        return -1;
    ch->in[ch->nin] = y;
    return ch->nin++;
}

/* Appends op r (of kind k) reading the chain's value v as a step; false
 * (the chain unchanged) when it does not fit. */
static bool fe_step(const struct opt *o, struct chain *ch, int r, int kind, int v)
{
    const struct xop *x = &o->ops[r];
    const vq__pvar *s = decl(o, ch->x0);
    if (ch->n == FE_MAX_STEPS || !same_meta(decl(o, x->out[0]), s))
        return false;
    int64_t *st = ch->steps + 4 * ch->n;
    double *c = ch->consts + 2 * ch->n;
    st[0] = kind;
    st[1] = kind == FE_ACT || kind == FE_MATH || kind == FE_BIN ? x->def->code : 0;
    st[2] = 0;
    st[3] = 0;
    c[0] = c[1] = 0;
    if (kind == FE_ACT) {
        c[0] = attr_float(x, "alpha", 0.2);
        c[1] = attr_float(x, "beta", 0.5);
    } else if (kind == FE_MATH) {
        c[0] = attr_float(x, "exponent", 1);
    } else if (kind == FE_SCALE) {
        c[0] = attr_float(x, "scale", 1);
        c[1] = attr_float(x, "bias", 0);
    } else {
        int side = x->in[0] == v ? 0 : 1, y = x->in[1 - side];
        if (x->in[side] != v || y == v || !movable(o, y, ch->n ? ch->ops[0] : r))
            return false;
        if (y != ch->x0 && !fe_fits(s, decl(o, y)))
            return false;
        int k = fe_input(ch, y);
        if (k < 0)
            return false;
        st[2] = k;
        st[3] = side;
    }
    ch->ops[ch->n++] = r;
    return true;
}

static int fe_emit(struct opt *o, struct chain *ch)
{
    struct xop *last = &o->ops[ch->ops[ch->n - 1]];
    vq_attr *at = malloc(2 * sizeof *at);
    int64_t *ints = malloc((size_t)(4 * ch->n) * sizeof *ints);
    double *fl = malloc((size_t)(2 * ch->n) * sizeof *fl);
    if (!at || !ints || !fl) {
        free(at);
        free(ints);
        free(fl);
        return VQ_ENOMEM;
    }
    memcpy(ints, ch->steps, (size_t)(4 * ch->n) * sizeof *ints);
    memcpy(fl, ch->consts, (size_t)(2 * ch->n) * sizeof *fl);
    at[0] = VQ_ATTR_IS("steps", ints, 4 * ch->n);
    at[1] = VQ_ATTR_FS("consts", fl, 2 * ch->n);
    for (int k = 0; k < ch->n - 1; k++)
        o->ops[ch->ops[k]].dead = true;
    free(last->own);
    free(last->own_ints);
    free(last->own_floats);
    last->own = at;
    last->own_ints = ints;
    last->own_floats = fl;
    last->attrs = at;
    last->nattrs = 2;
    last->type = "fused_elementwise";
    last->def = vq__op_find("fused_elementwise");
    memcpy(last->in, ch->in, (size_t)ch->nin * sizeof *ch->in);
    last->nin = ch->nin;
    o->st.fused++;
    o->st.fused_ops += ch->n;
    return 0;
}

static int pass_elementwise(struct opt *o)
{
    count(o);
    for (int i = 0; i < o->nops; i++) {
        struct xop *x = &o->ops[i];
        int kind = fe_kind(x);
        if (kind < 0 || decl(o, x->out[0])->dtype != VQ_F32)
            continue;
        struct chain ch = {.n = 0};
        /* the chain's input: the first input of X's shape */
        int x0 = -1;
        for (int k = 0; k < x->nin && x0 < 0; k++)
            if (same_meta(decl(o, x->in[k]), decl(o, x->out[0])) && movable(o, x->in[k], i))
                x0 = x->in[k];
        if (x0 < 0)
            continue;
        ch.x0 = x0;
        ch.in[0] = x0;
        ch.nin = 1;
        if (!fe_step(o, &ch, i, kind, x0))
            continue;
        int v = x->out[0];
        for (;;) {
            int r = only_reader(o, v);
            if (r < 0)
                break;
            struct xop *y = &o->ops[r];
            int k = fe_kind(y);
            if (k < 0 || y->priority != x->priority || !fe_step(o, &ch, r, k, v))
                break;
            v = y->out[0];
        }
        if (ch.n >= 2) {
            int rc = fe_emit(o, &ch);
            if (rc < 0)
                return rc;
        }
    }
    return 0;
}

/* ---- reading and writing programs ---- */

static bool ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), m = strlen(tail);
    return n >= m && !strcmp(s + n - m, tail);
}

/* One block, every op known, no gradient op, nothing written into a
 * persistable var (an optimizer's update, batch norm's running
 * statistics): a program that only infers. */
static bool inference_only(const vq_program *p)
{
    if (p->nblocks != 1)
        return false;
    const vq__block *b = &p->blocks[0];
    for (int i = 0; i < b->nops; i++) {
        const vq__pop *op = &p->ops[b->ops[i]];
        if (!op->def || (op->def->flags & VQ__CONTROL) || ends_with(op->type, "_grad") ||
            op->nin > MAX_IO || op->nout > MAX_IO)
            return false;
        for (int k = 0; k < op->nout; k++)
            if (p->vars[op->out[k]].persistable)
                return false;
    }
    return true;
}

static int build(const struct opt *o, vq_program **out)
{
    const vq_program *p = o->p;
    vq_program *np = NULL;
    int rc = vq_program_new(&np);
    for (int v = 0; rc >= 0 && v < p->nvars; v++) {
        const vq__pvar *d = &p->vars[v];
        rc = vq_program_add_var(np, 0, d->name, d->dtype, d->ndim, d->shape, d->persistable);
        if (rc >= 0 && d->stop_gradient)
            rc = vq_program_set_stop_gradient(np, d->name, true);
    }
    for (int i = 0; rc >= 0 && i < o->nops; i++) {
        const struct xop *x = &o->ops[i];
        if (x->dead)
            continue;
        const char *in[MAX_IO], *outs[MAX_IO];
        for (int k = 0; k < x->nin; k++)
            in[k] = p->vars[x->in[k]].name;
        for (int k = 0; k < x->nout; k++)
            outs[k] = p->vars[x->out[k]].name;
        rc = vq_program_add_op(np, 0, x->type, in, x->nin, outs, x->nout, x->attrs, x->nattrs);
        if (rc >= 0 && x->priority)
            rc = vq_program_set_op_priority(np, 0, rc, x->priority);
    }
    if (rc < 0) {
        vq_program_free(np);
        return rc;
    }
    *out = np;
    return 0;
}

int vq__program_optimize(const vq_program *p, unsigned passes, const char *const *keep, int nkeep,
                         vq__opt_scalar_fn scalar, void *user, vq_program **out, vq__opt_stats *st)
{
    *out = NULL;
    if (st)
        *st = (vq__opt_stats){0};
    if (!passes || !inference_only(p))
        return 0;
    struct opt o = {.p = p, .b = &p->blocks[0], .nvars = p->nvars, .scalar = scalar, .user = user};
    int rc = 0;
    size_t nv = (size_t)(p->nvars ? p->nvars : 1);
    o.keep = calloc(nv, sizeof *o.keep);
    o.writers = malloc(nv * sizeof(int));
    o.readers = malloc(nv * sizeof(int));
    o.writer = malloc(nv * sizeof(int));
    o.reader = malloc(nv * sizeof(int));
    o.ops = calloc((size_t)(o.b->nops ? o.b->nops : 1), sizeof *o.ops);
    if (!o.keep || !o.writers || !o.readers || !o.writer || !o.reader || !o.ops)
        rc = VQ_ENOMEM;
    for (int v = 0; rc == 0 && v < p->nvars; v++)
        o.keep[v] = p->vars[v].persistable;
    for (int i = 0; rc == 0 && i < nkeep; i++) {
        int v = vq__program_find_var(p, keep[i]);
        if (v >= 0)
            o.keep[v] = true;
    }
    for (int i = 0; rc == 0 && i < o.b->nops; i++) {
        const vq__pop *op = &p->ops[o.b->ops[i]];
        struct xop *x = &o.ops[o.nops++];
        *x = (struct xop){.type = op->type,
                          .def = op->def,
                          .nin = op->nin,
                          .nout = op->nout,
                          .attrs = op->attrs,
                          .nattrs = op->nattrs,
                          .priority = op->priority};
        x->in = malloc(MAX_IO * sizeof *x->in);
        x->out = malloc(MAX_IO * sizeof *x->out);
        if (!x->in || !x->out) {
            rc = VQ_ENOMEM;
            break;
        }
        memcpy(x->in, op->in, (size_t)op->nin * sizeof *x->in);
        memcpy(x->out, op->out, (size_t)op->nout * sizeof *x->out);
    }
    if (rc == 0 && (passes & VQ__OPT_NOOP))
        rc = pass_noop(&o);
    if (rc == 0 && (passes & VQ__OPT_CONV_ACT))
        rc = pass_conv_act(&o);
    if (rc == 0 && (passes & VQ__OPT_ELEMENTWISE))
        rc = pass_elementwise(&o);
    bool changed = o.st.noop || o.st.hard_swish || o.st.silu || o.st.conv_act || o.st.fused;
    if (rc == 0 && changed)
        rc = build(&o, out);
    if (rc == 0 && st)
        *st = o.st;
    for (int i = 0; i < o.nops; i++) {
        free(o.ops[i].in);
        free(o.ops[i].out);
        free(o.ops[i].own);
        free(o.ops[i].own_ints);
        free(o.ops[i].own_floats);
    }
    free(o.ops);
    free(o.keep);
    free(o.writers);
    free(o.readers);
    free(o.writer);
    free(o.reader);
    return rc == VQ_ENOMEM ? vq__fail(rc, "preparing the optimized program: out of memory") : rc;
}
