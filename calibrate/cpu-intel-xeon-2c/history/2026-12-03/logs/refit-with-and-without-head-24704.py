"""Before/after the shape classes (c7d4e5c) on the same runs: each pickled run refitted three ways and priced on
reports. python ba.py DTYPE REPORT_DIR STEM... (issue 25 analysis)"""
import json, pickle, sys, glob, importlib, numpy as np
from dataclasses import replace
sys.path.insert(0, "/work/main/scripts")
import rooflinesim.calibrate.fitting.fit_profile as fp
from rooflinesim.calibrate.fitting.measurements import LinearKey, Results
from rooflinesim.specs.profiles import load_profile
from rooflinesim.calibrate.validators.validate_family import price_row
rp = importlib.import_module("reprice-holdout")
SPECS = rp.specs_by_name()
NEW = {(384, 24704)}
real_choose = fp.choose_shape_alignment

def refit(stem, dtype, variant):
    d = pickle.load(open(f"{stem}.{dtype}.pkl", "rb"))
    results, plan = d["results"], d["plan"]
    if variant == "old":
        results = Results({k: v for k, v in results.samples.items()
                           if not (isinstance(k, LinearKey) and (k.in_features, k.out_features) in NEW)})
        plan = replace(plan, linear_shapes=tuple(s for s in plan.linear_shapes if tuple(s) not in NEW))
    fp.choose_shape_alignment = (lambda lm: (0, 0.0, 0.0)) if variant in ("old", "class0") else real_choose
    prof = fp.fit_dtype(dtype, results, d["copy_bw"], d["gemv_bw"], plan, d["probe"])
    fp.choose_shape_alignment = real_choose
    hw = load_profile(f"{stem}.yaml")
    return hw.model_copy(update={"measured": hw.measured.model_copy(update={"dtypes": {**hw.measured.dtypes, dtype: prof}})})

def errors(hw, report, family):
    out = []
    for row in report["configs"]:
        spec = SPECS.get(row["model"])
        if spec is None or row.get("new_tokens", 1) != 1 or row["family"] != family:
            continue
        p = price_row(hw, hw, spec, report["dtype"], row["batch"], row["context_tokens"], "hf" if family == "hf" else "reference")
        out.append(p["predicted_s"] / row["measured_s"] - 1)
    return np.abs(np.array(out))

dtype, rdir, stems = sys.argv[1], sys.argv[2], sys.argv[3:]
report = json.load(open(glob.glob(rdir + "/*.json")[0]))
fams = sorted({r["family"] for r in report["configs"]})
for stem in stems:
    line = []
    for variant in ("old", "class0", "new"):
        hw = refit(stem, dtype, variant)
        line.append(variant + " " + ", ".join(f"{f} {100*np.median(e):.1f}/{100*np.percentile(e, 90):.1f}" for f in fams
                                              for e in [errors(hw, report, f)] if len(e)))
    print(stem.split("/")[-1], " | ".join(line), flush=True)
