# probe: per-call time and minor page faults of hold-out steps, in the order given (issue 25)
import sys, time, resource, torch
from rooflinesim.calibrate.external.hf_holdout import get_hf_hold_out, make_config, build_hf_model, HfDecodeStep
from rooflinesim.calibrate.measure.timers import default_process_heap
from rooflinesim.calibrate.measure.timers import select_device
dev = select_device("cpu")
pts = [(a.split(":")[0], int(a.split(":")[1]), int(a.split(":")[2])) for a in sys.argv[1:]]
models = {}
with default_process_heap():
  for name, b, c in pts:
    cfg = make_config(get_hf_hold_out(name))
    m = build_hf_model(cfg, torch.float32, "cpu")
    with torch.inference_mode():
        st = HfDecodeStep(m, b, c)
        xs, fs = [], []
        for i in range(14):
            st.rewind(); f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt; t = time.perf_counter(); st()
            xs.append((time.perf_counter() - t) * 1e3); fs.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
    print(f"{name} b{b} c{c}", " ".join(f"{x:.0f}/{f*4096/2**20:.0f}M" for x, f in zip(xs, fs)), flush=True)
    st = m = None
