/* varq training: reverse-mode autodiff over programs, optimizers as program
 * ops, and a few layers that build both a startup program (parameter
 * initialization) and a main program (the model), as Paddle's static graph
 * does.
 *
 * All functions here edit programs: call them from the thread that builds
 * the program, before it runs. Names they create are predictable: the
 * gradient of var x is "x@GRAD"; a linear layer whose output is "h" owns the
 * parameters "h.w" and "h.b"; optimizer state of parameter w is "w@MOMENT1",
 * "w@MOMENT2", "w@STEP" (Adam) or "w@VELOCITY" (momentum); a schedule's
 * rate "lr" counts its steps in "lr@STEP". */
#ifndef VARQ_TRAIN_H
#define VARQ_TRAIN_H

#include <varq/graph.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Appends to block 0 of p the ops computing d loss / d v for every var v
 * that needs a gradient, in reverse order of the forward ops, using each
 * op's gradient maker. A var needs a gradient when it is a floating-point
 * persistable var (a parameter) not listed in no_grad, or is computed from
 * one by ops that have gradients, and the loss depends on it; feeds, labels,
 * integer vars and the vars in no_grad get none. Gradients of a var read by
 * several ops are summed. Each gradient var "v@GRAD" is declared with v's
 * dtype and shape. loss must be a floating-point var with exactly one
 * element. A var of block 0 that kernel ops write more than once (`h =
 * tanh(h)`) gets a name per version, as Paddle renames them: the k-th write
 * but the last writes "h@V<k>" (declared like h; its gradient is
 * "h@V<k>@GRAD"), the readers of that version read it, and the last write
 * keeps the name h, so fetches see what they saw before. Still VQ_ENOSYS:
 * such a var that a cond or while reads or writes, a persistable var
 * written twice, or one updated from values computed from parameters.
 *
 * Through a cond, the gradient is a cond on the same predicate whose two
 * new blocks each recompute their branch (the forward values are gone once
 * the forward cond is done) and differentiate it; a var that the untaken
 * branch does not use gets zeros from it (zeros_like). The vars a branch
 * reads from outside count as the cond's inputs, so a parameter used only
 * inside a branch gets its gradient.
 *
 * Through a while, the forward loop is marked to keep each iteration's
 * carried inputs (save_carries, graph.h), and the gradient is a loop that
 * replays the iterations in reverse (replay_of): each recomputes its
 * iteration from the saved inputs and differentiates it, carrying the
 * gradients of the carried values (from the gradient of the loop's
 * outputs) and a sum for each enclosing var the body reads (parameters
 * used in the body get the sum over iterations). Memory: one iteration's
 * inputs per forward iteration, freed as the backward loop passes it.
 * Control ops nested in a cond's or while's blocks are recomputed with
 * their block and differentiated the same way inside the gradient's
 * block (a while nested in a while keeps and replays its iterations once
 * per outer iteration). Since the recomputation draws its own random
 * numbers, a random op in those blocks that draws from the executor's
 * default generator (neither a seed attribute nor a State input:
 * vq_exec_opts.seed) is VQ_EINVAL naming it; give it a seed attribute.
 *
 * Returns the number of parameters that received a gradient, or a negative
 * error naming the op whose gradient is missing, or whose gradient maker
 * (op_register.h) failed or emitted an op writing a var other than the
 * gradients it was asked for and its temporaries (VQ_EINVAL naming the
 * maker's op type and the var: a parameter or forward value written there
 * would be overwritten by every run). */
VQ_API int vq_append_backward(vq_program *p, const char *loss, const char *const *no_grad,
                              int nno_grad);

/* The update rules (vq_optimizer.kind): torch.optim's SGD, SGD with
 * momentum, and Adam (AdamW with vq_optimizer.decoupled). */
typedef enum vq_optimizer_kind {
    VQ_OPT_SGD = 0,
    VQ_OPT_MOMENTUM,
    VQ_OPT_ADAM,
} vq_optimizer_kind;

/* An optimizer for vq_optimizer_minimize; zero in a field means its
 * default, noted beside it. */
typedef struct vq_optimizer {
    vq_optimizer_kind kind; /* the update rule */
    double learning_rate;   /* the rate, when learning_rate_var is NULL */
    /* NULL, or the name of a float var of block 0 of main with one element
     * ([] or [1]): the learning rate, read by every update when it runs
     * (AdamW's decay included), so it may change from run to run: fed
     * each run, or computed by ops of main that come before the updates
     * (vq_lr_schedule_build's). learning_rate is then ignored. The var may
     * be f32 or f64; a parameter of the other dtype gets it cast
     * ("<var>@f64" or "<var>@f32"). */
    const char *learning_rate_var;
    double mu;       /* momentum; 0 = 0.9 */
    bool nesterov;   /* momentum */
    double beta1;    /* Adam; 0 = 0.9 */
    double beta2;    /* Adam; 0 = 0.999 */
    double epsilon;  /* Adam; 0 = 1e-8 */
    /* Training controls, PyTorch's (all off when zero): */
    double weight_decay; /* L2: wd * param added to its gradient (SGD, momentum,
                          * Adam: torch.optim's weight_decay) */
    bool decoupled;      /* Adam only: AdamW's decay instead, param *= 1 - lr * wd
                          * before the update (torch.optim.AdamW) */
    double clip_value;   /* > 0: every gradient element clamped to [-v, v]
                          * (torch.nn.utils.clip_grad_value_) */
    double clip_norm;    /* > 0: every gradient scaled by min(1, clip_norm /
                          * (global 2-norm + 1e-6)) (clip_grad_norm_) */
    const char *const *parameters; /* NULL: every float persistable var the loss
                                    * depends on; else only these (the rest frozen) */
    int nparameters;               /* entries in parameters */
} vq_optimizer;

/* vq_append_backward(main, loss), then one update op per parameter that
 * received a gradient, appended to main; optimizer state (moments, step
 * count, velocity) is declared persistable in both programs and set to zero
 * by ops appended to startup. Clipping comes first (by value, then by the
 * global norm over every updated gradient), then weight decay, then the
 * update, as with torch's clip_grad_*_ before optimizer.step(). A name in
 * parameters that is not a float persistable var of main is VQ_EINVAL;
 * decoupled with another kind than Adam, or a negative control, too, and
 * a learning_rate_var that is not a float var of one element in main.
 * Returns the number of parameters updated, or a negative error. */
VQ_API int vq_optimizer_minimize(vq_program *main, vq_program *startup, const char *loss,
                                 const vq_optimizer *opt);

/* ---- learning-rate schedules ---- */

/* PyTorch's schedulers (torch.optim.lr_scheduler), as the rate at step t,
 * where t is how many times main ran before (scheduler.step() once after
 * each optimizer step), from t = 0:
 *
 *   VQ_LR_STEP    StepLR(step_size, gamma):
 *                 base_lr * gamma^floor(t / step_size)
 *   VQ_LR_COSINE  CosineAnnealingLR(t_max, eta_min):
 *                 eta_min + (base_lr - eta_min) * (1 + cos(pi t / t_max)) / 2
 *                 (past t_max it rises again, as PyTorch's does)
 *   VQ_LR_LINEAR  LinearLR(start_factor, end_factor, total_iters):
 *                 base_lr * (start_factor + (end_factor - start_factor)
 *                 * min(t, total_iters) / total_iters)
 *   VQ_LR_WARMUP_COSINE
 *                 SequentialLR([LinearLR(start_factor, end_factor, total_iters),
 *                 CosineAnnealingLR(t_max, eta_min)], milestones=[total_iters]):
 *                 LINEAR's rate while t < total_iters, then COSINE's at
 *                 t - total_iters (the cosine starts again from base_lr)
 *
 * PyTorch steps its recursive forms of these; they agree to rounding
 * (tests/reference checks whole training runs against PyTorch). */
typedef enum vq_lr_schedule_kind {
    VQ_LR_STEP = 0,
    VQ_LR_COSINE,
    VQ_LR_LINEAR,
    VQ_LR_WARMUP_COSINE,
} vq_lr_schedule_kind;

/* The numbers are taken as given (no zero-means-default: 0 is a real
 * gamma, eta_min or end_factor); those of other kinds are ignored. */
typedef struct vq_lr_schedule {
    vq_lr_schedule_kind kind; /* which formula (above) */
    double base_lr;      /* the optimizer's lr (PyTorch's initial_lr): finite, >= 0 */
    vq_dtype dtype;      /* the rate's: VQ_F32 (0) or VQ_F64; use the parameters' */
    int64_t step_size;   /* STEP: >= 1 */
    double gamma;        /* STEP: finite, >= 0 */
    int64_t t_max;       /* COSINE, WARMUP_COSINE: >= 1 */
    double eta_min;      /* COSINE, WARMUP_COSINE: finite, >= 0 */
    double start_factor; /* LINEAR, WARMUP_COSINE: in (0, 1] */
    double end_factor;   /* LINEAR, WARMUP_COSINE: in [0, 1] */
    int64_t total_iters; /* LINEAR, WARMUP_COSINE: >= 1 (the warmup's length) */
} vq_lr_schedule;

/* Declares lr_var in main (a scalar of s->dtype, not persistable) and the
 * step counter "<lr_var>@STEP" (i64 [1], persistable) in both programs,
 * set to 0 by an op appended to startup; appends to main one lr_schedule
 * op that writes lr_var from the counter and adds 1 to the counter. Each
 * run of main thus uses the rate of the next step; pass lr_var as the
 * optimizer's learning_rate_var. Call it before vq_optimizer_minimize (the
 * updates must come after the op in main). The counter is saved with the
 * scope, so a checkpoint resumes the schedule where it was. VQ_EINVAL,
 * naming the op and the number, for numbers out of range (nothing is
 * declared then), a kind or dtype not listed, or a name main already
 * declares. */
VQ_API int vq_lr_schedule_build(vq_program *main, vq_program *startup, const char *lr_var,
                                const vq_lr_schedule *s);

/* ---- layers ---- */

/* y = x W + b with W [in, out] and b [out] named "<y>.w" and "<y>.b",
 * declared persistable in both programs and initialized in startup like
 * PyTorch's nn.Linear: uniform in [-1/sqrt(in), 1/sqrt(in)], from `seed`
 * (W) and seed + 1 (b). x must be declared [batch, in] (batch may be -1);
 * y is declared [batch, out] with x's dtype. */
VQ_API int vq_layer_linear(vq_program *main, vq_program *startup, const char *x, const char *y,
                           int64_t out, uint64_t seed);

/* The recurrent layers' options (vq_layer_lstm, vq_layer_gru,
 * vq_layer_rnn); all zero: one layer, one direction, with biases, tanh,
 * and the Reserve output that training reads. */
typedef struct vq_rnn_layer_opts {
    int num_layers;           /* stacked layers; 0 = 1 */
    bool bidirectional;       /* two directions, their outputs side by side */
    bool no_bias;             /* PyTorch's bias=False: no bias_ih, bias_hh */
    const char *nonlinearity; /* vq_layer_rnn: "tanh" (NULL) or "relu" */
    /* true: no "<y>.reserve" output, for a program only run forward (a
     * gradient of it then runs the forward op again to save the cells) */
    bool inference;
} vq_rnn_layer_opts;

/* A PyTorch nn.LSTM over x, sequence-major ([T, batch, in], in known; T
 * and batch may be -1), into y [T, batch, D * hidden] (D = 2 when
 * bidirectional), the last states "<y>.hn" and "<y>.cn" [layers * D,
 * batch, hidden], and unless opts->inference "<y>.reserve" (what the
 * gradient reads: the cells of every step). The initial states are
 * zeros. The parameters are PyTorch's, named "<y>.<PyTorch's name>"
 * ("<y>.weight_ih_l0", "<y>.weight_hh_l0", "<y>.bias_ih_l0",
 * "<y>.bias_hh_l0", then "..._l0_reverse", "..._l1", ...) with PyTorch's
 * shapes (weight_ih_l0 [4 hidden, in], gates i, f, g, o), so that a
 * state_dict's tensors load as they are; declared persistable in both
 * programs and initialized in startup as PyTorch does: uniform in
 * [-1/sqrt(hidden), 1/sqrt(hidden)], parameter j (in that order) from
 * seed + j. One lstm op (ops/cpu/rnn.c) runs every layer. opts may be
 * NULL (the defaults). VQ_EINVAL for a bad argument, an x of another
 * rank or an unknown in, or a name already declared. Like every builder
 * call: not thread-safe on the same programs. */
VQ_API int vq_layer_lstm(vq_program *main, vq_program *startup, const char *x, const char *y,
                         int64_t hidden, const vq_rnn_layer_opts *opts, uint64_t seed);

/* The same for PyTorch's nn.GRU (gates r, z, n; no "<y>.cn"). */
VQ_API int vq_layer_gru(vq_program *main, vq_program *startup, const char *x, const char *y,
                        int64_t hidden, const vq_rnn_layer_opts *opts, uint64_t seed);

/* The same for PyTorch's nn.RNN (one gate; opts->nonlinearity; no
 * "<y>.cn"). */
VQ_API int vq_layer_rnn(vq_program *main, vq_program *startup, const char *x, const char *y,
                        int64_t hidden, const vq_rnn_layer_opts *opts, uint64_t seed);

/* y = act(x) for act "relu", "sigmoid", "tanh" or "softmax"; y declared
 * like x. */
VQ_API int vq_layer_activation(vq_program *main, const char *act, const char *x, const char *y);

/* loss = mean((pred - label)^2) over all elements, a scalar. */
VQ_API int vq_layer_mse_loss(vq_program *main, const char *pred, const char *label,
                             const char *loss);

/* probs = softmax(logits) and loss = mean over the batch of -log probs[label]
 * (label: integers [batch] or [batch, 1]), a scalar; computed by the fused,
 * stable softmax_cross_entropy op. */
VQ_API int vq_layer_softmax_cross_entropy(vq_program *main, const char *logits,
                                          const char *label, const char *probs,
                                          const char *loss);

/* A generator state for the random ops of main: var `name`, i64 [2] =
 * (seed, counter), declared persistable in both programs, set to (seed, 0)
 * by ops appended to startup (with startup-only vars "<name>.seed" and
 * "<name>.counter"). Random ops given it as their State input (dropout,
 * uniform_random, gaussian_random; ops/cpu/init.c) draw counters from it
 * and write it back advanced, so each run of main draws new numbers, the
 * engine runs the ops that share it in program order (the numbers do not
 * depend on the worker count or device), and running startup again (or
 * setting the var in the scope back to (seed, 0)) replays the same
 * numbers. VQ_EINVAL if name is already declared in either program. */
VQ_API int vq_layer_rng_state(vq_program *main, vq_program *startup, const char *name,
                              uint64_t seed);

/* y = dropout(x) with probability p in [0, 1) (PyTorch's nn.Dropout,
 * training mode): each element is kept with probability 1 - p and scaled
 * by 1 / (1 - p), else 0. y and its mask "<y>.mask" (the factor of each
 * element, 0 or 1 / (1 - p); the gradient is dy * mask) are declared like
 * x. state names a var from vq_layer_rng_state: the op reads and advances
 * it, so every run drops other elements, and resetting the state replays
 * them. state NULL: the op draws from the executor's default generator
 * (vq_exec_opts.seed): every run drops other elements too, the same
 * sequence for the same seed. For evaluation, leave the layer out, or use
 * p = 0 (y = x). */
VQ_API int vq_layer_dropout(vq_program *main, const char *x, const char *y, double p,
                            const char *state);

#ifdef __cplusplus
}
#endif
#endif
