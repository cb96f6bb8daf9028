"""Trial (no measuring): the in-model scale split by step tokens, one for single-token steps (GEMV linears) and one
for steps of several tokens, fitted on the decoder steps a profile keeps; the report's measured steps priced with the
scale of their kind. Prints the plain refit beside it.

    python split-scale-trial.py REPORT.json PROFILE.yaml"""
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, "scripts")
from rooflinesim.calibrate.fitting.fit import fit_affine
from rooflinesim.calibrate.fitting.fit_decoders import (IN_MODEL_SCALE_BOUNDS, MIN_COLD_BLOCK_ROWS, WARM_BLOCK,
                                                        _placeholder_hw, refit_overheads)
from rooflinesim.calibrate.fitting.plan import DECODER_CONTEXT, OVERHEAD_MODELS, get_decoder_spec
from rooflinesim.calibrate.validators.validate_family import price_row
from rooflinesim.ops.step_ops import get_step_ops
from rooflinesim.specs.profiles import load_profile
from rooflinesim.specs.workload import Workload
from rooflinesim.timing.measured import MeasuredTiming

import importlib.util
spec_ = importlib.util.spec_from_file_location("reprice", "scripts/reprice-holdout.py")
reprice = importlib.util.module_from_spec(spec_); spec_.loader.exec_module(reprice)

report = json.loads(Path(sys.argv[1]).read_text())
hw = load_profile(sys.argv[2])
dtype = report["dtype"]
prof = refit_overheads(dtype, hw.measured.dtypes[dtype])
timing = MeasuredTiming.from_spec(_placeholder_hw({dtype: prof.model_copy(update={"in_model_scale": 1.0})}))
rows = []
for s in prof.decoder_steps:
    spec = get_decoder_spec(s.model)
    ops = get_step_ops(spec, Workload.in_dtype(dtype, s.batch, DECODER_CONTEXT), s.new_tokens)
    t = timing.for_step(ops)
    per_op = sum(float(t.get_op_time(op, dtype).time_s) for op in ops)
    warmth = float(t.get_cache_warmth(dtype))
    block = s.model not in OVERHEAD_MODELS
    rows.append(dict(per_op=per_op, layers=spec.num_layers, measured=s.time_s, block=block,
                     warm=block and warmth >= WARM_BLOCK, cold=(1 - warmth) if block else 0.0,
                     multi=s.batch * s.new_tokens > 1))
if sum(r["block"] and not r["warm"] for r in rows) >= MIN_COLD_BLOCK_ROWS:
    rows = [r for r in rows if not r["warm"]]
per_op = np.array([r["per_op"] for r in rows]); multi = np.array([r["multi"] for r in rows])
layers = np.array([r["layers"] for r in rows], float); cold = np.array([r["cold"] for r in rows])
measured = np.array([r["measured"] for r in rows])
features = {"one": per_op * ~multi, "multi": per_op * multi, "layers": layers}
bounds = {"one": IN_MODEL_SCALE_BOUNDS, "multi": IN_MODEL_SCALE_BOUNDS}
use_block = prof.in_model_layer_overhead_s > 0
if use_block:
    features["block_layers"] = layers * cold
    bounds["block_layers"] = (0.0, float(min(p / n for p, n, c in zip(per_op, layers, cold) if c > 1 - WARM_BLOCK)))
fit = fit_affine(features, measured, bounds=bounds)
c = fit.coefficients
print(f"plain refit: scale {prof.in_model_scale:.3f}, layer {prof.layer_overhead_s*1e6:.0f} us, in-model layer "
      f"{prof.in_model_layer_overhead_s*1e6:.0f} us, step {prof.step_overhead_s*1e6:.0f} us")
print(f"split: one-token {c['one']:.3f}, multi-token {c['multi']:.3f}, layer {c['layers']*1e6:.0f} us, in-model layer "
      f"{c.get('block_layers', 0)*1e6:.0f} us, step {fit.overhead_s*1e6:.0f} us")

def with_terms(scale):
    p = prof.model_copy(update={"in_model_scale": scale, "layer_overhead_s": c["layers"], "step_overhead_s": fit.overhead_s,
                                "in_model_layer_overhead_s": c.get("block_layers", 0.0)})
    return hw.model_copy(update={"measured": hw.measured.model_copy(update={"dtypes": {**hw.measured.dtypes, dtype: p}})})

plain = hw.model_copy(update={"measured": hw.measured.model_copy(update={"dtypes": {**hw.measured.dtypes, dtype: prof}})})
one, many = with_terms(c["one"]), with_terms(c["multi"])
specs = reprice.specs_by_name()
for name, pick in (("plain", lambda b: plain), ("split", lambda b: one if b == 1 else many)):
    errors = {}
    for row in report["configs"]:
        spec = specs.get(row["model"])
        if spec is None or row.get("new_tokens", 1) != 1:
            continue
        h = pick(row["batch"])
        impl = reprice.IMPLEMENTATION_OF_FAMILY.get(row["family"])
        priced = price_row(h, h, spec, dtype, row["batch"], row["context_tokens"], impl)
        errors.setdefault(row["family"], {}).setdefault(row["batch"], []).append(priced["predicted_s"] / row["measured_s"] - 1)
    print(name + ": " + "; ".join(
        f"{f} {np.median(np.abs(sum(b.values(), []))):.1%} / {np.quantile(np.abs(sum(b.values(), [])), 0.9):.1%} "
        f"(signed by batch " + ", ".join(f"{k}: {np.median(v):+.0%}" for k, v in sorted(b.items())) + ")"
        for f, b in errors.items()))
