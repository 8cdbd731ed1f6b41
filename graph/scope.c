/* Scopes: the tensors that outlive a run (parameters, optimizer state),
 * by name, kept sorted in one array under a mutex, and their .npy
 * directory form. */
#include "scope.h"

#include "graph_internal.h"

#include <dirent.h>
#include <limits.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <fcntl.h>

struct binding {
    char *name;
    vq_tensor *t;
};

struct vq_scope {
    uint64_t id; /* unique in the process: plans tell scopes apart by it, not
                  * by address, which a new scope may reuse */
    pthread_mutex_t lock;
    struct binding *b;
    int n, cap;
    uint64_t generation;
};

VQ_API int vq_scope_new(vq_scope **out)
{
    if (!out)
        return vq__fail(VQ_EINVAL, "vq_scope_new: out is NULL");
    static atomic_uint_fast64_t next_id = 1;
    vq_scope *s = vq__calloc(1, sizeof *s);
    if (!s)
        return vq__fail(VQ_ENOMEM, "vq_scope_new: out of memory");
    s->id = atomic_fetch_add(&next_id, 1);
    pthread_mutex_init(&s->lock, NULL);
    *out = s;
    return 0;
}

VQ_API void vq_scope_free(vq_scope *s)
{
    if (!s)
        return;
    for (int i = 0; i < s->n; i++) {
        free(s->b[i].name);
        vq_tensor_release(s->b[i].t);
    }
    free(s->b);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

/* Position of name, or where it would go (with *found false). */
static int locate(const vq_scope *s, const char *name, bool *found)
{
    int lo = 0, hi = s->n;
    while (lo < hi) {
        int mid = (lo + hi) / 2, c = strcmp(s->b[mid].name, name);
        if (c == 0) {
            *found = true;
            return mid;
        }
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    *found = false;
    return lo;
}

/* Inserts (name, t) at i, taking a reference to t. Called locked. */
static int insert_at(vq_scope *s, int i, const char *name, vq_tensor *t)
{
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 16;
        struct binding *b = vq__realloc(s->b, (size_t)cap * sizeof *b);
        if (!b)
            return VQ_ENOMEM;
        s->b = b;
        s->cap = cap;
    }
    char *copy = vq__strdup(name);
    if (!copy)
        return VQ_ENOMEM;
    memmove(&s->b[i + 1], &s->b[i], (size_t)(s->n - i) * sizeof *s->b);
    s->b[i] = (struct binding){copy, vq_tensor_retain(t)};
    s->n++;
    s->generation++;
    return 0;
}

VQ_API int vq_scope_set(vq_scope *s, const char *name, vq_tensor *t)
{
    if (!s || !name || !t)
        return vq__fail(VQ_EINVAL, "vq_scope_set: NULL argument");
    if (!*name)
        return vq__fail(VQ_EINVAL, "vq_scope_set: empty name");
    pthread_mutex_lock(&s->lock);
    bool found;
    int i = locate(s, name, &found), rc = 0;
    vq_tensor *old = NULL;
    if (found) {
        old = s->b[i].t;
        s->b[i].t = vq_tensor_retain(t);
        s->generation++;
    } else {
        rc = insert_at(s, i, name, t);
    }
    pthread_mutex_unlock(&s->lock);
    vq_tensor_release(old);
    return rc < 0 ? vq__fail(rc, "vq_scope_set: out of memory") : 0;
}

VQ_API vq_tensor *vq_scope_get(vq_scope *s, const char *name)
{
    if (!s || !name)
        return NULL;
    pthread_mutex_lock(&s->lock);
    bool found;
    int i = locate(s, name, &found);
    vq_tensor *t = found ? s->b[i].t : NULL;
    pthread_mutex_unlock(&s->lock);
    return t;
}

vq_tensor *vq__scope_take(vq_scope *s, const char *name)
{
    pthread_mutex_lock(&s->lock);
    bool found;
    int i = locate(s, name, &found);
    vq_tensor *t = found ? vq_tensor_retain(s->b[i].t) : NULL;
    pthread_mutex_unlock(&s->lock);
    return t;
}

vq_tensor *vq__scope_get_or_set(vq_scope *s, const char *name, vq_tensor *t)
{
    pthread_mutex_lock(&s->lock);
    bool found;
    int i = locate(s, name, &found);
    vq_tensor *r = NULL;
    if (found)
        r = vq_tensor_retain(s->b[i].t);
    else if (insert_at(s, i, name, t) == 0)
        r = vq_tensor_retain(t);
    pthread_mutex_unlock(&s->lock);
    return r;
}

uint64_t vq__scope_id(const vq_scope *s)
{
    return s ? s->id : 0;
}

uint64_t vq__scope_generation(vq_scope *s)
{
    pthread_mutex_lock(&s->lock);
    uint64_t g = s->generation;
    pthread_mutex_unlock(&s->lock);
    return g;
}

VQ_API int vq_scope_count(vq_scope *s)
{
    if (!s)
        return 0;
    pthread_mutex_lock(&s->lock);
    int n = s->n;
    pthread_mutex_unlock(&s->lock);
    return n;
}

VQ_API const char *vq_scope_name(vq_scope *s, int i)
{
    if (!s)
        return NULL;
    pthread_mutex_lock(&s->lock);
    const char *name = i >= 0 && i < s->n ? s->b[i].name : NULL;
    pthread_mutex_unlock(&s->lock);
    return name;
}

static bool name_ok_for_file(const char *name)
{
    return *name && strcmp(name, ".") && strcmp(name, "..");
}

/* A var's name as a file name and back: '/' (ONNX exporters name values
 * "/layer/Constant_output_0") and '%' are written %2F and %25; nothing
 * else changes, so names without them keep their plain files. out holds
 * 3 * strlen(name) + 1 bytes. */
static void name_to_file(const char *name, char *out)
{
    for (; *name; name++) {
        if (*name == '/' || *name == '%')
            out += sprintf(out, "%%%02X", (unsigned char)*name);
        else
            *out++ = *name;
    }
    *out = '\0';
}

static void file_to_name(char *name)
{
    char *w = name;
    for (const char *r = name; *r;) {
        if (r[0] == '%' && r[1] == '2' && (r[2] == 'F' || r[2] == '5')) {
            *w++ = r[2] == 'F' ? '/' : '%';
            r += 3;
        } else {
            *w++ = *r++;
        }
    }
    *w = '\0';
}

static bool is_npy_name(const char *name)
{
    size_t len = strlen(name);
    return len > 4 && !strcmp(name + len - 4, ".npy");
}

/* Removes dir, a directory a save made or an old checkpoint it swapped out,
 * with the files a save writes: regular .npy files. dir itself is never
 * followed if it is a link, and anything else in it (put there while the
 * save ran) keeps it in place: a save deletes nothing it did not write. */
static void remove_dir(const char *dir)
{
    struct stat st;
    if (lstat(dir, &st) < 0 || !S_ISDIR(st.st_mode))
        return;
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *ent;
        while ((ent = readdir(d))) {
            if (!is_npy_name(ent->d_name))
                continue;
            char *path = vq__malloc(strlen(dir) + strlen(ent->d_name) + 2);
            if (path) {
                sprintf(path, "%s/%s", dir, ent->d_name);
                if (lstat(path, &st) == 0 && S_ISREG(st.st_mode))
                    unlink(path);
                free(path);
            }
        }
        closedir(d);
    }
    rmdir(dir);
}

/* An existing checkpoint directory may be replaced as a whole only when it
 * holds nothing but .npy files that the caller may replace: anything else
 * would be deleted with it. */
static int check_replaceable(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return vq__fail(VQ_EIO, "vq_scope_save: %s: %s", dir, strerror(errno));
    int rc = 0;
    struct dirent *ent;
    while (rc == 0 && (ent = readdir(d))) {
        const char *nm = ent->d_name;
        size_t len = strlen(nm);
        if (!strcmp(nm, ".") || !strcmp(nm, ".."))
            continue;
        char *path = vq__malloc(strlen(dir) + len + 2);
        if (!path) {
            rc = vq__fail(VQ_ENOMEM, "vq_scope_save: out of memory");
            break;
        }
        sprintf(path, "%s/%s", dir, nm);
        struct stat st;
        if (!is_npy_name(nm) || lstat(path, &st) < 0 || !S_ISREG(st.st_mode))
            rc = vq__fail(VQ_EINVAL, "vq_scope_save: %s holds %s, which is not a .npy file: a "
                                     "save replaces the whole directory, so it saves only over "
                                     "a directory of .npy files",
                          dir, nm);
        else if (access(path, W_OK) != 0 || !(st.st_mode & 0222))
            rc = vq__fail(VQ_EIO, "vq_scope_save: %s: the file is read-only: %s", path,
                          strerror(EACCES));
        free(path);
    }
    closedir(d);
    return rc;
}

/* Where the file system cannot exchange two directories in one step: dir
 * moves aside, tmp takes its place, and the old one ends in tmp's name (a
 * reader in between finds no dir at all, never a mix). */
static int swap_by_renames(const char *tmp, const char *dir)
{
    size_t len = strlen(tmp) + 8;
    char *aside = vq__malloc(len);
    if (!aside) {
        errno = ENOMEM;
        return -1;
    }
    snprintf(aside, len, "%s.old", tmp);
    int rc = rename(dir, aside);
    if (rc == 0 && (rc = rename(tmp, dir)) < 0) {
        int err = errno;
        (void)rename(aside, dir); /* put the old one back */
        errno = err;
    } else if (rc == 0) {
        rc = rename(aside, tmp);
    }
    free(aside);
    return rc;
}

/* The path a save of dir works on, malloc'd: an existing directory's
 * canonical path (links followed, so the checkpoint replaced is the one a
 * link names and the link stays; no trailing '/', so the new directory is
 * made beside it, not in it), else dir without trailing '/'. A link to
 * nothing is VQ_EINVAL: a save would replace the link. */
static int save_target(const char *dir, bool exists, char **out)
{
    *out = NULL;
    if (exists) {
        char *real = realpath(dir, NULL);
        if (!real)
            return errno == ENOMEM
                       ? vq__fail(VQ_ENOMEM, "vq_scope_save: out of memory")
                       : vq__fail(VQ_EIO, "vq_scope_save: %s: %s", dir, strerror(errno));
        *out = real;
        return 0;
    }
    size_t len = strlen(dir);
    while (len > 1 && dir[len - 1] == '/')
        len--;
    char *path = vq__malloc(len + 1);
    if (!path)
        return vq__fail(VQ_ENOMEM, "vq_scope_save: out of memory");
    memcpy(path, dir, len);
    path[len] = 0;
    struct stat st;
    if (lstat(path, &st) == 0) {
        free(path);
        return vq__fail(VQ_EINVAL,
                        "vq_scope_save: %s is a symbolic link to nothing: save to a directory "
                        "or a link to one",
                        dir);
    }
    *out = path;
    return 0;
}

VQ_API int vq_scope_save(vq_scope *s, const char *dir_arg)
{
    if (!s || !dir_arg || !*dir_arg)
        return vq__fail(VQ_EINVAL, "vq_scope_save: NULL argument");
    struct stat dst;
    bool exists = stat(dir_arg, &dst) == 0;
    if (exists && !S_ISDIR(dst.st_mode))
        return vq__fail(VQ_EINVAL, "vq_scope_save: %s exists and is not a directory", dir_arg);
    if (!exists && errno != ENOENT)
        return vq__fail(VQ_EIO, "vq_scope_save: %s: %s", dir_arg, strerror(errno));
    char *dir;
    int rc = save_target(dir_arg, exists, &dir);
    if (rc < 0)
        return rc;
    rc = exists ? check_replaceable(dir) : 0;
    if (rc < 0) {
        free(dir);
        return rc;
    }
    /* A snapshot of the bindings, so that saving does not hold the lock. */
    pthread_mutex_lock(&s->lock);
    int n = s->n;
    struct binding *snap = vq__malloc((size_t)(n ? n : 1) * sizeof *snap);
    for (int i = 0; snap && i < n; i++) {
        snap[i].name = vq__strdup(s->b[i].name);
        snap[i].t = vq_tensor_retain(s->b[i].t);
    }
    pthread_mutex_unlock(&s->lock);
    if (!snap) {
        free(dir);
        return vq__fail(VQ_ENOMEM, "vq_scope_save: out of memory");
    }
    /* The whole checkpoint goes to a new directory beside dir, which then
     * takes dir's place in one step: a reader sees the old checkpoint or
     * the new one, never a mix. */
    static atomic_uint counter;
    size_t tlen = strlen(dir) + 64;
    char *tmp = vq__malloc(tlen), *path = NULL;
    if (!tmp)
        rc = vq__fail(VQ_ENOMEM, "vq_scope_save: out of memory");
    else
        snprintf(tmp, tlen, "%s.%ld.%u.saving", dir, (long)getpid(), atomic_fetch_add(&counter, 1));
    if (rc == 0 && mkdir(tmp, exists ? (dst.st_mode & 07777) : 0777) < 0)
        rc = vq__fail(VQ_EIO, "vq_scope_save: %s: cannot create a directory beside it: %s", dir,
                      strerror(errno));
    bool made = rc == 0;
    for (int i = 0; i < n; i++) {
        if (rc == 0 && !snap[i].name)
            rc = vq__fail(VQ_ENOMEM, "vq_scope_save: out of memory");
        else if (rc == 0 && !name_ok_for_file(snap[i].name))
            rc = vq__fail(VQ_EINVAL, "vq_scope_save: \"%s\" cannot be a file name",
                          snap[i].name);
        if (rc == 0) {
            size_t len = strlen(tmp) + 3 * strlen(snap[i].name) + 6;
            if (!(path = vq__malloc(len))) {
                rc = vq__fail(VQ_ENOMEM, "vq_scope_save: out of memory");
            } else {
                int at = snprintf(path, len, "%s/", tmp);
                name_to_file(snap[i].name, path + at);
                strcat(path, ".npy");
                if ((rc = vq_npy_save(path, snap[i].t)) < 0) {
                    char msg[256];
                    snprintf(msg, sizeof msg, "%s", vq_errmsg());
                    rc = vq__fail(rc, "vq_scope_save: %s: %s (the checkpoint there is unchanged)",
                                  dir, msg);
                }
                free(path);
            }
        }
        free(snap[i].name);
        vq_tensor_release(snap[i].t);
    }
    free(snap);
    if (rc == 0) {
        vq__file_sync_dir_of(tmp); /* tmp's own entries */
        if (exists) {
            /* Swap the two directories in one step, then drop the old. */
            if (renameat2(AT_FDCWD, tmp, AT_FDCWD, dir, RENAME_EXCHANGE) < 0 &&
                (errno != EINVAL && errno != ENOSYS ? -1 : swap_by_renames(tmp, dir)) < 0)
                rc = vq__fail(VQ_EIO, "vq_scope_save: %s: cannot replace it: %s", dir,
                              strerror(errno));
        } else if (rename(tmp, dir) < 0) {
            rc = vq__fail(VQ_EIO, "vq_scope_save: %s: %s", dir, strerror(errno));
        }
        if (rc == 0)
            vq__file_sync_dir_of(dir);
    }
    if (made)
        remove_dir(tmp); /* the old checkpoint, or what a failed save wrote */
    free(tmp);
    free(dir);
    return rc;
}

VQ_API int vq_scope_load(vq_scope *s, const char *dir)
{
    if (!s || !dir)
        return vq__fail(VQ_EINVAL, "vq_scope_load: NULL argument");
    DIR *d = opendir(dir);
    if (!d)
        return vq__fail(VQ_EIO, "vq_scope_load: %s: %s", dir, strerror(errno));
    int rc = 0;
    struct dirent *ent;
    while (rc == 0 && (ent = readdir(d))) {
        size_t len = strlen(ent->d_name);
        if (len <= 4 || strcmp(ent->d_name + len - 4, ".npy"))
            continue;
        size_t plen = strlen(dir) + len + 2;
        char *path = vq__malloc(plen), *name = vq__strndup(ent->d_name, len - 4);
        if (!path || !name) {
            rc = vq__fail(VQ_ENOMEM, "vq_scope_load: out of memory");
        } else {
            snprintf(path, plen, "%s/%s", dir, ent->d_name);
            file_to_name(name);
            vq_tensor *t;
            rc = vq_npy_load(path, &t);
            if (rc == 0) {
                rc = vq_scope_set(s, name, t);
                vq_tensor_release(t);
            }
        }
        free(path);
        free(name);
    }
    closedir(d);
    return rc;
}
