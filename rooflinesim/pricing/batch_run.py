"""A static batch run to completion, priced as a benchmark that times `generate()` on B copies of one prompt measures
it (SpecDecode-Bench's bench_latency.py: `llm.generate([prompt] * batch_size)` per prompt, timed around the call, with
and without speculation; vis_speedup.py: the speedup is the mean per-prompt token throughput with speculation over the
same mean without).

Greedy copies of one prompt generate the same tokens and finish together, so the batch does not drain: each prompt's
run is one prefill of the B copies and then decode steps at a full batch B, the context growing from the prompt to
prompt + output. Step times are close to linear in the context, so the decode steps are priced at the run's mean
context, prompt + output / 2. What the steady-step speedup leaves out is the prefill, which the timer includes and
speculation does not shorten: it weighs more at large batches (B x the prompt tokens) and for short outputs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

#: contexts are rounded to this many tokens before pricing, so a run of a few hundred prompts prices a few dozen points
CONTEXT_GRID_TOKENS = 32


@dataclass(frozen=True)
class RunPoint:
    """What a run needs from one priced point (batch B, `context` tokens): a plain decode step, a speculative
    iteration and its expected tokens per sequence, and the prefill of B prompts of `context` tokens each."""

    decode_step_s: float
    speculative_step_s: float
    tokens_per_step: float
    prefill_s: float


def get_run_point(prediction) -> RunPoint:
    """The RunPoint of a speculative `predict_scenario` answer (its batch and context are the point's)."""
    spec = prediction.speculative
    return RunPoint(float(prediction.decode.step_time_s), float(spec.step_time_s), float(spec.expected_tokens),
                    float(prediction.prefill.step_time_s))


def round_context(tokens: float) -> int:
    """The priced context for `tokens`: the nearest multiple of CONTEXT_GRID_TOKENS, at least one step of it."""
    return max(CONTEXT_GRID_TOKENS, int(round(tokens / CONTEXT_GRID_TOKENS)) * CONTEXT_GRID_TOKENS)


def get_run_times_s(prompt_tokens: int, output_tokens: int, price: Callable[[int], RunPoint]) -> tuple[float, float]:
    """(without, with speculation) seconds of one prompt's run: the prefill, which yields the first output token, then
    output - 1 tokens by plain steps or by speculative iterations of `tokens_per_step` tokens each."""
    prefill = price(round_context(prompt_tokens)).prefill_s
    point = price(round_context(prompt_tokens + output_tokens / 2))
    decoded = max(output_tokens - 1, 0)
    return (prefill + decoded * point.decode_step_s,
            prefill + decoded / point.tokens_per_step * point.speculative_step_s)


def get_copies_run_speedup(lengths: Sequence[tuple[int, int]], price: Callable[[int], RunPoint]) -> float:
    """Mean per-prompt throughput with speculation over the same without, over (prompt, output) token lengths; the
    batch's B copies multiply both throughputs alike, so B enters only through `price`."""
    if not lengths:
        raise ValueError("a batch run needs at least one (prompt, output) length")
    plain = speculative = 0.0
    for prompt_tokens, output_tokens in lengths:
        without_s, with_s = get_run_times_s(prompt_tokens, output_tokens, price)
        plain += output_tokens / without_s
        speculative += output_tokens / with_s
    return speculative / plain


__all__ = ["CONTEXT_GRID_TOKENS", "RunPoint", "get_copies_run_speedup", "get_run_point", "get_run_times_s",
           "round_context"]
