# offline: the blend (timing.linear_tables) on tables from linear-shapes-m1-16-probe.py, calibrated subsets S0 (the
# full plan's shapes before c7d4e5c) and S0+ADD (with the non-256 shapes), with/without shape classes; priced on
# the HF hold-outs' layer linears (cal.json / calm.json / hf.json: the probe's outputs; 2026-12-03 17:40 UTC)
import json, sys, numpy as np
from rooflinesim.timing import linear_tables as lt
cal = json.load(open("calm.json")); hf = json.load(open("hf.json"))
peak, bw = 110e9, 28e9; MS = [1, 2, 4, 8, 16]
def table(k, n):
    ts = cal[f"{k}x{n}"]
    return lt._Table(k, n, np.log(np.array(MS, float)), np.log(np.array([ts[str(m)] for m in MS])))
CFG = {"align": 0, "pen": 4.0}
def weights(self, k, n):
    a, pen = CFG["align"], CFG["pen"]
    d2 = np.array([(np.log2(k) - np.log2(t.k)) ** 2 + (np.log2(n) - np.log2(t.n)) ** 2
                   + ((pen * (((k % a) == 0) != ((t.k % a) == 0)) + pen * (((n % a) == 0) != ((t.n % a) == 0))) if a else 0)
                   for t in self.tables])
    return np.exp(-d2 / (2 * self.kernel_log2 ** 2))
lt.LinearModel.get_shape_weights = weights
S0 = ["384x384","768x768","1536x1536","768x192","1536x384","384x96","768x2048","384x1024","2048x768","1024x384","2560x2560","1536x4096","4096x1536"]
ADD = ["672x672","672x168","896x224","672x2400","384x1344","2400x672","1344x384"]
ADD2 = ADD
models = {"llama": {"576x576": 2, "576x192": 2, "576x1664": 2, "1664x576": 1}, "qwen2": {"448x448": 2, "448x64": 2, "448x1216": 2, "1216x448": 1},
          "mistral": {"640x640": 2, "640x128": 2, "640x1856": 2, "1856x640": 1}, "moe-ish": {"448x832": 1, "832x448": 1, "448x320": 2, "320x448": 1, "448x1088": 1}}
for name, shapes in (("S0", S0), ("S0+ADD", S0 + ADD), ("S0+ADD2", S0 + ADD2)):
    lm = lt.LinearModel(tuple(table(*map(int, s.split("x"))) for s in shapes), peak, bw, 0.0, 4.0)
    for align, pen in ((0, 0), (256, 1.0), (256, 4.0), (128, 4.0)):
        CFG.update(align=align, pen=pen)
        out = []
        for m in (1, 4, 8, 16):
            errs = []
            for mod, sh in models.items():
                meas = sum(c * hf[s][str(m)] for s, c in sh.items())
                pr = sum(c * float(lm.time_s(m, *map(int, s.split("x")))) for s, c in sh.items())
                errs.append(pr / meas - 1)
            out.append(f"M{m} " + " ".join(f"{e:+.0%}" for e in errs))
        print(f"{name:8s} align {align:3d} pen {pen:3.0f} loo {lt.get_shape_loo_error(lm):.3f} | " + " | ".join(out))
print("LOO at M 2-16 only")
def loo_small(linear):
    errors = []
    tabs = linear.tables
    from dataclasses import replace
    for i, table in enumerate(tabs):
        others = replace(linear, tables=tabs[:i] + tabs[i + 1:])
        m = np.exp(table.log_m); sel = (m >= 2) & (m <= 16)
        errors.extend(np.abs(others.time_s(m[sel], table.k, table.n) / np.exp(table.log_t[sel]) - 1.0))
    return float(np.median(errors)), float(np.mean(errors))
for name, shapes in (("S0", S0), ("S0+ADD", S0 + ADD), ("S0+ADD2", S0 + ADD2)):
    lm = lt.LinearModel(tuple(table(*map(int, s.split("x"))) for s in shapes), peak, bw, 0.0, 4.0)
    for align, pen in ((0, 0), (256, 4.0), (128, 4.0), (64, 4.0), (512, 4.0)):
        CFG.update(align=align, pen=pen)
        print(name, align, "median %.3f mean %.3f" % loo_small(lm))
