import time, statistics, torch, sys, math, collections
from rooflinesim.calibrate.measure.timers import keep_freed_host_memory, default_process_heap
torch.set_num_threads(2); keep_freed_host_memory()
H, D = 4, 64
def t(size_mib, delay, pool_mib=960, calls=24):
    pos = int(size_mib * 2**20 // (H * D * 4))
    shape = (1, H, pos + 1, D)
    copies = max(1, min(64, math.ceil(pool_mib / (2 * size_mib))))
    caches = [(torch.full(shape, 0.5), torch.full(shape, -0.5)) for _ in range(copies)]
    nk = torch.randn(1, H, 1, D); nv = torch.randn_like(nk)
    pending = collections.deque()
    ts = []
    with default_process_heap():
        for i in range(copies + calls):
            j = i % copies
            k, v = caches[j]
            t0 = time.perf_counter()
            caches[j] = (torch.cat([k[:, :, 1:], nk], dim=-2), torch.cat([v[:, :, 1:], nv], dim=-2))
            dt = time.perf_counter() - t0
            pending.append((k, v)); del k, v
            while len(pending) > delay: pending.popleft()
            if i >= copies: ts.append(dt)
    ts = sorted(ts)
    m = statistics.median(ts[: len(ts)//2 + 1])
    return m, 4 * pos * H * D * 4 / m / 1e9, copies
for size in [0.5, 2, 6, 8, 16, 24]:
    for delay in [0, 1, 4, 16]:
        m, gbs, c = t(size, delay)
        print(f"{size} MiB delay {delay} copies {c}: {m*1e6:.0f} us/layer {gbs:.1f} GB/s", flush=True)
