"""Policies: a named, ordered list of pass steps that declares which user options it takes.

An option is handed to every step whose constructor takes a keyword of that name, unless the step fixes
it itself (``fixed``, e.g. dpr-fp8's format). An option the policy does not declare is an error, never
silently dropped: ``eb`` means nothing to a lossless policy.
"""
from __future__ import annotations

import inspect
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import OnnxcompError
from .base import OnnxcompPass

# Every option a policy can take: name → (type, what it does). The CLI maps these names to its flags.
OPTIONS: dict[str, tuple[type | tuple[type, ...], str]] = {
    "min_bytes": (int, "leave stashes smaller than this many bytes alone"),
    "overrides": (dict, "per-pattern encoding choices (pattern → encoding or 'none')"),
    "eb": ((float, int), "error bound the error-bounded codec starts from"),
    "adaptive": (bool, "let the run-time controller retune the error bound"),
    "dpr_format": (str, "reduced precision for stashes not held otherwise"),
    "native": (bool, "hold fp16 (Clip + Cast) and ReLU sign masks (MatMulInteger / Gather bit packing) with "
                     "standard ONNX ops instead of the dpr_fp16 / bitmask PyOps (library only; default on)"),
    "split_weight_bytes": (int, "hold fully connected weights larger than this as row blocks"),
    "rows": ((int, str), "row blocks per conv chain, or 'auto'"),
    "variant": (str, "row-split variant: overl or 2ps"),
    "checkpoints": ((int, str), "segments per conv chain, or 'auto'"),
    "budget_bytes": (int, "memory budget: the training step's peak for policy 'auto', rows='auto''s too"),
    "budget_for": (str, "policy 'auto': what the budget is: 'step-peak' (default: the step's peak under onnxcomp's "
                        "settings), 'ort-defaults' (the growth under ORT's default session settings) or 'ort-defaults-total' "
                        "(that growth plus the set-up the transform adds)"),
    "exact": (bool, "policy 'auto': only bit-identical techniques (recomputation, lossless encodings, scheduling)"),
    "margin": ((float, int), "policy 'auto': the share of the budget a plan is planned under it (default 0.05; "
                             "`transform --verify` with a growth budget: 0.02)"),
}


@dataclass(frozen=True)
class Step:
    """One pass of a policy: its class and the keywords the policy fixes for it."""
    make: type[OnnxcompPass]
    fixed: dict[str, Any] = field(default_factory=dict)

    def __call__(self, **kwargs: Any) -> OnnxcompPass:
        return self.make(**{**kwargs, **self.fixed})

    def takes(self) -> set[str]:
        """The options this step reads (constructor keywords that are options, minus the fixed ones)."""
        return (set(inspect.signature(self.make).parameters) & set(OPTIONS)) - set(self.fixed)


def step(make: type[OnnxcompPass], **fixed: Any) -> Step:
    return Step(make, fixed)


@dataclass(frozen=True)
class Policy(Sequence[Step]):
    """A named pass sequence; iterating it yields its steps (callables that build a pass)."""
    name: str
    description: str
    steps: tuple[Step, ...]
    options: frozenset[str]

    def __post_init__(self) -> None:
        taken = set().union(*(s.takes() for s in self.steps)) | self._overrides_taken()
        if set(self.options) != taken:
            raise AssertionError(f"policy {self.name}: declares {sorted(self.options)}, its steps take "
                                 f"{sorted(taken)}")

    def _overrides_taken(self) -> set[str]:
        from .encode_stash import EncodeStashPass

        return {"overrides"} if any(issubclass(s.make, EncodeStashPass) for s in self.steps) else set()

    def __getitem__(self, k):  # noqa: ANN001, ANN204  (Sequence protocol: an index or a slice)
        return self.steps[k]

    def __len__(self) -> int:
        return len(self.steps)

    def __iter__(self) -> Iterator[Step]:
        return iter(self.steps)

    def check_options(self, options: dict[str, Any]) -> dict[str, Any]:
        """The given options (None = not given, dropped), refusing any this policy does not take."""
        given = {k: v for k, v in options.items() if v is not None}
        for key, value in given.items():
            if key not in OPTIONS:
                raise OnnxcompError(f"unknown option {key!r}; options are: {', '.join(sorted(OPTIONS))}")
            if key not in self.options:
                takes = ", ".join(sorted(self.options)) or "none"
                raise OnnxcompError(f"policy {self.name!r} does not take option {{{key}}} (it takes: {takes})",
                                    options=(key,))
            typ = OPTIONS[key][0]
            if not isinstance(value, typ) or (isinstance(value, bool) and typ in (int, (int, str), (float, int))):
                raise OnnxcompError(f"option {{{key}}} = {value!r}: expected {getattr(typ, '__name__', typ)}",
                                    options=(key,))
        return given

    def build(self, **options: Any) -> list[OnnxcompPass]:
        """Instantiate the steps with the options they take."""
        from .encode_stash import EncodeStashPass

        given = self.check_options(options)
        overrides = given.pop("overrides", None) or {}
        passes = []
        for s in self.steps:
            kwargs = {k: v for k, v in given.items() if k in s.takes()}
            try:
                p = s(**kwargs)
            except (ValueError, TypeError) as exc:
                raise OnnxcompError(f"policy {self.name!r}: bad option(s) {kwargs}: {exc}") from None
            if overrides and isinstance(p, EncodeStashPass):
                p.overrides = dict(overrides)
            passes.append(p)
        return passes


def policy(name: str, description: str, *steps: Step | type[OnnxcompPass], options: Sequence[str] = ()) -> Policy:
    return Policy(name, description, tuple(s if isinstance(s, Step) else Step(s) for s in steps),
                  frozenset(options))

