import pickle, sys
from onnxcomp.planner.instep_fit import fit_codec_instep, error_stats
S = pickle.load(open("/tmp/costfit2/stored.pkl", "rb"))
def variants():
    return {"F1": dict(split_arena=True, min_share=0.05, min_samples=4),
            "F2": dict(split_arena=False, min_share=0.0, min_samples=1),
            "F1-noarena": dict(split_arena=False, min_share=0.05, min_samples=4)}
def f3(train):
    sub = [type(s)(s.measured, s.base, {k: v for k, v in s.codec.items() if k[0] in ("dpr_fp8", "intervalmask")}, s.arena, s.group, s.label) for s in train]
    return fit_codec_instep(sub, split_arena=True, min_share=0.0, min_samples=1)
if __name__ == "__main__":
    held = sys.argv[1] if len(sys.argv) > 1 else "Q"
    for name, kw in variants().items():
        fit = fit_codec_instep([s for s in S if s.group != held], **kw)
        print(name, {c: d["encode"] for c, d in fit.scale.items()}, {c: d["encode"] for c, d in fit.scale_arena.items()})
        for s in S:
            if s.group == held:
                e0, e1 = s.base / s.measured - 1, fit.predict(s) / s.measured - 1
                if abs(e0) > .1 or abs(e1) > .1: print(f"   {s.label:40s} {e0:+.1%} -> {e1:+.1%}")
