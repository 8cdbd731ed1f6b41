/* Creating and freeing an engine: its options, and the environment
 * variables that fill in those left zero (VARQ_ENGINE, VARQ_CPU_WORKERS,
 * VARQ_CPU_BIND, VARQ_PROFILE); the start and stop of its worker pools;
 * and the lists of live vars and prebuilt ops (vq_var_new here, vq_opr_new
 * in engine.c) through which vq_engine_free reclaims what the program did
 * not free. None of it is on the push path (engine.c): vq__var_destroy and
 * vq__opr_destroy are called from there only for a deletion op and for a
 * prebuilt op's last reference, each of which takes list_lock anyway. */
#include "engine_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <unistd.h>

/* ---- lists of live vars and oprs, so vq_engine_free reclaims them ---- */

void vq__list_add(vq_engine *e, struct vq__link **head, struct vq__link *l)
{
    pthread_mutex_lock(&e->list_lock);
    l->prev = NULL;
    l->next = *head;
    if (*head)
        (*head)->prev = l;
    *head = l;
    pthread_mutex_unlock(&e->list_lock);
}

void vq__list_del(vq_engine *e, struct vq__link **head, struct vq__link *l)
{
    pthread_mutex_lock(&e->list_lock);
    if (l->prev)
        l->prev->next = l->next;
    else
        *head = l->next;
    if (l->next)
        l->next->prev = l->prev;
    pthread_mutex_unlock(&e->list_lock);
}

#define CONTAINER(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))

/* ---- options and environment ---- */

static int env_int(const char *name, int lo, int hi, int *out)
{
    const char *s = getenv(name);
    if (!s)
        return 0;
    /* digits only: strtol alone would take " 2" and "+3" */
    bool digits = *s != '\0' && strspn(s, "0123456789") == strlen(s);
    char *end;
    long v = digits ? strtol(s, &end, 10) : 0;
    if (!digits || v < lo || v > hi)
        return vq__fail(VQ_EINVAL, "vq_engine_new: %s=\"%s\" is not an integer in %d..%d", name, s,
                        lo, hi);
    *out = (int)v;
    return 1;
}

static int resolve_opts(vq_engine *e, const vq_engine_opts *o)
{
    static const vq_engine_opts defaults;
    if (!o)
        o = &defaults;
    if (o->kind < 0 || o->kind > VQ_ENGINE_NAIVE)
        return vq__fail(VQ_EINVAL, "vq_engine_new: unknown engine kind %d", o->kind);
    if (o->cpu_workers < 0 || o->cpu_workers > 1024)
        return vq__fail(VQ_EINVAL, "vq_engine_new: cpu_workers is %d, not in 0..1024",
                        o->cpu_workers);
    if (o->cpu_prio_workers < 0 || o->cpu_prio_workers > 1024)
        return vq__fail(VQ_EINVAL, "vq_engine_new: cpu_prio_workers is %d, not in 0..1024",
                        o->cpu_prio_workers);
    if (o->gpu_streams < 0 || o->gpu_streams > 64)
        return vq__fail(VQ_EINVAL, "vq_engine_new: gpu_streams is %d, not in 0..64",
                        o->gpu_streams);
    if (o->cpu_bind < 0 || o->cpu_bind > VQ_CPU_BIND_CLOSE)
        return vq__fail(VQ_EINVAL, "vq_engine_new: cpu_bind is %d, not a VQ_CPU_BIND_* value",
                        o->cpu_bind);
    if (o->flags & ~(unsigned)VQ_ENGINE_PROFILE)
        return vq__fail(VQ_EINVAL, "vq_engine_new: unknown flags 0x%x",
                        o->flags & ~(unsigned)VQ_ENGINE_PROFILE);

    /* The environment is checked whenever it is set, even where opts
     * override it: a typo must not pass silently. */
    int env_kind = VQ_ENGINE_THREADED;
    const char *ek = getenv("VARQ_ENGINE");
    if (ek) {
        if (strcmp(ek, "threaded") == 0)
            env_kind = VQ_ENGINE_THREADED;
        else if (strcmp(ek, "naive") == 0)
            env_kind = VQ_ENGINE_NAIVE;
        else
            return vq__fail(VQ_EINVAL,
                            "vq_engine_new: VARQ_ENGINE=\"%s\" is neither \"threaded\" nor "
                            "\"naive\"",
                            ek);
    }
    long ncores = sysconf(_SC_NPROCESSORS_ONLN);
    int env_workers = ncores < 1 ? 1 : ncores > 1024 ? 1024 : (int)ncores;
    int rc = env_int("VARQ_CPU_WORKERS", 1, 1024, &env_workers);
    if (rc < 0)
        return rc;
    int spin = VQ__SPIN_LOOKS;
    if ((rc = env_int("VARQ_CPU_SPIN", 0, 1000000, &spin)) < 0)
        return rc;
    int env_bind = VQ_CPU_BIND_SPREAD;
    const char *eb = getenv("VARQ_CPU_BIND");
    if (eb) {
        if (!strcmp(eb, "none"))
            env_bind = VQ_CPU_BIND_NONE;
        else if (!strcmp(eb, "spread"))
            env_bind = VQ_CPU_BIND_SPREAD;
        else if (!strcmp(eb, "close"))
            env_bind = VQ_CPU_BIND_CLOSE;
        else
            return vq__fail(VQ_EINVAL,
                            "vq_engine_new: VARQ_CPU_BIND=\"%s\" is none of \"none\", "
                            "\"spread\", \"close\"",
                            eb);
    }
    const char *ep = getenv("VARQ_PROFILE");
    if (ep) {
        if (*ep == '\0')
            return vq__fail(VQ_EINVAL, "vq_engine_new: VARQ_PROFILE is set but empty");
        /* writable when the engine is freed: checked now, so that a path
         * that cannot be is an error rather than a lost trace */
        if ((rc = vq__trace_path_check("vq_engine_new: VARQ_PROFILE=", ep)) < 0)
            return rc;
        e->profile_path = vq__strdup(ep);
        if (!e->profile_path)
            return vq__fail(VQ_ENOMEM, "vq_engine_new: out of memory");
    }

    e->kind = o->kind ? o->kind : env_kind;
    e->cpu_workers = o->cpu_workers ? o->cpu_workers : env_workers;
    e->cpu_prio_workers = o->cpu_prio_workers;
    e->cpu_bind = o->cpu_bind ? o->cpu_bind : env_bind;
    e->max_pending = 4096;
    e->spin_looks = spin;
    e->gpu_streams = o->gpu_streams ? o->gpu_streams : 2;
    e->profile = (o->flags & VQ_ENGINE_PROFILE) || e->profile_path;
    return 0;
}

/* Undoes vq_engine_new's initialization, once its workers are stopped:
 * the failure path of vq_engine_new and the end of vq_engine_free. */
static void engine_destroy(vq_engine *e)
{
    vq__prof_buf_destroy(&e->ext_prof);
    pthread_mutex_destroy(&e->wait_lock);
    pthread_cond_destroy(&e->wait_cond);
    pthread_mutex_destroy(&e->list_lock);
    pthread_mutex_destroy(&e->naive_lock);
    pthread_mutex_destroy(&e->gpu_lock);
    free(e->profile_path);
    free(e);
}

VQ_API int vq_engine_new(vq_engine **out, const vq_engine_opts *opts)
{
    if (!out)
        return vq__fail(VQ_EINVAL, "vq_engine_new: out is NULL");
    *out = NULL;
    vq_engine *e = vq__aligned_alloc(VQ__CACHELINE, (sizeof *e + VQ__CACHELINE - 1) &
                                                        ~(size_t)(VQ__CACHELINE - 1));
    if (!e)
        return vq__fail(VQ_ENOMEM, "vq_engine_new: out of memory");
    memset(e, 0, sizeof *e);
    int rc = resolve_opts(e, opts);
    if (rc < 0) {
        free(e->profile_path);
        free(e);
        return rc;
    }
    pthread_mutex_init(&e->wait_lock, NULL);
    pthread_cond_init(&e->wait_cond, NULL);
    pthread_mutex_init(&e->list_lock, NULL);
    pthread_mutex_init(&e->naive_lock, NULL);
    pthread_mutex_init(&e->gpu_lock, NULL);
    vq__prof_buf_init(&e->ext_prof);
    e->t0_ns = vq__now_ns();
    if (e->kind == VQ_ENGINE_THREADED) {
        vq_ctx cpu0 = {VQ_DEV_CPU, 0};
        rc = vq__pool_start(e, &e->cpu, e->cpu_workers, 0, cpu0, NULL);
        if (rc == 0 && e->cpu_prio_workers > 0) {
            rc = vq__pool_start(e, &e->prio, e->cpu_prio_workers, e->cpu_workers, cpu0, NULL);
            if (rc < 0)
                vq__pool_stop(&e->cpu);
            e->has_prio = rc == 0;
        }
        if (rc < 0) {
            vq__fail_prefixed(rc, "vq_engine_new");
            engine_destroy(e);
            return rc;
        }
    }
    *out = e;
    return 0;
}

void vq__var_destroy(vq_engine *e, vq_var *v)
{
    vq__list_del(e, &e->vars, &v->link);
    if (v->gpu_ev)
        vq__gpu_var_release(v);
    if (v->fail_note) /* a failure nobody waited for */
        vq__fail_note_unref(v->fail_note);
    vq__pool_free(VQ__POOL_VBLOCK, v->head);
    v->head = NULL;
    atomic_store_explicit(&v->state, VQ__VAR_DEAD, memory_order_release);
    vq__pool_free(VQ__POOL_VAR, v);
}

void vq__opr_destroy(vq_opr *o)
{
    if (o->desc.arg_free)
        o->desc.arg_free(o->desc.arg);
    vq__op *spare = atomic_load_explicit(&o->spare, memory_order_relaxed);
    if (spare)
        vq__pool_free(VQ__POOL_OP, spare);
    while (o->reserve_ops) { /* every push is done: the whole reserve is home */
        vq__op *next = o->reserve_ops->next;
        vq__pool_free(VQ__POOL_OP, o->reserve_ops);
        o->reserve_ops = next;
    }
    while (o->reserve_blocks) {
        struct vq__vblock *next = o->reserve_blocks->next;
        vq__pool_free(VQ__POOL_VBLOCK, o->reserve_blocks);
        o->reserve_blocks = next;
    }
    free(o->desc.vars);
    free(o);
}

/* acquire/release: the hook's own setup (capture's registry) is seen by
 * the freeing thread that finds the hook. */
static _Atomic(vq__engine_free_fn) free_hook;

void vq__engine_on_free(vq__engine_free_fn fn)
{
    atomic_store_explicit(&free_hook, fn, memory_order_release);
}

VQ_API void vq_engine_free(vq_engine *e)
{
    if (!e)
        return;
    /* First, what the layers above still hold for e (open captures' recorded
     * calls), so that it is pushed and drained with the rest. */
    vq__engine_free_fn hook = atomic_load_explicit(&free_hook, memory_order_acquire);
    if (hook)
        hook(e);
    vq__wait_pending(e);
    if (e->profile_path && vq_profiler_dump(e, e->profile_path) < 0)
        /* vq_engine_free returns nothing: the one place the library
         * prints, so that a lost trace is never silent (engine.h). */
        fprintf(stderr, "varq: the VARQ_PROFILE trace was not written: %s\n", vq_errmsg());
    /* A vq_done_finish on a foreign thread may still be on its way out
     * after its op counted as complete: handing the ops its op made ready
     * to a pool (which this thread, waiting above, may already have run),
     * it takes the pool's sleep_lock to wake a worker. So it must be out
     * before the pools stop and destroy that lock: a lock of the destroyed
     * mutex hung engine_stress in CI once. */
    while (atomic_load(&e->finishers) != 0)
        sched_yield();
    if (e->kind == VQ_ENGINE_THREADED) {
        vq__pool_stop(&e->cpu);
        if (e->has_prio)
            vq__pool_stop(&e->prio);
    }
    vq__gpu_stop(e);
    while (e->vars)
        vq__var_destroy(e, CONTAINER(e->vars, vq_var, link));
    while (e->oprs) {
        vq_opr *o = CONTAINER(e->oprs, vq_opr, link);
        vq__list_del(e, &e->oprs, &o->link);
        vq__opr_destroy(o);
    }
    vq__gpu_free(e); /* the vars gave their events back */
    engine_destroy(e);
}

/* ---- vars ---- */

VQ_API vq_var *vq_var_new(vq_engine *e, const char *name)
{
    if (!e) {
        vq__fail(VQ_EINVAL, "vq_var_new: engine is NULL");
        return NULL;
    }
    vq_var *v = vq__pool_alloc(VQ__POOL_VAR);
    if (!v || vq__var_init(v, e, name) < 0) {
        if (v)
            vq__pool_free(VQ__POOL_VAR, v);
        vq__fail(VQ_ENOMEM, "vq_var_new: out of memory");
        return NULL;
    }
    vq__list_add(e, &e->vars, &v->link);
    return v;
}
