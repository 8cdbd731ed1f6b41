/* The op types an ONNX model uses: every node of its graph and of every
 * subgraph (the graph attributes of If, Loop, Scan or any other node, to
 * the depth OX_MAX_NESTING allows), counted by domain and type, each with
 * where its first node is and whether the translate table has it
 * (vq__onnx_translatable, the lookup the translation makes).
 *
 * Two users: vq_onnx_ops_read (import.c) gives the census to callers
 * (`varq onnx-ops MODEL.onnx`), and the import takes it before translating
 * anything, so that when the translation meets an op it does not have, the
 * error names every such type of the model (vq__onnx_ops_fail), not only
 * the first one met.
 *
 * The census is two walks over the decoded model: the first counts (the
 * nodes sorted by domain, type and order), the second, knowing which nodes
 * come first in their type, writes only those nodes' places. Names come
 * from an untrusted model: what is printed of them is cut short and
 * stripped of control characters, and the error lists a bounded number of
 * types. */
#include "onnx_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Most bytes of a name (node, output, attribute, type, domain) a place or
 * a message prints; longer ones end in "...". */
#define NAME_MAX_PRINT 48
/* Most bytes of a place ("node 4 \"nz\" in body of node 2 (Loop ...)"). */
#define PLACE_MAX 240
/* Most unsupported types the error lists (the rest: "and N more"). */
#define LIST_MAX 32

/* ---- bounded text ---- */

struct text {
    char *buf;
    size_t cap, len; /* len < cap; buf[len] == '\0' */
};

static void text_printf(struct text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void text_printf(struct text *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap);
    va_end(ap);
    if (n > 0)
        t->len = (size_t)n < t->cap - t->len ? t->len + (size_t)n : t->cap - 1;
}

/* s, printable: control bytes become '?', and past NAME_MAX_PRINT bytes
 * it is cut (at a UTF-8 character's start) and ends in "...". */
static void text_name(struct text *t, const char *s)
{
    size_t n = strlen(s), keep = n;
    if (n > NAME_MAX_PRINT) {
        keep = NAME_MAX_PRINT - 3;
        while (keep > 0 && ((unsigned char)s[keep] & 0xC0) == 0x80)
            keep--;
    }
    for (size_t i = 0; i < keep && t->len + 1 < t->cap; i++) {
        unsigned char c = (unsigned char)s[i];
        t->buf[t->len++] = c < 0x20 || c == 0x7F ? '?' : (char)c;
    }
    t->buf[t->len] = '\0';
    if (keep < n)
        text_printf(t, "...");
}

/* ---- which ops translate ---- */

bool vq__onnx_default_domain(const char *domain)
{
    return !domain || !*domain || !strcmp(domain, "ai.onnx");
}

bool vq__onnx_translatable(const char *domain, const char *type)
{
    return vq__onnx_op_find(domain, type) != NULL;
}

/* ---- the census ---- */

/* A node met by the first walk: its domain ("" for the default), its type,
 * and its place in the walk's order. */
struct node_ref {
    const char *domain, *type;
    size_t seq;
};

struct census {
    struct node_ref *refs;
    size_t n, cap;
    bool strict; /* a node with no op type is an error (else it is skipped) */
};

static int walk_count(struct census *c, const Onnx__GraphProto *g, int depth)
{
    if (depth > OX_MAX_NESTING)
        return vq__fail(VQ_EINVAL, "onnx: subgraphs nest more than %d levels deep", OX_MAX_NESTING);
    for (size_t i = 0; i < g->n_node; i++) {
        const Onnx__NodeProto *n = g->node[i];
        if (n->op_type && *n->op_type) {
            if (c->n == c->cap) {
                size_t cap = c->cap ? 2 * c->cap : 64;
                struct node_ref *r = vq__realloc(c->refs, cap * sizeof *r);
                if (!r)
                    return vq__fail(VQ_ENOMEM, "onnx: out of memory");
                c->refs = r;
                c->cap = cap;
            }
            c->refs[c->n] = (struct node_ref){vq__onnx_default_domain(n->domain) ? "" : n->domain,
                                              n->op_type, c->n};
            c->n++;
        } else if (c->strict) {
            return vq__fail(VQ_EINVAL, "onnx: node %zu%s has no op type", i,
                            depth ? " of a subgraph" : "");
        }
        for (size_t a = 0; a < n->n_attribute; a++) {
            const Onnx__AttributeProto *at = n->attribute[a];
            int rc = at->g ? walk_count(c, at->g, depth + 1) : 0;
            for (size_t k = 0; rc == 0 && k < at->n_graphs; k++)
                rc = at->graphs[k] ? walk_count(c, at->graphs[k], depth + 1) : 0;
            if (rc < 0)
                return rc;
        }
    }
    return 0;
}

static int ref_order(const void *pa, const void *pb)
{
    const struct node_ref *a = pa, *b = pb;
    int d = strcmp(a->domain, b->domain);
    if (!d)
        d = strcmp(a->type, b->type);
    return d ? d : (a->seq > b->seq) - (a->seq < b->seq);
}

/* One node of a place: node 4 "name", or node 4 (output "y") when it has
 * no name; with_type adds its type: node 2 (Loop "name"). */
static void text_node(struct text *t, const Onnx__NodeProto *n, size_t index, bool with_type)
{
    text_printf(t, "node %zu ", index);
    bool named = n->name && *n->name;
    if (with_type) {
        text_printf(t, "(");
        text_name(t, n->op_type ? n->op_type : "?");
        text_printf(t, named ? " \"" : ", output \"");
    } else {
        text_printf(t, named ? "\"" : "(output \"");
    }
    const char *label = named ? n->name : n->n_output && n->output[0] ? n->output[0] : "";
    text_name(t, label);
    text_printf(t, named && !with_type ? "\"" : "\")");
}

/* A type and the seq of its first node, to sort the types by the latter. */
struct type_first {
    size_t seq;
    int type;
};

/* Where a node is: itself, then each graph around it, innermost first. */
struct frame {
    const Onnx__NodeProto *node;
    size_t index;
    const char *attr; /* the attribute of node whose graph holds the next frame */
};

struct place_walk {
    vq_onnx_ops *ops;
    const struct type_first *first; /* ops->nops entries, by their first node */
    int next;                       /* the next entry of first to place */
    size_t seq;                     /* nodes walked so far */
    struct frame path[OX_MAX_NESTING + 2];
    int depth;
};

static int place_write(struct place_walk *w)
{
    char buf[PLACE_MAX + 1];
    struct text t = {buf, sizeof buf, 0};
    buf[0] = '\0';
    const struct frame *f = &w->path[w->depth];
    text_node(&t, f->node, f->index, false);
    for (int d = w->depth - 1; d >= 0; d--) {
        text_printf(&t, " in ");
        text_name(&t, w->path[d].attr);
        text_printf(&t, " of ");
        text_node(&t, w->path[d].node, w->path[d].index, true);
    }
    char *s = vq__strdup(buf);
    if (!s)
        return vq__fail(VQ_ENOMEM, "onnx: out of memory");
    w->ops->ops[w->first[w->next++].type].first = s;
    return 0;
}

static int walk_place(struct place_walk *w, const Onnx__GraphProto *g)
{
    for (size_t i = 0; i < g->n_node && w->next < w->ops->nops; i++) {
        const Onnx__NodeProto *n = g->node[i];
        struct frame *f = &w->path[w->depth];
        f->node = n;
        f->index = i;
        if (n->op_type && *n->op_type) {
            int rc = 0;
            if (w->first[w->next].seq == w->seq)
                rc = place_write(w);
            w->seq++;
            if (rc < 0)
                return rc;
        }
        for (size_t a = 0; a < n->n_attribute; a++) {
            const Onnx__AttributeProto *at = n->attribute[a];
            f->attr = at->name ? at->name : "?";
            w->depth++;
            int rc = at->g ? walk_place(w, at->g) : 0;
            for (size_t k = 0; rc == 0 && k < at->n_graphs; k++)
                rc = at->graphs[k] ? walk_place(w, at->graphs[k]) : 0;
            w->depth--;
            if (rc < 0)
                return rc;
        }
    }
    return 0;
}

static int first_order(const void *pa, const void *pb)
{
    const struct type_first *a = pa, *b = pb;
    return (a->seq > b->seq) - (a->seq < b->seq);
}

int vq__onnx_census(const Onnx__GraphProto *g, bool strict, vq_onnx_ops *out)
{
    memset(out, 0, sizeof *out);
    struct census c = {.strict = strict};
    int rc = walk_count(&c, g, 0);
    if (rc == 0 && c.n)
        qsort(c.refs, c.n, sizeof *c.refs, ref_order);
    int ntypes = 0;
    for (size_t i = 0; rc == 0 && i < c.n; i++)
        ntypes += i == 0 || strcmp(c.refs[i].domain, c.refs[i - 1].domain) ||
                  strcmp(c.refs[i].type, c.refs[i - 1].type);
    struct type_first *first = NULL;
    if (rc == 0 && ntypes) {
        out->ops = vq__calloc((size_t)ntypes, sizeof *out->ops);
        first = vq__calloc((size_t)ntypes, sizeof *first);
        if (!out->ops || !first)
            rc = vq__fail(VQ_ENOMEM, "onnx: out of memory");
    }
    for (size_t i = 0; rc == 0 && i < c.n; i++) {
        const struct node_ref *r = &c.refs[i];
        bool same = i > 0 && !strcmp(r->domain, c.refs[i - 1].domain) &&
                    !strcmp(r->type, c.refs[i - 1].type);
        if (same) {
            out->ops[out->nops - 1].count++;
            continue;
        }
        vq_onnx_op_use *u = &out->ops[out->nops];
        /* the sort put the type's first node first */
        first[out->nops] = (struct type_first){r->seq, out->nops};
        out->nops++;
        u->count = 1;
        u->supported = vq__onnx_translatable(r->domain, r->type);
        if (!(u->domain = vq__strdup(r->domain)) || !(u->type = vq__strdup(r->type)))
            rc = vq__fail(VQ_ENOMEM, "onnx: out of memory");
    }
    free(c.refs);
    if (rc == 0 && out->nops) {
        qsort(first, (size_t)out->nops, sizeof *first, first_order);
        struct place_walk w = {.ops = out, .first = first};
        rc = walk_place(&w, g);
    }
    free(first);
    if (rc < 0)
        vq__onnx_ops_release(out);
    return rc;
}

void vq__onnx_ops_release(vq_onnx_ops *ops)
{
    for (int i = 0; ops->ops && i < ops->nops; i++) {
        free(ops->ops[i].domain);
        free(ops->ops[i].type);
        free(ops->ops[i].first);
    }
    free(ops->ops);
    memset(ops, 0, sizeof *ops);
}

/* ---- the error ---- */

int vq__onnx_ops_fail(const vq_onnx_ops *ops, int64_t opset)
{
    int nbad = 0;
    for (int i = 0; i < ops->nops; i++)
        nbad += !ops->ops[i].supported;
    /* what follows the list; the list stops where it would not fit */
    char tail[256];
    snprintf(tail, sizeof tail,
             ". `varq onnx-ops` lists the ops varq translates, `varq onnx-ops MODEL.onnx` "
             "every op of the model");
    char buf[VQ__ERRMSG_MAX];
    struct text t = {buf, sizeof buf, 0};
    text_printf(&t,
                "onnx: the model (opset %lld of ai.onnx) uses %d op type%s that varq does "
                "not translate: ",
                (long long)opset, nbad, nbad == 1 ? "" : "s");
    int listed = 0;
    for (int i = 0; i < ops->nops; i++) {
        const vq_onnx_op_use *u = &ops->ops[i];
        if (u->supported)
            continue;
        char e[2 * PLACE_MAX];
        struct text et = {e, sizeof e, 0};
        e[0] = '\0';
        text_printf(&et, "%s", listed ? ", " : "");
        text_name(&et, u->type);
        if (*u->domain) {
            text_printf(&et, " of domain ");
            text_name(&et, u->domain);
        }
        if (u->count == 1)
            text_printf(&et, " (1 node: %s", u->first ? u->first : "?");
        else
            text_printf(&et, " (%lld nodes, the first: %s", (long long)u->count,
                        u->first ? u->first : "?");
        text_printf(&et, "%s)",
                    *u->domain && strcmp(u->domain, OX_TRAINING)
                        ? "; varq reads only the default domain ai.onnx and " OX_TRAINING
                        : "");
        /* room for this entry, "and N more" and the tail */
        if (listed == LIST_MAX || t.len + et.len + 32 + strlen(tail) >= t.cap)
            break;
        text_printf(&t, "%s", e);
        listed++;
    }
    if (listed < nbad)
        text_printf(&t, ", and %d more", nbad - listed);
    text_printf(&t, "%s", tail);
    return vq__fail(VQ_ENOSYS, "%s", buf);
}
