/* onnx_time: the time of each inference of an ONNX model in varq, for
 * bench/models_vs_ort.py, which sets it beside ONNX Runtime
 * (bench/ort_peer.mjs) and PyTorch. `varq run --repeat` prints only the
 * mean over its runs, which one run slowed down by a busy neighbour on a
 * shared machine moves; this times every run, and prints the median and
 * the spread in the same one-line format as ort_peer.mjs. Public API only
 * (the import, the scope, the executor), as `varq run` does it.
 *
 * usage: onnx_time MODEL.onnx --feed NAME=X.npy ... --fetch NAME[=Y.npy] ...
 *          [--workers N] [--warmup W] [--repeat R]
 * Output (stdout, one line):
 *   varq_peer runs=R median_ms= min_ms= max_ms= p10_ms= p90_ms= mean_ms=
 *             load_ms= peak_rss_kb=
 * load_ms is the import; peak_rss_kb the process's VmHWM at the end. A
 * fetch with a file is written from the last run. Exit 0, 1 on a failure
 * (one line "onnx_time: ..." on stderr), 2 on bad usage. */
#include <varq/engine.h>
#include <varq/error.h>
#include <varq/graph.h>
#include <varq/onnx.h>
#include <varq/tensor.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_BINDINGS 16

struct binding {
    char name[256];
    const char *file; /* into argv; NULL: a fetch only timed */
};

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static long vm_hwm_kb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = 0;
    while (f != NULL && fgets(line, sizeof line, f) != NULL)
        if (strncmp(line, "VmHWM:", 6) == 0)
            kb = strtol(line + 6, NULL, 10);
    if (f != NULL)
        fclose(f);
    return kb;
}

static bool parse_binding(const char *s, bool file_needed, struct binding *b)
{
    const char *eq = strchr(s, '=');
    size_t len = eq ? (size_t)(eq - s) : strlen(s);
    if (len == 0 || len >= sizeof b->name || (eq == NULL && file_needed) ||
        (eq != NULL && eq[1] == '\0'))
        return false;
    memcpy(b->name, s, len);
    b->name[len] = '\0';
    b->file = eq ? eq + 1 : NULL;
    return true;
}

static int usage(const char *why)
{
    fprintf(stderr,
            "onnx_time: %s\nusage: onnx_time MODEL.onnx --feed NAME=X.npy ... --fetch "
            "NAME[=Y.npy] ... [--workers N] [--warmup W] [--repeat R]\n",
            why);
    return 2;
}

static int failed(int rc, const char *what)
{
    fprintf(stderr, "onnx_time: %s: %s (%d)\n", what, vq_errmsg(), rc);
    return 1;
}

/* Everything main acquires, released in one place on every path. */
struct state {
    vq_scope *scope;
    vq_program *program;
    vq_engine *engine;
    vq_exec *exec;
    vq_feed feeds[MAX_BINDINGS];
    vq_fetch fetches[MAX_BINDINGS];
    int nfeeds, nfetches;
    double *times;
};

static void release_fetches(struct state *s)
{
    for (int i = 0; i < s->nfetches; i++) {
        vq_tensor_release(s->fetches[i].tensor);
        s->fetches[i].tensor = NULL;
    }
}

static int run(int argc, char **argv, struct state *s)
{
    static struct binding feeds[MAX_BINDINGS], fetches[MAX_BINDINGS];
    long workers = 0, warmup = 3, repeat = 20;
    const char *model = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (a[0] != '-') {
            if (model != NULL)
                return usage("one model only");
            model = a;
            continue;
        }
        if (i + 1 >= argc)
            return usage("an option without its value");
        const char *v = argv[++i];
        if (strcmp(a, "--feed") == 0 || strcmp(a, "--fetch") == 0) {
            bool feed = a[2] == 'f' && a[3] == 'e' && a[4] == 'e';
            int *n = feed ? &s->nfeeds : &s->nfetches;
            struct binding *b = feed ? feeds : fetches;
            if (*n == MAX_BINDINGS || !parse_binding(v, feed, &b[*n]))
                return usage("a bad --feed or --fetch");
            (*n)++;
        } else if (strcmp(a, "--workers") == 0) {
            workers = strtol(v, NULL, 10);
        } else if (strcmp(a, "--warmup") == 0) {
            warmup = strtol(v, NULL, 10);
        } else if (strcmp(a, "--repeat") == 0) {
            repeat = strtol(v, NULL, 10);
        } else {
            return usage("an unknown option");
        }
    }
    if (model == NULL || s->nfetches == 0 || repeat < 1 || warmup < 0 || workers < 0)
        return usage("a model, a --fetch, --repeat >= 1 are needed");

    int rc = vq_scope_new(&s->scope);
    if (rc != 0)
        return failed(rc, "creating the scope");
    vq_onnx_value offers[MAX_BINDINGS];
    for (int i = 0; i < s->nfeeds; i++) {
        s->feeds[i].name = feeds[i].name;
        if ((rc = vq_npy_load(feeds[i].file, &s->feeds[i].tensor)) != 0) {
            s->nfeeds = i;
            return failed(rc, "loading a feed");
        }
        offers[i] = (vq_onnx_value){.name = feeds[i].name, .tensor = s->feeds[i].tensor};
    }
    /* As `varq run` imports it: the feeds offered, so that shapes computed
     * from an input's dims specialize on the value fed. */
    vq_onnx_opts oo = {.values = offers, .nvalues = s->nfeeds};
    double t0 = now_ms();
    if ((rc = vq_program_from_onnx_file_opts(&s->program, s->scope, model, &oo)) != 0)
        return failed(rc, "importing the model");
    double load_ms = now_ms() - t0;
    for (int i = 0; i < s->nfetches; i++)
        s->fetches[i].name = fetches[i].name;

    vq_engine_opts eo = {.kind = VQ_ENGINE_THREADED, .cpu_workers = (int)workers};
    if ((rc = vq_engine_new(&s->engine, &eo)) != 0)
        return failed(rc, "starting the engine");
    vq_exec_opts xo = {.device = {VQ_DEV_CPU, 0}};
    if ((rc = vq_exec_new(&s->exec, s->engine, &xo)) != 0)
        return failed(rc, "creating the executor");
    s->times = calloc((size_t)repeat, sizeof *s->times);
    if (s->times == NULL)
        return failed(VQ_ENOMEM, "allocating the times");

    for (long r = 0; r < warmup + repeat; r++) {
        /* The previous run's fetches are let go of outside the timed
         * span, as a caller reusing them would. */
        release_fetches(s);
        double t = now_ms();
        rc = vq_exec_run(s->exec, s->program, s->scope, s->feeds, s->nfeeds, s->fetches,
                         s->nfetches);
        t = now_ms() - t;
        if (rc != 0)
            return failed(rc, "running the model");
        if (r >= warmup)
            s->times[r - warmup] = t;
    }
    for (int i = 0; i < s->nfetches; i++)
        if (fetches[i].file != NULL &&
            (rc = vq_npy_save(fetches[i].file, s->fetches[i].tensor)) != 0)
            return failed(rc, "writing a fetch");

    double sum = 0;
    for (long i = 0; i < repeat; i++)
        sum += s->times[i];
    qsort(s->times, (size_t)repeat, sizeof *s->times, cmp_double);
    /* the same nearest-rank quantiles as ort_peer.mjs */
#define Q(p) s->times[(long)((p) * (double)(repeat - 1) + 0.5)]
    printf("varq_peer runs=%ld median_ms=%.4f min_ms=%.4f max_ms=%.4f p10_ms=%.4f "
           "p90_ms=%.4f mean_ms=%.4f load_ms=%.1f peak_rss_kb=%ld\n",
           repeat, Q(0.5), s->times[0], s->times[repeat - 1], Q(0.1), Q(0.9), sum / (double)repeat,
           load_ms, vm_hwm_kb());
#undef Q
    return 0;
}

int main(int argc, char **argv)
{
    struct state s = {0};
    int status = run(argc, argv, &s);
    release_fetches(&s);
    for (int i = 0; i < s.nfeeds; i++)
        vq_tensor_release(s.feeds[i].tensor);
    /* the order of `varq run`'s cleanup */
    vq_scope_free(s.scope);
    vq_exec_free(s.exec);
    vq_engine_free(s.engine);
    vq_program_free(s.program);
    free(s.times);
    return status;
}
