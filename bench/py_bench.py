#!/usr/bin/python3
"""What the Python layer costs per call (python/: the varq package).

1. InferenceSession.run of a tiny ONNX model (y = relu(x @ W + b), x of
   [1, 4]) from Python, against the same model run from C by
   `varq run MODEL --repeat N` (the executor alone): the difference is the
   binding's overhead per call (feeds wrapped, the GIL released and taken
   back, results wrapped as numpy arrays).
   The same model's run_async + result() per call, ONNX Runtime through
   its node binding (bench/ort_peer.mjs, the module scripts/ort_fetch.sh
   installed, when it is there: the closest measurable peer; its mean of
   per-call times, so the timer's own cost is in it), and PyTorch eager
   (torch.relu(x @ W + b) with the same weights, 2 threads) from Python.
2. Engine.push of an empty Python callable (then wait_all), without vars
   and writing one var (each op ordered after the one before), against
   concurrent.futures.ThreadPoolExecutor.submit of the same callable (then
   waiting for the futures), with the same number of worker threads.

Usage: /usr/bin/python3 bench/py_bench.py [--build build] [--runs N]
(the build's python/ is put on sys.path; Debian's python3, which has numpy
and onnx). Prints one line per measurement, the best of 5 repeats.
"""
import argparse
import concurrent.futures
import os
import subprocess
import sys
import tempfile
import time


def best_of(repeats, fn):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def tiny_model():
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.RandomState(0)
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["h"]),
         helper.make_node("Add", ["h", "b"], ["a"]),
         helper.make_node("Relu", ["a"], ["y"])],
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])],
        [numpy_helper.from_array(rng.randn(4, 3).astype(np.float32), "W"),
         numpy_helper.from_array(rng.randn(3).astype(np.float32), "b")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()


def peers(model, x, n, args, py):
    """ONNX Runtime's node binding and PyTorch eager on the tiny model, each
    printed against varq's py (seconds per call from Python)."""
    import numpy as np
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    found = subprocess.run(["bash", os.path.join(root, "scripts", "ort_fetch.sh"), "--quiet"],
                           capture_output=True, text=True)
    module = dict(ln.split("=", 1) for ln in found.stdout.split() if "=" in ln).get(
        "ort_node_module")
    if found.returncode == 0 and module:
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "tiny.onnx")
            with open(path, "wb") as f:
                f.write(model)
            np.save(os.path.join(d, "x.npy"), x)
            best = None
            for _ in range(3):
                out = subprocess.run(
                    ["node", os.path.join(root, "bench", "ort_peer.mjs"), "--module", module,
                     "--model", path, "--feed", "x=" + os.path.join(d, "x.npy"), "--repeat",
                     str(n), "--warmup", "200", "--threads", str(args.workers)],
                    capture_output=True, text=True, check=True).stdout
                kv = dict(w.split("=", 1) for w in out.split() if "=" in w)
                mean = float(kv["mean_ms"]) * 1e-3
                best = mean if best is None else min(best, mean)
        print(f"ONNX Runtime (onnxruntime-node), tiny model: {best * 1e6:.2f} us per "
              f"session.run from JavaScript; varq from Python is {best / py:.2f}x its speed")
    else:
        print("ONNX Runtime's node binding: not measured (scripts/ort_fetch.sh found none)")
    try:
        import torch
    except ImportError:
        print("PyTorch eager: not measured (no torch)")
        return
    from onnx import numpy_helper, load_from_string
    init = {t.name: numpy_helper.to_array(t) for t in load_from_string(model).graph.initializer}
    torch.set_num_threads(args.workers)
    W, b = torch.from_numpy(init["W"].copy()), torch.from_numpy(init["b"].copy())
    xt = torch.from_numpy(x)
    with torch.inference_mode():
        for _ in range(200):
            torch.relu(xt @ W + b).numpy()
        te = best_of(5, lambda: [torch.relu(xt @ W + b).numpy() for _ in range(n)]) / n
    print(f"PyTorch eager, the same model from Python (inference_mode, .numpy()): "
          f"{te * 1e6:.2f} us per call; varq is {te / py:.2f}x its speed")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(os.path.dirname(__file__), "..", "build"))
    ap.add_argument("--runs", type=int, default=20000)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    sys.path.insert(0, os.path.join(args.build, "python"))
    import numpy as np

    import varq

    model = tiny_model()
    x = np.ones((1, 4), np.float32)
    n = args.runs

    # 1. run overhead
    s = varq.InferenceSession(model, workers=args.workers)
    for _ in range(200):
        s.run(None, {"x": x})
    py = best_of(5, lambda: [s.run(None, {"x": x}) for _ in range(n)]) / n
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "tiny.onnx")
        with open(path, "wb") as f:
            f.write(model)
        np.save(os.path.join(d, "x.npy"), x)
        env = dict(os.environ, VARQ_CPU_WORKERS=str(args.workers))

        def varq_run(repeat):
            cmd = [os.path.join(args.build, "tools", "varq"), "run", path, "--feed",
                   "x=" + os.path.join(d, "x.npy"), "--fetch", "y=" + os.path.join(d, "y.npy"),
                   "--repeat", str(repeat), "--warmup", "200"]
            t0 = time.perf_counter()
            subprocess.run(cmd, env=env, capture_output=True, check=True)
            return time.perf_counter() - t0

        # The wall time of N runs less that of one (the process's start and
        # the import): varq's own printed mean has a resolution of 1 us.
        c = min(varq_run(n + 1) - varq_run(1) for _ in range(5)) / n
    print(f"InferenceSession.run, tiny model: {py * 1e6:.2f} us per call from Python, "
          f"{c * 1e6:.2f} us from C (varq run --repeat): "
          f"{(py - c) * 1e6:.2f} us of binding per call")
    pa = best_of(5, lambda: [s.run_async(None, {"x": x}).result() for _ in range(n)]) / n
    print(f"InferenceSession.run_async + result(), tiny model: {pa * 1e6:.2f} us per call")
    peers(model, x, n, args, py)

    # 2. push of an empty callable
    def empty():
        pass

    e = varq.Engine(workers=args.workers)

    def pushes():
        for _ in range(n):
            e.push(empty)
        e.wait_all()

    v = e.new_var()

    def chained():
        for _ in range(n):
            e.push(empty, writes=[v])
        e.wait_all()

    pushes()
    vp = best_of(5, pushes) / n
    chained()
    vc = best_of(5, chained) / n
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=args.workers)

    def submits():
        fs = [pool.submit(empty) for _ in range(n)]
        concurrent.futures.wait(fs)

    submits()
    tp = best_of(5, submits) / n
    pool.shutdown()
    print(f"Engine.push of an empty callable + wait_all: {vp * 1e6:.2f} us per op without "
          f"vars (past the engine's throttle such ops run in the pushing thread), "
          f"{vc * 1e6:.2f} us writing one var (a chain, on the workers); "
          f"ThreadPoolExecutor.submit + wait: {tp * 1e6:.2f} us per task "
          f"({args.workers} workers each)")


if __name__ == "__main__":
    main()
