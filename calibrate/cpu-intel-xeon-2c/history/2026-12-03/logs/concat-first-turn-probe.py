import torch, time, itertools, sys
from rooflinesim.calibrate.measure.timers import select_device, default_process_heap
select_device("cpu"); MiB=1<<20
big = [torch.ones(int(2.5*2**30)//4)]  # a calibration-sized footprint, live
def run(prewarm):
    with default_process_heap():
        shape=(1,4,48*MiB//(4*4*64)+1,64); copies=10
        caches=[(torch.full(shape,.5),torch.full(shape,-.5)) for _ in range(copies)]
        nk=torch.randn(1,4,1,64); nv=torch.randn_like(nk); turn=itertools.cycle(range(copies)); ts=[]
        if prewarm:
            w=torch.empty(prewarm*MiB//4); w.fill_(0); del w
        for i in range(12):
            j=next(turn); k,v=caches[j]; t=time.perf_counter()
            caches[j]=(torch.cat([k[:,:,1:],nk],-2),torch.cat([v[:,:,1:],nv],-2)); ts.append(time.perf_counter()-t)
        print(f"prewarm {prewarm} MiB: GB/s", " ".join(f"{4*48*MiB/x/1e9:.1f}" for x in ts), flush=True)
run(0); run(256); run(0); run(256); big.append(torch.ones(2*2**30//4)); run(0); run(256)
