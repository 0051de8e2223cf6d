"""Pass: the block that reads the graph's input — Conv [→ BatchNorm] [→ ReLU] [→ MaxPool] — run in batch
chunks in forward and in backward, holding nothing but the input and its BatchNorm statistics.

Why: a CNN's first layer works at the highest resolution. Its forward holds the conv output and the BN output
together (ResNet-18, batch 32, 64×64: 8 + 8 MiB), the ReLU mask encoder copies the ReLU output through the
PyOp bridge, and its backward holds three full-size gradient maps. Once every later stash is encoded this
block *is* the step's peak, forward and backward; per-stash options cannot go under it, and the chunked
backward region (chunk_backward) fixes only the backward half.

What it does (k chunks of the batch; N·H·W = the per-channel count of the conv output):

    forward, statistics   per chunk c: x_c = Conv(X_c);  m_c, v_c = mean and variance of x_c per channel
                          mean = Σ w_c m_c,  var = Σ w_c (v_c + (m_c − mean)²)   (w_c = n_c / N: exact merge)
    forward, output       per chunk: x_c → x_c·s + t (s = γ/√(var+ε), t = β − mean·s) → ReLU → MaxPool;
                          the block's output is the Concat of the chunks (the one full tensor kept)
    backward, pass A      per chunk: recompute x_c … MaxPool (with its indices), then MaxPoolGrad, ReluGrad
                          on the chunk of dT; accumulate Σg and Σg·x̂ (x̂ = (x − mean)/σ)
    backward, pass B      per chunk: recompute again; dx_c = γ/σ · (g − Σg/M − x̂·Σg·x̂/M);
                          dW += ConvGrad(dx_c, X_c) (weight gradient only: the input needs none)
    dγ = Σg·x̂, dβ = Σg

The conv runs four times per step instead of once (twice without BatchNorm): the first layer's conv, reading
3 channels, is the cheap one. Not bit-identical (the statistics, the normalisation and every sum are
computed in another order than ORT's kernels): the pass is a lossy-budget technique, its records say
``"exact": false``.

Running statistics: ORT's BatchNormInternal also updates the running mean/variance buffers in place (its
running-stat outputs have no reader; the eval model reads the buffers). The rewrite keeps a clone of that node
fed with a 2-sample stand-in whose batch mean and (biased) variance are the merged ones, so ORT's own kernel
updates the same buffers as before, with the node's momentum (`_update_running_statistics`). Without it the
eval model kept the initial statistics (digits accuracy 38–71 % instead of ~95 %, docs/notes/lossy6x.md).

Ordering: each chunk's input slice reads ``gate(X, after=previous chunk's result)`` (a zero-copy view that
cannot exist before it), so one chunk's temporaries are alive at a time under both ORT execution orders; the
backward chunks wait on dT the same way.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from .base import OnnxcompPass, PassOutcome, Skipped, even_bounds
from .editor import IrGraphEditor, ir_taken_names, static_shape, take_over
from .records import PassRecord

PATTERN = "Conv(graph input) [→ BatchNorm] [→ ReLU] [→ MaxPool]"
F32, I64 = ir.DataType.FLOAT, ir.DataType.INT64
_FORWARD_OPS = ("BatchNormInternal", "Relu", "MaxPool")


@dataclass
class ConvLayer:
    """Conv [→ BatchNorm] [→ activation] [→ MaxPool]: forward nodes and their backward counterparts (None where
    absent). One matched layer of an input block here and of an input chain (passes/chunk_input_chain.py)."""
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

    @property
    def grad_top(self) -> ir.Value:
        return self.backward[0].inputs[0]

    @property
    def batchnorms(self) -> int:
        return int(self.bn is not None)


InputBlock = ConvLayer  # the first layer alone, its activation a ReLU


def _static(value: ir.Value | None) -> list[int] | None:
    """``editor.static_shape`` as a list (these passes build shapes by list unpacking)."""
    shape = static_shape(value)
    return None if shape is None else list(shape)


def _only_reader(value: ir.Value, op: str, slot: int, domain: str | None = None) -> ir.Node | None:
    nodes = [u.node for u in value.uses() if u.node.op_type == op and u.idx == slot
             and (domain is None or u.node.domain == domain)]
    return nodes[0] if len(nodes) == 1 else None


def find_input_blocks(graph: ir.Graph) -> tuple[list[InputBlock], list[Skipped]]:
    """Every Conv reading a graph input whose input gradient nobody needs, with the BN/ReLU/MaxPool chain
    after it, and why other such convs are left alone."""
    inputs = set(graph.inputs)
    blocks, skipped = [], []
    for conv in [n for n in graph if n.op_type == "Conv" and n.domain == "" and n.inputs[0] in inputs]:
        why = _match(conv)
        if isinstance(why, str):
            skipped.append(Skipped(conv.name, PATTERN, why))
        else:
            blocks.append(why)
    return blocks, skipped


def _match(conv: ir.Node) -> InputBlock | str:
    if conv.attributes.get_int("group", 1) != 1:
        return "grouped conv (not handled)"
    x_in, weight = conv.inputs[:2]
    shape = _static(x_in)
    if shape is None or len(shape) != 4 or _static(conv.outputs[0]) is None:
        return "input or output shape not static 4-D"
    grads = [u.node for u in weight.uses() if u.node.op_type == "ConvGrad" and u.idx == 2]
    if len(grads) != 1 or grads[0].inputs[1] is not x_in or (grads[0].outputs[0].name or "") != "":
        return "no ConvGrad without input gradient on the same input (the input's gradient is needed)"
    conv_grad = grads[0]
    chain: dict[str, ir.Node | None] = {"BatchNormInternal": None, "Relu": None, "MaxPool": None}
    value, k = conv.outputs[0], 0
    while True:
        fwd = [u.node for u in value.uses() if u.node.op_type in _FORWARD_OPS[k:] and u.idx == 0]
        if len(fwd) != 1:
            break
        node = fwd[0]
        k = _FORWARD_OPS.index(node.op_type) + 1
        if node.op_type == "BatchNormInternal" and node.attributes.get_int("training_mode", 0) != 1:
            break
        if node.op_type == "MaxPool" and (len(node.outputs) < 2 or not node.outputs[1].name):
            break
        chain[node.op_type] = node
        value = node.outputs[0]
        if node.op_type == "MaxPool":
            break
    bn, relu, pool = chain["BatchNormInternal"], chain["Relu"], chain["MaxPool"]
    # The backward chain, top down: MaxPoolGrad(dT, idx) → ReluGrad(·, relu in/out) → BNGrad(·, x) → ConvGrad.
    pool_grad = _only_reader(pool.outputs[1], "MaxPoolGrad", 1) if pool is not None else None
    relu_grad = None
    if relu is not None:
        relu_grad = _only_reader(relu.inputs[0], "ReluGrad", 1) or _only_reader(relu.outputs[0], "ReluGrad", 1)
    bn_grad = _only_reader(conv.outputs[0], "BatchNormalizationGrad", 1) if bn is not None else None
    if (pool is not None and pool_grad is None) or (relu is not None and relu_grad is None) \
            or (bn is not None and bn_grad is None):
        return "the block's backward ops are not one MaxPoolGrad / ReluGrad / BatchNormalizationGrad each"
    block = InputBlock(conv, conv_grad, bn=bn, act=relu, pool=pool, bn_grad=bn_grad, act_grad=relu_grad,
                       pool_grad=pool_grad)
    bwd = block.backward
    for upper, lower in zip(bwd, bwd[1:]):
        g = upper.outputs[0]
        if lower.inputs[0] is not g or len(g.uses()) != 1:
            return f"{upper.op_type}'s gradient is read by more than the next op of the block"
    # Every forward tensor of the block may be read only inside the block (forward and backward).
    own = set(block.forward) | set(bwd)
    for node in block.forward:
        for out in node.outputs:
            if out.name and out is not block.output and any(u.node not in own for u in out.uses()):
                return f"{out.name} is read outside the block"
    if bn is not None and (bn.inputs[1] is None or bn.inputs[2] is None or _static(bn.inputs[1]) is None):
        return "BatchNorm scale/bias not static"
    return block


class ChunkedInputBlockPass(OnnxcompPass):
    """``chunks``: batch chunks (clipped to the batch). Not exact (rounding): a lossy-budget technique."""

    name = "chunk_input_block"

    def __init__(self, chunks: int = 8) -> None:
        if chunks < 2:
            raise ValueError(f"chunk_input_block: chunks must be ≥ 2 (got {chunks})")
        self.chunks = chunks

    def call(self, model: ir.Model) -> PassOutcome:
        outcome = PassOutcome(model, False)
        blocks, outcome.skipped = find_input_blocks(model.graph)
        for block in blocks:
            batch = _static(block.conv.inputs[0])[0]
            k = min(self.chunks, batch)
            if k < 2:
                outcome.skipped.append(Skipped(block.conv.name, PATTERN, "batch of 1: nothing to chunk"))
                continue
            detail = _rewrite(model.graph, block, even_bounds(batch, k))
            outcome.records.append(PassRecord("chunked", self.name, block.conv.name, detail))
            outcome.modified = True
        return outcome


class _Emitter:
    """Builds the per-chunk recomputation shared by the forward and backward passes."""

    def __init__(self, graph: ir.Graph, block: InputBlock, bounds: list[int]) -> None:
        self.graph, self.b, self.bounds = graph, block, bounds
        base = block.conv.name.replace("/", "_").strip("_") or "input_block"
        self.ed = IrGraphEditor(graph, ir_taken_names(graph), prefix=f"onnxcomp_inblock_{base}")
        self.x_in, self.weight = block.conv.inputs[:2]
        self.bias = block.conv.inputs[2] if len(block.conv.inputs) > 2 else None
        grad_outs = block.conv_grad.outputs
        self.bias_grad = grad_outs[2] if len(grad_outs) > 2 and grad_outs[2].name else None
        self.in_shape = _static(self.x_in)
        self.conv_shape = _static(block.conv.outputs[0])
        self.out_shape = _static(block.output)
        self.channels = self.conv_shape[1]
        self.scale = self.shift = self.mean4 = self.inv4 = None

    def const_f(self, base: str, values: np.ndarray) -> ir.Value:
        return self.ed.initializer(self.ed.name(base), np.asarray(values, dtype=np.float32))

    def chunk_input(self, c: int, after: ir.Value | list[ir.Value] | None) -> ir.Value:
        """Chunk ``c`` of the input, read through a view that cannot exist before every ``after`` value."""
        a, z = self.bounds[c], self.bounds[c + 1]
        if after is None:
            view = self.x_in
        else:
            after = after if isinstance(after, list) else [after]
            zero = self.ed.zero_after_all(after, F32) if len(after) > 1 else None
            view = self.ed.gate(self.x_in, after[0], shape=self.in_shape, elem=F32, zero=zero)
        ed = self.ed
        start, end, axis = (ed.shared_const(ed.name(f"c{c}_{k}"), [v]) for k, v in (("a", a), ("z", z), ("ax", 0)))
        return ed.op("Slice", [view, start, end, axis], f"x{c}", F32, [z - a, *self.in_shape[1:]])

    def conv(self, x_c: ir.Value, n: int) -> ir.Value:
        conv = self.ed.clone(self.b.conv, [x_c, self.weight, *([self.bias] if self.bias is not None else [])],
                             [(self.ed.name("conv"), F32, [n, *self.conv_shape[1:]])], name=self.ed.name("conv_node"))
        return conv.outputs[0]

    def normalise(self, x: ir.Value, n: int) -> ir.Value:
        shape = [n, *self.conv_shape[1:]]
        if self.b.bn is None:
            return x
        y = self.ed.op("Mul", [x, self.scale], "bn_mul", F32, shape)
        return self.ed.op("Add", [y, self.shift], "bn_add", F32, shape)

    def head(self, c: int, after: ir.Value | list[ir.Value] | None, with_indices: bool) -> dict[str, ir.Value]:
        """The chunk's forward from its input slice: conv output x, BN output y, ReLU output r, pool
        output p (and indices i)."""
        n = self.bounds[c + 1] - self.bounds[c]
        out: dict[str, ir.Value] = {"in": self.chunk_input(c, after)}
        out["x"] = self.conv(out["in"], n)
        out["y"] = self.normalise(out["x"], n)
        out["r"] = out["y"]
        if self.b.act is not None:
            out["r"] = self.ed.op("Relu", [out["y"]], "relu", F32, [n, *self.conv_shape[1:]])
        out["p"] = out["r"]
        if self.b.pool is not None:
            pshape = [n, *self.out_shape[1:]]
            outs = [(self.ed.name("pool"), F32, pshape)]
            if with_indices:
                outs.append((self.ed.name("pool_idx"), I64, pshape))
            pool = self.ed.clone(self.b.pool, [out["r"]], outs, name=self.ed.name("pool_node"))
            out["p"] = pool.outputs[0]
            if with_indices:
                out["i"] = pool.outputs[1]
        return out

    def grad_chunk(self, c: int, head: dict[str, ir.Value], d_top: ir.Value) -> ir.Value:
        """The gradient at the BN output (or conv output without BN) for chunk ``c``."""
        ed, n = self.ed, self.bounds[c + 1] - self.bounds[c]
        a, z = self.bounds[c], self.bounds[c + 1]
        start, end, axis = (ed.shared_const(ed.name(f"g{c}_{k}"), [v]) for k, v in (("a", a), ("z", z), ("ax", 0)))
        g = ed.op("Slice", [d_top, start, end, axis], f"dtop{c}", F32, [n, *self.out_shape[1:]])
        full = [n, *self.conv_shape[1:]]
        if self.b.pool is not None:
            g = ed.clone(self.b.pool_grad, [g, head["i"]], [(ed.name("dpool"), F32, full)],
                         name=ed.name("pool_grad")).outputs[0]
        if self.b.act is not None:
            g = ed.clone(self.b.act_grad, [g, head["r"]], [(ed.name("drelu"), F32, full)],
                         name=ed.name("relu_grad")).outputs[0]
        return g

    def reduce_sum(self, v: ir.Value, base: str) -> ir.Value:
        axes = self.ed.shared_const("onnxcomp_axes_0_2_3", [0, 2, 3])
        return self.ed.op("ReduceSum", [v, axes], base, F32, [1, self.channels, 1, 1], keepdims=1)

    def add(self, total: ir.Value | None, v: ir.Value, base: str, shape: list[int]) -> ir.Value:
        return v if total is None else self.ed.op("Add", [total, v], base, F32, shape)


def _rewrite(graph: ir.Graph, block: InputBlock, bounds: list[int]) -> dict:
    em = _Emitter(graph, block, bounds)
    ed, k, C = em.ed, len(bounds) - 1, em.channels
    c4 = [1, C, 1, 1]
    count = float(em.conv_shape[0] * em.conv_shape[2] * em.conv_shape[3])
    # ---- forward: statistics, then the output, chunk by chunk
    after: ir.Value | None = None                   # the first chunk may start at once
    if block.bn is not None:
        eps = block.bn.attributes.get_float("epsilon", 1e-5)
        mean_sum = var_sum = None
        means = []
        for c in range(k):
            w = (bounds[c + 1] - bounds[c]) / em.conv_shape[0]
            n = bounds[c + 1] - bounds[c]
            head_in = em.chunk_input(c, after)
            x = em.conv(head_in, n)
            m = ed.op("ReduceMean", [x], f"mean{c}", F32, c4, axes=[0, 2, 3], keepdims=1)
            d = ed.op("Sub", [x, m], f"dev{c}", F32, [n, *em.conv_shape[1:]])
            v = ed.op("ReduceMean", [ed.op("Mul", [d, d], f"sq{c}", F32, [n, *em.conv_shape[1:]])],
                      f"var{c}", F32, c4, axes=[0, 2, 3], keepdims=1)
            wc = em.const_f(f"w{c}", np.float32(w))
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
        std = ed.op("Sqrt", [ed.op("Add", [var, em.const_f("eps", np.float32(eps))], "var_eps", F32, c4)],
                    "std", F32, c4)
        em.inv4 = ed.op("Reciprocal", [std], "inv_std", F32, c4)
        em.mean4 = mean_sum
        shape4 = ed.shared_const(f"onnxcomp_shape_1x{C}x1x1", c4)
        gamma4 = ed.op("Reshape", [block.bn.inputs[1], shape4], "gamma4", F32, c4)
        beta4 = ed.op("Reshape", [block.bn.inputs[2], shape4], "beta4", F32, c4)
        em.scale = ed.op("Mul", [gamma4, em.inv4], "scale", F32, c4)
        em.shift = ed.op("Sub", [beta4, ed.op("Mul", [em.mean4, em.scale], "mean_scale", F32, c4)], "shift", F32, c4)
        # The output pass waits for the running-statistics update too: it runs every step, early, and its
        # output has a reader (nothing prunes it).
        after = [em.shift, _update_running_statistics(em, mean_sum, var)]
    pieces = []
    for c in range(k):
        head = em.head(c, after, with_indices=False)
        pieces.append(head["p"])
        after = head["p"]
    out = block.output
    out_name = out.name
    concat = ed.node("Concat", pieces, [(ed.name("output"), F32, em.out_shape)], name=ed.name("concat"), axis=0)
    forward_nodes = list(ed.nodes)
    ed.nodes.clear()
    # ---- backward
    d_top = block.grad_top
    after = d_top
    sums = None
    if block.bn is not None:
        sg = sgx = None
        for c in range(k):
            head = em.head(c, after, with_indices=True)
            g = em.grad_chunk(c, head, d_top)
            n = bounds[c + 1] - bounds[c]
            xhat = ed.op("Mul", [ed.op("Sub", [head["x"], em.mean4], f"xc{c}", F32, [n, *em.conv_shape[1:]]), em.inv4],
                         f"xhat{c}", F32, [n, *em.conv_shape[1:]])
            sg = em.add(sg, em.reduce_sum(g, f"sg{c}"), "sg", c4)
            sgx = em.add(sgx, em.reduce_sum(ed.op("Mul", [g, xhat], f"gx{c}", F32, [n, *em.conv_shape[1:]]),
                                            f"sgx{c}"), "sgx", c4)
            after = [sg, sgx]      # both sums taken: the chunk's gradient maps are free
        inv_m = em.const_f("inv_count", np.float32(1.0 / count))
        mg = ed.op("Mul", [sg, inv_m], "mean_g", F32, c4)
        mgx = ed.op("Mul", [sgx, inv_m], "mean_gx", F32, c4)
        coef = ed.op("Mul", [ed.op("Reshape", [block.bn.inputs[1], ed.shared_const(f"onnxcomp_shape_1x{C}x1x1", c4)],
                                   "gamma4b", F32, c4), em.inv4], "dx_coef", F32, c4)
        sums = (sg, sgx)
    dw = db = None
    wshape = _static(em.weight)
    for c in range(k):
        head = em.head(c, after, with_indices=True)
        g = em.grad_chunk(c, head, d_top)
        n = bounds[c + 1] - bounds[c]
        full = [n, *em.conv_shape[1:]]
        if block.bn is not None:
            xhat = ed.op("Mul", [ed.op("Sub", [head["x"], em.mean4], f"xb{c}", F32, full), em.inv4], f"xhatb{c}", F32, full)
            t = ed.op("Sub", [ed.op("Sub", [g, mg], f"g_c{c}", F32, full),
                              ed.op("Mul", [xhat, mgx], f"xhat_m{c}", F32, full)], f"g_cc{c}", F32, full)
            g = ed.op("Mul", [t, coef], f"dx{c}", F32, full)
        outs = [None, (ed.name(f"dw{c}"), F32, wshape)]
        if em.bias_grad is not None:
            outs.append((ed.name(f"db{c}"), F32, [wshape[0]]))
        grad = ed.clone(block.conv_grad, [g, head["in"], em.weight], outs, name=ed.name("conv_grad"))
        dw = em.add(dw, grad.outputs[1], "dw_sum", wshape)
        if em.bias_grad is not None:
            db = em.add(db, grad.outputs[2], "db_sum", [wshape[0]])
        after = dw if db is None else [dw, db]
    backward_nodes = list(ed.nodes)
    # ---- wire in: the block's output, the parameters' gradients; the old nodes go
    _take_over(out, concat.outputs[0])
    _take_over(block.conv_grad.outputs[1], dw)
    if em.bias_grad is not None:
        _take_over(em.bias_grad, db)
    if block.bn is not None:
        shape_c = ed.shared_const(f"onnxcomp_shape_{C}", [C])
        sg, sgx = sums
        dgamma = ed.op("Reshape", [sgx, shape_c], "dgamma", F32, [C])
        dbeta = ed.op("Reshape", [sg, shape_c], "dbeta", F32, [C])
        backward_nodes += ed.nodes[len(backward_nodes):]
        _take_over(block.bn_grad.outputs[1], dgamma)
        _take_over(block.bn_grad.outputs[2], dbeta)
    graph.insert_before(block.conv, forward_nodes)
    graph.insert_before(block.backward[0], backward_nodes)
    old = block.forward + block.backward
    for node in old:
        for v in node.outputs:
            for use in list(v.uses()):
                if use.node not in old:
                    raise AssertionError(f"{v.name} still read by {use.node.name}")
    graph.remove(old, safe=False)
    site = " → ".join(n.op_type for n in block.forward) + f" from the graph input {block.conv.inputs[0].name}, forward and backward"
    return {"site": site, "block": [n.name for n in block.forward], "backward": [n.op_type for n in block.backward],
            "chunks": k, "bounds": bounds, "exact": False, "dropped_stashes": [block.conv.outputs[0].name],
            "output": out_name, "batchnorm": block.bn is not None}


def _update_running_statistics(em: _Emitter, mean: ir.Value, var: ir.Value) -> ir.Value:
    """ORT's BatchNormInternal updates the running mean/variance buffers in place (its kernel aliases inputs
    3, 4 to outputs 1, 2; the outputs have no reader): ``running = momentum·running + (1 − momentum)·batch``,
    with the *biased* batch variance (divided by N·H·W; checked against ORT 1.19.2's CPU kernel). A clone of
    the block's BatchNormInternal keeps doing exactly that, fed with a two-sample stand-in for the batch,
    ``mean ± √var`` per channel, whose biased mean and variance are the merged ones: ORT's own kernel, with the
    node's own momentum, writes the very buffers the checkpoint and the eval model read. Returns its
    (tiny) normalised output, for the caller to depend on."""
    ed, bn, C = em.ed, em.b.bn, em.channels
    c4 = [1, C, 1, 1]
    std = ed.op("Sqrt", [var], "batch_std", F32, c4)
    upper = ed.op("Add", [mean, std], "stand_in_hi", F32, c4)
    lower = ed.op("Sub", [mean, std], "stand_in_lo", F32, c4)
    stand_in = ed.node("Concat", [upper, lower], [(ed.name("stand_in"), F32, [2, C, 1, 1])],
                       name=ed.name("stand_in_concat"), axis=0).outputs[0]
    outs = [(ed.name("stats_y"), F32, [2, C, 1, 1]), (ed.name("running_mean_out"), F32, [C]),
            (ed.name("running_var_out"), F32, [C]), (ed.name("stats_mean"), F32, [C]),
            (ed.name("stats_inv_std"), F32, [C])][:len(bn.outputs)]
    update = ed.clone(bn, [stand_in, *bn.inputs[1:]], outs, name=ed.name("running_stats"))
    return update.outputs[0]


_take_over = take_over      # the editor's; the chunking passes import it from here
