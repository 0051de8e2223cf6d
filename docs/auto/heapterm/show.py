import json, sys
MiB = 2**20
for name in sys.argv[1:]:
    t = json.load(open(f"{name}.transform.json"))["auto"]
    regs = [(d.get("technique"), d.get("chunks")) for d in t["decisions"] if "region" in d]
    techs = sorted({d["technique"] for d in t["decisions"] if "tensor" in d})
    print(name, "pred %.2f heap %.2f nodes %s fits %s" % (t["predicted_peak_bytes"]/MiB, t.get("predicted_heap_bytes", 0)/MiB, t.get("nodes"), t["fits"]), regs, techs)
    for i in (1, 2):
        try:
            d = json.load(open(f"{name}.onxc.{i}.json"))
            print("   ", i, [round(x/MiB, 2) for x in d["extras"]["peak_bytes_per_step"]], d["losses"][:2])
        except Exception as e:
            pass
