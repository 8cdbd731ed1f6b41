"""varq.ops: one function per registered op, run on an engine against
numpy (attributes as keywords, variadic and optional outputs, in-place
outputs, errors at the call and in the kernel, threads), and varq.capture
as a context manager: the same values as eager calls, its counters, and
its backward against numpy's gradient."""
import threading

import numpy as np
import pytest

import varq
from varq import ops


@pytest.fixture
def eng():
    return varq.Engine(workers=2)


def test_every_registered_op_has_a_function_with_its_signature():
    for name in ops.names():
        if name.isidentifier() and name not in ("while", "cond"):
            f = getattr(ops, name)
            assert f.__name__ == name and f.__doc__.startswith(ops.signature(name))
    assert "matmul" in ops.__all__ and ops.signature("matmul").startswith("matmul(X, Y) -> Out")
    with pytest.raises(varq.InvalidArgument):
        ops.signature("no_such_op")


def test_ops_compute_what_numpy_does(eng):
    rng = np.random.RandomState(0)
    a = rng.randn(4, 3).astype(np.float32)
    b = rng.randn(5, 3).astype(np.float32)
    c = ops.matmul(a, b, transpose_y=True, alpha=2.0, engine=eng)
    assert isinstance(c, varq.Tensor) and c.shape == (4, 5)
    np.testing.assert_allclose(np.asarray(c), 2 * a @ b.T, rtol=1e-5, atol=1e-6)
    s = ops.softmax(c, axis=1, engine=eng)
    e = np.exp(2 * a @ b.T - (2 * a @ b.T).max(1, keepdims=True))
    np.testing.assert_allclose(np.asarray(s), e / e.sum(1, keepdims=True), rtol=1e-5)
    r = ops.sum(ops.relu(ops.add(a, a, engine=eng), engine=eng), axes=[0], engine=eng)
    np.testing.assert_allclose(np.asarray(r), np.maximum(2 * a, 0).sum(0), rtol=1e-5)
    x1, x2 = ops.split(a, axis=1, sizes=[1, 2], engine=eng)
    np.testing.assert_array_equal(np.asarray(x1), a[:, :1])
    np.testing.assert_array_equal(np.asarray(x2), a[:, 1:])
    v, i = ops.top_k(a, k=2, axis=1, engine=eng)
    np.testing.assert_array_equal(np.asarray(i), np.argsort(-a, 1)[:, :2])
    cat = ops.concat(a, a, a, axis=0, engine=eng)
    np.testing.assert_array_equal(np.asarray(cat), np.concatenate([a] * 3))
    # the default engine
    np.testing.assert_allclose(np.asarray(ops.matmul(a, b.T.copy())), a @ b.T, rtol=1e-5)
    assert ops.default_engine() is ops.default_engine()


def test_optional_outputs_follow_optional_inputs(eng):
    x = np.ones((64, 8), np.float64)
    out, mask = ops.dropout(x, p=0.5, seed=3, engine=eng)
    m = np.asarray(mask)
    assert set(np.unique(m)) <= {0.0, 2.0} and 0 < m.mean() < 2
    np.testing.assert_array_equal(np.asarray(out), x * m)
    state = np.array([7, 0], np.int64)
    out, mask, state_out = ops.dropout(x, state, p=0.5, engine=eng)
    assert np.asarray(state_out)[0] == 7 and np.asarray(state_out)[1] > 0


def test_outputs_written_in_place(eng):
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    before = w.copy()
    g = np.full((2, 3), 10, np.float32)
    wt = varq.tensor(w)
    (r,) = [ops.sgd(wt, g, out=[wt], learning_rate=0.1, engine=eng)]
    assert r is wt
    np.testing.assert_allclose(np.asarray(wt), before - 1.0, rtol=1e-6)
    np.testing.assert_allclose(w, before - 1.0, rtol=1e-6)  # the array's own memory
    with pytest.raises(TypeError, match="varq.Tensor"):
        ops.sgd(wt, g, out=[w], learning_rate=0.1, engine=eng)


def test_bad_calls_raise_at_the_call_and_kernel_errors_at_the_read(eng):
    a = np.ones((2, 3), np.float32)
    with pytest.raises(varq.InvalidArgument, match="matmul"):
        ops.matmul(a, a, engine=eng)  # [2,3] @ [2,3]
    with pytest.raises(varq.InvalidArgument, match="bogus"):
        ops.relu(a, bogus=1, engine=eng)
    with pytest.raises(varq.InvalidArgument, match="axis"):
        ops.softmax(a, axis=1.5, engine=eng)
    with pytest.raises(varq.InvalidArgument):
        ops.add(a, a.astype(np.float64), engine=eng)
    with pytest.raises(TypeError):
        ops.relu(a, engine="not an engine")
    z = ops.div(np.array([1, 2], np.int32), np.array([1, 0], np.int32), engine=eng)
    w = ops.add(z, z, engine=eng)  # pushed before the failure is read: skipped with it
    with pytest.raises(varq.Error, match="division by zero"):
        np.asarray(z)
    with pytest.raises(varq.Error, match="division by zero"):  # every read raises it
        z.numpy()
    with pytest.raises(varq.Error, match="depends on failed"):
        np.asarray(w)
    # the engine goes on
    np.testing.assert_array_equal(np.asarray(ops.add(a, a, engine=eng)), 2 * a)


def test_threads_call_ops_at_once(eng):
    rng = np.random.RandomState(1)
    xs = [rng.randn(16, 16).astype(np.float32) for _ in range(64)]
    out = [None] * len(xs)

    def work(k):
        for i in range(k, len(xs), 8):
            out[i] = np.asarray(ops.tanh(ops.matmul(xs[i], xs[i], engine=eng), engine=eng))

    th = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    for x, y in zip(xs, out):
        np.testing.assert_allclose(y, np.tanh(x @ x), rtol=1e-5, atol=1e-5)


def mlp(x, w, b, eng):
    return ops.relu(ops.add(ops.matmul(x, w, engine=eng), b, engine=eng), engine=eng)


def test_capture_gives_the_eager_values_and_counts(eng):
    rng = np.random.RandomState(2)
    x = rng.randn(8, 4)
    w, b = varq.tensor(rng.randn(4, 3)), varq.tensor(rng.randn(3))
    eager = np.asarray(mlp(x, w, b, eng))
    for step in range(3):
        with varq.capture(eng) as cap:
            y = mlp(x, w, b, eng)
            y2 = ops.scale(y, scale=2.0, engine=eng)
        np.testing.assert_array_equal(np.asarray(y), eager)  # bit for bit
        np.testing.assert_array_equal(np.asarray(y2), 2 * eager)
    st = cap.stats()
    assert st["ops_recorded"] == 12 and st["op_hits"] >= 8
    assert st["segments_run"] == 3 and st["cache_hits"] >= 2 and st["cuts"]["end"] == 3
    # a host read inside cuts the segment
    with varq.capture(eng) as cap:
        y = mlp(x, w, b, eng)
        np.testing.assert_array_equal(np.asarray(y), eager)
        y = ops.relu(y, engine=eng)
    assert cap.stats()["cuts"]["host_read"] >= 1
    with varq.capture(eng):
        with pytest.raises(varq.InvalidArgument):
            varq.capture(eng).__enter__()  # this thread captures on eng already


def test_capture_backward_is_numpys_gradient(eng):
    rng = np.random.RandomState(3)
    x = rng.randn(5, 3)
    wn, bn = rng.randn(3, 2), rng.randn(2)
    w, b = varq.tensor(wn), varq.tensor(bn)
    with varq.capture(eng) as cap:
        h = ops.add(ops.matmul(x, w, engine=eng), b, engine=eng)
        loss = ops.mean(ops.mul(h, h, engine=eng), engine=eng)
        gw, gb = cap.backward(loss, [w, b])
    hn = x @ wn + bn
    np.testing.assert_allclose(float(np.asarray(loss)), np.mean(hn * hn), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(gw), x.T @ (2 * hn / hn.size), rtol=1e-10)
    np.testing.assert_allclose(np.asarray(gb), (2 * hn / hn.size).sum(0), rtol=1e-10)
    with varq.capture(eng) as cap:
        loss = ops.mean(ops.matmul(x, w, engine=eng), engine=eng)
        gw, gb = cap.backward(loss, [w, b])
    assert gb is None
    np.testing.assert_allclose(np.asarray(gw), np.tile(x.sum(0)[:, None], (1, 2)) / 10,
                               rtol=1e-12)


def test_capture_left_on_another_thread_is_refused(eng):
    cap = varq.capture(eng)
    cap.__enter__()
    err = []
    t = threading.Thread(target=lambda: err.append(pytest.raises(RuntimeError, cap.__exit__)))
    t.start()
    t.join()
    assert err
    cap.__exit__(None, None, None)


def test_a_tensor_keeps_its_engine_and_refuses_another():
    """A Tensor made on engine a holds a (its var is a's) after the caller
    dropped a; varq refuses it on engine b (one engine per tensor), and an
    output given on b then holds b. ASan checks that no push reaches a
    freed engine."""
    import gc
    a, b = varq.Engine(workers=1), varq.Engine(workers=1)
    x = np.arange(6, dtype=np.float64).reshape(2, 3) - 2
    t = ops.relu(x, engine=a)
    with pytest.raises(varq.InvalidArgument, match="another engine"):
        ops.scale(t, scale=3.0, engine=b)
    w = varq.tensor(np.zeros((2, 3)))
    ops.relu(x, engine=b, out=[w])
    del a, b
    gc.collect()
    np.testing.assert_array_equal(np.asarray(t), np.maximum(x, 0))
    np.testing.assert_array_equal(np.asarray(w), np.maximum(x, 0))
    del t, w
    gc.collect()
