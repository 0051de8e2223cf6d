"""Ground truth of ORT's allocation plan: one training step with memory pattern OFF (arena off, reuse on, DEFAULT
order) under the malloc shim: every kAllocate buffer is then allocated at run time in execution order and freed
at its release action. Compared with ort_pattern's replay (sizes in order, lifetimes in alloc-event units)."""
import os, subprocess, sys, tempfile, json, difflib
from pathlib import Path
import numpy as np
import onnx

TOOLS = Path("/work/wt/finalgate/tools")


def child(d: Path, pattern: bool):
    from onnxcomp.runtime.data import graph_data, synthetic_batches
    from onnxcomp.runtime.session import RuntimeSettings
    from onnxcomp.runtime.training_session import open_artifact_session
    fd = os.open(os.environ["MALLOC_LOG_FILE"], os.O_WRONLY | os.O_APPEND)
    so = RuntimeSettings(arena=False, mem_pattern=pattern, mem_reuse=True, execution_order="default").session_options()
    session = open_artifact_session(d, d / "training_model.onnx", session_options=so, seed=0)
    module, optimizer = session.module, session.optimizer
    spec = graph_data(d, d / "training_model.onnx", list(module.input_names()))
    gen = synthetic_batches(spec.image.shape, spec.classes, 0, spec.image.dtype)
    for i in range(2):
        x, y = next(gen)
        os.write(fd, f"STEP {i}\n".encode())
        module(x, y)
        os.write(fd, f"OPT {i}\n".encode())
        optimizer.step()
        module.lazy_reset_grad()


def run(d: Path, pattern: bool, out: Path):
    shim = out.parent / "malloc_log.so"
    if not shim.exists():
        subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-o", str(shim), str(TOOLS / "malloc_log.c")], check=True)
    out.write_text("")
    env = {**os.environ, "LD_PRELOAD": str(shim), "MALLOC_LOG_FILE": str(out), "MALLOC_LOG_MIN": "4096",
           "MALLOC_MMAP_THRESHOLD_": "131072"}
    subprocess.run([sys.executable, __file__, "--child", str(d), "1" if pattern else "0"], env=env, check=True)


def events(log: Path):
    lines = log.read_text().splitlines()
    s, e = lines.index("STEP 1"), lines.index("OPT 1")
    ev, live = [], {}
    for line in lines[s + 1:e]:
        p = line.split()
        if p[0] == "A":
            k = len(ev)
            ev.append([int(p[1]), None]); live[p[2]] = k
        elif p[0] == "F" and p[1] in live:
            k = live.pop(p[1]); ev[k][1] = len(ev)   # freed before alloc event #len(ev)
    return ev


def replay_events(d: Path):
    from onnxcomp.planner.ort_pattern import ort_optimized_model, ort_static_shapes, allocation_plan, _itemsize
    from onnxcomp.analysis import analyze_model
    path = d / "training_model.onnx"
    original = onnx.load(str(path), load_external_data=False)
    opt = ort_optimized_model(path)
    shapes = ort_static_shapes(opt, original)
    plan = allocation_plan(opt, shapes)
    tensors = analyze_model(original).tensors
    ev, names, at = [], [], {}
    release = {}
    for b, step in plan.end.items():
        release.setdefault(step, []).append(b)
    for step, node in enumerate(plan.nodes):
        for y in node.output:
            if y and plan.kind.get(y) == "alloc":
                s = shapes.get(y)
                if s and s[1] is not None:
                    n = int(np.prod(s[1])) * _itemsize(s[0])
                elif y in tensors and tensors[y].type.shape is not None:
                    n = int(np.prod(tensors[y].type.shape)) * np.dtype(tensors[y].type.dtype).itemsize
                else:
                    n = -1
                at[y] = len(ev); ev.append([n, None]); names.append((y, node.op_type, step, bool(s and s[1] is not None)))
        for b in release.get(step, ()):
            if b in at:
                ev[at[b]][1] = len(ev)
    return ev, names, plan


if __name__ == "__main__":
    if sys.argv[1] == "--child":
        child(Path(sys.argv[2]), sys.argv[3] == "1"); sys.exit()
    d = Path(sys.argv[1]); tag = sys.argv[2]
    out = Path("/tmp/finalgate/diag") / f"{tag}.nopattern.log"
    if not out.exists() or out.stat().st_size == 0:
        run(d, False, out)
    gt = events(out)
    rp, names, plan = replay_events(d)
    json.dump({"gt": gt, "rp": rp, "names": names}, open(f"/tmp/finalgate/diag/{tag}.events.json", "w"))
    print("ORT allocs", len(gt), "replay allocs", len(rp))
