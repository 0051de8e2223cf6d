"""`onnxcomp transform`: run a policy's passes, check the result, write it (atomically) with its plan."""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnx
import onnx_ir as ir

from .analysis import LOSSLESS, GraphAnalysis
from .analysis.cached import adopt_snapshot, analysis_of, snapshot_of
from .errors import OnnxcompError, OutputExistsError
from .fileio import atomic_output, carry_over_entries, check_output_path, output_lock, staged_directory
from .load import (EXTERNAL_DATA_THRESHOLD, TRAINING_MODEL, data_file_names, external_data_files, has_external_data,
                   load_model, save_model)
from .passes import OPTIONS, get_policy
from .passes.base import OnnxcompPass, RunLog, run_passes
from .passes.arena_scratch import ArenaScratchPass
from .passes.early_encode import EarlyEncodePass
from .passes.masked_fill import MaskedFillPass
from .passes.declare_shapes import DeclareShapesPass
from .passes.detach_stats import DetachStatsPass
from .passes.default_order import DefaultOrderPass
from .passes.grad_buffer_order import GradBufferOrderPass, align_eval_inputs
from .passes.planar_pool import finish_with_pool_gate
from .passes.reuse_signature import ReuseSignaturePass
from .passes.records import PassRecord, by_section
from .passes.split_weight import WeightSplit
from .planner import plan_all
from .validate import validate_rewritten

# Files of an artifact directory that a transformed training graph still needs beside it.
_ARTIFACT_FILES = ("checkpoint", "optimizer_model.onnx", "eval_model.onnx", "onnxcomp.json")


@dataclass
class TransformResult:
    model: onnx.ModelProto
    policy: str
    records: list[PassRecord]          # the plan's "tensors": stashes now held differently
    skipped: list[dict[str, str]]
    before: dict[str, Any]
    after: dict[str, Any]
    output: Path | None = None
    plan_path: Path | None = None
    left_alone: list[dict[str, Any]] = field(default_factory=list)
    # Every record of every pass, in pass order (the sections below are views of it).
    all_records: list[PassRecord] = field(default_factory=list)
    modified_by: list[str] = field(default_factory=list)           # passes that reported modified
    # planar_pool's gate on the finished graphs (passes/planar_pool.finish_with_pool_gate): ORT's predicted
    # pattern block without / with the lift, the choice, and where ORT could not set a graph up, the reason
    # the figures are the replay's. None when no pool was liftable.
    pool_gate: dict[str, Any] | None = None

    def section(self, name: str) -> list[dict[str, Any]]:
        return by_section(self.all_records)[name]

    @property
    def deferred(self) -> list[dict[str, Any]]:      # weight gradients moved to backward's end
        return self.section("deferred")

    @property
    def chunked(self) -> list[dict[str, Any]]:       # first-layer backwards run in batch chunks
        return self.section("chunked")

    @property
    def splits(self) -> list[WeightSplit]:           # weights held as row blocks
        return [WeightSplit.from_dict(d) for d in self.section("split_weights")]

    def summary(self) -> dict[str, Any]:
        sections = by_section(self.all_records)
        return {"policy": self.policy, "output": str(self.output) if self.output else None,
                "plan": str(self.plan_path) if self.plan_path else None,
                "encoded": len(self.records), "before": self.before, "after": self.after,
                "skipped": self.skipped, "left_alone": self.left_alone, "deferred": sections["deferred"],
                "chunked": sections["chunked"], "split_weights": sections["split_weights"],
                "moved": sections["moved"], "commuted": sections["commuted"],
                "blocked": sections["blocked"], "scratch": sections["scratch"], "modified_by": self.modified_by,
                **({"planar_pool_gate": self.pool_gate} if self.pool_gate is not None else {}),
                **({"auto": sections["auto"][0]} if sections["auto"] else {})}


def _footprint(a: GraphAnalysis) -> dict[str, Any]:
    encoded_payloads = {n for n, t in a.tensors.items() if t.size_hint is not None}
    stashed = sum(s.nbytes for s in a.stashed)
    return {"stashed_bytes": stashed, "stashed_tensors": len(a.stashed),
            "payload_tensors": len(encoded_payloads), **plan_all(a.buffers()).to_dict()}


# Options a policy config file may set (the rest are command-line only).
CONFIG_KEYS = {k: OPTIONS[k][0] for k in ("overrides", "eb", "adaptive", "dpr_format", "min_bytes",
                                            "split_weight_bytes")}


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
        if key in data and not isinstance(data[key], typ):
            name = typ.__name__ if isinstance(typ, type) else typ[0].__name__
            raise OnnxcompError(f"{p}: {key} must be a {name} (got {data[key]!r})")
    known = {*LOSSLESS, DPR, ERROR_BOUNDED, "none"}
    for pattern, enc in data.get("overrides", {}).items():
        if enc not in known:
            raise OnnxcompError(f"{p}: overrides[{pattern!r}] = {enc!r}; use one of {sorted(known)}")
    return data


def make_passes(policy: str, **options: Any) -> list[OnnxcompPass]:
    """The passes of ``policy`` built with ``options``; an option the policy does not take is an error."""
    return get_policy(policy).build(**options)


_LOSSY_ENCODINGS = frozenset({"dpr", "error_bounded", "q8", "fixed_rate"})


def _lossy(records: list) -> bool:
    """Whether a pass changed values on purpose (a lossy encoding, or a record that says it is not exact):
    only then may the last passes trade ORT's fusions (last-bit arithmetic) for memory."""
    return any(r.detail.get("encoding") in _LOSSY_ENCODINGS or r.detail.get("exact") is False for r in records)


def last_passes(records: list, lift_convs: bool = True) -> list[OnnxcompPass]:
    """The passes every rewritten graph gets last (see transform_model), given the records of the passes before
    them (a lossy rewrite lets the reuse pass trade ORT's fusions for memory); planar_pool's lift goes in front
    of them where finish_graph's gate keeps it."""
    return [MaskedFillPass(), EarlyEncodePass(), ArenaScratchPass(), DefaultOrderPass(),
            ReuseSignaturePass(keep_fusions=not _lossy(records), lift_convs=lift_convs), DeclareShapesPass()]


def finish_graph(ir_model: ir.Model, records: list, lift_convs: bool = True, base_dir: Path | None = None
                 ) -> tuple[ir.Model, RunLog, dict[str, Any] | None]:
    """Transform's last passes with planar_pool's gate on the finished graphs (passes/planar_pool.py): the model to
    continue with (``ir_model`` or a lifted copy), the run's log, the gate's figures. The budget planner's
    ORT-defaults mode runs this on each candidate to predict the graph `transform` writes
    (planner/growth_budget.py)."""
    return finish_with_pool_gate(ir_model, lambda: last_passes(records, lift_convs), base_dir=base_dir)


def transform_model(model: onnx.ModelProto, policy: str = "lossless", where: str = "model", *,
                    passes: list[OnnxcompPass] | None = None, base_dir: str | Path | None = None,
                    lift_convs: bool = True, **options: Any) -> TransformResult:
    """Run a policy's passes on ``model`` (not mutated): loaded into onnx-ir once, the passes composed with
    onnx-ir's PassManager, one analysis per graph state (analysis.cached), serialised once at the end.
    ``base_dir``: where the model's external data files are (initializers kept there stay there, read only
    when a pass asks for their values). ``lift_convs``: let the reuse pass run 2-D convolutions as 3-D ones
    (a spatial axis of 1 in front of theirs: the same bits and, on ORT 1.19's CPU kernels, the same time) where
    that frees buffers ORT's reuse would hold (less memory under ORT's defaults; passes/reuse_signature.py).
    On by default; False keeps every convolution 2-D."""
    external_dir = Path(base_dir).resolve() if base_dir is not None and has_external_data(model) else None
    ir_model = ir.serde.deserialize_model(model)
    if external_dir is not None:
        ir.external_data.set_base_dir(ir_model.graph, external_dir)
    # onnx.checker (every pass's `ensures`, and validate) looks for a proto's external data files relative to
    # the working directory: run the passes from the model's directory so a >2 GiB graph is checkable.
    with contextlib.chdir(external_dir) if external_dir is not None else contextlib.nullcontext():
        adopt_snapshot(ir_model, model, checked=True)   # the input's proto is its snapshot: no serialisation
        original = analysis_of(ir_model)
        before = _footprint(original)
        log = run_passes(ir_model, passes if passes is not None else make_passes(policy, **options))
        pool_gate = None
        if log.modified_by:   # a rewritten graph: ORT's DEFAULT order made to follow its node list (passes/default_order.py),
            # no kernel scratch outside ORT's memory pattern (passes/arena_scratch.py), ORT's buffer reuse kept
            # from holding forward buffers across the peak (passes/reuse_signature.py); masked fills without
            # Where, whose kernel allocates outside the pattern (passes/masked_fill.py); encoders of views
            # ORT placed in backward run in the forward pass (passes/early_encode.py); first, the MaxPools the
            # passes emitted without indices run as 3-D pools, out of ORT's NCHWc reorder copies
            # (passes/planar_pool.py); last, the static shapes
            # ORT's inference misses declared, so it plans those tensors in its pattern (passes/declare_shapes.py)
            # The lift is judged on the finished graph (what will be saved): both pipelines run where it applies.
            ir_model, last, pool_gate = finish_graph(ir_model, log.records, lift_convs, external_dir)
            log.records += last.records
            log.modified_by += last.modified_by
            # Kernel scratch bounded and native fp16 encoders cast first where the ORT-defaults budget mode priced
            # the plan so, after the last passes, the stages its prediction ran (planner/growth_budget.planned_stages).
            from .planner.growth_budget import planned_stages

            for stage in planned_stages(_planned_scratch_limit(log.records), _planned_scratch_exact(log.records),
                                        _planned_fp16_cast_first(log.records)):
                log.extend(run_passes(ir_model, stage))
            # Then BatchNorm statistics that fragment ORT's pattern block are held outside it, where the replayed
            # block drops (passes/detach_stats.py). After finish_graph, not in it: the budget planner's ORT-defaults
            # mode predicts each candidate through finish_graph, and its candidate search is path-dependent: with
            # the pass inside, MobileNetV2's search took other step budgets and ended on a plan measured 1.7 MiB
            # worse (docs/notes/r18exact2.md). Here it only lowers the chosen plan's block; the plan's predicted growth
            # stays the planner's (an over-estimate by what the pass saves).
            log.extend(run_passes(ir_model, [DetachStatsPass()]))
        current = snapshot_of(ir_model)
        if current is model:            # nothing modified it: still hand back a model of its own, as before
            current = onnx.ModelProto()
            current.CopyFrom(model)
        validate_rewritten(current, where, original=model)
        after = _footprint(analysis_of(ir_model))
    records = log.records
    # Stashes no pass understood: listed, never touched (a wrong gradient is worse than no saving).
    tensors = [r for r in records if r.section == "tensors"]
    handled = {r.subject for r in tensors} | {t for r in records for t in r.dropped_stashes} | \
        {s["name"] for s in log.skipped}
    lossless_only = policy.startswith("lossless")

    def why(encodings: tuple[str, ...]) -> str:
        if not encodings:
            return "no encoding applies"
        if lossless_only and not set(encodings) & set(LOSSLESS):
            return f"no lossless encoding applies (lossy: {', '.join(encodings)})"
        return f"not selected by this policy (applicable: {', '.join(encodings)})"

    left = [{"name": s.name, "pattern": s.pattern, "bytes": s.nbytes, "reason": why(s.encodings)}
            for s in original.stashed if s.name not in handled and s.nbytes > 0]
    return TransformResult(current, policy, tensors, log.skipped, before, after, left_alone=left,
                           all_records=records, modified_by=log.modified_by, pool_gate=pool_gate)


def _atomic_write_text(path: Path, text: str, replace: bool = True) -> None:
    with atomic_output(path, replace=replace) as tmp:
        Path(tmp).write_text(text)


def transform(model_or_dir: str | Path, output: str | Path, policy: str = "lossless", *,
              model: str | None = None, force: bool = False, batch: int | None = None,
              allow_unresolved: bool = False, external_threshold: int = EXTERNAL_DATA_THRESHOLD,
              lift_convs: bool = True, accept: Callable[[Path, Path | None], None] | None = None,
              **options: Any) -> TransformResult:
    """Transform a training graph file or artifact directory.

    ``output`` ending in ``.onnx`` is a model file (e.g. inside the artifact directory, next to the
    checkpoint); anything else is a directory that receives the transformed training_model.onnx plus copies
    of the checkpoint, optimizer and eval models, so it can be trained or measured on its own. The output is
    checked (writable, not there unless ``force``) and locked against concurrent runs before any work; a
    directory is built beside the old one and swapped in whole, so it is never half old, half new.
    ``batch`` fixes a dynamic batch axis first; a stash whose size stays unresolved is an error unless
    ``allow_unresolved``. Initializers of ``external_threshold`` bytes or more in all (default: what protobuf's
    2 GiB limit allows) go to a data file beside the graph, written with it as a set (``load.save_model``).
    ``lift_convs``: see ``transform_model``.
    ``accept(artifact_dir, model_file)``: called with the complete output written but not yet published (a
    directory: the staged set and None; a ``.onnx``: the input's artifact directory and a temporary copy of the
    graph beside ``output``); if it raises, nothing is published and what ``output`` held stays (`--verify`
    measures there).
    """
    from .static_batch import prepare_for_transform

    loaded = load_model(model_or_dir, model)
    loaded.model = prepare_for_transform(loaded.model, str(loaded.path), batch=batch,
                                         allow_unresolved=allow_unresolved)
    out = Path(output)
    to_dir = out.suffix != ".onnx"
    out_model = out / TRAINING_MODEL if to_dir else out
    if out_model.resolve() == loaded.path.resolve() and not force:
        raise OnnxcompError(f"{out_model}: refusing to overwrite the input model; choose another {{output}}, or "
                            "allow replacing it with {force}", options=("output", "force"))
    passes = make_passes(policy, **options)   # refuses options the policy does not take, before any work
    if options.get("split_weight_bytes") and (not to_dir or loaded.artifact_dir is None):
        raise OnnxcompError("{split_weight_bytes} rewrites the checkpoint and eval model too: give an artifact "
                            "directory as input and a new directory as {output} (not a .onnx file)",
                            options=("split_weight_bytes", "output"))
    if options.get("split_weight_bytes") and loaded.artifact_dir.resolve() == out.resolve():
        raise OnnxcompError(f"{out}: splitting weights rewrites the checkpoint; write to another directory as "
                            "{output} so the original artifacts stay intact", options=("output",))
    target = check_output_path(out if to_dir else out_model, directory=to_dir, replace=True)
    with output_lock(target):
        for existing in ([out_model, out / "checkpoint"] if options.get("split_weight_bytes") else [out_model]):
            if existing.exists() and not force and existing.resolve() != loaded.path.resolve():
                raise OutputExistsError(existing, how="allow it with {force}", options=("force",))
        result = transform_model(loaded.model, policy, where=str(loaded.path), passes=passes,
                                 base_dir=loaded.path.parent, lift_convs=lift_convs)
        if result.splits and (not to_dir or loaded.artifact_dir is None
                              or loaded.artifact_dir.resolve() == out.resolve()):
            # Decided by the plan (policy auto), not asked for: the same rule as {split_weight_bytes}.
            raise OnnxcompError("the plan holds fully connected weights as row blocks, which rewrites the "
                                "checkpoint: give an artifact directory as input and a new directory as {output} "
                                "(not a .onnx file)", options=("output",))
        if _planned_spacers(result) and (not to_dir or loaded.artifact_dir is None
                                         or loaded.artifact_dir.resolve() == out.resolve()):
            # The ORT-defaults plan was priced with spacer parameters (passes/arena_spacer.py), which need the
            # checkpoint and eval model too: without them the graph would hold ORT's pattern block twice.
            raise OnnxcompError("the plan adds spacer parameters for ORT's arena, which rewrites the checkpoint: "
                                "give an artifact directory as input and a new directory as {output} (not a .onnx "
                                "file)", options=("output",))
        if to_dir:
            with staged_directory(out, replace=True, carry_over=True) as stage:
                _write_set(result, loaded, stage, out, external_threshold)
                if accept is not None:
                    if out.is_dir():
                        # The files the new set keeps from the old one (carried over when published) are
                        # linked in now: a staged set without them (e.g. no checkpoint) cannot be measured.
                        carry_over_entries(out, stage)
                    accept(stage, None)
        else:
            if accept is not None:
                _accept_model_file(result, loaded, out_model, accept, external_threshold)
            _write_model_and_plan(result, loaded, out_model, out_model, replace=force,
                                  external_threshold=external_threshold)
    return result


def _accept_model_file(result: TransformResult, loaded: Any, out_model: Path,
                       accept: Callable[[Path, Path | None], None], external_threshold: int) -> None:
    """``accept`` for a ``.onnx`` output: the graph written to a temporary name beside ``out_model`` (where the
    output lock's clean-up finds it if the run is killed), shown to ``accept``, then removed with its companions."""
    if loaded.artifact_dir is None:
        raise OnnxcompError(f"{loaded.path}: checking the written graph needs an artifact directory (checkpoint, "
                            "optimizer model) as input; give the directory, not a model file")
    fd, name = tempfile.mkstemp(prefix=f".{out_model.name}.tmp-accept-", suffix=".onnx", dir=out_model.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        _write_model_and_plan(result, loaded, tmp, out_model, replace=True, external_threshold=external_threshold)
        accept(loaded.artifact_dir, tmp)
    finally:
        for f in [tmp, tmp.with_suffix(".plan.json"), *(tmp.parent / n for n in data_file_names(tmp))]:
            f.unlink(missing_ok=True)


def _write_set(result: TransformResult, loaded: Any, stage: Path, out: Path, external_threshold: int) -> None:
    """The directory output, written into ``stage`` (swapped in for ``out`` afterwards): the training graph,
    its plan and the artifact files with the external data files they name (split ones rewritten; files
    ``out`` already has are kept)."""
    if result.splits:
        from .runtime.checkpoint import write_split_artifacts

        assert loaded.artifact_dir is not None
        write_split_artifacts(loaded.artifact_dir, stage, result.splits, force=True)
    if loaded.artifact_dir is not None and loaded.artifact_dir.resolve() != out.resolve():
        names = [*_ARTIFACT_FILES]
        names += [f for name in _ARTIFACT_FILES if name.endswith(".onnx")
                  for f in sorted(external_data_files(loaded.artifact_dir / name)) if Path(f).name == f]
        for name in names:
            src = loaded.artifact_dir / name
            if src.exists() and not (stage / name).exists() and not (out / name).exists():
                (shutil.copytree if src.is_dir() else shutil.copy2)(src, stage / name)
    if result.modified_by:
        _order_parameters(result, stage)
        _add_spacers(result, stage)
    _write_model_and_plan(result, loaded, stage / TRAINING_MODEL, out / TRAINING_MODEL, replace=True,
                          external_threshold=external_threshold)


def _order_parameters(result: TransformResult, stage: Path) -> None:
    """The parameters listed so that ORT's arena keeps room for the first step's convolution scratch
    (passes/grad_buffer_order.py), with the eval model in ``stage`` listing them in the same order (ORT's
    EvalStep feeds the training graph's parameter order). Only here, where the artifact set is written together:
    a training graph written alone would leave an eval model elsewhere in the old order."""
    ordered = GradBufferOrderPass().run(result.model)
    if not ordered.changed:
        return
    eval_path = stage / "eval_model.onnx"
    if eval_path.exists():
        eval_model = onnx.load(str(eval_path), load_external_data=False)
        if align_eval_inputs(ordered.model, eval_model):
            tmp = eval_path.with_name(eval_path.name + ".tmp")   # a new file: stage's copy may be a hard link
            onnx.save(eval_model, str(tmp))
            tmp.replace(eval_path)
    result.model = ordered.model
    result.all_records += ordered.records
    result.modified_by.append(GradBufferOrderPass.name)


def _planned_scratch_limit(records: list) -> int | None:
    """The kernel scratch limit the budget planner's ORT-defaults mode priced its plan with (None: none)."""
    return _ort_defaults_plan(records).get("scratch_limit_bytes")


def _planned_scratch_exact(records: list) -> bool:
    """Whether that limit was priced with the bit-identical scratch passes (an `--exact` plan)."""
    return bool(_ort_defaults_plan(records).get("scratch_exact"))


def _planned_fp16_cast_first(records: list) -> bool:
    """Whether the budget planner's ORT-defaults mode priced its plan with native fp16 encoders cast first."""
    return bool(_ort_defaults_plan(records).get("fp16_cast_first"))


def _ort_defaults_plan(records: list) -> dict:
    """The ORT-defaults section of the budget planner's record ({} where there is none)."""
    return next((r.detail["ort_defaults"] for r in records
                 if r.pass_name == "auto" and isinstance(r.detail, dict) and r.detail.get("ort_defaults")), {})


def _planned_spacers(result: TransformResult) -> list[int]:
    """The spacer sizes the budget planner's ORT-defaults mode priced its plan with ([] for none)."""
    return next((r.detail["ort_defaults"].get("spacers") or [] for r in result.all_records
                 if r.pass_name == "auto" and isinstance(r.detail, dict) and r.detail.get("ort_defaults")), [])


def _add_spacers(result: TransformResult, stage: Path) -> None:
    """The spacer parameters the budget planner's ORT-defaults mode chose (passes/arena_spacer.py), with the
    checkpoint and eval model in ``stage`` holding them too. Only here, where the artifact set is written together."""
    from .passes.arena_spacer import ArenaSpacerPass, spacers_of, write_spacer_artifacts

    sizes = _planned_spacers(result)
    if not sizes:
        return
    added = ArenaSpacerPass(sizes).run(result.model)
    if not added.changed:
        return
    write_spacer_artifacts(stage, spacers_of(added.model))
    result.model = added.model
    result.all_records += added.records
    result.modified_by.append(ArenaSpacerPass.name)


def _write_model_and_plan(result: TransformResult, loaded: Any, path: Path, final: Path, replace: bool,
                          external_threshold: int = EXTERNAL_DATA_THRESHOLD) -> None:
    plan_path = path.with_suffix(".plan.json")
    result.output, result.plan_path = final, final.with_suffix(".plan.json")
    plan = {"input": str(loaded.path), **result.summary(), "tensors": [r.to_dict() for r in result.records]}
    save_model(result.model, path, source_dir=loaded.path.parent, replace=replace,
               external_threshold=external_threshold)
    _atomic_write_text(plan_path, json.dumps(plan, indent=2))  # the model's companion: follows the model
