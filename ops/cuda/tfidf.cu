/* CUDA kernel for tfidf_vectorizer (ops/cpu/tfidf.c): a thread per row
 * counts the row's n-grams in its output row, scanning the pool's n-grams
 * of each length for every candidate, then applies the mode. The counts
 * are small integers, exact in f32, so the outputs are the CPU's. A pool
 * n-gram whose column is outside [0, size) is skipped: the tables are not
 * checked on the device (the CPU kernel and the ONNX importer check them).
 * Launcher: kernels.h. */
#include "kernels.h"

#include <stdint.h>

template <typename T>
__global__ void tfidf_kernel(const T *x, const int64_t *pool, int64_t npool,
                             const int64_t *counts, int64_t ncounts, const int64_t *idx,
                             const float *w, float *out, int64_t rows, int64_t C, int min_gram,
                             int max_gram, int max_skip, int mode, int64_t size)
{
    VQ__CUDA_FOR_EACH(r, rows)
    {
        const T *row = x + r * C;
        float *o = out + r * size;
        for (int64_t j = 0; j < size; j++)
            o[j] = 0;
        int start = min_gram;
        for (int64_t d = 1; d <= (int64_t)max_skip + 1; d++) {
            for (int64_t s = 0; s < C && s + d * (start - 1) < C; s++) {
                int64_t first = 0; /* the number of the section's first n-gram */
                for (int64_t g = 0; g < ncounts; g++) {
                    int n = (int)g + 1;
                    int64_t beg = counts[g], end = g + 1 < ncounts ? counts[g + 1] : npool;
                    int64_t cnt = end > beg ? (end - beg) / n : 0;
                    if (n >= start && n <= max_gram && s + d * (n - 1) < C) {
                        for (int64_t q = 0; q < cnt; q++) {
                            const int64_t *y = pool + beg + q * n;
                            int t = 0;
                            while (t < n && y[t] == (int64_t)row[s + t * d])
                                t++;
                            if (t == n) {
                                int64_t col = idx[first + q];
                                if (col >= 0 && col < size)
                                    o[col] += 1;
                                break; /* the first equal n-gram, as the CPU's */
                            }
                        }
                    }
                    first += cnt;
                }
            }
            if (start == 1 && ++start > max_gram)
                break;
        }
        for (int64_t j = 0; j < size; j++) {
            float wt = w ? w[j] : 1.0f;
            if (mode == 1)
                o[j] = o[j] > 0 ? wt : 0;
            else if (mode == 2)
                o[j] *= wt;
        }
    }
}

extern "C" int vq__cuda_tfidf(int dtype, const void *x, const int64_t *pool, int64_t npool,
                              const int64_t *counts, int64_t ncounts, const int64_t *idx,
                              const float *w, float *out, int64_t rows, int64_t C, int min_gram,
                              int max_gram, int max_skip, int mode, int64_t size, void *stream)
{
    if (rows < 0 || C < 0 || size < 1)
        return VQ_EINVAL;
    if (rows == 0)
        return 0;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    unsigned b = vq__cuda_blocks(rows);
    switch (dtype) {
    case VQ_I32:
        tfidf_kernel<int32_t><<<b, VQ__CUDA_THREADS, 0, s>>>(
            (const int32_t *)x, pool, npool, counts, ncounts, idx, w, out, rows, C, min_gram,
            max_gram, max_skip, mode, size);
        break;
    case VQ_I64:
        tfidf_kernel<int64_t><<<b, VQ__CUDA_THREADS, 0, s>>>(
            (const int64_t *)x, pool, npool, counts, ncounts, idx, w, out, rows, C, min_gram,
            max_gram, max_skip, mode, size);
        break;
    default: return VQ_EINVAL;
    }
    return vq__cuda_launched();
}
