#!/usr/bin/python3
"""Summarizes a tools/onnx_check run by ONNX op: for every op type that the
node test cases use, how many cases containing it pass, fail, or are
unsupported because of that op (the import or preparation named it) or
because of another op of the case. Limits of varq that are not about one
op's translation are counted apart (LIMITS below): a shape, axes or
similar input that the case feeds at run time where varq needs it known
when the model is imported ("known at import"), an element type varq does
not have ("type"), and outputs varq does not produce: the scan outputs
of a Loop whose trip count is not static (M unknown at import, or a cond
that can end it early), a MaxPool's Indices ("extra outputs"); and
windows of more than 3 dims, and Dropout in training mode (a training
Dropout's expected outputs come from numpy's random generator). Prints
the table and the totals; with --markdown FILE also
writes the table of supported ops of docs/onnx-conformance.md (those varq translates: `varq
onnx-ops`), and with --check exits 1 when a case fails or a case of a
supported op is unsupported because of that op for another reason.

usage: onnx_summary.py RESULTS CASES_DIR SUPPORTED_OPS_FILE [--markdown FILE] [--check]
"""
import collections
import os
import re
import sys

try:
    import onnx
except ImportError as exc:
    print(f"onnx_summary.py: skipped: {exc}")
    sys.exit(77)


# Limits of varq that are not about one op's translation, each counted in
# a column of its own (and not failing --check): the message's words, the
# column.
LIMITS = [
    ("must be known when the model is imported", "known at import"),
    ("element type", "type"),
    ("cast to", "type"),
    ("is not supported by", "type"),  # an op that does not take the dtype (ops/registry.c)
    ("scan outputs are not supported", "extra outputs"),
    ("its Indices output is not supported", "extra outputs"),
    ("storage_order", "extra outputs"),
    ("varq has 1-D, 2-D and 3-D windows", "windows, training mode"),
    ("training_mode is true", "windows, training mode"),
]


def main():
    args = sys.argv[1:]
    check = "--check" in args
    md = None
    if "--markdown" in args:
        md = args[args.index("--markdown") + 1]
    results, cases, supported_file = args[:3]
    supported = set(open(supported_file).read().split())
    rows = collections.defaultdict(lambda: collections.Counter())
    totals = collections.Counter()
    bad = []
    for line in open(results):
        status, case, msg = (line.rstrip("\n").split("\t") + [""])[:3]
        totals[status] += 1
        model = onnx.load(os.path.join(cases, case, "model.onnx"), load_external_data=False)
        ops = {n.op_type for n in model.graph.node}
        named = re.search(r'node \d+ \((\w+) "', msg)
        culprit = named.group(1) if named else None
        m = re.search(r"op (\w+) \(domain", msg)
        if m:
            culprit = m.group(1)
        # the import's list of the op types it does not translate: the
        # first listed (a case of one op type lists that one)
        m = re.search(r"that varq does not translate: (\w+)", msg)
        if m:
            culprit = m.group(1)
        limit = None
        if status == "unsupported":
            for text, label in LIMITS:
                if text in msg:
                    limit = label
                    break
        for op in ops:
            if limit and op == culprit:
                rows[op][limit] += 1
            elif status == "unsupported":
                rows[op]["unsupported (itself)" if op == culprit else "unsupported (other)"] += 1
            else:
                rows[op][status] += 1
            if op in supported and (status == "fail" or (status == "unsupported" and op == culprit
                                                          and not limit)):
                bad.append(f"{case}: {status}: {msg}")
    cols = ["pass", "fail", "known at import", "type", "extra outputs", "windows, training mode",
            "unsupported (itself)", "unsupported (other)"]
    print(f"{'op':24s} {'varq':5s} " + " ".join(f"{c:>20s}" for c in cols))
    for op in sorted(rows):
        print(f"{op:24s} {'yes' if op in supported else '':5s} "
              + " ".join(f"{rows[op][c]:20d}" for c in cols))
    n = sum(totals.values())
    print(f"total: {totals['pass']} pass, {totals['fail']} fail, "
          f"{totals['unsupported']} unsupported of {n} cases; "
          f"{len([o for o in supported])} ops translated")
    if md:
        with open(md, "w") as f:
            f.write("| ONNX op | cases that pass | a fed input needed at import | other type "
                    "| Loop scans of a run-time length, pool indices "
                    "| windows over more than 3 dims, training Dropout | unsupported "
                    "| cases with it |\n|---|---|---|---|---|---|---|---|\n")
            for op in sorted(supported):
                r = rows.get(op, collections.Counter())
                f.write(f"| {op} | {r['pass']} | {r['known at import']} | {r['type']} | "
                        f"{r['extra outputs']} | {r['windows, training mode']} | "
                        f"{r['unsupported (itself)'] + r['fail']} | "
                        f"{sum(r.values())} |\n")
            f.write(f"\nTotal: {totals['pass']} of {n} node test cases pass, "
                    f"{totals['fail']} fail, {totals['unsupported']} use an op, attribute "
                    f"value or type varq does not have.\n")
    if check and bad:
        print("cases of supported ops that do not pass:")
        for b in bad:
            print("  " + b)
        sys.exit(1)


main()
