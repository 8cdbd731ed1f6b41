/* Registered ops under concurrency, without a test framework so that it
 * runs under ThreadSanitizer too (Criterion cannot): one thread registers
 * ops while two others run a registered async op (finished by two finisher
 * threads of its own) and a registered sync op, imperatively and through
 * the executor, and check every value. Exercises the registry's lock-free
 * table publication, async completion from foreign threads, and the
 * executor's async path. Usage: op_register_stress [iterations]. */
#include <varq/varq.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 64 /* elements per tensor */

static atomic_int failures;

static void check(bool ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "op_register_stress: %s (%s)\n", what, vq_errmsg());
        atomic_fetch_add(&failures, 1);
    }
}

/* ---- the finishers: a queue of started async kernels ---- */

struct job {
    const vq_op_kernel_call *k;
    vq_op_done *done;
    struct job *next;
};

static pthread_mutex_t queue_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t queue_cond = PTHREAD_COND_INITIALIZER;
static struct job *queue_head;
static bool queue_closed;

static void *finisher(void *arg)
{
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&queue_lock);
        while (!queue_head && !queue_closed)
            pthread_cond_wait(&queue_cond, &queue_lock);
        struct job *j = queue_head;
        if (j)
            queue_head = j->next;
        pthread_mutex_unlock(&queue_lock);
        if (!j)
            return NULL;
        const double *x = vq_tensor_data(j->k->in[0]);
        double *y = vq_tensor_data(j->k->out[0]);
        for (int64_t i = 0; i < vq_tensor_numel(j->k->in[0]); i++)
            y[i] = x[i] + 1;
        vq_op_done *done = j->done;
        free(j);
        vq_op_done_finish(done, 0);
    }
}

/* s_async(X) -> Out = X + 1, f64, computed by a finisher. */
static void async_start(const vq_op_kernel_call *k, vq_op_done *done)
{
    struct job *j = malloc(sizeof *j);
    if (!j) {
        vq_op_done_finish(done, vq_error_set(VQ_ENOMEM, "out of memory"));
        return;
    }
    *j = (struct job){.k = k, .done = done};
    pthread_mutex_lock(&queue_lock);
    j->next = queue_head; /* order does not matter: each job is its own op */
    queue_head = j;
    pthread_cond_signal(&queue_cond);
    pthread_mutex_unlock(&queue_lock);
}

static int same_infer(const vq_op_infer_call *c)
{
    if (c->in[0].dtype != VQ_F64)
        return vq_error_set(VQ_EINVAL, "input X: f64 only");
    c->out[0] = c->in[0];
    return 0;
}

/* s_double(X) -> Out = 2 X. */
static int double_cpu(const vq_op_kernel_call *k)
{
    const double *x = vq_tensor_data(k->in[0]);
    double *y = vq_tensor_data(k->out[0]);
    for (int64_t i = 0; i < vq_tensor_numel(k->in[0]); i++)
        y[i] = 2 * x[i];
    return 0;
}

static const char *const X[] = {"X"}, *const OUT[] = {"Out"};

static int register_one(const char *name, bool async)
{
    return vq_op_register(&(vq_op_def){.name = name, .inputs = X, .ninputs = 1, .outputs = OUT,
                                       .noutputs = 1, .flags = VQ_OP_INPLACE_OK,
                                       .infer = same_infer,
                                       .cpu = async ? NULL : double_cpu,
                                       .cpu_async = async ? async_start : NULL});
}

/* ---- the workers ---- */

static vq_engine *engine;
static vq_exec *exec;
static vq_program *prog;
static int iterations = 200;

static vq_tensor *filled(double v)
{
    vq_tensor *t;
    check(vq_tensor_new(&t, VQ_F64, 1, (int64_t[]){N}) == 0, "vq_tensor_new");
    for (int i = 0; i < N; i++)
        ((double *)vq_tensor_data(t))[i] = v + i;
    return t;
}

/* t[i] == ((v + i) + 1) * 2 + 1: what s_async, s_double, s_async make of
 * filled(v). */
static bool holds(vq_tensor *t, double v)
{
    const double *d = vq_tensor_data(t);
    for (int i = 0; i < N; i++)
        if (d[i] != (v + i + 1) * 2 + 1)
            return false;
    return true;
}

static void *worker(void *arg)
{
    int id = (int)(intptr_t)arg;
    vq_scope *s;
    check(vq_scope_new(&s) == 0, "vq_scope_new");
    for (int it = 0; it < iterations; it++) {
        /* imperative: ((x + 1) * 2) + 1, in place after the first op */
        vq_tensor *x = filled(id + it), *y = NULL;
        check(vq_op_run(engine, "s_async", &x, 1, &y, 1, NULL, 0) == 0, "run s_async");
        check(vq_op_run(engine, "s_double", &y, 1, &y, 1, NULL, 0) == 0, "run s_double");
        check(vq_op_run(engine, "s_async", &y, 1, &y, 1, NULL, 0) == 0, "run s_async 2");
        check(vq_tensor_wait(y) == 0, "wait");
        check(holds(y, id + it), "imperative value");
        /* the same through the executor */
        vq_feed feed = {"x", x};
        vq_fetch fetch = {"z", NULL};
        check(vq_exec_run(exec, prog, s, &feed, 1, &fetch, 1) == 0, "vq_exec_run");
        if (fetch.tensor)
            check(holds(fetch.tensor, id + it), "program value");
        vq_tensor_release(fetch.tensor);
        vq_tensor_release(x);
        vq_tensor_release(y);
    }
    vq_scope_free(s);
    return NULL;
}

static void *registrar(void *arg)
{
    int n = *(int *)arg;
    char name[32];
    for (int i = 0; i < n; i++) {
        snprintf(name, sizeof name, "s_more_%04d", i);
        check(register_one(name, i % 2) == 0, "register");
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc > 1)
        iterations = atoi(argv[1]);
    check(register_one("s_async", true) == 0, "register s_async");
    check(register_one("s_double", false) == 0, "register s_double");
    pthread_t fin[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&fin[i], NULL, finisher, NULL);

    vq_engine_opts o = {.kind = VQ_ENGINE_THREADED, .cpu_workers = 2};
    check(vq_engine_new(&engine, &o) == 0, "vq_engine_new");
    check(vq_exec_new(&exec, engine, NULL) == 0, "vq_exec_new");
    check(vq_program_new(&prog) == 0, "vq_program_new");
    const char *vars[] = {"x", "a", "b", "z"};
    for (int i = 0; i < 4; i++)
        check(vq_program_add_var(prog, 0, vars[i], VQ_F64, 1, (int64_t[]){N}, false) == 0,
              "add var");
    check(vq_program_add_op(prog, 0, "s_async", &vars[0], 1, &vars[1], 1, NULL, 0) >= 0, "op");
    check(vq_program_add_op(prog, 0, "s_double", &vars[1], 1, &vars[2], 1, NULL, 0) >= 0, "op");
    check(vq_program_add_op(prog, 0, "s_async", &vars[2], 1, &vars[3], 1, NULL, 0) >= 0, "op");

    int before = vq_op_count(), more = 300;
    pthread_t w[2], r;
    pthread_create(&r, NULL, registrar, &more);
    for (int i = 0; i < 2; i++)
        pthread_create(&w[i], NULL, worker, (void *)(intptr_t)(i * 1000));
    for (int i = 0; i < 2; i++)
        pthread_join(w[i], NULL);
    pthread_join(r, NULL);
    check(vq_op_count() == before + more, "every registration counted");
    check(vq_op_signature("s_more_0299") != NULL, "the last registration is found");

    vq_program_free(prog);
    vq_exec_free(exec);
    vq_engine_free(engine);
    pthread_mutex_lock(&queue_lock);
    queue_closed = true;
    pthread_cond_broadcast(&queue_cond);
    pthread_mutex_unlock(&queue_lock);
    for (int i = 0; i < 2; i++)
        pthread_join(fin[i], NULL);
    int f = atomic_load(&failures);
    printf("op_register_stress: %d iterations x 2 threads, %d registrations: %s\n", iterations,
           more, f ? "FAILED" : "ok");
    return f ? 1 : 0;
}
