"""tools/bench_steps.py with a per-configuration ORT intra-op spinning switch: a label containing "nospin" gets
session.intra_op.allow_spinning = "0" (others ORT's default). Scratch; usage as bench_steps."""
import sys
sys.path.insert(0, "/work/wt/costaot/tools")
import bench_steps
from onnxcomp.runtime import session as S

flags = [("nospin" in a.split("=", 1)[0]) for a in sys.argv[2:] if "=" in a and not a.startswith("--")]
_orig = S.session_options

def patched(**kw):
    so = _orig(**kw)
    if flags.pop(0):
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return so

S.session_options = patched
raise SystemExit(bench_steps.main())
