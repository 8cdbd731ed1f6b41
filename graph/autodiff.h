/* Between autodiff.c (vq_append_backward: the reverse pass over a block)
 * and autodiff_control.c (the backward of cond and while ops, which runs
 * nested passes over their blocks): a pass's state and the calls each
 * makes of the other. Private to graph/. */
#ifndef VARQ_GRAPH_AUTODIFF_H
#define VARQ_GRAPH_AUTODIFF_H

#include "graph_internal.h"

static inline bool is_float(vq_dtype dt)
{
    return dt == VQ_F32 || dt == VQ_F64;
}

static inline bool is_control(const vq__pop *op)
{
    return op->def && (op->def->flags & VQ__CONTROL);
}

/* Declares name in block with var v's dtype and shape. */
static inline int declare_like(vq_program *p, int block, const char *name, int v, bool persistable)
{
    vq__pvar d = p->vars[v]; /* copy: adding a var may move the table */
    return vq_program_add_var(p, block, name, d.dtype, d.ndim, d.shape, persistable);
}

struct grad_names {
    char **part; /* names of the partial gradients emitted so far */
    int nparts, expected;
    bool final; /* the summed gradient exists */
    bool alias; /* ... under the name of its single part (part[0]) */
};

/* One reverse pass: the forward ops fwd (program op indices, in order) of
 * one block, differentiated into block `block`. Block 0's pass is the
 * program's; a cond's backward runs one pass per branch, into a block of
 * its own, over a copy of the branch's ops. Gradient names end in suffix
 * ("" for block 0, "@B<n>" in block n) so that passes never clash. */
struct bw {
    vq_program *p;
    int block;
    const char *suffix;
    int *fwd, nfwd;
    int nvars; /* the arrays below cover vars 0..nvars-1 */
    bool *requires_grad, *needed;
    struct grad_names *g;
    int err; /* emit_op's first failure */
    /* the gradient names the maker being called must write (din), and
     * whether it wrote each: an input it leaves alone gets no gradient */
    const char *const *want;
    const char *maker;   /* the forward op type whose gradient maker runs */
    const int *want_var; /* the input each want[] is the gradient of */
    bool *wrote;
    int nwant;
    /* the temporaries handed to the maker being called (vq_op_grad_temp),
     * declared when an op it emits first writes them; freed when it
     * returns. ntemps_made numbers them across the whole pass. */
    char **temps;
    int ntemps, temps_cap, ntemps_made;
};

/* A pass over nfwd forward ops of p into block `block` (arrays zeroed,
 * fwd to be filled), freed by vq__bw_free. 0 or VQ_ENOMEM. */
int vq__bw_alloc(struct bw *b, vq_program *p, int block, const char *suffix, int nfwd);
void vq__bw_free(struct bw *b);
/* The reverse loop of pass b (autodiff.c). */
int vq__bw_ops(struct bw *b);
/* The vars an op reads, as the executor finds them (*out malloc'd). */
int vq__op_reads(const vq_program *p, const vq__pop *op, int **out, int *n);
/* Var v's partial gradients summed into its gradient, once every part is
 * there (b->g[v].final says whether one exists). */
int vq__bw_finalize(struct bw *b, int v);
/* The name of v's summed gradient in pass b (malloc'd; NULL: no memory). */
char *vq__bw_final_name(const struct bw *b, int v);
/* Records name as one more partial gradient of v. */
int vq__bw_add_part(struct bw *b, int v, const char *name);

/* The backward of cond / while op k of pass b (autodiff_control.c): reads
 * (nreads) are what the op reads (vq__op_reads), din the names of their
 * wanted gradients (NULL: none), dout those of its outputs' gradients. */
int vq__cond_backward(struct bw *b, int k, const int *reads, int nreads, const char **din,
                      const char *const *dout);
int vq__while_backward(struct bw *b, int k, const int *reads, int nreads, const char **din,
                       const char *const *dout);

#endif
