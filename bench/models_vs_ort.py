#!/usr/bin/python3
"""varq against ONNX Runtime and PyTorch eager on whole models: inference
time per run, peak RSS, and whether varq's outputs match PyTorch's.

usage: models_vs_ort.py [--varq BUILD/tools/varq] [--models a,b,...]
                        [--batch8] [--quick] [--rounds K] [--seconds S]
                        [--cache DIR] [--out TABLE.md] [--profile-worst N]

Each model is exported from PyTorch with torch.onnx.export (opset 17, the
TorchScript exporter, fixed shapes) into the cache folder (default
${XDG_CACHE_HOME:-~/.cache}/varq-peers/models), with one input array
saved beside it. Models: the torchvision CNNs efficientnet_b0,
mobilenet_v3_small, mnasnet1_0, resnet18, resnet50, squeezenet1_1,
googlenet and alexnet (weights=None, a fixed seed, and batch-norm running
statistics calibrated by a few forward passes in train mode on random
data, so that activations keep a realistic scale through the depth; input
[B, 3, 224, 224]); transformer (nn.TransformerEncoder, 2 layers, d 128, 4
heads, ff 512, input [B, 32, 128]); gpt (a tiny decoder-only model, 2
blocks, d 128, 4 heads, causal mask, vocabulary 256, tokens [B, 32]);
lstm and gru (nn.LSTM / nn.GRU, 2 layers, input 32, hidden 64, input
[20, 4, 32]: seq 20, batch 4); and recurrent models named
CELL-bB-tT-hH[-bi] (lstm-b32-t200-h256-bi: nn.LSTM, 2 layers, input 32,
hidden H, bidirectional with -bi, input [T, B, 32]); --rnn-table runs the
grid of batch 1 and 32, seq 20 and 200, hidden 64 and 256, both cells,
one and two directions (32 models) instead of --models. Batch 1 for all but the RNNs (4); --batch8
adds batch 8 for the CNNs, --batches 8 runs only that (--batches takes a
list: 1,8).

ORT runs with session.intra_op.allow_spinning 0 (--ort-spin 1: ORT's
default): its idle intra-op threads sleep, as PyTorch's do under
OMP_WAIT_POLICY=PASSIVE and varq's after a short spin. On a shared 2-core
machine ORT's spinning threads take the cores its own workers wait for,
which slows ORT down more than the wake-ups cost.

Peers, 2 threads each, on the same input:
  varq     bench/onnx_time (build/bench/onnx_time, --onnx-time): the
            public API as `varq run MODEL.onnx --workers 2` uses it, every
            run timed; without it `varq run --repeat R` and its mean
  ORT      bench/ort_peer.mjs, onnxruntime-node from scripts/ort_fetch.sh
            (intraOpNumThreads 2, interOpNumThreads 1, optimization 'all')
  PyTorch  eager, in this process, torch.set_num_threads(2),
            OMP_WAIT_POLICY=PASSIVE, torch.no_grad()
One sample of a peer is the median time of R runs after W warm-up runs
(the mean when onnx_time is not built, for all three alike: the CLI
prints only that); R is sized to about --seconds of the slowest peer. A
model gets K rounds, each running the three peers one after the other in
an order that rotates by round, so that a slow phase of a shared machine
falls on all three. The table shows each peer's median sample and, after
"±", half the range of its samples relative to that median; ORT/varq is
the ratio of the medians (above 1: varq is faster). Peak RSS is the
process's high-water mark (/usr/bin/time's %M, else its VmHWM) for varq
and for node, the largest over the rounds: node's includes node itself
(its resident set before ORT loads, which the header gives). Before timing, varq's output (--fetch output=FILE) is compared
with PyTorch's: "max |varq - torch| / max |torch|" (ORT's too, in the
log). A model varq fails to import or run gets its error in the table and
the others go on.

--profile-worst N profiles the N models with the lowest ORT/varq ratio
in both, with their own profilers (`varq run --profile`, ORT's
enableProfiling through ort_peer.mjs --profile), over 6 runs of which the
first is left out, and prints the top ops by time of each (under the
table in --out too).
--quick: 3 rounds of about 0.5 s per peer (default 5 rounds of 2 s).
Exit 0 when the table was made (whatever varq's results), 1 when a peer
other than varq cannot run at all, 77 (skipped) without torch.
"""
import argparse
import datetime
import glob
import inspect
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time

# Before torch starts its OpenMP pool: idle threads sleep instead of
# spinning, as the other peers' idle workers do on a shared 2-core machine.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

try:
    import numpy as np
    import torch
    import torchvision
except ImportError as exc:
    print(f"models_vs_ort.py: skipped: {exc}")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CNNS = ["efficientnet_b0", "mobilenet_v3_small", "mnasnet1_0", "resnet18", "resnet50",
        "squeezenet1_1", "googlenet", "alexnet"]
OTHERS = ["transformer", "gpt", "lstm", "gru"]
THREADS = 2
HAVE_TIME = os.access("/usr/bin/time", os.X_OK)


class TinyGPT(torch.nn.Module):
    """A decoder-only transformer written out (no fused attention module),
    so that the export is plain MatMul / Softmax / LayerNorm / Gelu."""

    def __init__(self, vocab=256, d=128, heads=4, layers=2, seq=32):
        super().__init__()
        self.heads = heads
        self.tok = torch.nn.Embedding(vocab, d)
        self.pos = torch.nn.Parameter(torch.randn(seq, d) * 0.02)
        self.blocks = torch.nn.ModuleList()
        for _ in range(layers):
            self.blocks.append(torch.nn.ModuleDict({
                "ln1": torch.nn.LayerNorm(d), "qkv": torch.nn.Linear(d, 3 * d),
                "proj": torch.nn.Linear(d, d), "ln2": torch.nn.LayerNorm(d),
                "fc": torch.nn.Linear(d, 4 * d), "out": torch.nn.Linear(4 * d, d)}))
        self.ln = torch.nn.LayerNorm(d)
        self.head = torch.nn.Linear(d, vocab, bias=False)
        self.register_buffer("mask", torch.triu(torch.full((seq, seq), float("-inf")), 1))

    def forward(self, tokens):
        b, t = tokens.shape
        x = self.tok(tokens) + self.pos[:t]
        d = x.shape[-1]
        hd = d // self.heads
        for blk in self.blocks:
            q, k, v = blk["qkv"](blk["ln1"](x)).split(d, dim=-1)
            q = q.reshape(b, t, self.heads, hd).transpose(1, 2)
            k = k.reshape(b, t, self.heads, hd).transpose(1, 2)
            v = v.reshape(b, t, self.heads, hd).transpose(1, 2)
            att = (q @ k.transpose(-1, -2)) * (hd ** -0.5) + self.mask[:t, :t]
            y = (att.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d)
            x = x + blk["proj"](y)
            x = x + blk["out"](torch.nn.functional.gelu(blk["fc"](blk["ln2"](x))))
        return self.head(self.ln(x))


class RNN(torch.nn.Module):
    """nn.LSTM / nn.GRU returning the top layer's outputs only."""

    def __init__(self, cell, hidden=64, bidirectional=False):
        super().__init__()
        self.rnn = cell(32, hidden, num_layers=2, bidirectional=bidirectional)

    def forward(self, x):
        return self.rnn(x)[0]


def calibrate_bn(model, shape):
    """Batch-norm running statistics from a few train-mode passes on random
    data (cumulative averages), instead of the initial mean 0 / var 1."""
    bns = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if not bns:
        return
    saved = [m.momentum for m in bns]
    for m in bns:
        m.reset_running_stats()
        m.momentum = None
    g = torch.Generator().manual_seed(2)
    model.train()
    with torch.no_grad():
        for _ in range(4):
            model(torch.randn(*shape, generator=g))
    for m, mom in zip(bns, saved):
        m.momentum = mom


RNN_NAME = re.compile(r"^(lstm|gru)-b(\d+)-t(\d+)-h(\d+)(-bi)?$")


def rnn_grid():
    """The recurrent configurations of the inference table (--rnn-table)."""
    return [f"{c}-b{b}-t{t}-h{h}{bi}" for c in ("lstm", "gru") for bi in ("", "-bi")
            for b in (1, 32) for t in (20, 200) for h in (64, 256)]


def build(name, batch):
    """The model (eval mode) and its input for a given batch."""
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    if name in CNNS:
        kw = {"init_weights": True, "aux_logits": False} if name == "googlenet" else {}
        model = getattr(torchvision.models, name)(weights=None, **kw)
        calibrate_bn(model, (8, 3, 224, 224))
        x = torch.randn(batch, 3, 224, 224, generator=g)
    elif name == "transformer":
        layer = torch.nn.TransformerEncoderLayer(128, 4, 512, dropout=0.1, batch_first=True)
        model = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        x = torch.randn(batch, 32, 128, generator=g)
    elif name == "gpt":
        model = TinyGPT()
        x = torch.randint(0, 256, (batch, 32), generator=g)
    elif name in ("lstm", "gru"):
        model = RNN(torch.nn.LSTM if name == "lstm" else torch.nn.GRU)
        x = torch.randn(20, 4, 32, generator=g)
    elif RNN_NAME.match(name):
        cell, b, t, h, bi = RNN_NAME.match(name).groups()
        model = RNN(torch.nn.LSTM if cell == "lstm" else torch.nn.GRU, int(h), bool(bi))
        x = torch.randn(int(t), int(b), 32, generator=g)
    else:
        raise SystemExit(f"models_vs_ort.py: unknown model {name}")
    return model.eval(), x


def export(name, batch, cache):
    """Writes NAME_bB.onnx, its input and PyTorch's output into the cache
    (once; a later run reuses them) and returns the model, input and paths."""
    model, x = build(name, batch)
    base = os.path.join(cache, name if RNN_NAME.match(name) else
                        f"{name}_b{4 if name in ('lstm', 'gru') else batch}")
    onnx_path, xp, yp = base + ".onnx", base + "_x.npy", base + "_y.npy"
    with torch.no_grad():
        y = model(x)
    if not (os.path.exists(onnx_path) and os.path.exists(xp) and os.path.exists(yp)):
        extra = {}
        # PyTorch 2.9 and later export through torch.export by default, to
        # opset 18 whatever opset_version asks for; dynamo=False keeps the
        # TorchScript exporter and the requested opset.
        if "dynamo" in inspect.signature(torch.onnx.export).parameters:
            extra["dynamo"] = False
        # Not under no_grad: with grad enabled and parameters that require
        # it, nn.TransformerEncoderLayer leaves its fused fast path
        # (_transformer_encoder_layer_fwd, which has no ONNX export) for the
        # plain ops. PyTorch's own timing below keeps the fast path.
        torch.onnx.export(model, x, onnx_path + ".tmp", opset_version=17,
                          input_names=["input"], output_names=["output"], **extra)
        os.replace(onnx_path + ".tmp", onnx_path)
        np.save(xp, x.numpy())
        np.save(yp, y.numpy())
    return model, x, onnx_path, xp, yp


def run_child(cmd):
    """Runs cmd; returns (returncode, stdout, stderr, its peak RSS in KiB or
    None). The peak comes from /usr/bin/time (its child's ru_maxrss): this
    process's own wait4 would not do, as Linux keeps the high-water mark of
    the memory a child had before exec, which here is this process with
    torch loaded."""
    with tempfile.NamedTemporaryFile("w+") as rss:
        pre = ["/usr/bin/time", "-o", rss.name, "-f", "%M"] if HAVE_TIME else []
        r = subprocess.run(pre + cmd, capture_output=True, text=True)
        peak = rss.read().strip().splitlines()
        try:
            peak = int(peak[-1])
        except (IndexError, ValueError):
            peak = None
        return r.returncode, r.stdout, r.stderr, peak


def varq_run(args, onnx_path, xp, warmup, repeat, fetch=None, profile=None):
    """varq's time per run in ms (the median of the R runs with onnx_time,
    their mean with the CLI) and its peak RSS."""
    out_arg = f"output={fetch}" if fetch else "output"
    if args.onnx_time and not profile:
        cmd = [args.onnx_time, onnx_path, "--feed", f"input={xp}", "--fetch", out_arg,
               "--workers", str(THREADS), "--warmup", str(warmup), "--repeat", str(repeat)]
    else:
        cmd = [args.varq, "run", onnx_path, "--feed", f"input={xp}", "--fetch", out_arg,
               "--workers", str(THREADS), "--warmup", str(warmup), "--repeat", str(repeat)]
        if profile:
            cmd += ["--profile", profile]
    rc, out, err, rss = run_child(cmd)
    if rc != 0:
        lines = [l for l in err.strip().splitlines() if l.startswith(("varq:", "onnx_time:"))]
        raise RuntimeError(lines[-1] if lines else err.strip()[-300:] or f"exit {rc}")
    line = next((l for l in out.splitlines() if l.startswith("varq_peer ")), None)
    if line:
        kv = dict(f.split("=", 1) for f in line.split()[1:])
        return float(kv["median_ms"]), float(kv["min_ms"]), rss or int(kv["peak_rss_kb"])
    mean = float(err.split("mean ")[1].split(" ms")[0])
    return mean, mean, rss


def ort_run(args, onnx_path, xp, warmup, repeat, fetch=None, profile=None):
    cmd = ["node", os.path.join(HERE, "ort_peer.mjs"), "--module", args.ort_module,
           "--model", onnx_path, "--feed", f"input={xp}", "--threads", str(THREADS),
           "--inter", "1", "--warmup", str(warmup), "--repeat", str(repeat)]
    if fetch:
        cmd += ["--fetch", f"output={fetch}"]
    cmd += ["--spin", str(args.ort_spin)]
    if profile:
        cmd += ["--profile", profile]
    rc, out, err, rss = run_child(cmd)
    line = next((l for l in out.splitlines() if l.startswith("ort_peer ")), None)
    if rc != 0 or line is None:
        raise RuntimeError(f"ort_peer failed: {err.strip()[-400:]}")
    kv = dict(f.split("=", 1) for f in line.split()[1:])
    # node's own VmHWM where /usr/bin/time is missing
    stat = "median_ms" if args.onnx_time else "mean_ms"
    res = (float(kv[stat]), float(kv["min_ms"]), rss or int(kv["peak_rss_kb"]),
           int(kv["base_rss_kb"]))
    return res + (kv.get("profile"),) if profile else res


def torch_run(args, model, x, warmup, repeat):
    with torch.no_grad():
        for _ in range(warmup):
            model(x)
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            model(x)
            times.append((time.perf_counter() - t0) * 1e3)
    return (median(times) if args.onnx_time else sum(times) / len(times)), min(times)


def rel_diff(got, want):
    if got.shape != want.shape:
        return f"shape {got.shape} vs {want.shape}"
    scale = float(np.max(np.abs(want)))
    diff = float(np.max(np.abs(got.astype(np.float64) - want)))
    return diff / scale if scale else diff


def median(v):
    s = sorted(v)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def cell(samples):
    if not samples:
        return "-"
    m = median(samples)
    spread = 50 * (max(samples) - min(samples)) / m if m else 0
    return f"{m:.2f} ±{spread:.0f}%"


def bench_model(args, name, batch):
    """One row of the table."""
    row = {"model": name, "batch": batch if name not in ("lstm", "gru") else 4}
    if RNN_NAME.match(name):
        row["batch"] = int(RNN_NAME.match(name).group(2))
    model, x, onnx_path, xp, yp = export(name, batch, args.cache)
    want = np.load(yp)
    row["path"], row["xp"] = onnx_path, xp
    outp = onnx_path[:-5]
    # Correctness first, and a first timing that sizes R.
    try:
        est, _, _ = varq_run(args, onnx_path, xp, 1, 2, fetch=outp + "_varq.npy")
        d = rel_diff(np.load(outp + "_varq.npy"), want)
        row["diff"] = d
        varq_ok = True
    except RuntimeError as exc:
        row["error"] = str(exc)
        varq_ok = False
        est = None
    try:
        o_est, _, _, _ = ort_run(args, onnx_path, xp, 1, 2, fetch=outp + "_ort.npy")
        row["ort_diff"] = rel_diff(np.load(outp + "_ort.npy"), want)
        ort_ok = True
    except RuntimeError as exc:
        row["ort_error"] = str(exc)
        row["ort_diff"] = "n/a"
        ort_ok, o_est = False, None
    t_est, _ = torch_run(args, model, x, 1, 2)
    per_run = max(est or 0, o_est or 0, t_est, 0.05)
    repeat = int(min(max(args.seconds * 1e3 / per_run, 3), 500))
    warmup = 3 if not args.quick else 2
    row["repeat"] = repeat
    v, o, t, vr, orss, obase = [], [], [], [], [], []
    best = {"varq": [], "ort": [], "torch": []}
    peers = [p for p, ok in (("varq", varq_ok), ("ort", ort_ok), ("torch", True)) if ok]
    for r in range(args.rounds):
        k = r % len(peers)
        for p in peers[k:] + peers[:k]:
            if p == "varq":
                try:
                    ms, lo, rss = varq_run(args, onnx_path, xp, warmup, repeat)
                except RuntimeError as exc:
                    row["error"] = f"round {r + 1}: {exc}"
                    peers.remove("varq")
                    continue
                v.append(ms)
                vr.append(rss)
                best["varq"].append(lo)
            elif p == "ort":
                ms, lo, rss, base = ort_run(args, onnx_path, xp, warmup, repeat)
                o.append(ms)
                best["ort"].append(lo)
                orss.append(rss)
                obase.append(base)
            else:
                ms, lo = torch_run(args, model, x, warmup, repeat)
                t.append(ms)
                best["torch"].append(lo)
    vr = [m for m in vr if m is not None]
    orss = [m for m in orss if m is not None]
    row.update(varq=v, ort=o, torch=t, varq_rss=max(vr) if vr else None,
               ort_rss=max(orss) if orss else None,
               node_base=median(obase) if obase else None)
    row["ratio"] = median(o) / median(v) if v and o else None
    # the fastest single run of each: what each does when the machine
    # leaves it alone, a second view on a loaded machine
    row["best"] = {k: min(b) if b else None for k, b in best.items()}
    # (not with `varq run`, whose one figure is a mean)
    row["best_ratio"] = (row["best"]["ort"] / row["best"]["varq"]
                         if v and o and args.onnx_time else None)
    return row


def summarize_varq_trace(path):
    """{op: (calls, µs)} over the runs after the first of a `varq run
    --profile` trace (the first prepares the plan and packs weights)."""
    events = json.load(open(path))
    events = events["traceEvents"] if isinstance(events, dict) else events
    done = sorted(e["ts"] + e.get("dur", 0) for e in events if e.get("name") == "run_done")
    first_end = done[0] if done else float("-inf")
    # Ops only: a "segment" span holds the spans of the ops it ran, and
    # "parallel_for" spans are slices of an op's loop run by other workers
    # inside that op's span; counting them too would count time twice.
    by = {}
    for e in events:
        if (e.get("ph") != "X" or e.get("name") in ("segment", "parallel_for", "run_done") or
                e["ts"] < first_end):
            continue
        c, dur = by.get(e["name"], (0, 0.0))
        by[e["name"]] = (c + 1, dur + e.get("dur", 0))
    return by, max(len(done) - 1, 1)


def summarize_ort_trace(path):
    """The same from ONNX Runtime's profile: each node's kernel time by op
    type (ORT's fused ops keep their own names: FusedConv, ...)."""
    events = json.load(open(path))
    runs = sorted(e["ts"] + e.get("dur", 0) for e in events if e.get("name") == "model_run")
    first_end = runs[0] if runs else float("-inf")
    by = {}
    for e in events:
        if e.get("cat") != "Node" or not e.get("name", "").endswith("_kernel_time"):
            continue
        if e["ts"] < first_end:
            continue
        n = e.get("args", {}).get("op_name", "?")
        c, dur = by.get(n, (0, 0.0))
        by[n] = (c + 1, dur + e.get("dur", 0))
    return by, max(len(runs) - 1, 1)


def op_table(by, runs, top):
    total = sum(d for _, d in by.values())
    lines = ["| op | calls per run | ms per run | share |", "|---|---:|---:|---:|"]
    for n, (c, d) in sorted(by.items(), key=lambda kv: -kv[1][1])[:top]:
        lines.append(f"| {n} | {c / runs:.0f} | {d / 1e3 / runs:.3f} | "
                     f"{100 * d / total if total else 0:.1f}% |")
    return total / 1e3 / runs, lines


def profile(args, row, runs=6):
    """varq's and ORT's op times for one model, from their own profilers:
    `runs` runs each, the first left out."""
    base = row["path"][:-5]
    trace = base + "_varq_trace.json"
    varq_run(args, row["path"], row["xp"], 0, runs, profile=trace)
    by, n = summarize_varq_trace(trace)
    total, vl = op_table(by, n, args.profile_top)
    lines = [f"#### {row['model']} batch {row['batch']} (ORT/varq {row['ratio']:.2f})", "",
             f"varq (`varq run --profile`, {n} runs after the first): {total:.2f} ms of op "
             "time per run (summed over workers: ops of a branch may overlap)", ""] + vl
    try:
        for old in glob.glob(base + "_ort_prof_*.json"):
            os.remove(old)
        _, _, _, _, prof = ort_run(args, row["path"], row["xp"], 0, runs,
                                   profile=base + "_ort_prof")
        if prof:
            by, n = summarize_ort_trace(prof)
            total, ol = op_table(by, n, args.profile_top)
            lines += ["", f"ONNX Runtime (enableProfiling, {n} runs after the first): "
                      f"{total:.2f} ms of kernel time per run", ""] + ol
    except RuntimeError as exc:
        lines += ["", f"ONNX Runtime's profile: {exc}"]
    return "\n".join(lines)


def cpu_line():
    model, flags = "?", set()
    try:
        with open("/proc/cpuinfo") as f:
            for l in f:
                if l.startswith("model name") and model == "?":
                    model = l.split(":", 1)[1].strip()
                if l.startswith("flags"):
                    flags = set(l.split(":", 1)[1].split())
                    break
    except OSError:
        pass
    have = [f for f in ("avx2", "fma", "avx512f", "avx512_vnni", "amx_tile") if f in flags]
    return f"{model}, {os.cpu_count()} cores visible, flags {' '.join(have) or 'none of avx2/avx512f'}"


def fmt_diff(d):
    """A difference as the table shows it: flagged past 1e-4 of the
    output's scale, the tolerance of scripts/torchvision_check.py."""
    return d if isinstance(d, str) else f"{d:.1e}" + (" (over 1e-4)" if d > 1e-4 else "")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--varq", default=os.path.join(ROOT, "build", "tools", "varq"))
    ap.add_argument("--onnx-time", default=os.path.join(ROOT, "build", "bench", "onnx_time"),
                    help="varq's per-run timer (bench/onnx_time.c); without it, `varq run`'s mean")
    ap.add_argument("--models", default=",".join(CNNS + OTHERS))
    ap.add_argument("--batch8", action="store_true", help="also batch 8 for the CNNs")
    ap.add_argument("--batches", default="1",
                    help="batches to run (the CNNs take any; the others only 1)")
    ap.add_argument("--ort-spin", type=int, choices=(0, 1), default=0,
                    help="ORT's session.intra_op.allow_spinning (default 0; ORT's own is 1)")
    ap.add_argument("--quick", action="store_true", help="3 rounds of ~0.5 s per peer")
    ap.add_argument("--rnn-table", action="store_true",
                    help="the recurrent grid instead of --models (see rnn_grid)")
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--seconds", type=float, help="about this long per peer per round")
    ap.add_argument("--cache", default=os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "varq-peers",
        "models"))
    ap.add_argument("--out")
    ap.add_argument("--profile-worst", type=int, default=0)
    ap.add_argument("--profile-top", type=int, default=10)
    args = ap.parse_args()
    args.rounds = args.rounds or (3 if args.quick else 5)
    args.seconds = args.seconds or (0.5 if args.quick else 2.0)
    os.makedirs(args.cache, exist_ok=True)

    r = subprocess.run([os.path.join(ROOT, "scripts", "ort_fetch.sh"), "--quiet"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        print(f"models_vs_ort.py: scripts/ort_fetch.sh failed: {r.stderr.strip()}")
        return 1
    paths = dict(l.split("=", 1) for l in r.stdout.split() if "=" in l)
    args.ort_module = paths["ort_node_module"]
    if not os.access(args.varq, os.X_OK):
        print(f"models_vs_ort.py: no varq CLI at {args.varq} (build it: ninja -C build tools/varq)")
        return 1
    if not os.access(args.onnx_time, os.X_OK):
        print(f"models_vs_ort.py: no {args.onnx_time}: timing with `varq run`'s mean per round")
        args.onnx_time = None
    torch.set_num_threads(THREADS)

    batches = [int(b) for b in args.batches.split(",")]
    if args.batch8 and 8 not in batches:
        batches.append(8)
    names = rnn_grid() if args.rnn_table else args.models.split(",")
    todo = [(n, b) for b in batches for n in names if b == 1 or n in CNNS]
    rows = []
    for name, batch in todo:
        t0 = time.perf_counter()
        try:
            row = bench_model(args, name, batch)
        except Exception as exc:  # an export that fails: the next model
            print(f"{name} b{batch}: not measured: {type(exc).__name__}: {exc}", flush=True)
            continue
        rows.append(row)
        ms = lambda v: " ".join(f"{x:.3f}" for x in v)
        print(f"{name} b{row['batch']}: varq [{ms(row['varq'])}] ORT [{ms(row['ort'])}] "
              f"torch [{ms(row['torch'])}] best varq/ORT/torch "
              f"{' '.join(f'{x:.3f}' if x else '-' for x in row['best'].values())} "
              f"R={row['repeat']} diff varq {fmt_diff(row.get('diff', 'n/a'))} ORT "
              f"{fmt_diff(row['ort_diff'])} {row.get('error', '')} "
              f"({time.perf_counter() - t0:.0f} s)", flush=True)

    lines = [f"Machine: {cpu_line()}; {platform.system()} {platform.release()}; "
             f"{datetime.date.today().isoformat()}.",
             f"varq {args.onnx_time or args.varq} (--workers {THREADS}); ONNX Runtime "
             f"{os.path.basename(os.path.dirname(os.path.dirname(args.ort_module)))} (node "
             f"binding, {THREADS} intra-op threads"
             f", allow_spinning {args.ort_spin}); PyTorch {torch.__version__} eager "
             f"({THREADS} threads). {args.rounds} alternated rounds per model, each sample "
             f"the {'median' if args.onnx_time else 'mean'} of R runs (~{args.seconds:g} s) "
             f"after warm-up; ms is the median "
             f"sample, ± half the range relative to it. ORT/varq above 1: varq faster. "
             f"Peak RSS in MB (the process's high-water mark; node alone is "
             f"~{median([r['node_base'] for r in rows if r['node_base']] or [0]) / 1024:.0f} "
             f"MB of ORT's). best: the ratio of the two fastest single runs (each peer "
             f"alone on the machine, as near as it came). diff: max "
             f"|varq - torch| / max |torch|.",
             "",
             "| model | batch | varq ms | ORT ms | PyTorch ms | ORT/varq | ORT/varq best | "
             "varq peak RSS | ORT peak RSS | diff |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row in rows:
        mb = lambda kb: f"{kb / 1024:.0f}" if kb else "?"
        ratio = f"{row['ratio']:.2f}" if row["ratio"] else "-"
        best = f"{row['best_ratio']:.2f}" if row["best_ratio"] else "-"
        v = cell(row["varq"]) if row["varq"] else "failed"
        o = cell(row["ort"]) if row["ort"] else "failed"
        diff = fmt_diff(row["diff"]) if "diff" in row else "-"
        lines.append(f"| {row['model']} | {row['batch']} | {v} | {o} | {cell(row['torch'])} | "
                     f"{ratio} | {best} | {mb(row['varq_rss']) if row['varq'] else '-'} | "
                     f"{mb(row['ort_rss']) if row['ort'] else '-'} | {diff} |")
    errors = [r for r in rows if r.get("error")]
    if errors:
        lines.append("")
        for r in errors:
            lines.append(f"- {r['model']} batch {r['batch']}: varq: {r['error']}")
    for r in (r for r in rows if r.get("ort_error")):
        lines.append(f"- {r['model']} batch {r['batch']}: ONNX Runtime: {r['ort_error']}")
    if args.profile_worst:
        lines.append("")
        worst = sorted((r for r in rows if r["ratio"]), key=lambda r: r["ratio"])
        for r in worst[:args.profile_worst]:
            lines += [profile(args, r), ""]
    table = "\n".join(lines)
    print()
    print(table)
    if args.out:
        with open(args.out, "w") as f:
            f.write(table + "\n")
    return 0


sys.exit(main())
