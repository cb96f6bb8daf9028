"""Counterfactual for a799012: refit a pickled quick run (old plan) with and without the tiny decoders' shapes timed
now at OVERHEAD_M_GRID (exact-only tables), write both profiles."""
import pickle, sys
from dataclasses import replace
from rooflinesim.calibrate.measure.timers import select_device, Timer
from rooflinesim.calibrate.measure.benchmarks.base import BenchContext
from rooflinesim.calibrate.measure.bench import JOB_FAMILIES
from rooflinesim.calibrate.fitting.plan import OVERHEAD_LINEAR_SHAPES
import rooflinesim.calibrate.fitting.fit_profile as fp
from rooflinesim.specs.profiles import load_profile, write_profile
src, dtype = sys.argv[1], sys.argv[2]
d = pickle.load(open(src + f".{dtype}.pkl", "rb"))
plan = replace(d["plan"], overhead_shapes=())
hw = load_profile(src + ".yaml")
def write(prof, out):
    write_profile(hw.model_copy(update={"measured": hw.measured.model_copy(update={"dtypes": {**hw.measured.dtypes, dtype: prof}})}), out)
    print(out, "scale %.3f layer %.1f us inlayer %.0f us" % (prof.in_model_scale, prof.layer_overhead_s*1e6, prof.in_model_layer_overhead_s*1e6))
write(fp.fit_dtype(dtype, d["results"], d["copy_bw"], d["gemv_bw"], plan, d["probe"]), src + "-old.yaml")
dev = select_device("cpu")
ctx = BenchContext(dev, dtype, replace(plan, linear_shapes=(), served_shapes=(), overhead_shapes=OVERHEAD_LINEAR_SHAPES), Timer(dev))
for job in JOB_FAMILIES[0](ctx):
    d["results"].add(job.key, job.run())
write(fp.fit_dtype(dtype, d["results"], d["copy_bw"], d["gemv_bw"], replace(plan, overhead_shapes=OVERHEAD_LINEAR_SHAPES), d["probe"]), src + "-tiny.yaml")
