/* Device allocators. The CPU one hands out 64-byte aligned blocks rounded up
 * to a size class (four classes per power of two, so at most 25% slack) and
 * keeps freed blocks per class for reuse: a training loop that allocates the
 * same shapes every step stops calling the system allocator after its first
 * step. The cache is bounded (VARQ_CPU_CACHE_MB, default 1024); past the
 * bound freed blocks go back to the system. Counters of live, peak, cached
 * and system bytes feed vq_mem_get_stats.
 *
 * Each class has its own lock; a block's first word links it in its class's
 * free list while it is cached. */
#include "ops_internal.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIN_CLASS_BYTES 64
#define CLASSES (4 * 58)

struct cpu_class {
    pthread_mutex_t lock;
    void *free;
};

struct cpu_alloc {
    vq__allocator base;
    struct cpu_class cls[CLASSES];
    atomic_size_t live, peak, cached, system;
    atomic_uint_least64_t allocs, reuses;
    size_t cache_limit;
};

/* Class of a request: 64 bytes and below is class 0; above, 2^k * (1 +
 * q/4) for q in 0..3. Returns the class and its size through *size. */
static int size_class(size_t bytes, size_t *size)
{
    if (bytes <= MIN_CLASS_BYTES) {
        *size = MIN_CLASS_BYTES;
        return 0;
    }
    int k = 63 - __builtin_clzll((unsigned long long)bytes); /* 2^k <= bytes */
    size_t base = (size_t)1 << k, quarter = base >> 2;
    size_t q = (bytes - base + quarter - 1) / quarter; /* 0..4 */
    *size = base + q * quarter;
    int c = (k - 6) * 4 + (int)q; /* k >= 6 here */
    return c;
}

/* Bytes of class c: the inverse of size_class. */
static size_t class_bytes(int c)
{
    int k = 6 + c / 4;
    return ((size_t)1 << k) + (size_t)(c % 4) * ((size_t)1 << (k - 2));
}

static void note_peak(struct cpu_alloc *a, size_t live)
{
    size_t p = atomic_load_explicit(&a->peak, memory_order_relaxed);
    while (live > p && !atomic_compare_exchange_weak_explicit(&a->peak, &p, live,
                                                               memory_order_relaxed,
                                                               memory_order_relaxed))
        ;
}

static void *cpu_alloc_block(vq__allocator *base, size_t bytes, void *stream)
{
    (void)stream;
    struct cpu_alloc *a = (struct cpu_alloc *)base;
    size_t size;
    int c = size_class(bytes, &size);
    void *p = NULL;
    if (c < CLASSES) {
        pthread_mutex_lock(&a->cls[c].lock);
        p = a->cls[c].free;
        if (p)
            memcpy(&a->cls[c].free, p, sizeof(void *));
        pthread_mutex_unlock(&a->cls[c].lock);
    }
    if (p) {
        atomic_fetch_sub_explicit(&a->cached, size, memory_order_relaxed);
        atomic_fetch_add_explicit(&a->reuses, 1, memory_order_relaxed);
    } else {
        if (vq__posix_memalign(&p, 64, size) != 0)
            return NULL;
        atomic_fetch_add_explicit(&a->system, size, memory_order_relaxed);
    }
    atomic_fetch_add_explicit(&a->allocs, 1, memory_order_relaxed);
    note_peak(a, atomic_fetch_add_explicit(&a->live, bytes, memory_order_relaxed) + bytes);
    return p;
}

static void cpu_free_block(vq__allocator *base, void *p, size_t bytes, void *stream)
{
    (void)stream;
    struct cpu_alloc *a = (struct cpu_alloc *)base;
    if (!p)
        return;
    size_t size;
    int c = size_class(bytes, &size);
    atomic_fetch_sub_explicit(&a->live, bytes, memory_order_relaxed);
    size_t cached = atomic_fetch_add_explicit(&a->cached, size, memory_order_relaxed);
    if (c >= CLASSES || cached + size > a->cache_limit) {
        atomic_fetch_sub_explicit(&a->cached, size, memory_order_relaxed);
        atomic_fetch_sub_explicit(&a->system, size, memory_order_relaxed);
        free(p);
        return;
    }
    pthread_mutex_lock(&a->cls[c].lock);
    memcpy(p, &a->cls[c].free, sizeof(void *));
    a->cls[c].free = p;
    pthread_mutex_unlock(&a->cls[c].lock);
}

static int cpu_stats(vq__allocator *base, vq_mem_stats *out)
{
    struct cpu_alloc *a = (struct cpu_alloc *)base;
    out->live_bytes = atomic_load(&a->live);
    out->peak_bytes = atomic_load(&a->peak);
    out->cached_bytes = atomic_load(&a->cached);
    out->system_bytes = atomic_load(&a->system);
    out->allocs = atomic_load(&a->allocs);
    out->reuses = atomic_load(&a->reuses);
    return 0;
}

static void cpu_reset_peak(vq__allocator *base)
{
    struct cpu_alloc *a = (struct cpu_alloc *)base;
    atomic_store(&a->peak, atomic_load(&a->live));
}

static void cpu_trim(vq__allocator *base)
{
    struct cpu_alloc *a = (struct cpu_alloc *)base;
    for (int c = 0; c < CLASSES; c++) {
        pthread_mutex_lock(&a->cls[c].lock);
        void *p = a->cls[c].free;
        a->cls[c].free = NULL;
        pthread_mutex_unlock(&a->cls[c].lock);
        while (p) {
            void *next;
            memcpy(&next, p, sizeof next);
            size_t size = class_bytes(c);
            atomic_fetch_sub(&a->cached, size);
            atomic_fetch_sub(&a->system, size);
            free(p);
            p = next;
        }
    }
}

static struct cpu_alloc cpu = {
    .base = {cpu_alloc_block, cpu_free_block, cpu_stats, cpu_reset_peak, cpu_trim},
};
static pthread_once_t cpu_once = PTHREAD_ONCE_INIT;

static void cpu_init(void)
{
    for (int c = 0; c < CLASSES; c++)
        pthread_mutex_init(&cpu.cls[c].lock, NULL);
    size_t mb = 1024;
    const char *env = getenv("VARQ_CPU_CACHE_MB");
    if (env && *env) {
        char *end;
        unsigned long long v = strtoull(env, &end, 10);
        if (*end == '\0')
            mb = (size_t)v;
    }
    cpu.cache_limit = mb << 20;
}

vq__allocator *vq__allocator_of(vq_ctx dev)
{
    if (dev.kind == VQ_DEV_GPU) {
        vq__allocator *a = NULL;
        return vq__gpu_allocator(dev.id, &a) == 0 ? a : NULL;
    }
    if (dev.kind != VQ_DEV_CPU || dev.id != 0)
        return NULL;
    pthread_once(&cpu_once, cpu_init);
    return &cpu.base;
}

/* The allocator of dev, or an error with a message naming fn. */
static int allocator_or_fail(vq_ctx dev, const char *fn, vq__allocator **out)
{
    if (dev.kind == VQ_DEV_GPU) {
        int rc = vq__gpu_allocator(dev.id, out);
        return rc < 0 ? vq__fail_prefixed(rc, "%s: GPU %d", fn, dev.id) : 0;
    }
    *out = vq__allocator_of(dev);
    if (!*out)
        return vq__fail(VQ_ENOSYS, "%s: no allocator for device {%d, %d} in this build", fn,
                        dev.kind, dev.id);
    return 0;
}

VQ_API int vq_mem_get_stats(vq_ctx dev, vq_mem_stats *out)
{
    if (!out)
        return vq__fail(VQ_EINVAL, "vq_mem_get_stats: out is NULL");
    vq__allocator *a;
    int rc = allocator_or_fail(dev, "vq_mem_get_stats", &a);
    return rc < 0 ? rc : a->stats(a, out);
}

VQ_API int vq_mem_reset_peak(vq_ctx dev)
{
    vq__allocator *a;
    int rc = allocator_or_fail(dev, "vq_mem_reset_peak", &a);
    if (rc < 0)
        return rc;
    a->reset_peak(a);
    return 0;
}

VQ_API int vq_mem_trim(vq_ctx dev)
{
    vq__allocator *a;
    int rc = allocator_or_fail(dev, "vq_mem_trim", &a);
    if (rc < 0)
        return rc;
    a->trim(a);
    return 0;
}
