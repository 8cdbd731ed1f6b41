/* Allocation wrappers with failure injection (fault.h). The countdown is
 * one atomic: armed at n, each allocation takes one from it, and the one
 * that takes it from 1 to 0 fails. */
#include "fault.h"

#include <errno.h>
#include <protobuf-c/protobuf-c.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static atomic_long countdown;  /* > 0: armed */
static atomic_int fired;
static _Atomic(void *) fired_site;

void vq__fault_arm(long n)
{
    atomic_store(&fired, 0);
    atomic_store(&fired_site, NULL);
    atomic_store(&countdown, n > 0 ? n : 0);
}

int vq__fault_fired(void)
{
    return atomic_load(&fired);
}

void *vq__fault_site(void)
{
    return atomic_load(&fired_site);
}

/* True when this allocation is the one to fail. */
static inline int hit(void *site)
{
    /* relaxed: disarmed, the only cost; armed, the fetch_sub decides */
    if (__builtin_expect(atomic_load_explicit(&countdown, memory_order_relaxed) <= 0, 1))
        return 0;
    if (atomic_fetch_sub(&countdown, 1) != 1)
        return 0;
    atomic_store(&fired_site, site);
    atomic_store(&fired, 1);
    return 1;
}

#define SITE __builtin_return_address(0)

void *vq__malloc(size_t n)
{
    return hit(SITE) ? NULL : malloc(n);
}

void *vq__calloc(size_t n, size_t size)
{
    return hit(SITE) ? NULL : calloc(n, size);
}

void *vq__realloc(void *p, size_t n)
{
    return hit(SITE) ? NULL : realloc(p, n);
}

char *vq__strdup(const char *s)
{
    return hit(SITE) ? NULL : strdup(s);
}

char *vq__strndup(const char *s, size_t n)
{
    return hit(SITE) ? NULL : strndup(s, n);
}

void *vq__aligned_alloc(size_t align, size_t n)
{
    return hit(SITE) ? NULL : aligned_alloc(align, n);
}

int vq__posix_memalign(void **p, size_t align, size_t n)
{
    if (hit(SITE))
        return ENOMEM;
    return posix_memalign(p, align, n);
}

static void *pb_alloc(void *data, size_t n)
{
    (void)data;
    return hit(SITE) ? NULL : malloc(n);
}

static void pb_free(void *data, void *p)
{
    (void)data;
    free(p);
}

ProtobufCAllocator vq__protobuf_allocator = {.alloc = pb_alloc, .free = pb_free};
