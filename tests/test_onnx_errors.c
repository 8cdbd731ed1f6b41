/* The ONNX importer's errors about ops it does not translate: one error
 * lists every such op type of the model, in its graph and its subgraphs,
 * with its domain, its count and its first node, bounded however many
 * types a model names; vq_onnx_ops_read gives the same census to callers
 * (`varq onnx-ops MODEL.onnx`, tested in tests/test_cli.c). A model of
 * translated ops imports as before. */
#include <varq/varq.h>

#include "onnx.pb-c.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "leakcheck.h"
#include "onnx_models.h"

TestSuite(onnx_errors, .fini = leak_check);

/* Imports m (then freed) and expects VQ_ENOSYS, no program and the scope
 * untouched; returns vq_errmsg() copied (the caller frees it). */
static char *import_refused(Onnx__ModelProto *m)
{
    size_t len;
    uint8_t *buf = pack(m, &len);
    vq_scope *s;
    cr_assert_eq(vq_scope_new(&s), 0);
    vq_program *p = (vq_program *)buf; /* must become NULL */
    int rc = vq_program_from_onnx(&p, s, buf, len);
    cr_assert_eq(rc, VQ_ENOSYS, "rc %d: %s", rc, vq_errmsg());
    cr_assert_null(p);
    cr_assert_eq(vq_scope_count(s), 0, "the scope is left as it was");
    vq_scope_free(s);
    free(buf);
    onnx__model_proto__free_unpacked(m, NULL);
    char *msg = strdup(vq_errmsg());
    cr_assert_not_null(msg);
    return msg;
}

static void unname(Onnx__NodeProto *n)
{
    free(n->name);
    n->name = NULL;
}

/* x -> Relu -> StringNormalizer "nz", StringNormalizer (unnamed, output "nz2"), a Loop
 * "loop" whose body holds an unnamed StringSplit (output "v"), and a Foo of
 * domain com.example: three types varq does not translate, StringNormalizer twice,
 * StringSplit only inside the body. */
static Onnx__ModelProto *three_unsupported(void)
{
    Onnx__ModelProto *m = model_new(17);
    add_input(m, "x", 1, (int64_t[]){4});
    add_node(m, "Relu", "relu", NAMES("x"), NAMES("a"));
    add_node(m, "StringNormalizer", "nz", NAMES("a"), NAMES("nz1"));
    unname(add_node(m, "StringNormalizer", "", NAMES("a"), NAMES("nz2")));
    Onnx__GraphProto *body = subgraph("body");
    unname(graph_node(body, "StringSplit", NAMES("a", "k"), NAMES("v", "i")));
    graph_node(body, "Identity", NAMES("c"), NAMES("c2"));
    Onnx__NodeProto *loop = add_node(m, "Loop", "loop", NAMES("", "cond"), NAMES("l"));
    attr_graph(loop, "body", body);
    Onnx__NodeProto *foo = add_node(m, "Foo", "", NAMES("a"), NAMES("f"));
    unname(foo);
    foo->domain = strdup("com.example");
    add_output(m, "a");
    return m;
}

Test(onnx_errors, every_unsupported_type_is_listed_with_its_count_and_first_node)
{
    char *msg = import_refused(three_unsupported());
    const char *want[] = {
        "onnx: the model (opset 17 of ai.onnx) uses 3 op types that varq does not translate: ",
        "StringNormalizer (2 nodes, the first: node 1 \"nz\")",
        "StringSplit (1 node: node 0 (output \"v\") in body of node 3 (Loop \"loop\"))",
        "Foo of domain com.example (1 node: node 4 (output \"f\"); varq reads only the default "
        "domain ai.onnx and ai.onnx.preview.training)",
        "`varq onnx-ops` lists the ops varq translates, `varq onnx-ops MODEL.onnx` every op of "
        "the model",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        cr_assert(strstr(msg, want[i]), "\"%s\" not in: %s", want[i], msg);
    cr_assert_null(strstr(msg, "Relu"), "a translated op is not listed: %s", msg);
    cr_assert_null(strstr(msg, "Identity"), "%s", msg);
    free(msg);
}

Test(onnx_errors, the_census_counts_every_type_of_every_graph)
{
    Onnx__ModelProto *m = three_unsupported();
    size_t len;
    uint8_t *buf = pack(m, &len);
    vq_onnx_ops ops;
    cr_assert_eq(vq_onnx_ops_read(&ops, buf, len), 0, "%s", vq_errmsg());
    /* by domain ("" first), then type */
    const struct {
        const char *domain, *type;
        int64_t count;
        bool supported;
        const char *first;
    } want[] = {
        {"", "Identity", 1, true, "node 1 \"Identity\" in body of node 3 (Loop \"loop\")"},
        {"", "Loop", 1, true, "node 3 \"loop\""},
        {"", "Relu", 1, true, "node 0 \"relu\""},
        {"", "StringNormalizer", 2, false, "node 1 \"nz\""},
        {"", "StringSplit", 1, false, "node 0 (output \"v\") in body of node 3 (Loop \"loop\")"},
        {"com.example", "Foo", 1, false, "node 4 (output \"f\")"},
    };
    cr_assert_eq(ops.nops, 6);
    for (int i = 0; i < 6; i++) {
        cr_assert_str_eq(ops.ops[i].domain, want[i].domain, "%d", i);
        cr_assert_str_eq(ops.ops[i].type, want[i].type, "%d", i);
        cr_assert_eq(ops.ops[i].count, want[i].count, "%s", want[i].type);
        cr_assert_eq(ops.ops[i].supported, want[i].supported, "%s", want[i].type);
        cr_assert_str_eq(ops.ops[i].first, want[i].first, "%s", want[i].type);
    }
    vq_onnx_ops_free(&ops);
    cr_assert_eq(ops.nops, 0);
    cr_assert_null(ops.ops);
    vq_onnx_ops_free(NULL);
    cr_assert_eq(vq_onnx_ops_read(&ops, "garbage", 7), VQ_EINVAL);
    cr_assert_eq(ops.nops, 0);
    cr_assert_eq(vq_onnx_ops_read(NULL, buf, len), VQ_EINVAL);
    free(buf);
    /* a node without an op type: the model is malformed */
    free(m->graph->node[0]->op_type);
    m->graph->node[0]->op_type = NULL;
    buf = pack(m, &len);
    cr_assert_eq(vq_onnx_ops_read(&ops, buf, len), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "node 0 has no op type"), "%s", vq_errmsg());
    free(buf);
    onnx__model_proto__free_unpacked(m, NULL);
}

Test(onnx_errors, a_model_of_translated_ops_imports_and_runs_as_before)
{
    Onnx__ModelProto *m = model_new(13);
    add_input(m, "x", 1, (int64_t[]){3});
    add_node(m, "Relu", "relu", NAMES("x"), NAMES("r"));
    Onnx__NodeProto *add = add_node(m, "Add", "add", NAMES("r", "x"), NAMES("y"));
    add->domain = strdup("ai.onnx"); /* the default domain, by name */
    add_output(m, "y");
    struct imported im = import_ok(m);
    struct run r = run_new();
    vq_tensor *tx;
    cr_assert_eq(vq_tensor_from(&tx, VQ_F32, 1, (int64_t[]){3}, (const float[]){-1, 2, 3}), 0);
    vq_feed feed = {"x", tx};
    vq_fetch fetch = {"y", NULL};
    cr_assert_eq(vq_exec_run(r.ex, im.p, im.s, &feed, 1, &fetch, 1), 0, "%s", vq_errmsg());
    const float *y = vq_tensor_data(fetch.tensor);
    cr_assert(y[0] == -1 && y[1] == 4 && y[2] == 6, "%g %g %g", y[0], y[1], y[2]);
    vq_onnx_ops ops;
    cr_assert_eq(vq_onnx_ops_read(&ops, im.buf, im.len), 0, "%s", vq_errmsg());
    cr_assert_eq(ops.nops, 2);
    cr_assert(ops.ops[0].supported && ops.ops[1].supported);
    vq_onnx_ops_free(&ops);
    vq_tensor_release(tx);
    vq_tensor_release(fetch.tensor);
    imported_free(&im);
    run_free(&r);
}

/* An If whose condition is known at import translates the branch it
 * takes only: an op varq lacks in the other one does not refuse the
 * model, as before the census. */
Test(onnx_errors, an_unsupported_op_in_a_branch_not_taken_does_not_refuse_the_model)
{
    Onnx__ModelProto *m = model_new(13);
    add_input(m, "x", 1, (int64_t[]){3});
    const unsigned char yes = 1;
    add_init_of(m, "c", ONNX__TENSOR_PROTO__DATA_TYPE__BOOL, 1, 0, NULL, &yes);
    Onnx__GraphProto *tb = subgraph("then"), *eb = subgraph("else");
    graph_node(tb, "Neg", NAMES("x"), NAMES("t"));
    add_output(&(Onnx__ModelProto){.graph = tb}, "t");
    graph_node(eb, "StringNormalizer", NAMES("x"), NAMES("e"));
    add_output(&(Onnx__ModelProto){.graph = eb}, "e");
    Onnx__NodeProto *n = add_node(m, "If", "branch", NAMES("c"), NAMES("y"));
    attr_graph(n, "then_branch", tb);
    attr_graph(n, "else_branch", eb);
    add_output(m, "y");
    struct imported im = import_ok(m);
    imported_free(&im);
}

/* A model that names 200 types varq lacks, some with names of 10^4 bytes:
 * the message lists at most 32 types and as many as it holds, says how
 * many more, and cuts long names. */
Test(onnx_errors, the_list_is_bounded_for_a_model_of_many_unknown_types)
{
    Onnx__ModelProto *m = model_new(13);
    add_input(m, "x", 1, (int64_t[]){3});
    char *longname = malloc(10001);
    memset(longname, 'Q', 10000);
    longname[10000] = '\0';
    for (int i = 0; i < 200; i++) {
        char type[32], out[32];
        snprintf(type, sizeof type, "Unknown%03d", i);
        snprintf(out, sizeof out, "o%d", i);
        if (i % 50 == 49)
            add_node(m, longname, longname, NAMES("x"), NAMES(out));
        else
            add_node(m, type, type, NAMES("x"), NAMES(out));
    }
    free(longname);
    char *msg = import_refused(m);
    size_t n = strlen(msg);
    cr_assert_lt(n, 2048, "%zu bytes", n);
    cr_assert(strstr(msg, "uses 197 op types that varq does not translate"), "%s", msg);
    int listed = 0;
    for (const char *p = msg; (p = strstr(p, " (1 node: ")) != NULL; p++)
        listed++;
    for (const char *p = msg; (p = strstr(p, " nodes, the first: ")) != NULL; p++)
        listed++; /* the type of the long name, 4 nodes */
    cr_assert(listed >= 8 && listed <= 32, "%d listed: %s", listed, msg);
    char more[64];
    snprintf(more, sizeof more, ", and %d more. ", 197 - listed);
    cr_assert(strstr(msg, more), "\"%s\" not in: %s", more, msg);
    cr_assert(strstr(msg, "`varq onnx-ops MODEL.onnx` every op of the model"), "%s", msg);
    cr_assert_null(strstr(msg, "QQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQ"),
                   "a long name is cut: %s", msg);
    free(msg);
}
