"""Load a training graph from a file or an artifact directory, with errors a user can act on."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import onnx
from google.protobuf.message import DecodeError

from .errors import OnnxcompError

TRAINING_MODEL = "training_model.onnx"


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
