#!/usr/bin/python3
"""The digits CNN of examples/onnx_cnn_digits.c, defined and trained in
PyTorch: exports it (random weights, fixed seed) as ONNX, trains it in
PyTorch with the example's protocol (batches of 32 in the training set's
order, the last partial one dropped; Adam, learning rate 0.003; batch
normalization in inference form, its running statistics frozen, as the
exported model computes it), runs the varq example on the same model and
data, and checks three things:

1. The losses of the first --steps steps, step by step, with the model in
   f64 in both (relative difference at most F64_BOUND).
2. The loss of the first step in f32 (relative difference at most
   F32_BOUND): one forward pass from the same weights.
3. varq's held-out accuracy after --epochs epochs in f32 (at least
   --min-accuracy).

Why not the f32 losses step by step: Adam divides each gradient by its own
running magnitude, so a component whose gradient is rounding noise (about
1e-7 relative in f32, well above Adam's epsilon of 1e-8) still moves its
weight by the full learning rate, in a direction set by how the sums were
ordered. Different kernels (AVX-512, AVX2, portable, PyTorch's) order them
differently, so the f32 trajectories part: measured on one machine, 1.8e-6
at step 10, 8e-4 at step 40, 2.8e-3 at step 47, and the size depends on the
CPU. In f64 the noise is 1e-16 relative, eight orders of magnitude under
Adam's epsilon, so those components barely move, and the growth that f32
showed (under 1e5 over 50 steps) leaves the f64 losses within 1e-11:
F64_BOUND = 1e-9 leaves a hundredfold margin. The f32 first step is
rounding of the same sums only: at most gamma_n = n * 6e-8 relative per
output for sums of n <= 512 terms (the linear layer's), 3e-5, so
F32_BOUND = 1e-4.

usage: cnn_torch.py --bin BUILD/examples/onnx_cnn_digits [--data DIR]
                    [--steps 50] [--epochs 30] [--min-accuracy 0.9]
                    [--check] [--keep DIR]
--data: the .npy files of scripts/digits_to_npy.py (written there when
missing). Without --check it also trains PyTorch to the end and prints each
one's steps per second and accuracy. Exit 1 on a failed check, 77
(skipped) without torch or sklearn.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

try:
    import numpy as np
    import torch
    from torch import nn
except ImportError as exc:
    print(f"cnn_torch.py: skipped: {exc}")
    sys.exit(77)

BATCH = 32
F64_BOUND = 1e-9
F32_BOUND = 1e-4


class DigitsCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
            nn.MaxPool2d(2))
        self.fc = nn.Linear(32 * 4 * 4, 10)
        # Running statistics as a model that has seen data has them (and
        # unlike fresh ones, not equal to the initial scale and shift, which
        # the exporter would then store once, as one tensor for both).
        for bn in (self.features[1], self.features[4]):
            bn.running_mean.uniform_(-0.1, 0.1)
            bn.running_var.uniform_(0.8, 1.2)

    def forward(self, x):
        return self.fc(torch.flatten(self.features(x), 1))


def data(d):
    if not os.path.exists(os.path.join(d, "test_y.npy")):
        here = os.path.dirname(os.path.abspath(__file__))
        r = subprocess.run(["/usr/bin/python3", os.path.join(here, "digits_to_npy.py"), d],
                           capture_output=True, text=True)
        if r.returncode != 0:
            print(f"cnn_torch.py: skipped: no digits data ({r.stderr.strip()[-200:]})")
            sys.exit(77)
    return [np.load(os.path.join(d, f"{n}.npy")) for n in ("train_x", "train_y", "test_x",
                                                             "test_y")]


def train_torch(model, xtr, ytr, steps, dtype=torch.float32):
    model.eval()  # BN with its running statistics, as exported
    opt = torch.optim.Adam(model.parameters(), lr=0.003)
    nb = len(ytr) // BATCH
    x = torch.from_numpy(xtr.reshape(-1, 1, 8, 8)).to(dtype)
    y = torch.from_numpy(ytr)
    losses = []
    t0 = time.perf_counter()
    for s in range(steps):
        b = (s % nb) * BATCH
        loss = nn.functional.cross_entropy(model(x[b:b + BATCH]), y[b:b + BATCH])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return np.array(losses), steps / (time.perf_counter() - t0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--data")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--keep")
    ap.add_argument("--min-accuracy", type=float, default=0.9)
    args = ap.parse_args()
    torch.set_num_threads(2)
    tmp = tempfile.TemporaryDirectory()
    d = args.keep or tmp.name
    os.makedirs(d, exist_ok=True)
    xtr, ytr, xte, yte = data(args.data or os.path.join(d, "digits"))
    data_dir = args.data or os.path.join(d, "digits")
    # f64: the step-by-step comparison (see the docstring for why f64)
    want, got = losses(args, d, data_dir, xtr, ytr, torch.float64)
    rel = np.abs(got - want) / np.maximum(np.abs(want), 1e-300)
    worst = int(np.argmax(rel))
    print(f"f64 losses of the first {args.steps} steps, varq against PyTorch: largest relative "
          f"difference {rel[worst]:.3g} (step {worst}: {got[worst]:.17g} vs {want[worst]:.17g})")
    ok = bool(rel.max() <= F64_BOUND)
    # f32: the first step's loss only (the same weights, one forward pass)
    want32, got32 = losses(args, d, data_dir, xtr, ytr, torch.float32, steps=1)
    rel0 = abs(got32[0] - want32[0]) / abs(want32[0])
    print(f"f32 loss of step 0: {got32[0]:.9g} vs {want32[0]:.9g}, relative difference {rel0:.3g}")
    ok = ok and bool(rel0 <= F32_BOUND)
    # f32 trained to the end: held-out accuracy
    torch.manual_seed(0)
    model = DigitsCNN()
    nb = len(ytr) // BATCH
    epochs = args.epochs
    if not args.check:
        _, torch_rate = train_torch(model, xtr, ytr, epochs * nb)
        with torch.no_grad():
            acc = (model(torch.from_numpy(xte.reshape(-1, 1, 8, 8))).argmax(1).numpy() == yte)
    path = os.path.join(d, "digits_cnn_f32.onnx")
    t0 = time.perf_counter()
    r = subprocess.run([args.bin, path, data_dir, "--epochs", str(epochs)],
                       check=True, capture_output=True, text=True)
    varq_rate = epochs * nb / (time.perf_counter() - t0)
    print(r.stdout, end="")
    m = re.findall(r"held-out accuracy ([0-9.]+)%", r.stdout)
    varq_acc = float(m[-1]) / 100 if m else 0.0
    ok = ok and varq_acc >= args.min_accuracy
    print(f"varq held-out accuracy after {epochs} epochs: {100 * varq_acc:.2f}% "
          f"(at least {100 * args.min_accuracy:.0f}% required)")
    if not args.check:
        print(f"PyTorch held-out accuracy {100 * acc.mean():.2f}%; steps/s: varq {varq_rate:.0f} "
              f"(whole run, evaluation included), PyTorch {torch_rate:.0f}: "
              f"varq / PyTorch = {varq_rate / torch_rate:.2f}")
    print("ok" if ok else "FAILED")
    sys.exit(0 if ok else 1)


def losses(args, d, data_dir, xtr, ytr, dtype, steps=None):
    """Exports the model (seed 0) in dtype, trains it `steps` steps in
    PyTorch and in varq; returns both loss arrays."""
    steps = steps or args.steps
    torch.manual_seed(0)
    model = DigitsCNN().to(dtype)
    tag = "f64" if dtype == torch.float64 else "f32"
    path = os.path.join(d, f"digits_cnn_{tag}.onnx")
    # PRESERVE and no constant folding keep the BatchNormalization nodes
    # (in inference form): by default the exporter folds them into the
    # convolutions, which computes the same but trains differently.
    torch.onnx.export(model.eval(), torch.zeros(1, 1, 8, 8, dtype=dtype), path,
                      opset_version=13, input_names=["x"], output_names=["logits"],
                      dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}},
                      training=torch.onnx.TrainingMode.PRESERVE, do_constant_folding=False)
    want, _ = train_torch(model, xtr, ytr, steps, dtype)
    lp = os.path.join(d, f"varq_losses_{tag}.npy")
    cmd = [args.bin, path, data_dir, "--steps", str(steps), "--losses", lp]
    subprocess.run(cmd + (["--f64"] if tag == "f64" else []), check=True, capture_output=True)
    return want, np.load(lp)


main()
