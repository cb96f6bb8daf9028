"""`dynamic` and `adaptive` never lose to their own options (serve/policies.py): over a rate sweep their throughput
is within noise of the better of `off` and the best `fixed:k` at every point, and they switch speculation off at
saturation (issue 29)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rooflinesim.scenario.builder import build_scenario
from rooflinesim.serve import LengthDistribution, ServeConfig, generate_requests, simulate

#: what "within noise" allows: 3 % of the best option's throughput. Runs of 150 requests are short (ramp-up and
#: drain are a third of them) and a deployed draft takes KV capacity `off` keeps; over engines ideal / sglang, rates
#: 8 and 16 req/s and seeds 0, 5, 37 the worst case was -2.6 % (ideal, 8 req/s, seed 37: the on-demand draft,
#: having paused, judged one catch-up of 60k prompt tokens dearer than speculation would save on the running batch)
NOISE = 0.03
OPTIONS = ("off", "fixed:1", "fixed:2", "fixed:4")


def _runs(engine: str, rate: float, seed: int, policies, n: int = 150, deployment=("llama-3.1-70b", "llama-3.1-8b", 4)):
    model, draft, tp = deployment
    scenario = build_scenario("h100", model, draft=draft, tp=tp, alpha=0.8, k_values=[0], engine=engine)
    requests = generate_requests(n, rate, LengthDistribution.parse("1024", "prompt"),
                                 LengthDistribution.parse("128", "output"), seed=seed)
    return {p: simulate(scenario, requests, p, ServeConfig(seed=seed)).get_summary() for p in policies}


#: derandomized: the same twelve draws on every run. A 150-request run's throughput moves a few per cent with its
#: seed, and the margin sits inside that: over 1,854 random draws (2-core AMD EPYC VM, 2026-12-07) the worst was
#: -2.97 % (vllm-v1 and sglang at 8 req/s), so a fresh draw every CI run would fail one now and then on noise
@settings(max_examples=12, deadline=None, derandomize=True)
@given(engine=st.sampled_from(["ideal", "vllm-v1", "sglang"]), rate=st.sampled_from([2.0, 8.0, 16.0, 32.0]),
       seed=st.integers(0, 1000), policy=st.sampled_from(["dynamic", "adaptive"]))
def test_dynamic_is_never_worse_than_its_best_option(engine, rate, seed, policy):
    runs = _runs(engine, rate, seed, OPTIONS + (policy,))
    best = max(runs[p]["output_tokens_per_s"] for p in OPTIONS)
    assert runs[policy]["output_tokens_per_s"] >= (1 - NOISE) * best


@pytest.mark.parametrize("policy", ["dynamic", "adaptive"])
def test_speculation_is_switched_off_at_saturation(policy):
    runs = _runs("vllm-v1", 64.0, 3, ("off", policy))
    assert runs[policy]["mean_k"] < 0.05
    assert runs[policy]["output_tokens_per_s"] >= (1 - NOISE) * runs["off"]["output_tokens_per_s"]


def test_the_issue_serve_command_no_longer_loses_to_off():
    """`serve --hw h100 --model llama-3.1-70b --tp 4 --draft llama-3.1-8b --rate 16,32 --policy off,dynamic` (1000
    requests): dynamic gave 1,294 against 1,406 tok/s and a TTFT p50 of 12.0 s against 7.0 s at 16 req/s (bare
    kernels) before it switched speculation off at saturation and ran its draft on demand."""
    for rate in (16.0, 32.0):
        runs = _runs("ideal", rate, 0, ("off", "dynamic"), n=1000)
        off, dynamic = runs["off"], runs["dynamic"]
        assert dynamic["output_tokens_per_s"] >= (1 - NOISE) * off["output_tokens_per_s"]
        assert dynamic["ttft_s"]["p50"] <= 1.10 * off["ttft_s"]["p50"]
