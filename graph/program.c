/* Programs: the graph layer's IR. The builder (vq_program_add_*), the
 * protobuf codec (proto/program.proto, compiled by protoc-c at build time),
 * save and load through files, the text dump and the hash the executor's
 * plan cache keys on.
 *
 * The in-memory form is struct vq_program (graph_internal.h): one program-wide
 * var table with a name index (open addressing, XXH3 of the name), one op
 * table, and blocks that list their ops in order. An op's vars are indices
 * in the positional order of its definition's slots, and its attributes are
 * deep copies normalized to the schema's types (an INT given for a FLOAT is
 * stored as a FLOAT, BOOL values as 0/1), so that two ways of writing the
 * same program encode to the same bytes and hash equal.
 *
 * Decoding is the untrusted path: every count, index, name and attribute of
 * the parsed message is checked to the same rules as the builder's before a
 * program exists, so a decoded program is as safe to walk as a built one.
 * An op whose type the registry does not know is kept (def == NULL, its
 * vars in the order its slots list them) for the executor to report; the
 * slot names it came with are kept after the NUL that ends its type string
 * (see vq__pop_type_dup), so it encodes and dumps as it was read.
 *
 * Encoding is deterministic: blocks in order, each block's vars in the
 * order they were declared, ops in block order, a known op's slots in its
 * definition's order, attributes in the order given. */
#include "graph_internal.h"

#include "program.pb-c.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#define XXH_INLINE_ALL /* the streaming state on the stack */
#include <xxhash.h>

/* An op decoded with more attributes than this is refused: the registry's
 * schemas are far smaller, and unknown ops' names are checked for
 * uniqueness pairwise. */
#define MAX_OP_ATTRS 256

/* ---- errors ---- */

/* ---- tables ---- */

/* arr with room for one more than n elements (realloc'd, doubling), or
 * NULL with arr untouched when memory runs out. */
static void *reserve_one(void *arr, int n, int *cap, size_t elem)
{
    if (n < *cap)
        return arr;
    if (*cap > INT_MAX / 2)
        return NULL;
    int ncap = *cap ? *cap * 2 : 8;
    void *grown = vq__realloc(arr, (size_t)ncap * elem);
    if (grown)
        *cap = ncap;
    return grown;
}

static uint64_t name_hash(const char *name)
{
    return XXH3_64bits(name, strlen(name));
}

int vq__program_find_var(const vq_program *p, const char *name)
{
    if (!p || !name || p->index_cap == 0)
        return -1;
    size_t mask = (size_t)p->index_cap - 1;
    for (size_t i = (size_t)name_hash(name) & mask;; i = (i + 1) & mask) {
        int v = p->index[i];
        if (v < 0 || !strcmp(p->vars[v].name, name))
            return v;
    }
}

/* Puts var v (already in p->vars) into the name index, which is kept at
 * most half full (it never shrinks: vars are never removed). */
static int index_insert(vq_program *p, int v)
{
    if ((int64_t)(p->nvars + 1) * 2 > p->index_cap) {
        if (p->index_cap > INT_MAX / 4)
            return VQ_ENOMEM;
        int cap = p->index_cap ? p->index_cap * 2 : 16;
        int *index = vq__malloc((size_t)cap * sizeof *index);
        if (!index)
            return VQ_ENOMEM;
        for (int i = 0; i < cap; i++)
            index[i] = -1;
        size_t mask = (size_t)cap - 1;
        for (int k = 0; k < p->nvars; k++) {
            size_t i = (size_t)name_hash(p->vars[k].name) & mask;
            while (index[i] >= 0)
                i = (i + 1) & mask;
            index[i] = k;
        }
        free(p->index);
        p->index = index;
        p->index_cap = cap;
    }
    size_t mask = (size_t)p->index_cap - 1;
    size_t i = (size_t)name_hash(p->vars[v].name) & mask;
    while (p->index[i] >= 0)
        i = (i + 1) & mask;
    p->index[i] = v;
    return 0;
}

/* Var var is declared in block or in one of the blocks it is nested in.
 * Parents have smaller indices, so the walk ends. */
static bool var_visible(const vq_program *p, int var, int block)
{
    for (int b = block; b >= 0; b = p->blocks[b].parent)
        if (p->vars[var].block == b)
            return true;
    return false;
}

/* ---- attributes ---- */

static void attr_free(vq_attr *a)
{
    free((char *)a->name);
    free((char *)a->s);
    free((int64_t *)a->ints);
    free((double *)a->floats);
    if (a->strings)
        for (int i = 0; i < a->n; i++)
            free((char *)a->strings[i]);
    free((char **)a->strings);
    memset(a, 0, sizeof *a);
}

static void attrs_free(vq_attr *attrs, int n)
{
    for (int i = 0; i < n; i++)
        attr_free(&attrs[i]);
    free(attrs);
}

/* Deep-copies src into dst as type want (src's own type, or the schema's
 * type it was accepted for: INT for FLOAT or BOOL, INTS for FLOATS or
 * BOOLS). src has passed the schema check, or comes from a parsed message. */
static int attr_copy(vq_attr *dst, const vq_attr *src, vq_attr_type want)
{
    memset(dst, 0, sizeof *dst);
    dst->type = want;
    if (!(dst->name = vq__strdup(src->name)))
        return VQ_ENOMEM;
    switch (want) {
    case VQ_ATTR_INT: dst->i = src->i; return 0;
    case VQ_ATTR_BOOL: dst->i = src->i != 0; return 0;
    case VQ_ATTR_FLOAT: dst->f = src->type == VQ_ATTR_INT ? (double)src->i : src->f; return 0;
    case VQ_ATTR_STRING: return (dst->s = vq__strdup(src->s)) ? 0 : VQ_ENOMEM;
    default: break;
    }
    if (src->n < 0)
        return VQ_EINVAL;
    int n = src->n;
    dst->n = n;
    if (n == 0)
        return 0;
    switch (want) {
    case VQ_ATTR_INTS:
    case VQ_ATTR_BOOLS: {
        int64_t *v = vq__malloc((size_t)n * sizeof *v);
        if (!v)
            return VQ_ENOMEM;
        for (int i = 0; i < n; i++)
            v[i] = want == VQ_ATTR_BOOLS ? src->ints[i] != 0 : src->ints[i];
        dst->ints = v;
        return 0;
    }
    case VQ_ATTR_FLOATS: {
        double *v = vq__malloc((size_t)n * sizeof *v);
        if (!v)
            return VQ_ENOMEM;
        for (int i = 0; i < n; i++)
            v[i] = src->type == VQ_ATTR_INTS ? (double)src->ints[i] : src->floats[i];
        dst->floats = v;
        return 0;
    }
    case VQ_ATTR_STRINGS: {
        char **v = vq__calloc((size_t)n, sizeof *v);
        if (!v)
            return VQ_ENOMEM;
        dst->strings = (const char *const *)v;
        for (int i = 0; i < n; i++)
            if (!src->strings[i] || !(v[i] = vq__strdup(src->strings[i])))
                return src->strings[i] ? VQ_ENOMEM : VQ_EINVAL;
        return 0;
    }
    default: return VQ_EINVAL;
    }
}

/* The schema entry for name in def (which has checked it exists). */
static const vq__attr_spec *attr_spec(const vq__op_def *def, const char *name)
{
    for (int j = 0; j < def->nattrs; j++)
        if (!strcmp(def->attrs[j].name, name))
            return &def->attrs[j];
    return NULL;
}

/* Copies n attributes (checked already) into a new array: as their
 * schema's types for a known op, as they are for an unknown one. */
static int attrs_copy(vq_attr **out, const vq__op_def *def, const vq_attr *attrs, int n,
                      const char *type)
{
    *out = NULL;
    if (n == 0)
        return 0;
    vq_attr *copy = vq__calloc((size_t)n, sizeof *copy);
    if (!copy)
        return vq__fail(VQ_ENOMEM, "%s: out of memory for attributes", type);
    for (int i = 0; i < n; i++) {
        const vq__attr_spec *s = def ? attr_spec(def, attrs[i].name) : NULL;
        int rc = attr_copy(&copy[i], &attrs[i], s ? s->type : attrs[i].type);
        if (rc < 0) {
            attrs_free(copy, i + 1);
            return rc == VQ_ENOMEM
                       ? vq__fail(rc, "%s: out of memory for attributes", type)
                       : vq__fail(rc, "%s: attribute %s: a list entry is NULL", type,
                                  attrs[i].name);
        }
    }
    *out = copy;
    return 0;
}

int vq__pop_attr_set(vq_program *p, int op, const vq_attr *a)
{
    vq__pop *o = &p->ops[op];
    const vq__attr_spec *spec = o->def ? attr_spec(o->def, a->name) : NULL;
    if (o->def && !spec)
        return vq__fail(VQ_EINVAL, "%s: unknown attribute '%s'", o->type, a->name);
    vq_attr copy;
    int rc = attr_copy(&copy, a, spec ? spec->type : a->type);
    if (rc < 0) {
        attr_free(&copy);
        return vq__fail(rc, "%s: attribute %s: cannot copy it", o->type, a->name);
    }
    for (int i = 0; i < o->nattrs; i++)
        if (!strcmp(o->attrs[i].name, a->name)) {
            attr_free(&o->attrs[i]);
            o->attrs[i] = copy;
            p->hash_valid = false;
            return 0;
        }
    vq_attr *grown = vq__realloc(o->attrs, ((size_t)o->nattrs + 1) * sizeof *grown);
    if (!grown) {
        attr_free(&copy);
        return vq__fail(VQ_ENOMEM, "%s: out of memory for attributes", o->type);
    }
    grown[o->nattrs++] = copy;
    o->attrs = grown;
    p->hash_valid = false;
    return 0;
}

/* ---- programs ---- */

static void pop_free(vq__pop *op)
{
    free(op->type);
    free(op->in);
    free(op->out);
    attrs_free(op->attrs, op->nattrs);
    memset(op, 0, sizeof *op);
}

/* The strings after the NUL ending an unknown op's type: see the top. */
static const char *next_packed(const char *s)
{
    return s + strlen(s) + 1;
}

char *vq__pop_type_dup(const vq__pop *op)
{
    const char *end = next_packed(op->type);
    if (!op->def)
        for (int i = 0; i < op->nin + op->nout; i++)
            end = next_packed(end);
    size_t n = (size_t)(end - op->type);
    char *copy = vq__malloc(n);
    if (copy)
        memcpy(copy, op->type, n);
    return copy;
}

VQ_API void vq_program_free(vq_program *p)
{
    if (!p)
        return;
    for (int i = 0; i < p->nvars; i++)
        free(p->vars[i].name);
    for (int i = 0; i < p->nops; i++)
        pop_free(&p->ops[i]);
    for (int i = 0; i < p->nblocks; i++)
        free(p->blocks[i].ops);
    free(p->vars);
    free(p->ops);
    free(p->blocks);
    free(p->index);
    free(p);
}

static void *memdup_n(const void *src, size_t n)
{
    void *d = vq__malloc(n ? n : 1);
    if (d && n)
        memcpy(d, src, n);
    return d;
}

/* A deep copy, field by field: no encoding, no re-validation (p is valid by
 * construction). The executor's plans own one; vq_program_clone is this. */
int vq__program_copy(const vq_program *p, vq_program **out)
{
    vq_program *c = vq__calloc(1, sizeof *c);
    if (!c)
        return vq__fail(VQ_ENOMEM, "program copy: out of memory");
    int rc = 0;
    c->vars = vq__calloc((size_t)(p->nvars ? p->nvars : 1), sizeof *c->vars);
    c->ops = vq__calloc((size_t)(p->nops ? p->nops : 1), sizeof *c->ops);
    c->blocks = vq__calloc((size_t)(p->nblocks ? p->nblocks : 1), sizeof *c->blocks);
    c->index = memdup_n(p->index, (size_t)p->index_cap * sizeof *p->index);
    if (!c->vars || !c->ops || !c->blocks || !c->index)
        rc = VQ_ENOMEM;
    c->vars_cap = p->nvars ? p->nvars : 1;
    c->ops_cap = p->nops ? p->nops : 1;
    c->blocks_cap = p->nblocks ? p->nblocks : 1;
    c->index_cap = p->index_cap;
    for (int i = 0; rc == 0 && i < p->nvars; i++, c->nvars++) {
        c->vars[i] = p->vars[i];
        if (!(c->vars[i].name = vq__strdup(p->vars[i].name)))
            rc = VQ_ENOMEM;
    }
    for (int i = 0; rc == 0 && i < p->nops; i++) {
        const vq__pop *o = &p->ops[i];
        vq__pop *d = &c->ops[i];
        c->nops++; /* counted first: vq_program_free frees what a failure leaves */
        d->def = o->def;
        d->priority = o->priority;
        d->nin = o->nin;
        d->nout = o->nout;
        d->type = vq__pop_type_dup(o);
        d->in = memdup_n(o->in, (size_t)o->nin * sizeof *o->in);
        d->out = memdup_n(o->out, (size_t)o->nout * sizeof *o->out);
        if (!d->type || !d->in || !d->out) {
            rc = VQ_ENOMEM;
            break;
        }
        if (o->nattrs) {
            if (!(d->attrs = vq__calloc((size_t)o->nattrs, sizeof *d->attrs))) {
                rc = VQ_ENOMEM;
                break;
            }
            for (int a = 0; rc == 0 && a < o->nattrs; a++, d->nattrs++)
                rc = attr_copy(&d->attrs[a], &o->attrs[a], o->attrs[a].type);
        }
    }
    for (int b = 0; rc == 0 && b < p->nblocks; b++, c->nblocks++) {
        c->blocks[b] = p->blocks[b];
        c->blocks[b].cap = p->blocks[b].nops;
        if (!(c->blocks[b].ops = memdup_n(p->blocks[b].ops,
                                          (size_t)p->blocks[b].nops * sizeof(int))))
            rc = VQ_ENOMEM;
    }
    if (rc) {
        vq_program_free(c);
        return vq__fail(VQ_ENOMEM, "program copy: out of memory");
    }
    c->hash_valid = false;
    *out = c;
    return 0;
}

static int block_append(vq_program *p, int parent)
{
    vq__block *b = reserve_one(p->blocks, p->nblocks, &p->blocks_cap, sizeof *b);
    if (!b)
        return VQ_ENOMEM;
    p->blocks = b;
    b[p->nblocks] = (vq__block){.parent = parent};
    p->hash_valid = false;
    return p->nblocks++;
}

VQ_API int vq_program_new(vq_program **out)
{
    if (!out)
        return vq__fail(VQ_EINVAL, "vq_program_new: out is NULL");
    *out = NULL;
    vq_program *p = vq__calloc(1, sizeof *p);
    if (!p || block_append(p, -1) < 0) {
        vq_program_free(p);
        return vq__fail(VQ_ENOMEM, "vq_program_new: out of memory");
    }
    *out = p;
    return 0;
}

VQ_API int vq_program_add_block(vq_program *p, int parent)
{
    if (!p)
        return vq__fail(VQ_EINVAL, "vq_program_add_block: program is NULL");
    if (parent < 0 || parent >= p->nblocks)
        return vq__fail(VQ_EINVAL, "vq_program_add_block: parent block %d does not exist (%d blocks)",
                        parent, p->nblocks);
    int rc = block_append(p, parent);
    return rc < 0 ? vq__fail(rc, "vq_program_add_block: out of memory") : rc;
}

/* Declares a var after checking it; who starts the error messages.
 * Returns the var's index. */
static int var_declare(vq_program *p, int block, const char *name, int dtype, int ndim,
                       const int64_t *shape, bool persistable, const char *who)
{
    if (!name || !*name)
        return vq__fail(VQ_EINVAL, "%s: the var's name is %s", who, name ? "empty" : "NULL");
    int prev = vq__program_find_var(p, name);
    if (prev >= 0)
        return vq__fail(VQ_EINVAL, "%s: var \"%s\" is already declared (in block %d)", who, name,
                        p->vars[prev].block);
    if (dtype < 0 || dtype >= VQ_DTYPE_COUNT)
        return vq__fail(VQ_EINVAL, "%s: var \"%s\": dtype %d is not a vq_dtype", who, name, dtype);
    if (ndim < 0 || ndim > VQ_MAX_DIMS || (ndim > 0 && !shape))
        return vq__fail(VQ_EINVAL, "%s: var \"%s\": %d dims%s (0 to %d)", who, name, ndim,
                        ndim > 0 && ndim <= VQ_MAX_DIMS ? " with a NULL shape" : "", VQ_MAX_DIMS);
    for (int i = 0; i < ndim; i++)
        if (shape[i] < -1)
            return vq__fail(VQ_EINVAL, "%s: var \"%s\": dim %d is %lld (>= 0, or -1 for unknown)",
                            who, name, i, (long long)shape[i]);
    vq__pvar *vars = reserve_one(p->vars, p->nvars, &p->vars_cap, sizeof *vars);
    if (!vars)
        return vq__fail(VQ_ENOMEM, "%s: out of memory", who);
    p->vars = vars;
    vq__pvar *v = &vars[p->nvars];
    *v = (vq__pvar){.block = block, .dtype = (vq_dtype)dtype, .ndim = ndim,
                    .persistable = persistable};
    for (int i = 0; i < ndim; i++)
        v->shape[i] = shape[i];
    if (!(v->name = vq__strdup(name)) || index_insert(p, p->nvars) < 0) {
        free(v->name);
        return vq__fail(VQ_ENOMEM, "%s: out of memory", who);
    }
    p->hash_valid = false;
    return p->nvars++;
}

VQ_API int vq_program_add_var(vq_program *p, int block, const char *name, vq_dtype dt,
                              int ndim, const int64_t *shape, bool persistable)
{
    if (!p)
        return vq__fail(VQ_EINVAL, "vq_program_add_var: program is NULL");
    if (block < 0 || block >= p->nblocks)
        return vq__fail(VQ_EINVAL, "vq_program_add_var: block %d does not exist (%d blocks)", block,
                        p->nblocks);
    int rc = var_declare(p, block, name, (int)dt, ndim, shape, persistable, "vq_program_add_var");
    return rc < 0 ? rc : 0;
}

VQ_API int vq_program_set_stop_gradient(vq_program *p, const char *name, bool stop)
{
    if (!p || !name)
        return vq__fail(VQ_EINVAL, "vq_program_set_stop_gradient: NULL argument");
    int v = vq__program_find_var(p, name);
    if (v < 0)
        return vq__fail(VQ_EINVAL, "vq_program_set_stop_gradient: no var %s", name);
    p->vars[v].stop_gradient = stop;
    return 0;
}

VQ_API int vq_program_set_op_priority(vq_program *p, int block, int index, int priority)
{
    if (!p || block < 0 || block >= p->nblocks || index < 0 || index >= p->blocks[block].nops)
        return vq__fail(VQ_EINVAL, "vq_program_set_op_priority: no op %d in block %d", index,
                        block);
    p->ops[p->blocks[block].ops[index]].priority = priority;
    return 0;
}

/* Appends op (checked, its parts owned) to block; on failure frees them.
 * Returns its index in the block. */
static int op_append(vq_program *p, int block, vq__pop *op)
{
    vq__pop *ops = reserve_one(p->ops, p->nops, &p->ops_cap, sizeof *ops);
    if (ops)
        p->ops = ops;
    vq__block *b = &p->blocks[block];
    int *order = ops ? reserve_one(b->ops, b->nops, &b->cap, sizeof *order) : NULL;
    if (!order) {
        int rc = vq__fail(VQ_ENOMEM, "%s: out of memory", op->type);
        pop_free(op);
        return rc;
    }
    b->ops = order;
    p->ops[p->nops] = *op;
    b->ops[b->nops] = p->nops++;
    p->hash_valid = false;
    return b->nops++;
}

/* Looks up one var an op names: declared, and visible from block. who
 * names the op in errors. */
static int op_var(const vq_program *p, int block, const char *who, const char *dir,
                  const char *slot, int i, const char *name)
{
    if (!name)
        return vq__fail(VQ_EINVAL, "%s: %s %s (slot %d): var name is NULL", who, dir, slot, i);
    int v = vq__program_find_var(p, name);
    if (v < 0)
        return vq__fail(VQ_EINVAL, "%s: %s %s (slot %d): var \"%s\" is not declared", who, dir,
                        slot, i, name);
    if (!var_visible(p, v, block))
        return vq__fail(VQ_EINVAL,
                        "%s: %s %s (slot %d): var \"%s\" is declared in block %d, which block %d "
                        "cannot see",
                        who, dir, slot, i, name, p->vars[v].block, block);
    return v;
}

VQ_API int vq_program_add_op(vq_program *p, int block, const char *type,
                             const char *const *inputs, int nin, const char *const *outputs,
                             int nout, const vq_attr *attrs, int nattrs)
{
    static const char who[] = "vq_program_add_op: ";
    if (!p || !type)
        return vq__fail(VQ_EINVAL, "%s%s is NULL", who, p ? "type" : "program");
    const vq__op_def *def = vq__op_find(type);
    if (!def)
        return vq__fail(VQ_EINVAL, "vq_program_add_op: unknown op type \"%s\"", type);
    if (block < 0 || block >= p->nblocks)
        return vq__fail(VQ_EINVAL, "%s%s: block %d does not exist (%d blocks)", who, type, block,
                        p->nblocks);
    int rc = vq__op_check_arity(def, nin, nout);
    if (rc < 0)
        return vq__fail_prefixed(rc, "vq_program_add_op");
    if ((nin && !inputs) || (nout && !outputs))
        return vq__fail(VQ_EINVAL, "%s%s: the inputs or outputs array is NULL", who, type);
    if ((rc = vq__attrs_check(def, attrs, nattrs)) < 0)
        return vq__fail_prefixed(rc, "vq_program_add_op");
    char where[96];
    snprintf(where, sizeof where, "%s%s", who, def->type);
    int in[VQ__MAX_SLOTS], out[VQ__MAX_SLOTS];
    for (int i = 0; i < nin; i++)
        if ((in[i] = op_var(p, block, where, "input", vq__op_in_slot(def, i), i, inputs[i])) < 0)
            return in[i];
    for (int i = 0; i < nout; i++)
        if ((out[i] = op_var(p, block, where, "output", vq__op_out_slot(def, i), i, outputs[i])) <
            0)
            return out[i];

    vq__pop op = {.def = def, .nin = nin, .nout = nout, .nattrs = nattrs};
    op.type = vq__strdup(def->type);
    op.in = vq__malloc((size_t)(nin ? nin : 1) * sizeof *op.in);
    op.out = vq__malloc((size_t)(nout ? nout : 1) * sizeof *op.out);
    if (!op.type || !op.in || !op.out) {
        op.nattrs = 0;
        pop_free(&op);
        return vq__fail(VQ_ENOMEM, "%s%s: out of memory", who, type);
    }
    memcpy(op.in, in, (size_t)nin * sizeof *in);
    memcpy(op.out, out, (size_t)nout * sizeof *out);
    if ((rc = attrs_copy(&op.attrs, def, attrs, nattrs, def->type)) < 0) {
        op.nattrs = 0;
        pop_free(&op);
        return vq__fail_prefixed(rc, "vq_program_add_op");
    }
    return op_append(p, block, &op);
}

VQ_API int vq_program_nblocks(const vq_program *p)
{
    return p ? p->nblocks : vq__fail(VQ_EINVAL, "vq_program_nblocks: program is NULL");
}

static int block_check(const vq_program *p, int block, const char *who)
{
    if (!p)
        return vq__fail(VQ_EINVAL, "%s: program is NULL", who);
    if (block < 0 || block >= p->nblocks)
        return vq__fail(VQ_EINVAL, "%s: block %d does not exist (%d blocks)", who, block,
                        p->nblocks);
    return 0;
}

VQ_API int vq_program_nops(const vq_program *p, int block)
{
    int rc = block_check(p, block, "vq_program_nops");
    return rc < 0 ? rc : p->blocks[block].nops;
}

VQ_API int vq_program_nvars(const vq_program *p, int block)
{
    int rc = block_check(p, block, "vq_program_nvars");
    if (rc < 0)
        return rc;
    int n = 0;
    for (int i = 0; i < p->nvars; i++)
        n += p->vars[i].block == block;
    return n;
}

/* ---- encoding ---- */

/* The message tree of one encoding is built in an arena of zeroed chunks,
 * freed at once after packing; strings and arrays point into the program. */
struct chunk {
    struct chunk *next;
    size_t used, size;
    max_align_t data[];
};

static void *arena_alloc(struct chunk **arena, size_t n)
{
    n = (n + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
    struct chunk *c = *arena;
    if (!c || c->size - c->used < n) {
        size_t size = n > 65536 ? n : 65536;
        if (!(c = vq__malloc(sizeof *c + size)))
            return NULL;
        c->next = *arena;
        c->used = 0;
        c->size = size;
        *arena = c;
    }
    void *at = (char *)c->data + c->used;
    c->used += n;
    memset(at, 0, n);
    return at;
}

static void arena_free(struct chunk *arena)
{
    while (arena) {
        struct chunk *next = arena->next;
        free(arena);
        arena = next;
    }
}

#define ARENA_NEW(arena, T, n) ((T *)arena_alloc((arena), sizeof(T) * (size_t)(n)))

static Varq__Slot *slot_msg(struct chunk **arena, const vq_program *p, const char *name,
                            const int *vars, int n)
{
    Varq__Slot *s = ARENA_NEW(arena, Varq__Slot, 1);
    char **names = ARENA_NEW(arena, char *, n);
    if (!s || !names)
        return NULL;
    varq__slot__init(s);
    s->name = (char *)name;
    s->n_vars = (size_t)n;
    s->vars = names;
    for (int i = 0; i < n; i++)
        names[i] = p->vars[vars[i]].name;
    return s;
}

/* The slots of one side (inputs or outputs) of op: a known op's in its
 * definition's order, an unknown op's as decoded (runs of equal names).
 * *packed walks an unknown op's slot names. */
static int slots_msg(struct chunk **arena, const vq_program *p, const vq__pop *op, bool inputs,
                     const char **packed, Varq__Slot ***out, size_t *nout)
{
    const int *vars = inputs ? op->in : op->out;
    int n = inputs ? op->nin : op->nout;
    const vq__op_def *d = op->def;
    int nslots = 0;
    Varq__Slot **slots;
    if (d) {
        nslots = inputs ? d->nin_slots : d->nout_slots;
        if (!(slots = ARENA_NEW(arena, Varq__Slot *, nslots)))
            return VQ_ENOMEM;
        bool variadic = d->flags & (inputs ? VQ__VARIADIC_IN : VQ__VARIADIC_OUT);
        if (n < nslots) /* an optional last slot that is absent is not written */
            nslots = n;
        for (int s = 0; s < nslots; s++) {
            int count = variadic && s == nslots - 1 ? n - s : 1;
            const char *name = inputs ? d->in_slots[s] : d->out_slots[s];
            if (!(slots[s] = slot_msg(arena, p, name, vars + s, count)))
                return VQ_ENOMEM;
        }
    } else {
        /* Count the runs first, then make one slot per run. */
        const char *s = *packed, *prev = NULL;
        for (int i = 0; i < n; i++, prev = s, s = next_packed(s))
            nslots += !prev || strcmp(s, prev) != 0;
        if (!(slots = ARENA_NEW(arena, Varq__Slot *, nslots)))
            return VQ_ENOMEM;
        s = *packed;
        for (int i = 0, k = 0; i < n; k++) {
            int j = i;
            const char *run = s;
            while (j < n && !strcmp(s, run)) {
                j++;
                s = next_packed(s);
            }
            if (!(slots[k] = slot_msg(arena, p, run, vars + i, j - i)))
                return VQ_ENOMEM;
            i = j;
        }
        *packed = s;
    }
    *out = slots;
    *nout = (size_t)nslots;
    return 0;
}

static Varq__Attr *attr_msg(struct chunk **arena, const vq_attr *a)
{
    Varq__Attr *m = ARENA_NEW(arena, Varq__Attr, 1);
    if (!m)
        return NULL;
    varq__attr__init(m);
    m->name = (char *)a->name;
    switch (a->type) {
    case VQ_ATTR_INT:
        m->value_case = VARQ__ATTR__VALUE_I;
        m->i = a->i;
        return m;
    case VQ_ATTR_FLOAT:
        m->value_case = VARQ__ATTR__VALUE_F;
        m->f = a->f;
        return m;
    case VQ_ATTR_STRING:
        m->value_case = VARQ__ATTR__VALUE_S;
        m->s = (char *)a->s;
        return m;
    case VQ_ATTR_BOOL:
        m->value_case = VARQ__ATTR__VALUE_B;
        m->b = a->i != 0;
        return m;
    case VQ_ATTR_INTS: {
        Varq__Ints *l = ARENA_NEW(arena, Varq__Ints, 1);
        if (!l)
            return NULL;
        varq__ints__init(l);
        l->n_values = (size_t)a->n;
        l->values = (int64_t *)a->ints;
        m->value_case = VARQ__ATTR__VALUE_INTS;
        m->ints = l;
        return m;
    }
    case VQ_ATTR_FLOATS: {
        Varq__Floats *l = ARENA_NEW(arena, Varq__Floats, 1);
        if (!l)
            return NULL;
        varq__floats__init(l);
        l->n_values = (size_t)a->n;
        l->values = (double *)a->floats;
        m->value_case = VARQ__ATTR__VALUE_FLOATS;
        m->floats = l;
        return m;
    }
    case VQ_ATTR_STRINGS: {
        Varq__Strings *l = ARENA_NEW(arena, Varq__Strings, 1);
        if (!l)
            return NULL;
        varq__strings__init(l);
        l->n_values = (size_t)a->n;
        l->values = (char **)a->strings;
        m->value_case = VARQ__ATTR__VALUE_STRINGS;
        m->strings = l;
        return m;
    }
    case VQ_ATTR_BOOLS: {
        Varq__Bools *l = ARENA_NEW(arena, Varq__Bools, 1);
        protobuf_c_boolean *v = ARENA_NEW(arena, protobuf_c_boolean, a->n);
        if (!l || !v)
            return NULL;
        varq__bools__init(l);
        for (int i = 0; i < a->n; i++)
            v[i] = a->ints[i] != 0;
        l->n_values = (size_t)a->n;
        l->values = v;
        m->value_case = VARQ__ATTR__VALUE_BOOLS;
        m->bools = l;
        return m;
    }
    }
    return NULL;
}

static Varq__Op *op_msg(struct chunk **arena, const vq_program *p, const vq__pop *op)
{
    Varq__Op *m = ARENA_NEW(arena, Varq__Op, 1);
    Varq__Attr **attrs = ARENA_NEW(arena, Varq__Attr *, op->nattrs);
    if (!m || !attrs)
        return NULL;
    varq__op__init(m);
    m->type = op->type;
    const char *packed = next_packed(op->type);
    if (slots_msg(arena, p, op, true, &packed, &m->inputs, &m->n_inputs) < 0 ||
        slots_msg(arena, p, op, false, &packed, &m->outputs, &m->n_outputs) < 0)
        return NULL;
    for (int i = 0; i < op->nattrs; i++)
        if (!(attrs[i] = attr_msg(arena, &op->attrs[i])))
            return NULL;
    m->n_attrs = (size_t)op->nattrs;
    m->attrs = attrs;
    m->priority = op->priority;
    return m;
}

/* The whole message for p, or NULL when memory runs out. */
static Varq__Program *program_msg(struct chunk **arena, const vq_program *p)
{
    Varq__Program *m = ARENA_NEW(arena, Varq__Program, 1);
    Varq__Block **blocks = ARENA_NEW(arena, Varq__Block *, p->nblocks);
    size_t *nvars = ARENA_NEW(arena, size_t, p->nblocks);
    if (!m || !blocks || !nvars)
        return NULL;
    varq__program__init(m);
    m->n_blocks = (size_t)p->nblocks;
    m->blocks = blocks;
    for (int i = 0; i < p->nvars; i++)
        nvars[p->vars[i].block]++;
    for (int b = 0; b < p->nblocks; b++) {
        const vq__block *pb = &p->blocks[b];
        Varq__Block *mb = blocks[b] = ARENA_NEW(arena, Varq__Block, 1);
        Varq__Var **vars = ARENA_NEW(arena, Varq__Var *, nvars[b]);
        Varq__Op **ops = ARENA_NEW(arena, Varq__Op *, pb->nops);
        if (!mb || !vars || !ops)
            return NULL;
        varq__block__init(mb);
        mb->parent = pb->parent;
        mb->vars = vars;
        mb->ops = ops;
        mb->n_ops = (size_t)pb->nops;
        for (int k = 0; k < pb->nops; k++)
            if (!(ops[k] = op_msg(arena, p, &p->ops[pb->ops[k]])))
                return NULL;
    }
    for (int i = 0; i < p->nvars; i++) {
        const vq__pvar *v = &p->vars[i];
        Varq__Var *mv = ARENA_NEW(arena, Varq__Var, 1);
        if (!mv)
            return NULL;
        varq__var__init(mv);
        mv->name = v->name;
        mv->dtype = (Varq__DataType)v->dtype;
        mv->n_shape = (size_t)v->ndim;
        mv->shape = (int64_t *)v->shape;
        mv->persistable = v->persistable;
        mv->stop_gradient = v->stop_gradient;
        Varq__Block *mb = blocks[v->block];
        mb->vars[mb->n_vars++] = mv;
    }
    return m;
}

VQ_API int vq_program_encode(const vq_program *p, void **buf, size_t *len)
{
    if (!p || !buf || !len)
        return vq__fail(VQ_EINVAL, "vq_program_encode: %s is NULL",
                        !p ? "program" : !buf ? "buf" : "len");
    *buf = NULL;
    *len = 0;
    struct chunk *arena = NULL;
    Varq__Program *m = program_msg(&arena, p);
    size_t n = m ? varq__program__get_packed_size(m) : 0;
    uint8_t *bytes = m ? vq__malloc(n ? n : 1) : NULL;
    if (!bytes) {
        arena_free(arena);
        return vq__fail(VQ_ENOMEM, "vq_program_encode: out of memory");
    }
    size_t packed = varq__program__pack(m, bytes);
    arena_free(arena);
    if (packed != n) {
        free(bytes);
        return vq__fail(VQ_EINVAL, "vq_program_encode: packed %zu bytes, expected %zu", packed, n);
    }
    *buf = bytes;
    *len = n;
    return 0;
}

/* ---- decoding ---- */

/* Which of the proto slots carries definition slot `name`: its index, or a
 * negative error (missing, given twice). */
static int slot_find(Varq__Slot *const *slots, size_t n, const char *name, const char *where,
                     const char *dir)
{
    int found = -1;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(slots[i]->name, name) != 0)
            continue;
        if (found >= 0)
            return vq__fail(VQ_EINVAL, "%s: %s slot %s is given twice", where, dir, name);
        found = (int)i;
    }
    if (found < 0)
        return vq__fail(VQ_EINVAL, "%s: %s slot %s is missing", where, dir, name);
    return found;
}

/* Maps one side of a decoded op to var indices in positional order: a known
 * op's by its definition's slots, an unknown op's as listed. For an unknown
 * op, *names gets the slot name of each var. */
static int slots_decode(vq_program *p, int block, const vq__op_def *d, Varq__Slot *const *slots,
                        size_t nslots, bool inputs, const char *where, int **vars_out, int *n_out,
                        const char ***names)
{
    const char *dir = inputs ? "input" : "output";
    size_t total = 0; /* at most the message's length: no overflow */
    for (size_t i = 0; i < nslots; i++) {
        if (!slots[i] || !slots[i]->name || !*slots[i]->name)
            return vq__fail(VQ_EINVAL, "%s: %s slot %zu has no name", where, dir, i);
        total += slots[i]->n_vars;
    }
    if (total > VQ__MAX_SLOTS)
        return vq__fail(VQ_EINVAL, "%s: %zu %s vars (at most %d)", where, total, dir,
                        VQ__MAX_SLOTS);
    int *order = NULL; /* order[k]: which proto slot holds definition slot k */
    if (d) {
        int ndef = inputs ? d->nin_slots : d->nout_slots;
        const char *const *def_slots = inputs ? d->in_slots : d->out_slots;
        bool variadic = d->flags & (inputs ? VQ__VARIADIC_IN : VQ__VARIADIC_OUT);
        bool optional = d->flags & (inputs ? VQ__OPTIONAL_IN : VQ__OPTIONAL_OUT);
        if (optional && ndef > 0) { /* the last slot may be left out */
            bool present = false;
            for (size_t i = 0; i < nslots && !present; i++)
                present = !strcmp(slots[i]->name, def_slots[ndef - 1]);
            if (!present)
                ndef--;
        }
        for (size_t i = 0; i < nslots; i++) {
            bool known = false;
            for (int k = 0; k < ndef && !known; k++)
                known = !strcmp(slots[i]->name, def_slots[k]);
            if (!known)
                return vq__fail(VQ_EINVAL, "%s: unknown %s slot %s", where, dir, slots[i]->name);
        }
        order = vq__malloc((size_t)(ndef ? ndef : 1) * sizeof *order);
        if (!order)
            return vq__fail(VQ_ENOMEM, "%s: out of memory", where);
        for (int k = 0; k < ndef; k++) {
            int s = slot_find(slots, nslots, def_slots[k], where, dir);
            if (s < 0) {
                free(order);
                return s;
            }
            size_t n = slots[s]->n_vars;
            bool many = variadic && k == ndef - 1;
            if (many ? n < 1 : n != 1) {
                free(order);
                return vq__fail(VQ_EINVAL, "%s: %s slot %s lists %zu vars, expected %s", where,
                                dir, def_slots[k], n, many ? "1 or more" : "1");
            }
            order[k] = s;
        }
        nslots = (size_t)ndef;
    }
    int *vars = vq__malloc((total ? total : 1) * sizeof *vars);
    const char **slot_names = d ? NULL : vq__malloc((total ? total : 1) * sizeof *slot_names);
    if (!vars || (!d && !slot_names)) {
        free(order);
        free(vars);
        free(slot_names);
        return vq__fail(VQ_ENOMEM, "%s: out of memory", where);
    }
    int n = 0, rc = 0;
    for (size_t k = 0; k < nslots && rc >= 0; k++) {
        const Varq__Slot *s = slots[order ? order[k] : (int)k];
        for (size_t j = 0; j < s->n_vars && rc >= 0; j++, n++) {
            rc = vars[n] = op_var(p, block, where, dir, s->name, n, s->vars[j]);
            if (slot_names)
                slot_names[n] = s->name;
        }
    }
    free(order);
    if (rc < 0) {
        free(vars);
        free(slot_names);
        return rc;
    }
    *vars_out = vars;
    *n_out = n;
    if (names)
        *names = slot_names;
    return 0;
}

/* A view of a parsed attribute as a vq_attr (pointing into the message;
 * BOOLS values go through *tmp, which the caller frees). */
static int attr_view(const Varq__Attr *m, vq_attr *a, int64_t **tmp, const char *where)
{
    memset(a, 0, sizeof *a);
    *tmp = NULL;
    if (!m->name || !*m->name)
        return vq__fail(VQ_EINVAL, "%s: an attribute has no name", where);
    a->name = m->name;
    size_t n = 0;
    switch (m->value_case) {
    case VARQ__ATTR__VALUE_I: a->type = VQ_ATTR_INT, a->i = m->i; return 0;
    case VARQ__ATTR__VALUE_F: a->type = VQ_ATTR_FLOAT, a->f = m->f; return 0;
    case VARQ__ATTR__VALUE_B: a->type = VQ_ATTR_BOOL, a->i = m->b != 0; return 0;
    case VARQ__ATTR__VALUE_S:
        if (!m->s)
            break;
        a->type = VQ_ATTR_STRING, a->s = m->s;
        return 0;
    case VARQ__ATTR__VALUE_INTS:
        if (!m->ints)
            break;
        a->type = VQ_ATTR_INTS, a->ints = m->ints->values, n = m->ints->n_values;
        break;
    case VARQ__ATTR__VALUE_FLOATS:
        if (!m->floats)
            break;
        a->type = VQ_ATTR_FLOATS, a->floats = m->floats->values, n = m->floats->n_values;
        break;
    case VARQ__ATTR__VALUE_STRINGS:
        if (!m->strings)
            break;
        a->type = VQ_ATTR_STRINGS, a->strings = (const char *const *)m->strings->values;
        n = m->strings->n_values;
        for (size_t i = 0; i < n; i++)
            if (!m->strings->values[i])
                return vq__fail(VQ_EINVAL, "%s: attribute %s: entry %zu is NULL", where, a->name,
                                i);
        break;
    case VARQ__ATTR__VALUE_BOOLS:
        if (!m->bools)
            break;
        n = m->bools->n_values;
        if (n > INT_MAX)
            break;
        if (n && !(*tmp = vq__malloc(n * sizeof **tmp)))
            return vq__fail(VQ_ENOMEM, "%s: out of memory", where);
        for (size_t i = 0; i < n; i++)
            (*tmp)[i] = m->bools->values[i] != 0;
        a->type = VQ_ATTR_BOOLS, a->ints = *tmp;
        break;
    default: break;
    }
    if (!a->type)
        return vq__fail(VQ_EINVAL, "%s: attribute %s has no value", where, m->name);
    if (n > INT_MAX)
        return vq__fail(VQ_EINVAL, "%s: attribute %s: list of %zu", where, a->name, n);
    a->n = (int)n;
    return 0;
}

/* Checks and copies a decoded op's attributes: a known op's against its
 * schema, an unknown op's for names only. */
static int attrs_decode(const vq__op_def *d, Varq__Attr *const *msgs, size_t n, const char *type,
                        const char *where, vq_attr **out)
{
    *out = NULL;
    if (n == 0)
        return 0;
    if (n > MAX_OP_ATTRS)
        return vq__fail(VQ_EINVAL, "%s: %zu attributes (at most %d)", where, n, MAX_OP_ATTRS);
    vq_attr views[MAX_OP_ATTRS];
    int64_t *tmp[MAX_OP_ATTRS];
    int rc = 0;
    size_t made = 0;
    for (; made < n && rc >= 0; made++)
        rc = attr_view(msgs[made], &views[made], &tmp[made], where);
    if (rc >= 0 && d && (rc = vq__attrs_check(d, views, (int)n)) < 0)
        rc = vq__fail_prefixed(rc, "%s", where);
    for (size_t i = 0; rc >= 0 && !d && i < n; i++)
        for (size_t j = 0; j < i && rc >= 0; j++)
            if (!strcmp(views[i].name, views[j].name))
                rc = vq__fail(VQ_EINVAL, "%s: attribute %s given twice", where, views[i].name);
    if (rc >= 0 && (rc = attrs_copy(out, d, views, (int)n, type)) < 0)
        rc = vq__fail_prefixed(rc, "%s", where);
    for (size_t i = 0; i < made; i++)
        free(tmp[i]);
    return rc;
}

/* The type string of an unknown op: type, NUL, then each input's and each
 * output's slot name, each ending in NUL. */
static char *packed_type(const char *type, const char **in_names, int nin,
                         const char **out_names, int nout)
{
    size_t n = strlen(type) + 1;
    for (int i = 0; i < nin; i++)
        n += strlen(in_names[i]) + 1;
    for (int i = 0; i < nout; i++)
        n += strlen(out_names[i]) + 1;
    char *s = vq__malloc(n), *at = s;
    if (!s)
        return NULL;
    at = stpcpy(at, type) + 1;
    for (int i = 0; i < nin; i++)
        at = stpcpy(at, in_names[i]) + 1;
    for (int i = 0; i < nout; i++)
        at = stpcpy(at, out_names[i]) + 1;
    return s;
}

static int op_decode(vq_program *p, int block, size_t k, const Varq__Op *m)
{
    char where[128];
    if (!m->type || !*m->type)
        return vq__fail(VQ_EINVAL, "vq_program_decode: block %d op %zu has no type", block, k);
    snprintf(where, sizeof where, "vq_program_decode: block %d op %zu (%.60s)", block, k, m->type);
    const vq__op_def *d = vq__op_find(m->type);
    vq__pop op = {.def = d, .priority = m->priority};
    const char **in_names = NULL, **out_names = NULL;
    int rc = slots_decode(p, block, d, m->inputs, m->n_inputs, true, where, &op.in, &op.nin,
                          d ? NULL : &in_names);
    if (rc >= 0)
        rc = slots_decode(p, block, d, m->outputs, m->n_outputs, false, where, &op.out, &op.nout,
                          d ? NULL : &out_names);
    if (rc >= 0 && d && (rc = vq__op_check_arity(d, op.nin, op.nout)) < 0)
        rc = vq__fail_prefixed(rc, "%s", where);
    if (rc >= 0 && (rc = attrs_decode(d, m->attrs, m->n_attrs, m->type, where, &op.attrs)) >= 0)
        op.nattrs = (int)m->n_attrs;
    if (rc >= 0) {
        op.type = d ? vq__strdup(m->type) : packed_type(m->type, in_names, op.nin, out_names, op.nout);
        if (!op.type)
            rc = vq__fail(VQ_ENOMEM, "%s: out of memory", where);
    }
    free(in_names);
    free(out_names);
    if (rc < 0) {
        pop_free(&op);
        return rc;
    }
    rc = op_append(p, block, &op);
    return rc < 0 ? vq__fail_prefixed(rc, "vq_program_decode") : 0;
}

/* Fills the empty program p from m, checking everything. */
static int program_decode(vq_program *p, const Varq__Program *m)
{
    if (m->n_blocks == 0)
        return vq__fail(VQ_EINVAL, "vq_program_decode: no blocks (a program has a main block)");
    if (m->n_blocks > INT_MAX / 2)
        return vq__fail(VQ_EINVAL, "vq_program_decode: %zu blocks", m->n_blocks);
    char who[96];
    for (size_t b = 0; b < m->n_blocks; b++) {
        int parent = m->blocks[b]->parent;
        if (b == 0 ? parent != -1 : parent < 0 || (size_t)parent >= b)
            return vq__fail(VQ_EINVAL,
                            "vq_program_decode: block %zu has parent %d (expected %s)", b, parent,
                            b == 0 ? "-1" : "an earlier block");
        if (block_append(p, parent) < 0)
            return vq__fail(VQ_ENOMEM, "vq_program_decode: out of memory");
    }
    for (size_t b = 0; b < m->n_blocks; b++) {
        const Varq__Block *mb = m->blocks[b];
        for (size_t i = 0; i < mb->n_vars; i++) {
            const Varq__Var *v = mb->vars[i];
            snprintf(who, sizeof who, "vq_program_decode: block %zu var %zu", b, i);
            if (v->n_shape > VQ_MAX_DIMS)
                return vq__fail(VQ_EINVAL, "%s: %zu dims (at most %d)", who, v->n_shape,
                                VQ_MAX_DIMS);
            int rc = var_declare(p, (int)b, v->name, (int)v->dtype, (int)v->n_shape, v->shape,
                                 v->persistable, who);
            if (rc < 0)
                return rc;
            p->vars[p->nvars - 1].stop_gradient = v->stop_gradient;
        }
    }
    for (size_t b = 0; b < m->n_blocks; b++) {
        const Varq__Block *mb = m->blocks[b];
        for (size_t k = 0; k < mb->n_ops; k++) {
            int rc = op_decode(p, (int)b, k, mb->ops[k]);
            if (rc < 0)
                return rc;
        }
    }
    p->hash_valid = false;
    return 0;
}

VQ_API int vq_program_decode(vq_program **out, const void *buf, size_t len)
{
    if (!out)
        return vq__fail(VQ_EINVAL, "vq_program_decode: out is NULL");
    *out = NULL;
    if (!buf && len)
        return vq__fail(VQ_EINVAL, "vq_program_decode: buf is NULL");
    static const uint8_t empty[1];
    unsigned failed = vq__protobuf_failed_allocs();
    Varq__Program *m = varq__program__unpack(&vq__protobuf_allocator, len, buf ? buf : empty);
    if (!m && vq__protobuf_failed_allocs() != failed)
        return vq__fail(VQ_ENOMEM, "vq_program_decode: out of memory while parsing %zu bytes",
                        len);
    if (!m)
        return vq__fail(VQ_EINVAL, "vq_program_decode: %zu bytes are not a valid program "
                        "(protobuf parse failed)", len);
    vq_program *p = vq__calloc(1, sizeof *p);
    int rc = p ? program_decode(p, m) : vq__fail(VQ_ENOMEM, "vq_program_decode: out of memory");
    varq__program__free_unpacked(m, &vq__protobuf_allocator);
    if (rc < 0) {
        vq_program_free(p);
        return rc;
    }
    *out = p;
    return 0;
}

/* ---- files ---- */

VQ_API int vq_program_save(const vq_program *p, const char *path)
{
    if (!path)
        return vq__fail(VQ_EINVAL, "vq_program_save: path is NULL");
    void *buf;
    size_t n;
    int rc = vq_program_encode(p, &buf, &n);
    if (rc < 0)
        return rc;
    vq__file_part part = {buf, n};
    rc = vq__file_replace(path, &part, 1);
    free(buf);
    return rc;
}

VQ_API int vq_program_load(vq_program **out, const char *path)
{
    if (!out)
        return vq__fail(VQ_EINVAL, "vq_program_load: out is NULL");
    *out = NULL;
    if (!path)
        return vq__fail(VQ_EINVAL, "vq_program_load: path is NULL");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return vq__io_fail(path, "", errno);
    /* Read until the end, growing the buffer: pipes have no size. */
    size_t len = 0, cap = 0;
    char *buf = NULL;
    int rc = 0;
    for (;;) {
        if (len == cap) {
            size_t ncap = cap ? cap * 2 : 65536;
            char *grown = ncap > cap ? vq__realloc(buf, ncap) : NULL;
            if (!grown) {
                rc = vq__fail(VQ_ENOMEM, "%s: out of memory after %zu bytes", path, len);
                break;
            }
            buf = grown;
            cap = ncap;
        }
        ssize_t r = read(fd, buf + len, cap - len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            rc = vq__io_fail(path, "", errno);
            break;
        }
        if (r == 0)
            break;
        len += (size_t)r;
    }
    close(fd);
    if (rc == 0 && (rc = vq_program_decode(out, buf, len)) < 0)
        rc = vq__fail_prefixed(rc, "%s", path);
    free(buf);
    return rc;
}

/* ---- text ---- */

/* The shortest %g form that reads back as v. */
static void put_float(FILE *f, double v)
{
    char s[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(s, sizeof s, "%.*g", prec, v);
        if (strtod(s, NULL) == v || isnan(v))
            break;
    }
    fputs(s, f);
}

static void put_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c == '"' || *c == '\\')
            fprintf(f, "\\%c", *c);
        else if (*c == '\n')
            fputs("\\n", f);
        else if (*c == '\t')
            fputs("\\t", f);
        else if (*c < 0x20 || *c == 0x7f)
            fprintf(f, "\\x%02x", *c);
        else
            fputc(*c, f);
    }
    fputc('"', f);
}

static void put_attr(FILE *f, const vq_attr *a)
{
    fprintf(f, "%s=", a->name);
    switch (a->type) {
    case VQ_ATTR_INT: fprintf(f, "%lld", (long long)a->i); return;
    case VQ_ATTR_FLOAT: put_float(f, a->f); return;
    case VQ_ATTR_STRING: put_string(f, a->s); return;
    case VQ_ATTR_BOOL: fputs(a->i ? "true" : "false", f); return;
    default: break;
    }
    fputc('[', f);
    for (int i = 0; i < a->n; i++) {
        if (i)
            fputs(", ", f);
        switch (a->type) {
        case VQ_ATTR_INTS: fprintf(f, "%lld", (long long)a->ints[i]); break;
        case VQ_ATTR_FLOATS: put_float(f, a->floats[i]); break;
        case VQ_ATTR_STRINGS: put_string(f, a->strings[i]); break;
        default: fputs(a->ints[i] ? "true" : "false", f); break;
        }
    }
    fputc(']', f);
}

/* "X=x, Y=[a, b]": a known op's slots in definition order (a variadic slot
 * always in brackets), an unknown op's runs of equal slot names (brackets
 * for more than one var). */
static void put_slots(FILE *f, const vq_program *p, const vq__pop *op, bool inputs,
                      const char **packed)
{
    const int *vars = inputs ? op->in : op->out;
    int n = inputs ? op->nin : op->nout;
    const vq__op_def *d = op->def;
    int nslots = d ? (inputs ? d->nin_slots : d->nout_slots) : 0;
    bool variadic = d && (d->flags & (inputs ? VQ__VARIADIC_IN : VQ__VARIADIC_OUT));
    for (int i = 0, s = 0; i < n; s++) {
        const char *name;
        int count = 1;
        if (d) {
            name = inputs ? d->in_slots[s] : d->out_slots[s];
            if (variadic && s == nslots - 1)
                count = n - i;
        } else {
            name = *packed;
            const char *next = next_packed(name);
            while (i + count < n && !strcmp(next, name)) {
                count++;
                next = next_packed(next);
            }
            *packed = next;
        }
        bool list = d ? variadic && s == nslots - 1 : count > 1;
        fprintf(f, "%s%s=%s", s ? ", " : "", name, list ? "[" : "");
        for (int j = 0; j < count; j++)
            fprintf(f, "%s%s", j ? ", " : "", p->vars[vars[i + j]].name);
        fputs(list ? "]" : "", f);
        i += count;
    }
}

/* ---- the dump's nesting of control-flow blocks ----
 *
 * A block is shown under the cond or while op that names it, which the
 * dump calls its user: the first op, in program order from block 0 down,
 * whose then_block, else_block or body_block attribute is that block and
 * that lives in the block's parent (the executor takes blocks the same way
 * and refuses the rest). A block with no user is shown at the end as
 * "block N (parent P):", with its own nested blocks under its ops. */

struct dump_ctx {
    const vq_program *p;
    int *user; /* block -> index in p->ops of its user, or -1 */
};

/* A var list in first-added order, without repeats. */
struct var_list {
    int *v;
    int n, cap;
};

static int var_list_add(struct var_list *l, int v)
{
    for (int i = 0; i < l->n; i++)
        if (l->v[i] == v)
            return 0;
    int *grown = reserve_one(l->v, l->n, &l->cap, sizeof *l->v);
    if (!grown)
        return vq__fail(VQ_ENOMEM, "vq_program_dump: out of memory");
    l->v = grown;
    l->v[l->n++] = v;
    return 0;
}

static const vq_attr *attr_named(const vq__pop *op, const char *name, vq_attr_type type)
{
    for (int i = 0; i < op->nattrs; i++)
        if (!strcmp(op->attrs[i].name, name))
            return op->attrs[i].type == type ? &op->attrs[i] : NULL;
    return NULL;
}

/* One block a control op names: its role in the header ("then", "else",
 * "body") and, for a cond's branch, the attribute listing its outputs
 * (which may name vars of enclosing blocks: those are read too). */
struct ctl_block {
    int block;
    const char *role;
    const vq_attr *outputs;
};

/* The blocks op (p->ops[o]) names that exist and are children of block b,
 * in attribute order; a cond naming one block twice lists it once. */
static int ctl_blocks_named(const vq_program *p, int b, int o, struct ctl_block out[2])
{
    static const char *const cond_block[2] = {"then_block", "else_block"};
    static const char *const cond_outputs[2] = {"then_outputs", "else_outputs"};
    static const char *const cond_role[2] = {"then", "else"};
    const vq__pop *op = &p->ops[o];
    if (!op->def || !(op->def->flags & VQ__CONTROL))
        return 0;
    bool is_while = !strcmp(op->def->type, "while");
    int n = 0;
    for (int i = 0; i < (is_while ? 1 : 2); i++) {
        const vq_attr *a = attr_named(op, is_while ? "body_block" : cond_block[i], VQ_ATTR_INT);
        if (!a || a->i <= 0 || a->i >= p->nblocks || p->blocks[a->i].parent != b ||
            (n == 1 && out[0].block == a->i))
            continue;
        out[n++] = (struct ctl_block){
            .block = (int)a->i,
            .role = is_while ? "body" : cond_role[i],
            .outputs = is_while ? NULL : attr_named(op, cond_outputs[i], VQ_ATTR_STRINGS),
        };
    }
    return n;
}

/* The blocks of op o (in block b) that o is the user of. */
static int ctl_blocks_used(const struct dump_ctx *d, int b, int o, struct ctl_block out[2])
{
    int n = ctl_blocks_named(d->p, b, o, out), kept = 0;
    for (int i = 0; i < n; i++)
        if (d->user[out[i].block] == o)
            out[kept++] = out[i];
    return kept;
}

/* Makes the control ops of block b, in order, the users of the blocks they
 * name that have none yet, and does the same inside those blocks. */
static void claim_blocks(struct dump_ctx *d, int b)
{
    const vq__block *pb = &d->p->blocks[b];
    for (int k = 0; k < pb->nops; k++) {
        struct ctl_block cb[2];
        int o = pb->ops[k], n = ctl_blocks_named(d->p, b, o, cb);
        for (int i = 0; i < n; i++) {
            if (d->user[cb[i].block] >= 0)
                continue;
            d->user[cb[i].block] = o;
            claim_blocks(d, cb[i].block);
        }
    }
}

static int ctl_reads(const struct dump_ctx *d, int b, int o, struct var_list *out);

/* Appends to out, in first-read order, the vars of blocks enclosing b that
 * the ops of b read, the blocks of its control ops included (through what
 * those ops read from outside them). */
static int block_outer_reads(const struct dump_ctx *d, int b, struct var_list *out)
{
    const vq_program *p = d->p;
    const vq__block *pb = &p->blocks[b];
    int rc = 0;
    for (int k = 0; k < pb->nops && rc == 0; k++) {
        const vq__pop *op = &p->ops[pb->ops[k]];
        for (int i = 0; i < op->nin && rc == 0; i++)
            if (p->vars[op->in[i]].block != b)
                rc = var_list_add(out, op->in[i]);
        struct var_list inner = {0};
        if (rc == 0)
            rc = ctl_reads(d, b, pb->ops[k], &inner);
        for (int i = 0; i < inner.n && rc == 0; i++)
            if (p->vars[inner.v[i]].block != b)
                rc = var_list_add(out, inner.v[i]);
        free(inner.v);
    }
    return rc;
}

/* What the executor adds to the inputs of control op o (in block b): the
 * vars its blocks read from enclosing blocks, nested blocks included, and
 * a cond's branch outputs that are such vars, less those its inputs list;
 * in the order the executor meets them. Nothing for other ops. */
static int ctl_reads(const struct dump_ctx *d, int b, int o, struct var_list *out)
{
    const vq_program *p = d->p;
    const vq__pop *op = &p->ops[o];
    struct ctl_block cb[2];
    int n = ctl_blocks_used(d, b, o, cb), rc = 0;
    struct var_list all = {0};
    for (int j = 0; j < n && rc == 0; j++) {
        rc = block_outer_reads(d, cb[j].block, &all);
        const vq_attr *a = cb[j].outputs;
        for (int k = 0; a && k < a->n && rc == 0; k++) {
            int v = vq__program_find_var(p, a->strings[k]);
            if (v >= 0 && p->vars[v].block != cb[j].block && var_visible(p, v, cb[j].block))
                rc = var_list_add(&all, v);
        }
    }
    for (int i = 0; i < all.n && rc == 0; i++) {
        bool listed = false;
        for (int j = 0; j < op->nin && !listed; j++)
            listed = op->in[j] == all.v[i];
        if (!listed)
            rc = var_list_add(out, all.v[i]);
    }
    free(all.v);
    return rc;
}

/* Block b's vars and ops, indent spaces in; each control op followed by
 * the vars it reads from outside beyond its inputs, and its blocks. */
static int dump_block(const struct dump_ctx *d, FILE *f, int b, int indent)
{
    const vq_program *p = d->p;
    for (int i = 0; i < p->nvars; i++) {
        const vq__pvar *v = &p->vars[i];
        if (v->block != b)
            continue;
        fprintf(f, "%*svar %s : %s[", indent, "", v->name, vq_dtype_name(v->dtype));
        for (int k = 0; k < v->ndim; k++) {
            if (k)
                fputc(',', f);
            if (v->shape[k] < 0)
                fputc('?', f);
            else
                fprintf(f, "%lld", (long long)v->shape[k]);
        }
        fprintf(f, "]%s%s\n", v->persistable ? " persistable" : "",
                v->stop_gradient ? " stop_gradient" : "");
    }
    const vq__block *pb = &p->blocks[b];
    for (int k = 0; k < pb->nops; k++) {
        const vq__pop *op = &p->ops[pb->ops[k]];
        const char *packed = next_packed(op->type);
        fprintf(f, "%*sop %d %s(", indent, "", k, op->type);
        put_slots(f, p, op, true, &packed);
        fputs(") -> (", f);
        put_slots(f, p, op, false, &packed);
        fputc(')', f);
        for (int i = 0; i < op->nattrs; i++) {
            fputs(i ? ", " : " {", f);
            put_attr(f, &op->attrs[i]);
        }
        fputs(op->nattrs ? "}" : "", f);
        if (op->priority)
            fprintf(f, " priority %d", op->priority);
        fputc('\n', f);

        struct ctl_block cb[2];
        int n = ctl_blocks_used(d, b, pb->ops[k], cb);
        if (n == 0)
            continue;
        struct var_list reads = {0};
        int rc = ctl_reads(d, b, pb->ops[k], &reads);
        if (rc == 0 && reads.n > 0) {
            fprintf(f, "%*s# reads also: ", indent + 2, "");
            for (int i = 0; i < reads.n; i++)
                fprintf(f, "%s%s", i ? ", " : "", p->vars[reads.v[i]].name);
            fputc('\n', f);
        }
        free(reads.v);
        if (rc)
            return rc;
        for (int j = 0; j < n; j++) {
            fprintf(f, "%*sblock %d (%s):\n", indent + 2, "", cb[j].block, cb[j].role);
            if ((rc = dump_block(d, f, cb[j].block, indent + 4)) != 0)
                return rc;
        }
    }
    return 0;
}

VQ_API int vq_program_dump(const vq_program *p, FILE *f)
{
    if (!p || !f)
        return vq__fail(VQ_EINVAL, "vq_program_dump: %s is NULL", p ? "file" : "program");
    struct dump_ctx d = {.p = p, .user = vq__malloc((size_t)p->nblocks * sizeof *d.user)};
    if (!d.user)
        return vq__fail(VQ_ENOMEM, "vq_program_dump: out of memory");
    for (int b = 0; b < p->nblocks; b++)
        d.user[b] = -1;
    /* Parents come before their children, so a block without a user is
     * reached here before any block nested in it. */
    claim_blocks(&d, 0);
    for (int b = 1; b < p->nblocks; b++)
        if (d.user[b] < 0)
            claim_blocks(&d, b);
    int rc = dump_block(&d, f, 0, 0);
    for (int b = 1; b < p->nblocks && rc == 0; b++) {
        if (d.user[b] >= 0)
            continue;
        fprintf(f, "block %d (parent %d):\n", b, p->blocks[b].parent);
        rc = dump_block(&d, f, b, 2);
    }
    free(d.user);
    if (rc)
        return rc;
    if (fflush(f) != 0 || ferror(f))
        return vq__io_fail("vq_program_dump", "", errno ? errno : EIO);
    return 0;
}

/* ---- hash ---- */

/* The hash walks the program's structure into XXH3's streaming state,
 * through a small buffer (one update per few KiB, not per field): every
 * var (name, block, dtype, shape, persistable, stop_gradient), every block
 * (parent, its ops in order), every op (its type with an unknown op's slot
 * names, priority, the names of the vars in its slots, its attributes with
 * their values' bits). Names rather than table indices, so the hash does
 * not depend on how the var and op tables were built. Everything
 * vq_program_encode writes is in it, and it allocates nothing (a hash of
 * the encoding cost more than preparing the program, and could fail). */
struct hasher {
    XXH3_state_t st;
    size_t n;
    unsigned char buf[4096];
};

static void h_bytes(struct hasher *h, const void *p, size_t n)
{
    if (n == 0) /* an empty list's pointer may be NULL */
        return;
    if (h->n + n > sizeof h->buf) {
        XXH3_64bits_update(&h->st, h->buf, h->n);
        h->n = 0;
        if (n > sizeof h->buf) {
            XXH3_64bits_update(&h->st, p, n);
            return;
        }
    }
    memcpy(h->buf + h->n, p, n);
    h->n += n;
}

static void h_i64(struct hasher *h, int64_t v)
{
    h_bytes(h, &v, sizeof v);
}

/* A string with its terminator: "ab","c" and "a","bc" differ. NULL as an
 * empty string's impossible twin (a lone 0xff). */
static void h_str(struct hasher *h, const char *s)
{
    if (s)
        h_bytes(h, s, strlen(s) + 1);
    else
        h_bytes(h, "\xff", 1);
}

static void h_attr(struct hasher *h, const vq_attr *a)
{
    h_str(h, a->name);
    h_i64(h, a->type);
    switch (a->type) {
    case VQ_ATTR_INT:
    case VQ_ATTR_BOOL: h_i64(h, a->i); break;
    case VQ_ATTR_FLOAT: h_bytes(h, &a->f, sizeof a->f); break;
    case VQ_ATTR_STRING: h_str(h, a->s); break;
    case VQ_ATTR_INTS:
    case VQ_ATTR_BOOLS:
        h_i64(h, a->n);
        h_bytes(h, a->ints, (size_t)a->n * sizeof *a->ints);
        break;
    case VQ_ATTR_FLOATS:
        h_i64(h, a->n);
        h_bytes(h, a->floats, (size_t)a->n * sizeof *a->floats);
        break;
    case VQ_ATTR_STRINGS:
        h_i64(h, a->n);
        for (int i = 0; i < a->n; i++)
            h_str(h, a->strings[i]);
        break;
    }
}

/* One var's record, hashed alone: the vars enter the program's hash as a
 * sum, so the order of the var table (which decoding may change across
 * blocks) does not matter, as it does not for running the program. */
static uint64_t var_hash(const vq__pvar *d)
{
    struct {
        int64_t meta[5];
        int64_t shape[VQ_MAX_DIMS];
    } r = {{d->block, d->dtype, d->ndim, d->persistable, d->stop_gradient}, {0}};
    memcpy(r.shape, d->shape, (size_t)d->ndim * sizeof d->shape[0]);
    return XXH3_64bits_withSeed(&r, sizeof r, XXH3_64bits(d->name, strlen(d->name)));
}

static void h_op(struct hasher *h, const vq_program *p, const vq__pop *op)
{
    const char *t = op->type;
    h_str(h, t);
    for (int i = 0; !op->def && i < op->nin + op->nout; i++)
        h_str(h, t = next_packed(t)); /* an unknown op's slot names */
    int64_t meta[4] = {op->nin, op->nout, op->nattrs, op->priority};
    h_bytes(h, meta, sizeof meta);
    for (int i = 0; i < op->nin; i++)
        h_str(h, p->vars[op->in[i]].name);
    for (int i = 0; i < op->nout; i++)
        h_str(h, p->vars[op->out[i]].name);
    for (int a = 0; a < op->nattrs; a++)
        h_attr(h, &op->attrs[a]);
}

static uint64_t hash_structure(const vq_program *p)
{
    struct hasher h;
    XXH3_64bits_reset(&h.st);
    h.n = 0;
    uint64_t vars = 0;
    for (int v = 0; v < p->nvars; v++)
        vars += var_hash(&p->vars[v]);
    int64_t counts[3] = {p->nvars, p->nblocks, (int64_t)vars};
    h_bytes(&h, counts, sizeof counts);
    /* ops block by block, in each block's order: their place in the op
     * table is as free as a var's */
    for (int b = 0; b < p->nblocks; b++) {
        int64_t meta[2] = {p->blocks[b].parent, p->blocks[b].nops};
        h_bytes(&h, meta, sizeof meta);
        for (int k = 0; k < p->blocks[b].nops; k++)
            h_op(&h, p, &p->ops[p->blocks[b].ops[k]]);
    }
    XXH3_64bits_update(&h.st, h.buf, h.n);
    return XXH3_64bits_digest(&h.st);
}

/* The cache is written through atomics: readers of a finished program may
 * call this from several threads at once, and each computes the same
 * value. Builder changes clear hash_valid with plain stores, since nothing
 * may read a program while it changes. */
VQ_API uint64_t vq_program_hash(const vq_program *p)
{
    if (!p)
        return 0;
    vq_program *cache = (vq_program *)p;
    if (__atomic_load_n(&cache->hash_valid, __ATOMIC_ACQUIRE))
        return __atomic_load_n(&cache->hash, __ATOMIC_RELAXED);
    uint64_t h = hash_structure(p);
    __atomic_store_n(&cache->hash, h, __ATOMIC_RELAXED);
    __atomic_store_n(&cache->hash_valid, true, __ATOMIC_RELEASE); /* publishes hash */
    return h;
}
