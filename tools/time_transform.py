"""Transform time of two onnxcomp trees, interleaved (A, B, A, B, ...) in fresh processes so that machine
load hits both alike; only the transform itself is timed (imports and loading excluded). Also counts the
graph analyses each transform makes, and its CPU time (``time.process_time``: steadier than wall time on a
loaded machine). A policy may carry options as ``auto:budget_bytes=41943040,exact=True``.

usage: python tools/time_transform.py TREE_A TREE_B ARTIFACT_DIR POLICY [POLICY ...] [--repeats N]
TREE_*: a checkout whose ``onnxcomp`` package is importable from it (sys.path[0]) with its venv's python.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

_CHILD = """
import sys, time, json
sys.path.insert(0, {tree!r})
from onnxcomp.load import load_model
from onnxcomp.transform import transform_model
import onnxcomp.analysis.training_graph as tg
calls = [0]
_classify = tg._classify_inputs          # called once per analyze_model: counts the analyses
def counting(*a, **k):
    calls[0] += 1
    return _classify(*a, **k)
tg._classify_inputs = counting
model = load_model({art!r}).model
t, c = time.perf_counter(), time.process_time()
transform_model(model, {policy!r}{options})
print(json.dumps([time.perf_counter() - t, calls[0], time.process_time() - c]))
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("tree_a"), ap.add_argument("tree_b"), ap.add_argument("artifacts")
    ap.add_argument("policies", nargs="+")
    ap.add_argument("--python-a", default=sys.executable), ap.add_argument("--python-b", default=sys.executable)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    out = {}
    for policy in args.policies:
        policy, _, opts = policy.partition(":")
        options = "".join(f", {k}={v}" for k, v in (o.split("=") for o in opts.split(",") if o))
        times: dict[str, list[float]] = {"a": [], "b": []}
        cpu: dict[str, list[float]] = {"a": [], "b": []}
        analyses: dict[str, int] = {}
        for _ in range(args.repeats):
            for key, tree, py in (("a", args.tree_a, args.python_a), ("b", args.tree_b, args.python_b)):
                code = _CHILD.format(tree=tree, art=args.artifacts, policy=policy, options=options)
                proc = subprocess.run([py, "-c", code], capture_output=True, text=True, check=True)
                seconds, analyses[key], cpu_s = json.loads(proc.stdout.strip().splitlines()[-1])
                times[key].append(seconds)
                cpu[key].append(cpu_s)
        a, b = statistics.median(times["a"]), statistics.median(times["b"])
        ca, cb = statistics.median(cpu["a"]), statistics.median(cpu["b"])
        out[policy + (f":{opts}" if opts else "")] = {
            "a_s": round(a, 2), "b_s": round(b, 2), "ratio_b_over_a": round(b / a, 2), "runs": times,
            "cpu_a_s": round(ca, 2), "cpu_b_s": round(cb, 2), "cpu_runs": cpu,
            "analyses_a": analyses["a"], "analyses_b": analyses["b"]}
        print(f"{policy + (':' + opts if opts else ''):16s} A {a:6.2f} s   B {b:6.2f} s   B/A {b / a:.2f}   "
              f"CPU A {ca:6.2f} s  B {cb:6.2f} s  B/A {cb / ca:.2f}   analyses A {analyses['a']} B {analyses['b']}",
              flush=True)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
