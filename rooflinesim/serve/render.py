"""Text output of `rooflinesim serve`: the latency-throughput curve per policy and the crossover (rich tables)."""

from __future__ import annotations

from ..units import MILLI


def _ms(value) -> str:
    return "-" if value is None else f"{value / MILLI:,.1f}"


def _s(value) -> str:
    return "-" if value is None else f"{value:,.2f}"


def render_rate_sweep(rows: list[dict], crossovers: list[dict], console, title: str) -> None:
    from rich.markup import escape
    from rich.table import Table

    by_policy: dict[str, list[dict]] = {}
    for row in rows:
        by_policy.setdefault(row["policy"], []).append(row)
    for policy, policy_rows in by_policy.items():
        table = Table(title=escape(f"{title}: policy {policy}"))
        closed = any(r.get("concurrency") is not None for r in policy_rows)
        columns = ("clients" if closed else "rate/s", "out tok/s", "goodput req/s", "TTFT p50 / p99 ms", "TPOT p50 / p99 ms",
                   "ITL p99 ms", "latency p50 / p99 s", "batch", "k", "KV use", "preempt")
        intervals = any(r.get("interval") for r in policy_rows)  # a measured profile: the step model's 90 % interval
        for column in columns + (("p50 TTFT / TPOT 90 % interval ms",) if intervals else ()):
            table.add_column(escape(column), justify="right")
        for r in policy_rows:
            band = r.get("interval")
            extra = () if not intervals else (("-",) if not band else (
                f"{_ms(band['ttft_s']['p50'][0])}-{_ms(band['ttft_s']['p50'][1])} / "
                f"{_ms(band['tpot_s']['p50'][0])}-{_ms(band['tpot_s']['p50'][1])}",))
            table.add_row(
                str(r["concurrency"]) if closed else "trace" if r["rate_per_s"] is None else f"{r['rate_per_s']:g}",
                f"{r['output_tokens_per_s']:,.0f}",
                f"{r['goodput_requests_per_s']:,.2f}", f"{_ms(r['ttft_s']['p50'])} / {_ms(r['ttft_s']['p99'])}",
                f"{_ms(r['tpot_s']['p50'])} / {_ms(r['tpot_s']['p99'])}", _ms(r["itl_s"]["p99"]),
                f"{_s(r['latency_s']['p50'])} / {_s(r['latency_s']['p99'])}", f"{r['mean_batch']:.1f}",
                f"{r['mean_k']:.2f}", f"{r['mean_kv_occupancy']:.0%}", str(r["preemptions"]), *extra)
        console.print(table)
    for c in crossovers:
        parts = []
        for what in ("latency", "throughput"):
            at = c[what]
            parts.append(f"{what}: pays at every load" if at is None else
                         f"{what}: stops paying from {_load(at)} (batch {at['mean_batch']:.0f})")
            if what == "latency" and c.get("latency_range") is not None:
                parts.append(describe_latency_range(c["latency_range"]))
            starts = c.get(f"{what}_starts")
            if starts is not None:
                parts.append(f"{what}: starts paying from {_load(starts)} (batch {starts['mean_batch']:.0f})")
        console.print(f"[bold]{escape(c['policy'])}[/] vs {escape(c.get('baseline', 'off'))} -- " + "; ".join(parts))
    sources = {c["latency_range"]["band_source"] for c in crossovers if c.get("latency_range")}
    for source in sorted(sources):
        console.print(f"  latency range: {escape(source)}")


def describe_latency_range(rng: dict) -> str:
    """Where the latency crossover falls with the speedup at either end of the engine profile's published error
    (`rates.get_latency_range`), in words."""
    earliest, latest = rng["earliest"], rng["latest"]
    within = f"within the published error (+-{rng['error_x']:.2f}x)"
    if earliest is None:
        return f"{within} it pays at every load at either end"
    start = f"{within} from {_load(earliest)}"
    if latest is None:
        return f"{start} (low end) to beyond the highest load (high end)"
    if latest == earliest:
        return f"{start} at either end"
    return f"{start} (low end) to {_load(latest)} (high end)"


def _load(at: dict) -> str:
    return f"{at['concurrency']} clients" if "concurrency" in at else f"{at['rate_per_s']:g} req/s"
