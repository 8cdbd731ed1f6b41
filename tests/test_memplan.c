/* The executor's memory plan (graph/memplan.c): runs give the same bits
 * with and without it on programs with branches and parallel ops, on 1, 2
 * and 8 workers, synchronous and overlapping; values that may be live
 * together never share bytes (the plan's offsets against a brute-force
 * check over the ops' conflicts); fetched values survive; unknown shapes
 * and control flow fall back; a failed allocation anywhere, or a kernel
 * failing midway, leaves the executor usable and nothing leaked; a planned
 * run allocates no output. */
#include "../graph/memplan.h" /* vq__exec_memplan, the program's insides */
#include "fault.h"            /* vq__fault_arm */
#include "leakcheck.h"
#include "programs.h"

#include <criterion/criterion.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

TestSuite(memplan, .fini = leak_check);

enum { ROWS = 8, NARROW = 16, WIDE = 40, MAX_OPS = 400 };

static uint64_t seed_of(uint64_t i)
{
    const char *env = getenv("VARQ_TEST_SEED");
    return env ? strtoull(env, NULL, 0) + i : 0x9e3779b97f4a7c15u * (i + 1);
}

static uint32_t next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return (uint32_t)(*s >> 16);
}

/* A random program of branches: feed x [ROWS, NARROW]; each op reads one
 * or two earlier values of one shape (unary ops, add/mul, a matmul to the
 * other width through persistable weights); the last value and every
 * value no op reads are fetched, and one more in the middle. */
struct rand_prog {
    vq_program *p;
    int nvals;
    char names[MAX_OPS + 1][16];
    bool wide[MAX_OPS + 1];
    bool read[MAX_OPS + 1];
    const char *fetch[MAX_OPS + 1];
    int nfetch;
};

static void rand_prog_far(struct rand_prog *r, uint64_t seed, int nops, bool far)
{
    static const char *const unary[] = {"relu", "tanh", "sigmoid", "scale", "softmax", "exp"};
    memset(r, 0, sizeof *r);
    r->p = new_program();
    int64_t narrow[2] = {ROWS, NARROW}, wide[2] = {ROWS, WIDE};
    int64_t w_up[2] = {NARROW, WIDE}, w_down[2] = {WIDE, NARROW};
    var(r->p, "w_up", VQ_F32, 2, w_up, true);
    var(r->p, "w_down", VQ_F32, 2, w_down, true);
    strcpy(r->names[0], "x");
    var(r->p, "x", VQ_F32, 2, narrow, false);
    r->nvals = 1;
    for (int k = 0; k < nops; k++) {
        int a = (int)(next(&seed) % (unsigned)r->nvals);
        /* mostly recent values: long chains with branches off them */
        if (!far && next(&seed) % 4 && r->nvals > 3)
            a = r->nvals - 1 - (int)(next(&seed) % 3);
        char *out = r->names[r->nvals];
        snprintf(out, 16, "v%d", r->nvals);
        unsigned pick = next(&seed) % 8;
        bool wide_out = r->wide[a];
        if (pick < 4) {
            const char *type = unary[next(&seed) % 6];
            var(r->p, out, VQ_F32, 2, wide_out ? wide : narrow, false);
            vq_attr half[2] = {VQ_ATTR_F("scale", 0.5), VQ_ATTR_F("bias", 0.25)};
            op(r->p, type, NAMES(r->names[a]), 1, NAMES(out), 1, half,
               strcmp(type, "scale") ? 0 : 2);
        } else if (pick < 7) {
            int b = a;
            for (int tries = 0; tries < 8 && (b == a || r->wide[b] != r->wide[a]); tries++)
                b = (int)(next(&seed) % (unsigned)r->nvals);
            if (r->wide[b] != r->wide[a])
                b = a;
            var(r->p, out, VQ_F32, 2, wide_out ? wide : narrow, false);
            op(r->p, pick == 4 ? "mul" : "add", NAMES(r->names[a], r->names[b]), 2, NAMES(out), 1,
               NULL, 0);
            r->read[b] = true;
        } else {
            wide_out = !r->wide[a];
            var(r->p, out, VQ_F32, 2, wide_out ? wide : narrow, false);
            op(r->p, "matmul", NAMES(r->names[a], r->wide[a] ? "w_down" : "w_up"), 2, NAMES(out), 1,
               NULL, 0);
        }
        r->read[a] = true;
        r->wide[r->nvals++] = wide_out;
    }
    for (int v = 1; v < r->nvals; v++)
        if (!r->read[v] || v == r->nvals - 1 || v == r->nvals / 2)
            r->fetch[r->nfetch++] = r->names[v];
}

static void rand_prog(struct rand_prog *r, uint64_t seed, int nops)
{
    rand_prog_far(r, seed, nops, false);
}

static vq_tensor *filled(int64_t rows, int64_t cols, uint64_t seed)
{
    int64_t shape[2] = {rows, cols};
    float *d = malloc((size_t)(rows * cols) * sizeof *d);
    for (int64_t i = 0; i < rows * cols; i++)
        d[i] = (float)((int)(next(&seed) % 2001) - 1000) / 1000.0f;
    vq_tensor *t;
    cr_assert_eq(vq_tensor_from(&t, VQ_F32, 2, shape, d), 0);
    free(d);
    return t;
}

struct world {
    vq_engine *e;
    vq_exec *ex;
    vq_scope *s;
};

static struct world world(int workers, unsigned flags)
{
    struct world w;
    vq_engine_opts eo = {.kind = VQ_ENGINE_THREADED, .cpu_workers = workers};
    cr_assert_eq(vq_engine_new(&w.e, &eo), 0, "%s", vq_errmsg());
    vq_exec_opts xo = {.flags = flags};
    cr_assert_eq(vq_exec_new(&w.ex, w.e, &xo), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_scope_new(&w.s), 0);
    vq_tensor *up = filled(NARROW, WIDE, 11), *down = filled(WIDE, NARROW, 12);
    cr_assert_eq(vq_scope_set(w.s, "w_up", up), 0);
    cr_assert_eq(vq_scope_set(w.s, "w_down", down), 0);
    vq_tensor_release(up);
    vq_tensor_release(down);
    return w;
}

static void world_free(struct world *w)
{
    vq_exec_free(w->ex);
    vq_scope_free(w->s);
    vq_engine_free(w->e);
}

static size_t arena_of(vq_exec *ex)
{
    vq_exec_stats st;
    cr_assert_eq(vq_exec_get_stats(ex, &st), 0);
    return st.last_arena_bytes;
}

static void run_fetch(struct world *w, struct rand_prog *r, vq_tensor *x, vq_fetch *f)
{
    vq_feed feed = {"x", x};
    for (int i = 0; i < r->nfetch; i++)
        f[i] = (vq_fetch){r->fetch[i], NULL};
    cr_assert_eq(vq_exec_run(w->ex, r->p, w->s, &feed, 1, f, r->nfetch), 0, "%s", vq_errmsg());
}

static void fetches_release(vq_fetch *f, int n)
{
    for (int i = 0; i < n; i++)
        vq_tensor_release(f[i].tensor);
}

struct async_run {
    vq_fetch f[MAX_OPS + 1];
    atomic_int *left;
    int err;
};

static void async_done(void *user, int err)
{
    struct async_run *a = user;
    a->err = err;
    atomic_fetch_sub(a->left, 1);
}

Test(memplan, runs_give_the_same_bits_with_and_without_the_plan)
{
    for (uint64_t c = 0; c < 6; c++) {
        uint64_t seed = seed_of(c);
        struct rand_prog r;
        rand_prog(&r, seed, 12 + (int)(c * 9));
        vq_tensor *x = filled(ROWS, NARROW, seed);
        struct world ref = world(1, VQ_EXEC_NO_MEMPLAN);
        vq_fetch want[MAX_OPS + 1];
        run_fetch(&ref, &r, x, want);
        cr_assert_eq(arena_of(ref.ex), 0, "seed %#llx: VQ_EXEC_NO_MEMPLAN planned",
                     (unsigned long long)seed);
        static const int workers[] = {1, 2, 8};
        for (int wi = 0; wi < 3; wi++) {
            struct world w = world(workers[wi], 0);
            for (int rep = 0; rep < 4; rep++) {
                vq_fetch got[MAX_OPS + 1];
                run_fetch(&w, &r, x, got);
                cr_assert_gt(arena_of(w.ex), 0, "seed %#llx: nothing planned",
                             (unsigned long long)seed);
                for (int i = 0; i < r.nfetch; i++)
                    assert_same_bits(got[i].tensor, want[i].tensor);
                fetches_release(got, r.nfetch);
            }
            /* runs in flight together: each takes its own arena */
            enum { INFLIGHT = 6 };
            static struct async_run runs[INFLIGHT];
            atomic_int left = INFLIGHT;
            vq_feed feed = {"x", x};
            for (int k = 0; k < INFLIGHT; k++) {
                runs[k].left = &left;
                runs[k].err = -1;
                for (int i = 0; i < r.nfetch; i++)
                    runs[k].f[i] = (vq_fetch){r.fetch[i], NULL};
                cr_assert_eq(vq_exec_run_async(w.ex, r.p, w.s, &feed, 1, runs[k].f, r.nfetch,
                                               async_done, &runs[k]),
                             0, "%s", vq_errmsg());
            }
            while (atomic_load(&left) > 0)
                sched_yield();
            for (int k = 0; k < INFLIGHT; k++) {
                cr_assert_eq(runs[k].err, 0);
                for (int i = 0; i < r.nfetch; i++)
                    assert_same_bits(runs[k].f[i].tensor, want[i].tensor);
                fetches_release(runs[k].f, r.nfetch);
            }
            world_free(&w);
        }
        fetches_release(want, r.nfetch);
        vq_tensor_release(x);
        world_free(&ref);
        vq_program_free(r.p);
    }
}

/* Brute force: op j follows op i (i < j) when some var both name and one
 * of them writes, closed transitively; the engine orders exactly these. */
static void brute_ancestors(const struct rand_prog *r, int nops, bool anc[MAX_OPS][MAX_OPS],
                            int reads[MAX_OPS][2], int nread[MAX_OPS], int writes[MAX_OPS])
{
    for (int j = 0; j < nops; j++)
        for (int i = 0; i < j; i++) {
            bool conflict = false;
            for (int a = 0; a < nread[j]; a++)
                conflict |= reads[j][a] == writes[i];
            for (int a = 0; a < nread[i]; a++)
                conflict |= reads[i][a] == writes[j];
            conflict |= writes[i] == writes[j];
            anc[j][i] = conflict;
        }
    for (int j = 0; j < nops; j++)
        for (int i = j - 1; i >= 0; i--)
            if (anc[j][i])
                for (int h = 0; h < i; h++)
                    anc[j][h] |= anc[i][h];
    (void)r;
}

/* Prepares r and checks every pair of planned values whose bytes overlap
 * against the brute-force order. */
static void check_offsets(struct rand_prog *r, int nops, uint64_t seed)
{
    struct world w = world(2, 0);
    cr_assert_eq(vq_exec_prepare(w.ex, r->p, w.s, NAMES("x"), 1, r->fetch, r->nfetch), 0, "%s",
                 vq_errmsg());
    int nvars = r->p->nvars;
    static int64_t off[MAX_OPS + 8];
    static size_t size[MAX_OPS + 8];
    size_t arena;
    int planned = vq__exec_memplan(w.ex, nvars, off, size, &arena);
    cr_assert_gt(planned, 0, "seed %#llx: nothing planned", (unsigned long long)seed);
    /* op k writes value k + 1; program var of value v */
    static int var_of[MAX_OPS + 1], reads[MAX_OPS][2], nread[MAX_OPS], writes[MAX_OPS];
    for (int v = 0; v < r->nvals; v++)
        var_of[v] = vq__program_find_var(r->p, r->names[v]);
    for (int k = 0; k < nops; k++) {
        const vq__pop *o = &r->p->ops[r->p->blocks[0].ops[k]];
        nread[k] = 0;
        for (int i = 0; i < o->nin && i < 2; i++)
            reads[k][nread[k]++] = o->in[i];
        writes[k] = var_of[k + 1];
    }
    static bool anc[MAX_OPS][MAX_OPS];
    memset(anc, 0, sizeof anc);
    brute_ancestors(r, nops, anc, reads, nread, writes);
    size_t total = 0, end = 0;
    for (int a = 1; a < r->nvals; a++) {
        int va = var_of[a];
        if (off[va] < 0)
            continue;
        cr_assert_eq(off[va] % 64, 0);
        total += size[va];
        if ((size_t)off[va] + size[va] > end)
            end = (size_t)off[va] + size[va];
        for (int b = a + 1; b < r->nvals; b++) {
            int vb = var_of[b];
            if (off[vb] < 0 || off[va] + (int64_t)size[va] <= off[vb] ||
                off[vb] + (int64_t)size[vb] <= off[va])
                continue;
            /* a is written first (op a - 1); b by op b - 1: every use of
             * a must precede it in the engine's order, or b is written
             * over a in place by a's last reader */
            int wb = b - 1;
            bool ok = true, in_place = false, used = false;
            for (int k = 0; k < nops; k++)
                for (int i = 0; i < nread[k]; i++)
                    if (reads[k][i] == va) {
                        used = true;
                        if (k == wb)
                            in_place = true;
                        else if (!anc[wb][k])
                            ok = false;
                    }
            if (!used)
                ok = anc[wb][a - 1];
            if (in_place)
                ok = ok && off[va] == off[vb] && size[va] == size[vb];
            cr_assert(ok,
                      "seed %#llx: %s [%lld, +%zu) and %s [%lld, +%zu) overlap, "
                      "and may be live together",
                      (unsigned long long)seed, r->names[a], (long long)off[va], size[va],
                      r->names[b], (long long)off[vb], size[vb]);
        }
    }
    cr_assert_leq(end, arena);
    cr_log_info("%d ops: %d values planned, %zu bytes in an arena of %zu", nops, planned, total,
                arena);
    world_free(&w);
}

Test(memplan, values_that_may_be_live_together_never_share_bytes)
{
    for (uint64_t c = 0; c < 40; c++) {
        uint64_t seed = seed_of(100 + c), s = seed;
        struct rand_prog r;
        int nops = 8 + (int)(next(&s) % 56);
        rand_prog(&r, s, nops);
        check_offsets(&r, nops, seed);
        vq_program_free(r.p);
    }
}

/* Values read far later (each op reads any earlier value): many live
 * together, and past the planner's budget of lookups the rest go past
 * the others. */
Test(memplan, many_values_live_together_still_never_share_bytes)
{
    for (uint64_t c = 0; c < 3; c++) {
        uint64_t seed = seed_of(200 + c);
        struct rand_prog r;
        rand_prog_far(&r, seed, MAX_OPS - 20, true);
        check_offsets(&r, MAX_OPS - 20, seed);
        vq_program_free(r.p);
    }
}

/* A chain reuses: 200 temporaries of 4 KiB fit a few blocks, and a run
 * allocates only its fetch. */
Test(memplan, a_chain_needs_a_few_blocks_and_a_run_allocates_only_its_fetch)
{
    vq_program *p = new_program();
    int64_t s[1] = {1024};
    char name[16], prev[16] = "t0";
    var(p, "t0", VQ_F32, 1, s, false);
    for (int i = 1; i <= 200; i++) {
        snprintf(name, sizeof name, "t%d", i);
        var(p, name, VQ_F32, 1, s, false);
        vq_attr ab[2] = {VQ_ATTR_F("scale", 1.0), VQ_ATTR_F("bias", 1.0)};
        op(p, i % 2 ? "scale" : "relu", NAMES(prev), 1, NAMES(name), 1, ab, i % 2 ? 2 : 0);
        strcpy(prev, name);
    }
    struct world w = world(2, 0);
    float zeros[1024] = {0};
    vq_tensor *t0;
    cr_assert_eq(vq_tensor_from(&t0, VQ_F32, 1, s, zeros), 0);
    vq_feed feed = {"t0", t0};
    vq_fetch f = {"t200", NULL};
    cr_assert_eq(vq_exec_run(w.ex, p, w.s, &feed, 1, &f, 1), 0, "%s", vq_errmsg());
    vq_tensor_release(f.tensor);
    size_t arena = arena_of(w.ex);
    cr_assert_gt(arena, 0);
    cr_assert_leq(arena, 2 * 4096, "an arena of %zu bytes for a chain", arena);
    vq_mem_stats before, after;
    cr_assert_eq(vq_mem_get_stats((vq_ctx){VQ_DEV_CPU, 0}, &before), 0);
    cr_assert_eq(vq_exec_run(w.ex, p, w.s, &feed, 1, &f, 1), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_mem_get_stats((vq_ctx){VQ_DEV_CPU, 0}, &after), 0);
    cr_assert_eq(((float *)vq_tensor_data(f.tensor))[5], 100.0f);
    cr_assert_leq(after.allocs - before.allocs, 1, "%llu allocations in a planned run",
                  (unsigned long long)(after.allocs - before.allocs));
    vq_tensor_release(f.tensor);
    vq_tensor_release(t0);
    world_free(&w);
    vq_program_free(p);
}

Test(memplan, fetched_values_survive_later_runs)
{
    struct rand_prog r;
    rand_prog(&r, seed_of(7), 30);
    vq_tensor *x = filled(ROWS, NARROW, 1), *x2 = filled(ROWS, NARROW, 2);
    struct world w = world(2, 0);
    vq_fetch first[MAX_OPS + 1], second[MAX_OPS + 1], again[MAX_OPS + 1];
    run_fetch(&w, &r, x, first);
    /* copies of the first run's fetches, then runs on other data */
    vq_tensor *keep[MAX_OPS + 1];
    for (int i = 0; i < r.nfetch; i++) {
        const vq_tensor *t = first[i].tensor;
        cr_assert_eq(vq_tensor_from(&keep[i], VQ_F32, vq_tensor_ndim(t), vq_tensor_shape(t),
                                    vq_tensor_data(first[i].tensor)),
                     0);
    }
    for (int k = 0; k < 3; k++) {
        run_fetch(&w, &r, x2, second);
        fetches_release(second, r.nfetch);
    }
    for (int i = 0; i < r.nfetch; i++)
        assert_same_bits(first[i].tensor, keep[i]);
    run_fetch(&w, &r, x, again);
    for (int i = 0; i < r.nfetch; i++)
        assert_same_bits(again[i].tensor, keep[i]);
    fetches_release(first, r.nfetch);
    fetches_release(again, r.nfetch);
    for (int i = 0; i < r.nfetch; i++)
        vq_tensor_release(keep[i]);
    vq_tensor_release(x);
    vq_tensor_release(x2);
    world_free(&w);
    vq_program_free(r.p);
}

/* A batch the program leaves open: shapes known only at run time, nothing
 * planned; a while loop in block 0: nothing planned. */
Test(memplan, unknown_shapes_and_control_flow_fall_back)
{
    vq_program *p = mlp_program();
    vq_engine *e;
    vq_engine_opts eo = {.kind = VQ_ENGINE_THREADED, .cpu_workers = 2};
    cr_assert_eq(vq_engine_new(&e, &eo), 0);
    vq_exec *ex;
    cr_assert_eq(vq_exec_new(&ex, e, NULL), 0);
    vq_scope *s;
    cr_assert_eq(vq_scope_new(&s), 0);
    int64_t ws[2] = {5, 3}, bs[1] = {3}, xs[2] = {4, 5};
    double wd[15], bd[3] = {0.1, 0.2, 0.3}, xd[20];
    for (int i = 0; i < 15; i++)
        wd[i] = i * 0.1 - 0.7;
    for (int i = 0; i < 20; i++)
        xd[i] = i * 0.05 - 0.5;
    vq_tensor *w, *b, *x;
    cr_assert_eq(vq_tensor_from(&w, VQ_F64, 2, ws, wd), 0);
    cr_assert_eq(vq_tensor_from(&b, VQ_F64, 1, bs, bd), 0);
    cr_assert_eq(vq_tensor_from(&x, VQ_F64, 2, xs, xd), 0);
    cr_assert_eq(vq_scope_set(s, "w", w), 0);
    cr_assert_eq(vq_scope_set(s, "b", b), 0);
    vq_feed feed = {"x", x};
    vq_fetch f = {"y", NULL};
    cr_assert_eq(vq_exec_run(ex, p, s, &feed, 1, &f, 1), 0, "%s", vq_errmsg());
    cr_assert_eq(arena_of(ex), 0);
    double sum = 0;
    for (int i = 0; i < 12; i++)
        sum += ((double *)vq_tensor_data(f.tensor))[i];
    cr_assert_float_eq(sum, 4.0, 1e-12, "softmax rows sum to 1");
    vq_tensor_release(f.tensor);
    vq_program_free(p);

    /* a while op in block 0 */
    p = new_program();
    int b0 = new_block(p, 0);
    int64_t four[1] = {4};
    var(p, "x", VQ_F32, 1, four, false);
    var(p, "y", VQ_F32, 1, four, false);
    var(p, "i0", VQ_F32, 0, NULL, false);
    var(p, "n", VQ_F32, 0, NULL, false);
    var(p, "one", VQ_F32, 0, NULL, false);
    var(p, "c0", VQ_BOOL, 0, NULL, false);
    var(p, "xo", VQ_F32, 1, four, false);
    var(p, "io", VQ_F32, 0, NULL, false);
    cr_assert_eq(vq_program_add_var(p, b0, "bx", VQ_F32, 1, four, false), 0);
    cr_assert_eq(vq_program_add_var(p, b0, "bx2", VQ_F32, 1, four, false), 0);
    cr_assert_eq(vq_program_add_var(p, b0, "bi", VQ_F32, 0, NULL, false), 0);
    cr_assert_eq(vq_program_add_var(p, b0, "bi2", VQ_F32, 0, NULL, false), 0);
    cr_assert_eq(vq_program_add_var(p, b0, "bc", VQ_BOOL, 0, NULL, false), 0);
    vq_attr dbl[1] = {VQ_ATTR_F("scale", 2.0)};
    cr_assert_geq(vq_program_add_op(p, b0, "scale", NAMES("bx"), 1, NAMES("bx2"), 1, dbl, 1), 0);
    cr_assert_geq(vq_program_add_op(p, b0, "add", NAMES("bi", "one"), 2, NAMES("bi2"), 1, NULL, 0),
                  0);
    cr_assert_geq(vq_program_add_op(p, b0, "less", NAMES("bi2", "n"), 2, NAMES("bc"), 1, NULL, 0),
                  0);
    op(p, "relu", NAMES("x"), 1, NAMES("y"), 1, NULL, 0);
    op(p, "less", NAMES("i0", "n"), 2, NAMES("c0"), 1, NULL, 0);
    vq_attr a[5] = {VQ_ATTR_I("body_block", b0), VQ_ATTR_SS("body_inputs", NAMES("bx", "bi"), 2),
                    VQ_ATTR_SS("body_outputs", NAMES("bx2", "bi2"), 2),
                    VQ_ATTR_S("body_cond", "bc"), VQ_ATTR_I("max_iters", -1)};
    op(p, "while", NAMES("c0", "y", "i0"), 3, NAMES("xo", "io"), 2, a, 5);
    float xv[4] = {1, -2, 3, -4}, zero = 0, three = 3, onev = 1;
    vq_tensor *xf, *ti, *tn, *t1;
    cr_assert_eq(vq_tensor_from(&xf, VQ_F32, 1, four, xv), 0);
    cr_assert_eq(vq_tensor_from(&ti, VQ_F32, 0, NULL, &zero), 0);
    cr_assert_eq(vq_tensor_from(&tn, VQ_F32, 0, NULL, &three), 0);
    cr_assert_eq(vq_tensor_from(&t1, VQ_F32, 0, NULL, &onev), 0);
    vq_feed feeds[4] = {{"x", xf}, {"i0", ti}, {"n", tn}, {"one", t1}};
    f = (vq_fetch){"xo", NULL};
    cr_assert_eq(vq_exec_run(ex, p, s, feeds, 4, &f, 1), 0, "%s", vq_errmsg());
    cr_assert_eq(arena_of(ex), 0);
    cr_assert_eq(((float *)vq_tensor_data(f.tensor))[2], 24.0f);
    vq_tensor_release(f.tensor);
    vq_tensor_release(ti);
    vq_tensor_release(tn);
    vq_tensor_release(t1);
    vq_tensor_release(xf);
    vq_program_free(p);
    vq_tensor_release(w);
    vq_tensor_release(b);
    vq_tensor_release(x);
    vq_scope_free(s);
    vq_exec_free(ex);
    vq_engine_free(e);
}

enum { FAULT_SURVIVED = 10, FAULT_REPORTED, FAULT_NOT_REACHED, FAULT_BAD };

/* In a child: the n-th allocation of the first run (preparation, the
 * arena, the run's own) fails; the run returns 0 with the right bits or
 * VQ_ENOMEM with a message, the next run is right, and nothing leaks. */
static void fault_child(struct rand_prog *r, vq_tensor *x, vq_fetch *want, long n)
{
    alarm(30);
    struct world w = world(2, 0);
    vq_feed feed = {"x", x};
    vq_fetch got[MAX_OPS + 1];
    for (int i = 0; i < r->nfetch; i++)
        got[i] = (vq_fetch){r->fetch[i], NULL};
    vq__fault_arm(n);
    int rc = vq_exec_run(w.ex, r->p, w.s, &feed, 1, got, r->nfetch);
    bool fired = vq__fault_fired();
    vq__fault_arm(0);
    int what = !fired ? FAULT_NOT_REACHED : rc == 0 ? FAULT_SURVIVED : FAULT_REPORTED;
    if (rc != 0 && (rc != VQ_ENOMEM || !vq_errmsg()[0])) {
        fprintf(stderr, "N=%ld: the run returned %d (%s)\n", n, rc, vq_errmsg());
        _exit(FAULT_BAD);
    }
    for (int i = 0; rc == 0 && i < r->nfetch; i++)
        if (memcmp(vq_tensor_data(got[i].tensor), vq_tensor_data(want[i].tensor),
                   vq_tensor_nbytes(want[i].tensor))) {
            fprintf(stderr, "N=%ld: fetch %s differs\n", n, r->fetch[i]);
            _exit(FAULT_BAD);
        }
    fetches_release(got, r->nfetch);
    run_fetch(&w, r, x, got);
    for (int i = 0; i < r->nfetch; i++)
        if (memcmp(vq_tensor_data(got[i].tensor), vq_tensor_data(want[i].tensor),
                   vq_tensor_nbytes(want[i].tensor))) {
            fprintf(stderr, "N=%ld: the next run's fetch %s differs\n", n, r->fetch[i]);
            _exit(FAULT_BAD);
        }
    fetches_release(got, r->nfetch);
    fetches_release(want, r->nfetch);
    vq_tensor_release(x);
    world_free(&w);
    vq_program_free(r->p);
    leak_check();
    _exit(what);
}

Test(memplan, a_failed_allocation_anywhere_leaves_nothing_leaked)
{
    struct rand_prog r;
    rand_prog(&r, seed_of(3), 16);
    vq_tensor *x = filled(ROWS, NARROW, 5);
    struct world ref = world(1, VQ_EXEC_NO_MEMPLAN);
    vq_fetch want[MAX_OPS + 1];
    run_fetch(&ref, &r, x, want);
    world_free(&ref);
    int seen[FAULT_BAD + 1] = {0};
    long n;
    for (n = 1; n < 3000; n++) {
        pid_t pid = fork();
        cr_assert_geq(pid, 0);
        if (pid == 0)
            fault_child(&r, x, want, n);
        int status;
        cr_assert_eq(waitpid(pid, &status, 0), pid);
        cr_assert(WIFEXITED(status), "N=%ld: the child died (signal %d)", n, WTERMSIG(status));
        int what = WEXITSTATUS(status);
        cr_assert(what >= FAULT_SURVIVED && what < FAULT_BAD, "N=%ld: exit %d (see above)", n,
                  what);
        seen[what]++;
        if (what == FAULT_NOT_REACHED)
            break;
    }
    cr_assert_eq(seen[FAULT_NOT_REACHED], 1, "the run makes over %ld allocations", n);
    cr_log_info("%ld allocations: %d survived, %d reported", n - 1, seen[FAULT_SURVIVED],
                seen[FAULT_REPORTED]);
    fetches_release(want, r.nfetch);
    vq_tensor_release(x);
    vq_program_free(r.p);
}

/* A kernel failing midway (VQ_EXEC_CHECK_NAN finds the NaN a log of a
 * negative number makes): the ops after it skip, the run fails naming the
 * op, and the next run, on the same arena, is right. */
Test(memplan, a_run_failing_midway_leaves_its_arena_for_the_next)
{
    vq_program *p = new_program();
    int64_t s[1] = {256};
    var(p, "x", VQ_F32, 1, s, false);
    var(p, "a", VQ_F32, 1, s, false);
    var(p, "b", VQ_F32, 1, s, false);
    var(p, "c", VQ_F32, 1, s, false);
    var(p, "d", VQ_F32, 1, s, false);
    vq_attr half[1] = {VQ_ATTR_F("scale", 0.5)};
    op(p, "scale", NAMES("x"), 1, NAMES("a"), 1, half, 1);
    op(p, "log", NAMES("a"), 1, NAMES("b"), 1, NULL, 0);
    op(p, "exp", NAMES("b"), 1, NAMES("c"), 1, NULL, 0);
    op(p, "add", NAMES("c", "a"), 2, NAMES("d"), 1, NULL, 0);
    setenv("VARQ_OPT", "0", 1); /* the ops as written, not one fused_elementwise */
    struct world w = world(2, VQ_EXEC_CHECK_NAN);
    unsetenv("VARQ_OPT");
    float neg[256], pos[256];
    for (int i = 0; i < 256; i++) {
        neg[i] = -1.0f - (float)i;
        pos[i] = 2.0f + (float)i;
    }
    vq_tensor *xn, *xp;
    cr_assert_eq(vq_tensor_from(&xn, VQ_F32, 1, s, neg), 0);
    cr_assert_eq(vq_tensor_from(&xp, VQ_F32, 1, s, pos), 0);
    for (int round = 0; round < 3; round++) {
        vq_feed feed = {"x", xn};
        vq_fetch f = {"d", NULL};
        cr_assert_eq(vq_exec_run(w.ex, p, w.s, &feed, 1, &f, 1), VQ_EIO);
        cr_assert(strstr(vq_errmsg(), "op 1 (log)"), "%s", vq_errmsg());
        cr_assert_null(f.tensor);
        feed.tensor = xp;
        cr_assert_eq(vq_exec_run(w.ex, p, w.s, &feed, 1, &f, 1), 0, "%s", vq_errmsg());
        cr_assert_gt(arena_of(w.ex), 0);
        const float *d = vq_tensor_data(f.tensor);
        for (int i = 0; i < 256; i++)
            cr_assert_float_eq(d[i], pos[i], 1e-4f * pos[i], "d[%d] = %g", i, d[i]);
        vq_tensor_release(f.tensor);
    }
    vq_tensor_release(xn);
    vq_tensor_release(xp);
    world_free(&w);
    vq_program_free(p);
}
