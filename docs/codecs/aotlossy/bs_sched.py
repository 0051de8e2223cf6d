"""Step-time ratios of several training graphs, interleaved step by step in one process.

On a shared, loaded machine, separate runs per graph measure the load as much as the graph. Here every
configuration (graph file + CPU codec backend) gets its own ORT training session in one process, and the
steps alternate between them (order rotated every round), so load changes hit all of them alike. Per
configuration: median wall time per step (train step + optimizer step), median of its per-round ratio to
the baseline's step in the same round, and the same for process CPU time (all threads), which a loaded
machine inflates less than wall time; also the ratio of the fastest steps (min over min), the figure the
rounds no load burst hit give.

The allocator is whatever the process gets: run it plain for glibc's default (what ``onnxcomp train``
sees), and with ``MALLOC_MMAP_THRESHOLD_=131072`` for ``onnxcomp measure``'s pinned threshold. Session
settings are onnxcomp's defaults (arena off, mem pattern off, mem reuse off, priority order), as in both.

    .venv/bin/python tools/bench_steps.py DIR baseline=training_model.onnx lossless=lossless.onnx \\
        comet=comet.onnx comet@numpy=comet.onnx comet+async=comet.onnx --steps 9 --json out.json

``+inline`` / ``+async`` run that configuration with the payload store (runtime.payload_store) in that mode.
``%nothp`` runs that configuration's steps with transparent huge pages disabled for the process
(``prctl(PR_SET_THP_DISABLE)``): in a process started with ``GLIBC_TUNABLES=glibc.malloc.hugetlb=1`` (glibc
advises THP on its mmap'd chunks >= 2 MiB), ``base=F base%nothp=F comet=G comet%nothp=G`` times both
allocators interleaved in one run. (NumPy advises THP on its own arrays >= 4 MiB whatever glibc does.)
A FILE in another artifact directory (``plan=/tmp/out/training_model.onnx``: a transform that wrote its own
checkpoint, e.g. with split weights) runs with that directory's checkpoint and optimizer.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np


_PR_SET_THP_DISABLE, _PR_GET_THP_DISABLE = 41, 42   # linux/prctl.h
SCHED: dict = {}


def _sched() -> tuple[int, int, int]:
    """(cpu ns, runqueue wait ns, timeslices) summed over this process's threads (/proc/self/task/*/schedstat)."""
    tot = [0, 0, 0]
    for t in ([str(os.getpid())] if os.environ.get("SCHED_MAIN") else os.listdir("/proc/self/task")):
        try:
            with open(f"/proc/self/task/{t}/schedstat") as f:
                a = [int(v) for v in f.read().split()]
        except OSError:
            continue
        for k in range(3):
            tot[k] += a[k]
    return tuple(tot)


def set_thp_disabled(disabled: bool) -> None:
    """Disable (or re-enable) transparent huge pages for this process's future page faults (Linux prctl)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_THP_DISABLE, int(disabled), 0, 0, 0) != 0 or \
            libc.prctl(_PR_GET_THP_DISABLE, 0, 0, 0, 0) != int(disabled):
        raise SystemExit(f"bench_steps: prctl(PR_SET_THP_DISABLE, {int(disabled)}) failed "
                         f"(errno {ctypes.get_errno()})")


def _config(spec: str) -> tuple[str, str, str, str, bool]:
    """LABEL[@BACKEND][+STORE][%nothp]=FILE -> (label, file, backend, payload-store mode, THP off); the backend
    and the store mode default to the process's (``+inline`` / ``+async``: runtime.payload_store)."""
    from onnxcomp.custom_ops import cpu
    from onnxcomp.runtime import payload_store

    if "=" not in spec:
        raise SystemExit(f"bench_steps: configuration {spec!r} is not LABEL[@BACKEND][+STORE][%nothp]=FILE")
    label, file = spec.split("=", 1)
    head, _, flag = label.partition("%")
    if flag not in ("", "nothp"):
        raise SystemExit(f"bench_steps: unknown flag %{flag} in {spec!r}; the only one is %nothp")
    head, _, store = head.partition("+")
    store = store or payload_store.mode()
    if store not in payload_store.MODES:
        raise SystemExit(f"bench_steps: unknown payload-store mode {store!r} in {spec!r}; use one of "
                         f"{payload_store.MODES}")
    backend = head.split("@", 1)[1] if "@" in head else cpu.backend()
    if backend not in cpu.CHOICES:
        raise SystemExit(f"bench_steps: unknown backend {backend!r} in {spec!r}; use one of {cpu.CHOICES}")
    return label, file, backend, store, flag == "nothp"


def run(artifact_dir: Path, specs: list[str], steps: int, warmup: int, seed: int,
        threads: int | None = None) -> dict[str, Any]:
    import onnxruntime as ort

    from onnxcomp.custom_ops import cpu
    from onnxcomp.runtime import payload_store
    from onnxcomp.runtime.data import graph_data, synthetic_batches
    from onnxcomp.runtime.session import RuntimeSettings
    from onnxcomp.runtime.training_session import open_artifact_session

    configs = [_config(s) for s in specs]
    settings = RuntimeSettings(intra_threads=threads)
    sessions = []
    for label, file, backend, store, nothp in configs:
        path = artifact_dir / file
        if not path.is_file():
            raise SystemExit(f"bench_steps: {path} does not exist")
        # A graph in another artifact directory (FILE given as a path: e.g. a plan that split weights, whose
        # checkpoint differs from the baseline's) trains with that directory's checkpoint and optimizer.
        home = path.parent if (path.parent / "checkpoint").exists() else artifact_dir
        session = open_artifact_session(home, path, settings=settings)
        spec = graph_data(home, path, list(session.module.input_names()))
        batches = synthetic_batches(spec.image.shape, spec.classes, seed, spec.image.dtype)
        sessions.append((label, backend, session, batches, store, nothp))
    ort.set_seed(seed)  # once, after every session exists: they share ORT's generator
    any_nothp = any(c[4] for c in configs)   # only then is THP switched per step (a prctl each)

    def step(i: int) -> tuple[float, float]:
        _, backend, session, batches, store, nothp = sessions[i]
        x, y = next(batches)
        cpu.set_backend(backend)
        payload_store.set_mode(store)
        if any_nothp:
            set_thp_disabled(nothp)
        r0 = resource.getrusage(resource.RUSAGE_SELF)
        q0 = _sched()
        w, c = time.perf_counter(), time.process_time()
        session.step(x, y)
        wall_s, cpu_s = time.perf_counter() - w, time.process_time() - c
        q1 = _sched()
        SCHED.setdefault(sessions[i][0], []).append(((q1[0] - q0[0]) / 1e9, (q1[1] - q0[1]) / 1e9, wall_s, cpu_s,
                                                     (q1[2] - q0[2])))
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        # kernel time and minor page faults: under measure's mmap threshold every fresh buffer >= 128 KiB is a
        # new mapping whose pages fault in (a count load does not change)
        kernel[sessions[i][0]].append(r1.ru_stime - r0.ru_stime)
        faults[sessions[i][0]].append(r1.ru_minflt - r0.ru_minflt)
        return wall_s, cpu_s

    kernel: dict[str, list[float]] = {label: [] for label, *_ in sessions}
    faults: dict[str, list[int]] = {label: [] for label, *_ in sessions}
    for _ in range(warmup):
        for i in range(len(sessions)):
            step(i)
    wall = {label: [] for label, *_ in sessions}
    cpu_t = {label: [] for label, *_ in sessions}
    for r in range(steps):
        order = list(range(len(sessions)))
        order = order[r % len(order):] + order[:r % len(order)]  # rotate: no configuration always first
        for i in order:
            w, c = step(i)
            wall[sessions[i][0]].append(w)
            cpu_t[sessions[i][0]].append(c)
    base = sessions[0][0]
    rows = []
    for label, backend, _, _, store, nothp in sessions:
        rows.append({
            "config": label, "backend": backend, "payload_store": store, "thp_disabled": nothp,
            "wall_median_s": statistics.median(wall[label]), "wall_min_s": min(wall[label]),
            "cpu_median_s": statistics.median(cpu_t[label]), "cpu_min_s": min(cpu_t[label]),
            # ratio of the fastest steps: on a machine whose load comes in bursts, the rounds no burst hit
            "wall_min_ratio": min(wall[label]) / min(wall[base]), "cpu_min_ratio": min(cpu_t[label]) / min(cpu_t[base]),
            "wall_ratio": statistics.median(np.divide(wall[label], wall[base])),
            "cpu_ratio": statistics.median(np.divide(cpu_t[label], cpu_t[base])),
            "wall_s": wall[label], "cpu_s": cpu_t[label],
            "kernel_s": kernel[label][-steps:], "minor_faults": faults[label][-steps:],
            "kernel_median_s": statistics.median(kernel[label][-steps:]),
            "minor_faults_median": statistics.median(faults[label][-steps:]),
        })
    return {"dir": str(artifact_dir), "steps": steps, "warmup": warmup, "baseline": base, "intra_threads": threads,
            "malloc_mmap_threshold": os.environ.get("MALLOC_MMAP_THRESHOLD_", "glibc default"),
            "glibc_tunables": os.environ.get("GLIBC_TUNABLES", ""),
            "load_avg": os.getloadavg(), "rows": rows}


def _report() -> None:
    for label, v in SCHED.items():
        v = v[-4:]
        print(label, "per step (last 4): cpu %.3f s, runqueue wait %.3f s, wall %.3f s, proc cpu %.3f s, slices %d" % tuple(
            statistics.median(col) for col in zip(*v)), "threads", len(os.listdir("/proc/self/task")))


import atexit
atexit.register(_report)

if os.environ.get("NOSPIN"):  # experiment: ORT's intra-op threads do not spin-wait
    import onnxcomp.runtime.session as _S

    _orig_so = _S.session_options

    def _so(**kw):  # noqa: ANN003, ANN202
        so = _orig_so(**kw)
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        return so

    _S.session_options = _so


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", type=Path, help="artifact directory (checkpoint, optimizer_model.onnx, graphs)")
    ap.add_argument("configs", nargs="+", help="LABEL[@numpy|@numba][+off|+inline|+async][%%nothp]=GRAPH_FILE; "
                                                "the first is the baseline")
    ap.add_argument("--steps", type=int, default=9)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, help="write every step time here")
    ap.add_argument("--threads", type=int, default=None, help="ORT intra-op threads (default: ORT's)")
    args = ap.parse_args(argv)
    result = run(args.dir, args.configs, args.steps, args.warmup, args.seed, args.threads)
    print(f"malloc mmap threshold: {result['malloc_mmap_threshold']}; GLIBC_TUNABLES "
          f"{result['glibc_tunables'] or '(none)'}; load average {result['load_avg']}")
    print("| config | backend | step wall min / median | ratio wall (min / median) | step CPU min / median "
          "| ratio CPU (min / median) | kernel CPU (median) | minor faults (median) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for r in result["rows"]:
        print(f"| {r['config']} | {r['backend']} | {r['wall_min_s']:.3f} / {r['wall_median_s']:.3f} s "
              f"| {r['wall_min_ratio']:.2f}× / {r['wall_ratio']:.2f}× "
              f"| {r['cpu_min_s']:.3f} / {r['cpu_median_s']:.3f} s "
              f"| {r['cpu_min_ratio']:.2f}× / {r['cpu_ratio']:.2f}× | {r['kernel_median_s']:.3f} s "
              f"| {r['minor_faults_median']:.0f} |")
    if args.json is not None:
        from onnxcomp.fileio import atomic_output

        with atomic_output(args.json) as tmp:
            Path(tmp).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
