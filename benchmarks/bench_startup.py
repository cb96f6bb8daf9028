"""How fast does rooflinesim start and answer one point? Prints two medians:

* cold start: `rooflinesim predict --json` as a fresh process (interpreter start, imports, parser, pricing, JSON),
  the median of `--runs` runs (default 7; goal <= 0.5 s);
* in-process: one `rooflinesim.predict()` call for one point with the specs already loaded (the loop a user scripts
  over thousands of deployments), the median over `--calls` calls (goal <= 0.5 ms).

Each figure is printed as wall-clock time and as CPU time (user + system of the process): on a shared machine the
wall clock includes waiting for a core, the CPU time much less so.

A benchmark, not a test: run `python benchmarks/bench_startup.py` and name the machine next to the figures.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import time

#: the deployments the in-process figure cycles through (the same hardware and models stay loaded)
POINTS = [
    dict(hw="h100", model="llama-3.1-8b", batch=1, ctx=4096),
    dict(hw="a100", model="llama-3.1-8b", batch=8, ctx="32k"),
    dict(hw="h100", model="llama-3.1-70b", batch=16, ctx=8192, tp=4),
    dict(hw="a100", model="llama-3.1-8b", batch=4, ctx=2048, speculative=False),
]


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def cold_start_s(runs: int) -> tuple[list[float], list[float]]:
    """Wall and CPU seconds of each `python -m rooflinesim.cli predict --json`."""
    command = [sys.executable, "-m", "rooflinesim.cli", "predict", "--json"]
    wall, cpu = [], []
    for _ in range(runs):
        start, start_cpu = time.perf_counter(), _children_cpu_s()
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        wall.append(time.perf_counter() - start)
        cpu.append(_children_cpu_s() - start_cpu)
    return wall, cpu


def in_process_s(calls: int) -> tuple[list[float], list[float]]:
    """Wall and CPU seconds of each in-process `rooflinesim.predict()` for one point."""
    import rooflinesim
    from rooflinesim.specs.registry import load_hardware, load_model

    # the specs loaded once, as a script looping over deployments holds them
    points = [dict(p, hw=load_hardware(p["hw"]), model=load_model(p["model"])) for p in POINTS]
    for point in points:  # warm every cache once
        rooflinesim.predict(**point)
    wall, cpu = [], []
    for i in range(calls):
        point = points[i % len(points)]
        start, start_cpu = time.perf_counter(), time.process_time()
        rooflinesim.predict(**point)
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=7, help="cold starts (default 7)")
    parser.add_argument("--calls", type=int, default=400, help="in-process predict calls (default 400)")
    args = parser.parse_args()
    wall, cpu = cold_start_s(args.runs)
    print(f"cold start, rooflinesim predict --json, {len(wall)} runs: median {statistics.median(wall):.3f} s wall "
          f"(min {min(wall):.3f} s), {statistics.median(cpu):.3f} s CPU")
    wall, cpu = in_process_s(args.calls)
    print(f"in-process rooflinesim.predict(), one point, {len(wall)} calls: median "
          f"{statistics.median(wall) * 1e3:.3f} ms wall (min {min(wall) * 1e3:.3f} ms), "
          f"{statistics.median(cpu) * 1e3:.3f} ms CPU")


if __name__ == "__main__":
    main()
