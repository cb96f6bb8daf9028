"""The warm decoders of the Zen 3 VM's three profiles that keep their steps (2026-12-07 05:21 and 05:53 fp32, 05:58
bf16), priced under a few treatments of `scripts/try-warm-curve.py` with the terms refitted once under the plain
curve: the median signed error of the steps the plain curve prices warm (priced / measured - 1).

    python calibrate/cpu-amd-epyc-avx2-2c/history/2026-12-07/logs/decoder-treatments.py
"""

import importlib.util
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[5]
spec = importlib.util.spec_from_file_location("twc", ROOT / "scripts" / "try-warm-curve.py")
twc = importlib.util.module_from_spec(spec)
spec.loader.exec_module(twc)
from rooflinesim.specs.profiles import load_profile  # noqa: E402

HERE = Path(__file__).resolve().parents[1]
for name, dtype in (("0521-steps", "fp32"), ("0553-steps-r2", "fp32"), ("0558-steps-bf16", "bf16")):
    hw = load_profile(str(HERE / f"cpu-amd-epyc-avx2-2c-{name}.yaml"))
    warm, fitted = twc.get_warm_steps(hw, dtype), twc.refit(hw, dtype)
    line = []
    for label, treatment in (("plain", {}), ("serial", {"serial": True}), ("shift 1.5", {"shift": 1.5}),
                             ("scale 0.5", {"scale": 0.5}), ("cold (scale 0)", {"scale": 0.0})):
        twc.use_treatment(**treatment)
        errors = [twc.price_decoder_step(fitted, s.model, dtype, s.batch, s.new_tokens) / s.time_s - 1 for s in warm]
        line.append(f"{label} {np.median(errors):+.1%}")
    twc.use_plain()
    print(f"{name} ({dtype}, warm: {', '.join(sorted({s.model for s in warm}))}, "
          f"residual {hw.measured.dtypes[dtype].residuals['decoder_warm_rows_median_rel']:+.3f}): " + ", ".join(line))
