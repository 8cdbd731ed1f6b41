#!/usr/bin/python3
"""Trains a 64 -> 128 -> 10 MLP (ReLU, softmax cross-entropy, Adam) on
scikit-learn's digits through varq's graph layer from Python, as
examples/mlp_digits.c does from C: the same programs, seeds, shuffle and
batches, so each epoch's loss and accuracy are the C example's.

    /usr/bin/python3 examples/python/digits_mlp.py [DATA_DIR] [--epochs N]

DATA_DIR holds train_x/train_y/test_x/test_y .npy files written by
scripts/digits_to_npy.py (default build/digits; made here with
scikit-learn when missing). Exit status 0 when the final held-out accuracy
is at least 95%.
"""
import os
import sys
import time

import numpy as np

import varq

BATCH = 64


def load(data_dir):
    """The four arrays, written first by scripts/digits_to_npy.py's split
    when data_dir lacks them."""
    names = ("train_x", "train_y", "test_x", "test_y")
    if not all(os.path.exists(os.path.join(data_dir, n + ".npy")) for n in names):
        import runpy
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                              "scripts", "digits_to_npy.py")
        argv, sys.argv = sys.argv, [script, data_dir]
        try:
            runpy.run_path(script, run_name="__main__")
        finally:
            sys.argv = argv
    return [np.load(os.path.join(data_dir, n + ".npy")) for n in names]


def build():
    """The startup and main programs of mlp_digits.c's build()."""
    startup, main = varq.Program(), varq.Program()
    main.add_var("x", "float32", [None, 64])
    main.add_var("y", "int64", [None])
    varq.layers.linear(main, startup, "x", "h1", 128, seed=1)
    varq.layers.activation(main, "relu", "h1", "a1")
    varq.layers.linear(main, startup, "a1", "logits", 10, seed=3)
    varq.layers.softmax_cross_entropy(main, "logits", "y", "probs", "loss")
    return startup, main


def shuffled(order, rng):
    """mlp_digits.c's seeded shuffle (a 32-bit LCG), in place; the new rng."""
    for i in range(len(order) - 1, 0, -1):
        rng = (rng * 1103515245 + 12345) & 0xFFFFFFFF
        j = (rng >> 8) % (i + 1)
        order[i], order[j] = order[j], order[i]
    return rng


def train(data_dir="build/digits", epochs=20, report=print, workers=None):
    """Trains for epochs; returns [(mean loss, held-out accuracy)] per
    epoch."""
    train_x, train_y, test_x, test_y = load(data_dir)
    startup, main = build()
    evaluate = main.clone()  # forward only, for the accuracy
    varq.Adam(learning_rate=0.005).minimize(main, startup, "loss")
    ex = varq.Executor(workers=workers)
    scope = varq.Scope()
    ex.run(startup, scope=scope)
    n = len(train_x)
    order = list(range(n))
    rng = 12345
    history, steps_s, steps = [], 0.0, 0
    for epoch in range(1, epochs + 1):
        rng = shuffled(order, rng)
        losses = []
        for b in range(0, n, BATCH):
            idx = order[b:b + BATCH]
            feed = {"x": train_x[idx], "y": train_y[idx]}  # fancy indexing: fresh C arrays
            t0 = time.perf_counter()
            (loss,) = ex.run(main, feed, ["loss"], scope)
            steps_s += time.perf_counter() - t0
            steps += 1
            losses.append(float(loss))
        (probs,) = ex.run(evaluate, {"x": test_x, "y": test_y}, ["probs"], scope)
        acc = float(np.mean(probs.argmax(1) == test_y))
        mean = sum(losses) / len(losses)
        history.append((mean, acc))
        report(f"epoch {epoch:2d}  loss {mean:.4f}  held-out accuracy {100 * acc:.2f}%")
    report(f"final held-out accuracy: {100 * acc:.2f}% "
           f"({'at least' if acc >= 0.95 else 'BELOW'} 95%); "
           f"{1e6 * steps_s / steps:.0f} us per training step")
    return history


def main(argv):
    data_dir, epochs = "build/digits", 20
    args = list(argv)
    while args:
        a = args.pop(0)
        if a == "--epochs" and args:
            epochs = int(args.pop(0))
        elif not a.startswith("-"):
            data_dir = a
        else:
            print(__doc__, file=sys.stderr)
            return 2
    history = train(data_dir, epochs)
    return 0 if history[-1][1] >= 0.95 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
