import torch, time, torch.nn.functional as F
torch.set_num_threads(2)
def t(m,k,n,reps=None):
    ws=[torch.randn(n,k) for _ in range(max(1, int(600e6//(n*k*4))))]
    x=torch.randn(m,k); ts=[]
    for i in range(12):
        w=ws[i%len(ws)]; s=time.perf_counter(); F.linear(x,w); ts.append(time.perf_counter()-s)
    ts.sort(); return ts[len(ts)//4]
for k,n in ((448,151936),(384,24576),(768,49152),(576,49152),(1536,24576),(576,1664),(448,1216)):
    base=t(1,k,n)
    print(f"{k}x{n}: M=1 {base*1e3:.2f} ms ({k*n*4/base/1e9:.0f} GB/s); ratio M=2..16:", " ".join(f"{m}:{t(m,k,n)/base:.2f}" for m in (2,3,4,6,8,12,16)))
