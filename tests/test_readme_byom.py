"""The README's "Bring your own model" section runs as written: its files are written, its commands run.

Fenced ```python blocks whose first line is ``# NAME.py`` are written to NAME.py; every line of the ```bash
blocks runs in order in one fresh directory, except the venv/pip set-up lines (the test already runs inside an
installed environment). ONNXCOMP_BYOM_DOC=FILE reads the section from another file (e.g. docs/user-path.md).
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

HEADING = "## Bring your own model"
ROOT = Path(__file__).resolve().parent.parent
_SETUP = ("python -m venv", "python3 -m venv", "pip ", ". .venv", "source ", "cd ")


def section(doc: Path) -> str | None:
    text = doc.read_text() if doc.exists() else ""
    start = text.find("\n" + HEADING + "\n")
    if start < 0:
        return None
    rest = text[start + len(HEADING) + 2:]
    end = re.search(r"^## ", rest, flags=re.M)
    return rest[: end.start()] if end else rest


def blocks(text: str) -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in re.finditer(r"^```(\w+)\n(.*?)^```", text, flags=re.M | re.S)]


def commands(code: str) -> list[list[str]]:
    out = []
    for line in code.splitlines():
        line = line.split(" #")[0].strip()
        if not line or line.startswith("#") or line.startswith(_SETUP):
            continue
        argv = shlex.split(line)
        if argv[0] == "onnxcomp":
            argv = [sys.executable, "-m", "onnxcomp", *argv[1:]]
        elif argv[0] in ("python", "python3"):
            argv = [sys.executable, *argv[1:]]
        out.append(argv)
    return out


def test_section_parser() -> None:
    text = "intro\n```python\n# a.py\nprint(1)\n```\n```bash\npip install -e .\nonnxcomp models  # list\n```\n"
    assert blocks(text) == [("python", "# a.py\nprint(1)\n"), ("bash", "pip install -e .\nonnxcomp models  # list\n")]
    assert commands(blocks(text)[1][1]) == [[sys.executable, "-m", "onnxcomp", "models"]]


def test_bring_your_own_model_section_runs(tmp_path: Path) -> None:
    doc = Path(os.environ.get("ONNXCOMP_BYOM_DOC", ROOT / "README.md"))
    text = section(doc)
    if text is None:
        pytest.skip(f"{doc} has no '{HEADING}' section yet (the section lives in README.md; "
                    "or point ONNXCOMP_BYOM_DOC at a file that has it)")
    ran = 0
    for lang, code in blocks(text):
        first = code.splitlines()[0] if code.strip() else ""
        if lang == "python" and re.fullmatch(r"# [\w.-]+\.py", first):
            (tmp_path / first[2:]).write_text(code)
        elif lang == "bash":
            for argv in commands(code):
                proc = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=900)
                assert proc.returncode == 0, f"{' '.join(argv)} failed:\n{proc.stdout[-1500:]}\n{proc.stderr[-3000:]}"
                ran += 1
    assert ran >= 3, "the section should show at least three commands"
