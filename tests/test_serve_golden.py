"""Serving simulations against numbers recorded from the simulator before its speed work (tests/data/serve-golden.json).

Each case pins every request's TTFT and end-to-end latency, the step count, the summary metrics and checksums of the
engine timeline and the inter-token gaps, for one seeded configuration: low load (the benchmark's 2 req/s, fixed:4,
where the decode-run fast path and the per-step path alternate), moderate load with the dynamic policy, mixed prompt
lengths with chunked prefill under a small token budget, long prompts chunked with nothing else running, the adaptive
policy, no speculation, and KV-cache pressure with preemption. A change to the engine that moves any request fails
here, so speed-ups must keep the schedule and the random stream as they are. Regenerate only for an intended change
of the simulation: `PYTHONPATH=. python3 tests/test_serve_golden.py`.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from rooflinesim.scenario.builder import build_scenario
from rooflinesim.serve import LengthDistribution, ServeConfig, generate_requests, simulate

# numbers of the bare-kernel model (hand-computed or checked against published rows before engine profiles):
# priced with engine "ideal" (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("ideal_engine")

FIXTURE = Path(__file__).resolve().parent / "data" / "serve-golden.json"
SUMMARY_FIELDS = ("duration_s", "mean_batch", "max_batch", "mean_in_system", "mean_kv_occupancy", "peak_kv_occupancy",
                  "kv_blocks", "preemptions", "steps", "mean_k")

#: (case id, (hardware, target, draft, tp), requests (n, rate, prompt, output, seed), policy, ServeConfig keywords)
CASES = [
    ("low-load-fixed4", ("h100", "llama-3.1-70b", "llama-3.1-8b", 4), (300, 2.0, "1024", "128", 0), "fixed:4", {}),
    ("moderate-load-dynamic", ("h100", "llama-3.1-70b", "llama-3.1-8b", 4), (300, 8.0, "1024", "128", 0), "dynamic",
     {}),
    ("mixed-lengths-off", ("h100", "llama-3.1-8b", "llama-3.2-1b", 1), (300, 6.0, "uniform:64:3000",
                                                                         "uniform:1:400", 1), "off", {"seed": 3}),
    ("mixed-lengths-adaptive", ("h100", "llama-3.1-8b", "llama-3.2-1b", 1), (300, 6.0, "uniform:64:3000",
                                                                              "uniform:1:400", 2), "adaptive:6",
     {"seed": 4}),
    ("small-budget-schedule", ("h100", "llama-3.1-8b", "llama-3.2-1b", 1), (300, 20.0, "lognormal:512:0.8",
                                                                             "lognormal:128:0.7", 5),
     "schedule:1=5,3=2,8=0", {"max_num_seqs": 16, "max_num_batched_tokens": 600, "seed": 5}),
    ("low-load-off-above", ("h100", "llama-3.1-8b", "llama-3.2-1b", 1), (300, 3.0, "uniform:64:3000",
                                                                          "uniform:1:400", 6), "off-above:4:3",
     {"seed": 6}),
    ("long-prompts-chunked-alone", ("h100", "llama-3.1-8b", "llama-3.2-1b", 1), (100, 0.05, "lognormal:3000:0.6",
                                                                                  "uniform:1:8", 7), "fixed:2",
     {"max_num_seqs": 4, "max_num_batched_tokens": 700, "seed": 7}),
    ("kv-pressure-preemption", ("l40s", "llama-3.1-8b", "llama-3.2-1b", 1), (200, 50.0, "uniform:1024:4096",
                                                                              "uniform:512:2048", 3), "fixed:4", {}),
]


def compute_case(deployment, request_args, policy, config) -> dict:
    hw, model, draft, tp = deployment
    scenario = build_scenario(hw, model, draft=draft, tp=tp, alpha=0.8, k_values=[0])
    n, rate, prompt, output, seed = request_args
    requests = generate_requests(n, rate, LengthDistribution.parse(prompt, "prompt"),
                                 LengthDistribution.parse(output, "output"), seed=seed)
    result = simulate(scenario, requests, policy, ServeConfig(**config))
    summary = result.get_summary()
    return {
        "summary": {f: summary[f] for f in SUMMARY_FIELDS},
        "ttft_s": result.ttft_s.tolist(),
        "latency_s": result.latency_s.tolist(),
        "timeline_column_sums": result.timeline.sum(axis=0).tolist(),
        "itl": [int(result.itl_s.size), float(result.itl_s.sum())],
    }


@pytest.fixture(scope="module")
def golden() -> dict:
    return json.loads(FIXTURE.read_text())


@pytest.mark.parametrize("case, deployment, request_args, policy, config", CASES, ids=[c[0] for c in CASES])
def test_serving_results_match_the_recorded_ones(golden, case, deployment, request_args, policy, config):
    expected, actual = golden[case], compute_case(deployment, request_args, policy, config)
    assert actual["summary"]["steps"] == expected["summary"]["steps"]
    assert actual["summary"]["preemptions"] == expected["summary"]["preemptions"]
    assert actual["itl"][0] == expected["itl"][0]
    for key in ("ttft_s", "latency_s", "timeline_column_sums"):  # to the last bits, every request
        np.testing.assert_allclose(actual[key], expected[key], rtol=1e-12, atol=0, err_msg=f"{case}: {key}")
    np.testing.assert_allclose(actual["itl"][1], expected["itl"][1], rtol=1e-12, err_msg=f"{case}: itl")
    for f in SUMMARY_FIELDS:
        np.testing.assert_allclose(actual["summary"][f], expected["summary"][f], rtol=1e-12, err_msg=f"{case}: {f}")


if __name__ == "__main__":
    FIXTURE.write_text(json.dumps({case: compute_case(*args) for case, *args in CASES}) + "\n")
    print(f"wrote {FIXTURE} ({FIXTURE.stat().st_size} bytes)")
