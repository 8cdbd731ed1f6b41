/* An engine freed while captures on it are open (include/varq/capture.h),
 * without a test framework so that it runs under ThreadSanitizer too: a
 * thread begins a capture, records two calls, releases its tensors and
 * never ends the capture; then the engine is freed by that thread, by
 * another while the capturing thread waits, or by another while the
 * capturing thread exits (its exit and the free race for the capture).
 * Every round the recorded calls must have run by the end of the free
 * (a probe op counts them and copies what it read), and no thread may
 * touch the freed engine. Usage: capture_engine_free [rounds]. */
#include <varq/varq.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { FREE_HERE, FREE_THERE_WAITING, FREE_THERE_EXITING, MODES };

static atomic_int probe_runs;
static _Atomic double probe_last; /* the last element the probe read */

static int probe_infer(const vq_op_infer_call *c)
{
    c->out[0] = c->in[0];
    return 0;
}

static int probe_cpu(const vq_op_kernel_call *k)
{
    memcpy(vq_tensor_data(k->out[0]), vq_tensor_data(k->in[0]), vq_tensor_nbytes(k->in[0]));
    atomic_store(&probe_last, ((const double *)vq_tensor_data(k->in[0]))[3]);
    atomic_fetch_add(&probe_runs, 1);
    return 0;
}

struct round {
    vq_engine *e;
    int mode;
    int rc;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool recorded, freed;
};

static void *capturer(void *arg)
{
    struct round *r = arg;
    int64_t s[1] = {4};
    double v[4] = {1, 2, 3, 4};
    vq_tensor *x = NULL, *y = NULL, *z = NULL;
    vq_attr two = VQ_ATTR_F("scale", 2);
    int rc = vq_tensor_from(&x, VQ_F64, 1, s, v);
    if (rc == 0)
        rc = vq_capture_begin(r->e);
    if (rc == 0)
        rc = vq_op_run(r->e, "scale", &x, 1, &y, 1, &two, 1);
    if (rc == 0)
        rc = vq_op_run(r->e, "capture_probe", &y, 1, &z, 1, NULL, 0);
    vq_tensor_release(x);
    vq_tensor_release(y);
    vq_tensor_release(z);
    r->rc = rc;
    if (r->mode == FREE_HERE) {
        vq_engine_free(r->e);
        return NULL;
    }
    pthread_mutex_lock(&r->lock);
    r->recorded = true;
    pthread_cond_broadcast(&r->cond);
    while (r->mode == FREE_THERE_WAITING && !r->freed)
        pthread_cond_wait(&r->cond, &r->lock);
    pthread_mutex_unlock(&r->lock);
    return NULL; /* the capture's state goes at the exit */
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 60;
    static const char *const X[] = {"X"}, *const OUT[] = {"Out"};
    if (vq_op_register(&(vq_op_def){.name = "capture_probe",
                                    .inputs = X,
                                    .ninputs = 1,
                                    .outputs = OUT,
                                    .noutputs = 1,
                                    .infer = probe_infer,
                                    .cpu = probe_cpu}) != 0) {
        fprintf(stderr, "capture_engine_free: register: %s\n", vq_errmsg());
        return 1;
    }
    int failures = 0;
    for (int i = 0; i < rounds; i++) {
        struct round r = {.mode = i % MODES};
        vq_engine_opts o = {.kind = VQ_ENGINE_THREADED, .cpu_workers = 2};
        if (vq_engine_new(&r.e, &o) != 0) {
            fprintf(stderr, "capture_engine_free: engine: %s\n", vq_errmsg());
            return 1;
        }
        pthread_mutex_init(&r.lock, NULL);
        pthread_cond_init(&r.cond, NULL);
        pthread_t th;
        if (pthread_create(&th, NULL, capturer, &r) != 0)
            return 1;
        if (r.mode != FREE_HERE) {
            pthread_mutex_lock(&r.lock);
            while (!r.recorded)
                pthread_cond_wait(&r.cond, &r.lock);
            pthread_mutex_unlock(&r.lock);
            vq_engine_free(r.e);
            if (atomic_load(&probe_runs) != i + 1) {
                fprintf(stderr,
                        "capture_engine_free: round %d (mode %d): %d probe runs by the "
                        "free, not %d\n",
                        i, r.mode, atomic_load(&probe_runs), i + 1);
                failures++;
            }
            pthread_mutex_lock(&r.lock);
            r.freed = true;
            pthread_cond_broadcast(&r.cond);
            pthread_mutex_unlock(&r.lock);
        }
        pthread_join(th, NULL);
        if (r.rc != 0 || atomic_load(&probe_runs) != i + 1 || atomic_load(&probe_last) != 8.0) {
            fprintf(stderr,
                    "capture_engine_free: round %d (mode %d): rc %d, %d probe runs, "
                    "last value %g\n",
                    i, r.mode, r.rc, atomic_load(&probe_runs), atomic_load(&probe_last));
            failures++;
        }
        pthread_mutex_destroy(&r.lock);
        pthread_cond_destroy(&r.cond);
    }
    if (failures)
        return 1;
    printf("capture_engine_free: %d rounds\n", rounds);
    return 0;
}
