"""Results the budget planner would otherwise compute again and again, kept for one planning session.

`plan_auto` runs its greedy search up to eight times per call (with and without codec workspace on the virtual
curve, recomputations sized alone or jointly, with and without a row split), and each search rounds through
"apply the chosen options, predict the rewritten graph's peak". Those searches reach many of the same states:
the same base graph (scheduling and region techniques applied), the same recomputation tables, the same
chosen options. And every prediction of one graph analysed the same ModelProto several times (the live curve,
the conv workspace, the buffers at the peak, the region at the peak), each analysis a fresh onnx-ir load and
shape inference (analysis/shapes.py keeps its inferred types for the session, keyed by the graph's content
up to node order). Everything here is a pure function of its key, so a cached answer is the answer: the plans
are the same, only found sooner (tests/test_planner_memo.py checks decisions and peaks against a run without
the cache).

A session is opened by the outermost `plan_auto` call (or by a caller planning several budgets for one model,
``with planning_session():``, e.g. tools/bench_auto.py's budget ladder) and dropped when it closes. Keys that
name a ModelProto use its ``id``; the entry holds the proto itself, so the id cannot be reused while cached.
Cached values are shared, never copied: the planner and the passes only read analyses and live curves.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Hashable, Iterator
from typing import Any, TypeVar

import numpy as np
import onnx

T = TypeVar("T")

_SESSIONS: list[dict[Hashable, Any]] = []
_STATS = {"hits": 0, "misses": 0}


def active() -> bool:
    """Is a planning session open?"""
    return bool(_SESSIONS)


@contextlib.contextmanager
def planning_session() -> Iterator[None]:
    """Cache planner results until the block ends (nested sessions share the outermost one)."""
    if _SESSIONS:
        yield
        return
    from ..analysis import shapes

    _SESSIONS.append({})
    shapes.SESSION_CACHE = {}
    try:
        yield
    finally:
        _SESSIONS.pop()
        shapes.SESSION_CACHE = None


def disabled() -> contextlib.AbstractContextManager[None]:
    """No caching inside the block (the reference the memo tests compare against)."""
    return _Disabled()


class _Disabled(contextlib.AbstractContextManager):
    def __enter__(self) -> None:
        from ..analysis import shapes

        self._saved = list(_SESSIONS), shapes.SESSION_CACHE
        _SESSIONS.clear()
        _SESSIONS.append(_OFF)
        shapes.SESSION_CACHE = None

    def __exit__(self, *exc: Any) -> None:
        from ..analysis import shapes

        _SESSIONS.clear()
        _SESSIONS.extend(self._saved[0])
        shapes.SESSION_CACHE = self._saved[1]


class _Off(dict):
    """A session that never keeps anything (and keeps nested sessions from opening)."""

    def __setitem__(self, key: Hashable, value: Any) -> None:
        pass


_OFF = _Off()


def cached(kind: str, key: Hashable, make: Callable[[], T], *keep: Any) -> T:
    """``make()``, or its value from earlier in this session. ``keep``: objects whose ``id`` is part of ``key``
    (held with the entry so no other object takes their id while it is cached)."""
    if not _SESSIONS:
        return make()
    store = _SESSIONS[0]
    k = (kind, key)
    if k in store:
        _STATS["hits"] += 1
        return store[k][0]
    _STATS["misses"] += 1
    value = make()
    store[k] = (value, keep)
    return value


def proto_key(model: onnx.ModelProto) -> int:
    """A ModelProto's key: its identity (pass the proto in ``keep``)."""
    return id(model)


def analysis(model: onnx.ModelProto) -> Any:
    """``analyze_model(model)``, once per ModelProto per session."""
    from ..analysis import analyze_model

    return cached("analysis", id(model), lambda: analyze_model(model), model)


def live_copy(pair: tuple[Any, np.ndarray]) -> tuple[Any, np.ndarray]:
    """A cached (graph, live curve) with the curve copied: callers add to it in place."""
    return pair[0], pair[1].copy()


def stats() -> dict[str, int]:
    """Hits and misses since the process started (for profiling notes)."""
    return dict(_STATS)
