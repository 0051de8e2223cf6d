"""Does ORT-training's ``Module.__call__`` release the GIL? A Python thread ticks every 1 ms while one training
step (forward + backward) runs; a GIL-holding step starves it (a few ticks instead of ~1000 per second).

    .venv/bin/python tools/check_ort_gil.py /work/ref/resnet18 training_model.onnx

ORT-training 1.19.2: 4 ticks in a 4.5 s ResNet-18 step (no PyOps), 29 with `lossless`'s 10 PyOps — it holds
the GIL; a codec worker thread (runtime.payload_store, "async") only runs while an op waits on it or inside
GIL-free kernels.
"""
from __future__ import annotations

import argparse
import threading
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", type=Path, help="artifact directory")
    ap.add_argument("model", nargs="?", default="training_model.onnx", help="training graph inside DIR")
    args = ap.parse_args(argv)
    from onnxcomp.runtime.data import graph_data, synthetic_batches
    from onnxcomp.runtime.training_session import open_artifact_session

    session = open_artifact_session(args.dir, args.dir / args.model)
    spec = graph_data(args.dir, args.dir / args.model, list(session.module.input_names()))
    x, y = next(synthetic_batches(spec.image.shape, spec.classes, 0, spec.image.dtype))
    session.step(x, y)  # warm-up
    ticks, stop = [0], threading.Event()

    def tick() -> None:
        while not stop.is_set():
            ticks[0] += 1
            time.sleep(0.001)

    threading.Thread(target=tick, daemon=True).start()
    time.sleep(0.5)
    idle = ticks[0]
    t0 = time.perf_counter()
    session.forward_backward(x, y)
    wall = time.perf_counter() - t0
    during = ticks[0] - idle
    stop.set()
    print(f"{during} ticks in a {wall:.2f} s forward/backward ({idle / 0.5:.0f} ticks/s while idle): "
          f"the step {'holds' if during < 0.1 * wall * idle / 0.5 else 'releases'} the GIL")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
