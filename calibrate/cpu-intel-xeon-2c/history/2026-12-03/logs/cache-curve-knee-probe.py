# probe: the knee points (128 / 256 MiB) timed for 60 ms and 250 ms, repeated, faster-half vs plain median (issue 25)
import sys, time, torch, random, statistics
import torch.nn.functional as F
from rooflinesim.calibrate.measure.timers import select_device
from rooflinesim.calibrate.fitting.measurements import Timing
dev = select_device("cpu")
dtype = sys.argv[1]; td = {"bf16": torch.bfloat16, "fp32": torch.float32}[dtype]
MIB = 2**20; k = n = 2048; esz = 2 if dtype == "bf16" else 4
pool = torch.full((512 * MIB // esz,), 0.01, dtype=td); per = k * n
def weights(ws):
    c = max(1, min(pool.numel() // per, int(ws // (per * esz))))
    return [pool[i * per:(i + 1) * per].view(n, k) for i in range(c)]
x = torch.randn(1, k).to(td)
def point(ws, min_time):
    w = weights(ws)
    def one():
        for a in w: F.linear(x, a)
    one(); samples = []; begin = time.perf_counter()
    while len(samples) < 3 or time.perf_counter() - begin < min_time:
        s = time.perf_counter_ns(); one(); samples.append((time.perf_counter_ns() - s) * 1e-9 / len(w))
    t = Timing(tuple(samples)); return t.estimate_s, statistics.median(samples)
with torch.inference_mode():
    for r in range(int(sys.argv[2])):
        out = []
        for mt in (0.06, 0.25):
            cold = point(512 * MIB, mt)
            for ws in (128 * MIB, 192 * MIB, 256 * MIB):
                fh, md = point(ws, mt)
                out.append(f"{int(mt*1000)}ms {ws>>20}M fast-half {cold[0]/fh:.2f} median {cold[1]/md:.2f}")
        print(r, " | ".join(out), flush=True)
