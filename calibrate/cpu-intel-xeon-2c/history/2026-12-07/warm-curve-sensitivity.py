"""How the Xeon's committed hold-out report (2026-12-03 21:5x) moves under the treatments of
`scripts/try-warm-curve.py`, priced with the committed full profile's terms as written (it keeps no decoder steps, so
nothing is refitted). A sensitivity of the hold-out, not a fit: the treatment to ship is picked on the calibration's
own warm decoders (a Xeon profile that keeps its steps), never on these rows.

    python calibrate/cpu-intel-xeon-2c/history/2026-12-07/warm-curve-sensitivity.py
"""

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(ROOT))

from rooflinesim.specs.profiles import load_profile  # noqa: E402
from rooflinesim.timing.measured import MeasuredTiming  # noqa: E402

spec = importlib.util.spec_from_file_location("twc", ROOT / "scripts" / "try-warm-curve.py")
twc = importlib.util.module_from_spec(spec)
spec.loader.exec_module(twc)

report = json.loads((ROOT / "calibrate/cpu-intel-xeon-2c/cpu-intel-xeon-2c-hf-gptfast-project-validation.json").read_text())
hw = load_profile(str(ROOT / "calibrate/cpu-intel-xeon-2c/cpu-intel-xeon-2c.yaml"))
reprice = twc._load_reprice()
specs = reprice.specs_by_name()
MeasuredTiming._cache_warmth = twc._treated_warmth
for dtype in ("bf16", "fp32"):
    for form, grid in (("shift", (1.0, 1.5, 2.0, 3.0)), ("scale", (0.5, 0.0))):
        for value in grid:
            twc._TREATMENT.update(shift=1.0, scale=1.0)
            twc._TREATMENT[form] = value
            families, models = {}, {}
            for row in report["by_dtype"][dtype]["configs"]:
                model = specs.get(row["model"])
                if model is None or row.get("new_tokens", 1) != 1:
                    continue
                impl = reprice.IMPLEMENTATION_OF_FAMILY.get(row["family"])
                priced = reprice.price_row(hw, hw, model, dtype, row["batch"], row["context_tokens"], impl)
                error = priced["predicted_s"] / row["measured_s"] - 1
                families.setdefault(row["family"], []).append(error)
                models.setdefault(row["model"], []).append(error)
            print(dtype, f"{form} {value:g}",
                  " | ".join(f"{f} {np.median(np.abs(e)):.1%}/{np.quantile(np.abs(e), .9):.1%}" for f, e in families.items()),
                  "||", " ".join(f"{m}:{np.median(e):+.0%}" for m, e in models.items()
                                 if m.startswith(("hf", "gptfast-deep"))), flush=True)
