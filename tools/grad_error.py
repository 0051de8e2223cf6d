"""Where a lossy policy's error enters: the relative error of every parameter gradient against the exact graph's.

Each variant (a policy, optionally with per-pattern overrides, e.g. ``{"Reshape-output→Gemm": "none"}`` to
keep those stashes exact) is transformed once, then run forward and backward (no optimizer step) on the same
digits batches with ORT's dropout stream reseeded before each batch, from the same parameters: the
artifacts' initial ones, or those after ``--pretrain`` baseline steps. The exact graph rerun with another
dropout seed gives the scale of ordinary step-to-step gradient noise to compare against.

    python tools/grad_error.py --art vit --batches 4 --pretrain 200 \\
        --variant dpr-fp8=dpr-fp8 --variant src16=dpr-fp8-src16 \\
        --variant ln-fp8-only='dpr-fp8:{"Reshape-output→Gemm": "none"}' --out docs/accuracy/grad_error_vit.json
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np


def _gradients(session: Any, batches: list[tuple[np.ndarray, np.ndarray]], seed: int) -> dict[str, np.ndarray]:
    """Per parameter, the gradient of each batch (stacked), dropout reseeded before every batch."""
    import onnxruntime as ort

    grads: dict[str, list[np.ndarray]] = {}
    for k, (x, y) in enumerate(batches):
        ort.set_seed(seed + k)
        session.forward_backward(x, y)
        for name, p in session.state.parameters:
            if p.requires_grad:
                grads.setdefault(name, []).append(np.array(p.grad, copy=True))
        session.module.lazy_reset_grad()
    return {n: np.stack(g) for n, g in grads.items()}


def _error(g: dict[str, np.ndarray], ref: dict[str, np.ndarray]) -> dict[str, Any]:
    """Relative L2 error over all parameters (per batch, then mean) and per parameter (mean over batches)."""
    def rel(a: np.ndarray, b: np.ndarray) -> float:
        return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))

    n = next(iter(ref.values())).shape[0]
    total = [rel(np.concatenate([g[p][k].ravel() for p in ref]), np.concatenate([ref[p][k].ravel() for p in ref]))
             for k in range(n)]
    per = {p: float(np.mean([rel(g[p][k], ref[p][k]) for k in range(n)])) for p in ref}
    return {"relative_l2": float(np.mean(total)), "per_batch": total,
            "worst_parameters": dict(sorted(per.items(), key=lambda kv: -kv[1])[:8]), "per_parameter": per}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--art", type=Path, required=True, help="artifact directory (digits classifier)")
    ap.add_argument("--variant", action="append", default=[], metavar="NAME=POLICY[:OVERRIDES_JSON]")
    ap.add_argument("--batches", type=int, default=4)
    ap.add_argument("--pretrain", type=int, default=0, help="baseline training steps before measuring")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None, help="JSON file (written atomically)")
    args = ap.parse_args()
    from onnxcomp.runtime.data import digits_dataset, graph_data
    from onnxcomp.runtime.training_session import open_artifact_session
    from onnxcomp.transform import transform

    variants = []
    for spec in args.variant:
        name, _, rest = spec.partition("=")
        policy, _, overrides = rest.partition(":")
        if not name or not policy:
            ap.error(f"--variant {spec!r}: expected NAME=POLICY[:OVERRIDES_JSON]")
        variants.append((name, policy, json.loads(overrides) if overrides else {}))
    with tempfile.TemporaryDirectory() as tmp:
        base = open_artifact_session(args.art, learning_rate=args.lr, seed=args.seed)
        spec = graph_data(args.art, args.art / "training_model.onnx", base.module.input_names())
        data = digits_dataset(spec.image.shape, spec.classes)
        stream = data.train_batches(args.seed)
        for _ in range(args.pretrain):
            base.step(*next(stream))
        params = base.module.get_contiguous_parameters()
        batches = [next(stream) for _ in range(args.batches)]
        ref = _gradients(base, batches, 1000)
        result: dict[str, Any] = {"art": str(args.art), "pretrain_steps": args.pretrain, "batches": args.batches,
                                  "variants": {}}
        result["variants"]["exact, other dropout seed"] = _error(_gradients(base, batches, 2000), ref)
        base.close()
        for name, policy, overrides in variants:
            graph = Path(tmp) / f"{name}.onnx"
            transform(args.art, graph, policy, force=True, **({"overrides": overrides} if overrides else {}))
            session = open_artifact_session(args.art, graph)
            session.module.copy_buffer_to_parameters(params)
            result["variants"][name] = {"policy": policy, "overrides": overrides,
                                        **_error(_gradients(session, batches, 1000), ref)}
            session.close()
    for name, r in result["variants"].items():
        worst = ", ".join(f"{p} {e:.2e}" for p, e in list(r["worst_parameters"].items())[:3])
        print(f"{name:28s} relative L2 gradient error {r['relative_l2']:.3e}   worst: {worst}", flush=True)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_path = tempfile.mkstemp(dir=args.out.parent, prefix=f".{args.out.name}.")
        with os.fdopen(fd, "w") as f:
            json.dump(result, f, indent=1)
        os.chmod(tmp_path, 0o644)
        os.replace(tmp_path, args.out)


if __name__ == "__main__":
    main()
