"""Diagnosis: where in a training step the process's memory peaks, seen from onnxcomp's PyOps.

    MALLOC_MMAP_THRESHOLD_=131072 [ORT_LOG=1] python tools/pyop_rss_trace.py ARTIFACT_DIR MODEL.onnx STEPS [defaults|onnxcomp]

Runs STEPS training steps (ORT's default session settings, or onnxcomp's) and, during the last one, prints
the growth of RSS and of the high-water mark over the post-set-up RSS on entry to and exit from every codec
PyOp (encoders in the forward, decoders in the backward). With ORT's memory pattern the pattern's block is
resident from the first step on, so what a PyOp adds on entry is the bridge's copy of its inputs (ResNet-18
``auto --exact``: the stem's ReLU-mask encoder reading an 8 MiB float tensor was the whole step's peak).
With ``ORT_LOG=1`` ORT's arena log goes to stderr with ``STEP i`` / ``OPT i`` markers, so an arena extension
(``Extending BFCArena ... num_bytes``) can be placed in the step (the pattern block's request comes first).
"""
from __future__ import annotations

import datetime
import os
import sys
from pathlib import Path

import onnxruntime as ort

import onnxcomp.runtime.pyops as pyops
from onnxcomp.runtime.data import graph_data, synthetic_batches
from onnxcomp.runtime.proc_memory import reset_hwm, status_bytes
from onnxcomp.runtime.session import RuntimeSettings
from onnxcomp.runtime.training_session import open_artifact_session

MIB = 2**20


def main(argv: list[str]) -> None:
    d, model, steps = Path(argv[0]), Path(argv[0]) / argv[1], int(argv[2])
    defaults = (argv[3] if len(argv) > 3 else "defaults") == "defaults"
    log: list[tuple[str, str, int, int]] = []
    tracing, setup = [False], [0]
    inner = pyops._fast_hook

    def hook(k_id: int, feed, attributes):  # noqa: ANN001, ANN202  (the PyOp bridge's hook contract)
        op = pyops.Opdef._odlist.get(k_id)
        name = op.op_type if op is not None else f"id={k_id}"
        if tracing[0]:
            log.append((name, "in", status_bytes("VmRSS") - setup[0], status_bytes("VmHWM") - setup[0]))
        out = inner(k_id, feed, attributes)
        if tracing[0]:
            log.append((name, "out", status_bytes("VmRSS") - setup[0], status_bytes("VmHWM") - setup[0]))
        return out

    ort.set_default_logger_severity(1 if os.environ.get("ORT_LOG") else 3)
    settings = RuntimeSettings(arena=True, mem_pattern=True, mem_reuse=True, execution_order="default") \
        if defaults else RuntimeSettings()
    so = settings.session_options()      # imports the codec ops and installs onnxcomp's hook
    pyops.PyCustomOpDef.install_hooker(hook)
    session = open_artifact_session(d, model, session_options=so, seed=0)
    module, optimizer = session.module, session.optimizer
    spec = graph_data(d, model, list(module.input_names()))
    gen = synthetic_batches(spec.image.shape, spec.classes, 0, spec.image.dtype)
    batches = [next(gen) for _ in range(steps)]
    setup[0] = status_bytes("VmRSS")
    for i, (x, y) in enumerate(batches):
        tracing[0] = i == steps - 1
        print("STEP", i, datetime.datetime.now(datetime.timezone.utc).isoformat(" "), file=sys.stderr, flush=True)
        reset_hwm()
        pre = status_bytes("VmRSS") - setup[0]
        loss = module(x, y)
        rss, hwm = status_bytes("VmRSS") - setup[0], status_bytes("VmHWM") - setup[0]
        print("OPT", i, datetime.datetime.now(datetime.timezone.utc).isoformat(" "), file=sys.stderr, flush=True)
        optimizer.step()
        module.lazy_reset_grad()
        print(f"step {i}: RSS before {pre / MIB:.1f} MiB, after forward+backward {rss / MIB:.1f} (high-water "
              f"{hwm / MIB:.1f}); step growth {(status_bytes('VmHWM') - setup[0]) / MIB:.1f} MiB, loss {float(loss):.6f}")
    for name, where, rss, hwm in log:
        print(f"  {name:40s} {where:3s} RSS {rss / MIB:7.1f}  high-water {hwm / MIB:7.1f} MiB")


if __name__ == "__main__":
    main(sys.argv[1:])
