"""Pass: a chain of layers from the graph's input — each ``Conv [→ BatchNorm] [→ ReLU | LeakyReLU]
[→ MaxPool]``, VGG's two-conv blocks included — run in batch chunks in forward and in backward, holding only
the input, the per-channel BatchNorm statistics and the chain's (small, pooled) output.

Why: passes/chunk_input_block.py chunks the first layer only. On nets whose second, third… layer still works
at full resolution (VGG-like stages of two convs before the first pool, LeakyReLU stems), the largest forward
op's working set (its input, output and BatchNorm output) stays a floor no per-stash option reaches: the
lossy ratio was capped at 2.5–3.8× on the suite nets (docs/notes/suitelossy.md). Chunking the batch through the
whole high-resolution chain removes that floor, forward and backward.

Batch coupling: only BatchNorm couples the images of a batch. Everything else in the chain is per image, so a
BN-free chain is a plain per-chunk loop (the forward is bit-identical to ORT's: every op works image by image;
the weight gradients are sums over the chunks, i.e. rounded in another order). With B BatchNorm layers:

    forward, statistics   for each BN layer j (bottom up): per chunk, the chain up to conv_j with the
                          statistics of the BN layers below (already merged), then conv_j's per-channel mean
                          and variance, merged exactly over uneven chunks (w_c = n_c / N):
                          mean = Σ w_c m_c,  var = Σ w_c (v_c + (m_c − mean)²)
    forward, output       per chunk the whole chain (BN as x·s + t); the output is the Concat of the chunks
    backward, sums        for each BN layer j (top down): per chunk recompute the chain, back-propagate from
                          the chunk of dT to BN_j's output (BN layers above with their sums known), accumulate
                          Σg_j and Σg_j·x̂_j
    backward, final       per chunk recompute, back-propagate to the input: dx_j = γ/σ (g − Σg/M − x̂·Σg·x̂/M)
                          at every BN, ConvGrad per layer (dW, db summed over the chunks, dX to the layer below)
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
from .chunk_input_block import _only_reader, _static, _take_over, _update_running_statistics
from .editor import IrGraphEditor, ir_taken_names
from .records import PassRecord

PATTERN = "(Conv [→ BatchNorm] [→ Relu|LeakyRelu] [→ MaxPool])+ from the graph input"
F32, I64 = ir.DataType.FLOAT, ir.DataType.INT64
_ACTS = {"Relu": "ReluGrad", "LeakyRelu": "LeakyReluGrad"}


@dataclass
class ChainLayer:
    """One layer of the chain: forward nodes and their backward counterparts (None where absent)."""
    conv: ir.Node
    conv_grad: ir.Node
    bn: ir.Node | None = None
    act: ir.Node | None = None
    pool: ir.Node | None = None
    bn_grad: ir.Node | None = None
    act_grad: ir.Node | None = None
    pool_grad: ir.Node | None = None

    @property
    def forward(self) -> list[ir.Node]:
        return [n for n in (self.conv, self.bn, self.act, self.pool) if n is not None]

    @property
    def backward(self) -> list[ir.Node]:
        """Top down: the order the gradient flows through the layer."""
        return [n for n in (self.pool_grad, self.act_grad, self.bn_grad, self.conv_grad) if n is not None]

    @property
    def output(self) -> ir.Value:
        return self.forward[-1].outputs[0]


@dataclass
class InputChain:
    """Layers in order from the graph input; the chain's output is the last layer's output."""
    layers: list[ChainLayer] = field(default_factory=list)

    @property
    def forward(self) -> list[ir.Node]:
        return [n for layer in self.layers for n in layer.forward]

    @property
    def backward(self) -> list[ir.Node]:
        return [n for layer in reversed(self.layers) for n in layer.backward]

    @property
    def output(self) -> ir.Value:
        return self.layers[-1].output

    @property
    def conv(self) -> ir.Node:
        return self.layers[0].conv

    @property
    def batchnorms(self) -> int:
        return sum(layer.bn is not None for layer in self.layers)


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


def _closed(chain: InputChain) -> str | None:
    """Why the chain cannot be cut out of the graph (None if it can): every forward tensor but the output is
    read only inside the chain, and each layer's input gradient feeds only the layer below."""
    own = set(chain.forward) | set(chain.backward)
    for node in chain.forward:
        for out in node.outputs:
            if out.name and out is not chain.output and any(u.node not in own for u in out.uses()):
                return f"{out.name} is read outside the chain"
    for lower, upper in zip(chain.layers, chain.layers[1:]):
        dx = upper.conv_grad.outputs[0]
        top = lower.backward[0]
        if top.inputs[0] is not dx or len(dx.uses()) != 1:
            return f"{upper.conv.name}'s input gradient is read by more than the layer below"
    return None


def find_input_chains(graph: ir.Graph, max_layers: int | None = None) -> tuple[list[InputChain], list[Skipped]]:
    """For every Conv reading a graph input (whose gradient nobody needs): the longest chain of layers from it,
    at most ``max_layers``, that can be cut out of the graph, and why the next layer was not taken."""
    inputs = set(graph.inputs)
    chains, skipped = [], []
    for conv in [n for n in graph if n.op_type == "Conv" and n.domain == "" and n.inputs[0] in inputs]:
        chain, why, nxt = InputChain(), None, conv
        while nxt is not None and (max_layers is None or len(chain.layers) < max_layers):
            layer = _match_layer(nxt, first=not chain.layers)
            if isinstance(layer, str):
                why = f"{nxt.name}: {layer}"
                break
            trial = InputChain([*chain.layers, layer])
            closed = _closed(trial)
            if closed is not None:
                why = f"{nxt.name}: {closed}"
                break
            chain = trial
            readers = [u.node for u in chain.output.uses() if u.node.op_type == "Conv" and u.idx == 0]
            nxt = readers[0] if len(readers) == 1 and len(chain.output.uses()) <= 4 else None
            if nxt is None:
                why = f"{chain.output.name}: not read by one Conv (the chain ends)"
        if chain.layers:
            chains.append(chain)
        if why is not None:
            skipped.append(Skipped(conv.name, PATTERN, why))
    return chains, skipped


def chain_working_sets(chain: InputChain) -> list[int]:
    """Per layer, the bytes its unchunked forward holds at once: its input, its conv output and, with a
    BatchNorm, the BatchNorm output beside it."""
    out = []
    for layer in chain.layers:
        x, y = _static(layer.conv.inputs[0]), _static(layer.conv.outputs[0])
        out.append(4 * (int(np.prod(x)) + int(np.prod(y)) * (2 if layer.bn is not None else 1)))
    return out


class ChunkedInputChainPass(OnnxcompPass):
    """``chunks``: batch chunks (clipped to the batch); ``layers``: at most this many layers from the input.
    Not exact (the weight gradients, and BatchNorm's statistics, are summed in another order)."""

    name = "chunk_input_chain"

    def __init__(self, chunks: int = 8, layers: int | None = None) -> None:
        if chunks < 2:
            raise ValueError(f"chunk_input_chain: chunks must be ≥ 2 (got {chunks})")
        if layers is not None and layers < 1:
            raise ValueError(f"chunk_input_chain: layers must be ≥ 1 (got {layers})")
        self.chunks, self.layers = chunks, layers

    def call(self, model: ir.Model) -> PassOutcome:
        outcome = PassOutcome(model, False)
        chains, outcome.skipped = find_input_chains(model.graph, self.layers)
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
class _LayerState:
    """Per layer: shapes, and the merged BatchNorm statistics once known."""
    layer: ChainLayer
    conv_shape: list[int]
    out_shape: list[int]
    pool_shape: list[int] | None
    scale: ir.Value | None = None
    shift: ir.Value | None = None
    mean4: ir.Value | None = None
    inv4: ir.Value | None = None
    sums: tuple[ir.Value, ir.Value] | None = None     # Σg, Σg·x̂ (backward)
    coef: ir.Value | None = None                      # γ/σ
    mean_g: ir.Value | None = None
    mean_gx: ir.Value | None = None

    @property
    def channels(self) -> int:
        return self.conv_shape[1]


class _Emitter:
    def __init__(self, graph: ir.Graph, chain: InputChain, bounds: list[int]) -> None:
        self.chain, self.bounds = chain, bounds
        base = chain.conv.name.replace("/", "_").strip("_") or "input_chain"
        self.ed = IrGraphEditor(graph, ir_taken_names(graph), prefix=f"onnxcomp_inchain_{base}")
        self.x_in = chain.conv.inputs[0]
        self.in_shape = _static(self.x_in)
        self.states = [_LayerState(l, _static(l.conv.outputs[0]), _static(l.output),
                                   _static(l.pool.inputs[0]) if l.pool is not None else None) for l in chain.layers]

    def n(self, c: int) -> int:
        return self.bounds[c + 1] - self.bounds[c]

    def const_f(self, base: str, value: float) -> ir.Value:
        return self.ed.initializer(self.ed.name(base), np.asarray(value, dtype=np.float32))

    def c4(self, st: _LayerState) -> list[int]:
        return [1, st.channels, 1, 1]

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

    def layer_forward(self, st: _LayerState, x: ir.Value, n: int, with_indices: bool, conv_only: bool = False
                      ) -> dict[str, ir.Value]:
        """One layer on a chunk: conv output x, BN output y, activation output r, pool output p (indices i)."""
        ed, l = self.ed, st.layer
        full = [n, *st.conv_shape[1:]]
        out: dict[str, ir.Value] = {"in": x}
        out["x"] = ed.clone(l.conv, [x, *l.conv.inputs[1:]], [(ed.name("conv"), F32, full)],
                            name=ed.name("conv_node")).outputs[0]
        if conv_only:
            return out
        out["y"] = out["x"]
        if l.bn is not None:
            y = ed.op("Mul", [out["x"], st.scale], "bn_mul", F32, full)
            out["y"] = ed.op("Add", [y, st.shift], "bn_add", F32, full)
        out["r"] = out["y"]
        if l.act is not None:
            out["r"] = ed.clone(l.act, [out["y"]], [(ed.name("act"), F32, full)], name=ed.name("act_node")).outputs[0]
        out["p"] = out["r"]
        if l.pool is not None:
            pshape = [n, *st.out_shape[1:]]
            outs = [(ed.name("pool"), F32, pshape)] + ([(ed.name("pool_idx"), I64, pshape)] if with_indices else [])
            pool = ed.clone(l.pool, [out["r"]], outs, name=ed.name("pool_node"))
            out["p"] = pool.outputs[0]
            if with_indices:
                out["i"] = pool.outputs[1]
        return out

    def forward(self, c: int, after: ir.Value | list[ir.Value] | None, upto: int, with_indices: bool,
                conv_only_last: bool = False, indices_from: int = 0) -> list[dict[str, ir.Value]]:
        """The chain on chunk ``c`` through layers ``< upto`` (the last one only to its conv output if asked),
        MaxPool indices (``with_indices``) only from layer ``indices_from`` up: ORT keeps an output nobody reads
        until the end of the step, so no pass may make one."""
        x, n, heads = self.chunk_input(c, after), self.n(c), []
        for j in range(upto):
            head = self.layer_forward(self.states[j], x, n, with_indices and j >= indices_from,
                                      conv_only=conv_only_last and j == upto - 1)
            heads.append(head)
            x = head.get("p")
        return heads

    def xhat(self, st: _LayerState, x: ir.Value, n: int) -> ir.Value:
        full = [n, *st.conv_shape[1:]]
        return self.ed.op("Mul", [self.ed.op("Sub", [x, st.mean4], "xc", F32, full), st.inv4], "xhat", F32, full)

    def reduce_sum(self, v: ir.Value, st: _LayerState, base: str) -> ir.Value:
        axes = self.ed.shared_const("onnxcomp_axes_0_2_3", [0, 2, 3])
        return self.ed.op("ReduceSum", [v, axes], base, F32, self.c4(st), keepdims=1)

    def add(self, total: ir.Value | None, v: ir.Value, base: str, shape: list[int]) -> ir.Value:
        return v if total is None else self.ed.op("Add", [total, v], base, F32, shape)

    def backward(self, c: int, heads: list[dict[str, ir.Value]], d_top: ir.Value, stop_at_bn: int | None,
                 grads: dict[int, tuple[ir.Value, ir.Value | None]]) -> ir.Value | None:
        """Back-propagate chunk ``c`` from its slice of dT. With ``stop_at_bn`` = j: return the gradient at BN
        layer j's output; otherwise run to the input, filling ``grads`` with each layer's (dW, db) for this
        chunk."""
        ed, n = self.ed, self.n(c)
        last = self.states[-1]
        g = self.slice_batch(d_top, c, last.out_shape, "dtop")
        for j in range(len(self.states) - 1, -1, -1):
            st, l, head = self.states[j], self.states[j].layer, heads[j]
            full = [n, *st.conv_shape[1:]]
            if l.pool is not None:
                g = ed.clone(l.pool_grad, [g, head["i"]], [(ed.name("dpool"), F32, full)], name=ed.name("pool_grad")).outputs[0]
            if l.act is not None:
                reads_out = l.act_grad.inputs[1] is l.act.outputs[0]
                g = ed.clone(l.act_grad, [g, head["r"] if reads_out else head["y"]], [(ed.name("dact"), F32, full)],
                             name=ed.name("act_grad")).outputs[0]
            if l.bn is not None:
                if stop_at_bn == j:
                    return g
                xh = self.xhat(st, head["x"], n)
                t = ed.op("Sub", [ed.op("Sub", [g, st.mean_g], "g_c", F32, full),
                                  ed.op("Mul", [xh, st.mean_gx], "xhat_m", F32, full)], "g_cc", F32, full)
                g = ed.op("Mul", [t, st.coef], "dx_bn", F32, full)
            if stop_at_bn is not None:
                # Only the input gradient is wanted here: ConvTranspose, as ConvGrad always makes dW too (an
                # unread output, which ORT keeps until the end of the step).
                g = self.input_gradient(st, g, n)
                continue
            wshape = _static(l.conv.inputs[1])
            has_bias = len(l.conv_grad.outputs) > 2 and bool(l.conv_grad.outputs[2].name)
            need_dx = j > 0
            outs = [(ed.name("dx"), F32, [n, *_static(l.conv.inputs[0])[1:]]) if need_dx else None]
            outs.append((ed.name(f"dw{c}"), F32, wshape))
            if has_bias:
                outs.append((ed.name(f"db{c}"), F32, [wshape[0]]))
            grad = ed.clone(l.conv_grad, [g, head["in"], l.conv.inputs[1]], outs, name=ed.name("conv_grad"))
            grads[j] = (grad.outputs[1], grad.outputs[2] if has_bias else None)
            if need_dx:
                g = grad.outputs[0]
        return None

    def input_gradient(self, st: _LayerState, g: ir.Value, n: int) -> ir.Value:
        """dX of the layer's conv alone: ConvTranspose(dY, W) with the conv's strides, pads, dilations and
        group, ``output_padding`` making up the rows and columns a strided conv dropped."""
        conv, x_shape = st.layer.conv, _static(st.layer.conv.inputs[0])
        w_shape = _static(conv.inputs[1])
        kernel = w_shape[2:]
        rank = len(kernel)
        strides = list(conv.attributes.get_ints("strides", [1] * rank))
        dilations = list(conv.attributes.get_ints("dilations", [1] * rank))
        pads = list(conv.attributes.get_ints("pads", [0] * 2 * rank))
        extra = [x_shape[2 + d] - (strides[d] * (st.conv_shape[2 + d] - 1) + (kernel[d] - 1) * dilations[d] + 1
                                   - pads[d] - pads[d + rank]) for d in range(rank)]
        return self.ed.op("ConvTranspose", [g, conv.inputs[1]], "dx_t", F32, [n, *x_shape[1:]], strides=strides,
                          dilations=dilations, pads=pads, group=conv.attributes.get_int("group", 1),
                          output_padding=extra)


def _rewrite(graph: ir.Graph, chain: InputChain, bounds: list[int]) -> dict:
    em = _Emitter(graph, chain, bounds)

    def pooled(heads: list[dict[str, ir.Value]]) -> list[ir.Value]:
        return [heads[-1]["p"]] if chain.layers[-1].pool is not None else []

    ed, k = em.ed, len(bounds) - 1
    batch = em.in_shape[0]
    bn_layers = [j for j, st in enumerate(em.states) if st.layer.bn is not None]
    # ---- forward: statistics of each BN layer (bottom up), then the output
    after: ir.Value | list[ir.Value] | None = None
    for j in bn_layers:
        st = em.states[j]
        c4 = em.c4(st)
        bn = st.layer.bn
        mean_sum = var_sum = None
        means = []
        for c in range(k):
            n = em.n(c)
            full = [n, *st.conv_shape[1:]]
            x = em.forward(c, after, j + 1, with_indices=False, conv_only_last=True)[-1]["x"]
            m = ed.op("ReduceMean", [x], f"mean{c}", F32, c4, axes=[0, 2, 3], keepdims=1)
            d = ed.op("Sub", [x, m], f"dev{c}", F32, full)
            v = ed.op("ReduceMean", [ed.op("Mul", [d, d], f"sq{c}", F32, full)], f"var{c}", F32, c4,
                      axes=[0, 2, 3], keepdims=1)
            wc = em.const_f(f"w{c}", n / batch)
            means.append((m, wc))
            mean_sum = em.add(mean_sum, ed.op("Mul", [m, wc], f"wmean{c}", F32, c4), "mean_sum", c4)
            var_sum = em.add(var_sum, ed.op("Mul", [v, wc], f"wvar{c}", F32, c4), "var_sum", c4)
            after = var_sum
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
        st.scale = ed.op("Mul", [gamma4, st.inv4], "scale", F32, c4)
        st.shift = ed.op("Sub", [beta4, ed.op("Mul", [st.mean4, st.scale], "mean_scale", F32, c4)], "shift", F32, c4)
        st.coef = st.scale        # γ/σ, the BN input gradient's factor
        shim = SimpleNamespace(ed=ed, b=SimpleNamespace(bn=bn), channels=st.channels)
        # The next pass waits for the running-statistics update too: it runs every step, early, and its output
        # has a reader (nothing prunes it).
        after = [st.shift, _update_running_statistics(shim, mean_sum, var)]
    pieces = []
    for c in range(k):
        head = em.forward(c, after, len(em.states), with_indices=False)[-1]
        pieces.append(head["p"])
        after = head["p"]
    out = chain.output
    out_name = out.name
    concat = ed.node("Concat", pieces, [(ed.name("output"), F32, _static(out))], name=ed.name("concat"), axis=0)
    forward_nodes = list(ed.nodes)
    ed.nodes.clear()
    # ---- backward: BatchNorm sums (top down), then the gradients
    d_top = chain.layers[-1].backward[0].inputs[0]
    after = d_top
    for j in reversed(bn_layers):
        st = em.states[j]
        c4 = em.c4(st)
        sg = sgx = None
        for c in range(k):
            n = em.n(c)
            full = [n, *st.conv_shape[1:]]
            heads = em.forward(c, after, len(em.states), with_indices=True, indices_from=j)
            g = em.backward(c, heads, d_top, stop_at_bn=j, grads={})
            xh = em.xhat(st, heads[j]["x"], n)
            sg = em.add(sg, em.reduce_sum(g, st, f"sg{c}"), "sg", c4)
            sgx = em.add(sgx, em.reduce_sum(ed.op("Mul", [g, xh], f"gx{c}", F32, full), st, f"sgx{c}"), "sgx", c4)
            # Both sums taken: the chunk's maps are free. The top pool's output (recomputed for its indices)
            # has no other reader: ORT would keep it to the end of the step.
            after = [sg, sgx, *pooled(heads)]
        count = float(batch * st.conv_shape[2] * st.conv_shape[3])
        inv_m = em.const_f("inv_count", 1.0 / count)
        st.sums = (sg, sgx)
        st.mean_g = ed.op("Mul", [sg, inv_m], "mean_g", F32, c4)
        st.mean_gx = ed.op("Mul", [sgx, inv_m], "mean_gx", F32, c4)
    totals: dict[int, list[ir.Value | None]] = {j: [None, None] for j in range(len(em.states))}
    for c in range(k):
        heads = em.forward(c, after, len(em.states), with_indices=True)
        grads: dict[int, tuple[ir.Value, ir.Value | None]] = {}
        em.backward(c, heads, d_top, stop_at_bn=None, grads=grads)
        for j, (dw, db) in grads.items():
            wshape = _static(em.states[j].layer.conv.inputs[1])
            totals[j][0] = em.add(totals[j][0], dw, "dw_sum", wshape)
            if db is not None:
                totals[j][1] = em.add(totals[j][1], db, "db_sum", [wshape[0]])
        after = [v for pair in totals.values() for v in pair if v is not None] + pooled(heads)
    # ---- wire in: the chain's output, the parameters' gradients; the old nodes go
    _take_over(out, concat.outputs[0])
    for j, st in enumerate(em.states):
        l = st.layer
        _take_over(l.conv_grad.outputs[1], totals[j][0])
        if totals[j][1] is not None:
            _take_over(l.conv_grad.outputs[2], totals[j][1])
        if l.bn is not None:
            shape_c = ed.shared_const(f"onnxcomp_shape_{st.channels}", [st.channels])
            sg, sgx = st.sums
            dgamma = ed.op("Reshape", [sgx, shape_c], "dgamma", F32, [st.channels])
            dbeta = ed.op("Reshape", [sg, shape_c], "dbeta", F32, [st.channels])
            _take_over(l.bn_grad.outputs[1], dgamma)
            _take_over(l.bn_grad.outputs[2], dbeta)
    backward_nodes = list(ed.nodes)
    graph.insert_before(chain.conv, forward_nodes)
    graph.insert_before(chain.backward[0], backward_nodes)
    old = chain.forward + chain.backward
    for node in old:
        for v in node.outputs:
            for use in list(v.uses()):
                if use.node not in old:
                    raise AssertionError(f"{v.name} still read by {use.node.name}")
    graph.remove(old, safe=False)
    layers = [" → ".join(n.op_type for n in layer.forward) for layer in chain.layers]
    return {"site": f"{len(layers)} layer(s) from the graph input {chain.conv.inputs[0].name}, forward and backward",
            "layers": layers, "block": [n.name for n in chain.forward], "chunks": k, "bounds": bounds,
            "exact": False, "batchnorms": len(bn_layers), "output": out_name,
            "dropped_stashes": [v.name for n in chain.forward for v in n.outputs if v.name and v.name != out_name]}
