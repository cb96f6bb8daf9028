"""Probe: do a decoder's linears (block-768's shapes) run warm when cycled, vs the cache benchmark's 16 MiB squares?"""
import time, torch, torch.nn.functional as F, statistics as st
torch.manual_seed(0)
def shapes(h, inter, kvh, hd, layers, vocab):
    per = [(h, h), (h, kvh*hd), (h, kvh*hd), (h, h), (h, inter), (h, inter), (inter, h)]
    return per*layers + [(h, vocab)]
def run(ws, reps=30):
    xs = {w.shape[1]: torch.randn(1, w.shape[1]) for w in ws}
    def once():
        for w in ws: F.linear(xs[w.shape[1]], w)
    for _ in range(3): once()
    t = []
    for _ in range(reps):
        t0 = time.perf_counter(); once(); t.append(time.perf_counter() - t0)
    return st.median(t)
for name, sh, copies in [("block-768", shapes(768, 2048, 4, 64, 4, 8192), 1), ("block-768 x8 (1 GB)", shapes(768, 2048, 4, 64, 4, 8192), 8),
                         ("block-1536", shapes(1536, 4096, 8, 64, 2, 8192), 1), ("block-1536 x4", shapes(1536, 4096, 8, 64, 2, 8192), 4)]:
    ws = [torch.randn(n, k) for _ in range(copies) for k, n in sh]
    b = sum(w.numel()*4 for w in ws)
    t = run(ws)
    print(f"{name:22s} {b/1e6:7.0f} MB  {t*1e3/copies:7.2f} ms per copy  {b/t/1e9:5.1f} GB/s")
for ws_mib in (16, 64, 128, 256, 512):
    ws = [torch.randn(2048, 2048) for _ in range(ws_mib // 16)]
    t = run(ws)
    print(f"squares {ws_mib:4d} MiB  {ws_mib*2**20/t/1e9:5.1f} GB/s")
