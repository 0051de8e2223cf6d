"""Set-up RSS added per node: least squares through 0 over suite plans without codec PyOps or spacers.

Data: budgetguard's stop-38 scans (`docs/auto/budgetguard/X` exact; lossy from /tmp/budgetguard/S/L, figures
copied below), each `measure --arena --mem-pattern --mem-reuse --order default` of the plan and of the baseline in
the same run; nodes = ONNX nodes of the written training graph minus the baseline's."""
MiB = 1 << 20
# net, mode, added nodes, set-up added (MiB, plan rss_setup - baseline rss_setup)
DATA = [("squeezenet_s", "exact", 76, 0.38), ("mobilenet_v1_s", "exact", 296, 1.70), ("plain_deep", "exact", 208, 1.20),
        ("wide_resnet_s", "exact", 130, 1.15),
        ("leaky_vgg", "exact (spacer 473,600 B x4 removed)", 237 - 2, 3.55 - 4 * 473600 / MiB),
        ("mobilenet_v1_s", "lossy", 2030, 10.41), ("plain_deep", "lossy", 593, 3.47), ("wide_resnet_s", "lossy", 3004, 15.74)]
sxy = sum(n * s * MiB for _, _, n, s in DATA)
sxx = sum(n * n for _, _, n, _ in DATA)
for net, mode, n, s in DATA:
    print(f"{net:15s} {mode:38s} +{n:5d} nodes  +{s:6.2f} MiB  {s * MiB / n / 1000:5.1f} KB/node")
print(f"least squares: {sxy / sxx:.0f} B/node")
exact = [d for d in DATA if d[1].startswith("exact")]
print(f"exact only: {sum(n * s * MiB for _, _, n, s in exact) / sum(n * n for _, _, n, _ in exact):.0f} B/node")
