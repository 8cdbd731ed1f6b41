/* The var-queue state machine (engine/var.c) step by step: which accesses
 * are granted at append, and which exactly each completion grants. Ops here
 * are bare op blocks with one dependency each; "granted" means the var
 * brought the op's wait counter to zero. */
#include "../engine/engine_internal.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include "leakcheck.h"

static vq_var *var;

static void setup(void)
{
    var = vq__pool_alloc(VQ__POOL_VAR);
    cr_assert_not_null(var);
    cr_assert_eq(vq__var_init(var, NULL, "v"), 0);
}

static void teardown(void)
{
    cr_assert_null(var->pending_write, "queue not drained");
    cr_assert_eq(var->num_pending_reads, 0);
    vq__pool_free(VQ__POOL_VBLOCK, var->head);
    vq__pool_free(VQ__POOL_VAR, var);
    leak_check();
}

TestSuite(engine_queue, .init = setup, .fini = teardown);

static vq__op *op_new(void)
{
    vq__op *op = calloc(1, sizeof *op);
    cr_assert_not_null(op);
    atomic_init(&op->wait, 1);
    return op;
}

/* Appends a read; true if granted at once (then the op is marked run). */
static bool append_read(vq__op *op)
{
    struct vq__vblock *spare = vq__pool_alloc(VQ__POOL_VBLOCK);
    bool granted = vq__var_append_read(var, op, &spare);
    if (spare)
        vq__pool_free(VQ__POOL_VBLOCK, spare);
    if (granted)
        atomic_store(&op->wait, 0);
    return granted;
}

static bool append_write(vq__op *op)
{
    bool granted = vq__var_append_write(var, op, vq__pool_alloc(VQ__POOL_VBLOCK));
    if (granted)
        atomic_store(&op->wait, 0);
    return granted;
}

/* The ops a completion granted, in order. */
static vq__ready granted;

static void complete_read(void)
{
    granted.n = 0;
    vq__var_complete_read(var, &granted);
}

static void complete_write(void)
{
    granted.n = 0;
    vq__var_complete_write(var, &granted);
}

static bool was_granted(const vq__op *op)
{
    for (int i = 0; i < granted.n; i++)
        if (granted.ops[i] == op)
            return true;
    return false;
}

Test(engine_queue, read_after_read_runs_concurrently)
{
    vq__op *a = op_new(), *b = op_new(), *c = op_new();
    cr_assert(append_read(a));
    cr_assert(append_read(b));
    cr_assert(append_read(c));
    cr_assert_eq(var->num_pending_reads, 3);
    cr_assert_null(var->pending_write);
    complete_read();
    complete_read();
    complete_read();
    cr_assert_eq(granted.n, 0);
    free(a), free(b), free(c);
}

Test(engine_queue, write_waits_for_earlier_reads)
{
    vq__op *r1 = op_new(), *r2 = op_new(), *w = op_new();
    cr_assert(append_read(r1));
    cr_assert(append_read(r2));
    cr_assert_not(append_write(w), "write granted while reads run");
    cr_assert_not_null(var->pending_write);
    cr_assert_not(var->write_triggered);
    complete_read();
    cr_assert_eq(granted.n, 0, "write granted with a read still running");
    complete_read();
    cr_assert_eq(granted.n, 1);
    cr_assert(was_granted(w));
    cr_assert(var->write_triggered);
    complete_write();
    cr_assert_eq(granted.n, 0);
    free(r1), free(r2), free(w);
}

Test(engine_queue, reads_wait_for_an_earlier_write)
{
    vq__op *w = op_new(), *r1 = op_new(), *r2 = op_new();
    cr_assert(append_write(w));
    cr_assert(var->write_triggered);
    cr_assert_not(append_read(r1), "read granted while a write runs");
    cr_assert_not(append_read(r2));
    complete_write();
    cr_assert_eq(granted.n, 2);
    cr_assert(was_granted(r1) && was_granted(r2));
    cr_assert_null(var->pending_write);
    cr_assert_eq(var->num_pending_reads, 2);
    complete_read();
    complete_read();
    cr_assert_eq(granted.n, 0);
    free(w), free(r1), free(r2);
}

Test(engine_queue, write_after_write_runs_in_order)
{
    vq__op *w1 = op_new(), *w2 = op_new(), *w3 = op_new();
    cr_assert(append_write(w1));
    cr_assert_not(append_write(w2));
    cr_assert_not(append_write(w3));
    complete_write();
    cr_assert_eq(granted.n, 1);
    cr_assert(was_granted(w2));
    complete_write();
    cr_assert_eq(granted.n, 1);
    cr_assert(was_granted(w3));
    complete_write();
    cr_assert_eq(granted.n, 0);
    free(w1), free(w2), free(w3);
}

Test(engine_queue, completion_grants_exactly_the_next_run_of_blocks)
{
    /* W1 R1 R2 W2 R3 W3 */
    vq__op *w1 = op_new(), *r1 = op_new(), *r2 = op_new(), *w2 = op_new(), *r3 = op_new(),
           *w3 = op_new();
    cr_assert(append_write(w1));
    cr_assert_not(append_read(r1));
    cr_assert_not(append_read(r2));
    cr_assert_not(append_write(w2));
    cr_assert_not(append_read(r3));
    cr_assert_not(append_write(w3));

    complete_write(); /* W1 done: R1 and R2, not W2 */
    cr_assert_eq(granted.n, 2);
    cr_assert(was_granted(r1) && was_granted(r2));
    cr_assert_not(var->write_triggered);
    complete_read(); /* R1 done: nothing */
    cr_assert_eq(granted.n, 0);
    complete_read(); /* R2 done: W2 */
    cr_assert_eq(granted.n, 1);
    cr_assert(was_granted(w2));
    complete_write(); /* W2 done: R3 only */
    cr_assert_eq(granted.n, 1);
    cr_assert(was_granted(r3));
    cr_assert_eq(atomic_load(&w3->wait), 1, "W3 granted behind a running read");
    complete_read(); /* R3 done: W3 */
    cr_assert_eq(granted.n, 1);
    cr_assert(was_granted(w3));
    complete_write();
    cr_assert_eq(granted.n, 0);
    free(w1), free(r1), free(r2), free(w2), free(r3), free(w3);
}

Test(engine_queue, read_arriving_after_a_queued_write_waits_for_it)
{
    vq__op *r1 = op_new(), *w = op_new(), *r2 = op_new();
    cr_assert(append_read(r1));
    cr_assert_not(append_write(w));
    cr_assert_not(append_read(r2), "read overtook a queued write");
    complete_read();
    cr_assert_eq(granted.n, 1);
    cr_assert(was_granted(w));
    complete_write();
    cr_assert_eq(granted.n, 1);
    cr_assert(was_granted(r2));
    complete_read();
    free(r1), free(w), free(r2);
}
