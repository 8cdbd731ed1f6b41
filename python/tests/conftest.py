"""Shared fixtures of the varq package's tests: small ONNX models made with
python3-onnx's helper, and their numpy references. numpy, onnx and torch
are Debian's (scripts/setup.sh): missing, the tests fail rather than skip."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper  # python3-onnx (scripts/setup.sh)


def mlp_model(batch="N"):
    """y = relu(x @ W + b), x: float32 [batch, 4]; returns (bytes, reference)."""
    rng = np.random.RandomState(0)
    W = rng.randn(4, 3).astype(np.float32)
    b = rng.randn(3).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["h"]),
         helper.make_node("Add", ["h", "b"], ["a"]),
         helper.make_node("Relu", ["a"], ["y"])],
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 3])],
        [numpy_helper.from_array(W, "W"), numpy_helper.from_array(b, "b")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    return m.SerializeToString(), (lambda x: np.maximum(x @ W + b, 0))


def two_output_model():
    """s = a + b (int64 [2, 3]), m = a * b; two outputs in that order."""
    g = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["s"]), helper.make_node("Mul", ["a", "b"], ["m"])],
        "two",
        [helper.make_tensor_value_info("a", TensorProto.INT64, [2, 3]),
         helper.make_tensor_value_info("b", TensorProto.INT64, [2, 3])],
        [helper.make_tensor_value_info("s", TensorProto.INT64, [2, 3]),
         helper.make_tensor_value_info("m", TensorProto.INT64, [2, 3])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()


def failing_model():
    """z = a / b on int32: dividing by zero fails the run in varq's kernel."""
    g = helper.make_graph(
        [helper.make_node("Div", ["a", "b"], ["z"])], "div",
        [helper.make_tensor_value_info("a", TensorProto.INT32, [3]),
         helper.make_tensor_value_info("b", TensorProto.INT32, [3])],
        [helper.make_tensor_value_info("z", TensorProto.INT32, [3])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()


@pytest.fixture
def mlp():
    return mlp_model()


def run_script(tmp_path, text, env=None):
    """Runs text as a script in a new /usr/bin/python3 process that imports
    the same varq (and this folder's conftest); returns its stdout, and
    fails the test on a non-zero exit (stderr shown)."""
    import os
    import subprocess
    import sys

    import varq

    script = tmp_path / "script.py"
    script.write_text(text)
    full = dict(os.environ, **(env or {}))
    full["PYTHONPATH"] = os.pathsep.join(
        [os.path.dirname(__file__), os.path.dirname(os.path.dirname(varq.__file__))]
        + [p for p in full.get("PYTHONPATH", "").split(os.pathsep) if p])
    r = subprocess.run([sys.executable, str(script)], env=full, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout
