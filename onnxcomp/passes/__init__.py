"""Graph rewrites, one pass per module; a policy is an ordered list of passes."""
from __future__ import annotations

from .base import GraphPass, PassResult, Skipped
from .eager_accumulation import EagerAccumulationPass
from .maxpool_index import MaxPoolIndexPass
from .signbits import SignBitsPass
from .sparse import SparsePass

POLICIES: dict[str, list[type[GraphPass]]] = {
    "lossless": [EagerAccumulationPass, SignBitsPass, MaxPoolIndexPass, SparsePass],
    # Reordering alone: the share of a lossless saving that needs no codec at all.
    "reorder": [EagerAccumulationPass],
}

__all__ = ["EagerAccumulationPass", "GraphPass", "MaxPoolIndexPass", "POLICIES", "PassResult", "SignBitsPass", "Skipped", "SparsePass"]
