"""Child-process smoke test for a training-artifact directory.

Run as ``python -m onnxcomp.models._smoke ARTIFACT_DIR SEED``. It reads the data inputs' shapes from the
directory's onnxcomp.json, loads the artifacts with the ORT training API, takes one training step and one
optimizer step on random data, then one eval step, and prints a JSON line ``{"loss": ..., "eval_loss": ...}``.
It lives in its own process because ORT-training can die natively (SIGSEGV) on an unfamiliar graph; the
parent reports that instead of crashing with it.
"""

from __future__ import annotations

import faulthandler
import json
import math
import sys
from pathlib import Path


def random_batch(meta: dict, seed: int) -> tuple:
    """(input, labels) arrays shaped as onnxcomp.json's "inputs" says: int64 class labels for
    cross-entropy, float targets otherwise."""
    import numpy as np

    rng = np.random.default_rng(seed)
    inputs = meta["inputs"]
    label_name = meta.get("labels", "labels")
    data_name = next(n for n in inputs if n != label_name)
    if meta.get("input_dtype") == "int64":  # token ids [batch, seq] (GPT-tiny), labels [batch·seq]
        x = rng.integers(0, int(meta.get("classes") or 2), size=inputs[data_name], dtype=np.int64)
    else:
        x = rng.standard_normal(inputs[data_name], dtype=np.float32)
    if meta.get("label_dtype", "int64") == "int64":
        y = rng.integers(0, int(meta.get("classes") or 2), size=inputs[label_name], dtype=np.int64)
    else:
        y = rng.random(inputs[label_name], dtype=np.float32)
    return x, y


def run_one_step(artifact_dir: Path, seed: int) -> dict[str, float]:
    import onnxcomp.runtime  # noqa: F401  (the lean onnxruntime import: no torch in this child)
    import onnxruntime as ort

    from onnxcomp.runtime.training_session import loss_value, open_artifact_session

    meta = json.loads((artifact_dir / "onnxcomp.json").read_text())
    x, labels = random_batch(meta, seed)
    # ORT's own session options: the raw artifacts, before onnxcomp rewrites them, need none of its ops.
    session = open_artifact_session(artifact_dir, eval_model=artifact_dir / "eval_model.onnx",
                                    session_options=ort.SessionOptions())
    loss = loss_value(session.step(x, labels))
    with session.eval_mode() as run:
        eval_loss = loss_value(run(x, labels))
    if not (math.isfinite(loss) and math.isfinite(eval_loss)):
        raise RuntimeError(f"non-finite loss after one step: train {loss}, eval {eval_loss}")
    return {"loss": loss, "eval_loss": eval_loss}


def main(argv: list[str]) -> int:
    faulthandler.enable()  # a native crash then leaves a Python stack on stderr for the parent to show
    artifact_dir, seed = Path(argv[0]), int(argv[1])
    result = run_one_step(artifact_dir, seed)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
