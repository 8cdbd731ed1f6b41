/* varq: the command-line tool.
 *
 * It shows a saved program (`varq dump prog.pb`), lists the registered ops
 * (`varq ops`) and the ONNX ops the importer translates (`varq onnx-ops`),
 * also as the Markdown pages docs/reference/ holds (`--markdown`:
 * scripts/gen_docs.sh writes them and checks they are current), lists the
 * op types a model uses, marked translated or not (`varq onnx-ops
 * model.onnx`),
 * turns an ONNX model into a saved program and its parameters (`varq
 * import model.onnx -o model.pb --save-scope params/`), and runs a
 * program's main block, or an ONNX model, on a threaded engine
 * (`varq run prog.pb --feed x=x.npy --fetch y=y.npy --scope params/`):
 * feeds come from .npy files, persistable vars from a scope directory of
 * .npy files (vq_scope_load), fetches go back to .npy files or to stdout,
 * and a one-line summary (runs, mean time per run, plans prepared, peak
 * bytes of the last run outside the memory plan's arena, and that arena's
 * size) goes to stderr. Ops of the user's own come from
 * plugins (`varq --plugin lib.so ...`, or VARQ_PLUGINS=a.so:b.so): shared
 * libraries whose `int vq_plugin_init(void)` registers them with
 * vq_op_register, loaded before the command runs. It uses only the public
 * API (graph.h, tensor.h, engine.h, ops.h, onnx.h) and dlopen: whatever it
 * does, a program linked against libvarq can do the same way.
 *
 * Exit status: 0 on success; 2 on bad usage (an unknown command or option, a
 * missing or malformed value), with one line "varq: ..." and a pointer to
 * --help on stderr; 1 when loading, running or writing fails (a missing or
 * malformed file, a feed that does not fit, a failing op, a trace that
 * cannot be written), with one line "varq: <what>: <vq_errmsg()>". `varq
 * onnx-ops MODEL.onnx` answers with its status, as diff does: 0 when varq
 * translates every op type of the model, 1 when not, 2 when the model
 * cannot be read. Every path releases what it acquired.
 *
 * `varq run` checks where its traces go (--profile, and VARQ_PROFILE, which
 * it takes over from the engine: that one's own failure at vq_engine_free
 * would only be a line on stderr) before it loads anything, and writes them
 * after the runs with vq_profiler_dump, which leaves no trace cut short. */
#include <varq/engine.h>
#include <varq/error.h>
#include <varq/graph.h>
#include <varq/onnx.h>
#include <varq/ops.h>
#include <varq/tensor.h>
#include <varq/version.h>

#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

enum { EXIT_OK = 0, EXIT_FAILED = 1, EXIT_USAGE = 2 };
/* parse_run_args' answer to --help: not an exit status of the tool. */
enum { EXIT_HELP = -1 };

/* Values printed for `--fetch name` without a file. */
#define PRINT_MAX_VALUES 10

static const char usage_text[] =
    "usage: varq [--plugin LIB.so]... <command> [arguments]\n"
    "\n"
    "commands:\n"
    "  run PROGRAM.pb [options]  run block 0 of a saved program\n"
    "  run MODEL.onnx [options]  run an ONNX model (its initializers are the scope;\n"
    "                            without --fetch, every graph output is printed)\n"
    "  import MODEL.onnx -o PROGRAM.pb [--save-scope DIR]\n"
    "                            save an ONNX model as a program, its initializers\n"
    "                            as DIR/*.npy\n"
    "  dump PROGRAM.pb           print a program as text, one line per var and op\n"
    "  ops [--markdown]          list the registered ops with their slots and attributes\n"
    "                            (--markdown: as a table with kernels and gradients)\n"
    "  onnx-ops [--markdown]     list the ONNX ops the importer translates\n"
    "  onnx-ops MODEL.onnx       list the model's op types, each with its count and\n"
    "                            whether it is translated (exit 0: all are, 1: some\n"
    "                            are not, 2: the model cannot be read)\n"
    "  help, --help, -h          show this text\n"
    "  --version                 print varq's version\n"
    "\n"
    "  --plugin LIB.so           load LIB.so first and call its vq_plugin_init(), which\n"
    "                            registers its ops (vq_op_register); repeatable, after\n"
    "                            those listed in VARQ_PLUGINS (colon-separated)\n"
    "\n"
    "run options:\n"
    "  --feed NAME=FILE.npy    feed var NAME from FILE.npy (repeatable)\n"
    "  --fetch NAME=FILE.npy   write var NAME at the end of the last run to FILE.npy\n"
    "  --fetch NAME            print NAME's dtype, shape and first values instead\n"
    "  --scope DIR             load persistable vars from DIR/*.npy before running\n"
    "                          (over an ONNX model's initializers)\n"
    "  --save-scope DIR        save the scope to DIR/*.npy after running (may be the\n"
    "                          same DIR as --scope, to update parameters in place)\n"
    "  --repeat N              run N times (default 1); fetches come from the last run\n"
    "  --warmup N              run N times more first, left out of the printed mean\n"
    "                          (the first run prepares the plan and fills caches)\n"
    "  --workers N             CPU worker threads (default: VARQ_CPU_WORKERS or the\n"
    "                          number of cores)\n"
    "  --profile TRACE.json    write a Chrome trace of every op run (open it in\n"
    "                          Perfetto or chrome://tracing); a path where it\n"
    "                          cannot be written fails before the first run\n"
    "  --timeout SECONDS       end each run that takes longer (an endless loop, say)\n"
    "                          with an error naming where it stopped (exit 1)\n"
    "  --gpu ID                run the ops on GPU ID (VARQ_GPU_BACKEND=cuda|emulated\n"
    "                          picks the backend); feeds, scope and fetches are\n"
    "                          copied between the host and the device\n"
    "\n"
    "example:\n"
    "  varq run model.pb --scope params --feed x=x.npy --fetch y=y.npy --repeat 10\n"
    "\n"
    "exit status: 0 success, 1 a failed load, run or write, 2 bad usage (onnx-ops\n"
    "MODEL.onnx: 0 all translated, 1 some not, 2 an unreadable model or bad usage)\n";

/* Reports bad usage: one line, then the hint. Returns EXIT_USAGE. */
static int usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("varq: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputs(" (run 'varq --help' for usage)\n", stderr);
    va_end(ap);
    return EXIT_USAGE;
}

/* Reports a failure of a varq call: what was being done, then the library's
 * sentence (or the code's name when the library left none). Returns
 * EXIT_FAILED. */
static int failed(int err, const char *fmt, ...)
{
    const char *msg = vq_errmsg();
    va_list ap;
    va_start(ap, fmt);
    fputs("varq: ", stderr);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, ": %s\n", msg[0] ? msg : vq_strerror(err));
    va_end(ap);
    return EXIT_FAILED;
}

/* stdout may be a full disk or a closed pipe: a listing cut short is a
 * failure, not a success. */
static int finish_stdout(int status)
{
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "varq: writing to stdout: %s\n", strerror(errno));
        return EXIT_FAILED;
    }
    return status;
}

/* Parses a decimal integer from min to max. */
static int parse_long(const char *s, long min, long max, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- varq ops, varq onnx-ops, varq dump, varq import ---- */

/* The Markdown pages' first line, which says where they come from. */
#define GENERATED_BY(cmd)                                                              \
    "<!-- Generated by `varq " cmd " --markdown` (scripts/gen_docs.sh); do not edit: " \
    "run scripts/gen_docs.sh BUILD_DIR to update. -->\n"

/* Parses the command's only option, --markdown. Returns 1 when given, 0
 * when not, EXIT_USAGE (after saying why) for anything else. */
static int markdown_flag(const char *cmd, int argc, char **argv)
{
    if (argc == 1 && strcmp(argv[0], "--markdown") == 0)
        return 1;
    if (argc > 0)
        return argv[0][0] == '-' ? usage_error("%s: unknown option '%s'", cmd, argv[0])
                                 : usage_error("%s: unexpected argument '%s'", cmd, argv[0]);
    return 0;
}

/* The whole file at path, malloc'd into *buf (*n bytes). Returns EXIT_OK,
 * or EXIT_FAILED after saying why. */
static int read_whole(const char *path, char **buf, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "varq: reading %s: %s\n", path, strerror(errno));
        return EXIT_FAILED;
    }
    size_t cap = 1 << 16;
    char *b = malloc(cap);
    *n = 0;
    while (b != NULL && (*n += fread(b + *n, 1, cap - *n, f)) == cap) {
        char *nb = realloc(b, cap *= 2);
        if (nb == NULL)
            free(b);
        b = nb;
    }
    bool bad = b != NULL && ferror(f);
    fclose(f);
    if (b == NULL) {
        fputs("varq: out of memory\n", stderr);
        return EXIT_FAILED;
    }
    if (bad) {
        free(b);
        fprintf(stderr, "varq: reading %s: read error\n", path);
        return EXIT_FAILED;
    }
    *buf = b;
    return EXIT_OK;
}

/* Most bytes of a model's op type or domain that a listing prints. */
#define NAME_PRINT_MAX 48

/* s as a listing prints it: cut at NAME_PRINT_MAX bytes (then "..."),
 * control bytes as '?' (the names come from the model). Returns its width. */
static int print_name(const char *s)
{
    size_t n = strlen(s), keep = n > NAME_PRINT_MAX ? NAME_PRINT_MAX - 3 : n;
    for (size_t i = 0; i < keep; i++)
        putchar((unsigned char)s[i] < 0x20 || s[i] == 0x7F ? '?' : s[i]);
    if (keep < n)
        fputs("...", stdout);
    return (int)(keep < n ? keep + 3 : n);
}

/* `varq onnx-ops MODEL.onnx`: the model's op types, each with its count,
 * whether varq translates it and, when not, where its first node is. Exit
 * 0 when every type is translated, 1 when some are not, 2 when the model
 * cannot be read (as diff and cmp do: 1 is an answer, 2 trouble). */
static int onnx_ops_of_model(const char *path)
{
    char *buf;
    size_t len;
    if (read_whole(path, &buf, &len) != EXIT_OK)
        return EXIT_USAGE;
    vq_onnx_ops ops;
    int rc = vq_onnx_ops_read(&ops, buf, len);
    free(buf);
    if (rc != 0) {
        failed(rc, "reading %s", path);
        return EXIT_USAGE;
    }
    int bad = 0, width = 16;
    for (int i = 0; i < ops.nops; i++) {
        const vq_onnx_op_use *u = &ops.ops[i];
        size_t w = strlen(u->type) + (*u->domain ? strlen(u->domain) + 1 : 0);
        if (w > (size_t)width)
            width = w > 2 * NAME_PRINT_MAX + 1 ? 2 * NAME_PRINT_MAX + 1 : (int)w;
        bad += !u->supported;
    }
    for (int i = 0; i < ops.nops; i++) {
        const vq_onnx_op_use *u = &ops.ops[i];
        fputs("  ", stdout);
        int w = 0;
        if (*u->domain) {
            w = print_name(u->domain) + 1;
            putchar(':');
        }
        w += print_name(u->type);
        printf("%*s %6" PRId64 "  %s", width - w > 0 ? width - w : 0, "", u->count,
               u->supported ? "yes" : "no ");
        if (!u->supported)
            printf("  first: %s", u->first);
        putchar('\n');
    }
    printf("%d op type%s, %d not translated by varq%s\n", ops.nops, ops.nops == 1 ? "" : "s", bad,
           bad ? " (`varq onnx-ops` lists those that are)" : "");
    vq_onnx_ops_free(&ops);
    return finish_stdout(bad ? EXIT_FAILED : EXIT_OK);
}

static int cmd_onnx_ops(int argc, char **argv)
{
    const char *model = argc == 1 && argv[0][0] != '-' ? argv[0] : NULL;
    int markdown = model ? 0 : markdown_flag("onnx-ops", argc, argv);
    if (markdown == EXIT_USAGE)
        return EXIT_USAGE;
    if (!vq_onnx_op_name(0)) {
        fputs("varq: this build has no ONNX importer (install libonnx-dev and reconfigure "
              "with meson -Donnx=auto)\n",
              stderr);
        return model ? EXIT_USAGE : EXIT_FAILED;
    }
    if (model)
        return onnx_ops_of_model(model);
    if (!markdown) {
        for (int i = 0; vq_onnx_op_name(i); i++)
            puts(vq_onnx_op_name(i));
        return finish_stdout(EXIT_OK);
    }
    int n = 0;
    while (vq_onnx_op_name(n))
        n++;
    fputs(GENERATED_BY("onnx-ops"), stdout);
    fputs("\n# ONNX ops the importer translates\n\n", stdout);
    printf("The %d ONNX op types (of the default domain, `ai.onnx`, and the optimizers of\n"
           "`ai.onnx.preview.training`, its opset 1) that `vq_program_from_onnx` and\n"
           "`varq import` / `varq run MODEL.onnx` translate into varq ops\n"
           "(`include/varq/onnx.h`). A model with a node of any other type is refused,\n"
           "the message listing every such type with its domain, count and first node\n"
           "(`varq onnx-ops MODEL.onnx` lists a model's types, marked translated or not).\n"
           "An op listed here may still refuse some of its attribute values or input\n"
           "types: the message then says which.\n"
           "\n"
           "| ONNX op | its definition |\n"
           "|---|---|\n",
           n);
    for (int i = 0; i < n; i++) {
        bool training = *vq_onnx_op_domain(i) != '\0';
        printf("| `%s`%s | [onnx.ai](https://onnx.ai/onnx/operators/onnx_%s_%s.html) |\n",
               vq_onnx_op_name(i), training ? " (`ai.onnx.preview.training`)" : "",
               training ? "aionnxpreviewtraining" : "", vq_onnx_op_name(i));
    }
    return finish_stdout(EXIT_OK);
}

static int cmd_import(int argc, char **argv)
{
    const char *model = NULL, *out = NULL, *scope_dir = NULL;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "-o") || !strcmp(argv[i], "--save-scope")) {
            if (i + 1 >= argc)
                return usage_error("import: %s needs a value", argv[i]);
            *(!strcmp(argv[i], "-o") ? &out : &scope_dir) = argv[i + 1];
            i++;
        } else if (argv[i][0] == '-') {
            return usage_error("import: unknown option '%s'", argv[i]);
        } else if (model) {
            return usage_error("import: unexpected argument '%s'", argv[i]);
        } else {
            model = argv[i];
        }
    }
    if (!model || !out)
        return usage_error("import: needs MODEL.onnx and -o PROGRAM.pb");
    /* the program written over the model would lose it: the same file by
     * any name (a symbolic or hard link too) is refused before reading */
    struct stat ms, os;
    if (stat(model, &ms) == 0 && stat(out, &os) == 0 && ms.st_dev == os.st_dev &&
        ms.st_ino == os.st_ino) {
        fprintf(stderr,
                "varq: import: the output %s is the model %s itself; write the program "
                "to another file\n",
                out, model);
        return EXIT_FAILED;
    }
    vq_scope *s = NULL;
    vq_program *p = NULL;
    int rc = vq_scope_new(&s), status = EXIT_OK;
    if (rc != 0)
        status = failed(rc, "creating the scope");
    else if ((rc = vq_program_from_onnx_file(&p, s, model)) != 0)
        status = failed(rc, "importing %s", model);
    else if ((rc = vq_program_save(p, out)) != 0)
        status = failed(rc, "writing %s", out);
    else if (scope_dir && (rc = vq_scope_save(s, scope_dir)) != 0)
        status = failed(rc, "saving the initializers to %s", scope_dir);
    else if (!scope_dir && vq_scope_count(s) > 0)
        fprintf(stderr, "varq: note: %d initializer%s not saved (--save-scope DIR)\n",
                vq_scope_count(s), vq_scope_count(s) == 1 ? "" : "s");
    vq_program_free(p);
    vq_scope_free(s);
    return status;
}

/* Writes the comma-separated list s[0..len) as code spans, "-" when empty. */
static void put_code_list(const char *s, size_t len)
{
    bool any = false;
    for (size_t at = 0; at < len;) {
        size_t end = at;
        while (end < len && s[end] != ',')
            end++;
        size_t from = at, to = end;
        while (from < to && s[from] == ' ')
            from++;
        while (to > from && s[to - 1] == ' ')
            to--;
        if (to > from) {
            printf("%s`%.*s`", any ? ", " : "", (int)(to - from), s + from);
            any = true;
        }
        at = end + 1;
    }
    if (!any)
        fputs("-", stdout);
}

/* One op as a table row, from its signature ("matmul(X, Y) -> Out;
 * transpose_x:bool=false ...") and vq_op_traits. */
static void put_op_row(const char *name)
{
    const char *sig = vq_op_signature(name);
    const char *open = sig ? strchr(sig, '(') : NULL;
    const char *close = open ? strstr(open, ") -> ") : NULL;
    int traits = vq_op_traits(name);
    printf("| `%s` | ", name);
    if (!close) {
        fputs("? | ? | ? | ", stdout);
    } else {
        put_code_list(open + 1, (size_t)(close - open - 1));
        fputs(" | ", stdout);
        const char *outs = close + 5, *semi = strchr(outs, ';');
        put_code_list(outs, semi ? (size_t)(semi - outs) : strlen(outs));
        fputs(" | ", stdout);
        if (!semi) {
            fputs("-", stdout);
        } else {
            /* the attributes: "name:type=default" or "name:type", space-separated */
            const char *a = semi + 1;
            bool first = true;
            while (*a) {
                while (*a == ' ')
                    a++;
                size_t len = strcspn(a, " ");
                if (len > 0) {
                    printf("%s`%.*s`", first ? "" : " ", (int)len, a);
                    first = false;
                }
                a += len;
            }
        }
        fputs(" | ", stdout);
    }
    const char *kernels = traits < 0                    ? "?"
                          : (traits & VQ_OP_IS_CONTROL) ? "executor (control flow)"
                          : (traits & VQ_OP_HAS_ASYNC)  ? "CPU (async)"
                          : (traits & VQ_OP_HAS_CPU)    ? "CPU"
                          : (traits & VQ_OP_HAS_GPU)    ? "GPU only"
                                                        : "none";
    printf("%s | %s |\n", kernels, traits >= 0 && (traits & VQ_OP_HAS_GRAD) ? "yes" : "no");
}

static int cmd_ops(int argc, char **argv)
{
    int markdown = markdown_flag("ops", argc, argv);
    if (markdown == EXIT_USAGE)
        return EXIT_USAGE;
    int n = vq_op_count();
    if (!markdown) {
        for (int i = 0; i < n; i++) {
            const char *sig = vq_op_signature(vq_op_name(i));
            puts(sig ? sig : vq_op_name(i));
        }
        return finish_stdout(EXIT_OK);
    }
    fputs(GENERATED_BY("ops"), stdout);
    fputs("\n# Ops\n\n", stdout);
    printf("The %d op types in varq's registry, as `vq_op_run`, programs\n"
           "(`vq_program_add_op`) and the executor know them (`include/varq/ops.h`),\n"
           "from `vq_op_signature` and `vq_op_traits`. Ops registered by a program of\n"
           "its own (`vq_op_register`, `varq --plugin`) join the list at run time, and so\n"
           "do the communication ops of `include/varq/dist.h` (allreduce, broadcast,\n"
           "send, recv, dist_ticket), registered by the first `vq_dist_new`.\n"
           "\n"
           "- **inputs**, **outputs**: the slots, in order; `X...` is a variadic last\n"
           "  slot (one or more tensors), `X?` an optional one (absent or one tensor).\n"
           "- **attributes**: `name:type=default`; one without `=` is required. The\n"
           "  default is what the op uses when the attribute is absent (`none`: no\n"
           "  value; the op says what that means).\n"
           "- **kernels**: where the op runs. `CPU`: a CPU kernel, which also runs on\n"
           "  the emulated GPU backend (`VARQ_GPU_BACKEND=emulated`); which ops have a\n"
           "  CUDA kernel depends on the build (`vq_op_traits` says: `VQ_OP_HAS_GPU`).\n"
           "  `executor (control flow)`: no kernel; the graph executor runs the op's\n"
           "  blocks (`include/varq/graph.h`).\n"
           "- **gradient**: `yes` when `vq_append_backward` differentiates through the\n"
           "  op; `no`: autodiff treats its outputs as constants.\n"
           "\n"
           "The dtypes each op accepts are checked by its inference, which names the\n"
           "slot and the dtype it refuses; they are not listed here.\n"
           "\n"
           "| op | inputs | outputs | attributes | kernels | gradient |\n"
           "|---|---|---|---|---|---|\n",
           n);
    for (int i = 0; i < n; i++)
        put_op_row(vq_op_name(i));
    return finish_stdout(EXIT_OK);
}

static int cmd_dump(int argc, char **argv)
{
    if (argc == 0)
        return usage_error("dump: missing PROGRAM.pb");
    if (argv[0][0] == '-' && argv[0][1] != '\0')
        return usage_error("dump: unknown option '%s'", argv[0]);
    if (argc > 1)
        return usage_error("dump: unexpected argument '%s'", argv[1]);
    vq_program *p;
    int rc = vq_program_load(&p, argv[0]);
    if (rc != 0)
        return failed(rc, "loading the program");
    rc = vq_program_dump(p, stdout);
    vq_program_free(p);
    if (rc != 0)
        return failed(rc, "dumping the program");
    return finish_stdout(EXIT_OK);
}

/* ---- varq run ---- */

/* One --feed or --fetch: the var name and the file (NULL for a fetch that
 * prints). Both point into argv, which outlives the run. */
struct binding {
    const char *name;
    const char *file;
};

struct run_args {
    const char *program;
    struct binding *feeds, *fetches; /* each sized for argc entries */
    int nfeeds, nfetches;
    const char *scope_dir, *save_scope_dir, *profile;
    char *env_profile;            /* VARQ_PROFILE, taken over from the engine (cmd_run) */
    long repeat, warmup, workers; /* workers 0 = the engine's default */
    long gpu;             /* run on this GPU; -1: the CPU */
    int timeout_ms;       /* each run's deadline; 0: none */
};

/* The value of option argv[*i] (`--opt value` or `--opt=value`); advances *i
 * past it. NULL when the value is missing. */
static const char *option_value(int argc, char **argv, int *i, const char *opt)
{
    const char *arg = argv[*i];
    size_t len = strlen(opt);
    if (arg[len] == '=')
        return arg + len + 1;
    if (*i + 1 >= argc)
        return NULL;
    return argv[++*i];
}

/* Splits "name=file" (or, when file_optional, a bare "name") into b. */
static int parse_binding(const char *s, bool file_optional, struct binding *b, char **name_buf)
{
    const char *eq = strchr(s, '=');
    if (eq == NULL) {
        if (!file_optional || s[0] == '\0')
            return -1;
        b->name = s;
        b->file = NULL;
        return 0;
    }
    if (eq == s || eq[1] == '\0')
        return -1;
    /* The name needs its own terminated copy; the file is the tail of s. */
    size_t len = (size_t)(eq - s);
    *name_buf = malloc(len + 1);
    if (*name_buf == NULL)
        return -2;
    memcpy(*name_buf, s, len);
    (*name_buf)[len] = '\0';
    b->name = *name_buf;
    b->file = eq + 1;
    return 0;
}

/* Fills a from the arguments after `run`. Names split out of NAME=FILE are
 * malloc'd into names[] (*nnames of them) for the caller to free. Returns
 * EXIT_OK, EXIT_HELP, EXIT_USAGE (or EXIT_FAILED when out of memory). */
static int parse_run_args(int argc, char **argv, struct run_args *a, char **names, int *nnames)
{
    for (int i = 0; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0)
            return EXIT_HELP;
        if (arg[0] == '-' && arg[1] != '-' && arg[1] != '\0')
            return usage_error("run: unknown option '%s'", arg);
        if (strncmp(arg, "--", 2) != 0) {
            if (a->program != NULL)
                return usage_error("run: unexpected argument '%s'", arg);
            a->program = arg;
            continue;
        }
        static const char *const options[] = {"--feed",   "--fetch",  "--scope",   "--save-scope",
                                              "--repeat", "--warmup", "--workers", "--profile",
                                              "--gpu",    "--timeout"};
        const char *opt = NULL;
        for (size_t k = 0; k < sizeof options / sizeof options[0]; k++) {
            size_t len = strlen(options[k]);
            if (strncmp(arg, options[k], len) == 0 && (arg[len] == '\0' || arg[len] == '=')) {
                opt = options[k];
                break;
            }
        }
        if (opt == NULL)
            return usage_error("run: unknown option '%s'", arg);
        const char *val = option_value(argc, argv, &i, opt);
        if (val == NULL)
            return usage_error("run: %s needs a value", opt);

        if (strcmp(opt, "--feed") == 0 || strcmp(opt, "--fetch") == 0) {
            bool is_feed = strcmp(opt, "--feed") == 0;
            struct binding *b = is_feed ? &a->feeds[a->nfeeds] : &a->fetches[a->nfetches];
            char *name = NULL;
            int rc = parse_binding(val, !is_feed, b, &name);
            if (rc == -2) {
                fputs("varq: out of memory\n", stderr);
                return EXIT_FAILED;
            }
            if (rc != 0)
                return usage_error(is_feed ? "run: --feed '%s' is not NAME=FILE.npy"
                                           : "run: --fetch '%s' is not NAME or NAME=FILE.npy",
                                   val);
            if (name != NULL)
                names[(*nnames)++] = name;
            if (is_feed)
                a->nfeeds++;
            else
                a->nfetches++;
        } else if (strcmp(opt, "--scope") == 0) {
            a->scope_dir = val;
        } else if (strcmp(opt, "--save-scope") == 0) {
            a->save_scope_dir = val;
        } else if (strcmp(opt, "--profile") == 0) {
            a->profile = val;
        } else if (strcmp(opt, "--gpu") == 0) {
            if (parse_long(val, 0, 63, &a->gpu) != 0)
                return usage_error("run: --gpu '%s' is not a GPU id from 0 to 63", val);
        } else if (strcmp(opt, "--timeout") == 0) {
            char *end;
            errno = 0;
            double sec = strtod(val, &end);
            /* whole milliseconds, at least one, that fit timeout_ms (an int) */
            if (errno != 0 || end == val || *end != '\0' || !(sec > 0) || sec > 2000000.0)
                return usage_error("run: --timeout '%s' is not a number of seconds from 0.001 "
                                   "to 2000000",
                                   val);
            double ms = sec * 1000.0;
            a->timeout_ms = (int)ms + ((double)(int)ms < ms); /* rounded up */
        } else if (strcmp(opt, "--repeat") == 0) {
            if (parse_long(val, 1, 1000000000L, &a->repeat) != 0)
                return usage_error("run: --repeat '%s' is not a count from 1 to 1000000000", val);
        } else if (strcmp(opt, "--warmup") == 0) {
            if (parse_long(val, 0, 1000000000L, &a->warmup) != 0)
                return usage_error("run: --warmup '%s' is not a count from 0 to 1000000000", val);
        } else { /* --workers */
            if (parse_long(val, 1, 1024, &a->workers) != 0)
                return usage_error("run: --workers '%s' is not a count from 1 to 1024", val);
        }
    }
    if (a->program == NULL)
        return usage_error("run: missing PROGRAM.pb or MODEL.onnx");
    return EXIT_OK;
}

/* Prints "name: dtype[d0,d1] = [v0, v1, ...]" with at most PRINT_MAX_VALUES
 * values. The run has waited for t. */
static void print_tensor(const char *name, vq_tensor *t)
{
    vq_dtype dt = vq_tensor_dtype(t);
    int ndim = vq_tensor_ndim(t);
    const int64_t *shape = vq_tensor_shape(t);
    int64_t numel = vq_tensor_numel(t);
    const void *data = vq_tensor_data(t);
    printf("%s: %s[", name, vq_dtype_name(dt));
    for (int k = 0; k < ndim; k++)
        printf("%s%" PRId64, k ? "," : "", shape[k]);
    printf("] = [");
    int64_t shown = numel < PRINT_MAX_VALUES ? numel : PRINT_MAX_VALUES;
    for (int64_t i = 0; i < shown; i++) {
        if (i > 0)
            fputs(", ", stdout);
        switch (dt) {
        case VQ_F32:
            printf("%.9g", (double)((const float *)data)[i]);
            break;
        case VQ_F64:
            printf("%.17g", ((const double *)data)[i]);
            break;
        case VQ_I32:
            printf("%" PRId32, ((const int32_t *)data)[i]);
            break;
        case VQ_I64:
            printf("%" PRId64, ((const int64_t *)data)[i]);
            break;
        case VQ_BOOL:
            fputs(((const uint8_t *)data)[i] ? "true" : "false", stdout);
            break;
        case VQ_F16: /* the shortest form that reads back as the same f16 */
            printf("%.5g", (double)vq_f16_to_f32(((const uint16_t *)data)[i]));
            break;
        case VQ_BF16: printf("%.4g", (double)vq_bf16_to_f32(((const uint16_t *)data)[i])); break;
        case VQ_I8: printf("%" PRId8, ((const int8_t *)data)[i]); break;
        case VQ_U8: printf("%" PRIu8, ((const uint8_t *)data)[i]); break;
        case VQ_I16: printf("%" PRId16, ((const int16_t *)data)[i]); break;
        case VQ_U16: printf("%" PRIu16, ((const uint16_t *)data)[i]); break;
        case VQ_U32: printf("%" PRIu32, ((const uint32_t *)data)[i]); break;
        case VQ_U64: printf("%" PRIu64, ((const uint64_t *)data)[i]); break;
        }
    }
    printf("%s]\n", numel > shown ? ", ..." : "");
}

/* Everything a run acquires, released by run_cleanup in reverse order:
 * tensors and the scope before the executor, all of them before the engine
 * (a tensor's engine var dies with its engine). */
struct run_state {
    vq_program *program;
    vq_engine *engine;
    vq_exec *exec;
    vq_scope *scope;
    vq_feed *feeds;
    vq_fetch *fetches;
    const char **fetch_names;
    int nfeeds, nfetches;
    /* an ONNX model run without --fetch: its graph outputs, printed */
    vq_onnx_info info;
    struct binding *outputs;
};

static bool is_onnx(const char *path)
{
    size_t n = strlen(path);
    return n > 5 && strcmp(path + n - 5, ".onnx") == 0;
}

/* The graph outputs of the ONNX model at path into s->info. */
static int onnx_outputs(const char *path, struct run_state *s)
{
    char *buf;
    size_t n;
    if (read_whole(path, &buf, &n) != EXIT_OK)
        return EXIT_FAILED;
    int rc = vq_onnx_info_read(&s->info, buf, n);
    free(buf);
    if (rc != 0)
        return failed(rc, "reading %s", path);
    s->outputs = calloc((size_t)s->info.noutputs + 1, sizeof *s->outputs);
    if (s->outputs == NULL) {
        fputs("varq: out of memory\n", stderr);
        return EXIT_FAILED;
    }
    for (int i = 0; i < s->info.noutputs; i++)
        s->outputs[i] = (struct binding){s->info.outputs[i], NULL};
    return EXIT_OK;
}

static void release_fetches(struct run_state *s)
{
    for (int i = 0; i < s->nfetches; i++) {
        vq_tensor_release(s->fetches[i].tensor);
        s->fetches[i].tensor = NULL;
    }
}

static void run_cleanup(struct run_state *s)
{
    if (s->fetches != NULL)
        release_fetches(s);
    for (int i = 0; s->feeds != NULL && i < s->nfeeds; i++)
        vq_tensor_release(s->feeds[i].tensor);
    vq_scope_free(s->scope);
    vq_exec_free(s->exec);
    vq_engine_free(s->engine);
    vq_program_free(s->program);
    free(s->feeds);
    free(s->fetches);
    free(s->fetch_names);
    free(s->outputs);
    vq_onnx_info_free(&s->info);
}

/* Loads, runs a->repeat times, writes the fetches, saves the scope and the
 * trace, prints the summary. */
static int run_program(const struct run_args *a, struct run_state *s)
{
    /* The traces are written after every run: a path that cannot take one
     * fails now, before the work. */
    int rc;
    if (a->profile != NULL && (rc = vq_profiler_check_path(a->profile)) != 0)
        return failed(rc, "--profile");
    if (a->env_profile != NULL && (rc = vq_profiler_check_path(a->env_profile)) != 0)
        return failed(rc, "VARQ_PROFILE");
    rc = vq_scope_new(&s->scope);
    if (rc != 0)
        return failed(rc, "creating the scope");
    s->feeds = calloc((size_t)a->nfeeds + 1, sizeof *s->feeds);
    if (s->feeds == NULL) {
        fputs("varq: out of memory\n", stderr);
        return EXIT_FAILED;
    }
    for (int i = 0; i < a->nfeeds; i++) {
        s->feeds[i].name = a->feeds[i].name;
        rc = vq_npy_load(a->feeds[i].file, &s->feeds[i].tensor);
        if (rc != 0)
            return failed(rc, "loading feed %s", a->feeds[i].name);
        s->nfeeds++;
    }
    bool onnx = is_onnx(a->program);
    if (onnx) {
        /* the feeds are offered: an input that gives a shape specializes
         * the model on the value fed (include/varq/onnx.h) */
        vq_onnx_value *offers = calloc((size_t)s->nfeeds + 1, sizeof *offers);
        for (int i = 0; offers && i < s->nfeeds; i++)
            offers[i] = (vq_onnx_value){.name = s->feeds[i].name, .tensor = s->feeds[i].tensor};
        vq_onnx_opts o = {.values = offers, .nvalues = offers ? s->nfeeds : 0};
        rc = vq_program_from_onnx_file_opts(&s->program, s->scope, a->program, &o);
        free(offers);
    } else {
        rc = vq_program_load(&s->program, a->program);
    }
    if (rc != 0)
        return failed(rc, onnx ? "importing the model" : "loading the program");
    const struct binding *fetch = a->fetches;
    int nfetch = a->nfetches;
    if (onnx && nfetch == 0) {
        if ((rc = onnx_outputs(a->program, s)) != EXIT_OK)
            return rc;
        fetch = s->outputs;
        nfetch = s->info.noutputs;
    }

    s->fetches = calloc((size_t)nfetch + 1, sizeof *s->fetches);
    s->fetch_names = calloc((size_t)nfetch + 1, sizeof *s->fetch_names);
    if (s->fetches == NULL || s->fetch_names == NULL) {
        fputs("varq: out of memory\n", stderr);
        return EXIT_FAILED;
    }
    s->nfetches = nfetch;
    for (int i = 0; i < nfetch; i++) {
        s->fetches[i].name = fetch[i].name;
        s->fetch_names[i] = fetch[i].name;
    }

    if (a->scope_dir != NULL && (rc = vq_scope_load(s->scope, a->scope_dir)) != 0)
        return failed(rc, "loading the scope");

    vq_engine_opts eo = {
        .kind = VQ_ENGINE_THREADED,
        .cpu_workers = (int)a->workers,
        .flags = a->profile != NULL || a->env_profile != NULL ? VQ_ENGINE_PROFILE : 0,
    };
    if ((rc = vq_engine_new(&s->engine, &eo)) != 0)
        return failed(rc, "starting the engine");
    vq_exec_opts xo = {.device = {VQ_DEV_CPU, 0}, .timeout_ms = a->timeout_ms};
    if (a->gpu >= 0)
        xo.device = (vq_ctx){VQ_DEV_GPU, (int)a->gpu};
    if ((rc = vq_exec_new(&s->exec, s->engine, &xo)) != 0)
        return failed(rc, "creating the executor");

    double total = 0;
    long runs = a->warmup + a->repeat;
    for (long r = 0; r < runs; r++) {
        release_fetches(s);
        double t0 = now_seconds();
        rc = vq_exec_run(s->exec, s->program, s->scope, s->feeds, s->nfeeds, s->fetches,
                         s->nfetches);
        if (r >= a->warmup)
            total += now_seconds() - t0;
        if (rc != 0)
            return runs > 1 ? failed(rc, "run %ld of %ld", r + 1, runs)
                            : failed(rc, "running the program");
    }

    for (int i = 0; i < s->nfetches; i++) {
        const struct binding *b = &fetch[i];
        if (b->file == NULL) {
            /* A GPU run's fetches are on the device. */
            vq_tensor *t = s->fetches[i].tensor, *h = NULL;
            if (vq_tensor_device(t).kind == VQ_DEV_GPU &&
                ((rc = vq_tensor_copy_to(s->engine, t, (vq_ctx){VQ_DEV_CPU, 0}, &h)) != 0 ||
                 (rc = vq_tensor_wait(h)) != 0)) {
                vq_tensor_release(h);
                return failed(rc, "copying fetch %s to the host", b->name);
            }
            print_tensor(b->name, h ? h : t);
            vq_tensor_release(h);
        } else if ((rc = vq_npy_save(b->file, s->fetches[i].tensor)) != 0) {
            return failed(rc, "writing fetch %s", b->name);
        }
    }
    if (a->save_scope_dir != NULL && (rc = vq_scope_save(s->scope, a->save_scope_dir)) != 0)
        return failed(rc, "saving the scope");
    if (a->profile != NULL && (rc = vq_profiler_dump(s->engine, a->profile)) != 0)
        return failed(rc, "writing the profile");
    if (a->env_profile != NULL && (rc = vq_profiler_dump(s->engine, a->env_profile)) != 0)
        return failed(rc, "writing the VARQ_PROFILE trace");

    vq_exec_stats st;
    if ((rc = vq_exec_get_stats(s->exec, &st)) != 0)
        return failed(rc, "reading the executor's stats");
    fprintf(stderr,
            "varq: %ld run%s%s, mean %.3f ms per run, %" PRIu64 " plan%s prepared, "
            "peak %zu bytes in the last run outside its memory plan's arena of %zu bytes\n",
            a->repeat, a->repeat == 1 ? "" : "s", a->warmup ? " after the warm-up" : "",
            total * 1e3 / (double)a->repeat, st.prepares, st.prepares == 1 ? "" : "s",
            st.last_peak_bytes, st.last_arena_bytes);
    return finish_stdout(EXIT_OK);
}

/* VARQ_PROFILE, left to the engine, would be written when it is freed,
 * where a failure is only a line on stderr and the exit status 0: the tool
 * writes it instead, like --profile. It is unset before any engine reads
 * it (an empty value stays, for vq_engine_new to refuse). */
static int take_varq_profile(struct run_args *a)
{
    const char *path = getenv("VARQ_PROFILE");
    if (path == NULL || path[0] == '\0')
        return EXIT_OK;
    char *copy = strdup(path); /* unsetenv may free path */
    if (copy == NULL) {
        fputs("varq: out of memory\n", stderr);
        return EXIT_FAILED;
    }
    unsetenv("VARQ_PROFILE");
    a->env_profile = copy;
    return EXIT_OK;
}

static int cmd_run(int argc, char **argv)
{
    struct run_args a = {.repeat = 1, .gpu = -1};
    /* Each option takes one value: argc bounds the feeds, the fetches and
     * the names split out of them. */
    size_t cap = (size_t)argc + 1;
    a.feeds = calloc(cap, sizeof *a.feeds);
    a.fetches = calloc(cap, sizeof *a.fetches);
    char **names = calloc(cap, sizeof *names);
    int nnames = 0;
    int status;
    if (a.feeds == NULL || a.fetches == NULL || names == NULL) {
        fputs("varq: out of memory\n", stderr);
        status = EXIT_FAILED;
    } else {
        status = parse_run_args(argc, argv, &a, names, &nnames);
        if (status == EXIT_HELP) {
            fputs(usage_text, stdout);
            status = finish_stdout(EXIT_OK);
        } else if (status == EXIT_OK) {
            status = take_varq_profile(&a);
            struct run_state s = {0};
            if (status == EXIT_OK)
                status = run_program(&a, &s);
            run_cleanup(&s);
            free(a.env_profile);
        }
    }
    for (int i = 0; i < nnames; i++)
        free(names[i]);
    free(names);
    free(a.feeds);
    free(a.fetches);
    return status;
}

/* Loads one plugin and lets it register its ops. Plugins stay loaded: the
 * ops they register cannot be unregistered. */
static int load_plugin(const char *path)
{
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "varq: plugin %s: %s\n", path, dlerror());
        return EXIT_FAILED;
    }
    int (*init)(void);
    *(void **)&init = dlsym(lib, "vq_plugin_init");
    if (!init) {
        fprintf(stderr, "varq: plugin %s: has no vq_plugin_init function\n", path);
        return EXIT_FAILED;
    }
    int rc = init();
    if (rc < 0) {
        fprintf(stderr, "varq: plugin %s: vq_plugin_init: %s\n", path,
                *vq_errmsg() ? vq_errmsg() : vq_strerror(rc));
        return EXIT_FAILED;
    }
    return EXIT_OK;
}

/* The plugins VARQ_PLUGINS names (colon-separated; empty entries skipped). */
static int load_env_plugins(void)
{
    const char *env = getenv("VARQ_PLUGINS");
    while (env && *env) {
        const char *end = strchr(env, ':');
        size_t n = end ? (size_t)(end - env) : strlen(env);
        if (n > 0) {
            char *path = strndup(env, n);
            if (!path) {
                fprintf(stderr, "varq: out of memory\n");
                return EXIT_FAILED;
            }
            int status = load_plugin(path);
            free(path);
            if (status != EXIT_OK)
                return status;
        }
        env = end ? end + 1 : NULL;
    }
    return EXIT_OK;
}

int main(int argc, char **argv)
{
    int status = load_env_plugins();
    if (status != EXIT_OK)
        return status;
    while (argc > 1 && !strncmp(argv[1], "--plugin", 8) &&
           (argv[1][8] == '\0' || argv[1][8] == '=')) {
        const char *path = argv[1][8] == '=' ? argv[1] + 9 : argc > 2 ? argv[2] : NULL;
        if (!path || !*path)
            return usage_error("--plugin needs a shared library");
        if ((status = load_plugin(path)) != EXIT_OK)
            return status;
        int used = argv[1][8] == '=' ? 1 : 2;
        argc -= used;
        argv += used;
    }
    if (argc < 2) {
        fputs(usage_text, stderr);
        return EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        fputs(usage_text, stdout);
        return finish_stdout(EXIT_OK);
    }
    if (strcmp(cmd, "--version") == 0) {
        /* the library's version, and the headers' when they differ: a
         * newer libvarq.so than the tool was built with */
        if (strcmp(vq_version(), VQ_VERSION_STRING) == 0)
            printf("varq %s\n", vq_version());
        else
            printf("varq %s (built with the headers of %s)\n", vq_version(), VQ_VERSION_STRING);
        return finish_stdout(EXIT_OK);
    }
    if (strcmp(cmd, "run") == 0)
        return cmd_run(argc - 2, argv + 2);
    if (strcmp(cmd, "dump") == 0)
        return cmd_dump(argc - 2, argv + 2);
    if (strcmp(cmd, "ops") == 0)
        return cmd_ops(argc - 2, argv + 2);
    if (strcmp(cmd, "onnx-ops") == 0)
        return cmd_onnx_ops(argc - 2, argv + 2);
    if (strcmp(cmd, "import") == 0)
        return cmd_import(argc - 2, argv + 2);
    if (cmd[0] == '-')
        return usage_error("unknown option '%s'", cmd);
    return usage_error("unknown command '%s'", cmd);
}
