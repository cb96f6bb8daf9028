"""The cache-reuse curve timed more than once per calibration: its spread, kept per point in the profile
(`CacheReuse.speedup_sigma`), fitted, merged, and carried into the intervals of steps whose weights sit on it."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from rooflinesim.calibrate.fitting.budget import get_level_plan, is_essential
from rooflinesim.calibrate.fitting.fit_profile import _fit_cache_reuse
from rooflinesim.calibrate.fitting.measurements import CacheKey, Results, Timing
from rooflinesim.calibrate.fitting.merge import merge_profiles
from rooflinesim.calibrate.fitting.plan import CACHE_REPEATS, Plan
from rooflinesim.specs.measured import CacheReuse
from rooflinesim.specs.registry import load_model
from rooflinesim.specs.workload import Workload
from rooflinesim.step import get_step_cost
from rooflinesim.timing.measured import MeasuredTiming

from .synthetic_profiles import make_profile, with_cache

MIB = 2**20
CPU = SimpleNamespace(is_cuda=False)
NO_OVERHEAD = SimpleNamespace(overhead_s=0.0)


def test_every_working_set_below_the_pool_is_timed_per_repeat_and_the_pool_once():
    plan = Plan.make(True, ("fp32",), CPU)
    keys = plan.cache_keys()
    below = [s for s in plan.cache_working_sets if s < plan.rotate_bytes]
    assert keys[-1] == CacheKey(plan.rotate_bytes) and [k.working_set_bytes for k in keys].count(plan.rotate_bytes) == 1
    assert sorted((k.working_set_bytes, k.repeat) for k in keys[:-1]) == sorted(
        (s, r) for s in below for r in range(CACHE_REPEATS))
    # what a run that falls behind still times: the first timing's smallest working set and the pool
    assert [k for k in keys if is_essential(k, plan)] == [CacheKey(min(below)), CacheKey(plan.rotate_bytes)]
    minimal = get_level_plan("minimal", ("fp32",), CPU)  # a device too slow for the quick plan times it once
    assert len(minimal.cache_keys()) == len(minimal.cache_working_sets) + 1


def _results(times_by_size: dict[int, tuple[float, ...]]) -> Results:
    results = Results()
    for size, times in times_by_size.items():
        for repeat, t in enumerate(times):
            results.add(CacheKey(size, repeat), Timing((t,) * 3))
    return results


def test_the_fit_pools_the_timings_and_keeps_their_spread_by_hand():
    """16 MiB timed at 2.0, 2.5 and 2.0 ms against a 4 ms pool: speed-ups 2.0, 1.6 and 2.0, whose sample deviation
    is sqrt((2 x 0.1333^2 + 0.2667^2) / 2) = 0.2309; the pooled calls' faster half reads 2.0 ms (2.0x). The pool
    is the cold end: no spread."""
    curve = _fit_cache_reuse("fp32", _results({16 * MIB: (2e-3, 2.5e-3, 2e-3), 64 * MIB: (3e-3, 3e-3, 3e-3),
                                               512 * MIB: (4e-3,)}), NO_OVERHEAD)
    assert curve.speedup == pytest.approx((2.0, 4 / 3, 1.0))
    assert curve.speedup_sigma == pytest.approx((0.23094, 0.0, 0.0), abs=1e-5)


def test_a_curve_timed_once_keeps_no_spread():
    curve = _fit_cache_reuse("fp32", _results({16 * MIB: (2e-3,), 512 * MIB: (4e-3,)}), NO_OVERHEAD)
    assert curve.speedup == pytest.approx((2.0, 1.0)) and curve.speedup_sigma == ()


def test_the_spec_refuses_a_spread_of_another_length_or_out_of_range():
    with pytest.raises(ValidationError, match="speedup_sigma"):
        CacheReuse(working_set_bytes=(1e7, 1e9), speedup=(2.0, 1.0), warm_bandwidth_bytes_per_s=1e10,
                   speedup_sigma=(0.1,))
    with pytest.raises(ValidationError, match="speedup_sigma"):
        CacheReuse(working_set_bytes=(1e7, 1e9), speedup=(2.0, 1.0), warm_bandwidth_bytes_per_s=1e10,
                   speedup_sigma=(-0.1, 0.0))


def _curve(hw, speedups=(2.0, 1.5, 1.0), sigma=(), sizes=(1e7, 1e8, 1e9), in_model_layer_s=0.0):
    hw = with_cache(hw, sizes, speedups)
    prof = hw.measured.dtypes["fp32"]
    prof = prof.model_copy(update={
        "cache_reuse": prof.cache_reuse.model_copy(update={"speedup_sigma": tuple(sigma)}),
        "in_model_layer_overhead_s": in_model_layer_s})
    return hw.model_copy(update={"measured": hw.measured.model_copy(update={"dtypes": {"fp32": prof}})})


def test_merged_runs_carry_the_spread_between_their_curves_by_hand():
    """Two runs read the middle point at 1.5x and 1.3x: mean 1.4, and a sample deviation of 0.1414 between them;
    with 0.1 inside each run as well, sqrt(0.01 + 0.02) = 0.1732."""
    a, b = _curve(make_profile(name="a")), _curve(make_profile(name="b"), speedups=(2.0, 1.3, 1.0))
    merged = merge_profiles([a, b], ["a.yaml", "b.yaml"]).measured.dtypes["fp32"].cache_reuse
    assert merged.speedup == pytest.approx((2.0, 1.4, 1.0))
    assert merged.speedup_sigma == pytest.approx((0.0, 0.02**0.5, 0.0))
    a, b = _curve(make_profile(name="a"), sigma=(0, 0.1, 0)), _curve(make_profile(name="b"), (2.0, 1.3, 1.0),
                                                                     (0, 0.1, 0))
    merged = merge_profiles([a, b], ["a.yaml", "b.yaml"]).measured.dtypes["fp32"].cache_reuse
    assert merged.speedup_sigma == pytest.approx((0.0, 0.03**0.5, 0.0))


def _step(hw, model="tiny-llama-123m", batch=2):
    timing = MeasuredTiming.from_spec(hw)
    return get_step_cost(hw, load_model(model), Workload.in_dtype("fp32", batch, 512), 1, timing=timing)


def test_a_step_on_the_curve_moves_by_the_warmth_sigma_times_its_cold_minus_warm_price():
    """Independent of the pricing's internals: the same step priced fully cold (a flat curve) and fully warm (the
    whole curve at its top) differ by what the cache can take off it, in-model per-layer cost included; the
    cache part is that difference times the warmth's sigma, read off the curve's spread at the step's weights
    (interpolated in log bytes, over the curve's range)."""
    spread = (0.0, 0.2, 0.0)
    hw = _curve(make_profile(), sigma=spread, in_model_layer_s=150e-6)
    step = _step(hw)
    weights = float(sum(op.count * op.weight_bytes for op in step.ops))
    assert 1e8 < weights < 1e9  # on the curve's steep band
    sigma_speedup = np.interp(np.log(weights), np.log([1e7, 1e8, 1e9]), spread)
    sigma_warmth = sigma_speedup / (2.0 - 1.0)
    cold = _step(_curve(make_profile(), speedups=(1.0, 1.0, 1.0), in_model_layer_s=150e-6)).step_time_s
    warm = _step(_curve(make_profile(), speedups=(2.0, 2.0, 2.0), in_model_layer_s=150e-6)).step_time_s
    assert float(cold - warm) > 0.1 * float(step.step_time_s)
    assert float(step.cache_sigma_s) == pytest.approx(sigma_warmth * float(cold - warm), rel=1e-9)
    # and it enters the documented root-sum-square as one more part
    sig, parts = step.sigmas, step.priced_time_s
    ops = np.sqrt(sum((sig.by_family[f] * float(t)) ** 2 for (f, _), t in parts.items() if f != "cache"))
    expected = np.hypot(np.hypot(ops, float(step.cache_sigma_s)) / float(step.step_time_s), sig.shared)
    assert float(step.rel_sigma) == pytest.approx(expected, rel=1e-12)


def test_a_curve_without_spread_and_a_cold_step_leave_the_interval_as_it_was():
    plain = _step(_curve(make_profile()))
    assert plain.cache_sigma_s == 0.0 and ("cache", "warmth") not in plain.priced_time_s
    # spread at the warm end only: a step whose weights sit at the cold end is not moved
    cold_end = _step(_curve(make_profile(), sigma=(0.3, 0.0, 0.0), sizes=(1e6, 1e7, 1e8)))
    reference = _step(_curve(make_profile(), sizes=(1e6, 1e7, 1e8)))
    assert float(cold_end.cache_sigma_s) == 0.0
    assert float(cold_end.rel_sigma) == float(reference.rel_sigma)
    assert float(plain.step_time_s) == float(_step(_curve(make_profile(), sigma=(0, 0.2, 0))).step_time_s)


@settings(max_examples=25, deadline=None)
@given(st.floats(0.0, 0.5), st.floats(0.0, 0.5))
def test_the_interval_widens_with_the_curve_spread(a, b):
    low, high = sorted((a, b))
    narrow = _step(_curve(make_profile(), sigma=(0.0, low, 0.0)))
    wide = _step(_curve(make_profile(), sigma=(0.0, high, 0.0)))
    assert float(wide.rel_sigma) >= float(narrow.rel_sigma) - 1e-15
    assert float(wide.step_time_s) == float(narrow.step_time_s)  # the spread moves the interval, never the price


def test_speculative_intervals_carry_it_too():
    from rooflinesim.pricing.predict import predict

    def run(hw):
        return predict(hw, "tiny-llama-123m", 4, 1024, weight_dtype="fp32", kv_dtype="fp32",
                       activation_dtype="fp32", draft="tiny-draft-2l", k=4).to_dict()

    plain, spread = run(_curve(make_profile())), run(_curve(make_profile(), sigma=(0.0, 0.3, 0.0)))
    for part in ("decode", "speculative"):
        key = "step_time_s" if part == "decode" else "verify_step_time_s"
        assert spread[part][key] == plain[part][key]
        assert spread[part][f"{key}_high"] / spread[part][f"{key}_low"] > \
            plain[part][f"{key}_high"] / plain[part][f"{key}_low"]


def test_calibrates_summary_line_names_the_curve_and_its_largest_spread():
    curve = CacheReuse(working_set_bytes=(16 * MIB, 64 * MIB, 256 * MIB, 512 * MIB), speedup=(2.0, 1.25, 1.0, 1.0),
                       warm_bandwidth_bytes_per_s=1e10, speedup_sigma=(0.3, 0.05, 0.01, 0.0))
    assert curve.describe() == "2.00x at 16 MiB, cold from 256 MiB, its timings +-0.30 (1 sigma) at most, at 16 MiB"
    once = curve.model_copy(update={"speedup_sigma": (), "speedup": (2.0, 1.5, 1.2, 1.1)})
    assert once.describe() == "2.00x at 16 MiB, 1.10x at 512 MiB"


@pytest.mark.parametrize("sigma, reason", [((0.1,), "one value in \\[0, 20\\] per working set"),
                                           ((0.1, "x", 0.0), "valid number"), ((0.1, -1.0, 0.0), "\\[0, 20\\]")])
def test_a_hand_edited_spread_is_a_clear_error_naming_file_and_field(tmp_path, sigma, reason):
    import yaml

    from rooflinesim.specs.profiles import load_profile, write_profile
    from rooflinesim.specs.registry import SpecError

    data = yaml.safe_load(write_profile(_curve(make_profile(), sigma=(0, 0.2, 0)), tmp_path / "p.yaml").read_text())
    data["measured"]["dtypes"]["fp32"]["cache_reuse"]["speedup_sigma"] = list(sigma)
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(SpecError, match=f"bad.yaml.*cache_reuse.*{reason}"):
        load_profile(tmp_path / "bad.yaml")
