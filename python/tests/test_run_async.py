"""InferenceSession.run_async: futures completed by the engine's done
callback; results equal numpy's and the serial run's, many runs in flight
from many threads, failures raised by result() and returned by
exception(), timeouts, feeds held until the run is done; done callbacks
(once each, on the completing worker or at once), awaiting from asyncio."""
import gc
import sys
import threading
import time

import numpy as np
import pytest

import varq
from conftest import failing_model, two_output_model


def test_result_equals_numpy_and_run(mlp):
    model, ref = mlp
    s = varq.InferenceSession(model, workers=2)
    x = np.random.RandomState(1).randn(7, 4).astype(np.float32)
    f = s.run_async(None, {"x": x})
    assert isinstance(f, varq.RunFuture)
    (y,) = f.result(timeout=30)
    assert f.done() and not f.running() and not f.cancelled()
    assert f.exception() is None
    np.testing.assert_allclose(y, ref(x), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(y, s.run(None, {"x": x})[0])
    assert f.result() is f.result()  # one list, made once


def test_many_runs_in_flight_from_many_threads():
    s = varq.InferenceSession(two_output_model(), workers=2)
    rng = np.random.RandomState(0)
    feeds = [(rng.randint(-50, 50, (2, 3)), rng.randint(-50, 50, (2, 3))) for _ in range(64)]
    results = {}

    def worker(k):
        futs = [(i, s.run_async(["m", "s"], {"a": a, "b": b}))
                for i, (a, b) in enumerate(feeds) if i % 8 == k]
        for i, f in futs:
            results[i] = f.result(timeout=60)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == len(feeds)
    for i, (a, b) in enumerate(feeds):
        m, sm = results[i]
        np.testing.assert_array_equal(m, a * b)
        np.testing.assert_array_equal(sm, a + b)
    # 500 at once from one thread: past the executor's 64 in flight the call waits
    futs = [s.run_async(["s"], {"a": a, "b": b}) for a, b in feeds * 8]
    for f, (a, b) in zip(futs, feeds * 8):
        np.testing.assert_array_equal(f.result(timeout=60)[0], a + b)


def test_a_failing_run_raises_from_result_and_is_the_exception():
    s = varq.InferenceSession(failing_model())
    a = np.array([1, 2, 3], np.int32)
    f = s.run_async(None, {"a": a, "b": np.array([1, 0, 1], np.int32)})
    with pytest.raises(varq.Error, match="division by zero") as ei:
        f.result(timeout=30)
    e = f.exception()
    assert isinstance(e, varq.Error) and e.code == ei.value.code < 0
    with pytest.raises(varq.Error):  # every call raises it
        f.result()
    # the session still runs
    (z,) = s.run_async(None, {"a": a, "b": np.array([1, 2, 3], np.int32)}).result()
    np.testing.assert_array_equal(z, [1, 1, 1])


def test_bad_calls_raise_at_the_call():
    s = varq.InferenceSession(two_output_model())
    a = np.zeros((2, 3), np.int64)
    with pytest.raises(varq.InvalidArgument, match="no input named 'c'"):
        s.run_async(None, {"a": a, "b": a, "c": a})
    with pytest.raises(varq.InvalidArgument, match="no output named 'q'"):
        s.run_async(["q"], {"a": a, "b": a})
    with pytest.raises(varq.InvalidArgument, match="wants int64"):
        s.run_async(None, {"a": a.astype(np.float32), "b": a})
    with pytest.raises(varq.InvalidArgument, match="not fed"):
        s.run_async(None, {"a": a})
    s.close()
    with pytest.raises(varq.InvalidArgument, match="closed"):
        s.run_async(None, {"a": a, "b": a})


def test_timeout_and_a_run_that_is_slow(tmp_path):
    """A Python op holds an engine worker busy; a session sharing nothing
    with it still completes, and result(timeout=0) of a pending run raises
    TimeoutError without cancelling it."""
    from onnx import TensorProto, helper
    # a chain of 200 adds over a [1024, 1024] tensor: long enough (tens of
    # milliseconds and more) to be pending still when result(timeout=0) is
    # called, even after a descheduling on a loaded machine
    nodes = [helper.make_node("Add", ["x" if i == 0 else f"t{i}", "x"], [f"t{i + 1}"])
             for i in range(200)]
    g = helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1024, 1024])],
        [helper.make_tensor_value_info("t200", TensorProto.FLOAT, [1024, 1024])])
    s = varq.InferenceSession(
        helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString(),
        workers=1)
    x = np.ones((1024, 1024), np.float32)
    f = s.run_async(None, {"x": x})
    if not f.done():
        with pytest.raises(TimeoutError):
            f.result(timeout=0)
    assert f.wait(timeout=60)
    np.testing.assert_array_equal(f.result()[0], np.full((1024, 1024), 201, np.float32))


def test_feeds_are_held_until_done_and_released_after(mlp):
    s = varq.InferenceSession(mlp[0])
    x = np.ones((3, 4), np.float32)
    base = sys.getrefcount(x)
    futs = [s.run_async(None, {"x": x}) for _ in range(100)]
    for f in futs:
        f.result(timeout=30)
    del futs, f
    gc.collect()
    assert sys.getrefcount(x) == base
    # a future dropped before its run is done: the run still ends, its feed is released
    for _ in range(100):
        s.run_async(None, {"x": x})
    s.close()  # waits for the runs in flight
    gc.collect()
    assert sys.getrefcount(x) == base


def test_results_outlive_the_session_and_future(mlp):
    model, ref = mlp
    s = varq.InferenceSession(model)
    x = np.ones((2, 4), np.float32)
    f = s.run_async(None, {"x": x})
    del s
    (y,) = f.result()
    del f
    gc.collect()
    np.testing.assert_allclose(y, ref(x), rtol=1e-5)


def test_threads_asking_one_future_get_one_list():
    s = varq.InferenceSession(two_output_model(), workers=2)
    a = np.arange(6, dtype=np.int64).reshape(2, 3)
    for _ in range(50):
        f = s.run_async(None, {"a": a, "b": a})
        got = []
        th = [threading.Thread(target=lambda: got.append(f.result(timeout=30)))
              for _ in range(4)]
        for t in th:
            t.start()
        for t in th:
            t.join()
        assert len(got) == 4 and all(g is got[0] for g in got)
        np.testing.assert_array_equal(got[0][1], a * a)


def test_runs_complete_while_this_thread_keeps_the_gil(mlp):
    """With a switch interval of 100 s this thread keeps the GIL while it
    polls done(); the runs complete anyway: neither the engine's workers
    nor the done callback take the GIL."""
    model, ref = mlp
    s = varq.InferenceSession(model, workers=2)
    x = np.ones((3, 4), np.float32)
    old = sys.getswitchinterval()
    sys.setswitchinterval(100.0)
    try:
        import time
        futs = [s.run_async(None, {"x": x}) for _ in range(20)]
        t0 = time.monotonic()
        while not all(f.done() for f in futs) and time.monotonic() - t0 < 20:
            pass
        took = time.monotonic() - t0
    finally:
        sys.setswitchinterval(old)
    assert took < 20 and all(f.done() for f in futs)
    for f in futs:
        np.testing.assert_allclose(f.result()[0], ref(x), rtol=1e-5)


def chain_model(n=200):
    """A chain of n adds over x [256, 256]: a run long enough to be pending
    when the call returns (most of the time; the tests do not rely on it)."""
    from onnx import TensorProto, helper
    nodes = [helper.make_node("Add", ["x" if i == 0 else f"t{i}", "x"], [f"t{i + 1}"])
             for i in range(n)]
    g = helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [256, 256])],
        [helper.make_tensor_value_info(f"t{n}", TensorProto.FLOAT, [256, 256])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()


def test_done_callbacks_are_called_once_in_order(mlp):
    s = varq.InferenceSession(chain_model(), workers=2)
    x = np.ones((256, 256), np.float32)
    calls = []
    cond = threading.Condition()

    def cb(tag):
        def call(f):
            with cond:
                calls.append((tag, f, threading.get_ident()))
                cond.notify_all()
        return call

    f = s.run_async(None, {"x": x})
    f.add_done_callback(cb("a"))
    f.add_done_callback(cb("b"))
    with cond:
        assert cond.wait_for(lambda: len(calls) == 2, timeout=60)
    assert [c[0] for c in calls] == ["a", "b"] and all(c[1] is f for c in calls)
    assert f.done()
    # added once done: called at once, in this thread
    f.add_done_callback(cb("c"))
    assert calls[2][0] == "c" and calls[2][2] == threading.get_ident()
    f.result()
    time.sleep(0.05)
    assert len(calls) == 3  # each once
    with pytest.raises(TypeError):
        f.add_done_callback(5)


def test_a_done_callback_added_before_the_end_runs_on_the_completing_worker():
    """A long run is pending when its callback is added (nearly always):
    the engine worker that completes it calls the callback, GIL taken."""
    s = varq.InferenceSession(chain_model(400), workers=1)
    x = np.ones((256, 256), np.float32)
    main = threading.get_ident()
    threads = []
    for _ in range(5):
        done = threading.Event()
        f = s.run_async(None, {"x": x})
        f.add_done_callback(lambda fut: (threads.append(threading.get_ident()), done.set()))
        assert done.wait(60)
        f.result()
    assert len(threads) == 5
    assert any(t != main for t in threads)


def test_a_raising_callback_is_logged_and_the_others_still_run(mlp, caplog):
    s = varq.InferenceSession(mlp[0])
    x = np.ones((2, 4), np.float32)
    got = []

    def bad(f):
        raise RuntimeError("callback failed")

    for f in (s.run_async(None, {"x": x}), s.run_async(None, {"x": x})):
        f.wait()  # done: called at once; the second, maybe, by a worker
        with caplog.at_level("ERROR", logger="varq"):
            f.add_done_callback(bad)
            f.add_done_callback(got.append)
    assert len(got) == 2
    msgs = [r for r in caplog.records if r.name == "varq"]
    assert len(msgs) == 2 and "exception calling callback" in msgs[0].getMessage()
    assert isinstance(msgs[0].exc_info[1], RuntimeError)


def test_a_dropped_future_still_calls_its_callbacks_and_is_freed(mlp):
    s = varq.InferenceSession(chain_model(), workers=2)
    x = np.ones((256, 256), np.float32)
    done = threading.Event()
    results = []
    f = s.run_async(None, {"x": x})
    f.add_done_callback(lambda fut: (results.append(fut.exception()), done.set()))
    ref = sys.getrefcount(s)
    del f
    assert done.wait(60)
    assert results == [None]
    for _ in range(100):  # the last reference goes at the main thread's pending-call check
        gc.collect()
        if sys.getrefcount(s) < ref:
            break
        time.sleep(0.01)
    assert sys.getrefcount(s) < ref


def test_asyncio_awaits_runs_and_their_failures(mlp):
    import asyncio
    s = varq.InferenceSession(mlp[0], workers=2)
    bad = varq.InferenceSession(failing_model())
    xs = [np.random.RandomState(i).randn(3, 4).astype(np.float32) for i in range(8)]

    async def main():
        outs = await asyncio.gather(*(s.run_async(None, {"x": x}) for x in xs))
        (y,) = await varq.wrap_future(s.run_async(None, [xs[0]]))
        a = np.array([1, 2, 3], np.int32)
        with pytest.raises(varq.Error, match="division by zero"):
            await bad.run_async(None, {"a": a, "b": np.array([1, 0, 1], np.int32)})
        return outs, y

    outs, y = asyncio.run(main())
    for x, (o,) in zip(xs, outs):
        np.testing.assert_allclose(o, mlp[1](x), rtol=1e-5)
    np.testing.assert_allclose(y, mlp[1](xs[0]), rtol=1e-5)
