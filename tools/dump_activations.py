"""Train a zoo CNN for a few dozen steps on real data and dump real stashed activations as float32 .npy.

Data: scikit-learn's digits, upsampled to the model's input size (onnxcomp.runtime.data.digits_dataset).
After training, one forward pass in training mode on a fresh batch is hooked to save, for a few layers spread
over the depth, what a training graph stashes for backward:

* ``conv_in``   — the input of a Conv2d (ConvGrad reads it),
* ``relu_in``   — the input of a ReLU (ORT's ReluGrad reads the ReLU *input*, see platform-notes),
* ``relu_out``  — the output of a ReLU (what COMET/Gist-style codecs usually see; half zeros).

Files: ``<out>/<model>_<image>px_b<batch>_<layer-name>_<kind>.npy`` plus ``index.json`` (name, shape,
min/max, density, training loss curve). Example:

    .venv/bin/python tools/dump_activations.py --model vgg16 --image 64 --steps 30 --out /tmp/acts
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from onnxcomp.models.zoo import build_model
from onnxcomp.runtime.data import digits_dataset


def _pick(names: list[str], k: int) -> list[str]:
    """k names spread evenly over the list (first and last included)."""
    if len(names) <= k:
        return names
    return [names[round(i * (len(names) - 1) / (k - 1))] for i in range(k)]


def train(model: nn.Module, ds: Any, steps: int, lr: float, seed: int) -> list[float]:
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, weight_decay=5e-4)
    loss_fn = nn.CrossEntropyLoss()
    losses: list[float] = []
    model.train()
    batches = ds.train_batches(seed)
    for step in range(steps):
        try:
            xb, yb = next(batches)
        except StopIteration:  # new epoch
            batches = ds.train_batches(seed + step)
            xb, yb = next(batches)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(torch.from_numpy(xb)), torch.from_numpy(yb))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def dump(model: nn.Module, x: np.ndarray, out: Path, prefix: str, layers_per_kind: int) -> list[dict[str, Any]]:
    convs = [n for n, m in model.named_modules() if isinstance(m, nn.Conv2d)]
    relus = [n for n, m in model.named_modules() if isinstance(m, nn.ReLU)]
    wanted = {("conv_in", n) for n in _pick(convs[1:], layers_per_kind)}  # convs[0]'s input is the image
    wanted |= {("relu_in", n) for n in _pick(relus, layers_per_kind)}
    wanted |= {("relu_out", n) for n in _pick(relus, layers_per_kind)}
    saved: dict[tuple[str, str], np.ndarray] = {}
    handles = []
    modules = dict(model.named_modules())
    for kind, name in sorted(wanted):
        mod = modules[name]
        if kind in ("conv_in", "relu_in"):  # pre-hook: an in-place ReLU overwrites its input afterwards
            def pre(m: nn.Module, inp: tuple, key: tuple[str, str] = (kind, name)) -> None:
                if key not in saved:  # a module reused in a block (resnet) is saved at its first call
                    saved[key] = inp[0].detach().clone().numpy()
            handles.append(mod.register_forward_pre_hook(pre))
        else:
            def post(m: nn.Module, inp: tuple, output: torch.Tensor, key: tuple[str, str] = (kind, name)) -> None:
                if key not in saved:
                    saved[key] = output.detach().clone().numpy()
            handles.append(mod.register_forward_hook(post))
    model.train()  # training-mode BatchNorm, as in a training step
    with torch.no_grad():
        model(torch.from_numpy(x))
    for h in handles:
        h.remove()
    index = []
    for (kind, name), a in sorted(saved.items()):
        a = np.ascontiguousarray(a, dtype=np.float32)
        fname = f"{prefix}_{name.replace('.', '-')}_{kind}.npy"
        np.save(out / fname, a)
        index.append({"file": fname, "layer": name, "kind": kind, "shape": list(a.shape),
                      "min": float(a.min()), "max": float(a.max()), "density": float(np.count_nonzero(a) / a.size),
                      "mib": a.nbytes / 2**20})
    return index


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="vgg16")
    ap.add_argument("--image", type=int, default=64)
    ap.add_argument("--batch", type=int, default=32, help="training batch")
    ap.add_argument("--dump-batch", type=int, default=64, help="batch of the hooked forward pass")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--layers", type=int, default=4, help="layers per kind (spread over the depth)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch default)")
    ap.add_argument("--out", type=Path, default=Path("/tmp/onnxcomp_activations"))
    args = ap.parse_args(argv)
    torch.manual_seed(args.seed)
    if args.threads:
        torch.set_num_threads(args.threads)
    args.out.mkdir(parents=True, exist_ok=True)
    model = build_model(args.model, 10)
    t0 = time.perf_counter()
    ds = digits_dataset((args.batch, 3, args.image, args.image), 10)
    losses = train(model, ds, args.steps, args.lr, args.seed)
    t_train = time.perf_counter() - t0
    dump_ds = digits_dataset((args.dump_batch, 3, args.image, args.image), 10)
    prefix = f"{args.model}_{args.image}px_b{args.dump_batch}"
    entries = dump(model, dump_ds.x_test[0], args.out, prefix, args.layers)
    index_path = args.out / "index.json"
    index = json.loads(index_path.read_text()) if index_path.exists() else {}
    index[prefix] = {"model": args.model, "image": args.image, "train_batch": args.batch, "steps": args.steps,
                     "losses": losses, "train_seconds": round(t_train, 1), "tensors": entries}
    index_path.write_text(json.dumps(index, indent=1))
    print(f"{prefix}: trained {args.steps} steps in {t_train:.0f} s, loss {losses[0]:.3f} -> {losses[-1]:.3f}")
    for e in entries:
        print(f"  {e['file']:55s} {str(tuple(e['shape'])):22s} {e['mib']:7.2f} MiB  density {e['density']:.3f}"
              f"  range [{e['min']:.3g}, {e['max']:.3g}]")


if __name__ == "__main__":
    main()
