#!/usr/bin/python3
"""PyTorch eager's side of bench/rnn_ops_bench.c: a 2-layer nn.LSTM and
nn.GRU, f32, forward alone (under no_grad) and forward plus backward of
(Y * dY).sum(), with torch.set_num_threads(2) (--threads), at the same
sizes. Prints the median (min) milliseconds of the calls.

Usage: bench/rnn_ops_torch.py [--threads N] [--reps R]
"""
import argparse
import statistics
import time

import torch

ap = argparse.ArgumentParser()
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--reps", type=int, default=20)
a = ap.parse_args()
torch.set_num_threads(a.threads)
for (I, H, T, B) in [(32, 64, 20, 4), (32, 256, 200, 32)]:
    reps = a.reps if T == 20 else (a.reps + 3) // 4
    for kind in ("lstm", "gru"):
        m = (torch.nn.LSTM if kind == "lstm" else torch.nn.GRU)(I, H, num_layers=2)
        x = torch.randn(T, B, I)
        for train in (False, True):
            ts, cs = [], []
            for r in range(reps + 2):
                t0, c0 = time.perf_counter(), time.process_time()
                if train:
                    y = m(x)[0]
                    y.backward(y.detach())
                else:
                    with torch.no_grad():
                        m(x)
                if r >= 2:
                    ts.append(time.perf_counter() - t0)
                    cs.append(time.process_time() - c0)
            print("%-4s %-8s I=%d H=%d T=%d B=%d L=2: %.3f ms (min %.3f), cpu %.3f ms" %
                  (kind, "fwd+bwd" if train else "forward", I, H, T, B,
                   statistics.median(ts) * 1e3, min(ts) * 1e3, statistics.median(cs) * 1e3))
