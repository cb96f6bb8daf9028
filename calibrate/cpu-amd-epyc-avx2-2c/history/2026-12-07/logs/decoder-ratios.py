"""Per kept decoder step: measured time / the sum of its per-op prices at scale 1 (cache reuse included), and the
step's warmth, for each profile given: which decoders pull the in-model scale where (no measuring)."""
import sys
from collections import defaultdict

import numpy as np

from rooflinesim.calibrate.fitting.fit_decoders import _placeholder_hw
from rooflinesim.calibrate.fitting.plan import DECODER_CONTEXT, OVERHEAD_MODELS, get_decoder_spec
from rooflinesim.ops.step_ops import get_step_ops
from rooflinesim.specs.profiles import load_profile
from rooflinesim.specs.workload import Workload
from rooflinesim.timing.measured import MeasuredTiming

for path in sys.argv[1:]:
    hw = load_profile(path)
    for dtype, prof in hw.measured.dtypes.items():
        timing = MeasuredTiming.from_spec(_placeholder_hw({dtype: prof.model_copy(update={"in_model_scale": 1.0})}))
        by_model = defaultdict(list)
        for s in prof.decoder_steps:
            if s.model in OVERHEAD_MODELS:
                continue
            spec = get_decoder_spec(s.model)
            ops = get_step_ops(spec, Workload.in_dtype(dtype, s.batch, DECODER_CONTEXT), s.new_tokens)
            t = timing.for_step(ops)
            per_op = sum(float(t.get_op_time(op, dtype).time_s) for op in ops)
            by_model[s.model].append((s.batch, s.new_tokens, s.time_s / per_op, float(t.get_cache_warmth(dtype)),
                                      (s.time_s - per_op) / spec.num_layers * 1e6))
        print(f"{path} {dtype}: scale {prof.in_model_scale:.3f}, in-model layer {prof.in_model_layer_overhead_s*1e6:.0f} us")
        for model, rows in by_model.items():
            print(f"    {model:14s} warmth {rows[0][3]:.2f}  measured / per-op: "
                  + ", ".join(f"b{b}q{q} {r:.2f}" for b, q, r, _, _ in rows)
                  + f"  (excess per layer {np.median([e for *_, e in rows]):.0f} us)")
