"""Subcommands built on the rewrite passes: transform, train, demo."""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from . import cli_args
from .errors import OnnxcompError

MiB = 1 << 20


def _mib(n: float) -> str:
    return f"{n / MiB:,.2f} MiB"


def print_transform_summary(summary: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    b, a = summary["before"], summary["after"]
    console = Console()  # the terminal's width (rich wraps long names)
    console.print(f"policy [bold]{summary['policy']}[/bold]: {summary['encoded']} stashed tensor(s) encoded "
                  f"→ {summary['output']}  (plan: {summary['plan']})")
    t = Table(header_style="bold")
    t.add_column(""), t.add_column("before", justify="right"), t.add_column("after", justify="right")
    t.add_column("ratio", justify="right")
    for label, key in [("stashed bytes", "stashed_bytes"), ("planner: lower bound", "lower_bound_bytes"),
                       ("planner: offset plan", "offset_bytes"), ("planner: CNTK sharing", "cntk_bytes")]:
        t.add_row(label, _mib(b[key]), _mib(a[key]), f"{b[key] / max(a[key], 1):.2f}×")
    console.print(t)
    for d in summary.get("deferred", []):
        console.print(f"deferred to the end of backward: {d['producer']} "
                      f"({_mib(d['gradient_bytes'])} weight gradient, computed after {d['after']})")
    for d in summary.get("split_weights", []):
        console.print(f"weight held as {len(d['parts'])} row blocks: {d['parameter']} {d['shape']} "
                      f"-> {d['parts'][0]} ... {d['parts'][-1]}")
    auto = summary.get("auto")
    if auto:
        from collections import Counter

        used = Counter(d["technique"] for d in auto["decisions"])
        console.print(f"auto: predicted step peak {_mib(auto['baseline_predicted_peak_bytes'])} → "
                      f"{_mib(auto['predicted_peak_bytes'])} within the budget of {_mib(auto['budget_bytes'])}"
                      f"{' (exact only)' if auto['exact'] else ''}; "
                      + ", ".join(f"{t} ×{n}" for t, n in used.most_common()) + " (one record per decision "
                      "in the plan JSON's \"auto\")")
    for d in summary.get("chunked", []):
        how = f", its input {d['dropped_stashes'][0]} recomputed per chunk" if d.get("dropped_stashes") else ""
        if "site" in d:
            console.print(f"backward region in {d['chunks']} batch chunks: {d['site']}{how}")
        else:   # attention (passes/chunk_attention): per (batch, head) slices
            console.print(f"attention {d.get('pattern', 'region')} in {d['chunks']} chunks along axis "
                          f"{d.get('axis')}: {d['region']}")
    if summary["skipped"]:
        shown = summary["skipped"][:10]
        more = len(summary["skipped"]) - len(shown)
        console.print(f"{len(summary['skipped'])} stashed tensor(s) a pass looked at and left as they are (for "
                      "information: they stay exact)" + (f"; {len(shown)} shown, {more} more with --json:" if more
                                                          else ":"))
        for s in shown:
            console.print(f"  {s['name']} ({s['pattern']}): {s['reason']}")
    left = [x for x in summary["left_alone"] if x["bytes"] >= 1024]
    if left:
        total = sum(x["bytes"] for x in left)
        console.print(f"{len(left)} stashed tensor(s) left as they are ({_mib(total)}), e.g. "
                      + "; ".join(f"{x['name']} — {x['reason']}" for x in left[:3]))


def cmd_transform(args: argparse.Namespace) -> int:
    from .planner.growth_budget import GROWTH_MODES, VERIFIED_GROWTH_MARGIN
    from .transform import transform

    from .transform import load_policy_config

    options: dict[str, Any] = load_policy_config(args.config) if args.config else {}
    cli_options = {"min_bytes": args.min_bytes, "eb": args.eb, "dpr_format": args.dpr_format,
                   "rows": args.rows, "variant": args.variant, "checkpoints": args.checkpoints,
                   "budget_bytes": args.budget,
                   "split_weight_bytes": args.split_weights}
    if args.static_eb:
        cli_options["adaptive"] = False
    if args.exact:
        cli_options["exact"] = True
    if args.budget_for != "step-peak":
        if args.policy != "auto" or args.budget is None:
            raise OnnxcompError("--budget-for applies to the budget planner: add --policy auto --budget SIZE",
                                options=("budget_for",))
        cli_options["budget_for"] = args.budget_for
    options.update({k: v for k, v in cli_options.items() if v is not None})
    verify = getattr(args, "verify", False)
    if verify and (args.policy != "auto" or args.budget is None):
        raise OnnxcompError("--verify checks a budget by measurement: add --policy auto --budget SIZE")
    margin = getattr(args, "margin", None)
    if margin is not None:
        if args.policy != "auto" or args.budget is None:
            raise OnnxcompError("--margin applies to the budget planner: add --policy auto --budget SIZE",
                                options=("margin",))
        options["margin"] = margin
    elif verify and options.get("budget_for") in GROWTH_MODES:
        # A measurement checks the plan and re-plans it lower when it is over: the growth planner's margin need
        # not guard the budget too (planner/growth_budget.VERIFIED_GROWTH_MARGIN).
        options["margin"] = VERIFIED_GROWTH_MARGIN

    def write(budget: int | None = None, accept: Any = None) -> Any:
        opts = options if budget is None else options | {"budget_bytes": budget}
        return transform(args.path, args.output, args.policy, model=args.model, force=args.force,
                         batch=args.batch, allow_unresolved=args.allow_unresolved, lift_convs=args.lift_convs,
                         accept=accept, **opts)

    verified = None
    if verify:
        verified = _verified_transform(args, write, options)
        result = verified.result
    else:
        result = write()
    summary = result.summary()
    if verified is not None:
        summary["verify"] = verified.to_dict()
    if args.json:
        cli_args.print_json(summary | {"tensors": [r.to_dict() for r in result.records]})
    else:
        print_transform_summary(summary)
    return 0


class _MeasuredOver(Exception):
    """A plan's written graph measured over the budget: transform publishes nothing (its ``accept`` raised)."""


def _verified_transform(args: argparse.Namespace, write: Any, options: dict[str, Any]) -> Any:
    """``transform`` under ``--verify`` (planner/budget_verify.py): each plan written beside the output, measured
    there in a child process under the budget's own settings, published only when it measures within the budget;
    re-planned for a lower internal budget while it measures over. No plan within: exit 2, the output untouched."""
    from .planner.auto import BudgetError
    from .planner.budget_verify import verify_budget
    from .runtime.measure import measure
    from .runtime.session import RuntimeSettings

    if Path(args.output).suffix == ".onnx" and not Path(args.path).is_dir():
        raise OnnxcompError(f"{args.path}: --verify trains the written graph, which needs an artifact directory "
                            "(checkpoint, optimizer model); give the directory, not a model file")
    from .planner.growth_budget import GROWTH_MODES

    growth = options.get("budget_for") in GROWTH_MODES
    total = options.get("budget_for") == "ort-defaults-total"
    settings = RuntimeSettings(arena=True, mem_pattern=True, mem_reuse=True, execution_order="default") \
        if growth else RuntimeSettings()
    figure = "growth_bytes + set-up added" if total else ("growth_bytes" if growth else "peak_bytes")
    budget = int(options["budget_bytes"])
    last: dict[str, int] = {}
    base_set_up: list[int] = []       # the untouched graph's rss_setup_bytes, measured once

    def measured(artifact: Path, model: Path | None) -> int:
        got = measure(artifact, model=model, steps=3, settings=settings)
        if not total:
            return int(getattr(got, figure))
        if not base_set_up:       # the input graph, same settings and steps (the set-up holds the steps' batches)
            src = Path(args.path)
            dir_, graph = (src, args.model) if src.is_dir() else (src.parent, src)
            base_set_up.append(int(measure(dir_, model=graph, steps=3, settings=settings).rss_setup_bytes))
        return int(got.growth_bytes) + int(got.rss_setup_bytes) - base_set_up[0]

    def accept(artifact: Path, model: Path | None) -> None:
        last["measured"] = measured(artifact, model)
        if last["measured"] > budget:
            raise _MeasuredOver

    def write_at(internal: int) -> Any:
        last.clear()
        try:
            return write(internal, accept=accept)
        except _MeasuredOver:
            return None

    say = None if args.json else (lambda m: print(m, file=sys.stderr))
    try:
        return verify_budget(budget, write_at, lambda _result: last["measured"], figure=figure, say=say)
    except BudgetError as exc:
        raise BudgetError(f"{exc}; nothing was written to {args.output}", predicted_peak=exc.predicted_peak,
                          target=exc.target) from None


def cmd_train(args: argparse.Namespace) -> int:
    from .runtime.train import train

    result = train(args.dir, model=args.model, steps=args.steps, data=args.data, settings=cli_args.settings(args),
                   seed=args.seed, eval_every=args.eval_every, progress=not args.json,
                   learning_rate=args.lr, save_dir=args.save)
    d = result.to_dict()
    if args.json:
        cli_args.print_json(d)
        return 0
    print(f"trained {d['steps']} steps on {d['data']} data ({d['model']}): "
          f"{d['step_time_s'] * 1000:,.1f} ms/step")
    print("loss: " + " ".join(f"{x:.4f}" for x in d["losses"][:: max(1, len(d["losses"]) // 20)]))
    if d["accuracy"] is not None:
        print(f"test accuracy: {100 * d['accuracy']:.2f}% ({d['accuracy_source']})")
    return 0


def cmd_params(args: argparse.Namespace) -> int:
    """Write a checkpoint's parameters under the user's original names (split weights merged) to .npz."""
    import numpy as np

    from .fileio import atomic_output
    from .runtime.checkpoint import merged_parameters

    from .fileio import ensure_writable

    out = Path(args.output)
    if out.suffix != ".npz":
        raise OnnxcompError(f"{out}: the output is a NumPy archive; give a name ending in .npz")
    if out.exists() and not args.force:
        raise OnnxcompError(f"{out} already exists; pass --force to replace it or choose another -o")
    if not out.parent.exists():
        raise OnnxcompError(f"{out.parent}: output directory does not exist; create it first")
    ensure_writable(out)
    params = merged_parameters(args.dir, args.model, args.checkpoint)
    with atomic_output(out) as tmp, open(tmp, "wb") as f:
        np.savez(f, **params)
    print(f"{len(params)} parameters ({sum(v.size for v in params.values()):,} values) -> {out}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """Export the bundled default model, analyse it, transform it losslessly, and measure both graphs."""
    from rich.console import Console

    from .fileio import ensure_writable

    console = Console()
    if args.json:
        ensure_writable(args.json, "--json")
    if args.workdir:
        ensure_writable(args.workdir, "--workdir", directory=True)
        return _demo(args, console, Path(args.workdir))
    with tempfile.TemporaryDirectory(prefix="onnxcomp-demo-") as tmp:  # removed afterwards, even on errors
        return _demo(args, console, Path(tmp))


def _demo(args: argparse.Namespace, console: Any, work: Path) -> int:
    from .analysis import analyze
    from .stash_report import inspect_report, render_report
    from .models.artifacts import generate_artifacts
    from .runtime.measure import measure
    from .runtime.session import RuntimeSettings
    from .transform import transform

    art = work / f"{args.model}-b{args.batch}-{args.image}px"
    console.rule(f"[bold]1. {args.model}: export + ORT training artifacts (batch {args.batch}, "
                 f"{args.image}×{args.image}, {args.classes} classes)")
    if not (art / "training_model.onnx").exists():
        generate_artifacts(args.model, args.batch, args.image, args.classes, art)
    console.print(f"artifacts in {art}")

    console.rule("[bold]2. What the training graph stashes for backward")
    report = inspect_report(analyze(art))
    report["model"] = args.model
    render_report(report, console, limit=12)

    console.rule("[bold]3. Lossless rewrite (recompute cheap layers, sign bits, MaxPool index offsets, sparse storage)")
    out = art / "lossless.onnx"
    result = transform(art, out, "lossless", force=True)
    print_transform_summary(result.summary())

    console.rule(f"[bold]4. Measured: {args.steps} training steps each, fresh processes")
    settings = RuntimeSettings()
    base = measure(art, steps=args.steps, settings=settings).to_dict()
    enc = measure(art, model=out.name, steps=args.steps, settings=settings).to_dict()
    same = base["losses"] == enc["losses"]
    console.print(f"baseline : peak {_mib(base['peak_bytes'])}, {base['step_time_s'] * 1000:,.0f} ms/step")
    console.print(f"lossless : peak {_mib(enc['peak_bytes'])}, {enc['step_time_s'] * 1000:,.0f} ms/step")
    console.print(f"peak ratio {base['peak_bytes'] / max(enc['peak_bytes'], 1):.2f}×, step-time ratio "
                  f"{enc['step_time_s'] / base['step_time_s']:.2f}, losses bit-identical: {same}")
    console.print("settings: " + ", ".join(f"{k}={v}" for k, v in settings.to_dict().items()))
    if args.json:
        json.dump({"inspect": report, "transform": result.summary(), "baseline": base, "lossless": enc},
                  open(args.json, "w"), indent=2)
    return 0 if same else 1


def _count_or_auto(what: str) -> Any:
    def parse(text: str) -> int | str:
        if text == "auto":
            return text
        try:
            n = int(text)
        except ValueError:
            n = 0
        if n < 1:
            raise argparse.ArgumentTypeError(f"{text!r}: use a {what} >= 1 or 'auto'")
        return n

    return parse


_rows_arg = _count_or_auto("row count")
_checkpoints_arg = _count_or_auto("segment count")


_UNITS = {"": 1, "b": 1, "kib": 1 << 10, "kb": 1000, "mib": 1 << 20, "mb": 10**6, "gib": 1 << 30, "gb": 10**9}


def _bytes_arg(text: str) -> int:
    import re

    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", text)
    if not m or m.group(2).lower() not in _UNITS:
        raise argparse.ArgumentTypeError(f"{text!r}: use a size like 2GiB, 512MiB or 1073741824")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


class _WholeNames(argparse.HelpFormatter):
    """Help wrapped at spaces only: a policy name (dpr-fp16, rows+lossless) is never cut at its hyphen."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        import textwrap

        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)


def add_subcommands(sub: Any) -> None:
    s = sub.add_parser("transform", help="rewrite a training graph so stashed activations are held encoded",
                       formatter_class=_WholeNames)
    s.add_argument("path", metavar="MODEL_OR_DIR")
    s.add_argument("-o", "--output", required=True,
                   help="output .onnx file (e.g. inside the artifact dir) or a new artifact directory")
    from .passes import POLICIES

    s.add_argument("--policy", default="lossless", metavar="POLICY",
                   help=f"encoding policy: {', '.join(POLICIES)} (default: lossless)")
    s.add_argument("--model", help="file name inside MODEL_OR_DIR (default training_model.onnx)")
    s.add_argument("--batch", type=cli_args.positive, help="fix a dynamic batch axis to this size before the rewrite")
    s.add_argument("--allow-unresolved", action="store_true",
                   help="rewrite even when some stashed tensors have no resolved shape (they are left alone)")
    s.add_argument("--min-bytes", type=int, default=None,
                   help="leave candidates smaller than this alone (default 65536)")
    s.add_argument("--config", metavar="FILE", help="policy config (TOML/JSON): eb, adaptive, dpr_format, "
                   "per-pattern overrides")
    lossy = s.add_argument_group("lossy policies (dpr-*, comet)")
    lossy.add_argument("--eb", type=float, help="error bound the error-bounded codec starts from (default 1e-3)")
    lossy.add_argument("--static-eb", action="store_true",
                       help="keep --eb fixed during training (the ablation of COMET's adaptive bound)")
    lossy.add_argument("--split-weights", type=_bytes_arg, metavar="SIZE",
                       help="hold every fully connected weight larger than SIZE (e.g. 32MiB) as row blocks of at "
                       "most SIZE, so its gradient is never materialised whole (VGG's fc1: 392 MiB). Renames the "
                       "parameter (W -> W.part0, ...) in a new checkpoint: needs a directory -o; "
                       "`onnxcomp params` gives the original names back")
    lossy.add_argument("--dpr-format", choices=["fp16", "bf16", "fp10", "fp8"],
                       help="reduced precision for stashes not held otherwise (comet default fp16)")
    rows = s.add_argument_group("row-centric convolution (--policy rows)")
    rows.add_argument("--rows", type=_rows_arg, help="row blocks R per conv chain (int >= 1) or 'auto' (smallest R whose "
                      "predicted step peak fits --budget)")
    rows.add_argument("--variant", choices=["overl", "2ps"], help="overl: overlapping halos recomputed per "
                      "block; 2ps: boundary rows computed once and shared (default overl)")
    rows.add_argument("--checkpoints", type=_checkpoints_arg,
                      help="segments per chain: 'auto' (cut minimising predicted block + checkpoint bytes) "
                      "or N (hybrids OverL-H / 2PS-H)")
    rows.add_argument("--budget", type=_bytes_arg,
                      help="memory budget, e.g. 64MiB or 2GiB: for --policy auto the training step's peak as "
                      "`onnxcomp measure` reports it by default (arena, mem pattern and mem reuse off, priority "
                      "order); a budget the planner cannot meet exits 2 naming the best reachable peak. Also "
                      "the budget of --rows auto")
    auto = s.add_argument_group("--policy auto (docs/auto-planner.md)")
    auto.add_argument("--exact", action="store_true", help="only bit-identical techniques: scheduling, "
                      "recomputation, lossless encodings")
    auto.add_argument("--budget-for", choices=["step-peak", "ort-defaults", "ort-defaults-total"],
                      default="step-peak",
                      help="what --budget limits: step-peak (default) = the step's peak under onnxcomp's measure "
                      "settings; ort-defaults = the process's growth under ORT's default session settings (arena, "
                      "memory pattern, reuse: `measure --arena --mem-pattern --mem-reuse --order default`), "
                      "predicted per candidate plan; ort-defaults-total = that growth plus the set-up RSS the "
                      "transform adds over the untouched graph's (spacer parameters, ORT's per-node set-up): what "
                      "the process pays (docs/auto-planner.md)")
    auto.add_argument("--verify", action="store_true",
                      help="with --budget: train the written graph for 3 steps in a child process under the budget's "
                      "settings (ORT's defaults for --budget-for ort-defaults[-total]; -total also measures the input "
                      "graph's set-up once) and plan again for a lower internal "
                      "budget while it measures over the budget; each plan is measured before it is published: exit 2 "
                      "with the lowest measured figure, and nothing written, when no plan fits (planner/budget_verify.py)")
    auto.add_argument("--margin", type=cli_args.margin_share, default=None, metavar="F",
                      help="plan this share of --budget under it, e.g. 0.02: room for the prediction's error. "
                      "Default 0.05 (planner/auto.py, planner/growth_budget.py); with --verify and --budget-for "
                      "ort-defaults[-total] 0.02, since the measurement re-plans a plan that is over (the margin "
                      "then trades a re-plan against a looser plan; it does not guard the budget)")
    s.add_argument("--lift-convs", action=argparse.BooleanOptionalAction, default=True,
                   help="let the last pass run 2-D convolutions as 3-D ones (a spatial axis of 1 in front) where "
                   "that stops ORT's buffer reuse holding dead buffers: less memory under ORT's default session "
                   "settings, same bits, the same kernel time on ORT 1.19's CPU (default: on; --no-lift-convs "
                   "keeps every convolution 2-D)")
    s.add_argument("--force", action="store_true", help="allow replacing an existing output or the input")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_transform)

    s = sub.add_parser("train", help="train with ONNX Runtime's training API, onnxcomp ops registered")
    s.add_argument("dir", metavar="DIR")
    s.add_argument("--model", help="training graph file inside DIR (default training_model.onnx)")
    s.add_argument("--steps", type=cli_args.positive, default=20)
    s.add_argument("--data", default="synthetic", metavar="SOURCE",
                   help="synthetic, digits, a .npz file with arrays x [N, ...] and y [N], or a directory with one "
                   "sub-directory of images per class (default synthetic)")
    s.add_argument("--save", metavar="DIR", help="save checkpoint, optimizer state and progress to DIR at the end; "
                   "a run with the same --save resumes from it")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--lr", type=float, default=None, help="learning rate (default: the optimizer model's)")
    s.add_argument("--eval-every", type=cli_args.positive, default=None)
    s.add_argument("--json", action="store_true")
    cli_args.add_runtime_options(s)
    s.set_defaults(func=cmd_train)

    s = sub.add_parser("params", help="export a checkpoint's parameters by their original names (split weights "
                       "merged) to .npz")
    s.add_argument("dir", metavar="DIR", help="artifact directory (its training graph records any weight split)")
    s.add_argument("--model", help="training graph file inside DIR (default training_model.onnx)")
    s.add_argument("--checkpoint", help="checkpoint to read, e.g. one saved after training (default DIR/checkpoint)")
    s.add_argument("-o", "--output", required=True, help="output .npz file")
    s.add_argument("--force", action="store_true", help="replace an existing output")
    s.set_defaults(func=cmd_params)

    s = sub.add_parser("demo", help="run the whole pipeline on the bundled default model")
    s.add_argument("--model", default="resnet18")
    s.add_argument("--batch", type=cli_args.positive, default=8)
    s.add_argument("--image", type=cli_args.positive, default=32)
    s.add_argument("--classes", type=cli_args.positive, default=10)
    s.add_argument("--steps", type=cli_args.positive, default=3)
    s.add_argument("--workdir", help="keep artifacts here (default: a new temporary directory)")
    s.add_argument("--json", metavar="FILE", help="also write every figure as JSON")
    s.set_defaults(func=cmd_demo)


    add_calibrate(sub)


def add_calibrate(sub: Any) -> None:
    s = sub.add_parser("calibrate", help="time the codec and ORT ops on this machine and fit the cost model "
                       "(cached for --policy auto and step-time predictions)")
    s.add_argument("--quick", action="store_true", help="fewer sizes and repeats, a smaller model (< 60 s)")
    s.add_argument("-o", "--output", metavar="FILE.json",
                   help="where to write the model (default: $XDG_CACHE_HOME/onnxcomp/cost_model.json, or "
                   "cost_model.numba.json / .numpy.json when ONNXCOMP_CODEC_BACKEND selects those kernels)")
    s.add_argument("--force", action="store_true", help="replace an existing --output file")
    s.add_argument("--codecs", nargs="+", metavar="CODEC", help="calibrate only these codecs (default: all)")
    s.add_argument("--sizes", nargs="+", metavar="SIZE", type=_bytes_arg,
                   help="tensor sizes to time, e.g. 64KiB 1MiB 8MiB (default: the mode's)")
    s.add_argument("--no-model", action="store_true",
                   help="skip profiling a bundled model (the ORT op fits then cover only cheap elementwise ops)")
    s.add_argument("--profile", metavar="DIR", help="profile this artifact directory's training step for the ORT "
                   "op fits instead of exporting a bundled model (e.g. the model you will transform)")
    s.add_argument("--json", action="store_true", help="print the fitted model as JSON")
    s.set_defaults(func=cmd_calibrate)


def cmd_calibrate(args: argparse.Namespace) -> int:
    import dataclasses

    from .runtime.calibrate import CalibrationPlan, calibrate, summary_rows

    plan = CalibrationPlan.quick() if args.quick else CalibrationPlan.full()
    changes: dict[str, Any] = {}
    if args.codecs:
        changes["codecs"] = tuple(args.codecs)
    if args.sizes:
        changes["sizes"] = tuple(args.sizes)
    if args.no_model:
        changes["model"] = None
    if args.profile:
        changes["profile_dir"] = args.profile
    plan = dataclasses.replace(plan, **changes)
    res = calibrate(args.output, plan=plan, progress=None if args.json else print, replace=args.force)
    if args.json:
        cli_args.print_json(res.data)
        return 0
    from rich.console import Console
    from rich.table import Table

    machine = res.data["machine"]
    t = Table(title=f"codec ops, PyOp bridge included (backend {machine['codec_backend']}: "
                    f"{machine['codec_table']} kernels)",
              header_style="bold")
    for col in ("codec", "direction", "MB/s at 4 MiB, half zeros", "R²", "mean rel. error"):
        t.add_column(col, justify="left" if col in ("codec", "direction") else "right")
    for codec, direction, mbs, r2, rel in summary_rows(res.data):
        t.add_row(codec, direction, f"{mbs:,.0f}", f"{r2:.3f}", f"{rel:.1%}")
    Console().print(t)
    bridge = res.data["pyop_overhead"]
    print(f"PyOp bridge: {bridge['per_call_s'] * 1e6:.1f} µs per call + {bridge['per_byte_s'] * 1e9:.3f} ns per byte "
          f"crossing it")
    print(f"wrote {res.path} in {res.seconds:.0f} s (load average at start {res.data['load_average'][0]})")
    return 0
