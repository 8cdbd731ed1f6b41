#!/usr/bin/python3
"""The RNN of bench/rnn_bench.c (examples/rnn_sequence.c's model) in PyTorch
eager, with a Python loop over the time steps: its training steps per
second against varq's, and its first losses against varq's.

Usage: rnn_torch.py --bin PATH/rnn_bench [--check] [--dtype f32|f64]
                    [--steps K] [--reps R] [--warmup W] [--keep DIR]

Runs rnn_bench --dir DIR (which writes varq's initial parameters, its 64
batches and the losses of its first 64 steps), loads the same parameters
and batches into PyTorch, and trains with the same protocol: W warm-up
steps, then R repetitions of K timed steps, step s on batch s mod 64,
loss.item() every step, torch.set_num_threads(2).

  h_t = tanh(x_t Wx + h_{t-1} Wh + b), h_0 = 0; logits = h_L Wo + bo
  loss = cross_entropy(logits, label) (mean); Adam(lr=0.003)
varq keeps Wx [10, 16], Wh [16, 16], Wo [16, 2] as [in, out], used here
as they are (x @ W).

Prints both steps/s and the ratio varq / PyTorch, and the first losses
side by side; fails (exit 1) when a loss of the first 64 steps (f64) or
of the first F32_STEPS (f32) differs by more than tol relative (1e-9 for
f64, 1e-4 for f32). f32 is compared over a few steps only: Adam turns
rounding noise in near-zero gradients into whole steps, so f32 runs whose
kernels order their sums differently (another CPU, another ISA level) part
by a growing amount (measured on the CNN of scripts/cnn_torch.py: 2e-6 at
step 10, 8e-4 at step 40); over the first 8 they stay near 1e-7. --check runs only a
few steps of each (no timing claims): the meson test. Exit 77 (skipped)
when torch cannot be imported.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

try:
    import numpy as np
    import torch
except ImportError as exc:
    print(f"rnn_torch.py: skipped: {exc}")
    sys.exit(77)

NBATCHES = 64
PARAMS = ("rnn.wx", "rnn.wh", "rnn.b", "logits.w", "logits.b")

F32_STEPS = 8


def run_varq(args, d):
    cmd = [args.bin, "--dir", d, "--dtype", args.dtype, "--steps", str(args.steps),
           "--reps", str(args.reps), "--warmup", str(args.warmup)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    print(out, end="")
    rate = next(float(l.split()[1]) for l in out.splitlines() if l.startswith("steps_per_s"))
    return rate, np.load(f"{d}/losses.npy")


def train_torch(args, d):
    torch.set_num_threads(2)
    dt = torch.float32 if args.dtype == "f32" else torch.float64
    p = {n: torch.tensor(np.load(f"{d}/init/{n}.npy"), dtype=dt, requires_grad=True)
         for n in PARAMS}
    seqs = [torch.tensor(np.load(f"{d}/batches/seq_{i}.npy"), dtype=dt) for i in range(NBATCHES)]
    labels = [torch.tensor(np.load(f"{d}/batches/label_{i}.npy")) for i in range(NBATCHES)]
    opt = torch.optim.Adam([p[n] for n in PARAMS], lr=0.003)
    wx, wh, b, wo, bo = (p[n] for n in PARAMS)
    losses, rates, step = [], [], 0
    for r in range(-1, args.reps):
        k = args.warmup if r < 0 else args.steps
        t0 = time.perf_counter()
        for _ in range(k):
            seq, label = seqs[step % NBATCHES], labels[step % NBATCHES]
            h = torch.zeros(seq.shape[1], wh.shape[0], dtype=dt)
            for t in range(seq.shape[0]):
                h = torch.tanh(seq[t] @ wx + h @ wh + b)
            loss = torch.nn.functional.cross_entropy(h @ wo + bo, label)
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
    print(f"pytorch eager rnn ({args.dtype}, 2 threads): {med:.1f} steps/s "
          f"(min {rates[0]:.1f}, max {rates[-1]:.1f}; {args.reps} x {args.steps} steps after "
          f"{args.warmup} warm-up)")
    return med, np.array(losses)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--dtype", choices=("f32", "f64"), default="f32")
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=64)
    ap.add_argument("--keep")
    args = ap.parse_args()
    if args.check:
        args.steps, args.reps, args.warmup = 8, 1, 16
    tol = 1e-4 if args.dtype == "f32" else 1e-9
    with tempfile.TemporaryDirectory() as tmp:
        d = args.keep or tmp
        os.makedirs(d, exist_ok=True)
        varq_rate, varq_losses = run_varq(args, d)
        torch_rate, torch_losses = train_torch(args, d)
    n = len(varq_losses)
    if args.dtype == "f32":
        n = min(n, F32_STEPS)
    a, b = varq_losses[:n], torch_losses[:n]
    rel = np.abs(a - b) / np.maximum(np.abs(b), 1e-12)
    print(f"first losses (varq | pytorch), {args.dtype}:")
    for i in range(min(5, n)):
        print(f"  step {i}: {a[i]:.9f} | {b[i]:.9f}  (rel diff {rel[i]:.2e})")
    worst = int(np.argmax(rel))
    ok = rel[worst] <= tol
    print(f"losses of the first {n} steps: largest relative difference {rel[worst]:.2e} "
          f"(step {worst}), tolerance {tol:g}: {'ok' if ok else 'FAILED'}")
    if not args.check:
        ratio = varq_rate / torch_rate
        print(f"varq {varq_rate:.1f} steps/s, pytorch {torch_rate:.1f} steps/s: "
              f"varq / pytorch = {ratio:.2f}x (goal >= 5x: {'met' if ratio >= 5 else 'NOT met'})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
