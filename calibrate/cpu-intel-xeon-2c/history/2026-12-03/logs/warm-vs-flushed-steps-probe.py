# probe: are a model's weights warm between its decode steps? Steps back to back vs with 512 MiB streamed between
# them (untimed), bf16 / fp32 (issue 25: what the cache-reuse curve should say at 64-256 MB)
import sys, time, torch, statistics
from rooflinesim.calibrate.measure.timers import select_device
from rooflinesim.calibrate.fitting.measurements import Timing
from rooflinesim.calibrate.external.hf_holdout import get_hf_hold_out, make_config, build_hf_model, HfDecodeStep
from rooflinesim.calibrate.reference import model as M
from rooflinesim.calibrate.fitting.plan import get_decoder_spec
dev = select_device("cpu")
dtype = sys.argv[1]; td = {"bf16": torch.bfloat16, "fp32": torch.float32}[dtype]
flush_buf = torch.ones(512 * 2**20 // 4)
def flush(): flush_buf.add_(1.0)
def t(fn, before, n=12):
    fn(); xs = []
    for _ in range(n):
        before(); s = time.perf_counter_ns(); fn(); xs.append((time.perf_counter_ns() - s) * 1e-6)
    return Timing(tuple(xs)).estimate_s
with torch.inference_mode():
    for name in sys.argv[2:]:
        if name.startswith("hf-"):
            model = build_hf_model(make_config(get_hf_hold_out(name)), td, dev.torch_device)
            wb = sum(p.numel() * p.element_size() for p in model.parameters())
            step = HfDecodeStep(model, 1, 256); fn, rew = step, step.rewind
        else:
            model = M.build_decoder(get_decoder_spec(name), td, dev.torch_device)
            wb = sum(p.numel() * p.element_size() for p in model.parameters())
            fn, rew = M.one_token_step(model, 256), (lambda: None)
        for rep in range(2):
            a = t(fn, rew); b = t(fn, lambda: (rew(), flush()))
            print(f"{name:20s} {wb/2**20:5.0f} MiB  back to back {a:6.2f} ms, flushed {b:6.2f} ms: x{b/a:.2f}", flush=True)
        model = step = None
