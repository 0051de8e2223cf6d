"""Every CUDA kernel source compiles with NVRTC (no GPU needed), with the options CuPy uses on the GPU."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from onnxcomp.custom_ops import REGISTRY, nvrtc
from onnxcomp.custom_ops.base import KERNEL_DIR
from onnxcomp.custom_ops.gpu import NVRTC_OPTIONS

KERNELS = sorted(KERNEL_DIR.glob("*.cu"))
_ENTRY = re.compile(r'extern\s+"C"\s+__global__\s+void\s+(\w+)\s*\(')


@pytest.fixture(scope="module")
def libnvrtc() -> str:
    try:
        return nvrtc.find_libnvrtc()
    except nvrtc.NvrtcNotFound as exc:
        pytest.skip(f"libnvrtc not found (install the test extra: nvidia-cuda-nvrtc-cu12): {exc}")


def test_kernel_dir_has_sources() -> None:
    assert KERNELS, f"no .cu files in {KERNEL_DIR}"


@pytest.mark.parametrize("path", KERNELS, ids=[p.name for p in KERNELS])
def test_kernel_compiles(path: Path, libnvrtc: str) -> None:
    source = path.read_text()
    entries = _ENTRY.findall(source)
    assert entries, f'{path.name} defines no extern "C" __global__ kernel'
    ptx = nvrtc.compile_to_ptx(source, path.name, NVRTC_OPTIONS)
    for name in entries:  # extern "C" keeps names unmangled, as RawModule.get_function expects
        assert re.search(rf"\.entry\s+{name}\s*\(", ptx), f"{name} missing from the PTX of {path.name}"


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_codec_kernel_file_exists(name: str) -> None:
    codec = REGISTRY[name]
    if codec.kernel_file is not None:
        assert (KERNEL_DIR / codec.kernel_file).is_file()
        assert codec.kernel_source()


def test_compile_error_is_reported(libnvrtc: str) -> None:
    with pytest.raises(nvrtc.NvrtcError, match="broken.cu"):
        nvrtc.compile_to_ptx('extern "C" __global__ void f(float* x) { x[0] = ; }', "broken.cu")
