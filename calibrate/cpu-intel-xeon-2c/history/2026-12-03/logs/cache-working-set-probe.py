import torch, time, itertools, torch.nn.functional as F
torch.set_num_threads(2)
k, n = 2048, 2048  # 16 MiB fp32 weights
pool = torch.empty(1024 * 2**20 // 4); pool.normal_()
x = torch.randn(1, k)
for ws in (64, 128, 192, 256, 320, 384, 512, 768, 1024):
    c = ws * 2**20 // (k * n * 4)
    w = [pool[i*k*n:(i+1)*k*n].view(n, k) for i in range(c)]
    for t in w * 2: F.linear(x, t)
    ts = []
    for t in w * 3:
        s = time.perf_counter(); F.linear(x, t); ts.append(time.perf_counter() - s)
    ts.sort(); print(f"{ws:5d} MiB: {k*n*4/ts[len(ts)//2]/1e9:5.1f} GB/s median, {k*n*4/ts[len(ts)//4]/1e9:5.1f} p25-time")
