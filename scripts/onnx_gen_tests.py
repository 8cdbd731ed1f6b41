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
