/* The dist module in a build without MPI (meson -Dmpi=disabled, or no MPI
 * found): include/varq/dist.h's functions exist and say why they cannot
 * work, so programs link the same either way. */
#include <varq/dist.h>

#include "engine_services.h" /* vq__fail */

static int no_mpi(const char *fn)
{
    return vq__fail(VQ_ENOSYS, "%s: varq was built without MPI (install libopenmpi-dev and "
                               "configure with -Dmpi=auto or enabled)",
                    fn);
}

VQ_API int vq_dist_new(vq_dist **out, vq_engine *e, const void *comm)
{
    (void)e, (void)comm;
    if (out)
        *out = NULL;
    return no_mpi("vq_dist_new");
}

VQ_API int vq_dist_new_opts(vq_dist **out, vq_engine *e, const vq_dist_opts *opts)
{
    (void)e, (void)opts;
    if (out)
        *out = NULL;
    return no_mpi("vq_dist_new_opts");
}

VQ_API int vq_dist_rank(const vq_dist *d) { (void)d; return -1; }
VQ_API int vq_dist_size(const vq_dist *d) { (void)d; return -1; }
VQ_API int vq_dist_id(const vq_dist *d) { (void)d; return -1; }
VQ_API int vq_dist_free(vq_dist *d) { (void)d; return 0; }

VQ_API int vq_dist_allreduce(vq_dist *d, vq_tensor *in, vq_tensor *out, vq_reduce_op op)
{
    (void)d, (void)in, (void)out, (void)op;
    return no_mpi("vq_dist_allreduce");
}

VQ_API int vq_dist_broadcast(vq_dist *d, vq_tensor *t, int root)
{
    (void)d, (void)t, (void)root;
    return no_mpi("vq_dist_broadcast");
}

VQ_API int vq_dist_allgather(vq_dist *d, vq_tensor *in, vq_tensor *out)
{
    (void)d, (void)in, (void)out;
    return no_mpi("vq_dist_allgather");
}

VQ_API int vq_dist_reduce_scatter(vq_dist *d, vq_tensor *in, vq_tensor *out, vq_reduce_op op)
{
    (void)d, (void)in, (void)out, (void)op;
    return no_mpi("vq_dist_reduce_scatter");
}

VQ_API int vq_dist_send(vq_dist *d, vq_tensor *t, int dest, int tag)
{
    (void)d, (void)t, (void)dest, (void)tag;
    return no_mpi("vq_dist_send");
}

VQ_API int vq_dist_recv(vq_dist *d, vq_tensor *t, int src, int tag)
{
    (void)d, (void)t, (void)src, (void)tag;
    return no_mpi("vq_dist_recv");
}

VQ_API int vq_dist_program_add(vq_program *main, vq_program *startup, vq_dist *d,
                               const char *type, const char *const *in,
                               const char *const *out, int n, const vq_attr *attrs,
                               int nattrs)
{
    (void)main, (void)startup, (void)d, (void)type, (void)in, (void)out, (void)n;
    (void)attrs, (void)nattrs;
    return no_mpi("vq_dist_program_add");
}

VQ_API int vq_dist_data_parallel(vq_program *main, vq_program *startup, vq_dist *d,
                                 const vq_dist_dp_opts *opts)
{
    (void)main, (void)startup, (void)d, (void)opts;
    return no_mpi("vq_dist_data_parallel");
}
