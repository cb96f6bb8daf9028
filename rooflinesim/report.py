"""Prediction -> human text (rich tables) or JSON. No arithmetic beyond formatting lives here."""

from __future__ import annotations

import json

from .pricing.predict import Prediction, StepSummary
from .units import GIGA, format_bytes, format_count, format_flops, format_rate, format_seconds


def to_json(prediction: Prediction) -> str:
    # allow_nan=False: a NaN or infinity is an error here, never a bare `NaN` / `Infinity` (which is not JSON)
    return json.dumps(prediction.to_dict(), indent=2, sort_keys=False, allow_nan=False)


def _step_line(label: str, step: StepSummary, batch: int) -> str:
    interval = ("" if step.step_time_s_low is None else
                f" (90 % interval {format_seconds(step.step_time_s_low)} - {format_seconds(step.step_time_s_high)})")
    return (
        f"{label}: {format_seconds(step.step_time_s)}{interval} per step expected "
        f"(speed of light {format_seconds(step.roofline_step_time_s)}), "
        f"{step.tokens_per_s:,.0f} tok/s, {format_flops(step.flops)} / {format_bytes(step.bytes)} "
        f"= {step.arithmetic_intensity:.3g} FLOP/B, {step.bound}-bound"
    )


def render_prediction(prediction: Prediction, console=None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = console or Console(width=120)
    d = prediction.to_dict()
    hw, model, w, mem, dec = d["hardware"], d["model"], d["workload"], d["memory"], prediction.decode
    console.print(
        f"[bold]Hardware[/] {hw['name']} ({hw['short_name']}): "
        f"{format_rate(hw['bandwidth_bytes_per_s'], 'B/s')}, {format_rate(hw['peak_flops_per_s'], 'FLOP/s')} "
        f"{hw['compute_dtype']} dense, ridge {hw['ridge_point_flops_per_byte']:.0f} FLOP/B; "
        f"timing model: {hw['timing_model']}"
        + (f" (profile {hw['calibration_profile']})" if hw.get("calibration_profile") else "")
    )
    console.print(f"[bold]Engine[/] {d['engine']}" + (" (bare kernels: no launch, host or speculative costs)"
                                                      if d["engine"] == "ideal" else ""))
    console.print(
        f"[bold]Model[/] {model['name']}: {model['params'] / GIGA:.2f} B params, "
        f"{format_bytes(model['weight_bytes'])} of {w['weight_dtype']} weights, "
        f"KV {format_bytes(model['kv_bytes_per_token'])}/token ({w['kv_dtype']})"
    )
    console.print(
        f"[bold]Workload[/] batch {w['batch']}, context {format_count(w['context_tokens'])}, "
        f"activations {w['activation_dtype']}, {w['attention']} attention"
    )
    table = Table(title=f"Decode step ops (batch {w['batch']}, context {format_count(w['context_tokens'])})")
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
    console.print(_step_line("[bold]Decode[/]", dec, w["batch"]))
    console.print(
        f"  bytes: weights {100 * dec.weight_share_of_bytes:.1f}%, KV cache {100 * dec.kv_share_of_bytes:.1f}% "
        f"(KV read {format_bytes(dec.kv_read_bytes)})"
    )
    console.print(_step_line(f"[bold]Prefill[/] of {w['batch']} x {format_count(prediction.prefill.new_tokens_per_sequence)} tokens",
                             prediction.prefill, w["batch"]))
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
        from .pricing.speculative import render_speculative

        render_speculative(prediction.speculative, console)
    for warning in prediction.warnings:
        console.print(f"[yellow]warning:[/] {warning}")
