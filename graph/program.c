/* Programs: the graph layer's IR and its builder (vq_program_new,
 * vq_program_add_*), the deep copy (vq__program_copy, vq_program_clone)
 * and the hash the executor's plan cache keys on. The protobuf codec
 * (encode, decode, save, load) is program_codec.c and the text dump
 * program_dump.c; they build and read programs through the calls of
 * program.h, so that a decoded program passes the very checks a built
 * one does.
 *
 * The in-memory form is struct vq_program (graph_internal.h): one program-wide
 * var table with a name index (open addressing, XXH3 of the name), one op
 * table, and blocks that list their ops in order. An op's vars are indices
 * in the positional order of its definition's slots, and its attributes are
 * deep copies normalized to the schema's types (an INT given for a FLOAT is
 * stored as a FLOAT, BOOL values as 0/1), so that two ways of writing the
 * same program encode to the same bytes and hash equal.
 *
 * An op whose type the registry does not know (only the decoder makes
 * one) has def == NULL and its vars in the order its slots were listed;
 * the slot names it came with are kept after the NUL that ends its type
 * string (see vq__pop_type_dup), so it encodes and dumps as it was read. */
#include "graph_internal.h"
#include "program.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#define XXH_INLINE_ALL /* the streaming state on the stack */
#include <xxhash.h>

/* ---- tables ---- */

/* arr with room for one more than n elements (realloc'd, doubling), or
 * NULL with arr untouched when memory runs out. */
void *vq__reserve_one(void *arr, int n, int *cap, size_t elem)
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

uint64_t vq__name_hash(const char *name)
{
    return XXH3_64bits(name, strlen(name));
}

int vq__program_find_var(const vq_program *p, const char *name)
{
    if (!p || !name || p->index_cap == 0)
        return -1;
    uint64_t h = vq__name_hash(name);
    size_t mask = (size_t)p->index_cap - 1;
    for (size_t i = (size_t)h & mask;; i = (i + 1) & mask) {
        int v = p->index[i];
        /* the kept hash first: a collision in the index reads no string */
        if (v < 0 || (p->vars[v].name_hash == h && !strcmp(p->vars[v].name, name)))
            return v;
    }
}

/* Puts var v (already in p->vars, its name_hash set) into the name index,
 * which is kept at
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
            size_t i = (size_t)p->vars[k].name_hash & mask;
            while (index[i] >= 0)
                i = (i + 1) & mask;
            index[i] = k;
        }
        free(p->index);
        p->index = index;
        p->index_cap = cap;
    }
    size_t mask = (size_t)p->index_cap - 1;
    size_t i = (size_t)p->vars[v].name_hash & mask;
    while (p->index[i] >= 0)
        i = (i + 1) & mask;
    p->index[i] = v;
    return 0;
}

/* Var var is declared in block or in one of the blocks it is nested in.
 * Parents have smaller indices, so the walk ends. */
bool vq__var_visible(const vq_program *p, int var, int block)
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
int vq__attrs_copy(vq_attr **out, const vq__op_def *def, const vq_attr *attrs, int n,
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

void vq__pop_free(vq__pop *op)
{
    free(op->type);
    free(op->in);
    free(op->out);
    attrs_free(op->attrs, op->nattrs);
    memset(op, 0, sizeof *op);
}

/* The strings after the NUL ending an unknown op's type: see the top. */
const char *vq__next_packed(const char *s)
{
    return s + strlen(s) + 1;
}

char *vq__pop_type_dup(const vq__pop *op)
{
    const char *end = vq__next_packed(op->type);
    if (!op->def)
        for (int i = 0; i < op->nin + op->nout; i++)
            end = vq__next_packed(end);
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
    if (p->frozen) { /* the arena holds p and itself: free from a copy */
        vq__arena a = *p->frozen;
        vq__arena_free(&a);
        return;
    }
    for (int i = 0; i < p->nvars; i++)
        free(p->vars[i].name);
    for (int i = 0; i < p->nops; i++)
        vq__pop_free(&p->ops[i]);
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

/* attr_copy into an arena, for a frozen copy: src is a program's own
 * attribute (normalized already, NULL where unused). */
static int attr_freeze(vq__arena *a, vq_attr *dst, const vq_attr *src)
{
    *dst = *src;
    if (!(dst->name = vq__arena_strdup(a, src->name)))
        return VQ_ENOMEM;
    if (src->s && !(dst->s = vq__arena_strdup(a, src->s)))
        return VQ_ENOMEM;
    size_t n = src->n > 0 ? (size_t)src->n : 0;
    if (src->ints) {
        int64_t *v = vq__arena_alloc(a, n * sizeof *v + 1, _Alignof(int64_t));
        if (!v)
            return VQ_ENOMEM;
        memcpy(v, src->ints, n * sizeof *v);
        dst->ints = v;
    }
    if (src->floats) {
        double *v = vq__arena_alloc(a, n * sizeof *v + 1, _Alignof(double));
        if (!v)
            return VQ_ENOMEM;
        memcpy(v, src->floats, n * sizeof *v);
        dst->floats = v;
    }
    if (src->strings) {
        const char **v = vq__arena_alloc(a, n * sizeof *v + 1, _Alignof(char *));
        if (!v)
            return VQ_ENOMEM;
        for (size_t i = 0; i < n; i++)
            if (!(v[i] = vq__arena_strdup(a, src->strings[i])))
                return VQ_ENOMEM;
        dst->strings = v;
    }
    return 0;
}

/* Copies n ints (at least one int of room) into the arena. */
static int *ints_freeze(vq__arena *a, const int *src, int n)
{
    int *d = vq__arena_alloc(a, (size_t)(n > 0 ? n : 1) * sizeof *d, _Alignof(int));
    if (d && n > 0)
        memcpy(d, src, (size_t)n * sizeof *d);
    return d;
}

int vq__program_freeze(const vq_program *p, vq_program **out)
{
    /* a first guess at the size: the tables, and some bytes per var and op
     * for names, slots and attributes (the arena grows past it) */
    size_t hint =
        sizeof(vq_program) + sizeof(vq__arena) + 256 + (size_t)p->nvars * (sizeof(vq__pvar) + 16) +
        (size_t)p->nops * (sizeof(vq__pop) + 48) + (size_t)p->nblocks * (sizeof(vq__block) + 16) +
        (size_t)p->index_cap * sizeof *p->index;
    vq__arena a;
    vq__arena_init(&a, hint);
    vq_program *c = vq__arena_calloc(&a, 1, sizeof *c, _Alignof(vq_program));
    vq__arena *home = c ? vq__arena_alloc(&a, sizeof *home, _Alignof(vq__arena)) : NULL;
    if (!home) {
        vq__arena_free(&a);
        return vq__fail(VQ_ENOMEM, "program copy: out of memory");
    }
    *home = a; /* from here on the arena is *home */
    c->frozen = home;
    int rc = 0;
    c->vars = vq__arena_alloc(home, (size_t)(p->nvars ? p->nvars : 1) * sizeof *c->vars,
                              _Alignof(vq__pvar));
    /* not zeroed: each op is copied whole below (a failure frees the arena
     * and reads nothing) */
    c->ops =
        vq__arena_alloc(home, (size_t)(p->nops ? p->nops : 1) * sizeof *c->ops, _Alignof(vq__pop));
    c->blocks = vq__arena_alloc(home, (size_t)(p->nblocks ? p->nblocks : 1) * sizeof *c->blocks,
                                _Alignof(vq__block));
    c->index = ints_freeze(home, p->index, p->index_cap);
    if (!c->vars || !c->ops || !c->blocks || !c->index)
        rc = VQ_ENOMEM;
    c->vars_cap = c->nvars = p->nvars;
    c->ops_cap = c->nops = p->nops;
    c->blocks_cap = c->nblocks = p->nblocks;
    c->index_cap = p->index_cap;
    for (int i = 0; rc == 0 && i < p->nvars; i++) {
        c->vars[i] = p->vars[i];
        if (!(c->vars[i].name = vq__arena_strdup(home, p->vars[i].name)))
            rc = VQ_ENOMEM;
    }
    for (int i = 0; rc == 0 && i < p->nops; i++) {
        const vq__pop *o = &p->ops[i];
        vq__pop *d = &c->ops[i];
        *d = *o;
        /* the type, with an unknown op's slot names after it */
        const char *end = vq__next_packed(o->type);
        if (!o->def)
            for (int k = 0; k < o->nin + o->nout; k++)
                end = vq__next_packed(end);
        size_t tn = (size_t)(end - o->type);
        d->type = vq__arena_alloc(home, tn, 1);
        d->in = ints_freeze(home, o->in, o->nin);
        d->out = ints_freeze(home, o->out, o->nout);
        d->attrs = o->nattrs ? vq__arena_alloc(home, (size_t)o->nattrs * sizeof *d->attrs,
                                               _Alignof(vq_attr))
                             : NULL;
        if (!d->type || !d->in || !d->out || (o->nattrs && !d->attrs)) {
            rc = VQ_ENOMEM;
            break;
        }
        memcpy(d->type, o->type, tn);
        for (int k = 0; rc == 0 && k < o->nattrs; k++)
            rc = attr_freeze(home, &d->attrs[k], &o->attrs[k]);
    }
    for (int b = 0; rc == 0 && b < p->nblocks; b++) {
        c->blocks[b] = p->blocks[b];
        c->blocks[b].cap = p->blocks[b].nops;
        if (!(c->blocks[b].ops = ints_freeze(home, p->blocks[b].ops, p->blocks[b].nops)))
            rc = VQ_ENOMEM;
    }
    if (rc) {
        vq_program_free(c);
        return vq__fail(VQ_ENOMEM, "program copy: out of memory");
    }
    c->hash_valid = false; /* p's cache may be written by another thread: not read */
    *out = c;
    return 0;
}

VQ_API int vq_program_clone(const vq_program *p, vq_program **out)
{
    if (!p || !out)
        return vq__fail(VQ_EINVAL, "vq_program_clone: NULL argument");
    return vq__program_copy(p, out);
}

int vq__block_append(vq_program *p, int parent)
{
    vq__block *b = vq__reserve_one(p->blocks, p->nblocks, &p->blocks_cap, sizeof *b);
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
    if (!p || vq__block_append(p, -1) < 0) {
        vq_program_free(p);
        return vq__fail(VQ_ENOMEM, "vq_program_new: out of memory");
    }
    *out = p;
    return 0;
}

int vq__block_depth(const vq_program *p, int b)
{
    int depth = 0;
    for (; b > 0 && depth <= VQ_MAX_BLOCK_DEPTH; b = p->blocks[b].parent)
        depth++;
    return depth;
}

VQ_API int vq_program_add_block(vq_program *p, int parent)
{
    if (!p)
        return vq__fail(VQ_EINVAL, "vq_program_add_block: program is NULL");
    if (parent < 0 || parent >= p->nblocks)
        return vq__fail(VQ_EINVAL, "vq_program_add_block: parent block %d does not exist (%d blocks)",
                        parent, p->nblocks);
    if (vq__block_depth(p, parent) >= VQ_MAX_BLOCK_DEPTH)
        return vq__fail(VQ_EINVAL,
                        "vq_program_add_block: block %d is at depth %d already: blocks nest at "
                        "most VQ_MAX_BLOCK_DEPTH (%d) deep",
                        parent, vq__block_depth(p, parent), VQ_MAX_BLOCK_DEPTH);
    int rc = vq__block_append(p, parent);
    return rc < 0 ? vq__fail(rc, "vq_program_add_block: out of memory") : rc;
}

/* Declares a var after checking it; who starts the error messages.
 * Returns the var's index. */
int vq__var_declare(vq_program *p, int block, const char *name, int dtype, int ndim,
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
    vq__pvar *vars = vq__reserve_one(p->vars, p->nvars, &p->vars_cap, sizeof *vars);
    if (!vars)
        return vq__fail(VQ_ENOMEM, "%s: out of memory", who);
    p->vars = vars;
    vq__pvar *v = &vars[p->nvars];
    *v = (vq__pvar){.block = block, .dtype = (vq_dtype)dtype, .ndim = ndim,
                    .persistable = persistable};
    for (int i = 0; i < ndim; i++)
        v->shape[i] = shape[i];
    v->name_hash = vq__name_hash(name);
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
    int rc = vq__var_declare(p, block, name, (int)dt, ndim, shape, persistable, "vq_program_add_var");
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
int vq__op_append(vq_program *p, int block, vq__pop *op)
{
    vq__pop *ops = vq__reserve_one(p->ops, p->nops, &p->ops_cap, sizeof *ops);
    if (ops)
        p->ops = ops;
    vq__block *b = &p->blocks[block];
    int *order = ops ? vq__reserve_one(b->ops, b->nops, &b->cap, sizeof *order) : NULL;
    if (!order) {
        int rc = vq__fail(VQ_ENOMEM, "%s: out of memory", op->type);
        vq__pop_free(op);
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
int vq__op_var(const vq_program *p, int block, const char *who, const char *dir,
               const char *slot, int i, const char *name)
{
    if (!name)
        return vq__fail(VQ_EINVAL, "%s: %s %s (slot %d): var name is NULL", who, dir, slot, i);
    int v = vq__program_find_var(p, name);
    if (v < 0)
        return vq__fail(VQ_EINVAL, "%s: %s %s (slot %d): var \"%s\" is not declared", who, dir,
                        slot, i, name);
    if (!vq__var_visible(p, v, block))
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
        if ((in[i] = vq__op_var(p, block, where, "input", vq__op_in_slot(def, i), i, inputs[i])) < 0)
            return in[i];
    for (int i = 0; i < nout; i++)
        if ((out[i] = vq__op_var(p, block, where, "output", vq__op_out_slot(def, i), i, outputs[i])) <
            0)
            return out[i];

    vq__pop op = {.def = def, .nin = nin, .nout = nout, .nattrs = nattrs};
    op.type = vq__strdup(def->type);
    op.in = vq__malloc((size_t)(nin ? nin : 1) * sizeof *op.in);
    op.out = vq__malloc((size_t)(nout ? nout : 1) * sizeof *op.out);
    if (!op.type || !op.in || !op.out) {
        op.nattrs = 0;
        vq__pop_free(&op);
        return vq__fail(VQ_ENOMEM, "%s%s: out of memory", who, type);
    }
    memcpy(op.in, in, (size_t)nin * sizeof *in);
    memcpy(op.out, out, (size_t)nout * sizeof *out);
    if ((rc = vq__attrs_copy(&op.attrs, def, attrs, nattrs, def->type)) < 0) {
        op.nattrs = 0;
        vq__pop_free(&op);
        return vq__fail_prefixed(rc, "vq_program_add_op");
    }
    return vq__op_append(p, block, &op);
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

/* ---- hash ---- */

/* The hash walks the program's structure into XXH3's streaming state,
 * through a small buffer (one update per few KiB, not per field): every
 * var (name, block, dtype, shape, persistable, stop_gradient), every block
 * (parent, its ops in order), every op (its type with an unknown op's slot
 * names, priority, the names of the vars in its slots, its attributes with
 * their values' bits). Names rather than table indices, so the hash does
 * not depend on how the var and op tables were built; each name as the
 * XXH3-64 its var keeps (name_hash), so that an op's vars cost 8 bytes
 * each and no read of a string elsewhere in memory. Everything
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
    return XXH3_64bits_withSeed(&r, sizeof r, d->name_hash);
}

static void h_op(struct hasher *h, const vq_program *p, const vq__pop *op)
{
    const char *t = op->type;
    h_str(h, t);
    for (int i = 0; !op->def && i < op->nin + op->nout; i++)
        h_str(h, t = vq__next_packed(t)); /* an unknown op's slot names */
    int64_t meta[4] = {op->nin, op->nout, op->nattrs, op->priority};
    h_bytes(h, meta, sizeof meta);
    /* each var by its name's hash, kept in the var: no string to chase */
    for (int i = 0; i < op->nin; i++)
        h_bytes(h, &p->vars[op->in[i]].name_hash, sizeof(uint64_t));
    for (int i = 0; i < op->nout; i++)
        h_bytes(h, &p->vars[op->out[i]].name_hash, sizeof(uint64_t));
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

/* ---- declarations, for bindings ---- */

VQ_API int vq_program_var_info(const vq_program *p, const char *name, vq_dtype *dt, int *ndim,
                               int64_t *shape, bool *persistable)
{
    if (!p || !name)
        return vq__fail(VQ_EINVAL, "vq_program_var_info: %s is NULL", p ? "name" : "program");
    int v = vq__program_find_var(p, name);
    if (v < 0)
        return vq__fail(VQ_EINVAL, "vq_program_var_info: the program declares no var '%s'", name);
    const vq__pvar *d = &p->vars[v];
    if (dt)
        *dt = d->dtype;
    if (ndim)
        *ndim = d->ndim;
    if (shape)
        for (int i = 0; i < d->ndim; i++)
            shape[i] = d->shape[i];
    if (persistable)
        *persistable = d->persistable;
    return 0;
}
