import pickle, sys
import numpy as np
from rooflinesim.calibrate.fitting import fit_profile as fp
from rooflinesim.calibrate.fitting.plan import get_decoder_spec, DECODER_CONTEXT
from rooflinesim.ops.step_ops import get_step_ops
from rooflinesim.specs.workload import Workload
from rooflinesim.timing.measured import MeasuredTiming
for path in sys.argv[1:]:
    d = pickle.load(open(path, "rb"))
    res, plan = d["results"], d["plan"]
    prof = fp.fit_dtype("fp32", res, d["copy_bw"], d["gemv_bw"], plan, d["probe"])
    hw = fp._placeholder_hw({"fp32": prof.model_copy(update={"in_model_scale": 1.0})})
    hwc = fp._placeholder_hw({"fp32": prof.model_copy(update={"in_model_scale": 1.0, "cache_reuse": None})})
    timing, tc = MeasuredTiming.from_spec(hw), MeasuredTiming.from_spec(hwc)
    print(path, "scale", round(prof.in_model_scale, 3), "gemv", round(prof.gemv_bandwidth_bytes_per_s/1e9,1), "warm bw", round(prof.cache_reuse.warm_bandwidth_bytes_per_s/1e9,1))
    for key in res.keys_of(fp.DecoderKey):
        if "block" not in key.name: continue
        spec = get_decoder_spec(key.name)
        ops = get_step_ops(spec, Workload.in_dtype("fp32", key.batch, DECODER_CONTEXT), key.new_tokens)
        pred = sum(float(timing.for_step(ops).get_op_time(op, "fp32").time_s) for op in ops)
        cold = sum(float(tc.for_step(ops).get_op_time(op, "fp32").time_s) for op in ops)
        wb = sum(op.count*float(op.weight_bytes) for op in ops)
        m = res.timing(key).estimate_s
        print(f"  {key.name:14s} b{key.batch} W {wb/1e6:5.0f} MB warm-priced {pred*1e3:6.2f} cold {cold*1e3:6.2f} meas {m*1e3:6.2f} m/cold {m/cold:5.2f} eff bw {wb/m/1e9:5.1f} GB/s")
