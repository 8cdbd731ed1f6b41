/* The CPU allocator behind tensors (vq_mem_get_stats and friends):
 * released storage comes back, steady state reuses blocks, the size
 * classes' waste, the peak's reset. */
#include <varq/varq.h>

#include <criterion/criterion.h>
#include "cpu_stats.h"
#include "leakcheck.h"

TestSuite(alloc, .fini = leak_check);

Test(alloc, released_storage_returns_to_the_allocator)
{
    vq_mem_stats before = stats();
    int64_t shape[1] = {1000};
    vq_tensor *t;
    cr_assert_eq(vq_tensor_new(&t, VQ_F32, 1, shape), 0);
    vq_tensor_retain(t);
    cr_assert_eq(stats().live_bytes, before.live_bytes + 4000);
    vq_tensor_release(t);
    cr_assert_eq(stats().live_bytes, before.live_bytes + 4000, "one reference is left");
    vq_tensor_release(t);
    vq_mem_stats after = stats();
    cr_assert_eq(after.live_bytes, before.live_bytes);
    cr_assert_geq(after.cached_bytes, 4000, "freed block is cached for reuse");
    cr_assert_eq(vq_mem_trim(cpu0), 0);
    cr_assert_eq(stats().cached_bytes, 0);
}

Test(alloc, steady_state_reuses_blocks_and_peak_stays_flat)
{
    int64_t shapes[4][2] = {{64, 64}, {64, 10}, {1, 64}, {300, 7}};
    size_t peak_after_first = 0, system_after_first = 0;
    uint64_t allocs_before = 0, reuses_before = 0;
    for (int it = 0; it < 100; it++) {
        vq_tensor *t[4];
        for (int i = 0; i < 4; i++)
            cr_assert_eq(vq_tensor_new(&t[i], VQ_F32, 2, shapes[i]), 0);
        for (int i = 0; i < 4; i++)
            vq_tensor_release(t[i]);
        vq_mem_stats s = stats();
        if (it == 0) {
            peak_after_first = s.peak_bytes;
            system_after_first = s.system_bytes;
            allocs_before = s.allocs;
            reuses_before = s.reuses;
        } else {
            cr_assert_eq(s.peak_bytes, peak_after_first, "peak grew at iteration %d", it);
            cr_assert_eq(s.system_bytes, system_after_first, "new memory at iteration %d", it);
        }
    }
    vq_mem_stats s = stats();
    cr_assert_eq(s.allocs - allocs_before, 99 * 4);
    cr_assert_eq(s.reuses - reuses_before, 99 * 4, "every later allocation is a reuse");
}

Test(alloc, size_classes_waste_at_most_a_quarter)
{
    cr_assert_eq(vq_mem_trim(cpu0), 0);
    for (int64_t n = 1; n < 100000; n = n * 3 + 1) {
        vq_mem_stats b = stats();
        vq_tensor *t;
        cr_assert_eq(vq_tensor_new(&t, VQ_BOOL, 1, &n), 0);
        vq_mem_stats a = stats();
        size_t got = a.system_bytes - b.system_bytes;
        cr_assert_geq(got, (size_t)n);
        cr_assert_leq(got, n <= 64 ? 64 : (size_t)n * 5 / 4 + 1, "%lld bytes took %zu",
                      (long long)n, got);
        vq_tensor_release(t);
        cr_assert_eq(vq_mem_trim(cpu0), 0);
    }
}

Test(alloc, peak_can_be_reset)
{
    int64_t n = 4096;
    vq_tensor *t;
    cr_assert_eq(vq_tensor_new(&t, VQ_F64, 1, &n), 0);
    vq_tensor_release(t);
    cr_assert_geq(stats().peak_bytes, 4096 * 8);
    cr_assert_eq(vq_mem_reset_peak(cpu0), 0);
    cr_assert_eq(stats().peak_bytes, stats().live_bytes);
    cr_assert_eq(vq_mem_get_stats((vq_ctx){VQ_DEV_GPU, 0}, &(vq_mem_stats){0}), VQ_ENOSYS);
}
