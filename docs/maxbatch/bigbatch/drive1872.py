"""Plan b1872 at the single step target maxbatch8's descent found best (390.9 MiB), growth margin 0 (a measurement
follows), write it with transform, timestamps on stderr. Stopgap driver: the CLI has no --step-budgets."""
import faulthandler, signal, sys, time
faulthandler.register(signal.SIGUSR1, all_threads=False)
T0 = time.time()
import onnxcomp.planner.growth_budget as gb
MiB = 1 << 20
orig = gb.plan_for_growth
def wrapped(*a, **k):
    k["progress"] = lambda m: print(f"[{time.time()-T0:8.1f}s] {m}", file=sys.stderr, flush=True)
    k["step_budgets"] = [int(390.9 * MiB)]
    k["margin"] = 0.0
    k["pyops"] = True
    return orig(*a, **k)
gb.plan_for_growth = wrapped
orig_plan = gb.plan_auto
def p(*a, **k):
    t = time.time(); r = orig_plan(*a, **k)
    print(f"[{time.time()-T0:8.1f}s] plan_auto({a[1]/2**20:.1f} MiB) in {time.time()-t:.1f}s", file=sys.stderr, flush=True)
    return r
gb.plan_auto = p
from onnxcomp.cli import main
sys.argv = ["onnxcomp"] + sys.argv[1:]
rc = main()
print(f"[{time.time()-T0:8.1f}s] done rc={rc}", file=sys.stderr, flush=True)
sys.exit(rc)
