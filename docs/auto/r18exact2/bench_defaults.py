"""tools/bench_steps.py under ORT's default session settings (arena, pattern, reuse, DEFAULT order): patches the
settings the tool builds (its RuntimeSettings(intra_threads=...) call) before its sessions are made."""
import runpy, sys
import onnxcomp.runtime.session as s
_orig = s.RuntimeSettings
class Patched(_orig):
    def __init__(self, *a, **k):
        if not a:
            k.setdefault("arena", True); k.setdefault("mem_pattern", True); k.setdefault("mem_reuse", True)
            k.setdefault("execution_order", "default")
        super().__init__(*a, **k)
s.RuntimeSettings = Patched
sys.argv = ["bench_steps.py"] + sys.argv[1:]
runpy.run_path("/work/wt/r18exact2/tools/bench_steps.py", run_name="__main__")
