/* The protobuf codec of programs (proto/program.proto, compiled by
 * protoc-c at build time): vq_program_encode and vq_program_decode, and
 * vq_program_save / vq_program_load through files.
 *
 * Decoding is the untrusted-input path: its bytes may come from anywhere
 * (a file, the network, a fuzzer). Every count, index, name and attribute
 * of the parsed message is checked, to the same rules as the builder's and
 * through the builder's own calls (program.h), before a program exists,
 * so a decoded program is as safe to walk as a built one. Sizes are
 * bounded before anything is allocated from them (MAX_OP_ATTRS, the dims
 * of a var), a failed allocation inside protobuf-c is told apart from bad
 * bytes (vq__protobuf_failed_allocs), and an error names the call and the
 * place in the message. An op whose type the registry does not know is
 * kept (def == NULL, its vars in the order its slots list them) for the
 * executor to report, with its slot names packed after its type.
 *
 * Encoding is deterministic: blocks in order, each block's vars in the
 * order they were declared, ops in block order, a known op's slots in its
 * definition's order, attributes in the order given. */
#include "graph_internal.h"
#include "program.h"

#include "program.pb-c.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* An op decoded with more attributes than this is refused: the registry's
 * schemas are far smaller, and unknown ops' names are checked for
 * uniqueness pairwise. */
#define MAX_OP_ATTRS 256

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
        for (int i = 0; i < n; i++, prev = s, s = vq__next_packed(s))
            nslots += !prev || strcmp(s, prev) != 0;
        if (!(slots = ARENA_NEW(arena, Varq__Slot *, nslots)))
            return VQ_ENOMEM;
        s = *packed;
        for (int i = 0, k = 0; i < n; k++) {
            int j = i;
            const char *run = s;
            while (j < n && !strcmp(s, run)) {
                j++;
                s = vq__next_packed(s);
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
    const char *packed = vq__next_packed(op->type);
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
            rc = vars[n] = vq__op_var(p, block, where, dir, s->name, n, s->vars[j]);
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
    if (n == 0) {
        /* nothing to copy, but a known op's required attributes are
         * still missing (a cond without its blocks must not reach
         * preparation) */
        int rc = d ? vq__attrs_check(d, NULL, 0) : 0;
        return rc < 0 ? vq__fail_prefixed(rc, "%s", where) : 0;
    }
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
    if (rc >= 0 && (rc = vq__attrs_copy(out, d, views, (int)n, type)) < 0)
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

/* who: the call and, for vq_program_load, the file (the start of every
 * error message). */
static int op_decode(vq_program *p, int block, size_t k, const Varq__Op *m, const char *who)
{
    char where[384];
    if (!m->type || !*m->type)
        return vq__fail(VQ_EINVAL, "%s: block %d op %zu has no type", who, block, k);
    snprintf(where, sizeof where, "%s: block %d op %zu (%.60s)", who, block, k, m->type);
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
        vq__pop_free(&op);
        return rc;
    }
    rc = vq__op_append(p, block, &op);
    return rc < 0 ? vq__fail_prefixed(rc, "%s", who) : 0;
}

/* Fills the empty program p from m, checking everything. */
static int program_decode(vq_program *p, const Varq__Program *m, const char *who)
{
    if (m->n_blocks == 0)
        return vq__fail(VQ_EINVAL, "%s: no blocks (a program has a main block)", who);
    if (m->n_blocks > INT_MAX / 2)
        return vq__fail(VQ_EINVAL, "%s: %zu blocks", who, m->n_blocks);
    char where[352];
    for (size_t b = 0; b < m->n_blocks; b++) {
        int parent = m->blocks[b]->parent;
        if (b == 0 ? parent != -1 : parent < 0 || (size_t)parent >= b)
            return vq__fail(VQ_EINVAL, "%s: block %zu has parent %d (expected %s)", who, b,
                            parent, b == 0 ? "-1" : "an earlier block");
        if (b > 0 && vq__block_depth(p, parent) >= VQ_MAX_BLOCK_DEPTH)
            return vq__fail(VQ_EINVAL,
                            "%s: block %zu is nested more than VQ_MAX_BLOCK_DEPTH (%d) levels deep",
                            who, b, VQ_MAX_BLOCK_DEPTH);
        if (vq__block_append(p, parent) < 0)
            return vq__fail(VQ_ENOMEM, "%s: out of memory", who);
    }
    for (size_t b = 0; b < m->n_blocks; b++) {
        const Varq__Block *mb = m->blocks[b];
        for (size_t i = 0; i < mb->n_vars; i++) {
            const Varq__Var *v = mb->vars[i];
            snprintf(where, sizeof where, "%s: block %zu var %zu", who, b, i);
            if (v->n_shape > VQ_MAX_DIMS)
                return vq__fail(VQ_EINVAL, "%s: %zu dims (at most %d)", where, v->n_shape,
                                VQ_MAX_DIMS);
            int rc = vq__var_declare(p, (int)b, v->name, (int)v->dtype, (int)v->n_shape,
                                     v->shape, v->persistable, where);
            if (rc < 0)
                return rc;
            p->vars[p->nvars - 1].stop_gradient = v->stop_gradient;
        }
    }
    for (size_t b = 0; b < m->n_blocks; b++) {
        const Varq__Block *mb = m->blocks[b];
        for (size_t k = 0; k < mb->n_ops; k++) {
            int rc = op_decode(p, (int)b, k, mb->ops[k], who);
            if (rc < 0)
                return rc;
        }
    }
    p->hash_valid = false;
    return 0;
}

/* vq_program_decode, and vq_program_load's bytes; who starts the error
 * messages. */
static int decode_bytes(vq_program **out, const void *buf, size_t len, const char *who)
{
    static const uint8_t empty[1];
    unsigned failed = vq__protobuf_failed_allocs();
    Varq__Program *m = varq__program__unpack(&vq__protobuf_allocator, len, buf ? buf : empty);
    if (!m && vq__protobuf_failed_allocs() != failed)
        return vq__fail(VQ_ENOMEM, "%s: out of memory while parsing %zu bytes", who, len);
    if (!m)
        return vq__fail(VQ_EINVAL, "%s: %zu bytes are not a valid program (protobuf parse failed)",
                        who, len);
    vq_program *p = vq__calloc(1, sizeof *p);
    int rc = p ? program_decode(p, m, who) : vq__fail(VQ_ENOMEM, "%s: out of memory", who);
    varq__program__free_unpacked(m, &vq__protobuf_allocator);
    if (rc < 0) {
        vq_program_free(p);
        return rc;
    }
    *out = p;
    return 0;
}

VQ_API int vq_program_decode(vq_program **out, const void *buf, size_t len)
{
    if (!out)
        return vq__fail(VQ_EINVAL, "vq_program_decode: out is NULL");
    *out = NULL;
    if (!buf && len)
        return vq__fail(VQ_EINVAL, "vq_program_decode: buf is NULL");
    return decode_bytes(out, buf, len, "vq_program_decode");
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
                rc = vq__fail(VQ_ENOMEM, "vq_program_load: %s: out of memory after %zu bytes",
                              path, len);
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
    if (rc == 0) {
        char who[320];
        snprintf(who, sizeof who, "vq_program_load: %s", path);
        rc = decode_bytes(out, buf, len, who);
    }
    free(buf);
    return rc;
}
