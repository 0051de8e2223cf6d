"""Fault-injection harness for onnxcomp (issue 17): rerunnable, prints a summary table.

    python tools/fault_injection.py --work /tmp/fi --out docs/fault_injection.json [--quick]

Campaigns (each can be picked with --only):

* ``codec``  corrupt payloads at the codec level: every registered codec, its sample inputs, one random bit
  flip or a truncation per case; decoded three ways -- the raw codec, the op layer's frame with the header
  check only, and with the xxh3 checksum (``--verify-payloads``). Each codec runs in its own child process
  with a per-case alarm, so a native crash or a hang is counted, not inherited.
* ``op``     the same corruptions fed to the decode PyOps inside ONNX Runtime sessions made with
  ``session_options()``, in child processes (an abort is counted and the child restarted after the case).
* ``flags``  bad command lines: each must exit 2 with one line on stderr and write nothing.
* ``kill``   SIGKILL/SIGINT at random points of ``transform`` (single file; directory with
  ``--split-weights --force``) and ``artifacts --force``: the output must be the complete old or complete
  new set, and the next run must leave no temp files.
* ``concurrent``  two ``transform ... -o same.onnx`` at once: exactly one may succeed.
* ``long``   1,000+ training steps of a comet-transformed model, RSS sampled.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path
from typing import Any

PY = sys.executable
ONNXCOMP = [PY, "-m", "onnxcomp"]


# ------------------------------------------------------------------------------------- corrupt payloads
def corrupt(payload: list, rng: Any, kind: str) -> tuple[list, str]:
    """A copy of ``payload`` (list of ndarrays) with one random bit flipped or one array truncated."""
    import numpy as np

    p = [np.array(a, copy=True) for a in payload]
    candidates = [i for i, a in enumerate(p) if a.size]
    i = candidates[int(rng.integers(len(candidates)))]
    flat = p[i].reshape(-1)
    if kind == "flip":
        b = flat.view(np.uint8)
        k = int(rng.integers(b.size * 8))
        b[k // 8] ^= np.uint8(1 << (k % 8))
        return p, f"flip array {i} bit {k}"
    cut = int(rng.integers(flat.size))
    p[i] = flat[:cut].copy()
    return p, f"truncate array {i} to {cut}"


def _same(a: Any, b: Any) -> bool:
    import numpy as np

    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


_CODEC_CHILD = textwrap.dedent('''
    import json, signal, sys
    import numpy as np
    sys.path.insert(0, sys.argv[3])
    from fault_injection import corrupt, _same
    from onnxcomp.custom_ops import get_codec
    from onnxcomp.runtime import framing

    class Hang(Exception):
        pass

    def alarm(*_):
        raise Hang()

    signal.signal(signal.SIGALRM, alarm)
    name, per_input = sys.argv[1], int(sys.argv[2])
    codec = get_codec(name)
    import zlib
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    for x, params in codec.sample_inputs(np.random.default_rng(7)):
        clean = [np.ascontiguousarray(a) for a in codec.encode_cpu(x, **params)]
        ref = codec.decode_cpu(tuple(clean), **params)
        for case in range(per_input):
            kind = "flip" if case % 4 else "truncate"
            for mode in ("raw", "header", "checksum"):
                payload = clean if mode == "raw" else list(framing.frame(codec, tuple(clean), checksum=mode == "checksum"))
                if not any(np.asarray(a).size for a in payload):
                    continue
                bad, how = corrupt(payload, np.random.default_rng(rng.integers(2**32)), kind)
                signal.alarm(10)
                try:
                    if mode != "raw":
                        bad, _ = framing.unframe(codec, tuple(bad))
                    y = codec.decode_cpu(tuple(bad), **params)
                    out = "no effect" if _same(y, ref) else ("different shape" if np.shape(y) != np.shape(ref)
                                                             else "silent wrong values")
                except framing.PayloadError as e:
                    out = "caught: checksum" if "checksum mismatch" in str(e) and "header" not in str(e) else "caught: header"
                except Hang:
                    out = "hang"
                except ValueError:
                    out = "codec error"
                except Exception as e:
                    out = "crash: " + type(e).__name__
                finally:
                    signal.alarm(0)
                print(json.dumps({"codec": name, "mode": mode, "kind": kind, "outcome": out, "how": how}), flush=True)
''')


def campaign_codec(work: Path, per_input: int) -> dict[str, Any]:
    from onnxcomp.custom_ops import REGISTRY

    script = work / "codec_child.py"
    script.write_text(_CODEC_CHILD)
    rows = []
    for name in sorted(REGISTRY):
        proc = subprocess.run([PY, str(script), name, str(per_input), str(Path(__file__).parent)],
                              capture_output=True, text=True, timeout=900)
        got = [json.loads(ln) for ln in proc.stdout.splitlines() if ln.startswith("{")]
        rows += got
        if proc.returncode != 0:
            rows.append({"codec": name, "mode": "?", "kind": "?", "outcome": f"crash: child rc {proc.returncode}",
                         "how": proc.stderr[-300:]})
    table: dict[str, Counter] = {}
    for r in rows:
        table.setdefault(r["mode"], Counter())[r["outcome"]] += 1
    return {"cases": len(rows), "by_mode": {m: dict(c) for m, c in table.items()},
            "examples": [r for r in rows if r["outcome"].startswith(("crash", "hang", "different"))][:10]}


# --------------------------------------------------------------------------------------------- op level
_OP_CHILD = textwrap.dedent('''
    import json, sys
    import numpy as np
    import onnxruntime as ort
    from onnx import TensorProto, ValueInfoProto, helper
    sys.path.insert(0, sys.argv[2])
    from fault_injection import corrupt, _same
    from onnxcomp.custom_ops import get_codec
    from onnxcomp.errors import OpError
    from onnxcomp.runtime import codec_ops, guarded_step
    from onnxcomp.runtime.session import session_options

    ONNX = {"float32": TensorProto.FLOAT, "uint8": TensorProto.UINT8, "int64": TensorProto.INT64,
            "int32": TensorProto.INT32, "uint16": TensorProto.UINT16, "uint32": TensorProto.UINT32,
            "bool": TensorProto.BOOL}
    cases = json.loads(sys.argv[1])
    sessions = {}

    def sessions_for(name, params, verify):
        key = (name, json.dumps(params, sort_keys=True), verify)
        if key in sessions:
            return sessions[key]
        codec = get_codec(name)
        enc, dec = codec_ops.op_type_names(name)
        attr = codec_ops.params_attr({**params, "tensor": f"{name}_stash"})
        names = [f"p{i}" for i in range(len(codec.payload_names))]
        so = session_options(verify_payloads=verify)
        so.log_severity_level = 3
        def mk(nodes, ins, outs):
            g = helper.make_graph(nodes, "g", ins, [ValueInfoProto(name=o) for o in outs])
            m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(codec_ops.DOMAIN, 1)])
            m.ir_version = 8
            return ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
        e = mk([helper.make_node(enc, ["x"], [*names, "anchor"], domain=codec_ops.DOMAIN, params=attr)],
               [helper.make_tensor_value_info("x", ONNX[codec.input_dtype], None)], names)
        d = mk([helper.make_node(dec, [*names, "trigger"], ["y"], domain=codec_ops.DOMAIN, params=attr)],
               [*(helper.make_tensor_value_info(n, ONNX[t], None) for n, t in zip(names, codec.payload_dtypes)),
                helper.make_tensor_value_info("trigger", TensorProto.FLOAT, [1])], ["y"])
        sessions[key] = (e, d, names)
        return sessions[key]

    for c in cases:
        codec = get_codec(c["codec"])
        x, params = codec.sample_inputs(np.random.default_rng(7))[c["input"]]
        e, d, names = sessions_for(c["codec"], params, c["verify"])
        codec_ops.set_verify_payloads(c["verify"])  # process-wide: set for this case's encode
        payload = e.run(names, {"x": x})
        feed = lambda p: {**dict(zip(names, p)), "trigger": np.zeros(1, np.float32)}
        with guarded_step():
            ref = d.run(["y"], feed(payload))[0]
        bad, how = corrupt(payload, np.random.default_rng(c["seed"]), c["kind"])
        print(json.dumps({"id": c["id"], "start": True}), flush=True)
        try:
            with guarded_step():
                y = d.run(["y"], feed(bad))[0]
            out = "no effect" if _same(y, ref) else ("different shape" if y.shape != ref.shape else "silent wrong values")
            named = None
        except OpError as err:
            out = "python exception (OpError)"
            named = bool(err.op_type.startswith("OnnxcompDecode_") and err.tensor == f"{c['codec']}_stash")
        except Exception as err:
            out = "python exception (other: " + type(err).__name__ + ")"
            named = False
        print(json.dumps({"id": c["id"], "outcome": out, "named": named, "how": how}), flush=True)
''')


def campaign_op(work: Path, per_codec: int) -> dict[str, Any]:
    import numpy as np

    from onnxcomp.custom_ops import REGISTRY, get_codec

    script = work / "op_child.py"
    script.write_text(_OP_CHILD)
    rng = np.random.default_rng(11)
    cases = []
    for name in sorted(REGISTRY):
        n_inputs = len([1 for x, _ in get_codec(name).sample_inputs(np.random.default_rng(7))])
        usable = [i for i, (x, _) in enumerate(get_codec(name).sample_inputs(np.random.default_rng(7)))
                  if x.ndim > 0 and x.size > 0]
        for k in range(per_codec):
            cases.append({"id": len(cases), "codec": name, "input": int(usable[k % len(usable)]) if usable else 0,
                          "kind": "flip" if k % 4 else "truncate", "verify": bool(k % 2),
                          "seed": int(rng.integers(2**31))})
        del n_inputs
    results: dict[int, dict[str, Any]] = {}
    todo = list(cases)
    while todo:
        proc = subprocess.Popen([PY, str(script), json.dumps(todo), str(Path(__file__).parent)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        in_flight = None
        try:
            out, err = proc.communicate(timeout=600)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        for ln in out.splitlines():
            if not ln.startswith("{"):
                continue
            r = json.loads(ln)
            if r.get("start"):
                in_flight = r["id"]
            else:
                results[r["id"]] = r
                in_flight = None
        done_ids = set(results)
        if proc.returncode != 0 and in_flight is not None:
            sig = -proc.returncode if proc.returncode < 0 else None
            results[in_flight] = {"id": in_flight, "outcome": f"abort ({signal.Signals(sig).name})" if sig
                                  else f"child exit {proc.returncode}", "named": False, "how": err[-200:]}
            done_ids.add(in_flight)
        elif proc.returncode != 0:
            raise RuntimeError(f"op child failed outside a case: {err[-2000:]}")
        todo = [c for c in todo if c["id"] not in done_ids]
    outcomes: dict[str, Counter] = {"verify on": Counter(), "verify off": Counter()}
    named = Counter()
    for c in cases:
        r = results[c["id"]]
        outcomes["verify on" if c["verify"] else "verify off"][r["outcome"]] += 1
        if r["outcome"].startswith("python exception"):
            named["op and tensor named" if r["named"] else "not named"] += 1
    return {"cases": len(cases), "by_mode": {k: dict(v) for k, v in outcomes.items()}, "errors_named": dict(named)}


# ------------------------------------------------------------------------------------------------ flags
def _run(cmd: list[str], timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def campaign_flags(work: Path, art: Path) -> dict[str, Any]:
    afile = work / "a_file"
    afile.write_text("x")
    busy = work / "busy"
    busy.mkdir(exist_ok=True)
    (busy / "keep").write_text("x")
    out = work / "flags_out.onnx"
    cases = {
        "--eb inf": ["transform", str(art), "-o", str(out), "--policy", "comet", "--eb", "inf"],
        "--eb 1e308": ["transform", str(art), "-o", str(out), "--policy", "comet", "--eb", "1e308"],
        "--eb -1": ["transform", str(art), "-o", str(out), "--policy", "comet", "--eb", "-1"],
        "--budget -5MiB": ["transform", str(art), "-o", str(out), "--policy", "rows", "--rows", "auto",
                           "--budget", "-5MiB"],
        "--rows 100000": ["transform", str(art), "-o", str(out), "--policy", "rows", "--rows", "100000"],
        "--rows 0": ["transform", str(art), "-o", str(out), "--policy", "rows", "--rows", "0"],
        "--policy nonsense": ["transform", str(art), "-o", str(out), "--policy", "nonsense"],
        "-o under a file": ["transform", str(art), "-o", str(afile / "x.onnx")],
        "-o dir under a file": ["transform", str(art), "-o", str(afile / "d")],
        "-o read-only (/proc)": ["transform", str(art), "-o", "/proc/onnxcomp_x.onnx"],
        "--split-weights with lossless": ["transform", str(art), "-o", str(work / "sw"), "--split-weights", "1KiB"],
        "train --steps 0": ["train", str(art), "--steps", "0"],
        "measure missing dir": ["measure", str(work / "missing")],
        "artifacts into non-empty dir": ["artifacts", "--model", "resnet18", "-o", str(busy)],
        "artifacts unknown model": ["artifacts", "--model", "lenet", "-o", str(work / "lenet")],
    }
    rows = []
    for label, args in cases.items():
        p = _run(ONNXCOMP + args)
        lines = [ln for ln in p.stderr.strip().splitlines() if ln.strip() and not ln.startswith("usage:")
                 and not ln.startswith(" ")]
        ok = p.returncode == 2 and len(lines) == 1 and "Traceback" not in p.stderr and not out.exists()
        rows.append({"case": label, "rc": p.returncode, "one_line": len(lines) == 1, "ok": ok,
                     "message": lines[-1] if lines else p.stderr[-200:]})
    return {"cases": len(rows), "ok": sum(r["ok"] for r in rows), "rows": rows}


# -------------------------------------------------------------------------------------- kills, concurrency
def _file_hash(p: Path) -> str:
    """sha256 of a file; of a checkpoint, of its parameters less BatchNorm running statistics (the export's
    forward pass on an unseeded dummy input moves those, so two identical `artifacts` runs differ there)."""
    if p.name != "checkpoint":
        return hashlib.sha256(p.read_bytes()).hexdigest()
    import numpy as np
    from onnxruntime.training.api import CheckpointState

    h = hashlib.sha256()
    for name, param in sorted(CheckpointState.load_checkpoint(str(p)).parameters, key=lambda kv: kv[0]):
        data = np.asarray(param.data)
        h.update(f"{name}:{data.shape}:{data.dtype}:{param.requires_grad}".encode())
        if "running_" not in name:
            h.update(data.tobytes())
    return h.hexdigest()


def _hashes(d: Path) -> dict[str, str]:
    if d.is_file():
        return {d.name: _file_hash(d)}
    try:
        return {p.name: _file_hash(p) if p.is_file() else "<dir>" for p in sorted(d.iterdir())} if d.is_dir() else {}
    except Exception as exc:  # noqa: BLE001  (an unreadable file: the set is broken)
        return {"<unreadable>": repr(exc)}


def _leftovers(target: Path) -> list[str]:
    parent = target.parent
    found = [p.name for p in parent.iterdir() if p.name.startswith(f".{target.name}.")]
    if target.is_dir():
        found += [f"{target.name}/{p.name}" for p in target.iterdir() if p.name.startswith(".")]
    return found


def _timed(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    p = _run(cmd)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {p.stderr[-1000:]}")
    return time.perf_counter() - t0


def kill_trials(label: str, target: Path, old_cmd: list[str], new_cmd: list[str], points: int,
                rng: random.Random, sig: signal.Signals) -> dict[str, Any]:
    """Make the old set, the new set once (reference), then ``points`` times: restore the old set, start
    the new command, send ``sig`` at a random moment of its run, classify the output, rerun to completion and
    look for temp files."""
    pristine = target.parent / f"pristine-{target.name}"
    for p in (target, pristine):
        shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
    _timed(old_cmd)
    old = _hashes(target)
    (shutil.copytree if target.is_dir() else shutil.copy2)(target, pristine)
    duration = _timed(new_cmd)
    new = _hashes(target)
    states, leftover_after_rerun, rcs = Counter(), 0, Counter()
    for _ in range(points):
        shutil.rmtree(target, ignore_errors=True) if target.is_dir() else target.unlink(missing_ok=True)
        (shutil.copytree if pristine.is_dir() else shutil.copy2)(pristine, target)
        proc = subprocess.Popen(new_cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0, duration))
        proc.send_signal(sig)
        rcs[proc.wait(timeout=600)] += 1
        now = _hashes(target)
        states["complete old set" if now == old else "complete new set" if now == new else "MIXED/BROKEN"] += 1
        p = _run(new_cmd)
        if p.returncode != 0 or _hashes(target) != new or _leftovers(target):
            leftover_after_rerun += 1
    shutil.rmtree(pristine, ignore_errors=True) if pristine.is_dir() else pristine.unlink(missing_ok=True)
    return {"case": label, "signal": sig.name, "points": points, "run_s": round(duration, 1),
            "states": dict(states), "exit_codes": {str(k): v for k, v in rcs.items()},
            "rerun_not_clean": leftover_after_rerun}


def campaign_kill(work: Path, art: Path, points: int, rng: random.Random, split: str,
                  progress: Any = None) -> list[dict[str, Any]]:
    """The acceptance case first (SIGKILL, ``--split-weights --force`` into a directory, ``points`` times),
    then fewer trials of a single-file output, SIGINT, and ``artifacts --force``. ``progress(rows)`` is
    called after each row so partial results survive a long campaign being stopped."""
    rows: list[dict[str, Any]] = []
    base = ONNXCOMP + ["transform", str(art), "--min-bytes", "1024"]
    d = work / "kill_dir"
    old = base + ["-o", str(d), "--policy", "comet"]
    new = base + ["-o", str(d), "--policy", "comet", "--split-weights", split, "--force"]
    few = max(3, points // 6)
    single = work / "kill_single.onnx"
    a = work / "kill_artifacts"
    art_cmd = ONNXCOMP + ["artifacts", "--model", "resnet18", "--batch", "2", "--image", "32", "--no-smoke-test",
                          "-o", str(a)]
    plan = [("transform -o DIR --split-weights --force", d, old, new, points, signal.SIGKILL),
            ("transform -o FILE.onnx --force", single, base + ["-o", str(single), "--policy", "lossless"],
             base + ["-o", str(single), "--policy", "comet", "--force"], few, signal.SIGKILL),
            ("transform -o DIR --split-weights --force", d, old, new, few, signal.SIGINT),
            ("artifacts -o DIR --force", a, art_cmd + ["--classes", "10"], art_cmd + ["--classes", "12", "--force"],
             max(2, points // 10), signal.SIGKILL)]
    for label, target, old_cmd, new_cmd, n, sig in plan:
        rows.append(kill_trials(label, target, old_cmd, new_cmd, n, rng, sig))
        print(f"[kill] {label} {sig.name}: {rows[-1]['states']}, rerun not clean {rows[-1]['rerun_not_clean']}",
              file=sys.stderr, flush=True)
        if progress is not None:
            progress(rows)
    return rows


def campaign_concurrent(work: Path, art: Path, rounds: int) -> dict[str, Any]:
    wins, one_line = Counter(), 0
    for r in range(rounds):
        out = work / f"same{r}.onnx"
        cmd = ONNXCOMP + ["transform", str(art), "-o", str(out), "--policy", "lossless"]
        procs = [subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for _ in range(2)]
        results = [(p.wait(timeout=600), p.stderr.read()) for p in procs]
        wins[sum(rc == 0 for rc, _ in results)] += 1
        losers = [e for rc, e in results if rc != 0]
        one_line += all(len(e.strip().splitlines()) == 1 for e in losers)
    return {"rounds": rounds, "winners_per_round": {str(k): v for k, v in wins.items()},
            "losers_told_in_one_line": one_line}


# -------------------------------------------------------------------------------------------------- long
_LONG_CHILD = textwrap.dedent('''
    import json, sys, time
    from pathlib import Path
    import numpy as np
    from onnxcomp.runtime.data import graph_data, synthetic_batches
    from onnxcomp.runtime.session import RuntimeSettings
    from onnxcomp.runtime.training_session import loss_value, open_artifact_session

    def rss():
        with open("/proc/self/status") as f:
            return next(int(l.split()[1]) for l in f if l.startswith("VmRSS:")) * 1024

    art, steps = sys.argv[1], int(sys.argv[2])
    session = open_artifact_session(art, settings=RuntimeSettings(verify_payloads=True))
    spec = graph_data(Path(art), Path(art) / "training_model.onnx", list(session.module.input_names()))
    batches = synthetic_batches(spec.image.shape, spec.classes, 0, spec.image.dtype)
    samples, losses, t0 = [], [], time.perf_counter()
    for step in range(1, steps + 1):
        x, y = next(batches)
        losses.append(loss_value(session.step(x, y)))
        if step == 1 or step % 100 == 0:
            samples.append([step, rss()])
            print(f"step {step} rss {samples[-1][1] / 2**20:.1f} MiB", file=sys.stderr, flush=True)
    print(json.dumps({"steps": steps, "rss": samples, "time_s": time.perf_counter() - t0,
                      "finite_losses": bool(np.isfinite(losses).all()), "first_loss": losses[0], "last_loss": losses[-1]}))
''')


def campaign_long(work: Path, art: Path, steps: int) -> dict[str, Any]:
    d = work / "long"
    shutil.rmtree(d, ignore_errors=True)
    p = _run(ONNXCOMP + ["transform", str(art), "-o", str(d), "--policy", "comet", "--min-bytes", "1000"])
    if p.returncode != 0:
        raise RuntimeError(p.stderr)
    script = work / "long_child.py"
    script.write_text(_LONG_CHILD)
    p = subprocess.run([PY, str(script), str(d), str(steps)], stdout=subprocess.PIPE, stderr=None, text=True,
                       timeout=7200)  # progress lines pass through on stderr
    if p.returncode != 0:
        return {"steps": steps, "error": p.stderr[-1500:]}
    r = json.loads(p.stdout.strip().splitlines()[-1])
    rss = [b for _, b in r["rss"]]
    after_warm = [b for s, b in r["rss"] if s >= 100]
    r["rss_first_mib"] = round(rss[0] / 2**20, 1)
    r["rss_step100_mib"] = round(after_warm[0] / 2**20, 1)
    r["rss_last_mib"] = round(rss[-1] / 2**20, 1)
    r["rss_growth_after_step100_mib"] = round((max(after_warm) - after_warm[0]) / 2**20, 2)
    return r


# ------------------------------------------------------------------------------------------------- main
def _fmt(c: dict[str, int]) -> str:
    return ", ".join(f"{k}: {v}" for k, v in sorted(c.items(), key=lambda kv: -kv[1]))


def summary(res: dict[str, Any]) -> str:
    lines = ["| campaign | cases | result |", "|---|---:|---|"]
    if "codec" in res:
        for mode, c in res["codec"]["by_mode"].items():
            lines.append(f"| codec-level corrupt payloads, {mode} | {sum(c.values())} | {_fmt(c)} |")
    if "op" in res:
        for mode, c in res["op"]["by_mode"].items():
            lines.append(f"| op-level corrupt payloads (ORT session), {mode} | {sum(c.values())} | {_fmt(c)} |")
        lines.append(f"| op-level errors naming op + tensor | {sum(res['op']['errors_named'].values())} | "
                     f"{_fmt(res['op']['errors_named'])} |")
    if "flags" in res:
        f = res["flags"]
        bad = [r["case"] for r in f["rows"] if not r["ok"]]
        lines.append(f"| bad flags: exit 2, one line, nothing written | {f['cases']} | {f['ok']} ok"
                     + (f"; not ok: {', '.join(bad)}" if bad else "") + " |")
    for k in res.get("kill", []):
        lines.append(f"| {k['signal']} at random points: {k['case']} (run {k['run_s']} s) | {k['points']} | "
                     f"{_fmt(k['states'])}; rerun not clean: {k['rerun_not_clean']} |")
    if "concurrent" in res:
        c = res["concurrent"]
        lines.append(f"| two concurrent `transform -o same.onnx` | {c['rounds']} | winners per round: "
                     f"{_fmt(c['winners_per_round'])}; loser told in one line: {c['losers_told_in_one_line']} |")
    if "long" in res:
        lg = res["long"]
        if "error" in lg:
            lines.append(f"| long run | {lg['steps']} | ERROR {lg['error'][-200:]} |")
        else:
            lines.append(f"| long run (comet + --verify-payloads), RSS sampled every 100 steps | {lg['steps']} | "
                         f"RSS {lg['rss_first_mib']} MiB at step 1, {lg['rss_step100_mib']} at 100, "
                         f"{lg['rss_last_mib']} at {lg['steps']} (growth after step 100: "
                         f"{lg['rss_growth_after_step100_mib']} MiB); losses finite: {lg['finite_losses']}; "
                         f"{lg['time_s']:.0f} s |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", default="/tmp/onnxcomp-fault-injection", help="scratch directory (recreated)")
    ap.add_argument("--out", help="write every figure as JSON here")
    ap.add_argument("--only", nargs="*", choices=["codec", "op", "flags", "kill", "concurrent", "long"])
    ap.add_argument("--kills", type=int, default=20, help="random kill points for the --split-weights run")
    ap.add_argument("--codec-cases", type=int, default=12, help="corruptions per codec sample input")
    ap.add_argument("--op-cases", type=int, default=20, help="op-level corruptions per codec")
    ap.add_argument("--steps", type=int, default=1000, help="long-run training steps")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--art", help="use this artifact directory for the flags/kill/concurrent/long campaigns "
                    "(default: generate resnet18, batch 2, 32x32, 10 classes)")
    ap.add_argument("--split", default="8KiB", help="--split-weights size for the kill campaign (a size below "
                    "the model's largest fully connected weight)")
    args = ap.parse_args(argv)
    work = Path(args.work)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    only = set(args.only or ["codec", "op", "flags", "kill", "concurrent", "long"])
    rng = random.Random(args.seed)
    res: dict[str, Any] = {}
    art = Path(args.art).resolve() if args.art else work / "art"
    if only & {"flags", "kill", "concurrent", "long"} and not args.art:
        p = _run(ONNXCOMP + ["artifacts", "--model", "resnet18", "--batch", "2", "--image", "32", "--classes", "10",
                             "--no-smoke-test", "-o", str(art)])
        if p.returncode != 0:
            raise RuntimeError(p.stderr)
    steps = [("codec", lambda: campaign_codec(work, args.codec_cases)),
             ("op", lambda: campaign_op(work, args.op_cases)),
             ("flags", lambda: campaign_flags(work, art)),
             ("concurrent", lambda: campaign_concurrent(work, art, 5)),
             ("long", lambda: campaign_long(work, art, args.steps)),
             ("kill", lambda: campaign_kill(work, art, args.kills, rng, args.split, progress=partial))]

    def partial(rows: list[dict[str, Any]]) -> None:
        if args.out:
            Path(args.out).write_text(json.dumps({**res, "kill": rows}, indent=2))
    for name, fn in steps:
        if name in only:
            t0 = time.perf_counter()
            res[name] = fn()
            print(f"[{name}] done in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
            if args.out:
                Path(args.out).write_text(json.dumps(res, indent=2))
    print(summary(res))
    if args.out:
        Path(args.out).write_text(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
