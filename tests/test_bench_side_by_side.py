"""The PyTorch side-by-side tools read memory as `onnxcomp measure` does (trimmed baselines, the same mmap
threshold), and run every configuration in one run (tools/bench_side_by_side.py, tools/bench_ortmodule.py)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from onnxcomp.runtime.measure import MALLOC_ENV
from pinned_heap import PINNED_HEAP_STEP

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))

import bench_ortmodule  # noqa: E402
import bench_side_by_side  # noqa: E402

MiB = 1 << 20

# tests/pinned_heap.py's step, through the tools' meter: set-up leaves 8 MiB of free heap behind, the step reuses it.
_METER_SCRIPT = PINNED_HEAP_STEP + textwrap.dedent("""
    from onnxcomp.runtime.step_meter import StepMeter
    step()  # "set-up": the heap grows once and keeps 8 MiB of free pages
    meter = StepMeter(trim=sys.argv[1] == "trim")
    meter.setup_done()
    losses = [meter.step(step) for _ in range(3)]
    print(json.dumps(meter.result(losses)))
""")


def _meter(mode: str) -> dict[str, Any]:
    env = {**os.environ, **MALLOC_ENV}
    out = subprocess.run([sys.executable, "-c", _METER_SCRIPT, mode], capture_output=True, text=True, env=env,
                         timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_step_meter_reads_trimmed_baselines() -> None:
    trimmed, old = _meter("trim"), _meter("no-trim")
    # The old reading (what both tools did): the baselines held the free heap the step reuses, so nothing shows.
    assert old["step_peak"] < 2 * MiB and old["growth"] < 2 * MiB, old
    assert old["setup_trimmed"] == 0 and not any(old["trimmed_per_step"])
    # Trimmed like `measure`: set-up's free heap is handed back, and every step counts the 8 MiB it touches.
    assert trimmed["setup_trimmed"] >= 6 * MiB, trimmed
    assert all(p >= 6 * MiB for p in trimmed["step_peaks"]), trimmed
    assert trimmed["growth"] >= 6 * MiB and trimmed["heap_trimmed"] is True
    # The warm-up step is reported apart; the process peak covers every step.
    assert len(trimmed["step_peaks"]) == 2 and len(trimmed["warmup_step_peaks"]) == 1
    assert trimmed["process_peak"] >= trimmed["setup_rss"] + trimmed["growth"]
    assert trimmed["losses"] == [1.0, 1.0] and trimmed["first_loss"] == 1.0


def test_tools_pin_measures_malloc_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert bench_side_by_side.MALLOC_ENV == MALLOC_ENV
    assert bench_ortmodule.MALLOC_ENV == MALLOC_ENV
    seen: list[dict[str, str]] = []

    def fake_run(cmd: list[str], **kw: Any) -> subprocess.CompletedProcess:
        seen.append(kw["env"])
        return subprocess.CompletedProcess(cmd, 0, stdout=json.dumps({"ok": 1}) + "\n", stderr="")

    monkeypatch.setattr(subprocess, "run", fake_run)
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    bench_side_by_side.run_row({"row": "pytorch-eager"})
    bench_side_by_side.run_row({"row": bench_side_by_side.ORT_DEFAULTS, "plain_import": True})
    bench_ortmodule.run_row({"row": "eager"}, timeout=5)
    assert [e["MALLOC_MMAP_THRESHOLD_"] for e in seen] == ["131072"] * 3
    # Only the ORT-defaults baseline gets a plain `import onnxruntime` (torch included), as a user has it.
    assert [e.get("ONNXCOMP_FULL_ORT_IMPORT") for e in seen] == [None, "1", None]


def test_every_configuration_is_planned_into_one_run(tmp_path: Path) -> None:
    rows = bench_side_by_side.plan_rows(tmp_path, [("lossless", tmp_path / "a"), ("auto-exact", tmp_path / "b")],
                                        ["onnxcomp", "ort-defaults"])
    names = [r["row"] for r in rows]
    assert names == ["pytorch-eager", "pytorch-checkpoint", "pytorch-checkpoint-dense", "pytorch-fp16-hooks", "ORT baseline @ ort-defaults",
                     "ORT baseline @ onnxcomp", "onnxcomp lossless @ onnxcomp", "onnxcomp lossless @ ort-defaults",
                     "onnxcomp auto-exact @ onnxcomp", "onnxcomp auto-exact @ ort-defaults"]
    by = {r["row"]: r for r in rows}
    assert by["ORT baseline @ ort-defaults"].get("plain_import") and "graph" not in by["ORT baseline @ onnxcomp"]
    assert by["onnxcomp auto-exact @ ort-defaults"]["graph"] == str(tmp_path / "b")
    assert bench_side_by_side.SETTINGS["ort-defaults"] == {"arena": True, "mem_pattern": True, "mem_reuse": True,
                                                           "execution_order": "default"}
    with pytest.raises(SystemExit, match="unknown 'arena-only'"):
        bench_side_by_side.plan_rows(tmp_path, [], ["arena-only"])


def test_graph_argument_needs_a_transformed_directory(tmp_path: Path) -> None:
    import argparse

    with pytest.raises(argparse.ArgumentTypeError, match="LABEL=DIR"):
        bench_side_by_side._graph_arg("just-a-path")
    with pytest.raises(argparse.ArgumentTypeError, match="no training_model.onnx"):
        bench_side_by_side._graph_arg(f"x={tmp_path}")


def test_pooled_rounds_take_the_worst_memory_and_every_step_time() -> None:
    a = {"step_peak": 5, "process_peak": 50, "growth": 7, "step_times": [1.0, 3.0]}
    b = {"step_peak": 6, "process_peak": 40, "growth": 9, "step_times": [2.0, 4.0]}
    p = bench_side_by_side.pooled([a, b])
    assert (p["step_peak"], p["process_peak"], p["growth"], p["rounds"]) == (6, 50, 9, 2)
    assert p["step_times"] == [1.0, 3.0, 2.0, 4.0] and p["step_time"] == 2.5


def test_ort_rows_end_to_end_on_a_small_graph(small_artifacts: Path, tmp_path: Path) -> None:
    """Both baselines and a transformed graph under both settings, in one run, with the losses the graph gives."""
    art = tmp_path / "art"
    shutil.copytree(small_artifacts, art)
    (art / "onnxcomp.json").write_text(json.dumps({"model": "small", "batch": 4, "classes": 10,
                                                   "inputs": {"input": [4, 3, 16, 16], "labels": [4]}}))
    out = tmp_path / "rows.json"
    assert bench_side_by_side.main(["--artifacts", str(art), "--no-torch", "--policies", "lossless", "--steps", "2",
                                    "--json", str(out)]) == 0
    saved = json.loads(out.read_text())
    rows = saved["rows"]
    assert list(rows) == ["ORT baseline @ ort-defaults", "ORT baseline @ onnxcomp", "onnxcomp lossless @ onnxcomp",
                          "onnxcomp lossless @ ort-defaults"]
    for name, r in rows.items():
        assert r["heap_trimmed"] is True and r["malloc_mmap_threshold"] == "131072", name
        assert len(r["step_peaks"]) == 2 and len(r["losses"]) == 2 and r["step_time"] > 0, name
        assert 0 <= r["growth"] <= r["process_peak"] - r["setup_rss"], name
    assert rows["ORT baseline @ ort-defaults"]["torch_imported"] is True  # plain import, what a user has
    assert rows["onnxcomp lossless @ onnxcomp"]["torch_imported"] is False  # lean import
    # lossless is exact: the same losses as the untouched graph, under either settings.
    base = rows["ORT baseline @ onnxcomp"]["losses"]
    assert rows["onnxcomp lossless @ onnxcomp"]["losses"] == base
    assert rows["onnxcomp lossless @ ort-defaults"]["losses"] == base
    assert saved["trim_heap"] is True


def test_ortmodule_tool_reads_trimmed_baselines() -> None:
    """bench_ortmodule's eager row (no ORTModule build needed) through the same meter, in a fresh process."""
    cfg = {"model": "squeezenet_s", "batch": 2, "image": 32, "classes": 10, "warmup": 1, "steps": 1,
           "row": "eager", "trim": True}
    r = bench_ortmodule.run_row(cfg, timeout=300)
    assert "error" not in r, r
    assert r["heap_trimmed"] is True and r["malloc_mmap_threshold"] == "131072"
    assert len(r["trimmed_per_step"]) == 2 and len(r["step_peaks"]) == 1 and len(r["warmup_step_peaks"]) == 1
    assert r["growth"] <= r["process_peak"] - r["start_rss"] and r["growth"] > 0


def test_dense_checkpoint_segments_the_stem_and_keeps_the_gradients() -> None:
    import torch

    from onnxcomp.models import build_model

    torch.manual_seed(0)
    eager = build_model("resnet18", 10)
    dense = build_model("resnet18", 10)
    dense.load_state_dict(eager.state_dict())
    bench_side_by_side._checkpoint_stages(dense, dense=True)
    assert isinstance(dense.bn1, torch.nn.Identity) and isinstance(dense.conv1, torch.nn.Sequential)
    x, y = torch.randn(2, 3, 32, 32), torch.tensor([1, 7])
    grads = []
    for m in (eager, dense):
        m.train()
        loss = torch.nn.functional.cross_entropy(m(x), y)
        loss.backward()
        grads.append((float(loss), m.layer1[0].conv1.weight.grad.clone()))
    # The stem's parameters now live inside the checkpointed Sequential; its first conv's gradient must match.
    assert grads[0][0] == grads[1][0]
    assert torch.equal(grads[0][1], grads[1][1])
    assert torch.equal(eager.conv1.weight.grad, dense.conv1[0].weight.grad)
