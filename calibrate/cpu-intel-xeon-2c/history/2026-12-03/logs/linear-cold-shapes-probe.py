# probe: linear shapes timed cold (rotating over copies beyond the last-level cache) at M = 1-8, vs a profile's
# cold-table price (issue 25). Run at 13:36-13:39 UTC with a 1.2 GiB pool and the shapes below, then with pools of
# 0.5 and 2 GiB and shapes (768, 2048), (768, 768), (1536, 1536), (576, 1664), (1216, 448), then (2 GiB) the lm_heads
# (448, 151936), (576, 49152), (640, 32768), (384, 24576), (1536, 24576)
import time, torch, statistics, sys
import torch.nn.functional as F
from rooflinesim.calibrate.measure.timers import select_device
from rooflinesim.specs.profiles import load_profile
from rooflinesim.timing.measured import MeasuredTiming
dev = select_device("cpu")
tm = MeasuredTiming.from_spec(load_profile(sys.argv[1]))
shapes = [(576, 1664), (1664, 576), (576, 576), (576, 192), (640, 1856), (1856, 640), (448, 1216), (1216, 448), (1536, 1536), (384, 384)]
pool = torch.full((int(1.2 * 2**30 // 4),), 0.01)
for k, n in shapes:
    per = k * n; copies = pool.numel() // per
    ws = [pool[i * per:(i + 1) * per].view(n, k) for i in range(copies)]
    row = []
    for m in (1, 2, 3, 4, 8):
        x = torch.randn(m, k)
        calls = max(copies, 20)
        s = time.perf_counter()
        for i in range(calls):
            F.linear(x, ws[i % copies])
        t = (time.perf_counter() - s) / calls
        p = float(tm.get_linear_time_s(m, k, n, "fp32"))
        row.append(f"M{m} {t*1e6:6.0f} ({p*1e6:5.0f})")
    print(f"{k:5d}x{n:<5d} {per*4/1e6:5.1f} MB: " + "  ".join(row), flush=True)
