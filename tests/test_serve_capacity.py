"""Offered load as a utilisation: the simulated capacity (`serve.rates.get_saturation_rate_per_s`) against a
hand-computed decode bound, served below it and saturating above it; the time-rescaled replay
(`serve.uncertainty.simulate_at_step_speed`) against a simulation whose every step price is scaled; and the serving
step's error under a measured profile, against predict's interval."""

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from rooflinesim.scenario.builder import build_scenario
from rooflinesim.serve import LengthDistribution, ServeConfig, StepPricer, generate_requests, simulate
from rooflinesim.serve.rates import get_saturation_rate_per_s
from rooflinesim.serve.uncertainty import get_step_rel_sigma, get_step_speed_interval, simulate_at_step_speed
from rooflinesim.errors import InputError
from rooflinesim.step import get_step_cost

#: a frozen copy of a measured CPU profile, found from this file (not the working directory)
PROFILE = str(Path(__file__).resolve().parent / "data" / "profiles" / "cpu-intel-xeon-2c.yaml")

PROMPT, OUTPUT = LengthDistribution.parse("8", "p"), LengthDistribution.parse("256", "o")
CONFIG = ServeConfig(max_num_seqs=16, max_num_batched_tokens=512)


def _scenario(**options):
    return build_scenario("a100", "llama-3.1-8b", draft="llama-3.2-1b", alpha=0.8, k_values=[0], **options)


def test_capacity_is_the_full_batch_decode_rate():
    # 8-token prompts and 256-token outputs: a request is almost only its 255 decode steps at the full batch of 16,
    # whose mean context is 8 + 128 = 136 tokens. Capacity = 16 requests per 255 such steps (+ the prefill chunks,
    # < 1 % of a step's tokens), so the hand bound is 16 / (255 x step(16, 136)), met from below within 2 %.
    scenario = _scenario()
    capacity = get_saturation_rate_per_s(scenario, PROMPT, OUTPUT, "off", CONFIG, requests=400)
    w = scenario.workload
    step_s = float(get_step_cost(scenario.hardware, scenario.model, w, 1, scenario.timing, 136, 16).step_time_s)
    bound = 16 / (255 * step_s)
    assert 0.98 * bound <= capacity <= 1.001 * bound


def test_below_capacity_the_offered_rate_is_served_and_above_it_the_capacity():
    scenario = _scenario()
    capacity = get_saturation_rate_per_s(scenario, PROMPT, OUTPUT, "off", CONFIG)
    light = simulate(scenario, generate_requests(600, 0.5 * capacity, PROMPT, OUTPUT, 1), "off", CONFIG)
    assert light.get_summary()["mean_batch"] < 0.75 * CONFIG.max_num_seqs
    heavy = simulate(scenario, generate_requests(600, 2.0 * capacity, PROMPT, OUTPUT, 1), "off", CONFIG)
    finish = np.sort(heavy.finish_s)
    rate = 480 / (finish[539] - finish[59])  # steady state, as the capacity is read
    assert rate == pytest.approx(capacity, rel=0.03)
    assert heavy.get_summary()["mean_batch"] > 0.95 * CONFIG.max_num_seqs


def test_capacity_grows_with_the_batch_the_engine_may_run():
    scenario = _scenario()
    small = get_saturation_rate_per_s(scenario, PROMPT, OUTPUT, "off", replace(CONFIG, max_num_seqs=4))
    large = get_saturation_rate_per_s(scenario, PROMPT, OUTPUT, "off", CONFIG)
    assert large > 2.5 * small  # decode is memory-bound at these batches: 4x the batch costs far less than 4x time


def test_capacity_needs_enough_requests():
    with pytest.raises(InputError, match="20 requests"):
        get_saturation_rate_per_s(_scenario(), PROMPT, OUTPUT, "off", CONFIG, requests=5)


def _scaled_pricer(pricer: StepPricer, scale: float) -> StepPricer:
    """The same pricer with every step price (decode groups, token tables, chunk attention) times `scale`."""
    pricer.decode_step_s = pricer.decode_step_s * scale
    pricer._decode_lists = pricer.decode_step_s.tolist()
    pricer._rows = {}
    for name in ("target", "draft"):
        table = getattr(pricer, name)
        if table is not None:
            setattr(pricer, name, replace(table, body_s=table.body_s * scale, head_s=table.head_s * scale,
                                          chunk_attention_s=table.chunk_attention_s * scale))
    return pricer


@pytest.mark.parametrize("policy", ["off", "fixed:3", "dynamic:4"])
def test_replay_at_a_step_speed_is_the_schedule_with_every_price_scaled(policy):
    # scaling every duration and every arrival by c scales the whole schedule by c; with c = 2 every product and
    # quotient is exact in binary floating point, so the two simulations agree to the last bit
    scenario = _scenario()
    requests = generate_requests(200, 6.0, LengthDistribution.parse("uniform:64:2048", "p"),
                                 LengthDistribution.parse("uniform:16:256", "o"), seed=4)
    config = ServeConfig(max_num_seqs=32, max_num_batched_tokens=1024, seed=2)

    def pricer():
        return StepPricer(scenario, 32, 1024, 2048 + 256 + 9, 4)

    replayed = simulate_at_step_speed(scenario, requests, policy, config, pricer(), 2.0)
    slower = simulate(scenario, requests, policy, config, _scaled_pricer(pricer(), 2.0)).get_summary()
    for metric in ("ttft_s", "tpot_s"):
        assert replayed[metric] == slower[metric]
    plain = simulate(scenario, requests, policy, config, pricer()).get_summary()
    assert simulate_at_step_speed(scenario, requests, policy, config, pricer(), 1.0)["ttft_s"] == plain["ttft_s"]
    assert replayed["ttft_s"]["p90"] > 2.0 * plain["ttft_s"]["p90"]  # the same load on a slower engine queues more


def test_step_sigma_is_predicts_speculative_step_interval():
    import rooflinesim

    profile = PROFILE
    scenario = build_scenario(profile, "tiny-llama-123m", 1, 256, weight_dtype="fp32", kv_dtype="fp32",
                              activation_dtype="fp32", draft="tiny-draft-2l", alpha=0.7, k_values=[0])
    for k in (0, 2):
        p = rooflinesim.predict(hw=profile, model="tiny-llama-123m", draft="tiny-draft-2l", alpha=0.7, batch=3,
                                ctx=200, k=max(k, 1), weight_dtype="fp32", kv_dtype="fp32", activation_dtype="fp32")
        low, high = (p.decode.step_time_s_low, p.decode.step_time_s_high) if k == 0 else p.speculative.step_interval
        sigma = get_step_rel_sigma(scenario, 3.2, 200, k)  # a mean batch rounds to the nearest whole batch
        assert 0 < sigma < 1
        scale_low, scale_high = get_step_speed_interval(sigma)
        assert scale_low * scale_high == pytest.approx(1.0)
        assert scale_high == pytest.approx((high / low) ** 0.5, rel=1e-9)
    assert get_step_rel_sigma(_scenario(), 8, 1024, 2) is None  # the datasheet roofline has no interval


def test_serve_runs_carry_the_step_models_interval_under_a_measured_profile(capsys):
    import json

    from rooflinesim.cli import main
    from rooflinesim.serve.rates import WorkloadSpec, run_one

    workload = WorkloadSpec(LengthDistribution.parse("uniform:16:128", "p"), LengthDistribution.parse("32", "o"),
                            requests=80, seed=1)
    config = ServeConfig(max_num_seqs=8, max_num_batched_tokens=128)
    measured = build_scenario(PROFILE, "tiny-llama-123m", 1, 160, weight_dtype="fp32",
                              kv_dtype="fp32", activation_dtype="fp32", draft="tiny-draft-2l", alpha=0.7,
                              k_values=[0])
    for policy in ("off", "fixed:2"):
        row = run_one(measured, workload, 1.5, policy, config)
        band = row["interval"]
        assert 0 < band["step_rel_sigma"] < 1
        for metric in ("ttft_s", "tpot_s", "latency_s"):
            for p in ("p50", "p99"):
                low, high = band[metric][p]
                assert low <= row[metric][p] <= high and low < high
    assert run_one(_scenario(), workload, 1.5, "fixed:2", config)["interval"] is None  # datasheet: no interval

    args = ["serve", "--hw", PROFILE, "--model", "tiny-llama-123m", "--draft",
            "tiny-draft-2l", "--alpha", "0.7", "--weight-dtype", "fp32", "--kv-dtype", "fp32", "--activation-dtype",
            "fp32", "--max-num-seqs", "8", "--max-num-batched-tokens", "128", "--prompt-tokens", "uniform:16:128",
            "--output-tokens", "32", "--requests", "60", "--rate", "1,2", "--policy", "off,fixed:2", "--workers", "1"]
    assert main(args + ["--json"]) == 0
    runs = json.loads(capsys.readouterr().out)["runs"]
    assert len(runs) == 4 and all(r["interval"]["ttft_s"]["p50"][0] <= r["ttft_s"]["p50"] for r in runs)
    assert main(args) == 0
    assert "90 % interval" in capsys.readouterr().out
