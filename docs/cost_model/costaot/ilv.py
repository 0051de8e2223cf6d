"""tools/bench_steps.py under measure's settings (default) or ORT's defaults (--ort-default): every graph of a
model interleaved step by step in one process, so contention hits all alike. Scratch (costaot).
usage: ilv.py [--ort-default] DIR label=graph ... --steps N --warmup W --json OUT"""
import sys
sys.path.insert(0, "/work/wt/costaot/tools")
import bench_steps
from onnxcomp.runtime import session as S

if "--ort-default" in sys.argv:
    sys.argv.remove("--ort-default")
    _RS = S.RuntimeSettings

    class _OrtDefaults(_RS):  # what bench_steps builds (RuntimeSettings(intra_threads=...)) -> ORT's defaults
        def __init__(self, *a, **kw):
            if not a and set(kw) <= {"intra_threads"}:
                kw = dict(arena=True, mem_pattern=True, mem_reuse=True, execution_order="default", **kw)
            super().__init__(*a, **kw)

    S.RuntimeSettings = _OrtDefaults
raise SystemExit(bench_steps.main())
