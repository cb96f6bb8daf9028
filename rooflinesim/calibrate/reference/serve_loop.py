"""A measured serving loop: continuous batching over the torch decoders of `calibrate/reference/model.py` on the local device,
scheduled by the rules the simulator models (`serve/engine.py`), so that `rooflinesim validate --serve` can compare
its TTFT and TPOT with `serve.simulate` on the same requests.

Scheduling, one engine step at a time (engine.py's rules; no KV blocks: every slot holds a whole request, and a
measured profile's memory leaves the simulator nothing to preempt either):

- at most `max_num_seqs` running requests and `max_num_batched_tokens` new tokens per step;
- running requests first: the decodes (1 + k tokens each, k lowered until they fit the budget), then prefills in
  progress, in admission order, each taking what is left of the budget (chunked prefill, mixed with the decodes);
  then waiting requests FCFS while budget and slots remain. A request waits only once its arrival time (wall clock
  since the start) has passed; with nothing to run the loop sleeps until the next arrival;
- a chunk that completes its prompt emits the first token at the end of its step; a decode emits its accepted
  drafts + 1 (capped at the output length); finished requests leave at the end of the step.

A step runs as a serving engine runs it:

- the decoding requests sit in cache slots 0..n-1 (one that starts decoding is swapped into place, its KV rows
  copied), so the decode group is one batched attention call;
- with k drafts: k draft-model steps over the decode group, each sampling one token per sequence (the first step
  reads the last two committed tokens, so a sequence whose k drafts were all accepted catches up without a pass);
- one packed target forward (`Decoder.forward_packed`) over the decode group's 1 + k tokens and every prefill chunk,
  the linears once over all tokens, attention per group, logits for the decode tokens and for the last position of
  the chunks that finish a prompt; a deployed draft model prefills the same chunks (its own packed forward);
- the exact rule per sequence at the temperature (`sampling.exact_rule`), all sampling batched.

Times are `time.perf_counter()` from the loop's start, taken around whole iterations (scheduling and sampling
included: they are part of what a user waits for); the arrival times are the requests' own.
"""

from __future__ import annotations

import gc
import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import torch

from ...serve.metrics import ServeResult
from ...serve.workload import Requests
from ...errors import InputError
from .model import Decoder, pack
from .sampling import exact_rule, probabilities, sample

BLOCK_TOKENS = 16  # the KV-occupancy column of the timeline counts 16-token blocks, as the simulator does


@dataclass(frozen=True)
class LoopConfig:
    max_num_seqs: int = 8
    max_num_batched_tokens: int = 256
    k: int = 0  # drafts per step (0: no speculation, no draft model deployed)
    temperature: float = 1.0
    seed: int = 0

    @property
    def policy(self) -> str:
        return f"fixed:{self.k}" if self.k else "off"


@dataclass
class LoopResult:
    """What the loop measured: per request (arrays in request order) and per step."""

    config: LoopConfig
    requests: Requests
    first_token_s: np.ndarray
    finish_s: np.ndarray
    generated: np.ndarray
    timeline: np.ndarray  # per step, serve.metrics.TIMELINE_COLUMNS
    steps: list = field(default_factory=list)  # per step: (decodes, mean decode context, k, chunk contexts,
    #                                              chunk tokens, chunks finishing, seconds, seconds in the models)
    itl_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    accepted: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # per decode and step
    kv_blocks: int = 1
    wall_s: float = 0.0
    tokens: list = field(default_factory=list)  # the output token ids of each request

    def to_serve_result(self, hardware: str, model: str, draft: str | None) -> ServeResult:
        """The measurement in the simulator's result type, so both sides go through the same metric code."""
        c, r = self.config, self.requests
        return ServeResult(hardware, model, draft if c.k else None, c.policy, c.max_num_seqs, c.max_num_batched_tokens,
                           self.kv_blocks, r.arrival_s, r.prompt_tokens, r.output_tokens, self.first_token_s,
                           self.finish_s, np.zeros(r.count, dtype=np.int64), self.timeline, self.itl_s)


class ServingLoop:
    """Slots and caches for `max_num_seqs` requests on a target (and a draft) decoder; `run(requests)` serves them."""

    def __init__(self, target: Decoder, draft: Decoder | None, config: LoopConfig, max_tokens: int):
        if config.k and draft is None:
            raise InputError(f"policy {config.policy} needs a draft model")
        if config.max_num_batched_tokens < config.max_num_seqs:
            raise InputError("max_num_batched_tokens must be at least max_num_seqs")
        self.target, self.config, self.max_tokens = target, config, max_tokens
        self.draft = draft if config.k else None
        self.models = [m for m in (target, self.draft) if m is not None]
        self.vocab = min(m.spec.vocab_size for m in self.models)
        for m in self.models:
            m.setup_caches(config.max_num_seqs, max_tokens)
        device = target.embed.weight.device
        self.device = device
        self.owner = [-1] * config.max_num_seqs  # request in each slot
        self.last = torch.zeros(config.max_num_seqs, dtype=torch.long, device=device)  # newest token, not yet read
        self.prev = torch.zeros_like(self.last)  # the token before it (read by the first draft step)
        self.generator = torch.Generator(device=device).manual_seed(config.seed)

    # --- cache slots ------------------------------------------------------------------------------------------------

    def _move(self, src: int, dst: int, length: int) -> None:
        """Swap the contents of two slots (their first `length` positions) in every model's caches."""
        for m in self.models:
            for layer in m.layers:
                for buf in (layer.attn.cache.k, layer.attn.cache.v):
                    held = buf[dst, :, :length].clone()
                    buf[dst, :, :length] = buf[src, :, :length]
                    buf[src, :, :length] = held
        for t in (self.last, self.prev):
            t[[src, dst]] = t[[dst, src]]
        self.owner[src], self.owner[dst] = self.owner[dst], self.owner[src]

    def _place_decodes(self, decodes: list[int], slot: dict, computed: np.ndarray) -> list[int]:
        """Swap the decoding requests into slots 0..n-1; returns them in slot order."""
        n, inside = len(decodes), set(decodes)
        outside = [r for r in decodes if slot[r] >= n]
        holes = [s for s in range(n) if self.owner[s] not in inside]
        for r, s in zip(outside, holes):
            other = self.owner[s]
            length = int(max(computed[r], computed[other] if other >= 0 else 0)) + 2
            src = slot[r]
            self._move(src, s, min(length, self.max_tokens))
            slot[r] = s
            if other >= 0:
                slot[other] = src
        return self.owner[:n]

    # --- one step ---------------------------------------------------------------------------------------------------

    def _draft_tokens(self, n: int, cur: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """k drafts [n, k] and their probability rows [n, k, V] for slots 0..n-1."""
        feed, at, drafts, q_rows = torch.stack([self.prev[:n], self.last[:n]], 1), cur - 1, [], []
        for _ in range(k):
            q = feed.shape[1]
            logits = self.draft.forward_packed(pack([(0, feed, at)]), torch.arange(q - 1, n * q, q))
            probs = probabilities(logits[:, :self.vocab], self.config.temperature, torch.float32)
            token = sample(probs, self.generator)
            drafts.append(token)
            q_rows.append(probs)
            at, feed = at + q, token[:, None]
        return torch.stack(drafts, 1), torch.stack(q_rows, 1)

    def run(self, requests: Requests, prompts: list[torch.Tensor]) -> LoopResult:
        c = self.config
        n_req = requests.count
        prompt, output, arrival = requests.prompt_tokens, requests.output_tokens, requests.arrival_s
        if int((prompt + output).max()) + 2 * c.k + 2 > self.max_tokens:
            raise InputError(f"a request needs more than the {self.max_tokens} cached positions the loop holds")
        computed = np.zeros(n_req, dtype=np.int64)
        generated = np.zeros(n_req, dtype=np.int64)
        first_token_s, finish_s, last_emit_s = np.full(n_req, np.nan), np.full(n_req, np.nan), np.zeros(n_req)
        prefilling = np.ones(n_req, dtype=bool)
        slot: dict[int, int] = {}
        running: list[int] = []
        waiting: deque[int] = deque()
        timeline, steps, itl, accepted_all = [], [], [], []
        tokens: list[list[int]] = [[] for _ in range(n_req)]
        next_arrival, budget_total = 0, c.max_num_batched_tokens
        gc.collect()
        gc.disable()  # no collector pauses inside the timed loop
        t0 = time.perf_counter()
        try:
            while next_arrival < n_req or running or waiting:
                now = time.perf_counter() - t0
                while next_arrival < n_req and arrival[next_arrival] <= now:
                    waiting.append(next_arrival)
                    next_arrival += 1
                if not running and not waiting:
                    time.sleep(max(float(arrival[next_arrival]) - now, 0.0))
                    continue
                # schedule (serve/engine.py's order): decodes, prefills in progress, then admissions
                decodes = [r for r in running if not prefilling[r]][:budget_total]
                k = min(c.k, budget_total // len(decodes) - 1) if decodes else 0
                budget = budget_total - len(decodes) * (k + 1)
                chunks = []  # (request, chunk tokens)
                for r in running:
                    if prefilling[r] and budget > 0:
                        chunks.append((r, int(min(prompt[r] - computed[r], budget))))
                        budget -= chunks[-1][1]
                while waiting and budget > 0 and len(running) < c.max_num_seqs:
                    r = waiting.popleft()
                    slot[r] = self.owner.index(-1)
                    self.owner[slot[r]] = r
                    running.append(r)
                    chunks.append((r, int(min(prompt[r], budget))))
                    budget -= chunks[-1][1]
                decodes = self._place_decodes(decodes, slot, computed)
                n = len(decodes)
                began = time.perf_counter()
                # the models
                cur_np = computed[decodes]
                cur = torch.as_tensor(cur_np, device=self.device)
                if k:
                    drafts, q_rows = self._draft_tokens(n, cur, k)
                    verify = torch.cat([self.last[:n, None], drafts], 1)
                else:
                    verify = self.last[:n, None]
                parts = [(0, verify, cur)] if n else []
                finishing, rows = [], list(range(n * (k + 1)))
                offset = n * (k + 1)
                for r, chunk in chunks:
                    start = int(computed[r])
                    ids = prompts[r][start:start + chunk][None]
                    parts.append((slot[r], ids, torch.tensor([start], device=self.device)))
                    offset += chunk
                    if start + chunk >= prompt[r]:
                        finishing.append(r)
                        rows.append(offset - 1)
                logits = self.target.forward_packed(pack(parts), torch.tensor(rows, device=self.device))
                if self.draft is not None and chunks:
                    self.draft.forward_packed(pack(parts[1:] if n else parts))
                modelled = time.perf_counter() - began
                probs = None if logits is None else probabilities(logits[:, :self.vocab], c.temperature,
                                                                  torch.float32)
                if n and k:
                    n_acc, next_token = exact_rule(probs[:n * (k + 1)].view(n, k + 1, -1), q_rows, drafts,
                                                   self.generator)
                elif n:
                    n_acc, next_token = torch.zeros(n, dtype=torch.long), sample(probs[:n], self.generator)
                first = sample(probs[n * (k + 1):], self.generator) if finishing else None
                end = time.perf_counter() - t0
                # commit
                if n:
                    n_acc_np = n_acc.cpu().numpy()
                    accepted_all.append(n_acc_np)
                    emitted = np.minimum(n_acc_np + 1, output[decodes] - generated[decodes])
                    if k:
                        pick = torch.as_tensor(np.maximum(n_acc_np - 1, 0), device=self.device)
                        self.prev[:n] = torch.where(n_acc > 0, drafts[torch.arange(n), pick], self.last[:n])
                    else:
                        self.prev[:n] = self.last[:n]
                    self.last[:n] = next_token
                    new = next_token.tolist()
                    drafted = drafts.tolist() if k else [[]] * n
                    for j, r in enumerate(decodes):
                        tokens[r] += (drafted[j][:n_acc_np[j]] + [new[j]])[:emitted[j]]
                    computed[decodes] += emitted
                    generated[decodes] += emitted
                    itl.append(end - last_emit_s[decodes])
                    last_emit_s[decodes] = end
                chunk_context = [int(computed[r]) for r, _ in chunks]
                for r, chunk in chunks:
                    computed[r] += chunk
                for i, r in enumerate(finishing):
                    prefilling[r] = False
                    self.prev[slot[r]], self.last[slot[r]] = prompts[r][-1], first[i]
                    first_token_s[r] = last_emit_s[r] = end
                    generated[r] = 1
                    tokens[r].append(int(first[i]))
                blocks = int(sum(-(-int(computed[r]) // BLOCK_TOKENS) for r in running))
                timeline.append((now, end - now, len(running), len(waiting), blocks, k,
                                 n * (k + 1) + sum(ch for _, ch in chunks)))
                steps.append((n, float(cur_np.mean()) if n else 0.0, k, chunk_context, [ch for _, ch in chunks],
                              len(finishing), end - now, modelled))
                for r in [r for r in decodes + finishing if generated[r] >= output[r]]:
                    finish_s[r] = end
                    self.owner[slot.pop(r)] = -1
                    running.remove(r)
        finally:
            gc.enable()
        wall = time.perf_counter() - t0
        return LoopResult(c, requests, first_token_s, finish_s, generated, np.asarray(timeline, dtype=float).reshape(
            -1, 7), steps, np.concatenate(itl) if itl else np.zeros(0),
            np.concatenate(accepted_all) if accepted_all else np.zeros(0, dtype=np.int64),
            c.max_num_seqs * -(-self.max_tokens // BLOCK_TOKENS), wall, tokens)


def make_prompts(requests: Requests, vocab: int, seed: int, device=None) -> list[torch.Tensor]:
    """Random token ids for each request's prompt (the models' weights are random too)."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (int(p),), generator=g).to(device) for p in requests.prompt_tokens]


@torch.inference_mode()
def warm_up(loop: ServingLoop, prompt_tokens: int) -> None:
    """Run every decode-group size and a few chunk lengths once before the clock starts (allocations, kernel
    selection); the slots' contents are overwritten by the requests' own prefills."""
    c = loop.config
    for n in range(1, c.max_num_seqs + 1):
        cur = torch.full((n,), 4, device=loop.device)
        if c.k:
            loop._draft_tokens(n, cur, c.k)
        loop.target.forward_packed(pack([(0, torch.zeros(n, c.k + 1, dtype=torch.long, device=loop.device), cur)]),
                                   torch.arange(n * (c.k + 1)))
    for chunk in sorted({16, min(prompt_tokens, c.max_num_batched_tokens), c.max_num_batched_tokens}):
        part = [(0, torch.zeros(1, chunk, dtype=torch.long, device=loop.device), torch.zeros(1, dtype=torch.long))]
        for m in loop.models:
            m.forward_packed(pack(part), torch.tensor([chunk - 1]))


@torch.inference_mode()
def run_serving_loop(target: Decoder, draft: Decoder | None, requests: Requests, config: LoopConfig,
                     prompt_seed: int = 0) -> LoopResult:
    """Serve `requests` (arrival times from now) on the local device; see the module docstring."""
    max_tokens = int((requests.prompt_tokens + requests.output_tokens).max()) + 2 * config.k + 2
    loop = ServingLoop(target, draft, config, max_tokens)
    warm_up(loop, int(np.median(requests.prompt_tokens)))
    return loop.run(requests, make_prompts(requests, loop.vocab, prompt_seed, loop.device))


__all__ = ["LoopConfig", "LoopResult", "ServingLoop", "run_serving_loop", "make_prompts", "warm_up"]
