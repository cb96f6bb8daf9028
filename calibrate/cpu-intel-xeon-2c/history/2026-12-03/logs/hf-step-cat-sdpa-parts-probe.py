# probe: the context-dependent parts of hf-llama-94m's step at batch 4, in isolation (issue 25)
import time, torch, statistics, sys
import torch.nn.functional as F
from rooflinesim.calibrate.measure.timers import select_device, default_process_heap
dev = select_device("cpu")
b, c = int(sys.argv[1]), int(sys.argv[2])
L, H, KVH, D = 10, 9, 3, 64
def t(fn, n=15):
    xs = []
    for _ in range(n):
        s = time.perf_counter(); fn(); xs.append(time.perf_counter() - s)
    xs.sort(); return statistics.median(xs[: (n + 1) // 2]) * 1e3
with default_process_heap(), torch.inference_mode():
    ks = [torch.randn(b, KVH, c, D) for _ in range(L)]; vs = [torch.randn(b, KVH, c, D) for _ in range(L)]
    nk = torch.randn(b, KVH, 1, D)
    full_k = [torch.cat([k, nk], -2) for k in ks]; full_v = [torch.cat([v, nk], -2) for v in vs]
    def cats():
        for i in range(L):
            k = torch.cat([full_k[i][:, :, :c], nk], -2); full_k[i] = k
            v = torch.cat([full_v[i][:, :, :c], nk], -2); full_v[i] = v
    q = torch.randn(b, H, 1, D)
    def sdpa():
        for i in range(L):
            F.scaled_dot_product_attention(q, full_k[i], full_v[i], enable_gqa=True)
    def sdpa_rep():
        for i in range(L):
            F.scaled_dot_product_attention(q, full_k[i].repeat_interleave(3, 1), full_v[i].repeat_interleave(3, 1))
    def both():
        for i in range(L):
            k = torch.cat([full_k[i][:, :, :c], nk], -2); full_k[i] = k
            v = torch.cat([full_v[i][:, :, :c], nk], -2); full_v[i] = v
            F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    kvb = 2 * L * b * KVH * (c + 1) * D * 4
    for name, fn in (("cat", cats), ("sdpa gqa", sdpa), ("cat+sdpa", both), ("sdpa repeat", sdpa_rep)):
        ms = t(fn)
        print(f"b{b} c{c} {name:12s} {ms:7.2f} ms  ({kvb/1e6:.0f} MB of KV: {kvb/ms/1e6:.1f} GB/s per KV pass)")
