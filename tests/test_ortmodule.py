"""ORTModule on the pinned torch: the import needs onnxcomp's aliases; encoding policies are refused with why."""
from __future__ import annotations

import subprocess
import sys

import pytest

from onnxcomp.errors import OnnxcompError


def test_encoding_policies_are_refused_with_the_reason() -> None:
    from onnxcomp.ortmodule import wrap

    with pytest.raises(OnnxcompError, match="cannot be applied inside ORTModule"):
        wrap(object(), policy="comet")


@pytest.mark.slow
def test_ortmodule_imports_only_with_the_aliases() -> None:
    code = ("import sys\n"
            "try:\n    from onnxruntime.training.ortmodule import ORTModule\n    print('plain ok')\n"
            "except ImportError as e:\n    print('plain fails:', e)\n"
            "for m in [k for k in sys.modules if k.startswith('onnxruntime.training.ortmodule')]:\n"
            "    del sys.modules[m]\n"
            "from onnxcomp.ortmodule import torch_compat\ntorch_compat()\n"
            "from onnxruntime.training.ortmodule import ORTModule\nprint('with aliases ok')\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "plain fails: cannot import name 'jit_utils'" in proc.stdout and "with aliases ok" in proc.stdout
