"""Diagnosis: a graph's training-step growth under ORT's defaults with the CPU arena's growth strategy chosen.

    ONNXCOMP_CODEC_BACKEND=numpy MALLOC_MMAP_THRESHOLD_=131072 \
        python tools/arena_strategy_check.py ARTIFACT_DIR MODEL.onnx STEPS {0|1|-1} [default|priority]

Strategy 0 = kNextPowerOfTwo (ORT's default), 1 = kSameAsRequested, through an environment arena; -1 = the
session's own arena (ORT's defaults exactly)
(``ort.create_and_register_allocator`` + ``session.use_env_allocators``); memory pattern and reuse on. Prints the
growth over the post-set-up RSS after each step (one fresh process per run). With ``ORT_LOG=1`` ORT's arena logs
each extension ("Extending BFCArena ... num_bytes") to stderr. docs/notes/ortdefaults.md, cause 3, uses it to show
that the memory pattern's block held twice comes from the power-of-two growth (users' session settings; not a
fix onnxcomp can make from the graph).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import onnxruntime as ort

from onnxcomp.runtime.data import graph_data, synthetic_batches
from onnxcomp.runtime.proc_memory import reset_hwm, status_bytes
from onnxcomp.runtime.session import RuntimeSettings
from onnxcomp.runtime.training_session import open_artifact_session


def main(argv: list[str]) -> None:
    d, model, steps, strategy = Path(argv[0]), Path(argv[0]) / argv[1], int(argv[2]), int(argv[3])
    order = argv[4] if len(argv) > 4 else "default"
    ort.set_default_logger_severity(1 if os.environ.get("ORT_LOG") else 3)
    so = RuntimeSettings(arena=True, mem_pattern=True, mem_reuse=True, execution_order=order).session_options()
    if strategy >= 0:   # -1: the session's own arena, exactly ORT's defaults (what `onnxcomp measure` runs)
        mem = ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT)
        ort.create_and_register_allocator(mem, ort.OrtArenaCfg({"arena_extend_strategy": strategy}))
        so.add_session_config_entry("session.use_env_allocators", "1")
    session = open_artifact_session(d, model, session_options=so, seed=0)
    module, optimizer = session.module, session.optimizer
    spec = graph_data(d, model, list(module.input_names()))
    if spec.image.dtype.kind == "i":
        from onnxcomp.runtime.text_data import text_dataset

        gen = text_dataset(spec.image.shape, spec.classes).train_batches(0)
    else:
        gen = synthetic_batches(spec.image.shape, spec.classes, 0, spec.image.dtype)
    batches = [next(gen) for _ in range(steps)]
    setup = status_bytes("VmRSS")
    for i, (x, y) in enumerate(batches):
        reset_hwm()
        loss = module(x, y)
        optimizer.step()
        module.lazy_reset_grad()
        print(f"step {i}: growth {(status_bytes('VmHWM') - setup) / 2**20:.1f} MiB, loss {float(loss):.6f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
