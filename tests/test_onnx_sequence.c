/* ONNX sequences and optionals (onnx/t_sequence.c, the unrolled Loop of
 * onnx/t_control.c) on the paths ONNX's conformance cases leave out:
 * SplitToSequence and ConcatFromSequence against plain loops over the
 * input, a sequence grown in a Loop whose trip count is offered at import
 * (graph output NAME[i] per element), on the CPU and the emulated GPU; and
 * the errors for what import cannot resolve: a trip count or a position
 * known only at run time, a sequence input not offered, a sequence where
 * a tensor is needed, an If giving sequences on a run-time condition. */
#include <varq/varq.h>

#include "onnx.pb-c.h"

#include <criterion/criterion.h>
#include <string.h>
#include "leakcheck.h"
#include "onnx_models.h"

TestSuite(onnx_sequence, .fini = leak_check);

#define F32 ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT
#define I64 ONNX__TENSOR_PROTO__DATA_TYPE__INT64
#define BOOL ONNX__TENSOR_PROTO__DATA_TYPE__BOOL

static void graph_io(Onnx__ValueInfoProto ***arr, size_t *n, const char *name, int32_t elem,
                     int ndim, const int64_t *dims)
{
    GROW(*arr, *n);
    (*arr)[(*n)++] = value_info(name, elem, ndim, dims);
}

/* A value info of a sequence of float tensors of rank ndim. */
static Onnx__ValueInfoProto *seq_info(const char *name, int ndim, const int64_t *dims)
{
    Onnx__ValueInfoProto *vi = value_info(name, F32, ndim, dims);
    Onnx__TypeProto *seq = calloc(1, sizeof *seq);
    onnx__type_proto__init(seq);
    seq->value_case = ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE;
    seq->sequence_type = calloc(1, sizeof *seq->sequence_type);
    onnx__type_proto__sequence__init(seq->sequence_type);
    seq->sequence_type->elem_type = vi->type;
    vi->type = seq;
    return vi;
}

/* t on the host (released when copied). */
static vq_tensor *host_of(vq_engine *e, vq_tensor *t)
{
    if (vq_tensor_device(t).kind == VQ_DEV_CPU)
        return t;
    vq_tensor *h;
    cr_assert_eq(vq_tensor_copy_to(e, t, (vq_ctx){VQ_DEV_CPU, 0}, &h), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_tensor_wait(h), 0, "%s", vq_errmsg());
    vq_tensor_release(t);
    return h;
}

/* Imports buf with offers (none: NULL), expecting rc and, when rc < 0, a
 * message holding each of want[]. */
static vq_program *import_expect(Onnx__ModelProto *m, vq_scope *s, const vq_onnx_value *offers,
                                 int n, int rc, const char *const *want)
{
    size_t len;
    uint8_t *buf = pack(m, &len);
    vq_program *p = NULL;
    vq_onnx_opts o = {.values = offers, .nvalues = n};
    int got = vq_program_from_onnx_opts(&p, s, buf, len, &o);
    free(buf);
    cr_assert_eq(got, rc, "import: %d (%s), expected %d", got, got ? vq_errmsg() : "", rc);
    for (int i = 0; rc < 0 && want && want[i]; i++)
        cr_assert(strstr(vq_errmsg(), want[i]), "\"%s\" lacks \"%s\"", vq_errmsg(), want[i]);
    return p;
}

/* A threaded engine for run_check, on which the emulated GPU is there;
 * freed after the scopes whose tensors its runs used (their last release
 * pushes on it: engine.h). */
static vq_engine *engine_new(void)
{
    setenv("VARQ_GPU_BACKEND", "emulated", 0);
    vq_engine *e;
    vq_engine_opts eo = {.kind = VQ_ENGINE_THREADED, .cpu_workers = 2};
    cr_assert_eq(vq_engine_new(&e, &eo), 0, "%s", vq_errmsg());
    return e;
}

/* Fetches names[0..n) with x fed, on the CPU (gpu 0) or the emulated GPU,
 * checking each against want[k] (of shape shapes[k], rank ranks[k]). */
static void run_check(vq_engine *e, vq_program *p, vq_scope *s, const char *feed, vq_tensor *x,
                      const char *const *names, int n, const float *const *want,
                      const int64_t (*shapes)[2], const int *ranks)
{
    for (int gpu = 0; gpu < 2; gpu++) {
        vq_exec *ex;
        vq_exec_opts xo = {.device = {gpu ? VQ_DEV_GPU : VQ_DEV_CPU, 0}};
        cr_assert_eq(vq_exec_new(&ex, e, &xo), 0, "%s", vq_errmsg());
        vq_tensor *dx;
        cr_assert_eq(vq_tensor_copy_to(e, x, xo.device, &dx), 0, "%s", vq_errmsg());
        vq_feed f = {feed, dx};
        vq_fetch fo[8];
        for (int k = 0; k < n; k++)
            fo[k] = (vq_fetch){names[k], NULL};
        cr_assert_eq(vq_exec_run(ex, p, s, &f, 1, fo, n), 0, "gpu %d: %s", gpu, vq_errmsg());
        for (int k = 0; k < n; k++) {
            vq_tensor *h = host_of(e, fo[k].tensor);
            cr_assert_eq(vq_tensor_ndim(h), ranks[k], "%s: rank", names[k]);
            for (int d = 0; d < ranks[k]; d++)
                cr_assert_eq(vq_tensor_shape(h)[d], shapes[k][d], "%s: dim %d", names[k], d);
            const float *got = vq_tensor_data(h);
            for (int64_t i = 0; i < vq_tensor_numel(h); i++)
                cr_assert_float_eq(got[i], want[k][i], 1e-6, "gpu %d %s[%lld]", gpu, names[k],
                                   (long long)i);
            vq_tensor_release(h);
        }
        vq_tensor_release(dx);
        vq_exec_free(ex);
    }
}

/* x [2, 5]: SplitToSequence along axis 1 in parts [2, 3] (split an
 * initializer), joined again by ConcatFromSequence (y == x); along axis 0
 * in parts of 1 without keepdims ([5] each), stacked on a new axis 0
 * (z == x); SequenceAt(-1) of the first (the [2, 3] part) and
 * SequenceErase's and SequenceLength's view of it. */
Test(onnx_sequence, split_to_sequence_and_concat_from_sequence_undo_each_other)
{
    Onnx__ModelProto *m = model_new(13);
    add_input(m, "x", 2, (int64_t[]){2, 5});
    add_init_ints(m, "sizes", 2, (const int64_t[]){2, 3});
    add_init_of(m, "last", I64, sizeof(int64_t), 0, NULL, (const int64_t[]){-1});
    attr_int(add_node(m, "SplitToSequence", "split1", NAMES("x", "sizes"), NAMES("s1")), "axis", 1);
    Onnx__NodeProto *n = add_node(m, "SplitToSequence", "split0", NAMES("x"), NAMES("s0"));
    attr_int(n, "keepdims", 0);
    attr_int(add_node(m, "ConcatFromSequence", "cat", NAMES("s1"), NAMES("y")), "axis", 1);
    n = add_node(m, "ConcatFromSequence", "stack", NAMES("s0"), NAMES("z"));
    attr_int(n, "new_axis", 1);
    add_node(m, "SequenceAt", "at", NAMES("s1", "last"), NAMES("tail"));
    add_node(m, "SequenceErase", "erase", NAMES("s1"), NAMES("head"));
    add_node(m, "SequenceLength", "len", NAMES("head"), NAMES("n"));
    add_outputs(m, NAMES("y", "z", "tail", "head", "n"));
    vq_scope *s;
    cr_assert_eq(vq_scope_new(&s), 0);
    vq_program *p = import_expect(m, s, NULL, 0, 0, NULL);
    /* head is the sequence of the [2, 2] part only: head[0], no head[1] */
    vq_dtype dt;
    int nd;
    int64_t shape[8];
    bool pers;
    cr_assert_eq(vq_program_var_info(p, "head[0]", &dt, &nd, shape, &pers), 0);
    cr_assert_neq(vq_program_var_info(p, "head[1]", &dt, &nd, shape, &pers), 0);
    float xv[10], tail[6], head[4];
    for (int i = 0; i < 10; i++)
        xv[i] = (float)(i * 7 % 10) - 4.5f;
    for (int r = 0; r < 2; r++) {
        for (int c = 0; c < 3; c++)
            tail[r * 3 + c] = xv[r * 5 + 2 + c];
        for (int c = 0; c < 2; c++)
            head[r * 2 + c] = xv[r * 5 + c];
    }
    vq_tensor *x;
    cr_assert_eq(vq_tensor_from(&x, VQ_F32, 2, (int64_t[]){2, 5}, xv), 0);
    const int64_t shapes[4][2] = {{2, 5}, {2, 5}, {2, 3}, {2, 2}};
    vq_engine *e = engine_new();
    run_check(e, p, s, "x", x, NAMES("y", "z", "tail", "head[0]"), 4,
              (const float *const[]){xv, xv, tail, head}, shapes, (const int[]){2, 2, 2, 2});
    /* SequenceLength is known at import: a persistable var */
    vq_tensor *nv = vq_scope_get(s, "n");
    cr_assert(nv && *(const int64_t *)vq_tensor_data(nv) == 1);
    vq_tensor_release(x);
    vq_program_free(p);
    vq_scope_free(s);
    vq_engine_free(e);
    onnx__model_proto__free_unpacked(m, NULL);
}

/* seq = SequenceEmpty; Loop M times: seq = SequenceInsert(seq, x * i);
 * y = ConcatFromSequence(seq, axis 0, new_axis): [M, 3] with row i x * i;
 * the sequence is also output s (s[0] ... s[M-1]). */
static Onnx__ModelProto *growing_loop(void)
{
    Onnx__ModelProto *m = model_new(13);
    add_input(m, "x", 1, (int64_t[]){3});
    graph_io(&m->graph->input, &m->graph->n_input, "M", I64, 0, NULL);
    add_node(m, "SequenceEmpty", "empty", NULL, NAMES("s0"));
    Onnx__GraphProto *b = subgraph("body");
    graph_io(&b->input, &b->n_input, "i", I64, 0, NULL);
    graph_io(&b->input, &b->n_input, "c_in", BOOL, 0, NULL);
    GROW(b->input, b->n_input);
    b->input[b->n_input++] = seq_info("s_in", 1, (int64_t[]){3});
    graph_node(b, "Identity", NAMES("c_in"), NAMES("c_out"));
    attr_int(graph_node(b, "Cast", NAMES("i"), NAMES("fi")), "to", F32);
    graph_node(b, "Mul", NAMES("x", "fi"), NAMES("row"));
    graph_node(b, "SequenceInsert", NAMES("s_in", "row"), NAMES("s_out"));
    Onnx__ModelProto bm = {.graph = b};
    add_outputs(&bm, NAMES("c_out", "s_out"));
    attr_graph(add_node(m, "Loop", "grow", NAMES("M", "", "s0"), NAMES("s")), "body", b);
    Onnx__NodeProto *n = add_node(m, "ConcatFromSequence", "stack", NAMES("s"), NAMES("y"));
    attr_int(n, "new_axis", 1);
    add_outputs(m, NAMES("y", "s"));
    return m;
}

Test(onnx_sequence, a_loop_growing_a_sequence_unrolls_over_a_trip_count_offered_at_import)
{
    const float xv[3] = {1.5f, -2, 0.25f};
    for (int64_t mv = 0; mv <= 4; mv += 4) {
        vq_engine *e = NULL;
        Onnx__ModelProto *m = growing_loop();
        vq_scope *s;
        cr_assert_eq(vq_scope_new(&s), 0);
        vq_tensor *tm, *x;
        cr_assert_eq(vq_tensor_from(&tm, VQ_I64, 0, NULL, &mv), 0);
        cr_assert_eq(vq_tensor_from(&x, VQ_F32, 1, (int64_t[]){3}, xv), 0);
        vq_onnx_value offer = {.name = "M", .tensor = tm};
        if (mv == 0) {
            /* no element to stack: the concat of an empty sequence fails,
             * naming the node */
            import_expect(m, s, &offer, 1, VQ_EINVAL,
                          NAMES("ConcatFromSequence \"stack\"", "empty sequence"));
        } else {
            vq_program *p = import_expect(m, s, &offer, 1, 0, NULL);
            float y[12];
            for (int i = 0; i < 4; i++)
                for (int j = 0; j < 3; j++)
                    y[i * 3 + j] = xv[j] * (float)i;
            const int64_t shapes[3][2] = {{4, 3}, {3}, {3}};
            e = engine_new();
            run_check(e, p, s, "x", x, NAMES("y", "s[0]", "s[3]"), 3,
                      (const float *const[]){y, y, y + 9}, shapes, (const int[]){2, 1, 1});
            vq_dtype dt;
            int nd;
            int64_t shape[8];
            bool pers;
            cr_assert_neq(vq_program_var_info(p, "s[4]", &dt, &nd, shape, &pers), 0);
            vq_program_free(p);
        }
        vq_tensor_release(tm);
        vq_tensor_release(x);
        vq_scope_free(s);
        vq_engine_free(e); /* after the scope */
        onnx__model_proto__free_unpacked(m, NULL);
    }
}

Test(onnx_sequence, a_sequence_grown_over_a_run_time_trip_count_is_an_error_naming_the_loop)
{
    Onnx__ModelProto *m = growing_loop();
    vq_scope *s;
    cr_assert_eq(vq_scope_new(&s), 0);
    import_expect(m, s, NULL, 0, VQ_ENOSYS,
                  NAMES("Loop \"grow\"", "carried value 0 is a sequence",
                        "trip count M is known only at run time"));
    vq_scope_free(s);
    onnx__model_proto__free_unpacked(m, NULL);
}

/* A model whose graph input "q" is a sequence of [2] floats, read by op
 * (SequenceAt with position input "pos", or Add with itself). */
static Onnx__ModelProto *seq_input_model(const char *op)
{
    Onnx__ModelProto *m = model_new(13);
    GROW(m->graph->input, m->graph->n_input);
    m->graph->input[m->graph->n_input++] = seq_info("q", 1, (int64_t[]){2});
    graph_io(&m->graph->input, &m->graph->n_input, "pos", I64, 0, NULL);
    if (!strcmp(op, "SequenceAt"))
        add_node(m, op, "at", NAMES("q", "pos"), NAMES("y"));
    else
        add_node(m, op, "add", NAMES("q", "q"), NAMES("y"));
    add_output(m, "y");
    return m;
}

Test(onnx_sequence, sequences_import_cannot_resolve_are_errors_naming_the_node)
{
    vq_scope *s;
    cr_assert_eq(vq_scope_new(&s), 0);
    vq_tensor *e0, *e1, *pos;
    int64_t pv = 1;
    cr_assert_eq(vq_tensor_from(&e0, VQ_F32, 1, (int64_t[]){2}, (const float[]){1, 2}), 0);
    cr_assert_eq(vq_tensor_from(&e1, VQ_F32, 1, (int64_t[]){2}, (const float[]){3, 4}), 0);
    cr_assert_eq(vq_tensor_from(&pos, VQ_I64, 0, NULL, &pv), 0);
    vq_tensor *elems[2] = {e0, e1};
    vq_onnx_value seq = {.name = "q", .sequence = true, .nelems = 2, .elems = elems};
    vq_onnx_value both[2] = {seq, {.name = "pos", .tensor = pos}};

    /* a sequence input not offered: its length is unknown */
    Onnx__ModelProto *m = seq_input_model("SequenceAt");
    import_expect(m, s, NULL, 0, VQ_ENOSYS,
                  NAMES("graph input \"q\" is a sequence", "offered", "q[0]"));
    /* offered, but the position is known only at run time */
    import_expect(m, s, &seq, 1, VQ_ENOSYS,
                  NAMES("SequenceAt \"at\"", "position is known only at run time"));
    /* both offered: q[0] and q[1] are feeds, y is element 1 */
    vq_program *p = import_expect(m, s, both, 2, 0, NULL);
    struct run r = run_new();
    vq_feed feeds[3] = {{"q[0]", e0}, {"q[1]", e1}, {"pos", pos}};
    vq_fetch f = {"y", NULL};
    cr_assert_eq(vq_exec_run(r.ex, p, s, feeds, 3, &f, 1), 0, "%s", vq_errmsg());
    cr_assert_float_eq(((const float *)vq_tensor_data(f.tensor))[1], 4.0f, 0);
    vq_tensor_release(f.tensor);
    vq_program_free(p);
    /* out of range */
    pv = 2;
    vq_tensor *far;
    cr_assert_eq(vq_tensor_from(&far, VQ_I64, 0, NULL, &pv), 0);
    both[1].tensor = far;
    import_expect(m, s, both, 2, VQ_EINVAL, NAMES("position 2 is out of the sequence's range"));
    vq_tensor_release(far);
    onnx__model_proto__free_unpacked(m, NULL);

    /* a sequence where a tensor is needed */
    m = seq_input_model("Add");
    import_expect(m, s, &seq, 1, VQ_EINVAL,
                  NAMES("Add \"add\"", "input 0 \"q\" is a sequence; the op takes a tensor"));
    onnx__model_proto__free_unpacked(m, NULL);

    vq_tensor_release(e0);
    vq_tensor_release(e1);
    vq_tensor_release(pos);
    vq_scope_free(s);
    run_free(&r);
}

/* If(c) giving SequenceConstruct(x) or SequenceConstruct(x, x): with c fed
 * at run time, an error naming the If; with c offered, the taken branch's
 * sequence (out[1] exists only for the else branch). */
Test(onnx_sequence, an_if_giving_sequences_needs_its_condition_at_import)
{
    Onnx__ModelProto *m = model_new(13);
    add_input(m, "x", 1, (int64_t[]){2});
    graph_io(&m->graph->input, &m->graph->n_input, "c", BOOL, 0, NULL);
    Onnx__GraphProto *g[2] = {subgraph("then"), subgraph("else")};
    graph_node(g[0], "SequenceConstruct", NAMES("x"), NAMES("t"));
    graph_node(g[1], "SequenceConstruct", NAMES("x", "x"), NAMES("t2"));
    Onnx__ModelProto bm0 = {.graph = g[0]}, bm1 = {.graph = g[1]};
    add_outputs(&bm0, NAMES("t"));
    add_outputs(&bm1, NAMES("t2"));
    Onnx__NodeProto *n = add_node(m, "If", "pick", NAMES("c"), NAMES("out"));
    attr_graph(n, "then_branch", g[0]);
    attr_graph(n, "else_branch", g[1]);
    add_outputs(m, NAMES("out"));
    vq_scope *s;
    cr_assert_eq(vq_scope_new(&s), 0);
    import_expect(m, s, NULL, 0, VQ_ENOSYS,
                  NAMES("If \"pick\"", "output 0 is a sequence", "known only at run time"));
    for (int c = 0; c < 2; c++) {
        vq_tensor *tc;
        unsigned char cv = (unsigned char)c;
        cr_assert_eq(vq_tensor_from(&tc, VQ_BOOL, 0, NULL, &cv), 0);
        vq_onnx_value offer = {.name = "c", .tensor = tc};
        vq_program *p = import_expect(m, s, &offer, 1, 0, NULL);
        vq_dtype dt;
        int nd;
        int64_t shape[8];
        bool pers;
        cr_assert_eq(vq_program_var_info(p, "out[0]", &dt, &nd, shape, &pers), 0);
        cr_assert_eq(vq_program_var_info(p, "out[1]", &dt, &nd, shape, &pers) == 0, c == 0);
        vq_program_free(p);
        vq_tensor_release(tc);
    }
    vq_scope_free(s);
    onnx__model_proto__free_unpacked(m, NULL);
}
