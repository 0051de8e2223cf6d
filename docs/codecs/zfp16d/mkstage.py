"""Make a stage-truncating copy of a _zfp_numba.py: encode/decode get a `stage` argument and stop each task after
stage k (insertion after the first line containing each marker). Usage: mkstage.py SRC DST"""
import re, sys
src, dst = sys.argv[1:3]
enc_marks = ["_gather_s(", "sp = _front2d(", "_step2d(S", "w0 = t * task_words", "NONE"]
dec_marks = ["_load_words(", "_dec_head(", "_extract2d", "_back2d(S, nb)", "NONE"]
lines = open(src).read().split("\n")
out = []; mode = None; done = set()
for ln in lines:
    if ln.startswith("def encode("):
        ln = ln.replace("data):", "data, stage=9):"); mode = "e"
    elif ln.startswith("def decode("):
        ln = ln.replace(", y):", ", y, stage=9):"); mode = "d"
    elif ln.startswith("def ") or ln.startswith("@"):
        pass
    out.append(ln)
    marks = enc_marks if mode == "e" else dec_marks if mode == "d" else []
    for k, m in enumerate(marks):
        if m in ln and (mode, k) not in done and not ln.lstrip().startswith("#"):
            ind = ln[:len(ln) - len(ln.lstrip())]
            if ln.rstrip().endswith(":"):
                continue
            out.append(f"{ind}if stage < {k + 1}:\n{ind}    continue")
            done.add((mode, k))
assert len(done) == 8, done
open(dst, "w").write("\n".join(out))
