/* The text dump of a program (vq_program_dump): one line per var and op,
 * block by block, for people and for diffs (tools/ prints it; tests
 * compare it). Reads the program only; a cond or while op's blocks are
 * printed nested under it, with the enclosing vars they read. */
#include "graph_internal.h"
#include "program.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
            const char *next = vq__next_packed(name);
            while (i + count < n && !strcmp(next, name)) {
                count++;
                next = vq__next_packed(next);
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
 * "block N (parent P):", with its own nested blocks under its ops.
 *
 * The dump is linear in the program's size: each block's vars are listed
 * once (bucketed by block up front), and the vars each block reads from
 * enclosing blocks are computed once per block, children first (a child
 * block's index is larger than its parent's), from its children's lists,
 * never by walking the nested blocks again for each enclosing op. */

/* A var list in first-added order, without repeats: a var is in the list
 * being built when its mark holds the list's stamp. */
struct var_list {
    int *v;
    int n, cap;
};

struct dump_ctx {
    const vq_program *p;
    int *user;              /* block -> index in p->ops of its user, or -1 */
    int *block_vars;        /* var indices grouped by block, in index order */
    int *block_vars_start;  /* block b's are block_vars[start[b] .. start[b + 1]) */
    struct var_list *reads; /* block -> vars of blocks enclosing it that it reads */
    unsigned *mark;         /* var -> stamp of the last list that took it */
    unsigned stamp;
};

static int var_list_add(struct dump_ctx *d, struct var_list *l, int v)
{
    if (d->mark[v] == d->stamp)
        return 0;
    int *grown = vq__reserve_one(l->v, l->n, &l->cap, sizeof *l->v);
    if (!grown)
        return vq__fail(VQ_ENOMEM, "vq_program_dump: out of memory");
    d->mark[v] = d->stamp;
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

/* Adds to out what control op o's blocks read from outside themselves, in
 * the order the executor meets them: each used block's reads, then a
 * cond's branch outputs that are vars of enclosing blocks. Vars of block
 * `skip` are left out (-1: none). The children's reads must be known. */
static int ctl_block_reads(struct dump_ctx *d, int b, int o, int skip, struct var_list *out)
{
    const vq_program *p = d->p;
    struct ctl_block cb[2];
    int n = ctl_blocks_used(d, b, o, cb), rc = 0;
    for (int j = 0; j < n && rc == 0; j++) {
        const struct var_list *inner = &d->reads[cb[j].block];
        for (int i = 0; i < inner->n && rc == 0; i++)
            if (p->vars[inner->v[i]].block != skip)
                rc = var_list_add(d, out, inner->v[i]);
        const vq_attr *a = cb[j].outputs;
        for (int k = 0; a && k < a->n && rc == 0; k++) {
            int v = vq__program_find_var(p, a->strings[k]);
            if (v >= 0 && p->vars[v].block != cb[j].block && p->vars[v].block != skip &&
                vq__var_visible(p, v, cb[j].block))
                rc = var_list_add(d, out, v);
        }
    }
    return rc;
}

/* d->reads[b]: the vars of blocks enclosing b that the ops of b read, in
 * first-read order, the blocks of its control ops included (through what
 * those read from outside them). */
static int block_reads(struct dump_ctx *d, int b)
{
    const vq_program *p = d->p;
    const vq__block *pb = &p->blocks[b];
    struct var_list *out = &d->reads[b];
    d->stamp++;
    int rc = 0;
    for (int k = 0; k < pb->nops && rc == 0; k++) {
        const vq__pop *op = &p->ops[pb->ops[k]];
        for (int i = 0; i < op->nin && rc == 0; i++)
            if (p->vars[op->in[i]].block != b)
                rc = var_list_add(d, out, op->in[i]);
        if (rc == 0)
            rc = ctl_block_reads(d, b, pb->ops[k], b, out);
    }
    return rc;
}

/* What the executor adds to the inputs of control op o (in block b): the
 * vars its blocks read from enclosing blocks, nested blocks included, and
 * a cond's branch outputs that are such vars, less those its inputs list. */
static int ctl_reads(struct dump_ctx *d, int b, int o, struct var_list *out)
{
    const vq__pop *op = &d->p->ops[o];
    d->stamp++;
    for (int j = 0; j < op->nin; j++)
        d->mark[op->in[j]] = d->stamp; /* listed: not added */
    return ctl_block_reads(d, b, o, -1, out);
}

static void dump_var(FILE *f, const vq__pvar *v, int indent)
{
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

/* Block b's vars and ops, indent spaces in; each control op followed by
 * the vars it reads from outside beyond its inputs, and its blocks. */
static int dump_block(struct dump_ctx *d, FILE *f, int b, int indent)
{
    const vq_program *p = d->p;
    for (int i = d->block_vars_start[b]; i < d->block_vars_start[b + 1]; i++)
        dump_var(f, &p->vars[d->block_vars[i]], indent);
    const vq__block *pb = &p->blocks[b];
    for (int k = 0; k < pb->nops; k++) {
        const vq__pop *op = &p->ops[pb->ops[k]];
        const char *packed = vq__next_packed(op->type);
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

/* Everything dump_block reads besides the program: block users, vars by
 * block, each block's outer reads. */
static int dump_ctx_init(struct dump_ctx *d, const vq_program *p)
{
    size_t nb = (size_t)p->nblocks, nv = (size_t)(p->nvars ? p->nvars : 1);
    *d = (struct dump_ctx){
        .p = p,
        .user = vq__malloc(nb * sizeof *d->user),
        .block_vars = vq__malloc(nv * sizeof *d->block_vars),
        .block_vars_start = vq__calloc(nb + 1, sizeof *d->block_vars_start),
        .reads = vq__calloc(nb, sizeof *d->reads),
        .mark = vq__calloc(nv, sizeof *d->mark),
    };
    if (!d->user || !d->block_vars || !d->block_vars_start || !d->reads || !d->mark)
        return vq__fail(VQ_ENOMEM, "vq_program_dump: out of memory");
    for (int b = 0; b < p->nblocks; b++)
        d->user[b] = -1;
    /* Parents come before their children, so a block without a user is
     * reached here before any block nested in it. */
    claim_blocks(d, 0);
    for (int b = 1; b < p->nblocks; b++)
        if (d->user[b] < 0)
            claim_blocks(d, b);
    /* counting sort of the vars by block, keeping index order */
    for (int v = 0; v < p->nvars; v++)
        d->block_vars_start[p->vars[v].block + 1]++;
    for (int b = 0; b < p->nblocks; b++)
        d->block_vars_start[b + 1] += d->block_vars_start[b];
    int *next = vq__malloc(nb * sizeof *next);
    if (!next)
        return vq__fail(VQ_ENOMEM, "vq_program_dump: out of memory");
    memcpy(next, d->block_vars_start, nb * sizeof *next);
    for (int v = 0; v < p->nvars; v++)
        d->block_vars[next[p->vars[v].block]++] = v;
    free(next);
    int rc = 0;
    for (int b = p->nblocks - 1; b >= 0 && rc == 0; b--)
        rc = block_reads(d, b);
    return rc;
}

static void dump_ctx_free(struct dump_ctx *d)
{
    for (int b = 0; d->reads && b < d->p->nblocks; b++)
        free(d->reads[b].v);
    free(d->reads);
    free(d->user);
    free(d->block_vars);
    free(d->block_vars_start);
    free(d->mark);
}

VQ_API int vq_program_dump(const vq_program *p, FILE *f)
{
    if (!p || !f)
        return vq__fail(VQ_EINVAL, "vq_program_dump: %s is NULL", p ? "file" : "program");
    struct dump_ctx d;
    int rc = dump_ctx_init(&d, p);
    if (rc == 0)
        rc = dump_block(&d, f, 0, 0);
    for (int b = 1; b < p->nblocks && rc == 0; b++) {
        if (d.user[b] >= 0)
            continue;
        fprintf(f, "block %d (parent %d):\n", b, p->blocks[b].parent);
        rc = dump_block(&d, f, b, 2);
    }
    dump_ctx_free(&d);
    if (rc)
        return rc;
    if (fflush(f) != 0 || ferror(f))
        return vq__io_fail("vq_program_dump", "", errno ? errno : EIO);
    return 0;
}
