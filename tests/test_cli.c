/* The varq command-line tool, run as a user runs it: each test spawns the
 * built binary (VARQ_BIN, set by tests/meson.build) with its stdout and
 * stderr sent to files, and checks the exit status and what it wrote. The
 * fixture is a small program, y = relu(x @ w) with x a [2,3] f32 feed and w
 * a persistable [3,2] f32 in a scope directory, saved into a fresh temporary
 * directory with the expected y computed by running the same ops directly.
 * Under ASan the tool is built with it too, so a leak or a sanitizer report
 * in the tool changes its exit status or its stderr, and fails the test. */
#include "leakcheck.h"

#include <varq/varq.h>

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <dirent.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define PYTHON "/usr/bin/python3"
#define NAMES(...) ((const char *const[]){__VA_ARGS__})

static char dir[64];             /* this test's temporary directory */
static char prog[128];           /* dir/prog.pb: the program */
static char params[128];         /* dir/params: the scope with w */
static char x_feed[160];         /* "x=dir/x.npy", the --feed argument */
static float want_y[4];          /* relu(x @ w), computed directly */
static const float x_values[6] = {1, -2, 3, -4, 5, -6};
static const float w_values[6] = {0.5f, -1, 2, 0.25f, -1.5f, 3};

/* A path in the test's directory (one of 8 rotating buffers). */
static const char *in_dir(const char *name)
{
    static char bufs[8][192];
    static int next;
    char *b = bufs[next++ % 8];
    snprintf(b, sizeof bufs[0], "%s/%s", dir, name);
    return b;
}

/* A formatted argument (one of 8 rotating buffers). */
static const char *fmt(const char *f, ...)
{
    static char bufs[8][256];
    static int next;
    char *b = bufs[next++ % 8];
    va_list ap;
    va_start(ap, f);
    vsnprintf(b, sizeof bufs[0], f, ap);
    va_end(ap);
    return b;
}

static vq_tensor *f32_tensor(int64_t rows, int64_t cols, const float *values)
{
    vq_tensor *t;
    int64_t shape[2] = {rows, cols};
    cr_assert_eq(vq_tensor_from(&t, VQ_F32, 2, shape, values), 0, "%s", vq_errmsg());
    return t;
}

static void write_npy(const char *path, vq_tensor *t)
{
    cr_assert_eq(vq_npy_save(path, t), 0, "%s", vq_errmsg());
}

static void setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/varq_cli_XXXXXX");
    cr_assert_not_null(mkdtemp(dir), "mkdtemp: %s", strerror(errno));
    snprintf(prog, sizeof prog, "%s/prog.pb", dir);
    snprintf(params, sizeof params, "%s/params", dir);
    snprintf(x_feed, sizeof x_feed, "x=%s/x.npy", dir);

    vq_program *p;
    cr_assert_eq(vq_program_new(&p), 0);
    int64_t xs[2] = {2, 3}, ws[2] = {3, 2}, ys[2] = {2, 2};
    cr_assert_eq(vq_program_add_var(p, 0, "x", VQ_F32, 2, xs, false), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_program_add_var(p, 0, "w", VQ_F32, 2, ws, true), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_program_add_var(p, 0, "h", VQ_F32, 2, ys, false), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_program_add_var(p, 0, "y", VQ_F32, 2, ys, false), 0, "%s", vq_errmsg());
    cr_assert_geq(vq_program_add_op(p, 0, "matmul", NAMES("x", "w"), 2, NAMES("h"), 1, NULL, 0),
                  0, "%s", vq_errmsg());
    cr_assert_geq(vq_program_add_op(p, 0, "relu", NAMES("h"), 1, NAMES("y"), 1, NULL, 0), 0,
                  "%s", vq_errmsg());
    cr_assert_eq(vq_program_save(p, prog), 0, "%s", vq_errmsg());
    vq_program_free(p);

    vq_tensor *x = f32_tensor(2, 3, x_values), *w = f32_tensor(3, 2, w_values);
    write_npy(in_dir("x.npy"), x);
    vq_scope *s;
    cr_assert_eq(vq_scope_new(&s), 0);
    cr_assert_eq(vq_scope_set(s, "w", w), 0);
    cr_assert_eq(vq_scope_save(s, params), 0, "%s", vq_errmsg());
    vq_scope_free(s);

    vq_tensor *in[2] = {x, w}, *h = NULL, *y = NULL;
    cr_assert_eq(vq_op_run(NULL, "matmul", in, 2, &h, 1, NULL, 0), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_op_run(NULL, "relu", &h, 1, &y, 1, NULL, 0), 0, "%s", vq_errmsg());
    memcpy(want_y, vq_tensor_data(y), sizeof want_y);
    vq_tensor_release(x);
    vq_tensor_release(w);
    vq_tensor_release(h);
    vq_tensor_release(y);
}

static void teardown(void)
{
    if (dir[0] != '\0') {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd) != 0)
            fprintf(stderr, "could not remove %s\n", dir);
    }
    leak_check();
}

TestSuite(cli, .init = setup, .fini = teardown);

/* What a spawned command did. */
struct result {
    int status; /* exit status; 128 + signal when killed */
    char *out, *err;
};

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "%s: %s", path, strerror(errno));
    cr_assert_eq(fseek(f, 0, SEEK_END), 0);
    long n = ftell(f);
    cr_assert_geq(n, 0);
    rewind(f);
    char *buf = malloc((size_t)n + 1);
    cr_assert_not_null(buf);
    cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = '\0';
    fclose(f);
    if (len != NULL)
        *len = (size_t)n;
    return buf;
}

/* Runs argv (argv[0] is the program's path) with stdout and stderr in
 * files of the test's directory, and waits for it. */
static struct result spawn(const char *const *argv)
{
    const char *out_path = in_dir("stdout.txt"), *err_path = in_dir("stderr.txt");
    posix_spawn_file_actions_t fa;
    cr_assert_eq(posix_spawn_file_actions_init(&fa), 0);
    cr_assert_eq(posix_spawn_file_actions_addopen(&fa, 1, out_path, O_WRONLY | O_CREAT | O_TRUNC,
                                                  0644), 0);
    cr_assert_eq(posix_spawn_file_actions_addopen(&fa, 2, err_path, O_WRONLY | O_CREAT | O_TRUNC,
                                                  0644), 0);
    pid_t pid;
    int rc = posix_spawn(&pid, argv[0], &fa, NULL, (char *const *)argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    cr_assert_eq(rc, 0, "spawning %s: %s", argv[0], strerror(rc));
    int ws;
    cr_assert_eq(waitpid(pid, &ws, 0), pid);
    struct result r = {
        .status = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws),
        .out = read_file(out_path, NULL),
        .err = read_file(err_path, NULL),
    };
    return r;
}

static const char *varq_bin(void)
{
    const char *bin = getenv("VARQ_BIN");
    cr_assert(bin != NULL && bin[0] != '\0', "VARQ_BIN is not set (tests/meson.build sets it)");
    return bin;
}

/* varq with the given arguments (a NULL-terminated list). */
#define VARQ(...) spawn((const char *const[]){varq_bin(), __VA_ARGS__, NULL})

static void result_free(struct result *r)
{
    free(r->out);
    free(r->err);
}

/* One line on stderr, starting "varq: ". */
static void assert_one_line_message(const struct result *r)
{
    cr_assert_eq(strncmp(r->err, "varq: ", 6), 0, "stderr: %s", r->err);
    char *nl = strchr(r->err, '\n');
    cr_assert(nl != NULL && nl[1] == '\0', "not one line: %s", r->err);
}

static void assert_usage_error(struct result r)
{
    cr_assert_eq(r.status, 2, "exit %d, stderr: %s", r.status, r.err);
    assert_one_line_message(&r);
    cr_assert_not_null(strstr(r.err, "varq --help"), "no hint: %s", r.err);
    cr_assert_str_empty(r.out);
    result_free(&r);
}

static void assert_run_failure(struct result r)
{
    cr_assert_eq(r.status, 1, "exit %d, stderr: %s", r.status, r.err);
    assert_one_line_message(&r);
    result_free(&r);
}

static void assert_y_file(const char *path)
{
    vq_tensor *y;
    cr_assert_eq(vq_npy_load(path, &y), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_tensor_dtype(y), VQ_F32);
    cr_assert_eq(vq_tensor_ndim(y), 2);
    cr_assert_eq(vq_tensor_shape(y)[0], 2);
    cr_assert_eq(vq_tensor_shape(y)[1], 2);
    const float *v = vq_tensor_data(y);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(v[i], want_y[i], "y[%d] = %g, want %g", i, v[i], want_y[i]);
    vq_tensor_release(y);
}

Test(cli, run_writes_the_fetch_that_the_ops_give_directly)
{
    struct result r = VARQ("run", prog, "--scope", params, "--feed", x_feed, "--fetch",
                           fmt("y=%s", in_dir("y.npy")), "--workers", "2");
    cr_assert_eq(r.status, 0, "exit %d, stderr: %s", r.status, r.err);
    assert_y_file(in_dir("y.npy"));
    /* The summary: one line on stderr. */
    assert_one_line_message(&r);
    cr_assert_not_null(strstr(r.err, "1 run,"), "%s", r.err);
    cr_assert_not_null(strstr(r.err, "1 plan prepared"), "%s", r.err);
    cr_assert_str_empty(r.out);
    result_free(&r);
}

Test(cli, options_take_their_value_after_an_equals_sign_too)
{
    struct result r = VARQ("run", fmt("--scope=%s", params), fmt("--feed=%s", x_feed),
                           fmt("--fetch=y=%s", in_dir("y.npy")), "--workers=1", prog);
    cr_assert_eq(r.status, 0, "exit %d, stderr: %s", r.status, r.err);
    assert_y_file(in_dir("y.npy"));
    result_free(&r);
}

Test(cli, repeat_runs_the_program_that_many_times_with_one_plan)
{
    struct result r = VARQ("run", prog, "--scope", params, "--feed", x_feed, "--fetch",
                           fmt("y=%s", in_dir("y.npy")), "--repeat", "3", "--workers", "2");
    cr_assert_eq(r.status, 0, "exit %d, stderr: %s", r.status, r.err);
    assert_y_file(in_dir("y.npy"));
    cr_assert_not_null(strstr(r.err, "3 runs,"), "%s", r.err);
    cr_assert_not_null(strstr(r.err, "1 plan prepared"), "%s", r.err);
    result_free(&r);
}

Test(cli, warmup_runs_come_first_and_stay_out_of_the_mean)
{
    const char *trace = in_dir("warm_trace.json");
    struct result r = VARQ("run", prog, "--scope", params, "--feed", x_feed, "--fetch",
                           fmt("y=%s", in_dir("y.npy")), "--repeat", "2", "--warmup", "3",
                           "--workers", "2", "--profile", trace);
    cr_assert_eq(r.status, 0, "exit %d, stderr: %s", r.status, r.err);
    assert_y_file(in_dir("y.npy"));
    cr_assert_not_null(strstr(r.err, "2 runs after the warm-up,"), "%s", r.err);
    cr_assert_not_null(strstr(r.err, "1 plan prepared"), "%s", r.err);
    result_free(&r);
    /* five runs in all: five "feed" records in the trace */
    char *json = read_file(trace, NULL);
    int feeds = 0;
    for (const char *p = json; (p = strstr(p, "\"name\":\"feed\"")); p++)
        feeds++;
    free(json);
    cr_assert_eq(feeds, 5, "%d runs in the trace, want 2 + 3 warm-up", feeds);
    assert_usage_error(VARQ("run", prog, "--warmup", "-1"));
    assert_usage_error(VARQ("run", prog, "--warmup", "x"));
}

Test(cli, profile_writes_a_chrome_trace_naming_the_ops)
{
    const char *trace = in_dir("trace.json");
    struct result r = VARQ("run", prog, "--scope", params, "--feed", x_feed, "--profile", trace,
                           "--repeat", "2", "--workers", "2");
    cr_assert_eq(r.status, 0, "exit %d, stderr: %s", r.status, r.err);
    result_free(&r);
    char *json = read_file(trace, NULL);
    const char *start = json + strspn(json, " \t\r\n");
    cr_assert(*start == '[' || *start == '{', "trace starts with: %.40s", json);
    cr_assert_not_null(strstr(json, "matmul"), "no matmul in the trace: %.200s", json);
    free(json);
}

Test(cli, fetch_without_a_file_prints_dtype_shape_and_values)
{
    struct result r =
        VARQ("run", prog, "--scope", params, "--feed", x_feed, "--fetch", "y", "--workers", "1");
    cr_assert_eq(r.status, 0, "exit %d, stderr: %s", r.status, r.err);
    char want[256];
    snprintf(want, sizeof want, "y: f32[2,2] = [%.9g, %.9g, %.9g, %.9g]\n", (double)want_y[0],
             (double)want_y[1], (double)want_y[2], (double)want_y[3]);
    cr_assert_str_eq(r.out, want);
    result_free(&r);
}

Test(cli, printing_a_large_fetch_shows_the_first_ten_values)
{
    /* A program that reshapes a 20-element i64 feed to [4,5]. */
    vq_program *p;
    cr_assert_eq(vq_program_new(&p), 0);
    int64_t s[2] = {4, 5}, n[1] = {20};
    cr_assert_eq(vq_program_add_var(p, 0, "a", VQ_I64, 1, n, false), 0);
    cr_assert_eq(vq_program_add_var(p, 0, "b", VQ_I64, 2, s, false), 0);
    vq_attr shape = VQ_ATTR_IS("shape", s, 2);
    cr_assert_geq(vq_program_add_op(p, 0, "reshape", NAMES("a"), 1, NAMES("b"), 1, &shape, 1),
                  0, "%s", vq_errmsg());
    cr_assert_eq(vq_program_save(p, in_dir("copy.pb")), 0, "%s", vq_errmsg());
    vq_program_free(p);
    int64_t v[20];
    for (int i = 0; i < 20; i++)
        v[i] = i;
    vq_tensor *a;
    cr_assert_eq(vq_tensor_from(&a, VQ_I64, 1, n, v), 0);
    write_npy(in_dir("a.npy"), a);
    vq_tensor_release(a);
    struct result r = VARQ("run", in_dir("copy.pb"), "--feed", fmt("a=%s", in_dir("a.npy")),
                           "--fetch", "b", "--workers", "1");
    cr_assert_eq(r.status, 0, "exit %d, stderr: %s", r.status, r.err);
    cr_assert_str_eq(r.out, "b: i64[4,5] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, ...]\n");
    result_free(&r);
}

/* A uint8 image fed from a .npy file, cast to f32 and to f16 (printed as
 * the f16 values), saved in the program file with its u8 var. */
Test(cli, run_feeds_a_uint8_npy_and_prints_f16_fetches)
{
    vq_program *p;
    cr_assert_eq(vq_program_new(&p), 0);
    int64_t s[2] = {2, 3};
    cr_assert_eq(vq_program_add_var(p, 0, "img", VQ_U8, 2, s, false), 0);
    cr_assert_eq(vq_program_add_var(p, 0, "f", VQ_F32, 2, s, false), 0);
    cr_assert_eq(vq_program_add_var(p, 0, "h", VQ_F16, 2, s, false), 0);
    vq_attr to32 = VQ_ATTR_S("dtype", "float32"), to16 = VQ_ATTR_S("dtype", "f16");
    cr_assert_geq(vq_program_add_op(p, 0, "cast", NAMES("img"), 1, NAMES("f"), 1, &to32, 1), 0,
                  "%s", vq_errmsg());
    cr_assert_geq(vq_program_add_op(p, 0, "cast", NAMES("img"), 1, NAMES("h"), 1, &to16, 1), 0,
                  "%s", vq_errmsg());
    cr_assert_eq(vq_program_save(p, in_dir("u8.pb")), 0, "%s", vq_errmsg());
    vq_program_free(p);
    const uint8_t px[6] = {0, 1, 127, 128, 254, 255};
    vq_tensor *img;
    cr_assert_eq(vq_tensor_from(&img, VQ_U8, 2, s, px), 0);
    write_npy(in_dir("img.npy"), img);
    vq_tensor_release(img);
    struct result r = VARQ("run", in_dir("u8.pb"), "--feed", fmt("img=%s", in_dir("img.npy")),
                           "--fetch", "f", "--fetch", "h", "--workers", "1");
    cr_assert_eq(r.status, 0, "exit %d, stderr: %s", r.status, r.err);
    cr_assert_str_eq(r.out, "f: f32[2,3] = [0, 1, 127, 128, 254, 255]\n"
                            "h: f16[2,3] = [0, 1, 127, 128, 254, 255]\n");
    result_free(&r);
    r = VARQ("dump", in_dir("u8.pb"));
    cr_assert_eq(r.status, 0, "exit %d, stderr: %s", r.status, r.err);
    cr_assert(strstr(r.out, "var img : u8[2,3]") && strstr(r.out, "var h : f16[2,3]"), "%s", r.out);
    result_free(&r);
}

/* dir/newton.pb, saved by the newton_sqrt example (NEWTON_SQRT_BIN, set by
 * tests/meson.build): sqrt of an f64 vector a by Newton's method in a while
 * op, fetching x and the iteration count iters. */
static const char *newton_program(void)
{
    const char *bin = getenv("NEWTON_SQRT_BIN");
    cr_assert(bin != NULL && bin[0] != '\0',
              "NEWTON_SQRT_BIN is not set (tests/meson.build sets it)");
    const char *path = in_dir("newton.pb");
    struct result r = spawn((const char *const[]){bin, path, NULL});
    cr_assert_eq(r.status, 0, "newton_sqrt exit %d, stdout: %s, stderr: %s", r.status, r.out,
                 r.err);
    result_free(&r);
    return path;
}

Test(cli, run_loops_a_while_until_the_data_says_stop)
{
    const char *prog_newton = newton_program();
    /* Another length than the example's, and values it does not use. */
    enum { N = 6 };
    const double a[N] = {2, 9, 1e-4, 12345, 0.25, 7e8};
    vq_tensor *t;
    cr_assert_eq(vq_tensor_from(&t, VQ_F64, 1, (const int64_t[]){N}, a), 0, "%s", vq_errmsg());
    write_npy(in_dir("a.npy"), t);
    vq_tensor_release(t);
    struct result r = VARQ("run", prog_newton, "--feed", fmt("a=%s", in_dir("a.npy")), "--fetch",
                           fmt("x=%s", in_dir("x.npy")), "--fetch", "iters", "--workers", "4");
    cr_assert_eq(r.status, 0, "exit %d, stderr: %s", r.status, r.err);
    long long iters = -1;
    cr_assert_eq(sscanf(r.out, "iters: i64[] = [%lld]", &iters), 1, "stdout: %s", r.out);
    /* 7e8 from x = 7e8 halves about 15 times before it converges: a loop
     * that stopped after one pass, or ran to max_iters (100), is wrong. */
    cr_assert(iters > 10 && iters < 100, "iters = %lld", iters);
    result_free(&r);

    vq_tensor *x;
    cr_assert_eq(vq_npy_load(in_dir("x.npy"), &x), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_tensor_dtype(x), VQ_F64);
    cr_assert_eq(vq_tensor_ndim(x), 1);
    cr_assert_eq(vq_tensor_shape(x)[0], N);
    const double *xv = vq_tensor_data(x);
    for (int i = 0; i < N; i++)
        cr_assert(fabs(xv[i] - sqrt(a[i])) <= 1e-6, "x[%d] = %.17g, sqrt(%g) = %.17g", i, xv[i],
                  a[i], sqrt(a[i]));
    vq_tensor_release(x);
}

Test(cli, dump_shows_a_while_body_under_its_op)
{
    struct result r = VARQ("dump", newton_program());
    cr_assert_eq(r.status, 0, "exit %d, stderr: %s", r.status, r.err);
    const char *want = "max_iters=100}\n"
                       "  # reads also: one, eps, zero\n"
                       "  block 1 (body):\n"
                       "    var bx : f64[?]\n";
    cr_assert_not_null(strstr(r.out, want), "no \"%s\" in:\n%s", want, r.out);
    cr_assert_null(strstr(r.out, "(parent"), "%s", r.out);
    cr_assert_str_empty(r.err);
    result_free(&r);
}

Test(cli, gpu_runs_on_the_device_and_gives_the_same_fetches)
{
    setenv("VARQ_GPU_BACKEND", "emulated", 1); /* inherited by the tool */
    const char *saved = in_dir("saved_gpu");
    struct result r = VARQ("run", prog, "--scope", params, "--feed", x_feed, "--fetch",
                           fmt("y=%s", in_dir("y.npy")), "--save-scope", saved, "--gpu", "0",
                           "--repeat", "2");
    cr_assert_eq(r.status, 0, "exit %d, stderr: %s", r.status, r.err);
    assert_y_file(in_dir("y.npy"));
    result_free(&r);
    /* The scope went to the device and is saved back from it. */
    vq_tensor *w;
    cr_assert_eq(vq_npy_load(fmt("%s/w.npy", saved), &w), 0, "%s", vq_errmsg());
    cr_assert_eq(memcmp(vq_tensor_data(w), w_values, sizeof w_values), 0);
    vq_tensor_release(w);
    r = VARQ("run", prog, "--scope", params, "--feed", x_feed, "--fetch", "y", "--gpu=0");
    cr_assert_eq(r.status, 0, "exit %d, stderr: %s", r.status, r.err);
    cr_assert_not_null(strstr(r.out, "y: f32[2,2] = ["), "%s", r.out);
    result_free(&r);
    /* A GPU that does not exist: a run failure naming it. */
    r = VARQ("run", prog, "--scope", params, "--feed", x_feed, "--gpu", "7");
    cr_assert_not_null(strstr(r.err, "no GPU 7"), "%s", r.err);
    assert_run_failure(r);
}

Test(cli, save_scope_writes_the_parameters)
{
    const char *saved = in_dir("saved");
    struct result r = VARQ("run", prog, "--scope", params, "--feed", x_feed, "--save-scope", saved,
                           "--workers", "1");
    cr_assert_eq(r.status, 0, "exit %d, stderr: %s", r.status, r.err);
    result_free(&r);
    vq_tensor *w;
    cr_assert_eq(vq_npy_load(fmt("%s/w.npy", saved), &w), 0, "%s", vq_errmsg());
    cr_assert_eq(memcmp(vq_tensor_data(w), w_values, sizeof w_values), 0);
    vq_tensor_release(w);
}

Test(cli, numpy_reads_the_fetched_file)
{
    const char *y = in_dir("y.npy");
    struct result r = VARQ("run", prog, "--scope", params, "--feed", x_feed, "--fetch",
                           fmt("y=%s", y), "--workers", "1");
    cr_assert_eq(r.status, 0, "exit %d, stderr: %s", r.status, r.err);
    result_free(&r);
    r = spawn(NAMES(PYTHON, "-c",
                    "import numpy, sys\n"
                    "a = numpy.load(sys.argv[1])\n"
                    "assert a.dtype == numpy.float32 and a.shape == (2, 2), (a.dtype, a.shape)\n"
                    "print(' '.join(repr(float(v)) for v in a.ravel()))\n",
                    y, NULL));
    cr_assert_eq(r.status, 0, PYTHON " failed (exit %d; it needs python3-numpy, which "
                 "scripts/setup.sh installs): %s", r.status, r.err);
    char *p = r.out;
    for (int i = 0; i < 4; i++) {
        char *end;
        double v = strtod(p, &end);
        cr_assert(end != p, "numpy printed: %s", r.out);
        cr_assert_eq(v, (double)want_y[i], "numpy's y[%d] = %g, want %g", i, v,
                     (double)want_y[i]);
        p = end;
    }
    result_free(&r);
}

Test(cli, dump_prints_the_program)
{
    struct result r = VARQ("dump", prog);
    cr_assert_eq(r.status, 0, "exit %d, stderr: %s", r.status, r.err);
    cr_assert_not_null(strstr(r.out, "var w : f32[3,2] persistable\n"), "%s", r.out);
    cr_assert_not_null(strstr(r.out, "matmul(X=x, Y=w)"), "%s", r.out);
    cr_assert_not_null(strstr(r.out, "relu("), "%s", r.out);
    cr_assert_str_empty(r.err);
    result_free(&r);
}

Test(cli, ops_lists_every_registered_op_with_its_signature)
{
    struct result r = VARQ("ops");
    cr_assert_eq(r.status, 0, "exit %d, stderr: %s", r.status, r.err);
    int lines = 0;
    for (const char *c = r.out; *c; c++)
        lines += *c == '\n';
    cr_assert_eq(lines, vq_op_count());
    cr_assert_not_null(strstr(r.out, vq_op_signature("adam")), "%s", r.out);
    cr_assert(strncmp(r.out, "adam(", 5) == 0 || strstr(r.out, "\nadam(") != NULL, "%s", r.out);
    result_free(&r);
}

/* Lines of s that start with prefix. */
static int count_lines_starting(const char *s, const char *prefix)
{
    int n = 0;
    for (const char *line = s; *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : "")
        n += strncmp(line, prefix, strlen(prefix)) == 0;
    return n;
}

Test(cli, ops_markdown_is_a_table_row_per_op_with_kernels_and_gradient)
{
    struct result r = VARQ("ops", "--markdown");
    cr_assert_eq(r.status, 0, "exit %d, stderr: %s", r.status, r.err);
    cr_assert_str_empty(r.err);
    cr_assert_eq(strncmp(r.out, "<!-- Generated by `varq ops --markdown`", 39), 0, "%s", r.out);
    cr_assert_eq(count_lines_starting(r.out, "| `"), vq_op_count());
    cr_assert_not_null(strstr(r.out, "\n| `matmul` | `X`, `Y` | `Out` | `transpose_x:bool=false` "
                                     "`transpose_y:bool=false` `alpha:float=1` | CPU | yes |\n"),
                       "%s", r.out);
    cr_assert_not_null(strstr(r.out, "\n| `cond` | `Cond`, `X...` | `Out...` | "), "%s", r.out);
    cr_assert_not_null(strstr(r.out, " | executor (control flow) | yes |\n"), "%s", r.out);
    cr_assert_not_null(strstr(r.out, "\n| `argmax` | `X` | `Out` | "), "%s", r.out);
    result_free(&r);
    assert_usage_error(VARQ("ops", "--markdown", "extra"));
    assert_usage_error(VARQ("ops", "--md"));
    assert_usage_error(VARQ("onnx-ops", "--md"));
}

Test(cli, onnx_ops_markdown_is_a_table_row_per_onnx_op)
{
    int n = 0;
    while (vq_onnx_op_name(n))
        n++;
    struct result r = VARQ("onnx-ops", "--markdown");
    if (n == 0) { /* a build without the importer */
        cr_assert_eq(r.status, 1);
        result_free(&r);
        return;
    }
    cr_assert_eq(r.status, 0, "exit %d, stderr: %s", r.status, r.err);
    cr_assert_eq(count_lines_starting(r.out, "| `"), n);
    cr_assert_not_null(strstr(r.out, "\n| `Gemm` | [onnx.ai](https://onnx.ai/onnx/operators/"
                                     "onnx__Gemm.html) |\n"),
                       "%s", r.out);
    result_free(&r);
}

Test(cli, version_prints_the_library_version)
{
    struct result r = VARQ("--version");
    cr_assert_eq(r.status, 0, "exit %d, stderr: %s", r.status, r.err);
    cr_assert_str_eq(r.out, "varq " VQ_VERSION_STRING "\n");
    cr_assert_str_eq(vq_version(), VQ_VERSION_STRING);
    cr_assert_str_empty(r.err);
    result_free(&r);
}

Test(cli, help_prints_usage_on_stdout)
{
    const char *forms[] = {"--help", "-h", "help"};
    for (int i = 0; i < 3; i++) {
        struct result r = VARQ(forms[i]);
        cr_assert_eq(r.status, 0, "%s: exit %d", forms[i], r.status);
        cr_assert_eq(strncmp(r.out, "usage: varq", 11), 0, "%s: %s", forms[i], r.out);
        cr_assert_str_empty(r.err);
        result_free(&r);
    }
    struct result r = VARQ("run", "--help");
    cr_assert_eq(r.status, 0);
    cr_assert_eq(strncmp(r.out, "usage: varq", 11), 0, "%s", r.out);
    result_free(&r);
}

Test(cli, no_arguments_print_usage_on_stderr_and_exit_2)
{
    struct result r = spawn((const char *const[]){varq_bin(), NULL});
    cr_assert_eq(r.status, 2);
    cr_assert_str_empty(r.out);
    cr_assert_eq(strncmp(r.err, "usage: varq", 11), 0, "%s", r.err);
    result_free(&r);
}

Test(cli, bad_usage_exits_2_with_a_one_line_message)
{
    assert_usage_error(VARQ("frobnicate"));
    assert_usage_error(VARQ("--frobnicate"));
    assert_usage_error(VARQ("run", prog, "--frobnicate"));
    assert_usage_error(VARQ("run", prog, "-x"));
    assert_usage_error(VARQ("run", prog, "--feed"));
    assert_usage_error(VARQ("run", prog, "--fetch"));
    assert_usage_error(VARQ("run", prog, "--feed", in_dir("x.npy")));
    assert_usage_error(VARQ("run", prog, "--feed", "=x.npy"));
    assert_usage_error(VARQ("run", prog, "--feed", "x="));
    assert_usage_error(VARQ("run", prog, "--fetch", "=y.npy"));
    assert_usage_error(VARQ("run", prog, "--repeat", "0"));
    assert_usage_error(VARQ("run", prog, "--repeat", "3x"));
    assert_usage_error(VARQ("run", prog, "--repeat", "-1"));
    assert_usage_error(VARQ("run", prog, "--repeat", "99999999999999999999"));
    assert_usage_error(VARQ("run", prog, "--workers", "abc"));
    assert_usage_error(VARQ("run", prog, "--workers", "0"));
    assert_usage_error(VARQ("run", prog, "--workers", "100000"));
    assert_usage_error(VARQ("run", prog, "--gpu", "-1"));
    assert_usage_error(VARQ("run", prog, "--gpu", "one"));
    assert_usage_error(VARQ("run", prog, "--gpu", "64"));
    assert_usage_error(VARQ("run", "--feed", x_feed));
    assert_usage_error(VARQ("run", prog, prog));
    assert_usage_error(VARQ("dump"));
    assert_usage_error(VARQ("dump", prog, prog));
    assert_usage_error(VARQ("ops", "extra"));
}

Test(cli, a_missing_program_exits_1)
{
    assert_run_failure(VARQ("run", in_dir("none.pb")));
    assert_run_failure(VARQ("dump", in_dir("none.pb")));
}

Test(cli, a_truncated_program_exits_1)
{
    size_t len;
    char *pb = read_file(prog, &len);
    cr_assert_gt(len, 8);
    size_t cuts[] = {len / 2, len - 1, 1};
    for (int i = 0; i < 3; i++) {
        FILE *f = fopen(in_dir("cut.pb"), "wb");
        cr_assert_not_null(f);
        cr_assert_eq(fwrite(pb, 1, cuts[i], f), cuts[i]);
        cr_assert_eq(fclose(f), 0);
        assert_run_failure(VARQ("run", in_dir("cut.pb"), "--feed", x_feed));
        assert_run_failure(VARQ("dump", in_dir("cut.pb")));
    }
    free(pb);
}

Test(cli, a_program_of_random_bytes_exits_1)
{
    uint64_t state = 0x9e3779b97f4a7c15u; /* fixed: the same bytes on every run */
    for (int k = 0; k < 6; k++) {
        size_t len = 16 + (size_t)k * 97;
        FILE *f = fopen(in_dir("random.pb"), "wb");
        cr_assert_not_null(f);
        for (size_t i = 0; i < len; i++) {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            fputc((int)(state & 0xff), f);
        }
        cr_assert_eq(fclose(f), 0);
        assert_run_failure(VARQ("run", in_dir("random.pb")));
    }
    /* And an empty file. */
    FILE *f = fopen(in_dir("empty.pb"), "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fclose(f), 0);
    struct result r = VARQ("run", in_dir("empty.pb"));
    /* An empty protobuf is a valid empty message: either it loads as a
     * program without ops (and then fails or succeeds cleanly), or not. */
    cr_assert(r.status == 0 || r.status == 1, "exit %d: %s", r.status, r.err);
    result_free(&r);
}

Test(cli, a_missing_or_malformed_feed_file_exits_1)
{
    assert_run_failure(
        VARQ("run", prog, "--scope", params, "--feed", fmt("x=%s", in_dir("none.npy"))));
    FILE *f = fopen(in_dir("bad.npy"), "wb");
    cr_assert_not_null(f);
    fputs("\x93NUMPY this is not really one", f);
    cr_assert_eq(fclose(f), 0);
    assert_run_failure(
        VARQ("run", prog, "--scope", params, "--feed", fmt("x=%s", in_dir("bad.npy"))));
}

Test(cli, a_feed_of_the_wrong_shape_or_dtype_exits_1)
{
    float v[8] = {0};
    vq_tensor *t = f32_tensor(2, 4, v);
    write_npy(in_dir("x24.npy"), t);
    vq_tensor_release(t);
    struct result r = VARQ("run", prog, "--scope", params, "--feed",
                           fmt("x=%s", in_dir("x24.npy")), "--fetch", "y");
    cr_assert_str_empty(r.out);
    assert_run_failure(r);

    double d[6] = {0};
    int64_t s[2] = {2, 3};
    cr_assert_eq(vq_tensor_from(&t, VQ_F64, 2, s, d), 0);
    write_npy(in_dir("x64.npy"), t);
    vq_tensor_release(t);
    assert_run_failure(VARQ("run", prog, "--scope", params, "--feed",
                            fmt("x=%s", in_dir("x64.npy")), "--fetch", "y"));
}

Test(cli, a_run_missing_what_the_program_reads_exits_1)
{
    /* No scope: w is read but never written. */
    assert_run_failure(VARQ("run", prog, "--feed", x_feed, "--fetch", "y"));
    /* No feed. */
    assert_run_failure(VARQ("run", prog, "--scope", params, "--fetch", "y"));
    /* A fetch of a var the program does not have. */
    assert_run_failure(VARQ("run", prog, "--scope", params, "--feed", x_feed, "--fetch", "nope"));
    /* A scope directory that does not exist. */
    assert_run_failure(VARQ("run", prog, "--scope", in_dir("none"), "--feed", x_feed));
}

Test(cli, an_unwritable_output_exits_1)
{
    assert_run_failure(VARQ("run", prog, "--scope", params, "--feed", x_feed, "--fetch",
                            fmt("y=%s", in_dir("none/y.npy"))));
    assert_run_failure(VARQ("run", prog, "--scope", params, "--feed", x_feed, "--profile",
                            in_dir("none/trace.json")));
}

/* The entries of the test's directory whose names start with prefix. */
static int entries_starting(const char *prefix)
{
    DIR *d = opendir(dir);
    cr_assert_not_null(d, "%s: %s", dir, strerror(errno));
    int n = 0;
    for (struct dirent *de; (de = readdir(d)) != NULL;)
        n += strncmp(de->d_name, prefix, strlen(prefix)) == 0;
    closedir(d);
    return n;
}

/* A trace that cannot be written at the end (every write to /dev/full
 * fails with ENOSPC) is exit 1 naming the path and the cause, with no
 * summary; through --profile and through VARQ_PROFILE (which the engine
 * writes when it is freed, and the tool used to exit 0 after). */
Test(cli, a_trace_that_cannot_be_written_exits_1_naming_the_path_and_cause)
{
    for (int env = 0; env < 2; env++) {
        if (env)
            setenv("VARQ_PROFILE", "/dev/full", 1);
        struct result r =
            env ? VARQ("run", prog, "--scope", params, "--feed", x_feed)
                : VARQ("run", prog, "--scope", params, "--feed", x_feed, "--profile", "/dev/full");
        unsetenv("VARQ_PROFILE");
        cr_assert_not_null(strstr(r.err, "/dev/full"), "no path: %s", r.err);
        cr_assert_not_null(strstr(r.err, strerror(ENOSPC)), "no cause: %s", r.err);
        cr_assert_null(strstr(r.err, " run,"), "a summary after a lost trace: %s", r.err);
        cr_assert_str_empty(r.out);
        assert_run_failure(r);
    }
}

/* A disk that fills while the trace is written (here the file size limit:
 * writes past it fail with EFBIG) leaves no half-written trace: the file
 * that was there stays as it was, and no temporary file is left beside it. */
Test(cli, a_trace_cut_short_leaves_no_truncated_file)
{
    char trace[192]; /* in_dir's buffers are reused */
    snprintf(trace, sizeof trace, "%s", in_dir("trace.json"));
    FILE *f = fopen(trace, "w");
    cr_assert_not_null(f);
    fputs("previous\n", f);
    cr_assert_eq(fclose(f), 0);
    struct rlimit old, small = {2048, 2048};
    cr_assert_eq(getrlimit(RLIMIT_FSIZE, &old), 0);
    small.rlim_max = old.rlim_max;
    signal(SIGXFSZ, SIG_IGN); /* inherited: the tool sees EFBIG, not a signal */
    for (int env = 0; env < 2; env++) {
        if (env)
            setenv("VARQ_PROFILE", trace, 1);
        cr_assert_eq(setrlimit(RLIMIT_FSIZE, &small), 0, "%s", strerror(errno));
        /* 30 runs: a trace of some kilobytes */
        struct result r = env ? VARQ("run", prog, "--scope", params, "--feed", x_feed, "--repeat",
                                     "30", "--workers", "2")
                              : VARQ("run", prog, "--scope", params, "--feed", x_feed, "--repeat",
                                     "30", "--workers", "2", "--profile", trace);
        cr_assert_eq(setrlimit(RLIMIT_FSIZE, &old), 0);
        unsetenv("VARQ_PROFILE");
        cr_assert_not_null(strstr(r.err, trace), "no path: %s", r.err);
        cr_assert_not_null(strstr(r.err, strerror(EFBIG)), "no cause: %s", r.err);
        assert_run_failure(r);
        char *text = read_file(trace, NULL);
        cr_assert_str_eq(text, "previous\n", "the old trace was cut: %.60s", text);
        free(text);
        cr_assert_eq(entries_starting("trace.json"), 1, "a temporary file was left");
    }
    signal(SIGXFSZ, SIG_DFL);
}

/* --profile naming a place where no file can be created fails before
 * anything runs: no fetch is written, no trace, no probe left behind. */
Test(cli, a_profile_path_that_cannot_be_created_fails_before_running)
{
    char y[192], trace[192]; /* in_dir's buffers are reused */
    snprintf(y, sizeof y, "%s", in_dir("y.npy"));
    snprintf(trace, sizeof trace, "%s", in_dir("none/trace.json"));
    struct result r = VARQ("run", prog, "--scope", params, "--feed", x_feed, "--fetch",
                           fmt("y=%s", y), "--profile", trace);
    cr_assert_not_null(strstr(r.err, trace), "no path: %s", r.err);
    assert_run_failure(r);
    cr_assert_neq(access(y, F_OK), 0, "the run went ahead and wrote its fetch");
    /* a directory is not a trace */
    assert_run_failure(VARQ("run", prog, "--scope", params, "--feed", x_feed, "--fetch",
                            fmt("y=%s", y), "--profile", dir));
    cr_assert_neq(access(y, F_OK), 0, "the run went ahead and wrote its fetch");
    /* Permission bits stop everyone but root. */
    if (geteuid() != 0) {
        char ro[128];
        snprintf(ro, sizeof ro, "%s", in_dir("ro"));
        cr_assert_eq(mkdir(ro, 0500), 0, "%s", strerror(errno));
        snprintf(trace, sizeof trace, "%s/trace.json", ro);
        r = VARQ("run", prog, "--scope", params, "--feed", x_feed, "--fetch", fmt("y=%s", y),
                 "--profile", trace);
        cr_assert_not_null(strstr(r.err, trace), "no path: %s", r.err);
        assert_run_failure(r);
        cr_assert_neq(access(y, F_OK), 0, "the run went ahead and wrote its fetch");
        chmod(ro, 0700);
    }
}

/* The trace written in full: a JSON document from its first byte to its
 * last, and nothing else left beside it. */
Test(cli, a_written_trace_is_a_whole_json_document)
{
    char trace[192]; /* in_dir's buffers are reused */
    snprintf(trace, sizeof trace, "%s", in_dir("trace.json"));
    struct result r = VARQ("run", prog, "--scope", params, "--feed", x_feed, "--profile", trace);
    cr_assert_eq(r.status, 0, "exit %d, stderr: %s", r.status, r.err);
    result_free(&r);
    size_t n;
    char *json = read_file(trace, &n);
    while (n > 0 && strchr(" \t\r\n", json[n - 1]))
        n--;
    cr_assert(n > 2 && json[0] == '{' && json[n - 1] == '}', "not one JSON object: %s", json);
    cr_assert_not_null(strstr(json, "relu"), "%s", json);
    free(json);
    cr_assert_eq(entries_starting("trace.json"), 1, "a temporary file was left");
}

/* The smallest model that imports: ir_version 8, a graph named g with no
 * nodes, opset 13 of ai.onnx (the bytes of its ModelProto). */
static const unsigned char EMPTY_ONNX[] = {0x08, 0x08, 0x3a, 0x03, 0x12, 0x01,
                                           0x67, 0x42, 0x02, 0x10, 0x0d};

/* import -o naming the model (by its name, a symbolic link or a hard
 * link) wrote the program over it and exited 0. */
Test(cli, import_refuses_to_write_over_its_own_model)
{
    if (!vq_onnx_op_name(0))
        cr_skip_test("no ONNX importer in this build");
    char model[192], sym[192], hard[192], pb[192]; /* in_dir's buffer is reused */
    snprintf(model, sizeof model, "%s", in_dir("m.onnx"));
    snprintf(sym, sizeof sym, "%s", in_dir("sym.onnx"));
    snprintf(hard, sizeof hard, "%s", in_dir("hard.onnx"));
    snprintf(pb, sizeof pb, "%s", in_dir("m.pb"));
    FILE *f = fopen(model, "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(EMPTY_ONNX, 1, sizeof EMPTY_ONNX, f), sizeof EMPTY_ONNX);
    fclose(f);
    struct result r = VARQ("import", model, "-o", pb);
    cr_assert_eq(r.status, 0, "the model imports: exit %d, stderr: %s", r.status, r.err);
    result_free(&r);
    cr_assert_eq(symlink("m.onnx", sym), 0);
    cr_assert_eq(link(model, hard), 0);
    const char *outs[3] = {model, sym, hard};
    for (int i = 0; i < 3; i++) {
        r = VARQ("import", model, "-o", outs[i]);
        cr_assert_not_null(strstr(r.err, "is the model"), "%s", r.err);
        assert_run_failure(r);
        size_t len;
        char *kept = read_file(model, &len);
        cr_assert(len == sizeof EMPTY_ONNX && !memcmp(kept, EMPTY_ONNX, len),
                  "the model was overwritten (output %s)", outs[i]);
        free(kept);
    }
    unlink(sym);
    unlink(hard);
    unlink(model);
    unlink(pb);
}

Test(cli, a_failing_op_exits_1_naming_the_op)
{
    /* cross_entropy with a label outside the classes fails while it runs. */
    vq_program *p;
    cr_assert_eq(vq_program_new(&p), 0);
    int64_t xs[2] = {2, 2}, ls[1] = {2}, os[2] = {2, 1};
    cr_assert_eq(vq_program_add_var(p, 0, "x", VQ_F32, 2, xs, false), 0);
    cr_assert_eq(vq_program_add_var(p, 0, "label", VQ_I64, 1, ls, false), 0);
    cr_assert_eq(vq_program_add_var(p, 0, "loss", VQ_F32, 2, os, false), 0);
    cr_assert_geq(vq_program_add_op(p, 0, "cross_entropy", NAMES("x", "label"), 2, NAMES("loss"),
                                    1, NULL, 0),
                  0, "%s", vq_errmsg());
    cr_assert_eq(vq_program_save(p, in_dir("ce.pb")), 0, "%s", vq_errmsg());
    vq_program_free(p);
    const float xv[4] = {0.5f, 0.5f, 0.25f, 0.75f};
    const int64_t lv[2] = {0, 7};
    vq_tensor *x = f32_tensor(2, 2, xv), *label;
    cr_assert_eq(vq_tensor_from(&label, VQ_I64, 1, ls, lv), 0);
    write_npy(in_dir("ce_x.npy"), x);
    write_npy(in_dir("label.npy"), label);
    vq_tensor_release(x);
    vq_tensor_release(label);
    for (int repeat = 1; repeat <= 3; repeat += 2) {
        struct result r = VARQ("run", in_dir("ce.pb"), "--feed", fmt("x=%s", in_dir("ce_x.npy")),
                               "--feed", fmt("label=%s", in_dir("label.npy")), "--fetch",
                               fmt("loss=%s", in_dir("loss.npy")), "--repeat",
                               repeat == 1 ? "1" : "3");
        cr_assert_not_null(strstr(r.err, "cross_entropy"), "%s", r.err);
        assert_run_failure(r);
        cr_assert_neq(access(in_dir("loss.npy"), F_OK), 0, "a failed run wrote its fetch");
    }
}

/* Two models for `varq onnx-ops MODEL.onnx` (ModelProto bytes, opset 13,
 * made with python3-onnx's helper): RELU2 is two Relu nodes, the second
 * named "r1"; UNSUPPORTED is a Relu of graph input x (f32 [3]), an Adagrad
 * named "nz", an unnamed Adagrad (output "n2") and a Foo of domain
 * com.example (output "f"). */
static const unsigned char RELU2_ONNX[] = {0x08, 0x08, 0x3a, 0x23, 0x0a, 0x0c, 0x0a, 0x01, 0x78,
                                           0x12, 0x01, 0x61, 0x22, 0x04, 0x52, 0x65, 0x6c, 0x75,
                                           0x0a, 0x10, 0x0a, 0x01, 0x61, 0x12, 0x01, 0x62, 0x1a,
                                           0x02, 0x72, 0x31, 0x22, 0x04, 0x52, 0x65, 0x6c, 0x75,
                                           0x12, 0x01, 0x67, 0x42, 0x04, 0x0a, 0x00, 0x10, 0x0d};
static const unsigned char UNSUPPORTED_ONNX[] =
    {0x08, 0x08, 0x3a, 0x64, 0x0a, 0x0c, 0x0a, 0x01, 0x78, 0x12, 0x01, 0x61, 0x22, 0x04, 0x52, 0x65,
     0x6c, 0x75, 0x0a, 0x14, 0x0a, 0x01, 0x61, 0x12, 0x02, 0x6e, 0x31, 0x1a, 0x02, 0x6e, 0x7a, 0x22,
     0x07, 0x41, 0x64, 0x61, 0x67, 0x72, 0x61, 0x64, 0x0a, 0x10, 0x0a, 0x01, 0x61, 0x12, 0x02, 0x6e,
     0x32, 0x22, 0x07, 0x41, 0x64, 0x61, 0x67, 0x72, 0x61, 0x64, 0x0a, 0x18, 0x0a, 0x01, 0x61, 0x12,
     0x01, 0x66, 0x22, 0x03, 0x46, 0x6f, 0x6f, 0x3a, 0x0b, 0x63, 0x6f, 0x6d, 0x2e, 0x65, 0x78, 0x61,
     0x6d, 0x70, 0x6c, 0x65, 0x12, 0x01, 0x67, 0x5a, 0x0f, 0x0a, 0x01, 0x78, 0x12, 0x0a, 0x0a, 0x08,
     0x08, 0x01, 0x12, 0x04, 0x0a, 0x02, 0x08, 0x03, 0x42, 0x04, 0x0a, 0x00, 0x10, 0x0d};

static void write_bytes(const char *path, const unsigned char *b, size_t n)
{
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "%s: %s", path, strerror(errno));
    cr_assert_eq(fwrite(b, 1, n, f), n);
    fclose(f);
}

/* The line of stdout that starts with start, or NULL. */
static const char *line_starting(const char *out, const char *start)
{
    for (const char *l = out; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
        if (strncmp(l, start, strlen(start)) == 0)
            return l;
    return NULL;
}

Test(cli, onnx_ops_of_a_model_of_translated_ops_counts_them_and_exits_0)
{
    if (!vq_onnx_op_name(0))
        cr_skip_test("no ONNX importer in this build");
    char model[192];
    snprintf(model, sizeof model, "%s", in_dir("relu2.onnx"));
    write_bytes(model, RELU2_ONNX, sizeof RELU2_ONNX);
    struct result r = VARQ("onnx-ops", model);
    cr_assert_eq(r.status, 0, "exit %d, stderr: %s", r.status, r.err);
    cr_assert_str_empty(r.err);
    const char *relu = line_starting(r.out, "  Relu ");
    cr_assert_not_null(relu, "%s", r.out);
    char count[16], yes[8];
    cr_assert_eq(sscanf(relu, " Relu %15s %7s", count, yes), 2, "%s", relu);
    cr_assert_str_eq(count, "2");
    cr_assert_str_eq(yes, "yes");
    cr_assert_not_null(strstr(r.out, "\n1 op type, 0 not translated by varq\n"), "%s", r.out);
    result_free(&r);
}

Test(cli, onnx_ops_of_a_model_marks_the_untranslated_types_and_exits_1)
{
    if (!vq_onnx_op_name(0))
        cr_skip_test("no ONNX importer in this build");
    char model[192];
    snprintf(model, sizeof model, "%s", in_dir("unsupported.onnx"));
    write_bytes(model, UNSUPPORTED_ONNX, sizeof UNSUPPORTED_ONNX);
    struct result r = VARQ("onnx-ops", model);
    cr_assert_eq(r.status, 1, "exit %d, stdout: %s, stderr: %s", r.status, r.out, r.err);
    const char *want[][3] = {{"  Adagrad ", "2", "no"},
                             {"  Relu ", "1", "yes"},
                             {"  com.example:Foo ", "1", "no"}};
    for (int i = 0; i < 3; i++) {
        const char *l = line_starting(r.out, want[i][0]);
        cr_assert_not_null(l, "no line %s in: %s", want[i][0], r.out);
        char count[16], mark[8];
        cr_assert_eq(sscanf(l + strlen(want[i][0]), "%15s %7s", count, mark), 2, "%s", l);
        cr_assert_str_eq(count, want[i][1], "%s", l);
        cr_assert_str_eq(mark, want[i][2], "%s", l);
    }
    cr_assert_not_null(strstr(line_starting(r.out, "  Adagrad "), "first: node 1 \"nz\"\n"), "%s",
                       r.out);
    cr_assert_not_null(strstr(r.out, "first: node 3 (output \"f\")\n"), "%s", r.out);
    cr_assert_not_null(strstr(r.out, "\n3 op types, 2 not translated by varq"), "%s", r.out);
    result_free(&r);
    /* the import says the same, in one line */
    r = VARQ("import", model, "-o", in_dir("unsupported.pb"));
    cr_assert_not_null(strstr(r.err, "Adagrad (2 nodes, the first: node 1 \"nz\")"), "%s", r.err);
    cr_assert_not_null(strstr(r.err, "Foo of domain com.example"), "%s", r.err);
    assert_run_failure(r);
}

Test(cli, onnx_ops_of_a_missing_or_malformed_model_exits_2)
{
    if (!vq_onnx_op_name(0))
        cr_skip_test("no ONNX importer in this build");
    struct result r = VARQ("onnx-ops", in_dir("missing.onnx"));
    cr_assert_eq(r.status, 2, "exit %d, stderr: %s", r.status, r.err);
    assert_one_line_message(&r);
    cr_assert_not_null(strstr(r.err, "missing.onnx"), "%s", r.err);
    cr_assert_str_empty(r.out);
    result_free(&r);
    char model[192];
    snprintf(model, sizeof model, "%s", in_dir("garbage.onnx"));
    write_bytes(model, (const unsigned char *)"garbage", 7);
    r = VARQ("onnx-ops", model);
    cr_assert_eq(r.status, 2, "exit %d, stderr: %s", r.status, r.err);
    assert_one_line_message(&r);
    cr_assert_not_null(strstr(r.err, "not an ONNX model"), "%s", r.err);
    result_free(&r);
    assert_usage_error(VARQ("onnx-ops", model, "--markdown"));
}
