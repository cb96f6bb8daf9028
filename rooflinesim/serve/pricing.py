"""Step prices for the serving simulator, from the same op model and Scenario as `predict` (no second pricing path).

A serving step mixes decodes (each sequence verifies 1 + k tokens, after k draft steps) with prefill chunks. It is
priced in two parts:

1. the decode group (B sequences at mean context S, k drafts each) exactly as `predict` prices a speculative step:
   `speculative.price_speculation(scenario, B, S, k)` (k draft steps + one verify of k + 1 tokens; k = 0 is plain
   decoding). Attention reads the KV cache of every sequence, which is linear in each sequence's context, so the
   group's mean context prices its attention (the per-sequence sum) exactly;
2. prefill chunks add their *marginal* cost: every op other than attention (projections, MLP, norms, RoPE, the KV
   write, collectives) depends only on the step's total new tokens T, so the chunks add
   body(T_decode + T_prefill) - body(T_decode), with the weights read once per step (they are already paid by the
   decode group); the lm_head adds the logits of the chunks that finish their prompt; each chunk adds its own
   attention (batch 1, its cached context, its chunk length). With no decodes the step is body(T) + lm_head + the
   chunks' attention. A deployed draft model prefills the same chunks, priced the same way on the draft model.

The approximation: each prefill chunk's attention is priced as its own kernel (a real engine runs one varlen kernel,
so the per-kernel overhead is counted once per chunk instead of once per step), and body(T) is priced at batch 1
(which is exact for the op model: those ops see only B x q = T).

For speed the prices are tabulated once per simulation, on a grid: batch (every integer up to 32, then ~8 points
per doubling), mean context (~8 points per doubling) and k; the token tables (body, lm_head) hold every integer T up
to the token budget; chunk attention uses (context, chunk length) grids. Lookups interpolate linearly. The error this
bucketing adds is measured in tests/test_serve_pricing.py against exact prices of random steps (stated in README).
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ..ops.op_cost import ATTENTION_KINDS
from ..scenario.builder import Scenario
from ..acceptance.closed_form import get_expected_tokens
from ..pricing.speculative import price_speculation
from ..scenario.drafting import get_tree_expected_tokens
from ..step import get_step_cost

#: ops of the lm_head section: priced at the tokens whose logits the step needs
HEAD_OPS = frozenset({"final_norm", "lm_head", "logits_allgather", "sample"})  # per logit row (sample: --sampling)
#: grid points per doubling of the batch above DENSE_BATCH and of the context / chunk length
POINTS_PER_DOUBLING = 8
DENSE_BATCH = 32
MIN_CONTEXT_BUCKET = 16
#: chunk-attention prices remembered per table (cleared when full)
CHUNK_CACHE_SIZE = 1 << 16


def get_geometric_grid(top: int, dense_below: int = 0, points_per_doubling: int = POINTS_PER_DOUBLING) -> np.ndarray:
    """Integers 1..top: every one up to `dense_below`, then `points_per_doubling` per doubling; top included."""
    dense = np.arange(1, min(dense_below, top) + 1)
    start = max(dense_below, 1)
    n = int(np.ceil(np.log2(max(top, 2) / start) * points_per_doubling)) + 1
    sparse = np.round(start * 2.0 ** (np.arange(n) / points_per_doubling)).astype(np.int64)
    grid = np.unique(np.concatenate([dense, sparse[sparse <= top], [top]]))
    return grid[grid >= 1]


def get_context_grid(top: int) -> np.ndarray:
    """Cached-context buckets 0, 16, ... top (geometric, POINTS_PER_DOUBLING per doubling)."""
    grid = get_geometric_grid(max(top, MIN_CONTEXT_BUCKET), 0) if top > 0 else np.asarray([1])
    return np.unique(np.concatenate([[0], grid[grid >= MIN_CONTEXT_BUCKET], [max(top, 1)]]))


def _bracket(grid: list, x: float) -> tuple[int, float]:
    """Index i and weight w with x = (1 - w) grid[i] + w grid[i + 1] (clamped at the ends); `grid` a sorted list
    (bisect on a Python list is ~10x faster than on a numpy array)."""
    i = bisect_right(grid, x) - 1
    if i < 0:
        return 0, 0.0
    if i >= len(grid) - 1:
        return len(grid) - 2 if len(grid) > 1 else 0, 1.0 if len(grid) > 1 else 0.0
    return i, (x - grid[i]) / (grid[i + 1] - grid[i])


def _sum_ops(step, keep) -> np.ndarray:
    return sum(t.time_s for op, t in zip(step.ops, step.expected) if keep(op))


@dataclass(frozen=True)
class TokenTables:
    """One model's token-dependent prices: body(T) (every op but attention and the lm_head, plus the per-step
    overhead) and head(L) for T, L = 0..max_tokens, and one prefill chunk's attention over (context, chunk)."""

    body_s: np.ndarray
    head_s: np.ndarray
    chunk_context: list
    chunk_tokens: list
    chunk_attention_s: np.ndarray  # (context, chunk)

    @classmethod
    def build(cls, scenario: Scenario, model, workload, max_tokens: int, max_context: int) -> "TokenTables":
        hw, timing = scenario.hardware, scenario.timing
        t = np.arange(1, max_tokens + 1)
        step = get_step_cost(hw, model, workload, t, timing, 0, 1)
        body = _sum_ops(step, lambda op: op.kind not in ATTENTION_KINDS and op.name not in HEAD_OPS)
        body = np.concatenate([[0.0], np.broadcast_to(body + step.step_overhead_s + step.engine_s, t.shape)])
        head = np.concatenate([[0.0], np.broadcast_to(_sum_ops(step, lambda op: op.name in HEAD_OPS), t.shape)])
        context = get_context_grid(max_context)
        chunks = get_geometric_grid(max_tokens, 16)
        attention_step = get_step_cost(hw, model, workload, chunks[None, :], timing, context[:, None], 1)
        attention = _sum_ops(attention_step, lambda op: op.kind in ATTENTION_KINDS)
        attention = np.broadcast_to(attention, (context.size, chunks.size)).copy()
        return cls(body, head, context.tolist(), chunks.tolist(), attention)

    @cached_property
    def _lists(self) -> tuple[list, list, list]:
        """body, head and chunk attention as Python lists: scalar lookups on them are several times faster than on
        numpy arrays, and float arithmetic is the same IEEE double arithmetic, so prices are identical."""
        return self.body_s.tolist(), self.head_s.tolist(), self.chunk_attention_s.tolist()

    @cached_property
    def _chunk_cache(self) -> dict:
        return {}

    def get_chunk_attention_s(self, context_tokens: float, chunk_tokens: float) -> float:
        cache = self._chunk_cache  # workloads repeat (context, chunk) pairs: fresh prompts of the same length
        price = cache.get((context_tokens, chunk_tokens))
        if price is None:
            i, wi = _bracket(self.chunk_context, context_tokens)
            j, wj = _bracket(self.chunk_tokens, chunk_tokens)
            a = self._lists[2]
            i1, j1 = min(i + 1, len(a) - 1), min(j + 1, len(a[0]) - 1)
            price = (1 - wi) * ((1 - wj) * a[i][j] + wj * a[i][j1]) + wi * ((1 - wj) * a[i1][j] + wj * a[i1][j1])
            if len(cache) >= CHUNK_CACHE_SIZE:
                cache.clear()
            cache[(context_tokens, chunk_tokens)] = price
        return price


class StepPricer:
    """Prices serving steps for one Scenario; built once per simulation (tables over batch x context x k)."""

    def __init__(self, scenario: Scenario, max_batch: int, max_tokens: int, max_context: int, max_k: int):
        self.scenario = scenario
        self.max_k = max_k
        self.batch_grid = get_geometric_grid(max_batch, DENSE_BATCH)
        self.context_grid = get_context_grid(max_context)
        self.k_grid = np.arange(max_k + 1)
        w = scenario.workload
        if scenario.drafter is not None and max_k > 0:
            grid = price_speculation(scenario, self.batch_grid[:, None, None], self.context_grid[None, :, None],
                                     self.k_grid[None, None, :])
            shape = (self.batch_grid.size, self.context_grid.size, self.k_grid.size)
            self.decode_step_s = np.broadcast_to(grid.step_time_s, shape).copy()
            acceptance = scenario.acceptance
            alpha = None if acceptance.alphas is None else acceptance.alphas[0]
            if scenario.tree is not None:
                self.expected_tokens = get_tree_expected_tokens(scenario.tree, self.k_grid, alpha,
                                                                acceptance.per_position)
            else:
                self.expected_tokens = get_expected_tokens(self.k_grid, alpha, acceptance.per_position)
        else:
            step = get_step_cost(scenario.hardware, scenario.model, w, 1, scenario.timing,
                                     self.context_grid[None, :], self.batch_grid[:, None])
            self.decode_step_s = np.broadcast_to(step.step_time_s, (self.batch_grid.size, self.context_grid.size)
                                                 )[:, :, None].copy()
            self.expected_tokens = np.ones(1)
        self.target = TokenTables.build(scenario, scenario.model, w, max_tokens, max_context)
        drafter = scenario.drafter
        self.draft = (TokenTables.build(scenario, drafter.model, scenario.draft_workload, max_tokens, max_context)
                      if drafter is not None and drafter.kind == "model" and max_k > 0 else None)
        self._batch_list, self._context_list = self.batch_grid.tolist(), self.context_grid.tolist()
        self._batch_index = {b: i for i, b in enumerate(self._batch_list)}
        self._decode_lists = self.decode_step_s.tolist()  # [batch][context][k], for scalar lookups
        self._rows: dict = {}
        #: what a deployed draft model's prefill adds to the target's, per prompt token (the draft's body / the
        #: target's at the largest step): the most its catch-up can add to a speculating step's cost per token
        self.draft_prefill_ratio = (float(self.draft.body_s[-1] / self.target.body_s[-1])
                                    if self.draft is not None and self.target.body_s[-1] > 0 else 0.0)

    def get_decode_step_s(self, batch: int, context_tokens: float) -> np.ndarray:
        """Speculative step time over k = 0..max_k for a decode group (interpolated in batch and context)."""
        j, wj = _bracket(self._context_list, context_tokens)
        t = self.decode_step_s
        j1 = min(j + 1, t.shape[1] - 1)
        i = self._batch_index.get(batch)
        if i is not None:  # a batch on the grid (every batch up to DENSE_BATCH): interpolate in context only
            return (1 - wj) * t[i, j] + wj * t[i, j1]
        i, wi = _bracket(self._batch_list, batch)
        i1 = min(i + 1, t.shape[0] - 1)
        return (1 - wi) * ((1 - wj) * t[i, j] + wj * t[i, j1]) + wi * ((1 - wj) * t[i1, j] + wj * t[i1, j1])

    def get_decode_time_s(self, batch: int, context_tokens: float, k: int) -> float:
        """`get_decode_step_s(batch, context_tokens)[k]` as a Python float, by the same arithmetic on Python lists
        (the simulator's per-step lookup)."""
        j, wj = _bracket(self._context_list, context_tokens)
        t = self._decode_lists
        j1 = min(j + 1, len(self._context_list) - 1)
        i = self._batch_index.get(batch)
        if i is not None:
            return (1 - wj) * t[i][j][k] + wj * t[i][j1][k]
        i, wi = _bracket(self._batch_list, batch)
        i1 = min(i + 1, len(t) - 1)
        return ((1 - wi) * ((1 - wj) * t[i][j][k] + wj * t[i][j1][k])
                + wi * ((1 - wj) * t[i1][j][k] + wj * t[i1][j1][k]))

    def get_decode_row(self, batch: int, k: int) -> np.ndarray:
        """Step times over the context grid for one batch (interpolated in batch) and one k (cached)."""
        row = self._rows.get((batch, k))
        if row is None:
            t = self.decode_step_s
            i = self._batch_index.get(batch)
            if i is not None:
                row = t[i, :, k].copy()
            else:
                i, wi = _bracket(self._batch_list, batch)
                row = (1 - wi) * t[i, :, k] + wi * t[min(i + 1, t.shape[0] - 1), :, k]
            self._rows[(batch, k)] = row
        return row

    def get_draft_catch_up_s(self, contexts, tokens) -> float:
        """A deployed draft model prefilling tokens it missed while it was idle (`tokens` per request, each after
        `contexts` cached ones), in chunks of the token tables' size; 0 without a draft model."""
        if self.draft is None:
            return 0.0
        body, _, _ = self.draft._lists
        top = len(body) - 1
        total = int(sum(tokens))
        time = (total // top) * body[top] + body[total % top] if top else 0.0
        return time + sum(self.draft.get_chunk_attention_s(s, c) for s, c in zip(contexts, tokens) if c > 0)

    def get_step_time_s(self, n_decode: int, decode_context: float, k: int, chunk_contexts, chunk_tokens,
                        n_finishing: int, draft_prefills: bool) -> float:
        """One serving step: `n_decode` sequences at mean cached context `decode_context` verifying k + 1 tokens
        each after k draft steps, plus prefill chunks (their cached contexts and lengths), `n_finishing` of which
        complete their prompt and need logits. `draft_prefills`: a deployed draft model prefills the chunks too."""
        decode_tokens = n_decode * (k + 1)
        time = self.get_decode_time_s(n_decode, decode_context, k) if n_decode else 0.0
        if len(chunk_tokens) == 0:
            return time
        prefill_tokens = int(sum(chunk_tokens))
        tables = [self.target] + ([self.draft] if draft_prefills and self.draft is not None else [])
        for i, table in enumerate(tables):
            base = decode_tokens if i == 0 else 0  # the draft's decode steps are a separate pass: no sharing
            logits = decode_tokens if i == 0 else 0
            body, head, _ = table._lists
            time += body[base + prefill_tokens] - body[base]
            time += head[logits + n_finishing] - head[logits]
            time += sum(table.get_chunk_attention_s(s, c) for s, c in zip(chunk_contexts, chunk_tokens))
        return time


__all__ = ["StepPricer", "TokenTables", "get_geometric_grid", "get_context_grid", "HEAD_OPS"]
