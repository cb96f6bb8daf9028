"""Sensitivity (no measurement): the Xeon's committed full and quick profiles with a spread put on their cache-reuse
curves (`speedup_sigma`, the same value at every point below the pool), repriced on the committed reports'
measured steps: the HF, gpt-fast-style and project families' error and the share inside the 90 % intervals.

    python curve-spread-sensitivity.py   (from the repository root)"""
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path.cwd()
XEON = ROOT / "calibrate/cpu-intel-xeon-2c"
CASES = [("cpu-intel-xeon-2c.yaml", "cpu-intel-xeon-2c-hf-gptfast-project-validation.json"),
         ("cpu-intel-xeon-2c-quick.yaml", "cpu-intel-xeon-2c-quick-hf-gptfast-project-validation.json")]
with tempfile.TemporaryDirectory() as tmp:
    for profile, report in CASES:
        full = json.loads((XEON / report).read_text())
        for dtype in ("fp32", "bf16"):
            sub = Path(tmp) / f"{dtype}-{report}"
            sub.write_text(json.dumps(full["by_dtype"][dtype]))
            paths = []
            for sigma in (0.0, 0.05, 0.08, 0.12):
                spec = yaml.safe_load((XEON / profile).read_text())
                for prof in spec["measured"]["dtypes"].values():
                    curve = prof["cache_reuse"]
                    n = len(curve["speedup"])
                    curve["speedup_sigma"] = [sigma] * (n - 1) + [0.0]
                path = Path(tmp) / f"sigma-{sigma:.2f}-{profile}"
                path.write_text(yaml.safe_dump(spec, sort_keys=False))
                paths.append(str(path))
            print(f"== {profile} on {report}, {dtype}", flush=True)
            out = subprocess.run([sys.executable, "scripts/reprice-holdout.py", str(sub), *paths],
                                 capture_output=True, text=True, check=True).stdout
            for line in out.splitlines()[1:]:
                print(line.replace(tmp + "/", ""), flush=True)
