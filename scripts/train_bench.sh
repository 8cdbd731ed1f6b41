#!/usr/bin/env bash
# Training steps per second, varq against PyTorch eager and libtorch, on
# the examples' two models (the seed program and the digits MLP):
# bench/train_bench.c (threaded engine, 2 workers), bench/train_torch.py
# (torch.set_num_threads(2)) and bench/train_libtorch.cpp (PyTorch's C++
# API, torch::set_num_threads(2): the peer without an interpreter; built
# when libtorch-dev is installed, its columns left out otherwise) train the
# same models from the same initial weights on the same batches, with the
# same K steps per repetition. Each round runs varq, then PyTorch, then
# libtorch, each of the two three ways:
#   2T       torch.set_num_threads(2), environment as is: the comparison
#            the goals are about;
#   2T/b1    the same with OPENBLAS_NUM_THREADS=1. Debian's PyTorch calls
#            the system OpenBLAS (pthreads), whose own 2 threads then share
#            the 2 cores with PyTorch's 2 OpenMP threads; varq pins
#            OpenBLAS to 1 thread, so this is the like-for-like setting;
#   1T/b1    1 thread, OPENBLAS_NUM_THREADS=1;
# and "best" is the fastest of the three in that round. varq also measures
# the share of its MLP step spent inside the ops' kernels (train_bench
# --kernel-share: the time during which an op runs, from the profiler's
# trace, over the step's wall time),
# and the losses of libtorch's first steps are compared with varq's (the
# largest relative difference). Prints each round and a summary with the
# ratios varq / PyTorch (2T, and best) against the goals (>= 3x on the
# seed, >= 1x on the MLP) and varq / libtorch (>= 5x, >= 1.2x), writes
# build/bench/train_bench.json, and prints the summary as a markdown table
# between <!-- train-bench:start --> and <!-- train-bench:end --> for
# docs/perf/training.md (scripts/bench.sh puts it there).
#   scripts/train_bench.sh [--rounds N] [--steps-seed K] [--steps-mlp K]
#                          [--reps R] [--warmup W] [--no-build] [--report-only]
# (--no-build: use build/ as it is, without running ninja; --report-only:
# print the report of the rounds already in build/bench/train_runs.
# BUILD_DIR=dir runs the binaries of another build directory, and keeps
# the data and results in dir/ instead of build/.)
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=3
steps_seed=5000
steps_mlp=1000
reps=5
warmup=200
build=1
measure=1
while [ $# -gt 0 ]; do
    case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --steps-seed) steps_seed=$2; shift 2 ;;
    --steps-mlp) steps_mlp=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --no-build) build=0; shift ;;
    --report-only) build=0; measure=0; shift ;;
    *) echo "usage: $0 [--rounds N] [--steps-seed K] [--steps-mlp K] [--reps R] [--warmup W]" \
            "[--no-build] [--report-only]" >&2
       exit 2 ;;
    esac
done

bdir=${BUILD_DIR:-build}
if [ $build = 1 ]; then
    [ -f $bdir/build.ninja ] || meson setup $bdir >/dev/null
    ninja -C $bdir >/dev/null
fi
out=$bdir/bench
if [ $measure = 0 ]; then
    rounds=$(ls $out/train_runs/varq.*.json 2>/dev/null | wc -l)
    [ "$rounds" -gt 0 ] || { echo "train_bench.sh: no rounds in $out/train_runs" >&2; exit 1; }
else
    digits=$bdir/digits
    if [ ! -f $digits/train_x.npy ] || [ ! -f $digits/train_y.npy ]; then
        /usr/bin/python3 scripts/digits_to_npy.py $digits ||
            echo "train_bench.sh: no digits data: both sides train the MLP on synthetic batches" >&2
    fi
    mkdir -p $out
    rm -rf $out/train_init $out/train_runs
    mkdir -p $out/train_runs
    common=(--digits $digits --steps-seed "$steps_seed" --steps-mlp "$steps_mlp" --reps "$reps"
            --warmup "$warmup" --init-dir $out/train_init)

    for r in $(seq 1 "$rounds"); do
        # other work on the machine skews a round: its load average is kept with it
        echo "=== round $r of $rounds (load average: $(cut -d' ' -f1-3 /proc/loadavg))"
        cut -d' ' -f1 /proc/loadavg > $out/train_runs/load.$r
        $bdir/bench/train_bench "${common[@]}" --workers 2 --json $out/train_runs/varq.$r.json \
            --kernel-share $out/train_runs/mlp_trace.$r.json
        echo
        /usr/bin/python3 bench/train_torch.py "${common[@]}" --threads 2 \
            --json $out/train_runs/torch2.$r.json
        echo
        OPENBLAS_NUM_THREADS=1 /usr/bin/python3 bench/train_torch.py "${common[@]}" --threads 2 \
            --json $out/train_runs/torch2b1.$r.json | tail -2
        OPENBLAS_NUM_THREADS=1 /usr/bin/python3 bench/train_torch.py "${common[@]}" --threads 1 \
            --json $out/train_runs/torch1b1.$r.json | tail -2
        echo
        if [ -x $bdir/bench/train_libtorch ]; then
            $bdir/bench/train_libtorch "${common[@]}" --threads 2 \
                --json $out/train_runs/libtorch2.$r.json
            echo
            OPENBLAS_NUM_THREADS=1 $bdir/bench/train_libtorch "${common[@]}" --threads 2 \
                --json $out/train_runs/libtorch2b1.$r.json | tail -2
            OPENBLAS_NUM_THREADS=1 $bdir/bench/train_libtorch "${common[@]}" --threads 1 \
                --json $out/train_runs/libtorch1b1.$r.json | tail -2
            echo
        fi
    done
fi

cpu=$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')
/usr/bin/python3 - "$out" "$rounds" "$cpu" "$(nproc)" <<'PY'
import json, os, statistics, sys, time
out, rounds, cpu, cores = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
GOAL = {"seed": 3.0, "mlp": 1.0}
GOAL_LT = {"seed": 5.0, "mlp": 1.2}  # varq / libtorch
LT_KINDS = ("libtorch2", "libtorch2b1", "libtorch1b1")

def load_doc(kind, r):
    with open(f"{out}/train_runs/{kind}.{r}.json") as f:
        return json.load(f)

def load(kind, r):
    return {m["model"]: m for m in load_doc(kind, r)["models"]}

have_lt = all(os.path.exists(f"{out}/train_runs/{k}.{r}.json")
              for k in LT_KINDS for r in range(1, rounds + 1))
lt_version = load_doc("libtorch2", 1)["version"] if have_lt else None

def max_rel_diff(a, b):
    """The largest relative difference between two loss sequences (over the
    steps both have), with its step: (diff, step, a, b), or None."""
    best = None
    for i, (x, y) in enumerate(zip(a, b)):
        scale = max(abs(x), abs(y))
        d = abs(x - y) / scale if scale > 0 else 0.0
        if best is None or d > best[0]:
            best = (d, i, x, y)
    return best

def agree(a, b):
    return abs(a - b) <= 1e-3 * max(abs(a), abs(b)) + 1e-6

runs = []
for r in range(1, rounds + 1):
    v, t2, t2b, t1b = (load(k, r) for k in ("varq", "torch2", "torch2b1", "torch1b1"))
    kernels = load_doc("varq", r).get("mlp_kernels")
    if have_lt:
        l2, l2b, l1b = (load(k, r) for k in LT_KINDS)
    for model in ("seed", "mlp"):
        with open(f"{out}/train_runs/load.{r}") as f:
            load_avg = float(f.read())
        row = {"round": r, "load_avg_1min": load_avg, "model": model, "data": v[model]["data"],
               "steps": v[model]["sync"]["steps"], "reps": v[model]["sync"]["reps"],
               "varq_sync": v[model]["sync"]["median_steps_per_s"],
               "varq_async": v[model]["async"]["median_steps_per_s"],
               "torch_2t": t2[model]["median_steps_per_s"],
               "torch_2t_blas1": t2b[model]["median_steps_per_s"],
               "torch_1t_blas1": t1b[model]["median_steps_per_s"],
               "varq_last_loss": v[model]["sync"]["last_loss"],
               "torch_last_loss": t2[model]["last_loss"],
               "same_init": t2[model]["init"] == "varq"}
        row["torch_best"] = max(row["torch_2t"], row["torch_2t_blas1"], row["torch_1t_blas1"])
        row["ratio"] = row["varq_sync"] / row["torch_2t"]
        row["ratio_best"] = row["varq_sync"] / row["torch_best"]
        row["ratio_async"] = row["varq_async"] / row["torch_2t"]
        row["losses_agree"] = agree(row["varq_last_loss"], row["torch_last_loss"])
        if have_lt:
            row["libtorch_2t"] = l2[model]["median_steps_per_s"]
            row["libtorch_2t_blas1"] = l2b[model]["median_steps_per_s"]
            row["libtorch_1t_blas1"] = l1b[model]["median_steps_per_s"]
            row["libtorch_best"] = max(row["libtorch_2t"], row["libtorch_2t_blas1"],
                                       row["libtorch_1t_blas1"])
            row["ratio_libtorch"] = row["varq_sync"] / row["libtorch_2t"]
            row["ratio_libtorch_best"] = row["varq_sync"] / row["libtorch_best"]
            row["libtorch_last_loss"] = l2[model]["last_loss"]
            row["libtorch_same_init"] = l2[model]["init"] == "varq"
            # libtorch's first losses against varq's sync ones (same weights, batches)
            d = max_rel_diff(v[model].get("first_losses", []), l2[model].get("first_losses", []))
            row["loss_steps_compared"] = min(len(v[model].get("first_losses", [])),
                                             len(l2[model].get("first_losses", [])))
            row["loss_max_rel_diff"] = d[0] if d else None
            row["loss_max_rel_diff_at"] = {"step": d[1], "varq": d[2], "libtorch": d[3]} if d else None
        if model == "mlp" and kernels:
            row["kernel_share"] = kernels["share"]
            row["kernel_step_us"] = kernels["step_us"]
            row["kernel_busy_us"] = kernels["busy_us"]
            row["kernel_op_us"] = kernels["op_us"]
            row["kernel_by_op_us"] = kernels["by_op_us"]
        runs.append(row)

def fmt(x):
    return f"{x:,.0f}"

ksteps = {x["model"]: x["steps"] for x in runs}
print(f"rounds: median steps/s over repetitions of {ksteps['seed']} seed steps, "
      f"{ksteps['mlp']} MLP steps;\nratio = varq sync / PyTorch 2T; best = the fastest "
      "PyTorch setting of the round")
print(f"{'round':>5} {'load':>5} {'model':<5} {'varq sync':>10} {'varq async':>11} {'torch 2T':>9} "
      f"{'2T/b1':>8} {'1T/b1':>8} {'ratio':>7} {'vs best':>8}  last loss varq / torch")
for x in runs:
    print(f"{x['round']:>5} {x['load_avg_1min']:>5.2f} {x['model']:<5} {fmt(x['varq_sync']):>10} {fmt(x['varq_async']):>11} "
          f"{fmt(x['torch_2t']):>9} {fmt(x['torch_2t_blas1']):>8} {fmt(x['torch_1t_blas1']):>8} "
          f"{x['ratio']:>6.2f}x {x['ratio_best']:>7.2f}x  "
          f"{x['varq_last_loss']:.6g} / {x['torch_last_loss']:.6g}"
          f"{'' if x['losses_agree'] else ' (differ)'}")

if have_lt:
    print(f"\nlibtorch {lt_version} (C++ API): ratio = varq sync / libtorch 2T; best = the "
          "fastest libtorch setting of the round;\nloss diff = largest relative difference "
          "between the first steps' losses of varq and libtorch 2T")
    print(f"{'round':>5} {'model':<5} {'varq sync':>10} {'libtorch 2T':>12} {'2T/b1':>8} "
          f"{'1T/b1':>8} {'ratio':>7} {'vs best':>8}  loss diff (steps)")
    for x in runs:
        diff = ("n/a" if x["loss_max_rel_diff"] is None else
                f"{x['loss_max_rel_diff']:.2e} ({x['loss_steps_compared']})"
                f"{'' if x['libtorch_same_init'] else ' [not the same init]'}")
        print(f"{x['round']:>5} {x['model']:<5} {fmt(x['varq_sync']):>10} "
              f"{fmt(x['libtorch_2t']):>12} {fmt(x['libtorch_2t_blas1']):>8} "
              f"{fmt(x['libtorch_1t_blas1']):>8} {x['ratio_libtorch']:>6.2f}x "
              f"{x['ratio_libtorch_best']:>7.2f}x  {diff}")

summary = []
for model in ("seed", "mlp"):
    rs = [x for x in runs if x["model"] == model]
    med = lambda key: statistics.median(x[key] for x in rs)
    s = {"model": model, "data": rs[0]["data"], "goal": GOAL[model]}
    for key in ("varq_sync", "varq_async", "torch_2t", "torch_2t_blas1", "torch_1t_blas1",
                "torch_best", "ratio", "ratio_best", "ratio_async"):
        s[key] = med(key)
    s["ratio_min"] = min(x["ratio"] for x in rs)
    s["ratio_max"] = max(x["ratio"] for x in rs)
    s["met"] = s["ratio"] >= s["goal"]
    s["met_vs_best"] = s["ratio_best"] >= s["goal"]
    if have_lt:
        s["goal_libtorch"] = GOAL_LT[model]
        for key in ("libtorch_2t", "libtorch_2t_blas1", "libtorch_1t_blas1", "libtorch_best",
                    "ratio_libtorch", "ratio_libtorch_best"):
            s[key] = med(key)
        s["ratio_libtorch_min"] = min(x["ratio_libtorch"] for x in rs)
        s["ratio_libtorch_max"] = max(x["ratio_libtorch"] for x in rs)
        s["met_libtorch"] = s["ratio_libtorch"] >= s["goal_libtorch"]
        s["met_libtorch_vs_best"] = s["ratio_libtorch_best"] >= s["goal_libtorch"]
        diffs = [x["loss_max_rel_diff"] for x in rs if x["loss_max_rel_diff"] is not None]
        s["loss_max_rel_diff"] = max(diffs) if diffs else None
        s["loss_steps_compared"] = min(x["loss_steps_compared"] for x in rs)
    if all("kernel_share" in x for x in rs):
        for key in ("kernel_share", "kernel_step_us", "kernel_busy_us", "kernel_op_us"):
            s[key] = med(key)
    summary.append(s)

names = {"seed": "seed: Linear 16→1, MSE, Adam, batch 16",
         "mlp": "MLP 64-128-10: ReLU, softmax CE, Adam, batch 64"}
print(f"\nsummary, median over {rounds} round(s):")
print(f"{'model':<5} {'varq':>8} {'torch 2T':>9} {'ratio (min..max)':>22} {'goal':>6} {'':8} "
      f"{'best torch':>10} {'ratio':>7}")
for s in summary:
    rng = f"{s['ratio']:.2f}x ({s['ratio_min']:.2f}..{s['ratio_max']:.2f})"
    print(f"{s['model']:<5} {fmt(s['varq_sync']):>8} {fmt(s['torch_2t']):>9} {rng:>22} "
          f"{'>=' + format(s['goal'], 'g') + 'x':>6} {'met' if s['met'] else 'NOT met':8} "
          f"{fmt(s['torch_best']):>10} {s['ratio_best']:>6.2f}x "
          f"{'met' if s['met_vs_best'] else 'NOT met'}")
if have_lt:
    print(f"{'model':<5} {'varq':>8} {'libtorch':>9} {'ratio (min..max)':>22} {'goal':>6} "
          f"{'':8} {'best lt':>10} {'ratio':>7}  loss diff, first steps")
    for s in summary:
        rng = (f"{s['ratio_libtorch']:.2f}x ({s['ratio_libtorch_min']:.2f}.."
               f"{s['ratio_libtorch_max']:.2f})")
        diff = ("n/a" if s["loss_max_rel_diff"] is None else
                f"{s['loss_max_rel_diff']:.2e} over {s['loss_steps_compared']} steps")
        print(f"{s['model']:<5} {fmt(s['varq_sync']):>8} {fmt(s['libtorch_2t']):>9} {rng:>22} "
              f"{'>=' + format(s['goal_libtorch'], 'g') + 'x':>6} "
              f"{'met' if s['met_libtorch'] else 'NOT met':8} {fmt(s['libtorch_best']):>10} "
              f"{s['ratio_libtorch_best']:>6.2f}x {'met' if s['met_libtorch_vs_best'] else 'NOT met':8}"
              f" {diff}")
mlp = summary[1]
if "kernel_share" in mlp:
    by_op = runs[-1]["kernel_by_op_us"]
    top = sorted(by_op.items(), key=lambda kv: -kv[1])[:5]
    print(f"varq MLP step inside kernels (profiler; median of {rounds} round(s)): an op runs "
          f"{mlp['kernel_busy_us']:.1f} us of {mlp['kernel_step_us']:.1f} us = "
          f"{100 * mlp['kernel_share']:.0f}%; op time {mlp['kernel_op_us']:.1f} us; "
          "last round by op: " +
          ", ".join(f"{k} {us:.1f} us" for k, us in top))

date = time.strftime("%Y-%m-%d", time.gmtime())
with open(f"{out}/train_bench.json", "w") as f:
    json.dump({"date": date, "cpu": cpu, "cores": int(cores), "rounds": rounds,
               "varq": {"engine": "threaded", "workers": 2},
               "pytorch": {"mode": "eager", "settings": {
                   "2t": "torch.set_num_threads(2)",
                   "2t_blas1": "torch.set_num_threads(2), OPENBLAS_NUM_THREADS=1",
                   "1t_blas1": "torch.set_num_threads(1), OPENBLAS_NUM_THREADS=1"}},
               "libtorch": {"version": lt_version, "settings": {
                   "2t": "torch::set_num_threads(2)",
                   "2t_blas1": "torch::set_num_threads(2), OPENBLAS_NUM_THREADS=1",
                   "1t_blas1": "torch::set_num_threads(1), OPENBLAS_NUM_THREADS=1"}}
                   if have_lt else None,
               "runs": runs, "summary": summary}, f, indent=1)
    f.write("\n")
print(f"\nwritten: {out}/train_bench.json")

print("\n<!-- train-bench:start -->")
print(f"Measured on {date}, {cores} cores ({cpu}), by `scripts/train_bench.sh`: "
      f"median of {rounds} round{'s' if rounds > 1 else ''}, each the median of {runs[0]['reps']} repetitions of "
      f"{ksteps['seed']} "
      f"(seed) or {ksteps['mlp']} (MLP) training steps. varq: threaded engine, 2 workers, "
      "one `vq_exec_run` per step; PyTorch eager with `torch.set_num_threads(2)`" +
      (f"; libtorch {lt_version} (PyTorch's C++ API, `torch::nn`, `torch::optim::Adam`) "
       "with `torch::set_num_threads(2)`" if have_lt else "") +
      "; same initial weights, batches and hyperparameters, the loss read back every step.\n")
if have_lt:
    print("| model | varq steps/s | PyTorch steps/s | varq / PyTorch | goal | | "
          "libtorch steps/s | varq / libtorch | goal | |")
    print("|---|---:|---:|---:|---:|---|---:|---:|---:|---|")
else:
    print("| model | varq steps/s | PyTorch steps/s | varq / PyTorch | goal | |")
    print("|---|---:|---:|---:|---:|---|")
for s in summary:
    lt = (f" {fmt(s['libtorch_2t'])} | {s['ratio_libtorch']:.2f}× | ≥ {s['goal_libtorch']:g}× | "
          f"{'met' if s['met_libtorch'] else 'not met'} |" if have_lt else "")
    print(f"| {names[s['model']]} | {fmt(s['varq_sync'])} | {fmt(s['torch_2t'])} | "
          f"{s['ratio']:.2f}× | ≥ {s['goal']:g}× | {'met' if s['met'] else 'not met'} |" + lt)
print()
print("Against the fastest PyTorch setting of each round (2 threads or 1, with OpenBLAS held "
      "to 1 thread as varq holds it): " +
      ", ".join(f"{s['model']} {fmt(s['torch_best'])} steps/s, varq {s['ratio_best']:.2f}×"
                for s in summary) +
      ". varq with `vq_exec_run_async` (4 steps in flight): " +
      ", ".join(f"{s['model']} {fmt(s['varq_async'])} steps/s" for s in summary) + ".")
if have_lt:
    print()
    print("Against the fastest libtorch setting of each round (2 threads or 1, OpenBLAS at 1 "
          "thread): " +
          ", ".join(f"{s['model']} {fmt(s['libtorch_best'])} steps/s, varq "
                    f"{s['ratio_libtorch_best']:.2f}×" for s in summary) +
          ". From varq's initial weights, libtorch's losses of the first steps agree with "
          "varq's to " +
          ", ".join(f"{s['model']} {s['loss_max_rel_diff']:.1e}" for s in summary
                    if s["loss_max_rel_diff"] is not None) +
          " (largest relative difference).")
if "kernel_share" in mlp:
    print()
    print(f"Inside kernels (varq's profiler, `train_bench --kernel-share`): "
          f"an op runs during {100 * mlp['kernel_share']:.0f}% of the MLP's step "
          f"({mlp['kernel_busy_us']:.1f} µs of a {mlp['kernel_step_us']:.1f} µs step; "
          f"{mlp['kernel_op_us']:.1f} µs of op time, ops of a step overlapping on the 2 "
          "workers); the rest is the executor, the engine's hand-offs and the loss read back.")
print("<!-- train-bench:end -->")
PY
