"""Load a training graph from a file or an artifact directory (with errors a user can act on), and save one."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import onnx
from google.protobuf.message import DecodeError

from .errors import OnnxcompError

TRAINING_MODEL = "training_model.onnx"
# Protobuf cannot serialise a message of 2 GiB or more: above this, initializers go to an external data file.
EXTERNAL_DATA_THRESHOLD = (2 << 30) - (64 << 20)


@dataclass
class LoadedModel:
    model: onnx.ModelProto
    path: Path                 # the .onnx file read
    artifact_dir: Path | None  # the directory it came from, when one was given


def resolve_model_path(path: str | Path, model: str | os.PathLike[str] | None = None) -> tuple[Path, Path | None]:
    """The one model-path resolver: MODEL_OR_DIR (+ optional ``model``) to (onnx file, artifact dir).

    A directory: ``model`` is a file name inside it (default training_model.onnx), or else a path of its own
    (a transformed graph kept elsewhere, trained against this directory's checkpoint). A file: ``model``
    must be None."""
    p = Path(path)
    if not p.exists():
        raise OnnxcompError(f"{p}: no such file or directory; pass a training_model.onnx or the directory "
                            "that onnxruntime.training.artifacts.generate_artifacts wrote")
    if p.is_dir():
        candidate = p / (model or TRAINING_MODEL)
        if model is not None and not candidate.is_file() and Path(model).is_file():
            candidate = Path(model)
        if not candidate.is_file():
            found = sorted(q.name for q in p.glob("*.onnx"))
            hint = f" (it has: {', '.join(found)})" if found else ""
            raise OnnxcompError(f"{p}: no {candidate.name} in this directory, model file not found{hint}; pass "
                                "a .onnx name inside it, a path to the graph, or the artifact directory of a "
                                "training graph")
        return candidate, p
    if model:
        raise OnnxcompError(f"{p}: {{model}} names a file inside a directory, but {p} is a file",
                            options=("model",))
    return p, p.parent


def resolve_training_run(artifact_dir: str | Path, model: str | os.PathLike[str] | None = None) -> Path:
    """The training graph a run (train, measure, profile) steps, resolved by ``resolve_model_path`` inside
    ``artifact_dir``, which must be a directory holding the checkpoint and optimizer model. The graph is read
    once here, so a truncated file or one of another custom-op set fails in one line before any session."""
    d = Path(artifact_dir)
    if d.is_file():
        raise OnnxcompError(
            f"{d} is a file; give the artifact directory (checkpoint, optimizer model) and the graph by name: "
            f"{d.parent} with {{model}} {d.name}", options=("model",)
        )
    if not d.is_dir():
        raise OnnxcompError(f"artifact directory {d} does not exist; generate the training artifacts first")
    path, _ = resolve_model_path(d, model)
    load_model(path)
    for needed in ("checkpoint", "optimizer_model.onnx"):
        if not (d / needed).exists():
            raise OnnxcompError(
                f"{needed} missing from {d}; regenerate the artifacts with "
                "onnxruntime.training.artifacts.generate_artifacts"
            )
    return path.resolve()


def load_model(path: str | Path, model: str | None = None) -> LoadedModel:
    """Read an ONNX model; parameters may live in external data next to it."""
    onnx_path, artifact_dir = resolve_model_path(path, model)
    try:
        proto = onnx.load(str(onnx_path), load_external_data=False)
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise OnnxcompError(f"{onnx_path}: not a readable ONNX model ({type(exc).__name__}: "
                            f"{str(exc).splitlines()[0] if str(exc) else 'parse error'}); the file may be "
                            "truncated or not ONNX — re-export it") from None
    except OSError as exc:
        raise OnnxcompError(f"{onnx_path}: cannot read ({exc.strerror or exc})") from None
    if not proto.graph.node:
        raise OnnxcompError(f"{onnx_path}: the file parsed but holds no graph nodes — it is not an ONNX model "
                            "(or it is empty); pass a training_model.onnx")
    require_compatible_opset(proto, onnx_path)
    return LoadedModel(proto, onnx_path, artifact_dir)


def has_external_data(model: onnx.ModelProto) -> bool:
    return any(t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer)


def external_data_files(model: onnx.ModelProto | str | Path) -> set[str]:
    """The external data files (locations relative to the model's directory) the model's initializers name;
    a path that does not hold a readable model names none."""
    if not isinstance(model, onnx.ModelProto):
        try:
            model = onnx.load(str(model), load_external_data=False)
        except (DecodeError, RuntimeError, ValueError, OSError):
            return set()
    return {e.value for t in model.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL
            for e in t.external_data if e.key == "location"}


def initializer_bytes(model: onnx.ModelProto) -> int:
    """The initializers' serialised size, external ones by their recorded length."""
    total = 0
    for t in model.graph.initializer:
        if t.data_location == onnx.TensorProto.EXTERNAL:
            total += next((int(e.value) for e in t.external_data if e.key == "length"), 0)
        else:
            total += t.ByteSize()
    return total


def save_model(model: onnx.ModelProto, path: str | Path, *, source_dir: Path | None = None,
               external_threshold: int = EXTERNAL_DATA_THRESHOLD, replace: bool = True) -> list[Path]:
    """Write ``model`` to ``path`` atomically; returns the files written.

    Initializers the source keeps in external data (relative to ``source_dir``) are never referenced by the
    output. A model whose initializers total less than ``external_threshold`` bytes is one self-contained
    file (external data read in). A larger one (protobuf's 2 GiB limit) is written through onnx-ir with its
    initializers in a data file beside it, streamed from the source's data without a protobuf copy; model and
    data are published as a set (see ``_save_with_external_data``). ``replace=False``: an existing ``path``
    is an error (OutputExistsError), never replaced."""
    from .fileio import atomic_output

    target = Path(path)
    external = has_external_data(model)
    if external and source_dir is None:
        raise OnnxcompError(f"{target}: the model keeps initializers in external data, but where they live "
                            "is unknown; load it from its file")
    keep = {(source_dir / f).resolve() for f in external_data_files(model)} if external else set()
    replaced = {(target.parent / f).resolve() for f in external_data_files(target)} if replace else set()
    if initializer_bytes(model) >= external_threshold:
        written = _save_with_external_data(model, target, source_dir if external else None, keep, replace)
        _retire_data_files(target, replaced - keep - {written[1].resolve()})
        return written
    if external:
        from onnx.external_data_helper import load_external_data_for_model

        try:
            load_external_data_for_model(model, str(source_dir))
        except OSError as exc:
            raise OnnxcompError(f"{source_dir}: cannot read the model's external data ({exc.strerror or exc}); "
                                "keep the .data file next to the model") from None
    with atomic_output(target, replace=replace) as tmp:  # replace=False: exclusive create
        onnx.save(model, tmp)
    _retire_data_files(target, replaced - keep)
    return [target]


def data_file_names(target: Path) -> list[str]:
    """The names onnxcomp gives a graph's data file: NAME.data, then NAME.1.data ... while those are taken."""
    return [f"{target.name}.data"] + [f"{target.name}.{i}.data" for i in range(1, 8)]


def _retire_data_files(target: Path, unused: set[Path]) -> None:
    """Remove the data files a replaced graph at ``target`` used that onnxcomp named (never anyone else's)."""
    for old in unused:
        if old.name in data_file_names(target) and old.parent == target.parent.resolve():
            old.unlink(missing_ok=True)


def _data_file_name(target: Path, keep: set[Path]) -> str:
    """A data file name beside ``target`` that no file uses yet (``NAME.data``, else ``NAME.1.data``, ...), or
    failing that one that neither the model now at ``target`` nor the input (``keep``) references."""
    in_use = {(target.parent / f).resolve() for f in external_data_files(target)} | keep
    names = data_file_names(target)
    for name in names:
        if not (target.parent / name).exists():
            return name
    for name in names:
        if (target.parent / name).resolve() not in in_use:
            return name
    raise OnnxcompError(f"{target}: every data file name beside it is in use ({', '.join(names)}); remove the "
                        "ones no model needs")


def _save_with_external_data(model: onnx.ModelProto, target: Path, source_dir: Path | None, keep: set[Path],
                             replace: bool) -> list[Path]:
    """Model and data file written into a staging directory beside ``target``, then published as a set: the
    data file under a name that nothing references (so the model now at ``target`` stays whole), then the
    model in one rename. At every moment ``target`` names a complete model whose data file is complete.
    ``keep``: the input's data files (never written over)."""
    import shutil
    import tempfile

    import onnx_ir as ir

    from .errors import OutputExistsError

    ir_model = ir.serde.deserialize_model(model)
    if source_dir is not None:
        ir.external_data.set_base_dir(ir_model.graph, source_dir)   # read lazily (memory-mapped) while saving
    data = _data_file_name(target, keep)
    stage = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        ir.save(ir_model, stage / target.name, external_data=data)
        os.replace(stage / data, target.parent / data)
        try:
            if replace:
                os.replace(stage / target.name, target)
            else:
                os.link(stage / target.name, target)  # exclusive: fails if target exists
        except BaseException as exc:
            (target.parent / data).unlink(missing_ok=True)
            if isinstance(exc, FileExistsError):
                raise OutputExistsError(target, how="pass force=True") from None
            raise
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return [target, target.parent / data]


def require_compatible_opset(model: onnx.ModelProto | str | Path, where: str | Path | None = None) -> None:
    """Refuse a graph whose onnxcomp custom ops follow another op-set version (custom_ops.contract)."""
    from .custom_ops.contract import opset_problem

    if not isinstance(model, onnx.ModelProto):
        where = where or model
        try:
            model = onnx.load(str(model), load_external_data=False)
        except (DecodeError, RuntimeError, ValueError, OSError):
            return   # not readable as ONNX: whoever loads it next reports that, with its own context
    problem = opset_problem({p.key: p.value for p in model.metadata_props})
    if problem:
        raise OnnxcompError(f"{where or 'model'}: {problem}")
