"""``onnxcomp calibrate``: time the codec ops and ORT ops on this machine and fit the cost model.

Every timing comes from ONNX Runtime's own profiler (``SessionOptions.enable_profiling``): the codec PyOps run
as nodes of a small encode→decode graph (so the onnxruntime-extensions bridge's copies are in the figure),
common ops the passes insert (Cast, Clip, Slice, Concat, ...) in a small graph of their own, and Conv /
BatchNorm / gradient ops in a training step of a bundled model. Each timing runs in a fresh child process
with measure's allocator setting (``MALLOC_MMAP_THRESHOLD_``), the setting step times are measured under.

Inputs are activations of the right statistics: a spatially correlated Gaussian field through a ReLU whose
threshold sets the nonzero ratio (what ReLU outputs and conv inputs look like), MaxPool indices of such a
field, boolean masks with the given share of True.
"""
from __future__ import annotations

import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import numpy as np

from onnxcomp.errors import OnnxcompError

KiB, MiB = 1 << 10, 1 << 20
# Inputs rotate through copies spanning at least this many bytes, so each run reads from memory, not from a
# cache the previous run warmed: in a training step an activation is long evicted when its encoder or a
# cheap op reads it (the machine's L3 here is 32 MiB; timings on 4 MiB hot inputs came out 2-10x low).
COLD_BYTES = 96 * MiB
MAX_COPIES = 64


def cold_copies(x: np.ndarray) -> list[np.ndarray]:
    """``x`` and copies of it at other addresses, COLD_BYTES in all (at most MAX_COPIES arrays)."""
    k = int(min(MAX_COPIES, max(1, -(-COLD_BYTES // max(x.nbytes, 1)))))
    return [x] + [x.copy() for _ in range(k - 1)]

# Params each codec is calibrated with (those that need any): COMET's relative bound on unit-scale data,
# the zfp policy's default rate, ResNet's stem pool, ReLU6's interval.
CODEC_PARAMS: dict[str, dict[str, Any]] = {
    "sz": {"eb": 1e-2},
    "zfp": {"rate": 8},
    "intervalmask": {"lo": 0.0, "hi": 6.0},
    "maxpool_index": {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
}


@dataclass(frozen=True)
class CalibrationPlan:
    """What a calibration run times. sizes: raw tensor bytes; nonzero: ratios; repeats: per point."""

    sizes: tuple[int, ...]
    nonzero: tuple[float, ...]
    repeats: int
    codecs: tuple[str, ...] | None = None   # None: every registered codec
    model: str | None = "resnet18"           # bundled model profiled for the per-op-type fits (None: skip)
    model_batch: int = 8
    model_image: int = 32
    profile_steps: int = 2
    profile_dir: str | None = None           # profile this artifact directory instead of exporting ``model``

    name: str = "custom"

    @classmethod
    def quick(cls) -> "CalibrationPlan":
        return cls(sizes=(256 * KiB, 4 * MiB), nonzero=(0.3, 0.9), repeats=3, model_batch=2, profile_steps=1,
                   name="quick")

    @classmethod
    def full(cls) -> "CalibrationPlan":
        # 256 KiB and 2 MiB: the activations of the bundled CNNs at batch 32, 64x64 (ResNet-18's are 0.25-2 MiB),
        # where a codec op's time per byte bends most (LinearFit.size_factor interpolates between sizes)
        return cls(sizes=(64 * KiB, 256 * KiB, 1 * MiB, 2 * MiB, 4 * MiB, 16 * MiB), nonzero=(0.1, 0.4, 0.7, 0.95),
                   repeats=4,
                   model_batch=16, model_image=64, profile_steps=2, name="default")


# --------------------------------------------------------------------------------------------- inputs
def _field(nbytes: int, rng: np.random.Generator) -> np.ndarray:
    """A zero-mean, spatially correlated float32 Gaussian field of ~``nbytes``, shape (planes, side, side)."""
    n = max(nbytes // 4, 256)
    hw = 32 * 32 if n >= 4 * 1024 else 16
    side = int(round(hw ** 0.5))
    nc = max(n // hw, 1)
    g = rng.standard_normal((nc, side, side + 1), dtype=np.float32)
    g = (g[:, :, 1:] + g[:, :, :-1]) * np.float32(0.7)     # neighbours correlate, as in feature maps
    return (g + np.roll(g, 1, axis=1)) * np.float32(0.7)


def _nchw(x: np.ndarray) -> np.ndarray:
    nc, side = x.shape[0], x.shape[1]
    return x.reshape(1, nc, side, side) if nc < 8 else x.reshape(nc // 8 if nc % 8 == 0 else nc, -1, side, side)


def pre_activation(nbytes: int, rng: np.random.Generator) -> np.ndarray:
    """A float32 NCHW tensor of ~``nbytes`` like a conv / BatchNorm output (what DPR's Casts convert): the
    zero-mean field, no zeros. The common ops are timed on it: ORT 1.19.2's scalar float32 -> float16
    Cast takes ~2x as long on this module's ReLU field (half exact zeros, interleaved: 12.0 ms at 4 MiB vs
    5.8-6.9 ms on dense, zero or constant-sign data), and ResNet-18's DPR Casts ran at the dense rate inside
    a step (0.2-0.48 ns/B vs 0.92 calibrated on the ReLU field). VGG-16's, nearly all on ReLU outputs, run
    slower than this fit: the Cast's cost depends on its data, which the op kind does not carry yet
    (NOTES-costarena.md)."""
    return _nchw(_field(nbytes, rng))


def activation(nbytes: int, nonzero: float, rng: np.random.Generator) -> np.ndarray:
    """A float32 NCHW tensor of ~``nbytes`` like a ReLU output: a smooth Gaussian field, zero below the
    (1 − nonzero) quantile."""
    g = _field(nbytes, rng)
    flat = g.reshape(-1)
    if nonzero >= 1.0:
        thr = flat.min() - np.float32(1.0)
    else:
        k = int((1.0 - nonzero) * (flat.size - 1))
        thr = np.partition(flat, k)[k]
    return _nchw(np.maximum(g - thr, np.float32(0.0)).astype(np.float32))


def codec_input(codec: str, nbytes: int, nonzero: float, rng: np.random.Generator) -> tuple[np.ndarray, dict[str, Any]]:
    """(input of ~``nbytes`` for ``codec``'s encoder with ``nonzero`` of it nonzero, the codec's params)."""
    from onnxcomp.custom_ops import get_codec

    c = get_codec(codec)
    params = dict(CODEC_PARAMS.get(codec, {}))
    if c.input_dtype == "bool":
        return rng.random(max(nbytes, 64)).reshape(1, -1) < nonzero, params
    if codec == "maxpool_index":
        from onnxcomp.custom_ops.maxpool_index import reference_indices

        # int64 indices of a 3x3/s2 pool: 8 bytes per pooled element, the pool input has 4x as many floats
        x = activation(nbytes * 2, nonzero, rng)
        return reference_indices(x, **params), {**params, "input_shape": list(x.shape)}
    return activation(nbytes, nonzero, rng), params


# --------------------------------------------------------------------------------------------- profiles
def read_profile(path: Path) -> list[dict[str, Any]]:
    """ORT profile events of kernels: [{"node", "op", "dur_s", "ts"}] in start order."""
    events = json.loads(Path(path).read_text())
    out = []
    for e in events:
        if e.get("cat") != "Node" or not str(e.get("name", "")).endswith("_kernel_time"):
            continue
        out.append({"node": e["name"][: -len("_kernel_time")], "op": e.get("args", {}).get("op_name", ""),
                    "dur_s": float(e["dur"]) * 1e-6, "ts": float(e["ts"])})
    out.sort(key=lambda e: e["ts"])
    return out


def _new_profiles(prefix_dir: Path, before: set[Path]) -> list[Path]:
    return sorted(set(prefix_dir.glob("*.json")) - before, key=lambda p: p.stat().st_mtime)


# --------------------------------------------------------------------------------------------- codec timing
def _codec_graph(codec: str, params: dict[str, Any], intermediate: bool = False) -> Any:
    """X → OnnxcompEncode_<codec> → payload → OnnxcompDecode_<codec> → Y, dynamic shapes. intermediate: Y is
    read by a Shape node and only its shape leaves the graph, so the decoder writes an intermediate (what
    ORT's arena allocates: in a step under ORT's defaults the decoder's output is reused memory, not pages
    faulted in anew)."""
    from onnx import TensorProto, helper

    from onnxcomp.custom_ops import contract, get_codec

    c = get_codec(codec)
    attr = contract.params_value({**params, "tensor": "calibration"})
    elem = {"float32": TensorProto.FLOAT, "int64": TensorProto.INT64, "bool": TensorProto.BOOL}
    payload = [f"p{i}" for i in range(len(c.payload_names))]
    enc = helper.make_node(contract.encode_op(codec), ["X"], [*payload, "anchor"], name="encode",
                           domain=contract.DOMAIN, params=attr)
    dec = helper.make_node(contract.decode_op(codec), [*payload, "trigger"], ["Y"], name="decode",
                           domain=contract.DOMAIN, params=attr)
    nodes, y = [enc, dec], helper.make_tensor_value_info("Y", elem[c.output_dtype], None)
    if intermediate:
        nodes.append(helper.make_node("Shape", ["Y"], ["Y_shape"], name="keep"))
        y = helper.make_tensor_value_info("Y_shape", TensorProto.INT64, None)
    graph = helper.make_graph(
        nodes, f"calibrate_{codec}",
        [helper.make_tensor_value_info("X", elem[c.input_dtype], None),
         helper.make_tensor_value_info("trigger", TensorProto.FLOAT, [1])],
        [y, helper.make_tensor_value_info("anchor", TensorProto.INT64, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid(contract.DOMAIN, contract.DOMAIN_VERSION)],
                             ir_version=8)


def time_codec(codec: str, sizes: tuple[int, ...], nonzero: tuple[float, ...], repeats: int,
               tmp: Path, seed: int = 0, arena: bool = False) -> list[dict[str, Any]]:
    """Samples {codec, direction, nbytes, nonzero, op_s, direct_s, bridge_bytes} for one codec: the op's time
    from ORT's profiler (one session per input, since params may carry the shape), the codec called
    directly (no bridge) timed around the call. arena: the ops as a step under ORT's arena runs them (arena
    and buffer reuse on, the decoder writing an intermediate, _codec_graph(intermediate=True)); no direct
    calls then (direct_s is None)."""
    import onnxruntime as ort

    from onnxcomp.custom_ops import get_codec
    from onnxcomp.runtime.session import session_options

    c = get_codec(codec)
    rng = np.random.default_rng(seed)
    trigger = np.zeros(1, np.float32)
    samples = []
    for i, size in enumerate(sizes):
        for j, nz in enumerate(nonzero):
            x, params = codec_input(codec, size, nz, rng)
            nz_real = float(np.count_nonzero(x)) / max(x.size, 1)
            prof_dir = tmp / f"prof_{codec}_{i}_{j}{'_arena' if arena else ''}"
            prof_dir.mkdir()
            # the arena without the memory pattern: a payload whose size depends on the data must not meet a
            # pattern planned for another size (the pattern changes where, not whether, memory is reused)
            so = session_options(profile=str(prof_dir / "codec"), arena=arena, mem_reuse=arena)
            so.log_severity_level = 3
            sess = ort.InferenceSession(_codec_graph(codec, params, intermediate=arena).SerializeToString(), so,
                                        providers=["CPUExecutionProvider"])
            payload = c.encode_cpu(x, **params)
            pbytes = c.payload_nbytes(payload)
            ybytes = c.decode_cpu(payload, **params).nbytes
            xs = cold_copies(x)
            sess.run(None, {"X": xs[-1], "trigger": trigger})  # first run: allocations settle
            direct = []
            for r in range(repeats):
                if not arena:
                    xr = xs[(2 * r) % len(xs)]
                    t0 = time.perf_counter()
                    payload = c.encode_cpu(xr, **params)
                    t1 = time.perf_counter()
                    c.decode_cpu(payload, **params)
                    t2 = time.perf_counter()
                    direct.append((t1 - t0, t2 - t1))
                sess.run(None, {"X": xs[(2 * r + 1) % len(xs)], "trigger": trigger})
            del xs
            sess.end_profiling()
            del sess
            events = read_profile(_new_profiles(prof_dir, set())[-1])
            enc = [e["dur_s"] for e in events if e["node"] == "encode"][1:]
            dec = [e["dur_s"] for e in events if e["node"] == "decode"][1:]
            # One sample per point: the mean of its repeats. Not the median: a step pays every stall of its
            # ops (a numba thread descheduled under load costs a 10-20 ms time slice), and medians of the
            # calibration runs hid exactly those, predicting in-graph codec time 5-10x low at load ~24.
            med = statistics.fmean
            # op_s_median: the stall-free time, for the shape of time against size (size_scale)
            samples.append({"codec": codec, "direction": "encode", "nbytes": int(x.nbytes), "nonzero": nz_real,
                            "op_s": med(enc), "op_s_median": statistics.median(enc),
                            "direct_s": med(d[0] for d in direct) if direct else None,
                            "bridge_bytes": int(x.nbytes) + pbytes, "repeats": len(enc)})
            samples.append({"codec": codec, "direction": "decode", "nbytes": ybytes, "nonzero": nz_real,
                            "op_s": med(dec), "op_s_median": statistics.median(dec),
                            "direct_s": med(d[1] for d in direct) if direct else None,
                            "bridge_bytes": pbytes + ybytes, "repeats": len(dec)})
    gc.collect()
    return samples


# --------------------------------------------------------------------------------------------- common ops
# Nodes of _ops_graph that are Casts, by the type pair (cost_model.op_kind) their samples are keyed by: ORT
# 1.19.2 converts float32 <-> float16 with a scalar loop (~1 ns/B) while unpacking a bool mask to float32 runs
# ~10x faster per byte; one "Cast" fit priced a pass's mask Casts 2x high (NOTES-costfit.md).
_CAST_KINDS = {"Cast": "Cast:float32->float16", "Cast_back": "Cast:float16->float32",
               "Cast_mask": "Cast:bool->float32", "Cast_mask_i64": "Cast:bool->int64",
               "Cast_i64": "Cast:int64->float32",
               "Cast_mixed": "Cast:float32->float16", "Cast_mixed_back": "Cast:float16->float32"}
_HALF_CAST_KINDS = {"Cast:float32->float16", "Cast:float16->float32"}  # cost_model.HALF_CASTS


def _ops_graph(intermediate: bool = False, half_casts: bool = False) -> Any:
    """One input X feeding the cheap ops graph passes insert, each node its own output (half_casts: only the
    float32 -> float16 -> float32 pair, timed on ReLU outputs).

    intermediate: each timed op's output is consumed by a ReduceSum ("sum_<output>") and only those scalars
    leave the graph. ORT allocates graph outputs outside its arena, so only ops writing intermediates run as
    they do inside a training step under ORT's arena (Mul at 1 MiB: 51 us as an intermediate vs 344 us as a
    graph output, same settings, NOTES-costfit.md); the reductions are not timed."""
    from onnx import TensorProto, helper

    nodes = [
        helper.make_node("Cast", ["X"], ["h"], to=TensorProto.FLOAT16, name="Cast"),
        helper.make_node("Cast", ["h"], ["f"], to=TensorProto.FLOAT, name="Cast_back"),
        helper.make_node("Clip", ["X", "lo", "hi"], ["clip"], name="Clip"),
        helper.make_node("Relu", ["X"], ["relu"], name="Relu"),
        helper.make_node("Mul", ["X", "X"], ["mul"], name="Mul"),
        helper.make_node("Add", ["X", "X"], ["add"], name="Add"),
        helper.make_node("Slice", ["X", "starts", "ends", "axes"], ["slice"], name="Slice"),
        helper.make_node("Concat", ["X", "X"], ["cat"], axis=2, name="Concat"),
        helper.make_node("Identity", ["X"], ["ident"], name="Identity"),
        helper.make_node("Greater", ["X", "lo"], ["gt"], name="Greater"),
        helper.make_node("Where", ["gt", "X", "lo"], ["where"], name="Where"),
        # the Casts passes insert besides DPR's: sign / ReLU masks unpacked to float32 or int64, int64 to float
        # ("maski" is also an output, else ORT folds the bool->int64->float32 chain into one Cast)
        helper.make_node("Cast", ["gt"], ["maskf"], to=TensorProto.FLOAT, name="Cast_mask"),
        helper.make_node("Cast", ["gt"], ["maski"], to=TensorProto.INT64, name="Cast_mask_i64"),
        helper.make_node("Cast", ["maski"], ["i2f"], to=TensorProto.FLOAT, name="Cast_i64"),
    ]
    outs = ["f", "clip", "relu", "mul", "add", "slice", "cat", "ident", "where", "maskf", "maski", "i2f"]
    if half_casts:
        # DPR's Casts alone, fed a ReLU output (zeros interleaved with normal values): ORT's float32 <-> float16
        # conversion branches on the value class, so its time depends on the data (cost_model.branch_mix). A
        # graph of its own: a second input in the graph above stopped the arena from reusing the 4-16 MiB
        # outputs (Mul 0.10 instead of 0.012 ns/B).
        nodes = [helper.make_node("Cast", ["X"], ["hz"], to=TensorProto.FLOAT16, name="Cast_mixed"),
                 helper.make_node("Cast", ["hz"], ["fz"], to=TensorProto.FLOAT, name="Cast_mixed_back")]
        outs = ["fz"]
    inits = [helper.make_tensor("lo", TensorProto.FLOAT, [], [0.0]), helper.make_tensor("hi", TensorProto.FLOAT, [], [6.0]),
             helper.make_tensor("starts", TensorProto.INT64, [1], [0]), helper.make_tensor("ends", TensorProto.INT64, [1], [1 << 30]),
             helper.make_tensor("axes", TensorProto.INT64, [1], [2])]
    if intermediate:
        nodes += [helper.make_node("ReduceSum", [o], [f"sum_{o}"], keepdims=0, name=f"sum_{o}") for o in outs]
        outs = [f"sum_{o}" for o in outs]
    elem = {"maski": TensorProto.INT64, "sum_maski": TensorProto.INT64}
    graph = helper.make_graph(nodes, "calibrate_ops", [helper.make_tensor_value_info("X", TensorProto.FLOAT, None)],
                              [helper.make_tensor_value_info(o, elem.get(o, TensorProto.FLOAT), None) for o in outs],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _ops_graph_traffic(b: int) -> dict[str, int]:
    """Bytes each timed node of _ops_graph reads + writes for a float32 input of ``b`` bytes."""
    n = b // 4  # elements; bool 1 B, float16 2 B, int64 8 B each
    return {"Cast": b + 2 * n, "Cast_back": 2 * n + b, "Clip": 2 * b, "Relu": 2 * b, "Mul": 3 * b, "Add": 3 * b,
            "Slice": 2 * b, "Concat": 4 * b, "Identity": 2 * b, "Greater": b + n, "Where": n + 2 * b,
            "Cast_mask": n + b, "Cast_mask_i64": n + 8 * n, "Cast_i64": 8 * n + b,
            "Cast_mixed": b + 2 * n, "Cast_mixed_back": 2 * n + b}


def relu_output(shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """A float32 tensor of ``shape`` like the zoo's ReLU outputs at init: i.i.d. N(0,1) through a ReLU, half
    exact zeros interleaved with normal values (branch_mix ~0.5; ResNet-18's / MobileNetV2's real ReLU outputs
    measured 0.40 / 0.49 at batch 32, 64x64). ``activation``'s smooth field keeps its zeros in runs (0.34 at
    50 %): not what those Casts read."""
    return np.maximum(rng.standard_normal(shape, dtype=np.float32), np.float32(0.0))


def time_common_ops(sizes: tuple[int, ...], repeats: int, tmp: Path, seed: int = 0,
                    arena: bool = False) -> list[dict[str, Any]]:
    """Samples {op, nbytes (read + written), macs, seconds} for the elementwise / data-movement ops of
    _ops_graph; a Cast's ``op`` is its type pair (``_CAST_KINDS``). arena: time them as a training step under
    ORT's defaults runs them: arena, memory pattern and reuse on, DEFAULT order, each op writing an
    intermediate (_ops_graph(intermediate=True)), so its output is reused arena memory, not pages faulted in
    anew."""
    samples = []
    for half_casts, make in ((False, pre_activation), (True, _relu_like)):
        graph = _ops_graph(intermediate=arena, half_casts=half_casts)
        name = ("prof_ops_arena" if arena else "prof_ops") + ("_half" if half_casts else "")
        samples += _time_ops_graph(graph, make, sizes, repeats, tmp / name, seed, arena)
    return samples


def _relu_like(nbytes: int, rng: np.random.Generator) -> np.ndarray:
    return relu_output(pre_activation(nbytes, rng).shape, rng)


def _time_ops_graph(graph: Any, make: Callable[[int, np.random.Generator], np.ndarray], sizes: tuple[int, ...],
                    repeats: int, prof_dir: Path, seed: int, arena: bool) -> list[dict[str, Any]]:
    """time_common_ops on one graph of _ops_graph, fed ``make(size, rng)`` at each size."""
    import onnxruntime as ort

    from onnxcomp.planner.cost_model import branch_mix
    from onnxcomp.runtime.session import session_options

    prof_dir.mkdir()
    so = session_options(profile=str(prof_dir / "ops"), arena=arena, mem_pattern=arena, mem_reuse=arena,
                         execution_order="default" if arena else "priority")
    so.log_severity_level = 3
    sess = ort.InferenceSession(graph.SerializeToString(), so, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(seed)
    out_bytes: list[dict[str, int]] = []
    mixes: list[float] = []
    for size in sizes:
        x = make(size, rng)
        xs = cold_copies(x)
        sess.run(None, {"X": xs[-1]})
        for r in range(repeats):
            sess.run(None, {"X": xs[r % len(xs)]})
        del xs
        out_bytes += [_ops_graph_traffic(x.nbytes)] * (1 + repeats)
        # the float32 <-> float16 Casts' data term: their input's branch_mix (float16(X) has X's value classes)
        mixes += [branch_mix(x)] * (1 + repeats)
    sess.end_profiling()
    del sess
    gc.collect()
    events = read_profile(_new_profiles(prof_dir, set())[-1])
    by_node: dict[str, list[float]] = {}
    ops: dict[str, str] = {}
    for e in events:
        if e["node"] not in out_bytes[0]:  # the reductions that keep the timed ops' outputs intermediate
            continue
        by_node.setdefault(e["node"], []).append(e["dur_s"])
        ops[e["node"]] = _CAST_KINDS.get(e["node"], e["op"])
    samples = []
    per_size = 1 + repeats
    for name, durs in by_node.items():
        for i in range(len(sizes)):
            runs = durs[i * per_size + 1:(i + 1) * per_size]  # the first run of a size settles allocations
            if runs:  # mean, as for the codecs: stalls are part of the expected time
                nbytes = out_bytes[i * per_size][name]
                mixed = nbytes * mixes[i * per_size] if ops[name] in _HALF_CAST_KINDS else 0.0
                samples.append({"op": ops[name], "nbytes": nbytes, "macs": 0.0, "mixed_bytes": mixed,
                                "seconds": statistics.fmean(runs)})
    return samples


# --------------------------------------------------------------------------------------------- training profile
def settled_warmup(settings: Any) -> int:
    """Steps to discard before timing a training session: 1, or 2 with ORT's arena or memory pattern on. With
    those the first step after one warm-up still allocates (MobileNetV2 under ORT's defaults: 0.565-0.590 s,
    then 0.42-0.44 s, NOTES-costall.md); a profile that averages it in comes out 14-20 % slow."""
    return 2 if getattr(settings, "arena", False) or getattr(settings, "mem_pattern", False) else 1


def profile_training_step(model_path_or_dir: str | os.PathLike, steps: int = 3, *, model: str | None = None,
                          settings: Any = None, warmup: int | None = None, timeout_s: float | None = 900) -> Any:
    """Per-node mean seconds of a training step from ORT's profiler, in a fresh child process (see
    cost_model.profile_node_seconds). warmup: steps run and discarded first; default
    settled_warmup(settings)."""
    from onnxcomp.planner.cost_model import NodeTimes
    from onnxcomp.load import resolve_training_run
    from onnxcomp.runtime.session import RuntimeSettings

    path = Path(model_path_or_dir)
    if path.is_file():
        artifact_dir, model = path.parent, path.name
    else:
        artifact_dir = path
    if steps < 1:
        raise OnnxcompError(f"profiling needs steps >= 1 (got {steps})")
    model_path = resolve_training_run(artifact_dir.resolve(), model)
    settings = settings or RuntimeSettings()
    warmup = settled_warmup(settings) if warmup is None else warmup
    cfg = {"artifact_dir": str(artifact_dir.resolve()), "model": str(model_path), "steps": steps, "warmup": warmup,
           "settings": settings.to_dict()}
    result = _run_child("profile", cfg, timeout_s, f"profiling {model_path}")
    return NodeTimes.from_dict(result)


def _run_child(kind: str, cfg: dict[str, Any], timeout_s: float | None, what: str) -> dict[str, Any]:
    from onnxcomp.runtime.measure import MALLOC_ENV, _describe_exit

    with tempfile.TemporaryDirectory(prefix="onnxcomp-calibrate-") as tmp:
        cfg = {**cfg, "tmp": tmp}
        cfg_path, out_path = Path(tmp) / "config.json", Path(tmp) / "result.json"
        cfg_path.write_text(json.dumps(cfg))
        cmd = [sys.executable, "-m", "onnxcomp.runtime.calibrate", kind, str(cfg_path), str(out_path)]
        try:
            proc = subprocess.run(cmd, env={**os.environ, **MALLOC_ENV}, capture_output=True, text=True,
                                  timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise OnnxcompError(f"{what} took longer than {timeout_s} s") from None
        payload = json.loads(out_path.read_text()) if out_path.exists() else None
    if payload is None:
        tail = proc.stderr[-1500:].strip()
        raise OnnxcompError(f"{what}: child process died ({_describe_exit(proc.returncode)}); stderr tail: "
                            f"{tail or '(empty)'}")
    if "error" in payload:
        raise OnnxcompError(f"{what} failed: {payload['error']}")
    return payload["result"]


def _profile_worker(cfg: dict[str, Any]) -> dict[str, Any]:
    import onnx
    import onnxruntime as ort

    from onnxcomp.planner.cost_model import node_features, node_weights
    from onnxcomp.runtime.data import graph_data, synthetic_batches
    from onnxcomp.runtime.session import RuntimeSettings
    from onnxcomp.runtime.training_session import open_artifact_session

    ort.set_default_logger_severity(3)
    tmp = Path(cfg["tmp"])
    prof_dir = tmp / "prof"
    prof_dir.mkdir()
    settings = RuntimeSettings.from_dict({**cfg["settings"], "profile": str(prof_dir / "train")})
    artifact_dir, model_path = Path(cfg["artifact_dir"]), Path(cfg["model"])
    try:
        from onnxcomp.custom_ops import cpu

        cpu.warm_up()  # kernels compiled / loaded before the first step, as `onnxcomp train` does
    except Exception:  # noqa: BLE001  (numpy backend or no numba: nothing to warm)
        pass
    session = open_artifact_session(artifact_dir, model_path, settings=settings, seed=0)
    spec = graph_data(artifact_dir, model_path, list(session.module.input_names()))
    gen = synthetic_batches(spec.image.shape, spec.classes, 0, spec.image.dtype)
    warmup, steps = int(cfg["warmup"]), int(cfg["steps"])
    batches = [next(gen) for _ in range(warmup + steps)]
    times = []
    for i, (x, y) in enumerate(batches):
        t0 = time.perf_counter()
        session.step(x, y)
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    session.close()
    gc.collect()
    graph = onnx.load(str(model_path), load_external_data=False)
    names = {n.name for n in graph.graph.node}
    per_node: dict[str, list[float]] = {}
    for prof in sorted(prof_dir.glob("*.json")):
        events = read_profile(prof)
        if not any(e["node"] in names for e in events):
            continue  # the optimizer's session
        for e in events:
            per_node.setdefault(e["node"], []).append(e["dur_s"])
    runs = warmup + steps
    mean = {n: statistics.fmean(d[warmup:]) if len(d) > warmup else statistics.fmean(d)
            for n, d in per_node.items() if len(d) % runs == 0 or len(d) >= runs}
    for name in names - set(mean):
        mean[name] = 0.0  # in the graph but never run: ORT folded it away (Shape, Identity of static shapes)
    features = node_features(graph)
    weights = node_weights(graph)
    step = statistics.median(times)
    return {"times": mean, "features": features, "weights": weights, "step_seconds": step,
            "overhead_seconds": max(step - sum(mean.values()), 0.0), "settings": cfg["settings"],
            "unnamed_profile_nodes": sorted(set(mean) - names)[:20]}  # nodes ORT created (fusions)


def _codecs_worker(cfg: dict[str, Any]) -> dict[str, Any]:
    import onnxruntime as ort

    ort.set_default_logger_severity(3)
    from onnxcomp.custom_ops import cpu

    cpu.warm_up()
    tmp = Path(cfg["tmp"])
    sizes, nonzero, repeats = tuple(cfg["sizes"]), tuple(cfg["nonzero"]), int(cfg["repeats"])
    samples = []
    arena = []
    for codec in cfg["codecs"]:
        samples += time_codec(codec, sizes, nonzero, repeats, tmp)
        arena += time_codec(codec, sizes, nonzero, repeats, tmp, arena=True)
    ops = time_common_ops(sizes, repeats, tmp) if cfg.get("common_ops", True) else []
    ops_arena = time_common_ops(sizes, repeats, tmp, arena=True) if cfg.get("common_ops", True) else []
    return {"codec_samples": samples, "codec_samples_arena": arena, "op_samples": ops,
            "op_samples_arena": ops_arena, "backend": cpu.backend(), "kernels": timed_kernels()}


def timed_kernels() -> dict[str, str]:
    """Per kernel module, the implementation this process's codec calls ran: ``cpu.backend_for``, and "numpy"
    where that is "aot" / "numba" but the kernels could not be loaded (``cpu.kernels`` is None)."""
    from onnxcomp.custom_ops import cpu
    from onnxcomp.custom_ops.cpu.aot import MODULES

    out = {}
    for module in sorted(MODULES):
        impl = cpu.backend_for(module)
        out[module] = impl if impl == "numpy" or cpu.kernels(module) is not None else "numpy"
    return out


def check_timed_kernels(timed: dict[str, str], backend: str) -> dict[str, str]:
    """``timed`` if it is what a training process runs under codec backend ``backend`` (cost_model.codec_kernels);
    else an error: those timings would price kernels no step runs (e.g. numba imported into the timing child
    under "auto", which switches dpr / sz / zfp to the JIT kernels)."""
    from onnxcomp.planner.cost_model import codec_kernels

    expected = codec_kernels(backend)
    diff = {m: (timed.get(m), impl) for m, impl in expected.items() if timed.get(m) != impl}
    if diff:
        said = ", ".join(f"{m} timed {t} (a step runs {e})" for m, (t, e) in sorted(diff.items()))
        raise OnnxcompError(f"calibration timed other codec kernels than a training run uses under backend "
                            f"{backend!r}: {said}; check ONNXCOMP_CODEC_BACKEND and that the AOT kernels build "
                            "(python -c 'from onnxcomp.custom_ops import cpu; cpu.warm_up()')")
    return timed


# --------------------------------------------------------------------------------------------- fitting
def fit_codecs(samples: list[dict[str, Any]]) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """Per codec and direction the op-time fit (bridge included); and the bridge's own per-call + per-byte
    fit (op time − direct call time against bytes crossing the bridge)."""
    from onnxcomp.planner.cost_model import codec_features, fit_linear

    codecs = fit_codec_ops(samples)
    for codec, dirs in codecs.items():
        for direction, fit in dirs.items():
            rows = [s for s in samples if s["codec"] == codec and s["direction"] == direction]
            x = np.array([codec_features(s["nbytes"], s["nonzero"]) for s in rows])
            kernel = fit_linear(x, np.array([max(s["direct_s"], 1e-7) for s in rows]))
            fit["kernel_only"] = kernel.to_dict()
    # Plain least squares here: op − direct is a small difference of two noisy timings, often negative for
    # small tensors; relative weights would let those near-zero rows decide the fit.
    paired = [s for s in samples if s["op_s"] > s["direct_s"]] or samples
    bridge_x = np.array([(1.0, float(s["bridge_bytes"])) for s in paired])
    bridge_y = np.array([max(s["op_s"] - s["direct_s"], 0.0) for s in paired])
    bridge = fit_linear(bridge_x, bridge_y, weights=np.ones(len(paired)))
    return codecs, {"per_call_s": bridge.coef[0], "per_byte_s": bridge.coef[1], "r2": bridge.r2,
                    "mean_rel_err": bridge.mean_rel_err, "samples": bridge.samples,
                    "note": "op time minus the codec called directly, against bytes crossing the bridge"}


def fit_codec_ops(samples: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per codec and direction the op-time fit (bridge included) with its size scale, as dicts."""
    from onnxcomp.planner.cost_model import LinearFit, codec_features, fit_linear

    codecs: dict[str, dict[str, Any]] = {}
    for codec in sorted({s["codec"] for s in samples}):
        for direction in ("encode", "decode"):
            rows = [s for s in samples if s["codec"] == codec and s["direction"] == direction]
            x = np.array([codec_features(s["nbytes"], s["nonzero"]) for s in rows])
            fit = fit_linear(x, np.array([s["op_s"] for s in rows]))
            fit = LinearFit(fit.coef, fit.r2, fit.mean_rel_err, fit.rae, fit.samples, size_scale(rows))
            codecs.setdefault(codec, {})[direction] = fit.to_dict()
    return codecs


def size_scale(rows: list[dict[str, Any]]) -> tuple[tuple[float, float], ...]:
    """How a codec op's time bends away from a line in bytes: per calibrated size (samples of one codec and
    direction grouped by ``nbytes``), Σ measured / Σ fitted seconds over its nonzero ratios, sorted by size
    (LinearFit.size_factor interpolates between them).

    Taken on the median of each point's repeats (``op_s_median``; the mean where a sample has none) against
    a line fitted to those medians: a scheduler stall under load (one 10 ms time slice in four repeats) is a
    level effect the mean-based fit carries, not a shape; measured on means, one stalled size read as 4x
    slower than its neighbours (bitmask decode at 256 KiB, load 4.6)."""
    from onnxcomp.planner.cost_model import codec_features, fit_linear

    if not rows:
        return ()
    y = np.array([s.get("op_s_median", s["op_s"]) for s in rows])
    x = np.array([codec_features(s["nbytes"], s["nonzero"]) for s in rows])
    fit = fit_linear(x, y)
    by_size: dict[int, list[float]] = {}
    for s, t in zip(rows, y):
        acc = by_size.setdefault(int(s["nbytes"]), [0.0, 0.0])
        acc[0] += float(t)
        acc[1] += max(fit.predict(codec_features(s["nbytes"], s["nonzero"])), 0.0)
    return tuple((float(b), m / p) for b, (m, p) in sorted(by_size.items()) if m > 0 and p > 0)


def fit_ops(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Per op kind fits (op type, or "Cast:<from>-><to>", cost_model.op_kind), plus: per op type timed only by
    kind, a fit pooled over its kinds (what a Cast of unknown types costs), and "*": a memory-bound fallback
    fitted on every sample without MACs."""
    from onnxcomp.planner.cost_model import fit_linear, fit_op_types

    # mixed_bytes: float32 <-> float16 Casts' data-dependent term (cost_model.branch_mix); 0 for other ops
    rows = [(s["op"], s["nbytes"], s["macs"], s.get("mixed_bytes", 0.0), s["seconds"]) for s in samples]
    fits = {op: f.to_dict() for op, f in fit_op_types(rows).items()}
    pooled = fit_op_types((op.split(":", 1)[0], *rest) for op, *rest in rows if ":" in op)
    fits.update({op: f.to_dict() for op, f in pooled.items() if op not in fits})
    plain = [s for s in samples if not s["macs"] and s["seconds"] > 0]  # 0: a node ORT folded away
    if plain:
        x = np.array([(1.0, float(s["nbytes"]), 0.0) for s in plain])
        generic = fit_linear(x[:, :2], np.array([s["seconds"] for s in plain]))
        fits["*"] = {**generic.to_dict(), "coef": [*generic.coef, 0.0]}
    else:
        fits["*"] = {"coef": [1e-5, 1e-9, 0.0], "samples": 0}
    return fits


# --------------------------------------------------------------------------------------------- driver
@dataclass
class CalibrationResult:
    data: dict[str, Any]
    path: Path | None = None
    seconds: float = 0.0
    log: list[str] = field(default_factory=list)


def calibrate(output: str | os.PathLike | None = None, *, plan: CalibrationPlan | None = None, quick: bool = False,
              progress: Callable[[str], None] | None = None, write: bool = True,
              replace: bool = False) -> CalibrationResult:
    """Time every codec (both directions) and the ORT ops on this machine, fit the cost model, and write it
    atomically as JSON to ``output`` (default: the user's cache, cost_model.user_cache_path())."""
    from onnxcomp.fileio import atomic_output, check_output_path
    from onnxcomp.planner.cost_model import FORMAT_VERSION, CostModel, codec_table, machine_info, user_cache_path

    say = progress or (lambda _msg: None)
    plan = plan or (CalibrationPlan.quick() if quick else CalibrationPlan.full())
    from onnxcomp.custom_ops import REGISTRY

    codecs = list(plan.codecs) if plan.codecs is not None else sorted(REGISTRY)
    unknown = [c for c in codecs if c not in REGISTRY]
    if unknown:
        raise OnnxcompError(f"unknown codec(s) {unknown} to calibrate; known: {', '.join(sorted(REGISTRY))}")
    if not plan.sizes or not plan.nonzero or plan.repeats < 1:
        raise OnnxcompError("calibration needs at least one size, one nonzero ratio and repeats >= 1")
    out_path = Path(output) if output is not None else user_cache_path()
    if write:
        if output is None:
            out_path.parent.mkdir(parents=True, exist_ok=True)
        # the cache is ours to refresh; a user-chosen file is replaced only when asked
        check_output_path(out_path, replace=replace or output is None, how="pass --force")
    t_start = time.perf_counter()
    load_before = os.getloadavg()
    say(f"timing {len(codecs)} codec(s) at {len(plan.sizes)} sizes x {len(plan.nonzero)} nonzero ratios x "
        f"{plan.repeats} repeats")
    raw = _run_child("codecs", {"codecs": codecs, "sizes": list(plan.sizes), "nonzero": list(plan.nonzero),
                                "repeats": plan.repeats}, None, "timing the codec ops")
    # the codec fits are of the kernels the child ran: record which, refuse a set no training run uses
    kernels = check_timed_kernels(raw["kernels"], raw["backend"])
    codec_fits, bridge = fit_codecs(raw["codec_samples"])
    op_samples = list(raw["op_samples"])
    arena_samples = list(raw.get("op_samples_arena", []))
    step_overhead = {"coef": [0.0, 0.0], "samples": 0}
    profiled = None
    if plan.model or plan.profile_dir:
        what = plan.profile_dir or f"{plan.model} (batch {plan.model_batch}, {plan.model_image}x{plan.model_image})"
        say(f"profiling a training step of {what} (measure's settings, then ORT's defaults)")
        # Profiled twice: under measure's settings (the op table) and under ORT's defaults (arena, memory
        # pattern, reuse, DEFAULT order: the arena table), so a profile taken with the arena is compared with
        # fits of the model's own ops taken the same way (NodeTimes.slowdown).
        node_times, arena_times, param_bytes = _profile_bundled(plan)
        op_samples += _profile_samples(node_times)
        arena_samples += _profile_samples(arena_times)
        if param_bytes:
            step_overhead = {"coef": [0.0, node_times.overhead_seconds / param_bytes], "samples": 1}
        profiled = {"model": plan.profile_dir or plan.model,
                    "batch": None if plan.profile_dir else plan.model_batch,
                    "image": None if plan.profile_dir else plan.model_image,
                    "step_seconds": node_times.step_seconds, "overhead_seconds": node_times.overhead_seconds,
                    "nodes": len(node_times), "arena_step_seconds": arena_times.step_seconds}
    ops = fit_ops(op_samples)
    data = {
        "format": FORMAT_VERSION,
        "created": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "mode": plan.name,
        "machine": {**machine_info(), "codec_backend": raw["backend"], "codec_kernels": kernels,
                    "codec_table": codec_table(kernels)},
        "onnxruntime": _ort_version(),
        "malloc_mmap_threshold": "131072",
        "load_average": [round(v, 2) for v in load_before],
        "plan": {"sizes": list(plan.sizes), "nonzero": list(plan.nonzero), "repeats": plan.repeats,
                 "codecs": codecs, "cold_bytes": COLD_BYTES},
        "profiled_model": profiled,
        "codecs": codec_fits,
        "ops": ops,
        # the same ops and the profiled model's, as a step under ORT's arena runs them (CostModel.op_table)
        **({"ops_arena": fit_ops(arena_samples)} if arena_samples else {}),
        **({"codecs_arena": fit_codec_ops(raw["codec_samples_arena"])} if raw.get("codec_samples_arena") else {}),
        "step_overhead": step_overhead,
        "pyop_overhead": bridge,
        # the timings behind the fits, so a fit can be redone or checked without re-timing
        "samples": {"codecs": raw["codec_samples"], "codecs_arena": raw.get("codec_samples_arena", []),
                    "ops": op_samples, "ops_arena": arena_samples},
    }
    CostModel.from_dict(data)  # what load() will read back must parse
    elapsed = time.perf_counter() - t_start
    data["calibration_seconds"] = round(elapsed, 1)
    result = CalibrationResult(data, seconds=elapsed)
    if write:
        with atomic_output(out_path) as tmp:
            Path(tmp).write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        result.path = out_path
    return result


def _ort_version() -> str:
    try:
        from importlib.metadata import version

        return version("onnxruntime-training-cpu")
    except Exception:  # noqa: BLE001
        return "unknown"


def ort_default_settings() -> Any:
    """RuntimeSettings of ORT's own defaults: arena, memory pattern and buffer reuse on, DEFAULT order."""
    from onnxcomp.runtime.session import RuntimeSettings

    return RuntimeSettings(arena=True, mem_pattern=True, mem_reuse=True, execution_order="default")


def _profile_samples(node_times: Any) -> list[dict[str, Any]]:
    """Op-fit samples {op (op_kind), nbytes, macs, seconds} of a profiled training step's nodes."""
    return [{"op": op, "nbytes": b, "macs": m, "seconds": node_times[name]}
            for name, (op, b, m, *_) in node_times.features.items() if name in node_times]


def _profile_bundled(plan: CalibrationPlan) -> tuple[Any, Any, int]:
    """(profile under measure's settings, profile under ORT's defaults, parameter bytes) of the plan's model."""
    from onnxcomp.models.artifacts import generate_artifacts
    from onnxcomp.planner.cost_model import _param_bytes

    import onnx

    def both(art: str | Path) -> tuple[Any, Any, int]:
        times = profile_training_step(art, steps=plan.profile_steps)
        arena = profile_training_step(art, steps=plan.profile_steps, settings=ort_default_settings())
        params = _param_bytes(onnx.load(str(Path(art) / "training_model.onnx"), load_external_data=False))
        return times, arena, params

    if plan.profile_dir:
        return both(plan.profile_dir)
    with tempfile.TemporaryDirectory(prefix="onnxcomp-calibrate-model-") as tmp:
        out = Path(tmp) / "artifacts"
        generate_artifacts(plan.model, plan.model_batch, plan.model_image, 10, out, smoke_test=False)
        return both(out)


def summary_rows(data: dict[str, Any]) -> list[tuple[str, str, float, float, float]]:
    """(codec, direction, MB/s at 4 MiB half nonzero, R², mean relative error) per fit, for the CLI table."""
    from onnxcomp.planner.cost_model import LinearFit, codec_features

    rows = []
    for codec, dirs in sorted(data["codecs"].items()):
        for direction, fit in dirs.items():
            f = LinearFit.from_dict(fit)
            t = f.predict(codec_features(4 * MiB, 0.5))
            rows.append((codec, direction, 4 * MiB / t / 1e6 if t > 0 else float("inf"), f.r2, f.mean_rel_err))
    return rows


def main(argv: list[str]) -> int:
    from ._measure_worker import run_child

    kind, cfg_path, out_path = argv
    return run_child({"profile": _profile_worker, "codecs": _codecs_worker}[kind], cfg_path, out_path)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
