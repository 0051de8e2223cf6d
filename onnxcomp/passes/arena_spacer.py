"""Pass: "spacer" parameters whose gradient buffers leave ORT's arena room for the first step's convolution scratch.

Under ORT's default session settings the arena holds the memory-pattern block twice ("2P") when a request made
outside the pattern in the first step finds no free chunk (passes/grad_buffer_order.py has the mechanism). The
free chunks the first step finds are what ORT's ``Module`` leaves after allocating one gradient buffer per trainable
parameter at set-up; ``GradBufferOrderPass`` picks their order, but where the buffers are all small (densenet_s: 83
buffers, 411 KB; leaky_vgg: 26, 2.3 MB) no order opens a region large enough for a 2.8 / 3.6 MB im2col request.

This pass adds trainable parameters nothing reads ("spacers", zeros; gradient ``Sub(p, p)`` = 0, accumulated as
every gradient is) listed after the others, so their gradient buffers are allocated last at set-up. Each is one
allocation unit over the largest free chunk the set-up leaves so far, so it opens the arena's next region (its
size doubling) and leaves the rest of that region free (``spacer_sizes``); the last leaves a chunk of at least
the largest scratch request; ``spacer_sizes`` searches for the fewest bytes that do it. Measured
(docs/notes/growthplan.md part 4, `auto --exact` plans, ORT defaults): leaky_vgg, one spacer of 473,600 B: growth
69.5 → 41.4 MiB; densenet_s, three (4.6 MiB): 70.7 → 42.1 MiB; losses bit-identical. The cost is at set-up: each
spacer byte is held ~4 times (the parameter, its gradient buffer, two Adam moments; 4.35× measured on densenet_s,
docs/notes/setupfree.md): +1.8 and +19.7 MiB of set-up RSS there. densenet_s with the cheapest set (two spacers,
2.7 MB: a 2 MiB region filled whole, then a small opener of the 4 MiB one): growth 45.6 MiB, set-up +13.2 MiB
(nodes included) instead of +21.9.

The graph alone is rewritten here; the checkpoint and the eval model need the parameters too
(``write_spacer_artifacts``), so `transform` applies it only where it writes the whole artifact directory, and only
when the budget planner's ORT-defaults mode chose it (planner/growth_budget.py: where the predicted saving exceeds
the set-up cost). Not an ONNX guarantee: a reliance on ORT 1.19's Module and BFC arena, as grad_buffer_order's.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir

from .base import OnnxcompPass, PassOutcome
from .grad_buffer_order import _MIN_ALLOCATION, ACCUMULATION_SUFFIX, parameters, setup_arena, setup_free_chunks
from .records import PassRecord

SPACER_PREFIX = "onnxcomp_arena_spacer"
MAX_SPACERS = 4
SET_UP_COPIES = 4        # a spacer byte at set-up: parameter, gradient buffer, two Adam moments


def spacer_sizes(buffer_sizes: Sequence[int], need: int, max_spacers: int = MAX_SPACERS) -> list[int]:
    """Bytes of the spacers (in order) after which the set-up of ``buffer_sizes`` leaves a free chunk of at least
    ``need`` bytes, the fewest bytes found (each spacer byte is held ~``SET_UP_COPIES`` times at set-up); [] when
    the set-up already does, or when ``max_spacers`` do not reach it.

    A new region opens only for a request larger than every free chunk, and its size is the arena's growth size
    (doubled at each opening), so the room comes from a region opened while the free chunks are small. Four moves
    are searched (every sequence of at most ``max_spacers``, ``setup_arena`` replaying each):
    - *open*: one allocation unit over the largest free chunk (opens the next region, leaves its rest free);
    - *fill*: exactly the largest free chunk (best fit takes that chunk whole: the next *open* can be small);
    - *whole*: exactly the growth size (opens the next region and fills it);
    - *match*: the growth size less the largest free chunk (opens the next region and leaves a rest no larger than
      what is already free, so the next *open* is as small as it can be).
    densenet_s's set-up (83 buffers, 411 KB, 630,784 B free; need 2.83 MB): *open* three times holds 4.83 MB (the first
    version of this function: 19.3 MB at set-up); *whole* then *open* 2.73 MB; *match* then *open* (1,466,368 +
    631,040 B) 2.10 MB."""
    if max(setup_free_chunks(buffer_sizes), default=0) >= need:
        return []
    best: list[int] | None = None

    def search(sizes: list[int], total: int) -> None:
        nonlocal best
        if best is not None and (total, len(sizes)) >= (sum(best), len(best)):
            return                      # fewest bytes, then fewest spacers (each adds two nodes)
        free, grow = setup_arena([*buffer_sizes, *sizes])
        largest = max(free, default=0)
        if sizes and largest >= need:
            best = list(sizes)
            return
        if len(sizes) == max_spacers:
            return
        moves = [(largest // _MIN_ALLOCATION + 1) * _MIN_ALLOCATION]                  # open
        if grow > largest:
            moves.append(grow)                                                         # whole
        if grow - largest > largest:
            moves.append(grow - largest)                                               # match
        if largest >= _MIN_ALLOCATION:
            moves.append(largest)                                                      # fill
        for size in moves:
            search([*sizes, size], total + size)

    search([], 0)
    return best or []


def is_spacer(name: str) -> bool:
    return name.startswith(SPACER_PREFIX)


class ArenaSpacerPass(OnnxcompPass):
    """Adds one trainable spacer parameter per entry of ``sizes`` (bytes, float32 elements), after the graph's
    parameters, with its gradient accumulation buffer, accumulator and output. One record."""

    name = "arena_spacer"
    full_check = False

    def __init__(self, sizes: Sequence[int]) -> None:
        self.sizes = [int(s) for s in sizes]

    def call(self, model: ir.Model) -> PassOutcome:
        graph = model.graph
        outcome = PassOutcome(model, False)
        if not self.sizes or any(is_spacer(v.name or "") for v in graph.inputs):
            return outcome
        params = parameters(graph)
        by_name = {v.name: v for v in graph.inputs}
        reset = by_name.get("lazy_reset_grad")
        if not params or reset is None:
            return outcome
        inputs = list(graph.inputs)
        last_param = max(inputs.index(p) for p in params)
        last_buffer = max(inputs.index(by_name[p.name + ACCUMULATION_SUFFIX]) for p in params)
        new_params, new_buffers, names = [], [], []
        for j, size in enumerate(self.sizes):
            n = -(-size // 4)
            name = f"{SPACER_PREFIX}{j}"
            p = ir.Value(name=name, type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([n]))
            buf = ir.Value(name=name + ACCUMULATION_SUFFIX, type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([n]))
            grad = ir.Node("", "Sub", [p, p], num_outputs=1, name=f"{name}_grad_zero")
            grad.outputs[0].name, grad.outputs[0].type = name + "_grad", ir.TensorType(ir.DataType.FLOAT)
            grad.outputs[0].shape = ir.Shape([n])
            acc = ir.Node("com.microsoft", "InPlaceAccumulatorV2", [buf, grad.outputs[0], reset], num_outputs=1,
                          name=f"{name}_accumulator")
            out = acc.outputs[0]
            out.name, out.type, out.shape = name + "_grad.accumulation.out", ir.TensorType(ir.DataType.BOOL), \
                ir.Shape([1])
            graph.append(grad)
            graph.append(acc)
            graph.outputs.append(out)
            new_params.append(p)
            new_buffers.append(buf)
            names.append(name)
        # buffers after the last buffer, parameters after the last parameter (indices shift by the params first)
        for k, b in enumerate(new_buffers):
            inputs.insert(last_buffer + 1 + k, b)
        for k, p in enumerate(new_params):
            inputs.insert(last_param + 1 + k, p)
        graph.inputs.clear()
        graph.inputs.extend(inputs)
        outcome.records.append(PassRecord("moved", self.name, "arena spacers", {
            "pass": self.name, "spacers": names, "bytes": self.sizes,
            "set_up_bytes": SET_UP_COPIES * sum(self.sizes),
            "why": "ORT's Module allocates these parameters' gradient buffers last at set-up: they open the arena "
                   "regions whose free rest takes the first step's convolution scratch, so the memory pattern's "
                   "block is not held twice (ORT defaults)"}))
        outcome.modified = True
        return outcome


def spacers_of(model: onnx.ModelProto) -> dict[str, int]:
    """The spacer parameters of a training graph: name → float32 elements."""
    out = {}
    for vi in model.graph.input:
        if is_spacer(vi.name) and not vi.name.endswith(ACCUMULATION_SUFFIX):
            out[vi.name] = int(np.prod([d.dim_value for d in vi.type.tensor_type.shape.dim]))
    return out


def write_spacer_artifacts(stage: Path, spacers: dict[str, int]) -> None:
    """The checkpoint (zeros, trainable) and the eval model (unread inputs, after the other parameters: ORT's
    EvalStep feeds the training graph's parameter order) in ``stage`` given the spacers."""
    from onnxruntime.training.api import CheckpointState
    from onnxruntime.training.onnxblock.checkpoint_utils import save_checkpoint

    ckpt = stage / "checkpoint"
    if ckpt.exists():
        state = CheckpointState.load_checkpoint(str(ckpt))
        trainable, frozen, have = [], [], set()
        for name, p in state.parameters:
            have.add(name)
            (trainable if p.requires_grad else frozen).append(onnx.numpy_helper.from_array(np.asarray(p.data), name))
        trainable += [onnx.numpy_helper.from_array(np.zeros(n, np.float32), name)
                      for name, n in spacers.items() if name not in have]
        properties = list(state.properties)
        tmp = ckpt.with_name("checkpoint.tmp")
        save_checkpoint((trainable, frozen), str(tmp))
        if properties:
            new = CheckpointState.load_checkpoint(str(tmp))
            for key, value in properties:
                new.properties[key] = value
            CheckpointState.save_checkpoint(new, str(tmp))
        tmp.replace(ckpt)     # a new file: stage's copy may be a hard link
    eval_path = stage / "eval_model.onnx"
    if eval_path.exists():
        e = onnx.load(str(eval_path), load_external_data=False)
        names = {i.name for i in e.graph.input}
        e.graph.input.extend(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, [n])
                             for name, n in spacers.items() if name not in names)
        tmp = eval_path.with_name(eval_path.name + ".tmp")
        onnx.save(e, str(tmp))
        tmp.replace(eval_path)
