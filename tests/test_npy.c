/* .npy reading and writing (tensor/npy.c): round trips through varq, files
 * exchanged with numpy both ways, every kind of rejection with its message,
 * and a fuzz run of the parser on truncated and mutated encodings.
 *
 * The numpy tests run /usr/bin/python3 (the system one, where scripts/
 * setup.sh installs python3-numpy); they fail, rather than skip, when it
 * cannot import numpy. VARQ_TEST_SEED=N replays a fuzz seed (failures name
 * it). */
#include <varq/tensor.h>

#include <criterion/criterion.h>

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../ops/ops_internal.h" /* vq__file_inject_fault */
#include "leakcheck.h"

#define PYTHON "/usr/bin/python3"

/* ---- a temporary directory per test (each test runs in its own process) ---- */

static char dir[64];

static void make_dir(void)
{
    strcpy(dir, "/tmp/varq_npy_XXXXXX");
    cr_assert_not_null(mkdtemp(dir), "mkdtemp: %s", strerror(errno));
}

/* Also checks for leaks under ASan (leakcheck.h). */
static void remove_dir(void)
{
    char cmd[128];
    if (dir[0]) {
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd) != 0)
            cr_log_warn("could not remove %s", dir);
    }
    leak_check();
}

TestSuite(npy, .init = make_dir, .fini = remove_dir);

static const char *in_dir(char *buf, size_t size, const char *name)
{
    snprintf(buf, size, "%s/%s", dir, name);
    return buf;
}

/* Entries of dir other than . and .. */
static int dir_entries(void)
{
    DIR *d = opendir(dir);
    cr_assert_not_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            n++;
    closedir(d);
    return n;
}

static unsigned char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "%s: %s", path, strerror(errno));
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc((size_t)n + 1);
    cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return buf;
}

static void write_file(const char *path, const void *buf, size_t len)
{
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "%s: %s", path, strerror(errno));
    cr_assert_eq(fwrite(buf, 1, len, f), len);
    cr_assert_eq(fclose(f), 0);
}

/* ---- the arrays every test uses; the Python scripts compute the same ---- */

static const struct {
    int ndim;
    int64_t shape[VQ_MAX_DIMS];
    const char *name;
} shapes[] = {
    {0, {0}, "scalar"},
    {1, {5}, "5"},
    {1, {0}, "0"},
    {2, {2, 3}, "2x3"},
    {3, {2, 0, 3}, "2x0x3"},
    {3, {3, 1, 2}, "3x1x2"},
    {4, {2, 3, 1, 4}, "2x3x1x4"},
    {VQ_MAX_DIMS, {1, 1, 1, 2, 1, 1, 1, 3}, "max_dims"},
};
#define NSHAPES (int)(sizeof shapes / sizeof shapes[0])

static const struct {
    vq_dtype dt;
    const char *code; /* numpy's descr without the byte order */
} dtypes[] = {
    {VQ_F32, "f4"}, {VQ_F64, "f8"},  {VQ_I32, "i4"}, {VQ_I64, "i8"}, {VQ_BOOL, "b1"},
    {VQ_F16, "f2"}, {VQ_BF16, "V2"}, {VQ_I8, "i1"},  {VQ_U8, "u1"},  {VQ_I16, "i2"},
    {VQ_U16, "u2"}, {VQ_U32, "u4"},  {VQ_U64, "u8"},
};
#define NDTYPES (int)(sizeof dtypes / sizeof dtypes[0])

/* Element i of the test arrays: exact in every dtype, with an i64 past 32 bits. */
static void fill(vq_dtype dt, int64_t n, void *out)
{
    for (int64_t i = 0; i < n; i++) {
        switch (dt) {
        case VQ_F32: ((float *)out)[i] = (float)((double)i * 0.5 - 3); break;
        case VQ_F64: ((double *)out)[i] = (double)i * 0.5 - 3; break;
        case VQ_I32: ((int32_t *)out)[i] = (int32_t)(i * 7 - 100); break;
        case VQ_I64: ((int64_t *)out)[i] = i * 3000000000LL - 5; break;
        case VQ_BOOL: ((unsigned char *)out)[i] = i % 3 == 0; break;
        case VQ_F16: ((uint16_t *)out)[i] = vq_f64_to_f16((double)i * 0.5 - 3); break;
        case VQ_BF16: ((uint16_t *)out)[i] = vq_f64_to_bf16((double)i * 0.5 - 3); break;
        case VQ_I8: ((int8_t *)out)[i] = (int8_t)(i * 7 - 100); break;
        case VQ_U8: ((uint8_t *)out)[i] = (uint8_t)(i * 37 % 256); break;
        case VQ_I16: ((int16_t *)out)[i] = (int16_t)(i * 1000 - 3000); break;
        case VQ_U16: ((uint16_t *)out)[i] = (uint16_t)(i * 3001 % 65536); break;
        case VQ_U32: ((uint32_t *)out)[i] = (uint32_t)(i * 300000007 % 4294967296LL); break;
        case VQ_U64:
            ((uint64_t *)out)[i] = (UINT64_C(1) << 63) + (uint64_t)i * 3000000000u + 5;
            break;
        }
    }
}

static const char *python_values =
    "import os, sys\n"
    "try:\n"
    "    import numpy as np\n"
    "    from numpy.lib import format as F\n"
    "except ImportError as e:\n"
    "    print(e, file=sys.stderr)\n"
    "    sys.exit(77)\n"
    "d = sys.argv[1]\n"
    "def values(code, shape):\n"
    "    i = np.arange(int(np.prod(shape, dtype=np.int64)), dtype=np.int64)\n"
    "    v = {'f4': (i * 0.5 - 3).astype('<f4'), 'f8': (i * 0.5 - 3).astype('<f8'),\n"
    "         'i4': (i * 7 - 100).astype('<i4'), 'i8': i * 3000000000 - 5,\n"
    "         'b1': i % 3 == 0, 'f2': (i * 0.5 - 3).astype('<f2'),\n"
    "         'V2': ((i * 0.5 - 3).astype('<f4').view('<u4') >> 16).astype('<u2').view('V2'),\n"
    "         'i1': (i * 7 - 100).astype('i1'), 'u1': (i * 37 % 256).astype('u1'),\n"
    "         'i2': (i * 1000 - 3000).astype('<i2'), 'u2': (i * 3001 % 65536).astype('<u2'),\n"
    "         'u4': (i * 300000007 % 4294967296).astype('<u4'),\n"
    "         'u8': np.uint64(2**63) + i.astype('<u8') * np.uint64(3000000000) + "
    "np.uint64(5)}[code]\n"
    "    return v.reshape(shape)\n";

static int64_t numel(int i)
{
    int64_t n = 1;
    for (int k = 0; k < shapes[i].ndim; k++)
        n *= shapes[i].shape[k];
    return n;
}

static vq_tensor *make(vq_dtype dt, int s)
{
    static unsigned char buf[4096];
    cr_assert_leq((size_t)numel(s) * vq_dtype_size(dt), sizeof buf);
    fill(dt, numel(s), buf);
    vq_tensor *t = NULL;
    int rc = vq_tensor_from(&t, dt, shapes[s].ndim, shapes[s].shape, buf);
    cr_assert_eq(rc, 0, "vq_tensor_from: %s", vq_errmsg());
    return t;
}

/* t has dtype dt, shape s, and the values of fill(). */
static void check_tensor(const char *what, vq_tensor *t, vq_dtype dt, int s)
{
    static unsigned char want[4096];
    cr_assert_eq(vq_tensor_dtype(t), dt, "%s: dtype %s, want %s", what,
                 vq_dtype_name(vq_tensor_dtype(t)), vq_dtype_name(dt));
    cr_assert_eq(vq_tensor_ndim(t), shapes[s].ndim, "%s: ndim %d, want %d", what,
                 vq_tensor_ndim(t), shapes[s].ndim);
    for (int k = 0; k < shapes[s].ndim; k++)
        cr_assert_eq(vq_tensor_shape(t)[k], shapes[s].shape[k], "%s: dim %d", what, k);
    size_t n = (size_t)numel(s) * vq_dtype_size(dt);
    cr_assert_eq(vq_tensor_nbytes(t), n, "%s: %zu bytes, want %zu", what, vq_tensor_nbytes(t), n);
    fill(dt, numel(s), want);
    cr_assert(n == 0 || memcmp(vq_tensor_data(t), want, n) == 0, "%s: the bytes differ", what);
}

static void file_name(char *buf, size_t size, const char *prefix, int d, int s)
{
    snprintf(buf, size, "%s/%s%s_%s.npy", dir, prefix, dtypes[d].code, shapes[s].name);
}

/* ---- round trips through varq ---- */

static void round_trip(int d)
{
    for (int s = 0; s < NSHAPES; s++) {
        char path[256];
        file_name(path, sizeof path, "", d, s);
        vq_tensor *t = make(dtypes[d].dt, s);
        cr_assert_eq(vq_npy_save(path, t), 0, "save %s: %s", path, vq_errmsg());
        vq_tensor_release(t);

        vq_tensor *back = NULL;
        cr_assert_eq(vq_npy_load(path, &back), 0, "load %s: %s", path, vq_errmsg());
        check_tensor(path, back, dtypes[d].dt, s);
        vq_tensor_release(back);

        size_t len;
        unsigned char *bytes = read_file(path, &len);
        cr_assert_eq(vq_npy_parse(bytes, len, &back), 0, "parse %s: %s", path, vq_errmsg());
        check_tensor(path, back, dtypes[d].dt, s);
        vq_tensor_release(back);
        free(bytes);
    }
}

Test(npy, round_trip_f32_every_rank)
{
    round_trip(0);
}

Test(npy, round_trip_f64_every_rank)
{
    round_trip(1);
}

Test(npy, round_trip_i32_every_rank)
{
    round_trip(2);
}

Test(npy, round_trip_i64_every_rank)
{
    round_trip(3);
}

Test(npy, round_trip_bool_every_rank)
{
    round_trip(4);
}

/* f16, bf16 ('|V2') and the narrow and unsigned integers */
Test(npy, round_trip_new_dtypes_every_rank)
{
    for (int d = 5; d < NDTYPES; d++)
        round_trip(d);
}

/* bf16's convention: descr '|V2' written, '|V2' and '<V2' read as bf16 */
Test(npy, bf16_is_saved_as_void_2_and_read_back_exactly)
{
    uint16_t bits[4] = {0x3f80, 0xff80, 0x7fc1, 0x0001}; /* 1, -inf, a NaN, a subnormal */
    vq_tensor *t;
    cr_assert_eq(vq_tensor_from(&t, VQ_BF16, 1, (int64_t[]){4}, bits), 0, "%s", vq_errmsg());
    char path[256];
    in_dir(path, sizeof path, "bf16.npy");
    cr_assert_eq(vq_npy_save(path, t), 0, "%s", vq_errmsg());
    vq_tensor_release(t);
    size_t len;
    unsigned char *b = read_file(path, &len);
    cr_assert(memmem(b, len, "'descr': '|V2'", 14), "header: %.64s", b + 10);
    cr_assert_eq(vq_npy_parse(b, len, &t), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_tensor_dtype(t), VQ_BF16);
    cr_assert_eq(memcmp(vq_tensor_data(t), bits, sizeof bits), 0);
    vq_tensor_release(t);
    unsigned char *at = memmem(b, len, "|V2", 3);
    *at = '<';
    cr_assert_eq(vq_npy_parse(b, len, &t), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_tensor_dtype(t), VQ_BF16);
    vq_tensor_release(t);
    free(b);
}

/* The header varq writes: 1.0, padded to 64 bytes, numpy's dict text. */
Test(npy, saved_header_is_version_1_padded_to_64_bytes)
{
    static const char *const dicts[NSHAPES] = {
        "{'descr': '<f8', 'fortran_order': False, 'shape': (), }",
        "{'descr': '<f8', 'fortran_order': False, 'shape': (5,), }",
        "{'descr': '<f8', 'fortran_order': False, 'shape': (0,), }",
        "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }",
        "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 0, 3), }",
        "{'descr': '<f8', 'fortran_order': False, 'shape': (3, 1, 2), }",
        "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3, 1, 4), }",
        "{'descr': '<f8', 'fortran_order': False, 'shape': (1, 1, 1, 2, 1, 1, 1, 3), }",
    };
    for (int s = 0; s < NSHAPES; s++) {
        char path[256];
        file_name(path, sizeof path, "", 1, s);
        vq_tensor *t = make(VQ_F64, s);
        cr_assert_eq(vq_npy_save(path, t), 0, "%s", vq_errmsg());
        size_t len;
        unsigned char *b = read_file(path, &len);
        cr_assert(len >= 10 && memcmp(b, "\x93NUMPY\x01\x00", 8) == 0, "%s: prefix", path);
        size_t hlen = b[8] | (size_t)b[9] << 8;
        cr_assert_eq((10 + hlen) % 64, 0, "%s: data at %zu", path, 10 + hlen);
        cr_assert_eq(len, 10 + hlen + vq_tensor_nbytes(t));
        cr_assert_eq(b[10 + hlen - 1], '\n');
        size_t n = strlen(dicts[s]);
        cr_assert(memcmp(b + 10, dicts[s], n) == 0, "%s: header %.*s", path, (int)hlen, b + 10);
        for (size_t i = 10 + n; i < 10 + hlen - 1; i++)
            cr_assert_eq(b[i], ' ', "%s: padding byte %zu", path, i);
        free(b);
        vq_tensor_release(t);
    }
}

Test(npy, save_replaces_an_existing_file_keeping_its_mode_and_leaves_no_temporary)
{
    char path[256];
    in_dir(path, sizeof path, "x.npy");
    write_file(path, "old contents", 12);
    cr_assert_eq(chmod(path, 0640), 0);
    vq_tensor *t = make(VQ_I32, 3);
    cr_assert_eq(vq_npy_save(path, t), 0, "%s", vq_errmsg());
    vq_tensor_release(t);
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    cr_assert_eq(st.st_mode & 07777, 0640, "mode %o", (unsigned)(st.st_mode & 07777));
    vq_tensor *back;
    cr_assert_eq(vq_npy_load(path, &back), 0, "%s", vq_errmsg());
    check_tensor(path, back, VQ_I32, 3);
    vq_tensor_release(back);
    cr_assert_eq(dir_entries(), 1);
}

/* A symlink keeps pointing at the file, which gets the new contents. */
Test(npy, save_through_a_symlink_writes_its_target)
{
    char path[256], link[256];
    in_dir(path, sizeof path, "target.npy");
    in_dir(link, sizeof link, "link.npy");
    write_file(path, "old", 3);
    cr_assert_eq(symlink(path, link), 0);
    vq_tensor *t = make(VQ_F32, 1);
    cr_assert_eq(vq_npy_save(link, t), 0, "%s", vq_errmsg());
    vq_tensor_release(t);
    struct stat st;
    cr_assert_eq(lstat(link, &st), 0);
    cr_assert(S_ISLNK(st.st_mode), "the link was replaced");
    vq_tensor *back;
    cr_assert_eq(vq_npy_load(path, &back), 0, "%s", vq_errmsg());
    check_tensor(path, back, VQ_F32, 1);
    vq_tensor_release(back);
    cr_assert_eq(dir_entries(), 2);
}

/* ---- save: waiting for pushed ops ---- */

static int slow_fill(void *arg, const vq_exec_ctx *x)
{
    (void)x;
    struct timespec ts = {0, 50 * 1000 * 1000};
    nanosleep(&ts, NULL);
    fill(VQ_I64, 6, vq_tensor_data(arg));
    return 0;
}

static int failing_op(void *arg, const vq_exec_ctx *x)
{
    (void)arg;
    (void)x;
    return -1234; /* an op's own code, which the engine carries unchanged */
}

Test(npy, save_waits_for_the_ops_pushed_on_the_tensor)
{
    vq_engine_opts opts = {.kind = VQ_ENGINE_THREADED, .cpu_workers = 2};
    vq_engine *e;
    cr_assert_eq(vq_engine_new(&e, &opts), 0, "%s", vq_errmsg());
    vq_tensor *t;
    cr_assert_eq(vq_tensor_new(&t, VQ_I64, 2, shapes[3].shape), 0);
    vq_var *v = vq_tensor_var(t, e);
    cr_assert_not_null(v, "%s", vq_errmsg());
    vq_task task = {.fn = slow_fill, .arg = t, .writes = &v, .nwrites = 1, .name = "slow_fill"};
    cr_assert_eq(vq_push(e, &task), 0, "%s", vq_errmsg());

    char path[256];
    in_dir(path, sizeof path, "waited.npy");
    cr_assert_eq(vq_npy_save(path, t), 0, "%s", vq_errmsg());
    vq_tensor *back;
    cr_assert_eq(vq_npy_load(path, &back), 0, "%s", vq_errmsg());
    check_tensor("saved after the op", back, VQ_I64, 3);
    vq_tensor_release(back);
    vq_tensor_release(t);
    vq_engine_free(e);
}

Test(npy, save_returns_the_error_of_a_failed_op_and_writes_nothing)
{
    vq_engine *e;
    cr_assert_eq(vq_engine_new(&e, &(vq_engine_opts){.kind = VQ_ENGINE_THREADED}), 0);
    vq_tensor *t = make(VQ_F32, 1);
    vq_var *v = vq_tensor_var(t, e);
    cr_assert_not_null(v);
    vq_task task = {.fn = failing_op, .writes = &v, .nwrites = 1, .name = "failing_op"};
    cr_assert_eq(vq_push(e, &task), 0);
    char path[256];
    in_dir(path, sizeof path, "failed.npy");
    cr_assert_eq(vq_npy_save(path, t), -1234, "%s", vq_errmsg());
    cr_assert_eq(dir_entries(), 0);
    vq_tensor_release(t);
    vq_engine_free(e);
}

/* ---- save: failures ---- */

Test(npy, save_into_a_missing_directory_is_eio)
{
    char path[256];
    in_dir(path, sizeof path, "no/such/dir/x.npy");
    vq_tensor *t = make(VQ_F32, 1);
    cr_assert_eq(vq_npy_save(path, t), VQ_EIO);
    cr_assert(strstr(vq_errmsg(), path) && strstr(vq_errmsg(), strerror(ENOENT)), "message: %s",
              vq_errmsg());
    vq_tensor_release(t);
}

Test(npy, save_over_a_directory_is_eio_and_leaves_nothing_behind)
{
    char path[256];
    in_dir(path, sizeof path, "sub");
    cr_assert_eq(mkdir(path, 0700), 0);
    vq_tensor *t = make(VQ_F32, 3);
    cr_assert_eq(vq_npy_save(path, t), VQ_EIO);
    cr_assert(strstr(vq_errmsg(), path), "message: %s", vq_errmsg());
    cr_assert_eq(dir_entries(), 1);
    vq_tensor_release(t);
}

/* A write that fails midway (past RLIMIT_FSIZE): the temporary file goes,
 * and the file that was there is left as it was. */
Test(npy, save_failing_midway_keeps_the_old_file_and_leaves_no_temporary)
{
    char path[256];
    in_dir(path, sizeof path, "kept.npy");
    write_file(path, "old contents", 12);
    vq_tensor *t;
    cr_assert_eq(vq_tensor_new(&t, VQ_F32, 1, (int64_t[]){16384}), 0);
    signal(SIGXFSZ, SIG_IGN);
    cr_assert_eq(setrlimit(RLIMIT_FSIZE, &(struct rlimit){4096, 4096}), 0);
    cr_assert_eq(vq_npy_save(path, t), VQ_EIO);
    cr_assert(strstr(vq_errmsg(), path) && strstr(vq_errmsg(), strerror(EFBIG)), "message: %s",
              vq_errmsg());
    cr_assert_eq(dir_entries(), 1);
    size_t len;
    unsigned char *b = read_file(path, &len);
    cr_assert(len == 12 && memcmp(b, "old contents", 12) == 0, "the old file changed");
    free(b);
    vq_tensor_release(t);
}

/* A write that fails midway (ENOSPC) on a device, which is written in place
 * and must not be removed. */
Test(npy, save_to_a_full_device_is_eio)
{
    struct stat st;
    if (stat("/dev/full", &st) != 0 || !S_ISCHR(st.st_mode))
        cr_skip_test("no /dev/full");
    vq_tensor *t = make(VQ_F64, 6);
    cr_assert_eq(vq_npy_save("/dev/full", t), VQ_EIO);
    cr_assert(strstr(vq_errmsg(), "/dev/full") && strstr(vq_errmsg(), strerror(ENOSPC)),
              "message: %s", vq_errmsg());
    cr_assert_eq(stat("/dev/full", &st), 0);
    cr_assert(S_ISCHR(st.st_mode), "/dev/full is no longer a device");
    vq_tensor_release(t);
}

/* A write interrupted midway (half the bytes, then EIO): the save fails
 * naming the path, the old file is whole, and no temporary file is left;
 * short writes (7 bytes per write()) still save everything. */
Test(npy, a_save_interrupted_midway_leaves_the_old_file_and_short_writes_are_finished)
{
    char path[256];
    in_dir(path, sizeof path, "x.npy");
    vq_tensor *old = make(VQ_F64, 3), *young = make(VQ_F32, 6);
    cr_assert_eq(vq_npy_save(path, old), 0, "%s", vq_errmsg());
    size_t old_len;
    unsigned char *old_bytes = read_file(path, &old_len);
    vq__file_inject_fault(0, VQ__FAULT_MIDWAY);
    cr_assert_eq(vq_npy_save(path, young), VQ_EIO);
    vq__file_inject_fault(-1, VQ__FAULT_FULL);
    cr_assert(strstr(vq_errmsg(), path) && strstr(vq_errmsg(), strerror(EIO)), "message: %s",
              vq_errmsg());
    size_t len;
    unsigned char *b = read_file(path, &len);
    cr_assert(len == old_len && memcmp(b, old_bytes, len) == 0, "the old file changed");
    free(b);
    cr_assert_eq(dir_entries(), 1, "a temporary file was left behind");
    vq__file_inject_fault(0, VQ__FAULT_SHORT);
    cr_assert_eq(vq_npy_save(path, young), 0, "%s", vq_errmsg());
    vq__file_inject_fault(-1, VQ__FAULT_FULL);
    vq_tensor *back = NULL;
    cr_assert_eq(vq_npy_load(path, &back), 0, "%s", vq_errmsg());
    check_tensor("after short writes", back, VQ_F32, 6);
    cr_assert_eq(dir_entries(), 1);
    free(old_bytes);
    vq_tensor_release(back);
    vq_tensor_release(old);
    vq_tensor_release(young);
}

Test(npy, null_arguments_are_einval)
{
    vq_tensor *t = make(VQ_F32, 1), *out = t;
    char path[256];
    in_dir(path, sizeof path, "x.npy");
    cr_assert_eq(vq_npy_save(NULL, t), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "path"), "message: %s", vq_errmsg());
    cr_assert_eq(vq_npy_save(path, NULL), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "tensor"), "message: %s", vq_errmsg());
    cr_assert_eq(vq_npy_load(NULL, &out), VQ_EINVAL);
    cr_assert_null(out);
    cr_assert(strstr(vq_errmsg(), "path"), "message: %s", vq_errmsg());
    cr_assert_eq(vq_npy_load(path, NULL), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "out"), "message: %s", vq_errmsg());
    out = t;
    cr_assert_eq(vq_npy_parse(NULL, 10, &out), VQ_EINVAL);
    cr_assert_null(out);
    cr_assert(strstr(vq_errmsg(), "buf"), "message: %s", vq_errmsg());
    cr_assert_eq(vq_npy_parse("\x93NUMPY", 6, NULL), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "out"), "message: %s", vq_errmsg());
    cr_assert_eq(dir_entries(), 0);
    vq_tensor_release(t);
}

/* ---- load: I/O failures ---- */

Test(npy, load_of_a_missing_file_is_eio)
{
    char path[256];
    in_dir(path, sizeof path, "missing.npy");
    vq_tensor *t = (vq_tensor *)1;
    cr_assert_eq(vq_npy_load(path, &t), VQ_EIO);
    cr_assert_null(t);
    cr_assert(strstr(vq_errmsg(), path) && strstr(vq_errmsg(), strerror(ENOENT)), "message: %s",
              vq_errmsg());
}

Test(npy, load_of_a_directory_is_eio)
{
    vq_tensor *t;
    cr_assert_eq(vq_npy_load(dir, &t), VQ_EIO);
    cr_assert(strstr(vq_errmsg(), dir) && strstr(vq_errmsg(), strerror(EISDIR)), "message: %s",
              vq_errmsg());
}

/* ---- hand-written encodings ---- */

/* A .npy encoding of dict (padded to 64 bytes and ended by '\n' as numpy
 * does; pad = false: dict is the whole header) and n data bytes. */
static unsigned char *encode_raw(int version, const char *dict, bool pad, const void *data,
                                 size_t n, size_t *len)
{
    size_t prefix = version == 1 ? 10 : 12;
    size_t dlen = strlen(dict);
    size_t hlen = pad ? (prefix + dlen + 1 + 63) / 64 * 64 - prefix : dlen;
    unsigned char *b = malloc(prefix + hlen + n + 1);
    memcpy(b, "\x93NUMPY", 6);
    b[6] = (unsigned char)version;
    b[7] = 0;
    for (size_t i = 0; i < prefix - 8; i++)
        b[8 + i] = (unsigned char)(hlen >> (8 * i));
    memcpy(b + prefix, dict, dlen);
    if (pad) {
        memset(b + prefix + dlen, ' ', hlen - dlen - 1);
        b[prefix + hlen - 1] = '\n';
    }
    if (n)
        memcpy(b + prefix + hlen, data, n);
    *len = prefix + hlen + n;
    return b;
}

static unsigned char *encode(int version, const char *dict, const void *data, size_t n,
                             size_t *len)
{
    return encode_raw(version, dict, true, data, n, len);
}

/* Parses b (len bytes, copied to a block of exactly that size so that any
 * overread is caught by ASan). */
static int parse_exact(const unsigned char *b, size_t len, vq_tensor **out)
{
    unsigned char *copy = malloc(len ? len : 1);
    memcpy(copy, b, len);
    int rc = vq_npy_parse(copy, len, out);
    free(copy);
    return rc;
}

static void expect_accept(int version, const char *dict, vq_dtype dt, int s)
{
    unsigned char data[4096];
    size_t n = (size_t)numel(s) * vq_dtype_size(dt), len;
    fill(dt, numel(s), data);
    unsigned char *b = encode(version, dict, data, n, &len);
    vq_tensor *t = NULL;
    int rc = parse_exact(b, len, &t);
    cr_assert_eq(rc, 0, "%s: %s", dict, vq_errmsg());
    check_tensor(dict, t, dt, s);
    vq_tensor_release(t);
    free(b);
}

Test(npy, parse_accepts_any_key_order_quotes_spacing_and_trailing_commas)
{
    expect_accept(1, "{\"shape\":(5,),\"fortran_order\":False,\"descr\":\"<i4\"}", VQ_I32, 1);
    expect_accept(1, "{ 'descr' : '=f8' ,\n\t'shape' : ( 2 , 3 , ) ,\r\n 'fortran_order' :False,}",
                  VQ_F64, 3);
    expect_accept(1, "{'fortran_order': False, 'shape': (), 'descr': '|b1'}", VQ_BOOL, 0);
    expect_accept(1, "{'descr': '<b1', 'fortran_order': False, 'shape': (0,), }", VQ_BOOL, 2);
    expect_accept(1, "{'descr':'<f4','fortran_order':False,'shape':(2,0,3)}", VQ_F32, 4);
    expect_accept(1, "{'descr': '<i8', 'fortran_order': False, 'shape': (3L, 1L, 2L), }", VQ_I64, 5);
}

Test(npy, parse_accepts_versions_2_and_3)
{
    expect_accept(2, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3, 1, 4), }", VQ_F32, 6);
    expect_accept(3, "{'descr': '<i8', 'fortran_order': False, 'shape': (5,), }", VQ_I64, 1);
}

/* A header that must be rejected, with a message naming the problem. The
 * encoding has no data: a header error is reported before the data's length
 * is looked at. */
static void expect_reject_v(int version, const char *dict, bool pad, const char *needle)
{
    size_t len;
    unsigned char *b = encode_raw(version, dict, pad, NULL, 0, &len);
    vq_tensor *t = (vq_tensor *)1;
    int rc = parse_exact(b, len, &t);
    free(b);
    const char *msg = vq_errmsg();
    cr_assert_eq(rc, VQ_EINVAL, "%s: rc %d (%s)", dict, rc, msg);
    cr_assert_null(t, "%s: *out not NULL", dict);
    cr_assert(strncmp(msg, "npy buffer: ", 12) == 0, "%s: message %s", dict, msg);
    cr_assert(strstr(msg, needle), "%s: message \"%s\" does not mention \"%s\"", dict, msg, needle);
}

static void expect_reject(const char *dict, const char *needle)
{
    expect_reject_v(1, dict, true, needle);
}

Test(npy, parse_rejects_fortran_order)
{
    expect_reject("{'descr': '<f4', 'fortran_order': True, 'shape': (3, 4), }", "Fortran");
}

Test(npy, parse_rejects_big_endian_dtypes)
{
    expect_reject("{'descr': '>f4', 'fortran_order': False, 'shape': (3,), }", "big-endian");
    expect_reject("{'descr': '>i8', 'fortran_order': False, 'shape': (3,), }", "big-endian");
}

Test(npy, parse_rejects_unsupported_dtypes_naming_them)
{
    expect_reject("{'descr': '<c8', 'fortran_order': False, 'shape': (3,), }", "'<c8'");
    expect_reject("{'descr': '<f16', 'fortran_order': False, 'shape': (3,), }", "'<f16'");
    expect_reject("{'descr': '|V4', 'fortran_order': False, 'shape': (3,), }", "'|V4'");
    expect_reject("{'descr': '>u2', 'fortran_order': False, 'shape': (3,), }", "big-endian");
    expect_reject("{'descr': '|f4', 'fortran_order': False, 'shape': (3,), }", "'|f4'");
    expect_reject("{'descr': '<U3', 'fortran_order': False, 'shape': (3,), }", "'<U3'");
    expect_reject("{'descr': '|O', 'fortran_order': False, 'shape': (3,), }", "'|O'");
    expect_reject("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (3,), }",
                  "structured");
}

Test(npy, parse_rejects_more_than_max_dims)
{
    expect_reject("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 1, 1, 1, 1, 1, 1, 1), }",
                  "more than VQ_MAX_DIMS");
}

Test(npy, parse_rejects_negative_and_overflowing_dims)
{
    expect_reject("{'descr': '<f4', 'fortran_order': False, 'shape': (2, -3), }", "negative");
    expect_reject("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }",
                  "64 bits");
    expect_reject("{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904, 4), }",
                  "too large");
    expect_reject("{'descr': '<i8', 'fortran_order': False, 'shape': (0, 9223372036854775807, 2), }",
                  "too large");
    expect_reject("{'descr': '<i8', 'fortran_order': False, 'shape': (3037000500, 3037000500), }",
                  "too large");
}

Test(npy, parse_rejects_malformed_headers)
{
    static const struct {
        const char *dict, *needle;
    } cases[] = {
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (3), }", "not a tuple"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': [3], }", "not a tuple"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (3,,), }", "int"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (3 4), }", "','"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (3.0,), }", "','"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (a,), }", "int"},
        {"{'descr': '<f4', 'fortran_order': False, }", "'shape'"},
        {"{'fortran_order': False, 'shape': (3,), }", "'descr'"},
        {"{'descr': '<f4', 'shape': (3,), }", "'fortran_order'"},
        {"{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", "twice"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (3,), 'extra': 1, }", "unknown key"},
        {"{'descr': '<f4', 'fortran_order': 0, 'shape': (3,), }", "True or False"},
        {"{'descr': '<f4', 'fortran_order': Falsey, 'shape': (3,), }", "True or False"},
        {"{'descr': '<f4', 'fortran_order': False 'shape': (3,), }", "','"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (3,), } x", "after the dict"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (3,), ", "not closed"},
        {"{'descr': '<f4, 'fortran_order': False, 'shape': (3,), }", "'<f4, '"},
        {"{'descr': \"<f4', 'fortran_order': False, 'shape': (3,), }", "unterminated"},
        {"{'descr': '<f\\x34', 'fortran_order': False, 'shape': (3,), }", "escape"},
        {"{descr: '<f4', 'fortran_order': False, 'shape': (3,), }", "quoted string"},
        {"{'descr' '<f4', 'fortran_order': False, 'shape': (3,), }", "':'"},
        {"['descr', '<f4']", "not a dict"},
        {"", "not a dict"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        expect_reject(cases[i].dict, cases[i].needle);
    expect_reject_v(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (), }", false, "'\\n'");
    /* 'L' suffixes are Python 2's, which never wrote version 3.0. */
    expect_reject_v(3, "{'descr': '<f4', 'fortran_order': False, 'shape': (3L,), }", true, "','");
}

Test(npy, parse_rejects_bad_magic_and_versions)
{
    static const char dict[] = "{'descr': '<f4', 'fortran_order': False, 'shape': (), }";
    float one = 1;
    size_t len;
    unsigned char *b = encode(1, dict, &one, 4, &len);
    vq_tensor *t;
    static const struct {
        int at;
        unsigned char byte;
        const char *needle;
    } cases[] = {
        {0, 0x92, "magic"}, {5, 'X', "magic"}, {6, 0, "version 0.0"}, {6, 4, "version 4.0"},
        {7, 1, "version 1.1"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        unsigned char saved = b[cases[i].at];
        b[cases[i].at] = cases[i].byte;
        cr_assert_eq(parse_exact(b, len, &t), VQ_EINVAL);
        cr_assert(strstr(vq_errmsg(), "npy buffer: ") && strstr(vq_errmsg(), cases[i].needle),
                  "byte %d = %u: message %s", cases[i].at, cases[i].byte, vq_errmsg());
        b[cases[i].at] = saved;
    }
    cr_assert_eq(parse_exact(b, len, &t), 0, "%s", vq_errmsg());
    vq_tensor_release(t);
    free(b);
}

Test(npy, parse_rejects_short_data_and_trailing_bytes)
{
    static const char dict[] = "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3), }";
    int32_t data[7] = {1, 2, 3, 4, 5, 6, 7};
    vq_tensor *t;
    size_t len;
    unsigned char *b = encode(1, dict, data, 20, &len);
    cr_assert_eq(parse_exact(b, len, &t), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "truncated") && strstr(vq_errmsg(), "needs 24"), "message: %s",
              vq_errmsg());
    free(b);
    b = encode(1, dict, data, 25, &len);
    cr_assert_eq(parse_exact(b, len, &t), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "1 bytes after the data"), "message: %s", vq_errmsg());
    free(b);
    b = encode(1, dict, data, 24, &len);
    cr_assert_eq(parse_exact(b, len, &t), 0, "%s", vq_errmsg());
    vq_tensor_release(t);
    /* A header length past the end. */
    b[8] = 0xff;
    cr_assert_eq(parse_exact(b, len, &t), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "truncated: header"), "message: %s", vq_errmsg());
    free(b);
}

Test(npy, parse_rejects_bool_bytes_other_than_0_and_1)
{
    static const char dict[] = "{'descr': '|b1', 'fortran_order': False, 'shape': (4,), }";
    unsigned char data[4] = {0, 1, 2, 1};
    vq_tensor *t;
    size_t len;
    unsigned char *b = encode(1, dict, data, 4, &len);
    cr_assert_eq(parse_exact(b, len, &t), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "element 2 is 2"), "message: %s", vq_errmsg());
    free(b);
}

/* ---- load: the same rejections, naming the file ---- */

Test(npy, load_rejects_truncated_and_overlong_files_naming_them)
{
    char path[256];
    in_dir(path, sizeof path, "cut.npy");
    vq_tensor *t = make(VQ_F64, 3);
    cr_assert_eq(vq_npy_save(path, t), 0, "%s", vq_errmsg());
    vq_tensor_release(t);
    size_t len;
    unsigned char *b = read_file(path, &len);
    for (size_t cut = 0; cut < len; cut += cut < 80 ? 1 : 7) {
        write_file(path, b, cut);
        t = (vq_tensor *)1;
        cr_assert_eq(vq_npy_load(path, &t), VQ_EINVAL, "prefix of %zu bytes", cut);
        cr_assert_null(t);
        cr_assert(strncmp(vq_errmsg(), path, strlen(path)) == 0, "message: %s", vq_errmsg());
        cr_assert(cut < 6 || strstr(vq_errmsg(), "truncated"), "prefix of %zu: message: %s", cut,
                  vq_errmsg());
    }
    unsigned char *more = malloc(len + 3);
    memcpy(more, b, len);
    memcpy(more + len, "xyz", 3);
    write_file(path, more, len + 3);
    cr_assert_eq(vq_npy_load(path, &t), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), path) && strstr(vq_errmsg(), "3 bytes after the data"),
              "message: %s", vq_errmsg());
    free(more);
    free(b);
}

/* Load has its own reader (header first, data straight into the tensor):
 * on mutated files it must agree with parse, error codes included. */
static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t test_seed(void)
{
    const char *s = getenv("VARQ_TEST_SEED");
    return s ? strtoull(s, NULL, 10) : 20240611;
}

/* ---- numpy ---- */

/* Runs script (after python_values and the SHAPES, NAMES and CODES lists)
 * with dir as argv[1]; returns its exit status. Fails the test if
 * /usr/bin/python3 cannot import numpy, or does not exist. */
static int run_python(const char *script)
{
    char path[256], cmd[512];
    in_dir(path, sizeof path, "script.py");
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs(python_values, f);
    fputs("SHAPES = [", f);
    for (int s = 0; s < NSHAPES; s++) {
        fputs("(", f);
        for (int k = 0; k < shapes[s].ndim; k++)
            fprintf(f, "%" PRId64 ",", shapes[s].shape[k]);
        fprintf(f, "), ");
    }
    fputs("]\nNAMES = [", f);
    for (int s = 0; s < NSHAPES; s++)
        fprintf(f, "'%s', ", shapes[s].name);
    fputs("]\nCODES = [", f);
    for (int d = 0; d < NDTYPES; d++)
        fprintf(f, "'%s', ", dtypes[d].code);
    fputs("]\n", f);
    fputs(script, f);
    cr_assert_eq(fclose(f), 0);
    snprintf(cmd, sizeof cmd, PYTHON " '%s' '%s'", path, dir);
    int rc = system(cmd);
    remove(path);
    rc = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
    cr_assert(rc != 77 && rc != 127, PYTHON " cannot import numpy (exit status %d): install "
              "python3-numpy (scripts/setup.sh does); the numpy interoperability tests need it",
              rc);
    return rc;
}

static const char *numpy_writes_fixtures =
    "for code in CODES:\n"
    "    for s, name in zip(SHAPES, NAMES):\n"
    "        np.save(os.path.join(d, 'np_%s_%s.npy' % (code, name)), values(code, s))\n"
    "with open(os.path.join(d, 'v2.npy'), 'wb') as f:\n"
    "    F.write_array(f, values('f4', (2, 3, 1, 4)), version=(2, 0))\n"
    "with open(os.path.join(d, 'v3.npy'), 'wb') as f:\n"
    "    F.write_array(f, values('i8', (5,)), version=(3, 0))\n"
    "np.save(os.path.join(d, 'fortran.npy'), np.asfortranarray(values('f8', (2, 3))))\n"
    "np.save(os.path.join(d, 'big.npy'), values('f4', (5,)).astype('>f4'))\n"
    "np.save(os.path.join(d, 'u3.npy'), np.array(['abc'], dtype='<U3'))\n"
    "np.save(os.path.join(d, 'c8.npy'), np.arange(3, dtype='<c8'))\n"
    "np.save(os.path.join(d, 'nine.npy'), np.zeros((1,) * 9, dtype='<f4'))\n";

static void numpy_fixtures(void)
{
    cr_assert_eq(run_python(numpy_writes_fixtures), 0, "the numpy script writing fixtures failed");
}

Test(npy, loads_every_dtype_and_rank_numpy_wrote)
{
    numpy_fixtures();
    for (int d = 0; d < NDTYPES; d++)
        for (int s = 0; s < NSHAPES; s++) {
            char path[256];
            file_name(path, sizeof path, "np_", d, s);
            vq_tensor *t;
            cr_assert_eq(vq_npy_load(path, &t), 0, "%s: %s", path, vq_errmsg());
            check_tensor(path, t, dtypes[d].dt, s);
            vq_tensor_release(t);
        }
}

Test(npy, loads_numpy_format_versions_2_and_3)
{
    numpy_fixtures();
    char path[256];
    vq_tensor *t;
    in_dir(path, sizeof path, "v2.npy");
    cr_assert_eq(vq_npy_load(path, &t), 0, "%s: %s", path, vq_errmsg());
    size_t len;
    unsigned char *b = read_file(path, &len);
    cr_assert_eq(b[6], 2, "numpy wrote version %d", b[6]);
    free(b);
    check_tensor(path, t, VQ_F32, 6);
    vq_tensor_release(t);
    in_dir(path, sizeof path, "v3.npy");
    cr_assert_eq(vq_npy_load(path, &t), 0, "%s: %s", path, vq_errmsg());
    check_tensor(path, t, VQ_I64, 1);
    vq_tensor_release(t);
}

static void expect_load_reject(const char *name, const char *needle)
{
    char path[256];
    in_dir(path, sizeof path, name);
    vq_tensor *t = (vq_tensor *)1;
    cr_assert_eq(vq_npy_load(path, &t), VQ_EINVAL, "%s: %s", path, vq_errmsg());
    cr_assert_null(t);
    cr_assert(strncmp(vq_errmsg(), path, strlen(path)) == 0 && strstr(vq_errmsg(), needle),
              "%s: message \"%s\" does not mention \"%s\"", path, vq_errmsg(), needle);
}

Test(npy, rejects_numpy_files_in_fortran_order)
{
    numpy_fixtures();
    expect_load_reject("fortran.npy", "Fortran order");
}

Test(npy, rejects_numpy_big_endian_files)
{
    numpy_fixtures();
    expect_load_reject("big.npy", "big-endian");
}

Test(npy, rejects_numpy_files_of_other_dtypes_and_ranks)
{
    numpy_fixtures();
    expect_load_reject("u3.npy", "'<U3'");
    expect_load_reject("c8.npy", "'<c8'");
    expect_load_reject("nine.npy", "9 dims");
}

static const char *numpy_checks_varq_files =
    "bad = 0\n"
    "for code in CODES:\n"
    "    for s, name in zip(SHAPES, NAMES):\n"
    "        p = os.path.join(d, 'vq_%s_%s.npy' % (code, name))\n"
    "        a, e = np.load(p), values(code, s)\n"
    "        if a.dtype != e.dtype or a.shape != e.shape or a.tobytes() != e.tobytes():\n"
    "            print('%s: numpy read %s %s %r' % (p, a.dtype, a.shape, a), file=sys.stderr)\n"
    "            bad += 1\n"
    "        with open(p, 'rb') as f:\n"
    "            version = F.read_magic(f)\n"
    "            shape, fortran, dtype = F.read_array_header_1_0(f)\n"
    "            if version != (1, 0) or fortran or f.tell() % 64:\n"
    "                print('%s: version %r, fortran %r, data at %d'\n"
    "                      % (p, version, fortran, f.tell()), file=sys.stderr)\n"
    "                bad += 1\n"
    "sys.exit(1 if bad else 0)\n";

Test(npy, numpy_reads_every_dtype_and_rank_varq_wrote)
{
    for (int d = 0; d < NDTYPES; d++)
        for (int s = 0; s < NSHAPES; s++) {
            char path[256];
            file_name(path, sizeof path, "vq_", d, s);
            vq_tensor *t = make(dtypes[d].dt, s);
            cr_assert_eq(vq_npy_save(path, t), 0, "%s: %s", path, vq_errmsg());
            vq_tensor_release(t);
        }
    cr_assert_eq(run_python(numpy_checks_varq_files), 0,
                 "numpy did not read back what varq wrote (see stderr)");
}

/* ---- fuzz ---- */

struct sample {
    unsigned char *bytes;
    size_t len;
};

/* Valid encodings: several dtypes and ranks, versions 1, 2 and 3, varq's
 * own output and hand-written headers. */
static int samples_make(struct sample *out)
{
    static const struct {
        int version;
        const char *dict;
        vq_dtype dt;
        int s;
    } specs[] = {
        {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", VQ_F32, 3},
        {1, "{'descr': '<f8', 'fortran_order': False, 'shape': (), }", VQ_F64, 0},
        {1, "{'descr': '<i4', 'fortran_order': False, 'shape': (5,), }", VQ_I32, 1},
        {1, "{'descr': '<i8', 'fortran_order': False, 'shape': (2, 0, 3), }", VQ_I64, 4},
        {1, "{'descr': '|b1', 'fortran_order': False, 'shape': (3, 1, 2), }", VQ_BOOL, 5},
        {2, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3, 1, 4), }", VQ_F32, 6},
        {2, "{\"shape\": (5,), \"descr\": \"|b1\", \"fortran_order\": False}", VQ_BOOL, 1},
        {3, "{'descr': '<i8', 'fortran_order': False, 'shape': (2, 3), }", VQ_I64, 3},
    };
    int n = 0;
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        unsigned char data[4096];
        size_t bytes = (size_t)numel(specs[i].s) * vq_dtype_size(specs[i].dt);
        fill(specs[i].dt, numel(specs[i].s), data);
        out[n].bytes = encode(specs[i].version, specs[i].dict, data, bytes, &out[n].len);
        n++;
    }
    for (int s = 0; s < NSHAPES; s += 3) {
        char path[256];
        file_name(path, sizeof path, "fuzz_", s % NDTYPES, s);
        vq_tensor *t = make(dtypes[s % NDTYPES].dt, s);
        cr_assert_eq(vq_npy_save(path, t), 0, "%s", vq_errmsg());
        vq_tensor_release(t);
        out[n].bytes = read_file(path, &out[n].len);
        n++;
    }
    for (int i = 0; i < n; i++) {
        vq_tensor *t;
        cr_assert_eq(parse_exact(out[i].bytes, out[i].len, &t), 0, "sample %d: %s", i, vq_errmsg());
        vq_tensor_release(t);
    }
    return n;
}

/* Bytes a mutation likes to put into a header: its syntax. */
static const char header_bytes[] = "{}()[],:'\" \n\t0123456789-LTrueFalse<>|=fib\x93\\";

/* One mutation of b (len bytes, header the first hdr of them). */
static void mutate(uint64_t *rng, unsigned char *b, size_t len, size_t hdr)
{
    uint64_t r = rng_next(rng);
    size_t at_header = (size_t)(r >> 8) % hdr;
    size_t anywhere = (size_t)(r >> 8) % len;
    switch (r % 8) {
    case 0:
    case 1: b[at_header] ^= (unsigned char)(1u << (r >> 40) % 8); break;
    case 2:
    case 3: b[at_header] = (unsigned char)header_bytes[(r >> 40) % (sizeof header_bytes - 1)]; break;
    case 4: b[at_header] = (unsigned char)(r >> 40); break;
    case 5: b[anywhere] = (unsigned char)(r >> 40); break;
    case 6: b[6 + (r >> 8) % 6] = (unsigned char)(r >> 40); break; /* version and length */
    default: { /* move a run of header bytes: shifts commas, digits, quotes */
        size_t from = (size_t)(r >> 20) % hdr, n = (size_t)(r >> 50) % 8 + 1;
        if (from + n <= hdr && at_header + n <= hdr)
            memmove(b + at_header, b + from, n);
        break;
    }
    }
}

/* Random truncations and byte mutations: parse returns 0 (the tensor is
 * then consistent with the buffer) or VQ_EINVAL with a message; any
 * crash, overread or leak is caught by the sanitizers. */
Test(npy, parse_survives_truncations_and_random_mutations, .timeout = 120)
{
    uint64_t seed = test_seed(), rng = seed;
    struct sample samples[16];
    int nsamples = samples_make(samples);
    long cases = 0, accepted = 0;

    /* Every proper prefix of every sample fails. */
    for (int i = 0; i < nsamples; i++)
        for (size_t len = 0; len < samples[i].len; len++, cases++) {
            vq_tensor *t = (vq_tensor *)1;
            int rc = parse_exact(samples[i].bytes, len, &t);
            cr_assert_eq(rc, VQ_EINVAL, "sample %d cut to %zu of %zu bytes: rc %d", i, len,
                         samples[i].len, rc);
            cr_assert_null(t);
            cr_assert(strncmp(vq_errmsg(), "npy buffer: ", 12) == 0, "message: %s", vq_errmsg());
        }

    unsigned char *work = malloc(8192);
    for (int c = 0; c < 24000; c++, cases++) {
        const struct sample *s = &samples[rng_next(&rng) % (uint64_t)nsamples];
        size_t len = s->len;
        size_t hdr = s->bytes[6] == 1 ? 10 + (s->bytes[8] | (size_t)s->bytes[9] << 8)
                                       : 12 + (s->bytes[8] | (size_t)s->bytes[9] << 8);
        memcpy(work, s->bytes, len);
        int nmut = (int)(rng_next(&rng) % 4) + 1;
        for (int m = 0; m < nmut; m++)
            mutate(&rng, work, len, hdr);
        uint64_t r = rng_next(&rng);
        if (r % 8 == 0)
            len = (size_t)(r >> 8) % (len + 1); /* and truncate */
        else if (r % 8 == 1)
            for (size_t k = (r >> 8) % 9 + 1; k > 0; k--)
                work[len++] = (unsigned char)rng_next(&rng); /* or extend */
        vq_tensor *t = (vq_tensor *)1;
        int rc = parse_exact(work, len, &t);
        if (rc == 0) {
            accepted++;
            cr_assert_not_null(t);
            size_t nbytes = vq_tensor_nbytes(t);
            cr_assert_leq(nbytes, len, "seed %" PRIu64 " case %d: %zu bytes out of %zu", seed, c,
                          nbytes, len);
            cr_assert_eq((size_t)vq_tensor_numel(t) * vq_dtype_size(vq_tensor_dtype(t)), nbytes);
            cr_assert(memcmp(vq_tensor_data(t), work + len - nbytes, nbytes) == 0,
                      "seed %" PRIu64 " case %d: data are not the last bytes", seed, c);
            vq_tensor_release(t);
        } else {
            cr_assert_eq(rc, VQ_EINVAL, "seed %" PRIu64 " case %d: rc %d (%s)", seed, c, rc,
                         vq_errmsg());
            cr_assert_null(t, "seed %" PRIu64 " case %d: *out set on failure", seed, c);
            cr_assert(strncmp(vq_errmsg(), "npy buffer: ", 12) == 0 && strlen(vq_errmsg()) > 14,
                      "seed %" PRIu64 " case %d: message: %s", seed, c, vq_errmsg());
        }
    }
    free(work);
    for (int i = 0; i < nsamples; i++)
        free(samples[i].bytes);
    cr_log_info("seed %" PRIu64 ": %ld cases, %ld mutations accepted", seed, cases, accepted);
    cr_assert_geq(cases, 20000);
}

Test(npy, load_agrees_with_parse_on_truncated_and_mutated_files, .timeout = 120)
{
    uint64_t seed = test_seed() ^ 0x10ad, rng = seed;
    struct sample samples[16];
    int nsamples = samples_make(samples);
    char path[256];
    in_dir(path, sizeof path, "mutant.npy");
    unsigned char *work = malloc(8192);
    for (int c = 0; c < 1000; c++) {
        const struct sample *s = &samples[c % nsamples];
        size_t len = s->len;
        memcpy(work, s->bytes, len);
        uint64_t r = rng_next(&rng);
        if (c < 300) {
            len = (size_t)r % len; /* a prefix */
        } else {
            size_t hdr = len < 128 ? len : 128;
            for (int m = (int)(r % 3); m >= 0; m--)
                mutate(&rng, work, len, hdr);
        }
        write_file(path, work, len);
        vq_tensor *a = NULL, *b = NULL;
        int rc_parse = parse_exact(work, len, &a);
        char parse_msg[256];
        snprintf(parse_msg, sizeof parse_msg, "%s", vq_errmsg());
        int rc_load = vq_npy_load(path, &b);
        cr_assert_eq(rc_load, rc_parse, "seed %" PRIu64 " case %d: load %d (%s), parse %d (%s)",
                     seed, c, rc_load, vq_errmsg(), rc_parse, parse_msg);
        if (rc_load == 0) {
            cr_assert_eq(vq_tensor_dtype(a), vq_tensor_dtype(b));
            cr_assert_eq(vq_tensor_ndim(a), vq_tensor_ndim(b));
            cr_assert_eq(vq_tensor_nbytes(a), vq_tensor_nbytes(b));
            cr_assert(memcmp(vq_tensor_shape(a), vq_tensor_shape(b),
                             (size_t)vq_tensor_ndim(a) * sizeof(int64_t)) == 0);
            cr_assert(memcmp(vq_tensor_data(a), vq_tensor_data(b), vq_tensor_nbytes(a)) == 0);
        } else {
            /* The same problem, named after the file instead of the buffer. */
            cr_assert(strncmp(vq_errmsg(), path, strlen(path)) == 0 &&
                          strcmp(vq_errmsg() + strlen(path), parse_msg + strlen("npy buffer")) == 0,
                      "seed %" PRIu64 " case %d: load: %s / parse: %s", seed, c, vq_errmsg(),
                      parse_msg);
        }
        vq_tensor_release(a);
        vq_tensor_release(b);
    }
    free(work);
    for (int i = 0; i < nsamples; i++)
        free(samples[i].bytes);
}

Test(npy, save_refuses_a_read_only_file_and_keeps_the_mode_it_replaces)
{
    char path[] = "/tmp/varq_npy_modeXXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, "old", 3), 3);
    close(fd);
    int64_t s[1] = {4};
    vq_tensor *t;
    cr_assert_eq(vq_tensor_new(&t, VQ_F32, 1, s), 0);
    /* read-only: refused, the file untouched (root included) */
    cr_assert_eq(chmod(path, 0444), 0);
    cr_assert_eq(vq_npy_save(path, t), VQ_EIO);
    cr_assert(strstr(vq_errmsg(), "the file is read-only: Permission denied"), "%s", vq_errmsg());
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    cr_assert_eq(st.st_size, 3);
    cr_assert_eq(st.st_mode & 07777, 0444);
    /* writable with an unusual mode: replaced, the mode kept */
    cr_assert_eq(chmod(path, 0640), 0);
    cr_assert_eq(vq_npy_save(path, t), 0, "%s", vq_errmsg());
    cr_assert_eq(stat(path, &st), 0);
    cr_assert_eq(st.st_mode & 07777, 0640);
    cr_assert_gt(st.st_size, 3);
    vq_tensor *back;
    cr_assert_eq(vq_npy_load(path, &back), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_tensor_numel(back), 4);
    vq_tensor_release(back);
    vq_tensor_release(t);
    unlink(path);
}

Test(npy, a_dtype_with_a_nul_or_control_byte_is_shown_escaped)
{
    size_t len;
    unsigned char *b = encode(1, "{'descr': '<f4#\x01', 'fortran_order': False, 'shape': (2,), }",
                              "\0\0\0\0\0\0\0\0", 8, &len);
    unsigned char *hash = memchr(b, '#', len);
    cr_assert_not_null(hash);
    *hash = 0; /* a NUL inside the descr string */
    vq_tensor *t = NULL;
    cr_assert_eq(parse_exact(b, len, &t), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "dtype '<f4\\x00\\x01' is not supported"), "%s", vq_errmsg());
    free(b);
}
