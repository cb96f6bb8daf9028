"""`calibrate --shapes-of MODEL`: the served models' own weight shapes timed with the generic ones, each calibrated
shape priced from its own table, and such a profile refused as a hold-out by `validate`."""

from __future__ import annotations

import os
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from rooflinesim.calibrate.fitting.budget import (
    LEVELS, DeviceSpeed, estimate_plan_s, get_level_plan, is_essential, plan_for_budget,
)
from rooflinesim.calibrate.fitting.measurements import LinearKey
from rooflinesim.calibrate.fitting.plan import (
    LINEAR_SHAPES, WeightShape, drop_oversized_served_shapes, get_profile_hold_out_clash, get_served_shapes,
    synthetic_spec,
)
from rooflinesim.specs.profiles import write_profile
from rooflinesim.specs.registry import load_model
from rooflinesim.specs.measured import LinearTable
from rooflinesim.timing.linear_tables import LinearModel

try:  # tests/ on sys.path (pytest's default rootdir/prepend import mode)
    from test_calibrate import make_profile
except ImportError:  # tests/ imported as a package
    from tests.test_calibrate import make_profile

ROOT = Path(__file__).resolve().parent.parent
CPU = types.SimpleNamespace(is_cuda=False)
SPEED = DeviceSpeed(dtype="fp32", gemv_bandwidth_bytes_per_s=18e9, gemm_flops_per_s=150e9, call_overhead_s=1.5e-6,
                    small_m_spread=0.2, fill_bytes_per_s=1e9, build_bytes_per_s=5e8, layer_dispatch_s=2e-4)
TARGET = load_model("tiny-llama-123m")
SERVED = get_served_shapes([TARGET, load_model("tiny-draft-2l")])


def _roofline_s(m, k, n):
    return max(2.0 * m * k * n / 400e9, 4.0 * k * n / 20e9) + 20e-6


def _table(k, n, bump=1.0, bump_at=(16, 24, 32)):
    ms = (1, 2, 4, 8, 16, 24, 32, 64, 256)
    return LinearTable(in_features=k, out_features=n, m=ms, spread=tuple(0.02 for _ in ms),
                       time_s=tuple(_roofline_s(m, k, n) * (bump if m in bump_at else 1.0) for m in ms))


def test_a_calibrated_shape_is_priced_from_its_own_table_not_blended():
    # regression: the Gaussian blend gave an exactly calibrated shape its neighbours' ratios too (weights 0.4-0.7),
    # so a kernel dip or bump measured on the very shape was smoothed away
    tables = [_table(1024, 2816, bump=1.25), _table(1024, 3072), _table(1024, 2560)]
    linear = LinearModel.from_tables(tables, 400e9, 20e9, 20e-6, 4.0)
    ms = np.array(tables[0].m, dtype=float)
    np.testing.assert_allclose(linear.time_s(ms, 1024, 2816), tables[0].time_s, rtol=1e-12)
    np.testing.assert_allclose(linear.time_s(ms, 1024, 3072), tables[1].time_s, rtol=1e-12)
    # between the tables, on a shape that was not calibrated: still the blend (a share of the measured bump)
    between = linear.time_s(np.array([16.0]), 1024, 2688)[0] / _roofline_s(16, 1024, 2688)
    assert 1.0 < between < 1.25
    # and between measured M values the own table is interpolated log-log, above them extrapolated on its row cost
    t20 = linear.time_s(np.array([20.0]), 1024, 2816)[0]
    assert min(tables[0].time_s[4:6]) <= t20 <= max(tables[0].time_s[4:6])


def test_served_shapes_are_in_every_rung_and_their_small_m_points_are_essential():
    assert len(SERVED) == 10 and WeightShape(1024, 2816) in SERVED and WeightShape(512, 32000) in SERVED
    for level in LEVELS:
        plain, served = get_level_plan(level, ("fp32",), CPU), get_level_plan(level, ("fp32",), CPU, SERVED)
        assert served.served_shapes == SERVED and served.linear_shapes == plain.linear_shapes
        keys = set(served.linear_keys())
        for k, n in SERVED:
            assert {key.m for key in keys if (key.in_features, key.out_features) == (k, n)} >= {
                m for m in served.m_grid if m <= 16}
        assert set(plain.linear_keys()) < keys
        assert estimate_plan_s(served, SPEED) > estimate_plan_s(plain, SPEED)
        assert all(is_essential(LinearKey(k, n, m), served) for k, n in SERVED for m in served.m_grid if m <= 16)
    # a served shape that is also a generic one is timed once
    overlap = get_level_plan("full", ("fp32",), CPU, (LINEAR_SHAPES[0], WeightShape(1024, 2816)))
    assert overlap.all_linear_shapes == LINEAR_SHAPES + (WeightShape(1024, 2816),)
    assert len(overlap.linear_keys()) == len(set(overlap.linear_keys()))


def test_the_budget_keeps_the_served_shapes_when_it_shrinks_the_plan():
    plain = plan_for_budget(60.0, ("fp32",), CPU, {"fp32": SPEED})
    served = plan_for_budget(60.0, ("fp32",), CPU, {"fp32": SPEED}, served_shapes=SERVED)
    assert served.plans["fp32"].served_shapes == SERVED
    assert LEVELS.index(served.plans["fp32"].level) >= LEVELS.index(plain.plans["fp32"].level)


def test_shapes_too_large_for_the_cold_pool_are_left_out_and_named():
    plan = get_level_plan("full", ("fp32",), CPU, (WeightShape(1024, 2816), WeightShape(8192, 28672)))
    kept, dropped = drop_oversized_served_shapes(plan, "fp32")  # 8192 x 28672 fp32: 0.94 GB, twice over 1 GiB
    assert kept.served_shapes == (WeightShape(1024, 2816),) and dropped == (WeightShape(8192, 28672),)
    assert drop_oversized_served_shapes(kept, "fp32") == (kept, ())


def test_a_profile_with_hold_out_shapes_is_no_hold_out(tmp_path):
    assert get_profile_hold_out_clash(make_profile()) == []
    served = make_profile(shapes=((768, 768), (1024, 2816), (512, 32000)))
    assert get_profile_hold_out_clash(served) == [(512, 32000), (1024, 2816)]
    other = synthetic_spec("x", 768, 12, 4, 3072)
    assert (768, 3072) in get_profile_hold_out_clash(make_profile(), [other])
    prov = served.measured.provenance.model_copy(update={"shapes_of": ("tiny-llama-123m", "tiny-draft-2l")})
    served = served.model_copy(update={"measured": served.measured.model_copy(update={"provenance": prov})})
    path = write_profile(served, tmp_path / "served.yaml")
    pytest.importorskip("torch")  # validate refuses torch-less machines first
    out = subprocess.run([sys.executable, "-m", "rooflinesim.cli", "validate", "--profile", str(path), "--out-dir",
                          str(tmp_path / "out")], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "1024 x 2816" in out.stderr and "--shapes-of tiny-llama-123m,tiny-draft-2l" in out.stderr
    assert not (tmp_path / "out" / "synthetic-validation.json").exists()


@pytest.mark.parametrize("argv, message", [
    (["calibrate", "--shapes-of", "tiny-lama-123m"], "tiny-llama-123m"),  # a near miss gets a suggestion
    (["calibrate", "--shapes-of", " , "], "at least one model"),
    (["calibrate", "--merge", "a.yaml", "b.yaml", "--out", "c.yaml", "--shapes-of", "tiny-llama-123m"], "--merge"),
])
def test_bad_shapes_of_is_refused_before_measuring(argv, message, tmp_path):
    pytest.importorskip("torch")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-m", "rooflinesim.cli", *argv], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path, env=env)
    assert out.returncode == 2 and "Traceback" not in out.stderr and message in out.stderr
    assert not list(tmp_path.rglob("*.yaml"))


def test_a_calibration_with_shapes_of_times_them_and_prices_them_from_their_tables():
    torch = pytest.importorskip("torch")
    from rooflinesim.calibrate.measure.bench import run_calibration
    from rooflinesim.calibrate.fitting.plan import Plan
    from rooflinesim.calibrate.measure.timers import select_device
    from rooflinesim.timing.measured import MeasuredTiming

    threads = torch.get_num_threads()
    try:
        device = select_device("cpu", threads=2)
        spec = synthetic_spec("served-test", 320, 4, 2, 896, vocab=1000)
        plan = Plan.make(True, ("fp32",), device, tiny=True)
        hw = run_calibration(device, ("fp32",), True, "pytest", progress=False, plan=plan, shapes_of=(spec,))
    finally:
        torch.set_num_threads(threads)
    assert hw.measured.provenance.shapes_of == ("served-test",) and "--shapes-of" in hw.measured.provenance.notes
    tables = {(t.in_features, t.out_features): t for t in hw.measured.dtypes["fp32"].linear}
    assert set(get_served_shapes([spec])) <= set(tables) and set(tables) >= {(384, 384), (1536, 1536)}
    table = tables[(320, 896)]
    priced = MeasuredTiming.from_spec(hw).get_linear_time_s(np.array(table.m, dtype=float), 320, 896, "fp32")
    np.testing.assert_allclose(priced, table.time_s, rtol=1e-9)
