#!/usr/bin/python3
"""varq against PyTorch: the same models, initial weights, batches and
optimizers must give the same losses and final weights.

Usage: compare_torch.py --bin PATH/train_ref [--digits DIR] [--keep DIR]

For every model x optimizer x dtype this script writes 100 batches as .npy
files, runs train_ref (tests/reference/train_ref.c) on them, which saves
varq's initial scope, the 100 losses and its final scope; then it loads the
initial weights into the same model built with torch.nn, trains it on the
same batches with the same optimizer and compares.

Models (train_ref's MODEL argument in brackets):
  seed      [seed] x [16,16] ~ U(-1,1), label = x w* + b* + 0.01 N(0,1) [16,1];
            Linear(16 -> 1) "out", MSE loss (mean over the 16 elements)
  seed-ones [seed] the seed program's feeds: x = ones[16,16], label = ones[16,1]
  mlp       [mlp]  batches of 64 rows of scikit-learn's digits (pixels / 16),
            int64 labels; Linear(64 -> 128) "h1", ReLU, Linear(128 -> 10)
            "logits", cross-entropy on the logits (mean over the batch)
Optimizers (the same numbers are in train_ref.c):
  sgd       torch.optim.SGD(lr=0.05)
  momentum  torch.optim.SGD(lr=0.05, momentum=0.9)   (v = mu v + g; p -= lr v)
  adam      torch.optim.Adam(lr=0.01, betas=(0.9, 0.999), eps=1e-8)
  sgd_wd    torch.optim.SGD(lr=0.05, weight_decay=0.01)
  adamw     torch.optim.AdamW(lr=0.01, weight_decay=0.05)
  adam_clipnorm       adam, torch.nn.utils.clip_grad_norm_(params, 0.5) before step
  momentum_clipvalue  momentum, torch.nn.utils.clip_grad_value_(params, 0.05) before step
The learning rate as a var (vq_optimizer.learning_rate_var), fed or computed
by a schedule (vq_lr_schedule_build); torch.optim.lr_scheduler's step() after
every optimizer step:
  sgd_lrfeed          sgd, a new lr each step (lrs.npy: 0.05 * U(0.2, 1.5); f32 runs
                      give torch the f32-rounded value that varq is fed)
  adam_lrfeed         adam, a new lr each step (0.01 * U(0.5, 1.0)); some other
                      draws (0.01 * U(0.2, 1.5) from the same seed) make torch's own
                      f32 mlp run leave its f64 trajectory from step ~12 on (5e-3 in
                      the loss, 7e-2 in h1.w: Adam turning rounding noise in near-zero
                      gradients into full steps) while varq's f32 run stays within
                      1e-6 of torch's f64 one: the check would measure torch's noise
  sgd_steplr          sgd, StepLR(step_size=30, gamma=0.5)
  momentum_cosine     momentum, CosineAnnealingLR(T_max=60, eta_min=0.005) (past
                      T_max the rate rises again)
  adam_linear         adam, LinearLR(start_factor=0.1, end_factor=1.0, total_iters=25)
  adamw_warmcos       adamw, SequentialLR([LinearLR(0.05, 1.0, total_iters=10),
                      CosineAnnealingLR(T_max=90, eta_min=1e-4)], milestones=[10])
Dtypes: f32 (torch.float32) and f64 (torch.float64); tol = 1e-10 for f64,
and for f32 the larger of 1e-4 and CHAOS (10) times the distance between
PyTorch's own f32 run and its f64 run from the same start (the same
measures as below). Rounding in f32 is 1e-7 relative, and where the
trajectory is stable the two f32 runs stay near 1e-6 of each other: the
bound is 1e-4. Where it is not (Adam divides each gradient by its own
magnitude, so a gradient that is rounding noise still moves its weight by a
whole step, in a direction set by how the kernels ordered their sums) any
two f32 runs part, by an amount that depends on the CPU's kernels (AVX-512,
AVX2, portable, OpenBLAS's choice): PyTorch's own f32 run parts from the
exact trajectory by the same mechanism, and the bound grows with it rather
than failing on one CPU and passing on another. The f64 runs are the
step-by-step check, with 1e-16 rounding far under Adam's epsilon.

varq's Linear keeps W as [in, out]; torch's nn.Linear computes x W^T + b with
its weight [out, in], so torch's weight is varq's W transposed.

Pass criteria (a = varq, b = torch):
  loss of step i:  |a_i - b_i| <= tol * max(|b_i|, 1e-2 * max_j |b_j|)
                   i.e. relative to the step's loss, with a floor of 1% of
                   the largest loss of the run. The floor changes a verdict
                   only for seed-ones, whose loss falls towards an exact fit:
                   there loss = (out - 1)^2 with |out - 1| << |out| ~ 1, the
                   cancellation makes the loss ill-conditioned, and in f32
                   torch's own loss differs from its f64 trajectory by more
                   than 1e-4 relative (up to ~5e-3) at steps whose loss is
                   below ~1e-3 of the largest (varq's f32 loss likewise); sgd
                   even reaches a loss of exactly 0 in f64. The table also
                   shows the plain max_i |a_i - b_i| / |b_i| for reference.
  each parameter:  max_k |a_k - b_k| <= tol * max_k |b_k|
                   i.e. relative to the tensor's largest element (elementwise
                   relative differences are meaningless for elements near 0).
The table prints, per run, the largest value of |a - b| / the right-hand
side's max(...) term over the steps (loss) and over the parameters
(weights); a run passes when both are <= tol.

Exit status: 0 when every run passes, 1 when one fails (or train_ref fails),
77 (meson's "skipped") when torch cannot be imported."""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import warnings

STEPS = 100
TOL = {"f32": 1e-4, "f64": 1e-10}
CHAOS = 10
LOSS_FLOOR = 1e-2
LR_VARS = ("sgd_lrfeed", "adam_lrfeed", "sgd_steplr", "momentum_cosine", "adam_linear",
           "adamw_warmcos")
LR_FED = ("sgd_lrfeed", "adam_lrfeed")
OPTIMIZERS = ("sgd", "momentum", "adam", "sgd_wd", "adamw", "adam_clipnorm",
              "momentum_clipvalue") + LR_VARS
# The training controls and learning-rate vars run on seed and mlp, not on
# seed-ones: its loss falls towards an exact fit where f32 runs lose every
# digit (see the pass criteria), and clipping at that scale decides on such
# digits.
CONTROLS = ("sgd_wd", "adamw", "adam_clipnorm", "momentum_clipvalue") + LR_VARS


def combos():
    return [(m, o) for m in MODELS for o in OPTIMIZERS
            if not (m == "seed-ones" and o in CONTROLS)]
MODELS = ("seed", "seed-ones", "mlp")

try:
    import torch
    import numpy as np
except ImportError as err:
    print(f"SKIP: python3-torch not importable ({err})")
    sys.exit(77)


def seed_batches(ones):
    rng = np.random.default_rng(2026)
    w_true = ((np.arange(16) - 7.5) / 8).reshape(16, 1)
    out = []
    for _ in range(STEPS):
        if ones:
            x, y = np.ones((16, 16)), np.ones((16, 1))
        else:
            x = rng.uniform(-1, 1, (16, 16))
            y = x @ w_true + 0.25 + 0.01 * rng.standard_normal((16, 1))
        out.append((x, y))
    return out


def digits_data(digits_dir):
    if digits_dir:
        x = np.load(os.path.join(digits_dir, "train_x.npy")).astype(np.float64)
        y = np.load(os.path.join(digits_dir, "train_y.npy")).astype(np.int64)
    else:
        try:
            from sklearn.datasets import load_digits
        except ImportError as err:
            raise RuntimeError(f"the digits data needs python3-sklearn ({err}); or pass "
                               "--digits DIR (scripts/digits_to_npy.py DIR)") from err

        d = load_digits()
        x, y = d.data / 16.0, d.target.astype(np.int64)
    return x, y


def mlp_batches(data):
    x, y = data
    rng = np.random.default_rng(7)
    order, out = np.empty(0, dtype=np.int64), []
    for _ in range(STEPS):
        if len(order) < 64:
            order = np.concatenate([order, rng.permutation(len(x))])
        idx, order = order[:64], order[64:]
        out.append((x[idx], y[idx]))
    return out


def write_batches(d, batches, dtype, model):
    os.makedirs(os.path.join(d, "batches"))
    npdt = np.float32 if dtype == "f32" else np.float64
    for i, (x, y) in enumerate(batches):
        np.save(os.path.join(d, "batches", f"x_{i}.npy"), np.ascontiguousarray(x, dtype=npdt))
        y = y.astype(np.int64) if model == "mlp" else y.astype(npdt)
        np.save(os.path.join(d, "batches", f"y_{i}.npy"), np.ascontiguousarray(y))


def torch_model(model, init, tdt):
    """The model with varq's initial weights; returns (module, loss_fn, params)
    with params as {varq name: torch parameter in varq's layout}."""
    def linear(name, nin, nout):
        lin = torch.nn.Linear(nin, nout).to(tdt)
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(init[name + ".w"].T.copy()))
            lin.bias.copy_(torch.from_numpy(init[name + ".b"]))
        return lin

    if model == "mlp":
        h1, logits = linear("h1", 64, 128), linear("logits", 128, 10)
        net = torch.nn.Sequential(h1, torch.nn.ReLU(), logits)
        layers = {"h1": h1, "logits": logits}
        loss_fn = torch.nn.CrossEntropyLoss()
    else:
        out = linear("out", 16, 1)
        net, layers, loss_fn = out, {"out": out}, torch.nn.MSELoss()
    params = {}
    for name, lin in layers.items():
        params[name + ".w"] = lambda lin=lin: lin.weight.detach().numpy().T
        params[name + ".b"] = lambda lin=lin: lin.bias.detach().numpy()
    return net, loss_fn, params


def torch_optimizer(opt, params):
    if opt in ("sgd", "sgd_lrfeed", "sgd_steplr"):
        return torch.optim.SGD(params, lr=0.05)
    if opt == "momentum_cosine":
        return torch.optim.SGD(params, lr=0.05, momentum=0.9)
    if opt == "adamw_warmcos":
        return torch.optim.AdamW(params, lr=0.01, weight_decay=0.05)
    if opt == "sgd_wd":
        return torch.optim.SGD(params, lr=0.05, weight_decay=0.01)
    if opt in ("momentum", "momentum_clipvalue"):
        return torch.optim.SGD(params, lr=0.05, momentum=0.9)
    if opt == "adamw":
        return torch.optim.AdamW(params, lr=0.01, weight_decay=0.05)
    return torch.optim.Adam(params, lr=0.01, betas=(0.9, 0.999), eps=1e-8)


def torch_scheduler(opt, optim):
    """The lr scheduler of the run, or None; step() after each optim.step()."""
    # SequentialLR restarts the cosine with step(0), which warns that the
    # epoch argument is deprecated (its own doing, not ours)
    warnings.filterwarnings("ignore", message="The epoch parameter")
    sched = torch.optim.lr_scheduler
    if opt == "sgd_steplr":
        return sched.StepLR(optim, step_size=30, gamma=0.5)
    if opt == "momentum_cosine":
        return sched.CosineAnnealingLR(optim, T_max=60, eta_min=0.005)
    if opt == "adam_linear":
        return sched.LinearLR(optim, start_factor=0.1, end_factor=1.0, total_iters=25)
    if opt == "adamw_warmcos":
        warm = sched.LinearLR(optim, start_factor=0.05, end_factor=1.0, total_iters=10)
        cos = sched.CosineAnnealingLR(optim, T_max=90, eta_min=1e-4)
        return sched.SequentialLR(optim, [warm, cos], milestones=[10])
    return None


def fed_rates(opt):
    """The lr fed at each step of the LR_FED runs (float64 [STEPS])."""
    rng = np.random.default_rng(11)
    if opt.startswith("sgd"):
        return 0.05 * rng.uniform(0.2, 1.5, STEPS)
    return 0.01 * rng.uniform(0.5, 1.0, STEPS)


def clip(opt, params):
    """The clipping train_ref's optimizer does before its update."""
    if opt == "adam_clipnorm":
        torch.nn.utils.clip_grad_norm_(params, 0.5)
    elif opt == "momentum_clipvalue":
        torch.nn.utils.clip_grad_value_(params, 0.05)


def load_dir(d):
    return {f[:-4]: np.load(os.path.join(d, f)) for f in os.listdir(d) if f.endswith(".npy")}


def train_torch(model, opt, init, dtype, batches, rates):
    """PyTorch's run from varq's initial weights: the losses and the final
    weights (name -> array)."""
    tdt = torch.float32 if dtype == "f32" else torch.float64
    net, loss_fn, params = torch_model(model, init, tdt)
    optim = torch_optimizer(opt, net.parameters())
    scheduler = torch_scheduler(opt, optim)
    ref = np.empty(STEPS)
    npdt = np.float32 if dtype == "f32" else np.float64
    for i, (x, y) in enumerate(batches):
        xt = torch.from_numpy(np.ascontiguousarray(x, dtype=npdt))
        yt = torch.from_numpy(np.ascontiguousarray(y.astype(np.int64) if model == "mlp"
                                                   else y.astype(npdt)))
        if rates is not None:
            for group in optim.param_groups:
                group["lr"] = float(rates[i])
        optim.zero_grad()
        loss = loss_fn(net(xt), yt)
        loss.backward()
        clip(opt, list(net.parameters()))
        optim.step()
        if scheduler is not None:
            scheduler.step()
        ref[i] = loss.item()
    return ref, {name: get().astype(np.float64) for name, get in params.items()}


def compare(model, opt, dtype, losses, final, ref, weights):
    """a = (losses, final) against b = (ref, weights) by the pass criteria:
    per-step loss errors, plain relative ones, the worst weight error and
    its parameter."""
    floor = LOSS_FLOOR * np.max(np.abs(ref))
    loss_err = np.abs(losses - ref) / np.maximum(np.abs(ref), floor)
    loss_rel = np.abs(losses - ref) / np.maximum(np.abs(ref), np.finfo(float).tiny)
    weight_err, worst_param = 0.0, ""
    for name, b in weights.items():
        a = final[name].astype(np.float64)
        if a.shape != b.shape:
            raise RuntimeError(f"{model} {opt} {dtype}: {name} has shape {a.shape} in varq, "
                               f"{b.shape} in torch")
        err = np.max(np.abs(a - b)) / max(np.max(np.abs(b)), np.finfo(float).tiny)
        if err >= weight_err:
            weight_err, worst_param = err, name
    return loss_err, loss_rel, weight_err, worst_param


def run_one(binary, work, model, opt, dtype, batches):
    d = os.path.join(work, f"{model}-{opt}-{dtype}")
    write_batches(d, batches, dtype, model)
    rates = fed_rates(opt) if opt in LR_FED else None
    if rates is not None:
        np.save(os.path.join(d, "lrs.npy"), rates)
        if dtype == "f32":  # the value varq is fed
            rates = rates.astype(np.float32).astype(np.float64)
    proc = subprocess.run([binary, "seed" if model.startswith("seed") else "mlp", opt, dtype, d],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        msg = (proc.stderr.strip() or proc.stdout.strip() or f"exit status {proc.returncode}")
        raise RuntimeError(f"train_ref {model} {opt} {dtype}: {msg}")
    init, final = load_dir(os.path.join(d, "init")), load_dir(os.path.join(d, "final"))
    losses = np.load(os.path.join(d, "losses.npy"))

    ref, weights = train_torch(model, opt, init, dtype, batches, rates)
    loss_err, loss_rel, weight_err, worst_param = compare(model, opt, dtype, losses, final,
                                                          ref, weights)
    tol = TOL[dtype]
    if dtype == "f32":
        # PyTorch's own f32 run against its f64 run from the same start:
        # how far rounding alone moves this trajectory (see CHAOS).
        ref64, weights64 = train_torch(model, opt, init, "f64", batches, rates)
        own_loss, _, own_weight, _ = compare(model, opt, dtype, ref, weights, ref64, weights64)
        tol = max(tol, CHAOS * float(np.max(own_loss)), CHAOS * own_weight)
    ok = bool(np.all(loss_err <= tol)) and weight_err <= tol
    return {
        "tol": tol,
        "loss_err": float(np.max(loss_err)), "loss_step": int(np.argmax(loss_err)),
        "loss_rel": float(np.max(loss_rel)), "weight_err": weight_err,
        "worst_param": worst_param, "ok": ok, "loss0": ref[0], "loss_last": ref[-1],
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", required=True, help="path of the train_ref program")
    ap.add_argument("--digits", help="directory with train_x.npy and train_y.npy "
                    "(scripts/digits_to_npy.py); default: sklearn's load_digits()")
    ap.add_argument("--keep", help="write the runs' files here and keep them")
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)

    start = time.monotonic()
    try:
        data = {
            "seed": seed_batches(False),
            "seed-ones": seed_batches(True),
            "mlp": mlp_batches(digits_data(args.digits)),
        }
    except (RuntimeError, OSError) as err:
        print(f"ERROR: {err}")
        return 1
    work = args.keep or tempfile.mkdtemp(prefix="varq-torch-ref-")
    if args.keep:
        shutil.rmtree(work, ignore_errors=True)
        os.makedirs(work)
    print(f"varq vs torch {torch.__version__}: {STEPS} steps; loss: max over steps of "
          f"|a-b|/max(|b|, {LOSS_FLOOR:g}*max|b|); weights: max over params of "
          f"max|a-b|/max|b|")
    print(f"{'model':<10} {'optimizer':<18} {'dtype':<5} {'max loss diff':>13} {'@step':<5} "
          f"{'plain rel':>9} {'max weight diff':>15} {'(param)':<10} {'loss 0 -> 99':<22} result")
    failed = 0
    try:
        for model, opt in combos():
            for dtype in ("f32", "f64"):
                r = run_one(args.bin, work, model, opt, dtype, data[model])
                failed += not r["ok"]
                print(f"{model:<10} {opt:<18} {dtype:<5} {r['loss_err']:13.3e} "
                      f"@{r['loss_step']:<4d} {r['loss_rel']:9.2e} {r['weight_err']:15.3e} "
                      f"{r['worst_param']:<10} {r['loss0']:9.3g} -> {r['loss_last']:<9.3g}  "
                      f"{'PASS' if r['ok'] else 'FAIL'}  (tol {r['tol']:.3g})", flush=True)
    except (RuntimeError, OSError) as err:
        print(f"ERROR: {err}")
        return 1
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    n = len(combos()) * 2
    print(f"{n - failed}/{n} runs pass ({time.monotonic() - start:.1f} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
