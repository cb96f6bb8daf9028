"""Speculative decoding on top of the step model: step cost, net speedup, best k, break-even and engine schedules.

A speculative step = k draft decode steps (the drafter at the same batch and context) + one target verify step over
k + 1 query tokens per sequence, optionally + one more draft pass when all k drafts were accepted (gpt-fast runs it
to fill the draft's KV cache; its expected cost is a^k draft steps). It commits E tokens per sequence on average, so

    speedup = E x T_target_decode / T_speculative_step.

With the verify step costing what a decode step costs and a draft step costing c x T_target_decode, this is exactly
Leviathan et al.'s (1 - a^(k+1)) / ((1 - a)(k c + 1)). The acceptance math lives in `acceptance`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from .acceptance import expected_tokens_iid
from .step import check_tensor_parallel, get_workload_step
from .registry import get_short_name, load_model
from .roofline import TimingModel
from .specs import HardwareSpec, InputError, ModelSpec, Workload

MAX_K = 16
DEFAULT_DRAFT = "llama-3.2-1b"
DEFAULT_ALPHA = 0.8
DEFAULT_HEAD_LAYER_FRACTION = 1.0  # an EAGLE/Medusa-style head costs about one decoder layer per draft token
DRAFTER_KINDS = ("model", "ngram", "head")


@dataclass(frozen=True)
class Drafter:
    """What proposes the k draft tokens.

    kind 'model': a separate draft model run at the same batch and context as the target.
    kind 'ngram': a model-free drafter (n-gram / prompt lookup), whose cost on the accelerator is taken as zero.
    kind 'head': a self-drafting head on the target whose cost per draft token is `head_layer_fraction` of one
    target decoder layer's decode time.
    """

    kind: str
    model: ModelSpec | None = None
    head_layer_fraction: float = DEFAULT_HEAD_LAYER_FRACTION
    tensor_parallel: int | None = None  # a draft model's own TP degree (None: the target's)

    @property
    def name(self) -> str:
        if self.kind == "model":
            return get_short_name(self.model)
        if self.kind == "head":
            return f"head({self.head_layer_fraction:g} layer)"
        return "ngram"


def resolve_drafter(target: ModelSpec, draft: str | ModelSpec | None, drafter: str | None = None,
                    head_layer_fraction: float = DEFAULT_HEAD_LAYER_FRACTION, draft_tp: int | None = None,
                    hw: HardwareSpec | None = None) -> tuple[Drafter, list[str]]:
    """`draft` is a model name/path; `drafter` is one of 'model', 'ngram', 'head' (default: model)."""
    kind = drafter or "model"
    if kind not in DRAFTER_KINDS:
        raise InputError(f"unknown drafter kind {kind!r}; use one of {', '.join(DRAFTER_KINDS)}")
    if kind != "model":
        if not head_layer_fraction > 0:
            raise InputError(f"head layer fraction must be positive, got {head_layer_fraction}")
        return Drafter(kind, head_layer_fraction=head_layer_fraction), []
    draft_model = load_model(draft if draft is not None else DEFAULT_DRAFT)
    warnings = []
    if draft_model.vocab_size != target.vocab_size:
        warnings.append(
            f"draft {draft_model.name} has vocabulary {draft_model.vocab_size} but target {target.name} has "
            f"{target.vocab_size}: speculation needs a shared tokenizer"
        )
    if draft_tp is not None:
        draft_tp = check_tensor_parallel(draft_model, draft_tp, hw)
    return Drafter("model", draft_model, tensor_parallel=draft_tp), warnings


def check_alpha(alpha) -> np.ndarray:
    values = np.asarray(alpha, dtype=float)
    if not np.all(np.isfinite(values)) or np.any((values < 0) | (values > 1)):
        raise InputError(f"acceptance rate alpha must lie in [0, 1], got {alpha}")
    return values


def check_alpha_per_position(alphas: Sequence[float], k: int | None) -> np.ndarray:
    values = check_alpha(list(alphas))
    if values.ndim != 1 or values.size == 0:
        raise InputError("--alpha-per-position needs at least one rate: e.g. 0.9,0.85,0.8")
    if k is not None and k > values.size:
        raise InputError(f"k = {k} drafts need {k} per-position acceptance rates, got {values.size}")
    return values


def check_k(k) -> int:
    if k is None:
        return None
    if int(k) != k or k < 0:
        raise InputError(f"k (draft length) must be a non-negative integer, got {k}")
    if k > MAX_K:
        raise InputError(f"k must be at most {MAX_K}, got {k}")
    return int(k)


def get_expected_tokens(k, alpha=None, alpha_per_position=None) -> np.ndarray:
    """E[committed tokens per step] for draft lengths k (array), from i.i.d. alpha or per-position rates."""
    k = np.asarray(k)
    if alpha_per_position is None:
        return np.asarray(expected_tokens_iid(alpha, k), dtype=float)
    rates = np.asarray(alpha_per_position, dtype=float)
    cumulative = np.concatenate([[1.0], 1.0 + np.cumsum(np.cumprod(rates))])  # E for k = 0..len
    return cumulative[np.minimum(k, rates.size)]


def get_speculative_step_time_s(k, draft_step_time_s, verify_step_time_s, alpha_all_accepted=None,
                                extra_draft_pass: bool = False):
    """k draft steps + one verify; + a^k x one draft step when the gpt-fast-style extra draft pass is modelled.

    alpha_all_accepted is P(all k drafts accepted) (a^k for i.i.d. acceptance). k = 0 means plain decoding: the
    'verify' step over 1 token is then the decode step and no draft runs.
    """
    k = np.asarray(k, dtype=float)
    time = k * draft_step_time_s + verify_step_time_s
    if extra_draft_pass:
        time = time + np.where(k > 0, alpha_all_accepted, 0.0) * draft_step_time_s
    return time


def get_speedup(expected_tokens, target_decode_time_s, speculative_step_time_s):
    """Net speedup over plain decoding: E x T_decode / T_speculative_step."""
    return np.asarray(expected_tokens) * target_decode_time_s / speculative_step_time_s


def get_all_accepted_probability(k, alpha=None, alpha_per_position=None):
    k = np.asarray(k)
    if alpha_per_position is None:
        return np.asarray(alpha, dtype=float) ** k
    prods = np.concatenate([[1.0], np.cumprod(np.asarray(alpha_per_position, dtype=float))])
    return prods[np.minimum(k, len(alpha_per_position))]


def get_draft_step_time_s(hw, target: ModelSpec, workload: Workload, drafter: Drafter, timing: TimingModel,
                          batch=None, context_tokens=None, target_decode: "object" = None):
    """Time of one draft decode step per the drafter kind, at the workload's (or the given) batch and context."""
    if drafter.kind == "model":
        if drafter.tensor_parallel is not None:
            workload = workload.model_copy(update={"tensor_parallel": drafter.tensor_parallel})
        elif drafter.model.num_attention_heads % workload.tensor_parallel:
            workload = workload.model_copy(update={"tensor_parallel": 1})
        return get_workload_step(hw, drafter.model, workload, 1, timing, context_tokens, batch).step_time_s
    if drafter.kind == "ngram":
        b = workload.batch if batch is None else batch
        s = workload.context_tokens if context_tokens is None else context_tokens
        return np.zeros(np.broadcast(np.asarray(b), np.asarray(s)).shape)
    step = target_decode or get_workload_step(hw, target, workload, 1, timing, context_tokens, batch)
    per_layer = [t.time_s for op, t in zip(step.ops, step.expected) if op.count == target.num_layers]
    return drafter.head_layer_fraction * sum(per_layer) / target.num_layers


@dataclass(frozen=True)
class SpeculativeGrid:
    """Speculation priced over broadcast grids of batch x context x k (x alpha). All times in seconds."""

    batch: np.ndarray
    context_tokens: np.ndarray
    k: np.ndarray
    alpha: np.ndarray | None
    target_decode_time_s: np.ndarray
    draft_step_time_s: np.ndarray
    verify_step_time_s: np.ndarray
    expected_tokens: np.ndarray
    step_time_s: np.ndarray
    speedup: np.ndarray


def _loop_timings(hw, timing: TimingModel, workload: Workload, drafter: Drafter, decode):
    """In a speculative loop the draft's and the target's weights both pass through the caches between steps: a
    timing model that knows about caches (a measured profile) prices each with the other's weights co-resident."""
    co_resident = getattr(timing, "with_co_resident", None)
    if co_resident is None or drafter.kind != "model":
        return timing, timing
    draft_workload = workload.model_copy(update={"tensor_parallel": drafter.tensor_parallel or 1})
    draft_bytes = get_workload_step(hw, drafter.model, draft_workload, 1, timing, 1, 1).weight_bytes
    return co_resident(float(np.max(decode.weight_bytes))), co_resident(float(np.max(draft_bytes)))


def price_speculation(hw: HardwareSpec, target: ModelSpec, workload: Workload, drafter: Drafter,
                      timing: TimingModel, batch, context_tokens, k, alpha=None, alpha_per_position=None,
                      extra_draft_pass: bool = False) -> SpeculativeGrid:
    """The whole speculative model over numpy-broadcast grids (batch, context, k, alpha arrays broadcast)."""
    batch, context_tokens, k = np.asarray(batch), np.asarray(context_tokens), np.asarray(k)
    decode = get_workload_step(hw, target, workload, 1, timing, context_tokens, batch)
    target_decode = decode.step_time_s
    draft_timing, verify_timing = _loop_timings(hw, timing, workload, drafter, decode)
    draft = get_draft_step_time_s(hw, target, workload, drafter, draft_timing, batch, context_tokens, decode)
    if draft_timing is not timing:
        # the first of the k draft steps follows the target's verify (the target's weights went through the caches
        # in between); the next k - 1 follow a draft step, so the draft's own weights may still be cached
        warm = get_draft_step_time_s(hw, target, workload, drafter, timing, batch, context_tokens, decode)
        draft = (draft + np.maximum(k - 1, 0) * warm) / np.maximum(k, 1)
    verify = get_workload_step(hw, target, workload, k + 1, verify_timing, context_tokens, batch).step_time_s
    expected = get_expected_tokens(k, alpha, alpha_per_position)
    all_accepted = get_all_accepted_probability(k, alpha, alpha_per_position) if extra_draft_pass else None
    step = get_speculative_step_time_s(k, draft, verify, all_accepted, extra_draft_pass)
    return SpeculativeGrid(
        batch, context_tokens, k, None if alpha is None else np.asarray(alpha), target_decode, draft, verify,
        expected, step, get_speedup(expected, target_decode, step),
    )


@dataclass(frozen=True)
class SpeculativeResult:
    draft: str
    drafter_kind: str
    k: int
    alpha: float | None
    alpha_per_position: list[float] | None
    expected_tokens: float
    target_decode_time_s: float
    draft_step_time_s: float
    verify_step_time_s: float
    step_time_s: float
    speedup: float
    best_k: int
    best_speedup: float
    k_table: list[dict] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "draft": self.draft,
            "drafter_kind": self.drafter_kind,
            "k": self.k,
            "alpha": self.alpha,
            "alpha_per_position": self.alpha_per_position,
            "expected_tokens": self.expected_tokens,
            "target_decode_time_s": self.target_decode_time_s,
            "draft_step_time_s": self.draft_step_time_s,
            "verify_step_time_s": self.verify_step_time_s,
            "step_time_s": self.step_time_s,
            "speedup": self.speedup,
            "tokens_per_s": self.expected_tokens / self.step_time_s,
            "best_k": self.best_k,
            "best_speedup": self.best_speedup,
            "speedup_by_k": self.k_table,
        }


def analyse_speculation(hw: HardwareSpec, target: ModelSpec, workload: Workload, timing: TimingModel,
                        draft=None, drafter=None, alpha=None, alpha_per_position=None, k=None,
                        head_layer_fraction: float = DEFAULT_HEAD_LAYER_FRACTION,
                        extra_draft_pass: bool = False, draft_tp: int | None = None,
                        ) -> tuple[SpeculativeResult, list[str]]:
    """Speedup vs k = 0..16 at the workload's batch and context; k defaults to the best k."""
    k = check_k(k)
    if alpha is not None and alpha_per_position is not None:
        raise InputError("give either alpha or alpha_per_position, not both")
    if alpha_per_position is not None:
        rates = check_alpha_per_position(alpha_per_position, k)
        k_max = rates.size
        alpha_value = None
    else:
        alpha_value = float(check_alpha(DEFAULT_ALPHA if alpha is None else alpha))
        rates, k_max = None, MAX_K
    spec_drafter, warnings = resolve_drafter(target, draft, drafter, head_layer_fraction, draft_tp, hw)
    k_values = np.arange(k_max + 1)
    grid = price_speculation(hw, target, workload, spec_drafter, timing, workload.batch, workload.context_tokens,
                             k_values, alpha_value, rates, extra_draft_pass)
    draft_step = float(np.asarray(grid.draft_step_time_s).reshape(-1)[0])
    speedups = np.broadcast_to(grid.speedup, k_values.shape)
    best_index = int(np.argmax(speedups))
    chosen = best_index if k is None else k
    table = [
        {"k": int(kk), "expected_tokens": float(e), "step_time_s": float(t), "speedup": float(s)}
        for kk, e, t, s in zip(k_values, np.broadcast_to(grid.expected_tokens, k_values.shape),
                               np.broadcast_to(grid.step_time_s, k_values.shape), speedups)
    ]
    result = SpeculativeResult(
        draft=spec_drafter.name, drafter_kind=spec_drafter.kind, k=chosen, alpha=alpha_value,
        alpha_per_position=None if rates is None else [float(r) for r in rates],
        expected_tokens=table[chosen]["expected_tokens"],
        target_decode_time_s=float(np.asarray(grid.target_decode_time_s).reshape(-1)[0]),
        draft_step_time_s=draft_step,
        verify_step_time_s=float(np.broadcast_to(grid.verify_step_time_s, k_values.shape)[chosen]),
        step_time_s=table[chosen]["step_time_s"], speedup=table[chosen]["speedup"],
        best_k=best_index, best_speedup=float(speedups[best_index]), k_table=table,
    )
    return result, warnings


def render_speculative(result: SpeculativeResult, console) -> None:
    from rich.table import Table

    from .units import format_seconds

    acceptance = (f"alpha {result.alpha:g}" if result.alpha is not None
                  else f"alpha per position {', '.join(f'{a:g}' for a in result.alpha_per_position)}")
    table = Table(title=f"Speculative decoding: draft {result.draft}, {acceptance}")
    for column in ("k", "E[tokens]", "step time", "speedup"):
        table.add_column(column, justify="right")
    for row in result.k_table:
        style = "bold green" if row["k"] == result.best_k else None
        table.add_row(str(row["k"]), f"{row['expected_tokens']:.3f}", format_seconds(row["step_time_s"]),
                      f"{row['speedup']:.3f}x", style=style)
    console.print(table)
    console.print(
        f"[bold]Speculative[/] k = {result.k}: draft step {format_seconds(result.draft_step_time_s)}, verify "
        f"{format_seconds(result.verify_step_time_s)}, step {format_seconds(result.step_time_s)}, "
        f"E = {result.expected_tokens:.3f} tokens -> speedup {result.speedup:.3f}x "
        f"(best k = {result.best_k}: {result.best_speedup:.3f}x)"
    )
