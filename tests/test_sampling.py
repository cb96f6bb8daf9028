"""The sampler and acceptance rule: priced as ops when the workload asks (`sampling`), measured by calibration with
the same torch functions the loops call, and the rule itself exact (Monte Carlo against the target distribution)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from rooflinesim.ops.sections import get_acceptance_rule_ops
from rooflinesim.specs.workload import Workload
from rooflinesim.ops.step_ops import get_step_ops
from rooflinesim.specs.registry import load_model
from rooflinesim.scenario.builder import build_scenario
from rooflinesim.errors import InputError
from rooflinesim.pricing.speculative import price_speculation


def test_sampler_op_bytes_by_hand():
    # Llama-2-7B, vocab 32000, batch 2, a verify of 5 positions: logits read + probabilities written for 10 rows,
    # one row per sequence read to draw: 4 B x 32000 x (2 x 10 + 2) = 2,816,000 B
    model = load_model("llama-2-7b")
    ops = get_step_ops(model, Workload(batch=2, context_tokens=100, sampling=True), 5)
    assert ops[-1].name == "sample"
    assert float(ops[-1].count * ops[-1].bytes) == pytest.approx(4 * 32000 * 22)
    plain = get_step_ops(model, Workload(batch=2, context_tokens=100), 5)
    assert [op.name for op in plain] == [op.name for op in ops[:-1]]
    rule = get_acceptance_rule_ops(model, 3, 4)[0]  # p and q rows read, residual written and read: 4 x 4 B x V x B
    assert float(rule.bytes) == pytest.approx(16 * 32000 * 3)
    assert float(get_acceptance_rule_ops(model, 3, 0)[0].bytes) == 0.0


def test_sampling_prices_the_sampler_and_the_rule_only_when_asked():
    plain = build_scenario("a100", "llama-3.1-8b", 8, 4096, draft="llama-3.2-1b", alpha=0.8)
    sampled = build_scenario("a100", "llama-3.1-8b", 8, 4096, draft="llama-3.2-1b", alpha=0.8, sampling=True)
    a, b = price_speculation(plain, k=np.arange(6)), price_speculation(sampled, k=np.arange(6))
    assert np.all(b.target_decode_time_s > a.target_decode_time_s)
    assert np.all(b.draft_step_time_s > a.draft_step_time_s)
    # the verify gains the sampler over k + 1 rows and the rule on top of what plain decoding gains
    gain_verify = (b.verify_step_time_s - a.verify_step_time_s)[1:]
    gain_decode = float((b.target_decode_time_s - a.target_decode_time_s).reshape(-1)[0])
    assert np.all(gain_verify > gain_decode)
    assert float(b.speedup.reshape(-1)[0]) == 1.0  # k = 0 is plain decoding, sampler included on both sides


@settings(max_examples=25, deadline=None)
@given(batch=st.sampled_from([1, 4, 32, 256]), k=st.integers(0, 8), alpha=st.floats(0.0, 1.0))
def test_with_sampling_speedup_stays_within_its_bounds(batch, k, alpha):
    scenario = build_scenario("h100", "llama-3.1-8b", batch, 2048, draft="llama-3.2-1b", alpha=alpha, sampling=True,
                              draft_first_step_tokens=2)
    grid = price_speculation(scenario, k=[k])
    speedup = float(grid.speedup.reshape(-1)[0])
    assert 0.0 < speedup <= k + 1 + 1e-12
    if k == 0:
        assert speedup == 1.0


def test_two_token_first_draft_step_costs_at_least_one_token():
    one = price_speculation(build_scenario("l4", "llama-3.1-8b", 16, 1024, draft="llama-3.2-1b", alpha=0.7), k=[4])
    two = price_speculation(build_scenario("l4", "llama-3.1-8b", 16, 1024, draft="llama-3.2-1b", alpha=0.7,
                                           draft_first_step_tokens=2), k=[4])
    first = lambda grid, name: float(np.asarray(getattr(grid, name)).reshape(-1)[0])
    assert first(two, "draft_cold_step_time_s") > first(one, "draft_cold_step_time_s")
    assert first(two, "draft_warm_step_time_s") == first(one, "draft_warm_step_time_s")


@pytest.mark.parametrize("options", [dict(draft_first_step_tokens=3), dict(draft_first_step_tokens=True),
                                     dict(draft_first_step_tokens=2, extra_draft_pass=True),
                                     dict(draft_first_step_tokens=2, drafter="eagle", draft=None),
                                     dict(sampling="yes")])
def test_bad_catch_up_and_sampling_options_are_input_errors(options):
    options = {"draft": "llama-3.2-1b", **options}
    with pytest.raises(InputError):
        build_scenario("a100", "llama-3.1-8b", alpha=0.8, **options)


def test_cli_flags_reach_the_scenario():
    from rooflinesim.cli import main

    assert main(["predict", "--hw", "a100", "--sampling", "--draft-first-step-tokens", "2", "--json"]) == 0
    assert main(["predict", "--hw", "a100", "--draft-first-step-tokens", "2", "--extra-draft-pass"]) == 2


torch = pytest.importorskip("torch")


def test_exact_rule_commits_tokens_distributed_as_the_target():
    """Monte Carlo (seed 0, 200,000 sequences, vocab 4, k = 2): the first committed token after the rule is
    distributed as the target's p at that position, whatever the draft's q; tolerance 5 sigma of a multinomial."""
    from rooflinesim.calibrate.reference.sampling import exact_rule, sample

    g = torch.Generator().manual_seed(0)
    n_seq, vocab, k = 200_000, 4, 2
    p = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64)
    q = torch.tensor([0.4, 0.3, 0.2, 0.1], dtype=torch.float64)
    p_rows = p.expand(n_seq, k + 1, vocab).contiguous()
    q_rows = q.expand(n_seq, k, vocab).contiguous()
    drafts = torch.stack([sample(q_rows[:, i], g) for i in range(k)], 1)
    n, correction = exact_rule(p_rows, q_rows, drafts, g)
    first = torch.where(n > 0, drafts[:, 0], correction)
    freq = torch.bincount(first, minlength=vocab).double() / n_seq
    sigma = torch.sqrt(p * (1 - p) / n_seq)
    assert torch.all((freq - p).abs() < 5 * sigma), (freq, p)
    # acceptance of the first draft is sum min(p, q) = 1 - TV(p, q) = 0.6
    assert float((n > 0).double().mean()) == pytest.approx(0.6, abs=5 * (0.24 / n_seq) ** 0.5)


def test_a_wrong_rule_is_caught():
    """Accepting every draft (a rule that ignores p) commits q's distribution: the same check must fail."""
    from rooflinesim.calibrate.reference.sampling import sample

    g = torch.Generator().manual_seed(0)
    q = torch.tensor([0.4, 0.3, 0.2, 0.1], dtype=torch.float64)
    p = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64)
    first = sample(q.expand(50_000, 4).contiguous(), g)
    freq = torch.bincount(first, minlength=4).double() / 50_000
    assert not torch.all((freq - p).abs() < 5 * torch.sqrt(p * (1 - p) / 50_000))


def test_sample_and_advance_keeps_the_books():
    """After a forward of `fed` tokens from positions `start`: the next feed is the drawn token, at start + fed, and
    the attention span is the furthest sequence's end."""
    from rooflinesim.calibrate.reference.sampling import sample_and_advance

    g = torch.Generator().manual_seed(0)
    logits = torch.full((2, 2, 5), -1e9)
    logits[0, -1, 3] = logits[1, -1, 1] = 0.0  # one-hot last positions
    token, probs, feed, start, span = sample_and_advance(logits, torch.tensor([10, 7]), 2, 1.0, g)
    assert token.tolist() == [3, 1] and feed.tolist() == [[3], [1]] and start.tolist() == [12, 9] and span == 13
    assert probs.shape == (2, 5) and float(probs[0, 3]) == pytest.approx(1.0)


def test_commit_rolls_back_by_position():
    """Sequence 0 accepts both drafts (p = q one-hot on them), sequence 1 none (p puts no mass on its draft): the
    next draft feed re-reads the last accepted token (or the previous last) and the next token, from cur + n."""
    from rooflinesim.calibrate.reference.sampling import commit, verify_input

    g = torch.Generator().manual_seed(0)
    vocab, k = 6, 2
    last, drafts, cur = torch.tensor([0, 0]), [torch.tensor([2, 4]), torch.tensor([3, 5])], torch.tensor([20, 30])
    tokens, span = verify_input(last, drafts, cur)
    assert tokens.tolist() == [[0, 2, 3], [0, 4, 5]] and span == 33
    one_hot = lambda i: torch.nn.functional.one_hot(torch.tensor(i), vocab).double()
    q_rows = [torch.stack([one_hot(2), one_hot(4)]), torch.stack([one_hot(3), one_hot(5)])]
    p_rows = torch.stack([torch.stack([one_hot(2), one_hot(3), one_hot(1)]),  # bonus token 1
                          torch.stack([one_hot(0), one_hot(0), one_hot(0)])])  # correction 0
    n, next_token, feed, start, span, new_cur = commit(p_rows, q_rows, tokens, cur, g)
    assert n.tolist() == [2, 0] and next_token.tolist() == [1, 0]
    assert feed.tolist() == [[3, 1], [0, 0]]  # (last accepted draft | previous last, next token)
    assert new_cur.tolist() == [23, 31] and start.tolist() == [22, 30] and span == 32



def _quick_bench_context():
    """The fp32 benchmark context of a --quick plan on this CPU (skips without torch)."""
    pytest.importorskip("torch")
    from rooflinesim.calibrate.measure.benchmarks.base import BenchContext
    from rooflinesim.calibrate.fitting.budget import get_level_plan
    from rooflinesim.calibrate.measure.timers import Timer, select_device

    device = select_device("cpu")
    return BenchContext(device, "fp32", get_level_plan("quick", ("fp32",), device), Timer(device, flush_l2=False))

def test_the_sampler_benchmark_times_each_call_right_after_a_forward_step():
    """The loops run the sampler and the rule after a forward pass, never back to back: the benchmark runs an
    untimed decode step of a tiny decoder ahead of every timed call (`Timer.time(before=...)`)."""
    from rooflinesim.calibrate.measure.benchmarks.sampler import IN_CONTEXT_MODEL, sampler_jobs

    ctx = _quick_bench_context()
    forwards = []
    model = ctx.decoder(IN_CONTEXT_MODEL)
    model.register_forward_hook(lambda *_: forwards.append(1))
    jobs = sampler_jobs(ctx)
    assert {job.key.kind for job in jobs} == {"sample", "accept_rule"}
    for job in jobs:
        forwards.clear()
        timing = job.run()
        assert len(forwards) >= len(timing.samples) + 1  # warm-up and every timed call, each after a forward


def test_the_sampler_benchmark_times_every_position_after_a_verify(monkeypatch):
    """At one position 'sample' is the draw and the books after a decode or draft step; at several (a verify) it is
    the probabilities of every position, which the exact rule reads."""
    ctx = _quick_bench_context()
    from rooflinesim.calibrate.reference import sampling
    from rooflinesim.calibrate.measure.benchmarks.sampler import sampler_jobs

    seen = []
    advance, probabilities = sampling.sample_and_advance, sampling.probabilities
    monkeypatch.setattr(sampling, "sample_and_advance",
                        lambda logits, *a: (seen.append(("advance", tuple(logits.shape))), advance(logits, *a))[1])
    monkeypatch.setattr(sampling, "probabilities",
                        lambda logits, *a: (seen.append(("probabilities", tuple(logits.shape))),
                                            probabilities(logits, *a))[1])
    for job in sampler_jobs(ctx):
        if job.key.kind != "sample":
            continue
        seen.clear()
        job.run()
        b, q, vocab = job.key.batch, job.key.positions, job.key.vocab
        if q == 1:  # sample_and_advance computes the one position's probabilities itself
            assert set(seen) == {("advance", (b, 1, vocab)), ("probabilities", (b, 1, vocab))}
        else:
            assert set(seen) == {("probabilities", (b, q, vocab))}
