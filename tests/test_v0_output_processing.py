"""vLLM V0's output processing while speculating (engines/vllm-v0.yaml `speculative.output_per_sequence_s`;
docs/engines.md): V0 turns its asynchronous output processor off when a speculative config is set (vllm/config.py),
so `_process_model_outputs` runs between GPU steps. RFC vllm-project/vllm#6913 profiled it on Llama3-70B, 4 x H100:
0.2 ms at batch 1, 3.4 ms at batch 32, i.e. (3.4 - 0.2) / 31 = 0.103 ms per sequence. It is priced per sequence
of the batch, never per expanded verify row, and only on speculative iterations."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rooflinesim.pricing.speculative import _loop_timings, get_engine_extras_s, price_speculation
from rooflinesim.scenario.builder import build_scenario
from rooflinesim.specs.registry import list_engines, load_engine
from rooflinesim.step import get_step_cost

PER_SEQUENCE_S = (3.4e-3 - 0.2e-3) / 31  # RFC #6913's two consistent rows


def _scenario(drafter="ngram", engine="vllm-v0", batch=40, context=1100):
    extra = {"drafter": "ngram", "ngram_match_fraction": 0.9} if drafter == "ngram" else {"draft": "llama-3.2-1b"}
    return build_scenario("h100", "llama-3.1-70b", batch, context, alpha=0.8, k_values=[0, 4], engine=engine, tp=4,
                          **extra)


def _extras_s(scenario, batch, k):
    decode = get_step_cost(scenario.hardware, scenario.model, scenario.workload, 1, scenario.timing, 1100, batch)
    _, verify_timing = _loop_timings(scenario, decode)
    return float(np.asarray(get_engine_extras_s(scenario, verify_timing, batch, 1100, k)).ravel()[0])


def test_the_profile_carries_the_rfc_figure():
    spec = load_engine("vllm-v0").speculative
    assert spec.output_per_sequence_s == pytest.approx(PER_SEQUENCE_S, rel=0.01)
    assert "6913" in load_engine("vllm-v0").sources["speculative.output_per_sequence_s"]


def test_v0_ngram_iteration_extras_hand_computed():
    """Batch 40, k = 4, vllm-v0, n-gram: 12 extra kernels x 3.65 us (graph: 40 x 5 = 200 rows <= 256)
    = 0.0438 ms, the lookup 15 ops x 40 x 10 us = 6 ms, output processing 40 x 0.103 ms = 4.12 ms: 10.1638 ms.
    Before output processing was priced this was 6.0438 ms."""
    assert _extras_s(_scenario(), 40, 4) == pytest.approx(12 * 3.65e-6 + 15 * 40 * 1e-5 + 40 * 1.03e-4, rel=1e-9)


def test_v0_draft_model_iteration_extras_hand_computed():
    """The same without the n-gram lookup: 0.0438 ms + 4.12 ms = 4.1638 ms; at k = 0 (plain decoding, the async
    output processor's work hidden) nothing."""
    s = _scenario("model")
    assert _extras_s(s, 40, 4) == pytest.approx(12 * 3.65e-6 + 40 * 1.03e-4, rel=1e-9)
    assert _extras_s(s, 40, 0) == 0.0


def test_counted_per_sequence_not_per_expanded_row():
    """V0 expands 40 sequences x (1 + 4 x 0.9) into 184 verify rows; output processing still counts 40."""
    s = _scenario()
    g = price_speculation(s, 40, 1100, np.asarray([4]))
    without = s.engine.model_copy(update={"speculative": s.engine.speculative.model_copy(
        update={"output_per_sequence_s": 0.0})})
    s0 = build_scenario("h100", "llama-3.1-70b", 40, 1100, alpha=0.8, k_values=[0, 4], engine=without, tp=4,
                        drafter="ngram", ngram_match_fraction=0.9)
    g0 = price_speculation(s0, 40, 1100, np.asarray([4]))
    delta = float(np.asarray(g.step_time_s).ravel()[0] - np.asarray(g0.step_time_s).ravel()[0])
    assert delta == pytest.approx(40 * 1.03e-4, rel=1e-9)


def test_only_vllm_v0_prices_it():
    for spec in list_engines():
        if spec.short_name != "vllm-v0":
            assert spec.speculative.output_per_sequence_s == 0.0, spec.short_name


@settings(max_examples=25, deadline=None)
@given(batch=st.integers(1, 256), k=st.integers(1, 8))
def test_output_processing_is_linear_in_the_batch(batch, k):
    """Whatever the batch and k: the draft-model extras are the extra kernels' launches plus batch x 0.103 ms."""
    s = _scenario("model")
    decode = get_step_cost(s.hardware, s.model, s.workload, 1, s.timing, 1100, batch)
    _, verify_timing = _loop_timings(s, decode)
    launches = float(np.asarray(verify_timing.get_launch_s(12, batch, k + 1)).ravel()[0])
    assert _extras_s(s, batch, k) - launches == pytest.approx(batch * 1.03e-4, rel=1e-9)


def test_host_per_expanded_row_stays_inside_the_pr_5691_bound():
    """PR vllm-project/vllm#5691 (Llama-7B, one A100, CUDA graphs, k = 5): batch-expansion scoring minus MQA scoring
    grows by (36.4 - 25.5 - 15.4 + 13.7) / (28 x 6) = 55 us and (54.5 - 35.1 - 36.4 + 25.5) / (32 x 6) = 44 us per
    expanded row, host Python and re-read KV together; the profile's host time per expanded row must not exceed
    the smaller."""
    e = load_engine("vllm-v0")
    bound = min((36.4 - 25.5 - 15.4 + 13.7) / (28 * 6), (54.5 - 35.1 - 36.4 + 25.5) / (32 * 6)) * 1e-3
    assert bound == pytest.approx(44.3e-6, rel=0.01)
    assert e.host.per_sequence_s + e.speculative.per_sequence_s <= bound
