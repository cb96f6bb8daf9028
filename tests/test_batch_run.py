"""A static batch of greedy copies run to completion (pricing/batch_run.py): hand-computed goldens, the steady-step
limit without a prefill, and the prefill pulling the speedup towards 1."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rooflinesim.pricing.batch_run import RunPoint, get_copies_run_speedup, get_run_times_s, round_context


def _linear(ctx: int) -> RunPoint:
    """Step times linear in the priced context: decode 10 ms + 10 us/token, speculative 15 ms + 10 us/token, E = 2,
    prefill 100 us per prompt token."""
    return RunPoint(0.010 + 1e-5 * ctx, 0.015 + 1e-5 * ctx, 2.0, 1e-4 * ctx)


def test_round_context_snaps_to_the_grid_and_never_below_one_step():
    assert [round_context(t) for t in (0, 15, 17, 64, 96.5, 111)] == [32, 32, 32, 64, 96, 96]


def test_one_prompts_run_by_hand():
    """Prompt 64, output 65: prefill at 64 tokens 6.4 ms; the 64 later tokens at the mean context 64 + 32.5 -> 96
    (grid 32): plain 64 x 10.96 ms, speculative 64 / 2 x 15.96 ms."""
    without_s, with_s = get_run_times_s(64, 65, _linear)
    assert without_s == pytest.approx(0.0064 + 64 * 0.01096, rel=1e-12)  # 0.70784 s
    assert with_s == pytest.approx(0.0064 + 32 * 0.01596, rel=1e-12)  # 0.51712 s


def test_per_prompt_throughputs_are_averaged_by_hand():
    """The prompt above (65 tokens: 65 / 0.70784 and 65 / 0.51712 tokens/s) and a prompt of 320 tokens that stops at
    its first token (prefill 32 ms either way: 31.25 tokens/s both): (125.6961 + 31.25) / (91.8286 + 31.25)."""
    speedup = get_copies_run_speedup([(64, 65), (320, 1)], _linear)
    assert speedup == pytest.approx((65 / 0.51712 + 1 / 0.032) / (65 / 0.70784 + 1 / 0.032), rel=1e-12)
    assert speedup == pytest.approx(1.27517, abs=1e-5)


def test_an_empty_run_is_refused():
    with pytest.raises(ValueError, match="at least one"):
        get_copies_run_speedup([], _linear)


lengths = st.lists(st.tuples(st.integers(1, 4000), st.integers(2, 4000)), min_size=1, max_size=8)


@settings(max_examples=60, deadline=None)
@given(lengths, st.floats(1.0, 4.0), st.floats(1e-3, 0.05), st.floats(1.0, 3.0))
def test_without_a_prefill_it_is_the_steady_step_speedup(runs, tokens, decode_s, ratio):
    def price(ctx):
        return RunPoint(decode_s, decode_s * ratio, tokens, 0.0)

    assert get_copies_run_speedup(runs, price) == pytest.approx(tokens / ratio, rel=1e-9)


@settings(max_examples=60, deadline=None)
@given(lengths, st.floats(1.0, 4.0), st.floats(1.0, 3.0), st.floats(1e-6, 1e-3))
def test_a_prefill_pulls_the_speedup_towards_one(runs, tokens, ratio, prefill_per_token_s):
    def price(ctx):
        return RunPoint(0.01, 0.01 * ratio, tokens, prefill_per_token_s * ctx)

    steady = tokens / ratio
    speedup = get_copies_run_speedup(runs, price)
    assert min(1.0, steady) - 1e-9 <= speedup <= max(1.0, steady) + 1e-9
