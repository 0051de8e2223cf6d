"""`onnxcomp transform`: run a policy's passes, check the result, write it (atomically) with its plan."""
from __future__ import annotations

import inspect
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnx

from .analysis import LOSSLESS, analyze_model
from .errors import OnnxcompError
from .fileio import atomic_output
from .load import TRAINING_MODEL, load_model
from .passes import POLICIES, GraphPass, SplitWeightPass
from .validate import validate_rewritten
from .passes.encode_stash import EncodeStashPass
from .passes.split_weight import WeightSplit
from .planner import plan_all

# Files of an artifact directory that a transformed training graph still needs beside it.
_ARTIFACT_FILES = ("checkpoint", "optimizer_model.onnx", "eval_model.onnx", "onnxcomp.json")


@dataclass
class TransformResult:
    model: onnx.ModelProto
    policy: str
    records: list[dict[str, Any]]
    skipped: list[dict[str, str]]
    before: dict[str, Any]
    after: dict[str, Any]
    output: Path | None = None
    plan_path: Path | None = None
    left_alone: list[dict[str, Any]] = field(default_factory=list)
    deferred: list[dict[str, Any]] = field(default_factory=list)   # weight gradients moved to backward's end
    chunked: list[dict[str, Any]] = field(default_factory=list)    # first-layer backwards run in batch chunks
    splits: list[WeightSplit] = field(default_factory=list)         # weights held as row blocks

    def summary(self) -> dict[str, Any]:
        return {"policy": self.policy, "output": str(self.output) if self.output else None,
                "plan": str(self.plan_path) if self.plan_path else None,
                "encoded": len(self.records), "before": self.before, "after": self.after,
                "skipped": self.skipped, "left_alone": self.left_alone, "deferred": self.deferred,
                "chunked": self.chunked, "split_weights": [s.to_dict() for s in self.splits]}


def _footprint(model: onnx.ModelProto) -> dict[str, Any]:
    a = analyze_model(model)
    encoded_payloads = {n for n, t in a.tensors.items() if t.size_hint is not None}
    stashed = sum(s.nbytes for s in a.stashed)
    return {"stashed_bytes": stashed, "stashed_tensors": len(a.stashed),
            "payload_tensors": len(encoded_payloads), **plan_all(a.buffers()).to_dict()}


CONFIG_KEYS = {"overrides": dict, "eb": float, "adaptive": bool, "dpr_format": str, "min_bytes": int,
               "split_weight_bytes": int}


def load_policy_config(path: str | Path) -> dict[str, Any]:
    """Pass options from a small TOML or JSON file, e.g.

        eb = 1e-3                      # starting / static error bound
        adaptive = true
        dpr_format = "bf16"
        split_weight_bytes = 33554432  # --split-weights 32MiB
        [overrides]                    # pattern (as `onnxcomp inspect` prints it) → encoding or "none"
        "Conv-output→BatchNormalizationGrad" = "none"
    """
    import tomllib

    from .analysis.patterns import DPR, ERROR_BOUNDED, LOSSLESS

    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise OnnxcompError(f"{p}: cannot read policy config ({exc.strerror})") from None
    try:
        data = json.loads(text) if p.suffix == ".json" else tomllib.loads(text)
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        raise OnnxcompError(f"{p}: not valid {'JSON' if p.suffix == '.json' else 'TOML'}: {exc}") from None
    unknown = set(data) - set(CONFIG_KEYS)
    if unknown:
        raise OnnxcompError(f"{p}: unknown key(s) {sorted(unknown)}; known: {sorted(CONFIG_KEYS)}")
    for key, typ in CONFIG_KEYS.items():
        if key in data and not isinstance(data[key], typ) and not (typ is float and isinstance(data[key], int)):
            raise OnnxcompError(f"{p}: {key} must be a {typ.__name__} (got {data[key]!r})")
    known = {*LOSSLESS, DPR, ERROR_BOUNDED, "none"}
    for pattern, enc in data.get("overrides", {}).items():
        if enc not in known:
            raise OnnxcompError(f"{p}: overrides[{pattern!r}] = {enc!r}; use one of {sorted(known)}")
    return data


def make_passes(policy: str, **options: Any) -> list[GraphPass]:
    if policy not in POLICIES:
        raise OnnxcompError(f"unknown policy {policy!r}; choose one of: {', '.join(sorted(POLICIES))}")
    overrides = options.pop("overrides", None) or {}
    passes = []
    for factory in POLICIES[policy]:
        # A policy's own fixed choices (partial keywords, e.g. dpr-fp8's format) win over general options.
        fixed = set(getattr(factory, "keywords", {}) or {})
        accepted = set(inspect.signature(factory).parameters) - fixed
        kwargs = {k: v for k, v in options.items() if k in accepted and v is not None}
        try:
            p = factory(**kwargs)
        except (ValueError, TypeError) as exc:
            raise OnnxcompError(f"policy {policy!r}: bad option(s) {kwargs}: {exc}") from None
        if overrides and isinstance(p, EncodeStashPass):
            p.overrides = dict(overrides)
        passes.append(p)
    return passes


def transform_model(model: onnx.ModelProto, policy: str = "lossless", where: str = "model",
                    **options: Any) -> TransformResult:
    before = _footprint(model)
    current = model
    records: list[dict[str, Any]] = []
    skipped: list[dict[str, str]] = []
    deferred: list[dict[str, Any]] = []
    chunked: list[dict[str, Any]] = []
    splits: list[WeightSplit] = []
    for p in make_passes(policy, **options):
        result = p.run(current)
        current = result.model
        records += result.records
        deferred += getattr(p, "deferred", [])
        chunked += getattr(p, "chunked", [])
        splits += getattr(p, "splits", [])
        skipped += [s.to_dict() | {"pass": p.name} for s in result.skipped]
    validate_rewritten(current, where, original=model)
    after = _footprint(current)
    # Stashes no pass understood: listed, never touched (a wrong gradient is worse than no saving).
    handled = {r["tensor"] for r in records} | {t for r in records + chunked for t in r.get("dropped_stashes", [])} | \
        {s["name"] for s in skipped}
    lossless_only = policy.startswith("lossless")

    def why(encodings: tuple[str, ...]) -> str:
        if not encodings:
            return "no encoding applies"
        if lossless_only and not set(encodings) & set(LOSSLESS):
            return f"no lossless encoding applies (lossy: {', '.join(encodings)})"
        return f"not selected by this policy (applicable: {', '.join(encodings)})"

    left = [{"name": s.name, "pattern": s.pattern, "bytes": s.nbytes, "reason": why(s.encodings)}
            for s in analyze_model(model).stashed if s.name not in handled and s.nbytes > 0]
    return TransformResult(current, policy, records, skipped, before, after, left_alone=left, deferred=deferred,
                           chunked=chunked, splits=splits)


def _atomic_save(model: onnx.ModelProto, path: Path) -> None:
    with atomic_output(path) as tmp:
        onnx.save(model, tmp)


def _atomic_write_text(path: Path, text: str) -> None:
    with atomic_output(path) as tmp:
        Path(tmp).write_text(text)


def transform(model_or_dir: str | Path, output: str | Path, policy: str = "lossless", *,
              model: str | None = None, force: bool = False, **options: Any) -> TransformResult:
    """Transform a training graph file or artifact directory.

    ``output`` ending in ``.onnx`` is a model file (e.g. inside the artifact directory, next to the
    checkpoint); anything else is a directory that receives the transformed training_model.onnx plus copies
    of the checkpoint, optimizer and eval models, so it can be trained or measured on its own.
    """
    loaded = load_model(model_or_dir, model)
    out = Path(output)
    to_dir = out.suffix != ".onnx"
    out_model = out / TRAINING_MODEL if to_dir else out
    if out_model.resolve() == loaded.path.resolve() and not force:
        raise OnnxcompError(f"{out_model}: refusing to overwrite the input model; choose another -o, or pass "
                            "--force to replace it")
    if out_model.exists() and not force and out_model.resolve() != loaded.path.resolve():
        raise OnnxcompError(f"{out_model} already exists; pass --force to replace it or choose another -o")
    if options.get("split_weight_bytes") is not None and policy in POLICIES and not any(
            getattr(f, "func", f) is SplitWeightPass for f in POLICIES.get(policy, [])):
        raise OnnxcompError(f"--split-weights: policy {policy!r} keeps training bit-identical and does not split "
                            "weights (dX is summed in blocks); use a lossy policy: comet or dpr-*")
    if options.get("split_weight_bytes") and (not to_dir or loaded.artifact_dir is None):
        raise OnnxcompError("--split-weights rewrites the checkpoint and eval model too: give an artifact "
                            "directory as input and a new directory as -o (not a .onnx file)")
    result = transform_model(loaded.model, policy, where=str(loaded.path), **options)

    if to_dir:
        out.mkdir(parents=True, exist_ok=True)
        if result.splits:
            from .runtime.checkpoint import write_split_artifacts

            assert loaded.artifact_dir is not None
            write_split_artifacts(loaded.artifact_dir, out, result.splits, force=force)
        if loaded.artifact_dir is not None and loaded.artifact_dir.resolve() != out.resolve():
            for name in _ARTIFACT_FILES:
                src = loaded.artifact_dir / name
                if src.exists() and not (out / name).exists():
                    (shutil.copytree if src.is_dir() else shutil.copy2)(src, out / name)
    elif not out.parent.exists():
        raise OnnxcompError(f"{out.parent}: output directory does not exist; create it first")
    _atomic_save(result.model, out_model)
    plan_path = out_model.with_suffix(".plan.json")
    result.output, result.plan_path = out_model, plan_path
    plan = {"input": str(loaded.path), **result.summary(), "tensors": result.records}
    _atomic_write_text(plan_path, json.dumps(plan, indent=2))
    return result
