/* The profiler: one record per completed op (name, worker, start, end) in a
 * buffer per worker thread, and vq_profiler_dump, which writes them as a
 * Chrome trace ("X" complete events, microseconds) that Perfetto and
 * chrome://tracing open.
 *
 * When the engine is not profiling, the only cost is the test of
 * engine->profile in vq__op_run and vq__op_finish. Records of ops completed
 * by threads that are not workers (async ops finished elsewhere, the naive
 * engine) go to a buffer shared under a mutex. GPU workers (one per stream,
 * gpu.c) are workers like the CPU ones: their ops show on their stream's
 * row, named after the device and stream. */
#include "engine_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

uint64_t vq__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void vq__prof_buf_init(struct vq__prof_buf *b)
{
    pthread_mutex_init(&b->lock, NULL);
    b->ev = NULL;
    b->n = b->cap = 0;
}

void vq__prof_buf_destroy(struct vq__prof_buf *b)
{
    pthread_mutex_destroy(&b->lock);
    free(b->ev);
    b->ev = NULL;
    b->n = b->cap = 0;
}

bool vq__engine_profiling(const vq_engine *e)
{
    return e->profile;
}

void vq__prof_span(vq_engine *e, const char *name, uint64_t start_ns, uint64_t end_ns,
                   int worker)
{
    struct vq__worker *w = vq__self();
    struct vq__prof_buf *b = w && w->engine == e ? &w->prof : &e->ext_prof;
    pthread_mutex_lock(&b->lock);
    if (b->n == b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 1024;
        struct vq__prof_event *ev = vq__realloc(b->ev, cap * sizeof *ev);
        if (!ev) {
            pthread_mutex_unlock(&b->lock); /* out of memory: drop the record */
            return;
        }
        b->ev = ev;
        b->cap = cap;
    }
    b->ev[b->n++] = (struct vq__prof_event){name, start_ns, end_ns, worker};
    pthread_mutex_unlock(&b->lock);
}

void vq__prof_record(vq_engine *e, const vq__op *op, uint64_t end_ns)
{
    /* An op skipped before it started (or an internal op) has no start. */
    vq__prof_span(e, op->desc->name, op->start_ns ? op->start_ns : end_ns, end_ns, op->worker);
}

static void write_json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

static void dump_buf(FILE *f, vq_engine *e, struct vq__prof_buf *b, int other_tid, bool *first)
{
    pthread_mutex_lock(&b->lock);
    for (size_t i = 0; i < b->n; i++) {
        const struct vq__prof_event *ev = &b->ev[i];
        int tid = ev->worker >= 0 ? ev->worker : other_tid;
        fprintf(f, "%s\n{\"name\":", *first ? "" : ",");
        write_json_string(f, ev->name ? ev->name : "op");
        fprintf(f, ",\"cat\":\"op\",\"ph\":\"X\",\"pid\":0,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f}", tid,
                (double)(ev->start_ns - e->t0_ns) / 1e3, (double)(ev->end_ns - ev->start_ns) / 1e3);
        *first = false;
    }
    pthread_mutex_unlock(&b->lock);
}

VQ_API int vq_profiler_dump(vq_engine *e, const char *path)
{
    if (!e || !path)
        return vq__fail(VQ_EINVAL, "vq_profiler_dump: %s is NULL", e ? "path" : "engine");
    if (!e->profile)
        return vq__fail(VQ_EINVAL,
                        "vq_profiler_dump: the engine was created without VQ_ENGINE_PROFILE "
                        "or VARQ_PROFILE");
    FILE *f = fopen(path, "w");
    if (!f)
        return vq__fail(VQ_EIO, "vq_profiler_dump: cannot open \"%s\" for writing", path);
    /* Rows: the workers, then "other threads" (the naive engine has no
     * worker: its CPU pools are empty, its GPUs have no workers). */
    int ncpu = e->cpu.nworkers + e->prio.nworkers;
    const struct vq__gpu *g =
        atomic_load_explicit(&e->gpu_on, memory_order_acquire) && e->gpu->workers ? e->gpu : NULL;
    int per = g ? g->per_device : 1;
    int nworkers = ncpu + (g ? g->ndev * per : 0);
    bool first = true;
    fputs("{\"displayTimeUnit\":\"ns\",\"traceEvents\":[", f);
    for (int t = 0; t <= nworkers; t++) {
        char name[48];
        int d = (t - ncpu) / per, k = (t - ncpu) % per;
        if (t == nworkers)
            snprintf(name, sizeof name, "other threads");
        else if (t < ncpu)
            snprintf(name, sizeof name, "%s worker %d", t < e->cpu.nworkers ? "cpu" : "cpu-prio", t);
        else if (k < per - 2)
            snprintf(name, sizeof name, "gpu%d stream %d", d, k);
        else
            snprintf(name, sizeof name, "gpu%d copy %s device", d, k == per - 2 ? "to" : "from");
        fprintf(f,
                "%s\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":%d,"
                "\"args\":{\"name\":\"%s\"}}",
                first ? "" : ",", t, name);
        first = false;
    }
    for (int i = 0; i < e->cpu.nworkers; i++)
        dump_buf(f, e, &e->cpu.workers[i].prof, nworkers, &first);
    for (int i = 0; i < e->prio.nworkers; i++)
        dump_buf(f, e, &e->prio.workers[i].prof, nworkers, &first);
    for (int d = 0; g && d < g->ndev; d++) {
        const struct vq__wpool *pools[3] = {&g->dev[d].compute, &g->dev[d].h2d, &g->dev[d].d2h};
        for (int p = 0; p < 3; p++)
            for (int i = 0; i < pools[p]->nworkers; i++)
                dump_buf(f, e, &pools[p]->workers[i].prof, nworkers, &first);
    }
    dump_buf(f, e, &e->ext_prof, nworkers, &first);
    fputs("\n]}\n", f);
    if (fclose(f) != 0)
        return vq__fail(VQ_EIO, "vq_profiler_dump: cannot write \"%s\"", path);
    return 0;
}
