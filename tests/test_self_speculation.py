"""Self-speculation (`--drafter self`): the target drafts with a bounded KV cache (StreamingLLM / SnapKV drafts as in
MagicDec and TriForce) or a share of its layers (layer skip); a draft model past its own maximum context."""

from __future__ import annotations

import numpy as np
import pytest

from rooflinesim.errors import InputError
from rooflinesim.pricing.speculative import analyse_speculation, price_speculation
from rooflinesim.scenario.builder import build_scenario
from rooflinesim.step import get_step_cost


def _self(batch, ctx="32k", **options):
    options.setdefault("draft_kv_budget", 512)
    return build_scenario("h200", "llama-3.1-8b", batch, ctx, drafter="self", alpha=0.8, **options)


def test_speedup_grows_with_batch_at_long_context():
    # MagicDec's regime: at 32k the KV read dominates the verify as the batch grows, while the draft reads 512
    speedups = [analyse_speculation(_self(b, engine="ideal")).best_speedup for b in (1, 2, 4, 8, 16)]
    assert all(b > a for a, b in zip(speedups, speedups[1:]))
    assert speedups[-1] > 1.4
    assert _self(16).get_memory_fit(16, 32768, 4).fits_in_memory
    # under the default engine the draft pays the engine's per-iteration costs too: it pays from a larger batch on,
    # and from there the speedup grows with the batch as well
    engine = [analyse_speculation(_self(b)).best_speedup for b in (1, 2, 4, 8, 16, 32)]
    assert all(b >= a for a, b in zip(engine, engine[1:]))
    paying = [x for x in engine if x > 1.0]
    assert len(paying) >= 2 and all(b > a for a, b in zip(paying, paying[1:])) and engine[-1] > 1.4


def test_memory_counts_the_weights_once():
    scenario = _self(8)
    plain = build_scenario("h200", "llama-3.1-8b", 8, "32k", speculative=False)
    fit, base = scenario.get_memory_fit(8, 32768, 4), plain.get_memory_fit(8, 32768, 4)
    assert fit.weight_bytes == base.weight_bytes
    # the draft cache: 512 tokens x 32 layers x 8 KV heads x 128 x 2 (K, V) x 2 bytes per sequence
    assert float(fit.kv_cache_bytes - base.kv_cache_bytes) == pytest.approx(8 * 512 * 32 * 8 * 128 * 2 * 2)


def test_draft_step_is_the_target_over_the_budget():
    scenario = _self(4, engine="ideal")  # bare kernels: the engine's per-iteration costs are tested in test_engines
    grid = price_speculation(scenario, 4, 32768, 3)
    step = get_step_cost(scenario.hardware, scenario.model, scenario.workload, 1, scenario.timing, 512, 4,
                             logits_for_all_tokens=False)
    assert float(np.ravel(grid.draft_warm_step_time_s)[0]) == pytest.approx(float(step.step_time_s), rel=1e-12)
    # below the budget the draft reads the whole context: no cheaper than a target decode step there
    short = price_speculation(_self(4, ctx=256, engine="ideal"), 4, 256, 3)
    assert float(np.ravel(short.draft_warm_step_time_s)[0]) == pytest.approx(
        float(np.ravel(short.target_decode_time_s)[0]), rel=1e-9)


def test_layer_skip_runs_a_share_of_the_layers():
    half = price_speculation(_self(1, ctx=4096, draft_kv_budget=None, draft_layer_fraction=0.5), 1, 4096, 2)
    full = price_speculation(_self(1, ctx=4096), 1, 4096, 2)
    target = float(np.ravel(half.target_decode_time_s)[0])
    assert 0.4 * target < float(np.ravel(half.draft_warm_step_time_s)[0]) < 0.7 * target
    assert _self(1, draft_kv_budget=None, draft_layer_fraction=0.5).drafter.name == "self(0.5 of layers)"
    assert full.draft_warm_step_time_s.size


def test_self_drafter_input_errors():
    with pytest.raises(InputError, match="--draft-kv-budget N"):
        _self(1, draft_kv_budget=None)
    with pytest.raises(InputError, match="in \\(0, 1\\]"):
        _self(1, draft_layer_fraction=1.5)
    with pytest.raises(InputError, match="belong to --drafter self"):
        build_scenario("h200", "llama-3.1-8b", 1, 4096, drafter="eagle", draft_kv_budget=512)
    with pytest.raises(InputError, match="positive integer"):
        _self(1, draft_kv_budget="lots")


def test_draft_past_its_max_context_is_refused_like_the_target():
    with pytest.raises(InputError, match="exceeds draft Llama-2-7B's max context 4k"):
        build_scenario("a100", "mistral-7b", 1, "16k", draft="llama-2-7b")
    scenario = build_scenario("a100", "mistral-7b", 1, "16k", draft="llama-2-7b", allow_long_context=True)
    assert any("exceeds draft Llama-2-7B's max context" in w for w in scenario.warnings)
    build_scenario("a100", "mistral-7b", 1, "4k", draft="llama-2-7b")  # within both: silent


def test_serve_holds_the_draft_cache_per_sequence_not_per_token():
    from rooflinesim.serve import ServeConfig, generate_requests, LengthDistribution, simulate
    from rooflinesim.serve.engine import get_kv_capacity_blocks
    from rooflinesim.serve.policies import parse_policy

    scenario = _self(1, ctx="8k")
    config = ServeConfig(max_num_seqs=64)
    spec, _ = get_kv_capacity_blocks(scenario, parse_policy("fixed:3"), config)
    free_draft = build_scenario("h200", "llama-3.1-8b", 1, "8k", drafter="ngram", alpha=0.8)  # no draft memory
    off, per_token = get_kv_capacity_blocks(free_draft, parse_policy("fixed:3"), config)
    # 64 sequences x 512 tokens of draft cache (the draft runs all 32 layers: the target's bytes per token)
    assert (off - spec) * 16 * per_token == pytest.approx(64 * 512 * per_token, rel=0.01)
    requests = generate_requests(40, 1.0, LengthDistribution.parse("4096", "p"), LengthDistribution.parse("64", "o"))
    result = simulate(scenario, requests, "fixed:3", config, concurrency=8)
    assert result.get_summary()["preemptions"] == 0


def test_medusa_tree_counts_one_head_per_depth():
    tree = "[[0],[1],[2],[0,0],[0,1],[1,0],[0,0,0]]"
    scenario = build_scenario("h100", "llama-3.1-8b", 1, 2048, drafter="medusa", tree=tree, alpha=0.7)
    chain = build_scenario("h100", "llama-3.1-8b", 1, 2048, drafter="medusa", alpha=0.7, k=3)
    assert scenario.get_memory_fit(1, 2048, 7).weight_bytes == chain.get_memory_fit(1, 2048, 3).weight_bytes
