"""Per-step memory diagnosis: RSS/HWM like measure, plus smaps split and mallinfo2 at step boundaries and at
the sampled RSS peak. Usage: python diag_steps.py DIR STEPS [--trim] [--sample] [--model F]"""
import ctypes, json, os, sys, threading, time
from pathlib import Path
from onnxcomp.runtime.proc_memory import reset_hwm, status_bytes

libc = ctypes.CDLL("libc.so.6")
class MI2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]
libc.mallinfo2.restype = MI2
libc.malloc_trim.argtypes = [ctypes.c_size_t]

def mi():
    m = libc.mallinfo2()
    return {k: getattr(m, k) for k in ("arena", "hblks", "hblkhd", "uordblks", "fordblks", "keepcost")}

def smaps():
    out = {"heap": 0, "anon": 0, "file": 0, "other": 0, "anon_n": 0}
    cur = None
    with open("/proc/self/smaps") as f:
        for line in f:
            parts = line.split()
            if "-" in parts[0] and len(parts) >= 5 and ":" not in parts[0]:
                name = parts[5] if len(parts) > 5 else ""
                cur = "heap" if name == "[heap]" else "anon" if name == "" else "file" if name.startswith("/") else "other"
                if cur == "anon": out["anon_n"] += 1
            elif parts[0] == "Rss:":
                out[cur] += int(parts[1]) * 1024
    return out

def statm_rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096

def main():
    args = sys.argv[1:]
    d, steps = Path(args[0]), int(args[1])
    trim, sample = "--trim" in args, "--sample" in args
    model = Path(args[args.index("--model") + 1]) if "--model" in args else d / "training_model.onnx"
    import onnxruntime as ort
    from onnxcomp.runtime.data import graph_data, synthetic_batches
    from onnxcomp.runtime.session import RuntimeSettings
    from onnxcomp.runtime.training_session import open_artifact_session
    ort.set_default_logger_severity(3)
    s = open_artifact_session(d, model, settings=RuntimeSettings(), seed=0, bounds={})
    spec = graph_data(d, model, list(s.module.input_names()))
    gen = synthetic_batches(spec.image.shape, spec.classes, 0, spec.image.dtype)
    batches = [next(gen) for _ in range(1 + steps)]
    from onnxcomp.runtime._measure_worker import _load_codec_kernels
    _load_codec_kernels(model)
    rss_setup = status_bytes("VmRSS")
    print(json.dumps({"setup_rss": rss_setup, "mi": mi(), "smaps": smaps()}), flush=True)
    state = {"run": False, "max": 0, "at": None}
    def sampler():
        while True:
            if state["run"]:
                r = statm_rss()
                if r > state["max"]:
                    state["max"] = r; state["at"] = mi()
            time.sleep(0.0005)
    if sample:
        smp = ctypes.CDLL("/tmp/peakjump/rss_sampler.so"); smp.sampler_init(); smp.sampler_stop.restype = ctypes.c_long
        buf = (ctypes.c_size_t * 5)()
    for i, (x, y) in enumerate(batches):
        if trim:
            libc.malloc_trim(0)
        pre_mi, pre_sm = mi(), smaps()
        pre = status_bytes("VmRSS")
        state["max"] = pre; state["at"] = None
        reset_hwm()
        if sample: smp.sampler_start()
        t0 = time.perf_counter(); loss = s.step(x, y); el = time.perf_counter() - t0
        if sample:
            mx = smp.sampler_stop(buf)
        hwm = status_bytes("VmHWM")
        post = status_bytes("VmRSS")
        rec = {"step": i, "peak": hwm - pre, "growth": hwm - rss_setup, "pre": pre, "post": post, "t": round(el, 2),
               "loss": float(loss), "pre_mi": pre_mi, "pre_smaps": pre_sm, "post_mi": mi(), "post_smaps": smaps()}
        if sample:
            rec["sampled_max"] = mx - pre; rec["mi_at_max"] = dict(zip(["arena", "hblkhd", "uordblks", "fordblks", "keepcost"], list(buf)))
        print(json.dumps(rec), flush=True)

main()
