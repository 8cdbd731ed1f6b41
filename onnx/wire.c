/* How deeply an encoded ModelProto nests, read from its bytes before
 * protobuf-c unpacks them.
 *
 * protobuf-c's unpack recurses once per nested message, and so does the
 * import once per subgraph (an If's branches, a Loop's body: ox_nodes
 * through t_if and t_loop). A model of a few hundred kilobytes can nest
 * thousands of subgraphs (each level is a GraphProto holding a NodeProto
 * holding an AttributeProto holding the next GraphProto) and overflow the
 * stack of either. So the bytes are walked first, without recursion: an
 * explicit stack of the messages open at the current position, each with
 * its descriptor (from the generated code, so that only fields of message
 * type are entered; strings and bytes are skipped by their length) and
 * where it ends. Bytes that do not parse are left for unpack to refuse. */
#include "onnx_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Messages of any type (types nest too: a sequence of sequences) open at
 * once. A model with OX_MAX_NESTING levels of subgraphs opens about three
 * per level, plus a few for its value infos' types. */
#define OX_MAX_MESSAGE_DEPTH (4 * OX_MAX_NESTING + 64)

/* The varint at *pos (below end) into *v; false when it runs past end or
 * past ten bytes. */
static bool varint(const uint8_t *b, size_t end, size_t *pos, uint64_t *v)
{
    *v = 0;
    for (int shift = 0; shift < 70 && *pos < end; shift += 7) {
        uint8_t c = b[(*pos)++];
        *v |= (uint64_t)(c & 0x7f) << (shift < 64 ? shift : 63);
        if (!(c & 0x80))
            return true;
    }
    return false;
}

static const ProtobufCFieldDescriptor *field_of(const ProtobufCMessageDescriptor *d, uint64_t id)
{
    for (unsigned i = 0; i < d->n_fields; i++)
        if ((uint64_t)d->fields[i].id == id)
            return &d->fields[i];
    return NULL;
}

int vq__onnx_nesting_check(const void *buf, size_t len)
{
    const uint8_t *b = buf;
    struct open {
        const ProtobufCMessageDescriptor *d;
        size_t end;
    } stack[OX_MAX_MESSAGE_DEPTH];
    int top = 0, graphs = 0;
    stack[0] = (struct open){&onnx__model_proto__descriptor, len};
    size_t pos = 0;
    for (;;) {
        while (top >= 0 && pos == stack[top].end)
            graphs -= stack[top--].d == &onnx__graph_proto__descriptor;
        if (top < 0)
            return 0;
        uint64_t key, n;
        size_t end = stack[top].end;
        if (!varint(b, end, &pos, &key))
            return 0;
        /* the wire type: varint, 64-bit, length-delimited, 32-bit; groups
         * (3, 4) or anything else are left for unpack to judge */
        switch (key & 7) {
        case 0:
            if (!varint(b, end, &pos, &n))
                return 0;
            continue;
        case 1: n = 8; break;
        case 5: n = 4; break;
        case 2: { /* a message, or bytes to skip */
            if (!varint(b, end, &pos, &n) || n > end - pos)
                return 0;
            const ProtobufCFieldDescriptor *f = field_of(stack[top].d, key >> 3);
            if (!f || f->type != PROTOBUF_C_TYPE_MESSAGE)
                break;
            const ProtobufCMessageDescriptor *d = f->descriptor;
            graphs += d == &onnx__graph_proto__descriptor;
            /* the model's own graph is level 0 */
            if (graphs - 1 > OX_MAX_NESTING)
                return vq__fail(VQ_EINVAL,
                                "onnx: subgraphs (of If, Loop or Scan) nest more than %d "
                                "levels deep; varq imports at most %d",
                                OX_MAX_NESTING, OX_MAX_NESTING);
            if (top + 1 >= OX_MAX_MESSAGE_DEPTH)
                return vq__fail(VQ_EINVAL,
                                "onnx: messages nest more than %d deep (%s inside %s); "
                                "varq reads at most that",
                                OX_MAX_MESSAGE_DEPTH, d->short_name, stack[top].d->short_name);
            stack[++top] = (struct open){d, pos + (size_t)n};
            continue;
        }
        default: return 0;
        }
        if (n > end - pos)
            return 0;
        pos += (size_t)n;
    }
}

/* Appends v as a varint at out + *n. */
static void put_varint(uint8_t *out, size_t *n, uint64_t v)
{
    do {
        uint8_t c = v & 0x7f;
        v >>= 7;
        out[(*n)++] = c | (v ? 0x80 : 0);
    } while (v);
}

/* What strip keeps of a message: fields dropped (0-ended), and the field
 * whose messages are copied by the next level's rule (0: none). */
struct strip_rule {
    uint64_t drop[8];
    uint64_t into;
};

/* ModelProto: its graph (7) by the next rule; GraphProto: its initializers
 * (5) by the next; TensorProto: its data fields (float, int32, string,
 * int64, raw, double, uint64 data) dropped, its name and dims kept. */
static const struct strip_rule strip_rules[3] = {
    {{0}, 7},
    {{0}, 5},
    {{4, 5, 6, 7, 9, 10, 11, 0}, 0},
};

/* Copies the message b[pos..end) into out + *n by rule level (its fields
 * in order, the dropped ones left out, those of the rule's "into" field
 * copied by the next level with their length rewritten); false when the
 * bytes do not parse. out has room for end - pos bytes plus 11 per
 * rewritten length. */
static bool strip_copy(const uint8_t *b, size_t pos, size_t end, int level, uint8_t *out, size_t *n)
{
    const struct strip_rule *r = &strip_rules[level];
    while (pos < end) {
        size_t start = pos;
        uint64_t key, len = 0;
        if (!varint(b, end, &pos, &key))
            return false;
        switch (key & 7) {
        case 0:
            if (!varint(b, end, &pos, &len))
                return false;
            break;
        case 1: pos += 8; break;
        case 5: pos += 4; break;
        case 2:
            if (!varint(b, end, &pos, &len) || len > end - pos)
                return false;
            break;
        default: return false;
        }
        if (pos > end)
            return false;
        uint64_t id = key >> 3;
        bool dropped = false;
        for (int i = 0; r->drop[i]; i++)
            dropped |= id == r->drop[i];
        if ((key & 7) == 2 && r->into && id == r->into) {
            /* the inner message at the end of out, then its key and length
             * put before it */
            size_t at = *n + 22, g = at;
            if (!strip_copy(b, pos, pos + len, level + 1, out, &g))
                return false;
            size_t inner = g - at;
            put_varint(out, n, key);
            put_varint(out, n, inner);
            memmove(out + *n, out + at, inner);
            *n += inner;
            pos += len;
            continue;
        }
        if ((key & 7) == 2)
            pos += len;
        if (!dropped) {
            memcpy(out + *n, b + start, pos - start);
            *n += pos - start;
        }
    }
    return true;
}

int vq__onnx_strip_weights(const void *buf, size_t len, void **out, size_t *out_len)
{
    *out = NULL;
    /* each rewritten length may take up to 22 bytes of room while it is
     * written; a copy never grows past the original otherwise */
    uint8_t *o = vq__malloc(len + 64);
    if (!o)
        return vq__fail(VQ_ENOMEM, "onnx: out of memory");
    size_t n = 0;
    if (!strip_copy(buf, 0, len, 0, o, &n)) {
        free(o);
        return 1; /* not parsed here: the caller unpacks the original */
    }
    *out = o;
    *out_len = n;
    return 0;
}
