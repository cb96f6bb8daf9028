"""Predicted vs measured from a `rooflinesim validate` report."""

from __future__ import annotations

import math

import numpy as np

from ..errors import InputError
from ..units import MILLI, format_count
from .common import COLORS, VALIDATION_KINDS, _ticks_125, read_report

def _is_positive_number(value) -> bool:
    """A finite number above zero (JSON `true`, `"1"`, NaN and Infinity are not)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < math.inf


def load_validation_report(report) -> dict:
    """A validation report (path or already-parsed dict), checked for the keys the chart needs.

    Schema (written by `rooflinesim validate`): device, dtype, model, draft, configs: [{kind, batch, context_tokens,
    new_tokens, measured_s, measured_spread, predicted_s, roofline_s}], summary: {calibrated: {median_ape, p90_ape},
    roofline: {...}}, speculative: [{batch, context_tokens, k, alpha, measured_speedup, predicted_speedup,
    roofline_speedup}].
    """
    data, where = read_report(report, "validation report")
    configs = data.get("configs")
    if not isinstance(configs, list) or not configs:
        raise InputError(f"{where}: needs a non-empty 'configs' list")
    for key, kind in (("speculative", list), ("by_dtype", dict)):
        if data.get(key) is not None and not isinstance(data[key], kind):
            raise InputError(f"{where}: '{key}' must be a JSON {'list' if kind is list else 'object'}")
    for name, value in (data.get("by_dtype") or {}).items():
        if not isinstance(value, dict):
            raise InputError(f"{where}: by_dtype.{name} must be a JSON object (one dtype's report)")
    for i, row in enumerate([*configs, *(data.get("speculative") or [])]):
        if not isinstance(row, dict):
            name = f"configs[{i}]" if i < len(configs) else f"speculative[{i - len(configs)}]"
            raise InputError(f"{where}: {name} must be a JSON object")
    for i, row in enumerate(configs):
        missing = [key for key in ("kind", "measured_s", "predicted_s", "roofline_s") if key not in row]
        if missing:
            raise InputError(f"{where}: configs[{i}] lacks {', '.join(missing)}")
        if not all(_is_positive_number(row[key]) for key in ("measured_s", "predicted_s", "roofline_s")):
            raise InputError(f"{where}: configs[{i}]: times must be positive numbers of seconds")
    for i, row in enumerate(data.get("speculative") or []):
        missing = [key for key in ("batch", "measured_speedup", "predicted_speedup") if key not in row]
        if missing:
            raise InputError(f"{where}: speculative[{i}] lacks {', '.join(missing)}")
        if not all(_is_positive_number(row[key]) for key in ("batch", "measured_speedup", "predicted_speedup")):
            raise InputError(f"{where}: speculative[{i}]: batch and speedups must be positive numbers")
    return data


def _ape(predicted, measured) -> np.ndarray:
    return np.abs(np.asarray(predicted) / np.asarray(measured) - 1.0)


def plot_validation(report, band: float = 0.10):
    """Predicted vs measured from a validation report; one row per validated dtype when the report has `by_dtype`.

    Left: each configuration's predicted step time against the measured one (log-log), calibrated (filled) and the
    uncalibrated roofline (hollow), marker by kind (decode, verify, draft); the diagonal is perfect agreement and the
    shaded band +-`band`. Horizontal bars show the measured spread, read as a fraction of `measured_s` (it carries no
    unit in its name); vertical bars the calibrated 90 % prediction interval where the report has one. The legend gives each model's median and p90 absolute percentage error (from the report's
    summary when present, else computed from the rows).
    Right (when the report has a `speculative` list): measured and predicted speedup vs batch per (context, k, alpha).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    data = load_validation_report(report)
    rows = [load_validation_report(r) for r in (data.get("by_dtype") or {}).values()] or [data]
    ncols = 2 if any(r.get("speculative") for r in rows) else 1
    fig = Figure(figsize=(13.5 if ncols == 2 else 7.5, 5.8 * len(rows)), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(rows), ncols, squeeze=False)
    for row, row_axes in zip(rows, axes):
        _draw_validation(row, list(row_axes), band, label_dtype=len(rows) > 1)
    draft = data.get("draft")
    dtypes = ", ".join(str(r.get("dtype", "?")) for r in rows)
    fig.suptitle(f"Predicted vs measured: {data.get('model', '?')}"
                 + (f" (draft {draft})" if draft else "")
                 + f" on {data.get('device', '?')}, {dtypes}", fontsize=11)
    return fig


def _draw_validation(data: dict, axes: list, band: float, label_dtype: bool = False) -> None:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    configs = data["configs"]
    speculative = data.get("speculative") or []
    prefix = f"{data.get('dtype', '?')}: " if label_dtype else ""
    ax = axes[0]
    measured = np.array([r["measured_s"] for r in configs], dtype=float)
    predicted = np.array([r["predicted_s"] for r in configs], dtype=float)
    roofline = np.array([r["roofline_s"] for r in configs], dtype=float)
    spread = np.array([float(r.get("measured_spread") or 0.0) for r in configs])
    # the calibrated 90 % prediction interval, where the report has one (older reports do not)
    low = np.array([float(r.get("predicted_low_s") or r["predicted_s"]) for r in configs])
    high = np.array([float(r.get("predicted_high_s") or r["predicted_s"]) for r in configs])
    has_interval = any(r.get("predicted_low_s") is not None for r in configs)
    kinds = np.array([str(r["kind"]) for r in configs])
    markers = {"decode": "o", "verify": "s", "draft": "^"}
    summary = data.get("summary") or {}

    def summary_label(name, values, key):
        s = summary.get(key) or {}
        ape = _ape(values, measured)
        med = s.get("median_ape", float(np.median(ape)))
        p90 = s.get("p90_ape", float(np.quantile(ape, 0.9)))
        return f"{name}: median APE {100 * med:.0f} %, p90 {100 * p90:.0f} %"

    ms = 1 / MILLI
    for kind in sorted(set(kinds), key=lambda k: (VALIDATION_KINDS + (k,)).index(k)):
        sel = kinds == kind
        marker = markers.get(kind, "D")
        yerr = np.vstack([predicted[sel] - low[sel], high[sel] - predicted[sel]]) * ms if has_interval else None
        ax.errorbar(measured[sel] * ms, predicted[sel] * ms, xerr=spread[sel] * measured[sel] * ms, yerr=yerr,
                    fmt=marker,
                    color=COLORS[0], markersize=6, markeredgecolor="black", markeredgewidth=0.5, elinewidth=0.8,
                    capsize=0, zorder=5)
        ax.plot(measured[sel] * ms, roofline[sel] * ms, marker=marker, linestyle="none", markerfacecolor="none",
                markeredgecolor=COLORS[1], markersize=6, markeredgewidth=1.2, zorder=4)
    lo = min(measured.min(), low.min(), roofline.min()) * ms / 1.5
    hi = max(measured.max(), high.max(), roofline.max()) * ms * 1.5
    diag = np.array([lo, hi])
    ax.plot(diag, diag, color="black", linewidth=1)
    ax.fill_between(diag, diag * (1 - band), diag * (1 + band), color="grey", alpha=0.2, linewidth=0)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ticks = _ticks_125(lo, hi)
    ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
    ax.set_yticks(ticks, [f"{t:g}" for t in ticks])
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_aspect("equal")
    ax.set_xlabel("measured step time (ms)")
    ax.set_ylabel("predicted step time (ms)")
    ax.grid(True, which="both", alpha=0.25)
    handles = [
        Line2D([], [], marker="o", linestyle="none", color=COLORS[0], markeredgecolor="black",
               label=summary_label("calibrated", predicted, "calibrated")),
        Line2D([], [], marker="o", linestyle="none", markerfacecolor="none", markeredgecolor=COLORS[1],
               label=summary_label("roofline (uncalibrated)", roofline, "roofline")),
    ]
    handles += [Line2D([], [], marker=markers.get(k, "D"), linestyle="none", color="0.4", label=f"{k} step")
                for k in sorted(set(kinds), key=lambda k: (VALIDATION_KINDS + (k,)).index(k))]
    coverage = summary.get("coverage")
    if has_interval:
        label = "calibrated 90 % interval (vertical bars)"
        if coverage:
            label += f": {100 * coverage['steps']:.0f} % of measurements inside"
        handles.append(Line2D([], [], color=COLORS[0], linewidth=0.8, label=label))
    handles += [Line2D([], [], color="black", linewidth=1, label="predicted = measured"),
                Patch(color="grey", alpha=0.2, label=f"+-{100 * band:.0f} %")]
    ax.legend(handles=handles, loc="upper left", fontsize=8)
    ax.set_title(f"{prefix}step times, {len(configs)} configurations", fontsize=10)

    if speculative:
        ax = axes[1]
        groups: dict[tuple, list[dict]] = {}
        for row in speculative:
            groups.setdefault((row.get("context_tokens"), row.get("k"), row.get("alpha")), []).append(row)
        batches = set()
        for i, (key, rows) in enumerate(sorted(groups.items(), key=lambda kv: tuple(str(v) for v in kv[0]))):
            rows = sorted(rows, key=lambda r: r["batch"])
            b = np.array([r["batch"] for r in rows], dtype=float)
            batches.update(b.tolist())
            color = COLORS[(i + 2) % len(COLORS)]
            ctx, k, a = key
            tag = ", ".join(part for part in (
                f"ctx {format_count(ctx)}" if ctx is not None else "", f"k={k}" if k is not None else "",
                f"alpha={a:g}" if a is not None else "") if part)
            ax.plot(b, [r["measured_speedup"] for r in rows], marker="o", linestyle="none", color=color,
                    markersize=7, markeredgecolor="black", label=f"measured ({tag})", zorder=5)
            ax.plot(b, [r["predicted_speedup"] for r in rows], color=color, linewidth=2, label="predicted, calibrated")
            if all(r.get("predicted_speedup_low") is not None for r in rows):
                ax.fill_between(b, [r["predicted_speedup_low"] for r in rows],
                                [r["predicted_speedup_high"] for r in rows], color=color, alpha=0.15, linewidth=0,
                                label="calibrated 90 % interval")
            if all("roofline_speedup" in r for r in rows):
                ax.plot(b, [r["roofline_speedup"] for r in rows], color=color, linestyle="--", linewidth=1.3,
                        label="predicted, roofline")
        ax.axhline(1.0, color="grey", linestyle=":", label="speedup = 1 (break-even)")
        ax.set_xscale("log", base=2)
        ticks = sorted(batches)
        ax.set_xticks(ticks, [f"{int(t)}" for t in ticks])
        ax.set_xlabel("batch (sequences)")
        ax.set_ylabel("speculative speedup over plain decoding (x)")
        ax.grid(True, alpha=0.3)
        ax.legend(loc="best", fontsize=8)
        ax.set_title(f"{prefix}speculative decoding, measured vs predicted speedup", fontsize=10)
