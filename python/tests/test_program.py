"""varq.Program, varq.Scope and varq.Executor: programs built op by op and
run against numpy; protobuf bytes, .pb files and the text form read back
to the same program; scopes shared with numpy, saved and loaded; executor
errors, async runs, edits refused while a run is in flight."""
import threading

import numpy as np
import pytest

import varq


def affine_program():
    """y = relu(x @ w + b), w [4, 3] and b [3] persistable."""
    p = varq.Program()
    p.add_var("x", "float32", [None, 4])
    p.add_var("w", np.float32, (4, 3), persistable=True)
    p.add_var("b", "f32", [3], persistable=True)
    for v in ("h", "a", "y"):
        p.add_var(v, "float32", [None, 3])
    assert p.add_op("matmul", ["x", "w"], ["h"], {"transpose_x": False}) == 0
    assert p.add_op("add", ["h", "b"], ["a"]) == 1
    assert p.add_op("relu", ["a"], ["y"]) == 2
    return p


def params(seed=0):
    rng = np.random.RandomState(seed)
    return rng.randn(4, 3).astype(np.float32), rng.randn(3).astype(np.float32)


def test_a_program_built_op_by_op_runs_like_numpy():
    p = affine_program()
    assert p.nblocks == 1 and p.nops() == 3 and p.nvars() == 6
    assert p.var_info("x") == ("float32", (None, 4), False)
    assert p.var_info("w") == ("float32", (4, 3), True)
    w, b = params()
    ex = varq.Executor(workers=2)
    scope = varq.Scope()
    scope["w"] = w
    scope.set("b", b)
    x = np.random.RandomState(1).randn(5, 4).astype(np.float32)
    y, h = ex.run(p, {"x": x}, ["y", "h"], scope)
    np.testing.assert_allclose(h, x @ w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(y, np.maximum(x @ w + b, 0), rtol=1e-5, atol=1e-6)
    (t,) = ex.run(p, feed={"x": x}, fetch_list=["y"], scope=scope, return_numpy=False)
    assert isinstance(t, varq.Tensor) and t.shape == (5, 3)
    np.testing.assert_array_equal(np.asarray(t), y)
    ex.run(p, {"x": x}, ["y"], scope)
    st = ex.stats()  # a plan per fetch list, the third run found its plan
    assert st["runs"] == 3 and st["prepares"] == 2 and st["cache_hits"] >= 1


def test_bytes_files_and_text_give_the_same_program(tmp_path):
    p = affine_program()
    b = p.to_bytes()
    for q in (varq.Program(b), varq.Program(bytearray(b))):
        assert q.to_bytes() == b and q.hash() == p.hash() and q == p
    path = tmp_path / "affine.pb"
    p.save(path)
    assert path.read_bytes() == b
    assert varq.Program(str(path)) == p and varq.Program(path) == p
    text = p.dump()
    assert "op 0 matmul(X=x, Y=w) -> (Out=h) {transpose_x=false}" in text
    q = varq.Program.from_text(text)
    assert q.dump() == text and q == p and isinstance(q, varq.Program)
    c = p.clone()
    assert isinstance(c, varq.Program) and c == p
    c.add_var("z", "float32", [1])
    assert c != p and "z" not in p.dump()


def test_text_round_trip_of_control_flow_attributes_and_flags():
    p = varq.Program()
    p.add_var("c", "bool", [])
    p.add_var("x", "float32", [2, 3])
    p.add_var("o", "float32", [2, 3])
    p.add_var("w", "float32", [2, 3], persistable=True)
    p.add_var("s", "float32", [2, 1])
    p.add_var("parts", "float32", [2, 1])
    p.add_var("rest", "float32", [2, 2])
    t = p.add_block(0)
    p.add_var("tt", "float32", [2, 3], block=t)
    p.add_op("relu", ["x"], ["tt"], block=t)
    e = p.add_block(0)
    p.add_var("ee", "float32", [2, 3], block=e)
    p.add_op("tanh", ["x"], ["ee"], block=e)
    p.add_op("cond", ["c", "x"], ["o"], {"then_block": t, "else_block": e,
                                         "then_outputs": ["tt"], "else_outputs": ["ee"]})
    p.add_op("split", ["o"], ["parts", "rest"], {"axis": 1, "sizes": [1, 2]})
    p.add_op("sum", ["o"], ["s"], {"axes": [1], "keepdim": True})
    p.set_stop_gradient("w")
    p.set_op_priority(0, 2, 5)
    text = p.dump()
    assert "stop_gradient" in text and "priority 5" in text
    q = varq.Program.from_text(text)
    assert q.dump() == text and q == p
    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    ex = varq.Executor(workers=1)
    for cond, ref in ((True, np.maximum(x, 0)), (False, np.tanh(x))):
        o, s, rest = ex.run(q, {"c": np.array(cond), "x": x}, ["o", "s", "rest"])
        np.testing.assert_allclose(o, ref, rtol=1e-6)
        np.testing.assert_allclose(s, ref.sum(1, keepdims=True), rtol=1e-5)
        np.testing.assert_allclose(rest, ref[:, 1:], rtol=1e-6)
    with pytest.raises(ValueError, match="line 1"):
        varq.Program.from_text("nonsense")


def test_bad_programs_and_calls_raise():
    with pytest.raises(varq.InvalidArgument):
        varq.Program(b"\xff\xff\xff not a program")
    with pytest.raises(varq.OperationFailed, match="nonexistent"):
        varq.Program("/nonexistent/x.pb")
    p = affine_program()
    with pytest.raises(varq.InvalidArgument):
        p.add_var("x", "float32", [1])  # a duplicate
    with pytest.raises(varq.InvalidArgument, match="complex64"):
        p.add_var("q", "complex64", [1])
    with pytest.raises(varq.InvalidArgument, match="no_such_op"):
        p.add_op("no_such_op", ["x"], ["y"])
    with pytest.raises(varq.InvalidArgument, match="transpose_x"):
        p.add_op("matmul", ["x", "w"], ["h"], {"transpose_x": "yes"})
    with pytest.raises(varq.InvalidArgument):
        p.add_op("matmul", ["x", "nope"], ["h"])
    with pytest.raises(TypeError):
        p.add_op("relu", "x", ["y"])
    with pytest.raises(varq.InvalidArgument):
        p.var_info("nope")
    ex = varq.Executor(workers=1)
    w, b = params()
    s = varq.Scope()
    s["w"], s["b"] = w, b
    x = np.ones((2, 4), np.float32)
    with pytest.raises(varq.InvalidArgument, match="nope"):
        ex.run(p, {"x": x}, ["nope"], s)
    with pytest.raises(varq.InvalidArgument):
        ex.run(p, {"x": x.astype(np.float64)}, ["y"], s)
    with pytest.raises(varq.InvalidArgument, match="w"):
        ex.run(p, {"x": x}, ["y"])  # the executor's own scope has no w
    with pytest.raises(TypeError):
        ex.run("not a program", {"x": x}, ["y"], s)
    # a failing op: the run raises its error naming the op, the plan stays usable
    q = varq.Program()
    for v in ("a", "b", "z"):
        q.add_var(v, "int32", [3])
    q.add_op("div", ["a", "b"], ["z"])
    a = np.array([4, 5, 6], np.int32)
    with pytest.raises(varq.Error, match="division by zero"):
        ex.run(q, {"a": a, "b": np.array([1, 0, 1], np.int32)}, ["z"])
    (z,) = ex.run(q, {"a": a, "b": np.array([2, 5, 3], np.int32)}, ["z"])
    np.testing.assert_array_equal(z, [2, 1, 2])


def test_scope_shares_memory_saves_and_loads(tmp_path):
    s = varq.Scope()
    w, b = params()
    s["w"] = w
    s["b"] = b
    assert len(s) == 2 and s.names() == ["b", "w"] and "w" in s and "q" not in s
    got = np.asarray(s["w"])
    assert got.__array_interface__["data"][0] == w.__array_interface__["data"][0]
    with pytest.raises(KeyError):
        s["nope"]
    s.save(tmp_path / "ckpt")
    assert sorted(f.name for f in (tmp_path / "ckpt").iterdir()) == ["b.npy", "w.npy"]
    np.testing.assert_array_equal(np.load(tmp_path / "ckpt" / "w.npy"), w)
    t = varq.Scope()
    t.load(str(tmp_path / "ckpt"))
    np.testing.assert_array_equal(np.asarray(t["w"]), w)
    np.testing.assert_array_equal(np.asarray(t["b"]), b)
    # an sgd program updates the parameter in place: the array set is written
    p = varq.Program()
    p.add_var("w", "float32", [4, 3], persistable=True)
    p.add_var("g", "float32", [4, 3])
    p.add_op("sgd", ["w", "g"], ["w"], {"learning_rate": 0.5})
    w0 = w.copy()
    g = np.full((4, 3), 2, np.float32)
    varq.Executor(workers=1).run(p, {"g": g}, None, s)
    np.testing.assert_allclose(np.asarray(s["w"]), w0 - 1.0, rtol=1e-6)
    np.testing.assert_allclose(w, w0 - 1.0, rtol=1e-6)


def test_run_async_and_edits_while_a_run_is_in_flight():
    p = varq.Program()
    p.add_var("x", "float32", [512, 512])
    prev = "x"
    for i in range(60):  # long enough to be in flight at the edit below
        p.add_var(f"t{i}", "float32", [512, 512])
        p.add_op("add", [prev, "x"], [f"t{i}"])
        prev = f"t{i}"
    ex = varq.Executor(workers=1)
    x = np.ones((512, 512), np.float32)
    f = ex.run_async(p, {"x": x}, [prev])
    if not f.done():
        with pytest.raises(varq.Busy):
            p.add_var("late", "float32", [1])
    (out,) = f.result(timeout=60)
    np.testing.assert_array_equal(out, np.full((512, 512), 61, np.float32))
    p.add_var("late", "float32", [1])  # done: editable again
    futs = [ex.run_async(p, {"x": np.full((512, 512), k, np.float32)}, ["t0"])
            for k in range(20)]
    for k, f in enumerate(futs):
        np.testing.assert_array_equal(f.result()[0], np.full((512, 512), 2 * k, np.float32))
    assert ex.cancel() == 0


def test_executor_on_a_shared_engine_from_threads():
    eng = varq.Engine(workers=2)
    ex = varq.Executor(eng)
    assert ex.engine is eng
    p = affine_program()
    w, b = params(3)
    s = varq.Scope()
    s["w"], s["b"] = w, b
    ex.prepare(p, ["x"], ["y"], s)
    xs = [np.random.RandomState(i).randn(3, 4).astype(np.float32) for i in range(32)]
    out = [None] * len(xs)

    def work(k):
        for i in range(k, len(xs), 4):
            out[i] = ex.run(p, {"x": xs[i]}, ["y"], s)[0]

    th = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    for x, y in zip(xs, out):
        np.testing.assert_allclose(y, np.maximum(x @ w + b, 0), rtol=1e-5, atol=1e-6)
    del ex, eng  # the scope still holds the engine: its tensors' vars are the engine's
    np.testing.assert_array_equal(np.asarray(s["w"]), w)


def test_torch_feeds_share_memory():
    torch = pytest.importorskip("torch")
    p = affine_program()
    w, b = params()
    s = varq.Scope()
    s["w"] = torch.from_numpy(w)
    s["b"] = b
    x = torch.randn(2, 4)
    (y,) = varq.Executor(workers=1).run(p, {"x": x}, ["y"], s)
    np.testing.assert_allclose(y, np.maximum(x.numpy() @ w + b, 0), rtol=1e-5, atol=1e-6)


def rss():
    import os
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_no_leak_over_many_runs_and_op_calls():
    import gc
    import sys
    p = affine_program()
    w, b = params()
    s = varq.Scope()
    s["w"], s["b"] = w, b
    ex = varq.Executor(workers=2)
    x = np.ones((2, 4), np.float32)
    base = sys.getrefcount(x), sys.getrefcount(w)

    def burst(k):
        for _ in range(k):
            ex.run(p, {"x": x}, ["y"], s)
            ex.run_async(p, {"x": x}, ["y"], s).result()
            np.asarray(varq.ops.matmul(x, w, engine=ex.engine))

    burst(2000)
    gc.collect()
    r0 = rss()
    burst(20000)
    gc.collect()
    # a worker lets go of the last op's inputs after its result is read,
    # taking the GIL to do so: give it the GIL for a moment
    import time
    for _ in range(200):
        if (sys.getrefcount(x), sys.getrefcount(w)) == base:
            break
        time.sleep(0.005)
    assert (sys.getrefcount(x), sys.getrefcount(w)) == base
    import os
    if "asan" not in os.environ.get("LD_PRELOAD", ""):  # ASan's quarantine keeps freed blocks
        assert rss() - r0 < 8 << 20, rss() - r0


def test_a_tensor_got_before_a_run_outlives_the_runs_engine():
    """A Tensor taken from a scope before a run with a new executor gets a
    var of that executor's engine through the run: it must hold that engine
    (through the scope's list) after the scope and the executor are gone
    (ASan caught the push of its var's free onto a freed engine)."""
    import gc
    s = varq.Scope()
    w = np.ones((4, 3), np.float32)
    s["w"] = w
    got = s["w"]
    p = varq.Program()
    p.add_var("w", "float32", [4, 3], persistable=True)
    p.add_var("g", "float32", [4, 3])
    p.add_op("sgd", ["w", "g"], ["w"], {"learning_rate": 1.0})
    varq.Executor(workers=1).run(p, {"g": np.ones((4, 3), np.float32)}, None, s)
    del s
    gc.collect()
    np.testing.assert_array_equal(np.asarray(got), np.zeros((4, 3), np.float32))
    del got
    gc.collect()
