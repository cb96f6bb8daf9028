"""Refit pickled quick runs without the in-model per-layer term (the scale alone) and write them as profiles:
python refit_nolayer.py DIR/bN (issue 25 counterfactual)"""
import pickle, sys
import rooflinesim.calibrate.fitting.fit_profile as fp
from rooflinesim.specs.profiles import load_profile, write_profile
for stem in sys.argv[1:]:
    dtype = "bf16" if "/b" in stem else "fp32"
    d = pickle.load(open(f"{stem}.{dtype}.pkl", "rb"))
    for variant in ("same", "nolayer"):
        if variant == "nolayer":
            fp.MIN_IN_MODEL_LAYER_MODELS = 99
        prof = fp.fit_dtype(dtype, d["results"], d["copy_bw"], d["gemv_bw"], d["plan"], d["probe"])
        hw = load_profile(f"{stem}.yaml")
        measured = hw.measured.model_copy(update={"dtypes": {**hw.measured.dtypes, dtype: prof}})
        write_profile(hw.model_copy(update={"measured": measured}), f"{stem}-{variant}.yaml")
        print(stem, variant, round(prof.in_model_scale, 3), round(prof.in_model_layer_overhead_s * 1e3, 3), "ms/layer")
    fp.MIN_IN_MODEL_LAYER_MODELS = 2
