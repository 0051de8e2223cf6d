"""Measured cost model: how long a codec op, an ORT op and a whole training step take on this machine.

CSWAP+ (§5.4) predicts (de)compression time by linear regression on tensor size and compression ratio; we
fit, per codec and direction, ``time = a + b·bytes + c·bytes·nonzero_ratio`` on timings of the real PyOps
(so the onnxruntime-extensions bridge's copies are inside the fit), and per ORT op type
``time = a + b·bytes + c·MACs`` (bytes read and written) from ORT's own profiler. ``onnxcomp calibrate`` (runtime/calibrate.py)
measures and fits; the result lives in the user's cache directory, and a copy made on the development
machine ships in the package as the fallback.

A step's predicted time (``predict_step_seconds``) is: each node's measured time when the baseline graph was
profiled (``profile_node_seconds``), else the op model (refitted on that profile when there is one, so a
row block of a conv costs what that model's convs cost per MAC), plus the codec ops' fitted times, plus
the step's overhead outside the graph (optimizer step, input copies) measured with the profile.
"""
from __future__ import annotations

import json
import os
import platform
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import onnx

FORMAT_VERSION = 1
SHIPPED_DEFAULTS = Path(__file__).with_name("cost_model_defaults.json")
# Codec tables (which compiled kernels a calibration timed; ``codec_table``) and the defaults shipped for each.
# "aot": numba.pycc extensions, single-threaded (zfp's calls split over threads), what ``auto`` runs since
# docs/notes/aotlossy.md; "numba": the parallel JIT kernels (ONNXCOMP_CODEC_BACKEND=numba); "numpy": no compiled
# kernel. No table is shipped for "numpy": the AOT one is used with a warning (NumPy codecs are 4-9x slower).
SHIPPED_TABLES = {"aot": SHIPPED_DEFAULTS, "numba": Path(__file__).with_name("cost_model_defaults.numba.json")}
DEFAULT_TABLE = "aot"
DIRECTIONS = ("encode", "decode")


# ------------------------------------------------------------------------------------------------ fitting
@dataclass(frozen=True)
class LinearFit:
    """``coef · features`` with its quality on the samples it was fitted on.

    r2: coefficient of determination; mean_rel_err: mean |pred − y| / y; rae: CSWAP+'s relative absolute
    error Σ|pred − y| / Σ|y − mean(y)|. size_scale: ((bytes, measured / fitted), ...) at the calibrated sizes,
    see ``size_factor`` (codec fits only; empty: none)."""

    coef: tuple[float, ...]
    r2: float = float("nan")
    mean_rel_err: float = float("nan")
    rae: float = float("nan")
    samples: int = 0
    size_scale: tuple[tuple[float, float], ...] = ()

    def predict(self, features: Iterable[float]) -> float:
        return float(sum(c * f for c, f in zip(self.coef, features)))

    def size_factor(self, nbytes: float) -> float:
        """The fit's measured / fitted time at ``nbytes``, interpolated in log(bytes) between the calibrated
        sizes (the end values beyond them); 1.0 without ``size_scale``. A codec PyOp's time is not linear in
        bytes: per byte it costs 1.5-2x more at ResNet-18's 0.25-2 MiB activations than at 16 MiB (bridge
        copies, kernel launch), so one line through 64 KiB..16 MiB priced those ops 1.3-1.9x low inside a
        step, which read as an in-step slowdown (NOTES-costarena.md)."""
        if not self.size_scale or nbytes <= 0:
            return 1.0
        xs = np.log([max(b, 1.0) for b, _ in self.size_scale])
        return float(np.interp(np.log(float(nbytes)), xs, [r for _, r in self.size_scale]))

    def to_dict(self) -> dict[str, Any]:
        d = {"coef": list(self.coef), "r2": self.r2, "mean_rel_err": self.mean_rel_err, "rae": self.rae,
             "samples": self.samples}
        if self.size_scale:
            d["size_scale"] = [list(p) for p in self.size_scale]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "LinearFit":
        return cls(tuple(float(c) for c in d["coef"]), float(d.get("r2", "nan")),
                   float(d.get("mean_rel_err", "nan")), float(d.get("rae", "nan")), int(d.get("samples", 0)),
                   tuple((float(b), float(r)) for b, r in d.get("size_scale", ())))


def fit_linear(x: np.ndarray, y: np.ndarray, weights: np.ndarray | None = None) -> LinearFit:
    """Least squares ``y ≈ x @ coef`` with non-negative coefficients (a time never shrinks with more bytes).

    Rows are weighted by 1/sqrt(y) by default: between plain least squares (CSWAP+'s; the largest tensors
    decide the fit, small ones get large relative errors) and 1/y (relative error; the large tensors that
    dominate a step's time get no more say than tiny ones). numpy's lstsq first; if it gives a negative
    coefficient, scipy's NNLS on the same weighted system."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if x.ndim != 2 or len(x) != len(y) or len(y) == 0:
        raise ValueError(f"fit_linear needs an (n, k) matrix and n targets, got {x.shape} and {y.shape}")
    w = 1.0 / np.sqrt(np.maximum(y, 1e-12)) if weights is None else np.asarray(weights, dtype=np.float64)
    xw, yw = x * w[:, None], y * w
    coef, *_ = np.linalg.lstsq(xw, yw, rcond=None)
    if (coef < 0).any():
        from scipy.optimize import nnls

        scale = np.maximum(np.abs(xw).max(axis=0), 1e-300)  # column scaling: bytes and MACs span 1e9
        coef, _ = nnls(xw / scale, yw)
        coef = coef / scale
    pred = x @ coef
    resid = y - pred
    ss_tot = float(((y - y.mean()) ** 2).sum())
    abs_dev = float(np.abs(y - y.mean()).sum())
    return LinearFit(
        coef=tuple(float(c) for c in coef),
        r2=1.0 - float((resid ** 2).sum()) / ss_tot if ss_tot > 0 else float("nan"),
        mean_rel_err=float(np.mean(np.abs(resid) / np.maximum(np.abs(y), 1e-12))),
        rae=float(np.abs(resid).sum()) / abs_dev if abs_dev > 0 else float("nan"),
        samples=int(len(y)),
    )


def codec_features(nbytes: float, nonzero_ratio: float) -> tuple[float, float, float]:
    """Regressors of the codec model: 1, bytes, bytes·nonzero_ratio."""
    return 1.0, float(nbytes), float(nbytes) * float(nonzero_ratio)


def op_features(nbytes: float, macs: float, mixed_bytes: float = 0.0) -> tuple[float, float, float, float]:
    """Regressors of the ORT op model: 1, bytes the node reads and writes, multiply-accumulates, and the bytes
    moved on elements whose value class flips (``branch_mix``; float32 <-> float16 Casts only, 0 otherwise).
    Fits saved with three coefficients ignore the fourth regressor (predict zips)."""
    return 1.0, float(nbytes), float(macs), float(mixed_bytes)


# fp16's smallest normal value. ORT 1.19.2 converts float32 <-> float16 with MLAS's scalar routine, which takes
# one branch for |x| below it (zeros, subnormals) and another for normal values: its time depends on how the
# two classes interleave. Measured (castdata.py in `docs/notes/costquiet.md`, 4 MiB, quiet machine): dense N(0,1)
# 1.37 ns/element, all zeros 0.99, i.i.d. zeros at 5 / 25 / 50 % 1.79 / 3.42 / 5.36, 50 % zeros in runs of 4
# / 32 / 256 elements 3.35 / 1.47 / 1.23, 50 % tiny non-zero values (1e-6) 5.32, random signs 1.37; the
# float16 -> float32 direction the same way (3.3 -> 7.5 ns). Time ≈ a + b·bytes + c·bytes·mix, mix as below.
HALF_MIN_NORMAL = 2.0 ** -14
HALF_CASTS = frozenset({"Cast:float32->float16", "Cast:float16->float32"})


def branch_mix(x: np.ndarray) -> float:
    """Fraction of ``x``'s elements on which a float32 <-> float16 conversion's branch (below fp16's smallest
    normal vs not) is expected to be mispredicted: min(fraction of class changes between neighbours, fraction
    small, fraction normal). i.i.d. zeros at fraction z give min(z, 1 - z) (the predictor guesses the majority
    class); zeros in runs give about the change rate (it guesses "same as the last one")."""
    small = np.abs(np.asarray(x).reshape(-1)) < HALF_MIN_NORMAL
    if small.size < 2:
        return 0.0
    z = float(np.count_nonzero(small)) / small.size
    changes = float(np.count_nonzero(small[1:] != small[:-1])) / (small.size - 1)
    return min(changes, z, 1.0 - z)


def expected_branch_mix(nonzero_ratio: float) -> float:
    """branch_mix of a tensor with ``nonzero_ratio`` of its elements nonzero, its zeros placed independently:
    min(nz, 1 - nz). What the zoo's activations at init look like (batch 32, 64x64, N(0,1) input): ReLU
    outputs measured 0.40 (ResNet-18), 0.49 (MobileNetV2 ReLU6), 0.31 (VGG-16) against 0.5 for this; conv /
    BatchNorm outputs 0.00-0.006 (dense: 0)."""
    nz = min(max(float(nonzero_ratio), 0.0), 1.0)
    return min(nz, 1.0 - nz)


def local_op_features(nbytes: float, macs: float, weight_pass_bytes: float = 0.0,
                      gemm_calls: float = 0.0) -> tuple[float, float, float, float, float]:
    """Regressors of the op model refitted on a profile (NodeTimes.local_op_fits): op_features plus, for
    convolutions, the bytes of weight streamed once per image (and dW accumulated once per image) and the
    number of per-image, per-group GEMM calls (``node_conv_work``). Zero for every other op, so the columns
    drop out of their fits."""
    return 1.0, float(nbytes), float(macs), float(weight_pass_bytes), float(gemm_calls)


# ------------------------------------------------------------------------------------------------ machine
def machine_info() -> dict[str, Any]:
    """What a calibration is only valid for: core count, CPU model, codec backend."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    kernels = codec_kernels()
    return {"cores": os.cpu_count() or 1, "cpu": cpu, "codec_backend": current_codec_backend(),
            "codec_kernels": kernels, "codec_table": codec_table(kernels)}


def current_codec_backend() -> str:
    """The CPU codec backend setting of this process (``ONNXCOMP_CODEC_BACKEND``, else "auto" with numba)."""
    from onnxcomp.custom_ops import cpu

    return cpu.backend()


def codec_kernels(setting: str | None = None) -> dict[str, str]:
    """Per kernel module (custom_ops/cpu/aot.py's SOURCES: dpr, sz, zfp, sparse, maxpool, bits, intervalmask), the
    implementation ("aot", "numba" or "numpy") a training process runs under the codec backend ``setting``
    (default: this process's). Under "auto" that is the AOT copy for ``cpu.AOT_BY_DEFAULT``: a training process
    does not import numba (docs/notes/aotlossy.md); ``cpu.backend_for`` would say "numba" in a process that
    happens to have imported it (a planner's, a test's), which is not what the step will run."""
    from onnxcomp.custom_ops import cpu
    from onnxcomp.custom_ops.cpu.aot import MODULES

    name = setting or cpu.backend()
    if name not in cpu.CHOICES:
        raise ValueError(f"unknown codec backend {name!r}; choose one of {', '.join(cpu.CHOICES)}")
    compiled = cpu.numba_available()
    out = {}
    for module in sorted(MODULES):
        if not compiled or name == "numpy":
            out[module] = "numpy"
        elif name == "auto":
            out[module] = "aot" if module in cpu.AOT_BY_DEFAULT else "numpy"
        else:  # "aot" / "numba": every module
            out[module] = name
    return out


def codec_table(kernels: dict[str, str]) -> str:
    """The codec table a set of kernels (``codec_kernels``) is priced by: "numba" if any module runs numba's
    JIT kernels, else "aot" if any runs an AOT copy, else "numpy"."""
    impls = set(kernels.values())
    return "numba" if "numba" in impls else "aot" if "aot" in impls else "numpy"


def recorded_codec_table(meta: dict[str, Any]) -> str | None:
    """The codec table a calibration file was made for: its ``machine.codec_table``; for a file from before
    that was recorded, inferred from its backend setting (every such "auto" / "numba" calibration timed numba's
    JIT kernels for dpr / sz / zfp: the AOT default came later); None if unknown."""
    machine = meta.get("machine") or {}
    if machine.get("codec_table"):
        return str(machine["codec_table"])
    return {"auto": "numba", "numba": "numba", "numpy": "numpy", "aot": "aot"}.get(machine.get("codec_backend"))


def active_codec_table() -> str:
    """The codec table of this process's codec backend setting (``codec_table(codec_kernels())``)."""
    return codec_table(codec_kernels())


def user_cache_path(table: str | None = None) -> Path:
    """The user's calibration for codec table ``table`` (default: the active one):
    ``$XDG_CACHE_HOME/onnxcomp/cost_model.json`` (default ``~/.cache/onnxcomp/``) for the default table
    ("aot"), ``cost_model.<table>.json`` for another, so calibrations of both backends can coexist."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    table = table or active_codec_table()
    name = "cost_model.json" if table == DEFAULT_TABLE else f"cost_model.{table}.json"
    return Path(base) / "onnxcomp" / name


def shipped_defaults_path(table: str | None = None) -> Path:
    """The shipped defaults for codec table ``table`` (default: the active one); the default table's for a
    table none was shipped for (``SHIPPED_TABLES``)."""
    return SHIPPED_TABLES.get(table or active_codec_table(), SHIPPED_DEFAULTS)


# ------------------------------------------------------------------------------------------------ model
@dataclass
class CostModel:
    """Fitted costs; build with ``CostModel.load`` (or ``from_dict`` on calibrate's output).

    codecs[codec][direction]: LinearFit over codec_features, seconds of the whole PyOp (bridge included).
    ops[op_type]: LinearFit over op_features; ops["*"] is the fallback for op types never profiled.
    ops keys are op kinds (op_kind: the op type, or "Cast:<from>-><to>"; a bare "Cast" is pooled over pairs).
    ops_arena[kind]: the same, timed as a step under ORT's defaults runs them (the cheap ops writing
    intermediates under the arena: outputs not page-faulted anew, 3-10x faster; the profiled model's own
    ops under ORT's defaults); prices the new nodes of a profile taken with the arena, and that profile's
    slowdown is taken against it (op_table, NodeTimes.slowdown). A kind it lacks falls back to ``ops``.
    codecs_arena: the codec ops timed the same way (arena on, the decoder writing an intermediate): a
    decoder's output under the arena is reused memory, not pages faulted in anew (codec_seconds(arena=)).
    step_overhead: LinearFit over (1, parameter bytes): a step's time outside the training graph's nodes
    (optimizer step, feeds), used when no profile of the graph is given.
    codec_instep: per codec and direction, the factor between a codec op's time inside a measured training
    step and its calibrated time (``{"scale": {codec: {direction: s}}, "scale_arena": {...}, ...provenance}``;
    ``scale_arena`` for steps under ORT's arena, falling back to ``scale``; a codec not listed: 1.0). Fitted by
    least squares against measured (not profiled: the profiler itself slows codec-heavy steps 8-11 %) step
    times of benchmark rounds, ``planner/instep_fit.py`` / ``tools/fit_codec_instep.py``; calibrate times each
    PyOp alone, so a calibration without one takes the shipped defaults' (`docs/notes/costfit2.md`)."""

    codecs: dict[str, dict[str, LinearFit]]
    ops: dict[str, LinearFit]
    step_overhead: LinearFit = field(default_factory=lambda: LinearFit((0.0, 0.0)))
    pyop_overhead: dict[str, float] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    source: str = "unsaved"
    ops_arena: dict[str, LinearFit] = field(default_factory=dict)
    codecs_arena: dict[str, dict[str, LinearFit]] = field(default_factory=dict)
    codec_instep: dict[str, Any] = field(default_factory=dict)

    def instep_scale(self, codec: str, direction: str, arena: bool = False) -> float:
        """The in-step factor on ``codec``'s calibrated ``direction`` time (1.0 where none was fitted)."""
        tables = (self.codec_instep.get("scale_arena"), self.codec_instep.get("scale")) if arena else \
            (self.codec_instep.get("scale"),)
        for table in tables:
            value = (table or {}).get(codec, {}).get(direction)
            if value is not None:
                return float(value)
        return 1.0

    # -- loading ------------------------------------------------------------------------------------------
    @classmethod
    def load(cls, path: str | Path | None = None) -> "CostModel":
        """``path`` if given (errors raise), else the user's calibration for the active codec table
        (``user_cache_path``; a broken one, or one timed with other codec kernels, warns in one line and is
        skipped), else the defaults shipped for that table (``shipped_defaults_path``). Warns once when the
        model was made on another machine or for another codec table than the current one (e.g. no shipped
        table for NumPy codecs)."""
        if path is not None:
            model = cls._read(Path(path), "calibrated")
        else:
            model = None
            table = active_codec_table()
            cache = user_cache_path(table)
            if cache.exists():
                try:
                    model = cls._read(cache, "calibrated")
                except (OSError, ValueError, KeyError, TypeError) as exc:
                    warnings.warn(f"ignoring the cost model calibration {cache} ({_short(exc)}); using shipped "
                                  "defaults; run `onnxcomp calibrate` to redo it", CostModelWarning, stacklevel=2)
                if model is not None and recorded_codec_table(model.meta) != table:
                    warnings.warn(f"ignoring the cost model calibration {cache}: it timed the "
                                  f"{recorded_codec_table(model.meta)} codec kernels, this process runs {table} "
                                  f"ones; using shipped defaults; run `onnxcomp calibrate` to redo it",
                                  CostModelWarning, stacklevel=2)
                    model = None
            if model is None:
                model = cls._read(shipped_defaults_path(table), "shipped defaults")
        model._warn_if_foreign()
        return model

    @property
    def codec_table(self) -> str | None:
        """The codec kernels this model's codec fits timed ("aot", "numba", "numpy"; ``recorded_codec_table``)."""
        return recorded_codec_table(self.meta)

    @classmethod
    def _read(cls, path: Path, kind: str) -> "CostModel":
        data = json.loads(path.read_text())
        model = cls.from_dict(data)
        model.source = "shipped defaults" if kind == "shipped defaults" else \
            f"calibrated {path} {model.meta.get('created', '?')}"
        return model

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "CostModel":
        if not isinstance(data, dict) or data.get("format") != FORMAT_VERSION:
            raise ValueError(f"not an onnxcomp cost model of format {FORMAT_VERSION}")
        codecs = {name: {d: LinearFit.from_dict(fit) for d, fit in dirs.items()}
                  for name, dirs in data["codecs"].items()}
        ops = {t: LinearFit.from_dict(fit) for t, fit in data["ops"].items()}
        if "*" not in ops:
            raise ValueError("cost model has no fallback op fit '*'")
        for name, dirs in codecs.items():
            missing = set(DIRECTIONS) - set(dirs)
            if missing:
                raise ValueError(f"codec {name} lacks {sorted(missing)} fits")
        step = LinearFit.from_dict(data["step_overhead"]) if "step_overhead" in data else LinearFit((0.0, 0.0))
        meta = {k: v for k, v in data.items()
                if k not in ("codecs", "codecs_arena", "ops", "ops_arena", "step_overhead", "pyop_overhead",
                             "samples", "codec_instep")}
        arena = {t: LinearFit.from_dict(fit) for t, fit in data.get("ops_arena", {}).items()}
        codecs_arena = {name: {d: LinearFit.from_dict(fit) for d, fit in dirs.items()}
                        for name, dirs in data.get("codecs_arena", {}).items()
                        if set(DIRECTIONS) <= set(dirs)}
        instep = data["codec_instep"] if "codec_instep" in data else _shipped_codec_instep()
        _check_codec_instep(instep)
        return cls(codecs, ops, step, dict(data.get("pyop_overhead", {})), meta, ops_arena=arena,
                   codecs_arena=codecs_arena, codec_instep=dict(instep))

    def to_dict(self) -> dict[str, Any]:
        return {**self.meta, "format": FORMAT_VERSION,
                "codecs": {n: {d: f.to_dict() for d, f in dirs.items()} for n, dirs in self.codecs.items()},
                "ops": {t: f.to_dict() for t, f in self.ops.items()},
                **({"ops_arena": {t: f.to_dict() for t, f in self.ops_arena.items()}} if self.ops_arena else {}),
                **({"codecs_arena": {n: {d: f.to_dict() for d, f in dirs.items()}
                                     for n, dirs in self.codecs_arena.items()}} if self.codecs_arena else {}),
                "step_overhead": self.step_overhead.to_dict(), "pyop_overhead": self.pyop_overhead,
                # always written: a file without the entry inherits the shipped factors (from_dict)
                "codec_instep": self.codec_instep}

    def op_table(self, node_seconds: Any = None) -> dict[str, LinearFit]:
        """The op fits that price nodes a profile cannot time: ``ops``, with ``ops_arena``'s fits over them
        when ``node_seconds`` is a profile taken under ORT's arena (a node there writes into reused memory)."""
        if self.ops_arena and isinstance(node_seconds, NodeTimes) and node_seconds.settings.get("arena"):
            return {**self.ops, **self.ops_arena}
        return self.ops

    def _warn_if_foreign(self) -> None:
        # the codec table, not the backend setting: "auto" timed numba's JIT kernels before the AOT default
        recorded = {**(self.meta.get("machine") or {}), "codec_table": self.codec_table}
        now = machine_info()
        diffs = [f"{k} {recorded.get(k)!r} (now {now[k]!r})" for k in ("cores", "cpu", "codec_table")
                 if recorded.get(k) is not None and recorded.get(k) != now[k]]
        if diffs:
            warnings.warn(f"cost model ({self.source}) was calibrated with {', '.join(diffs)}; predictions may be "
                          "off: run `onnxcomp calibrate`", CostModelWarning, stacklevel=3)

    # -- predictions --------------------------------------------------------------------------------------
    def codec_seconds(self, codec: str, direction: str, nbytes: int, nonzero_ratio: float = 1.0,
                      arena: bool = False, in_step: bool = True) -> float:
        """Seconds of one ``OnnxcompEncode_/Decode_<codec>`` op, PyOp bridge included. nbytes: the encoder's
        input bytes / the decoder's output bytes; nonzero_ratio: fraction of nonzero elements (ReLU
        outputs ~0.5); arena: in a session with ORT's arena (the codecs_arena fits where calibrated);
        in_step: times the codec's in-step factor (``instep_scale``), False for the calibrated time alone."""
        if direction not in DIRECTIONS:
            raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
        fits = (self.codecs_arena.get(codec) if arena else None) or self.codecs.get(codec)
        if fits is None:
            fits = self._codec_fallback()
        nz = min(max(float(nonzero_ratio), 0.0), 1.0)
        fit = fits[direction]
        seconds = max(fit.predict(codec_features(nbytes, nz)), 0.0) * fit.size_factor(nbytes)
        return seconds * self.instep_scale(codec, direction, arena) if in_step else seconds

    def _codec_fallback(self) -> dict[str, LinearFit]:
        """An uncalibrated codec (added after the calibration): the slowest calibrated one, per byte."""
        if not self.codecs:
            raise KeyError("cost model has no codec fits; run `onnxcomp calibrate`")
        return {d: max((dirs[d] for dirs in self.codecs.values()),
                       key=lambda f: f.predict(codec_features(1 << 23, 1.0))) for d in DIRECTIONS}

    def op_seconds(self, node: onnx.NodeProto, out_bytes: int, node_seconds: dict[str, float] | None = None,
                   macs: float = 0.0, in_bytes: int = 0, conv_work: tuple[float, float] = (0.0, 0.0),
                   kind: str | None = None, mixed_bytes: float = 0.0) -> float:
        """Seconds of one ORT node: its measured time when ``node_seconds`` (a profile) has its name, else the
        per-op-type model (a profile carrying features refits it on that graph first; see NodeTimes).
        out_bytes, in_bytes: bytes of the node's outputs and inputs (the model's size feature is their sum: give
        in_bytes too, or ops that read more than they write, like accumulators and gradients, come out low);
        macs: its multiply-accumulates (``node_macs``), 0 if unknown; conv_work: ``node_conv_work`` (weight-pass
        bytes, GEMM calls) of a convolution, used with a profile; kind: ``op_kind`` of the node (default its op
        type): what the profile's times and refitted models are keyed by; mixed_bytes: bytes moved × the
        input's branch_mix (``cast_mixed_bytes``), for float32 <-> float16 Casts, whose time depends on it."""
        traffic = node_traffic(node, int(in_bytes), int(out_bytes))
        kind = kind or node.op_type
        if node_seconds is not None and node.name in node_seconds and _same_op(kind, node.name, node_seconds):
            return float(node_seconds[node.name])
        local = node_seconds.local_op_fits() if isinstance(node_seconds, NodeTimes) else {}
        here = local_op_features(traffic, macs, *conv_work)
        original = _original_name(node.name, node_seconds) if node_seconds else None
        if original is not None:  # a clone (recomputation, chunking): its original's time, scaled
            t = float(node_seconds[original])
            feats = getattr(node_seconds, "features", {}).get(original)
            if feats is not None and feats[0] == kind:
                scaled = _scale_by_fit(local.get(kind), t, local_op_features(*feats[1:]), here)
                if scaled is not None:
                    return scaled
                if feats[1] > 0 and traffic > 0:
                    t *= traffic / feats[1]
            return t
        if isinstance(node_seconds, NodeTimes):
            sibling = node_seconds.same_weights(node)
            if sibling is not None and macs > 0:  # a row block / chunk of a profiled conv
                t, feats = float(node_seconds[sibling]), node_seconds.features[sibling]
                # its profiled time scaled by the refitted model (MACs, weight passes, calls), else per MAC
                scaled = _scale_by_fit(local.get(node.op_type), t, local_op_features(*feats[1:]), here)
                return scaled if scaled is not None else t * macs / feats[2]
            if kind in local:
                return max(local[kind].predict(here), 0.0)
        table = self.op_table(node_seconds)
        fit = table.get(kind) or table.get(node.op_type) or table["*"]
        # The calibrated fit, at the speed the profile saw its own nodes of this kind (NodeTimes.kind_slowdown;
        # 1.0 without a profile, or for a kind the profile has no node of).
        feats = op_features(traffic, macs, mixed_bytes)
        if not isinstance(node_seconds, NodeTimes):
            return max(fit.predict(feats), 0.0)
        # No node runs faster than the profile's tiny ones: ORT's dispatch per node (views, shape arithmetic).
        return max(fit.predict(feats) * node_seconds.kind_slowdown(self, kind, node.op_type),
                   node_seconds.dispatch_seconds())

    def overhead_seconds(self, param_bytes: int) -> float:
        """A step's time outside the training graph (optimizer, feeds) when the graph was not profiled."""
        return max(self.step_overhead.predict((1.0, float(param_bytes))), 0.0)


def _check_codec_instep(instep: Any) -> None:
    if not isinstance(instep, dict):
        raise ValueError("codec_instep must be an object")
    for table in ("scale", "scale_arena"):
        for codec, dirs in (instep.get(table) or {}).items():
            if not isinstance(dirs, dict) or set(dirs) - set(DIRECTIONS):
                raise ValueError(f"codec_instep {table}[{codec!r}] must map {DIRECTIONS} to factors")
            if any(not isinstance(v, (int, float)) or not v > 0 for v in dirs.values()):
                raise ValueError(f"codec_instep {table}[{codec!r}] factors must be > 0")


_SHIPPED_INSTEP: dict[str, Any] | None = None


def _shipped_codec_instep() -> dict[str, Any]:
    """The shipped defaults' codec_instep: a user calibration has none (calibrate times each PyOp alone, not
    inside a measured step), so it inherits these factors. Stopgap until calibrate measures steps itself:
    the factors are ratios to the development machine's codec fits. {} when the shipped file has none."""
    global _SHIPPED_INSTEP
    if _SHIPPED_INSTEP is None:
        try:
            _SHIPPED_INSTEP = dict(json.loads(SHIPPED_DEFAULTS.read_text()).get("codec_instep") or {})
        except (OSError, ValueError):
            _SHIPPED_INSTEP = {}
    return dict(_SHIPPED_INSTEP)


def _same_op(kind: str, name: str, node_seconds: dict[str, float]) -> bool:
    """Whether the profiled node ``name`` ran the same op (``op_kind``). A pass may keep a node's name and
    change what it runs (ReluGrad on a sign mask rewritten as Mul, passes/mask_grad.py): that node is new to
    the profile, not the profiled one. True when the profile records no op types (a plain dict)."""
    feats = getattr(node_seconds, "features", {}).get(name)
    return feats is None or feats[0] == kind


def _scale_by_fit(fit: LinearFit | None, seconds: float, profiled: tuple[float, ...],
                  new: tuple[float, ...]) -> float | None:
    """A profiled node's ``seconds`` carried over to a variant of it (a clone, a row block, a batch chunk) by
    the ratio of the fitted times: the profile's own time stays the anchor, the fit only says how much the
    variant's work differs. None when there is no usable fit (fewer than 3 nodes of the type, or a fit that
    predicts nothing for the profiled node)."""
    if fit is None:
        return None
    base = fit.predict(profiled)
    if base <= 0:
        return None
    return seconds * max(fit.predict(new), 0.0) / base


# Passes name a node they clone "<original>__<what>" (then "_<k>" when taken): recompute, chunking.
def _original_name(name: str, node_seconds: dict[str, float]) -> str | None:
    """The profiled node ``name`` was cloned from, by stripping pass suffixes ("__recompute", "__recompute_1")."""
    for _ in range(4):
        if "__" not in name:
            return None
        name = name.rsplit("__", 1)[0]
        if name in node_seconds:
            return name
    return None


class CostModelWarning(UserWarning):
    """A calibration that was skipped or made elsewhere."""


def _short(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".splitlines()[0]
    return text[:160]


# ------------------------------------------------------------------------------------------------ profiles
class NodeTimes(dict):
    """``{node name: mean seconds}`` of one profiled training step, plus what the profile saw of each node
    (``features[name] = (op_type, bytes read + written, macs, weight-pass bytes, GEMM calls)``, see
    node_features) and the step's time outside the graph's nodes (``overhead_seconds``: optimizer step, feeds;
    ``step_seconds``: the timed whole step)."""

    def __init__(self, times: dict[str, float] | None = None, *, features: dict[str, tuple] | None = None,
                 step_seconds: float = 0.0, overhead_seconds: float = 0.0, settings: dict[str, Any] | None = None,
                 weights: dict[str, str] | None = None):
        super().__init__(times or {})
        self.features = {k: _pad_features(v) for k, v in (features or {}).items()}
        self.weights = dict(weights or {})  # node name -> the parameter it convolves / multiplies with
        self.step_seconds = float(step_seconds)
        self.overhead_seconds = float(overhead_seconds)
        self.settings = dict(settings or {})
        self._local: dict[str, LinearFit] | None = None
        self._by_weight: dict[tuple[str, str], str] | None = None
        self._slowdown: tuple[int, float] | None = None
        self._kinds: tuple[int, dict[str, float]] | None = None

    def dispatch_seconds(self) -> float:
        """Median profiled time of the nodes that move < 64 KiB and do no MACs: what any node costs ORT to run
        (0.0 when the profile has none)."""
        tiny = [self[n] for n, (_, nbytes, macs, *_) in self.features.items()
                if nbytes < _TINY_BYTES and not macs and self.get(n, 0.0) > 0]
        return float(np.median(tiny)) if tiny else 0.0

    def slowdown(self, cost: "CostModel") -> float:
        """How much slower than ``cost``'s calibration this profile ran the memory-bound ops both know: per
        op type, Σ profiled / Σ fitted seconds over its nodes without MACs that move ≥ 1 MiB and whose op
        type has a calibrated fit; the median over those op types (kind_slowdowns). A summary of the profile's
        speed (load, allocator) against the calibration run's; new nodes are priced per kind
        (kind_slowdown), codec ops at their calibrated time (predict_step). The median over types, not one
        pooled ratio: the pooled one is the heaviest type's (ResNet-18's ReluGrads, 60 % of the seconds, ran
        at 0.70× their fit under ORT's arena while Add / Sum / BatchNorm ran at 0.16-0.32×; the new Mul /
        Slice / Cast nodes a lossy policy adds ran at 0.17-0.28×, NOTES-costfit.md). 1.0 when no node
        qualifies; clamped to [0.2, 50]."""
        if self._slowdown is not None and self._slowdown[0] == id(cost):
            return self._slowdown[1]
        ratios = list(self.kind_slowdowns(cost).values())
        factor = min(max(float(np.median(ratios)), 0.2), 50.0) if ratios else 1.0
        self._slowdown = (id(cost), factor)
        return factor

    def kind_slowdowns(self, cost: "CostModel") -> dict[str, float]:
        """Per op kind of this profile, Σ profiled / Σ fitted seconds over its nodes without MACs that move
        ≥ 1 MiB and whose kind has a calibrated fit (the ratios ``slowdown`` takes the median of)."""
        if self._kinds is not None and self._kinds[0] == id(cost):
            return self._kinds[1]
        measured: dict[str, float] = {}
        fitted: dict[str, float] = {}
        # Against the fits the new nodes are priced by: a profile taken under ORT's arena is compared with the
        # arena table only (types timed under measure's settings would read as 3-5x "fast", NOTES-costfit.md).
        table = cost.ops_arena if cost.op_table(self) is not cost.ops else cost.ops
        for name, (op, nbytes, macs, *_) in self.features.items():
            fit = table.get(op)
            if fit is None or macs or nbytes < _SLOWDOWN_MIN_BYTES or op in VIEW_OPS or self.get(name, 0.0) <= 0:
                continue
            measured[op] = measured.get(op, 0.0) + self[name]
            fitted[op] = fitted.get(op, 0.0) + max(fit.predict(op_features(nbytes, 0.0)), 0.0)
        kinds = {op: min(max(measured[op] / fitted[op], 0.2), 50.0) for op in measured
                 if measured[op] > 0 and fitted[op] > 0}
        self._kinds = (id(cost), kinds)
        return kinds

    def kind_slowdown(self, cost: "CostModel", kind: str, op_type: str | None = None) -> float:
        """The speed, relative to ``cost``'s calibration, at which a new node of ``kind`` (op_kind; else its
        ``op_type``) is priced: the ratio this profile measured on its own nodes of that kind
        (kind_slowdowns), else 1.0, the calibration's speed. Not the profile's overall ``slowdown``: the
        in-step ratio of ORT's multi-threaded kernels (Conv, BatchNorm, ReluGrad, Add) to their fits rises
        with load (1.3-2.2 at load 3-4), while the kinds a policy adds that the baseline lacks (float32 <->
        float16 Casts, single-threaded) ran at their calibrated speed whatever that ratio was (raw predicted /
        profiled 1.1-1.5 for Casts at ratios 0.87-1.70; `docs/notes/costgap.md`), so scaling them by it over-priced
        every lossy graph under load."""
        kinds = self.kind_slowdowns(cost)
        if kind in kinds:
            return kinds[kind]
        return kinds.get(op_type, 1.0) if op_type is not None else 1.0

    def local_op_fits(self) -> dict[str, LinearFit]:
        """Per op type, the op model refitted on this profile (op types with ≥ 3 profiled nodes), over
        local_op_features: a convolution's time also grows with the weight it streams per image and its GEMM
        calls, which a row block or a batch chunk does not shrink the way it shrinks MACs."""
        if self._local is None:
            self._local = fit_op_types((op, *rest, self[name]) for name, (op, *rest) in self.features.items()
                                       if name in self)
        return self._local

    def same_weights(self, node: onnx.NodeProto) -> str | None:
        """The profiled node of ``node``'s op type that uses the same weight (a row block's original conv)."""
        weight = weight_input(node)
        if weight is None:
            return None
        if self._by_weight is None:
            self._by_weight = {(self.features[n][0], w): n for n, w in self.weights.items()
                               if n in self and n in self.features and self.features[n][2] > 0}
        return self._by_weight.get((node.op_type, weight))

    def to_dict(self) -> dict[str, Any]:
        return {"times": dict(self), "features": {k: list(v) for k, v in self.features.items()},
                "weights": self.weights,
                "step_seconds": self.step_seconds, "overhead_seconds": self.overhead_seconds,
                "settings": self.settings}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "NodeTimes":
        return cls(d["times"], features=d["features"],
                   step_seconds=d.get("step_seconds", 0.0), overhead_seconds=d.get("overhead_seconds", 0.0),
                   settings=d.get("settings"), weights=d.get("weights"))


def fit_op_types(samples: Iterable[tuple], min_samples: int = 3) -> dict[str, LinearFit]:
    """Per op type, ``time ≈ a + Σ coef·feature`` from (op_type, feature…, seconds) samples: (op, bytes read +
    written, macs, seconds) gives the op_features model, (op, bytes, macs, weight-pass bytes, GEMM calls,
    seconds) the local_op_features one. A column constant over a type's samples is left out (coefficient
    0; the intercept carries it)."""
    by_type: dict[str, list[tuple[float, ...]]] = {}
    for op, *rest in samples:
        if rest[-1] > 0:
            by_type.setdefault(op, []).append(tuple(float(v) for v in rest))
    fits: dict[str, LinearFit] = {}
    for op, rows in by_type.items():
        if len(rows) < min_samples:
            continue
        arr = np.asarray(rows)
        x = np.column_stack([np.ones(len(arr)), arr[:, :-1]])
        used = [0] + [j for j in range(1, x.shape[1]) if np.ptp(x[:, j]) > 0]
        fit = fit_linear(x[:, used], arr[:, -1])
        coef = [0.0] * x.shape[1]
        for j, c in zip(used, fit.coef):
            coef[j] = c
        fits[op] = LinearFit(tuple(coef), fit.r2, fit.mean_rel_err, fit.rae, fit.samples)
    return fits


def profile_node_seconds(model_path_or_dir: str | os.PathLike, steps: int = 3, *, model: str | None = None,
                         settings: Any = None, warmup: int | None = None) -> NodeTimes:
    """Per-node mean seconds of a training step from ORT's own profiler (``SessionOptions.enable_profiling``),
    in a fresh process (measure's allocator setting). model_path_or_dir: an artifact directory (graph
    ``training_model.onnx`` or ``model``) or a graph file inside one. settings: RuntimeSettings (default:
    measure's). warmup: steps run and discarded first (default: 2 with ORT's arena or memory pattern on, whose
    second step still allocates, else 1; runtime.calibrate.settled_warmup). Returns a NodeTimes (a dict, with
    features and the step overhead)."""
    from onnxcomp.runtime.calibrate import profile_training_step

    return profile_training_step(model_path_or_dir, steps=steps, model=model, settings=settings, warmup=warmup)


# ------------------------------------------------------------------------------------------------ graphs
# ORT's kernels for these alias their output to their input (a view): no bytes move, only the node's
# dispatch costs. Slice / Gather read only the part they write (a decoder trigger reads one element of dY).
VIEW_OPS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"})
_READS_OUTPUT_ONLY = frozenset({"Slice", "Gather"})
_SLOWDOWN_MIN_BYTES = 1 << 20
_TINY_BYTES = 64 * 1024


def node_traffic(node: onnx.NodeProto, in_bytes: int, out_bytes: int) -> int:
    """The bytes a node moves, the op model's size feature: inputs read + outputs written, except views
    (nothing moves) and slices (they read only what they write)."""
    if node.op_type in VIEW_OPS:
        return 0
    if node.op_type in _READS_OUTPUT_ONLY:
        return 2 * out_bytes
    return in_bytes + out_bytes


_MAC_OPS = {"Conv", "ConvGrad", "Gemm", "MatMul", "ConvTranspose", "FusedConv", "FusedGemm", "FusedMatMul"}
_CONV_OPS = frozenset({"Conv", "FusedConv", "ConvTranspose", "ConvGrad"})


def node_macs(node: onnx.NodeProto, shapes: dict[str, tuple[int, ...] | None]) -> float:
    """Multiply-accumulates of a Conv / ConvGrad / Gemm / MatMul node from static shapes (0 otherwise or when a
    shape is unknown). ConvGrad computes dX and dW: twice its forward conv's MACs (one when dX is not asked)."""
    if node.op_type not in _MAC_OPS:
        return 0.0

    def shape(i: int, outputs: bool = False) -> tuple[int, ...] | None:
        names = node.output if outputs else node.input
        return shapes.get(names[i]) if len(names) > i and names[i] else None

    if node.op_type in ("Conv", "FusedConv", "ConvTranspose"):
        y, w = shape(0, True), shape(1)
        if y is None or w is None:
            return 0.0
        if node.op_type == "ConvTranspose":
            x = shape(0)
            return float(np.prod(x, dtype=np.float64) * np.prod(w[1:], dtype=np.float64)) if x else 0.0
        return float(np.prod(y, dtype=np.float64) * np.prod(w[1:], dtype=np.float64))
    if node.op_type == "ConvGrad":
        dy, w = shape(0), shape(2)
        if dy is None or w is None:
            return 0.0
        one = float(np.prod(dy, dtype=np.float64) * np.prod(w[1:], dtype=np.float64))
        wants_dx = len(node.output) > 0 and bool(node.output[0])
        return one * (2.0 if wants_dx else 1.0)
    a, y = shape(0), shape(0, True)
    if a is None or y is None or not a:
        return 0.0
    trans_a = next((at.i for at in node.attribute if at.name == "transA"), 0)
    k = a[-2] if (node.op_type == "Gemm" and trans_a and len(a) >= 2) else a[-1]
    return float(np.prod(y, dtype=np.float64) * k)


def weight_input(node: onnx.NodeProto) -> str | None:
    """The weight a Conv / ConvGrad / Gemm / MatMul node reads (None for other ops)."""
    slot = {"Conv": 1, "FusedConv": 1, "ConvTranspose": 1, "ConvGrad": 2, "Gemm": 1, "MatMul": 1}.get(node.op_type)
    return node.input[slot] if slot is not None and len(node.input) > slot and node.input[slot] else None


def node_weights(model: onnx.ModelProto) -> dict[str, str]:
    """Per named node, the weight it reads (weight_input), for the nodes that read one."""
    return {n.name: w for n in model.graph.node if n.name and (w := weight_input(n)) is not None}


def node_conv_work(node: onnx.NodeProto, shapes: dict[str, tuple[int, ...] | None],
                   nbytes: dict[str, int]) -> tuple[float, float]:
    """(weight-pass bytes, GEMM calls) of a Conv / ConvGrad / ConvTranspose node; (0, 0) for other ops.

    ORT's CPU convolution kernels run one im2col + GEMM per image and group: ConvGrad accumulates the whole
    dW once per image and (for dX) reads the whole W once per image, Conv streams W once per image. Their
    time therefore has a term in batch × weight bytes and one per GEMM call (batch × groups) besides the
    MACs. A row block keeps the batch and the weight and only shrinks the MACs, so these are what a block
    of a late, weight-heavy layer costs on top of its share of MACs (ResNet-18 at 64×64: layer4's ConvGrad
    takes 2.5× layer1's at the same MACs)."""
    if node.op_type not in _CONV_OPS:
        return 0.0, 0.0
    x_slot, w_slot = (1, 2) if node.op_type == "ConvGrad" else (0, 1)
    if len(node.input) <= w_slot:
        return 0.0, 0.0
    x, w_bytes = shapes.get(node.input[x_slot]), nbytes.get(node.input[w_slot], 0)
    if not x or not w_bytes:
        return 0.0, 0.0
    group = next((a.i for a in node.attribute if a.name == "group"), 1) or 1
    return float(x[0]) * float(w_bytes), float(x[0]) * float(group)


def op_kind(node: onnx.NodeProto, dtypes: dict[str, str]) -> str:
    """What a node's time is keyed by in a profile: its op type, except Cast, whose cost depends on the type
    pair ("Cast:bool->float32" unpacks a mask at ~0.1 ns/B; "Cast:float32->float16", DPR's encoder, is a
    conversion ORT 1.19.2 runs ~10× slower per byte). A profile's cheap mask Casts must not price a DPR Cast
    (MobileNetV2 dpr-fp16 under ORT's defaults was predicted 27 % fast from them, NOTES-costall.md)."""
    if node.op_type != "Cast" or not node.input:
        return node.op_type
    dst = dtypes.get(node.output[0], "?") if node.output else "?"
    return f"Cast:{dtypes.get(node.input[0], '?')}->{dst}"


def node_features(model: onnx.ModelProto) -> dict[str, tuple[str, int, float, float, float]]:
    """Per named node: (op type, bytes it reads and writes, MACs, weight-pass bytes, GEMM calls) from static
    shapes: the op model's inputs (the last two are node_conv_work's; 0 for ops other than convolutions)."""
    shapes, nbytes, dtypes = _tensor_shapes(model)
    return {node.name: (op_kind(node, dtypes), node_traffic(node, sum(nbytes.get(t, 0) for t in node.input if t),
                                                   sum(nbytes.get(t, 0) for t in node.output if t)),
                        node_macs(node, shapes), *node_conv_work(node, shapes, nbytes))
            for node in model.graph.node if node.name}


def _pad_features(v: Iterable[Any]) -> tuple[str, int, float, float, float]:
    """A stored feature tuple as node_features makes it now (profiles saved before the conv-work columns
    have three entries: those read 0)."""
    v = list(v)
    v += [0.0] * (5 - len(v))
    return str(v[0]), int(v[1]), float(v[2]), float(v[3]), float(v[4])


def _tensor_shapes(model: onnx.ModelProto) -> tuple[dict[str, tuple[int, ...] | None], dict[str, int], dict[str, str]]:
    """(shape, bytes, dtype name) of every tensor onnxcomp's analysis can resolve; codec payloads get no
    bytes."""
    from onnxcomp.analysis.shapes import resolve_shapes

    types = resolve_shapes(model)
    shapes = {n: t.shape for n, t in types.items()}
    nbytes = {n: int(t.nbytes) for n, t in types.items() if t.nbytes is not None}
    dtypes = {n: str(t.dtype) for n, t in types.items() if t.dtype is not None}
    return shapes, nbytes, dtypes


_RELU_LIKE = {"Relu", "LeakyRelu", "Clip", "MaxPool"}


@dataclass
class StepPrediction:
    """A predicted step, itemised: seconds per node (ORT ops and codec ops) and outside the graph."""

    total: float
    ort_ops: float
    codec_ops: float
    overhead: float
    per_node: dict[str, float]
    codec_nodes: dict[str, tuple[str, str, int, float]]  # name -> (codec, direction, nbytes, nonzero ratio)


def predict_step(model: onnx.ModelProto, cost: CostModel, node_seconds: dict[str, float] | None = None,
                 nonzero_ratios: dict[str, float] | None = None) -> StepPrediction:
    """The itemised prediction behind predict_step_seconds. nonzero_ratios: measured fraction of nonzeros per
    stashed tensor name (default: 0.5 for outputs of ReLU-like ops, 1.0 otherwise)."""
    from onnxcomp.custom_ops.contract import codec_op, parse_params

    shapes, nbytes, dtypes = _tensor_shapes(model)
    producers = {o: n for n in model.graph.node for o in n.output if o}
    consts = constant_scalars(model)
    # Encoder input bytes by stash name, for decoders whose output shape inference could not reach.
    enc_bytes: dict[str, int] = {}
    per_node: dict[str, float] = {}
    codec_nodes: dict[str, tuple[str, str, int, float]] = {}
    ort_total = codec_total = 0.0
    nonzero_ratios = nonzero_ratios or {}
    # Codec ops are never in the baseline's profile: their calibrated times, not scaled by the profile's
    # slowdown. That ratio is ORT's own multi-threaded kernels' (it rises with load, 1.3-2.2 at load 3-4); the
    # PyOps' in-step time does not follow it (dpr_fp8 / zfp at 0.75-1.16x their calibration at ratios
    # 1.3-1.7, over-priced 1.3-1.7x when scaled; `docs/notes/costgap.md`).
    arena = isinstance(node_seconds, NodeTimes) and bool(node_seconds.settings.get("arena"))
    for i, node in enumerate(model.graph.node):
        key = node.name or f"{node.op_type}#{i}"
        op = codec_op(node.domain, node.op_type)
        if op is not None:
            params = parse_params(next((a.s for a in node.attribute if a.name == "params"), b""))
            stash = str(params.get("tensor") or params.get("key") or (node.input[0] if node.input else ""))
            if op.role == "encode":
                size = nbytes.get(node.input[0], 0)
                enc_bytes[stash] = size
                src = node.input[0]
            else:
                size = nbytes.get(node.output[0]) or enc_bytes.get(stash, 0)
                src = stash
            nz = nonzero_ratios.get(stash, nonzero_ratios.get(src, _default_nonzero(src, producers)))
            t = cost.codec_seconds(op.codec, op.role, size, nz, arena=arena)
            codec_nodes[key] = (op.codec, op.role, size, nz)
            codec_total += t
        else:
            out_b = sum(nbytes.get(o, 0) for o in node.output if o)
            in_b = sum(nbytes.get(i, 0) for i in node.input if i)
            kind = op_kind(node, dtypes)
            mixed = 0.0
            if kind in HALF_CASTS:
                nz = nonzero_ratios.get(node.input[0], estimate_nonzero(node.input[0], producers, consts))
                mixed = node_traffic(node, in_b, out_b) * expected_branch_mix(nz)
            t = cost.op_seconds(node, out_b, node_seconds, macs=node_macs(node, shapes), in_bytes=in_b,
                                conv_work=node_conv_work(node, shapes, nbytes), kind=kind, mixed_bytes=mixed)
            ort_total += t
        per_node[key] = t
    if isinstance(node_seconds, NodeTimes):
        overhead = node_seconds.overhead_seconds
    else:
        overhead = cost.overhead_seconds(_param_bytes(model))
    return StepPrediction(ort_total + codec_total + overhead, ort_total, codec_total, overhead, per_node, codec_nodes)


def _default_nonzero(tensor: str, producers: dict[str, onnx.NodeProto]) -> float:
    node = producers.get(tensor)
    seen = 0
    while node is not None and node.op_type in ("Reshape", "Identity", "Flatten") and seen < 8:
        node, seen = producers.get(node.input[0]), seen + 1
    return 0.5 if node is not None and node.op_type in _RELU_LIKE else 1.0


# Ops that pass their input's zeros through unchanged (views, dtype conversions) for estimate_nonzero.
_ZERO_PRESERVING = {"Reshape", "Identity", "Flatten", "Squeeze", "Unsqueeze", "Cast", "Transpose"}


def constant_scalars(model: onnx.ModelProto) -> dict[str, float]:
    """Value of every one-element constant (initializer or Constant node) by tensor name: Clip's bounds."""
    from onnx import numpy_helper

    out: dict[str, float] = {}
    for t in model.graph.initializer:
        if int(np.prod(t.dims, dtype=np.int64)) == 1:
            out[t.name] = float(numpy_helper.to_array(t).reshape(-1)[0])
    for n in model.graph.node:
        if n.op_type == "Constant" and n.output:
            a = next((a for a in n.attribute if a.name == "value"), None)
            if a is not None and int(np.prod(a.t.dims, dtype=np.int64)) == 1:
                out[n.output[0]] = float(numpy_helper.to_array(a.t).reshape(-1)[0])
    return out


def estimate_nonzero(tensor: str, producers: dict[str, onnx.NodeProto], consts: dict[str, float],
                     depth: int = 0) -> float:
    """Fraction of ``tensor``'s elements expected nonzero, from the ops that made it: 0.5 for a ReLU or a Clip
    whose lower bound is >= 0 (half of a zero-mean pre-activation), a MaxPool of such a tensor 1 - (1 - nz)^k
    over its k-element window (a window is zero only if all of it is: ResNet-18's 3x3 stem pool of a ReLU
    output measured 0.4 % zeros), through views, Casts and range clamps (DPR's Clip to ±65504) to the
    producer; 1.0 for anything else (conv, BatchNorm, LeakyRelu outputs: dense). A planning estimate for
    float32 <-> float16 Cast prices (expected_branch_mix), where the stash's data is not known."""
    node = producers.get(tensor)
    if node is None or depth > 16:
        return 1.0
    op = node.op_type
    if op in _ZERO_PRESERVING and node.input:
        return estimate_nonzero(node.input[0], producers, consts, depth + 1)
    if op == "Relu":
        return 0.5
    if op == "Clip":
        lo = consts.get(node.input[1]) if len(node.input) > 1 and node.input[1] else None
        if lo is None and len(node.input) == 1:  # opset < 11: bounds are attributes
            lo = next((a.f for a in node.attribute if a.name == "min"), None)
        if lo is not None and lo < 0:            # a range clamp keeps zeros and signs where they were
            return estimate_nonzero(node.input[0], producers, consts, depth + 1)
        return 0.5
    if op == "MaxPool" and node.input:
        kernel = next((list(a.ints) for a in node.attribute if a.name == "kernel_shape"), [])
        k = int(np.prod(kernel)) if kernel else 1
        return 1.0 - (1.0 - estimate_nonzero(node.input[0], producers, consts, depth + 1)) ** k
    return 1.0


def _param_bytes(model: onnx.ModelProto) -> int:
    """Bytes of the trainable parameters: the graph inputs that have a ``<name>_grad`` output or accumulator."""
    grads = {o[: -len("_grad")] for n in model.graph.node for o in n.output if o.endswith("_grad")}
    total = 0
    for vi in model.graph.input:
        if vi.name in grads:
            dims = [d.dim_value for d in vi.type.tensor_type.shape.dim]
            if all(d > 0 for d in dims):
                total += int(np.prod(dims, dtype=np.int64)) * 4
    return total


def predict_step_seconds(model: onnx.ModelProto, cost: CostModel, node_seconds: dict[str, float] | None = None) -> float:
    """Predicted seconds of one training step of ``model`` (a training graph, transformed or not): node times
    from ``node_seconds`` (profile_node_seconds of the baseline graph, same settings) where a node kept its
    name, the op model for new nodes (recomputed clones, row blocks, chunked regions), the codec model for
    onnxcomp's encode/decode ops, plus the step's time outside the graph."""
    return predict_step(model, cost, node_seconds).total
