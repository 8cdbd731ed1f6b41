/* Builder and run fixtures the suites share (test_control.c, test_exec.c,
 * test_exec_gpu.c, test_onnx.c, programs.h): programs declared from a short
 * text (vars by type, ops as `type in... -> out...`), tensors made and
 * released in one call, a fetch brought to the host. Each call fails the
 * test with varq's message where the builder or the runtime refuses, so a
 * suite states what it builds and what it checks, not the plumbing. */
#ifndef VARQ_TESTS_FIXTURES_H
#define VARQ_TESTS_FIXTURES_H

#include <varq/varq.h>

#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef NAMES
#define NAMES(...) ((const char *const[]){__VA_ARGS__})
#endif
#ifndef N_OF
#define N_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))
#endif

/* The most words (names, types) one statement of a spec holds. */
#define FX_MAX_WORDS 32

static inline vq_program *new_program(void)
{
    vq_program *p;
    cr_assert_eq(vq_program_new(&p), 0);
    return p;
}

static inline int new_block(vq_program *p, int parent)
{
    int b = vq_program_add_block(p, parent);
    cr_assert_geq(b, 0, "%s", vq_errmsg());
    return b;
}

/* Splits one statement of a spec (text up to ';' or the end) into words at
 * whitespace, in place in buf; returns the rest of the spec after the ';'
 * (NULL at the end). */
static inline const char *spec_words(const char *spec, char *buf, size_t cap, char **words,
                                     int *nwords)
{
    const char *end = strchr(spec, ';');
    size_t n = end ? (size_t)(end - spec) : strlen(spec);
    cr_assert_lt(n, cap, "spec statement too long: %s", spec);
    memcpy(buf, spec, n);
    buf[n] = '\0';
    *nwords = 0;
    for (char *w = strtok(buf, " \t\n"); w; w = strtok(NULL, " \t\n")) {
        cr_assert_lt(*nwords, FX_MAX_WORDS, "spec statement has too many words: %s", spec);
        words[(*nwords)++] = w;
    }
    return end ? end + 1 : NULL;
}

/* Parses "f64", "bool", "f32[4]", "f64[-1,5]" into a dtype and shape. */
static inline void spec_type(const char *word, vq_dtype *dt, int *ndim, int64_t *shape)
{
    char name[16];
    size_t n = strcspn(word, "[");
    cr_assert_lt(n, sizeof name, "bad type in spec: %s", word);
    memcpy(name, word, n);
    name[n] = '\0';
    cr_assert_eq(vq_dtype_parse(name, dt), 0, "bad dtype in spec: %s", word);
    *ndim = 0;
    for (const char *c = word + n; *c == '[' || *c == ',';) {
        char *next;
        shape[(*ndim)++] = strtoll(c + 1, &next, 10);
        cr_assert(next != c + 1 && *ndim <= VQ_MAX_DIMS, "bad shape in spec: %s", word);
        c = next;
    }
}

/* Calls stmt with the words of each non-empty statement of spec. */
static inline void spec_each(vq_program *p, int b, const char *spec,
                             void (*stmt)(vq_program *, int, char **, int))
{
    char buf[1024], *w[FX_MAX_WORDS];
    int nw;
    while (spec) {
        spec = spec_words(spec, buf, sizeof buf, w, &nw);
        if (nw > 0)
            stmt(p, b, w, nw);
    }
}

/* "TYPE name name ...": see declare_vars. */
static inline void declare_statement(vq_program *p, int b, char **w, int nw)
{
    vq_dtype dt;
    int ndim;
    int64_t shape[VQ_MAX_DIMS];
    spec_type(w[0], &dt, &ndim, shape);
    for (int i = 1; i < nw; i++) {
        size_t len = strlen(w[i]);
        bool persistable = w[i][len - 1] == '*';
        if (persistable)
            w[i][len - 1] = '\0';
        cr_assert_eq(vq_program_add_var(p, b, w[i], dt, ndim, ndim ? shape : NULL, persistable), 0,
                     "%s", vq_errmsg());
    }
}

/* "type in in ... -> out ...": see add_ops. */
static inline void op_statement(vq_program *p, int b, char **w, int nw)
{
    int arrow = 1;
    while (arrow < nw && strcmp(w[arrow], "->") != 0)
        arrow++;
    cr_assert_lt(arrow, nw, "op statement without ->: %s", w[0]);
    int rc = vq_program_add_op(p, b, w[0], (const char *const *)w + 1, arrow - 1,
                               (const char *const *)w + arrow + 1, nw - arrow - 1, NULL, 0);
    cr_assert_geq(rc, 0, "%s", vq_errmsg());
}

/* Declares vars in block b from statements "TYPE name name ...;" where
 * TYPE is a dtype with an optional shape ("f64", "f32[4]", "f64[-1,5]"); a
 * name written with a trailing '*' is persistable. */
static inline void declare_vars(vq_program *p, int b, const char *spec)
{
    spec_each(p, b, spec, declare_statement);
}

/* Adds ops without attributes to block b from statements
 * "type in in ... -> out ...;" in order. */
static inline void add_ops(vq_program *p, int b, const char *spec)
{
    spec_each(p, b, spec, op_statement);
}

/* A new program whose block 0 declares vars (a declare_vars spec). */
static inline vq_program *program_with_vars(const char *vars)
{
    vq_program *p = new_program();
    declare_vars(p, 0, vars);
    return p;
}

/* A new program whose block 0 declares vars and runs ops (specs as
 * declare_vars and add_ops take them). */
static inline vq_program *program_of(const char *vars, const char *ops)
{
    vq_program *p = program_with_vars(vars);
    add_ops(p, 0, ops);
    return p;
}

/* A new child block of parent with vars declared and ops added (specs as
 * declare_vars and add_ops take them); returns its index. */
static inline int block_with(vq_program *p, int parent, const char *vars, const char *ops)
{
    int b = new_block(p, parent);
    declare_vars(p, b, vars);
    add_ops(p, b, ops);
    return b;
}

/* declare_vars and add_ops with the spec written by printf. */
#define SPEC_PRINTF(spec, fmt)                            \
    char spec[1024];                                      \
    va_list ap;                                           \
    va_start(ap, fmt);                                    \
    int spec##_n = vsnprintf(spec, sizeof spec, fmt, ap); \
    va_end(ap);                                           \
    cr_assert(spec##_n >= 0 && (size_t)spec##_n < sizeof spec, "spec too long: %s", fmt)

static inline void declare_varsf(vq_program *p, int b, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline void declare_varsf(vq_program *p, int b, const char *fmt, ...)
{
    SPEC_PRINTF(spec, fmt);
    declare_vars(p, b, spec);
}

static inline void add_opsf(vq_program *p, int b, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline void add_opsf(vq_program *p, int b, const char *fmt, ...)
{
    SPEC_PRINTF(spec, fmt);
    add_ops(p, b, spec);
}

/* A tensor of dtype dt and the given shape holding a copy of data. */
static inline vq_tensor *tensor_of(vq_dtype dt, int ndim, const int64_t *shape, const void *data)
{
    vq_tensor *t;
    cr_assert_eq(vq_tensor_from(&t, dt, ndim, shape, data), 0);
    return t;
}

/* An uninitialized tensor of dtype dt and the given shape. */
static inline vq_tensor *tensor_new(vq_dtype dt, int ndim, const int64_t *shape)
{
    vq_tensor *t;
    cr_assert_eq(vq_tensor_new(&t, dt, ndim, shape), 0);
    return t;
}

/* Releases n tensors (NULL entries skipped). */
static inline void release_tensors(vq_tensor *const *t, int n)
{
    for (int i = 0; i < n; i++)
        if (t[i])
            vq_tensor_release(t[i]);
}

/* Runs p with the one feed {feed, t} and the one fetch `fetch`, and checks
 * that the run is refused with VQ_EINVAL and a message holding needle. */
static inline void run_refused(vq_exec *ex, vq_program *p, vq_scope *s, const char *feed,
                               vq_tensor *t, const char *fetch, const char *needle)
{
    vq_feed fd = {feed, t};
    vq_fetch ft = {fetch, NULL};
    cr_assert_eq(vq_exec_run(ex, p, s, &fd, 1, &ft, 1), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), needle), "%s", vq_errmsg());
}

/* The data of a fetched tensor on the host: t itself on the CPU, else a
 * host copy (t is released). */
static inline vq_tensor *on_host(vq_engine *e, vq_tensor *t)
{
    if (vq_tensor_device(t).kind == VQ_DEV_CPU)
        return t;
    vq_tensor *h;
    cr_assert_eq(vq_tensor_copy_to(e, t, (vq_ctx){VQ_DEV_CPU, 0}, &h), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_tensor_wait(h), 0, "%s", vq_errmsg());
    vq_tensor_release(t);
    return h;
}

#endif
