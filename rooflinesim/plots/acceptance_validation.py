"""Measured vs predicted speculative speedup on real acceptance, from an `rooflinesim acceptance validate` report."""

from __future__ import annotations

import math

import numpy as np

from ..errors import InputError
from ..units import MILLI
from .common import COLORS, describe_machine_speed, read_report

#: the per-batch numbers the chart reads from each row of the report's `speculative` list
ROW_KEYS = ("batch", "measured_speedup", "predicted_speedup", "measured_iteration_s", "predicted_iteration_s",
            "measured_decode_s", "predicted_decode_s")
PARTS = ("drafts", "verify", "rule")


def get_acceptance_validation_data(report) -> dict:
    """The chart's numbers (arrays over batch) from a report path or dict; InputError on a malformed report."""
    report, where = read_report(report, "acceptance validation report")
    rows = report.get("speculative")
    if not isinstance(rows, list) or not rows:
        raise InputError(f"{where}: needs a non-empty 'speculative' list")
    for i, row in enumerate(rows):
        for key in ROW_KEYS:
            value = row.get(key) if isinstance(row, dict) else None
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value <= 0:
                raise InputError(f"{where}: speculative[{i}].{key}: expected a positive number, got {value!r}")
    column = lambda key, default=np.nan: np.array([float(r.get(key, default)) for r in rows])
    data = {key: column(key) for key in ROW_KEYS}
    data["predicted_low"] = column("predicted_speedup_low")
    data["predicted_high"] = column("predicted_speedup_high")
    for part in PARTS:
        data[f"measured_{part}_s"] = column(f"measured_{part}_s")
        data[f"predicted_{part}_s"] = column(f"predicted_{part}_s")
    data["goal"] = float(report.get("goal_abs_speedup_error", 0.15))
    data["device"] = str(report.get("device_name", report.get("device", "?")))
    acceptance = report.get("acceptance") or {}
    data["expected_tokens"] = acceptance.get("expected_tokens")
    data["machine_speed"] = describe_machine_speed(report)
    data["k"] = rows[0].get("k")
    return data


def plot_acceptance_validation(report):
    """Left: speedup vs batch, measured (dots) and predicted (line, 90 % interval as bars), the goal band around the
    measured speedup shaded. Right: one speculative iteration per batch, measured vs predicted, split into the k
    draft steps, the verify and the acceptance rule, next to k + 1 plain decode steps for scale."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    d = get_acceptance_validation_data(report)
    fig = Figure(figsize=(13.0, 5.2), layout="constrained")
    FigureCanvasAgg(fig)
    left, right = fig.subplots(1, 2)
    x = np.arange(len(d["batch"]))
    labels = [str(int(b)) for b in d["batch"]]
    measured, predicted = d["measured_speedup"], d["predicted_speedup"]
    left.fill_between(x, measured - d["goal"], measured + d["goal"], color=COLORS[0], alpha=0.15,
                      label=f"measured +- {d['goal']:g}x (goal)")
    left.plot(x, measured, "o", color=COLORS[0], label="measured")
    low, high = d["predicted_low"], d["predicted_high"]
    has_interval = np.all(np.isfinite(low)) and np.all(np.isfinite(high))
    left.errorbar(x, predicted, yerr=[predicted - low, high - predicted] if has_interval else None, fmt="s-",
                  color=COLORS[1], capsize=4, label="predicted" + (" (90 % interval)" if has_interval else ""))
    left.axhline(1.0, color="0.5", lw=0.8, ls=":")
    left.set_xticks(x, labels)
    left.set_xlabel("batch")
    left.set_ylabel("speedup over plain decoding")
    left.set_title(f"Speculative speedup, k = {d['k']}, measured acceptance"
                   + (f" (E = {d['expected_tokens']:.2f})" if d["expected_tokens"] else ""), fontsize=10)
    left.legend(fontsize=8)
    width = 0.38
    colors = dict(zip(PARTS, COLORS[2:5]))
    for offset, side, hatch in ((-width / 2, "measured", None), (width / 2, "predicted", "//")):
        bottom = np.zeros(len(x))
        for part in PARTS:
            values = np.nan_to_num(d[f"{side}_{part}_s"]) / MILLI
            right.bar(x + offset, values, width, bottom=bottom, color=colors[part], hatch=hatch, edgecolor="white",
                      label=f"{part} ({side})")
            bottom += values
        right.plot(x + offset, d[f"{side}_iteration_s"] / MILLI, "k_", ms=18, mew=2)
    right.plot(x, d["measured_decode_s"] * (d["k"] + 1) / MILLI, "x", color="0.3", label="(k + 1) x measured decode")
    right.set_xticks(x, labels)
    right.set_xlabel("batch (left bar measured, right bar predicted; black tick: whole iteration)")
    right.set_ylabel("time per speculative iteration (ms)")
    right.set_title("Where an iteration's time goes", fontsize=10)
    right.legend(fontsize=7, ncols=2)
    fig.suptitle(f"Speculative decoding on real acceptance: measured vs predicted on {d['device']}"
                 + (f"\n{d['machine_speed']}" if d["machine_speed"] else ""), fontsize=11)
    return fig


__all__ = ["get_acceptance_validation_data", "plot_acceptance_validation"]
