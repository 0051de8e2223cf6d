"""Which replay tensors ORT keeps outside P: align the pattern-on step's allocations (outside P) within the
pattern-off step's (every buffer), then the pattern-off ones with the replay's buffers."""
import sys, json, difflib
sys.path.insert(0, "/tmp/finalgate/diag")
from pathlib import Path
import gt
tag = sys.argv[1]
off = gt.events(Path(f"{tag}.nopattern.log")); on = gt.events(Path(f"{tag}.pattern.log"))[1:]
d = json.load(open(f"{tag}.events.json")); rp, names = d["rp"], d["names"]
a = [e[0] for e in off]; b = [e[0] for e in on]
outside = set()
for blk in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_matching_blocks():
    outside.update(range(blk.a, blk.a + blk.size))
rpi = [i for i, e in enumerate(rp) if e[0] >= 4096]
c = [rp[i][0] for i in rpi]
sm = difflib.SequenceMatcher(a=a, b=c, autojunk=False)
for blk in sm.get_matching_blocks():
    for k in range(blk.size):
        gi, ri = blk.a + k, rpi[blk.b + k]
        ort_in = gi not in outside
        rep_in = names[ri][3]
        if ort_in != rep_in:
            print("ORT in P" if ort_in else "ORT outside", "| replay", "in P" if rep_in else "outside", names[ri][:3], rp[ri][0])
print("outside-P ORT allocations not matched to replay:", [a[i] for i in sorted(outside) if i not in {blk.a + k for blk in sm.get_matching_blocks() for k in range(blk.size)}])
