# probe: decode attention (q = 1) as the reference decoder runs it (boolean mask, enable_gqa) vs as transformers'
# sdpa_attention_forward runs it without a mask (enable_gqa, attn_mask None), cold caches (issue 25)
import sys, time, torch, statistics
import torch.nn.functional as F
from rooflinesim.calibrate.measure.timers import select_device
from rooflinesim.calibrate.fitting.measurements import Timing
dev = select_device("cpu")
def t(fn, n=15):
    fn(); xs = []
    for _ in range(n):
        s = time.perf_counter_ns(); fn(); xs.append((time.perf_counter_ns() - s) * 1e-6)
    return Timing(tuple(xs)).estimate_s
with torch.inference_mode():
    for td in (torch.bfloat16, torch.float32):
        for (h, kvh, d) in ((9, 3, 64), (10, 2, 64), (7, 7, 64), (12, 3, 64)):
            for b, s in ((1, 2048), (4, 2048), (16, 1024), (16, 2048)):
                copies = max(2, int(600e6 // (2 * b * kvh * s * d * td.itemsize)))
                caches = [(torch.randn(b, kvh, s, d).to(td), torch.randn(b, kvh, s, d).to(td)) for _ in range(min(copies, 40))]
                q = torch.randn(b, h, 1, d).to(td)
                mask = torch.ones(b, 1, 1, s, dtype=torch.bool)
                it = {"i": 0}
                def nxt():
                    it["i"] = (it["i"] + 1) % len(caches); return caches[it["i"]]
                def ref():
                    k, v = nxt(); F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
                def hf():
                    k, v = nxt(); F.scaled_dot_product_attention(q, k, v, attn_mask=None, enable_gqa=True)
                a, c = t(ref), t(hf)
                print(f"{str(td)[6:]:9s} heads {h:2d}/{kvh} b{b:<2d} s{s:<5d} masked {a:6.3f} ms  no mask {c:6.3f} ms  x{a/c:.2f}", flush=True)
                caches = None
