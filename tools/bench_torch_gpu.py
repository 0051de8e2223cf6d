"""PyTorch training on a GPU with onnxcomp's saved-tensor hooks, against plain PyTorch and torch.utils.checkpoint.

For each model (ResNet-18, VGG-16 from onnxcomp.models.architectures) and each configuration -- ``plain``,
``checkpoint`` (torch.utils.checkpoint over the model's stages), and each ``compress_activations`` policy --
it trains the same initial weights on the same batches (SGD, momentum 0.9) and reports:

* ``peak``: ``torch.cuda.max_memory_allocated`` during a training step (forward, backward, optimizer step)
  minus the memory allocated just before it, i.e. minus weights, optimizer state and the input batch (all
  resident before the step, the same in every configuration). Gradients, saved activations (or their
  payloads: CuPy allocates through PyTorch's allocator inside the hooks), workspaces and temporaries count.
  Max over the timed steps.
* ``saved``: memory allocated after the forward pass minus before it: what the forward leaves for backward.
* ``step ms``: median over the timed steps of CUDA-event time of one whole step (after warm-up steps).
* ``max |dloss|``: largest difference of the per-step loss from ``plain`` over the run (same data, same init);
  ``plain`` itself is not bit-reproducible with cuDNN's default (non-deterministic) algorithms, so the
  ``plain-again`` row gives the noise floor.

Example (the GPU machine): ``python tools/bench_torch_gpu.py --batch 256 --images 64,128 --out bench_torch.json``
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import time
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from onnxcomp.models.architectures import resnet18, vgg16
from onnxcomp.torch import compress_activations

MIB = 1 << 20
POLICIES = ("binarize", "exact", "lossy-fp16", "lossy-bf16", "lossy-fp8", "lossy-sz")


class Checkpointed(nn.Module):
    """Run a sub-module under torch.utils.checkpoint (non-reentrant): only its input is kept for backward."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return checkpoint(self.inner, x, use_reentrant=False)


def with_checkpoints(model: nn.Module, name: str) -> nn.Module:
    """ResNet: each of layer1..layer4 checkpointed; VGG: each MaxPool-ended stage of the feature stack."""
    model = copy.deepcopy(model)
    if name == "resnet18":
        for layer in ("layer1", "layer2", "layer3", "layer4"):
            setattr(model, layer, Checkpointed(getattr(model, layer)))
    else:  # cut after each MaxPool: a segment starting with an in-place ReLU would modify its saved input
        layers, segments, current = list(model.features), [], []
        for layer in layers:
            current.append(layer)
            if isinstance(layer, nn.MaxPool2d):
                segments.append(current)
                current = []
        if current:
            segments.append(current)
        model.features = nn.Sequential(*[Checkpointed(nn.Sequential(*seg)) for seg in segments])
    return model


def build(name: str, classes: int) -> nn.Module:
    torch.manual_seed(0)
    return (resnet18 if name == "resnet18" else vgg16)(num_classes=classes)


def run_config(model: nn.Module, policy: str | None, batches: list[tuple[torch.Tensor, torch.Tensor]], warmup: int,
               ) -> dict[str, Any]:
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    losses, times, peaks, saved, ratios = [], [], [], [], []
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for step, (x, y) in enumerate(batches):
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        start.record()
        if policy is None:
            out = model(x)
            after_fwd = torch.cuda.memory_allocated()
            loss = loss_fn(out, y)
        else:
            with compress_activations(policy) as stats:
                out = model(x)
                after_fwd = torch.cuda.memory_allocated()
                loss = loss_fn(out, y)
            ratios.append(stats.ratio)
        loss.backward()
        opt.step()
        end.record()
        torch.cuda.synchronize()
        losses.append(float(loss.detach()))
        if step >= warmup:
            times.append(start.elapsed_time(end))
            peaks.append(torch.cuda.max_memory_allocated() - before)
            saved.append(after_fwd - before)
        del out, loss
    return {"losses": losses, "step_ms": statistics.median(times), "step_ms_all": times,
            "peak_bytes": max(peaks), "saved_bytes": max(saved),
            "hook_ratio": statistics.median(ratios) if ratios else None}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="resnet18,vgg16")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--images", default="64", help="comma-separated square image sizes")
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--steps", type=int, default=8, help="timed steps (after --warmup)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--out", help="write the rows as JSON here")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("bench_torch_gpu: no CUDA device (this benchmark measures GPU memory and time)")
    dev = torch.device("cuda")
    device_name = torch.cuda.get_device_name(dev)
    print(f"device {device_name}, torch {torch.__version__}, batch {args.batch}, "
          f"{args.warmup} warm-up + {args.steps} timed steps", flush=True)
    rows = []
    for name, image in ((m, int(i)) for i in args.images.split(",") if i for m in args.models.split(",") if m):
        g = torch.Generator(device="cpu").manual_seed(1)
        batches = [(torch.randn(args.batch, 3, image, image, generator=g).to(dev),
                    torch.randint(0, args.classes, (args.batch,), generator=g).to(dev))
                   for _ in range(args.warmup + args.steps)]
        init = build(name, args.classes)
        configs: list[tuple[str, Any, str | None]] = [("plain", init, None), ("plain-again", init, None),
                                                       ("checkpoint", with_checkpoints(init, name), None)]
        configs += [(p, init, p) for p in args.policies.split(",") if p]
        results = {}
        for label, proto, policy in configs:
            model = copy.deepcopy(proto).to(dev)
            t0 = time.time()
            r = run_config(model, policy, batches, args.warmup)
            del model
            torch.cuda.empty_cache()
            results[label] = r
            base = results["plain"]
            r.update(model=name, config=label, batch=args.batch, image=image,
                     peak_ratio=base["peak_bytes"] / r["peak_bytes"], saved_ratio=base["saved_bytes"] / r["saved_bytes"],
                     time_ratio=r["step_ms"] / base["step_ms"],
                     max_dloss=max(abs(a - b) for a, b in zip(r["losses"], base["losses"])))
            rows.append(r)
            print(f"{name:9} {image:4d}px {label:12} peak {r['peak_bytes'] / MIB:9.1f} MiB (x{r['peak_ratio']:.2f} lower)  "
                  f"saved {r['saved_bytes'] / MIB:9.1f} MiB (x{r['saved_ratio']:.2f})  step {r['step_ms']:7.2f} ms "
                  f"(x{r['time_ratio']:.3f})  max|dloss| {r['max_dloss']:.2e}  last loss {r['losses'][-1]:.4f}"
                  + (f"  hooks kept 1/{r['hook_ratio']:.2f}" if r["hook_ratio"] else "")
                  + f"  [{time.time() - t0:.0f} s]", flush=True)
    if args.out:
        meta = {"device": device_name, "torch": torch.__version__, "argv": sys.argv,
                "peak": "max_memory_allocated during a step minus memory_allocated before it (weights, optimizer "
                        "state, input batch resident)", "optimizer": "SGD lr 0.01 momentum 0.9"}
        tmp = args.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)
        os.replace(tmp, args.out)


if __name__ == "__main__":
    main()
