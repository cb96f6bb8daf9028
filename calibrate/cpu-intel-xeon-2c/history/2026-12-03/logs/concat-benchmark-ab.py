"""A/B the kv_concat benchmark: replaced caches freed at once (old) vs after half the copies (new), alternating."""
import sys, json
from rooflinesim.calibrate.measure.timers import select_device, Timer
from rooflinesim.calibrate.measure.benchmarks.base import BenchContext
from rooflinesim.calibrate.measure.benchmarks import implementation as I
from rooflinesim.calibrate.fitting.plan import Plan, KV_CONCAT_BYTES, get_kv_concat_bytes
dtype = sys.argv[1]
dev = select_device("cpu", 2)
plan = Plan.make(False, (dtype,), dev)
ctx = BenchContext(dev, dtype, plan, Timer(dev))
real = I.get_free_delay
out = {"old": {}, "new": {}}
for rnd in range(2):
    for size in KV_CONCAT_BYTES[:5]:
        for arm in ("old", "new"):
            I.get_free_delay = (lambda a, c: 0) if arm == "old" else real
            t = ctx.time.__self__  # noqa
            timing = I._time_concat(ctx, size)
            est = timing.estimate_s
            out[arm].setdefault(size, []).append(est)
            print(rnd, arm, size / 2**20, f"{get_kv_concat_bytes(size, dtype) / est / 1e9:.1f} GB/s", flush=True)
json.dump({a: {str(k): v for k, v in d.items()} for a, d in out.items()}, open(f"ab_concat_{dtype}.json", "w"))
