"""Price a finished exact plan graph with ConvGrads forced into input-channel blocks (dX by ConvGrad blocks)."""
import sys, onnx
import onnx_ir as ir
import onnxcomp.passes.split_conv_grad as scg
from onnxcomp.passes.split_conv_grad import SplitConvGradPass
from onnxcomp.passes.base import run_passes
from onnxcomp.planner.growth_budget import _growth_of, SCRATCH_HEADROOM
scg.blocks_that_pay = lambda dy, x, w, needs_dx, limit: min(int(x[1]), -(-scg._workspace(dy, w) // limit))
M = 2**20
d, base_nodes = sys.argv[1], int(sys.argv[2])
g = onnx.load(d + "/training_model.onnx")
def show(tag, p):
    print(f"{tag:28s} growth {p['growth_bytes']/M:6.2f} total {p['total_bytes']/M:6.2f} P {p['pattern_bytes']/M:6.2f}x{p['pattern_copies']} arena {p['arena_bytes']/M:6.2f} largest_out {p['largest_outside_bytes']/M:5.2f} nodes {p['nodes']} setup+ {p['set_up_added_bytes']/M:5.2f} resid {p['residue_bytes']/M:5.2f}", flush=True)
show("plain", _growth_of(g, base_nodes))
for limit in [int(x) for x in sys.argv[3:]]:
    m = ir.serde.deserialize_model(g)
    r = run_passes(m, [SplitConvGradPass(limit)])
    out = ir.serde.serialize_model(m)
    blocks = [x.detail.get("input_channel_blocks") for x in r.records]
    for h in (1.0, SCRATCH_HEADROOM):
        show(f"L{limit>>10}K blocks{blocks} h{h}", _growth_of(out, base_nodes, h))
