#!/usr/bin/python3
"""The LSTM classifier of bench/lstm_train.c in PyTorch eager (nn.LSTM,
nn.Linear, cross_entropy, Adam): its training steps per second against
varq's, and its first losses against varq's.

Usage: lstm_train_torch.py --bin PATH/lstm_train [--check] [--dtype f32|f64]
                           [--steps K] [--reps R] [--warmup W] [--keep DIR]

Runs lstm_train --dir DIR (which writes varq's initial parameters, PyTorch's
own names under "rnn." and the head's "logits.w" [128, 10] and "logits.b";
its 8 batches; and the losses of its first 20 steps), loads the same
parameters and batches into PyTorch, and trains with the same protocol: W
warm-up steps, then R repetitions of K timed steps, step s on batch s mod
8, loss.item() every step, torch.set_num_threads(2).

  y = nn.LSTM(32, 128, num_layers=2)(x)[0]; logits = y[-1] @ W + b
  loss = cross_entropy(logits, label) (mean); Adam(lr=0.001)

Prints both steps/s and the ratio varq / PyTorch, and the first losses
side by side; fails (exit 1) when a loss of the first 20 steps differs by
more than 1e-5 relative in f64 (they agree far closer: the same model
from the same numbers), or of the first 4 in f32 by more than 1e-4 (Adam
parts f32 runs whose sums are ordered differently, see rnn_torch.py).
--check: f64, 20 steps (--losses N: N), no timing claims (the meson test
compares 5, to keep it short). Exit 77
(skipped) when torch cannot be imported.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

# PyTorch's OpenMP threads sleep when idle, as varq's workers do after a
# short spin: spinning ones take the cores of a shared machine from the
# threads they wait for (bench/models_vs_ort.py does the same)
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

try:
    import numpy as np
    import torch
except ImportError as exc:
    print(f"lstm_train_torch.py: skipped: {exc}")
    sys.exit(77)

NBATCHES = 8
NLOSSES = 20
F32_STEPS = 4


def run_varq(args, d):
    cmd = [args.bin, "--dir", d, "--dtype", args.dtype, "--steps", str(args.steps),
           "--reps", str(args.reps), "--warmup", str(args.warmup)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    print(out, end="")
    rate = next(float(l.split()[1]) for l in out.splitlines() if l.startswith("steps_per_s"))
    best = next(float(l.split()[1]) for l in out.splitlines() if l.startswith("best_steps_per_s"))
    return (rate, best), np.load(f"{d}/losses.npy")


def train_torch(args, d):
    torch.set_num_threads(2)
    dt = torch.float32 if args.dtype == "f32" else torch.float64
    lstm = torch.nn.LSTM(32, 128, num_layers=2).to(dt)
    head = torch.nn.Linear(128, 10).to(dt)
    with torch.no_grad():
        for n, p in lstm.named_parameters():
            p.copy_(torch.tensor(np.load(f"{d}/init/rnn.{n}.npy")))
        head.weight.copy_(torch.tensor(np.load(f"{d}/init/logits.w.npy")).T)
        head.bias.copy_(torch.tensor(np.load(f"{d}/init/logits.b.npy")))
    xs = [torch.tensor(np.load(f"{d}/batches/x_{i}.npy"), dtype=dt) for i in range(NBATCHES)]
    labels = [torch.tensor(np.load(f"{d}/batches/label_{i}.npy")) for i in range(NBATCHES)]
    opt = torch.optim.Adam(list(lstm.parameters()) + list(head.parameters()), lr=0.001)
    losses, rates, step = [], [], 0
    for r in range(-1, args.reps):
        k = args.warmup if r < 0 else args.steps
        t0 = time.perf_counter()
        for _ in range(k):
            x, label = xs[step % NBATCHES], labels[step % NBATCHES]
            y, _ = lstm(x)
            loss = torch.nn.functional.cross_entropy(head(y[-1]), label)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
            step += 1
        if r >= 0:
            rates.append(k / (time.perf_counter() - t0))
    rates.sort()
    n = len(rates)
    med = rates[n // 2] if n % 2 else (rates[n // 2 - 1] + rates[n // 2]) / 2
    print(f"pytorch eager lstm classifier ({args.dtype}, 2 threads): {med:.2f} steps/s "
          f"(min {rates[0]:.2f}, max {rates[-1]:.2f}; {args.reps} x {args.steps} steps after "
          f"{args.warmup} warm-up)")
    return (med, rates[-1]), np.array(losses)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--dtype", choices=("f32", "f64"), default="f32")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--keep")
    ap.add_argument("--losses", type=int, default=NLOSSES,
                    help="with --check: compare this many first losses (at most 20)")
    args = ap.parse_args()
    if args.check:
        args.dtype, args.steps, args.reps, args.warmup = "f64", min(args.losses, NLOSSES), 1, 0
    tol = 1e-4 if args.dtype == "f32" else 1e-5
    with tempfile.TemporaryDirectory() as tmp:
        d = args.keep or tmp
        os.makedirs(d, exist_ok=True)
        varq_rate, varq_losses = run_varq(args, d)
        torch_rate, torch_losses = train_torch(args, d)
    n = min(len(varq_losses), len(torch_losses))
    if args.dtype == "f32":
        n = min(n, F32_STEPS)
    a, b = varq_losses[:n], torch_losses[:n]
    rel = np.abs(a - b) / np.maximum(np.abs(b), 1e-12)
    print(f"first losses (varq | pytorch), {args.dtype}:")
    for i in range(min(5, n)):
        print(f"  step {i}: {a[i]:.12f} | {b[i]:.12f}  (rel diff {rel[i]:.2e})")
    worst = int(np.argmax(rel))
    ok = rel[worst] <= tol
    print(f"losses of the first {n} steps: largest relative difference {rel[worst]:.2e} "
          f"(step {worst}), tolerance {tol:g}: {'ok' if ok else 'FAILED'}")
    if not args.check:
        ratio, best = varq_rate[0] / torch_rate[0], varq_rate[1] / torch_rate[1]
        print(f"varq {varq_rate[0]:.2f} steps/s, pytorch {torch_rate[0]:.2f} steps/s: "
              f"varq / pytorch = {ratio:.2f}x (goal >= 2x: {'met' if ratio >= 2 else 'NOT met'}); "
              f"fastest repetitions {varq_rate[1]:.2f} and {torch_rate[1]:.2f}: {best:.2f}x")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
