/* Capture of imperative calls (include/varq/capture.h): random call
 * sequences run eagerly and captured must log the same results, errors
 * and bits; guards must miss on any change of shape, dtype, attribute or
 * wiring; cuts at host reads; another thread's calls on the same tensors;
 * lifetimes; imperative autodiff against vq_append_backward and finite
 * differences. */
#include <varq/varq.h>

#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "leakcheck.h"
#include "opcheck.h"

TestSuite(capture, .fini = leak_check);

static vq_engine *engine(int workers)
{
    vq_engine *e;
    vq_engine_opts o = {.kind = VQ_ENGINE_THREADED, .cpu_workers = workers};
    cr_assert_eq(vq_engine_new(&e, &o), 0, "%s", vq_errmsg());
    return e;
}

static vq_capture_stats cstats(vq_engine *e)
{
    vq_capture_stats s;
    cr_assert_eq(vq_capture_get_stats(e, &s), 0);
    return s;
}

/* ---- a log of what a sequence observed ---- */

struct log {
    unsigned char *buf;
    size_t n, cap;
};

static void log_put(struct log *l, const void *p, size_t n)
{
    if (l->n + n > l->cap) {
        l->cap = (l->n + n) * 2 + 256;
        l->buf = realloc(l->buf, l->cap);
        cr_assert_not_null(l->buf);
    }
    memcpy(l->buf + l->n, p, n);
    l->n += n;
}

static void log_text(struct log *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void log_text(struct log *l, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    log_put(l, line, (size_t)(k < (int)sizeof line ? k : (int)sizeof line - 1));
    log_put(l, "\n", 1);
}

/* The call's result: its code and, on failure, its message. */
static void log_rc(struct log *l, const char *what, int rc)
{
    if (rc)
        log_text(l, "%s -> %d %s", what, rc, vq_errmsg());
    else
        log_text(l, "%s -> 0", what);
}

/* Waits for t and logs the result, the message and the bits. */
static int log_tensor(struct log *l, const char *what, vq_tensor *t)
{
    int rc = vq_tensor_wait(t);
    log_rc(l, what, rc);
    char head[64];
    snprintf(head, sizeof head, "%s %d %d:", vq_dtype_name(vq_tensor_dtype(t)),
             vq_tensor_ndim(t), (int)vq_tensor_numel(t));
    log_put(l, head, strlen(head));
    for (int64_t i = 0; rc == 0 && i < vq_tensor_numel(t); i++) {
        char v[40]; /* %a: every bit */
        snprintf(v, sizeof v, " %a", oc_get(t, i));
        log_put(l, v, strlen(v));
    }
    log_put(l, "\n", 1);
    return rc;
}

static void logs_equal(const struct log *a, const struct log *b, const char *what)
{
    size_t n = a->n < b->n ? a->n : b->n, i = 0;
    while (i < n && a->buf[i] == b->buf[i])
        i++;
    if (i == n && a->n == b->n)
        return;
    size_t from = i > 120 ? i - 120 : 0;
    cr_assert_fail("%s: logs differ at byte %zu of %zu / %zu\neager: ...%.*s\ncaptured: ...%.*s",
                   what, i, a->n, b->n, (int)(a->n - from < 240 ? a->n - from : 240),
                   (const char *)a->buf + from, (int)(b->n - from < 240 ? b->n - from : 240),
                   (const char *)b->buf + from);
}

/* ---- random call sequences ---- */

enum { POOL = 16 };

struct seq {
    vq_engine *e;
    bool capture;
    uint64_t rng;
    int64_t n;
    vq_tensor *pool[POOL];
    int npool;
    struct log log;
    /* another thread's eager calls, handed over at chosen points */
    bool helper;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    vq_tensor *job; /* scale in place by helper */
    bool quit;
};

static uint64_t pick(struct seq *s, uint64_t n)
{
    return oc_next(&s->rng) % n;
}

static vq_tensor *seeded(struct seq *s, vq_dtype dt, int ndim)
{
    int64_t shape[2] = {s->n, s->n};
    if (dt == VQ_I32) {
        int64_t cnt = ndim == 2 ? s->n * s->n : s->n;
        int32_t v[64];
        for (int64_t i = 0; i < cnt; i++)
            v[i] = (int32_t)pick(s, 5) - 2; /* zeros: div fails in the kernel */
        vq_tensor *t;
        cr_assert_eq(vq_tensor_from(&t, VQ_I32, ndim, shape, v), 0);
        return t;
    }
    return oc_rand(&s->rng, dt, ndim, shape, -1.5, 1.5);
}

static void pool_add(struct seq *s, vq_tensor *t)
{
    if (s->npool == POOL) {
        int k = (int)pick(s, POOL);
        vq_tensor_release(s->pool[k]);
        s->pool[k] = s->pool[--s->npool];
    }
    s->pool[s->npool++] = t;
}

/* A pool tensor of dtype dt (and ndim, unless -1), or NULL. */
static vq_tensor *find(struct seq *s, vq_dtype dt, int ndim)
{
    int start = (int)pick(s, (uint64_t)s->npool);
    for (int k = 0; k < s->npool; k++) {
        vq_tensor *t = s->pool[(start + k) % s->npool];
        if (vq_tensor_dtype(t) == dt && (ndim < 0 || vq_tensor_ndim(t) == ndim))
            return t;
    }
    return NULL;
}

static void *helper_main(void *arg)
{
    struct seq *s = arg;
    pthread_mutex_lock(&s->lock);
    for (;;) {
        while (!s->job && !s->quit)
            pthread_cond_wait(&s->cond, &s->lock);
        if (s->quit)
            break;
        vq_attr a = VQ_ATTR_F("scale", 0.5);
        int rc = vq_op_run(s->e, "scale", &s->job, 1, &s->job, 1, &a, 1);
        cr_assert_eq(rc, 0, "%s", vq_errmsg());
        s->job = NULL;
        pthread_cond_broadcast(&s->cond);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

/* The other thread scales t in place now, in the middle of the sequence. */
static void helper_call(struct seq *s, vq_tensor *t)
{
    pthread_mutex_lock(&s->lock);
    s->job = t;
    pthread_cond_broadcast(&s->cond);
    while (s->job)
        pthread_cond_wait(&s->cond, &s->lock);
    pthread_mutex_unlock(&s->lock);
}

static void call(struct seq *s, const char *type, vq_tensor **in, int nin, vq_tensor **out,
                 int nout, const vq_attr *attrs, int nattrs)
{
    vq_tensor *o[4] = {NULL, NULL, NULL, NULL};
    bool given = out != NULL;
    for (int j = 0; given && j < nout; j++)
        o[j] = out[j];
    int rc = vq_op_run(s->e, type, in, nin, o, nout, attrs, nattrs);
    log_rc(&s->log, type, rc);
    for (int j = 0; !given && rc == 0 && j < nout; j++)
        pool_add(s, o[j]);
}

/* One step of the sequence; the choices depend only on the rng. */
static void step(struct seq *s)
{
    uint64_t kind = pick(s, 100);
    vq_tensor *a = find(s, VQ_F64, -1), *b = find(s, VQ_F64, -1);
    vq_tensor *m = find(s, VQ_F64, 2), *m2 = find(s, VQ_F64, 2);
    vq_tensor *ia = find(s, VQ_I32, 1), *ib = find(s, VQ_I32, 1);
    if (kind < 20 && a) {
        static const char *unary[] = {"relu", "tanh", "exp", "scale"};
        int u = (int)pick(s, 4);
        vq_attr at[2] = {VQ_ATTR_F("scale", 0.25 * (double)(1 + pick(s, 4))),
                         VQ_ATTR_F("bias", (double)pick(s, 3) - 1)};
        call(s, unary[u], &a, 1, NULL, 1, at, u == 3 ? 2 : 0);
    } else if (kind < 40 && a && b) {
        static const char *binary[] = {"add", "sub", "mul"};
        call(s, binary[pick(s, 3)], (vq_tensor *[]){a, b}, 2, NULL, 1, NULL, 0);
    } else if (kind < 48 && m && m2) {
        vq_attr at = VQ_ATTR_B("transpose_y", pick(s, 2));
        call(s, "matmul", (vq_tensor *[]){m, m2}, 2, NULL, 1, &at, 1);
    } else if (kind < 53 && m) {
        vq_attr at = VQ_ATTR_IS("axes", (int64_t[]){1}, 1);
        call(s, "sum", &m, 1, NULL, 1, &at, 1);
    } else if (kind < 60 && a && b) {
        /* in place: a += b when that keeps a's shape */
        vq_tensor *out[1] = {a};
        call(s, "add", (vq_tensor *[]){a, b}, 2, out, 1, NULL, 0);
    } else if (kind < 67 && ia && ib) {
        call(s, pick(s, 2) ? "div" : "add", (vq_tensor *[]){ia, ib}, 2, NULL, 1, NULL, 0);
    } else if (kind < 71 && ia) {
        vq_attr at = VQ_ATTR_S("dtype", "f64");
        call(s, "cast", &ia, 1, NULL, 1, &at, 1);
    } else if (kind < 74 && a && ia) {
        /* a bad call: refused at the call in both modes */
        call(s, "add", (vq_tensor *[]){a, ia}, 2, NULL, 1, NULL, 0);
    } else if (kind < 80 && s->npool > 4) {
        int k = (int)pick(s, (uint64_t)s->npool);
        vq_tensor_release(s->pool[k]);
        s->pool[k] = s->pool[--s->npool];
    } else if (kind < 86 && s->npool) {
        /* A failed tensor's bytes are whatever its storage held: once its
         * error is taken, it leaves the pool (later calls would read them). */
        int k = (int)pick(s, (uint64_t)s->npool);
        if (log_tensor(&s->log, "read", s->pool[k])) {
            vq_tensor_release(s->pool[k]);
            s->pool[k] = s->pool[--s->npool];
        }
    } else if (kind < 90) {
        pool_add(s, seeded(s, pick(s, 3) ? VQ_F64 : VQ_I32, 1 + (int)pick(s, 2)));
    } else if (kind < 94) {
        if (s->capture) { /* a segment boundary; nothing for the eager run */
            cr_assert_eq(vq_capture_end(s->e), 0, "%s", vq_errmsg());
            cr_assert_eq(vq_capture_begin(s->e), 0);
        }
    } else if (kind < 100 && s->helper && a) {
        helper_call(s, a);
    }
}

static void seq_run(struct seq *s, uint64_t seed, int64_t n, bool capture, bool helper, int steps)
{
    memset(&s->log, 0, sizeof s->log);
    s->capture = capture;
    s->rng = seed;
    s->n = n;
    s->npool = 0;
    s->helper = helper;
    s->job = NULL;
    s->quit = false;
    if (helper) {
        pthread_mutex_init(&s->lock, NULL);
        pthread_cond_init(&s->cond, NULL);
        cr_assert_eq(pthread_create(&s->thread, NULL, helper_main, s), 0);
    }
    for (int i = 0; i < 3; i++)
        pool_add(s, seeded(s, VQ_F64, 2));
    pool_add(s, seeded(s, VQ_F64, 1));
    pool_add(s, seeded(s, VQ_I32, 1));
    pool_add(s, seeded(s, VQ_I32, 1));
    if (capture)
        cr_assert_eq(vq_capture_begin(s->e), 0);
    for (int i = 0; i < steps; i++)
        step(s);
    if (capture)
        cr_assert_eq(vq_capture_end(s->e), 0, "%s", vq_errmsg());
    for (int k = 0; k < s->npool; k++) {
        log_tensor(&s->log, "final", s->pool[k]);
        vq_tensor_release(s->pool[k]);
    }
    if (helper) {
        pthread_mutex_lock(&s->lock);
        s->quit = true;
        pthread_cond_broadcast(&s->cond);
        pthread_mutex_unlock(&s->lock);
        pthread_join(s->thread, NULL);
        pthread_mutex_destroy(&s->lock);
        pthread_cond_destroy(&s->cond);
    }
}

static void compare_sequences(bool helper, int rounds)
{
    uint64_t rng = oc_seed("capture");
    vq_engine *e = engine(2);
    vq_capture_stats before = cstats(e);
    for (int r = 0; r < rounds; r++) {
        uint64_t seed = oc_next(&rng);
        int64_t n = 2 + (int64_t)(r % 3); /* shapes change: guards miss and rebuild */
        struct seq eager = {.e = e}, captured = {.e = e};
        seq_run(&eager, seed, n, false, helper, 60);
        seq_run(&captured, seed, n, true, helper, 60);
        char what[64];
        snprintf(what, sizeof what, "round %d (n %lld)", r, (long long)n);
        logs_equal(&eager.log, &captured.log, what);
        free(eager.log.buf);
        free(captured.log.buf);
    }
    vq_capture_stats after = cstats(e);
    cr_assert_gt(after.ops_recorded - before.ops_recorded, 0);
    cr_assert_gt(after.segments_run - before.segments_run, 0);
    cr_assert_gt(after.cuts[VQ_CAPTURE_CUT_HOST_READ] - before.cuts[VQ_CAPTURE_CUT_HOST_READ], 0,
                 "host reads cut");
    if (helper)
        cr_assert_gt(after.cuts[VQ_CAPTURE_CUT_THREAD] - before.cuts[VQ_CAPTURE_CUT_THREAD], 0,
                     "the other thread's calls cut");
    vq_engine_free(e);
}

Test(capture, random_sequences_give_the_eager_results_errors_and_bits)
{
    compare_sequences(false, 40);
}

Test(capture, random_sequences_with_another_thread_on_the_same_tensors)
{
    compare_sequences(true, 20);
}

/* The same sequence again: its segments replay from the cache. */
Test(capture, a_repeated_sequence_hits_every_guard)
{
    vq_engine *e = engine(2);
    struct seq first = {.e = e}, again = {.e = e};
    seq_run(&first, 42, 3, true, false, 80);
    vq_capture_stats mid = cstats(e);
    seq_run(&again, 42, 3, true, false, 80);
    vq_capture_stats end = cstats(e);
    logs_equal(&first.log, &again.log, "the same sequence twice");
    cr_assert_eq(end.plans_built, mid.plans_built, "no plan built the second time");
    cr_assert_eq(end.cache_hits - mid.cache_hits, end.segments_run - mid.segments_run);
    cr_assert_eq(end.op_hits - mid.op_hits, end.ops_recorded - mid.ops_recorded);
    free(first.log.buf);
    free(again.log.buf);
    vq_engine_free(e);
}

/* ---- guards ---- */

static vq_tensor *filled(vq_dtype dt, int n, double v0)
{
    double v[8];
    for (int i = 0; i < n; i++)
        v[i] = v0 + i;
    return oc_from(dt, 1, (int64_t[]){n}, v);
}

/* out = scale(x) captured, then checked against the eager value. */
static void guard_case(vq_engine *e, vq_dtype dt, int n, double scale, bool expect_hit)
{
    vq_tensor *x = filled(dt, n, 1), *y = NULL;
    vq_attr a = VQ_ATTR_F("scale", scale);
    vq_capture_stats before = cstats(e);
    cr_assert_eq(vq_capture_begin(e), 0);
    cr_assert_eq(vq_op_run(e, "scale", &x, 1, &y, 1, &a, 1), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_capture_end(e), 0);
    vq_capture_stats after = cstats(e);
    cr_assert_eq(vq_tensor_wait(y), 0);
    cr_assert_eq(vq_tensor_dtype(y), dt);
    cr_assert_eq(vq_tensor_numel(y), n);
    for (int i = 0; i < n; i++)
        cr_assert_eq(oc_get(y, i), scale * (1 + i));
    cr_assert_eq(after.op_hits - before.op_hits, expect_hit ? 1 : 0);
    cr_assert_eq(after.plans_built - before.plans_built, expect_hit ? 0 : 1);
    vq_tensor_release(x);
    vq_tensor_release(y);
}

Test(capture, guards_miss_on_a_changed_shape_dtype_or_attribute)
{
    vq_engine *e = engine(2);
    guard_case(e, VQ_F32, 4, 2, false);
    guard_case(e, VQ_F32, 4, 2, true);
    guard_case(e, VQ_F32, 5, 2, false);  /* shape */
    guard_case(e, VQ_F64, 4, 2, false);  /* dtype */
    guard_case(e, VQ_F32, 4, 3, false);  /* attribute */
    guard_case(e, VQ_F32, 4, 2, true);
    vq_engine_free(e);
}

/* c = a + b; d = c - (a or b): the same ops, metas and attributes, wired
 * differently. */
static void wiring_case(vq_engine *e, bool minus_b, uint64_t hits)
{
    vq_tensor *a = filled(VQ_F64, 3, 1), *b = filled(VQ_F64, 3, 10), *c = NULL, *d = NULL;
    vq_capture_stats before = cstats(e);
    cr_assert_eq(vq_capture_begin(e), 0);
    cr_assert_eq(vq_op_run(e, "add", (vq_tensor *[]){a, b}, 2, &c, 1, NULL, 0), 0);
    cr_assert_eq(vq_op_run(e, "sub", (vq_tensor *[]){c, minus_b ? b : a}, 2, &d, 1, NULL, 0), 0);
    cr_assert_eq(vq_capture_end(e), 0);
    vq_capture_stats after = cstats(e);
    cr_assert_eq(vq_tensor_wait(d), 0);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(oc_get(d, i), minus_b ? 1.0 + i : 10.0 + i);
    cr_assert_eq(after.op_hits - before.op_hits, hits);
    vq_tensor_release(a);
    vq_tensor_release(b);
    vq_tensor_release(c);
    vq_tensor_release(d);
}

/* A tensor of another engine: the same error, naming the call and the
 * slot, eagerly and captured (and the captured call records nothing). */
Test(capture, a_tensor_of_another_engine_fails_the_same_way_eagerly_and_captured)
{
    vq_engine *e = engine(1), *other = engine(1);
    vq_tensor *x, *y = NULL, *z = NULL;
    cr_assert_eq(vq_tensor_from(&x, VQ_F32, 1, (int64_t[]){2}, (float[]){-1, 2}), 0);
    cr_assert_not_null(vq_tensor_var(x, other));
    const char *want = "relu: input 0: the tensor is already used with another engine";
    cr_assert_eq(vq_op_run(e, "relu", &x, 1, &y, 1, NULL, 0), VQ_EINVAL);
    cr_assert_str_eq(vq_errmsg(), want);
    cr_assert_null(y);
    cr_assert_eq(vq_capture_begin(e), 0);
    cr_assert_eq(vq_op_run(e, "relu", &x, 1, &z, 1, NULL, 0), VQ_EINVAL);
    cr_assert_str_eq(vq_errmsg(), want);
    cr_assert_null(z);
    cr_assert_eq(vq_capture_end(e), 0);
    cr_assert_eq(cstats(e).ops_recorded, 0);
    /* vq_tensor_var and vq_tensor_copy_to name themselves. */
    cr_assert_null(vq_tensor_var(x, e));
    cr_assert_str_eq(vq_errmsg(), "vq_tensor_var: the tensor is already used with another engine");
    cr_assert_eq(vq_tensor_copy_to(e, x, (vq_ctx){VQ_DEV_CPU, 0}, &z), VQ_EINVAL);
    cr_assert_str_eq(vq_errmsg(),
                     "vq_tensor_copy_to: src: the tensor is already used with another engine");
    vq_tensor_release(x);
    vq_engine_free(e);
    vq_engine_free(other);
}

Test(capture, guards_miss_on_changed_wiring)
{
    vq_engine *e = engine(2);
    wiring_case(e, false, 0);
    wiring_case(e, false, 2);
    wiring_case(e, true, 1); /* add hits, sub reads b instead of a: a miss */
    wiring_case(e, true, 2);
    wiring_case(e, false, 2);
    vq_engine_free(e);
}

Test(capture, the_guard_hash_differs_between_structures)
{
    vq_engine *e = engine(1);
    guard_case(e, VQ_F32, 4, 2, false);
    uint64_t g1 = cstats(e).guard;
    guard_case(e, VQ_F32, 4, 3, false);
    uint64_t g2 = cstats(e).guard;
    guard_case(e, VQ_F32, 4, 2, true);
    cr_assert_neq(g1, g2);
    cr_assert_eq(cstats(e).guard, g1);
    vq_engine_free(e);
}

/* ---- calls, errors, cuts ---- */

Test(capture, bad_calls_fail_at_the_call_with_the_eager_message)
{
    vq_engine *e = engine(2);
    vq_tensor *x = filled(VQ_F32, 3, 1), *y = filled(VQ_F32, 4, 1), *z = NULL;
    int rc = vq_op_run(e, "add", (vq_tensor *[]){x, y}, 2, &z, 1, NULL, 0);
    char eager[256];
    snprintf(eager, sizeof eager, "%s", vq_errmsg());
    cr_assert_eq(rc, VQ_EINVAL);
    cr_assert_eq(vq_capture_begin(e), 0);
    cr_assert_eq(vq_op_run(e, "add", (vq_tensor *[]){x, y}, 2, &z, 1, NULL, 0), VQ_EINVAL);
    cr_assert_str_eq(vq_errmsg(), eager);
    cr_assert_null(z);
    cr_assert_eq(vq_op_run(e, "no_such_op", &x, 1, &z, 1, NULL, 0), VQ_EINVAL);
    cr_assert_eq(vq_op_run(e, "relu", (vq_tensor *[]){NULL}, 1, &z, 1, NULL, 0), VQ_EINVAL);
    cr_assert_eq(vq_capture_end(e), 0);
    cr_assert_eq(cstats(e).ops_recorded, 0);
    cr_assert_eq(vq_capture_end(e), VQ_EINVAL, "not capturing");
    vq_tensor_release(x);
    vq_tensor_release(y);
    vq_engine_free(e);
}

Test(capture, kernel_errors_reach_the_same_tensors_as_eagerly)
{
    vq_engine *e = engine(2);
    int64_t s[1] = {3};
    int32_t av[3] = {4, 5, 6}, bv[3] = {2, 0, 3};
    vq_tensor *a, *b, *q = NULL, *r = NULL, *ok = NULL;
    cr_assert_eq(vq_tensor_from(&a, VQ_I32, 1, s, av), 0);
    cr_assert_eq(vq_tensor_from(&b, VQ_I32, 1, s, bv), 0);
    cr_assert_eq(vq_capture_begin(e), 0);
    cr_assert_eq(vq_op_run(e, "div", (vq_tensor *[]){a, b}, 2, &q, 1, NULL, 0), 0);
    cr_assert_eq(vq_op_run(e, "add", (vq_tensor *[]){q, a}, 2, &r, 1, NULL, 0), 0);
    cr_assert_eq(vq_op_run(e, "add", (vq_tensor *[]){a, b}, 2, &ok, 1, NULL, 0), 0);
    cr_assert_eq(vq_capture_end(e), 0, "kernel errors are not the push's");
    cr_assert_eq(vq_tensor_wait(q), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "division by zero"), "%s", vq_errmsg());
    cr_assert_eq(vq_tensor_wait(r), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "depends on failed"), "%s", vq_errmsg());
    cr_assert_eq(vq_tensor_wait(ok), 0, "an independent call of the segment");
    cr_assert_eq(oc_get(ok, 1), 5);
    cr_assert_eq(vq_tensor_wait(a), 0);
    vq_tensor_release(a);
    vq_tensor_release(b);
    vq_tensor_release(q);
    vq_tensor_release(r);
    vq_tensor_release(ok);
    vq_engine_free(e);
}

Test(capture, a_host_read_cuts_and_recording_goes_on)
{
    vq_engine *e = engine(2);
    vq_tensor *x = filled(VQ_F64, 4, 1), *y = NULL, *z = NULL;
    vq_attr two = VQ_ATTR_F("scale", 2);
    vq_capture_stats before = cstats(e);
    cr_assert_eq(vq_capture_begin(e), 0);
    cr_assert_eq(vq_op_run(e, "scale", &x, 1, &y, 1, &two, 1), 0);
    cr_assert_eq(vq_tensor_wait(y), 0);
    cr_assert_eq(((double *)vq_tensor_data(y))[3], 8.0);
    cr_assert_eq(vq_op_run(e, "scale", &y, 1, &z, 1, &two, 1), 0);
    vq_var *v = vq_tensor_var(z, e); /* the fallback cuts too */
    cr_assert_not_null(v);
    cr_assert_eq(vq_capture_end(e), 0);
    vq_capture_stats after = cstats(e);
    cr_assert_eq(after.cuts[VQ_CAPTURE_CUT_HOST_READ] - before.cuts[VQ_CAPTURE_CUT_HOST_READ], 1);
    cr_assert_eq(after.cuts[VQ_CAPTURE_CUT_VAR] - before.cuts[VQ_CAPTURE_CUT_VAR], 1);
    cr_assert_eq(after.segments_run - before.segments_run, 2);
    cr_assert_eq(vq_tensor_wait(z), 0);
    cr_assert_eq(oc_get(z, 0), 4.0);
    vq_tensor_release(x);
    vq_tensor_release(y);
    vq_tensor_release(z);
    vq_engine_free(e);
}

/* Rows (the trace's "tid") of the profiler's capture_segment records. */
static int segment_rows(vq_engine *e, int *rows, int max)
{
    char path[] = "/tmp/varq_capture_XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    close(fd);
    cr_assert_eq(vq_profiler_dump(e, path), 0, "%s", vq_errmsg());
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f);
    char line[512];
    const char *key = "{\"name\":\"capture_segment\"";
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        const char *tid = strstr(line, "\"tid\":");
        if (strncmp(line, key, strlen(key)) == 0 && tid && n < max)
            rows[n++] = atoi(tid + 6);
    }
    fclose(f);
    unlink(path);
    return n;
}

/* A segment cut because its caller reads a result, or because its caller
 * ends the capture, is run by the caller's thread when it is ready (no
 * worker's wake-up, no handoff back): the profiler shows it on the row of
 * other threads, after the two workers' rows. */
Test(capture, a_segment_cut_by_a_host_read_or_the_end_runs_on_the_callers_thread)
{
    vq_engine *e;
    vq_engine_opts o = {.kind = VQ_ENGINE_THREADED, .cpu_workers = 2, .flags = VQ_ENGINE_PROFILE};
    cr_assert_eq(vq_engine_new(&e, &o), 0, "%s", vq_errmsg());
    vq_tensor *x = filled(VQ_F64, 4, 1), *y = NULL, *z = NULL;
    vq_attr two = VQ_ATTR_F("scale", 2);
    for (int step = 0; step < 3; step++) {
        cr_assert_eq(vq_capture_begin(e), 0);
        cr_assert_eq(vq_op_run(e, "scale", &x, 1, &y, 1, &two, 1), 0);
        cr_assert_eq(vq_tensor_wait(y), 0); /* cut: a host read */
        cr_assert_eq(((double *)vq_tensor_data(y))[3], 8.0);
        cr_assert_eq(vq_op_run(e, "scale", &y, 1, &z, 1, &two, 1), 0);
        cr_assert_eq(vq_capture_end(e), 0); /* cut: the end */
        cr_assert_eq(vq_tensor_wait(z), 0);
        cr_assert_eq(oc_get(z, 3), 16.0);
        vq_tensor_release(y);
        vq_tensor_release(z);
        y = z = NULL;
    }
    int rows[16];
    int n = segment_rows(e, rows, 16);
    cr_assert_eq(n, 6, "capture_segment records: %d", n);
    for (int i = 0; i < n; i++)
        cr_assert_eq(rows[i], 2, "segment %d ran on row %d, not the caller's (2)", i, rows[i]);
    vq_tensor_release(x);
    vq_engine_free(e);
}

Test(capture, released_tensors_and_tensors_kept_across_segments)
{
    vq_engine *e = engine(2);
    vq_tensor *x = filled(VQ_F64, 4, 1), *keep = NULL;
    vq_attr two = VQ_ATTR_F("scale", 2);
    for (int step = 0; step < 20; step++) {
        cr_assert_eq(vq_capture_begin(e), 0);
        vq_tensor *t = NULL, *u = NULL;
        cr_assert_eq(vq_op_run(e, "scale", &x, 1, &t, 1, &two, 1), 0);
        cr_assert_eq(vq_op_run(e, "relu", &t, 1, &u, 1, NULL, 0), 0);
        vq_tensor_release(t); /* mid-segment: a temporary now */
        vq_tensor *in[2] = {u, keep ? keep : u}, *sum = NULL;
        cr_assert_eq(vq_op_run(e, "add", in, 2, &sum, 1, NULL, 0), 0);
        vq_tensor_release(u);
        vq_tensor_release(keep);
        keep = sum; /* read by the next step's segment */
        cr_assert_eq(vq_capture_end(e), 0);
    }
    cr_assert_eq(vq_tensor_wait(keep), 0);
    /* keep = 2x + keep each step, from 2x + 2x: (step + 2) * 2x */
    for (int i = 0; i < 4; i++)
        cr_assert_eq(oc_get(keep, i), 21 * 2.0 * (1 + i));
    vq_tensor_release(keep);
    vq_tensor_release(x);
    vq_engine_free(e);
}

/* A temporary of one step is handed to the same call of the next step
 * (capture/replay.c, spare_put): the values, the errors and their
 * messages must still be the eager ones, whether the reused tensor failed
 * before, and whether the caller keeps it this time. */
Test(capture, temporaries_reused_by_the_next_step_keep_eager_values_and_errors)
{
    vq_engine *e = engine(2);
    int64_t s[1] = {3};
    int32_t av[3] = {4, 5, 6}, good[3] = {2, 1, 3}, bad[3] = {2, 0, 3};
    vq_tensor *a;
    cr_assert_eq(vq_tensor_from(&a, VQ_I32, 1, s, av), 0);
    for (int step = 0; step < 12; step++) {
        bool fails = step % 2 == 1, keep_q = (step / 2) % 2 == 1;
        vq_tensor *b, *q = NULL, *r = NULL;
        cr_assert_eq(vq_tensor_from(&b, VQ_I32, 1, s, fails ? bad : good), 0);
        cr_assert_eq(vq_capture_begin(e), 0);
        cr_assert_eq(vq_op_run(e, "div", (vq_tensor *[]){a, b}, 2, &q, 1, NULL, 0), 0);
        cr_assert_eq(vq_op_run(e, "add", (vq_tensor *[]){q, a}, 2, &r, 1, NULL, 0), 0);
        if (!keep_q) {
            vq_tensor_release(q); /* a temporary: its storage goes back to the node */
            q = NULL;
        }
        cr_assert_eq(vq_capture_end(e), 0);
        if (fails) {
            cr_assert_eq(vq_tensor_wait(r), VQ_EINVAL, "step %d", step);
            cr_assert(strstr(vq_errmsg(), "depends on failed"), "%s", vq_errmsg());
        } else {
            cr_assert_eq(vq_tensor_wait(r), 0, "step %d: %s", step, vq_errmsg());
            for (int i = 0; i < 3; i++)
                cr_assert_eq(oc_get(r, i), av[i] / good[i] + av[i], "step %d", step);
        }
        if (q) {
            int rc = vq_tensor_wait(q);
            cr_assert_eq(rc, fails ? VQ_EINVAL : 0, "step %d", step);
            if (fails)
                cr_assert(strstr(vq_errmsg(), "division by zero"), "%s", vq_errmsg());
            else
                for (int i = 0; i < 3; i++)
                    cr_assert_eq(oc_get(q, i), av[i] / good[i], "step %d", step);
        }
        vq_tensor_release(q);
        vq_tensor_release(r);
        vq_tensor_release(b);
    }
    vq_capture_stats st = cstats(e);
    cr_assert_eq(st.plans_built, 2, "one plan with q a temporary, one with q kept");
    vq_tensor_release(a);
    vq_engine_free(e);
}

/* Independent large branches in one segment, on an engine with two
 * workers (eager overlaps them): each branch keeps its order (a read
 * before an in-place update of the same tensor, an update after the
 * read), and the results, the errors and the messages are eager's to the
 * bit. */
struct branches {
    vq_tensor *x, *w1, *w2, *iv, *den;
};

static void branches_make(struct branches *b, uint64_t seed)
{
    uint64_t rng = seed;
    int64_t sh[2] = {64, 64};
    b->x = oc_rand(&rng, VQ_F32, 2, sh, -1, 1);
    b->w1 = oc_rand(&rng, VQ_F32, 2, sh, -1, 1);
    b->w2 = oc_rand(&rng, VQ_F32, 2, sh, -1, 1);
    b->iv = oc_rand(&rng, VQ_I32, 2, sh, 1, 9);
    b->den = oc_rand(&rng, VQ_I32, 2, sh, 1, 5);
}

static void branches_free(struct branches *b)
{
    vq_tensor_release(b->x);
    vq_tensor_release(b->w1);
    vq_tensor_release(b->w2);
    vq_tensor_release(b->iv);
    vq_tensor_release(b->den);
}

/* One step; *sum and *r are the caller's. den gets a zero on failing steps. */
static void branches_step(vq_engine *e, struct branches *b, bool fails, vq_tensor **sum,
                          vq_tensor **r)
{
    vq_attr lr = VQ_ATTR_F("learning_rate", 0.0625), half = VQ_ATTR_F("scale", 0.5);
    vq_tensor *a = NULL, *c = NULL, *ra = NULL, *sc = NULL, *q = NULL;
    cr_assert_eq(vq_tensor_wait(b->den), 0);
    oc_set(b->den, 77, fails ? 0 : 3);
    *sum = *r = NULL;
    cr_assert_eq(vq_op_run(e, "matmul", (vq_tensor *[]){b->x, b->w1}, 2, &a, 1, NULL, 0), 0);
    cr_assert_eq(vq_op_run(e, "matmul", (vq_tensor *[]){b->x, b->w2}, 2, &c, 1, NULL, 0), 0);
    cr_assert_eq(vq_op_run(e, "relu", &a, 1, &ra, 1, NULL, 0), 0);
    cr_assert_eq(vq_op_run(e, "scale", &c, 1, &sc, 1, &half, 1), 0);
    cr_assert_eq(vq_op_run(e, "sgd", (vq_tensor *[]){b->w1, ra}, 2, &b->w1, 1, &lr, 1), 0);
    cr_assert_eq(vq_op_run(e, "sgd", (vq_tensor *[]){b->w2, sc}, 2, &b->w2, 1, &lr, 1), 0);
    cr_assert_eq(vq_op_run(e, "div", (vq_tensor *[]){b->iv, b->den}, 2, &q, 1, NULL, 0), 0);
    cr_assert_eq(vq_op_run(e, "add", (vq_tensor *[]){q, b->iv}, 2, r, 1, NULL, 0), 0);
    cr_assert_eq(vq_op_run(e, "add", (vq_tensor *[]){ra, sc}, 2, sum, 1, NULL, 0), 0);
    vq_tensor_release(a);
    vq_tensor_release(c);
    vq_tensor_release(ra);
    vq_tensor_release(sc);
    vq_tensor_release(q);
}

/* Waits for x (eager) and y (captured), once each (a wait takes the var's
 * error), and asserts the same result. */
static void assert_same_bits(vq_tensor *x, vq_tensor *y, const char *what, int step)
{
    int rx = vq_tensor_wait(x);
    char mx[256];
    snprintf(mx, sizeof mx, "%s", rx ? vq_errmsg() : "");
    int ry = vq_tensor_wait(y);
    cr_assert_eq(rx, ry, "%s, step %d: eager %d (%s), captured %d (%s)", what, step, rx, mx, ry,
                 ry ? vq_errmsg() : "");
    if (rx) {
        cr_assert_str_eq(mx, vq_errmsg(), "%s, step %d", what, step);
        return;
    }
    cr_assert_eq(vq_tensor_nbytes(x), vq_tensor_nbytes(y));
    cr_assert_eq(memcmp(vq_tensor_data(x), vq_tensor_data(y), vq_tensor_nbytes(x)), 0,
                 "%s, step %d", what, step);
}

Test(capture, independent_branches_with_two_workers_give_the_eager_bits_and_errors)
{
    vq_engine *e0 = engine(2), *e1 = engine(2);
    struct branches b0, b1;
    branches_make(&b0, 42);
    branches_make(&b1, 42);
    for (int step = 0; step < 16; step++) {
        bool fails = step % 3 == 2;
        vq_tensor *sum0, *r0, *sum1, *r1;
        branches_step(e0, &b0, fails, &sum0, &r0);
        cr_assert_eq(vq_capture_begin(e1), 0);
        branches_step(e1, &b1, fails, &sum1, &r1);
        cr_assert_eq(vq_capture_end(e1), 0);
        assert_same_bits(sum0, sum1, "sum", step);
        if (fails) { /* the failure reaches r through q, a temporary */
            cr_assert_eq(vq_tensor_wait(r0), VQ_EINVAL);
            cr_assert(strstr(vq_errmsg(), "depends on failed"), "%s", vq_errmsg());
            cr_assert_eq(vq_tensor_wait(r1), VQ_EINVAL, "step %d", step);
            cr_assert(strstr(vq_errmsg(), "depends on failed"), "%s", vq_errmsg());
        } else {
            assert_same_bits(r0, r1, "r", step);
        }
        assert_same_bits(b0.w1, b1.w1, "w1", step);
        assert_same_bits(b0.w2, b1.w2, "w2", step);
        vq_tensor_release(sum0);
        vq_tensor_release(r0);
        vq_tensor_release(sum1);
        vq_tensor_release(r1);
    }
    vq_capture_stats st = cstats(e1);
    cr_assert_eq(st.cache_hits, 15);
    branches_free(&b0);
    branches_free(&b1);
    vq_engine_free(e0);
    vq_engine_free(e1);
}

Test(capture, in_place_optimizer_updates_across_steps)
{
    vq_engine *e0 = engine(2), *e1 = engine(2);
    vq_tensor *w[2], *g[2];
    for (int k = 0; k < 2; k++) {
        w[k] = filled(VQ_F32, 4, 1);
        g[k] = filled(VQ_F32, 4, -2);
    }
    vq_attr lr = VQ_ATTR_F("learning_rate", 0.125);
    for (int step = 0; step < 10; step++)
        for (int k = 0; k < 2; k++) {
            if (k == 1)
                cr_assert_eq(vq_capture_begin(e1), 0);
            vq_engine *e = k ? e1 : e0;
            vq_tensor *sq = NULL;
            cr_assert_eq(vq_op_run(e, "mul", (vq_tensor *[]){w[k], g[k]}, 2, &sq, 1, NULL, 0), 0);
            cr_assert_eq(vq_op_run(e, "sgd", (vq_tensor *[]){w[k], sq}, 2, &w[k], 1, &lr, 1), 0);
            vq_tensor_release(sq);
            if (k == 1)
                cr_assert_eq(vq_capture_end(e1), 0);
        }
    cr_assert_eq(vq_tensor_wait(w[0]), 0);
    cr_assert_eq(vq_tensor_wait(w[1]), 0);
    cr_assert_eq(memcmp(vq_tensor_data(w[0]), vq_tensor_data(w[1]), 16), 0);
    for (int k = 0; k < 2; k++) {
        vq_tensor_release(w[k]);
        vq_tensor_release(g[k]);
    }
    vq_engine_free(e0);
    vq_engine_free(e1);
}

Test(capture, begin_twice_and_stats_arguments)
{
    vq_engine *e = engine(1);
    cr_assert_eq(vq_capture_begin(NULL), VQ_EINVAL);
    cr_assert_eq(vq_capture_begin(e), 0);
    cr_assert_eq(vq_capture_begin(e), VQ_EINVAL);
    cr_assert_eq(vq_capture_end(e), 0);
    cr_assert_eq(vq_capture_get_stats(e, NULL), VQ_EINVAL);
    vq_engine_free(e);
}

/* ---- imperative autodiff ---- */

/* loss = mean(tanh(x w + b)^2), recorded; the gradients of w and b. */
static vq_tensor *model_loss(vq_engine *e, vq_tensor *x, vq_tensor *w, vq_tensor *b)
{
    vq_tensor *h = NULL, *z = NULL, *y = NULL, *sq = NULL, *loss = NULL;
    cr_assert_eq(vq_op_run(e, "matmul", (vq_tensor *[]){x, w}, 2, &h, 1, NULL, 0), 0);
    cr_assert_eq(vq_op_run(e, "add", (vq_tensor *[]){h, b}, 2, &z, 1, NULL, 0), 0);
    cr_assert_eq(vq_op_run(e, "tanh", &z, 1, &y, 1, NULL, 0), 0);
    cr_assert_eq(vq_op_run(e, "mul", (vq_tensor *[]){y, y}, 2, &sq, 1, NULL, 0), 0);
    cr_assert_eq(vq_op_run(e, "mean", &sq, 1, &loss, 1, NULL, 0), 0, "%s", vq_errmsg());
    vq_tensor_release(h);
    vq_tensor_release(z);
    vq_tensor_release(y);
    vq_tensor_release(sq);
    return loss;
}

static void captured_grads(vq_engine *e, vq_tensor *x, vq_tensor *w, vq_tensor *b,
                           vq_tensor **gw, vq_tensor **gb, double *loss_out)
{
    cr_assert_eq(vq_capture_begin(e), 0);
    vq_tensor *loss = model_loss(e, x, w, b);
    vq_tensor *grads[2];
    cr_assert_eq(vq_capture_backward(e, loss, (vq_tensor *[]){w, b}, 2, grads), 0, "%s",
                 vq_errmsg());
    cr_assert_eq(vq_capture_end(e), 0);
    cr_assert_eq(vq_tensor_wait(grads[0]), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_tensor_wait(grads[1]), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_tensor_wait(loss), 0);
    if (loss_out)
        *loss_out = oc_get(loss, 0);
    vq_tensor_release(loss);
    *gw = grads[0];
    *gb = grads[1];
}

Test(capture, backward_equals_append_backward_bit_for_bit_and_finite_differences)
{
    uint64_t rng = oc_seed("capture");
    vq_engine *e = engine(2);
    int64_t xs[2] = {5, 3}, ws[2] = {3, 2}, bs[1] = {2};
    vq_tensor *x = oc_rand(&rng, VQ_F64, 2, xs, -1, 1), *w = oc_rand(&rng, VQ_F64, 2, ws, -1, 1);
    vq_tensor *b = oc_rand(&rng, VQ_F64, 1, bs, -1, 1);
    vq_tensor *gw, *gb;
    captured_grads(e, x, w, b, &gw, &gb, NULL);

    /* The same model as a program, differentiated by vq_append_backward. */
    vq_program *p;
    cr_assert_eq(vq_program_new(&p), 0);
    int64_t hs[2] = {5, 2}, one[0];
    (void)one;
    cr_assert_eq(vq_program_add_var(p, 0, "x", VQ_F64, 2, xs, false), 0);
    cr_assert_eq(vq_program_add_var(p, 0, "w", VQ_F64, 2, ws, true), 0);
    cr_assert_eq(vq_program_add_var(p, 0, "b", VQ_F64, 1, bs, true), 0);
    const char *t[] = {"h", "z", "y", "sq"};
    for (int i = 0; i < 4; i++)
        cr_assert_eq(vq_program_add_var(p, 0, t[i], VQ_F64, 2, hs, false), 0);
    cr_assert_eq(vq_program_add_var(p, 0, "loss", VQ_F64, 0, NULL, false), 0);
    const char *const mm[] = {"x", "w"}, *const ad[] = {"h", "b"}, *const ml[] = {"y", "y"};
    cr_assert_geq(vq_program_add_op(p, 0, "matmul", mm, 2, (const char *[]){"h"}, 1, NULL, 0), 0);
    cr_assert_geq(vq_program_add_op(p, 0, "add", ad, 2, (const char *[]){"z"}, 1, NULL, 0), 0);
    cr_assert_geq(vq_program_add_op(p, 0, "tanh", (const char *[]){"z"}, 1,
                                    (const char *[]){"y"}, 1, NULL, 0), 0);
    cr_assert_geq(vq_program_add_op(p, 0, "mul", ml, 2, (const char *[]){"sq"}, 1, NULL, 0), 0);
    cr_assert_geq(vq_program_add_op(p, 0, "mean", (const char *[]){"sq"}, 1,
                                    (const char *[]){"loss"}, 1, NULL, 0), 0);
    cr_assert_eq(vq_append_backward(p, "loss", NULL, 0), 2, "%s", vq_errmsg());
    vq_exec *ex;
    vq_scope *s;
    cr_assert_eq(vq_exec_new(&ex, e, NULL), 0);
    cr_assert_eq(vq_scope_new(&s), 0);
    cr_assert_eq(vq_scope_set(s, "w", w), 0);
    cr_assert_eq(vq_scope_set(s, "b", b), 0);
    vq_feed feed = {"x", x};
    vq_fetch f[2] = {{"w@GRAD", NULL}, {"b@GRAD", NULL}};
    cr_assert_eq(vq_exec_run(ex, p, s, &feed, 1, f, 2), 0, "%s", vq_errmsg());
    cr_assert_eq(memcmp(vq_tensor_data(f[0].tensor), vq_tensor_data(gw), 6 * 8), 0,
                 "w's gradient: the bits of vq_append_backward's");
    cr_assert_eq(memcmp(vq_tensor_data(f[1].tensor), vq_tensor_data(gb), 2 * 8), 0);

    /* Finite differences on every element of w and b. */
    vq_tensor *params[2] = {w, b}, *grads[2] = {gw, gb};
    for (int k = 0; k < 2; k++)
        for (int64_t i = 0; i < vq_tensor_numel(params[k]); i++) {
            double v = oc_get(params[k], i), lp, lm, eps = 1e-6;
            vq_tensor *a1, *a2;
            oc_set(params[k], i, v + eps);
            captured_grads(e, x, w, b, &a1, &a2, &lp);
            vq_tensor_release(a1);
            vq_tensor_release(a2);
            oc_set(params[k], i, v - eps);
            captured_grads(e, x, w, b, &a1, &a2, &lm);
            vq_tensor_release(a1);
            vq_tensor_release(a2);
            oc_set(params[k], i, v);
            double fd = (lp - lm) / (2 * eps), g = oc_get(grads[k], i);
            cr_assert(fabs(fd - g) <= 1e-7 * (1 + fabs(g)), "param %d element %lld: %g vs %g", k,
                      (long long)i, g, fd);
        }
    vq_capture_stats st = cstats(e);
    cr_assert_gt(st.op_hits, 0, "later steps replay the recipe from the cache");
    vq_tensor_release(f[0].tensor);
    vq_tensor_release(f[1].tensor);
    vq_exec_free(ex);
    vq_scope_free(s);
    vq_program_free(p);
    vq_tensor_release(gw);
    vq_tensor_release(gb);
    vq_tensor_release(x);
    vq_tensor_release(w);
    vq_tensor_release(b);
    vq_engine_free(e);
}

/* The size limit falls inside vq_capture_backward's gradient ops: the cut
 * comes after the last of them (the recipe's ops read the segment's
 * tensors by slot), and the gradients are those of a short segment. */
Test(capture, backward_across_the_size_limit_is_cut_after_it)
{
    uint64_t rng = oc_seed("capture-size");
    vq_engine *e = engine(2);
    int64_t xs[2] = {5, 3}, ws[2] = {3, 2}, bs[1] = {2};
    vq_tensor *x = oc_rand(&rng, VQ_F64, 2, xs, -1, 1), *w = oc_rand(&rng, VQ_F64, 2, ws, -1, 1);
    vq_tensor *b = oc_rand(&rng, VQ_F64, 1, bs, -1, 1), *c = filled(VQ_F64, 2, 0);
    vq_tensor *gw, *gb;
    captured_grads(e, x, w, b, &gw, &gb, NULL);
    vq_attr inc = VQ_ATTR_F("bias", 1);
    for (int step = 0; step < 2; step++) { /* the recipe made, then replayed */
        vq_capture_stats before = cstats(e);
        cr_assert_eq(vq_capture_begin(e), 0);
        for (int i = 0; i < VQ_CAPTURE_MAX_OPS - 7; i++)
            cr_assert_eq(vq_op_run(e, "scale", &c, 1, &c, 1, &inc, 1), 0);
        vq_tensor *loss = model_loss(e, x, w, b), *g[2];
        cr_assert_eq(cstats(e).cuts[VQ_CAPTURE_CUT_SIZE], before.cuts[VQ_CAPTURE_CUT_SIZE]);
        cr_assert_eq(vq_capture_backward(e, loss, (vq_tensor *[]){w, b}, 2, g), 0, "%s",
                     vq_errmsg());
        vq_capture_stats after = cstats(e);
        cr_assert_eq(after.cuts[VQ_CAPTURE_CUT_SIZE] - before.cuts[VQ_CAPTURE_CUT_SIZE], 1,
                     "cut once, after the gradient ops");
        cr_assert_gt(after.ops_recorded - before.ops_recorded, VQ_CAPTURE_MAX_OPS);
        cr_assert_eq(vq_capture_end(e), 0);
        cr_assert_eq(vq_tensor_wait(g[0]), 0, "%s", vq_errmsg());
        cr_assert_eq(vq_tensor_wait(g[1]), 0, "%s", vq_errmsg());
        cr_assert_eq(memcmp(vq_tensor_data(g[0]), vq_tensor_data(gw), 6 * 8), 0);
        cr_assert_eq(memcmp(vq_tensor_data(g[1]), vq_tensor_data(gb), 2 * 8), 0);
        vq_tensor_release(g[0]);
        vq_tensor_release(g[1]);
        vq_tensor_release(loss);
    }
    cr_assert_eq(vq_tensor_wait(c), 0);
    cr_assert_eq(oc_get(c, 1), 1.0 + 2 * (VQ_CAPTURE_MAX_OPS - 7));
    vq_tensor_release(gw);
    vq_tensor_release(gb);
    vq_tensor_release(x);
    vq_tensor_release(w);
    vq_tensor_release(b);
    vq_tensor_release(c);
    vq_engine_free(e);
}

Test(capture, backward_refuses_a_loss_from_outside_the_segment)
{
    vq_engine *e = engine(1);
    vq_tensor *x = filled(VQ_F64, 1, 1), *w = filled(VQ_F64, 1, 2), *g[1];
    cr_assert_eq(vq_capture_backward(e, x, &w, 1, g), VQ_EINVAL, "not capturing");
    cr_assert_eq(vq_capture_begin(e), 0);
    cr_assert_eq(vq_capture_backward(e, x, &w, 1, g), VQ_EINVAL);
    cr_assert_null(g[0]);
    vq_tensor *y = NULL;
    cr_assert_eq(vq_op_run(e, "mul", (vq_tensor *[]){x, x}, 2, &y, 1, NULL, 0), 0);
    cr_assert_eq(vq_capture_backward(e, y, &w, 1, g), 0, "%s", vq_errmsg());
    cr_assert_null(g[0], "w is not read: no gradient");
    cr_assert_eq(vq_capture_end(e), 0);
    vq_tensor_release(x);
    vq_tensor_release(w);
    vq_tensor_release(y);
    vq_engine_free(e);
}

/* ---- on a GPU (the emulated backend unless VARQ_GPU_BACKEND names one) ---- */

static vq_tensor *to_host(vq_engine *e, vq_tensor *t)
{
    vq_tensor *h;
    cr_assert_eq(vq_tensor_copy_to(e, t, (vq_ctx){VQ_DEV_CPU, 0}, &h), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_tensor_wait(h), 0, "%s", vq_errmsg());
    return h;
}

/* y = tanh(x w) * 0.5, and the gradients of mean(y * y) on GPU 0. */
static void gpu_step(vq_engine *e, bool capture, vq_tensor *x, vq_tensor *w, vq_tensor **y_host,
                     vq_tensor **g_host)
{
    vq_ctx gpu = {VQ_DEV_GPU, 0};
    vq_tensor *xg, *wg, *h = NULL, *t = NULL, *y = NULL, *sq = NULL, *loss = NULL, *g = NULL;
    cr_assert_eq(vq_tensor_copy_to(e, x, gpu, &xg), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_tensor_copy_to(e, w, gpu, &wg), 0);
    if (capture)
        cr_assert_eq(vq_capture_begin(e), 0);
    vq_attr half = VQ_ATTR_F("scale", 0.5);
    cr_assert_eq(vq_op_run(e, "matmul", (vq_tensor *[]){xg, wg}, 2, &h, 1, NULL, 0), 0);
    cr_assert_eq(vq_op_run(e, "tanh", &h, 1, &t, 1, NULL, 0), 0);
    cr_assert_eq(vq_op_run(e, "scale", &t, 1, &y, 1, &half, 1), 0);
    if (capture) {
        cr_assert_eq(vq_op_run(e, "mul", (vq_tensor *[]){y, y}, 2, &sq, 1, NULL, 0), 0);
        cr_assert_eq(vq_op_run(e, "mean", &sq, 1, &loss, 1, NULL, 0), 0);
        cr_assert_eq(vq_capture_backward(e, loss, &wg, 1, &g), 0, "%s", vq_errmsg());
        cr_assert_not_null(g);
        cr_assert_eq(vq_tensor_device(g).kind, VQ_DEV_GPU);
        cr_assert_eq(vq_capture_end(e), 0);
        *g_host = to_host(e, g);
    }
    *y_host = to_host(e, y);
    vq_tensor *all[] = {xg, wg, h, t, y, sq, loss, g};
    for (int i = 0; i < 8; i++)
        vq_tensor_release(all[i]);
}

Test(capture, gpu_segments_give_the_eager_bits)
{
    setenv("VARQ_GPU_BACKEND", "emulated", 0);
    uint64_t rng = oc_seed("capture");
    vq_engine *e = engine(2);
    int64_t xs[2] = {6, 4}, ws[2] = {4, 3};
    vq_tensor *x = oc_rand(&rng, VQ_F32, 2, xs, -1, 1), *w = oc_rand(&rng, VQ_F32, 2, ws, -1, 1);
    vq_tensor *ye, *yc, *g;
    gpu_step(e, false, x, w, &ye, NULL);
    vq_capture_stats before = cstats(e);
    gpu_step(e, true, x, w, &yc, &g);
    vq_tensor_release(yc);
    vq_tensor_release(g);
    gpu_step(e, true, x, w, &yc, &g); /* again: from the cache */
    vq_capture_stats after = cstats(e);
    cr_assert_eq(memcmp(vq_tensor_data(ye), vq_tensor_data(yc), 6 * 3 * 4), 0);
    cr_assert_eq(after.plans_built - before.plans_built, 1);
    cr_assert_gt(after.cache_hits, before.cache_hits);
    for (int64_t i = 0; i < 12; i++)
        cr_assert(isfinite(oc_get(g, i)));
    vq_tensor_release(ye);
    vq_tensor_release(yc);
    vq_tensor_release(g);
    vq_tensor_release(x);
    vq_tensor_release(w);
    vq_engine_free(e);
}

Test(capture, a_long_segment_is_cut_at_the_size_limit)
{
    vq_engine *e = engine(2);
    vq_tensor *x = filled(VQ_F64, 2, 0);
    vq_attr inc = VQ_ATTR_F("bias", 1);
    vq_capture_stats before = cstats(e);
    cr_assert_eq(vq_capture_begin(e), 0);
    for (int i = 0; i < VQ_CAPTURE_MAX_OPS + 10; i++)
        cr_assert_eq(vq_op_run(e, "scale", &x, 1, &x, 1, &inc, 1), 0);
    cr_assert_eq(vq_capture_end(e), 0);
    vq_capture_stats after = cstats(e);
    cr_assert_eq(after.cuts[VQ_CAPTURE_CUT_SIZE] - before.cuts[VQ_CAPTURE_CUT_SIZE], 1);
    cr_assert_eq(after.cuts[VQ_CAPTURE_CUT_END] - before.cuts[VQ_CAPTURE_CUT_END], 1);
    cr_assert_eq(vq_tensor_wait(x), 0);
    cr_assert_eq(oc_get(x, 1), 1.0 + VQ_CAPTURE_MAX_OPS + 10);
    vq_tensor_release(x);
    vq_engine_free(e);
}

Test(capture, a_tensor_of_another_engine_fails_as_eagerly)
{
    vq_engine *e = engine(1), *other = engine(1);
    vq_tensor *x = filled(VQ_F32, 2, 1), *y = NULL;
    cr_assert_eq(vq_op_run(other, "relu", &x, 1, &y, 1, NULL, 0), 0); /* x is other's now */
    vq_tensor *z = NULL;
    int rc = vq_op_run(e, "relu", &x, 1, &z, 1, NULL, 0);
    char eager[256];
    snprintf(eager, sizeof eager, "%s", vq_errmsg());
    cr_assert_eq(rc, VQ_EINVAL);
    cr_assert_eq(vq_capture_begin(e), 0);
    cr_assert_eq(vq_op_run(e, "relu", &x, 1, &z, 1, NULL, 0), VQ_EINVAL);
    cr_assert_str_eq(vq_errmsg(), eager);
    cr_assert_null(z);
    cr_assert_eq(vq_capture_end(e), 0);
    cr_assert_eq(vq_tensor_wait(y), 0);
    vq_tensor_release(x);
    vq_tensor_release(y);
    vq_engine_free(e);
    vq_engine_free(other);
}

/* ---- an engine freed while a capture on it is open ----
 *
 * vq_engine_free ends every capture open on the engine (capture.h): the
 * recorded calls run before the engine drains, whichever thread freed it,
 * and the capturing thread's exit leaves the freed engine alone. The
 * calls' tensors are all released before the free (they must be: their
 * vars die with the engine), so a probe op copies what it reads to where
 * the test can still see it. */

static double probe_seen[4];
static atomic_int probe_runs;

static int probe_infer(const vq_op_infer_call *c)
{
    c->out[0] = c->in[0];
    return 0;
}

static int probe_cpu(const vq_op_kernel_call *k)
{
    int64_t n = vq_tensor_numel(k->in[0]);
    memcpy(vq_tensor_data(k->out[0]), vq_tensor_data(k->in[0]), vq_tensor_nbytes(k->in[0]));
    for (int64_t i = 0; i < n && i < 4; i++)
        probe_seen[i] = ((const double *)vq_tensor_data(k->in[0]))[i];
    atomic_fetch_add(&probe_runs, 1);
    return 0;
}

static void probe_register(void)
{
    static const char *const X[] = {"X"}, *const OUT[] = {"Out"};
    cr_assert_eq(vq_op_register(&(vq_op_def){.name = "capture_probe",
                                             .inputs = X,
                                             .ninputs = 1,
                                             .outputs = OUT,
                                             .noutputs = 1,
                                             .infer = probe_infer,
                                             .cpu = probe_cpu}),
                 0, "%s", vq_errmsg());
}

struct open_capture {
    vq_engine *e;
    bool free_here; /* the capturing thread frees the engine itself */
    int rc;         /* the first failure seen on the thread (0: none) */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool recorded, freed;
};

/* scale then probe, recorded; every tensor released; no vq_capture_end. */
static int record_two_calls_and_let_go(vq_engine *e)
{
    int64_t s[1] = {4};
    double v[4] = {1, 2, 3, 4};
    vq_tensor *x = NULL, *y = NULL, *z = NULL;
    vq_attr two = VQ_ATTR_F("scale", 2);
    int rc = vq_tensor_from(&x, VQ_F64, 1, s, v);
    if (rc == 0)
        rc = vq_capture_begin(e);
    if (rc == 0)
        rc = vq_op_run(e, "scale", &x, 1, &y, 1, &two, 1);
    if (rc == 0)
        rc = vq_op_run(e, "capture_probe", &y, 1, &z, 1, NULL, 0);
    vq_tensor_release(x);
    vq_tensor_release(y);
    vq_tensor_release(z);
    return rc;
}

static void *open_capture_main(void *arg)
{
    struct open_capture *oc = arg;
    oc->rc = record_two_calls_and_let_go(oc->e);
    if (oc->free_here) {
        vq_engine_free(oc->e);
    } else {
        pthread_mutex_lock(&oc->lock);
        oc->recorded = true;
        pthread_cond_broadcast(&oc->cond);
        while (!oc->freed)
            pthread_cond_wait(&oc->cond, &oc->lock);
        pthread_mutex_unlock(&oc->lock);
    }
    if (oc->rc == 0 && atomic_load(&probe_runs) != 1)
        oc->rc = -1000; /* the recorded calls did not run by the free */
    /* Capturing again on a new engine (maybe at the freed one's address)
     * starts afresh. */
    vq_engine *e2 = NULL;
    vq_engine_opts o = {.kind = VQ_ENGINE_THREADED, .cpu_workers = 1};
    if (oc->rc == 0)
        oc->rc = vq_engine_new(&e2, &o);
    if (oc->rc == 0)
        oc->rc = record_two_calls_and_let_go(e2);
    if (oc->rc == 0)
        oc->rc = vq_capture_end(e2);
    vq_engine_free(e2);
    if (oc->rc == 0 && atomic_load(&probe_runs) != 2)
        oc->rc = -1001;
    return NULL; /* thread exit: capture's per-thread states go now */
}

static void open_capture_case(bool free_here)
{
    probe_register();
    struct open_capture oc = {.e = engine(2), .free_here = free_here};
    pthread_mutex_init(&oc.lock, NULL);
    pthread_cond_init(&oc.cond, NULL);
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, open_capture_main, &oc), 0);
    if (!free_here) {
        pthread_mutex_lock(&oc.lock);
        while (!oc.recorded)
            pthread_cond_wait(&oc.cond, &oc.lock);
        pthread_mutex_unlock(&oc.lock);
        vq_engine_free(oc.e);
        cr_assert_eq(atomic_load(&probe_runs), 1, "the recorded calls did not run by the free");
        pthread_mutex_lock(&oc.lock);
        oc.freed = true;
        pthread_cond_broadcast(&oc.cond);
        pthread_mutex_unlock(&oc.lock);
    }
    pthread_join(th, NULL);
    cr_assert_eq(oc.rc, 0, "thread: %d", oc.rc);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(probe_seen[i], 2.0 * (i + 1), "probe saw %g at %d", probe_seen[i], i);
    pthread_mutex_destroy(&oc.lock);
    pthread_cond_destroy(&oc.cond);
}

Test(capture, engine_free_ends_the_capturing_threads_open_capture)
{
    open_capture_case(true);
}

Test(capture, engine_free_ends_another_threads_open_capture)
{
    open_capture_case(false);
}

/* A random op without a seed or State draws from the process's generator
 * call by call: it runs as a plain call (a fallback cut), so a loop of
 * captured steps draws anew each step; one with a seed is recorded and
 * replays its seed's numbers. */
Test(capture, random_ops_without_a_seed_run_as_plain_calls_and_draw_anew)
{
    vq_engine *e = engine(2);
    int64_t n = 32;
    vq_attr free_at[2] = {VQ_ATTR_IS("shape", &n, 1), VQ_ATTR_S("dtype", "f64")};
    vq_attr seeded_at[3] = {VQ_ATTR_IS("shape", &n, 1), VQ_ATTR_S("dtype", "f64"),
                            VQ_ATTR_I("seed", 9)};
    vq_tensor *draws[3], *seeded[3];
    vq_capture_stats before = cstats(e);
    for (int step = 0; step < 3; step++) {
        cr_assert_eq(vq_capture_begin(e), 0);
        draws[step] = seeded[step] = NULL;
        cr_assert_eq(vq_op_run(e, "uniform_random", NULL, 0, &seeded[step], 1, seeded_at, 3), 0,
                     "%s", vq_errmsg());
        /* cuts the segment holding the seeded call */
        cr_assert_eq(vq_op_run(e, "uniform_random", NULL, 0, &draws[step], 1, free_at, 2), 0, "%s",
                     vq_errmsg());
        cr_assert_eq(vq_capture_end(e), 0, "%s", vq_errmsg());
    }
    vq_capture_stats after = cstats(e);
    cr_assert_eq(after.cuts[VQ_CAPTURE_CUT_FALLBACK] - before.cuts[VQ_CAPTURE_CUT_FALLBACK], 3);
    cr_assert_eq(after.ops_recorded - before.ops_recorded, 3, "only the seeded calls");
    for (int step = 0; step < 3; step++) {
        cr_assert_eq(vq_tensor_wait(draws[step]), 0, "%s", vq_errmsg());
        cr_assert_eq(vq_tensor_wait(seeded[step]), 0, "%s", vq_errmsg());
    }
    for (int step = 1; step < 3; step++) {
        int equal = 0;
        for (int64_t i = 0; i < n; i++)
            equal += oc_get(draws[step], i) == oc_get(draws[0], i);
        cr_assert_eq(equal, 0, "step %d repeats step 0", step);
        cr_assert_eq(memcmp(vq_tensor_data(seeded[step]), vq_tensor_data(seeded[0]),
                            vq_tensor_nbytes(seeded[0])),
                     0, "step %d: the seeded call differs", step);
    }
    for (int step = 0; step < 3; step++) {
        vq_tensor_release(draws[step]);
        vq_tensor_release(seeded[step]);
    }
    vq_engine_free(e);
}
