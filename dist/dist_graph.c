/* The dist module in programs: the registered ops allreduce, broadcast,
 * send and recv (async CPU kernels that hand a vq__comm to the
 * communication thread, dist.c) and dist_ticket (which numbers the next
 * one), vq_dist_program_add, which orders them through a token var, and
 * the data-parallel pass, which inserts bucketed gradient all-reduces into
 * a trained program (include/varq/dist.h says why the design is this one).
 *
 * Why a ticket op. MPI needs the collectives started in one order on every
 * rank, and the executor runs ops in whatever order their inputs become
 * ready. A var written by every communication op in turn would give that
 * order, but an async op holds the vars it writes until it completes: the
 * next bucket's all-reduce would wait for the previous one's completion
 * (and its thread crossings) instead of overlapping it. So the token is
 * written by a small sync op before each communication op, dist_ticket,
 * which runs once the op's inputs are ready (it reads them), takes the
 * handle's next sequence number and writes it into a one-element var that
 * the communication op reads: the token orders the numbering, which is
 * the order the communication thread starts the MPI calls in, and is free
 * again as soon as the number is taken.
 *
 * The ops go through the public registration, like a user's op; the pass
 * edits block 0's op order, which no public call does, so this file reads
 * the graph layer's private program structure (graph/graph_internal.h). */
#include "dist_internal.h"

#include "graph_services.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What infer parses from the attributes, for the kernel. */
struct comm_params {
    int64_t comm;
    int32_t kind;   /* enum vq__comm_kind */
    int32_t red;    /* vq_reduce_op */
    int32_t peer;   /* root, dest or src */
    int32_t tag;
};

static const vq_attr *attr_find(const vq_op_infer_call *c, const char *name)
{
    for (int i = 0; i < c->nattrs; i++)
        if (!strcmp(c->attrs[i].name, name))
            return &c->attrs[i];
    return NULL;
}

static int comm_infer(const vq_op_infer_call *c)
{
    struct comm_params *p = c->params;
    p->kind = (int32_t)(intptr_t)c->user;
    /* X..., then the number dist_ticket wrote (vq_dist_program_add's
     * form), or X... alone (numbered when the kernel runs) */
    int n = c->nout;
    if (c->nin == n + 1) {
        const vq_op_meta *t = &c->in[n];
        if (t->dtype != VQ_I64 || t->ndim != 1 || (t->shape[0] != 1 && t->shape[0] != -1))
            return vq_error_set(VQ_EINVAL,
                                "%d inputs for %d outputs, but the last input is "
                                "not a ticket (i64 [1], dist_ticket's output)",
                                c->nin, n);
    } else if (c->nin != n) {
        return vq_error_set(VQ_EINVAL,
                            "%d inputs but %d outputs: one output per input, and "
                            "at most a ticket more",
                            c->nin, n);
    }
    const vq_attr *a = attr_find(c, "comm");
    p->comm = a ? a->i : 0;
    if ((a = attr_find(c, "reduce"))) {
        if (!strcmp(a->s, "sum"))
            p->red = VQ_REDUCE_SUM;
        else if (!strcmp(a->s, "mean"))
            p->red = VQ_REDUCE_MEAN;
        else if (!strcmp(a->s, "max"))
            p->red = VQ_REDUCE_MAX;
        else
            return vq_error_set(VQ_EINVAL, "reduce \"%s\" is not sum, mean or max", a->s);
    }
    p->peer = (a = attr_find(c, "root")) || (a = attr_find(c, "peer")) ? (int32_t)a->i : 0;
    p->tag = (a = attr_find(c, "tag")) ? (int32_t)a->i : 0;
    if (p->peer < 0 || p->tag < 0 || p->tag > 32767)
        return vq_error_set(VQ_EINVAL, "a negative rank, or a tag outside 0..32767");
    bool fuses_by_dtype = p->kind == VQ__COMM_ALLREDUCE || p->kind == VQ__COMM_BROADCAST;
    int first = -1;
    for (int i = 0; i < n; i++) {
        bool empty = false;
        for (int k = 0; k < c->in[i].ndim; k++)
            empty |= c->in[i].shape[k] == 0;
        if (fuses_by_dtype && !empty && first >= 0 && c->in[i].dtype != c->in[first].dtype)
            return vq_error_set(VQ_EINVAL, "input X[%d] is %s and X[%d] %s: the tensors of one "
                                           "op are fused, so they share a dtype",
                                first, vq_dtype_name(c->in[first].dtype), i,
                                vq_dtype_name(c->in[i].dtype));
        if (!empty && first < 0)
            first = i;
        if (p->kind == VQ__COMM_ALLREDUCE && p->red == VQ_REDUCE_MEAN &&
            c->in[i].dtype == VQ_BOOL)
            return vq_error_set(VQ_EINVAL, "the mean of bool tensors is not defined");
        c->out[i] = c->in[i];
    }
    return 0;
}

static void end_kernel(vq__comm *c, int err)
{
    vq_op_done *done = c->end_arg;
    if (c->own_buf)
        free(c->buf);
    free(c);
    vq_op_done_finish(done, err);
}

static void comm_kernel(const vq_op_kernel_call *k, vq_op_done *done)
{
    const struct comm_params *p = k->params;
    vq_dist *d = vq__dist_lookup((int)p->comm);
    if (!d) {
        vq_op_done_finish(done, vq_error_set(VQ_EINVAL, "no vq_dist handle with id %lld lives "
                                                        "in this process (vq_dist_id)",
                                             (long long)p->comm));
        return;
    }
    if (p->peer >= vq_dist_size(d)) {
        vq_op_done_finish(done, vq_error_set(VQ_EINVAL, "rank %d is not a rank (0..%d)",
                                             (int)p->peer, vq_dist_size(d) - 1));
        return;
    }
    vq__comm *c = calloc(1, sizeof *c);
    if (!c) {
        vq_op_done_finish(done, vq_error_set(VQ_ENOMEM, "out of memory"));
        return;
    }
    c->d = d;
    c->kind = p->kind;
    c->red = (vq_reduce_op)p->red;
    c->peer = p->peer;
    c->tag = p->tag;
    c->n = k->nout;
    c->dtype = vq_tensor_dtype(k->in[0]);
    for (int i = 0; i < k->nout; i++) {
        c->in[i] = k->in[i];
        c->out[i] = k->out[i];
        if (vq_tensor_numel(k->in[i]) > 0)
            c->dtype = vq_tensor_dtype(k->in[i]);
    }
    c->end = end_kernel;
    c->end_arg = done;
    /* the number dist_ticket took, or (an op without one) the next */
    const int64_t *ticket = k->nin > k->nout ? vq_tensor_data(k->in[k->nout]) : NULL;
    c->seq = ticket ? (uint64_t)ticket[0] : vq__dist_next_seq(d);
    snprintf(c->what, sizeof c->what, "%s #%llu", k->op, (unsigned long long)c->seq);
    vq__comm_submit(c);
}

/* dist_ticket(Token, X...) -> (Token, Ticket) {comm}: X only makes it wait
 * for the communication op's inputs. */
static int ticket_infer(const vq_op_infer_call *c)
{
    int64_t *comm = c->params;
    const vq_attr *a = attr_find(c, "comm");
    *comm = a ? a->i : 0;
    c->out[0] = c->in[0];
    c->out[1] = (vq_op_meta){.dtype = VQ_I64, .ndim = 1, .shape = {1}};
    return 0;
}

/* hot path: no malloc; the handle table's lock only */
static int ticket_kernel(const vq_op_kernel_call *k)
{
    vq_dist *d = vq__dist_lookup((int)*(const int64_t *)k->params);
    if (!d)
        return vq_error_set(VQ_EINVAL,
                            "no vq_dist handle with id %lld lives in this process "
                            "(vq_dist_id)",
                            (long long)*(const int64_t *)k->params);
    *(int64_t *)vq_tensor_data(k->out[1]) = (int64_t)vq__dist_next_seq(d);
    return 0;
}

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int registered;

static void register_ops(void)
{
    static const char *const X[] = {"X"}, *const OUT[] = {"Out"};
    static const vq_op_attr_spec reduce_attrs[] = {{"comm", VQ_ATTR_INT, true, NULL},
                                                   {"reduce", VQ_ATTR_STRING, false, "sum"}};
    static const vq_op_attr_spec bcast_attrs[] = {{"comm", VQ_ATTR_INT, true, NULL},
                                                  {"root", VQ_ATTR_INT, false, "0"}};
    static const vq_op_attr_spec p2p_attrs[] = {{"comm", VQ_ATTR_INT, true, NULL},
                                                {"peer", VQ_ATTR_INT, true, NULL},
                                                {"tag", VQ_ATTR_INT, false, "0"}};
    struct {
        const char *name;
        int kind;
        const vq_op_attr_spec *attrs;
        int nattrs;
    } ops[] = {
        {"allreduce", VQ__COMM_ALLREDUCE, reduce_attrs, 2},
        {"broadcast", VQ__COMM_BROADCAST, bcast_attrs, 2},
        {"send", VQ__COMM_SEND, p2p_attrs, 3},
        {"recv", VQ__COMM_RECV, p2p_attrs, 3},
    };
    for (size_t i = 0; i < sizeof ops / sizeof ops[0] && registered >= 0; i++) {
        vq_op_def def = {.name = ops[i].name, .inputs = X, .ninputs = 1, .outputs = OUT,
                         .noutputs = 1,
                         .flags = VQ_OP_VARIADIC_IN | VQ_OP_VARIADIC_OUT | VQ_OP_INPLACE_OK,
                         .attrs = ops[i].attrs, .nattrs = ops[i].nattrs,
                         .params_size = sizeof(struct comm_params), .infer = comm_infer,
                         .cpu_async = comm_kernel, .user = (void *)(intptr_t)ops[i].kind};
        int rc = vq_op_register(&def);
        if (rc < 0)
            registered = rc;
    }
    static const char *const TOKEN_X[] = {"Token", "X"}, *const TICKET[] = {"TokenOut", "Ticket"};
    static const vq_op_attr_spec ticket_attrs[] = {{"comm", VQ_ATTR_INT, true, NULL}};
    vq_op_def ticket = {.name = "dist_ticket",
                        .inputs = TOKEN_X,
                        .ninputs = 2,
                        .outputs = TICKET,
                        .noutputs = 2,
                        .flags = VQ_OP_VARIADIC_IN | VQ_OP_INPLACE_OK,
                        .attrs = ticket_attrs,
                        .nattrs = 1,
                        .params_size = sizeof(int64_t),
                        .infer = ticket_infer,
                        .cpu = ticket_kernel};
    if (registered >= 0) {
        int rc = vq_op_register(&ticket);
        if (rc < 0)
            registered = rc;
    }
    if (registered == 0)
        registered = 1;
}

int vq__dist_graph_register(void)
{
    pthread_once(&once, register_ops);
    return registered < 0 ? vq__fail(registered, "vq_dist_new: registering the graph ops: %s",
                                     vq_errmsg())
                          : 0;
}

/* ---- building programs ---- */

/* Declares the token var of d in main and startup (created by startup)
 * unless they have it; its name in tok. */
static int token_declare(vq_program *main, vq_program *startup, vq_dist *d, char *tok,
                         size_t size)
{
    snprintf(tok, size, "@DIST%d", vq_dist_id(d));
    int64_t zero[1] = {0};
    int rc = 0;
    if (vq__program_find_var(startup, tok) < 0) {
        vq_attr fill[3] = {VQ_ATTR_IS("shape", zero, 1), VQ_ATTR_S("dtype", "f32"),
                           VQ_ATTR_F("value", 0)};
        rc = vq_program_add_var(startup, 0, tok, VQ_F32, 1, zero, true);
        if (rc >= 0)
            rc = vq_program_add_op(startup, 0, "fill_constant", NULL, 0,
                                   (const char *const[]){tok}, 1, fill, 3);
    }
    if (rc >= 0 && vq__program_find_var(main, tok) < 0)
        rc = vq_program_add_var(main, 0, tok, VQ_F32, 1, zero, true);
    return rc < 0 ? rc : 0;
}

VQ_API int vq_dist_program_add(vq_program *main, vq_program *startup, vq_dist *d,
                               const char *type, const char *const *in,
                               const char *const *out, int n, const vq_attr *attrs,
                               int nattrs)
{
    if (!main || !startup || !d || !type || !in || !out || n < 1 || n >= VQ_OP_MAX_SLOTS ||
        nattrs < 0 || nattrs > 4 || (nattrs && !attrs))
        return vq__fail(VQ_EINVAL, "vq_dist_program_add: NULL or bad argument");
    if (strcmp(type, "allreduce") && strcmp(type, "broadcast") && strcmp(type, "send") &&
        strcmp(type, "recv"))
        return vq__fail(VQ_EINVAL, "vq_dist_program_add: %s is not allreduce, broadcast, send "
                                   "or recv",
                        type);
    char tok[32], ticket[48];
    int rc = token_declare(main, startup, d, tok, sizeof tok);
    if (rc < 0)
        return rc;
    /* a ticket var per op: each op reads the number its own ticket op took */
    snprintf(ticket, sizeof ticket, "%s.ticket%d", tok, vq_program_nops(main, 0));
    int64_t one[1] = {1};
    if ((rc = vq_program_add_var(main, 0, ticket, VQ_I64, 1, one, false)) < 0)
        return rc;
    const char *ins[VQ_OP_MAX_SLOTS + 1];
    ins[0] = tok;
    for (int i = 0; i < n; i++)
        ins[1 + i] = in[i];
    vq_attr a[5] = {VQ_ATTR_I("comm", vq_dist_id(d))};
    rc = vq_program_add_op(main, 0, "dist_ticket", ins, n + 1, (const char *const[]){tok, ticket},
                           2, a, 1);
    if (rc < 0)
        return rc;
    for (int i = 0; i < n; i++)
        ins[i] = in[i];
    ins[n] = ticket;
    for (int i = 0; i < nattrs; i++)
        a[1 + i] = attrs[i];
    return vq_program_add_op(main, 0, type, ins, n + 1, out, n, a, 1 + nattrs);
}

/* ---- the data-parallel pass ---- */

struct grad {
    int var;     /* the gradient's var */
    int last_w;  /* block-0 position of its last write */
    int first_r; /* of its first read after that (INT_MAX: none) */
    size_t bytes;
};

static int by_last_write(const void *a, const void *b)
{
    const struct grad *x = a, *y = b;
    return (x->last_w > y->last_w) - (x->last_w < y->last_w);
}

static bool is_float(vq_dtype dt) { return dt == VQ_F32 || dt == VQ_F64; }

/* Finds the parameter gradients of block 0 and where they are written and
 * read. *out is malloc'd. */
static int find_grads(const vq_program *p, struct grad **out, int *n)
{
    const vq__block *b = &p->blocks[0];
    struct grad *g = vq__calloc((size_t)p->nvars + 1, sizeof *g);
    if (!g)
        return vq__fail(VQ_ENOMEM, "vq_dist_data_parallel: out of memory");
    *n = 0;
    for (int v = 0; v < p->nvars; v++) {
        const vq__pvar *w = &p->vars[v];
        if (!w->persistable || !is_float(w->dtype) || w->block != 0)
            continue;
        char name[320];
        snprintf(name, sizeof name, "%s@GRAD", w->name);
        int gv = vq__program_find_var(p, name);
        if (gv < 0)
            continue;
        struct grad x = {.var = gv, .last_w = -1, .first_r = 1 << 30,
                         .bytes = vq_dtype_size(w->dtype)};
        for (int k = 0; k < w->ndim; k++)
            x.bytes *= (size_t)(w->shape[k] > 0 ? w->shape[k] : 0);
        for (int pos = 0; pos < b->nops; pos++) {
            const vq__pop *op = &p->ops[b->ops[pos]];
            for (int j = 0; j < op->nout; j++)
                if (op->out[j] == gv)
                    x.last_w = pos;
        }
        for (int pos = x.last_w + 1; x.last_w >= 0 && pos < b->nops; pos++) {
            const vq__pop *op = &p->ops[b->ops[pos]];
            for (int j = 0; j < op->nin && x.first_r > pos; j++)
                if (op->in[j] == gv)
                    x.first_r = pos;
        }
        if (x.last_w >= 0)
            g[(*n)++] = x;
    }
    qsort(g, (size_t)*n, sizeof *g, by_last_write);
    *out = g;
    return 0;
}

/* Moves the last op of block 0 to just after position pos. */
static void move_after(vq_program *p, int pos)
{
    vq__block *b = &p->blocks[0];
    int op = b->ops[b->nops - 1];
    memmove(&b->ops[pos + 2], &b->ops[pos + 1], (size_t)(b->nops - 2 - pos) * sizeof b->ops[0]);
    b->ops[pos + 1] = op;
    p->hash_valid = false;
}

/* Appends to startup a broadcast from rank 0 of the float persistable vars
 * its ops write, one op per dtype. */
static int broadcast_params(vq_program *startup, vq_dist *d)
{
    const vq__block *b = &startup->blocks[0];
    const char **names = vq__calloc((size_t)startup->nvars + 1, sizeof *names);
    if (!names)
        return vq__fail(VQ_ENOMEM, "vq_dist_data_parallel: out of memory");
    int rc = 0;
    for (int dt = VQ_F32; dt <= VQ_F64 && rc >= 0; dt++) {
        int n = 0;
        for (int v = 0; v < startup->nvars; v++) {
            const vq__pvar *w = &startup->vars[v];
            if (!w->persistable || w->dtype != (vq_dtype)dt || w->block != 0 ||
                !strncmp(w->name, "@DIST", 5))
                continue;
            bool written = false;
            for (int pos = 0; pos < b->nops && !written; pos++)
                for (int j = 0; j < startup->ops[b->ops[pos]].nout; j++)
                    written |= startup->ops[b->ops[pos]].out[j] == v;
            if (written)
                names[n++] = w->name;
        }
        /* one op per VQ_OP_MAX_SLOTS - 1 vars (the token takes a slot) */
        for (int at = 0; at < n && rc >= 0; at += VQ_OP_MAX_SLOTS - 1) {
            int m = n - at < VQ_OP_MAX_SLOTS - 1 ? n - at : VQ_OP_MAX_SLOTS - 1;
            vq_attr root = VQ_ATTR_I("root", 0);
            rc = vq_dist_program_add(startup, startup, d, "broadcast", names + at, names + at,
                                     m, &root, 1);
        }
    }
    free(names);
    return rc < 0 ? rc : 0;
}

VQ_API int vq_dist_data_parallel(vq_program *main, vq_program *startup, vq_dist *d,
                                 const vq_dist_dp_opts *opts)
{
    if (!main || !startup || !d)
        return vq__fail(VQ_EINVAL, "vq_dist_data_parallel: NULL argument");
    size_t bucket = opts && opts->bucket_bytes ? opts->bucket_bytes : (size_t)1 << 20;
    int prio = opts && opts->priority ? opts->priority : 100;
    const vq__block *b0 = &main->blocks[0];
    for (int pos = 0; pos < b0->nops; pos++) {
        const char *t = main->ops[b0->ops[pos]].type;
        if (!strcmp(t, "cond") || !strcmp(t, "while"))
            return vq__fail(VQ_ENOSYS, "vq_dist_data_parallel: block 0 holds a %s op (at %d): "
                                       "programs with control flow are not supported yet",
                            t, pos);
    }
    struct grad *g = NULL;
    int n = 0, rc = find_grads(main, &g, &n);
    if (rc < 0)
        return rc;
    /* Buckets: consecutive gradients (in last-write order) of one dtype
     * up to bucket bytes. Inserted from the last one back, so that the
     * positions found above still hold for the earlier ones. */
    int *start = vq__malloc(((size_t)n + 1) * sizeof *start), nb = 0;
    if (!start) {
        free(g);
        return vq__fail(VQ_ENOMEM, "vq_dist_data_parallel: out of memory");
    }
    size_t fill = 0;
    for (int i = 0; i < n; i++) {
        bool fresh = i == 0 || fill + g[i].bytes > bucket ||
                     main->vars[g[i].var].dtype != main->vars[g[i - 1].var].dtype ||
                     i - start[nb - 1] >= VQ_OP_MAX_SLOTS - 1;
        if (fresh) {
            start[nb++] = i;
            fill = 0;
        }
        fill += g[i].bytes;
    }
    start[nb] = n;
    for (int k = 0; k < nb && rc >= 0; k++) {
        int last = g[start[k + 1] - 1].last_w;
        for (int i = start[k]; i < start[k + 1]; i++)
            if (g[i].first_r <= last)
                rc = vq__fail(VQ_EINVAL, "vq_dist_data_parallel: %s is read (op at %d) before "
                                         "the last gradient of its bucket is written (at %d)",
                              main->vars[g[i].var].name, g[i].first_r, last);
    }
    for (int k = nb - 1; k >= 0 && rc >= 0; k--) {
        const char *names[VQ_OP_MAX_SLOTS];
        int m = 0;
        for (int i = start[k]; i < start[k + 1]; i++)
            names[m++] = main->vars[g[i].var].name;
        vq_attr mean = VQ_ATTR_S("reduce", "mean");
        rc = vq_dist_program_add(main, startup, d, "allreduce", names, names, m, &mean, 1);
        if (rc >= 0) { /* the ticket op and the allreduce, in that order, after last_w */
            const vq__block *b = &main->blocks[0];
            main->ops[b->ops[b->nops - 1]].priority = prio;
            main->ops[b->ops[b->nops - 2]].priority = prio;
            move_after(main, g[start[k + 1] - 1].last_w);
            move_after(main, g[start[k + 1] - 1].last_w);
        }
    }
    if (rc >= 0)
        rc = broadcast_params(startup, d);
    free(start);
    free(g);
    return rc < 0 ? rc : nb;
}
