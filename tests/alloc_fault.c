/* Failure injection at every allocation, SQLite's method (#22 item 2): each
 * workload below runs once per allocation it makes, with the N-th one
 * failing (N = 1, 2, 3, ... until a run completes without reaching N), each
 * run in a child process under a time limit. At every N:
 *   - the workload returns an error, which must be VQ_ENOMEM with a message,
 *     or it survives the failure by design and returns what a run without
 *     failures returns (its fingerprint);
 *   - nothing crashes, nothing hangs (SIGALRM after 30 s), and under ASan
 *     nothing leaks and nothing is used after free (the child's exit runs
 *     LeakSanitizer; an ASan report aborts it);
 *   - the same workload then runs again without failures in the same
 *     process and gives the fingerprint (varq is still usable).
 * It prints, per workload, the allocations tried and the distinct call
 * sites that failed (return addresses).
 *
 * Usage: alloc_fault [--full] [workload...]. Without --full, a workload
 * with more allocations than STRIDE_BUDGET tries every k-th N so that about
 * that many children run (the suite's form); --full tries every N. */
#include <varq/varq.h>

#include "fault.h"

#include <errno.h>
#include <execinfo.h>
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define STRIDE_BUDGET 150 /* children per workload in the reduced form */
#define MAX_SITES 4096

/* A workload returns 0 and fills *fp, or the first error it met (after
 * releasing everything it made). */
typedef int (*workload_fn)(double *fp);

#define TRY(call)                                                                          \
    do {                                                                                   \
        rc = (call);                                                                       \
        if (rc < 0)                                                                        \
            goto out;                                                                      \
    } while (0)
#define TRY_PTR(ptr, call)                                                                 \
    do {                                                                                   \
        if (!((ptr) = (call))) {                                                           \
            rc = VQ_ENOMEM; /* the call set the message */                                 \
            goto out;                                                                      \
        }                                                                                  \
    } while (0)

/* ---- engine: vars, sync and async ops, prebuilt ops, var frees ---- */

static double counters[4];

static int bump(void *arg, const vq_exec_ctx *x)
{
    (void)x;
    counters[(intptr_t)arg % 4] += 1 + (double)((intptr_t)arg % 7);
    return 0;
}

static void bump_async(void *arg, const vq_exec_ctx *x, vq_done *d)
{
    bump(arg, x);
    vq_done_finish(d, 0);
}

static int w_engine(double *fp)
{
    vq_engine *e = NULL;
    vq_var *v[4] = {NULL};
    vq_opr *pre = NULL;
    int rc = 0;
    memset(counters, 0, sizeof counters);
    vq_engine_opts o = {.kind = VQ_ENGINE_THREADED, .cpu_workers = 2};
    TRY(vq_engine_new(&e, &o));
    for (int i = 0; i < 4; i++)
        TRY_PTR(v[i], vq_var_new(e, "v"));
    for (intptr_t i = 0; i < 40; i++) {
        /* op i writes counter i % 4 (its var) and reads the next one */
        vq_task t = {.fn = i % 5 == 3 ? NULL : bump, .async_fn = i % 5 == 3 ? bump_async : NULL,
                     .arg = (void *)i, .writes = &v[i % 4], .nwrites = 1,
                     .reads = &v[(i + 1) % 4], .nreads = 1, .priority = (int)(i % 3)};
        TRY(vq_push(e, &t));
    }
    vq_task pt = {.fn = bump, .arg = (void *)(intptr_t)2, .writes = &v[2], .nwrites = 1};
    TRY_PTR(pre, vq_opr_new(e, &pt));
    for (int i = 0; i < 5; i++)
        TRY(vq_push_opr(e, pre));
    TRY(vq_var_free(e, v[3]));
    v[3] = NULL;
    TRY(vq_wait_all(e));
    *fp = counters[0] + 10 * counters[1] + 100 * counters[2] + 1000 * counters[3];
out:
    if (e) {
        int wrc = vq_wait_all(e);
        if (rc == 0)
            rc = wrc;
        if (pre)
            vq_opr_free(e, pre);
        for (int i = 0; i < 4; i++)
            if (v[i])
                vq_var_free(e, v[i]);
        vq_engine_free(e);
    }
    return rc;
}

/* ---- tensors and imperative ops, .npy files ---- */

static char tmpdir[64];

static int w_ops(double *fp)
{
    vq_engine *e = NULL;
    vq_tensor *t[8] = {NULL};
    int rc = 0;
    double sum = 0;
    TRY(vq_engine_new(&e, &(vq_engine_opts){.kind = VQ_ENGINE_THREADED, .cpu_workers = 2}));
    TRY(vq_tensor_new(&t[0], VQ_F32, 2, (int64_t[]){4, 3}));
    TRY(vq_tensor_new(&t[1], VQ_F32, 2, (int64_t[]){3, 5}));
    for (int i = 0; i < 12; i++)
        ((float *)vq_tensor_data(t[0]))[i] = (float)i / 7;
    for (int i = 0; i < 15; i++)
        ((float *)vq_tensor_data(t[1]))[i] = (float)(i % 4) - 1;
    TRY(vq_op_run(e, "matmul", t, 2, &t[2], 1, NULL, 0));
    TRY(vq_op_run(e, "softmax", &t[2], 1, &t[3], 1, NULL, 0));
    TRY(vq_op_run(e, "add", (vq_tensor *[]){t[3], t[2]}, 2, &t[4], 1, NULL, 0));
    TRY(vq_op_run(NULL, "tanh", &t[0], 1, &t[5], 1, NULL, 0));
    TRY(vq_tensor_wait(t[4]));
    char path[128];
    snprintf(path, sizeof path, "%s/t.npy", tmpdir);
    TRY(vq_npy_save(path, t[4]));
    TRY(vq_npy_load(path, &t[6]));
    for (int i = 0; i < 20; i++)
        sum += ((float *)vq_tensor_data(t[6]))[i] * (i + 1);
    for (int i = 0; i < 12; i++)
        sum += ((float *)vq_tensor_data(t[5]))[i];
    *fp = sum;
out:
    for (int i = 0; i < 8; i++)
        if (t[i] && e)
            vq_tensor_wait(t[i]);
    for (int i = 0; i < 8; i++)
        vq_tensor_release(t[i]);
    vq_engine_free(e);
    return rc;
}

/* ---- programs: build, encode, decode, save, load, dump ---- */

static int build_mlp(vq_program **main, vq_program **startup, bool train)
{
    int rc;
    *main = *startup = NULL;
    TRY(vq_program_new(main));
    TRY(vq_program_new(startup));
    TRY(vq_program_add_var(*main, 0, "x", VQ_F32, 2, (int64_t[]){-1, 4}, false));
    TRY(vq_program_add_var(*main, 0, "label", VQ_I64, 1, (int64_t[]){-1}, false));
    TRY(vq_layer_linear(*main, *startup, "x", "h", 8, 3));
    TRY(vq_layer_activation(*main, "tanh", "h", "a"));
    TRY(vq_layer_linear(*main, *startup, "a", "logits", 3, 5));
    TRY(vq_layer_softmax_cross_entropy(*main, "logits", "label", "probs", "loss"));
    if (train) {
        vq_optimizer adam = {.kind = VQ_OPT_ADAM, .learning_rate = 0.05, .clip_norm = 1.0};
        TRY(vq_optimizer_minimize(*main, *startup, "loss", &adam));
    }
    return 0;
out:
    vq_program_free(*main);
    vq_program_free(*startup);
    *main = *startup = NULL;
    return rc;
}

static int w_program(double *fp)
{
    vq_program *m = NULL, *s = NULL, *d = NULL, *l = NULL;
    void *buf = NULL;
    size_t len = 0;
    int rc;
    TRY(build_mlp(&m, &s, true));
    TRY(vq_program_encode(m, &buf, &len));
    TRY(vq_program_decode(&d, buf, len));
    char path[128];
    snprintf(path, sizeof path, "%s/m.pb", tmpdir);
    TRY(vq_program_save(d, path));
    TRY(vq_program_load(&l, path));
    FILE *null = fopen("/dev/null", "w");
    rc = null ? vq_program_dump(l, null) : 0;
    if (null)
        fclose(null);
    if (rc < 0)
        goto out;
    *fp = (double)(vq_program_hash(l) % 1000003) + (vq_program_hash(l) == vq_program_hash(m));
out:
    free(buf);
    vq_program_free(m);
    vq_program_free(s);
    vq_program_free(d);
    vq_program_free(l);
    return rc;
}

/* ---- executor: startup, three training steps, a fetch; CPU or GPU ---- */

static int train_steps(double *fp, vq_ctx dev)
{
    vq_program *m = NULL, *s = NULL;
    vq_engine *e = NULL;
    vq_exec *ex = NULL;
    vq_scope *sc = NULL;
    vq_tensor *x = NULL, *label = NULL;
    int rc;
    TRY(build_mlp(&m, &s, true));
    TRY(vq_engine_new(&e, &(vq_engine_opts){.kind = VQ_ENGINE_THREADED, .cpu_workers = 2,
                                             .gpu_streams = 1}));
    vq_exec_opts xo = {.device = dev, .flags = VQ_EXEC_FETCH_HOST};
    TRY(vq_exec_new(&ex, e, &xo));
    TRY(vq_scope_new(&sc));
    TRY(vq_exec_run(ex, s, sc, NULL, 0, NULL, 0));
    TRY(vq_tensor_new(&x, VQ_F32, 2, (int64_t[]){6, 4}));
    TRY(vq_tensor_new(&label, VQ_I64, 1, (int64_t[]){6}));
    for (int i = 0; i < 24; i++)
        ((float *)vq_tensor_data(x))[i] = sinf((float)i);
    for (int i = 0; i < 6; i++)
        ((int64_t *)vq_tensor_data(label))[i] = i % 3;
    double sum = 0;
    for (int step = 0; step < 3; step++) {
        vq_feed feeds[2] = {{"x", x}, {"label", label}};
        vq_fetch f = {"loss", NULL};
        TRY(vq_exec_run(ex, m, sc, feeds, 2, &f, 1));
        sum += *(float *)vq_tensor_data(f.tensor);
        vq_tensor_release(f.tensor);
    }
    *fp = sum;
out:
    vq_tensor_release(x);
    vq_tensor_release(label);
    vq_scope_free(sc);
    vq_exec_free(ex);
    vq_engine_free(e);
    vq_program_free(m);
    vq_program_free(s);
    return rc;
}

static int w_exec(double *fp)
{
    return train_steps(fp, (vq_ctx){VQ_DEV_CPU, 0});
}

static int w_exec_gpu(double *fp)
{
    return train_steps(fp, (vq_ctx){VQ_DEV_GPU, 0});
}

static const struct {
    const char *name;
    workload_fn fn;
} workloads[] = {
    {"engine", w_engine}, {"ops", w_ops}, {"program", w_program},
    {"exec", w_exec},     {"exec_gpu", w_exec_gpu},
};

/* ---- the driver ---- */

enum { CHILD_FAILED_AT_N = 0, CHILD_DONE = 3, CHILD_BAD = 4 };

struct child_report {
    void *site;
    int rc;
    char msg[200];
};

/* Exits CHILD_BAD after printing where the injected failure was. */
static void bad(void)
{
    void *frames[24];
    int n = vq__fault_stack(frames, 24);
    fprintf(stderr, "    the failed allocation:\n");
    fflush(stderr);
    backtrace_symbols_fd(frames, n, 2);
    exit(CHILD_BAD);
}

static void on_alarm(int sig)
{
    (void)sig;
    static const char msg[] = "  a hang: the failed allocation was at\n";
    if (write(2, msg, sizeof msg - 1) < 0) {
    }
    void *frames[24];
    int n = vq__fault_stack(frames, 24);
    backtrace_symbols_fd(frames, n, 2);
    signal(SIGALRM, SIG_DFL);
    raise(SIGALRM);
}

/* One child: the workload with the n-th allocation failing, then again
 * without. Exits CHILD_DONE when the failure was never reached. */
static void child(workload_fn fn, long n, double want, int fd)
{
    signal(SIGALRM, on_alarm);
    alarm(30);
    double fp = NAN;
    vq__fault_arm(n);
    int rc = fn(&fp);
    int fired = vq__fault_fired();
    struct child_report r = {.site = vq__fault_site(), .rc = rc};
    vq__fault_arm(0);
    snprintf(r.msg, sizeof r.msg, "%s", vq_errmsg());
    if (write(fd, &r, sizeof r) != (ssize_t)sizeof r)
        exit(CHILD_BAD);
    if (!fired) {
        if (rc < 0 || fp != want) {
            fprintf(stderr, "  N=%ld: no failure injected, but rc %d fp %.17g (want %.17g)\n",
                    n, rc, fp, want);
            exit(CHILD_BAD);
        }
        exit(CHILD_DONE);
    }
    if (rc < 0 && (rc != VQ_ENOMEM || !r.msg[0])) {
        fprintf(stderr, "  N=%ld: returned %s (\"%s\"), want VQ_ENOMEM with a message\n", n,
                vq_strerror(rc), r.msg);
        bad();
    }
    if (rc == 0 && fp != want) {
        fprintf(stderr, "  N=%ld: survived the failure but computed %.17g, want %.17g\n", n, fp,
                want);
        bad();
    }
    fp = NAN;
    rc = fn(&fp);
    if (rc < 0 || fp != want) {
        fprintf(stderr, "  N=%ld: the next run failed: %d (%s), fp %.17g\n", n, rc,
                vq_errmsg(), fp);
        bad();
    }
    exit(CHILD_FAILED_AT_N);
}

/* A run without failures in a child: its fingerprint, NaN if it failed. */
static double reference(workload_fn fn)
{
    int p[2];
    if (pipe(p) < 0)
        return NAN;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        close(p[0]);
        alarm(60);
        double fp = NAN;
        int rc = fn(&fp);
        if (rc < 0)
            fprintf(stderr, "  %s\n", vq_errmsg());
        if (write(p[1], &fp, sizeof fp) != (ssize_t)sizeof fp)
            exit(1);
        exit(rc < 0);
    }
    close(p[1]);
    double fp = NAN;
    if (read(p[0], &fp, sizeof fp) != (ssize_t)sizeof fp)
        fp = NAN;
    close(p[0]);
    int status;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? fp : NAN;
}

static bool site_add(void **sites, int *nsites, void *site)
{
    for (int i = 0; i < *nsites; i++)
        if (sites[i] == site)
            return false;
    if (*nsites < MAX_SITES)
        sites[(*nsites)++] = site;
    return true;
}

/* Runs one child; 1 when the failure was never reached (done), 0 when it
 * was, -1 on a bad outcome. */
static int run_child(workload_fn fn, long n, double want, void **sites, int *nsites,
                     int *enomem)
{
    int p[2];
    if (pipe(p) < 0)
        return -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        close(p[0]);
        child(fn, n, want, p[1]);
    }
    close(p[1]);
    struct child_report r;
    ssize_t got = read(p[0], &r, sizeof r);
    close(p[0]);
    int status;
    waitpid(pid, &status, 0);
    if (WIFSIGNALED(status)) {
        fprintf(stderr, "  N=%ld: killed by signal %d (%s)\n", n, WTERMSIG(status),
                WTERMSIG(status) == SIGALRM ? "a hang" : strsignal(WTERMSIG(status)));
        return -1;
    }
    int code = WEXITSTATUS(status);
    if (code == CHILD_DONE)
        return 1;
    if (code != CHILD_FAILED_AT_N || got != (ssize_t)sizeof r) {
        fprintf(stderr, "  N=%ld: child exit status %d\n", n, code);
        return -1;
    }
    site_add(sites, nsites, r.site);
    *enomem += r.rc == VQ_ENOMEM;
    return 0;
}

int main(int argc, char **argv)
{
    bool full = false;
    const char *only[16];
    int nonly = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--full"))
            full = true;
        else if (nonly < 16)
            only[nonly++] = argv[i];
    }
    setenv("VARQ_GPU_BACKEND", "emulated", 0);
    strcpy(tmpdir, "/tmp/varq_fault_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    static void *sites[MAX_SITES];
    int total_sites = 0, failures = 0;
    for (size_t w = 0; w < sizeof workloads / sizeof workloads[0]; w++) {
        bool selected = nonly == 0;
        for (int i = 0; i < nonly; i++)
            selected |= !strcmp(only[i], workloads[w].name);
        if (!selected)
            continue;
        /* The fingerprint of a run without failures, from a child too: the
         * parent never starts varq's threads (a fork keeps none of them,
         * and the GPU backend's state would point at the parent's). */
        double want = reference(workloads[w].fn);
        if (isnan(want)) {
            fprintf(stderr, "%s: fails without injection\n", workloads[w].name);
            failures++;
            continue;
        }
        /* How many allocations a run makes: find the end by doubling. */
        long hi = 1;
        int nsites = 0, enomem = 0, outcome;
        void *wsites[MAX_SITES];
        while ((outcome = run_child(workloads[w].fn, hi, want, wsites, &nsites, &enomem)) == 0)
            hi *= 2;
        long stride = full || hi <= STRIDE_BUDGET ? 1 : hi / STRIDE_BUDGET;
        long tried = 0;
        int nbad = outcome < 0;
        for (long n = 1; nbad < 5; n += stride) {
            outcome = run_child(workloads[w].fn, n, want, wsites, &nsites, &enomem);
            tried++;
            if (outcome > 0)
                break;
            nbad += outcome < 0;
        }
        bool bad = nbad > 0;
        for (int i = 0; i < nsites; i++)
            if (site_add(sites, &total_sites, wsites[i])) {
            }
        printf("%-9s %s: %ld failure points tried (every %ld%s), %d distinct sites, %d runs "
               "ended in VQ_ENOMEM, the rest survived by design\n",
               workloads[w].name, bad ? "FAILED" : "ok", tried, stride,
               stride > 1 ? "th" : "", nsites, enomem);
        failures += bad;
    }
    printf("alloc_fault: %d distinct allocation sites failed in all: %s\n", total_sites,
           failures ? "FAILED" : "ok");
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmpdir);
    return failures ? 1 : 0;
}
