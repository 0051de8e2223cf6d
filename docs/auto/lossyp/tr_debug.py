import sys, traceback
from onnxcomp.cli import build_parser, glue_dash_values
p = build_parser()
args = p.parse_args(glue_dash_values(p, sys.argv[1:]))
try:
    rc = args.func(args)
except Exception:
    traceback.print_exc()
    rc = 3
sys.exit(int(rc or 0))
