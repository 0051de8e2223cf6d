"""Predicted vs measured training-step time of transformed graphs (the cost model's acceptance benchmark).

For one artifact directory and ORT settings: profile the baseline graph once (ORT's profiler, fresh process),
predict every policy's graph with ``predict_step_seconds``, measure every graph with ``onnxcomp measure``
(fresh process, median of --steps steps), and optionally profile each transformed graph to compare the
codec ops' predicted time with their profiled time (the codec-time-only error, CSWAP+'s figure).

Results are merged into --json, keyed by directory, settings and graph, so a long benchmark runs in chunks
(each under the timing lock), and ``--report`` prints the table of everything gathered:

    flock /tmp/onnxcomp-timing.lock python tools/bench_cost_model.py /tmp/cm/resnet18_b32 \\
        --policies lossless comet --settings measure --json docs/cost_model/bench.json
    python tools/bench_cost_model.py --report --json docs/cost_model/bench.json
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import onnx

from onnxcomp.errors import OnnxcompError
from onnxcomp.planner.cost_model import CostModel, CostModelWarning, NodeTimes, node_features, node_weights, predict_step
from onnxcomp.runtime.session import RuntimeSettings

SETTINGS = {
    "measure": RuntimeSettings(),
    # ORT's own defaults: arena, mem pattern and buffer reuse on, DEFAULT execution order
    "ort-default": RuntimeSettings(arena=True, mem_pattern=True, mem_reuse=True, execution_order="default"),
}


def _load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.exists() else {"runs": {}}


def _save(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)


def run(args: argparse.Namespace) -> None:
    from onnxcomp.planner.cost_model import profile_node_seconds
    from onnxcomp.runtime.measure import measure

    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    data = _load(out)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CostModelWarning)
        cost = CostModel.load(args.cost)
    art = Path(args.dir).resolve()
    graphs = ["training_model.onnx"] + [f"{p}.onnx" for p in args.policies]
    for name in args.settings:
        settings = SETTINGS[name]
        # one entry per chunk (its own baseline profile and measurement): graphs are compared with the
        # baseline taken minutes before them, not with one from another chunk and another load
        key = f"{art.name}|{name}|{'+'.join(args.policies)}"
        entry = data["runs"].setdefault(key, {"dir": str(art), "settings": name, "graphs": {}})
        if "profile" not in entry or args.reprofile:
            t0 = time.perf_counter()
            prof = profile_node_seconds(art, steps=args.profile_steps, settings=settings)
            entry["profile"] = prof.to_dict()
            entry["profile_load"] = os.getloadavg()[0]
            print(f"[{key}] profiled baseline: step {prof.step_seconds:.3f} s, nodes {sum(prof.values()):.3f} s, "
                  f"overhead {prof.overhead_seconds:.3f} s ({time.perf_counter() - t0:.0f} s)", flush=True)
            _save(out, data)
        prof = NodeTimes.from_dict(entry["profile"])
        # features come from the graph, not the clock: refresh them (the op model's inputs may have changed)
        base_graph = onnx.load(str(art / "training_model.onnx"), load_external_data=False)
        prof.features, prof.weights = node_features(base_graph), node_weights(base_graph)
        for g in graphs:
            if not (art / g).exists():
                print(f"[{key}] {g}: missing, skipped", flush=True)
                continue
            rec = entry["graphs"].setdefault(g, {})
            model = onnx.load(str(art / g), load_external_data=False)
            pred = predict_step(model, cost, prof)
            rec.update(predicted_s=pred.total, predicted_ort_s=pred.ort_ops, predicted_codec_s=pred.codec_ops,
                       predicted_overhead_s=pred.overhead, cost_source=cost.source)
            if "measured_s" not in rec or args.remeasure:
                load0 = os.getloadavg()[0]
                try:
                    m = measure(art, model=g, steps=args.steps, settings=settings)
                except OnnxcompError as exc:  # e.g. a native crash under these settings: recorded, next graph
                    rec["error"] = str(exc).splitlines()[0][:400]
                    print(f"[{key}] {g}: measurement failed: {rec['error']}", flush=True)
                    _save(out, data)
                    continue
                rec.pop("error", None)
                rec.update(measured_s=m.step_time_s, measured_steps_s=m.step_times_s, load=[load0, os.getloadavg()[0]],
                           peak_bytes=m.peak_bytes, growth_bytes=m.growth_bytes, measured_at=time.time())
            if args.codec_error and pred.codec_nodes and name == "measure" and ("codec_profile" not in rec or args.reprofile):
                p = profile_node_seconds(art, model=g, steps=1, settings=settings)
                measured = {n: p.get(n, 0.0) for n in pred.codec_nodes}
                rec["codec_profile"] = {"measured_s": sum(measured.values()),
                                        "predicted_s": sum(pred.per_node[n] for n in measured),
                                        "nodes": {n: [pred.per_node[n], measured[n], *pred.codec_nodes[n]]
                                                  for n in measured},
                                        "load": os.getloadavg()[0]}
            err = rec["predicted_s"] / rec["measured_s"] - 1
            print(f"[{key}] {g}: predicted {rec['predicted_s']:.3f} s, measured {rec['measured_s']:.3f} s "
                  f"({err:+.1%})", flush=True)
            _save(out, data)


def repredict(path: Path, cost_path: str | None) -> None:
    """Redo every stored prediction with the current cost model and each entry's stored baseline profile
    (predictions are a function of profile, model and graph; the measurements stay as they were)."""
    data = _load(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CostModelWarning)
        cost = CostModel.load(cost_path)
    for key, entry in data["runs"].items():
        if "profile" not in entry:
            continue
        art = Path(entry["dir"])
        prof = NodeTimes.from_dict(entry["profile"])
        base_graph = onnx.load(str(art / "training_model.onnx"), load_external_data=False)
        prof.features, prof.weights = node_features(base_graph), node_weights(base_graph)
        for g, rec in entry["graphs"].items():
            if not (art / g).exists():
                continue
            pred = predict_step(onnx.load(str(art / g), load_external_data=False), cost, prof)
            rec.update(predicted_s=pred.total, predicted_ort_s=pred.ort_ops, predicted_codec_s=pred.codec_ops,
                       predicted_overhead_s=pred.overhead, cost_source=cost.source)
            cp = rec.get("codec_profile")
            if cp:
                for n, v in cp["nodes"].items():
                    v[0] = pred.per_node.get(n, v[0])
                cp["predicted_s"] = sum(v[0] for v in cp["nodes"].values())
    _save(path, data)


def report(path: Path) -> None:
    data = _load(path)
    rows = []
    for key, entry in sorted(data["runs"].items()):
        base = entry["graphs"].get("training_model.onnx", {})
        for g, rec in entry["graphs"].items():
            if "measured_s" not in rec:
                continue
            # the slowdown over the baseline, predicted vs measured: insensitive to a load level that drifts
            # between the baseline's profile and the measurements, as long as baseline and graph were close
            ratio_err = None
            if g != "training_model.onnx" and "measured_s" in base:
                ratio_err = (rec["predicted_s"] / base["predicted_s"]) / (rec["measured_s"] / base["measured_s"]) - 1
            cp = rec.get("codec_profile")
            codec_err = (cp["predicted_s"] / cp["measured_s"] - 1) if cp and cp["measured_s"] > 0 else None
            node_errs = [abs(v[0] / v[1] - 1) for v in cp["nodes"].values() if v[1] > 0] if cp else []
            rows.append((Path(entry["dir"]).name, entry["settings"], g.removesuffix(".onnx"), rec["predicted_s"],
                         rec["measured_s"], rec["predicted_s"] / rec["measured_s"] - 1, codec_err,
                         statistics.mean(node_errs) if node_errs else None, rec.get("load", [None])[0], ratio_err))
    print("| model | settings | graph | predicted s | measured s (median) | error | error of the slowdown vs "
          "baseline | codec time error (sum) | codec ops: mean per-op error | load |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        ce = f"{r[6]:+.1%}" if r[6] is not None else "—"
        ne = f"{r[7]:.1%}" if r[7] is not None else "—"
        re_ = f"{r[9]:+.1%}" if r[9] is not None else "—"
        print(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]:.3f} | {r[4]:.3f} | {r[5]:+.1%} | {re_} | {ce} | {ne} | {r[8]:.1f} |")
    for key, entry in sorted(data["runs"].items()):
        for g, rec in entry["graphs"].items():
            if "error" in rec:
                print(f"| {Path(entry['dir']).name} | {entry['settings']} | {g.removesuffix('.onnx')} | "
                      f"{rec['predicted_s']:.3f} | failed: {rec['error'][:160]} | | | | | |")
    if rows:
        errs = [abs(r[5]) for r in rows]
        within = sum(e <= 0.10 for e in errs)
        print(f"\n{len(rows)} graphs: mean |error| {statistics.mean(errs):.1%}, max {max(errs):.1%}, "
              f"{within}/{len(rows)} within 10 %")
        re_ = [abs(r[9]) for r in rows if r[9] is not None]
        if re_:
            print(f"slowdown vs baseline: mean |error| {statistics.mean(re_):.1%}, max {max(re_):.1%}, "
                  f"{sum(e <= 0.10 for e in re_)}/{len(re_)} within 10 %")
        ce = [abs(r[6]) for r in rows if r[6] is not None]
        if ce:
            print(f"codec time (sum over a graph's codec ops): mean |error| {statistics.mean(ce):.1%} over {len(ce)} graphs")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir", nargs="?", help="artifact directory holding training_model.onnx and <policy>.onnx")
    ap.add_argument("--policies", nargs="*", default=["lossless", "comet", "dpr-fp16", "zfp-8", "rows", "recompute"])
    ap.add_argument("--settings", nargs="+", choices=sorted(SETTINGS), default=["measure"])
    ap.add_argument("--steps", type=int, default=5, help="measured steps per graph (median taken)")
    ap.add_argument("--profile-steps", type=int, default=2)
    ap.add_argument("--cost", help="cost model JSON (default: CostModel.load())")
    ap.add_argument("--codec-error", action="store_true", help="also profile each transformed graph to compare "
                    "its codec ops' predicted and profiled times")
    ap.add_argument("--remeasure", action="store_true")
    ap.add_argument("--reprofile", action="store_true")
    ap.add_argument("--json", required=True)
    ap.add_argument("--report", action="store_true", help="print the table of everything in --json and exit")
    ap.add_argument("--repredict", action="store_true", help="redo the stored predictions with the current cost "
                    "model (--cost) and the stored profiles, then report; measurements are kept")
    args = ap.parse_args(argv)
    if args.repredict:
        repredict(Path(args.json), args.cost)
    if args.report or args.repredict:
        report(Path(args.json))
        return 0
    if not args.dir:
        ap.error("give an artifact directory (or --report)")
    run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
