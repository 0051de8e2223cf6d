"""A process-wide store for codec payloads shared by onnxcomp's encode/decode ops (issue 14: compression
off the critical path, FreeLunch's parallel workflow on CPU).

Modes (``set_mode``; ``RuntimeSettings.payload_store`` / ``--payload-store``; env ``ONNXCOMP_PAYLOAD_STORE``):

* ``off`` (default): payloads travel through ONNX Runtime as tensors, the ops' plain contract.
* ``inline``: the encoder compresses on ORT's thread as before, but keeps the payload here and hands ORT a
  token frame (``framing.stored_payload``: a few int64 words); the decoder takes the payload back by token.
  The payload no longer crosses the PyOp bridge twice (memcpy out of the encoder, copy into the decoder).
* ``async``: the encoder hands its input -- the bridge's own fresh copy, so ours to keep -- to one worker
  thread and returns the token at once; the decoder waits for the payload (or for its prefetched decode);
  after each decoder the worker starts decoding the payload expected next in backward order (the order the
  decoders ran in the previous step: the graph's, under a fixed execution order).

Memory the store adds, modelled by ``planner.predict`` (``payload_store=``): in ``async`` mode the raw input
copy stays alive until the worker has compressed it (at most one is in flight: the next encoder waits for
the previous encode), and a prefetched decode is held from the decoder before it until its own decoder runs.

ONNX Runtime-training 1.19.2 holds the GIL for the whole ``train_step`` (measured: a Python thread ticking
every 1 ms got 4 ticks in a 4.5 s step of a graph without PyOps), so the worker gets the GIL only while an op
waits on it (each handoff below waits until the worker has *started* its task) and keeps running in parallel
with ORT only inside code that releases the GIL (numba's ``nogil`` kernels, NumPy's large loops).

Every op result is the synchronous path's, bit for bit: the same codec functions run on the same arrays, only
on another thread or at another time. A failure on the worker is recorded against the encode op
(``op_errors``; the step raises it as one ``OpError``) and its decoder returns zeros without a second error;
waits time out (``ONNXCOMP_PAYLOAD_TIMEOUT_S``, default 300 s) instead of hanging. ``settle()`` ends a step:
it waits for the worker, drops whatever no decoder took, and remembers the decode order; ``op_errors`` calls it
whenever a step's failures are collected (``guarded_step``, ``raise_pending``), so nothing outlives a step.
"""
from __future__ import annotations

import itertools
import os
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any

from onnxcomp.errors import OnnxcompError

MODES = ("off", "inline", "async")
ENV_MODE = "ONNXCOMP_PAYLOAD_STORE"
ENV_TIMEOUT = "ONNXCOMP_PAYLOAD_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 300.0

# What an encode task returns when the codec failed (the failure is recorded already).
FAILED = object()


class StoreError(OnnxcompError):
    """A bad mode or timeout setting, a token the store does not hold, or a wait that timed out."""


def _env_mode() -> str:
    mode = os.environ.get(ENV_MODE, "off").strip().lower() or "off"
    if mode not in MODES:
        raise StoreError(f"{ENV_MODE}={mode!r} is not a payload-store mode; use one of {', '.join(MODES)}")
    return mode


def _env_timeout() -> float:
    raw = os.environ.get(ENV_TIMEOUT)
    try:
        value = float(raw) if raw else DEFAULT_TIMEOUT_S
    except ValueError:
        raise StoreError(f"{ENV_TIMEOUT}={raw!r} is not a number of seconds") from None
    if not value > 0:
        raise StoreError(f"{ENV_TIMEOUT}={raw!r}: use a positive number of seconds")
    return value


@dataclass
class _Entry:
    token: int
    tensor: str
    nbytes_in: int                       # bytes of the encoder's input (held until compressed, async)
    payload: Future                      # -> tuple of arrays, or FAILED
    prefetch: Future | None = None       # -> decoded array, or FAILED
    prefetch_key: str | None = None      # the decode params the prefetch ran with


@dataclass
class StoreStats:
    """Counters since the last ``reset_stats`` (tests and ``measure`` read them)."""
    puts: int = 0
    takes: int = 0
    prefetched: int = 0      # decodes started ahead of their decoder
    prefetch_hits: int = 0   # decoders served by a prefetch
    dropped: int = 0         # entries no decoder took before settle() (a forward-only call, a failed step)
    waits_s: float = 0.0     # time ORT's thread spent waiting on the worker
    held_max: int = 0        # most entries held at once
    steps: int = 0


@dataclass
class _Worker:
    """One daemon thread running tasks in submission order (a stuck task can never block interpreter exit)."""
    tasks: "queue.SimpleQueue[tuple[Future, Callable[[], Any], threading.Event] | None]" = field(
        default_factory=queue.SimpleQueue)
    thread: threading.Thread | None = None

    def submit(self, fn: Callable[[], Any]) -> tuple[Future, threading.Event]:
        if self.thread is None or not self.thread.is_alive():
            self.thread = threading.Thread(target=self._run, name="onnxcomp-codec-worker", daemon=True)
            self.thread.start()
        fut: Future = Future()
        started = threading.Event()
        self.tasks.put((fut, fn, started))
        return fut, started

    def _run(self) -> None:
        while True:
            item = self.tasks.get()
            if item is None:
                return
            fut, fn, started = item
            del item
            started.set()
            if fut.set_running_or_notify_cancel():
                try:
                    fut.set_result(fn())
                except BaseException as exc:  # noqa: BLE001  (handed to whoever waits on the future)
                    fut.set_exception(exc)
            # Drop the task (and the arrays its closure holds) now, not when the next task arrives.
            del fut, fn, started


class PayloadStore:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[int, _Entry] = {}
        self._by_tensor: dict[str, int] = {}
        self._tokens = itertools.count(1)
        self._worker = _Worker()
        self._last_encode: Future | None = None
        # Learned from the previous step: the order decoders took their tensors, and each tensor's decode.
        self._order_prev: dict[str, str] = {}        # tensor -> tensor decoded right after it
        self._order_now: list[str] = []
        self._decoders: dict[str, tuple[str, Callable[[Any], Any]]] = {}
        self.stats = StoreStats()

    # -- ORT's thread: the encode op --------------------------------------------------------------------------
    def put(self, mode: str, tensor: str, nbytes_in: int, encode: Callable[[], Any]) -> int:
        """Hold the payload ``encode()`` makes (now, or on the worker in async mode); returns its token.
        ``encode`` records its own failure and returns FAILED (it runs where no caller could catch)."""
        timeout = _env_timeout()
        token = next(self._tokens)
        if mode == "async":
            if self._last_encode is not None:   # at most one raw input waiting for the worker
                self._wait(self._last_encode, timeout, "the previous encode")
            fut, started = self._worker.submit(encode)
            self._last_encode = fut
            self._started(started, timeout)
        else:
            fut = Future()
            fut.set_result(encode())
        with self._lock:
            self._entries[token] = _Entry(token, tensor, nbytes_in, fut)
            self._by_tensor[tensor] = token
            self.stats.puts += 1
            self.stats.held_max = max(self.stats.held_max, len(self._entries))
        return token

    # -- ORT's thread: the decode op --------------------------------------------------------------------------
    def take(self, mode: str, token: int, tensor: str | None, decode_key: str,
             decode: Callable[[Any], Any]) -> Any:
        """The decoded tensor for ``token`` (``decode(payload)``, or the prefetch made with the same
        ``decode_key``), or FAILED when its encode failed. Then, in async mode, prefetch the next one."""
        timeout = _env_timeout()
        with self._lock:
            entry = self._entries.pop(token, None)
            if entry is not None and self._by_tensor.get(entry.tensor) == token:
                del self._by_tensor[entry.tensor]
        if entry is None:
            raise StoreError(f"payload token {token} is not in the payload store (freed at the end of its step, "
                             "or made by another process); its encoder must run in the same step")
        name = entry.tensor if tensor is None else tensor
        self._decoders[name] = (decode_key, decode)
        self._order_now.append(name)
        self.stats.takes += 1
        if entry.prefetch is not None and entry.prefetch_key == decode_key:
            self.stats.prefetch_hits += 1
            out = self._wait(entry.prefetch, timeout, f"the prefetched decode of {name}")
        else:
            payload = self._wait(entry.payload, timeout, f"the encode of {name}")
            out = FAILED if payload is FAILED else decode(payload)
        del entry
        if mode == "async":
            self._prefetch_after(name, timeout)
        return out

    def _prefetch_after(self, tensor: str, timeout: float) -> None:
        nxt = self._order_prev.get(tensor)
        learned = self._decoders.get(nxt) if nxt is not None else None
        with self._lock:
            entry = self._entries.get(self._by_tensor.get(nxt, -1)) if nxt is not None else None
            if entry is None or entry.prefetch is not None or learned is None:
                return
            key, decode = learned
            payload = entry.payload

            def run() -> Any:
                got = payload.result()   # done or queued before this task on the same worker
                return FAILED if got is FAILED else decode(got)

            entry.prefetch, started = self._worker.submit(run)
            entry.prefetch_key = key
            self.stats.prefetched += 1
        self._started(started, timeout)

    # -- step boundary -----------------------------------------------------------------------------------------
    def settle(self) -> int:
        """End a step: wait for the worker, drop what no decoder took, remember the decode order. Returns the
        number of entries dropped. Never raises (it runs while a step's failures are being collected)."""
        try:
            timeout = _env_timeout()
        except StoreError:
            timeout = DEFAULT_TIMEOUT_S
        with self._lock:
            entries = list(self._entries.values())
            self._entries.clear()
            self._by_tensor.clear()
        if self._worker.thread is not None and self._worker.thread.is_alive():
            # Tasks run in submission order: once a no-op submitted now has run, so has every earlier task
            # (unused prefetches included).
            try:
                self._worker.submit(lambda: None)[0].result(timeout)
            except BaseException:  # noqa: BLE001  (a stuck worker: its leftovers are dropped anyway)
                pass
        self._last_encode = None
        if self._order_now:
            self._order_prev = dict(zip(self._order_now, self._order_now[1:]))
            self._order_now = []
        self.stats.dropped += len(entries)
        self.stats.steps += 1
        return len(entries)

    def held(self) -> int:
        with self._lock:
            return len(self._entries)

    def reset_stats(self) -> None:
        self.stats = StoreStats()

    # -- waiting -----------------------------------------------------------------------------------------------
    def _wait(self, fut: Future, timeout: float, what: str) -> Any:
        import time

        t0 = time.perf_counter()
        try:
            return fut.result(timeout)    # releases the GIL: the worker runs while ORT's thread waits
        except FutureTimeout:
            raise StoreError(f"timed out after {timeout:g} s waiting for {what} on the codec worker thread "
                             f"(raise {ENV_TIMEOUT} on a heavily loaded machine)") from None
        finally:
            self.stats.waits_s += time.perf_counter() - t0

    def _started(self, started: threading.Event, timeout: float) -> None:
        """Hand the GIL to the worker until its task has begun: ORT's thread keeps the GIL for the whole step
        otherwise, and the worker would not start before the next op."""
        if not started.wait(timeout):
            raise StoreError(f"timed out after {timeout:g} s waiting for the codec worker thread to start a task")


_store = PayloadStore()
_mode = _env_mode()


def set_mode(mode: str) -> None:
    """Choose the payload-store mode for every op in this process (between steps, not during one)."""
    global _mode
    if mode not in MODES:
        raise StoreError(f"unknown payload-store mode {mode!r}; use one of {', '.join(MODES)}")
    if mode != _mode:
        _store.settle()
    _mode = mode


def mode() -> str:
    return _mode


def store() -> PayloadStore:
    return _store


def settle() -> int:
    """End the current step's use of the store (see PayloadStore.settle)."""
    return _store.settle()
