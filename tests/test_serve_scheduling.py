"""Engine scheduling in serve (serve/engine.py, the engines' `scheduling` blocks): prefill-first vs mixed steps,
no-evict admission, `--rate inf`, and the engine's defaults reaching ServeConfig."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from rooflinesim.cli import main
from rooflinesim.errors import InputError
from rooflinesim.scenario.builder import build_scenario
from rooflinesim.serve import LengthDistribution, ServeConfig, generate_requests, simulate
from rooflinesim.serve.rates import parse_rates
from rooflinesim.specs.registry import load_engine


def _requests(n, rate, prompt="1024", output="128", seed=0):
    return generate_requests(n, rate, LengthDistribution.parse(prompt, "prompt"),
                             LengthDistribution.parse(output, "output"), seed=seed)


def test_engine_profiles_set_the_serving_defaults():
    assert ServeConfig.for_engine(load_engine("vllm-v1")) == ServeConfig()  # vLLM V1: what serve always simulated
    sglang = ServeConfig.for_engine(load_engine("sglang"))
    assert (sglang.step_policy, sglang.admission) == ("prefill-first", "evict")
    trtllm = ServeConfig.for_engine(load_engine("trtllm"), max_num_batched_tokens=4096)
    assert (trtllm.admission, trtllm.max_num_seqs, trtllm.max_num_batched_tokens) == ("no-evict", 2048, 4096)
    with pytest.raises(InputError, match="step_policy"):
        ServeConfig(step_policy="decode-first").check()


def test_prefill_first_stalls_decodes_and_mixed_steps_do_not():
    """Prefill-first runs a step with prompts to prefill alone: the decodes' inter-token gaps include whole prefill
    steps (a higher p99 ITL) while new prompts start sooner (a lower or equal TTFT)."""
    scenario = build_scenario("h100", "llama-3.1-8b", speculative=False, engine="vllm-v1")
    requests = _requests(300, 12.0, prompt="2048", output="256", seed=2)
    mixed = simulate(scenario, requests, "off", ServeConfig(step_policy="mixed")).get_summary()
    first = simulate(scenario, requests, "off", ServeConfig(step_policy="prefill-first")).get_summary()
    assert first["itl_s"]["p99"] > mixed["itl_s"]["p99"]
    assert first["ttft_s"]["p50"] <= mixed["ttft_s"]["p50"] * 1.0001


def test_no_evict_admission_never_preempts():
    """KV pressure (L40S, long requests, 50 req/s): vLLM-style admission preempts; TensorRT-LLM's no-evict admits a
    request only when its whole output fits, so nothing is ever preempted and every request still finishes."""
    scenario = build_scenario("l40s", "llama-3.1-8b", draft="llama-3.2-1b", alpha=0.8, k_values=[0], engine="ideal")
    requests = _requests(200, 50.0, prompt="uniform:1024:4096", output="uniform:512:2048", seed=3)
    evict = simulate(scenario, requests, "fixed:4", ServeConfig())
    kept = simulate(scenario, requests, "fixed:4", ServeConfig(admission="no-evict"))
    assert evict.preemptions.sum() > 0
    assert kept.preemptions.sum() == 0 and np.isfinite(kept.finish_s).all()


def test_rate_inf_sends_every_request_at_once():
    assert parse_rates("inf") == [math.inf] and parse_rates("4,inf") == [4.0, math.inf]
    assert (_requests(50, math.inf).arrival_s == 0).all()


def test_serve_rate_inf_and_the_engine_are_in_the_json(capsys):
    code = main(["serve", "--hw", "h100", "--model", "llama-3.2-1b", "--draft", "tiny-draft-2l", "--rate", "inf",
                 "--policy", "off", "--requests", "50", "--engine", "sglang", "--json", "--workers", "1"])
    assert code == 0
    run = json.loads(capsys.readouterr().out)["runs"][0]
    assert run["rate_per_s"] == "inf" and run["engine"] == "sglang"


def test_named_and_fixed_lengths():
    """sonnet: vLLM benchmark_serving.py's defaults (550 prompt, 150 output tokens); fixed:N is N."""
    assert (LengthDistribution.parse("sonnet", "--prompt-tokens").low,
            LengthDistribution.parse("sonnet", "--output-tokens").low) == (550, 150)
    assert LengthDistribution.parse("fixed:64", "prompt") == LengthDistribution.parse("64", "prompt")
    with pytest.raises(InputError, match="did you mean sonnet"):
        LengthDistribution.parse("sonet", "prompt")
