import pickle, sys, numpy as np
import rooflinesim.calibrate.fitting.fit_profile as fp
from rooflinesim.calibrate.fitting.measurements import Timing
def load(i, mean_cache=True):
    d = pickle.load(open(f"q{i}.fp32.pkl", "rb")); r = d["results"]
    if mean_cache:
        for key in r.keys_of(fp.CacheKey):
            s = r.samples[key]
            m = float(np.mean(sorted(s)[:int(len(s)*0.9)]))  # trimmed of the worst 10 % (stalls)
            r.samples[key] = [m] * len(s)
    return d
if __name__ == "__main__":
    for i in range(1, 6):
        for mc in (False, True):
            d = load(i, mc)
            prof = fp.fit_dtype("fp32", d["results"], d["copy_bw"], d["gemv_bw"], d["plan"], d["probe"])
            cr = prof.cache_reuse
            print(i, "mean" if mc else "p25 ", "scale %.3f inlayer %.2f ms layer %.0f us" % (prof.in_model_scale, prof.in_model_layer_overhead_s*1e3, prof.layer_overhead_s*1e6),
                  [round(s, 2) for s in cr.speedup], {k: round(v, 3) for k, v in prof.residuals.items() if k.startswith("decoder_fit")})
