"""ORT's memory-pattern block P under its default session settings: predicted, and (``--measure``) measured.

    python tools/pattern_block.py MODEL_OR_DIR [MODEL_OR_DIR ...] [--measure]

Prediction: ``onnxcomp.planner.ort_pattern.predict_pattern_block`` (ORT optimises the graph; its allocation planner
and MemPatternPlanner are replayed; the module docstring says how). Also printed: the DEFAULT-order live peak of
the graph as given, for scale.

Measurement (``--measure``, an artifact directory; needs gcc): a child process runs two training steps with ORT's
memory pattern, buffer reuse and DEFAULT order but the CPU arena off, under an LD_PRELOAD shim
(``tools/malloc_log.c``) that logs large allocations. Without the arena the pattern block is one aligned
allocation of exactly P bytes at the start of every step (the first one of step 1 is taken), whether or not it
would have fitted the arena's set-up leftovers, which is when the arena log (tools/arena_regions.py) shows no P.
The arena does not change P (ORT plans the pattern from the graph alone; checked: lossy plain_deep 9,860,864 B
both ways). Aligned allocations made later in the step are what ORT allocates outside P (tensors without a
static shape, kernel scratch); they are summarised too.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

MIB = 2**20
TOOLS = Path(__file__).resolve().parent


def predict(path: Path) -> dict[str, int]:
    import onnx

    from onnxcomp.analysis import analyze_model
    from onnxcomp.analysis.execution_order import in_run_order
    from onnxcomp.load import resolve_model_path
    from onnxcomp.planner.buffers import live_bytes
    from onnxcomp.planner.ort_pattern import predict_pattern_block

    model_path, _ = resolve_model_path(path)
    block = predict_pattern_block(model_path)
    model = in_run_order(onnx.load(str(model_path), load_external_data=False), "default")
    analysis = analyze_model(model)
    live = int(live_bytes(analysis.buffers(), len(model.graph.node)).max())
    return {"pattern": block.size, "live_peak": live, "dynamic_tensors": len(block.dynamic)}


def _child(d: Path) -> None:
    """Two steps under ORT's defaults minus the arena, with markers in the shim's log."""
    from onnxcomp.runtime.data import graph_data, synthetic_batches
    from onnxcomp.runtime.session import RuntimeSettings
    from onnxcomp.runtime.training_session import open_artifact_session

    fd = os.open(os.environ["MALLOC_LOG_FILE"], os.O_WRONLY | os.O_APPEND)
    so = RuntimeSettings(arena=False, mem_pattern=True, mem_reuse=True, execution_order="default").session_options()
    session = open_artifact_session(d, d / "training_model.onnx", session_options=so, seed=0)
    module, optimizer = session.module, session.optimizer
    spec = graph_data(d, d / "training_model.onnx", list(module.input_names()))
    gen = synthetic_batches(spec.image.shape, spec.classes, 0, spec.image.dtype)
    for i in range(2):
        x, y = next(gen)
        os.write(fd, f"STEP {i}\n".encode())
        module(x, y)
        os.write(fd, f"OPT {i}\n".encode())
        optimizer.step()
        module.lazy_reset_grad()


def measure(d: Path) -> dict[str, int]:
    with tempfile.TemporaryDirectory(prefix="pattern_block_") as tmp:
        shim, log = Path(tmp) / "malloc_log.so", Path(tmp) / "malloc.log"
        subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-o", str(shim), str(TOOLS / "malloc_log.c")], check=True)
        log.write_text("")
        env = {**os.environ, "LD_PRELOAD": str(shim), "MALLOC_LOG_FILE": str(log), "MALLOC_LOG_MIN": "65536",
               "MALLOC_MMAP_THRESHOLD_": os.environ.get("MALLOC_MMAP_THRESHOLD_", "131072")}
        subprocess.run([sys.executable, __file__, "--child", str(d)], env=env, check=True)
        lines = log.read_text().splitlines()
    start, end = lines.index("STEP 1"), lines.index("OPT 1")
    aligned = [int(line.split()[1]) for line in lines[start + 1:end] if line.startswith("A ")]
    if not aligned:
        raise SystemExit(f"{d}: no aligned allocation in step 1 (memory pattern off?)")
    outside = Counter(aligned[1:])
    return {"pattern": aligned[0], "outside_allocations": sum(outside.values()),
            "outside_largest": max(outside, default=0)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", type=Path, nargs="+")
    ap.add_argument("--measure", action="store_true", help="also measure P (artifact directories; needs gcc)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        _child(args.paths[0])
        return
    for path in args.paths:
        if not path.exists():
            raise SystemExit(f"{path}: no such model file or artifact directory")
        p = predict(path)
        line = (f"{path}: predicted P {p['pattern'] / MIB:.3f} MiB ({p['pattern']} B; {p['dynamic_tensors']} tensors "
                f"outside it), DEFAULT-order live peak {p['live_peak'] / MIB:.2f} MiB")
        if args.measure:
            m = measure(path)
            err = (p["pattern"] - m["pattern"]) / m["pattern"] * 100
            line += (f"; measured P {m['pattern'] / MIB:.3f} MiB ({m['pattern']} B, error {err:+.2f} %), "
                     f"{m['outside_allocations']} aligned allocations outside it (largest {m['outside_largest']} B)")
        print(line, flush=True)


if __name__ == "__main__":
    main()
