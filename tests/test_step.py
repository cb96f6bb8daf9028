"""Invariants of step timing and memory (hypothesis), plus hand-checked memory numbers."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rooflinesim import load_hardware, load_model
from rooflinesim.specs.workload import Workload
from rooflinesim.ops.step_ops import _linear
from rooflinesim.timing import DatasheetTiming
from rooflinesim.scenario.builder import build_scenario
from rooflinesim.step import get_memory_fit, get_step_cost

from .strategies import batches, contexts, hardware_names, model_names, workloads


@settings(max_examples=60, deadline=None)
@given(hw=hardware_names, model=model_names, w=workloads())
def test_expected_time_is_never_below_the_roofline(hw, model, w):
    q = w.pop("new_tokens")
    step = get_step_cost(load_hardware(hw), load_model(model), Workload(**w), q)
    assert float(step.step_time_s) >= float(step.roofline_step_time_s) > 0
    for expected, sol in zip(step.expected, step.roofline):
        assert float(expected.time_s) >= float(sol.time_s)


@settings(max_examples=40, deadline=None)
@given(hw=hardware_names, model=model_names, w=workloads(), b2=batches, s2=contexts)
def test_time_is_non_decreasing_in_batch_and_context(hw, model, w, b2, s2):
    hw, model = load_hardware(hw), load_model(model)
    batch = np.array(sorted([w.pop("batch"), b2]))
    ctx = np.array(sorted([w.pop("context_tokens"), s2]))
    q = w.pop("new_tokens")
    workload = Workload(batch=1, context_tokens=0, **w)
    for timing in (None, DatasheetTiming.speed_of_light(hw)):
        t = get_step_cost(hw, model, workload, q, timing, ctx[None, :], batch[:, None]).step_time_s
        t = np.broadcast_to(t, (2, 2))
        assert np.all(t[1, :] >= t[0, :] * (1 - 1e-12))
        assert np.all(t[:, 1] >= t[:, 0] * (1 - 1e-12))


@settings(max_examples=30, deadline=None)
@given(hw=hardware_names, d=st.sampled_from([4096, 8192, 16384]))
def test_linear_bound_flips_at_the_ridge(hw, d):
    """A square bf16 linear layer with M tokens has intensity ~M: memory-bound below the ridge, compute above."""
    hw = load_hardware(hw)
    timing = DatasheetTiming.speed_of_light(hw)
    ridge = hw.get_ridge_point_flops_per_byte("bf16")
    ms = np.arange(1, 4 * int(ridge))
    op = _linear("x", 1, ms, d, d, 2.0, 2.0)
    bound = timing.get_op_time(op, "bf16").compute_bound
    intensity = op.arithmetic_intensity_flops_per_byte
    assert np.array_equal(bound, intensity > ridge)
    assert not bound[0] and bound[-1]


def test_memory_fit_and_max_batch_by_hand():
    hw, model = load_hardware("a100"), load_model("llama-3.1-8b")
    fit = get_memory_fit(hw, model, Workload.in_dtype("bf16", 8, 32768), 1)
    # KV: 2 (K,V) x 32 layers x 8 KV heads x 128 dims x 2 bytes = 131072 B per token
    assert float(fit.kv_cache_bytes) == 8 * 32769 * 131072
    assert fit.weight_bytes == pytest.approx(16.06e9, rel=1e-3)
    whole = build_scenario(hw, model, 8, 32768, speculative=False, gpu_memory_utilization=1.0, memory_reserve_bytes=0)
    max_batch = int(whole.get_max_batch()[0])
    assert bool(get_memory_fit(hw, model, Workload.in_dtype("bf16", 1, 32768), 1, batch=max_batch).fits_in_memory)
    assert not bool(get_memory_fit(hw, model, Workload.in_dtype("bf16", 1, 32768), 1, batch=max_batch + 1).fits_in_memory)
    assert max_batch == 16  # the whole 80 GiB: (85.90e9 - 16.06e9) / (32769 x 131072 + activations) = 16.26


def test_model_that_cannot_fit_has_max_batch_zero():
    hw, model = load_hardware("l4"), load_model("llama-2-70b")
    assert int(build_scenario(hw, model, 1, 4096, speculative=False).get_max_batch()[0]) == 0
    assert not bool(get_memory_fit(hw, model, Workload.in_dtype("bf16", 1, 4096), 1).fits_in_memory)


def test_vectorised_equals_scalar():
    hw, model = load_hardware("h100"), load_model("llama-3.1-8b")
    b, s, q = np.array([1, 8, 64])[:, None, None], np.array([0, 4096])[None, :, None], np.array([1, 5])[None, None, :]
    grid = get_step_cost(hw, model, Workload(batch=1, context_tokens=0), q, batch=b, context_tokens=s).step_time_s
    for i, bi in enumerate([1, 8, 64]):
        for j, sj in enumerate([0, 4096]):
            for k, qk in enumerate([1, 5]):
                one = get_step_cost(hw, model, Workload(batch=bi, context_tokens=sj), qk)
                assert grid[i, j, k] == pytest.approx(float(one.step_time_s), rel=1e-12)


def test_compute_fraction_by_dtype_applies_to_matmuls_of_that_dtype_only():
    """H100 fp8 GEMMs run at their own fraction (0.65 of the fp8 peak); bf16 matmuls and fp32 vector work keep 0.80."""
    hw = load_hardware("h100")
    timing = DatasheetTiming.expected(hw)
    assert timing.compute_fraction_by_dtype == {"fp8": 0.65}
    linear = _linear("w", 1, 4096, 4096, 4096, 1.0, 1.0)
    fp8 = timing.get_op_time(linear, "fp8")
    bf16 = timing.get_op_time(linear, "bf16")
    assert float(fp8.compute_time_s) == pytest.approx(linear.flops / (1979e12 * 0.65))
    assert float(bf16.compute_time_s) == pytest.approx(linear.flops / (989e12 * 0.80))
    norm = next(op for op in get_step_cost(hw, load_model("llama-3.1-8b"), Workload.in_dtype("fp8", 1, 0), 1).ops
                if op.kind == "norm")
    fp32_peak = 67e12 * 0.80
    assert float(timing.get_op_time(norm, "fp8").compute_time_s) == pytest.approx(norm.count * norm.flops / fp32_peak)


def test_compute_memory_overlap_by_hand_and_the_roofline_keeps_max():
    """Expected time = max(c, m) + (1 - overlap) x min(c, m) + overhead; the speed-of-light roofline stays max(c, m)."""
    hw = load_hardware("a100")
    assert hw.efficiency.compute_memory_overlap == 0.17
    linear = _linear("w", 1, 128, 4096, 11008, 2.0, 2.0)  # a 128-token prefill GEMM: near the ridge
    e = hw.efficiency
    c = linear.flops / (312e12 * e.compute_fraction)
    m = linear.bytes / (hw.memory_bandwidth_bytes_per_s * e.memory_fraction)
    expected = DatasheetTiming.expected(hw).get_op_time(linear, "bf16")
    assert float(expected.time_s) == pytest.approx(max(c, m) + 0.83 * min(c, m) + e.kernel_overhead_s)
    roofline = DatasheetTiming.speed_of_light(hw).get_op_time(linear, "bf16")
    light = max(linear.flops / 312e12, linear.bytes / hw.memory_bandwidth_bytes_per_s)
    assert float(roofline.time_s) == pytest.approx(light)
    # a spec without the field keeps the plain roofline max (overlap 1): no published prefill rows to fit it on
    assert load_hardware("b200").efficiency.compute_memory_overlap == 1.0
    plain = hw.model_copy(update={"efficiency": e.model_copy(update={"compute_memory_overlap": 1.0})})
    assert float(DatasheetTiming.expected(plain).get_op_time(linear, "bf16").time_s) == pytest.approx(
        max(c, m) + e.kernel_overhead_s)
