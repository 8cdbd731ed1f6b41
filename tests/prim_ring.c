/* Regression for the ready queue's ring (engine/threaded.c, the cell-
 * sequence MPMC ring): P producers and C consumers hammer a small ring
 * (Concurrency Kit's regressions/ck_ring/validate/ck_ring_mpmc.c). Checks
 * that every item comes out exactly once, and that the items of one
 * producer reach each consumer in the order they were pushed (the ring is
 * FIFO: a later push takes a later cell, and a consumer takes cells in
 * order). Odd producers push light ops (the item in the cell itself, with
 * a count of pushes taken between claiming a cell and publishing it), even
 * ones op pointers; the count must come out as the light pushes made.
 * A plain C program, so that it runs under ThreadSanitizer too.
 *
 * Usage: prim_ring [items per producer]; returns nonzero on failure. */
#include "engine_internal.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define PRODUCERS 4
#define CONSUMERS 3
#define CELLS 64 /* small: producers find it full often */

static struct vq__ring ring;
static long per_producer;
static atomic_int producers_left = PRODUCERS;
static atomic_uchar *seen;  /* [producer * per_producer + seq]: times popped */
static atomic_int failures;
static atomic_ulong light_pushed;

static int light_fn(void *arg, const vq_exec_ctx *x)
{
    (void)arg;
    (void)x;
    return 0;
}

/* An item is never dereferenced: producer and sequence in a pointer
 * (+ 1, since NULL means empty). */
static vq__op *item(long p, long seq)
{
    return (vq__op *)(uintptr_t)(((uintptr_t)p << 40 | (uintptr_t)seq) + 1);
}

static void *produce(void *arg)
{
    long p = (long)(intptr_t)arg;
    for (long i = 0; i < per_producer; i++) {
        struct vq__light l = {.fn = light_fn, .arg = item(p, i)};
        unsigned long ticket;
        while (p % 2 ? !vq__ring_push_light(&ring, &l, &light_pushed, &ticket)
                     : !vq__ring_push(&ring, item(p, i)))
            sched_yield(); /* full */
    }
    atomic_fetch_sub(&producers_left, 1);
    return NULL;
}

static void *consume(void *arg)
{
    (void)arg;
    long last[PRODUCERS];
    for (int p = 0; p < PRODUCERS; p++)
        last[p] = -1;
    for (;;) {
        struct vq__item it;
        if (!vq__ring_pop(&ring, &it)) {
            /* Empty: done once every producer is and one more look finds
             * nothing. producers_left is read once here: read twice, a
             * producer finishing between the reads let the loop go on
             * with it unset, the item of the previous turn counted again
             * (a rare "popped more than once" under TSan). */
            if (atomic_load(&producers_left) != 0) {
                sched_yield();
                continue;
            }
            if (!vq__ring_pop(&ring, &it))
                return NULL;
        }
        if (!it.op && it.light.fn != light_fn) {
            fprintf(stderr, "prim_ring: a light op came out without its function\n");
            atomic_fetch_add(&failures, 1);
            continue;
        }
        uintptr_t v = (uintptr_t)(it.op ? (void *)it.op : it.light.arg) - 1;
        if (((long)(v >> 40) % 2 == 1) != !it.op) {
            fprintf(stderr, "prim_ring: an item came out as the other kind\n");
            atomic_fetch_add(&failures, 1);
        }
        long p = (long)(v >> 40), seq = (long)(v & (((uintptr_t)1 << 40) - 1));
        if (p >= PRODUCERS || seq >= per_producer) {
            fprintf(stderr, "prim_ring: popped an item never pushed (%ld, %ld)\n", p, seq);
            atomic_fetch_add(&failures, 1);
            continue;
        }
        if (seq <= last[p]) {
            fprintf(stderr, "prim_ring: producer %ld's item %ld came after its item %ld\n", p,
                    seq, last[p]);
            atomic_fetch_add(&failures, 1);
        }
        last[p] = seq;
        atomic_fetch_add(&seen[p * per_producer + seq], 1);
    }
}

int main(int argc, char **argv)
{
    per_producer = argc > 1 ? atol(argv[1]) : 200000;
    if (per_producer < 1 || vq__ring_init(&ring, CELLS) < 0)
        return 2;
    seen = calloc((size_t)(PRODUCERS * per_producer), sizeof *seen);
    if (!seen)
        return 2;
    pthread_t prod[PRODUCERS], cons[CONSUMERS];
    for (int i = 0; i < CONSUMERS; i++)
        pthread_create(&cons[i], NULL, consume, NULL);
    for (int i = 0; i < PRODUCERS; i++)
        pthread_create(&prod[i], NULL, produce, (void *)(intptr_t)i);
    for (int i = 0; i < PRODUCERS; i++)
        pthread_join(prod[i], NULL);
    for (int i = 0; i < CONSUMERS; i++)
        pthread_join(cons[i], NULL);
    long lost = 0, twice = 0;
    for (long i = 0; i < PRODUCERS * per_producer; i++) {
        lost += seen[i] == 0;
        twice += seen[i] > 1;
    }
    if (lost || twice)
        fprintf(stderr, "prim_ring: %ld items lost, %ld popped more than once\n", lost, twice);
    struct vq__item rest;
    if (vq__ring_pop(&ring, &rest))
        fprintf(stderr, "prim_ring: the ring is not empty at the end\n"), lost++;
    unsigned long light = (unsigned long)(PRODUCERS / 2) * (unsigned long)per_producer;
    if (atomic_load(&light_pushed) != light)
        fprintf(stderr, "prim_ring: %lu light pushes counted, %lu made\n",
                atomic_load(&light_pushed), light),
            lost++;
    int bad = atomic_load(&failures) || lost || twice;
    printf("prim_ring: %d producers, %d consumers, %ld items each, %d cells: %s\n", PRODUCERS,
           CONSUMERS, per_producer, CELLS, bad ? "FAILED" : "ok");
    free(seen);
    free(ring.cells);
    return bad;
}
