"""One op for any sparse stash: each call stores ZVC, narrow-index CSR or dense, whichever is smallest.

Training changes a tensor's sparsity as it goes, so the choice is made per call from the exact nonzero
count (``sparse_select.choose_sparse_codec``), and a payload is never larger than dense (+ a few header
bytes). The sub-codecs' arrays travel as raw bytes so the op has one fixed signature for ORT:

    mode  uint8[1]   0 dense, 1 zvc, 2 csr
    a     uint8[]    dense: the float32 bytes | zvc: bitmap       | csr: values (float32 bytes)
    b     uint8[]    dense: —                 | zvc: values bytes | csr: cols
    c     uint8[]    dense: —                 | zvc: —            | csr: row_ptr (int32 bytes)
    shape int64[ndim]

Both backends delegate to the ZVC/CSR codecs, so the bitstream is the same on CPU and GPU.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from . import cpu
from .base import Codec, Payload, get_codec, is_cupy_array, register
from .sparse_select import choose_sparse_codec, count_nonzero, predicted_sizes

MODES = ("dense", "zvc", "csr")


def _bytes(a: Any) -> Any:
    return a.reshape(-1).view(np.uint8)


@register
class SparseAdaptive(Codec):
    name = "sparse"
    input_dtype = "float32"
    output_dtype = "float32"
    payload_names = ("mode", "a", "b", "c", "shape")
    payload_dtypes = ("uint8", "uint8", "uint8", "uint8", "int64")
    kernel_file = None  # runs the zvc.cu / csr.cu kernels through those codecs

    def predicted_mode(self, shape: tuple[int, ...], density: float) -> str:
        return choose_sparse_codec(shape=shape, density=density)

    def predicted_payload(self, shape: tuple[int, ...], density: float) -> list[int]:
        """Predicted bytes of each payload array (mode, a, b, c, shape) at the given density."""
        mode = self.predicted_mode(shape, density)
        total = predicted_sizes(shape, density=density)[mode]
        shape_bytes = 8 * len(shape)
        body = total - (shape_bytes if mode != "dense" else 0)
        return [1, body, 0, 0, shape_bytes]

    def predicted_nbytes(self, shape: tuple[int, ...], **stats: Any) -> int:
        return sum(self.predicted_payload(tuple(shape), float(stats.get("density", 1.0))))

    def sample_inputs(self, rng: np.random.Generator) -> list[tuple[np.ndarray, dict[str, Any]]]:
        cases = []
        for density in (0.0, 0.05, 0.5, 0.99, 1.0):
            x = rng.standard_normal((3, 5, 17)).astype(np.float32)
            cases.append((np.where(rng.random(x.shape) < density, x, 0).astype(np.float32), {}))
        cases.append((np.zeros((0, 3), np.float32), {}))
        cases.append((np.array([np.nan, -0.0, 0.0, np.inf, -np.inf, 1.0], np.float32), {}))
        return cases

    def encode_with_mode(self, x: Any) -> tuple[str, Payload | None]:
        """(mode, the chosen sub-codec's payload) for a float32 array; the payload is None for "dense".

        On the GPU the ZVC counting pass doubles as the nonzero count, so choosing costs no extra pass."""
        if is_cupy_array(x):
            zvc = get_codec("zvc")
            counted = zvc.gpu_count(x)
            mode = choose_sparse_codec(shape=tuple(x.shape), nnz=counted[-1])
            if mode == "zvc":
                return mode, zvc.gpu_finish(counted)
            return mode, (None if mode == "dense" else get_codec(mode).encode(x))
        if (k := cpu.kernels("sparse")) is not None:  # the compiled ZVC counting pass is the count
            words = np.ascontiguousarray(x, dtype=np.float32).reshape(-1).view(np.uint32)
            bitmap, starts = k.zvc_count(words)
            mode = choose_sparse_codec(shape=tuple(x.shape), nnz=int(starts[-1]))
            if mode == "zvc":
                values = k.zvc_finish(words, starts).view(np.float32)
                return mode, (bitmap, values, np.asarray(x.shape, dtype=np.int64).reshape(x.ndim))
            return mode, (None if mode == "dense" else get_codec(mode).encode(x))
        nnz = count_nonzero(x)
        mode = choose_sparse_codec(shape=tuple(x.shape), nnz=nnz)
        if mode == "zvc":  # the count sizes its values array: no second counting pass
            return mode, get_codec("zvc").encode_cpu_counted(x, nnz)
        return mode, (None if mode == "dense" else get_codec(mode).encode(x))

    def _encode(self, x: Any, xp: Any) -> Payload:
        shape = xp.asarray(np.asarray(x.shape, dtype=np.int64).reshape(x.ndim))
        mode, sub = self.encode_with_mode(x)
        empty = xp.zeros(0, dtype=xp.uint8)
        if mode == "dense":
            parts = (_bytes(xp.ascontiguousarray(x, dtype=xp.float32)), empty, empty)
        elif mode == "zvc":
            bitmap, values, _ = sub
            parts = (bitmap, _bytes(values), empty)
        else:
            values, cols, row_ptr, _ = sub
            parts = (_bytes(values), cols, _bytes(row_ptr))
        return (xp.asarray(np.array([MODES.index(mode)], dtype=np.uint8)), *parts, shape)

    def _decode(self, payload: Payload, xp: Any) -> Any:
        if len(payload) != len(self.payload_names):
            raise ValueError(f"sparse: payload has {len(payload)} arrays, expected {len(self.payload_names)}")
        mode_arr, a, b, c, shape_arr = payload
        mode_code = np.asarray(mode_arr.get() if is_cupy_array(mode_arr) else mode_arr).reshape(-1)
        if mode_code.size != 1 or int(mode_code[0]) >= len(MODES):
            raise ValueError(f"sparse: corrupt payload: mode {mode_code.tolist()} is not one of 0..{len(MODES) - 1}")
        mode = MODES[int(mode_code[0])]
        shape = tuple(int(d) for d in (shape_arr.get() if is_cupy_array(shape_arr) else shape_arr).reshape(-1))
        if any(d < 0 for d in shape):
            raise ValueError(f"sparse: negative dimension in shape {shape}")
        if mode == "dense":
            if a.size != 4 * int(np.prod(shape, dtype=np.int64)):
                raise ValueError(f"sparse: {a.size} dense bytes cannot hold shape {shape}")
            return xp.ascontiguousarray(a).view(xp.float32).reshape(shape).copy()
        if mode == "zvc":
            return get_codec("zvc").decode((a, xp.ascontiguousarray(b).view(xp.float32), shape_arr))
        return get_codec("csr").decode((xp.ascontiguousarray(a).view(xp.float32), b,
                                        xp.ascontiguousarray(c).view(xp.int32), shape_arr))

    def encode_cpu(self, x: np.ndarray, **params: Any) -> Payload:
        return self._encode(np.ascontiguousarray(x, dtype=np.float32), np)

    def decode_cpu(self, payload: Payload, **params: Any) -> np.ndarray:
        return self._decode(payload, np)

    def encode_gpu(self, x: Any, **params: Any) -> Payload:
        import cupy as cp

        return self._encode(cp.ascontiguousarray(x, dtype=cp.float32), cp)

    def decode_gpu(self, payload: Payload, **params: Any) -> Any:
        import cupy as cp

        return self._decode(payload, cp)
