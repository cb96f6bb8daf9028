"""How an EAGLE worker picks its draft tokens (engines/*.yaml `speculative.draft_softmax_topk`; ops/draft_heads.py
`get_draft_select_ops`): SGLang upcasts every draft forward's logits to fp32, soft-maxes them and takes the top-k over
the head's vocabulary, whatever the temperature. EAGLE-1/2 heads share the target's 128,256-column lm_head, EAGLE-3
heads have their own 32,000-token draft vocabulary, so the selection costs EAGLE-1 four times what it costs EAGLE-3
per row (docs/engines.md)."""

from __future__ import annotations

import numpy as np
import pytest

import rooflinesim.pricing.draft_extend as draft_extend
import rooflinesim.pricing.speculative as speculative
from rooflinesim.ops.draft_heads import EAGLE3_DRAFT_VOCAB_SIZE, get_draft_select_ops, get_head_vocab_size
from rooflinesim.pricing.draft_extend import get_head_forward_time_s, uses_draft_softmax_topk
from rooflinesim.pricing.speculative import price_speculation
from rooflinesim.scenario.builder import build_scenario
from rooflinesim.specs.registry import list_engines
from rooflinesim.timing.engine import with_role

V = 128256  # Llama-3.1-8B


def _scenario(engine="sglang", drafter="eagle", batch=8, **extra):
    return build_scenario("h100", "llama-3.1-8b", batch, 512, drafter=drafter, alpha=0.6, k_values=[0, 3],
                          engine=engine, **extra)


def test_select_ops_move_eighteen_bytes_per_bf16_logit_in_three_kernels():
    """Hand-computed for 8 rows of bf16 logits: the upcast reads 2 and writes 4 bytes per logit, the softmax reads
    and writes 4 (5 FLOPs per logit), the top-k reads 4: 18 bytes per logit, 18 x 8 x 128,256 = 18,468,864 bytes."""
    ops = {op.name: op for op in get_draft_select_ops(8, V, 2)}
    assert list(ops) == ["draft_logits_upcast", "draft_softmax", "draft_topk"]
    n = 8 * V
    assert float(ops["draft_logits_upcast"].act_read_bytes) == 2 * n and float(ops["draft_logits_upcast"].act_write_bytes) == 4 * n
    assert float(ops["draft_softmax"].act_read_bytes) == 4 * n and float(ops["draft_softmax"].act_write_bytes) == 4 * n
    assert float(ops["draft_softmax"].flops) == 5 * n
    assert float(ops["draft_topk"].act_read_bytes) == 4 * n and float(ops["draft_topk"].act_write_bytes) == 0
    total = sum(float(op.act_read_bytes + op.act_write_bytes) for op in ops.values())
    assert total == 18_468_864
    assert all(float(op.weight_bytes) == 0 for op in ops.values())


def test_the_head_vocabulary_is_eagle3s_own_and_the_targets_otherwise():
    s = _scenario()
    assert get_head_vocab_size("eagle", s.model) == V
    assert get_head_vocab_size("mtp", s.model) == V
    assert get_head_vocab_size("eagle3", s.model) == EAGLE3_DRAFT_VOCAB_SIZE == 32000


def test_only_sglang_selects_with_softmax_topk_and_only_for_feature_heads():
    assert uses_draft_softmax_topk(_scenario("sglang"))
    assert uses_draft_softmax_topk(_scenario("sglang", "eagle3"))
    assert not uses_draft_softmax_topk(_scenario("sglang", "ngram"))
    others = [e.short_name for e in list_engines() if e.short_name != "sglang"]
    assert others and not any(uses_draft_softmax_topk(_scenario(e)) for e in others)


def _select_time_s(drafter, batch, monkeypatch):
    """What the selection adds to one draft forward of `batch` sequences under SGLang (with it minus without)."""
    s = _scenario("sglang", drafter, batch)
    inner = with_role(s.timing, "inner")
    with_select = float(np.asarray(get_head_forward_time_s(s, inner, batch, 512, False)).ravel()[0])
    monkeypatch.setattr(draft_extend, "uses_draft_softmax_topk", lambda scenario: False)
    without = float(np.asarray(get_head_forward_time_s(s, inner, batch, 512, False)).ravel()[0])
    monkeypatch.undo()
    return with_select - without


def test_the_selection_grows_with_rows_and_costs_eagle1_four_times_eagle3(monkeypatch):
    """Its launches are the same three kernels for both heads and cancel between two batches; what is left is the
    logit traffic, rows x vocabulary: 128,256 / 32,000 = 4.008 times more for EAGLE-1 per added row."""
    eagle = [_select_time_s("eagle", b, monkeypatch) for b in (32, 64)]
    eagle3 = [_select_time_s("eagle3", b, monkeypatch) for b in (32, 64)]
    assert eagle[0] > 0 and eagle3[0] > 0 and eagle[1] > eagle[0] and eagle3[1] > eagle3[0]
    assert (eagle[1] - eagle[0]) / (eagle3[1] - eagle3[0]) == pytest.approx(V / 32000, rel=0.02)


def test_the_selection_is_priced_on_every_draft_forward_of_the_chain(monkeypatch):
    """A chain of 3 under SGLang runs it three times: after the draft-extend pass (logits for the last row of each
    sequence only, so the same 8 rows) and on the two draft forwards that follow."""
    s = _scenario("sglang")

    def drafts_s():
        g = price_speculation(s, 8, 512, np.asarray([3]))
        return 3 * float(np.asarray(g.draft_step_time_s).ravel()[0])

    with_select = drafts_s()
    monkeypatch.setattr(draft_extend, "uses_draft_softmax_topk", lambda scenario: False)
    speculative._LAST_LOOP[0] = None  # the loop's times are kept for the same Scenario object
    without = drafts_s()
    monkeypatch.undo()
    assert with_select - without == pytest.approx(3 * _select_time_s("eagle", 8, monkeypatch), rel=1e-9)


def test_sampling_heads_sample_over_their_own_vocabulary():
    """With --sampling and no engine selection, an EAGLE-3 head's sampler runs over its 32,000-token draft
    vocabulary, so it costs less than EAGLE-1's over the target's 128,256 (it used to be priced over the target's)."""
    times = {}
    for drafter in ("eagle", "eagle3"):
        s = _scenario("ideal", drafter, 64, sampling=True)
        inner = with_role(s.timing, "inner")
        with_sampler = float(np.asarray(get_head_forward_time_s(s, inner, 64, 512, False)).ravel()[0])
        greedy = _scenario("ideal", drafter, 64)
        plain = float(np.asarray(get_head_forward_time_s(greedy, with_role(greedy.timing, "inner"), 64, 512,
                                                         False)).ravel()[0])
        times[drafter] = with_sampler - plain
    assert 0 < times["eagle3"] < times["eagle"]
