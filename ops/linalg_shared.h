/* What det's CPU kernels (ops/cpu/det.c) and CUDA kernels (ops/cuda/det.cu)
 * share: the LU factorization with partial pivoting of one matrix in
 * double, its determinant, and the cofactor matrix that det's gradient
 * is, written once so that both compute the same bits (nvcc with
 * --fmad=false, as ops/cuda/kernels.h says). Plain C, and __host__
 * __device__ under nvcc (VQ__SHARED_FN). */
#ifndef VARQ_OPS_LINALG_SHARED_H
#define VARQ_OPS_LINALG_SHARED_H

#include "shape_shared.h" /* VQ__SHARED_FN */

#include <math.h>
#include <stdint.h>

/* Factors the n x n row-major a in place (L's multipliers below the
 * diagonal, U on and above it), rows swapped for the largest pivot in
 * magnitude (the first of equals); perm[i] gets the original row of row i.
 * Returns the determinant: the product of the pivots in order, negated
 * once per swap; 0 at the first zero pivot, where it stops. */
VQ__SHARED_FN double vq__lu_det(double *a, int64_t n, double *perm)
{
    double det = 1;
    for (int64_t i = 0; i < n; i++)
        perm[i] = (double)i;
    for (int64_t k = 0; k < n; k++) {
        int64_t p = k;
        double best = fabs(a[k * n + k]);
        for (int64_t i = k + 1; i < n; i++)
            if (fabs(a[i * n + k]) > best) {
                best = fabs(a[i * n + k]);
                p = i;
            }
        if (best == 0)
            return 0;
        if (p != k) {
            for (int64_t j = 0; j < n; j++) {
                double t = a[k * n + j];
                a[k * n + j] = a[p * n + j];
                a[p * n + j] = t;
            }
            double t = perm[k];
            perm[k] = perm[p];
            perm[p] = t;
            det = -det;
        }
        double piv = a[k * n + k];
        det *= piv;
        for (int64_t i = k + 1; i < n; i++) {
            double f = a[i * n + k] / piv;
            a[i * n + k] = f;
            for (int64_t j = k + 1; j < n; j++)
                a[i * n + j] -= f * a[k * n + j];
        }
    }
    return det;
}

/* The cofactor matrix of the n x n row-major x into c (both doubles):
 * det(x) times the transposed inverse when x is regular (column j of the
 * inverse from its LU, L U y = P e_j, is row j of c over det), else each
 * cofactor as the signed determinant of its minor. w: 2 n^2 + 2 n doubles
 * of scratch. */
VQ__SHARED_FN void vq__cofactors(const double *x, int64_t n, double *c, double *w)
{
    double *lu = w, *perm = w + n * n, *y = perm + n, *minor = y + n;
    for (int64_t i = 0; i < n * n; i++)
        lu[i] = x[i];
    double det = vq__lu_det(lu, n, perm);
    if (det != 0) {
        for (int64_t j = 0; j < n; j++) {
            /* forward: L z = P e_j (unit diagonal), then back: U y = z */
            for (int64_t i = 0; i < n; i++) {
                double s = (int64_t)perm[i] == j ? 1 : 0;
                for (int64_t q = 0; q < i; q++)
                    s -= lu[i * n + q] * y[q];
                y[i] = s;
            }
            for (int64_t i = n - 1; i >= 0; i--) {
                double s = y[i];
                for (int64_t q = i + 1; q < n; q++)
                    s -= lu[i * n + q] * y[q];
                y[i] = s / lu[i * n + i];
            }
            /* y is column j of the inverse: row j of its transpose */
            for (int64_t i = 0; i < n; i++)
                c[j * n + i] = det * y[i];
        }
        return;
    }
    /* singular: each cofactor from its minor (n^5, where an LU has no
     * inverse to offer) */
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < n; j++) {
            int64_t m = n - 1, r = 0;
            for (int64_t a = 0; a < n; a++) {
                if (a == i)
                    continue;
                for (int64_t b = 0, s = 0; b < n; b++)
                    if (b != j)
                        minor[r * m + s++] = x[a * n + b];
                r++;
            }
            double d = m ? vq__lu_det(minor, m, y) : 1;
            c[i * n + j] = (i + j) % 2 ? -d : d;
        }
}

#endif
