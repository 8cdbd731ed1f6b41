/* The CUDA launches of every built-in op, by family: what an op's
 * definition (ops/cpu/<family>.c) names in its .cuda field, through
 * VQ__CUDA_OP, so that the registry's table of definitions is the one
 * table of kernels, CPU and CUDA. Each function is defined in
 * ops/cuda/<family>_host.c; the registry runs it through the dispatcher
 * vq__cuda_run (ops/cuda/launch.c) after the launch prologue. In a build
 * without CUDA, VQ__CUDA_OP(fn) is NULL and nothing here is defined.
 * Plain C, without the CUDA headers, so that the op families include it. */
#ifndef VARQ_OPS_CUDA_OPS_H
#define VARQ_OPS_CUDA_OPS_H

#include <stddef.h>

struct vq__kcall;
struct vq__cuda_launch; /* cuda_internal.h: the launch prologue's result */

#ifdef VARQ_HAVE_CUDA
#define VQ__CUDA_OP(fn) (fn)
#else
#define VQ__CUDA_OP(fn) NULL
#endif

/* An op's launches: enqueues them on the stream l holds and returns (GPU
 * ops complete at launch). 0, or the error naming the op. */
#define VQ__CUDA_LAUNCHES(fn) int fn(const struct vq__kcall *k, const struct vq__cuda_launch *l)

/* elementwise_host.c */
VQ__CUDA_LAUNCHES(vq__binary_gpu);
VQ__CUDA_LAUNCHES(vq__binary_grad_gpu);
VQ__CUDA_LAUNCHES(vq__scale_gpu);

/* compare_host.c */
VQ__CUDA_LAUNCHES(vq__compare_gpu);
VQ__CUDA_LAUNCHES(vq__not_gpu);
VQ__CUDA_LAUNCHES(vq__abs_gpu);
VQ__CUDA_LAUNCHES(vq__abs_grad_gpu);
VQ__CUDA_LAUNCHES(vq__where_gpu);
VQ__CUDA_LAUNCHES(vq__minmax_grad_gpu);
VQ__CUDA_LAUNCHES(vq__where_grad_gpu);

/* activation_host.c */
VQ__CUDA_LAUNCHES(vq__unary_gpu);
VQ__CUDA_LAUNCHES(vq__unary_grad_gpu);
VQ__CUDA_LAUNCHES(vq__log_softmax_gpu);
VQ__CUDA_LAUNCHES(vq__log_softmax_grad_gpu);
VQ__CUDA_LAUNCHES(vq__softmax_gpu);
VQ__CUDA_LAUNCHES(vq__softmax_grad_gpu);

/* math_host.c */
VQ__CUDA_LAUNCHES(vq__math_gpu);
VQ__CUDA_LAUNCHES(vq__math_grad_gpu);

/* loss_host.c */
VQ__CUDA_LAUNCHES(vq__ce_gpu);
VQ__CUDA_LAUNCHES(vq__ce_grad_gpu);
VQ__CUDA_LAUNCHES(vq__sce_gpu);
VQ__CUDA_LAUNCHES(vq__sce_grad_gpu);
VQ__CUDA_LAUNCHES(vq__se_gpu);
VQ__CUDA_LAUNCHES(vq__se_grad_gpu);
VQ__CUDA_LAUNCHES(vq__mse_gpu);
VQ__CUDA_LAUNCHES(vq__mse_grad_gpu);

/* reduce_host.c */
VQ__CUDA_LAUNCHES(vq__reduce_gpu);
VQ__CUDA_LAUNCHES(vq__reduce_grad_gpu);

/* shape_host.c */
VQ__CUDA_LAUNCHES(vq__transpose_gpu);
VQ__CUDA_LAUNCHES(vq__copy_gpu);
VQ__CUDA_LAUNCHES(vq__concat_gpu);
VQ__CUDA_LAUNCHES(vq__concat_grad_gpu);
VQ__CUDA_LAUNCHES(vq__slice_gpu);
VQ__CUDA_LAUNCHES(vq__slice_grad_gpu);
VQ__CUDA_LAUNCHES(vq__cast_gpu);
VQ__CUDA_LAUNCHES(vq__cast_grad_gpu);

/* matmul_host.c */
VQ__CUDA_LAUNCHES(vq__matmul_gpu);
VQ__CUDA_LAUNCHES(vq__matmul_grad_gpu);

/* init_host.c */
VQ__CUDA_LAUNCHES(vq__fill_gpu);
VQ__CUDA_LAUNCHES(vq__uniform_gpu);
VQ__CUDA_LAUNCHES(vq__gaussian_gpu);
VQ__CUDA_LAUNCHES(vq__dropout_gpu);

/* optim_host.c */
VQ__CUDA_LAUNCHES(vq__sgd_gpu);
VQ__CUDA_LAUNCHES(vq__momentum_gpu);
VQ__CUDA_LAUNCHES(vq__adam_gpu);
VQ__CUDA_LAUNCHES(vq__lr_schedule_gpu);

/* conv_host.c */
VQ__CUDA_LAUNCHES(vq__conv2d_gpu);
VQ__CUDA_LAUNCHES(vq__conv2d_grad_gpu);
VQ__CUDA_LAUNCHES(vq__conv_transpose2d_gpu);

/* conv3d_host.c */
VQ__CUDA_LAUNCHES(vq__conv3d_gpu);
VQ__CUDA_LAUNCHES(vq__conv3d_grad_gpu);
VQ__CUDA_LAUNCHES(vq__conv_transpose3d_gpu);

/* pool_host.c */
VQ__CUDA_LAUNCHES(vq__pool_gpu);
VQ__CUDA_LAUNCHES(vq__pool_grad_gpu);
VQ__CUDA_LAUNCHES(vq__max_pool_argmax_gpu);
VQ__CUDA_LAUNCHES(vq__global_pool_gpu);
VQ__CUDA_LAUNCHES(vq__global_pool_grad_gpu);

/* norm_host.c */
VQ__CUDA_LAUNCHES(vq__batch_norm_gpu);
VQ__CUDA_LAUNCHES(vq__batch_norm_grad_gpu);
VQ__CUDA_LAUNCHES(vq__batch_norm_train_gpu);
VQ__CUDA_LAUNCHES(vq__batch_norm_train_grad_gpu);

/* index_host.c */
VQ__CUDA_LAUNCHES(vq__gather_gpu);
VQ__CUDA_LAUNCHES(vq__gather_elements_gpu);
VQ__CUDA_LAUNCHES(vq__split_gpu);
VQ__CUDA_LAUNCHES(vq__split_grad_gpu);

/* extremum_host.c */
VQ__CUDA_LAUNCHES(vq__arg_gpu);
VQ__CUDA_LAUNCHES(vq__extremum_gpu);
VQ__CUDA_LAUNCHES(vq__extremum_grad_gpu);

/* layout_host.c */
VQ__CUDA_LAUNCHES(vq__expand_gpu);
VQ__CUDA_LAUNCHES(vq__tile_gpu);
VQ__CUDA_LAUNCHES(vq__tile_grad_gpu);
VQ__CUDA_LAUNCHES(vq__pad_gpu);
VQ__CUDA_LAUNCHES(vq__pad_grad_gpu);

/* resize_host.c */
VQ__CUDA_LAUNCHES(vq__resize_gpu);
VQ__CUDA_LAUNCHES(vq__resize_grad_gpu);

/* tfidf_host.c */
VQ__CUDA_LAUNCHES(vq__tfidf_gpu);

/* det_host.c */
VQ__CUDA_LAUNCHES(vq__det_gpu);
VQ__CUDA_LAUNCHES(vq__det_grad_gpu);

/* unpool_host.c */
VQ__CUDA_LAUNCHES(vq__max_unpool_gpu);
VQ__CUDA_LAUNCHES(vq__max_unpool_grad_gpu);

/* dft_host.c */
VQ__CUDA_LAUNCHES(vq__dft_gpu);

/* einsum_host.c */
VQ__CUDA_LAUNCHES(vq__einsum_gpu);

/* cumsum_host.c */
VQ__CUDA_LAUNCHES(vq__cumsum_gpu);

/* rnn_host.c */
VQ__CUDA_LAUNCHES(vq__rnn_gpu);
VQ__CUDA_LAUNCHES(vq__rnn_grad_gpu);

/* dynamic_host.c */
VQ__CUDA_LAUNCHES(vq__nonzero_gpu);
VQ__CUDA_LAUNCHES(vq__top_k_gpu);
VQ__CUDA_LAUNCHES(vq__unique_gpu);
VQ__CUDA_LAUNCHES(vq__compress_gpu);
VQ__CUDA_LAUNCHES(vq__compress_grad_gpu);
VQ__CUDA_LAUNCHES(vq__nms_gpu);

/* shape_value_host.c */
VQ__CUDA_LAUNCHES(vq__shape_gpu);
VQ__CUDA_LAUNCHES(vq__range_gpu);
/* scatter_host.c */
VQ__CUDA_LAUNCHES(vq__scatter_elements_gpu);
VQ__CUDA_LAUNCHES(vq__scatter_nd_gpu);
VQ__CUDA_LAUNCHES(vq__gather_nd_gpu);
/* lrn_host.c */
VQ__CUDA_LAUNCHES(vq__lrn_gpu);

/* sequence_host.c */
VQ__CUDA_LAUNCHES(vq__reverse_sequence_gpu);

/* prod_host.c */
VQ__CUDA_LAUNCHES(vq__reduce_prod_gpu);

/* sample_host.c */
VQ__CUDA_LAUNCHES(vq__grid_sample_gpu);
VQ__CUDA_LAUNCHES(vq__grid_sample_grad_gpu);
VQ__CUDA_LAUNCHES(vq__roi_align_gpu);
VQ__CUDA_LAUNCHES(vq__roi_align_grad_gpu);

#endif
