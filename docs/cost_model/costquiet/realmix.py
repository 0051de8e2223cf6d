"""Branch-mix (min(switch, small, 1-small), small = |x| < 2^-14) of real activations: ReLU / ReLU6 / MaxPool /
conv / BN outputs of the zoo models at init, batch 32, 64x64, N(0,1) input (what `measure` feeds)."""
import sys, numpy as np, torch
sys.path.insert(0, "/work/wt/costquiet")
from models.zoo import build_model
torch.set_num_threads(1)
def mix(t):
    s = (t.detach().abs() < 2 ** -14).reshape(-1).numpy()
    z = s.mean(); sw = np.count_nonzero(s[1:] != s[:-1]) / max(s.size - 1, 1)
    return z, sw, min(sw, z, 1 - z)
for name in sys.argv[1:]:
    torch.manual_seed(0)
    m = build_model(name, 1000); m.train()
    rows = {}
    def hook(mod, inp, out, key=None):
        k = type(mod).__name__
        if isinstance(out, torch.Tensor):
            z, sw, mx = mix(out); n = out.numel()
            r = rows.setdefault(k, [0, 0.0, 0.0, 0.0]); r[0] += n; r[1] += z * n; r[2] += sw * n; r[3] += mx * n
    for mod in m.modules():
        if isinstance(mod, (torch.nn.ReLU, torch.nn.ReLU6, torch.nn.MaxPool2d, torch.nn.Conv2d, torch.nn.BatchNorm2d)):
            mod.register_forward_hook(hook)
    with torch.no_grad():
        m(torch.from_numpy(np.random.default_rng(0).standard_normal((32, 3, 64, 64), dtype=np.float32)))
    for k, (n, z, sw, mx) in rows.items():
        print(f"{name:13s} {k:12s} {n*4/2**20:8.1f} MiB  small {z/n:.3f}  switch {sw/n:.3f}  mix {mx/n:.3f}")
