/* Scopes (graph/scope.c): the named tensors a program's persistable vars
 * live in between runs; saved to and loaded from a directory of .npy
 * files, a save replacing the whole checkpoint or nothing (disk full,
 * interrupted writes, a directory holding something else), and a scope's
 * identity in the executor's plan cache. */
#include "../ops/ops_internal.h" /* vq__file_inject_enospc, vq__file_inject_fault */
#include "leakcheck.h"
#include "programs.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

TestSuite(scope, .fini = leak_check);

static vq_tensor *vec4(float a, float b, float c, float d)
{
    int64_t s[1] = {4};
    float v[4] = {a, b, c, d};
    vq_tensor *t;
    cr_assert_eq(vq_tensor_from(&t, VQ_F32, 1, s, v), 0);
    return t;
}

struct fixture {
    vq_engine *e;
    vq_exec *ex;
};

static struct fixture fixture(void)
{
    struct fixture f;
    vq_engine_opts o = {.kind = VQ_ENGINE_THREADED, .cpu_workers = 2};
    cr_assert_eq(vq_engine_new(&f.e, &o), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_exec_new(&f.ex, f.e, NULL), 0);
    return f;
}

static void fixture_free(struct fixture *f)
{
    vq_exec_free(f->ex);
    vq_engine_free(f->e);
}

Test(scope, scopes_save_and_load_a_directory_of_npy_files)
{
    vq_scope *s, *t;
    cr_assert_eq(vq_scope_new(&s), 0);
    cr_assert_eq(vq_scope_new(&t), 0);
    vq_tensor *a = vec4(1, 2, 3, 4);
    int64_t two[2] = {2, 2};
    int64_t iv[4] = {5, 6, 7, 8};
    vq_tensor *b;
    cr_assert_eq(vq_tensor_from(&b, VQ_I64, 2, two, iv), 0);
    cr_assert_eq(vq_scope_set(s, "weight", a), 0);
    cr_assert_eq(vq_scope_set(s, "bias", b), 0);
    char dir[] = "/tmp/varq_scope_XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    cr_assert_eq(vq_scope_save(s, dir), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_scope_load(t, dir), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_scope_count(t), 2);
    cr_assert_str_eq(vq_scope_name(t, 0), "bias");
    assert_same_bits(vq_scope_get(t, "weight"), a);
    assert_same_bits(vq_scope_get(t, "bias"), b);
    /* names with '/' (ONNX exporters' "/layer/Constant_output_0") and '%'
     * are written %2F and %25 and read back */
    cr_assert_eq(vq_scope_set(s, "/l0/Constant_output_0", a), 0);
    cr_assert_eq(vq_scope_set(s, "50%/x%2F", b), 0);
    cr_assert_eq(vq_scope_save(s, dir), 0, "%s", vq_errmsg());
    char file[128];
    snprintf(file, sizeof file, "%s/%%2Fl0%%2FConstant_output_0.npy", dir);
    cr_assert_eq(access(file, F_OK), 0, "%s", file);
    vq_scope_free(t);
    cr_assert_eq(vq_scope_new(&t), 0);
    cr_assert_eq(vq_scope_load(t, dir), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_scope_count(t), 4);
    assert_same_bits(vq_scope_get(t, "/l0/Constant_output_0"), a);
    assert_same_bits(vq_scope_get(t, "50%/x%2F"), b);
    cr_assert_eq(vq_scope_set(s, "..", a), 0);
    cr_assert_eq(vq_scope_save(s, dir), VQ_EINVAL);
    char cmd[64];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
    cr_assert_eq(vq_scope_load(t, dir), VQ_EIO);
    vq_tensor_release(a);
    vq_tensor_release(b);
    vq_scope_free(s);
    vq_scope_free(t);
}

/* Entries of dir's parent whose name starts with dir's base name and
 * contains ".saving": what a save leaves behind if it does not clean up. */
static int leftovers(const char *dir)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "ls -d %s.*saving* 2>/dev/null | wc -l", dir);
    FILE *f = popen(cmd, "r");
    cr_assert_not_null(f);
    int n = -1;
    cr_assert_eq(fscanf(f, "%d", &n), 1);
    pclose(f);
    return n;
}

static double first_value(vq_scope *s, const char *name)
{
    return ((const float *)vq_tensor_data(vq_scope_get(s, name)))[0];
}

Test(scope, a_scope_save_replaces_the_whole_checkpoint_or_nothing)
{
    vq_scope *s, *t;
    cr_assert_eq(vq_scope_new(&s), 0);
    char dir[] = "/tmp/varq_ckpt_XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    const char *names[] = {"a", "b", "c"};
    for (int i = 0; i < 3; i++) {
        vq_tensor *x = vec4(1, 1, 1, 1); /* step 1 */
        cr_assert_eq(vq_scope_set(s, names[i], x), 0);
        vq_tensor_release(x);
    }
    cr_assert_eq(vq_scope_save(s, dir), 0, "%s", vq_errmsg());
    for (int i = 0; i < 3; i++)
        ((float *)vq_tensor_data(vq_scope_get(s, names[i])))[0] = 2; /* step 2 */
    /* the disk fills after one file of step 2: step 1 stays, whole */
    vq__file_inject_enospc(1);
    int rc = vq_scope_save(s, dir);
    vq__file_inject_enospc(-1);
    cr_assert_eq(rc, VQ_EIO);
    cr_assert(strstr(vq_errmsg(), "No space left on device (the checkpoint there is unchanged)"),
              "%s", vq_errmsg());
    cr_assert(strstr(vq_errmsg(), dir), "%s", vq_errmsg());
    cr_assert_eq(leftovers(dir), 0, "a failed save left files behind");
    cr_assert_eq(vq_scope_new(&t), 0);
    cr_assert_eq(vq_scope_load(t, dir), 0, "%s", vq_errmsg());
    for (int i = 0; i < 3; i++)
        cr_assert_eq(first_value(t, names[i]), 1, "%s is from step 2", names[i]);
    vq_scope_free(t);
    /* a write interrupted midway in the second file: the same */
    vq__file_inject_fault(1, VQ__FAULT_MIDWAY);
    rc = vq_scope_save(s, dir);
    vq__file_inject_fault(-1, VQ__FAULT_FULL);
    cr_assert_eq(rc, VQ_EIO);
    cr_assert(strstr(vq_errmsg(), "(the checkpoint there is unchanged)"), "%s", vq_errmsg());
    cr_assert_eq(leftovers(dir), 0, "a failed save left files behind");
    cr_assert_eq(vq_scope_new(&t), 0);
    cr_assert_eq(vq_scope_load(t, dir), 0, "%s", vq_errmsg());
    for (int i = 0; i < 3; i++)
        cr_assert_eq(first_value(t, names[i]), 1, "%s is from step 2", names[i]);
    vq_scope_free(t);
    /* then it succeeds, whole */
    cr_assert_eq(vq_scope_save(s, dir), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_scope_new(&t), 0);
    cr_assert_eq(vq_scope_load(t, dir), 0, "%s", vq_errmsg());
    for (int i = 0; i < 3; i++)
        cr_assert_eq(first_value(t, names[i]), 2);
    vq_scope_free(t);
    cr_assert_eq(leftovers(dir), 0);
    /* a directory holding something else is not replaced */
    char other[96];
    snprintf(other, sizeof other, "%s/notes.txt", dir);
    FILE *f = fopen(other, "w");
    cr_assert_not_null(f);
    fputs("mine", f);
    fclose(f);
    cr_assert_eq(vq_scope_save(s, dir), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "holds notes.txt, which is not a .npy file"), "%s",
              vq_errmsg());
    cr_assert_eq(access(other, F_OK), 0);
    unlink(other);
    /* nor one with a read-only checkpoint file */
    char ro[96];
    snprintf(ro, sizeof ro, "%s/a.npy", dir);
    cr_assert_eq(chmod(ro, 0444), 0);
    cr_assert_eq(vq_scope_save(s, dir), VQ_EIO);
    cr_assert(strstr(vq_errmsg(), "the file is read-only"), "%s", vq_errmsg());
    char cmd[96];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
    vq_scope_free(s);
}

/* A scope holding one vec4 per name, each filled with value. */
static vq_scope *scope_of(const char *const *names, int n, float value)
{
    vq_scope *s;
    cr_assert_eq(vq_scope_new(&s), 0);
    for (int i = 0; i < n; i++) {
        vq_tensor *x = vec4(value, value, value, value);
        cr_assert_eq(vq_scope_set(s, names[i], x), 0);
        vq_tensor_release(x);
    }
    return s;
}

static bool file_exists(const char *dir, const char *name)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return access(path, F_OK) == 0;
}

Test(scope, a_save_through_a_symlinked_directory_replaces_the_target_and_keeps_the_link)
{
    char base[] = "/tmp/varq_link_XXXXXX";
    cr_assert_not_null(mkdtemp(base));
    char real[128], link[128];
    snprintf(real, sizeof real, "%s/real", base);
    snprintf(link, sizeof link, "%s/ckpt", base);
    vq_scope *old = scope_of((const char *const[]){"a", "b"}, 2, 1);
    cr_assert_eq(vq_scope_save(old, real), 0, "%s", vq_errmsg());
    cr_assert_eq(symlink("real", link), 0);
    /* the next checkpoint, saved through the link (also spelled with a
     * trailing slash) */
    vq_scope *s = scope_of((const char *const[]){"a", "c"}, 2, 2);
    const char *spellings[] = {link, NULL};
    char slashed[136];
    snprintf(slashed, sizeof slashed, "%s/", link);
    spellings[1] = slashed;
    for (int k = 0; k < 2; k++) {
        cr_assert_eq(vq_scope_save(s, spellings[k]), 0, "%s: %s", spellings[k], vq_errmsg());
        struct stat st;
        cr_assert_eq(lstat(link, &st), 0);
        cr_assert(S_ISLNK(st.st_mode), "%s is no longer a link", link);
        char target[64] = {0};
        cr_assert_eq(readlink(link, target, sizeof target - 1), 4);
        cr_assert_str_eq(target, "real");
        cr_assert_eq(lstat(real, &st), 0);
        cr_assert(S_ISDIR(st.st_mode));
        /* real holds exactly the new checkpoint */
        cr_assert(file_exists(real, "a.npy") && file_exists(real, "c.npy"));
        cr_assert(!file_exists(real, "b.npy"), "the old checkpoint's b.npy is still there");
        vq_scope *t;
        cr_assert_eq(vq_scope_new(&t), 0);
        cr_assert_eq(vq_scope_load(t, link), 0, "%s", vq_errmsg());
        cr_assert_eq(vq_scope_count(t), 2);
        cr_assert_eq(first_value(t, "a"), 2);
        cr_assert_eq(first_value(t, "c"), 2);
        vq_scope_free(t);
        cr_assert_eq(leftovers(link), 0, "a save left %s.*saving* behind", link);
        cr_assert_eq(leftovers(real), 0, "a save left %s.*saving* behind", real);
    }
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf %s", base);
    cr_assert_eq(system(cmd), 0);
    vq_scope_free(old);
    vq_scope_free(s);
}

Test(scope, a_save_through_a_link_deletes_nothing_it_did_not_write)
{
    char base[] = "/tmp/varq_link_XXXXXX";
    cr_assert_not_null(mkdtemp(base));
    char real[128], link[128], notes[160];
    snprintf(real, sizeof real, "%s/real", base);
    snprintf(link, sizeof link, "%s/ckpt", base);
    snprintf(notes, sizeof notes, "%s/notes.txt", real);
    vq_scope *s = scope_of((const char *const[]){"a"}, 1, 1);
    cr_assert_eq(vq_scope_save(s, real), 0, "%s", vq_errmsg());
    FILE *f = fopen(notes, "w");
    cr_assert_not_null(f);
    fputs("mine", f);
    fclose(f);
    cr_assert_eq(symlink(real, link), 0);
    /* the target holds a file no save wrote: refused, both files kept */
    cr_assert_eq(vq_scope_save(s, link), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "holds notes.txt, which is not a .npy file"), "%s", vq_errmsg());
    cr_assert(file_exists(real, "notes.txt") && file_exists(real, "a.npy"));
    struct stat st;
    cr_assert_eq(lstat(link, &st), 0);
    cr_assert(S_ISLNK(st.st_mode));
    /* a link to nothing: refused, left as it is */
    char dangling[128];
    snprintf(dangling, sizeof dangling, "%s/gone", base);
    cr_assert_eq(symlink("nowhere", dangling), 0);
    cr_assert_eq(vq_scope_save(s, dangling), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), dangling), "%s", vq_errmsg());
    cr_assert_eq(lstat(dangling, &st), 0);
    cr_assert(S_ISLNK(st.st_mode));
    cr_assert_eq(leftovers(dangling), 0);
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf %s", base);
    cr_assert_eq(system(cmd), 0);
    vq_scope_free(s);
}

Test(scope, a_new_scope_never_reuses_the_plan_of_a_freed_one)
{
    /* A freed scope's address may come back for the next one; the plan
     * cache must tell them apart anyway. */
    struct fixture f = fixture();
    vq_program *p;
    cr_assert_eq(vq_program_new(&p), 0);
    int64_t s[1] = {2};
    var(p, "w", VQ_F32, 1, s, true);
    var(p, "y", VQ_F32, 1, s, false);
    op(p, "relu", NAMES("w"), 1, NAMES("y"), 1, NULL, 0);
    for (int round = 1; round <= 4; round++) {
        vq_scope *sc;
        cr_assert_eq(vq_scope_new(&sc), 0);
        int64_t n = 2;
        float v[2] = {(float)round, (float)round};
        vq_tensor *w;
        cr_assert_eq(vq_tensor_from(&w, VQ_F32, 1, &n, v), 0);
        cr_assert_eq(vq_scope_set(sc, "w", w), 0);
        vq_tensor_release(w);
        vq_fetch fetch = {"y", NULL};
        cr_assert_eq(vq_exec_run(f.ex, p, sc, NULL, 0, &fetch, 1), 0, "%s", vq_errmsg());
        cr_assert_eq(((float *)vq_tensor_data(fetch.tensor))[0], (float)round,
                     "round %d ran with another scope's w", round);
        vq_tensor_release(fetch.tensor);
        vq_scope_free(sc);
    }
    vq_program_free(p);
    fixture_free(&f);
}
