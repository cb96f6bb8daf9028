"""How the Xeon's committed hold-out reports (2026-12-03 21:51 full, 21:53 quick) move under the treatments of
`scripts/try-warm-curve.py`, priced with their committed profiles' terms as written (they keep no decoder steps, so
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

spec = importlib.util.spec_from_file_location("twc", ROOT / "scripts" / "try-warm-curve.py")
twc = importlib.util.module_from_spec(spec)
spec.loader.exec_module(twc)

for name in ("cpu-intel-xeon-2c", "cpu-intel-xeon-2c-quick"):
    report = json.loads((ROOT / f"calibrate/cpu-intel-xeon-2c/{name}-hf-gptfast-project-validation.json").read_text())
    hw = load_profile(str(ROOT / f"calibrate/cpu-intel-xeon-2c/{name}.yaml"))
    reprice = twc._load_reprice()
    specs = reprice.specs_by_name()
    for dtype in ("bf16", "fp32"):
        for form, grid in (("shift", (1.0, 1.5, 2.0, 3.0)), ("scale", (0.5, 0.0)), ("serial", (True,))):
            for value in grid:
                twc.use_treatment(**{form: value})
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
                label = "serial" if form == "serial" else f"{form} {value:g}"
                print(name, dtype, label, " | ".join(
                    f"{f} {np.median(np.abs(e)):.1%}/{np.quantile(np.abs(e), .9):.1%}" for f, e in families.items()),
                    "||", " ".join(f"{m}:{np.median(e):+.0%}" for m, e in models.items()
                                   if m.startswith(("hf", "gptfast-deep"))), flush=True)
    twc.use_plain()
