"""Is the two-speed decoder step a two-thread effect? The 'forward' and 'gemm' anchors (calibrate.measure.anchor)
alternating between 1 and 2 threads for DURATION seconds; per thread count the p5 / p50 / p95 and the share of
readings in the slow mode (above 1.4x the fastest decile). 2-core AMD EPYC (Zen 3, AVX2) VM, 2026-12-07."""
import sys, time
import numpy as np
import torch
from rooflinesim.calibrate.measure.timers import select_device
from rooflinesim.calibrate.measure.anchor import Anchor

DURATION = float(sys.argv[1]) if len(sys.argv) > 1 else 90
anchors = {n: Anchor(select_device("cpu", n)) for n in (1, 2)}
rows = {1: [], 2: []}
t0 = time.perf_counter()
while time.perf_counter() - t0 < DURATION:
    for n, anchor in anchors.items():
        torch.set_num_threads(n)
        r = anchor.time_s()
        rows[n].append((r["forward"] * 1e3, r["gemm"] * 1e3))
        print(f"{time.perf_counter() - t0:6.1f} s {n} thread(s): forward {r['forward'] * 1e3:.3f} ms, gemm {r['gemm'] * 1e3:.3f} ms", flush=True)
for n, rs in rows.items():
    for i, name in enumerate(("forward", "gemm")):
        x = np.array([r[i] for r in rs])
        fast = np.percentile(x, 10)
        print(f"{n} thread(s) {name}: n {len(x)}, p5 / p50 / p95 {np.percentile(x, [5, 50, 95]).round(3)} ms, "
              f"slow readings (> 1.4x the p10) {np.mean(x > 1.4 * fast):.0%}")
