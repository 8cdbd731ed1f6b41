/* Executor stress without a test framework, so that it runs under
 * ThreadSanitizer too (Criterion cannot): two threads start async runs of
 * one plan and of a second plan sharing a scope, with different feeds, many
 * in flight at once, some of them failing; every run's fetch is compared
 * with the value computed serially, and every callback must come exactly
 * once. With --gpu the executor runs on GPU 0 (VARQ_GPU_BACKEND: the
 * emulated backend in the suite): bookkeeping on the GPU workers, stream-
 * ordered frees, host feeds copied in, device-found errors reported through
 * the run. Usage: exec_stress [runs per thread] [--gpu]. */
#include <varq/varq.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define INFLIGHT 24

static vq_engine *engine;
static vq_exec *exec;
static vq_scope *scope;
static vq_program *prog;
static atomic_int failures;
static vq_ctx device; /* the executor's */

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "exec_stress: %s (%s)\n", what, vq_errmsg());
        atomic_fetch_add(&failures, 1);
    }
}

/* out = (x + b) * 3 - x, with b persistable: [8] f64; d = x / k in i64
 * fails when k has a zero. */
static vq_program *build(void)
{
    vq_program *p;
    int64_t s[1] = {8};
    check(vq_program_new(&p) == 0, "program_new");
    const char *f64v[] = {"x", "t", "u", "out"};
    for (int i = 0; i < 4; i++)
        check(vq_program_add_var(p, 0, f64v[i], VQ_F64, 1, s, false) == 0, "add_var");
    check(vq_program_add_var(p, 0, "b", VQ_F64, 1, s, true) == 0, "add_var b");
    const char *i64v[] = {"n", "k", "d"};
    for (int i = 0; i < 3; i++)
        check(vq_program_add_var(p, 0, i64v[i], VQ_I64, 1, s, false) == 0, "add_var");
    vq_attr three = VQ_ATTR_F("scale", 3);
    check(vq_program_add_op(p, 0, "add", (const char *[]){"x", "b"}, 2, (const char *[]){"t"}, 1,
                            NULL, 0) >= 0, "add_op");
    check(vq_program_add_op(p, 0, "scale", (const char *[]){"t"}, 1, (const char *[]){"u"}, 1,
                            &three, 1) >= 0, "add_op");
    check(vq_program_add_op(p, 0, "sub", (const char *[]){"u", "x"}, 2, (const char *[]){"out"},
                            1, NULL, 0) >= 0, "add_op");
    check(vq_program_add_op(p, 0, "div", (const char *[]){"n", "k"}, 2, (const char *[]){"d"}, 1,
                            NULL, 0) >= 0, "add_op");
    return p;
}

struct job {
    vq_tensor *x, *n, *k;
    vq_fetch fetch[2];
    double base;
    int fail;
    atomic_int calls;
    int err;
};

static void done(void *user, int err)
{
    struct job *j = user;
    j->err = err;
    atomic_fetch_add(&j->calls, 1);
}

static void job_start(struct job *j, unsigned seed)
{
    int64_t s[1] = {8};
    double xv[8];
    int64_t nv[8], kv[8];
    j->base = (double)(seed % 1000);
    j->fail = seed % 7 == 0;
    for (int i = 0; i < 8; i++) {
        xv[i] = j->base + i;
        nv[i] = 100 + i;
        kv[i] = j->fail && i == 3 ? 0 : 1 + i;
    }
    check(vq_tensor_from(&j->x, VQ_F64, 1, s, xv) == 0, "tensor x");
    check(vq_tensor_from(&j->n, VQ_I64, 1, s, nv) == 0, "tensor n");
    check(vq_tensor_from(&j->k, VQ_I64, 1, s, kv) == 0, "tensor k");
    vq_feed feeds[3] = {{"x", j->x}, {"n", j->n}, {"k", j->k}};
    j->fetch[0] = (vq_fetch){"out", NULL};
    j->fetch[1] = (vq_fetch){"d", NULL};
    atomic_init(&j->calls, 0);
    j->err = 1;
    check(vq_exec_run_async(exec, prog, scope, feeds, 3, j->fetch, 2, done, j) == 0,
          "run_async");
}

/* A host copy of a fetch (NULL stays NULL). */
static vq_tensor *host(vq_tensor *t)
{
    if (!t || vq_tensor_device(t).kind == VQ_DEV_CPU)
        return vq_tensor_retain(t);
    vq_tensor *h = NULL;
    check(vq_tensor_copy_to(engine, t, (vq_ctx){VQ_DEV_CPU, 0}, &h) == 0 && vq_tensor_wait(h) == 0,
          "copy to the host");
    return h;
}

static void job_check(struct job *j)
{
    while (atomic_load(&j->calls) == 0)
        sched_yield();
    check(atomic_load(&j->calls) == 1, "callback count");
    if (j->fail) {
        check(j->err == VQ_EINVAL, "a division by zero fails the run");
        check(!j->fetch[0].tensor && !j->fetch[1].tensor, "failed runs fetch nothing");
    } else {
        check(j->err == 0, "run failed");
        vq_tensor *ho = host(j->fetch[0].tensor), *hd = host(j->fetch[1].tensor);
        const double *out = ho ? vq_tensor_data(ho) : NULL;
        const int64_t *d = hd ? vq_tensor_data(hd) : NULL;
        for (int i = 0; out && d && i < 8; i++) {
            double x = j->base + i;
            check(out[i] == (x + 0.5 * i) * 3 - x, "out value");
            check(d[i] == (100 + i) / (1 + i), "d value");
        }
        check(out && d, "fetches present");
        vq_tensor_release(ho);
        vq_tensor_release(hd);
    }
    vq_tensor_release(j->fetch[0].tensor);
    vq_tensor_release(j->fetch[1].tensor);
    vq_tensor_release(j->x);
    vq_tensor_release(j->n);
    vq_tensor_release(j->k);
}

static long runs_per_thread;

static void *pusher(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg;
    struct job *jobs = calloc(INFLIGHT, sizeof *jobs);
    for (long r = 0; r < runs_per_thread; r++) {
        struct job *j = &jobs[r % INFLIGHT];
        if (r >= INFLIGHT)
            job_check(j);
        seed = seed * 1103515245u + 12345u;
        job_start(j, seed >> 8);
    }
    for (long r = runs_per_thread > INFLIGHT ? runs_per_thread - INFLIGHT : 0; r < runs_per_thread;
         r++)
        job_check(&jobs[r % INFLIGHT]);
    free(jobs);
    return NULL;
}

int main(int argc, char **argv)
{
    runs_per_thread = 2000;
    device = (vq_ctx){VQ_DEV_CPU, 0};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--gpu"))
            device = (vq_ctx){VQ_DEV_GPU, 0};
        else
            runs_per_thread = atol(argv[i]);
    }
    vq_engine_opts o = {.kind = VQ_ENGINE_THREADED, .cpu_workers = 2};
    vq_exec_opts xo = {.device = device};
    if (vq_engine_new(&engine, &o) || vq_exec_new(&exec, engine, &xo) || vq_scope_new(&scope)) {
        fprintf(stderr, "exec_stress: setup: %s\n", vq_errmsg());
        return 1;
    }
    int64_t s[1] = {8};
    double bv[8] = {0, 0.5, 1, 1.5, 2, 2.5, 3, 3.5};
    vq_tensor *b;
    check(vq_tensor_from(&b, VQ_F64, 1, s, bv) == 0, "tensor b");
    check(vq_scope_set(scope, "b", b) == 0, "scope_set");
    vq_tensor_release(b);
    prog = build();
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&t[i], NULL, pusher, (void *)(uintptr_t)(i + 1));
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    vq_exec_stats st;
    vq_exec_get_stats(exec, &st);
    check(st.prepares == 1, "one preparation");
    check(st.runs == (uint64_t)(2 * runs_per_thread), "every run counted");
    vq_program_free(prog);
    vq_exec_free(exec);
    vq_scope_free(scope);
    vq_engine_free(engine);
    int f = atomic_load(&failures);
    printf("exec_stress: %ld runs on %s, %d failures\n", 2 * runs_per_thread,
           device.kind == VQ_DEV_GPU ? "GPU 0" : "the CPU", f);
    return f != 0;
}
