import time, torch, torch.nn.functional as F, statistics as st, itertools
torch.manual_seed(0)
x = torch.randn(1, 2048)
for mib in (64, 128, 256, 512):
    ws = [torch.randn(2048, 2048) for _ in range(mib // 16)]
    for w in ws * 2: F.linear(x, w)
    t = []
    for w in ws * 4:
        t0 = time.perf_counter(); F.linear(x, w); t.append(time.perf_counter() - t0)
    b = 2048*2048*4
    q = st.quantiles(t, n=10)
    print(f"{mib:4d} MiB  median {b/st.median(t)/1e9:5.1f} GB/s  mean {b/st.mean(t)/1e9:5.1f} GB/s  p10 {b/q[0]/1e9:5.1f} p90 {b/q[-1]/1e9:5.1f}")
