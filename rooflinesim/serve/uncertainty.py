"""How far a serving prediction moves with the step model's error.

A serving run's schedule is invariant under a change of time unit: if every step took c times its price, every
event would happen at c times its time for requests arriving at c times theirs. So a simulation at step speed c needs
no second pricing path: replay the requests with arrivals / c and multiply every resulting time by c
(`simulate_at_step_speed`). Queueing makes the result far from proportional in c at a fixed arrival rate: near
capacity a few per cent of step time move TTFT by tens of per cent.

Under a measured profile each step time has a 90 % interval T exp(-/+ 1.645 sigma) (`step.StepCost.rel_sigma`,
README "How far to trust a number"). Its fit part is shared by every step of a run (the same tables price the same
shapes at every step), so the serving metrics' interval is the simulation at the two ends, c = exp(-/+ 1.645 sigma),
with sigma the speculative step's at the run's mean batch and context (`get_step_rel_sigma`). The per-call noise
inside sigma would average out over many steps: counting it whole makes the interval a little wide. `rooflinesim
serve` reports it per run under a measured profile (`get_summary_interval`: two more simulations per run).
"""

from __future__ import annotations

import numpy as np

from ..scenario.builder import Scenario
from ..pricing.speculative import price_speculation
from ..step import get_step_cost
from ..timing.base import Z90
from .config import ServeConfig
from .engine import simulate
from .pricing import StepPricer
from .workload import Requests

#: the summary entries that are times and scale with the step speed
TIME_METRICS = ("ttft_s", "tpot_s", "itl_s", "latency_s")


def simulate_at_step_speed(scenario: Scenario, requests: Requests, policy: str, config: ServeConfig,
                           pricer: StepPricer | None, scale: float) -> dict:
    """TIME_METRICS percentiles of the simulation had every step taken `scale` times its price (see the module
    docstring): the requests replayed with arrivals / scale, every time multiplied back."""
    slower = Requests(requests.arrival_s / scale, requests.prompt_tokens, requests.output_tokens)
    summary = simulate(scenario, slower, policy, config, pricer).get_summary()
    return {metric: {p: v * scale for p, v in summary[metric].items()} for metric in TIME_METRICS}


def get_step_rel_sigma(scenario: Scenario, batch: float, context_tokens: float, k: int) -> float | None:
    """Relative 1-sigma error of one serving step (k drafts + a verify of k + 1 tokens; k = 0 a plain decode) at
    this batch and context; None under the datasheet roofline, which has no interval."""
    batch = max(int(round(batch)), 1)
    if scenario.drafter is not None:
        sigma = price_speculation(scenario, batch, context_tokens, k).step_rel_sigma
    else:
        sigma = get_step_cost(scenario.hardware, scenario.model, scenario.workload, 1, scenario.timing,
                                  context_tokens, batch).rel_sigma
    return None if sigma is None else float(np.max(sigma))


def get_step_speed_interval(rel_sigma: float) -> tuple[float, float]:
    """The step-time scales at the ends of the 90 % interval."""
    return float(np.exp(-Z90 * rel_sigma)), float(np.exp(Z90 * rel_sigma))


def simulate_interval_ends(scenario: Scenario, requests: Requests, policy: str, config: ServeConfig,
                           pricer: StepPricer | None, batch: float, k: int) -> tuple[float, dict, dict] | None:
    """(sigma, low, high): the step's relative 1-sigma error at this batch and k and the requests' mean context, and
    the TIME_METRICS percentiles simulated at both ends of its 90 % interval; None under the datasheet roofline."""
    context = float(np.mean(requests.prompt_tokens + requests.output_tokens / 2))
    sigma = get_step_rel_sigma(scenario, batch, context, k)
    if sigma is None:
        return None
    low, high = (simulate_at_step_speed(scenario, requests, policy, config, pricer, scale)
                 for scale in get_step_speed_interval(sigma))
    return sigma, low, high


def get_summary_interval(scenario: Scenario, requests: Requests, policy: str, config: ServeConfig,
                         summary: dict, pricer: StepPricer | None = None) -> dict | None:
    """The 90 % interval of a run's latency percentiles (`summary` is its `ServeResult.get_summary()`), sigma at the
    run's mean batch and k: {"step_rel_sigma", "<metric>": {"<percentile>": [low, high]}} over TIME_METRICS; None
    under the datasheet roofline."""
    ends = simulate_interval_ends(scenario, requests, policy, config, pricer, summary["mean_batch"],
                                  int(round(summary["mean_k"])))
    if ends is None:
        return None
    sigma, low, high = ends
    return {"step_rel_sigma": sigma, **{metric: {p: [low[metric][p], high[metric][p]] for p in low[metric]}
                                        for metric in TIME_METRICS}}


__all__ = ["simulate_at_step_speed", "get_step_rel_sigma", "get_step_speed_interval", "simulate_interval_ends",
           "get_summary_interval", "TIME_METRICS"]
