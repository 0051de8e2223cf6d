"""The payload store (runtime.payload_store, issue 14 item 2): the ops hand ORT token frames, a worker thread
compresses and prefetches, and every result stays the synchronous path's bit for bit; failures on the worker
surface as one OpError, waits time out, and nothing outlives a step."""
from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from onnxcomp.custom_ops import REGISTRY, get_codec
from onnxcomp.errors import OpError
from onnxcomp.runtime import framing, payload_store

MODES = ("off", "inline", "async")


@pytest.fixture(scope="module")
def encoded_dir(small_artifacts: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The small CNN with every stash encoded (ReLU masks as bitmask, maxpool_index, sparse; no recompute).
    The masks as bitmask PyOps (``native=False``): the store serves PyOps, and the tests inject into that codec."""
    from onnxcomp.transform import transform

    out = tmp_path_factory.mktemp("store") / "art"
    result = transform(small_artifacts, out, "lossless-encode", min_bytes=0, native=False)
    assert len({r["codec"] for r in result.records}) >= 2
    return out


@pytest.fixture(autouse=True)
def store_off_after() -> Iterator[None]:
    yield
    payload_store.set_mode("off")
    payload_store.store().reset_stats()


def _session(art: Path, mode: str):  # noqa: ANN202
    from onnxcomp.runtime.session import RuntimeSettings
    from onnxcomp.runtime.training_session import open_artifact_session

    return open_artifact_session(art, settings=RuntimeSettings(payload_store=mode), seed=5)


def _batches(n: int) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(7)
    return [(rng.standard_normal((4, 3, 16, 16)).astype(np.float32), rng.integers(0, 10, 4).astype(np.int64))
            for _ in range(n)]


def _run(art: Path, mode: str, steps: int) -> tuple[list[float], np.ndarray]:
    from onnxcomp.runtime.training_session import loss_value

    session = _session(art, mode)
    losses = []
    for x, y in _batches(steps):
        losses.append(loss_value(session.step(x, y)))
        assert payload_store.store().held() == 0, "a step must leave nothing in the store"
    params = session.parameters()
    session.close()
    return losses, params


def test_every_mode_trains_bit_identically(encoded_dir: Path) -> None:
    import json

    import onnx

    graph = onnx.load(str(encoded_dir / "training_model.onnx"), load_external_data=False).graph
    # Payloads whose size depends on the data are held by the store whatever the mode (param store=inline).
    inline = sum(1 for n in graph.node if n.op_type.startswith("OnnxcompEncode_") and
                 json.loads(n.attribute[0].s).get("store") == "inline")
    runs = {}
    for mode in MODES:
        payload_store.store().reset_stats()
        runs[mode] = _run(encoded_dir, mode, 4)
        stats = payload_store.store().stats
        if mode == "off":
            assert stats.puts == stats.takes and stats.puts % max(inline, 1) == 0 and (stats.puts > 0) == (inline > 0)
        else:
            assert stats.puts == stats.takes > 0 and stats.dropped == 0
        if mode == "async":
            # Once a step has taught the store the decode order (this run's first, or the inline run's), every
            # decoder but the first of a step finds its payload prefetched.
            per_step = stats.takes // 4
            assert stats.prefetch_hits == stats.prefetched
            assert 3 * (per_step - 1) <= stats.prefetched <= 4 * (per_step - 1) and per_step > 1
    assert len(set(runs["off"][0])) > 1, "data must vary between steps"
    for mode in MODES[1:]:
        assert runs[mode][0] == runs["off"][0]
        assert np.array_equal(runs[mode][1].view(np.uint32), runs["off"][1].view(np.uint32))


def test_a_worker_failure_is_one_op_error_naming_the_encoder(encoded_dir: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    session = _session(encoded_dir, "async")
    (x, y), (x2, y2) = _batches(2)
    codec = get_codec("bitmask")     # the ReLU masks' codec (it packs ORT's Greater(y, 0))

    def boom(x: np.ndarray, **params: object) -> tuple:
        raise ValueError("injected on the worker")

    monkeypatch.setattr(codec, "encode_cpu", boom)
    with pytest.raises(OpError) as info:
        session.step(x, y)
    assert info.value.op_type == "OnnxcompEncode_bitmask"
    assert info.value.tensor and "ValueError: injected on the worker" in info.value.cause
    assert payload_store.store().held() == 0
    monkeypatch.undo()
    assert np.isfinite(float(np.asarray(session.step(x2, y2)).reshape(-1)[0]))  # the next step trains normally


def test_a_stuck_worker_times_out_instead_of_hanging(encoded_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    session = _session(encoded_dir, "async")
    (x, y), = _batches(1)
    codec = get_codec("bitmask")
    orig = codec.encode_cpu

    def slow(x: np.ndarray, **params: object) -> tuple:
        time.sleep(1.5)
        return orig(x, **params)

    monkeypatch.setattr(codec, "encode_cpu", slow)
    monkeypatch.setenv(payload_store.ENV_TIMEOUT, "0.2")
    t0 = time.perf_counter()
    with pytest.raises(OpError) as info:
        session.step(x, y)
    assert "timed out" in info.value.cause and payload_store.ENV_TIMEOUT in info.value.cause
    assert time.perf_counter() - t0 < 60
    assert payload_store.store().held() == 0


def _fake_put(store: payload_store.PayloadStore, mode: str, name: str, value: int) -> int:
    return store.put(mode, name, 8, lambda: (np.full(2, value),))


def test_prefetch_follows_the_previous_steps_decode_order() -> None:
    store = payload_store.PayloadStore()
    decode_calls: list[int] = []

    def decode(payload: tuple) -> int:
        decode_calls.append(int(payload[0][0]))
        return int(payload[0][0])

    for step in range(3):
        tokens = {name: _fake_put(store, "async", name, v) for v, name in enumerate("abcd")}
        # Backward order: not simply LIFO (b before c).
        got = [store.take("async", tokens[n], n, "k", decode) for n in "dbca"]
        assert got == [3, 1, 2, 0]
        store.settle()
        if step == 0:
            assert store.stats.prefetched == 0
    # Steps 2 and 3: after d comes b, after b c, after c a -- three prefetches each, all used.
    assert store.stats.prefetched == store.stats.prefetch_hits == 6
    assert store.stats.dropped == 0 and store.held() == 0
    assert decode_calls == [3, 1, 2, 0] * 3


def test_a_prefetch_with_other_decode_params_is_not_used() -> None:
    store = payload_store.PayloadStore()
    for key in ("k1", "k2"):
        a, b = _fake_put(store, "async", "a", 1), _fake_put(store, "async", "b", 2)
        assert store.take("async", b, "b", key, lambda p: ("b", key)) == ("b", key)
        assert store.take("async", a, "a", key, lambda p: ("a", key)) == ("a", key)
        store.settle()
    assert store.stats.prefetched == 1 and store.stats.prefetch_hits == 0


def test_settle_drops_what_no_decoder_took_and_stale_tokens_are_refused() -> None:
    store = payload_store.PayloadStore()
    for mode in ("inline", "async"):
        token = _fake_put(store, mode, "x", 1)
        assert store.held() == 1
        assert store.settle() == 1 and store.held() == 0
        with pytest.raises(payload_store.StoreError, match="not in the payload store"):
            store.take(mode, token, "x", "k", lambda p: p)


def test_token_frames_round_trip_and_are_never_unframed_as_payloads() -> None:
    for codec in REGISTRY.values():
        arrays = framing.stored_payload(codec, (2, 3, 4), 12345)
        assert framing.stored_token(codec, arrays) == (12345, (2, 3, 4))
        assert sum(a.nbytes for a in arrays) < 200
        with pytest.raises(framing.PayloadError, match="token"):
            framing.unframe(codec, arrays)
    codec = get_codec("relumask")   # an ordinary framed payload is no token
    x = np.random.default_rng(0).standard_normal((2, 3, 8, 8)).astype(np.float32)
    payload = tuple(np.ascontiguousarray(p, dtype=d) for p, d in zip(codec.encode_cpu(x), codec.payload_dtypes))
    assert framing.stored_token(codec, framing.frame(codec, payload)) is None


def test_unknown_modes_are_refused_with_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    from onnxcomp.errors import OnnxcompError
    from onnxcomp.runtime.session import RuntimeSettings

    with pytest.raises(payload_store.StoreError, match="off, inline, async"):
        payload_store.set_mode("later")
    with pytest.raises(OnnxcompError, match="payload store"):
        RuntimeSettings(payload_store="later")
    monkeypatch.setenv(payload_store.ENV_TIMEOUT, "soon")
    with pytest.raises(payload_store.StoreError, match=payload_store.ENV_TIMEOUT):
        payload_store.PayloadStore().put("inline", "x", 8, lambda: (np.zeros(1),))


@pytest.mark.slow
def test_no_growth_over_1000_async_steps(encoded_dir: Path) -> None:
    from onnxcomp.runtime.proc_memory import status_bytes

    session = _session(encoded_dir, "async")
    batches = _batches(4)
    rss = []
    for i in range(1000):
        x, y = batches[i % 4]
        session.step(x, y)
        assert payload_store.store().held() == 0
        if i in (99, 999):
            rss.append(status_bytes("VmRSS"))
    stats = payload_store.store().stats
    assert stats.dropped == 0 and stats.puts == stats.takes
    # Steps 100..1000 of a tiny CNN: any per-step leak of a payload or a raw input (>= 1 KiB) would show.
    assert rss[1] - rss[0] < 4 << 20, f"RSS grew {(rss[1] - rss[0]) / 2**20:.1f} MiB over 900 steps"


def test_the_planner_models_what_the_async_store_holds(encoded_dir: Path) -> None:
    import onnx

    from onnxcomp.analysis import analyze_model
    from onnxcomp.custom_ops.contract import DECODE_PREFIX, ENCODE_PREFIX
    from onnxcomp.planner.predict import predicted_live, predicted_peak, store_workspace

    model = onnx.load(encoded_dir / "training_model.onnx")
    seen, off = predicted_live(model, payload_store="off")
    seen_async, on = predicted_live(model, payload_store="async")
    assert [n.name for n in seen.graph.node] == [n.name for n in seen_async.graph.node]
    analysis = analyze_model(seen)
    extra = store_workspace(analysis, list(seen.graph.node))
    assert np.array_equal(on - off, extra) and predicted_peak(model, payload_store="inline") == off.max()
    nodes = list(seen.graph.node)
    enc = next(i for i, n in enumerate(nodes) if n.op_type.startswith(ENCODE_PREFIX))
    decs = [i for i, n in enumerate(nodes) if n.op_type.startswith(DECODE_PREFIX)]
    # The encoder's input copy is held on the node after it; a prefetched decode from one decoder to the next.
    assert extra[enc + 1] >= analysis.tensors[nodes[enc].input[0]].nbytes > 0
    assert extra[decs[0]] >= analysis.tensors[nodes[decs[1]].output[0]].nbytes > 0
    assert extra[:enc + 1].sum() == 0 and extra[decs[-1]:].sum() == 0
