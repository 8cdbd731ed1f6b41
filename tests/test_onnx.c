/* The ONNX importer: models built here with protobuf-c (the same generated
 * code the importer reads with), imported, run and trained; every kind of
 * bad input is an error naming what is wrong, never a crash, and leaves
 * the caller's scope as it was; mutated models (10^4 of them) import or
 * fail cleanly (the ASan build runs this too). ONNX's own backend tests
 * run through scripts/onnx_conformance.sh (the onnx_conformance test). */
#include <varq/varq.h>

#include "onnx.pb-c.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "leakcheck.h"
#include "onnx_models.h"

TestSuite(onnx, .fini = leak_check);

/* The MLP: y = softmax(relu(x W1^T + b1) W2 + b2), x [N, 4], hidden 3,
 * classes 2 (Gemm with transB on the first layer, MatMul + Add on the
 * second), with the weights below. */
static const float W1[3][4] = {{0.5f, -0.25f, 0.1f, 0.7f},
                               {-0.3f, 0.8f, 0.2f, -0.6f},
                               {0.05f, 0.4f, -0.9f, 0.3f}};
static const float B1[3] = {0.1f, -0.2f, 0.05f};
static const float W2[3][2] = {{0.6f, -0.4f}, {-0.2f, 0.9f}, {0.3f, 0.25f}};
static const float B2[2] = {-0.1f, 0.2f};

static Onnx__ModelProto *mlp(void)
{
    Onnx__ModelProto *m = model_new(13);
    add_input(m, "x", 2, (int64_t[]){-1, 4});
    add_init(m, "w1", 2, (int64_t[]){3, 4}, &W1[0][0]);
    add_init(m, "b1", 1, (int64_t[]){3}, B1);
    add_init(m, "w2", 2, (int64_t[]){3, 2}, &W2[0][0]);
    add_init(m, "b2", 1, (int64_t[]){2}, B2);
    Onnx__NodeProto *gemm = add_node(m, "Gemm", "fc1", NAMES("x", "w1", "b1"), NAMES("h"));
    attr_int(gemm, "transB", 1);
    add_node(m, "Relu", "relu", NAMES("h"), NAMES("hr"));
    add_node(m, "MatMul", "fc2", NAMES("hr", "w2"), NAMES("z0"));
    add_node(m, "Add", "bias2", NAMES("z0", "b2"), NAMES("z"));
    Onnx__NodeProto *sm = add_node(m, "Softmax", "softmax", NAMES("z"), NAMES("y"));
    attr_int(sm, "axis", -1);
    add_output(m, "y");
    return m;
}

static void mlp_ref(const float *x, int n, double *y)
{
    for (int r = 0; r < n; r++) {
        double h[3], z[2], mx = -INFINITY, s = 0;
        for (int j = 0; j < 3; j++) {
            double a = B1[j];
            for (int k = 0; k < 4; k++)
                a += (double)x[r * 4 + k] * W1[j][k];
            h[j] = a > 0 ? a : 0;
        }
        for (int c = 0; c < 2; c++) {
            z[c] = B2[c];
            for (int j = 0; j < 3; j++)
                z[c] += h[j] * W2[j][c];
            mx = fmax(mx, z[c]);
        }
        for (int c = 0; c < 2; c++)
            s += exp(z[c] - mx);
        for (int c = 0; c < 2; c++)
            y[r * 2 + c] = exp(z[c] - mx) / s;
    }
}

/* ---- tests ---- */

/* vq_onnx_info_read reads a copy of the model without its weights' bytes
 * (a model of 250 MB of weights was held twice more to read its names):
 * initializers that an older exporter also lists as graph inputs are
 * still known as initializers, not feeds. */
Test(onnx, info_of_a_model_whose_initializers_are_also_inputs)
{
    Onnx__ModelProto *m = mlp();
    add_input(m, "w1", 2, (int64_t[]){3, 4});
    add_input(m, "x2", 1, (int64_t[]){2});
    size_t len;
    uint8_t *buf = pack(m, &len);
    vq_onnx_info info;
    cr_assert_eq(vq_onnx_info_read(&info, buf, len), 0, "%s", vq_errmsg());
    cr_assert_eq(info.ninputs, 2);
    cr_assert_str_eq(info.inputs[0], "x");
    cr_assert_str_eq(info.inputs[1], "x2");
    cr_assert_eq(info.noutputs, 1);
    cr_assert_eq(info.opset, 13);
    vq_onnx_info_free(&info);
    /* cut anywhere, the bytes are refused or read, never overrun */
    for (size_t cut = 0; cut < len; cut += 7)
        if (vq_onnx_info_read(&info, buf, cut) == 0)
            vq_onnx_info_free(&info);
    free(buf);
    onnx__model_proto__free_unpacked(m, NULL);
}

Test(onnx, an_imported_mlp_runs_with_any_batch_and_matches_c)
{
    Onnx__ModelProto *m = mlp();
    struct imported im = import_ok(m);
    cr_assert_eq(vq_scope_count(im.s), 4, "the initializers are in the scope");
    vq_onnx_info info;
    cr_assert_eq(vq_onnx_info_read(&info, im.buf, im.len), 0);
    cr_assert_eq(info.opset, 13);
    cr_assert_eq(info.ninputs, 1, "initializers are not feeds");
    cr_assert_str_eq(info.inputs[0], "x");
    cr_assert_eq(info.noutputs, 1);
    cr_assert_str_eq(info.outputs[0], "y");
    struct run r = run_new();
    for (int n = 1; n <= 5; n += 4) {
        float x[20];
        for (int i = 0; i < 4 * n; i++)
            x[i] = (float)sin(0.7 * i + n);
        vq_tensor *tx;
        cr_assert_eq(vq_tensor_from(&tx, VQ_F32, 2, (int64_t[]){n, 4}, x), 0);
        vq_feed feed = {"x", tx};
        vq_fetch fetch = {"y", NULL};
        cr_assert_eq(vq_exec_run(r.ex, im.p, im.s, &feed, 1, &fetch, 1), 0, "%s", vq_errmsg());
        double want[10];
        mlp_ref(x, n, want);
        const float *got = vq_tensor_data(fetch.tensor);
        cr_assert_eq(vq_tensor_shape(fetch.tensor)[0], n);
        for (int i = 0; i < 2 * n; i++)
            cr_assert_float_eq(got[i], want[i], 1e-6, "batch %d, [%d]: %g vs %g", n, i, got[i],
                               want[i]);
        vq_tensor_release(tx);
        vq_tensor_release(fetch.tensor);
    }
    imported_free(&im);
    run_free(&r);
    vq_onnx_info_free(&info);
}

Test(onnx, an_imported_model_trains_with_autodiff_and_sgd)
{
    Onnx__ModelProto *m = mlp();
    /* loss = mean of the second class's probability, to push down */
    int64_t one[1] = {1};
    add_init_ints(m, "cls", 1, one);
    add_init_ints(m, "cls_end", 1, (int64_t[]){2});
    add_init_ints(m, "axis1", 1, (int64_t[]){1});
    add_node(m, "Slice", "pick", NAMES("y", "cls", "cls_end", "axis1"), NAMES("p1"));
    Onnx__NodeProto *rm = add_node(m, "ReduceMean", "mean", NAMES("p1"), NAMES("loss"));
    attr_int(rm, "keepdims", 0);
    add_output(m, "loss");
    struct imported im = import_ok(m);
    vq_optimizer sgd = {.kind = VQ_OPT_SGD, .learning_rate = 0.5};
    vq_program *startup;
    cr_assert_eq(vq_program_new(&startup), 0);
    cr_assert_eq(vq_optimizer_minimize(im.p, startup, "loss", &sgd), 4, "%s", vq_errmsg());
    struct run r = run_new();
    float x[8 * 4];
    for (int i = 0; i < 32; i++)
        x[i] = (float)cos(1.3 * i);
    vq_tensor *tx;
    cr_assert_eq(vq_tensor_from(&tx, VQ_F32, 2, (int64_t[]){8, 4}, x), 0);
    vq_feed feed = {"x", tx};
    double first = 0, last = 0;
    for (int step = 0; step < 30; step++) {
        vq_fetch fetch = {"loss", NULL};
        cr_assert_eq(vq_exec_run(r.ex, im.p, im.s, &feed, 1, &fetch, 1), 0, "%s", vq_errmsg());
        last = *(float *)vq_tensor_data(fetch.tensor);
        if (step == 0)
            first = last;
        vq_tensor_release(fetch.tensor);
    }
    cr_assert_lt(last, 0.5 * first, "30 SGD steps on the imported weights: %g -> %g", first,
                 last);
    const float *w1 = vq_tensor_data(vq_scope_get(im.s, "w1"));
    cr_assert_neq(w1[0], W1[0][0], "the initializer in the scope was trained");
    vq_tensor_release(tx);
    imported_free(&im);
    run_free(&r);
    vq_program_free(startup);
}

/* Imports m and expects error rc with every fragment of msg (NULL ends). */
static void expect_error(Onnx__ModelProto *m, int rc, const char *const *frags)
{
    size_t len;
    uint8_t *buf = pack(m, &len);
    vq_scope *s;
    vq_program *p = (vq_program *)buf; /* must become NULL */
    cr_assert_eq(vq_scope_new(&s), 0);
    vq_tensor *old;
    cr_assert_eq(vq_tensor_new(&old, VQ_F32, 0, NULL), 0);
    cr_assert_eq(vq_scope_set(s, "w1", old), 0);
    int got = vq_program_from_onnx(&p, s, buf, len);
    cr_assert_eq(got, rc, "rc %d: %s", got, vq_errmsg());
    cr_assert_null(p);
    for (; *frags; frags++)
        cr_assert(strstr(vq_errmsg(), *frags), "\"%s\" not in: %s", *frags, vq_errmsg());
    cr_assert_eq(vq_scope_count(s), 1, "the scope is left as it was");
    cr_assert_eq(vq_scope_get(s, "w1"), old);
    vq_tensor_release(old);
    vq_scope_free(s);
    free(buf);
    onnx__model_proto__free_unpacked(m, NULL);
}

/* (tests/test_onnx_errors.c: models with several such ops) */
Test(onnx, an_unknown_op_names_itself_its_domain_opset_and_node)
{
    Onnx__ModelProto *m = mlp();
    add_node(m, "FrobNicate", "the_node", NAMES("y"), NAMES("y2"));
    expect_error(m, VQ_ENOSYS,
                 NAMES("the model (opset 13 of ai.onnx) uses 1 op type that varq does not "
                       "translate: FrobNicate (1 node: node 5 \"the_node\")",
                       "`varq onnx-ops` lists the ops varq translates"));
    m = mlp();
    Onnx__NodeProto *n = add_node(m, "Foo", "custom", NAMES("y"), NAMES("y2"));
    n->domain = strdup("com.example");
    expect_error(m, VQ_ENOSYS,
                 NAMES("Foo of domain com.example (1 node: node 5 \"custom\"; varq reads only "
                       "the default domain ai.onnx and ai.onnx.preview.training)"));
}

/* The translate table is looked up by binary search (onnx/translate.c):
 * onnx/onnx_ops.h must list the ops in strcmp order, or some would not be
 * found. */
Test(onnx, the_translated_ops_are_listed_in_strcmp_order)
{
    int n = 0;
    for (; vq_onnx_op_name(n + 1); n++)
        cr_assert_lt(strcmp(vq_onnx_op_name(n), vq_onnx_op_name(n + 1)), 0, "%s before %s",
                     vq_onnx_op_name(n), vq_onnx_op_name(n + 1));
    cr_assert_gt(n, 100);
}

Test(onnx, undefined_inputs_and_nodes_out_of_order_are_errors)
{
    Onnx__ModelProto *m = mlp();
    add_node(m, "Relu", "late", NAMES("nowhere"), NAMES("r"));
    expect_error(m, VQ_EINVAL, NAMES("node 5 (Relu \"late\")", "input 0 \"nowhere\" is not"));
    /* a cycle: a node reads what a later node writes */
    m = model_new(13);
    add_input(m, "x", 1, (int64_t[]){3});
    add_node(m, "Relu", "a", NAMES("b_out"), NAMES("a_out"));
    add_node(m, "Relu", "b", NAMES("a_out"), NAMES("b_out"));
    add_output(m, "b_out");
    expect_error(m, VQ_EINVAL, NAMES("node 0 (Relu \"a\")", "b_out"));
    /* an output produced twice */
    m = mlp();
    add_node(m, "Relu", "again", NAMES("x"), NAMES("h"));
    expect_error(m, VQ_EINVAL, NAMES("value \"h\" is produced twice"));
    /* a graph output nobody produces */
    m = mlp();
    add_output(m, "ghost");
    expect_error(m, VQ_EINVAL, NAMES("graph output \"ghost\" is produced by no node"));
}

Test(onnx, bad_tensors_and_unsupported_values_are_errors)
{
    /* raw data of the wrong size */
    Onnx__ModelProto *m = mlp();
    m->graph->initializer[1]->raw_data.len = 5;
    expect_error(m, VQ_EINVAL, NAMES("initializer \"b1\"", "5 bytes of raw data"));
    /* a shape whose size overflows */
    m = mlp();
    Onnx__TensorProto *t = m->graph->initializer[0];
    t->dims[0] = INT64_C(1) << 40;
    t->dims[1] = INT64_C(1) << 40;
    expect_error(m, VQ_EINVAL, NAMES("initializer \"w1\"", "overflows"));
    /* a type varq does not have */
    m = mlp();
    m->graph->initializer[1]->data_type = ONNX__TENSOR_PROTO__DATA_TYPE__COMPLEX64;
    expect_error(m, VQ_ENOSYS, NAMES("initializer \"b1\" has element type COMPLEX64"));
    /* a Reshape without its shape, a Slice without its bounds (the fuzzer
     * found both read as values computed at run time) */
    m = mlp();
    add_node(m, "Reshape", "noshape", NAMES("y"), NAMES("yr"));
    expect_error(m, VQ_EINVAL, NAMES("node 5 (Reshape \"noshape\")", "no shape"));
    m = mlp();
    add_node(m, "Slice", "nobounds", NAMES("y"), NAMES("ys"));
    expect_error(m, VQ_EINVAL, NAMES("node 5 (Slice \"nobounds\")"));
    /* a Bernoulli whose seed no int64 holds (the fuzzer's NaN: a cast
     * UBSan caught) */
    m = mlp();
    attr_float(add_node(m, "Bernoulli", "coin", NAMES("y"), NAMES("yb")), "seed", NAN);
    expect_error(m, VQ_EINVAL, NAMES("node 5 (Bernoulli \"coin\")", "seed nan"));
    m = mlp();
    attr_float(add_node(m, "Bernoulli", "coin", NAMES("y"), NAMES("yb")), "seed", 1e30f);
    expect_error(m, VQ_EINVAL, NAMES("node 5 (Bernoulli \"coin\")", "seed 1e+30"));
    /* a Slice whose bounds are computed at run time needs their length
     * (the axes' count) at import */
    m = mlp();
    add_input_of(m, "st", ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 1, (int64_t[]){-1});
    add_init_ints(m, "en", 1, (int64_t[]){2});
    add_node(m, "Slice", "sl", NAMES("y", "st", "en"), NAMES("ys"));
    expect_error(m, VQ_ENOSYS, NAMES("node 5 (Slice \"sl\")", "1-D of one length known at import"));
    /* a shape fed at run time whose length (the result's rank) is not
     * known either */
    m = mlp();
    add_input(m, "shape", 1, (int64_t[]){-1});
    m->graph->input[1]->type->tensor_type->elem_type = ONNX__TENSOR_PROTO__DATA_TYPE__INT64;
    add_node(m, "Reshape", "dyn", NAMES("y", "shape"), NAMES("yr"));
    expect_error(m, VQ_ENOSYS,
                 NAMES("node 5 (Reshape \"dyn\")", "\"shape\" is computed at run time",
                       "of a length known at import"));
    /* an opset out of range */
    m = mlp();
    m->opset_import[0]->version = 30;
    expect_error(m, VQ_ENOSYS, NAMES("opset 30"));
    /* a negative one: was "uses only other operator sets than ai.onnx ( first)" */
    m = mlp();
    m->opset_import[0]->version = -3;
    expect_error(m, VQ_EINVAL, NAMES("opset -3 of ai.onnx is not valid"));
    /* opset 0: not a version either */
    m = mlp();
    m->opset_import[0]->version = 0;
    expect_error(m, VQ_ENOSYS, NAMES("opset 0 of ai.onnx"));
    /* attributes of the wrong type */
    m = mlp();
    Onnx__AttributeProto *a = m->graph->node[4]->attribute[0];
    a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT;
    expect_error(m, VQ_EINVAL, NAMES("node 4 (Softmax \"softmax\")", "axis is not an int"));
}

Test(onnx, external_data_is_read_beside_the_model_and_missing_files_are_errors)
{
    char dir[] = "/tmp/varq_onnx_XXXXXX";
    cr_assert(mkdtemp(dir));
    Onnx__ModelProto *m = mlp();
    /* b1 moves to b1.bin at offset 8 */
    Onnx__TensorProto *t = m->graph->initializer[1];
    char path[256], model[256];
    snprintf(path, sizeof path, "%s/b1.bin", dir);
    FILE *f = fopen(path, "wb");
    cr_assert(f);
    fwrite("padding!", 1, 8, f);
    fwrite(t->raw_data.data, 1, t->raw_data.len, f);
    fclose(f);
    free(t->raw_data.data);
    t->raw_data.data = NULL;
    t->raw_data.len = 0;
    t->has_raw_data = 0;
    t->has_data_location = 1;
    t->data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
    const char *kv[3][2] = {{"location", "b1.bin"}, {"offset", "8"}, {"length", "12"}};
    for (int i = 0; i < 3; i++) {
        Onnx__StringStringEntryProto *e = calloc(1, sizeof *e);
        onnx__string_string_entry_proto__init(e);
        e->key = strdup(kv[i][0]);
        e->value = strdup(kv[i][1]);
        GROW(t->external_data, t->n_external_data);
        t->external_data[t->n_external_data++] = e;
    }
    size_t len;
    uint8_t *buf = pack(m, &len);
    snprintf(model, sizeof model, "%s/model.onnx", dir);
    f = fopen(model, "wb");
    fwrite(buf, 1, len, f);
    fclose(f);
    vq_scope *s;
    vq_program *p;
    cr_assert_eq(vq_scope_new(&s), 0);
    cr_assert_eq(vq_program_from_onnx_file(&p, s, model), 0, "%s", vq_errmsg());
    const float *b1 = vq_tensor_data(vq_scope_get(s, "b1"));
    for (int i = 0; i < 3; i++)
        cr_assert_eq(b1[i], B1[i]);
    vq_program_free(p);
    /* from a buffer there is no directory to read it from */
    cr_assert_eq(vq_program_from_onnx(&p, s, buf, len), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "external data"), "%s", vq_errmsg());
    /* the file gone */
    unlink(path);
    cr_assert_eq(vq_program_from_onnx_file(&p, s, model), VQ_EIO);
    cr_assert(strstr(vq_errmsg(), "b1.bin"), "%s", vq_errmsg());
    cr_assert_null(p);
    /* a model file that does not exist */
    cr_assert_eq(vq_program_from_onnx_file(&p, s, "/nonexistent/model.onnx"), VQ_EIO);
    unlink(model);
    rmdir(dir);
    vq_scope_free(s);
    free(buf);
    onnx__model_proto__free_unpacked(m, NULL);
}

/* dir/model.onnx: the MLP with b1 stored in location (data at offset 0). */
static void external_model(const char *dir, const char *location, char *model, size_t size)
{
    Onnx__ModelProto *m = mlp();
    Onnx__TensorProto *t = m->graph->initializer[1];
    free(t->raw_data.data);
    t->raw_data.data = NULL;
    t->raw_data.len = 0;
    t->has_raw_data = 0;
    t->has_data_location = 1;
    t->data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
    Onnx__StringStringEntryProto *e = calloc(1, sizeof *e);
    onnx__string_string_entry_proto__init(e);
    e->key = strdup("location");
    e->value = strdup(location);
    GROW(t->external_data, t->n_external_data);
    t->external_data[t->n_external_data++] = e;
    size_t len;
    uint8_t *buf = pack(m, &len);
    snprintf(model, size, "%s/model.onnx", dir);
    FILE *f = fopen(model, "wb");
    cr_assert(f);
    fwrite(buf, 1, len, f);
    fclose(f);
    free(buf);
    onnx__model_proto__free_unpacked(m, NULL);
}

/* b1's 12 bytes in path. */
static void write_b1(const char *path)
{
    FILE *f = fopen(path, "wb");
    cr_assert(f);
    fwrite(B1, sizeof B1, 1, f);
    fclose(f);
}

/* A FIFO blocked the import forever (waiting for a writer); a link out of
 * the model's directory read a file outside it. Both are refused; a link
 * to a file inside the directory is followed. */
Test(onnx, external_data_in_a_fifo_or_behind_a_link_out_of_the_directory_is_refused, .timeout = 30)
{
    char dir[] = "/tmp/varq_onnx_XXXXXX", outside[] = "/tmp/varq_onnx_out_XXXXXX";
    char model[256], path[256], target[256];
    cr_assert(mkdtemp(dir));
    cr_assert(mkdtemp(outside));
    vq_scope *s;
    vq_program *p;
    cr_assert_eq(vq_scope_new(&s), 0);
    /* a FIFO nobody writes */
    snprintf(path, sizeof path, "%s/fifo.bin", dir);
    cr_assert_eq(mkfifo(path, 0600), 0);
    external_model(dir, "fifo.bin", model, sizeof model);
    cr_assert_eq(vq_program_from_onnx_file(&p, s, model), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "fifo.bin is not a regular file"), "%s", vq_errmsg());
    cr_assert_null(p);
    unlink(path);
    /* a directory */
    snprintf(path, sizeof path, "%s/sub", dir);
    cr_assert_eq(mkdir(path, 0700), 0);
    external_model(dir, "sub", model, sizeof model);
    cr_assert_eq(vq_program_from_onnx_file(&p, s, model), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "not a regular file"), "%s", vq_errmsg());
    rmdir(path);
    /* a link to a file outside, holding valid data */
    snprintf(target, sizeof target, "%s/b1.bin", outside);
    write_b1(target);
    snprintf(path, sizeof path, "%s/out.bin", dir);
    cr_assert_eq(symlink(target, path), 0);
    external_model(dir, "out.bin", model, sizeof model);
    cr_assert_eq(vq_program_from_onnx_file(&p, s, model), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "outside the model's directory"), "%s", vq_errmsg());
    cr_assert_eq(vq_scope_count(s), 0, "nothing bound");
    unlink(path);
    /* a link to a file inside: followed */
    snprintf(target, sizeof target, "%s/b1.bin", dir);
    write_b1(target);
    snprintf(path, sizeof path, "%s/in.bin", dir);
    cr_assert_eq(symlink("b1.bin", path), 0);
    external_model(dir, "in.bin", model, sizeof model);
    cr_assert_eq(vq_program_from_onnx_file(&p, s, model), 0, "%s", vq_errmsg());
    const float *b1 = vq_tensor_data(vq_scope_get(s, "b1"));
    for (int i = 0; i < 3; i++)
        cr_assert_eq(b1[i], B1[i]);
    vq_program_free(p);
    unlink(path);
    unlink(target);
    unlink(model);
    snprintf(target, sizeof target, "%s/b1.bin", outside);
    unlink(target);
    rmdir(outside);
    rmdir(dir);
    vq_scope_free(s);
}

Test(onnx, bytes_that_are_not_a_model_are_errors)
{
    vq_program *p;
    vq_scope *s;
    cr_assert_eq(vq_scope_new(&s), 0);
    const char garbage[] = "\xff\xff\xff\xff\x0f this is not protobuf";
    cr_assert_eq(vq_program_from_onnx(&p, s, garbage, sizeof garbage), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "not an ONNX model"), "%s", vq_errmsg());
    cr_assert_eq(vq_program_from_onnx(&p, s, "", 0), VQ_EINVAL); /* no graph */
    vq_tensor *t;
    cr_assert_eq(vq_tensor_from_onnx(&t, NULL, garbage, sizeof garbage), VQ_EINVAL);
    cr_assert_eq(vq_program_from_onnx(NULL, s, "", 0), VQ_EINVAL);
    vq_scope_free(s);
}

/* Mutated encodings of the MLP (and of the training model): bytes flipped,
 * cut, duplicated. Each imports or fails with a message; what imports
 * also prepares or fails cleanly. */
Test(onnx, ten_thousand_mutated_models_import_or_fail_cleanly)
{
    Onnx__ModelProto *m = mlp();
    size_t len;
    uint8_t *base = pack(m, &len);
    uint64_t rng = 0x5eed0ffbeefull;
    int imported = 0;
    struct run r = run_new();
    for (int c = 0; c < 10000; c++) {
        uint8_t *buf = malloc(len * 2 + 16);
        memcpy(buf, base, len);
        size_t n = len;
        int edits = 1 + (int)(rng % 4);
        for (int k = 0; k < edits; k++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            size_t at = (size_t)(rng >> 33) % n;
            switch ((rng >> 20) % 4) {
            case 0: buf[at] ^= (uint8_t)(1u << ((rng >> 8) % 8)); break;
            case 1: buf[at] = (uint8_t)(rng >> 40); break;
            case 2: n = at + 1; break; /* cut */
            default: /* duplicate a run of bytes */
                if (n + 8 <= len * 2) {
                    memmove(buf + at + 8, buf + at, n - at);
                    n += 8;
                }
            }
        }
        vq_scope *s;
        vq_program *p = NULL;
        cr_assert_eq(vq_scope_new(&s), 0);
        int rc = vq_program_from_onnx(&p, s, buf, n);
        cr_assert(rc == 0 || rc == VQ_EINVAL || rc == VQ_ENOSYS || rc == VQ_EIO, "case %d: %d",
                  c, rc);
        cr_assert(rc == 0 ? p != NULL : p == NULL);
        if (rc == 0) {
            imported++;
            vq_fetch fetch = {"y", NULL};
            vq_tensor *tx;
            cr_assert_eq(vq_tensor_new(&tx, VQ_F32, 2, (int64_t[]){2, 4}), 0);
            vq_feed feed = {"x", tx};
            if (vq_exec_run(r.ex, p, s, &feed, 1, &fetch, 1) == 0)
                vq_tensor_release(fetch.tensor);
            vq_tensor_release(tx);
        }
        vq_program_free(p);
        vq_scope_free(s);
        free(buf);
    }
    fprintf(stderr, "onnx fuzz: 10000 mutated models, %d imported\n", imported);
    run_free(&r);
    free(base);
    onnx__model_proto__free_unpacked(m, NULL);
}

/* Transpose, Flatten and Unsqueeze with the batch dim unknown at import,
 * and a Shape of the known dims folded into a Reshape's shape. */
Test(onnx, shape_ops_work_with_a_batch_dim_known_only_at_run_time)
{
    Onnx__ModelProto *m = model_new(13);
    add_input(m, "x", 3, (int64_t[]){-1, 2, 3});
    Onnx__NodeProto *tr = add_node(m, "Transpose", "t", NAMES("x"), NAMES("xt"));
    attr_ints(tr, "perm", 3, (int64_t[]){0, 2, 1});
    add_node(m, "Flatten", "f", NAMES("xt"), NAMES("flat"));
    add_init_ints(m, "ax", 1, (int64_t[]){1});
    add_node(m, "Unsqueeze", "u", NAMES("flat", "ax"), NAMES("y"));
    add_output(m, "y");
    struct imported im = import_ok(m);
    struct run r = run_new();
    float x[2 * 2 * 3];
    for (int i = 0; i < 12; i++)
        x[i] = (float)i;
    vq_tensor *tx;
    cr_assert_eq(vq_tensor_from(&tx, VQ_F32, 3, (int64_t[]){2, 2, 3}, x), 0);
    vq_feed feed = {"x", tx};
    vq_fetch fetch = {"y", NULL};
    cr_assert_eq(vq_exec_run(r.ex, im.p, im.s, &feed, 1, &fetch, 1), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_tensor_ndim(fetch.tensor), 3);
    const int64_t *sh = vq_tensor_shape(fetch.tensor);
    cr_assert(sh[0] == 2 && sh[1] == 1 && sh[2] == 6);
    const float *y = vq_tensor_data(fetch.tensor);
    for (int b = 0; b < 2; b++)
        for (int j = 0; j < 3; j++)
            for (int i = 0; i < 2; i++)
                cr_assert_eq(y[b * 6 + j * 2 + i], x[b * 6 + i * 3 + j]);
    vq_tensor_release(fetch.tensor);
    vq_tensor_release(tx);
    imported_free(&im);
    run_free(&r);
}

/* Reshape(x, shape) with the shape a graph input: known only when its
 * value is offered at import (vq_onnx_opts), and then only for that value. */
Test(onnx, an_input_that_gives_a_shape_specializes_the_program_on_its_offered_value)
{
    Onnx__ModelProto *m = model_new(13);
    add_input(m, "x", 2, (int64_t[]){-1, 6});
    Onnx__GraphProto *g = m->graph;
    GROW(g->input, g->n_input);
    g->input[g->n_input++] =
        value_info("shape", ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 1, (int64_t[]){2});
    add_node(m, "Reshape", "r", NAMES("x", "shape"), NAMES("y"));
    add_output(m, "y");
    size_t len;
    uint8_t *buf = pack(m, &len);
    vq_scope *s;
    vq_program *p;
    cr_assert_eq(vq_scope_new(&s), 0);
    float x[12];
    for (int i = 0; i < 12; i++)
        x[i] = (float)i;
    vq_tensor *tx, *tshape, *tbad, *tother;
    cr_assert_eq(vq_tensor_from(&tx, VQ_F32, 2, (int64_t[]){2, 6}, x), 0);
    cr_assert_eq(vq_tensor_from(&tshape, VQ_I64, 1, (int64_t[]){2}, (int64_t[]){3, 4}), 0);
    cr_assert_eq(vq_tensor_from(&tother, VQ_I64, 1, (int64_t[]){2}, (int64_t[]){6, 2}), 0);
    /* no offer: the reshape reads the fed shape when it runs, any shape */
    cr_assert_eq(vq_program_from_onnx(&p, s, buf, len), 0, "%s", vq_errmsg());
    struct run r0 = run_new();
    for (int k = 0; k < 2; k++) {
        vq_feed fd[2] = {{"x", tx}, {"shape", k ? tother : tshape}};
        vq_fetch ft = {"y", NULL};
        cr_assert_eq(vq_exec_run(r0.ex, p, s, fd, 2, &ft, 1), 0, "%s", vq_errmsg());
        cr_assert_eq(vq_tensor_shape(ft.tensor)[0], k ? 6 : 3);
        cr_assert_eq(memcmp(vq_tensor_data(ft.tensor), x, sizeof x), 0);
        vq_tensor_release(ft.tensor);
    }
    run_free(&r0);
    vq_program_free(p);
    vq_tensor_release(tother);

    cr_assert_eq(vq_tensor_from(&tbad, VQ_F32, 1, (int64_t[]){2}, (float[]){3, 4}), 0);
    vq_onnx_value offers[2] = {{.name = "x", .tensor = tx}, {.name = "shape", .tensor = tshape}};
    bool spec[2] = {true, false};
    vq_onnx_opts o = {.values = offers, .nvalues = 2, .specialized = spec};
    cr_assert_eq(vq_program_from_onnx_opts(&p, s, buf, len, &o), 0, "%s", vq_errmsg());
    cr_assert(!spec[0] && spec[1], "specialized on the shape only (%d %d)", spec[0], spec[1]);
    struct run r = run_new();
    vq_feed feeds[2] = {{"x", tx}, {"shape", tshape}};
    vq_fetch fetch = {"y", NULL};
    cr_assert_eq(vq_exec_run(r.ex, p, s, feeds, 2, &fetch, 1), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_tensor_ndim(fetch.tensor), 2);
    cr_assert(vq_tensor_shape(fetch.tensor)[0] == 3 && vq_tensor_shape(fetch.tensor)[1] == 4);
    cr_assert_eq(memcmp(vq_tensor_data(fetch.tensor), x, sizeof x), 0);
    vq_tensor_release(fetch.tensor);
    vq_program_free(p);

    /* an offer that does not fit, or names no graph input */
    vq_onnx_value bad[1] = {{.name = "shape", .tensor = tbad}};
    o = (vq_onnx_opts){.values = bad, .nvalues = 1};
    p = (vq_program *)buf;
    cr_assert_eq(vq_program_from_onnx_opts(&p, s, buf, len, &o), VQ_EINVAL);
    cr_assert_null(p);
    cr_assert(strstr(vq_errmsg(), "\"shape\" is f32[2]; the model declares i64[2]"), "%s",
              vq_errmsg());
    vq_onnx_value none[1] = {{.name = "nope", .tensor = tshape}};
    o = (vq_onnx_opts){.values = none, .nvalues = 1};
    cr_assert_eq(vq_program_from_onnx_opts(&p, s, buf, len, &o), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "\"nope\", which is not a graph input"), "%s", vq_errmsg());

    vq_tensor_release(tx);
    vq_tensor_release(tshape);
    vq_tensor_release(tbad);
    vq_scope_free(s);
    run_free(&r);
    free(buf);
    onnx__model_proto__free_unpacked(m, NULL);
}

/* A Concat of more inputs than a varq op takes (ssdlite exports one of
 * 90, an input per class): concats of up to 64, then one of those. */
Test(onnx, a_concat_of_more_inputs_than_an_op_takes_is_a_tree_of_concats)
{
    enum { N = 150 };
    Onnx__ModelProto *m = model_new(13);
    add_input(m, "x", 1, (int64_t[]){2});
    add_input(m, "y", 1, (int64_t[]){2});
    const char *names[N + 1];
    for (int i = 0; i < N; i++)
        names[i] = i % 3 ? "x" : "y";
    names[N] = NULL;
    attr_int(add_node(m, "Concat", "cat", names, NAMES("z")), "axis", 0);
    add_output(m, "z");
    struct imported im = import_ok(m);
    struct run r = run_new();
    vq_tensor *tx, *ty;
    cr_assert_eq(vq_tensor_from(&tx, VQ_F32, 1, (int64_t[]){2}, (const float[]){1, 2}), 0);
    cr_assert_eq(vq_tensor_from(&ty, VQ_F32, 1, (int64_t[]){2}, (const float[]){-3, -4}), 0);
    vq_feed feeds[2] = {{"x", tx}, {"y", ty}};
    vq_fetch f = {"z", NULL};
    cr_assert_eq(vq_exec_run(r.ex, im.p, im.s, feeds, 2, &f, 1), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_tensor_numel(f.tensor), 2 * N);
    const float *z = vq_tensor_data(f.tensor);
    for (int i = 0; i < N; i++)
        for (int j = 0; j < 2; j++)
            cr_assert_eq(z[2 * i + j], i % 3 ? (float)(j + 1) : (float)(-3 - j), "[%d]", 2 * i + j);
    vq_tensor_release(f.tensor);
    vq_tensor_release(tx);
    vq_tensor_release(ty);
    imported_free(&im);
    run_free(&r);
}

/* ---- If and Loop ---- */

/* A bare graph (for an If branch or a Loop body). */
static void graph_io(Onnx__ValueInfoProto ***arr, size_t *n, const char *name, int32_t elem,
                     int ndim, const int64_t *dims)
{
    GROW(*arr, *n);
    (*arr)[(*n)++] = value_info(name, elem, ndim, dims);
}

static float run1(struct run *r, vq_program *p, vq_scope *s, vq_feed *feeds, int nfeeds,
                  const char *fetch, int i)
{
    vq_fetch f = {fetch, NULL};
    cr_assert_eq(vq_exec_run(r->ex, p, s, feeds, nfeeds, &f, 1), 0, "%s", vq_errmsg());
    float v = ((const float *)vq_tensor_data(f.tensor))[i];
    vq_tensor_release(f.tensor);
    return v;
}

/* y = c ? x * x : x - 1, c fed at run time: a cond; and with c a
 * Constant: the taken branch only. */
Test(onnx, if_becomes_a_cond_and_a_known_condition_keeps_one_branch)
{
    Onnx__ModelProto *m = model_new(13);
    add_input(m, "x", 1, (int64_t[]){3});
    graph_io(&m->graph->input, &m->graph->n_input, "c", ONNX__TENSOR_PROTO__DATA_TYPE__BOOL, 0,
             NULL);
    Onnx__GraphProto *tb = subgraph("then"), *eb = subgraph("else");
    graph_node(tb, "Mul", NAMES("x", "x"), NAMES("sq"));
    add_output(&(Onnx__ModelProto){.graph = tb}, "sq");
    Onnx__ModelProto em = {.graph = eb};
    add_init(m, "onef", 0, NULL, (const float[]){1});
    graph_node(eb, "Sub", NAMES("x", "onef"), NAMES("dec"));
    add_output(&em, "dec");
    Onnx__NodeProto *n = add_node(m, "If", "branch", NAMES("c"), NAMES("y"));
    attr_graph(n, "then_branch", tb);
    attr_graph(n, "else_branch", eb);
    add_output(m, "y");
    struct imported im = import_ok(m);
    struct run r = run_new();
    vq_tensor *tx, *tc;
    cr_assert_eq(vq_tensor_from(&tx, VQ_F32, 1, (int64_t[]){3}, (const float[]){1, 2, 3}), 0);
    for (int c = 0; c < 2; c++) {
        unsigned char b = (unsigned char)c;
        cr_assert_eq(vq_tensor_from(&tc, VQ_BOOL, 0, NULL, &b), 0);
        vq_feed feeds[2] = {{"x", tx}, {"c", tc}};
        cr_assert_float_eq(run1(&r, im.p, im.s, feeds, 2, "y", 2), c ? 9.0f : 2.0f, 1e-6);
        vq_tensor_release(tc);
    }
    vq_tensor_release(tx);
    imported_free(&im);
    run_free(&r);
}

/* levels Ifs inside one another on a fed c: y0 = c ? (c ? ... -x) : x,
 * each then_branch holding the next If, each else_branch x. */
static Onnx__ModelProto *nested_ifs(int levels)
{
    Onnx__ModelProto *m = model_new(13);
    add_input(m, "x", 1, (int64_t[]){2});
    graph_io(&m->graph->input, &m->graph->n_input, "c", ONNX__TENSOR_PROTO__DATA_TYPE__BOOL, 0,
             NULL);
    Onnx__GraphProto *g = m->graph;
    char y[32], e[32];
    for (int k = 0; k < levels; k++) {
        snprintf(y, sizeof y, "y%d", k);
        snprintf(e, sizeof e, "e%d", k);
        Onnx__NodeProto *n = graph_node(g, "If", NAMES("c"), NAMES(y));
        Onnx__GraphProto *tb = subgraph("then"), *eb = subgraph("else");
        graph_node(eb, "Identity", NAMES("x"), NAMES(e));
        add_output(&(Onnx__ModelProto){.graph = eb}, e);
        snprintf(y, sizeof y, "y%d", k + 1);
        add_output(&(Onnx__ModelProto){.graph = tb}, y);
        attr_graph(n, "then_branch", tb);
        attr_graph(n, "else_branch", eb);
        g = tb;
    }
    snprintf(y, sizeof y, "y%d", levels);
    graph_node(g, "Neg", NAMES("x"), NAMES(y));
    add_output(m, "y0");
    return m;
}

/* Each level of subgraphs is a recursion of protobuf-c's unpack and of
 * the import: past the limit, an error before either starts (300 levels
 * overflowed the import's stack, 3000 unpack's). */
Test(onnx, subgraphs_nested_past_the_limit_are_an_error_not_a_crash)
{
    const int deep[] = {65, 300, 3000};
    for (int i = 0; i < 3; i++) {
        Onnx__ModelProto *m = nested_ifs(deep[i]);
        size_t len;
        uint8_t *buf = pack(m, &len);
        vq_onnx_info info;
        cr_assert_eq(vq_onnx_info_read(&info, buf, len), VQ_EINVAL, "%d levels", deep[i]);
        free(buf);
        expect_error(m, VQ_EINVAL, NAMES("nest more than 64 levels deep"));
    }
    /* types nest too: a graph input of sequences of sequences... */
    Onnx__ModelProto *m = nested_ifs(0);
    Onnx__TypeProto *tp = m->graph->input[0]->type;
    for (int k = 0; k < 2000; k++) {
        Onnx__TypeProto *outer = calloc(1, sizeof *outer);
        onnx__type_proto__init(outer);
        Onnx__TypeProto__Sequence *sq = calloc(1, sizeof *sq);
        onnx__type_proto__sequence__init(sq);
        sq->elem_type = tp;
        outer->value_case = ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE;
        outer->sequence_type = sq;
        tp = outer;
    }
    m->graph->input[0]->type = tp;
    expect_error(m, VQ_EINVAL, NAMES("messages nest more than", "TypeProto"));
    /* at the limit: imports and runs */
    m = nested_ifs(64);
    struct imported im = import_ok(m);
    struct run r = run_new();
    vq_tensor *tx, *tc;
    cr_assert_eq(vq_tensor_from(&tx, VQ_F32, 1, (int64_t[]){2}, (const float[]){1, 2}), 0);
    for (int c = 0; c < 2; c++) {
        unsigned char b = (unsigned char)c;
        cr_assert_eq(vq_tensor_from(&tc, VQ_BOOL, 0, NULL, &b), 0);
        vq_feed feeds[2] = {{"x", tx}, {"c", tc}};
        cr_assert_float_eq(run1(&r, im.p, im.s, feeds, 2, "y0", 1), c ? -2.0f : 2.0f, 0);
        vq_tensor_release(tc);
    }
    vq_tensor_release(tx);
    imported_free(&im);
    run_free(&r);
}

/* acc = x; repeat while (sum(acc) < limit) and at most M times: acc *= 2.
 * M fed at run time, or known (an initializer): max_iters. */
static Onnx__ModelProto *doubling_loop(bool known_m)
{
    Onnx__ModelProto *m = model_new(13);
    add_input(m, "x", 1, (int64_t[]){3});
    if (known_m)
        add_init_ints(m, "M", 1, (int64_t[]){4});
    else
        graph_io(&m->graph->input, &m->graph->n_input, "M",
                 ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 0, NULL);
    add_init(m, "limit", 0, NULL, (const float[]){100});
    Onnx__GraphProto *b = subgraph("body");
    graph_io(&b->input, &b->n_input, "i", ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 0, NULL);
    graph_io(&b->input, &b->n_input, "c_in", ONNX__TENSOR_PROTO__DATA_TYPE__BOOL, 0, NULL);
    graph_io(&b->input, &b->n_input, "acc_in", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 1,
             (int64_t[]){3});
    graph_node(b, "Add", NAMES("acc_in", "acc_in"), NAMES("acc_out"));
    Onnx__NodeProto *rs = graph_node(b, "ReduceSum", NAMES("acc_out"), NAMES("total"));
    attr_int(rs, "keepdims", 0);
    graph_node(b, "Less", NAMES("total", "limit"), NAMES("c_out"));
    Onnx__ModelProto bm = {.graph = b};
    add_outputs(&bm, NAMES("c_out", "acc_out"));
    Onnx__NodeProto *n = add_node(m, "Loop", "loop", NAMES("M", "", "x"), NAMES("y"));
    attr_graph(n, "body", b);
    add_output(m, "y");
    return m;
}

Test(onnx, loop_becomes_a_while_with_its_trip_count_and_condition)
{
    for (int known = 0; known < 2; known++) {
        Onnx__ModelProto *m = doubling_loop(known);
        struct imported im = import_ok(m);
        struct run r = run_new();
        vq_tensor *tx;
        cr_assert_eq(vq_tensor_from(&tx, VQ_F32, 1, (int64_t[]){3}, (const float[]){1, 2, 3}),
                     0);
        /* sum 6: 12, 24, 48, 96, 192 (stops: not < 100 after the 5th) */
        const int64_t ms[] = {0, 1, 3, 4, 10};
        for (int k = 0; k < (known ? 1 : 5); k++) {
            int64_t mv = known ? 4 : ms[k];
            vq_tensor *tm;
            cr_assert_eq(vq_tensor_from(&tm, VQ_I64, 0, NULL, &mv), 0);
            vq_feed feeds[2] = {{"x", tx}, {"M", tm}};
            int iters = (int)(mv < 5 ? mv : 5);
            cr_assert_float_eq(run1(&r, im.p, im.s, feeds, known ? 1 : 2, "y", 0),
                               (float)(1 << iters), 1e-6, "M = %lld", (long long)mv);
            vq_tensor_release(tm);
        }
        vq_tensor_release(tx);
        imported_free(&im);
        run_free(&r);
    }
}

/* acc = x; M times: acc *= 2, with scan outputs acc + i and i (0-d per
 * iteration): M fed and offered (so known at import), no cond, and the
 * body's cond_out Identity(cond_in). With a cond_out that can end the loop
 * early (early), or M not offered, the scan outputs' dim 0 is known only
 * when the loop has run. */
static Onnx__ModelProto *scanning_loop(bool early)
{
    Onnx__ModelProto *m = model_new(13);
    add_input(m, "x", 1, (int64_t[]){3});
    graph_io(&m->graph->input, &m->graph->n_input, "M", ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 0,
             NULL);
    add_init(m, "limit", 0, NULL, (const float[]){100});
    Onnx__GraphProto *b = subgraph("body");
    graph_io(&b->input, &b->n_input, "i", ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 0, NULL);
    graph_io(&b->input, &b->n_input, "c_in", ONNX__TENSOR_PROTO__DATA_TYPE__BOOL, 0, NULL);
    graph_io(&b->input, &b->n_input, "acc_in", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 1,
             (int64_t[]){3});
    graph_node(b, "Add", NAMES("acc_in", "acc_in"), NAMES("acc_out"));
    if (early) {
        Onnx__NodeProto *rs = graph_node(b, "ReduceSum", NAMES("acc_out"), NAMES("total"));
        attr_int(rs, "keepdims", 0);
        graph_node(b, "Less", NAMES("total", "limit"), NAMES("c_out"));
    } else {
        graph_node(b, "Identity", NAMES("c_in"), NAMES("c_mid"));
        graph_node(b, "Identity", NAMES("c_mid"), NAMES("c_out"));
    }
    attr_int(graph_node(b, "Cast", NAMES("i"), NAMES("fi")), "to",
             ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT);
    graph_node(b, "Add", NAMES("acc_out", "fi"), NAMES("s0"));
    Onnx__ModelProto bm = {.graph = b};
    add_outputs(&bm, NAMES("c_out", "acc_out", "s0", "fi"));
    Onnx__NodeProto *n =
        add_node(m, "Loop", "loop", NAMES("M", "", "x"), NAMES("y", "scan0", "scan1"));
    attr_graph(n, "body", b);
    add_outputs(m, NAMES("y", "scan0", "scan1"));
    return m;
}

Test(onnx, loop_scan_outputs_stack_each_iterations_values)
{
    Onnx__ModelProto *m = scanning_loop(false);
    size_t len;
    uint8_t *buf = pack(m, &len);
    vq_scope *s;
    vq_program *p;
    cr_assert_eq(vq_scope_new(&s), 0);
    struct run r = run_new();
    vq_tensor *tx, *tm;
    cr_assert_eq(vq_tensor_from(&tx, VQ_F32, 1, (int64_t[]){3}, (const float[]){1, 2, 3}), 0);
    for (int64_t mv = 0; mv < 5; mv += 4) {
        cr_assert_eq(vq_tensor_from(&tm, VQ_I64, 0, NULL, &mv), 0);
        vq_onnx_value offer = {.name = "M", .tensor = tm};
        vq_onnx_opts opts = {.values = &offer, .nvalues = 1};
        cr_assert_eq(vq_program_from_onnx_opts(&p, s, buf, len, &opts), 0, "%s", vq_errmsg());
        vq_feed feeds[2] = {{"x", tx}, {"M", tm}};
        vq_fetch f[3] = {{"y", NULL}, {"scan0", NULL}, {"scan1", NULL}};
        cr_assert_eq(vq_exec_run(r.ex, p, s, feeds, 2, f, 3), 0, "%s", vq_errmsg());
        cr_assert_eq(vq_tensor_ndim(f[1].tensor), 2);
        cr_assert_eq(vq_tensor_shape(f[1].tensor)[0], mv);
        cr_assert_eq(vq_tensor_shape(f[1].tensor)[1], 3);
        cr_assert_eq(vq_tensor_ndim(f[2].tensor), 1);
        cr_assert_eq(vq_tensor_shape(f[2].tensor)[0], mv);
        const float *y = vq_tensor_data(f[0].tensor), *s0 = vq_tensor_data(f[1].tensor),
                    *s1 = vq_tensor_data(f[2].tensor);
        for (int j = 0; j < 3; j++)
            cr_assert_float_eq(y[j], (float)((j + 1) << mv), 0);
        for (int i = 0; i < mv; i++) {
            cr_assert_float_eq(s1[i], (float)i, 0);
            for (int j = 0; j < 3; j++)
                cr_assert_float_eq(s0[i * 3 + j], (float)(((j + 1) << (i + 1)) + i), 0,
                                   "M %lld, row %d, col %d", (long long)mv, i, j);
        }
        for (int k = 0; k < 3; k++)
            vq_tensor_release(f[k].tensor);
        vq_tensor_release(tm);
        vq_program_free(p);
    }
    /* M not offered: the scans' dim 0 is the run's (was VQ_ENOSYS) */
    cr_assert_eq(vq_program_from_onnx(&p, s, buf, len), 0, "%s", vq_errmsg());
    for (int64_t mv = 0; mv < 7; mv += 3) {
        cr_assert_eq(vq_tensor_from(&tm, VQ_I64, 0, NULL, &mv), 0);
        vq_feed feeds[2] = {{"x", tx}, {"M", tm}};
        vq_fetch f[2] = {{"scan0", NULL}, {"scan1", NULL}};
        cr_assert_eq(vq_exec_run(r.ex, p, s, feeds, 2, f, 2), 0, "%s", vq_errmsg());
        cr_assert_eq(vq_tensor_shape(f[0].tensor)[0], mv);
        cr_assert_eq(vq_tensor_shape(f[1].tensor)[0], mv);
        const float *s0 = vq_tensor_data(f[0].tensor);
        for (int i = 0; i < mv; i++)
            for (int j = 0; j < 3; j++)
                cr_assert_float_eq(s0[i * 3 + j], (float)(((j + 1) << (i + 1)) + i), 0);
        for (int k = 0; k < 2; k++)
            vq_tensor_release(f[k].tensor);
        vq_tensor_release(tm);
    }
    vq_program_free(p);
    free(buf);
    onnx__model_proto__free_unpacked(m, NULL);
    /* a cond_out that ends the loop early, after the 5th iteration (sum
     * 192): the scans have the 5 iterations that ran (was VQ_ENOSYS) */
    m = scanning_loop(true);
    buf = pack(m, &len);
    int64_t ten = 10;
    cr_assert_eq(vq_tensor_from(&tm, VQ_I64, 0, NULL, &ten), 0);
    vq_onnx_value offer = {.name = "M", .tensor = tm};
    vq_onnx_opts opts = {.values = &offer, .nvalues = 1};
    cr_assert_eq(vq_program_from_onnx_opts(&p, s, buf, len, &opts), 0, "%s", vq_errmsg());
    vq_feed feeds[2] = {{"x", tx}, {"M", tm}};
    vq_fetch f[3] = {{"y", NULL}, {"scan0", NULL}, {"scan1", NULL}};
    cr_assert_eq(vq_exec_run(r.ex, p, s, feeds, 2, f, 3), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_tensor_shape(f[1].tensor)[0], 5);
    cr_assert_eq(vq_tensor_shape(f[2].tensor)[0], 5);
    const float *y = vq_tensor_data(f[0].tensor), *s0 = vq_tensor_data(f[1].tensor),
                *s1 = vq_tensor_data(f[2].tensor);
    for (int i = 0; i < 5; i++) {
        cr_assert_float_eq(s1[i], (float)i, 0);
        for (int j = 0; j < 3; j++)
            cr_assert_float_eq(s0[i * 3 + j], (float)(((j + 1) << (i + 1)) + i), 0);
    }
    for (int j = 0; j < 3; j++)
        cr_assert_float_eq(y[j], (float)((j + 1) << 5), 0);
    for (int k = 0; k < 3; k++)
        vq_tensor_release(f[k].tensor);
    vq_program_free(p);
    vq_tensor_release(tm);
    vq_tensor_release(tx);
    vq_scope_free(s);
    run_free(&r);
    free(buf);
    onnx__model_proto__free_unpacked(m, NULL);
}

/* acc = x; M times: acc += one, with scan outputs acc + i ([3] per
 * iteration) and i. */
static Onnx__ModelProto *counting_loop(void)
{
    Onnx__ModelProto *m = model_new(13);
    add_input(m, "x", 1, (int64_t[]){3});
    graph_io(&m->graph->input, &m->graph->n_input, "M", ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 0,
             NULL);
    add_init(m, "one", 1, (int64_t[]){1}, (const float[]){1});
    Onnx__GraphProto *b = subgraph("body");
    graph_io(&b->input, &b->n_input, "i", ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 0, NULL);
    graph_io(&b->input, &b->n_input, "c_in", ONNX__TENSOR_PROTO__DATA_TYPE__BOOL, 0, NULL);
    graph_io(&b->input, &b->n_input, "acc_in", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 1,
             (int64_t[]){3});
    graph_node(b, "Identity", NAMES("c_in"), NAMES("c_out"));
    graph_node(b, "Add", NAMES("acc_in", "one"), NAMES("acc_out"));
    attr_int(graph_node(b, "Cast", NAMES("i"), NAMES("fi")), "to",
             ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT);
    graph_node(b, "Add", NAMES("acc_out", "fi"), NAMES("s0"));
    Onnx__ModelProto bm = {.graph = b};
    add_outputs(&bm, NAMES("c_out", "acc_out", "s0", "fi"));
    Onnx__NodeProto *n =
        add_node(m, "Loop", "loop", NAMES("M", "", "x"), NAMES("y", "scan0", "scan1"));
    attr_graph(n, "body", b);
    add_outputs(m, NAMES("y", "scan0", "scan1"));
    return m;
}

/* Ten thousand iterations (scan outputs were a carried [M, ...] buffer
 * rebuilt in every iteration, O(M^2); now each iteration's values are
 * stacked once at the end): every row against the loop done in C, with M
 * known at import (offered) and not. */
Test(onnx, a_loop_of_ten_thousand_iterations_scans_every_one, .timeout = 120)
{
    Onnx__ModelProto *m = counting_loop();
    size_t len;
    uint8_t *buf = pack(m, &len);
    vq_scope *s;
    cr_assert_eq(vq_scope_new(&s), 0);
    struct run r = run_new();
    const float x[3] = {0.5f, -2, 1000};
    vq_tensor *tx, *tm;
    int64_t mv = 10000;
    cr_assert_eq(vq_tensor_from(&tx, VQ_F32, 1, (int64_t[]){3}, x), 0);
    cr_assert_eq(vq_tensor_from(&tm, VQ_I64, 0, NULL, &mv), 0);
    for (int offered = 0; offered < 2; offered++) {
        vq_onnx_value offer = {.name = "M", .tensor = tm};
        vq_onnx_opts opts = {.values = &offer, .nvalues = offered};
        vq_program *p;
        cr_assert_eq(vq_program_from_onnx_opts(&p, s, buf, len, &opts), 0, "%s", vq_errmsg());
        vq_feed feeds[2] = {{"x", tx}, {"M", tm}};
        vq_fetch f[3] = {{"y", NULL}, {"scan0", NULL}, {"scan1", NULL}};
        cr_assert_eq(vq_exec_run(r.ex, p, s, feeds, 2, f, 3), 0, "%s", vq_errmsg());
        cr_assert(vq_tensor_ndim(f[1].tensor) == 2 && vq_tensor_shape(f[1].tensor)[0] == mv &&
                  vq_tensor_shape(f[1].tensor)[1] == 3);
        cr_assert(vq_tensor_ndim(f[2].tensor) == 1 && vq_tensor_shape(f[2].tensor)[0] == mv);
        const float *y = vq_tensor_data(f[0].tensor), *s0 = vq_tensor_data(f[1].tensor),
                    *s1 = vq_tensor_data(f[2].tensor);
        float acc[3] = {x[0], x[1], x[2]};
        for (int64_t i = 0; i < mv; i++) {
            cr_assert(s1[i] == (float)i, "scan1[%lld] = %g", (long long)i, s1[i]);
            for (int j = 0; j < 3; j++) {
                acc[j] += 1.0f;
                float want = acc[j] + (float)i;
                cr_assert(s0[i * 3 + j] == want, "offered %d: scan0[%lld][%d] = %g, want %g",
                          offered, (long long)i, j, s0[i * 3 + j], want);
            }
        }
        for (int j = 0; j < 3; j++)
            cr_assert(y[j] == acc[j]);
        for (int k = 0; k < 3; k++)
            vq_tensor_release(f[k].tensor);
        vq_program_free(p);
    }
    vq_tensor_release(tm);
    vq_tensor_release(tx);
    vq_scope_free(s);
    run_free(&r);
    free(buf);
    onnx__model_proto__free_unpacked(m, NULL);
}

/* A Loop of M (an initializer) iterations whose body slices data[i : i +
 * 2] (starts and ends move with the iteration: a gather of i + [0, 2))
 * and scans it out. M = 5 runs the last window past data's 5 elements,
 * where ONNX would clamp it: the run fails naming the index. */
static Onnx__ModelProto *moving_slice_loop(int64_t iters)
{
    Onnx__ModelProto *m = model_new(13);
    add_input(m, "x", 0, NULL);
    add_init_ints(m, "M", 1, (int64_t[]){iters});
    add_init(m, "data", 1, (int64_t[]){5}, (const float[]){1, 2, 3, 4, 5});
    add_init_ints(m, "two", 1, (int64_t[]){2});
    add_init_ints(m, "ax0", 1, (int64_t[]){0});
    Onnx__GraphProto *b = subgraph("body");
    graph_io(&b->input, &b->n_input, "i", ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 0, NULL);
    graph_io(&b->input, &b->n_input, "c_in", ONNX__TENSOR_PROTO__DATA_TYPE__BOOL, 0, NULL);
    graph_io(&b->input, &b->n_input, "acc_in", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 0, NULL);
    graph_node(b, "Identity", NAMES("c_in"), NAMES("c_out"));
    graph_node(b, "Unsqueeze", NAMES("i", "ax0"), NAMES("s1"));
    graph_node(b, "Add", NAMES("s1", "two"), NAMES("e1"));
    graph_node(b, "Slice", NAMES("data", "s1", "e1"), NAMES("win"));
    Onnx__NodeProto *rs = graph_node(b, "ReduceSum", NAMES("win"), NAMES("wsum"));
    attr_int(rs, "keepdims", 0);
    graph_node(b, "Add", NAMES("acc_in", "wsum"), NAMES("acc_out"));
    Onnx__ModelProto bm = {.graph = b};
    add_outputs(&bm, NAMES("c_out", "acc_out", "win"));
    Onnx__NodeProto *n = add_node(m, "Loop", "loop", NAMES("M", "", "x"), NAMES("y", "wins"));
    attr_graph(n, "body", b);
    add_outputs(m, NAMES("y", "wins"));
    return m;
}

Test(onnx, a_slice_moving_with_the_loop_iteration_is_a_gather)
{
    vq_scope *s;
    cr_assert_eq(vq_scope_new(&s), 0);
    struct run r = run_new();
    vq_tensor *tx;
    float zero = 0;
    cr_assert_eq(vq_tensor_from(&tx, VQ_F32, 0, NULL, &zero), 0);
    for (int64_t iters = 3; iters <= 5; iters += 2) {
        Onnx__ModelProto *m = moving_slice_loop(iters);
        size_t len;
        uint8_t *buf = pack(m, &len);
        vq_program *p;
        cr_assert_eq(vq_program_from_onnx(&p, s, buf, len), 0, "%s", vq_errmsg());
        vq_feed feed = {"x", tx};
        vq_fetch f[2] = {{"y", NULL}, {"wins", NULL}};
        int rc = vq_exec_run(r.ex, p, s, &feed, 1, f, 2);
        if (iters == 3) {
            cr_assert_eq(rc, 0, "%s", vq_errmsg());
            cr_assert_float_eq(*(const float *)vq_tensor_data(f[0].tensor), 3 + 5 + 7, 0);
            const double want[6] = {1, 2, 2, 3, 3, 4};
            cr_assert_eq(vq_tensor_ndim(f[1].tensor), 2);
            cr_assert_eq(vq_tensor_shape(f[1].tensor)[0], 3);
            cr_assert_eq(vq_tensor_shape(f[1].tensor)[1], 2);
            const float *w = vq_tensor_data(f[1].tensor);
            for (int k = 0; k < 6; k++)
                cr_assert_float_eq(w[k], (float)want[k], 0, "element %d", k);
            vq_tensor_release(f[0].tensor);
            vq_tensor_release(f[1].tensor);
        } else {
            cr_assert_lt(rc, 0);
            cr_assert(strstr(vq_errmsg(), "index 5"), "%s", vq_errmsg());
        }
        vq_program_free(p);
        free(buf);
        onnx__model_proto__free_unpacked(m, NULL);
    }
    vq_tensor_release(tx);
    vq_scope_free(s);
    run_free(&r);
}

/* t, on the host (released when copied). */
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

/* Scan (opset 16) with a state and two scan inputs: A [T, 2] forward
 * along axis 0, B [2, T] reversed along axis 1; the body's state
 * s + a * b is output 0 and scan output Y0 (forward, axis 0), a - b is
 * scan output Y1 (reversed, axis 1: [2, T]). With T fixed in the model
 * and with T a dim the feed gives (the scanned length read when the
 * while starts), on the CPU and the emulated GPU, against a plain loop. */
static Onnx__ModelProto *scan_model(int64_t ta, int64_t tb)
{
    Onnx__ModelProto *m = model_new(16);
    add_input(m, "s0", 1, (int64_t[]){2});
    add_input(m, "A", 2, (int64_t[]){ta, 2});
    add_input(m, "B", 2, (int64_t[]){2, tb});
    Onnx__GraphProto *b = subgraph("body");
    const int32_t f = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    graph_io(&b->input, &b->n_input, "s_in", f, 1, (int64_t[]){2});
    graph_io(&b->input, &b->n_input, "a", f, 1, (int64_t[]){2});
    graph_io(&b->input, &b->n_input, "b", f, 1, (int64_t[]){2});
    graph_node(b, "Mul", NAMES("a", "b"), NAMES("ab"));
    graph_node(b, "Add", NAMES("s_in", "ab"), NAMES("s_out"));
    graph_node(b, "Identity", NAMES("s_out"), NAMES("y0"));
    graph_node(b, "Sub", NAMES("a", "b"), NAMES("y1"));
    Onnx__ModelProto bm = {.graph = b};
    add_outputs(&bm, NAMES("s_out", "y0", "y1"));
    Onnx__NodeProto *n = add_node(m, "Scan", "scan", NAMES("s0", "A", "B"), NAMES("s", "Y0", "Y1"));
    attr_graph(n, "body", b);
    attr_int(n, "num_scan_inputs", 2);
    attr_ints(n, "scan_input_directions", 2, (const int64_t[]){0, 1});
    attr_ints(n, "scan_input_axes", 2, (const int64_t[]){0, 1});
    attr_ints(n, "scan_output_directions", 2, (const int64_t[]){0, 1});
    attr_ints(n, "scan_output_axes", 2, (const int64_t[]){0, -1});
    add_outputs(m, NAMES("s", "Y0", "Y1"));
    return m;
}

Test(onnx, scan_slices_its_inputs_in_either_direction_and_stacks_its_outputs_on_any_axis)
{
    setenv("VARQ_GPU_BACKEND", "emulated", 0);
    vq_engine *e;
    vq_engine_opts eo = {.kind = VQ_ENGINE_THREADED, .cpu_workers = 2};
    cr_assert_eq(vq_engine_new(&e, &eo), 0, "%s", vq_errmsg());
    for (int dynamic = 0; dynamic < 2; dynamic++) {
        struct imported im = import_ok(dynamic ? scan_model(-1, -1) : scan_model(5, 5));
        for (int gpu = 0; gpu < 2; gpu++) {
            vq_exec *ex;
            vq_exec_opts xo = {.device = {gpu ? VQ_DEV_GPU : VQ_DEV_CPU, 0}};
            cr_assert_eq(vq_exec_new(&ex, e, &xo), 0, "%s", vq_errmsg());
            for (int64_t t = dynamic ? 1 : 5; t <= 5; t += 2) {
                float s0[2] = {0.5f, -1}, a[10], bb[10];
                for (int i = 0; i < 2 * t; i++) {
                    a[i] = (float)(i * 5 % 7) - 3;
                    bb[i] = (float)(i * 3 % 11) * 0.25f;
                }
                /* the reference: b_i = B[:, t - 1 - i] */
                float s[2] = {s0[0], s0[1]}, y0[10], y1[10];
                for (int64_t i = 0; i < t; i++)
                    for (int j = 0; j < 2; j++) {
                        float av = a[i * 2 + j], bv = bb[j * t + (t - 1 - i)];
                        s[j] += av * bv;
                        y0[i * 2 + j] = s[j];
                        y1[j * t + (t - 1 - i)] = av - bv; /* reversed, dim 0 moved last */
                    }
                vq_tensor *in[3], *dev[3];
                cr_assert_eq(vq_tensor_from(&in[0], VQ_F32, 1, (int64_t[]){2}, s0), 0);
                cr_assert_eq(vq_tensor_from(&in[1], VQ_F32, 2, (int64_t[]){t, 2}, a), 0);
                cr_assert_eq(vq_tensor_from(&in[2], VQ_F32, 2, (int64_t[]){2, t}, bb), 0);
                for (int i = 0; i < 3; i++)
                    cr_assert_eq(vq_tensor_copy_to(e, in[i], xo.device, &dev[i]), 0, "%s",
                                 vq_errmsg());
                vq_feed feeds[3] = {{"s0", dev[0]}, {"A", dev[1]}, {"B", dev[2]}};
                vq_fetch fo[3] = {{"s", NULL}, {"Y0", NULL}, {"Y1", NULL}};
                cr_assert_eq(vq_exec_run(ex, im.p, im.s, feeds, 3, fo, 3), 0,
                             "dynamic %d gpu %d: %s", dynamic, gpu, vq_errmsg());
                const float *want[3] = {s, y0, y1};
                const int64_t shapes[3][2] = {{2, 0}, {t, 2}, {2, t}};
                for (int k = 0; k < 3; k++) {
                    vq_tensor *h = host_of(e, fo[k].tensor);
                    cr_assert_eq(vq_tensor_ndim(h), k ? 2 : 1);
                    for (int d = 0; d < vq_tensor_ndim(h); d++)
                        cr_assert_eq(vq_tensor_shape(h)[d], shapes[k][d],
                                     "output %d dim %d, T %lld", k, d, (long long)t);
                    const float *got = vq_tensor_data(h);
                    for (int64_t i = 0; i < vq_tensor_numel(h); i++)
                        cr_assert_float_eq(got[i], want[k][i], 1e-6,
                                           "dynamic %d gpu %d T %lld output %d [%lld]", dynamic,
                                           gpu, (long long)t, k, (long long)i);
                    vq_tensor_release(h);
                }
                for (int i = 0; i < 3; i++) {
                    vq_tensor_release(in[i]);
                    vq_tensor_release(dev[i]);
                }
            }
            vq_exec_free(ex);
        }
        imported_free(&im);
    }
    vq_engine_free(e);
}

/* Scan of opset 8: states [batch, 2], scan inputs [batch, T, 2] (the
 * second reversed); each batch element scanned on its own, as a while
 * over the batch around the scan. */
Test(onnx, scan_of_opset_8_scans_each_batch_element)
{
    const int64_t nb = 3, t = 4;
    Onnx__ModelProto *m = model_new(8);
    add_input(m, "s0", 2, (int64_t[]){nb, 2});
    add_input(m, "A", 3, (int64_t[]){nb, t, 2});
    add_input(m, "B", 3, (int64_t[]){nb, t, 2});
    Onnx__GraphProto *b = subgraph("body");
    const int32_t f = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    graph_io(&b->input, &b->n_input, "s_in", f, 1, (int64_t[]){2});
    graph_io(&b->input, &b->n_input, "a", f, 1, (int64_t[]){2});
    graph_io(&b->input, &b->n_input, "b", f, 1, (int64_t[]){2});
    graph_node(b, "Mul", NAMES("a", "b"), NAMES("ab"));
    graph_node(b, "Add", NAMES("s_in", "ab"), NAMES("s_out"));
    graph_node(b, "Sub", NAMES("a", "b"), NAMES("y"));
    Onnx__ModelProto bm = {.graph = b};
    add_outputs(&bm, NAMES("s_out", "y"));
    Onnx__NodeProto *n = add_node(m, "Scan", "scan", NAMES("", "s0", "A", "B"), NAMES("s", "Y"));
    attr_graph(n, "body", b);
    attr_int(n, "num_scan_inputs", 2);
    attr_ints(n, "directions", 2, (const int64_t[]){0, 1});
    add_outputs(m, NAMES("s", "Y"));
    struct imported im = import_ok(m);
    struct run r = run_new();
    float s0[6], a[24], bb[24], s[6], y[24];
    for (int i = 0; i < 24; i++) {
        a[i] = (float)(i * 5 % 7) - 3;
        bb[i] = (float)(i * 3 % 11) * 0.25f;
    }
    for (int i = 0; i < 6; i++)
        s[i] = s0[i] = (float)i - 2.5f;
    for (int e = 0; e < nb; e++)
        for (int i = 0; i < t; i++)
            for (int j = 0; j < 2; j++) {
                float av = a[(e * t + i) * 2 + j], bv = bb[(e * t + (t - 1 - i)) * 2 + j];
                s[e * 2 + j] += av * bv;
                y[(e * t + i) * 2 + j] = av - bv;
            }
    vq_tensor *in[3];
    cr_assert_eq(vq_tensor_from(&in[0], VQ_F32, 2, (int64_t[]){nb, 2}, s0), 0);
    cr_assert_eq(vq_tensor_from(&in[1], VQ_F32, 3, (int64_t[]){nb, t, 2}, a), 0);
    cr_assert_eq(vq_tensor_from(&in[2], VQ_F32, 3, (int64_t[]){nb, t, 2}, bb), 0);
    vq_feed feeds[3] = {{"s0", in[0]}, {"A", in[1]}, {"B", in[2]}};
    vq_fetch fo[2] = {{"s", NULL}, {"Y", NULL}};
    cr_assert_eq(vq_exec_run(r.ex, im.p, im.s, feeds, 3, fo, 2), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_tensor_numel(fo[0].tensor), 6);
    cr_assert_eq(vq_tensor_ndim(fo[1].tensor), 3);
    cr_assert_eq(vq_tensor_shape(fo[1].tensor)[1], t);
    cr_assert_eq(memcmp(vq_tensor_data(fo[0].tensor), s, sizeof s), 0);
    cr_assert_eq(memcmp(vq_tensor_data(fo[1].tensor), y, sizeof y), 0);
    for (int i = 0; i < 3; i++)
        vq_tensor_release(in[i]);
    for (int i = 0; i < 2; i++)
        vq_tensor_release(fo[i].tensor);
    imported_free(&im);
    run_free(&r);
}

Test(onnx, scan_inputs_of_different_lengths_are_refused)
{
    Onnx__ModelProto *m = scan_model(5, 4);
    size_t len;
    uint8_t *buf = pack(m, &len);
    vq_scope *s;
    vq_program *p = NULL;
    cr_assert_eq(vq_scope_new(&s), 0);
    cr_assert_eq(vq_program_from_onnx(&p, s, buf, len), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "scan input 1 has 4 steps, an earlier one 5"), "%s", vq_errmsg());
    vq_scope_free(s);
    free(buf);
    onnx__model_proto__free_unpacked(m, NULL);
}

/* ---- batch normalization in training mode ---- */

/* loss = reduce(op(y, t)) (node name, its output mid), to a scalar
 * (keepdims 0): what the training tests minimize. */
static void add_loss(Onnx__ModelProto *m, const char *op, const char *name, const char *mid,
                     const char *reduce)
{
    add_node(m, op, name, NAMES("y", "t"), NAMES(mid));
    Onnx__NodeProto *r = add_node(m, reduce, "l", NAMES(mid), NAMES("loss"));
    attr_int(r, "keepdims", 0);
}

/* y, rm, rv = BatchNormalization(x [4, 2, 3], scale, bias, mean, var)
 * with training_mode 1 (opset 15) and momentum 0.8; loss =
 * ReduceSumSquare(y - t). */
static Onnx__ModelProto *bn_training(void)
{
    Onnx__ModelProto *m = model_new(15);
    add_input(m, "x", 3, (int64_t[]){4, 2, 3});
    add_init(m, "scale", 1, (int64_t[]){2}, (const float[]){1.5f, 0.5f});
    add_init(m, "bias", 1, (int64_t[]){2}, (const float[]){0.2f, -0.1f});
    add_init(m, "mean", 1, (int64_t[]){2}, (const float[]){0.1f, 0.2f});
    add_init(m, "var", 1, (int64_t[]){2}, (const float[]){1.0f, 2.0f});
    float t[24];
    for (int i = 0; i < 24; i++)
        t[i] = (float)cos(0.4 * i);
    add_init(m, "t", 3, (int64_t[]){4, 2, 3}, t);
    Onnx__NodeProto *n =
        add_node(m, "BatchNormalization", "bn", NAMES("x", "scale", "bias", "mean", "var"),
                 NAMES("y", "rm", "rv"));
    attr_int(n, "training_mode", 1);
    attr_float(n, "momentum", 0.8f);
    add_loss(m, "Sub", "d", "e", "ReduceSumSquare");
    add_outputs(m, NAMES("y", "rm", "rv", "loss"));
    return m;
}

Test(onnx, batch_normalization_in_training_mode_uses_and_trains_through_batch_statistics)
{
    Onnx__ModelProto *m = bn_training();
    struct imported im = import_ok(m);
    vq_program *startup;
    float x[24];
    for (int i = 0; i < 24; i++)
        x[i] = (float)sin(1.1 * i) * (1 + i % 3);
    /* the reference: batch mean and biased variance per channel */
    const double sc[2] = {1.5, 0.5}, bi[2] = {0.2, -0.1}, mean[2] = {0.1, 0.2}, var[2] = {1, 2};
    double mu[2] = {0}, v[2] = {0};
    for (int i = 0; i < 24; i++)
        mu[i / 3 % 2] += x[i] / 12.0;
    for (int i = 0; i < 24; i++)
        v[i / 3 % 2] += (x[i] - mu[i / 3 % 2]) * (x[i] - mu[i / 3 % 2]) / 12.0;
    struct run r = run_new();
    vq_tensor *tx;
    cr_assert_eq(vq_tensor_from(&tx, VQ_F32, 3, (int64_t[]){4, 2, 3}, x), 0);
    vq_feed feed = {"x", tx};
    vq_fetch f[4] = {{"y", NULL}, {"rm", NULL}, {"rv", NULL}, {"loss", NULL}};
    cr_assert_eq(vq_exec_run(r.ex, im.p, im.s, &feed, 1, f, 4), 0, "%s", vq_errmsg());
    const float *y = vq_tensor_data(f[0].tensor), *rm = vq_tensor_data(f[1].tensor),
                *rv = vq_tensor_data(f[2].tensor);
    for (int i = 0; i < 24; i++) {
        int c = i / 3 % 2;
        double want = (x[i] - mu[c]) / sqrt(v[c] + 1e-5) * sc[c] + bi[c];
        cr_assert_float_eq(y[i], want, 1e-5, "y[%d]: %g vs %g", i, y[i], want);
    }
    for (int c = 0; c < 2; c++) {
        cr_assert_float_eq(rm[c], 0.8 * mean[c] + 0.2 * mu[c], 1e-6, "rm[%d]", c);
        cr_assert_float_eq(rv[c], 0.8 * var[c] + 0.2 * v[c], 1e-6, "rv[%d]", c);
    }
    double first = *(float *)vq_tensor_data(f[3].tensor);
    for (int j = 0; j < 4; j++)
        vq_tensor_release(f[j].tensor);
    /* autodiff reaches the scale, the bias and the target through the batch
     * statistics; the running ones are constants */
    vq_optimizer sgd = {.kind = VQ_OPT_SGD, .learning_rate = 0.02};
    cr_assert_eq(vq_program_new(&startup), 0);
    cr_assert_geq(vq_optimizer_minimize(im.p, startup, "loss", &sgd), 3, "%s", vq_errmsg());
    double last = first;
    for (int step = 0; step < 20; step++) {
        vq_fetch fl = {"loss", NULL};
        cr_assert_eq(vq_exec_run(r.ex, im.p, im.s, &feed, 1, &fl, 1), 0, "%s", vq_errmsg());
        last = *(float *)vq_tensor_data(fl.tensor);
        vq_tensor_release(fl.tensor);
    }
    cr_assert_lt(last, 0.5 * first, "20 SGD steps: %g -> %g", first, last);
    const float *trained = vq_tensor_data(vq_scope_get(im.s, "scale"));
    cr_assert_neq(trained[0], 1.5f, "the scale was trained");
    const float *rmean = vq_tensor_data(vq_scope_get(im.s, "mean"));
    cr_assert_eq(rmean[0], 0.1f, "the running mean is not a parameter");
    vq_tensor_release(tx);
    imported_free(&im);
    run_free(&r);
    vq_program_free(startup);
}

/* ---- LayerNormalization ---- */

/* y = LayerNormalization(x [3, 2, 4], scale [2, 4], bias [2, 4], axis 1,
 * epsilon 0.01) with its Mean and InvStdDev, and loss = sum(y * t). */
static Onnx__ModelProto *layer_norm_model(void)
{
    Onnx__ModelProto *m = model_new(17);
    add_input(m, "x", 3, (int64_t[]){3, 2, 4});
    float sc[8], bi[8], t[24];
    for (int i = 0; i < 8; i++) {
        sc[i] = 0.5f + 0.25f * (float)i;
        bi[i] = 0.1f * (float)(i - 3);
    }
    for (int i = 0; i < 24; i++)
        t[i] = (float)cos(0.7 * i);
    add_init(m, "scale", 2, (int64_t[]){2, 4}, sc);
    add_init(m, "bias", 2, (int64_t[]){2, 4}, bi);
    add_init(m, "t", 3, (int64_t[]){3, 2, 4}, t);
    Onnx__NodeProto *n = add_node(m, "LayerNormalization", "ln", NAMES("x", "scale", "bias"),
                                  NAMES("y", "mean", "inv"));
    attr_int(n, "axis", 1);
    attr_float(n, "epsilon", 0.01f);
    add_loss(m, "Mul", "yt", "p", "ReduceSum");
    add_outputs(m, NAMES("y", "mean", "inv", "loss"));
    return m;
}

Test(onnx, layer_normalization_matches_the_formula_and_trains_its_scale_and_bias)
{
    Onnx__ModelProto *m = layer_norm_model();
    struct imported im = import_ok(m);
    vq_program *startup;
    float x[24];
    for (int i = 0; i < 24; i++)
        x[i] = (float)sin(1.3 * i) * (1 + i % 5);
    /* the reference, per row of 8 (axes 1 and 2) */
    double mu[3] = {0}, inv[3] = {0}, nrm[24];
    for (int i = 0; i < 24; i++)
        mu[i / 8] += x[i] / 8.0;
    for (int i = 0; i < 24; i++)
        inv[i / 8] += (x[i] - mu[i / 8]) * (x[i] - mu[i / 8]) / 8.0;
    for (int r = 0; r < 3; r++)
        inv[r] = 1 / sqrt(inv[r] + 0.01);
    for (int i = 0; i < 24; i++)
        nrm[i] = (x[i] - mu[i / 8]) * inv[i / 8];
    struct run r = run_new();
    vq_tensor *tx;
    cr_assert_eq(vq_tensor_from(&tx, VQ_F32, 3, (int64_t[]){3, 2, 4}, x), 0);
    vq_feed feed = {"x", tx};
    vq_fetch f[3] = {{"y", NULL}, {"mean", NULL}, {"inv", NULL}};
    cr_assert_eq(vq_exec_run(r.ex, im.p, im.s, &feed, 1, f, 3), 0, "%s", vq_errmsg());
    const int64_t *ms = vq_tensor_shape(f[1].tensor);
    cr_assert_eq(vq_tensor_ndim(f[1].tensor), 3);
    cr_assert(ms[0] == 3 && ms[1] == 1 && ms[2] == 1,
              "Mean keeps the rank, 1 on the normalized axes");
    const float *y = vq_tensor_data(f[0].tensor), *fm = vq_tensor_data(f[1].tensor),
                *fi = vq_tensor_data(f[2].tensor);
    for (int i = 0; i < 24; i++) {
        double want = nrm[i] * (0.5 + 0.25 * (i % 8)) + 0.1 * (i % 8 - 3);
        cr_assert_float_eq(y[i], want, 1e-5, "y[%d]: %g vs %g", i, y[i], want);
    }
    for (int k = 0; k < 3; k++) {
        cr_assert_float_eq(fm[k], mu[k], 1e-5, "mean[%d]", k);
        cr_assert_float_eq(fi[k], inv[k], 1e-4 * inv[k], "inv[%d]", k);
    }
    for (int j = 0; j < 3; j++)
        vq_tensor_release(f[j].tensor);
    /* one SGD step: d loss / d scale[j] = sum over rows of nrm * t, and
     * d loss / d bias[j] = sum over rows of t */
    vq_optimizer sgd = {.kind = VQ_OPT_SGD, .learning_rate = 0.1};
    cr_assert_eq(vq_program_new(&startup), 0);
    cr_assert_geq(vq_optimizer_minimize(im.p, startup, "loss", &sgd), 2, "%s", vq_errmsg());
    vq_fetch fl = {"loss", NULL};
    cr_assert_eq(vq_exec_run(r.ex, im.p, im.s, &feed, 1, &fl, 1), 0, "%s", vq_errmsg());
    vq_tensor_release(fl.tensor);
    const float *sc = vq_tensor_data(vq_scope_get(im.s, "scale")),
                *bi = vq_tensor_data(vq_scope_get(im.s, "bias"));
    for (int j = 0; j < 8; j++) {
        double gs = 0, gb = 0;
        for (int k = 0; k < 3; k++) {
            gs += nrm[k * 8 + j] * cos(0.7 * (k * 8 + j));
            gb += cos(0.7 * (k * 8 + j));
        }
        cr_assert_float_eq(sc[j], 0.5 + 0.25 * j - 0.1 * gs, 1e-5, "scale[%d]", j);
        cr_assert_float_eq(bi[j], 0.1 * (j - 3) - 0.1 * gb, 1e-5, "bias[%d]", j);
    }
    vq_tensor_release(tx);
    imported_free(&im);
    run_free(&r);
    vq_program_free(startup);
}

Test(onnx, layer_normalization_of_integers_or_an_integer_stash_type_is_an_error)
{
    Onnx__ModelProto *m = layer_norm_model();
    Onnx__NodeProto *n = m->graph->node[0];
    attr_int(n, "stash_type", ONNX__TENSOR_PROTO__DATA_TYPE__INT32);
    size_t len;
    uint8_t *buf = pack(m, &len);
    vq_scope *s;
    vq_program *p = NULL;
    cr_assert_eq(vq_scope_new(&s), 0);
    cr_assert_eq(vq_program_from_onnx(&p, s, buf, len), VQ_ENOSYS);
    cr_assert_not_null(strstr(vq_errmsg(), "stash_type"), "%s", vq_errmsg());
    cr_assert_not_null(strstr(vq_errmsg(), "LayerNormalization"), "%s", vq_errmsg());
    cr_assert_null(p);
    vq_scope_free(s);
    free(buf);
    onnx__model_proto__free_unpacked(m, NULL);
}

/* ---- SoftmaxCrossEntropyLoss ---- */

/* loss = SoftmaxCrossEntropyLoss(x [4, 3] @ w [3, 5], labels, weights;
 * ignore_index 2, mean) and its log_prob: the weighted mean over the
 * samples whose label is not 2. */
static const int64_t SCE_LABELS[4] = {1, 2, 4, 0};
static const float SCE_WEIGHTS[5] = {0.5f, 2.0f, 1.0f, 1.5f, 0.75f};

static Onnx__ModelProto *sce_model(void)
{
    Onnx__ModelProto *m = model_new(13);
    add_input(m, "x", 2, (int64_t[]){4, 3});
    float w[15];
    for (int i = 0; i < 15; i++)
        w[i] = (float)sin(0.9 * i) * 0.5f;
    add_init(m, "w", 2, (int64_t[]){3, 5}, w);
    add_init(m, "weights", 1, (int64_t[]){5}, SCE_WEIGHTS);
    add_init_ints(m, "labels", 4, SCE_LABELS);
    add_node(m, "MatMul", "mm", NAMES("x", "w"), NAMES("logits"));
    Onnx__NodeProto *n = add_node(m, "SoftmaxCrossEntropyLoss", "sce",
                                  NAMES("logits", "labels", "weights"), NAMES("loss", "lp"));
    attr_int(n, "ignore_index", 2);
    add_outputs(m, NAMES("loss", "lp"));
    return m;
}

Test(onnx, softmax_cross_entropy_loss_weights_and_ignores_classes_and_trains)
{
    Onnx__ModelProto *m = sce_model();
    struct imported im = import_ok(m);
    vq_program *startup;
    float x[12];
    double w[15], lg[4][5], sm[4][5], lp[4][5];
    for (int i = 0; i < 12; i++)
        x[i] = (float)cos(1.7 * i);
    const float *w0 = vq_tensor_data(vq_scope_get(im.s, "w"));
    for (int i = 0; i < 15; i++)
        w[i] = w0[i];
    double num = 0, den = 0;
    for (int i = 0; i < 4; i++) {
        double mx = -1e300, z = 0;
        for (int k = 0; k < 5; k++) {
            lg[i][k] = 0;
            for (int j = 0; j < 3; j++)
                lg[i][k] += x[i * 3 + j] * w[j * 5 + k];
            mx = lg[i][k] > mx ? lg[i][k] : mx;
        }
        for (int k = 0; k < 5; k++)
            z += exp(lg[i][k] - mx);
        for (int k = 0; k < 5; k++) {
            lp[i][k] = lg[i][k] - mx - log(z);
            sm[i][k] = exp(lp[i][k]);
        }
        double wi = SCE_LABELS[i] == 2 ? 0 : SCE_WEIGHTS[SCE_LABELS[i]];
        num -= wi * lp[i][SCE_LABELS[i]];
        den += wi;
    }
    struct run r = run_new();
    vq_tensor *tx;
    cr_assert_eq(vq_tensor_from(&tx, VQ_F32, 2, (int64_t[]){4, 3}, x), 0);
    vq_feed feed = {"x", tx};
    vq_fetch f[2] = {{"loss", NULL}, {"lp", NULL}};
    cr_assert_eq(vq_exec_run(r.ex, im.p, im.s, &feed, 1, f, 2), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_tensor_ndim(f[0].tensor), 0, "the mean is a scalar");
    float loss = *(const float *)vq_tensor_data(f[0].tensor);
    cr_assert_float_eq(loss, num / den, 1e-5, "loss %g vs %g", loss, num / den);
    const float *flp = vq_tensor_data(f[1].tensor);
    for (int i = 0; i < 20; i++)
        cr_assert_float_eq(flp[i], lp[i / 5][i % 5], 1e-5, "log_prob[%d]", i);
    for (int j = 0; j < 2; j++)
        vq_tensor_release(f[j].tensor);
    /* one SGD step: d loss / d logits[i][k] = w_i (softmax - one-hot) / sum w */
    vq_optimizer sgd = {.kind = VQ_OPT_SGD, .learning_rate = 0.5};
    cr_assert_eq(vq_program_new(&startup), 0);
    cr_assert_geq(vq_optimizer_minimize(im.p, startup, "loss", &sgd), 1, "%s", vq_errmsg());
    vq_fetch fl = {"loss", NULL};
    cr_assert_eq(vq_exec_run(r.ex, im.p, im.s, &feed, 1, &fl, 1), 0, "%s", vq_errmsg());
    vq_tensor_release(fl.tensor);
    const float *w1 = vq_tensor_data(vq_scope_get(im.s, "w"));
    for (int j = 0; j < 3; j++)
        for (int k = 0; k < 5; k++) {
            double g = 0;
            for (int i = 0; i < 4; i++) {
                double wi = SCE_LABELS[i] == 2 ? 0 : SCE_WEIGHTS[SCE_LABELS[i]];
                g += x[i * 3 + j] * wi * (sm[i][k] - (k == SCE_LABELS[i])) / den;
            }
            cr_assert_float_eq(w1[j * 5 + k], w[j * 5 + k] - 0.5 * g, 1e-5, "w[%d][%d]", j, k);
        }
    vq_tensor_release(tx);
    imported_free(&im);
    run_free(&r);
    vq_program_free(startup);
}

/* An empty string attribute (no bytes: protobuf-c's data is NULL) is
 * read as "", an empty list of ints as no ints (each was a memcpy from
 * NULL, which UBSan reports; found by tests/fuzz_onnx). */
Test(onnx, empty_string_and_ints_attributes_are_read_as_empty)
{
    Onnx__ModelProto *m = sce_model();
    Onnx__AttributeProto *a =
        attr(m->graph->node[1], "reduction", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING);
    a->has_s = 1;
    size_t len;
    uint8_t *buf = pack(m, &len);
    vq_scope *s;
    vq_program *p = NULL;
    cr_assert_eq(vq_scope_new(&s), 0);
    cr_assert_eq(vq_program_from_onnx(&p, s, buf, len), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "reduction") && strstr(vq_errmsg(), "\"\""), "%s", vq_errmsg());
    cr_assert_null(p);
    free(buf);
    onnx__model_proto__free_unpacked(m, NULL);
    /* a Transpose whose perm is [] */
    m = mlp();
    attr_ints(add_node(m, "Transpose", "t", NAMES("y"), NAMES("yt")), "perm", 0, (int64_t[]){0});
    buf = pack(m, &len);
    int rc = vq_program_from_onnx(&p, s, buf, len);
    cr_assert(rc == 0 || rc == VQ_EINVAL, "%d: %s", rc, vq_errmsg());
    vq_program_free(p);
    vq_scope_free(s);
    free(buf);
    onnx__model_proto__free_unpacked(m, NULL);
}

Test(onnx, a_loss_with_an_unknown_reduction_is_an_error)
{
    Onnx__ModelProto *m = sce_model();
    Onnx__AttributeProto *a =
        attr(m->graph->node[1], "reduction", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING);
    a->s.data = (uint8_t *)strdup("median");
    a->s.len = 6;
    a->has_s = 1;
    size_t len;
    uint8_t *buf = pack(m, &len);
    vq_scope *s;
    vq_program *p = NULL;
    cr_assert_eq(vq_scope_new(&s), 0);
    cr_assert_eq(vq_program_from_onnx(&p, s, buf, len), VQ_EINVAL);
    cr_assert_not_null(strstr(vq_errmsg(), "median"), "%s", vq_errmsg());
    cr_assert_not_null(strstr(vq_errmsg(), "sce"), "the node's name: %s", vq_errmsg());
    cr_assert_null(p);
    vq_scope_free(s);
    free(buf);
    onnx__model_proto__free_unpacked(m, NULL);
}

/* ---- Resize ---- */

/* x [1, 1, 2, 2] -> Resize "up" (opset 13) -> y, inputs as given. */
static Onnx__ModelProto *resize_model(const char *const *ins)
{
    Onnx__ModelProto *m = model_new(13);
    add_input(m, "x", 4, (int64_t[]){1, 1, 2, 2});
    add_output(m, "y");
    add_node(m, "Resize", "up", ins, NAMES("y"));
    return m;
}

Test(onnx, resize_needs_its_scales_sizes_and_roi_known_at_import)
{
    /* scales a graph input no one offered */
    Onnx__ModelProto *m = resize_model(NAMES("x", "", "scales"));
    add_input(m, "scales", 1, (int64_t[]){4});
    expect_error(m, VQ_ENOSYS,
                 NAMES("node 0 (Resize \"up\")", "input 2 (scales) \"scales\" must be known "
                                                 "when the model is imported"));
    /* both given */
    m = resize_model(NAMES("x", "", "scales", "sizes"));
    add_init(m, "scales", 1, (int64_t[]){4}, (const float[]){1, 1, 2, 2});
    add_init_ints(m, "sizes", 4, (const int64_t[]){1, 1, 4, 4});
    expect_error(m, VQ_EINVAL, NAMES("Resize \"up\"", "both scales and sizes are given"));
    /* neither: an empty scales */
    m = resize_model(NAMES("x", "", "scales"));
    add_init(m, "scales", 1, (int64_t[]){0}, (const float[]){0});
    expect_error(m, VQ_EINVAL, NAMES("Resize \"up\"", "neither scales nor sizes is given"));
    /* tf_crop_and_resize without its roi */
    m = resize_model(NAMES("x", "", "", "sizes"));
    add_init_ints(m, "sizes", 4, (const int64_t[]){1, 1, 3, 3});
    Onnx__AttributeProto *a = attr(m->graph->node[0], "coordinate_transformation_mode",
                                   ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING);
    a->s.data = (uint8_t *)strdup("tf_crop_and_resize");
    a->s.len = strlen("tf_crop_and_resize");
    a->has_s = 1;
    expect_error(m, VQ_EINVAL, NAMES("tf_crop_and_resize needs the roi (input 1)"));
    /* a mode varq does not have names it */
    m = resize_model(NAMES("x", "", "", "sizes"));
    add_init_ints(m, "sizes", 4, (const int64_t[]){1, 1, 3, 3});
    a = attr(m->graph->node[0], "mode", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING);
    a->s.data = (uint8_t *)strdup("area");
    a->s.len = 4;
    a->has_s = 1;
    expect_error(m, VQ_EINVAL,
                 NAMES("Resize \"up\"", "mode: \"area\" is not nearest, linear "
                                        "or cubic"));
}

Test(onnx, resize_reads_float_initializer_scales_at_import_and_runs)
{
    /* PyTorch's bilinear upsample by 2 (align_corners=False) as it exports
     * it: pytorch_half_pixel, linear, scales an initializer */
    Onnx__ModelProto *m = resize_model(NAMES("x", "", "scales"));
    add_init(m, "scales", 1, (int64_t[]){4}, (const float[]){1, 1, 2, 2});
    Onnx__AttributeProto *a =
        attr(m->graph->node[0], "mode", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING);
    a->s.data = (uint8_t *)strdup("linear");
    a->s.len = 6;
    a->has_s = 1;
    a = attr(m->graph->node[0], "coordinate_transformation_mode",
             ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING);
    a->s.data = (uint8_t *)strdup("pytorch_half_pixel");
    a->s.len = strlen("pytorch_half_pixel");
    a->has_s = 1;
    struct imported im = import_ok(m);
    struct run r = run_new();
    vq_tensor *x;
    cr_assert_eq(vq_tensor_from(&x, VQ_F32, 4, (int64_t[]){1, 1, 2, 2},
                                (const float[]){1, 2, 3, 4}),
                 0);
    vq_feed f = {"x", x};
    static const float want[16] = {1,   1.25, 1.75, 2,   1.5, 1.75, 2.25, 2.5,
                                   2.5, 2.75, 3.25, 3.5, 3,   3.25, 3.75, 4};
    for (int i = 0; i < 16; i++)
        cr_assert_float_eq(run1(&r, im.p, im.s, &f, 1, "y", i), want[i], 1e-6, "element %d", i);
    vq_tensor_release(x);
    imported_free(&im);
    run_free(&r);
}

/* ---- RoiAlign, GridSample ---- */

/* RoiAlign of opset 10 has no coordinate_transformation_mode and samples
 * as output_half_pixel; opset 16's default is half_pixel: a 1 x 1 bin over
 * [0, 2) x [0, 2) of x = 0 .. 15 (4 x 4) with one sampling point reads
 * x at (1, 1) = 5 in opset 10, at (0.5, 0.5) = 2.5 in opset 16. */
Test(onnx, roi_align_of_opset_10_is_output_half_pixel_and_of_16_half_pixel)
{
    for (int v16 = 0; v16 < 2; v16++) {
        Onnx__ModelProto *m = model_new(v16 ? 16 : 10);
        add_input(m, "x", 4, (int64_t[]){1, 1, 4, 4});
        add_output(m, "y");
        add_init(m, "rois", 2, (int64_t[]){1, 4}, (const float[]){0, 0, 2, 2});
        add_init_of(m, "idx", ONNX__TENSOR_PROTO__DATA_TYPE__INT64, sizeof(int64_t), 1,
                    (int64_t[]){1}, (const int64_t[]){0});
        Onnx__NodeProto *n = add_node(m, "RoiAlign", "roi", NAMES("x", "rois", "idx"), NAMES("y"));
        attr_int(n, "sampling_ratio", 1);
        struct imported im = import_ok(m);
        struct run r = run_new();
        float xv[16];
        for (int i = 0; i < 16; i++)
            xv[i] = (float)i;
        vq_tensor *x;
        cr_assert_eq(vq_tensor_from(&x, VQ_F32, 4, (int64_t[]){1, 1, 4, 4}, xv), 0);
        vq_feed f = {"x", x};
        cr_assert_float_eq(run1(&r, im.p, im.s, &f, 1, "y", 0), v16 ? 2.5f : 5.0f, 1e-6, "opset %d",
                           v16 ? 16 : 10);
        vq_tensor_release(x);
        imported_free(&im);
        run_free(&r);
    }
}

Test(onnx, grid_sample_samples_4d_input_only)
{
    Onnx__ModelProto *m = model_new(16);
    add_input(m, "x", 5, (int64_t[]){1, 1, 2, 2, 2});
    add_input(m, "g", 5, (int64_t[]){1, 2, 2, 2, 3});
    add_output(m, "y");
    add_node(m, "GridSample", "gs", NAMES("x", "g"), NAMES("y"));
    expect_error(m, VQ_ENOSYS, NAMES("GridSample \"gs\"", "varq samples 4-D (NCHW) input"));
}

Test(onnx, upsample_of_opset_7_reads_its_scales_attribute)
{
    /* x [1, 1, 2, 2] nearest by [1, 1, 2, 3]: each element repeated 2 x 3 */
    Onnx__ModelProto *m = model_new(7);
    add_input(m, "x", 4, (int64_t[]){1, 1, 2, 2});
    add_output(m, "y");
    Onnx__NodeProto *n = add_node(m, "Upsample", "up", NAMES("x"), NAMES("y"));
    Onnx__AttributeProto *a = attr(n, "scales", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS);
    a->n_floats = 4;
    a->floats = malloc(4 * sizeof *a->floats);
    memcpy(a->floats, (const float[]){1, 1, 2, 3}, 4 * sizeof *a->floats);
    struct imported im = import_ok(m);
    struct run r = run_new();
    vq_tensor *x;
    cr_assert_eq(vq_tensor_from(&x, VQ_F32, 4, (int64_t[]){1, 1, 2, 2},
                                (const float[]){1, 2, 3, 4}),
                 0);
    vq_feed f = {"x", x};
    for (int i = 0; i < 24; i++) {
        int row = i / 6, col = i % 6;
        float want = (float)(1 + 2 * (row / 2) + col / 3);
        cr_assert_eq(run1(&r, im.p, im.s, &f, 1, "y", i), want, "element %d", i);
    }
    vq_tensor_release(x);
    imported_free(&im);
    run_free(&r);
}

/* ---- index arithmetic on the model's extreme values ---- */

/* Slice([1, 2, 3, 4], starts INT64_MAX, ends INT64_MIN, step INT64_MIN):
 * ONNX clamps the start to 3 and takes one step, [4]; -step overflowed
 * (UBSan) and gave an empty tensor. */
Test(onnx, a_slice_with_step_int64_min_takes_onnxs_one_element)
{
    Onnx__ModelProto *m = model_new(13);
    add_input(m, "x", 1, (int64_t[]){4});
    add_init_ints(m, "st", 1, (int64_t[]){INT64_MAX});
    add_init_ints(m, "en", 1, (int64_t[]){INT64_MIN});
    add_init_ints(m, "ax", 1, (int64_t[]){0});
    add_init_ints(m, "sp", 1, (int64_t[]){INT64_MIN});
    add_node(m, "Slice", "sl", NAMES("x", "st", "en", "ax", "sp"), NAMES("y"));
    add_output(m, "y");
    /* and step INT64_MAX from the start: one element too */
    add_init_ints(m, "st0", 1, (int64_t[]){INT64_MIN});
    add_init_ints(m, "en0", 1, (int64_t[]){INT64_MAX});
    add_init_ints(m, "spmax", 1, (int64_t[]){INT64_MAX});
    add_node(m, "Slice", "sl0", NAMES("x", "st0", "en0", "ax", "spmax"), NAMES("y0"));
    add_output(m, "y0");
    struct imported im = import_ok(m);
    struct run r = run_new();
    vq_tensor *tx;
    cr_assert_eq(vq_tensor_from(&tx, VQ_F32, 1, (int64_t[]){4}, (const float[]){1, 2, 3, 4}), 0);
    vq_feed feed = {"x", tx};
    vq_fetch f[2] = {{"y", NULL}, {"y0", NULL}};
    cr_assert_eq(vq_exec_run(r.ex, im.p, im.s, &feed, 1, f, 2), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_tensor_numel(f[0].tensor), 1);
    cr_assert_eq(((const float *)vq_tensor_data(f[0].tensor))[0], 4.0f);
    cr_assert_eq(vq_tensor_numel(f[1].tensor), 1);
    cr_assert_eq(((const float *)vq_tensor_data(f[1].tensor))[0], 1.0f);
    vq_tensor_release(f[0].tensor);
    vq_tensor_release(f[1].tensor);
    vq_tensor_release(tx);
    imported_free(&im);
    run_free(&r);
}

/* Range over int64 bounds a double cannot hold apart, or whose difference
 * or i * delta overflows: counted and computed exactly. */
Test(onnx, an_int64_range_near_the_type_bounds_is_exact)
{
    static const struct {
        int64_t start, limit, delta, n, first, last;
    } cases[] = {
        {INT64_MIN, INT64_MAX, INT64_C(1) << 62, 4, INT64_MIN, INT64_C(1) << 62},
        {INT64_MAX - 1, INT64_MAX, 1, 1, INT64_MAX - 1, INT64_MAX - 1},
        {INT64_MAX, INT64_MIN, INT64_MIN, 2, INT64_MAX, -1},
        {5, 0, INT64_MIN, 1, 5, 5},
    };
    for (int c = 0; c < 4; c++) {
        Onnx__ModelProto *m = model_new(13);
        add_input(m, "x", 0, NULL);
        add_init_ints(m, "a", 1, &cases[c].start);
        add_init_ints(m, "b", 1, &cases[c].limit);
        add_init_ints(m, "d", 1, &cases[c].delta);
        add_node(m, "Range", "rg", NAMES("a", "b", "d"), NAMES("y"));
        add_output(m, "y");
        struct imported im = import_ok(m);
        vq_tensor *y = vq_scope_get(im.s, "y");
        cr_assert(y);
        cr_assert_eq(vq_tensor_numel(y), cases[c].n, "case %d: %lld elements", c,
                     (long long)vq_tensor_numel(y));
        const int64_t *v = vq_tensor_data(y);
        cr_assert_eq(v[0], cases[c].first, "case %d", c);
        cr_assert_eq(v[cases[c].n - 1], cases[c].last, "case %d", c);
        imported_free(&im);
    }
}

/* Tensors a translation makes at import whose size the model chooses (a
 * Range of 2^30 values, a Trilu mask and an EyeLike identity over declared
 * dims of 2^20 x 2^20, a OneHot of depth 2^29): refused, naming the node
 * and the bound, before anything is allocated. Found by fuzz_onnx: a
 * model of a few hundred bytes had the import allocate 5 GiB. */
Test(onnx, a_tensor_made_at_import_past_the_bound_is_refused_naming_the_node)
{
    Onnx__ModelProto *m = model_new(13);
    add_input(m, "x", 0, NULL);
    add_init_ints(m, "a", 1, (const int64_t[]){0});
    add_init_ints(m, "b", 1, (const int64_t[]){INT64_C(1) << 30});
    add_init_ints(m, "d", 1, (const int64_t[]){1});
    add_node(m, "Range", "rg", NAMES("a", "b", "d"), NAMES("y"));
    add_output(m, "y");
    expect_error(m, VQ_ENOSYS, NAMES("node 0 (Range \"rg\")", "VQ_ONNX_MADE_MAX_ELEMS"));

    static const char *const ops[2] = {"Trilu", "EyeLike"};
    for (int i = 0; i < 2; i++) {
        m = model_new(14);
        add_input(m, "x", 2, (int64_t[]){INT64_C(1) << 20, INT64_C(1) << 20});
        add_node(m, ops[i], "big", NAMES("x"), NAMES("y"));
        add_output(m, "y");
        expect_error(m, VQ_ENOSYS,
                     NAMES("big", "1099511627776 elements", "VQ_ONNX_MADE_MAX_ELEMS"));
    }

    m = model_new(13);
    add_input(m, "x", 1, (int64_t[]){4});
    add_init_ints(m, "depth", 1, (const int64_t[]){INT64_C(1) << 29});
    add_init_ints(m, "vals", 2, (const int64_t[]){0, 1});
    add_node(m, "OneHot", "oh", NAMES("x", "depth", "vals"), NAMES("y"));
    add_output(m, "y");
    expect_error(m, VQ_ENOSYS, NAMES("node 0 (OneHot \"oh\")", "VQ_ONNX_MADE_MAX_ELEMS"));
}

/* Attributes and inputs the importer does arithmetic on before any op
 * checks them: strides of 0 divided by (SIGFPE), products and sums past
 * int64 (UBSan), a float depth past int64 converted. Each is an error
 * naming the node, or an exact result. */
Test(onnx, window_and_index_attributes_at_the_int64_extremes_are_errors_or_exact)
{
    /* MaxPool, auto_pad SAME_UPPER, strides 0 */
    Onnx__ModelProto *m = model_new(13);
    add_input(m, "x", 4, (int64_t[]){1, 1, 4, 4});
    Onnx__NodeProto *n = add_node(m, "MaxPool", "mp", NAMES("x"), NAMES("y"));
    attr_ints(n, "kernel_shape", 2, (int64_t[]){2, 2});
    attr_ints(n, "strides", 2, (int64_t[]){0, 0});
    Onnx__AttributeProto *a = attr(n, "auto_pad", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING);
    a->has_s = 1;
    a->s.data = (uint8_t *)strdup("SAME_UPPER");
    a->s.len = strlen("SAME_UPPER");
    add_output(m, "y");
    expect_error(m, VQ_EINVAL, NAMES("node 0 (MaxPool \"mp\")", "strides 0"));
    /* the same with a kernel dilated past int64 */
    m = model_new(13);
    add_input(m, "x", 4, (int64_t[]){1, 1, 4, 4});
    n = add_node(m, "MaxPool", "mp", NAMES("x"), NAMES("y"));
    attr_ints(n, "kernel_shape", 2, (int64_t[]){INT64_MAX, 2});
    attr_ints(n, "dilations", 2, (int64_t[]){INT64_MAX, 1});
    a = attr(n, "auto_pad", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING);
    a->has_s = 1;
    a->s.data = (uint8_t *)strdup("SAME_LOWER");
    a->s.len = strlen("SAME_LOWER");
    add_output(m, "y");
    expect_error(m, VQ_EINVAL, NAMES("node 0 (MaxPool \"mp\")", "overflows"));
    /* ConvTranspose to an output_shape, strides INT64_MAX */
    m = model_new(13);
    add_input(m, "x", 4, (int64_t[]){1, 1, 3, 3});
    add_init(m, "w", 4, (int64_t[]){1, 1, 2, 2}, (const float[]){1, 1, 1, 1});
    n = add_node(m, "ConvTranspose", "ct", NAMES("x", "w"), NAMES("y"));
    attr_ints(n, "strides", 2, (int64_t[]){INT64_MAX, INT64_MAX});
    attr_ints(n, "output_shape", 2, (int64_t[]){5, 5});
    add_output(m, "y");
    expect_error(m, VQ_EINVAL, NAMES("node 0 (ConvTranspose \"ct\")", "overflow"));
    /* DepthToSpace, blocksize 2^32: b * b overflowed */
    m = model_new(13);
    add_input(m, "x", 4, (int64_t[]){1, 4, 2, 2});
    attr_int(add_node(m, "DepthToSpace", "d2s", NAMES("x"), NAMES("y")), "blocksize",
             INT64_C(1) << 32);
    add_output(m, "y");
    expect_error(m, VQ_EINVAL, NAMES("node 0 (DepthToSpace \"d2s\")", "blocksize"));
    /* OneHot of a float depth 1e30 */
    m = model_new(13);
    add_input(m, "x", 1, (int64_t[]){2});
    m->graph->input[0]->type->tensor_type->elem_type = ONNX__TENSOR_PROTO__DATA_TYPE__INT64;
    a = attr(add_node(m, "Constant", "dc", NULL, NAMES("depth")), "value_float",
             ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT);
    a->has_f = 1;
    a->f = 1e30f;
    add_init(m, "vals", 1, (int64_t[]){2}, (const float[]){0, 1});
    add_node(m, "OneHot", "oh", NAMES("x", "depth", "vals"), NAMES("y"));
    add_output(m, "y");
    expect_error(m, VQ_EINVAL, NAMES("node 1 (OneHot \"oh\")", "depth 1e+30"));
    /* EyeLike with k = INT64_MAX: i + k overflowed; all zeros */
    m = model_new(13);
    add_init(m, "e", 2, (int64_t[]){3, 3}, (const float[]){0, 0, 0, 0, 0, 0, 0, 0, 0});
    attr_int(add_node(m, "EyeLike", "eye", NAMES("e"), NAMES("y")), "k", INT64_MAX);
    add_output(m, "y");
    size_t len;
    uint8_t *buf = pack(m, &len);
    vq_scope *s;
    vq_program *p;
    cr_assert_eq(vq_scope_new(&s), 0);
    int rc = vq_program_from_onnx(&p, s, buf, len);
    if (rc == 0)
        vq_program_free(p);
    else
        cr_assert(strstr(vq_errmsg(), "EyeLike"), "%s", vq_errmsg());
    vq_scope_free(s);
    free(buf);
    onnx__model_proto__free_unpacked(m, NULL);
}

/* ---- dims known only from the feed ---- */

/* A model exported with a dynamic batch and sequence (x [N, N, 4]) that
 * computes its shapes from them as exporters do: Shape, Gather,
 * Unsqueeze, Concat into a Reshape; a Range of the sequence length; a
 * causal mask (ConstantOfShape, Trilu); an Expand to x's shape. One
 * import, one executor: a plan per feed-shape signature. */
Test(onnx, a_model_with_dynamic_batch_and_sequence_runs_at_every_size)
{
    Onnx__ModelProto *m = model_new(17);
    add_input(m, "x", 3, (int64_t[]){-1, -1, 4});
    const int64_t zero = 0, one = 1, two[1] = {2}, ax0[1] = {0};
    add_init_of(m, "i0", ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 8, 0, NULL, &zero);
    add_init_of(m, "i1", ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 8, 0, NULL, &one);
    add_init_ints(m, "c2", 1, two);
    add_init_ints(m, "ax0", 1, ax0);
    const float bias[4] = {0.5f, -1, 2, 0.25f};
    add_init(m, "bias", 3, (int64_t[]){1, 1, 4}, bias);
    add_node(m, "Shape", "s", NAMES("x"), NAMES("s"));
    add_node(m, "Gather", "b", NAMES("s", "i0"), NAMES("b"));
    add_node(m, "Gather", "t", NAMES("s", "i1"), NAMES("t"));
    add_node(m, "Unsqueeze", "bu", NAMES("b", "ax0"), NAMES("bu"));
    add_node(m, "Unsqueeze", "tu", NAMES("t", "ax0"), NAMES("tu"));
    attr_int(add_node(m, "Concat", "shp", NAMES("bu", "tu", "c2", "c2"), NAMES("shp")), "axis", 0);
    add_node(m, "Reshape", "y1", NAMES("x", "shp"), NAMES("y1"));
    add_node(m, "Range", "r", NAMES("i0", "t", "i1"), NAMES("r"));
    attr_int(add_node(m, "Concat", "tt", NAMES("tu", "tu"), NAMES("tt")), "axis", 0);
    Onnx__NodeProto *c = add_node(m, "ConstantOfShape", "ones", NAMES("tt"), NAMES("ones"));
    const float fone = 1;
    attr(c, "value", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR)->t =
        tensor("v", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 1, (int64_t[]){1}, &fone, sizeof fone);
    add_node(m, "Trilu", "mask", NAMES("ones"), NAMES("mask"));
    add_node(m, "Expand", "e", NAMES("bias", "s"), NAMES("e"));
    add_node(m, "Add", "y3", NAMES("x", "e"), NAMES("y3"));
    add_outputs(m, NAMES("y1", "r", "mask", "y3", NULL));
    struct imported im = import_ok(m);
    struct run r = run_new();
    static const int64_t sizes[4][2] = {{1, 3}, {2, 5}, {3, 2}, {1, 3}};
    uint64_t rng = 11;
    for (int k = 0; k < 4; k++) {
        int64_t b = sizes[k][0], t = sizes[k][1], xs[3] = {b, t, 4};
        vq_tensor *x;
        cr_assert_eq(vq_tensor_new(&x, VQ_F32, 3, xs), 0);
        for (int64_t i = 0; i < b * t * 4; i++)
            ((float *)vq_tensor_data(x))[i] = (float)(rng++ % 17) - 8;
        vq_feed fd = {"x", x};
        vq_fetch ft[4] = {{"y1", NULL}, {"r", NULL}, {"mask", NULL}, {"y3", NULL}};
        cr_assert_eq(vq_exec_run(r.ex, im.p, im.s, &fd, 1, ft, 4), 0, "%s", vq_errmsg());
        int64_t want1[4] = {b, t, 2, 2};
        cr_assert_eq(memcmp(vq_tensor_shape(ft[0].tensor), want1, sizeof want1), 0);
        cr_assert_eq(memcmp(vq_tensor_data(ft[0].tensor), vq_tensor_data(x),
                            (size_t)(b * t * 4) * sizeof(float)),
                     0);
        cr_assert_eq(vq_tensor_shape(ft[1].tensor)[0], t);
        for (int64_t i = 0; i < t; i++)
            cr_assert_eq(((const int64_t *)vq_tensor_data(ft[1].tensor))[i], i);
        cr_assert(vq_tensor_shape(ft[2].tensor)[0] == t && vq_tensor_shape(ft[2].tensor)[1] == t);
        for (int64_t i = 0; i < t * t; i++)
            cr_assert_eq(((const float *)vq_tensor_data(ft[2].tensor))[i], i % t >= i / t,
                         "mask entry %lld", (long long)i);
        cr_assert_eq(memcmp(vq_tensor_shape(ft[3].tensor), xs, sizeof xs), 0);
        for (int64_t i = 0; i < b * t * 4; i++)
            cr_assert_eq(((const float *)vq_tensor_data(ft[3].tensor))[i],
                         ((const float *)vq_tensor_data(x))[i] + bias[i % 4]);
        for (int j = 0; j < 4; j++)
            vq_tensor_release(ft[j].tensor);
        vq_tensor_release(x);
    }
    vq_exec_stats st;
    cr_assert_eq(vq_exec_get_stats(r.ex, &st), 0);
    /* a plan per size, the last size's found cached */
    cr_assert_eq(st.prepares, 3, "%llu plans prepared", (unsigned long long)st.prepares);
    imported_free(&im);
    run_free(&r);
}

/* An op sized by its inputs' values (NonZero, Range) whose inputs are all
 * known at import is computed then, like any other: nothing of it is left
 * to the run. */
Test(onnx, a_data_sized_op_of_known_inputs_folds_at_import)
{
    Onnx__ModelProto *m = model_new(13);
    add_init_ints(m, "c", 5, (int64_t[]){0, 3, 0, -2, 7});
    add_node(m, "NonZero", "nz", NAMES("c"), NAMES("nz"));
    add_output(m, "nz");
    struct imported im = import_ok(m);
    cr_assert_eq(vq_program_nops(im.p, 0), 0, "%d ops left to the run", vq_program_nops(im.p, 0));
    struct run r = run_new();
    vq_fetch ft = {"nz", NULL};
    cr_assert_eq(vq_exec_run(r.ex, im.p, im.s, NULL, 0, &ft, 1), 0, "%s", vq_errmsg());
    cr_assert(vq_tensor_ndim(ft.tensor) == 2 && vq_tensor_shape(ft.tensor)[0] == 1 &&
              vq_tensor_shape(ft.tensor)[1] == 3);
    const int64_t *v = vq_tensor_data(ft.tensor);
    cr_assert(v[0] == 1 && v[1] == 3 && v[2] == 4);
    vq_tensor_release(ft.tensor);
    imported_free(&im);
    run_free(&r);
}

/* Slices of a dim known only from the feed, with bounds computed from it
 * (x[1 : n - 1]) and with a step (x[::-2]): gathers of the indices ONNX's
 * clamped bounds give, computed when the model runs. */
Test(onnx, slices_of_run_time_bounds_and_steps_follow_onnxs_clamps_at_every_size)
{
    Onnx__ModelProto *m = model_new(13);
    add_input(m, "x", 2, (int64_t[]){-1, 3});
    const int64_t zero = 0;
    add_init_of(m, "i0", ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 8, 0, NULL, &zero);
    add_init_ints(m, "one", 1, (int64_t[]){1});
    add_init_ints(m, "ax0", 1, (int64_t[]){0});
    add_init_ints(m, "last", 1, (int64_t[]){-1});
    add_init_ints(m, "first", 1, (int64_t[]){INT64_MIN});
    add_init_ints(m, "back2", 1, (int64_t[]){-2});
    add_node(m, "Shape", "s", NAMES("x"), NAMES("s"));
    add_node(m, "Gather", "n", NAMES("s", "i0"), NAMES("n"));
    add_node(m, "Unsqueeze", "nu", NAMES("n", "ax0"), NAMES("nu"));
    add_node(m, "Sub", "end", NAMES("nu", "one"), NAMES("end"));
    add_node(m, "Slice", "inner", NAMES("x", "one", "end", "ax0"), NAMES("inner"));
    add_node(m, "Slice", "rev", NAMES("x", "last", "first", "ax0", "back2"), NAMES("rev"));
    add_outputs(m, NAMES("inner", "rev", NULL));
    struct imported im = import_ok(m);
    struct run r = run_new();
    for (int n = 1; n <= 6; n += (n < 2 ? 1 : 3)) {
        float xv[18];
        for (int i = 0; i < 3 * n; i++)
            xv[i] = (float)i;
        vq_tensor *x;
        cr_assert_eq(vq_tensor_from(&x, VQ_F32, 2, (int64_t[]){n, 3}, xv), 0);
        vq_feed fd = {"x", x};
        vq_fetch ft[2] = {{"inner", NULL}, {"rev", NULL}};
        cr_assert_eq(vq_exec_run(r.ex, im.p, im.s, &fd, 1, ft, 2), 0, "n %d: %s", n, vq_errmsg());
        int64_t rows = n > 2 ? n - 2 : 0; /* rows 1 .. n-2 */
        cr_assert_eq(vq_tensor_shape(ft[0].tensor)[0], rows, "n %d", n);
        for (int64_t i = 0; i < rows * 3; i++)
            cr_assert_eq(((const float *)vq_tensor_data(ft[0].tensor))[i], xv[3 + i]);
        int64_t back = (n + 1) / 2; /* rows n-1, n-3, ... */
        cr_assert_eq(vq_tensor_shape(ft[1].tensor)[0], back, "n %d", n);
        for (int64_t k = 0; k < back; k++)
            for (int c = 0; c < 3; c++)
                cr_assert_eq(((const float *)vq_tensor_data(ft[1].tensor))[k * 3 + c],
                             xv[(n - 1 - 2 * k) * 3 + c]);
        vq_tensor_release(ft[0].tensor);
        vq_tensor_release(ft[1].tensor);
        vq_tensor_release(x);
    }
    imported_free(&im);
    run_free(&r);
}

/* Tile whose repeats the model computes (Shape of x), TopK whose K is a
 * feed, NonZero: ops whose output shapes depend on values, imported with
 * those dims unknown and run at two sizes through one plan. */
Test(onnx, tile_repeats_topk_k_and_nonzero_computed_at_run_time_run_at_two_sizes)
{
    Onnx__ModelProto *m = model_new(13);
    add_input(m, "x", 2, (int64_t[]){-1, -1});
    add_input_of(m, "k", ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 1, (int64_t[]){1});
    add_node(m, "Shape", "s", NAMES("x"), NAMES("s"));
    add_node(m, "Tile", "t", NAMES("x", "s"), NAMES("t"));
    add_node(m, "TopK", "top", NAMES("x", "k"), NAMES("v", "i"));
    add_node(m, "NonZero", "nz", NAMES("x"), NAMES("nz"));
    add_outputs(m, NAMES("t", "v", "i", "nz", NULL));
    struct imported im = import_ok(m);
    struct run r = run_new();
    for (int round = 0; round < 2; round++) {
        int64_t rows = 2 + round, cols = 3 + round, xs[2] = {rows, cols}, kv = 2 + round;
        vq_tensor *x, *k;
        cr_assert_eq(vq_tensor_new(&x, VQ_F32, 2, xs), 0);
        cr_assert_eq(vq_tensor_from(&k, VQ_I64, 1, (int64_t[]){1}, &kv), 0);
        float *xd = vq_tensor_data(x);
        int64_t nonzero = 0;
        for (int64_t i = 0; i < rows * cols; i++) {
            xd[i] = (float)((i * 7) % 5) - 1; /* distinct enough, some zeros */
            nonzero += xd[i] != 0;
        }
        vq_feed fd[2] = {{"x", x}, {"k", k}};
        vq_fetch ft[4] = {{"t", NULL}, {"v", NULL}, {"i", NULL}, {"nz", NULL}};
        cr_assert_eq(vq_exec_run(r.ex, im.p, im.s, fd, 2, ft, 4), 0, "%s", vq_errmsg());
        const int64_t *ts = vq_tensor_shape(ft[0].tensor);
        cr_assert(ts[0] == rows * rows && ts[1] == cols * cols);
        const float *t = vq_tensor_data(ft[0].tensor);
        for (int64_t a = 0; a < ts[0]; a++)
            for (int64_t b = 0; b < ts[1]; b++)
                cr_assert_eq(t[a * ts[1] + b], xd[(a % rows) * cols + b % cols]);
        cr_assert(vq_tensor_shape(ft[1].tensor)[0] == rows &&
                  vq_tensor_shape(ft[1].tensor)[1] == kv);
        const float *v = vq_tensor_data(ft[1].tensor);
        const int64_t *ix = vq_tensor_data(ft[2].tensor);
        for (int64_t a = 0; a < rows; a++)
            for (int64_t j = 0; j < kv; j++) {
                cr_assert_eq(v[a * kv + j], xd[a * cols + ix[a * kv + j]]);
                cr_assert(j == 0 || v[a * kv + j] <= v[a * kv + j - 1]);
            }
        cr_assert(vq_tensor_shape(ft[3].tensor)[0] == 2 &&
                  vq_tensor_shape(ft[3].tensor)[1] == nonzero);
        for (int j = 0; j < 4; j++)
            vq_tensor_release(ft[j].tensor);
        vq_tensor_release(x);
        vq_tensor_release(k);
    }
    vq_exec_stats st;
    cr_assert_eq(vq_exec_get_stats(r.ex, &st), 0);
    cr_assert_eq(st.prepares, 2, "%llu plans prepared: one per size",
                 (unsigned long long)st.prepares);
    imported_free(&im);
    run_free(&r);
}

/* ---- Sign and Range ---- */

Test(onnx, sign_keeps_nan_and_zeros_and_range_needs_known_inputs)
{
    Onnx__ModelProto *m = model_new(13);
    add_input(m, "x", 1, (int64_t[]){6});
    add_output(m, "y");
    add_node(m, "Sign", "sg", NAMES("x"), NAMES("y"));
    struct imported im = import_ok(m);
    struct run r = run_new();
    vq_tensor *x;
    cr_assert_eq(vq_tensor_from(&x, VQ_F32, 1, (int64_t[]){6},
                                (const float[]){-2.5f, -0.0f, 0, 3, NAN, -INFINITY}),
                 0);
    vq_feed f = {"x", x};
    static const float want[6] = {-1, 0, 0, 1, NAN, -1};
    for (int i = 0; i < 6; i++) {
        float got = run1(&r, im.p, im.s, &f, 1, "y", i);
        cr_assert(isnan(want[i]) ? isnan(got) : got == want[i], "element %d: %g", i, got);
    }
    vq_tensor_release(x);
    imported_free(&im);
    run_free(&r);

    m = model_new(13);
    add_input(m, "limit", 0, NULL);
    add_init_ints(m, "start", 1, (const int64_t[]){0});
    add_output(m, "y");
    add_node(m, "Range", "rg", NAMES("start", "limit", "start"), NAMES("y"));
    /* a fed bound: the range op runs then, its inputs of one dtype */
    expect_error(m, VQ_EINVAL,
                 NAMES("node 0 (Range \"rg\")", "input Limit (slot 1): dtype f32 differs from "
                                                "Start's i64"));
}

/* ---- 3-D pools ---- */

/* Pool (MaxPool or AveragePool) of x [1, 2, 4, 5, 6] with kernel 2x3x2,
 * strides 2x1x2, pads (front, top, left) 1, 0, 1 and (back, bottom, right)
 * 0, 1, 1, against the plain loop over the box (the importer makes each
 * two 2-D pools). */
Test(onnx, three_d_max_and_average_pools_match_the_plain_loop)
{
    static const int64_t xs[5] = {1, 2, 4, 5, 6}, k[3] = {2, 3, 2}, st[3] = {2, 1, 2};
    static const int64_t pads[6] = {1, 0, 1, 0, 1, 1};
    const int64_t in[3] = {4, 5, 6};
    int64_t os[3];
    for (int i = 0; i < 3; i++)
        os[i] = (in[i] + pads[i] + pads[3 + i] - k[i]) / st[i] + 1;
    float x[240];
    for (int i = 0; i < 240; i++)
        x[i] = (float)sin(0.37 * i * i + 1);
    for (int max = 0; max < 2; max++) {
        Onnx__ModelProto *m = model_new(13);
        add_input(m, "x", 5, xs);
        Onnx__NodeProto *n =
            add_node(m, max ? "MaxPool" : "AveragePool", "pool", NAMES("x"), NAMES("y"));
        attr_ints(n, "kernel_shape", 3, k);
        attr_ints(n, "strides", 3, st);
        attr_ints(n, "pads", 6, pads);
        add_output(m, "y");
        struct imported im = import_ok(m);
        struct run r = run_new();
        vq_tensor *tx;
        cr_assert_eq(vq_tensor_from(&tx, VQ_F32, 5, xs, x), 0);
        vq_feed feed = {"x", tx};
        vq_fetch f = {"y", NULL};
        cr_assert_eq(vq_exec_run(r.ex, im.p, im.s, &feed, 1, &f, 1), 0, "%s", vq_errmsg());
        cr_assert_eq(vq_tensor_ndim(f.tensor), 5);
        for (int i = 0; i < 3; i++)
            cr_assert_eq(vq_tensor_shape(f.tensor)[2 + i], os[i], "dim %d", 2 + i);
        const float *y = vq_tensor_data(f.tensor);
        int at = 0;
        for (int c = 0; c < 2; c++)
            for (int64_t od = 0; od < os[0]; od++)
                for (int64_t oh = 0; oh < os[1]; oh++)
                    for (int64_t ow = 0; ow < os[2]; ow++, at++) {
                        double best = -INFINITY, sum = 0;
                        int taps = 0;
                        for (int64_t a = 0; a < k[0]; a++)
                            for (int64_t b = 0; b < k[1]; b++)
                                for (int64_t e = 0; e < k[2]; e++) {
                                    int64_t id = od * st[0] - pads[0] + a;
                                    int64_t ih = oh * st[1] - pads[1] + b;
                                    int64_t iw = ow * st[2] - pads[2] + e;
                                    if (id < 0 || id >= 4 || ih < 0 || ih >= 5 || iw < 0 || iw >= 6)
                                        continue;
                                    double v = x[((c * 4 + id) * 5 + ih) * 6 + iw];
                                    best = v > best ? v : best;
                                    sum += v;
                                    taps++;
                                }
                        double want = max ? best : sum / taps;
                        cr_assert_float_eq(y[at], want, 1e-6, "%s [%d]: %g vs %g",
                                           max ? "max" : "avg", at, y[at], want);
                    }
        vq_tensor_release(f.tensor);
        vq_tensor_release(tx);
        imported_free(&im);
        run_free(&r);
    }
}

/* A Conv whose output only a Relu or a Clip reads (a node between them)
 * becomes one conv2d with attribute clip, with the same bits as conv2d
 * then the clamp; a Conv whose output is also a graph output stays
 * unfused. */
Test(onnx, a_relu_or_clip_after_a_conv_is_fused_into_the_conv2d)
{
    Onnx__ModelProto *m = model_new(13);
    add_input(m, "x", 4, (int64_t[]){1, 2, 5, 5});
    float w[3 * 2 * 3 * 3], b[3] = {0.1f, -0.2f, 0.3f}, w2[3 * 1 * 3 * 3];
    for (int i = 0; i < 54; i++)
        w[i] = (float)sin(0.37 * i);
    for (int i = 0; i < 27; i++)
        w2[i] = (float)cos(0.5 * i);
    add_init(m, "w", 4, (int64_t[]){3, 2, 3, 3}, w);
    add_init(m, "b", 1, (int64_t[]){3}, b);
    add_init(m, "w2", 4, (int64_t[]){3, 1, 3, 3}, w2);
    attr_ints(add_node(m, "Conv", "c1", NAMES("x", "w", "b"), NAMES("c1")), "pads", 4,
              (int64_t[]){1, 1, 1, 1});
    /* the bounds as Constant nodes between, as torch.onnx.export writes
     * them (float initializers are parameters, which stay unfused) */
    static const float bounds[2] = {-0.5f, 0.75f};
    for (int i = 0; i < 2; i++) {
        const char *name = i ? "hi" : "lo";
        Onnx__NodeProto *k = add_node(m, "Constant", name, NULL, (const char *const[]){name, NULL});
        Onnx__AttributeProto *a = attr(k, "value", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR);
        a->t =
            tensor(name, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 0, NULL, &bounds[i], sizeof(float));
    }
    add_node(m, "Identity", "between", NAMES("x"), NAMES("xid"));
    add_node(m, "Clip", "clip", NAMES("c1", "lo", "hi"), NAMES("y1"));
    Onnx__NodeProto *dw = add_node(m, "Conv", "c2", NAMES("y1", "w2"), NAMES("c2"));
    attr_int(dw, "group", 3);
    add_node(m, "Relu", "relu2", NAMES("c2"), NAMES("y2"));
    add_node(m, "Conv", "c3", NAMES("xid", "w", "b"), NAMES("c3"));
    add_node(m, "Relu", "relu3", NAMES("c3"), NAMES("y3"));
    add_outputs(m, NAMES("y2", "y3", "c3"));
    struct imported im = import_ok(m);
    char *text = NULL;
    size_t tlen = 0;
    FILE *f = open_memstream(&text, &tlen);
    cr_assert_eq(vq_program_dump(im.p, f), 0);
    fclose(f);
    int clipped = 0, relus = 0;
    for (const char *at = text; (at = strstr(at, "clip=")); at++)
        clipped++;
    for (const char *at = text; (at = strstr(at, " relu(")); at++)
        relus++;
    cr_assert_eq(clipped, 2, "c1 and c2 fused, c3 not:\n%s", text);
    cr_assert_eq(relus, 1, "relu3 stays:\n%s", text);
    cr_assert(!strstr(text, "maximum") && !strstr(text, "minimum"), "%s", text);
    free(text);
    /* the same bits as the unfused ops */
    struct run r = run_new();
    float xv[50];
    for (int i = 0; i < 50; i++)
        xv[i] = (float)sin(1.3 * i);
    vq_tensor *tx, *tw, *tb, *tw2;
    cr_assert_eq(vq_tensor_from(&tx, VQ_F32, 4, (int64_t[]){1, 2, 5, 5}, xv), 0);
    cr_assert_eq(vq_tensor_from(&tw, VQ_F32, 4, (int64_t[]){3, 2, 3, 3}, w), 0);
    cr_assert_eq(vq_tensor_from(&tb, VQ_F32, 1, (int64_t[]){3}, b), 0);
    cr_assert_eq(vq_tensor_from(&tw2, VQ_F32, 4, (int64_t[]){3, 1, 3, 3}, w2), 0);
    vq_feed feed = {"x", tx};
    vq_fetch fetch[3] = {{"y2", NULL}, {"y3", NULL}, {"c3", NULL}};
    cr_assert_eq(vq_exec_run(r.ex, im.p, im.s, &feed, 1, fetch, 3), 0, "%s", vq_errmsg());
    static const int64_t pads[4] = {1, 1, 1, 1};
    vq_attr pa = VQ_ATTR_IS("pads", pads, 4), ga = VQ_ATTR_I("groups", 3);
    vq_tensor *c1 = NULL, *c2 = NULL;
    cr_assert_eq(vq_op_run(NULL, "conv2d", (vq_tensor *[]){tx, tw, tb}, 3, &c1, 1, &pa, 1), 0);
    float *v = vq_tensor_data(c1);
    for (int i = 0; i < 75; i++)
        v[i] = fminf(fmaxf(v[i], -0.5f), 0.75f);
    cr_assert_eq(vq_op_run(NULL, "conv2d", (vq_tensor *[]){c1, tw2}, 2, &c2, 1, &ga, 1), 0);
    v = vq_tensor_data(c2);
    for (int i = 0; i < 27; i++)
        v[i] = v[i] > 0 ? v[i] : 0;
    cr_assert_eq(vq_tensor_numel(fetch[0].tensor), 27);
    cr_assert_eq(memcmp(vq_tensor_data(fetch[0].tensor), v, 27 * sizeof(float)), 0);
    const float *y3 = vq_tensor_data(fetch[1].tensor), *c3 = vq_tensor_data(fetch[2].tensor);
    cr_assert_eq(vq_tensor_numel(fetch[1].tensor), 27);
    for (int i = 0; i < 27; i++)
        cr_assert_eq(y3[i], c3[i] > 0 ? c3[i] : 0, "[%d]: %g, relu of %g", i, y3[i], c3[i]);
    vq_tensor *tmp[] = {tx, tw, tb, tw2, c1, c2, fetch[0].tensor, fetch[1].tensor, fetch[2].tensor};
    for (int i = 0; i < 9; i++)
        vq_tensor_release(tmp[i]);
    imported_free(&im);
    run_free(&r);
}

/* Only conv2d takes the clip: a Relu after a Conv over volumes (conv3d)
 * stays a relu, and its output is the clamped conv3d's. */
Test(onnx, a_relu_after_a_3d_conv_stays_a_relu)
{
    Onnx__ModelProto *m = model_new(13);
    add_input(m, "x", 5, (int64_t[]){1, 1, 3, 3, 3});
    float w[2 * 1 * 2 * 2 * 2];
    for (int i = 0; i < 16; i++)
        w[i] = (float)sin(0.7 * i + 0.3);
    add_init(m, "w", 5, (int64_t[]){2, 1, 2, 2, 2}, w);
    add_node(m, "Conv", "c", NAMES("x", "w"), NAMES("c"));
    add_node(m, "Relu", "relu", NAMES("c"), NAMES("y"));
    add_output(m, "y");
    struct imported im = import_ok(m);
    struct run r = run_new();
    float xv[27];
    for (int i = 0; i < 27; i++)
        xv[i] = (float)cos(1.1 * i);
    vq_tensor *tx, *tw;
    cr_assert_eq(vq_tensor_from(&tx, VQ_F32, 5, (int64_t[]){1, 1, 3, 3, 3}, xv), 0);
    cr_assert_eq(vq_tensor_from(&tw, VQ_F32, 5, (int64_t[]){2, 1, 2, 2, 2}, w), 0);
    vq_feed feed = {"x", tx};
    vq_fetch fetch = {"y", NULL};
    cr_assert_eq(vq_exec_run(r.ex, im.p, im.s, &feed, 1, &fetch, 1), 0, "%s", vq_errmsg());
    vq_tensor *c = NULL;
    cr_assert_eq(vq_op_run(NULL, "conv3d", (vq_tensor *[]){tx, tw}, 2, &c, 1, NULL, 0), 0, "%s",
                 vq_errmsg());
    cr_assert_eq(vq_tensor_numel(fetch.tensor), 16);
    const float *y = vq_tensor_data(fetch.tensor), *cv = vq_tensor_data(c);
    int negative = 0;
    for (int i = 0; i < 16; i++) {
        negative += cv[i] < 0;
        cr_assert_eq(y[i], cv[i] > 0 ? cv[i] : 0, "element %d: %g, conv3d gave %g", i, y[i], cv[i]);
    }
    cr_assert_gt(negative, 0, "the test needs negative conv3d outputs");
    vq_tensor_release(c);
    vq_tensor_release(tx);
    vq_tensor_release(tw);
    vq_tensor_release(fetch.tensor);
    imported_free(&im);
    run_free(&r);
}

/* An empty batch lets channels times depth pass 2^63: an error, not a
 * wrapped reshape. */
Test(onnx, a_three_d_pool_whose_channels_times_depth_overflow_is_an_error)
{
    Onnx__ModelProto *m = model_new(13);
    add_input(m, "x", 5, (int64_t[]){0, INT64_C(1) << 40, INT64_C(1) << 40, 2, 2});
    Onnx__NodeProto *n = add_node(m, "MaxPool", "pool", NAMES("x"), NAMES("y"));
    attr_ints(n, "kernel_shape", 3, (int64_t[]){1, 1, 1});
    add_output(m, "y");
    expect_error(m, VQ_EINVAL, NAMES("pool", "channels 1099511627776 times depth"));
}

/* ---- the varq tool (VARQ_BIN) ---- */

static int sh(const char *fmt, const char *a, const char *b, char *out, size_t size)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, fmt, getenv("VARQ_BIN"), a, b);
    FILE *f = popen(cmd, "r");
    cr_assert(f, "%s", cmd);
    size_t n = fread(out, 1, size - 1, f);
    out[n] = '\0';
    return pclose(f);
}

Test(onnx, the_tool_runs_imports_and_lists_onnx_models)
{
    if (!getenv("VARQ_BIN"))
        cr_skip_test("VARQ_BIN is not set");
    char dir[] = "/tmp/varq_onnx_cli_XXXXXX";
    cr_assert(mkdtemp(dir));
    char model[256], x[256], prog[256], params[256], out[8192];
    snprintf(model, sizeof model, "%s/mlp.onnx", dir);
    snprintf(x, sizeof x, "%s/x.npy", dir);
    snprintf(prog, sizeof prog, "%s/mlp.pb", dir);
    snprintf(params, sizeof params, "%s/params", dir);
    Onnx__ModelProto *m = mlp();
    size_t len;
    uint8_t *buf = pack(m, &len);
    FILE *f = fopen(model, "wb");
    fwrite(buf, 1, len, f);
    fclose(f);
    vq_tensor *tx;
    const float xv[8] = {0.5f, -1, 2, 0.25f, 1, 1, -0.5f, 0};
    cr_assert_eq(vq_tensor_from(&tx, VQ_F32, 2, (int64_t[]){2, 4}, xv), 0);
    cr_assert_eq(vq_npy_save(x, tx), 0);
    vq_tensor_release(tx);
    /* run: every graph output printed */
    cr_assert_eq(sh("%s run %s --feed x=%s 2>&1", model, x, out, sizeof out), 0, "%s", out);
    cr_assert(strstr(out, "y: f32[2,2]"), "%s", out);
    double want[4];
    mlp_ref(xv, 2, want);
    char first[64];
    snprintf(first, sizeof first, "%.4f", want[0]);
    cr_assert(strstr(out, first), "%s not in: %s", first, out);
    /* import: a program and its parameters, which run like the model */
    cr_assert_eq(sh("%s import %s -o %s 2>&1", model, prog, out, sizeof out), 0, "%s", out);
    cr_assert(strstr(out, "4 initializers not saved"), "%s", out);
    char cmd_args[1024];
    snprintf(cmd_args, sizeof cmd_args, "%s -o %s --save-scope %s", model, prog, params);
    cr_assert_eq(sh("%s import %s %s 2>&1", cmd_args, "", out, sizeof out), 0, "%s", out);
    struct stat st;
    char w1[320];
    snprintf(w1, sizeof w1, "%s/w1.npy", params);
    cr_assert_eq(stat(w1, &st), 0, "%s", w1);
    snprintf(cmd_args, sizeof cmd_args, "%s --scope %s", prog, params);
    char feed[320];
    snprintf(feed, sizeof feed, "--feed x=%s --fetch y", x);
    cr_assert_eq(sh("%s run %s %s 2>&1", cmd_args, feed, out, sizeof out), 0, "%s", out);
    cr_assert(strstr(out, first), "%s not in: %s", first, out);
    /* the list */
    cr_assert_eq(sh("%s onnx-ops%s%s", "", "", out, sizeof out), 0);
    cr_assert(strstr(out, "Gemm\n") && strstr(out, "Softmax\n"), "%s", out);
    /* a bad model is one line naming the problem, exit 1 */
    f = fopen(model, "wb");
    fwrite("garbage", 1, 7, f);
    fclose(f);
    int rc = sh("%s run %s --feed x=%s 2>&1", model, x, out, sizeof out);
    cr_assert(WIFEXITED(rc) && WEXITSTATUS(rc) == 1, "%s", out);
    cr_assert(strstr(out, "not an ONNX model"), "%s", out);
    char rm[320];
    snprintf(rm, sizeof rm, "rm -rf %s", dir);
    cr_assert_eq(system(rm), 0);
    free(buf);
    onnx__model_proto__free_unpacked(m, NULL);
}

/* ---- what the import computes ---- */

/* y = ConstantOfShape(shape) filled with value (float): a model of a few
 * dozen bytes whatever the shape. */
static Onnx__ModelProto *constant_of_shape(int n, const int64_t *shape, float value)
{
    Onnx__ModelProto *m = model_new(13);
    add_init_ints(m, "s", n, shape);
    Onnx__NodeProto *c = add_node(m, "ConstantOfShape", "c", NAMES("s"), NAMES("y"));
    Onnx__AttributeProto *a = attr(c, "value", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR);
    a->t =
        tensor("v", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 1, (int64_t[]){1}, &value, sizeof value);
    add_output(m, "y");
    return m;
}

/* The bytes the CPU allocator handed out at most while importing buf. */
static size_t import_peak(const uint8_t *buf, size_t len, vq_scope *s, vq_program **p, int *rc)
{
    vq_mem_stats st;
    vq_ctx cpu = {VQ_DEV_CPU, 0};
    cr_assert_eq(vq_mem_reset_peak(cpu), 0);
    cr_assert_eq(vq_mem_get_stats(cpu, &st), 0);
    size_t live = st.live_bytes;
    *rc = vq_program_from_onnx(p, s, buf, len);
    cr_assert_eq(vq_mem_get_stats(cpu, &st), 0);
    return st.peak_bytes - live;
}

/* A ConstantOfShape of [2^30, 4] (16 GiB) in a model of about 100 bytes
 * imports without allocating it: the fill is the program's, and a run that
 * cannot have the memory fails naming the op. Was: the import filled the
 * tensor (256 MiB for [2^26], 16 GiB or VQ_ENOMEM for this one). The
 * address space is bounded so that the old code fails instead of filling
 * 16 GiB; not under ASan, whose shadow memory is already past any bound
 * (there the run, which would fill it, is left out). */
Test(onnx, a_large_constant_of_shape_is_filled_by_the_run_not_the_import, .timeout = 60)
{
#if !defined(VQ_TEST_LSAN) /* leakcheck.h: ASan, with gcc or clang */
    unsigned long pages = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    cr_assert(f && fscanf(f, "%lu", &pages) == 1);
    fclose(f);
    rlim_t as = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + ((rlim_t)1 << 30);
    cr_assert_eq(setrlimit(RLIMIT_AS, &(struct rlimit){as, as}), 0);
    const bool run_big = true;
#else
    const bool run_big = false;
#endif
    struct run r = run_new();
    /* 256 MiB: left to the run, which fills it */
    Onnx__ModelProto *m = constant_of_shape(1, (int64_t[]){INT64_C(1) << 26}, 1.5f);
    size_t len;
    uint8_t *buf = pack(m, &len);
    vq_scope *s;
    vq_program *p;
    int rc;
    cr_assert_eq(vq_scope_new(&s), 0);
    size_t peak = import_peak(buf, len, s, &p, &rc);
    cr_assert_eq(rc, 0, "%s", vq_errmsg());
    cr_assert_lt(peak, (size_t)1 << 20, "the import allocated %zu bytes", peak);
    cr_assert_eq(vq_program_nops(p, 0), 1, "the fill is an op of the program");
    vq_fetch fy = {"y", NULL};
    cr_assert_eq(vq_exec_run(r.ex, p, s, NULL, 0, &fy, 1), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_tensor_numel(fy.tensor), INT64_C(1) << 26);
    const float *y = vq_tensor_data(fy.tensor);
    cr_assert(y[0] == 1.5f && y[(INT64_C(1) << 26) - 1] == 1.5f);
    vq_tensor_release(fy.tensor);
    vq_program_free(p);
    free(buf);
    onnx__model_proto__free_unpacked(m, NULL);
    /* 16 GiB */
    m = constant_of_shape(2, (int64_t[]){INT64_C(1) << 30, 4}, 1.5f);
    buf = pack(m, &len);
    cr_assert_lt(len, 128, "the model is %zu bytes", len);
    peak = import_peak(buf, len, s, &p, &rc);
    cr_assert_eq(rc, 0, "%s", vq_errmsg());
    cr_assert_lt(peak, (size_t)1 << 20, "the import allocated %zu bytes", peak);
    if (run_big) {
        rc = vq_exec_run(r.ex, p, s, NULL, 0, &fy, 1);
        cr_assert_eq(rc, VQ_ENOMEM, "rc %d: %s", rc, vq_errmsg());
        cr_assert(strstr(vq_errmsg(), "fill_constant"), "%s", vq_errmsg());
    }
    vq_program_free(p);
    free(buf);
    onnx__model_proto__free_unpacked(m, NULL);
    /* a Constant whose dims ask for 16 GiB and whose data is 4 bytes: an
     * error, found before anything is allocated */
    m = model_new(13);
    Onnx__NodeProto *c = add_node(m, "Constant", "c", NULL, NAMES("y"));
    attr(c, "value", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR)->t =
        tensor("v", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 2, (int64_t[]){INT64_C(1) << 30, 4},
               (const float[]){1}, sizeof(float));
    add_output(m, "y");
    buf = pack(m, &len);
    peak = import_peak(buf, len, s, &p, &rc);
    cr_assert_eq(rc, VQ_EINVAL, "rc %d: %s", rc, vq_errmsg());
    cr_assert(strstr(vq_errmsg(), "4 bytes of raw data"), "%s", vq_errmsg());
    cr_assert_lt(peak, (size_t)1 << 20, "the import allocated %zu bytes", peak);
    vq_scope_free(s);
    run_free(&r);
    free(buf);
    onnx__model_proto__free_unpacked(m, NULL);
}

/* Up to VQ_ONNX_FOLD_MAX_ELEMS elements a ConstantOfShape is computed at
 * import (no op, a value that shape-taking translations can read); one
 * more and it is the program's. */
Test(onnx, a_small_constant_of_shape_is_computed_at_import)
{
    struct run r = run_new();
    const int64_t sizes[3] = {6, VQ_ONNX_FOLD_MAX_ELEMS, VQ_ONNX_FOLD_MAX_ELEMS + 1};
    for (int k = 0; k < 3; k++) {
        Onnx__ModelProto *m = constant_of_shape(1, &sizes[k], 2.5f);
        struct imported im = import_ok(m);
        cr_assert_eq(vq_program_nops(im.p, 0), k == 2, "%lld elements", (long long)sizes[k]);
        vq_fetch fy = {"y", NULL};
        cr_assert_eq(vq_exec_run(r.ex, im.p, im.s, NULL, 0, &fy, 1), 0, "%s", vq_errmsg());
        cr_assert_eq(vq_tensor_numel(fy.tensor), sizes[k]);
        const float *y = vq_tensor_data(fy.tensor);
        for (int64_t i = 0; i < vq_tensor_numel(fy.tensor); i++)
            cr_assert(y[i] == 2.5f, "y[%lld] = %g", (long long)i, y[i]);
        vq_tensor_release(fy.tensor);
        imported_free(&im);
    }
    run_free(&r);
}

/* A translation that needs a value at import which was too large to
 * compute then says so, naming the input. */
Test(onnx, a_shape_too_large_to_compute_at_import_is_an_error_saying_so)
{
    Onnx__ModelProto *m = mlp();
    add_init_ints(m, "big", 1, (int64_t[]){VQ_ONNX_FOLD_MAX_ELEMS + 1});
    Onnx__NodeProto *c = add_node(m, "ConstantOfShape", "ones", NAMES("big"), NAMES("ones"));
    int64_t one = 1;
    attr(c, "value", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR)->t =
        tensor("v", ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 1, (int64_t[]){1}, &one, sizeof one);
    add_init_ints(m, "first", 1, (int64_t[]){0});
    add_init_ints(m, "two", 1, (int64_t[]){2});
    add_node(m, "Slice", "two_ones", NAMES("ones", "first", "two"), NAMES("shape"));
    /* (a Reshape or Tile reads such a value when it runs; a Squeeze's
     * axes must be known at import) */
    add_node(m, "Squeeze", "r", NAMES("y", "shape"), NAMES("yr"));
    expect_error(m, VQ_ENOSYS,
                 NAMES("node 7 (Squeeze \"r\")", "\"shape\"", "too large to compute"));
}

/* ---- signal generators, computed at import ---- */

/* A symmetric HammingWindow in f64 and a periodic BlackmanWindow in f32,
 * their sizes initializers: numpy's values of the spec's formulas (Hamming
 * 25/46 and 21/46, not numpy's 0.54 and 0.46). */
Test(onnx, windows_of_a_known_size_are_the_specs_formulas)
{
    Onnx__ModelProto *m = model_new(17);
    int32_t five = 5;
    int64_t four = 4;
    add_init_of(m, "n5", ONNX__TENSOR_PROTO__DATA_TYPE__INT32, 4, 0, NULL, &five);
    add_init_of(m, "n4", ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 8, 0, NULL, &four);
    Onnx__NodeProto *h = add_node(m, "HammingWindow", "h", NAMES("n5"), NAMES("ham"));
    attr_int(h, "periodic", 0);
    attr_int(h, "output_datatype", ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE);
    add_node(m, "BlackmanWindow", "b", NAMES("n4"), NAMES("bla"));
    add_outputs(m, NAMES("ham", "bla"));
    struct imported im = import_ok(m);
    struct run r = run_new();
    vq_fetch f[2] = {{"ham", NULL}, {"bla", NULL}};
    cr_assert_eq(vq_exec_run(r.ex, im.p, im.s, NULL, 0, f, 2), 0, "%s", vq_errmsg());
    static const double ham[5] = {0.086956521739130377, 0.54347826086956519, 1, 0.5434782608695653,
                                  0.086956521739130377};
    static const float bla[4] = {-1.38777878e-17f, 0.340000004f, 1, 0.340000004f};
    cr_assert_eq(vq_tensor_dtype(f[0].tensor), VQ_F64);
    cr_assert_eq(vq_tensor_numel(f[0].tensor), 5);
    cr_assert_eq(vq_tensor_dtype(f[1].tensor), VQ_F32);
    cr_assert_eq(vq_tensor_numel(f[1].tensor), 4);
    for (int i = 0; i < 5; i++)
        cr_assert_float_eq(((const double *)vq_tensor_data(f[0].tensor))[i], ham[i], 1e-15,
                           "hamming[%d]", i);
    for (int i = 0; i < 4; i++)
        cr_assert_float_eq(((const float *)vq_tensor_data(f[1].tensor))[i], bla[i], 1e-7,
                           "blackman[%d]", i);
    vq_tensor_release(f[0].tensor);
    vq_tensor_release(f[1].tensor);
    imported_free(&im);
    run_free(&r);
}

/* A window's size fed at run time is an import error naming the input. */
Test(onnx, a_window_whose_size_is_not_known_at_import_names_the_input)
{
    Onnx__ModelProto *m = model_new(17);
    add_input_of(m, "size", ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 0, NULL);
    add_node(m, "HannWindow", "w", NAMES("size"), NAMES("y"));
    add_outputs(m, NAMES("y"));
    size_t len;
    uint8_t *buf = pack(m, &len);
    vq_scope *s;
    vq_program *p = NULL;
    cr_assert_eq(vq_scope_new(&s), 0);
    cr_assert_eq(vq_program_from_onnx(&p, s, buf, len), VQ_ENOSYS);
    cr_assert(strstr(vq_errmsg(), "node 0 (HannWindow \"w\"): input 0 (size) \"size\" must be "
                                  "known when the model is imported"),
              "%s", vq_errmsg());
    vq_scope_free(s);
    free(buf);
    onnx__model_proto__free_unpacked(m, NULL);
}
/* Bernoulli of known probabilities: zeros and ones about p of the time;
 * without a seed each run draws anew (the random op is not folded at
 * import into a constant), with one two runs agree. */
Test(onnx, bernoulli_draws_anew_each_run_unless_seeded)
{
    struct run r = run_new();
    float p[1000];
    for (int i = 0; i < 1000; i++)
        p[i] = 0.3f;
    for (int seeded = 0; seeded < 2; seeded++) {
        Onnx__ModelProto *m = model_new(15);
        add_init(m, "p", 1, (int64_t[]){1000}, p);
        Onnx__NodeProto *n = add_node(m, "Bernoulli", "b", NAMES("p"), NAMES("y"));
        if (seeded)
            attr_float(n, "seed", 7);
        add_output(m, "y");
        struct imported im = import_ok(m);
        float runs[2][1000];
        for (int k = 0; k < 2; k++) {
            vq_fetch fy = {"y", NULL};
            cr_assert_eq(vq_exec_run(r.ex, im.p, im.s, NULL, 0, &fy, 1), 0, "%s", vq_errmsg());
            cr_assert_eq(vq_tensor_numel(fy.tensor), 1000);
            memcpy(runs[k], vq_tensor_data(fy.tensor), sizeof runs[k]);
            double ones = 0;
            for (int i = 0; i < 1000; i++) {
                cr_assert(runs[k][i] == 0 || runs[k][i] == 1, "y[%d] = %g", i, runs[k][i]);
                ones += runs[k][i];
            }
            cr_assert(ones > 230 && ones < 370, "%g ones of 1000 for p 0.3", ones);
            vq_tensor_release(fy.tensor);
        }
        bool same = !memcmp(runs[0], runs[1], sizeof runs[0]);
        cr_assert_eq(same, seeded, "seeded %d: two runs %s", seeded, same ? "agree" : "differ");
        imported_free(&im);
    }
    run_free(&r);
}

/* ---- Dropout in training mode ---- */

/* PyTorch exports F.dropout(x, p=0.0) (its training argument defaults to
 * true: torchvision's swin_t) as a Dropout with training_mode true and
 * ratio 0, which drops nothing (ONNX's reference): the identity and a mask
 * of all true. A nonzero ratio in training mode draws a mask, which
 * needs X's shape at import: with a dim known only at run time it is
 * refused. */
Test(onnx, dropout_in_training_mode_with_ratio_zero_is_the_identity)
{
    struct run r = run_new();
    const float x[6] = {1.5f, -2, 0, 3.25f, -0.5f, 7};
    for (int k = 0; k < 2; k++) {
        Onnx__ModelProto *m = model_new(13);
        add_input(m, "x", 2, (int64_t[]){-1, 3});
        const float ratio = k == 0 ? 0.0f : 0.25f;
        const unsigned char on = 1;
        add_init(m, "ratio", 0, NULL, &ratio);
        add_init_of(m, "training", ONNX__TENSOR_PROTO__DATA_TYPE__BOOL, 1, 0, NULL, &on);
        add_node(m, "Dropout", "drop", NAMES("x", "ratio", "training"), NAMES("y", "mask"));
        add_outputs(m, NAMES("y", "mask", NULL));
        size_t len;
        uint8_t *buf = pack(m, &len);
        vq_scope *s;
        vq_program *p = NULL;
        cr_assert_eq(vq_scope_new(&s), 0);
        int rc = vq_program_from_onnx(&p, s, buf, len);
        if (k == 1) {
            cr_assert_eq(rc, VQ_ENOSYS, "ratio 0.25 in training mode: %d", rc);
            cr_assert(strstr(vq_errmsg(), "training_mode is true") &&
                          strstr(vq_errmsg(), "known only at run time"),
                      "%s", vq_errmsg());
        } else {
            cr_assert_eq(rc, 0, "%s", vq_errmsg());
            vq_tensor *tx;
            cr_assert_eq(vq_tensor_from(&tx, VQ_F32, 2, (int64_t[]){2, 3}, x), 0);
            vq_feed feed = {"x", tx};
            vq_fetch f[2] = {{"y", NULL}, {"mask", NULL}};
            cr_assert_eq(vq_exec_run(r.ex, p, s, &feed, 1, f, 2), 0, "%s", vq_errmsg());
            cr_assert_eq(vq_tensor_dtype(f[1].tensor), VQ_BOOL);
            cr_assert_eq(vq_tensor_numel(f[0].tensor), 6);
            cr_assert_eq(vq_tensor_numel(f[1].tensor), 6);
            for (int i = 0; i < 6; i++) {
                cr_assert_eq(((const float *)vq_tensor_data(f[0].tensor))[i], x[i]);
                cr_assert_eq(((const unsigned char *)vq_tensor_data(f[1].tensor))[i], 1);
            }
            vq_tensor_release(f[0].tensor);
            vq_tensor_release(f[1].tensor);
            vq_tensor_release(tx);
        }
        vq_program_free(p);
        vq_scope_free(s);
        free(buf);
        onnx__model_proto__free_unpacked(m, NULL);
    }
    run_free(&r);
}

/* Dropout in training mode, ratio 0.25, X [100, 100]: ONNX's reference
 * draws with numpy, which varq does not reproduce, so the draw is checked
 * by what it must be: each Y is 0 with mask false, or X / 0.75 with mask
 * true, and about 75% are kept (10000 draws: 3 standard deviations are
 * 1.3%). */
Test(onnx, dropout_in_training_mode_keeps_about_one_minus_ratio_scaled)
{
    struct run r = run_new();
    enum { N = 100 };
    Onnx__ModelProto *m = model_new(13);
    add_input(m, "x", 2, (int64_t[]){N, N});
    const float ratio = 0.25f;
    const unsigned char on = 1;
    add_init(m, "ratio", 0, NULL, &ratio);
    add_init_of(m, "training", ONNX__TENSOR_PROTO__DATA_TYPE__BOOL, 1, 0, NULL, &on);
    Onnx__NodeProto *n =
        add_node(m, "Dropout", "drop", NAMES("x", "ratio", "training"), NAMES("y", "mask"));
    attr_int(n, "seed", 7);
    add_outputs(m, NAMES("y", "mask", NULL));
    struct imported im = import_ok(m);
    static float x[N * N];
    for (int i = 0; i < N * N; i++)
        x[i] = (float)(i % 17) - 8.5f;
    vq_tensor *tx;
    cr_assert_eq(vq_tensor_from(&tx, VQ_F32, 2, (int64_t[]){N, N}, x), 0);
    vq_feed feed = {"x", tx};
    vq_fetch f[2] = {{"y", NULL}, {"mask", NULL}};
    cr_assert_eq(vq_exec_run(r.ex, im.p, im.s, &feed, 1, f, 2), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_tensor_dtype(f[1].tensor), VQ_BOOL);
    const float *y = vq_tensor_data(f[0].tensor);
    const unsigned char *mask = vq_tensor_data(f[1].tensor);
    int kept = 0;
    for (int i = 0; i < N * N; i++) {
        if (mask[i]) {
            kept++;
            cr_assert_float_eq(y[i], x[i] / 0.75f, 1e-6, "[%d]", i);
        } else {
            cr_assert_eq(y[i], 0, "[%d]: %g dropped", i, y[i]);
        }
    }
    cr_assert(kept > 7370 && kept < 7630, "%d of %d kept", kept, N * N);
    vq_tensor_release(f[0].tensor);
    vq_tensor_release(f[1].tensor);
    vq_tensor_release(tx);
    imported_free(&im);
    run_free(&r);
}

/* ---- Slice of bounds computed at run time ---- */

/* torch's x.chunk(2, dim=1) after a reshape to [batch, -1, ...] (what
 * shufflenet's channel shuffle exports with a dynamic batch): the reshape
 * leaves dim 1 unknown at import, so the Slice's end, Shape(Y)[1] / 2, is
 * computed at run time. And a Slice of X's rows from 1 - N (wrapped to 1
 * when negative) to 10 N (clamped to N), as ONNX reads bounds. One plan
 * serves every batch, on the CPU and on the emulated GPU. */
Test(onnx, slice_bounds_computed_at_run_time_are_wrapped_and_clamped_as_onnx_reads_them)
{
    setenv("VARQ_GPU_BACKEND", "emulated", 0);
    Onnx__ModelProto *m = model_new(17);
    add_input(m, "x", 3, (int64_t[]){-1, 4, 3});
    const int64_t zero[1] = {0}, minus1[1] = {-1}, one[1] = {1}, two[1] = {2}, ten[1] = {10};
    add_init_ints(m, "zero", 1, zero);
    add_init_ints(m, "minus1", 1, minus1);
    add_init_ints(m, "one", 1, one);
    add_init_ints(m, "two", 1, two);
    add_init_ints(m, "ten", 1, ten);
    add_node(m, "Shape", "s", NAMES("x"), NAMES("s"));
    attr_int(add_node(m, "Gather", "n", NAMES("s", "zero"), NAMES("n")), "axis", 0);
    attr_int(add_node(m, "Concat", "target", NAMES("n", "minus1"), NAMES("target")), "axis", 0);
    add_node(m, "Reshape", "y", NAMES("x", "target"), NAMES("y"));
    add_node(m, "Shape", "sy", NAMES("y"), NAMES("sy"));
    attr_int(add_node(m, "Gather", "w", NAMES("sy", "one"), NAMES("w")), "axis", 0);
    add_node(m, "Div", "half", NAMES("w", "two"), NAMES("half"));
    add_node(m, "Slice", "z", NAMES("y", "zero", "half", "one"), NAMES("z"));
    add_node(m, "Sub", "lo", NAMES("one", "n"), NAMES("lo"));
    add_node(m, "Mul", "hi", NAMES("n", "ten"), NAMES("hi"));
    add_node(m, "Slice", "rows", NAMES("x", "lo", "hi", "zero"), NAMES("rows"));
    add_outputs(m, NAMES("z", "rows", NULL));
    struct imported im = import_ok(m);
    /* one engine for both: the scope's tensors are its vars until freed */
    vq_engine *e;
    vq_engine_opts eo = {.kind = VQ_ENGINE_THREADED, .cpu_workers = 2};
    cr_assert_eq(vq_engine_new(&e, &eo), 0, "%s", vq_errmsg());
    for (int gpu = 0; gpu < 2; gpu++) {
        vq_exec *ex;
        vq_exec_opts xo = {.device = {gpu ? VQ_DEV_GPU : VQ_DEV_CPU, 0}};
        cr_assert_eq(vq_exec_new(&ex, e, &xo), 0, "%s", vq_errmsg());
        for (int64_t n = 1; n <= 4; n++) {
            float xs[4 * 12];
            for (int i = 0; i < n * 12; i++)
                xs[i] = (float)(i * 7 % 23) - 11;
            vq_tensor *x, *xd;
            cr_assert_eq(vq_tensor_from(&x, VQ_F32, 3, (int64_t[]){n, 4, 3}, xs), 0);
            cr_assert_eq(vq_tensor_copy_to(e, x, xo.device, &xd), 0, "%s", vq_errmsg());
            vq_feed feed = {"x", xd};
            vq_fetch f[2] = {{"z", NULL}, {"rows", NULL}};
            cr_assert_eq(vq_exec_run(ex, im.p, im.s, &feed, 1, f, 2), 0, "gpu %d: %s", gpu,
                         vq_errmsg());
            vq_tensor *z = host_of(e, f[0].tensor), *rows = host_of(e, f[1].tensor);
            const int64_t *zs = vq_tensor_shape(z);
            cr_assert(vq_tensor_ndim(z) == 2 && zs[0] == n && zs[1] == 6, "z of batch %lld",
                      (long long)n);
            for (int b = 0; b < n; b++)
                for (int j = 0; j < 6; j++)
                    cr_assert_eq(((const float *)vq_tensor_data(z))[b * 6 + j], xs[b * 12 + j]);
            int64_t first = n == 1 ? 0 : 1; /* 1 - n, plus n when negative */
            cr_assert_eq(vq_tensor_shape(rows)[0], n - first);
            cr_assert_eq(memcmp(vq_tensor_data(rows), xs + first * 12,
                                (size_t)(n - first) * 12 * sizeof(float)),
                         0, "gpu %d: rows of batch %lld", gpu, (long long)n);
            vq_tensor_release(z);
            vq_tensor_release(rows);
            vq_tensor_release(xd);
            vq_tensor_release(x);
        }
        vq_exec_stats st;
        cr_assert_eq(vq_exec_get_stats(ex, &st), 0);
        /* a plan per batch size (the program's shapes follow its values) */
        cr_assert_eq(st.prepares, 4, "gpu %d: %llu plans prepared", gpu,
                     (unsigned long long)st.prepares);
        vq_exec_free(ex);
    }
    imported_free(&im);
    vq_engine_free(e);
}

/* HardSigmoid and HardSwish import as one op each (hard_sigmoid with the
 * node's alpha and beta, hard_swish), not as a chain of scale, minimum,
 * maximum and mul; their values against the spec's formulas. */
Test(onnx, hard_sigmoid_and_hard_swish_are_one_op_each)
{
    Onnx__ModelProto *m = model_new(14);
    add_input(m, "x", 1, (int64_t[]){8});
    Onnx__NodeProto *n = add_node(m, "HardSigmoid", "hs", NAMES("x"), NAMES("hs"));
    attr_float(n, "alpha", 0.3f);
    attr_float(n, "beta", 0.4f);
    add_node(m, "HardSwish", "hw", NAMES("x"), NAMES("hw"));
    add_output(m, "hs");
    add_output(m, "hw");
    struct imported im = import_ok(m);
    cr_assert_eq(vq_program_nops(im.p, 0), 2, "%d ops", vq_program_nops(im.p, 0));
    const float x[8] = {-5, -3, -2.5f, -1, 0, 0.5f, 3, NAN};
    vq_tensor *tx;
    cr_assert_eq(vq_tensor_from(&tx, VQ_F32, 1, (int64_t[]){8}, x), 0);
    vq_feed feed = {"x", tx};
    vq_fetch ft[2] = {{"hs", NULL}, {"hw", NULL}};
    struct run r = run_new();
    cr_assert_eq(vq_exec_run(r.ex, im.p, im.s, &feed, 1, ft, 2), 0, "%s", vq_errmsg());
    const float *hs = vq_tensor_data(ft[0].tensor), *hw = vq_tensor_data(ft[1].tensor);
    for (int i = 0; i < 7; i++) {
        float l = 0.3f * x[i] + 0.4f, s = x[i] * (1.0f / 6) + 0.5f;
        float want_hs = l < 0 ? 0 : l > 1 ? 1 : l, want_hw = x[i] * (s < 0 ? 0 : s > 1 ? 1 : s);
        cr_assert_eq(hs[i], want_hs, "HardSigmoid(%g) = %g, want %g", x[i], hs[i], want_hs);
        cr_assert_eq(hw[i], want_hw, "HardSwish(%g) = %g, want %g", x[i], hw[i], want_hw);
    }
    cr_assert(isnan(hs[7]) && isnan(hw[7]), "NaN stays NaN");
    for (int j = 0; j < 2; j++)
        vq_tensor_release(ft[j].tensor);
    vq_tensor_release(tx);
    imported_free(&im);
    run_free(&r);
}

/* x * Sigmoid(x) (SiLU, as torch exports it) imports as one silu op, in
 * either order of Mul's inputs; a Sigmoid read by anything else too, or a
 * Mul of it by another value, stays a sigmoid and a mul. */
Test(onnx, mul_of_x_by_its_sigmoid_is_one_silu_op)
{
    for (int c = 0; c < 4; c++) {
        Onnx__ModelProto *m = model_new(13);
        add_input(m, "x", 1, (int64_t[]){6});
        add_input(m, "y", 1, (int64_t[]){6});
        add_node(m, "Sigmoid", "s", NAMES("x"), NAMES("s"));
        if (c == 0)
            add_node(m, "Mul", "m", NAMES("x", "s"), NAMES("out"));
        else if (c == 1)
            add_node(m, "Mul", "m", NAMES("s", "x"), NAMES("out"));
        else
            add_node(m, "Mul", "m", NAMES(c == 2 ? "x" : "y", "s"), NAMES("out"));
        add_output(m, "out");
        if (c == 2)
            add_output(m, "s"); /* a second reader of the Sigmoid */
        struct imported im = import_ok(m);
        cr_assert_eq(vq_program_nops(im.p, 0), c < 2 ? 1 : 2, "case %d: %d ops", c,
                     vq_program_nops(im.p, 0));
        const float xv[6] = {-120, -4, -0.5f, 0, 3, 90}, yv[6] = {1, 2, 3, 4, 5, 6};
        vq_tensor *tx, *ty;
        cr_assert_eq(vq_tensor_from(&tx, VQ_F32, 1, (int64_t[]){6}, xv), 0);
        cr_assert_eq(vq_tensor_from(&ty, VQ_F32, 1, (int64_t[]){6}, yv), 0);
        vq_feed feed[2] = {{"x", tx}, {"y", ty}};
        vq_fetch ft = {"out", NULL};
        struct run r = run_new();
        cr_assert_eq(vq_exec_run(r.ex, im.p, im.s, feed, 2, &ft, 1), 0, "%s", vq_errmsg());
        const float *o = vq_tensor_data(ft.tensor);
        for (int i = 0; i < 6; i++) {
            double s = 1 / (1 + exp(-(double)xv[i])), want = (c == 3 ? yv[i] : xv[i]) * s;
            cr_assert(fabs(o[i] - want) <= 2e-7 * fabs(want) + 1e-45,
                      "case %d: f(%g) = %g, want %g", c, xv[i], o[i], want);
        }
        vq_tensor_release(ft.tensor);
        vq_tensor_release(tx);
        vq_tensor_release(ty);
        imported_free(&im);
        run_free(&r);
    }
}

/* ---- the added element types (tensor.h's f16, bf16, narrow integers) ---- */

/* y = x * Cast(w) + Cast(b) and y16 = Cast(y, FLOAT16): w an f16
 * initializer in raw_data, b one in int32_data (the bit patterns, as
 * ONNX's TensorProto stores FLOAT16 in its typed fields); y16 fetched as
 * f16 is y rounded to nearest even. */
Test(onnx, float16_initializers_import_from_raw_and_typed_fields)
{
    Onnx__ModelProto *m = model_new(13);
    add_input(m, "x", 1, (int64_t[]){3});
    uint16_t w[3] = {vq_f32_to_f16(0.5f), vq_f32_to_f16(-2.0f), vq_f32_to_f16(0.1f)};
    add_init_of(m, "w", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16, 2, 1, (int64_t[]){3}, w);
    Onnx__TensorProto *b =
        tensor("b", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16, 1, (int64_t[]){3}, "", 0);
    b->has_raw_data = 0;
    b->n_int32_data = 3;
    b->int32_data = malloc(3 * sizeof *b->int32_data);
    for (int i = 0; i < 3; i++)
        b->int32_data[i] = vq_f32_to_f16((float)i - 1.25f);
    GROW(m->graph->initializer, m->graph->n_initializer);
    m->graph->initializer[m->graph->n_initializer++] = b;
    attr_int(add_node(m, "Cast", "cw", NAMES("w"), NAMES("wf")), "to",
             ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT);
    attr_int(add_node(m, "Cast", "cb", NAMES("b"), NAMES("bf")), "to",
             ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT);
    add_node(m, "Mul", "mul", NAMES("x", "wf"), NAMES("xw"));
    add_node(m, "Add", "add", NAMES("xw", "bf"), NAMES("y"));
    attr_int(add_node(m, "Cast", "c16", NAMES("y"), NAMES("y16")), "to",
             ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16);
    add_output(m, "y");
    graph_io(&m->graph->output, &m->graph->n_output, "y16", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16,
             0, NULL);
    struct imported im = import_ok(m);
    vq_dtype dt;
    cr_assert_eq(vq_program_var_info(im.p, "y16", &dt, NULL, NULL, NULL), 0);
    cr_assert_eq(dt, VQ_F16);
    struct run r = run_new();
    const float xv[3] = {3, 1.5f, 10};
    vq_tensor *tx;
    cr_assert_eq(vq_tensor_from(&tx, VQ_F32, 1, (int64_t[]){3}, xv), 0);
    vq_feed feed = {"x", tx};
    vq_fetch f[2] = {{"y", NULL}, {"y16", NULL}};
    cr_assert_eq(vq_exec_run(r.ex, im.p, im.s, &feed, 1, f, 2), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_tensor_dtype(f[1].tensor), VQ_F16);
    for (int i = 0; i < 3; i++) {
        float want = xv[i] * vq_f16_to_f32(w[i]) + vq_f16_to_f32((uint16_t)b->int32_data[i]);
        float y = ((const float *)vq_tensor_data(f[0].tensor))[i];
        cr_assert_float_eq(y, want, 1e-6, "y[%d] %g, want %g", i, y, want);
        cr_assert_eq(((const uint16_t *)vq_tensor_data(f[1].tensor))[i], vq_f32_to_f16(y));
    }
    vq_tensor_release(f[0].tensor);
    vq_tensor_release(f[1].tensor);
    vq_tensor_release(tx);
    imported_free(&im);
    run_free(&r);
}

/* A uint8 image input scaled to float (the usual preprocessing), and a
 * UINT32 initializer in uint64_data cast to int64. */
Test(onnx, uint8_input_and_uint32_initializer_import_and_run)
{
    Onnx__ModelProto *m = model_new(13);
    add_input_of(m, "img", ONNX__TENSOR_PROTO__DATA_TYPE__UINT8, 2, (int64_t[]){2, 3});
    add_init(m, "scale", 0, NULL, (const float[]){1.0f / 255});
    Onnx__TensorProto *u =
        tensor("u", ONNX__TENSOR_PROTO__DATA_TYPE__UINT32, 1, (int64_t[]){2}, "", 0);
    u->has_raw_data = 0;
    u->n_uint64_data = 2;
    u->uint64_data = malloc(2 * sizeof *u->uint64_data);
    u->uint64_data[0] = 4000000000u;
    u->uint64_data[1] = 7;
    GROW(m->graph->initializer, m->graph->n_initializer);
    m->graph->initializer[m->graph->n_initializer++] = u;
    attr_int(add_node(m, "Cast", "c", NAMES("img"), NAMES("f")), "to",
             ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT);
    add_node(m, "Mul", "mul", NAMES("f", "scale"), NAMES("y"));
    attr_int(add_node(m, "Cast", "cu", NAMES("u"), NAMES("u64")), "to",
             ONNX__TENSOR_PROTO__DATA_TYPE__INT64);
    add_output(m, "y");
    graph_io(&m->graph->output, &m->graph->n_output, "u64", ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 0,
             NULL);
    struct imported im = import_ok(m);
    vq_dtype dt;
    cr_assert_eq(vq_program_var_info(im.p, "img", &dt, NULL, NULL, NULL), 0);
    cr_assert_eq(dt, VQ_U8);
    struct run r = run_new();
    const uint8_t px[6] = {0, 1, 127, 128, 254, 255};
    vq_tensor *ti;
    cr_assert_eq(vq_tensor_from(&ti, VQ_U8, 2, (int64_t[]){2, 3}, px), 0);
    vq_feed feed = {"img", ti};
    vq_fetch f[2] = {{"y", NULL}, {"u64", NULL}};
    cr_assert_eq(vq_exec_run(r.ex, im.p, im.s, &feed, 1, f, 2), 0, "%s", vq_errmsg());
    for (int i = 0; i < 6; i++)
        cr_assert_float_eq(((const float *)vq_tensor_data(f[0].tensor))[i],
                           (float)px[i] * (1.0f / 255), 1e-7);
    cr_assert_eq(((const int64_t *)vq_tensor_data(f[1].tensor))[0], 4000000000);
    cr_assert_eq(((const int64_t *)vq_tensor_data(f[1].tensor))[1], 7);
    vq_tensor_release(f[0].tensor);
    vq_tensor_release(f[1].tensor);
    vq_tensor_release(ti);
    imported_free(&im);
    run_free(&r);
}

/* An op that does not take the dtype fails the import, naming the node,
 * the op and the dtype. */
Test(onnx, an_op_without_the_dtype_fails_the_import_naming_it)
{
    Onnx__ModelProto *m = model_new(13);
    add_input_of(m, "x", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16, 2, (int64_t[]){3, 3});
    add_node(m, "Det", "det", NAMES("x"), NAMES("y"));
    graph_io(&m->graph->output, &m->graph->n_output, "y", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16, 0,
             NULL);
    expect_error(m, VQ_ENOSYS, NAMES("Det", "det", "dtype f16"));
}
