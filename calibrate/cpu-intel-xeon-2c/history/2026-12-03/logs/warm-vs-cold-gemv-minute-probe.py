# probe: GEMV rate over a 128 MB and a 1 GiB working set, alternately for about a minute: does the warm rate move
# while the cold one holds (a last-level cache shared with other tenants)? (issue 25)
import time, torch
import torch.nn.functional as F
from rooflinesim.calibrate.measure.timers import select_device
dev = select_device("cpu")
k = n = 2048
per = k * n
def rate(total_bytes, passes=3):
    copies = int(total_bytes // (per * 4))
    ws = [torch.full((n, k), 0.01) for _ in range(copies)]
    x = torch.randn(1, k)
    for w in ws: F.linear(x, w)
    s = time.perf_counter()
    for _ in range(passes):
        for w in ws: F.linear(x, w)
    t = time.perf_counter() - s
    return passes * copies * per * 4 / t / 1e9
t0 = time.time()
while time.time() - t0 < 60:
    a = rate(128e6, 6); b = rate(1.0e9, 2)
    print(f"{time.time()-t0:5.1f}s  128 MB {a:5.1f} GB/s   1 GB {b:5.1f} GB/s", flush=True)
