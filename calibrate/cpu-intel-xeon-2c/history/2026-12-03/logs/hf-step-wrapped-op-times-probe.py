import sys, time, torch, statistics, collections
import torch.nn.functional as F
from rooflinesim.calibrate.measure.timers import keep_freed_host_memory, default_process_heap
from rooflinesim.calibrate.external import hf_holdout as H
torch.set_num_threads(2); keep_freed_host_memory()
name = sys.argv[1]
model = H.build_hf_model(H.make_config(H.get_hf_hold_out(name)), torch.float32)
acc = collections.defaultdict(float)
def wrap(mod, attr, key, cond=lambda *a, **k: True):
    orig = getattr(mod, attr)
    def f(*a, **k):
        t0 = time.perf_counter(); out = orig(*a, **k); acc[key] += time.perf_counter() - t0; return out
    setattr(mod, attr, f)
wrap(torch, "cat", "cat"); wrap(F, "scaled_dot_product_attention", "sdpa"); wrap(F, "linear", "linear")
for spec in sys.argv[2:]:
    b, c = map(int, spec.split("x"))
    step = H.HfDecodeStep(model, b, c)
    tot = []; parts = collections.defaultdict(list)
    with torch.inference_mode(), default_process_heap():
        for i in range(12):
            acc.clear(); t0 = time.perf_counter(); step(); tot.append(time.perf_counter() - t0); step.rewind()
            for k, v in acc.items(): parts[k].append(v)
    med = lambda x: statistics.median(x[2:]) * 1e3
    print(f"{name} b{b} c{c}: step {med(tot):.1f} ms; " + ", ".join(f"{k} {med(v):.1f}" for k, v in parts.items()) + f"; rest {med(tot) - sum(med(v) for v in parts.values()):.1f}", flush=True)
    del step
