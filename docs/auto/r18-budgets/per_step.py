import sys
from pathlib import Path
from onnxcomp.runtime.measure import measure
from onnxcomp.runtime.session import RuntimeSettings
r = measure(Path(sys.argv[1]), steps=int(sys.argv[2]), settings=RuntimeSettings())
print(sys.argv[1], "per-step MiB", [round(b / 2**20, 2) for b in r.extras.get("peak_bytes_per_step", [])],
      "warmup", [round(b / 2**20, 2) for b in r.extras.get("warmup_peak_bytes", [])], "growth", [round(b / 2**20, 2) for b in r.extras.get("growth_bytes_per_step", [])], r.losses)
