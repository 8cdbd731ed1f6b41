#!/usr/bin/python3
"""What the Python layer costs per call (python/: the varq package).

1. InferenceSession.run of a tiny ONNX model (y = relu(x @ W + b), x of
   [1, 4]) from Python (feeds as a dict of numpy arrays, a list in input
   order, a varq.Tensor), against the same model run from C by
   bench/onnx_time (the executor alone, each run timed): the difference
   of the medians is the binding's overhead per call (feeds wrapped, the
   GIL released and taken back, results wrapped as numpy arrays).
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
[--repeats R] [--batch B] [--batches NB] [--no-peers] (the build's
python/ is put on sys.path; Debian's python3, which has numpy and onnx;
bench/onnx_time built). Prints one line per measurement: the minimum and
the median per call, over NB batches of B calls for the runs, over R
repeats of N pushes for the engine; compare only figures of one run on a
loaded machine (the C run's time is measured in the same run for that
reason).
"""
import argparse
import concurrent.futures
import os
import statistics
import subprocess
import sys
import tempfile
import time


def best_of(repeats, fn):
    return min_med(repeats, fn)[0]


def min_med(repeats, fn, n=1):
    """The minimum and the median of repeats timings of fn, divided by n."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) / n)
    return min(times), statistics.median(times)


def us(mm):
    return f"{mm[0] * 1e6:.2f} us (median {mm[1] * 1e6:.2f})"


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
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--batch", type=int, default=100, help="calls per batch of the run timings")
    ap.add_argument("--batches", type=int, default=300)
    ap.add_argument("--no-peers", action="store_true",
                    help="skip ONNX Runtime and PyTorch (quicker, for before/after runs)")
    args = ap.parse_args()
    sys.path.insert(0, os.path.join(args.build, "python"))
    import numpy as np

    import varq

    model = tiny_model()
    x = np.ones((1, 4), np.float32)
    n = args.runs

    # 1. run overhead
    R = args.repeats
    s = varq.InferenceSession(model, workers=args.workers)
    t = varq.tensor(x)
    feed = {"x": x}
    for _ in range(200):
        s.run(None, feed)
    # Batches of B calls, their mean per call; the minimum and the median
    # over the batches: short batches, so that the median is of quiet ones
    # on a loaded machine, as onnx_time's median of single runs is.
    B, NB = args.batch, args.batches
    py = min_med(NB, lambda: [s.run(None, {"x": x}) for _ in range(B)], B)
    try:  # a list in input order (older builds take only a dict)
        s.run(None, [x])
        py_list = min_med(NB, lambda: [s.run(None, [x]) for _ in range(B)], B)
    except TypeError:
        py_list = (float("nan"), float("nan"))
    py_tensor = min_med(NB, lambda: [s.run(None, {"x": t}) for _ in range(B)], B)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "tiny.onnx")
        with open(path, "wb") as f:
            f.write(model)
        np.save(os.path.join(d, "x.npy"), x)
        # bench/onnx_time times each run of the same model from C (the
        # executor alone, the feed made once): its minimum and median.
        out = subprocess.run(
            [os.path.join(args.build, "bench", "onnx_time"), path, "--feed",
             "x=" + os.path.join(d, "x.npy"), "--fetch", "y", "--workers", str(args.workers),
             "--warmup", "200", "--repeat", str(B * NB)],
            capture_output=True, text=True, check=True).stdout
        kv = dict(w.split("=", 1) for w in out.split() if "=" in w)
        c = (float(kv["min_ms"]) * 1e-3, float(kv["median_ms"]) * 1e-3)
    print(f"InferenceSession.run, tiny model, from Python: {us(py)} per call with "
          f"{{'x': numpy}}, {us(py_list)} with [numpy], {us(py_tensor)} with {{'x': varq.Tensor}}; "
          f"from C (bench/onnx_time, each run timed): {us(c)}: {(py[1] - c[1]) * 1e6:.2f} us "
          f"of binding per call (medians)")
    pa = min_med(NB, lambda: [s.run_async(None, {"x": x}).result() for _ in range(B)], B)
    print(f"InferenceSession.run_async + result(), tiny model: {us(pa)} per call")
    if not args.no_peers:
        peers(model, x, n, args, py[0])

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
    vp = min_med(R, pushes, n)
    chained()
    vc = min_med(R, chained, n)
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=args.workers)

    def submits():
        fs = [pool.submit(empty) for _ in range(n)]
        concurrent.futures.wait(fs)

    submits()
    tp = min_med(R, submits, n)
    pool.shutdown()
    print(f"Engine.push of an empty callable + wait_all: {us(vp)} per op without vars (past "
          f"the engine's throttle such ops run in the pushing thread), {us(vc)} writing one "
          f"var (a chain, on the workers); ThreadPoolExecutor.submit + wait: {us(tp)} per task "
          f"({args.workers} workers each)")


if __name__ == "__main__":
    main()
