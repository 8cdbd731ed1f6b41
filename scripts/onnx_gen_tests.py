#!/usr/bin/python3
"""Writes ONNX's backend node test cases (model.onnx and test_data_set_N/
with input and output TensorProtos) into OUTDIR with the generators that
Debian's python3-onnx (1.12) ships: onnx.backend.test.cmd_tools
generate-data. Those generators use numpy aliases that newer numpy removed
(np.float, np.int, np.bool, np.object, np.str, np.complex); they are put
back first, for this process only.

usage: onnx_gen_tests.py OUTDIR   (exit 77 when onnx cannot be imported)
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
    from onnx.backend.test.cmd_tools import main
except ImportError as exc:
    print(f"onnx_gen_tests.py: skipped: {exc}")
    sys.exit(77)

if len(sys.argv) != 2:
    sys.exit("usage: onnx_gen_tests.py OUTDIR")
sys.argv = ["backend-test-tools", "generate-data", "-o", sys.argv[1]]
main()
