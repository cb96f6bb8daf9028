"""Probe: per-call times of the 0.5 MiB kv_concat point over two turns of its copies, in a process that ran other
benchmarks first (heap history), as a quick calibration does."""
import time, torch, sys
from rooflinesim.calibrate.measure.timers import select_device, Timer
from rooflinesim.calibrate.measure.benchmarks.base import BenchContext
from rooflinesim.calibrate.measure.benchmarks import implementation as im
from rooflinesim.calibrate.fitting.budget import get_level_plan
from rooflinesim.calibrate.fitting.measurements import Timing
dev = select_device("cpu")
plan = get_level_plan("quick", ("fp32",), dev)
ctx = BenchContext(dev, "fp32", plan, Timer(dev))
# heap history: a few hundred MB allocated and freed in pieces
junk = [torch.randn(256, 1024) for _ in range(400)]; del junk
class Rec:
    def __init__(s, ctx): s.ctx = ctx
    def __getattr__(s, a): return getattr(s.ctx, a)
    def time(s, fn):
        t = []
        for _ in range(140):
            t0 = time.perf_counter(); fn(); t.append(time.perf_counter() - t0)
        return Timing(tuple(t))
for size in (0.5, 8, 0.5):
    r = im._time_concat(Rec(ctx), int(size * 2**20))
    s = [x * 1e6 for x in r.samples]
    print(size, "MiB: first 64 calls:", " ".join(f"{x:.0f}" for x in s[:64:4]), "| 64-140 median", sorted(s[64:])[len(s[64:])//2], "max", max(s[64:]))
