"""Shared pieces of the charts: the figure factory, colours, label helpers, and the scenario every chart prices.

matplotlib is imported inside the functions (never at module import), so nothing on the `predict` path pulls it in.
Figures are built with the object-oriented API on an Agg canvas (no pyplot, no global figure state).
"""

from __future__ import annotations

import math

import json
import os
from pathlib import Path

import numpy as np

from ..scenario.builder import Scenario, build_scenario
from ..scenario.inputs import DEFAULT_BATCH, DEFAULT_CONTEXT_TOKENS
from ..specs.hardware import HardwareSpec
from ..errors import InputError
from ..fileio import open_atomic, read_text_limited
from ..units import format_rate

#: Colours used consistently across charts (matplotlib's tab10 order).
COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
#: Components of the step-time breakdown, bottom to top, with their colours.
BREAKDOWN_COMPONENTS = (
    ("weight traffic", "#4c72b0"),
    ("KV traffic", "#dd8452"),
    ("activation traffic", "#8da0cb"),
    ("compute", "#55a868"),
    ("interconnect", "#937860"),
    ("overhead", "#c44e52"),
)
VALIDATION_KINDS = ("decode", "verify", "draft")

def _new_figure(figsize=(8.0, 5.5), ax=None, ncols: int = 1, **subplot_kw):
    """A Figure on an Agg canvas with `ncols` axes, or the figure of a given axes."""
    if ax is not None:
        return ax.figure, [ax]
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, ncols, squeeze=False, **subplot_kw)[0]
    return fig, list(axes)


def read_report(report, what: str) -> tuple[dict, str]:
    """(the parsed report, where it came from) for a report path or an already-parsed dict; any unreadable file, bad
    JSON or non-object top level is an InputError naming the file (a chart never meets a traceback)."""
    if isinstance(report, dict):
        return report, what
    if not isinstance(report, (str, os.PathLike)):
        raise InputError(f"a {what} is a JSON file path or a dict, got {report!r}")
    where = str(report)
    try:
        data = json.loads(read_text_limited(Path(report), what))
    except json.JSONDecodeError as exc:
        raise InputError(f"{where}: not valid JSON: {exc.msg} (line {exc.lineno})") from exc
    except RecursionError:
        raise InputError(f"{where}: not valid JSON: nested too deeply") from None
    if not isinstance(data, dict):
        raise InputError(f"{where}: expected a JSON object at the top level")
    return data, where


def save_chart(fig, path) -> None:
    """Write a figure as PNG atomically (temporary file, rename): a chart beside its report is whole or absent."""
    with open_atomic(path, "wb") as f:
        fig.savefig(f, format="png", dpi=130, bbox_inches="tight")


def attach_warnings(fig, scenario: Scenario):
    """Keep the scenario's warnings with the figure (`fig.rooflinesim_warnings`), so the CLI shows them as every
    other front end does."""
    fig.rooflinesim_warnings = tuple(getattr(fig, "rooflinesim_warnings", ())) + tuple(scenario.warnings)
    fig.rooflinesim_assumed = {**getattr(fig, "rooflinesim_assumed", {}), **scenario.assumed}
    return fig


def get_scenario(hw=None, model=None, batch=DEFAULT_BATCH, ctx=DEFAULT_CONTEXT_TOKENS, **options) -> Scenario:
    """The chart's scenario: `hw` may already be a Scenario (used as it is); otherwise every argument goes to
    `scenario.build_scenario`, the one place that resolves defaults and checks."""
    if isinstance(hw, Scenario):
        return hw
    if model is not None:
        options["model"] = model
    return build_scenario(hw, batch=batch, ctx=ctx, **options)


def _format_flops_rate(value: float) -> str:
    return format_rate(value, "FLOP/s")


def get_measured_ceilings(profile: HardwareSpec) -> list[tuple[str, float, float]]:
    """[(dtype, bandwidth bytes/s, peak FLOP/s)] to draw as a calibration profile's measured ceilings.

    A profile is a hardware spec with a `measured` block (`rooflinesim.specs.measured.MeasuredProfile`). Each measured dtype
    contributes its weight-streaming (GEMV) bandwidth and its fitted GEMM peak. A `measured` block without per-dtype
    figures falls back to the profile's top-level `memory_bandwidth_bytes_per_s` and `peak_flops_per_s`, which a
    profile fills with its fitted effective values.
    """
    measured = profile.measured
    dtypes = getattr(measured, "dtypes", None)
    if dtypes is None and isinstance(measured, dict):
        dtypes = measured.get("dtypes")
    out = []
    for dtype, prof in (dtypes or {}).items():
        get = prof.get if isinstance(prof, dict) else lambda key, p=prof: getattr(p, key, None)
        bandwidth, peak = get("gemv_bandwidth_bytes_per_s"), get("peak_flops_per_s")
        if isinstance(bandwidth, (int, float)) and isinstance(peak, (int, float)) and bandwidth > 0 and peak > 0:
            out.append((str(dtype), float(bandwidth), float(peak)))
    if not out:
        out = [(d, profile.memory_bandwidth_bytes_per_s, p) for d, p in profile.peak_flops_per_s.items()]
    return sorted(out, key=lambda row: row[2])


def _cluster_labels(xs, ys, names, tolerance_decades: float = 0.1):
    """Merge labels of points that sit on top of each other on log-log axes: [(x, y, 'a, b, c'), ...]."""
    clusters: list[list] = []
    for x, y, name in sorted(zip(xs, ys, names)):
        for cluster in clusters:
            if (abs(np.log10(x / cluster[0])) < tolerance_decades
                    and abs(np.log10(y / cluster[1])) < tolerance_decades):
                cluster[2].append(name)
                break
        else:
            clusters.append([x, y, [name]])
    out = []
    for x, y, group in clusters:
        lines = [", ".join(group[i:i + 3]) for i in range(0, len(group), 3)]
        out.append((x, y, "\n".join(lines)))
    return out


def _boundary_segments(mask: np.ndarray, where: np.ndarray | None = None) -> list:
    """Cell edges between True and False cells of a 2-D mask drawn with cell (i, j) centred on (x=j, y=i); with
    `where`, only edges between two cells that are both in `where` (e.g. both fit in memory)."""
    segments = []
    n_rows, n_cols = mask.shape
    where = np.ones(mask.shape, dtype=bool) if where is None else np.asarray(where, dtype=bool)
    for i in range(n_rows):
        for j in range(n_cols):
            if not where[i, j]:
                continue
            if j + 1 < n_cols and where[i, j + 1] and mask[i, j] != mask[i, j + 1]:
                segments.append([(j + 0.5, i - 0.5), (j + 0.5, i + 0.5)])
            if i + 1 < n_rows and where[i + 1, j] and mask[i, j] != mask[i + 1, j]:
                segments.append([(j - 0.5, i + 0.5), (j + 0.5, i + 0.5)])
    return segments


def _ticks_125(lo: float, hi: float) -> list[float]:
    """1-2-5 ticks inside [lo, hi] (readable labels on a log axis spanning a few decades)."""
    ticks = []
    for exponent in range(int(np.floor(np.log10(lo))), int(np.ceil(np.log10(hi))) + 1):
        for m in (1, 2, 5):
            value = float(f"{m * 10.0 ** exponent:.12g}")
            if lo <= value <= hi:
                ticks.append(value)
    return ticks


def _group_equal_peaks(peaks: dict[str, float]) -> list[tuple[str, float]]:
    """{'bf16': p, 'fp16': p, 'fp32': q} -> [('fp32', q), ('bf16/fp16', p)], ascending by peak."""
    groups: dict[float, list[str]] = {}
    for dtype, peak in peaks.items():
        groups.setdefault(float(peak), []).append(dtype)
    return [("/".join(names), peak) for peak, names in sorted(groups.items())]


def _tp_label(scenario: Scenario) -> str:
    tp = scenario.workload.tensor_parallel
    return f" x{tp} (tensor parallel)" if tp > 1 else ""




def describe_machine_speed(report: dict) -> str:
    """The report's machine-speed check (`calibrate.measure.anchor`) in a few words for a chart's title, or "" when the report
    has none (or none a profile could be compared with): the median time now / then of each anchor."""
    check = report.get("machine_speed") if isinstance(report, dict) else None
    medians = check.get("median_ratio") if isinstance(check, dict) else None
    if not isinstance(medians, dict) or not medians:
        return ""
    parts = [f"{name} {value:.2f}x" for name, value in medians.items()
             if isinstance(name, str) and isinstance(value, (int, float)) and math.isfinite(value)]
    if not parts:
        return ""
    tolerance = check.get("tolerance")
    tolerance = tolerance if isinstance(tolerance, (int, float)) and math.isfinite(tolerance) else 0.1
    flag = "within" if check.get("matches_profile") else "OUTSIDE"
    return f"machine speed vs profile (time now / then, median): {', '.join(parts)}, {flag} +-{tolerance:.0%}"
