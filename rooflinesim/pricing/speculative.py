"""Speculative decoding on top of the step model: step cost, net speedup, best k and break-even, for a Scenario.

A speculative step = k draft decode steps (the drafter at the same batch and context) + one target verify step over
k + 1 query tokens per sequence, optionally + one more draft pass when all k drafts were accepted (gpt-fast runs it
to fill the draft's KV cache; its expected cost is a^k draft steps). It commits E tokens per sequence on average, so

    speedup = E x T_target_decode / T_speculative_step.

With the verify step costing what a decode step costs and a draft step costing c x T_target_decode, this is exactly
Leviathan et al.'s (1 - a^(k+1)) / ((1 - a)(k c + 1)). k = 0 is plain decoding: no draft runs, the "verify" of one
token is the decode step, and the speedup is exactly 1. The acceptance math lives in `acceptance`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..acceptance.closed_form import get_expected_tokens
from .break_even import get_best_k_index
from .speculative_result import SpeculativeResult, get_interval
from ..scenario.builder import Scenario
from ..scenario.drafting import (get_self_draft_context, get_self_draft_model, get_tree_depth,
                                 get_tree_expected_tokens)
from .draft_extend import get_draft_extend_time_s, get_head_forward_time_s, uses_draft_extend
from .trees import get_tree_draft_times_s, get_tree_mask_time_s
from ..ops.sections import get_acceptance_rule_ops, get_sampler_ops
from ..ops.step_ops import get_step_ops
from ..step import StepCost, get_ops_time_s, get_ratio_rel_sigma, get_rel_sigma, get_step_cost
from ..timing import TimingModel, get_op_time
from ..timing.engine import EngineTiming, with_role


def get_all_accepted_probability(k, alpha=None, alpha_per_position=None):
    k = np.asarray(k)
    if alpha_per_position is None:
        return np.asarray(alpha, dtype=float) ** k
    prods = np.concatenate([[1.0], np.cumprod(np.asarray(alpha_per_position, dtype=float))])
    return prods[np.minimum(k, len(alpha_per_position))]


def get_speculative_step_time_s(k, draft_step_time_s, verify_step_time_s, alpha_all_accepted=None,
                                extra_draft_pass: bool = False):
    """k draft steps + one verify; + a^k x one draft step when the gpt-fast-style extra draft pass is modelled.

    alpha_all_accepted is P(all k drafts accepted) (a^k for i.i.d. acceptance). k = 0 means plain decoding.
    """
    k = np.asarray(k, dtype=float)
    time = k * draft_step_time_s + verify_step_time_s
    if extra_draft_pass:
        time = time + np.where(k > 0, alpha_all_accepted, 0.0) * draft_step_time_s
    return time


def get_speedup(expected_tokens, target_decode_time_s, speculative_step_time_s):
    """Net speedup over plain decoding: E x T_decode / T_speculative_step."""
    return np.asarray(expected_tokens) * target_decode_time_s / speculative_step_time_s


def get_draft_step_time_s(scenario: Scenario, timing: TimingModel, batch, context_tokens, target_decode=None,
                          new_tokens=1, tree_width=1, first_step=False, launch_batch=None):
    """Time of one draft decode step per the drafter kind, at the given batch and context (arrays broadcast); a draft
    model's step may read `new_tokens` tokens (the first step of a loop that re-reads the last two committed ones).
    `tree_width`: tokens per sequence of a tree's draft step (each needs its logits, for its top-k children); a
    model drafter reads each sequence's KV once for them, a head is priced at batch x width.
    `launch_batch`: the batch whose CUDA graph a head's pass replays (default `batch`; the draft-extend pass runs
    k + 1 rows per sequence in the graph captured for the batch of sequences)."""
    drafter = scenario.drafter
    if drafter.kind == "model":
        if tree_width > 1:
            return get_step_cost(scenario.hardware, drafter.model, scenario.draft_workload, tree_width, timing,
                                     context_tokens, batch, logits_for_all_tokens=True).step_time_s
        return get_step_cost(scenario.hardware, drafter.model, scenario.draft_workload, new_tokens, timing,
                                 context_tokens, batch, logits_for_all_tokens=False).step_time_s
    if drafter.kind == "self":  # the target's own layers (a share of them) over at most the KV budget
        return get_step_cost(scenario.hardware, get_self_draft_model(scenario.model, drafter), scenario.workload,
                                 tree_width, timing, get_self_draft_context(drafter, context_tokens), batch,
                                 logits_for_all_tokens=tree_width > 1).step_time_s
    if tree_width > 1 and drafter.kind != "ngram":
        batch = np.asarray(batch) * tree_width
    if drafter.kind == "ngram":
        return np.zeros(np.broadcast(np.asarray(batch), np.asarray(context_tokens)).shape)
    return get_head_forward_time_s(scenario, timing, batch, context_tokens, first_step, 1, launch_batch)


@dataclass(frozen=True)
class SpeculativeGrid:
    """Speculation priced over broadcast grids of batch x context x k (x alpha). All times in seconds.

    `draft_step_time_s` is the mean draft step the step time sums (step = k x draft + verify [+ extra pass]); in a
    loop the first of the k draft steps runs cold (`draft_cold_step_time_s`, after the target's verify) and the
    other k - 1 warm (`draft_warm_step_time_s`); they differ only under a measured profile with cache reuse.
    """

    batch: np.ndarray
    context_tokens: np.ndarray
    k: np.ndarray
    alpha: np.ndarray | None
    target_decode_time_s: np.ndarray
    draft_cold_step_time_s: np.ndarray
    draft_warm_step_time_s: np.ndarray
    draft_step_time_s: np.ndarray
    verify_step_time_s: np.ndarray
    expected_tokens: np.ndarray
    step_time_s: np.ndarray
    speedup: np.ndarray
    fits_in_memory: np.ndarray
    #: relative 1-sigma errors under a measured profile (None under the datasheet roofline): each step, the
    #: speculative step (k drafts + verify, correlated within an op family) and the speedup (shared terms cancel)
    draft_rel_sigma: np.ndarray | None = None
    verify_rel_sigma: np.ndarray | None = None
    step_rel_sigma: np.ndarray | None = None
    speedup_rel_sigma: np.ndarray | None = None


def get_acceptance_rule_time_s(scenario: Scenario, timing: TimingModel, batch, k) -> np.ndarray:
    """The acceptance rule of one iteration (`ops.get_acceptance_rule_ops`) when the workload prices sampling, else 0.
    It runs between the verify's forward pass and the next draft step, so no per-step dispatch is added."""
    if not scenario.workload.sampling:
        return np.zeros(np.broadcast(np.asarray(batch), np.asarray(k)).shape)
    hw, dtype = scenario.hardware, scenario.workload.activation_dtype
    ops = get_acceptance_rule_ops(scenario.model, batch, k)
    bound = timing.for_step(ops)
    time = sum((get_op_time(bound, hw, op, dtype).time_s for op in ops), np.asarray(0.0))
    return np.where(np.asarray(k) > 0, time, 0.0)  # its per-call cost too: k = 0 runs no rule


def uses_verify_batch_expansion(scenario: Scenario) -> bool:
    """Whether the engine scores a chain's k + 1 tokens per sequence as k + 1 single-token sequences
    (`speculative.verify_batch_expansion`: vLLM V0's BatchExpansionTop1Scorer, docs/engines.md); trees keep their
    masked verify."""
    engine = scenario.engine
    return bool(engine is not None and not engine.is_ideal and isinstance(scenario.timing, EngineTiming)
                and engine.speculative.verify_batch_expansion and scenario.tree is None)


def get_engine_extras_s(scenario: Scenario, timing: TimingModel, batch, context_tokens, k) -> np.ndarray | float:
    """What the scenario's engine adds to a speculative iteration beyond its draft forwards and the verify (0 at
    k = 0 and under the ideal engine): the tree / verify / sampling / rejection kernels (`speculative.extra_kernels`)
    at the verify's launch cost, a host-side n-gram lookup (`get_ngram_proposer_s`) and the output processing the
    engine leaves on the critical path while speculating (`speculative.output_per_sequence_s` per sequence: vLLM V0
    turns its asynchronous output processor off). The draft-extend pass is one of the draft forwards
    (`get_draft_extend_time_s`); the host part (proposer / scorer sync, accepting tokens, the overlap scheduler
    switched off) is priced on the verify step itself (`timing.engine`)."""
    engine = scenario.engine
    if engine is None or engine.is_ideal or not isinstance(timing, EngineTiming):
        return 0.0
    spec, kk = engine.speculative, np.asarray(k)
    extra = np.asarray(0.0)
    if spec.extra_kernels:
        extra = extra + timing.get_launch_s(spec.extra_kernels, batch, kk + 1)
    if spec.ngram_ops_per_sequence and scenario.drafter.kind == "ngram":
        extra = extra + get_ngram_proposer_s(engine, batch)
    # per sequence of the batch, not per expanded verify row: the engine turns the tokens of each sequence into output
    extra = extra + spec.output_per_sequence_s * np.asarray(batch, dtype=float)
    return np.where(kk > 0, extra, 0.0)


def get_ngram_proposer_s(engine, batch) -> np.ndarray:
    """An engine's n-gram lookup when it runs one sequence at a time as eager torch ops on the host (vLLM V0's
    NGramWorker): `speculative.ngram_ops_per_sequence` ops for every sequence of the batch, matched or not, each at
    the engine's eager op cost, with the GPU idle (each n-gram size tried ends in a blocking `.item()`)."""
    return engine.speculative.ngram_ops_per_sequence * np.asarray(batch, dtype=float) * engine.launch.kernel_s_eager


def _scaled_families(families: dict, scale) -> dict:
    return {f: t * scale for f, t in families.items()}


def _interval(scenario: Scenario, decode: StepCost, verify: StepCost, k, draft, target_decode, step, batch,
              context_tokens, rule) -> dict:
    """The relative errors of the draft, verify and speculative steps and of the speedup (see SpeculativeGrid)."""
    sigmas = decode.sigmas
    drafter = scenario.drafter
    decode_families = decode.priced_time_s
    if drafter.kind == "model":  # the drafter's ops have other weight shapes: parts of their own
        draft_step = get_step_cost(scenario.hardware, drafter.model, scenario.draft_workload, 1, scenario.timing,
                                       context_tokens, batch)
        draft_families = {(family, f"draft:{name}"): t * (draft / draft_step.step_time_s)
                          for (family, name), t in draft_step.priced_time_s.items()}
    elif drafter.kind in ("head", "self"):  # a fraction of the target's layers: the target's family mix
        draft_families = _scaled_families(decode_families, draft / decode.step_time_s)
    else:  # n-gram drafts are free
        draft_families = {}
    k = np.asarray(k, dtype=float)
    verify_time = np.where(k > 0, np.maximum(verify.step_time_s, decode.step_time_s), decode.step_time_s) + rule
    verify_parts = {**verify.priced_time_s, ("elementwise", "accept_rule"): rule}
    verify_families = {f: np.where(k > 0, verify_parts.get(f, 0.0), decode_families.get(f, 0.0))
                       for f in dict.fromkeys([*verify_parts, *decode_families])}
    draft_share = (step - verify_time) / np.where(draft > 0, draft, 1.0)  # k (+ a^k for the extra pass)
    step_families = {f: verify_families.get(f, 0.0) + draft_share * draft_families.get(f, 0.0)
                     for f in dict.fromkeys([*verify_families, *draft_families])}
    speedup = get_ratio_rel_sigma(decode_families, decode.step_time_s, step_families, step, sigmas)
    return {
        "draft_rel_sigma": (get_rel_sigma(draft_families, draft, sigmas) if draft_families
                            else np.zeros_like(np.asarray(draft, dtype=float))),
        "verify_rel_sigma": get_rel_sigma(verify_families, verify_time, sigmas),
        "step_rel_sigma": get_rel_sigma(step_families, step, sigmas),
        "speedup_rel_sigma": np.where(k > 0, speedup, 0.0),  # k = 0 is plain decoding: exactly 1x
    }


def _same(a: TimingModel, b: TimingModel) -> bool:
    """Whether two timing models are equal (the same numbers for the same ops); False where their fields cannot be
    compared (arrays)."""
    try:
        return a is b or bool(a == b)
    except (TypeError, ValueError):
        return False


def _loop_timings(scenario: Scenario, decode) -> tuple[TimingModel, TimingModel]:
    """In a speculative loop the draft's and the target's weights both pass through the caches between steps: each
    is priced with the other's weights co-resident (a timing model without caches returns itself)."""
    timing = scenario.timing
    if scenario.drafter.kind != "model":
        return with_role(timing, "inner"), with_role(timing, "speculative")
    def get_draft_bytes() -> float:  # the draft's weights one step reads (only its ops are needed, not their times)
        draft_ops = get_step_ops(scenario.drafter.model, scenario.draft_workload, 1, batch=1, context_tokens=1)
        return float(np.max(sum(op.count * op.weight_bytes for op in draft_ops)))

    draft_bytes = scenario.remember("draft weight bytes per step", get_draft_bytes)
    return (with_role(timing.with_co_resident(float(np.max(decode.weight_bytes))), "inner"),
            with_role(timing.with_co_resident(draft_bytes), "speculative"))


@dataclass(frozen=True)
class _LoopTimes:
    """What a speculative grid costs before the acceptance enters: the target's decode and verify steps, the draft
    steps (cold, warm, the mean of k) and the verify with its extras, over batch x context x k; and the memory fit."""

    decode: StepCost
    verify_step: StepCost
    cold: np.ndarray
    warm: np.ndarray
    draft: np.ndarray
    verify: np.ndarray
    rule: np.ndarray
    fits: np.ndarray


def _price_loop(scenario: Scenario, batch, context_tokens, k) -> _LoopTimes:
    hw, w = scenario.hardware, scenario.workload
    # at one point (predict's axes of one value each) the decode and the draft steps are priced as scalars, one
    # point's fast path (`ops.op_cost.make_op`) with the same numbers; they broadcast over k as the (1,) arrays did
    b, s = (batch[0], context_tokens[0]) if batch.shape == (1,) and context_tokens.shape == (1,) else (batch,
                                                                                                    context_tokens)
    decode = get_step_cost(hw, scenario.model, w, 1, scenario.timing, s, b)
    target_decode = decode.step_time_s
    draft_timing, verify_timing = _loop_timings(scenario, decode)
    # the first of the k draft steps follows the target's verify (the target's weights went through the caches in
    # between); the next k - 1 follow a draft step, so the draft's own weights may still be cached
    cold = get_draft_step_time_s(scenario, draft_timing, b, s, decode, new_tokens=scenario.draft_first_step_tokens,
                                 first_step=True)
    warm_timing = with_role(scenario.timing, "inner")
    if _same(warm_timing, draft_timing) and scenario.draft_first_step_tokens == 1 and scenario.drafter.kind != "eagle3":
        warm = cold  # the same step priced the same way (only EAGLE-3's first step differs: it fuses the features)
    else:
        warm = get_draft_step_time_s(scenario, warm_timing, b, s, decode)
    tree = scenario.tree
    extend = uses_draft_extend(scenario)
    if extend:  # the engine's draft-extend pass over the depth + 1 verified rows is the first draft forward
        depth = k if tree is None else get_tree_depth(tree)
        cold = get_draft_extend_time_s(scenario, draft_timing, batch, context_tokens, np.asarray(depth) + 1)
    draft = (cold + np.maximum(k - 1, 0) * warm) / np.maximum(k, 1)
    if tree is not None:  # depth draft forwards at their widths, spread over the k tree tokens (step = k x draft + ..)
        first, warm, total = get_tree_draft_times_s(scenario, draft_timing, batch, context_tokens,
                                                    get_draft_step_time_s, decode)
        total = total - first + cold if extend else total
        cold = cold if extend else first
        draft = total / np.maximum(k, 1)
    # an n-gram drafter drafts only for the sequences that find a match; the others verify their one token
    drafted = k * scenario.drafter.match_fraction if scenario.drafter.kind == "ngram" and tree is None else k
    if uses_verify_batch_expansion(scenario):  # vLLM V0: each draft position becomes a sequence of its own
        verify_step = get_step_cost(hw, scenario.model, w, 1, verify_timing, context_tokens,
                                        batch * (drafted + 1))
    else:
        verify_step = get_step_cost(hw, scenario.model, w, drafted + 1, verify_timing, context_tokens, batch)
    verify = verify_step.step_time_s
    if tree is not None:
        verify = verify + get_tree_mask_time_s(scenario, verify_timing, batch, k + 1)
    # a measured profile can price k + 1 tokens below one (the kernel library picks a faster GEMM for some larger M:
    # a real saw-tooth of CPU tables); speculation is never credited with it, so speedup <= E holds everywhere
    verify = np.maximum(verify, target_decode)
    verify = np.where(k > 0, verify, target_decode)  # k = 0: plain decoding, no draft in the caches
    rule = get_acceptance_rule_time_s(scenario, verify_timing, batch, k)  # 0 at k = 0 and without --sampling
    verify = verify + rule + get_engine_extras_s(scenario, verify_timing, batch, context_tokens, k)
    fits = scenario.get_memory_fit(batch, context_tokens, k).fits_in_memory
    return _LoopTimes(decode, verify_step, cold, warm, draft, verify, rule, fits)


#: the last small grid `_price_loop` priced, (scenario, grid key, times): `predict` prices its point's loop once for
#: the answer and again for each acceptance rate of its sensitivity, and the times do not depend on the acceptance
_LAST_LOOP: list = [None]
_LAST_LOOP_MAX_VALUES = 4096  # larger grids (sweeps, serving tables) are priced once each and not kept


def _get_loop(scenario: Scenario, batch, context_tokens, k) -> _LoopTimes:
    if batch.size * context_tokens.size * k.size > _LAST_LOOP_MAX_VALUES:
        return _price_loop(scenario, batch, context_tokens, k)
    key = tuple((a.shape, a.dtype.str, a.tobytes()) for a in (batch, context_tokens, k))
    last = _LAST_LOOP[0]
    if last is not None and last[0] is scenario and last[1] == key:
        return last[2]
    times = _price_loop(scenario, batch, context_tokens, k)
    _LAST_LOOP[0] = (scenario, key, times)
    return times


def get_loop_decode(scenario: Scenario) -> StepCost:
    """The target's decode step at the scenario's own batch and context axes, as its speculative loop prices it (once
    per scenario point: `predict` summarises the same step)."""
    return _get_loop(scenario, np.asarray(scenario.batch), np.asarray(scenario.context_tokens),
                     np.asarray(scenario.k_values)).decode


def price_speculation(scenario: Scenario, batch=None, context_tokens=None, k=None, alpha=None, *,
                      intervals: bool = True) -> SpeculativeGrid:
    """The whole speculative model over numpy-broadcast grids (batch, context, k, alpha arrays broadcast; each
    defaults to the scenario's axis, alpha to its i.i.d. rates or per-position acceptance). `intervals=False` leaves
    the prediction intervals out (a caller that reads only the speedups)."""
    acceptance = scenario.acceptance
    batch = np.asarray(scenario.batch if batch is None else batch)
    context_tokens = np.asarray(scenario.context_tokens if context_tokens is None else context_tokens)
    k = np.asarray(scenario.k_values if k is None else k)
    per_position = acceptance.per_position
    if per_position is None and alpha is None:
        alpha = np.asarray(acceptance.alphas)
    loop = _get_loop(scenario, batch, context_tokens, k)
    decode, draft, verify = loop.decode, loop.draft, loop.verify
    target_decode = decode.step_time_s
    if scenario.tree is not None:
        expected = get_tree_expected_tokens(scenario.tree, k, alpha, per_position)
    else:
        expected = get_expected_tokens(k, alpha, per_position)
    all_accepted = get_all_accepted_probability(k, alpha, per_position) if scenario.extra_draft_pass else None
    step = get_speculative_step_time_s(k, draft, verify, all_accepted, scenario.extra_draft_pass)
    interval = {} if decode.sigmas is None or not intervals else _interval(
        scenario, decode, loop.verify_step, k, draft, target_decode, step, batch, context_tokens, loop.rule)
    return SpeculativeGrid(
        batch, context_tokens, k, None if alpha is None else np.asarray(alpha), target_decode, loop.cold, loop.warm,
        draft, verify, expected, step, get_speedup(expected, target_decode, step), loop.fits, **interval,
    )


def analyse_speculation(scenario: Scenario) -> SpeculativeResult:
    """Speedup over the scenario's draft lengths at its (one) batch and context; k defaults to the best k that fits."""
    grid = price_speculation(scenario)
    ks = scenario.k_values
    shape = ks.shape

    def by_k(values) -> np.ndarray:  # the point's batch and context axes have one value each
        return np.broadcast_to(np.asarray(values, dtype=float), shape)

    speedups, fits = by_k(grid.speedup), np.broadcast_to(grid.fits_in_memory, shape)
    best = int(get_best_k_index(speedups, fits, axis=0))
    chosen = best if scenario.k is None else int(np.flatnonzero(ks == scenario.k)[0])
    expected, steps, drafts = by_k(grid.expected_tokens), by_k(grid.step_time_s), by_k(grid.draft_step_time_s)

    def sigma_at_chosen(values):
        return None if values is None else float(by_k(values)[chosen])

    table = [{"k": int(kk), "expected_tokens": float(e), "step_time_s": float(t), "speedup": float(s),
              "fits_in_memory": bool(f)}
             for kk, e, t, s, f in zip(ks, expected, steps, speedups, fits)]
    acceptance = scenario.acceptance
    return SpeculativeResult(
        draft=scenario.drafter.name, drafter_kind=scenario.drafter.kind, k=int(ks[chosen]),
        alpha=None if acceptance.alphas is None else float(acceptance.alphas[0]),
        alpha_per_position=None if acceptance.per_position is None else list(acceptance.per_position),
        expected_tokens=float(expected[chosen]),
        target_decode_time_s=float(np.asarray(grid.target_decode_time_s).reshape(-1)[0]),
        draft_step_time_s=float(drafts[chosen]),
        draft_cold_step_time_s=float(by_k(grid.draft_cold_step_time_s)[chosen]),  # a draft-extend's rows follow k
        draft_warm_step_time_s=float(np.asarray(grid.draft_warm_step_time_s).reshape(-1)[0]),
        verify_step_time_s=float(by_k(grid.verify_step_time_s)[chosen]),
        step_time_s=float(steps[chosen]), speedup=float(speedups[chosen]), fits_in_memory=bool(fits[chosen]),
        best_k=int(ks[best]), best_speedup=float(speedups[best]), k_table=table, acceptance_source=acceptance.source,
        batch=int(scenario.batch[0]),
        draft_step_interval=get_interval(float(drafts[chosen]), sigma_at_chosen(grid.draft_rel_sigma)),
        verify_step_interval=get_interval(float(by_k(grid.verify_step_time_s)[chosen]),
                                          sigma_at_chosen(grid.verify_rel_sigma)),
        step_interval=get_interval(float(steps[chosen]), sigma_at_chosen(grid.step_rel_sigma)),
        speedup_interval=get_interval(float(speedups[chosen]), sigma_at_chosen(grid.speedup_rel_sigma)),
        tree=None if scenario.tree is None else scenario.tree.describe(),
    )
