"""`python -m onnxcomp` is the `onnxcomp` command."""
import sys

from onnxcomp.cli import main

sys.exit(main())
