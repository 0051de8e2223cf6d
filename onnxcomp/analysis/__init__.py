"""Training-graph analysis: load → boundary → shapes → tensor classes, lifetimes and stash patterns."""
from __future__ import annotations

from pathlib import Path

from ..load import load_model
from .boundary import Boundary, find_boundary
from .patterns import LOSSLESS, applicable_encodings, pattern_of
from .shapes import TensorType, numel, resolve_shapes
from .training_graph import GraphAnalysis, StashedTensor, TensorClass, TensorInfo, analyze_ir, analyze_model
from .cached import analysis_of

__all__ = ["Boundary", "GraphAnalysis", "LOSSLESS", "StashedTensor", "TensorClass", "TensorInfo", "TensorType",
           "analysis_of", "analyze", "analyze_ir", "analyze_model", "applicable_encodings", "find_boundary", "numel", "pattern_of",
           "resolve_shapes"]


def analyze(model_or_dir: str | Path, batch: int | None = None, model: str | None = None) -> GraphAnalysis:
    """Load a training graph (file or artifact directory) and analyse it."""
    loaded = load_model(model_or_dir, model)
    return analyze_model(loaded.model, batch, where=str(loaded.path))
