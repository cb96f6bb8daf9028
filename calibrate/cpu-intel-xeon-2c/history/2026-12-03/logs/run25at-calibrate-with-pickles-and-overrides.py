"""`rooflinesim calibrate` with the raw Results pickled beside the profile; BLOCKS=a,b overrides the quick rung's
mid-size decoders (issue 25 experiment)."""
import os, pickle, sys
import rooflinesim.calibrate.measure.bench as bench
import rooflinesim.calibrate.fitting.budget as budget
from rooflinesim.cli import main
if os.environ.get("BLOCKS"):
    budget.STEADY_BLOCK_MODELS = tuple(os.environ["BLOCKS"].split(","))
if os.environ.get("OLDCACHE"):  # the cache-reuse points as before: three passes
    import dataclasses
    _glp = budget.get_level_plan
    budget.get_level_plan = lambda *a, **k: dataclasses.replace(_glp(*a, **k), cache_min_time_s=0.0)
orig = bench.fit_dtype
out = sys.argv[1]
def fit_dtype(d, results, copy_bw, gemv_bw, plan, probe):
    with open(out + f".{d}.pkl", "wb") as f:
        pickle.dump(dict(results=results, copy_bw=copy_bw, gemv_bw=gemv_bw, plan=plan, probe=probe), f)
    return orig(d, results, copy_bw, gemv_bw, plan, probe)
bench.fit_dtype = fit_dtype
sys.exit(main(sys.argv[2:]))
