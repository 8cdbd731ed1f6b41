/* The CPU allocator's thread caches under concurrency, for every build
 * including ThreadSanitizer's (where the Criterion suites are not built):
 * rounds of worker threads allocate tensors of random sizes (with and
 * without a thread cache: 1 byte to 400 KiB), release most themselves and
 * hand the rest to the next worker through a locked mailbox, then exit;
 * meanwhile the main thread reads vq_mem_get_stats and calls vq_mem_trim
 * and vq_mem_reset_peak. At the end: live bytes are back where they
 * started, the counted allocations are exactly the workers', cached bytes
 * never passed VARQ_CPU_CACHE_MB (set to 8 here), and a trim with no other
 * thread alive leaves nothing cached. (Stats are checked between rounds,
 * with only the main thread alive, where they are exact.)
 *
 * usage: alloc_stress [ROUNDS]   (default 20) */
#include <varq/varq.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#define WORKERS 4
#define STEPS 2000
#define HELD 12
#define BOUND_MB 8

struct mailbox {
    pthread_mutex_t lock;
    vq_tensor *slot[HELD];
};

static struct mailbox boxes[WORKERS];
static atomic_int failures;

struct worker {
    int id;
    unsigned seed;
    unsigned long long allocs;
};

static void fail(const char *what)
{
    fprintf(stderr, "alloc_stress: %s\n", what);
    atomic_fetch_add(&failures, 1);
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    vq_tensor *held[HELD] = {0};
    struct mailbox *next = &boxes[(w->id + 1) % WORKERS];
    for (int s = 0; s < STEPS; s++) {
        int k = (int)(rand_r(&w->seed) % HELD);
        if (held[k]) {
            if (rand_r(&w->seed) % 4 == 0) { /* handed over: the next worker frees it */
                pthread_mutex_lock(&next->lock);
                vq_tensor *old = next->slot[k];
                next->slot[k] = held[k];
                pthread_mutex_unlock(&next->lock);
                vq_tensor_release(old);
            } else {
                vq_tensor_release(held[k]);
            }
            held[k] = NULL;
        }
        int64_t n = rand_r(&w->seed) % 10 == 0 ? 1 + rand_r(&w->seed) % 400000
                                               : 1 + rand_r(&w->seed) % 8192;
        if (vq_tensor_new(&held[k], VQ_BOOL, 1, &n) != 0) {
            fail(vq_errmsg());
            break;
        }
        w->allocs++;
    }
    for (int k = 0; k < HELD; k++)
        vq_tensor_release(held[k]);
    /* this worker's own mailbox: what the previous one handed over */
    struct mailbox *own = &boxes[w->id];
    pthread_mutex_lock(&own->lock);
    for (int k = 0; k < HELD; k++) {
        vq_tensor_release(own->slot[k]);
        own->slot[k] = NULL;
    }
    pthread_mutex_unlock(&own->lock);
    return NULL;
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 20;
    setenv("VARQ_CPU_CACHE_MB", "8", 1); /* read at the allocator's first use */
    const vq_ctx cpu = {VQ_DEV_CPU, 0};
    vq_mem_stats start;
    if (vq_mem_get_stats(cpu, &start) != 0) {
        fprintf(stderr, "alloc_stress: vq_mem_get_stats: %s\n", vq_errmsg());
        return 1;
    }
    for (int i = 0; i < WORKERS; i++)
        pthread_mutex_init(&boxes[i].lock, NULL);
    unsigned long long allocs = 0;
    size_t max_cached = 0;
    for (int r = 0; r < rounds && !atomic_load(&failures); r++) {
        struct worker w[WORKERS];
        pthread_t th[WORKERS];
        for (int i = 0; i < WORKERS; i++) {
            w[i] = (struct worker){.id = i, .seed = 7919u * (unsigned)(r * WORKERS + i + 1)};
            if (pthread_create(&th[i], NULL, worker_main, &w[i]) != 0) {
                fprintf(stderr, "alloc_stress: pthread_create failed\n");
                return 1;
            }
        }
        /* the main thread reads, trims and resets meanwhile (reads during
         * the storm may be off by the blocks in flight: only exercised) */
        for (int k = 0; k < 50; k++) {
            vq_mem_stats s;
            vq_mem_get_stats(cpu, &s);
            if (k % 10 == 0)
                vq_mem_trim(cpu);
            if (k % 17 == 0)
                vq_mem_reset_peak(cpu);
        }
        for (int i = 0; i < WORKERS; i++) {
            pthread_join(th[i], NULL);
            allocs += w[i].allocs;
        }
        /* what a worker handed over after the next one emptied its box */
        for (int i = 0; i < WORKERS; i++)
            for (int k = 0; k < HELD; k++) {
                vq_tensor_release(boxes[i].slot[k]);
                boxes[i].slot[k] = NULL;
            }
        vq_mem_stats s;
        vq_mem_get_stats(cpu, &s);
        if (s.cached_bytes > max_cached)
            max_cached = s.cached_bytes;
        if (s.live_bytes != start.live_bytes) {
            fprintf(stderr, "alloc_stress: round %d: live %zu bytes, %zu at the start\n", r,
                    s.live_bytes, start.live_bytes);
            return 1;
        }
        if (s.allocs - start.allocs != allocs) {
            fprintf(stderr, "alloc_stress: round %d: %llu allocations counted, %llu made\n", r,
                    (unsigned long long)(s.allocs - start.allocs), allocs);
            return 1;
        }
        if (s.reuses - start.reuses > allocs || s.system_bytes < s.cached_bytes) {
            fprintf(stderr,
                    "alloc_stress: round %d: reuses %llu of %llu, system %zu < cached %zu\n", r,
                    (unsigned long long)(s.reuses - start.reuses), allocs, s.system_bytes,
                    s.cached_bytes);
            return 1;
        }
    }
    if (atomic_load(&failures))
        return 1;
    if (max_cached > (size_t)BOUND_MB << 20) {
        fprintf(stderr, "alloc_stress: %zu bytes cached, over the %d MiB bound\n", max_cached,
                BOUND_MB);
        return 1;
    }
    vq_mem_trim(cpu);
    vq_mem_stats end;
    vq_mem_get_stats(cpu, &end);
    if (end.cached_bytes != 0 || end.system_bytes != start.system_bytes - start.cached_bytes) {
        fprintf(stderr, "alloc_stress: after the last trim %zu bytes cached, %zu held\n",
                end.cached_bytes, end.system_bytes);
        return 1;
    }
    printf("alloc_stress: %d rounds of %d threads, %llu allocations; at most %zu bytes cached "
           "(bound %d MiB)\n",
           rounds, WORKERS, allocs, max_cached, BOUND_MB);
    return 0;
}
