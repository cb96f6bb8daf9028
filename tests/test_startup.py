"""Fast start: building the command-line parser and answering `predict` (the CLI's and the API's) import none of the
heavy libraries. Checked in a fresh interpreter, through sys.modules; the timings are benchmarks/bench_startup.py's
(never asserted here)."""

import json
import subprocess
import sys

HEAVY = ("scipy.stats", "torch", "matplotlib", "pandas")

CODE = """
import contextlib, io, json, sys
from rooflinesim.cli import build_parser, main
build_parser()
out = io.StringIO()
with contextlib.redirect_stdout(out):
    code = main(["predict", "--json"])
import rooflinesim
rooflinesim.predict("h100", "llama-3.1-8b", 8, "32k").to_dict()
print(json.dumps({"code": code, "predicted": "decode" in json.loads(out.getvalue()),
                  "heavy": [m for m in HEAVY if m in sys.modules]}))
"""


def test_parser_and_predict_import_no_heavy_library():
    out = subprocess.run([sys.executable, "-c", f"HEAVY = {HEAVY!r}\n{CODE}"], capture_output=True, text=True,
                         check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["code"] == 0 and result["predicted"]
    assert result["heavy"] == [], f"imported on the predict path: {result['heavy']}"


def test_the_check_sees_a_heavy_import():
    """The check itself: a module that imports scipy.stats is seen (so the test above can fail)."""
    code = f"HEAVY = {HEAVY!r}\nimport scipy.stats\n{CODE}"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1])["heavy"] == ["scipy.stats"]
