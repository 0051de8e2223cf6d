"""Store the activations PyTorch saves for backward encoded with onnxcomp's codecs (saved-tensor hooks).

    from onnxcomp.torch import compress_activations

    with compress_activations("exact") as stats:
        loss = criterion(model(x), y)
    loss.backward()                      # decodes each saved tensor when its backward op asks for it

Every tensor autograd saves passes through ``pack``; what it keeps depends on which module saved it (global
module hooks track the module running, so ``nn.ReLU`` / ``nn.MaxPool2d`` modules are recognised; functional
calls fall back to the generic rule):

* ``nn.ReLU``'s saved output: ReluBackward only tests ``y > 0``, so one bit per element (the ``signbits``
  bitstream, Gist's Binarize), decoded to a bool mask (``relumask``), which ReluBackward takes as it is. Exact.
* ``nn.MaxPool2d``'s saved input: its backward reads only the input's shape and layout (it scatters the gradient
  through the indices), so only shape, strides, dtype and device are kept. Exact (tested).
* ``nn.MaxPool2d``'s int64 indices: the argmax's offset inside its pooling window, ``ceil(log2(kh*kw))`` bits
  (``maxpool_index``). Exact.
* any other float32 activation (a conv's input, BatchNorm's input, ...): the policy's ``full`` codec --
  ``sparse`` (ZVC / narrow CSR / left as is, whichever is smallest: exact; tried only on outputs of ReLU-like
  ops and pools, since a conv output is dense and finding that out costs a pass and a sync) or a lossy one
  (DPR fp16/bf16/fp8, ``sparse+dpr_fp8``, SZ with an error bound relative to the tensor's largest magnitude).
* parameters, tensors under ``min_bytes``, other dtypes: kept as they are.

One tensor is often saved by several ops (an in-place ReLU's output by ReluBackward, the next conv and a
downsample conv): packs of the same memory, version, layout and need share one payload (the dedupe map is weak:
it never keeps a payload or a tensor alive), and a decoded tensor still alive is reused rather than decoded
again. On CUDA the codecs run as CuPy RawKernels on the tensor's own memory (DLPack, no host copy) on PyTorch's
current stream, and CuPy allocates through PyTorch's caching allocator, so ``torch.cuda.max_memory_allocated``
counts every payload and temporary. On the CPU they run the NumPy kernels on ``Tensor.numpy()`` views.
"""
from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from onnxcomp.custom_ops import get_codec

FULL_CODECS = ("none", "sparse", "dpr_fp16", "dpr_bf16", "dpr_fp10", "dpr_fp8", "sparse+dpr_fp8", "sz")
# Producers whose outputs are mostly zeros: only their outputs are worth a sparse attempt. A conv output (what
# BatchNorm saves) is dense, and finding that out costs a counting pass and a device->host sync per tensor.
_SPARSE_PRODUCERS = frozenset({"ReluBackward0", "ThresholdBackward0", "HardtanhBackward0",
                               "MaxPool2DWithIndicesBackward0", "DropoutBackward0", "NativeDropoutBackward0"})


@dataclass(frozen=True)
class Policy:
    """What ``compress_activations`` does with each kind of saved tensor.

    ``full``: codec for float32 activations whose values backward reads (one of FULL_CODECS; "none" keeps
    them). ``relu_sign`` / ``pool_indices`` / ``pool_input_shape_only``: the exact ReLU and MaxPool encodings.
    ``sz_rel_eb``: SZ's absolute error bound is this times the tensor's largest magnitude.
    """

    name: str
    full: str = "sparse"
    relu_sign: bool = True
    pool_indices: bool = True
    pool_input_shape_only: bool = True
    sz_rel_eb: float = 1e-2
    min_bytes: int = 1 << 16

    def __post_init__(self) -> None:
        if self.full not in FULL_CODECS:
            raise ValueError(f"policy {self.name!r}: full={self.full!r} is not one of {', '.join(FULL_CODECS)}")

    @property
    def exact(self) -> bool:
        return self.full in ("none", "sparse")


POLICIES: dict[str, Policy] = {p.name: p for p in [
    Policy("binarize", full="none"),             # ReLU bits + MaxPool offsets only: exact, no data-dependent sync
    Policy("exact", full="sparse"),              # + lossless sparse storage of every other activation
    Policy("lossy-fp16", full="dpr_fp16"),
    Policy("lossy-bf16", full="dpr_bf16"),
    Policy("lossy-fp8", full="sparse+dpr_fp8"),
    Policy("lossy-sz", full="sz"),
]}


@dataclass
class Stats:
    """Bytes seen by pack and bytes kept, by what was done to them (deduplicated packs count once)."""

    packs: int = 0
    shared: int = 0                     # packs answered by an earlier payload of the same tensor
    bytes_in: int = 0                   # tensors packed (each distinct pack once)
    bytes_kept: int = 0                 # payloads + tensors kept as they are
    by_kind: dict[str, list[int]] = field(default_factory=dict)  # kind -> [count, bytes in, bytes kept]

    def add(self, kind: str, nin: int, nkept: int) -> None:
        self.packs += 1
        self.bytes_in += nin
        self.bytes_kept += nkept
        c = self.by_kind.setdefault(kind, [0, 0, 0])
        c[0] += 1
        c[1] += nin
        c[2] += nkept

    @property
    def ratio(self) -> float:
        return self.bytes_in / self.bytes_kept if self.bytes_kept else 1.0


# -- arrays: torch <-> codec backends without copies ---------------------------------------------------------
def _to_array(t: torch.Tensor) -> Any:
    if t.is_cuda:
        import cupy as cp

        return cp.from_dlpack(t.detach())
    return t.detach().numpy()


def _to_tensor(a: Any) -> torch.Tensor:
    if a.dtype == np.bool_:  # through uint8: DLPack's bool support varies between versions
        return _to_tensor(a.view(np.uint8)).view(torch.bool)
    if isinstance(a, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(a))
    return torch.from_dlpack(a)


def _dense_order(t: torch.Tensor) -> tuple[torch.Tensor, tuple[int, ...] | None] | None:
    """t as a C-contiguous tensor of permuted dims (no copy) and the permutation, or None if no permutation is.

    Channels-last activations encode in their memory order and decode back to the same strides, so backward
    kernels see the layout they saw in the plain run."""
    if t.is_contiguous():
        return t, None
    perm = tuple(sorted(range(t.dim()), key=lambda d: (-t.stride(d), -t.shape[d])))
    p = t.permute(perm)
    return (p, perm) if p.is_contiguous() else None


def _nbytes(payload: Any) -> int:
    if isinstance(payload, (tuple, list)):
        return sum(_nbytes(p) for p in payload)
    return int(payload.nbytes)


def _torch_allocator() -> Any:
    """A CuPy allocator drawing from PyTorch's caching allocator, so torch.cuda.max_memory_allocated counts
    every payload and codec temporary. The torch tensor owns the memory; CuPy keeps it alive as the owner."""
    import cupy as cp

    def alloc(size: int) -> Any:
        device = cp.cuda.Device().id
        owner = torch.empty(max(int(size), 1), dtype=torch.uint8, device=f"cuda:{device}")
        return cp.cuda.MemoryPointer(cp.cuda.UnownedMemory(owner.data_ptr(), size, owner, device), 0)

    return alloc


# -- what autograd keeps instead of a tensor -------------------------------------------------------------------
class _Packed:
    """A saved tensor as kept: the tensor itself, its shape alone, or a codec payload."""

    __slots__ = ("kind", "tensor", "payload", "decode", "meta", "decoded", "__weakref__")

    def __init__(self, kind: str, tensor: torch.Tensor | None = None, payload: Any = None, decode: Any = None,
                 meta: tuple[Any, ...] = ()) -> None:
        self.kind = kind
        self.tensor = tensor
        self.payload = payload
        self.decode = decode          # callable(payload) -> array, for kind "codec"
        self.meta = meta              # (perm,) for codecs; (size, stride, dtype, device) for "shape"
        self.decoded: weakref.ref | None = None

    def unpack(self) -> torch.Tensor:
        if self.kind == "raw":
            return self.tensor
        if self.kind == "shape":
            # MaxPool's backward reads only the input's size and memory format: a contiguous input comes back as
            # one broadcast element (no allocation), any other layout as an uninitialised tensor of its strides
            size, stride, dtype, device = self.meta
            if stride == torch.empty(size, device="meta").stride():
                return torch.zeros((), dtype=dtype, device=device).expand(size)
            return torch.empty_strided(size, stride, dtype=dtype, device=device)
        cached = self.decoded() if self.decoded is not None else None
        if cached is not None:
            return cached
        y = self.decode(self.payload)
        if self.meta and self.meta[0] is not None:
            perm = self.meta[0]
            y = y.permute(tuple(int(i) for i in np.argsort(perm)))
        self.decoded = weakref.ref(y)
        return y


_CUPY: bool | None = None  # whether CuPy imports, decided on first use


def _cupy_available() -> bool:
    global _CUPY
    if _CUPY is None:
        try:
            import cupy  # noqa: F401

            _CUPY = True
        except ImportError:
            _CUPY = False
    return _CUPY



# -- the context manager ---------------------------------------------------------------------------------------
class _Compressor:
    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.stats = Stats()
        self.local = threading.local()
        self.seen: dict[tuple[Any, ...], tuple[weakref.ref, weakref.ref]] = {}
        self.purge_at = 256

    # module tracking: the innermost module running when autograd saves a tensor
    def _stack(self) -> list[tuple[nn.Module, tuple[int, ...] | None]]:
        s = getattr(self.local, "stack", None)
        if s is None:
            s = self.local.stack = []
        return s

    def pre_hook(self, module: nn.Module, args: tuple[Any, ...]) -> None:
        shape = tuple(args[0].shape) if args and isinstance(args[0], torch.Tensor) else None
        self._stack().append((module, shape))

    def post_hook(self, module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
        s = self._stack()
        if s and s[-1][0] is module:
            s.pop()

    # dedupe: same memory, version, layout, dtype and need -> same payload while both are alive
    def _key(self, t: torch.Tensor, need: str) -> tuple[Any, ...] | None:
        try:
            version = t._version
        except RuntimeError:  # inference tensors have no version counter
            return None
        return (t.device, t.data_ptr(), tuple(t.shape), t.stride(), t.dtype, version, need)

    def _lookup(self, key: tuple[Any, ...] | None) -> _Packed | None:
        if key is None or key not in self.seen:
            return None
        tref, pref = self.seen[key]
        packed = pref()
        return packed if tref() is not None and packed is not None else None

    def _remember(self, key: tuple[Any, ...] | None, t: torch.Tensor, packed: _Packed) -> None:
        if key is None:
            return
        self.seen[key] = (weakref.ref(t), weakref.ref(packed))
        if len(self.seen) > self.purge_at:
            self.seen = {k: v for k, v in self.seen.items() if v[0]() is not None and v[1]() is not None}
            self.purge_at = max(256, 2 * len(self.seen))

    # pack / unpack
    def pack(self, t: torch.Tensor) -> Any:
        need, params = self._need(t)
        if need == "raw":
            return t
        key = self._key(t, need)
        if need == "kept":
            if self._lookup(key) is None:
                nbytes = t.numel() * t.element_size()
                self.stats.add("full:kept", nbytes, nbytes)
                self._remember(key, t, _Packed("raw", tensor=t))
            else:
                self.stats.shared += 1
            return t
        packed = self._lookup(key)
        if packed is not None:
            self.stats.shared += 1
            return packed
        nbytes = t.numel() * t.element_size()
        with self._stream(t):
            packed = self._encode(t, need, params)
        self.stats.add(need if packed.kind != "raw" else f"{need}:kept", nbytes, self._kept_bytes(packed, nbytes))
        self._remember(key, t, packed)
        return packed

    @staticmethod
    def unpack(obj: Any) -> torch.Tensor:
        if isinstance(obj, _Packed):
            if obj.kind in ("raw", "shape"):
                return obj.unpack()
            with _Compressor._stream(obj.tensor if obj.tensor is not None else None, obj.meta):
                return obj.unpack()
        return obj

    @staticmethod
    @contextmanager
    def _stream(t: torch.Tensor | None, meta: tuple[Any, ...] = ()) -> Iterator[None]:
        """Run CuPy on PyTorch's current stream of the tensor's device (a no-op on the CPU)."""
        device = t.device if t is not None else (meta[1] if len(meta) > 1 else None)
        if device is None or device.type != "cuda":
            yield
            return
        import cupy as cp

        with cp.cuda.Device(device.index), cp.cuda.ExternalStream(torch.cuda.current_stream(device).cuda_stream):
            yield

    @staticmethod
    def _kept_bytes(packed: _Packed, nbytes: int) -> int:
        if packed.kind == "raw":
            return nbytes
        if packed.kind == "shape":
            return 0
        return _nbytes(packed.payload)

    def _need(self, t: torch.Tensor) -> tuple[str, Any]:
        """'sign', 'shape', 'pool' (with its geometry), 'full' or 'raw' for a tensor autograd is saving."""
        p = self.policy
        if isinstance(t, nn.Parameter) or (t.is_leaf and t.requires_grad):
            return "raw", None
        if t.numel() * t.element_size() < p.min_bytes or t.layout != torch.strided:
            return "raw", None
        if t.is_cuda and not _cupy_available():
            return "raw", None
        stack = self._stack()
        module, in_shape = stack[-1] if stack else (None, None)
        if t.dtype == torch.int64:
            if p.pool_indices and isinstance(module, nn.MaxPool2d) and in_shape is not None and t.dim() == 4 \
                    and len(in_shape) == 4:
                return "pool", (module, in_shape)
            return "raw", None
        if t.dtype != torch.float32:
            return "raw", None
        if isinstance(module, nn.ReLU) and p.relu_sign:
            return "sign", None
        if isinstance(module, nn.MaxPool2d) and p.pool_input_shape_only and in_shape == tuple(t.shape):
            return "shape", None
        if p.full == "none" or (p.full == "sparse" and type(t.grad_fn).__name__ not in _SPARSE_PRODUCERS):
            return "kept", None  # an activation kept as it is (counted in the stats, unlike parameters)
        return "full", None

    def _encode(self, t: torch.Tensor, need: str, params: Any) -> _Packed:
        if need == "shape":
            return _Packed("shape", meta=(tuple(t.shape), t.stride(), t.dtype, t.device))
        ordered = _dense_order(t)
        if ordered is None:
            return _Packed("raw", tensor=t)
        src, perm = ordered
        a = _to_array(src)
        try:
            if need == "sign":  # ReluBackward tests result > 0: a bool mask (relumask) is a quarter of float 1/0
                return self._packed("relumask", a.shape, get_codec("relumask").encode(a), perm, t)
            if need == "pool":
                return self._encode_pool(t, src, perm, params)
            return self._encode_full(t, a, perm)
        except ValueError:
            # a codec refusing its input (e.g. indices that are not MaxPool's): keep the tensor, stay exact
            return _Packed("raw", tensor=t)

    @staticmethod
    def _decoder(name: str, on_gpu: bool, **params: Any) -> Any:
        """payload -> array. On the GPU it calls decode_gpu with check=False: these payloads were made in this
        process a moment ago, so the codecs' corrupt-payload checks (device->host syncs) are skipped."""
        codec = get_codec(name)
        if on_gpu:
            return lambda p: codec.decode_gpu(p, check=False, **params)
        return lambda p: codec.decode_cpu(p, **params)

    def _packed(self, name: str, shape: tuple[int, ...], payload: Any, perm: tuple[int, ...] | None,
                t: torch.Tensor, **params: Any) -> _Packed:
        """A codec payload as kept: its shape entry on the host (decoding then needs no device->host copy)."""
        payload = (*payload[:-1], np.asarray(shape, dtype=np.int64).reshape(len(shape)))
        dec = self._decoder(name, t.is_cuda, **params)
        return _Packed("codec", payload=payload, decode=lambda p: _to_tensor(dec(p)), meta=(perm, t.device))

    def _encode_full(self, t: torch.Tensor, a: Any, perm: tuple[int, ...] | None) -> _Packed:
        full = self.policy.full
        shape = tuple(a.shape)
        if full == "sparse+dpr_fp8" and type(t.grad_fn).__name__ not in _SPARSE_PRODUCERS:
            full = "dpr_fp8"  # dense for sure: no counting pass
        if full in ("sparse", "sparse+dpr_fp8"):
            mode, payload = get_codec("sparse").encode_with_mode(a)
            if mode == "dense":
                if full == "sparse":
                    return _Packed("raw", tensor=t)
                full = "dpr_fp8"
            elif full == "sparse":
                return self._packed(mode, shape, payload, perm, t)
            else:  # sparse, then the nonzero values (payload[1] for zvc, [0] for csr) in fp8
                vi = 1 if mode == "zvc" else 0
                values = payload[vi]
                vpay = get_codec("dpr_fp8").encode(values)
                vpay = (vpay[0], np.asarray(values.shape, dtype=np.int64))
                rest = tuple(p for i, p in enumerate(payload[:-1]) if i != vi) + (np.asarray(shape, np.int64),)
                dec_values, dec_sparse = self._decoder("dpr_fp8", t.is_cuda), self._decoder(mode, t.is_cuda)

                def decode(p: Any) -> torch.Tensor:
                    rest, vpay = p
                    return _to_tensor(dec_sparse((*rest[:vi], dec_values(vpay), *rest[vi:])))

                return _Packed("codec", payload=(rest, vpay), decode=decode, meta=(perm, t.device))
        if full == "sz":
            from onnxcomp.custom_ops.sz import make_header

            xp = np if isinstance(a, np.ndarray) else __import__("cupy")
            amax = float(xp.abs(a).max()) if a.size else 0.0
            if not np.isfinite(amax) or amax == 0.0:
                return _Packed("raw", tensor=t)
            eb = self.policy.sz_rel_eb * amax
            payload = get_codec("sz").encode(a, eb=eb)
            return self._packed("sz", shape, (make_header(eb), *payload[1:]), perm, t)
        return self._packed(full, shape, get_codec(full).encode(a), perm, t)

    def _encode_pool(self, t: torch.Tensor, src: torch.Tensor, perm: tuple[int, ...] | None,
                     params: tuple[nn.MaxPool2d, tuple[int, ...]]) -> _Packed:
        module, in_shape = params
        stride = t.stride()
        if perm is not None:  # channels-last indices: encode the NCHW order, restore the strides on decode
            src = t.contiguous()
        N, C, H, W = in_shape
        pair = lambda v: (v, v) if isinstance(v, int) else tuple(v)  # noqa: E731
        (kh, kw), (sh, sw) = pair(module.kernel_size), pair(module.stride or module.kernel_size)
        (ph, pw), (dh, dw) = pair(module.padding), pair(module.dilation)
        geom = dict(input_shape=[N, C, H, W], kernel_shape=[kh, kw], strides=[sh, sw], pads=[ph, pw, ph, pw],
                    dilations=[dh, dw], ceil_mode=int(module.ceil_mode))
        # PyTorch's indices are per plane (h*W + w); the codec takes ONNX's absolute NCHW indices.
        base = (torch.arange(N * C, device=t.device, dtype=torch.int64) * (H * W)).view(N, C, 1, 1)
        payload = get_codec("maxpool_index").encode(_to_array(src + base), **geom)
        payload = (payload[0], np.asarray(tuple(src.shape), dtype=np.int64))
        dec = self._decoder("maxpool_index", t.is_cuda, **geom)

        def decode(p: Any) -> torch.Tensor:
            y = _to_tensor(dec(p)) - base
            return y if y.stride() == stride else torch.empty_strided(y.shape, stride, dtype=y.dtype,
                                                                       device=y.device).copy_(y)

        return _Packed("codec", payload=payload, decode=decode, meta=(None, t.device))


@contextmanager
def compress_activations(policy: str | Policy = "exact", *, min_bytes: int | None = None) -> Iterator[Stats]:
    """Inside this block, tensors autograd saves for backward are stored encoded (see the module docstring).

    ``policy``: a name from POLICIES ("binarize", "exact", "lossy-fp16", "lossy-bf16", "lossy-fp8",
    "lossy-sz") or a Policy. ``min_bytes`` overrides the policy's size floor. Yields the running Stats.
    """
    if isinstance(policy, str):
        try:
            policy = POLICIES[policy]
        except KeyError:
            raise ValueError(f"unknown policy {policy!r}; known: {', '.join(POLICIES)}") from None
    if min_bytes is not None:
        policy = Policy(**{**policy.__dict__, "min_bytes": int(min_bytes)})
    comp = _Compressor(policy)
    with ExitStack() as stack:
        if torch.cuda.is_available() and _cupy_available():
            import cupy as cp

            previous = cp.cuda.get_allocator()
            cp.cuda.set_allocator(_torch_allocator())
            stack.callback(cp.cuda.set_allocator, previous)
        pre = nn.modules.module.register_module_forward_pre_hook(comp.pre_hook)
        stack.callback(pre.remove)
        post = nn.modules.module.register_module_forward_hook(comp.post_hook, always_call=True)
        stack.callback(post.remove)
        stack.enter_context(torch.autograd.graph.saved_tensors_hooks(comp.pack, comp.unpack))
        yield comp.stats
