"""Execute every notebook under notebooks/ top to bottom and store it with its outputs (charts included), so a reader
on a code-hosting page sees them without running anything. Run after changing the model:

    python3 scripts/execute-notebooks.py [notebooks/02_when_speculation_stops_paying.ipynb ...]

Uses this interpreter's ipykernel (like tests/test_notebooks.py); each notebook is written atomically.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbclient
import nbformat

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from rooflinesim.fileio import write_text_atomic  # noqa: E402


def execute(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}}).execute()
    errors = [out for cell in nb.cells if cell.cell_type == "code" for out in cell.outputs
              if out.output_type == "error"]
    if errors:
        raise SystemExit(f"{path}: {errors[0].ename}: {errors[0].evalue}")
    for cell in nb.cells:  # no machine-specific noise in the stored file
        cell.metadata.pop("execution", None)
    write_text_atomic(path, nbformat.writes(nb) + "\n")
    print(f"executed {path.relative_to(ROOT)}")


if __name__ == "__main__":
    paths = [Path(p).resolve() for p in sys.argv[1:]] or sorted((ROOT / "notebooks").glob("*.ipynb"))
    for p in paths:
        execute(p)
