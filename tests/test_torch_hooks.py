"""onnxcomp.torch.compress_activations: exact policies give bit-identical gradients, lossy ones close ones."""
from __future__ import annotations

import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from onnxcomp.models.architectures import resnet18  # noqa: E402
from onnxcomp.torch import POLICIES, compress_activations  # noqa: E402


class PoolNet(nn.Module):
    """Conv-BN-ReLU-MaxPool, then an in-place ReLU read by two convs (dedupe), then a head."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(inplace=True),
                                  nn.MaxPool2d(3, stride=2, padding=1))
        self.conv = nn.Conv2d(8, 8, 3, padding=1)
        self.relu = nn.ReLU(inplace=True)
        self.a = nn.Conv2d(8, 4, 3, padding=1)
        self.b = nn.Conv2d(8, 4, 1)
        self.pool = nn.MaxPool2d(2, ceil_mode=True)
        self.head = nn.Linear(4 * 5 * 5, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.relu(self.conv(self.stem(x)))
        h = self.pool(self.a(h) + self.b(h))
        return self.head(torch.flatten(h, 1))


def _grads(model: nn.Module, x: torch.Tensor, y: torch.Tensor, policy: str | None, **kw: object
           ) -> tuple[torch.Tensor, list[torch.Tensor], object]:
    model.zero_grad(set_to_none=True)
    stats = None
    if policy is None:
        loss = nn.functional.cross_entropy(model(x), y)
    else:
        with compress_activations(policy, **kw) as stats:
            loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in model.parameters()], stats


def _bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.equal(a.view(torch.int32), b.view(torch.int32))


def _setup(model: nn.Module, shape: tuple[int, ...], classes: int, device: str = "cpu", channels_last: bool = False
           ) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    model = model.to(device)
    x = torch.randn(*shape, device=device)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    return model, x, torch.randint(0, classes, (shape[0],), device=device)


@pytest.mark.parametrize("policy, channels_last", [("binarize", False), ("exact", False), ("exact", True)])
def test_exact_policies_bit_identical_poolnet(policy: str, channels_last: bool) -> None:
    torch.manual_seed(0)
    model, x, y = _setup(PoolNet(), (3, 3, 19, 19), 5, channels_last=channels_last)
    # min_bytes=0: every saved activation goes through the hooks, however small
    base_loss, base, _ = _grads(model, x, y, None)
    loss, grads, stats = _grads(model, x, y, policy, min_bytes=0)
    assert torch.equal(loss, base_loss)
    assert all(_bitwise_equal(a, b) for a, b in zip(base, grads))
    kinds = set(stats.by_kind)
    assert {"sign", "shape", "pool"} <= kinds, kinds
    assert stats.bytes_kept < stats.bytes_in
    if policy == "exact":
        assert any(k.startswith("full") for k in kinds), kinds
        assert stats.shared >= 1  # the in-place ReLU's output is read by two convs: one payload


@pytest.mark.slow
def test_exact_resnet18_bit_identical_over_steps() -> None:
    """Two SGD steps of ResNet-18 (BatchNorm, residual adds, downsample convs): same losses, same weights."""
    torch.manual_seed(0)
    plain = resnet18(num_classes=7)
    hooked = resnet18(num_classes=7)
    hooked.load_state_dict(plain.state_dict())
    losses = {}
    for name, model, policy in (("plain", plain, None), ("exact", hooked, "exact")):
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        g = torch.Generator().manual_seed(1)
        losses[name] = []
        for _ in range(2):
            x = torch.relu(torch.randn(2, 3, 16, 16, generator=g))
            y = torch.randint(0, 7, (2,), generator=g)
            loss, _, _ = _grads(model, x, y, policy, min_bytes=0)
            opt.step()
            losses[name].append(loss)
    assert torch.equal(torch.stack(losses["plain"]), torch.stack(losses["exact"]))
    for a, b in zip(plain.state_dict().values(), hooked.state_dict().values()):
        assert torch.equal(a, b)


@pytest.mark.parametrize("policy, tol", [("lossy-fp16", 2e-3), ("lossy-fp8", 0.25), ("lossy-sz", 0.25)])
def test_lossy_policies_close_and_smaller(policy: str, tol: float) -> None:
    model, x, y = _setup(PoolNet(), (4, 3, 19, 19), 5)
    base_loss, base, _ = _grads(model, x, y, None)
    _, _, exact = _grads(model, x, y, "exact", min_bytes=0)
    loss, grads, stats = _grads(model, x, y, policy, min_bytes=0)
    assert torch.equal(loss, base_loss)  # the forward pass is untouched: only what backward reads changes
    num = sum(float((a - b).norm() ** 2) for a, b in zip(base, grads)) ** 0.5
    den = sum(float(a.norm() ** 2) for a in base) ** 0.5
    assert 0 < num / den < tol, num / den
    assert stats.bytes_kept < exact.bytes_kept


def test_min_bytes_keeps_small_tensors_and_unknown_policy() -> None:
    model, x, y = _setup(PoolNet(), (2, 3, 19, 19), 5)
    _, _, stats = _grads(model, x, y, "exact", min_bytes=1 << 30)
    assert stats.packs == 0 and stats.bytes_kept == 0
    with pytest.raises(ValueError, match="unknown policy"):
        with compress_activations("nope"):
            pass
    assert set(POLICIES) >= {"exact", "binarize", "lossy-fp8", "lossy-sz"}


def test_importing_onnxcomp_does_not_import_torch() -> None:
    code = "import sys, onnxcomp, onnxcomp.torch; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


# -- GPU (CuPy kernels through DLPack) -------------------------------------------------------------------------
def _cuda_or_skip() -> None:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    pytest.importorskip("cupy")


@pytest.mark.gpu
@pytest.mark.parametrize("policy", ["binarize", "exact"])
@pytest.mark.parametrize("channels_last", [False, True])
def test_gpu_exact_bit_identical(policy: str, channels_last: bool) -> None:
    _cuda_or_skip()
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    for net, shape, classes in ((PoolNet(), (8, 3, 19, 19), 5), (resnet18(num_classes=7), (8, 3, 64, 64), 7)):
        model, x, y = _setup(net, shape, classes, "cuda", channels_last)
        base_loss, base, _ = _grads(model, x, y, None)
        again_loss, again, _ = _grads(model, x, y, None)
        if not all(_bitwise_equal(a, b) for a, b in zip(base, again)):
            pytest.skip("plain PyTorch is not run-to-run deterministic here")
        loss, grads, stats = _grads(model, x, y, policy, min_bytes=0)
        assert torch.equal(loss, base_loss)
        bad = [i for i, (a, b) in enumerate(zip(base, grads)) if not _bitwise_equal(a, b)]
        assert not bad, f"{type(net).__name__}: gradients {bad} differ"
        assert {"sign", "shape", "pool"} <= set(stats.by_kind)


@pytest.mark.gpu
@pytest.mark.parametrize("policy", ["lossy-fp16", "lossy-fp8", "lossy-sz"])
def test_gpu_lossy_matches_cpu_payload_sizes(policy: str) -> None:
    """The same model on CPU and GPU keeps the same bytes (the kernels produce NumPy's payloads)."""
    _cuda_or_skip()
    torch.backends.cudnn.deterministic = True
    model, x, y = _setup(PoolNet(), (4, 3, 19, 19), 5)
    _, base, _ = _grads(model, x, y, None)
    _, _, cpu_stats = _grads(model, x, y, policy, min_bytes=0)
    model_gpu = model.cuda()
    _, grads, gpu_stats = _grads(model_gpu, x.cuda(), y.cuda(), policy, min_bytes=0)
    assert gpu_stats.by_kind.keys() == cpu_stats.by_kind.keys()
    # activations differ in the last bits between CPU and GPU convs, so SZ/sparse sizes may differ slightly
    assert abs(gpu_stats.bytes_kept - cpu_stats.bytes_kept) <= 0.05 * cpu_stats.bytes_kept
    num = sum(float((a - b.cpu()).norm() ** 2) for a, b in zip(base, grads)) ** 0.5
    den = sum(float(a.norm() ** 2) for a in base) ** 0.5
    assert num / den < 0.3


@pytest.mark.gpu
def test_gpu_saved_memory_lower_and_counted() -> None:
    """CuPy allocates through PyTorch's allocator inside the hooks: what the forward pass leaves for backward
    (payloads included) is what memory_allocated sees, and it drops: exact < plain, lossy-fp8 < exact."""
    _cuda_or_skip()
    model, x, y = _setup(resnet18(num_classes=10), (32, 3, 64, 64), 10, "cuda")
    saved = {}
    for policy in (None, "exact", "lossy-fp8"):
        for _ in range(2):  # the first pass warms up cuDNN and compiles the CuPy kernels
            model.zero_grad(set_to_none=True)
            torch.cuda.synchronize()
            before = torch.cuda.memory_allocated()
            if policy is None:
                loss = nn.functional.cross_entropy(model(x), y)
            else:
                with compress_activations(policy) as stats:
                    loss = nn.functional.cross_entropy(model(x), y)
                assert stats.bytes_kept < stats.bytes_in
            torch.cuda.synchronize()
            saved[policy] = torch.cuda.memory_allocated() - before
            loss.backward()
            del loss
    assert saved["exact"] < saved[None]
    assert saved["lossy-fp8"] < 0.5 * saved[None]
