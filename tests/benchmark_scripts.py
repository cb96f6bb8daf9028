"""The scripts under benchmarks/ are scripts, not a package: the tests that check them import them by path."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def load_script(relative_path: str):
    """The module of the script at `relative_path` from the repository root (e.g. "benchmarks/bench_published.py"),
    executed once per call."""
    path = ROOT / relative_path
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
