"""`rooflinesim validate`'s report: error summaries, interval coverage, break-even, combining dtypes, writing,
charting and printing (the measuring is `calibrate.validators.validate`'s; no torch here)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ...fileio import write_text_atomic
from ...pricing.break_even import get_break_even_batch
from ...specs.validation_report import parse_validation_report, validation_report_json

#: the prediction intervals' nominal coverage (two-sided, z = Z90)
NOMINAL_COVERAGE = 0.90


def ape(pred, meas) -> float:
    return abs(pred - meas) / meas


def summarise(errors) -> dict:
    e = np.asarray(errors, dtype=float)
    return {"median_ape": float(np.median(e)), "p90_ape": float(np.quantile(e, 0.9)), "n": int(e.size)}


def break_even(batches, speedups) -> int | None:
    """The batch from which speculation stops paying for good (`pricing.break_even.get_break_even_batch`, the definition
    sweeps use); None where it still pays at the largest batch."""
    order = np.argsort(batches)
    batch = int(get_break_even_batch(np.asarray(batches)[order], np.asarray(speedups)[order] > 1.0))
    return None if batch < 0 else batch


def grid_steps_between(batches, a, b) -> int:
    """Grid steps between two break-even batches; None (pays over the whole grid) sits one step past the end."""
    def index(x):
        return len(batches) if x is None else list(batches).index(x)
    return abs(index(a) - index(b))


def coverage(rows: list[dict], spec_rows: list[dict]) -> dict | None:
    """Share of the measured steps (and speedups) inside their calibrated 90 % interval; None without intervals."""
    steps = [r["predicted_low_s"] <= r["measured_s"] <= r["predicted_high_s"] for r in rows
             if r.get("predicted_low_s") is not None]
    speedups = [r["predicted_speedup_low"] <= r["measured_speedup"] <= r["predicted_speedup_high"] for r in spec_rows
                if r.get("predicted_speedup_low") is not None]
    if not steps:
        return None
    return {"nominal": NOMINAL_COVERAGE, "steps": float(np.mean(steps)), "steps_n": len(steps),
            "speedup": float(np.mean(speedups)) if speedups else None, "speedup_n": len(speedups)}


def summarise_rows(rows: list[dict]) -> dict:
    """The calibrated and roofline error summaries of step rows (for the whole report, a kind, or the family)."""
    return {"calibrated": summarise([ape(r["predicted_s"], r["measured_s"]) for r in rows]),
            "roofline": summarise([ape(r["roofline_s"], r["measured_s"]) for r in rows])}


PREFERRED_PRIMARY_DTYPES = ("bf16", "fp16", "fp32")


def combine_reports(reports: list[dict]) -> dict:
    """One report per device: the top level is the primary dtype's report (bf16 when validated: what LLM serving
    runs), and `by_dtype` holds every validated dtype's full report."""
    if not reports:
        raise ValueError("combine_reports needs at least one report")
    by_dtype = {r["dtype"]: r for r in reports}
    primary = next((by_dtype[d] for d in PREFERRED_PRIMARY_DTYPES if d in by_dtype), reports[0])
    combined = dict(primary)
    combined["by_dtype"] = by_dtype
    return combined


def write_report(report: dict, out_dir: str | Path, stem: str) -> Path:
    """Write `out_dir/stem.json` atomically, validated through the report schema (`rooflinesim.specs.validation_report`):
    a report that does not follow it is a ValidationReportError, and nothing is written. Only the JSON: the chart is
    composed from it afterwards (`plot_report`)."""
    validated = parse_validation_report(report, f"validation report {stem}")
    return write_text_atomic(Path(out_dir) / f"{stem}.json", validation_report_json(validated))


def plot_report(report: dict | str | Path, path: str | Path) -> Path:
    """The report's chart (`rooflinesim.plots.plot_validation`: one row per validated dtype), written atomically.

    `report` is a report dict or the path of a written report (`write_report` does not draw it)."""
    from ...plots import plot_validation

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp.png")
    plot_validation(report).savefig(tmp, dpi=100)
    tmp.replace(path)
    return path


def print_report(report: dict, console=None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    s = report["summary"]
    table = Table(title=f"validate: {report['model']} + {report['draft']} ({report['dtype']}) on {report['device']}")
    for col in ("", "median APE", "p90 APE"):
        table.add_column(col, justify="right")
    table.add_row("calibrated", f"{s['calibrated']['median_ape']:.1%}", f"{s['calibrated']['p90_ape']:.1%}")
    table.add_row("roofline", f"{s['roofline']['median_ape']:.1%}", f"{s['roofline']['p90_ape']:.1%}")
    for kind, v in s.get("by_kind", {}).items():
        table.add_row(f"  {kind} (cal / roof)", f"{v['calibrated']['median_ape']:.1%} / {v['roofline']['median_ape']:.1%}",
                      f"{v['calibrated']['p90_ape']:.1%} / {v['roofline']['p90_ape']:.1%}")
    family = s.get("hold_out_family")
    if family:
        table.add_row("  hold-out family (cal / roof)",
                      f"{family['calibrated']['median_ape']:.1%} / {family['roofline']['median_ape']:.1%}",
                      f"{family['calibrated']['p90_ape']:.1%} / {family['roofline']['p90_ape']:.1%}")
    console.print(table)
    cov = s.get("coverage")
    if cov:
        speedup = (f", speedups {cov['speedup']:.0%} of {cov['speedup_n']}" if cov.get("speedup") is not None
                   else "")
        console.print(f"inside the {cov['nominal']:.0%} prediction interval: steps {cov['steps']:.0%} of "
                      f"{cov['steps_n']}{speedup} (goal >= 80 %)")
    spec = Table(title="speculative speedup (k = 4, alpha = 0.8)")
    for col in ("batch", "measured", "predicted", "roofline"):
        spec.add_column(col, justify="right")
    for r in report["speculative"]:
        spec.add_row(str(r["batch"]), f"{r['measured_speedup']:.2f}x", f"{r['predicted_speedup']:.2f}x",
                     f"{r['roofline_speedup']:.2f}x")
    console.print(spec)
    be = report["break_even"]
    console.print(f"break-even batch: measured {be['measured_batch']}, predicted {be['predicted_batch']}, "
                  f"roofline {be['roofline_batch']} (grid {be['grid']}; None = pays over the whole grid); "
                  f"largest speedup error: calibrated {report['speedup_error']['max_abs_calibrated']:.2f}x, "
                  f"roofline {report['speedup_error']['max_abs_roofline']:.2f}x")
