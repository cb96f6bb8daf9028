"""A draft tree's costs in a speculative step (see `acceptance.trees` for its shape and acceptance): the draft
forwards at the tree's widths, and the tree mask's extra attention in the verify (`ops.tree_attention`)."""

from __future__ import annotations

import numpy as np

from ..ops.tree_attention import get_tree_mask_ops
from ..scenario.builder import Scenario
from ..timing import TimingModel, get_op_time


def get_tree_draft_times_s(scenario: Scenario, timing: TimingModel, batch, context_tokens, get_draft_step_time_s,
                           decode=None):
    """(first draft forward, a widest one, all of them) for the scenario's tree: SGLang / EAGLE-2 run `steps` draft
    forwards, the first from the root and each later one over the top-k frontier (static trees: the nodes of each
    depth that have children); Medusa's heads run once each, side by side, whatever the tree's width.
    `get_draft_step_time_s` prices one draft forward (`speculative.get_draft_step_time_s`, passed in: that module
    imports this one)."""
    tree = scenario.tree
    widths = tree.draft_widths
    if scenario.drafter.kind == "medusa":
        one = get_draft_step_time_s(scenario, timing, batch, context_tokens, decode)
        return one, one, one * len(widths)
    times = {w: get_draft_step_time_s(scenario, timing, batch, context_tokens, decode, tree_width=w)
             for w in set(widths)}
    first = get_draft_step_time_s(scenario, timing, batch, context_tokens, decode, tree_width=widths[0],
                                  first_step=True)
    total = first + sum(times[w] for w in widths[1:])
    return first, times[max(widths)], total


def get_tree_mask_time_s(scenario: Scenario, timing: TimingModel, batch, verify_tokens) -> np.ndarray:
    """The tree mask's extra attention over a verify of `verify_tokens` per sequence (`ops.tree_attention`), 0 for a
    chain (one node per depth: engines verify it causally). The mask runs inside the attention kernel, so its op is
    priced less what the timing model charges an empty op (a launch of its own that never happens)."""
    if scenario.tree.nodes_per_depth_max <= 1:
        return np.zeros(np.broadcast(np.asarray(batch), np.asarray(verify_tokens)).shape)
    w = scenario.workload
    ops = get_tree_mask_ops(scenario.model, batch, verify_tokens, w.tensor_parallel)
    bound = timing.for_step(ops)
    empty = get_tree_mask_ops(scenario.model, batch, 1, w.tensor_parallel)
    return sum((get_op_time(bound, scenario.hardware, op, w.activation_dtype).time_s
                - get_op_time(bound, scenario.hardware, none, w.activation_dtype).time_s
                for op, none in zip(ops, empty)), np.asarray(0.0))


__all__ = ["get_tree_draft_times_s", "get_tree_mask_time_s"]
