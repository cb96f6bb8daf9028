# probe: cold F.linear growth t(M)/t(1), M = 1, 2, 4, 8, over a grid of (K, N) (issue 25, batch 4 on unseen shapes).
# Run 2026-12-03 17:10-17:25 UTC on the 2-core Intel Xeon VM (AMX, torch 2.13 CPU, 2 threads):
#   python3 THIS fp32 384,448,512,576,640,704,768,832,896,1024,1152,1216,1280,1536,1664,1792,1856,2048 out.json
#   python3 THIS bf16 384,512,576,640,768,1024,1152,1216,1536,1664,1856,2048 out.json
# Output: linear-m4-shape-grid-fp32.log, linear-m4-shape-grid-bf16.log. Each figure: middle of three passes.
import time, torch, sys, itertools, json
import torch.nn.functional as F
torch.manual_seed(0)
dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[sys.argv[1]]
sizes = [int(s) for s in sys.argv[2].split(",")]
pool = torch.full((int(1.0 * 2**30 // 4),), 0.01, dtype=torch.float32).to(dtype)
out = {}
def t_of(ws, x, copies):
    calls = max(copies, 30)
    for i in range(4): F.linear(x, ws[i % copies])
    best = []
    for rep in range(3):
        s = time.perf_counter()
        for i in range(calls):
            F.linear(x, ws[i % copies])
        best.append((time.perf_counter() - s) / calls)
    return sorted(best)[1]
for k, n in itertools.product(sizes, sizes):
    per = k * n; copies = pool.numel() // per
    ws = [pool[i * per:(i + 1) * per].view(n, k) for i in range(copies)]
    ts = {m: t_of(ws, torch.randn(m, k, dtype=dtype), copies) for m in (1, 2, 4, 8)}
    out[f"{k}x{n}"] = ts
    print(f"{k:5d}x{n:<5d} {per*pool.element_size()/1e6:5.1f} MB t1 {ts[1]*1e6:6.0f} us  r2 {ts[2]/ts[1]:.2f} r4 {ts[4]/ts[1]:.2f} r8 {ts[8]/ts[1]:.2f}", flush=True)
json.dump(out, open(sys.argv[3], "w"))
