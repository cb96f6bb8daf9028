"""The notebooks run top to bottom (nbclient, kernel python3, cwd notebooks/), are stored *with* their outputs (a
reader on a code-hosting page sees the charts; `scripts/execute-notebooks.py` refreshes them), and stay thin: they
import the package as installed, never by editing sys.path."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
pytest.importorskip("matplotlib")

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK_DIR = ROOT / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
CELL_TIMEOUT_S = 120
EXPECTED = {"01_roofline_basics", "02_when_speculation_stops_paying", "03_acceptance_monte_carlo", "04_calibration",
            "05_speculation_under_load"}


@pytest.fixture(scope="module")
def python3_kernel(tmp_path_factory):
    """A 'python3' kernelspec that runs *this* interpreter, first on the Jupyter path.

    nbclient resolves 'python3' through jupyter_client, which prefers a user- or system-wide kernelspec over
    ipykernel's built-in one; such a spec may point at another Python without rooflinesim. This one cannot.
    """
    root = tmp_path_factory.mktemp("jupyter")
    spec_dir = root / "kernels" / "python3"
    spec_dir.mkdir(parents=True)
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "MPLBACKEND": "module://matplotlib_inline.backend_inline", "PYDEVD_DISABLE_FILE_VALIDATION": "1"}
    (spec_dir / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (rooflinesim tests)", "language": "python", "env": env,
    }))
    old = os.environ.get("JUPYTER_PATH")
    os.environ["JUPYTER_PATH"] = os.pathsep.join(filter(None, [str(root), old]))
    yield "python3"
    if old is None:
        os.environ.pop("JUPYTER_PATH", None)
    else:
        os.environ["JUPYTER_PATH"] = old


def test_the_notebooks_exist():
    assert {p.stem for p in NOTEBOOKS} == EXPECTED


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_stored_executed_and_thin(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata.get("kernelspec", {}).get("name") == "python3"
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    for cell in code:
        assert "sys.path" not in cell.source, f"{path.name}: edits sys.path"
        assert not [out for out in cell.outputs if out.output_type == "error"], f"{path.name}: stored with an error"
    counts = [cell.execution_count for cell in code]
    assert None not in counts and counts == sorted(counts), f"{path.name}: not stored as run top to bottom"
    assert any("image/png" in out.get("data", {}) for cell in code for out in cell.outputs), \
        f"{path.name}: stored without its charts (run scripts/execute-notebooks.py)"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs(path, python3_kernel):
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        nb, timeout=CELL_TIMEOUT_S, kernel_name=python3_kernel, resources={"metadata": {"path": str(NOTEBOOK_DIR)}},
    )
    start = time.perf_counter()
    client.execute()
    elapsed = time.perf_counter() - start
    images = sum("image/png" in out.get("data", {}) for cell in nb.cells if cell.cell_type == "code"
                 for out in cell.outputs)
    assert images >= 1, f"{path.name} displayed no figure"
    errors = [out for cell in nb.cells if cell.cell_type == "code" for out in cell.outputs
              if out.output_type == "error"]
    assert not errors
    print(f"{path.name}: {elapsed:.1f} s, {images} figures")
