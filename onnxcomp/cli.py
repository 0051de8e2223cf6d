"""`onnxcomp` command line: models, artifacts, inspect, measure, transform, train, params, demo."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from .errors import OnnxcompError


def _print_json(obj: Any) -> None:
    json.dump(obj, sys.stdout, indent=2)
    sys.stdout.write("\n")


def _positive(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value!r}") from None
    if n <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {n}")
    return n


def _add_runtime_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("ONNX Runtime settings (reported with every figure)")
    g.add_argument("--arena", action=argparse.BooleanOptionalAction, default=False,
                   help="ORT CPU memory arena (default: off, so freed tensors return to the OS)")
    g.add_argument("--mem-pattern", action=argparse.BooleanOptionalAction, default=False,
                   help="ORT memory-pattern planning (default: off)")
    g.add_argument("--mem-reuse", action=argparse.BooleanOptionalAction, default=False,
                   help="ORT buffer-reuse planning (default: off; on, freed forward buffers stay allocated "
                        "until a backward tensor of the same size reuses them)")
    g.add_argument("--order", choices=["priority", "default"], default="priority",
                   help="ORT execution order (default: priority — node-list order among ready nodes)")
    g.add_argument("--threads", type=_positive, default=None, help="intra-op threads (default: ORT's)")


def _settings(args: argparse.Namespace):
    from .runtime.session import RuntimeSettings

    return RuntimeSettings(arena=args.arena, mem_pattern=args.mem_pattern, execution_order=args.order,
                           intra_threads=args.threads, mem_reuse=args.mem_reuse)


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
    from .models.artifacts import generate_artifacts

    out = generate_artifacts(args.model, args.batch, args.image, args.classes, Path(args.output),
                             smoke_test=not args.no_smoke_test, optimizer=args.optimizer,
                             overwrite=args.force, seq_len=args.seq)
    shape = f"sequence {args.seq}" if args.seq else f"{args.image}×{args.image}"
    print(f"wrote ORT training artifacts for {args.model} (batch {args.batch}, {shape}, "
          f"{args.classes} classes) to {out.out_dir}")
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    from .analysis import analyze
    from .inspect import inspect_report, plot_live_bytes, render_report

    analysis = analyze(args.path, batch=args.batch, model=args.model)
    report = inspect_report(analysis)
    report["model"] = str(args.path)
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
    return 0


def cmd_measure(args: argparse.Namespace) -> int:
    from .runtime.measure import measure

    from .runtime.bounds import load_bounds_file

    error_bounds = load_bounds_file(args.bounds) if args.bounds else None
    result = measure(args.dir, model=args.model, steps=args.steps, settings=_settings(args), data=args.data,
                     error_bounds=error_bounds)
    d = result.to_dict()
    if args.json:
        _print_json(d)
    else:
        mib = 1 << 20
        print(f"model: {d.get('model', args.model or 'training_model.onnx')}")
        print(f"training-step peak: {d['peak_bytes'] / mib:,.1f} MiB   step time (median): "
              f"{d['step_time_s'] * 1000:,.1f} ms   steps: {args.steps}")
        print("(malloc's mmap threshold is pinned for an honest peak, which slows graphs with many large "
              "temporaries; `onnxcomp train` times steps under the default allocator)")
        print("losses: " + " ".join(f"{x:.4f}" for x in d["losses"]))
        print("settings: " + ", ".join(f"{k}={v}" for k, v in d["settings"].items()))
    return 0


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
    s.add_argument("--model", required=True, help="alexnet, vgg16, resnet18, resnet50, mobilenet_v2, vit_tiny "
                   "(ViT: --image/4 squared patches) or gpt_tiny (character LM: --classes ≥ 96, --seq)")
    s.add_argument("--batch", type=_positive, default=32)
    s.add_argument("--image", type=_positive, default=64, help="square input size in pixels")
    s.add_argument("--classes", type=_positive, default=1000)
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
    s.add_argument("--json", action="store_true")
    _add_runtime_options(s)
    s.set_defaults(func=cmd_measure)

    from .commands import add_subcommands

    add_subcommands(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except OnnxcompError as exc:
        print(f"onnxcomp {args.command}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("onnxcomp: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0

