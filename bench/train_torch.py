#!/usr/bin/python3
"""PyTorch eager side of the training benchmark: the two models of
bench/train_bench.c on the same batches, with the same optimizer and
hyperparameters and the same timing, on torch.set_num_threads(2) (the
varq side runs the threaded engine with 2 workers).

  seed  x = ones[16,16], label = ones[16,1], Linear(16 -> 1), MSE,
        Adam lr 0.001
  mlp   Linear(64 -> 128), ReLU, Linear(128 -> 10), cross-entropy, Adam lr
        0.005; batch b = rows [64 b, 64 b + 64) of DIR/train_x.npy and
        DIR/train_y.npy, b = 0 .. n/64 - 1, step s on batch s mod (n/64); if
        the files are missing, the 22 synthetic batches train_bench.c makes
        (the same splitmix64 stream)

Each model: W warm-up steps, then R repetitions of K timed steps (the step
counter, which picks the batch, runs on across them); a step is
zero_grad(set_to_none=True), forward, loss, backward, optimizer step and
loss.item(), as the C side fetches and reads the loss of each step.
Reported: median (min..max) over the repetitions of K / seconds.

With --init-dir DIR (written by train_bench --init-dir DIR), the parameters
start from varq's initial values, so that the losses of both sides can be
compared; otherwise from PyTorch's own (same distribution).

With --device cuda the model and the optimizer state live on the GPU and
each step copies its batch from host memory to the GPU, as train_bench
--gpu 0 feeds host tensors to a GPU program; loss.item() copies the loss
back and synchronises every step: the GPU peer of train_bench --gpu 0.

usage: train_torch.py [--json FILE] [--digits DIR] [--threads N]
                      [--steps-seed K] [--steps-mlp K] [--reps R]
                      [--warmup W] [--init-dir DIR] [--adam-foreach]
                      [--device cpu|cuda]
"""
import argparse
import json
import os
import statistics
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

BATCH = 64
SYNTH_BATCHES = 22
M64 = (1 << 64) - 1


def splitmix64(state):
    """One step of splitmix64 (as train_bench.c): (new state, output)."""
    state = (state + 0x9E3779B97F4A7C15) & M64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return state, z ^ (z >> 31)


def synthetic_batches():
    rng = 20260101
    out = []
    for _ in range(SYNTH_BATCHES):
        x = np.empty(BATCH * 64, dtype=np.float32)
        for i in range(BATCH * 64):
            rng, z = splitmix64(rng)
            x[i] = np.float32(z >> 40) * np.float32(1.0 / 16777216.0)
        y = np.empty(BATCH, dtype=np.int64)
        for i in range(BATCH):
            rng, z = splitmix64(rng)
            y[i] = z % 10
        out.append((torch.from_numpy(x.reshape(BATCH, 64)), torch.from_numpy(y)))
    return out


def mlp_batches(digits):
    px, py = os.path.join(digits, "train_x.npy"), os.path.join(digits, "train_y.npy")
    if not (os.path.exists(px) and os.path.exists(py)):
        return synthetic_batches(), "synthetic"
    x, y = np.load(px), np.load(py)
    assert x.dtype == np.float32 and x.ndim == 2 and x.shape[1] == 64
    assert y.dtype == np.int64 and y.shape == (x.shape[0],)
    n = x.shape[0] // BATCH
    return [(torch.from_numpy(np.ascontiguousarray(x[b * BATCH:(b + 1) * BATCH])),
             torch.from_numpy(np.ascontiguousarray(y[b * BATCH:(b + 1) * BATCH])))
            for b in range(n)], "digits"


def load_linear(layer, init_dir, model, name):
    """varq's y = x W + b with W [in, out]: nn.Linear's weight is W^T."""
    if not init_dir:
        return False
    d = os.path.join(init_dir, model)
    w = np.load(os.path.join(d, name + ".w.npy"))
    b = np.load(os.path.join(d, name + ".b.npy"))
    with torch.no_grad():
        layer.weight.copy_(torch.from_numpy(np.ascontiguousarray(w.T)))
        layer.bias.copy_(torch.from_numpy(b))
    return True


def make_seed(args):
    torch.manual_seed(2026)
    net = torch.nn.Linear(16, 1)
    loaded = load_linear(net, args.init_dir, "seed", "out")
    opt = torch.optim.Adam(net.parameters(), lr=0.001,
                           foreach=True if args.adam_foreach else None)
    batches = [(torch.ones(16, 16), torch.ones(16, 1))]
    return net, opt, batches, F.mse_loss, "ones", loaded


def make_mlp(args):
    torch.manual_seed(1)
    l1, l2 = torch.nn.Linear(64, 128), torch.nn.Linear(128, 10)
    loaded = load_linear(l1, args.init_dir, "mlp", "h1")
    loaded = load_linear(l2, args.init_dir, "mlp", "logits") and loaded
    net = torch.nn.Sequential(l1, torch.nn.ReLU(), l2)
    opt = torch.optim.Adam(net.parameters(), lr=0.005,
                           foreach=True if args.adam_foreach else None)
    batches, data = mlp_batches(args.digits)
    return net, opt, batches, F.cross_entropy, data, loaded


def bench(make, k, args):
    net, opt, batches, loss_fn, data, loaded = make(args)
    dev = args.device
    if dev != "cpu":
        net.to(dev)  # the optimizer's state is made lazily, on the parameters' device
    step = 0
    first = last = None
    per_rep = []
    nb = len(batches)
    for r in range(-1, args.reps):  # r = -1: the warm-up
        n = args.warmup if r < 0 else k
        t0 = time.perf_counter()
        for _ in range(n):
            x, y = batches[step % nb]
            if dev != "cpu":
                x, y = x.to(dev), y.to(dev)
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(net(x), y)
            loss.backward()
            opt.step()
            last = loss.item()
            if step == 0:
                first = last
            step += 1
        dt = time.perf_counter() - t0
        if r >= 0:
            per_rep.append(n / dt)
    return {"data": data, "batches": nb, "init": "varq" if loaded else "torch",
            "steps": k, "reps": args.reps,
            "median_steps_per_s": statistics.median(per_rep),
            "min_steps_per_s": min(per_rep), "max_steps_per_s": max(per_rep),
            "per_rep": per_rep, "first_loss": first, "last_loss": last,
            "total_steps": step}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json")
    ap.add_argument("--digits", default="build/digits")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps-seed", type=int, default=5000)
    ap.add_argument("--steps-mlp", type=int, default=1000)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--init-dir")
    ap.add_argument("--adam-foreach", action="store_true",
                    help="Adam(foreach=True) instead of the default (per-tensor loop)")
    ap.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    print(f"PyTorch {torch.__version__} eager training steps/s on {args.device}: "
          f"{torch.get_num_threads()} threads; {args.warmup} warm-up steps, then {args.reps} repetitions; median "
          f"(min..max) of steps / second; loss.item() every step; Adam "
          f"{'foreach=True' if args.adam_foreach else 'default (foreach off)'}")
    print(f"\n{'model':<5} {'steps':>6} {'steps/s':>26} {'first loss':>12} {'last loss':>12}")
    rows = []
    for name, make, k in (("seed", make_seed, args.steps_seed), ("mlp", make_mlp, args.steps_mlp)):
        r = bench(make, k, args)
        r["model"] = name
        rows.append(r)
        cell = (f"{r['median_steps_per_s']:.0f} ({r['min_steps_per_s']:.0f}.."
                f"{r['max_steps_per_s']:.0f})")
        print(f"{name:<5} {k:>6} {cell:>26} {r['first_loss']:>12.6g} {r['last_loss']:>12.6g}"
              f"   [{r['data']} data, {r['batches']} batches, {r['init']} init]")
        sys.stdout.flush()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"runtime": "pytorch", "version": torch.__version__,
                       "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                       "cores": os.cpu_count(), "threads": torch.get_num_threads(),
                       "device": args.device,
                       "warmup": args.warmup, "adam_foreach": args.adam_foreach,
                       "models": rows}, f)
            f.write("\n")


if __name__ == "__main__":
    main()
