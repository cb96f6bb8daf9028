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
# `rooflinesim explore`'s browser tests (tests/test_explore_browser.py) drive a system Chromium through its
# chromedriver; they come from the system package manager (Debian: chromium, chromium-driver), never downloaded at test
# time. Without root or apt-get this is skipped and so are those tests (they say why).
if ! command -v chromedriver >/dev/null 2>&1; then
    if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" -eq 0 ]; then
        echo "setup-dev: installing chromium and chromium-driver with apt-get (explore's browser tests)"
        if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
                chromium chromium-driver; } >/dev/null 2>&1; then
            echo "setup-dev: could not install chromium with apt-get; explore's browser tests will skip"
        fi
    else
        echo "setup-dev: no chromedriver, and no apt-get as root to install it: explore's browser tests will skip"
    fi
fi
echo "setup-dev: $("$PYTHON" -c 'import torch, rooflinesim; print("torch", torch.__version__, "| rooflinesim", rooflinesim.__version__)')"
