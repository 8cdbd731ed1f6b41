#!/usr/bin/python3
"""Exports models with dynamic dims (batch, sequence) through
torch.onnx.export (opset 17, dynamic_axes), imports each into varq ONCE
(`varq import MODEL.onnx -o prog.pb --save-scope DIR`) and runs that one
saved program at three sizes (`varq run prog.pb --scope DIR --feed ...
--fetch ...`), comparing each output with PyTorch eager on the same input:
the largest |varq - torch| must be within 1e-4 of the largest |torch| (f32),
and for classifiers the top class of every row must agree. One line per
model and size.

Models (random weights from a fixed seed, weights=None):
  encoder     nn.TransformerEncoder, 2 layers, d 32, 4 heads; dynamic
              sequence and batch
  gpt         a GPT-style decoder (token ids in, learned positions from
              arange of the sequence length, causal mask from torch.triu of
              the sequence length, GELU, 2 layers, d 64); dynamic batch and
              sequence
  shufflenet  torchvision shufflenet_v2_x0_5, 64x64 images (--side),
              batch 1, 3, 8
  resnet50    torchvision resnet50, 64x64 images (--side), batch 1, 3, 8
  vit         torchvision vit_b_16, 224x224, batch 1, 2, 3 (--big)
  swin        torchvision swin_t, 224x224, batch 1, 2, 3 (--big)
The classifiers' last Linear has its bias zeroed (random weights can leave
a deep net's features so small that the bias is nearly all of the output,
the same for every input) and ViT's head, which torchvision zeroes, is
drawn at random: each output is then the input's doing.
And the greedy decoding check (--decode N, default 32 new tokens): the
imported GPT program re-run on the growing sequence (one `varq run` per
step) must choose the same tokens as PyTorch's greedy decoding; it prints
tokens/s of both (varq's per-step time includes starting the process and
loading the program, so `varq run --repeat` on the final length is printed
too; PyTorch eager with 2 threads), and ONNX Runtime's (bench/ort_peer.mjs
--decode: onnxruntime-node from scripts/ort_fetch.sh, 2 intra-op threads,
in one process like PyTorch; left out with a message when node or the
package is missing; --ort-module DIR names the package) and varq's in one
process too (its Python binding, varq.InferenceSession, 2 workers).

usage: dynamic_models_check.py --varq BUILD/tools/varq [--models a,b,...]
                               [--big] [--decode N] [--side S] [--dir DIR]
--models picks from the list above (default: encoder, gpt, shufflenet,
resnet50, and vit, swin with --big); --decode 0 leaves out decoding.
DIR keeps the .onnx files, programs, scopes and arrays (default: a
temporary directory). Exit 0 when everything matches, 1 otherwise, 77
(skipped) without torch or torchvision.
"""
import argparse
import inspect
import math
import os
import subprocess
import sys
import tempfile
import time
import warnings

try:
    import numpy as np
    import torch
    import torch.nn as nn
    import torchvision
except ImportError as exc:
    print(f"dynamic_models_check.py: skipped: {exc}")
    sys.exit(77)

OPSET = 17
TOL = 1e-4


class GPT(nn.Module):
    """A small GPT-style decoder: what matters here is that the position
    ids (arange) and the causal mask (triu) are computed from the input's
    sequence length, so the exported graph computes them from Shape."""

    def __init__(self, vocab=97, d=64, heads=4, layers=2, max_len=128):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(max_len, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, ids):
        seq = ids.shape[1]
        pos = torch.arange(seq, device=ids.device)
        x = self.tok(ids) + self.pos(pos)[None]
        mask = torch.triu(torch.full((seq, seq), float("-inf")), diagonal=1)
        for b in self.blocks:
            x = b(x, mask)
        return self.head(self.norm(x))


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.out = nn.Linear(4 * d, d)

    def forward(self, x, mask):
        b, s, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        h = self.heads
        q = q.reshape(b, s, h, d // h).transpose(1, 2)
        k = k.reshape(b, s, h, d // h).transpose(1, 2)
        v = v.reshape(b, s, h, d // h).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // h) + mask
        y = (att.softmax(-1) @ v).transpose(1, 2).reshape(b, s, d)
        x = x + self.proj(y)
        return x + self.out(nn.functional.gelu(self.fc(self.ln2(x))))


def make_encoder():
    layer = nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, dropout=0.0)
    return nn.TransformerEncoder(layer, num_layers=2)


def rand(shape, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def ids(shape, seed, vocab=97):
    return torch.randint(0, vocab, shape, generator=torch.Generator().manual_seed(seed))


def vit():
    # torchvision zeroes ViT's classifier head (weights=None): every output
    # would be 0, and nothing compared.
    m = torchvision.models.vit_b_16(weights=None)
    nn.init.normal_(m.heads.head.weight, std=0.02)
    return m


def vision(name, side, make=None):
    return dict(build=make or (lambda: getattr(torchvision.models, name)(weights=None)),
                input=lambda b, seed: rand((b, 3, side, side), seed),
                export=1, sizes=[1, 3, 8], axes={0: "batch"}, classifier=True, what="batch")


# Each model: build(), input(size, seed) -> tensor, the size it is exported
# at, the sizes it runs at, the input's dynamic axes (the output's are the
# same), whether its output is a classifier's [batch, classes].
MODELS = {
    "encoder": dict(build=make_encoder, input=lambda s, seed: rand((s[0], s[1], 32), seed),
                    export=(5, 2), sizes=[(1, 1), (7, 3), (20, 5)],
                    axes={0: "seq", 1: "batch"}, classifier=False, what="seq, batch"),
    "gpt": dict(build=GPT, input=lambda s, seed: ids((s[0], s[1]), seed),
                export=(2, 5), sizes=[(1, 3), (2, 7), (4, 20)],
                axes={0: "batch", 1: "seq"}, classifier=False, what="batch, seq"),
    "shufflenet": vision("shufflenet_v2_x0_5", 64),
    "resnet50": vision("resnet50", 64),  # --side changes both
    "vit": dict(vision("vit_b_16", 224, vit), sizes=[1, 2, 3]),
    "swin": dict(vision("swin_t", 224), sizes=[1, 2, 3]),
}
SMALL = ["encoder", "gpt", "shufflenet", "resnet50"]
BIG = ["vit", "swin"]


def build(spec):
    torch.manual_seed(0)
    model = spec["build"]().eval()
    if spec["classifier"]:
        # With random weights a deep net's features can come out tiny
        # (shufflenet's are near 1e-5), leaving the classifier's bias as
        # nearly all of the output, the same for every input: without it
        # the output is all the features' doing.
        last = [m for m in model.modules() if isinstance(m, nn.Linear)][-1]
        nn.init.zeros_(last.bias)
    return model


def export(model, x, path, axes):
    # PyTorch 2.9 and later export through torch.export (dynamo) by default,
    # to opset 18 whatever opset_version asks for; the TorchScript exporter
    # (dynamo=False, the only one before 2.5) gives the requested opset.
    extra = {}
    if "dynamo" in inspect.signature(torch.onnx.export).parameters:
        extra["dynamo"] = False
    # With grad enabled: PyTorch's nn.MultiheadAttention takes its fused
    # inference path (aten::_native_multi_head_attention, which no opset
    # exports) in eval mode when no gradient is needed; the tracer's
    # TracerWarnings say what every traced model says.
    with torch.enable_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, x, path, opset_version=OPSET, input_names=["input"],
                          output_names=["output"],
                          dynamic_axes={"input": axes, "output": axes}, **extra)


def varq(args, *argv):
    return subprocess.run([args.varq, *argv], capture_output=True, text=True)


def import_once(args, d, name, model, x, axes):
    onnx_path = os.path.join(d, f"{name}.onnx")
    prog, scope = os.path.join(d, f"{name}.pb"), os.path.join(d, f"{name}_scope")
    export(model, x, onnx_path, axes)
    r = varq(args, "import", onnx_path, "-o", prog, "--save-scope", scope)
    if r.returncode != 0:
        return None, r.stderr.strip()
    return (prog, scope), None


def run_prog(args, prog, scope, xp, yp, extra=()):
    return varq(args, "run", prog, "--scope", scope, "--feed", f"input={xp}",
                "--fetch", f"output={yp}", "--workers", "2", *extra)


def check_model(args, d, name):
    spec = MODELS[name]
    model = build(spec)
    t0 = time.perf_counter()
    made, err = import_once(args, d, name, model, spec["input"](spec["export"], 1), spec["axes"])
    if not made:
        print(f"{name}: varq import failed: {err}")
        return False
    prog, scope = made
    print(f"{name}: exported at {spec['what']} {spec['export']} and imported once "
          f"({time.perf_counter() - t0:.1f} s)")
    ok = True
    for i, size in enumerate(spec["sizes"]):
        x = spec["input"](size, 10 + i)
        with torch.no_grad():
            want = model(x).numpy()
        xp, yp = os.path.join(d, f"{name}_x{i}.npy"), os.path.join(d, f"{name}_y{i}.npy")
        np.save(xp, x.numpy())
        t0 = time.perf_counter()
        r = run_prog(args, prog, scope, xp, yp)
        secs = time.perf_counter() - t0
        head = f"  {name} {spec['what']} {size}:"
        if r.returncode != 0:
            print(f"{head} varq run failed: {r.stderr.strip()}")
            ok = False
            continue
        got = np.load(yp)
        if got.shape != want.shape:
            print(f"{head} shape {got.shape}, PyTorch's is {want.shape}: FAILED")
            ok = False
            continue
        diff = float(np.max(np.abs(got - want)))
        scale = float(np.max(np.abs(want)))
        rel = diff / scale if scale else diff
        good = rel <= TOL and scale > 0  # all zeros: nothing was compared
        top = ""
        if spec["classifier"]:
            same = bool(np.all(got.argmax(axis=1) == want.argmax(axis=1)))
            good &= same
            top = f", top class {'agrees' if same else 'DIFFERS'}"
        ok &= good
        print(f"{head} max |varq - torch| = {diff:.3g} ({rel:.3g} of max |torch| "
              f"{scale:.3g}){top}, varq run {secs:.2f} s: {'ok' if good else 'FAILED'}")
    return ok


def decode(args, d):
    """Greedy decoding of args.decode tokens with the imported GPT program,
    one `varq run` per step on the whole growing sequence (no cache: the
    point is that one program serves every length)."""
    spec = MODELS["gpt"]
    model = build(spec)
    prompt = ids((1, 4), 99)
    made, err = import_once(args, d, "gpt_decode", model, spec["input"](spec["export"], 1),
                            spec["axes"])
    if not made:
        print(f"decode: varq import failed: {err}")
        return False
    prog, scope = made
    xp, yp = os.path.join(d, "decode_x.npy"), os.path.join(d, "decode_y.npy")

    seq = prompt.numpy()
    t0 = time.perf_counter()
    for step in range(args.decode):
        np.save(xp, seq)
        r = run_prog(args, prog, scope, xp, yp)
        if r.returncode != 0:
            print(f"decode: varq run failed at length {seq.shape[1]}: {r.stderr.strip()}")
            return False
        nxt = np.load(yp)[:, -1].argmax(axis=-1).astype(seq.dtype)
        seq = np.concatenate([seq, nxt[:, None]], axis=1)
    varq_secs = time.perf_counter() - t0

    # The same growing sequence in PyTorch, timed the same way per step,
    # with 2 threads and with 1: on a loaded 2-core machine PyTorch's
    # second thread can cost more than it gives.
    torch_secs = {}
    with torch.no_grad():
        for threads in (2, 1):
            torch.set_num_threads(threads)
            torch_seq = prompt
            model(torch_seq)  # warm-up
            t0 = time.perf_counter()
            for step in range(args.decode):
                nxt = model(torch_seq)[:, -1].argmax(dim=-1)
                torch_seq = torch.cat([torch_seq, nxt[:, None]], dim=1)
            torch_secs[threads] = time.perf_counter() - t0
    torch.set_num_threads(2)
    want = torch_seq.numpy()
    same = np.array_equal(seq, want)

    # The final length through `varq run --repeat`: the model's own time,
    # without the process start and the program load of each step.
    np.save(xp, seq[:, :-1])
    r = run_prog(args, prog, scope, xp, yp, ("--repeat", "20", "--warmup", "3"))
    rep = r.stderr.split("mean ")[1].split(" ms")[0] if "mean " in r.stderr else "?"
    torch_ms = {}
    with torch.no_grad():
        for threads in (2, 1):
            torch.set_num_threads(threads)
            t0 = time.perf_counter()
            for _ in range(20):
                model(torch.from_numpy(seq[:, :-1]))
            torch_ms[threads] = (time.perf_counter() - t0) * 1e3 / 20
    torch.set_num_threads(2)
    n = args.decode
    ort_line = ort_decode(args, d, prompt.numpy(), want)
    inproc_line, inproc_ok = varq_decode_in_process(args, d, prompt.numpy(), want)
    print(f"decode: greedy {n} new tokens after a {prompt.shape[1]}-token prompt: tokens "
          f"{'agree' if same else 'DIFFER'} with PyTorch's")
    if not same:
        first = int(np.argmax(seq[0] != want[0]))
        print(f"  varq  {seq[0].tolist()}\n  torch {want[0].tolist()}\n"
              f"  first difference at position {first}")
    print(f"  varq run per step (process start, program load, run; 2 workers): "
          f"{n / varq_secs:.1f} tokens/s; PyTorch eager: {n / torch_secs[2]:.1f} tokens/s "
          f"with 2 threads, {n / torch_secs[1]:.1f} with 1")
    print(f"  at the final length {seq.shape[1] - 1}: varq run --repeat 20 mean {rep} ms; "
          f"PyTorch eager {torch_ms[2]:.2f} ms (2 threads), {torch_ms[1]:.2f} ms (1) per forward")
    print(f"  {inproc_line}")
    print(f"  {ort_line}")
    return same and inproc_ok


def varq_decode_in_process(args, d, prompt, want):
    """The same greedy decoding through varq's Python binding (the build's
    python/ folder beside tools/), one process like PyTorch and ONNX
    Runtime: varq.InferenceSession with 2 workers, each new length one
    preparation (cached by shape). A line with tokens/s, and whether the
    tokens agree with PyTorch's (True when the binding is not built)."""
    pkg = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(args.varq))), "python")
    sys.path.insert(0, pkg)
    try:
        import varq as vq
    except ImportError as e:
        return f"varq in one process: left out (no Python binding in {pkg}: {e})", True
    finally:
        sys.path.remove(pkg)
    sess = vq.InferenceSession(os.path.join(d, "gpt_decode.onnx"), workers=2)
    seq = prompt
    sess.run(None, {"input": seq})  # warm-up
    t0 = time.perf_counter()
    for _ in range(args.decode):
        y = sess.run(None, {"input": seq})[0]
        nxt = y[:, -1].argmax(axis=-1).astype(seq.dtype)
        seq = np.concatenate([seq, nxt[:, None]], axis=1)
    secs = time.perf_counter() - t0
    sess.close()
    agree = np.array_equal(seq, want)
    return (f"varq in one process (Python binding, 2 workers): {args.decode / secs:.1f} "
            f"tokens/s, tokens {'agree' if agree else 'DIFFER'} with PyTorch's"), agree


def ort_decode(args, d, prompt, want):
    """The same greedy decoding in ONNX Runtime (bench/ort_peer.mjs --decode,
    2 intra-op threads, one process): a line saying its tokens/s and
    whether its tokens agree with PyTorch's."""
    module = args.ort_module
    peer = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench", "ort_peer.mjs")
    if not module or not os.path.isdir(module):
        return f"ONNX Runtime: left out (no onnxruntime-node at {module}: scripts/ort_fetch.sh)"
    xp = os.path.join(d, "decode_prompt.npy")
    np.save(xp, prompt)
    try:
        r = subprocess.run(["node", peer, "--module", module, "--model",
                            os.path.join(d, "gpt_decode.onnx"), "--feed", f"input={xp}",
                            "--threads", "2", "--spin", "0", "--decode", str(args.decode)],
                           capture_output=True, text=True)
    except FileNotFoundError:
        return "ONNX Runtime: left out (no node)"
    line = next((l for l in r.stdout.splitlines() if l.startswith("ort_peer decode=")), None)
    if r.returncode != 0 or not line:
        return f"ONNX Runtime: failed: {r.stderr.strip()[-300:]}"
    kv = dict(f.split("=", 1) for f in line.split()[1:])
    toks = [int(t) for t in kv["tokens"].split(",")]
    agree = toks == want[0].tolist()
    return (f"ONNX Runtime (2 intra-op threads, one process): {float(kv['tokens_per_s']):.1f} "
            f"tokens/s, tokens {'agree' if agree else 'DIFFER'} with PyTorch's")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--varq", required=True)
    ap.add_argument("--models")
    ap.add_argument("--big", action="store_true", help="also vit_b_16 and swin_t")
    ap.add_argument("--decode", type=int, default=32, help="new tokens to decode (0: none)")
    ap.add_argument("--dir")
    ap.add_argument("--ort-module", default=os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "varq-peers",
        "onnxruntime-node-1.30.0", "node_modules", "onnxruntime-node"),
        help="the onnxruntime-node package (scripts/ort_fetch.sh)")
    ap.add_argument("--side", type=int, default=64,
                    help="image side for shufflenet and resnet50 (vit and swin take 224)")
    args = ap.parse_args()
    for name in ("shufflenet", "resnet50"):
        MODELS[name]["input"] = vision("", args.side)["input"]
    torch.set_num_threads(2)
    names = args.models.split(",") if args.models else SMALL + (BIG if args.big else [])
    for n in names:
        if n not in MODELS:
            ap.error(f"unknown model {n}: pick from {', '.join(MODELS)}")
    tmp = tempfile.TemporaryDirectory() if not args.dir else None
    d = args.dir or tmp.name
    os.makedirs(d, exist_ok=True)
    ok = True
    for name in names:
        ok &= check_model(args, d, name)
    if args.decode > 0:
        ok &= decode(args, d)
    sys.exit(0 if ok else 1)


main()
