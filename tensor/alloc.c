/* Device allocators. The CPU one hands out 64-byte aligned blocks rounded up
 * to a size class (four classes per power of two, so at most 25% slack) and
 * keeps freed blocks per class for reuse: a training loop that allocates the
 * same shapes every step stops calling the system allocator after its first
 * step. The cache is bounded (VARQ_CPU_CACHE_MB, default 1024); past the
 * bound freed blocks go back to the system. Counters of live, peak, cached
 * and system bytes feed vq_mem_get_stats.
 *
 * Two levels, as in a magazine allocator. Each thread keeps its own free
 * list per class for blocks up to TC_MAX_BYTES (the thread cache), touched
 * by that thread alone: an allocation or a free there takes no lock and
 * does one atomic read-modify-write (the live counter, which keeps the peak
 * exact). Behind them, shared free lists with one lock per class: a
 * thread's list holds at most 2 * mag_of(c) blocks and gives mag_of(c) back
 * in one go past that, an empty one takes up to mag_of(c) in one go, so a
 * block freed by another thread than the one that allocated it (an
 * executor's output released by the worker that ran its last reader) comes
 * back through the shared list in batches. A thread's cache is bounded in
 * bytes by a share of VARQ_CPU_CACHE_MB reserved when the thread first
 * uses the allocator (at most TC_CAP_BYTES, and at most an eighth of what
 * is left), so the shared lists and every thread cache together stay under
 * the bound. At thread exit (a pthread key's destructor) a thread's blocks
 * go to the shared lists and its counters to the process's.
 *
 * vq_mem_trim frees the shared lists and the calling thread's cache at
 * once; another thread's cache cannot be touched from outside without
 * putting a lock on its fast path, so a trim bumps a generation that each
 * thread checks at its next allocation or free (or exit) and then frees
 * its cache. Until then a live thread keeps at most its reserved share
 * (TC_CAP_BYTES, 4 MiB) of cached blocks.
 *
 * Counters: live and peak are process-wide atomics (exact); system bytes
 * change only on the slow paths (a system allocation or free); allocs,
 * reuses and each thread's cached bytes are per thread, written by their
 * thread alone and summed when read. A block's first word links it in a
 * free list while it is cached. */
#include "tensor_services.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIN_CLASS_BYTES 64
#define CLASSES (4 * 58)
/* Thread caches hold classes 0 .. TC_CLASSES - 1: blocks up to 256 KiB
 * (2^18 bytes; beyond, a block's kernels cost more than a lock). */
#define TC_MAX_BYTES ((size_t)1 << 18)
#define TC_CLASSES ((18 - 6) * 4 + 1)
#define TC_CAP_BYTES ((size_t)4 << 20)
/* A magazine: what a thread cache takes from or gives to a shared list in
 * one go, MAG_BYTES worth of blocks, between 2 and 32 of them. */
#define MAG_BYTES ((size_t)64 << 10)
#define TLS _Thread_local __attribute__((tls_model("initial-exec")))

struct cpu_class {
    pthread_mutex_t lock;
    void *free;
};

struct tc_class {
    void *head;
    unsigned count;
};

/* One thread's cache. The lists and cap/gen belong to the thread; the
 * counters are written by it alone (load and store, no read-modify-write)
 * and read by vq_mem_get_stats through the registry. */
struct tcache {
    struct tc_class cls[TC_CLASSES];
    size_t cap; /* its share of the cache bound, reserved in cpu.reserved */
    size_t gen; /* the trim generation it has seen */
    atomic_size_t bytes;
    atomic_uint_least64_t hits;           /* fast-path allocations: reuses */
    atomic_uint_least64_t allocs, reuses; /* the slow path's */
    struct tcache *prev, *next;           /* the registry, under reg_lock */
};

struct cpu_alloc {
    vq__allocator base;
    struct cpu_class cls[CLASSES];
    atomic_size_t live, peak, system;
    atomic_size_t shared_cached; /* bytes in the shared lists */
    atomic_size_t reserved;      /* sum of the thread caches' caps */
    atomic_size_t trim_gen;
    /* allocs and reuses of exited threads and of calls without a cache */
    atomic_uint_least64_t allocs, reuses;
    size_t cache_limit;
    bool no_tc; /* no thread caches: the exit hook's key could not be made */
    unsigned char mag[TC_CLASSES];
    pthread_mutex_t reg_lock;
    struct tcache *threads;
    pthread_key_t key;
};

static struct cpu_alloc cpu;
static TLS struct tcache *my_tc;
static TLS bool tc_gone; /* this thread's cache went at its exit */

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
    size_t q = (bytes - base + quarter - 1) >> (k - 2); /* 0..4; quarter is 2^(k-2) */
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

static void *next_of(void *p)
{
    void *next;
    memcpy(&next, p, sizeof next);
    return next;
}

static void set_next(void *p, void *next)
{
    memcpy(p, &next, sizeof next);
}

/* Counters that only their thread writes: no read-modify-write needed. */
static void own_add64(atomic_uint_least64_t *c, uint64_t by)
{
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + by,
                          memory_order_relaxed);
}

static void own_add(atomic_size_t *c, size_t by)
{
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + by,
                          memory_order_relaxed);
}

static void own_sub(atomic_size_t *c, size_t by)
{
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) - by,
                          memory_order_relaxed);
}

static void note_peak(struct cpu_alloc *a, size_t live)
{
    size_t p = atomic_load_explicit(&a->peak, memory_order_relaxed);
    while (live > p &&
           !atomic_compare_exchange_weak_explicit(&a->peak, &p, live, memory_order_relaxed,
                                                  memory_order_relaxed))
        ;
}

/* Frees the chain of blocks of size bytes from p to the system. */
static void system_free_chain(struct cpu_alloc *a, void *p, size_t size)
{
    while (p) {
        void *next = next_of(p);
        atomic_fetch_sub_explicit(&a->system, size, memory_order_relaxed);
        free(p);
        p = next;
    }
}

/* Puts the chain first .. last (n blocks of class c, size bytes each, last's
 * link free) in c's shared list, or frees it when the shared lists and the
 * thread caches' reserved shares would pass the bound. seq_cst against
 * tc_new's reservation: of a put and a reservation racing, at least one
 * sees the other. */
static void shared_put(struct cpu_alloc *a, int c, void *first, void *last, size_t n, size_t size)
{
    size_t bytes = n * size;
    if (c < CLASSES) {
        size_t s = atomic_fetch_add(&a->shared_cached, bytes) + bytes;
        if (s + atomic_load(&a->reserved) <= a->cache_limit) {
            pthread_mutex_lock(&a->cls[c].lock);
            set_next(last, a->cls[c].free);
            a->cls[c].free = first;
            pthread_mutex_unlock(&a->cls[c].lock);
            return;
        }
        atomic_fetch_sub(&a->shared_cached, bytes);
    }
    set_next(last, NULL);
    system_free_chain(a, first, size);
}

/* Takes up to n blocks of class c from its shared list as a chain; *got
 * says how many. */
static void *shared_take(struct cpu_alloc *a, int c, size_t size, unsigned n, unsigned *got)
{
    unsigned k = 0;
    pthread_mutex_lock(&a->cls[c].lock);
    void *first = a->cls[c].free, *last = first;
    if (first) {
        k = 1;
        while (k < n && next_of(last)) {
            last = next_of(last);
            k++;
        }
        a->cls[c].free = next_of(last);
        set_next(last, NULL);
    }
    pthread_mutex_unlock(&a->cls[c].lock);
    if (k)
        atomic_fetch_sub_explicit(&a->shared_cached, (size_t)k * size, memory_order_relaxed);
    *got = k;
    return first;
}

/* Moves up to n of tc's blocks of class c to the shared list. */
static void tc_give(struct cpu_alloc *a, struct tcache *tc, int c, unsigned n)
{
    struct tc_class *k = &tc->cls[c];
    if (n > k->count)
        n = k->count;
    if (!n)
        return;
    void *first = k->head, *last = first;
    for (unsigned i = 1; i < n; i++)
        last = next_of(last);
    k->head = next_of(last);
    k->count -= n;
    size_t size = class_bytes(c);
    own_sub(&tc->bytes, n * size);
    shared_put(a, c, first, last, n, size);
}

/* Frees every block of tc to the system: a trim reached this thread. */
static void tc_trim(struct cpu_alloc *a, struct tcache *tc)
{
    for (int c = 0; c < TC_CLASSES; c++) {
        system_free_chain(a, tc->cls[c].head, class_bytes(c));
        tc->cls[c].head = NULL;
        tc->cls[c].count = 0;
    }
    atomic_store_explicit(&tc->bytes, 0, memory_order_relaxed);
    tc->gen = atomic_load(&a->trim_gen);
}

/* The key's destructor, at the thread's exit: its blocks go to the shared
 * lists (in the room its reservation leaves), its counters to the
 * process's. */
static void tc_exit(void *arg)
{
    struct tcache *tc = arg;
    struct cpu_alloc *a = &cpu;
    my_tc = NULL;
    tc_gone = true;
    atomic_fetch_sub(&a->reserved, tc->cap);
    if (tc->gen != atomic_load(&a->trim_gen))
        tc_trim(a, tc);
    for (int c = 0; c < TC_CLASSES; c++)
        tc_give(a, tc, c, tc->cls[c].count);
    pthread_mutex_lock(&a->reg_lock);
    if (tc->prev)
        tc->prev->next = tc->next;
    else
        a->threads = tc->next;
    if (tc->next)
        tc->next->prev = tc->prev;
    uint64_t hits = atomic_load(&tc->hits);
    atomic_fetch_add(&a->allocs, atomic_load(&tc->allocs) + hits);
    atomic_fetch_add(&a->reuses, atomic_load(&tc->reuses) + hits);
    pthread_mutex_unlock(&a->reg_lock);
    free(tc);
}

/* This thread's first call: a cache with its share of the bound, or NULL
 * (out of memory, or after the thread's exit hook: the shared lists
 * then serve it). */
static struct tcache *tc_new(struct cpu_alloc *a)
{
    if (tc_gone || a->no_tc)
        return NULL;
    struct tcache *tc = vq__calloc(1, sizeof *tc);
    if (!tc)
        return NULL;
    pthread_mutex_lock(&a->reg_lock);
    size_t used = atomic_load(&a->reserved) + atomic_load(&a->shared_cached);
    size_t room = used < a->cache_limit ? a->cache_limit - used : 0;
    size_t cap = room / 8 < TC_CAP_BYTES ? room / 8 : TC_CAP_BYTES;
    size_t r = atomic_fetch_add(&a->reserved, cap) + cap;
    if (r + atomic_load(&a->shared_cached) > a->cache_limit) { /* a put raced ahead */
        atomic_fetch_sub(&a->reserved, cap);
        cap = 0;
    }
    tc->cap = cap;
    tc->gen = atomic_load(&a->trim_gen);
    if (pthread_setspecific(a->key, tc) != 0) {
        atomic_fetch_sub(&a->reserved, cap);
        pthread_mutex_unlock(&a->reg_lock);
        free(tc);
        return NULL;
    }
    tc->next = a->threads;
    if (a->threads)
        a->threads->prev = tc;
    a->threads = tc;
    pthread_mutex_unlock(&a->reg_lock);
    my_tc = tc;
    return tc;
}

/* This thread's cache (NULL when it has none), trimmed first if a trim
 * happened since its last call. */
static inline struct tcache *tc_get(struct cpu_alloc *a)
{
    struct tcache *tc = my_tc;
    if (__builtin_expect(tc == NULL, 0))
        return tc_new(a);
    if (__builtin_expect(tc->gen != atomic_load_explicit(&a->trim_gen, memory_order_relaxed), 0))
        tc_trim(a, tc);
    return tc;
}

/* Counts an allocation of bytes in live and the peak. */
static inline void count_live(struct cpu_alloc *a, size_t bytes)
{
    note_peak(a, atomic_fetch_add_explicit(&a->live, bytes, memory_order_relaxed) + bytes);
}

/* Everything but a hit in this thread's cache: a refill from the shared
 * list, the shared list alone (no thread cache, or a class beyond them),
 * the system. */
static __attribute__((noinline)) void *alloc_slow(struct cpu_alloc *a, size_t bytes, size_t size,
                                                  int c)
{
    void *p = NULL;
    struct tcache *tc = c < TC_CLASSES ? tc_get(a) : NULL;
    if (tc) {
        struct tc_class *k = &tc->cls[c];
        if (!k->head) {
            /* a magazine's worth, within the cache's share */
            size_t held = atomic_load_explicit(&tc->bytes, memory_order_relaxed);
            size_t fit = held < tc->cap ? (tc->cap - held) / size : 0;
            unsigned n = fit < 1 ? 1 : fit < a->mag[c] ? (unsigned)fit : a->mag[c];
            k->head = shared_take(a, c, size, n, &k->count);
            own_add(&tc->bytes, (size_t)k->count * size);
        }
        if ((p = k->head)) {
            k->head = next_of(p);
            k->count--;
            own_sub(&tc->bytes, size);
            own_add64(&tc->reuses, 1);
        }
    } else if (c < CLASSES) {
        unsigned got;
        if ((p = shared_take(a, c, size, 1, &got)))
            atomic_fetch_add_explicit(&a->reuses, 1, memory_order_relaxed);
    }
    if (!p) {
        if (vq__posix_memalign(&p, 64, size) != 0)
            return NULL;
        atomic_fetch_add_explicit(&a->system, size, memory_order_relaxed);
    }
    if (tc)
        own_add64(&tc->allocs, 1);
    else
        atomic_fetch_add_explicit(&a->allocs, 1, memory_order_relaxed);
    count_live(a, bytes);
    return p;
}

/* The fast path: a block from this thread's cache, no lock, one atomic
 * read-modify-write (live). */
static void *cpu_alloc_block(vq__allocator *base, size_t bytes, void *stream)
{
    (void)stream;
    struct cpu_alloc *a = (struct cpu_alloc *)base;
    size_t size;
    int c = size_class(bytes, &size);
    struct tcache *tc = my_tc;
    if (__builtin_expect(c < TC_CLASSES && tc != NULL, 1) &&
        __builtin_expect(tc->gen == atomic_load_explicit(&a->trim_gen, memory_order_relaxed), 1)) {
        struct tc_class *k = &tc->cls[c];
        void *p = k->head;
        if (__builtin_expect(p != NULL, 1)) {
            k->head = next_of(p);
            k->count--;
            own_sub(&tc->bytes, size);
            own_add64(&tc->hits, 1);
            count_live(a, bytes);
            return p;
        }
    }
    return alloc_slow(a, bytes, size, c);
}

/* Everything but a free into this thread's cache with room: a magazine
 * back to the shared list, the share's bound, no thread cache. */
static __attribute__((noinline)) void free_slow(struct cpu_alloc *a, void *p, size_t size, int c)
{
    struct tcache *tc = c < TC_CLASSES ? tc_get(a) : NULL;
    if (tc && tc->cap == 0)
        tc = NULL; /* no share (VARQ_CPU_CACHE_MB=0, or none left) */
    if (tc && tc->cls[c].count >= 2u * a->mag[c])
        tc_give(a, tc, c, a->mag[c]);
    if (tc && atomic_load_explicit(&tc->bytes, memory_order_relaxed) + size > tc->cap) {
        /* over the share: this class first, then the others */
        tc_give(a, tc, c, tc->cls[c].count);
        for (int d = 0; d < TC_CLASSES; d++)
            if (atomic_load_explicit(&tc->bytes, memory_order_relaxed) + size > tc->cap)
                tc_give(a, tc, d, tc->cls[d].count);
        if (size > tc->cap)
            tc = NULL;
    }
    if (!tc) {
        shared_put(a, c, p, p, 1, size);
        return;
    }
    struct tc_class *k = &tc->cls[c];
    set_next(p, k->head);
    k->head = p;
    k->count++;
    own_add(&tc->bytes, size);
}

/* The fast path: into this thread's cache, no lock, one atomic
 * read-modify-write (live). */
static void cpu_free_block(vq__allocator *base, void *p, size_t bytes, void *stream)
{
    (void)stream;
    struct cpu_alloc *a = (struct cpu_alloc *)base;
    if (!p)
        return;
    size_t size;
    int c = size_class(bytes, &size);
    atomic_fetch_sub_explicit(&a->live, bytes, memory_order_relaxed);
    struct tcache *tc = my_tc;
    if (__builtin_expect(c < TC_CLASSES && tc != NULL, 1) &&
        __builtin_expect(tc->gen == atomic_load_explicit(&a->trim_gen, memory_order_relaxed), 1)) {
        struct tc_class *k = &tc->cls[c];
        size_t held = atomic_load_explicit(&tc->bytes, memory_order_relaxed) + size;
        if (__builtin_expect(held <= tc->cap && k->count < 2u * a->mag[c], 1)) {
            set_next(p, k->head);
            k->head = p;
            k->count++;
            atomic_store_explicit(&tc->bytes, held, memory_order_relaxed);
            return;
        }
    }
    free_slow(a, p, size, c);
}

/* The fields are read one by one and the per-thread ones summed under the
 * registry's lock (which no fast path takes). */
static int cpu_stats(vq__allocator *base, vq_mem_stats *out)
{
    struct cpu_alloc *a = (struct cpu_alloc *)base;
    pthread_mutex_lock(&a->reg_lock);
    size_t cached = atomic_load(&a->shared_cached);
    uint64_t allocs = atomic_load(&a->allocs), reuses = atomic_load(&a->reuses);
    for (struct tcache *tc = a->threads; tc; tc = tc->next) {
        cached += atomic_load_explicit(&tc->bytes, memory_order_relaxed);
        uint64_t hits = atomic_load_explicit(&tc->hits, memory_order_relaxed);
        allocs += atomic_load_explicit(&tc->allocs, memory_order_relaxed) + hits;
        reuses += atomic_load_explicit(&tc->reuses, memory_order_relaxed) + hits;
    }
    pthread_mutex_unlock(&a->reg_lock);
    out->live_bytes = atomic_load(&a->live);
    out->peak_bytes = atomic_load(&a->peak);
    out->cached_bytes = cached;
    out->system_bytes = atomic_load(&a->system);
    out->allocs = allocs;
    out->reuses = reuses;
    return 0;
}

static void cpu_reset_peak(vq__allocator *base)
{
    struct cpu_alloc *a = (struct cpu_alloc *)base;
    atomic_store(&a->peak, atomic_load(&a->live));
}

/* The shared lists and this thread's cache now; other threads' caches at
 * their next call (tc_get) or exit, through the generation. */
static void cpu_trim(vq__allocator *base)
{
    struct cpu_alloc *a = (struct cpu_alloc *)base;
    atomic_fetch_add(&a->trim_gen, 1);
    if (my_tc)
        tc_trim(a, my_tc);
    for (int c = 0; c < CLASSES; c++) {
        pthread_mutex_lock(&a->cls[c].lock);
        void *p = a->cls[c].free;
        a->cls[c].free = NULL;
        pthread_mutex_unlock(&a->cls[c].lock);
        size_t size = class_bytes(c);
        for (void *q = p; q; q = next_of(q))
            atomic_fetch_sub(&a->shared_cached, size);
        system_free_chain(a, p, size);
    }
}

static struct cpu_alloc cpu = {
    .base = {cpu_alloc_block, cpu_free_block, cpu_stats, cpu_reset_peak, cpu_trim},
};
static pthread_once_t cpu_once = PTHREAD_ONCE_INIT;
static atomic_bool cpu_ready;

static void cpu_init(void)
{
    for (int c = 0; c < CLASSES; c++)
        pthread_mutex_init(&cpu.cls[c].lock, NULL);
    for (int c = 0; c < TC_CLASSES; c++) {
        size_t m = MAG_BYTES / class_bytes(c);
        cpu.mag[c] = (unsigned char)(m < 2 ? 2 : m > 32 ? 32 : m);
    }
    pthread_mutex_init(&cpu.reg_lock, NULL);
    size_t mb = 1024;
    const char *env = getenv("VARQ_CPU_CACHE_MB");
    if (env && *env) {
        /* Digits only (strtoull alone takes "-1" as ULLONG_MAX, " 2" and
         * "+3"), and at most what fits in size_t once shifted by 20 (more
         * wraps, 2^44 to 0 bytes). Read where no call can return an error
         * (the first allocation): say so once, and keep the default. */
        const size_t max_mb = SIZE_MAX >> 20;
        bool digits = strspn(env, "0123456789") == strlen(env);
        errno = 0;
        unsigned long long v = digits ? strtoull(env, NULL, 10) : 0;
        if (digits && errno == 0 && v <= max_mb)
            mb = (size_t)v;
        else
            fprintf(stderr,
                    "varq: VARQ_CPU_CACHE_MB=\"%s\" is not a number of MiB from 0 to %zu: "
                    "ignored (using %zu)\n",
                    env, max_mb, mb);
    }
    cpu.cache_limit = mb << 20;
    /* Without the key there is no exit hook: no thread caches then. */
    cpu.no_tc = pthread_key_create(&cpu.key, tc_exit) != 0;
    atomic_store_explicit(&cpu_ready, true, memory_order_release);
}

vq__allocator *vq__allocator_of(vq_ctx dev)
{
    if (dev.kind == VQ_DEV_CPU && dev.id == 0 &&
        atomic_load_explicit(&cpu_ready, memory_order_acquire))
        return &cpu.base;
    if (dev.kind == VQ_DEV_GPU) {
        vq__allocator *a = NULL;
        return vq__gpu_allocator(dev.id, &a) == 0 ? a : NULL;
    }
    if (dev.kind != VQ_DEV_CPU || dev.id != 0)
        return NULL;
    pthread_once(&cpu_once, cpu_init);
    return &cpu.base;
}

/* ---- trim hooks ----
 *
 * Append-only: an entry is written before the count that covers it is
 * published (release), so a trim reads the entries below the count it
 * loaded (acquire) without the lock, and calls the hooks holding no lock
 * of ours (a hook takes its cache's lock; its cache may register while
 * holding that lock). */
static pthread_mutex_t trim_hooks_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    int dev_kind;
    void (*fn)(void);
} trim_hooks[VQ__TRIM_HOOKS_MAX];
static atomic_int trim_hooks_n;

int vq__mem_trim_hook_add(int dev_kind, void (*fn)(void))
{
    int rc = 0;
    pthread_mutex_lock(&trim_hooks_lock);
    int n = atomic_load_explicit(&trim_hooks_n, memory_order_relaxed);
    for (int i = 0; i < n; i++)
        if (trim_hooks[i].dev_kind == dev_kind && trim_hooks[i].fn == fn)
            goto out;
    if (n == VQ__TRIM_HOOKS_MAX) {
        rc = vq__fail(VQ_ENOMEM, "vq_mem_trim: more than %d trim hooks", VQ__TRIM_HOOKS_MAX);
        goto out;
    }
    trim_hooks[n].dev_kind = dev_kind;
    trim_hooks[n].fn = fn;
    /* publishes the entry written above to trim_hooks_run */
    atomic_store_explicit(&trim_hooks_n, n + 1, memory_order_release);
out:
    pthread_mutex_unlock(&trim_hooks_lock);
    return rc;
}

static void trim_hooks_run(int dev_kind)
{
    int n = atomic_load_explicit(&trim_hooks_n, memory_order_acquire);
    for (int i = 0; i < n; i++)
        if (trim_hooks[i].dev_kind == dev_kind)
            trim_hooks[i].fn();
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
    trim_hooks_run(dev.kind);
    return 0;
}
