/* Object pools for the push path: op blocks, var blocks and vars.
 *
 * The push path must not call malloc, and its objects are typically freed by
 * another thread than the one that made them (the pusher allocates, a worker
 * completes and frees). So each thread keeps a private free list per kind,
 * and lists move between threads in magazines of VQ__MAG objects through a
 * process-wide depot: a thread whose list is empty takes a magazine, a thread
 * whose list grows past two magazines gives one back. The depot mutex is
 * therefore taken once per VQ__MAG allocations at most, never per push.
 * A thread's list goes back to the depot when the thread exits.
 *
 * Memory is carved from slabs that are kept for the life of the process (a
 * global list holds them, so leak checkers see them as reachable): a pool's
 * size is the peak number of objects in flight. Vars are 64-byte aligned so
 * that two vars never share a cache line. */
#include "engine_internal.h"

#include <stdlib.h>
#include <string.h>

#ifdef VQ__ASAN
#include <sanitizer/asan_interface.h>
#define POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define POISON(p, n) ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

#define free_obj vq__free_obj

struct slab {
    struct slab *next;
};

static const size_t obj_size[VQ__POOL_COUNT] = {
    [VQ__POOL_VBLOCK] = (sizeof(struct vq__vblock) + 31) & ~(size_t)31,
    [VQ__POOL_OP] = (sizeof(struct vq__op) + VQ__CACHELINE - 1) & ~(size_t)(VQ__CACHELINE - 1),
    [VQ__POOL_VAR] = (sizeof(struct vq_var) + VQ__CACHELINE - 1) & ~(size_t)(VQ__CACHELINE - 1),
    [VQ__POOL_OBJ] = VQ__OBJ_SIZE,
};
_Static_assert(VQ__OBJ_SIZE % VQ__CACHELINE == 0, "objects keep the slab's alignment");

/* A var's state must stay readable while it is free (vq_push checks it to
 * reject a freed var), so vars are never poisoned. */
static const bool poisoned[VQ__POOL_COUNT] = {true, true, false, true};

static struct {
    pthread_mutex_t lock;
    struct free_obj *mags[VQ__POOL_COUNT];
    struct slab *slabs;
    pthread_key_t key;
    pthread_once_t once;
} depot = {.lock = PTHREAD_MUTEX_INITIALIZER, .once = PTHREAD_ONCE_INIT};

VQ__TLS struct vq__thread_cache vq__cache;
#define cache vq__cache

static void give_back_all(void *unused);

static void depot_init(void)
{
    pthread_key_create(&depot.key, give_back_all);
}

/* Detaches up to VQ__MAG objects from the thread list as one magazine. */
static struct free_obj *take_magazine(int kind)
{
    struct free_obj *first = cache.head[kind], *last = first;
    int n = 1;
    while (n < VQ__MAG && last->next) {
        last = last->next;
        n++;
    }
    cache.head[kind] = last->next;
    cache.count[kind] -= n;
    last->next = NULL;
    first->mag_count = n;
    return first;
}

static void depot_put(int kind, struct free_obj *mag)
{
    pthread_mutex_lock(&depot.lock);
    mag->next_mag = depot.mags[kind];
    depot.mags[kind] = mag;
    pthread_mutex_unlock(&depot.lock);
}

/* Runs at thread exit (pthread key destructor): nothing stays in a dead
 * thread's list. */
static void give_back_all(void *unused)
{
    (void)unused;
    for (int k = 0; k < VQ__POOL_COUNT; k++)
        while (cache.head[k])
            depot_put(k, take_magazine(k));
    cache.registered = false;
}

/* Arms the thread-exit hook the first time this thread touches the depot. */
static void register_thread(void)
{
    if (!cache.registered) {
        pthread_once(&depot.once, depot_init);
        pthread_setspecific(depot.key, &cache);
        cache.registered = true;
    }
}

static bool refill(int kind)
{
    register_thread();
    pthread_mutex_lock(&depot.lock);
    struct free_obj *mag = depot.mags[kind];
    if (mag)
        depot.mags[kind] = mag->next_mag;
    pthread_mutex_unlock(&depot.lock);
    if (mag) {
        cache.head[kind] = mag;
        cache.count[kind] = (int)mag->mag_count;
        return true;
    }

    size_t sz = obj_size[kind];
    size_t hdr = VQ__CACHELINE;
    char *mem = vq__aligned_alloc(VQ__CACHELINE, hdr + sz * VQ__MAG);
    if (!mem)
        return false;
    struct slab *s = (struct slab *)mem;
    pthread_mutex_lock(&depot.lock);
    s->next = depot.slabs;
    depot.slabs = s;
    pthread_mutex_unlock(&depot.lock);
    struct free_obj *head = NULL;
    for (int i = VQ__MAG - 1; i >= 0; i--) {
        struct free_obj *o = (struct free_obj *)(mem + hdr + (size_t)i * sz);
        o->next = head;
        head = o;
        if (poisoned[kind])
            POISON((char *)o + sizeof *o, sz - sizeof *o);
    }
    cache.head[kind] = head;
    cache.count[kind] = VQ__MAG;
    return true;
}

/* The slow path of vq__pool_alloc (every call under ASan). */
void *vq__pool_alloc_slow(int kind)
{
    if (!cache.head[kind] && !refill(kind))
        return NULL;
    struct free_obj *o = cache.head[kind];
    cache.head[kind] = o->next;
    cache.count[kind]--;
    if (poisoned[kind])
        UNPOISON(o, obj_size[kind]);
    return o;
}

/* The slow path of vq__pool_free (every call under ASan): past two
 * magazines, one goes back to the depot. */
void vq__pool_free_slow(int kind, void *p)
{
    struct free_obj *o = p;
    if (poisoned[kind])
        POISON((char *)o + sizeof *o, obj_size[kind] - sizeof *o);
    o->next = cache.head[kind];
    cache.head[kind] = o;
    if (++cache.count[kind] > 2 * VQ__MAG) {
        register_thread();
        depot_put(kind, take_magazine(kind));
    }
}

/* Under AddressSanitizer small objects are allocated and freed one by one
 * instead: one never freed is then a leak LeakSanitizer reports (a pooled
 * one stays reachable from its slab), and the layers above need no switch
 * of their own. */
void *vq__obj_alloc(void)
{
#ifdef VQ__ASAN
    return vq__aligned_alloc(VQ__CACHELINE, VQ__OBJ_SIZE);
#else
    return vq__pool_alloc(VQ__POOL_OBJ);
#endif
}

void vq__obj_free(void *p)
{
#ifdef VQ__ASAN
    free(p);
#else
    vq__pool_free(VQ__POOL_OBJ, p);
#endif
}

size_t vq__pool_slabs(void)
{
    size_t n = 0;
    pthread_mutex_lock(&depot.lock);
    for (const struct slab *s = depot.slabs; s; s = s->next)
        n++;
    pthread_mutex_unlock(&depot.lock);
    return n;
}
