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
 * row, named after the device and stream.
 *
 * The trace is written so that a failure is never silent and never leaves a
 * file cut short that looks complete: every write is checked, and a regular
 * file is written beside its path and renamed over it once whole (the rule
 * is above vq__trace_path_check, which vq_engine_new and
 * vq_profiler_check_path use to refuse a path early). */
#include "engine_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

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

/* ---- writing the trace ---- */

/* Where the trace goes while it is written. The first write that fails
 * stops the rest (they would fail too, or leave a hole in the file) and
 * keeps its errno for the message. */
struct trace_out {
    FILE *f;
    int err; /* errno of the first failed write; 0 while all succeed */
};

static void out_write(struct trace_out *o, const char *s, size_t n)
{
    if (o->err || n == 0)
        return;
    errno = 0;
    if (fwrite(s, 1, n, o->f) != n)
        o->err = errno ? errno : EIO;
}

static void out_printf(struct trace_out *o, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void out_printf(struct trace_out *o, const char *fmt, ...)
{
    if (o->err)
        return;
    va_list ap;
    va_start(ap, fmt);
    errno = 0;
    if (vfprintf(o->f, fmt, ap) < 0)
        o->err = errno ? errno : EIO;
    va_end(ap);
}

static void write_json_string(struct trace_out *o, const char *s)
{
    out_write(o, "\"", 1);
    while (s && *s) {
        size_t plain = 0; /* a run of characters that need no escape */
        while (s[plain] && s[plain] != '"' && s[plain] != '\\' && (unsigned char)s[plain] >= 0x20)
            plain++;
        out_write(o, s, plain);
        s += plain;
        if (*s) {
            unsigned char c = (unsigned char)*s++;
            if (c == '"' || c == '\\')
                out_printf(o, "\\%c", c);
            else
                out_printf(o, "\\u%04x", c);
        }
    }
    out_write(o, "\"", 1);
}

static void dump_buf(struct trace_out *o, vq_engine *e, struct vq__prof_buf *b, int other_tid,
                     bool *first)
{
    pthread_mutex_lock(&b->lock);
    for (size_t i = 0; i < b->n && !o->err; i++) {
        const struct vq__prof_event *ev = &b->ev[i];
        int tid = ev->worker >= 0 ? ev->worker : other_tid;
        out_printf(o, "%s\n{\"name\":", *first ? "" : ",");
        write_json_string(o, ev->name ? ev->name : "op");
        out_printf(o, ",\"cat\":\"op\",\"ph\":\"X\",\"pid\":0,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f}",
                   tid, (double)(ev->start_ns - e->t0_ns) / 1e3,
                   (double)(ev->end_ns - ev->start_ns) / 1e3);
        *first = false;
    }
    pthread_mutex_unlock(&b->lock);
}

/* The whole trace into o: a row name per worker, then every record. */
static void write_trace(struct trace_out *o, vq_engine *e)
{
    /* Rows: the workers, then "other threads" (the naive engine has no
     * worker: its CPU pools are empty, its GPUs have no workers). */
    int ncpu = e->cpu.nworkers + e->prio.nworkers;
    const struct vq__gpu *g =
        atomic_load_explicit(&e->gpu_on, memory_order_acquire) && e->gpu->workers ? e->gpu : NULL;
    int per = g ? g->per_device : 1;
    int nworkers = ncpu + (g ? g->ndev * per : 0);
    bool first = true;
    out_printf(o, "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[");
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
        out_printf(o,
                   "%s\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":%d,"
                   "\"args\":{\"name\":\"%s\"}}",
                   first ? "" : ",", t, name);
        first = false;
    }
    for (int i = 0; i < e->cpu.nworkers; i++)
        dump_buf(o, e, &e->cpu.workers[i].prof, nworkers, &first);
    for (int i = 0; i < e->prio.nworkers; i++)
        dump_buf(o, e, &e->prio.workers[i].prof, nworkers, &first);
    for (int d = 0; g && d < g->ndev; d++) {
        const struct vq__wpool *pools[3] = {&g->dev[d].compute, &g->dev[d].h2d, &g->dev[d].d2h};
        for (int p = 0; p < 3; p++)
            for (int i = 0; i < pools[p]->nworkers; i++)
                dump_buf(o, e, &pools[p]->workers[i].prof, nworkers, &first);
    }
    dump_buf(o, e, &e->ext_prof, nworkers, &first);
    out_printf(o, "\n]}\n");
}

/* The one rule for where a trace can go, shared by vq_profiler_dump (which
 * follows it), vq_profiler_check_path and VARQ_PROFILE's check in
 * vq_engine_new (which check it without creating anything): a path that
 * is a regular file or names nothing yet gets a new file beside it that is
 * renamed over it once complete, so its directory must be writable (and an
 * existing file too, which is not replaced behind its permissions);
 * anything else (a device such as /dev/stdout, a FIFO, a symbolic link) is
 * written in place. who starts each message ("vq_engine_new:
 * VARQ_PROFILE=" says which variable). */
int vq__trace_path_check(const char *who, const char *path)
{
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return vq__fail(VQ_EINVAL, "%s%s is a directory", who, path);
    if (lstat(path, &st) == 0) {
        if (access(path, W_OK) != 0)
            return vq__fail(VQ_EIO, "%s%s: %s", who, path, strerror(errno));
        if (!S_ISREG(st.st_mode))
            return 0;
    } else if (errno != ENOENT) {
        return vq__fail(VQ_EIO, "%s%s: %s", who, path, strerror(errno));
    }
    char *dir = vq__strdup(path);
    if (!dir)
        return vq__fail(VQ_ENOMEM, "%sout of memory", who);
    char *slash = strrchr(dir, '/');
    const char *d = slash ? (slash == dir ? "/" : (*slash = '\0', dir)) : ".";
    int rc = 0;
    if (access(d, W_OK | X_OK) != 0)
        rc = vq__fail(VQ_EIO, "%s%s: cannot create it in %s: %s", who, path, d, strerror(errno));
    free(dir);
    return rc;
}

VQ_API int vq_profiler_check_path(const char *path)
{
    if (!path || !*path)
        return vq__fail(VQ_EINVAL, "vq_profiler_check_path: the path is %s",
                        path ? "empty" : "NULL");
    return vq__trace_path_check("vq_profiler_check_path: ", path);
}

/* A new file beside path, for the trace to be renamed over path: named
 * path.PID.N.tmp (N counts this process's tries, so that threads dumping
 * to one path do not share one), created exclusively with path's mode when
 * it replaces one (else 0666 less the umask, as fopen would). NULL with
 * errno set when none can be made; *tmp is the caller's to free. */
static FILE *open_beside(const char *path, const struct stat *replaced, char **tmp)
{
    static atomic_uint tries; /* relaxed: only that each try gets its own value matters */
    size_t len = strlen(path) + 40;
    *tmp = malloc(len);
    if (!*tmp) {
        errno = ENOMEM;
        return NULL;
    }
    int fd = -1;
    for (int i = 0; i < 100 && fd < 0; i++) {
        snprintf(*tmp, len, "%s.%ld.%u.tmp", path, (long)getpid(),
                 atomic_fetch_add_explicit(&tries, 1, memory_order_relaxed));
        fd = open(*tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd < 0 && errno != EEXIST)
            break;
    }
    FILE *f = NULL;
    if (fd >= 0 && (!replaced || fchmod(fd, replaced->st_mode & 0777) == 0))
        f = fdopen(fd, "w");
    if (!f) {
        int err = errno;
        if (fd >= 0) {
            close(fd);
            unlink(*tmp);
        }
        free(*tmp);
        *tmp = NULL;
        errno = err;
    }
    return f;
}

VQ_API int vq_profiler_dump(vq_engine *e, const char *path)
{
    if (!e || !path)
        return vq__fail(VQ_EINVAL, "vq_profiler_dump: %s is NULL", e ? "path" : "engine");
    if (!e->profile)
        return vq__fail(VQ_EINVAL,
                        "vq_profiler_dump: the engine was created without VQ_ENGINE_PROFILE "
                        "or VARQ_PROFILE");
    /* In place or beside it: see vq__trace_path_check. */
    struct stat st;
    bool exists = lstat(path, &st) == 0;
    if (exists && S_ISREG(st.st_mode) && access(path, W_OK) != 0)
        return vq__fail(VQ_EIO, "vq_profiler_dump: cannot write \"%s\": %s", path, strerror(errno));
    char *tmp = NULL;
    FILE *f = exists && !S_ISREG(st.st_mode) ? fopen(path, "w")
                                             : open_beside(path, exists ? &st : NULL, &tmp);
    if (!f)
        return vq__fail(VQ_EIO, "vq_profiler_dump: cannot open \"%s\" for writing: %s", path,
                        strerror(errno));
    struct trace_out o = {f, 0};
    write_trace(&o, e);
    /* What is still buffered goes now, and the stream's error flag catches
     * a failure that a return value did not show. */
    if (!o.err && fflush(f) != 0)
        o.err = errno;
    if (!o.err && ferror(f))
        o.err = EIO;
    if (fclose(f) != 0 && !o.err)
        o.err = errno;
    if (!o.err && tmp && rename(tmp, path) != 0)
        o.err = errno;
    if (o.err && tmp)
        unlink(tmp); /* path keeps what it had */
    free(tmp);
    if (o.err)
        return vq__fail(VQ_EIO, "vq_profiler_dump: cannot write \"%s\": %s", path, strerror(o.err));
    return 0;
}
