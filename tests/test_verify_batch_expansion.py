"""vLLM V0's batch-expansion verify (engines/vllm-v0.yaml `speculative.verify_batch_expansion`; docs/engines.md): with
CUDA graphs on, V0 turns its MQA scorer off and scores a chain's k + 1 tokens per sequence as k + 1 single-token
sequences (BatchExpansionTop1Scorer), each attending over its own context. Only the attention's KV reads grow with
it; the weights are still read once per step. Also V0's n-gram lookup, run one sequence at a time as eager torch
ops on the host (`speculative.ngram_ops_per_sequence`)."""

from __future__ import annotations

import numpy as np
import pytest

from rooflinesim.pricing.speculative import (
    _loop_timings, get_ngram_proposer_s, price_speculation, uses_verify_batch_expansion,
)
from rooflinesim.scenario.builder import build_scenario
from rooflinesim.specs.registry import list_engines
from rooflinesim.step import get_step_cost

ENGINES = [e.short_name for e in list_engines()]


def _scenario(engine="vllm-v0", batch=8, context=2048, k=4, **extra):
    extra.setdefault("draft", "llama-3.2-1b")
    return build_scenario("h100", "llama-3.1-8b", batch, context, alpha=0.6, k_values=[0, k], engine=engine,
                          **extra)


def _kv_read_bytes(step) -> float:
    return float(sum(np.sum(op.kv_read_bytes) * op.count for op in step.ops))


def test_only_vllm_v0_expands_and_never_a_tree():
    assert uses_verify_batch_expansion(_scenario())
    assert not any(uses_verify_batch_expansion(_scenario(e)) for e in ENGINES if e != "vllm-v0")
    assert not uses_verify_batch_expansion(_scenario(drafter="eagle", draft=None, k=7, tree="3,4,8"))


def test_the_expanded_verify_is_a_decode_of_b_times_k_plus_1_sequences():
    """Batch 8, k = 4: the verify is priced as one decode step of 40 single-token sequences (its time plus the
    acceptance rule, the engine's extra kernels and its output processing, which do not depend on the scorer)."""
    s = _scenario()
    decode = get_step_cost(s.hardware, s.model, s.workload, 1, s.timing, 2048, 8)
    _, verify_timing = _loop_timings(s, decode)
    expanded = get_step_cost(s.hardware, s.model, s.workload, 1, verify_timing, 2048, 40).step_time_s
    multi_query = get_step_cost(s.hardware, s.model, s.workload, 5, verify_timing, 2048, 8).step_time_s
    g = price_speculation(s, 8, 2048, np.asarray([4]))
    verify = float(np.asarray(g.verify_step_time_s).ravel()[0])
    extras = verify - float(np.asarray(expanded).ravel()[0]) - 8 * s.engine.speculative.output_per_sequence_s
    assert 0 <= extras < 0.05 * verify  # the rule and the extra kernels only, past the output processing
    assert float(np.asarray(expanded).ravel()[0]) > float(np.asarray(multi_query).ravel()[0])


def test_expansion_reads_the_kv_k_plus_1_times_and_the_weights_once():
    """Hand-computed: Llama-3.1-8B bf16, 8 sequences at context 2048 read 8 x 2048 x 32 layers x 8 KV heads x 128 x
    2 (K, V) x 2 bytes = 2.15 GB of KV per decode step; the expanded verify of k = 4 reads 5 times that, the
    multi-query verify the same KV once; both read the weights once."""
    s = _scenario()
    w, hw, m, t = s.workload, s.hardware, s.model, s.timing
    decode = get_step_cost(hw, m, w, 1, t, 2048, 8)
    expanded = get_step_cost(hw, m, w, 1, t, 2048, 40)
    multi_query = get_step_cost(hw, m, w, 5, t, 2048, 8)
    assert _kv_read_bytes(decode) == pytest.approx(8 * 2048 * 32 * 8 * 128 * 2 * 2, rel=0.02)
    assert _kv_read_bytes(expanded) == pytest.approx(5 * _kv_read_bytes(decode), rel=1e-9)
    assert _kv_read_bytes(multi_query) == pytest.approx(_kv_read_bytes(decode), rel=0.01)
    weights = [float(sum(np.max(op.weight_bytes) * op.count for op in step.ops)) for step in (expanded, multi_query)]
    assert weights[0] == pytest.approx(weights[1], rel=1e-9)


def test_the_expansion_costs_more_as_batch_and_context_grow():
    """What V0 loses over a multi-query verify grows with the KV it re-reads: batch x context x k. vLLM V1 (a
    multi-query verify) pays less for it at batch 64 and context 4096."""
    ratios = {}
    for engine in ("vllm-v0", "vllm-v1"):
        s = _scenario(engine, batch=[1, 16, 64], context=[512, 4096])
        g = price_speculation(s, np.asarray([1, 16, 64])[:, None], np.asarray([512, 4096])[None, :],
                              np.asarray([4]))
        ratios[engine] = (np.asarray(g.verify_step_time_s).reshape(3, 2)
                          / np.asarray(g.target_decode_time_s).reshape(3, 2))
    v0 = ratios["vllm-v0"]
    assert np.all(np.diff(v0, axis=0) > 0)  # verify / decode grows with batch
    assert np.all(v0[1:, 1] > v0[1:, 0])  # and with context
    assert v0[-1, -1] > ratios["vllm-v1"][-1, -1]


@pytest.mark.parametrize("fraction", [0.25, 1.0])
def test_ngram_misses_stay_one_row(fraction):
    """An n-gram sequence without a match is scored as its one token: 8 sequences with k = 4 expand to
    8 x (1 + 4 x fraction) rows."""
    s = build_scenario("h100", "llama-3.1-8b", 8, 2048, drafter="ngram", alpha=0.3, k_values=[0, 4],
                       engine="vllm-v0", ngram_match_fraction=fraction)
    decode = get_step_cost(s.hardware, s.model, s.workload, 1, s.timing, 2048, 8)
    _, verify_timing = _loop_timings(s, decode)
    rows = 8 * (1 + 4 * fraction)
    expanded = float(np.asarray(get_step_cost(s.hardware, s.model, s.workload, 1, verify_timing, 2048,
                                                  rows).step_time_s).ravel()[0])
    verify = float(np.asarray(price_speculation(s, 8, 2048, np.asarray([4])).verify_step_time_s).ravel()[0])
    verify -= float(get_ngram_proposer_s(s.engine, 8))  # the host-side lookup (tested below)
    verify -= 8 * s.engine.speculative.output_per_sequence_s  # output processing (test_v0_output_processing.py)
    assert verify == pytest.approx(expanded, rel=0.05) and verify >= expanded


# --- vLLM V0's n-gram lookup, one sequence at a time on the host (`speculative.ngram_ops_per_sequence`) -----------


def test_v0_ngram_lookup_costs_15_eager_ops_per_sequence(monkeypatch):
    """Hand-computed: 8 sequences x 15 ops x 10 us (vllm-v0's kernel_s_eager) = 1.2 ms per iteration, on top of the
    verify; nothing at k = 0, nothing for a drafter that is not an n-gram, nothing under another engine."""
    import rooflinesim.pricing.speculative as speculative

    def verify_s(scenario, k=4):
        g = price_speculation(scenario, 8, 2048, np.asarray([k]))
        return float(np.asarray(g.verify_step_time_s).ravel()[0])

    s = build_scenario("h100", "llama-3.1-8b", 8, 2048, drafter="ngram", alpha=0.3, k_values=[0, 4],
                       engine="vllm-v0", ngram_match_fraction=0.5)
    assert s.engine.speculative.ngram_ops_per_sequence == 15 and s.engine.launch.kernel_s_eager == 1e-5
    with_lookup = verify_s(s)
    monkeypatch.setattr(speculative, "get_ngram_proposer_s", lambda engine, batch: 0.0)
    monkeypatch.setattr(speculative, "_LAST_LOOP", [None])  # the loop's times were kept for the same scenario
    without = verify_s(s)
    monkeypatch.undo()
    assert with_lookup - without == pytest.approx(8 * 15 * 1e-5, rel=1e-9)
    assert float(np.asarray(price_speculation(s, 8, 2048, np.asarray([0])).step_time_s).ravel()[0]) == \
        pytest.approx(float(np.asarray(price_speculation(s, 8, 2048, np.asarray([0])).target_decode_time_s).ravel()[0]))
    for engine in ENGINES:
        if engine != "vllm-v0":
            other = build_scenario("h100", "llama-3.1-8b", 8, 2048, drafter="ngram", alpha=0.3, k_values=[0, 4],
                                   engine=engine, ngram_match_fraction=0.5)
            assert not other.engine.speculative.ngram_ops_per_sequence
    draft_model = _scenario()  # a draft model under vllm-v0: no lookup
    with_draft = verify_s(draft_model)
    monkeypatch.setattr(speculative, "get_ngram_proposer_s", lambda engine, batch: 1.0)
    assert verify_s(draft_model) == with_draft
