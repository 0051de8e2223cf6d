import sys, time, runpy, collections
from onnxcomp.custom_ops import zfp, cpu, sz
acc = collections.defaultdict(float); cnt = collections.Counter()
def wrap(cls, name):
    f = getattr(cls, name)
    def g(self, *a, **k):
        t = time.perf_counter()
        try:
            return f(self, *a, **k)
        finally:
            key = (cpu.backend(), cls.__name__, name); acc[key] += time.perf_counter() - t; cnt[key] += 1
    setattr(cls, name, g)
for cls in (zfp.ZFP, sz.SZ):
    wrap(cls, "encode_cpu"); wrap(cls, "decode_cpu")
sys.argv = ["bench_steps.py"] + sys.argv[1:]
try:
    runpy.run_path("/work/wt/aotlossy/tools/bench_steps.py", run_name="__main__")
finally:
    for k in sorted(acc): print(k, "calls", cnt[k], "total %.3f s" % acc[k])
