#!/usr/bin/python3
"""Exports torchvision models with random weights (weights=None, a fixed
seed) through torch.onnx.export, runs each through varq (`varq run
MODEL.onnx --feed input=x.npy --fetch output=y.npy`) and compares varq's
output with PyTorch's on the same input: the largest |varq - torch| must be
within 1e-4 of the largest |torch| (f32), and the top class must agree.

usage: torchvision_check.py --varq BUILD/tools/varq [--models resnet18,...]
                            [--batch N] [--dir DIR] [--opset 13] [--bench R]
                            [--rounds K] [--gpu ID]
--gpu ID runs varq's ops on GPU ID: the CUDA backend, or the emulated one
with VARQ_GPU_BACKEND=emulated (the onnx_resnet18_gpu test).
--bench R also times R inferences of each model in varq (`varq run
--repeat R --warmup 3 --workers 2`, mean per run) and in PyTorch eager (2
threads, after the same 3 warm-up inferences), prints the ratio PyTorch time / varq time (above 1: varq
is faster), and the share of varq's op time spent in conv2d (from a
profile of one run). --rounds K (with --bench) alternates K such rounds of
the two and prints each round's ratio, their median, and the ratio of the
best times: on a shared machine whose speed drifts in phases, that
compares the two in the same phases.
Models: resnet18, mobilenet_v2, squeezenet1_1 (default: all three). DIR
keeps the .onnx files and the arrays (default: a temporary directory).
Exit 0 when every model matches, 1 otherwise, 77 (skipped) without torch
or torchvision.
"""
import argparse
import inspect
import os
import subprocess
import sys
import tempfile
import time

try:
    import numpy as np
    import torch
    import torchvision
except ImportError as exc:
    print(f"torchvision_check.py: skipped: {exc}")
    sys.exit(77)


def export(name, path, batch, opset):
    torch.manual_seed(0)
    model = getattr(torchvision.models, name)(weights=None).eval()
    x = torch.randn(batch, 3, 224, 224, generator=torch.Generator().manual_seed(1))
    # PyTorch 2.9 and later export through torch.export (dynamo) by default,
    # to opset 18 whatever opset_version asks for; the TorchScript exporter
    # (dynamo=False, the only one before 2.5) gives the requested opset.
    extra = {}
    if "dynamo" in inspect.signature(torch.onnx.export).parameters:
        extra["dynamo"] = False
    with torch.no_grad():
        y = model(x)
        torch.onnx.export(model, x, path, opset_version=opset, input_names=["input"],
                          output_names=["output"],
                          dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}}, **extra)
    return x.numpy(), y.numpy()


def varq_ms(args, model, xp, gpu):
    r = subprocess.run([args.varq, "run", model, "--feed", f"input={xp}", "--fetch", "output",
                        "--repeat", str(args.bench), "--warmup", "3", "--workers", "2"] + gpu,
                       capture_output=True, text=True, check=True)
    return float(r.stderr.split("mean ")[1].split(" ms")[0])


def torch_ms(args, m, x):
    with torch.no_grad():
        for _ in range(3):
            m(x)
        t0 = time.perf_counter()
        for _ in range(args.bench):
            m(x)
        return (time.perf_counter() - t0) * 1e3 / args.bench


def bench(args, name, model, xp, xin):
    gpu = ["--gpu", str(args.gpu)] if args.gpu >= 0 else []
    torch.manual_seed(0)
    m = getattr(torchvision.models, name)(weights=None).eval()
    x = torch.from_numpy(xin)
    # Rounds alternate the two, so that a slower phase of a shared machine
    # (it lasts seconds to minutes) falls on both.
    pairs = []
    for _ in range(args.rounds):
        pairs.append((varq_ms(args, model, xp, gpu), torch_ms(args, m, x)))
    trace = xp + ".trace.json"
    subprocess.run([args.varq, "run", model, "--feed", f"input={xp}", "--fetch", "output",
                    "--workers", "2", "--profile", trace] + gpu, capture_output=True, check=True)
    import json
    events = json.load(open(trace))
    events = events["traceEvents"] if isinstance(events, dict) else events
    # Ops only: a "segment" span holds the spans of the ops it ran, and
    # "parallel_for" spans are slices of an op's loop run by other workers,
    # inside that op's span; counting them too would count time twice.
    ops = [e for e in events
           if e.get("ph") == "X" and e.get("name") not in ("segment", "parallel_for")]
    total = sum(e.get("dur", 0) for e in ops)
    conv = sum(e.get("dur", 0) for e in ops if e.get("name") == "conv2d")
    share = f"conv2d {100 * conv / total if total else 0:.0f}% of varq's op time"
    if args.rounds == 1:
        ms, tms = pairs[0]
        print(f"  {name} batch {args.batch}: varq {ms:.2f} ms, PyTorch {tms:.2f} ms per "
              f"inference: PyTorch / varq = {tms / ms:.2f}; {share}")
        return
    ratios = sorted(t / v for v, t in pairs)
    best_v, best_t = min(v for v, _ in pairs), min(t for _, t in pairs)
    print(f"  {name} batch {args.batch}, {args.rounds} alternated rounds of {args.bench}: "
          f"varq {best_v:.2f}-{max(v for v, _ in pairs):.2f} ms, PyTorch "
          f"{best_t:.2f}-{max(t for _, t in pairs):.2f} ms; PyTorch / varq per round "
          f"{' '.join(f'{r:.2f}' for r in ratios)}, median {ratios[len(ratios) // 2]:.2f}, "
          f"best against best {best_t / best_v:.2f}; {share}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--varq", required=True)
    ap.add_argument("--models", default="resnet18,mobilenet_v2,squeezenet1_1")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--opset", type=int, default=13)
    ap.add_argument("--dir")
    ap.add_argument("--bench", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=1,
                    help="with --bench: alternate this many rounds of varq and PyTorch")
    ap.add_argument("--gpu", type=int, default=-1,
                    help="run varq's ops on this GPU (VARQ_GPU_BACKEND=cuda|emulated)")
    args = ap.parse_args()
    torch.set_num_threads(2)
    tmp = tempfile.TemporaryDirectory() if not args.dir else None
    d = args.dir or tmp.name
    os.makedirs(d, exist_ok=True)
    ok = True
    for name in args.models.split(","):
        model = os.path.join(d, f"{name}.onnx")
        xin, want = export(name, model, args.batch, args.opset)
        xp, yp = os.path.join(d, f"{name}_x.npy"), os.path.join(d, f"{name}_y.npy")
        np.save(xp, xin)
        t0 = time.perf_counter()
        gpu = ["--gpu", str(args.gpu)] if args.gpu >= 0 else []
        r = subprocess.run([args.varq, "run", model, "--feed", f"input={xp}",
                            "--fetch", f"output={yp}"] + gpu, capture_output=True, text=True)
        secs = time.perf_counter() - t0
        if r.returncode != 0:
            print(f"{name}: varq failed: {r.stderr.strip()}")
            ok = False
            continue
        got = np.load(yp)
        if got.shape != want.shape:
            print(f"{name}: shape {got.shape}, PyTorch's is {want.shape}")
            ok = False
            continue
        diff = float(np.max(np.abs(got - want)))
        scale = float(np.max(np.abs(want)))
        rel = diff / scale if scale else diff
        same_top = bool(np.all(got.argmax(axis=1) == want.argmax(axis=1)))
        good = rel <= 1e-4 and same_top
        ok &= good
        print(f"{name}: batch {args.batch}, max |varq - torch| = {diff:.3g} "
              f"({rel:.3g} of max |torch| {scale:.3g}), top class "
              f"{'agrees' if same_top else 'DIFFERS'}, varq run {secs:.2f} s: "
              f"{'ok' if good else 'FAILED'}")
        if args.bench and good:
            bench(args, name, model, xp, xin)
    sys.exit(0 if ok else 1)


main()
