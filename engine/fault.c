/* Allocation wrappers with failure injection (fault.h). The countdown is
 * one atomic: armed at n, each allocation takes one from it, and the one
 * that takes it from 1 to 0 fails. */
#include "fault.h"
#include "engine_internal.h" /* vq__fail */

#include <errno.h>
#include <execinfo.h>
#include <protobuf-c/protobuf-c.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static atomic_long countdown;  /* > 0: armed */
static atomic_bool lasting;    /* armed by vq__fault_arm_lasting */
static atomic_bool failing;    /* it fired: every allocation fails */
static atomic_int fired;
static _Atomic(void *) fired_site;
static void *fired_stack[24]; /* written once per arm, by the failing allocation */
static int fired_depth;

static void arm(long n, bool last)
{
    atomic_store(&lasting, last && n > 0); /* before the countdown it decides with */
    atomic_store(&failing, false);
    if (n <= 0) { /* disarmed: what fired stays readable */
        atomic_store(&countdown, 0);
        return;
    }
    void *warm[1];
    backtrace(warm, 1); /* its first call allocates: not while armed */
    atomic_store(&fired, 0);
    atomic_store(&fired_site, NULL);
    atomic_store(&countdown, n);
}

void vq__fault_arm(long n)
{
    arm(n, false);
}

void vq__fault_arm_lasting(long n)
{
    arm(n, true);
}

int vq__fault_stack(void **frames, int max)
{
    if (!atomic_load(&fired))
        return 0;
    int n = fired_depth < max ? fired_depth : max;
    memcpy(frames, fired_stack, (size_t)n * sizeof *frames);
    return n;
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
        return atomic_load_explicit(&failing, memory_order_relaxed);
    if (atomic_fetch_sub(&countdown, 1) != 1)
        return 0;
    if (atomic_load(&lasting))
        atomic_store(&failing, true);
    atomic_store(&fired_site, site);
    fired_depth = backtrace(fired_stack, 24);
    atomic_store(&fired, 1);
    return 1;
}

#define SITE __builtin_return_address(0)

/* A failed allocation, injected or real, leaves a message, so that every
 * VQ_ENOMEM has one even where the caller adds none (a caller that knows
 * more says more); p is passed through. */
static void *checked(void *p, size_t n)
{
    if (__builtin_expect(!p, 0))
        vq__fail(VQ_ENOMEM, "out of memory (an allocation of %zu bytes failed)", n);
    return p;
}

void *vq__malloc(size_t n)
{
    return checked(hit(SITE) ? NULL : malloc(n), n);
}

void *vq__calloc(size_t n, size_t size)
{
    return checked(hit(SITE) ? NULL : calloc(n, size), n * size);
}

void *vq__realloc(void *p, size_t n)
{
    return checked(hit(SITE) ? NULL : realloc(p, n), n);
}

char *vq__strdup(const char *s)
{
    return checked(hit(SITE) ? NULL : strdup(s), strlen(s) + 1);
}

char *vq__strndup(const char *s, size_t n)
{
    return checked(hit(SITE) ? NULL : strndup(s, n), n + 1);
}

void *vq__aligned_alloc(size_t align, size_t n)
{
    return checked(hit(SITE) ? NULL : aligned_alloc(align, n), n);
}

int vq__posix_memalign(void **p, size_t align, size_t n)
{
    int rc = hit(SITE) ? ENOMEM : posix_memalign(p, align, n);
    if (rc)
        checked(NULL, n);
    return rc;
}

/* protobuf-c cannot tell a failed allocation from bad bytes: its unpack
 * returns NULL for both. Counting failures per thread lets the decoders
 * tell (vq__protobuf_failed_allocs). */
static _Thread_local unsigned pb_failures;

unsigned vq__protobuf_failed_allocs(void)
{
    return pb_failures;
}

static void *pb_alloc(void *data, size_t n)
{
    (void)data;
    void *p = checked(hit(SITE) ? NULL : malloc(n), n);
    pb_failures += !p;
    return p;
}

static void pb_free(void *data, void *p)
{
    (void)data;
    free(p);
}

ProtobufCAllocator vq__protobuf_allocator = {.alloc = pb_alloc, .free = pb_free};
