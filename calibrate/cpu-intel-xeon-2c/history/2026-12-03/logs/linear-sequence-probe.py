# probe: a decoder's linear sequence (distinct weights, in model order) at M = 1 and 8 vs the cold tables' prices,
# for the calibration decoders and the HF hold-outs (issue 25, bf16 scale transfer)
import time, torch, statistics, sys
import torch.nn.functional as F
from rooflinesim.calibrate.measure.timers import select_device
from rooflinesim.specs.profiles import load_profile
from rooflinesim.timing.measured import MeasuredTiming
dev = select_device("cpu")
prof, dtype = sys.argv[1], sys.argv[2]
td = {"bf16": torch.bfloat16, "fp32": torch.float32}[dtype]
def shapes(h, kvw, i):
    return [(h, h), (h, kvw), (h, kvw), (h, h), (h, i), (h, i), (i, h)]
models = {"block-1536": (2, shapes(1536, 512, 4096), (1536, 8192)),
          "block-768": (4, shapes(768, 256, 2048), (768, 8192)),
          "llama": (10, shapes(576, 192, 1664), (576, 49152)),
          "qwen2": (8, shapes(448, 64, 1216), (448, 151936)),
          "mistral": (6, shapes(640, 128, 1856), (640, 32768))}
tm = MeasuredTiming.from_spec(load_profile(prof))
def t(fn, n=11):
    xs = []
    for _ in range(n):
        s = time.perf_counter(); fn(); xs.append(time.perf_counter() - s)
    xs.sort(); return statistics.median(xs[: (n + 1) // 2]) * 1e3
with torch.inference_mode():
    for name, (L, sh, head) in models.items():
        ws = [[(torch.randn(n, k) * 0.02).to(td) for k, n in sh] for _ in range(L)]
        hw = (torch.randn(head[1], head[0]) * 0.02).to(td)
        wbytes = (sum(w.numel() for l in ws for w in l) + hw.numel()) * hw.element_size()
        for m in (1, 8):
            xs = {k: torch.randn(m, k).to(td) for k in {s[0] for s in sh} | {head[0]}}
            def body():
                for l in ws:
                    for (k, n), w in zip(sh, l):
                        F.linear(xs[k], w)
            def lm():
                F.linear(xs[head[0]], hw)
            def both():
                body(); lm()
            mb, ml, mw = t(body), t(lm), t(both)
            pb = 1e3 * sum(L * float(tm.get_linear_time_s(m, k, n, dtype)) for k, n in sh)
            pl = 1e3 * float(tm.get_linear_time_s(m, head[0], head[1], dtype))
            print(f"{name:10s} M={m:<2d} layers {mb:6.2f} ms (tables {pb:6.2f}, x{mb/pb:.2f})  lm_head {ml:6.2f} ({pl:6.2f}, x{ml/pl:.2f})"
                  f"  both {mw:6.2f} (x{mw/(pb+pl):.2f})  weights {wbytes/1e6:.0f} MB", flush=True)
        ws = hw = None
