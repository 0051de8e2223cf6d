"""Failures inside onnxcomp's PyOps, carried out of ONNX Runtime to the training step as one Python exception.

An exception escaping an onnxruntime-extensions PyOp aborts the process (SIGABRT from an uncaught
``pybind11::error_already_set``), so the PyOp hook (``pyops._fast_hook``) catches everything, records it here,
and hands ORT well-formed placeholder outputs so the run finishes. The step then raises the recorded failure:

* onnxcomp's own loops (``runtime.train``, the measure worker) run each step in ``guarded_step()``;
* in your own ORT loop, wrap the module (``GuardedModule(module)``) or call ``raise_pending()`` after each
  ``module(...)`` call. ``GuardedModule`` also discards the failed step's accumulated gradients.

This module imports neither onnxruntime nor numpy: the ops import it on every call path.
"""
from __future__ import annotations

import _thread
import sys
import threading
import traceback
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator

from onnxcomp.errors import OpError


@dataclass(frozen=True)
class OpFailure:
    op_type: str
    tensor: str | None
    cause: str          # "ExcType: message"
    traceback: str
    interrupted: bool   # a KeyboardInterrupt arrived while the op ran


_lock = threading.Lock()
_pending: list[OpFailure] = []
_guard_depth = 0  # > 0 while a guarded step runs: the guard reports, so record() stays quiet


def record(op_type: str, tensor: str | None, exc: BaseException) -> None:
    """Note that ``op_type`` failed on ``tensor``; called from inside the PyOp hook, so it never raises."""
    interrupted = isinstance(exc, KeyboardInterrupt)
    cause = "interrupted (KeyboardInterrupt)" if interrupted else f"{type(exc).__name__}: {exc}"
    failure = OpFailure(op_type, tensor, cause, "".join(traceback.format_exception(exc)), interrupted)
    with _lock:
        _pending.append(failure)
        first, quiet = len(_pending) == 1, _guard_depth > 0
    if interrupted:
        # Re-deliver the interrupt once ORT hands control back to Python, guarded or not.
        _thread.interrupt_main()
    elif first and not quiet:
        # An unguarded loop may never call raise_pending(): say it once on stderr at least.
        print(f"onnxcomp: {op_type} (tensor {tensor or '?'}) failed inside ONNX Runtime: {cause}; this step's "
              "outputs are invalid (onnxcomp.runtime.raise_pending() raises it)", file=sys.stderr, flush=True)


def pending() -> list[OpFailure]:
    """Failures recorded since the last ``raise_pending``/``clear`` (oldest first)."""
    with _lock:
        return list(_pending)


def clear() -> list[OpFailure]:
    """Forget the recorded failures; returns them."""
    with _lock:
        taken = list(_pending)
        _pending.clear()
    return taken


def _error(failures: list[OpFailure]) -> OpError:
    first = failures[0]
    err = OpError(first.op_type, first.tensor, first.cause, others=len(failures) - 1)
    err.traceback = first.traceback  # the op's own traceback, for debugging
    return err


def _settle_payload_store() -> None:
    """End the step's use of the payload store (runtime.payload_store), if the ops loaded it: its worker may
    still record a failure, and nothing it holds may outlive the step. Looked up, not imported: no numpy here."""
    store = sys.modules.get("onnxcomp.runtime.payload_store")
    if store is not None:
        store.settle()


def raise_pending() -> None:
    """Raise the first op failure recorded since the last call as an ``onnxcomp.errors.OpError`` (and
    forget them all). Call it after every ``module(...)``/``InferenceSession.run`` in your own loop, or use
    ``GuardedModule``/``guarded_step`` which do it for you. It also ends the step's use of the payload store."""
    _settle_payload_store()
    failures = clear()
    if not failures:
        return
    if any(f.interrupted for f in failures):
        raise KeyboardInterrupt
    raise _error(failures)


@contextmanager
def guarded_step() -> Iterator[None]:
    """Run one ORT call (a training step, an eval pass) so that any onnxcomp op failure inside it surfaces as
    ONE ``OpError`` when it ends; an error ORT itself raised because of the placeholder outputs is chained to
    it rather than shown instead of it."""
    global _guard_depth
    stale = clear()  # failures of an earlier, unguarded call belong to that call (they were printed then)
    del stale
    with _lock:
        _guard_depth += 1
    try:
        yield
    except Exception as exc:
        _settle_payload_store()
        failures = clear()
        if failures:
            if any(f.interrupted for f in failures):
                raise KeyboardInterrupt from exc
            raise _error(failures) from exc
        raise
    finally:
        with _lock:
            _guard_depth -= 1
    raise_pending()


class GuardedModule:
    """Wrap an ``onnxruntime.training.api.Module`` (or anything callable like one) so each call raises an
    ``OpError`` for a failed onnxcomp op instead of returning invalid outputs; a failed training step's
    gradients are discarded (``lazy_reset_grad``) so the next step starts clean. Every other attribute is
    the wrapped module's."""

    def __init__(self, module: Any) -> None:
        self._module = module

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            with guarded_step():
                return self._module(*args, **kwargs)
        except OpError:
            reset = getattr(self._module, "lazy_reset_grad", None)
            if reset is not None:
                reset()
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self._module, name)
