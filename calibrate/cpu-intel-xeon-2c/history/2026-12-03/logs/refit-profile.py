"""Refit a pickled quick run with a variant and write it as a profile: python mkprof.py I VARIANT OUT.yaml"""
import sys, numpy as np
import rooflinesim.calibrate.fitting.fit_profile as fp
from rooflinesim.specs.profiles import load_profile
from refit import load
i, variant, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
d = load(i, mean_cache=variant != "p25")
prof = fp.fit_dtype("fp32", d["results"], d["copy_bw"], d["gemv_bw"], d["plan"], d["probe"])
hw = load_profile(f"q{i}.yaml")
measured = hw.measured.model_copy(update={"dtypes": {**hw.measured.dtypes, "fp32": prof}})
hw = hw.model_copy(update={"measured": measured})
from rooflinesim.specs.profiles import write_profile
write_profile(hw, out)
print(out, prof.in_model_scale, prof.in_model_layer_overhead_s)
