"""Charts of the model's answers. Every function returns a matplotlib Figure.

matplotlib is imported inside the functions (never at module import), so nothing on the `predict` path pulls it in.
Figures are built with the object-oriented API on an Agg canvas (no pyplot, no global figure state): save them with
`fig.savefig(path)`, or show them in a notebook after `%matplotlib inline`.

Each function accepts names, aliases or paths (as `predict` does) or already-loaded specs, and an optional `ax` to
draw into an existing axes (the function then returns that axes' figure).

| function | shows |
|---|---|
| `plot_roofline` | the roofline of a device (memory and compute ceilings per dtype, measured ceilings of a profile) with prefill, decode and verify steps placed on it |
| `plot_speedup_map` | best speculative speedup over batch x context, the speedup = 1 break-even contour, best k per cell |
| `plot_speedup_vs_k` | speedup vs draft length for several acceptance rates, step model beside Leviathan's closed form |
| `plot_step_breakdown` | one step's expected time vs context, stacked by what dominates each op |
| `plot_validation` | predicted vs measured step times and speedups from a `rooflinesim validate` report |
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from .registry import get_short_name, load_hardware, load_model
from .specs import HardwareSpec, InputError, ModelSpec
from .units import DEFAULT_QUANT_GROUP_SIZE, format_count, format_rate

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
#: Op kinds timed by the interconnect (tensor-parallel collectives), attributed to 'interconnect'.
COLLECTIVE_OP_KINDS = frozenset({"allreduce", "allgather"})
VALIDATION_KINDS = ("decode", "verify", "draft")


# ---------------------------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------------------------


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


def _resolve_specs(hw, model) -> tuple[HardwareSpec, ModelSpec]:
    return load_hardware(hw), load_model(model)


def _resolve_dtypes(weight_dtype="bf16", kv_dtype=None, activation_dtype=None):
    from .predict import get_default_activation_dtype
    from .units import UnitError, normalize_dtype

    try:
        w = normalize_dtype(weight_dtype)
        a = normalize_dtype(activation_dtype) if activation_dtype else get_default_activation_dtype(w)
        kv = normalize_dtype(kv_dtype) if kv_dtype else a
    except UnitError as exc:
        raise InputError(str(exc)) from exc
    return w, kv, a


def _timing(hw: HardwareSpec):
    """The expected-time model `predict` uses (a measured profile's tables when the spec carries them)."""
    from .predict import get_timing_model
    from .roofline import DatasheetTiming

    try:
        return get_timing_model(hw)
    except ImportError:  # a profile's measured tables need rooflinesim.calibrate.profile; the title names the model
        return DatasheetTiming.expected(hw)


def _positive_ints(values, what: str) -> list[int]:
    out = sorted({int(v) for v in np.atleast_1d(values)})
    if not out or out[0] <= 0:
        raise InputError(f"{what} must be positive integers, got {list(np.atleast_1d(values))}")
    return out


def _format_flops_rate(value: float) -> str:
    return format_rate(value, "FLOP/s")


def get_measured_ceilings(profile: HardwareSpec) -> list[tuple[str, float, float]]:
    """[(dtype, bandwidth bytes/s, peak FLOP/s)] to draw as a calibration profile's measured ceilings.

    A profile is a hardware spec with a `measured` block (`rooflinesim.specs.MeasuredProfile`). Each measured dtype
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


def _apply_calibration(hw_spec: HardwareSpec, calibration) -> tuple[HardwareSpec, HardwareSpec | None]:
    """(spec to time with, profile to draw) for `--hw NAME --calibration FILE`, as `predict` applies it."""
    if calibration is None:
        return hw_spec, (hw_spec if hw_spec.measured is not None else None)
    if isinstance(calibration, HardwareSpec):
        profile = calibration
    else:
        try:
            from .calibrate.profile import load_profile
        except ImportError:  # pragma: no cover - calibrate ships with the package
            profile = load_hardware(calibration)
        else:
            profile = load_profile(calibration)
    if profile.measured is None:
        return hw_spec, profile
    return hw_spec.model_copy(update={"measured": profile.measured}), profile


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


def _boundary_segments(mask: np.ndarray) -> list:
    """Cell edges between True and False cells of a 2-D mask drawn with cell (i, j) centred on (x=j, y=i)."""
    segments = []
    n_rows, n_cols = mask.shape
    for i in range(n_rows):
        for j in range(n_cols):
            if j + 1 < n_cols and mask[i, j] != mask[i, j + 1]:
                segments.append([(j + 0.5, i - 0.5), (j + 0.5, i + 0.5)])
            if i + 1 < n_rows and mask[i, j] != mask[i + 1, j]:
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


# ---------------------------------------------------------------------------------------------------------------
# roofline
# ---------------------------------------------------------------------------------------------------------------


def _tp_label(tp) -> str:
    return f" x{int(tp)} (tensor parallel)" if tp and int(tp) > 1 else ""


def plot_roofline(
    hw="a100",
    model="llama-3.1-8b",
    batch: Sequence[int] = (1, 8, 64, 256),
    ctx: Sequence[int] = (1024, 32768),
    k: int = 4,
    weight_dtype: str = "bf16",
    kv_dtype: str | None = None,
    activation_dtype: str | None = None,
    attention: str = "flash",
    calibration=None,
    tp: int = 1,
    quant_group_size: int = DEFAULT_QUANT_GROUP_SIZE,
    dtypes: Iterable[str] | None = None,
    per_op: bool = False,
    prefill: bool = True,
    ax=None,
):
    """Log-log roofline of a device with a model's steps placed on it.

    Ceilings: the memory slope (bandwidth x intensity) and one compute ceiling per dtype of `hw` (dtypes with the
    same peak share a line), each ending at its ridge point. Measured ceilings (dashed) come from `calibration` (a
    profile name/path/spec) or, when `hw` itself is a profile (its `measured` block is set), from `hw`; see
    `get_measured_ceilings`.

    Points (y = the step's FLOPs / its *expected* step time, x = step FLOPs / step bytes): prefill of a prompt of each
    context length (batch 1), decode (1 new token per sequence) and verify (k + 1 new tokens) at every batch in `batch`
    for every context in `ctx`, joined across batch so the climb towards the ridge is visible. With `per_op`, the ops
    of the first decode configuration are added as small grey points (ops without FLOPs are left out: log axes).
    """
    from .step import check_tensor_parallel, get_step_cost

    hw_spec, model_spec = _resolve_specs(hw, model)
    tp = check_tensor_parallel(model_spec, tp, hw_spec)
    w, kv, a = _resolve_dtypes(weight_dtype, kv_dtype, activation_dtype)
    batches = _positive_ints(batch, "batch sizes")
    contexts = sorted({int(c) for c in np.atleast_1d(ctx)})
    if not contexts or contexts[0] < 0:
        raise InputError("contexts must be >= 0")
    if int(k) < 0:
        raise InputError(f"k must be >= 0, got {k}")
    timed_spec, profile = _apply_calibration(hw_spec, calibration)
    timing = _timing(timed_spec)

    fig, (ax,) = _new_figure((9.5, 6.5), ax)
    b_arr = np.asarray(batches, dtype=float)[:, None]
    c_arr = np.asarray(contexts, dtype=float)[None, :]
    decode = get_step_cost(hw_spec, model_spec, b_arr, c_arr, 1, w, kv, a, attention, timing=timing,
                           tensor_parallel=tp, quant_group_size=quant_group_size)
    verify = get_step_cost(hw_spec, model_spec, b_arr, c_arr, int(k) + 1, w, kv, a, attention, timing=timing,
                           tensor_parallel=tp, quant_group_size=quant_group_size)
    intensities, perfs = [], []

    def point_arrays(step):
        flops = np.broadcast_to(step.flops, (len(batches), len(contexts)))
        intensity = np.broadcast_to(step.arithmetic_intensity_flops_per_byte, flops.shape)
        perf = flops / np.broadcast_to(step.step_time_s, flops.shape)
        intensities.append(intensity.ravel())
        perfs.append(perf.ravel())
        return intensity, perf

    ctx_colors = [COLORS[(2 + i) % len(COLORS)] for i in range(len(contexts))]
    for step, marker, label, style in ((decode, "o", "decode (1 token)", "-"),
                                       (verify, "s", f"verify (k + 1 = {int(k) + 1} tokens)", "--")):
        intensity, perf = point_arrays(step)
        for j, c in enumerate(contexts):
            ax.plot(intensity[:, j], perf[:, j], marker=marker, linestyle=style, color=ctx_colors[j], markersize=7,
                    markeredgecolor="black", markeredgewidth=0.6, zorder=5,
                    label=f"{label}, ctx {format_count(c)}, batch {batches[0]}..{batches[-1]}")
        if marker == "o":  # label the batch sizes once, along the decode curve of the first context
            for i, b in enumerate(batches):
                ax.annotate(f"b={b}", (intensity[i, 0], perf[i, 0]), textcoords="offset points", xytext=(6, -12),
                            fontsize=8, color=ctx_colors[0])
    if prefill:
        prompts = [c for c in contexts if c > 0] or [1024]
        pre = get_step_cost(hw_spec, model_spec, 1, 0, np.asarray(prompts, dtype=float), w, kv, a, attention,
                            logits_for_all_tokens=False, timing=timing, tensor_parallel=tp,
                            quant_group_size=quant_group_size)
        p_int = np.broadcast_to(pre.arithmetic_intensity_flops_per_byte, (len(prompts),))
        p_perf = np.broadcast_to(pre.flops / pre.step_time_s, (len(prompts),))
        intensities.append(p_int)
        perfs.append(p_perf)
        ax.plot(p_int, p_perf, marker="^", linestyle="none", color="black", markersize=9, zorder=6,
                label=f"prefill, batch 1, prompt {', '.join(format_count(p) for p in prompts)}")
        for x, y, p in zip(p_int, p_perf, prompts):
            ax.annotate(format_count(p), (x, y), textcoords="offset points", xytext=(6, 4), fontsize=8)
    if per_op:
        one = get_step_cost(hw_spec, model_spec, batches[0], contexts[0], 1, w, kv, a, attention, timing=timing,
                            tensor_parallel=tp, quant_group_size=quant_group_size)
        xs, ys, names = [], [], []
        for op, t in zip(one.ops, one.expected):
            flops = float(np.asarray(op.flops).reshape(-1)[0])
            if flops <= 0:
                continue
            xs.append(float(np.asarray(op.arithmetic_intensity_flops_per_byte).reshape(-1)[0]))
            ys.append(op.count * flops / float(np.asarray(t.time_s).reshape(-1)[0]))
            names.append(op.name)
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
        f"Roofline: {get_short_name(model_spec)} on {get_short_name(hw_spec)}{_tp_label(tp)} "
        f"(weights {w}, KV {kv}, compute {a}; verify k = {int(k)}; {timing.name} timing)",
        fontsize=10,
    )
    ax.legend(loc="upper left", fontsize=7.5, framealpha=0.9)
    return fig


# ---------------------------------------------------------------------------------------------------------------
# speculation
# ---------------------------------------------------------------------------------------------------------------


def plot_speedup_map(
    hw="h100",
    model="llama-3.1-8b",
    draft=None,
    alpha: float = 0.8,
    batch: Sequence[int] = tuple(2**i for i in range(11)),
    ctx: Sequence[int] = tuple(2**i for i in range(9, 18)),
    k: Sequence[int] = tuple(range(0, 9)),
    weight_dtype: str = "bf16",
    kv_dtype: str | None = None,
    activation_dtype: str | None = None,
    attention: str = "flash",
    drafter: str | None = None,
    calibration=None,
    tp: int = 1,
    quant_group_size: int = DEFAULT_QUANT_GROUP_SIZE,
    draft_tp: int | None = None,
    annotate: bool = True,
    colorbar: bool = True,
    ax=None,
):
    """Heatmap of the best speculative speedup (best over k >= 1 in `k`) over batch (rows) x context (columns).

    The solid black contour is speedup = 1 (break-even: on its low side even the best k loses to plain decoding).
    Each cell is annotated with its speedup and the best k. Hatched cells do not fit in device memory at that k
    (target + draft weights, both KV caches, verify activations); they are priced as if they did.
    """
    from matplotlib.collections import LineCollection
    from matplotlib.colors import TwoSlopeNorm
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch, Rectangle

    from .sweep import sweep

    alpha_values = np.atleast_1d(alpha)
    if alpha_values.size != 1:
        raise InputError(f"a speedup map takes one acceptance rate, got {list(alpha_values)}")
    k_values = sorted({int(x) for x in k} | {0})
    if max(k_values) < 1:
        raise InputError("the speedup map needs some k >= 1")
    result = sweep(hw=hw, model=model, draft=draft, batch=batch, ctx=ctx, alpha=[float(alpha_values[0])],
                   k=k_values, weight_dtype=weight_dtype, kv_dtype=kv_dtype, activation_dtype=activation_dtype,
                   attention=attention, drafter=drafter, calibration=calibration, tp=tp, draft_tp=draft_tp,
                   quant_group_size=quant_group_size)
    spec = result.k > 0
    speedup = result.speedup[:, :, spec, 0]
    best_index = np.argmax(speedup, axis=2)
    best = np.take_along_axis(speedup, best_index[..., None], axis=2)[..., 0]
    best_k = result.k[spec][best_index]
    fits = np.take_along_axis(result.fits_in_memory[:, :, spec], best_index[..., None], axis=2)[..., 0]

    n_b, n_c = best.shape
    fig, (ax,) = _new_figure((max(7.0, 0.8 * n_c + 3), max(5.0, 0.42 * n_b + 2.2)), ax)
    lo, hi = float(best.min()), float(best.max())
    norm = TwoSlopeNorm(vcenter=1.0, vmin=min(lo, 0.9), vmax=max(hi, 1.1))
    mesh = ax.pcolormesh(np.arange(n_c + 1) - 0.5, np.arange(n_b + 1) - 0.5, best, cmap="RdBu", norm=norm)
    handles = []
    pays = best >= 1.0
    segments = _boundary_segments(pays)
    if segments:
        ax.add_collection(LineCollection(segments, colors="black", linewidths=2.4, capstyle="round"))
        handles.append(Line2D([], [], color="black", linewidth=2.4, label="speedup = 1 boundary (break-even)"))
    else:
        handles.append(Line2D([], [], linestyle="none",
                              label="no break-even in this range: " + ("always pays" if pays.all() else "never pays")))
    note = ""
    if not fits.any():
        note = " - exceeds device memory everywhere (priced as if it fitted)"
    elif not fits.all():
        for i, j in zip(*np.nonzero(~fits)):
            ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, hatch="///", edgecolor="0.35", linewidth=0))
        handles.append(Patch(facecolor="white", hatch="///", edgecolor="0.35",
                             label="exceeds device memory (priced as if it fitted)"))
    if annotate:
        rgba = mesh.cmap(norm(best))
        luminance = 0.299 * rgba[..., 0] + 0.587 * rgba[..., 1] + 0.114 * rgba[..., 2]
        size = 7.5 if n_c <= 10 else 6.5
        for i in range(n_b):
            for j in range(n_c):
                value = best[i, j]
                digits = 3 if abs(value - 1.0) < 0.005 else 2  # never print 1.00 on the losing side of 1
                ax.text(j, i, f"{value:.{digits}f}\nk={best_k[i, j]}", ha="center", va="center", fontsize=size,
                        color="white" if luminance[i, j] < 0.45 else "black", linespacing=1.0)
    ax.set_xticks(np.arange(n_c), [format_count(c) for c in result.context_tokens])
    ax.set_yticks(np.arange(n_b), [str(b) for b in result.batch])
    ax.set_xlabel("context (tokens already in the KV cache)")
    ax.set_ylabel("batch (sequences decoded together)")
    if colorbar:
        bar = fig.colorbar(mesh, ax=ax, label="best speculative speedup over plain decoding (x)", shrink=0.9)
        ticks = np.concatenate([np.linspace(norm.vmin, 1.0, 3), np.linspace(1.0, norm.vmax, 5)])
        bar.set_ticks(np.unique(np.round(ticks, 2)))
    w, kv, a = _resolve_dtypes(weight_dtype, kv_dtype, activation_dtype)
    ax.set_title(f"{result.model} + draft {result.draft} on {result.hardware}{_tp_label(tp)}: best speedup over k = 1..{max(k_values)}"
                 f"\nalpha = {float(alpha_values[0]):g}, weights {w}, KV {kv}{note}", fontsize=10)
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=len(handles), fontsize=8,
              frameon=False)
    return fig


def plot_speedup_vs_k(
    hw="h100",
    model="llama-3.1-8b",
    draft=None,
    alpha: Sequence[float] = (0.6, 0.7, 0.8, 0.9),
    batch: int = 1,
    ctx: int = 4096,
    k_max: int = 10,
    weight_dtype: str = "bf16",
    kv_dtype: str | None = None,
    activation_dtype: str | None = None,
    attention: str = "flash",
    drafter: str | None = None,
    calibration=None,
    tp: int = 1,
    quant_group_size: int = DEFAULT_QUANT_GROUP_SIZE,
    draft_tp: int | None = None,
    ax=None,
):
    """Speedup vs draft length k for several acceptance rates: the step model (solid) and Leviathan's closed form
    (dashed), (1 - a^(k+1)) / ((1 - a)(k c + 1)) with c = draft step time / target decode step time from the same step
    model at this batch and context. The gap between them is what the closed form leaves out: the verify step over
    k + 1 tokens costs more than one decode step (more FLOPs, KV reads, logits). Stars mark the best k of the step
    model.
    """
    from matplotlib.lines import Line2D

    from .acceptance import leviathan_walltime_improvement
    from .sweep import sweep

    alphas = sorted({float(x) for x in np.atleast_1d(alpha)})
    batches = _positive_ints(batch, "batch")
    contexts = sorted({int(c) for c in np.atleast_1d(ctx)})
    if len(batches) != 1 or len(contexts) != 1:
        raise InputError("speedup vs k takes one batch and one context")
    if not 1 <= int(k_max) <= 16:
        raise InputError(f"k_max must lie in 1..16, got {k_max}")
    k_values = list(range(0, int(k_max) + 1))
    result = sweep(hw=hw, model=model, draft=draft, batch=batches, ctx=contexts, alpha=alphas, k=k_values,
                   weight_dtype=weight_dtype, kv_dtype=kv_dtype, activation_dtype=activation_dtype,
                   attention=attention, drafter=drafter, calibration=calibration, tp=tp, draft_tp=draft_tp,
                   quant_group_size=quant_group_size)
    c = float(result.draft_step_time_s[0, 0] / result.target_decode_time_s[0, 0])
    fig, (ax,) = _new_figure((8.5, 5.5), ax)
    ks = np.asarray(k_values)
    gap = 0.0
    for i, a in enumerate(result.alpha):
        color = COLORS[i % len(COLORS)]
        model_curve = result.speedup[0, 0, :, i]
        closed = leviathan_walltime_improvement(a, ks, c)
        gap = max(gap, float(np.max(np.abs(closed - model_curve))))
        ax.plot(ks, model_curve, marker="o", markersize=4, color=color, linewidth=3, alpha=0.55, zorder=2,
                label=f"alpha = {a:g}")
        ax.plot(ks, closed, linestyle="--", color=color, linewidth=1.5, zorder=3)
        best = int(np.argmax(model_curve))
        ax.plot([ks[best]], [model_curve[best]], marker="*", markersize=15, color=color, markeredgecolor="black",
                zorder=6)
        ax.annotate(f"k={ks[best]}: {model_curve[best]:.2f}x", (ks[best], model_curve[best]), textcoords="offset points",
                    xytext=(0, 10), ha="center", fontsize=8, color=color, zorder=7,
                    bbox=dict(boxstyle="round,pad=0.15", facecolor="white", edgecolor="none", alpha=0.85))
    ax.axhline(1.0, color="grey", linestyle=":", linewidth=1)
    handles, _ = ax.get_legend_handles_labels()
    handles += [
        Line2D([], [], color="black", linewidth=3, alpha=0.55, label="step model (verify priced at k + 1 tokens)"),
        Line2D([], [], color="black", linestyle="--", linewidth=1.5,
               label=f"Leviathan closed form, c = {c:.3f} (max gap {gap:.2f}x)"),
        Line2D([], [], color="black", marker="*", linestyle="none", markersize=11, label="best k (step model)"),
        Line2D([], [], color="grey", linestyle=":", label="speedup = 1 (plain decoding)"),
    ]
    ax.legend(handles=handles, loc="best", fontsize=8, ncol=2)
    ax.set_xticks(ks)
    ax.set_xlabel("draft length k (draft tokens per speculative step)")
    ax.set_ylabel("speedup over plain decoding (x)")
    ax.grid(True, alpha=0.3)
    ax.set_ylim(bottom=min(0.0 + 0.9 * float(np.min(result.speedup)), 0.9))
    w, kv, act = _resolve_dtypes(weight_dtype, kv_dtype, activation_dtype)
    ax.set_title(f"Speedup vs k: {result.model} + draft {result.draft} on {result.hardware}{_tp_label(tp)}, batch {batches[0]}, "
                 f"ctx {format_count(contexts[0])}, {w}", fontsize=10)
    return fig


# ---------------------------------------------------------------------------------------------------------------
# step-time breakdown
# ---------------------------------------------------------------------------------------------------------------


def get_step_breakdown(step) -> dict[str, np.ndarray]:
    """Split a StepCost's expected time into weight / KV / activation traffic, compute and overhead (seconds).

    Attribution, op by op (each op's expected time is max(compute, memory) + overhead): the op's kernel overhead goes
    to 'overhead'; the max(...) part goes wholly to its dominant component: to 'compute' when the op is compute-bound,
    otherwise to memory traffic, split between weights, KV cache (reads + writes) and activations (reads + writes) in
    proportion to the bytes the op moves of each. Tensor-parallel collectives (all-reduce, all-gather) go wholly to
    'interconnect'. The step's fixed overhead is added to 'overhead'. The components sum
    to `step.step_time_s` exactly. Time hidden under the dominant side (e.g. the compute of a memory-bound GEMV) is not
    shown: this is where the time goes, not what the hardware does.
    """
    parts = {name: 0.0 for name, _ in BREAKDOWN_COMPONENTS}
    for op, t in zip(step.ops, step.expected):
        if op.kind in COLLECTIVE_OP_KINDS:  # link transfer + latency of a tensor-parallel collective
            parts["interconnect"] = parts["interconnect"] + np.asarray(t.time_s)
            continue
        body = np.asarray(t.time_s) - np.asarray(t.overhead_s)
        compute_bound = np.asarray(t.compute_bound)
        total_bytes = np.asarray(op.bytes, dtype=float)
        safe = np.where(total_bytes > 0, total_bytes, 1.0)
        memory_part = np.where(compute_bound, 0.0, body)
        parts["compute"] = parts["compute"] + np.where(compute_bound, body, 0.0)
        parts["weight traffic"] = parts["weight traffic"] + memory_part * op.weight_bytes / safe
        parts["KV traffic"] = parts["KV traffic"] + memory_part * (op.kv_read_bytes + op.kv_write_bytes) / safe
        parts["activation traffic"] = (parts["activation traffic"]
                                       + memory_part * (op.act_read_bytes + op.act_write_bytes) / safe)
        parts["overhead"] = parts["overhead"] + np.asarray(t.overhead_s)
    parts["overhead"] = parts["overhead"] + step.step_overhead_s
    shape = np.shape(step.step_time_s)
    return {name: np.broadcast_to(np.asarray(v, dtype=float), shape).copy() for name, v in parts.items()}


def plot_step_breakdown(
    hw="h100",
    model="llama-3.1-8b",
    batch: int = 1,
    ctx: Sequence[int] | None = None,
    new_tokens: int = 1,
    weight_dtype: str = "bf16",
    kv_dtype: str | None = None,
    activation_dtype: str | None = None,
    attention: str = "flash",
    calibration=None,
    tp: int = 1,
    quant_group_size: int = DEFAULT_QUANT_GROUP_SIZE,
    ax=None,
):
    """Stacked expected step time vs context: weight, KV and activation traffic, compute, (interconnect,) overhead.

    `new_tokens` = 1 is a decode step, k + 1 a verify step. Contexts default to powers of two from 256 up to the
    model's maximum. See `get_step_breakdown` for how each op's time is attributed; the dashed line is the speed-of-light
    (roofline) step time for comparison.
    """
    from .step import check_tensor_parallel, get_step_cost

    hw_spec, model_spec = _resolve_specs(hw, model)
    tp = check_tensor_parallel(model_spec, tp, hw_spec)
    w, kv, a = _resolve_dtypes(weight_dtype, kv_dtype, activation_dtype)
    batches = _positive_ints(batch, "batch")
    if len(batches) != 1:
        raise InputError("the step breakdown takes one batch size")
    if int(new_tokens) < 1:
        raise InputError(f"new tokens per sequence must be >= 1, got {new_tokens}")
    if ctx is None:
        ctx = [2**i for i in range(8, 30) if 2**i <= model_spec.max_context_tokens]
    contexts = np.asarray(sorted({int(c) for c in np.atleast_1d(ctx)}), dtype=float)
    if contexts.size < 2 or contexts[0] < 0:
        raise InputError("the step breakdown needs at least two contexts >= 0")
    timing = _timing(_apply_calibration(hw_spec, calibration)[0])
    step = get_step_cost(hw_spec, model_spec, batches[0], contexts, int(new_tokens), w, kv, a, attention,
                         timing=timing, tensor_parallel=tp, quant_group_size=quant_group_size)
    parts = get_step_breakdown(step)
    fig, (ax,) = _new_figure((8.5, 5.5), ax)
    shown = [(n, c) for n, c in BREAKDOWN_COMPONENTS if n != "interconnect" or np.any(parts[n] > 0)]
    names = [n for n, _ in shown]
    colors = [c for _, c in shown]
    ax.stackplot(contexts, *[parts[n] * 1e3 for n in names], labels=names, colors=colors, alpha=0.9)
    ax.plot(contexts, np.broadcast_to(step.roofline_step_time_s, contexts.shape) * 1e3, color="black", linestyle="--",
            linewidth=1.5, label="speed-of-light step time")
    ax.set_xscale("log", base=2)
    ax.set_xlim(contexts[0], contexts[-1])
    ax.set_xticks(contexts, [format_count(c) for c in contexts], fontsize=8)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("context (tokens already in the KV cache)")
    ax.set_ylabel("expected step time (ms)")
    ax.grid(True, alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    order = list(range(len(names)))[::-1] + [len(names)]  # legend top-to-bottom matches the stack
    ax.legend([handles[i] for i in order], [labels[i] for i in order], loc="upper left", fontsize=8)
    what = "decode" if int(new_tokens) == 1 else f"verify (k + 1 = {int(new_tokens)} tokens)"
    ax.set_title(f"Where a {what} step's time goes: {get_short_name(model_spec)} on {get_short_name(hw_spec)}"
                 f"{_tp_label(tp)}, batch {batches[0]}\nweights {w}, KV {kv}, compute {a}; {timing.name} timing", fontsize=10)
    return fig


# ---------------------------------------------------------------------------------------------------------------
# validation
# ---------------------------------------------------------------------------------------------------------------


def load_validation_report(report) -> dict:
    """A validation report (path or already-parsed dict), checked for the keys the chart needs.

    Schema (written by `rooflinesim validate`): device, dtype, model, draft, configs: [{kind, batch, context_tokens,
    new_tokens, measured_s, measured_spread, predicted_s, roofline_s}], summary: {calibrated: {median_ape, p90_ape},
    roofline: {...}}, speculative: [{batch, context_tokens, k, alpha, measured_speedup, predicted_speedup,
    roofline_speedup}].
    """
    if isinstance(report, dict):
        data, where = report, "validation report"
    else:
        where = str(report)
        try:
            data = json.loads(Path(report).read_text())
        except OSError as exc:
            raise InputError(f"{where}: cannot read: {exc.strerror}") from exc
        except json.JSONDecodeError as exc:
            raise InputError(f"{where}: not valid JSON: {exc.msg} (line {exc.lineno})") from exc
    if not isinstance(data, dict):
        raise InputError(f"{where}: expected a JSON object at the top level")
    configs = data.get("configs")
    if not isinstance(configs, list) or not configs:
        raise InputError(f"{where}: needs a non-empty 'configs' list")
    for i, row in enumerate(configs):
        missing = [key for key in ("kind", "measured_s", "predicted_s", "roofline_s") if key not in row]
        if missing:
            raise InputError(f"{where}: configs[{i}] lacks {', '.join(missing)}")
        if not all(isinstance(row[key], (int, float)) and row[key] > 0
                   for key in ("measured_s", "predicted_s", "roofline_s")):
            raise InputError(f"{where}: configs[{i}]: times must be positive numbers of seconds")
    for i, row in enumerate(data.get("speculative") or []):
        missing = [key for key in ("batch", "measured_speedup", "predicted_speedup") if key not in row]
        if missing:
            raise InputError(f"{where}: speculative[{i}] lacks {', '.join(missing)}")
    return data


def _ape(predicted, measured) -> np.ndarray:
    return np.abs(np.asarray(predicted) / np.asarray(measured) - 1.0)


def plot_validation(report, band: float = 0.10):
    """Predicted vs measured from a validation report; one row per validated dtype when the report has `by_dtype`.

    Left: each configuration's predicted step time against the measured one (log-log), calibrated (filled) and the
    uncalibrated roofline (hollow), marker by kind (decode, verify, draft); the diagonal is perfect agreement and the
    shaded band +-`band`. Horizontal bars show the measured spread, read as a fraction of `measured_s` (it carries no
    unit in its name). The legend gives each model's median and p90 absolute percentage error (from the report's
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
    kinds = np.array([str(r["kind"]) for r in configs])
    markers = {"decode": "o", "verify": "s", "draft": "^"}
    summary = data.get("summary") or {}

    def summary_label(name, values, key):
        s = summary.get(key) or {}
        ape = _ape(values, measured)
        med = s.get("median_ape", float(np.median(ape)))
        p90 = s.get("p90_ape", float(np.quantile(ape, 0.9)))
        return f"{name}: median APE {100 * med:.0f} %, p90 {100 * p90:.0f} %"

    ms = 1e3
    for kind in sorted(set(kinds), key=lambda k: (VALIDATION_KINDS + (k,)).index(k)):
        sel = kinds == kind
        marker = markers.get(kind, "D")
        ax.errorbar(measured[sel] * ms, predicted[sel] * ms, xerr=spread[sel] * measured[sel] * ms, fmt=marker,
                    color=COLORS[0], markersize=6, markeredgecolor="black", markeredgewidth=0.5, elinewidth=0.8,
                    capsize=0, zorder=5)
        ax.plot(measured[sel] * ms, roofline[sel] * ms, marker=marker, linestyle="none", markerfacecolor="none",
                markeredgecolor=COLORS[1], markersize=6, markeredgewidth=1.2, zorder=4)
    lo = min(measured.min(), predicted.min(), roofline.min()) * ms / 1.5
    hi = max(measured.max(), predicted.max(), roofline.max()) * ms * 1.5
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


__all__ = [
    "plot_roofline",
    "plot_speedup_map",
    "plot_speedup_vs_k",
    "plot_step_breakdown",
    "plot_validation",
    "get_step_breakdown",
    "get_measured_ceilings",
    "load_validation_report",
]
