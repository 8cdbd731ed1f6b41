/* What the MPI test programs share (tests/dist_*.c, framework-free: MPI and
 * Criterion's fork do not mix): this process's rank and the job's size, a
 * count of failed expectations, CHECK (a varq call that must succeed, or
 * the rank exits 1 naming it) and EXPECT (a condition, counted and
 * reported when false). Each program includes it once. */
#ifndef VARQ_TESTS_DIST_CHECK_H
#define VARQ_TESTS_DIST_CHECK_H

#include <varq/varq.h>

#include <stdio.h>
#include <stdlib.h>

__attribute__((unused)) static int rank, size, failures; /* not every program counts failures */

#define CHECK(call)                                                                        \
    do {                                                                                   \
        int rc_ = (call);                                                                  \
        if (rc_ < 0) {                                                                     \
            fprintf(stderr, "rank %d: %s:%d: %s: %s\n", rank, __FILE__, __LINE__, #call,   \
                    vq_errmsg());                                                          \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

#define EXPECT(cond, ...)                                                                  \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            fprintf(stderr, "rank %d: line %d: ", rank, __LINE__);                         \
            fprintf(stderr, __VA_ARGS__);                                                  \
            fputc('\n', stderr);                                                           \
            failures++;                                                                    \
        }                                                                                  \
    } while (0)

#endif
