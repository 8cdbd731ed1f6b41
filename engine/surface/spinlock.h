/* The engine's spinlock, for short critical sections that a preempted
 * holder may stretch: a flag taken with one exchange and let go with a
 * store; a waiter spins with a pause, then yields the core (vq__spin_wait,
 * var.c). The var queues use it, and so do capture's per-thread states
 * (capture/capture.c), which share its waiting policy. */
#ifndef VQ_ENGINE_SPINLOCK_H
#define VQ_ENGINE_SPINLOCK_H

#include <stdatomic.h>

typedef struct {
    atomic_flag flag;
} vq__spinlock;

void vq__spin_wait(vq__spinlock *l);

static inline void vq__spin_lock(vq__spinlock *l)
{
    /* acquire: the holder sees everything the previous holder wrote */
    if (__builtin_expect(atomic_flag_test_and_set_explicit(&l->flag, memory_order_acquire), 0))
        vq__spin_wait(l);
}

static inline void vq__spin_unlock(vq__spinlock *l)
{
    /* release: publishes the critical section to the next holder */
    atomic_flag_clear_explicit(&l->flag, memory_order_release);
}

static inline void vq__cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

#endif
