/* A bump allocator for data that lives exactly as long as its owner: the
 * executor's plan (its per-op and per-var records) and the plan's frozen
 * copy of the program. Allocations are carved from chunks taken with
 * vq__malloc (so fault injection reaches them) and freed all at once with
 * the arena, which makes a prepare of n ops a handful of mallocs instead
 * of several per op, and keeps each op's records next to each other. */
#include "graph_internal.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct vq__arena_chunk {
    struct vq__arena_chunk *next;
    _Alignas(16) unsigned char data[];
};

enum { ARENA_MIN_CHUNK = 4096, ARENA_MAX_CHUNK = 1 << 16 };

void vq__arena_init(vq__arena *a, size_t hint)
{
    a->chunks = NULL;
    a->at = a->end = NULL;
    a->next_size = hint < ARENA_MIN_CHUNK   ? ARENA_MIN_CHUNK
                   : hint > ARENA_MAX_CHUNK ? ARENA_MAX_CHUNK
                                            : hint;
}

void *vq__arena_alloc_chunk(vq__arena *a, size_t size, size_t align)
{
    size_t want = size + align;
    if (want < size)
        return NULL;
    size_t n = a->next_size > want ? a->next_size : want;
    struct vq__arena_chunk *c = vq__malloc(sizeof *c + n);
    if (!c)
        return NULL;
    c->next = a->chunks;
    a->chunks = c;
    a->at = (char *)c->data;
    a->end = a->at + n;
    /* the next chunk doubles, up to ARENA_MAX_CHUNK (under malloc's mmap
     * threshold): few chunks for a big plan, little waste for a small one */
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
        free(c);
        c = next;
    }
    a->chunks = NULL;
    a->at = a->end = NULL;
}
