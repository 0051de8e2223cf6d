"""The tightest budget `--policy auto` accepts, with and without `--exact`, measured (issue 12, item 2).

Per model (zoo: batch 32, 64×64, 1000 classes; suite nets, models/suite.py: their suite batch and image, 10
classes): generate artifacts, find the tightest budget the planner accepts (plan once with an unreachable
budget: the best reachable predicted peak P; the tightest budget is the smallest of tightest_budget_for(P) + 64 KiB,
+2 %, +4 %, … that plans to fit), write that plan with ``onnxcomp transform DIR -o OUT --policy auto --budget B
[--exact]`` (a directory output: a plan may split weights), then ``onnxcomp measure`` in fresh processes under

* ``onnxcomp``    — measure's defaults (arena, mem pattern and reuse off, PRIORITY_BASED order): what the
  budget means;
* ``ort-default`` — arena, mem pattern, mem reuse on, DEFAULT order: what a user gets.

Figures: ``peak`` (step peak over pre-step RSS, max over steps), ``growth`` (peak over the RSS after set-up,
what ORT's arena keeps counts here), step time (median step; ``--timing`` takes the shared timing lock
/tmp/onnxcomp-timing.lock around each timed measurement and runs it at normal priority), losses (exact plans
must give the baseline's losses bit for bit). Every finished measurement is cached in ``--work``.

    .venv/bin/python tools/bench_auto.py --work /tmp/auto-bench --models resnet18 vgg16 mobilenet_v2 \\
        squeezenet_s densenet_s leaky_vgg plain_deep mobilenet_v1_s wide_resnet_s --out docs/auto
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

MIB = 1 << 20
ZOO = ("resnet18", "vgg16", "mobilenet_v2")
SETTINGS = {
    "onnxcomp": {"arena": False, "mem_pattern": False, "mem_reuse": False, "execution_order": "priority"},
    "ort-default": {"arena": True, "mem_pattern": True, "mem_reuse": True, "execution_order": "default"},
}
MODES = {"exact": True, "auto": False}
LOCK = "/tmp/onnxcomp-timing.lock"


def _shape(name: str) -> tuple[int, int, int]:
    from onnxcomp.models.suite import SUITE_BATCH, suite_image

    return (32, 64, 1000) if name in ZOO else (SUITE_BATCH[name], suite_image(name), 10)


def _artifacts(name: str, work: Path) -> Path:
    from onnxcomp.models.artifacts import generate_artifacts

    batch, image, classes = _shape(name)
    art = work / name
    if not (art / "training_model.onnx").exists():
        generate_artifacts(name, batch, image, classes, art, overwrite=True, smoke_test=False)
    return art


def tightest_budget(model: Any, exact: bool) -> tuple[int, Any, int]:
    """(budget, plan, plans tried): the smallest budget on the ladder above the best reachable peak that the
    planner accepts."""
    from onnxcomp.planner.auto import plan_auto, tightest_budget_for

    floor = plan_auto(model, 1 << 16, exact=exact)
    if floor.fits:
        return 1 << 16, floor, 1
    first = tightest_budget_for(floor.predicted_peak) + (64 << 10)
    for k in range(8):
        budget = int(first * (1 + 0.02 * k))
        plan = plan_auto(model, budget, exact=exact)
        if plan.fits:
            return budget, plan, k + 2
    raise RuntimeError(f"no budget up to {budget / MIB:.1f} MiB accepted (floor {floor.predicted_peak / MIB:.1f} MiB)")


def _measure(art: Path, graph_dir: Path | None, settings: str, steps: int, cache: Path, timing: bool) -> dict:
    if cache.exists():
        return json.loads(cache.read_text())
    from onnxcomp.fileio import held_flock
    from onnxcomp.runtime.measure import measure
    from onnxcomp.runtime.session import RuntimeSettings

    with held_flock(LOCK if timing and settings == "onnxcomp" else None):
        load = os.getloadavg()[0]
        res = measure(graph_dir or art, steps=steps, settings=RuntimeSettings(**SETTINGS[settings])).to_dict()
    row = {"peak_bytes": res["peak_bytes"], "growth_bytes": res["growth_bytes"], "step_time_s": res["step_time_s"],
           "losses": res["losses"], "settings": res["settings"], "load_avg_1min": load, "timing_lock": timing}
    cache.write_text(json.dumps(row))
    return row


def run_model(name: str, work: Path, steps: int, timing: bool, modes: list[str]) -> list[dict[str, Any]]:
    import onnx

    from onnxcomp.transform import transform

    art = _artifacts(name, work)
    batch, image, _ = _shape(name)
    rows = []
    base = {s: _measure(art, None, s, steps, work / f"{name}.baseline.{s}.json", timing) for s in SETTINGS}
    for mode in modes:
        meta = work / f"{name}.{mode}.plan.json"
        out = work / f"{name}_auto_{mode}"
        if meta.exists() and (out / "training_model.onnx").exists():
            info = json.loads(meta.read_text())
        else:
            model = onnx.load(str(art / "training_model.onnx"))
            t = time.perf_counter()
            budget, plan, tried = tightest_budget(model, MODES[mode])
            search_s = time.perf_counter() - t
            t = time.perf_counter()
            transform(art, out, "auto", budget_bytes=budget, exact=MODES[mode], force=True)
            info = {"budget_bytes": budget, "predicted_peak_bytes": plan.predicted_peak, "plans": tried,
                    "search_s": search_s, "transform_s": time.perf_counter() - t,
                    "baseline_predicted_peak_bytes": plan.baseline_peak,
                    "techniques": sorted({d["technique"] for d in plan.decisions()})}
            meta.write_text(json.dumps(info))
        for s in SETTINGS:
            m = _measure(art, out, s, steps, work / f"{name}.{mode}.{s}.json", timing)
            b = base[s]
            row = {"model": name, "batch": batch, "image": image, "mode": mode, "settings": s, **info,
                   "peak_bytes": m["peak_bytes"], "growth_bytes": m["growth_bytes"],
                   "baseline_peak_bytes": b["peak_bytes"], "baseline_growth_bytes": b["growth_bytes"],
                   "step_time_ratio": m["step_time_s"] / b["step_time_s"] if b["step_time_s"] else None,
                   "losses_identical": m["losses"] == b["losses"][:len(m["losses"])], "load_avg_1min": m["load_avg_1min"]}
            row["fits_measured"] = m["peak_bytes"] <= info["budget_bytes"] if s == "onnxcomp" else None
            rows.append(row)
            print(f"{name:14s} {mode:5s} {s:11s} budget {info['budget_bytes'] / MIB:7.1f}  peak "
                  f"{m['peak_bytes'] / MIB:7.1f} (base {b['peak_bytes'] / MIB:7.1f})  growth "
                  f"{m['growth_bytes'] / MIB:7.1f} (base {b['growth_bytes'] / MIB:7.1f})", flush=True)
    return rows


def _ratio(a: float, b: float) -> float | None:
    return a / b if b > 0 else None


def tables(rows: list[dict[str, Any]]) -> str:
    def fmt(x: float | None) -> str:
        return f"{x:.2f}×" if x is not None else "—"

    out = []
    for mode in MODES:
        sel = [r for r in rows if r["mode"] == mode]
        if not sel:
            continue
        out.append(f"### `auto{' --exact' if MODES[mode] else ''}` at the tightest budget it accepts\n")
        out.append("| model | batch | image | budget (MiB) | predicted | measured peak, onnxcomp settings | ratio | "
                   "fits | ORT defaults: step peak | ratio | ORT defaults: growth | ratio | step time × | "
                   "losses = baseline |")
        out.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        ratios: dict[str, list[float]] = {"peak": [], "ort_peak": [], "ort_growth": []}
        for name in dict.fromkeys(r["model"] for r in sel):
            a = next((r for r in sel if r["model"] == name and r["settings"] == "onnxcomp"), None)
            d = next((r for r in sel if r["model"] == name and r["settings"] == "ort-default"), None)
            if a is None or d is None:
                continue
            rp = _ratio(a["baseline_peak_bytes"], a["peak_bytes"])
            # With the arena on, a per-step peak reads ~0 once the arena holds the memory: no ratio then.
            rd = _ratio(d["baseline_peak_bytes"], d["peak_bytes"]) \
                if min(d["baseline_peak_bytes"], d["peak_bytes"]) > MIB else None
            rg = _ratio(d["baseline_growth_bytes"], d["growth_bytes"])
            for k, v in (("peak", rp), ("ort_peak", rd), ("ort_growth", rg)):
                if v is not None:
                    ratios[k].append(v)
            st = f"{a['step_time_ratio']:.2f}" if a["step_time_ratio"] else "—"
            out.append(f"| {name} | {a['batch']} | {a['image']} | {a['budget_bytes'] / MIB:.1f} | "
                       f"{a['predicted_peak_bytes'] / MIB:.1f} | {a['peak_bytes'] / MIB:.1f} (base "
                       f"{a['baseline_peak_bytes'] / MIB:.1f}) | {fmt(rp)} | {'yes' if a['fits_measured'] else 'NO'} | "
                       f"{d['peak_bytes'] / MIB:.1f} (base {d['baseline_peak_bytes'] / MIB:.1f}) | {fmt(rd)} | "
                       f"{d['growth_bytes'] / MIB:.1f} (base {d['baseline_growth_bytes'] / MIB:.1f}) | {fmt(rg)} | "
                       f"{st} | {'yes' if a['losses_identical'] else 'no'} |")
        out.append("")
        for k, label in (("peak", "step peak, onnxcomp settings"), ("ort_peak", "step peak, ORT defaults"),
                         ("ort_growth", "growth over set-up, ORT defaults")):
            if ratios[k]:
                out.append(f"- median ratio, {label}: **{statistics.median(ratios[k]):.2f}×** over "
                           f"{len(ratios[k])} model(s)")
        out.append("")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    from onnxcomp.models.suite import SUITE_NAMES

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, required=True, help="artifacts, plans and cached measurements")
    ap.add_argument("--models", nargs="+", default=[*ZOO, *SUITE_NAMES], choices=[*ZOO, *SUITE_NAMES])
    ap.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--timing", action="store_true", help="hold the shared timing lock for timed measurements")
    ap.add_argument("--out", type=Path, help="write auto.json and tables.md here")
    ap.add_argument("--cached-only", action="store_true", help="tables from cached measurements only")
    args = ap.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    for name in args.models:
        if args.cached_only and not all((args.work / f"{name}.{m}.plan.json").exists() for m in args.modes):
            continue
        try:
            rows += run_model(name, args.work, args.steps, args.timing, args.modes)
        except Exception as exc:  # noqa: BLE001  (one model's failure is reported, the others still run)
            print(f"{name}: failed: {type(exc).__name__}: {exc}", file=sys.stderr)
    text = tables(rows)
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "auto.json").write_text(json.dumps(rows, indent=2))
        (args.out / "tables.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
