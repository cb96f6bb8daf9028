"""The speculative cost model: Leviathan's closed form, k = 0, a = 1, best k, break-even, schedules, sweeps."""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rooflinesim
from rooflinesim import load_hardware, load_model
from rooflinesim.acceptance import (
    expected_tokens_iid, expected_tokens_per_position, get_expected_tokens, leviathan_walltime_improvement,
)
from rooflinesim.cli import main
from rooflinesim.scenario.builder import build_scenario
from rooflinesim.pricing.speculative import get_speculative_step_time_s, get_speedup, price_speculation
from rooflinesim.pricing.sweep import SweepResult, sweep

from .strategies import acceptance_alphas, batches, contexts


def _scenario(hw="h100", model="llama-3.1-8b", ctx=4096, **options):
    return build_scenario(hw, model, 1, ctx, draft="llama-3.2-1b", **options)


@settings(max_examples=200, deadline=None)
@given(alpha=acceptance_alphas, k=st.integers(0, 16), c=st.floats(0, 2), t=st.floats(1e-4, 1.0))
def test_reduces_to_leviathan_when_verify_costs_a_decode(alpha, k, c, t):
    step = get_speculative_step_time_s(k, c * t, t)
    speedup = get_speedup(expected_tokens_iid(alpha, k), t, step)
    assert float(speedup) == pytest.approx(float(leviathan_walltime_improvement(alpha, k, c)), rel=1e-12)


class _FlatVerify:
    """A timing model whose op times ignore the number of tokens: verify then costs exactly a decode step."""

    name = "flat"

    def __init__(self, inner):
        self.inner = inner

    def for_step(self, ops):
        return self

    def with_co_resident(self, weight_bytes):
        return self

    def get_op_time(self, op, compute_dtype):
        from rooflinesim.timing import OpTime

        t = self.inner.get_op_time(op, compute_dtype)
        flat = np.full_like(np.asarray(t.time_s), op.count * 1e-5, dtype=float)
        return OpTime(flat, flat, flat * 0, flat, flat < 0)

    def get_step_overhead_s(self, num_layers, compute_dtype):
        return 0.0

    def get_warnings(self, ops, compute_dtype):
        return []

    def get_relative_sigmas(self, compute_dtype):
        return None

    def get_cache_sigma_s(self, expected, num_layers, compute_dtype):
        return 0.0


def test_full_model_with_flat_verify_reduces_to_leviathan():
    import dataclasses

    from rooflinesim.timing import TimingModel

    scenario = _scenario()
    flat = _FlatVerify(scenario.timing)
    assert isinstance(flat, TimingModel)  # the protocol declares every method the step model calls
    k = np.arange(0, 9)
    grid = price_speculation(dataclasses.replace(scenario, timing=flat), 1, 4096, k, 0.7)
    c = float(grid.draft_step_time_s[1]) / float(grid.target_decode_time_s)
    assert np.allclose(grid.speedup, leviathan_walltime_improvement(0.7, k, c), rtol=1e-12)


@settings(max_examples=30, deadline=None)
@given(batch=batches, ctx=contexts, alpha=acceptance_alphas)
def test_k0_is_plain_decoding_and_alpha1_commits_k_plus_1(batch, ctx, alpha):
    scenario = _scenario()
    grid = price_speculation(scenario, batch, ctx, np.arange(0, 6), alpha)
    assert float(grid.speedup[0]) == 1.0
    assert float(grid.step_time_s[0]) == float(grid.target_decode_time_s)
    ones = price_speculation(scenario, batch, ctx, np.arange(0, 6), 1.0)
    assert np.array_equal(ones.expected_tokens, np.arange(1, 7))


def test_per_position_acceptance():
    rates = [0.9, 0.8, 0.5]
    e = get_expected_tokens(np.arange(4), alpha_per_position=rates)
    assert np.allclose(e, [1, 1.9, 1.9 + 0.72, 1.9 + 0.72 + 0.36])
    p = rooflinesim.predict(alpha_per_position=rates).to_dict()["speculative"]
    assert [row["k"] for row in p["speedup_by_k"]] == [0, 1, 2, 3]
    assert p["expected_tokens"] == pytest.approx(e[p["k"]])


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=12), st.integers(0, 15))
def test_one_expected_tokens_function(rates, k):
    """E(k) has one definition: from per-position rates it is the closed form of the rates' first min(k, len) entries;
    at equal rates it is the i.i.d. form; a measured acceptance's E-by-k table reads the same function."""
    from rooflinesim.acceptance.measured import from_position_counts

    e = float(get_expected_tokens(k, alpha_per_position=rates))
    prefix = rates[:min(k, len(rates))]
    assert e == (1.0 if not prefix else pytest.approx(float(expected_tokens_per_position(prefix)), rel=1e-12))
    same = float(get_expected_tokens(min(k, len(rates)), alpha_per_position=[rates[0]] * len(rates)))
    assert same == pytest.approx(float(expected_tokens_iid(rates[0], min(k, len(rates)))), rel=1e-9)
    reached = [30, 20, 10]
    m = from_position_counts("test", "test", 40, reached)
    for row in m.expected_tokens_by_k():
        assert row["expected_tokens"] == float(get_expected_tokens(row["k"], None, m.per_position))


def test_drafter_kinds_order_by_cost():
    p_model = rooflinesim.predict(k=4).speculative
    p_head = rooflinesim.predict(k=4, drafter="head", head_layer_fraction=1.0).speculative
    p_ngram = rooflinesim.predict(k=4, drafter="ngram").speculative
    assert p_ngram.draft_step_time_s == 0.0
    assert 0 < p_head.draft_step_time_s < p_model.draft_step_time_s
    assert p_ngram.speedup > p_head.speedup > p_model.speedup
    # one target layer of Llama-3.1-8B (about 1/32 of its decode) plus the lm_head it runs per draft token
    lm_head = next(r.time_s for r in rooflinesim.predict(k=4).ops if r.name == "lm_head")
    assert p_head.draft_step_time_s == pytest.approx(p_model.target_decode_time_s / 32 + lm_head, rel=0.15)


def test_extra_draft_pass_costs_a_to_the_k_draft_steps():
    base = rooflinesim.predict(k=4).speculative
    extra = rooflinesim.predict(k=4, extra_draft_pass=True).speculative
    assert extra.step_time_s - base.step_time_s == pytest.approx(0.8**4 * base.draft_step_time_s)


def test_speculation_stops_paying_on_a_compute_bound_cpu():
    """On the 2-core CPU spec, verifying k+1 tokens soon costs k+1 decodes: break-even inside the grid, at a batch
    that fits in memory (issue 24: it used to be the first batch that does not fit)."""
    result = sweep(hw="cpu", model="llama-3.1-8b", draft="llama-3.2-1b", batch=[1, 2, 4, 8, 16, 32, 64, 128, 256],
                   ctx=[128], alpha=[0.8], k=range(0, 9))
    assert result.speedup.shape == (9, 1, 9, 1)
    be = int(result.break_even_batch[0, 0])
    assert 1 < be <= 128
    at = int(np.flatnonzero(result.batch == be)[0])
    assert result.speculation_fits[at, 0]  # a break-even is a batch that fits
    assert result.best_speculative_speedup[at, 0, 0] < 1  # and speculation loses there
    assert np.all(result.best_speculative_speedup[:at, 0, 0] >= 1)
    assert np.all(result.best_k[result.speculation_fits[:, 0] & (result.batch >= be)] == 0)
    sched = result.get_engine_schedules()[0]
    assert sched["speculation_verdict"] == "stops_paying"
    assert sched["vllm"]["speculative_disable_by_batch_size"] == be
    assert sched["vllm"]["num_speculative_tokens"] >= 1
    schedule = sched["trtllm"]["draft_len_schedule_older_releases"]  # keys: the batch from which each k applies
    assert schedule[1] >= 1 and list(schedule.values())[-1] == 0 and max(schedule) == be
    assert max(sched["trtllm"]["draft_len_schedule"]) < be  # keys: the last batch of each k; off above
    assert sched["trtllm"]["max_concurrency"] == int(result.batch[result.batch < be].max())


def test_break_even_and_schedules_on_a_synthetic_grid():
    speedup = np.ones((4, 1, 3, 1))
    speedup[:, 0, 1, 0] = [1.5, 1.2, 0.9, 1.05]  # k = 1; a recovery at batch 8 still counts as paying
    speedup[:, 0, 2, 0] = [1.8, 1.1, 0.8, 0.7]  # k = 2
    z = np.zeros((4, 1))
    r = SweepResult("hw", "m", "d", np.array([1, 2, 4, 8]), np.array([1024]), np.array([0, 1, 2]), np.array([0.8]),
                    speedup, speedup, speedup, z, z, np.zeros((4, 1, 3)), np.ones((4, 1, 3), bool))
    assert r.best_k[:, 0, 0].tolist() == [2, 1, 0, 1]
    assert int(r.break_even_batch[0, 0]) == -1  # still pays at the largest batch
    speedup[3, 0, 1, 0] = 0.95
    assert int(r.break_even_batch[0, 0]) == 4
    s = r.get_engine_schedules()[0]
    assert s["vllm"] == {"speculative_disable_by_batch_size": 4, "num_speculative_tokens": 2}
    # issue 24 changed this on purpose: TensorRT-LLM (PR #10860) reads each key as the last batch of its k; the
    # "from this batch" reading of older releases is kept under its own key
    assert s["trtllm"] == {"draft_len_schedule": {1: 2, 2: 1}, "draft_len_schedule_older_releases": {1: 2, 2: 1, 4: 0},
                           "max_concurrency": 2}


def test_sweep_point_equals_predict():
    result = sweep(hw="h100", model="llama-3.1-8b", draft="llama-3.2-1b", batch=[1, 8, 64], ctx=[1024, 32768],
                   alpha=[0.6, 0.8], k=range(0, 9))
    p = rooflinesim.predict(hw="h100", batch=8, ctx=32768, alpha=0.6, k=5).speculative
    assert result.speedup[1, 1, 5, 0] == pytest.approx(p.speedup, rel=1e-12)
    assert result.verify_step_time_s[1, 1, 5] == pytest.approx(p.verify_step_time_s, rel=1e-12)


def test_long_context_keeps_verify_memory_bound():
    """At 128k context the KV cache dominates bytes, so speedup holds as batch grows (no break-even)."""
    result = sweep(hw="h200", model="llama-3.1-8b", draft="llama-3.2-1b", batch=[1, 4, 16, 64], ctx=[1024, 131072],
                   alpha=[0.8], k=range(0, 9))
    long = result.best_speedup[:, 1, 0]
    short = result.best_speedup[:, 0, 0]
    assert long[-1] > short[-1]
    assert np.all(long > 1.3)


def test_sweep_cli_writes_csv_and_json(tmp_path, capsys):
    csv_path, json_path = tmp_path / "grid.csv", tmp_path / "grid.json"
    assert main(["sweep", "--hw", "h100", "--batch", "1..8", "--ctx", "1k,4k", "--alpha", "0.6,0.8", "--k", "0..4",
                 "-o", str(csv_path)]) == 0
    out = capsys.readouterr().out
    assert "break-even" in out
    lines = csv_path.read_text().strip().splitlines()
    assert lines[0].startswith("batch,context_tokens,k,alpha") and len(lines) == 1 + 4 * 2 * 5 * 2
    assert main(["sweep", "--batch", "1,2", "--ctx", "1k", "--json", "-o", str(json_path)]) == 0
    d = json.loads(capsys.readouterr().out)
    assert {"break_even", "schedules"} <= set(d)
    assert len(json.loads(json_path.read_text())["grid"]["speedup"]) == 2 * 1 * 9 * 2
