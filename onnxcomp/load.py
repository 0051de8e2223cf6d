"""Load a training graph from a file or an artifact directory (with errors a user can act on), and save one."""
from __future__ import annotations

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


def resolve_model_path(path: str | Path, model: str | None = None) -> tuple[Path, Path | None]:
    """Map MODEL_OR_DIR (+ optional model file name inside the dir) to (onnx file, artifact dir)."""
    p = Path(path)
    if not p.exists():
        raise OnnxcompError(f"{p}: no such file or directory; pass a training_model.onnx or the directory "
                            "that onnxruntime.training.artifacts.generate_artifacts wrote")
    if p.is_dir():
        candidate = p / (model or TRAINING_MODEL)
        if not candidate.is_file():
            found = sorted(q.name for q in p.glob("*.onnx"))
            hint = f" (it has: {', '.join(found)})" if found else ""
            raise OnnxcompError(f"{p}: no {candidate.name} in this directory{hint}; pass the artifact "
                                "directory of a training graph or the .onnx file itself")
        return candidate, p
    if model:
        raise OnnxcompError(f"{p}: {{model}} names a file inside a directory, but {p} is a file",
                            options=("model",))
    return p, p.parent


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


def save_model(model: onnx.ModelProto, path: str | Path, *, source_dir: Path | None = None,
               external_threshold: int = EXTERNAL_DATA_THRESHOLD, replace: bool = True) -> list[Path]:
    """Write ``model`` to ``path`` atomically; returns the files written.

    Initializers the source keeps in external data (relative to ``source_dir``) are read in first, so the
    output never points into the input's files. A model of ``external_threshold`` bytes or more is written
    through onnx-ir with its initializers in ``<path name>.data`` beside it (protobuf's 2 GiB limit)."""
    from .fileio import atomic_output

    target = Path(path)
    if has_external_data(model):
        if source_dir is None:
            raise OnnxcompError(f"{target}: the model keeps initializers in external data, but where they live "
                                "is unknown; load it from its file")
        from onnx.external_data_helper import load_external_data_for_model

        try:
            load_external_data_for_model(model, str(source_dir))
        except OSError as exc:
            raise OnnxcompError(f"{source_dir}: cannot read the model's external data ({exc.strerror or exc}); "
                                "keep the .data file next to the model") from None
    big = sum(t.ByteSize() for t in model.graph.initializer) >= external_threshold
    with atomic_output(target, replace=replace) as tmp:  # replace=False: exclusive create
        if not big:
            onnx.save(model, tmp)
            return [target]
        import onnx_ir as ir

        data = f"{target.name}.data"
        ir.save(ir.serde.deserialize_model(model), tmp, external_data=data)
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
