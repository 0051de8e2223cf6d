import sys, pickle, warnings
sys.path.insert(0, "tools")
from fit_codec_instep import samples_from_bench
from onnxcomp.planner.cost_model import CostModel
warnings.simplefilter("ignore")
cost = CostModel.load()
args = sys.argv[2:]; rounds = []
i = 0
while i < len(args):
    if args[i] == "--round":
        j = i + 2
        while j < len(args) and args[j] != "--round": j += 1
        rounds.append((args[i + 1], args[i + 2:j])); i = j
    else: i += 1
samples = [s for n, f in rounds for s in samples_from_bench(f, cost, n)]
pickle.dump(samples, open(sys.argv[1], "wb")); print(len(samples))
