/* What the three digits examples (mlp_digits.c, mlp_digits_imperative.c,
 * onnx_cnn_digits.c) share: the CHECK macro that prints a failing call
 * with varq's message and exits, loading the data set's .npy files
 * (written by scripts/digits_to_npy.py), picking a batch's rows, and
 * counting right answers.
 * Header-only (static functions), like rnn_model.h, so that each example
 * builds alone. Define EXAMPLE_NAME (the program's name, for messages)
 * before including it. */
#ifndef VARQ_EXAMPLES_DIGITS_DATA_H
#define VARQ_EXAMPLES_DIGITS_DATA_H

#include <varq/varq.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef EXAMPLE_NAME
#error "define EXAMPLE_NAME before including digits_data.h"
#endif

#define CHECK(call)                                                                        \
    do {                                                                                   \
        if ((call) < 0) {                                                                  \
            fprintf(stderr, EXAMPLE_NAME ": %s: %s\n", #call, vq_errmsg());                \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

/* dir/name.npy as a new tensor; exits saying how to make the files when
 * it cannot be read. The caller releases it. */
static inline vq_tensor *digits_load(const char *dir, const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s.npy", dir, name);
    vq_tensor *t;
    if (vq_npy_load(path, &t) < 0) {
        fprintf(stderr, EXAMPLE_NAME ": %s\n(run scripts/digits_to_npy.py %s first)\n",
                vq_errmsg(), dir);
        exit(1);
    }
    return t;
}

/* Rows idx[0..n) of src ([N, cols] or [N], any dtype) as a new CPU
 * tensor of the same dtype; the caller releases it. */
static inline vq_tensor *digits_rows(vq_tensor *src, const int *idx, int n)
{
    int ndim = vq_tensor_ndim(src);
    int64_t shape[2] = {n, ndim > 1 ? vq_tensor_shape(src)[1] : 1};
    size_t row = vq_tensor_nbytes(src) / (size_t)vq_tensor_shape(src)[0];
    vq_tensor *t;
    CHECK(vq_tensor_new(&t, vq_tensor_dtype(src), ndim, shape));
    for (int i = 0; i < n; i++)
        memcpy((char *)vq_tensor_data(t) + (size_t)i * row,
               (char *)vq_tensor_data(src) + (size_t)idx[i] * row, row);
    return t;
}

/* How many of the n rows of scores [n, 10] (probabilities or logits) put
 * their largest value at the row's label (labels: i64 [>= n]). */
static inline int64_t digits_right(const float *scores, vq_tensor *labels, int64_t n)
{
    const int64_t *label = vq_tensor_data(labels);
    int64_t right = 0;
    for (int64_t r = 0; r < n; r++) {
        int best = 0;
        for (int c = 1; c < 10; c++)
            if (scores[r * 10 + c] > scores[r * 10 + best])
                best = c;
        right += best == label[r];
    }
    return right;
}

#endif
