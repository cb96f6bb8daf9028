"""The serving step prices: the same op model as predict, and the error their bucketing (tabulated grids with
linear interpolation) adds, measured against exact prices at random points."""

import numpy as np
import pytest

from rooflinesim.ops.op_cost import ATTENTION_KINDS
from rooflinesim.scenario.builder import build_scenario
from rooflinesim.serve.pricing import StepPricer, get_context_grid, get_geometric_grid
from rooflinesim.pricing.speculative import price_speculation
from rooflinesim.step import get_step_cost

#: the largest relative error bucketing may add to a step price (README "Serving under load" states the measured one)
MAX_BUCKETING_ERROR = 0.01


def _scenario(hw="h100", model="llama-3.1-70b", draft="llama-3.1-8b", tp=4):
    return build_scenario(hw, model, draft=draft, alpha=0.8, tp=tp, k_values=[0])


def get_bucketing_errors(scenario, n_points=300, seed=0, max_batch=256, max_tokens=8192, max_context=16384, max_k=8):
    """Relative errors of tabulated decode-group prices and chunk-attention prices against exact ones at random
    (batch, context, k) and (context, chunk) points."""
    pricer = StepPricer(scenario, max_batch, max_tokens, max_context, max_k)
    rng = np.random.default_rng(seed)
    batch = rng.integers(1, max_batch + 1, n_points)
    context = rng.uniform(0, max_context, n_points)
    k = rng.integers(0, max_k + 1, n_points)
    exact = np.ravel(price_speculation(scenario, batch, context, k).step_time_s)
    tabulated = np.asarray([pricer.get_decode_step_s(int(b), float(s))[kk] for b, s, kk in zip(batch, context, k)])
    decode_errors = np.abs(tabulated / exact - 1)
    chunk = rng.integers(1, max_tokens + 1, n_points)
    step = get_step_cost(scenario.hardware, scenario.model, scenario.workload, chunk, scenario.timing, context, 1)
    exact_attention = sum(t.time_s for op, t in zip(step.ops, step.expected) if op.kind in ATTENTION_KINDS)
    tabulated_attention = np.asarray([pricer.target.get_chunk_attention_s(float(s), float(c))
                                      for s, c in zip(context, chunk)])
    # a chunk's attention is a small part of its step: its error is stated relative to the chunk's step time
    chunk_errors = np.abs(tabulated_attention - exact_attention) / step.step_time_s
    return decode_errors, chunk_errors


@pytest.mark.parametrize("hw,model,draft,tp", [("h100", "llama-3.1-70b", "llama-3.1-8b", 4),
                                                ("a100", "llama-3.1-8b", "llama-3.2-1b", 1)])
# the bucketing error of the tables over smooth prices (engine "ideal"): a real engine's CUDA-graph capture edge is a
# step in price that linear interpolation between grid points smears (2.3 % at most here under vllm-v1)
@pytest.mark.usefixtures("ideal_engine")
def test_bucketing_error_is_small(hw, model, draft, tp):
    decode_errors, chunk_errors = get_bucketing_errors(_scenario(hw, model, draft, tp))
    print(f"\n{model} on {hw}: decode-group bucketing error max {decode_errors.max():.3%}, mean "
          f"{decode_errors.mean():.3%}; chunk attention max {chunk_errors.max():.3%} of the chunk's step")
    assert decode_errors.max() < MAX_BUCKETING_ERROR
    assert chunk_errors.max() < MAX_BUCKETING_ERROR


def test_grid_points_are_exact():
    scenario = _scenario()
    pricer = StepPricer(scenario, 64, 2048, 4096, 4)
    for b in (1, 7, 32, int(pricer.batch_grid[-1])):
        for s in (0, int(pricer.context_grid[5]), 4096):
            exact = np.ravel(price_speculation(scenario, b, s, np.arange(5)).step_time_s)
            np.testing.assert_allclose(pricer.get_decode_step_s(b, s), exact, rtol=1e-12)


def test_a_decode_only_step_is_predicts_speculative_step():
    scenario = _scenario()
    pricer = StepPricer(scenario, 64, 2048, 4096, 4)
    exact = float(np.ravel(price_speculation(scenario, 16, 2048, 3).step_time_s)[0])
    assert pricer.get_step_time_s(16, 2048, 3, [], [], 0, True) == pytest.approx(exact, rel=1e-12)


def test_a_lone_prefill_chunk_is_the_op_models_prefill_step():
    """One chunk of c tokens on S cached, nothing else: body(c) + lm_head(1 token) + attention(S, c) is the op
    model's step with logits for the last token only (up to the chunk-attention interpolation)."""
    scenario = _scenario()
    pricer = StepPricer(scenario, 64, 4096, 8192, 4)
    for s, c in ((0, 4096), (3000, 1000), (512, 17)):
        exact = get_step_cost(scenario.hardware, scenario.model, scenario.workload, c, scenario.timing, s, 1,
                                  logits_for_all_tokens=False).step_time_s
        priced = pricer.get_step_time_s(0, 0.0, 0, [s], [c], 1, False)
        assert priced == pytest.approx(float(exact), rel=MAX_BUCKETING_ERROR)


def test_prefill_chunks_add_their_marginal_cost_to_decodes():
    """Weights are read once per step: adding a chunk to a memory-bound decode batch costs far less than a lone
    prefill of the chunk, and never less than nothing; a deployed draft model prefills the chunk too."""
    scenario = _scenario()
    pricer = StepPricer(scenario, 64, 4096, 8192, 4)
    decode = pricer.get_step_time_s(32, 2000, 2, [], [], 0, True)
    lone = pricer.get_step_time_s(0, 0, 0, [0], [64], 1, False)
    mixed = pricer.get_step_time_s(32, 2000, 2, [0], [64], 1, False)
    with_draft = pricer.get_step_time_s(32, 2000, 2, [0], [64], 1, True)
    assert decode < mixed < decode + lone
    assert with_draft > mixed


def test_grids():
    assert get_geometric_grid(32, 32).tolist() == list(range(1, 33))
    grid = get_geometric_grid(1000, 32)
    assert grid[0] == 1 and grid[-1] == 1000 and np.all(np.diff(grid) > 0)
    sparse = grid[grid >= 32]
    assert np.all(sparse[1:] / sparse[:-1] <= 2 ** (1 / 8) + 0.02)  # (rounded to integers)
    context = get_context_grid(100_000)
    assert context[0] == 0 and context[-1] == 100_000 and np.all(np.diff(context) > 0)
