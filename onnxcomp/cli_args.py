"""Argument helpers shared by the command modules (cli, commands), and the flag each library option has."""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any

# Library option / argument name → the command-line flag that sets it (OnnxcompError.render).
OPTION_FLAGS = {
    "output": "-o", "force": "--force", "model": "--model", "min_bytes": "--min-bytes", "eb": "--eb",
    "adaptive": "--static-eb", "dpr_format": "--dpr-format", "split_weight_bytes": "--split-weights",
    "rows": "--rows", "variant": "--variant", "checkpoints": "--checkpoints", "budget_bytes": "--budget",
    "overrides": "--config", "exact": "--exact", "budget_for": "--budget-for",
}


def print_json(obj: Any) -> None:
    json.dump(obj, sys.stdout, indent=2)
    sys.stdout.write("\n")


def margin_share(text: str) -> float:
    """``--margin``: a share of the budget in [0, 1), as 0.02 or 2%."""
    try:
        value = float(text[:-1]) / 100 if text.strip().endswith("%") else float(text)
    except ValueError:
        value = -1.0
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"{text!r}: give a share of the budget in [0, 1), e.g. 0.02 or 2%")
    return value


def positive(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value!r}") from None
    if n <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {n}")
    return n


def add_runtime_options(p: argparse.ArgumentParser) -> None:
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
    g.add_argument("--threads", type=positive, default=None, help="intra-op threads (default: ORT's)")
    g.add_argument("--verify-payloads", action="store_true",
                   help="checksum every encoded activation (xxh3) and verify it before decoding")
    g.add_argument("--payload-store", choices=["off", "inline", "async"], default=None,
                   help="where codec payloads wait for the backward pass: off = ORT tensors; inline = a "
                        "process-wide store (no PyOp bridge copies of payloads); async = the store plus a codec "
                        "worker thread and prefetching decodes (default: $ONNXCOMP_PAYLOAD_STORE, else off)")


def settings(args: argparse.Namespace):
    from .runtime.session import RuntimeSettings

    return RuntimeSettings(arena=args.arena, mem_pattern=args.mem_pattern, execution_order=args.order,
                           intra_threads=args.threads, mem_reuse=args.mem_reuse,
                           verify_payloads=getattr(args, "verify_payloads", False),
                           payload_store=getattr(args, "payload_store", None))
