"""Resource guards of a serving sweep: how much work it asks for, checked before any simulation starts, and what a
dead worker process becomes.

The cost of `simulate` grows with the engine steps it plays out and its memory with the steps and requests it keeps.
Before a sweep starts its steps are bounded from above: a run of R requests with mean output length O and mean prompt
length P plays at most R x (O + ceil(P / max_num_batched_tokens)) steps (every request decoding alone, the slowest
case; batching and speculation only lower it). A sweep of several rates and policies plays that once per run. Over a
limit the sweep is refused with the estimate, in one line, rather than left to run for hours or exhaust memory.

The per-step costs are orders of magnitude taken on a 2-core AMD EPYC VM shared with other work (a lone-request run,
2,000 requests x 2,048 output tokens: about 12 s and 1 GB for 4.1 million steps); they only size the estimate shown to
the user, the limits themselves are step counts.
"""

from __future__ import annotations

import math
import os

from ..errors import InputError
from ..units import GIGA

#: seconds and bytes of one simulated engine step, orders of magnitude (see the module docstring)
STEP_COST_S = 3e-6
STEP_BYTES = 250
#: steps one run may play at most (about 17 GB at STEP_BYTES, when no request overlaps another) and steps over all
#: runs of a sweep (about 15 minutes of one core at STEP_COST_S); ROOFLINESIM_SERVE_MAX_STEPS sets the sweep limit
#: (a run's limit is never above it)
MAX_STEPS_PER_RUN = 1 << 26
MAX_STEPS_TOTAL = 1 << 28
MAX_STEPS_ENV = "ROOFLINESIM_SERVE_MAX_STEPS"


class ServeWorkerError(InputError):
    """A worker process of the sweep died (killed, out of memory): reported in one line, not as a pool traceback."""


def get_max_total_steps() -> int:
    value = os.environ.get(MAX_STEPS_ENV)
    if value is None:
        return MAX_STEPS_TOTAL
    try:
        limit = int(value)
    except ValueError:
        limit = 0
    if limit < 1:
        raise InputError(f"{MAX_STEPS_ENV} must be a positive integer number of engine steps, got {value!r}")
    return limit


def estimate_steps_per_run(requests: int, mean_prompt_tokens: float, mean_output_tokens: float,
                           max_num_batched_tokens: int) -> int:
    """The most engine steps one run can take (every request decoding alone; see the module docstring)."""
    chunks = math.ceil(max(mean_prompt_tokens, 1) / max(max_num_batched_tokens, 1))
    return int(requests * (max(mean_output_tokens, 1) + chunks))


def get_mean_tokens(dist) -> float:
    """The mean of a workload.LengthDistribution (lognormal: median x exp(sigma^2 / 2), at most its cap)."""
    if dist.kind == "uniform":
        return (dist.low + dist.high) / 2
    if dist.kind in ("lognormal", "trunc-lognormal"):  # (truncated: the untruncated mean)
        return min(dist.low * math.exp(min(dist.sigma ** 2 / 2, 700.0)), dist.high)
    return float(dist.low)


def check_workload_work(workload, runs: int, max_num_batched_tokens: int, workers: int = 1) -> int:
    """`check_serve_work` for a rates.WorkloadSpec: a trace is read here, once, in this process (so a bad trace is
    refused before any worker starts), generated requests are sized from their length distributions."""
    if workload.trace is not None:
        from .workload import load_trace

        trace = load_trace(workload.trace)
        return check_serve_work(trace.count, float(trace.prompt_tokens.mean()), float(trace.output_tokens.mean()),
                                runs, max_num_batched_tokens, workers)
    return check_serve_work(workload.requests, get_mean_tokens(workload.prompt), get_mean_tokens(workload.output),
                            runs, max_num_batched_tokens, workers)


def check_serve_work(requests: int, mean_prompt_tokens: float, mean_output_tokens: float, runs: int,
                     max_num_batched_tokens: int, workers: int = 1) -> int:
    """The estimated steps of a sweep of `runs` runs; a one-line InputError with the estimate when it is over the
    per-run or the total limit."""
    per_run = estimate_steps_per_run(requests, mean_prompt_tokens, mean_output_tokens, max_num_batched_tokens)
    total = per_run * max(runs, 1)
    limit = get_max_total_steps()
    run_limit = min(MAX_STEPS_PER_RUN, limit)
    if per_run <= run_limit and total <= limit:
        return total
    parallel = max(min(workers, runs), 1)
    memory_gb = per_run * STEP_BYTES * parallel / GIGA
    which = (f"{per_run:.3g} steps a run, over the limit of {run_limit:.3g}" if per_run > run_limit
             else f"{total:.3g} steps in all, over the limit of {limit:.3g}")
    raise InputError(f"serve would simulate up to {total:.3g} engine steps ({runs} runs of {requests:,} requests x "
                     f"{mean_output_tokens:,.0f} output tokens; up to {_duration(total * STEP_COST_S / parallel)} and "
                     f"{memory_gb:.2g} GB): {which}; give fewer --requests, rates or policies, or shorter outputs "
                     f"({MAX_STEPS_ENV} sets the limit)")


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


__all__ = ["ServeWorkerError", "check_serve_work", "check_workload_work", "get_mean_tokens",
           "estimate_steps_per_run", "MAX_STEPS_PER_RUN", "MAX_STEPS_TOTAL", "MAX_STEPS_ENV", "STEP_COST_S",
           "STEP_BYTES"]
