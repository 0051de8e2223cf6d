"""Measured training-step peaks of the architecture suite (models/suite.py): baseline vs policies, under ORT's
default session settings and under onnxcomp's measurement settings, with medians over the suite.

Per net (its suite batch and odd image size, 10 classes): ``onnxcomp artifacts``, ``onnxcomp transform`` with
each policy, then ``onnxcomp measure`` (a fresh process per figure) under

* ``ort-default`` — arena, mem pattern, mem reuse on, DEFAULT execution order (what a user gets),
* ``onnxcomp``    — arena, mem pattern and reuse off, PRIORITY_BASED order (``onnxcomp measure``'s default).

Two memory figures per run: ``peak`` — the training step's peak over its pre-step RSS (max over steps) and
``growth`` — the peak over the RSS after session set-up (what the arena keeps counts here). Every finished
measurement is cached in ``--work`` as JSON, so an interrupted run resumes. Example:

    .venv/bin/python tools/bench_suite.py --work /tmp/suite --policies lossless dpr-fp16 comet zfp-8 \\
        --out docs/suite
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from onnxcomp.errors import OnnxcompError
from onnxcomp.models.suite import SUITE_BATCH, SUITE_NAMES, suite_image

SETTINGS = {
    "ort-default": {"arena": True, "mem_pattern": True, "mem_reuse": True, "execution_order": "default"},
    "onnxcomp": {"arena": False, "mem_pattern": False, "mem_reuse": False, "execution_order": "priority"},
}
MIB = 1 << 20


def _artifacts(name: str, work: Path, classes: int) -> Path:
    from onnxcomp.models.artifacts import generate_artifacts

    art = work / name
    if not (art / "training_model.onnx").exists():
        generate_artifacts(name, SUITE_BATCH[name], suite_image(name), classes, art, overwrite=True)
    return art


def _graph(art: Path, policy: str) -> Path | None:
    """The policy's training graph inside the artifact directory (None for the baseline)."""
    if policy == "baseline":
        return None
    from onnxcomp.transform import transform

    path = art / f"{policy}.onnx"
    if not path.exists():
        transform(art, path, policy)
    return path


def _measure(art: Path, graph: Path | None, settings: str, steps: int, cache: Path) -> dict[str, Any]:
    if cache.exists():
        return json.loads(cache.read_text())
    from onnxcomp.runtime.measure import measure
    from onnxcomp.runtime.session import RuntimeSettings

    res = measure(art, model=graph, steps=steps, settings=RuntimeSettings(**SETTINGS[settings])).to_dict()
    row = {"peak_bytes": res["peak_bytes"], "growth_bytes": res["growth_bytes"], "step_time_s": res["step_time_s"],
           "process_peak_bytes": res["extras"].get("process_peak_bytes"), "losses": res["losses"],
           "settings": res["settings"]}
    cache.write_text(json.dumps(row))
    return row


def run(names: list[str], policies: list[str], work: Path, steps: int, classes: int,
        cached_only: bool = False) -> list[dict[str, Any]]:
    rows = []
    for name in names:
        if cached_only:  # tables from what earlier (possibly interrupted) runs measured
            for policy in ["baseline", *policies]:
                for settings in SETTINGS:
                    cache = work / f"{name}.{policy}.{settings}.json"
                    if cache.exists():
                        m = json.loads(cache.read_text())
                        rows.append({"model": name, "batch": SUITE_BATCH[name], "image": suite_image(name),
                                     "policy": policy, **m, "settings": settings, "ort_settings": m["settings"]})
            continue
        art = _artifacts(name, work, classes)
        for policy in ["baseline", *policies]:
            try:
                graph = _graph(art, policy)
            except OnnxcompError as exc:
                print(f"{name} {policy}: transform failed: {exc}", file=sys.stderr)
                continue
            for settings in SETTINGS:
                t = time.perf_counter()
                m = _measure(art, graph, settings, steps, work / f"{name}.{policy}.{settings}.json")
                rows.append({"model": name, "batch": SUITE_BATCH[name], "image": suite_image(name),
                             "policy": policy, **m, "settings": settings, "ort_settings": m["settings"]})
                print(f"{name:15s} {policy:10s} {settings:11s} peak {m['peak_bytes'] / MIB:7.1f} MiB  growth "
                      f"{m['growth_bytes'] / MIB:7.1f} MiB  ({time.perf_counter() - t:.0f} s)", flush=True)
    return rows


def _ratio(rows: list[dict[str, Any]], name: str, policy: str, settings: str, key: str) -> float | None:
    pick = {(r["model"], r["policy"], r["settings"]): r for r in rows}
    base, pol = pick.get((name, "baseline", settings)), pick.get((name, policy, settings))
    if not base or not pol or not pol.get(key) or (base.get(key) or 0) < MIB:  # ~0 step peak: the arena kept
        # warm-up's memory; no process peak: a figure cached before it was recorded
        return None
    return base[key] / pol[key]


def tables(rows: list[dict[str, Any]], policies: list[str]) -> str:
    names = list(dict.fromkeys(r["model"] for r in rows))
    out = []
    for settings in SETTINGS:
        # the process's peak too: a policy's set-up (codec kernels, a larger graph) can outweigh what it saves
        for key, label in (("peak_bytes", "step peak"), ("growth_bytes", "growth over set-up"),
                           ("process_peak_bytes", "process peak")):
            out.append(f"### {label}, {settings} settings (MiB; ratio = baseline / policy)\n")
            out.append("| model | batch | image | baseline | " + " | ".join(policies) + " |")
            out.append("|" + "---|" * (4 + len(policies)))
            pick = {(r["model"], r["policy"], r["settings"]): r for r in rows}
            for name in names:
                base = pick.get((name, "baseline", settings))
                if not base or not base.get(key):
                    continue
                cells = []
                for p in policies:
                    r = pick.get((name, p, settings))
                    ratio = _ratio(rows, name, p, settings, key)
                    cells.append(f"{r[key] / MIB:.1f} ({ratio:.2f}×)" if r and ratio else "—")
                out.append(f"| {name} | {base['batch']} | {base['image']} | {base[key] / MIB:.1f} | "
                           + " | ".join(cells) + " |")
            meds = []
            for p in policies:
                vals = [v for n in names if (v := _ratio(rows, n, p, settings, key)) is not None]
                meds.append(f"**{statistics.median(vals):.2f}×**" if vals else "—")
            out.append("| **median ratio** | | | | " + " | ".join(meds) + " |\n")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, default=Path("/tmp/onnxcomp_suite"), help="artifacts + cached figures")
    ap.add_argument("--models", nargs="+", default=list(SUITE_NAMES), choices=list(SUITE_NAMES))
    ap.add_argument("--policies", nargs="+", default=["lossless", "dpr-fp16", "comet", "zfp-8"])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--cached-only", action="store_true", help="no measuring: tables from the figures in --work")
    ap.add_argument("--out", type=Path, default=None, help="write suite.json + tables.md here")
    args = ap.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    rows = run(args.models, args.policies, args.work, args.steps, args.classes, args.cached_only)
    text = tables(rows, args.policies)
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "suite.json").write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()},
                                                         "settings": SETTINGS, "rows": rows}, indent=1))
        (args.out / "tables.md").write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
