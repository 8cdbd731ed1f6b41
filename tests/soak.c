/* The soak (issue #22 item 5): everything the stress programs do, in one
 * process, over and over until a deadline, with the process's memory
 * watched. No test framework and only the public API, so that it runs in
 * the normal, ASan+UBSan and TSan builds alike; scripts/soak.sh runs it for
 * 30 minutes per build, the suite for 20 s (normal build) or 30 s
 * (sanitizers; tests/meson.build).
 *
 * Each round, in the main thread (the stress parts that spawn threads of
 * their own say so):
 *
 *  1. a random engine workload from tests/workload.c on one of four engines
 *     that live for the whole soak (threaded with 1, 2 or 4 workers, or
 *     naive; their vars freed after each workload): random read/write sets,
 *     sync and async ops finished by another thread, priorities, prebuilt
 *     ops, failing ops, var frees, waits; compared op by op and value by
 *     value with the serial model. With --gpu every other round's workload
 *     has GPU ops on two emulated devices.
 *  2. a batch on one engine that lives for the whole soak: ops over 32
 *     slots, one in 500 failing (the failure poisons what it writes and
 *     skips what follows: docs/design/engine.md, "Errors"), one in six async (finished inline
 *     or by a finisher thread), one in 20 prebuilt, vars freed and replaced
 *     mid-stream (2.5% of the steps), waits in the middle (3%: on a random
 *     slot and on the failed ones, clearing their failures); a serial model computed while pushing gives every
 *     value and every error, checked at the waits and at the end, when
 *     every var of the batch is freed. So vars die by the hundred thousand
 *     in one engine, which must not grow.
 *  3. executor work on engines that live for the whole soak: three new
 *     random programs (elementwise chains over f64 vectors with a parameter
 *     in the scope, plus an integer division or a gather), each run by
 *     vq_exec_run and by vq_exec_run_async from two threads with 12 runs
 *     in flight each (two pusher threads started once); one run in five fails at run time (a zero divisor, a
 *     gather index out of range). A failing run must report VQ_EINVAL once,
 *     naming the op; every other run's fetches must equal the program
 *     computed in C. Every callback must come exactly once (counted again
 *     after the engine is idle). The programs then go, so plans are built
 *     and evicted all along. With --gpu the same work also runs on GPU 0
 *     (VARQ_GPU_BACKEND, emulated unless set), fetches copied back with
 *     vq_tensor_copy_to.
 *
 * Memory: the resident set (/proc/self/statm) is sampled after every round.
 * The sample after warm-up (the first round to end past a quarter of the
 * time, or --warmup seconds, and at least the second round) is the
 * baseline: malloc's per-thread arenas fill over the first seconds (a
 * 20-second run in CI once grew from 19.9 MiB at 2 s to 22.3 MiB at 5 s
 * and stayed there), so a tenth of a short run is too early. In the normal
 * build the soak fails if the final sample exceeds it by more than 10%,
 * or by more than 2 MiB when 10% is less than that (a normal build's
 * process is small enough for malloc's arenas alone to move it by a few
 * hundred KiB). Under a sanitizer the same bound holds, in runs of 10
 * minutes or more (SANITIZER_LONG_S), for the sanitizer allocator's live
 * bytes (everything allocated and not freed), and the RSS is reported:
 * see below. The CPU
 * allocator's count of live tensor bytes between rounds, exact whatever a
 * sanitizer's allocator does to the resident set, may not grow by more
 * than 1 MiB either (plans and scopes hold a few KiB that vary). A watchdog fails the soak with the phase it was in when no
 * round has finished for 60 s: a hang.
 *
 * usage: soak SECONDS [--warmup SECONDS] [--gpu] [--leak]
 *   --warmup  the baseline's time instead of a quarter of SECONDS
 *   --leak  leaks a 1 MiB tensor per round: the memory check must fail (how
 *           we know it can). VARQ_TEST_SEED replays a seed. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* when built outside the tree */
#endif
#include "sanitizer.h"
#include "workload.h"

#include <varq/varq.h>

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Work per round: a round should take about a second in every build. */
#ifdef VQ_TEST_TSAN
#define SLOW 10
#elif defined(VQ_TEST_ASAN)
#define SLOW 4
#else
#define SLOW 1
#endif

#define WATCHDOG_S 60

/* Threads: the soak starts its engines, workers, stream threads and
 * pusher threads once. The sanitizers' runtimes keep memory for every
 * thread ever created (gcc 12's libasan about 240 bytes plus its caches;
 * a loop creating and joining 10^5 threads grows by 19 MiB under ASan, by
 * nothing without it): when each round started engines and pushers by the
 * dozen, the resident set climbed 4 to 8 MiB a minute under ASan and TSan,
 * where the normal build stayed flat.
 *
 * Under a sanitizer the resident set measures the sanitizer's allocator
 * more than the program: in 30-minute soaks under ASan it grew 13% (CPU)
 * and 23% (GPU mode) after warm-up while the bytes the program had
 * allocated and not freed stayed flat (11.6 MiB from the first minute on);
 * the growth was ASan's size-class regions mapping more chunks that then
 * sit on its free lists and in its quarantine (ASAN_OPTIONS=print_stats=1
 * shows them: "num_freed_chunks" rising in the 1792 and 2048-byte
 * classes), which neither allocator_release_to_os_interval_ms nor a 1 MiB
 * quarantine stopped. So under a sanitizer the bound applies to those live
 * bytes (__sanitizer_get_current_allocated_bytes: exact, whatever the
 * allocator maps), in runs of SANITIZER_LONG_S seconds or more (the
 * suite's short runs report it: pools still fill then); the RSS and
 * the allocator's mapped heap are reported beside it. */
#ifdef VQ_TEST_SANITIZER
#define SANITIZER_LONG_S 600
#define SANITIZER 1
#else
#define SANITIZER_LONG_S 0
#define SANITIZER 0
#endif

#ifdef VQ_TEST_ASAN
/* ASan keeps freed blocks in a quarantine, 256 MiB by default, to catch
 * uses after free; the resident set grows until it is full, which would
 * take minutes here and look like a leak. 16 MiB fills in the warm-up and
 * still holds the last few thousand frees. ASAN_OPTIONS overrides it. */
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
    return "quarantine_size_mb=16";
}
#endif

static bool gpu_mode, leak_mode;
static atomic_int failures;

static struct {
    long rounds, workload_ops, batch_pushed, batch_ops, batch_failed, batch_vars_freed;
    atomic_long runs, runs_failing;
    long programs;
} count;

/* Prints the first 20 failures; counts them all. */
static void failf(const char *fmt, ...)
{
    if (atomic_fetch_add(&failures, 1) >= 20)
        return;
    va_list ap;
    va_start(ap, fmt);
    fputs("soak: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static void check(bool ok, const char *what)
{
    if (!ok)
        failf("%s (vq_errmsg: %s)", what, vq_errmsg());
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

/* A generator per thread: each part seeds its own from the round's seed. */
static uint32_t rnd(uint64_t *s, uint32_t n)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(*s >> 33) % n;
}

/* ---- the watchdog ---- */

static _Atomic double last_progress;
static const char *_Atomic phase = "start";
static atomic_bool watchdog_stop;

static void progress(const char *what)
{
    atomic_store(&phase, what);
    atomic_store(&last_progress, now_s());
}

static void *watchdog_main(void *arg)
{
    (void)arg;
    while (!atomic_load(&watchdog_stop)) {
        struct timespec ts = {0, 200 * 1000 * 1000};
        nanosleep(&ts, NULL);
        double idle = now_s() - atomic_load(&last_progress);
        if (idle > WATCHDOG_S) {
            fprintf(stderr,
                    "soak: HANG: nothing finished for %.0f s (round %ld, in %s); aborting\n",
                    idle, count.rounds + 1, atomic_load(&phase));
            abort();
        }
    }
    return NULL;
}

/* ---- memory ---- */

static double rss_mib(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long size = 0, resident = 0;
    if (!f || fscanf(f, "%ld %ld", &size, &resident) != 2)
        resident = 0;
    if (f)
        fclose(f);
    return (double)resident * (double)sysconf(_SC_PAGESIZE) / (1024.0 * 1024.0);
}

#ifdef VQ_TEST_SANITIZER
/* The sanitizer allocator's own figures (sanitizer/allocator_interface.h,
 * which gcc 12 does not install). */
size_t __sanitizer_get_current_allocated_bytes(void);
size_t __sanitizer_get_heap_size(void);
size_t __sanitizer_get_free_bytes(void);
size_t __sanitizer_get_unmapped_bytes(void);
static void debug_mem(double t)
{
    fprintf(stderr, "soak: %.0f s RSS %.1f MiB allocated %.1f heap %.1f free %.1f unmapped %.1f\n",
            t, rss_mib(), __sanitizer_get_current_allocated_bytes() / 1048576.0,
            __sanitizer_get_heap_size() / 1048576.0, __sanitizer_get_free_bytes() / 1048576.0,
            __sanitizer_get_unmapped_bytes() / 1048576.0);
}
static double live_mib(void)
{
    return __sanitizer_get_current_allocated_bytes() / 1048576.0;
}

static double heap_mib(void)
{
    return __sanitizer_get_heap_size() / 1048576.0;
}
#else
static void debug_mem(double t)
{
    fprintf(stderr, "soak: %.0f s RSS %.1f MiB\n", t, rss_mib());
}

static double live_mib(void)
{
    return 0; /* glibc's malloc: the RSS is the measure */
}

static double heap_mib(void)
{
    return 0;
}
#endif

/* ---- 2. a batch on the engine that lives for the whole soak ---- */

#define PV 32       /* slots */
#define PMAXR 2
#define PMAXW 3

struct pop {
    uint64_t id;
    int nr, nw, fail, async;
    int rcell[PMAXR], wcell[PMAXW];
    uint64_t *val;  /* the engine's values, per cell */
};

/* The body of an op on the values val (the engine's or the model's). */
static int pop_body(const struct pop *o, uint64_t *val)
{
    uint64_t h = mix(o->id);
    for (int k = 0; k < o->nr; k++)
        h = mix(h ^ val[o->rcell[k]]);
    for (int k = 0; k < o->nw; k++)
        h = mix(h ^ val[o->wcell[k]] ^ (uint64_t)k);
    if (o->fail)
        return o->fail;
    for (int k = 0; k < o->nw; k++)
        val[o->wcell[k]] = mix(h + (uint64_t)k);
    return 0;
}

static struct {
    vq_engine *e;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct { struct pop *o; vq_done *done; } *q;
    int head, tail, cap;
    bool stop;
    pthread_t thread;
    atomic_long args_freed;
} pe;

static void *pe_finisher(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&pe.lock);
    for (;;) {
        while (pe.head == pe.tail && !pe.stop)
            pthread_cond_wait(&pe.cond, &pe.lock);
        if (pe.head == pe.tail)
            break;
        struct pop *o = pe.q[pe.head % pe.cap].o;
        vq_done *d = pe.q[pe.head % pe.cap].done;
        pe.head++;
        pthread_mutex_unlock(&pe.lock);
        vq_done_finish(d, pop_body(o, o->val));
        pthread_mutex_lock(&pe.lock);
    }
    pthread_mutex_unlock(&pe.lock);
    return NULL;
}

static int pe_sync(void *arg, const vq_exec_ctx *x)
{
    (void)x;
    struct pop *o = arg;
    return pop_body(o, o->val);
}

static void pe_async(void *arg, const vq_exec_ctx *x, vq_done *done)
{
    (void)x;
    struct pop *o = arg;
    if (o->async == 1) {
        vq_done_finish(done, pop_body(o, o->val));
        return;
    }
    pthread_mutex_lock(&pe.lock);
    pe.q[pe.tail % pe.cap].o = o;
    pe.q[pe.tail % pe.cap].done = done;
    pe.tail++;
    pthread_cond_signal(&pe.cond);
    pthread_mutex_unlock(&pe.lock);
}

static void pe_arg_free(void *arg)
{
    (void)arg;
    atomic_fetch_add(&pe.args_freed, 1);
}

static bool in_list(const int *a, int n, int x)
{
    for (int i = 0; i < n; i++)
        if (a[i] == x)
            return true;
    return false;
}

/* The serial model of docs/design/engine.md ("Errors") for one op: skipped when a var it
 * touches is failed (the first among its writes, then its reads), else
 * run; a failure goes to the writes not failed yet. Returns whether it ran. */
static bool pe_model(const struct pop *o, uint64_t *mval, int *merr, int *failed_here)
{
    int cells[PMAXR + PMAXW], n = 0, err = 0;
    for (int k = 0; k < o->nw; k++)
        if (!in_list(cells, n, o->wcell[k]))
            cells[n++] = o->wcell[k];
    for (int k = 0; k < o->nr; k++)
        if (!in_list(cells, n, o->rcell[k]))
            cells[n++] = o->rcell[k];
    for (int k = 0; k < n && !err; k++)
        err = merr[cells[k]];
    bool ran = !err;
    if (ran)
        err = *failed_here = pop_body(o, mval);
    if (err)
        for (int k = 0; k < o->nw; k++)
            if (!merr[o->wcell[k]])
                merr[o->wcell[k]] = err;
    return ran;
}

static void persistent_batch(uint64_t seed)
{
    const int nops = 16000 / SLOW;
    const int maxcells = PV + nops; /* one new cell per var free at most */
    uint64_t rs = seed;
    struct pop *ops = calloc((size_t)nops, sizeof *ops);
    uint64_t *val = calloc((size_t)maxcells, sizeof *val);
    uint64_t *mval = calloc((size_t)maxcells, sizeof *mval);
    int *merr = calloc((size_t)maxcells, sizeof *merr);
    if (!ops || !val || !mval || !merr) {
        failf("batch: out of memory");
        goto out;
    }
    vq_var *var[PV];
    int cell[PV], ncells = 0;
    for (int s = 0; s < PV; s++) {
        var[s] = vq_var_new(pe.e, "slot");
        cell[s] = ncells++;
    }
    atomic_store(&pe.args_freed, 0);
    long pushed = 0, ran = 0, failed = 0;
    for (int i = 0; i < nops; i++) {
        uint32_t dice = rnd(&rs, 1000);
        if (dice < 25) { /* free a var mid-stream, with ops pending on it */
            int s = (int)rnd(&rs, PV);
            check(vq_var_free(pe.e, var[s]) == 0, "batch: vq_var_free");
            var[s] = vq_var_new(pe.e, "slot");
            check(var[s] != NULL, "batch: vq_var_new");
            cell[s] = ncells++;
            count.batch_vars_freed++;
            continue;
        }
        if (dice < 55) {
            /* Wait in the middle, on a random slot and on every slot the
             * model says failed: errors and values as serially, and the
             * waits clear the failures, so that most ops run. */
            int pick = (int)rnd(&rs, PV);
            for (int s = 0; s < PV; s++) {
                if (s != pick && !merr[cell[s]])
                    continue;
                int err = vq_wait_var(pe.e, var[s]);
                if (err != merr[cell[s]] || val[cell[s]] != mval[cell[s]])
                    failf("batch (seed %llu): step %d: vq_wait_var gave %d and value %s; "
                          "serially %d", (unsigned long long)seed, i, err,
                          val[cell[s]] == mval[cell[s]] ? "equal" : "different",
                          merr[cell[s]]);
                merr[cell[s]] = 0;
            }
            continue;
        }
        struct pop *o = &ops[i];
        o->id = seed * 1000003u + (uint64_t)i;
        o->val = val;
        o->nr = (int)rnd(&rs, PMAXR + 1);
        o->nw = 1 + (int)rnd(&rs, PMAXW);
        int base = (int)rnd(&rs, PV);
        vq_var *reads[PMAXR], *writes[PMAXW];
        for (int k = 0; k < o->nr; k++) {
            int s = (base + (int)rnd(&rs, 6)) % PV;
            reads[k] = var[s];
            o->rcell[k] = cell[s];
        }
        for (int k = 0; k < o->nw; k++) {
            int s = (base + (int)rnd(&rs, 6)) % PV;
            writes[k] = var[s];
            o->wcell[k] = cell[s];
        }
        o->fail = rnd(&rs, 500) == 0 ? -2000 - (int)rnd(&rs, 5) : 0;
        uint32_t a = rnd(&rs, 12);
        o->async = a == 0 ? 1 : a == 1 ? 2 : 0;
        vq_task t = {.arg = o, .arg_free = pe_arg_free, .reads = reads, .nreads = o->nr,
                     .writes = writes, .nwrites = o->nw, .priority = (int)rnd(&rs, 5) - 2,
                     .name = "soak"};
        if (o->async)
            t.async_fn = pe_async;
        else
            t.fn = pe_sync;
        int rc;
        if (rnd(&rs, 20) == 0) {
            vq_opr *op = vq_opr_new(pe.e, &t);
            rc = op ? vq_push_opr(pe.e, op) : -1;
            vq_opr_free(pe.e, op);
        } else {
            rc = vq_push(pe.e, &t);
        }
        check(rc == 0, "batch: push");
        if (rc)
            continue;
        pushed++;
        int failed_here = 0;
        if (pe_model(o, mval, merr, &failed_here))
            ran++;
        failed += failed_here != 0;
    }
    int first = vq_wait_all(pe.e);
    if (failed ? !(first <= -2000 && first >= -2004) : first != 0)
        failf("batch (seed %llu): vq_wait_all gave %d after %ld failures", (unsigned long long)seed,
              first, failed);
    for (int s = 0; s < PV; s++) {
        int err = vq_wait_var(pe.e, var[s]);
        if (err != merr[cell[s]])
            failf("batch (seed %llu): slot %d ends with error %d, serially %d",
                  (unsigned long long)seed, s, err, merr[cell[s]]);
        check(vq_var_free(pe.e, var[s]) == 0, "batch: vq_var_free at the end");
    }
    check(vq_wait_all(pe.e) == 0, "batch: engine idle after the frees");
    for (int c = 0; c < ncells; c++)
        if (val[c] != mval[c]) {
            failf("batch (seed %llu): var incarnation %d differs from the serial model",
                  (unsigned long long)seed, c);
            break;
        }
    if (atomic_load(&pe.args_freed) != pushed)
        failf("batch (seed %llu): arg_free ran %ld times for %ld ops", (unsigned long long)seed,
              atomic_load(&pe.args_freed), pushed);
    count.batch_pushed += pushed;
    count.batch_ops += ran;
    count.batch_failed += failed;
out:
    free(ops);
    free(val);
    free(mval);
    free(merr);
}

/* ---- 3. executor runs of random programs ---- */

enum { T_ADD, T_SUB, T_MUL, T_SCALE, T_MAX, T_MIN, T_ABS, T_RELU, T_TANH, T_NTYPES };
static const char *const type_name[] = {"add", "sub", "mul", "scale", "maximum", "minimum",
                                        "abs", "relu", "tanh"};

#define MAXOPS 10
#define MAXLEN 24
#define MAXIDX 8

/* Values v0 (fed), v1 (fed), v2 (the scope's parameter w), then one per op;
 * plus either d = div(n, k) in i64 or g = gather(v<gsrc>, idx) on axis 0. */
struct rprog {
    vq_program *p;
    int len, nops;
    struct { int type, a, b; double s; } op[MAXOPS];
    bool gather;
    int gsrc, nidx;
    int fetch2;  /* an intermediate value fetched besides the last */
    double w[MAXLEN];
};

static void vname(char *buf, size_t n, int v)
{
    snprintf(buf, n, "v%d", v);
}

static void rprog_make(struct rprog *r, uint64_t *rs)
{
    memset(r, 0, sizeof *r);
    r->len = 1 + (int)rnd(rs, MAXLEN);
    r->nops = 2 + (int)rnd(rs, MAXOPS - 1);
    double bound[3 + MAXOPS] = {1.5, 1.5, 1.5};
    check(vq_program_new(&r->p) == 0, "program_new");
    int64_t shape[1] = {r->len};
    char name[16], a[16], b[16];
    for (int v = 0; v < 3 + r->nops; v++) {
        vname(name, sizeof name, v);
        check(vq_program_add_var(r->p, 0, name, VQ_F64, 1, shape, v == 2) == 0, "add_var");
    }
    for (int i = 0; i < r->nops; i++) {
        int out = 3 + i, x = (int)rnd(rs, (uint32_t)out), y = (int)rnd(rs, (uint32_t)out);
        int t = (int)rnd(rs, T_NTYPES);
        /* No value may reach infinity: that keeps NaN out of the C check. */
        if (t == T_MUL && bound[x] * bound[y] > 1e100)
            t = T_TANH;
        double s = (double)((int)rnd(rs, 9) - 4) * 0.375;
        r->op[i].type = t;
        r->op[i].a = x;
        r->op[i].b = y;
        r->op[i].s = s;
        bound[out] = t == T_ADD || t == T_SUB ? bound[x] + bound[y]
                     : t == T_MUL             ? bound[x] * bound[y]
                     : t == T_SCALE           ? fabs(s) * bound[x]
                     : t == T_MAX || t == T_MIN ? fmax(bound[x], bound[y])
                     : t == T_TANH            ? 1
                                              : bound[x];
        vname(name, sizeof name, out);
        vname(a, sizeof a, x);
        vname(b, sizeof b, y);
        bool unary = t == T_SCALE || t == T_ABS || t == T_RELU || t == T_TANH;
        vq_attr at = VQ_ATTR_F("scale", s);
        check(vq_program_add_op(r->p, 0, type_name[t], (const char *[]){a, b}, unary ? 1 : 2,
                                (const char *[]){name}, 1, &at, t == T_SCALE) >= 0,
              "add_op");
    }
    r->fetch2 = 3 + (int)rnd(rs, (uint32_t)(r->nops - 1)); /* not the last: no fetch twice */
    r->gather = rnd(rs, 2);
    if (r->gather) {
        r->gsrc = (int)rnd(rs, (uint32_t)(3 + r->nops));
        r->nidx = 1 + (int)rnd(rs, MAXIDX);
        int64_t is[1] = {r->nidx};
        check(vq_program_add_var(r->p, 0, "idx", VQ_I64, 1, is, false) == 0, "add_var idx");
        check(vq_program_add_var(r->p, 0, "g", VQ_F64, 1, is, false) == 0, "add_var g");
        vname(a, sizeof a, r->gsrc);
        vq_attr ax = VQ_ATTR_I("axis", 0);
        check(vq_program_add_op(r->p, 0, "gather", (const char *[]){a, "idx"}, 2,
                                (const char *[]){"g"}, 1, &ax, 1) >= 0, "add_op gather");
    } else {
        const char *iv[] = {"n", "k", "d"};
        for (int i = 0; i < 3; i++)
            check(vq_program_add_var(r->p, 0, iv[i], VQ_I64, 1, shape, false) == 0, "add_var");
        check(vq_program_add_op(r->p, 0, "div", (const char *[]){"n", "k"}, 2,
                                (const char *[]){"d"}, 1, NULL, 0) >= 0, "add_op div");
    }
    for (int j = 0; j < r->len; j++)
        r->w[j] = (double)((int)rnd(rs, 25) - 12) / 8;
}

/* The program in C: every value, element by element. */
static void rprog_eval(const struct rprog *r, const double *x0, const double *x1,
                       double v[][MAXLEN])
{
    memcpy(v[0], x0, sizeof v[0]);
    memcpy(v[1], x1, sizeof v[1]);
    memcpy(v[2], r->w, sizeof v[2]);
    for (int i = 0; i < r->nops; i++) {
        const double *a = v[r->op[i].a], *b = v[r->op[i].b];
        double *o = v[3 + i], s = r->op[i].s;
        for (int j = 0; j < r->len; j++) {
            switch (r->op[i].type) {
            case T_ADD: o[j] = a[j] + b[j]; break;
            case T_SUB: o[j] = a[j] - b[j]; break;
            case T_MUL: o[j] = a[j] * b[j]; break;
            case T_SCALE: o[j] = s * a[j] + 0.0; break;
            case T_MAX: o[j] = a[j] > b[j] ? a[j] : b[j]; break;
            case T_MIN: o[j] = a[j] < b[j] ? a[j] : b[j]; break;
            case T_ABS: o[j] = fabs(a[j]); break;
            case T_RELU: o[j] = a[j] > 0 ? a[j] : 0; break;
            default: o[j] = tanh(a[j]); break;
            }
        }
    }
}

static bool close_to(double got, double want)
{
    return got == want || fabs(got - want) <= 1e-12 * fmax(1, fabs(want));
}

/* One run: its feeds, what it should give, what it gave. */
struct job {
    const struct rprog *r;
    bool fail;
    vq_tensor *feed[4];
    vq_fetch fetch[3];
    double want_last[MAXLEN], want_mid[MAXLEN], want_g[MAXIDX];
    int64_t want_d[MAXLEN];
    atomic_int calls;
    int err;
    bool named; /* the callback's vq_errmsg() named the failing op */
};

static vq_engine *xe;     /* the executors' engine */
static vq_engine *we[4];  /* the workloads' engines: threaded 1, 2, 4 workers; naive */
static vq_exec *xs[2];    /* CPU, and GPU 0 with --gpu */
static int nexec;

static vq_tensor *tensor(vq_dtype dt, int64_t n, const void *data)
{
    vq_tensor *t = NULL;
    check(vq_tensor_from(&t, dt, 1, &n, data) == 0, "tensor_from");
    return t;
}

/* Makes a run's feeds (a failing one with a zero divisor or an index out of
 * range) and its expected fetches. */
static int job_make(struct job *j, const struct rprog *r, uint64_t *rs, vq_feed *feeds)
{
    memset(j, 0, sizeof *j);
    atomic_init(&j->calls, 0);
    j->r = r;
    j->fail = rnd(rs, 5) == 0;
    double x0[MAXLEN] = {0}, x1[MAXLEN] = {0}, v[3 + MAXOPS][MAXLEN];
    for (int i = 0; i < r->len; i++) {
        x0[i] = (double)((int)rnd(rs, 49) - 24) / 16;
        x1[i] = (double)((int)rnd(rs, 49) - 24) / 16;
    }
    rprog_eval(r, x0, x1, v);
    memcpy(j->want_last, v[2 + r->nops], sizeof j->want_last);
    memcpy(j->want_mid, v[r->fetch2], sizeof j->want_mid);
    j->feed[0] = tensor(VQ_F64, r->len, x0);
    j->feed[1] = tensor(VQ_F64, r->len, x1);
    feeds[0] = (vq_feed){"v0", j->feed[0]};
    feeds[1] = (vq_feed){"v1", j->feed[1]};
    if (r->gather) {
        int64_t idx[MAXIDX];
        for (int i = 0; i < r->nidx; i++) {
            idx[i] = (int64_t)rnd(rs, (uint32_t)(2 * r->len)) - r->len; /* [-len, len) */
            int64_t k = idx[i] < 0 ? idx[i] + r->len : idx[i];
            j->want_g[i] = v[r->gsrc][k];
        }
        if (j->fail)
            idx[rnd(rs, (uint32_t)r->nidx)] = rnd(rs, 2) ? r->len + (int64_t)rnd(rs, 3)
                                                         : -r->len - 1 - (int64_t)rnd(rs, 3);
        j->feed[2] = tensor(VQ_I64, r->nidx, idx);
        feeds[2] = (vq_feed){"idx", j->feed[2]};
        return 3;
    }
    int64_t n[MAXLEN], k[MAXLEN];
    for (int i = 0; i < r->len; i++) {
        n[i] = (int64_t)rnd(rs, 1000);
        k[i] = 1 + (int64_t)rnd(rs, 9);
        j->want_d[i] = n[i] / k[i];
    }
    if (j->fail)
        k[rnd(rs, (uint32_t)r->len)] = 0;
    j->feed[2] = tensor(VQ_I64, r->len, n);
    j->feed[3] = tensor(VQ_I64, r->len, k);
    feeds[2] = (vq_feed){"n", j->feed[2]};
    feeds[3] = (vq_feed){"k", j->feed[3]};
    return 4;
}

/* Fetch names live as long as the program: one table per value index. */
static char value_names[3 + MAXOPS][8];

static void job_fetches(struct job *j)
{
    const struct rprog *r = j->r;
    j->fetch[0] = (vq_fetch){value_names[2 + r->nops], NULL};
    j->fetch[1] = (vq_fetch){value_names[r->fetch2], NULL};
    j->fetch[2] = (vq_fetch){r->gather ? "g" : "d", NULL};
}

/* A host copy of a fetch (NULL stays NULL). */
static vq_tensor *host(vq_tensor *t)
{
    if (!t || vq_tensor_device(t).kind == VQ_DEV_CPU)
        return vq_tensor_retain(t);
    vq_tensor *h = NULL;
    check(vq_tensor_copy_to(xe, t, (vq_ctx){VQ_DEV_CPU, 0}, &h) == 0 && vq_tensor_wait(h) == 0,
          "copy a fetch to the host");
    return h;
}

/* Checks a finished run (err: its result) and releases what it holds. */
static void job_check(struct job *j, int err, const char *how)
{
    const struct rprog *r = j->r;
    if (j->fail) {
        if (err != VQ_EINVAL || !j->named)
            failf("%s run meant to fail (%s) gave %d%s", how, r->gather ? "gather" : "div", err,
                  j->named ? "" : ", and vq_errmsg() did not name the op");
        atomic_fetch_add(&count.runs_failing, 1);
    } else if (err) {
        failf("%s run failed: %d (%s)", how, err, vq_errmsg());
    } else {
        vq_tensor *h[3];
        for (int i = 0; i < 3; i++)
            h[i] = host(j->fetch[i].tensor);
        if (!h[0] || !h[1] || !h[2]) {
            failf("%s run: a fetch is missing", how);
        } else {
            const double *last = vq_tensor_data(h[0]), *mid = vq_tensor_data(h[1]);
            bool ok = true;
            for (int i = 0; i < r->len; i++)
                ok &= close_to(last[i], j->want_last[i]) && close_to(mid[i], j->want_mid[i]);
            if (r->gather) {
                const double *g = vq_tensor_data(h[2]);
                for (int i = 0; i < r->nidx; i++)
                    ok &= g[i] == j->want_g[i];
            } else {
                const int64_t *d = vq_tensor_data(h[2]);
                for (int i = 0; i < r->len; i++)
                    ok &= d[i] == j->want_d[i];
            }
            if (!ok)
                failf("%s run: a fetch differs from the program computed in C", how);
        }
        for (int i = 0; i < 3; i++)
            vq_tensor_release(h[i]);
    }
    for (int i = 0; i < 3; i++) {
        vq_tensor_release(j->fetch[i].tensor);
        j->fetch[i].tensor = NULL;
    }
    for (int i = 0; i < 4; i++)
        vq_tensor_release(j->feed[i]);
    atomic_fetch_add(&count.runs, 1);
}

static void job_done(void *user, int err)
{
    struct job *j = user;
    j->err = err;
    const char *m = vq_errmsg();
    j->named = err && strstr(m, j->r->gather ? "gather" : "div") != NULL;
    atomic_fetch_add_explicit(&j->calls, 1, memory_order_release);
}

#define INFLIGHT 12

struct pusher_arg {
    vq_exec *x;
    const struct rprog *r;
    vq_scope *scope;
    struct job *jobs;
    int njobs;
    uint64_t seed;
};

static void job_wait(struct job *j)
{
    while (atomic_load_explicit(&j->calls, memory_order_acquire) == 0)
        sched_yield();
    job_check(j, j->err, "async");
}

static void *pusher_main(void *arg)
{
    struct pusher_arg *a = arg;
    uint64_t rs = a->seed;
    for (int i = 0; i < a->njobs; i++) {
        if (i >= INFLIGHT)
            job_wait(&a->jobs[i - INFLIGHT]);
        struct job *j = &a->jobs[i];
        vq_feed feeds[4];
        int nf = job_make(j, a->r, &rs, feeds);
        job_fetches(j);
        int rc = vq_exec_run_async(a->x, a->r->p, a->scope, feeds, nf, j->fetch, 3, job_done, j);
        if (rc) {
            failf("vq_exec_run_async: %d (%s)", rc, vq_errmsg());
            j->err = rc;
            j->fail = false;
            atomic_store(&j->calls, 1); /* so that the checks below go on */
        }
    }
    for (int i = a->njobs > INFLIGHT ? a->njobs - INFLIGHT : 0; i < a->njobs; i++)
        job_wait(&a->jobs[i]);
    return NULL;
}

/* Two pusher threads for the whole soak (threads started by the thousand
 * are what the sanitizers' runtimes keep memory for): pushers_run hands
 * each its pusher_arg and returns when both are done. */
static struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct pusher_arg *work; /* this batch's, per thread */
    long batch;              /* batches handed out */
    int done;                /* threads done with the current batch */
    bool stop;
    pthread_t th[2];
    int started;
} pp = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};

static void *pp_main(void *arg)
{
    int t = (int)(intptr_t)arg;
    long seen = 0;
    pthread_mutex_lock(&pp.lock);
    for (;;) {
        while (pp.batch == seen && !pp.stop)
            pthread_cond_wait(&pp.cond, &pp.lock);
        if (pp.stop)
            break;
        seen = pp.batch;
        struct pusher_arg *a = &pp.work[t];
        pthread_mutex_unlock(&pp.lock);
        pusher_main(a);
        pthread_mutex_lock(&pp.lock);
        pp.done++;
        pthread_cond_broadcast(&pp.cond);
    }
    pthread_mutex_unlock(&pp.lock);
    return NULL;
}

static void pushers_start(void)
{
    for (; pp.started < 2; pp.started++)
        if (pthread_create(&pp.th[pp.started], NULL, pp_main, (void *)(intptr_t)pp.started)) {
            failf("cannot start a pusher: its work runs in the main thread");
            break;
        }
}

static void pushers_stop(void)
{
    pthread_mutex_lock(&pp.lock);
    pp.stop = true;
    pthread_cond_broadcast(&pp.cond);
    pthread_mutex_unlock(&pp.lock);
    for (int t = 0; t < pp.started; t++)
        pthread_join(pp.th[t], NULL);
}

static void pushers_run(struct pusher_arg *work)
{
    pthread_mutex_lock(&pp.lock);
    pp.work = work;
    pp.done = 0;
    pp.batch++;
    pthread_cond_broadcast(&pp.cond);
    pthread_mutex_unlock(&pp.lock);
    for (int t = pp.started; t < 2; t++) /* the ones that could not start */
        pusher_main(&work[t]);
    pthread_mutex_lock(&pp.lock);
    while (pp.done < pp.started)
        pthread_cond_wait(&pp.cond, &pp.lock);
    pthread_mutex_unlock(&pp.lock);
}

/* One program on one executor: sync runs, then async ones from two threads;
 * then, with the engine idle, every callback counted again. */
static void exec_program(vq_exec *x, const struct rprog *r, uint64_t seed)
{
    vq_scope *scope;
    check(vq_scope_new(&scope) == 0, "scope_new");
    vq_tensor *w = tensor(VQ_F64, r->len, r->w);
    check(vq_scope_set(scope, "v2", w) == 0, "scope_set");
    vq_tensor_release(w);
    uint64_t rs = seed;
    for (int i = 0; i < 3; i++) {
        struct job j;
        vq_feed feeds[4];
        int nf = job_make(&j, r, &rs, feeds);
        job_fetches(&j);
        int rc = vq_exec_run(x, r->p, scope, feeds, nf, j.fetch, 3);
        j.named = rc && strstr(vq_errmsg(), r->gather ? "gather" : "div") != NULL;
        job_check(&j, rc, "sync");
    }
    enum { NJOBS = 160 / SLOW > 2 * INFLIGHT ? 160 / SLOW : 2 * INFLIGHT };
    struct job *jobs = calloc(2 * NJOBS, sizeof *jobs);
    if (!jobs) {
        failf("out of memory");
        vq_scope_free(scope);
        return;
    }
    struct pusher_arg pa[2];
    for (int t = 0; t < 2; t++)
        pa[t] = (struct pusher_arg){x, r, scope, jobs + t * NJOBS, NJOBS, mix(seed + 7 + t)};
    pushers_run(pa);
    /* Idle engine: a second call of a callback would have come by now. Its
     * result is the runs' failures, checked above. */
    (void)vq_wait_all(xe);
    for (int i = 0; i < 2 * NJOBS; i++)
        if (atomic_load(&jobs[i].calls) != 1)
            failf("run %d's callback came %d times", i, atomic_load(&jobs[i].calls));
    free(jobs);
    vq_scope_free(scope);
}

static void exec_round(uint64_t seed)
{
    uint64_t rs = seed;
    for (int p = 0; p < 3; p++) {
        struct rprog r;
        rprog_make(&r, &rs);
        count.programs++;
        for (int k = 0; k < nexec; k++) {
            progress(k ? "executor runs on GPU 0" : "executor runs on the CPU");
            exec_program(xs[k], &r, mix(seed + (uint64_t)(p * 2 + k)));
        }
        vq_program_free(r.p);
    }
}

/* ---- the soak ---- */

int main(int argc, char **argv)
{
    double seconds = -1, warmup = -1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--warmup") && i + 1 < argc)
            warmup = atof(argv[++i]);
        else if (!strcmp(argv[i], "--gpu"))
            gpu_mode = true;
        else if (!strcmp(argv[i], "--leak"))
            leak_mode = true;
        else if (seconds < 0 && atof(argv[i]) > 0)
            seconds = atof(argv[i]);
        else {
            fprintf(stderr, "usage: soak SECONDS [--warmup SECONDS] [--gpu] [--leak]\n");
            return 2;
        }
    }
    if (seconds < 0) {
        fprintf(stderr, "usage: soak SECONDS [--warmup SECONDS] [--gpu] [--leak]\n");
        return 2;
    }
    if (gpu_mode) {
        setenv("VARQ_GPU_BACKEND", "emulated", 0);
        setenv("VARQ_GPU_EMUL_DEVICES", "2", 0);
        const char *be = getenv("VARQ_GPU_BACKEND");
        if (be && strcmp(be, "emulated"))
            workload_gpus = 1; /* CUDA may have only one device */
    }
    for (int v = 0; v < 3 + MAXOPS; v++)
        vname(value_names[v], sizeof value_names[v], v);
    uint64_t seed = workload_seed();

    if (getenv("SOAK_DEBUG_RSS"))
        fprintf(stderr, "soak: RSS at start %.1f MiB\n", rss_mib());
    vq_engine_opts po = {.kind = VQ_ENGINE_THREADED, .cpu_workers = 3};
    vq_engine_opts xo = {.kind = VQ_ENGINE_THREADED, .cpu_workers = 3};
    pe.cap = 16000 / SLOW + 1;
    pe.q = calloc((size_t)pe.cap, sizeof *pe.q);
    pthread_mutex_init(&pe.lock, NULL);
    pthread_cond_init(&pe.cond, NULL);
    vq_engine_opts wo[4] = {{.kind = VQ_ENGINE_THREADED, .cpu_workers = 1},
                            {.kind = VQ_ENGINE_THREADED, .cpu_workers = 2},
                            {.kind = VQ_ENGINE_THREADED, .cpu_workers = 4},
                            {.kind = VQ_ENGINE_NAIVE, .cpu_workers = 1}};
    for (int k = 0; k < 4; k++)
        if (vq_engine_new(&we[k], &wo[k]) < 0) {
            fprintf(stderr, "soak: setup: %s\n", vq_errmsg());
            return 1;
        }
    pushers_start();
    if (!pe.q || vq_engine_new(&pe.e, &po) < 0 || vq_engine_new(&xe, &xo) < 0 ||
        vq_exec_new(&xs[0], xe, NULL) < 0 ||
        pthread_create(&pe.thread, NULL, pe_finisher, NULL) != 0) {
        fprintf(stderr, "soak: setup: %s\n", vq_errmsg());
        return 1;
    }
    nexec = 1;
    if (gpu_mode) {
        vq_exec_opts go = {.device = {VQ_DEV_GPU, 0}};
        if (vq_exec_new(&xs[1], xe, &go) < 0) {
            fprintf(stderr, "soak: a GPU executor: %s\n", vq_errmsg());
            return 1;
        }
        nexec = 2;
    }
    if (getenv("SOAK_DEBUG_RSS"))
        fprintf(stderr, "soak: RSS after setup %.1f MiB\n", rss_mib());
    progress("start");
    pthread_t wd;
    if (pthread_create(&wd, NULL, watchdog_main, NULL) != 0) {
        fprintf(stderr, "soak: cannot start the watchdog\n");
        return 1;
    }

    double start = now_s(), deadline = start + seconds, warm_at = start + (warmup >= 0 ? warmup : seconds / 4);
    double rss_warm = 0, rss_peak = 0, rss_final = 0, t_warm = 0;
    long round_warm = 0;
    double trace[10] = {0}; /* RSS at each tenth of the time, for the report */
    size_t live_warm = 0;   /* CPU tensor bytes alive between rounds, after warm-up */
    /* under a sanitizer: its allocator's live bytes and mapped heap, MiB */
    double lheap_warm = 0, lheap_final = 0, mheap_warm = 0, mheap_final = 0;
    vq_tensor **leaked = NULL;
    size_t nleaked = 0;
    do {
        uint64_t rseed = mix(seed + (uint64_t)count.rounds);
        long r = count.rounds;

        progress("engine workload");
        unsigned flags = gpu_mode && r % 2 ? WORKLOAD_GPU : 0;
        char msg[256];
        long ran = 0;
        if (workload_check_on(we[r % 4], flags, rseed, 12000 / SLOW, &ran, msg, sizeof msg) < 0)
            failf("workload: %s", msg);
        count.workload_ops += ran;

        progress("batch on the long-lived engine");
        persistent_batch(rseed);

        exec_round(rseed);

        if (leak_mode) { /* 1 MiB a round that nobody releases */
            vq_tensor **grown = realloc(leaked, (nleaked + 1) * sizeof *leaked);
            int64_t n = 1 << 17;
            if (grown && vq_tensor_new(&grown[nleaked], VQ_F64, 1, &n) == 0) {
                memset(vq_tensor_data(grown[nleaked]), 1, vq_tensor_nbytes(grown[nleaked]));
                nleaked++;
            }
            leaked = grown ? grown : leaked;
        }

        count.rounds++;
        progress("between rounds");
        double rss = rss_mib(), t = now_s();
        rss_peak = fmax(rss_peak, rss);
        rss_final = rss;
        lheap_final = live_mib();
        mheap_final = heap_mib();
        int tenth = (int)((t - start) * 10 / seconds);
        if (tenth >= 1 && tenth <= 10 && trace[tenth - 1] == 0) {
            trace[tenth - 1] = rss;
            if (getenv("SOAK_DEBUG_RSS"))
                debug_mem(t - start);
        }
        if (!round_warm && t >= warm_at && count.rounds >= 2) {
            rss_warm = rss;
            lheap_warm = lheap_final;
            mheap_warm = mheap_final;
            vq_mem_stats ws = {0};
            vq_mem_get_stats((vq_ctx){VQ_DEV_CPU, 0}, &ws);
            live_warm = ws.live_bytes;
            round_warm = count.rounds;
            t_warm = t - start;
        }
        if (atomic_load(&failures) > 20)
            break;
    } while (now_s() < deadline);
    double elapsed = now_s() - start;

    vq_mem_stats ms = {0};
    vq_mem_get_stats((vq_ctx){VQ_DEV_CPU, 0}, &ms);
    atomic_store(&watchdog_stop, true);
    pthread_join(wd, NULL);
    for (int k = 0; k < nexec; k++)
        vq_exec_free(xs[k]);
    pushers_stop();
    vq_engine_free(xe);
    for (int k = 0; k < 4; k++)
        vq_engine_free(we[k]);
    vq_engine_free(pe.e);
    pthread_mutex_lock(&pe.lock);
    pe.stop = true;
    pthread_cond_signal(&pe.cond);
    pthread_mutex_unlock(&pe.lock);
    pthread_join(pe.thread, NULL);
    free(pe.q);
    for (size_t i = 0; i < nleaked; i++) /* only now: the check above saw them */
        vq_tensor_release(leaked[i]);
    free(leaked);

    if (!round_warm) { /* too short to warm up: the last round is the baseline */
        rss_warm = rss_final;
        lheap_warm = lheap_final;
        mheap_warm = mheap_final;
        live_warm = ms.live_bytes;
        round_warm = count.rounds;
        t_warm = elapsed;
    }
    double limit = fmax(rss_warm * 1.10, rss_warm + 2.0);
    printf("soak: %.0f s%s%s, seed %llu: %ld rounds\n", elapsed,
           gpu_mode ? ", GPU mode" : "", leak_mode ? ", leaking 1 MiB a round" : "",
           (unsigned long long)seed, count.rounds);
    printf("soak:   engine: %ld workload ops ran (serial check); long-lived engine: %ld ops "
           "pushed, %ld ran, %ld of them failed on purpose, %ld skipped behind failures, %ld "
           "vars freed mid-stream\n",
           count.workload_ops, count.batch_pushed, count.batch_ops, count.batch_failed,
           count.batch_pushed - count.batch_ops, count.batch_vars_freed);
    printf("soak:   executor: %ld programs, %ld runs (%ld failing on purpose)%s\n",
           count.programs, atomic_load(&count.runs), atomic_load(&count.runs_failing),
           gpu_mode ? ", on the CPU and GPU 0" : "");
    printf("soak:   RSS MiB: warm-up %.1f (round %ld, %.0f s), final %.1f (%+.1f%%), peak %.1f; "
           "limit %.1f\n",
           rss_warm, round_warm, t_warm, rss_final, (rss_final / rss_warm - 1) * 100, rss_peak,
           limit);
    printf("soak:   CPU tensor bytes alive between rounds: %zu after warm-up, %zu at the end\n",
           live_warm, ms.live_bytes);
    printf("soak:   RSS MiB at each tenth of the time:");
    for (int i = 0; i < 10; i++)
        printf(" %.1f", trace[i] ? trace[i] : rss_final);
    printf("\n");
    if (SANITIZER) {
        double llimit = fmax(lheap_warm * 1.10, lheap_warm + 2.0);
        printf("soak:   sanitizer allocator: live MiB warm-up %.1f, final %.1f (%+.1f%%), limit "
               "%.1f; mapped heap MiB %.1f -> %.1f\n",
               lheap_warm, lheap_final, (lheap_final / lheap_warm - 1) * 100, llimit,
               mheap_warm, mheap_final);
        if (lheap_final > llimit && seconds >= SANITIZER_LONG_S)
            failf("memory grew: the sanitizer allocator's live bytes went from %.1f MiB to %.1f "
                  "MiB (limit %.1f: 10%%, at least 2 MiB)", lheap_warm, lheap_final, llimit);
        if (lheap_final > llimit && seconds < SANITIZER_LONG_S)
            printf("soak:   (live bytes over the limit: enforced in runs of %d s or more)\n",
                   SANITIZER_LONG_S);
        if (rss_final > limit)
            printf("soak:   (RSS over the limit: reported only under a sanitizer, whose "
                   "allocator maps more than the program holds; see SANITIZER_LONG_S)\n");
    } else if (rss_final > limit) {
        failf("memory grew: final RSS %.1f MiB > %.1f MiB (warm-up %.1f MiB + 10%%, at least "
              "2 MiB)", rss_final, limit, rss_warm);
    }
    /* The allocator's own count, exact whatever the sanitizer's allocator
     * does to the RSS: what plans and scopes hold varies by a few KiB. */
    if (ms.live_bytes > live_warm + (1u << 20))
        failf("tensors pile up: %zu bytes alive at the end, %zu after warm-up", ms.live_bytes,
              live_warm);
    int f = atomic_load(&failures);
    printf("soak: %s\n", f ? "FAILED" : "ok");
    return f ? 1 : 0;
}
