"""Draft trees: the exact expected accepted length against Monte Carlo, the chain as a special case, SGLang's tree
shapes, and the tree priced in a speculative step (verify width, draft forwards at top-k width, the tree mask)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rooflinesim.acceptance.trees import (
    DraftTree, TreeShape, build_dynamic_tree, expected_accepted_length, fit_alpha_to_accept_length, get_rank_rates,
    parse_tree, sample_accepted_lengths,
)
from rooflinesim.errors import InputError
from rooflinesim.pricing.speculative import analyse_speculation, price_speculation
from rooflinesim.scenario.builder import build_scenario

#: Monte Carlo trials per property example; the tolerance is 5 standard errors of the sample mean (an accepted
#: length is at most the tree's depth, so its standard deviation is at most depth / 2), a false failure rate ~1e-6
TRIALS = 40_000


@st.composite
def random_trees(draw):
    """A random tree of up to 30 nodes (each node hangs under an earlier one or the root, at an unused rank) and a
    random rank-rate matrix with rows summing to at most 1."""
    n = draw(st.integers(1, 30))
    parents, ranks, used = [], [], {}
    for i in range(n):
        parent = draw(st.integers(-1, i - 1))
        rank = used.get(parent, 0)
        used[parent] = rank + 1
        parents.append(parent)
        ranks.append(rank)
    tree = DraftTree(tuple(parents), tuple(ranks))
    rows = []
    for _ in range(tree.depth):
        weights = draw(st.lists(st.floats(0.0, 1.0), min_size=tree.max_rank + 2, max_size=tree.max_rank + 2))
        total = sum(weights) or 1.0
        rows.append([w / total for w in weights[:-1]])  # the last weight is "no candidate matched"
    return tree, np.asarray(rows)


@settings(max_examples=40, deadline=None)
@given(random_trees(), st.integers(0, 2**32 - 1))
def test_tree_expected_length_matches_monte_carlo(tree_and_rates, seed):
    tree, rates = tree_and_rates
    exact = expected_accepted_length(tree, rates)
    accepted = sample_accepted_lengths(tree, rates, np.random.default_rng(seed).random((TRIALS, tree.depth)))
    tolerance = 5 * (tree.depth / 2) / np.sqrt(TRIALS)
    assert abs(1 + accepted.mean() - exact) <= tolerance
    assert 1.0 <= exact <= 1 + tree.depth


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=12))
def test_chain_is_the_special_case(rates):
    rates = np.asarray(rates)
    chain = DraftTree.chain(rates.size)
    expected = 1 + np.cumprod(rates).sum()  # 1 + a1 + a1 a2 + ...
    assert expected_accepted_length(chain, get_rank_rates(rates, 0)) == pytest.approx(expected, rel=1e-12)


def test_iid_chain_is_leviathan():
    shape = parse_tree("5,1,6")
    assert float(shape.expected_tokens(5, get_rank_rates(np.full(5, 0.8), 0))) == pytest.approx(
        sum(0.8 ** i for i in range(6)))


def test_hand_computed_tree():
    # root -> {A (rank 0), B (rank 1)}, A -> {C (rank 0)}; p = a (1 - a)^r with a = 0.5 at both depths
    tree = DraftTree.from_paths([[0], [1], [0, 0]])
    rates = get_rank_rates([0.5, 0.5], 1)
    # P(A) = 0.5, P(B) = 0.25, P(C) = 0.25: E = 2.0
    assert expected_accepted_length(tree, rates) == pytest.approx(2.0)


def test_dynamic_tree_shape_follows_sglang():
    shape = parse_tree("6,10,60")
    assert (shape.tree_tokens, shape.draft_widths, shape.max_tree_tokens) == (59, (1,) + (10,) * 5, 510)
    tree = shape.get_tree(get_rank_rates(np.full(6, 0.7), 9))
    assert tree.size == 59 and tree.depth <= 6
    # the best nodes by P(accepted): the chain of top-1 candidates is always kept
    assert [p for p in tree.to_paths() if set(p) == {0}] == [[0] * d for d in range(1, 7)]
    # more tree tokens never lower E; a chain's E is reached with topk = 1
    e = shape.expected_tokens(np.arange(60), get_rank_rates(np.full(6, 0.7), 9))
    assert np.all(np.diff(e) >= 0)
    with pytest.raises(ValueError, match="at most"):
        parse_tree("2,2,8")  # 2 + 4 = 6 candidates at most


def test_fit_recovers_the_rate():
    shape = parse_tree("5,4,20")
    rates = get_rank_rates(np.full(5, 0.62), 3)
    length = float(shape.expected_tokens(19, rates))
    assert fit_alpha_to_accept_length(shape, length) == pytest.approx(0.62, abs=1e-6)


def test_static_tree_from_paths_refuses_orphans():
    with pytest.raises(ValueError, match="no parent"):
        DraftTree.from_paths([[0], [1, 0]])
    shape = parse_tree("[[0],[1],[0,0],[0,1],[1,0],[0,0,0]]")
    assert (shape.tree_tokens, shape.draft_widths) == (6, (1, 2, 1))


def _tree_scenario(tree, batch, drafter="eagle", alpha=0.7, ctx=2048):
    return build_scenario("h100", "llama-3.1-8b", batch, ctx, drafter=drafter, alpha=alpha, tree=tree)


def test_tree_verify_width_and_tree_mask():
    tree = _tree_scenario("4,4,16", 8)
    chain = build_scenario("h100", "llama-3.1-8b", 8, 2048, drafter="eagle", alpha=0.7, k=15)
    t, c = price_speculation(tree), price_speculation(chain)
    k15 = int(np.flatnonzero(chain.k_values == 15)[0])
    # the same verify width (16 tokens) with the tree mask's extra attention on top
    assert float(np.ravel(t.verify_step_time_s)[-1]) > float(np.ravel(c.verify_step_time_s)[k15])
    # the draft: 4 forwards (1, 4, 4, 4 tokens wide) instead of 15 single-token ones
    assert float(np.ravel(t.step_time_s)[-1]) < float(np.ravel(c.step_time_s)[k15])


def test_topk_one_tree_prices_as_the_chain():
    tree = analyse_speculation(_tree_scenario("3,1,4", 4))
    chain = analyse_speculation(build_scenario("h100", "llama-3.1-8b", 4, 2048, drafter="eagle", alpha=0.7, k=3))
    assert tree.step_time_s == pytest.approx(chain.step_time_s, rel=1e-12)
    assert tree.expected_tokens == pytest.approx(chain.expected_tokens, rel=1e-12)


def test_wide_tree_pays_more_at_batch_1_and_less_at_high_batch():
    wide, narrow = "6,10,60", "3,1,4"
    at = {(t, b): analyse_speculation(_tree_scenario(t, b)) for t in (wide, narrow) for b in (1, 64)}
    assert at[(wide, 1)].expected_tokens > at[(narrow, 1)].expected_tokens
    assert at[(wide, 1)].speedup > at[(narrow, 1)].speedup > 1
    assert at[(wide, 64)].speedup < at[(narrow, 64)].speedup


def test_tree_acceptance_from_a_tree_preset_is_fitted():
    scenario = build_scenario("h100", "llama-3.1-8b", 1, 2048, drafter="eagle", tree="5,8,26",
                              acceptance="eagle-vicuna-7b-specbench-tree5-t0")
    assert scenario.acceptance.alphas is not None
    assert any("fitted on the priced tree" in w for w in scenario.warnings)
    assert not any("not priced" in w for w in scenario.warnings)
    result = analyse_speculation(scenario)
    assert result.expected_tokens == pytest.approx(3.61, abs=1e-6)


def test_tree_input_errors():
    with pytest.raises(InputError, match="steps,topk"):
        _tree_scenario("6,10", 1)
    with pytest.raises(InputError, match="per-depth"):
        build_scenario("h100", "llama-3.1-8b", 1, 2048, drafter="eagle", tree="4,2,6", alpha_per_position="0.8,0.7")
    with pytest.raises(InputError, match="static tree"):
        _tree_scenario("4,2,6", 1, drafter="medusa")
    with pytest.raises(InputError, match="extra draft pass"):
        build_scenario("h100", "llama-3.1-8b", 1, 2048, drafter="model", tree="4,2,6", extra_draft_pass=True)
