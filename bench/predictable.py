#!/usr/bin/env python3
"""How predictable each runtime's cost per task is from one run to the next.

Runs each runtime's pattern in a fresh process of its own (the
bench_<runtime> executables of the engine benchmarks, one timing each:
`--tasks N`), alternating varq and its peers run by run so that they share
the machine's drift, `--runs` times each, at each worker count; then prints,
per runtime and pattern, the median ns per task over the runs, the 90th
percentile over the median, the min and the max, and lists every varq run
that was slower than Taskflow's median of the same pattern and workers.

Modes:
  (default)     independent ops, a chain on one var, one writer + 8 readers
                (fan-out), and optionally random sets (--patterns)
  --exec        the cost per op of a run of a graph built once: varq's
                prepared plan (exec_bench --side exec / noseg: with and
                without segments; raw: the same ops prebuilt, vq_push_opr)
                against the same graph as a static tf::Taskflow
                (exec_taskflow), each process giving the median of its own
                --exec-reps repetitions
  --callgrind   instructions per task (valgrind's callgrind, 1 worker): the
                difference of the totals of two runs of N1 and N2 tasks over
                N2 - N1, start-up and teardown cancelled out; every thread
                counts (a spinning one too, a sleeping one not). With --exec:
                instructions per op of a run of the graph, two processes
                differing in runs per repetition (set-up, prepare and graph
                building cancel out)
  --busy N      N busy-loop processes (at this script's niceness plus
                --busy-nice) run beside the measured ones for the whole run

usage: python3 bench/predictable.py [--build build] [--runs 20] [--workers 1,2]
           [--patterns independent,chain,fanout] [--tasks 200000]
           [--peers taskflow] [--busy N] [--busy-nice 0] [--json FILE]
           [--exec [--exec-ops 10000 --exec-runs 20 --exec-reps 3]]
           [--callgrind [--cg-tasks N1,N2]]
Exit status 1 when a process fails or computes a wrong result (the
harness checks every result against a serial run).
"""
import argparse
import ctypes
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# runtime -> (executable under <build>/bench, extra arguments)
RUNTIMES = {
    "varq": ("bench_varq", ["--rt", "varq"]),
    "varq-opr": ("bench_varq", ["--rt", "varq-opr"]),
    "taskflow": ("bench_taskflow", []),
    "libgomp": ("bench_omp_gcc", []),
    "libomp": ("bench_omp_clang", []),
    "starpu": ("bench_starpu", []),
}
# --exec: runtime -> (executable, extra arguments, JSON field or None)
EXEC_RUNTIMES = {
    "varq-plan": ("exec_bench", ["--side", "exec"], "exec_ns_per_op"),
    "varq-plan-noseg": ("exec_bench", ["--side", "noseg"], "noseg_ns_per_op"),
    "varq-raw": ("exec_bench", ["--side", "raw"], "raw_ns_per_op"),
    "taskflow-graph": ("exec_taskflow", [], None),
}
PATTERN_LETTER = {"independent": "a", "chain": "b", "fanout": "c", "random": "d"}
P90_GOAL = 1.25


class Failed(Exception):
    pass


def percentile(sorted_v, q):
    """Linear interpolation between closest ranks (numpy's default)."""
    pos = q * (len(sorted_v) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(sorted_v) - 1)
    return sorted_v[lo] + (sorted_v[hi] - sorted_v[lo]) * (pos - lo)


def run(cmd, env=None, timeout=600):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       env=env, timeout=timeout)
    if p.returncode != 0:
        raise Failed(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stderr.strip()}")
    return p.stdout


def peer_env(build):
    env = dict(os.environ)
    # StarPU keeps its calibration under STARPU_HOME, as engine_bench sets it
    env.setdefault("STARPU_HOME", os.path.join(build, "bench"))
    env.setdefault("STARPU_SILENT", "1")
    return env


def one_task_run(build, rt, pattern, workers, tasks, env):
    """ns per task of one fresh process running one pattern once."""
    exe, extra = RUNTIMES[rt]
    cmd = [os.path.join(build, "bench", exe), *extra, "--workers", str(workers),
           "--only", PATTERN_LETTER[pattern], "--tasks", str(tasks)]
    for line in run(cmd, env).splitlines():
        f = line.split("\t")
        if f[0] == "result" and f[2] == pattern and int(f[3]) == workers:
            return float(f[5])
    raise Failed(f"{' '.join(cmd)} printed no result line")


def one_exec_run(build, rt, workers, a, env, tmp):
    """ns per op per run of one fresh process (median of its repetitions)."""
    exe, extra, field = EXEC_RUNTIMES[rt]
    cmd = [os.path.join(build, "bench", exe), *extra, "--workers", str(workers),
           "--ops", str(a.exec_ops), "--runs", str(a.exec_runs), "--reps", str(a.exec_reps)]
    if field:
        out = os.path.join(tmp, "exec.json")
        cmd[1:1] = ["--only", "run", "--json", out]
        run(cmd, env)
        with open(out) as f:
            return float(json.load(f)["run"]["rows"][0][field])
    for line in run(cmd, env).splitlines():
        f = line.split("\t")
        if f[0] == "graph" and int(f[2]) == workers:
            return float(f[4])
    raise Failed(f"{' '.join(cmd)} printed no graph line")


def busy_start(n, nice):
    libc = ctypes.CDLL(None, use_errno=True)

    def child():
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: die with this script
        if nice:
            os.nice(nice)

    return [subprocess.Popen([sys.executable, "-c", "while True: pass"], preexec_fn=child)
            for _ in range(n)]


def busy_stop(procs):
    for p in procs:
        p.kill()
        p.wait()


def machine():
    cpu = platform.processor() or "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} CPUs"


def loadavg():
    return "%.2f %.2f %.2f" % os.getloadavg()


def stats(v):
    s = sorted(v)
    med = statistics.median(s)
    return {"runs": len(s), "median": med, "p90_over_median": percentile(s, 0.9) / med,
            "min": s[0], "max": s[-1]}


def report(results, runtimes, patterns, workers, unit, peer):
    """Prints the table; returns the rows (for --json)."""
    rows = []
    print(f"\n{'workers':>7} {'pattern':<12} {'runtime':<16} {'runs':>4} {'median':>9} "
          f"{'p90/med':>8} {'min':>9} {'max':>9}   ({unit})")
    for w in workers:
        for p in patterns:
            ref = results.get((peer, p, w))
            ref_med = statistics.median(ref) if ref else None
            notes = []
            for rt in runtimes:
                v = results.get((rt, p, w))
                if not v:
                    continue
                st = stats(v)
                flag = " !" if rt.startswith("varq") and st["p90_over_median"] > P90_GOAL else ""
                print(f"{w:>7} {p:<12} {rt:<16} {st['runs']:>4} {st['median']:>9.1f} "
                      f"{st['p90_over_median']:>8.2f}{flag:<2}{st['min']:>8.1f} {st['max']:>9.1f}")
                row = {"runtime": rt, "pattern": p, "workers": w, "values": v, **st}
                if rt.startswith("varq") and ref_med is not None:
                    slow = [(i + 1, x) for i, x in enumerate(v) if x > ref_med]
                    row["slower_than_" + peer] = len(slow)
                    if slow:
                        listed = ", ".join(f"#{i} {x:.0f}" for i, x in slow)
                        notes.append(f"{rt} slower than {peer}'s median ({ref_med:.1f}) in "
                                     f"{len(slow)} of {len(v)} runs: {listed}")
                rows.append(row)
            for n in notes:
                print(f"{'':>7} {'':<12} {n}")
    print(f"(runs numbered in the order they ran; ! marks a varq p90/median above the goal {P90_GOAL})")
    return rows


def callgrind_total(cmd, env, out):
    """Instructions callgrind counted in one run of cmd, every thread."""
    run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", *cmd], env)
    with open(out) as f:
        for line in f:
            if line.startswith(("summary:", "totals:")):
                return int(line.split()[1])
    raise Failed(f"no instruction total in callgrind's output for {' '.join(cmd)}")


def callgrind(a, build, runtimes, patterns, env):
    n1, n2 = (int(x) for x in a.cg_tasks.split(","))
    env = dict(env, OMP_NUM_THREADS="1", KMP_BLOCKTIME="0")
    if a.exec:
        # each process runs (1 warm-up + 1) repetitions of --runs runs of
        # the graph: the two sizes differ in runs per repetition
        print(f"\ninstructions per op of a run of the graph (callgrind, 1 worker, "
              f"{a.exec_ops} ops, ({n2} - {n1}) runs' difference, x2 repetitions)")
    else:
        print(f"\ninstructions per task (callgrind, 1 worker, ({n2} - {n1}) tasks' difference)")
    print(f"{'runtime':<16}" + "".join(f" {p:>12}" for p in patterns))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "cg.out")
        for rt in runtimes:
            cells = []
            for p in patterns:
                if a.exec:
                    exe, extra, field = EXEC_RUNTIMES[rt]
                    base = [os.path.join(build, "bench", exe), *extra, "--workers", "1",
                            "--ops", str(a.exec_ops), "--reps", "1"]
                    if field:
                        base += ["--only", "run"]
                    c = [callgrind_total(base + ["--runs", str(n)], env, out) for n in (n1, n2)]
                    per = (c[1] - c[0]) / (2 * (n2 - n1) * a.exec_ops)
                else:
                    exe, extra = RUNTIMES[rt]
                    base = [os.path.join(build, "bench", exe), *extra, "--workers", "1",
                            "--only", PATTERN_LETTER[p]]
                    c = [callgrind_total(base + ["--tasks", str(n)], env, out) for n in (n1, n2)]
                    # fan-out runs n / 9 rounds of 9 tasks
                    t1, t2 = (n1 // 9 * 9, n2 // 9 * 9) if p == "fanout" else (n1, n2)
                    per = (c[1] - c[0]) / (t2 - t1)
                cells.append(per)
                rows.append({"runtime": rt, "pattern": p, "instructions_per_task": per})
            print(f"{rt:<16}" + "".join(f" {c:>12.0f}" for c in cells))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--runs", type=int, default=20, help="fresh processes per runtime")
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--patterns", default="independent,chain,fanout")
    ap.add_argument("--tasks", type=int, default=200000, help="tasks per run")
    ap.add_argument("--peers", default=None,
                    help="comma list of " + ", ".join(r for r in RUNTIMES if r != "varq") +
                    " (default: taskflow where built)")
    ap.add_argument("--busy", type=int, default=0, help="busy-loop processes beside")
    ap.add_argument("--busy-nice", type=int, default=0, help="their niceness above this one's")
    ap.add_argument("--exec", action="store_true", help="graph run cost (plan vs tf::Taskflow)")
    ap.add_argument("--exec-ops", type=int, default=10000)
    ap.add_argument("--exec-runs", type=int, default=20)
    ap.add_argument("--exec-reps", type=int, default=3)
    ap.add_argument("--callgrind", action="store_true", help="instructions per task, 1 worker")
    ap.add_argument("--cg-tasks", default=None,
                    help="the two sizes: tasks (default 20000,40000), or with --exec runs of "
                    "the graph per repetition (default 2,4)")
    ap.add_argument("--json")
    a = ap.parse_args()

    build = os.path.abspath(a.build)
    workers = [int(w) for w in a.workers.split(",")]
    patterns = a.patterns.split(",")
    for p in patterns:
        if p not in PATTERN_LETTER:
            ap.error(f"unknown pattern {p}")

    def built(exe):
        return os.access(os.path.join(build, "bench", exe), os.X_OK)

    if a.exec:
        runtimes = [r for r, (exe, _, _) in EXEC_RUNTIMES.items() if built(exe)]
        patterns, peer, unit = ["graph"], "taskflow-graph", "ns/op per run"
    else:
        peers = a.peers.split(",") if a.peers else ["taskflow"]
        for r in peers:
            if r not in RUNTIMES:
                ap.error(f"unknown runtime {r}")
        runtimes = [r for r in ["varq"] + peers if built(RUNTIMES[r][0])]
        peer, unit = "taskflow", "ns/task"
    missing = ([r for r in EXEC_RUNTIMES if r not in runtimes] if a.exec else
               [r for r in ["varq"] + peers if r not in runtimes])
    if missing:
        print(f"not built, skipped: {', '.join(missing)}")
    if not runtimes:
        print(f"predictable.py: nothing built under {build}/bench", file=sys.stderr)
        return 1

    env = peer_env(build)
    print(f"machine: {machine()}; load average before: {loadavg()}")
    if a.busy:
        print(f"beside {a.busy} busy-loop process(es) at niceness +{a.busy_nice} from this one")
    procs = busy_start(a.busy, a.busy_nice)
    out = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "machine": machine(),
           "busy": a.busy, "load_before": loadavg()}
    try:
        if a.callgrind:
            if a.cg_tasks is None:
                a.cg_tasks = "2,4" if a.exec else "20000,40000"
            out["callgrind"] = callgrind(a, build, runtimes, patterns, env)
        else:
            results = {}
            with tempfile.TemporaryDirectory() as tmp:
                for w in workers:
                    for p in patterns:
                        for i in range(a.runs):
                            for rt in runtimes:  # varq, then each peer: alternated run by run
                                if a.exec:
                                    x = one_exec_run(build, rt, w, a, env, tmp)
                                else:
                                    x = one_task_run(build, rt, p, w, a.tasks, env)
                                results.setdefault((rt, p, w), []).append(x)
            what = (f"graph of {a.exec_ops} ops, {a.exec_runs} runs x {a.exec_reps} repetitions "
                    "per process" if a.exec else f"{a.tasks} tasks per run")
            print(f"\n{a.runs} fresh processes per runtime, pattern and worker count, "
                  f"alternated; {what}")
            out["rows"] = report(results, runtimes, patterns, workers, unit, peer)
    except Failed as e:
        print(f"predictable.py: {e}", file=sys.stderr)
        return 1
    finally:
        busy_stop(procs)
    out["load_after"] = loadavg()
    print(f"load average after: {out['load_after']}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
