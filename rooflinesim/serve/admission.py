"""Scheduling decisions of the serving loop that depend on an engine profile or an on-demand draft model
(serve/engine.py): how many KV blocks a no-evict admission reserves, whether prefill-first has a prompt to run,
whether an idle draft model should catch up to speculate again, and where a multi-step window stands."""

from __future__ import annotations

import numpy as np


def _speculation_pays_catch_up(pricer, k: int, batch: int, context: float, missing: np.ndarray, computed: np.ndarray,
                               remaining: np.ndarray) -> bool:
    """Whether an on-demand draft model should catch up on the `missing` tokens to speculate with k drafts: the time
    speculation saves over the batch's remaining tokens (decode step at k = 0 minus the speculative step per committed
    token, over the mean remaining output) must exceed one prefill of what the draft missed."""
    if not missing.any():
        return True
    times = pricer.get_decode_step_s(batch, context)
    saved_per_step = times[0] - times[k] / float(pricer.expected_tokens[k])
    if saved_per_step <= 0:
        return False
    catch_up = pricer.get_draft_catch_up_s((computed - missing).tolist(), missing.tolist())
    return saved_per_step * float(np.mean(remaining)) > catch_up


def _whole_request_blocks(rid: int, prompt, output, generated, block_size: int, max_k: int) -> int:
    """Blocks a request holds at its longest: prompt + output + the draft and lookahead slots (no-evict admission)."""
    return -(-(int(prompt[rid]) + int(output[rid]) + 2 * max_k + 1) // block_size)


def _admissible(rid: int, target, prompt, output, generated, budget: int, block_size: int, free_blocks: int,
                no_evict: bool, max_k: int) -> bool:
    """Whether the first waiting request would be admitted into an otherwise empty step (prefill-first's test)."""
    need = (_whole_request_blocks(rid, prompt, output, generated, block_size, max_k) if no_evict
            else -(-int(min(target[rid], budget)) // block_size))
    return need <= free_blocks


def get_window_left(window_left: int, steps: int, multi_step: int) -> int:
    """Decode steps left in the multi-step window after `steps` more decode steps: a decode step taken with no
    window open starts one of `multi_step` steps (multi_step 1: never a window)."""
    if steps <= window_left:
        return window_left - steps
    return (-(steps - window_left)) % multi_step
