"""How long do this VM's speed states last? The machine-speed anchors (calibrate.measure.anchor) timed back to back
for DURATION seconds; prints each reading's time and the three anchors, then the autocorrelation of the forward
anchor at lags of 1, 5, 10 and 30 readings. 2-core AMD EPYC (Zen 3, AVX2) VM, 2026-12-07."""
import sys, time, json
import numpy as np
from rooflinesim.calibrate.measure.timers import select_device
from rooflinesim.calibrate.measure.anchor import Anchor

DURATION = float(sys.argv[1]) if len(sys.argv) > 1 else 90
anchor = Anchor(select_device("cpu"))
rows, t0 = [], time.perf_counter()
while time.perf_counter() - t0 < DURATION:
    r = anchor.time_s()
    rows.append({"t_s": round(time.perf_counter() - t0, 2), **{k: v * 1e3 for k, v in r.items()}})
    print(f"{rows[-1]['t_s']:7.2f} s  " + "  ".join(f"{k} {rows[-1][k]:.3f} ms" for k in r), flush=True)
json.dump(rows, open("anchor-timeline.json", "w"), indent=1)
for name in ("gemm", "forward", "stream"):
    x = np.log([r[name] for r in rows]); x = x - x.mean()
    ac = [float(np.corrcoef(x[:-lag], x[lag:])[0, 1]) if len(x) > lag + 2 else float("nan") for lag in (1, 5, 10, 30)]
    print(f"{name}: n {len(x)}, p5 / p50 / p95 {np.exp(np.percentile(x, [5, 50, 95])).round(2)} x the mean, "
          f"autocorrelation at lags 1 / 5 / 10 / 30: {np.round(ac, 2)}")
