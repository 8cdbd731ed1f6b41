/* The executor's plan cache and the executor's life (vq_exec_new,
 * vq_exec_free, vq_exec_prepare): an executor is its plan cache, an LRU of
 * plans keyed by XXH3-64 of the program, the feed and fetch names and the
 * device. A miss prepares a new plan (plan.c); run.c pins a plan for each
 * run (vq__plan_acquire) and unpins it when the run is done. */
#include "graph_internal.h"
#include "plan.h"
#include "optimize.h"
#include "scope.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

/* Plans are destroyed outside the executor's lock: destroying pushes var
 * deletions, and on the naive engine a push runs ops, which take the lock
 * (a run's final op) while the engine's own lock is held. So a plan dropped
 * under the lock is buried, and reap() destroys it once the lock is let
 * go. */
void vq__plan_bury(vq_exec *ex, struct plan *pl)
{
    pl->lru_next = ex->dead;
    ex->dead = pl;
}

static void reap(vq_exec *ex)
{
    pthread_mutex_lock(&ex->lock);
    struct plan *pl = ex->dead;
    ex->dead = NULL;
    pthread_mutex_unlock(&ex->lock);
    while (pl) {
        struct plan *next = pl->lru_next;
        vq__plan_destroy(pl);
        pl = next;
    }
}

/* ---- the plan cache ---- */

/* The names part of a key: feeds, then fetches, each NUL terminated, with
 * the counts in front so that (a | b) and (a b |) differ; then, for a plan
 * specialized on the feeds' shapes, each feed's dtype, rank and dims.
 * Written into buf (size bytes) when it fits, else into a new allocation;
 * NULL when out of memory. */
static char *key_names(char *buf, size_t size, const char *const *feeds, int nfeeds,
                       const char *const *fetches, int nfetches, const vq__meta *metas, size_t *len)
{
    size_t n = sizeof nfeeds + sizeof nfetches;
    for (int i = 0; metas && i < nfeeds; i++)
        n += 2 * sizeof(int) + (size_t)metas[i].ndim * sizeof(int64_t);
    for (int i = 0; i < nfeeds; i++)
        n += strlen(feeds[i]) + 1;
    for (int i = 0; i < nfetches; i++)
        n += strlen(fetches[i]) + 1;
    if (n > size && !(buf = vq__malloc(n)))
        return NULL;
    /* no printf: this runs once per run */
    memcpy(buf, &nfeeds, sizeof nfeeds);
    memcpy(buf + sizeof nfeeds, &nfetches, sizeof nfetches);
    size_t at = sizeof nfeeds + sizeof nfetches;
    for (int i = 0; i < nfeeds + nfetches; i++) {
        const char *nm = i < nfeeds ? feeds[i] : fetches[i - nfeeds];
        size_t l = strlen(nm) + 1;
        memcpy(buf + at, nm, l);
        at += l;
    }
    for (int i = 0; metas && i < nfeeds; i++) {
        int dt = (int)metas[i].dtype, nd = metas[i].ndim;
        memcpy(buf + at, &dt, sizeof dt);
        memcpy(buf + at + sizeof dt, &nd, sizeof nd);
        at += 2 * sizeof(int);
        memcpy(buf + at, metas[i].shape, (size_t)nd * sizeof(int64_t));
        at += (size_t)nd * sizeof(int64_t);
    }
    *len = at;
    return buf;
}

static void lru_unlink(vq_exec *ex, struct plan *pl)
{
    if (pl->lru_prev)
        pl->lru_prev->lru_next = pl->lru_next;
    else
        ex->lru_head = pl->lru_next;
    if (pl->lru_next)
        pl->lru_next->lru_prev = pl->lru_prev;
    else
        ex->lru_tail = pl->lru_prev;
    pl->lru_prev = pl->lru_next = NULL;
    ex->nplans--;
}

static void lru_push_front(vq_exec *ex, struct plan *pl)
{
    pl->lru_prev = NULL;
    pl->lru_next = ex->lru_head;
    if (ex->lru_head)
        ex->lru_head->lru_prev = pl;
    ex->lru_head = pl;
    if (!ex->lru_tail)
        ex->lru_tail = pl;
    ex->nplans++;
}

/* Drops idle plans from the cold end while the cache is over size. A plan
 * with runs in flight stays until a later call. Called locked. */
static void lru_trim(vq_exec *ex)
{
    struct plan *pl = ex->lru_tail;
    while (ex->nplans > ex->cache_size && pl) {
        struct plan *prev = pl->lru_prev;
        if (pl->refs == 1) {
            lru_unlink(ex, pl);
            vq__plan_bury(ex, pl);
        }
        pl = prev;
    }
}

/* Whether p's plans are specialized on the feeds' shapes: a cached plan of
 * p knows (any of them: the flag is the program's), else a look at p's
 * ops. Called locked. */
static bool program_dynamic(vq_exec *ex, const vq_program *p, uint64_t ph)
{
    for (struct plan *pl = ex->lru_head; pl; pl = pl->lru_next)
        if (pl->prog_hash == ph)
            return pl->dynamic;
    return vq__program_reads_values(p);
}

/* Finds or builds the plan and pins it (refs + 1). Called locked.
 * metas: the feeds' metas, for a program whose shapes follow values (a
 * plan per feed-shape signature, its shape arithmetic computed when it is
 * prepared), or NULL. */
static int plan_get(vq_exec *ex, const vq_program *p, vq_scope *s, const char *const *feeds,
                    int nfeeds, const vq__meta *metas, const char *const *fetches, int nfetches,
                    struct plan **out)
{
    /* A cache hit (every run) keeps the names on the stack; a new plan
     * keeps a copy. */
    char stack[512];
    size_t nlen;
    uint64_t ph = vq_program_hash(p);
    if (metas && !program_dynamic(ex, p, ph))
        metas = NULL;
    char *names = key_names(stack, sizeof stack, feeds, nfeeds, fetches, nfetches, metas, &nlen);
    if (!names)
        return vq__fail(VQ_ENOMEM, "out of memory");
    /* The program's hash and the device seed the hash of the names. */
    uint64_t dev = (uint64_t)(unsigned)ex->device.kind << 32 | (unsigned)ex->device.id;
    uint64_t seed = ph ^ dev * 0x9e3779b97f4a7c15ull;
    uint64_t key = XXH3_64bits_withSeed(names, nlen, seed);
    uint64_t gen = s ? vq__scope_generation(s) : 0, sid = vq__scope_id(s);
    for (struct plan *pl = ex->lru_head, *next; pl; pl = next) {
        next = pl->lru_next;
        if (atomic_load(&pl->broken)) {
            /* a run's push failed (struct plan): never used again */
            if (pl->refs == 1) {
                lru_unlink(ex, pl);
                vq__plan_bury(ex, pl);
            }
            continue;
        }
        if (pl->key != key || pl->prog_hash != ph || pl->scope_id != sid || pl->key_len != nlen ||
            memcmp(pl->key_names, names, nlen))
            continue;
        if (pl->scope_gen != gen && pl->refs == 1) {
            /* The scope's bindings changed: the plan's persistable vars may
             * point at old tensors. Prepare again. */
            lru_unlink(ex, pl);
            vq__plan_bury(ex, pl);
            break;
        }
        if (pl->scope_gen != gen)
            continue;
        lru_unlink(ex, pl);
        lru_push_front(ex, pl);
        pl->refs++;
        ex->stats.cache_hits++;
        if (names != stack)
            free(names);
        *out = pl;
        return 0;
    }
    struct plan *pl = NULL;
    if (names == stack) { /* the new plan keeps its own copy */
        if (!(names = vq__malloc(nlen)))
            return vq__fail(VQ_ENOMEM, "out of memory");
        memcpy(names, stack, nlen);
    }
    int rc = vq__plan_new(ex, p, s, feeds, nfeeds, metas, fetches, nfetches, &pl);
    if (rc) {
        free(names);
        return rc;
    }
    pl->key = key;
    pl->prog_hash = ph;
    pl->key_names = names;
    pl->key_len = nlen;
    pl->scope_gen = s ? vq__scope_generation(s) : 0; /* after our own bindings */
    pl->scope_id = sid;
    pl->refs = 2;
    ex->stats.prepares++;
    lru_push_front(ex, pl);
    lru_trim(ex);
    *out = pl;
    return 0;
}

int vq__plan_acquire(vq_exec *ex, const char *who, const vq_program *p, vq_scope *s,
                     const char *const *feeds, int nfeeds, const vq_feed *feed_tensors,
                     const char *const *fetches, int nfetches, struct plan **out)
{
    vq__meta stack[16], *metas = NULL;
    if (feed_tensors && nfeeds > 0) {
        metas = nfeeds <= 16 ? stack : vq__malloc((size_t)nfeeds * sizeof *metas);
        if (!metas)
            return vq__fail(VQ_ENOMEM, "%s: out of memory", who);
        for (int i = 0; i < nfeeds; i++) {
            if (!feed_tensors[i].tensor) { /* feed_bind says so */
                if (metas != stack)
                    free(metas);
                metas = NULL;
                break;
            }
            vq__meta_of_tensor(&metas[i], feed_tensors[i].tensor);
        }
    }
    pthread_mutex_lock(&ex->lock);
    int rc = plan_get(ex, p, s, feeds, nfeeds, metas, fetches, nfetches, out);
    if (metas && metas != stack)
        free(metas);
    pthread_mutex_unlock(&ex->lock);
    reap(ex);
    /* Preparation's messages say what and where ("op 3 (add): reads var
     * t, ..."); the call the user made goes in front. */
    return rc < 0 ? vq__fail_prefixed(rc, "%s", who) : rc;
}

void vq__plan_unpin(vq_exec *ex, struct plan *pl)
{
    pthread_mutex_lock(&ex->lock);
    pl->refs--;
    pthread_cond_broadcast(&ex->idle);
    lru_trim(ex);
    pthread_mutex_unlock(&ex->lock);
    reap(ex);
}

/* ---- public ---- */

VQ_API int vq_exec_new(vq_exec **out, vq_engine *e, const vq_exec_opts *opts)
{
    if (!out || !e)
        return vq__fail(VQ_EINVAL, "vq_exec_new: NULL argument");
    vq_exec_opts o = opts ? *opts : (vq_exec_opts){0};
    if (o.cache_size < 0)
        return vq__fail(VQ_EINVAL, "vq_exec_new: cache_size is %d", o.cache_size);
    if (o.timeout_ms < 0)
        return vq__fail(VQ_EINVAL, "vq_exec_new: timeout_ms is %d", o.timeout_ms);
    if (o.flags &
        ~(VQ_EXEC_CHECK_NAN | VQ_EXEC_FETCH_HOST | VQ_EXEC_NO_SEGMENTS | VQ_EXEC_NO_MEMPLAN))
        return vq__fail(VQ_EINVAL, "vq_exec_new: unknown flags 0x%x", o.flags);
    const char *env = getenv("VARQ_CHECK_NAN");
    if (env && strcmp(env, "0") && strcmp(env, "1") && *env)
        return vq__fail(VQ_EINVAL, "vq_exec_new: VARQ_CHECK_NAN is \"%s\", not 0 or 1", env);
    /* checked whenever it is set, even where o.seed overrides it */
    uint64_t env_seed;
    int rc = vq__env_seed("vq_exec_new", &env_seed);
    if (rc < 0)
        return rc;
    uint64_t seed = o.seed ? o.seed : rc ? env_seed : VQ_DEFAULT_SEED;
    bool check_nan = (o.flags & VQ_EXEC_CHECK_NAN) || (env && !strcmp(env, "1"));
    vq__allocator *a;
    if (o.device.kind == VQ_DEV_GPU && (rc = vq__gpu_allocator(o.device.id, &a)) < 0) {
        /* The device must exist now: VQ_ENOSYS / VQ_EINVAL saying why. */
        char what[48];
        snprintf(what, sizeof what, "vq_exec_new: GPU %d", o.device.id);
        return vq__fail_prefixed(rc, "%s", what);
    } else if (o.device.kind != VQ_DEV_GPU && (o.device.kind != VQ_DEV_CPU || o.device.id != 0)) {
        return vq__fail(VQ_EINVAL, "vq_exec_new: device {%d, %d} is not CPU 0 or a GPU",
                        o.device.kind, o.device.id);
    }
    unsigned opt; /* before the executor exists: a bad setting leaves nothing to free */
    if ((rc = vq__opt_parse(getenv("VARQ_OPT"), &opt)) < 0)
        return vq__fail_prefixed(rc, "vq_exec_new");
    vq_exec *ex = vq__calloc(1, sizeof *ex);
    if (!ex)
        return vq__fail(VQ_ENOMEM, "vq_exec_new: out of memory");
    ex->engine = e;
    ex->device = o.device;
    ex->cache_size = o.cache_size ? o.cache_size : 16;
    ex->check_nan = check_nan;
    ex->timeout_ms = o.timeout_ms;
    ex->seed = seed;
    ex->fetch_host = (o.flags & VQ_EXEC_FETCH_HOST) != 0;
    const char *seg = getenv("VARQ_EXEC_SEGMENTS");
    ex->no_segments = (o.flags & VQ_EXEC_NO_SEGMENTS) || (seg && !strcmp(seg, "0"));
    const char *memplan = getenv("VARQ_MEMPLAN");
    ex->no_memplan = (o.flags & VQ_EXEC_NO_MEMPLAN) || (memplan && !strcmp(memplan, "0"));
    ex->opt = opt;
    pthread_mutex_init(&ex->lock, NULL);
    pthread_cond_init(&ex->idle, NULL);
    *out = ex;
    return 0;
}

int vq__exec_plan_nops(vq_exec *ex)
{
    pthread_mutex_lock(&ex->lock);
    int n = ex->lru_head ? ex->lru_head->prog->blocks[0].nops : -1;
    pthread_mutex_unlock(&ex->lock);
    return n;
}

VQ_API void vq_exec_free(vq_exec *ex)
{
    if (!ex)
        return;
    pthread_mutex_lock(&ex->lock);
    for (;;) {
        bool busy = false;
        for (struct plan *pl = ex->lru_head; pl && !busy; pl = pl->lru_next)
            busy = pl->refs > 1;
        if (!busy)
            break;
        pthread_cond_wait(&ex->idle, &ex->lock);
    }
    while (ex->lru_head) {
        struct plan *pl = ex->lru_head;
        lru_unlink(ex, pl);
        vq__plan_bury(ex, pl);
    }
    pthread_mutex_unlock(&ex->lock);
    reap(ex);
    pthread_mutex_destroy(&ex->lock);
    pthread_cond_destroy(&ex->idle);
    free(ex);
}

VQ_API int vq_exec_cancel(vq_exec *ex)
{
    if (!ex)
        return vq__fail(VQ_EINVAL, "vq_exec_cancel: NULL executor");
    return vq__runs_cancel(ex);
}

VQ_API int vq_exec_get_stats(vq_exec *ex, vq_exec_stats *out)
{
    if (!ex || !out)
        return vq__fail(VQ_EINVAL, "vq_exec_get_stats: NULL argument");
    pthread_mutex_lock(&ex->lock);
    *out = ex->stats;
    pthread_mutex_unlock(&ex->lock);
    return 0;
}

VQ_API int vq_exec_prepare(vq_exec *ex, const vq_program *p, vq_scope *s, const char *const *feeds,
                           int nfeeds, const char *const *fetches, int nfetches)
{
    if (!ex || !p || nfeeds < 0 || nfetches < 0 || (nfeeds && !feeds) || (nfetches && !fetches))
        return vq__fail(VQ_EINVAL, "vq_exec_prepare: bad argument");
    for (int i = 0; i < nfeeds; i++)
        if (!feeds[i])
            return vq__fail(VQ_EINVAL, "vq_exec_prepare: feed %d is NULL", i);
    for (int i = 0; i < nfetches; i++)
        if (!fetches[i])
            return vq__fail(VQ_EINVAL, "vq_exec_prepare: fetch %d is NULL", i);
    struct plan *pl;
    int rc =
        vq__plan_acquire(ex, "vq_exec_prepare", p, s, feeds, nfeeds, NULL, fetches, nfetches, &pl);
    if (rc == 0)
        vq__plan_unpin(ex, pl);
    return rc;
}
