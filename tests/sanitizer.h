/* Which sanitizer a test program is built with, whichever the compiler:
 * gcc defines __SANITIZE_ADDRESS__ / __SANITIZE_THREAD__, clang says so
 * only through __has_feature. VQ_TEST_ASAN, VQ_TEST_TSAN, and
 * VQ_TEST_SANITIZER for either. */
#ifndef VARQ_TESTS_SANITIZER_H
#define VARQ_TESTS_SANITIZER_H

#if defined(__SANITIZE_ADDRESS__)
#define VQ_TEST_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__)
#define VQ_TEST_TSAN 1
#endif
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define VQ_TEST_ASAN 1
#endif
#if __has_feature(thread_sanitizer)
#define VQ_TEST_TSAN 1
#endif
#endif
#if defined(VQ_TEST_ASAN) || defined(VQ_TEST_TSAN)
#define VQ_TEST_SANITIZER 1
#endif

#endif
