#!/usr/bin/python3
"""Writes ONNX's backend node test cases (model.onnx and test_data_set_N/
with input and output TensorProtos) into OUTDIR with the generators that
Debian's python3-onnx (1.12) ships: onnx.backend.test.cmd_tools
generate-data. Those generators use numpy aliases that newer numpy removed
(np.float, np.int, np.bool, np.object, np.str, np.complex); they are put
back first, for this process only.

Then fixes the cases whose model ONNX 1.12 wrote wrong, as later ONNX
releases did (FIXES); `onnx_gen_tests.py --fix OUTDIR` applies only those
to cases generated before (scripts/onnx_conformance.sh runs it once per
OUTDIR).

usage: onnx_gen_tests.py [--fix] OUTDIR   (exit 77 when onnx cannot be imported)
"""
import sys
import warnings

try:
    import numpy as np
    warnings.simplefilter("ignore")
    for alias, value in (("float", float), ("int", int), ("bool", bool), ("object", object),
                         ("complex", complex), ("str", str)):
        if alias not in np.__dict__:
            setattr(np, alias, value)
    import os
    import onnx
    from onnx.backend.test.cmd_tools import main
except ImportError as exc:
    print(f"onnx_gen_tests.py: skipped: {exc}")
    sys.exit(77)

# (case, op type, attribute, value): an attribute the case's generator
# computed its expected outputs with but left out of the node, so that
# the model means the op's default instead. test_adam_multiple: its
# outputs use epsilon 1e-2, its node has none (the default, 1e-6);
# onnx/onnx#7749, fixed by onnx/onnx#7763 in the same way.
FIXES = [("test_adam_multiple", "Adam", "epsilon", 1e-2)]

# Cast and CastLike to bfloat16: ONNX 1.12's generator computed the
# expected outputs by truncating each float32 to its top 16 bits; the Cast
# spec and later ONNX releases' reference (numpy_helper's
# float32_to_bfloat16) round to nearest even, as varq does. The outputs
# are recomputed from the inputs so (idempotent). Like all bfloat16 data
# of ONNX 1.12's cases, they are UINT16 tensors of the bit patterns.
BF16_RNE = ["test_cast_FLOAT_to_BFLOAT16", "test_castlike_FLOAT_to_BFLOAT16",
            "test_castlike_FLOAT_to_BFLOAT16_expanded"]

# CastLike from or to bfloat16: the model declares input "like" with the
# shape of "input" ([3, 4]) while its data has shape [1], as in the other
# CastLike cases, whose models declare [1]; the declaration is set to the
# data's shape.
LIKE_SHAPE = ["test_castlike_FLOAT_to_BFLOAT16", "test_castlike_FLOAT_to_BFLOAT16_expanded",
              "test_castlike_BFLOAT16_to_FLOAT", "test_castlike_BFLOAT16_to_FLOAT_expanded"]


def bf16_rne(x):
    b = x.astype("<f4").view("<u4").astype(np.uint64)
    r = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(x)
    r[nan] = ((b[nan] >> 16) | 0x40).astype(np.uint16)
    return r


def fix_data(outdir):
    from onnx import numpy_helper
    import glob
    for case in BF16_RNE:
        for d in glob.glob(os.path.join(outdir, "node", case, "test_data_set_*")):
            x = numpy_helper.to_array(onnx.load_tensor(os.path.join(d, "input_0.pb")))
            out = os.path.join(d, "output_0.pb")
            t = onnx.load_tensor(out)
            r = numpy_helper.from_array(bf16_rne(x).reshape(x.shape), t.name)
            onnx.save_tensor(r, out)
    for case in LIKE_SHAPE:
        path = os.path.join(outdir, "node", case, "model.onnx")
        data = os.path.join(outdir, "node", case, "test_data_set_0", "input_1.pb")
        if not os.path.exists(path) or not os.path.exists(data):
            continue
        dims = list(onnx.load_tensor(data).dims)
        model = onnx.load(path)
        for i in model.graph.input:
            if i.name == "like":
                shape = i.type.tensor_type.shape
                del shape.dim[:]
                for v in dims:
                    shape.dim.add().dim_value = v
        onnx.save(model, path)


def fix(outdir):
    for case, op, name, value in FIXES:
        path = os.path.join(outdir, "node", case, "model.onnx")
        if not os.path.exists(path):
            continue
        model = onnx.load(path)
        changed = False
        for node in model.graph.node:
            if node.op_type == op and all(a.name != name for a in node.attribute):
                node.attribute.append(onnx.helper.make_attribute(name, value))
                changed = True
        if changed:
            onnx.save(model, path)
    fix_data(outdir)


args = sys.argv[1:]
only_fix = args[:1] == ["--fix"]
if only_fix:
    args = args[1:]
if len(args) != 1:
    sys.exit("usage: onnx_gen_tests.py [--fix] OUTDIR")
if not only_fix:
    sys.argv = ["backend-test-tools", "generate-data", "-o", args[0]]
    main()
fix(args[0])
