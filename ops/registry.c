/* The op registry: every kernel file's table of op definitions, merged once
 * into one sorted array (of copies, whose GPU slots gpu.c fills with the
 * backend's kernels), which ops registered at run time (user.c) extend;
 * attribute checking against each op's schema; the
 * helpers infer functions use to check inputs and report errors that name
 * the op and slot; and vq_op_run, which checks a call, creates its outputs
 * and pushes its kernel onto the engine.
 *
 * Error messages all start with the op type, then the slot or attribute:
 * "matmul: input Y (slot 1): inner dims differ: X is [2,3], Y is [4,5]". */
#include "ops_internal.h"
#include "params.h" /* vq__rng_params */

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the table ---- */

static const vq__op_def *const family[] = {
    vq__ops_elementwise, vq__ops_activation,  vq__ops_loss,    vq__ops_reduce,  vq__ops_shape,
    vq__ops_matmul,      vq__ops_init,        vq__ops_optim,   vq__ops_compare, vq__ops_control,
    vq__ops_math,        vq__ops_conv,        vq__ops_pool,    vq__ops_norm,    vq__ops_index,
    vq__ops_extremum,    vq__ops_layout,      vq__ops_conv3d,  vq__ops_resize,  vq__ops_cumsum,
    vq__ops_prod,        vq__ops_shape_value, vq__ops_scatter, vq__ops_lrn,     vq__ops_sequence,
    vq__ops_sample,      vq__ops_einsum,      vq__ops_det,     vq__ops_unpool,  vq__ops_dft,
    vq__ops_dynamic,     vq__ops_rnn,         vq__ops_tfidf,   vq__ops_fused,   vq__ops_quant,
    vq__ops_qproduct,
};

#define MAX_OPS 256 /* built-in ones */
#define SIG_BYTES 320

/* The sorted table of every op, with each op's signature. Readers take the
 * current table with one acquire load and never lock: a registration
 * builds a new table under register_lock and publishes it with a release
 * store. Replaced tables are never freed (a reader may still be walking
 * one, and vq_op_signature's strings point into them); each keeps a link
 * to the one it replaced. Built-in ops live in a static first table. */
struct table {
    int n;
    const vq__op_def **ops;
    char (*sigs)[SIG_BYTES];
    struct table *older;
};

static vq__op_def builtin_defs[MAX_OPS]; /* the kernel files' definitions, copied */
static const vq__op_def *builtin_ops[MAX_OPS];
static char builtin_sigs[MAX_OPS][SIG_BYTES];
static struct table builtin = {.ops = builtin_ops, .sigs = builtin_sigs};
static _Atomic(struct table *) current;
static pthread_once_t table_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t register_lock = PTHREAD_MUTEX_INITIALIZER;

static int cmp_def(const void *a, const void *b)
{
    return strcmp((*(const vq__op_def *const *)a)->type, (*(const vq__op_def *const *)b)->type);
}

static const char *attr_type_name(vq_attr_type t)
{
    switch (t) {
    case VQ_ATTR_INT: return "int";
    case VQ_ATTR_FLOAT: return "float";
    case VQ_ATTR_STRING: return "string";
    case VQ_ATTR_BOOL: return "bool";
    case VQ_ATTR_INTS: return "ints";
    case VQ_ATTR_FLOATS: return "floats";
    case VQ_ATTR_STRINGS: return "strings";
    case VQ_ATTR_BOOLS: return "bools";
    }
    return "?";
}

static void put_slots(char *buf, size_t size, size_t *at, const char *const *slots, int n,
                      bool variadic, bool optional)
{
    for (int i = 0; i < n && *at < size; i++)
        *at += (size_t)snprintf(buf + *at, size - *at, "%s%s%s", i ? ", " : "", slots[i],
                                i < n - 1 ? ""
                                : variadic ? "..."
                                : optional ? "?"
                                           : "");
}

static void make_signature(const vq__op_def *d, char *buf, size_t size)
{
    size_t at = (size_t)snprintf(buf, size, "%s(", d->type);
    put_slots(buf, size, &at, d->in_slots, d->nin_slots, d->flags & VQ__VARIADIC_IN,
              d->flags & VQ__OPTIONAL_IN);
    if (at < size)
        at += (size_t)snprintf(buf + at, size - at, ") -> ");
    put_slots(buf, size, &at, d->out_slots, d->nout_slots, d->flags & VQ__VARIADIC_OUT,
              d->flags & VQ__OPTIONAL_OUT);
    for (int i = 0; i < d->nattrs && at < size; i++) {
        const vq__attr_spec *a = &d->attrs[i];
        const char *dflt = a->dflt ? a->dflt : "none";
        if (a->type == VQ_ATTR_BOOL && !strcmp(dflt, "0"))
            dflt = "false";
        else if (a->type == VQ_ATTR_BOOL && !strcmp(dflt, "1"))
            dflt = "true";
        at += (size_t)snprintf(buf + at, size - at, "%s %s:%s%s%s", i ? "" : ";", a->name,
                               attr_type_name(a->type), a->required ? "" : "=",
                               a->required ? "" : dflt);
    }
}

/* Each op's CUDA kernel is picked here, once (vq__gpu_kernel_pick), not
 * looked up by type at each call. */
static void table_build(void)
{
    for (size_t f = 0; f < sizeof family / sizeof family[0]; f++)
        for (const vq__op_def *d = family[f]; d->type && builtin.n < MAX_OPS; d++) {
            builtin_defs[builtin.n] = *d;
            vq__gpu_kernel_pick(&builtin_defs[builtin.n]);
            vq__widen_pick(&builtin_defs[builtin.n]);
            builtin_ops[builtin.n] = &builtin_defs[builtin.n];
            builtin.n++;
        }
    qsort(builtin_ops, (size_t)builtin.n, sizeof builtin_ops[0], cmp_def);
    for (int i = 0; i < builtin.n; i++)
        make_signature(builtin_ops[i], builtin_sigs[i], SIG_BYTES);
    atomic_store_explicit(&current, &builtin, memory_order_release);
}

/* hot path: no malloc, no global lock */
static const struct table *table_get(void)
{
    pthread_once(&table_once, table_build);
    /* acquire: pairs with the release that published the table, so its
     * entries (and the definitions they point to) are seen whole */
    return atomic_load_explicit(&current, memory_order_acquire);
}

/* Index of type in t, or -(insertion point) - 1. */
static int table_find(const struct table *t, const char *type)
{
    int lo = 0, hi = t->n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2, c = strcmp(type, t->ops[mid]->type);
        if (c == 0)
            return mid;
        if (c < 0)
            hi = mid - 1;
        else
            lo = mid + 1;
    }
    return -lo - 1;
}

const vq__op_def *vq__op_find(const char *type)
{
    if (!type)
        return NULL;
    const struct table *t = table_get();
    int i = table_find(t, type);
    return i < 0 ? NULL : t->ops[i];
}

int vq__op_table_add(const vq__op_def *d)
{
    table_get();
    pthread_mutex_lock(&register_lock);
    struct table *t = atomic_load_explicit(&current, memory_order_relaxed);
    int at = table_find(t, d->type);
    struct table *n = at < 0 ? vq__malloc(sizeof *n) : NULL;
    const vq__op_def **ops = n ? vq__malloc((size_t)(t->n + 1) * sizeof *ops) : NULL;
    char(*sigs)[SIG_BYTES] = ops ? vq__malloc((size_t)(t->n + 1) * SIG_BYTES) : NULL;
    if (!sigs) {
        pthread_mutex_unlock(&register_lock);
        free(n);
        free(ops);
        if (at >= 0)
            return vq__fail(VQ_EINVAL, "vq_op_register: op \"%s\" is already registered",
                            d->type);
        return vq__fail(VQ_ENOMEM, "vq_op_register: out of memory");
    }
    at = -at - 1;
    memcpy(ops, t->ops, (size_t)at * sizeof *ops);
    memcpy(sigs, t->sigs, (size_t)at * SIG_BYTES);
    ops[at] = d;
    make_signature(d, sigs[at], SIG_BYTES);
    memcpy(ops + at + 1, t->ops + at, (size_t)(t->n - at) * sizeof *ops);
    memcpy(sigs + at + 1, t->sigs + at, (size_t)(t->n - at) * SIG_BYTES);
    *n = (struct table){.n = t->n + 1, .ops = ops, .sigs = sigs, .older = t};
    /* release: the new table's contents before the pointer to it */
    atomic_store_explicit(&current, n, memory_order_release);
    pthread_mutex_unlock(&register_lock);
    return 0;
}

VQ_API int vq_op_count(void)
{
    return table_get()->n;
}

VQ_API const char *vq_op_name(int index)
{
    const struct table *t = table_get();
    return index >= 0 && index < t->n ? t->ops[index]->type : NULL;
}

VQ_API const char *vq_op_signature(const char *type)
{
    if (!type)
        return NULL;
    const struct table *t = table_get();
    int i = table_find(t, type);
    return i < 0 ? NULL : t->sigs[i];
}

VQ_API int vq_op_traits(const char *type)
{
    const vq__op_def *d = vq__op_find(type);
    if (!d)
        return vq__fail(VQ_EINVAL, "vq_op_traits: no op \"%s\"", type ? type : "(null)");
    int traits = 0;
    if (d->kernel[VQ_DEV_CPU] || d->kernel_async)
        traits |= VQ_OP_HAS_CPU;
    if (d->kernel[VQ_DEV_GPU])
        traits |= VQ_OP_HAS_GPU;
    if (d->kernel_async)
        traits |= VQ_OP_HAS_ASYNC;
    /* autodiff differentiates cond and while itself (graph/autodiff_control.c) */
    if (d->grad || (d->flags & VQ__CONTROL))
        traits |= VQ_OP_HAS_GRAD;
    if (d->flags & VQ__CONTROL)
        traits |= VQ_OP_IS_CONTROL;
    if (d->user)
        traits |= VQ_OP_IS_REGISTERED;
    return traits;
}

/* ---- slots and arity ---- */

const char *vq__op_in_slot(const vq__op_def *d, int i)
{
    if (i < d->nin_slots)
        return d->in_slots[i];
    return (d->flags & VQ__VARIADIC_IN) && d->nin_slots ? d->in_slots[d->nin_slots - 1] : "?";
}

const char *vq__op_out_slot(const vq__op_def *d, int i)
{
    if (i < d->nout_slots)
        return d->out_slots[i];
    return (d->flags & VQ__VARIADIC_OUT) && d->nout_slots ? d->out_slots[d->nout_slots - 1]
                                                          : "?";
}

/* A slot list of n slots takes exactly n tensors; a variadic one at least
 * n; an optional one n - 1 or n. */
static int arity_check(const vq__op_def *d, const char *what, int got, int n, bool variadic,
                       bool optional)
{
    if (variadic ? got >= n : optional ? got == n || got == n - 1 : got == n)
        return 0;
    if (optional)
        return vq__fail(VQ_EINVAL, "%s: takes %d or %d %s, got %d", d->type, n - 1, n, what, got);
    return vq__fail(VQ_EINVAL, "%s: takes %s%d %s, got %d", d->type, variadic ? "at least " : "",
                    n, what, got);
}

int vq__op_check_arity(const vq__op_def *d, int nin, int nout)
{
    int rc = arity_check(d, "inputs", nin, d->nin_slots, d->flags & VQ__VARIADIC_IN,
                         d->flags & VQ__OPTIONAL_IN);
    if (rc == 0)
        rc = arity_check(d, "outputs", nout, d->nout_slots, d->flags & VQ__VARIADIC_OUT,
                         d->flags & VQ__OPTIONAL_OUT);
    if (rc < 0)
        return rc;
    if (nin > VQ__MAX_SLOTS || nout > VQ__MAX_SLOTS)
        return vq__fail(VQ_EINVAL, "%s: more than %d inputs or outputs", d->type, VQ__MAX_SLOTS);
    return 0;
}

/* ---- attributes ---- */

static bool attr_type_fits(vq_attr_type want, const vq_attr *a)
{
    if (a->type == want)
        return true;
    switch (want) {
    case VQ_ATTR_FLOAT: return a->type == VQ_ATTR_INT;
    case VQ_ATTR_BOOL: return a->type == VQ_ATTR_INT && (a->i == 0 || a->i == 1);
    case VQ_ATTR_FLOATS: return a->type == VQ_ATTR_INTS;
    case VQ_ATTR_BOOLS: return a->type == VQ_ATTR_INTS;
    default: return false;
    }
}

static int attrs_check(const vq__op_def *d, const vq_attr *attrs, int nattrs)
{
    if (nattrs < 0 || (nattrs > 0 && !attrs))
        return vq__fail(VQ_EINVAL, "%s: attrs is NULL or nattrs is %d", d->type, nattrs);
    for (int i = 0; i < nattrs; i++) {
        const vq_attr *a = &attrs[i];
        if (!a->name)
            return vq__fail(VQ_EINVAL, "%s: attribute %d has no name", d->type, i);
        const vq__attr_spec *s = NULL;
        for (int j = 0; j < d->nattrs && !s; j++)
            if (!strcmp(d->attrs[j].name, a->name))
                s = &d->attrs[j];
        if (!s) {
            char known[160] = "";
            size_t at = 0;
            for (int j = 0; j < d->nattrs && at < sizeof known; j++)
                at += (size_t)snprintf(known + at, sizeof known - at, "%s%s", j ? ", " : "",
                                       d->attrs[j].name);
            return vq__fail(VQ_EINVAL, "%s: unknown attribute '%s' (known: %s)", d->type, a->name,
                            d->nattrs ? known : "none");
        }
        if ((unsigned)a->type > VQ_ATTR_BOOLS)
            return vq__fail(VQ_EINVAL, "%s: attribute %s: expected %s, got type %d, which is "
                                       "no vq_attr_type",
                            d->type, a->name, attr_type_name(s->type), (int)a->type);
        if (!attr_type_fits(s->type, a))
            return vq__fail(VQ_EINVAL, "%s: attribute %s: expected %s, got %s", d->type, a->name,
                            attr_type_name(s->type), attr_type_name(a->type));
        const void *values = a->type == VQ_ATTR_FLOATS    ? (const void *)a->floats
                             : a->type == VQ_ATTR_STRINGS ? (const void *)a->strings
                                                          : (const void *)a->ints;
        if (a->type >= VQ_ATTR_INTS && (a->n < 0 || (a->n > 0 && !values)))
            return vq__fail(VQ_EINVAL, "%s: attribute %s: list of %d with no values", d->type,
                            a->name, a->n);
        if (a->type == VQ_ATTR_STRING && !a->s)
            return vq__fail(VQ_EINVAL, "%s: attribute %s: string is NULL", d->type, a->name);
        for (int j = 0; j < i; j++)
            if (!strcmp(attrs[j].name, a->name))
                return vq__fail(VQ_EINVAL, "%s: attribute %s given twice", d->type, a->name);
    }
    for (int j = 0; j < d->nattrs; j++) {
        if (!d->attrs[j].required)
            continue;
        bool found = false;
        for (int i = 0; i < nattrs && !found; i++)
            found = !strcmp(attrs[i].name, d->attrs[j].name);
        if (!found)
            return vq__fail(VQ_EINVAL, "%s: attribute %s (%s) is required", d->type,
                            d->attrs[j].name, attr_type_name(d->attrs[j].type));
    }
    return 0;
}

int vq__attrs_check(const vq__op_def *d, const vq_attr *attrs, int nattrs)
{
    return attrs_check(d, attrs, nattrs);
}

const vq_attr *vq__attr_find(const vq__infer *c, const char *name)
{
    for (int i = 0; i < c->nattrs; i++)
        if (!strcmp(c->attrs[i].name, name))
            return &c->attrs[i];
    return NULL;
}

int64_t vq__attr_int(const vq__infer *c, const char *name, int64_t dflt)
{
    const vq_attr *a = vq__attr_find(c, name);
    return a ? a->i : dflt;
}

double vq__attr_float(const vq__infer *c, const char *name, double dflt)
{
    const vq_attr *a = vq__attr_find(c, name);
    return !a ? dflt : a->type == VQ_ATTR_INT ? (double)a->i : a->f;
}

bool vq__attr_bool(const vq__infer *c, const char *name, bool dflt)
{
    const vq_attr *a = vq__attr_find(c, name);
    return a ? a->i != 0 : dflt;
}

int vq__attr_dtype(const vq__infer *c, const char *name, vq_dtype dflt, vq_dtype *out)
{
    const vq_attr *a = vq__attr_find(c, name);
    *out = dflt;
    if (a && vq_dtype_parse(a->s, out) < 0)
        return vq__attr_fail(c, name, "unknown dtype \"%s\" (f32, f64, i32, i64, bool)", a->s);
    return 0;
}

/* ---- errors and checks for infer functions ---- */

static int vfail_prefixed(const char *prefix, const char *fmt, va_list ap)
{
    char msg[200];
    vsnprintf(msg, sizeof msg, fmt, ap);
    return vq__fail(VQ_EINVAL, "%s: %s", prefix, msg);
}

int vq__in_fail(const vq__infer *c, int slot, const char *fmt, ...)
{
    char prefix[96];
    snprintf(prefix, sizeof prefix, "%s: input %s (slot %d)", c->def->type,
             vq__op_in_slot(c->def, slot), slot);
    va_list ap;
    va_start(ap, fmt);
    int rc = vfail_prefixed(prefix, fmt, ap);
    va_end(ap);
    return rc;
}

int vq__attr_fail(const vq__infer *c, const char *name, const char *fmt, ...)
{
    char prefix[96];
    snprintf(prefix, sizeof prefix, "%s: attribute %s", c->def->type, name);
    va_list ap;
    va_start(ap, fmt);
    int rc = vfail_prefixed(prefix, fmt, ap);
    va_end(ap);
    return rc;
}

int vq__op_fail(const vq__op_def *def, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = vfail_prefixed(def->type, fmt, ap);
    va_end(ap);
    return rc;
}

struct vq__fail_note *vq__kernel_fail_note(const vq__op_def *def)
{
    const char *msg = vq_errmsg();
    size_t n = strlen(def->type);
    if (!strncmp(msg, def->type, n) && msg[n] == ':' && msg[n + 1] == ' ')
        msg += n + 2; /* the note names the op already */
    return vq__fail_note_new("op '%s' (%s)", def->type, msg);
}

int vq__check_dtype(const vq__infer *c, int slot, unsigned mask)
{
    vq_dtype dt = c->in[slot].dtype;
    if (mask & (1u << dt))
        return 0;
    char allowed[128] = "";
    size_t at = 0;
    for (int i = 0; i < VQ_DTYPE_COUNT && at < sizeof allowed; i++)
        if (mask & (1u << i))
            at += (size_t)snprintf(allowed + at, sizeof allowed - at, "%s%s", at ? ", " : "",
                                   vq_dtype_name((vq_dtype)i));
    return vq__in_fail(c, slot, "dtype %s not supported (%s)", vq_dtype_name(dt), allowed);
}

int vq__check_same_dtype(const vq__infer *c, int a, int b)
{
    if (c->in[a].dtype == c->in[b].dtype)
        return 0;
    return vq__in_fail(c, b, "dtype %s differs from %s's %s", vq_dtype_name(c->in[b].dtype),
                       vq__op_in_slot(c->def, a), vq_dtype_name(c->in[a].dtype));
}

int vq__check_rank(const vq__infer *c, int slot, int ndim)
{
    if (c->in[slot].ndim == ndim)
        return 0;
    return vq__in_fail(c, slot, "has %d dims, expected %d", c->in[slot].ndim, ndim);
}

int vq__check_same_shape(const vq__infer *c, int a, int b)
{
    const vq__meta *x = &c->in[a], *y = &c->in[b];
    bool same = x->ndim == y->ndim;
    for (int i = 0; same && i < x->ndim; i++)
        same = vq__dim_match(x->shape[i], y->shape[i]);
    if (same)
        return 0;
    char sx[100], sy[100];
    return vq__in_fail(c, b, "shape %s differs from %s's %s",
                       vq__shape_str(sy, sizeof sy, y->ndim, y->shape), vq__op_in_slot(c->def, a),
                       vq__shape_str(sx, sizeof sx, x->ndim, x->shape));
}

int vq__check_shape_is(const vq__infer *c, int slot, const vq__meta *want, const char *what)
{
    const vq__meta *g = &c->in[slot];
    bool same = g->ndim == want->ndim;
    for (int i = 0; same && i < g->ndim; i++)
        same = vq__dim_match(g->shape[i], want->shape[i]);
    if (same)
        return 0;
    char a[100], b[100];
    return vq__in_fail(c, slot, "shape %s is not %s %s", vq__shape_str(a, sizeof a, g->ndim, g->shape),
                       what, vq__shape_str(b, sizeof b, want->ndim, want->shape));
}

int vq__broadcast_shapes(const vq__infer *c, int a, int b, vq__meta *out)
{
    const vq__meta *x = &c->in[a], *y = &c->in[b];
    int n = x->ndim > y->ndim ? x->ndim : y->ndim;
    out->ndim = n;
    for (int i = 0; i < n; i++) {
        int ix = x->ndim - n + i, iy = y->ndim - n + i;
        int64_t dx = ix >= 0 ? x->shape[ix] : 1, dy = iy >= 0 ? y->shape[iy] : 1, d;
        if (dx == dy || dy == 1)
            d = dx;
        else if (dx == 1)
            d = dy;
        else if (dx < 0 || dy < 0)
            d = dx < 0 ? dy : dx; /* the unknown one must be 1 or equal */
        else {
            char sx[100], sy[100];
            return vq__in_fail(c, b, "shape %s does not broadcast with %s's %s (dim %d: %lld vs %lld)",
                               vq__shape_str(sy, sizeof sy, y->ndim, y->shape),
                               vq__op_in_slot(c->def, a),
                               vq__shape_str(sx, sizeof sx, x->ndim, x->shape), i, (long long)dx,
                               (long long)dy);
        }
        out->shape[i] = d;
    }
    return 0;
}

int vq__check_broadcast_is(const vq__infer *c, int slot, int a, int b, const char *what)
{
    vq__meta full;
    int rc = vq__broadcast_shapes(c, a, b, &full);
    if (rc < 0)
        return rc;
    full.dtype = c->in[slot].dtype;
    return vq__check_shape_is(c, slot, &full, what);
}

int vq__grad_wanted(const vq__grad *g)
{
    bool any = false;
    for (int i = 0; i < g->nin; i++)
        any |= g->din[i] != NULL;
    if (!any)
        return 0;
    if (!g->dout[0])
        return vq__op_fail(g->def, "no gradient flows into output %s", vq__op_out_slot(g->def, 0));
    return 1;
}

int vq__emit_xy_grads(const vq__grad *g, const char *grad_type)
{
    for (int i = 0; i < 2; i++) {
        if (!g->din[i])
            continue;
        const char *in[3] = {g->dout[0], g->in[0], g->in[1]};
        vq_attr attrs[2] = {VQ_ATTR_S("op", g->def->type), VQ_ATTR_I("wrt", i)};
        int rc = vq__emit(g, grad_type, in, 3, &g->din[i], 1, attrs, 2);
        if (rc < 0)
            return rc;
    }
    return 0;
}

int vq__axis(const vq__infer *c, const char *attr, int64_t axis, int ndim, int *out)
{
    if (axis < -ndim || axis >= (ndim ? ndim : 1))
        return vq__attr_fail(c, attr, "axis %lld is outside [%d, %d) for %d dims",
                             (long long)axis, -ndim, ndim, ndim);
    *out = (int)(axis < 0 ? axis + ndim : axis);
    return 0;
}

/* ---- one call's static check ---- */

int vq__op_infer(const vq__op_def *d, const vq_attr *attrs, int nattrs, int nin,
                 const vq__meta *in, int nout, vq__meta *out, void *params)
{
    return vq__op_infer_vals(d, attrs, nattrs, nin, in, NULL, nout, out, params);
}

int vq__op_infer_vals(const vq__op_def *d, const vq_attr *attrs, int nattrs, int nin,
                      const vq__meta *in, vq_tensor *const *val, int nout, vq__meta *out,
                      void *params)
{
    int rc = vq__op_check_arity(d, nin, nout);
    if (rc < 0)
        return rc;
    if ((rc = attrs_check(d, attrs, nattrs)) < 0)
        return rc;
    for (int i = 0; i < nin; i++)
        if ((unsigned)in[i].dtype >= VQ_DTYPE_COUNT || in[i].ndim < 0 || in[i].ndim > VQ_MAX_DIMS)
            return vq__fail(VQ_EINVAL, "%s: input %s (slot %d) has a bad dtype or rank", d->type,
                            vq__op_in_slot(d, i), i);
    if (d->params_size > VQ__MAX_PARAMS)
        return vq__fail(VQ_EINVAL, "%s: params too large", d->type);
    if ((rc = vq__dtype_gate(d, nin, in, 0, NULL)) < 0)
        return rc;
    memset(params, 0, d->params_size);
    memset(out, 0, (size_t)nout * sizeof *out);
    vq__infer c = {.def = d,
                   .attrs = attrs,
                   .nattrs = nattrs,
                   .nin = nin,
                   .in = in,
                   .nout = nout,
                   .out = out,
                   .params = params,
                   .val = val};
    if ((rc = d->infer(&c)) < 0)
        return rc;
    return vq__dtype_gate(d, 0, NULL, nout, out);
}

int vq__dtype_gate(const vq__op_def *d, int nin, const vq__meta *in, int nout, const vq__meta *out)
{
    if (d->user || (d->flags & VQ__EXT_DTYPES))
        return 0;
    for (int i = 0; i < nin; i++)
        if (!(VQ__BASE_DTYPES & (1u << in[i].dtype)))
            return vq__fail(VQ_ENOSYS,
                            "%s: input %s (slot %d): dtype %s is not supported by %s "
                            "(f32, f64, i32, i64, bool)",
                            d->type, vq__op_in_slot(d, i), i, vq_dtype_name(in[i].dtype), d->type);
    for (int j = 0; j < nout; j++)
        if (!(VQ__BASE_DTYPES & (1u << out[j].dtype)))
            return vq__fail(VQ_ENOSYS,
                            "%s: output %s (slot %d): dtype %s is not supported by %s "
                            "(f32, f64, i32, i64, bool)",
                            d->type, vq__op_out_slot(d, j), j, vq_dtype_name(out[j].dtype),
                            d->type);
    return 0;
}

int vq__values_host(const vq__op_def *d, vq_tensor *const *in, int nin, void *stream,
                    vq_tensor **host)
{
    int rc = 0;
    for (int i = 0; i < nin; i++)
        host[i] = NULL;
    for (int i = 0; i < nin && rc == 0; i++) {
        int slot = i < d->nin_slots ? i : d->nin_slots - 1;
        if (!(d->value_in & (1u << slot)) || !in[i])
            continue;
        if (in[i]->dev.kind == VQ_DEV_CPU) {
            host[i] = in[i];
            continue;
        }
        if ((rc = vq__tensor_empty(&host[i], in[i]->dtype, in[i]->ndim, in[i]->shape)) == 0)
            rc = stream ? vq__tensor_read_on(host[i], in[i], stream)
                        : vq__tensor_copy_sync(host[i], in[i]);
    }
    if (rc < 0)
        vq__values_release(d, in, nin, host);
    return rc;
}

void vq__values_release(const vq__op_def *d, vq_tensor *const *in, int nin, vq_tensor **host)
{
    (void)d;
    for (int i = 0; i < nin; i++) {
        if (host[i] && host[i] != in[i])
            vq_tensor_release(host[i]);
        host[i] = NULL;
    }
}

int vq__ints_arg(const vq__infer *c, int slot, const char *attr, int64_t *out, int max, int *n)
{
    *n = -1;
    if (slot >= c->nin) {
        const vq_attr *a = vq__attr_find(c, attr);
        if (!a)
            return vq__op_fail(c->def, "needs attribute %s or input %s", attr,
                               vq__op_in_slot(c->def, slot));
        if (a->n > max)
            return vq__attr_fail(c, attr, "has %d dims, more than %d", a->n, max);
        if (a->n > 0) /* a list of none may come without an array */
            memcpy(out, a->ints, (size_t)a->n * sizeof *out);
        *n = a->n;
        return 0;
    }
    if (vq__attr_find(c, attr))
        return vq__attr_fail(c, attr, "is given, and so is input %s: give one",
                             vq__op_in_slot(c->def, slot));
    const vq__meta *m = &c->in[slot];
    if (m->dtype != VQ_I64 && m->dtype != VQ_I32)
        return vq__in_fail(c, slot, "is %s, not i64 or i32", vq_dtype_name(m->dtype));
    if (m->ndim != 1)
        return vq__in_fail(c, slot, "has %d dims, not 1", m->ndim);
    if (m->shape[0] > max)
        return vq__in_fail(c, slot, "has %lld dims, more than %d", (long long)m->shape[0], max);
    const vq_tensor *t = c->val ? c->val[slot] : NULL;
    if (!t) {
        *n = (int)m->shape[0]; /* -1 when even its length is unknown */
        return 1;
    }
    for (int64_t k = 0; k < t->numel; k++)
        out[k] = t->dtype == VQ_I64 ? ((const int64_t *)t->data)[k] : ((const int32_t *)t->data)[k];
    *n = (int)t->numel;
    return 0;
}

int vq__kernel_scratch(const vq__kcall *k, vq_dtype dt, int64_t n, const char *what,
                       vq_tensor **out)
{
    *out = NULL;
    if (n == 0)
        return 0;
    int rc = vq__tensor_empty(out, dt, 1, &n);
    if (rc < 0)
        return vq__fail_prefixed(rc, "%s: the %s of %lld elements", k->def->type, what,
                                 (long long)n);
    return 0;
}

int vq__call_slot_fail(int err, const char *type, int i, int nin)
{
    return vq__fail_prefixed(err, "%s: %s %d", type, i < nin ? "input" : "output",
                             i < nin ? i : i - nin);
}

int vq__kernel_run(const vq__kcall *k, vq_ctx dev)
{
    /* On a GPU the backend decides: the CPU kernel as stream work on the
     * emulated one, the op's CUDA kernel on CUDA, VQ_ENOSYS naming the op
     * when it has none there. */
    if (dev.kind == VQ_DEV_GPU) {
        int (*gpu)(const vq__kcall *);
        int rc = vq__gpu_kernel_of(k->def, &gpu);
        return rc < 0 ? rc : gpu(k);
    }
    int (*fn)(const vq__kcall *) =
        (unsigned)dev.kind < VQ__NDEV ? k->def->kernel[dev.kind] : NULL;
    if (!fn)
        return vq__op_fail(k->def, "no kernel for device kind %d in this build", dev.kind);
    return fn(k);
}

int vq__cpu_kernel_check(const vq__op_def *def)
{
    if (def->kernel[VQ_DEV_CPU] || def->kernel_async || (def->flags & VQ__CONTROL))
        return 0;
    return vq__fail(VQ_ENOSYS, "%s: has no CPU kernel (only a GPU one)", def->type);
}

/* ---- the default generator ---- */

bool vq__draws_default(const vq__op_def *def, const void *params)
{
    return (def->flags & VQ__RANDOM) && !((const vq__rng_params *)params)->fixed;
}

/* VARQ_SEED's value as a seed: decimal digits only (strtoull alone would
 * take " 7", "+7" and "-7"), below 2^64. */
static bool parse_seed(const char *s, uint64_t *seed)
{
    if (*s == '\0' || strspn(s, "0123456789") != strlen(s))
        return false;
    errno = 0;
    unsigned long long v = strtoull(s, NULL, 10);
    if (errno == ERANGE)
        return false;
    *seed = (uint64_t)v;
    return true;
}

int vq__env_seed(const char *who, uint64_t *seed)
{
    const char *s = getenv("VARQ_SEED");
    if (!s)
        return 0;
    if (!parse_seed(s, seed))
        return vq__fail(VQ_EINVAL, "%s: VARQ_SEED is \"%.64s\", not decimal digits below 2^64", who,
                        s);
    return 1;
}

/* The process's generator for imperative calls: its seed, read once (a
 * bad VARQ_SEED is kept, to fail every call that draws), and the number
 * of keys handed out. */
static pthread_once_t process_rng_once = PTHREAD_ONCE_INIT;
static uint64_t process_seed;
static bool process_seed_bad;
static char process_bad_seed[72]; /* VARQ_SEED when it was not a seed */
static _Atomic uint64_t process_draws;

static void process_rng_init(void)
{
    const char *s = getenv("VARQ_SEED");
    process_seed = VQ_DEFAULT_SEED;
    if (s && !parse_seed(s, &process_seed)) {
        process_seed_bad = true;
        snprintf(process_bad_seed, sizeof process_bad_seed, "%s", s);
    }
}

int vq__rng_next(const char *who, uint64_t *key)
{
    pthread_once(&process_rng_once, process_rng_init);
    if (process_seed_bad)
        return vq__fail(VQ_EINVAL, "%s: VARQ_SEED is \"%.64s\", not decimal digits below 2^64", who,
                        process_bad_seed);
    /* relaxed: only the number matters, not what other memory it orders */
    uint64_t n = atomic_fetch_add_explicit(&process_draws, 1, memory_order_relaxed);
    *key = vq__rng_fold(process_seed, n);
    return 0;
}

/* ---- imperative calls ---- */

/* What one pushed call owns until it is done: references to its tensors and
 * a copy of its params; for an async kernel, the handle it finishes and the
 * engine op that then completes. */
struct call {
    const vq__op_def *def;
    int nin, nout;
    vq_tensor *t[2 * VQ__MAX_SLOTS];
    _Alignas(16) unsigned char params[VQ__MAX_PARAMS];
    uint64_t rng; /* the default generator's key (vq__kcall.rng) */
    vq_op_done done;
    vq_done *engine_done;
};

static void call_free(void *arg)
{
    struct call *c = arg;
    for (int i = 0; i < c->nin + c->nout; i++)
        vq_tensor_release(c->t[i]);
    free(c);
}

/* The failed kernel's message goes to each output, for vq_tensor_wait;
 * its note (and err) to each output's var, whence the engine passes it to
 * the writes of the ops the failure skips. The call holds write access
 * to those vars (it runs as their op, or finishes it). */
static void note_failure(const vq__op_def *def, vq_tensor *const *out, int nout, int err)
{
    struct vq__fail_note *note = vq__kernel_fail_note(def);
    for (int i = 0; i < nout; i++) {
        char *msg = vq__strdup(vq_errmsg());
        free(atomic_exchange(&out[i]->fail_msg, msg));
        vq_var *v = atomic_load_explicit(&out[i]->var, memory_order_relaxed);
        if (v)
            vq__var_fail_noted(v, err, note);
    }
    vq__fail_note_unref(note); /* the vars hold theirs */
}

/* The kernel call of c, on x's device. */
static vq__kcall call_kcall(struct call *c, const vq_exec_ctx *x)
{
    return (vq__kcall){.def = c->def,
                       .params = c->params,
                       .in = c->t,
                       .nin = c->nin,
                       .out = c->t + c->nin,
                       .nout = c->nout,
                       .x = x,
                       .rng = c->rng};
}

static int call_run(void *arg, const vq_exec_ctx *x)
{
    struct call *c = arg;
    vq__kcall k = call_kcall(c, x);
    int err = vq__kernel_run(&k, x->ctx);
    if (err)
        note_failure(c->def, k.out, k.nout, err);
    return err;
}

/* An async kernel's vq_op_done_finish: the engine op completes. */
static void call_async_finish(vq_op_done *d, int err)
{
    struct call *c = (struct call *)((char *)d - offsetof(struct call, done));
    if (err)
        note_failure(c->def, c->t + c->nin, c->nout, err);
    vq_done_finish(c->engine_done, err);
}

static void call_async(void *arg, const vq_exec_ctx *x, vq_done *done)
{
    struct call *c = arg;
    c->done.finish = call_async_finish;
    c->engine_done = done;
    vq__kcall k = call_kcall(c, x);
    c->def->kernel_async(&k, &c->done);
}

static void meta_of(const vq_tensor *t, vq__meta *m)
{
    m->dtype = t->dtype;
    m->ndim = t->ndim;
    memcpy(m->shape, t->shape, sizeof m->shape);
}

static bool meta_equal(const vq__meta *m, const vq_tensor *t)
{
    if (m->dtype != t->dtype || m->ndim != t->ndim)
        return false;
    for (int i = 0; i < m->ndim; i++)
        if (m->shape[i] != t->shape[i])
            return false;
    return true;
}

/* Checks the given outputs against the inferred metas and for aliasing. */
static int outputs_check(const vq__op_def *d, vq_tensor *const *in, int nin, vq_tensor **out,
                         int nout, const vq__meta *om)
{
    for (int i = 0; i < nout; i++) {
        for (int j = 0; j < nout; j++)
            if (j != i && out[i] && out[i] == out[j])
                return vq__fail(VQ_EINVAL, "%s: outputs %d and %d are the same tensor", d->type, j,
                                i);
        if (!out[i]) {
            for (int k = 0; k < om[i].ndim; k++)
                if (om[i].shape[k] < 0)
                    return vq__fail(VQ_EINVAL, "%s: output %s (slot %d): shape unknown", d->type,
                                    vq__op_out_slot(d, i), i);
            continue;
        }
        if (!meta_equal(&om[i], out[i])) {
            char want[100], got[100];
            return vq__fail(VQ_EINVAL, "%s: output %s (slot %d): expected %s %s, got %s %s",
                            d->type, vq__op_out_slot(d, i), i, vq_dtype_name(om[i].dtype),
                            vq__shape_str(want, sizeof want, om[i].ndim, om[i].shape),
                            vq_dtype_name(out[i]->dtype),
                            vq__shape_str(got, sizeof got, out[i]->ndim, out[i]->shape));
        }
        if (!(d->flags & VQ__INPLACE_OK))
            for (int j = 0; j < nin; j++)
                if (in[j] == out[i])
                    return vq__fail(VQ_EINVAL,
                                    "%s: output %s (slot %d) is also input %d; this op cannot "
                                    "work in place",
                                    d->type, vq__op_out_slot(d, i), i, j);
    }
    return 0;
}

static const char *dev_name(char *buf, size_t size, vq_ctx d)
{
    if (d.kind == VQ_DEV_GPU)
        snprintf(buf, size, "GPU %d", d.id);
    else
        snprintf(buf, size, "the CPU");
    return buf;
}

/* The device of a call: that of its tensors (inputs, then given outputs),
 * which must all agree. VQ_EINVAL naming the first slot that differs. */
static int call_device(const vq__op_def *d, vq_tensor *const *in, int nin, vq_tensor **out,
                       int nout, vq_ctx *dev)
{
    const char *first_kind = NULL;
    const char *first_slot = NULL;
    int first = -1;
    char a[24], b[24];
    *dev = (vq_ctx){VQ_DEV_CPU, 0};
    for (int i = 0; i < nin + nout; i++) {
        const vq_tensor *t = i < nin ? in[i] : out[i - nin];
        if (!t)
            continue;
        const char *kind = i < nin ? "input" : "output";
        const char *slot = i < nin ? vq__op_in_slot(d, i) : vq__op_out_slot(d, i - nin);
        int s = i < nin ? i : i - nin;
        if (!first_kind) {
            *dev = t->dev;
            first_kind = kind;
            first_slot = slot;
            first = s;
        } else if (t->dev.kind != dev->kind || t->dev.id != dev->id) {
            return vq__fail(VQ_EINVAL, "%s: %s %s (slot %d) is on %s, but %s %s (slot %d) is on %s",
                            d->type, kind, slot, s, dev_name(a, sizeof a, t->dev), first_kind,
                            first_slot, first, dev_name(b, sizeof b, *dev));
        }
    }
    return 0;
}

int vq__op_call_check(vq_engine *e, const char *type, vq_tensor *const *in, int nin,
                      vq_tensor **out, int nout, const vq_attr *attrs, int nattrs,
                      const vq__op_def **def, vq__meta *om, void *params, vq_ctx *dev)
{
    if (!type)
        return vq__fail(VQ_EINVAL, "vq_op_run: type is NULL");
    const vq__op_def *d = vq__op_find(type);
    if (!d)
        return vq__fail(VQ_EINVAL, "vq_op_run: unknown op type \"%s\"", type);
    int rc = vq__op_check_arity(d, nin, nout);
    if (rc < 0)
        return rc;
    if ((nin && !in) || (nout && !out))
        return vq__fail(VQ_EINVAL, "%s: inputs or outputs array is NULL", d->type);
    vq__meta im[VQ__MAX_SLOTS];
    for (int i = 0; i < nin; i++) {
        if (!in[i])
            return vq__fail(VQ_EINVAL, "%s: input %s (slot %d) is NULL", d->type,
                            vq__op_in_slot(d, i), i);
        meta_of(in[i], &im[i]);
    }
    if ((rc = call_device(d, in, nin, out, nout, dev)) < 0)
        return rc;
    if (dev->kind == VQ_DEV_GPU) {
        if (!e)
            return vq__fail(VQ_EINVAL, "%s: tensors on GPU %d need an engine (e is NULL)", d->type,
                            dev->id);
        if ((rc = vq__gpu_kernel_check(d)) < 0)
            return rc;
    } else if ((rc = vq__cpu_kernel_check(d)) < 0) {
        return rc;
    }
    vq_tensor *val[VQ__MAX_SLOTS] = {0};
    bool values = vq__reads_values(d, nin);
    if (values) {
        /* the shapes of the outputs depend on these inputs' values: wait
         * for them, as reading their bytes would */
        for (int i = 0; i < nin && rc == 0; i++) {
            int slot = i < d->nin_slots ? i : d->nin_slots - 1;
            if ((d->value_in & (1u << slot)) && e && (rc = vq_tensor_wait(in[i])) < 0)
                rc = vq__call_slot_fail(rc, d->type, i, nin);
        }
        if (rc == 0)
            rc = vq__values_host(d, in, nin, NULL, val);
        if (rc < 0)
            return rc;
    }
    rc = vq__op_infer_vals(d, attrs, nattrs, nin, im, values ? val : NULL, nout, om, params);
    vq__values_release(d, in, nin, val);
    if (rc == 0)
        rc = outputs_check(d, in, nin, out, nout, om);
    if (rc == 0)
        *def = d;
    return rc;
}

VQ_API int vq_op_run(vq_engine *e, const char *type, vq_tensor *const *in, int nin,
                     vq_tensor **out, int nout, const vq_attr *attrs, int nattrs)
{
    /* Capture, when it is in use: records the call, or first pushes the
     * recorded work on its tensors (a layer above; see ops_internal.h). */
    const vq__capture_hooks *hooks = atomic_load_explicit(&vq__capture, memory_order_acquire);
    if (hooks && e) {
        int hrc = hooks->op_run(e, type, in, nin, out, nout, attrs, nattrs);
        if (hrc != VQ__CAPTURE_EAGER)
            return hrc;
    }
    vq__meta om[VQ__MAX_SLOTS];
    _Alignas(16) unsigned char params[VQ__MAX_PARAMS];
    const vq__op_def *d = NULL;
    vq_ctx dev;
    int rc = vq__op_call_check(e, type, in, nin, out, nout, attrs, nattrs, &d, om, params, &dev);
    if (rc < 0)
        return rc;
    /* The key is taken now, in the caller's order of calls, not when the
     * kernel runs. */
    uint64_t rng = 0;
    if (vq__draws_default(d, params) && (rc = vq__rng_next(d->type, &rng)) < 0)
        return rc;
    struct call *c = vq__malloc(sizeof *c);
    if (!c)
        return vq__fail(VQ_ENOMEM, "%s: out of memory", d->type);
    memcpy(c->params, params, d->params_size);
    c->rng = rng;
    c->def = d;
    c->nin = nin;
    c->nout = 0;
    for (int i = 0; i < nin; i++)
        c->t[i] = vq_tensor_retain(in[i]);
    bool created[VQ__MAX_SLOTS] = {false};
    for (int i = 0; i < nout && rc == 0; i++) {
        if (out[i])
            c->t[nin + i] = vq_tensor_retain(out[i]);
        else if ((rc = vq__tensor_empty_on(&c->t[nin + i], dev, om[i].dtype, om[i].ndim,
                                           om[i].shape, "vq_tensor_new")) == 0)
            created[i] = true;
        if (rc == 0)
            c->nout++;
    }
    vq_var *vars[2 * VQ__MAX_SLOTS];
    for (int i = 0; e && rc == 0 && i < nin + nout; i++)
        if ((rc = vq__tensor_var_cut(c->t[i], e, &vars[i])) < 0) /* another engine's, no memory */
            rc = vq__call_slot_fail(rc, d->type, i, nin);
    if (rc == 0 && !e) {
        vq__kcall k = {.def = d,
                       .params = c->params,
                       .in = c->t,
                       .nin = nin,
                       .out = c->t + nin,
                       .nout = nout,
                       .x = NULL,
                       .rng = rng};
        rc = d->kernel[VQ_DEV_CPU] ? vq__kernel_run(&k, (vq_ctx){VQ_DEV_CPU, 0})
                                   : vq__kernel_run_waiting(&k);
    } else if (rc == 0) {
        /* The caller's references first: once pushed, c may be gone. */
        for (int i = 0; i < nout; i++)
            if (created[i])
                out[i] = vq_tensor_retain(c->t[nin + i]);
        bool async = dev.kind == VQ_DEV_CPU && d->kernel_async;
        vq_task t = {.fn = async ? NULL : call_run, .async_fn = async ? call_async : NULL,
                     .arg = c, .arg_free = call_free, .ctx = dev,
                     .reads = vars, .nreads = nin, .writes = vars + nin, .nwrites = nout,
                     .name = d->type};
        rc = vq_push(e, &t);
        if (rc == 0)
            return 0;
        for (int i = 0; i < nout; i++)
            if (created[i]) {
                vq_tensor_release(out[i]);
                out[i] = NULL;
            }
    }
    /* Synchronous run done, or failure: hand out or drop created outputs. */
    for (int i = 0; i < nout; i++)
        if (created[i] && rc == 0)
            out[i] = vq_tensor_retain(c->t[nin + i]);
    call_free(c);
    return rc;
}
