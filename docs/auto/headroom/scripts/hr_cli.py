"""`python -m onnxcomp` with growth_budget.SCRATCH_HEADROOM set from $HR (experiment only)."""
import os, sys
import onnxcomp.planner.growth_budget as gb
gb.SCRATCH_HEADROOM = float(os.environ["HR"])
from onnxcomp.cli import main
sys.exit(main())
