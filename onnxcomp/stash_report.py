"""What a training graph stashes, by class, and what the planners predict (`onnxcomp inspect`, `demo`)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from .analysis import GraphAnalysis
from .analysis.patterns import NO_ORT_GRADIENT, needs, technique_table
from .planner import live_bytes, plan_all

MiB = 1 << 20


def inspect_report(analysis: GraphAnalysis) -> dict[str, Any]:
    """JSON-ready summary: stashed tensors, bytes per class, and the three planner figures."""
    buffers = analysis.buffers()
    planner = plan_all(buffers).to_dict()
    stashed = [{**s.to_dict(), **_techniques(s.use)} for s in analysis.stashed]
    return {
        "model": None,
        "batch": analysis.batch,
        "nodes": analysis.n_steps,
        "forward_nodes": len(analysis.boundary.forward),
        "backward_nodes": len(analysis.boundary.backward),
        "stashed": stashed,
        "stashed_bytes": sum(s["bytes"] for s in stashed),
        "breakdown": analysis.breakdown(),
        "planner": planner,
        "unresolved_shapes": analysis.unresolved,
    }


def _techniques(use) -> dict[str, Any]:  # noqa: ANN001  (a patterns.StashUse)
    """What the backward readers need of the stash, and every technique: applies, or why not."""
    table = technique_table(use)
    return {"needs": sorted({f"{n.kind}: {n.why}" for n in needs(use)}),
            "techniques": {t: {"applies": why is None, **({"why_not": why} if why else {})}
                           for t, why in table.items()}}


def _mib(n: int) -> str:
    return f"{n / MiB:,.2f}"


def render_report(report: dict[str, Any], console: Console | None = None, limit: int | None = None) -> None:
    if console is None:
        # Piped output would be cut to 80 columns; the table needs room for tensor names and patterns. A
        # terminal keeps its own width (rich folds the long columns).
        console = Console()
        if not console.is_terminal:
            console = Console(width=180)
    title = f"Stashed tensors — {report['model']} (batch {report['batch']})"
    table = Table(title=title, show_lines=False, header_style="bold")
    for col, kw in [("tensor", {"overflow": "fold", "max_width": 42}), ("shape", {}), ("MiB", {"justify": "right"}),
                    ("producer", {}), ("backward consumer", {}), ("pattern", {}), ("encodings", {})]:
        table.add_column(col, **kw)
    rows = report["stashed"] if limit is None else report["stashed"][:limit]
    for s in rows:
        table.add_row(s["name"], "×".join(map(str, s["shape"] or ["?"])), _mib(s["bytes"]), s["producer"],
                      ", ".join(sorted(set(s["backward_consumers"]))), s["pattern"],
                      ", ".join(s["encodings"]) or "—")
    console.print(table)
    if limit is not None and len(report["stashed"]) > limit:
        console.print(f"… {len(report['stashed']) - limit} more (use --json for all)")

    # Coverage by gradient semantics: what each stash's readers need, what applies, why the others do not.
    tt = Table(title="Techniques per stash (by what the gradient needs; docs/coverage.md)", header_style="bold",
               caption=f"ORT 1.19.2 has no gradient for {', '.join(NO_ORT_GRADIENT)}: such nets train only "
                       "when written with Relu/Clip (PReLU = relu(x) − a·relu(−x), HardSwish = x·relu6(x+3)/6)")
    tt.add_column("tensor", overflow="fold", max_width=34)
    tt.add_column("readers need", overflow="fold", max_width=40)
    tt.add_column("applies")
    tt.add_column("does not apply, because", overflow="fold")
    for s in rows:
        tech = s.get("techniques", {})
        applies = [t for t, v in tech.items() if v["applies"]]
        why_not = [f"{t}: {v['why_not']}" for t, v in tech.items() if not v["applies"]]
        tt.add_row(s["name"], "; ".join(s.get("needs", [])), ", ".join(applies) or "—", "\n".join(why_not))
    console.print(tt)

    by_pattern: dict[str, list[int]] = {}
    for s in report["stashed"]:
        by_pattern.setdefault(s["pattern"], [0, 0])
        by_pattern[s["pattern"]][0] += 1
        by_pattern[s["pattern"]][1] += s["bytes"]
    pt = Table(title="Stashed bytes by pattern", header_style="bold")
    pt.add_column("pattern"), pt.add_column("tensors", justify="right"), pt.add_column("MiB", justify="right")
    for pat, (n, b) in sorted(by_pattern.items(), key=lambda kv: -kv[1][1]):
        pt.add_row(pat, str(n), _mib(b))
    console.print(pt)

    bt = Table(title="Bytes by tensor class", header_style="bold")
    bt.add_column("class"), bt.add_column("MiB", justify="right")
    for cls, b in report["breakdown"].items():
        bt.add_row(cls, _mib(b))
    console.print(bt)

    p = report["planner"]
    lb = p["lower_bound_bytes"] or 1
    pl = Table(title="Training-step transient memory (planner)", header_style="bold")
    pl.add_column("plan"), pl.add_column("MiB", justify="right"), pl.add_column("× lower bound", justify="right")
    pl.add_row("dynamic allocation (lower bound)", _mib(p["lower_bound_bytes"]), "1.000")
    pl.add_row("CNTK lifetime-grouped sharing", _mib(p["cntk_bytes"]), f"{p['cntk_bytes'] / lb:.3f}")
    pl.add_row(f"offset plan ({p.get('offset_strategy', 'greedy')})", _mib(p["offset_bytes"]),
               f"{p['offset_bytes'] / lb:.3f}")
    console.print(pl)
    if report["unresolved_shapes"]:
        console.print(f"[yellow]{len(report['unresolved_shapes'])} tensor(s) with unresolved shapes counted "
                      f"as 0 bytes: {', '.join(report['unresolved_shapes'][:5])}; a dynamic batch axis? pass "
                      "--batch N[/yellow]")


def plot_live_bytes(analysis: GraphAnalysis, path: str | Path, title: str = "") -> Path:
    """PNG of live transient bytes over the execution order, forward/backward shaded, stashed share shown."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .planner import Buffer

    buffers = analysis.buffers()
    n = analysis.n_steps
    total = live_bytes(buffers, n) / MiB
    stashed_names = {s.name for s in analysis.stashed}
    stashed = live_bytes([b for b in buffers if b.name in stashed_names] or [Buffer("none", 0, 0, 0)], n) / MiB
    fig, ax = plt.subplots(figsize=(10, 4.5), dpi=120)
    steps = range(n)
    ax.fill_between(steps, total, step="post", alpha=0.35, color="tab:blue", label="all live transient tensors")
    ax.fill_between(steps, stashed, step="post", alpha=0.6, color="tab:red", label="stashed feature maps")
    fb = analysis.boundary.first_backward
    ax.axvspan(fb - 0.5, n - 0.5, color="grey", alpha=0.12, label="backward pass")
    ax.axvline(fb - 0.5, color="black", lw=0.8, ls="--")
    trans = ax.get_xaxis_transform()  # x in data units, y in axes fraction
    ax.text(fb / 2, 1.01, "forward", ha="center", va="bottom", transform=trans)
    ax.text((fb + n) / 2, 1.01, "backward", ha="center", va="bottom", transform=trans)
    ax.set_xlabel("execution step (node order)")
    ax.set_ylabel("live bytes (MiB)")
    ax.set_title(title or "Live transient memory over one training step", pad=18)
    ax.legend(loc="upper right", fontsize=8)
    ax.set_xlim(0, n)
    fig.tight_layout()
    out = Path(path)
    tmp = out.with_name(out.name + ".tmp.png")
    fig.savefig(tmp)
    plt.close(fig)
    tmp.replace(out)
    return out
