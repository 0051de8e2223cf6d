"""Graph rewrites, one pass per module; a policy is an ordered list of passes."""
from __future__ import annotations

from .base import GraphPass, PassResult, Skipped
from .maxpool_index import MaxPoolIndexPass
from .signbits import SignBitsPass
from .sparse import SparsePass

POLICIES: dict[str, list[type[GraphPass]]] = {
    "lossless": [SignBitsPass, MaxPoolIndexPass, SparsePass],
}

__all__ = ["GraphPass", "MaxPoolIndexPass", "POLICIES", "PassResult", "SignBitsPass", "Skipped", "SparsePass"]
