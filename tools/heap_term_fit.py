"""Fit the planner's heap term (onnxcomp/planner/heap_term.py) on measured step peaks.

    # 1. collect: per graph, the planner's predicted live peak, its HeapFeatures and the measured step peaks
    python tools/heap_term_fit.py collect SPEC.json -o docs/auto/heapterm/fit_data.json
    # 2. fit: non-negative least squares of (measured max step peak - predicted live peak) on the features;
    #    prints the coefficients, each graph's residual and the leave-one-graph-out error; -o writes fit.json
    python tools/heap_term_fit.py fit docs/auto/heapterm/fit_data.json [--features nodes,pyops] -o fit.json

SPEC.json: [{"name": ..., "graph": DIR or .onnx, "measured": [measure --json files (onnxcomp settings)]}, ...].
The measured figure is the largest per-step peak over every file (the budget must hold in every step); the
target of the fit is that minus the predicted live peak (``predicted_live_both_orders``, what the planner
compares with the budget before the heap term).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

import numpy as np

MiB = 1 << 20


def collect(spec: list[dict[str, Any]], old: dict[str, Any]) -> list[dict[str, Any]]:
    import onnx

    from onnxcomp.planner import memo
    from onnxcomp.planner.auto import predicted_live, predicted_live_both_orders
    from onnxcomp.planner.heap_term import heap_features

    rows = []
    for entry in spec:
        graph = entry["graph"]
        path = graph if graph.endswith(".onnx") else os.path.join(graph, "training_model.onnx")
        peaks = []
        for f in entry["measured"]:
            d = json.load(open(f))
            peaks += [int(p) for p in d.get("extras", {}).get("peak_bytes_per_step", [d["peak_bytes"]])]
        prev = old.get(entry["name"])
        if prev and prev.get("graph") == path and prev.get("untouched", False) == entry.get("untouched", False):
            row = dict(prev, measured_peaks=peaks, measured=entry["measured"])
        else:
            t = time.time()
            with memo.planning_session():
                model = onnx.load(path, load_external_data=False)
                # An untouched graph (a baseline) is predicted as the planner predicts its baseline (ORT's own
                # accumulation); a plan as the planner predicts its rewrites (both orders).
                seen, live = (predicted_live(model, eager_accumulation=False) if entry.get("untouched")
                              else predicted_live_both_orders(model))
                feats = heap_features(seen, memo.analysis(seen))
            row = {"name": entry["name"], "graph": path, "untouched": bool(entry.get("untouched", False)),
                   "predicted_live_peak": int(live.max()),
                   "features": feats.as_dict(), "measured": entry["measured"], "measured_peaks": peaks}
            print(f"{entry['name']}: {feats} predicted {live.max() / MiB:.2f} MiB ({time.time() - t:.0f} s)",
                  file=sys.stderr)
        row["excess_max"] = max(peaks) - row["predicted_live_peak"]
        rows.append(row)
    return rows


def _nnls(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    from scipy.optimize import nnls

    return nnls(a, b)[0]


def fit(rows: list[dict[str, Any]], features: list[str], const: bool) -> dict[str, Any]:
    """Non-negative least squares (every feature can only add heap pages), scaled so each column counts."""
    x = np.array([[r["features"][f] for f in features] + ([1.0] if const else []) for r in rows], dtype=float)
    y = np.array([r["excess_max"] for r in rows], dtype=float)
    scale = np.maximum(np.abs(x).max(axis=0), 1.0)

    def solve(idx: np.ndarray) -> np.ndarray:
        return _nnls(x[idx] / scale, y[idx]) / scale

    coef = solve(np.arange(len(rows)))
    pred = x @ coef
    # Leave one *graph family* out (a net's baseline and plans share the prefix before '.'): how the term does
    # on a net it was not fitted on.
    fam = [r["name"].split(".")[0] for r in rows]
    loo = np.zeros(len(rows))
    for f in set(fam):
        test = np.array([g == f for g in fam])
        c = solve(np.where(~test)[0]) if (~test).any() else coef
        loo[test] = x[test] @ c
    names = features + (["const"] if const else [])
    out = {"features": features, "const": const,
           "coefficients": {n: float(c) for n, c in zip(names, coef)},
           "rows": [{"name": r["name"], "nodes": r["features"]["nodes"], "excess_max": int(r["excess_max"]),
                     "term": int(p), "residual": int(r["excess_max"] - p), "loo_term": int(lp),
                     "loo_residual": int(r["excess_max"] - lp)}
                    for r, p, lp in zip(rows, pred, loo)],
            "rms_residual": float(np.sqrt(np.mean((y - pred) ** 2))),
            "max_under": float(np.max(y - pred)), "loo_rms": float(np.sqrt(np.mean((y - loo) ** 2))),
            "loo_max_under": float(np.max(y - loo))}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect")
    c.add_argument("spec")
    c.add_argument("-o", "--out", required=True)
    f = sub.add_parser("fit")
    f.add_argument("data")
    f.add_argument("--features", default="nodes,pyops,small_buffers")
    f.add_argument("--const", action="store_true", help="with a constant term")
    f.add_argument("-o", "--out")
    a = ap.parse_args(argv)
    if a.cmd == "collect":
        old = {r["name"]: r for r in json.load(open(a.out))} if os.path.exists(a.out) else {}
        rows = collect(json.load(open(a.spec)), old)
        with open(a.out, "w") as fh:
            json.dump(rows, fh, indent=1)
        return 0
    rows = json.load(open(a.data))
    res = fit(rows, a.features.split(","), a.const)
    print(f"{'graph':28s} {'nodes':>7s} {'excess':>8s} {'term':>8s} {'resid':>8s} {'LOO resid':>9s}  (MiB)")
    for r in res["rows"]:
        print(f"{r['name']:28s} {r['nodes']:7d} {r['excess_max'] / MiB:8.2f} {r['term'] / MiB:8.2f} "
              f"{r['residual'] / MiB:8.2f} {r['loo_residual'] / MiB:9.2f}")
    print("coefficients:", {k: round(v, 4) for k, v in res["coefficients"].items()})
    print(f"rms residual {res['rms_residual'] / MiB:.2f} MiB, largest under-prediction {res['max_under'] / MiB:.2f} MiB;"
          f" leave-one-net-out rms {res['loo_rms'] / MiB:.2f}, largest under {res['loo_max_under'] / MiB:.2f} MiB")
    if a.out:
        with open(a.out, "w") as fh:
            json.dump(res, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
