"""How fast is the serving simulator? Simulates 10,000 requests with speculation and prints the wall time, the engine
steps per second and the machine; then the error the step-price bucketing adds (against exact prices).

A benchmark, not a test: run `python benchmarks/bench_serve.py` (goal: 10,000 requests with speculation in <= 2 s on
a 2-core machine). Llama-3.1-70B on 4 x H100 with a Llama-3.1-8B draft, prompts 1024 and outputs 128 tokens (vLLM's
random-dataset defaults), Poisson arrivals; the time includes building the step-price tables.
"""

from __future__ import annotations

import platform
import sys
import time
from pathlib import Path

import numpy as np

from rooflinesim.specs.profiles import get_host_cpu_model
from rooflinesim.scenario.builder import build_scenario
from rooflinesim.serve import LengthDistribution, generate_requests, simulate

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))


def main(requests: int = 10_000, repeats: int = 3) -> None:
    import os

    scenario = build_scenario("h100", "llama-3.1-70b", tp=4, draft="llama-3.1-8b", alpha=0.8, k_values=[0])
    prompt, output = LengthDistribution.parse("1024", "prompt"), LengthDistribution.parse("128", "output")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"machine: {get_host_cpu_model()}, {os.cpu_count()} cores, Python {platform.python_version()}, load average "
          f"{load:.1f} (wall times on a shared machine vary; CPU time is the steadier figure)")
    for rate, policy in ((2.0, "fixed:4"), (8.0, "dynamic"), (8.0, "fixed:4"), (32.0, "dynamic")):
        reqs = generate_requests(requests, rate, prompt, output, seed=0)
        times, cpu_times = [], []
        for _ in range(repeats):
            start, cpu_start = time.perf_counter(), time.process_time()
            result = simulate(scenario, reqs, policy)
            times.append(time.perf_counter() - start)
            cpu_times.append(time.process_time() - cpu_start)
        summary = result.get_summary()
        median, cpu = float(np.median(times)), float(np.median(cpu_times))
        print(f"{requests:,} requests at {rate:g} req/s, policy {policy}: median of {repeats} {median:.2f} s wall, "
              f"{cpu:.2f} s CPU ({summary['steps']:,} engine steps, {summary['steps'] / cpu:,.0f} steps per CPU s; "
              f"mean batch {summary['mean_batch']:.0f}, mean k {summary['mean_k']:.2f})")
    from test_serve_pricing import get_bucketing_errors

    decode, chunk = get_bucketing_errors(scenario, n_points=2000)
    print(f"bucketing error vs exact prices (2,000 random points): decode group max {decode.max():.3%} / mean "
          f"{decode.mean():.4%}; prefill-chunk attention max {chunk.max():.3%} of the chunk's step")


if __name__ == "__main__":
    main()
