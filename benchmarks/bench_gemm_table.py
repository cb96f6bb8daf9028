"""One linear op, priced by the datasheet roofline, against a published table of single-GEMM latencies on an A100.

The end-to-end rows (`measurements.yaml`, the speculation benchmark) price whole steps; this checks the layer under
them, one `make_linear` op through `DatasheetTiming.expected` (memory and compute fractions, the fitted
compute-memory overlap, the kernel overhead), against `benchmarks/published/gemm-a100.yaml` (cuBLAS through
torch.nn.Linear, measured by another project). Per m it prints the median and range of predicted / measured over the
table's weight shapes, and the overlap the measurements imply: the share of the shorter of compute and memory time
hidden under the longer, were the fractions right (measured = compute + memory - overlap x min).

    python benchmarks/bench_gemm_table.py [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import platform
from pathlib import Path

import numpy as np
import yaml

from rooflinesim.ops.op_cost import make_linear
from rooflinesim.specs.registry import load_hardware
from rooflinesim.timing.datasheet import DatasheetTiming
from rooflinesim.units import MICRO, get_dtype_bytes

TABLE = Path(__file__).resolve().parent / "published" / "gemm-a100.yaml"


def load_table(path: Path = TABLE) -> dict:
    return yaml.safe_load(path.read_text())


def get_rows(table: dict) -> list[dict]:
    """One row per (k, n, m): measured and priced seconds, the compute and memory times the price is made of."""
    hw = load_hardware(table["hardware"])
    timing = DatasheetTiming.expected(hw)
    width = get_dtype_bytes(table["dtype"])
    rows = []
    for shape, latencies_us in table["latency_us"].items():
        k, n = (int(x) for x in shape.split("x"))
        for m, latency_us in zip(table["m"], latencies_us):
            op = make_linear("gemm", 1, m, k, n, width, width)
            t = timing.get_op_time(op, table["dtype"])
            rows.append({"k": k, "n": n, "m": m, "measured_s": latency_us * MICRO, "predicted_s": float(t.time_s),
                         "compute_s": float(t.compute_time_s), "memory_s": float(t.memory_time_s),
                         "overhead_s": float(t.overhead_s)})
    return rows


def get_implied_overlap(row: dict) -> float:
    """The overlap that makes compute + memory - overlap x min(compute, memory) + overhead equal the measurement."""
    c, mem = row["compute_s"], row["memory_s"]
    return (c + mem + row["overhead_s"] - row["measured_s"]) / min(c, mem)


def summarize(rows: list[dict], overlap: float) -> list[dict]:
    out = []
    for m in sorted({r["m"] for r in rows}):
        at = [r for r in rows if r["m"] == m]
        ratio = np.array([r["predicted_s"] / r["measured_s"] for r in at])
        implied = np.array([get_implied_overlap(r) for r in at])
        c_over_m = np.array([r["compute_s"] / r["memory_s"] for r in at])
        out.append({"m": m, "shapes": len(at), "ratio_median": float(np.median(ratio)), "ratio_min": float(ratio.min()),
                    "ratio_max": float(ratio.max()), "compute_over_memory_median": float(np.median(c_over_m)),
                    "implied_overlap_median": float(np.median(implied)), "spec_overlap": overlap})
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default=None, help="also write the per-m summary to this path")
    args = parser.parse_args(argv)
    table = load_table()
    hw = load_hardware(table["hardware"])
    overlap = hw.efficiency.compute_memory_overlap
    rows = get_rows(table)
    summary = summarize(rows, overlap)
    print(f"machine: {platform.machine()}, Python {platform.python_version()}; deterministic (no timing)")
    print(f"table: {table['source'].split(' (')[0]}; priced on {table['hardware']} ({table['dtype']}), "
          f"compute-memory overlap {overlap:g}")
    print(f"{'m':>6} {'shapes':>6} {'priced / measured: median (min-max)':>38} {'compute / memory':>17} "
          f"{'implied overlap':>16}")
    for s in summary:
        print(f"{s['m']:>6} {s['shapes']:>6} {s['ratio_median']:>20.2f} ({s['ratio_min']:.2f}-{s['ratio_max']:.2f})"
              f"{'':>9} {s['compute_over_memory_median']:>17.2f} {s['implied_overlap_median']:>16.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"table": str(TABLE.name), "summary": summary}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
