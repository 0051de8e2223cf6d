import pickle, sys
sys.path.insert(0, "/tmp/costfit2")
from ana import S, variants, f3
from onnxcomp.planner.instep_fit import fit_codec_instep, error_stats
F = pickle.load(open(sys.argv[1], "rb"))
def fmt(st): return f"{st['within']}/{st['n']}, mean {st['mean']:.1%}, worst {st['worst']:.1%}"
print("no factors:", fmt(error_stats(s.base / s.measured - 1 for s in F)))
fits = {n: fit_codec_instep(S, **kw) for n, kw in variants().items()}; fits["F3"] = f3(S)
for n, fit in fits.items():
    print(f"{n}: {fmt(error_stats(fit.predict(s) / s.measured - 1 for s in F))}   {({c: d['encode'] for c, d in fit.scale.items()})} arena {({c: d['encode'] for c, d in fit.scale_arena.items()})}")
print()
for s in F:
    print(f"  {s.label:38s} base {s.base / s.measured - 1:+6.1%}  " + "  ".join(f"{n} {fit.predict(s) / s.measured - 1:+6.1%}" for n, fit in fits.items()))
