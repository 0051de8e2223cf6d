"""Pass: order a training graph's parameters so ORT's arena keeps room for the step's kernel scratch.

Under ORT's default session settings (CPU arena, memory pattern) a training step takes one block of the
pattern's size P from the training session's BFC arena, and the arena holds it *twice* ("2P") when any request
made outside the pattern during the first step finds no free chunk (passes/arena_scratch.py has the arena's
rules: regions grow by powers of two, a chunk is split only when the rest is at least the request; the block
fills a region of its own, the request opens a second region of the same size, the next step's block takes the
lower of the two and both stay resident).

What the first step's outside requests can use is decided at set-up: ORT's training ``Module`` (onnxruntime 1.19,
``training_api/module.cc``) allocates one zeroed gradient accumulation buffer per trainable parameter from the
training session's arena, at construction, in the order of the parameters among the graph's inputs. The free
chunks those buffers leave are all the first step has outside the pattern, and the kernels' scratch comes from
there: ``ConvGrad`` takes an im2col buffer of ``C/group · kh · kw · OH · OW`` floats (and a bias row beside it
while it is held), ``Conv`` a full-expansion buffer of the same size when it has more filters than output pixels.
Measured (ORT arena log, tools/arena_regions.py): wide_resnet_s ``auto --exact`` left 372 and 320 KiB after its
buffers (set-up regions of 1, 2 and 4 MiB); the first 450 KiB request opened the second 32 MiB region and the
growth was 45.4 MiB. With the parameters listed so that the buffers open an 8 MiB region almost empty, the
3.5 MiB im2col buffers fit beside the block and the growth is 26.8 MiB, same losses.

The pass simulates the arena's set-up (``setup_free_chunks``) for the graph's order and, when its largest free
chunk is less than ``MARGIN`` times the largest scratch request it predicts (``largest_scratch``; below twice it
even that request alone takes a whole chunk and the next one finds nothing), searches parameter orders (seeded
shuffles) for one that leaves a larger chunk, and lists the parameters and their accumulation buffers in that
order. Twice the scratch is the least it accepts, not what it aims for: the model sees only the largest
convolution scratch, and the step makes other requests outside the pattern beside it. Measured (lossy
``auto --budget 9.6MiB`` on wide_resnet_s, ORT arena log): an order leaving 1,844,736 B against a 921,600 B
im2col request (2.002×) still had a 400-byte request of the first step open the second 16 MiB region (growth
27.9 MiB); an order leaving 8,380,672 B (9.1×) did not (growth 18.9 MiB, same losses). A larger free chunk
costs no resident memory (the region's untouched pages are never faulted in). Nothing else
changes: the same nodes, the same values, the same bits; the figures under onnxcomp's own settings (arena off)
cannot move. Where no order helps (the buffers are too small to open a region that large: densenet_s,
leaky_vgg), the graph is left as it is.

The order is a reliance on ORT 1.19's Module and BFC arena (stated here and measured, not an ONNX guarantee).
ORT's ``EvalStep`` feeds the parameters in the *training* graph's order to the eval graph's parameter inputs,
so an eval model must list them in the same order: ``align_eval_inputs`` does that, and transform writes the
training graph reordered only into an artifact directory, whose eval model it aligns (transform.py).
"""
from __future__ import annotations

import math
import random
from collections.abc import Sequence

import onnx
import onnx_ir as ir

from .base import OnnxcompPass, PassOutcome
from .editor import static_shape
from .records import PassRecord

ACCUMULATION_SUFFIX = "_grad.accumulation.buffer"   # onnxblock's name for a parameter's gradient buffer input
_MIN_ALLOCATION = 256          # BFCArena::kMinAllocationSize: every request is rounded up to it
_INITIAL_REGION = 1 << 20      # the arena's initial_chunk_size_bytes default (1 MiB); the growth size doubles
_MAX_DEAD = 128 << 20          # max_dead_bytes_per_chunk default: a chunk is also split when this much would rest
_TRIES = 4000                  # seeded shuffles tried (a few ms each on the suite's 26-62 parameters)
MARGIN = 4                     # free chunk aimed for, in largest-scratch requests (twice is the least accepted)


def parameters(graph: ir.Graph) -> list[ir.Value]:
    """The graph inputs that have a gradient accumulation buffer input, in graph order."""
    names = {v.name for v in graph.inputs}
    return [v for v in graph.inputs if v.name and v.name + ACCUMULATION_SUFFIX in names]


def _nbytes(value: ir.Value) -> int | None:
    shape = static_shape(value)
    if shape is None or value.dtype is None:
        return None
    return int(value.dtype.itemsize) * math.prod(shape)


def setup_free_chunks(sizes: Sequence[int]) -> list[int]:
    """Free chunk sizes (largest first) a fresh ORT BFC arena (kNextPowerOfTwo, 1 MiB initial region) holds
    after allocating ``sizes`` bytes in order and freeing nothing: best fit over the free chunks, a chunk split
    only when the rest is at least the request (or 128 MiB), a new region of the current growth size when nothing fits (the
    growth size doubles until the request fits, and doubles after a region whose opening did not need that)."""
    return setup_arena(sizes)[0]


def setup_arena(sizes: Sequence[int]) -> tuple[list[int], int]:
    """``setup_free_chunks`` and the arena's growth size after it (the size of the next region it opens)."""
    free: list[int] = []
    grow = _INITIAL_REGION
    for size in sizes:
        need = max(_MIN_ALLOCATION, -(-size // _MIN_ALLOCATION) * _MIN_ALLOCATION)
        fits = [c for c in free if c >= need]
        if fits:
            chunk = min(fits)
            free.remove(chunk)
        else:
            increased = False
            while need > grow:
                grow *= 2
                increased = True
            chunk = grow
            if not increased:
                grow *= 2
        if chunk - need >= need or chunk - need >= _MAX_DEAD:
            free.append(chunk - need)
    return sorted(free, reverse=True), grow


def largest_scratch(graph: ir.Graph) -> int:
    """The largest single scratch request (bytes) ORT 1.19's CPU convolution kernels make from the arena in a
    step of ``graph``: ``ConvGrad``'s im2col buffer (``C/group · ∏kernel · ∏output`` floats, kept while its bias
    row is taken) and ``Conv``'s full-expansion buffer (the same size, when a group has more filters than output
    pixels: MLAS ``MlasConvPrepare``). 0 when the graph has neither with static shapes."""
    largest = 0
    for node in graph:
        if node.op_type not in ("Conv", "ConvGrad") or node.domain not in ("", "ai.onnx", "com.microsoft"):
            continue
        if node.op_type == "ConvGrad":
            dy, w = static_shape(node.inputs[0]), static_shape(node.inputs[2] if len(node.inputs) > 2 else None)
        else:
            w, dy = static_shape(node.inputs[1] if len(node.inputs) > 1 else None), static_shape(node.outputs[0])
        if dy is None or w is None or len(dy) < 3 or len(w) < 3:
            continue
        attr = node.attributes.get("group")
        group = attr.as_int() if attr is not None else 1
        columns = math.prod(w[1:]) * math.prod(dy[2:])
        if node.op_type == "ConvGrad" or w[0] // max(group, 1) > math.prod(dy[2:]):
            largest = max(largest, 4 * columns)
    return largest


def choose_order(sizes: Sequence[int], need: int, tries: int = _TRIES, seed: int = 0,
                 target: int | None = None) -> list[int] | None:
    """Indices of ``sizes`` in an order whose set-up leaves a free chunk of at least ``need`` bytes, or None when
    neither the graph's order nor any of ``tries`` seeded shuffles does. The graph's order when it leaves
    ``target`` bytes (default ``need``); else the first shuffle that does, else the order leaving the largest
    chunk (the graph's order on ties): room beyond ``need`` is what other requests of the step outside the
    pattern find (see the module docstring)."""
    target = need if target is None else max(need, target)
    order = list(range(len(sizes)))
    best_top, best = max(setup_free_chunks(sizes), default=0), order[:]
    if best_top >= target:
        return best
    rng = random.Random(seed)
    for _ in range(tries):
        rng.shuffle(order)
        top = max(setup_free_chunks([sizes[i] for i in order]), default=0)
        if top > best_top:
            best_top, best = top, order[:]
            if top >= target:
                break
    return best if best_top >= need else None


class GradBufferOrderPass(OnnxcompPass):
    """Lists the parameters (and their gradient accumulation buffers) in an order whose set-up leaves ORT's arena
    a free chunk of ``MARGIN`` times the step's largest convolution scratch, or as close to it as the search gets
    (at least twice; see the module docstring). One record."""

    name = "grad_buffer_order"
    full_check = False   # only the order of graph inputs changes

    def call(self, model: ir.Model) -> PassOutcome:
        graph = model.graph
        outcome = PassOutcome(model, False)
        params = parameters(graph)
        sizes = [_nbytes(p) for p in params]
        scratch = largest_scratch(graph)
        if len(params) < 2 or scratch == 0 or any(s is None for s in sizes):
            return outcome
        need = 2 * scratch
        before = max(setup_free_chunks(sizes), default=0)
        order = choose_order(sizes, need, target=MARGIN * scratch)
        if order is None or order == list(range(len(params))):
            return outcome
        inputs = list(graph.inputs)
        by_name = {v.name: v for v in inputs}
        new_params = [params[i] for i in order]
        slots = iter(new_params)
        buffers = iter(by_name[p.name + ACCUMULATION_SUFFIX] for p in new_params)
        param_set = set(params)
        buffer_set = {by_name[p.name + ACCUMULATION_SUFFIX] for p in params}
        reordered = [next(slots) if v in param_set else next(buffers) if v in buffer_set else v for v in inputs]
        graph.inputs.clear()
        graph.inputs.extend(reordered)
        after = max(setup_free_chunks([sizes[i] for i in order]))
        outcome.records.append(PassRecord("moved", self.name, "parameter order", {
            "pass": self.name, "parameters": [p.name for p in new_params],
            "largest_scratch_bytes": scratch, "free_chunk_target": MARGIN * scratch,
            "free_chunk_before": before, "free_chunk_after": after,
            "why": "ORT's Module allocates the gradient buffers from the training session's arena in this order "
                   "at set-up; the free chunk they leave must take the first step's convolution scratch, or the "
                   "arena opens a second region the size of the memory pattern's block (held twice)"}))
        outcome.modified = True
        return outcome


def align_eval_inputs(train: onnx.ModelProto, eval_model: onnx.ModelProto) -> bool:
    """List ``eval_model``'s parameter inputs (those that are also parameters of ``train``) in ``train``'s order,
    in place; other inputs keep their places. ORT's EvalStep feeds the training graph's parameter order to the
    eval graph's parameter inputs. Returns whether anything moved."""
    train_names = {i.name for i in train.graph.input}
    train_order = [i.name for i in train.graph.input if i.name + ACCUMULATION_SUFFIX in train_names]
    rank = {n: k for k, n in enumerate(train_order)}
    inputs = []
    for i in eval_model.graph.input:     # copies: the repeated field is cleared below
        c = onnx.ValueInfoProto()
        c.CopyFrom(i)
        inputs.append(c)
    slots = [k for k, i in enumerate(inputs) if i.name in rank]
    wanted = sorted((inputs[k] for k in slots), key=lambda i: rank[i.name])
    if [inputs[k].name for k in slots] == [i.name for i in wanted]:
        return False
    for k, w in zip(slots, wanted):
        inputs[k] = w
    del eval_model.graph.input[:]
    eval_model.graph.input.extend(inputs)
    return True
