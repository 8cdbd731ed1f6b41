"""Training from Python: append_backward's gradients and the optimizers'
updates (SGD, momentum, Adam, AdamW, clipping, weight decay) against numpy
formulas (torch.optim's), a learning-rate schedule, and the digits MLP of
examples/python/digits_mlp.py: the loss falls, and its epochs equal the C
example's (examples/mlp_digits.c) line for line."""
import os
import pathlib
import runpy
import subprocess

import numpy as np
import pytest

import varq

ROOT = pathlib.Path(__file__).resolve().parents[2]


def regression(opt=None, lr_var=None):
    """pred = x @ w, loss = mean((pred - t)^2); w [3, 2] persistable. Returns
    (startup, main, executor, scope) with w set to a known value."""
    startup, main = varq.Program(), varq.Program()
    main.add_var("x", "float64", [None, 3])
    main.add_var("t", "float64", [None, 2])
    main.add_var("w", "float64", [3, 2], persistable=True)
    main.add_var("pred", "float64", [None, 2])
    main.add_op("matmul", ["x", "w"], ["pred"])
    varq.layers.mse_loss(main, "pred", "t", "loss")
    if opt is None:
        assert varq.append_backward(main, "loss") == 1
    else:
        assert opt.minimize(main, startup, "loss") == 1
    ex = varq.Executor(workers=1)
    scope = varq.Scope()
    ex.run(startup, scope=scope)
    scope["w"] = W0.copy()
    return startup, main, ex, scope


rng = np.random.RandomState(7)
X = rng.randn(5, 3)
T = rng.randn(5, 2)
W0 = rng.randn(3, 2)


def grad(w, x=X, t=T):
    return 2.0 / t.size * x.T @ (x @ w - t)


def test_append_backward_gives_numpys_gradient():
    _, main, ex, scope = regression()
    assert main.var_info("w@GRAD") == ("float64", (3, 2), False)
    loss, g = ex.run(main, {"x": X, "t": T}, ["loss", "w@GRAD"], scope)
    np.testing.assert_allclose(loss, np.mean((X @ W0 - T) ** 2), rtol=1e-12)
    np.testing.assert_allclose(g, grad(W0), rtol=1e-12)
    # a finite difference agrees too
    eps, k = 1e-6, (1, 0)
    wp = W0.copy()
    wp[k] += eps
    fd = (np.mean((X @ wp - T) ** 2) - np.mean((X @ W0 - T) ** 2)) / eps
    assert abs(fd - g[k]) < 1e-5
    # no_grad: w gets none
    p = varq.Program()
    p.add_var("x", "float64", [2, 3])
    p.add_var("w", "float64", [3, 2], persistable=True)
    p.add_var("pred", "float64", [2, 2])
    p.add_op("matmul", ["x", "w"], ["pred"])
    p.add_var("loss", "float64", [])
    p.add_op("mean", ["pred"], ["loss"])
    with pytest.raises(varq.InvalidArgument, match="does not depend on any parameter"):
        varq.append_backward(p, "loss", no_grad=["w"])
    with pytest.raises(varq.InvalidArgument):
        varq.append_backward(p, "nope")


def steps(opt, n=3):
    _, main, ex, scope = regression(opt)
    for _ in range(n):
        ex.run(main, {"x": X, "t": T}, None, scope)
    return np.asarray(scope["w"])


def test_sgd_with_weight_decay_and_clipping_is_torchs():
    w = W0.copy()
    for _ in range(3):
        w -= 0.1 * grad(w)
    np.testing.assert_allclose(steps(varq.SGD(0.1)), w, rtol=1e-12)
    w = W0.copy()
    for _ in range(3):
        w -= 0.1 * (np.clip(grad(w), -0.2, 0.2) + 0.01 * w)
    np.testing.assert_allclose(steps(varq.SGD(0.1, weight_decay=0.01, clip_value=0.2)), w,
                               rtol=1e-12)
    w = W0.copy()
    for _ in range(3):
        g = grad(w)
        g = g * min(1.0, 0.5 / (np.linalg.norm(g) + 1e-6))
        w -= 0.1 * g
    np.testing.assert_allclose(steps(varq.SGD(0.1, clip_norm=0.5)), w, rtol=1e-12)


def test_momentum_and_nesterov_are_torchs():
    for nesterov in (False, True):
        w, v = W0.copy(), np.zeros_like(W0)
        for _ in range(3):
            g = grad(w)
            v = 0.8 * v + g
            w -= 0.05 * (g + 0.8 * v if nesterov else v)
        np.testing.assert_allclose(steps(varq.Momentum(0.05, mu=0.8, nesterov=nesterov)), w,
                                   rtol=1e-12)


def test_adam_and_adamw_are_torchs():
    for decoupled in (False, True):
        w, m, v = W0.copy(), np.zeros_like(W0), np.zeros_like(W0)
        for t in range(1, 4):
            g = grad(w)
            if decoupled:
                w *= 1 - 0.01 * 0.1
            else:
                g = g + 0.1 * w
            m = 0.8 * m + 0.2 * g
            v = 0.9 * v + 0.1 * g * g
            w -= 0.01 * (m / (1 - 0.8 ** t)) / (np.sqrt(v / (1 - 0.9 ** t)) + 1e-7)
        opt = (varq.AdamW(0.01, weight_decay=0.1, beta1=0.8, beta2=0.9, epsilon=1e-7)
               if decoupled else
               varq.Adam(0.01, beta1=0.8, beta2=0.9, epsilon=1e-7, weight_decay=0.1))
        np.testing.assert_allclose(steps(opt), w, rtol=1e-10)
    with pytest.raises(varq.InvalidArgument):
        regression(varq.SGD(0.1, parameters=["x"]))
    with pytest.raises(varq.InvalidArgument):
        regression(varq.Momentum(0.1, decoupled=True))


def test_a_step_schedule_feeds_the_optimizer():
    startup, main = varq.Program(), varq.Program()
    main.add_var("x", "float64", [None, 3])
    main.add_var("t", "float64", [None, 2])
    main.add_var("w", "float64", [3, 2], persistable=True)
    main.add_var("pred", "float64", [None, 2])
    main.add_op("matmul", ["x", "w"], ["pred"])
    varq.layers.mse_loss(main, "pred", "t", "loss")
    varq.lr_schedule(main, startup, "lr", "step", 0.1, dtype="float64", step_size=2, gamma=0.5)
    varq.SGD(learning_rate_var="lr").minimize(main, startup, "loss")
    ex, scope = varq.Executor(workers=1), varq.Scope()
    ex.run(startup, scope=scope)
    scope["w"] = W0.copy()
    w, rates = W0.copy(), []
    for step in range(5):
        (lr,) = ex.run(main, {"x": X, "t": T}, ["lr"], scope)
        rates.append(float(lr))
        w -= 0.1 * 0.5 ** (step // 2) * grad(w)
    assert rates == [0.1, 0.1, 0.05, 0.05, 0.025]
    np.testing.assert_allclose(np.asarray(scope["w"]), w, rtol=1e-12)
    with pytest.raises(varq.InvalidArgument):
        varq.lr_schedule(main, startup, "lr2", "exponential", 0.1)


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    pytest.importorskip("sklearn")
    return str(tmp_path_factory.mktemp("digits"))


def test_digits_mlp_learns_and_equals_the_c_example(digits):
    ex = runpy.run_path(str(ROOT / "examples" / "python" / "digits_mlp.py"))
    lines = []
    history = ex["train"](digits, epochs=3, report=lines.append, workers=2)
    losses = [h[0] for h in history]
    assert losses[0] > losses[1] > losses[2] and losses[0] < 2.3  # ln 10: chance
    assert history[-1][1] > 0.9
    c_example = pathlib.Path(varq.__file__).resolve().parents[2] / "examples" / "mlp_digits"
    if not c_example.exists():
        pytest.skip(f"{c_example} is not built: the C comparison is not made")
    # the C example carries its own sanitizer runtime in the ASan build: the
    # interpreter's preloaded one must not reach it
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    run = subprocess.run([str(c_example), digits, "--epochs", "3"], capture_output=True,
                         text=True, timeout=120, env=env)
    assert run.returncode == 0, run.stderr[-2000:]
    out = run.stdout
    c_lines = [ln for ln in out.splitlines() if ln.startswith("epoch")]
    assert c_lines == [ln for ln in lines if ln.startswith("epoch")]


def test_digits_mlp_example_reaches_95_percent(digits, capsys):
    ex = runpy.run_path(str(ROOT / "examples" / "python" / "digits_mlp.py"))
    assert ex["main"]([digits, "--epochs", "20"]) == 0
    assert "(at least 95%)" in capsys.readouterr().out
