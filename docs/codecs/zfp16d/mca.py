"""Static cost of a stage's vector loop: compile the named stage functions of module copies (importable from
/tmp/zfp16d), take each function's innermost loops that use ymm registers (label .. backward jump), and let
llvm-mca (-mcpu=znver3, the machine's Zen 3) estimate cycles per iteration. Deterministic, unlike timings on the
shared machine. Usage: mca.py MOD FUNC...  (prints: loop, instructions, cycles per iteration per 8 blocks)."""
import re, subprocess, sys, importlib
import numpy as np
sys.path.insert(0, "/tmp/zfp16d")
K = importlib.import_module(sys.argv[1])
S = np.zeros(K._ROWS * K.G, np.int32); O = np.zeros(18 * K.G, np.int32); R = np.zeros(32, np.int64)
x = np.zeros(64 * 64, np.float32).view(np.int32)
calls = {
    "_front2d": lambda f: f(S, 128, np.int32(27), np.int32(237), 9, 149),
    "_step2d": lambda f: f(S, 128, np.int32(27), np.int32(237), 9),
    "_ranges2d": lambda f: f(S, 128, np.int64(K._RPOS), np.int64(K._RD + 5), 8, R),
    "_pack2d_sparse": lambda f: f(S, O, 128, 8, R),
    "_pack2d": lambda f: f(S, O, 128, 8),
    "_gather_s": lambda f: f(x, x.size, 64, 64, True, 0, 128, S, O[:16 * K.G]),
    "_store_words": lambda f: f(O, np.zeros(8 * K.G, np.uint32), 128, 8),
}
for nm in sys.argv[2:]:
    f = getattr(K, nm)
    calls[nm](f)
    asm = next(iter(f.inspect_asm().values()))
    lines = asm.splitlines()
    labels = {}
    for i, ln in enumerate(lines):
        m = re.match(r"^(\.LBB\w+):", ln)
        if m:
            labels[m.group(1)] = i
    loops = []
    jumps = []
    for i, ln in enumerate(lines):
        m = re.match(r"^\s+j\w+\s+(\.LBB\w+)", ln)
        if m and m.group(1) in labels and labels[m.group(1)] < i:
            jumps.append((labels[m.group(1)], i, m.group(1)))
    for a, i, lab in jumps:
        if any(a <= a2 and i2 <= i and (a2, i2) != (a, i) for a2, i2, _ in jumps):
            continue  # not innermost
        m = re.match(r"^\s+j\w+\s+(\.LBB\w+)", lines[i])
        if True:
            body = [l for l in lines[labels[m.group(1)] + 1:i + 1]
                    if l.startswith("\t") and not l.lstrip().startswith(".") and not l.lstrip().startswith("#")]
            if any("ymm" in l for l in body) and len(body) > 20:
                loops.append((m.group(1), body))
    loops.sort(key=lambda lb: -sum("ymm" in l for l in lb[1]))
    for lab, body in loops[:int(__import__("os").environ.get("TOP", "3"))]:
        out = subprocess.run(["llvm-mca", "-mcpu=znver3", "-iterations=100"], input="\n".join(body),
                             capture_output=True, text=True).stdout
        cyc = re.search(r"Total Cycles:\s+(\d+)", out)
        print(f"{sys.argv[1]} {nm} loop {lab}: {len(body)} instr, {int(cyc.group(1)) / 100 if cyc else float('nan'):.1f} cycles/iter"
              f" (ymm ops {sum('ymm' in l for l in body)})")
    if __import__("os").environ.get("DUMP"):
        open(f"/tmp/zfp16d/loop_{sys.argv[1]}_{nm}.s", "w").write("\n".join(loops[0][1]))
