/* Control-flow stress without a test framework, so that it runs under
 * ThreadSanitizer too (Criterion cannot): two threads start async runs of a
 * program whose while body holds a cond, many runs in flight at once, each
 * with its own trip count (zero included); every fetch is compared with the
 * loop computed in C, and every callback must come exactly once. The
 * frames of a while, its step and exit ops and the control ops' two halves
 * all run concurrently here. With --gpu the executor runs on GPU 0
 * (VARQ_GPU_BACKEND: the emulated backend in the suite); with --naive on
 * the naive engine, whose runs execute inside the pushing threads; with
 * --grad the program is the gradient of a loss through a while (the loop
 * saves its iterations, a second loop replays them in reverse), and every
 * run's gradient must equal the first run's, bit for bit; --grad-nested
 * does the same through a while nested in the loop's body. With --cancel
 * one run in nine loops forever (n = inf) and a third thread calls
 * vq_exec_cancel every millisecond: every run ends, the endless ones with
 * VQ_ECANCELED, the others with the right value or VQ_ECANCELED. Outside
 * the gradient modes the loop also stacks each iteration's x (a
 * stack_outputs output, xs), compared row by row with C.
 * Usage: control_stress [runs per thread] [--gpu | --naive | --grad |
 *                       --grad-nested | --cancel]. */
#include <varq/varq.h>
#include <varq/train.h>

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define LEN 16
#define INFLIGHT 16
#define NAMES(...) ((const char *const[]){__VA_ARGS__})

static vq_engine *engine;
static vq_exec *exec;
static vq_scope *scope;
static vq_program *prog;
static vq_tensor *x0, *one, *half, *three, *zero;
static atomic_int failures;

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "control_stress: %s (%s)\n", what, vq_errmsg());
        atomic_fetch_add(&failures, 1);
    }
}

static void var(int b, const char *name, vq_dtype dt, int ndim)
{
    int64_t len = LEN;
    check(vq_program_add_var(prog, b, name, dt, ndim, &len, false) == 0, name);
}

static void op(int b, const char *type, const char *const *in, int nin, const char *const *out,
               int nout, const vq_attr *a, int na)
{
    check(vq_program_add_op(prog, b, type, in, nin, out, nout, a, na) >= 0, type);
}

/* i = 0; while i < n: i += 1; t = x * half;
 *   x = cond(i > three, then t + i, else t - one) */
static void build(void)
{
    check(vq_program_new(&prog) == 0, "program");
    const char *scalars[] = {"n", "one", "half", "three", "zero", "io"};
    for (int i = 0; i < 6; i++)
        var(0, scalars[i], VQ_F64, 0);
    var(0, "x", VQ_F64, 1);
    var(0, "xo", VQ_F64, 1);
    var(0, "c0", VQ_BOOL, 0);
    check(vq_program_add_var(prog, 0, "xs", VQ_F64, 2, (int64_t[]){-1, LEN}, false) == 0, "xs");
    int b = vq_program_add_block(prog, 0);
    int tb = vq_program_add_block(prog, b), eb = vq_program_add_block(prog, b);
    var(b, "bx", VQ_F64, 1);
    var(b, "bt", VQ_F64, 1);
    var(b, "bx2", VQ_F64, 1);
    var(b, "bi", VQ_F64, 0);
    var(b, "bi2", VQ_F64, 0);
    var(b, "cc", VQ_BOOL, 0);
    var(b, "bc", VQ_BOOL, 0);
    var(tb, "tt", VQ_F64, 1);
    var(eb, "ee", VQ_F64, 1);
    op(tb, "add", NAMES("bt", "bi2"), 2, NAMES("tt"), 1, NULL, 0);
    op(eb, "sub", NAMES("bt", "one"), 2, NAMES("ee"), 1, NULL, 0);
    op(b, "add", NAMES("bi", "one"), 2, NAMES("bi2"), 1, NULL, 0);
    op(b, "mul", NAMES("bx", "half"), 2, NAMES("bt"), 1, NULL, 0);
    op(b, "greater", NAMES("bi2", "three"), 2, NAMES("cc"), 1, NULL, 0);
    vq_attr ca[] = {VQ_ATTR_I("then_block", tb), VQ_ATTR_I("else_block", eb),
                    VQ_ATTR_SS("then_outputs", NAMES("tt"), 1),
                    VQ_ATTR_SS("else_outputs", NAMES("ee"), 1)};
    op(b, "cond", NAMES("cc", "bt"), 2, NAMES("bx2"), 1, ca, 4);
    op(b, "less", NAMES("bi2", "n"), 2, NAMES("bc"), 1, NULL, 0);
    op(0, "less", NAMES("zero", "n"), 2, NAMES("c0"), 1, NULL, 0);
    vq_attr wa[] = {VQ_ATTR_I("body_block", b), VQ_ATTR_SS("body_inputs", NAMES("bx", "bi"), 2),
                    VQ_ATTR_SS("body_outputs", NAMES("bx2", "bi2"), 2),
                    VQ_ATTR_S("body_cond", "bc"), VQ_ATTR_SS("stack_outputs", NAMES("bx2"), 1)};
    op(0, "while", NAMES("c0", "x", "zero"), 3, NAMES("xo", "io", "xs"), 3, wa, 5);
}

/* In block blk: out = tanh(in * w + one), through vars <out>.z1, <out>.z2. */
static void tanh_step(int blk, const char *in, const char *out)
{
    char z1[32], z2[32];
    snprintf(z1, sizeof z1, "%s.z1", out);
    snprintf(z2, sizeof z2, "%s.z2", out);
    var(blk, z1, VQ_F64, 1);
    var(blk, z2, VQ_F64, 1);
    var(blk, out, VQ_F64, 1);
    op(blk, "mul", (const char *[]){in, "w"}, 2, (const char *[]){z1}, 1, NULL, 0);
    op(blk, "add", (const char *[]){z1, "one"}, 2, (const char *[]){z2}, 1, NULL, 0);
    op(blk, "tanh", (const char *[]){z2}, 1, (const char *[]){out}, 1, NULL, 0);
}

/* h = x; i = 0; while i < n: h = tanh(h * w + one); i += one;
 * loss = sum(h * h), with w a parameter: its gradient goes through the
 * loop. nested: each outer iteration is instead an inner while of three
 * such steps (the inner loop saves and replays its iterations once per
 * outer iteration, in the outer gradient loop's frames). */
static void build_grad(bool nested)
{
    check(vq_program_new(&prog) == 0, "program");
    int64_t len = LEN;
    check(vq_program_add_var(prog, 0, "w", VQ_F64, 1, &len, true) == 0, "w");
    const char *scalars[] = {"n", "one", "half", "three", "zero", "io", "loss"};
    for (int i = 0; i < 7; i++)
        var(0, scalars[i], VQ_F64, 0);
    var(0, "x", VQ_F64, 1);
    var(0, "xo", VQ_F64, 1);
    var(0, "hh", VQ_F64, 1);
    var(0, "c0", VQ_BOOL, 0);
    int b = vq_program_add_block(prog, 0);
    var(b, "bx", VQ_F64, 1);
    var(b, "bi", VQ_F64, 0);
    var(b, "bi2", VQ_F64, 0);
    var(b, "bc", VQ_BOOL, 0);
    if (!nested) {
        tanh_step(b, "bx", "bx2");
    } else {
        var(b, "bx2", VQ_F64, 1);
        var(b, "ji", VQ_F64, 0);
        var(b, "jc0", VQ_BOOL, 0);
        int ib = vq_program_add_block(prog, b);
        var(ib, "g", VQ_F64, 1);
        var(ib, "j", VQ_F64, 0);
        var(ib, "j2", VQ_F64, 0);
        var(ib, "jc", VQ_BOOL, 0);
        tanh_step(ib, "g", "g2");
        op(ib, "add", NAMES("j", "one"), 2, NAMES("j2"), 1, NULL, 0);
        op(ib, "less", NAMES("j2", "three"), 2, NAMES("jc"), 1, NULL, 0);
        op(b, "less", NAMES("zero", "three"), 2, NAMES("jc0"), 1, NULL, 0);
        vq_attr ia[] = {VQ_ATTR_I("body_block", ib), VQ_ATTR_SS("body_inputs", NAMES("g", "j"), 2),
                        VQ_ATTR_SS("body_outputs", NAMES("g2", "j2"), 2),
                        VQ_ATTR_S("body_cond", "jc")};
        op(b, "while", NAMES("jc0", "bx", "zero"), 3, NAMES("bx2", "ji"), 2, ia, 4);
    }
    op(b, "add", NAMES("bi", "one"), 2, NAMES("bi2"), 1, NULL, 0);
    op(b, "less", NAMES("bi2", "n"), 2, NAMES("bc"), 1, NULL, 0);
    op(0, "less", NAMES("zero", "n"), 2, NAMES("c0"), 1, NULL, 0);
    vq_attr wa[] = {VQ_ATTR_I("body_block", b), VQ_ATTR_SS("body_inputs", NAMES("bx", "bi"), 2),
                    VQ_ATTR_SS("body_outputs", NAMES("bx2", "bi2"), 2),
                    VQ_ATTR_S("body_cond", "bc")};
    op(0, "while", NAMES("c0", "x", "zero"), 3, NAMES("xo", "io"), 2, wa, 4);
    op(0, "mul", NAMES("xo", "xo"), 2, NAMES("hh"), 1, NULL, 0);
    op(0, "sum", NAMES("hh"), 1, NAMES("loss"), 1, NULL, 0);
    check(vq_append_backward(prog, "loss", NULL, 0) == 1, "append_backward");
}

static bool grad_mode, cancel_mode;
static atomic_bool pushers_done;
static double grad_want[9][LEN]; /* w@GRAD per trip count, from a first run */

static void expected(int n, double *x)
{
    for (int j = 0; j < LEN; j++)
        x[j] = j * 0.75 - 3;
    for (double i = 0; i < n;) {
        i += 1;
        for (int j = 0; j < LEN; j++)
            x[j] = i > 3 ? x[j] * 0.5 + i : x[j] * 0.5 - 1;
    }
}

static vq_tensor *scalar(double v)
{
    vq_tensor *t;
    check(vq_tensor_new(&t, VQ_F64, 0, NULL) == 0, "tensor");
    *(double *)vq_tensor_data(t) = v;
    return t;
}

/* t, or a copy of it on the host (released in its place). */
static vq_tensor *on_host(vq_tensor *t)
{
    if (vq_tensor_device(t).kind == VQ_DEV_CPU)
        return t;
    vq_tensor *h = NULL;
    check(vq_tensor_copy_to(engine, t, (vq_ctx){VQ_DEV_CPU, 0}, &h) == 0, "copy");
    check(vq_tensor_wait(h) == 0, "copy wait");
    vq_tensor_release(t);
    return h;
}

struct run {
    atomic_int done;
    int err;
    int n;
    vq_tensor *tn;
    vq_fetch fetch[2];
};

static void run_done(void *user, int err)
{
    struct run *r = user;
    r->err = err;
    atomic_fetch_add_explicit(&r->done, 1, memory_order_release);
}

static void finish(struct run *r)
{
    while (atomic_load_explicit(&r->done, memory_order_acquire) == 0)
        sched_yield();
    check(atomic_load(&r->done) == 1, "one callback per run");
    if (cancel_mode && r->n == 8)
        check(r->err == VQ_ECANCELED, "an endless run ended other than cancelled");
    else if (!cancel_mode || r->err != VQ_ECANCELED)
        check(r->err == 0, "run failed");
    if (r->err == 0) {
        vq_tensor *xo = on_host(r->fetch[0].tensor);
        double want[LEN];
        if (grad_mode)
            memcpy(want, grad_want[r->n], sizeof want);
        else
            expected(r->n, want);
        check(memcmp(vq_tensor_data(xo), want, sizeof want) == 0,
              grad_mode ? "w@GRAD differs from the first run's" : "x differs from C");
        vq_tensor_release(xo);
        if (!grad_mode) { /* xs: row k is x after iteration k + 1 */
            vq_tensor *xs = on_host(r->fetch[1].tensor);
            check(vq_tensor_ndim(xs) == 2 && vq_tensor_shape(xs)[0] == r->n &&
                      vq_tensor_shape(xs)[1] == LEN,
                  "xs is not [n, LEN]");
            for (int k = 0; k < r->n && vq_tensor_numel(xs) == r->n * LEN; k++) {
                expected(k + 1, want);
                check(memcmp((const double *)vq_tensor_data(xs) + k * LEN, want, sizeof want) == 0,
                      "a row of xs differs from C");
            }
            vq_tensor_release(xs);
        } else {
            vq_tensor_release(r->fetch[1].tensor);
        }
    }
    vq_tensor_release(r->tn);
}

static int runs_per_thread;

static void *pusher(void *arg)
{
    int id = (int)(intptr_t)arg;
    struct run *ring = calloc(INFLIGHT, sizeof *ring);
    for (int k = 0; k < runs_per_thread; k++) {
        struct run *r = &ring[k % INFLIGHT];
        if (k >= INFLIGHT)
            finish(r);
        memset(r, 0, sizeof *r);
        atomic_init(&r->done, 0);
        r->n = (k * 7 + id * 3) % 9;
        r->tn = scalar(cancel_mode && r->n == 8 ? 1.0 / 0.0 : r->n);
        r->fetch[0] = (vq_fetch){grad_mode ? "w@GRAD" : "xo", NULL};
        r->fetch[1] = (vq_fetch){grad_mode ? "io" : "xs", NULL};
        vq_feed feeds[] = {{"x", x0}, {"n", r->tn}, {"one", one}, {"half", half},
                           {"three", three}, {"zero", zero}};
        int rc = vq_exec_run_async(exec, prog, scope, feeds, 6, r->fetch, 2, run_done, r);
        check(rc == 0, "run_async");
        if (rc)
            atomic_store(&r->done, 1);
    }
    for (int k = runs_per_thread - INFLIGHT; k < runs_per_thread; k++)
        if (k >= 0)
            finish(&ring[k % INFLIGHT]);
    free(ring);
    return NULL;
}

/* --cancel: cancels the runs in flight every millisecond until the
 * pushers have seen all their runs end. */
static void *canceller(void *arg)
{
    (void)arg;
    while (!atomic_load(&pushers_done)) {
        check(vq_exec_cancel(exec) >= 0, "cancel");
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    runs_per_thread = argc > 1 ? atoi(argv[1]) : 2000;
    bool gpu = argc > 2 && !strcmp(argv[2], "--gpu");
    bool naive = argc > 2 && !strcmp(argv[2], "--naive");
    bool nested = argc > 2 && !strcmp(argv[2], "--grad-nested");
    grad_mode = nested || (argc > 2 && !strcmp(argv[2], "--grad"));
    cancel_mode = argc > 2 && !strcmp(argv[2], "--cancel");
    vq_engine_opts eo = {.kind = naive ? VQ_ENGINE_NAIVE : VQ_ENGINE_THREADED, .cpu_workers = 4};
    if (vq_engine_new(&engine, &eo) < 0 || vq_scope_new(&scope) < 0) {
        fprintf(stderr, "control_stress: %s\n", vq_errmsg());
        return 1;
    }
    vq_exec_opts xo = {0};
    if (gpu)
        xo.device = (vq_ctx){VQ_DEV_GPU, 0};
    if (vq_exec_new(&exec, engine, &xo) < 0) {
        fprintf(stderr, "control_stress: %s\n", vq_errmsg());
        return 1;
    }
    if (grad_mode)
        build_grad(nested);
    else
        build();
    int64_t len = LEN;
    check(vq_tensor_new(&x0, VQ_F64, 1, &len) == 0, "x");
    for (int j = 0; j < LEN; j++)
        ((double *)vq_tensor_data(x0))[j] = j * 0.75 - 3;
    one = scalar(1);
    half = scalar(0.5);
    three = scalar(3);
    zero = scalar(0);
    if (grad_mode) {
        vq_tensor *w;
        check(vq_tensor_new(&w, VQ_F64, 1, &len) == 0, "w");
        for (int j = 0; j < LEN; j++)
            ((double *)vq_tensor_data(w))[j] = 0.05 * j - 0.4;
        check(vq_scope_set(scope, "w", w) == 0, "scope");
        vq_tensor_release(w);
        for (int n = 0; n < 9; n++) { /* the reference gradients, one run at a time */
            vq_tensor *tn = scalar(n);
            vq_feed feeds[] = {{"x", x0}, {"n", tn}, {"one", one}, {"half", half},
                               {"three", three}, {"zero", zero}};
            vq_fetch g = {"w@GRAD", NULL};
            check(vq_exec_run(exec, prog, scope, feeds, 6, &g, 1) == 0, "reference run");
            if (g.tensor) {
                vq_tensor *h = g.tensor;
                if (vq_tensor_device(h).kind != VQ_DEV_CPU) {
                    check(vq_tensor_copy_to(engine, g.tensor, (vq_ctx){VQ_DEV_CPU, 0}, &h) == 0,
                          "copy");
                    check(vq_tensor_wait(h) == 0, "copy wait");
                    vq_tensor_release(g.tensor);
                }
                memcpy(grad_want[n], vq_tensor_data(h), sizeof grad_want[n]);
                vq_tensor_release(h);
            }
            vq_tensor_release(tn);
        }
    }
    pthread_t t[2], c;
    for (int i = 0; i < 2; i++)
        pthread_create(&t[i], NULL, pusher, (void *)(intptr_t)i);
    if (cancel_mode)
        pthread_create(&c, NULL, canceller, NULL);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    atomic_store(&pushers_done, true);
    if (cancel_mode)
        pthread_join(c, NULL);
    check(vq_wait_all(engine) == 0, "wait_all");
    vq_tensor *all[] = {x0, one, half, three, zero};
    for (int i = 0; i < 5; i++)
        vq_tensor_release(all[i]);
    vq_exec_free(exec);
    vq_program_free(prog);
    vq_scope_free(scope);
    vq_engine_free(engine);
    int f = atomic_load(&failures);
    printf("control_stress: 2 threads x %d runs%s: %s\n", runs_per_thread,
           gpu ? " on GPU 0" : naive ? " on the naive engine" : nested ? " of a gradient through nested loops" : grad_mode ? " of a gradient" : "",
           f ? "FAILED" : "ok");
    return f ? 1 : 0;
}
