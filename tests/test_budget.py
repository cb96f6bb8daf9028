"""The calibration time budget (`calibrate.fitting.budget`, torch-free): the planner sizes a run to its budget from probed
device speeds, degrades the slowest dtype first and always covers every benchmark family."""

from __future__ import annotations

import types

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rooflinesim.calibrate.fitting.budget import (
    LEVELS, QUICK_BUDGET_S, SAFETY, DeviceSpeed, estimate_key_s, estimate_plan_s, get_level_plan, is_essential,
    plan_for_budget,
)
from rooflinesim.calibrate.fitting.measurements import (
    AttentionKey, CacheKey, DecoderKey, ElementwiseKey, ImplementationKey, LinearKey, SamplerKey, WarmLinearKey,
)

CPU = types.SimpleNamespace(is_cuda=False)
FAMILIES = (LinearKey, AttentionKey, ElementwiseKey, DecoderKey, CacheKey, WarmLinearKey, SamplerKey,
            ImplementationKey)


def speed(dtype="fp32", slow=1.0) -> DeviceSpeed:
    """A fake probed device, `slow` times slower than a 2-core server CPU in everything."""
    return DeviceSpeed(dtype=dtype, gemv_bandwidth_bytes_per_s=18e9 / slow, gemm_flops_per_s=150e9 / slow,
                       call_overhead_s=1.5e-6 * slow, small_m_spread=0.2, fill_bytes_per_s=1e9 / slow,
                       build_bytes_per_s=5e8 / slow, layer_dispatch_s=2e-4 * slow)


def _families(plan, dtype):
    return {type(key) for key in plan.keys(dtype)}


def _expected(plan):
    """Every family; the cache-warm linears in full-derived plans only (not in --quick's)."""
    return set(FAMILIES) if plan.warm_shapes else set(FAMILIES) - {WarmLinearKey}


def test_every_rung_measures_every_family_and_costs_less_than_the_one_above():
    costs = []
    for level in LEVELS:
        plan = get_level_plan(level, ("fp32",), CPU)
        assert _families(plan, "fp32") == _expected(plan), level
        assert bool(plan.warm_shapes) == (level in ("full", "full-1pass", "medium")), level
        costs.append(estimate_plan_s(plan, speed()))
    assert costs == sorted(costs, reverse=True), dict(zip(LEVELS, costs))


def test_essential_configurations_are_measured_at_every_rung_and_cover_every_family():
    """What a run keeps when it falls behind is on every rung's list, and enough for every fit."""
    for level in LEVELS:
        plan = get_level_plan(level, ("bf16",), CPU)
        essential = [key for key in plan.keys("bf16") if is_essential(key, plan)]
        assert {type(key) for key in essential} == _expected(plan), level
        attention = [key for key in essential if isinstance(key, AttentionKey)]
        assert {key.query_tokens == 1 for key in attention} == {True, False}  # decode and multi-token fits
        assert len({(k.in_features, k.out_features) for k in essential if isinstance(k, LinearKey)}) >= 3
        # one build of one mid-size decoder: the further builds are what a late run skips first
        blocks = [k for k in essential if isinstance(k, DecoderKey) and k.name in plan.block_models]
        assert [(k.build, k.batch, k.new_tokens) for k in blocks] == [(0, 1, 1)], level
        assert plan.decoder_builds == (1 if level == "minimal" else 3), level


@settings(max_examples=40, deadline=None)
@given(budget=st.floats(5.0, 3000.0), slow=st.floats(0.2, 50.0), spent=st.floats(0.0, 4.0),
       dtypes=st.sampled_from([("fp32",), ("bf16",), ("fp32", "bf16")]))
def test_planned_time_fits_the_budget_or_is_the_smallest_plan(budget, slow, spent, dtypes):
    speeds = {d: speed(d, slow * (3.0 if d == "bf16" else 1.0)) for d in dtypes}  # bf16 the slow one, as on AMD
    plan = plan_for_budget(budget, dtypes, CPU, speeds, spent_s=spent)
    assert set(plan.plans) == set(dtypes)
    for d, p in plan.plans.items():
        assert _families(p, d) == _expected(p)  # degrades, never drops a family
    if plan.over_budget:
        assert all(p.level == "minimal" and p.small_m_extra_passes == 0 for p in plan.plans.values())
    else:
        assert plan.total_s <= budget * SAFETY - spent + 1e-9


def test_a_slow_device_gets_a_smaller_plan_and_the_slow_dtype_gives_way_first():
    fast = plan_for_budget(300, ("fp32", "bf16"), CPU, {"fp32": speed("fp32"), "bf16": speed("bf16")})
    slow_bf16 = plan_for_budget(300, ("fp32", "bf16"), CPU, {"fp32": speed("fp32"), "bf16": speed("bf16", 8.0)})
    rung = {level: i for i, level in enumerate(LEVELS)}
    assert rung[slow_bf16.plans["bf16"].level] > rung[fast.plans["bf16"].level]
    assert rung[slow_bf16.plans["bf16"].level] >= rung[slow_bf16.plans["fp32"].level]


def test_quick_budget_on_a_very_slow_device_still_plans_a_complete_run():
    """bf16 10x slower than the fake server (the AMD EPYC of issue 12 ran bf16 GEMMs at ~17 GFLOP/s)."""
    speeds = {"fp32": speed("fp32", 2.0), "bf16": speed("bf16", 10.0)}
    plan = plan_for_budget(QUICK_BUDGET_S, ("fp32", "bf16"), CPU, speeds, spent_s=3.0, start="quick")
    assert plan.total_s <= QUICK_BUDGET_S
    assert {_families(p, d) == _expected(p) for d, p in plan.plans.items()} == {True}


def test_leftover_budget_buys_small_m_passes_where_the_spread_is_large():
    noisy = {"fp32": DeviceSpeed(**{**speed("fp32").__dict__, "small_m_spread": 0.5})}
    quiet = {"fp32": DeviceSpeed(**{**speed("fp32").__dict__, "small_m_spread": 0.01})}
    budget = estimate_plan_s(get_level_plan("quick", ("fp32",), CPU), speed()) * 1.6 / SAFETY
    assert (plan_for_budget(budget, ("fp32",), CPU, noisy, start="quick").plans["fp32"].small_m_extra_passes
            > plan_for_budget(budget, ("fp32",), CPU, quiet, start="quick").plans["fp32"].small_m_extra_passes)


def test_no_budget_is_the_full_plan_with_its_duration_stated():
    plan = plan_for_budget(None, ("fp32",), CPU, {"fp32": speed()})
    assert plan.plans["fp32"].level == "full" and not plan.over_budget
    assert plan.describe().startswith(f"expected {plan.total_s:.0f} s")


def test_a_configuration_costs_no_less_on_a_slower_device():
    """Never less (a fast call repeats until the plan's minimum time: the same seconds), and the run more."""
    plan = get_level_plan("quick", ("fp32",), CPU)
    for key in plan.keys("fp32"):
        assert estimate_key_s(key, plan, speed(slow=4.0)) >= estimate_key_s(key, plan, speed())
    assert estimate_plan_s(plan, speed(slow=4.0)) > 1.5 * estimate_plan_s(plan, speed())


def test_an_unknown_level_is_an_error():
    with pytest.raises(ValueError, match="unknown calibration level"):
        get_level_plan("huge", ("fp32",), CPU)


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(4, 12))
def test_fit_affine_coefficients_pass_the_profile_schema(seed, n):
    """Regression: bvls can return -1e-39 for a coefficient at its bound, which the profile schema (>= 0) rejected
    at the end of a whole calibration run. Every fitted number must pass AffineFit."""
    import numpy as np

    from rooflinesim.calibrate.fitting.fit import fit_affine
    from rooflinesim.calibrate.fitting.fit_profile import _as_affine_fit

    rng = np.random.default_rng(seed)
    features = {name: rng.uniform(0.0, 1.0, n) * 10.0 ** rng.integers(0, 12) for name in ("kv_bytes", "flops",
                                                                                        "scores")}
    times = rng.lognormal(-9.0, 1.0, n)  # unrelated to the features: coefficients pinned at their bound
    fit = fit_affine(features, times)
    assert fit.overhead_s >= 0.0 and all(v >= 0.0 for v in fit.coefficients.values())
    _as_affine_fit(fit)


def test_a_decoder_is_built_once_per_run():
    """`BenchContext.decoder` keeps each synthetic decoder for the run: only its first token configuration pays for
    building it (for block-2048, about 170 M parameters of random fill, more than timing it)."""
    plan = get_level_plan("quick", ("fp32",), CPU)
    first, second = (DecoderKey("block-2048", t.batch, t.new_tokens) for t in plan.block_tokens[:2])
    slow_build = DeviceSpeed(**{**speed().__dict__, "build_bytes_per_s": 1e7})
    assert estimate_key_s(first, plan, slow_build) - estimate_key_s(first, plan, speed()) > 10.0
    assert estimate_key_s(second, plan, slow_build) == pytest.approx(estimate_key_s(second, plan, speed()))
