"""Pass: a chain of units from the graph's input — layers ``Conv [→ BatchNorm] [→ ReLU | LeakyReLU]
[→ MaxPool]`` (VGG's two-conv blocks included) and single-entry/single-exit blocks (residual blocks: a branch
Conv→BN→ReLU→Conv→BN beside the identity or a 1×1 Conv+BN downsample, joined by Add [→ ReLU]) — run in batch
chunks in forward and in backward, holding only the input, the per-channel BatchNorm statistics and the chain's
output.

Why: passes/chunk_input_block.py chunks the first layer only. On nets whose second, third… layer still works
at full resolution (VGG-like stages of two convs before the first pool, LeakyReLU stems), the largest forward
op's working set (its input, output and BatchNorm output) stays a floor no per-stash option reaches: the
lossy ratio was capped at 2.5–3.8× on the suite nets (docs/notes/suitelossy.md). On residual nets the same
holds for the first stage's blocks: ResNet-18's ``layer1`` backward at a large batch holds three full-batch
gradient maps (the residual stream's gradient, BatchNorm backward's output, ConvGrad's decoded input) that no
per-stash technique reduces. Chunking the batch through the whole high-resolution part removes that floor,
forward and backward.

The chain is a DAG of forward ops (Conv, BatchNormInternal, Relu/LeakyRelu, MaxPool, Add) in topological order,
found by structure (never by names): a block is grown from the chain's output op by op until its open tensors
narrow to one again (``_grow_block``). The rewrite interprets that DAG per chunk, forward and reverse-mode,
computing only the tensors a pass needs (gradients fan in with Add where a tensor has two readers).

Batch coupling: only BatchNorm couples the images of a batch. Everything else in the chain is per image, so a
BN-free chain is a plain per-chunk loop (the forward is bit-identical to ORT's: every op works image by image;
the weight gradients are sums over the chunks, i.e. rounded in another order). With B BatchNorm layers:

    forward, statistics   for each BN j (in topological order): per chunk, the chain up to BN j's input with the
                          statistics of the BNs before it (already merged), then its per-channel mean and
                          variance, merged exactly over uneven chunks (w_c = n_c / N):
                          mean = Σ w_c m_c,  var = Σ w_c (v_c + (m_c − mean)²)
    forward, output       per chunk the whole chain (BN as x·s + t); the output is the Concat of the chunks
    backward, sums        for each BN j (reverse topological order): per chunk recompute what is needed,
                          back-propagate from the chunk of dT to BN j's output (BNs after it with their sums
                          known), accumulate Σg_j and Σg_j·x̂_j
    backward, final       per chunk recompute, back-propagate to the input: dx_j = γ/σ (g − Σg/M − x̂·Σg·x̂/M)
                          at every BN, ConvGrad per conv (dW, db summed over the chunks, dX below)
    dγ_j = Σg_j·x̂_j, dβ_j = Σg_j

Cost: the chain's forward runs (B + 1) times in forward and (B + 1) times in backward instead of once: the
early, cheap layers. The running statistics of every BN layer are updated as ORT's kernel does, through a clone
of its BatchNormInternal fed a two-sample stand-in (chunk_input_block's ``_update_running_statistics``).

Ordering: every chunk's input slice reads ``gate(X, after=previous chunk's result)``, so one chunk's
temporaries are alive at a time under both ORT execution orders; backward chunks wait on dT the same way.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np
import onnx_ir as ir

from .base import OnnxcompPass, PassOutcome, Skipped, even_bounds
from .chunk_input_block import ConvLayer, _only_reader, _static, _take_over, _update_running_statistics
from .editor import IrGraphEditor, ir_taken_names, unique_name
from .records import PassRecord

PATTERN = ("(Conv [→ BatchNorm] [→ Relu|LeakyRelu] [→ MaxPool] | single-entry/single-exit block joined by Add)+ "
           "from the graph input")
F32, I64 = ir.DataType.FLOAT, ir.DataType.INT64
_ACTS = {"Relu": "ReluGrad", "LeakyRelu": "LeakyReluGrad"}


ChainLayer = ConvLayer


@dataclass
class ResidualBlock:
    """A single-entry/single-exit block of forward ops (topological order) joined by an Add, e.g. a residual
    block: its input is the chain's output before it, its output the one tensor leaving it."""
    nodes: list[ir.Node]
    input: ir.Value

    @property
    def forward(self) -> list[ir.Node]:
        return list(self.nodes)

    @property
    def output(self) -> ir.Value:
        return self.nodes[-1].outputs[0]

    @property
    def batchnorms(self) -> int:
        return sum(n.op_type == "BatchNormInternal" for n in self.nodes)

    @property
    def bn(self) -> ir.Node | None:
        return next((n for n in self.nodes if n.op_type == "BatchNormInternal"), None)

    @property
    def pool(self) -> ir.Node | None:
        return next((n for n in self.nodes if n.op_type == "MaxPool"), None)


@dataclass
class InputChain:
    """Units (layers, blocks) in order from the graph input; the chain's output is the last unit's output."""
    layers: list[ChainLayer | ResidualBlock] = field(default_factory=list)

    @property
    def forward(self) -> list[ir.Node]:
        return [n for layer in self.layers for n in layer.forward]

    @property
    def backward(self) -> list[ir.Node]:
        """The chain's backward ops (every op downstream of the output's gradient up to the parameters'
        gradients), in graph order."""
        return _backward_nodes(self)[0]

    @property
    def output(self) -> ir.Value:
        return self.layers[-1].output

    @property
    def conv(self) -> ir.Node:
        return self.layers[0].conv

    @property
    def batchnorms(self) -> int:
        return sum(layer.batchnorms for layer in self.layers)


def _follow(value: ir.Value, ops: tuple[str, ...]) -> ir.Node | None:
    """The one forward reader of ``value`` (slot 0) among ``ops``; None when there is none or several."""
    fwd = [u.node for u in value.uses() if u.node.op_type in ops and u.idx == 0
           and u.node.domain in ("", "com.microsoft")]
    return fwd[0] if len(fwd) == 1 else None


def _match_layer(conv: ir.Node, first: bool) -> ChainLayer | str:
    x_in, weight = conv.inputs[:2]
    if conv.attributes.get_string("auto_pad", "NOTSET") != "NOTSET":
        return "auto_pad conv (not handled)"
    if _static(x_in) is None or len(_static(x_in)) != 4 or _static(conv.outputs[0]) is None:
        return "input or output shape not static 4-D"
    grads = [u.node for u in weight.uses() if u.node.op_type == "ConvGrad" and u.idx == 2]
    if len(grads) != 1 or grads[0].inputs[1] is not x_in:
        return "not one ConvGrad reading the conv's input and weight"
    conv_grad = grads[0]
    needs_dx = bool(conv_grad.outputs[0].name)
    if first and needs_dx:
        return "the input's gradient is needed"
    if not first and not needs_dx:
        return "ConvGrad without input gradient inside the chain"
    layer = ChainLayer(conv, conv_grad)
    value = conv.outputs[0]
    node = _follow(value, ("BatchNormInternal",))
    if node is not None and node.attributes.get_int("training_mode", 0) == 1 \
            and node.inputs[1] is not None and _static(node.inputs[1]) is not None:
        layer.bn, value = node, node.outputs[0]
    node = _follow(value, tuple(_ACTS))
    if node is not None:
        layer.act, value = node, node.outputs[0]
    node = _follow(value, ("MaxPool",))
    if node is not None and len(node.outputs) > 1 and node.outputs[1].name:
        layer.pool = node
    # The backward counterparts, top down.
    if layer.pool is not None:
        layer.pool_grad = _only_reader(layer.pool.outputs[1], "MaxPoolGrad", 1)
    if layer.act is not None:
        grad_op = _ACTS[layer.act.op_type]
        layer.act_grad = (_only_reader(layer.act.outputs[0], grad_op, 1)
                          or _only_reader(layer.act.inputs[0], grad_op, 1))
    if layer.bn is not None:
        layer.bn_grad = _only_reader(conv.outputs[0], "BatchNormalizationGrad", 1)
    if (layer.pool and not layer.pool_grad) or (layer.act and not layer.act_grad) or (layer.bn and not layer.bn_grad):
        return "the layer's backward ops are not one MaxPoolGrad / activation grad / BatchNormalizationGrad each"
    bwd = layer.backward
    for upper, lower in zip(bwd, bwd[1:]):
        g = upper.outputs[0]
        if lower.inputs[0] is not g or len(g.uses()) != 1:
            return f"{upper.op_type}'s gradient is read by more than the next op of the layer"
    return layer


_BLOCK_OPS = ("Conv", "BatchNormInternal", "Relu", "LeakyRelu", "MaxPool", "Add")
MAX_BLOCK_OPS = 32


def _counterpart(node: ir.Node) -> ir.Node | None:
    """The backward op of a forward op of the chain (None for Add, whose gradient ORT passes on by Identity)."""
    op = node.op_type
    if op == "Conv":
        grads = [u.node for u in node.inputs[1].uses() if u.node.op_type == "ConvGrad" and u.idx == 2
                 and u.node.inputs[1] is node.inputs[0]]
        return grads[0] if len(grads) == 1 else None
    if op == "BatchNormInternal":
        return _only_reader(node.inputs[0], "BatchNormalizationGrad", 1)
    if op in _ACTS:
        return _only_reader(node.outputs[0], _ACTS[op], 1) or _only_reader(node.inputs[0], _ACTS[op], 1)
    if op == "MaxPool" and len(node.outputs) > 1 and node.outputs[1].name:
        return _only_reader(node.outputs[1], "MaxPoolGrad", 1)
    return None


def _activations(node: ir.Node) -> list[ir.Value]:
    """The inputs of a chain op that carry the batch (the rest are parameters)."""
    return list(node.inputs[:2]) if node.op_type == "Add" else [node.inputs[0]]


def _output_gradient(chain: InputChain) -> ir.Value | None:
    """dT: the gradient arriving at the chain's output (the dY input of its producer's backward op)."""
    top = _counterpart(chain.output.producer())
    return top.inputs[0] if top is not None else None


def _param_gradients(forward: list[ir.Node]) -> set[ir.Value]:
    """The parameters' gradients of the chain's ops (ConvGrad's dW, dB; BatchNormalizationGrad's dγ, dβ)."""
    out = set()
    for node in forward:
        grad = _counterpart(node) if node.op_type in ("Conv", "BatchNormInternal") else None
        if grad is not None:
            out.update(v for v in grad.outputs[1:] if v.name)
    return out


def _backward_nodes(chain: InputChain) -> tuple[list[ir.Node], str | None]:
    """The ops downstream of dT up to the parameters' gradients, in graph order, and why they cannot be
    replaced (None if they can): only the forward ops' backward counterparts, ORT's Identity (an Add's
    gradient) and Sum (a tensor read twice) may be among them, reading only dT, each other's outputs, the
    chain's forward tensors and parameters."""
    d_top = _output_gradient(chain)
    if d_top is None:
        return [], f"{chain.output.name}: no backward op reads it (an Add's output: the chain ends before)"
    forward = chain.forward
    stops = _param_gradients(forward)
    seen: dict[ir.Node, None] = {}
    stack = [d_top]
    while stack:
        for use in stack.pop().uses():
            if use.node not in seen:
                seen[use.node] = None
                stack.extend(v for v in use.node.outputs if v.name and v not in stops)
    graph = chain.conv.graph
    order = {n: i for i, n in enumerate(graph)} if graph is not None else {}
    nodes = sorted(seen, key=lambda n: order.get(n, 0))
    allowed = {_counterpart(n) for n in forward} - {None}
    fwd_values = {v for n in forward for v in n.outputs} | {chain.conv.inputs[0]}
    produced = {v for n in nodes for v in n.outputs} | {d_top}
    for node in nodes:
        if node not in allowed and not (node.op_type in ("Identity", "Sum") and node.domain == ""):
            return nodes, f"{node.name} ({node.op_type}) is downstream of the chain's output gradient"
        for v in node.inputs:
            if v is not None and v not in produced and v not in fwd_values and v.producer() is not None:
                return nodes, f"{node.name} reads {v.name} from outside the chain"
    for node in forward:
        grad = _counterpart(node)
        if node.op_type != "Add" and grad not in seen:
            return nodes, f"{node.name}: its backward op is not downstream of the chain's output gradient"
        if node.op_type == "Conv" and node is not chain.conv and not grad.outputs[0].name:
            return nodes, f"{node.name}: ConvGrad without input gradient inside the chain"
    return nodes, None


def _closed(chain: InputChain) -> str | None:
    """Why the chain cannot be cut out of the graph (None if it can): every forward tensor but the output is
    read only inside the chain (forward and backward), and its backward is closed (``_backward_nodes``)."""
    backward, why = _backward_nodes(chain)
    if why is not None:
        return why
    own = set(chain.forward) | set(backward)
    for node in chain.forward:
        for out in node.outputs:
            if out.name and out is not chain.output and any(u.node not in own for u in out.uses()):
                return f"{out.name} is read outside the chain"
    return None


def _forward_readers(value: ir.Value) -> list[ir.Node]:
    return [u.node for u in value.uses() if u.node.op_type in _BLOCK_OPS and u.node.domain in ("", "com.microsoft")]


def _block_op(node: ir.Node, produced: set[ir.Value]) -> str | None:
    """Why ``node`` cannot join a block whose tensors so far are ``produced`` (None if it can)."""
    acts = _activations(node)
    if any(v is None or v not in produced for v in acts):
        return "reads a tensor from outside the block"
    if any(v is not None and v.producer() is not None for v in node.inputs[len(acts):]):
        return "a parameter input is computed"
    if _static(node.outputs[0]) is None or any(_static(v) is None for v in acts):
        return "shape not static"
    op = node.op_type
    if op == "Conv" and node.attributes.get_string("auto_pad", "NOTSET") != "NOTSET":
        return "auto_pad conv (not handled)"
    if op == "BatchNormInternal" and (node.attributes.get_int("training_mode", 0) != 1 or node.inputs[1] is None
                                      or _static(node.inputs[1]) is None):
        return "BatchNorm not in training mode with a static scale"
    if op == "Add" and _static(acts[0]) != _static(acts[1]):
        return "a broadcasting Add"
    if op != "Add" and _counterpart(node) is None:
        return "not one backward op for it"
    return None


def _grow_block(entry: ir.Value, order: dict[ir.Node, int]) -> ResidualBlock | str:
    """The smallest single-entry/single-exit block of forward ops from ``entry`` that contains a join (an
    Add): ops are taken in graph order until the tensors with readers still outside the block narrow to one,
    the block's output; a ReLU/LeakyReLU that is that tensor's only reader joins too (a residual block's
    post-activation)."""
    produced, nodes, joined = {entry}, [], False
    while True:
        open_ = [v for v in produced if any(r not in nodes for r in _forward_readers(v))]
        if joined and len(open_) == 1:
            break
        if not open_:
            return "no single tensor leaves the block"
        if len(nodes) >= MAX_BLOCK_OPS:
            return f"no single exit within {MAX_BLOCK_OPS} ops"
        candidates = sorted({r for v in open_ for r in _forward_readers(v) if r not in nodes},
                            key=lambda n: order.get(n, 0))
        reasons = [(n, _block_op(n, produced)) for n in candidates]
        ready = [n for n, why in reasons if why is None]
        if not ready:
            node, why = reasons[0]
            return f"{node.name}: {why}"
        nodes.append(ready[0])
        produced.add(ready[0].outputs[0])
        joined |= ready[0].op_type == "Add"
    (exit_,) = open_
    readers = _forward_readers(exit_)
    if len(readers) == 1 and readers[0].op_type in _ACTS and _block_op(readers[0], produced) is None:
        nodes.append(readers[0])
    elif exit_.producer() is not None and exit_.producer().op_type == "Add":
        # A pre-activation block (WRN, ResNet v2) exits at its Add, whose gradient no backward op of its own
        # reads (ORT passes it on by Identity), so a chain cannot end there: the next block's pre-activation
        # BatchNorm [→ ReLU] joins, where it is the sum's only reader; the chain's output is then its output,
        # whose gradient the activation's (or BatchNorm's) backward op reads.
        for kinds in (("BatchNormInternal",), tuple(_ACTS)):
            readers = _forward_readers(nodes[-1].outputs[0])
            if len(readers) != 1 or readers[0].op_type not in kinds or _block_op(readers[0], produced) is not None:
                break
            nodes.append(readers[0])
            produced.add(readers[0].outputs[0])
    return ResidualBlock(nodes, entry)


def find_input_chains(graph: ir.Graph, max_layers: int | None = None, blocks: bool = True
                      ) -> tuple[list[InputChain], list[Skipped]]:
    """For every Conv reading a graph input (whose gradient nobody needs): the longest chain of units from
    it, at most ``max_layers``, that can be cut out of the graph, and why the next unit was not taken. A unit
    is a layer where the chain's output is read by one Conv, else (``blocks``) a single-entry/single-exit
    block such as a residual block."""
    inputs = set(graph.inputs)
    order = {n: i for i, n in enumerate(graph)}
    chains, skipped = [], []
    for conv in [n for n in graph if n.op_type == "Conv" and n.domain == "" and n.inputs[0] in inputs]:
        chain, why = InputChain(), None
        first = _match_layer(conv, first=True)
        if isinstance(first, str):
            skipped.append(Skipped(conv.name, PATTERN, f"{conv.name}: {first}"))
            continue
        why = _closed(InputChain([first]))
        if why is not None:
            skipped.append(Skipped(conv.name, PATTERN, f"{conv.name}: {why}"))
            continue
        chain = InputChain([first])
        while max_layers is None or len(chain.layers) < max_layers:
            unit, why = None, None
            readers = [u.node for u in chain.output.uses() if u.node.op_type == "Conv" and u.idx == 0]
            if len(readers) == 1 and len(chain.output.uses()) <= 4:
                layer = _match_layer(readers[0], first=False)
                why = (f"{readers[0].name}: {layer}" if isinstance(layer, str)
                       else _closed(InputChain([*chain.layers, layer])))
                unit = layer if why is None else None
            else:
                why = f"{chain.output.name}: not read by one Conv"
            if unit is None and blocks:
                block = _grow_block(chain.output, order)
                if isinstance(block, str):
                    why = f"{why}; no block from it: {block}"
                else:
                    closed = _closed(InputChain([*chain.layers, block]))
                    if closed is None:
                        unit, why = block, None
                    else:
                        why = f"{why}; the block from it: {closed}"
            if unit is None:
                break
            chain = InputChain([*chain.layers, unit])
        chains.append(chain)
        if why is not None:
            skipped.append(Skipped(conv.name, PATTERN, f"the chain ends: {why}"))
    return chains, skipped


def chain_working_sets(chain: InputChain) -> list[int]:
    """Per unit, the bytes its unchunked forward holds at once: a conv's input, its output and, with a
    BatchNorm, the BatchNorm output beside it (the largest over a block's convs, plus the block's input where
    the residual path keeps it alive beside them)."""
    out = []
    for unit in chain.layers:
        best = 0
        for conv in [n for n in unit.forward if n.op_type == "Conv"]:
            x, y = _static(conv.inputs[0]), _static(conv.outputs[0])
            bn = any(r.op_type == "BatchNormInternal" for r in _forward_readers(conv.outputs[0]))
            size = int(np.prod(x)) + int(np.prod(y)) * (2 if bn else 1)
            if isinstance(unit, ResidualBlock) and conv.inputs[0] is not unit.input:
                size += int(np.prod(_static(unit.input)))
            best = max(best, 4 * size)
        out.append(best)
    return out


class ChunkedInputChainPass(OnnxcompPass):
    """``chunks``: batch chunks (clipped to the batch); ``layers``: at most this many units (layers, blocks)
    from the input; ``blocks``: whether single-entry/single-exit blocks (residual blocks) may join the chain.
    Not exact (the weight gradients, and BatchNorm's statistics, are summed in another order)."""

    name = "chunk_input_chain"

    def __init__(self, chunks: int = 8, layers: int | None = None, blocks: bool = True) -> None:
        if chunks < 2:
            raise ValueError(f"chunk_input_chain: chunks must be ≥ 2 (got {chunks})")
        if layers is not None and layers < 1:
            raise ValueError(f"chunk_input_chain: layers must be ≥ 1 (got {layers})")
        self.chunks, self.layers, self.blocks = chunks, layers, blocks

    def call(self, model: ir.Model) -> PassOutcome:
        outcome = PassOutcome(model, False)
        chains, outcome.skipped = find_input_chains(model.graph, self.layers, self.blocks)
        for chain in chains:
            batch = _static(chain.conv.inputs[0])[0]
            k = min(self.chunks, batch)
            if k < 2:
                outcome.skipped.append(Skipped(chain.conv.name, PATTERN, "batch of 1: nothing to chunk"))
                continue
            detail = _rewrite(model.graph, chain, even_bounds(batch, k))
            outcome.records.append(PassRecord("chunked", self.name, chain.conv.name, detail))
            outcome.modified = True
        return outcome


@dataclass
class _BnState:
    """Per BatchNorm: its merged statistics once known (forward), its sums (backward)."""
    node: ir.Node
    channels: int
    scale: ir.Value | None = None
    shift: ir.Value | None = None
    mean4: ir.Value | None = None
    inv4: ir.Value | None = None
    sums: tuple[ir.Value, ir.Value] | None = None     # Σg, Σg·x̂
    mean_g: ir.Value | None = None
    mean_gx: ir.Value | None = None

    @property
    def c4(self) -> list[int]:
        return [1, self.channels, 1, 1]


class _Editor(IrGraphEditor):
    """Names ``<prefix>_<base>_<k>`` with a counter per base: the chain makes thousands of nodes from a few
    bases, and probing ``base_1, base_2, …`` from the start each time grows with their square."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self._counts: dict[str, int] = {}

    def name(self, base: str) -> str:
        k = self._counts.get(base, 0)
        self._counts[base] = k + 1
        return unique_name(f"{self.prefix}{self.sep}{base}" + (f"_{k}" if k else ""), self.taken)


class _Emitter:
    """Emits the chain's ops per chunk: a forward that makes only the tensors asked for, and a reverse-mode
    backward over the chain's DAG."""

    def __init__(self, graph: ir.Graph, chain: InputChain, bounds: list[int]) -> None:
        self.chain, self.bounds = chain, bounds
        base = chain.conv.name.replace("/", "_").strip("_") or "input_chain"
        self.ed = _Editor(graph, ir_taken_names(graph), prefix=f"onnxcomp_inchain_{base}")
        self.x_in = chain.conv.inputs[0]
        self.in_shape = _static(self.x_in)
        self.nodes = chain.forward
        self.grad_of = {n: _counterpart(n) for n in self.nodes}
        self.bns = {n: _BnState(n, _static(n.inputs[0])[1]) for n in self.nodes if n.op_type == "BatchNormInternal"}
        self.readers: dict[ir.Value, list[ir.Node]] = {}
        for node in self.nodes:
            for v in _activations(node):
                self.readers.setdefault(v, []).append(node)

    def n(self, c: int) -> int:
        return self.bounds[c + 1] - self.bounds[c]

    def shape(self, value: ir.Value, n: int) -> list[int]:
        return [n, *_static(value)[1:]]

    def const_f(self, base: str, value: float) -> ir.Value:
        return self.ed.initializer(self.ed.name(base), np.asarray(value, dtype=np.float32))

    def slice_batch(self, value: ir.Value, c: int, shape: list[int], base: str) -> ir.Value:
        ed, a, z = self.ed, self.bounds[c], self.bounds[c + 1]
        start, end, axis = (ed.shared_const(ed.name(f"{base}{c}_{k}"), [v]) for k, v in (("a", a), ("z", z), ("ax", 0)))
        return ed.op("Slice", [value, start, end, axis], f"{base}{c}", F32, [z - a, *shape[1:]])

    def chunk_input(self, c: int, after: ir.Value | list[ir.Value] | None) -> ir.Value:
        """Chunk ``c`` of the input, read through a view that cannot exist before every ``after`` value."""
        view = self.x_in
        if after is not None:
            after = after if isinstance(after, list) else [after]
            zero = self.ed.zero_after_all(after, F32) if len(after) > 1 else None
            view = self.ed.gate(self.x_in, after[0], shape=self.in_shape, elem=F32, zero=zero)
        return self.slice_batch(view, c, self.in_shape, "x")

    def descendants(self, value: ir.Value) -> set[ir.Value]:
        out, stack = set(), [value]
        while stack:
            v = stack.pop()
            if v not in out:
                out.add(v)
                stack.extend(r.outputs[0] for r in self.readers.get(v, []))
        return out

    def forward(self, c: int, after: ir.Value | list[ir.Value] | None, wanted: list[ir.Value],
                indices: set[ir.Node]) -> tuple[dict[ir.Value, ir.Value], dict[ir.Node, ir.Value], list[ir.Value]]:
        """The chain on chunk ``c``, only the ops that ``wanted`` (and the MaxPool indices of ``indices``) need:
        ORT keeps an output nobody reads until the end of the step, so no pass may make one. Returns the
        chunk's tensors by the original tensor, the indices by pool, and the outputs made but not read (a
        MaxPool's output where only its indices are wanted: the caller's next chunk waits on them)."""
        need: set[ir.Node] = set()
        stack = [v.producer() for v in wanted if v is not self.x_in] + list(indices)
        while stack:
            node = stack.pop()
            if node not in need:
                need.add(node)
                stack.extend(v.producer() for v in _activations(node) if v is not self.x_in)
        read = set(wanted) | {v for node in need for v in _activations(node)}
        ed, n = self.ed, self.n(c)
        env = {self.x_in: self.chunk_input(c, after)}
        pool_idx: dict[ir.Node, ir.Value] = {}
        unread: list[ir.Value] = []
        for node in self.nodes:
            if node not in need:
                continue
            op, out = node.op_type, node.outputs[0]
            shape = self.shape(out, n)
            x = env[node.inputs[0]]
            if op == "Conv":
                y = ed.clone(node, [x, *node.inputs[1:]], [(ed.name("conv"), F32, shape)],
                             name=ed.name("conv_node")).outputs[0]
            elif op == "BatchNormInternal":
                st = self.bns[node]
                y = ed.op("Add", [ed.op("Mul", [x, st.scale], "bn_mul", F32, shape), st.shift], "bn_add", F32, shape)
            elif op in _ACTS:
                y = ed.clone(node, [x], [(ed.name("act"), F32, shape)], name=ed.name("act_node")).outputs[0]
            elif op == "MaxPool":
                outs = [(ed.name("pool"), F32, shape)]
                if node in indices:
                    outs.append((ed.name("pool_idx"), I64, shape))
                pool = ed.clone(node, [x], outs, name=ed.name("pool_node"))
                y = pool.outputs[0]
                if node in indices:
                    pool_idx[node] = pool.outputs[1]
                if out not in read:
                    unread.append(y)
            else:       # Add
                y = ed.op("Add", [x, env[node.inputs[1]]], "add", F32, shape)
            env[out] = y
        return env, pool_idx, unread

    def xhat(self, st: _BnState, x: ir.Value, n: int) -> ir.Value:
        full = self.shape(st.node.inputs[0], n)
        return self.ed.op("Mul", [self.ed.op("Sub", [x, st.mean4], "xc", F32, full), st.inv4], "xhat", F32, full)

    def reduce_sum(self, v: ir.Value, st: _BnState, base: str) -> ir.Value:
        axes = self.ed.shared_const("onnxcomp_axes_0_2_3", [0, 2, 3])
        return self.ed.op("ReduceSum", [v, axes], base, F32, st.c4, keepdims=1)

    def add(self, total: ir.Value | None, v: ir.Value, base: str, shape: list[int]) -> ir.Value:
        return v if total is None else self.ed.op("Add", [total, v], base, F32, shape)

    def backward(self, c: int, after: ir.Value | list[ir.Value], d_top: ir.Value, target: ir.Node | None,
                 grads: dict[ir.Node, tuple[ir.Value, ir.Value | None]]
                 ) -> tuple[ir.Value | None, dict[ir.Value, ir.Value], list[ir.Value]]:
        """Back-propagate chunk ``c`` from its slice of dT. With a ``target`` BatchNorm: return the gradient at
        its output (computing only what lies between), with the chunk's forward tensors; otherwise run to the
        input, filling ``grads`` with each conv's (dW, db) for this chunk."""
        ed, n = self.ed, self.n(c)
        need_grad = self.descendants(target.outputs[0]) if target is not None else \
            {v for node in self.nodes for v in node.outputs[:1]}
        plan, wanted, indices = [], [], set()
        for node in reversed(self.nodes):
            if node is target:
                break
            if node.outputs[0] not in need_grad:
                continue
            if not any(v in need_grad for v in _activations(node)) and not (target is None and node.op_type == "Conv"):
                continue
            plan.append(node)
            op = node.op_type
            if op in _ACTS:
                wanted.append(self.grad_of[node].inputs[1])
            elif op == "MaxPool":
                indices.add(node)
            elif op == "BatchNormInternal" or (op == "Conv" and target is None):
                wanted.append(node.inputs[0])
        if target is not None:
            wanted.append(target.inputs[0])
        env, pool_idx, unread = self.forward(c, after, wanted, indices)
        out = self.chain.output
        g = {out: self.slice_batch(d_top, c, _static(out), "dtop")}

        def accumulate(value: ir.Value, contribution: ir.Value) -> None:
            g[value] = self.add(g.get(value), contribution, "dsum", self.shape(value, n))

        for node in plan:
            op, gout, x_val = node.op_type, g[node.outputs[0]], node.inputs[0]
            gshape = self.shape(x_val, n)
            if op in _ACTS:
                grad = self.grad_of[node]
                accumulate(x_val, ed.clone(grad, [gout, env[grad.inputs[1]]], [(ed.name("dact"), F32, gshape)],
                                           name=ed.name("act_grad")).outputs[0])
            elif op == "MaxPool":
                accumulate(x_val, ed.clone(self.grad_of[node], [gout, pool_idx[node]],
                                           [(ed.name("dpool"), F32, gshape)], name=ed.name("pool_grad")).outputs[0])
            elif op == "BatchNormInternal":
                st = self.bns[node]
                xh = self.xhat(st, env[x_val], n)
                t = ed.op("Sub", [ed.op("Sub", [gout, st.mean_g], "g_c", F32, gshape),
                                  ed.op("Mul", [xh, st.mean_gx], "xhat_m", F32, gshape)], "g_cc", F32, gshape)
                accumulate(x_val, ed.op("Mul", [t, st.scale], "dx_bn", F32, gshape))
            elif op == "Add":
                accumulate(x_val, gout)
                accumulate(node.inputs[1], gout)
            elif target is not None:
                # Only the input gradient is wanted here: ConvTranspose, as ConvGrad always makes dW too (an
                # unread output, which ORT keeps until the end of the step).
                accumulate(x_val, self.input_gradient(node, gout, n))
            else:
                wshape = _static(node.inputs[1])
                conv_grad = self.grad_of[node]
                has_bias = len(conv_grad.outputs) > 2 and bool(conv_grad.outputs[2].name)
                need_dx = x_val in need_grad
                outs = [(ed.name("dx"), F32, gshape) if need_dx else None, (ed.name(f"dw{c}"), F32, wshape)]
                if has_bias:
                    outs.append((ed.name(f"db{c}"), F32, [wshape[0]]))
                grad = ed.clone(conv_grad, [gout, env[x_val], node.inputs[1]], outs, name=ed.name("conv_grad"))
                grads[node] = (grad.outputs[1], grad.outputs[2] if has_bias else None)
                if need_dx:
                    accumulate(x_val, grad.outputs[0])
        return (g[target.outputs[0]] if target is not None else None), env, unread

    def input_gradient(self, conv: ir.Node, g: ir.Value, n: int) -> ir.Value:
        """dX of a conv alone: ConvTranspose(dY, W) with the conv's strides, pads, dilations and group,
        ``output_padding`` making up the rows and columns a strided conv dropped."""
        x_shape, y_shape = _static(conv.inputs[0]), _static(conv.outputs[0])
        w_shape = _static(conv.inputs[1])
        kernel = w_shape[2:]
        rank = len(kernel)
        strides = list(conv.attributes.get_ints("strides", [1] * rank))
        dilations = list(conv.attributes.get_ints("dilations", [1] * rank))
        pads = list(conv.attributes.get_ints("pads", [0] * 2 * rank))
        extra = [x_shape[2 + d] - (strides[d] * (y_shape[2 + d] - 1) + (kernel[d] - 1) * dilations[d] + 1
                                   - pads[d] - pads[d + rank]) for d in range(rank)]
        return self.ed.op("ConvTranspose", [g, conv.inputs[1]], "dx_t", F32, [n, *x_shape[1:]], strides=strides,
                          dilations=dilations, pads=pads, group=conv.attributes.get_int("group", 1),
                          output_padding=extra)


def _rewrite(graph: ir.Graph, chain: InputChain, bounds: list[int]) -> dict:
    old_backward, why = _backward_nodes(chain)
    if why is not None:
        raise AssertionError(why)
    em = _Emitter(graph, chain, bounds)
    ed, k = em.ed, len(bounds) - 1
    batch = em.in_shape[0]
    bn_nodes = [node for node in em.nodes if node.op_type == "BatchNormInternal"]
    # ---- forward: statistics of each BN (topological order), then the output
    after: ir.Value | list[ir.Value] | None = None
    for bn in bn_nodes:
        st = em.bns[bn]
        c4 = st.c4
        mean_sum = var_sum = None
        means = []
        for c in range(k):
            n = em.n(c)
            full = em.shape(bn.inputs[0], n)
            env, _, unread = em.forward(c, after, [bn.inputs[0]], set())
            x = env[bn.inputs[0]]
            m = ed.op("ReduceMean", [x], f"mean{c}", F32, c4, axes=[0, 2, 3], keepdims=1)
            d = ed.op("Sub", [x, m], f"dev{c}", F32, full)
            v = ed.op("ReduceMean", [ed.op("Mul", [d, d], f"sq{c}", F32, full)], f"var{c}", F32, c4,
                      axes=[0, 2, 3], keepdims=1)
            wc = em.const_f(f"w{c}", n / batch)
            means.append((m, wc))
            mean_sum = em.add(mean_sum, ed.op("Mul", [m, wc], f"wmean{c}", F32, c4), "mean_sum", c4)
            var_sum = em.add(var_sum, ed.op("Mul", [v, wc], f"wvar{c}", F32, c4), "var_sum", c4)
            after = [var_sum, *unread] if unread else var_sum
        spread = None
        for c, (m, wc) in enumerate(means):
            dm = ed.op("Sub", [m, mean_sum], f"dmean{c}", F32, c4)
            spread = em.add(spread, ed.op("Mul", [ed.op("Mul", [dm, dm], f"dmean_sq{c}", F32, c4), wc],
                                          f"wdmean{c}", F32, c4), "spread", c4)
        var = ed.op("Add", [var_sum, spread], "var", F32, c4)
        eps = bn.attributes.get_float("epsilon", 1e-5)
        std = ed.op("Sqrt", [ed.op("Add", [var, em.const_f("eps", eps)], "var_eps", F32, c4)], "std", F32, c4)
        st.inv4, st.mean4 = ed.op("Reciprocal", [std], "inv_std", F32, c4), mean_sum
        shape4 = ed.shared_const(f"onnxcomp_shape_1x{st.channels}x1x1", c4)
        gamma4 = ed.op("Reshape", [bn.inputs[1], shape4], "gamma4", F32, c4)
        beta4 = ed.op("Reshape", [bn.inputs[2], shape4], "beta4", F32, c4)
        st.scale = ed.op("Mul", [gamma4, st.inv4], "scale", F32, c4)       # γ/σ, also the input gradient's factor
        st.shift = ed.op("Sub", [beta4, ed.op("Mul", [st.mean4, st.scale], "mean_scale", F32, c4)], "shift", F32, c4)
        shim = SimpleNamespace(ed=ed, b=SimpleNamespace(bn=bn), channels=st.channels)
        # The next pass waits for the running-statistics update too: it runs every step, early, and its output
        # has a reader (nothing prunes it).
        after = [st.shift, _update_running_statistics(shim, mean_sum, var)]
    out = chain.output
    out_name = out.name
    pieces = []
    for c in range(k):
        env, _, unread = em.forward(c, after, [out], set())
        pieces.append(env[out])
        after = env[out]
    concat = ed.node("Concat", pieces, [(ed.name("output"), F32, _static(out))], name=ed.name("concat"), axis=0)
    forward_nodes = list(ed.nodes)
    ed.nodes.clear()
    # ---- backward: BatchNorm sums (reverse topological order), then the gradients
    d_top = _output_gradient(chain)
    after = d_top
    for bn in reversed(bn_nodes):
        st = em.bns[bn]
        c4 = st.c4
        sg = sgx = None
        for c in range(k):
            n = em.n(c)
            g, env, unread = em.backward(c, after, d_top, bn, grads={})
            xh = em.xhat(st, env[bn.inputs[0]], n)
            sg = em.add(sg, em.reduce_sum(g, st, f"sg{c}"), "sg", c4)
            sgx = em.add(sgx, em.reduce_sum(ed.op("Mul", [g, xh], f"gx{c}", F32, em.shape(bn.inputs[0], n)), st,
                                            f"sgx{c}"), "sgx", c4)
            # Both sums taken: the chunk's maps are free. A pool output recomputed for its indices alone has
            # no other reader: ORT would keep it to the end of the step.
            after = [sg, sgx, *unread]
        count = float(batch * int(np.prod(_static(bn.inputs[0])[2:])))
        inv_m = em.const_f("inv_count", 1.0 / count)
        st.sums = (sg, sgx)
        st.mean_g = ed.op("Mul", [sg, inv_m], "mean_g", F32, c4)
        st.mean_gx = ed.op("Mul", [sgx, inv_m], "mean_gx", F32, c4)
    convs = [node for node in em.nodes if node.op_type == "Conv"]
    totals: dict[ir.Node, list[ir.Value | None]] = {conv: [None, None] for conv in convs}
    for c in range(k):
        grads: dict[ir.Node, tuple[ir.Value, ir.Value | None]] = {}
        _, _, unread = em.backward(c, after, d_top, None, grads)
        for conv, (dw, db) in grads.items():
            wshape = _static(conv.inputs[1])
            totals[conv][0] = em.add(totals[conv][0], dw, "dw_sum", wshape)
            if db is not None:
                totals[conv][1] = em.add(totals[conv][1], db, "db_sum", [wshape[0]])
        after = [v for pair in totals.values() for v in pair if v is not None] + unread
    # ---- wire in: the chain's output, the parameters' gradients; the old nodes go
    _take_over(out, concat.outputs[0])
    for conv in convs:
        conv_grad = em.grad_of[conv]
        _take_over(conv_grad.outputs[1], totals[conv][0])
        if totals[conv][1] is not None:
            _take_over(conv_grad.outputs[2], totals[conv][1])
    for bn in bn_nodes:
        st = em.bns[bn]
        shape_c = ed.shared_const(f"onnxcomp_shape_{st.channels}", [st.channels])
        sg, sgx = st.sums
        bn_grad = em.grad_of[bn]
        _take_over(bn_grad.outputs[1], ed.op("Reshape", [sgx, shape_c], "dgamma", F32, [st.channels]))
        _take_over(bn_grad.outputs[2], ed.op("Reshape", [sg, shape_c], "dbeta", F32, [st.channels]))
    backward_nodes = list(ed.nodes)
    graph.insert_before(chain.conv, forward_nodes)
    graph.insert_before(old_backward[0], backward_nodes)
    old = chain.forward + old_backward
    for node in old:
        for v in node.outputs:
            for use in list(v.uses()):
                if use.node not in old:
                    raise AssertionError(f"{v.name} still read by {use.node.name}")
    graph.remove(old, safe=False)
    units = [" → ".join(node.op_type for node in unit.forward) for unit in chain.layers]
    return {"site": f"{len(units)} unit(s) from the graph input {chain.conv.inputs[0].name}, forward and backward",
            "layers": units, "blocks": sum(isinstance(u, ResidualBlock) for u in chain.layers),
            "block": [node.name for node in chain.forward], "chunks": k, "bounds": bounds,
            "exact": False, "batchnorms": len(bn_nodes), "output": out_name,
            "dropped_stashes": [v.name for node in chain.forward for v in node.outputs
                                if v.name and v.name != out_name]}
