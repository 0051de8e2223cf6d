"""Parse the ORT log for region addresses (Allocated memory at A to B + requests), then report per-region residency
from the saved mincore maps. Usage: regions_resid.py LOG"""
import re, sys, numpy as np
M=2**20
maps = np.load("/tmp/lossygrowth/diag/resid_maps.npy")
rs = [np.load(f"/tmp/lossygrowth/diag/resid_{i}.npy") for i in range(len(maps))]
phase="setup"; req=None
for line in open(sys.argv[1]):
    if line.startswith("STEP"): phase=line.strip(); continue
    m=re.search(r"num_bytes: (\d+)", line)
    if m and "Extending" in line: req=int(m.group(1))
    m=re.search(r"Allocated memory at (0x[0-9a-f]+) to (0x[0-9a-f]+)", line)
    if m:
        a,b=int(m.group(1),16),int(m.group(2),16)
        for (ma,mb),r in zip(maps,rs):
            if ma <= a < mb:
                lo=(a-ma)//4096; hi=(b-ma+4095)//4096
                seg=r[lo:hi]
                print(f"{phase:8s} req {req:10d} region {(b-a)/M:6.2f} MiB at {hex(a)}: resident {seg.sum()*4096/M:6.2f} MiB")
