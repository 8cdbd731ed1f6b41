/* Regression for the object pools' depot (engine/pool.c) across thread
 * exit. Rounds of short-lived threads, as pushers and workers come and go:
 * each thread takes objects from the pools, stamps them, hands half to its
 * partner thread and frees the rest; the partner checks the stamps and
 * frees what it got (the cross-thread free of an op or a var block); then
 * both exit, and their lists must go back to the depot (the pthread key's
 * destructor). Checks:
 *   - no object is handed to two threads at once (a stamp overwritten);
 *   - objects freed by exited threads are reused: however many rounds
 *     run, the pools carve no more slabs than one round's busiest moment
 *     needs (a lost list would make every round carve its objects again).
 * A plain C program, so that it runs under ThreadSanitizer too.
 *
 * Usage: prim_depot [rounds]; returns nonzero on failure. */
#include "engine_internal.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define PAIRS 3
#define OBJECTS 300 /* per thread and kind: more than two magazines */
#define KINDS 2     /* VQ__POOL_VBLOCK, VQ__POOL_OP (vars are never poisoned) */

struct stamp {
    void *link; /* the pool's first word: left alone */
    uintptr_t owner;
};

struct pair {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    void *handed[KINDS][OBJECTS / 2];
    int ready; /* the first thread has handed its half */
};

static atomic_int overwritten;

struct half {
    struct pair *pr;
    uintptr_t me;
    bool first; /* hands; the second receives */
};

static void *run_half(void *arg)
{
    struct half *h = arg;
    struct pair *pr = h->pr;
    void *mine[KINDS][OBJECTS];
    for (int k = 0; k < KINDS; k++)
        for (int i = 0; i < OBJECTS; i++) {
            struct stamp *s = vq__pool_alloc(k);
            if (!s) {
                fprintf(stderr, "prim_depot: out of memory\n");
                exit(2);
            }
            s->owner = h->me << 16 | (uintptr_t)(k * OBJECTS + i);
            mine[k][i] = s;
        }
    sched_yield(); /* let the other threads run: a shared object would show */
    for (int k = 0; k < KINDS; k++)
        for (int i = 0; i < OBJECTS; i++)
            if (((struct stamp *)mine[k][i])->owner != (h->me << 16 | (uintptr_t)(k * OBJECTS + i)))
                atomic_fetch_add(&overwritten, 1);
    if (h->first) {
        /* hand the first half over (the partner frees them), free the rest */
        pthread_mutex_lock(&pr->lock);
        for (int k = 0; k < KINDS; k++)
            for (int i = 0; i < OBJECTS / 2; i++)
                pr->handed[k][i] = mine[k][i];
        pr->ready = 1;
        pthread_cond_signal(&pr->cond);
        pthread_mutex_unlock(&pr->lock);
        for (int k = 0; k < KINDS; k++)
            for (int i = OBJECTS / 2; i < OBJECTS; i++)
                vq__pool_free(k, mine[k][i]);
    } else {
        for (int k = 0; k < KINDS; k++)
            for (int i = 0; i < OBJECTS; i++)
                vq__pool_free(k, mine[k][i]);
        pthread_mutex_lock(&pr->lock);
        while (!pr->ready)
            pthread_cond_wait(&pr->cond, &pr->lock);
        pthread_mutex_unlock(&pr->lock);
        uintptr_t other = h->me - 1;
        for (int k = 0; k < KINDS; k++)
            for (int i = 0; i < OBJECTS / 2; i++) {
                struct stamp *s = pr->handed[k][i];
                if (s->owner != (other << 16 | (uintptr_t)(k * OBJECTS + i)))
                    atomic_fetch_add(&overwritten, 1);
                vq__pool_free(k, s);
            }
    }
    return NULL; /* the thread's lists go back to the depot now */
}

static void round_of_threads(int r)
{
    struct pair pr[PAIRS];
    struct half hv[2 * PAIRS];
    pthread_t t[2 * PAIRS];
    for (int p = 0; p < PAIRS; p++) {
        pthread_mutex_init(&pr[p].lock, NULL);
        pthread_cond_init(&pr[p].cond, NULL);
        pr[p].ready = 0;
        for (int j = 0; j < 2; j++) {
            int i = 2 * p + j;
            hv[i] = (struct half){&pr[p], (uintptr_t)(r * 2 * PAIRS + i + 1), j == 0};
            pthread_create(&t[i], NULL, run_half, &hv[i]);
        }
    }
    for (int i = 0; i < 2 * PAIRS; i++)
        pthread_join(t[i], NULL);
    for (int p = 0; p < PAIRS; p++) {
        pthread_mutex_destroy(&pr[p].lock);
        pthread_cond_destroy(&pr[p].cond);
    }
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 200;
    if (rounds < 20)
        rounds = 20;
    int warm = rounds / 10;
    size_t slabs_warm = 0;
    for (int r = 0; r < rounds; r++) {
        if (r == warm)
            slabs_warm = vq__pool_slabs();
        round_of_threads(r);
    }
    size_t slabs = vq__pool_slabs();
    /* The pools never need more than the busiest moment: every thread of a
     * round holding all its objects at once, plus the partial magazines
     * left in threads' lists and the depot. Whether the first rounds meet
     * that moment depends on the scheduler (under TSan they often do not),
     * so the bound is that peak, not the count after warm-up. A lost list
     * costs every round about 2 * PAIRS * KINDS * OBJECTS / VQ__MAG slabs
     * more, far past it within a few rounds. */
    size_t peak = (2 * PAIRS * KINDS * OBJECTS + VQ__MAG - 1) / VQ__MAG;
    size_t bound = peak + 2 * PAIRS * KINDS * 2;
    int bad = atomic_load(&overwritten) != 0 || slabs > bound;
    printf("prim_depot: %d rounds of %d threads: %d objects held twice; slabs %zu after %d "
           "rounds, %zu at the end (at most %zu): %s\n",
           rounds, 2 * PAIRS, atomic_load(&overwritten), slabs_warm, warm, slabs, bound,
           bad ? "FAILED" : "ok");
    return bad;
}
