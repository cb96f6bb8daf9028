"""The checks and warnings `build_scenario` applies to a resolved scenario: the grid's size, the memory fit of every
point, prices that stay finite, and what the timing model says about the largest steps. Each takes the `Scenario`
being built (`scenario.builder`, which imports this module, so it is not imported here)."""

from __future__ import annotations

import math

import numpy as np

from ..errors import InputError
from ..step import get_step_cost
from ..units import GIGA
from .inputs import MAX_GRID_VALUES


def check_grid_size(batch, context, k_values, alphas) -> None:
    # pricing holds ~20 ops x 8 arrays over (batch, context, k) and ~10 result arrays over the full grid
    values = batch.size * context.size * (k_values.size * 160 + 10 * k_values.size * alphas)
    if values > MAX_GRID_VALUES:
        raise InputError(
            f"grid of {batch.size:,} batches x {context.size:,} contexts x {k_values.size:,} k x {alphas:,} alphas "
            f"would need about {values * 8 / GIGA:,.0f} GB to price; at most {MAX_GRID_VALUES * 8 / GIGA:.1f} GB is "
            "allowed: use fewer points")


def get_memory_warnings(scenario) -> list[str]:
    fit = scenario.get_memory_fit(scenario.batch[:, None], scenario.context_tokens[None, :], 0)
    fits = np.broadcast_to(fit.fits_in_memory, (scenario.batch.size, scenario.context_tokens.size))
    if fits.all():
        return []
    hw = scenario.hardware
    if scenario.is_point:
        need = float(np.asarray(fit.total_bytes).reshape(-1)[0])
        max_batch = int(np.asarray(scenario.get_max_batch(scenario.context_tokens[0])).reshape(-1)[0])
        return [f"infeasible: needs {need / GIGA:.1f} GB but {hw.name} leaves {scenario.usable_memory_bytes / GIGA:.1f} GB "
                f"of its {hw.memory_capacity_bytes / GIGA:.1f} GB usable (max batch at this context: {max_batch}); times "
                "are shown as if it fitted"]
    return [f"{int((~fits).sum())} of {fits.size} (batch, context) points do not fit in {hw.name}'s memory even "
            "without speculation; memory caps the batch there, and the break-even is found among the points that fit"]


def check_finite_prices(scenario) -> None:
    """Refuse a deployment whose largest steps price to an infinite or undefined time.

    Every spec number is finite and positive, but a hand-written spec or profile can still be off by hundreds of
    orders of magnitude (`1.0e-300` B/s, a coefficient of 1e300 s per byte): the times then overflow and every
    output would carry Infinity or NaN. Step time grows with batch, context and new tokens, so pricing the largest
    prefill and verify steps of the grid (`Scenario.get_largest_steps`, which the pricing of a point then reuses) and
    the largest draft step decides for all of them; a speculative step sums up to k + 2 of them (k drafts, the
    verify, gpt-fast's extra draft pass), so that sum must stay finite too.
    """
    b, s = scenario.batch.max(), scenario.context_tokens.max()
    q = int(scenario.k_values.max()) + 1
    steps = [(scenario.model, scenario.get_largest_steps())]
    if scenario.drafter is not None and scenario.drafter.kind == "model":
        with np.errstate(over="ignore", invalid="ignore"):
            draft = get_step_cost(scenario.hardware, scenario.drafter.model, scenario.draft_workload, 1,
                                  scenario.timing, s + q, b)
        steps.append((scenario.drafter.model, (draft,)))
    for model, priced in steps:
        with np.errstate(over="ignore", invalid="ignore"):  # the one line below says it, not numpy's warnings
            worst = get_worst_time([time for step in priced for time in (step.step_time_s, step.roofline_step_time_s)])
        if not math.isfinite(worst * (q + 1)):
            raise InputError(
                f"{scenario.hardware.name} prices a step of {model.name} (batch {b}, context up to {s}) at "
                f"{worst:.3g} s: a number in the hardware spec or profile is far outside any physical range")


def get_worst_time(times: list) -> float:
    """The largest of these step times (arrays or float64 scalars), NaN where any is NaN, as `np.max` finds it; at
    one point (every time a scalar) without an array evaluation."""
    if all(type(time) is np.float64 for time in times):
        return math.nan if any(math.isnan(time) for time in times) else float(max(times))
    with np.errstate(invalid="ignore"):
        return float(np.max([np.max(time) for time in times]))


def get_pricing_warnings(scenario) -> list[str]:
    """What the timing model says about the largest steps the scenario prices (e.g. outside a measured range): the
    ops of its largest verify step."""
    verify = scenario.get_largest_steps()[1]
    return scenario.timing.get_warnings(verify.ops, scenario.workload.activation_dtype)
