/* The executor's memory plan (MXNet's static memory planner, ONNX
 * Runtime's allocation planner), made once at preparation: the
 * intermediates of a CPU plan whose block 0 is straight-line code (no
 * control op) get offsets in one arena by lifetime, and a run then takes
 * one arena (kept with the plan and reused by the next run) instead of an
 * allocation per op output. run.c asks vq__memplan_tensor for an op's
 * output; everything not planned is allocated and released as before.
 *
 * What is planned: a var of block 0, not persistable, fed or fetched,
 * written by exactly one op of the program, not in place, whose writer
 * preparation gave fixed output metas (its shapes hold for every run), and
 * whose writer and readers are ordinary kernel ops (not registered user
 * ops, whose kernels may keep what they are given). Fetched values are
 * not planned, so no tensor the caller gets points into an arena.
 *
 * When two values may share bytes. The engine runs independent ops in
 * parallel, so lifetimes by program order are not enough: value B may
 * take the bytes of value A only when every op that reads A (or, when
 * nothing reads it, the op that writes it) is an ancestor of B's writer in
 * the order the engine enforces: the ops' conflicts on vars (a read after
 * the last write, a write after the last write and the reads since),
 * closed transitively. Segments only add order (a segment's ops run in
 * program order, and two segments naming one var are ordered on it), and
 * so do the executions of one op in later runs. The alternative, adding
 * an ordering edge from A's last reader to B's writer, would hold back
 * independent branches (a ResNet's shortcut, an inception block's
 * towers) for a few bytes; the ancestor test costs nothing at run time and
 * only at preparation a bitset of ancestors per op (n^2 / 8 bytes, hence
 * VQ__MEMPLAN_MAX_OPS). B's writer may also write B over A in place when
 * its definition allows it (VQ__INPLACE_OK), A and B have one dtype and
 * shape, and the writer is A's last reader with every other reader its
 * ancestor.
 *
 * The assignment (TensorFlow Lite's greedy by size, which ONNX Runtime's
 * and MXNet's planners approach with free lists): values written in place
 * over each other form one group with one offset; groups, largest first,
 * each take the smallest gap, between the groups already placed that they
 * may be live together with, that holds them, else the end; the same in
 * program order too, and the smaller arena wins. Unlike blocks
 * handed from value to value, a large early value's bytes (a stem
 * convolution's output) serve several smaller later ones at once. Offsets
 * are 64-byte aligned.
 *
 * Runs of one plan may overlap (up to VQ__RUN_RING), and the engine orders
 * their ops per var only: run n + 1 could write B while run n still reads
 * A. So each run takes its own arena: from the plan's idle ones, or a new
 * one; its final op, which follows every op of the run, gives it back.
 * Serialized runs reuse one arena. */
#include "memplan.h"

#include <stdlib.h>
#include <string.h>

enum {
    ARENA_ALIGN = 64,
    IDLE_MAX = 2 /* idle arenas a plan keeps for its next runs */
};

/* Bytes [at, end) of the arena. */
struct span {
    size_t at, end;
};

static int span_cmp(const void *pa, const void *pb)
{
    const struct span *a = pa, *b = pb;
    return (a->at > b->at) - (a->at < b->at);
}

/* What the assignment reads about the planned values, by planned index. */
struct mp_build {
    struct plan *pl;
    int n;           /* root ops */
    size_t words;    /* per row of anc */
    uint64_t *anc;   /* row k: the ancestors of root op k */
    int *writer;     /* by planned index: its writer's root index */
    int *rd_at, *rd; /* readers of planned value b: rd[rd_at[b] .. rd_at[b + 1]) */
    int *group;      /* by planned index: its group (values written in place over
                        * each other: one offset), numbered by its first value */
    int *tail;       /* by group: its last value so far */
    /* by group: the ops that use it (its values' writers and readers),
     * uses[use_at[g] .. use_at[g + 1]); its first writer */
    int *use_at, *uses;
    int *first;
    int *last;         /* by group: its last use in program order */
    int *horizon;      /* by root op: the first op that is not its ancestor */
    struct span *near; /* the bytes of the placed groups that conflict with the
                        * one placed now */
};

static inline bool is_ancestor(const struct mp_build *m, int x, int y)
{
    return (m->anc[(size_t)y * m->words + (size_t)x / 64] >> (x % 64)) & 1;
}

static inline void add_ancestor(struct mp_build *m, int x, int y)
{
    uint64_t *row = &m->anc[(size_t)y * m->words];
    const uint64_t *from = &m->anc[(size_t)x * m->words];
    for (size_t w = 0; w <= (size_t)x / 64; w++)
        row[w] |= from[w];
    row[x / 64] |= (uint64_t)1 << (x % 64);
}

/* An op whose kernel the plan may hand arena tensors. */
static bool plain_op(const struct pop *t)
{
    return t->def && !t->def->user && !t->def->kernel_async && !(t->def->flags & VQ__CONTROL);
}

static bool meta_same(const vq__meta *a, const vq__meta *b)
{
    return a->dtype == b->dtype && a->ndim == b->ndim &&
           !memcmp(a->shape, b->shape, (size_t)a->ndim * sizeof a->shape[0]);
}

/* The ancestors of every root op by the engine's rules (file head). */
static int mp_ancestors(struct mp_build *m)
{
    struct plan *pl = m->pl;
    const struct frame *root = &pl->root;
    int nacc = 0;
    for (int k = 0; k < m->n; k++)
        nacc += root->ops[k].t->nin;
    int *last_write = vq__malloc((size_t)pl->nvars * sizeof *last_write);
    int *rhead = vq__malloc((size_t)pl->nvars * sizeof *rhead); /* readers since the write */
    int *rnext = vq__malloc((size_t)(nacc + 1) * sizeof *rnext);
    int *rop = vq__malloc((size_t)(nacc + 1) * sizeof *rop);
    int rc = 0;
    if (!last_write || !rhead || !rnext || !rop) {
        rc = vq__fail(VQ_ENOMEM, "out of memory");
        goto out;
    }
    for (int v = 0; v < pl->nvars; v++)
        last_write[v] = rhead[v] = -1;
    int nr = 0;
    for (int k = 0; k < m->n; k++) {
        const struct pop *t = root->ops[k].t;
        for (int i = 0; i < t->nin; i++)
            if (last_write[t->in[i]] >= 0)
                add_ancestor(m, last_write[t->in[i]], k);
        for (int j = 0; j < t->src->nout; j++) {
            int v = t->src->out[j];
            if (last_write[v] >= 0)
                add_ancestor(m, last_write[v], k);
            for (int r = rhead[v]; r >= 0; r = rnext[r])
                if (rop[r] != k)
                    add_ancestor(m, rop[r], k);
        }
        for (int i = 0; i < t->nin; i++) {
            rop[nr] = k;
            rnext[nr] = rhead[t->in[i]];
            rhead[t->in[i]] = nr++;
        }
        for (int j = 0; j < t->src->nout; j++) {
            last_write[t->src->out[j]] = k;
            rhead[t->src->out[j]] = -1;
        }
    }
out:
    free(last_write);
    free(rhead);
    free(rnext);
    free(rop);
    return rc;
}

/* Output b of root op k over its input a, in place (file head): k is
 * the last reader of a, every other reader is k's ancestor, and a is the
 * last value of its group. */
static bool in_place_over(const struct mp_build *m, int a, int k)
{
    for (int r = m->rd_at[a]; r < m->rd_at[a + 1]; r++)
        if (m->rd[r] != k && !is_ancestor(m, m->rd[r], k))
            return false;
    return m->tail[m->group[a]] == a;
}

/* Whether group g is done before group h starts, whatever the engine runs
 * in parallel: every op using g is an ancestor of h's first writer. */
static bool group_before(const struct mp_build *m, int g, int h)
{
    int w = m->first[h];
    /* the quick answers: g is used at or after h's start, or everything
     * before g's last use is an ancestor of w (a chain's common case) */
    if (m->last[g] >= w)
        return false;
    if (m->last[g] < m->horizon[w])
        return true;
    for (int u = m->use_at[g]; u < m->use_at[g + 1]; u++)
        if (m->uses[u] >= w || !is_ancestor(m, m->uses[u], w))
            return false;
    return true;
}

/* Which vars are planned, their metas and sizes (into offset for now). */
static int mp_pick(struct plan *pl, struct memplan *mp, int *writer)
{
    const struct frame *root = &pl->root;
    const vq_program *p = pl->prog;
    int *writes = vq__calloc((size_t)(pl->nvars ? pl->nvars : 1), sizeof *writes);
    if (!writes)
        return vq__fail(VQ_ENOMEM, "out of memory");
    for (int k = 0; k < p->nops; k++)
        for (int j = 0; j < p->ops[k].nout; j++)
            writes[p->ops[k].out[j]]++;
    for (int v = 0; v < pl->nvars; v++)
        mp->index[v] = -1;
    /* candidates: -2 marks one, set by its writer */
    for (int k = 0; k < root->nops; k++) {
        const struct pop *t = root->ops[k].t;
        for (int j = 0; t->fixed && plain_op(t) && j < t->src->nout; j++) {
            int v = t->src->out[j];
            const struct pvar *pv = &pl->vars[v];
            bool in_place = false;
            for (int i = 0; i < t->nin; i++)
                in_place |= t->in[i] == v;
            int64_t numel = vq__numel(t->fixed[j].ndim, t->fixed[j].shape);
            if (writes[v] == 1 && !in_place && !pv->persistable && pv->block == 0 && numel > 0 &&
                (uint64_t)numel < ((uint64_t)1 << 40))
                mp->index[v] = -2;
        }
    }
    for (int i = 0; i < pl->nfeeds; i++)
        mp->index[pl->feeds[i]] = -1;
    for (int i = 0; i < pl->nfetches; i++)
        mp->index[pl->fetches[i]] = -1;
    for (int k = 0; k < root->nops; k++) {
        const struct pop *t = root->ops[k].t;
        for (int i = 0; !plain_op(t) && i < t->nin; i++)
            mp->index[t->in[i]] = -1;
    }
    int n = 0;
    for (int k = 0; k < root->nops; k++) {
        const struct pop *t = root->ops[k].t;
        for (int j = 0; j < t->src->nout; j++) {
            int v = t->src->out[j];
            if (mp->index[v] != -2)
                continue;
            mp->index[v] = n;
            mp->var[n] = v;
            mp->meta[n] = t->fixed[j];
            mp->offset[n] = (size_t)vq__numel(t->fixed[j].ndim, t->fixed[j].shape) *
                            vq_dtype_size(t->fixed[j].dtype);
            writer[n++] = k;
        }
    }
    mp->n = n;
    free(writes);
    return 0;
}

/* The readers of each planned value (CSR). */
static int mp_readers(struct mp_build *m, const struct memplan *mp)
{
    const struct frame *root = &m->pl->root;
    int n = mp->n;
    m->rd_at = vq__calloc((size_t)n + 1, sizeof *m->rd_at);
    if (!m->rd_at)
        return vq__fail(VQ_ENOMEM, "out of memory");
    for (int k = 0; k < m->n; k++) {
        const struct pop *t = root->ops[k].t;
        for (int i = 0; i < t->nin; i++)
            if (mp->index[t->in[i]] >= 0)
                m->rd_at[mp->index[t->in[i]] + 1]++;
    }
    for (int b = 0; b < n; b++)
        m->rd_at[b + 1] += m->rd_at[b];
    m->rd = vq__malloc((size_t)(m->rd_at[n] ? m->rd_at[n] : 1) * sizeof *m->rd);
    int *at = vq__malloc((size_t)(n ? n : 1) * sizeof *at);
    if (!m->rd || !at) {
        free(at);
        return vq__fail(VQ_ENOMEM, "out of memory");
    }
    memcpy(at, m->rd_at, (size_t)n * sizeof *at);
    for (int k = 0; k < m->n; k++) {
        const struct pop *t = root->ops[k].t;
        for (int i = 0; i < t->nin; i++) {
            int b = mp->index[t->in[i]];
            if (b >= 0)
                m->rd[at[b]++] = k;
        }
    }
    free(at);
    return 0;
}

/* The groups: a value written in place over another joins its group. */
static void mp_groups(struct mp_build *m, const struct memplan *mp)
{
    const struct frame *root = &m->pl->root;
    for (int b = 0; b < mp->n; b++)
        m->group[b] = m->tail[b] = b;
    for (int b = 0; b < mp->n; b++) {
        int k = m->writer[b];
        const struct pop *t = root->ops[k].t;
        if (t->src->nout != 1 || !(t->def->flags & VQ__INPLACE_OK))
            continue;
        for (int i = 0; i < t->nin; i++) {
            int a = mp->index[t->in[i]];
            if (a >= 0 && meta_same(&mp->meta[a], &mp->meta[b]) && in_place_over(m, a, k)) {
                m->group[b] = m->group[a];
                m->tail[m->group[a]] = b;
                break;
            }
        }
    }
}

/* What each group's values use (writers and readers), CSR by group. */
static int mp_uses(struct mp_build *m, const struct memplan *mp)
{
    int n = mp->n;
    m->use_at = vq__calloc((size_t)n + 1, sizeof *m->use_at);
    m->first = vq__malloc((size_t)n * sizeof *m->first);
    m->last = vq__malloc((size_t)n * sizeof *m->last);
    m->horizon = vq__malloc((size_t)m->n * sizeof *m->horizon);
    if (!m->use_at || !m->first || !m->last || !m->horizon)
        return vq__fail(VQ_ENOMEM, "out of memory");
    for (int b = 0; b < n; b++)
        m->use_at[m->group[b] + 1] += 1 + m->rd_at[b + 1] - m->rd_at[b];
    for (int g = 0; g < n; g++)
        m->use_at[g + 1] += m->use_at[g];
    m->uses = vq__malloc((size_t)m->use_at[n] * sizeof *m->uses);
    int *at = vq__malloc((size_t)n * sizeof *at);
    if (!m->uses || !at) {
        free(at);
        return vq__fail(VQ_ENOMEM, "out of memory");
    }
    memcpy(at, m->use_at, (size_t)n * sizeof *at);
    for (int b = 0; b < n; b++) { /* a group's first value comes first: its writer first */
        int g = m->group[b];
        if (g == b)
            m->first[g] = m->last[g] = m->writer[b];
        m->uses[at[g]++] = m->writer[b];
        for (int r = m->rd_at[b]; r < m->rd_at[b + 1]; r++) {
            m->uses[at[g]++] = m->rd[r];
            if (m->rd[r] > m->last[g])
                m->last[g] = m->rd[r];
        }
        if (m->writer[b] > m->last[g])
            m->last[g] = m->writer[b];
    }
    free(at);
    for (int k = 0; k < m->n; k++) {
        const uint64_t *row = &m->anc[(size_t)k * m->words];
        size_t w = 0;
        while (w < m->words && row[w] == ~(uint64_t)0)
            w++;
        int h = (int)(w * 64) + (w < m->words ? __builtin_ctzll(~row[w]) : 0);
        m->horizon[k] = h < k ? h : k;
    }
    return 0;
}

static size_t aligned(size_t n)
{
    return (n + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);
}

struct group_key {
    size_t size;
    int first, g;
};

/* Largest first, then in program order. */
static int by_size(const void *pa, const void *pb)
{
    const struct group_key *a = pa, *b = pb;
    if (a->size != b->size)
        return a->size > b->size ? -1 : 1;
    return (a->first > b->first) - (a->first < b->first);
}

/* In program order (of first writers), then largest first. */
static int by_start(const void *pa, const void *pb)
{
    const struct group_key *a = pa, *b = pb;
    if (a->first != b->first)
        return (a->first > b->first) - (a->first < b->first);
    return (a->size < b->size) - (a->size > b->size);
}

/* The offsets: groups in the order cmp gives (largest first: TensorFlow
 * Lite's greedy by size), each at the smallest gap between the groups
 * placed so far that it may be live together with, else past them.
 * Offsets go into off (by group); *bytes: the arena they need.
 *
 * Which placed groups those are, without looking at every one: group x
 * surely precedes y when x's last use comes before the horizon of y's
 * first writer (group_before), so two groups can only be live together
 * when their spans [horizon of the first writer, last use] overlap.
 * Placed groups sit in buckets by where their span starts, and only the
 * buckets a span as long as the longest could overlap from are looked at:
 * on a chain, a few per group. */
static int mp_assign(struct mp_build *m, const struct memplan *mp,
                     int (*cmp)(const void *, const void *), size_t *off, size_t *bytes)
{
    int ng = 0, n = m->n;
    struct group_key *keys = vq__malloc((size_t)mp->n * sizeof *keys);
    int *bucket = vq__malloc((size_t)n * sizeof *bucket);
    int *next = vq__malloc((size_t)mp->n * sizeof *next);
    if (!keys || !bucket || !next) {
        free(keys);
        free(bucket);
        free(next);
        return vq__fail(VQ_ENOMEM, "out of memory");
    }
    int longest = 0;
    for (int b = 0; b < mp->n; b++)
        if (m->group[b] == b) {
            keys[ng++] = (struct group_key){mp->offset[b], m->first[b], b};
            int span = m->last[b] - m->horizon[m->first[b]];
            longest = span > longest ? span : longest;
        }
    qsort(keys, (size_t)ng, sizeof *keys, cmp);
    for (int k = 0; k < n; k++)
        bucket[k] = -1;
    size_t end = 0;
    /* Buckets and placed groups looked at, at most budget: past it (a
     * program with very many values live together, or spans that reach
     * far back), the groups left go past all the others, which is always
     * right and keeps preparation linear in the ops. */
    long seen = 0, budget = 8L * n + 4096;
    for (int i = 0; i < ng; i++) {
        int g = keys[i].g, nn = 0;
        size_t size = aligned(keys[i].size);
        int from = m->horizon[m->first[g]] - longest;
        for (int k = from > 0 ? from : 0; k <= m->last[g] && seen++ <= budget; k++)
            for (int h = bucket[k]; h >= 0 && seen++ <= budget; h = next[h])
                if (!group_before(m, g, h) && !group_before(m, h, g))
                    m->near[nn++] = (struct span){off[h], off[h] + aligned(mp->offset[h])};
        if (seen > budget) {
            off[g] = end;
            end += size;
            continue;
        }
        /* by offset, for the walk over the gaps */
        qsort(m->near, (size_t)nn, sizeof *m->near, span_cmp);
        size_t best = SIZE_MAX, best_gap = SIZE_MAX, top = 0;
        for (int j = 0; j < nn; j++) {
            const struct span *h = &m->near[j];
            if (h->at >= top && h->at - top >= size && h->at - top < best_gap) {
                best = top;
                best_gap = h->at - top;
            }
            if (h->end > top)
                top = h->end;
        }
        off[g] = best != SIZE_MAX ? best : top;
        if (off[g] + size > end)
            end = off[g] + size;
        int start = m->horizon[m->first[g]];
        next[g] = bucket[start];
        bucket[start] = g;
    }
    *bytes = end;
    free(keys);
    free(bucket);
    free(next);
    return 0;
}

static void memplan_destroy(struct memplan *mp)
{
    if (!mp)
        return;
    pthread_mutex_destroy(&mp->lock);
    free(mp->index);
    free(mp->var);
    free(mp->offset);
    free(mp->meta);
    free(mp);
}

int vq__memplan_build(struct plan *pl)
{
    int n = pl->root.nops;
    if (pl->exec->no_memplan || pl->root_ctl || pl->exec->device.kind != VQ_DEV_CPU || n == 0 ||
        n > VQ__MEMPLAN_MAX_OPS)
        return 0;
    struct memplan *mp = vq__calloc(1, sizeof *mp);
    struct mp_build m = {.pl = pl, .n = n, .words = ((size_t)n + 63) / 64};
    size_t nv = (size_t)(pl->nvars ? pl->nvars : 1);
    int rc = 0;
    if (mp) {
        pthread_mutex_init(&mp->lock, NULL);
        mp->index = vq__malloc(nv * sizeof *mp->index);
        mp->var = vq__malloc(nv * sizeof *mp->var);
        mp->offset = vq__malloc(nv * sizeof *mp->offset);
        mp->meta = vq__malloc(nv * sizeof *mp->meta);
    }
    m.writer = vq__malloc(nv * sizeof *m.writer);
    if (!mp || !mp->index || !mp->var || !mp->offset || !mp->meta || !m.writer) {
        rc = vq__fail(VQ_ENOMEM, "out of memory");
        goto out;
    }
    if ((rc = mp_pick(pl, mp, m.writer)) < 0 || mp->n == 0)
        goto out;
    m.anc = vq__calloc((size_t)n * m.words, sizeof *m.anc);
    size_t nb = (size_t)mp->n;
    m.group = vq__malloc(nb * sizeof *m.group);
    m.tail = vq__malloc(nb * sizeof *m.tail);
    m.near = vq__malloc(nb * sizeof *m.near);
    size_t *off = vq__malloc(2 * nb * sizeof *off), bytes[2];
    if (!m.anc || !m.group || !m.tail || !m.near || !off) {
        free(off);
        rc = vq__fail(VQ_ENOMEM, "out of memory");
        goto out;
    }
    if ((rc = mp_ancestors(&m)) < 0 || (rc = mp_readers(&m, mp)) < 0) {
        free(off);
        goto out;
    }
    mp_groups(&m, mp);
    if ((rc = mp_uses(&m, mp)) < 0) {
        free(off);
        goto out;
    }
    /* Largest first is the better order on most programs; in program
     * order wins on some (a network whose largest values come late): both,
     * and the smaller arena. */
    if ((rc = mp_assign(&m, mp, by_size, off, &bytes[0])) == 0)
        rc = mp_assign(&m, mp, by_start, off + nb, &bytes[1]);
    if (rc == 0) {
        const size_t *pick = bytes[1] < bytes[0] ? off + nb : off;
        for (int b = 0; b < mp->n; b++)
            mp->offset[b] = pick[m.group[b]];
        mp->bytes = bytes[1] < bytes[0] ? bytes[1] : bytes[0];
    }
    free(off);
    if (rc < 0)
        goto out;
    pl->mem = mp;
    mp = NULL;
out:
    memplan_destroy(mp);
    free(m.anc);
    free(m.writer);
    free(m.rd_at);
    free(m.rd);
    free(m.group);
    free(m.tail);
    free(m.use_at);
    free(m.uses);
    free(m.first);
    free(m.last);
    free(m.horizon);
    free(m.near);
    return rc;
}

static void arena_free(const struct memplan *mp, struct memarena *a)
{
    for (int k = 0; a->hdr && k < mp->n; k++)
        vq_tensor_release(a->hdr[k]); /* the arena's own reference: the last */
    free(a->hdr);
    free(a->data);
    free(a);
}

void vq__memplan_free(struct plan *pl)
{
    struct memplan *mp = pl->mem;
    if (!mp)
        return;
    for (struct memarena *a = mp->idle, *next; a; a = next) {
        next = a->next;
        arena_free(mp, a);
    }
    for (struct memarena *a = mp->retired, *next; a; a = next) {
        next = a->next;
        arena_free(mp, a);
    }
    memplan_destroy(mp);
    pl->mem = NULL;
}

struct memarena *vq__memplan_take(struct plan *pl)
{
    struct memplan *mp = pl->mem;
    if (!mp)
        return NULL;
    pthread_mutex_lock(&mp->lock);
    struct memarena *a = mp->idle;
    if (a) {
        mp->idle = a->next;
        mp->nidle--;
    }
    pthread_mutex_unlock(&mp->lock);
    if (a)
        return a;
    /* A new one. Out of memory, the run allocates as without a plan. */
    a = vq__calloc(1, sizeof *a);
    if (!a)
        return NULL;
    a->hdr = vq__calloc((size_t)mp->n, sizeof *a->hdr);
    a->data = vq__aligned_alloc(ARENA_ALIGN, mp->bytes);
    for (int k = 0; a->hdr && a->data && k < mp->n; k++) {
        const vq__meta *m = &mp->meta[k];
        if (vq_tensor_wrap(&a->hdr[k], m->dtype, m->ndim, m->shape, (char *)a->data + mp->offset[k],
                           NULL, NULL) < 0) {
            a->hdr[k] = NULL;
            break;
        }
    }
    if (!a->hdr || !a->data || !a->hdr[mp->n - 1]) {
        arena_free(mp, a);
        return NULL;
    }
    return a;
}

void vq__memplan_give(struct plan *pl, struct memarena *a)
{
    struct memplan *mp = pl->mem;
    if (!a)
        return;
    /* Every op of the run is done; a header another holder still keeps (a
     * value a run cut short never read) must keep its bytes. */
    bool clean = true;
    for (int k = 0; k < mp->n && clean; k++)
        clean = atomic_load_explicit(&a->hdr[k]->refs, memory_order_acquire) == 1;
    pthread_mutex_lock(&mp->lock);
    if (!clean) {
        a->next = mp->retired;
        mp->retired = a;
        a = NULL;
    } else if (mp->nidle < IDLE_MAX) {
        a->next = mp->idle;
        mp->idle = a;
        mp->nidle++;
        a = NULL;
    }
    pthread_mutex_unlock(&mp->lock);
    if (a)
        arena_free(mp, a);
}

int vq__exec_memplan(vq_exec *ex, int nvars, int64_t *offset, size_t *size, size_t *arena)
{
    pthread_mutex_lock(&ex->lock);
    struct plan *pl = ex->lru_head;
    int rc = 0;
    if (!pl || pl->nvars != nvars) {
        rc = vq__fail(VQ_EINVAL, "vq__exec_memplan: no plan of %d vars cached", nvars);
    } else {
        const struct memplan *mp = pl->mem;
        for (int v = 0; v < nvars; v++) {
            int k = mp ? mp->index[v] : -1;
            offset[v] = k >= 0 ? (int64_t)mp->offset[k] : -1;
            size[v] = k >= 0 ? (size_t)vq__numel(mp->meta[k].ndim, mp->meta[k].shape) *
                                   vq_dtype_size(mp->meta[k].dtype)
                             : 0;
        }
        *arena = mp ? mp->bytes : 0;
        rc = mp ? mp->n : 0;
    }
    pthread_mutex_unlock(&ex->lock);
    return rc;
}
