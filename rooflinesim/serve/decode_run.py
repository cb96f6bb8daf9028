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
from dataclasses import dataclass

import numpy as np

MAX_RUN_STEPS = 512
MIN_RUN_STEPS = 2  # a shorter run is left to the per-step path


@dataclass(frozen=True)
class DecodeRun:
    steps: int
    k: int
    step_s: np.ndarray  # (steps,)
    emitted: np.ndarray  # (steps, batch): tokens each request commits per step
    block_growth: np.ndarray  # (steps, batch): blocks each request holds beyond its current ones, per step


def plan_decode_run(computed, remaining, blocks, free_blocks: int, now: float, next_arrival_s: float, policy, pricer,
                    rng, rates, block_size: int, budget_tokens: int) -> DecodeRun | None:
    """The steps of a pure-decode batch through the first one at which a request finishes, and before the first one at
    which a request arrives, k changes or the free KV blocks would not cover the batch's growth; None when fewer than
    MIN_RUN_STEPS."""
    batch = computed.size
    horizon = int(min(remaining.min(), MAX_RUN_STEPS))  # each step commits >= 1 token: someone finishes by then
    if horizon < MIN_RUN_STEPS:
        return None
    max_k = budget_tokens // batch - 1

    def choose(context: float) -> int:
        return int(min(policy.choose_k(batch, context, pricer), max_k))

    start_context = float(computed.sum()) / batch
    k = choose(start_context)
    row = pricer.get_decode_row(batch, k)
    # steps only get longer as contexts grow, so no more than this many start before the next arrival
    first_step_s = float(pricer.get_decode_step_s(batch, start_context)[k])
    if math.isfinite(next_arrival_s):
        horizon = min(horizon, int((next_arrival_s - now) / first_step_s) + 2)
    if horizon < MIN_RUN_STEPS:
        return None
    if k:
        accepted = np.cumprod(rng.random((horizon, batch, k)) < rates[:k], axis=2).sum(axis=2)
        emitted = accepted + 1
    else:
        emitted = np.ones((horizon, batch), dtype=np.int64)
    committed = np.cumsum(emitted, axis=0)
    finishes = committed >= remaining  # (horizon, batch)
    anyone = finishes.any(axis=1)
    steps = int(np.argmax(anyone)) + 1 if anyone.any() else horizon  # the run ends with the first finishing step
    before = committed[:steps] - emitted[:steps]  # committed before each step
    # a request commits no more than it has left: its last step is cut short
    emitted = np.minimum(emitted[:steps], remaining - before)
    context = computed + before
    mean_context = context.sum(axis=1) / batch
    if not policy.k_depends_on_batch_only:  # k may move with the context: stop where it does
        for h in range(1, steps):
            if choose(float(mean_context[h])) != k:
                steps = h
                break
    growth = np.maximum(-(-(context[:steps] + 1 + 2 * k) // block_size) - blocks, 0)
    short = np.flatnonzero(growth.sum(axis=1) > free_blocks)
    if short.size:
        steps = int(short[0])
    if steps < MIN_RUN_STEPS:
        return None
    step_s = np.interp(mean_context[:steps], pricer.context_grid, row)
    starts = now + np.concatenate([[0.0], np.cumsum(step_s[:-1])])
    steps = min(steps, int(np.searchsorted(starts, next_arrival_s, side="left")))  # an arrival is queued at a start
    if steps < MIN_RUN_STEPS:
        return None
    return DecodeRun(steps, k, step_s[:steps], emitted[:steps], growth[:steps])


__all__ = ["plan_decode_run", "DecodeRun", "MAX_RUN_STEPS"]
