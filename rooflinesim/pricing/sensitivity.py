"""How a speculative answer moves with what it rests on: the acceptance rate (alpha -+ 0.1 and the k robust across
it), a measured acceptance's confidence interval (into E and the speedup), and, on a datasheet, the error band of
the published measurements (into every step time) and the engine profile's published speedup error (into the
speedup). `add_intervals` fills these into a `SpeculativeResult`."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..scenario.builder import Scenario
from ..timing.datasheet_band import DatasheetBand
from .break_even import get_best_k_index
from .speculative import price_speculation
from .speculative_result import SpeculativeResult
from .speedup_band import get_scenario_speedup_band

#: how far the acceptance rate is moved either way to show how an answer depends on it
ALPHA_SENSITIVITY = 0.1


def get_alpha_sensitivity(scenario: Scenario, delta: float = ALPHA_SENSITIVITY) -> dict | None:
    """At the scenario's point, for alpha - delta, alpha, alpha + delta (clipped to [0, 1]): the best k that fits and
    its speedup; and the robust k, the one whose worst share of each alpha's best speedup is highest. None for
    per-position acceptance (no single alpha to move)."""
    alphas = scenario.acceptance.alphas
    if alphas is None or len(alphas) != 1:
        return None
    # sorted distinct rates (np.unique would import numpy.ma on the predict path)
    moved = np.asarray(sorted(set(np.clip([alphas[0] - delta, alphas[0], alphas[0] + delta], 0.0, 1.0).tolist())))
    ks = scenario.k_values
    # one rate at a time over the scenario's own k axis: the loop's times are the answer's (priced once)
    grids = [price_speculation(scenario, k=ks, alpha=moved[i:i + 1], intervals=False) for i in range(moved.size)]
    speedup = np.concatenate([np.broadcast_to(np.asarray(g.speedup, dtype=float).reshape(ks.size, -1), (ks.size, 1))
                              for g in grids], axis=1)
    fits = np.broadcast_to(np.asarray(grids[0].fits_in_memory).reshape(ks.size, -1)[:, :1], speedup.shape)
    best = get_best_k_index(speedup, fits, axis=0)
    best_speedup = speedup[best, np.arange(moved.size)]
    share = np.where(fits, speedup / best_speedup[None, :], -np.inf).min(axis=1)
    rows = [{"alpha": float(a), "best_k": int(ks[b]), "best_speedup": float(v)}
            for a, b, v in zip(moved, best, best_speedup)]
    if not np.isfinite(share).any():  # no draft length fits in memory: no robust choice to make
        return {"rows": rows, "robust_k": None, "robust_k_worst_share": None}
    robust = int(np.argmax(share))
    return {"rows": rows, "robust_k": int(ks[robust]), "robust_k_worst_share": float(share[robust])}


def get_acceptance_interval(scenario: Scenario, k: int) -> tuple[tuple[float, float], tuple[float, float]] | None:
    """((E low, E high), (speedup low, speedup high)) at draft length k with the acceptance at the low and the high
    end of its confidence interval (every position at once: the widest joint reading); None without one."""
    acceptance = scenario.acceptance
    ks = np.asarray([k])
    if acceptance.alphas_ci is not None and acceptance.per_position is None:
        grid = price_speculation(scenario, k=ks, alpha=np.asarray(acceptance.alphas_ci, dtype=float), intervals=False)
        e = np.broadcast_to(np.asarray(grid.expected_tokens, dtype=float).reshape(-1), (2,))
        s = np.broadcast_to(np.asarray(grid.speedup, dtype=float).reshape(-1), (2,))
        return (float(e[0]), float(e[1])), (float(s[0]), float(s[1]))
    if acceptance.per_position_ci is not None and acceptance.per_position is not None:
        ends = []
        for side in (0, 1):
            rates = tuple(pair[side] for pair in acceptance.per_position_ci)
            moved = replace(scenario, acceptance=replace(acceptance, per_position=rates))
            grid = price_speculation(moved, k=ks, intervals=False)
            ends.append((float(np.asarray(grid.expected_tokens).reshape(-1)[0]),
                         float(np.asarray(grid.speedup).reshape(-1)[0])))
        return (ends[0][0], ends[1][0]), (ends[0][1], ends[1][1])
    return None


def add_intervals(result: SpeculativeResult, scenario: Scenario, band: DatasheetBand | None) -> SpeculativeResult:
    """The result with its sensitivity to alpha, E's and the speedup's acceptance interval, and (on a datasheet,
    `band` given) the published-measurement band on the draft, verify and speculative step times and the engine
    profile's published speedup error on the speedup (`speedup_band`)."""
    sensitivity = get_alpha_sensitivity(scenario)
    updates: dict = {}
    if sensitivity is not None:
        updates.update(speedup_by_alpha=sensitivity["rows"], robust_k=sensitivity["robust_k"],
                       robust_k_worst_share=sensitivity["robust_k_worst_share"])
    sources = []
    if band is not None:
        updates.update(draft_step_interval=band.apply(result.draft_step_time_s),
                       verify_step_interval=band.apply(result.verify_step_time_s),
                       step_interval=band.apply(result.step_time_s))
        sources.append(f"step times: {band.source} (a factor common to every step, so it cancels in the speedup)")
    elif result.step_interval is not None:
        sources.append("step times and speedup: the measured profile's 90 % intervals")
    acceptance = get_acceptance_interval(scenario, result.k) if result.k > 0 else None
    speedup_interval = result.speedup_interval
    if acceptance is not None:
        (e_low, e_high), (s_low, s_high) = acceptance
        speedup = result.speedup
        if speedup_interval is not None:  # the profile's timing interval on top: its factors multiply
            low, high = speedup_interval
            s_low, s_high = s_low * low / speedup, s_high * high / speedup
        updates["expected_tokens_interval"] = (e_low, e_high)
        speedup_interval = (s_low, s_high)
        sources.append("E and the speedup: the measured acceptance's confidence interval")
    speedup_band = get_scenario_speedup_band(scenario) if result.k > 0 else None
    if speedup_band is not None:
        # on a datasheet, the engine profile's error against published speedups: added to the acceptance's reach
        low, high = speedup_band.apply(result.speedup)
        if speedup_interval is not None:
            low, high = max(0.0, speedup_interval[0] - speedup_band.high_error_x), \
                speedup_interval[1] - speedup_band.low_error_x
        speedup_interval = (low, high)
        sources.append(f"speedup: {speedup_band.source}")
    updates["speedup_interval"] = speedup_interval
    updates["interval_source"] = "; ".join(sources) or None
    return replace(result, **updates)


__all__ = ["ALPHA_SENSITIVITY", "add_intervals", "get_acceptance_interval", "get_alpha_sensitivity"]
