import torch, time
torch.set_num_threads(2)
for size_gb in (1, 2, 4, 2, 8, 2):
    t=time.perf_counter(); x=torch.empty(int(size_gb*2**30)//4); x.fill_(1.0); dt=time.perf_counter()-t
    print(f"{size_gb} GiB alloc+fill: {size_gb*2**30/dt/1e9:.1f} GB/s", flush=True); del x
