/* Programs (graph/program.c, program_codec.c, program_dump.c): the builder
 * and its errors, clones, the protobuf encoding (deterministic, round
 * trips, hand-written messages, what decode refuses), save and load, the
 * text dump, the hash, and a fuzz of decode over truncated and corrupted
 * encodings. */
#include <varq/varq.h>

#include "../graph/graph_internal.h"
#include "../graph/program.h"    /* vq__block_append */
#include "../ops/ops_internal.h" /* vq__file_inject_fault */

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "leakcheck.h"

TestSuite(program, .fini = leak_check);

#define DIMS(...) (sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), ((int64_t[]){__VA_ARGS__})
#define NAMES(...) ((const char *const[]){__VA_ARGS__}), \
                   (int)(sizeof((const char *const[]){__VA_ARGS__}) / sizeof(const char *))

static void add_var(vq_program *p, int block, const char *name, vq_dtype dt, int ndim,
                    const int64_t *shape, bool persistable)
{
    cr_assert_eq(vq_program_add_var(p, block, name, dt, ndim, shape, persistable), 0, "%s: %s",
                 name, vq_errmsg());
}

static int add_op(vq_program *p, int block, const char *type, const char *const *in, int nin,
                  const char *const *out, int nout, const vq_attr *attrs, int nattrs)
{
    int rc = vq_program_add_op(p, block, type, in, nin, out, nout, attrs, nattrs);
    cr_assert_geq(rc, 0, "%s: %s", type, vq_errmsg());
    return rc;
}

/* Seven ops over the main block and a nested block that reads x from it. */
static vq_program *sample(void)
{
    vq_program *p;
    cr_assert_eq(vq_program_new(&p), 0);
    add_var(p, 0, "x", VQ_F32, DIMS(16, 16), false);
    add_var(p, 0, "w", VQ_F32, DIMS(16, 4), true);
    add_var(p, 0, "y", VQ_F32, DIMS(16, 4), false);
    add_var(p, 0, "b", VQ_F32, DIMS(4), true);
    add_var(p, 0, "z", VQ_F32, DIMS(16, 4), false);
    add_var(p, 0, "r", VQ_F32, DIMS(-1, 4), false);
    add_var(p, 0, "c", VQ_F32, DIMS(16, 12), false);
    add_var(p, 0, "s", VQ_F32, DIMS(16, 12), false);
    add_var(p, 0, "sl", VQ_F32, DIMS(16, 2), false);
    add_var(p, 0, "ci", VQ_I32, DIMS(16, 2), false);

    vq_attr mm[] = {VQ_ATTR_B("transpose_x", false), VQ_ATTR_I("alpha", 1)};
    cr_assert_eq(add_op(p, 0, "matmul", NAMES("x", "w"), NAMES("y"), mm, 2), 0);
    cr_assert_eq(add_op(p, 0, "add", NAMES("y", "b"), NAMES("z"), NULL, 0), 1);
    cr_assert_eq(add_op(p, 0, "relu", NAMES("z"), NAMES("r"), NULL, 0), 2);
    vq_attr axis = VQ_ATTR_I("axis", 1);
    cr_assert_eq(add_op(p, 0, "concat", NAMES("r", "z", "y"), NAMES("c"), &axis, 1), 3);
    vq_attr sc[] = {VQ_ATTR_F("scale", 0.5), VQ_ATTR_I("bias", -2)};
    cr_assert_eq(add_op(p, 0, "scale", NAMES("c"), NAMES("s"), sc, 2), 4);
    int64_t axes[] = {1}, starts[] = {0}, ends[] = {2};
    vq_attr sli[] = {VQ_ATTR_IS("axes", axes, 1), VQ_ATTR_IS("starts", starts, 1),
                     VQ_ATTR_IS("ends", ends, 1)};
    cr_assert_eq(add_op(p, 0, "slice", NAMES("s"), NAMES("sl"), sli, 3), 5);
    vq_attr dt = VQ_ATTR_S("dtype", "i32");
    cr_assert_eq(add_op(p, 0, "cast", NAMES("sl"), NAMES("ci"), &dt, 1), 6);

    cr_assert_eq(vq_program_add_block(p, 0), 1);
    add_var(p, 1, "k", VQ_I64, 0, NULL, false);
    add_var(p, 1, "h", VQ_F32, DIMS(16, 16), false);
    vq_attr fill[] = {VQ_ATTR_IS("shape", NULL, 0), VQ_ATTR_S("dtype", "i64"),
                      VQ_ATTR_F("value", 3)};
    cr_assert_eq(add_op(p, 1, "fill_constant", NULL, 0, NAMES("k"), fill, 3), 0);
    cr_assert_eq(add_op(p, 1, "relu", NAMES("x"), NAMES("h"), NULL, 0), 1);
    return p;
}

static const char sample_text[] =
    "var x : f32[16,16]\n"
    "var w : f32[16,4] persistable\n"
    "var y : f32[16,4]\n"
    "var b : f32[4] persistable\n"
    "var z : f32[16,4]\n"
    "var r : f32[?,4]\n"
    "var c : f32[16,12]\n"
    "var s : f32[16,12]\n"
    "var sl : f32[16,2]\n"
    "var ci : i32[16,2]\n"
    "op 0 matmul(X=x, Y=w) -> (Out=y) {transpose_x=false, alpha=1}\n"
    "op 1 add(X=y, Y=b) -> (Out=z)\n"
    "op 2 relu(X=z) -> (Out=r)\n"
    "op 3 concat(X=[r, z, y]) -> (Out=c) {axis=1}\n"
    "op 4 scale(X=c) -> (Out=s) {scale=0.5, bias=-2}\n"
    "op 5 slice(X=s) -> (Out=sl) {axes=[1], starts=[0], ends=[2]}\n"
    "op 6 cast(X=sl) -> (Out=ci) {dtype=\"i32\"}\n"
    "block 1 (parent 0):\n"
    "  var k : i64[]\n"
    "  var h : f32[16,16]\n"
    "  op 0 fill_constant() -> (Out=k) {shape=[], dtype=\"i64\", value=3}\n"
    "  op 1 relu(X=x) -> (Out=h)\n";

/* vq_program_dump into a string (malloc'd). */
static char *dump(const vq_program *p)
{
    char *text = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&text, &n);
    cr_assert(f);
    cr_assert_eq(vq_program_dump(p, f), 0, "%s", vq_errmsg());
    fclose(f);
    return text;
}

static void encode(const vq_program *p, void **buf, size_t *len)
{
    cr_assert_eq(vq_program_encode(p, buf, len), 0, "%s", vq_errmsg());
}

static void assert_same_bytes(const void *a, size_t na, const void *b, size_t nb)
{
    cr_assert_eq(na, nb, "lengths %zu and %zu", na, nb);
    cr_assert(memcmp(a, b, na) == 0, "bytes differ");
}

Test(program, counts_blocks_ops_and_vars)
{
    vq_program *p = sample();
    cr_assert_eq(vq_program_nblocks(p), 2);
    cr_assert_eq(vq_program_nops(p, 0), 7);
    cr_assert_eq(vq_program_nops(p, 1), 2);
    cr_assert_eq(vq_program_nvars(p, 0), 10);
    cr_assert_eq(vq_program_nvars(p, 1), 2);
    cr_assert_eq(vq_program_nops(p, 2), VQ_EINVAL);
    cr_assert_eq(vq_program_nvars(p, -1), VQ_EINVAL);
    cr_assert_eq(vq__program_find_var(p, "sl"), 8);
    cr_assert_eq(vq__program_find_var(p, "nope"), -1);
    const vq__pop *concat = &p->ops[p->blocks[0].ops[3]];
    cr_assert_eq(concat->nin, 3);
    cr_assert_eq(concat->in[1], vq__program_find_var(p, "z"));
    vq_program_free(p);
    vq_program_free(NULL);
}

Test(program, var_info_reports_declarations)
{
    vq_program *p = sample();
    vq_dtype dt = VQ_I64;
    int ndim = 0;
    int64_t shape[VQ_MAX_DIMS] = {0};
    bool pers = true;
    cr_assert_eq(vq_program_var_info(p, "r", &dt, &ndim, shape, &pers), 0, "%s", vq_errmsg());
    cr_assert_eq(dt, VQ_F32);
    cr_assert_eq(ndim, 2);
    cr_assert_eq(shape[0], -1, "an unknown dim is -1");
    cr_assert_eq(shape[1], 4);
    cr_assert_eq(pers, false);
    cr_assert_eq(vq_program_var_info(p, "w", NULL, NULL, NULL, &pers), 0);
    cr_assert_eq(pers, true);
    cr_assert_eq(vq_program_var_info(p, "nope", &dt, NULL, NULL, NULL), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "'nope'"), "%s", vq_errmsg());
    cr_assert_eq(vq_program_var_info(p, NULL, NULL, NULL, NULL, NULL), VQ_EINVAL);
    vq_program_free(p);
}

Test(program, dump_matches_expected_text)
{
    vq_program *p = sample();
    char *text = dump(p);
    cr_assert_str_eq(text, sample_text);
    free(text);
    vq_program_free(p);
}

/* The attributes of a cond (then_block, else_block, then_outputs,
 * else_outputs; one output each). */
static void cond_attrs(vq_attr a[4], int then_b, int else_b, const char **then_out,
                       const char **else_out)
{
    a[0] = VQ_ATTR_I("then_block", then_b);
    a[1] = VQ_ATTR_I("else_block", else_b);
    a[2] = VQ_ATTR_SS("then_outputs", then_out, 1);
    a[3] = VQ_ATTR_SS("else_outputs", else_out, 1);
}

/* while x > one: x = cond(x > ten, then x * half, else x - one); i += one.
 * Block 1 is the body, blocks 2 and 3 the branches of the cond in it. */
static vq_program *while_with_cond(void)
{
    vq_program *p;
    cr_assert_eq(vq_program_new(&p), 0);
    const char *scalars[] = {"x", "one", "half", "ten", "i0", "xo", "io"};
    for (int i = 0; i < 7; i++)
        add_var(p, 0, scalars[i], VQ_F64, 0, NULL, false);
    add_var(p, 0, "c0", VQ_BOOL, 0, NULL, false);
    cr_assert_eq(vq_program_add_block(p, 0), 1);
    const char *body[] = {"bx", "bi", "bx2", "bi2"};
    for (int i = 0; i < 4; i++)
        add_var(p, 1, body[i], VQ_F64, 0, NULL, false);
    add_var(p, 1, "cc", VQ_BOOL, 0, NULL, false);
    add_var(p, 1, "bc", VQ_BOOL, 0, NULL, false);
    cr_assert_eq(vq_program_add_block(p, 1), 2);
    cr_assert_eq(vq_program_add_block(p, 1), 3);
    add_var(p, 2, "t", VQ_F64, 0, NULL, false);
    add_var(p, 3, "e", VQ_F64, 0, NULL, false);
    add_op(p, 2, "mul", NAMES("bx", "half"), NAMES("t"), NULL, 0);
    add_op(p, 3, "sub", NAMES("bx", "one"), NAMES("e"), NULL, 0);
    add_op(p, 1, "greater", NAMES("bx", "ten"), NAMES("cc"), NULL, 0);
    vq_attr ca[4];
    cond_attrs(ca, 2, 3, (const char *[]){"t"}, (const char *[]){"e"});
    add_op(p, 1, "cond", NAMES("cc", "bx"), NAMES("bx2"), ca, 4);
    add_op(p, 1, "add", NAMES("bi", "one"), NAMES("bi2"), NULL, 0);
    add_op(p, 1, "greater", NAMES("bx2", "one"), NAMES("bc"), NULL, 0);
    add_op(p, 0, "greater", NAMES("x", "one"), NAMES("c0"), NULL, 0);
    const char *in[] = {"bx", "bi"}, *out[] = {"bx2", "bi2"};
    vq_attr wa[] = {VQ_ATTR_I("body_block", 1), VQ_ATTR_SS("body_inputs", in, 2),
                    VQ_ATTR_SS("body_outputs", out, 2), VQ_ATTR_S("body_cond", "bc"),
                    VQ_ATTR_I("max_iters", 50)};
    add_op(p, 0, "while", NAMES("c0", "x", "i0"), NAMES("xo", "io"), wa, 5);
    return p;
}

Test(program, dump_nests_the_blocks_of_while_and_cond_under_their_op)
{
    vq_program *p = while_with_cond();
    static const char want[] =
        "var x : f64[]\n"
        "var one : f64[]\n"
        "var half : f64[]\n"
        "var ten : f64[]\n"
        "var i0 : f64[]\n"
        "var xo : f64[]\n"
        "var io : f64[]\n"
        "var c0 : bool[]\n"
        "op 0 greater(X=x, Y=one) -> (Out=c0)\n"
        "op 1 while(Cond=c0, X=[x, i0]) -> (Out=[xo, io]) {body_block=1, "
        "body_inputs=[\"bx\", \"bi\"], body_outputs=[\"bx2\", \"bi2\"], body_cond=\"bc\", "
        "max_iters=50}\n"
        "  # reads also: ten, half, one\n"
        "  block 1 (body):\n"
        "    var bx : f64[]\n"
        "    var bi : f64[]\n"
        "    var bx2 : f64[]\n"
        "    var bi2 : f64[]\n"
        "    var cc : bool[]\n"
        "    var bc : bool[]\n"
        "    op 0 greater(X=bx, Y=ten) -> (Out=cc)\n"
        "    op 1 cond(Cond=cc, X=[bx]) -> (Out=[bx2]) {then_block=2, else_block=3, "
        "then_outputs=[\"t\"], else_outputs=[\"e\"]}\n"
        "      # reads also: half, one\n"
        "      block 2 (then):\n"
        "        var t : f64[]\n"
        "        op 0 mul(X=bx, Y=half) -> (Out=t)\n"
        "      block 3 (else):\n"
        "        var e : f64[]\n"
        "        op 0 sub(X=bx, Y=one) -> (Out=e)\n"
        "    op 2 add(X=bi, Y=one) -> (Out=bi2)\n"
        "    op 3 greater(X=bx2, Y=one) -> (Out=bc)\n";
    char *text = dump(p);
    cr_assert_str_eq(text, want);
    free(text);
    /* A decoded copy dumps the same. */
    void *buf;
    size_t len;
    encode(p, &buf, &len);
    vq_program *q;
    cr_assert_eq(vq_program_decode(&q, buf, len), 0, "%s", vq_errmsg());
    text = dump(q);
    cr_assert_str_eq(text, want);
    free(text);
    free(buf);
    vq_program_free(q);
    vq_program_free(p);
}

/* "# reads also:" lists, in first-read order, what a control op's blocks
 * read from enclosing blocks (a cond's branch outputs included) that its
 * inputs do not list; an op whose blocks read nothing more has no line. */
Test(program, dump_lists_the_enclosing_vars_a_control_op_reads_beyond_its_inputs)
{
    vq_program *p;
    cr_assert_eq(vq_program_new(&p), 0);
    add_var(p, 0, "s", VQ_BOOL, 0, NULL, false);
    const char *outer[] = {"x", "w", "v", "y", "z"};
    for (int i = 0; i < 5; i++)
        add_var(p, 0, outer[i], VQ_F64, 0, NULL, false);
    for (int b = 1; b <= 4; b++)
        cr_assert_eq(vq_program_add_block(p, 0), b);
    add_var(p, 1, "t", VQ_F64, 0, NULL, false);
    add_var(p, 1, "t2", VQ_F64, 0, NULL, false);
    add_op(p, 1, "mul", NAMES("x", "w"), NAMES("t"), NULL, 0);
    add_op(p, 1, "add", NAMES("t", "w"), NAMES("t2"), NULL, 0);
    vq_attr a[4];
    cond_attrs(a, 1, 2, (const char *[]){"t2"}, (const char *[]){"v"});
    add_op(p, 0, "cond", NAMES("s", "x"), NAMES("y"), a, 4);
    cond_attrs(a, 3, 4, (const char *[]){"x"}, (const char *[]){"x"});
    add_op(p, 0, "cond", NAMES("s", "x"), NAMES("z"), a, 4);
    char *text = dump(p);
    cr_assert_str_eq(text,
                     "var s : bool[]\n"
                     "var x : f64[]\n"
                     "var w : f64[]\n"
                     "var v : f64[]\n"
                     "var y : f64[]\n"
                     "var z : f64[]\n"
                     "op 0 cond(Cond=s, X=[x]) -> (Out=[y]) {then_block=1, else_block=2, "
                     "then_outputs=[\"t2\"], else_outputs=[\"v\"]}\n"
                     "  # reads also: w, v\n"
                     "  block 1 (then):\n"
                     "    var t : f64[]\n"
                     "    var t2 : f64[]\n"
                     "    op 0 mul(X=x, Y=w) -> (Out=t)\n"
                     "    op 1 add(X=t, Y=w) -> (Out=t2)\n"
                     "  block 2 (else):\n"
                     "op 1 cond(Cond=s, X=[x]) -> (Out=[z]) {then_block=3, else_block=4, "
                     "then_outputs=[\"x\"], else_outputs=[\"x\"]}\n"
                     "  block 3 (then):\n"
                     "  block 4 (else):\n");
    free(text);
    vq_program_free(p);
}

/* A block that no control op of its parent names (none at all, a block
 * number out of range, or a block of another parent) is shown after block
 * 0's ops as "block N (parent P):", as a program without control ops is. */
Test(program, dump_shows_blocks_no_control_op_nests_at_the_end)
{
    vq_program *p;
    cr_assert_eq(vq_program_new(&p), 0);
    add_var(p, 0, "s", VQ_BOOL, 0, NULL, false);
    add_var(p, 0, "x", VQ_F64, 0, NULL, false);
    add_var(p, 0, "y", VQ_F64, 0, NULL, false);
    cr_assert_eq(vq_program_add_block(p, 0), 1);
    cr_assert_eq(vq_program_add_block(p, 0), 2);
    cr_assert_eq(vq_program_add_block(p, 1), 3);
    add_var(p, 1, "a", VQ_F64, 0, NULL, false);
    add_var(p, 2, "bo", VQ_F64, 0, NULL, false);
    add_var(p, 3, "c", VQ_F64, 0, NULL, false);
    vq_attr two = VQ_ATTR_F("scale", 2);
    add_op(p, 1, "scale", NAMES("x"), NAMES("a"), &two, 1);
    vq_attr ca[4];
    cond_attrs(ca, 1, 3, (const char *[]){"a"}, (const char *[]){"c"}); /* 3: not a child of 0 */
    add_op(p, 0, "cond", NAMES("s", "x"), NAMES("y"), ca, 4);
    const char *xs[] = {"x"};
    vq_attr wa[] = {VQ_ATTR_I("body_block", 99), VQ_ATTR_SS("body_inputs", xs, 1),
                    VQ_ATTR_SS("body_outputs", xs, 1), VQ_ATTR_S("body_cond", "s")};
    add_op(p, 2, "while", NAMES("s", "x"), NAMES("bo"), wa, 4);
    char *text = dump(p);
    cr_assert_str_eq(text,
                     "var s : bool[]\n"
                     "var x : f64[]\n"
                     "var y : f64[]\n"
                     "op 0 cond(Cond=s, X=[x]) -> (Out=[y]) {then_block=1, else_block=3, "
                     "then_outputs=[\"a\"], else_outputs=[\"c\"]}\n"
                     "  block 1 (then):\n"
                     "    var a : f64[]\n"
                     "    op 0 scale(X=x) -> (Out=a) {scale=2}\n"
                     "block 2 (parent 0):\n"
                     "  var bo : f64[]\n"
                     "  op 0 while(Cond=s, X=[x]) -> (Out=[bo]) {body_block=99, "
                     "body_inputs=[\"x\"], body_outputs=[\"x\"], body_cond=\"s\"}\n"
                     "block 3 (parent 1):\n"
                     "  var c : f64[]\n");
    free(text);
    vq_program_free(p);
}

Test(program, encode_decode_encode_gives_identical_bytes_and_hash)
{
    vq_program *p = sample();
    void *a, *b;
    size_t na, nb;
    encode(p, &a, &na);
    vq_program *q;
    cr_assert_eq(vq_program_decode(&q, a, na), 0, "%s", vq_errmsg());
    encode(q, &b, &nb);
    assert_same_bytes(a, na, b, nb);
    cr_assert_eq(vq_program_hash(p), vq_program_hash(q));
    char *text = dump(q);
    cr_assert_str_eq(text, sample_text);
    cr_assert_eq(q->ops[0].def, vq__op_find("matmul"));
    free(text);
    free(a);
    free(b);
    vq_program_free(p);
    vq_program_free(q);
}

/* A program whose cond op has no attributes at all (fuzz_program made it
 * by changing one byte of a valid program): decoding checked a known op's
 * attributes against its schema only when it had some, so the cond
 * reached preparation without its blocks and read a missing attribute. */
static const unsigned char cond_without_attributes[] =
    {0x0a, 0x80, 0x02, 0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0x12, 0x08,
     0x0a, 0x01, 0x78, 0x10, 0x01, 0x1a, 0x01, 0x03, 0x12, 0x0a, 0x0a, 0x01, 0x77, 0x10, 0x01, 0x3d,
     0x01, 0x03, 0x20, 0x01, 0x12, 0x05, 0x0a, 0x01, 0x73, 0x10, 0x01, 0x12, 0x08, 0x0a, 0x04, 0x7a,
     0x65, 0x72, 0x6f, 0x10, 0x01, 0x12, 0x05, 0x0a, 0x01, 0x63, 0x10, 0x04, 0x12, 0x08, 0x0a, 0x01,
     0x79, 0x10, 0x01, 0x1a, 0x01, 0x03, 0x12, 0x08, 0x0a, 0x04, 0x6c, 0x6f, 0x73, 0x73, 0x10, 0x01,
     0x1a, 0x26, 0x0a, 0x07, 0x67, 0x72, 0x65, 0x61, 0x74, 0x65, 0x72, 0x12, 0x06, 0x0a, 0x01, 0x58,
     0x12, 0x01, 0x73, 0x12, 0x09, 0x0a, 0x01, 0x59, 0x12, 0x04, 0x7a, 0x65, 0x72, 0x6f, 0x1a, 0x08,
     0x0a, 0x03, 0x4f, 0x75, 0x74, 0x12, 0x01, 0x63, 0x1a, 0x23, 0x0a, 0x04, 0x63, 0x6f, 0x6e, 0x64,
     0x12, 0x09, 0x0a, 0x04, 0x43, 0x6f, 0x6e, 0x64, 0x12, 0x01, 0x63, 0x12, 0x06, 0x0a, 0x01, 0x58,
     0x12, 0x01, 0x78, 0x1a, 0x08, 0x0a, 0x03, 0x4f, 0x75, 0x74, 0x12, 0x01, 0x79, 0x22, 0x0e, 0x0a,
     0x0a, 0x74, 0x68, 0x65, 0x6e, 0x5f, 0x62, 0x6c, 0x6f, 0x63, 0x6b, 0x10, 0x01, 0x22, 0x0e, 0x0a,
     0x0a, 0x65, 0x6c, 0x73, 0x65, 0x5f, 0x62, 0x6c, 0x6f, 0x63, 0x6b, 0x10, 0x02, 0x22, 0x13, 0x0a,
     0x0c, 0x74, 0x68, 0x65, 0x6e, 0x5f, 0x6f, 0x75, 0x74, 0x70, 0x75, 0x74, 0x73, 0x42, 0x03, 0x0a,
     0x01, 0x74, 0x22, 0x13, 0x0a, 0x0c, 0x65, 0x6c, 0x73, 0x65, 0x5f, 0x6f, 0x75, 0x74, 0x70, 0x75,
     0x74, 0x73, 0x42, 0x03, 0x0a, 0x01, 0x78, 0x1a, 0x1a, 0x0a, 0x03, 0x73, 0x75, 0x6d, 0x12, 0x06,
     0x0a, 0x01, 0x58, 0x12, 0x01, 0x79, 0x1a, 0x0b, 0x0a, 0x03, 0x4f, 0x75, 0x74, 0x12, 0x04, 0x6c,
     0x6f, 0x73, 0x73, 0x2a, 0x2b, 0x12, 0x08, 0x0a, 0x01, 0x74, 0x10, 0x01, 0x1a, 0x01, 0x03, 0x1a,
     0x1f, 0x0a, 0x03, 0x6d, 0x75, 0x6c, 0x12, 0x06, 0x0a, 0x01, 0x58, 0x12, 0x01, 0x77, 0x12, 0x06,
     0x0a, 0x01, 0x59, 0x12, 0x01, 0x78, 0x1a, 0x08, 0x0a, 0x03, 0x4f, 0x75, 0x74, 0x12, 0x01, 0x74,
     0x0a, 0x00};

Test(program, decoding_an_op_without_attributes_still_requires_its_schemas_ones)
{
    vq_program *q = NULL;
    cr_assert_eq(vq_program_decode(&q, cond_without_attributes, sizeof cond_without_attributes),
                 VQ_EINVAL);
    cr_assert_null(q);
    cr_assert(strstr(vq_errmsg(), "cond: attribute then_block (int) is required"), "%s",
              vq_errmsg());
}

Test(program, int_attribute_for_a_float_encodes_as_the_float)
{
    vq_program *p, *q;
    cr_assert_eq(vq_program_new(&p), 0);
    cr_assert_eq(vq_program_new(&q), 0);
    for (int i = 0; i < 2; i++) {
        vq_program *t = i ? q : p;
        add_var(t, 0, "a", VQ_F64, DIMS(3), false);
        add_var(t, 0, "o", VQ_F64, DIMS(3), false);
    }
    vq_attr ai[] = {VQ_ATTR_I("scale", 2), VQ_ATTR_I("bias", 0)};
    vq_attr af[] = {VQ_ATTR_F("scale", 2.0), VQ_ATTR_F("bias", 0.0)};
    add_op(p, 0, "scale", NAMES("a"), NAMES("o"), ai, 2);
    add_op(q, 0, "scale", NAMES("a"), NAMES("o"), af, 2);
    cr_assert_eq(p->ops[0].attrs[0].type, VQ_ATTR_FLOAT);
    void *a, *b;
    size_t na, nb;
    encode(p, &a, &na);
    encode(q, &b, &nb);
    assert_same_bytes(a, na, b, nb);
    free(a);
    free(b);
    vq_program_free(p);
    vq_program_free(q);
}

Test(program, hash_is_cached_and_changes_with_the_program)
{
    vq_program *p = sample();
    uint64_t h = vq_program_hash(p);
    cr_assert(p->hash_valid);
    cr_assert_eq(vq_program_hash(p), h);
    add_var(p, 0, "extra", VQ_F32, DIMS(1), false);
    cr_assert_not(p->hash_valid);
    uint64_t h2 = vq_program_hash(p);
    cr_assert_neq(h2, h);
    add_op(p, 0, "relu", NAMES("x"), NAMES("extra"), NULL, 0);
    cr_assert_neq(vq_program_hash(p), h2);
    cr_assert_neq(vq_program_add_block(p, 1), VQ_EINVAL);
    cr_assert_not(p->hash_valid);
    vq_program_free(p);
}

/* An op's vars enter the hash by their names' hashes (kept in each var):
 * two programs that declare the same vars, in either order, and differ
 * only in which of two alike vars one op reads or writes hash apart;
 * the same wiring hashes equal. */
Test(program, renaming_one_var_of_one_op_changes_the_hash)
{
    vq_program *p[4];
    for (int k = 0; k < 4; k++) {
        cr_assert_eq(vq_program_new(&p[k]), 0);
        /* programs 2 and 3 declare their vars in the other order */
        const char *order[3] = {"x", "y", "z"}, *rev[3] = {"z", "y", "x"};
        for (int i = 0; i < 3; i++)
            add_var(p[k], 0, k < 2 ? order[i] : rev[i], VQ_F32, DIMS(2), false);
    }
    add_op(p[0], 0, "relu", NAMES("x"), NAMES("y"), NULL, 0);
    add_op(p[1], 0, "relu", NAMES("x"), NAMES("z"), NULL, 0); /* another output */
    add_op(p[2], 0, "relu", NAMES("x"), NAMES("y"), NULL, 0); /* p[0], vars reordered */
    add_op(p[3], 0, "relu", NAMES("z"), NAMES("y"), NULL, 0); /* another input */
    cr_assert_neq(vq_program_hash(p[0]), vq_program_hash(p[1]));
    cr_assert_neq(vq_program_hash(p[0]), vq_program_hash(p[3]));
    cr_assert_neq(vq_program_hash(p[1]), vq_program_hash(p[3]));
    cr_assert_eq(vq_program_hash(p[0]), vq_program_hash(p[2]));
    for (int k = 0; k < 4; k++)
        vq_program_free(p[k]);
}

Test(program, a_clone_is_an_equal_program_of_its_own)
{
    vq_program *p = sample(), *c = NULL;
    cr_assert_eq(vq_program_clone(NULL, &c), VQ_EINVAL);
    cr_assert_str_eq(vq_errmsg(), "vq_program_clone: NULL argument");
    cr_assert_eq(vq_program_clone(p, NULL), VQ_EINVAL);
    cr_assert_eq(vq_program_clone(p, &c), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_program_hash(c), vq_program_hash(p));
    for (int b = 0; b < vq_program_nblocks(p); b++) {
        cr_assert_eq(vq_program_nops(c, b), vq_program_nops(p, b));
        cr_assert_eq(vq_program_nvars(c, b), vq_program_nvars(p, b));
    }
    uint64_t h = vq_program_hash(p);
    add_var(c, 0, "extra", VQ_F32, DIMS(1), false);
    cr_assert_eq(vq_program_hash(p), h, "changing the clone changed the original");
    vq_program_free(c);
    vq_program_free(p);
}

/* Each field the encoding writes changes the hash: a hash that ignored
 * one would let the plan cache reuse a wrong plan. Each mutation is made
 * on a fresh copy of the sample, and the hash computed again. */
Test(program, the_hash_sees_every_field_of_vars_ops_attributes_and_blocks)
{
    vq_program *base = sample();
    uint64_t h0 = vq_program_hash(base);
    vq_program_free(base);
    for (int m = 0; m < 18; m++) {
        vq_program *p = sample();
        vq__pop *mm = &p->ops[0], *sc = &p->ops[4], *sl = &p->ops[5], *cast = &p->ops[6];
        switch (m) {
        case 0: /* a var's name (and the hash kept with it) */
            p->vars[0].name[0] = 'q';
            p->vars[0].name_hash = vq__name_hash(p->vars[0].name);
            break;
        case 1: p->vars[0].dtype = VQ_F64; break;                 /* dtype */
        case 2: p->vars[0].shape[1] = 17; break;                  /* a dim */
        case 3: p->vars[5].shape[0] = 16; break;                  /* an unknown dim */
        case 4: p->vars[2].persistable = true; break;
        case 5: p->vars[2].stop_gradient = true; break;
        case 6: p->ops[2].type[0] = 's'; break;                   /* relu -> selu */
        case 7: mm->in[1] = 4; break;                             /* wiring: Y = b */
        case 8: mm->out[0] = 4; break;
        case 9: mm->attrs[0].i = 1; break;                        /* a bool */
        case 10: sc->attrs[0].f = 0.25; break;                    /* a float */
        case 11: p->ops[3].attrs[0].i = 0; break;                 /* an int: concat's axis */
        case 12: ((int64_t *)sl->attrs[2].ints)[0] = 3; break;    /* a list */
        case 13: ((char *)cast->attrs[0].s)[1] = '6'; break;      /* a string: i32 -> i62 */
        case 14: p->ops[1].priority = 5; break;
        case 15: p->blocks[1].parent = 1 - p->blocks[1].parent; break;
        case 16: /* two ops of block 0 in the other order */ {
            int t = p->blocks[0].ops[3];
            p->blocks[0].ops[3] = p->blocks[0].ops[4];
            p->blocks[0].ops[4] = t;
            break;
        }
        case 17: ((char *)mm->attrs[1].name)[0] = 'b'; break;     /* an attribute's name */
        }
        p->hash_valid = false;
        cr_assert_neq(vq_program_hash(p), h0, "mutation %d does not change the hash", m);
        vq_program_free(p);
    }
}

Test(program, attributes_are_deep_copies)
{
    vq_program *p;
    cr_assert_eq(vq_program_new(&p), 0);
    add_var(p, 0, "a", VQ_F32, DIMS(2, 3), false);
    add_var(p, 0, "o", VQ_F32, DIMS(3, 2), false);
    char name[] = "perm";
    int64_t perm[] = {1, 0};
    vq_attr a = VQ_ATTR_IS(name, perm, 2);
    add_op(p, 0, "transpose", NAMES("a"), NAMES("o"), &a, 1);
    name[0] = 'x';
    perm[0] = 7;
    cr_assert_str_eq(p->ops[0].attrs[0].name, "perm");
    cr_assert_eq(p->ops[0].attrs[0].ints[0], 1);
    char dtype[] = "f64";
    vq_attr s = VQ_ATTR_S("dtype", dtype);
    add_var(p, 0, "d", VQ_F64, DIMS(3, 2), false);
    add_op(p, 0, "cast", NAMES("o"), NAMES("d"), &s, 1);
    dtype[0] = 'i';
    cr_assert_str_eq(p->ops[1].attrs[0].s, "f64");
    vq_program_free(p);
}

Test(program, save_and_load_through_a_file)
{
    char dir[] = "/tmp/varq_program_XXXXXX";
    cr_assert(mkdtemp(dir));
    char path[128], missing[160];
    snprintf(path, sizeof path, "%s/model.pb", dir);
    snprintf(missing, sizeof missing, "%s/none/model.pb", dir);
    vq_program *p = sample(), *q;
    cr_assert_eq(vq_program_save(p, path), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_program_save(p, path), 0, "%s", vq_errmsg()); /* replaces it */
    cr_assert_eq(vq_program_load(&q, path), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_program_hash(q), vq_program_hash(p));
    char *text = dump(q);
    cr_assert_str_eq(text, sample_text);
    free(text);
    vq_program_free(q);

    cr_assert_eq(vq_program_load(&q, missing), VQ_EIO);
    cr_assert_null(q);
    cr_assert(strstr(vq_errmsg(), missing), "%s", vq_errmsg());
    cr_assert_eq(vq_program_save(p, missing), VQ_EIO);
    cr_assert(strstr(vq_errmsg(), missing), "%s", vq_errmsg());

    /* A save interrupted midway fails naming the path and leaves the old
     * program whole; one made of short writes saves it all. */
    vq__file_inject_fault(0, VQ__FAULT_MIDWAY);
    cr_assert_eq(vq_program_save(p, path), VQ_EIO);
    vq__file_inject_fault(-1, VQ__FAULT_FULL);
    cr_assert(strstr(vq_errmsg(), path), "%s", vq_errmsg());
    cr_assert_eq(vq_program_load(&q, path), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_program_hash(q), vq_program_hash(p));
    vq_program_free(q);
    vq__file_inject_fault(0, VQ__FAULT_SHORT);
    cr_assert_eq(vq_program_save(p, path), 0, "%s", vq_errmsg());
    vq__file_inject_fault(-1, VQ__FAULT_FULL);
    cr_assert_eq(vq_program_load(&q, path), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_program_hash(q), vq_program_hash(p));
    vq_program_free(q);

    /* A file that is not a program: VQ_EINVAL naming the path. */
    FILE *f = fopen(path, "wb");
    cr_assert(f);
    fputs("not a program at all", f);
    fclose(f);
    cr_assert_eq(vq_program_load(&q, path), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), path), "%s", vq_errmsg());

    /* Only model.pb is left: no temporary files. */
    char cmd[256];
    snprintf(cmd, sizeof cmd, "test \"$(ls -A %s)\" = model.pb", dir);
    cr_assert_eq(system(cmd), 0);
    unlink(path);
    rmdir(dir);
    vq_program_free(p);
}

/* vq_program_add_op fails with VQ_EINVAL and a message holding each of
 * the words, and leaves the program as it was. */
static void assert_add_op_fails(vq_program *p, int block, const char *type,
                                const char *const *in, int nin, const char *const *out, int nout,
                                const vq_attr *attrs, int nattrs, const char *const *words,
                                int nwords)
{
    int before = p->nops;
    uint64_t h = vq_program_hash(p);
    cr_assert_eq(vq_program_add_op(p, block, type, in, nin, out, nout, attrs, nattrs), VQ_EINVAL,
                 "%s", type);
    for (int i = 0; i < nwords; i++)
        cr_assert(strstr(vq_errmsg(), words[i]), "\"%s\" not in: %s", words[i], vq_errmsg());
    cr_assert_eq(p->nops, before);
    cr_assert_eq(vq_program_hash(p), h);
}

Test(program, a_file_that_is_no_program_fails_its_load_naming_the_call_and_file)
{
    char path[] = "/tmp/varq_program_XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, "\xff\xff\xff", 3), 3);
    close(fd);
    vq_program *p = NULL;
    cr_assert_eq(vq_program_load(&p, path), VQ_EINVAL);
    cr_assert_null(p);
    char want[160];
    snprintf(want, sizeof want, "vq_program_load: %s: 3 bytes are not a valid program", path);
    cr_assert(!strncmp(vq_errmsg(), want, strlen(want)), "%s", vq_errmsg());
    unlink(path);
}

Test(program, builder_errors_name_the_op_slot_and_var)
{
    vq_program *p = sample();
    assert_add_op_fails(p, 0, "nope", NAMES("x"), NAMES("y"), NULL, 0,
                        NAMES("vq_program_add_op: unknown op type \"nope\""));
    cr_assert_str_eq(vq_errmsg(), "vq_program_add_op: unknown op type \"nope\"");
    assert_add_op_fails(p, 0, "matmul", NAMES("x", "w", "b"), NAMES("y"), NULL, 0,
                        NAMES("matmul", "inputs", "3"));
    assert_add_op_fails(p, 0, "relu", NAMES("x"), NULL, 0, NULL, 0, NAMES("relu", "outputs"));
    assert_add_op_fails(p, 0, "concat", NULL, 0, NAMES("c"), NULL, 0, NAMES("concat", "inputs"));
    assert_add_op_fails(p, 0, "matmul", NAMES("x", "q"), NAMES("y"), NULL, 0,
                        NAMES("matmul", "input Y (slot 1)", "\"q\"", "not declared"));
    assert_add_op_fails(p, 0, "concat", NAMES("x", "y", "nah"), NAMES("c"), NULL, 0,
                        NAMES("concat", "input X (slot 2)", "\"nah\""));
    assert_add_op_fails(p, 0, "relu", NAMES("x"), NAMES("gone"), NULL, 0,
                        NAMES("relu", "output Out (slot 0)", "\"gone\""));
    /* h is declared in block 1: block 0 cannot see it. */
    assert_add_op_fails(p, 0, "relu", NAMES("h"), NAMES("y"), NULL, 0,
                        NAMES("relu", "\"h\"", "block 1"));
    vq_attr unknown = VQ_ATTR_I("colour", 3);
    assert_add_op_fails(p, 0, "relu", NAMES("x"), NAMES("y"), &unknown, 1,
                        NAMES("relu", "colour"));
    vq_attr wrong = VQ_ATTR_S("scale", "big");
    assert_add_op_fails(p, 0, "scale", NAMES("x"), NAMES("y"), &wrong, 1,
                        NAMES("scale", "attribute scale", "float"));
    assert_add_op_fails(p, 0, "cast", NAMES("x"), NAMES("y"), NULL, 0, NAMES("cast", "dtype",
                                                                          "required"));
    vq_attr twice[] = {VQ_ATTR_F("scale", 1), VQ_ATTR_F("scale", 2)};
    assert_add_op_fails(p, 0, "scale", NAMES("x"), NAMES("y"), twice, 2, NAMES("scale", "twice"));
    vq_attr nolist = VQ_ATTR_IS("perm", NULL, 2);
    assert_add_op_fails(p, 0, "transpose", NAMES("x"), NAMES("y"), &nolist, 1,
                        NAMES("transpose", "perm"));
    assert_add_op_fails(p, 5, "relu", NAMES("x"), NAMES("y"), NULL, 0, NAMES("relu", "block 5"));
    cr_assert_eq(vq_program_add_op(NULL, 0, "relu", NULL, 0, NULL, 0, NULL, 0), VQ_EINVAL);
    cr_assert_eq(vq_program_add_op(p, 0, NULL, NULL, 0, NULL, 0, NULL, 0), VQ_EINVAL);

    cr_assert_eq(vq_program_add_var(p, 0, "x", VQ_F32, 0, NULL, false), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "\"x\" is already declared"), "%s", vq_errmsg());
    cr_assert_eq(vq_program_add_var(p, 1, "x", VQ_F32, 0, NULL, false), VQ_EINVAL);
    cr_assert_eq(vq_program_add_var(p, 0, "bad", (vq_dtype)99, 0, NULL, false), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "\"bad\""), "%s", vq_errmsg());
    cr_assert_eq(vq_program_add_var(p, 0, "bad", VQ_F32, DIMS(2, -2), false), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "dim 1 is -2"), "%s", vq_errmsg());
    cr_assert_eq(vq_program_add_var(p, 0, "bad", VQ_F32, 9, (int64_t[9]){0}, false), VQ_EINVAL);
    cr_assert_eq(vq_program_add_var(p, 0, "bad", VQ_F32, 1, NULL, false), VQ_EINVAL);
    cr_assert_eq(vq_program_add_var(p, 0, "", VQ_F32, 0, NULL, false), VQ_EINVAL);
    cr_assert_eq(vq_program_add_var(p, 0, NULL, VQ_F32, 0, NULL, false), VQ_EINVAL);
    cr_assert_eq(vq_program_add_var(p, 2, "bad", VQ_F32, 0, NULL, false), VQ_EINVAL);
    cr_assert_eq(vq_program_add_block(p, 2), VQ_EINVAL);
    cr_assert_eq(vq_program_add_block(p, -1), VQ_EINVAL);

    char *text = dump(p);
    cr_assert_str_eq(text, sample_text);
    free(text);
    vq_program_free(p);
}

Test(program, many_vars_grow_the_name_index)
{
    vq_program *p;
    cr_assert_eq(vq_program_new(&p), 0);
    char name[32];
    for (int i = 0; i < 5000; i++) {
        snprintf(name, sizeof name, "v%d", i);
        add_var(p, 0, name, VQ_F32, DIMS(i), false);
    }
    for (int i = 0; i < 5000; i += 7) {
        snprintf(name, sizeof name, "v%d", i);
        cr_assert_eq(vq__program_find_var(p, name), i);
    }
    cr_assert_eq(vq__program_find_var(p, "v5000"), -1);
    cr_assert_eq(vq_program_add_var(p, 0, "v4321", VQ_F32, 0, NULL, false), VQ_EINVAL);
    vq_program_free(p);
}

/* ---- hand-written protobuf ---- */

/* A protobuf writer for tests: just enough of the wire format. */
typedef struct pb {
    uint8_t b[4096];
    size_t n;
} pb;

static void pb_raw(pb *w, const void *d, size_t n)
{
    cr_assert_leq(w->n + n, sizeof w->b);
    memcpy(w->b + w->n, d, n);
    w->n += n;
}

static void pb_varint(pb *w, uint64_t v)
{
    do {
        uint8_t byte = (uint8_t)(v & 0x7f);
        v >>= 7;
        if (v)
            byte |= 0x80;
        pb_raw(w, &byte, 1);
    } while (v);
}

static void pb_tag(pb *w, int field, int wire)
{
    pb_varint(w, (uint64_t)field << 3 | (uint64_t)wire);
}

static void pb_int(pb *w, int field, int64_t v)
{
    pb_tag(w, field, 0);
    pb_varint(w, (uint64_t)v);
}

static void pb_double(pb *w, int field, double v)
{
    pb_tag(w, field, 1);
    pb_raw(w, &v, 8); /* little-endian host */
}

static void pb_bytes(pb *w, int field, const void *d, size_t n)
{
    pb_tag(w, field, 2);
    pb_varint(w, n);
    pb_raw(w, d, n);
}

static void pb_str(pb *w, int field, const char *s)
{
    pb_bytes(w, field, s, strlen(s));
}

static void pb_msg(pb *w, int field, const pb *m)
{
    pb_bytes(w, field, m->b, m->n);
}

/* Var: name 1, dtype 2, shape 3 (packed), persistable 4. */
static pb var_msg(const char *name, int dtype, int ndim, const int64_t *shape)
{
    pb v = {.n = 0}, dims = {.n = 0};
    pb_str(&v, 1, name);
    if (dtype)
        pb_int(&v, 2, dtype);
    for (int i = 0; i < ndim; i++)
        pb_varint(&dims, (uint64_t)shape[i]);
    if (ndim)
        pb_msg(&v, 3, &dims);
    return v;
}

/* Slot: name 1, vars 2. */
static pb slot_msg(const char *name, const char *const *vars, int n)
{
    pb s = {.n = 0};
    pb_str(&s, 1, name);
    for (int i = 0; i < n; i++)
        pb_str(&s, 2, vars[i]);
    return s;
}

/* Program { Block { parent -1, vars a, b, c: f32[2], then ops } }. */
static pb program_msg(const pb *ops, int nops)
{
    pb block = {.n = 0}, prog = {.n = 0};
    pb_int(&block, 1, -1);
    const char *names[] = {"a", "b", "c"};
    for (int i = 0; i < 3; i++) {
        pb v = var_msg(names[i], 0, DIMS(2));
        pb_msg(&block, 2, &v);
    }
    for (int i = 0; i < nops; i++)
        pb_msg(&block, 3, &ops[i]);
    pb_msg(&prog, 1, &block);
    return prog;
}

/* Op: type 1, inputs 2, outputs 3, attrs 4. */
static pb op_msg(const char *type)
{
    pb o = {.n = 0};
    pb_str(&o, 1, type);
    return o;
}

static void op_slot(pb *op, bool input, const char *name, const char *const *vars, int n)
{
    pb s = slot_msg(name, vars, n);
    pb_msg(op, input ? 2 : 3, &s);
}

Test(program, unknown_op_type_decodes_with_no_definition)
{
    pb op = op_msg("frobnicate");
    op_slot(&op, true, "In", NAMES("a", "b"));
    op_slot(&op, true, "Aux", NAMES("c"));
    op_slot(&op, false, "Out", NAMES("c"));
    /* One attribute of each type: Attr { name 1, i 2, f 3, s 4, b 5, ints
     * 6, floats 7, strings 8, bools 9 }, lists as { repeated values 1 }. */
    pb at = {.n = 0}, list = {.n = 0}, items = {.n = 0};
    pb_str(&at, 1, "i");
    pb_int(&at, 2, -3);
    pb_msg(&op, 4, &at);
    at.n = 0;
    pb_str(&at, 1, "f");
    pb_double(&at, 3, 0.25);
    pb_msg(&op, 4, &at);
    at.n = 0;
    pb_str(&at, 1, "s");
    pb_str(&at, 4, "hi \"you\"");
    pb_msg(&op, 4, &at);
    at.n = 0;
    pb_str(&at, 1, "b");
    pb_int(&at, 5, 1);
    pb_msg(&op, 4, &at);
    at.n = 0;
    pb_str(&at, 1, "ints");
    pb_varint(&items, 1);
    pb_varint(&items, (uint64_t)-2);
    pb_msg(&list, 1, &items);
    pb_msg(&at, 6, &list);
    pb_msg(&op, 4, &at);
    at.n = list.n = items.n = 0;
    pb_str(&at, 1, "floats");
    double half = 0.5, tenth = 0.1;
    pb_raw(&items, &half, 8);
    pb_raw(&items, &tenth, 8);
    pb_msg(&list, 1, &items);
    pb_msg(&at, 7, &list);
    pb_msg(&op, 4, &at);
    at.n = list.n = items.n = 0;
    pb_str(&at, 1, "strings");
    pb_str(&list, 1, "p");
    pb_str(&list, 1, "");
    pb_msg(&at, 8, &list);
    pb_msg(&op, 4, &at);
    at.n = list.n = items.n = 0;
    pb_str(&at, 1, "bools");
    pb_varint(&items, 1);
    pb_varint(&items, 0);
    pb_msg(&list, 1, &items);
    pb_msg(&at, 9, &list);
    pb_msg(&op, 4, &at);
    /* Default values inside the oneof are still written. */
    at.n = 0;
    pb_str(&at, 1, "zero");
    pb_int(&at, 2, 0);
    pb_msg(&op, 4, &at);

    pb prog = program_msg(&op, 1);
    vq_program *p;
    cr_assert_eq(vq_program_decode(&p, prog.b, prog.n), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_program_nops(p, 0), 1);
    const vq__pop *o = &p->ops[0];
    cr_assert_null(o->def);
    cr_assert_str_eq(o->type, "frobnicate");
    cr_assert_eq(o->nin, 3);
    cr_assert_eq(o->nout, 1);
    cr_assert_eq(o->in[0], 0);
    cr_assert_eq(o->in[1], 1);
    cr_assert_eq(o->in[2], 2);
    cr_assert_eq(o->nattrs, 9);
    cr_assert_eq(o->attrs[7].type, VQ_ATTR_BOOLS);
    char *copy = vq__pop_type_dup(o);
    cr_assert_str_eq(copy, "frobnicate");
    cr_assert_str_eq(copy + strlen(copy) + 1, "In");
    free(copy);

    char *text = dump(p);
    cr_assert_str_eq(text,
                     "var a : f32[2]\n"
                     "var b : f32[2]\n"
                     "var c : f32[2]\n"
                     "op 0 frobnicate(In=[a, b], Aux=c) -> (Out=c) {i=-3, f=0.25, "
                     "s=\"hi \\\"you\\\"\", b=true, ints=[1, -2], floats=[0.5, 0.1], "
                     "strings=[\"p\", \"\"], bools=[true, false], zero=0}\n");
    free(text);

    /* The message above is canonical: varq writes back the same bytes. */
    void *buf;
    size_t len;
    encode(p, &buf, &len);
    assert_same_bytes(buf, len, prog.b, prog.n);
    free(buf);
    vq_program_free(p);
}

Test(program, known_op_slots_are_mapped_by_name)
{
    /* Slots in another order than the definition's: Y first. */
    pb op = op_msg("matmul");
    op_slot(&op, true, "Y", NAMES("b"));
    op_slot(&op, true, "X", NAMES("a"));
    op_slot(&op, false, "Out", NAMES("c"));
    pb prog = program_msg(&op, 1);
    vq_program *p;
    cr_assert_eq(vq_program_decode(&p, prog.b, prog.n), 0, "%s", vq_errmsg());
    cr_assert_eq(p->ops[0].def, vq__op_find("matmul"));
    cr_assert_eq(p->ops[0].in[0], 0);
    cr_assert_eq(p->ops[0].in[1], 1);
    vq_program_free(p);
}

/* Decoding the program with this one op fails with VQ_EINVAL and a message
 * holding each of the words. */
static void assert_op_refused(const pb *op, const char *const *words, int nwords)
{
    pb prog = program_msg(op, 1);
    vq_program *p = (vq_program *)1;
    cr_assert_eq(vq_program_decode(&p, prog.b, prog.n), VQ_EINVAL);
    cr_assert_null(p);
    for (int i = 0; i < nwords; i++)
        cr_assert(strstr(vq_errmsg(), words[i]), "\"%s\" not in: %s", words[i], vq_errmsg());
}

Test(program, decode_refuses_ops_that_do_not_fit_their_definition)
{
    pb op = op_msg("matmul");
    op_slot(&op, true, "X", NAMES("a"));
    op_slot(&op, false, "Out", NAMES("c"));
    assert_op_refused(&op, NAMES("op 0 (matmul)", "input slot Y is missing"));

    op_slot(&op, true, "Y", NAMES("b"));
    op_slot(&op, true, "Z", NAMES("b"));
    assert_op_refused(&op, NAMES("op 0 (matmul)", "unknown input slot Z"));

    op = op_msg("matmul");
    op_slot(&op, true, "X", NAMES("a"));
    op_slot(&op, true, "Y", NAMES("a", "b"));
    op_slot(&op, false, "Out", NAMES("c"));
    assert_op_refused(&op, NAMES("op 0 (matmul)", "input slot Y lists 2 vars"));

    op = op_msg("matmul");
    op_slot(&op, true, "X", NAMES("a"));
    op_slot(&op, true, "X", NAMES("b"));
    op_slot(&op, true, "Y", NAMES("b"));
    op_slot(&op, false, "Out", NAMES("c"));
    assert_op_refused(&op, NAMES("op 0 (matmul)", "slot X is given twice"));

    op = op_msg("concat");
    op_slot(&op, true, "X", NULL, 0);
    op_slot(&op, false, "Out", NAMES("c"));
    assert_op_refused(&op, NAMES("op 0 (concat)", "input slot X lists 0 vars"));

    op = op_msg("relu");
    op_slot(&op, true, "X", NAMES("a"));
    op_slot(&op, false, "Out", NAMES("zz"));
    assert_op_refused(&op, NAMES("op 0 (relu)", "output Out (slot 0)", "\"zz\" is not declared"));

    op = op_msg("frobnicate");
    op_slot(&op, true, "X", NAMES("nowhere"));
    assert_op_refused(&op, NAMES("op 0 (frobnicate)", "\"nowhere\""));

    op = op_msg("scale");
    op_slot(&op, true, "X", NAMES("a"));
    op_slot(&op, false, "Out", NAMES("c"));
    pb at = {.n = 0};
    pb_str(&at, 1, "scale");
    pb_str(&at, 4, "big");
    pb_msg(&op, 4, &at);
    assert_op_refused(&op, NAMES("op 0 (scale)", "attribute scale", "float"));

    op = op_msg("scale");
    op_slot(&op, true, "X", NAMES("a"));
    op_slot(&op, false, "Out", NAMES("c"));
    at.n = 0;
    pb_str(&at, 1, "bias");
    pb_msg(&op, 4, &at);
    assert_op_refused(&op, NAMES("op 0 (scale)", "bias has no value"));

    op = op_msg("frobnicate");
    at.n = 0;
    pb_str(&at, 1, "k");
    pb_int(&at, 2, 1);
    pb_msg(&op, 4, &at);
    pb_msg(&op, 4, &at);
    assert_op_refused(&op, NAMES("op 0 (frobnicate)", "k given twice"));

    op = op_msg("");
    assert_op_refused(&op, NAMES("op 0 has no type"));
}

/* Decoding these bytes fails with VQ_EINVAL and a message holding word. */
static void assert_bytes_refused(const pb *prog, const char *word)
{
    vq_program *p;
    cr_assert_eq(vq_program_decode(&p, prog->b, prog->n), VQ_EINVAL);
    cr_assert_null(p);
    cr_assert(strstr(vq_errmsg(), word), "\"%s\" not in: %s", word, vq_errmsg());
}

Test(program, decode_refuses_bad_vars_and_blocks)
{
    pb prog = {.n = 0}, block = {.n = 0}, v;
    assert_bytes_refused(&prog, "no blocks");

    pb_int(&block, 1, 0);
    pb_msg(&prog, 1, &block);
    assert_bytes_refused(&prog, "block 0 has parent 0");

    prog.n = block.n = 0;
    pb_int(&block, 1, -1);
    v = var_msg("a", 0, 0, NULL);
    pb_msg(&block, 2, &v);
    pb_msg(&block, 2, &v);
    pb_msg(&prog, 1, &block);
    assert_bytes_refused(&prog, "\"a\" is already declared");

    prog.n = block.n = 0;
    pb_int(&block, 1, -1);
    v = var_msg("a", 13, 0, NULL);
    pb_msg(&block, 2, &v);
    pb_msg(&prog, 1, &block);
    assert_bytes_refused(&prog, "dtype 13");

    prog.n = block.n = 0;
    pb_int(&block, 1, -1);
    v = var_msg("a", 0, DIMS(1, 2, 3, 4, 5, 6, 7, 8, 9));
    pb_msg(&block, 2, &v);
    pb_msg(&prog, 1, &block);
    assert_bytes_refused(&prog, "9 dims");

    prog.n = block.n = 0;
    pb_int(&block, 1, -1);
    v = var_msg("a", 0, DIMS(3, -5));
    pb_msg(&block, 2, &v);
    pb_msg(&prog, 1, &block);
    assert_bytes_refused(&prog, "dim 1 is -5");

    prog.n = block.n = 0;
    pb_int(&block, 1, -1);
    v = var_msg("", 0, 0, NULL);
    pb_msg(&block, 2, &v);
    pb_msg(&prog, 1, &block);
    assert_bytes_refused(&prog, "empty");

    /* Block 1 with parent 1 (itself), then parent 2 (later). */
    prog.n = block.n = 0;
    pb_int(&block, 1, -1);
    pb_msg(&prog, 1, &block);
    pb child = {.n = 0};
    pb_int(&child, 1, 1);
    pb_msg(&prog, 1, &child);
    assert_bytes_refused(&prog, "block 1 has parent 1");

    /* An op in block 0 using a var of block 1. */
    prog.n = block.n = child.n = 0;
    pb_int(&block, 1, -1);
    pb op = op_msg("relu");
    op_slot(&op, true, "X", NAMES("inner"));
    op_slot(&op, false, "Out", NAMES("inner"));
    pb_msg(&block, 3, &op);
    pb_msg(&prog, 1, &block);
    v = var_msg("inner", 0, 0, NULL);
    pb_msg(&child, 2, &v);
    pb_msg(&prog, 1, &child);
    assert_bytes_refused(&prog, "declared in block 1");

    const char junk[] = "\xff\xff\xff";
    prog.n = 0;
    pb_raw(&prog, junk, 3);
    assert_bytes_refused(&prog, "not a valid program");
    cr_assert_eq(vq_program_decode(NULL, prog.b, prog.n), VQ_EINVAL);
}

/* ---- fuzz ---- */

/* ~20 ops of every builder-made kind over 24 vars, with attributes. */
static vq_program *fuzz_program(void)
{
    vq_program *p;
    cr_assert_eq(vq_program_new(&p), 0);
    char names[24][8];
    for (int i = 0; i < 24; i++) {
        snprintf(names[i], sizeof names[i], "v%d", i);
        add_var(p, 0, names[i], i % 5 == 4 ? VQ_I64 : VQ_F32, DIMS(i % 3 ? 8 : -1, 8), i < 3);
    }
    int64_t axes[] = {0, 1}, starts[] = {0, 1}, ends[] = {4, 8}, perm[] = {1, 0};
    vq_attr mm[] = {VQ_ATTR_B("transpose_y", true), VQ_ATTR_F("alpha", 0.125)};
    vq_attr sc[] = {VQ_ATTR_F("scale", -1.5), VQ_ATTR_F("bias", 1e-9)};
    vq_attr sli[] = {VQ_ATTR_IS("axes", axes, 2), VQ_ATTR_IS("starts", starts, 2),
                     VQ_ATTR_IS("ends", ends, 2)};
    vq_attr tr = VQ_ATTR_IS("perm", perm, 2), cast = VQ_ATTR_S("dtype", "float64");
    vq_attr cat = VQ_ATTR_I("axis", -1), sum[] = {VQ_ATTR_IS("axes", axes, 1),
                                                  VQ_ATTR_B("keepdim", true)};
    for (int k = 0; k < 20; k++) {
        const char *a = names[k], *b = names[k + 1], *c = names[k + 2], *o = names[k + 3];
        switch (k % 8) {
        case 0: add_op(p, 0, "matmul", (const char *[]){a, b}, 2, &o, 1, mm, 2); break;
        case 1: add_op(p, 0, "add", (const char *[]){a, b}, 2, &o, 1, NULL, 0); break;
        case 2: add_op(p, 0, "relu", &a, 1, &o, 1, NULL, 0); break;
        case 3: add_op(p, 0, "concat", (const char *[]){a, b, c}, 3, &o, 1, &cat, 1); break;
        case 4: add_op(p, 0, "scale", &a, 1, &o, 1, sc, 2); break;
        case 5: add_op(p, 0, "slice", &a, 1, &o, 1, sli, 3); break;
        case 6: add_op(p, 0, "transpose", &a, 1, &o, 1, &tr, 1); break;
        default:
            add_op(p, 0, k % 16 == 7 ? "sum" : "cast", &a, 1, &o, 1, k % 16 == 7 ? sum : &cast,
                   k % 16 == 7 ? 2 : 1);
            break;
        }
    }
    return p;
}

static uint64_t rng_state;

static uint64_t rng_next(void)
{
    /* splitmix64 */
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Decodes one mutated input: an error, or a program that re-encodes to
 * bytes that decode again to the same bytes. */
static int fuzz_one(const uint8_t *buf, size_t len, uint64_t seed, int casenum)
{
    vq_program *q = NULL;
    int rc = vq_program_decode(&q, buf, len);
    if (rc < 0) {
        cr_assert_eq(rc, VQ_EINVAL, "seed %llu case %d: rc %d", (unsigned long long)seed, casenum,
                     rc);
        cr_assert_null(q);
        cr_assert(vq_errmsg()[0], "seed %llu case %d: no message", (unsigned long long)seed,
                  casenum);
        return 0;
    }
    cr_assert_eq(rc, 0);
    void *a, *b;
    size_t na, nb;
    cr_assert_eq(vq_program_encode(q, &a, &na), 0, "seed %llu case %d: %s",
                 (unsigned long long)seed, casenum, vq_errmsg());
    vq_program *r;
    cr_assert_eq(vq_program_decode(&r, a, na), 0, "seed %llu case %d: %s",
                 (unsigned long long)seed, casenum, vq_errmsg());
    cr_assert_eq(vq_program_encode(r, &b, &nb), 0);
    cr_assert(na == nb && memcmp(a, b, na) == 0, "seed %llu case %d: re-encoding differs",
              (unsigned long long)seed, casenum);
    FILE *null = fopen("/dev/null", "w");
    cr_assert_eq(vq_program_dump(q, null), 0);
    fclose(null);
    free(a);
    free(b);
    vq_program_free(q);
    vq_program_free(r);
    return 1;
}

Test(program, fuzzed_encodings_decode_or_fail_cleanly)
{
    uint64_t seed = 20240611;
    const char *env = getenv("VARQ_TEST_SEED");
    if (env && *env)
        seed = strtoull(env, NULL, 0);
    fprintf(stderr, "program fuzz: seed %llu (VARQ_TEST_SEED replays)\n",
            (unsigned long long)seed);
    rng_state = seed;

    vq_program *p = fuzz_program();
    cr_assert_eq(vq_program_nops(p, 0), 20);
    uint8_t *good;
    size_t len;
    encode(p, (void **)&good, &len);
    uint8_t *buf = malloc(len + 16);
    cr_assert(buf);

    int cases = 0, accepted = 0;
    /* Every prefix, the empty one included, and the whole. */
    for (size_t n = 0; n <= len; n++) {
        uint8_t *copy = malloc(n ? n : 1); /* exact size: ASan sees overreads */
        memcpy(copy, good, n);
        accepted += fuzz_one(copy, n, seed, cases++);
        free(copy);
    }
    cr_assert_geq(accepted, 1); /* the whole encoding */
    /* Bit flips, byte replacements, and both with truncation. */
    while (cases < 12000) {
        size_t n = len;
        memcpy(buf, good, len);
        int kind = (int)(rng_next() % 4);
        int edits = 1 + (int)(rng_next() % 4);
        for (int e = 0; e < edits; e++) {
            size_t at = (size_t)(rng_next() % len);
            if (kind == 0 || kind == 2)
                buf[at] ^= (uint8_t)(1u << (rng_next() % 8));
            else
                buf[at] = (uint8_t)rng_next();
        }
        if (kind >= 2)
            n = (size_t)(rng_next() % (len + 1));
        uint8_t *copy = malloc(n ? n : 1);
        memcpy(copy, buf, n);
        accepted += fuzz_one(copy, n, seed, cases++);
        free(copy);
    }
    fprintf(stderr, "program fuzz: %d cases on a %zu-byte encoding, %d decoded\n", cases, len,
            accepted);
    free(buf);
    free(good);
    vq_program_free(p);
}

/* ---- how deep blocks nest ---- */

/* depth conds nested in their then branches: y0 = cond(c, x), whose then
 * block runs y1 = cond(c, x), ..., the innermost then block y<depth> =
 * scale(x, 2); every else branch gives x. The innermost block is at depth
 * `depth`. */
static vq_program *nested_conds(int depth)
{
    vq_program *p;
    cr_assert_eq(vq_program_new(&p), 0);
    add_var(p, 0, "x", VQ_F64, DIMS(3), false);
    add_var(p, 0, "c", VQ_BOOL, 0, NULL, false);
    add_var(p, 0, "y0", VQ_F64, DIMS(3), false);
    int outer = 0;
    char y[16], inner[16];
    for (int j = 0; j < depth; j++) {
        int tb = vq_program_add_block(p, outer), eb = vq_program_add_block(p, outer);
        cr_assert(tb > 0 && eb > 0, "level %d: %s", j + 1, vq_errmsg());
        snprintf(y, sizeof y, "y%d", j);
        snprintf(inner, sizeof inner, "y%d", j + 1);
        add_var(p, tb, inner, VQ_F64, DIMS(3), false);
        const char *then_out[] = {inner}, *else_out[] = {"x"};
        vq_attr a[4] = {VQ_ATTR_I("then_block", tb), VQ_ATTR_I("else_block", eb),
                        VQ_ATTR_SS("then_outputs", then_out, 1),
                        VQ_ATTR_SS("else_outputs", else_out, 1)};
        add_op(p, outer, "cond", NAMES("c", "x"), NAMES(y), a, 4);
        outer = tb;
    }
    vq_attr two = VQ_ATTR_F("scale", 2);
    add_op(p, outer, "scale", NAMES("x"), NAMES(inner), &two, 1);
    return p;
}

/* Runs p (nested_conds) with x = {1, 2, 3} and c; checks y0. */
static void assert_nested_conds_run(vq_program *p, bool c)
{
    vq_engine_opts o = {.kind = VQ_ENGINE_THREADED, .cpu_workers = 2};
    vq_engine *e;
    vq_exec *ex;
    vq_scope *s;
    cr_assert_eq(vq_engine_new(&e, &o), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_exec_new(&ex, e, NULL), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_scope_new(&s), 0);
    vq_tensor *x, *tc;
    cr_assert_eq(vq_tensor_new(&x, VQ_F64, 1, (int64_t[]){3}), 0);
    cr_assert_eq(vq_tensor_new(&tc, VQ_BOOL, 0, NULL), 0);
    double *xd = vq_tensor_data(x);
    for (int i = 0; i < 3; i++)
        xd[i] = i + 1;
    *(bool *)vq_tensor_data(tc) = c;
    vq_feed feeds[] = {{"x", x}, {"c", tc}};
    vq_fetch fetch = {"y0", NULL};
    cr_assert_eq(vq_exec_run(ex, p, s, feeds, 2, &fetch, 1), 0, "%s", vq_errmsg());
    const double *y = vq_tensor_data(fetch.tensor);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(y[i], (c ? 2.0 : 1.0) * (i + 1), "y0[%d] = %g", i, y[i]);
    vq_tensor_release(fetch.tensor);
    vq_tensor_release(x);
    vq_tensor_release(tc);
    vq_scope_free(s);
    vq_exec_free(ex);
    vq_engine_free(e);
}

Test(program, blocks_nest_at_most_the_limit_deep_and_a_program_at_the_limit_runs)
{
    vq_program *p = nested_conds(VQ_MAX_BLOCK_DEPTH);
    assert_nested_conds_run(p, true);
    assert_nested_conds_run(p, false);
    /* the innermost then block is at the limit: no block under it */
    int deepest = vq_program_nblocks(p) - 2;
    cr_assert_eq(vq_program_add_block(p, deepest), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "VQ_MAX_BLOCK_DEPTH (64)"), "%s", vq_errmsg());
    cr_assert_geq(vq_program_add_block(p, deepest - 2), 0, "%s", vq_errmsg());
    vq_program_free(p);
}

/* The bytes of a program of nblocks blocks, each the parent of the next:
 * block k is at depth k. Malloc'd. */
static uint8_t *block_chain_msg(int nblocks, size_t *len)
{
    uint8_t *buf = malloc((size_t)nblocks * 16 + 16);
    cr_assert(buf);
    size_t n = 0;
    for (int k = 0; k < nblocks; k++) {
        pb block = {.n = 0};
        pb_int(&block, 1, k - 1);
        pb prog = {.n = 0};
        pb_msg(&prog, 1, &block);
        memcpy(buf + n, prog.b, prog.n); /* repeated field 1: messages concatenate */
        n += prog.n;
    }
    *len = n;
    return buf;
}

Test(program, decode_refuses_blocks_nested_past_the_limit)
{
    const int counts[] = {VQ_MAX_BLOCK_DEPTH + 2, 4000};
    for (int i = 0; i < 2; i++) {
        size_t len;
        uint8_t *buf = block_chain_msg(counts[i], &len);
        vq_program *p = NULL;
        cr_assert_eq(vq_program_decode(&p, buf, len), VQ_EINVAL, "%d blocks", counts[i]);
        cr_assert_null(p);
        cr_assert(strstr(vq_errmsg(), "block 65 is nested more than VQ_MAX_BLOCK_DEPTH (64)"), "%s",
                  vq_errmsg());
        free(buf);
    }
    size_t len;
    uint8_t *buf = block_chain_msg(VQ_MAX_BLOCK_DEPTH + 1, &len);
    vq_program *p = NULL;
    cr_assert_eq(vq_program_decode(&p, buf, len), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_program_nblocks(p), VQ_MAX_BLOCK_DEPTH + 1);
    vq_program_free(p);
    free(buf);
    /* a program nested to the limit round trips */
    p = nested_conds(VQ_MAX_BLOCK_DEPTH);
    void *enc;
    encode(p, &enc, &len);
    vq_program *q = NULL;
    cr_assert_eq(vq_program_decode(&q, enc, len), 0, "%s", vq_errmsg());
    assert_nested_conds_run(q, true);
    free(enc);
    vq_program_free(q);
    vq_program_free(p);
}

Test(program, prepare_refuses_blocks_nested_past_the_limit)
{
    vq_program *p = nested_conds(VQ_MAX_BLOCK_DEPTH);
    /* one level more than the builder allows, made behind its back: the
     * innermost then block gets a cond of its own */
    int deepest = vq_program_nblocks(p) - 2;
    int tb = vq__block_append(p, deepest), eb = vq__block_append(p, deepest);
    cr_assert(tb > 0 && eb > 0);
    add_var(p, deepest, "deeper", VQ_F64, DIMS(3), false);
    add_var(p, tb, "t", VQ_F64, DIMS(3), false);
    add_op(p, tb, "scale", NAMES("x"), NAMES("t"), NULL, 0);
    vq_attr a[4] = {VQ_ATTR_I("then_block", tb), VQ_ATTR_I("else_block", eb),
                    VQ_ATTR_SS("then_outputs", ((const char *const[]){"t"}), 1),
                    VQ_ATTR_SS("else_outputs", ((const char *const[]){"x"}), 1)};
    add_op(p, deepest, "cond", NAMES("c", "x"), NAMES("deeper"), a, 4);
    vq_engine_opts o = {.kind = VQ_ENGINE_THREADED, .cpu_workers = 1};
    vq_engine *e;
    vq_exec *ex;
    vq_scope *s;
    cr_assert_eq(vq_engine_new(&e, &o), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_exec_new(&ex, e, NULL), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_scope_new(&s), 0);
    cr_assert_eq(vq_exec_prepare(ex, p, s, NAMES("x", "c"), NAMES("y0")), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "nested more than VQ_MAX_BLOCK_DEPTH (64)"), "%s", vq_errmsg());
    vq_scope_free(s);
    vq_exec_free(ex);
    vq_engine_free(e);
    vq_program_free(p);
}

Test(program, a_program_nested_to_the_limit_dumps_each_level_once)
{
    vq_program *p = nested_conds(VQ_MAX_BLOCK_DEPTH);
    char *text = dump(p);
    /* one then and one else block per level, each var once, and each cond
     * reads nothing beyond its inputs (x and c are its inputs) */
    int thens = 0, elses = 0, vars = 0, ops = 0;
    for (const char *line = text; *line; line = strchr(line, '\n') + 1) {
        const char *t = line + strspn(line, " ");
        const char *end = strchr(t, '\n');
        thens += !strncmp(t, "block ", 6) && !strncmp(end - 7, "(then):", 7);
        elses += !strncmp(t, "block ", 6) && !strncmp(end - 7, "(else):", 7);
        vars += !strncmp(t, "var ", 4);
        ops += !strncmp(t, "op ", 3);
        cr_assert(strncmp(t, "# reads also", 12), "%s", t);
    }
    cr_assert_eq(thens, VQ_MAX_BLOCK_DEPTH);
    cr_assert_eq(elses, VQ_MAX_BLOCK_DEPTH);
    cr_assert_eq(vars, 3 + VQ_MAX_BLOCK_DEPTH);
    cr_assert_eq(ops, VQ_MAX_BLOCK_DEPTH + 1);
    /* the innermost op, indented under all 64 levels */
    char want[400];
    snprintf(want, sizeof want, "\n%*sop 0 scale(X=x) -> (Out=y64) {scale=2}\n",
             4 * VQ_MAX_BLOCK_DEPTH, "");
    cr_assert(strstr(text, want), "no innermost op at depth 64");
    free(text);
    vq_program_free(p);
}
