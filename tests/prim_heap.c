/* Regression for the ready queue's heap (engine/threaded.c): the binary
 * heap of ops with a priority, highest first and FIFO among equals, under
 * a spinlock, which spills to a list when it cannot grow.
 *
 *   1. order: one thread pushes ops of random priorities and pops them
 *      all: priorities never rise, equal ones leave in push order;
 *   2. contention: P pushers and C poppers at once: every op leaves exactly
 *      once, and each popper sees one pusher's ops of one priority in push
 *      order; what is left when the pushers are done leaves in order;
 *   3. out of memory: the growth of the array fails (fault.h's injection):
 *      the op is spilled, not lost and not waited for, and leaves after
 *      every op of the array, spilled ones in push order; the heap grows
 *      again afterwards.
 * A plain C program, so that it runs under ThreadSanitizer too.
 *
 * Usage: prim_heap [ops per pusher]; returns nonzero on failure. */
#include "engine_internal.h"
#include "fault.h"

#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PUSHERS 3
#define POPPERS 2
#define PRIORITIES 4

static int failures;

#define CHECK(cond, ...)                                                                    \
    do {                                                                                    \
        if (!(cond)) {                                                                      \
            fprintf(stderr, "prim_heap: " __VA_ARGS__);                                    \
            fputc('\n', stderr);                                                            \
            failures++;                                                                     \
        }                                                                                   \
    } while (0)

/* Ops whose desc carries the priority; tag numbers the op. */
struct tagged_op {
    vq__op op;
    struct vq__desc desc;
    int pusher;
    long seq; /* in its pusher's order */
    atomic_int popped;
};

static struct tagged_op *ops_new(long n, unsigned seed, int pusher)
{
    struct tagged_op *t = calloc((size_t)n, sizeof *t);
    if (!t)
        exit(2);
    for (long i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        t[i].desc.priority = (int)(seed >> 16) % PRIORITIES - 1; /* -1 .. 2 */
        t[i].op.desc = &t[i].desc;
        t[i].pusher = pusher;
        t[i].seq = i;
    }
    return t;
}

static struct tagged_op *tag_of(vq__op *op)
{
    return (struct tagged_op *)((char *)op - offsetof(struct tagged_op, op));
}

static void heap_init(struct vq__heap *h)
{
    memset(h, 0, sizeof *h);
    atomic_flag_clear(&h->lock.flag);
}

/* Pops everything left on one thread and checks the order. */
static long drain_in_order(struct vq__heap *h, const char *what)
{
    long n = 0;
    int last_prio = INT_MAX;
    long last_seq[PUSHERS][PRIORITIES];
    memset(last_seq, -1, sizeof last_seq);
    for (vq__op *op; (op = vq__heap_pop(h, INT_MIN)); n++) {
        struct tagged_op *t = tag_of(op);
        int p = t->desc.priority;
        CHECK(p <= last_prio, "%s: priority %d after %d", what, p, last_prio);
        long *ls = &last_seq[t->pusher][p + 1];
        CHECK(t->seq > *ls, "%s: equal priority %d out of push order (%ld after %ld)", what, p,
              t->seq, *ls);
        *ls = t->seq;
        last_prio = p;
        atomic_fetch_add(&t->popped, 1);
    }
    return n;
}

static void order_single_thread(long n)
{
    struct vq__heap h;
    heap_init(&h);
    struct tagged_op *t = ops_new(n, 1, 0);
    for (long i = 0; i < n; i++)
        vq__heap_push(&h, &t[i].op);
    CHECK(atomic_load(&h.count) == n, "order: count %d after %ld pushes", atomic_load(&h.count),
          n);
    long got = drain_in_order(&h, "order");
    CHECK(got == n, "order: %ld of %ld ops popped", got, n);
    free(h.items);
    free(t);
}

/* ---- contention ---- */

static struct vq__heap shared;
static struct tagged_op *pushed_ops[PUSHERS];
static long per_pusher;
static atomic_int pushers_left;
static atomic_long popped_total;
static atomic_int contention_failures;

static void *pusher(void *arg)
{
    struct tagged_op *t = arg;
    for (long i = 0; i < per_pusher; i++)
        vq__heap_push(&shared, &t[i].op);
    atomic_fetch_sub(&pushers_left, 1);
    return NULL;
}

static void *popper(void *arg)
{
    (void)arg;
    long last_seq[PUSHERS][PRIORITIES];
    memset(last_seq, -1, sizeof last_seq);
    /* Pops while pushers run; what is left is drained in order below. */
    while (atomic_load(&pushers_left) > 0) {
        vq__op *op = vq__heap_pop(&shared, INT_MIN);
        if (!op) {
            sched_yield();
            continue;
        }
        struct tagged_op *t = tag_of(op);
        long *ls = &last_seq[t->pusher][t->desc.priority + 1];
        if (t->seq <= *ls)
            atomic_fetch_add(&contention_failures, 1);
        *ls = t->seq;
        atomic_fetch_add(&t->popped, 1);
        atomic_fetch_add(&popped_total, 1);
    }
    return NULL;
}

static void contention(long n)
{
    heap_init(&shared);
    per_pusher = n;
    atomic_store(&pushers_left, PUSHERS);
    pthread_t pu[PUSHERS], po[POPPERS];
    for (int i = 0; i < PUSHERS; i++)
        pushed_ops[i] = ops_new(n, 7u + (unsigned)i, i);
    for (int i = 0; i < POPPERS; i++)
        pthread_create(&po[i], NULL, popper, NULL);
    for (int i = 0; i < PUSHERS; i++)
        pthread_create(&pu[i], NULL, pusher, pushed_ops[i]);
    for (int i = 0; i < PUSHERS; i++)
        pthread_join(pu[i], NULL);
    for (int i = 0; i < POPPERS; i++)
        pthread_join(po[i], NULL);
    CHECK(atomic_load(&contention_failures) == 0,
          "contention: %d pops saw one pusher's equal-priority ops out of order",
          atomic_load(&contention_failures));
    long rest = drain_in_order(&shared, "contention, the rest");
    CHECK(atomic_load(&popped_total) + rest == PUSHERS * n, "contention: %ld of %ld ops popped",
          atomic_load(&popped_total) + rest, PUSHERS * n);
    for (int i = 0; i < PUSHERS; i++) {
        for (long k = 0; k < n; k++)
            CHECK(atomic_load(&pushed_ops[i][k].popped) == 1, "contention: op %d/%ld popped %d times",
                  i, k, atomic_load(&pushed_ops[i][k].popped));
        free(pushed_ops[i]);
    }
    free(shared.items);
}

/* ---- out of memory: the spill ---- */

static void spill(void)
{
    struct vq__heap h;
    heap_init(&h);
    enum { FIRST = 256, SPILLED = 3, AFTER = 300 }; /* the array starts at 256 items */
    long n = FIRST + SPILLED + AFTER;
    struct tagged_op *t = ops_new(n, 3, 0);
    for (long i = 0; i < FIRST; i++)
        vq__heap_push(&h, &t[i].op);
    for (long i = FIRST; i < FIRST + SPILLED; i++) {
        vq__fault_arm(1); /* the next allocation, the array's growth, fails */
        vq__heap_push(&h, &t[i].op);
        CHECK(vq__fault_fired(), "spill: the push of a full array did not try to grow it");
        vq__fault_arm(0);
    }
    CHECK(h.spill_head == &t[FIRST].op, "spill: the first op that found no room is not spilled");
    CHECK(atomic_load(&h.count) == FIRST + SPILLED, "spill: count %d, want %d",
          atomic_load(&h.count), FIRST + SPILLED);
    for (long i = FIRST + SPILLED; i < n; i++) /* memory again: the array grows */
        vq__heap_push(&h, &t[i].op);
    CHECK(h.cap > FIRST, "spill: the array did not grow once memory was back");
    /* The array's ops first, in order; then the spilled ones in push order,
     * whatever their priority. */
    vq__op *op;
    long k = 0;
    int last_prio = INT_MAX;
    while (k < n - SPILLED && (op = vq__heap_pop(&h, INT_MIN))) {
        struct tagged_op *x = tag_of(op);
        CHECK(x->seq < FIRST || x->seq >= FIRST + SPILLED, "spill: spilled op %ld left before "
              "the array's ops", x->seq);
        CHECK(x->desc.priority <= last_prio, "spill: priority %d after %d", x->desc.priority,
              last_prio);
        last_prio = x->desc.priority;
        k++;
    }
    CHECK(k == n - SPILLED, "spill: %ld of the array's %ld ops popped", k, n - SPILLED);
    for (long i = FIRST; i < FIRST + SPILLED; i++) {
        op = vq__heap_pop(&h, 1); /* spilled ops are not taken by priority */
        CHECK(op == NULL, "spill: a spilled op was popped for priority 1");
        op = vq__heap_pop(&h, INT_MIN);
        CHECK(op == &t[i].op, "spill: spilled op %ld did not leave in push order", i);
    }
    CHECK(vq__heap_pop(&h, INT_MIN) == NULL && atomic_load(&h.count) == 0,
          "spill: the heap is not empty at the end");
    free(h.items);
    free(t);
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 20000;
    if (n < 1)
        return 2;
    order_single_thread(n);
    contention(n);
    spill();
    printf("prim_heap: order, %d pushers and %d poppers (%ld ops each), spill: %s\n", PUSHERS,
           POPPERS, n, failures ? "FAILED" : "ok");
    return failures != 0;
}
