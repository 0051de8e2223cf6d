"""`onnxcomp` command line: models, artifacts, inspect, measure, transform, train, params, demo."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from .argv import glue_dash_values
from .errors import OnnxcompError


from .cli_args import OPTION_FLAGS, add_runtime_options as _add_runtime_options, positive as _positive  # noqa: F401
from .cli_args import print_json as _print_json, settings as _settings  # noqa: F401


# --------------------------------------------------------------------------------------------- commands
def cmd_models(args: argparse.Namespace) -> int:
    from .models import list_models

    rows = list_models()
    if args.json:
        _print_json(rows)
        return 0
    from rich.console import Console
    from rich.table import Table

    t = Table(title="Model zoo (parameters at 1000 classes)", header_style="bold")
    t.add_column("name"), t.add_column("parameters", justify="right")
    for r in rows:
        t.add_row(r["name"], f"{r['parameters']:,}")
    Console().print(t)
    return 0


def cmd_artifacts(args: argparse.Namespace) -> int:
    from .fileio import ensure_writable

    ensure_writable(args.output, directory=True)
    if args.module:
        from .user_model import cli_artifacts

        return cli_artifacts(args)
    if not args.model:
        raise OnnxcompError("give --model NAME (a zoo model) or --module pkg.mod:factory (your own)")
    from .models.artifacts import generate_artifacts

    from .errors import OutputExistsError

    args.classes = args.classes or 1000
    try:
        out = generate_artifacts(args.model, args.batch, args.image, args.classes, Path(args.output),
                                 smoke_test=not args.no_smoke_test, optimizer=args.optimizer,
                                 overwrite=args.force, seq_len=args.seq)
    except OutputExistsError as exc:  # the API's remedy is overwrite=True; here it is a flag
        raise OutputExistsError(exc.path, exc.what, how="pass --force") from None
    shape = f"sequence {args.seq}" if args.seq else f"{args.image}×{args.image}"
    print(f"wrote ORT training artifacts for {args.model} (batch {args.batch}, {shape}, "
          f"{args.classes} classes) to {out.out_dir}")
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    from .analysis import analyze
    from .stash_report import inspect_report, plot_live_bytes, render_report

    if args.plot:
        from .fileio import ensure_writable

        ensure_writable(args.plot, "--plot")
    analysis = analyze(args.path, batch=args.batch, model=args.model)
    report = inspect_report(analysis)
    report["model"] = str(args.path)
    if args.ort_pattern:
        report["ort_defaults"] = _ort_pattern(args)
    if args.budget_for != "step-peak" and args.budget is None:
        raise OnnxcompError("--budget-for applies to the budget preview: add --budget SIZE", options=("budget_for",))
    if args.budget is not None:
        from .planner.auto import preview_auto

        return preview_auto(analysis.model, args.budget, exact=args.exact, as_json=args.json, report=report,
                            batch=args.batch, where=str(args.path), budget_for=args.budget_for)
    if args.plot:
        plot_live_bytes(analysis, args.plot, title=f"{Path(args.path).name}: live memory over one step "
                                                   f"(batch {analysis.batch})")
        report["plot"] = str(args.plot)
    if args.json:
        _print_json(report)
    else:
        render_report(report, limit=None if args.all else 40)
        if args.plot:
            print(f"plot written to {args.plot}")
        if "ort_defaults" in report:
            o = report["ort_defaults"]
            print(f"ORT defaults (arena, mem pattern, mem reuse, DEFAULT order): predicted memory-pattern block "
                  f"{o['pattern_bytes'] / (1 << 20):,.2f} MiB ({o['planned_buffers']} buffers); "
                  f"{o['dynamic_tensors']} tensors without a static shape are allocated outside it. The process's "
                  "growth under those settings is this block (twice, when the arena opens a second region for it) "
                  "plus what runs outside it.")
    return 0


def _ort_pattern(args: argparse.Namespace) -> dict[str, Any]:
    """ORT's pattern block for the graph as stored (ORT runs it at its own batch size)."""
    from .load import resolve_model_path
    from .planner.ort_pattern import predict_pattern_block

    if args.batch is not None:
        raise OnnxcompError("--ort-pattern predicts ORT's plan of the graph as stored, at its own batch size: "
                            "drop --batch (or export the graph at the batch you want)")
    path, _ = resolve_model_path(args.path, args.model)
    return predict_pattern_block(path).to_dict()


def cmd_measure(args: argparse.Namespace) -> int:
    from .runtime.measure import measure

    from .runtime.bounds import load_bounds_file

    error_bounds = load_bounds_file(args.bounds) if args.bounds else None
    result = measure(args.dir, model=args.model, steps=args.steps, settings=_settings(args), data=args.data,
                     error_bounds=error_bounds, trim_heap=not args.no_trim_heap)
    d = result.to_dict()
    if args.json:
        _print_json(d)
    else:
        mib = 1 << 20
        print(f"model: {d.get('model', args.model or 'training_model.onnx')}")
        from .runtime.figures import describe_peaks

        print(f"training-step peak: {d['peak_bytes'] / mib:,.1f} MiB   step time (median): "
              f"{d['step_time_s'] * 1000:,.1f} ms   steps: {args.steps}")
        for line in describe_peaks(d):
            print(line)
        print("(malloc's mmap threshold is pinned for an honest peak, which slows graphs with many large "
              "temporaries; `onnxcomp train` times steps under the default allocator)")
        print("losses: " + " ".join(f"{x:.4f}" for x in d["losses"]))
        print("settings: " + ", ".join(f"{k}={v}" for k, v in d["settings"].items()))
    return 0


def cmd_maxbatch(args: argparse.Namespace) -> int:
    from .runtime.maxbatch import max_batch, parse_size

    policies = list(args.policy)
    if args.exact:   # as `transform --policy auto --exact`: the planner with bit-identical techniques only
        if "auto" not in policies:
            raise OnnxcompError("--exact applies to the budget planner: add --policy auto (or list auto-exact)")
        policies = ["auto-exact" if p == "auto" else p for p in policies]
    reuse = None
    if args.reuse:
        import json

        try:
            reuse = json.loads(Path(args.reuse).read_text())
        except (OSError, ValueError) as exc:
            raise OnnxcompError(f"--reuse {args.reuse}: cannot read an earlier `maxbatch --json` result ({exc})") \
                from None
        reuse = {**reuse, "results": {p: r for p, r in reuse.get("results", {}).items() if p in args.reuse_policy}}
    starts = {}
    for item in args.start_at:
        policy, _, value = item.partition("=")
        if not value.isdigit() or int(value) < 1:
            raise OnnxcompError(f"--start-at {item!r}: give POLICY=BATCH, e.g. auto=1024")
        starts[policy] = int(value)
    res = max_batch(args.model, args.image, parse_size(args.budget), policies, classes=args.classes,
                    steps=args.steps, settings=_settings(args), figure=args.figure, limit=args.max_batch,
                    start=args.start, tolerance=args.tolerance, work_dir=args.work, starts=starts, reuse=reuse,
                    replans=args.replans, plan_fraction=args.plan_fraction, budget_for=args.budget_for,
                    margin=args.margin,
                    progress=(lambda m: print(m, file=sys.stderr, flush=True)) if args.json else print)
    if args.json:
        _print_json(res)
    else:
        for policy, r in res["results"].items():
            vs = f"  ({r['vs_baseline']:.2f}x the baseline's)" if r["vs_baseline"] and policy != "baseline" else ""
            print(f"{policy}: largest batch within {res['budget_bytes'] / 2**20:.0f} MiB ({res['figure']}): "
                  f"{r['max_batch']}{'+ (hit --max-batch)' if r['hit_limit'] else ''}{vs}")
    return 0 if all(r["max_batch"] > 0 for r in res["results"].values()) else 1


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="onnxcomp", description="Compress the activations an ONNX Runtime training graph stashes for backward.")
    from . import __version__

    p.add_argument("--version", action="version", version=f"onnxcomp {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    s = sub.add_parser("models", help="list the bundled model architectures")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_models)

    s = sub.add_parser("artifacts", help="export a zoo model and generate ORT training artifacts")
    s.add_argument("--model", help="alexnet, vgg16, resnet18, resnet50, mobilenet_v2, vit_tiny (ViT: --image/4 "
                   "squared patches) or gpt_tiny (character LM: --classes ≥ 96, --seq)")
    s.add_argument("--module", metavar="PKG.MOD:FACTORY", help="your own model instead: a callable returning a "
                   "torch.nn.Module (given num_classes=K when it takes that argument); needs --input-shape")
    s.add_argument("--input-shape", metavar="C,H,W", help="per-sample input shape for --module, e.g. 3,48,48")
    s.add_argument("--loss", default="cross_entropy", choices=["cross_entropy", "mse", "l1", "bce_with_logits"],
                   help="training loss for --module (default cross_entropy)")
    s.add_argument("--batch", type=_positive, default=32)
    s.add_argument("--image", type=_positive, default=64, help="square input size in pixels")
    s.add_argument("--classes", type=_positive, default=None,
                   help="output classes (default 1000 for --model; for --module, read from the model's output)")
    s.add_argument("--seq", type=_positive, help="sequence length of a token model (gpt_tiny; default 256)")
    s.add_argument("--optimizer", choices=["adamw", "sgd"], default="adamw")
    s.add_argument("--no-smoke-test", action="store_true", help="skip the first-step check in a child process")
    s.add_argument("--force", action="store_true", help="replace an existing output directory")
    s.add_argument("-o", "--output", required=True, help="artifact directory to create")
    s.set_defaults(func=cmd_artifacts)

    s = sub.add_parser("inspect", help="offline analysis of a training graph: stashed tensors, planner figures")
    s.add_argument("path", metavar="MODEL_OR_DIR")
    s.add_argument("--model", help="file name inside the directory (default training_model.onnx)")
    s.add_argument("--batch", type=_positive, help="batch size to size tensors for (default: the graph's)")
    s.add_argument("--json", action="store_true", help="print the report as JSON")
    s.add_argument("--plot", metavar="FILE.png", help="write a plot of live bytes over the execution order")
    s.add_argument("--all", action="store_true", help="list every stashed tensor (default: first 40)")
    from .commands import _bytes_arg

    s.add_argument("--budget", type=_bytes_arg, metavar="SIZE", help="preview the plan `transform --policy auto "
                   "--budget SIZE` would write (nothing is written; exit 2 when the budget cannot be met)")
    s.add_argument("--exact", action="store_true", help="with --budget: only bit-identical techniques")
    s.add_argument("--budget-for", choices=["step-peak", "ort-defaults", "ort-defaults-total"], default="step-peak",
                   help="with --budget: what it limits, as `transform --budget-for` (default step-peak)")
    s.add_argument("--ort-pattern", action="store_true",
                   help="also predict ORT's memory-pattern block under its default session settings (arena, mem "
                   "pattern, mem reuse, DEFAULT order): ORT optimises the graph (a session's set-up, nothing runs), "
                   "its allocation and pattern planners are replayed")
    s.set_defaults(func=cmd_inspect)

    s = sub.add_parser("measure", help="measure training-step peak memory and step time in a fresh process")
    s.add_argument("dir", metavar="DIR")
    s.add_argument("--model", help="training graph file inside DIR (default training_model.onnx)")
    s.add_argument("--steps", type=_positive, default=5)
    s.add_argument("--data", choices=["synthetic", "digits", "text"], default="synthetic",
                   help="batches to measure on (data-dependent codecs compress real images differently; "
                   "text: the stdlib character corpus, for gpt_tiny)")
    s.add_argument("--bounds", metavar="FILE", help="error bounds for error-bounded encoders: JSON {key: eb}, "
                   "or the output of `onnxcomp train --json`")
    s.add_argument("--no-trim-heap", action="store_true",
                   help="read each step's baseline RSS without first handing glibc's free heap pages back "
                   "(malloc_trim): the figures before this option existed, which read low by whatever freed heap "
                   "the step reused")
    s.add_argument("--json", action="store_true")
    _add_runtime_options(s)
    s.set_defaults(func=cmd_measure)

    s = sub.add_parser("maxbatch", help="largest batch whose measured step peak fits a budget, baseline vs "
                       "policies (exports and measures every probed batch)")
    s.add_argument("--model", required=True, help="zoo or suite model name (onnxcomp models; models/suite.py)")
    s.add_argument("--image", type=_positive, default=64)
    s.add_argument("--budget", required=True, help="memory budget, e.g. 512MiB")
    s.add_argument("--policy", nargs="*", default=[], help="policies searched beside the baseline")
    s.add_argument("--classes", type=_positive, default=10)
    s.add_argument("--steps", type=_positive, default=2, help="measured steps per probe, after one warm-up "
                   "(with --arena or --mem-pattern at least 2: the arena can move ORT's pattern block after the first run)")
    s.add_argument("--figure", choices=["peak", "growth"], default=None,
                   help="peak: step over pre-step RSS; growth: over the RSS after set-up (counts ORT's arena). "
                   "Default: growth with --arena (where peak reads ~0; refused there), peak otherwise")
    s.add_argument("--plan-fraction", type=float, default=1.0, metavar="F",
                   help="auto policies: plan the first probe for F x the budget (default 1); later probes plan "
                   "for what earlier ones measured. Under ORT's defaults a plan's growth exceeds its predicted "
                   "step peak, so F < 1 saves a re-plan")
    s.add_argument("--replans", type=int, default=2, metavar="N",
                   help="auto policies: a plan measured over the budget is planned again for proportionally "
                   "less, at most N times per probe (default 2)")
    s.add_argument("--budget-for", choices=["step-peak", "ort-defaults"], default=None,
                   help="auto policies: plan for the step peak under onnxcomp's settings (then --plan-fraction) or "
                   "for the growth under ORT's defaults (transform --budget-for ort-defaults; re-planned lower by "
                   "the measured miss, as transform --verify). Default: ort-defaults when the probes measure "
                   "growth under --arena --mem-pattern --mem-reuse --order default, step-peak otherwise")
    s.add_argument("--margin", type=float, default=None, metavar="F",
                   help="auto policies: plan this share of the planning budget under it (transform --margin). "
                   "Default: 0.02 with --budget-for ort-defaults (each probe is measured and re-planned when over, "
                   "as transform --verify), the planner's 0.05 for the step peak")
    s.add_argument("--max-batch", type=_positive, default=4096)
    s.add_argument("--start", type=_positive, default=1, help="first batch probed (the search doubles from it)")
    s.add_argument("--start-at", action="append", default=[], metavar="POLICY=BATCH",
                   help="first batch for one policy (repeatable), e.g. auto=1024")
    s.add_argument("--reuse", metavar="FILE", help="take searches from an earlier `maxbatch --json` result "
                   "measured the same way (model, budget, figure, steps, settings) instead of probing again")
    s.add_argument("--reuse-policy", nargs="*", default=["baseline"], metavar="POLICY",
                   help="which of --reuse's searches to take (default: baseline)")
    s.add_argument("--tolerance", type=float, default=0.0, help="stop bisecting once the gap is at most this "
                   "fraction of the largest fitting batch (e.g. 0.02; default 0: down to one sample)")
    s.add_argument("--exact", action="store_true", help="policy auto with bit-identical techniques only "
                   "(as transform --exact; the same as listing auto-exact)")
    s.add_argument("--work", metavar="DIR", help="keep the probed artifacts, plans and failed budgets here "
                   "(default: a temp dir)")
    s.add_argument("--json", action="store_true")
    _add_runtime_options(s)
    s.set_defaults(func=cmd_maxbatch)

    from .commands import add_subcommands

    add_subcommands(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(glue_dash_values(parser, sys.argv[1:] if argv is None else argv))
    try:
        return int(args.func(args) or 0)
    except OnnxcompError as exc:
        print(f"onnxcomp {args.command}: error: {exc.render(OPTION_FLAGS)}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("onnxcomp: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0

