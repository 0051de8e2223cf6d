"""ONNX Runtime session options for onnxcomp graphs: our custom ops registered, settings reportable."""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

import onnxruntime as ort

from onnxcomp.errors import OnnxcompError

EXECUTION_ORDERS = {
    # PRIORITY_BASED runs ready nodes in node-list order, so encoders placed right after their
    # producers run in the forward pass (see platform notes, "Execution order").
    "priority": ort.ExecutionOrder.PRIORITY_BASED,
    "default": ort.ExecutionOrder.DEFAULT,
}


@dataclass(frozen=True)
class RuntimeSettings:
    """The session settings a run used; they change memory figures, so every result echoes them."""

    arena: bool = False
    mem_pattern: bool = False
    execution_order: str = "priority"
    intra_threads: int | None = None
    profile: str | None = None
    # ORT's buffer-reuse plan hands a buffer freed in the forward pass to a same-sized tensor of the
    # backward pass and keeps it allocated in between: with the arena off that holds every freed
    # activation (measured +10 MiB on ResNet-18's baseline, +25 MiB once its stashes are encoded).
    mem_reuse: bool = False
    # Checksum every codec payload at encode and verify it at decode (xxh3; framing.py); the header check
    # runs either way.
    verify_payloads: bool = False
    # Where codec payloads live between encode and decode (runtime.payload_store): "off" (ORT tensors),
    # "inline" (a process-wide store, no bridge copies of payloads), "async" (plus a codec worker thread and
    # prefetching decodes). None: leave the process's mode (ONNXCOMP_PAYLOAD_STORE, default "off").
    payload_store: str | None = None

    def __post_init__(self) -> None:
        if self.execution_order not in EXECUTION_ORDERS:
            raise OnnxcompError(
                f"unknown execution order {self.execution_order!r} in runtime settings; "
                f"use one of {sorted(EXECUTION_ORDERS)}"
            )
        if self.payload_store is not None and self.payload_store not in ("off", "inline", "async"):
            raise OnnxcompError(
                f"unknown payload store mode {self.payload_store!r} in runtime settings; use off, inline or async"
            )
        if self.intra_threads is not None and self.intra_threads < 0:
            raise OnnxcompError(
                f"intra_threads={self.intra_threads} in runtime settings; use a count >= 0 (0 = ORT default)"
            )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "RuntimeSettings":
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise OnnxcompError(
                f"unknown runtime setting(s) {sorted(unknown)}; known settings are {sorted(known)}"
            )
        return cls(**data)

    def session_options(self) -> ort.SessionOptions:
        return session_options(**self.to_dict())


def session_options(
    *,
    arena: bool = False,
    mem_pattern: bool = False,
    execution_order: str = "priority",
    intra_threads: int | None = None,
    profile: str | None = None,
    mem_reuse: bool = False,
    verify_payloads: bool = False,
    payload_store: str | None = None,
) -> ort.SessionOptions:
    """SessionOptions with onnxcomp's PyOps registered.

    arena: ORT's CPU memory arena (holds memory across steps; off gives honest per-step peaks).
    mem_pattern: ORT's memory-pattern planner. execution_order: "priority" or "default".
    intra_threads: intra-op thread count (None = ORT default). profile: file prefix to enable
    ORT profiling (a JSON trace with node execution order). mem_reuse: ORT's buffer-reuse plan (keeps
    freed buffers allocated until a same-sized tensor reuses them; off gives per-tensor frees).
    verify_payloads: checksum codec payloads (process-wide: it applies to every session in the process).
    payload_store: "off", "inline" or "async" (runtime.payload_store; process-wide), None: unchanged.
    """
    RuntimeSettings(arena, mem_pattern, execution_order, intra_threads, profile, mem_reuse, verify_payloads,
                    payload_store)
    from onnxcomp.runtime import pyops
    from onnxruntime_extensions import get_library_path

    # The library snapshots the PyOps defined at registration time: define ours first.
    pyops.prepare_registration()
    from onnxcomp.runtime import codec_ops

    codec_ops.set_verify_payloads(verify_payloads)
    if payload_store is not None:
        from onnxcomp.runtime import payload_store as store

        store.set_mode(payload_store)
    so = ort.SessionOptions()
    so.enable_cpu_mem_arena = arena
    so.enable_mem_pattern = mem_pattern
    so.enable_mem_reuse = mem_reuse
    so.execution_order = EXECUTION_ORDERS[execution_order]
    if intra_threads is not None:
        so.intra_op_num_threads = intra_threads
    if profile:
        so.enable_profiling = True
        so.profile_file_prefix = profile
    so.register_custom_ops_library(get_library_path())
    return so
