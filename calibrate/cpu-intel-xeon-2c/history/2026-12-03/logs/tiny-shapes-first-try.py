"""Experiment: time the tiny decoders' linear shapes as the quick plan times its shapes, add them to a pickled bf16
quick run's results, refit, write the profile (issue 25, bf16 on the Xeon)."""
import pickle, sys
from dataclasses import replace
from rooflinesim.calibrate.measure.timers import select_device, Timer
from rooflinesim.calibrate.measure.benchmarks.base import BenchContext
from rooflinesim.calibrate.measure.bench import JOB_FAMILIES
from rooflinesim.calibrate.fitting.budget import get_level_plan
from rooflinesim.calibrate.fitting.plan import WeightShape, get_decoder_spec, get_linear_weight_shapes
import rooflinesim.calibrate.fitting.fit_profile as fp
from rooflinesim.specs.profiles import load_profile, write_profile
src, out, dtype = sys.argv[1], sys.argv[2], sys.argv[3]
shapes = sorted(get_linear_weight_shapes(get_decoder_spec("overhead-2l")))
print("tiny shapes", shapes)
dev = select_device("cpu")
d = pickle.load(open(src + f".{dtype}.pkl", "rb"))
plan = replace(d["plan"], linear_shapes=d["plan"].linear_shapes + tuple(WeightShape(k, n) for k, n in shapes))
ctx = BenchContext(dev, dtype, replace(plan, linear_shapes=tuple(WeightShape(k, n) for k, n in shapes)), Timer(dev))
for job in JOB_FAMILIES[0](ctx):
    d["results"].add(job.key, job.run())
prof = fp.fit_dtype(dtype, d["results"], d["copy_bw"], d["gemv_bw"], plan, d["probe"])
hw = load_profile(src + ".yaml")
hw = hw.model_copy(update={"measured": hw.measured.model_copy(update={"dtypes": {**hw.measured.dtypes, dtype: prof}})})
write_profile(hw, out)
print(out, "scale", prof.in_model_scale, "layer", prof.layer_overhead_s, "inlayer", prof.in_model_layer_overhead_s, "lin c", prof.linear_overhead_s, prof.residuals.get("decoder_fit_median_abs_rel"))
