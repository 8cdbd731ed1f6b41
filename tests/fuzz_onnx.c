/* libFuzzer target: untrusted ONNX model bytes through the importer
 * (include/varq/onnx.h). vq_onnx_info_read, then vq_program_from_onnx
 * into a fresh scope, and for a model that imports: the program's text
 * dump and its encoding decoded again. Each may refuse the model with an
 * error; a crash, a sanitizer report, a leak, a hang or an allocation past
 * libFuzzer's -malloc_limit_mb (the import computes only small values,
 * VQ_ONNX_FOLD_MAX_ELEMS, and makes tensors of at most
 * VQ_ONNX_MADE_MAX_ELEMS) is a bug. Nothing runs: a model's loop may never
 * end and its shapes may be huge.
 *
 * Built only in a clang build with -Dfuzz=true (tests/meson.build:
 * scripts/test.sh's build-asan); scripts/test.sh runs it on a fixed set of
 * inputs under "== fuzzers", seeded with ONNX's
 * backend test models (scripts/onnx_conformance.sh generates them into
 * BUILD/onnx-tests) and the models tests/test_onnx.c builds (it writes
 * each into the directory VARQ_ONNX_SEEDS names):
 *
 *   VARQ_ONNX_SEEDS=corpus build/tests/test_onnx
 *   cp build/onnx-tests/WHAT/model.onnx corpus/WHAT.onnx ...
 *   build-asan/tests/fuzz_onnx corpus
 */
#include <varq/varq.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    vq_onnx_info info;
    if (vq_onnx_info_read(&info, data, size) == 0)
        vq_onnx_info_free(&info);
    vq_scope *s;
    if (vq_scope_new(&s) != 0)
        return 0;
    vq_program *p = NULL;
    if (vq_program_from_onnx(&p, s, data, size) == 0) {
        FILE *f = fopen("/dev/null", "w");
        if (f) {
            vq_program_dump(p, f);
            fclose(f);
        }
        void *buf = NULL;
        size_t len = 0;
        if (vq_program_encode(p, &buf, &len) == 0) {
            vq_program *q = NULL;
            if (vq_program_decode(&q, buf, len) == 0)
                vq_program_free(q);
            free(buf);
        }
        vq_program_free(p);
    }
    vq_scope_free(s);
    return 0;
}
