/* The CPU allocator's statistics, for the suites that watch them
 * (test_alloc.c, test_imperative.c): stats() fails the test when
 * vq_mem_get_stats does. */
#ifndef VARQ_TESTS_CPU_STATS_H
#define VARQ_TESTS_CPU_STATS_H

#include <varq/varq.h>

#include <criterion/criterion.h>

static const vq_ctx cpu0 = {VQ_DEV_CPU, 0};

static inline vq_mem_stats stats(void)
{
    vq_mem_stats s;
    cr_assert_eq(vq_mem_get_stats(cpu0, &s), 0);
    return s;
}

#endif
