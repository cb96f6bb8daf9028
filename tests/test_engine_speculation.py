"""The speculative terms of engine profiles (engines/*.yaml `speculative`, pricing/draft_extend.py): the draft-extend
pass in place of the first draft forward, its rows and logits, k = 0 as plain decoding and monotonicity under every
engine, the verify graph of a configured SGLang tree, and the EAGLE-3 paper's SGLang H100 batch table
(docs/engines.md)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import brentq

from rooflinesim.ops.draft_heads import get_head_ops
from rooflinesim.pricing.draft_extend import get_draft_extend_time_s, uses_draft_extend
from rooflinesim.pricing.speculative import get_draft_step_time_s, price_speculation
from rooflinesim.scenario.builder import build_scenario
from rooflinesim.specs.registry import list_engines
from rooflinesim.timing.engine import with_role

ENGINES = [e.short_name for e in list_engines()]
H, V = 4096, 128256  # Llama-3.1-8B


def _scenario(engine, batch=8, k=3, drafter="eagle", **extra):
    return build_scenario("h100", "llama-3.1-8b", batch, 512, drafter=drafter, alpha=0.6, k_values=[0, k],
                          engine=engine, **extra)


def test_draft_extend_runs_the_verified_rows_with_logits_for_the_last_only():
    """Hand-computed: a forward over q = 4 rows of 8 sequences runs the layer's and fc's GEMMs on 32 rows and the
    final norm and lm_head on 8 (SGLang CaptureHiddenMode.LAST, vLLM last_token_indices)."""
    s = _scenario("sglang")
    layer, rest = get_head_ops("eagle", s.model, s.workload, 8, 512, None, True, new_tokens=4)
    ops = {op.name: op for op in layer + rest}
    assert ops["q_proj"].flops == pytest.approx(2 * 32 * H * H, rel=1e-12)
    assert ops["k_proj"].flops == pytest.approx(2 * 32 * H * 1024, rel=1e-12)
    assert ops["eagle_fc"].flops == pytest.approx(2 * 32 * 2 * H * H, rel=1e-12)
    assert ops["lm_head"].flops == pytest.approx(2 * 8 * H * V, rel=1e-12)
    # one draft step is the same forward at q = 1: every GEMM on 8 rows
    layer1, rest1 = get_head_ops("eagle", s.model, s.workload, 8, 512, None, True)
    assert {op.name: op for op in rest1}["lm_head"].flops == ops["lm_head"].flops
    assert {op.name: op for op in layer1}["q_proj"].flops * 4 == pytest.approx(ops["q_proj"].flops, rel=1e-12)


@pytest.mark.parametrize("engine", ["sglang", "vllm-v1", "trtllm"])
def test_draft_extend_takes_the_place_of_the_first_draft_forward(engine):
    """k drafts = one extend forward over k + 1 rows + (k - 1) single-token forwards (SGLang eagle_worker.py: 'we get
    1 token from draft prefill and (#spec steps - 1) tokens here'; vLLM EagleProposer.propose)."""
    s = _scenario(engine)
    assert uses_draft_extend(s)
    inner = with_role(s.timing, "inner")
    g = price_speculation(s, 8, 512, np.asarray([3]))
    extend = float(np.asarray(get_draft_extend_time_s(s, inner, 8, 512, 4)).reshape(-1)[0])
    warm = float(np.asarray(get_draft_step_time_s(s, inner, 8, 512)).reshape(-1)[0])
    assert float(np.asarray(g.draft_cold_step_time_s).reshape(-1)[0]) == pytest.approx(extend, rel=1e-12)
    assert 3 * float(np.asarray(g.draft_step_time_s).reshape(-1)[0]) == pytest.approx(extend + 2 * warm, rel=1e-12)
    # the extend costs at least a one-row forward and less than the k + 1 separate forwards it replaces
    assert warm <= extend < 4 * warm


def test_ideal_and_drafters_without_features_run_no_draft_extend():
    assert not uses_draft_extend(_scenario("ideal"))
    assert not uses_draft_extend(_scenario("gpt-fast"))  # no extend pass in that profile
    assert not uses_draft_extend(build_scenario("h100", "llama-3.1-8b", 8, 512, drafter="ngram", alpha=0.5,
                                                k_values=[0, 3], engine="sglang"))
    assert not uses_draft_extend(build_scenario("h100", "llama-3.1-8b", 8, 512, draft="llama-3.2-1b", alpha=0.5,
                                                k_values=[0, 3], engine="vllm-v1"))


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("drafter", [{"drafter": "eagle"}, {"drafter": "eagle3"}, {"drafter": "ngram"},
                                     {"draft": "llama-3.2-1b"}])
def test_k0_is_plain_decoding_under_every_engine(engine, drafter):
    s = build_scenario("h100", "llama-3.1-8b", [1, 16, 128], 512, alpha=0.6, k_values=[0, 3], engine=engine,
                       **drafter)
    g = price_speculation(s, s.batch[:, None], 512, np.asarray([0]))
    np.testing.assert_array_equal(g.speedup, 1.0)
    np.testing.assert_allclose(g.step_time_s, g.target_decode_time_s, rtol=0, atol=0)


@pytest.mark.parametrize("engine", ENGINES)
def test_speculative_step_grows_with_batch_and_the_extend_with_its_rows(engine):
    batches = np.asarray([1, 2, 4, 8, 16, 32, 64, 128, 256])
    for drafter in ("eagle", "eagle3"):
        s = build_scenario("h100", "llama-3.1-8b", batches, 512, drafter=drafter, alpha=0.6, k_values=[0, 3],
                           engine=engine)
        step = np.asarray(price_speculation(s, batches[:, None], 512, np.asarray([3])).step_time_s).ravel()
        assert np.all(np.diff(step) >= -1e-12)
    s = _scenario(engine)
    rows = np.arange(1, 9)
    extend = np.asarray(get_draft_extend_time_s(s, with_role(s.timing, "inner"), 8, 512, rows)).ravel()
    assert np.all(np.diff(extend) >= -1e-12)


def test_a_faster_gpu_prices_a_speculative_step_no_slower_under_every_real_engine():
    for engine in ENGINES:
        if engine == "ideal":  # keeps each spec's own fitted per-kernel overhead (docs/engines.md)
            continue
        for drafter in ({"drafter": "eagle"}, {"drafter": "eagle3"}, {"draft": "llama-3.2-1b"}):
            steps = []
            for hw in ("h100", "a100"):
                s = build_scenario(hw, "llama-3.1-8b", [1, 8, 64], 512, alpha=0.6, k_values=[0, 3], engine=engine,
                                   **drafter)
                steps.append(np.asarray(price_speculation(s, s.batch[:, None], 512, np.asarray([3])).step_time_s))
            assert np.all(steps[0] <= steps[1] * (1 + 1e-9)), (engine, drafter)


def test_sglang_tree_extend_follows_its_depth_and_its_verify_stays_in_a_graph():
    """SGLang's extend runs speculative_num_steps + 1 rows whatever the tree's width, and its target verify graph is
    captured at num_tokens_per_bs = speculative_num_draft_tokens (a 21-token tree must not run eager)."""
    chain = _scenario("sglang", k=3)
    tree = _scenario("sglang", k=21, tree="3,4,22")
    cold = [float(np.asarray(price_speculation(s, 8, 512, np.asarray([k])).draft_cold_step_time_s).reshape(-1)[0])
            for s, k in ((chain, 3), (tree, 21))]
    assert cold[0] == pytest.approx(cold[1], rel=1e-12)
    launch = tree.engine.launch
    assert float(tree.timing.get_kernel_s(16, 22)) == launch.kernel_s_graph
    assert float(tree.timing.get_kernel_s(launch.graph_max_batch + 1, 22)) == launch.kernel_s_eager


# --- the EAGLE-3 paper's SGLang H100 batch table (published rows; docs/engines.md) -----------------------------------

BATCHES = [1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64]
# Table 3 of arXiv 2503.01840v3 (section 4.3: one H100, SGLang, MT-Bench, "did not use the tree structure, the chain
# length was set to 3"), speedup over SGLang without speculation by batch
TABLE3_EAGLE3 = {2: 1.81, 4: 1.82, 8: 1.62, 16: 1.48, 24: 1.39, 32: 1.32, 48: 1.38, 56: 1.34, 64: 1.38}


def _sglang_curve(alpha, drafter="eagle", k=3, tree=None):
    extra = {} if tree is None else {"tree": tree}
    s = build_scenario("h100", "llama-3.1-8b", BATCHES, 512, drafter=drafter, alpha=alpha, k_values=[0, k],
                       engine="sglang", **extra)
    grid = price_speculation(s, s.batch[:, None], 512, np.asarray([k]))
    return grid.speedup.ravel(), 1.0 / float(grid.target_decode_time_s.ravel()[0])


def _fitted_on_batch2(target, **options):
    alpha = brentq(lambda a: _sglang_curve(a, **options)[0][1] - target, 0.05, 0.98)
    return _sglang_curve(alpha, **options)


def test_eagle3_paper_sglang_table_eagle3_and_baseline_held_out():
    """EAGLE-3 (its own head: one layer, 3-feature fc, 32k draft vocabulary), chain of 3, Llama-3.1-8B bf16 on one
    H100 under SGLang: acceptance fitted on the batch-2 row (1.81x) alone; every other batch of Table 3 (issue 29:
    within 0.15x at every batch; priced 0.14x off at worst, batch 24 and 32) and the no-speculation batch-1 baseline
    (158.34 tok/s, the paper's Table 4 and the SGLang docs) within 10 %. No engine number was fitted on these rows."""
    speedup, baseline_tokens_per_s = _fitted_on_batch2(TABLE3_EAGLE3[2], drafter="eagle3")
    for batch, published in TABLE3_EAGLE3.items():
        assert speedup[BATCHES.index(batch)] == pytest.approx(published, abs=0.15), batch
    # the gain shrinks with batch: the published trend (Table 3 itself wobbles by a few hundredths, 1.32 -> 1.38x
    # from batch 32 to 48)
    assert np.all(np.diff(speedup[1:]) < 0)
    assert baseline_tokens_per_s == pytest.approx(158.3, rel=0.10)


def test_eagle1_crossing_under_sglangs_default_tree_not_as_a_chain():
    """EAGLE-1 in the same table: 1.40x at batch 2, 0.93x at batch 24. The paper ran it as a chain of 3 (section 4.3:
    "did not use the tree structure, the chain length was set to 3"), and priced so it does not cross by batch 24: no
    engine cost that also keeps EAGLE-3 within 0.15x of Table 3 makes it, the sourced head differences (its 128k
    lm_head, the draft softmax / top-k over it) included (docs/engines.md). A regression guard on that known gap, not
    a target. For contrast, under SGLang's documented default tree (speculative_num_steps 5, eagle_topk 4,
    num_draft_tokens 8), which the paper did not run, it crosses between batch 16 and 36."""
    chain, _ = _fitted_on_batch2(1.40, drafter="eagle")
    assert np.all(np.diff(chain[1:]) < 0) and chain[BATCHES.index(24)] > 1.0
    tree, _ = _fitted_on_batch2(1.40, drafter="eagle", k=7, tree="5,4,8")
    below = [b for b, x in zip(BATCHES, tree) if x < 1.0]
    assert below and 16 <= below[0] <= 36
    assert all(x >= 1.0 for b, x in zip(BATCHES, tree) if b < below[0])


# --- n-gram drafting where only the sequences with a match draft (vLLM NgramProposer) --------------------------------


def _ngram(engine="ideal", fraction=None, k=4, batch=(1, 16, 128)):
    s = build_scenario("h100", "llama-3.1-8b", list(batch), 512, drafter="ngram", alpha=0.3, k_values=[0, k],
                       engine=engine, ngram_match_fraction=fraction)
    return price_speculation(s, s.batch[:, None], 512, np.asarray([k]))


def test_ngram_verify_width_is_one_plus_k_times_the_match_fraction():
    """Hand-computed width: k = 4 with half the sequences matching verifies 1 + 4 x 0.5 = 3 tokens per sequence, the
    same verify as a chain of 2 that every sequence drafts (ideal: no k-dependent engine terms)."""
    half = _ngram(fraction=0.5, k=4)
    two = _ngram(fraction=None, k=2)
    np.testing.assert_allclose(half.verify_step_time_s, two.verify_step_time_s, rtol=1e-12)
    np.testing.assert_allclose(_ngram(fraction=1.0).step_time_s, _ngram().step_time_s, rtol=0)


@pytest.mark.parametrize("engine", ENGINES)
def test_fewer_matches_never_price_the_verify_dearer(engine):
    steps = [np.asarray(_ngram(engine, m).verify_step_time_s).ravel() for m in (1.0, 0.6, 0.2)]
    assert np.all(steps[1] <= steps[0] * (1 + 1e-12)) and np.all(steps[2] <= steps[1] * (1 + 1e-12))
    np.testing.assert_array_equal(_ngram(engine, 0.3, k=0).speedup, 1.0)


@pytest.mark.parametrize("options, message", [
    ({"drafter": "eagle", "ngram_match_fraction": 0.5}, "belongs to --drafter ngram"),
    ({"drafter": "ngram", "ngram_match_fraction": 0.0}, r"in \(0, 1\]"),
    ({"drafter": "ngram", "ngram_match_fraction": 1.5}, r"in \(0, 1\]"),
    ({"drafter": "ngram", "ngram_match_fraction": True}, r"in \(0, 1\]"),
    ({"drafter": "ngram", "ngram_match_fraction": 0.5, "tree": "3,2,6"}, "speculative chain"),
    ({"speculative": False, "ngram_match_fraction": 0.5}, "speculative chain"),
])
def test_bad_ngram_match_fractions_are_refused(options, message):
    from rooflinesim.errors import InputError

    with pytest.raises(InputError, match=message):
        build_scenario("h100", "llama-3.1-8b", 8, 512, alpha=0.5, **options)


def test_vllm_v1_eagle3_proposal_matches_specdecode_benchs_timing_fit():
    """Regression: vLLM v0.10 on one H100 takes 2.140 ms for an EAGLE-3 proposal of k = 3 at batch 1 and context 600
    (SpecDecode-Bench/simulator predictor.py @260263c, Llama8BH100: draft_c_fixed 2.13526 ms + 8.414e-7 s x 4 verified
    tokens + 2.3777e-9 s x 600 KV tokens = 2.13526 + 0.00337 + 0.00143 ms). The proposal as priced is the head forwards
    (step - verify) plus the engine's per-iteration proposer work, which sits on the verify. Reading that fit against
    EAGLE-1's heads (0.34 ms left) priced it at 1.34 ms."""
    s = build_scenario("h100", "llama-3.1-8b", 1, 600, drafter="eagle3", alpha=0.6, k=3, engine="vllm-v1")
    g = price_speculation(s, 1, 600, np.asarray([3]))
    heads = float(np.asarray(g.step_time_s - g.verify_step_time_s).reshape(-1)[0])
    proposal = heads + s.engine.speculative.per_iteration_s
    assert proposal == pytest.approx(2.13526175e-3 + 8.41429603e-7 * 4 + 2.37768493e-9 * 600, rel=0.01)
