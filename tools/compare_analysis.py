"""Does the analysis on onnx-ir find exactly what the protobuf analysis of another tree finds?

usage: python tools/compare_analysis.py OLD_TREE ARTIFACT_DIR [ARTIFACT_DIR ...] [--policies P,P,...]

OLD_TREE is a checkout whose ``onnxcomp`` reads protobuf (e.g. main before the analysis moved to onnx-ir);
it is imported under another package name beside this tree's. For every artifact directory the training
graph is analysed by both, and then every policy is run with this tree's ``transform_model`` while each
graph state the passes analyse (``analysis_of``) is also serialised and analysed by the old tree. Compared
field by field: the boundary, every tensor (class, dtype, shape, producer, consumers, alias, size hint), the
stash list (every field, the pattern inputs included), data inputs, batch, unresolved tensors, the transient
buffers, and the predicted peaks (``predicted_peak``, ``planned_peak`` in both ORT execution orders). Prints
one line per graph state and a summary; exits 1 on the first difference (with the field that differs).
"""
from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import onnx  # noqa: E402

from onnxcomp.analysis import cached  # noqa: E402
from onnxcomp.analysis.training_graph import analyze_ir  # noqa: E402
from onnxcomp.errors import OnnxcompError  # noqa: E402
from onnxcomp.load import load_model  # noqa: E402
from onnxcomp.planner.predict import planned_peak, predicted_peak  # noqa: E402
from onnxcomp.transform import transform_model  # noqa: E402


def load_old_tree(tree: str):
    """The old tree's ``onnxcomp`` package imported as ``onnxcomp_old`` (its relative imports stay inside)."""
    root = Path(tree) / "onnxcomp"
    spec = importlib.util.spec_from_file_location("onnxcomp_old", root / "__init__.py",
                                                  submodule_search_locations=[str(root)])
    module = importlib.util.module_from_spec(spec)
    sys.modules["onnxcomp_old"] = module
    spec.loader.exec_module(module)
    for sub, folder in (("custom_ops", "custom_ops"), ("models", "models")):   # pyproject's package-dir
        path = Path(tree) / folder
        sub_spec = importlib.util.spec_from_file_location(f"onnxcomp_old.{sub}", path / "__init__.py",
                                                          submodule_search_locations=[str(path)])
        sys.modules[f"onnxcomp_old.{sub}"] = importlib.util.module_from_spec(sub_spec)
        sub_spec.loader.exec_module(sys.modules[f"onnxcomp_old.{sub}"])
    import onnxcomp_old.analysis as old_analysis  # noqa: F401
    import onnxcomp_old.planner.predict as old_predict  # noqa: F401
    return sys.modules["onnxcomp_old.analysis"], sys.modules["onnxcomp_old.planner.predict"]


def facts(a) -> dict:
    tensors = {n: (t.cls.value, str(t.type.dtype), t.type.shape, t.producer, list(t.consumers), t.alias_of,
                   t.size_hint) for n, t in a.tensors.items()}
    stashed = [(s.name, s.shape, s.dtype, s.nbytes, s.producer, s.producer_op, s.forward_consumers,
                s.backward_consumers, s.backward_consumer_ops, s.pattern, s.encodings, tuple(vars(s.use).items())
                if hasattr(s.use, "__dict__") else repr(s.use)) for s in a.stashed]
    return {"boundary": (a.boundary.forward, a.boundary.backward, a.boundary.seeds, a.boundary.first_backward),
            "tensor names (in order)": list(a.tensors), "tensors": tensors, "stashed": stashed,
            "data_inputs": a.data_inputs, "batch": a.batch, "unresolved": a.unresolved, "n_steps": a.n_steps,
            "buffers": [(b.name, b.size, b.start, b.end) for b in a.buffers()], "breakdown": a.breakdown()}


def first_difference(old: dict, new: dict) -> str | None:
    for key in old:
        if old[key] != new[key]:
            if isinstance(old[key], dict):
                bad = next(k for k in set(old[key]) | set(new[key]) if old[key].get(k) != new[key].get(k))
                return f"{key}[{bad!r}]: old {old[key].get(bad)!r} new {new[key].get(bad)!r}"
            if isinstance(old[key], list) and len(old[key]) == len(new[key]):
                k = next(i for i, (x, y) in enumerate(zip(old[key], new[key])) if x != y)
                return f"{key}[{k}]: old {old[key][k]!r} new {new[key][k]!r}"
            return f"{key}: old {str(old[key])[:300]} new {str(new[key])[:300]}"
    return None


class Checker:
    def __init__(self, old_analysis, old_predict, peaks: bool) -> None:
        self.old_analysis, self.old_predict, self.peaks = old_analysis, old_predict, peaks
        self.states = 0
        self.seconds = {"old": 0.0, "new": 0.0}

    def compare(self, proto: onnx.ModelProto, new, label: str) -> None:
        t = time.perf_counter()
        old = self.old_analysis.analyze_model(proto)
        self.seconds["old"] += time.perf_counter() - t
        diff = first_difference(facts(old), facts(new))
        if diff is None and self.peaks:
            for what, o, n in [("predicted_peak", self.old_predict.predicted_peak(proto), predicted_peak(proto)),
                               *[(f"planned_peak[{order}]", self.old_predict.planned_peak(proto, order),
                                  planned_peak(proto, order)) for order in ("priority", "default")]]:
                if o != n:
                    diff = f"{what}: old {o} new {n}"
                    break
        self.states += 1
        if diff is not None:
            print(f"DIFFERENT {label}: {diff}", flush=True)
            raise SystemExit(1)

    def install(self, label: str) -> None:
        """Compare every analysis ``analysis_of`` computes from now on."""
        def checked(model, *args, **kwargs):
            t = time.perf_counter()
            new = analyze_ir(model, *args, **kwargs)
            self.seconds["new"] += time.perf_counter() - t
            from onnx_ir import serde
            proto = serde.serialize_model(model)
            self.compare(proto, new, f"{label} state {self.states}")
            if self.peaks:     # the planner's onnx-ir entry point (a clone, the accumulators moved on it)
                old, on_ir = self.old_predict.predicted_peak(proto), predicted_peak(model)
                if old != on_ir:
                    print(f"DIFFERENT {label} state {self.states}: predicted_peak on onnx-ir {on_ir}, old {old}")
                    raise SystemExit(1)
            return new
        cached.analyze_ir = checked


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("old_tree"), ap.add_argument("artifacts", nargs="+")
    ap.add_argument("--policies", default="lossless,recompute,comet")
    ap.add_argument("--no-peaks", action="store_true", help="skip the predicted-peak comparison of states")
    args = ap.parse_args(argv)
    old_analysis, old_predict = load_old_tree(args.old_tree)
    check = Checker(old_analysis, old_predict, not args.no_peaks)
    for art in args.artifacts:
        loaded = load_model(art)
        check.peaks = True
        check.compare(loaded.model, cached.analysis_of(loaded.model), f"{art} (input)")
        check.peaks = not args.no_peaks
        for policy in [p for p in args.policies.split(",") if p]:
            before = check.states
            check.install(f"{art} {policy}")
            options = {}
            if policy.startswith("auto:"):
                policy, budget = "auto", policy.split(":", 1)[1]
                from onnxcomp.runtime.maxbatch import parse_size
                options = {"budget_bytes": parse_size(budget.rstrip("x")), "exact": budget.endswith("x")}
            try:
                result = transform_model(loaded.model, policy, **options)
            except OnnxcompError as exc:   # e.g. a budget no plan meets: the states before it were compared
                print(f"stopped {art} {policy}: {exc}; {check.states - before} graph states compared", flush=True)
                continue
            check.compare(result.model, cached.analysis_of(result.model), f"{art} {policy} (output)")
            print(f"same  {art} {policy}: {check.states - before} graph states compared", flush=True)
    print(f"all same: {check.states} graph states; analysis time old {check.seconds['old']:.1f} s, "
          f"new {check.seconds['new']:.1f} s (states met inside transforms)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
