/* libFuzzer target: untrusted program bytes through everything that reads
 * a program before it runs. vq_program_decode, then for a program that
 * decodes: vq_exec_prepare with block 0's unwritten vars as feeds and its
 * last op's outputs as fetches, the text dump, vq_append_backward on the
 * first float var of one element that some op writes, and the preparation
 * of the differentiated program. Each may refuse the program with an
 * error; a crash, a sanitizer report, a leak or a hang is a bug. Nothing
 * runs: a decoded loop may never end and a decoded shape may be huge.
 *
 * Built only in a clang build with -Dfuzz=true (tests/meson.build:
 * scripts/test.sh's build-asan); scripts/test.sh runs it on a fixed set of
 * inputs under "== fuzzers". With VARQ_FUZZ_SEEDS
 * set to a directory, it first writes seed programs there (a training
 * step, a cond and a while, each encoded as vq_program_save writes it):
 *
 *   VARQ_FUZZ_SEEDS=corpus build-asan/tests/fuzz_program corpus
 */
#include <varq/varq.h>

#include "../graph/graph_internal.h" /* the decoded program's vars and ops */

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define NAMES(...) ((const char *const[]){__VA_ARGS__})
#define COUNT(...) ((int)(sizeof((const char *const[]){__VA_ARGS__}) / sizeof(const char *)))
#define IN(...) NAMES(__VA_ARGS__), COUNT(__VA_ARGS__)

/* ---- seeds ---- */

static int seed_op(vq_program *p, int b, const char *type, const char *const *in, int nin,
                   const char *const *out, int nout, const vq_attr *attrs, int nattrs)
{
    int rc = vq_program_add_op(p, b, type, in, nin, out, nout, attrs, nattrs);
    return rc < 0 ? rc : 0;
}

/* loss = mean(relu(x @ w + b)) with w, b parameters, then one Adam step. */
static vq_program *seed_train(void)
{
    vq_program *p, *startup;
    if (vq_program_new(&p) || vq_program_new(&startup))
        return NULL;
    int64_t xs[2] = {-1, 4}, ws[2] = {4, 3}, bs[1] = {3}, hs[2] = {-1, 3};
    int rc = vq_program_add_var(p, 0, "x", VQ_F32, 2, xs, false);
    rc |= vq_program_add_var(p, 0, "w", VQ_F32, 2, ws, true);
    rc |= vq_program_add_var(p, 0, "b", VQ_F32, 1, bs, true);
    rc |= vq_program_add_var(p, 0, "xw", VQ_F32, 2, hs, false);
    rc |= vq_program_add_var(p, 0, "h", VQ_F32, 2, hs, false);
    rc |= vq_program_add_var(p, 0, "r", VQ_F32, 2, hs, false);
    rc |= vq_program_add_var(p, 0, "loss", VQ_F32, 0, NULL, false);
    rc |= seed_op(p, 0, "matmul", IN("x", "w"), IN("xw"), NULL, 0);
    rc |= seed_op(p, 0, "add", IN("xw", "b"), IN("h"), NULL, 0);
    rc |= seed_op(p, 0, "relu", IN("h"), IN("r"), NULL, 0);
    rc |= seed_op(p, 0, "mean", IN("r"), IN("loss"), NULL, 0);
    vq_optimizer opt = {.kind = VQ_OPT_ADAM, .learning_rate = 0.01};
    if (rc || vq_optimizer_minimize(p, startup, "loss", &opt) < 0) {
        vq_program_free(p);
        p = NULL;
    }
    vq_program_free(startup);
    return p;
}

/* y = cond(s > zero, then w * x, else x); loss = sum(y). */
static vq_program *seed_cond(void)
{
    vq_program *p;
    if (vq_program_new(&p))
        return NULL;
    int64_t s3[1] = {3};
    int rc = vq_program_add_var(p, 0, "x", VQ_F64, 1, s3, false);
    rc |= vq_program_add_var(p, 0, "w", VQ_F64, 1, s3, true);
    rc |= vq_program_add_var(p, 0, "s", VQ_F64, 0, NULL, false);
    rc |= vq_program_add_var(p, 0, "zero", VQ_F64, 0, NULL, false);
    rc |= vq_program_add_var(p, 0, "c", VQ_BOOL, 0, NULL, false);
    rc |= vq_program_add_var(p, 0, "y", VQ_F64, 1, s3, false);
    rc |= vq_program_add_var(p, 0, "loss", VQ_F64, 0, NULL, false);
    int tb = vq_program_add_block(p, 0), eb = vq_program_add_block(p, 0);
    rc |= tb < 0 || eb < 0;
    rc |= vq_program_add_var(p, tb, "t", VQ_F64, 1, s3, false);
    rc |= seed_op(p, tb, "mul", IN("w", "x"), IN("t"), NULL, 0);
    rc |= seed_op(p, 0, "greater", IN("s", "zero"), IN("c"), NULL, 0);
    vq_attr a[4] = {VQ_ATTR_I("then_block", tb), VQ_ATTR_I("else_block", eb),
                    VQ_ATTR_SS("then_outputs", NAMES("t"), 1),
                    VQ_ATTR_SS("else_outputs", NAMES("x"), 1)};
    rc |= seed_op(p, 0, "cond", IN("c", "x"), IN("y"), a, 4);
    rc |= seed_op(p, 0, "sum", IN("y"), IN("loss"), NULL, 0);
    if (rc) {
        vq_program_free(p);
        return NULL;
    }
    return p;
}

/* i = i0; while i < n: i = i + one; x = x * w + i; loss = sum(x). */
static vq_program *seed_while(void)
{
    vq_program *p;
    if (vq_program_new(&p))
        return NULL;
    int64_t s3[1] = {3};
    int rc = 0;
    const char *scalars[] = {"n", "one", "i0", "io"};
    for (int i = 0; i < 4; i++)
        rc |= vq_program_add_var(p, 0, scalars[i], VQ_F64, 0, NULL, false);
    rc |= vq_program_add_var(p, 0, "x", VQ_F64, 1, s3, false);
    rc |= vq_program_add_var(p, 0, "w", VQ_F64, 1, s3, true);
    rc |= vq_program_add_var(p, 0, "xo", VQ_F64, 1, s3, false);
    rc |= vq_program_add_var(p, 0, "c0", VQ_BOOL, 0, NULL, false);
    rc |= vq_program_add_var(p, 0, "loss", VQ_F64, 0, NULL, false);
    int b = vq_program_add_block(p, 0);
    rc |= b < 0;
    rc |= vq_program_add_var(p, b, "bx", VQ_F64, 1, s3, false);
    rc |= vq_program_add_var(p, b, "bi", VQ_F64, 0, NULL, false);
    rc |= vq_program_add_var(p, b, "bt", VQ_F64, 1, s3, false);
    rc |= vq_program_add_var(p, b, "bx2", VQ_F64, 1, s3, false);
    rc |= vq_program_add_var(p, b, "bi2", VQ_F64, 0, NULL, false);
    rc |= vq_program_add_var(p, b, "bc", VQ_BOOL, 0, NULL, false);
    rc |= seed_op(p, b, "add", IN("bi", "one"), IN("bi2"), NULL, 0);
    rc |= seed_op(p, b, "mul", IN("bx", "w"), IN("bt"), NULL, 0);
    rc |= seed_op(p, b, "add", IN("bt", "bi2"), IN("bx2"), NULL, 0);
    rc |= seed_op(p, b, "less", IN("bi2", "n"), IN("bc"), NULL, 0);
    rc |= seed_op(p, 0, "less", IN("i0", "n"), IN("c0"), NULL, 0);
    vq_attr a[5] = {VQ_ATTR_I("body_block", b), VQ_ATTR_SS("body_inputs", NAMES("bx", "bi"), 2),
                    VQ_ATTR_SS("body_outputs", NAMES("bx2", "bi2"), 2),
                    VQ_ATTR_S("body_cond", "bc"), VQ_ATTR_I("max_iters", 100)};
    rc |= seed_op(p, 0, "while", IN("c0", "x", "i0"), IN("xo", "io"), a, 5);
    rc |= seed_op(p, 0, "sum", IN("xo"), IN("loss"), NULL, 0);
    if (rc) {
        vq_program_free(p);
        return NULL;
    }
    return p;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *dir = getenv("VARQ_FUZZ_SEEDS");
    if (!dir)
        return 0;
    struct {
        const char *name;
        vq_program *(*build)(void);
    } seeds[] = {{"train", seed_train}, {"cond", seed_cond}, {"while", seed_while}};
    for (size_t i = 0; i < sizeof seeds / sizeof seeds[0]; i++) {
        vq_program *p = seeds[i].build();
        char path[4096];
        snprintf(path, sizeof path, "%s/%s.pb", dir, seeds[i].name);
        if (!p || vq_program_save(p, path) != 0)
            fprintf(stderr, "fuzz_program: seed %s: %s\n", seeds[i].name, vq_errmsg());
        vq_program_free(p);
    }
    return 0;
}

/* ---- the target ---- */

/* Block 0's vars that none of its ops writes (what a run would feed or find
 * in the scope), and the outputs of its last op. */
static void feeds_and_fetches(const vq_program *p, const char **feeds, int *nfeeds,
                              const char **fetches, int *nfetches)
{
    char *written = calloc((size_t)p->nvars + 1, 1);
    *nfeeds = *nfetches = 0;
    if (!written)
        return;
    const vq__block *b0 = &p->blocks[0];
    for (int k = 0; k < b0->nops; k++) {
        const vq__pop *op = &p->ops[b0->ops[k]];
        for (int j = 0; j < op->nout; j++)
            written[op->out[j]] = 1;
    }
    for (int v = 0; v < p->nvars; v++)
        if (p->vars[v].block == 0 && !written[v] && !p->vars[v].persistable)
            feeds[(*nfeeds)++] = p->vars[v].name;
    if (b0->nops > 0) {
        const vq__pop *last = &p->ops[b0->ops[b0->nops - 1]];
        for (int j = 0; j < last->nout; j++)
            fetches[(*nfetches)++] = p->vars[last->out[j]].name;
    }
    free(written);
}

/* The first float var of block 0 with one element that an op writes. */
static const char *loss_of(const vq_program *p)
{
    const vq__block *b0 = &p->blocks[0];
    for (int k = 0; k < b0->nops; k++) {
        const vq__pop *op = &p->ops[b0->ops[k]];
        for (int j = 0; j < op->nout; j++) {
            const vq__pvar *v = &p->vars[op->out[j]];
            bool one = true;
            for (int d = 0; d < v->ndim; d++)
                one &= v->shape[d] == 1;
            if ((v->dtype == VQ_F32 || v->dtype == VQ_F64) && one)
                return v->name;
        }
    }
    return NULL;
}

static void prepare(vq_exec *ex, vq_scope *s, const vq_program *p)
{
    const char **feeds = malloc(((size_t)p->nvars + 1) * sizeof *feeds);
    const char **fetches = malloc((VQ__MAX_SLOTS + (size_t)p->nvars + 1) * sizeof *fetches);
    int nfeeds = 0, nfetches = 0;
    if (feeds && fetches) {
        feeds_and_fetches(p, feeds, &nfeeds, fetches, &nfetches);
        (void)vq_exec_prepare(ex, p, s, feeds, nfeeds, fetches, nfetches);
    }
    free(feeds);
    free(fetches);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* One engine and executor for every input: they hold no state of a
     * program besides its cached plans. */
    static vq_engine *e;
    static vq_exec *ex;
    static vq_scope *s;
    if (!e) {
        vq_engine_opts o = {.kind = VQ_ENGINE_NAIVE};
        if (vq_engine_new(&e, &o) || vq_exec_new(&ex, e, &(vq_exec_opts){.cache_size = 1}) ||
            vq_scope_new(&s)) {
            fprintf(stderr, "fuzz_program: setup: %s\n", vq_errmsg());
            abort();
        }
    }
    vq_program *p = NULL;
    if (vq_program_decode(&p, data, size) != 0)
        return 0;
    prepare(ex, s, p);
    FILE *null = fopen("/dev/null", "w");
    if (null) {
        (void)vq_program_dump(p, null);
        fclose(null);
    }
    const char *loss = loss_of(p);
    if (loss && vq_append_backward(p, loss, NULL, 0) >= 0)
        prepare(ex, s, p);
    vq_program_free(p);
    return 0;
}
