"""Trial (no measuring): attention left out of the in-model scale, as the sampler is. Each profile's whole-decoder
terms refitted from its kept steps with and without the change, then the report's measured steps priced.

    python head-outside-scale-trial.py REPORT.json PROFILE.yaml [PROFILE.yaml ...]"""
import subprocess
import sys

CODE = """
import runpy, sys
import rooflinesim.timing.measured as measured
from rooflinesim.timing.base import is_outside_in_model_scale
if sys.argv[1] == "attention-out":
    measured.is_outside_in_model_scale = lambda op: op.kind == "attention" or is_outside_in_model_scale(op)
sys.argv = ["reprice-holdout.py", "--refit", "--per-model", *sys.argv[2:]]
runpy.run_path("scripts/reprice-holdout.py", run_name="__main__")
"""
for mode in ("plain", "attention-out"):
    print(f"== {mode}", flush=True)
    out = subprocess.run([sys.executable, "-c", CODE, mode, *sys.argv[1:]], capture_output=True, text=True).stdout
    for line in out.splitlines():
        if "refitted" in line or ": hf" in line or line.startswith("    ") and "signed" in line:
            line = ", ".join(p for p in line.split(", ") if "as reference" not in p and "(n " not in p or "%" in p and "as reference" not in p)
            print(line.replace("hf (as reference)", "HF-asref"), flush=True)
