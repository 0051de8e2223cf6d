"""Fit the cost model's per-codec in-step factors against measured benchmark rounds, report, and write them.

Input: JSON files written by ``tools/bench_cost_model.py`` (each holds, per chunk, the baseline's profile and
every graph's measured step); the graphs they name must still exist on disk (predictions are redone from the
stored profile with the cost model given by --cost, its own in-step factors switched off). A round is a set
of files measured together: ``--round NAME FILE...`` (repeatable); plain files, given before any --round,
are one round each. Equal weight per round; the fit itself is ``onnxcomp.planner.instep_fit.fit_codec_instep``.

    python tools/fit_codec_instep.py --round q docs/cost_model/costquiet/q_*.json --round b1 ... --loo
    python tools/fit_codec_instep.py --round ... --write ~/.cache/onnxcomp/cost_model.json   # the user's model
    python tools/fit_codec_instep.py --round ... --write onnxcomp/planner/cost_model_defaults.json  # shipped

--write replaces only the ``codec_instep`` entry of the file named (which must already be a cost model: run
``onnxcomp calibrate`` first for a user calibration); --loo prints leave-one-round-out before/after figures.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import warnings
from pathlib import Path
from typing import Any

import onnx

from onnxcomp.planner.cost_model import (CostModel, CostModelWarning, NodeTimes, node_features, node_weights,
                                         predict_step)
from onnxcomp.planner.instep_fit import InstepSample, error_stats, fit_codec_instep, leave_one_group_out


def samples_from_bench(paths: list[str], cost: CostModel, group: str) -> list[InstepSample]:
    """Every measured graph of the bench JSONs ``paths``, predicted with ``cost`` minus its in-step factors."""
    base_cost = dataclasses.replace(cost, codec_instep={})
    out: list[InstepSample] = []
    for path in paths:
        data = json.loads(Path(path).read_text())
        for key, entry in data.get("runs", {}).items():
            if "profile" not in entry:
                continue
            art = Path(entry["dir"])
            prof = NodeTimes.from_dict(entry["profile"])
            base_graph = onnx.load(str(art / "training_model.onnx"), load_external_data=False)
            prof.features, prof.weights = node_features(base_graph), node_weights(base_graph)
            arena = bool(prof.settings.get("arena"))
            for g, rec in sorted(entry["graphs"].items()):
                if "measured_s" not in rec or not (art / g).exists():
                    continue
                pred = predict_step(onnx.load(str(art / g), load_external_data=False), base_cost, prof)
                codec: dict[tuple[str, str], float] = {}
                for name, (c, d, _n, _nz) in pred.codec_nodes.items():
                    codec[(c, d)] = codec.get((c, d), 0.0) + pred.per_node[name]
                out.append(InstepSample(rec["measured_s"], pred.total, codec, arena, group,
                                        f"{art.name} {entry['settings']} {g.removesuffix('.onnx')}"))
    return out


def _fmt(st: dict[str, float]) -> str:
    return f"{st['within']}/{st['n']} within 10 %, mean {st['mean']:.1%}, worst {st['worst']:.1%}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="*", help="bench_cost_model.py JSONs, one round each")
    ap.add_argument("--round", nargs="+", action="append", default=[], metavar=("NAME", "FILE"),
                    help="a round: its name, then its files")
    ap.add_argument("--cost", help="cost model to fit against (default: CostModel.load())")
    ap.add_argument("--bounds", nargs=2, type=float, default=(0.5, 3.0))
    ap.add_argument("--min-share", type=float, default=0.05)
    ap.add_argument("--min-samples", type=int, default=4)
    ap.add_argument("--no-split-arena", action="store_true")
    ap.add_argument("--loo", action="store_true", help="leave-one-round-out report")
    ap.add_argument("--verbose", action="store_true", help="every graph's error before / after (all-round fit)")
    ap.add_argument("--write", help="cost model JSON whose codec_instep entry is replaced by this fit")
    args = ap.parse_args(argv)
    rounds = [(r[0], r[1:]) for r in args.round] + [(Path(f).stem, [f]) for f in args.files]
    if not rounds or any(not files for _, files in rounds):
        ap.error("give at least one round with files")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CostModelWarning)
        cost = CostModel.load(args.cost)
    samples = [s for name, files in rounds for s in samples_from_bench(files, cost, name)]
    kw: dict[str, Any] = dict(bounds=tuple(args.bounds), min_share=args.min_share, min_samples=args.min_samples,
                              split_arena=not args.no_split_arena)
    fit = fit_codec_instep(samples, **kw)
    print(f"{len(samples)} measured graphs in {len(rounds)} rounds; fitted: {', '.join(fit.info['fitted']) or 'none'}"
          f"{'; at a bound: ' + ', '.join(fit.info['at_bound']) if fit.info.get('at_bound') else ''}")
    for table, name in ((fit.scale, "no arena"), (fit.scale_arena, "arena")):
        for codec, dirs in sorted(table.items()):
            print(f"  {codec:14s} ({name}): x{dirs['encode']:.3f}")
    print(f"in-sample: before {_fmt(error_stats(s.base / s.measured - 1 for s in samples))}; "
          f"after {_fmt(error_stats(fit.predict(s) / s.measured - 1 for s in samples))}")
    if args.verbose:
        for s in samples:
            print(f"  {s.group:10s} {s.label:40s} {s.base / s.measured - 1:+7.1%} -> {fit.predict(s) / s.measured - 1:+7.1%}")
    if args.loo and len(rounds) > 1:
        loo = leave_one_group_out(samples, **kw)
        for g, r in loo.items():
            print(f"  held out {g:10s} before {_fmt(r['before'])}  after {_fmt(r['after'])}")
        tot = {k: sum(r[k]["within"] for r in loo.values()) for k in ("before", "after")}
        print(f"leave-one-round-out: within 10 % {tot['before']} -> {tot['after']} of {len(samples)}")
    if args.write:
        path = Path(os.path.expanduser(args.write))
        data = json.loads(path.read_text())
        CostModel.from_dict(data)  # must already be a cost model
        data["codec_instep"] = {**fit.to_dict(), "rounds": [name for name, _ in rounds],
                                "fitted_against": cost.source}
        CostModel.from_dict(data)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        os.replace(tmp, path)
        print(f"wrote codec_instep into {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
