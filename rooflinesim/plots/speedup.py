"""Speculation charts: the best-speedup map over batch x context, and speedup vs draft length."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..acceptance import leviathan_walltime_improvement
from ..scenario.builder import Scenario
from ..scenario.inputs import DEFAULT_BATCH, DEFAULT_CHART_ALPHAS, DEFAULT_CONTEXT_TOKENS, DEFAULT_K_MAX, check_k
from ..errors import InputError
from ..pricing.break_even import get_best_k_index
from ..pricing.sweep import SweepResult, sweep_scenario
from ..units import format_count
from .common import attach_warnings, COLORS, _boundary_segments, _new_figure, _tp_label, get_scenario


def get_speedup_map_data(scenario: Scenario) -> tuple[SweepResult, dict]:
    """The speedup map's cells from the scenario's sweep (one alpha): per (batch, context) the best speedup over
    the k >= 1 that fit in memory (over all k >= 1 where none fits), that k, whether some k >= 1 fits, whether the
    best that fits pays (the sweep's own `pays`: False where nothing fits), and per context the sweep's break-even
    batch and verdict, so the chart's contour and the sweep's table are one computation."""
    if len(scenario.acceptance.alphas or ()) != 1:
        raise InputError(f"a speedup map takes one acceptance rate, got {scenario.acceptance.alphas}")
    result = sweep_scenario(scenario)
    spec = result.k > 0
    if not spec.any():
        raise InputError("the speedup map needs some k >= 1")
    speedup, fits = result.speedup[:, :, spec, 0], result.fits_in_memory[:, :, spec]
    index = get_best_k_index(speedup, fits, axis=2)
    pick = lambda values: np.take_along_axis(values, index[..., None], axis=2)[..., 0]  # noqa: E731
    best = pick(speedup)
    cells = {"best_speedup": best, "best_k": result.k[spec][index], "fits": result.speculation_fits,
             "pays": result.pays[:, :, 0], "break_even_batch": result.break_even_batch[:, 0],
             "verdict": result.break_even_verdict[:, 0]}
    if result.speedup_band is not None:  # where it pays with the measured speedup at either end of the band
        low, high = result.speedup_band.get_pays_at_ends(best)
        cells["pays_at_low_end"] = result.speculation_fits & low
        cells["pays_at_high_end"] = result.speculation_fits & high
    return result, cells


def _speedup_norm(values: np.ndarray):
    """(colour map, norm) for the speedups of the cells that fit: diverging at 1 when some pay and some lose,
    one-sided when all pay (the common case) or all lose, so the colour bar always spans real values."""
    from matplotlib.colors import Normalize, TwoSlopeNorm

    lo, hi = (float(values.min()), float(values.max())) if values.size else (1.0, 1.0)
    if lo >= 1.0:
        return "Blues", Normalize(vmin=1.0, vmax=max(hi, 1.0 + 1e-3))
    if hi < 1.0:
        return "Reds_r", Normalize(vmin=lo, vmax=1.0)
    return "RdBu", TwoSlopeNorm(vcenter=1.0, vmin=lo, vmax=max(hi, 1.0 + 1e-3))


def plot_speedup_map(
    hw=None,
    model=None,
    draft=None,
    alpha: float | None = None,
    batch: Sequence[int] = tuple(2**i for i in range(11)),
    ctx: Sequence[int] = tuple(2**i for i in range(9, 18)),
    k: Sequence[int] | None = None,
    annotate: bool = True,
    colorbar: bool = True,
    ax=None,
    **options,
):
    """Heatmap of the best speculative speedup (best over k >= 1 in `k`) over batch (rows) x context (columns).

    `hw` is a Scenario or a hardware name; other deployment options are `build_scenario`'s. The solid black contour
    is speedup = 1 (break-even: on its high-batch side even the best k loses to plain decoding), drawn between cells
    that fit only: it is the sweep's break-even. Each cell is annotated with its speedup and the best k. Grey cells,
    labelled "does not fit", exceed device memory at every k >= 1 (target + draft weights, both KV caches, verify
    activations): they are not priced, and memory, not speculation, caps the batch there. On a datasheet the
    dashed and dotted contours are the break-even with the measured speedup at the low and the high end of the
    engine profile's published speedup error (`pricing.speedup_band`).
    """
    from matplotlib.cm import ScalarMappable
    from matplotlib.collections import LineCollection
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    scenario = get_scenario(hw, model, batch, ctx, draft=draft, alpha=alpha,
                            k_values=None if k is None else sorted({int(x) for x in np.atleast_1d(k)} | {0}),
                            allow_long_context=options.pop("allow_long_context", True), **options)
    result, cells = get_speedup_map_data(scenario)
    best, best_k, fits, pays = cells["best_speedup"], cells["best_k"], cells["fits"], cells["pays"]
    alpha_value = float(result.alpha[0])
    k_values = result.k
    n_b, n_c = best.shape
    fig, (ax,) = _new_figure((max(7.0, 0.8 * n_c + 3), max(5.0, 0.42 * n_b + 2.2)), ax)
    import matplotlib

    cmap_name, norm = _speedup_norm(best[fits])
    cmap = matplotlib.colormaps[cmap_name].with_extremes(bad="0.82")  # grey: does not fit
    ax.pcolormesh(np.arange(n_c + 1) - 0.5, np.arange(n_b + 1) - 0.5, np.ma.masked_where(~fits, best),
                         cmap=cmap, norm=norm)
    handles = []
    segments = _boundary_segments(pays, where=fits)
    if segments:
        ax.add_collection(LineCollection(segments, colors="black", linewidths=2.4, capstyle="round"))
        handles.append(Line2D([], [], color="black", linewidth=2.4, label="speedup = 1 boundary (break-even)"))
    elif fits.any():
        handles.append(Line2D([], [], linestyle="none", label="no break-even in this range: " + (
            "pays at every batch that fits" if pays[fits].all() else
            "never pays where it fits" if not pays[fits].any() else "pays in some columns only")))
    else:
        handles.append(Line2D([], [], linestyle="none", label="no break-even: no cell fits in device memory"))
    # the break-even if the measured speedup sat at either end of the engine profile's published error
    for key, style in (("pays_at_low_end", (0, (4, 2))), ("pays_at_high_end", (0, (1, 1.5)))):
        edges = _boundary_segments(cells[key], where=fits) if key in cells else []
        if edges:
            ax.add_collection(LineCollection(edges, colors="black", linewidths=1.4, linestyles=[style]))
            end = "low" if key == "pays_at_low_end" else "high"
            handles.append(Line2D([], [], color="black", linewidth=1.4, linestyle=style,
                                  label=f"break-even at the {end} end of {result.engine}'s published error"))
    note = "" if fits.any() else " - exceeds device memory everywhere (nothing to price)"
    if not fits.all():
        handles.append(Patch(facecolor="0.82", edgecolor="0.5", label="does not fit in device memory"))  # grey
    if annotate:
        rgba = cmap(norm(best))
        luminance = 0.299 * rgba[..., 0] + 0.587 * rgba[..., 1] + 0.114 * rgba[..., 2]
        size = 7.5 if n_c <= 10 else 6.5
        for i in range(n_b):
            for j in range(n_c):
                if not fits[i, j]:
                    ax.text(j, i, "does not\nfit", ha="center", va="center", fontsize=size - 1, color="0.3",
                            linespacing=1.0)
                    continue
                value = best[i, j]
                digits = 3 if abs(value - 1.0) < 0.005 else 2  # never print 1.00 on the losing side of 1
                ax.text(j, i, f"{value:.{digits}f}\nk={best_k[i, j]}", ha="center", va="center", fontsize=size,
                        color="white" if luminance[i, j] < 0.45 else "black", linespacing=1.0)
    ax.set_xticks(np.arange(n_c), [format_count(c) for c in result.context_tokens])
    ax.set_yticks(np.arange(n_b), [str(b) for b in result.batch])
    ax.set_xlabel("context (tokens already in the KV cache)")
    ax.set_ylabel("batch (sequences decoded together)")
    if colorbar and fits.any():
        fig.colorbar(ScalarMappable(norm=norm, cmap=cmap), ax=ax, shrink=0.9,
                     label="best speculative speedup over plain decoding (x)")
    w = scenario.workload
    ax.set_title(f"{result.model} + draft {result.draft} on {result.hardware}{_tp_label(scenario)}, engine "
                 f"{scenario.engine_name}: best speedup over k = 1..{max(k_values)}\nalpha = {alpha_value:g}, weights {w.weight_dtype}, KV {w.kv_dtype}{note}",
                 fontsize=10)
    # one entry per row: side by side, the break-even entries' long labels are wider than the figure, and the
    # layout then squeezes the map to a sliver
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=1, fontsize=8, frameon=False)
    return attach_warnings(fig, scenario)


def get_speedup_vs_k_data(scenario: Scenario) -> dict:
    """Per alpha: the step model's speedup over the scenario's k values at its one (batch, context), Leviathan's
    closed form with c = draft step / target decode step from the same model, and the best k among those that fit."""
    if not scenario.is_point:
        raise InputError("speedup vs k takes one batch and one context")
    result = sweep_scenario(scenario)
    ks = result.k
    c = float(result.draft_step_time_s[0, 0, -1] / result.target_decode_time_s[0, 0])
    curves = result.speedup[0, 0]  # (n_k, n_alpha)
    return {"result": result, "k": ks, "c": c, "speedup": curves,
            "closed_form": np.stack([leviathan_walltime_improvement(a, ks, c) for a in result.alpha], axis=1),
            "best_index": get_best_k_index(curves, result.fits_in_memory[0, 0][:, None], axis=0)}


def plot_speedup_vs_k(
    hw=None,
    model=None,
    draft=None,
    alpha: Sequence[float] = DEFAULT_CHART_ALPHAS,
    batch: int = DEFAULT_BATCH,
    ctx: int = DEFAULT_CONTEXT_TOKENS,
    k_max: int = DEFAULT_K_MAX,
    ax=None,
    **options,
):
    """Speedup vs draft length k for several acceptance rates: the step model (solid) and Leviathan's closed form
    (dashed), (1 - a^(k+1)) / ((1 - a)(k c + 1)) with c = draft step time / target decode step time from the same step
    model at this batch and context. The gap between them is what the closed form leaves out: the verify step over
    k + 1 tokens costs more than one decode step (more FLOPs, KV reads, logits). Stars mark the best k of the step
    model (among the k that fit in memory).
    """
    from matplotlib.lines import Line2D

    k_max = check_k(k_max, "k_max")
    if not 1 <= k_max <= 16:
        raise InputError(f"k_max must lie in 1..16, got {k_max}")
    scenario = get_scenario(hw, model, batch, ctx, draft=draft, alpha=alpha, k_values=range(0, int(k_max) + 1),
                            **options)
    data = get_speedup_vs_k_data(scenario)
    result, c = data["result"], data["c"]
    batches, contexts = list(result.batch), list(result.context_tokens)
    fig, (ax,) = _new_figure((8.5, 5.5), ax)
    ks = data["k"]
    gap = 0.0
    for i, a in enumerate(result.alpha):
        color = COLORS[i % len(COLORS)]
        model_curve, closed = data["speedup"][:, i], data["closed_form"][:, i]
        gap = max(gap, float(np.max(np.abs(closed - model_curve))))
        ax.plot(ks, model_curve, marker="o", markersize=4, color=color, linewidth=3, alpha=0.55, zorder=2,
                label=f"alpha = {a:g}")
        if scenario.tree is None:  # Leviathan's form is a chain's: no closed form drawn for a tree
            ax.plot(ks, closed, linestyle="--", color=color, linewidth=1.5, zorder=3)
        best = int(data["best_index"][i])
        ax.plot([ks[best]], [model_curve[best]], marker="*", markersize=15, color=color, markeredgecolor="black",
                zorder=6)
        ax.annotate(f"k={ks[best]}: {model_curve[best]:.2f}x", (ks[best], model_curve[best]), textcoords="offset points",
                    xytext=(0, 10), ha="center", fontsize=8, color=color, zorder=7,
                    bbox=dict(boxstyle="round,pad=0.15", facecolor="white", edgecolor="none", alpha=0.85))
    ax.axhline(1.0, color="grey", linestyle=":", linewidth=1)
    handles, _ = ax.get_legend_handles_labels()
    closed_form = [] if scenario.tree is not None else [
        Line2D([], [], color="black", linestyle="--", linewidth=1.5,
               label=f"Leviathan closed form, c = {c:.3f} (max gap {gap:.2f}x)")]
    handles += [
        Line2D([], [], color="black", linewidth=3, alpha=0.55, label="step model (verify priced at k + 1 tokens)"),
        *closed_form,
        Line2D([], [], color="black", marker="*", linestyle="none", markersize=11, label="best k (step model)"),
        Line2D([], [], color="grey", linestyle=":", label="speedup = 1 (plain decoding)"),
    ]
    ax.legend(handles=handles, loc="best", fontsize=8, ncol=2)
    ax.set_xticks(ks)
    ax.set_xlabel("draft length k (draft tokens per speculative step)" if scenario.tree is None else
                  f"tree tokens k ({scenario.tree.describe()}; alpha: top-1 rate per depth)")
    ax.set_ylabel("speedup over plain decoding (x)")
    ax.grid(True, alpha=0.3)
    ax.set_ylim(bottom=min(0.0 + 0.9 * float(np.min(result.speedup)), 0.9))
    ax.set_title(f"Speedup vs k: {result.model} + draft {result.draft} on {result.hardware}{_tp_label(scenario)}, "
                 f"engine {scenario.engine_name}, batch {batches[0]}, ctx {format_count(contexts[0])}, {scenario.workload.weight_dtype}", fontsize=10)
    return attach_warnings(fig, scenario)


