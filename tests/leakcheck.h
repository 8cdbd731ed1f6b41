/* A suite teardown that fails the test on a memory leak under
 * AddressSanitizer. LeakSanitizer's report at process exit does not fail a
 * Criterion test (the result is already sent), and neither does an
 * assertion in a teardown; a crash in the teardown does. Suites use
 * TestSuite(name, .fini = leak_check). Without ASan it does nothing. */
#ifndef VARQ_TESTS_LEAKCHECK_H
#define VARQ_TESTS_LEAKCHECK_H

#include <stdlib.h>

#include "sanitizer.h"

#ifdef VQ_TEST_ASAN
#define VQ_TEST_LSAN 1
#endif

#ifdef VQ_TEST_LSAN
#include <sanitizer/lsan_interface.h>
#endif

static inline void leak_check(void)
{
#ifdef VQ_TEST_LSAN
    if (__lsan_do_recoverable_leak_check() != 0)
        abort(); /* the report is above */
#endif
}

#endif
