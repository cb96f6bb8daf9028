"""transformers' cache growing as in generate (no rewind): page faults and cat time per step."""
import sys, time, resource, statistics, torch, collections
from rooflinesim.calibrate.measure.timers import keep_freed_host_memory, default_process_heap
from rooflinesim.calibrate.external import hf_holdout as H
torch.set_num_threads(2); keep_freed_host_memory()
name = sys.argv[1]
model = H.build_hf_model(H.make_config(H.get_hf_hold_out(name)), torch.float32)
orig = torch.cat; acc = [0.0]
def cat(*a, **k):
    t0 = time.perf_counter(); o = orig(*a, **k); acc[0] += time.perf_counter() - t0; return o
torch.cat = cat
flt = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for spec in sys.argv[2:]:
    b, c = map(int, spec.split("x"))
    for mode in ("rewind", "grow"):
        step = H.HfDecodeStep(model, b, c)
        ts, fs, cs = [], [], []
        with torch.inference_mode(), default_process_heap():
            for i in range(16):
                acc[0] = 0.0; f0 = flt(); t0 = time.perf_counter()
                step()
                ts.append(time.perf_counter() - t0); fs.append(flt() - f0); cs.append(acc[0])
                if mode == "rewind": step.rewind()
                else:
                    step.kwargs["cache_position"] = step.kwargs["cache_position"] + 1
                    step.kwargs["position_ids"] = step.kwargs["position_ids"] + 1
        m = lambda x: statistics.median(x[3:])
        print(f"{name} b{b} c{c} {mode}: step {m(ts)*1e3:.1f} ms, cat {m(cs)*1e3:.1f} ms, faults/step {m(fs):.0f} ({m(fs)*4096/2**20:.0f} MiB)", flush=True)
        del step
