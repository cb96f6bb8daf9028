# per-op priced times of one hold-out step at two batches (issue 25 probe)
import sys
from rooflinesim.specs.profiles import load_profile
from rooflinesim.calibrate.external.hf_holdout import get_hf_hold_out, make_config, spec_from_config
from rooflinesim.scenario.builder import build_scenario
from rooflinesim.step import get_step_cost
hw = load_profile(sys.argv[1]); name = sys.argv[2]; ctx = int(sys.argv[3]); batches = [int(b) for b in sys.argv[4].split(",")]
spec = spec_from_config(make_config(get_hf_hold_out(name)))
res = {}
for b in batches:
    sc = build_scenario(hw, spec, b, ctx, weight_dtype="fp32", kv_dtype="fp32", activation_dtype="fp32", speculative=False,
                        allow_long_context=True, engine="ideal", implementation="hf")
    st = get_step_cost(sc.hardware, spec, sc.workload, 1, sc.timing, ctx, b)
    res[b] = {op.name + ("" if op.kind != "linear" else f" {op.dims['k']}x{op.dims['n']}"): float(t.time_s) for op, t in zip(st.ops, st.expected)}
    res[b]["(step overhead)"] = float(st.step_overhead_s); res[b]["TOTAL"] = float(st.step_time_s)
keys = list(res[batches[0]])
for k in keys:
    print(f"{k:32s} " + " ".join(f"{res[b].get(k, 0)*1e3:8.3f}" for b in batches))
