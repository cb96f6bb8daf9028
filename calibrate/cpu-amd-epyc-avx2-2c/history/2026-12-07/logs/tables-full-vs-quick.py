"""The per-op linear tables of the 08:12 full fp32 profile against the three quick ones of 08:03 (no measuring):
median over the shared weight shapes of full / quick time, by M; and the fitted streaming and peak.

    python tables-full-vs-quick.py   (from the repository root)"""
import numpy as np
import yaml

H = "calibrate/cpu-amd-epyc-avx2-2c/history/2026-12-07/cpu-amd-epyc-avx2-2c-"


def tables(name):
    p = yaml.safe_load(open(H + name + ".yaml"))["measured"]["dtypes"]["fp32"]
    return {(t["in_features"], t["out_features"]): dict(zip(t["m"], t["time_s"])) for t in p["linear"]}, p


full, fp = tables("0812-fp32-spread")
for name in ("quick-0803-spread-q1", "quick-0803-spread-q2", "quick-0804-spread-q3"):
    quick, qp = tables(name)
    shared = set(full) & set(quick)
    ratios = {m: float(np.median([full[s][m] / quick[s][m] for s in shared if m in full[s] and m in quick[s]]))
              for m in (1, 2, 4, 8, 16, 64, 256)}
    print(f"{name}: full / quick table time by M over {len(shared)} shapes: "
          + ", ".join(f"M {m} {r:.3f}" for m, r in ratios.items()))
    print(f"    GEMV streaming full {fp['gemv_bandwidth_bytes_per_s'] / 1e9:.1f} / quick "
          f"{qp['gemv_bandwidth_bytes_per_s'] / 1e9:.1f} GB/s, peak {fp['peak_flops_per_s'] / 1e9:.0f} / "
          f"{qp['peak_flops_per_s'] / 1e9:.0f} GFLOP/s, in-model scale {fp['in_model_scale']:.3f} / "
          f"{qp['in_model_scale']:.3f}")
