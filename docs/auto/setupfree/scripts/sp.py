import onnx, sys
from onnxcomp.planner.ort_growth import gradient_buffer_sizes
from onnxcomp.passes.arena_spacer import spacer_sizes
from onnxcomp.passes.grad_buffer_order import setup_arena
for n, need in [("densenet_s", 2764800 + 65536), ("leaky_vgg", 3612672 + 65536)]:
    m = onnx.load(f"W/{n}/training_model.onnx")
    s = gradient_buffer_sizes(m, True)
    print(n, len(s), sum(s), setup_arena(s))
    sp = spacer_sizes(s, need)
    print("  ->", sp, sum(sp), setup_arena([*s, *sp]))
