"""Per-step split of ORT-defaults growth: heap ([heap] Rss) vs anonymous mappings (the arena's regions and big
NumPy arrays), after malloc_trim as `measure` does. Usage: python split.py DIR [STEPS]"""
import ctypes, json, sys, os
from pathlib import Path
from onnxcomp.runtime.proc_memory import reset_hwm, status_bytes, trim_heap

libc = ctypes.CDLL("libc.so.6")
class MI2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]
libc.mallinfo2.restype = MI2
def mi():
    m = libc.mallinfo2(); return {k: getattr(m, k) for k in ("arena", "hblks", "hblkhd", "uordblks", "fordblks")}
def smaps():
    out = {"heap": 0, "anon": 0, "file": 0, "other": 0}
    cur = None
    for line in open("/proc/self/smaps"):
        p = line.split()
        if "-" in p[0] and ":" not in p[0] and len(p) >= 5:
            name = p[5] if len(p) > 5 else ""
            cur = "heap" if name == "[heap]" else "anon" if name == "" else "file" if name.startswith("/") else "other"
        elif p[0] == "Rss:":
            out[cur] += int(p[1]) * 1024
    return out
def main():
    d = Path(sys.argv[1]); steps = int(sys.argv[2])
    model = d / "training_model.onnx"
    import onnxruntime as ort
    from onnxcomp.runtime.data import graph_data, synthetic_batches
    from onnxcomp.runtime.session import RuntimeSettings
    from onnxcomp.runtime.training_session import open_artifact_session
    from onnxcomp.runtime._measure_worker import _load_codec_kernels
    ort.set_default_logger_severity(3)
    if "--kernels-first" in sys.argv: _load_codec_kernels(model)
    st = RuntimeSettings(arena=True, mem_pattern=True, mem_reuse=True, execution_order="default", intra_threads=int(os.environ.get("THREADS","0")) or None)
    s = open_artifact_session(d, model, settings=st, seed=0, bounds={})
    spec = graph_data(d, model, list(s.module.input_names()))
    gen = synthetic_batches(spec.image.shape, spec.classes, 0, spec.image.dtype)
    batches = [next(gen) for _ in range(1 + steps)]
    if "--kernels-first" not in sys.argv: _load_codec_kernels(model)
    trim_heap()
    setup = status_bytes("VmRSS"); sm0 = smaps(); mi0 = mi()
    out = {"dir": str(d), "setup_rss": setup, "setup_smaps": sm0, "setup_mi": mi0, "steps": [], "process_peak": status_bytes("VmHWM")}
    for i, (x, y) in enumerate(batches):
        trim_heap()
        pre = status_bytes("VmRSS"); pre_sm = smaps(); pre_mi = mi()
        reset_hwm()
        loss = s.step(x, y)
        hwm = status_bytes("VmHWM"); post_sm = smaps(); post_mi = mi()
        out["steps"].append({"growth": hwm - setup, "pre": pre - setup, "hwm_over_pre": hwm - pre,
            "pre_smaps": {k: pre_sm[k] - sm0[k] for k in sm0}, "post_smaps": {k: post_sm[k] - sm0[k] for k in sm0},
            "pre_mi": pre_mi, "post_mi": post_mi, "loss": float(loss)})
    out["process_peak"] = max(out["process_peak"], max(s_["growth"] for s_ in out["steps"]) + setup)
    print(json.dumps(out))
main()
