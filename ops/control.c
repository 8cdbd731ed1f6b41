/* The control-flow op types, cond and while: their slots and attribute
 * schemas live in the registry like every op's, so programs name them,
 * save and load them, and vq_op_signature lists them. They have no kernel:
 * the graph executor runs them (graph/control.c) by pushing the ops of
 * their blocks, so their infer only refuses an imperative call.
 *
 *   cond(Cond, X...) -> Out...   {then_block, else_block, then_outputs,
 *                                 else_outputs}
 *   while(Cond, X...) -> Out...  {body_block, body_inputs, body_outputs,
 *                                 body_cond, max_iters = -1,
 *                                 stack_outputs = []}
 *
 * These names (types, slots, attributes) are a contract: programs built
 * outside this tree use them. */
#include "ops_internal.h"

static const char *const ctl_in[] = {"Cond", "X"};
static const char *const ctl_out[] = {"Out"};

static const vq__attr_spec cond_attrs[] = {
    {"then_block", VQ_ATTR_INT, true, NULL},
    {"else_block", VQ_ATTR_INT, true, NULL},
    {"then_outputs", VQ_ATTR_STRINGS, true, NULL},
    {"else_outputs", VQ_ATTR_STRINGS, true, NULL},
};

static const vq__attr_spec while_attrs[] = {
    {"body_block", VQ_ATTR_INT, true, NULL},
    {"body_inputs", VQ_ATTR_STRINGS, true, NULL},
    {"body_outputs", VQ_ATTR_STRINGS, true, NULL},
    {"body_cond", VQ_ATTR_STRING, true, NULL},
    {"max_iters", VQ_ATTR_INT, false, "-1"},
    /* body vars whose values in every iteration become one more output
     * each, stacked along a new axis 0 (graph.h; graph/control.c) */
    {"stack_outputs", VQ_ATTR_STRINGS, false, NULL},
    /* autodiff's (varq extensions, not part of the contract): the forward
     * loop keeps every iteration's carried inputs; its backward loop runs
     * once per forward iteration, in reverse, with replay_inputs bound to
     * them (graph/control.c) */
    {"save_carries", VQ_ATTR_BOOL, false, "0"},
    {"replay_of", VQ_ATTR_INT, false, "-1"},
    {"replay_inputs", VQ_ATTR_STRINGS, false, NULL},
};

static int control_infer(vq__infer *c)
{
    return vq__op_fail(c->def, "a control-flow op runs only inside a program (vq_exec_run), "
                               "where its blocks are; it has no kernel of its own");
}

const vq__op_def vq__ops_control[] = {
    {.type = "cond",
     .in_slots = ctl_in,
     .nin_slots = 2,
     .out_slots = ctl_out,
     .nout_slots = 1,
     .flags = VQ__VARIADIC_IN | VQ__VARIADIC_OUT | VQ__CONTROL,
     .attrs = cond_attrs,
     .nattrs = 4,
     .infer = control_infer},
    {.type = "while",
     .in_slots = ctl_in,
     .nin_slots = 2,
     .out_slots = ctl_out,
     .nout_slots = 1,
     .flags = VQ__VARIADIC_IN | VQ__VARIADIC_OUT | VQ__CONTROL,
     .attrs = while_attrs,
     .nattrs = 9,
     .infer = control_infer},
    {0},
};
