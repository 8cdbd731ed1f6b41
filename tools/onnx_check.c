/* onnx_check: runs ONNX backend test cases (a directory holding model.onnx
 * and test_data_set_N/ with input_K.pb and output_K.pb TensorProtos, as
 * ONNX's `backend-test-tools generate-data` writes them) through varq and
 * compares every output with the expected one, with the backend tests'
 * tolerance (|got - want| <= atol + rtol |want|, rtol 1e-3, atol 1e-7;
 * integers and bools exactly; NaN matches NaN). The outputs of a model
 * that draws random numbers (Bernoulli, RandomUniform, RandomNormal and
 * their Like forms, Multinomial) are compared by dtype and shape only:
 * ONNX made their expected values with numpy's generator, which varq's
 * (Philox) does not reproduce. Nor does a Dropout in training mode: in a
 * model with Dropout, an output that does not match exactly is compared
 * where neither value is 0 (the elements both kept: their scale 1 / (1 -
 * ratio)), a bool one (the mask) by shape only.
 *
 * usage: onnx_check [--workers N] [--gpu ID] CASE_DIR...
 *        onnx_check --fuzz N CASE_DIR...
 * With --gpu, the executor runs the ops on GPU ID (the CUDA backend, or
 * the emulated one: VARQ_GPU_BACKEND), the feeds copied there by the run
 * and the fetches copied back to the host before the comparison: the
 * imported model on the GPU executor, against the same expected outputs.
 * With --fuzz, N mutated copies of the cases' models (bytes flipped,
 * replaced, cut or repeated; spread over the cases) are imported, and
 * those that import are prepared with the case's first inputs: each must
 * succeed or fail with VQ_EINVAL, VQ_ENOSYS or VQ_EIO, never crash (the
 * ASan build runs this); prints how many imported and exits 1 on another
 * error code.
 * One line per case on stdout: "<status>\t<case>\t<message>", status being
 *   pass         every output of every data set matched
 *   fail         an output differs, or a run failed for another reason
 *   unsupported  the import or the preparation said VQ_ENOSYS (an op, an
 *                attribute value or a type varq does not have)
 * then "total: P pass, F fail, U unsupported" on stderr. Exit status 0
 * (the counts are the result); 2 for bad usage. scripts/onnx_conformance.sh
 * runs it over the whole generated suite. */
#include <varq/varq.h>

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

enum { PASS, FAIL, UNSUPPORTED };

/* The engine of the executor (for the copies of a GPU run's fetches). */
static vq_engine *the_engine;

/* snprintf whose cut-off (a path or message too long) is acceptable here. */
static void fmt(char *buf, size_t size, const char *f, ...) __attribute__((format(printf, 3, 4)));
static void fmt(char *buf, size_t size, const char *f, ...)
{
    va_list ap;
    va_start(ap, f);
    vsnprintf(buf, size, f, ap);
    va_end(ap);
}

static int read_all(const char *path, void **buf, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || st.st_size < 0) {
        fclose(f);
        return -1;
    }
    *len = (size_t)st.st_size;
    *buf = malloc(*len ? *len : 1);
    size_t got = *buf ? fread(*buf, 1, *len, f) : 0;
    fclose(f);
    if (!*buf || got != *len) {
        free(*buf);
        return -1;
    }
    return 0;
}

static double value_at(vq_tensor *t, int64_t i)
{
    const void *d = vq_tensor_data(t);
    switch (vq_tensor_dtype(t)) {
    case VQ_F32: return ((const float *)d)[i];
    case VQ_F64: return ((const double *)d)[i];
    case VQ_I32: return ((const int32_t *)d)[i];
    case VQ_I64: return (double)((const int64_t *)d)[i];
    case VQ_F16: return vq_f16_to_f32(((const uint16_t *)d)[i]);
    case VQ_BF16: return vq_bf16_to_f32(((const uint16_t *)d)[i]);
    case VQ_I8: return ((const int8_t *)d)[i];
    case VQ_I16: return ((const int16_t *)d)[i];
    case VQ_U16: return ((const uint16_t *)d)[i];
    case VQ_U32: return ((const uint32_t *)d)[i];
    case VQ_U64: return (double)((const uint64_t *)d)[i];
    default: return ((const unsigned char *)d)[i]; /* bool, u8 */
    }
}

/* ONNX's generator writes bfloat16 data as uint16 tensors (numpy has no
 * bfloat16): *t, a u16 tensor, becomes the bf16 tensor of its bits. */
static int as_bf16(vq_tensor **t)
{
    vq_tensor *b;
    int rc =
        vq_tensor_from(&b, VQ_BF16, vq_tensor_ndim(*t), vq_tensor_shape(*t), vq_tensor_data(*t));
    if (rc < 0)
        return rc;
    vq_tensor_release(*t);
    *t = b;
    return 0;
}

/* The graph inputs the model declares bf16 whose offered values are u16
 * (as_bf16): the model imported once without offers tells their dtypes. */
static void offers_retype(const char *model, vq_onnx_value *offers, int n)
{
    bool any = false;
    for (int i = 0; i < n; i++) /* a sequence's offer has no tensor of its own */
        any |= offers[i].tensor && vq_tensor_dtype(offers[i].tensor) == VQ_U16;
    vq_scope *s;
    vq_program *p;
    if (!any || vq_scope_new(&s) < 0)
        return;
    if (vq_program_from_onnx_file(&p, s, model) == 0) {
        for (int i = 0; i < n; i++) {
            vq_dtype dt;
            if (offers[i].tensor && vq_tensor_dtype(offers[i].tensor) == VQ_U16 &&
                vq_program_var_info(p, offers[i].name, &dt, NULL, NULL, NULL) == 0 && dt == VQ_BF16)
                as_bf16(&offers[i].tensor);
        }
        vq_program_free(p);
    }
    vq_scope_free(s);
}

/* How outputs are compared: exactly (with the tolerance), by dtype and
 * shape (a random op's), or where both are nonzero (a Dropout's). */
enum { EXACT, RANDOM, DROPOUT };

/* 0 when got matches want as mode says; else a message in msg. */
static int compare(vq_tensor *got, vq_tensor *want, const char *name, int mode, char *msg,
                   size_t size)
{
    bool random = mode == RANDOM;
    if (vq_tensor_dtype(got) != vq_tensor_dtype(want)) {
        fmt(msg, size, "%s: dtype %s, expected %s", name,
                 vq_dtype_name(vq_tensor_dtype(got)), vq_dtype_name(vq_tensor_dtype(want)));
        return -1;
    }
    int nd = vq_tensor_ndim(got);
    bool same = nd == vq_tensor_ndim(want);
    for (int i = 0; same && i < nd; i++)
        same = vq_tensor_shape(got)[i] == vq_tensor_shape(want)[i];
    if (!same) {
        fmt(msg, size, "%s: shape differs (rank %d, expected rank %d)", name, nd,
                 vq_tensor_ndim(want));
        return -1;
    }
    vq_dtype gdt = vq_tensor_dtype(got);
    bool exact = gdt != VQ_F32 && gdt != VQ_F64 && gdt != VQ_F16 && gdt != VQ_BF16;
    for (int64_t i = 0; !random && i < vq_tensor_numel(got); i++) {
        double a = value_at(got, i), b = value_at(want, i);
        if (isnan(a) && isnan(b))
            continue;
        bool ok = exact ? a == b : (a == b || fabs(a - b) <= 1e-7 + 1e-3 * fabs(b));
        if (!ok && mode == DROPOUT) {
            /* dropped in one of the two draws, or a mask (bools): shape only */
            if (vq_tensor_dtype(got) == VQ_BOOL)
                break;
            ok = a == 0 || b == 0;
        }
        if (!ok) {
            fmt(msg, size, "%s[%lld]: %.9g, expected %.9g", name, (long long)i, a, b);
            return -1;
        }
    }
    return 0;
}

/* The data of input or output file path, of kind (a tensor, a sequence
 * or an optional: ONNX's test files are TensorProtos, SequenceProtos and
 * OptionalProtos by the graph's declared type). */
static int load_data(const char *path, vq_onnx_kind kind, vq_onnx_data *d)
{
    void *buf;
    size_t len;
    memset(d, 0, sizeof *d);
    if (read_all(path, &buf, &len) < 0)
        return VQ_EIO;
    int rc = vq_onnx_data_read(d, kind, buf, len);
    free(buf);
    return rc;
}

/* The names the program gives value name's parts: name itself for a
 * tensor, name[k] for a sequence's element k. */
static char *part_name(const char *name, int k)
{
    char buf[8300];
    if (k < 0)
        fmt(buf, sizeof buf, "%s", name);
    else
        fmt(buf, sizeof buf, "%s[%d]", name, k);
    return strdup(buf);
}

static bool has_var(vq_program *p, const char *name)
{
    vq_dtype dt;
    int nd;
    int64_t shape[16];
    bool pers;
    return vq_program_var_info(p, name, &dt, &nd, shape, &pers) == 0;
}

/* Runs one data set directory of a case: each input fed (a sequence's
 * elements as NAME[k], an optional holding nothing not at all), each
 * output fetched likewise and compared; a sequence output must have the
 * expected length (no var NAME[n]), an optional one holding nothing no
 * var. */
static int run_set(vq_exec *ex, vq_program *p, vq_scope *s, const vq_onnx_info *info,
                   const char *set_dir, int mode, char *msg, size_t size)
{
    int cap = 1024, nfeeds = 0, nfetches = 0, status = PASS, rc;
    vq_feed *feeds = calloc((size_t)cap, sizeof *feeds);
    vq_fetch *fetches = calloc((size_t)cap, sizeof *fetches);
    char **names = calloc((size_t)cap * 2, sizeof *names);
    vq_tensor **wants = calloc((size_t)cap, sizeof *wants);
    int nnames = 0;
    char path[8192];
    vq_onnx_data *want = calloc((size_t)info->noutputs + 1, sizeof *want);
    if (!feeds || !fetches || !names || !wants || !want) {
        fmt(msg, size, "out of memory");
        status = FAIL;
    }
    for (int i = 0; i < info->ninputs && status == PASS; i++) {
        fmt(path, sizeof path, "%s/input_%d.pb", set_dir, i);
        vq_onnx_data d;
        rc = load_data(path, info->input_kinds[i], &d);
        if (rc == VQ_EIO)
            continue; /* optional inputs may be left out */
        if (rc < 0) {
            fmt(msg, size, "%s: %s", path, vq_errmsg());
            status = rc == VQ_ENOSYS ? UNSUPPORTED : FAIL;
            break;
        }
        int parts = d.sequence ? d.nelems : d.none ? 0 : 1;
        for (int k = 0; k < parts && status == PASS; k++) {
            if (nfeeds == cap || nnames == 2 * cap) {
                fmt(msg, size, "more than %d feeds", cap);
                status = FAIL;
                break;
            }
            char *nm = names[nnames++] = part_name(info->inputs[i], d.sequence ? k : -1);
            vq_tensor *t = vq_tensor_retain(d.sequence ? d.elems[k] : d.tensor);
            vq_dtype dt;
            if (vq_tensor_dtype(t) == VQ_U16 &&
                vq_program_var_info(p, nm, &dt, NULL, NULL, NULL) == 0 && dt == VQ_BF16)
                as_bf16(&t);
            feeds[nfeeds++] = (vq_feed){nm, t};
        }
        vq_onnx_data_free(&d);
    }
    for (int j = 0; j < info->noutputs && status == PASS; j++) {
        fmt(path, sizeof path, "%s/output_%d.pb", set_dir, j);
        vq_onnx_data *d = &want[j];
        rc = load_data(path, info->output_kinds[j], d);
        if (rc < 0) {
            fmt(msg, size, "%s: %s", path, rc == VQ_EIO ? "cannot read" : vq_errmsg());
            status = rc == VQ_ENOSYS ? UNSUPPORTED : FAIL;
            break;
        }
        int parts = d->sequence ? d->nelems : d->none ? 0 : 1;
        char *end = part_name(info->outputs[j], d->sequence ? parts : -1);
        bool extra = d->sequence || d->none ? has_var(p, end) : false;
        free(end);
        if (d->none && !extra) {
            end = part_name(info->outputs[j], 0);
            extra = has_var(p, end);
            free(end);
        }
        if (extra) {
            fmt(msg, size, "%s: %s", info->outputs[j],
                d->none ? "holds a value, expected none" : "has more elements than expected");
            status = FAIL;
        }
        for (int k = 0; k < parts && status == PASS; k++) {
            if (nfetches == cap || nnames == 2 * cap) {
                fmt(msg, size, "more than %d fetches", cap);
                status = FAIL;
                break;
            }
            char *nm = names[nnames++] = part_name(info->outputs[j], d->sequence ? k : -1);
            if (!has_var(p, nm)) {
                fmt(msg, size, "%s: no such output (fewer elements than expected?)", nm);
                status = FAIL;
                break;
            }
            wants[nfetches] = d->sequence ? d->elems[k] : d->tensor;
            fetches[nfetches++] = (vq_fetch){nm, NULL};
        }
    }
    if (status == PASS) {
        rc = vq_exec_run(ex, p, s, feeds, nfeeds, fetches, nfetches);
        if (rc < 0) {
            fmt(msg, size, "run: %s", vq_errmsg());
            status = rc == VQ_ENOSYS ? UNSUPPORTED : FAIL;
        }
    }
    for (int j = 0; j < nfetches && status == PASS; j++) {
        vq_tensor *got = fetches[j].tensor, *host = NULL, *w = wants[j], *wb = NULL;
        /* the expected bf16 data, as ONNX writes it (u16), read as bf16 */
        if (vq_tensor_dtype(w) == VQ_U16 && got && vq_tensor_dtype(got) == VQ_BF16) {
            if ((rc = vq_tensor_from(&wb, VQ_BF16, vq_tensor_ndim(w), vq_tensor_shape(w),
                                     vq_tensor_data(w))) < 0) {
                fmt(msg, size, "%s: %s", fetches[j].name, vq_errmsg());
                status = FAIL;
                break;
            }
            w = wb;
        }
        if (vq_tensor_device(got).kind != VQ_DEV_CPU &&
            ((rc = vq_tensor_copy_to(the_engine, got, (vq_ctx){VQ_DEV_CPU, 0}, &host)) < 0 ||
             (rc = vq_tensor_wait(host)) < 0)) {
            fmt(msg, size, "%s: copying to the host: %s", fetches[j].name, vq_errmsg());
            status = FAIL;
        } else if (compare(host ? host : got, w, fetches[j].name, mode, msg, size) < 0) {
            status = FAIL;
        }
        vq_tensor_release(host);
        vq_tensor_release(wb);
    }
    for (int i = 0; i < nfeeds; i++)
        vq_tensor_release(feeds[i].tensor);
    for (int j = 0; j < nfetches; j++)
        vq_tensor_release(fetches[j].tensor);
    for (int j = 0; want && j < info->noutputs; j++)
        vq_onnx_data_free(&want[j]);
    for (int i = 0; i < nnames; i++)
        free(names[i]);
    free(names);
    free(wants);
    free(want);
    free(feeds);
    free(fetches);
    return status;
}

static int run_case(vq_exec *ex, const char *dir, char *msg, size_t size)
{
    char path[8192];
    fmt(path, sizeof path, "%s/model.onnx", dir);
    void *buf;
    size_t len;
    if (read_all(path, &buf, &len) < 0) {
        fmt(msg, size, "%s: %s", path, strerror(errno));
        return FAIL;
    }
    vq_onnx_info info;
    vq_scope *s = NULL;
    vq_program *p = NULL;
    int status = PASS;
    static const char *const random_ops[] = {"Bernoulli",     "Multinomial",
                                             "RandomNormal",  "RandomNormalLike",
                                             "RandomUniform", "RandomUniformLike"};
    int mode = EXACT;
    vq_onnx_ops ops = {0};
    if (vq_onnx_ops_read(&ops, buf, len) == 0)
        for (int i = 0; i < ops.nops; i++) {
            for (size_t k = 0; k < sizeof random_ops / sizeof *random_ops; k++)
                if (!strcmp(ops.ops[i].type, random_ops[k]) && !*ops.ops[i].domain)
                    mode = RANDOM;
            if (!strcmp(ops.ops[i].type, "Dropout") && !*ops.ops[i].domain && mode == EXACT)
                mode = DROPOUT;
        }
    vq_onnx_ops_free(&ops);
    int rc = vq_onnx_info_read(&info, buf, len);
    free(buf);
    if (rc < 0) {
        fmt(msg, size, "%s", vq_errmsg());
        return rc == VQ_ENOSYS ? UNSUPPORTED : FAIL;
    }
    /* Each data set is imported with its inputs offered (vq_onnx_opts):
     * an input that gives a shape specializes the program on the set's
     * value, as `varq run` does with its feeds. */
    DIR *d = opendir(dir);
    int nsets = 0;
    char model[8192];
    fmt(model, sizeof model, "%s", path);
    for (struct dirent *e; d && status == PASS && (e = readdir(d));) {
        if (strncmp(e->d_name, "test_data_set_", 14))
            continue;
        fmt(path, sizeof path, "%s/%s", dir, e->d_name);
        vq_onnx_value *offers = calloc((size_t)info.ninputs + 1, sizeof *offers);
        vq_onnx_data *data = calloc((size_t)info.ninputs + 1, sizeof *data);
        int noffers = 0;
        for (int i = 0; offers && data && i < info.ninputs; i++) {
            char in[8300];
            fmt(in, sizeof in, "%s/input_%d.pb", path, i);
            vq_onnx_data *dd = &data[noffers];
            if (load_data(in, info.input_kinds[i], dd) == 0)
                offers[noffers++] = (vq_onnx_value){.name = info.inputs[i],
                                                    .tensor = dd->tensor,
                                                    .sequence = dd->sequence,
                                                    .nelems = dd->nelems,
                                                    .elems = dd->elems,
                                                    .none = dd->none};
        }
        /* the offers borrow data's tensors: a retyped one replaces its
         * data's (offers_retype released that), which frees it after */
        offers_retype(model, offers, noffers);
        for (int i = 0; i < noffers; i++)
            data[i].tensor = offers[i].tensor;
        vq_onnx_opts opts = {.values = offers, .nvalues = noffers};
        if ((rc = vq_scope_new(&s)) < 0 ||
            (rc = vq_program_from_onnx_file_opts(&p, s, model, &opts)) < 0) {
            fmt(msg, size, "%s", vq_errmsg());
            status = rc == VQ_ENOSYS ? UNSUPPORTED : FAIL;
        } else {
            status = run_set(ex, p, s, &info, path, mode, msg, size);
        }
        for (int i = 0; data && i < noffers; i++)
            vq_onnx_data_free(&data[i]);
        free(data);
        free(offers);
        vq_program_free(p);
        vq_scope_free(s);
        p = NULL;
        s = NULL;
        nsets++;
    }
    if (d)
        closedir(d);
    if (status == PASS && nsets == 0) {
        fmt(msg, size, "no test_data_set_N directory");
        status = FAIL;
    }
    vq_onnx_info_free(&info);
    return status;
}

static uint64_t rng_next(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 11;
}

/* Imports n mutations of dir's model; 0, or -1 on an unexpected code. */
static int fuzz_case(vq_exec *ex, const char *dir, int n, uint64_t *rng, int *imported)
{
    char path[8192];
    fmt(path, sizeof path, "%s/model.onnx", dir);
    void *base;
    size_t len;
    if (read_all(path, &base, &len) < 0 || len == 0)
        return 0;
    vq_onnx_info info;
    int have_info = vq_onnx_info_read(&info, base, len) == 0;
    char set[8200];
    fmt(set, sizeof set, "%s/test_data_set_0", dir);
    int bad = 0;
    for (int c = 0; c < n && !bad; c++) {
        uint8_t *buf = malloc(len * 2 + 16);
        if (!buf)
            break;
        memcpy(buf, base, len);
        size_t m = len;
        int edits = 1 + (int)(rng_next(rng) % 3);
        for (int k = 0; k < edits && m > 0; k++) {
            uint64_t r = rng_next(rng);
            size_t at = (size_t)(r % m);
            switch ((r >> 32) % 4) {
            case 0: buf[at] ^= (uint8_t)(1u << ((r >> 40) % 8)); break;
            case 1: buf[at] = (uint8_t)(r >> 44); break;
            case 2: m = at + 1; break;
            default:
                if (m + 8 <= len * 2) {
                    memmove(buf + at + 8, buf + at, m - at);
                    m += 8;
                }
            }
        }
        vq_scope *s = NULL;
        vq_program *p = NULL;
        int rc = vq_scope_new(&s);
        if (rc == 0)
            rc = vq_program_from_onnx(&p, s, buf, m);
        if (rc != 0 && rc != VQ_EINVAL && rc != VQ_ENOSYS && rc != VQ_EIO) {
            fprintf(stderr, "onnx_check: fuzz %s case %d: unexpected %d: %s\n", dir, c, rc,
                    vq_errmsg());
            bad = 1;
        }
        if (rc == 0 && have_info) {
            char msg[256];
            ++*imported;
            run_set(ex, p, s, &info, set, EXACT, msg, sizeof msg); /* any result but a crash */
        }
        vq_program_free(p);
        vq_scope_free(s);
        free(buf);
    }
    if (have_info)
        vq_onnx_info_free(&info);
    free(base);
    return bad ? -1 : 0;
}

int main(int argc, char **argv)
{
    int workers = 2, first = 1, fuzz = 0, gpu = -1;
    for (; first + 1 < argc; first += 2) {
        if (!strcmp(argv[first], "--fuzz"))
            fuzz = atoi(argv[first + 1]);
        else if (!strcmp(argv[first], "--workers"))
            workers = atoi(argv[first + 1]);
        else if (!strcmp(argv[first], "--gpu"))
            gpu = atoi(argv[first + 1]);
        else
            break;
    }
    if (first >= argc || workers < 1 || fuzz < 0 || gpu < -1 || gpu > 63) {
        fprintf(stderr, "usage: onnx_check [--workers N] [--gpu ID] CASE_DIR...\n"
                        "       onnx_check --fuzz N CASE_DIR...\n");
        return 2;
    }
    vq_engine *e;
    vq_exec *ex;
    vq_engine_opts eo = {.kind = VQ_ENGINE_THREADED, .cpu_workers = workers};
    vq_exec_opts xo = {.device = {gpu >= 0 ? VQ_DEV_GPU : VQ_DEV_CPU, gpu >= 0 ? gpu : 0}};
    if (vq_engine_new(&e, &eo) < 0 || vq_exec_new(&ex, the_engine = e, &xo) < 0) {
        fprintf(stderr, "onnx_check: %s\n", vq_errmsg());
        return 1;
    }
    if (fuzz > 0) {
        int ncases = argc - first, imported = 0, status = 0;
        uint64_t rng = 0x0111e5eedull;
        for (int i = first; i < argc && status == 0; i++) {
            int share = fuzz / ncases + (i - first < fuzz % ncases);
            status = fuzz_case(ex, argv[i], share, &rng, &imported);
        }
        vq_exec_free(ex);
        vq_engine_free(e);
        printf("onnx_check: %d mutated models from %d cases, %d imported: %s\n", fuzz, ncases,
               imported, status ? "FAILED" : "ok");
        return status ? 1 : 0;
    }
    int count[3] = {0};
    static const char *const names[] = {"pass", "fail", "unsupported"};
    for (int i = first; i < argc; i++) {
        char msg[1024] = "";
        int st = run_case(ex, argv[i], msg, sizeof msg);
        count[st]++;
        size_t n = strlen(argv[i]);
        while (n > 1 && argv[i][n - 1] == '/')
            argv[i][--n] = '\0';
        const char *base = strrchr(argv[i], '/');
        base = base ? base + 1 : argv[i];
        for (char *c = msg; *c; c++)
            if (*c == '\n' || *c == '\t')
                *c = ' ';
        printf("%s\t%s\t%s\n", names[st], base, msg);
        fflush(stdout);
    }
    vq_exec_free(ex);
    vq_engine_free(e);
    fprintf(stderr, "total: %d pass, %d fail, %d unsupported\n", count[PASS], count[FAIL],
            count[UNSUPPORTED]);
    return 0;
}
