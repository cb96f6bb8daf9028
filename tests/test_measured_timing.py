"""The measured timing model: linear tables, the in-model scale and layer cost, cache reuse."""

from __future__ import annotations

import numpy as np
import pytest

from rooflinesim.timing.measured import MeasuredTiming
from rooflinesim.specs.workload import Workload
from rooflinesim.ops.step_ops import get_step_ops
from rooflinesim.specs.registry import load_model
from rooflinesim.errors import InputError

from .synthetic_profiles import BW_TRUE, C_TRUE, P_TRUE, WARM_BW, linear_time, make_profile, with_cache


# --- the measured timing model ----------------------------------------------------------------------------------------


def test_linear_interpolation_is_exact_at_calibrated_points():
    timing = MeasuredTiming.from_spec(make_profile())
    for m in (1, 8, 256):
        assert float(timing.get_linear_time_s(m, 768, 768, "fp32")) == pytest.approx(linear_time(m, 768, 768), rel=1e-9)


def test_linear_between_shapes_and_grid_points_follows_the_roofline():
    """Tables generated from a roofline: any other shape / M is predicted as that roofline (ratio 1 everywhere)."""
    timing = MeasuredTiming.from_spec(make_profile())
    for m, k, n in ((3, 1024, 1024), (5, 1024, 2816), (100, 2816, 1024), (1, 1024, 32000), (5000, 512, 512)):
        assert float(timing.get_linear_time_s(m, k, n, "fp32")) == pytest.approx(linear_time(m, k, n), rel=0.1)


def test_linear_above_the_last_measured_m_adds_each_row_at_the_peak():
    """A table that stops where the call still streams its weights (a budget plan caps the FLOPs per call) is not
    scaled up in proportion to M: each further row adds its FLOPs at the fitted peak, so far above the last M the
    time follows the compute-bound roofline."""
    hw = make_profile(shapes=((768, 768),))
    prof = hw.measured.dtypes["fp32"]
    table = prof.linear[0]
    cut = table.model_copy(update={"m": table.m[:5], "time_s": table.time_s[:5], "spread": table.spread[:5]})
    hw = hw.model_copy(update={"measured": hw.measured.model_copy(update={"dtypes": {
        "fp32": prof.model_copy(update={"linear": (cut,)})}})})
    timing = MeasuredTiming.from_spec(hw)
    t16 = linear_time(16, 768, 768)  # weight-streaming bound on this roofline
    assert float(timing.get_linear_time_s(64, 768, 768, "fp32")) == pytest.approx(
        t16 + 48 * 2.0 * 768 * 768 / P_TRUE, rel=1e-9)
    assert float(timing.get_linear_time_s(64, 768, 768, "fp32")) < 0.6 * 4 * t16  # not 4x the M = 16 time
    assert float(timing.get_linear_time_s(1 << 17, 768, 768, "fp32")) == pytest.approx(
        linear_time(1 << 17, 768, 768), rel=0.01)


def test_linear_is_vectorised_over_m():
    timing = MeasuredTiming.from_spec(make_profile())
    out = timing.get_linear_time_s(np.array([[1, 2], [4, 8]]), 768, 768, "fp32")
    assert out.shape == (2, 2) and np.all(np.diff(out.ravel()) >= 0)


def test_unmeasured_dtype_is_an_error():
    timing = MeasuredTiming.from_spec(make_profile(("fp32",)))
    op = get_step_ops(load_model("tiny-llama-123m"), Workload.in_dtype("bf16", 1, 128), 1)[2]
    with pytest.raises(InputError, match="measured fp32 only, not bf16"):
        timing.get_op_time(op, "bf16")


def test_measured_timing_prices_every_op_of_a_step():
    hw = make_profile()
    timing = MeasuredTiming.from_spec(hw)
    for op in get_step_ops(load_model("tiny-llama-123m"), Workload.in_dtype("fp32", 1, 1024), 5, batch=np.array([1, 8])):
        t = timing.get_op_time(op, "fp32")
        assert t.time_s.shape == (2,) and np.all(t.time_s > 0), op.name
    assert timing.get_step_overhead_s(8, "fp32") == pytest.approx(8 * 100e-6 + 50e-6)


def test_in_model_scale_multiplies_every_op_time_but_a_concatenating_caches_copies():
    """Regression: the copies of transformers' concatenating cache were scaled too, though the reference decoders that
    fit the scale have none (their benchmark times them as a step runs them); batch-16 bf16 steps priced 10-40 % high."""
    base = make_profile()
    prof = base.measured.dtypes["fp32"].model_copy(update={"in_model_scale": 1.5})
    scaled = base.model_copy(update={"measured": base.measured.model_copy(update={"dtypes": {"fp32": prof}})})
    for impl, copies in (("reference", 0), ("hf", 1)):
        workload = Workload.in_dtype("fp32", 4, 1024).model_copy(update={"implementation": impl})
        ops = get_step_ops(load_model("tiny-llama-123m"), workload, 1)
        assert sum(op.name == "kv_concat" for op in ops) == copies
        t1, t2 = MeasuredTiming.from_spec(base).for_step(ops), MeasuredTiming.from_spec(scaled).for_step(ops)
        for op in ops:
            factor = 1.0 if op.name in ("kv_concat", "kv_repeat") else 1.5
            assert float(t2.get_op_time(op, "fp32").time_s) == pytest.approx(
                factor * float(t1.get_op_time(op, "fp32").time_s))
        assert t2.get_step_overhead_s(8, "fp32") == t1.get_step_overhead_s(8, "fp32")  # dispatch is not scaled


def test_cache_reuse_speeds_up_weight_streaming_of_small_working_sets():
    """Weights that fit in the cache stream at the warm bandwidth (blended by how warm the step's working set is on
    the measured curve), never saving more than the cold streaming time: a compute-bound GEMM hardly changes; a
    co-resident model's weights push the set out."""
    hw = with_cache(make_profile(), (1e7, 1e8, 1e9), (2.0, 1.5, 1.0))
    timing = MeasuredTiming.from_spec(hw)
    cold = MeasuredTiming.from_spec(make_profile())
    small = load_model("tiny-draft-2l")  # about 88 MB of fp32 weights per step
    gemv = get_step_ops(small, Workload.in_dtype("fp32", 1, 128), 1)
    gemm = get_step_ops(small, Workload.in_dtype("fp32", 512, 128), 8)
    weight_bytes = float(sum(op.count * op.weight_bytes for op in gemv))
    warmth = np.interp(np.log(weight_bytes), np.log([1e7, 1e8, 1e9]), [2.0, 1.5, 1.0]) - 1.0  # (f - 1) / (2 - 1)
    assert 0.4 < warmth < 0.6
    lm_head = next(op for op in gemv if op.name == "lm_head")
    base = float(cold.for_step(gemv).get_op_time(lm_head, "fp32").time_s)
    fully_cached = max(C_TRUE + float(lm_head.weight_bytes) / WARM_BW, base - float(lm_head.weight_bytes) / BW_TRUE)
    expected = base * (1 - warmth) + min(base, fully_cached) * warmth
    assert float(timing.for_step(gemv).get_op_time(lm_head, "fp32").time_s) == pytest.approx(expected, rel=1e-6)
    assert expected < base / 1.3
    big_head = next(op for op in gemm if op.name == "lm_head")
    assert float(timing.for_step(gemm).get_op_time(big_head, "fp32").time_s) == pytest.approx(
        float(cold.for_step(gemm).get_op_time(big_head, "fp32").time_s), rel=0.01)
    crowded = float(timing.with_co_resident(2e9).for_step(gemv).get_op_time(lm_head, "fp32").time_s)
    assert crowded == pytest.approx(base)


