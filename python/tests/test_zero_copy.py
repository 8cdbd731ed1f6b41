"""A 1 GiB numpy array goes into varq and back out without a copy: the
same address through varq.tensor, DLPack (numpy and torch), a scope, and
as a feed fetched back from a run; runs over it grow the process's
resident memory by their outputs alone (RSS from /proc/self/statm).
Skipped when the machine lacks the memory (4 GiB available)."""
import os

import numpy as np
import pytest

import varq

GIB = 1 << 30
PAGE = os.sysconf("SC_PAGE_SIZE")


def available():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


pytestmark = pytest.mark.skipif(
    available() < 4 * GIB,
    reason=f"needs 4 GiB of available memory, the machine has {available() / GIB:.1f} GiB")


def addr(x):
    return np.asarray(x).__array_interface__["data"][0]


@pytest.fixture(scope="module")
def big():
    a = np.empty(GIB // 4, np.float32)
    a.fill(1.0)  # resident now
    return a


def test_a_1gib_array_is_shared_not_copied(big):
    try:
        import torch  # before the measure: importing it maps some 200 MB
    except ImportError:
        torch = None
    before = rss()
    t = varq.tensor(big)
    assert addr(t) == addr(big) and t.nbytes == GIB
    back = np.from_dlpack(t)
    assert addr(back) == addr(big)
    t2 = varq.from_dlpack(big)
    assert addr(t2) == addr(big)
    s = varq.Scope()
    s["x"] = big
    assert addr(s["x"]) == addr(big)
    assert rss() - before < 64 << 20
    if torch is None:
        pytest.skip("torch is not installed: the torch round trip is not made")
    tt = torch.from_dlpack(t)
    assert tt.data_ptr() == addr(big)
    assert addr(varq.from_dlpack(tt)) == addr(big)
    assert rss() - before < 64 << 20


def test_a_1gib_feed_runs_in_place_and_comes_back(big):
    p = varq.Program()
    p.add_var("x", "float32", [None])
    p.add_var("s", "float32", [])
    p.add_var("y", "float32", [None])
    p.add_op("sum", ["x"], ["s"])
    ex = varq.Executor(workers=2)
    ex.run(p, {"x": big[:1 << 20]}, ["s"])  # threads, plan and allocator made: not counted
    before = rss()
    (total,) = ex.run(p, {"x": big}, ["s"])
    print("RSS growth of a sum over the 1 GiB feed:", rss() - before)
    assert float(total) == big.size
    assert rss() - before < 64 << 20  # the feed was read where it is
    (x,) = ex.run(p, {"x": big}, ["x"], return_numpy=False)  # a feed fetched back
    assert addr(x) == addr(big)
    p.add_op("relu", ["x"], ["y"])
    before = rss()
    (y,) = ex.run(p, {"x": big}, ["y"], return_numpy=False)
    arr = np.asarray(y)  # numpy over varq's own output
    assert addr(arr) == addr(y) != addr(big) and arr.nbytes == GIB
    grown = rss() - before
    print("RSS growth of a relu of the 1 GiB feed:", grown)
    assert GIB * 0.9 < grown < GIB + (128 << 20), grown  # the output, and no second copy
    del arr, y


def test_a_1gib_feed_of_an_inference_session(big):
    from onnx import TensorProto, helper
    g = helper.make_graph(
        [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0)], "sum",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
        [helper.make_tensor_value_info("s", TensorProto.FLOAT, [])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    sess = varq.InferenceSession(m.SerializeToString(), workers=2)
    sess.run(None, {"x": big[:1 << 20]})
    before = rss()
    (s,) = sess.run(None, {"x": big})
    assert float(s) == big.size
    (s,) = sess.run_async(None, {"x": big}).result()
    assert float(s) == big.size
    assert rss() - before < 64 << 20
