#!/usr/bin/python3
"""Writes scikit-learn's digits data set (1,797 8x8 images, shipped inside
Debian's python3-sklearn) as .npy files for examples/mlp_digits.c:
train_x.npy / test_x.npy (float32 [n, 64], pixels scaled to [0, 1]) and
train_y.npy / test_y.npy (int64 [n]), with a fixed, stratified 20% held-out
split. Usage: digits_to_npy.py OUTDIR"""
import os
import sys

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "build/digits"
    os.makedirs(out, exist_ok=True)
    d = load_digits()
    x = (d.data / 16.0).astype(np.float32)
    y = d.target.astype(np.int64)
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=0.2, random_state=0, stratify=y)
    for name, a in (("train_x", xtr), ("train_y", ytr), ("test_x", xte), ("test_y", yte)):
        np.save(os.path.join(out, name + ".npy"), np.ascontiguousarray(a))
    print(f"digits: {len(xtr)} train and {len(xte)} test images in {out}")


if __name__ == "__main__":
    main()
