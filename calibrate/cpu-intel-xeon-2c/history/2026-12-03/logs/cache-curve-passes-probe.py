# probe: the quick plan's cache-reuse points timed as the benchmark does (3 passes) and with more passes, repeated,
# interleaved with a decoder-sized disturbance between points as in a run (issue 25: bf16 cache-curve noise)
import sys, time, statistics, torch, random
import torch.nn.functional as F
from rooflinesim.calibrate.measure.timers import select_device
from rooflinesim.calibrate.fitting.measurements import Timing
dev = select_device("cpu")
dtype = sys.argv[1]; td = {"bf16": torch.bfloat16, "fp32": torch.float32}[dtype]
MIB = 2**20; k = n = 2048; esz = 2 if dtype == "bf16" else 4
pool = torch.full((512 * MIB // esz,), 0.01, dtype=td)
per = k * n
def weights(ws):
    c = max(1, min(pool.numel() // per, int(ws // (per * esz))))
    return [pool[i * per:(i + 1) * per].view(n, k) for i in range(c)]
x = torch.randn(1, k).to(td)
sets = [16 * MIB, 64 * MIB, 128 * MIB, 256 * MIB, 512 * MIB]
def point(ws, passes, min_time):
    w = weights(ws)
    def one():
        for a in w: F.linear(x, a)
    one()
    samples = []; begin = time.perf_counter()
    while len(samples) < passes or time.perf_counter() - begin < min_time:
        s = time.perf_counter_ns(); one(); samples.append((time.perf_counter_ns() - s) * 1e-9 / len(w))
        if len(samples) >= 200: break
    return Timing(tuple(samples)).estimate_s, len(samples)
reps = int(sys.argv[2]) if len(sys.argv) > 2 else 6
res = {m: [] for m in ("3 passes", "60 ms")}
with torch.inference_mode():
    for r in range(reps):
        for mode, (passes, mt) in (("3 passes", (3, 0.004)), ("60 ms", (3, 0.06))):
            order = sets[:]; random.shuffle(order)
            t = {}
            for ws in order:
                t[ws] = point(ws, passes, mt)
            cold = t[512 * MIB][0]
            res[mode].append([cold / t[ws][0] for ws in sets[:-1]])
            print(mode, r, " ".join(f"{ws>>20}M:{cold/t[ws][0]:.2f}({t[ws][1]})" for ws in sets[:-1]), f"cold {cold*1e3:.3f} ms", flush=True)
for mode, rows in res.items():
    cols = list(zip(*rows))
    print(mode, "range per point:", " ".join(f"{ws>>20}M {min(c):.2f}-{max(c):.2f}" for ws, c in zip(sets, cols)))
