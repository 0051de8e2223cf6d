"""ORTModule (onnxruntime-training 1.19.2) on the pinned torch 2.13, with onnxcomp's passes on its graphs.

What it takes (CPU, torch 2.13.0):
1. `from onnxruntime.training.ortmodule import ORTModule` fails: ORTModule imports
   `torch.onnx._internal.jit_utils`, `torch.onnx._type_utils` and `torch.onnx._globals`, which torch moved to
   `torch.onnx._internal.torchscript_exporter.*`. `torch_compat()` aliases the old names to the new modules.
2. ORTModule needs its C++ extensions (aten_op_executor, torch_interop_utils) compiled against the installed
   torch. `python -m onnxcomp.ortmodule --build` (`build_extensions()`) compiles ORT's sources with the
   fixes torch >= 2.10's headers need (autograd nodes held by c10::intrusive_ptr) in a build directory that
   survives reruns, and installs the two `.so` files where ORTModule looks for them.

Where onnxcomp reaches ORTModule's graphs: ORTModule exports the module, builds the gradient graph in C++
(`OrtModuleGraphBuilder`), and then holds the result as a Python `onnx.ModelProto`
(`TrainingManager._onnx_models.optimized_model`: forward, a `YieldOp` that hands control back to PyTorch,
backward) before it serialises it into its `TrainingAgent`. `wrap()` replaces that manager's `_build_graph`
on the wrapped instance with one that runs ORT's, then onnxcomp's passes on that ModelProto, and its
`_get_session_config` with one that registers onnxcomp's PyOps. Everything onnxcomp's passes do to an ORT
training graph applies there (recomputation, sign bits, MaxPool indices, the codecs), except what needs the
training API's gradient buffers (`InPlaceAccumulatorV2`): ORTModule returns gradients as graph outputs to
PyTorch's autograd, so the reorder passes find nothing to move.
"""
from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import OnnxcompError

_MOVED = {  # old torch.onnx module → where torch 2.13 keeps it
    "torch.onnx._internal.jit_utils": "torch.onnx._internal.torchscript_exporter.jit_utils",
    "torch.onnx._type_utils": "torch.onnx._internal.torchscript_exporter._type_utils",
    "torch.onnx._globals": "torch.onnx._internal.torchscript_exporter._globals",
}
# "none": ORTModule as it is; "ortmodule-recompute": ORTModule's own memory optimizer (its recompute
# subgraph search, ORTMODULE_MEMORY_OPT_LEVEL), no onnxcomp pass. Every other name is an onnxcomp policy.
ORTMODULE_ONLY = ("none", "ortmodule-recompute")
WHERE = "ORTModule's gradient graph"


def torch_compat() -> None:
    """Alias the torch.onnx modules ORTModule 1.19.2 imports to their torch 2.13 locations (idempotent)."""
    for old, new in _MOVED.items():
        if old in sys.modules:
            continue
        try:
            mod = importlib.import_module(new)
        except ImportError:
            continue  # an older torch still has the old module
        sys.modules[old] = mod
        parent, _, attr = old.rpartition(".")
        setattr(importlib.import_module(parent), attr, mod)
    _complete_symbolic_shims()
    _cpu_nvtx()


def _complete_symbolic_shims() -> None:
    """torch 2.13's `torch.onnx.symbolic_opset9` etc. are backward-compatibility shims that re-export the public
    names only; ORTModule's symbolic functions import private helpers from them (`_convolution`,
    `_convolution_mode`). Give each shim the names its torchscript_exporter module has and it lacks."""
    for name in ("symbolic_helper", *(f"symbolic_opset{v}" for v in range(7, 21))):
        try:
            shim = importlib.import_module(f"torch.onnx.{name}")
            full = importlib.import_module(f"torch.onnx._internal.torchscript_exporter.{name}")
        except ImportError:
            continue
        if shim is full:
            continue
        for attr, value in vars(full).items():
            if not attr.startswith("__") and not hasattr(shim, attr):
                setattr(shim, attr, value)


def _cpu_nvtx() -> None:
    """ORTModule wraps its forward helpers in NVTX ranges when `torch.cuda.nvtx.range_push` exists; a CPU torch
    2.13 has it, and it raises "NVTX functions not installed". Make ORT's two range helpers no-ops then."""
    import torch

    try:
        torch.cuda.nvtx.range_push("onnxcomp")
        torch.cuda.nvtx.range_pop()
    except RuntimeError:
        from onnxruntime.training.utils import torch_profile_utils

        torch_profile_utils.torch_nvtx_range_push = lambda msg: None
        torch_profile_utils.torch_nvtx_range_pop = lambda: None


def missing_extensions() -> list[str]:
    """ORTModule's CPU extensions not installed next to it (empty when ORTModule can start)."""
    ext_dir = _ort_extension_dir()
    present = set(os.listdir(ext_dir)) if os.path.isdir(ext_dir) else set()
    return [e for e in _EXTENSIONS if not any(f.startswith(e) and f.endswith(".so") for f in present)]


def extensions_built() -> bool:
    return not missing_extensions()


@dataclass
class WrapReport:
    """What `wrap` applied to ORTModule's graphs (filled in when ORTModule builds them, on the first forward)."""
    policy: str
    memory_optimizer: dict[str, Any] = field(default_factory=dict)   # ORTModule runtime options set
    transform: Any = None               # onnxcomp.transform.TransformResult on the gradient graph
    gradient_graph_nodes: int = 0       # before onnxcomp's passes
    custom_ops: list[str] = field(default_factory=list)  # onnxcomp PyOps in the graph ORT runs
    builds: int = 0                     # gradient graphs built (ORTModule rebuilds on a new input schema)
    input_shapes: dict[str, list[int]] = field(default_factory=dict)   # the static shapes the graph runs with
    unresolved: list[str] = field(default_factory=list)  # stashes of unknown size (ATen ops), left alone

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {"policy": self.policy, "memory_optimizer": self.memory_optimizer,
                               "builds": self.builds, "gradient_graph_nodes": self.gradient_graph_nodes,
                               "custom_ops": self.custom_ops}
        if self.transform is not None:
            t = self.transform
            out |= {"encoded": len(t.records), "modified_by": t.modified_by,
                    "stashed_bytes_before": t.before["stashed_bytes"], "stashed_bytes_after": t.after["stashed_bytes"],
                    "skipped": len(t.skipped), "left_alone": len(t.left_alone), "unresolved": self.unresolved}
        return out


def concrete_inputs(model: Any, shapes: dict[str, list[int]]) -> Any:
    """Copy of ``model`` whose inputs in ``shapes`` have those static shapes; each symbol they replace (ORTModule
    exports every input axis as dynamic, ``input-0_dim0`` ...) becomes its number wherever a declared shape
    uses it. ORTModule's own `use_static_shape` fails in 1.19.2 ("The size of concrete input shapes and the
    size of user inputs does not match"), so the graph is made static here, for the shapes of the first call."""
    import onnx

    m = onnx.ModelProto()
    m.CopyFrom(model)
    symbols: dict[str, int] = {}
    for vi in m.graph.input:
        if vi.name not in shapes:
            continue
        dims = vi.type.tensor_type.shape.dim
        if len(dims) != len(shapes[vi.name]):
            raise OnnxcompError(f"{WHERE}: input {vi.name} has rank {len(dims)}, the call gave shape "
                                f"{shapes[vi.name]}")
        for dim, value in zip(dims, shapes[vi.name]):
            if dim.HasField("dim_param") and dim.dim_param:
                symbols[dim.dim_param] = int(value)
            dim.Clear()
            dim.dim_value = int(value)
    for vi in [*m.graph.value_info, *m.graph.output, *m.graph.input]:
        for dim in vi.type.tensor_type.shape.dim:
            if dim.HasField("dim_param") and dim.dim_param:
                value = _evaluate_dim(dim.dim_param, symbols)
                if value is not None:   # a dim nobody can evaluate keeps its symbol: shape inference refines it
                    dim.Clear()
                    dim.dim_value = value
    return declare_aten_shapes(m, symbols)


def declare_aten_shapes(model: Any, symbols: dict[str, int] | None = None) -> Any:
    """Declare the output shapes of ORTModule's ATen fallback ops (com.microsoft/org.pytorch.aten ``ATen``: no
    ONNX schema, so shape inference stops there and every stash after them stays unsized) for the pooling
    operators ResNet-style nets export that way; alternates with onnxcomp's shape resolution (in place)."""
    import math

    import onnx
    from onnx import helper, numpy_helper

    from .analysis.shapes import resolve_shapes

    consts = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    aten = [n for n in model.graph.node if n.op_type == "ATen" and n.output]
    def static(vi: Any) -> bool:
        dims = vi.type.tensor_type.shape.dim
        return bool(dims) and all(d.HasField("dim_value") for d in dims)

    declared = {vi.name for vi in model.graph.value_info if static(vi)}
    learnt: dict[str, int] = dict(symbols or {})
    for _ in range(len(aten) + 1):
        types = resolve_shapes(model)
        added = 0
        for node in aten:
            op = next((a.s.decode() for a in node.attribute if a.name == "operator"), "")
            x = types.get(node.input[0])
            if node.output[0] in declared or x is None or x.shape is None or len(x.shape) != 4:
                continue
            n, c, h, w = x.shape
            if op == "max_pool2d_with_indices" and all(i in consts for i in node.input[1:6]):
                k, st, pad, dil, ceil = (consts[i].tolist() for i in node.input[1:6])
                st = st or k
                rnd = math.ceil if ceil else math.floor
                hw = [int(rnd((size + 2 * pad[i] - dil[i] * (k[i] - 1) - 1) / st[i])) + 1
                      for i, size in enumerate((h, w))]
                outs = [(node.output[0], x.dtype, [n, c, *hw]), (node.output[1], None, [n, c, *hw])]
            elif op == "_adaptive_avg_pool2d" and node.input[1] in consts:
                outs = [(node.output[0], x.dtype, [n, c, *consts[node.input[1]].tolist()])]
            else:
                continue
            for name, dtype, shape in outs:
                elem = onnx.TensorProto.INT64 if dtype is None else helper.np_dtype_to_tensor_dtype(dtype)
                symbolic = [vi for vi in model.graph.value_info if vi.name == name]
                for vi in symbolic:
                    # the symbols ORT gave these dims name the same sizes downstream (e.g. ATen_7_o0__d2)
                    for dim, value in zip(vi.type.tensor_type.shape.dim, shape):
                        if dim.HasField("dim_param") and dim.dim_param:
                            learnt[dim.dim_param] = value
                    model.graph.value_info.remove(vi)
                model.graph.value_info.append(helper.make_tensor_value_info(name, elem, shape))
                declared.add(name)
                added += 1
        if not added:
            break
        for vi in [*model.graph.value_info, *model.graph.output]:
            for dim in vi.type.tensor_type.shape.dim:
                if dim.HasField("dim_param") and dim.dim_param:
                    value = _evaluate_dim(dim.dim_param, learnt)
                    if value is not None:
                        dim.Clear()
                        dim.dim_value = value
    return model


def _evaluate_dim(expr: str, symbols: dict[str, int]) -> int | None:
    """A declared dim: an input symbol, or an expression of them that ORT's symbolic shape inference wrote
    (e.g. ``floor(input_dim2/2 - 1/2) + 1`` after a strided Conv); None when it is not a number then."""
    if expr in symbols:
        return symbols[expr]
    import sympy

    try:
        value = sympy.sympify(expr, locals={k: sympy.Symbol(k) for k in symbols}).subs(symbols)
    except (sympy.SympifyError, TypeError, SyntaxError, ValueError):
        return None
    return int(value) if value.is_number and value == int(value) else None


def transform_gradient_graph(model: Any, policy: str, input_shapes: dict[str, list[int]] | None = None,
                             **options: Any) -> Any:
    """onnxcomp's ``policy`` on an ORTModule gradient graph (forward, YieldOp, backward) → TransformResult.

    input_shapes: the shapes of the call ORTModule built the graph for (user inputs by graph-input name).
    A plain function of a ModelProto, so it can be tried on a graph ORTModule saved (``wrap(save_dir=...)``
    writes ``ortmodule_gradient.onnx``).
    """
    from .transform import transform_model

    if not any(n.op_type == "YieldOp" for n in model.graph.node):
        raise OnnxcompError(f"{WHERE}: no YieldOp node; this is not a graph ORTModule built for training")
    if input_shapes:
        model = concrete_inputs(model, input_shapes)
    # Stashes whose shape stays unknown (outputs of ORTModule's ATen fallback ops, e.g. max_pool2d_with_indices,
    # which have no ONNX schema) are left alone by every pass and listed in the result's left_alone.
    return transform_model(model, policy, where=WHERE, **options)


def _onnxcomp_ops(model: Any) -> list[str]:
    """onnxcomp's PyOps in ``model`` (onnxruntime-extensions' domain), which the session must register."""
    return sorted({n.op_type for n in model.graph.node if n.domain == "ai.onnx.contrib"})


def _training_manager(ort_module: Any) -> Any:
    from onnxruntime.training.ortmodule._torch_module_ort import TorchModuleORT

    torch_module = ort_module._torch_module
    if not isinstance(torch_module, TorchModuleORT):  # ORTModule fell back to PyTorch at construction
        raise OnnxcompError(f"ORTModule fell back to PyTorch at start-up ({type(torch_module).__name__}); "
                            "run with ORTMODULE_FALLBACK_POLICY=FALLBACK_DISABLE to see why")
    return torch_module._execution_manager(True)


def _save(model: Any, path: Path) -> None:
    from .fileio import atomic_output

    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_output(path) as tmp:
        Path(tmp).write_bytes(model.SerializeToString())


def _install_hooks(ort_module: Any, report: WrapReport, options: dict[str, Any], save_dir: Path | None,
                   priority_order: bool) -> None:
    """Make the wrapped instance's training manager run onnxcomp's passes on the gradient graph it builds."""
    tm = _training_manager(ort_module)
    ort_build_graph = tm._build_graph
    ort_session_config = tm._get_session_config

    def build_graph(graph_transformer_config: Any) -> None:
        ort_build_graph(graph_transformer_config)
        graph = tm._onnx_models.optimized_model
        report.builds += 1
        report.gradient_graph_nodes = len(graph.graph.node)
        info = tm._graph_transition_manager._model_info_for_export
        shapes = dict(zip(info.onnx_graph_input_names, info.onnx_graph_input_shapes))
        report.input_shapes = shapes
        if save_dir is not None:
            _save(graph, save_dir / "ortmodule_gradient.onnx")
        result = transform_gradient_graph(graph, report.policy, input_shapes=shapes, **options)
        tm._onnx_models.optimized_model = result.model
        report.transform = result
        report.custom_ops = _onnxcomp_ops(result.model)
        from .static_batch import unresolved_stashes

        report.unresolved = unresolved_stashes(concrete_inputs(graph, shapes), WHERE)
        if save_dir is not None:
            _save(result.model, save_dir / f"ortmodule_{report.policy}.onnx")

    def session_config() -> tuple:
        import onnxruntime as ort

        session_options, providers, provider_options = ort_session_config()
        # ORTModule picks DEFAULT (or MEMORY_EFFICIENT with its memory optimizer). onnxcomp's graphs are laid out
        # for PRIORITY_BASED: nodes run in node-list order, so what a pass put after the YieldOp runs in
        # backward (recomputation) and its encoders right after their producers (platform notes).
        if priority_order and session_options.execution_order == ort.ExecutionOrder.DEFAULT:
            session_options.execution_order = ort.ExecutionOrder.PRIORITY_BASED
        if report.custom_ops:
            from onnxruntime_extensions import get_library_path

            from .runtime import pyops

            pyops.prepare_registration()   # onnxcomp's PyOps defined before the library snapshots them
            session_options.register_custom_ops_library(get_library_path())
        return session_options, providers, provider_options

    tm._build_graph = build_graph
    tm._get_session_config = session_config

    def same_shapes(_module: Any, args: tuple) -> None:
        # The rewritten graph is static for the first call's shapes; ORT would run another batch's forward and
        # fail deep in backward (a recompute Reshape), so refuse it here.
        import torch

        expected = list(report.input_shapes.values())
        got = [list(a.shape) for a in args if isinstance(a, torch.Tensor)]
        if expected and len(got) == len(expected) and got != expected:
            raise OnnxcompError(f"wrap(policy={report.policy!r}) made ORTModule's graph static for input shapes "
                                f"{expected} (the first call); got {got}: keep the shapes fixed (e.g. a "
                                "DataLoader with drop_last=True) or wrap a fresh module for other shapes")

    ort_module.register_forward_pre_hook(same_shapes)


def wrap(module: Any, policy: str = "lossless", *, memory_opt_level: int | None = None,
         memory_opt_config: str | None = None, save_dir: str | Path | None = None,
         execution_order: str = "priority", **options: Any) -> Any:
    """``ORTModule(module)`` with onnxcomp's ``policy`` applied to the gradient graph ORTModule builds.

    policy: an onnxcomp policy (``lossless``, ``recompute``, ``comet``, ``dpr-*``, ``rows``, ...), ``none``
    (plain ORTModule) or ``ortmodule-recompute`` (ORTModule's memory optimizer alone, level 2 unless given).
    memory_opt_level / memory_opt_config: ORTModule's memory optimizer (``ORTMODULE_MEMORY_OPT_LEVEL`` 0/1/2,
    ``ORTMODULE_MEMORY_OPT_CONFIG`` a JSON file), set on this instance only; it can run beside any policy.
    save_dir: write the gradient graph before and after onnxcomp's passes there. execution_order: "priority"
    (onnxcomp's graphs are laid out for it) or "ortmodule" (keep ORTModule's choice). options: the policy's
    options (``min_bytes``, ``eb``, ...), checked before anything is built. The returned module carries
    ``onnxcomp_report`` (a `WrapReport`), filled in on the first forward call. Errors inside ORTModule are
    raised, never answered by ORTModule's silent fallback to PyTorch.
    """
    if policy not in ORTMODULE_ONLY:
        from .passes import get_policy

        get_policy(policy).check_options(options)  # unknown policy / option: an error before any export
    elif options:
        raise OnnxcompError(f"policy {policy!r} takes no onnxcomp options (got {sorted(options)})")
    if execution_order not in ("priority", "ortmodule"):
        raise OnnxcompError(f"execution_order={execution_order!r}: use 'priority' or 'ortmodule'")
    missing = missing_extensions()
    if missing:
        raise OnnxcompError(f"ORTModule's C++ extensions {missing} are not built for this torch; run "
                            "`python -m onnxcomp.ortmodule --build` once (needs g++ and ninja, ~10 min on 2 cores)")
    torch_compat()
    try:
        from onnxruntime.training.ortmodule import ORTModule
        from onnxruntime.training.ortmodule._fallback import _FallbackPolicy
    except Exception as exc:
        raise OnnxcompError(f"ORTModule does not import on this torch: {type(exc).__name__}: {exc}") from None
    ort_module = ORTModule(module)
    ort_module._fallback_manager.policy = _FallbackPolicy.FALLBACK_DISABLE
    tm = _training_manager(ort_module)
    for manager in (tm, ort_module._torch_module._execution_manager(False)):
        # torch 2.13's torch.onnx.export defaults to the dynamo exporter (needs onnxscript, and puts BatchNorm in
        # inference mode); ORTModule's export call takes extra keywords from this per-instance dict.
        manager._graph_transition_manager._export_extra_kwargs = {"dynamo": False}
    report = WrapReport(policy)
    if policy == "ortmodule-recompute" and memory_opt_level is None and memory_opt_config is None:
        memory_opt_level = 2
    if memory_opt_level is not None:
        tm._runtime_options.memory_optimization_level = int(memory_opt_level)
        if int(memory_opt_level) in (1, 2):
            tm._runtime_options.recompute_probe_config = "1:1"   # what ORTModule sets for these levels
        report.memory_optimizer["level"] = int(memory_opt_level)
    if memory_opt_config is not None:
        if not Path(memory_opt_config).is_file():
            raise OnnxcompError(f"memory_opt_config {memory_opt_config}: no such file; pass ORTModule's JSON "
                                "memory optimizer config")
        tm._runtime_options.memory_optimizer_config_file_path = str(memory_opt_config)
        report.memory_optimizer["config"] = str(memory_opt_config)
    if report.memory_optimizer:
        def record_plans(_module: Any, _args: tuple, _out: Any) -> None:
            # The recompute subgraphs ORTModule's memory optimizer found (it searches when the session is made).
            found = tm._runtime_inspector.memory_ob.cluster_id_combination_to_saving_symbolics_map
            report.memory_optimizer["plans_found"] = sorted(found)

        ort_module.register_forward_hook(record_plans)
    if policy not in ORTMODULE_ONLY:
        _install_hooks(ort_module, report, options, Path(save_dir) if save_dir is not None else None,
                       priority_order=execution_order == "priority")
    ort_module.onnxcomp_report = report
    return ort_module


# ORTModule's CPU extensions, in the order they are needed: aten_op_executor is loaded by every ORTModule;
# torch_interop_utils only for custom autograd.Functions (PythonOp), which ORTModule enables at import.
_EXTENSIONS = ("aten_op_executor", "torch_interop_utils")
# Source fixes applied to our copy of ORT's sources when torch's headers hold autograd nodes by
# c10::intrusive_ptr (torch >= 2.10; ORT 1.19.2 was written for std::shared_ptr grad_fn_, a weak_ptr THPFunction::cdata,
# PyNode::obj, and exported PyNode typeinfo and
# tensor_fromDLPack): (file, old, new).
_INTRUSIVE_NODE_PATCHES: tuple[tuple[str, str, str], ...] = (
    ("torch_interop_utils/ctx_pool.h",
     "std::unordered_map<size_t, std::shared_ptr<torch::autograd::Node>> grad_fns_;",
     "std::unordered_map<size_t, decltype(torch::autograd::AutogradMeta::grad_fn_)> grad_fns_;"),
    ("torch_interop_utils/custom_function_fw.cc",
     "const std::shared_ptr<torch::autograd::Node>& cdata = tensor_owning_ctx.value().grad_fn();",
     "const auto& cdata = tensor_owning_ctx.value().grad_fn();"),
    ("torch_interop_utils/custom_function_fw.cc",
     "auto saved_for = py_fn->cdata.lock();",
     "auto saved_for = py_fn->cdata;  // an owning intrusive_ptr since torch 2.10"),
    ("torch_interop_utils/custom_function_fw.cc",   # PyNode reaches its THPFunction through its PyObject slot
     "(THPFunction*)py_node_fn->obj;", "(THPFunction*)py_node_fn->pyobj();"),
    # libtorch_python.so no longer exports PyNode's typeinfo, so dynamic_cast<PyNode*> does not link
    # ("undefined symbol: typeinfo for torch::autograd::PyNode"): a node is a PyNode when its Python object is
    # a THPFunction.
    ("torch_interop_utils/custom_function_fw.cc",
     "#include <torch/csrc/autograd/python_cpp_function.h>\n",
     "#include <torch/csrc/autograd/python_cpp_function.h>\n\n"
     "static torch::autograd::PyNode* as_py_node(torch::autograd::Node* node) {\n"
     "  PyObject* obj = node == nullptr ? nullptr : node->pyobj_slot()->load_pyobj();\n"
     "  return obj != nullptr && THPFunction_Check(obj) ? static_cast<torch::autograd::PyNode*>(node) : nullptr;\n"
     "}\n"),
    ("torch_interop_utils/custom_function_fw.cc",
     "dynamic_cast<torch::autograd::PyNode*>(", "as_py_node("),
    # torch::utils::tensor_fromDLPack is declared but no longer exported: the same steps (take the capsule's
    # DLManagedTensor, mark the capsule used) through the exported at::fromDLPack.
    *((f"torch_interop_utils/{cc}", old, new) for cc in ("custom_function_fw.cc", "custom_function_bw.cc")
      for old, new in (
          ("#include <torch/csrc/utils/tensor_new.h>\n",
           "#include <torch/csrc/utils/tensor_new.h>\n\n"
           "static at::Tensor tensor_from_dlpack_capsule(PyObject* data) {\n"
           "  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(data, \"dltensor\"));\n"
           "  TORCH_CHECK(managed != nullptr, \"expected an unused DLPack capsule\");\n"
           "  at::Tensor tensor = at::fromDLPack(managed);\n"
           "  PyCapsule_SetName(data, \"used_dltensor\");\n"
           "  return tensor;\n"
           "}\n"),
          ("torch::utils::tensor_fromDLPack(", "tensor_from_dlpack_capsule("))),
)


def _source_patches() -> tuple[tuple[str, str, str], ...]:
    """The patches the installed torch's headers need (none for the torch ORT 1.19.2 was built against)."""
    import torch.utils.cpp_extension as cpp

    variable_h = os.path.join(cpp.include_paths()[0], "torch", "csrc", "autograd", "variable.h")
    with open(variable_h) as f:
        intrusive = "c10::intrusive_ptr<Node> grad_fn_;" in f.read()
    return _INTRUSIVE_NODE_PATCHES if intrusive else ()


def _ort_extension_dir() -> str:
    """ORTModule's torch_cpp_extensions folder, found without importing ORTModule."""
    import importlib.util

    spec = importlib.util.find_spec("onnxruntime")
    if spec is None or not spec.submodule_search_locations:
        raise OnnxcompError("onnxruntime is not installed; install onnxruntime-training-cpu==1.19.2")
    return os.path.join(list(spec.submodule_search_locations)[0], "training", "ortmodule", "torch_cpp_extensions")


def build_dir() -> str:
    """Where the extensions compile: kept between runs (ninja rebuilds only what changed), one per torch/ORT."""
    import onnxruntime
    import torch

    root = os.environ.get("ONNXCOMP_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "onnxcomp")
    return os.path.join(root, "ortmodule-ext", f"torch-{torch.__version__}-ort-{onnxruntime.__version__}")


def _copy_sources(ext: str, dest: str) -> list[str]:
    """Copy ORT's sources for ``ext`` into ``dest`` with our patches; files keep their mtime when unchanged."""
    src = os.path.join(_ort_extension_dir(), "cpu", ext)
    os.makedirs(dest, exist_ok=True)
    sources = []
    for name in sorted(os.listdir(src)):
        if not name.endswith((".cc", ".h")):
            continue
        with open(os.path.join(src, name)) as f:
            text = f.read()
        for file, old, new in _source_patches():
            if file == f"{ext}/{name}":
                if old not in text:
                    raise OnnxcompError(f"patch for {file} no longer applies (ORT sources changed)")
                text = text.replace(old, new)
        target = os.path.join(dest, name)
        if not os.path.exists(target) or open(target).read() != text:
            with open(target + ".tmp", "w") as f:
                f.write(text)
            os.replace(target + ".tmp", target)
        if name.endswith(".cc"):
            sources.append(target)
    return sources


def build_extensions(verbose: bool = True) -> list[str]:
    """Compile ORTModule's CPU extensions against the installed torch and install them where ORTModule looks.

    ORT's own installer (torch_cpp_extensions/install.py) builds inside site-packages with `-std=c++17`, which
    torch >= 2.10's headers (C++20) reject, and starts from scratch each time. This copies ORT's sources into a
    build directory that survives reruns (`build_dir()`), compiles them with torch's default flags through
    `torch.utils.cpp_extension.load` (ninja; MAX_JOBS caps its parallel jobs) and copies each `.so` next to
    ORTModule atomically. Returns the installed paths.
    """
    import shutil

    import torch.utils.cpp_extension as cpp

    installed = []
    for ext in _EXTENSIONS:
        work = os.path.join(build_dir(), ext)
        sources = _copy_sources(ext, os.path.join(work, "src"))
        cpp.load(name=ext, sources=sources, extra_cflags=["-O2"], extra_include_paths=[os.path.join(work, "src")],
                 build_directory=work, verbose=verbose, is_python_module=True)
        target = os.path.join(_ort_extension_dir(), ext + ".so")
        shutil.copyfile(os.path.join(work, ext + ".so"), target + ".tmp")
        os.replace(target + ".tmp", target)
        installed.append(target)
        if verbose:
            print(f"installed {target}", flush=True)
    return installed


if __name__ == "__main__":
    if sys.argv[1:] == ["--build"]:
        build_extensions()
    else:
        print("usage: python -m onnxcomp.ortmodule --build", file=sys.stderr)
        sys.exit(2)
