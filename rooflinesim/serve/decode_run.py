"""A run of pure-decode steps planned at once (the simulator's fast path).

Between scheduling events -- an arrival, a request finishing, k changing, the KV blocks running short -- a running set
that only decodes evolves with no decision to take: every step each request verifies 1 + k tokens and commits its
accepted drafts + 1. `plan_decode_run` samples the acceptance of up to MAX_RUN_STEPS such steps in one numpy draw,
prices them by one vectorised interpolation (the same table and the same linear interpolation as the per-step path),
and returns the steps up to the first event: through the first step at which a request finishes (the engine then
retires it), before an arrival, a change of k or a shortage of KV blocks (the per-step path takes that step). The
result equals stepping one by one up to the random stream: the run draws its acceptance in one block instead of step
by step (still deterministic under the seed).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from ..acceptance.trees import sample_accepted_lengths

MAX_RUN_STEPS = 512
MIN_RUN_STEPS = 2  # a shorter run is left to the per-step path


class DecodeRun(NamedTuple):
    steps: int
    k: int
    step_s: np.ndarray  # (steps,)
    ends_s: np.ndarray  # (steps,): when each step ends
    emitted: np.ndarray  # (steps, batch): tokens each request commits per step
    block_growth: np.ndarray  # (steps, batch): blocks each request holds beyond its current ones, per step
    blocks_grown: np.ndarray  # (steps,): the batch's blocks beyond its current ones, per step (block_growth summed)


#: the number of trailing one bits of each byte: the accepted drafts of a chain of up to 8 packed (little-endian) hits
_LEADING_HITS = np.asarray([(~c & (c + 1)).bit_length() - 1 for c in range(256)], dtype=np.int64)


def count_accepted(uniform: np.ndarray, rates: np.ndarray) -> np.ndarray:
    """Accepted drafts per chain from uniform draws (..., k): the length of the run of hits before the first miss."""
    hits = uniform < rates
    if hits.shape[-1] <= 8:  # one byte per chain: a table lookup
        return _LEADING_HITS.take(np.packbits(hits, axis=-1, bitorder="little")[..., 0])
    return np.add.reduce(np.logical_and.accumulate(hits, axis=-1), axis=-1)


class TreeSampler:
    """Accepted tree tokens of a step that verifies k of the scenario's tree tokens (`acceptance.trees`): the tree of
    k nodes is built once per k, and each sample walks it with one uniform draw per depth."""

    def __init__(self, shape, rank_rates):
        self.shape, self.rank_rates, self._trees = shape, rank_rates, {}

    @classmethod
    def build(cls, scenario) -> "TreeSampler":
        from ..scenario.drafting import get_tree_rank_rates

        acceptance = scenario.acceptance
        if acceptance.per_position is None and len(acceptance.alphas) != 1:
            from ..errors import InputError

            raise InputError("serve takes one acceptance rate (--alpha) or per-depth rates, not a list")
        alpha = None if acceptance.alphas is None else acceptance.alphas[0]
        return cls(scenario.tree, get_tree_rank_rates(scenario.tree, alpha, acceptance.per_position))

    def sample(self, rng, shape: tuple, k: int) -> np.ndarray:
        tree = self._trees.get(k)
        if tree is None:
            tree = self._trees[k] = self.shape.get_tree(self.rank_rates, k)
        return sample_accepted_lengths(tree, self.rank_rates, rng.random(shape + (max(tree.depth, 1),)))


def sample_accepted(rng, shape: tuple, k: int, rates) -> np.ndarray:
    """Accepted drafts of `shape` sequence-steps that draft k: a chain's per-position `rates` (an array), or a
    `TreeSampler`."""
    if isinstance(rates, TreeSampler):
        return rates.sample(rng, shape, k)
    return count_accepted(rng.random(shape + (k,)), rates[:k])


def plan_decode_run(computed, remaining, blocks, free_blocks: int, now: float, next_arrival_s: float, policy, pricer,
                    rng, rates, block_size: int, budget_tokens: int) -> DecodeRun | None:
    """The steps of a pure-decode batch through the first one at which a request finishes, and before the first one at
    which a request arrives, k changes or the free KV blocks would not cover the batch's growth; None when fewer than
    MIN_RUN_STEPS. (The arrays are a few requests wide: reductions call numpy's ufuncs directly, skipping the
    wrappers of .sum() and .min(), which cost more than such sums.)"""
    batch = computed.size
    horizon = min(int(np.minimum.reduce(remaining)), MAX_RUN_STEPS)  # each step commits >= 1 token: someone
    if horizon < MIN_RUN_STEPS:  # finishes by then
        return None
    max_k = budget_tokens // batch - 1

    def choose(context: float) -> int:
        return int(min(policy.choose_k(batch, context, pricer), max_k))

    start_context = float(np.add.reduce(computed)) / batch
    k = choose(start_context)
    row = pricer.get_decode_row(batch, k)
    # steps only get longer as contexts grow, so no more than this many start before the next arrival
    first_step_s = pricer.get_decode_time_s(batch, start_context, k)
    if math.isfinite(next_arrival_s):
        horizon = min(horizon, int((next_arrival_s - now) / first_step_s) + 2)
    if horizon < MIN_RUN_STEPS:
        return None
    if k:
        emitted = sample_accepted(rng, (horizon, batch), k, rates) + 1
    else:
        emitted = np.ones((horizon, batch), dtype=np.int64)
    committed = np.add.accumulate(emitted, axis=0)
    anyone = np.logical_or.reduce(committed >= remaining, axis=1)  # (horizon,): someone has finished by then
    first = int(anyone.argmax())
    steps = first + 1 if anyone[first] else horizon  # the run ends with the first finishing step
    emitted = emitted[:steps]
    before = committed[:steps] - emitted  # committed before each step
    # a request commits no more than it has left: its last step is cut short
    emitted = np.minimum(emitted, remaining - before)
    context = computed + before
    mean_context = np.add.reduce(context, axis=1) / batch
    if not policy.k_depends_on_batch_only:  # k may move with the context: stop where it does
        for h, c in enumerate(mean_context.tolist()[1:], 1):
            if choose(c) != k:
                steps = h
                break
    # blocks to hold context + 1 + k verified tokens + k lookahead slots (ceil division of non-negative counts)
    growth = np.maximum((context[:steps] + (2 * k + block_size)) // block_size - blocks, 0)
    grown = np.add.reduce(growth, axis=1)
    short = grown > free_blocks
    first = int(short.argmax())
    if short[first]:
        steps = first
    if steps < MIN_RUN_STEPS:
        return None
    step_s = np.interp(mean_context[:steps], pricer.context_grid, row)
    ends = now + np.add.accumulate(step_s)
    if math.isfinite(next_arrival_s):  # an arrival is queued at a step's start (the first starts before it, now):
        steps = min(steps, 1 + int(ends[:steps - 1].searchsorted(next_arrival_s)))  # the run stops before that step
        if steps < MIN_RUN_STEPS:
            return None
    return DecodeRun(steps, k, step_s[:steps], ends[:steps], emitted[:steps], growth[:steps], grown[:steps])


__all__ = ["plan_decode_run", "count_accepted", "sample_accepted", "TreeSampler", "DecodeRun", "MAX_RUN_STEPS"]
