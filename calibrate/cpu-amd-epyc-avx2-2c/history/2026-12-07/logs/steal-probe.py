"""Steal time while both vCPUs are busy: /proc/stat's steal column before and after 20 s of 2-thread GEMMs, and
the GEMM rate per second, to see whether the slow spells are the hypervisor taking the vCPUs."""
import time, torch
torch.set_num_threads(2)
def stat():
    f = open("/proc/stat").readline().split()[1:]
    return [int(x) for x in f]
a = torch.randn(512, 2048); w = torch.randn(2048, 2048)
for sec in range(20):
    s0 = stat(); t0 = time.perf_counter(); n = 0
    while time.perf_counter() - t0 < 1.0:
        a @ w.T; n += 1
    s1 = stat(); d = [y - x for x, y in zip(s0, s1)]
    total = sum(d)
    print(f"{sec:2d}: {n * 2 * 512 * 2048 * 2048 / (time.perf_counter() - t0) / 1e9:6.1f} GFLOP/s  user {d[0]/total:.0%} "
          f"system {d[2]/total:.0%} idle {d[3]/total:.0%} steal {d[7]/total:.0%}", flush=True)
