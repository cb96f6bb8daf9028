"""The serving simulator against its limits: vanishing load reproduces predict, Little's law, saturation at predict's
max batch, determinism under a seed, and scheduler invariants (hypothesis) over random configurations."""

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rooflinesim
from rooflinesim.scenario.builder import build_scenario
from rooflinesim.serve import LengthDistribution, ServeConfig, generate_requests, simulate
from rooflinesim.serve.engine import get_kv_capacity_blocks
from rooflinesim.serve.metrics import TIMELINE_COLUMNS
from rooflinesim.serve.policies import parse_policy
from rooflinesim.pricing.speculative import price_speculation
from rooflinesim.errors import InputError


def _scenario(hw="h100", alpha=0.8, **options):
    return build_scenario(hw, "llama-3.1-8b", draft="llama-3.2-1b", alpha=alpha, k_values=[0], **options)


def _requests(n, rate, prompt="1024", output="257", seed=3, arrivals="poisson", cv=1.0):
    return generate_requests(n, rate, LengthDistribution.parse(prompt, "prompt"),
                             LengthDistribution.parse(output, "output"), seed=seed, arrivals=arrivals, cv=cv)


def _one_at_a_time(n, **lengths):
    """Nearly periodic arrivals 50 s apart (gamma gaps with CV 0.01): no two requests ever overlap."""
    return _requests(n, 0.02, arrivals="gamma", cv=0.01, **lengths)


# --- vanishing load: one request at a time, every decode step is predict's batch-1 step ----------------------------


def _predicted_tpot(alpha, k, ctx):
    p = rooflinesim.predict(hw="h100", model="llama-3.1-8b", draft="llama-3.2-1b", alpha=alpha, batch=1, ctx=ctx,
                            k=max(k, 1))
    return p.decode.step_time_s if k == 0 else p.speculative.step_time_s / p.speculative.expected_tokens


def test_vanishing_load_tpot_is_predicts_step_time_over_e_exactly_with_certain_acceptance():
    # alpha = 1: each step commits exactly k + 1 = 5 tokens; 255 tokens after the first take exactly 51 steps, so
    # TPOT = step / 5 up to the bucketing (interpolation) error, < 0.5 %. The context grows 1024 -> 1280 over the
    # request and the step is linear in it, so predict at the mean context (1152) is the reference.
    result = simulate(_scenario(alpha=1.0), _one_at_a_time(30, output="256"), "fixed:4")
    assert result.get_summary()["max_batch"] == 1
    tpot = np.nanmean(result.tpot_s)
    assert tpot == pytest.approx(_predicted_tpot(1.0, 4, 1024 + 128), rel=0.005)


@pytest.mark.parametrize("policy,k", [("off", 0), ("fixed:4", 4)])
def test_vanishing_load_tpot_is_predicts_step_time_over_e(policy, k):
    # sampled acceptance: 200 requests x ~76 steps; the mean committed tokens per step is known to ~1 % (its std is
    # ~1.3 tokens), and the last step of a request wastes what exceeds its length (~0.5 %): 3 % is > 2 sigma + bias
    result = simulate(_scenario(), _one_at_a_time(200), policy)
    assert result.get_summary()["max_batch"] == 1
    assert np.nanmean(result.tpot_s) == pytest.approx(_predicted_tpot(0.8, k, 1024 + 128), rel=0.03 if k else 0.005)


# --- Little's law and saturation ----------------------------------------------------------------------------------


@pytest.mark.parametrize("rate", [5.0, 16.0])
def test_littles_law_mean_in_system_is_rate_times_mean_latency(rate):
    """The time-average of waiting + running requests read from the step timeline (bookkeeping independent of the
    per-request latencies: it counts a request from the first step after its arrival) equals the measured arrival
    rate (requests / run duration) x the mean latency, within 2 %. The measured rate, not the nominal one: 3000
    Poisson arrivals carry 1.8 % of sampling noise in their own rate, and a window inside the run has edge effects
    of mean latency / window (a few % here at rate 16, which loads the engine without overloading it)."""
    result = simulate(_scenario(), _requests(3000, rate, "uniform:128:2048", "uniform:16:512"), "dynamic")
    summary = result.get_summary()
    measured_rate = result.arrival_s.size / result.duration_s
    assert measured_rate == pytest.approx(rate, rel=0.06)
    assert summary["mean_in_system"] == pytest.approx(measured_rate * result.latency_s.mean(), rel=0.02)
    assert summary["mean_batch"] > (3 if rate < 10 else 50)  # a loaded queue, not an idle one


@pytest.mark.parametrize("policy,k", [("off", 0), ("fixed:2", 2)])
def test_throughput_saturates_at_predicts_max_batch(policy, k):
    """Overload with max_num_seqs = predict's max batch at the longest request (so nothing is ever preempted): the
    engine runs at that batch, and its steady-state throughput approaches predict's B x E / step(B, mean context).
    It stays below it by the prefill work (128-token prompts per ~1024 output tokens) and the batch dips while
    finished requests are replaced: within 12 %, and never above it beyond the bucketing error."""
    scenario = _scenario("a100")
    deployed = scenario if k else replace(scenario, drafter=None, draft_workload=None)
    batch = int(deployed.get_max_batch(128 + 1280, k))
    config = ServeConfig(max_num_seqs=batch, max_num_batched_tokens=8192)
    result = simulate(scenario, _requests(2500, 1e4, "128", "uniform:768:1280"), policy, config)
    order = np.argsort(result.finish_s)
    finish = result.finish_s[order]
    window = (finish > 0.2 * result.duration_s) & (finish < 0.8 * result.duration_s)
    throughput = result.output_tokens[order][window].sum() / (finish[window][-1] - finish[window][0])
    grid = price_speculation(scenario, np.asarray([batch]), np.asarray([128 + 512]), np.asarray([k]))
    predicted = batch * float(np.ravel(grid.expected_tokens)[0]) / float(np.ravel(grid.step_time_s)[0])
    assert result.get_summary()["preemptions"] == 0
    assert result.mean_batch >= 0.9 * batch
    assert 0.88 * predicted <= throughput <= 1.01 * predicted


# --- determinism, preemption, KV capacity --------------------------------------------------------------------------


def test_deterministic_under_a_seed_and_different_under_another():
    scenario = _scenario()
    a = simulate(scenario, _requests(300, 10.0), "fixed:3", ServeConfig(seed=1))
    b = simulate(scenario, _requests(300, 10.0), "fixed:3", ServeConfig(seed=1))
    c = simulate(scenario, _requests(300, 10.0), "fixed:3", ServeConfig(seed=2))
    assert np.array_equal(a.finish_s, b.finish_s) and np.array_equal(a.itl_s, b.itl_s)
    assert not np.array_equal(a.finish_s, c.finish_s)


def test_kv_pressure_preempts_by_recompute_and_every_request_still_finishes():
    # an 8B target + 1B draft on a 48 GB L40S: ~10k KV blocks for requests of 1.5k-6k tokens arriving at 50/s
    scenario = build_scenario("l40s", "llama-3.1-8b", draft="llama-3.2-1b", alpha=0.8, k_values=[0])
    result = simulate(scenario, _requests(300, 50.0, "uniform:1024:4096", "uniform:512:2048"), "fixed:4")
    summary = result.get_summary()
    assert summary["preemptions"] > 0
    assert np.isfinite(result.finish_s).all()
    assert summary["peak_kv_occupancy"] <= 1.0


def test_kv_capacity_is_predicts_memory_model_and_a_draft_takes_its_share():
    scenario = _scenario()
    config = ServeConfig()
    off_blocks, off_per_token = get_kv_capacity_blocks(scenario, parse_policy("off"), config)
    spec_blocks, spec_per_token = get_kv_capacity_blocks(scenario, parse_policy("fixed:4"), config)
    target_only = replace(scenario, drafter=None, draft_workload=None)
    # predict's max batch at 1k context, with its per-sequence KV and activations, holds the same KV tokens (the
    # engine reserves activations for 256 sequences, predict for its ~470: 0.1 % of the memory)
    fit = target_only.get_memory_fit(1, 1023, 0)
    assert off_per_token == pytest.approx(float(fit.kv_cache_bytes) / 1024)
    assert off_blocks * 16 == pytest.approx(int(target_only.get_max_batch(1023, 0)) * 1024, rel=0.01)
    assert spec_per_token > off_per_token and spec_blocks < off_blocks


def test_dynamic_policy_drafts_less_as_the_batch_grows():
    scenario = _scenario()
    low = simulate(scenario, _requests(200, 1.0), "dynamic").get_summary()
    high = simulate(scenario, _requests(1500, 60.0), "dynamic").get_summary()
    assert high["mean_batch"] > 4 * low["mean_batch"]
    assert high["mean_k"] < low["mean_k"]


def test_adaptive_policy_learns_the_acceptance_it_samples():
    scenario = _scenario(alpha=0.9)
    policy = parse_policy("adaptive:8")
    simulate(scenario, _requests(200, 2.0), policy)
    assert policy.alpha_estimate == pytest.approx(0.9, abs=0.02)


def test_schedule_policies_follow_trtllm_semantics():
    schedule = parse_policy("schedule:1=4,4=2,8=0")
    assert [schedule.choose_k(b, 0, None) for b in (1, 3, 4, 7, 8, 100)] == [4, 4, 2, 2, 0, 0]
    capped = parse_policy("off-above:16:3")
    assert [capped.choose_k(b, 0, None) for b in (1, 16, 17)] == [3, 3, 0]
    assert parse_policy("fixed:5").choose_k(10_000, 0, None) == 5


# --- invariants over random configurations ------------------------------------------------------------------------

POLICIES = ["off", "fixed:1", "fixed:6", "off-above:4:3", "schedule:1=5,3=2,8=0", "dynamic:6", "adaptive:6"]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(policy=st.sampled_from(POLICIES), seqs=st.integers(1, 64), budget_extra=st.integers(0, 2048),
       rate=st.floats(0.5, 200.0), seed=st.integers(0, 2**31), alpha=st.floats(0.0, 1.0))
def test_scheduler_invariants(policy, seqs, budget_extra, rate, seed, alpha):
    scenario = build_scenario("a10g", "llama-3.2-1b", draft="llama-3.2-1b", alpha=alpha, k_values=[0])
    config = ServeConfig(max_num_seqs=seqs, max_num_batched_tokens=seqs + budget_extra, seed=seed)
    requests = generate_requests(60, rate, LengthDistribution.parse("uniform:1:3000", "p"),
                                 LengthDistribution.parse("uniform:1:300", "o"), seed=seed)
    result = simulate(scenario, requests, policy, config)
    t = result.timeline
    column = {name: t[:, i] for i, name in enumerate(TIMELINE_COLUMNS)}
    assert np.isfinite(result.finish_s).all()  # every request finishes
    assert (result.first_token_s >= result.arrival_s).all() and (result.finish_s >= result.first_token_s).all()
    assert (column["scheduled_tokens"] <= config.max_num_batched_tokens).all()
    assert (column["running"] <= seqs).all()
    assert (column["kv_blocks_used"] <= result.kv_blocks).all()
    assert (np.diff(column["start_s"]) > 0).all() and (column["duration_s"] > 0).all()
    assert (column["k"] <= parse_policy(policy).max_k).all()


# --- bad input -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["fast", "fixed", "fixed:-1", "fixed:x", "off-above:0:2", "schedule:4", "dynamic:99",
                                  "off:3", "schedule:2=4,8=1"])
def test_bad_policies_are_one_line_input_errors(text):
    with pytest.raises(InputError):
        parse_policy(text)


def test_a_request_longer_than_the_kv_cache_is_refused():
    scenario = build_scenario("l4", "llama-3.1-8b", draft="llama-3.2-1b", alpha=0.8, k_values=[0],
                              allow_long_context=True)
    with pytest.raises(InputError, match="KV blocks"):
        simulate(scenario, _requests(2, 1.0, "1000000", "10"), "off")


def test_speculation_without_a_drafter_is_refused():
    scenario = build_scenario("h100", "llama-3.1-8b", speculative=False)
    with pytest.raises(InputError, match="no drafter"):
        simulate(scenario, _requests(2, 1.0), "fixed:2")


@pytest.mark.parametrize("policy", ["off", "fixed:3", "dynamic:6", "off-above:8:2"])
@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_planned_decode_runs_equal_stepping_one_by_one(policy, alpha):
    """The fast path (runs of decode steps planned at once) against the per-step path: with acceptance certain (1)
    or impossible (0) nothing is random, so both must give the same schedule to rounding."""
    scenario = _scenario(alpha=alpha)
    requests = _requests(400, 15.0, "uniform:64:1500", "uniform:1:300")
    planned = parse_policy(policy)
    stepped = parse_policy(policy)
    stepped.plannable = False
    a, b = simulate(scenario, requests, planned), simulate(scenario, requests, stepped)
    np.testing.assert_allclose(a.finish_s, b.finish_s, rtol=1e-9)
    np.testing.assert_allclose(a.first_token_s, b.first_token_s, rtol=1e-9)
    np.testing.assert_allclose(np.sort(a.itl_s), np.sort(b.itl_s), rtol=1e-9, atol=1e-12)
    assert a.timeline.shape == b.timeline.shape
    np.testing.assert_allclose(a.timeline, b.timeline, rtol=1e-9)
