# probe: a decoder's linear sequence (distinct weights, as in the model) at M = 1 and 4, vs the profile's prices
import time, torch, statistics, sys
import torch.nn.functional as F
from rooflinesim.calibrate.measure.timers import select_device
from rooflinesim.specs.profiles import load_profile
from rooflinesim.timing.measured import MeasuredTiming
dev = select_device("cpu")
prof = sys.argv[1]
models = {"llama": (10, 576, [(576, 576), (576, 192), (576, 192), (576, 576), (576, 1664), (576, 1664), (1664, 576)], (576, 49152)),
          "qwen2": (8, 448, [(448, 448), (448, 64), (448, 64), (448, 448), (448, 1216), (448, 1216), (1216, 448)], (448, 151936)),
          "mistral": (6, 640, [(640, 640), (640, 128), (640, 128), (640, 640), (640, 1856), (640, 1856), (1856, 640)], (640, 32768))}
tm = MeasuredTiming.from_spec(load_profile(prof))
def t(fn, n=9):
    xs = []
    for _ in range(n):
        s = time.perf_counter(); fn(); xs.append(time.perf_counter() - s)
    xs.sort(); return statistics.median(xs[: (n + 1) // 2]) * 1e3
for name, (L, h, shapes, head) in models.items():
    ws = [[torch.randn(n, k) * 0.02 for k, n in shapes] for _ in range(L)]
    hw = torch.randn(head[1], head[0]) * 0.02
    wbytes = sum(w.numel() for l in ws for w in l) * 4 + hw.numel() * 4
    tb = tm.for_step([]) if False else tm
    for m in (1, 4, 16):
        xs = {k: torch.randn(m, k) for k in {s[0] for s in shapes} | {head[0]}}
        def body():
            for l in ws:
                for (k, n), w in zip(shapes, l):
                    F.linear(xs[k], w)
        def lm():
            F.linear(xs[head[0]], hw)
        mb, ml = t(body), t(lm)
        pb = 1e3 * sum(L * float(tm.get_linear_time_s(m, k, n, "fp32")) for k, n in shapes)
        pl = 1e3 * float(tm.get_linear_time_s(m, head[0], head[1], "fp32"))
        print(f"{name:8s} M={m:<3d} layers' linears {mb:6.2f} ms (cold tables {pb:6.2f})  lm_head {ml:6.2f} ms ({pl:6.2f})  weights {wbytes/1e6:.0f} MB")
    ws = hw = None
