/* .npy files: numpy's format for one array, read into and written from
 * varq tensors, so that data and weights move between numpy and varq.
 *
 * A file is the magic "\x93NUMPY", a version (1.0: 2-byte header length; 2.0
 * and 3.0: 4-byte), the header -- a Python dict literal such as
 * "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }" padded with
 * spaces and ended by '\n' -- and then the raw C-order bytes of the array.
 * The header parser below accepts the literal grammar numpy's own reader
 * does for the dtypes varq has (any key order, either quote, whitespace
 * anywhere, trailing commas) and nothing more: every read is bounds-checked
 * against the header's length, and the data must be exactly numel * itemsize
 * bytes. Errors name the source (the path, or "npy buffer") and the problem.
 *
 * Loading reads the header first and the data straight into the tensor's
 * storage, so a file is in memory once. Saving writes a version 1.0 header
 * padded to 64 bytes as numpy does; a regular file is written to a temporary
 * name beside it and renamed over the path, so a failure leaves no partial
 * file and an existing file intact. */
#include "tensor_services.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The data bytes are copied as they are: .npy little-endian is the host's
 * order. A big-endian host would need to swap here. */
#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "tensor/npy.c assumes a little-endian host"
#endif

static const char npy_magic[6] = {'\x93', 'N', 'U', 'M', 'P', 'Y'};

/* Longest prefix (magic, version, header length) of any version. */
#define PREFIX_MAX 12

/* What a header says. */
struct npy_header {
    int version;       /* major: 1, 2 or 3 */
    size_t prefix_len; /* 10 or 12 */
    size_t header_len; /* bytes of the dict and its padding */
    vq_dtype dtype;
    int ndim;
    int64_t shape[VQ_MAX_DIMS];
    size_t nbytes; /* numel * itemsize */
};

/* ---- prefix ---- */

/* Parses the prefix at buf (len bytes available, len may be short). */
static int prefix_parse(const char *src, const unsigned char *buf, size_t len, struct npy_header *h)
{
    size_t m = len < sizeof npy_magic ? len : sizeof npy_magic;
    if (memcmp(buf, npy_magic, m) != 0)
        return vq__fail(VQ_EINVAL, "%s: not a .npy file (no \\x93NUMPY magic)", src);
    if (len < 8)
        return vq__fail(VQ_EINVAL, "%s: truncated: %zu bytes, no format version", src, len);
    unsigned major = buf[6], minor = buf[7];
    if ((major != 1 && major != 2 && major != 3) || minor != 0)
        return vq__fail(VQ_EINVAL, "%s: .npy format version %u.%u is not supported (1.0, 2.0, 3.0)",
                        src, major, minor);
    h->version = (int)major;
    h->prefix_len = major == 1 ? 10 : 12;
    if (len < h->prefix_len)
        return vq__fail(VQ_EINVAL, "%s: truncated: %zu bytes, no header length", src, len);
    if (major == 1)
        h->header_len = (size_t)buf[8] | (size_t)buf[9] << 8;
    else
        h->header_len =
            (size_t)buf[8] | (size_t)buf[9] << 8 | (size_t)buf[10] << 16 | (size_t)buf[11] << 24;
    return 0;
}

/* ---- header dict ---- */

/* A cursor over the header text; every read checks p < end. */
struct cursor {
    const char *p, *end;
    const char *src;
};

static bool at_space(const struct cursor *c)
{
    return c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r' ||
                             *c->p == '\f' || *c->p == '\v');
}

static void skip_space(struct cursor *c)
{
    while (at_space(c))
        c->p++;
}

/* Skips whitespace, then consumes ch if it is next. */
static bool accept(struct cursor *c, char ch)
{
    skip_space(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return true;
    }
    return false;
}

static int malformed(const struct cursor *c, const char *what)
{
    return vq__fail(VQ_EINVAL, "%s: malformed header: %s", c->src, what);
}

/* A quoted string without escapes: sets *s and *n to its contents. */
static int parse_string(struct cursor *c, const char **s, size_t *n)
{
    skip_space(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"'))
        return malformed(c, "expected a quoted string");
    char quote = *c->p++;
    const char *start = c->p;
    while (c->p < c->end && *c->p != quote) {
        if (*c->p == '\\')
            return malformed(c, "escape in a string (not supported)");
        if (*c->p == '\n')
            break;
        c->p++;
    }
    if (c->p >= c->end || *c->p != quote)
        return malformed(c, "unterminated string");
    *s = start;
    *n = (size_t)(c->p - start);
    c->p++;
    return 0;
}

static bool accept_word(struct cursor *c, const char *word)
{
    size_t n = strlen(word);
    skip_space(c);
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, word, n) != 0)
        return false;
    /* "Trues" is a name, not True. */
    const char *after = c->p + n;
    if (after < c->end && (*after == '_' || (*after >= '0' && *after <= '9') ||
                           (*after >= 'a' && *after <= 'z') || (*after >= 'A' && *after <= 'Z')))
        return false;
    c->p = after;
    return true;
}

static int parse_bool(struct cursor *c, bool *out)
{
    if (accept_word(c, "True"))
        *out = true;
    else if (accept_word(c, "False"))
        *out = false;
    else
        return malformed(c, "fortran_order is not True or False");
    return 0;
}

/* The descr string: one of the supported dtypes, or an error naming it. */
static int parse_descr(struct cursor *c, vq_dtype *out)
{
    skip_space(c);
    if (c->p < c->end && *c->p == '[')
        return vq__fail(VQ_EINVAL,
                        "%s: structured dtype (a list descr) is not supported "
                        "(f4, f8, i4, i8, b1, f2, V2, i1, u1, i2, u2, u4, u8)",
                        c->src);
    const char *s;
    size_t n;
    int rc = parse_string(c, &s, &n);
    if (rc < 0)
        return rc;
    static const struct {
        const char *code;
        vq_dtype dt;
    } codes[] = {{"f4", VQ_F32}, {"f8", VQ_F64},  {"i4", VQ_I32}, {"i8", VQ_I64}, {"b1", VQ_BOOL},
                 {"f2", VQ_F16}, {"V2", VQ_BF16}, {"i1", VQ_I8},  {"u1", VQ_U8},  {"i2", VQ_I16},
                 {"u2", VQ_U16}, {"u4", VQ_U32},  {"u8", VQ_U64}};
    if (n == 3 && (s[0] == '<' || s[0] == '=' || s[0] == '|' || s[0] == '>'))
        for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
            if (memcmp(s + 1, codes[i].code, 2) != 0)
                continue;
            /* bf16's void bytes have no byte order in numpy's eyes ('|V2'),
             * but they are varq's little-endian 16-bit patterns */
            bool byte_sized = vq_dtype_size(codes[i].dt) == 1 || codes[i].dt == VQ_BF16;
            if (byte_sized || s[0] == '<' || s[0] == '=') {
                *out = codes[i].dt;
                return 0;
            }
            if (s[0] == '>')
                return vq__fail(VQ_EINVAL,
                                "%s: big-endian dtype '%.3s' is not supported "
                                "(save it little-endian, e.g. a.astype('<%.2s'))",
                                c->src, s, s + 1);
            break; /* '|f4': numpy never writes a multi-byte dtype as byte-order-free */
        }
    /* the descr as it is, a NUL or another control byte shown escaped */
    char shown[32 * 4 + 1];
    size_t at = 0;
    for (size_t i = 0; i < n && i < 32; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch >= 0x20 && ch < 0x7f && ch != '\\')
            shown[at++] = (char)ch;
        else
            at += (size_t)snprintf(shown + at, sizeof shown - at, "\\x%02x", ch);
    }
    shown[at] = '\0';
    return vq__fail(VQ_EINVAL,
                    "%s: dtype '%s%s' is not supported (<f4, <f8, <i4, <i8, |b1, <f2, |V2 "
                    "(bf16), |i1, |u1, <i2, <u2, <u4, <u8)",
                    c->src, shown, n > 32 ? "..." : "");
}

/* A tuple of non-negative ints: "()", "(5,)", "(2, 3)". Python's "(5)" is
 * an int, not a tuple, and numpy rejects it; so do we. */
static int parse_shape(struct cursor *c, struct npy_header *h)
{
    if (!accept(c, '('))
        return malformed(c, "shape is not a tuple");
    int n = 0;
    bool comma = false; /* a comma followed the last element */
    for (;;) {
        if (accept(c, ')'))
            break;
        if (n > 0 && !comma)
            return malformed(c, "expected ',' or ')' in shape");
        skip_space(c);
        bool negative = false;
        if (c->p < c->end && *c->p == '-') {
            negative = true;
            c->p++;
        }
        if (c->p >= c->end || *c->p < '0' || *c->p > '9')
            return malformed(c, "shape holds something other than an int");
        uint64_t v = 0;
        bool too_big = false;
        while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
            unsigned d = (unsigned)(*c->p++ - '0');
            if (v > ((uint64_t)INT64_MAX - d) / 10)
                too_big = true;
            else
                v = v * 10 + d;
        }
        /* Python 2 wrote longs as "3L"; numpy still reads such 1.0/2.0 files. */
        if (h->version < 3 && c->p < c->end && (*c->p == 'L' || *c->p == 'l'))
            c->p++;
        if (negative && v != 0)
            return vq__fail(VQ_EINVAL, "%s: dim %d is negative", c->src, n);
        if (too_big)
            return vq__fail(VQ_EINVAL, "%s: dim %d does not fit in 64 bits", c->src, n);
        if (n < VQ_MAX_DIMS)
            h->shape[n] = (int64_t)v;
        if (n == INT_MAX)
            return malformed(c, "shape too long");
        n++;
        comma = accept(c, ',');
    }
    if (n == 1 && !comma)
        return malformed(c, "shape '(d)' is an int, not a tuple: write '(d,)'");
    if (n > VQ_MAX_DIMS)
        return vq__fail(VQ_EINVAL, "%s: %d dims, more than VQ_MAX_DIMS (%d)", c->src, n,
                        VQ_MAX_DIMS);
    h->ndim = n;
    return 0;
}

/* Parses the dict in text[0, len) into h (dtype, ndim, shape, nbytes). */
static int header_parse(const char *src, const char *text, size_t len, struct npy_header *h)
{
    struct cursor c = {text, text + len, src};
    if (len == 0 || text[len - 1] != '\n')
        return malformed(&c, "the header does not end with '\\n'");
    if (!accept(&c, '{'))
        return malformed(&c, "the header is not a dict");
    enum { DESCR = 1, FORTRAN = 2, SHAPE = 4 };
    unsigned seen = 0;
    bool fortran = false;
    for (;;) {
        if (accept(&c, '}'))
            break;
        if (c.p == c.end)
            return malformed(&c, "the dict is not closed with '}'");
        const char *key;
        size_t n;
        int rc = parse_string(&c, &key, &n);
        if (rc < 0)
            return rc;
        if (!accept(&c, ':'))
            return malformed(&c, "expected ':' after a key");
        unsigned which;
        if (n == 5 && !memcmp(key, "descr", 5)) {
            which = DESCR;
        } else if (n == 13 && !memcmp(key, "fortran_order", 13)) {
            which = FORTRAN;
        } else if (n == 5 && !memcmp(key, "shape", 5)) {
            which = SHAPE;
        } else {
            return vq__fail(VQ_EINVAL, "%s: malformed header: unknown key '%.*s'", src,
                            n > 32 ? 32 : (int)n, key);
        }
        if (seen & which)
            return vq__fail(VQ_EINVAL, "%s: malformed header: key '%.*s' appears twice", src,
                            (int)n, key);
        seen |= which;
        if (which == DESCR)
            rc = parse_descr(&c, &h->dtype);
        else if (which == FORTRAN)
            rc = parse_bool(&c, &fortran);
        else
            rc = parse_shape(&c, h);
        if (rc < 0)
            return rc;
        if (!accept(&c, ',')) {
            if (!accept(&c, '}'))
                return malformed(&c, "expected ',' or '}' after a value");
            break;
        }
    }
    skip_space(&c);
    if (c.p != c.end)
        return malformed(&c, "bytes after the dict");
    if (seen != (DESCR | FORTRAN | SHAPE))
        return vq__fail(VQ_EINVAL, "%s: malformed header: no '%s' key", src,
                        !(seen & DESCR)     ? "descr"
                        : !(seen & FORTRAN) ? "fortran_order"
                                            : "shape");
    if (fortran)
        return vq__fail(VQ_EINVAL,
                        "%s: Fortran order (fortran_order: True) is not supported; "
                        "save a C-order array (numpy.ascontiguousarray)",
                        src);
    /* numel * itemsize, refusing any product past what memory could hold.
     * A zero dim makes the array empty, but the other dims must still be
     * sane: numpy could not have made the array otherwise. */
    uint64_t bytes = vq_dtype_size(h->dtype);
    bool empty = false;
    for (int i = 0; i < h->ndim; i++) {
        if (h->shape[i] == 0) {
            empty = true;
            continue;
        }
        if (__builtin_mul_overflow(bytes, (uint64_t)h->shape[i], &bytes) ||
            bytes > (uint64_t)PTRDIFF_MAX) {
            char shape[VQ_MAX_DIMS * 21 + 3];
            return vq__fail(VQ_EINVAL, "%s: shape %s is too large", src,
                            vq__shape_str(shape, sizeof shape, h->ndim, h->shape));
        }
    }
    h->nbytes = empty ? 0 : (size_t)bytes;
    return 0;
}

/* The data must be exactly h->nbytes long: have is what is there. */
static int data_length_fail(const char *src, const struct npy_header *h, uint64_t have)
{
    char shape[VQ_MAX_DIMS * 21 + 3];
    vq__shape_str(shape, sizeof shape, h->ndim, h->shape);
    if (have < h->nbytes)
        return vq__fail(VQ_EINVAL, "%s: truncated: %llu data bytes, %s %s needs %zu", src,
                        (unsigned long long)have, vq_dtype_name(h->dtype), shape, h->nbytes);
    return vq__fail(VQ_EINVAL, "%s: malformed: %llu bytes after the data of %s %s", src,
                    (unsigned long long)(have - h->nbytes), vq_dtype_name(h->dtype), shape);
}

static int bool_check(const char *src, const unsigned char *data, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (data[i] > 1)
            return vq__fail(VQ_EINVAL, "%s: bool element %zu is %u, not 0 or 1", src, i, data[i]);
    return 0;
}

/* ---- parse from memory ---- */

VQ_API int vq_npy_parse(const void *buf, size_t len, vq_tensor **out)
{
    static const char src[] = "npy buffer";
    if (!out)
        return vq__fail(VQ_EINVAL, "vq_npy_parse: out is NULL");
    *out = NULL;
    if (!buf)
        return vq__fail(VQ_EINVAL, "vq_npy_parse: buf is NULL");
    const unsigned char *b = buf;
    struct npy_header h = {0};
    int rc = prefix_parse(src, b, len, &h);
    if (rc < 0)
        return rc;
    if (h.header_len > len - h.prefix_len)
        return vq__fail(VQ_EINVAL, "%s: truncated: header of %zu bytes, %zu there", src,
                        h.header_len, len - h.prefix_len);
    rc = header_parse(src, (const char *)b + h.prefix_len, h.header_len, &h);
    if (rc < 0)
        return rc;
    size_t off = h.prefix_len + h.header_len;
    if (len - off != h.nbytes)
        return data_length_fail(src, &h, len - off);
    if (h.dtype == VQ_BOOL && (rc = bool_check(src, b + off, h.nbytes)) < 0)
        return rc;
    vq_tensor *t;
    if ((rc = vq__tensor_empty(&t, h.dtype, h.ndim, h.shape)) < 0)
        return rc;
    if (h.nbytes)
        memcpy(t->data, b + off, h.nbytes);
    *out = t;
    return 0;
}

/* ---- load from a file ---- */

/* Reads up to n bytes, stopping early only at end of file. Returns the count
 * read, or -1 with errno set. */
static ssize_t read_full(int fd, void *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, (char *)buf + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -1;
        if (r == 0)
            break;
        got += (size_t)r;
    }
    return (ssize_t)got;
}

/* The load proper, on an open fd; frees nothing of the caller's. */
static int load_fd(const char *path, int fd, vq_tensor **out)
{
    struct stat st;
    if (fstat(fd, &st) < 0)
        return vq__io_fail(path, "", errno);
    /* A regular file's size bounds what a header may claim before anything
     * is allocated; other files (pipes) are read until they end. */
    bool sized = S_ISREG(st.st_mode);
    unsigned char prefix[PREFIX_MAX];
    ssize_t n = read_full(fd, prefix, sizeof prefix);
    if (n < 0)
        return vq__io_fail(path, "", errno);
    struct npy_header h = {0};
    int rc = prefix_parse(path, prefix, (size_t)n, &h);
    if (rc < 0)
        return rc;
    size_t extra = (size_t)n - h.prefix_len; /* header bytes already in prefix[] */
    if (sized && (uint64_t)st.st_size < (uint64_t)h.prefix_len + h.header_len)
        return vq__fail(VQ_EINVAL, "%s: truncated: header of %zu bytes, %llu there", path,
                        h.header_len, (unsigned long long)st.st_size - h.prefix_len);
    char *text = vq__malloc(h.header_len ? h.header_len : 1);
    if (!text)
        return vq__fail(VQ_ENOMEM, "%s: out of memory for a header of %zu bytes", path,
                        h.header_len);
    size_t head = extra < h.header_len ? extra : h.header_len;
    memcpy(text, prefix + h.prefix_len, head);
    n = read_full(fd, text + head, h.header_len - head);
    if (n < 0) {
        rc = vq__io_fail(path, "", errno);
    } else if ((size_t)n < h.header_len - head) {
        rc = vq__fail(VQ_EINVAL, "%s: truncated: header of %zu bytes, %zu there", path,
                      h.header_len, head + (size_t)n);
    } else {
        rc = header_parse(path, text, h.header_len, &h);
    }
    free(text);
    if (rc < 0)
        return rc;
    /* Data bytes that came with the prefix (a header shorter than 2 bytes). */
    size_t early = extra - head;
    if (sized) {
        uint64_t have = (uint64_t)st.st_size - h.prefix_len - h.header_len;
        if (have != h.nbytes)
            return data_length_fail(path, &h, have);
    }
    if (early > h.nbytes)
        return data_length_fail(path, &h, early);
    vq_tensor *t;
    if ((rc = vq__tensor_empty(&t, h.dtype, h.ndim, h.shape)) < 0)
        return rc;
    if (early)
        memcpy(t->data, prefix + h.prefix_len + head, early);
    n = read_full(fd, (char *)t->data + early, h.nbytes - early);
    char probe;
    if (n < 0) {
        rc = vq__io_fail(path, "", errno);
    } else if ((size_t)n < h.nbytes - early) {
        rc = data_length_fail(path, &h, early + (size_t)n);
    } else if ((n = read_full(fd, &probe, 1)) != 0) {
        /* The file grew since fstat, or is not a regular one. */
        rc = n < 0 ? vq__io_fail(path, "", errno) : data_length_fail(path, &h, h.nbytes + 1);
    } else if (h.dtype == VQ_BOOL) {
        rc = bool_check(path, t->data, h.nbytes);
    }
    if (rc < 0) {
        vq_tensor_release(t);
        return rc;
    }
    *out = t;
    return 0;
}

VQ_API int vq_npy_load(const char *path, vq_tensor **out)
{
    if (!out)
        return vq__fail(VQ_EINVAL, "vq_npy_load: out is NULL");
    *out = NULL;
    if (!path)
        return vq__fail(VQ_EINVAL, "vq_npy_load: path is NULL");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return vq__io_fail(path, "", errno);
    int rc = load_fd(path, fd, out);
    close(fd);
    return rc;
}

/* ---- save ---- */

/* The header for t: magic, version, length, dict, spaces, '\n', a multiple
 * of 64 bytes long as numpy writes it. Returns its length, or 0 if buf (size
 * bytes) is too small. */
static size_t header_build(const vq_tensor *t, char *buf, size_t size)
{
    static const char *const descr[VQ_DTYPE_COUNT] = {
        [VQ_F32] = "<f4", [VQ_F64] = "<f8",  [VQ_I32] = "<i4", [VQ_I64] = "<i8", [VQ_BOOL] = "|b1",
        [VQ_F16] = "<f2", [VQ_BF16] = "|V2", [VQ_I8] = "|i1",  [VQ_U8] = "|u1",  [VQ_I16] = "<i2",
        [VQ_U16] = "<u2", [VQ_U32] = "<u4",  [VQ_U64] = "<u8",
    };
    char dict[64 + VQ_MAX_DIMS * 22];
    size_t n = (size_t)snprintf(dict, sizeof dict,
                                "{'descr': '%s', 'fortran_order': False, "
                                "'shape': (",
                                descr[t->dtype]);
    for (int i = 0; i < t->ndim; i++)
        n += (size_t)snprintf(dict + n, sizeof dict - n, i ? ", %lld" : "%lld",
                              (long long)t->shape[i]);
    n += (size_t)snprintf(dict + n, sizeof dict - n, "%s), }", t->ndim == 1 ? "," : "");
    /* Version 1.0 has a 2-byte header length; 2.0 is for longer headers,
     * which varq's at most VQ_MAX_DIMS dims never need. */
    size_t prefix = 10;
    size_t total = (prefix + n + 1 + 63) / 64 * 64;
    if (total - prefix > 65535) {
        prefix = 12;
        total = (prefix + n + 1 + 63) / 64 * 64;
    }
    if (total > size)
        return 0;
    size_t hlen = total - prefix;
    memcpy(buf, npy_magic, sizeof npy_magic);
    buf[6] = prefix == 10 ? 1 : 2;
    buf[7] = 0;
    for (size_t i = 0; i < prefix - 8; i++)
        buf[8 + i] = (char)(hlen >> (8 * i) & 0xff);
    memcpy(buf + prefix, dict, n);
    memset(buf + prefix + n, ' ', hlen - n - 1);
    buf[total - 1] = '\n';
    return total;
}

VQ_API int vq_npy_save(const char *path, vq_tensor *t)
{
    if (!path)
        return vq__fail(VQ_EINVAL, "vq_npy_save: path is NULL");
    if (!t)
        return vq__fail(VQ_EINVAL, "vq_npy_save: tensor is NULL");
    int rc = vq_tensor_wait(t);
    if (rc < 0)
        return rc;
    char header[256 + VQ_MAX_DIMS * 22];
    size_t hlen = header_build(t, header, sizeof header);
    if (hlen == 0)
        return vq__fail(VQ_EINVAL, "%s: header too long", path);
    /* A GPU tensor goes through a host copy (its work is done: waited). */
    void *host = NULL;
    if (t->dev.kind == VQ_DEV_GPU && t->nbytes) {
        if (!(host = vq__malloc(t->nbytes)))
            return vq__fail(VQ_ENOMEM, "%s: out of memory for a host copy", path);
        if ((rc = vq__gpu_copy_sync(t->dev.id, host, t->data, t->nbytes, VQ__MEMCPY_D2H)) < 0) {
            free(host);
            return rc;
        }
    }
    vq__file_part parts[2] = {{header, hlen}, {host ? host : t->data, t->nbytes}};
    rc = vq__file_replace(path, parts, 2);
    free(host);
    return rc;
}
