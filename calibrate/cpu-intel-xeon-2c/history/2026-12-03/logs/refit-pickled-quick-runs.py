"""Counterfactual refits of pickled quick runs, priced on each round's own HF report (issue 25 analysis).
python cf.py VARIANT [dtype]"""
import json, pickle, sys, glob, importlib, numpy as np
sys.path.insert(0, "/work/main/scripts")
import rooflinesim.calibrate.fitting.fit_profile as fp
from rooflinesim.specs.profiles import load_profile
from rooflinesim.calibrate.validators.validate_family import price_row
rp = importlib.import_module("reprice-holdout")
SPECS = rp.specs_by_name()
ROUNDS = ["q", "r", "t", "u", "v", "w"]

def refit(stem, dtype):
    d = pickle.load(open(f"{stem}.{dtype}.pkl", "rb"))
    prof = fp.fit_dtype(dtype, d["results"], d["copy_bw"], d["gemv_bw"], d["plan"], d["probe"])
    hw = load_profile(f"{stem}.yaml")
    measured = hw.measured.model_copy(update={"dtypes": {**hw.measured.dtypes, dtype: prof}})
    return hw.model_copy(update={"measured": measured}), prof

def errors(hw, report):
    out = []
    for row in report["configs"]:
        spec = SPECS.get(row["model"])
        if spec is None or row.get("new_tokens", 1) != 1 or row["family"] != "hf":
            continue
        p = price_row(hw, hw, spec, report["dtype"], row["batch"], row["context_tokens"], "hf")
        out.append(p["predicted_s"] / row["measured_s"] - 1)
    return np.array(out)

def sets(dtype):
    """(round name, report path, run stems) of every quick round with pickles: 2026-12-03's and today's."""
    pre = "b" if dtype == "bf16" else "q"
    out = [(r, glob.glob(f"/work/meas/y/{r}/v{pre}1/*.json")[0], [f"/work/meas/y/{r}/{pre}{i}" for i in (1, 2, 3)])
           for r in ROUNDS if glob.glob(f"/work/meas/y/{r}/v{pre}1/*.json")]
    A = "/work/meas/a"
    if dtype == "bf16":
        out.append(("r1b", glob.glob(f"{A}/r1/vb1/*.json")[0], [f"{A}/r1/b{i}" for i in (1, 2, 3)]))
        for r in ("r2", "r3"):
            for p in ("b", "n"):
                out.append((r + p, glob.glob(f"{A}/{r}/vbf16/*.json")[0], [f"{A}/{r}/{p}{i}" for i in (1, 2, 3)]))
    else:
        for r in ("r2", "r3"):
            for p in ("q", "m"):
                out.append((r + p, glob.glob(f"{A}/{r}/vfp32/*.json")[0], [f"{A}/{r}/{p}{i}" for i in (1, 2, 3)]))
    return out

def run(dtype="bf16", rounds=None, quiet=False):
    meets, own = 0, {}
    todo = sets(dtype)
    reports = {r: json.load(open(path)) for r, path, _ in todo}
    rounds = [r for r, _, _ in todo]
    for r, _, stems in todo:
        for i, stem in enumerate(stems, 1):
            hw, prof = refit(stem, dtype)
            e = np.abs(errors(hw, reports[r])); med, p90 = np.median(e), np.quantile(e, 0.9)
            ok = med <= 0.10 and p90 <= 0.20
            meets += ok; own[(r, i)] = (med, p90)
            if not quiet:
                print(f"  {r}{i} scale {prof.in_model_scale:.2f} inlayer {prof.in_model_layer_overhead_s*1e6:4.0f} us "
                      f"layer {prof.layer_overhead_s*1e6:4.0f} us: {med:5.1%} / {p90:5.1%} {'ok' if ok else 'MISS'}")
    spreads = [max(own[(r, i)][0] for i in (1,2,3)) - min(own[(r, i)][0] for i in (1,2,3)) for r in rounds]
    print(f"meets {meets} of {3*len(rounds)}; median of medians {np.median([v[0] for v in own.values()]):.1%}, "
          f"worst p90 {max(v[1] for v in own.values()):.1%}; spreads " + " ".join(f"{s*100:.1f}" for s in spreads))
    return own

if __name__ == "__main__":
    variant = sys.argv[1] if len(sys.argv) > 1 else "same"
    dtype = sys.argv[2] if len(sys.argv) > 2 else "bf16"
    if variant != "same":
        exec(open(f"variants/{variant}.py").read())
    run(dtype)
