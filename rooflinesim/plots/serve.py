"""Speculation under load: the latency-throughput curve of each speculation policy and where speculation stops
paying, from `rooflinesim serve` runs."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..scenario.builder import Scenario
from ..scenario.inputs import DEFAULT_OUTPUT_TOKENS, DEFAULT_PROMPT_TOKENS
from ..serve import LengthDistribution, ServeConfig
from ..serve.rates import WorkloadSpec, get_crossovers, run_rate_sweep
from ..units import MILLI
from .common import COLORS, _new_figure, _tp_label, get_scenario


def get_serve_data(scenario: Scenario, rates: Sequence[float], policies: Sequence[str],
                   workload: WorkloadSpec | None = None, config: ServeConfig | None = None,
                   max_workers: int | None = None, concurrencies: Sequence[int] | None = None,
                   baseline: str = "off") -> dict:
    """The runs (one summary per policy and rate, or per policy and closed-loop concurrency when `concurrencies`
    is given; policy-major) and the crossovers against `baseline`."""
    workload = workload or WorkloadSpec(LengthDistribution.parse(DEFAULT_PROMPT_TOKENS, "prompt"),
                                        LengthDistribution.parse(DEFAULT_OUTPUT_TOKENS, "output"))
    rows = run_rate_sweep(scenario, workload, sorted(rates), list(policies), config or ServeConfig(),
                          max_workers=max_workers,
                          concurrencies=None if concurrencies is None else sorted(concurrencies))
    from ..pricing.speedup_band import get_scenario_speedup_band

    return {"runs": rows, "crossovers": get_crossovers(rows, baseline, get_scenario_speedup_band(scenario))}


def plot_serve(hw=None, model=None, draft=None, rates: Sequence[float] = (1, 2, 4, 8, 16, 32),
               policies: Sequence[str] = ("off", "fixed:4", "dynamic"), workload: WorkloadSpec | None = None,
               config: ServeConfig | None = None, data: dict | None = None, max_workers: int | None = None,
               concurrencies: Sequence[int] | None = None, baseline: str = "off", **options):
    """Two panels: p50 end-to-end latency against output throughput (each policy's latency-throughput curve, one
    point per request rate), and p50 TPOT against the request rate with the rate from which each speculative policy
    stops paying for latency (dashed) and, on a datasheet, the rates between which it does within the engine
    profile's published speedup error (shaded). `hw` is a Scenario or a hardware name; other options are `build_scenario`'s;
    `data` (from `get_serve_data`) skips the simulation."""
    scenario = get_scenario(hw, model, draft=draft, **options) if not isinstance(hw, Scenario) else hw
    data = data or get_serve_data(scenario, rates, policies, workload, config, max_workers, concurrencies, baseline)
    fig, (curve, tpot) = _new_figure((12.5, 5.0), ncols=2)
    by_policy: dict[str, list[dict]] = {}
    for row in data["runs"]:
        by_policy.setdefault(row["policy"], []).append(row)
    colors = {policy: COLORS[i % len(COLORS)] for i, policy in enumerate(by_policy)}
    closed = any(r.get("concurrency") is not None for r in data["runs"])
    load_key, unit = ("concurrency", "") if closed else ("rate_per_s", "/s")
    for policy, rows in by_policy.items():
        rate = np.asarray([r[load_key] for r in rows], dtype=float)
        throughput = np.asarray([r["output_tokens_per_s"] for r in rows])
        latency = np.asarray([r["latency_s"]["p50"] for r in rows])
        tpot_ms = np.asarray([r["tpot_s"]["p50"] for r in rows]) / MILLI
        curve.plot(throughput, latency, "o-", color=colors[policy], label=policy)
        for x, y, r in zip(throughput, latency, rate):
            curve.annotate(f"{r:g}{unit}", (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7,
                           color=colors[policy])
        tpot.plot(rate, tpot_ms, "o-", color=colors[policy], label=policy)
    shaded = False
    for crossover in data["crossovers"]:
        at = crossover["latency"]
        against = crossover.get("baseline", "off")
        if at is not None:
            tpot.axvline(at[load_key], color=colors[crossover["policy"]], linestyle="--", linewidth=1,
                         label=f"{crossover['policy']} stops paying vs {against} (batch {at['mean_batch']:.0f})")
        rng = crossover.get("latency_range")
        if rng is not None and rng["earliest"] is not None and np.isfinite(rng["earliest"][load_key]):
            # from the low-end reading of the engine's published speedup error to the high-end one (or the last load)
            loads = [r[load_key] for r in data["runs"] if np.isfinite(r[load_key])]
            end = rng["latest"][load_key] if rng["latest"] is not None else max(loads)
            # one legend entry for every shaded span: per policy they only repeat the band
            tpot.axvspan(rng["earliest"][load_key], min(end, max(loads)), color=colors[crossover["policy"]],
                         alpha=0.12, label="_nolegend_" if shaded else
                         f"shaded: stops paying within the published error (+-{rng['error_x']:.2f}x)")
            shaded = True
    load = "concurrency (closed-loop clients)" if closed else "request rate (requests/s)"
    curve.set(xlabel="output throughput (tokens/s)", ylabel="end-to-end latency p50 (s)", yscale="log",
              title=f"latency vs throughput (one point per {'concurrency' if closed else 'request rate'})")
    tpot.set(xlabel=load, ylabel="TPOT p50 (ms)", xscale="log", yscale="log", title="time per output token")
    from matplotlib.ticker import ScalarFormatter

    for ax in (curve, tpot):
        for axis in (ax.yaxis, ax.xaxis) if ax is tpot else (ax.yaxis,):
            axis.set_major_formatter(ScalarFormatter())
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    draft_name = scenario.drafter.name if scenario.drafter is not None else "none"
    fig.suptitle(f"Speculation under load: {scenario.model.name}{_tp_label(scenario)} on {scenario.hardware.name}, "
                 f"draft {draft_name}")
    return fig


__all__ = ["get_serve_data", "plot_serve"]
