"""Child-process smoke test for a training-artifact directory.

Run as ``python -m onnxcomp.models._smoke ARTIFACT_DIR BATCH IMAGE CLASSES SEED``. It loads the artifacts
with the ORT training API, takes one training step and one optimizer step on random data, then one eval step,
and prints a JSON line ``{"loss": ..., "eval_loss": ...}``. It lives in its own process because ORT-training
can die natively (SIGSEGV) on an unfamiliar graph; the parent reports that instead of crashing with it.
"""

from __future__ import annotations

import faulthandler
import json
import math
import sys
from pathlib import Path


def run_one_step(artifact_dir: Path, batch: int, image: int, classes: int, seed: int) -> dict[str, float]:
    import numpy as np
    from onnxruntime.training.api import CheckpointState, Module, Optimizer

    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, 3, image, image), dtype=np.float32)
    labels = rng.integers(0, classes, size=(batch,), dtype=np.int64)
    meta = artifact_dir / "onnxcomp.json"
    shapes = json.loads(meta.read_text()).get("inputs", {}) if meta.exists() else {}
    if len(shapes.get("input", [])) == 2:  # token ids [batch, seq], next-token labels [batch·seq]
        x = rng.integers(0, classes, size=shapes["input"], dtype=np.int64)
        labels = rng.integers(0, classes, size=shapes["labels"], dtype=np.int64)

    state = CheckpointState.load_checkpoint(str(artifact_dir / "checkpoint"))
    module = Module(
        str(artifact_dir / "training_model.onnx"), state, str(artifact_dir / "eval_model.onnx"), device="cpu"
    )
    optimizer = Optimizer(str(artifact_dir / "optimizer_model.onnx"), module)

    module.train()
    module.lazy_reset_grad()
    loss = float(np.asarray(module(x, labels)).reshape(-1)[0])
    optimizer.step()
    module.eval()
    eval_loss = float(np.asarray(module(x, labels)).reshape(-1)[0])
    if not (math.isfinite(loss) and math.isfinite(eval_loss)):
        raise RuntimeError(f"non-finite loss after one step: train {loss}, eval {eval_loss}")
    return {"loss": loss, "eval_loss": eval_loss}


def main(argv: list[str]) -> int:
    faulthandler.enable()  # a native crash then leaves a Python stack on stderr for the parent to show
    artifact_dir, batch, image, classes, seed = Path(argv[0]), *map(int, argv[1:5])
    result = run_one_step(artifact_dir, batch, image, classes, seed)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
