"""Prediction -> human text (rich) or JSON. No arithmetic beyond formatting lives here.

The text is one screen by default: the deployment, the decode and prefill steps, memory, the best k with its
speedup, interval and sensitivity to the acceptance rate, warnings and what was assumed. `ops=True` adds the decode
step's op table, `k_table=True` the speedup of every draft length (`predict --ops`, `--k-table`).
"""

from __future__ import annotations

import json

from .pricing.predict import Prediction, StepSummary
from .units import format_bytes, format_count, format_flops, format_rate, format_seconds


def to_json(prediction: Prediction) -> str:
    # allow_nan=False: a NaN or infinity is an error here, never a bare `NaN` / `Infinity` (which is not JSON)
    return json.dumps(prediction.to_dict(), indent=2, sort_keys=False, allow_nan=False)


def _interval(low, high, unit: str = "s") -> str:
    if low is None:
        return ""
    if unit == "x":
        return f" (90 % interval {low:.2f}x - {high:.2f}x)"
    return f" (90 % interval {format_seconds(low)} - {format_seconds(high)})"


def _step_line(label: str, step: StepSummary) -> str:
    return (
        f"{label}: {format_seconds(step.step_time_s)}{_interval(step.step_time_s_low, step.step_time_s_high)} per "
        f"step (speed of light {format_seconds(step.roofline_step_time_s)}), {step.tokens_per_s:,.0f} tok/s "
        f"aggregate, {step.tokens_per_s_per_sequence:,.1f} per sequence; {format_flops(step.flops)} / "
        f"{format_bytes(step.bytes)} = {step.arithmetic_intensity:.3g} FLOP/B, {step.bound}-bound"
    )


def render_prediction(prediction: Prediction, console=None, ops: bool = False, k_table: bool = False) -> None:
    from rich.console import Console
    from rich.markup import escape

    console = console or Console(width=120)
    d = prediction.to_dict()
    hw, model, w, mem, dec = d["hardware"], d["model"], d["workload"], d["memory"], prediction.decode
    draft = "" if prediction.speculative is None else f" + draft {escape(prediction.speculative.draft)}"
    console.print(
        f"[bold]Deployment[/] {model['name']}{draft} on {hw['name']} ({hw['short_name']}), tp {w['tensor_parallel']}, "
        f"weights {w['weight_dtype']} ({format_bytes(model['weight_bytes'])}), KV {w['kv_dtype']}; "
        f"{format_rate(hw['bandwidth_bytes_per_s'], 'B/s')}, {format_rate(hw['peak_flops_per_s'], 'FLOP/s')} "
        f"{hw['compute_dtype']} dense, ridge {hw['ridge_point_flops_per_byte']:.0f} FLOP/B; timing {hw['timing_model']}"
        + (f" (profile {hw['calibration_profile']})" if hw.get("calibration_profile") else "")
    )
    console.print(f"[bold]Engine[/] {d['engine']}" + (" (bare kernels: no launch, host or speculative costs)"
                                                      if d["engine"] == "ideal" else ""))
    console.print(f"[bold]Workload[/] batch {w['batch']}, context {format_count(w['context_tokens'])}, "
                  f"activations {w['activation_dtype']}, {w['attention']} attention"
                  + (f", run by {w['implementation']}" if w.get("implementation", "reference") != "reference" else ""))
    if ops:
        _print_ops(prediction, console)
    console.print(_step_line("[bold]Decode[/]", dec))
    console.print(f"  bytes: weights {100 * dec.weight_share_of_bytes:.1f}%, KV cache {100 * dec.kv_share_of_bytes:.1f}% "
                  f"(KV read {format_bytes(dec.kv_read_bytes)})")
    console.print(_step_line(f"[bold]Prefill[/] of {w['batch']} x "
                             f"{format_count(prediction.prefill.new_tokens_per_sequence)} tokens", prediction.prefill))
    if prediction.interval_source:
        console.print(f"  intervals: {escape(prediction.interval_source)}")
    fit = "[green]fits[/]" if mem["fits_in_memory"] else "[red]INFEASIBLE: does not fit[/]"
    draft_note = " (target + draft)" if mem.get("includes_draft") else ""
    lookahead_note = f" (incl. k = {mem['at_k']} lookahead)" if mem.get("at_k") else ""
    console.print(
        f"[bold]Memory[/] {fit}: weights {format_bytes(mem['weight_bytes'])}"
        f"{draft_note} + KV {format_bytes(mem['kv_cache_bytes'])}{lookahead_note} "
        f"+ activations {format_bytes(mem['activation_bytes'])} = {format_bytes(mem['total_bytes'])} of "
        f"{format_bytes(mem['usable_capacity_bytes'])} usable ({mem['gpu_memory_utilization']:g} x "
        f"{format_bytes(mem['capacity_bytes'])} - {format_bytes(mem['memory_reserve_bytes'])} reserve); max batch at "
        f"this context: {mem['max_batch']}"
    )
    if prediction.speculative is not None:
        render_speculative(prediction.speculative, console, k_table)
    if not (ops and k_table):
        more = [what for what, shown in (("--ops for the decode step's ops", ops),
                                         ("--k-table for every draft length", k_table or prediction.speculative is None))
                if not shown]
        if more:
            console.print(f"[dim]more: {', '.join(more)}; --json for every number[/]")
    for warning in prediction.warnings:
        console.print(f"[yellow]warning:[/] {escape(warning)}")
    if prediction.scenario is not None and prediction.scenario.assumed:
        console.print(f"[cyan]assumed:[/] {escape(prediction.scenario.get_assumed_line()[len('assumed: '):])}")


def _print_ops(prediction: Prediction, console) -> None:
    from rich.table import Table

    w, dec = prediction.workload, prediction.decode
    table = Table(title=f"Decode step ops (batch {w.batch}, context {format_count(w.context_tokens)})")
    for column in ("op", "x", "FLOPs", "bytes", "FLOP/B", "bound", "time", "share"):
        table.add_column(column, justify="left" if column in ("op", "bound") else "right")
    for row in prediction.ops:
        table.add_row(
            row.name, str(row.count), format_flops(row.flops),
            format_bytes(row.comm_bytes if row.bound == "interconnect" else row.bytes),
            f"{row.arithmetic_intensity:.3g}", row.bound, format_seconds(row.time_s),
            f"{100 * row.time_s / dec.step_time_s:.1f}%",
        )
    console.print(table)


def render_speculative(result, console, k_table: bool = False) -> None:
    """The speculative answer: the k reported with its speedup and interval, how it moves with alpha, the step."""
    from rich.markup import escape
    from rich.table import Table

    acceptance = (f"alpha {result.alpha:g}" if result.alpha is not None
                  else f"alpha per position {', '.join(f'{a:g}' for a in result.alpha_per_position)}")
    if k_table:
        table = Table(title=f"Speculative decoding: draft {escape(result.draft)}, {acceptance}")
        for column in ("k", "E[tokens]", "step time", "speedup", "fits"):
            table.add_column(escape(column), justify="right")
        for row in result.k_table:
            style = "bold green" if row["k"] == result.best_k else None
            table.add_row(str(row["k"]), f"{row['expected_tokens']:.3f}", format_seconds(row["step_time_s"]),
                          f"{row['speedup']:.3f}x", "yes" if row["fits_in_memory"] else "no", style=style)
        console.print(table)
    if result.acceptance_source:
        console.print(f"[bold]Acceptance[/] {escape(result.acceptance_source)}")
    if result.tree is not None:
        console.print(f"[bold]Tree[/] {escape(result.tree)}: k counts tree tokens (verify width k + 1); drafting "
                      f"{format_seconds(result.draft_step_time_s * result.k)} per step at k = {result.k} (first "
                      f"forward {format_seconds(result.draft_cold_step_time_s)}, widest "
                      f"{format_seconds(result.draft_warm_step_time_s)})")
    which = (f"best k = {result.k}" if result.k == result.best_k else
             f"k = {result.k} (best k = {result.best_k}: {result.best_speedup:.3f}x)")
    interval = ("" if result.speedup_interval is None else _interval(*result.speedup_interval, unit="x"))
    verdict = {"pays": "speculation pays here", "does_not_pay": "speculation does not pay here",
               "uncertain": ("speculation " + ("pays" if result.speedup > 1 else "does not pay") + " by the estimate, "
                             "but 1.0x is inside the interval: uncertain here")}[result.verdict]
    console.print(f"[bold]Speculation[/] {acceptance}: {which}, speedup {result.speedup:.3f}x{interval}: {verdict}")
    if result.speedup_by_alpha:
        moved = ", ".join(f"alpha {row['alpha']:g}: {row['best_speedup']:.2f}x (k = {row['best_k']})"
                          for row in result.speedup_by_alpha)
        robust = ("" if result.robust_k is None else f"; robust k = {result.robust_k} (at least "
                  f"{100 * result.robust_k_worst_share:.0f} % of the best speedup at each of these alphas)")
        console.print(f"  by acceptance: {moved}{robust}")
    cold_warm = ("" if result.draft_cold_step_time_s == result.draft_warm_step_time_s or result.tree is not None else
                 f" (first {format_seconds(result.draft_cold_step_time_s)} cold, then "
                 f"{format_seconds(result.draft_warm_step_time_s)} warm)")
    console.print(
        f"  step: {result.k} x draft {format_seconds(result.draft_step_time_s)}{cold_warm} + verify "
        f"{format_seconds(result.verify_step_time_s)} = {format_seconds(result.step_time_s)}, E = "
        f"{result.expected_tokens:.3f} tokens per sequence; "
        f"{result.batch * result.expected_tokens / result.step_time_s:,.0f} tok/s aggregate"
    )
    parts = []
    if result.step_interval is not None:
        (dl, dh), (vl, vh), (sl, sh) = result.draft_step_interval, result.verify_step_interval, result.step_interval
        parts.append(f"draft step {format_seconds(dl)} - {format_seconds(dh)}, verify {format_seconds(vl)} - "
                     f"{format_seconds(vh)}, step {format_seconds(sl)} - {format_seconds(sh)}")
    if result.expected_tokens_interval is not None:
        parts.append(f"E {result.expected_tokens_interval[0]:.3f} - {result.expected_tokens_interval[1]:.3f}")
    if result.speedup_interval is not None:
        parts.append(f"speedup {result.speedup_interval[0]:.2f}x - {result.speedup_interval[1]:.2f}x")
    if parts:
        console.print(f"  90 % intervals: {', '.join(parts)}")
    if result.interval_source and result.step_interval is not None and "datasheet" not in result.interval_source:
        console.print(f"  intervals: {escape(result.interval_source)}")
    elif result.expected_tokens_interval is not None:
        console.print("  intervals: E and the speedup from the measured acceptance's confidence interval")
    published = [part for part in (result.interval_source or "").split("; ") if part.startswith("speedup: ")]
    if published:  # the engine profile's error against published speedups (pricing/speedup_band.py)
        console.print(f"  speedup interval: {escape(published[0].removeprefix('speedup: '))}")


def describe_break_even(row: dict) -> str:
    """One break-even row (`SweepResult.get_break_even_table`) in words: a batch that fits, or which kind of never."""
    verdict = row["speculation_verdict"]
    if verdict == "stops_paying":
        return str(row["break_even_batch"])
    if verdict == "never_pays":
        return f"{row['break_even_batch']} (never pays)"
    if verdict == "nothing_fits":
        return "does not fit"
    return f"never, up to {row['largest_fitting_batch']} (largest that fits)"


def describe_break_even_range(row: dict) -> str:
    """The batches between which the break-even falls within the engine profile's published speedup error
    (`SweepResult.break_even_batch_range`): 'earliest - latest', '>N' where a reading still pays at the largest
    batch that fits."""
    if row["speculation_verdict"] == "nothing_fits":
        return "-"
    beyond = f">{row['largest_fitting_batch']}"
    earliest = beyond if row["break_even_batch_earliest"] is None else str(row["break_even_batch_earliest"])
    latest = beyond if row["break_even_batch_latest"] is None else str(row["break_even_batch_latest"])
    return earliest if earliest == latest else f"{earliest} - {latest}"
