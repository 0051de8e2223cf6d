"""The measured cost model: fitting, loading (cache, shipped defaults, broken files), calibrate, predictions."""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest

from onnxcomp.planner import cost_model as cm
from onnxcomp.planner.cost_model import (CostModel, CostModelWarning, NodeTimes, codec_features, fit_linear,
                                         fit_op_types, predict_step, predict_step_seconds)


@pytest.fixture
def empty_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "onnxcomp" / "cost_model.json"


# ------------------------------------------------------------------------------------------------ fitting
def test_fit_recovers_known_codec_coefficients() -> None:
    rng = np.random.default_rng(1)
    a, b, c = 80e-6, 0.4e-9, 1.1e-9  # 80 µs per call, 0.4 ns/byte, 1.1 ns per nonzero byte
    rows, times = [], []
    for nbytes in (16 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20):
        for nz in (0.1, 0.3, 0.5, 0.7, 0.95):
            rows.append(codec_features(nbytes, nz))
            times.append((a + b * nbytes + c * nbytes * nz) * (1 + rng.normal(0, 0.01)))
    fit = fit_linear(np.array(rows), np.array(times))
    assert fit.coef == pytest.approx((a, b, c), rel=0.05)
    assert fit.r2 > 0.999 and fit.mean_rel_err < 0.02 and fit.samples == 25


def test_fit_never_returns_negative_coefficients() -> None:
    # a constant time with noise: lstsq would give a small negative slope; NNLS clamps it at zero
    x = np.array([codec_features(n, 0.5) for n in (1 << 10, 1 << 20, 1 << 24)])
    fit = fit_linear(x, np.array([1.0e-3, 0.99e-3, 0.98e-3]))
    assert min(fit.coef) >= 0 and fit.predict(codec_features(1 << 22, 0.5)) == pytest.approx(1e-3, rel=0.05)


def test_op_type_fits_use_macs_for_convs() -> None:
    samples = [("Conv", 4 * m, m * 27.0, 2e-6 + 1e-10 * m * 27) for m in (1e4, 5e4, 2e5, 1e6)]
    fits = fit_op_types(samples)
    assert fits["Conv"].coef[2] == pytest.approx(1e-10, rel=0.05)
    assert "Relu" not in fit_op_types([("Relu", 10, 0.0, 1e-6)])  # too few samples: no fit


# ------------------------------------------------------------------------------------------------ loading
def test_load_falls_back_to_shipped_defaults(empty_cache: Path) -> None:
    assert not empty_cache.exists()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CostModelWarning)  # the defaults come from another machine
        model = CostModel.load()
    assert model.source == "shipped defaults"
    from onnxcomp.custom_ops import REGISTRY

    assert set(model.codecs) == set(REGISTRY), "shipped defaults must cover every registered codec"
    for codec in REGISTRY:
        small, big = (model.codec_seconds(codec, "encode", n, 0.5) for n in (64 << 10, 16 << 20))
        assert 0 < small < big


def test_corrupted_cache_warns_in_one_line_and_falls_back(empty_cache: Path) -> None:
    empty_cache.parent.mkdir(parents=True)
    for text in ("{not json", json.dumps({"format": 1, "codecs": {}}), json.dumps([1, 2])):
        empty_cache.write_text(text)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model = CostModel.load()
        mine = [w for w in caught if issubclass(w.category, CostModelWarning) and "ignoring" in str(w.message)]
        assert len(mine) == 1 and "\n" not in str(mine[0].message) and str(empty_cache) in str(mine[0].message)
        assert model.source == "shipped defaults"


def test_load_warns_when_calibrated_elsewhere(tmp_path: Path) -> None:
    data = json.loads(cm.SHIPPED_DEFAULTS.read_text())
    data["machine"] = {**data["machine"], "cores": 977, "codec_backend": "numpy-elsewhere"}
    path = tmp_path / "other.json"
    path.write_text(json.dumps(data))
    with pytest.warns(CostModelWarning, match="977"):
        model = CostModel.load(path)
    assert model.source.startswith(f"calibrated {path}")


# ------------------------------------------------------------------------- codec tables per backend
def _needs_numba() -> None:
    from onnxcomp.custom_ops import cpu

    if not cpu.numba_available():
        pytest.skip("numba is not installed")


def test_codec_kernels_are_what_a_training_process_runs_per_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    _needs_numba()
    import sys

    from onnxcomp.custom_ops import cpu

    auto = cm.codec_kernels("auto")
    assert {m for m, impl in auto.items() if impl == "aot"} == set(cpu.AOT_BY_DEFAULT)
    assert set(auto.values()) == {"aot", "numpy"} and cm.codec_table(auto) == "aot"
    assert set(cm.codec_kernels("numba").values()) == {"numba"} and cm.codec_table(cm.codec_kernels("numba")) == "numba"
    assert cm.codec_table(cm.codec_kernels("aot")) == "aot" and cm.codec_table(cm.codec_kernels("numpy")) == "numpy"
    # a process that imported numba anyway runs JIT kernels under "auto" (cpu.backend_for); a training process
    # does not import it, so the table stays the AOT one
    import importlib.util
    from types import ModuleType

    stand_in = ModuleType("numba")  # "numba imported" without importing it (its JIT runtime weighs ~60 MiB)
    stand_in.__spec__ = importlib.util.find_spec("numba")
    monkeypatch.setitem(sys.modules, "numba", sys.modules.get("numba", stand_in))
    with cpu.use_backend("auto"):
        assert cpu.backend_for("zfp") == "numba"
        assert cm.codec_kernels() == auto and cm.active_codec_table() == "aot"
    with pytest.raises(ValueError, match="unknown codec backend"):
        cm.codec_kernels("gpu")


def test_codec_kernels_without_numba_are_numpy(monkeypatch: pytest.MonkeyPatch) -> None:
    from onnxcomp.custom_ops import cpu

    monkeypatch.setattr(cpu, "numba_available", lambda: False)
    assert set(cm.codec_kernels("auto").values()) == {"numpy"}
    with cpu.use_backend("auto"):
        assert cm.active_codec_table() == "numpy" and cm.user_cache_path().name == "cost_model.numpy.json"


def test_shipped_tables_record_the_kernels_they_timed() -> None:
    for table, path in cm.SHIPPED_TABLES.items():
        data = json.loads(path.read_text())
        assert data["machine"]["codec_table"] == table, path
        assert cm.codec_table(data["machine"]["codec_kernels"]) == table
        assert cm.CostModel.from_dict(data).codec_table == table
    assert cm.SHIPPED_TABLES[cm.DEFAULT_TABLE] == cm.SHIPPED_DEFAULTS
    import tomllib

    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    data = tomllib.loads(pyproject.read_text())["tool"]["setuptools"]["package-data"]["onnxcomp.planner"]
    assert {p.name for p in cm.SHIPPED_TABLES.values()} <= set(data), "every shipped table is package data"


@pytest.mark.parametrize("backend,table", [("auto", "aot"), ("numba", "numba")])
def test_load_uses_the_shipped_table_of_the_active_backend(empty_cache: Path, backend: str, table: str) -> None:
    _needs_numba()
    from onnxcomp.custom_ops import cpu

    with cpu.use_backend(backend), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = CostModel.load()
    assert model.source == "shipped defaults" and model.codec_table == table
    assert not [w for w in caught if "codec_table" in str(w.message)], "the table matches the backend: no warning"


def test_numpy_backend_falls_back_to_the_default_table_with_a_warning(empty_cache: Path) -> None:
    from onnxcomp.custom_ops import cpu

    with cpu.use_backend("numpy"), pytest.warns(CostModelWarning, match="codec_table 'aot' .now 'numpy'"):
        model = CostModel.load()
    assert model.source == "shipped defaults" and model.codec_table == "aot"


def _calibration_for(table: str, kernels_setting: str) -> dict:
    data = json.loads(cm.SHIPPED_DEFAULTS.read_text())
    data["machine"] = {**cm.machine_info(), "codec_backend": kernels_setting,
                       "codec_kernels": cm.codec_kernels(kernels_setting), "codec_table": table}
    data["created"] = "test"
    return data


def test_user_calibration_is_per_table_and_other_kernels_are_not_used(empty_cache: Path) -> None:
    _needs_numba()
    from onnxcomp.custom_ops import cpu

    empty_cache.parent.mkdir(parents=True)
    assert cm.user_cache_path("aot") == empty_cache
    assert cm.user_cache_path("numba") == empty_cache.with_name("cost_model.numba.json")
    # a JIT calibration where the default backend's file goes: skipped, with one line saying why
    empty_cache.write_text(json.dumps(_calibration_for("numba", "numba")))
    with cpu.use_backend("auto"), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = CostModel.load()
    mine = [str(w.message) for w in caught if "ignoring" in str(w.message)]
    assert len(mine) == 1 and "numba codec kernels" in mine[0] and "\n" not in mine[0]
    assert model.source == "shipped defaults" and model.codec_table == "aot"
    # the matching table is used
    empty_cache.write_text(json.dumps(_calibration_for("aot", "auto")))
    with cpu.use_backend("auto"), warnings.catch_warnings():
        warnings.simplefilter("error", CostModelWarning)
        assert CostModel.load().source.startswith(f"calibrated {empty_cache}")
    cm.user_cache_path("numba").write_text(json.dumps(_calibration_for("numba", "numba")))
    with cpu.use_backend("numba"), warnings.catch_warnings():
        warnings.simplefilter("error", CostModelWarning)
        model = CostModel.load()
    assert model.source.startswith(f"calibrated {cm.user_cache_path('numba')}") and model.codec_table == "numba"


def test_a_calibration_without_a_table_is_read_as_numbas_jit_kernels() -> None:
    # before the AOT default, "auto" (and "numba") timed numba's JIT kernels for dpr / sz / zfp
    assert cm.recorded_codec_table({"machine": {"codec_backend": "auto"}}) == "numba"
    assert cm.recorded_codec_table({"machine": {"codec_backend": "numpy"}}) == "numpy"
    assert cm.recorded_codec_table({"machine": {"codec_backend": "auto", "codec_table": "aot"}}) == "aot"
    assert cm.recorded_codec_table({}) is None


def test_calibration_refuses_kernels_no_training_run_uses() -> None:
    _needs_numba()
    from onnxcomp.errors import OnnxcompError
    from onnxcomp.runtime.calibrate import check_timed_kernels

    assert check_timed_kernels(cm.codec_kernels("auto"), "auto") == cm.codec_kernels("auto")
    jit_under_auto = {**cm.codec_kernels("auto"), "zfp": "numba"}  # numba imported into the timing child
    with pytest.raises(OnnxcompError, match="zfp timed numba .a step runs aot."):
        check_timed_kernels(jit_under_auto, "auto")


def test_calibrate_quick_writes_valid_json_atomically(tmp_path: Path) -> None:
    from onnxcomp.cli import main

    out = tmp_path / "cm.json"
    code = main(["calibrate", "--quick", "--codecs", "signbits", "--sizes", "64KiB", "256KiB", "--no-model",
                 "-o", str(out)])
    assert code == 0
    assert [p.name for p in tmp_path.iterdir()] == ["cm.json"], "no temporary file left behind"
    data = json.loads(out.read_text())
    assert data["machine"]["cores"] >= 1 and data["machine"]["codec_backend"] in ("numpy", "numba", "auto")
    # the kernels the codecs were timed with, and the table they price
    assert data["machine"]["codec_kernels"] == cm.codec_kernels()
    assert data["machine"]["codec_table"] == cm.active_codec_table()
    assert set(data["codecs"]) == {"signbits"} and data["plan"]["sizes"] == [64 << 10, 256 << 10]
    with warnings.catch_warnings():
        warnings.simplefilter("error", CostModelWarning)  # same machine, same backend: no warning
        model = CostModel.load(out)
    assert model.codec_seconds("signbits", "decode", 1 << 20) > 0
    # an existing file is not replaced without --force
    assert main(["calibrate", "--quick", "--codecs", "signbits", "--sizes", "64KiB", "--no-model",
                 "-o", str(out)]) != 0


# ------------------------------------------------------------------------------------------------ graphs
@pytest.fixture(scope="module")
def shipped() -> CostModel:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CostModelWarning)
        return CostModel.load(cm.SHIPPED_DEFAULTS)


def _extra_encoder(model: onnx.ModelProto, tensor: str, k: int) -> onnx.ModelProto:
    """``model`` with one more signbits encoder of ``tensor`` (outputs unused)."""
    from onnx import helper

    from onnxcomp.custom_ops import contract

    m = onnx.ModelProto()
    m.CopyFrom(model)
    m.graph.node.append(helper.make_node(contract.encode_op("signbits"), [tensor], [f"xb{k}", f"xs{k}", f"xa{k}"],
                                         name=f"extra_enc{k}", domain=contract.DOMAIN,
                                         params=contract.params_value({"tensor": tensor})))
    return m


def _pyop_encoded(transform_model, base: onnx.ModelProto) -> onnx.ModelProto:  # noqa: ANN001
    """``lossless-encode`` with the MaxPool indices held by the maxpool_index PyOps: the policy's default holds
    this net's stashes natively (standard ops, no codec PyOps to price)."""
    from onnxcomp.passes import MaxPoolIndexPass

    return transform_model(MaxPoolIndexPass(native=False).run(base).model, "lossless-encode").model


def test_predict_step_seconds_monotone_in_codec_ops(small_artifacts: Path, shipped: CostModel) -> None:
    from onnxcomp.transform import transform_model

    base = onnx.load(str(small_artifacts / "training_model.onnx"))
    encoded = _pyop_encoded(transform_model, base)
    p_base, p_enc = predict_step_seconds(base, shipped), predict_step_seconds(encoded, shipped)
    assert p_enc > p_base
    pred = predict_step(encoded, shipped)
    assert pred.codec_nodes and pred.codec_ops > 0
    relu = next(n.output[0] for n in base.graph.node if n.op_type == "Relu")
    more = p_enc
    for k in range(3):
        encoded = _extra_encoder(encoded, relu, k)
        now = predict_step_seconds(encoded, shipped)
        assert now > more
        more = now


def test_profile_node_seconds_times_every_node(small_artifacts: Path, shipped: CostModel) -> None:
    times = cm.profile_node_seconds(small_artifacts, steps=1)
    graph = onnx.load(str(small_artifacts / "training_model.onnx"))
    names = {n.name for n in graph.graph.node}
    assert names <= set(times)
    assert all(t >= 0 for t in times.values()) and sum(times.values()) > 0
    convs = [n.name for n in graph.graph.node if n.op_type in ("Conv", "ConvGrad")]
    assert all(times[c] > 0 for c in convs)
    assert times.step_seconds >= sum(times[n] for n in names) * 0.5
    # with the profile, every kept node is predicted at its measured time
    pred = predict_step(graph, shipped, times)
    assert all(pred.per_node[n.name] == times[n.name] for n in graph.graph.node)
    assert pred.total == pytest.approx(sum(times[n] for n in names) + times.overhead_seconds)
    round_trip = NodeTimes.from_dict(json.loads(json.dumps(times.to_dict())))
    assert dict(round_trip) == dict(times) and round_trip.features == times.features


def test_clone_takes_its_originals_time(shipped: CostModel) -> None:
    from onnx import helper

    times = NodeTimes({"/relu/Relu": 2e-3}, features={"/relu/Relu": ("Relu", 1000, 0.0)})
    clone = helper.make_node("Relu", ["x"], ["y"], name="/relu/Relu__recompute_1")
    assert shipped.op_seconds(clone, 1000, times) == pytest.approx(2e-3)
    assert shipped.op_seconds(clone, 500, times) == pytest.approx(1e-3)  # a half-size chunk


@pytest.mark.slow
def test_quick_calibration_covers_every_codec_and_the_profiled_ops(tmp_path: Path) -> None:
    from onnxcomp.custom_ops import REGISTRY
    from onnxcomp.runtime.calibrate import calibrate

    res = calibrate(tmp_path / "cm.json", quick=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CostModelWarning)
        model = CostModel.load(res.path)
    assert set(model.codecs) == set(REGISTRY)
    assert {"Conv", "ConvGrad", "BatchNormInternal", "Cast", "*"} <= set(model.ops)
    assert res.data["profiled_model"]["nodes"] > 100 and res.data["samples"]["codecs"]


# ---------------------------------------------------------------------- what a profile says about new nodes
def _cost_with(ops: dict[str, tuple[float, float, float]]) -> CostModel:
    from onnxcomp.planner.cost_model import LinearFit

    fits = {op: LinearFit(coef) for op, coef in ops.items()}
    codec = {"encode": LinearFit((1e-3, 0.0, 0.0)), "decode": LinearFit((2e-3, 0.0, 0.0))}
    return CostModel({"signbits": codec}, {"*": LinearFit((0.0, 1e-9, 0.0)), **fits})


def test_views_move_no_bytes_and_slices_read_what_they_write() -> None:
    from onnx import helper

    from onnxcomp.planner.cost_model import node_traffic

    assert node_traffic(helper.make_node("Reshape", ["x", "s"], ["y"]), 8 << 20, 8 << 20) == 0
    assert node_traffic(helper.make_node("Slice", ["x", "a", "b"], ["y"]), 8 << 20, 4) == 8
    assert node_traffic(helper.make_node("Add", ["x", "x"], ["y"]), 16, 8) == 24
    cost = _cost_with({"Reshape": (0.0, 1e-9, 0.0)})
    assert cost.op_seconds(helper.make_node("Reshape", ["x", "s"], ["y"]), 8 << 20, in_bytes=8 << 20) == 0.0


def test_a_slow_profile_prices_new_nodes_by_their_own_kind_only() -> None:
    """A new node runs at the speed the profile measured on its own nodes of that kind (a profile whose Relus
    took 3x their calibrated time prices a new Relu 3x), and a kind the profile never timed (a float32 ->
    float16 Cast) at its calibrated time, not at the profile's overall slowdown: in-step, the Casts a lossy
    policy adds did not follow the slowdown of ORT's multi-threaded kernels (`docs/notes/costgap.md`). Views and
    shape arithmetic cost the profile's tiny-node time, not zero."""
    from onnx import helper

    cost = _cost_with({"Relu": (0.0, 1e-9, 0.0), "Cast": (0.0, 2e-9, 0.0)})
    mib = 1 << 20
    feats = {f"relu{k}": ("Relu", 4 * mib, 0.0) for k in range(3)} | {"tiny": ("Relu", 64, 0.0)}
    times = NodeTimes({f"relu{k}": 3 * 4 * mib * 1e-9 for k in range(3)} | {"tiny": 5e-6}, features=feats)
    assert times.slowdown(cost) == pytest.approx(3.0)
    assert times.kind_slowdowns(cost) == pytest.approx({"Relu": 3.0})
    assert times.dispatch_seconds() == pytest.approx(5e-6)
    relu = helper.make_node("Relu", ["x"], ["r"], name="new_relu")
    assert cost.op_seconds(relu, mib, times, in_bytes=mib) == pytest.approx(3 * 1e-9 * 2 * mib, rel=1e-3)
    cast = helper.make_node("Cast", ["x"], ["h"], to=onnx.TensorProto.FLOAT16, name="new_cast")
    assert cost.op_seconds(cast, mib, times, in_bytes=2 * mib) == pytest.approx(2e-9 * 3 * mib)
    assert cost.op_seconds(cast, mib, times, in_bytes=2 * mib) == cost.op_seconds(cast, mib, None, in_bytes=2 * mib)
    view = helper.make_node("Reshape", ["x", "s"], ["y"], name="new_view")
    assert cost.op_seconds(view, mib, times, in_bytes=mib) == pytest.approx(5e-6)
    # A profile at the calibration's speed changes nothing.
    same = NodeTimes({f"relu{k}": 4 * mib * 1e-9 for k in range(3)}, features=feats)
    assert same.slowdown(cost) == pytest.approx(1.0)
    assert cost.op_seconds(cast, mib, same, in_bytes=2 * mib) == pytest.approx(2e-9 * 3 * mib)


def test_slowdown_is_the_median_op_type_not_the_heaviest() -> None:
    """One heavy op type that runs near its fit must not set the speed of every new node: the slowdown is
    the median of the per-type ratios (here 0.25, 0.25 and 1.0 -> 0.25), where one pooled ratio would be
    dominated by the 100x heavier "Slow" nodes (~0.99)."""
    from onnx import helper

    cost = _cost_with({"Add": (0.0, 1e-9, 0.0), "Relu": (0.0, 1e-9, 0.0), "Slow": (0.0, 1e-9, 0.0),
                       "Mul": (0.0, 1e-9, 0.0)})
    mib = 1 << 20
    feats = ({f"add{k}": ("Add", 2 * mib, 0.0) for k in range(2)}
             | {f"relu{k}": ("Relu", 2 * mib, 0.0) for k in range(2)}
             | {f"slow{k}": ("Slow", 200 * mib, 0.0) for k in range(2)})
    times = NodeTimes({f"add{k}": 0.25 * 2 * mib * 1e-9 for k in range(2)}
                      | {f"relu{k}": 0.25 * 2 * mib * 1e-9 for k in range(2)}
                      | {f"slow{k}": 200 * mib * 1e-9 for k in range(2)}, features=feats)
    assert times.slowdown(cost) == pytest.approx(0.25)
    # a new Add at the Adds' ratio, a new "Slow" at its own (~1.0), a Mul (no Mul profiled) at calibration speed
    add = helper.make_node("Add", ["x", "y"], ["z"], name="new_add")
    assert cost.op_seconds(add, mib, times, in_bytes=2 * mib) == pytest.approx(0.25 * 3 * mib * 1e-9)
    slow = helper.make_node("Slow", ["x"], ["z"], name="new_slow")
    assert cost.op_seconds(slow, mib, times, in_bytes=mib) == pytest.approx(2 * mib * 1e-9, rel=0.02)
    mul = helper.make_node("Mul", ["x", "y"], ["z"], name="new_mul")
    assert cost.op_seconds(mul, mib, times, in_bytes=2 * mib) == pytest.approx(3 * mib * 1e-9)


def test_codec_ops_are_predicted_at_their_calibrated_time_whatever_the_profile_speed(small_artifacts: Path) -> None:
    """Codec PyOps are priced at their calibrated time, not scaled by the profile's slowdown (ORT's kernels'
    ratio to their fits): in-step dpr_fp8 / zfp ran at 0.75-1.16x their calibration at slowdowns 1.3-1.7
    (`docs/notes/costgap.md`). On main the slower profile priced them 2.5x."""
    from onnxcomp.transform import transform_model

    encoded = _pyop_encoded(transform_model, onnx.load(str(small_artifacts / "training_model.onnx")))
    cost = _cost_with({"Relu": (0.0, 1e-9, 0.0)})
    mib = 1 << 20
    feats = {f"big_relu{k}": ("Relu", 4 * mib, 0.0) for k in range(2)}
    at_speed = NodeTimes({n: 4 * mib * 1e-9 for n in feats}, features=feats)
    slower = NodeTimes({n: 2.5 * 4 * mib * 1e-9 for n in feats}, features=feats)
    faster = NodeTimes({n: 0.5 * 4 * mib * 1e-9 for n in feats}, features=feats)
    assert slower.slowdown(cost) == pytest.approx(2.5)
    base = predict_step(encoded, cost, at_speed)
    assert base.codec_nodes and base.codec_ops >= 1e-3  # the calibrated intercepts
    expected = sum(cost.codec_seconds(c, d, n, nz) for c, d, n, nz in base.codec_nodes.values())
    assert base.codec_ops == pytest.approx(expected)
    assert predict_step(encoded, cost, slower).codec_ops == pytest.approx(base.codec_ops)
    assert predict_step(encoded, cost, faster).codec_ops == pytest.approx(base.codec_ops)


# ------------------------------------------------------------- convolution blocks, renamed ops, old profiles
def test_node_conv_work_counts_weight_passes_and_gemm_calls() -> None:
    from onnx import helper

    from onnxcomp.planner.cost_model import node_conv_work

    shapes = {"x": (32, 64, 8, 8), "w": (128, 64, 3, 3), "dy": (32, 128, 8, 8), "dw_x": (32, 64, 8, 8),
              "wd": (64, 1, 3, 3)}
    nbytes = {"w": 128 * 64 * 9 * 4, "wd": 64 * 9 * 4}
    conv = helper.make_node("Conv", ["x", "w"], ["y"])
    grad = helper.make_node("ConvGrad", ["dy", "dw_x", "w"], ["dx", "dw"], domain="com.microsoft")
    depthwise = helper.make_node("Conv", ["x", "wd"], ["y"], group=64)
    assert node_conv_work(conv, shapes, nbytes) == (32.0 * nbytes["w"], 32.0)
    assert node_conv_work(grad, shapes, nbytes) == (32.0 * nbytes["w"], 32.0)  # X is ConvGrad's 2nd input
    assert node_conv_work(depthwise, shapes, nbytes) == (32.0 * nbytes["wd"], 32.0 * 64)
    assert node_conv_work(helper.make_node("Relu", ["x"], ["y"]), shapes, nbytes) == (0.0, 0.0)
    assert node_conv_work(helper.make_node("Conv", ["u", "w"], ["y"]), shapes, nbytes) == (0.0, 0.0)  # unknown X


def _convgrad_profile(law) -> NodeTimes:
    """ConvGrads of a ResNet-like net at 64×64: the same MACs per stage, weights 4× larger per stage."""
    feats, times, weights = {}, {}, {}
    for k, (macs, wpass) in enumerate([(6e8, 4e6), (6e8, 1.8e7), (6e8, 7.2e7), (6e8, 2.9e8), (3e8, 1.4e8),
                                       (3e8, 3.6e7)]):
        name = f"g{k}"
        feats[name] = ("ConvGrad", int(1e6 + k), macs, wpass, 32.0)
        times[name] = law(macs, wpass)
        weights[name] = f"w{k}"
    return NodeTimes(times, features=feats, weights=weights)


def test_a_row_block_of_a_weight_heavy_conv_costs_more_than_its_share_of_macs(shipped: CostModel) -> None:
    """A row block keeps the batch and the weight: ORT's ConvGrad still accumulates the whole dW once per
    image, so a block with half the MACs of a layer4 ConvGrad costs more than half its time (the row split's
    under-prediction, docs: NOTES-costall.md). The profile's per-type fit on MACs and weight passes says by
    how much; the profiled node's own time stays the anchor."""
    from onnx import helper

    def law(macs: float, wpass: float) -> float:
        return 2e-11 * macs + 1e-10 * wpass

    times = _convgrad_profile(law)
    block = helper.make_node("ConvGrad", ["dy_rows", "x_rows", "w3"], ["dx", "dw"], domain="com.microsoft",
                             name="rows/c3s0/ConvGrad")
    got = shipped.op_seconds(block, 1 << 20, times, macs=3e8, conv_work=(2.9e8, 32.0))
    assert got == pytest.approx(law(3e8, 2.9e8), rel=1e-3)
    assert got > 0.75 * times["g3"]  # per MAC it would be half
    # the anchor: a profiled node 20 % slower than the law makes its blocks 20 % slower too
    times = _convgrad_profile(law)
    times["g3"] *= 1.2
    assert shipped.op_seconds(block, 1 << 20, times, macs=3e8, conv_work=(2.9e8, 32.0)) == pytest.approx(
        1.2 * law(3e8, 2.9e8), rel=0.05)
    # too few profiled nodes of the type to fit: per MAC, as before
    few = NodeTimes({"g3": 0.04}, features={"g3": ("ConvGrad", 10, 6e8, 2.9e8, 32.0)}, weights={"g3": "w3"})
    assert shipped.op_seconds(block, 1 << 20, few, macs=3e8, conv_work=(2.9e8, 32.0)) == pytest.approx(0.02)


def test_a_node_that_kept_its_name_but_changed_op_is_new_to_the_profile() -> None:
    """passes/mask_grad.py rewrites ReluGrad as Mul under the same name: the Mul costs what the op model says,
    not the profiled ReluGrad's time."""
    from onnx import helper

    cost = _cost_with({"Mul": (0.0, 1e-10, 0.0)})
    times = NodeTimes({"/relu/Relu_Grad": 5e-3}, features={"/relu/Relu_Grad": ("ReluGrad", 3 << 20, 0.0)})
    relugrad = helper.make_node("ReluGrad", ["dy", "x"], ["dx"], name="/relu/Relu_Grad", domain="com.microsoft")
    mul = helper.make_node("Mul", ["dy", "m"], ["dx"], name="/relu/Relu_Grad")
    assert cost.op_seconds(relugrad, 1 << 20, times, in_bytes=2 << 20) == 5e-3
    assert cost.op_seconds(mul, 1 << 20, times, in_bytes=2 << 20) == pytest.approx(1e-10 * (3 << 20))
    assert cost.op_seconds(mul, 1 << 20, {"/relu/Relu_Grad": 5e-3}, in_bytes=2 << 20) == 5e-3  # no op types known


def test_profiles_saved_before_the_conv_work_columns_still_load() -> None:
    old = {"times": {"c": 1e-3}, "features": {"c": ["Conv", 100, 5e6]}, "weights": {"c": "w"}}
    times = NodeTimes.from_dict(old)
    assert times.features["c"] == ("Conv", 100, 5e6, 0.0, 0.0)
    assert NodeTimes.from_dict(json.loads(json.dumps(times.to_dict()))).features == times.features


def test_profiles_under_ort_arena_settings_discard_the_unsettled_second_step() -> None:
    from onnxcomp.runtime.calibrate import settled_warmup
    from onnxcomp.runtime.session import RuntimeSettings

    assert settled_warmup(RuntimeSettings()) == 1  # measure's settings: nothing to settle
    assert settled_warmup(RuntimeSettings(arena=True, mem_pattern=True, mem_reuse=True, execution_order="default")) == 2
    assert settled_warmup(RuntimeSettings(mem_pattern=True)) == 2


def test_casts_are_priced_by_their_type_pair() -> None:
    """A profile's cheap mask Casts (bool -> float) must not price a DPR Cast (float32 -> float16): the latter
    has no same-kind node in the profile and comes from the calibrated Cast fit."""
    from onnx import TensorProto, helper

    from onnxcomp.planner.cost_model import node_features, op_kind

    dtypes = {"m": "bool", "x": "float32", "h": "float16"}
    unpack = helper.make_node("Cast", ["m"], ["f"], to=TensorProto.FLOAT, name="unpack")
    encode = helper.make_node("Cast", ["x"], ["h"], to=TensorProto.FLOAT16, name="encode")
    assert op_kind(unpack, {**dtypes, "f": "float32"}) == "Cast:bool->float32"
    assert op_kind(encode, dtypes) == "Cast:float32->float16"
    assert op_kind(helper.make_node("Relu", ["x"], ["y"]), dtypes) == "Relu"
    cost = _cost_with({"Cast": (0.0, 1e-9, 0.0)})
    mib = 1 << 20
    masks = {f"mask{k}": ("Cast:bool->float32", (k + 1) * mib, 0.0) for k in range(4)}
    times = NodeTimes({n: 1e-10 * f[1] for n, f in masks.items()}, features=masks)
    assert cost.op_seconds(encode, mib, times, in_bytes=2 * mib, kind="Cast:float32->float16") == \
        pytest.approx(1e-9 * 3 * mib)
    assert cost.op_seconds(encode, mib, times, in_bytes=2 * mib, kind="Cast:bool->float32") == \
        pytest.approx(1e-10 * 3 * mib)  # the same bytes as a mask unpack: the profile's own fit
    # node_features records the kind, so a profile keys its Casts by type pair
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])
    h = helper.make_tensor_value_info("h", TensorProto.FLOAT16, [4, 8])
    model = helper.make_model(helper.make_graph([encode], "g", [x], [h]), opset_imports=[helper.make_opsetid("", 17)])
    assert node_features(model)["encode"][0] == "Cast:float32->float16"


# ----------------------------------------------------------- the arena op table and Casts by type pair
def test_the_ops_graph_keeps_timed_outputs_intermediate_for_the_arena_table() -> None:
    """Under ORT's arena only intermediates come from reused memory (graph outputs are allocated outside
    it), so the arena variant of the calibration graph must leave no timed op's output as a graph output."""
    from onnxcomp.runtime.calibrate import _CAST_KINDS, _ops_graph, _ops_graph_traffic

    timed: set[str] = set()
    for half in (False, True):   # the cheap ops, and DPR's Casts timed on ReLU outputs
        plain, inter = _ops_graph(half_casts=half), _ops_graph(intermediate=True, half_casts=half)
        names = {n.name for n in plain.graph.node}
        timed |= names
        outs = {o.name for o in inter.graph.output}
        produced = {o for n in inter.graph.node if n.name in names for o in n.output}
        assert not outs & produced
        consumed = {i for n in inter.graph.node for i in n.input}
        assert produced <= consumed  # every timed output is read (by a reduction or a timed op)
    assert set(_CAST_KINDS) <= timed and timed == set(_ops_graph_traffic(1 << 20))


@pytest.mark.parametrize("arena", [False, True])
def test_common_ops_are_timed_with_casts_keyed_by_type_pair(tmp_path: Path, arena: bool) -> None:
    from onnxcomp.runtime.calibrate import _CAST_KINDS, fit_ops, time_common_ops

    samples = time_common_ops((64 * 1024, 256 * 1024), 1, tmp_path, arena=arena)
    kinds = {s["op"] for s in samples}
    assert set(_CAST_KINDS.values()) <= kinds  # none folded away by ORT (bool->int64->float32 chain)
    assert "Cast" not in kinds and "ReduceSum" not in kinds  # the reductions are not timed
    assert all(s["seconds"] > 0 and s["nbytes"] > 0 for s in samples if s["op"] != "Identity")
    fits = fit_ops(samples * 2)
    # a Cast of unknown types (the profile-less planner without dtypes) gets a fit pooled over the pairs
    assert "Cast" in fits and fits["Cast"]["samples"] == 2 * sum(s["op"].startswith("Cast:") for s in samples)
    assert "Cast:bool->float32" in fits and "*" in fits


def _arena_cost() -> CostModel:
    from onnxcomp.planner.cost_model import LinearFit

    cost = _cost_with({"Add": (0.0, 1e-9, 0.0), "Mul": (0.0, 1e-9, 0.0), "Cast": (0.0, 1e-9, 0.0)})
    cost.ops_arena = {"Add": LinearFit((0.0, 1e-10, 0.0)), "Mul": LinearFit((0.0, 2e-10, 0.0)),
                      "Cast:bool->float32": LinearFit((0.0, 3e-10, 0.0)), "*": LinearFit((0.0, 1e-10, 0.0))}
    return cost


def test_a_profile_taken_under_the_arena_prices_new_nodes_from_the_arena_table() -> None:
    """New nodes of a profile taken with ORT's arena are priced by the arena table, at the profile's speed
    measured against that same table (its Adds at the arena fit: slowdown 1, not the 0.1 the op table
    would say); a profile under measure's settings keeps the op table."""
    from onnx import helper

    cost = _arena_cost()
    mib = 1 << 20
    feats = {f"add{k}": ("Add", 3 * mib, 0.0) for k in range(3)}
    arena = NodeTimes({n: 1e-10 * 3 * mib for n in feats}, features=feats, settings={"arena": True})
    plain = NodeTimes({n: 1e-9 * 3 * mib for n in feats}, features=feats, settings={"arena": False})
    assert arena.slowdown(cost) == pytest.approx(1.0)
    assert plain.slowdown(cost) == pytest.approx(1.0)
    mul = helper.make_node("Mul", ["x", "y"], ["z"], name="new_mul")
    assert cost.op_seconds(mul, mib, arena, in_bytes=2 * mib) == pytest.approx(2e-10 * 3 * mib)
    assert cost.op_seconds(mul, mib, plain, in_bytes=2 * mib) == pytest.approx(1e-9 * 3 * mib)
    unpack = helper.make_node("Cast", ["m"], ["f"], to=1, name="new_unpack")
    assert cost.op_seconds(unpack, mib, arena, in_bytes=mib // 4, kind="Cast:bool->float32") == \
        pytest.approx(3e-10 * (mib + mib // 4))
    # a kind the arena table lacks falls back to the op table (here the pooled "Cast")
    assert cost.op_seconds(unpack, mib, arena, in_bytes=mib // 4, kind="Cast:int64->float32") == \
        pytest.approx(1e-9 * (mib + mib // 4))
    # the profiled Adds twice as slow as the arena table (load): a new Mul, a kind the profile lacks, stays at
    # the arena fit (`docs/notes/costgap.md`: new kinds did not follow the profiled kernels' slowdown)
    slow = NodeTimes({n: 2e-10 * 3 * mib for n in feats}, features=feats, settings={"arena": True})
    assert slow.slowdown(cost) == pytest.approx(2.0)
    assert cost.op_seconds(mul, mib, slow, in_bytes=2 * mib) == pytest.approx(2e-10 * 3 * mib)
    # without a profile (the planner) the op table, as before
    assert cost.op_seconds(mul, mib, in_bytes=2 * mib) == pytest.approx(1e-9 * 3 * mib)


def test_the_arena_table_round_trips_through_json() -> None:
    cost = _arena_cost()
    again = CostModel.from_dict(json.loads(json.dumps(cost.to_dict())))
    assert set(again.ops_arena) == set(cost.ops_arena)
    assert again.ops_arena["Mul"].coef == cost.ops_arena["Mul"].coef
    assert "ops_arena" not in again.meta
    assert not CostModel.from_dict(_cost_with({}).to_dict()).ops_arena  # older calibrations: no table


def test_shipped_defaults_carry_the_arena_table_and_cast_pairs() -> None:
    """The shipped calibration was made with both: Casts by type pair in both tables, the arena table
    faster than the op table for the cheap elementwise ops it was made for (outputs not page-faulted)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CostModelWarning)
        cost = CostModel.load(cm.SHIPPED_DEFAULTS)
    pairs = {"Cast:bool->float32", "Cast:float32->float16", "Cast:float16->float32"}
    assert pairs <= set(cost.ops) and pairs <= set(cost.ops_arena) and "Cast" in cost.ops
    assert {"ReluGrad", "BatchNormInternal", "Add", "Mul"} <= set(cost.ops_arena)
    assert set(cost.codecs_arena) == set(cost.codecs)
    assert all(len(f.size_scale) == len(cost.meta["plan"]["sizes"]) for dirs in cost.codecs.values()
               for f in dirs.values())
    mib = 4 << 20
    for op in ("Mul", "Add", "Slice"):
        assert cost.ops_arena[op].predict((1.0, mib, 0.0)) < 0.5 * cost.ops[op].predict((1.0, mib, 0.0))


def test_codec_fits_follow_the_measured_time_at_every_calibrated_size() -> None:
    """A codec op's time bends with size (per byte dearer at 0.25-2 MiB than at 16 MiB): one line through the
    calibrated sizes misses the middle ones; the per-size scale puts each calibrated size back on its
    measurement and interpolates in log(bytes) between them."""
    from onnxcomp.runtime.calibrate import fit_codecs

    mib = 1 << 20
    sizes = [mib // 16, mib // 4, mib, 2 * mib, 4 * mib, 16 * mib]

    def t(b: float) -> float:  # 0.2 ms a call, ~1.2 ns/B at 1 MiB falling to ~0.5 ns/B at 16 MiB
        return 2e-4 + 1.2e-9 * b * (b / mib) ** -0.3

    samples = [{"codec": "toy", "direction": d, "nbytes": b, "nonzero": nz, "op_s": t(b) * (1 + 0.2 * nz),
                "direct_s": 0.5 * t(b), "bridge_bytes": 2 * b} for d in ("encode", "decode") for b in sizes
               for nz in (0.1, 0.5, 0.9)]
    fits, _ = fit_codecs(samples)
    cost = CostModel({"toy": {d: cm.LinearFit.from_dict(f) for d, f in fits["toy"].items()}},
                     {"*": cm.LinearFit((0.0, 1e-9, 0.0))})
    plain = cm.LinearFit.from_dict({k: v for k, v in fits["toy"]["encode"].items() if k != "size_scale"})
    for b in sizes:
        want = t(b) * 1.1  # nz 0.5
        assert cost.codec_seconds("toy", "encode", b, 0.5) == pytest.approx(want, rel=0.03)
    # the line alone is > 20 % off in the middle of the range (what the scale is for)
    assert max(abs(plain.predict(codec_features(b, 0.5)) / (t(b) * 1.1) - 1) for b in sizes) > 0.2
    # between calibrated sizes: between their measurements; beyond them: the end sizes' scale
    mid = cost.codec_seconds("toy", "encode", 3 * mib, 0.5)
    assert t(2 * mib) * 1.1 < mid < t(4 * mib) * 1.1
    scaled = cost.codecs["toy"]["encode"]
    assert scaled.size_factor(64 * mib) == pytest.approx(scaled.size_factor(16 * mib))
    assert scaled.size_factor(mib // 64) == pytest.approx(scaled.size_factor(mib // 16))
    assert plain.size_factor(mib) == 1.0
    again = cm.LinearFit.from_dict(cost.codecs["toy"]["encode"].to_dict())
    assert again.size_scale == cost.codecs["toy"]["encode"].size_scale and len(again.size_scale) == len(sizes)


def test_a_stalled_calibration_point_does_not_bend_the_codec_size_scale() -> None:
    """A scheduler stall under load lifts one size's mean (the level the fit keeps, as designed) but not
    its median: the size scale is taken on the medians, so that size is not priced 4x its neighbours."""
    from onnxcomp.runtime.calibrate import fit_codecs

    mib = 1 << 20
    sizes = [mib // 16, mib // 4, mib, 2 * mib, 4 * mib, 16 * mib]
    t = {b: 2e-4 + 0.6e-9 * b for b in sizes}
    samples = [{"codec": "toy", "direction": d, "nbytes": b, "nonzero": nz,
                "op_s": t[b] * (4.0 if b == mib // 4 else 1.0), "op_s_median": t[b],
                "direct_s": 0.5 * t[b], "bridge_bytes": 2 * b} for d in ("encode", "decode") for b in sizes
               for nz in (0.1, 0.9)]
    fit = cm.LinearFit.from_dict(fit_codecs(samples)[0]["toy"]["encode"])
    assert all(r == pytest.approx(1.0, rel=0.02) for _, r in fit.size_scale)  # a line: nothing to bend
    cost = CostModel({"toy": {"encode": fit, "decode": fit}}, {"*": cm.LinearFit((0.0, 1e-9, 0.0))})
    assert cost.codec_seconds("toy", "encode", mib // 4, 0.5) < 1.5 * t[mib // 4]


def test_codec_ops_of_a_profile_taken_with_the_arena_use_the_arena_codec_fits(small_artifacts: Path) -> None:
    """Under ORT's arena a decoder writes reused memory: a profile taken with the arena prices codec ops by
    codecs_arena (where calibrated), one under measure's settings by codecs; both survive JSON."""
    from onnxcomp.planner.cost_model import LinearFit
    from onnxcomp.transform import transform_model

    encoded = _pyop_encoded(transform_model, onnx.load(str(small_artifacts / "training_model.onnx")))
    cost = _cost_with({"Relu": (0.0, 1e-9, 0.0)})
    cost.ops_arena = {"Relu": LinearFit((0.0, 1e-9, 0.0)), "*": LinearFit((0.0, 1e-9, 0.0))}
    slow = {d: LinearFit((4e-3, 0.0, 0.0)) for d in cm.DIRECTIONS}
    cost.codecs = {name: slow for name in ("signbits", "bitmask", "relumask", "maxpool_index")}
    cost.codecs_arena = {name: {d: LinearFit((1e-3, 0.0, 0.0)) for d in cm.DIRECTIONS} for name in cost.codecs}
    mib = 1 << 20
    feats = {f"big_relu{k}": ("Relu", 4 * mib, 0.0) for k in range(2)}
    plain = NodeTimes({n: 4 * mib * 1e-9 for n in feats}, features=feats, settings={"arena": False})
    arena = NodeTimes({n: 4 * mib * 1e-9 for n in feats}, features=feats, settings={"arena": True})
    a, p = predict_step(encoded, cost, arena), predict_step(encoded, cost, plain)
    assert p.codec_nodes and p.codec_ops == pytest.approx(4 * a.codec_ops)
    assert cost.codec_seconds("signbits", "encode", mib, arena=True) == pytest.approx(1e-3)
    assert cost.codec_seconds("sz", "encode", mib, arena=True) == pytest.approx(4e-3)  # not in either: slowest
    again = CostModel.from_dict(json.loads(json.dumps(cost.to_dict())))
    assert again.codecs_arena["signbits"]["decode"].coef == (1e-3, 0.0, 0.0) and "codecs_arena" not in again.meta


def test_the_arena_codec_graph_keeps_the_decoded_tensor_intermediate() -> None:
    from onnxcomp.runtime.calibrate import _codec_graph

    g = _codec_graph("signbits", {}, intermediate=True).graph
    assert "Y" not in {o.name for o in g.output} and any(n.op_type == "Shape" and n.input[0] == "Y" for n in g.node)
    assert "Y" in {o.name for o in _codec_graph("signbits", {}).graph.output}


# ------------------------------------------------- float32 <-> float16 Casts: time depends on the data
def test_branch_mix_counts_interleaved_small_values_not_zeros_as_such() -> None:
    """ORT 1.19.2's scalar half conversion branches on |x| < 2^-14: interleaving the two classes is what
    costs (i.i.d. zeros at 50 %: ~4x dense), not zeros themselves (all zeros, or zeros in long runs: dense
    speed), and tiny non-zero values count like zeros."""
    from onnxcomp.planner.cost_model import branch_mix, expected_branch_mix

    rng = np.random.default_rng(0)
    n = 1 << 16
    dense = rng.standard_normal(n).astype(np.float32)
    iid = np.where(rng.random(n) < 0.5, 0.0, np.abs(dense) + 0.1).astype(np.float32)
    assert branch_mix(dense) == pytest.approx(0.0, abs=1e-3)
    assert branch_mix(np.zeros(n, np.float32)) == 0.0
    assert branch_mix(iid) == pytest.approx(0.5, abs=0.02)
    assert branch_mix(np.where(iid == 0, 1e-6, iid)) == pytest.approx(branch_mix(iid))  # fp16-subnormal values
    runs = np.repeat(rng.random(n // 64) < 0.5, 64)   # half zeros, in runs of 64
    assert branch_mix(np.where(runs, 0.0, 1.0)) < 0.03
    quarter = np.where(rng.random(n) < 0.25, 0.0, 1.0)
    assert branch_mix(quarter) == pytest.approx(0.25, abs=0.02) == expected_branch_mix(0.75)
    assert expected_branch_mix(1.0) == 0.0 and expected_branch_mix(0.5) == 0.5


def _half_cast_graph() -> onnx.ModelProto:
    """x -> Conv-like dense Add -> DPR's Clip(±65504) -> Cast f16 -> Cast f32, and the same on Relu(x) and on
    MaxPool3x3(Relu(x)): three equal-sized encode / decode pairs whose inputs differ only in what made them."""
    from onnx import TensorProto, helper

    nodes, outs = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
                   helper.make_node("Add", ["x", "x"], ["d"], name="dense"),
                   helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], name="pool")], []
    for src in ("d", "r", "p"):
        nodes += [helper.make_node("Clip", [src, "lo", "hi"], [f"{src}_c"], name=f"{src}_clip"),
                  helper.make_node("Cast", [f"{src}_c"], [f"{src}_h"], to=TensorProto.FLOAT16, name=f"{src}_enc"),
                  helper.make_node("Cast", [f"{src}_h"], [f"{src}_f"], to=TensorProto.FLOAT, name=f"{src}_dec")]
        outs.append(helper.make_tensor_value_info(f"{src}_f", TensorProto.FLOAT, [2, 4, 16, 16]))
    inits = [helper.make_tensor("lo", TensorProto.FLOAT, [], [-65504.0]),
             helper.make_tensor("hi", TensorProto.FLOAT, [], [65504.0])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 16, 16])],
                              outs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_estimate_nonzero_walks_to_the_op_that_made_the_zeros() -> None:
    from onnxcomp.planner.cost_model import constant_scalars, estimate_nonzero

    model = _half_cast_graph()
    producers = {o: n for n in model.graph.node for o in n.output}
    consts = constant_scalars(model)
    assert estimate_nonzero("d_h", producers, consts) == 1.0            # dense, through Cast and range Clip
    assert estimate_nonzero("r_h", producers, consts) == 0.5            # a ReLU output
    assert estimate_nonzero("p_c", producers, consts) == pytest.approx(1 - 0.5 ** 9)  # zero only if all 9 are
    relu6 = onnx.helper.make_node("Clip", ["x", "zero", "six"], ["y"])
    assert estimate_nonzero("y", {"y": relu6}, {"zero": 0.0, "six": 6.0}) == 0.5


def test_half_casts_of_a_relu_output_cost_more_than_of_dense_data() -> None:
    """The same bytes through DPR's float32 -> float16 -> float32 Casts: on a ReLU output (half zeros,
    interleaved) the calibrated mixed-bytes term applies, on a dense tensor and on a MaxPool of a ReLU output
    (almost no zeros) it does not. Fails without the data feature (the three pairs cost the same)."""
    from onnxcomp.planner.cost_model import LinearFit

    a, b, c = 1e-6, 0.25e-9, 1.4e-9
    cost = _cost_with({k: (0.0, 0.0, 0.0) for k in ("Relu", "Add", "MaxPool", "Clip")})
    cost.ops["Cast:float32->float16"] = LinearFit((a, b, 0.0, c))
    cost.ops["Cast:float16->float32"] = LinearFit((a, b, 0.0, c))
    per = predict_step(_half_cast_graph(), cost).per_node
    traffic = 2 * 4 * 16 * 16 * 6   # float32 read + float16 written (or the reverse)
    assert per["d_enc"] == pytest.approx(a + b * traffic) and per["d_dec"] == pytest.approx(a + b * traffic)
    assert per["r_enc"] == pytest.approx(a + b * traffic + c * traffic * 0.5)
    assert per["r_dec"] == per["r_enc"]
    assert per["p_enc"] == pytest.approx(a + b * traffic + c * traffic * 0.5 ** 9)
    # a measured nonzero ratio for the tensor overrides the estimate
    dense = predict_step(_half_cast_graph(), cost, nonzero_ratios={"r_c": 1.0, "r_h": 1.0}).per_node
    assert dense["r_enc"] == pytest.approx(per["d_enc"])


def test_calibration_fits_the_half_cast_data_term() -> None:
    """fit_ops keeps the samples' mixed_bytes as the Cast fits' fourth regressor (and no other op gets one)."""
    from onnxcomp.runtime.calibrate import fit_ops

    a, b, c = 20e-6, 0.2e-9, 1.5e-9
    samples = []
    for nbytes in (1 << 18, 1 << 20, 1 << 22):
        for mix in (0.0, 0.5):
            samples.append({"op": "Cast:float32->float16", "nbytes": nbytes, "macs": 0.0,
                            "mixed_bytes": nbytes * mix, "seconds": a + b * nbytes + c * nbytes * mix})
        samples.append({"op": "Mul", "nbytes": nbytes, "macs": 0.0, "seconds": 1e-6 + 1e-10 * nbytes})
    fits = fit_ops(samples)
    coef = fits["Cast:float32->float16"]["coef"]
    assert coef == pytest.approx([a, b, 0.0, c], rel=1e-6, abs=1e-12)
    assert fits["Mul"]["coef"][3] == 0.0


def test_calibration_times_half_casts_on_dense_and_on_relu_data(tmp_path: Path) -> None:
    from onnxcomp.runtime.calibrate import time_common_ops

    samples = time_common_ops((256 * 1024,), 2, tmp_path)
    halves = [s for s in samples if s["op"] == "Cast:float32->float16"]
    mixes = sorted(s["mixed_bytes"] / s["nbytes"] for s in halves)
    assert len(halves) == 2 and mixes[0] < 0.01 and mixes[1] == pytest.approx(0.5, abs=0.02)
    assert all(s.get("mixed_bytes", 0.0) == 0.0 for s in samples if not s["op"].startswith("Cast:float"))
