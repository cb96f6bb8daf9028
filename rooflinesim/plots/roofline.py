"""The roofline chart: a device's ceilings with a model's prefill, decode and verify steps placed on it."""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np

from ..specs.registry import get_short_name
from ..scenario.builder import Scenario
from ..scenario.inputs import check_k
from ..errors import InputError
from ..step import get_step_cost
from ..units import format_count, format_rate
from .common import (
    attach_warnings, COLORS, _cluster_labels, _format_flops_rate, _group_equal_peaks, _new_figure, _tp_label,
    get_measured_ceilings, get_scenario,
)


def _points(step, shape) -> tuple[np.ndarray, np.ndarray]:
    """(arithmetic intensity FLOP/B, achieved FLOP/s = step FLOPs / expected step time) over a grid."""
    flops = np.broadcast_to(step.flops, shape)
    return (np.broadcast_to(step.arithmetic_intensity_flops_per_byte, shape).copy(),
            flops / np.broadcast_to(step.step_time_s, shape))


def get_roofline_data(scenario: Scenario, k: int = 4, per_op: bool = False, prefill: bool = True) -> dict:
    """The points the roofline chart places, from the scenario's own step model (no drawing).

    decode / verify: (intensity, FLOP/s, step time) arrays of shape (n_batch, n_context); prefill: batch 1 with a
    prompt of each context length; ops: the ops of the first decode configuration with FLOPs."""
    hw, model, w, timing = scenario.hardware, scenario.model, scenario.workload, scenario.timing
    k = check_k(k, "verify k (draft length)")
    b, c = scenario.batch[:, None], scenario.context_tokens[None, :]
    shape = (b.size, c.size)
    out = {"batch": scenario.batch, "context_tokens": scenario.context_tokens, "k": int(k),
           # (n_batch, n_context): the decode and the verify step's memory fit (target weights, KV, activations)
           "fits": {name: np.broadcast_to(scenario.get_memory_fit(b, c, q - 1).fits_in_memory, shape).copy()
                    for name, q in (("decode", 1), ("verify", int(k) + 1))}}
    for name, q in (("decode", 1), ("verify", int(k) + 1)):
        step = get_step_cost(hw, model, w, q, timing, c, b)
        out[name] = (*_points(step, shape), np.broadcast_to(step.step_time_s, shape).copy())
    if prefill:
        prompts = np.asarray([x for x in scenario.context_tokens if x > 0] or [1024])
        pre = get_step_cost(hw, model, w, prompts, timing, 0, 1, logits_for_all_tokens=False)
        out["prefill"] = (prompts, *_points(pre, prompts.shape))
    if per_op:
        one = get_step_cost(hw, model, w, 1, timing, scenario.context_tokens[0], scenario.batch[0])
        rows = [(float(np.ravel(op.arithmetic_intensity_flops_per_byte)[0]),
                 op.count * float(np.ravel(op.flops)[0]) / float(np.ravel(t.time_s)[0]), op.name)
                for op, t in zip(one.ops, one.expected) if float(np.ravel(op.flops)[0]) > 0]
        out["ops"] = tuple(list(x) for x in zip(*rows)) if rows else ([], [], [])
    return out


def plot_roofline(
    hw=None,
    model=None,
    batch: Sequence[int] = (1, 8, 64, 256),
    ctx: Sequence[int] = (1024, 32768),
    k: int = 4,
    dtypes: Iterable[str] | None = None,
    per_op: bool = False,
    prefill: bool = True,
    ax=None,
    **options,
):
    """Log-log roofline of a device with a model's steps placed on it.

    `hw` is a Scenario or a hardware name; the other deployment options (dtypes, tp, calibration, ...) are
    `build_scenario`'s. Ceilings: the memory slope (bandwidth x intensity) and one compute ceiling per dtype of the
    device (dtypes with the same peak share a line), each ending at its ridge point; a calibration profile adds its
    measured ceilings (dashed; see `get_measured_ceilings`).

    Points (y = the step's FLOPs / its *expected* step time, x = step FLOPs / step bytes): prefill of a prompt of each
    context length (batch 1), decode (1 new token per sequence) and verify (k + 1 new tokens) at every batch for
    every context, joined across batch so the climb towards the ridge is visible. With `per_op`, the ops of the
    first decode configuration are added as small grey points (ops without FLOPs are left out: log axes).
    """
    scenario = get_scenario(hw, model, batch, ctx, speculative=False, **options)
    data = get_roofline_data(scenario, k, per_op, prefill)
    hw_spec, model_spec, w, timing = scenario.hardware, scenario.model, scenario.workload, scenario.timing
    profile = hw_spec if hw_spec.measured is not None else None
    batches, contexts = [int(x) for x in scenario.batch], [int(x) for x in scenario.context_tokens]
    a, kv = w.activation_dtype, w.kv_dtype

    fig, (ax,) = _new_figure((9.5, 6.5), ax)
    intensities, perfs = [], []
    ctx_colors = [COLORS[(2 + i) % len(COLORS)] for i in range(len(contexts))]
    for name, marker, label, style in (("decode", "o", "decode (1 token)", "-"),
                                       ("verify", "s", f"verify (k + 1 = {int(k) + 1} tokens)", "--")):
        intensity, perf, _ = data[name]
        intensities.append(intensity.ravel())
        perfs.append(perf.ravel())
        fits = data["fits"][name]
        for j, c in enumerate(contexts):
            ax.plot(intensity[:, j], perf[:, j], marker=marker, linestyle=style, color=ctx_colors[j], markersize=7,
                    markeredgecolor="black", markeredgewidth=0.6, zorder=5,
                    label=f"{label}, ctx {format_count(c)}, batch {batches[0]}..{batches[-1]}")
            out = ~fits[:, j]  # priced, but memory would not hold them: hollow
            ax.plot(intensity[out, j], perf[out, j], marker=marker, linestyle="none", markersize=7,
                    markerfacecolor="white", markeredgecolor=ctx_colors[j], markeredgewidth=1.2, zorder=6)
        if marker == "o":  # label the batch sizes once, along the decode curve of the first context
            for i, b in enumerate(batches):
                ax.annotate(f"b={b}", (intensity[i, 0], perf[i, 0]), textcoords="offset points", xytext=(6, -12),
                            fontsize=8, color=ctx_colors[0])
    if prefill:
        prompts, p_int, p_perf = data["prefill"]
        intensities.append(p_int)
        perfs.append(p_perf)
        ax.plot(p_int, p_perf, marker="^", linestyle="none", color="black", markersize=9, zorder=6,
                label=f"prefill, batch 1, prompt {', '.join(format_count(p) for p in prompts)}")
        for x, y, p in zip(p_int, p_perf, prompts):
            ax.annotate(format_count(p), (x, y), textcoords="offset points", xytext=(6, 4), fontsize=8)
    if per_op:
        xs, ys, names = data["ops"]
        intensities.append(np.asarray(xs))
        perfs.append(np.asarray(ys))
        ax.plot(xs, ys, marker="x", linestyle="none", color="grey", markersize=6, zorder=4,
                label=f"ops of decode, batch {batches[0]}, ctx {format_count(contexts[0])}")
        for x, y, label in _cluster_labels(xs, ys, names):
            ax.annotate(label, (x, y), textcoords="offset points", xytext=(-8, 2), ha="right", fontsize=6.5,
                        color="dimgrey")

    # ceilings, after the points so the axis range covers both
    all_x = np.concatenate(intensities)
    all_y = np.concatenate(perfs)
    peak_groups = _group_equal_peaks(
        {d: p for d, p in hw_spec.peak_flops_per_s.items() if dtypes is None or d in set(dtypes)})
    if not peak_groups:
        raise InputError(f"{get_short_name(hw_spec)} has none of the dtypes {list(dtypes)}")
    bandwidths = [hw_spec.memory_bandwidth_bytes_per_s]
    measured = get_measured_ceilings(profile) if profile is not None else []
    if dtypes is not None:
        measured = [row for row in measured if row[0] in set(dtypes)]
    ridges = [p / hw_spec.memory_bandwidth_bytes_per_s for _, p in peak_groups]
    bandwidths += [bw for _, bw, _ in measured]
    ridges += [p / bw for _, bw, p in measured]
    x_lo = max(min(all_x.min(), min(ridges)) / (8 if per_op else 2), 1e-3)  # per-op labels sit left of points
    x_hi = max(all_x.max(), max(ridges)) * 4
    xs = np.logspace(np.log10(x_lo), np.log10(x_hi), 200)
    top = max(p for _, p in peak_groups)
    compute_dtype = hw_spec.get_compute_dtype(a)

    def draw_ceilings(bandwidth, groups, style, prefix, main_color, palette):  # the datasheet roofline
        ridge_top = max(p for _, p in groups) / bandwidth
        mem_x = np.append(xs[xs <= ridge_top], ridge_top)
        ax.plot(mem_x, bandwidth * mem_x, color=main_color, linestyle=style, linewidth=2, alpha=0.85,
                label=f"{prefix}memory {format_rate(bandwidth, 'B/s')}")
        for i, (name, peak) in enumerate(groups):
            ridge = peak / bandwidth
            highlight = compute_dtype in name.split("/")
            ax.plot([ridge, x_hi], [peak, peak], linestyle=style, linewidth=2.4 if highlight else 1.4,
                    color=main_color if highlight else palette[i % len(palette)], alpha=0.85,
                    label=f"{prefix}{name} {_format_flops_rate(peak)}, ridge {ridge:.0f} FLOP/B")
            ax.plot([ridge], [peak], marker="D", color=main_color, markersize=4)

    draw_ceilings(hw_spec.memory_bandwidth_bytes_per_s, peak_groups, "-", "", "black",
                  ("#9467bd", "#8c564b", "#7f7f7f", "#bcbd22"))
    name = getattr(profile.measured, "profile_name", None) or get_short_name(profile) if profile is not None else ""
    for i, (dtype, bandwidth, peak) in enumerate(measured):
        color = ("#d62728", "#e377c2", "#ff7f0e", "#8c564b")[i % 4]
        ridge = peak / bandwidth
        mem_x = np.append(xs[xs <= ridge], ridge)
        ax.plot(np.append(mem_x, x_hi), np.append(bandwidth * mem_x, peak), color=color, linestyle=(0, (3, 1.5)),
                linewidth=2, label=f"measured {dtype} ({name}): {format_rate(bandwidth, 'B/s')}, "
                                   f"{_format_flops_rate(peak)}, ridge {ridge:.0f} FLOP/B")
        ax.plot([ridge], [peak], marker="D", color=color, markersize=4)

    y_lo = min(all_y.min(), x_lo * min(bandwidths)) / 2
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(x_lo, x_hi)
    ax.set_ylim(max(y_lo, top * 1e-7), top * 4)
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("performance (FLOP/s): step FLOPs / expected step time")
    ax.grid(True, which="major", alpha=0.3)
    ax.set_title(
        f"Roofline: {get_short_name(model_spec)} on {get_short_name(hw_spec)}{_tp_label(scenario)} "
        f"(weights {w.weight_dtype}, KV {kv}, compute {a}; verify k = {int(k)}; {timing.name} timing)",
        fontsize=10,
    )
    if not all(f.all() for f in data["fits"].values()):
        from matplotlib.lines import Line2D

        ax.add_line(Line2D([], [], marker="o", linestyle="none", markerfacecolor="white", markeredgecolor="black",
                           label="hollow: does not fit in device memory (priced as if it did)"))
    ax.legend(loc="upper left", fontsize=7.5, framealpha=0.9)
    return attach_warnings(fig, scenario)


