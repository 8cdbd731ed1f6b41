/* Writing files safely, shared by .npy saves and program saves: a regular
 * file is written beside its path under a fresh name, synced to the disk,
 * and renamed over it (the directory synced after), so readers see the old
 * file or the whole new one, after a process crash or a power loss alike,
 * and a failure leaves nothing behind. A replaced file keeps its mode (and
 * owner, where the caller may set it); one the caller may not write, or
 * with no write permission at all, is refused. Through a symlink, the
 * target is what is replaced; a device or a FIFO (/dev/stdout) is written
 * in place and never removed. */
#include "tensor_services.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int vq__io_fail(const char *path, const char *what, int err)
{
    return vq__fail(VQ_EIO, "%s: %s%s%s", path, what, *what ? ": " : "", strerror(err));
}

/* Injected faults (tests): after `inject_after` more files, the next one
 * written gets inject_kind. */
static atomic_int inject_after = -1;
static atomic_int inject_kind;

void vq__file_inject_fault(int after, int kind)
{
    atomic_store(&inject_kind, kind);
    atomic_store(&inject_after, after);
}

void vq__file_inject_enospc(int after)
{
    vq__file_inject_fault(after, VQ__FAULT_FULL);
}

/* The fault this file write gets: -1 for none (tests only inject). */
static int injected_fault(void)
{
    int left = atomic_load(&inject_after);
    while (left > 0 && !atomic_compare_exchange_weak(&inject_after, &left, left - 1))
        ;
    return left == 0 ? atomic_load(&inject_kind) : -1;
}

/* Writes n bytes, however many each write() takes (at most `chunk`, to
 * test short writes). A write that takes nothing is an error, as is
 * *budget running out (an injected failure midway: EIO). */
static int write_full(int fd, const void *buf, size_t n, size_t chunk, size_t *budget)
{
    size_t done = 0;
    while (done < n) {
        size_t want = n - done < chunk ? n - done : chunk;
        if (want > *budget) {
            errno = EIO;
            return -1;
        }
        ssize_t w = write(fd, (const char *)buf + done, want);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            if (w == 0)
                errno = EIO; /* no progress: never loop on it */
            return -1;
        }
        done += (size_t)w;
        *budget -= (size_t)w;
    }
    return 0;
}

/* Writes the parts to fd, makes them durable when sync (fsync: the bytes
 * reach the disk before the rename that publishes them), and closes it;
 * errno is kept on failure. */
static int write_and_close(int fd, const vq__file_part *parts, int nparts, bool sync)
{
    size_t total = 0;
    for (int i = 0; i < nparts; i++)
        total += parts[i].n;
    size_t chunk = SIZE_MAX, budget = SIZE_MAX;
    switch (injected_fault()) {
    case VQ__FAULT_FULL:
        close(fd);
        errno = ENOSPC;
        return -1;
    case VQ__FAULT_MIDWAY: budget = total / 2; break;
    case VQ__FAULT_SHORT: chunk = 7; break;
    default: break;
    }
    for (int i = 0; i < nparts; i++)
        if (write_full(fd, parts[i].buf, parts[i].n, chunk, &budget) < 0) {
            int err = errno;
            close(fd);
            errno = err;
            return -1;
        }
    if (sync && fsync(fd) < 0) {
        int err = errno;
        close(fd);
        errno = err;
        return -1;
    }
    return close(fd);
}

/* After a rename into dir: the directory entry itself reaches the disk. */
void vq__file_sync_dir_of(const char *target)
{
    char *dir = vq__strdup(target);
    if (!dir)
        return;
    char *slash = strrchr(dir, '/');
    const char *d = slash ? (slash == dir ? "/" : (*slash = '\0', dir)) : ".";
    int fd = open(d, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd); /* best effort: some file systems refuse it on a directory */
        close(fd);
    }
    free(dir);
}

int vq__file_replace(const char *path, const vq__file_part *parts, int nparts)
{
    char *resolved = NULL;
    struct stat st;
    if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode))
        resolved = realpath(path, NULL);
    const char *target = resolved ? resolved : path;
    int rc = 0, fd;
    bool exists = stat(target, &st) == 0;
    if (exists && !S_ISREG(st.st_mode)) {
        fd = open(target, O_WRONLY | O_TRUNC | O_CLOEXEC);
        if (fd < 0 || write_and_close(fd, parts, nparts, false) < 0)
            rc = vq__io_fail(path, "", errno);
        free(resolved);
        return rc;
    }
    /* A file the caller may not write is not replaced (the rename would
     * not ask): as numpy.save refuses it. A file with no write permission
     * for anyone is read-only for root too. */
    if (exists && (access(target, W_OK) != 0 || !(st.st_mode & 0222))) {
        rc = vq__io_fail(path, "the file is read-only", EACCES);
        free(resolved);
        return rc;
    }
    /* A new file gets 0666 less the umask; a replaced one keeps its mode. */
    size_t plen = strlen(target);
    char *tmp = vq__malloc(plen + 32);
    if (!tmp) {
        free(resolved);
        return vq__fail(VQ_ENOMEM, "%s: out of memory", path);
    }
    static _Atomic unsigned counter;
    fd = -1;
    for (int attempt = 0; attempt < 100 && fd < 0; attempt++) {
        snprintf(tmp, plen + 32, "%s.%ld.%u.tmp", target, (long)getpid(),
                 atomic_fetch_add(&counter, 1));
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd < 0 && errno != EEXIST)
            break;
    }
    if (fd >= 0 && exists) {
        /* the replaced file's mode, and its owner when we may set it */
        (void)fchmod(fd, st.st_mode & 07777);
        if (fchown(fd, st.st_uid, st.st_gid) < 0) {
            /* not the owner and not root: the new file is the caller's */
        }
    }
    if (fd < 0) {
        rc = vq__io_fail(path, "cannot create a file there", errno);
    } else if (write_and_close(fd, parts, nparts, true) < 0 || rename(tmp, target) < 0) {
        rc = vq__io_fail(path, "", errno);
        unlink(tmp);
    } else {
        vq__file_sync_dir_of(target);
    }
    free(tmp);
    free(resolved);
    return rc;
}
