"""Does a linear table point's figure depend on how many calls it is timed for? The same cold-weight F.linear
points timed with the full plan's settings (at least 5 calls and 30 ms) and the quick (steady) plan's (5 calls,
2 ms), interleaved in shuffled order for ROUNDS rounds on one pool; each figure is `Timing.estimate_s` (the median of
the faster half of the calls), as calibration reads it. 2-core AMD EPYC (Zen 3) VM, fp32, 2026-12-07.

    python call-count-probe.py [ROUNDS]"""
import dataclasses
import random
import sys
import time

import numpy as np

from rooflinesim.calibrate.fitting.budget import get_level_plan
from rooflinesim.calibrate.fitting.measurements import LinearKey
from rooflinesim.calibrate.measure.benchmarks.base import BenchContext
from rooflinesim.calibrate.measure.benchmarks.linear import _linear_runner
from rooflinesim.calibrate.measure.timers import Timer, select_device

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 10
SHAPES = ((1536, 1536), (4096, 1536), (384, 24576), (672, 2400))
MS = (1, 4, 16, 64)
device = select_device("cpu")
full = get_level_plan("full", ("fp32",), device)
quick = get_level_plan("steady", ("fp32",), device)
modes = {"full": full, "quick": dataclasses.replace(full, min_calls=quick.min_calls, min_time_s=quick.min_time_s)}
ctx = BenchContext(device, "fp32", full, Timer(device, flush_l2=False))
figures = {}  # (shape, m, mode) -> [estimate per round]
calls = {}
t0 = time.time()
for r in range(ROUNDS):
    jobs = [(k, n, m, mode) for (k, n) in SHAPES for m in MS for mode in modes]
    random.Random(r).shuffle(jobs)
    for k, n, m, mode in jobs:
        ctx.plan = modes[mode]
        timing = _linear_runner(ctx, k, n, m)()
        figures.setdefault((k, n, m, mode), []).append(timing.estimate_s)
        calls.setdefault(mode, []).append(len(timing.samples))
    print(f"round {r} done at {time.time() - t0:.0f} s", flush=True)
print("calls per point: " + ", ".join(f"{mode} median {int(np.median(c))} ({min(c)}-{max(c)})"
                                      for mode, c in calls.items()))
ratios = []
for (k, n) in SHAPES:
    for m in MS:
        f, q = np.array(figures[(k, n, m, "full")]), np.array(figures[(k, n, m, "quick")])
        ratio = float(np.median(f) / np.median(q))
        ratios.append(ratio)
        paired = np.median(f / q)
        print(f"{k:5d} x {n:5d} M {m:3d}: full {np.median(f) * 1e6:9.1f} us, quick {np.median(q) * 1e6:9.1f} us, "
              f"full / quick {ratio:.3f} (paired by round {paired:.3f}; full {f.min() * 1e6:.0f}-{f.max() * 1e6:.0f}, "
              f"quick {q.min() * 1e6:.0f}-{q.max() * 1e6:.0f} us)")
print(f"median full / quick over the points: {np.median(ratios):.3f} (range {min(ratios):.3f}-{max(ratios):.3f})")
