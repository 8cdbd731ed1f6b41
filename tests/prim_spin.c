/* Regression for the engine's spinlock (vq__spin_lock, engine_internal.h):
 * T threads increment a plain counter under it, and each checks on entry
 * that nobody else is inside. The count must come out exact, and under
 * ThreadSanitizer the acquire/release pair must order the plain accesses
 * (a missing order is reported as a race). A plain C program, so that it
 * runs under ThreadSanitizer too.
 *
 * Usage: prim_spin [increments per thread]; returns nonzero on failure. */
#include "engine_internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#define THREADS 4

static vq__spinlock lock = {ATOMIC_FLAG_INIT};
static long counter; /* plain: only the lock protects it */
static atomic_int inside, overlaps;
static long per_thread;

static void *hammer(void *arg)
{
    (void)arg;
    for (long i = 0; i < per_thread; i++) {
        vq__spin_lock(&lock);
        if (atomic_exchange_explicit(&inside, 1, memory_order_relaxed))
            atomic_fetch_add(&overlaps, 1);
        counter++;
        atomic_store_explicit(&inside, 0, memory_order_relaxed);
        vq__spin_unlock(&lock);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    per_thread = argc > 1 ? atol(argv[1]) : 1000000;
    if (per_thread < 1)
        return 2;
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, hammer, NULL);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    long want = THREADS * per_thread;
    int bad = counter != want || atomic_load(&overlaps) != 0;
    printf("prim_spin: %d threads x %ld: counter %ld (want %ld), %d overlaps: %s\n", THREADS,
           per_thread, counter, want, atomic_load(&overlaps), bad ? "FAILED" : "ok");
    return bad;
}
