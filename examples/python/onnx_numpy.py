#!/usr/bin/python3
"""An ONNX model run by varq from Python: a tiny model made with onnx's
helper (x @ W + b, then Relu), fed a numpy array, checked against numpy,
and its output handed to torch without a copy.

    /usr/bin/python3 examples/python/onnx_numpy.py
"""
import numpy as np
import onnx
from onnx import helper, numpy_helper, TensorProto

import varq

rng = np.random.default_rng(0)
w = rng.standard_normal((4, 3)).astype(np.float32)
b = rng.standard_normal(3).astype(np.float32)
graph = helper.make_graph(
    [helper.make_node("MatMul", ["x", "w"], ["xw"]),
     helper.make_node("Add", ["xw", "b"], ["z"]),
     helper.make_node("Relu", ["z"], ["y"])],
    "tiny",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])],
    [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])

with varq.InferenceSession(model.SerializeToString(), workers=2) as sess:
    print([(i.name, i.type, i.shape) for i in sess.get_inputs()])
    x = rng.standard_normal((5, 4)).astype(np.float32)
    (y,) = sess.run(None, {"x": x})            # x is used in place: no copy
    want = np.maximum(x @ w + b, 0)
    print("max |varq - numpy| =", float(np.abs(y - want).max()))

    t = varq.tensor(y)                          # shares y's memory
    try:
        import torch
        print("torch sees the same bytes:", torch.from_dlpack(t).data_ptr() ==
              y.__array_interface__["data"][0])
    except ImportError:
        pass
