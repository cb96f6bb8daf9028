"""Run `rooflinesim calibrate` with the raw Results pickled beside the profile (issue 25 analysis)."""
import pickle, sys
import rooflinesim.calibrate.measure.bench as bench
from rooflinesim.cli import main

orig = bench.fit_dtype
out = sys.argv[1]
def fit_dtype(d, results, copy_bw, gemv_bw, plan, probe):
    with open(out + f".{d}.pkl", "wb") as f:
        pickle.dump(dict(results=results, copy_bw=copy_bw, gemv_bw=gemv_bw, plan=plan, probe=probe), f)
    return orig(d, results, copy_bw, gemv_bw, plan, probe)
bench.fit_dtype = fit_dtype
sys.exit(main(sys.argv[2:]))
