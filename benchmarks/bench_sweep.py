"""How fast is a sweep? Prices >= 1,000,000 (batch, ctx, k, alpha) points and prints points per second.

A benchmark, not a test: run `python benchmarks/bench_sweep.py` (goal: under 1 s for 1M points on a 2-core machine).
"""

from __future__ import annotations

import time

import numpy as np

from rooflinesim.pricing.sweep import sweep


def main(repeats: int = 5) -> None:
    batch = np.arange(1, 257)  # 256 batch sizes
    ctx = 1024 * 2 ** np.arange(0, 8)  # 1k .. 128k: 8 contexts
    k = np.arange(0, 17)  # 17 draft lengths
    alpha = np.linspace(0.5, 0.95, 30)  # 30 acceptance rates
    sweep(hw="h100", model="llama-3.1-8b", batch=[1], ctx=[1024], alpha=[0.8], k=[0, 1])  # warm caches
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = sweep(hw="h100", model="llama-3.1-8b", draft="llama-3.2-1b", batch=batch, ctx=ctx, alpha=alpha, k=k)
        best = result.best_speedup  # include the argmax over k in the timed work
        breakeven = result.break_even_batch
        times.append(time.perf_counter() - start)
    n = result.n_points
    median = float(np.median(times))
    print(f"grid: {batch.size} batch x {ctx.size} ctx x {k.size} k x {alpha.size} alpha = {n:,} points")
    print(f"median of {repeats}: {median * 1e3:.0f} ms  ->  {n / median:,.0f} points/s "
          f"(best speedup range {best.min():.2f}-{best.max():.2f}x, break-even cells {int((breakeven > 0).sum())})")


if __name__ == "__main__":
    main()
