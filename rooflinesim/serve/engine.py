"""The discrete-event loop of one serving instance (a TP group), one event per engine step, modelled on vLLM V1's
continuous-batching scheduler (its configuration, `ServeConfig`, is in config.py):

- each step has a budget of `max_num_batched_tokens` new tokens and at most `max_num_seqs` running requests;
  running requests are served first (decodes, then prefills in progress), then waiting requests are admitted in
  arrival order (FCFS) while the budget, the sequence limit and free KV blocks allow; prompts longer than what is
  left of the budget are prefilled in chunks (chunked prefill, mixed with the decodes in the same step);
- a decoding request verifies 1 + k tokens (its last token and k drafts) and so takes 1 + k entries of the token
  budget; its KV cache must hold its context + 1 + k tokens + k lookahead slots for the next step's drafts
  (vLLM's `num_lookahead_tokens`), in blocks of `block_size` tokens; when the batch's decodes do not fit the budget
  with k drafts, k is lowered until they do;
- when the blocks run out the most recently admitted running request is preempted by recompute: its blocks are
  freed and it goes back to the front of the queue, to prefill its prompt and its output so far again;
- with `multi_step` N (vLLM V0's --num-scheduler-steps) a decode step opens a window of N decode steps of the same
  batch: nothing is prefilled or admitted until it closes; with `async_output` a step's tokens reach the client when
  the next step ends (serve/output.py); with `frontend_s` a request reaches the scheduler that long after it is sent
  (the API server's tokenization and hand-over), which its TTFT and latency count;
- the KV capacity is what `Scenario.get_memory_fit` leaves: memory - weights (target, and a deployed draft model's)
  - the activations of the largest decode step, divided by the KV bytes per token (target + draft).

Acceptance is sampled per request and step from the scenario's per-position (conditional) rates, so each request's
progress, and the latency tails, are random; everything random comes from one seeded numpy Generator.
"""

from __future__ import annotations

from collections import deque
from itertools import chain, repeat
from dataclasses import replace

import numpy as np

from ..scenario.builder import Scenario
from ..errors import InputError
from .config import ServeConfig
from .metrics import ServeResult
from .decode_run import DecodeRun, TreeSampler, plan_decode_run, sample_accepted
from .admission import _admissible, _speculation_pays_catch_up, _whole_request_blocks, get_window_left
from .policies import Policy, get_policy_k_bound, parse_policy
from .output import StreamedOutput
from .pricing import StepPricer
from .workload import Requests

#: per-step decay of the recent prefill / decode time an on-demand policy weighs speculation against (~100 steps)
RECENT_DECAY = 0.99


def get_kv_capacity_blocks(scenario: Scenario, policy: Policy, config: ServeConfig) -> tuple[int, float]:
    """KV blocks that fit, and the KV bytes per token (target + a deployed draft model), per device.

    The memory model is predict's (`Scenario.get_memory_fit`): capacity - weights - the activations of the largest
    decode step (max_num_seqs sequences verifying max_k + 1 tokens, fp32 logits included), as `get_max_batch`
    reserves them for its batch. A prefill chunk's transient activations are taken to fit in the same reserve
    (engines compute logits only for the positions they sample, so a chunk's logits are small).
    """
    deployed = scenario if policy.deployed and scenario.drafter is not None else replace(
        scenario, drafter=None, draft_workload=None)
    fixed = 0.0
    if deployed.drafter is not None and deployed.drafter.kind == "self":
        # a self draft's bounded cache is a fixed size per running sequence, not per token: held for max_num_seqs
        # of them up front, and the target's cache is priced alone per token
        from ..scenario.drafting import get_self_draft_kv_bytes

        budget = deployed.drafter.kv_budget_tokens or 0
        fixed = float(np.asarray(get_self_draft_kv_bytes(deployed, config.max_num_seqs, budget, 0)))
        deployed = replace(deployed, drafter=None, draft_workload=None)
    one_token = deployed.get_memory_fit(1, 0, 0)  # one sequence of one position: the KV bytes per token
    largest_step = deployed.get_memory_fit(config.max_num_seqs, 0, policy.max_k)
    per_token = float(np.asarray(one_token.kv_cache_bytes))
    free = (one_token.capacity_bytes - one_token.weight_bytes - float(np.asarray(largest_step.activation_bytes))
            - fixed)
    blocks = int(max(free, 0) // (per_token * config.block_size))
    return blocks, per_token


def _acceptance_rates(scenario: Scenario, max_k: int):
    """Per-position rates of a chain (an array), or a `TreeSampler` for a tree."""
    acceptance = scenario.acceptance
    if scenario.tree is not None and acceptance is not None:
        return TreeSampler.build(scenario)
    if acceptance is None:
        return np.zeros(max_k)
    if acceptance.per_position is not None:
        return np.asarray(acceptance.per_position[:max_k], dtype=float)
    if len(acceptance.alphas) != 1:
        raise InputError("serve takes one acceptance rate (--alpha) or per-position rates, not a list")
    return np.full(max_k, acceptance.alphas[0])


def _apply_decode_run(plan: DecodeRun, dec, now, free_blocks, total_blocks, computed, generated, blocks, last_emit_s,
                      itl_chunks, trace_rows) -> tuple[float, int, np.ndarray]:
    """Commit a planned run of decode steps to the engine state; returns the new time, the free blocks and the tokens
    each request committed."""
    ends = plan.ends_s
    starts = ends - plan.step_s
    committed = np.add.reduce(plan.emitted, axis=0)
    computed[dec] += committed
    generated[dec] += committed
    gaps = plan.step_s.repeat(dec.size)  # one gap per request and step, step by step
    gaps[:dec.size] = ends[0] - last_emit_s[dec]
    itl_chunks.append(gaps)
    last_emit_s[dec] = ends[-1]
    blocks[dec] += plan.block_growth[-1]
    held = plan.blocks_grown + (total_blocks - free_blocks)
    batch, k = int(dec.size), plan.k
    trace_rows.extend(zip(starts.tolist(), plan.step_s.tolist(), repeat(batch), repeat(0), held.tolist(), repeat(k),
                          repeat(batch * (k + 1))))
    return float(ends[-1]), free_blocks - int(plan.blocks_grown[-1]), committed


def _release(arrival: np.ndarray, released: int, count: int, time_s: float) -> int:
    """Closed loop: `count` clients whose requests just finished send their next ones now (no think time)."""
    m = min(count, arrival.size - released)
    arrival[released:released + m] = time_s
    return released + m


def simulate(scenario: Scenario, requests: Requests, policy: Policy | str, config: ServeConfig = ServeConfig(),
             pricer: StepPricer | None = None, concurrency: int | None = None) -> ServeResult:
    """Replay `requests` through one serving instance of `scenario` under `policy`; deterministic under the seed.

    `concurrency` C: a closed loop instead of the requests' arrival times. C clients each send a request at t = 0
    and their next one the moment the last finishes (no think time), as `benchmark_serving --max-concurrency` and
    SGLang's `bench_serving` drive an engine; the result's arrival times are those sends."""
    config = config.check()
    if isinstance(policy, str):
        policy = parse_policy(policy, get_policy_k_bound(scenario))
    if scenario.tree is not None and not policy.drops_tree and not policy.plannable:
        raise InputError(f"policy {policy.name!r} learns a chain's i.i.d. rate from its outcomes; with a draft tree use "
                         "fixed:K (K tree tokens) or dynamic[:KMAX]")
    if policy.drops_tree and scenario.tree is not None:  # `chain:K` beside a tree: the same engine drafting a chain
        scenario = replace(scenario, tree=None)
        rates = scenario.acceptance.per_position
        if rates is not None and policy.max_k > len(rates):
            raise InputError(f"policy {policy.name!r} needs {policy.max_k} per-position rates, got {len(rates)}")
    if policy.max_k > 0 and scenario.drafter is None:
        raise InputError(f"policy {policy.name!r} speculates but the scenario has no drafter")
    bs = config.block_size
    total_blocks, _ = get_kv_capacity_blocks(scenario, policy, config)
    prompt, output, arrival = requests.prompt_tokens, requests.output_tokens, requests.arrival_s
    longest = int((prompt + output).max()) + 2 * policy.max_k + 1
    if -(-longest // bs) > total_blocks:
        raise InputError(f"the longest request ({longest:,} tokens with drafts) needs {-(-longest // bs):,} KV blocks "
                         f"but only {total_blocks:,} fit in memory")
    if pricer is None:
        pricer = StepPricer(scenario, config.max_num_seqs, config.max_num_batched_tokens, longest, policy.max_k)
    rng = np.random.default_rng(config.seed)
    rates = _acceptance_rates(scenario, policy.max_k)
    draft_prefills = policy.deployed and scenario.drafter is not None and scenario.drafter.kind == "model"
    on_demand = draft_prefills and policy.draft_on_demand
    policy.saturated, policy.prefill_per_decode = False, 0.0
    recent_prefill_s, recent_decode_s = 0.0, 1e-12  # decayed sums of the steps' prefill and decode time
    speculating = True  # an on-demand draft prefills new prompts while the policy's last decision drafted

    n = requests.count
    closed = concurrency is not None
    if closed:
        if isinstance(concurrency, bool) or not isinstance(concurrency, (int, np.integer)) or concurrency < 1:
            raise InputError(f"concurrency must be a positive integer, got {concurrency!r}")
        arrival = np.full(n, np.inf)
        released = _release(arrival, 0, int(concurrency), 0.0)
    computed = np.zeros(n, dtype=np.int64)  # tokens whose KV is cached
    target = prompt.astype(np.int64).copy()  # tokens to prefill before the next emission (prompt, or + output)
    generated = np.zeros(n, dtype=np.int64)
    blocks = np.zeros(n, dtype=np.int64)
    first_token_s = np.full(n, np.nan)
    finish_s = np.full(n, np.nan)
    last_emit_s = np.zeros(n)
    preemptions = np.zeros(n, dtype=np.int64)
    prefilling = np.ones(n, dtype=bool)
    draft_missing = np.zeros(n, dtype=np.int64)  # tokens an on-demand draft model has not processed (policies.py)

    running: list[int] = []  # in admission order (the last one is preempted first)
    waiting: deque[int] = deque()
    next_arrival, free_blocks, now = 0, total_blocks, 0.0
    trace_rows: list[tuple] = []  # per step: start, duration, running, waiting, used blocks, k, tokens
    itl_chunks: list[np.ndarray] = []
    budget_total, max_seqs = config.max_num_batched_tokens, config.max_num_seqs
    membership_changed = True
    prefill_first, no_evict = config.step_policy == "prefill-first", config.admission == "no-evict"
    window_left = 0  # decode steps left in the current multi-step window (no prefill, no admission until it ends)
    streamed = StreamedOutput(first_token_s, finish_s, config.async_output and policy.max_k == 0)
    frontend_s = config.frontend_s  # a request reaches the scheduler this long after it is sent (TTFT counts it)

    while next_arrival < n or running or waiting:
        while next_arrival < n and arrival[next_arrival] + frontend_s <= now:
            waiting.append(next_arrival)
            next_arrival += 1
        if not running and not waiting:
            now = float(arrival[next_arrival]) + frontend_s
            continue
        if membership_changed:  # the running set or a phase changed since the last step
            run = np.asarray(running, dtype=np.int64)
            in_prefill = prefilling[run]
            all_dec, all_pre = run[~in_prefill], run[in_prefill]
            membership_changed = False
        catching_up = on_demand and bool(all_dec.size) and bool(draft_missing[all_dec].any())
        if all_dec.size and not all_pre.size and not waiting and policy.plannable and not catching_up:
            remaining = output[all_dec] - generated[all_dec]  # fast path: a run of decodes
            plan = plan_decode_run(computed[all_dec], remaining, blocks[all_dec], free_blocks, now,
                                   float(arrival[next_arrival]) + frontend_s if next_arrival < n else np.inf,
                                   policy, pricer, rng, rates, bs, budget_total)
            if plan is not None:
                streamed.step_runs(now, float(plan.ends_s[0]))
                now, free_blocks, committed = _apply_decode_run(plan, all_dec, now, free_blocks, total_blocks, computed,
                                                                generated, blocks, last_emit_s, itl_chunks, trace_rows)
                window_left = get_window_left(window_left, plan.steps, config.multi_step)
                if on_demand:
                    speculating = plan.k > 0
                    if plan.k == 0:  # the idle draft did not follow these tokens
                        draft_missing[all_dec] += committed
                    recent_prefill_s *= RECENT_DECAY ** plan.steps
                    recent_decode_s = recent_decode_s * RECENT_DECAY ** plan.steps + float(plan.step_s.sum())
                    policy.prefill_per_decode = recent_prefill_s / recent_decode_s
                finished = all_dec[committed >= remaining]  # only at the run's last step
                if finished.size:
                    streamed.produced(finished[:0], finished, now)
                    if closed:
                        released = _release(arrival, released, finished.size, now)
                    free_blocks += int(blocks[finished].sum())
                    blocks[finished] = 0
                    gone = set(finished.tolist())
                    running = [r for r in running if r not in gone]
                    membership_changed = True
                continue
        dec, pre = all_dec, all_pre
        in_window = window_left > 0 and bool(dec.size)
        if in_window:  # inside a multi-step window only the batch's decodes run
            pre = pre[:0]
        elif prefill_first and dec.size and (pre.size or (waiting and len(running) < max_seqs and _admissible(
                waiting[0], target, prompt, output, generated, budget_total, bs, free_blocks, no_evict, policy.max_k))):
            dec = dec[:0]  # prompts to prefill run alone: the decodes wait for the next step
        k, decode_context = 0, 0.0
        if dec.size:
            if dec.size > budget_total:
                dec = dec[:budget_total]
            decode_context = float(np.add.reduce(computed[dec])) / dec.size
            k = policy.choose_k(int(dec.size), decode_context, pricer)
            k = int(min(k, budget_total // dec.size - 1))
            if on_demand:  # the policy's intent, whether or not the draft catches up this step
                speculating = k > 0
            if on_demand and k and not _speculation_pays_catch_up(pricer, k, int(dec.size), decode_context,
                                                                  draft_missing[dec], computed[dec],
                                                                  output[dec] - generated[dec]):
                k = 0
        budget = budget_total - dec.size * (k + 1)
        chunk = pre
        if pre.size:  # prefills in progress, in admission order, take what is left of the budget
            left = target[pre] - computed[pre]
            chunk = np.minimum(left, np.maximum(budget - (np.add.accumulate(left) - left), 0))
            keep = chunk > 0
            pre, chunk = pre[keep], chunk[keep]
            budget -= int(np.add.reduce(chunk))
        # KV blocks for what is scheduled (ceil divisions); preempt the latest-admitted running request until they fit
        preempted = False
        while True:
            grow_dec = np.maximum((computed[dec] + (2 * k + bs)) // bs - blocks[dec], 0)
            grow_pre = np.maximum((computed[pre] + chunk + (bs - 1)) // bs - blocks[pre], 0) if pre.size else pre
            grown = int(np.add.reduce(grow_dec) + np.add.reduce(grow_pre))
            if grown <= free_blocks:
                break
            victim = running.pop()
            preempted = membership_changed = True
            free_blocks += int(blocks[victim])
            blocks[victim] = 0
            target[victim] = prompt[victim] + generated[victim]
            computed[victim] = 0
            draft_missing[victim] = 0
            prefilling[victim] = True
            preemptions[victim] += 1
            waiting.appendleft(victim)
            dec, pre_mask = dec[dec != victim], pre != victim
            pre, chunk = pre[pre_mask], chunk[pre_mask]
            budget = budget_total - dec.size * (k + 1) - int(np.add.reduce(chunk))
        if in_window and not dec.size:  # the window's whole batch was preempted: the window ends
            window_left = 0
            continue
        blocks[dec] += grow_dec
        if pre.size:
            blocks[pre] += grow_pre
        free_blocks -= grown
        # admit waiting requests (FCFS) into what is left of the budget and the blocks
        admitted, admitted_chunks = [], []
        while waiting and budget > 0 and len(running) < max_seqs and not preempted and not in_window:
            # (vLLM admits none after a preemption, nor inside a multi-step window)
            rid = waiting[0]
            c = int(min(target[rid], budget))
            need = -(-c // bs)
            if no_evict:  # reserve the whole request up front: it can never be preempted
                need = _whole_request_blocks(rid, prompt, output, generated, bs, policy.max_k)
            if need > free_blocks:
                break
            waiting.popleft()
            running.append(rid)
            blocks[rid] = need
            free_blocks -= need
            budget -= c
            admitted.append(rid)
            admitted_chunks.append(c)
        if admitted:
            membership_changed = True
            admitted, admitted_chunks = np.array(admitted, dtype=np.int64), np.array(admitted_chunks, dtype=np.int64)
            pre = np.concatenate((pre, admitted)) if pre.size else admitted
            chunk = np.concatenate((chunk, admitted_chunks)) if chunk.size else admitted_chunks
        if not dec.size and not pre.size:  # nothing fits yet (all blocks held by queued work): wait for an arrival
            if next_arrival >= n:
                raise InputError("the scheduler cannot make progress: the KV cache is too small for one request")
            now = float(arrival[next_arrival]) + frontend_s
            continue
        if dec.size and preempted:
            decode_context = float(np.add.reduce(computed[dec])) / dec.size
        pre_computed = computed[pre]
        prefilled = pre_computed + chunk
        finishing = prefilled >= target[pre]
        draft_step = draft_prefills and not (on_demand and (policy.saturated or not speculating))
        step_s = pricer.get_step_time_s(int(dec.size), decode_context, k, pre_computed.tolist(), chunk.tolist(),
                                        int(np.count_nonzero(finishing)), draft_step)
        catch_up_s = 0.0
        if on_demand:
            if pre.size and not draft_step:
                draft_missing[pre] += chunk
            if k and dec.size and draft_missing[dec].any():  # the draft catches up before it drafts again
                missing = draft_missing[dec]
                catch_up_s = pricer.get_draft_catch_up_s((computed[dec] - missing).tolist(), missing.tolist())
                step_s += catch_up_s
                draft_missing[dec] = 0
        end = now + step_s
        streamed.step_runs(now, end)
        fresh = pre[:0]
        # prefill chunks: the ones that complete their prompt emit a token
        leaving = []  # requests that finish this step
        if pre.size:
            computed[pre] = prefilled
            done = pre[finishing]
            if done.size:
                membership_changed = True
                prefilling[done] = False
                fresh = done[np.isnan(first_token_s[done])]
                generated[done] += 1
                last_emit_s[done] = end
                leaving.append(done[generated[done] >= output[done]])
        # decodes: k drafts, accepted ones + one token from the verify are committed (capped at the output length)
        if dec.size:
            if k:
                accepted = sample_accepted(rng, (dec.size,), k, rates)
                policy.observe(k, accepted)
            else:
                accepted = np.zeros(dec.size, dtype=np.int64)
            dec_generated, dec_output = generated[dec], output[dec]
            emitted = np.minimum(accepted + 1, dec_output - dec_generated)
            computed[dec] += emitted
            dec_generated += emitted
            generated[dec] = dec_generated
            itl_chunks.append(end - last_emit_s[dec])
            last_emit_s[dec] = end
            leaving.append(dec[dec_generated >= dec_output])
            window_left = get_window_left(window_left, 1, config.multi_step)
        # finished requests leave and free their blocks
        finished = np.concatenate(leaving) if len(leaving) > 1 else leaving[0] if leaving else pre[:0]
        used_blocks = total_blocks - free_blocks  # during the step, before finished requests free theirs
        if finished.size:
            membership_changed = True
        streamed.produced(fresh, finished, end)
        if finished.size:
            if closed:
                released = _release(arrival, released, finished.size, end)
            free_blocks += int(np.add.reduce(blocks[finished]))
            blocks[finished] = 0
            gone = set(finished.tolist())
            running = [r for r in running if r not in gone]
        trace_rows.append((now, step_s, len(running) + finished.size, len(waiting), used_blocks, k,
                           budget_total - budget))
        if on_demand:
            policy.saturated = bool(waiting)  # requests left waiting after this step's admissions
            # the target's own prefill time: without the draft's catch-up and its share of the chunks' prefill
            decode_s = pricer.get_decode_time_s(int(dec.size), decode_context, k) if dec.size else 0.0
            prefill_s = max(step_s - catch_up_s - decode_s, 0.0) / (1.0 + pricer.draft_prefill_ratio * draft_step)
            recent_decode_s = recent_decode_s * RECENT_DECAY + decode_s
            recent_prefill_s = recent_prefill_s * RECENT_DECAY + prefill_s
            policy.prefill_per_decode = recent_prefill_s / max(recent_decode_s, 1e-12)
            if not k and dec.size:
                draft_missing[dec] += emitted
        now = end

    streamed.flush()
    itl = np.concatenate(itl_chunks) if itl_chunks else np.zeros(0)
    timeline = np.fromiter(chain.from_iterable(trace_rows), dtype=float, count=7 * len(trace_rows)).reshape(-1, 7)
    if closed:
        requests = replace(requests, arrival_s=arrival)
    return ServeResult.build(scenario, policy, config, requests, first_token_s, finish_s, preemptions, timeline, itl,
                             total_blocks)


__all__ = ["simulate", "get_kv_capacity_blocks", "get_window_left"]
