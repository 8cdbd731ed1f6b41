"""varq.InferenceSession: ONNX models made with python3-onnx's helper, run
against numpy; ONNX Runtime's get_inputs/get_outputs/run; errors for bad
names, dtypes and shapes, failing runs and closed sessions; feeds used in
place and released (refcounts); 8 threads running one session."""
import gc
import sys
import threading

import numpy as np
import pytest

import varq
from conftest import failing_model, mlp_model, run_script, two_output_model


def test_runs_like_numpy(mlp):
    model, ref = mlp
    s = varq.InferenceSession(model, workers=2)
    for n in (1, 5, 64):
        x = np.random.RandomState(n).randn(n, 4).astype(np.float32)
        (y,) = s.run(None, {"x": x})
        assert y.dtype == np.float32 and y.shape == (n, 3)
        np.testing.assert_allclose(y, ref(x), rtol=1e-5, atol=1e-6)


def test_inputs_and_outputs_are_described(mlp):
    s = varq.InferenceSession(mlp[0])
    (i,), (o,) = s.get_inputs(), s.get_outputs()
    assert (i.name, i.type, i.shape, i.dtype) == ("x", "tensor(float)", [None, 4], "float32")
    assert (o.name, o.type, o.shape) == ("y", "tensor(float)", [None, 3])
    two = varq.InferenceSession(two_output_model())
    assert [a.name for a in two.get_inputs()] == ["a", "b"]
    assert [(a.name, a.type, a.shape) for a in two.get_outputs()] == [
        ("s", "tensor(int64)", [2, 3]), ("m", "tensor(int64)", [2, 3])]


def test_output_names_pick_and_order_the_outputs():
    s = varq.InferenceSession(two_output_model())
    a = np.arange(6, dtype=np.int64).reshape(2, 3)
    b = np.full((2, 3), 3, np.int64)
    sm, m = s.run(None, {"a": a, "b": b})
    np.testing.assert_array_equal(sm, a + b)
    np.testing.assert_array_equal(m, a * b)
    (only,) = s.run(["m"], {"a": a, "b": b})
    np.testing.assert_array_equal(only, a * b)
    m2, s2 = s.run(["m", "s"], {"a": a, "b": b})
    np.testing.assert_array_equal(s2, a + b)


def test_a_model_file_and_an_onnx_modelproto(tmp_path, mlp):
    path = tmp_path / "mlp.onnx"
    path.write_bytes(mlp[0])
    x = np.ones((2, 4), np.float32)
    for src in (str(path), path):
        (y,) = varq.InferenceSession(src).run(None, {"x": x})
        np.testing.assert_allclose(y, mlp[1](x), rtol=1e-5)
    import onnx
    (y,) = varq.InferenceSession(onnx.load(str(path))).run(None, {"x": x})
    np.testing.assert_allclose(y, mlp[1](x), rtol=1e-5)
    with pytest.raises(OSError):
        varq.InferenceSession(str(tmp_path / "missing.onnx"))
    with pytest.raises(varq.Error) as e:
        varq.InferenceSession(b"this is not an onnx model")
    assert e.value.code < 0 and str(e.value)


def test_bad_feeds_and_names_raise_clear_errors(mlp):
    s = varq.InferenceSession(mlp[0])
    x = np.zeros((2, 4), np.float32)
    cases = [
        (None, {"z": x}, "no input named 'z'"),
        (None, {}, "input 'x' is not fed"),
        (None, {"x": x.astype(np.float64)}, "wants float32 \\(None, 4\\), the feed is float64"),
        (None, {"x": np.zeros((2, 5), np.float32)}, "the feed is float32 \\(2, 5\\)"),
        (None, {"x": np.zeros(4, np.float32)}, "the feed is float32 \\(4,\\)"),
        (["nope"], {"x": x}, "no output named 'nope'"),
    ]
    for names, feeds, msg in cases:
        with pytest.raises(varq.InvalidArgument, match=msg) as e:
            s.run(names, feeds)
        assert e.value.code == -22
        assert isinstance(e.value, ValueError)
    with pytest.raises(TypeError):
        s.run(None, {"x": np.zeros((2, 4), np.complex64)})
    with pytest.raises(TypeError):
        s.run(None, 5)
    with pytest.raises(varq.InvalidArgument, match="2 feeds in a sequence for the model's 1"):
        s.run(None, [x, x])
    with pytest.raises(varq.InvalidArgument, match="wants float32"):
        s.run(None, (np.zeros((2, 4), np.int32),))
    (y,) = s.run(None, {"x": x})  # still usable
    assert y.shape == (2, 3)


def test_feeds_in_input_order_and_keyword_arguments(mlp):
    s = varq.InferenceSession(mlp[0])
    x = np.random.RandomState(1).randn(2, 4).astype(np.float32)
    want = mlp[1](x)
    for y in (s.run(None, [x])[0], s.run(None, (x,))[0],
              s.run(output_names=["y"], input_feed={"x": x})[0],
              s.run(None, {"x": x}, None)[0], s.run(None, {"x": x}, run_options=None)[0],
              s.run_async(None, [x]).result()[0]):
        np.testing.assert_allclose(y, want, rtol=1e-5)
    key = "".join(["x"])  # a str equal to the input's name, not the same object
    np.testing.assert_allclose(s.run(None, {key: x})[0], want, rtol=1e-5)
    with pytest.raises(TypeError, match="unexpected"):
        s.run(None, {"x": x}, options=None)
    with pytest.raises(TypeError):
        s.run(None)
    with pytest.raises(TypeError, match="not a str"):
        s.run(None, {1: x})


def test_results_are_writable_arrays_that_own_their_tensor(mlp):
    s = varq.InferenceSession(mlp[0])
    x = np.ones((2, 4), np.float32)
    (y,) = s.run(None, {"x": x})
    assert y.flags.c_contiguous and y.flags.writeable and y.dtype == np.float32
    assert isinstance(y.base, varq.Tensor)
    y[0, 0] = 7.0  # the run's own memory, the caller's now
    (y2,) = s.run(None, {"x": x})
    assert y2[0, 0] != 7.0 and y[0, 0] == 7.0


def test_a_failing_run_raises_varqs_message():
    s = varq.InferenceSession(failing_model())
    a = np.array([4, 5, 6], np.int32)
    with pytest.raises(varq.Error, match="division by zero") as e:
        s.run(None, {"a": a, "b": np.array([1, 0, 2], np.int32)})
    assert e.value.code < 0
    (z,) = s.run(None, {"a": a, "b": np.array([2, 5, 3], np.int32)})
    np.testing.assert_array_equal(z, [2, 1, 2])


def test_closed_sessions_refuse_runs_and_results_outlive_them(mlp):
    s = varq.InferenceSession(mlp[0])
    x = np.ones((3, 4), np.float32)
    (y,) = s.run(None, {"x": x})
    want = mlp[1](x)
    with s:
        pass
    assert s.closed
    with pytest.raises(varq.InvalidArgument, match="closed"):
        s.run(None, {"x": x})
    s.close()  # twice is fine
    del s
    gc.collect()
    np.testing.assert_allclose(y, want, rtol=1e-5)  # the engine lives on in y


def test_feeds_are_released_after_many_runs(mlp):
    s = varq.InferenceSession(mlp[0], workers=2)
    x = np.random.RandomState(3).randn(4, 4).astype(np.float32)
    t = varq.tensor(np.ones((4, 4), np.float32))
    for _ in range(10):
        s.run(None, {"x": x})
        s.run(None, {"x": t})
    before_x, before_t = sys.getrefcount(x), sys.getrefcount(t)
    for _ in range(10000):
        (y,) = s.run(None, {"x": x})
    for _ in range(1000):
        s.run(["y"], {"x": t})
    gc.collect()
    assert sys.getrefcount(x) == before_x
    assert sys.getrefcount(t) == before_t
    np.testing.assert_allclose(y, mlp[1](x), rtol=1e-5)


def test_eight_threads_on_one_session_get_the_serial_results(mlp):
    model, ref = mlp
    s = varq.InferenceSession(model, workers=4)
    xs = [np.random.RandomState(i).randn(1 + i % 7, 4).astype(np.float32) for i in range(64)]
    serial = [s.run(None, {"x": x})[0] for x in xs]
    errors, results = [], {}

    def worker(k):
        try:
            for rep in range(25):
                for i in range(k, len(xs), 8):
                    (y,) = s.run(None, {"x": xs[i]})
                    if not np.array_equal(y, serial[i]):
                        errors.append((k, rep, i))
            results[k] = True
        except Exception as e:  # pragma: no cover - reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
    assert len(results) == 8
    for x, y in zip(xs, serial):
        np.testing.assert_allclose(y, ref(x), rtol=1e-5, atol=1e-6)


def test_close_while_other_threads_run(mlp):
    s = varq.InferenceSession(mlp[0])
    x = np.ones((16, 4), np.float32)
    outcomes = []

    def worker():
        for _ in range(200):
            try:
                s.run(None, {"x": x})
            except varq.InvalidArgument as e:
                outcomes.append(str(e))
                return
        outcomes.append("done")

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for th in threads:
        th.start()
    s.close()
    for th in threads:
        th.join()
    assert all(o == "done" or "closed" in o for o in outcomes) and len(outcomes) == 4


def test_a_fixed_batch_dim_is_checked():
    model, ref = mlp_model(batch=2)
    s = varq.InferenceSession(model)
    assert s.get_inputs()[0].shape == [2, 4]
    with pytest.raises(varq.InvalidArgument, match="\\(2, 4\\)"):
        s.run(None, {"x": np.zeros((3, 4), np.float32)})


def test_a_fed_varq_tensor_outlives_the_session(mlp):
    t = varq.tensor(np.ones((2, 4), np.float32))
    s = varq.InferenceSession(mlp[0])
    s.run(None, {"x": t})
    del s
    gc.collect()
    np.testing.assert_array_equal(t.numpy(), np.ones((2, 4)))
    del t  # its last release goes through the session's engine, still alive
    gc.collect()


def test_gpu_sessions_on_the_emulated_backend(tmp_path):
    out = run_script(
        tmp_path,
        "import numpy as np, varq\n"
        "from conftest import mlp_model\n"
        "model, ref = mlp_model()\n"
        "s = varq.InferenceSession(model, gpu=0)\n"
        "x = np.random.RandomState(0).randn(3, 4).astype(np.float32)\n"
        "(y,) = s.run(None, {'x': x})\n"
        "np.testing.assert_allclose(y, ref(x), rtol=1e-5, atol=1e-6)\n"
        "try:\n"
        "    varq.InferenceSession(model, gpu=5)\n"
        "except varq.InvalidArgument as e:\n"
        "    print('no GPU 5:', 'GPU 5' in str(e))\n",
        env={"VARQ_GPU_BACKEND": "emulated"})
    assert out == "no GPU 5: True\n"
