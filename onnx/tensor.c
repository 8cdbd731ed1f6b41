/* ONNX TensorProto -> varq tensor: element types, shapes checked against
 * the data, raw bytes (little-endian, as ONNX stores them) or the typed
 * repeated fields, and external data read from a file beside the model. */
#include "onnx_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#ifdef SYS_openat2
#include <linux/openat2.h>
#endif

bool vq__onnx_dtype(int32_t onnx_type, vq_dtype *out)
{
    switch (onnx_type) {
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT: *out = VQ_F32; return true;
    case ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE: *out = VQ_F64; return true;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT32: *out = VQ_I32; return true;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT64: *out = VQ_I64; return true;
    case ONNX__TENSOR_PROTO__DATA_TYPE__BOOL: *out = VQ_BOOL; return true;
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16: *out = VQ_F16; return true;
    case ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16: *out = VQ_BF16; return true;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT8: *out = VQ_I8; return true;
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT8: *out = VQ_U8; return true;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT16: *out = VQ_I16; return true;
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT16: *out = VQ_U16; return true;
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT32: *out = VQ_U32; return true;
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT64: *out = VQ_U64; return true;
    default: return false;
    }
}

const char *vq__onnx_type_name(int32_t onnx_type)
{
    static const char *const names[] = {"UNDEFINED", "FLOAT",  "UINT8",     "INT8",
                                        "UINT16",    "INT16",  "INT32",     "INT64",
                                        "STRING",    "BOOL",   "FLOAT16",   "DOUBLE",
                                        "UINT32",    "UINT64", "COMPLEX64", "COMPLEX128",
                                        "BFLOAT16"};
    if (onnx_type >= 0 && onnx_type < (int32_t)(sizeof names / sizeof names[0]))
        return names[onnx_type];
    return "an unknown type";
}

/* Opens location beneath directory dirfd, read-only, without blocking (a
 * FIFO would wait for a writer forever) and without following a link out
 * of the directory: openat2's RESOLVE_BENEATH where the kernel has it, else
 * openat and then a check that the file opened is the one the resolved
 * path names, under the resolved directory. -1 with errno (EXDEV for a
 * file outside). */
static int open_beneath(int dirfd, const char *dir, const char *location)
{
    int fd, flags = O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC;
#ifdef SYS_openat2
    struct open_how how = {.flags = (uint64_t)flags,
                           .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS};
    fd = (int)syscall(SYS_openat2, dirfd, location, &how, sizeof how);
    if (fd >= 0 || (errno != ENOSYS && errno != EPERM))
        return fd;
#endif
    fd = openat(dirfd, location, flags);
    if (fd < 0)
        return -1;
    size_t n = strlen(dir) + strlen(location) + 2;
    char *path = vq__malloc(n), *rdir = realpath(dir, NULL), *rfile = NULL;
    bool inside = false;
    struct stat a, b;
    if (path && rdir) {
        snprintf(path, n, "%s/%s", dir, location);
        size_t k = strlen(rdir);
        rfile = realpath(path, NULL);
        inside = rfile && (!strncmp(rfile, rdir, k) && (rfile[k] == '/' || !strcmp(rdir, "/"))) &&
                 stat(rfile, &a) == 0 && fstat(fd, &b) == 0 && a.st_dev == b.st_dev &&
                 a.st_ino == b.st_ino;
    }
    free(path);
    free(rdir);
    free(rfile);
    if (!inside) {
        close(fd);
        errno = EXDEV;
        return -1;
    }
    return fd;
}

/* The external data of t: its file (relative to dir, no "..", not
 * absolute, a regular file, not reached through a link out of dir),
 * offset and length (-1: to the end), read into *v, a new tensor of dtype
 * dt and shape[ndim] (want bytes) allocated once the file is known to hold
 * them; *v stays NULL until then, the caller releases it on failure. */
static int external_read(const Onnx__TensorProto *t, const char *dir, const char *what, vq_dtype dt,
                         int ndim, const int64_t *shape, size_t want, vq_tensor **v)
{
    const char *location = NULL;
    long long offset = 0, length = -1;
    for (size_t i = 0; i < t->n_external_data; i++) {
        const Onnx__StringStringEntryProto *e = t->external_data[i];
        if (!e->key || !e->value)
            continue;
        char *end;
        if (!strcmp(e->key, "location")) {
            location = e->value;
        } else if (!strcmp(e->key, "offset") || !strcmp(e->key, "length")) {
            errno = 0;
            long long v = strtoll(e->value, &end, 10);
            if (errno || *end || v < 0)
                return vq__fail(VQ_EINVAL, "onnx: %s: external data %s \"%s\" is not a size",
                                what, e->key, e->value);
            if (!strcmp(e->key, "offset"))
                offset = v;
            else
                length = v;
        }
    }
    if (!dir)
        return vq__fail(VQ_EINVAL, "onnx: %s is stored as external data; import the model "
                                   "from its file (vq_program_from_onnx_file) to read it",
                        what);
    if (!location || !*location || location[0] == '/' || strstr(location, ".."))
        return vq__fail(VQ_EINVAL, "onnx: %s: external data location \"%s\" is not a file "
                                   "name inside the model's directory",
                        what, location ? location : "");
    if (length >= 0 && (size_t)length != want)
        return vq__fail(VQ_EINVAL, "onnx: %s: external data length %lld, but the shape needs "
                                   "%zu bytes",
                        what, length, want);
    int dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dirfd < 0)
        return vq__fail(VQ_EIO, "onnx: %s: the model's directory %s: %s", what, dir,
                        strerror(errno));
    int fd = open_beneath(dirfd, dir, location);
    int err = errno;
    close(dirfd);
    if (fd < 0 && err == EXDEV)
        return vq__fail(VQ_EINVAL,
                        "onnx: %s: external data file %s/%s is a link to a file "
                        "outside the model's directory",
                        what, dir, location);
    if (fd < 0)
        return vq__fail(VQ_EIO, "onnx: %s: external data file %s/%s: %s", what, dir, location,
                        strerror(err));
    struct stat st;
    int rc = 0;
    if (fstat(fd, &st) != 0) {
        rc = vq__fail(VQ_EIO, "onnx: %s: external data file %s/%s: %s", what, dir, location,
                      strerror(errno));
    } else if (!S_ISREG(st.st_mode)) {
        rc = vq__fail(VQ_EINVAL,
                      "onnx: %s: external data file %s/%s is not a regular file "
                      "(a FIFO, device or directory)",
                      what, dir, location);
    } else if (__builtin_add_overflow(offset, (long long)want, &(long long){0})) {
        rc = vq__fail(VQ_EINVAL, "onnx: %s: external data offset %lld plus %zu bytes overflows",
                      what, offset, want);
    } else if (st.st_size < offset || (unsigned long long)(st.st_size - offset) < want) {
        rc = vq__fail(VQ_EIO,
                      "onnx: %s: external data file %s/%s holds less than %zu "
                      "bytes at offset %lld",
                      what, dir, location, want, offset);
    } else if ((rc = vq__tensor_empty(v, dt, ndim, shape)) == 0) {
        char *dst = (*v)->data;
        size_t got = 0;
        while (got < want) {
            ssize_t r = pread(fd, dst + got, want - got, (off_t)offset + (off_t)got);
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0)
                break;
            got += (size_t)r;
        }
        if (got != want)
            rc = vq__fail(VQ_EIO,
                          "onnx: %s: external data file %s/%s holds less than %zu "
                          "bytes at offset %lld",
                          what, dir, location, want, offset);
    }
    close(fd);
    return rc;
}

int vq__onnx_tensor(const Onnx__TensorProto *t, const char *dir, const char *what,
                    vq_tensor **out)
{
    *out = NULL;
    int32_t type = t->has_data_type ? t->data_type : 0;
    vq_dtype dt;
    if (!vq__onnx_dtype(type, &dt))
        return vq__fail(VQ_ENOSYS,
                        "onnx: %s has element type %s (%d); varq has float, "
                        "double, float16, bfloat16, bool and the integers of "
                        "8 to 64 bits",
                        what, vq__onnx_type_name(type), (int)type);
    if (t->n_dims > VQ_MAX_DIMS)
        return vq__fail(VQ_ENOSYS, "onnx: %s has %zu dims; varq has at most %d", what,
                        t->n_dims, VQ_MAX_DIMS);
    int64_t shape[VQ_MAX_DIMS];
    for (size_t i = 0; i < t->n_dims; i++) {
        if (t->dims[i] < 0)
            return vq__fail(VQ_EINVAL, "onnx: %s: dim %zu is %lld", what, i,
                            (long long)t->dims[i]);
        shape[i] = t->dims[i];
    }
    int64_t numel = vq__numel((int)t->n_dims, shape);
    size_t esize = vq_dtype_size(dt);
    if (numel == INT64_MAX || (uint64_t)numel > SIZE_MAX / 16 / esize)
        return vq__fail(VQ_EINVAL, "onnx: %s: shape overflows", what);
    size_t nbytes = (size_t)numel * esize;
    if (t->segment)
        return vq__fail(VQ_ENOSYS, "onnx: %s is a segment of a tensor", what);
    bool external = t->has_data_location &&
                    t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
    /* the data the message holds must fill the shape, checked before the
     * tensor is allocated: dims are free to declare, so a few bytes could
     * otherwise ask for gigabytes */
    if (!external && t->has_raw_data && t->raw_data.len != nbytes)
        return vq__fail(VQ_EINVAL, "onnx: %s: %zu bytes of raw data, the shape needs %zu", what,
                        t->raw_data.len, nbytes);
    if (!external && !t->has_raw_data) {
        /* the typed field ONNX's TensorProto says each type uses: int32_data
         * carries the types of 16 bits and fewer (f16 and bf16 as their bit
         * patterns), uint64_data the unsigned types of 32 and 64 bits */
        size_t have = dt == VQ_F32                   ? t->n_float_data
                      : dt == VQ_F64                 ? t->n_double_data
                      : dt == VQ_I64                 ? t->n_int64_data
                      : dt == VQ_U32 || dt == VQ_U64 ? t->n_uint64_data
                                                     : t->n_int32_data;
        if (have != (size_t)numel)
            return vq__fail(VQ_EINVAL, "onnx: %s: %zu values for a shape of %lld elements", what,
                            have, (long long)numel);
    }
    vq_tensor *v = NULL;
    int rc = external ? external_read(t, dir, what, dt, (int)t->n_dims, shape, nbytes, &v)
                      : vq__tensor_empty(&v, dt, (int)t->n_dims, shape);
    if (rc == 0 && !external && t->has_raw_data) {
        if (nbytes)
            memcpy(v->data, t->raw_data.data, nbytes);
    } else if (rc == 0 && !external && nbytes) {
        switch (dt) {
        case VQ_F32: memcpy(v->data, t->float_data, nbytes); break;
        case VQ_F64: memcpy(v->data, t->double_data, nbytes); break;
        case VQ_I64: memcpy(v->data, t->int64_data, nbytes); break;
        case VQ_I32: memcpy(v->data, t->int32_data, nbytes); break;
        case VQ_BOOL:
            for (int64_t i = 0; i < numel; i++)
                ((unsigned char *)v->data)[i] = t->int32_data[i] != 0;
            break;
        /* each value's low bits, as ONNX's writers store them */
        case VQ_I8:
        case VQ_U8:
            for (int64_t i = 0; i < numel; i++)
                ((uint8_t *)v->data)[i] = (uint8_t)(uint32_t)t->int32_data[i];
            break;
        case VQ_F16:
        case VQ_BF16:
        case VQ_I16:
        case VQ_U16:
            for (int64_t i = 0; i < numel; i++)
                ((uint16_t *)v->data)[i] = (uint16_t)(uint32_t)t->int32_data[i];
            break;
        case VQ_U32:
            for (int64_t i = 0; i < numel; i++)
                ((uint32_t *)v->data)[i] = (uint32_t)t->uint64_data[i];
            break;
        case VQ_U64: memcpy(v->data, t->uint64_data, nbytes); break;
        }
    }
    if (rc == 0 && dt == VQ_BOOL)
        for (int64_t i = 0; i < numel; i++)
            ((unsigned char *)v->data)[i] = ((unsigned char *)v->data)[i] != 0;
    if (rc < 0) {
        vq_tensor_release(v);
        return rc;
    }
    *out = v;
    return 0;
}

VQ_API int vq_tensor_from_onnx(vq_tensor **out, char **name, const void *buf, size_t len)
{
    if (!out || (!buf && len))
        return vq__fail(VQ_EINVAL, "vq_tensor_from_onnx: NULL argument");
    *out = NULL;
    if (name)
        *name = NULL;
    unsigned failed = vq__protobuf_failed_allocs();
    Onnx__TensorProto *t = onnx__tensor_proto__unpack(&vq__protobuf_allocator, len, buf);
    if (!t && vq__protobuf_failed_allocs() != failed)
        return vq__fail(VQ_ENOMEM, "vq_tensor_from_onnx: out of memory while parsing %zu bytes", len);
    if (!t)
        return vq__fail(VQ_EINVAL, "vq_tensor_from_onnx: not an ONNX TensorProto (%zu bytes "
                                   "that do not decode)",
                        len);
    char what[160];
    snprintf(what, sizeof what, "tensor \"%s\"", t->name ? t->name : "");
    int rc = vq__onnx_tensor(t, NULL, what, out);
    if (rc == 0 && name && !(*name = vq__strdup(t->name ? t->name : ""))) {
        vq_tensor_release(*out);
        *out = NULL;
        rc = vq__fail(VQ_ENOMEM, "vq_tensor_from_onnx: out of memory");
    }
    onnx__tensor_proto__free_unpacked(t, &vq__protobuf_allocator);
    return rc;
}

/* ---- SequenceProto and OptionalProto (onnx-data.proto, which the
 * onnx.proto varq compiles lacks): read straight off the wire ---- */

/* A varint at *p (< end), advancing *p; false when cut off. */
static bool wire_varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
    *v = 0;
    for (int shift = 0; *p < end && shift < 64; shift += 7) {
        uint8_t b = *(*p)++;
        *v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            return true;
    }
    return false;
}

/* The next field at *p: its number, wire type, and for a varint its value
 * (*v), for a length-delimited one its bytes (*f, *flen); false at a
 * malformed one. */
static bool wire_field(const uint8_t **p, const uint8_t *end, uint64_t *num, int *wt, uint64_t *v,
                       const uint8_t **f, size_t *flen)
{
    uint64_t key;
    if (!wire_varint(p, end, &key))
        return false;
    *num = key >> 3;
    *wt = (int)(key & 7);
    switch (*wt) {
    case 0: return wire_varint(p, end, v);
    case 1:
    case 5: {
        size_t k = *wt == 1 ? 8 : 4;
        if ((size_t)(end - *p) < k)
            return false;
        *p += k;
        return true;
    }
    case 2:
        if (!wire_varint(p, end, v) || *v > (uint64_t)(end - *p))
            return false;
        *f = *p;
        *flen = (size_t)*v;
        *p += *flen;
        return true;
    default: return false;
    }
}

/* Appends the TensorProto buf[0..len) to d's elements. */
static int data_elem(vq_onnx_data *d, const uint8_t *buf, size_t len)
{
    vq_tensor **e = vq__realloc(d->elems, (size_t)(d->nelems + 1) * sizeof *e);
    if (!e)
        return vq__fail(VQ_ENOMEM, "vq_onnx_data_read: out of memory");
    d->elems = e;
    int rc = vq_tensor_from_onnx(&e[d->nelems], NULL, buf, len);
    if (rc == 0)
        d->nelems++;
    return rc;
}

/* A SequenceProto of tensors into d. */
static int data_sequence(vq_onnx_data *d, const uint8_t *p, const uint8_t *end)
{
    d->sequence = true;
    while (p < end) {
        uint64_t num = 0, v = 0;
        int wt, rc;
        const uint8_t *f = NULL;
        size_t flen = 0;
        if (!wire_field(&p, end, &num, &wt, &v, &f, &flen))
            return vq__fail(VQ_EINVAL, "vq_onnx_data_read: not a SequenceProto");
        if (num == 2 && wt == 0 && v != 0 && v != 1)
            return vq__fail(VQ_ENOSYS,
                            "vq_onnx_data_read: a sequence of element kind %llu; "
                            "varq reads sequences of tensors",
                            (unsigned long long)v);
        if (num >= 4 && num <= 7 && wt == 2)
            return vq__fail(VQ_ENOSYS, "vq_onnx_data_read: a sequence of sparse tensors, "
                                       "sequences, maps or optionals; varq reads sequences of "
                                       "tensors");
        if (num == 3 && wt == 2 && (rc = data_elem(d, f, flen)) < 0)
            return rc;
    }
    return 0;
}

/* An OptionalProto of a tensor or a sequence of tensors into d. */
static int data_optional(vq_onnx_data *d, const uint8_t *p, const uint8_t *end)
{
    d->none = true;
    while (p < end) {
        uint64_t num = 0, v = 0;
        int wt, rc;
        const uint8_t *f = NULL;
        size_t flen = 0;
        if (!wire_field(&p, end, &num, &wt, &v, &f, &flen))
            return vq__fail(VQ_EINVAL, "vq_onnx_data_read: not an OptionalProto");
        if (num == 3 && wt == 2) {
            vq_tensor_release(d->tensor);
            if ((rc = vq_tensor_from_onnx(&d->tensor, NULL, f, flen)) < 0)
                return rc;
            d->none = false;
        } else if (num == 5 && wt == 2) {
            if ((rc = data_sequence(d, f, f + flen)) < 0)
                return rc;
            d->none = false;
        } else if (num >= 4 && num <= 7 && wt == 2) {
            return vq__fail(VQ_ENOSYS, "vq_onnx_data_read: an optional of a sparse tensor, a "
                                       "map or an optional; varq reads optional tensors and "
                                       "sequences");
        }
    }
    return 0;
}

VQ_API int vq_onnx_data_read(vq_onnx_data *out, vq_onnx_kind kind, const void *buf, size_t len)
{
    if (!out || (!buf && len))
        return vq__fail(VQ_EINVAL, "vq_onnx_data_read: NULL argument");
    memset(out, 0, sizeof *out);
    const uint8_t *p = buf, *end = p + len;
    int rc;
    switch (kind) {
    case VQ_ONNX_TENSOR: rc = vq_tensor_from_onnx(&out->tensor, NULL, buf, len); break;
    case VQ_ONNX_SEQUENCE: rc = data_sequence(out, p, end); break;
    case VQ_ONNX_OPTIONAL:
    case VQ_ONNX_OPTIONAL_SEQUENCE: rc = data_optional(out, p, end); break;
    default: rc = vq__fail(VQ_EINVAL, "vq_onnx_data_read: kind %d", (int)kind);
    }
    if (rc < 0)
        vq_onnx_data_free(out);
    return rc;
}

VQ_API void vq_onnx_data_free(vq_onnx_data *d)
{
    if (!d)
        return;
    vq_tensor_release(d->tensor);
    for (int i = 0; i < d->nelems; i++)
        vq_tensor_release(d->elems[i]);
    free(d->elems);
    memset(d, 0, sizeof *d);
}
