import torch, time, itertools, math
from rooflinesim.calibrate.measure.timers import select_device, default_process_heap
select_device("cpu")
MiB=1<<20
import sys; POOL=int(sys.argv[1])*MiB
with default_process_heap():
  for mib in (16, 24, 31, 33, 40, 48, 64):
    pos = mib*MiB//(4*8*64)  # heads 8 hd 64 fp32
    shape=(1,8,pos+1,64)
    copies=max(1,min(64, math.ceil(POOL/(2*mib*MiB))))
    caches=[(torch.full(shape,.5),torch.full(shape,-.5)) for _ in range(copies)]
    nk=torch.randn(1,8,1,64); nv=torch.randn_like(nk); turn=itertools.cycle(range(copies))
    ts=[]
    for i in range(20):
        j=next(turn); k,v=caches[j]; t=time.perf_counter()
        caches[j]=(torch.cat([k[:,:,1:],nk],-2),torch.cat([v[:,:,1:],nv],-2)); ts.append(time.perf_counter()-t)
    moved = 4*mib*MiB
    print(f"{mib:3d} MiB copies {copies:2d}: GB/s", " ".join(f"{moved/x/1e9:.0f}" for x in ts))
    caches=None
