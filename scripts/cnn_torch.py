#!/usr/bin/python3
"""The digits CNN of examples/onnx_cnn_digits.c, defined and trained in
PyTorch: exports it (random weights, fixed seed) as ONNX, trains it in
PyTorch for --steps steps with the example's protocol (batches of 32 in the
training set's order, the last partial one dropped; Adam, learning rate
0.003; batch normalization in inference form, its running statistics
frozen, as the exported model computes it), runs the varq example on the
same model and data, and compares the losses step by step (relative
difference at most 1e-4). Without --check it also trains both to the end
(--epochs) and prints each one's steps per second and varq's accuracy.

usage: cnn_torch.py --bin BUILD/examples/onnx_cnn_digits [--data DIR]
                    [--steps 50] [--epochs 30] [--check] [--keep DIR]
--data: the .npy files of scripts/digits_to_npy.py (written there when
missing). Exit 1 on a loss mismatch, 77 (skipped) without torch or sklearn.
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
    from torch import nn
except ImportError as exc:
    print(f"cnn_torch.py: skipped: {exc}")
    sys.exit(77)

BATCH = 32


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


def train_torch(model, xtr, ytr, steps):
    model.eval()  # BN with its running statistics, as exported
    opt = torch.optim.Adam(model.parameters(), lr=0.003)
    nb = len(ytr) // BATCH
    x = torch.from_numpy(xtr.reshape(-1, 1, 8, 8))
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
    args = ap.parse_args()
    torch.set_num_threads(2)
    tmp = tempfile.TemporaryDirectory()
    d = args.keep or tmp.name
    os.makedirs(d, exist_ok=True)
    xtr, ytr, xte, yte = data(args.data or os.path.join(d, "digits"))
    data_dir = args.data or os.path.join(d, "digits")
    torch.manual_seed(0)
    model = DigitsCNN()
    path = os.path.join(d, "digits_cnn.onnx")
    # PRESERVE and no constant folding keep the BatchNormalization nodes
    # (in inference form): by default the exporter folds them into the
    # convolutions, which computes the same but trains differently.
    torch.onnx.export(model.eval(), torch.zeros(1, 1, 8, 8), path, opset_version=13,
                      input_names=["x"], output_names=["logits"],
                      dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}},
                      training=torch.onnx.TrainingMode.PRESERVE, do_constant_folding=False)
    want, _ = train_torch(model, xtr, ytr, args.steps)
    lp = os.path.join(d, "varq_losses.npy")
    subprocess.run([args.bin, path, data_dir, "--steps", str(args.steps), "--losses", lp],
                   check=True, capture_output=True)
    got = np.load(lp)
    rel = np.abs(got - want) / np.maximum(np.abs(want), 1e-12)
    worst = int(np.argmax(rel))
    print(f"losses of the first {args.steps} steps, varq against PyTorch: largest relative "
          f"difference {rel[worst]:.3g} (step {worst}: {got[worst]:.9g} vs {want[worst]:.9g})")
    ok = bool(rel.max() <= 1e-4)
    if not args.check:
        torch.manual_seed(0)
        model = DigitsCNN()
        nb = len(ytr) // BATCH
        _, torch_rate = train_torch(model, xtr, ytr, args.epochs * nb)
        with torch.no_grad():
            acc = (model(torch.from_numpy(xte.reshape(-1, 1, 8, 8))).argmax(1).numpy() == yte)
        t0 = time.perf_counter()
        r = subprocess.run([args.bin, path, data_dir, "--epochs", str(args.epochs)],
                           check=True, capture_output=True, text=True)
        varq_rate = args.epochs * nb / (time.perf_counter() - t0)
        print(r.stdout, end="")
        print(f"PyTorch held-out accuracy {100 * acc.mean():.2f}%; steps/s: varq {varq_rate:.0f} "
              f"(whole run, evaluation included), PyTorch {torch_rate:.0f}: "
              f"varq / PyTorch = {varq_rate / torch_rate:.2f}")
    print("ok" if ok else "FAILED: losses differ by more than 1e-4")
    sys.exit(0 if ok else 1)


main()
