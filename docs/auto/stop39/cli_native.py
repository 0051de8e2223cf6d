"""onnxcomp's CLI with the growth modes pricing the no-PyOp descent too (default_pyops -> None): an experiment."""
import sys
from onnxcomp.planner import growth_budget
growth_budget.default_pyops = lambda budget_for: None
from onnxcomp.cli import main
raise SystemExit(main(sys.argv[1:]))
