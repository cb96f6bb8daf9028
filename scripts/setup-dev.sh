#!/usr/bin/env bash
# Development set-up: the package (editable) with everything the tests need.
# torch is only used by calibration. A bare `pip install torch` pulls a multi-GB CUDA build from PyPI, so where no
# torch >= 2.2 is installed we install the CPU build pinned here (on these machines it comes from local disk).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if ! "$PYTHON" - <<'PY'
import sys
try:
    import torch
except ImportError:
    sys.exit(1)
major, minor = (int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
sys.exit(0 if (major, minor) >= (2, 2) else 1)
PY
then
    echo "setup-dev: no torch >= 2.2 found; installing the CPU build torch==2.13.0"
    "$PYTHON" -m pip install --quiet torch==2.13.0
fi
# tests/test_packaging.py builds a wheel offline (--no-build-isolation), so the build backend of pyproject.toml must be
# installed too: a venv on Python >= 3.12 starts without setuptools
# the hf extra (transformers) is the Hugging Face hold-out of `validate --family hf`; its tests skip without it
"$PYTHON" -m pip install --quiet -e ".[dev,hf]" "setuptools>=68" wheel
echo "setup-dev: $("$PYTHON" -c 'import torch, rooflinesim; print("torch", torch.__version__, "| rooflinesim", rooflinesim.__version__)')"
