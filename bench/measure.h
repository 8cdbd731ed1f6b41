/* What every benchmark program measures with, written once: the monotonic
 * clock in seconds, and the median and minimum of repeated timings (the
 * figures the programs print). Header-only, so that each program, the
 * engine harness (harness.c, through bench.h) and the clang-built OpenMP
 * runner take it without another source file. */
#ifndef VARQ_BENCH_MEASURE_H
#define VARQ_BENCH_MEASURE_H

#include <stdlib.h>
#include <time.h>

/* Seconds on the monotonic clock, from an arbitrary origin. */
static inline double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* v[0 .. n) in ascending order, in place. */
static inline void bench_sort(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
}

/* Sorts v[0 .. n) (n > 0) and returns its median: the middle element, or
 * the mean of the two middle ones. */
static inline double bench_median(double *v, int n)
{
    bench_sort(v, n);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Sorts t[0 .. n) (n > 0); its median and minimum. */
static inline void bench_stats(double *t, int n, double *median, double *min)
{
    *median = bench_median(t, n);
    *min = t[0];
}

#endif
