"""Row-split (LR-CNN) memory benchmark: training-step peak and step time vs R, and the largest input under
a peak budget, baseline vs rows. Every figure comes from onnxcomp.runtime.measure (a fresh child process
per configuration; arena off, mem pattern off unless told otherwise; peak = max over steps of VmHWM minus
the pre-step RSS).

  python tools/bench_rows.py curve  --model vgg16conv --image 512 --batch 1 --rows 1,2,4,8,16
  python tools/bench_rows.py budget --model vgg16conv --budget-mib 1024 --rows auto --variant 2ps
  python tools/bench_rows.py plot   --json docs/rows/curve_vgg16conv_b1_512.json

Models: vgg16conv = VGG-16's 13-conv feature stack + global average pool + Linear(512, classes) (the
classifier's 400 MB fc6 weight gradient would otherwise sit in every step's peak); vgg16 = the zoo model
(fc layers included).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import onnx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CACHE = Path("/tmp/onnxcomp_bench_rows")
MiB = 1 << 20


def _torch_model(name: str, classes: int):  # noqa: ANN202
    import torch
    from torch import nn

    from models.architectures import VGG

    torch.manual_seed(0)
    if name == "vgg16":
        from models.zoo import build_model

        return build_model("vgg16", classes)
    if name == "vgg16conv":
        class VGG16Conv(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.features = VGG(num_classes=classes).features
                self.fc = nn.Linear(512, classes)

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                return self.fc(torch.mean(self.features(x), dim=(2, 3)))

        return VGG16Conv()
    raise SystemExit(f"unknown model {name!r} (vgg16conv, vgg16)")


def artifacts(name: str, batch: int, image: int, classes: int = 10) -> Path:
    """Training artifacts for (model, batch, image), generated once and cached."""
    import torch
    from onnxruntime.training import artifacts as ort_artifacts

    out = CACHE / f"{name}_b{batch}_{image}"
    if (out / "checkpoint").exists():
        return out
    out.mkdir(parents=True, exist_ok=True)
    net = _torch_model(name, classes).train()
    fwd_path = out / "forward.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net, (torch.randn(batch, 3, image, image),), str(fwd_path), dynamo=False,
                          training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False, opset_version=17,
                          input_names=["input"], output_names=["logits"])
    fwd = onnx.load(str(fwd_path))
    params = [i.name for i in fwd.graph.initializer]
    ort_artifacts.generate_artifacts(fwd, requires_grad=params, loss=ort_artifacts.LossType.CrossEntropyLoss,
                                     optimizer=ort_artifacts.OptimType.AdamW, artifact_directory=str(out))
    fwd_path.unlink()
    (out / "onnxcomp.json").write_text(json.dumps({"model": name, "batch": batch, "image": [3, image, image],
                                                   "classes": classes, "inputs": ["input"], "labels": "labels"}))
    return out


def rewritten(art: Path, rows: int | str, variant: str, checkpoints: str, budget: int | None = None) -> tuple[Path, dict]:
    from onnxcomp.passes import EagerAccumulationPass
    from onnxcomp.passes.base import check_model
    from onnxcomp.passes.row_split import RowSplitPass

    if rows == "eager":   # reference: accumulation reordered, no row split
        path = art / "eager.onnx"
        if not path.exists():
            onnx.save(EagerAccumulationPass().run(onnx.load(str(art / "training_model.onnx"))).model, str(path))
        return path, {"chains": []}
    tag = f"rows_{rows}_{variant}_{checkpoints}" + (f"_{budget // MiB}m" if budget else "")
    path = art / f"{tag}.onnx"
    meta = art / f"{tag}.json"
    if path.exists() and meta.exists():
        return path, json.loads(meta.read_text())
    model = onnx.load(str(art / "training_model.onnx"))
    t = time.perf_counter()
    res = RowSplitPass(rows=rows, variant=variant, checkpoints=checkpoints, budget_bytes=budget).run(model)
    # weight gradients accumulated as soon as they exist (what policy "rows" runs after the split)
    res.model = EagerAccumulationPass().run(res.model).model
    check_model(res.model, tag)
    info = {"transform_s": round(time.perf_counter() - t, 2),
            "chains": [{k: r[k] for k in ("nodes", "rows", "checkpoints", "predicted_bytes", "original_bytes")}
                       | ({"auto": r["auto"]} if "auto" in r else {}) for r in res.records]}
    onnx.save(res.model, str(path))
    meta.write_text(json.dumps(info))
    return path, info


def run_measure(art: Path, model: Path | None, steps: int, order: str, mem_pattern: bool = False) -> dict:
    from onnxcomp.runtime.measure import measure
    from onnxcomp.runtime.session import RuntimeSettings

    r = measure(art, model=model, steps=steps, warmup=1,
                settings=RuntimeSettings(arena=False, mem_pattern=mem_pattern, execution_order=order))
    return {"peak_mib": round(r.peak_bytes / MiB, 1), "step_s": round(float(np.median(r.step_times_s)), 3),
            "losses": r.losses}


def cmd_curve(a: argparse.Namespace) -> None:
    art = artifacts(a.model, a.batch, a.image)
    out = {"model": a.model, "batch": a.batch, "image": a.image, "steps": a.steps, "order": a.order,
           "settings": "arena off, mem_pattern off", "command": " ".join(sys.argv), "runs": []}
    base = run_measure(art, None, a.steps, a.order)
    out["runs"].append({"rows": 1, "variant": "baseline", **base})
    print("baseline", base, flush=True)
    eager = run_measure(art, rewritten(art, "eager", "", "")[0], a.steps, a.order)
    out["runs"].append({"rows": 1, "variant": "eager-accumulation only", **eager,
                        "peak_cut": round(base["peak_mib"] / eager["peak_mib"], 2)})
    print("eager", eager, flush=True)
    for variant in a.variants.split(","):
        for R in [int(r) for r in a.rows.split(",")]:
            path, info = rewritten(art, R, variant, a.checkpoints)
            m = run_measure(art, path, a.steps, a.order)
            rec = {"rows": R, "variant": variant, "checkpoints": a.checkpoints, **m,
                   "peak_cut": round(base["peak_mib"] / m["peak_mib"], 2),
                   "time_ratio": round(m["step_s"] / base["step_s"], 2),
                   "max_loss_rel_diff": float(np.max(np.abs(np.array(m["losses"]) - base["losses"]) /
                                                     np.abs(base["losses"]))),
                   "segments": [c["checkpoints"] for c in info["chains"]]}
            out["runs"].append(rec)
            print(variant, R, {k: rec[k] for k in ("peak_mib", "step_s", "peak_cut", "time_ratio",
                                                    "max_loss_rel_diff")}, flush=True)
    dest = Path(a.out) / f"curve_{a.model}_b{a.batch}_{a.image}{'_' + a.order if a.order != 'priority' else ''}.json"
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(out, indent=1))
    print("wrote", dest)


def _predict(model: str, batch: int, image: int, rows: str, variant: str, budget: int) -> tuple[int, dict]:
    """Planner-predicted step peak (onnxcomp.planner.predict.predicted_peak) of the baseline or of the
    row-split graph (rows='auto': R chosen by the pass for the budget)."""
    from onnxcomp.passes.row_split import RowSplitPass
    from onnxcomp.planner.predict import predicted_peak

    art = artifacts(model, batch, image)
    m = onnx.load(str(art / "training_model.onnx"))
    if rows == "baseline":
        return predicted_peak(m, eager_accumulation=False), {}
    res = RowSplitPass(rows=rows if rows == "auto" else int(rows), variant=variant, budget_bytes=budget).run(m)
    chosen = [r.get("auto", {}).get("chosen_rows", r["rows"]) for r in res.records]
    return predicted_peak(res.model), {"chosen_rows": chosen}


def _measure_size(model: str, batch: int, image: int, rows: str, variant: str, budget: int, steps: int) -> dict:
    art = artifacts(model, batch, image)
    if rows == "baseline":
        m = run_measure(art, None, steps, "priority")
    else:
        path, info = rewritten(art, rows if rows == "auto" else int(rows), variant, "auto",
                               budget if rows == "auto" else None)
        m = run_measure(art, path, steps, "priority")
        m["chosen_rows"] = [c.get("auto", {}).get("chosen_rows", c["rows"]) for c in info["chains"]]
    m["image"] = image
    m["fits"] = m["peak_mib"] * MiB <= budget
    return m


def cmd_budget(a: argparse.Namespace) -> None:
    """Largest square image (multiple of --step-px) whose measured step peak fits the budget. The planner's
    prediction brackets the answer (bisection on predicted peaks), then measurements walk from the predicted
    size until one size fits and the next does not."""
    budget = int(a.budget_mib * MiB)
    auto_budget = int(budget * a.margin)   # what rows=auto plans for: the prediction misses ORT overheads
    out = {"model": a.model, "batch": a.batch, "budget_mib": a.budget_mib, "rows_auto_budget_mib": auto_budget / MiB,
           "variant": a.variant, "settings": "arena off, mem_pattern off, priority order",
           "command": " ".join(sys.argv), "search": {}}
    step = a.step_px
    for label, rows in (("baseline", "baseline"), ("rows", a.rows)):
        predicted = []
        lo, hi = step, None
        size = a.start
        while hi is None or hi - lo > step:     # bisection on the predicted peak
            p, extra = _predict(a.model, a.batch, size, rows, a.variant, auto_budget)
            predicted.append({"image": size, "predicted_mib": round(p / MiB, 1), **extra})
            print(label, "predict", size, round(p / MiB, 1), extra, flush=True)
            if p <= budget:
                lo = size
            else:
                hi = size
            size = size * 2 if hi is None else (lo + hi) // 2 // step * step
            if hi is not None and size <= lo:
                break
        measured = []
        size = lo
        last_fit = None
        for _ in range(a.max_probes):
            m = _measure_size(a.model, a.batch, size, rows, a.variant, budget, a.steps)
            measured.append(m)
            print(label, "measure", size, m["peak_mib"], m["fits"], flush=True)
            if m["fits"]:
                last_fit = size
                if any(x["image"] == size + step and not x["fits"] for x in measured):
                    break
                size += step
            else:
                if any(x["image"] == size - step and x["fits"] for x in measured):
                    break
                size -= step
        out["search"][label] = {"largest_image": last_fit, "pixels": last_fit * last_fit if last_fit else None,
                                "predicted": predicted, "measured": measured}
        print(label, "largest", last_fit, flush=True)
    b, r = out["search"]["baseline"]["pixels"], out["search"]["rows"]["pixels"]
    out["pixel_ratio"] = round(r / b, 2) if b and r else None
    dest = Path(a.out) / f"budget_{a.model}_b{a.batch}_{int(a.budget_mib)}mib.json"
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(out, indent=1))
    print("wrote", dest, "pixel ratio", out["pixel_ratio"])


def cmd_plot(a: argparse.Namespace) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    for jpath in a.json:
        d = json.loads(Path(jpath).read_text())
        base = next(r for r in d["runs"] if r["variant"] == "baseline")
        tag = f"b{d['batch']}"
        for variant in sorted({r["variant"] for r in d["runs"]} - {"baseline", "eager-accumulation only"}):
            runs = sorted((r for r in d["runs"] if r["variant"] == variant), key=lambda r: r["rows"])
            xs = [1] + [r["rows"] for r in runs]
            ax1.plot(xs, [base["peak_mib"]] + [r["peak_mib"] for r in runs], "o-", label=f"{variant}-H {tag}")
            ax2.plot(xs, [1.0] + [r["time_ratio"] for r in runs], "o-", label=f"{variant}-H {tag}")
    ax1.set_xscale("log", base=2)
    ax2.set_xscale("log", base=2)
    ax1.set_xlabel("row blocks R (1 = unsplit baseline)")
    ax2.set_xlabel("row blocks R (1 = unsplit baseline)")
    ax1.set_ylabel("training-step peak (MiB)")
    ax2.set_ylabel("step time / baseline (noisy, shared 2 cores)")
    ax1.set_ylim(bottom=0)
    ax1.legend()
    ax2.legend()
    d0 = json.loads(Path(a.json[0]).read_text())
    fig.suptitle(f"{d0['model']} {d0['image']}x{d0['image']}: row-split peak and step time vs R")
    fig.tight_layout()
    fig.savefig(a.png, dpi=110)
    print("wrote", a.png)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("curve")
    c.add_argument("--model", default="vgg16conv")
    c.add_argument("--image", type=int, default=512)
    c.add_argument("--batch", type=int, default=1)
    c.add_argument("--rows", default="2,4,8,16")
    c.add_argument("--variants", default="overl,2ps")
    c.add_argument("--checkpoints", default="auto")
    c.add_argument("--steps", type=int, default=3)
    c.add_argument("--order", default="priority", choices=["priority", "default"])
    c.add_argument("--out", default=str(ROOT / "docs" / "rows"))
    b = sub.add_parser("budget")
    b.add_argument("--model", default="vgg16conv")
    b.add_argument("--batch", type=int, default=1)
    b.add_argument("--budget-mib", type=float, default=2048)
    b.add_argument("--rows", default="auto")
    b.add_argument("--variant", default="2ps")
    b.add_argument("--start", type=int, default=256)
    b.add_argument("--step-px", type=int, default=64)
    b.add_argument("--steps", type=int, default=1)
    b.add_argument("--max-probes", type=int, default=4)
    b.add_argument("--margin", type=float, default=0.85,
                   help="rows=auto plans for this fraction of the budget (prediction omits ORT overheads)")
    b.add_argument("--out", default=str(ROOT / "docs" / "rows"))
    pl = sub.add_parser("plot")
    pl.add_argument("--json", nargs="+", required=True)
    pl.add_argument("--png", default=str(ROOT / "docs" / "rows" / "vgg16_rows_peak.png"))
    a = p.parse_args()
    {"curve": cmd_curve, "budget": cmd_budget, "plot": cmd_plot}[a.cmd](a)


if __name__ == "__main__":
    main()
