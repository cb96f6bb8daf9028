"""How long does `rooflinesim sweep ... -o grid.csv` take end to end over 1,044,480 grid points?

A benchmark, not a test: run `python benchmarks/bench_sweep_file.py [--format csv|json] [--repeats N]`. Each run is
the command a user types, in a fresh process (start-up, pricing and writing the file), timed by wall clock; peak
memory is the child's maximum resident set from getrusage(RUSAGE_CHILDREN). Goal (issue 9): <= 5 s and <= 1 GB for
the CSV on a 2-core machine. The grid is 256 batches x 8 contexts x 17 k x 30 alphas; `--batch 1..256` would give
powers of two only, so the 256 batches go as a list.
"""

from __future__ import annotations

import argparse
import csv
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from rooflinesim.specs.profiles import get_host_cpu_model

BATCH = list(range(1, 257))
CTX = "1k..128k"  # 8 contexts, powers of two
K = "0..16"  # 17 draft lengths
ALPHA = np.linspace(0.5, 0.95, 30).tolist()  # 30 acceptance rates
N_POINTS = len(BATCH) * 8 * 17 * len(ALPHA)


def get_command(output: Path, fmt: str) -> list[str]:
    # `python -m rooflinesim.cli` is what the `rooflinesim` script runs, with this interpreter and its sys.path
    return [sys.executable, "-m", "rooflinesim.cli", "sweep", "--hw", "h100", "--model", "llama-3.1-8b",
            "--draft", "llama-3.2-1b", "--batch", ",".join(map(str, BATCH)), "--ctx", CTX, "--k", K,
            "--alpha", ",".join(map(repr, ALPHA)), "--format", fmt, "-o", str(output)]


def count_rows(path: Path, fmt: str) -> int:
    if fmt == "csv":
        with open(path, newline="") as f:
            return sum(1 for _ in csv.reader(f)) - 1
    import json

    return len(json.loads(path.read_text())["grid"]["speedup"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--format", choices=["csv", "json"], default="csv")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    walls = []
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as folder:
        output = Path(folder) / f"grid.{args.format}"
        for _ in range(args.repeats):
            start = time.perf_counter()
            proc = subprocess.run(get_command(output, args.format), capture_output=True, text=True)
            walls.append(time.perf_counter() - start)
            if proc.returncode != 0:
                sys.exit(f"sweep failed ({proc.returncode}): {proc.stderr.strip()}")
        size_mb = output.stat().st_size / 1e6
        rows = count_rows(output, args.format)
    if rows != N_POINTS:
        sys.exit(f"expected {N_POINTS:,} rows in the grid file, found {rows:,}")
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    peak_mb = usage.ru_maxrss * 1024 / 1e6  # Linux: KiB, the maximum over every child waited for (the largest run)
    cpu_s = (usage.ru_utime + usage.ru_stime) / args.repeats
    # wall time on a shared machine depends on what else runs: the load average and the CPU time put it in context
    print(f"CPU: {get_host_cpu_model()} ({len(os.sched_getaffinity(0))} cores usable, load average {load_before:.1f} "
          f"before, {os.getloadavg()[0]:.1f} after)")
    print(f"rooflinesim sweep -o grid.{args.format}: {N_POINTS:,} points, {size_mb:.0f} MB file")
    print(f"wall: median {statistics.median(walls):.2f} s over {args.repeats} runs "
          f"({', '.join(f'{w:.2f}' for w in walls)} s); CPU {cpu_s:.2f} s per run; peak RSS {peak_mb:.0f} MB")


if __name__ == "__main__":
    main()
