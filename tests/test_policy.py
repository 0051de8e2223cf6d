"""Policies as objects: declared options, refused extras, flags named only by the command line."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from onnxcomp.errors import OnnxcompError
from onnxcomp.passes import POLICIES, OPTIONS, DprPass, RecomputePass, get_policy, policy, step
from onnxcomp.passes.policy import Policy

ROOT = Path(__file__).resolve().parents[1]


def test_every_policy_declares_exactly_the_options_its_passes_take() -> None:
    for p in POLICIES.values():
        assert isinstance(p, Policy) and p.options <= set(OPTIONS)
    assert POLICIES["lossless"].options == {"min_bytes", "overrides", "native"}
    assert "dpr_format" in POLICIES["comet"].options and "dpr_format" not in POLICIES["dpr-fp8"].options
    # A declaration that disagrees with the passes is caught when the policy is defined.
    with pytest.raises(AssertionError, match="declares"):
        policy("broken", "", RecomputePass, options=("eb",))
    with pytest.raises(AssertionError, match="declares"):
        policy("broken", "", step(DprPass, dpr_format="fp8"), options=("overrides",))


def test_options_reach_the_passes_that_take_them() -> None:
    passes = get_policy("comet").build(eb=2e-3, adaptive=False, dpr_format="bf16", min_bytes=7)
    by_name = {p.name: p for p in passes}
    assert by_name["error_bounded"].eb == 2e-3 and by_name["error_bounded"].adaptive is False
    assert by_name["dpr"].dpr_format == "bf16" and by_name["dpr"].min_bytes == 7
    fixed = {p.name: p for p in get_policy("dpr-fp8").build()}
    assert fixed["dpr"].dpr_format == "fp8"


def test_an_option_the_policy_does_not_take_is_an_error() -> None:
    with pytest.raises(OnnxcompError) as exc:
        get_policy("lossless").build(eb=0.1)
    assert str(exc.value) == "policy 'lossless' does not take option 'eb' (it takes: min_bytes, native, overrides)"
    assert "--" not in str(exc.value)            # the library names options, the CLI names flags
    assert exc.value.render({"eb": "--eb"}).startswith("policy 'lossless' does not take option --eb")
    with pytest.raises(OnnxcompError, match="unknown option 'window'"):
        get_policy("comet").build(window=3)
    with pytest.raises(OnnxcompError, match="expected int"):
        get_policy("lossless").build(min_bytes=True)
    with pytest.raises(OnnxcompError, match="unknown policy 'zip'"):
        get_policy("zip")
    assert get_policy("lossless").build(eb=None)  # None: not given


def test_cli_refuses_eb_for_lossless_naming_the_flag(small_artifacts: Path, tmp_path: Path) -> None:
    out = tmp_path / "x.onnx"
    proc = subprocess.run([sys.executable, "-m", "onnxcomp", "transform", str(small_artifacts), "-o", str(out),
                           "--eb", "0.1", "--policy", "lossless"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "does not take option --eb" in lines[0], proc.stderr
    assert not out.exists()


def _imports(module: Path) -> set[str]:
    tree = ast.parse(module.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            names |= {f"{'.' * node.level}{node.module or ''}"} | {f"{'.' * node.level}{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
    return names


def test_no_cli_commands_cycle_and_no_stdlib_shadowing() -> None:
    commands = _imports(ROOT / "onnxcomp" / "commands.py")
    assert not {".cli", "onnxcomp.cli"} & commands
    assert not (ROOT / "onnxcomp" / "inspect.py").exists()
    import inspect

    assert hasattr(inspect, "signature")
