/* Every heap allocation of the library goes through these wrappers, so that
 * tests can make the N-th one fail (SQLite's method: tests/alloc_fault.c
 * runs workloads once per allocation, N = 1, 2, 3, ...). Disarmed, each
 * wrapper costs one relaxed atomic load before the C library's call.
 *
 * The rule for callers: a NULL from any of them is an out-of-memory that
 * the caller reports (VQ_ENOMEM with a message) or survives by design
 * (e.g. a cache that simply does not grow), never a crash or a hang. */
#ifndef VARQ_ENGINE_FAULT_H
#define VARQ_ENGINE_FAULT_H

#include <stddef.h>

void *vq__malloc(size_t n);
void *vq__calloc(size_t n, size_t size);
void *vq__realloc(void *p, size_t n);
char *vq__strdup(const char *s);
char *vq__strndup(const char *s, size_t n);
void *vq__aligned_alloc(size_t align, size_t n);
int vq__posix_memalign(void **p, size_t align, size_t n); /* 0 or ENOMEM */

/* Tests only. vq__fault_arm(n): the n-th allocation from now (n >= 1)
 * fails, and only that one; 0 disarms (what fired stays readable).
 * vq__fault_fired() says whether it has happened since the last arm, and vq__fault_site() where (the
 * caller's return address), for counting distinct sites. Process-wide
 * (atomic: allocations on any thread count). */
void vq__fault_arm(long n);
/* The same, except that the n-th allocation and every one after it fail
 * until vq__fault_arm(0): memory that does not come back. */
void vq__fault_arm_lasting(long n);
int vq__fault_fired(void);
void *vq__fault_site(void);
/* The call stack of the failed allocation (up to max frames), 0 if none. */
int vq__fault_stack(void **frames, int max);

/* The allocator protobuf-c's unpack uses (through the wrappers above), and
 * how many of its allocations failed in this thread so far: an unpack that
 * returns NULL while this count grew ran out of memory (protobuf-c says
 * NULL for bad bytes too). */
struct ProtobufCAllocator;
extern struct ProtobufCAllocator vq__protobuf_allocator;
unsigned vq__protobuf_failed_allocs(void);

#endif
