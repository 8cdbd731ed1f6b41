/* A bump allocator for data that lives exactly as long as its owner: the
 * executor's plan (its per-op and per-var records) and the plan's frozen
 * copy of the program. Allocations are carved from chunks taken with
 * vq__malloc (so fault injection reaches them) and freed all at once with
 * the arena, which makes a prepare of n ops a handful of mallocs instead
 * of several per op, and keeps each op's records next to each other. */
/*
 * The big arrays of a plan (its per-op and per-var records, the frames'
 * slots, the walk's scratch, the arenas' chunks) come from vq__big_alloc,
 * which keeps freed blocks for the next prepare instead of giving them back
 * to malloc: a block of a few MiB is mapped afresh by malloc every time
 * (above its mmap threshold) or faulted back after the heap's top was
 * trimmed, and a 10^5-op prepare touched about 12,000 fresh pages that way
 * (the kernel zeroing each), which made its cost per op grow with the
 * program's size. Blocks are kept by power-of-two size class, up to
 * VARQ_PLAN_RETAIN_MB in all (default 128; 0 keeps none); under
 * AddressSanitizer none is kept, so that a use after free is still seen.
 */
#include "graph_internal.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct vq__arena_chunk {
    struct vq__arena_chunk *next;
    _Alignas(16) unsigned char data[];
};

/* ---- blocks kept from one prepare for the next ---- */

#if defined(__SANITIZE_ADDRESS__)
#define BIG_KEEP 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define BIG_KEEP 0
#endif
#endif
#ifndef BIG_KEEP
#define BIG_KEEP 1
#endif

enum { BIG_ALIGN = 64, BIG_MIN_CLASS = 12, BIG_CLASSES = 48 };

/* Before each block: its size class, and the link while it is kept. */
struct big_hdr {
    _Alignas(BIG_ALIGN) unsigned cls; /* the block is 1 << cls bytes, this header included */
    struct big_hdr *next;
};

static struct {
    pthread_mutex_t lock;
    struct big_hdr *kept[BIG_CLASSES];
    size_t kept_bytes;
    size_t limit; /* SIZE_MAX: not read yet */
} big = {PTHREAD_MUTEX_INITIALIZER, {NULL}, 0, SIZE_MAX};

static size_t big_limit(void)
{
    if (big.limit == SIZE_MAX) { /* under big.lock */
        const char *env = getenv("VARQ_PLAN_RETAIN_MB");
        char *end;
        unsigned long long mb = env && *env ? strtoull(env, &end, 10) : 128;
        if (env && *env && (*end || mb > (SIZE_MAX >> 21))) {
            fprintf(stderr, "varq: VARQ_PLAN_RETAIN_MB=%s is not a number of MiB; 128 it is\n",
                    env);
            mb = 128;
        }
        big.limit = BIG_KEEP ? (size_t)mb << 20 : 0;
    }
    return big.limit;
}

/* The class of a block of n bytes, header included; BIG_CLASSES when
 * too big. */
static unsigned big_class(size_t n)
{
    unsigned cls = BIG_MIN_CLASS;
    while (cls < BIG_CLASSES && ((size_t)1 << cls) < n)
        cls++;
    return cls;
}

static size_t big_class_bytes(size_t n)
{
    return (size_t)1 << big_class(n);
}

void *vq__big_alloc(size_t n)
{
    if (n > ((size_t)1 << (BIG_CLASSES - 1)) - sizeof(struct big_hdr))
        return NULL;
    unsigned cls = big_class(n + sizeof(struct big_hdr));
    struct big_hdr *h = NULL;
    pthread_mutex_lock(&big.lock);
    if ((h = big.kept[cls]) != NULL) {
        big.kept[cls] = h->next;
        big.kept_bytes -= (size_t)1 << cls;
    }
    pthread_mutex_unlock(&big.lock);
    if (!h && !(h = vq__aligned_alloc(BIG_ALIGN, (size_t)1 << cls)))
        return NULL;
    h->cls = cls;
    return h + 1;
}

void *vq__big_calloc(size_t n, size_t size)
{
    if (size && n > SIZE_MAX / size)
        return NULL;
    void *p = vq__big_alloc(n * size);
    if (p)
        memset(p, 0, n * size);
    return p;
}

void vq__big_free(void *p)
{
    if (!p)
        return;
    struct big_hdr *h = (struct big_hdr *)p - 1;
    size_t bytes = (size_t)1 << h->cls;
    pthread_mutex_lock(&big.lock);
    bool keep = big.kept_bytes + bytes <= big_limit();
    if (keep) {
        h->next = big.kept[h->cls];
        big.kept[h->cls] = h;
        big.kept_bytes += bytes;
    }
    pthread_mutex_unlock(&big.lock);
    if (!keep)
        free(h);
}

/* Chunk sizes, headers included: powers of two, the size classes of
 * vq__big_alloc, doubling from the hint up to ARENA_MAX_CHUNK. */
enum { ARENA_MIN_CHUNK = 4096, ARENA_MAX_CHUNK = 1 << 20 };

void vq__arena_init(vq__arena *a, size_t hint)
{
    a->chunks = NULL;
    a->at = a->end = NULL;
    size_t n = ARENA_MIN_CHUNK;
    while (n < hint && n < ARENA_MAX_CHUNK)
        n *= 2;
    a->next_size = n;
}

void *vq__arena_alloc_chunk(vq__arena *a, size_t size, size_t align)
{
    size_t want = size + align;
    if (want < size)
        return NULL;
    size_t over = sizeof(struct vq__arena_chunk) + sizeof(struct big_hdr);
    if (want > SIZE_MAX - over)
        return NULL;
    size_t total = a->next_size > want + over ? a->next_size : want + over;
    size_t n = big_class_bytes(total) - over; /* the whole class is ours */
    struct vq__arena_chunk *c = vq__big_alloc(sizeof *c + n);
    if (!c)
        return NULL;
    c->next = a->chunks;
    a->chunks = c;
    a->at = (char *)c->data;
    a->end = a->at + n;
    /* the next chunk doubles, up to ARENA_MAX_CHUNK: few chunks for a big
     * plan, little waste for a small one */
    if (a->next_size < ARENA_MAX_CHUNK)
        a->next_size *= 2;
    uintptr_t at = ((uintptr_t)a->at + (align - 1)) & ~(uintptr_t)(align - 1);
    a->at = (char *)(at + size);
    return (void *)at;
}

void *vq__arena_calloc(vq__arena *a, size_t n, size_t size, size_t align)
{
    if (size && n > SIZE_MAX / size)
        return NULL;
    void *p = vq__arena_alloc(a, n * size, align);
    if (p)
        memset(p, 0, n * size);
    return p;
}

char *vq__arena_strdup(vq__arena *a, const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = vq__arena_alloc(a, n, 1);
    if (d)
        memcpy(d, s, n);
    return d;
}

void vq__arena_free(vq__arena *a)
{
    struct vq__arena_chunk *c = a->chunks;
    while (c) {
        struct vq__arena_chunk *next = c->next;
        vq__big_free(c);
        c = next;
    }
    a->chunks = NULL;
    a->at = a->end = NULL;
}
