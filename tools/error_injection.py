"""Reproduce COMET §4.2: uniform error in a conv's stashed input → weight-gradient error, and fit ``a``.

A conv's stashed input X is read in backward only for dW = conv_weight_grad(X, dY), which is linear in X,
so an error e ~ U[-eb, eb] on X's nonzeros (zeros stay exact: COMET's zero filter) gives
dW_err = conv_weight_grad(e, dY). For every conv layer of a CNN partly trained on real data (scikit-learn
digits, upsampled) and several bounds, this measures σ of dW_err, checks it is normal (share within ±σ,
±2σ; skew; excess kurtosis), and fits a in σ ≈ a·L̄·√(N·R)·eb with R = X's nonzero ratio, three ways:
COMET's eq. 10 as written (L̄ = mean |dY|, N = batch); N = the number of dY·X products summed into one dW
value (batch × output positions); and that N with L̄ = rms(dY), for which the variance of a sum of
uniform errors predicts a = 1/√3 exactly. Writes a JSON and a two-panel PNG (COMET Fig. 7/8 analogues).

    python tools/error_injection.py --model resnet18 --image 32 --batch 32 --out docs/comet

Transformers (``--model gpt_tiny``, partly trained on the stdlib text): every ``nn.Linear``'s input X, read
only for dW = Xᵀ·dY (N = batch × positions products per dW value), and every attention-probability tensor P
(after dropout), read for dV = Pᵀ·dO (N = query positions T per dV value; causal and dropped-out zeros stay
exact, so R is P's nonzero ratio):

    python tools/error_injection.py --model gpt_tiny --batch 8 --seq 128 --out docs/transformers
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


def _digits(image: int, batch: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    from onnxcomp.runtime.data import digits_dataset

    ds = digits_dataset((batch, 3, image, image), 10, split_seed=seed)
    return torch.from_numpy(ds.x_train.reshape(-1, 3, image, image)), torch.from_numpy(ds.y_train.reshape(-1))


def _capture(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> list[dict]:
    """Inputs, output gradients and geometry of every Conv2d for one batch."""
    records: list[dict] = []
    handles = []

    def hook(mod: nn.Conv2d, inp: tuple[torch.Tensor], out: torch.Tensor) -> None:
        rec = {"name": names[mod], "module": mod, "x": inp[0].detach().clone()}
        out.register_hook(lambda g: rec.__setitem__("dy", g.detach().clone()))
        records.append(rec)

    names = {m: n for n, m in model.named_modules() if isinstance(m, nn.Conv2d)}
    for m in names:
        handles.append(m.register_forward_hook(hook))
    model.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    for h in handles:
        h.remove()
    return records


def _weight_grad(e: torch.Tensor, dy: torch.Tensor, mod: nn.Conv2d) -> torch.Tensor:
    return torch.nn.grad.conv2d_weight(e, mod.weight.shape, dy, stride=mod.stride, padding=mod.padding,
                                       dilation=mod.dilation, groups=mod.groups)


def run(model_name: str, image: int, batch: int, train_steps: int, rel_bounds: list[float], seed: int,
        trials: int) -> dict:
    from onnxcomp.models.zoo import build_model

    torch.manual_seed(seed)
    model = build_model(model_name, num_classes=10)
    xs, ys = _digits(image, batch, seed)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    model.train()
    for step in range(train_steps):  # realistic, not initial, gradients
        i = (step * batch) % (len(xs) - batch)
        opt.zero_grad()
        F.cross_entropy(model(xs[i:i + batch]), ys[i:i + batch]).backward()
        opt.step()
    records = _capture(model, xs[:batch], ys[:batch])
    gen = torch.Generator().manual_seed(seed)
    layers = []
    for rec in records:
        x, dy, mod = rec["x"], rec["dy"], rec["module"]
        nz = x != 0
        r = float(nz.float().mean())
        l_bar = float(dy.abs().mean())
        l_rms = float(dy.pow(2).mean().sqrt())
        n_batch = x.shape[0]
        n_sum = n_batch * dy.shape[2] * dy.shape[3]  # dY·X products summed into one dW value
        scale = float(x.abs().max())
        for rel in rel_bounds:
            eb = rel * scale
            errs = []
            for _ in range(trials):
                e = (torch.rand(x.shape, generator=gen) * 2 - 1) * eb * nz
                errs.append(_weight_grad(e, dy, mod).reshape(-1))
            err = torch.cat(errs).double().numpy()
            sigma = float(err.std())
            z = (err - err.mean()) / sigma if sigma > 0 else err
            layers.append({
                "layer": rec["name"], "eb": eb, "rel_eb": rel, "R": r, "L_bar": l_bar, "batch": n_batch,
                "n_summed": n_sum, "sigma": sigma,
                "within_1sigma": float(np.mean(np.abs(z) <= 1)), "within_2sigma": float(np.mean(np.abs(z) <= 2)),
                "skew": float(np.mean(z ** 3)), "excess_kurtosis": float(np.mean(z ** 4) - 3),
                "a_batch": sigma / (l_bar * math.sqrt(n_batch * r) * eb) if l_bar and r else None,
                "a_summed": sigma / (l_bar * math.sqrt(n_sum * r) * eb) if l_bar and r else None,
                "L_rms": l_rms,
                "a_rms": sigma / (l_rms * math.sqrt(n_sum * r) * eb) if l_rms and r else None,
                "hist": np.histogram(z, bins=60, range=(-4, 4))[0].tolist(),
            })
    a_b = np.array([x["a_batch"] for x in layers if x["a_batch"]])
    a_s = np.array([x["a_summed"] for x in layers if x["a_summed"]])
    a_r = np.array([x["a_rms"] for x in layers if x["a_rms"]])
    summary = {
        "model": model_name, "image": image, "batch": batch, "train_steps": train_steps, "seed": seed,
        "trials": trials, "layers": len(records),
        "a_batch": {"median": float(np.median(a_b)), "min": float(a_b.min()), "max": float(a_b.max()),
                    "cv": float(a_b.std() / a_b.mean())},
        "a_summed": {"median": float(np.median(a_s)), "min": float(a_s.min()), "max": float(a_s.max()),
                     "cv": float(a_s.std() / a_s.mean())},
        "a_rms": {"median": float(np.median(a_r)), "min": float(a_r.min()), "max": float(a_r.max()),
                  "cv": float(a_r.std() / a_r.mean())},
        "within_1sigma_mean": float(np.mean([x["within_1sigma"] for x in layers])),
        "within_2sigma_mean": float(np.mean([x["within_2sigma"] for x in layers])),
    }
    return {"summary": summary, "layers": layers}


def _capture_transformer(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> list[dict]:
    """Every Linear's input and output gradient, and every attention's probabilities P (after dropout) with
    the gradient dO of P·V, for one batch. P is captured by running each SelfAttention's own forward with
    ``probs @ v`` hooked (same submodules, same arithmetic)."""
    from onnxcomp.models.transformers import SelfAttention

    records: list[dict] = []
    names = {m: n for n, m in model.named_modules()}

    def linear_hook(mod: nn.Linear, inp: tuple[torch.Tensor], out: torch.Tensor) -> None:
        rec = {"name": names[mod], "kind": "linear", "x": inp[0].detach().clone()}
        out.register_hook(lambda g: rec.__setitem__("dy", g.detach().clone()))
        records.append(rec)

    def attention(self: SelfAttention, h: torch.Tensor) -> torch.Tensor:
        b, t, c = h.shape
        q, k, v = (z.reshape(b, t, self.heads, self.head_dim).transpose(1, 2) for z in self.qkv(h).chunk(3, dim=-1))
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.head_dim))
        if self.causal_mask is not None:
            scores = scores.masked_fill(~self.causal_mask[:t, :t], float("-inf"))
        probs = self.attn_drop(F.softmax(scores, dim=-1))
        out = probs @ v
        rec = {"name": f"{names[self]}.P", "kind": "probs", "x": probs.detach().clone()}
        out.register_hook(lambda g: rec.__setitem__("dy", g.detach().clone()))
        records.append(rec)
        return self.proj(out.transpose(1, 2).reshape(b, t, c))

    handles = [m.register_forward_hook(linear_hook) for m in names if isinstance(m, nn.Linear)]
    originals = {m: m.forward for m in names if isinstance(m, SelfAttention)}
    for m in originals:
        m.forward = attention.__get__(m)
    try:
        model.zero_grad()
        F.cross_entropy(model(x), y).backward()
    finally:
        for h in handles:
            h.remove()
        for m, f in originals.items():
            m.forward = f
    return records


def run_transformer(model_name: str, batch: int, seq: int, train_steps: int, rel_bounds: list[float], seed: int,
                    trials: int) -> dict:
    """Error injection on a transformer LM's MatMul inputs: Linear inputs (dW = Xᵀ·dY, N = batch·seq) and
    attention probabilities (dV = Pᵀ·dO per batch and head, N = seq)."""
    from onnxcomp.models.transformers import gpt_tiny
    from onnxcomp.runtime.text_data import VOCAB_SIZE, text_dataset

    if model_name != "gpt_tiny":
        raise SystemExit(f"--model {model_name}: the transformer path knows gpt_tiny (a character LM on text)")
    torch.manual_seed(seed)
    model = gpt_tiny(VOCAB_SIZE, seq_len=seq)
    batches = text_dataset((batch, seq), VOCAB_SIZE).train_batches(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model.train()
    for _ in range(train_steps):    # realistic, not initial, gradients
        xb, yb = next(batches)
        opt.zero_grad()
        F.cross_entropy(model(torch.from_numpy(xb)), torch.from_numpy(yb)).backward()
        opt.step()
    xb, yb = next(batches)
    records = _capture_transformer(model, torch.from_numpy(xb), torch.from_numpy(yb))
    gen = torch.Generator().manual_seed(seed)
    layers = []
    for rec in records:
        x, dy = rec["x"], rec["dy"]
        nz = x != 0
        r = float(nz.float().mean())
        l_bar, l_rms = float(dy.abs().mean()), float(dy.pow(2).mean().sqrt())
        if rec["kind"] == "linear":   # X [b, t, c_in], dY [b, t, c_out] → dW [c_in, c_out] summed over b·t
            n_batch = n_sum = x.numel() // x.shape[-1]
        else:                         # P [b, h, t, t], dO [b, h, t, d] → dV [b, h, t, d] summed over t
            n_batch, n_sum = x.shape[0], x.shape[-2]
        scale = float(x.abs().max())
        for rel in rel_bounds:
            eb = rel * scale
            errs = []
            for _ in range(trials):
                e = (torch.rand(x.shape, generator=gen) * 2 - 1) * eb * nz
                if rec["kind"] == "linear":
                    errs.append((e.reshape(-1, e.shape[-1]).T @ dy.reshape(-1, dy.shape[-1])).reshape(-1))
                else:
                    errs.append((e.transpose(-2, -1) @ dy).reshape(-1))
            err = torch.cat(errs).double().numpy()
            layers.append(_layer_record(rec["name"], err, eb, rel, r, l_bar, l_rms, n_batch, n_sum) | {"kind": rec["kind"]})
    summary = _summary(model_name, layers, len(records)) | {"seq": seq, "batch": batch, "train_steps": train_steps,
                                                             "seed": seed, "trials": trials}
    for kind in ("linear", "probs"):
        a = np.array([x["a_rms"] for x in layers if x["kind"] == kind and x["a_rms"]])
        if len(a):
            summary[f"a_rms_{kind}"] = {"median": float(np.median(a)), "min": float(a.min()), "max": float(a.max()),
                                        "cv": float(a.std() / a.mean())}
    return {"summary": summary, "layers": layers}


def _layer_record(name: str, err: np.ndarray, eb: float, rel: float, r: float, l_bar: float, l_rms: float,
                  n_batch: int, n_sum: int) -> dict:
    sigma = float(err.std())
    z = (err - err.mean()) / sigma if sigma > 0 else err
    return {
        "layer": name, "eb": eb, "rel_eb": rel, "R": r, "L_bar": l_bar, "batch": n_batch, "n_summed": n_sum,
        "sigma": sigma, "within_1sigma": float(np.mean(np.abs(z) <= 1)),
        "within_2sigma": float(np.mean(np.abs(z) <= 2)), "skew": float(np.mean(z ** 3)),
        "excess_kurtosis": float(np.mean(z ** 4) - 3),
        "a_batch": sigma / (l_bar * math.sqrt(n_batch * r) * eb) if l_bar and r else None,
        "a_summed": sigma / (l_bar * math.sqrt(n_sum * r) * eb) if l_bar and r else None,
        "L_rms": l_rms, "a_rms": sigma / (l_rms * math.sqrt(n_sum * r) * eb) if l_rms and r else None,
        "hist": np.histogram(z, bins=60, range=(-4, 4))[0].tolist(),
    }


def _summary(model_name: str, layers: list[dict], n_layers: int) -> dict:
    out: dict = {"model": model_name, "layers": n_layers}
    for key in ("a_batch", "a_summed", "a_rms"):
        a = np.array([x[key] for x in layers if x[key]])
        out[key] = {"median": float(np.median(a)), "min": float(a.min()), "max": float(a.max()),
                    "cv": float(a.std() / a.mean())}
    out["within_1sigma_mean"] = float(np.mean([x["within_1sigma"] for x in layers]))
    out["within_2sigma_mean"] = float(np.mean([x["within_2sigma"] for x in layers]))
    return out


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    layers = result["layers"]
    fig, (h, s) = plt.subplots(1, 2, figsize=(11, 4))
    edges = np.linspace(-4, 4, 61)
    centers = (edges[:-1] + edges[1:]) / 2
    seen = set()
    for rec in layers:
        if rec["layer"] in seen or len(seen) >= 6:
            continue
        seen.add(rec["layer"])
        counts = np.array(rec["hist"], dtype=float)
        h.plot(centers, counts / counts.sum() / (edges[1] - edges[0]), label=rec["layer"], lw=1)
    h.plot(centers, np.exp(-centers ** 2 / 2) / math.sqrt(2 * math.pi), "k--", lw=1.5, label="N(0,1)")
    h.set_xlabel("normalised dW error"), h.set_ylabel("density"), h.legend(fontsize=7)
    h.set_title("dW error from U[-eb, eb] on X's nonzeros")
    a = result["summary"]["a_rms"]["median"]
    meas = [r["sigma"] for r in layers]
    pred = [a * r["L_rms"] * math.sqrt(r["n_summed"] * r["R"]) * r["eb"] for r in layers]
    s.loglog(pred, meas, ".", alpha=0.6)
    lo, hi = min(pred + meas), max(pred + meas)
    s.loglog([lo, hi], [lo, hi], "k--", lw=1)
    s.set_xlabel(f"predicted σ = a·rms(dY)·√(N·R)·eb, a = {a:.3f}"), s.set_ylabel("measured σ")
    s.set_title("per layer and bound")
    fig.suptitle(f"{result['summary']['model']}: error injection (COMET §4.2)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--image", type=int, default=32)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq", type=int, default=128, help="sequence length (gpt_tiny)")
    ap.add_argument("--train-steps", type=int, default=30)
    ap.add_argument("--bounds", type=float, nargs="+", default=[1e-3, 1e-2, 1e-1],
                    help="error bounds relative to max |X| of each layer")
    ap.add_argument("--trials", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="docs/comet")
    args = ap.parse_args()
    torch.set_num_threads(2)
    if args.model == "gpt_tiny":
        result = run_transformer(args.model, args.batch, args.seq, args.train_steps, args.bounds, args.seed,
                                 args.trials)
    else:
        result = run(args.model, args.image, args.batch, args.train_steps, args.bounds, args.seed, args.trials)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"error_injection_{args.model}"
    (out / f"{stem}.json").write_text(json.dumps(result, indent=1))
    plot(result, out / f"{stem}.png")
    print(json.dumps(result["summary"], indent=2))


if __name__ == "__main__":
    main()
