# probe: cold F.linear at M = 1-16 for listed shapes (issue 25): the HF hold-outs' layer shapes and candidate
# calibration shapes, fp32 and bf16, 2026-12-03 17:20-17:40 UTC, 2-core Intel Xeon VM. Outputs:
# linear-shapes-hf-fp32.log, linear-shapes-candidates-fp32.log (+ -2), linear-shapes-*-bf16.log.
# Offline blend comparisons on these tables: linear-shape-class-blend-offline.py
import time, torch, sys, json
import torch.nn.functional as F
dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[sys.argv[1]]
shapes = [tuple(map(int, s.split("x"))) for s in sys.argv[2].split(",")]
pool = torch.full((int(1.0 * 2**30 // 4),), 0.01, dtype=torch.float32).to(dtype)
out = {}
for k, n in shapes:
    per = k * n; copies = pool.numel() // per
    ws = [pool[i * per:(i + 1) * per].view(n, k) for i in range(copies)]
    ts = {}
    for m in (1, 2, 4, 8, 16):
        x = torch.randn(m, k, dtype=dtype); calls = max(copies, 30 if per < 2**22 else 8)
        for i in range(2): F.linear(x, ws[i % copies])
        r = []
        for rep in range(3):
            s = time.perf_counter()
            for i in range(calls): F.linear(x, ws[i % copies])
            r.append((time.perf_counter() - s) / calls)
        ts[m] = sorted(r)[1]
    out[f"{k}x{n}"] = ts
    print(f"{k:5d}x{n:<6d} t1 {ts[1]*1e6:7.0f} us " + " ".join(f"r{m} {ts[m]/ts[1]:.2f}" for m in (2, 4, 8, 16)), flush=True)
json.dump(out, open(sys.argv[3], "w"))
